//! Laying out logs: opening, filling and closing a log in the current segment.

use std::sync::{Arc, Mutex};

use crate::tbfs::format::{
    self, DescKind, Descriptor, Summary, BLOCK_U64, DESCRIPTORS_MAX, FLAG_AHEAD, FLAG_BEGIN,
    FLAG_CHECKPOINT, FLAG_DATA_ONLY, FLAG_END, FLAG_PAD,
};
use crate::tbfs::limits::{AHEAD_MIN_BLOCKS, DESCRIPTORS_RESERVED, LOG_BLOCKS_MAX};
use crate::tbfs::log::{AheadPayload, AheadState, LogBuild, Queued, SealedLog, Writer};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Barrier, Result};

impl Engine {
    /// Moves the writer into its next segment, `next` to follow it; the caller (the
    /// orchestration's `advance_segment`) chose `next` and tells the other parts.
    pub(crate) fn enter_segment(&self, w: &mut Writer, next: u64) {
        let start = self.seg_start(w.next_seg);
        w.enter_next_segment(next, start);
    }

    /// Opens a log with `flags` where the writer stands (the orchestration's `log_open`).
    pub(crate) fn open_log(&self, w: &mut Writer, flags: u16) {
        debug_assert!(w.log.is_none());
        // Room for as many blocks as the log can take, so it does not grow (and reallocate)
        // block by block under `meta`.
        let seg_end = self.seg_start(w.cur_seg) + self.segment_blocks();
        // `log_close` leaves at least one block (a pad log's) before the segment's end.
        let room = seg_end.checked_sub(w.pos + 1).unwrap_or_else(|| {
            panic!(
                "a log opened at block {} with segment {} ending at {seg_end}",
                w.pos, w.cur_seg
            )
        });
        let blocks = (room as usize).min(LOG_BLOCKS_MAX);
        w.log = Some(LogBuild {
            start: w.pos,
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

    /// Makes the open log, a pad's, a jump: the chain goes on at block `to`
    /// ([`DescKind::Jump`]).
    pub(crate) fn add_jump(&self, w: &mut Writer, to: u64) {
        let log = w.log.as_mut().expect("log open");
        assert!(
            log.flags == FLAG_PAD && log.descriptors.is_empty() && log.payload.is_empty(),
            "a jump in a log that is not an empty pad"
        );
        log.descriptors.push(Descriptor {
            kind: DescKind::Jump,
            level: 0,
            blocks: 0,
            ino: 0,
            offset: to,
            extra: 0,
        });
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

    /// Seals the writer's open log and queues it for the log writer
    /// ([`Engine::write_logs_until`]), which writes it (flushing as the barrier policy says) after
    /// `meta` is released, and moves the writer past it. `newest` is the newest checkpoint's
    /// number. What the other parts learn of the log is returned for the orchestration
    /// (`log_close`) to tell them.
    pub(crate) fn seal_log(&self, w: &mut Writer, end_flags: u16, newest: u64) -> ClosedLog {
        let mut log = w.log.take().expect("log open");
        let mut flags = log.flags | end_flags;
        // Data-only logs depend on no other log but the earlier ones of their own files: their
        // summaries may go before their payloads, and a torn one is skipped at recovery.
        if flags & FLAG_DATA_ONLY != 0 {
            flags |= FLAG_AHEAD;
        }
        if flags & (FLAG_DATA_ONLY | FLAG_PAD) == 0 {
            // A checkpoint's log is written without waiting for earlier payloads: recovery
            // counts the checkpoint only once they are all complete, and replays no later log of
            // a file that depends on it (`DescKind::Depends`) over an older one. A sync that
            // depends on it waits for those payloads (`wait_sealed` with `all`).
            flags |= FLAG_AHEAD;
        }
        let payload_blocks = log.payload.len() as u32;
        let summary_time = self.now_ns();
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
            sequence: w.seq,
            checkpoint: newest + u64::from(flags & FLAG_CHECKPOINT != 0),
            segment_next: w.next_seg,
            // Filled in by the log writer.
            prev_crc: 0,
            payload_crc: 0,
            time_ns: summary_time,
            descriptors: log.descriptors,
        };
        let flush = match self.config().barrier {
            Barrier::EveryLog => true,
            Barrier::EveryCheckpoint => flags & FLAG_CHECKPOINT != 0 && !w.refreshing,
            Barrier::Superblock => false,
        };
        let release = std::mem::take(&mut w.release);
        let release_bytes = release
            .iter()
            .map(|(_, blocks)| blocks.len() as u64 * BLOCK_U64)
            .sum::<u64>();
        self.logs.sealed(w.seq, release, release_bytes);
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
            let direct = w.direct && !log.payload.is_empty();
            if log.payload.len() < AHEAD_MIN_BLOCKS && !direct {
                // Written whole by the log writer.
                w.sealed_small.push((w.seq, inos, flush));
                return None;
            }
            let a = Arc::new(AheadPayload {
                seq: w.seq,
                start: log.start,
                blocks: std::mem::take(&mut log.payload),
                crcs: std::mem::take(&mut log.crcs),
                inos,
                flush,
                charge: w.charge,
                crc: std::sync::OnceLock::new(),
                state: parking_lot::Mutex::new(AheadState::Pending),
                done: parking_lot::Condvar::new(),
                started: Mutex::new(None),
            });
            self.logs.ahead_sealed(a.clone());
            w.sealed_ahead.push(a.clone());
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
        let closed = ClosedLog {
            seq: w.seq,
            seg: w.cur_seg as usize,
            flags,
            // The summary is metadata: what else is not is file or directory data.
            data_blocks: (1 + payload_blocks as u64).saturating_sub(metadata_blocks),
            time_ns: summary_time,
            seg_end: self.seg_start(w.cur_seg) + self.segment_blocks(),
            bytes: (1 + payload_blocks as u64) * BLOCK_U64,
        };
        debug_assert_eq!(log.start, w.pos, "a log starts where the writer stood");
        w.log_closed(log.start + 1 + payload_blocks as u64, closed.seg_end);
        self.count(|c| {
            c.logs += 1;
            c.bytes_written += closed.bytes;
            c.metadata_blocks += metadata_blocks;
            c.device_flushes += u64::from(flush);
            c.data_only_logs += u64::from(flags & FLAG_DATA_ONLY != 0 && flags & FLAG_END != 0);
        });
        closed
    }
}

/// What sealing a log ([`Engine::seal_log`]) tells the parts besides the writer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClosedLog {
    /// The log's sequence.
    pub seq: u64,
    /// The segment it is in.
    pub seg: usize,
    /// Its flags, as sealed.
    pub flags: u16,
    /// Its blocks of file or directory data (not the summary, nor other metadata).
    pub data_blocks: u64,
    /// Its summary's time.
    pub time_ns: i64,
    /// Where its segment ends.
    pub seg_end: u64,
    /// Its bytes on the device: the summary and the payload.
    pub bytes: u64,
}
