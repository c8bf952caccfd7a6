//! The segment table: each segment's live and pinned block counts, and the log sequences that
//! say when it may be reused.
//!
//! Only [`SegmentTable`]'s methods change a count. A segment holds `segment_blocks` blocks, and
//! each is at most once live (the tree references it) or pinned (only a retained checkpoint
//! does), so neither count may go below zero or above the segment's size: the methods check it in
//! every build, since a count that wrapped or saturated would let a segment holding data be
//! reused.

/// Per-segment usage, for choosing where the next logs go and which segments may be reused.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentTable {
    /// Blocks per segment: the bound of every count.
    segment_blocks: u64,
    /// Blocks the in-memory state references in each segment.
    live: Vec<u32>,
    /// Sequence of the newest log that dropped a block of the segment in a way roll-forward
    /// does not replay (a checkpoint rewriting it, a truncation, a deletion, a released pin):
    /// until a superblock names a checkpoint written after it, the durable state may use it.
    dead_at: Vec<u64>,
    /// One more than the sequence of the newest data-only log that superseded a block of the
    /// segment which no retained checkpoint but the newest (or none) references (`seg_supersede`):
    /// once that log is durable, recovery replays it over any stale pointer. 0 for none.
    soft_dead_at: Vec<u64>,
    /// Highest log sequence written into each segment.
    last_seq: Vec<u64>,
    /// Blocks in each segment that the live tree no longer references but a retained checkpoint
    /// does (see `retention`).
    pinned: Vec<u32>,
    /// File and directory data blocks written into each segment since the writer last entered
    /// it: by the host (`host`), and copied by the cleaner (`copied`). Counts for the cleaner's
    /// figures (a victim holding both mixes data of different ages), not for reuse.
    host: Vec<u32>,
    copied: Vec<u32>,
    /// Host data blocks written so far (since the pool was opened): the clock a block's
    /// lifetime is counted in, as the cleaner's model counts it (in writes, not time).
    clock: u64,
    /// For each segment, `clock` at its newest data: a host write's, or the newest of the
    /// victims a copy came from (`copy_stamp`). 0 for a segment entered since with no data.
    stamp: Vec<u64>,
    /// While a light pass copies: the newest stamp of its victims, which its copies keep.
    copy_stamp: Option<u64>,
    /// Segments holding host data a seal found short-lived (since the writer last entered
    /// them): their copies stay with short-lived data, in the writers' head.
    short: Vec<bool>,
    /// A seal is laying out files found short-lived: the segments their data goes to are
    /// marked `short`.
    short_run: bool,
}

impl SegmentTable {
    /// `count` empty segments of `segment_blocks` blocks.
    pub fn new(count: usize, segment_blocks: u64) -> SegmentTable {
        SegmentTable {
            segment_blocks,
            live: vec![0; count],
            dead_at: vec![0; count],
            soft_dead_at: vec![0; count],
            last_seq: vec![0; count],
            pinned: vec![0; count],
            host: vec![0; count],
            copied: vec![0; count],
            clock: 0,
            stamp: vec![0; count],
            copy_stamp: None,
            short: vec![false; count],
            short_run: false,
        }
    }

    pub fn live(&self, s: usize) -> u32 {
        self.live[s]
    }

    /// Every segment's live count, in segment order.
    pub fn live_counts(&self) -> &[u32] {
        &self.live
    }

    pub fn pinned(&self, s: usize) -> u32 {
        self.pinned[s]
    }

    /// Blocks live or pinned, over every segment: what no cleaning can give back.
    pub fn used_blocks(&self) -> u64 {
        let live: u64 = self.live.iter().map(|&n| u64::from(n)).sum();
        live + self.pinned.iter().map(|&n| u64::from(n)).sum::<u64>()
    }

    /// Every segment's pinned count, in segment order.
    #[cfg(test)]
    pub fn pinned_counts(&self) -> &[u32] {
        &self.pinned
    }

    pub fn dead_at(&self, s: usize) -> u64 {
        self.dead_at[s]
    }

    pub fn soft_dead_at(&self, s: usize) -> u64 {
        self.soft_dead_at[s]
    }

    pub fn last_seq(&self, s: usize) -> u64 {
        self.last_seq[s]
    }

    /// Segment `s` holds nothing the live tree or a retained checkpoint references.
    pub fn is_empty(&self, s: usize) -> bool {
        self.live[s] == 0 && self.pinned[s] == 0
    }

    /// A block of segment `s` became live.
    pub fn add_live(&mut self, s: usize) {
        assert!(
            u64::from(self.live[s]) < self.segment_blocks,
            "segment {s}: more live blocks than the segment holds"
        );
        self.assert_fits(s, 1);
        self.live[s] += 1;
    }

    /// A block of segment `s` became live as recovery counts what a loaded tree references:
    /// `false`, changing nothing, if the segment would hold more than it can (the pool's maps
    /// name a block more than once).
    pub fn add_live_loaded(&mut self, s: usize) -> bool {
        if u64::from(self.live[s]) >= self.segment_blocks {
            return false;
        }
        self.live[s] += 1;
        true
    }

