//! The background cleaner's pass state, kept under `meta` between its parts.

use std::collections::{BTreeSet, HashMap};

/// The background cleaner's pass, split around `meta` (see [`Engine::background_clean`]).
#[derive(Debug, Default)]
pub(crate) struct BackgroundPass {
    /// Victims being read without `meta`: no segment here is reused meanwhile.
    pub reading: BTreeSet<usize>,
    /// Victims' bytes read without `meta`. A segment that is not free holds only written logs,
    /// which never change, so the bytes stay right until the segment is reused.
    pub read: HashMap<usize, Vec<u8>>,
    /// The pass runs for the background thread: device flushes and superblocks are left to
    /// after `meta` is released (superblocks are sealed, flushes noted in `flush`).
    pub defer_io: bool,
    /// The pass left a flush to do.
    pub flush: bool,
    /// The blocks neither free, live nor pinned after the last pass that gained nothing: passes
    /// wait until more than these are dead, since from the same dead blocks the next one would
    /// gain nothing either.
    futile_at: Option<u64>,
}

impl BackgroundPass {
    /// A pass that gained nothing ended with `dead` blocks dead.
    pub fn gained_nothing(&mut self, dead: u64) {
        self.futile_at = Some(dead);
    }

    /// Whether a pass may run with `dead` blocks dead: not while no more have died since the
    /// last pass that gained nothing (one that runs clears it).
    pub fn may_run(&mut self, dead: u64) -> bool {
        if self.futile_at.is_some_and(|at| dead <= at) {
            return false;
        }
        self.futile_at = None;
        true
    }
}
