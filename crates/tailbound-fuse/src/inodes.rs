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
        let f = match fs.open_ino(ino, flags) {
            // A pool opened read-only still reads.
            Err(tbfs::Error::ReadOnly(_)) => fs.open_ino(ino, OpenFlags::read_only())?,
            opened => opened?,
        };
        let f = Arc::new(f);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tailbound::dev::sim::SimDevice;
    use tailbound::tbfs::by_ino::ROOT;
    use tailbound::tbfs::{Config, OpenOptions};

    const OWNER: (u32, u32) = (1000, 1000);

    fn made(fs: &Fs, name: &str, data: &[u8]) -> u64 {
        let f = fs
            .create_in(ROOT, name, OpenFlags::create(), OWNER)
            .unwrap();
        f.pwrite(data, 0).unwrap();
        f.stat().unwrap().ino
    }

    #[test]
    fn an_unlinked_inode_with_a_handle_keeps_its_data_until_forgotten() {
        let dev = Arc::new(SimDevice::new(64 << 20));
        let fs = Fs::format(dev, &Config::default()).unwrap();
        let inodes = Inodes::default();
        let ino = made(&fs, "a", b"kept");
        let f = inodes.get(&fs, ino).unwrap();
        assert!(
            Arc::ptr_eq(&f, &inodes.get(&fs, ino).unwrap()),
            "one handle per inode"
        );
        drop(f);
        fs.unlink_in(ROOT, "a").unwrap();
        let f = inodes.held(ino).unwrap();
        let mut buf = [0u8; 16];
        let n = f.pread(&mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"kept");
        f.pwrite(b" and more", 4).unwrap();
        drop(f);
        inodes.forget(ino);
        assert!(inodes.held(ino).is_none());
        assert!(fs.stat_ino(ino).is_err(), "freed with its last handle");
    }

    #[test]
    fn a_read_only_pool_still_gives_readable_handles() {
        let dev = Arc::new(SimDevice::new(64 << 20));
        let fs = Fs::format(dev.clone(), &Config::default()).unwrap();
        let ino = made(&fs, "a", b"data");
        fs.close().unwrap();
        let options = OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        };
        let fs = Fs::open(dev, &options).unwrap();
        let f = Inodes::default().get(&fs, ino).unwrap();
        let mut buf = [0u8; 8];
        let n = f.pread(&mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"data");
        assert!(f.pwrite(b"x", 0).is_err());
    }
}
