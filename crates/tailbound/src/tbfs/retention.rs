//! Retention: the retained checkpoints ([`Retained`]), the pinned blocks ([`BlockPin`]) and the state
//! that ties them together ([`Retention`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::tbfs::clock::Clock;
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

/// A run of blocks pinned alike: `start .. start + len`, every one with `pin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PinRun {
    pub start: u64,
    pub len: u64,
    pub pin: BlockPin,
}

impl PinRun {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// The pinned blocks, kept as runs of adjacent blocks pinned alike (a deleted file's blocks are
/// mostly a few long runs, so pinning, re-anchoring and releasing them is a handful of entries,
/// not one per block), indexed by first block and by anchor, and the pinned-table pages to
/// rewrite. Changed only through its methods, which keep the runs from overlapping, merge
/// adjacent runs pinned alike, and keep the two indexes in step: every run has exactly one
/// `(anchor, start)` entry, its pin's anchor.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    /// Runs by first block: start -> (length, pin).
    runs: BTreeMap<u64, (u64, BlockPin)>,
    by_anchor: BTreeSet<(u64, u64)>,
    /// Pinned blocks, over all runs.
    blocks: u64,
    /// Pinned-table pages to rewrite: page `j` of segment `s` is `s·k + j` (`k` =
    /// `Retention::pinned_pages_per_segment`) and holds the pins of the segment's blocks `170·j ..`.
    dirty_pages: BTreeSet<u64>,
}

impl Pins {
    /// Pinned blocks.
    pub fn len(&self) -> u64 {
        self.blocks
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Runs of blocks pinned alike.
    #[cfg(test)]
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Entries of the anchor index (one per run, when the indexes agree).
    #[cfg(test)]
    pub fn anchor_entries(&self) -> usize {
        self.by_anchor.len()
    }

    /// The run holding `block`, if it is pinned.
    pub fn run_at(&self, block: u64) -> Option<PinRun> {
        let (&start, &(len, pin)) = self.runs.range(..=block).next_back()?;
        (block < start + len).then_some(PinRun { start, len, pin })
    }

    pub fn contains(&self, block: u64) -> bool {
        self.run_at(block).is_some()
    }

    /// The runs, in block order.
    pub fn runs(&self) -> impl Iterator<Item = PinRun> + '_ {
        self.runs
            .iter()
            .map(|(&start, &(len, pin))| PinRun { start, len, pin })
    }

    /// Whether any block in `first ..= last` is pinned.
    pub fn any_in(&self, first: u64, last: u64) -> bool {
        self.contains(first) || self.runs.range(first..=last).next().is_some()
    }

    /// The pinned blocks in `start .. end`, in block order, with their pins.
    pub fn in_range(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, &BlockPin)> {
        // From the run holding `start`, if one does (a run ending before it yields nothing).
        let from = self
            .runs
            .range(..=start)
            .next_back()
            .map_or(start, |(&s, _)| s);
        self.runs
            .range(from..end.max(from))
            .flat_map(move |(&s, (len, pin))| {
                (s.max(start)..(s + len).min(end)).map(move |b| (b, pin))
            })
    }

    /// Whether any block is anchored at checkpoint `c`.
    pub fn any_anchored_at(&self, c: u64) -> bool {
        self.by_anchor
            .range((c, 0)..=(c, u64::MAX))
            .next()
            .is_some()
    }

    /// The runs anchored at checkpoint `c`.
    pub fn anchored_at(&self, c: u64) -> Vec<PinRun> {
        self.by_anchor
            .range((c, 0)..=(c, u64::MAX))
            .map(|&(_, start)| {
                let (len, pin) = self.runs[&start];
                PinRun { start, len, pin }
            })
            .collect()
    }

    /// Pins `block` (its pinned-table page `page`): `false` if it was pinned already, its pin
    /// then replaced.
    pub fn insert(&mut self, block: u64, pin: BlockPin, page: u64) -> bool {
        let old = self.cut(block);
        self.add(block, 1, pin);
        self.dirty_pages.insert(page);
        self.check();
        old.is_none()
    }

    /// Recovery: `block`'s pin as the newest checkpoint's pinned table stores it. No page is
    /// marked: the stored page already holds it. `false` if it was pinned already.
    pub fn load(&mut self, block: u64, pin: BlockPin) -> bool {
        if self.contains(block) {
            return false;
        }
        self.add(block, 1, pin);
        self.check();
        true
    }

    /// Pins the blocks of `run`, none of them pinned yet, with `pages` their pinned-table pages.
    pub fn insert_new_run(&mut self, run: PinRun, pages: impl Iterator<Item = u64>) {
        assert!(
            run.len > 0 && !self.any_in(run.start, run.end() - 1),
            "blocks {}..{}: a run of new pins overlaps pinned blocks",
            run.start,
            run.end()
        );
        self.add(run.start, run.len, run.pin);
        self.dirty_pages.extend(pages);
        self.check();
    }

