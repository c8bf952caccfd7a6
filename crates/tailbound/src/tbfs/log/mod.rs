//! Logs: the types of a log being built, sealed, queued and written, and the writer's state.
//!
//! - `build`: laying out a log in the current segment, and advancing segments.
//! - `write`: the queue, the log writer, ahead payloads, flushes and the durability watermarks.
//! - `data`: what of a file's buffers a data-only log may take, and dropping those written
//!   (`commit/seal.rs` seals them).

use std::sync::{Arc, Mutex};

use crate::tbfs::blocks::recycle_blocks;
use crate::tbfs::format::{self, Block};
use crate::tbfs::inode::InodeCell;
use crate::tbfs::Result;

pub(crate) mod build;
pub(crate) mod data;
pub(crate) mod pipeline;
pub(crate) mod superblocks;
pub(crate) mod write;

/// Where the writer stands ([`Writer::place`]): the writers' log head (its block and segment),
/// the segment it goes to next, and the cleaner's log head's segment if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriterPlace {
    pub pos: u64,
    pub cur_seg: u64,
    pub next_seg: u64,
    pub copies_seg: Option<u64>,
}

impl WriterPlace {
    /// Segment `s` is one a log head is in or the one the writer goes to next
    /// ([`Writer::holds_segment`]).
    pub fn holds_segment(&self, s: u64) -> bool {
        s == self.cur_seg || s == self.next_seg || self.copies_seg == Some(s)
    }
}

/// Where the next log goes and the log being built (under `meta`). Logs are laid out here and
/// sealed into the log queue (`LogPipeline`); the log writer ([`LogWriter`]) writes them in order.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pos: u64,
    cur_seg: u64,
    next_seg: u64,
    /// Sequence of the next log.
    seq: u64,
    /// The log head the chain is not in, `(block, segment)`: the cleaner's while the chain is
    /// in the writers' head, the writers' while it is in the cleaner's (`copies`). The chain
    /// moves between them by jumps (`format::DescKind::Jump`); `pos` and `cur_seg` are the
    /// head it is in.
    parked: Option<(u64, u64)>,
    /// The chain is in the cleaner's log head: a light pass is laying out its copies.
    copies: bool,
    log: Option<LogBuild>,
    /// Buffered blocks the next sealed log releases once it is written: `(inode, [(block,
    /// generation)])`, set by a commit just before its last log is sealed.
    release: Vec<Release>,
    /// Ahead payloads sealed under the current hold of `meta`: the holder writes them after
    /// it lets go ([`StateGuard`]).
    sealed_ahead: Vec<Arc<AheadPayload>>,
    /// Smaller ahead logs sealed under the current hold, written whole by the log writer:
    /// `(sequence, inodes, flush)`.
    sealed_small: Vec<SealedSmall>,
    /// Whose I/O the data-only logs being laid out are (their files' last writer's); `None`
    /// outside a data commit, so other logs stay the I/O of the thread writing them.
    charge: Option<crate::sched::Charge>,
    /// A checkpoint a superblock follows at once is being laid out: its logs are not flushed on
    /// their own under `every-checkpoint`, the superblock's flush covers them (see
    /// [`Engine::commit_checkpoint_for_superblock`]).
    refreshing: bool,
    /// A direct write's logs, or a write-behind's, are being laid out: every one with a payload
    /// has it written apart from its summary, however small, so the write waits for no other
    /// log ([`Engine::write_direct`]) and no other writer writes its data
    /// ([`Engine::commit_behind_log`]).
    direct: bool,
}

/// A small ahead log sealed under the current hold of `meta`: `(sequence, inodes, flush)`.
pub(crate) type SealedSmall = (u64, Vec<u64>, bool);

