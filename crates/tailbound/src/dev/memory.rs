//! The memory-pool backend: a pool that is a mapping of memory. A file in `/dev/shm` (tmpfs: it
//! outlives the process, not a reboot), a file on a DAX file system mapped with `MAP_SYNC` where the
//! kernel allows it, a regular file (its page cache, written back by `msync`), or anonymous memory
//! for tests and experiments. Reads and writes are memory copies. The pages of a pool in tmpfs are
//! mapped writable a segment ahead of the engine's log writer ([`Device::prepare_write`]), so its
//! stores do not take a page fault per page.
//!
//! Contract with the engine: no thread writes a range while another reads or writes it.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;

use super::{check_request, Device, BLOCK_SIZE};
use crate::sys::mmap::SharedMapping;

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// What `flush` does, which is what makes a write durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Anonymous memory: nothing outlives the process, `flush` does nothing.
    Process,
    /// A tmpfs file: stores are in the file as soon as they are made; `flush` does nothing.
    Tmpfs,
    /// A DAX mapping with `MAP_SYNC`: `flush` is `msync`, which writes CPU caches back to the media.
    MapSync,
    /// A regular file's page cache: `flush` is `msync(MS_SYNC)`.
    Msync,
}

/// A pool kept in mapped memory.
#[derive(Debug)]
pub struct MemoryPool {
    /// Holds the pool lock while the pool is open (none for anonymous memory).
    _file: Option<std::fs::File>,
    map: SharedMapping,
    len: u64,
    persistence: Persistence,
}

impl MemoryPool {
    /// Creates (or resizes) the file at `path` to `len` bytes (whole blocks) and maps it.
    pub fn create(path: impl AsRef<Path>, len: u64) -> io::Result<MemoryPool> {
        let path = path.as_ref();
        let len = len / BLOCK_SIZE * BLOCK_SIZE;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: open: {e}", path.display())))?;
        super::lock_pool(&file, path)?;
        file.set_len(len)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: resize: {e}", path.display())))?;
        // Reserve the space now: a full /dev/shm then fails here, not with SIGBUS on a later store.
        crate::sys::file::fallocate(&file, 0, len, crate::sys::file::Allocate::KeepSize).map_err(
            |e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: reserving {len} bytes: {e}", path.display()),
                )
            },
        )?;
        MemoryPool::map(file, path, len)
    }

    /// Maps an existing file; the pool is its size rounded down to whole blocks.
    pub fn open(path: impl AsRef<Path>) -> io::Result<MemoryPool> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: open: {e}", path.display())))?;
        super::lock_pool(&file, path)?;
        let len = file.metadata()?.len() / BLOCK_SIZE * BLOCK_SIZE;
        MemoryPool::map(file, path, len)
    }

    /// Maps `file`, whose pool lock the caller holds; the pool keeps the file (and the lock).
    fn map(file: std::fs::File, path: &Path, len: u64) -> io::Result<MemoryPool> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: an empty pool", path.display()),
            ));
        }
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: mmap: {e}", path.display()));
        let tmpfs = path
            .parent()
            .and_then(|d| {
                crate::sys::fs::statfs(if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                })
                .ok()
            })
            .is_some_and(|s| s.magic == TMPFS_MAGIC);
        let (map, persistence) = if tmpfs {
            (
                SharedMapping::new(&file, len as usize).map_err(ctx)?,
                Persistence::Tmpfs,
            )
        } else {
            match SharedMapping::new_sync(&file, len as usize) {
                Ok(m) => (m, Persistence::MapSync),
                Err(_) => (
                    SharedMapping::new(&file, len as usize).map_err(ctx)?,
                    Persistence::Msync,
                ),
            }
        };
        Ok(MemoryPool {
            _file: Some(file),
            map,
            len,
            persistence,
        })
    }

    /// Anonymous memory of `len` bytes (whole blocks), gone when the process exits.
    pub fn anonymous(len: u64) -> io::Result<MemoryPool> {
        let len = len / BLOCK_SIZE * BLOCK_SIZE;
        Ok(MemoryPool {
            _file: None,
            map: SharedMapping::anonymous(len as usize)?,
            len,
            persistence: Persistence::Process,
        })
    }

    pub fn persistence(&self) -> Persistence {
        self.persistence
    }
}

impl Device for MemoryPool {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        self.map.read_at(offset as usize, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        self.map.write_at(offset as usize, buf)
    }

    fn flush(&self) -> io::Result<()> {
        match self.persistence {
            Persistence::Process | Persistence::Tmpfs => Ok(()),
            Persistence::MapSync | Persistence::Msync => self.map.sync(0, self.len as usize),
        }
    }

    fn writes_are_copies(&self) -> bool {
        true
    }

    fn prepare_write(&self, offset: u64, len: u64) {
        // Only tmpfs: populating a disk file's mapping would read it in. Best effort: kernels
        // before 5.14 lack MADV_POPULATE_WRITE and fault the pages in on first use instead.
        if self.persistence == Persistence::Tmpfs
            && check_request(self, offset, len as usize).is_ok()
        {
            let _ = self.map.populate_write(offset as usize, len as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shm_pool_keeps_its_bytes_across_reopen() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("pool");
        let pool = MemoryPool::create(&path, 1 << 20).unwrap();
        assert_eq!(pool.persistence(), Persistence::Tmpfs);
        pool.write_at(8192, &[5u8; 4096]).unwrap();
        pool.flush().unwrap();
        drop(pool);
        let pool = MemoryPool::open(&path).unwrap();
        let mut back = [0u8; 4096];
        pool.read_at(8192, &mut back).unwrap();
        assert_eq!(back, [5u8; 4096]);
        assert!(pool.write_at(1 << 20, &back).is_err());
        let err = MemoryPool::open(&path).unwrap_err();
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
    }

    #[test]
    fn a_disk_file_pool_syncs_and_anonymous_memory_works() {
        let dir = tempfile::tempdir().unwrap();
        let pool = MemoryPool::create(dir.path().join("pool"), 64 << 10).unwrap();
        assert_ne!(pool.persistence(), Persistence::Tmpfs);
        pool.write_at(0, &[1u8; 4096]).unwrap();
        pool.flush().unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("pool")).unwrap()[..4096],
            [1u8; 4096]
        );
        let anon = MemoryPool::anonymous(64 << 10).unwrap();
        anon.write_at(4096, &[2u8; 4096]).unwrap();
        let mut back = [0u8; 4096];
        anon.read_at(4096, &mut back).unwrap();
        assert_eq!(back, [2u8; 4096]);
        assert_eq!(anon.persistence(), Persistence::Process);
    }
}
