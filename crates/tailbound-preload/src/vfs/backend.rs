//! Where a mount's calls go: the pool opened in this process ([`Pool::Local`], the private mode
//! and the fastest) or the pool's server ([`Pool::Remote`], shared with every other process).
//! [`Pool`] and [`Handle`] answer the calls the rest of [`crate::vfs`] makes with the same
//! results and errors either way, so the choice is made here and nowhere else.
//!
//! A leaf of [`crate::vfs`]: names no other file of it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, RwLock};

use tailbound::serve::{Client, RemoteFile};
use tailbound::tbfs::locks::LockTable;
use tailbound::tbfs::{self, DirEntry, File, Fs, OpenFlags, Result, SetAttr, Stat, StatVfs};

/// A mount's pool.
pub enum Pool {
    Local(Fs),
    Remote(Remote),
}

/// A session with a pool's server. A forked child replaces the session with its own (the
/// parent's socket is never used by two processes).
pub struct Remote {
    socket: PathBuf,
    client: RwLock<Client>,
    /// The session's socket descriptor (-1: none), which the program must not close.
    fd: AtomicI32,
}

impl Remote {
    pub fn connect(socket: &Path) -> Result<Remote> {
        let client = Client::connect(socket)?;
        Ok(Remote {
            socket: socket.to_path_buf(),
            fd: AtomicI32::new(client.socket_fd().unwrap_or(-1)),
            client: RwLock::new(client),
        })
    }

    /// The session's socket descriptor, if it has one.
    pub fn fd(&self) -> Option<i32> {
        Some(self.fd.load(Ordering::Relaxed)).filter(|&fd| fd >= 0)
    }

    pub fn client(&self) -> Client {
        self.client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A new session for this process (a forked child), replacing the inherited one.
    pub fn reconnect(&self) -> Result<Client> {
        let c = Client::connect(&self.socket)?;
        self.fd
            .store(c.socket_fd().unwrap_or(-1), Ordering::Relaxed);
        let old = std::mem::replace(
            &mut *self.client.write().unwrap_or_else(|p| p.into_inner()),
            c.clone(),
        );
        // The parent's connection: this process's copy of its socket is closed, which says
        // nothing to the server while the parent keeps its own.
        old.abandon();
        Ok(c)
    }
}

/// An open file of a [`Pool`].
pub enum Handle {
    Local(File),
    Remote(RemoteFile),
}

macro_rules! both {
    ($self:expr, $v:ident => $e:expr) => {
        match $self {
            Pool::Local($v) => $e,
            Pool::Remote(r) => {
                let $v = r.client();
                $e
            }
        }
    };
}

impl Pool {
    /// The pool's server's socket answers (and `private` is not asked for): a client of it;
    /// else the pool opened here by `open_local`.
    pub fn open(
        pool: &Path,
        private: bool,
        open_local: impl FnOnce() -> std::result::Result<Fs, String>,
    ) -> std::result::Result<Arc<Pool>, String> {
        if !private {
            let socket = tailbound::serve::socket_path(pool);
            if socket.exists() {
                if let Ok(r) = Remote::connect(&socket) {
                    return Ok(Arc::new(Pool::Remote(r)));
                }
            }
        }
        open_local().map(|fs| Arc::new(Pool::Local(fs)))
    }

    pub fn local(&self) -> Option<&Fs> {
        match self {
            Pool::Local(fs) => Some(fs),
            Pool::Remote(_) => None,
        }
    }

    pub fn remote(&self) -> Option<&Remote> {
        match self {
            Pool::Local(_) => None,
            Pool::Remote(r) => Some(r),
        }
    }

    /// The lock table, for a pool opened here (a server keeps its own).
    pub fn locks(&self) -> Option<&LockTable> {
        self.local().map(Fs::locks)
    }

