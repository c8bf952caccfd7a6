//! The values the shim's operations take and return: a path's location, an open file description
//! and what `stat` and `readdir` report. Names only `backend` of [`crate::vfs`].

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tailbound::tbfs::locks::Owner;

use crate::vfs::backend::{Handle, Pool};

/// `Err(errno)`.
pub type VfsResult<T> = Result<T, i32>;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a path leads.
pub enum Where {
    /// Not under a mount: the kernel's.
    Kernel,
    /// Under mount number `mount`, at `rel` inside the pool (`""` is its root); `abs` is the full path.
    Lib(LibPath),
    /// Under a mount this process may not use (a forked child): fail with this errno.
    Refused(i32),
}

/// A library path: mount number `mount`, `rel` inside its pool, `abs` the whole path.
#[derive(Clone, Debug)]
pub struct LibPath {
    pub mount: usize,
    pub rel: String,
    pub abs: String,
}

/// An open file description.
pub struct Ofd {
    pub id: u64,
    pub mount: usize,
    pub ino: u64,
    pub abs: String,
    pub rel: String,
    pub file: Handle,
    pub dir: bool,
    /// O_RDONLY, O_WRONLY, O_RDWR or O_PATH.
    pub acc: i32,
    /// The status flags F_GETFL reports (O_APPEND, O_NONBLOCK, ...), without the access mode.
    pub status: AtomicI32,
    /// The offset, while it is this process's (see [`Ofd::offset_is_servers`]).
    pub pos: Mutex<u64>,
    /// A served description's offset is kept by the server (`pos` is unused): set once the
    /// description may be shared with another process, and never cleared.
    pub offset_shared: AtomicBool,
    pub listing: Mutex<Option<Vec<Ent>>>,
    pub(super) fs: Arc<Pool>,
}

impl Drop for Ofd {
    fn drop(&mut self) {
        // A server's description lets its own locks go when its last reference closes.
        if let Some(locks) = self.fs.locks() {
            locks.release_everywhere(Owner::Description(self.id));
        }
    }
}

impl Ofd {
    /// Whether reads, writes and seeks must use the server's offset. A description opened by
    /// this process and never handed to another keeps its offset here, so its reads and
    /// writes go as positioned calls (a read then may be answered under a lease, and a seek
    /// costs no crossing); once it may be shared (fork, exec, spawn) the server's offset is
    /// the only one every sharer sees.
    pub fn offset_is_servers(&self) -> bool {
        self.file.remote().is_some() && self.offset_shared.load(Ordering::Acquire)
    }

    /// Before the description is handed to another process: the offset kept here becomes the
    /// server's, under `pos`'s lock so no read or write of this process's moves it meanwhile.
    /// A call that takes `pos` after this finds the offset the server's.
    pub fn share_offset(&self) -> VfsResult<()> {
        // A directory's position is its listing's, kept here whoever shares it.
        let Some(f) = self.file.remote().filter(|_| !self.dir) else {
            return Ok(());
        };
        let pos = lock(&self.pos);
        if self.offset_shared.load(Ordering::Acquire) {
            return Ok(());
        }
        let at = i64::try_from(*pos).map_err(|_| libc::EOVERFLOW)?;
        f.seek(at, 0).map_err(|e| e.errno())?;
        self.offset_shared.store(true, Ordering::Release);
        Ok(())
    }

    /// The offset now: the server's for a shared description, else the one kept here.
    pub fn offset(&self) -> VfsResult<u64> {
        let pos = lock(&self.pos);
        match self.file.remote() {
            Some(f) if self.offset_shared.load(Ordering::Acquire) => {
                drop(pos);
                f.seek(0, 1).map_err(|e| e.errno())
            }
            _ => Ok(*pos),
        }
    }
}

/// One directory entry as `readdir` returns it.
#[derive(Clone, Debug)]
pub struct Ent {
    pub ino: u64,
    pub name: String,
    pub dtype: u8,
}

/// What `stat` reports, in the kernel's terms.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub dev: u64,
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks512: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// A device's number: (major, minor).
    pub rdev: (u32, u32),
}

/// The (major, minor) of a device number a pool keeps.
pub fn split_dev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xf_ff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xf_ff00),
    )
}

/// Opening a special file: a socket cannot be opened (`ENXIO`), as the kernel answers; FIFOs
/// and devices open their kernel ends (`vfs::special`).
pub fn may_open(kind: tailbound::tbfs::FileKind, flags: i32) -> VfsResult<()> {
    match kind {
        tailbound::tbfs::FileKind::Socket if flags & libc::O_PATH == 0 => Err(libc::ENXIO),
        _ => Ok(()),
    }
}
