//! Space: what is free, the reserve and the low-water room kept beside what is written, and
//! the check every commit makes before it writes (`Engine::ensure_space`).

pub(crate) mod background;
pub(crate) mod cleaner;
#[cfg(test)]
mod cleaner_sim;
pub(crate) mod cleaning;
mod light_gain;
#[cfg(test)]
mod room_tests;
pub(crate) mod segments;
pub(crate) mod soft_dead;

use crate::tbfs::format::{self, *};
use crate::tbfs::inode::*;
use crate::tbfs::limits::{
    BUFFER_LIMIT_MIN_BLOCKS, CLEAN_ROOM_SEGMENTS, FULL_PASS_ROOM_SEGMENTS, LOW_WATER_DIVISOR,
    RESERVE_BLOCKS_MIN,
};
use crate::tbfs::retention::{BlockPin, PinRun};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

impl Engine {
    /// Blocks the writer can still fill without reusing anything not yet reclaimable.
    ///
    /// The rest of the current segment, and a segment's worth for each free segment. The next
    /// segment, chosen already, does not count: the writer enters it only once it has chosen
    /// the one after (every log's summary names the segment that follows its own), so the
    /// last free segment is always the next one and is never written.
    pub(super) fn free_blocks(&self, m: &State) -> u64 {
        self.free_blocks_up_to(m, u64::MAX)
    }

    /// Like `free_blocks`, but stops counting segments once `enough` blocks are found, so the
    /// check on every sync does not walk the whole segment table.
    pub(super) fn free_blocks_up_to(&self, m: &State, enough: u64) -> u64 {
        let mut free = self.seg_start(m.writer.cur_seg()) + self.segment_blocks() - m.writer.pos();
        for s in 0..self.segment_count() as usize {
            if free >= enough {
                break;
            }
            if self.segment_free(m, s) {
                free += self.segment_blocks();
            }
        }
        free
    }

    /// Segments that would be free after the next durable superblock.
    pub(super) fn pending_free_segments(&self, m: &State) -> usize {
        (0..self.segment_count() as usize)
            .filter(|&s| {
                !m.writer.holds_segment(s as u64) && m.seg.is_empty(s) && !self.segment_free(m, s)
            })
            .count()
    }

    /// The blocks writing `blocks` takes: summaries, pads at segment ends, and room for the
    /// checkpoint a refresh needs.
    pub(super) fn space_needed(&self, blocks: u64) -> u64 {
        blocks + blocks / 100 + 4 + blocks / self.segment_blocks().max(1) * 2
    }

    /// What [`Engine::ensure_space`] wants free beyond what is written: the reserve kept for the
    /// checkpoints that make dead segments reusable (and for recovery's), and the low-water mark
    /// below which the writer cleans (and waits for it) while there is still room for the
    /// cleaner to work in (see `low_water`). A refresh may use both.
    pub(super) fn space_margins(&self, m: &State) -> (u64, u64) {
        if m.refresh.running() {
            (0, 0)
        } else {
            (
                self.reserve_blocks() + Self::deletes_reserve(m),
                self.low_water(m),
            )
        }
    }

    /// Room kept for a checkpoint of deletes: every inode page and the inode file's map. Files
    /// deleted all over the tree rewrite every page holding one of them, and such a checkpoint
    /// is what gives their blocks back.
    pub(super) fn deletes_reserve(m: &State) -> u64 {
        m.ifile.pages() + crate::tbfs::map::tree_nodes(m.ifile.pages()) + 1
    }

