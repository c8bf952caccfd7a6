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
}
