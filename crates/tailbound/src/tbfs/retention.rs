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

/// Retention state, kept under the `meta` lock. Changed only through its methods, which hold
/// these invariants:
///
/// - checkpoints are retained in number order, and a retained checkpoint is released only by
///   the pruning that finds it is neither a snapshot nor held by a view;
/// - a view holds only a retained checkpoint, and each view ends once;
/// - a snapshot's name belongs to a snapshot;
/// - a block is pinned under the newest retained checkpoint (or held one) that may reference it;
/// - one cleaning pass's copies at a time carry an age.
#[derive(Debug, Default)]
pub(crate) struct Retention {
    /// Retained checkpoints by number (the newest is always here).
    list: BTreeMap<u64, Retained>,
    /// Checkpoints open [`Snapshot`] views read, with their view counts.
    holds: BTreeMap<u64, usize>,
    /// The pinned blocks.
    pins: Pins,
    /// Per segment: the checkpoint number that was next when the writer entered it.
    seg_born: Vec<u64>,
    /// Per segment: time of its newest log.
    seg_written: Vec<i64>,
    /// Segments the writer entered since the last checkpoint, and where: blocks from there on
    /// belong to no checkpoint yet.
    since_ckpt: Vec<(usize, u64)>,
    /// Segment-usage table pages to rewrite.
    usage_dirty: BTreeSet<u64>,
    /// The snapshot table must be rewritten.
    snap_dirty: bool,
    /// The checkpoint's tables: segment usage, pinned blocks, snapshots.
    tables: [BlockMap; TABLES],
    protection: Duration,
    /// The pool is short of space: plain checkpoints are not protected.
    pressure: bool,
    /// While the cleaner writes its copies: the age (newest log time) of the segments they come
    /// from, given to the segments they go to.
    copy_age: Option<i64>,
    pinned_pages_per_segment: u64,
}

/// A retained checkpoint's snapshot mark as it was before [`Retention::set_snapshot`], to put
/// back if the change cannot be made durable.
#[derive(Debug)]
pub(crate) struct SnapshotMark {
    snapshot: bool,
    name: Option<String>,
    table_dirty: bool,
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

    /// Recovery: the retained checkpoints found in the snapshot table and down the chain of
    /// roots, into a state that has none yet.
    pub fn load_retained(&mut self, list: BTreeMap<u64, Retained>) {
        assert!(
            self.list.is_empty() && self.holds.is_empty(),
            "retained checkpoints loaded twice"
        );
        self.list = list;
    }

    /// Recovery: segment `s`'s usage entry as the checkpoint stored it.
    pub fn load_segment(&mut self, s: usize, born: u64, written_ns: i64) {
        self.seg_born[s] = born;
        self.seg_written[s] = written_ns;
    }

    /// Recovery: a log found in segment `s`, written at `time_ns`, after the base checkpoint or
    /// before it. No table page is marked, since recovery's checkpoint writes them all.
    pub fn recovered_log(&mut self, s: usize, time_ns: i64) {
        self.seg_written[s] = self.seg_written[s].max(time_ns);
    }

    /// Recovery: a log after the base checkpoint starts at `start` in segment `s`: blocks there
    /// from `start` on belong to no checkpoint yet.
    pub fn recovered_since_checkpoint(&mut self, s: usize, start: u64) {
        if !self.since_ckpt.iter().any(|&(seg, _)| seg == s) {
            self.since_ckpt.push((s, start));
        }
    }

    /// Recovery: the newest checkpoint's tables, as loaded; what recovery marked is already in
    /// them.
    pub fn load_tables(&mut self, tables: [BlockMap; TABLES]) {
        self.tables = tables;
        self.usage_dirty.clear();
    }

    // Retained checkpoints.

    /// Retained checkpoint `c`, if it is retained.
    pub fn retained(&self, c: u64) -> Option<&Retained> {
        self.list.get(&c)
    }

    /// The retained checkpoints, oldest first.
    pub fn retained_all(&self) -> impl Iterator<Item = (u64, &Retained)> {
        self.list.iter().map(|(&c, k)| (c, k))
    }

