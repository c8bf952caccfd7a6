//! Sealing buffered file data as data-only logs, without a checkpoint: a seal takes the space
//! check, opens and closes logs in the writer, counts the blocks in the segment table and notes
//! the files in the changes, so it is orchestration (`log/data.rs` keeps what of a file's
//! buffers a log may take).

use std::sync::Arc;

use crate::tbfs::format::{DescKind, FLAG_BEGIN, FLAG_DATA_ONLY, FLAG_END};
use crate::tbfs::inode::{unhold_all, InodeCell};
use crate::tbfs::limits::{LIFETIME_SAMPLE, SEAL_PART_BLOCKS};
use crate::tbfs::log::data::{has_unsealed, sealable, unsealed_count};
use crate::tbfs::state::{Engine, Section, State, StateGuard};
use crate::tbfs::{Barrier, Error, Result};

impl Engine {
    /// Writes one file's buffered data as a data-only log (relaxed ordering), recovered by
    /// roll-forward. The block map nodes follow at the next checkpoint.
    pub(crate) fn commit_data_log(&self, m: &mut State, cell: &InodeCell) -> Result<()> {
        let _sealing = crate::phases::enter(crate::phases::Phase::Seal);
        let _work = crate::phases::meta_work(crate::phases::MetaWork::Seal);
        self.in_section(m, Section::Sealing, |m| self.seal_data_log(m, cell))
    }

    /// Seals a direct write's piece of `cell` as a data-only log laid out as a direct write's;
    /// `false`, with nothing sealed, when only a checkpoint may record the file (its sync is
    /// that checkpoint).
    pub(crate) fn commit_direct_log(&self, m: &mut State, cell: &InodeCell) -> Result<bool> {
        if m.changes.only_checkpoint_records(cell.ino) {
            return Ok(false);
        }
        m.writer.set_direct(true);
        let committed = self.commit_data_log(m, cell);
        m.writer.set_direct(false);
        committed.map(|()| true)
    }

    /// Seals what a file's writer leaves behind it (write-behind, a large write to a memory
    /// pool) as data-only logs whose payloads all go apart from their summaries, however small
    /// (the last log in a segment may be): its writer writes them as its own I/O, and another
    /// file's sync that writes the queue on its way to its own log writes only their summaries,
    /// none of this writer's data.
    pub(crate) fn commit_behind_log(&self, m: &mut State, cell: &InodeCell) -> Result<()> {
        m.writer.set_direct(true);
        let committed = self.commit_data_log(m, cell);
        m.writer.set_direct(false);
        committed
    }

    /// The blocks a data-only log of `cell`'s buffered data asks the space check for
    /// ([`Engine::seal_data_log`]): its unsealed buffers and its attributes record.
    pub(crate) fn data_log_blocks(cell: &InodeCell) -> u64 {
        let st = cell.lock();
        if st.freed() {
            0
        } else {
            unsealed_count(&st) as u64 + 1
        }
    }

    /// [`Engine::commit_data_log`], timed as sealing.
    pub(crate) fn seal_data_log(&self, m: &mut State, cell: &InodeCell) -> Result<()> {
        // The log's release list keeps the inode's cell until the log is written.
        let Some(cell) = m.inodes.get(cell.ino).cloned() else {
            return Ok(());
        };
        // Held from the count to the seal (`InodeState::held`): the log takes no more than the
        // space check counted.
        let count = {
            let mut st = cell.lock();
            let count = unsealed_count(&st);
            if st.freed() || (count == 0 && !st.attr_dirty()) {
                return Ok(());
            }
            st.hold();
            count as u64
        };
        m.cleaning.buffer_seal_checks_space();
        let space = self.ensure_space(m, count + 1);
        let mut st = cell.lock();
        st.unhold();
        space?;
        if st.freed() || (!has_unsealed(&st) && !st.attr_dirty()) {
            // The superblock refresh `ensure_space` ran took everything already.
            return Ok(());
        }
        self.log_open(m, FLAG_BEGIN | FLAG_DATA_ONLY);
        let written = self.seal_file_data(m, cell.ino, &mut st)?;
        self.settle_sealed(m, cell.ino, &st);
        drop(st);
        // The buffers go once the log is written.
        m.writer.add_release((cell.clone(), written));
        let closed = self.log_close(m, FLAG_END);
        m.writer.set_charge(None);
        closed?;
        m.changes.changed(cell.ino);
        Ok(())
    }

