//! The checkpoint debt of the state held (`tbfs/debt.rs` bounds it from the parts and values
//! passed in: the state's, the dirty set's, the budget's widest map), and paying it: a change
//! that needs room may take a checkpoint first, which touches every part, so it is
//! orchestration.

use crate::tbfs::debt::{exact_bound, quick_bound};
use crate::tbfs::directories::bound_blocks;
use crate::tbfs::limits::CHANGE_BLOCKS;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

impl Engine {
    /// An upper bound on the blocks the next checkpoint writes beyond unsealed file data.
    /// `exact` counts inode by inode and entry by entry (a walk of every changed inode,
    /// [`exact_bound`]); otherwise the bound comes from totals ([`quick_bound`]). Reads the
    /// state held, the inodes the write path dirtied and the widest map the budget has seen.
    pub(in crate::tbfs) fn checkpoint_debt(&self, m: &State, exact: bool) -> u64 {
        let tables = m.table_estimate();
        let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if !exact {
            let widest = self.budget.widest();
            return quick_bound(
                dirty.all().len(),
                &m.dirs,
                &m.changes,
                &m.ifile,
                widest,
                tables,
            );
        }
        // Copied, so the set's lock is not held while the walk takes the inodes' locks.
        let work = dirty.all().clone();
        drop(dirty);
        exact_bound(work, &m.inodes, &m.dirs, &m.changes, &m.ifile, tables)
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
            // With nothing changed since the newest checkpoint there is no debt to pay.
            Err(Error::NoSpace(_)) if self.changed_since_checkpoint(m) => {
                self.commit_checkpoint(m)?;
                self.ensure_space(m, blocks)
            }
            r => r,
        }
    }
}