/// The rules of the writer's place, kept by the methods that move it (in `build`):
///
/// - The position only moves forward within the current segment, and a log's sequence is one
///   above the one before it: [`Writer::log_closed`].
/// - The next segment is never the current one: [`Writer::enter_next_segment`],
///   [`Writer::set_next_seg`].
/// - A commit hands the buffers its last log releases to the writer once, and the log sealed
///   next takes them all ([`Writer::hand_release`]).
impl Writer {
    /// A writer at block `pos` of segment `cur_seg`, going to `next_seg` after it (`u64::MAX`
    /// while recovery has not chosen one), whose next log is numbered `seq`.
    pub fn new(pos: u64, cur_seg: u64, next_seg: u64, seq: u64) -> Writer {
        Writer {
            pos,
            cur_seg,
            next_seg,
            seq,
            ..Writer::default()
        }
    }

    /// The sequence of the next log.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The block the next log starts at.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn cur_seg(&self) -> u64 {
        self.cur_seg
    }

    pub fn next_seg(&self) -> u64 {
        self.next_seg
    }

    /// Segment `s` is one a log head is in or the one the writer goes to next: none of them
    /// may be cleaned or handed out.
    pub fn holds_segment(&self, s: u64) -> bool {
        self.place().holds_segment(s)
    }

    /// Where the writer stands, as a value for the parts that count space around it: the
    /// writers' head (the cleaner's, when it has become the only one), whichever the chain
    /// is in.
    pub fn place(&self) -> WriterPlace {
        let (pos, cur_seg, copies_seg) = match (self.copies, self.parked) {
            (true, Some((pos, seg))) => (pos, seg, Some(self.cur_seg)),
            (false, parked) => (self.pos, self.cur_seg, parked.map(|(_, seg)| seg)),
            (true, None) => (self.pos, self.cur_seg, None),
        };
        WriterPlace {
            pos,
            cur_seg,
            next_seg: self.next_seg,
            copies_seg,
        }
    }

    /// The log head the chain is not in, `(block, segment)`, if there is one.
    pub fn parked(&self) -> Option<(u64, u64)> {
        self.parked
    }

    /// Whether the chain is in the cleaner's log head.
    pub fn in_copies(&self) -> bool {
        self.copies
    }

    /// A jump log was sealed: the chain goes on at block `pos` of segment `seg`, the cleaner's
    /// log head if `copies`. `seg` is either the parked head's (at its block) or, with `next`,
    /// the segment the writer was to go to next, entered at `pos`, its start, with `next` to
    /// follow it. The head left is parked where the jump left it if `keep_left` (room for a
    /// log is left in its segment), else given up: its segment's rest stays unwritten.
    pub fn jumped(&mut self, pos: u64, seg: u64, next: Option<u64>, copies: bool, keep_left: bool) {
        assert!(
            self.copies != copies,
            "a jump that stays in the {} log head",
            if copies { "cleaner's" } else { "writers'" }
        );
        assert!(self.log.is_none(), "a jump with a log open");
        match next {
            Some(next) => {
                assert!(
                    seg == self.next_seg && next != seg && self.parked.is_none(),
                    "a jump into segment {seg}, the writer's next being {} and one parked",
                    self.next_seg
                );
                self.next_seg = next;
            }
            None => assert_eq!(
                self.parked,
                Some((pos, seg)),
                "a jump to where no log head is parked"
            ),
        }
        self.parked = keep_left.then_some((self.pos, self.cur_seg));
        self.pos = pos;
        self.cur_seg = seg;
        self.copies = copies;
    }

    /// The cleaner's log head becomes the writers' (the writers' head was given up: no room
    /// for a log was left in it).
    pub fn copies_become_writers(&mut self) {
        assert!(
            self.copies && self.parked.is_none(),
            "the cleaner's head taken over with the writers' parked"
        );
        self.copies = false;
    }

    /// Recovery chose the segment to go to after the current one (the superblock named none).
    pub fn set_next_seg(&mut self, s: u64) {
        assert!(s != self.cur_seg, "segment {s} chosen to follow itself");
        self.next_seg = s;
    }

    /// The writer enters its next segment at block `start`, and `next` becomes the one after.
    fn enter_next_segment(&mut self, next: u64, start: u64) {
        assert!(
            next != self.next_seg,
            "segment {next} chosen to follow itself"
        );
        assert!(
            self.parked.is_none_or(|(_, p)| p != next),
            "segment {next}, a parked log head's, chosen next"
        );
        self.cur_seg = self.next_seg;
        self.next_seg = next;
        self.pos = start;
    }

    /// The open log was sealed, and the next one starts at `next_pos`, at most `seg_end`.
    fn log_closed(&mut self, next_pos: u64, seg_end: u64) {
        assert!(
            self.pos < next_pos && next_pos <= seg_end,
            "a log sealed at block {} moves the writer to {next_pos} (segment {} ends at \
             {seg_end})",
            self.pos,
            self.cur_seg
        );
        self.seq = self.seq.checked_add(1).expect("log sequences ran out");
        self.pos = next_pos;
    }

    /// The buffers the next sealed log releases once written (a commit's, just before it seals
    /// its last log). Nothing else may be waiting for release then.
    pub fn hand_release(&mut self, release: Vec<Release>) {
        assert!(
            self.release.is_empty(),
            "{} inodes' buffers handed for release twice",
            self.release.len()
        );
        self.release = release;
    }

    /// Adds one file's buffers to those the next sealed log releases once written (a data-only
    /// log's, before it is sealed).
    pub fn add_release(&mut self, release: Release) {
        self.release.push(release);
    }

    /// Whose I/O the logs laid out from now on are charged to (`None`: nobody's).
    pub fn set_charge(&mut self, charge: Option<crate::sched::Charge>) {
        self.charge = charge;
    }

    /// Marks the checkpoint being laid out as one a superblock follows at once; returns what it
    /// was, for the caller to put back.
    pub fn set_refreshing(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.refreshing, on)
    }

    /// Whether the checkpoint being laid out is one a superblock follows at once.
    pub fn refreshing(&self) -> bool {
        self.refreshing
    }

    /// A direct write's (or a write-behind's) logs begin (`true`) or end being laid out; they
    /// do not nest.
    pub fn set_direct(&mut self, on: bool) {
        assert!(
            self.direct != on,
            "a direct write's logs laid out within another's"
        );
        self.direct = on;
    }

    /// Ahead payloads were sealed under this hold of `meta`, and no smaller logs.
    pub fn only_ahead_sealed(&self) -> bool {
        !self.sealed_ahead.is_empty() && self.sealed_small.is_empty()
    }

    /// What was sealed under this hold of `meta`, for its holder to write after letting go.
    pub fn take_sealed(&mut self) -> (Vec<Arc<AheadPayload>>, Vec<SealedSmall>) {
        (
            std::mem::take(&mut self.sealed_ahead),
            std::mem::take(&mut self.sealed_small),
        )
    }
}

