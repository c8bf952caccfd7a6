//! The commit path: the log writer (segments, summaries, barriers), data-only logs, checkpoints
//! and superblock refreshes. The only code that writes to the device after a pool is made.
//!
//! Invariants: logs tile each segment back to back (a one-block remainder gets a pad log), each
//! log's write completes before the next is issued, and a segment is reused only when nothing in
//! memory references it and a durable superblock names a checkpoint written after it died.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::dense::DenseSet;
use super::engine::{
    now_ns, AheadPayload, AheadState, Inner, InodeCell, LogBuild, LogWriter, Meta, MetaGuard,
    Queued, Release, SealedLog, Section, IFILE_CACHE_PAGES,
};
use super::format::{
    self, height_for, CheckpointRoot, DescKind, Descriptor, InodeRecord, Summary, Superblock,
    BLOCK, BLOCK_U64, DESCRIPTORS_MAX, FANOUT, FLAG_AHEAD, FLAG_BEGIN, FLAG_CHECKPOINT,
    FLAG_DATA_ONLY, FLAG_END, FLAG_PAD, INODES_PER_PAGE, INODE_BYTES,
};
use super::map::BlockMap;
use crate::dev::PendingWrite;

/// Data-only logs with at least this many payload blocks have their payload written by the
/// thread that sealed them, apart from the summary; smaller ones go whole with the log writer.
const AHEAD_MIN_BLOCKS: usize = 16;
/// Blocks sealed in one part of a full buffer ([`Inner::commit_data_logs_in_parts`]): 4 MiB,
/// about half a millisecond under `meta`.
pub(crate) const SEAL_PART_BLOCKS: u64 = 1024;
/// Blocks a checkpoint's quick bound allows for writes being buffered while it is taken
/// ([`Inner::quick_inode_bound`]).
const QUICK_BOUND_SLACK_BLOCKS: u64 = 1024;
/// An ahead payload goes to a device that does not take blocks in place this many blocks per
/// request (`sched` splits further as its policy says).
const AHEAD_CHUNK_BLOCKS: usize = 256;
/// At most this many chunks of one ahead payload are in flight at once.
const AHEAD_CHUNKS_IN_FLIGHT: usize = 8;
use super::{Barrier, Error, Result};

/// Where [`Inner::write_queued`] stopped before the sequence it was asked to reach.
#[derive(Debug)]
pub(crate) enum Stop {
    /// Before a log or superblock that needs every ahead payload below this sequence complete.
    Barrier(u64),
    /// At a superblock, taken from the queue ([`Inner::take_superblock`]) and put with the
    /// handed-off ones, to be written without the log writer.
    Superblock,
}

/// What a thread writing queued logs does with a superblock it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Superblocks {
    /// Writes it (and the flushes around it) before going on.
    Write,
    /// Leaves it to the background thread and goes on to its own logs: a writer waiting for
    /// its log does not wait for two device flushes it does not need.
    HandOff,
}

/// Most payload blocks in one log (bounds the write buffer).
const LOG_BLOCKS_MAX: usize = 1024;
/// The roll-forward chain is kept to at most this fraction of the pool (see `maybe_refresh`).
const SUPERBLOCK_POOL_DIVISOR: u64 = 4;
/// Descriptors kept free in every log for the attribute records a data-only log ends with.
const DESCRIPTORS_RESERVED: usize = 2;

/// Direct writes leave their summaries to the background thread until this many write
/// buffers' worth of sealed data is unwritten ([`Inner::write_logs_behind`]). Each direct
/// writer has up to two pieces of [`super::engine::DIRECT_PIECE_BYTES`] sealed while they are in the device,
/// so four writers alone hold 64 MiB, twice the default buffer; at one buffer they wrote their
/// own summaries again and lost their shares (3:2:2:1 writes of 50 MiB: 25 % off). In a
/// memory pool, also how far the log writer may fall behind buffered writers before they wait
/// for it ([`Inner::in_flight_max`]).
pub(crate) const BEHIND_BUFFERS: u64 = 4;

impl Inner {
    pub(super) fn seg_start(&self, seg: u64) -> u64 {
        format::FIRST_SEGMENT_BLOCK + seg * self.segment_blocks
    }

    pub(crate) fn segment_free(&self, m: &Meta, s: usize) -> bool {
        self.segment_free_if_durable(m, s, self.durable_seq.load(AtomicOrdering::Acquire))
    }

    /// Whether segment `s` would be free once every log below `durable` is durable.
    pub(crate) fn segment_free_if_durable(&self, m: &Meta, s: usize, durable: u64) -> bool {
        let w = &m.writer;
        s as u64 != w.cur_seg
            && s as u64 != w.next_seg
            && m.seg.live[s] == 0
            && m.seg.pinned[s] == 0
            && m.seg.dead_at[s] <= self.sb_checkpoint_seq.load(AtomicOrdering::Acquire)
            && m.seg.last_seq[s] <= self.sb_checkpoint_seq.load(AtomicOrdering::Acquire)
            && m.seg.soft_dead_at[s] <= durable
            // The background cleaner is reading it without `meta`.
            && !m.bg_clean.reading.contains(&s)
    }

    /// Wakes the background thread for what `why` marks.
    pub(crate) fn wake_background(&self, why: impl FnOnce(&mut super::engine::Wake)) {
        let (lock, cv) = &*self.wake;
        why(&mut lock.lock().unwrap_or_else(|p| p.into_inner()));
        cv.notify_all();
    }

    fn pick_free_segment(&self, m: &Meta) -> Option<u64> {
        let n = self.segment_count;
        (1..=n)
            .map(|i| (m.writer.next_seg + i) % n)
            .find(|&s| self.segment_free(m, s as usize))
    }

    fn advance_segment(&self, m: &mut Meta) -> Result<()> {
        let staged_full = staged_no_segment(m);
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
        m.writer.cur_seg = m.writer.next_seg;
        m.writer.next_seg = next;
        // Whatever the background cleaner read of it before is about to be overwritten.
        m.bg_clean.read.remove(&(next as usize));
        m.writer.pos = self.seg_start(m.writer.cur_seg);
        // The writer enters `next` after this segment: let the device get it ready now.
        self.dev.prepare_write(
            self.seg_start(next) * BLOCK_U64,
            self.segment_blocks * BLOCK_U64,
        );
        let seg = m.writer.cur_seg as usize;
        m.life.seg_born[seg] = m.checkpoint + 1;
        // Its age is that of the newest data its logs hold (set as they close).
        m.life.seg_written[seg] = 0;
        m.life.since_ckpt.push((seg, m.writer.pos));
        m.life
            .usage_dirty
            .insert(seg as u64 / format::table_entries_per_page(format::TABLE_USAGE) as u64);
        Ok(())
    }

    pub(crate) fn log_open(&self, m: &mut Meta, flags: u16) {
        debug_assert!(m.writer.log.is_none());
        if flags & FLAG_BEGIN != 0 && !m.run_soft_dead.is_empty() {
            // A run an error cut short before its last log (see `Meta::soft_dead_to_checkpoint`).
            let cut = std::mem::take(&mut m.run_soft_dead);
            m.soft_dead_to_checkpoint.extend(cut);
        }
        // Room for as many blocks as the log can take, so it does not grow (and reallocate)
        // block by block under `meta`.
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks;
        let blocks = (seg_end.saturating_sub(m.writer.pos + 1) as usize).min(LOG_BLOCKS_MAX);
        m.writer.log = Some(LogBuild {
            start: m.writer.pos,
            flags,
            descriptors: Vec::with_capacity(DESCRIPTORS_MAX.min(blocks + DESCRIPTORS_RESERVED)),
            payload: Vec::with_capacity(blocks),
            crcs: Vec::with_capacity(blocks),
        });
    }

    /// Whether the open log can take one more block of this kind without being closed.
    fn log_has_room(&self, m: &Meta, kind: DescKind, ino: u64, level: u8, offset: u64) -> bool {
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks;
        let log = m.writer.log.as_ref().expect("log open");
        let blocks = log.payload.len();
        let merges = log.descriptors.last().is_some_and(|d| {
            d.kind == kind
                && d.ino == ino
                && d.level == level
                && d.offset + d.blocks as u64 == offset
        });
        log.start + 1 + (blocks as u64) < seg_end
            && blocks < LOG_BLOCKS_MAX
            && (merges || log.descriptors.len() < DESCRIPTORS_MAX - DESCRIPTORS_RESERVED)
    }

    /// Closes the open log and opens its continuation.
    fn log_roll(&self, m: &mut Meta) -> Result<()> {
        let flags = m.writer.log.as_ref().expect("log open").flags & !FLAG_BEGIN;
        self.log_close(m, 0)?;
        self.log_open(m, flags);
        Ok(())
    }

    /// Appends one block to the open log (closing it and opening a continuation when it is full)
    /// and returns the address the block will have once the log writer writes the log.
    pub(crate) fn log_add(
        &self,
        m: &mut Meta,
        kind: DescKind,
        ino: u64,
        level: u8,
        offset: u64,
        data: &[u8],
    ) -> Result<u64> {
        self.log_add_shared(
            m,
            kind,
            ino,
            level,
            offset,
            super::engine::shared_copy(data),
            None,
        )
    }

