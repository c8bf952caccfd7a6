//! Storage backends for the tbfs engine: one [`Device`] trait and three implementations.
//!
//! - [`memory::MemoryPool`]: a shared mapping of a file (in `/dev/shm`, or on a DAX file system with
//!   `MAP_SYNC` where available); `flush` is a no-op, an `msync`, or nothing beyond the mapping's own
//!   persistence.
//! - [`file::FileDevice`]: a regular file or block device opened with `O_DIRECT`, written through
//!   io_uring with a synchronous `pwrite` fallback; `flush` is `fdatasync`.
//! - [`sim::SimDevice`]: a simulated device for tests, whose writes stay volatile until a flush and
//!   which can crash (applying, dropping or tearing each unflushed write) and inject faults.
//!
//! This module owns moving bytes to and from storage and persistence points; it knows nothing of the
//! on-storage format. All offsets and lengths are multiples of [`BLOCK_SIZE`].

use std::fmt;
use std::io;

pub mod file;
pub mod memory;
pub mod sim;

/// The unit of every read and write the engine issues, in bytes.
pub const BLOCK_SIZE: u64 = 4096;

/// The granularity at which a write can be torn by a crash, in bytes.
pub const SECTOR_SIZE: u64 = 512;

/// A place the engine keeps a pool: a byte array of fixed length with explicit persistence points.
///
/// Contract: `read_at` returns the latest bytes written (flushed or not); `write_at` returns when the
/// device holds the data (possibly in a volatile cache that a power loss may lose); after `flush`
/// returns, every write that completed before the call is durable. Offsets and lengths are multiples
/// of [`BLOCK_SIZE`]; buffers may have any alignment.
/// A device is `Any`, so a holder of `dyn Device` can find what is behind it (a pool server looks
/// for the scheduler in front of its pool's device).
#[allow(clippy::len_without_is_empty)] // a device is never empty
pub trait Device: Send + Sync + fmt::Debug + std::any::Any {
    /// What kind of backend this is, for messages: `memory`, `file`, `sim`.
    fn kind(&self) -> &'static str;
    /// The usable size in bytes, a multiple of [`BLOCK_SIZE`].
    fn len(&self) -> u64;
    /// Reads `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at `offset`; returns once the device holds it (not necessarily durably).
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable (device cache flush, `fdatasync`, `msync`, or nothing).
    fn flush(&self) -> io::Result<()>;
    /// Writes `buf` at `offset` and then flushes. Backends that can issue both at once (io_uring
    /// linked requests) override this.
    fn write_and_flush(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)?;
        self.flush()
    }
    /// Whether a write is a plain memory copy, so that writing a log block by block costs no more
    /// than one large request. The engine then writes each block in place as it is added to a log
    /// instead of staging the log in a buffer (one copy less per block).
    fn writes_are_copies(&self) -> bool {
        false
    }
    /// A hint that `offset..offset + len` will be written soon: a mapped backend maps its pages
    /// writable now (on tmpfs that also clears them), in one call instead of a page fault per
    /// page on the writer's path. Changes no contents; errors are ignored.
    fn prepare_write(&self, _offset: u64, _len: u64) {}
    /// Whether requests are charged to a tenant and priority (a scheduler in front of the
    /// device, [`crate::sched::SchedDevice`]). Only then does a writer note whose I/O its
    /// buffered data is, which costs two system calls (`ioprio_get`, `getpriority`) per write.
    fn charged(&self) -> bool {
        false
    }
    /// A read-only descriptor of the storage itself, for another process to map and read
    /// blocks from (`serve`'s direct reads of a memory pool): the byte at device offset `o` is
    /// the byte at offset `o` of the descriptor. `None` where that is not how it is stored.
    fn share_read_only(&self) -> Option<io::Result<std::fs::File>> {
        None
    }
    /// Starts writing `buf` at `offset`; [`PendingWrite::wait`] returns once the device holds it.
    /// A backend that queues requests (`sched`) returns at once, so a caller can have several
    /// in flight; the others write before returning.
    fn start_write(&self, offset: u64, buf: Vec<u8>) -> PendingWrite {
        PendingWrite::done(self.write_at(offset, &buf))
    }
    /// The calling thread is about to wait for shared work another thread holds (a lock of
    /// the file system's) until the returned guard is dropped. A scheduler in front of the
    /// device ([`crate::sched::SchedDevice`]) keeps the thread's share of the device for it
    /// meanwhile rather than idle the device for its next request; others do nothing.
    fn wait_for_shared_work(&self) -> SharedWait {
        SharedWait::none()
    }
}

/// A wait for shared work ([`Device::wait_for_shared_work`]); ends when dropped.
pub struct SharedWait {
    _end: Option<Box<dyn Send>>,
}

impl SharedWait {
    /// A wait nothing follows.
    pub fn none() -> SharedWait {
        SharedWait { _end: None }
    }

    /// A wait that ends when `guard` is dropped.
    pub fn new(guard: impl Send + 'static) -> SharedWait {
        SharedWait {
            _end: Some(Box::new(guard)),
        }
    }
}

/// A write begun with [`Device::start_write`]. Dropping it without [`wait`](Self::wait) leaves
/// the write to complete on its own, its result unseen.
pub struct PendingWrite(Box<dyn FnOnce() -> io::Result<()> + Send>);

impl PendingWrite {
    /// A write that already completed with `result`.
    pub fn done(result: io::Result<()>) -> PendingWrite {
        PendingWrite(Box::new(move || result))
    }

    /// A write whose completion `wait` collects.
    pub fn new(wait: impl FnOnce() -> io::Result<()> + Send + 'static) -> PendingWrite {
        PendingWrite(Box::new(wait))
    }

    /// Blocks until the device holds the data; the write's result.
    pub fn wait(self) -> io::Result<()> {
        (self.0)()
    }
}

impl fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingWrite")
    }
}

/// Checks the alignment contract of [`Device`] for one request; backends call this first.
pub fn check_request(dev: &dyn Device, offset: u64, len: usize) -> io::Result<()> {
    let len = len as u64;
    if !offset.is_multiple_of(BLOCK_SIZE) || !len.is_multiple_of(BLOCK_SIZE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} device: request at {offset}+{len} is not {BLOCK_SIZE}-byte aligned",
                dev.kind()
            ),
        ));
    }
    if offset.checked_add(len).is_none_or(|end| end > dev.len()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} device: request at {offset}+{len} is past its end ({})",
                dev.kind(),
                dev.len()
            ),
        ));
    }
    Ok(())
}

/// How long opening a pool waits for its lock before saying another process has it.
pub const POOL_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the pool's exclusive lock (`flock`), held as long as `file` stays open: a pool belongs to
/// one process at a time, and a second opener gets a clear error instead of a corrupted pool.
pub fn lock_pool(file: &std::fs::File, path: &std::path::Path) -> io::Result<()> {
    // A killed owner's lock can outlive it briefly: the kernel tears its io_uring down after the
    // process is gone, and the ring holds the file until then. So wait a little before refusing.
    let deadline = std::time::Instant::now() + POOL_LOCK_WAIT;
    let mut held = crate::sys::file::try_lock_exclusive(file);
    while matches!(held, Ok(false)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        held = crate::sys::file::try_lock_exclusive(file);
    }
    match held {
        Ok(true) => Ok(()),
        Ok(false) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "{}: pool is in use by another process (it holds the pool lock)",
                path.display()
            ),
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("{}: taking the pool lock: {e}", path.display()),
        )),
    }
}