/// Buffered blocks of one inode a log writes, as `(block, generation)`: they go once it is
/// written, unless rewritten meanwhile.
pub(crate) type Release = (Arc<InodeCell>, Vec<(u64, u64)>);

#[derive(Debug)]
pub(crate) struct LogBuild {
    pub start: u64,
    pub flags: u16,
    pub descriptors: Vec<format::Descriptor>,
    /// Payload blocks added so far, in order.
    pub payload: Vec<Arc<Block>>,
    /// Their CRCs where already known (buffered file blocks), in the same order.
    pub crcs: Vec<Option<u32>>,
}

/// What waits in the log queue (`LogPipeline`), in the order the log writer writes it. No log
/// waits for an earlier payload; a superblock does, written apart
/// ([`Engine::write_handed_off_superblocks`]).
#[derive(Debug)]
pub(crate) enum Queued {
    Log(SealedLog),
    /// A superblock naming the checkpoint that ends right before log `next.sequence`: written
    /// (after a flush, and flushed) once every log before that is, with the CRC of the last.
    Superblock(format::Superblock),
}

impl Queued {
    /// Written by `write_logs_until(seq)` when this is below `seq`: a log's sequence, or for a
    /// superblock the sequence of the log after it (so waiting for one's own logs does not
    /// wait for a superblock sealed behind them).
    pub fn order(&self) -> u64 {
        match self {
            Queued::Log(l) => l.summary.sequence,
            Queued::Superblock(sb) => sb.next.sequence,
        }
    }
}