    /// [`Inner::log_add`] for a block already shared (a buffered block of a file): the log
    /// keeps a reference, not a copy, and its CRC if known (`DirtyBlock::crc`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn log_add_shared(
        &self,
        m: &mut Meta,
        kind: DescKind,
        ino: u64,
        level: u8,
        offset: u64,
        data: Arc<format::Block>,
        crc: Option<u32>,
    ) -> Result<u64> {
        if !self.log_has_room(m, kind, ino, level, offset) {
            self.log_roll(m)?;
        }
        let log = m.writer.log.as_mut().expect("log open");
        let addr = log.start + 1 + log.payload.len() as u64;
        log.payload.push(data);
        log.crcs.push(crc);
        let merges = log.descriptors.last().is_some_and(|d| {
            d.kind == kind
                && d.ino == ino
                && d.level == level
                && d.offset + d.blocks as u64 == offset
        });
        if merges {
            log.descriptors.last_mut().expect("merges").blocks += 1;
        } else {
            log.descriptors.push(Descriptor {
                kind,
                level,
                blocks: 1,
                ino,
                offset,
                extra: 0,
            });
        }
        Ok(addr)
    }

    /// Adds an attributes record to the open log, in the descriptors data leaves free for it
    /// ([`DESCRIPTORS_RESERVED`]), so a file's record joins the log of its last block even when
    /// that block took the last descriptor data may use. Only a log whose every descriptor is
    /// used is closed and continued first: one of files whose only change is their access time,
    /// which bring a record and no block.
    fn log_add_attr(&self, m: &mut Meta, ino: u64, size: u64, mtime_ns: i64) -> Result<()> {
        if m.writer.log.as_ref().expect("log open").descriptors.len() >= DESCRIPTORS_MAX {
            self.log_roll(m)?;
        }
        let log = m.writer.log.as_mut().expect("log open");
        log.descriptors.push(Descriptor {
            kind: DescKind::Attr,
            level: 0,
            blocks: 0,
            ino,
            offset: size,
            extra: mtime_ns,
        });
        Ok(())
    }

    /// Seals the open log and queues it for the log writer ([`Inner::write_logs_until`]), which
    /// writes it (flushing as the barrier policy says) after `meta` is released; moves on.
    pub(crate) fn log_close(&self, m: &mut Meta, end_flags: u16) -> Result<()> {
        let mut log = m.writer.log.take().expect("log open");
        let mut flags = log.flags | end_flags;
        // Data-only logs depend on no other log but the earlier ones of their own files: their
        // summaries may go before their payloads, and a torn one is skipped at recovery.
        if flags & FLAG_DATA_ONLY != 0 {
            flags |= FLAG_AHEAD;
            if flags & FLAG_END != 0 {
                // The run ends here: what it superseded may be reused once this log is durable.
                let seq = m.writer.seq;
                for s in std::mem::take(&mut m.run_soft_dead) {
                    m.seg.soft_dead_at[s] = seq + 1;
                }
            }
        }
        if flags & FLAG_CHECKPOINT != 0 && flags & FLAG_END != 0 {
            // The maps in memory are in this checkpoint, runs cut short included.
            let seq = m.writer.seq;
            for s in std::mem::take(&mut m.soft_dead_to_checkpoint) {
                m.seg.soft_dead_at[s] = seq + 1;
            }
        }
        let payload_blocks = log.payload.len() as u32;
        let summary_time = now_ns();
        let metadata_blocks = 1 + log
            .descriptors
            .iter()
            .filter(|d| !matches!(d.kind, DescKind::Data | DescKind::Placed))
            .map(|d| d.blocks as u64)
            .sum::<u64>();
        let summary = Summary {
            flags,
            payload_blocks,
            pool_id: self.pool_id,
            sequence: m.writer.seq,
            checkpoint: m.checkpoint + u64::from(flags & FLAG_CHECKPOINT != 0),
            segment_next: m.writer.next_seg,
            // Filled in by the log writer.
            prev_crc: 0,
            payload_crc: 0,
            time_ns: summary_time,
            descriptors: log.descriptors,
        };
        let flush = match self.config.barrier {
            Barrier::EveryLog => true,
            Barrier::EveryCheckpoint => flags & FLAG_CHECKPOINT != 0 && !m.writer.refreshing,
            Barrier::Superblock => false,
        };
        let release = std::mem::take(&mut m.writer.release);
        let release_bytes = release
            .iter()
            .map(|(_, blocks)| blocks.len() as u64 * BLOCK_U64)
            .sum::<u64>();
        self.in_flight
            .fetch_add(release_bytes, AtomicOrdering::AcqRel);
        if !release.is_empty() {
            self.releases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(m.writer.seq, (release, release_bytes));
        }
        // The inodes an ahead log names: later logs of the same files wait for it.
        let inos = (flags & FLAG_AHEAD != 0).then(|| {
            let mut inos: Vec<u64> = summary.descriptors.iter().map(|d| d.ino).collect();
            inos.sort_unstable();
            inos.dedup();
            inos
        });
        let ahead = inos.and_then(|inos| {
            // A direct write's logs all have their payloads apart, so it waits for no other.
            let direct = m.writer.direct && !log.payload.is_empty();
            if log.payload.len() < AHEAD_MIN_BLOCKS && !direct {
                // Written whole by the log writer.
                m.writer.sealed_small.push((m.writer.seq, inos, flush));
                return None;
            }
            let a = Arc::new(AheadPayload {
                seq: m.writer.seq,
                start: log.start,
                blocks: std::mem::take(&mut log.payload),
                crcs: std::mem::take(&mut log.crcs),
                inos,
                flush,
                charge: m.writer.charge,
                crc: std::sync::OnceLock::new(),
                state: parking_lot::Mutex::new(AheadState::Pending),
                done: parking_lot::Condvar::new(),
                started: Mutex::new(None),
            });
            self.ahead_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(a.seq, a.clone());
            m.writer.sealed_ahead.push(a.clone());
            Some(a)
        });
        self.enqueue(Queued::Log(SealedLog {
            start: log.start,
            summary,
            payload: log.payload,
            crcs: log.crcs,
            ahead,
            flush,
        }));
        let seg = m.writer.cur_seg as usize;
        m.seg.last_seq[seg] = m.writer.seq;
        // The cleaner's copies keep the age of the segments they come from, so data that stays
        // cold looks old to cost-benefit wherever it is moved.
        let age = m.life.copy_age.unwrap_or(summary_time);
        m.life.seg_written[seg] = m.life.seg_written[seg].max(age);
        m.life
            .usage_dirty
            .insert(seg as u64 / format::table_entries_per_page(format::TABLE_USAGE) as u64);
        m.writer.seq += 1;
        m.writer.pos = log.start + 1 + payload_blocks as u64;
        let log_bytes = (1 + payload_blocks as u64) * BLOCK_U64;
        m.sb_bytes_since += log_bytes;
        self.count(|c| {
            c.logs += 1;
            c.bytes_written += log_bytes;
            c.metadata_blocks += metadata_blocks;
            c.device_flushes += u64::from(flush);
            c.data_only_logs += u64::from(flags & FLAG_DATA_ONLY != 0 && flags & FLAG_END != 0);
        });
        // Keep at least two blocks ahead (a summary and a payload block); a lone last block
        // becomes a pad log so logs keep tiling the segment.
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks;
        if seg_end - m.writer.pos == 1 {
            self.log_open(m, FLAG_PAD);
            self.log_close(m, 0)?;
        } else if m.writer.pos == seg_end {
            self.advance_segment(m)?;
        }
        Ok(())
    }

    fn enqueue(&self, entry: Queued) {
        self.log_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(entry);
        self.queued_total.fetch_add(1, AtomicOrdering::AcqRel);
    }

    /// Writes every sealed log up to sequence `seq` (exclusive), in order, with the CRC chain;
    /// returns once they are written (by this thread or another). Takes no lock but the log
    /// writer's and the queue's, so it runs with or without `meta`. A failed write poisons the
    /// pool: the logs behind it are dropped and every caller gets the error.
    pub(crate) fn write_logs_until(&self, seq: u64) -> Result<()> {
        if self.written_seq.load(AtomicOrdering::Acquire) >= seq {
            // A superblock below `seq` was taken from the queue: written, or handed off.
            self.write_handed_off_superblocks()?;
            self.check_not_poisoned()?;
            // The cleaner's copies in those logs are on the device, once their payloads are.
            if !self.payloads_in_flight_below(seq) {
                self.copies.written_below(seq);
            }
            return Ok(());
        }
        self.write_queued_until(seq, Superblocks::Write)?;
        self.write_handed_off_superblocks()?;
        self.wait_ahead(seq, None)?;
        // The cleaner's copies in those logs are on the device now.
        self.copies.written_below(seq);
        Ok(())
    }

    /// Returns once the logs up to `seq` that hold buffers of inode `ino` are written (the
    /// summaries up to `seq`, and the payloads naming `ino`), and durable too if `flush` (the
    /// barrier policy flushes after that log).
    pub(crate) fn wait_sealed(&self, seq: u64, flush: bool, ino: u64) -> Result<()> {
        if self.durable_seq.load(AtomicOrdering::Acquire) > seq {
            return self.check_not_poisoned();
        }
        self.write_queued_until(seq + 1, Superblocks::HandOff)?;
        self.wait_ahead(seq + 1, Some(&[ino]))?;
        if flush && self.durable_seq.load(AtomicOrdering::Acquire) <= seq {
            self.flush_ahead()?;
        }
        self.check_not_poisoned()
    }

    /// Writes the logs sealed under one hold of `meta` (`end`: the sequence after the last;
    /// `own`: their ahead payloads) and returns once they are written and, if the barrier
    /// policy says so, flushed. The payloads go first, concurrently with other threads', each
    /// through `sched` as this thread's I/O; then the summaries up to `end`. Earlier logs are
    /// waited for only where they name one of the same files.
    pub(crate) fn write_own_logs(
        &self,
        end: u64,
        own: &[Arc<AheadPayload>],
        small: &[(u64, Vec<u64>, bool)],
    ) -> Result<()> {
        for a in own {
            self.write_ahead(a)?;
        }
        self.write_queued_until(end, Superblocks::HandOff)?;
        // Logs the log writer wrote whole were flushed with their write if the policy says
        // so; if an earlier payload of the same files was still in flight then, flush again.
        let mut flush = own.iter().any(|a| a.flush);
        for (seq, inos, flushed) in small {
            flush |= self.wait_ahead(*seq, Some(inos))? && *flushed;
        }
        for a in own {
            self.wait_ahead(a.seq, Some(&a.inos))?;
            self.wait_payload(a)?;
        }
        if flush {
            self.flush_ahead()?;
        }
        self.check_not_poisoned()
    }

    /// The error a poisoned pool reports.
    pub(crate) fn poison_error(&self) -> Error {
        self.check_not_poisoned()
            .err()
            .unwrap_or_else(|| Error::Invalid("a log payload was not written".into()))
    }

    /// Writes an ahead payload if nobody has taken it on yet (this thread's I/O), or finishes it
    /// if another thread started it and nobody waits for its chunks yet; then releases what its
    /// completion lets go. A payload another thread is finishing is left to it
    /// ([`Inner::wait_payload`] waits for it).
    pub(crate) fn write_ahead(&self, a: &AheadPayload) -> Result<()> {
        self.start_ahead(a);
        self.finish_ahead(a)
    }

    /// Starts writing an ahead payload if nobody has taken it on yet (this thread's I/O): on a
    /// device that takes requests in flight its chunks are queued, and whoever needs the
    /// payload complete waits for them ([`Inner::finish_ahead`]).
    pub(crate) fn start_ahead(&self, a: &AheadPayload) {
        if !a.claim() {
            return;
        }
        let _fail = super::poison::FailOnUnwind {
            inner: self,
            payload: a,
        };
        let _charged = a.charge.map(crate::sched::Charge::apply);
        let started = self.check_not_poisoned().and_then(|()| {
            a.crc();
            let base = (a.start + 1) * BLOCK_U64;
            let mut started = Vec::new();
            if self.dev.writes_are_copies() {
                for (i, block) in a.blocks.iter().enumerate() {
                    self.dev
                        .write_at(base + i as u64 * BLOCK_U64, &block[..])
                        .map_err(|e| self.payload_error(a, e))?;
                }
            } else {
                // Several chunks in flight, so a scheduler sees the writer backlogged for the
                // whole payload; the window bounds the copies held.
                let mut window = std::collections::VecDeque::new();
                for (k, chunk) in a.blocks.chunks(AHEAD_CHUNK_BLOCKS).enumerate() {
                    if window.len() == AHEAD_CHUNKS_IN_FLIGHT {
                        window
                            .pop_front()
                            .map_or(Ok(()), PendingWrite::wait)
                            .map_err(|e| self.payload_error(a, e))?;
                    }
                    let mut buf = Vec::with_capacity(chunk.len() * BLOCK);
                    for block in chunk {
                        buf.extend_from_slice(&block[..]);
                    }
                    let at = base + (k * AHEAD_CHUNK_BLOCKS) as u64 * BLOCK_U64;
                    window.push_back(self.dev.start_write(at, buf));
                }
                started.extend(window);
            }
            Ok(started)
        });
        a.set_started(started);
    }

    /// Waits until an ahead payload is written, writing it if nobody has taken it on and
    /// finishing it if its chunks are in the device and nobody waits for them. A failed payload
    /// poisons the pool: its error, or the pool's.
    pub(crate) fn wait_payload(&self, a: &AheadPayload) -> Result<()> {
        loop {
            self.start_ahead(a);
            let finished = self.finish_ahead(a);
            let mut st = a.state.lock();
            match *st {
                AheadState::Done => return finished,
                AheadState::Failed => return finished.and_then(|()| Err(self.poison_error())),
                AheadState::Pending => continue,
                AheadState::Writing => {
                    // Started chunks are handed over under the state lock: checked under it,
                    // a hand-over cannot be missed.
                    if a.started
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some()
                    {
                        continue;
                    }
                    a.done.wait(&mut st);
                }
            }
        }
    }

    /// Finishes a started payload if nobody has yet: waits for its chunks, marks it written
    /// (or failed: the pool is poisoned) and releases what its completion lets go. Its error if
    /// this thread finished it and it failed.
    pub(crate) fn finish_ahead(&self, a: &AheadPayload) -> Result<()> {
        let Some(started) = a.started.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(());
        };
        let _fail = super::poison::FailOnUnwind {
            inner: self,
            payload: a,
        };
        let written = started.and_then(|started| {
            started
                .into_iter()
                .try_for_each(PendingWrite::wait)
                .map_err(|e| self.payload_error(a, e))
        });
        self.ahead_unflushed.store(true, AtomicOrdering::Release);
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.seq);
        a.finish(written.is_ok());
        self.advance_written();
        written
    }

    /// A payload write that failed: poisons the pool.
    fn payload_error(&self, a: &AheadPayload, e: std::io::Error) -> Error {
        let err = Error::io(
            format!(
                "{} device: writing the payload of log {} at block {}",
                self.dev.kind(),
                a.seq,
                a.start + 1
            ),
            e,
        );
        self.poison(&err);
        err
    }

    /// Waits until the ahead payloads below `seq` (of the inodes `inos` only, if given) are
    /// written, writing those nobody has taken on.
    pub(crate) fn wait_ahead(&self, seq: u64, inos: Option<&[u64]>) -> Result<bool> {
        let waiting: Vec<Arc<AheadPayload>> = self
            .ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(..seq)
            .filter(|(_, a)| inos.is_none_or(|inos| a.inos.iter().any(|i| inos.contains(i))))
            .map(|(_, a)| a.clone())
            .collect();
        for a in &waiting {
            self.write_ahead(a)?;
        }
        for a in &waiting {
            self.wait_payload(a)?;
        }
        self.check_not_poisoned()?;
        Ok(!waiting.is_empty())
    }

    /// Moves `written_seq` up to the first log not complete (summary and payload), and releases
    /// the buffers of the logs it passed.
    pub(crate) fn advance_written(&self) {
        let due = {
            let pending = self.ahead_pending.lock().unwrap_or_else(|p| p.into_inner());
            let summaries = self.summary_seq.load(AtomicOrdering::Acquire);
            let written = pending
                .keys()
                .next()
                .map_or(summaries, |&k| k.min(summaries));
            self.written_seq.fetch_max(written, AtomicOrdering::AcqRel);
            // A log's buffers go once it and every earlier log naming one of their files are
            // written: a run of data-only logs releases with its last log, and the others
            // may have been written by other threads.
            let mut releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
            let due: Vec<u64> = releases
                .iter()
                .filter(|&(&seq, (release, _))| {
                    seq < written
                        || (seq < summaries
                            && !pending.range(..=seq).any(|(_, a)| {
                                release
                                    .iter()
                                    .any(|(cell, _)| a.inos.binary_search(&cell.ino).is_ok())
                            }))
                })
                .map(|(&seq, _)| seq)
                .collect();
            due.into_iter()
                .filter_map(|seq| releases.remove(&seq))
                .collect::<Vec<_>>()
        };
        let mut spare = Vec::new();
        for (release, bytes) in due {
            for (cell, blocks) in release {
                self.drop_written(&mut cell.lock(), &blocks, &mut spare);
            }
            self.in_flight.fetch_sub(bytes, AtomicOrdering::AcqRel);
        }
        super::engine::recycle_blocks(spare);
    }

    /// Sealed bytes not yet written ([`Inner::in_flight`]) above which a writer that buffers
    /// waits for the log writer ([`Inner::wait_in_flight`]), so the memory held stays bounded
    /// when writers outpace it: one write buffer when the log writer does device I/O;
    /// [`BEHIND_BUFFERS`] buffers in a memory pool, where it writes by copying memory, while
    /// space is not tight ([`Inner::space_tight`]). At one buffer there, every buffer-full
    /// checkpoint sealed a whole buffer and so stopped every writer until the copy of it was
    /// done: in `bench fileserver` (20 threads) the writers spent about a quarter of their time
    /// waiting there, 13 ms a wait. Without the space condition, writers used space faster than
    /// the cleaner freed it, and one run in four ended with no room for the checkpoint (with the
    /// buffered data) a cleaning pass needs.
    pub(crate) fn in_flight_max(&self) -> u64 {
        let buffers =
            if self.dev.writes_are_copies() && !self.space_tight.load(AtomicOrdering::Acquire) {
                BEHIND_BUFFERS
            } else {
                1
            };
        self.config.dirty_bytes_max.saturating_mul(buffers)
    }

    /// Called when more than [`Inner::in_flight_max`] of sealed data is unwritten: writes the
    /// queued summaries and whole logs with the log writer, then, oldest first, the ahead
    /// payloads nobody has started while that is still so. Payloads their sealers are writing
    /// are not waited for: each sealer waits for its own, which bounds them, and waiting here
    /// would tie every writer's pace to the slowest payload in the device.
    pub(crate) fn wait_in_flight(&self) -> Result<()> {
        self.write_queued_until(u64::MAX, Superblocks::HandOff)?;
        let pending: Vec<Arc<AheadPayload>> = self
            .ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for a in pending {
            if self.in_flight.load(AtomicOrdering::Acquire) <= self.in_flight_max() {
                break;
            }
            // Nothing if its sealer (or anyone) has it; else written here, as its owner's I/O.
            self.write_ahead(&a)?;
        }
        self.check_not_poisoned()
    }

    /// A flush after ahead payloads: every log complete when it starts is durable after it.
    fn flush_ahead(&self) -> Result<()> {
        let complete = self.written_seq.load(AtomicOrdering::Acquire);
        self.ahead_unflushed.store(false, AtomicOrdering::Release);
        self.flushes_running.fetch_add(1, AtomicOrdering::AcqRel);
        self.flush_counted("after a log", complete)
    }

    /// Flushes the device for a caller that counted itself in `flushes_running`; afterwards
    /// every log below `durable` is durable.
    fn flush_counted(&self, why: &str, durable: u64) -> Result<()> {
        let flushed = self
            .dev
            .flush()
            .map_err(|e| Error::io(format!("{} device: flush {why}", self.dev.kind()), e))
            .inspect_err(|e| self.poison(e));
        self.flushes_running.fetch_sub(1, AtomicOrdering::AcqRel);
        flushed?;
        self.count(|c| c.device_flushes += 1);
        self.durable_seq.fetch_max(durable, AtomicOrdering::AcqRel);
        Ok(())
    }

    /// Leaves the queued logs (a direct write's summaries) to the background thread, which
    /// writes them as its own I/O while the writer goes on with its data (without a background
    /// thread, which only a failed thread start leaves, the writer writes them).
    /// Past [`BEHIND_BUFFERS`] buffers' worth of sealed data unwritten (the background
    /// thread's idle-class writes wait in `sched` behind busier classes, say), the writer
    /// writes with them, lending its priority, so the memory held stays bounded.
    pub(crate) fn write_logs_behind(&self) -> Result<()> {
        let most = self.config.dirty_bytes_max.saturating_mul(BEHIND_BUFFERS);
        if self.in_flight.load(AtomicOrdering::Acquire) > most {
            return self.wait_in_flight();
        }
        let background = self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if background {
            self.wake_background(|w| w.logs = true);
            self.check_not_poisoned()
        } else {
            self.write_logs_until(u64::MAX)
        }
    }

    /// Takes the log writer (lending this thread's priority while it waits) and writes the
    /// queued logs below sequence `seq`.
    fn write_queued_until(&self, seq: u64, superblocks: Superblocks) -> Result<()> {
        loop {
            let stop = {
                let mut w = super::engine::lock_lending(&self.log_writer, &self.log_inherit);
                let _hold = self.log_inherit.hold();
                self.write_queued(&mut w, seq)?
            };
            match stop {
                None => return Ok(()),
                // The next log or superblock needs the payloads before it complete: wait for
                // them (writing those nobody took on) with the log writer released, so that a
                // thread whose own logs another thread has written meanwhile finds that out
                // without waiting for payloads that are not its own.
                Some(Stop::Barrier(barrier)) => {
                    self.wait_ahead(barrier, None)?;
                }
                Some(Stop::Superblock) => match superblocks {
                    Superblocks::Write => {
                        #[cfg(test)]
                        self.stop_at_superblock_gate();
                        self.write_handed_off_superblocks()?;
                    }
                    Superblocks::HandOff => self.wake_background(|w| w.logs = true),
                },
            }
        }
    }

    /// Writes the queued logs below sequence `seq` with the log writer held (`w`). Stops
    /// before a log or superblock that needs payloads still in flight, returning the sequence
    /// they must all be complete below; and at a superblock, which it takes from the queue for
    /// the caller to write once the log writer is released.
    pub(crate) fn write_queued(&self, w: &mut LogWriter, seq: u64) -> Result<Option<Stop>> {
        loop {
            // Up to `seq` only: later logs are their sealers' to wait for.
            let next = {
                let mut q = self.log_queue.lock().unwrap_or_else(|p| p.into_inner());
                match q.front() {
                    Some(e) if e.order() < seq => {
                        if let Some(barrier) = e.barrier() {
                            if self.payloads_in_flight_below(barrier) {
                                return Ok(Some(Stop::Barrier(barrier)));
                            }
                        }
                        q.pop_front()
                    }
                    _ => None,
                }
            };
            let written = match next {
                None => break,
                Some(Queued::Log(log)) => self.write_sealed(w, log),
                Some(Queued::Superblock(sb)) => {
                    // Put with the handed-off superblocks before the log writer is let go: a
                    // thread that then finds it gone from the queue writes it, or waits for the
                    // one writing it (`write_handed_off_superblocks` writes under the
                    // superblock writer's lock), instead of taking it for written.
                    let (sb, flush_first) = self.take_superblock(w, sb)?;
                    self.sb_handoff
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((sb, flush_first));
                    return Ok(Some(Stop::Superblock));
                }
            };
            if let Err(e) = written {
                self.log_queue
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
                return Err(e);
            }
        }
        self.check_not_poisoned().map(|()| None)
    }

    /// Whether an ahead payload below sequence `seq` is not written yet.
    fn payloads_in_flight_below(&self, seq: u64) -> bool {
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(..seq)
            .next()
            .is_some()
    }

    /// Takes a superblock the log writer reached (`w` held): every log before it is written,
    /// payloads too (`write_queued` waited for them). Fills in the last log's CRC and says
    /// whether a flush must make those logs durable first (counted as running, so a flush
    /// under the log writer meanwhile does not take it for done).
    fn take_superblock(&self, w: &mut LogWriter, mut sb: Superblock) -> Result<(Superblock, bool)> {
        self.check_not_poisoned()?;
        debug_assert!(!self.payloads_in_flight_below(sb.next.sequence));
        sb.next.prev_crc = w.prev_crc;
        Ok((sb, self.start_flush(w)))
    }

    /// Tests: stops a thread that took a superblock from the queue, after it let the log writer
    /// go and before it writes the superblock, while [`Inner::sb_taken_gate`] is set: it says
    /// so on the gate's first channel and goes on when told on the second.
    #[cfg(test)]
    fn stop_at_superblock_gate(&self) {
        let gate = self
            .sb_taken_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((taken, go_on)) = gate {
            let _ = taken.send(());
            let _ = go_on.recv();
        }
    }

    /// Writes the superblocks taken from the queue and not yet written (by a thread writing the
    /// queue, or passed by one on its way to its own logs), oldest first. Taken under the
    /// superblock writer's lock, so a thread finding the list empty while another writes what
    /// it took waits for that write.
    pub(crate) fn write_handed_off_superblocks(&self) -> Result<()> {
        let mut newest = self.sb_writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken =
            std::mem::take(&mut *self.sb_handoff.lock().unwrap_or_else(|p| p.into_inner()));
        taken.sort_by_key(|(sb, _)| sb.generation);
        let mut result = Ok(());
        for (sb, flush_first) in taken {
            // Each one counted a flush as running: each ends it, even after an error.
            let written = if result.is_ok() {
                self.write_superblock_locked(&mut newest, sb, flush_first)
            } else if flush_first {
                self.flushes_running.fetch_sub(1, AtomicOrdering::AcqRel);
                Ok(())
            } else {
                Ok(())
            };
            result = result.and(written);
        }
        result
    }

    /// Writes a superblock taken by [`Inner::take_superblock`], without the log writer, with
    /// the superblock writer's lock held (`newest`: the newest generation written): a flush
    /// makes the logs before it durable, then the superblock goes, flushed too. The logs after
    /// it are written meanwhile; a flush covers at least every write that completed before it
    /// began, so those before the superblock are covered.
    fn write_superblock_locked(
        &self,
        newest: &mut u64,
        mut sb: Superblock,
        flush_first: bool,
    ) -> Result<()> {
        self.finish_flush(flush_first, "before superblock", sb.next.sequence)?;
        self.check_not_poisoned()?;
        if *newest >= sb.generation {
            // A later superblock, taken after this one, got here first: it supersedes it.
            return Ok(());
        }
        sb.written_ns = now_ns();
        let copy = sb.generation % 2;
        self.dev
            .write_and_flush(copy * BLOCK_U64, &sb.encode()[..])
            .map_err(|e| {
                Error::io(
                    format!("{} device: writing superblock {copy}", self.dev.kind()),
                    e,
                )
            })
            .inspect_err(|e| self.poison(e))?;
        *newest = sb.generation;
        self.sb_checkpoint_seq
            .fetch_max(sb.checkpoint_sequence, AtomicOrdering::AcqRel);
        self.count(|c| {
            c.superblock_writes += 1;
            c.device_flushes += 1;
        });
        Ok(())
    }

    /// Flushes the device if a log was written since the last flush (`w` held).
    fn flush_device(&self, w: &mut LogWriter, why: &str) -> Result<()> {
        // A flush running without the log writer may not have reached the device yet.
        let ahead = self.ahead_unflushed.swap(false, AtomicOrdering::AcqRel);
        if w.unflushed || ahead || self.flushes_running.load(AtomicOrdering::Acquire) > 0 {
            self.dev
                .flush()
                .map_err(|e| Error::io(format!("{} device: flush {why}", self.dev.kind()), e))
                .inspect_err(|e| self.poison(e))?;
            w.unflushed = false;
            self.count(|c| c.device_flushes += 1);
        }
        Ok(())
    }

    /// Writes one sealed log: payload first, then the summary that makes it a log.
    fn write_sealed(&self, w: &mut LogWriter, log: SealedLog) -> Result<()> {
        self.check_not_poisoned()?;
        let SealedLog {
            start,
            mut summary,
            payload,
            crcs,
            ahead,
            flush,
        } = log;
        let seq = summary.sequence;
        let fail = |what: String, e: std::io::Error| {
            let err = Error::io(format!("{} device: {what}", self.dev.kind()), e);
            self.poison(&err);
            err
        };
        if flush && self.durable_seq.load(AtomicOrdering::Acquire) < seq {
            // A log the barrier policy flushes goes only after the logs before it are durable,
            // so a power cut between its write and its flush cannot leave it behind an earlier
            // summary that was lost or torn.
            let complete = self.written_seq.load(AtomicOrdering::Acquire);
            self.flush_device(w, "before a flushed log")?;
            self.durable_seq.fetch_max(complete, AtomicOrdering::AcqRel);
        }
        if let Some(a) = ahead {
            // Only the summary: the payload is its sealer's to write (`write_ahead`).
            summary.prev_crc = w.prev_crc;
            summary.payload_crc = a.crc();
            w.buf.clear();
            w.buf.resize(BLOCK, 0);
            let summary_crc = summary.encode_into(&mut w.buf[..BLOCK]);
            self.dev
                .write_at(start * BLOCK_U64, &w.buf[..BLOCK])
                .map_err(|e| {
                    fail(
                        format!("writing the summary of log {seq} at block {start}"),
                        e,
                    )
                })?;
            w.prev_crc = summary_crc;
            w.unflushed = true;
            self.summary_seq.store(seq + 1, AtomicOrdering::Release);
            self.advance_written();
            return Ok(());
        }
        // A log that is not data-only may name blocks of earlier payloads: `write_queued`
        // waited for them.
        debug_assert!(
            summary.flags & (FLAG_AHEAD | FLAG_PAD) != 0 || !self.payloads_in_flight_below(seq)
        );
        let complete = self.written_seq.load(AtomicOrdering::Acquire);
        let crc = super::engine::payload_crc(&payload, &crcs);
        w.buf.clear();
        w.buf.resize(BLOCK, 0);
        let copies = self.dev.writes_are_copies();
        for (i, block) in payload.iter().enumerate() {
            if copies {
                let addr = start + 1 + i as u64;
                self.dev
                    .write_at(addr * BLOCK_U64, &block[..])
                    .map_err(|e| fail(format!("writing block {addr} of log {seq}"), e))?;
            } else {
                w.buf.extend_from_slice(&block[..]);
            }
        }
        // The payload is on the device or staged. Metadata blocks (held by the log alone) are
        // kept for reuse now; file buffers' last holders are now their files, which release
        // them once the log is written (`advance_written`).
        super::engine::recycle_blocks(payload);
        summary.prev_crc = w.prev_crc;
        summary.payload_crc = crc;
        let summary_crc = summary.encode_into(&mut w.buf[..BLOCK]);
        // In-place devices already hold the payload: the summary, written last, makes it a log.
        let bytes = if copies { &w.buf[..BLOCK] } else { &w.buf[..] };
        let offset = start * BLOCK_U64;
        let written = if flush {
            self.dev.write_and_flush(offset, bytes)
        } else {
            self.dev.write_at(offset, bytes)
        };
        written.map_err(|e| fail(format!("writing log {seq} at block {start}"), e))?;
        w.prev_crc = summary_crc;
        w.unflushed = !flush;
        if flush {
            // Everything complete before the write is durable with it; ahead payloads of
            // earlier logs still in flight are not.
            let ahead_in_flight = complete < seq;
            if !ahead_in_flight {
                self.ahead_unflushed.store(false, AtomicOrdering::Release);
            }
            let durable = if ahead_in_flight { complete } else { seq + 1 };
            self.durable_seq.fetch_max(durable, AtomicOrdering::AcqRel);
        }
        self.summary_seq.store(seq + 1, AtomicOrdering::Release);
        // Buffers go once their blocks are on the device (`advance_written`).
        self.advance_written();
        Ok(())
    }

    /// Writes one file's buffered data as a data-only log (relaxed ordering), recovered by
    /// roll-forward. The block map nodes follow at the next checkpoint.
    pub(crate) fn commit_data_log(&self, m: &mut Meta, cell: &InodeCell) -> Result<()> {
        self.in_section(m, Section::Sealing, |m| self.seal_data_log(m, cell))
    }

    /// [`Inner::commit_data_log`], timed as sealing.
    fn seal_data_log(&self, m: &mut Meta, cell: &InodeCell) -> Result<()> {
        // The log's release list keeps the inode's cell until the log is written.
        let Some(cell) = m.inodes.get(&cell.ino).cloned() else {
            return Ok(());
        };
        let count = {
            let st = cell.lock();
            let count = unsealed_count(&st);
            if st.freed || (count == 0 && !st.attr_dirty) {
                return Ok(());
            }
            count as u64
        };
        self.ensure_space(m, count + 1)?;
        let mut st = cell.lock();
        if st.freed || (!has_unsealed(&st) && !st.attr_dirty) {
            // The superblock refresh `ensure_space` ran took everything already.
            return Ok(());
        }
        self.log_open(m, FLAG_BEGIN | FLAG_DATA_ONLY);
        let written = self.seal_file_data(m, cell.ino, &mut st)?;
        self.settle_sealed(m, cell.ino, &st);
        drop(st);
        // The buffers go once the log is written.
        m.writer.release.push((cell.clone(), written));
        let closed = self.log_close(m, FLAG_END);
        m.writer.charge = None;
        closed?;
        m.pending.insert(cell.ino);
        Ok(())
    }

    /// Writes the buffered data of every dirty file as one run of data-only logs (relaxed
    /// ordering, no namespace change pending), recovered by roll-forward; the block maps and
    /// inodes follow at the next checkpoint. How buffered data goes out when the buffer is
    /// full: map nodes and inode pages are written once per checkpoint, not once per flush.
    /// With `if_room`, does nothing when the space check fails (nothing is written then).
    pub(crate) fn commit_data_logs(&self, m: &mut Meta, if_room: bool) -> Result<()> {
        let cells = self.dirty_cells(m);
        self.in_section(m, Section::Sealing, |m| {
            self.seal_data_logs(m, &cells, if_room, u64::MAX)
                .map(|_| ())
        })
    }

    /// [`Inner::commit_data_logs`] in parts of about [`SEAL_PART_BLOCKS`] blocks, each its own
    /// run, handing `meta` to the threads waiting for it between the parts
    /// ([`MetaGuard::unlock_fair_and_write`]) and writing the part's logs meanwhile; returns
    /// with `meta` held again. How a writer that found the buffer full seals it: in one hold,
    /// every create and delete of the other threads waited for the whole buffer (milliseconds),
    /// and with all of them asleep a core stood idle.
    pub(crate) fn commit_data_logs_in_parts<'a>(
        &'a self,
        mut m: MetaGuard<'a>,
    ) -> Result<MetaGuard<'a>> {
        let cells = self.dirty_cells(&m);
        let mut from = 0;
        while from < cells.len() {
            let rest = &cells[from..];
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

    /// The cells of the files a seal looks through ([`super::engine::DirtySet::to_seal`]), in
    /// inode order.
    fn dirty_cells(&self, m: &Meta) -> Vec<Arc<InodeCell>> {
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
            .to_seal
            .iter()
            .collect();
        let mut cells = Vec::with_capacity(listed.len());
        let mut freed = Vec::new();
        for ino in listed {
            match m.inodes.get(&ino) {
                Some(cell) => cells.push(cell.clone()),
                None => freed.push(ino),
            }
        }
        // Freed files have nothing to seal. Numbers are given out again only under `meta`,
        // held here, so no writer has listed any of these again meanwhile.
        if !freed.is_empty() {
            let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            for ino in &freed {
                dirty.to_seal.remove(ino);
            }
        }
        cells
    }

    /// Debug builds: every file a data-only log could take something from is among those a
    /// seal looks through ([`super::engine::DirtySet::to_seal`]). Each inode's lock is taken
    /// before the set's, as a writer takes them.
    fn check_to_seal(&self, m: &Meta) {
        let others: Vec<u64> = {
            let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            dirty.all.difference(&dirty.to_seal).collect()
        };
        for ino in others {
            let Some(cell) = m.inodes.get(&ino) else {
                continue;
            };
            let st = cell.lock();
            let listed = self
                .dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_seal
                .contains(&ino);
            debug_assert!(
                listed || st.freed || st.kind != super::FileKind::File || !sealable(m, ino, &st),
                "inode {ino} has data to seal and is not listed to be sealed (unsealed buffers: \
                 {}, attributes changed: {}, placed: {}, pending: {}, open: {})",
                has_unsealed(&st),
                st.attr_dirty,
                m.ns_changed.contains(&ino),
                m.pending.contains(&ino),
                st.open
            );
        }
    }

    /// Under inode `ino`'s lock (`st`), after a seal took what it could from it: the file is no
    /// longer looked through by seals if a data-only log can take nothing more from it now.
    /// A freed inode's entry is left alone: a seal in parts lets `meta` go between its parts,
    /// and the number may belong to a newer file by then (the next list drops numbers no file
    /// has).
    fn settle_sealed(&self, m: &Meta, ino: u64, st: &super::engine::InodeState) {
        if st.freed {
            return;
        }
        if st.kind != super::FileKind::File || !sealable(m, ino, st) {
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_seal
                .remove(&ino);
        }
    }

    /// Writes the buffered data of the files of `cells` as one run of data-only logs (relaxed
    /// ordering, no namespace change pending), recovered by roll-forward; the block maps and
    /// inodes follow at the next checkpoint. How buffered data goes out when the buffer is
    /// full: map nodes and inode pages are written once per checkpoint, not once per flush.
    /// Takes files from the front of `cells` until they hold `most` blocks to write (a file is
    /// never split between runs) and returns how many it took. With `if_room`, does nothing
    /// when the space check fails (nothing is written then).
    fn seal_data_logs(
        &self,
        m: &mut Meta,
        cells: &[Arc<InodeCell>],
        if_room: bool,
        most: u64,
    ) -> Result<usize> {
        let mut count = 0u64;
        let mut taken = 0;
        for cell in cells {
            if count >= most {
                break;
            }
            taken += 1;
            let st = cell.lock();
            if !st.freed && st.kind == super::FileKind::File {
                // Every buffer, sealed ones still in flight too: a bound taken without walking
                // the buffers, which the loop below walks anyway (walking them here as well was
                // a third of sealing's time under `meta`).
                count += st.dirty.len() as u64 + 1;
            }
        }
        let cells = &cells[..taken];
        if count == 0 {
            return Ok(taken);
        }
        match self.ensure_space(m, count + count / 64 + 1) {
            Err(Error::NoSpace(_)) if if_room => return Ok(taken),
            r => r?,
        }
        let mut open = false;
        let mut done = Vec::with_capacity(cells.len());
        for cell in cells {
            let mut st = cell.lock();
            if st.freed || st.kind != super::FileKind::File || !sealable(m, cell.ino, &st) {
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
            m.pending.insert(cell.ino);
            done.push((cell.clone(), written));
        }
        let closed = if open {
            // Buffers go once the last log is written.
            m.writer.release = done;
            self.log_close(m, FLAG_END)
        } else {
            Ok(())
        };
        m.writer.charge = None;
        closed.map(|()| taken)
    }

    /// Adds a file's unsealed buffers and its size and mtime to the open data-only log, as the
    /// I/O of the file's last writer; returns the release list for them (in one pass over the
    /// buffers, not a look-up per block: this runs under `meta` for every block written).
    ///
    /// A file with a change only a checkpoint records (`Meta::ns_changed`: created, renamed,
    /// linked, attributes or size set) may not be in the newest checkpoint before the log, or
    /// another file may be there under its number: its blocks are only placed
    /// ([`DescKind::Placed`]), with no attributes record, for the next checkpoint to map.
    /// Roll-forward does not replay them, so what they supersede stays until a checkpoint is
    /// durable (`seg_dec`), and the file's sync is that checkpoint.
    fn seal_file_data(
        &self,
        m: &mut Meta,
        ino: u64,
        st: &mut super::engine::InodeState,
    ) -> Result<Vec<(u64, u64)>> {
        m.writer.charge = st.charge;
        let flush = self.config.barrier == Barrier::EveryLog;
        let placed = m.ns_changed.contains(&ino);
        let kind = if placed {
            DescKind::Placed
        } else {
            DescKind::Data
        };
        let mut written = Vec::with_capacity(st.dirty.len());
        for (&block, d) in st.dirty.iter_mut().filter(|(_, d)| d.sealed_in.is_none()) {
            let (gen, data, crc) = (d.gen, d.share_with_log(), d.crc());
            let addr = self.log_add_shared(m, kind, ino, 0, block, data, Some(crc))?;
            // The log the block went into (`log_add_shared` may have rolled to a new one).
            d.sealed_in = Some((m.writer.seq, flush));
            let old = st.map.set(block, addr);
            m.seg_inc(addr, self.segment_blocks);
            match (old, placed) {
                (0, _) => {}
                (_, true) => m.seg_dec(old, m.writer.seq, self.segment_blocks),
                (_, false) => m.seg_supersede(old, m.writer.seq, self.segment_blocks),
            }
            written.push((block, gen));
        }
        if placed {
            let n = written.len() as u64;
            self.count(|c| c.placed_blocks += n);
            return Ok(written);
        }
        self.log_add_attr(m, ino, st.size, st.mtime_ns)?;
        st.attr_dirty = false;
        // Recovery replays the file's part of the run only with its attributes record
        // (`recovery::unfinished_run_data`). The record always joins the log of the file's last
        // block (descriptors are kept for it), which a sync of the file waits for.
        debug_assert!(written.last().is_none_or(|&(block, _)| {
            st.dirty[&block]
                .sealed_in
                .is_some_and(|(seq, _)| seq == m.writer.seq)
        }));
        Ok(written)
    }

    /// Drops the buffers `written` names that are still of the generation written, into
    /// `spare` (to be recycled once the inode lock is released).
    fn drop_written(
        &self,
        st: &mut super::engine::InodeState,
        written: &[(u64, u64)],
        spare: &mut Vec<Arc<format::Block>>,
    ) {
        let mut released = 0;
        for &(block, gen) in written {
            // A buffer is sealed once per generation (`DirtyBlock::sealed_in`), so the same
            // generation is never waiting in a later log.
            if st.dirty.get(&block).is_some_and(|d| d.gen == gen) {
                if let Some(d) = st.dirty.remove(&block) {
                    spare.push(d.into_data());
                }
                released += BLOCK_U64;
            }
        }
        self.dirty_bytes.fetch_sub(released, AtomicOrdering::AcqRel);
    }

    /// Debug builds: every slot of cached inode page `p` that this checkpoint does not write
    /// holds its inode's current record, or that inode changed after the checkpoint took the
    /// dirty set (a writer marks the inode dirty under the same lock hold as its change, and
    /// nothing takes the dirty set while `meta` is held), so the next checkpoint writes it. A
    /// checkpoint nested in another's cleaning is not checked: it finds the inodes the outer
    /// one took and has not written yet changed, and their cached records, matching the maps
    /// on the device, are the right ones to write there.
    fn check_cached_page(&self, m: &Meta, page: &format::Block, p: u64, records: &Records) {
        for slot in 0..INODES_PER_PAGE {
            let ino = p * INODES_PER_PAGE as u64 + slot as u64;
            if records.get(ino).is_some() || m.freed_slots.contains(&ino) {
                continue;
            }
            let mut fresh = [0u8; INODE_BYTES];
            current_record(m, ino).encode_into(&mut fresh);
            debug_assert!(
                fresh[..] == page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES]
                    || self
                        .dirty
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .all
                        .contains(&ino),
                "inode {ino} changed and is in no checkpoint's work"
            );
        }
    }

    /// Tests: a checkpoint's two bounds for the inodes it would write now, quick and counted.
    #[cfg(test)]
    pub(crate) fn checkpoint_inode_bounds(&self, m: &Meta) -> (u64, u64) {
        let work = checkpoint_work(m, self.dirty.lock().unwrap().all.clone());
        let dir_blocks = encode_changed_dirs(m, &work);
        (
            self.quick_inode_bound(&work, &dir_blocks),
            self.counted_inode_bound(m, &work, &dir_blocks),
        )
    }

    /// An upper bound on the blocks a checkpoint writes for the inodes of `work` (their
    /// buffered blocks and map nodes, and a slot each), from totals alone: every block buffered
    /// (`Inner::dirty_bytes`, sealed ones included, and [`QUICK_BOUND_SLACK_BLOCKS`] for writes
    /// being buffered meanwhile), and for every inode the whole tree of the widest map the
    /// pool has had ([`Inner::widest`]). It visits no inode: counting inode by inode
    /// ([`Inner::counted_inode_bound`]) took a cache miss or more per inode, about 1.3 ms of a
    /// checkpoint's 10 ms under the fileserver workload, all of it holding `meta`.
    fn quick_inode_bound(
        &self,
        work: &DenseSet,
        dir_blocks: &HashMap<u64, Vec<super::engine::FreshBlock>>,
    ) -> u64 {
        let widest_dir = dir_blocks
            .values()
            .map(|b| b.len() as u64)
            .max()
            .unwrap_or(0);
        let widest = self.widest.load(AtomicOrdering::Relaxed);
        // An inode's slot is in its page, counted apart.
        let per_inode = super::map::tree_nodes(widest.max(widest_dir));
        let buffered = self
            .dirty_bytes
            .load(AtomicOrdering::Acquire)
            .div_ceil(BLOCK_U64);
        buffered + QUICK_BOUND_SLACK_BLOCKS + work.len() as u64 * per_inode
    }

    /// Whether the space check for `blocks` would find room at once, without refreshing,
    /// cleaning or waiting ([`Inner::ensure_space`]'s first test).
    fn space_is_ample(&self, m: &Meta, blocks: u64) -> bool {
        let (reserve, low_water) = self.space_margins(m);
        let want = self.space_needed(blocks) + reserve + low_water;
        self.free_blocks_up_to(m, want) >= want
    }

    /// The inodes' part of a checkpoint's estimate, counted inode by inode: unsealed buffers,
    /// and the map nodes that change (the whole tree if its shape changes, else the paths above
    /// the leaves whose children change).
    fn counted_inode_bound(
        &self,
        m: &Meta,
        work: &DenseSet,
        dir_blocks: &HashMap<u64, Vec<super::engine::FreshBlock>>,
    ) -> u64 {
        let mut estimate = 0;
        for ino in work.iter() {
            let st = m.inodes[&ino].lock();
            let dir_len = dir_blocks.get(&ino).map_or(0, |b| b.len());
            // Buffers already in a sealed log stay there (see the sealing below). The inode's
            // slot is in its page, counted apart.
            estimate += unsealed_count(&st) as u64 + map_nodes_bound(&st, dir_len);
        }
        estimate
    }

    /// Writes every buffered block, every changed directory, block map and inode, and a new
    /// checkpoint root, as one or more logs ending in a checkpoint log.
    pub(crate) fn commit_checkpoint(&self, m: &mut Meta) -> Result<()> {
        m.checkpoint_depth += 1;
        let result = self.in_section(m, Section::Checkpoint, |m| {
            self.commit_checkpoint_at_depth(m)
        });
        m.checkpoint_depth -= 1;
        result
    }

    /// [`Inner::commit_checkpoint`]; `m.checkpoint_depth` says whether it runs inside another
    /// (through the space check's cleaning).
    fn commit_checkpoint_at_depth(&self, m: &mut Meta) -> Result<()> {
        let taken: DenseSet =
            std::mem::take(&mut self.dirty.lock().unwrap_or_else(|p| p.into_inner()).all);
        let mut work = checkpoint_work(m, taken);

        // An upper bound on what this checkpoint writes, checked before anything changes: the
        // directories (encoded here, for the sealing below), the inode pages and tables, and
        // each inode's buffered blocks and map nodes.
        let mut dir_blocks = encode_changed_dirs(m, &work);
        // A freed inode costs its slot's page, counted with the pages: deleting many files must
        // not look like writing a block per file, or a full pool could not take the deletes
        // that make room.
        let mut estimate = 2 + dir_blocks.values().map(|b| b.len() as u64).sum::<u64>();
        let mut pages: BTreeSet<u64> = work
            .iter()
            .chain(m.freed_slots.iter())
            .map(|ino| ino / INODES_PER_PAGE as u64)
            .collect();
        pages.extend(m.pages_dirty.iter().copied());
        // The inode file's map: a path per page written, and never more than its whole tree.
        let ifile_len = (m.ifile.blocks.len() as u64 + 1).max(pages.last().map_or(0, |&p| p + 1));
        let ifile_nodes = ((height_for(ifile_len) as u64 + 1) * pages.len().max(1) as u64)
            .min(super::map::tree_nodes(ifile_len) + 1);
        estimate += pages.len() as u64 + ifile_nodes + 4;
        estimate += m.table_estimate();
        // The inodes' part: a bound from totals when the free space covers it with room to
        // spare, else one counted inode by inode.
        let quick = self.quick_inode_bound(&work, &dir_blocks);
        // Debug builds check the quick bound against the count at every checkpoint.
        debug_assert!(
            quick >= self.counted_inode_bound(m, &work, &dir_blocks),
            "the quick bound is below the count"
        );
        let estimate = if self.space_is_ample(m, estimate + quick) {
            estimate + quick
        } else {
            estimate + self.counted_inode_bound(m, &work, &dir_blocks)
        };
        let passes = m.clean_passes;
        m.checking_checkpoint = true;
        let space = self.ensure_space(m, estimate);
        if space.is_err() || m.clean_passes != passes {
            // Nothing was written: the files taken from the dirty set stay in it, or a later
            // sync would not see their buffered data.
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .all
                .extend(work.iter());
            space?;
            // The space check cleaned: the passes changed maps and marked blocks this
            // checkpoint must write, so it starts over with them (without cleaning again if
            // it comes to that twice: a space check cleans only outside cleaning).
            m.in_clean = true;
            let again = self.commit_checkpoint(m);
            m.in_clean = false;
            return again;
        }
        // `ensure_space` may have run a checkpoint of its own; whatever it wrote is no longer dirty.
        work.retain(|ino| m.inodes.contains_key(ino));

        self.log_open(m, FLAG_BEGIN);
        let seq = m.writer.seq;
        let mut records = Records::default();
        let mut written: Vec<Release> = Vec::new();
        // Inodes with a change only a checkpoint records: their next sync waits for this one.
        let mut changed: Vec<Arc<InodeCell>> = Vec::new();
        let now = now_ns();
        let flush = self.config.barrier != Barrier::Superblock;
        for ino in work.iter() {
            let cell = m.inodes[&ino].clone();
            let mut guard = cell.lock();
            let st = &mut *guard;
            // Blocks already in a sealed log stay there: the map names that copy, and this
            // checkpoint is written after it. One pass over the buffers seals the others.
            let mut done = Vec::new();
            for (&block, d) in st.dirty.iter_mut().filter(|(_, d)| d.sealed_in.is_none()) {
                let addr = self.log_add_shared(
                    m,
                    DescKind::Data,
                    ino,
                    0,
                    block,
                    d.share_with_log(),
                    Some(d.crc()),
                )?;
                d.sealed_in = Some((m.writer.seq, flush));
                let old = st.map.set(block, addr);
                m.seg_inc(addr, self.segment_blocks);
                if old != 0 {
                    m.seg_dec_at(old, seq, self.segment_blocks, now);
                }
                done.push((block, d.gen));
            }
            if let Some(blocks) = dir_blocks.remove(&ino) {
                let count = blocks.len() as u64;
                for (i, b) in blocks.into_iter().enumerate() {
                    let addr =
                        self.log_add_shared(m, DescKind::Data, ino, 0, i as u64, b.0, None)?;
                    let old = st.map.set(i as u64, addr);
                    m.seg_inc(addr, self.segment_blocks);
                    if old != 0 {
                        m.seg_dec_at(old, seq, self.segment_blocks, now);
                    }
                }
                for old in st.map.truncate(count) {
                    m.seg_dec_at(old, seq, self.segment_blocks, now);
                }
                st.size = count * BLOCK_U64;
            }
            let mut map = std::mem::take(&mut st.map);
            let result = self.write_map(m, DescKind::MapNode, ino, &mut map);
            st.map = map;
            result?;
            st.attr_dirty = false;
            records.push(ino, st.record(ino));
            drop(guard);
            if m.ns_changed.contains(&ino) {
                changed.push(cell.clone());
            }
            written.push((cell, done));
        }

        // Inode pages: every page holding a changed or freed inode.
        let mut pages: BTreeSet<u64> = records
            .inos()
            .map(|ino| ino / INODES_PER_PAGE as u64)
            .collect();
        pages.extend(m.freed_slots.iter().map(|ino| ino / INODES_PER_PAGE as u64));
        pages.extend(std::mem::take(&mut m.pages_dirty));
        for &p in &pages {
            let first = p * INODES_PER_PAGE as u64;
            let slots = first..first + INODES_PER_PAGE as u64;
            let encode_slot = |page: &mut format::Block, ino: u64, r: &InodeRecord| {
                let slot = (ino - first) as usize;
                r.encode_into(&mut page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES]);
            };
            // A page this process wrote before is updated in place: only the slots of the
            // inodes this checkpoint writes (or frees) are encoded again, since every change to
            // an inode's record puts the inode in the work (checked in debug builds).
            // The log shares the page with the cache: the next change to it copies the page
            // only if the log is not written by then.
            let page = match m.ifile_cache.remove(&p) {
                Some(mut shared) => {
                    if cfg!(debug_assertions) && m.checkpoint_depth == 1 {
                        self.check_cached_page(m, &shared, p, &records);
                    }
                    let page = Arc::make_mut(&mut shared);
                    for (ino, r) in records.range(slots.clone()) {
                        encode_slot(page, ino, r);
                    }
                    for ino in m.freed_slots.range(slots.clone()) {
                        if records.get(ino).is_none() {
                            // Freed, or freed and its number taken again since.
                            encode_slot(page, ino, &current_record(m, ino));
                        }
                    }
                    shared
                }
                None => super::engine::new_block(|page| {
                    for ino in slots {
                        let record = match records.get(ino) {
                            Some(&r) => r,
                            None => current_record(m, ino),
                        };
                        encode_slot(page, ino, &record);
                    }
                }),
            };
            let addr = self.log_add_shared(m, DescKind::InodePage, 0, 0, p, page.clone(), None);
            if m.ifile_cache.len() >= IFILE_CACHE_PAGES {
                m.ifile_cache.clear();
            }
            m.ifile_cache.insert(p, page);
            let addr = addr?;
            let old = m.ifile.set(p, addr);
            m.seg_inc(addr, self.segment_blocks);
            if old != 0 {
                m.seg_dec_at(old, seq, self.segment_blocks, now);
            }
        }
        m.ifile_pages = m
            .ifile_pages
            .max(m.ifile.blocks.len() as u64)
            .max(m.next_ino.div_ceil(INODES_PER_PAGE as u64));
        let mut ifile = std::mem::take(&mut m.ifile);
        let result = self.write_map(m, DescKind::InodeMapNode, 0, &mut ifile);
        m.ifile = ifile;
        result?;

        let number = m.checkpoint + 1;
        // Retention: release what the protection period no longer covers, then drop the old
        // root from the live tree (pinned if its checkpoint stays retained) before the pinned
        // table is written.
        let released = m.prune(seq, self.segment_blocks, true);
        if m.life.pressure {
            self.count(|c| c.protection_released += released);
        }
        let prev_root = m.checkpoint_root;
        if prev_root != 0 {
            m.seg_dec(prev_root, seq, self.segment_blocks);
        }
        let tables = self.write_tables(m)?;
        // The root names the sequence of the log it ends: open the continuation log first if the
        // root would not fit in this one, so the sequence is final before the root is encoded.
        if !self.log_has_room(m, DescKind::Root, 0, 0, 0) {
            self.log_roll(m)?;
        }
        let time_ns = now_ns();
        let root = CheckpointRoot {
            number,
            sequence: m.writer.seq,
            time_ns,
            ifile_root: m.ifile.root,
            ifile_height: m.ifile.height,
            ifile_pages: m.ifile_pages,
            next_ino: m.next_ino,
            inodes: m.inodes.len() as u64,
            prev_root,
            oldest_protected: m.life.oldest_protected(time_ns, number),
            tables,
        };
        let before = m.writer.seq;
        let addr = self.log_add(m, DescKind::Root, 0, 0, 0, &root.encode()[..])?;
        debug_assert_eq!(m.writer.seq, before, "the root went into the log it names");
        let root_seq = m.writer.seq;
        // The buffers go once the checkpoint is written.
        m.writer.release = written;
        self.log_close(m, FLAG_END | FLAG_CHECKPOINT)?;
        m.seg_inc(addr, self.segment_blocks);
        m.life.list.insert(
            number,
            super::lifecycle::Kept {
                time_ns,
                root: addr,
                snapshot: false,
                name: None,
            },
        );
        m.life.since_ckpt = vec![(
            Meta::seg_of(m.writer.pos, self.segment_blocks),
            m.writer.pos,
        )];
        m.checkpoint = number;
        m.dropped_since_ckpt = 0;
        m.checkpoint_root = addr;
        m.checkpoint_seq = root_seq;
        for cell in changed {
            cell.lock().ckpt_seq = root_seq;
        }
        m.ns_changed.clear();
        m.checkpoint_next_seq = m.writer.seq;
        m.checkpoint_at = Some(Instant::now());
        m.freed_slots.clear();
        m.dirs_dirty.clear();
        m.pending.clear();
        m.ns_dirty = false;
        m.superseded_since_ckpt = false;
        self.count(|c| c.checkpoints += 1);
        Ok(())
    }

    /// Writes the changed nodes of a block map bottom-up and updates its root.
    pub(crate) fn write_map(
        &self,
        m: &mut Meta,
        kind: DescKind,
        ino: u64,
        map: &mut BlockMap,
    ) -> Result<()> {
        if !map.is_dirty() {
            return Ok(());
        }
        let seq = m.writer.seq;
        let sb = self.segment_blocks;
        // Only the newest checkpoint's tables are read, so their old nodes pin nothing.
        let dec = |m: &mut Meta, a: u64| {
            if kind == DescKind::TableNode {
                m.seg_dec_unpinned(a, seq, sb)
            } else {
                m.seg_dec(a, seq, sb)
            }
        };
        // A file's or directory's map of a few runs goes in its inode record: no nodes.
        if kind == DescKind::MapNode {
            if let Some(extents) = format::Extents::of(&map.blocks) {
                for a in map.node_addrs().collect::<Vec<_>>() {
                    dec(m, a);
                }
                map.nodes.clear();
                map.root = 0;
                map.height = 0;
                map.inline = Some(extents);
                map.dirty_leaves.clear();
                map.all_dirty = false;
                return Ok(());
            }
        }
        let n = map.blocks.len();
        let h = height_for(n as u64);
        // A map that was in the record has no nodes to keep: every one is written.
        let was_inline = map.inline.take().is_some();
        let all = map.all_dirty || h != map.height || was_inline;
        if all {
            for a in map.node_addrs().collect::<Vec<_>>() {
                dec(m, a);
            }
            map.nodes.clear();
        }
        if h == 0 {
            map.nodes.clear();
            map.root = map.blocks.first().copied().unwrap_or(0);
            map.height = 0;
            map.dirty_leaves.clear();
            map.all_dirty = false;
            return Ok(());
        }
        let mut dirty: BTreeSet<usize> = if all {
            (0..n.div_ceil(FANOUT)).collect()
        } else {
            let leaves = map.dirty_leaves.iter().map(|i| i as usize).collect();
            map.dirty_leaves.clear();
            leaves
        };
        let mut levels: Vec<Vec<u64>> = Vec::with_capacity(h as usize);
        let mut width = n;
        for level in 1..=h {
            let count = width.div_ceil(FANOUT);
            let mut addrs = if all {
                Vec::new()
            } else {
                map.nodes
                    .get(level as usize - 1)
                    .cloned()
                    .unwrap_or_default()
            };
            addrs.resize(count, 0);
            let mut parents = BTreeSet::new();
            for &i in dirty.iter().filter(|&&i| i < count) {
                let children: &[u64] = if level == 1 {
                    &map.blocks
                } else {
                    &levels[level as usize - 2]
                };
                let end = ((i + 1) * FANOUT).min(children.len());
                let node = super::engine::new_block(|b| {
                    format::encode_node_into(b, level, &children[i * FANOUT..end])
                });
                let addr = self.log_add_shared(m, kind, ino, level, i as u64, node, None)?;
                m.seg_inc(addr, self.segment_blocks);
                if addrs[i] != 0 {
                    dec(m, addrs[i]);
                }
                addrs[i] = addr;
                parents.insert(i / FANOUT);
            }
            levels.push(addrs);
            dirty = parents;
            width = count;
        }
        debug_assert_eq!(
            levels.last().map(Vec::len),
            Some(1),
            "the top level is one node"
        );
        map.root = levels[h as usize - 1][0];
        map.nodes = levels;
        map.height = h;
        map.dirty_leaves.clear();
        map.all_dirty = false;
        Ok(())
    }

    /// Refreshes the superblock if enough bytes or time went by since the last one.
    pub(crate) fn maybe_refresh(&self, m: &mut Meta) -> Result<()> {
        // At most a quarter of the pool between superblocks, whatever the configuration: light
        // cleaning takes only victims out of the roll-forward chain, and a chain spanning the
        // whole pool leaves it none (then only a checkpoint, which may not fit, lets it go on).
        let pool_bytes = self.segment_blocks * self.segment_count * BLOCK_U64;
        let every = self
            .config
            .superblock_every_bytes
            .min(pool_bytes / SUPERBLOCK_POOL_DIVISOR);
        let by_bytes = m.sb_bytes_since >= every;
        let by_time = m.sb_bytes_since > 0
            && m.sb_written_at
                .is_none_or(|t| t.elapsed() >= self.config.superblock_every);
        if by_bytes || by_time {
            // The checkpoint is laid out now; its logs are written by the log writer after
            // `meta` is released, the flush and the superblock without it
            // (`Inner::take_superblock`). Only logs written after the newest
            // checkpoint need a new one: what is still buffered is not on the device, and right
            // after a buffer-full checkpoint (other writers having filled the buffer again
            // meanwhile) a second one would only repeat its work.
            if m.writer.seq != m.checkpoint_next_seq {
                self.commit_checkpoint_for_superblock(m)?;
            }
            self.seal_superblock(m);
            // The background thread writes it, or a thread writing logs up to a later point
            // gets there first (writers on their way to their own logs hand it back).
            self.wake_background(|w| w.logs = true);
        }
        Ok(())
    }

    /// Writes a checkpoint if anything happened since the last one, then a superblock naming it,
    /// with device flushes before and after: afterwards everything written so far is durable.
    pub(crate) fn refresh_superblock(&self, m: &mut Meta) -> Result<()> {
        self.commit_if_changed(m)?;
        self.write_superblock(m)
    }

    /// Writes a checkpoint if anything happened since the last one.
    fn commit_if_changed(&self, m: &mut Meta) -> Result<()> {
        let dirty = !self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            || !m.pending.is_empty()
            || m.ns_dirty
            || !m.freed_slots.is_empty()
            || m.life.snap_dirty;
        if dirty || m.writer.seq != m.checkpoint_next_seq {
            self.commit_checkpoint_for_superblock(m)?;
        }
        Ok(())
    }

    /// A checkpoint a superblock naming it follows at once (a refresh): its logs are not
    /// flushed on their own, since the flush before the superblock covers them and runs without
    /// the log writer (`write_superblock_locked`); a sync of a file it holds flushes for
    /// itself (`wait_sealed`). Flushed on their own, under the log writer, every log sealed
    /// after them waited for that flush: 60-90 ms each in the priority experiment.
    pub(crate) fn commit_checkpoint_for_superblock(&self, m: &mut Meta) -> Result<()> {
        let was = std::mem::replace(&mut m.writer.refreshing, true);
        let committed = self.commit_checkpoint(m);
        m.writer.refreshing = was;
        committed
    }

    /// Flushes the device if a log was written since the last flush: every log so far is then
    /// durable.
    pub(crate) fn flush_logs(&self, m: &mut Meta, why: &str) -> Result<()> {
        // Every entry queued is below this while `meta` is held (superblocks included).
        self.flush_written(m.writer.seq, why)
    }

    /// Writes every log below `seq` and flushes the device: those logs are then durable.
    ///
    /// The flush runs without the log writer, so logs sealed meanwhile (an RT thread's data-only
    /// log) are written while it runs instead of waiting for it; a flush covers every write
    /// that completed before it started.
    pub(crate) fn flush_written(&self, seq: u64, why: &str) -> Result<()> {
        self.write_logs_until(seq + 1)?;
        let started = {
            let mut w = super::engine::lock_lending(&self.log_writer, &self.log_inherit);
            self.start_flush(&mut w)
        };
        self.finish_flush(started, why, seq)
    }

    /// With the log writer held: whether a flush must run for the writes so far to be
    /// durable, counted as running if so (a flush under the log writer meanwhile then does not
    /// take the writes for flushed).
    fn start_flush(&self, w: &mut LogWriter) -> bool {
        let ahead = self.ahead_unflushed.swap(false, AtomicOrdering::AcqRel);
        let needed = w.unflushed || ahead || self.flushes_running.load(AtomicOrdering::Acquire) > 0;
        if needed {
            w.unflushed = false;
            self.flushes_running.fetch_add(1, AtomicOrdering::AcqRel);
        }
        needed
    }

    /// Without the log writer: runs the flush [`Inner::start_flush`] counted, if any; after it
    /// every log below `durable` is durable.
    fn finish_flush(&self, started: bool, why: &str, durable: u64) -> Result<()> {
        if started {
            self.flush_counted(why, durable)
        } else {
            // Every write so far was covered by a flush that has ended.
            self.durable_seq.fetch_max(durable, AtomicOrdering::AcqRel);
            Ok(())
        }
    }

    /// Whether a log sealed so far is not yet durable (written and flushed).
    pub(crate) fn logs_unflushed(&self, m: &Meta) -> bool {
        self.durable_seq.load(AtomicOrdering::Acquire) < m.writer.seq
            && (self.written_seq.load(AtomicOrdering::Acquire) < m.writer.seq
                || self.ahead_unflushed.load(AtomicOrdering::Acquire)
                || self
                    .log_writer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .unflushed)
    }

    /// Writes a superblock naming the newest checkpoint now: sealed like the periodic one, then
    /// written with everything queued before it.
    pub(crate) fn write_superblock(&self, m: &mut Meta) -> Result<()> {
        self.seal_superblock(m);
        self.write_logs_until(m.writer.seq + 1)
    }

    /// Queues a superblock naming the newest checkpoint for the log writer.
    pub(crate) fn seal_superblock(&self, m: &mut Meta) {
        let sb = self.superblock_now(m);
        m.sb_generation = sb.generation;
        m.sb_bytes_since = 0;
        m.sb_written_at = Some(Instant::now());
        self.enqueue(Queued::Superblock(sb));
    }

    /// The superblock naming the newest checkpoint, the next generation, and the writer's
    /// position right after it (the previous log's CRC is left for the writer to fill in).
    fn superblock_now(&self, m: &Meta) -> Superblock {
        let generation = m.sb_generation + 1;
        let sb = Superblock {
            version: format::VERSION,
            pool_id: self.pool_id,
            generation,
            pool_bytes: (format::FIRST_SEGMENT_BLOCK + self.segment_blocks * self.segment_count)
                * BLOCK_U64,
            segment_blocks: self.segment_blocks,
            segment_count: self.segment_count,
            ordering: self.config.ordering as u8,
            barrier: self.config.barrier as u8,
            superblock_every_bytes: self.config.superblock_every_bytes,
            superblock_every_ms: self.config.superblock_every.as_millis() as u64,
            checkpoint_every_ms: self
                .config
                .checkpoint_every
                .map_or(0, |d| d.as_millis().max(1) as u64),
            dirty_bytes_max: self.config.dirty_bytes_max,
            checkpoint: m.checkpoint,
            checkpoint_root: m.checkpoint_root,
            checkpoint_sequence: m.checkpoint_seq,
            next: format::LogPosition {
                block: m.writer.pos,
                sequence: m.writer.seq,
                prev_crc: 0,
                segment_next: m.writer.next_seg,
            },
            created_ns: m.created_ns,
            written_ns: now_ns(),
            protection_ms: m.life.protection.as_millis().min(u64::MAX as u128) as u64,
            background_gc: self.config.background_gc,
            gc_free_percent: self.config.gc_free_percent.min(90) as u8,
        };
        debug_assert_eq!(
            m.writer.seq, m.checkpoint_next_seq,
            "a superblock names the newest checkpoint"
        );
        sb
    }
}

