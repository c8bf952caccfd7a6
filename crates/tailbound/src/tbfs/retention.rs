//! Retention: the retained checkpoints ([`Retained`]), the pinned blocks ([`BlockPin`]) and the state
//! that ties them together ([`Retention`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::tbfs::format::{self, *};
use crate::tbfs::map::BlockMap;

/// A retained checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Retained {
    pub time_ns: i64,
    pub root: u64,
    pub snapshot: bool,
    pub name: Option<String>,
}

/// A pinned block: the checkpoints that may reference it, and the newest retained one among
/// them (`anchor`), under which it is indexed so releasing a checkpoint revisits only its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockPin {
    pub born: u64,
    pub died: u64,
    pub anchor: u64,
}

/// The pinned blocks, indexed by block and by anchor, and the pinned-table pages to rewrite.
/// Changed only through its methods, which keep the two indexes in step: every pinned block has
/// exactly one `(anchor, block)` entry, its pin's anchor.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    by_block: BTreeMap<u64, BlockPin>,
    by_anchor: BTreeSet<(u64, u64)>,
    /// Pinned-table pages to rewrite: page `j` of segment `s` is `s·k + j` (`k` =
    /// `Retention::pinned_pages_per_segment`) and holds the pins of the segment's blocks `170·j ..`.
    dirty_pages: BTreeSet<u64>,
}

impl Pins {
    pub fn len(&self) -> usize {
        self.by_block.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_block.is_empty()
    }

    pub fn contains(&self, block: u64) -> bool {
        self.by_block.contains_key(&block)
    }

    pub fn values(&self) -> impl Iterator<Item = &BlockPin> {
        self.by_block.values()
    }

    /// Entries of the anchor index (one per pinned block, when the indexes agree).
    #[cfg(test)]
    pub fn anchor_entries(&self) -> usize {
        self.by_anchor.len()
    }

    /// Whether any block in `first ..= last` is pinned.
    pub fn any_in(&self, first: u64, last: u64) -> bool {
        self.by_block.range(first..=last).next().is_some()
    }

    /// The pinned blocks in `start .. end`, in block order, with their pins.
    pub fn in_range(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, &BlockPin)> {
        self.by_block.range(start..end).map(|(&b, p)| (b, p))
    }

    /// Whether any block is anchored at checkpoint `c`.
    pub fn any_anchored_at(&self, c: u64) -> bool {
        self.by_anchor
            .range((c, 0)..=(c, u64::MAX))
            .next()
            .is_some()
    }

    /// The blocks anchored at checkpoint `c`, with their pins.
    pub fn anchored_at(&self, c: u64) -> Vec<(u64, BlockPin)> {
        self.by_anchor
            .range((c, 0)..=(c, u64::MAX))
            .map(|&(_, b)| (b, self.by_block[&b]))
            .collect()
    }

    /// Pins `block` (its pinned-table page `page`): `false` if it was pinned already, its pin
    /// then replaced.
    pub fn insert(&mut self, block: u64, pin: BlockPin, page: u64) -> bool {
        let old = self.by_block.insert(block, pin);
        if let Some(old) = old {
            self.by_anchor.remove(&(old.anchor, block));
        }
        self.by_anchor.insert((pin.anchor, block));
        self.dirty_pages.insert(page);
        self.check();
        old.is_none()
    }

    /// Pins every block of `pins`, sorted by block, none of them pinned yet, with `pages` their
    /// pinned-table pages: one merge into each index rather than a search per block.
    pub fn append_new(&mut self, pins: Vec<(u64, BlockPin)>, pages: impl Iterator<Item = u64>) {
        if let (Some(&(first, _)), Some(&(last, _))) = (pins.first(), pins.last()) {
            assert!(
                !self.any_in(first, last),
                "blocks {first}..={last}: a batch of new pins overlaps pinned blocks"
            );
        }
        self.dirty_pages.extend(pages);
        let mut anchors: BTreeSet<(u64, u64)> =
            pins.iter().map(|&(block, p)| (p.anchor, block)).collect();
        self.by_anchor.append(&mut anchors);
        let mut by_block: BTreeMap<u64, BlockPin> = pins.into_iter().collect();
        self.by_block.append(&mut by_block);
        self.check();
    }

    /// Unpins `block` (its pinned-table page `page`), returning its pin if it was pinned.
    pub fn remove(&mut self, block: u64, page: u64) -> Option<BlockPin> {
        let p = self.by_block.remove(&block)?;
        self.by_anchor.remove(&(p.anchor, block));
        self.dirty_pages.insert(page);
        self.check();
        Some(p)
    }

