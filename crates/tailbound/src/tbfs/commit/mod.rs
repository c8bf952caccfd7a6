//! The commit path: the log writer (segments, summaries, barriers), data-only logs, checkpoints
//! and superblock refreshes. The only code that writes to the device after a pool is made.
//!
//! Invariants: logs tile each segment back to back (a one-block remainder gets a pad log), each
//! log's write completes before the next is issued, and a segment is reused only when nothing in
//! memory references it and a durable superblock names a checkpoint written after it died.
//!
//! This module and those under it are the orchestration: the only tbfs modules besides `fs` and
//! `state` that name more than one part of `State` or of `Engine` (`tests/module_graph.rs` checks
//! it). Here: refreshing the superblock; `checkpoint`: laying out a checkpoint; `lifecycle`:
//! retention, snapshots, views and pins; `debt`: the checkpoint debt, and paying it; `names`:
//! making, moving and removing names; `seal`: sealing buffered data as data-only logs; `unlink`:
//! dropping links and freeing inodes; `clean`: the cleaner's pass that moves live blocks;
//! `cleaning`: when to clean, and the passes;
//! `reuse`: which segments may be written again; `room`: the space check; `tax`: the cleaning writers pay
//! by what they write while the pool needs cleaning; `usage`: the live tree's
//! blocks in the segment counts; `logs`: closing logs and entering segments; `open`: making and
//! opening a pool (recovery's steps, then `State` assembled); `counts`: releasing the log
//! pipeline's and the budget's counts, which poison the pool past zero; `writing`: writing the
//! queued logs up to a sequence, handing superblocks to the superblock writer, and the bytes in
//! flight allowed; `write_path`: a write's turn for room, the room it finds, commits past the
//! buffer limit, write-behind and direct writes. The parts are `log` (building and writing logs),
//! `space` and the rest of `State`'s and `Engine`'s fields.

mod census;
pub(in crate::tbfs) mod checkpoint;
mod clean;
mod cleaning;
mod counts;
mod debt;
pub mod lifecycle;
mod logs;
mod names;
pub(in crate::tbfs) mod open;
mod reuse;
pub(in crate::tbfs) mod room;
mod seal;
mod tax;
mod unlink;
mod usage;
mod write_path;
mod writing;

use crate::tbfs::format::{self, *};
use crate::tbfs::limits::*;
use crate::tbfs::log::Queued;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::Result;

impl Engine {
    /// Whether enough bytes or time went by since the last superblock for a refresh.
    pub(crate) fn refresh_due(&self, m: &State) -> bool {
        // At most a quarter of the pool between superblocks, whatever the configuration: light
        // cleaning takes only victims out of the roll-forward chain, and a chain spanning the
        // whole pool leaves it none (then only a checkpoint, which may not fit, lets it go on).
        let pool_bytes = self.segment_blocks() * self.segment_count() * BLOCK_U64;
        let every = self
            .config()
            .superblock_every_bytes
            .min(pool_bytes / SUPERBLOCK_POOL_DIVISOR);
        m.refresh.due(
            every,
            self.config().superblock_every,
            self.config().clock.peek_ns(),
        )
    }

    /// A sync's refresh. A real-time thread's is left to the background thread (if there is
    /// one), so its sync does not lay out a checkpoint of every file's buffered data and write
    /// those payloads as its own. Other threads refresh here, as before: runs stay decided by
    /// what the threads do, not by when the background thread wakes.
    pub(crate) fn refresh_or_hand_off(&self, m: &mut State) -> Result<()> {
        let _refresh = crate::phases::enter(crate::phases::Phase::Refresh);
        if !self.refresh_due(m) {
            return Ok(());
        }
        let background = self.has_background();
        if background && crate::sched::current_prio().class == crate::sched::Class::Rt {
            self.wake_background(|w| w.refresh = true);
            return Ok(());
        }
        self.maybe_refresh(m)
    }