/// Tests: whether the writer finds no free segment this time (`Meta::segment_picks_left`).
#[cfg(test)]
fn staged_no_segment(m: &mut Meta) -> bool {
    match m.segment_picks_left.as_mut() {
        Some(0) => true,
        Some(left) => {
            *left -= 1;
            false
        }
        None => false,
    }
}

#[cfg(not(test))]
fn staged_no_segment(_: &mut Meta) -> bool {
    false
}

/// The inodes a checkpoint writes: those `taken` from the dirty set, those with data in
/// data-only logs since the last checkpoint, and the changed directories, while they exist.
fn checkpoint_work(m: &Meta, mut taken: DenseSet) -> DenseSet {
    taken.extend(m.pending.iter());
    taken.extend(m.dirs_dirty.iter());
    taken.retain(|ino| m.inodes.contains_key(ino));
    taken
}

/// The changed directories of `work`, each encoded as directory blocks.
fn encode_changed_dirs(m: &Meta, work: &DenseSet) -> HashMap<u64, Vec<super::engine::FreshBlock>> {
    m.dirs_dirty
        .iter()
        .filter(|ino| work.contains(ino))
        .filter_map(|ino| {
            let entries = m.dirs.get(&ino)?;
            let blocks = format::encode_dir_entries_in(
                entries
                    .iter()
                    .map(|(name, &(child, is_dir))| (child, is_dir, name.as_str())),
                super::engine::FreshBlock::new,
            );
            Some((ino, blocks))
        })
        .collect()
}

