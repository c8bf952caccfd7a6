//! The checkpoint debt: what the next checkpoint must write for the changes made since the
//! last one (map nodes, directories, inode pages, tables), beyond the buffered file data.
//!
//! Writes in relaxed ordering leave their maps to the next checkpoint, so every write adds to
//! a debt that only a checkpoint pays. A write that took the room that debt needs would leave a
//! pool whose next checkpoint (a sync, a snapshot drop, a close, the first after recovery) finds
//! no room; so writes keep it free beside the reserve, and pay it (by a checkpoint) when it is
//! what stands between them and the room they need.

use super::dense::DenseSet;
use super::format::height_for;
use super::map::tree_nodes;
use crate::tbfs::changes::Changes;
use crate::tbfs::commit::checkpoint::map_nodes_bound;
use crate::tbfs::directories::Directories;
use crate::tbfs::ifile::InodeFile;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::limits::{DIR_BLOCK_FILL, FIXED_BLOCKS};

/// An upper bound on the blocks the next checkpoint writes beyond unsealed file data, from
/// totals: every changed inode as wide as the widest map the pool has had (`widest`), every
/// directory entry as long as a name can be. `dirtied` is how many inodes the write path
/// dirtied since the last checkpoint took them (`DirtySet::all`); `tables` is what the
/// checkpoint's tables take (`State::table_estimate`). The orchestration passes the parts
/// (`Engine::checkpoint_debt`).
pub(in crate::tbfs) fn quick_bound(
    dirtied: usize,
    dirs: &Directories,
    changes: &Changes,
    ifile: &InodeFile,
    widest: u64,
    tables: u64,
) -> u64 {
    let mut debt = FIXED_BLOCKS + tables;
    let changed = (dirtied + changes.pending().len() + dirs.dirty().len()) as u64;
    let (dir_blocks, widest_dir) = dirs.dirty_bound();
    debt += dir_blocks;
    let pages = (changed + ifile.freed_slots().len() as u64 + ifile.pages_dirty().len() as u64)
        .min(ifile.pages() + 1);
    debt + changed * tree_nodes(widest.max(widest_dir)) + pages + ifile_nodes(ifile, pages)
}

/// The bound of [`quick_bound`] counted inode by inode and entry by entry: a walk of every
/// changed inode. `work` is the inodes the write path dirtied (a copy of `DirtySet::all`, taken
/// so its lock is not held while the inodes' are).
pub(in crate::tbfs) fn exact_bound(
    mut work: DenseSet,
    inodes: &InodeTable,
    dirs: &Directories,
    changes: &Changes,
    ifile: &InodeFile,
    tables: u64,
) -> u64 {
    let mut debt = FIXED_BLOCKS + tables;
    work.extend(changes.pending().iter());
    work.extend(dirs.dirty().iter());
    work.retain(|ino| inodes.contains(*ino));
    let pages = ifile.pages_to_write(work.iter());
    debt += pages.len() as u64 + ifile_nodes(ifile, pages.len() as u64);
    for ino in work.iter() {
        let dir_len = if dirs.dirty().contains(&ino) {
            dirs.get(ino).map_or(0, |e| {
                let bytes: u64 = e.keys().map(|name| 10 + name.len() as u64).sum();
                bytes.div_ceil(DIR_BLOCK_FILL)
            })
        } else {
            0
        };
        debt += dir_len + map_nodes_bound(&inodes[&ino].lock(), dir_len as usize);
    }
    debt
}

/// The inode file's map nodes a checkpoint writing `pages` inode pages rewrites: a path per
/// page, never more than its whole tree.
fn ifile_nodes(ifile: &InodeFile, pages: u64) -> u64 {
    let len = (ifile.map().blocks.len() as u64).max(ifile.pages()) + 1;
    ((height_for(len) as u64 + 1) * pages.max(1)).min(tree_nodes(len) + 1)
}