    /// Moves pinned `block` from anchor `from` to anchor `to`.
    pub fn reanchor(&mut self, block: u64, from: u64, to: u64) {
        let p = self
            .by_block
            .get_mut(&block)
            .expect("re-anchoring a pinned block");
        assert_eq!(
            p.anchor, from,
            "block {block}: re-anchored from the wrong anchor"
        );
        p.anchor = to;
        self.by_anchor.remove(&(from, block));
        self.by_anchor.insert((to, block));
        self.check();
    }

    /// Marks pinned-table page `page` to be rewritten by the next checkpoint.
    pub fn mark_page_dirty(&mut self, page: u64) {
        self.dirty_pages.insert(page);
    }

    pub fn dirty_page_count(&self) -> usize {
        self.dirty_pages.len()
    }

    /// The pages to rewrite, leaving none marked.
    pub fn take_dirty_pages(&mut self) -> BTreeSet<u64> {
        std::mem::take(&mut self.dirty_pages)
    }

    /// The indexes agree: a block pinned without its anchor entry would never be released, one
    /// released without it would leave a stale entry to re-anchor.
    fn check(&self) {
        assert_eq!(
            self.by_block.len(),
            self.by_anchor.len(),
            "the pin indexes disagree"
        );
    }
}

/// Retention state, kept under the `meta` lock.
#[derive(Debug, Default)]
pub(crate) struct Retention {
    /// Retained checkpoints by number (the newest is always here).
    pub list: BTreeMap<u64, Retained>,
    /// Checkpoints open [`Snapshot`] views read, with their view counts.
    pub holds: BTreeMap<u64, usize>,
    /// The pinned blocks.
    pub pins: Pins,
    /// Per segment: the checkpoint number that was next when the writer entered it.
    pub seg_born: Vec<u64>,
    /// Per segment: time of its newest log.
    pub seg_written: Vec<i64>,
    /// Segments the writer entered since the last checkpoint, and where: blocks from there on
    /// belong to no checkpoint yet.
    pub since_ckpt: Vec<(usize, u64)>,
    pub usage_dirty: BTreeSet<u64>,
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

impl Retention {
    pub fn new(segment_count: usize, segment_blocks: u64, protection: Duration) -> Retention {
        Retention {
            seg_born: vec![0; segment_count],
            seg_written: vec![0; segment_count],
            protection,
            pinned_pages_per_segment: segment_blocks
                .div_ceil(table_entries_per_page(TABLE_PINNED) as u64),
            ..Retention::default()
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
    pub(crate) fn sole_owner(&self, p: &BlockPin) -> Option<u64> {
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

impl Retention {
    /// The pinned-table page that holds `block`'s pin.
    pub fn pinned_page(&self, block: u64, segment_blocks: u64) -> u64 {
        let within = (block - format::FIRST_SEGMENT_BLOCK) % segment_blocks;
        crate::tbfs::space::segments::segment_of(block, segment_blocks) as u64
            * self.pinned_pages_per_segment
            + within / table_entries_per_page(TABLE_PINNED) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::{BlockPin, Pins};

    fn pin(anchor: u64) -> BlockPin {
        BlockPin {
            born: 1,
            died: 5,
            anchor,
        }
    }

    #[test]
    fn the_pin_indexes_move_together() {
        let mut pins = Pins::default();
        assert!(pins.insert(10, pin(3), 0));
        assert!(
            !pins.insert(10, pin(4), 0),
            "a second pin of a block replaces the first"
        );
        pins.append_new(vec![(20, pin(4)), (21, pin(4))], [1].into_iter());
        assert_eq!((pins.len(), pins.anchor_entries()), (3, 3));
        assert!(
            !pins.any_anchored_at(3),
            "the replaced pin left no anchor entry"
        );
        pins.reanchor(20, 4, 5);
        let at4: Vec<u64> = pins.anchored_at(4).iter().map(|&(b, _)| b).collect();
        assert_eq!(at4, vec![10, 21]);
        assert_eq!(pins.anchored_at(5)[0].1.anchor, 5);
        assert_eq!(pins.remove(21, 1).map(|p| p.anchor), Some(4));
        assert_eq!(pins.remove(21, 1), None);
        assert_eq!(pins.in_range(0, 100).count(), 2);
        assert_eq!(
            pins.take_dirty_pages().into_iter().collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(pins.dirty_page_count(), 0);
    }

    #[test]
    #[should_panic(expected = "overlaps pinned blocks")]
    fn a_batch_of_new_pins_over_a_pinned_block_is_caught() {
        let mut pins = Pins::default();
        pins.insert(15, pin(3), 0);
        pins.append_new(vec![(10, pin(3)), (20, pin(3))], [0].into_iter());
    }
}