/// The inode records a checkpoint writes, in ascending inode order (its work is walked in
/// that order): a sorted list, where a B-tree took an insertion search per inode under `meta`.
#[derive(Default)]
struct Records(Vec<(u64, InodeRecord)>);

impl Records {
    /// Adds `ino`'s record; `ino` is above every number already in.
    fn push(&mut self, ino: u64, record: InodeRecord) {
        debug_assert!(self.0.last().is_none_or(|&(last, _)| last < ino));
        self.0.push((ino, record));
    }

    fn get(&self, ino: u64) -> Option<&InodeRecord> {
        self.0
            .binary_search_by_key(&ino, |&(i, _)| i)
            .ok()
            .map(|at| &self.0[at].1)
    }

    /// The records of the inodes in `inos`, ascending.
    fn range(&self, inos: std::ops::Range<u64>) -> impl Iterator<Item = (u64, &InodeRecord)> {
        let from = self.0.partition_point(|&(i, _)| i < inos.start);
        let to = self.0.partition_point(|&(i, _)| i < inos.end);
        self.0[from..to].iter().map(|(i, r)| (*i, r))
    }

    fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|&(i, _)| i)
    }
}

/// Inode `ino`'s record as the inode table holds it now (an empty one for a free number).
fn current_record(m: &Meta, ino: u64) -> InodeRecord {
    m.inodes
        .get(&ino)
        .map(|c| c.lock().record(ino))
        .unwrap_or_default()
}