    /// Each block is live or pinned, never both: `n` more of either must fit in segment `s`.
    pub fn assert_fits(&self, s: usize, n: u32) {
        let used = u64::from(self.live[s]) + u64::from(self.pinned[s]);
        assert!(
            used + u64::from(n) <= self.segment_blocks,
            "segment {s}: {} live and {} pinned blocks, {n} more would not fit in its {}",
            self.live[s],
            self.pinned[s],
            self.segment_blocks
        );
    }

    /// The live tree dropped a block of segment `s`.
    pub fn drop_live(&mut self, s: usize) {
        assert!(self.live[s] > 0, "segment {s}: live count underflow");
        self.live[s] -= 1;
    }

    /// A block of segment `s` the live tree dropped is pinned by a retained checkpoint.
    pub fn add_pinned(&mut self, s: usize) {
        assert!(
            u64::from(self.pinned[s]) < self.segment_blocks,
            "segment {s}: more pinned blocks than the segment holds"
        );
        self.pinned[s] += 1;
    }

    /// `n` blocks of segment `s` the live tree dropped are pinned (a run of them).
    pub fn add_pinned_blocks(&mut self, s: usize, n: u32) {
        assert!(
            u64::from(self.pinned[s]) + u64::from(n) <= self.segment_blocks,
            "segment {s}: more pinned blocks than the segment holds"
        );
        self.assert_fits(s, n);
        self.pinned[s] += n;
    }

    /// `n` pinned blocks of segment `s` were released.
    pub fn drop_pinned_blocks(&mut self, s: usize, n: u32) {
        assert!(self.pinned[s] >= n, "segment {s}: pinned count underflow");
        self.pinned[s] -= n;
    }

    /// Log `seq` dropped a block of segment `s` in a way roll-forward does not replay.
    pub fn note_dead(&mut self, s: usize, seq: u64) {
        self.dead_at[s] = self.dead_at[s].max(seq);
    }

    /// Segment `s` may be reused once every log below `at` is durable (a data-only run that
    /// superseded blocks in it ended; `u64::MAX` while it has not).
    pub fn set_soft_dead(&mut self, s: usize, at: u64) {
        self.soft_dead_at[s] = at;
    }

    /// As [`SegmentTable::set_soft_dead`], keeping a later bound already set.
    pub fn raise_soft_dead(&mut self, s: usize, at: u64) {
        self.soft_dead_at[s] = self.soft_dead_at[s].max(at);
    }

    /// The writer entered segment `s`: what it held before is gone.
    pub fn entered(&mut self, s: usize) {
        self.host[s] = 0;
        self.copied[s] = 0;
        self.stamp[s] = 0;
        self.short[s] = false;
    }

    /// `blocks` of data were written into segment `s`, copied by the cleaner or by the host.
    pub fn note_data(&mut self, s: usize, blocks: u64, copied: bool) {
        let count = if copied {
            &mut self.copied[s]
        } else {
            &mut self.host[s]
        };
        // Saturating: a figure, and a segment holds far fewer blocks than this bounds.
        *count = count.saturating_add(u32::try_from(blocks).unwrap_or(u32::MAX));
        if blocks == 0 {
            return;
        }
        if self.short_run && !copied {
            self.short[s] = true;
        }
        let stamp = match (copied, self.copy_stamp) {
            (true, Some(stamp)) => stamp,
            (true, None) => self.clock,
            (false, _) => {
                self.clock = self.clock.saturating_add(blocks);
                self.clock
            }
        };
        self.stamp[s] = self.stamp[s].max(stamp);
    }

    /// A seal starts (`true`) or ends laying out the data of files found short-lived.
    pub fn set_short_run(&mut self, on: bool) {
        self.short_run = on;
    }

    /// Whether segment `s` holds host data a seal found short-lived.
    pub fn short_lived(&self, s: usize) -> bool {
        self.short[s]
    }

    /// A light pass starts copying live blocks out of `victims`: its copies keep their newest
    /// stamp, so data that outlived a segment does not look freshly written.
    pub fn start_copies(&mut self, victims: &[usize]) {
        self.copy_stamp = Some(victims.iter().map(|&v| self.stamp[v]).max().unwrap_or(0));
    }

    /// The light pass's copies are laid out.
    pub fn end_copies(&mut self) {
        self.copy_stamp = None;
    }

    /// Whether the data of segment `s` was written (or, for copies, first written) less than
    /// `than` host blocks ago: what a block replaced there lived, as well as the segment tells
    /// it. The time since the segment's newest data, not since the block's own write: a
    /// segment holds no per-block times, and the model found the estimate close
    /// (`cleaner_sim::Heads::ByLifetimeOfSegment`).
    pub fn lived_less_than(&self, s: usize, than: u64) -> bool {
        self.stamp
            .get(s)
            .is_some_and(|&stamp| stamp != 0 && self.clock - stamp < than)
    }