    /// The retained checkpoints numbered `from` or later, oldest first.
    pub fn retained_from(&self, from: u64) -> impl Iterator<Item = (u64, &Retained)> {
        self.list.range(from..).map(|(&c, k)| (c, k))
    }

    pub fn snapshot_count(&self) -> usize {
        self.list.values().filter(|k| k.snapshot).count()
    }

    /// Checkpoint `number`, just written, is retained: it is newer than every retained one.
    pub fn retain(&mut self, number: u64, k: Retained) {
        if let Some((&newest, _)) = self.list.last_key_value() {
            assert!(
                number > newest,
                "checkpoint {number} retained after checkpoint {newest}: out of number order"
            );
        }
        self.list.insert(number, k);
    }

    /// Stops retaining checkpoint `c` (pruning found it unkept): returns whether it was
    /// retained. A snapshot or a checkpoint a view holds is never released.
    pub fn release(&mut self, c: u64) -> bool {
        assert!(
            !self.holds.contains_key(&c),
            "checkpoint {c} released while a view holds it"
        );
        match self.list.remove(&c) {
            Some(k) => {
                assert!(!k.snapshot, "snapshot {c} released without being dropped");
                true
            }
            None => false,
        }
    }

    /// Marks retained checkpoint `number` a snapshot named `name`, or a plain checkpoint
    /// (`snapshot` false, no name), for the next checkpoint's snapshot table: returns the mark
    /// it had, for [`Retention::restore_snapshot`].
    pub fn set_snapshot(
        &mut self,
        number: u64,
        snapshot: bool,
        name: Option<String>,
    ) -> SnapshotMark {
        assert!(
            snapshot || name.is_none(),
            "checkpoint {number}: a name for a plain checkpoint"
        );
        let k = self
            .list
            .get_mut(&number)
            .unwrap_or_else(|| panic!("checkpoint {number} marked a snapshot but not retained"));
        SnapshotMark {
            snapshot: std::mem::replace(&mut k.snapshot, snapshot),
            name: std::mem::replace(&mut k.name, name),
            table_dirty: std::mem::replace(&mut self.snap_dirty, true),
        }
    }

    /// Puts back the mark [`Retention::set_snapshot`] changed, when the change was refused whole.
    pub fn restore_snapshot(&mut self, number: u64, was: SnapshotMark) {
        self.snap_dirty = was.table_dirty;
        if let Some(k) = self.list.get_mut(&number) {
            k.snapshot = was.snapshot;
            k.name = was.name;
        }
    }

    // Views.

    /// A view of retained checkpoint `c` opens: `c` stays retained until it ends.
    pub fn hold(&mut self, c: u64) {
        assert!(
            self.list.contains_key(&c),
            "a view of checkpoint {c}, which is not retained"
        );
        *self.holds.entry(c).or_default() += 1;
    }

    /// A view of checkpoint `c` ends: returns whether it was the last one.
    pub fn unhold(&mut self, c: u64) -> bool {
        let n = self
            .holds
            .get_mut(&c)
            .unwrap_or_else(|| panic!("a view of checkpoint {c} ended that held nothing"));
        *n -= 1;
        if *n == 0 {
            self.holds.remove(&c);
            true
        } else {
            false
        }
    }

    /// Whether a view holds checkpoint `c`.
    pub fn is_held(&self, c: u64) -> bool {
        self.holds.contains_key(&c)
    }

    /// Whether a view holds a checkpoint numbered `from` or later.
    pub fn any_held_from(&self, from: u64) -> bool {
        self.holds.range(from..).next().is_some()
    }

    /// Checkpoints views hold.
    pub fn held_count(&self) -> usize {
        self.holds.len()
    }

    // Pins.

    /// The pinned blocks.
    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    /// Pins `block`: `false` if it was pinned already, its pin then replaced.
    pub fn pin(&mut self, block: u64, pin: BlockPin, segment_blocks: u64) -> bool {
        self.check_anchor(block, &pin);
        let page = self.pinned_page(block, segment_blocks);
        self.pins.insert(block, pin, page)
    }

