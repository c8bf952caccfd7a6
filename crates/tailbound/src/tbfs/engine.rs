//! The file tree (skeleton).
use std::io::SeekFrom;

use super::*;

/// An open pool. Cheap to clone; all clones share one file tree. Thread-safe.
#[derive(Clone, Debug)]
pub struct Fs {}

/// An open file. Dropping it closes it.
#[derive(Debug)]
pub struct File {}

impl Fs {
    /// Makes a new, empty pool on `dev` (destroying what was there) and opens it.
    pub fn format(dev: DeviceRef, config: &Config) -> Result<Fs> {
        let _ = (dev, config);
        todo!()
    }
    /// Opens an existing pool, recovering it.
    pub fn open(dev: DeviceRef, options: &OpenOptions) -> Result<Fs> {
        let _ = (dev, options);
        todo!()
    }
    pub fn recovery_report(&self) -> RecoveryReport {
        todo!()
    }
    /// The configuration in effect.
    pub fn config(&self) -> Config {
        todo!()
    }
    pub fn counters(&self) -> FsCounters {
        todo!()
    }
    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<File> {
        let _ = (path, flags);
        todo!()
    }
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let _ = (path, mode);
        todo!()
    }
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let _ = path;
        todo!()
    }
    /// Removes the name now; the inode is freed when the last open handle closes.
    pub fn unlink(&self, path: &str) -> Result<()> {
        let _ = path;
        todo!()
    }
    /// Atomically renames, replacing an existing file (or empty directory) at `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _ = (from, to);
        todo!()
    }
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let _ = path;
        todo!()
    }
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let _ = (path, len);
        todo!()
    }
    /// Entries of a directory, sorted by name, without `.` and `..`.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let _ = path;
        todo!()
    }
    pub fn statvfs(&self) -> Result<StatVfs> {
        todo!()
    }
    /// Writes all buffered data and a checkpoint, and makes them durable (like `syncfs`).
    pub fn sync(&self) -> Result<()> {
        todo!()
    }
    /// Syncs, stops background work and releases the device. Later calls on clones fail.
    pub fn close(self) -> Result<()> {
        todo!()
    }
}

impl File {
    pub fn ino(&self) -> u64 {
        todo!()
    }
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let _ = buf;
        todo!()
    }
    pub fn write(&mut self, buf: &[u8]) -> Result<usize> {
        let _ = buf;
        todo!()
    }
    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let _ = (buf, offset);
        todo!()
    }
    pub fn pwrite(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let _ = (buf, offset);
        todo!()
    }
    pub fn seek(&mut self, pos: SeekFrom) -> Result<u64> {
        let _ = pos;
        todo!()
    }
    /// Makes the file's data and metadata durable.
    pub fn fsync(&self) -> Result<()> {
        todo!()
    }
    /// Makes the file's data (and the size needed to read it) durable.
    pub fn fdatasync(&self) -> Result<()> {
        todo!()
    }
    pub fn set_len(&self, len: u64) -> Result<()> {
        let _ = len;
        todo!()
    }
    /// Reserves space so writes in `offset..offset+len` do not fail for lack of it, and extends
    /// the size like `fallocate(mode 0)`.
    pub fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        todo!()
    }
    pub fn stat(&self) -> Result<Stat> {
        todo!()
    }
}
