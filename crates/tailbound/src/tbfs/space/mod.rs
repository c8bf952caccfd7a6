//! Space: what is free, the reserve and the low-water room kept beside what is written, and
//! the check every commit makes before it writes (`Engine::ensure_space`, in the
//! orchestration's `commit::room`, which gathers these functions' inputs from the parts).
//! Which segments may be written again reads the log pipeline and the superblock writer beside
//! the segment table, so it is the orchestration's too (`commit/reuse.rs`).

#[cfg(test)]
mod age_signal_tests;
pub(crate) mod background;
pub(crate) mod cleaner;
#[cfg(test)]
mod cleaner_sim;
pub(crate) mod cleaning;
pub(crate) mod copies_debt;
pub(crate) mod deletes_debt;
pub(crate) mod refusals;
#[cfg(test)]
mod room_tests;
pub(crate) mod segments;
pub(crate) mod soft_dead;

use crate::tbfs::format::{self, *};
use crate::tbfs::limits::{BUFFER_LIMIT_MIN_BLOCKS, FULL_PASS_ROOM_SEGMENTS, RESERVE_BLOCKS_MIN};
use crate::tbfs::state::{Engine, State};

impl Engine {
    /// The blocks writing `blocks` takes: summaries, pads at segment ends, and room for the
    /// checkpoint a refresh needs.
    pub(super) fn space_needed(&self, blocks: u64) -> u64 {
        blocks + blocks / 100 + 4 + blocks / self.segment_blocks().max(1) * 2
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

    /// Blocks kept for the checkpoints that make dead segments reusable (and for recovery's).
    pub(super) fn reserve_blocks(&self) -> u64 {
        (2 * self.segment_blocks()).max(RESERVE_BLOCKS_MIN)
    }

    /// Blocks a user cannot fill (`SpaceReport::available`): the reserve, and slack for what
    /// the space check adds to a write (summaries, pads at segment ends).
    pub(super) fn kept_blocks(&self) -> u64 {
        self.reserve_blocks() + RESERVE_BLOCKS_MIN
    }
}

impl Engine {
    pub(super) fn seg_start(&self, seg: u64) -> u64 {
        format::FIRST_SEGMENT_BLOCK + seg * self.segment_blocks()
    }
}