    /// Pins every block of `pins`, sorted by block, none of them pinned yet.
    pub fn pin_all_new(&mut self, pins: Vec<(u64, BlockPin)>, segment_blocks: u64) {
        let mut pages = Vec::new();
        let mut checked = None;
        for (block, pin) in &pins {
            // Blocks dropped together mostly share a range: one look-up per run of them.
            if checked != Some((pin.born, pin.died, pin.anchor)) {
                self.check_anchor(*block, pin);
                checked = Some((pin.born, pin.died, pin.anchor));
            }
            let page = self.pinned_page(*block, segment_blocks);
            if pages.last() != Some(&page) {
                pages.push(page);
            }
        }
        self.pins.append_new(pins, pages.into_iter());
    }

    /// Unpins `block`, returning its pin if it was pinned.
    pub fn unpin(&mut self, block: u64, segment_blocks: u64) -> Option<BlockPin> {
        let page = self.pinned_page(block, segment_blocks);
        self.pins.remove(block, page)
    }

    /// Moves pinned `block` from anchor `from` to the newest retained checkpoint of its range.
    pub fn reanchor_pin(&mut self, block: u64, from: u64, pin: &BlockPin) -> Option<u64> {
        let to = self.anchor(pin.born, pin.died)?;
        if to != from {
            self.pins.reanchor(block, from, to);
        }
        Some(to)
    }

    /// Marks pinned-table page `page` to be rewritten by the next checkpoint (its block moved,
    /// or recovery rewrites it).
    pub fn mark_pinned_page_dirty(&mut self, page: u64) {
        self.pins.mark_page_dirty(page);
    }

    /// The pinned-table pages to rewrite, leaving none marked.
    pub fn take_dirty_pinned_pages(&mut self) -> BTreeSet<u64> {
        self.pins.take_dirty_pages()
    }

    /// A block is pinned under the newest retained checkpoint that may reference it: one pinned
    /// under an older one would be unpinned while that newer checkpoint still needs it.
    fn check_anchor(&self, block: u64, pin: &BlockPin) {
        assert_eq!(
            Some(pin.anchor),
            self.anchor(pin.born, pin.died),
            "block {block} pinned for checkpoints {}..={} under the wrong anchor",
            pin.born,
            pin.died
        );
    }

    // Segments' ages and the blocks no checkpoint has yet.

    /// The writer enters segment `seg` at block `pos`, with `next` the next checkpoint's number:
    /// its blocks belong to that checkpoint or later ones, and its age starts afresh.
    pub fn entered_segment(&mut self, seg: usize, next: u64, pos: u64) {
        self.seg_born[seg] = next;
        self.seg_written[seg] = 0;
        self.since_ckpt.push((seg, pos));
        self.usage_dirty
            .insert(seg as u64 / table_entries_per_page(TABLE_USAGE) as u64);
    }

    /// A log in segment `seg` closed at `time_ns`: the segment is as young as its newest data
    /// (the age of the data a cleaning pass copies, while it copies).
    pub fn log_closed(&mut self, seg: usize, time_ns: i64) {
        let age = self.copy_age.unwrap_or(time_ns);
        self.seg_written[seg] = self.seg_written[seg].max(age);
        self.usage_dirty
            .insert(seg as u64 / table_entries_per_page(TABLE_USAGE) as u64);
    }

    /// A checkpoint was written with the writer at block `pos` of segment `seg`: blocks from
    /// there on belong to the next one.
    pub fn checkpoint_written(&mut self, seg: usize, pos: u64) {
        self.since_ckpt = vec![(seg, pos)];
    }

    /// Whether `block`, in segment `s`, was written since the last checkpoint.
    pub fn written_since_checkpoint(&self, s: usize, block: u64) -> bool {
        self.since_ckpt
            .iter()
            .any(|&(seg, from)| seg == s && block >= from)
    }

    /// The checkpoint that was next when the writer entered segment `s`.
    pub fn segment_born(&self, s: usize) -> u64 {
        self.seg_born[s]
    }

    /// Time of segment `s`'s newest log.
    pub fn segment_written(&self, s: usize) -> i64 {
        self.seg_written[s]
    }

    /// A cleaning pass starts writing copies of data whose newest log was written at `age`.
    pub fn start_copies(&mut self, age: Option<i64>) {
        assert!(
            self.copy_age.is_none(),
            "a cleaning pass's copies inside another's"
        );
        self.copy_age = age;
    }

