//! Pool handles by inode, for files the kernel opens without asking.
//!
//! With the writeback cache the server answers the kernel's first OPEN with ENOSYS, and the
//! kernel then opens and closes regular files by itself (FUSE's no-open): no OPEN and no
//! RELEASE round trip per `open`/`close`. Reads, writes and syncs then name an inode, not an
//! open file. Each inode gets one pool handle, opened at its first use and kept while the
//! kernel holds the inode (its lookup count above zero), so a file unlinked while a process
//! still has it open keeps its data until the kernel forgets the inode, as it would with a
//! handle per open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tailbound::tbfs::{self, File, Fs, OpenFlags};

#[derive(Default)]
pub struct Inodes {
    table: Mutex<HashMap<u64, Arc<File>>>,
}

impl Inodes {
    /// The handle of live inode `ino`, opened now if it has none: for reading and writing (the
    /// kernel checked the caller's access when it opened the file), with no append or sync of
    /// its own (the kernel places appends and calls fsync for O_SYNC).
    pub fn get(&self, fs: &Fs, ino: u64) -> tbfs::Result<Arc<File>> {
        if let Some(f) = self.table().get(&ino) {
            return Ok(f.clone());
        }
        let flags = OpenFlags {
            read: true,
            write: true,
            ..OpenFlags::default()
        };
        let f = Arc::new(fs.open_ino(ino, flags)?);
        // Another request may have opened it meanwhile: keep the first, drop this one.
        Ok(self.table().entry(ino).or_insert(f).clone())
    }

    /// The handle of `ino` if it has one.
    pub fn held(&self, ino: u64) -> Option<Arc<File>> {
        self.table().get(&ino).cloned()
    }

    /// The kernel no longer holds `ino`: its handle closes (the last one of an unlinked inode
    /// frees it).
    pub fn forget(&self, ino: u64) {
        let gone = self.table().remove(&ino);
        drop(gone);
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<File>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}