    /// Host data blocks written so far: the clock segment stamps and files' write rates
    /// (`WriteRate`) count in.
    pub fn host_clock(&self) -> u64 {
        self.clock
    }

    /// Whether segment `s` holds data both of the host and copied by the cleaner since the
    /// writer last entered it.
    pub fn mixed(&self, s: usize) -> bool {
        self.host[s] > 0 && self.copied[s] > 0
    }

    /// Log `seq` was laid out in segment `s`.
    pub fn note_written(&mut self, s: usize, seq: u64) {
        self.last_seq[s] = self.last_seq[s].max(seq);
    }
}

/// The segment that holds `block` (a block of the segment area).
pub(in crate::tbfs) fn segment_of(block: u64, segment_blocks: u64) -> usize {
    ((block - crate::tbfs::format::FIRST_SEGMENT_BLOCK) / segment_blocks) as usize
}

#[cfg(test)]
mod tests {
    use super::SegmentTable;

    #[test]
    fn counts_move_within_the_segment_and_report_an_overfull_load() {
        let mut t = SegmentTable::new(2, 2);
        t.add_live(1);
        t.add_live(1);
        assert_eq!(t.live_counts(), &[0, 2]);
        assert!(
            !t.add_live_loaded(1),
            "a third block in a two-block segment"
        );
        assert_eq!(t.live(1), 2, "a refused load changes nothing");
        t.drop_live(1);
        t.add_pinned(1);
        assert!(!t.is_empty(1));
        t.drop_live(1);
        t.drop_pinned_blocks(1, 1);
        assert!(t.is_empty(1) && t.is_empty(0));
    }

    #[test]
    fn a_segment_is_mixed_once_it_holds_host_data_and_copies_until_entered_again() {
        let mut t = SegmentTable::new(2, 8);
        t.note_data(0, 3, false);
        assert!(!t.mixed(0), "host data alone");
        t.note_data(0, 2, true);
        assert!(t.mixed(0) && !t.mixed(1));
        t.entered(0);
        assert!(!t.mixed(0), "entered again: nothing of before counts");
        t.note_data(1, 4, true);
        assert!(!t.mixed(1), "copies alone");
    }

    #[test]
    fn a_segment_tells_its_data_short_lived_by_host_writes_since_its_newest() {
        let mut t = SegmentTable::new(3, 8);
        assert!(!t.lived_less_than(0, 100), "nothing written: long-lived");
        t.note_data(0, 4, false);
        t.note_data(1, 4, false);
        assert!(t.lived_less_than(0, 5) && !t.lived_less_than(0, 4));
        assert!(t.lived_less_than(1, 1));
        // Copies keep their victims' newest stamp, however late they are written.
        t.start_copies(&[0]);
        t.note_data(1, 50, false);
        t.note_data(2, 2, true);
        t.end_copies();
        assert!(!t.lived_less_than(2, 54) && t.lived_less_than(2, 55));
        t.entered(1);
        assert!(
            !t.lived_less_than(1, u64::MAX),
            "entered again: its data is gone"
        );
        t.set_short_run(true);
        t.note_data(1, 1, false);
        t.note_data(2, 1, true);
        t.set_short_run(false);
        t.note_data(0, 1, false);
        assert!(t.short_lived(1), "host data of a short-lived run");
        assert!(
            !t.short_lived(2) && !t.short_lived(0),
            "copies, and host data of no such run"
        );
        t.entered(1);
        assert!(!t.short_lived(1));
    }

    #[test]
    #[should_panic(expected = "live count underflow")]
    fn dropping_a_live_block_of_an_empty_segment_is_caught() {
        SegmentTable::new(1, 4).drop_live(0);
    }

    #[test]
    #[should_panic(expected = "pinned count underflow")]
    fn releasing_a_pin_of_a_segment_with_none_is_caught() {
        SegmentTable::new(1, 4).drop_pinned_blocks(0, 1);
    }

    #[test]
    #[should_panic(expected = "more live blocks than the segment holds")]
    fn more_live_blocks_than_a_segment_holds_are_caught() {
        let mut t = SegmentTable::new(1, 1);
        t.add_live(0);
        t.add_live(0);
    }

    #[test]
    #[should_panic(
        expected = "segment 0: 3 live and 1 pinned blocks, 1 more would not fit in its 4"
    )]
    fn a_live_block_beside_a_full_segment_of_live_and_pinned_is_caught() {
        let mut t = SegmentTable::new(1, 4);
        for _ in 0..4 {
            t.add_live(0);
        }
        t.drop_live(0);
        t.add_pinned(0);
        t.add_live(0);
    }

    #[test]
    #[should_panic(
        expected = "segment 0: 2 live and 1 pinned blocks, 2 more would not fit in its 4"
    )]
    fn pins_beside_a_full_segment_of_live_and_pinned_are_caught() {
        let mut t = SegmentTable::new(1, 4);
        for _ in 0..3 {
            t.add_live(0);
        }
        t.drop_live(0);
        t.add_pinned(0);
        t.add_pinned_blocks(0, 2);
    }
}
