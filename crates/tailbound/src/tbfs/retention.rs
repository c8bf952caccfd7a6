//! Retention: the retained checkpoints ([`Kept`]), the pinned blocks ([`Pin`]) and the state
//! that ties them together ([`Life`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::tbfs::format::{self, *};
use crate::tbfs::map::BlockMap;

/// A retained checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    pub time_ns: i64,
    pub root: u64,
    pub snapshot: bool,
    pub name: Option<String>,
}

/// A pinned block: the checkpoints that may reference it, and the newest retained one among
/// them (`anchor`), under which it is indexed so releasing a checkpoint revisits only its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pin {
    pub born: u64,
    pub died: u64,
    pub anchor: u64,
}

/// Retention state, kept under the `meta` lock.
#[derive(Debug, Default)]
pub(crate) struct Life {
    /// Retained checkpoints by number (the newest is always here).
    pub list: BTreeMap<u64, Kept>,
    /// Checkpoints open [`Snapshot`] views read, with their view counts.
    pub holds: BTreeMap<u64, usize>,
    pub pinned: BTreeMap<u64, Pin>,
    pub by_anchor: BTreeSet<(u64, u64)>,
    /// Per segment: the checkpoint number that was next when the writer entered it.
    pub seg_born: Vec<u64>,
    /// Per segment: time of its newest log.
    pub seg_written: Vec<i64>,
    /// Segments the writer entered since the last checkpoint, and where: blocks from there on
    /// belong to no checkpoint yet.
    pub since_ckpt: Vec<(usize, u64)>,
    pub usage_dirty: BTreeSet<u64>,
    /// Pinned-table pages to rewrite: page `j` of segment `s` is `s·k + j` (`k` =
    /// `pinned_pages_per_segment`) and holds the pins of the segment's blocks `170·j ..`.
    pub pinned_dirty: BTreeSet<u64>,
    pub snap_dirty: bool,
    pub tables: [BlockMap; TABLES],
    pub protection: Duration,
    /// The pool is short of space: plain checkpoints are not protected.
    pub pressure: bool,
    /// While the cleaner writes its copies: the age (newest log time) of the segments they come
    /// from, given to the segments they go to.
    pub copy_age: Option<i64>,
    pub pinned_pages_per_segment: u64,
}

impl Life {
    pub fn new(segment_count: usize, segment_blocks: u64, protection: Duration) -> Life {
        Life {
            seg_born: vec![0; segment_count],
            seg_written: vec![0; segment_count],
            protection,
            pinned_pages_per_segment: segment_blocks
                .div_ceil(table_entries_per_page(TABLE_PINNED) as u64),
            ..Life::default()
        }
    }

    /// The newest retained checkpoint in `born ..= died`.
    pub fn anchor(&self, born: u64, died: u64) -> Option<u64> {
        if born > died {
            return None;
        }
        let a = self.list.range(born..=died).next_back().map(|(&c, _)| c);
        let b = self.holds.range(born..=died).next_back().map(|(&c, _)| c);
        a.max(b)
    }

    /// Whether no retained checkpoint but possibly `newest` can reference a block first
    /// referenced by checkpoint `born`, and `newest` is kept by nothing (no snapshot, no open
    /// view, past the protection period): the next checkpoint releases it.
    pub fn only_newest_unkept(&self, born: u64, newest: u64, now: i64) -> bool {
        if born > newest {
            return true;
        }
        // The protection period as configured: a checkpoint released only under pressure may
        // be protected again once the pressure is over.
        let cutoff = now.saturating_sub(self.protection.as_nanos().min(i64::MAX as u128) as i64);
        self.holds.range(born..=newest).next().is_none()
            && self
                .list
                .range(born..=newest)
                .all(|(&c, k)| c == newest && !k.snapshot && k.time_ns < cutoff)
    }

    pub(crate) fn protection_cutoff(&self, now: i64) -> i64 {
        if self.pressure {
            i64::MAX
        } else {
            now.saturating_sub(self.protection.as_nanos().min(i64::MAX as u128) as i64)
        }
    }

    /// The oldest plain checkpoint kept because it is younger than the protection period (or
    /// `newest` if there is none older).
    pub fn oldest_protected(&self, now: i64, newest: u64) -> u64 {
        let cutoff = self.protection_cutoff(now);
        self.list
            .iter()
            .find(|(_, k)| !k.snapshot && k.time_ns >= cutoff)
            .map_or(newest, |(&c, _)| c)
    }

    /// Blocks a retained checkpoint pins, each with the only retained checkpoint that references
    /// it (`None` if several do).
    pub(crate) fn sole_owner(&self, p: &Pin) -> Option<u64> {
        let mut it = self
            .list
            .range(p.born..=p.died)
            .map(|(&c, _)| c)
            .chain(self.holds.range(p.born..=p.died).map(|(&c, _)| c));
        let first = it.next()?;
        match it.next() {
            Some(c) if c != first => None,
            _ => Some(first),
        }
    }

    pub(crate) fn snapshot_in(&self, born: u64, died: u64) -> bool {
        self.list.range(born..=died).any(|(_, k)| k.snapshot)
            || self.holds.range(born..=died).next().is_some()
    }
}

impl Life {
    /// The pinned-table page that holds `block`'s pin.
    pub fn pinned_page(&self, block: u64, segment_blocks: u64) -> u64 {
        let within = (block - format::FIRST_SEGMENT_BLOCK) % segment_blocks;
        crate::tbfs::space::segments::segment_of(block, segment_blocks) as u64
            * self.pinned_pages_per_segment
            + within / table_entries_per_page(TABLE_PINNED) as u64
    }
}