    /// Unpins the whole run starting at `start` (its pinned-table pages `pages`).
    pub fn remove_run(&mut self, start: u64, pages: impl Iterator<Item = u64>) -> PinRun {
        let (len, pin) = self.take(start).expect("unpinning a pinned run");
        self.dirty_pages.extend(pages);
        self.check();
        PinRun { start, len, pin }
    }

    /// Moves the run starting at `start` from anchor `from` to anchor `to`. The pinned table
    /// does not store anchors: no page changes.
    pub fn reanchor(&mut self, start: u64, from: u64, to: u64) {
        let (len, mut pin) = self.take(start).expect("re-anchoring a pinned run");
        assert_eq!(
            pin.anchor,
            from,
            "blocks {start}..{}: re-anchored from the wrong anchor",
            start + len
        );
        pin.anchor = to;
        self.add(start, len, pin);
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

    /// Adds a run over blocks none of which is pinned, merged with the runs just before and
    /// after it if they are pinned alike.
    fn add(&mut self, mut start: u64, mut len: u64, pin: BlockPin) {
        if let Some((&s, &(l, p))) = self.runs.range(..start).next_back() {
            if s + l == start && p == pin {
                self.take(s);
                start = s;
                len += l;
            }
        }
        let end = start + len;
        if let Some(&(l, p)) = self.runs.get(&end) {
            if p == pin {
                self.take(end);
                len += l;
            }
        }
        self.runs.insert(start, (len, pin));
        self.by_anchor.insert((pin.anchor, start));
        self.blocks += len;
    }

    /// Removes the run starting at `start` from both indexes.
    fn take(&mut self, start: u64) -> Option<(u64, BlockPin)> {
        let (len, pin) = self.runs.remove(&start)?;
        self.by_anchor.remove(&(pin.anchor, start));
        self.blocks -= len;
        Some((len, pin))
    }

    /// Unpins `block` alone, splitting its run: its pin, if it was pinned.
    fn cut(&mut self, block: u64) -> Option<BlockPin> {
        let run = self.run_at(block)?;
        self.take(run.start);
        // The parts either side stay as they were: no merge can apply to them.
        for (s, l) in [
            (run.start, block - run.start),
            (block + 1, run.end() - block - 1),
        ] {
            if l > 0 {
                self.runs.insert(s, (l, run.pin));
                self.by_anchor.insert((run.pin.anchor, s));
                self.blocks += l;
            }
        }
        Some(run.pin)
    }

    /// The indexes agree: a run pinned without its anchor entry would never be released, one
    /// released without it would leave a stale entry to re-anchor.
    fn check(&self) {
        assert_eq!(
            self.runs.len(),
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
    /// Where segment ages and protection cut-offs read the time (the engine's clock).
    clock: Clock,
    /// The pool is short of space: plain checkpoints are not protected.
    pressure: bool,
    /// While the cleaner writes its copies: the age (newest log time) of the segments they come
    /// from, given to the segments they go to.
    copy_age: Option<i64>,
    /// A snapshot being dropped: only the checkpoint that records the drop releases it, so a
    /// drop refused for room (which may clean, and prune, first) can be put back.
    dropping: Option<u64>,
    /// The checkpoint being written is to become a snapshot: its space check keeps the room
    /// deletes under it will take in the pinned table.
    snapshot_coming: bool,
    segment_blocks: u64,
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
    pub fn new(
        segment_count: usize,
        segment_blocks: u64,
        protection: Duration,
        clock: Clock,
    ) -> Retention {
        Retention {
            seg_born: vec![0; segment_count],
            seg_written: vec![0; segment_count],
            protection,
            clock,
            segment_blocks,
            pinned_pages_per_segment: segment_blocks
                .div_ceil(table_entries_per_page(TABLE_PINNED) as u64),
            ..Retention::default()
        }
    }

    /// Now, by the engine's clock: what segment ages and protection periods are measured to.
    pub fn now_ns(&self) -> i64 {
        self.clock.now_ns()
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

    /// Marks checkpoint `c` as the snapshot whose drop is being made durable (`None` when it
    /// is done, or refused): returns the mark before.
    pub fn set_dropping(&mut self, c: Option<u64>) -> Option<u64> {
        std::mem::replace(&mut self.dropping, c)
    }

    /// Whether checkpoint `c`'s drop is being made durable (see [`Retention::set_dropping`]).
    pub fn is_dropping(&self, c: u64) -> bool {
        self.dropping == Some(c)
    }

    /// Marks whether the checkpoint being written is to become a snapshot: returns the mark
    /// before.
    pub fn set_snapshot_coming(&mut self, coming: bool) -> bool {
        std::mem::replace(&mut self.snapshot_coming, coming)
    }

    /// Whether the checkpoint being written is to become a snapshot
    /// ([`Retention::set_snapshot_coming`]).
    pub fn snapshot_coming(&self) -> bool {
        self.snapshot_coming
    }

    /// The pinned-table pages a checkpoint that releases the checkpoints `released` writes:
    /// of the pages marked dirty and those holding a run the release unpins, the ones that
    /// still hold a pin afterwards (a page left with none becomes a hole, which takes no
    /// block), and up to `more` of the other pages holding pins, for the blocks the
    /// checkpoint itself supersedes that a kept checkpoint references.
    pub fn pinned_pages_after_release(&self, released: &BTreeSet<u64>, more: u64) -> u64 {
        let kept = |p: &BlockPin| {
            self.list
                .range(p.born..=p.died)
                .any(|(c, _)| !released.contains(c))
                || self.holds.range(p.born..=p.died).next().is_some()
        };
        let mut touched = self.pins.dirty_pages.clone();
        let mut holding = BTreeSet::new();
        for r in self.pins.runs() {
            let pages = self.pinned_pages(r.start, r.len, self.segment_blocks);
            if kept(&r.pin) {
                holding.extend(pages);
            } else {
                touched.extend(pages);
            }
        }
        let written = touched.intersection(&holding).count() as u64;
        written + (holding.len() as u64 - written).min(more)
    }

    /// Whether a snapshot's drop is being made durable (see [`Retention::set_dropping`]).
    pub fn drop_in_progress(&self) -> bool {
        self.dropping.is_some()
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

    /// Recovery: `block`'s pin as the pinned table of the checkpoint recovery starts from
    /// stores it, in the page that holds it: no page is marked, since none changes (recovery
    /// writes only the pages its own changes mark). `false` if it was pinned already.
    pub fn load_pin(&mut self, block: u64, pin: BlockPin) -> bool {
        self.check_anchor(block, &pin);
        self.pins.load(block, pin)
    }

    /// Pins the blocks of `run`, none of them pinned yet.
    pub fn pin_new_run(&mut self, run: PinRun, segment_blocks: u64) {
        self.check_anchor(run.start, &run.pin);
        let pages = self.pinned_pages(run.start, run.len, segment_blocks);
        self.pins.insert_new_run(run, pages);
    }

    /// Unpins the whole run starting at `start`.
    pub fn unpin_run(&mut self, start: u64, segment_blocks: u64) -> PinRun {
        let len = self
            .pins
            .run_at(start)
            .filter(|r| r.start == start)
            .map_or(0, |r| r.len);
        let pages = self.pinned_pages(start, len, segment_blocks);
        self.pins.remove_run(start, pages)
    }

    /// Moves the run starting at `start` from anchor `from` to the newest retained checkpoint of
    /// its range: that checkpoint, or `None` (nothing changed) if none is retained.
    pub fn reanchor_run(&mut self, start: u64, from: u64, pin: &BlockPin) -> Option<u64> {
        let to = self.anchor(pin.born, pin.died)?;
        if to != from {
            self.pins.reanchor(start, from, to);
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

    /// The pinned-table pages that hold the pins of blocks `start .. start + len`: pages are
    /// numbered in block order with none skipped (a segment's last page holds its last
    /// block), so they are the range from the first block's page to the last one's.
    fn pinned_pages(&self, start: u64, len: u64, segment_blocks: u64) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        self.pinned_page(start, segment_blocks)
            ..self.pinned_page(start + len - 1, segment_blocks) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::{BlockPin, PinRun, Pins, Retained, Retention};
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
        let mut r = Retention::new(
            4,
            SEGMENT_BLOCKS,
            Duration::ZERO,
            crate::tbfs::Clock::wall(),
        );
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
        let pin = r.pins().anchored_at(5)[0].pin;
        assert_eq!(r.reanchor_run(b, 5, &pin), Some(5));
        assert!(r.release(5));
        assert_eq!(
            r.reanchor_run(b, 5, &pin),
            None,
            "nothing retained in 3..=5"
        );
        assert_eq!(r.unpin_run(b, SEGMENT_BLOCKS).len, 1);
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
    fn a_run_of_pins_under_the_wrong_anchor_is_caught() {
        let mut r = retention();
        r.pin_new_run(
            PinRun {
                start: first_block(),
                len: 8,
                pin: BlockPin {
                    born: 3,
                    died: 4,
                    anchor: 2,
                },
            },
            SEGMENT_BLOCKS,
        );
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

    fn run(start: u64, len: u64, anchor: u64) -> PinRun {
        PinRun {
            start,
            len,
            pin: pin(anchor),
        }
    }

    fn runs(pins: &Pins) -> Vec<(u64, u64, u64)> {
        pins.runs()
            .map(|r| (r.start, r.len, r.pin.anchor))
            .collect()
    }

    #[test]
    fn the_pin_indexes_move_together() {
        let mut pins = Pins::default();
        assert!(pins.insert(10, pin(3), 0));
        assert!(
            !pins.insert(10, pin(4), 0),
            "a second pin of a block replaces the first"
        );
        pins.insert_new_run(run(20, 2, 4), [1].into_iter());
        assert_eq!((pins.len(), pins.anchor_entries()), (3, 2));
        assert!(
            !pins.any_anchored_at(3),
            "the replaced pin left no anchor entry"
        );
        pins.reanchor(20, 4, 5);
        let at4: Vec<u64> = pins.anchored_at(4).iter().map(|r| r.start).collect();
        assert_eq!(at4, vec![10]);
        assert_eq!(pins.anchored_at(5)[0].pin.anchor, 5);
        assert_eq!(pins.remove_run(20, [1].into_iter()).len, 2);
        assert!(!pins.any_anchored_at(5));
        assert_eq!(pins.in_range(0, 100).count(), 1);
        assert_eq!(
            pins.take_dirty_pages().into_iter().collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(pins.dirty_page_count(), 0);
    }

    #[test]
    fn runs_merge_split_and_move_whole() {
        let mut pins = Pins::default();
        pins.insert_new_run(run(100, 50, 4), std::iter::empty());
        pins.insert_new_run(run(150, 50, 4), std::iter::empty());
        pins.insert_new_run(run(200, 10, 5), std::iter::empty());
        assert_eq!(
            runs(&pins),
            vec![(100, 100, 4), (200, 10, 5)],
            "adjacent runs pinned alike are one"
        );
        assert_eq!(pins.len(), 110);
        // A block pinned otherwise in the middle splits its run; pinned alike again, they join.
        assert!(!pins.insert(120, pin(5), 0));
        assert_eq!(
            runs(&pins),
            vec![(100, 20, 4), (120, 1, 5), (121, 79, 4), (200, 10, 5)]
        );
        assert_eq!((pins.len(), pins.anchor_entries()), (110, 4));
        assert_eq!(pins.run_at(120).map(|r| r.pin.anchor), Some(5));
        assert!(pins.any_in(95, 100) && pins.any_in(209, 300));
        assert!(!pins.any_in(90, 99) && !pins.any_in(210, 300));
        assert!(!pins.insert(120, pin(4), 0));
        assert_eq!(runs(&pins), vec![(100, 100, 4), (200, 10, 5)]);
        // Re-anchoring moves a run whole, and it joins a neighbour now pinned alike.
        pins.reanchor(200, 5, 4);
        assert_eq!(runs(&pins), vec![(100, 110, 4)]);
        assert_eq!((pins.anchor_entries(), pins.len()), (1, 110));
        // The blocks of a range, each with its pin, from inside a run.
        let blocks: Vec<u64> = pins.in_range(205, 215).map(|(b, _)| b).collect();
        assert_eq!(blocks, (205..210).collect::<Vec<_>>());
        assert_eq!(pins.in_range(50, 100).count(), 0);
        let whole = pins.remove_run(100, std::iter::empty());
        assert_eq!((whole.start, whole.len), (100, 110));
        assert!(pins.is_empty() && pins.anchor_entries() == 0);
        assert_eq!(pins.len(), 0);
    }

    #[test]
    fn a_run_is_pinned_on_every_table_page_it_covers() {
        let mut r = retention();
        // The run crosses from segment 0 into segment 1.
        let start = first_block() + SEGMENT_BLOCKS - 3;
        r.pin_new_run(
            PinRun {
                start,
                len: 6,
                pin: BlockPin {
                    born: 3,
                    died: 4,
                    anchor: 4,
                },
            },
            SEGMENT_BLOCKS,
        );
        let pages: Vec<u64> = r.take_dirty_pinned_pages().into_iter().collect();
        let want: Vec<u64> = (start..start + 6)
            .map(|b| r.pinned_page(b, SEGMENT_BLOCKS))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(pages, want);
        assert_eq!(pages.len(), 2);
        assert_eq!(r.unpin_run(start, SEGMENT_BLOCKS).len, 6);
        assert_eq!(
            r.take_dirty_pinned_pages().into_iter().collect::<Vec<_>>(),
            want
        );
    }

    #[test]
    #[should_panic(expected = "overlaps pinned blocks")]
    fn a_run_of_new_pins_over_a_pinned_block_is_caught() {
        let mut pins = Pins::default();
        pins.insert(15, pin(3), 0);
        pins.insert_new_run(run(10, 11, 3), [0].into_iter());
    }
}
