//! The values the shim's operations take and return: a path's location, an open file description
//! and what `stat` and `readdir` report. Names only `backend` of [`crate::vfs`].

use std::sync::atomic::AtomicI32;
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
    pub pos: Mutex<u64>,
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