    /// Makes sure `blocks` can be written, refreshing the superblock to release dead segments if
    /// that helps. Fails with `NoSpace` before anything is written.
    pub(super) fn ensure_space(&self, m: &mut State, blocks: u64) -> Result<()> {
        // Taken, so the checks the cleaning below runs are their own.
        let for_checkpoint = m.cleaning.take_checkpoint_check();
        let for_buffer = m.cleaning.take_buffer_check();
        let mut need = self.space_needed(blocks);
        let (reserve, low_water) = self.space_margins(m);
        // A write keeps the room the next checkpoint needs, which pays for its maps (see
        // `debt`): writers clean before the bound from totals exceeds the low-water room, and a
        // write is refused that would leave less than the reserve and the counted debt.
        let pays_debt = !for_checkpoint && !m.cleaning.running() && !m.refresh.running();
        let quick_debt = if pays_debt {
            self.checkpoint_debt(m, false)
        } else {
            0
        };
        let want = need + reserve + low_water.max(quick_debt);
        // A memory pool also notes whether space is tight, for its in-flight bound
        // (`in_flight_max`), from the same count of free segments, which goes as far as a whole
        // buffer needs so it also sets the buffer limit.
        let tight_mark = self.dev().writes_are_copies().then(|| self.urgent_mark(m));
        let room_mark =
            need + self.buffer_room(m, self.config().dirty_bytes_max.div_ceil(BLOCK_U64));
        let free = self.free_blocks_up_to(m, want.max(tight_mark.unwrap_or(0)).max(room_mark));
        if let Some(mark) = tight_mark {
            self.budget.set_tight(free < mark);
        }
        // Saturating: with less free than the commit needs, nothing is left for buffers.
        self.set_buffer_limit(m, free.saturating_sub(need), reserve);
        let full = !self.light_cleaning(m);
        self.budget.set_full_passes(full);
        if pays_debt {
            self.budget.set_room_short(free < want);
        }
        if free >= want {
            return Ok(());
        }
        // When space is short, what is sealed is written first (as when logs and refreshes
        // were written under `meta`): a written superblock releases segments, and written and
        // flushed logs let superseded segments go, so the space check and the cleaner below see
        // what is reusable. (Every entry queued is below `seq + 1` while `meta` is held.) A
        // background pass does no device I/O under `meta`: what it sealed is written once it
        // lets `meta` go, and it works in the room there is now.
        if !m.bg_clean.defer_io {
            let start = std::time::Instant::now();
            let written = self.write_logs_until(m.writer.seq() + 1);
            self.writes.waited_for_logs(
                crate::tbfs::admission::WriterKey::of_current_thread_on(&**self.dev()),
                start.elapsed(),
            );
            written?;
            if self.free_blocks_up_to(m, want) >= want {
                return Ok(());
            }
        }
        if !m.refresh.running() && !m.cleaning.running() {
            let urgent = need + reserve + low_water / 2;
            if self.config().background_gc
                && need <= low_water / 4
                && self.free_blocks_up_to(m, urgent) >= urgent
            {
                // A small write (a synchronous append, not a buffer-full commit) above half the
                // low-water mark leaves the cleaning to the background thread, woken now: it
                // does not wait for passes it does not need. Large writes still clean, so the
                // cleaner keeps room to work in.
                self.wake_background(|w| w.clean = true);
                return Ok(());
            }
            // Writers wait for the cleaner rather than fail. Cleaning that finds no room of its
            // own leaves the answer to the check below.
            m.cleaning.set_for_buffer(if for_buffer { need } else { 0 });
            let start = std::time::Instant::now();
            let cleaned = self.clean(m, want, true);
            let copied = cleaned.as_ref().map_or(0, |r| r.blocks_copied);
            self.writes.cleaned(
                crate::tbfs::admission::WriterKey::of_current_thread_on(&**self.dev()),
                start.elapsed(),
                copied,
            );
            // What the cleaner sealed of the buffer before its passes is written: a buffer seal
            // needs room only for what is left of it (never below nothing: it is counted up to
            // `need`).
            need -= m.cleaning.take_sealed_first();
            match cleaned {
                Ok(_) | Err(Error::NoSpace(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // A checkpoint may use as much of the reserve as the blocks it records dropped
        // (deleted, truncated, superseded) give back: it is what makes them reusable, and
        // without it a pool filled to the reserve could not take the deletes that make room.
        // Saturating: a credit larger than the reserve leaves none to keep.
        let keep = if for_checkpoint {
            reserve.saturating_sub(m.ckpt.dropped())
        } else if m.cleaning.running() {
            // A light pass's copies may use as much of the reserve as their victims give back
            // once the copies are durable (`Cleaning::gain`).
            reserve.saturating_sub(m.cleaning.gain())
        } else if pays_debt {
            reserve + self.checkpoint_debt(m, true)
        } else {
            reserve
        };
        if self.free_blocks_up_to(m, need + keep) >= need + keep {
            return Ok(());
        }
        let space = self.space_report(m);
        let snapshots = m.life.snapshot_count();
        let holds = m.life.held_count();
        Err(Error::NoSpace(format!(
            "{} bytes to write, {} bytes free after cleaning; live data holds {} and {} snapshot(s){} pin {} of {} bytes{}",
            need * BLOCK_U64,
            // What is free beyond the reserve, none if the reserve is not all there.
            self.free_blocks(m).saturating_sub(reserve) * BLOCK_U64,
            space.live,
            snapshots,
            if holds > 0 { format!(" and {holds} open view(s)") } else { String::new() },
            space.pinned_by_snapshots,
            space.size,
            if space.pinned_by_snapshots > space.size / 10 {
                " (drop snapshots to make room)".to_string()
            } else if space.reclaimable >= need * BLOCK_U64 {
                // The room exists, as dead blocks spread thinly over nearly full segments: each
                // pass copies almost a segment to give back a few blocks, and ran out of room.
                format!(
                    " ({} bytes are dead but spread over nearly full segments the cleaner could not empty in the room left: a larger pool, or a smaller write buffer, leaves it room)",
                    space.reclaimable
                )
            } else {
                " (the live data fills the pool)".to_string()
            }
        )))
    }

    /// The free blocks `blocks` of buffered data need as [`Engine::set_buffer_limit`] counts
    /// them: twice over, beyond the reserve and a full pass's copies.
    pub(super) fn buffer_room(&self, m: &State, blocks: u64) -> u64 {
        2 * blocks
            + self.reserve_blocks()
            + Self::deletes_reserve(m)
            + FULL_PASS_ROOM_SEGMENTS * self.segment_blocks()
    }

    /// Whether `blocks` of buffered data fit the free space ([`Engine::buffer_room`]).
    pub(super) fn buffer_fits(&self, m: &State, blocks: u64) -> bool {
        let want = self.buffer_room(m, blocks);
        self.free_blocks_up_to(m, want) >= want
    }

    /// Sets [`Engine::buffer_limit`] from the blocks left free once the commit being checked is
    /// written (counted up to the room a whole buffer needs, [`Engine::buffer_room`]). When
    /// every cleaning pass is a checkpoint (full passes), a checkpoint writes every buffered
    /// block before the victims it frees are reusable: if the buffer could outgrow the free
    /// space, the cleaner would have no room left to free any, and writers would get `NoSpace`
    /// with most of the pool dead. So writers buffer at most half of what is free beyond the
    /// reserve and a full pass's copies (half: the other half is for what they add between the
    /// check and the commit, and for the checkpoint's metadata), and commit, which cleans, when
    /// they reach it. The limit also holds while a namespace change is pending, when passes
    /// were checkpoints too until their copies could be replayed whatever is pending (see
    /// `clean_passes`); kept there as a margin, not measured again since.
    ///
    /// The floor that keeps commits in logs of some size near full is itself at most half of
    /// what is free beyond `reserve`: what writers buffer then always fits, so a write there is
    /// no room for gets `NoSpace` before it is buffered (`make_room_for_write`), never data
    /// acknowledged to a writer that has nowhere to go.
    pub(super) fn set_buffer_limit(&self, m: &State, free_after: u64, reserve: u64) {
        let full = self.config().dirty_bytes_max.div_ceil(BLOCK_U64);
        // Saturating: no room beyond what must stay free is no room.
        let room = free_after.saturating_sub(self.buffer_room(m, 0)) / 2;
        let fit = free_after.saturating_sub(reserve) / 2;
        let floor = BUFFER_LIMIT_MIN_BLOCKS.min(full).min(fit);
        let bytes = room.clamp(floor, full) * BLOCK_U64;
        let fit_bytes = fit.min(full) * BLOCK_U64;
        self.budget.set_limits(bytes, fit_bytes);
    }

    /// Whether cleaning passes can be light (see `clean_passes`): relaxed ordering, and a newest
    /// checkpoint nothing keeps (no snapshot, open view or protection period), so the blocks
    /// the copies supersede need no pin.
    pub(super) fn light_cleaning(&self, m: &State) -> bool {
        self.config().ordering == crate::tbfs::Ordering::Relaxed
            && m.life
                .only_newest_unkept(m.ckpt.newest(), m.ckpt.newest(), now_ns())
    }

    /// Blocks kept for the checkpoints that make dead segments reusable (and for recovery's).
    pub(super) fn reserve_blocks(&self) -> u64 {
        (2 * self.segment_blocks()).max(RESERVE_BLOCKS_MIN)
    }

    /// Blocks a user cannot fill (`SpaceReport::available`): the reserve, and slack for what
    /// the space check adds to a write (summaries, pads at segment ends).
    pub(super) fn kept_blocks(&self) -> u64 {
        self.reserve_blocks() + RESERVE_BLOCKS_MIN
    }

    /// Free blocks kept, beyond what a write needs and the reserve, before writers clean: room
    /// for the cleaner to make progress. Every block kept free beyond that raises the live
    /// fraction of the segments it cleans.
    pub(super) fn low_water(&self, m: &State) -> u64 {
        let sb = self.segment_blocks();
        let flush = self.config().dirty_bytes_max.div_ceil(BLOCK_U64);
        let want = if !self.light_cleaning(m) {
            // Every pass is a checkpoint with the buffered data and a pass's copies (strict
            // ordering, or a newest checkpoint something keeps).
            flush + flush / 4 + FULL_PASS_ROOM_SEGMENTS * sb
        } else if m.changes.namespace_dirty() {
            // A namespace change is pending: room for the whole buffer as `set_buffer_limit`
            // counts it (the reserve is added by the space check), so writers clean before the
            // buffer must shrink. (Every pass was then a checkpoint carrying the buffer; passes
            // are light now whatever is pending, and this margin is kept, not measured again.)
            self.buffer_room(m, flush) - self.reserve_blocks() - Self::deletes_reserve(m)
        } else {
            // A light pass needs room for one victim's copies. A victim that holds live map
            // nodes needs a checkpoint, which writes the buffered data with the nodes: room for
            // a flush, its summaries and the nodes.
            flush + flush / 8 + CLEAN_ROOM_SEGMENTS * sb
        };
        want.min(sb * self.segment_count() / LOW_WATER_DIVISOR)
            .max(2 * sb)
            .max(RESERVE_BLOCKS_MIN)
    }
}

impl State {
    pub fn seg_of(block: u64, segment_blocks: u64) -> usize {
        segments::segment_of(block, segment_blocks)
    }

    pub fn seg_inc(&mut self, block: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        self.seg.add_live(s);
    }

    /// The live tree drops `block`. A retained checkpoint that references it keeps it pinned.
    pub fn seg_dec(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        self.seg_dec_at(block, seq, segment_blocks, now_ns());
    }

    /// [`State::seg_dec_at`] for every block of `blocks` (a deleted file's): whether nothing
    /// keeps the checkpoints that may reference a block depends only on the checkpoint it was
    /// born after, the same for most blocks of a file, so it is looked up once per run of
    /// blocks born alike instead of once per block.
    pub fn seg_dec_all_at(
        &mut self,
        blocks: impl Iterator<Item = u64>,
        seq: u64,
        segment_blocks: u64,
        now: i64,
    ) {
        let mut known: Option<(u64, bool)> = None;
        // Blocks born alike have the same anchor: one look-up per run of them.
        let mut anchored: Option<(u64, Option<u64>)> = None;
        let died = self.ckpt.newest();
        let mut runs: Vec<PinRun> = Vec::new();
        for block in blocks {
            self.seg_dec_unpinned(block, seq, segment_blocks);
            let born = self.born_of(block, segment_blocks);
            let unkept = match known {
                Some((b, unkept)) if b == born => unkept,
                _ => {
                    let unkept = born <= died && self.life.only_newest_unkept(born, died, now);
                    known = Some((born, unkept));
                    unkept
                }
            };
            if unkept {
                // Only the newest checkpoint can reference it, and nothing keeps that one (no
                // snapshot, view or protection period, as in a memory pool): the next
                // checkpoint releases it. Until a superblock names a later checkpoint the
                // segment's `dead_at` keeps the block from reuse, so no pin is needed (one per
                // block of every file deleted or overwritten, dropped again at the next
                // checkpoint); the newest checkpoint just cannot be opened as a view or made a
                // snapshot any more.
                self.ckpt.note_superseded();
            } else {
                let anchor = match anchored {
                    Some((b, anchor)) if b == born => anchor,
                    _ => {
                        let anchor = self.life.anchor(born, died);
                        anchored = Some((born, anchor));
                        anchor
                    }
                };
                if let Some(anchor) = anchor {
                    let pin = BlockPin { born, died, anchor };
                    // A file's blocks mostly follow each other: one run for each stretch.
                    match runs.last_mut() {
                        Some(r) if r.end() == block && r.pin == pin => r.len += 1,
                        _ => runs.push(PinRun {
                            start: block,
                            len: 1,
                            pin,
                        }),
                    }
                }
            }
        }
        if !runs.is_empty() {
            self.pin_all(runs, segment_blocks);
        }
    }

    /// [`State::seg_dec`] with the time read once by a caller dropping many blocks.
    pub fn seg_dec_at(&mut self, block: u64, seq: u64, segment_blocks: u64, now: i64) {
        self.seg_dec_all_at(std::iter::once(block), seq, segment_blocks, now);
    }

    /// The live tree drops `block`, which no retained checkpoint needs (a table block: only the
    /// newest checkpoint's tables are ever read).
    pub fn seg_dec_unpinned(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        self.seg.drop_live(s);
        self.ckpt.note_dropped(1);
        // Every such drop counts, not only the last: the durable checkpoint may reference any
        // block that died after it, whatever killed the segment's last block.
        self.seg.note_dead(s, seq);
    }

    /// The live tree drops file data `block` because the data-only log `seq` wrote a newer copy
    /// of it. Roll-forward replays that log over every checkpoint written before it, so when
    /// the only retained checkpoint that can reference the block is the newest and nothing keeps
    /// that one (no snapshot, open view or protection period), the block needs no pin and its
    /// segment may be reused as soon as the last log of the run holding that log is durable
    /// (`Engine::segment_free`; recovery replays a run's parts only whole), without waiting for a
    /// checkpoint. Otherwise as `seg_dec`.
    pub fn seg_supersede(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let born = self.born_of(block, segment_blocks);
        if !self
            .life
            .only_newest_unkept(born, self.ckpt.newest(), now_ns())
        {
            self.seg_dec(block, seq, segment_blocks);
            return;
        }
        let s = Self::seg_of(block, segment_blocks);
        self.seg.drop_live(s);
        self.soft_dead.superseded(&mut self.seg, s);
        if born <= self.ckpt.newest() {
            self.ckpt.note_superseded();
        }
    }
}

impl Engine {
    pub(super) fn seg_start(&self, seg: u64) -> u64 {
        format::FIRST_SEGMENT_BLOCK + seg * self.segment_blocks()
    }

    pub(super) fn segment_free(&self, m: &State, s: usize) -> bool {
        self.segment_free_if_durable(m, s, self.logs.durable())
    }

    /// Whether segment `s` would be free once every log below `durable` is durable.
    pub(super) fn segment_free_if_durable(&self, m: &State, s: usize, durable: u64) -> bool {
        let w = &m.writer;
        !w.holds_segment(s as u64)
            && m.seg.is_empty(s)
            && m.seg.dead_at(s) <= self.superblocks.checkpoint_seq()
            && m.seg.last_seq(s) <= self.superblocks.checkpoint_seq()
            && m.seg.soft_dead_at(s) <= durable
            // The background cleaner is reading it without `meta`.
            && !m.bg_clean.reading.contains(&s)
    }
}
