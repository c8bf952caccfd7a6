//! Laying out logs: opening, filling and closing a log in the current segment.

use std::sync::{Arc, Mutex};

use crate::tbfs::format::{
    self, DescKind, Descriptor, Summary, BLOCK_U64, DESCRIPTORS_MAX, FLAG_AHEAD, FLAG_BEGIN,
    FLAG_CHECKPOINT, FLAG_DATA_ONLY, FLAG_END, FLAG_PAD,
};
use crate::tbfs::inode::now_ns;
use crate::tbfs::limits::{AHEAD_MIN_BLOCKS, DESCRIPTORS_RESERVED, LOG_BLOCKS_MAX};
use crate::tbfs::log::{AheadPayload, AheadState, LogBuild, Queued, SealedLog};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Barrier, Error, Result};

impl Engine {
    pub(crate) fn pick_free_segment(&self, m: &State) -> Option<u64> {
        let n = self.segment_count();
        (1..=n)
            .map(|i| (m.writer.next_seg + i) % n)
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
        let start = self.seg_start(m.writer.next_seg);
        m.writer.enter_next_segment(next, start);
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
        let seg = m.writer.cur_seg as usize;
        let next = m.ckpt.next_number();
        let pos = m.writer.pos;
        // Its age is that of the newest data its logs hold (set as they close).
        m.life.entered_segment(seg, next, pos);
        m.seg.entered(seg);
        Ok(())
    }

    pub(crate) fn log_open(&self, m: &mut State, flags: u16) {
        debug_assert!(m.writer.log.is_none());
        if flags & FLAG_BEGIN != 0 {
            m.soft_dead.run_begins();
        }
        // Room for as many blocks as the log can take, so it does not grow (and reallocate)
        // block by block under `meta`.
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks();
        // `log_close` leaves at least one block (a pad log's) before the segment's end.
        let room = seg_end.checked_sub(m.writer.pos + 1).unwrap_or_else(|| {
            panic!(
                "a log opened at block {} with segment {} ending at {seg_end}",
                m.writer.pos, m.writer.cur_seg
            )
        });
        let blocks = (room as usize).min(LOG_BLOCKS_MAX);
        m.writer.log = Some(LogBuild {
            start: m.writer.pos,
            flags,
            descriptors: Vec::with_capacity(DESCRIPTORS_MAX.min(blocks + DESCRIPTORS_RESERVED)),
            payload: Vec::with_capacity(blocks),
            crcs: Vec::with_capacity(blocks),
        });
    }

    /// Whether the open log can take one more block of this kind without being closed.
    pub(crate) fn log_has_room(
        &self,
        m: &State,
        kind: DescKind,
        ino: u64,
        level: u8,
        offset: u64,
    ) -> bool {
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks();
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
    pub(crate) fn log_roll(&self, m: &mut State) -> Result<()> {
        let flags = m.writer.log.as_ref().expect("log open").flags & !FLAG_BEGIN;
        self.log_close(m, 0)?;
        self.log_open(m, flags);
        Ok(())
    }

    /// Appends one block to the open log (closing it and opening a continuation when it is full)
    /// and returns the address the block will have once the log writer writes the log.
    pub(crate) fn log_add(
        &self,
        m: &mut State,
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
            crate::tbfs::blocks::shared_copy(data),
            None,
        )
    }

