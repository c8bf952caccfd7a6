//! Data-only logs: what of a file's buffers a data-only log may take, and dropping the buffers
//! a written log held. Sealing them is orchestration (`commit/seal.rs`).

use std::sync::Arc;

use crate::tbfs::format::{self, BLOCK_U64};
use crate::tbfs::state::{Engine, State};

impl Engine {
    /// Drops the buffers `written` names that are still of the generation written, into
    /// `spare` (to be recycled once the inode lock is released).
    pub(crate) fn drop_written(
        &self,
        st: &mut crate::tbfs::inode::InodeState,
        written: &[(u64, u64)],
        spare: &mut Vec<Arc<format::Block>>,
    ) {
        let mut released = 0;
        for &(block, gen) in written {
            // A buffer is sealed once per generation (`DirtyBlock::sealed_in`), so the same
            // generation is never waiting in a later log.
            if st.dirty().get(&block).is_some_and(|d| d.gen == gen) {
                if let Some(d) = st.dirty_mut().remove(&block) {
                    spare.push(d.into_data());
                }
                released += BLOCK_U64;
            }
        }
        self.release_dirty_bytes(released);
    }
}

/// How many of a file's buffered blocks are not yet in a sealed log.
pub(crate) fn unsealed_count(st: &crate::tbfs::inode::InodeState) -> usize {
    st.dirty()
        .values()
        .filter(|d| d.sealed_in.is_none())
        .count()
}

/// Whether any of a file's buffered blocks is not yet in a sealed log.
pub(crate) fn has_unsealed(st: &crate::tbfs::inode::InodeState) -> bool {
    st.dirty().values().any(|d| d.sealed_in.is_none())
}

/// Whether a data-only log can take something from file `ino` now: buffers in no sealed log, or
/// attributes, unless only a checkpoint may record the file ([`Engine::seal_file_data`]).
pub(crate) fn sealable(m: &State, ino: u64, st: &crate::tbfs::inode::InodeState) -> bool {
    has_unsealed(st) || (st.attr_dirty() && !m.changes.only_checkpoint_records(ino))
}
