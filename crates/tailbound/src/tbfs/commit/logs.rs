//! Opening and closing logs, and entering segments: what the writer's log building (`log::build`)
//! does told to the other parts: the segment table, retention's segment ages, soft-dead runs,
//! the refresh's byte count and the background cleaner's read-ahead.

use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::format::{FLAG_BEGIN, FLAG_CHECKPOINT, FLAG_DATA_ONLY, FLAG_END, FLAG_PAD};
use crate::tbfs::limits::COPY_HEAD_MIN_SEGMENTS;
use crate::tbfs::log::build::ClosedLog;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

impl Engine {
    /// The free segment to follow the writer's next one: the first free after it.
    pub(crate) fn pick_free_segment(&self, m: &State) -> Option<u64> {
        let n = self.segment_count();
        (1..=n)
            .map(|i| (m.writer.next_seg() + i) % n)
            .find(|&s| self.segment_free(m, s as usize))
    }

    pub(crate) fn advance_segment(&self, m: &mut State) -> Result<()> {
        let staged_full = m.staged_no_segment();
        let Some(next) = self.pick_free_segment(m).filter(|_| !staged_full) else {
            // The space check before every commit keeps room for all it writes, so this is a
            // commit whose estimate fell short. Its first logs are sealed and the maps in
            // memory name them, but the rest of the commit has nowhere to go: memory no longer
            // matches what can reach storage. The pool stops here, as after a failed write;
            // reopening it recovers every write that was acknowledged.
            let err = Error::NoSpace(
                "no free segment for the next log in the middle of a commit; the pool takes no \
                 more writes until it is reopened, and recovery keeps every acknowledged write"
                    .into(),
            );
            self.poison(&err);
            return Err(err);
        };
        self.enter_segment(&mut m.writer, next);
        self.entered_fresh_segment(m, next);
        Ok(())
    }

    /// The writer entered a fresh segment (the one it was to go to next), and picked `next` to
    /// follow it: tells the other parts.
    fn entered_fresh_segment(&self, m: &mut State, next: u64) {
        // Before a byte of it changes: a client reading it straight from the pool must see its
        // lease revoked (`Watcher::segment_reused`).
        self.watchers.segment_reused(next);
        // Whatever the background cleaner read of it before is about to be overwritten.
        m.bg_clean.read.remove(&(next as usize));
        // The writer enters `next` after this segment: let the device get it ready now.
        self.dev().prepare_write(
            self.seg_start(next) * BLOCK_U64,
            self.segment_blocks() * BLOCK_U64,
        );
        let seg = m.writer.cur_seg() as usize;
        let next = m.ckpt.next_number();
        let pos = m.writer.pos();
        // Its age is that of the newest data its logs hold (set as they close).
        m.life.entered_segment(seg, next, pos);
        m.seg.entered(seg);
    }

    /// Whether a light pass's copies may go to a log head of their own, and the room that
    /// takes beyond the copies: a whole segment less the rest of the cleaner's parked head (the
    /// copies fill that rest first, and the segments the head then enters are free space gone
    /// at once). `None`: the pool has too few segments, or no free segment to open the head in,
    /// or history is kept (a snapshot, a view, pinned blocks or a protection period): there the
    /// pins recovery derives after a pass in the head were found to differ by one from the
    /// running engine's (`the_cleaner_works_around_a_deleted_file_a_snapshot_keeps_and_moves_
    /// its_neighbours_after`), not yet explained, so the copies follow the writers' logs.
    ///
    /// Only while segment ages tell short-lived data from long-lived
    /// (`Cleaning::ages_differ`) is a head opened: where every block dies at one rate (uniform
    /// overwrites) keeping copies apart gains nothing, and the head's rest, held out of the
    /// free count, is kept room that costs. Once ages stop differing, a head still parked takes
    /// the copies once more and becomes the writers' head ([`Engine::copies_enter`]), so no
    /// rest stays held.
    pub(crate) fn copy_head_room(&self, m: &State) -> Option<u64> {
        let history = m.life.snapshot_count() > 0
            || m.life.held_count() > 0
            || m.life.pins().runs().next().is_some()
            || !m.life.protection().is_zero();
        if self.segment_count() < COPY_HEAD_MIN_SEGMENTS || history {
            return None;
        }
        let sb = self.segment_blocks();
        match m.writer.parked() {
            Some(_) => Some(sb - self.copy_head_rest(m)),
            None if m.cleaning.ages_differ() => self.pick_free_segment(m).map(|_| sb),
            None => None,
        }
    }

    /// The blocks left in the cleaner's parked log head: free space the free count leaves out
    /// (only copies may fill it).
    pub(crate) fn copy_head_rest(&self, m: &State) -> u64 {
        match m.writer.parked() {
            Some((pos, seg)) if !m.writer.in_copies() => {
                self.seg_start(seg) + self.segment_blocks() - pos
            }
            _ => 0,
        }
    }

    /// Moves the log chain into the cleaner's log head, before a light pass's first copy: the
    /// parked head, or else a fresh segment, the one the writer was to go to next. Its copies
    /// then share no segment with the writers' logs (docs/ARCHITECTURE.md, "Cleaner").
    pub(crate) fn copies_enter(&self, m: &mut State) -> Result<()> {
        if self.enter_long_lived(m)? {
            self.count(|c| c.light_passes_apart += 1);
        }
        Ok(())
    }

