//! The checkpoint debt of the state held (`tbfs/debt.rs` bounds it from the parts), and paying
//! it: a change that needs room may take a checkpoint first, which touches every part, so it is
//! orchestration.

use crate::tbfs::directories::bound_blocks;
use crate::tbfs::limits::CHANGE_BLOCKS;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

impl Engine {
    /// An upper bound on the blocks the next checkpoint writes beyond unsealed file data
    /// ([`Engine::debt_bound`] over the state held).
    pub(in crate::tbfs) fn checkpoint_debt(&self, m: &State, exact: bool) -> u64 {
        self.debt_bound(
            &m.inodes,
            &m.dirs,
            &m.changes,
            &m.ifile,
            m.table_estimate(),
            exact,
        )
    }

    /// Makes room for a new name in directory `dir` before it is made: the checkpoint that
    /// records it rewrites the directory (unless a change pending already does), a page of
    /// inodes and the inode file's map. A pool whose room that would take answers `NoSpace`,
    /// after paying the debt with a checkpoint if that is what stands in the way.
    pub(in crate::tbfs) fn make_room_for_change(&self, m: &mut State, dir: u64) -> Result<()> {
        let dir_blocks = if m.dirs.dirty().contains(&dir) {
            0
        } else {
            m.dirs.get(dir).map_or(1, |e| bound_blocks(e.len() + 1))
        };
        let blocks = dir_blocks + CHANGE_BLOCKS;
        match self.ensure_space(m, blocks) {
            Err(Error::NoSpace(_)) => {
                self.commit_checkpoint(m)?;
                self.ensure_space(m, blocks)
            }
            r => r,
        }
    }
}
