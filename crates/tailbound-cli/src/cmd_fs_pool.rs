//! The pool a `tailbound fs` command works on: opened in this process, or reached through the
//! pool's server (`tailbound serve`) when one answers on its socket. Both have the same calls
//! and the same errors.

use tailbound::serve::{Client, RemoteFile, RemoteView};
use tailbound::tbfs::{
    self, CheckpointInfo, DirEntry, File, Fs, GcReport, OpenFlags, Snapshot, SpaceReport, Stat,
    StatVfs,
};

pub enum Pool {
    Local(Fs),
    Served(Client),
}

pub enum PoolFile {
    Local(File),
    Served(RemoteFile),
}

pub enum PoolView {
    Local(Box<Snapshot>),
    Served(RemoteView),
}

macro_rules! both {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            Pool::Local($p) => $e,
            Pool::Served($p) => $e,
        }
    };
}

impl Pool {
    pub fn stat(&self, path: &str) -> tbfs::Result<Stat> {
        both!(self, p => p.stat(path))
    }
    pub fn readdir(&self, path: &str) -> tbfs::Result<Vec<DirEntry>> {
        both!(self, p => p.readdir(path))
    }
    pub fn mkdir(&self, path: &str, mode: u32) -> tbfs::Result<()> {
        both!(self, p => p.mkdir(path, mode))
    }
    pub fn rmdir(&self, path: &str) -> tbfs::Result<()> {
        both!(self, p => p.rmdir(path))
    }
    pub fn unlink(&self, path: &str) -> tbfs::Result<()> {
        both!(self, p => p.unlink(path))
    }
    pub fn rename(&self, from: &str, to: &str) -> tbfs::Result<()> {
        both!(self, p => p.rename(from, to))
    }
    pub fn statvfs(&self) -> tbfs::Result<StatVfs> {
        both!(self, p => p.statvfs())
    }
    pub fn space(&self) -> tbfs::Result<SpaceReport> {
        both!(self, p => p.space())
    }
    pub fn checkpoints(&self) -> tbfs::Result<Vec<CheckpointInfo>> {
        both!(self, p => p.checkpoints())
    }
    pub fn snapshot(&self, name: Option<&str>) -> tbfs::Result<u64> {
        both!(self, p => p.snapshot(name))
    }
    pub fn set_snapshot(&self, number: u64, keep: bool) -> tbfs::Result<()> {
        both!(self, p => p.set_snapshot(number, keep))
    }
    pub fn protection_period(&self) -> tbfs::Result<std::time::Duration> {
        match self {
            Pool::Local(p) => Ok(p.protection_period()),
            Pool::Served(p) => p.protection_period(),
        }
    }
    pub fn gc(&self, target_free: f64) -> tbfs::Result<GcReport> {
        both!(self, p => p.gc(target_free))
    }
    pub fn open_file(&self, path: &str, flags: OpenFlags) -> tbfs::Result<PoolFile> {
        Ok(match self {
            Pool::Local(p) => PoolFile::Local(p.open_file(path, flags)?),
            Pool::Served(p) => PoolFile::Served(p.open_file(path, flags)?),
        })
    }
    pub fn at(&self, number: u64) -> tbfs::Result<PoolView> {
        Ok(match self {
            Pool::Local(p) => PoolView::Local(Box::new(p.at(number)?)),
            Pool::Served(p) => PoolView::Served(p.at(number)?),
        })
    }
    /// Syncs and closes a pool opened here; asks the server of a served pool to sync, so a
    /// command's changes are durable when it returns either way.
    pub fn close(self) -> tbfs::Result<()> {
        match self {
            Pool::Local(p) => p.close(),
            Pool::Served(p) => p.sync(),
        }
    }
}

impl PoolFile {
    pub fn pread(&self, buf: &mut [u8], offset: u64) -> tbfs::Result<usize> {
        match self {
            PoolFile::Local(f) => f.pread(buf, offset),
            PoolFile::Served(f) => f.pread(buf, offset),
        }
    }
    pub fn pwrite(&self, buf: &[u8], offset: u64) -> tbfs::Result<usize> {
        match self {
            PoolFile::Local(f) => f.pwrite(buf, offset),
            PoolFile::Served(f) => f.pwrite(buf, offset),
        }
    }
    pub fn set_len(&self, len: u64) -> tbfs::Result<()> {
        match self {
            PoolFile::Local(f) => f.set_len(len),
            PoolFile::Served(f) => f.set_len(len),
        }
    }
}

impl PoolView {
    pub fn stat(&self, path: &str) -> tbfs::Result<Stat> {
        match self {
            PoolView::Local(v) => v.stat(path),
            PoolView::Served(v) => v.stat(path),
        }
    }
    pub fn readdir(&self, path: &str) -> tbfs::Result<Vec<DirEntry>> {
        match self {
            PoolView::Local(v) => v.readdir(path),
            PoolView::Served(v) => v.readdir(path),
        }
    }
    pub fn pread(&self, path: &str, buf: &mut [u8], offset: u64) -> tbfs::Result<usize> {
        match self {
            PoolView::Local(v) => v.pread(path, buf, offset),
            PoolView::Served(v) => v.pread(path, buf, offset),
        }
    }
}