/// A log laid out under `meta` and waiting for the log writer: its place, sequence and
/// descriptors are final; the writer fills in the payload CRC and the previous log's CRC.
#[derive(Debug)]
pub(crate) struct SealedLog {
    pub start: u64,
    pub summary: format::Summary,
    pub payload: Vec<Arc<Block>>,
    /// The payload blocks' CRCs where known ([`payload_crc`]).
    pub crcs: Vec<Option<u32>>,
    /// A large data-only log's payload, written by the thread that sealed it (or by whoever
    /// needs it done first) while the log writer writes only its summary.
    pub ahead: Option<Arc<AheadPayload>>,
    /// Flush the device after it (the barrier policy).
    pub flush: bool,
}

/// The CRC of a payload, put together from its blocks' CRCs where they are known (taken when
/// the blocks were written, so the blocks are not read again here) and computed from the
/// others. Debug builds check every known one against the bytes.
pub(crate) fn payload_crc(blocks: &[Arc<Block>], crcs: &[Option<u32>]) -> u32 {
    debug_assert_eq!(blocks.len(), crcs.len());
    blocks.iter().zip(crcs).fold(0, |crc, (b, known)| {
        let own = known.unwrap_or_else(|| format::crc_blocks(&b[..]));
        debug_assert_eq!(own, format::crc_blocks(&b[..]), "a stale block CRC");
        format::crc_extend_block(crc, own)
    })
}

/// Where an ahead payload's write stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AheadState {
    Pending,
    Writing,
    Done,
    Failed,
}

/// The payload of a data-only log written apart from its summary (`FLAG_AHEAD`): concurrently
/// with other threads' payloads, each through `sched` with the tenant of the thread writing it,
/// so no log waits behind another it does not depend on.
#[derive(Debug)]
pub(crate) struct AheadPayload {
    pub seq: u64,
    pub start: u64,
    pub blocks: Vec<Arc<Block>>,
    /// Their CRCs where known ([`payload_crc`]).
    pub crcs: Vec<Option<u32>>,
    /// The inodes the log names (sorted): a later log of one of them waits for this one.
    pub inos: Vec<u64>,
    /// Flush after it (the barrier policy).
    pub flush: bool,
    /// Whose I/O it is, whichever thread writes it.
    pub charge: Option<crate::sched::Charge>,
    pub crc: std::sync::OnceLock<u32>,
    /// Its state, and a condition variable to wait for it on: `parking_lot`'s, whose
    /// notifications make no system call when no thread waits (the standard one's did, two per
    /// payload).
    pub state: parking_lot::Mutex<AheadState>,
    pub done: parking_lot::Condvar,
    /// Its chunks in the device, once started and until a thread takes them to wait for them
    /// ([`Engine::start_ahead`]): whoever needs the payload complete finishes it, so the thread
    /// that started it may go on meanwhile (a direct write makes its next piece) without
    /// anyone waiting on it.
    pub started: Mutex<Option<Result<Vec<crate::dev::PendingWrite>>>>,
}

impl Drop for AheadPayload {
    fn drop(&mut self) {
        // Its buffers go back to the spares if it was their last holder, as the log writer
        // does with the logs it writes whole (`write_sealed`): a payload is often dropped after
        // its files' buffers are (`drop_written`), and handing its blocks to the allocator here
        // had the next writes allocate them again.
        recycle_blocks(std::mem::take(&mut self.blocks));
    }
}

impl AheadPayload {
    /// The payload's CRC, computed from memory by whoever needs it first.
    pub fn crc(&self) -> u32 {
        *self
            .crc
            .get_or_init(|| payload_crc(&self.blocks, &self.crcs))
    }

    /// Takes the payload's write on: true if it was not taken yet.
    pub fn claim(&self) -> bool {
        let mut st = self.state.lock();
        if *st == AheadState::Pending {
            *st = AheadState::Writing;
            true
        } else {
            false
        }
    }

    pub fn finish(&self, ok: bool) {
        *self.state.lock() = if ok {
            AheadState::Done
        } else {
            AheadState::Failed
        };
        self.done.notify_all();
    }

