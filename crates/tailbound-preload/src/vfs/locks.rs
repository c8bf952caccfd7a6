//! Record locks (`fcntl`, `lockf`, OFD locks) and `flock` on a description, kept by the pool's
//! lock table. A range relative to the end of the file asks the caller for the size (`size`),
//! which a shared mapping's backing may hold rather than the pool.

use tailbound::tbfs::locks::{self, Kind, Owner, Request, Space};

use crate::real;
use crate::vfs::ofd::{lock, Ofd, VfsResult};

impl Ofd {
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
            libc::SEEK_CUR => *lock(&self.pos) as i64,
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
        let owner = if ofd_lock {
            Owner::Description(self.id)
        } else {
            Owner::Process
        };
        self.fs
            .locks()
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
        let owner = if ofd_lock {
            Owner::Description(self.id)
        } else {
            Owner::Process
        };
        Ok(self
            .fs
            .locks()
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
                let len = if h.end == u64::MAX {
                    0
                } else {
                    (h.end - h.start) as i64
                };
                let pid = match h.owner {
                    Owner::Process => real::pid(),
                    Owner::Description(_) | Owner::Client { .. } => -1,
                };
                (
                    if h.write {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    },
                    h.start as i64,
                    len,
                    pid,
                )
            }))
    }

    pub fn flock(&self, op: i32) -> VfsResult<()> {
        let wait = op & libc::LOCK_NB == 0;
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => Kind::Read,
            libc::LOCK_EX => Kind::Write,
            libc::LOCK_UN => Kind::Unlock,
            _ => return Err(libc::EINVAL),
        };
        self.fs
            .locks()
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