/// How many of a file's buffered blocks are not yet in a sealed log.
fn unsealed_count(st: &super::engine::InodeState) -> usize {
    st.dirty.values().filter(|d| d.sealed_in.is_none()).count()
}

/// The map nodes a checkpoint writes for an inode holding `dir_len` directory blocks (0 for a
/// file): the whole tree if its shape changes, else the paths above the leaves whose children
/// change.
pub(super) fn map_nodes_bound(st: &super::engine::InodeState, dir_len: usize) -> u64 {
    if dir_len == 0 && st.dirty.is_empty() && !st.map.is_dirty() {
        // Its record holds the map as it is (inline, or naming the nodes written last).
        return 0;
    }
    let n = st
        .map
        .blocks
        .len()
        .max(st.dirty.keys().next_back().map_or(0, |&b| b as usize + 1))
        .max(dir_len) as u64;
    let h = height_for(n) as u64;
    let total = super::map::tree_nodes(n);
    if st.map.all_dirty || h != st.map.height as u64 || dir_len > 0 {
        return total;
    }
    // The leaves marked dirty plus the distinct leaves of the buffers (in order, so counted
    // without a set): an upper bound, as a leaf may be in both.
    let mut buffered = 0u64;
    let mut last = None;
    for &b in st.dirty.keys() {
        let leaf = b / FANOUT as u64;
        if last != Some(leaf) {
            buffered += 1;
            last = Some(leaf);
        }
    }
    ((st.map.dirty_leaves.len() as u64 + buffered) * h).min(total)
}

/// Whether any of a file's buffered blocks is not yet in a sealed log.
fn has_unsealed(st: &super::engine::InodeState) -> bool {
    st.dirty.values().any(|d| d.sealed_in.is_none())
}

/// Whether a data-only log can take something from file `ino` now: buffers in no sealed log, or
/// attributes, unless only a checkpoint may record the file ([`Inner::seal_file_data`]).
fn sealable(m: &Meta, ino: u64, st: &super::engine::InodeState) -> bool {
    has_unsealed(st) || (st.attr_dirty && !m.ns_changed.contains(&ino))
}