    /// Hands over its chunks in the device (under the state lock, so a thread waiting for the
    /// payload sees them: [`Engine::wait_payload`]).
    pub fn set_started(&self, started: Result<Vec<crate::dev::PendingWrite>>) {
        let _st = self.state.lock();
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        self.done.notify_all();
    }
}

/// The log writer's state, under the log writer's lock (`LogPipeline::lock_writer`): the chain
/// of summary CRCs and whether a written log still waits for a device flush.
#[derive(Debug, Default)]
pub(crate) struct LogWriter {
    pub prev_crc: u32,
    pub unflushed: bool,
    /// A log's summary and payload, for devices that do not take each block in place.
    pub buf: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tbfs::inode::InodeState;
    use crate::tbfs::FileKind;

    #[test]
    fn a_sealed_log_moves_the_writer_forward_and_numbers_the_next() {
        let mut w = Writer::new(10, 0, 1, 5);
        w.log_closed(13, 64);
        assert_eq!((w.pos(), w.seq()), (13, 6));
        w.enter_next_segment(2, 64);
        assert_eq!((w.cur_seg(), w.next_seg(), w.pos()), (1, 2, 64));
        assert!(w.holds_segment(1) && w.holds_segment(2) && !w.holds_segment(0));
    }

    #[test]
    fn a_jump_that_gives_up_the_writers_head_leaves_one_head_held() {
        // Writers at block 10 of segment 0; the cleaner's head opens at segment 1 (the next),
        // and the chain comes back: the cleaner's head is parked where it stopped.
        let mut w = Writer::new(10, 0, 1, 5);
        w.jumped(64, 1, Some(2), true, true);
        assert_eq!(
            (w.cur_seg(), w.next_seg(), w.parked()),
            (1, 2, Some((10, 0)))
        );
        w.jumped(10, 0, None, false, true);
        assert_eq!(w.parked(), Some((64, 1)));
        assert!(w.holds_segment(0) && w.holds_segment(1) && w.holds_segment(2));
        // Ages stopped differing: the jump into the parked head gives up the writers', and
        // after the copies the cleaner's head is the writers'. Segment 0's rest is no head's.
        w.jumped(64, 1, None, true, false);
        assert_eq!(w.parked(), None);
        w.copies_become_writers();
        assert!(!w.in_copies());
        let place = w.place();
        assert_eq!(
            (place.pos, place.cur_seg, place.next_seg, place.copies_seg),
            (64, 1, 2, None)
        );
        assert!(!w.holds_segment(0) && w.holds_segment(1) && w.holds_segment(2));
    }

    #[test]
    #[should_panic(expected = "moves the writer to")]
    fn a_log_sealed_without_moving_the_writer_fires_the_assertion() {
        Writer::new(10, 0, 1, 5).log_closed(10, 64);
    }

    #[test]
    #[should_panic(expected = "moves the writer to")]
    fn a_log_sealed_past_its_segment_fires_the_assertion() {
        Writer::new(60, 0, 1, 5).log_closed(65, 64);
    }

    #[test]
    #[should_panic(expected = "chosen to follow itself")]
    fn entering_a_segment_that_follows_itself_fires_the_assertion() {
        Writer::new(10, 0, 1, 5).enter_next_segment(1, 64);
    }

    #[test]
    #[should_panic(expected = "chosen to follow itself")]
    fn recovery_choosing_the_current_segment_next_fires_the_assertion() {
        Writer::new(10, 3, u64::MAX, 5).set_next_seg(3);
    }

    #[test]
    #[should_panic(expected = "handed for release twice")]
    fn buffers_handed_for_release_twice_fire_the_assertion() {
        let cell = Arc::new(InodeCell {
            ino: 2,
            st: Mutex::new(InodeState::new(FileKind::File, 0o644, 0, (0, 0))),
        });
        let mut w = Writer::default();
        w.hand_release(vec![(cell.clone(), vec![(0, 1)])]);
        w.hand_release(vec![(cell, vec![(1, 2)])]);
    }

    #[test]
    #[should_panic(expected = "within another's")]
    fn nested_direct_writes_fire_the_assertion() {
        let mut w = Writer::default();
        w.set_direct(true);
        w.set_direct(true);
    }
}