    /// Refreshes the superblock if enough bytes or time went by since the last one.
    pub(crate) fn maybe_refresh(&self, m: &mut State) -> Result<()> {
        if self.refresh_due(m) {
            // The checkpoint is laid out now; its logs are written by the log writer after
            // `meta` is released, the flush and the superblock without it
            // (`Engine::take_superblock`). Only logs written after the newest
            // checkpoint need a new one: what is still buffered is not on the device, and right
            // after a buffer-full checkpoint (other writers having filled the buffer again
            // meanwhile) a second one would only repeat its work.
            if !m.ckpt.is_newest_state(m.writer.seq()) {
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
    pub(super) fn refresh_superblock(&self, m: &mut State) -> Result<()> {
        self.commit_if_changed(m)?;
        self.write_superblock(m)
    }

    /// Writes a checkpoint if anything happened since the last one.
    fn commit_if_changed(&self, m: &mut State) -> Result<()> {
        if self.changed_since_checkpoint(m) {
            self.commit_checkpoint_for_superblock(m)?;
        }
        Ok(())
    }

    /// Whether anything happened since the newest checkpoint: a checkpoint now would record
    /// something.
    fn changed_since_checkpoint(&self, m: &State) -> bool {
        !self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            || m.changes.any()
            || !m.ifile.freed_slots().is_empty()
            || m.life.snapshots_dirty()
            || !m.ckpt.is_newest_state(m.writer.seq())
    }

    /// A checkpoint a superblock naming it follows at once (a refresh): its logs are not
    /// flushed on their own, since the flush before the superblock covers them and runs without
    /// the log writer (`write_superblock_locked`); a sync of a file it holds flushes for
    /// itself (`wait_sealed`). Flushed on their own, under the log writer, every log sealed
    /// after them waited for that flush.
    pub(super) fn commit_checkpoint_for_superblock(&self, m: &mut State) -> Result<()> {
        let was = m.writer.set_refreshing(true);
        let committed = self.commit_checkpoint(m);
        m.writer.set_refreshing(was);
        committed
    }

    /// Writes a superblock naming the newest checkpoint now: sealed like the periodic one, then
    /// written with everything queued before it.
    pub(super) fn write_superblock(&self, m: &mut State) -> Result<()> {
        let _work = crate::phases::meta_work(crate::phases::MetaWork::Superblock);
        self.seal_superblock(m);
        self.write_logs_until(m.writer.seq() + 1)
    }

    /// Queues a superblock naming the newest checkpoint for the log writer.
    pub(super) fn seal_superblock(&self, m: &mut State) {
        let sb = self.superblock_now(m);
        m.refresh
            .sealed(sb.generation, self.config().clock.peek_ns());
        self.enqueue(Queued::Superblock(sb));
    }

    /// The superblock naming the newest checkpoint, the next generation, and the writer's
    /// position right after it (the previous log's CRC is left for the writer to fill in).
    fn superblock_now(&self, m: &State) -> Superblock {
        let generation = m.refresh.next_generation();
        let sb = Superblock {
            version: format::VERSION,
            pool_id: self.pool_id(),
            generation,
            pool_bytes: (format::FIRST_SEGMENT_BLOCK
                + self.segment_blocks() * self.segment_count())
                * BLOCK_U64,
            segment_blocks: self.segment_blocks(),
            segment_count: self.segment_count(),
            ordering: self.config().ordering as u8,
            barrier: self.config().barrier as u8,
            superblock_every_bytes: self.config().superblock_every_bytes,
            superblock_every_ms: self.config().superblock_every.as_millis() as u64,
            checkpoint_every_ms: self
                .config()
                .checkpoint_every
                .map_or(0, |d| d.as_millis().max(1) as u64),
            dirty_bytes_max: self.config().dirty_bytes_max,
            checkpoint: m.ckpt.newest(),
            checkpoint_root: m.ckpt.root(),
            checkpoint_sequence: m.ckpt.seq(),
            next: format::LogPosition {
                block: m.writer.pos(),
                sequence: m.writer.seq(),
                prev_crc: 0,
                segment_next: m.writer.next_seg(),
            },
            created_ns: m.refresh.created_ns(),
            written_ns: self.now_ns(),
            protection_ms: m.life.protection().as_millis().min(u64::MAX as u128) as u64,
            background_gc: self.config().background_gc,
            gc_free_percent: self.config().gc_free_percent.min(90) as u8,
        };
        debug_assert!(
            m.ckpt.is_newest_state(m.writer.seq()),
            "a superblock names the newest checkpoint"
        );
        sb
    }
}
