//! Making names: a new inode under a directory, and the directory's change. A new name touches
//! the directories, the inodes and the changes (and may pay the checkpoint debt first), so it is
//! orchestration.

use std::sync::{Arc, Mutex};

use crate::tbfs::inode::*;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{FileKind, Result};

impl Engine {
    /// Adds a new inode to the tree under `parent`.
    pub fn create_inode(
        &self,
        m: &mut State,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        owner: (u32, u32),
    ) -> Result<Arc<InodeCell>> {
        self.make_room_for_change(m, parent)?;
        // A new directory's `..` links its parent, counted before anything is created so a
        // refusal leaves nothing half made.
        if kind == FileKind::Dir {
            if let Some(p) = m.inodes.get(parent) {
                p.lock().add_link(parent)?;
            }
        }
        let cell = m.inodes.create(|ino| InodeCell {
            ino,
            st: Mutex::new(InodeState::new(kind, mode, now_ns(), owner)),
        });
        let ino = cell.ino;
        if kind == FileKind::Dir {
            m.dirs.create(ino);
        }
        m.dirs
            .insert_entry(parent, name, ino, kind == FileKind::Dir);
        self.touch_dir(m, parent);
        m.namespace_changed(ino);
        Ok(cell)
    }

    pub fn touch_dir(&self, m: &mut State, dir: u64) {
        m.dirs.mark_dirty(dir);
        m.namespace_changed(dir);
        if let Some(c) = m.inodes.get(dir) {
            let mut st = c.lock();
            st.touch_modified(now_ns());
        }
    }
}
