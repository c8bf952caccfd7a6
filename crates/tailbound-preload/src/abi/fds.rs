//! Calls on a descriptor as such: `close` (and `close_range`, `closefrom`), `dup`, `fcntl`,
//! `ioctl`, locks (`flock`, `lockf`), sync, space (`fallocate`, `posix_fadvise`) and
//! `ftruncate`.

use libc::{c_int, c_uint, c_ulong, c_void, off_t};

use crate::abi::base::{count, eio_and, eio_number, fail, int, lib_fd, num, shim};
use crate::abi::streams::{rebind_std_stream, restore_std_stream};
use crate::guard::enter;
use crate::real::{self, errno, set_errno};
use crate::vfs::Ofd;

hooks! {
    fn close(fd: c_int) -> c_int => {
        if let Some(g) = enter() {
            if let Some(r) = shim().close(fd) {
                count("close", true);
                drop(g);
                return int(r);
            }
            count("close", false);
            if real::is_parked(fd) {
                // Closed, as the program sees it: the number stays reserved for a library open.
                return fail(libc::EBADF);
            }
        }
        pass!()
    }

    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int => {
        if let Some(_g) = enter() {
            count("close_range", false);
            shim().forget_range(first, last, flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0);
        }
        pass!()
    }

    /// glibc's `closefrom` (2.34) calls `close_range` inside libc, where no hook sees it: without
    /// this one the program's library descriptors at or above `low` would stay in the shim's table
    /// after their reserved numbers were closed, and the kernel could give those numbers to new
    /// files.
    fn closefrom(low: c_int) -> () => {
        if let Some(_g) = enter() {
            count("closefrom", false);
            shim().forget_range(low.max(0) as c_uint, c_uint::MAX, false);
        }
        pass!()
    }

    fn ftruncate64(fd: c_int, len: off_t) -> c_int
        => (fd "ftruncate", fd, |o| int(shim().ftruncate(&o, len)));

    fn ftruncate(fd: c_int, len: off_t) -> c_int => (same_as ftruncate64);

    fn fsync(fd: c_int) -> c_int => (fd "fsync", fd, |o| int(shim().fsync(&o)));

    fn fdatasync(fd: c_int) -> c_int => (fd "fdatasync", fd, |o| int(shim().fsync(&o)));

    fn syncfs(fd: c_int) -> c_int => (fd "syncfs", fd, |o| int(shim().syncfs(&o)));

    fn sync_file_range(fd: c_int, off: off_t, n: off_t, fl: c_uint) -> c_int
        => (fd "sync_file_range", fd, |o| {
            if off < 0 || n < 0 {
                return fail(libc::EINVAL);
            }
            // The whole file is made durable, which covers the range.
            int(shim().fsync(&o))
        });

    fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int
        => (fd "fallocate", fd, |o| {
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return fail(shim().unsupported("fallocate (punch/zero/collapse)", libc::EOPNOTSUPP));
            }
            int(shim().allocate(&o, off, len, mode & libc::FALLOC_FL_KEEP_SIZE != 0))
        });

    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int => (same_as fallocate64);

    fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int, or eio_number
        => (fd "posix_fallocate", fd, |o| shim().allocate(&o, off, len, false).err().unwrap_or(0));

    fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int, or eio_number => {
        // SAFETY: the program's own arguments, to the hook `posix_fallocate64` with the same
        // contract.
        unsafe { posix_fallocate64(fd, off, len) }
    }

    fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int, or eio_number
        => {
        if lib_fd("posix_fadvise", fd).is_some() {
            // Advice only: a pool in memory has no readahead or page cache to steer.
            if !(0..=5).contains(&advice) || len < 0 {
                return libc::EINVAL;
            }
            return 0;
        }
        pass!()
    }

    fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int, or eio_number => {
        // SAFETY: the program's own arguments, to the hook `posix_fadvise64` with the same
        // contract.
        unsafe { posix_fadvise64(fd, off, len, advice) }
    }

    fn dup(fd: c_int) -> c_int => {
        if let Some((_g, _)) = lib_fd("dup", fd) {
            return num(shim().dup(fd, 0, false));
        }
        pass!()
    }

    fn dup2(fd: c_int, new: c_int) -> c_int => {
        // SAFETY: plain descriptor numbers; the same go to libc when neither is a library one.
        unsafe { dup_onto("dup2", fd, new, false, || real::dup2(fd, new)) }
    }

    fn dup3(fd: c_int, new: c_int, fl: c_int) -> c_int => {
        if fd == new {
            return fail(libc::EINVAL);
        }
        // SAFETY: plain descriptor numbers and flags, passed to libc's dup3 unchanged when
        // neither descriptor is a library one.
        unsafe {
            dup_onto("dup3", fd, new, fl & libc::O_CLOEXEC != 0, || {
                real::dup3(fd, new, fl)
            })
        }
    }

    /// `ioctl` (variadic in C; see the module notes on variadic entry points).
    fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int => (fd "ioctl", fd, |o| {
        let s = shim();
        match request {
            libc::FIONREAD => {
                if arg.is_null() {
                    return fail(libc::EFAULT);
                }
                let avail = match s.size(&o) {
                    Ok(size) => size.saturating_sub(o.dir_tell()).min(c_int::MAX as u64),
                    Err(e) => return fail(e),
                };
                // SAFETY: FIONREAD takes an int pointer.
                unsafe { *(arg as *mut c_int) = avail as c_int };
                0
            }
            libc::FIOCLEX => int(s.set_cloexec(fd, true)),
            libc::FIONCLEX => int(s.set_cloexec(fd, false)),
            _ => fail(libc::ENOTTY),
        }
    });

    fn isatty(fd: c_int) -> c_int, or eio_and(0) => {
        if lib_fd("isatty", fd).is_some() {
            set_errno(libc::ENOTTY);
            return 0;
        }
        pass!()
    }

    fn flock(fd: c_int, op: c_int) -> c_int => (fd "flock", fd, |o| int(o.flock(op)));

    fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int => (fd "lockf", fd, |o| {
        let s = shim();
        match cmd {
            libc::F_LOCK => {
                int(o.set_lock(false, libc::F_WRLCK, libc::SEEK_CUR, 0, len, true, || s.size(&o)))
            }
            libc::F_TLOCK => {
                int(o.set_lock(false, libc::F_WRLCK, libc::SEEK_CUR, 0, len, false, || s.size(&o)))
            }
            libc::F_ULOCK => {
                int(o.set_lock(false, libc::F_UNLCK, libc::SEEK_CUR, 0, len, false, || s.size(&o)))
            }
            libc::F_TEST => {
                match o.get_lock(false, libc::F_WRLCK, libc::SEEK_CUR, 0, len, || s.size(&o)) {
                    Ok(None) => 0,
                    Ok(Some(_)) => fail(libc::EACCES),
                    Err(e) => fail(e),
                }
            }
            _ => fail(libc::EINVAL),
        }
    });

    fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int => (same_as lockf64);

    fn fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int => (same_as fcntl_any(fd, cmd, arg));

    fn fcntl64(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int
        => (same_as fcntl_any(fd, cmd, arg));

    fn __fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int
        => (same_as fcntl_any(fd, cmd, arg));
}