    /// Moves the log chain into the long-lived log head (the cleaner's): a light pass's copies,
    /// or a seal's run of host data whose files' last versions lived long
    /// ([`Engine::long_lived_room`]). `false` when the chain stays where it is (no free segment
    /// to open the head in).
    pub(crate) fn enter_long_lived(&self, m: &mut State) -> Result<bool> {
        assert!(
            !m.writer.in_copies(),
            "the cleaner's log head entered twice"
        );
        match m.writer.parked() {
            Some((pos, seg)) => {
                // Once ages stop differing, the writers' head is given up here (its rest stays
                // unwritten, for the cleaner) and the cleaner's becomes theirs after the pass
                // (`copies_leave`): no head is held apart for copies that gain nothing by it.
                let keep = m.cleaning.ages_differ();
                self.jump(m, pos, seg, None, true, keep)?;
                Ok(true)
            }
            None => {
                // `copy_head_room` found one under this hold of `meta`; without it the copies
                // stay with the writers' logs.
                let Some(next) = self.pick_free_segment(m) else {
                    return Ok(false);
                };
                let seg = m.writer.next_seg();
                self.jump(m, self.seg_start(seg), seg, Some(next), true, true)?;
                self.entered_fresh_segment(m, next);
                Ok(true)
            }
        }
    }

    /// Whether a seal may part host writes by expected lifetime, and the room the long-lived
    /// head takes beyond the data ([`Engine::copy_head_room`]): only while segment ages differ,
    /// where the cleaner's head is open for copies too. Where every block dies at one rate
    /// (uniform overwrites) there is no lifetime to part by, and nothing changes.
    pub(crate) fn long_lived_room(&self, m: &State) -> Option<u64> {
        if !m.cleaning.ages_differ() {
            return None;
        }
        self.copy_head_room(m)
    }

    /// Moves the log chain back to the writers' log head after a light pass's copies; the
    /// cleaner's head stays parked for the next pass. Nothing to do when the chain is not in
    /// the cleaner's head.
    pub(crate) fn copies_leave(&self, m: &mut State) -> Result<()> {
        if !m.writer.in_copies() {
            return Ok(());
        }
        match m.writer.parked() {
            Some((pos, seg)) => self.jump(m, pos, seg, None, false, true),
            None => {
                m.writer.copies_become_writers();
                Ok(())
            }
        }
    }

    /// Seals a jump log where the chain stands, naming block `pos` of segment `seg`, and moves
    /// the chain there ([`Writer::jumped`] for `next` and `copies`). With `keep`, the head left
    /// is parked if a log still fits in its segment; without, it is given up.
    fn jump(
        &self,
        m: &mut State,
        pos: u64,
        seg: u64,
        next: Option<u64>,
        copies: bool,
        keep: bool,
    ) -> Result<()> {
        self.log_open(m, FLAG_PAD);
        self.add_jump(&mut m.writer, pos);
        let closed = self.log_noted(m, 0);
        // A log takes at least two blocks (a summary and a payload block).
        let keep_left = keep && closed.seg_end - m.writer.pos() >= 2;
        m.writer.jumped(pos, seg, next, copies, keep_left);
        if next.is_none() {
            // What the chain writes from `pos` on is newer than the newest checkpoint, as
            // recovery finds it (`State::born_of`).
            m.life.recovered_since_checkpoint(seg as usize, pos);
        }
        Ok(())
    }

    pub(crate) fn log_open(&self, m: &mut State, flags: u16) {
        if flags & FLAG_BEGIN != 0 {
            m.soft_dead.run_begins();
        }
        self.open_log(&mut m.writer, flags);
    }

    /// Seals the open log and queues it for the log writer ([`Engine::seal_log`]); moves on.
    pub(crate) fn log_close(&self, m: &mut State, end_flags: u16) -> Result<()> {
        let closed = self.log_noted(m, end_flags);
        // Keep at least two blocks ahead (a summary and a payload block); a lone last block
        // becomes a pad log so logs keep tiling the segment.
        if closed.seg_end - m.writer.pos() == 1 {
            self.log_open(m, FLAG_PAD);
            self.log_close(m, 0)?;
        } else if m.writer.pos() == closed.seg_end {
            self.advance_segment(m)?;
        }
        Ok(())
    }

    /// Seals the open log ([`Engine::seal_log`]) and tells the other parts.
    fn log_noted(&self, m: &mut State, end_flags: u16) -> ClosedLog {
        let closed = self.seal_log(&mut m.writer, end_flags, m.ckpt.newest());
        let flags = closed.flags;
        if flags & FLAG_DATA_ONLY != 0 && flags & FLAG_END != 0 {
            // The run ends here: what it superseded may be reused once this log is durable.
            m.soft_dead.run_ended(&mut m.seg, closed.seq);
        }
        if flags & FLAG_CHECKPOINT != 0 && flags & FLAG_END != 0 {
            // The maps in memory are in this checkpoint, runs cut short included.
            m.soft_dead.checkpoint_ended(&mut m.seg, closed.seq);
        }
        m.seg.note_written(closed.seg, closed.seq);
        m.seg
            .note_data(closed.seg, closed.data_blocks, m.cleaning.copying());
        if m.writer.in_copies() && closed.data_blocks > 0 {
            let (blocks, copying) = (closed.data_blocks, m.cleaning.copying());
            self.count(|c| {
                if copying {
                    c.copies_apart += blocks;
                } else {
                    c.host_blocks_apart += blocks;
                }
            });
        }
        // The cleaner's copies keep the age of the segments they come from, so data that stays
        // cold looks old to cost-benefit wherever it is moved.
        m.life.log_closed(closed.seg, closed.time_ns);
        m.refresh.note_logged(closed.bytes);
        closed
    }
}