    /// [`Engine::log_add`] for a block already shared (a buffered block of a file): the log
    /// keeps a reference, not a copy, and its CRC if known (`DirtyBlock::crc`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn log_add_shared(
        &self,
        m: &mut State,
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
    pub(crate) fn log_add_attr(
        &self,
        m: &mut State,
        ino: u64,
        size: u64,
        mtime_ns: i64,
    ) -> Result<()> {
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

    /// Adds to the open checkpoint log that files `inos` depend on this checkpoint
    /// ([`DescKind::Depends`]): each has a change here that its later data-only logs build on.
    /// Rolls to a continuation log when the summary is full.
    pub(crate) fn log_add_depends(&self, m: &mut State, inos: &[u64]) -> Result<()> {
        for &ino in inos {
            if m.writer.log.as_ref().expect("log open").descriptors.len() >= DESCRIPTORS_MAX {
                self.log_roll(m)?;
            }
            let log = m.writer.log.as_mut().expect("log open");
            log.descriptors.push(Descriptor {
                kind: DescKind::Depends,
                level: 0,
                blocks: 0,
                ino,
                offset: 0,
                extra: 0,
            });
        }
        Ok(())
    }

    /// Seals the open log and queues it for the log writer ([`Engine::write_logs_until`]), which
    /// writes it (flushing as the barrier policy says) after `meta` is released; moves on.
    pub(crate) fn log_close(&self, m: &mut State, end_flags: u16) -> Result<()> {
        let mut log = m.writer.log.take().expect("log open");
        let mut flags = log.flags | end_flags;
        // Data-only logs depend on no other log but the earlier ones of their own files: their
        // summaries may go before their payloads, and a torn one is skipped at recovery.
        if flags & FLAG_DATA_ONLY != 0 {
            flags |= FLAG_AHEAD;
            if flags & FLAG_END != 0 {
                // The run ends here: what it superseded may be reused once this log is durable.
                let seq = m.writer.seq;
                m.soft_dead.run_ended(&mut m.seg, seq);
            }
        }
        if flags & (FLAG_DATA_ONLY | FLAG_PAD) == 0 {
            // A checkpoint's log is written without waiting for earlier payloads: recovery
            // counts the checkpoint only once they are all complete, and replays no later log of
            // a file that depends on it (`DescKind::Depends`) over an older one. A sync that
            // depends on it waits for those payloads (`wait_sealed` with `all`).
            flags |= FLAG_AHEAD;
        }
        if flags & FLAG_CHECKPOINT != 0 && flags & FLAG_END != 0 {
            // The maps in memory are in this checkpoint, runs cut short included.
            let seq = m.writer.seq;
            m.soft_dead.checkpoint_ended(&mut m.seg, seq);
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
            pool_id: self.pool_id(),
            sequence: m.writer.seq,
            checkpoint: m.ckpt.newest() + u64::from(flags & FLAG_CHECKPOINT != 0),
            segment_next: m.writer.next_seg,
            // Filled in by the log writer.
            prev_crc: 0,
            payload_crc: 0,
            time_ns: summary_time,
            descriptors: log.descriptors,
        };
        let flush = match self.config().barrier {
            Barrier::EveryLog => true,
            Barrier::EveryCheckpoint => flags & FLAG_CHECKPOINT != 0 && !m.writer.refreshing,
            Barrier::Superblock => false,
        };
        let release = std::mem::take(&mut m.writer.release);
        let release_bytes = release
            .iter()
            .map(|(_, blocks)| blocks.len() as u64 * BLOCK_U64)
            .sum::<u64>();
        self.logs.sealed(m.writer.seq, release, release_bytes);
        // The inodes an ahead log names: later logs of the same files wait for it. Of a
        // checkpoint's log, the files whose data it carries: their buffers go only once it is
        // written, and their later logs depend on the checkpoint anyway.
        let data_only = flags & FLAG_DATA_ONLY != 0;
        let inos = (flags & FLAG_AHEAD != 0).then(|| {
            let mut inos: Vec<u64> = summary
                .descriptors
                .iter()
                .filter(|d| data_only || d.kind == DescKind::Data)
                .map(|d| d.ino)
                .collect();
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
            self.logs.ahead_sealed(a.clone());
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
        m.seg.note_written(seg, m.writer.seq);
        // The summary is metadata: what else is not is file or directory data.
        let data_blocks = (1 + payload_blocks as u64).saturating_sub(metadata_blocks);
        m.seg.note_data(seg, data_blocks, m.cleaning.copying());
        // The cleaner's copies keep the age of the segments they come from, so data that stays
        // cold looks old to cost-benefit wherever it is moved.
        m.life.log_closed(seg, summary_time);
        debug_assert_eq!(
            log.start, m.writer.pos,
            "a log starts where the writer stood"
        );
        let seg_end = self.seg_start(m.writer.cur_seg) + self.segment_blocks();
        m.writer
            .log_closed(log.start + 1 + payload_blocks as u64, seg_end);
        let log_bytes = (1 + payload_blocks as u64) * BLOCK_U64;
        m.refresh.note_logged(log_bytes);
        self.count(|c| {
            c.logs += 1;
            c.bytes_written += log_bytes;
            c.metadata_blocks += metadata_blocks;
            c.device_flushes += u64::from(flush);
            c.data_only_logs += u64::from(flags & FLAG_DATA_ONLY != 0 && flags & FLAG_END != 0);
        });
        // Keep at least two blocks ahead (a summary and a payload block); a lone last block
        // becomes a pad log so logs keep tiling the segment.
        if seg_end - m.writer.pos == 1 {
            self.log_open(m, FLAG_PAD);
            self.log_close(m, 0)?;
        } else if m.writer.pos == seg_end {
            self.advance_segment(m)?;
        }
        Ok(())
    }
}