    /// The cleaning pass's copies are written (or failed).
    pub fn end_copies(&mut self) {
        self.copy_age = None;
    }

    // The checkpoint's tables.

    /// Table `i` (0: segment usage, 1: pinned blocks, 2: snapshots).
    pub fn table(&self, i: usize) -> &BlockMap {
        &self.tables[i]
    }

    pub fn tables(&self) -> &[BlockMap; TABLES] {
        &self.tables
    }

    /// Table `i`, for the cleaner to move its nodes.
    pub fn table_mut(&mut self, i: usize) -> &mut BlockMap {
        &mut self.tables[i]
    }

    /// Takes table `i` out to write it; [`Retention::put_table`] puts it back.
    pub fn take_table(&mut self, i: usize) -> BlockMap {
        std::mem::take(&mut self.tables[i])
    }

    pub fn put_table(&mut self, i: usize, map: BlockMap) {
        self.tables[i] = map;
    }

    /// Marks segment-usage page `page` to be rewritten (its block moved).
    pub fn mark_usage_page_dirty(&mut self, page: u64) {
        self.usage_dirty.insert(page);
    }

    pub fn dirty_usage_page_count(&self) -> usize {
        self.usage_dirty.len()
    }

    /// The segment-usage pages to rewrite (every one of `pages` if the table was never written),
    /// leaving none marked.
    pub fn take_dirty_usage_pages(&mut self, pages: u64) -> BTreeSet<u64> {
        if self.tables[0].blocks.is_empty() {
            self.usage_dirty = (0..pages).collect();
        }
        std::mem::take(&mut self.usage_dirty)
    }

    /// Marks the snapshot table to be rewritten (a snapshot made or dropped, or its block moved).
    pub fn mark_snapshots_dirty(&mut self) {
        self.snap_dirty = true;
    }

    /// Whether the snapshot table must be rewritten.
    pub fn snapshots_dirty(&self) -> bool {
        self.snap_dirty
    }

    /// The snapshot table was written.
    pub fn snapshots_written(&mut self) {
        self.snap_dirty = false;
    }

    // Protection.

    pub fn protection(&self) -> Duration {
        self.protection
    }

    pub fn set_protection(&mut self, d: Duration) {
        self.protection = d;
    }

    /// Whether the pool is short of space, so plain checkpoints are not protected.
    pub fn under_pressure(&self) -> bool {
        self.pressure
    }

    pub fn set_pressure(&mut self, pressure: bool) {
        self.pressure = pressure;
    }

    pub fn pinned_pages_per_segment(&self) -> u64 {
        self.pinned_pages_per_segment
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
        let cutoff = self.unprotected_before(now);
        self.holds.range(born..=newest).next().is_none()
            && self
                .list
                .range(born..=newest)
                .all(|(&c, k)| c == newest && !k.snapshot && k.time_ns < cutoff)
    }

    pub(super) fn protection_cutoff(&self, now: i64) -> i64 {
        if self.pressure {
            i64::MAX
        } else {
            self.unprotected_before(now)
        }
    }

