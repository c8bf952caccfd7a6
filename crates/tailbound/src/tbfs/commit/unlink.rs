//! The unlink path: dropping a link, and freeing an inode once nothing names or holds it. Freeing
//! touches the segment table, the inodes, the directories, the changes and the inode file, so it
//! is orchestration.

use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::inode::*;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{FileKind, Result};

impl Engine {
    /// Drops one link to `ino`; frees it if nothing holds it open.
    pub fn drop_link(&self, m: &mut State, ino: u64) -> Result<()> {
        let cell = self.cell(&m.inodes, ino)?;
        let free = {
            let mut st = cell.lock();
            st.names_changed();
            if st.kind() == FileKind::Dir {
                st.drop_dir_links();
            } else {
                self.drop_nlink(&mut st, ino)?;
            }
            st.set_ctime_ns(self.now_ns());
            st.nlink() == 0 && st.open_handles() == 0
        };
        m.namespace_changed(ino);
        if free {
            self.free_inode(m, &cell);
        }
        Ok(())
    }

    /// Releases an inode's blocks and number.
    pub fn free_inode(&self, m: &mut State, cell: &InodeCell) {
        let mut st = cell.lock();
        if st.freed() {
            return;
        }
        st.mark_freed();
        // Its number may be given to a new file: what was leased of this one goes first.
        self.watchers.inode_freed(cell.ino);
        let seq = m.writer.seq();
        let now = self.now_ns();
        let blocks = st.map().blocks.iter().copied().filter(|&a| a != 0);
        m.seg_dec_all_at(
            blocks.chain(st.map().node_addrs()),
            seq,
            self.segment_blocks(),
            now,
        );
        let released = st.dirty().len() as u64 * BLOCK_U64;
        let buffers = std::mem::take(st.dirty_mut());
        drop(st);
        m.drop_after_release(buffers);
        self.release_dirty_bytes(released);
        m.inodes.free(cell.ino);
        m.dirs.forget(cell.ino);
        m.changes.freed(cell.ino);
        m.ifile.slot_freed(cell.ino);
    }
}
