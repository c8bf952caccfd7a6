//! The write path, where a file's buffers meet the other parts: a write's turn for room
//! (the room gate, from the budget), the room found before it is buffered, committing once the
//! buffer is past its limit, write-behind and waiting for the bytes in flight (the log
//! pipeline), direct writes and their payloads, and each tenant's write counts. Also marking an
//! inode dirty (the dirty set) and a read's access time (the dirty set and the watchers).
//! Putting bytes into a file's buffers is `buffer.rs`'s.

use std::sync::Arc;

use crate::tbfs::admission::{Turn, WriterKey, Writing};
use crate::tbfs::blocks::*;
use crate::tbfs::budget::Admission;
use crate::tbfs::buffer::write_end;
use crate::tbfs::format::*;
use crate::tbfs::inode::*;
use crate::tbfs::limits::RELATIME_AGE_NS;
use crate::tbfs::limits::*;
use crate::tbfs::log::AheadPayload;
use crate::tbfs::state::{Engine, StateGuard};
use crate::tbfs::{AtimePolicy, Error, Ordering, Result};

/// One piece of a direct write, sealed ([`Engine::direct_piece`]).
pub(crate) struct DirectPiece<'a> {
    /// The end of the write so far.
    end: u64,
    /// Its payloads, started.
    started: Vec<Arc<AheadPayload>>,
    /// It had a turn for room: its tenant is expected back until the payloads are written.
    _writing: Option<Writing<'a>>,
}

