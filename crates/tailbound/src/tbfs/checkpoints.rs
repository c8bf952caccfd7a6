//! The checkpoint bookkeeping: which checkpoint is the newest, where its root is, what happened
//! since it was written, and how many checkpoints are running. Changed only through
//! [`Checkpoints`]'s methods, under the `meta` lock.

use std::time::Duration;

/// The newest checkpoint and what the live tree did since.
#[derive(Debug, Default)]
pub(crate) struct Checkpoints {
    /// Number of the newest checkpoint (0 in a pool that has none yet).
    number: u64,
    /// Block of its root (0: none).
    root: u64,
    /// Sequence of the log its root closes.
    seq: u64,
    /// The writer's sequence right after it was written in this process (and any pad log after
    /// it): while the writer is there, that checkpoint is the newest state on storage. 0 until
    /// this process writes one.
    next_seq: u64,
    /// When this process wrote it, by the pool's clock (ns).
    at_ns: Option<i64>,
    /// Checkpoints in progress: 2 while one runs inside another's space check.
    depth: u32,
    /// A block it references was superseded without a pin since it was written
    /// (`seg_supersede`): it may no longer be read on its own (as a view or a snapshot).
    superseded: bool,
    /// The pool is being closed: the checkpoint written now is the last before recovery's.
    closing: bool,
}

impl Checkpoints {
    /// The bookkeeping of a pool whose newest checkpoint is `number`, its root at block `root`
    /// in the log of sequence `seq` (as recovery found it).
    pub(crate) fn loaded(number: u64, root: u64, seq: u64) -> Checkpoints {
        Checkpoints {
            number,
            root,
            seq,
            ..Checkpoints::default()
        }
    }

    /// The bookkeeping of a read-only view of checkpoint `number`: only its number is read.
    pub(crate) fn viewed(number: u64) -> Checkpoints {
        Checkpoints {
            number,
            ..Checkpoints::default()
        }
    }

    /// Marks the pool as closing (`true`) or not: the checkpoints written meanwhile are the
    /// last before the next open, whose recovery needs no room kept for it.
    pub(crate) fn set_closing(&mut self, closing: bool) {
        self.closing = closing;
    }

    /// Whether the pool is being closed ([`Checkpoints::set_closing`]).
    pub(crate) fn closing(&self) -> bool {
        self.closing
    }

    /// Number of the newest checkpoint.
    pub(crate) fn newest(&self) -> u64 {
        self.number
    }

    /// The number the next checkpoint gets.
    pub(crate) fn next_number(&self) -> u64 {
        self.number
            .checked_add(1)
            .expect("checkpoint number overflow")
    }

    /// Block of the newest checkpoint's root (0: none).
    pub(crate) fn root(&self) -> u64 {
        self.root
    }

    /// Sequence of the log the newest checkpoint's root closes.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the newest checkpoint, written by this process, is the newest state on storage
    /// with the writer at `writer_seq`: nothing was logged after it.
    pub(crate) fn is_newest_state(&self, writer_seq: u64) -> bool {
        self.next_seq == writer_seq
    }

    /// Whether a checkpoint every `every` is due at `now_ns` (the pool's clock): none written
    /// by this process yet, the last one that long ago, or a clock set back since.
    pub(crate) fn due(&self, every: Duration, now_ns: i64) -> bool {
        let every_ns = i64::try_from(every.as_nanos()).unwrap_or(i64::MAX);
        self.at_ns
            .is_none_or(|t| now_ns < t || now_ns - t >= every_ns)
    }

    /// Checkpoint `number`, its root at block `root` closing the log of sequence `seq`, is
    /// written (sealed) and the writer is at `next_seq`: it is the newest, and nothing has
    /// happened since, at `now_ns` (the pool's clock).
    pub(super) fn written(&mut self, number: u64, root: u64, seq: u64, next_seq: u64, now_ns: i64) {
        assert_eq!(
            number,
            self.next_number(),
            "checkpoints are written in number order"
        );
        assert!(
            seq > self.seq && next_seq > seq,
            "checkpoint {number}'s log sequence {seq} (writer at {next_seq}) is not past the \
             previous checkpoint's {}",
            self.seq
        );
        assert_ne!(root, 0, "checkpoint {number} has no root block");
        self.number = number;
        self.root = root;
        self.seq = seq;
        self.next_seq = next_seq;
        self.at_ns = Some(now_ns);
        self.superseded = false;
    }

    /// A checkpoint starts (inside another one's space check if one is running).
    pub(super) fn enter(&mut self) {
        self.depth = self
            .depth
            .checked_add(1)
            .expect("checkpoint depth overflow");
    }

    /// The checkpoint last started ended, written or not.
    pub(super) fn leave(&mut self) {
        self.depth = self
            .depth
            .checked_sub(1)
            .expect("a checkpoint ended that never started");
    }

    /// Checkpoints in progress.
    pub(super) fn depth(&self) -> u32 {
        self.depth
    }

    /// A block the newest checkpoint references was superseded without a pin.
    pub(crate) fn note_superseded(&mut self) {
        self.superseded = true;
    }

    /// Whether checkpoint `number` is the newest and can no longer be read on its own.
    pub(crate) fn superseded(&self, number: u64) -> bool {
        number == self.number && self.superseded
    }
}

#[cfg(test)]
mod tests {
    use super::Checkpoints;
    use std::time::Duration;

    #[test]
    fn a_written_checkpoint_is_the_newest_and_clears_what_happened_since() {
        let mut c = Checkpoints::loaded(4, 900, 30);
        assert!(c.due(Duration::from_secs(3600), 0), "none written here yet");
        assert!(!c.is_newest_state(30));
        c.note_superseded();
        assert!(c.superseded(4) && !c.superseded(3));
        c.written(5, 1200, 41, 42, 1_000);
        assert_eq!(
            (c.newest(), c.root(), c.seq(), c.next_number()),
            (5, 1200, 41, 6)
        );
        assert!(c.is_newest_state(42) && !c.is_newest_state(43));
        let hour_ns = 3_600_000_000_000;
        assert!(!c.due(Duration::from_secs(3600), 1_000 + hour_ns - 1));
        assert!(c.due(Duration::from_secs(3600), 1_000 + hour_ns));
        assert!(!c.superseded(5));
    }

    #[test]
    #[should_panic(expected = "number order")]
    fn a_checkpoint_out_of_number_order_is_caught() {
        let mut c = Checkpoints::loaded(4, 900, 30);
        c.written(6, 1200, 41, 42, 0);
    }

    #[test]
    #[should_panic(expected = "not past the previous")]
    fn a_checkpoint_whose_log_is_not_newer_is_caught() {
        let mut c = Checkpoints::loaded(4, 900, 30);
        c.written(5, 1200, 30, 31, 0);
    }

    #[test]
    #[should_panic(expected = "never started")]
    fn a_checkpoint_ending_twice_is_caught() {
        let mut c = Checkpoints::default();
        c.enter();
        assert_eq!(c.depth(), 1);
        c.leave();
        c.leave();
    }
}