    pub fn stat(&self, path: &str) -> Result<Stat> {
        both!(self, fs => fs.stat(path))
    }
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        both!(self, fs => fs.lstat(path))
    }
    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<Handle> {
        match self {
            Pool::Local(fs) => fs.open_file(path, flags).map(Handle::Local),
            Pool::Remote(r) => r.client().open_file(path, flags).map(Handle::Remote),
        }
    }
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        both!(self, fs => fs.readdir(path))
    }
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        both!(self, fs => fs.mkdir(path, mode))
    }
    pub fn rmdir(&self, path: &str) -> Result<()> {
        both!(self, fs => fs.rmdir(path))
    }
    pub fn unlink(&self, path: &str) -> Result<()> {
        both!(self, fs => fs.unlink(path))
    }
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        both!(self, fs => fs.rename(from, to))
    }
    pub fn link(&self, from: &str, to: &str) -> Result<()> {
        both!(self, fs => fs.link(from, to))
    }
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        both!(self, fs => fs.symlink(target, path))
    }
    /// `mknod`; `mode` carries the type bits. A pool opened here gives the node to this
    /// process's effective user, as the server gives it to its client's.
    pub fn mknod(&self, path: &str, mode: u32, rdev: u32) -> Result<()> {
        match self {
            Pool::Local(fs) => {
                let owner = tailbound::sys::proc::effective_ids();
                tailbound::serve::mknod_path(fs, path, mode, rdev, owner)
            }
            Pool::Remote(r) => r.client().mknod(path, mode, rdev),
        }
    }
    pub fn readlink(&self, path: &str) -> Result<String> {
        both!(self, fs => fs.readlink(path))
    }
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        both!(self, fs => fs.truncate(path, len))
    }
    pub fn set_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        both!(self, fs => fs.set_attr(path, attr))
    }
    pub fn lset_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        both!(self, fs => fs.lset_attr(path, attr))
    }
    pub fn statvfs(&self) -> Result<StatVfs> {
        both!(self, fs => fs.statvfs())
    }
    pub fn sync(&self) -> Result<()> {
        both!(self, fs => fs.sync())
    }
}

impl Handle {
    pub fn ino(&self) -> u64 {
        match self {
            Handle::Local(f) => f.ino(),
            Handle::Remote(f) => f.ino(),
        }
    }
    pub fn remote(&self) -> Option<&RemoteFile> {
        match self {
            Handle::Local(_) => None,
            Handle::Remote(f) => Some(f),
        }
    }
    pub fn pread(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        match self {
            Handle::Local(f) => f.pread(buf, off),
            Handle::Remote(f) => f.pread(buf, off),
        }
    }
    pub fn pwrite(&self, buf: &[u8], off: u64) -> Result<usize> {
        self.pwrite_as(buf, off, false)
    }
    /// `direct`: the descriptor is `O_DIRECT` (the server's pool decides that for a client).
    pub fn pwrite_as(&self, buf: &[u8], off: u64, direct: bool) -> Result<usize> {
        match self {
            Handle::Local(f) => f.pwrite_as(buf, off, direct),
            Handle::Remote(f) => f.pwrite(buf, off),
        }
    }
    /// Appends; returns the offset after the data.
    pub fn append_as(&self, buf: &[u8], direct: bool) -> Result<u64> {
        match self {
            Handle::Local(f) => f.append_as(buf, direct),
            Handle::Remote(f) => {
                let mut end = 0;
                for piece in buf.chunks(tailbound::serve::IO_MAX) {
                    end = f.append(piece)?;
                }
                Ok(end)
            }
        }
    }
    pub fn stat(&self) -> Result<Stat> {
        match self {
            Handle::Local(f) => f.stat(),
            Handle::Remote(f) => f.stat(),
        }
    }
    /// The attributes as the open found them, for the open's own checks: a server's open
    /// answers with them (no second trip).
    pub fn stat_at_open(&self) -> Result<Stat> {
        match self {
            Handle::Local(f) => f.stat(),
            Handle::Remote(f) => f.stat_at_open(),
        }
    }
    pub fn set_len(&self, len: u64) -> Result<()> {
        match self {
            Handle::Local(f) => f.set_len(len),
            Handle::Remote(f) => f.set_len(len),
        }
    }
    pub fn fsync(&self) -> Result<()> {
        match self {
            Handle::Local(f) => f.fsync(),
            Handle::Remote(f) => f.fsync(),
        }
    }
    pub fn allocate(&self, off: u64, len: u64) -> Result<()> {
        match self {
            Handle::Local(f) => f.allocate(off, len),
            Handle::Remote(f) => f.allocate(off, len),
        }
    }
    pub fn set_attr(&self, attr: &tbfs::SetAttr) -> Result<()> {
        match self {
            Handle::Local(f) => f.set_attr(attr).map(|_| ()),
            Handle::Remote(f) => f.set_attr(attr),
        }
    }
}