impl Engine {
    /// Notes that inode `ino` has buffers or attributes to write; called under its inode lock,
    /// after the change.
    pub(in crate::tbfs) fn mark_dirty(&self, ino: u64) {
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ino);
    }

    /// Writes at `offset`, or at the end of the file for `None`; returns the end and the count.
    /// A file left holding [`Engine::write_behind_bytes`] or more, or written
    /// [`Engine::seals_hot`] bytes of a memory pool at once, goes out right after the
    /// write (written behind, as its writer's I/O) instead of waiting in the buffer for
    /// whichever commit comes next; a write is never split, so what a crash leaves of it is
    /// all or nothing. A `direct` write goes out before the call returns ([`Engine::write_direct`]).
    pub(crate) fn write_at(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        direct: bool,
    ) -> Result<(u64, usize)> {
        self.check_writable()?;
        // Taken before the inode lock: without a tenant it asks the kernel for the ioprio. A
        // device without a scheduler charges nothing, so nothing is asked.
        let charge = self
            .dev()
            .charged()
            .then(crate::sched::Charge::of_current_thread);
        // Counted by tenant only behind a scheduler: without one there is no tenant, and the
        // priority would cost the system calls `charged` spares.
        let key = charge.map(WriterKey::of);
        if direct && !buf.is_empty() {
            let written = self.write_direct(cell, buf, offset, charge, key)?;
            self.writes.wrote(key, buf.len() as u64);
            return Ok(written);
        }
        let len = buf.len() as u64;
        // A write that would take the buffer past its limit finds room first, so a write there
        // is no room for fails with `NoSpace` before any of it is buffered, rather than after
        // (its data would then stay buffered with nowhere to go).
        let limit = self.buffer_limit();
        // A real-time writer's small write does not seal and write every file's buffered data
        // when others filled the buffer: those writers commit it (their next write finds it full),
        // and its own sync commits its own data. The buffer goes past its limit by its writes only.
        // A write under the limit is admitted without a space check; admitted, its bytes count
        // as buffered until they are, so writers admitted together stay under the limit.
        let mut admitted = (len <= limit / 2)
            .then(|| {
                self.budget
                    .try_admit(len, self.buffered_bytes_but_admitted(), limit)
            })
            .flatten();
        let over = len <= limit / 2 && admitted.is_none();
        let urgent = over && crate::sched::current_prio().class == crate::sched::Class::Rt;
        let room_checked = !urgent && (len > limit / 2 || over);
        // A write that had a turn for room keeps its tenant expected back until it returns.
        let mut _writing = None;
        if room_checked {
            let turn = self.room_turn(key, charge, len.div_ceil(BLOCK_U64));
            admitted = Some(self.make_room_for_write(len, key)?);
            _writing = turn.map(Turn::done);
        }
        let end;
        let held;
        {
            let mut st = self.lock_unheld(cell)?;
            end = self.buffer_write(cell, &mut st, buf, offset, Vec::new(), charge)?;
            held = st.dirty().len() as u64 * BLOCK_U64;
        }
        // Buffered (or refused): the bytes count as buffered bytes now.
        drop(admitted);
        self.writes.wrote(key, len);
        // From here the write is in the file: a read sees it. A commit that finds no room for
        // what is buffered leaves it buffered for the next commit that does (a sync then
        // answers `NoSpace`), and this write is answered as written; answered `NoSpace`, its
        // caller would take it as not made. The buffer stays bounded: once past its limit,
        // the next write's room is checked before it is buffered.
        let sent = self.send_on_after_write(cell, key, charge, len, held, urgent, &mut _writing);
        match sent {
            Err(Error::NoSpace(_)) if self.check_not_poisoned().is_ok() => {}
            r => r?,
        }
        Ok((end, buf.len()))
    }

    /// Inode `cell`'s lock, once no commit holds it (`InodeState::held`): the commit holds
    /// `meta` until it has sealed the inode, so waiting for `meta` waits for that. A hold a
    /// commit could not let go (it panicked) poisoned the pool: that is answered.
    fn lock_unheld<'c>(
        &self,
        cell: &'c InodeCell,
    ) -> Result<std::sync::MutexGuard<'c, InodeState>> {
        loop {
            let st = cell.lock();
            if !st.held() {
                return Ok(st);
            }
            drop(st);
            drop(self.lock_meta());
            self.check_not_poisoned()?;
        }
    }

    /// What a buffered write sends on: a buffer past its limit is committed, a file holding
    /// enough goes out behind, or the writer waits for the logs in flight.
    #[allow(clippy::too_many_arguments)]
    fn send_on_after_write<'a>(
        &'a self,
        cell: &InodeCell,
        key: Option<WriterKey>,
        charge: Option<crate::sched::Charge>,
        len: u64,
        held: u64,
        urgent: bool,
        writing: &mut Option<Writing<'a>>,
    ) -> Result<()> {
        if self.buffered_bytes() > self.buffer_limit() && !urgent {
            let turn = self.room_turn(key, charge, len.div_ceil(BLOCK_U64));
            let committed = self.commit_over_limit(cell, key);
            if let Some(turn) = turn {
                *writing = Some(turn.done());
            }
            committed
        } else if self.config().ordering == Ordering::Relaxed
            && (held >= self.write_behind_bytes() || self.seals_hot(len))
        {
            // Write-behind: a file with a large amount buffered, or a large write to a memory
            // pool (`seals_hot`), goes out now as data-only logs, its writer's I/O, every
            // payload of it in this writer's lane.
            let m = self.lock_meta();
            // A space check that would wait for the logs in flight waits with `meta` let go.
            let mut m = self.wait_for_room_outside(m, Self::data_log_blocks(cell))?;
            if self.buffer_in_data_logs() {
                self.commit_behind_log(&mut m, cell)?;
                self.maybe_refresh(&mut m)?;
            }
            m.unlock_and_write()
        } else if self.logs.in_flight() > self.in_flight_max() {
            // More than that waits for the log writer: wait with it, so the memory buffered
            // stays bounded when writers outpace the device.
            self.wait_in_flight()
        } else {
            Ok(())
        }
    }

    /// A writer's turn for room (`blocks` of it) while the last space check found it short,
    /// by its tenant's weight; `None` (no wait) while room is not short, for a device without a
    /// scheduler (no weights to follow), and for a real-time writer, whose class goes before
    /// every weight.
    pub(crate) fn room_turn(
        &self,
        key: Option<WriterKey>,
        charge: Option<crate::sched::Charge>,
        blocks: u64,
    ) -> Option<Turn<'_>> {
        let _turn = crate::phases::enter(crate::phases::Phase::Turn);
        let key = key?;
        if !self.budget.room_short() {
            return None;
        }
        let dev: &dyn std::any::Any = &**self.dev();
        let sched = dev.downcast_ref::<crate::sched::SchedDevice>()?.scheduler();
        let prio = charge.map_or_else(crate::sched::current_prio, |c| c.prio());
        if prio.class == crate::sched::Class::Rt {
            return None;
        }
        let weight = charge
            .and_then(|c| c.tenant())
            .and_then(|t| sched.tenant_weight(t))
            .unwrap_or_else(|| prio.default_weight());
        let think = sched.anticipation().unwrap_or(std::time::Duration::ZERO);
        Some(self.room_gate.enter(key, weight, blocks, think))
    }

    /// Commits what is buffered once writers took the buffer past its limit.
    fn commit_over_limit(&self, cell: &InodeCell, key: Option<WriterKey>) -> Result<()> {
        let mut m = self.lock_meta_for_write(key);
        if self.buffered_bytes() > self.buffer_limit() {
            // Relaxed ordering writes a full buffer as data-only logs; the maps follow at the
            // next checkpoint.
            if self.buffer_in_data_logs() {
                // A writer holding a good part of the buffer writes its own file first (its
                // I/O, at its priority and weight); other files' data only if that is not
                // enough. Many small files go out together, in fewer logs.
                let own = cell.lock().dirty().len() as u64 * BLOCK_U64;
                if own >= self.write_behind_bytes() {
                    m = self.wait_for_room_outside(m, Self::data_log_blocks(cell))?;
                    self.commit_behind_log(&mut m, cell)?;
                }
                if self.buffered_bytes() > self.buffer_limit() {
                    m = self.commit_data_logs_in_parts(m)?;
                }
            } else {
                self.commit_checkpoint(&mut m)?;
            }
            self.maybe_refresh(&mut m)?;
        }
        // The logs are written here, after `meta` is released.
        m.unlock_and_write()
    }

    /// Before a write of `len` bytes that is large against the buffer limit (the write is
    /// large, or space is short: [`Engine::set_buffer_limit`]) or would take the buffer past
    /// it, makes sure the checkpoint that
    /// will carry it, and a cleaning pass's, find room: if the free space is short for what is
    /// buffered and the write, what is buffered goes out first and the space check cleans for
    /// the write, before any of it is buffered. A write buffered first could leave the cleaner
    /// no room for the checkpoint that frees anything (every block buffered goes into it while a
    /// namespace change is pending), and fail with most of the pool dead. A write there is no
    /// room for fails here with `NoSpace`, having changed nothing.
    pub(in crate::tbfs) fn make_room_for_write(
        &self,
        len: u64,
        key: Option<WriterKey>,
    ) -> Result<Admission<'_>> {
        let _room = crate::phases::enter(crate::phases::Phase::Room);
        // Admitted under `meta`, so the next write's check counts this one's bytes.
        let admit = |m: StateGuard<'_>| {
            let admitted = self.budget.admit(len);
            m.unlock_and_write().map(|()| admitted)
        };
        let m = self.lock_meta_for_write(key);
        if self.buffer_fits(&m, (self.buffered_bytes() + len).div_ceil(BLOCK_U64)) {
            return admit(m);
        }
        // Room for the commit that carries it: its logs' summaries and its map's nodes beside
        // its blocks, so that commit does not fail once the write is buffered.
        let blocks = len.div_ceil(BLOCK_U64);
        let room = blocks + blocks / 32 + WRITE_COMMIT_SLACK_BLOCKS;
        // Space checks (what is buffered, then this write's) that would wait for the logs in
        // flight wait with `meta` let go, once, for the larger of the two.
        let mut m =
            self.wait_for_room_outside(m, room + self.buffered_bytes().div_ceil(BLOCK_U64))?;
        let buffered = self.buffered_bytes();
        if m.room_waited() && self.buffer_fits(&m, (buffered + len).div_ceil(BLOCK_U64)) {
            return admit(m);
        }
        if buffered > 0 {
            if self.buffer_in_data_logs() {
                self.commit_data_logs(&mut m, false)?;
            } else {
                self.commit_checkpoint(&mut m)?;
            }
        }
        match self.ensure_space(&mut m, room) {
            Err(Error::NoSpace(_)) if self.changed_since_checkpoint(&m) => {
                // The room the next checkpoint needs may be what is missing: paid, it is free
                // again (beyond what the checkpoint wrote).
                self.commit_checkpoint(&mut m)?;
                self.ensure_space(&mut m, room)?;
            }
            r => r?,
        }
        admit(m)
    }

    /// A direct write (`O_DIRECT`): returns once the data is on the device (not flushed:
    /// durability still takes `fsync`). In relaxed ordering, unless the file has a change only a
    /// checkpoint records, it goes out as data-only logs whose payloads this thread writes, as
    /// its I/O, in pieces from [`DIRECT_FIRST_PIECE_BYTES`] up to [`DIRECT_PIECE_BYTES`], each
    /// made while the one before it is in the device, so a scheduler sees the writer busy for
    /// the whole write (a crash may keep some pieces of a write and not others, as `O_DIRECT`
    /// on a kernel file system may).
    /// Each piece's bytes are copied into buffers outside every lock and put into the file
    /// under `meta`, so no other thread's commit takes them half-written (a checkpoint seals
    /// every buffered block: the tenant refreshing the superblock wrote the other's data, and
    /// the other waited for it). The summaries are left to the background thread, as its I/O
    /// ([`Engine::write_logs_behind`]): a summary the writer wrote itself waited for a turn in
    /// `sched` with nothing of the writer's data queued, and a summary behind a checkpoint
    /// waits for every payload before it, other writers' included. The write's buffers stay
    /// until its summaries are written (a sync writes them at once).
    /// In strict ordering, or for a new or changed file, a piece is written and synced.
    /// A piece there is no room for is refused before it is buffered: the write answers
    /// `NoSpace`, or, if pieces before it were made, their bytes (a short write). A piece whose
    /// commit then finds no room stays buffered, as a buffered write's data does.
    pub(in crate::tbfs) fn write_direct(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        charge: Option<crate::sched::Charge>,
        key: Option<WriterKey>,
    ) -> Result<(u64, usize)> {
        if let Some(offset) = offset {
            // Checked before the pieces are cut (an append is checked as it is buffered).
            write_end(cell.ino, offset, buf.len())?;
        }
        let mut in_flight = std::collections::VecDeque::new();
        let mut end = 0;
        let mut written = Ok(());
        let mut done = 0;
        let mut pieces = 0u32;
        while done < buf.len() {
            // An append is one piece: its offset is the end of the file when it is made.
            let n = match offset {
                Some(offset) => {
                    // Pieces grow from [`DIRECT_FIRST_PIECE_BYTES`] (the first is made with
                    // nothing of the write in the device yet) and end on block boundaries.
                    let at = offset + done as u64;
                    let most = (DIRECT_FIRST_PIECE_BYTES << pieces.min(8)).min(DIRECT_PIECE_BYTES);
                    let boundary = (at + most) / BLOCK_U64 * BLOCK_U64;
                    let boundary = if boundary > at { boundary } else { at + most };
                    ((boundary - at) as usize).min(buf.len() - done)
                }
                None => buf.len(),
            };
            pieces += 1;
            let at = offset.map(|o| o + done as u64);
            match self.direct_piece(cell, &buf[done..done + n], at, charge, key) {
                Ok(piece) => {
                    end = piece.end;
                    in_flight.push_back((piece.started, piece._writing));
                }
                Err(e) => {
                    written = Err(e);
                    break;
                }
            }
            // The piece before this one: the device has had it while this one was made.
            while in_flight.len() > 1 && written.is_ok() {
                let (started, _writing) = in_flight.pop_front().expect("two in flight");
                written = self.finish_direct(started, key);
            }
            done += n;
        }
        // Every payload started is waited for, also after an error.
        for (started, _writing) in in_flight {
            let finished = self.finish_direct(started, key);
            written = written.and(finished);
        }
        match written {
            // A piece there was no room for changed nothing: the pieces before it are the
            // write, a short one, as a full device answers.
            Err(Error::NoSpace(_)) if done > 0 && self.check_not_poisoned().is_ok() => {}
            r => r?,
        }
        // Every byte of the write is in its own pieces' payloads (a buffer another commit had
        // sealed is copied before it is changed), and those are on the device.
        self.write_logs_behind()?;
        Ok((end, done))
    }

    /// One piece of a direct write: buffered, sealed, and its payloads started.
    fn direct_piece(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        charge: Option<crate::sched::Charge>,
        key: Option<WriterKey>,
    ) -> Result<DirectPiece<'_>> {
        // Whole blocks of a write at a known offset are made here, without any lock.
        let whole: Vec<(u64, DirtyBlock)> = match offset {
            Some(offset) => {
                let first = offset.div_ceil(BLOCK_U64);
                let last = (offset + buf.len() as u64) / BLOCK_U64;
                (first..last)
                    .map(|block| {
                        let at = (block * BLOCK_U64 - offset) as usize;
                        (block, DirtyBlock::new(0, shared_copy(&buf[at..at + BLOCK])))
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        // Held until the piece's payloads are started.
        let turn = self.room_turn(key, charge, (buf.len() as u64).div_ceil(BLOCK_U64));
        let mut m = self.lock_meta_for_write(key);
        self.check_usable()?;
        // Room for the piece and what its commit carries, found before any of it is buffered:
        // refused, the piece changed nothing. A data-only log carries the file's buffers, and
        // room is kept for every other file's, which the next checkpoint carries. A checkpoint
        // (strict ordering, or a change only a checkpoint records) carries every file's, and
        // keeps more free than a write's check does (its floor); a piece whose checkpoint is
        // then refused stays buffered. So the whole buffer is counted twice there: once as what
        // this checkpoint carries, and once as the room the next one (a snapshot's drop) needs,
        // or the buffer could outgrow what any checkpoint finds room for.
        let blocks = (buf.len() as u64).div_ceil(BLOCK_U64) + 1;
        let own = Self::data_log_blocks(cell);
        let all = self.buffered_bytes().div_ceil(BLOCK_U64);
        let carried = if self.config().ordering == Ordering::Strict
            || m.changes.only_checkpoint_records(cell.ino)
        {
            own.max(all) + all
        } else {
            own + all
        };
        self.ensure_space(&mut m, super::seal::run_room(blocks + carried))?;
        let end = {
            let mut st = cell.lock();
            self.buffer_write(cell, &mut st, buf, offset, whole, charge)?
        };
        // Buffered, the piece is in the file: a commit that then finds no room leaves it
        // buffered for the next one that does (a sync answers `NoSpace` meanwhile).
        let full = |e: &Error| matches!(e, Error::NoSpace(_)) && self.check_not_poisoned().is_ok();
        let sealed = match self.config().ordering {
            Ordering::Strict => Ok(false),
            Ordering::Relaxed => self.commit_direct_log(&mut m, cell),
        };
        if !matches!(sealed, Ok(true)) {
            // Only a checkpoint may record the file, or strict ordering: the piece is synced.
            let out = match sealed {
                Ok(_) => {
                    drop(m);
                    self.sync_file(cell)
                }
                Err(e) => Err(e),
            };
            match out {
                Err(e) if full(&e) => {}
                r => r?,
            }
            return Ok(DirectPiece {
                end,
                started: Vec::new(),
                _writing: turn.map(Turn::done),
            });
        }
        self.maybe_refresh(&mut m)?;
        let started = m.unlock_taking_payloads()?.unwrap_or_default();
        for a in &started {
            self.start_ahead(a);
        }
        Ok(DirectPiece {
            end,
            started,
            _writing: turn.map(Turn::done),
        })
    }

    /// Waits for a direct write's payloads (finishing those nobody is finishing yet).
    fn finish_direct(&self, started: Vec<Arc<AheadPayload>>, key: Option<WriterKey>) -> Result<()> {
        let start = std::time::Instant::now();
        let mut result = Ok(());
        for a in started {
            result = result.and(self.wait_payload(&a));
        }
        self.writes.waited_for_payloads(key, start.elapsed());
        result
    }

    /// Buffered bytes not yet in a sealed log, with the writes admitted and not yet buffered
    /// (`BufferBudget::try_admit`): what the buffer limit and the space checks count.
    pub(in crate::tbfs) fn buffered_bytes(&self) -> u64 {
        self.buffered_bytes_but_admitted() + self.budget.admitted()
    }

    /// Buffered bytes not yet in a sealed log.
    fn buffered_bytes_but_admitted(&self) -> u64 {
        // Saturating: the two counts are read apart, and data buffered and sealed in between
        // may put `in_flight` ahead of the buffered bytes for a moment.
        self.budget.buffered().saturating_sub(self.logs.in_flight())
    }

    /// Updates the access time of a file being read, per the pool's [`AtimePolicy`]. The new
    /// time is written with the file's next checkpoint.
    pub(in crate::tbfs) fn touch_atime(&self, ino: u64, st: &mut InodeState) {
        let policy = self.atime_policy();
        if policy == AtimePolicy::Never as u8 || self.read_only() {
            return;
        }
        let now = self.now_ns();
        let due = policy == AtimePolicy::Strict as u8
            || st.atime_ns() <= st.mtime_ns()
            || st.atime_ns() <= st.ctime_ns()
            || now - st.atime_ns() >= RELATIME_AGE_NS;
        if due {
            st.set_atime_ns(now);
            st.mark_attr_dirty();
            self.mark_dirty(ino);
            self.watchers.atime_touched(ino);
        }
    }
}