    /// Plain checkpoints written before this time are past the protection period as configured
    /// (pressure aside).
    pub fn unprotected_before(&self, now: i64) -> i64 {
        // Saturating: a period longer than the clock's age protects every checkpoint.
        now.saturating_sub(self.protection.as_nanos().min(i64::MAX as u128) as i64)
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
    pub(super) fn sole_owner(&self, p: &BlockPin) -> Option<u64> {
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

    pub(super) fn snapshot_in(&self, born: u64, died: u64) -> bool {
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
    use super::{BlockPin, Pins, Retained, Retention};
    use std::collections::BTreeMap;
    use std::time::Duration;

    const SEGMENT_BLOCKS: u64 = 64;

    fn retained(snapshot: bool) -> Retained {
        Retained {
            time_ns: 1,
            root: 100,
            snapshot,
            name: None,
        }
    }

    /// Checkpoints 2 (a snapshot) and 4 retained.
    fn retention() -> Retention {
        let mut r = Retention::new(4, SEGMENT_BLOCKS, Duration::ZERO);
        r.load_retained(BTreeMap::from([(2, retained(true)), (4, retained(false))]));
        r
    }

    fn first_block() -> u64 {
        crate::tbfs::format::FIRST_SEGMENT_BLOCK
    }

    #[test]
    fn views_snapshots_and_pins_go_through_the_retention_methods() {
        let mut r = retention();
        r.retain(5, retained(false));
        r.hold(4);
        r.hold(4);
        assert!(r.is_held(4) && r.any_held_from(3) && !r.any_held_from(5));
        assert!(!r.unhold(4), "one view still holds it");
        assert!(r.unhold(4), "the last view ended");
        let b = first_block();
        assert_eq!(r.anchor(3, 5), Some(5));
        assert!(r.pin(
            b,
            BlockPin {
                born: 3,
                died: 5,
                anchor: 5
            },
            SEGMENT_BLOCKS
        ));
        let was = r.set_snapshot(5, true, Some("five".into()));
        assert_eq!(r.snapshot_count(), 2);
        assert!(r.snapshots_dirty());
        r.restore_snapshot(5, was);
        assert_eq!(r.snapshot_count(), 1);
        assert!(!r.snapshots_dirty(), "the table mark is put back too");
        assert!(r.release(4));
        let pin = r.pins().anchored_at(5)[0].1;
        assert_eq!(r.reanchor_pin(b, 5, &pin), Some(5));
        assert!(r.release(5));
        assert_eq!(
            r.reanchor_pin(b, 5, &pin),
            None,
            "nothing retained in 3..=5"
        );
        assert!(r.unpin(b, SEGMENT_BLOCKS).is_some());
        assert_eq!(
            r.retained_all().map(|(c, _)| c).collect::<Vec<_>>(),
            vec![2]
        );
    }

    #[test]
    #[should_panic(expected = "out of number order")]
    fn retaining_a_checkpoint_older_than_the_newest_is_caught() {
        retention().retain(3, retained(false));
    }

    #[test]
    #[should_panic(expected = "released without being dropped")]
    fn releasing_a_snapshot_is_caught() {
        retention().release(2);
    }

    #[test]
    #[should_panic(expected = "while a view holds it")]
    fn releasing_a_held_checkpoint_is_caught() {
        let mut r = retention();
        r.hold(4);
        r.release(4);
    }

    #[test]
    #[should_panic(expected = "which is not retained")]
    fn a_view_of_a_checkpoint_not_retained_is_caught() {
        retention().hold(3);
    }

    #[test]
    #[should_panic(expected = "ended that held nothing")]
    fn a_view_ending_twice_is_caught() {
        let mut r = retention();
        r.hold(4);
        r.unhold(4);
        r.unhold(4);
    }

    #[test]
    #[should_panic(expected = "a name for a plain checkpoint")]
    fn a_name_for_a_plain_checkpoint_is_caught() {
        retention().set_snapshot(4, false, Some("four".into()));
    }

    #[test]
    #[should_panic(expected = "under the wrong anchor")]
    fn a_pin_under_an_older_checkpoint_than_its_newest_is_caught() {
        let mut r = retention();
        // Checkpoint 4 is the newest retained one in 2..=4: pinning under 2 would leave the
        // block to be unpinned when 2 goes, while 4 still references it.
        r.pin(
            first_block(),
            BlockPin {
                born: 2,
                died: 4,
                anchor: 2,
            },
            SEGMENT_BLOCKS,
        );
    }

    #[test]
    #[should_panic(expected = "under the wrong anchor")]
    fn a_batch_of_pins_under_the_wrong_anchor_is_caught() {
        let b = first_block();
        let mut r = retention();
        let pins = vec![
            (
                b,
                BlockPin {
                    born: 2,
                    died: 4,
                    anchor: 4,
                },
            ),
            (
                b + 1,
                BlockPin {
                    born: 3,
                    died: 4,
                    anchor: 2,
                },
            ),
        ];
        r.pin_all_new(pins, SEGMENT_BLOCKS);
    }

    #[test]
    #[should_panic(expected = "inside another's")]
    fn nested_cleaning_copies_are_caught() {
        let mut r = retention();
        r.start_copies(Some(1));
        r.start_copies(Some(2));
    }

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
