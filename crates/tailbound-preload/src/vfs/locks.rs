//! Record locks (`fcntl`, `lockf`, OFD locks) and `flock` on a description, kept by the pool's
//! lock table. A range relative to the end of the file asks the caller for the size (`size`),
//! which a shared mapping's backing may hold rather than the pool.

use tailbound::serve::protocol::LockArgs;
use tailbound::tbfs::locks::{self, Kind, LockTable, Owner, Request, Space};

use crate::real;
use crate::vfs::ofd::{Ofd, VfsResult};

impl Ofd {
    fn table(&self) -> VfsResult<&LockTable> {
        self.fs.locks().ok_or(libc::EIO)
    }

    /// Converts an `flock` record's range (relative to `whence`) to `start..end`.
    fn range(
        &self,
        whence: i32,
        start: i64,
        len: i64,
        size: impl FnOnce() -> VfsResult<u64>,
    ) -> VfsResult<(u64, u64)> {
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => i64::try_from(self.offset()?).map_err(|_| libc::EOVERFLOW)?,
            libc::SEEK_END => size()? as i64,
            _ => return Err(libc::EINVAL),
        };
        let s = base.checked_add(start).ok_or(libc::EOVERFLOW)?;
        let (s, e) = if len > 0 {
            (s, s.checked_add(len).ok_or(libc::EOVERFLOW)?)
        } else if len < 0 {
            (s + len, s)
        } else {
            (s, i64::MAX)
        };
        if s < 0 {
            return Err(libc::EINVAL);
        }
        let e = if e == i64::MAX { u64::MAX } else { e as u64 };
        Ok((s as u64, e))
    }

    /// F_SETLK/F_SETLKW/F_OFD_SETLK/F_OFD_SETLKW.
    #[allow(clippy::too_many_arguments)]
    pub fn set_lock(
        &self,
        ofd_lock: bool,
        ltype: i32,
        whence: i32,
        start: i64,
        len: i64,
        wait: bool,
        size: impl FnOnce() -> VfsResult<u64>,
    ) -> VfsResult<()> {
        let kind = match ltype {
            libc::F_RDLCK => {
                if self.acc == libc::O_WRONLY || self.acc == libc::O_PATH {
                    return Err(libc::EBADF);
                }
                Kind::Read
            }
            libc::F_WRLCK => {
                if self.acc == libc::O_RDONLY || self.acc == libc::O_PATH {
                    return Err(libc::EBADF);
                }
                Kind::Write
            }
            libc::F_UNLCK => Kind::Unlock,
            _ => return Err(libc::EINVAL),
        };
        let (s, e) = self.range(whence, start, len, size)?;
        if let Some(f) = self.file.remote() {
            let args = LockArgs {
                space: Space::Record,
                kind,
                start: s,
                end: e,
                per_handle: ofd_lock,
            };
            return f.lock(args, wait).map_err(|e| e.errno());
        }
        let owner = if ofd_lock {
            Owner::Description(self.id)
        } else {
            Owner::Process
        };
        self.table()?
            .set(
                self.ino,
                &Request {
                    owner,
                    space: Space::Record,
                    kind,
                    start: s,
                    end: e,
                },
                wait,
            )
            .map_err(locks::LockError::errno)
    }

    /// F_GETLK/F_OFD_GETLK: `None` if the lock could be placed, else the conflicting lock's
    /// type, start, length and pid (-1 for a description's lock).
    pub fn get_lock(
        &self,
        ofd_lock: bool,
        ltype: i32,
        whence: i32,
        start: i64,
        len: i64,
        size: impl FnOnce() -> VfsResult<u64>,
    ) -> VfsResult<Option<(i32, i64, i64, i32)>> {
        let kind = match ltype {
            libc::F_RDLCK => Kind::Read,
            libc::F_WRLCK => Kind::Write,
            _ => return Err(libc::EINVAL),
        };
        let (s, e) = self.range(whence, start, len, size)?;
        let holder = |write: bool, hs: u64, he: u64, pid: i32| {
            let len = if he == u64::MAX { 0 } else { (he - hs) as i64 };
            let t = if write { libc::F_WRLCK } else { libc::F_RDLCK };
            (t, hs as i64, len, pid)
        };
        if let Some(f) = self.file.remote() {
            let args = LockArgs {
                space: Space::Record,
                kind,
                start: s,
                end: e,
                per_handle: ofd_lock,
            };
            let h = f.test_lock(args).map_err(|e| e.errno())?;
            return Ok(h.map(|h| holder(h.write, h.start, h.end, h.pid)));
        }
        let owner = if ofd_lock {
            Owner::Description(self.id)
        } else {
            Owner::Process
        };
        Ok(self
            .table()?
            .test(
                self.ino,
                &Request {
                    owner,
                    space: Space::Record,
                    kind,
                    start: s,
                    end: e,
                },
            )
            .map(|h| {
                let pid = match h.owner {
                    Owner::Process => real::pid(),
                    Owner::Description(_) | Owner::Client { .. } => -1,
                };
                holder(h.write, h.start, h.end, pid)
            }))
    }

    /// Drops the process's POSIX locks on the file (a close of any of its descriptors does),
    /// for a served description; a pool opened here does it in its own table.
    pub fn unlock_process_locks(&self) {
        if let Some(f) = self.file.remote() {
            let args = LockArgs {
                space: Space::Record,
                kind: Kind::Unlock,
                start: 0,
                end: u64::MAX,
                per_handle: false,
            };
            // A close does not fail for this: a lost server shows in the next call.
            let _ = f.lock(args, false);
        }
    }

    pub fn flock(&self, op: i32) -> VfsResult<()> {
        let wait = op & libc::LOCK_NB == 0;
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => Kind::Read,
            libc::LOCK_EX => Kind::Write,
            libc::LOCK_UN => Kind::Unlock,
            _ => return Err(libc::EINVAL),
        };
        let would_block = |e: i32| {
            if e == libc::EAGAIN {
                libc::EWOULDBLOCK
            } else {
                e
            }
        };
        if let Some(f) = self.file.remote() {
            let args = LockArgs {
                space: Space::Flock,
                kind,
                start: 0,
                end: u64::MAX,
                per_handle: true,
            };
            return f.lock(args, wait).map_err(|e| would_block(e.errno()));
        }
        self.table()?
            .set(
                self.ino,
                &Request {
                    owner: Owner::Description(self.id),
                    space: Space::Flock,
                    kind,
                    start: 0,
                    end: u64::MAX,
                },
                wait,
            )
            .map_err(|e| {
                if e == locks::LockError::WouldBlock {
                    libc::EWOULDBLOCK
                } else {
                    e.errno()
                }
            })
    }
}
