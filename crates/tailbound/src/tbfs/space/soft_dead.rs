//! Segments whose superseded blocks wait for a later log to be durable before the segment may
//! be reused: those of the open run of data-only logs (reusable once its last log is durable,
//! since recovery replays a file's part of a run only whole), and those of runs an error cut
//! short (reusable once a checkpoint, which writes the maps in memory, is durable). Changed only
//! through [`SoftDead`]'s methods, under the `meta` lock.

use crate::tbfs::space::segments::SegmentTable;

/// The segments a data-only run left unusable until a later log is durable.
///
/// Rule: a segment in the open run has no reuse bound but `u64::MAX` in the segment table until
/// the run's last log is sealed, and only this part lowers it.
#[derive(Debug, Default)]
pub(crate) struct SoftDead {
    /// Segments in which the open run of data-only logs superseded blocks
    /// (`State::seg_supersede`): unusable until the run's last log is durable
    /// (`recovery::unfinished_run_data`).
    run: Vec<usize>,
    /// The same for runs an error cut short before their last log: the maps in memory name what
    /// recovery would leave out, so these wait for a checkpoint (which writes those maps) to be
    /// durable.
    to_checkpoint: Vec<usize>,
}

impl SoftDead {
    /// The open run superseded a block of segment `s`: `s` may not be reused until the run's
    /// last log is sealed, which says from when.
    pub(crate) fn superseded(&mut self, seg: &mut SegmentTable, s: usize) {
        seg.set_soft_dead(s, u64::MAX);
        if self.run.last() != Some(&s) {
            self.run.push(s);
        }
    }

    /// A log that begins a run (of data-only logs, or a checkpoint's) opens: a run still open
    /// was cut short by an error before its last log, and its segments wait for a checkpoint.
    pub(crate) fn run_begins(&mut self) {
        if !self.run.is_empty() {
            let cut = std::mem::take(&mut self.run);
            self.to_checkpoint.extend(cut);
        }
    }

    /// The run's last log, `seq`, was sealed: what the run superseded may be reused once that
    /// log is durable, unless a run cut short also superseded blocks there: recovery leaves
    /// that run out and reads the blocks it superseded, so the segment still waits for a
    /// checkpoint.
    pub(crate) fn run_ended(&mut self, seg: &mut SegmentTable, seq: u64) {
        let mut run = std::mem::take(&mut self.run);
        run.sort_unstable();
        run.dedup();
        for s in run {
            assert_eq!(
                seg.soft_dead_at(s),
                u64::MAX,
                "segment {s}: its soft-dead bound was lowered while a run still held it"
            );
            if !self.to_checkpoint.contains(&s) {
                seg.set_soft_dead(s, seq + 1);
            }
        }
    }

    /// A checkpoint's last log, `seq`, was sealed: the maps in memory are in it, cut-short runs
    /// included, so their segments may be reused once it is durable.
    pub(crate) fn checkpoint_ended(&mut self, seg: &mut SegmentTable, seq: u64) {
        for s in std::mem::take(&mut self.to_checkpoint) {
            seg.set_soft_dead(s, seq + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SoftDead;
    use crate::tbfs::space::segments::SegmentTable;

    #[test]
    fn a_runs_segments_are_reusable_once_its_last_log_is_durable() {
        let mut seg = SegmentTable::new(4, 8);
        let mut d = SoftDead::default();
        d.run_begins();
        d.superseded(&mut seg, 1);
        d.superseded(&mut seg, 2);
        d.superseded(&mut seg, 1);
        assert_eq!(seg.soft_dead_at(1), u64::MAX);
        d.run_ended(&mut seg, 10);
        assert_eq!((seg.soft_dead_at(1), seg.soft_dead_at(2)), (11, 11));
        assert_eq!(seg.soft_dead_at(0), 0, "untouched");
    }

    #[test]
    fn a_cut_short_runs_segments_are_reusable_once_a_checkpoint_is_durable() {
        let mut seg = SegmentTable::new(4, 8);
        let mut d = SoftDead::default();
        d.run_begins();
        d.superseded(&mut seg, 1);
        // An error ends the run before its last log; the next run ends.
        d.run_begins();
        d.superseded(&mut seg, 3);
        d.run_ended(&mut seg, 20);
        assert_eq!(seg.soft_dead_at(3), 21);
        assert_eq!(seg.soft_dead_at(1), u64::MAX, "waits for a checkpoint");
        d.checkpoint_ended(&mut seg, 30);
        assert_eq!(seg.soft_dead_at(1), 31);
    }

    #[test]
    fn a_segment_a_cut_short_run_holds_waits_for_a_checkpoint_when_a_later_run_ends() {
        let mut seg = SegmentTable::new(4, 8);
        let mut d = SoftDead::default();
        d.run_begins();
        d.superseded(&mut seg, 1);
        // Cut short; the next run supersedes another block of the same segment and ends.
        d.run_begins();
        d.superseded(&mut seg, 1);
        d.superseded(&mut seg, 2);
        d.run_ended(&mut seg, 20);
        assert_eq!(seg.soft_dead_at(2), 21);
        assert_eq!(
            seg.soft_dead_at(1),
            u64::MAX,
            "the cut run's superseded blocks are still what recovery reads"
        );
        d.checkpoint_ended(&mut seg, 30);
        assert_eq!(seg.soft_dead_at(1), 31);
    }

    #[test]
    #[should_panic(expected = "soft-dead bound was lowered")]
    fn a_bound_lowered_under_an_open_run_is_caught() {
        let mut seg = SegmentTable::new(2, 8);
        let mut d = SoftDead::default();
        d.superseded(&mut seg, 0);
        seg.set_soft_dead(0, 5);
        d.run_ended(&mut seg, 9);
    }
}