unsafe fn dup_onto(
    name: &'static str,
    fd: c_int,
    new: c_int,
    cloexec: bool,
    real_call: impl FnOnce() -> c_int,
) -> c_int {
    if let Some(g) = enter() {
        let s = shim();
        if s.is_fd(fd) {
            count(name, true);
            let r = num(s.dup_onto(fd, new, cloexec));
            drop(g);
            if r >= 0 && (0..=2).contains(&new) && fd != new {
                rebind_std_stream(new);
            }
            return r;
        }
        count(name, false);
        if real::unpark(new) {
            // A kernel descriptor takes a parked number: it is the program's now.
            let r = real_call();
            if r < 0 {
                let e = errno();
                real::park_fd(new);
                set_errno(e);
            }
            return r;
        }
        if s.is_fd(new) {
            // A kernel descriptor replaces a library one.
            let r = real_call();
            if r >= 0 {
                s.forget(new);
                if (0..=2).contains(&new) {
                    restore_std_stream(new);
                }
            }
            return r;
        }
    }
    real_call()
}

/// A `struct flock` as F_GETLK/F_SETLK take it.
unsafe fn lock_cmd(o: &Ofd, cmd: c_int, arg: *mut c_void) -> c_int {
    let fl = arg as *mut libc::flock64;
    if fl.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller passes a struct flock for these commands.
    let f = unsafe { &mut *fl };
    let s = shim();
    let ofd_lock = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    if ofd_lock && f.l_pid != 0 {
        return fail(libc::EINVAL);
    }
    match cmd {
        libc::F_GETLK | libc::F_OFD_GETLK => {
            match o.get_lock(
                ofd_lock,
                f.l_type as i32,
                f.l_whence as i32,
                f.l_start,
                f.l_len,
                || s.size(o),
            ) {
                Ok(None) => {
                    f.l_type = libc::F_UNLCK as i16;
                    0
                }
                Ok(Some((t, start, len, pid))) => {
                    f.l_type = t as i16;
                    f.l_whence = libc::SEEK_SET as i16;
                    f.l_start = start;
                    f.l_len = len;
                    f.l_pid = pid;
                    0
                }
                Err(e) => fail(e),
            }
        }
        _ => {
            let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
            int(o.set_lock(
                ofd_lock,
                f.l_type as i32,
                f.l_whence as i32,
                f.l_start,
                f.l_len,
                wait,
                || s.size(o),
            ))
        }
    }
}

unsafe fn fcntl_any(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    if let Some((_g, o)) = lib_fd("fcntl", fd) {
        let s = shim();
        let iarg = arg as usize as c_int;
        return match cmd {
            libc::F_DUPFD => num(s.dup(fd, iarg, false)),
            libc::F_DUPFD_CLOEXEC => num(s.dup(fd, iarg, true)),
            libc::F_GETFD => match s.get_cloexec(fd) {
                Ok(c) => {
                    if c {
                        libc::FD_CLOEXEC
                    } else {
                        0
                    }
                }
                Err(e) => fail(e),
            },
            libc::F_SETFD => int(s.set_cloexec(fd, iarg & libc::FD_CLOEXEC != 0)),
            libc::F_GETFL => s.get_fl(&o),
            libc::F_SETFL => {
                s.set_fl(&o, iarg);
                0
            }
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => {
                // SAFETY: this function's caller passes a `struct flock` pointer with the lock
                // commands, as fcntl(2) requires.
                unsafe { lock_cmd(&o, cmd, arg) }
            }
            libc::F_GETOWN => 0,
            libc::F_GET_SEALS
            | libc::F_ADD_SEALS
            | libc::F_GETLEASE
            | libc::F_SETLEASE
            | libc::F_NOTIFY => fail(libc::EINVAL),
            _ => fail(s.unsupported("fcntl command", libc::EINVAL)),
        };
    }
    // SAFETY: the program's own arguments, unchanged, to libc's fcntl: `arg` is what `cmd`
    // expects.
    unsafe { real::fcntl(fd, cmd, arg) }
}
