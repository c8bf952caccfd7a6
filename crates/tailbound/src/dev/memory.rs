//! The memory-pool backend: a pool that is a mapping of memory. A file in `/dev/shm` (tmpfs: it
//! outlives the process, not a reboot), a file on a DAX file system mapped with `MAP_SYNC` where the
//! kernel allows it, a regular file (its page cache, written back by `msync`), or anonymous memory
//! for tests and experiments. Reads and writes are memory copies. A pool made in tmpfs has every
//! page reserved, cleared and mapped when it is created ([`MemoryPool::create_with_progress`]), so
//! the log writer never stops to have the kernel allocate and zero a page; a pool opened again is
//! mapped writable by a background thread, and a segment ahead of the writer
//! ([`Device::prepare_write`]) where that thread has not been yet, each MiB once.
//!
//! Contract with the engine: no thread writes a range while another reads or writes it.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{check_request, Device, BLOCK_SIZE};
use crate::sys::mmap::SharedMapping;

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// [`MemoryPool::prepare_write`] maps the pool writable in pieces of this size, each once.
const POPULATE_CHUNK: u64 = 1 << 20;

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
    map: Arc<SharedMapping>,
    len: u64,
    persistence: Persistence,
    /// Per [`POPULATE_CHUNK`] of the pool: already mapped writable (walking the page tables of
    /// a mapped segment again each time the writer enters it took a few percent of all CPU
    /// time under the engine's lock).
    populated: Arc<[AtomicBool]>,
    /// The thread mapping a reopened tmpfs pool, and what stops it.
    populator: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
    /// Chunks `prepare_write` mapped (tests).
    #[cfg(test)]
    populate_calls: std::sync::atomic::AtomicU64,
}

/// The name of the thread that maps a reopened pool in the background: a process can tell from
/// its threads (`/proc/self/task/*/comm`) whether a pool is still being mapped into it.
pub const POPULATE_THREAD: &str = "tbfs-populate";

impl MemoryPool {
    /// Creates (or resizes) the file at `path` to `len` bytes (whole blocks) and maps it; see
    /// [`MemoryPool::create_with_progress`].
    pub fn create(path: impl AsRef<Path>, len: u64) -> io::Result<MemoryPool> {
        MemoryPool::create_with_progress(path, len, &mut |_, _| {})
    }