    /// Writes the buffered data of every dirty file as one run of data-only logs (relaxed
    /// ordering, no namespace change pending), recovered by roll-forward; the block maps and
    /// inodes follow at the next checkpoint. How buffered data goes out when the buffer is
    /// full: map nodes and inode pages are written once per checkpoint, not once per flush.
    /// With `if_room`, does nothing when the space check fails (nothing is written then).
    pub(crate) fn commit_data_logs(&self, m: &mut State, if_room: bool) -> Result<()> {
        let cells = self.dirty_cells(m);
        self.in_section(m, Section::Sealing, |m| {
            self.seal_data_logs(m, &cells, if_room, u64::MAX)
                .map(|_| ())
        })
    }

    /// [`Engine::commit_data_logs`] in parts of about [`SEAL_PART_BLOCKS`] blocks, each its own
    /// run, handing `meta` to the threads waiting for it between the parts
    /// ([`StateGuard::unlock_fair_and_write`]) and writing the part's logs meanwhile; returns
    /// with `meta` held again. How a writer that found the buffer full seals it: in one hold,
    /// every create and delete of the other threads waited for the whole buffer (milliseconds),
    /// and with all of them asleep a core stood idle. A part whose space check would wait for
    /// the logs in flight waits for them with `meta` let go ([`Engine::wait_for_room_outside`]).
    pub(crate) fn commit_data_logs_in_parts<'a>(
        &'a self,
        mut m: StateGuard<'a>,
    ) -> Result<StateGuard<'a>> {
        let cells = self.dirty_cells(&m);
        let mut from = 0;
        while from < cells.len() {
            let rest = &cells[from..];
            m = self
                .wait_for_room_outside(m, run_room(run_blocks(rest, SEAL_PART_BLOCKS, false).0))?;
            from += self.in_section(&mut m, Section::Sealing, |m| {
                self.seal_data_logs(m, rest, false, SEAL_PART_BLOCKS)
            })?;
            if from < cells.len() {
                m.unlock_fair_and_write()?;
                m = self.lock_meta();
            }
        }
        Ok(m)
    }

    /// The cells of the files a seal looks through (`DirtySet::to_seal`), in
    /// inode order.
    pub(crate) fn dirty_cells(&self, m: &State) -> Vec<Arc<InodeCell>> {
        if cfg!(debug_assertions) {
            self.check_to_seal(m);
        }
        // The numbers are copied out and the set let go before the files are looked up: every
        // writer takes the set's lock (`mark_dirty`), and looking up a few hundred files under
        // it made writers sleep on it.
        let listed: Vec<u64> = self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .to_seal()
            .iter()
            .collect();
        let mut cells = Vec::with_capacity(listed.len());
        let mut freed = Vec::new();
        for ino in listed {
            match m.inodes.get(ino) {
                Some(cell) => cells.push(cell.clone()),
                None => freed.push(ino),
            }
        }
        // Freed files have nothing to seal. Numbers are given out again only under `meta`,
        // held here, so no writer has listed any of these again meanwhile.
        if !freed.is_empty() {
            let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            for ino in &freed {
                dirty.settled(*ino);
            }
        }
        cells
    }

    /// Debug builds: every file a data-only log could take something from is among those a
    /// seal looks through (`DirtySet::to_seal`). Each inode's lock is taken
    /// before the set's, as a writer takes them.
    pub(crate) fn check_to_seal(&self, m: &State) {
        let others: Vec<u64> = {
            let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            dirty.not_to_seal()
        };
        for ino in others {
            let Some(cell) = m.inodes.get(ino) else {
                continue;
            };
            let st = cell.lock();
            let listed = self
                .dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_seal()
                .contains(&ino);
            debug_assert!(
                listed
                    || st.freed()
                    || st.kind() != crate::tbfs::FileKind::File
                    || !sealable(m, ino, &st),
                "inode {ino} has data to seal and is not listed to be sealed (unsealed buffers: \
                 {}, attributes changed: {}, placed: {}, pending: {}, open: {})",
                has_unsealed(&st),
                st.attr_dirty(),
                m.changes.only_checkpoint_records(ino),
                m.changes.pending().contains(&ino),
                st.open_handles()
            );
        }
    }

    /// Under inode `ino`'s lock (`st`), after a seal took what it could from it: the file is no
    /// longer looked through by seals if a data-only log can take nothing more from it now.
    /// A freed inode's entry is left alone: a seal in parts lets `meta` go between its parts,
    /// and the number may belong to a newer file by then (the next list drops numbers no file
    /// has).
    pub(crate) fn settle_sealed(&self, m: &State, ino: u64, st: &crate::tbfs::inode::InodeState) {
        if st.freed() {
            return;
        }
        if st.kind() != crate::tbfs::FileKind::File || !sealable(m, ino, st) {
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .settled(ino);
        }
    }

    /// Writes the buffered data of the files of `cells` as one run of data-only logs (relaxed
    /// ordering, no namespace change pending), recovered by roll-forward; the block maps and
    /// inodes follow at the next checkpoint. How buffered data goes out when the buffer is
    /// full: map nodes and inode pages are written once per checkpoint, not once per flush.
    /// Takes files from the front of `cells` until they hold `most` blocks to write (a file is
    /// never split between runs) and returns how many it took. With `if_room`, does nothing
    /// when the space check fails (nothing is written then).
    pub(crate) fn seal_data_logs(
        &self,
        m: &mut State,
        cells: &[Arc<InodeCell>],
        if_room: bool,
        most: u64,
    ) -> Result<usize> {
        // Held from the count to the seal (`InodeState::held`): the run takes no more than the
        // space check counted.
        let (count, taken) = run_blocks(cells, most, true);
        let cells = &cells[..taken];
        let sealed = if count == 0 {
            Ok(())
        } else {
            self.seal_held_run(m, cells, count, if_room)
        };
        unhold_all(cells);
        sealed.map(|()| taken)
    }

    /// [`Engine::seal_data_logs`] for the files `cells`, which hold `count` blocks.
    fn seal_held_run(
        &self,
        m: &mut State,
        cells: &[Arc<InodeCell>],
        count: u64,
        if_room: bool,
    ) -> Result<()> {
        let _work = crate::phases::meta_work(crate::phases::MetaWork::Seal);
        m.cleaning.buffer_seal_checks_space();
        match self.ensure_space(m, run_room(count)) {
            Err(Error::NoSpace(_)) if if_room => return Ok(()),
            r => r?,
        }
        // Files whose last versions lived long go to the long-lived head, in a run of their own,
        // as far as the rest of its segment takes them (`long_lived_files`).
        let long = self.long_lived_files(m, cells);
        if !long.contains(&true) {
            return self.seal_run(m, cells.iter());
        }
        let pick = |want: bool| {
            cells
                .iter()
                .zip(&long)
                .filter(move |&(_, &l)| l == want)
                .map(|(c, _)| c)
        };
        m.seg.set_short_run(true);
        let short = self.seal_run(m, pick(false));
        m.seg.set_short_run(false);
        short?;
        let head = m.writer.parked().map(|(_, seg)| seg);
        let entered = self.enter_long_lived(m)?;
        assert!(entered, "a parked log head not entered");
        self.count(|c| c.seals_apart += 1);
        // The files are held since they were counted, so they hold what the pick counted.
        let sealed = self.seal_run(m, pick(true));
        // The space check counted no room for a segment this head would enter.
        assert!(
            sealed.is_err() || head == Some(m.writer.cur_seg()),
            "host data of long-lived files overran the rest of the long-lived head's segment"
        );
        // Back to the writers' head, whose next logs are theirs again.
        let left = self.copies_leave(m);
        sealed?;
        left
    }

    /// For each file of `cells`: whether its buffered data goes to the long-lived log head (the
    /// cleaner's), while segment ages differ and that head is parked (`long_lived_room`). A
    /// file goes there when its buffered blocks replace versions that lived long, at least half
    /// the live blocks' count in host writes (as the segments they are in tell it:
    /// `SegmentTable::lived_less_than`), or are first written, which counts as long-lived
    /// (docs/ARCHITECTURE.md, "Host writes by expected lifetime"); and only as far as the rest
    /// of the head's segment takes them with their summaries and the jump back: the free count
    /// leaves that rest out, so what goes there needs no room the space check did not count,
    /// and the head never enters a segment for host data (the copies open it). A few of each
    /// file's blocks are looked at, not all: a file's blocks are written alike more often than
    /// not, and this runs under `meta`.
    fn long_lived_files(&self, m: &State, cells: &[Arc<InodeCell>]) -> Vec<bool> {
        let mut room = match (self.long_lived_room(m), m.writer.parked()) {
            (Some(_), Some(_)) if !m.writer.in_copies() => {
                // The jump back, and a summary per 64 blocks beside one per log begun.
                self.copy_head_rest(m).saturating_sub(4)
            }
            _ => return vec![false; cells.len()],
        };
        let sb = self.segment_blocks();
        let short_below = m.seg.used_blocks() / 2;
        cells
            .iter()
            .map(|cell| {
                let st = cell.lock();
                if st.freed() || st.kind() != crate::tbfs::FileKind::File {
                    return false;
                }
                let (mut long, mut short) = (0u32, 0u32);
                let unsealed = st.dirty().iter().filter(|(_, d)| d.sealed_in.is_none());
                for (&block, _) in unsealed.take(LIFETIME_SAMPLE) {
                    let old = st.map().get(block);
                    let lived_short = old >= crate::tbfs::format::FIRST_SEGMENT_BLOCK
                        && m.seg.lived_less_than(
                            crate::tbfs::space::segments::segment_of(old, sb),
                            short_below,
                        );
                    if lived_short {
                        short += 1;
                    } else {
                        long += 1;
                    }
                }
                // Its blocks, its attributes record and a summary per 64 blocks.
                let blocks = st.dirty().len() as u64 + 1;
                let takes = blocks + blocks.div_ceil(64);
                if long > short && takes <= room {
                    room -= takes;
                    true
                } else {
                    false
                }
            })
            .collect()
    }

    /// Writes the buffered data of the files of `cells` as one run of data-only logs where the
    /// chain stands (nothing if none has anything a data-only log may take).
    fn seal_run<'c>(
        &self,
        m: &mut State,
        cells: impl Iterator<Item = &'c Arc<InodeCell>>,
    ) -> Result<()> {
        let mut open = false;
        let mut done = Vec::new();
        for cell in cells {
            let mut st = cell.lock();
            if st.freed() || st.kind() != crate::tbfs::FileKind::File || !sealable(m, cell.ino, &st)
            {
                // A placed file's attributes wait for the checkpoint: no log is opened for it.
                self.settle_sealed(m, cell.ino, &st);
                continue;
            }
            if !open {
                self.log_open(m, FLAG_BEGIN | FLAG_DATA_ONLY);
                open = true;
            }
            let written = self.seal_file_data(m, cell.ino, &mut st)?;
            self.settle_sealed(m, cell.ino, &st);
            drop(st);
            m.changes.changed(cell.ino);
            done.push((cell.clone(), written));
        }
        let closed = if open {
            // Buffers go once the last log is written.
            m.writer.hand_release(done);
            self.log_close(m, FLAG_END)
        } else {
            Ok(())
        };
        m.writer.set_charge(None);
        closed
    }

    /// Adds a file's unsealed buffers and its size and mtime to the open data-only log, as the
    /// I/O of the file's last writer; returns the release list for them (in one pass over the
    /// buffers, not a look-up per block: this runs under `meta` for every block written).
    ///
    /// A file with a change only a checkpoint records (`Changes::only_checkpoint_records`: created, renamed,
    /// linked, attributes or size set) may not be in the newest checkpoint before the log, or
    /// another file may be there under its number: its blocks are only placed
    /// ([`DescKind::Placed`]), with no attributes record, for the next checkpoint to map.
    /// Roll-forward does not replay them, so what they supersede stays until a checkpoint is
    /// durable (`seg_dec`), and the file's sync is that checkpoint.
    pub(crate) fn seal_file_data(
        &self,
        m: &mut State,
        ino: u64,
        st: &mut crate::tbfs::inode::InodeState,
    ) -> Result<Vec<(u64, u64)>> {
        m.writer.set_charge(st.charge());
        let flush = self.config().barrier == Barrier::EveryLog;
        let placed = m.changes.only_checkpoint_records(ino);
        let kind = if placed {
            DescKind::Placed
        } else {
            DescKind::Data
        };
        let mut written = Vec::with_capacity(st.dirty().len());
        let mut overwrites = 0u64;
        let (map, dirty) = st.map_and_dirty_mut();
        for (&block, d) in dirty.iter_mut().filter(|(_, d)| d.sealed_in.is_none()) {
            let (gen, data, crc) = (d.gen, d.share_with_log(), d.crc());
            let addr = self.log_add_shared(m, kind, ino, 0, block, data, Some(crc))?;
            // The log the block went into (`log_add_shared` may have rolled to a new one).
            d.sealed_in = Some((m.writer.seq(), flush));
            let old = map.set(block, addr);
            overwrites += u64::from(old != 0);
            m.seg_inc(addr, self.segment_blocks());
            match (old, placed) {
                (0, _) => {}
                (_, true) => m.seg_dec(old, m.writer.seq(), self.segment_blocks()),
                (_, false) => m.seg_supersede(old, m.writer.seq(), self.segment_blocks()),
            }
            written.push((block, gen));
        }
        st.note_writes(m.seg.host_clock(), overwrites, self.rate_window());
        if placed {
            let n = written.len() as u64;
            self.count(|c| c.placed_blocks += n);
            return Ok(written);
        }
        self.log_add_attr(m, ino, st.size(), st.mtime_ns())?;
        st.attr_logged();
        // Recovery replays the file's part of the run only with its attributes record
        // (`recovery::unfinished_run_data`). The record always joins the log of the file's last
        // block (descriptors are kept for it), which a sync of the file waits for.
        debug_assert!(written.last().is_none_or(|&(block, _)| {
            st.dirty()[&block]
                .sealed_in
                .is_some_and(|(seq, _)| seq == m.writer.seq())
        }));
        Ok(written)
    }
}

/// The blocks the files at the front of `cells` hold buffered, until they hold `most`, and how
/// many files that takes (a file is never split between runs): every buffer, sealed ones still
/// in flight too, each file with its attributes record. A bound taken without walking the
/// buffers, which sealing walks anyway (walking them here as well was a third of sealing's time
/// under `meta`). With `hold`, each file taken is held (`InodeState::held`) for the caller to
/// let go.
fn run_blocks(cells: &[Arc<InodeCell>], most: u64, hold: bool) -> (u64, usize) {
    let mut count = 0u64;
    let mut taken = 0;
    for cell in cells {
        if count >= most {
            break;
        }
        taken += 1;
        let mut st = cell.lock();
        if hold {
            st.hold();
        }
        if !st.freed() && st.kind() == crate::tbfs::FileKind::File {
            count += st.dirty().len() as u64 + 1;
        }
    }
    (count, taken)
}

/// What a run of data-only logs carrying `count` blocks asks the space check for: its blocks
/// and their summaries.
pub(super) fn run_room(count: u64) -> u64 {
    count + count / 64 + 1
}