    /// Creates (or resizes) the file at `path` to `len` bytes (whole blocks) and maps it. In tmpfs
    /// the whole pool is reserved, then cleared and mapped writable (`MADV_POPULATE_WRITE`, about
    /// a second for every few GiB), calling `progress(done, total)` in bytes as that goes: the
    /// memory is the pool's from then on, like a preallocated file, and no store into it takes a
    /// page fault. Kernels before 5.14 skip the clearing and fault pages in as they are first used.
    pub fn create_with_progress(
        path: impl AsRef<Path>,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> io::Result<MemoryPool> {
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
        let pool = MemoryPool::map(file, path, len)?;
        if pool.persistence == Persistence::Tmpfs {
            pool.populate(progress).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: clearing the pool: {e}", path.display()),
                )
            })?;
        }
        Ok(pool)
    }

    /// Clears and maps every page of the pool writable, a chunk at a time.
    fn populate(&self, progress: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        const CHUNK: u64 = 256 << 20;
        let mut done = 0;
        while done < self.len {
            let n = CHUNK.min(self.len - done);
            match self.map.populate_write(done as usize, n as usize) {
                Ok(()) => {}
                // No MADV_POPULATE_WRITE (before 5.14): pages fault in on first use instead.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                Err(e) => return Err(e),
            }
            done += n;
            progress(done, self.len);
        }
        // Mapped (or not possible here): `prepare_write` has nothing left to do.
        for c in self.populated.iter() {
            c.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Maps an existing file; the pool is its size rounded down to whole blocks. In tmpfs a
    /// background thread then maps the pool writable, so the writer rarely takes a page fault
    /// or waits to map a segment.
    pub fn open(path: impl AsRef<Path>) -> io::Result<MemoryPool> {
        let pool = MemoryPool::open_mapped(path.as_ref())?;
        if pool.persistence == Persistence::Tmpfs {
            pool.start_populating();
        }
        Ok(pool)
    }

    /// Maps the pool writable from a background thread, a chunk at a time, skipping what
    /// `prepare_write` already did; stopped when the pool is dropped.
    fn start_populating(&self) {
        let stop = Arc::new(AtomicBool::new(false));
        let (map, populated, len) = (self.map.clone(), self.populated.clone(), self.len);
        let stopped = stop.clone();
        let spawned = std::thread::Builder::new()
            .name(POPULATE_THREAD.into())
            .spawn(move || {
                for c in 0..populated.len() as u64 {
                    if stopped.load(Ordering::Relaxed) {
                        return;
                    }
                    if map_chunk(&map, &populated, len, c) == Some(false) {
                        // No MADV_POPULATE_WRITE, or no memory for it: pages fault in on use.
                        return;
                    }
                }
            });
        // Without the thread, `prepare_write` and page faults do the same work.
        if let Ok(handle) = spawned {
            *self.populator.lock().unwrap_or_else(|p| p.into_inner()) = Some((stop, handle));
        }
    }

    /// Stops the background mapping thread, if any, and waits for it.
    fn stop_populating(&self) {
        let running = self
            .populator
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((stop, handle)) = running {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
    }

    /// [`MemoryPool::open`] without the background mapping.
    fn open_mapped(path: &Path) -> io::Result<MemoryPool> {
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
            map: Arc::new(map),
            len,
            persistence,
            populated: chunks(len),
            populator: Mutex::new(None),
            #[cfg(test)]
            populate_calls: Default::default(),
        })
    }

    /// Anonymous memory of `len` bytes (whole blocks), gone when the process exits.
    pub fn anonymous(len: u64) -> io::Result<MemoryPool> {
        let len = len / BLOCK_SIZE * BLOCK_SIZE;
        Ok(MemoryPool {
            _file: None,
            map: Arc::new(SharedMapping::anonymous(len as usize)?),
            len,
            persistence: Persistence::Process,
            populated: chunks(len),
            populator: Mutex::new(None),
            #[cfg(test)]
            populate_calls: Default::default(),
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

    fn share_read_only(&self) -> Option<io::Result<std::fs::File>> {
        // Opened again through /proc read-only: a new description that cannot be mapped
        // writable, whoever holds it.
        use std::os::fd::AsRawFd;
        let file = self._file.as_ref()?;
        Some(
            OpenOptions::new()
                .read(true)
                .open(format!("/proc/self/fd/{}", file.as_raw_fd())),
        )
    }

    fn prepare_write(&self, offset: u64, len: u64) {
        // Only tmpfs: populating a disk file's mapping would read it in. Best effort: kernels
        // before 5.14 lack MADV_POPULATE_WRITE and fault the pages in on first use instead.
        if self.persistence != Persistence::Tmpfs
            || check_request(self, offset, len as usize).is_err()
        {
            return;
        }
        let first = offset / POPULATE_CHUNK;
        let end = (offset + len).div_ceil(POPULATE_CHUNK);
        for c in first..end {
            let _mapped = map_chunk(&self.map, &self.populated, self.len, c);
            #[cfg(test)]
            if _mapped.is_some() {
                self.populate_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Maps chunk `c` of a pool of `len` bytes writable unless its flag says it was: `None` when it
/// was, else whether mapping it worked.
fn map_chunk(map: &SharedMapping, populated: &[AtomicBool], len: u64, c: u64) -> Option<bool> {
    if populated[c as usize].swap(true, Ordering::Relaxed) {
        return None;
    }
    let start = c * POPULATE_CHUNK;
    let n = POPULATE_CHUNK.min(len - start);
    Some(map.populate_write(start as usize, n as usize).is_ok())
}

/// One "not yet mapped" flag per [`POPULATE_CHUNK`] of a pool of `len` bytes.
fn chunks(len: u64) -> Arc<[AtomicBool]> {
    (0..len.div_ceil(POPULATE_CHUNK))
        .map(|_| AtomicBool::new(false))
        .collect()
}

impl Drop for MemoryPool {
    fn drop(&mut self) {
        self.stop_populating();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_shm_pool_takes_no_page_fault_when_written() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let len = 8u64 << 20;
        let mut reported = Vec::new();
        let pool =
            MemoryPool::create_with_progress(dir.path().join("pool"), len, &mut |done, total| {
                reported.push((done, total))
            })
            .unwrap();
        assert_eq!(
            reported.last(),
            Some(&(len, len)),
            "progress ends at the pool's size"
        );
        let block = [7u8; BLOCK_SIZE as usize];
        let before = crate::sys::proc::thread_minor_faults().unwrap();
        for i in 0..len / BLOCK_SIZE {
            pool.write_at(i * BLOCK_SIZE, &block).unwrap();
        }
        let faults = crate::sys::proc::thread_minor_faults().unwrap() - before;
        // Unpopulated, each of the 2,048 pages faults once on its first store.
        assert!(
            faults < 64,
            "{faults} page faults writing 2,048 pages of a new pool"
        );
        // A pool mapped again without the background thread: the same stores fault (the check
        // can tell).
        drop(pool);
        let pool = MemoryPool::open_mapped(&dir.path().join("pool")).unwrap();
        let before = crate::sys::proc::thread_minor_faults().unwrap();
        for i in 0..len / BLOCK_SIZE {
            pool.write_at(i * BLOCK_SIZE, &block).unwrap();
        }
        let faults = crate::sys::proc::thread_minor_faults().unwrap() - before;
        assert!(
            faults >= 1024,
            "{faults} page faults writing a reopened pool"
        );
    }

    #[test]
    fn prepare_write_maps_each_piece_of_a_pool_once() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let len = 8u64 << 20;
        let calls = |p: &MemoryPool| p.populate_calls.load(Ordering::Relaxed);
        // A new pool is mapped whole when made: nothing left to prepare.
        let pool = MemoryPool::create(dir.path().join("pool"), len).unwrap();
        pool.prepare_write(0, len);
        assert_eq!(calls(&pool), 0);
        drop(pool);
        // Mapped again (no background thread): the first preparation of a range maps its
        // pieces, later ones nothing, and the stores after it take no page faults.
        let pool = MemoryPool::open_mapped(&dir.path().join("pool")).unwrap();
        pool.prepare_write(2 << 20, 2 << 20);
        assert_eq!(calls(&pool), 2);
        pool.prepare_write(2 << 20, 2 << 20);
        pool.prepare_write(3 << 20, 1 << 20);
        assert_eq!(calls(&pool), 2);
        pool.prepare_write((3 << 20) + 4096, 1 << 20);
        assert_eq!(
            calls(&pool),
            3,
            "a range reaching into the next piece maps that one"
        );
        let block = [7u8; BLOCK_SIZE as usize];
        let before = crate::sys::proc::thread_minor_faults().unwrap();
        for i in 0..(2 << 20) / BLOCK_SIZE {
            pool.write_at((2 << 20) + i * BLOCK_SIZE, &block).unwrap();
        }
        let faults = crate::sys::proc::thread_minor_faults().unwrap() - before;
        assert!(faults < 64, "{faults} page faults in a prepared range");
        // Out of range: ignored.
        pool.prepare_write(len, 4096);
        assert_eq!(calls(&pool), 3);
    }

    #[test]
    fn a_reopened_shm_pool_is_mapped_in_the_background() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let len = 8u64 << 20;
        drop(MemoryPool::create(dir.path().join("pool"), len).unwrap());
        let pool = MemoryPool::open(dir.path().join("pool")).unwrap();
        // Wait for the thread to finish (without stopping it).
        let (_, handle) = pool
            .populator
            .lock()
            .unwrap()
            .take()
            .expect("a thread runs");
        handle.join().unwrap();
        assert!(pool.populated.iter().all(|c| c.load(Ordering::Relaxed)));
        let block = [7u8; BLOCK_SIZE as usize];
        let before = crate::sys::proc::thread_minor_faults().unwrap();
        for i in 0..len / BLOCK_SIZE {
            pool.write_at(i * BLOCK_SIZE, &block).unwrap();
        }
        let faults = crate::sys::proc::thread_minor_faults().unwrap() - before;
        assert!(faults < 64, "{faults} page faults writing a mapped pool");
        // Dropping a pool whose thread still runs stops it.
        drop(pool);
        let pool = MemoryPool::open(dir.path().join("pool")).unwrap();
        drop(pool);
    }

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
