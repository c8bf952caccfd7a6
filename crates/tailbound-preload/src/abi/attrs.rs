//! Attributes: modes, owners and times (`chmod`, `chown`, `utimensat` and their forms), and the
//! special files (`mknod`, `mkfifo`).

use libc::{c_char, c_int, mode_t};

use tailbound::tbfs::SetAttr;

use crate::abi::base::{bytes, int, lib_path, shim};
use crate::vfs::{LibPath, Ofd, VfsResult};

hooks! {
    fn chmod(p: *const c_char, mode: mode_t) -> c_int
        => (path "chmod", libc::AT_FDCWD, p, |loc| set_path_attr(loc, mode_attr(mode), true));

    fn fchmod(fd: c_int, mode: mode_t) -> c_int
        => (fd "fchmod", fd, |o| set_fd_attr(&o, mode_attr(mode)));

    fn fchmodat(dirfd: c_int, p: *const c_char, mode: mode_t, fl: c_int) -> c_int
        => (path "fchmodat", dirfd, p, |loc| {
            set_path_attr(loc, mode_attr(mode), fl & libc::AT_SYMLINK_NOFOLLOW == 0)
        });

    fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int
        => (path "chown", libc::AT_FDCWD, p, |loc| set_path_attr(loc, owner_attr(u, g), true));

    fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int
        => (path "lchown", libc::AT_FDCWD, p, |loc| set_path_attr(loc, owner_attr(u, g), false));

    fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int
        => (fd "fchown", fd, |o| set_fd_attr(&o, owner_attr(u, g)));

    fn fchownat(
        dirfd: c_int,
        p: *const c_char,
        u: libc::uid_t,
        g: libc::gid_t,
        fl: c_int,
    ) -> c_int => {
        // SAFETY: fchownat(2)'s caller passes `p` NUL-terminated (or NULL); it is only read.
        if fl & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(p) }.is_empty() {
            // SAFETY: the program's own descriptor and ids, which fchown(2) takes as they are.
            return unsafe { fchown(dirfd, u, g) };
        }
        // SAFETY: as above, `p` is NUL-terminated or NULL.
        if let Some((_g, loc)) = unsafe { lib_path("fchownat", dirfd, p) } {
            let follow = fl & libc::AT_SYMLINK_NOFOLLOW == 0;
            return set_path_attr(loc, owner_attr(u, g), follow);
        }
        pass!()
    }

    fn utimensat(dirfd: c_int, p: *const c_char, t: *const libc::timespec, fl: c_int) -> c_int => {
        if p.is_null() {
            // Linux: a NULL path is the descriptor itself (futimens).
            // SAFETY: the program's own descriptor and times (NULL or two timespecs), as
            // futimens(3) takes them.
            return unsafe { futimens(dirfd, t) };
        }
        // SAFETY: utimensat(2)'s caller passes `p` NUL-terminated; it is only read.
        if let Some((_g, loc)) = unsafe { lib_path("utimensat", dirfd, p) } {
            // SAFETY: utimensat(2)'s caller passes `t` NULL or pointing to two timespecs.
            let times = unsafe { timespec_attr(t) };
            return set_path_attr(loc, times, fl & libc::AT_SYMLINK_NOFOLLOW == 0);
        }
        pass!()
    }

    fn futimens(fd: c_int, t: *const libc::timespec) -> c_int => (fd "futimens", fd, |o| {
        // SAFETY: futimens(3)'s caller passes `t` NULL or pointing to two timespecs.
        set_fd_attr(&o, unsafe { timespec_attr(t) })
    });

    fn utimes(p: *const c_char, t: *const libc::timeval) -> c_int
        => (path "utimes", libc::AT_FDCWD, p, |loc| {
            // SAFETY: utimes(2)'s caller passes `t` NULL or pointing to two timevals.
            set_path_attr(loc, unsafe { timeval_attr(t) }, true)
        });

    fn lutimes(p: *const c_char, t: *const libc::timeval) -> c_int
        => (path "lutimes", libc::AT_FDCWD, p, |loc| {
            // SAFETY: lutimes(3)'s caller passes `t` NULL or pointing to two timevals.
            set_path_attr(loc, unsafe { timeval_attr(t) }, false)
        });

    fn futimes(fd: c_int, t: *const libc::timeval) -> c_int => (fd "futimes", fd, |o| {
        // SAFETY: futimes(3)'s caller passes `t` NULL or pointing to two timevals.
        set_fd_attr(&o, unsafe { timeval_attr(t) })
    });

    fn futimesat(dirfd: c_int, p: *const c_char, t: *const libc::timeval) -> c_int => {
        if p.is_null() {
            // SAFETY: the program's own descriptor and times, as futimes(3) takes them.
            return unsafe { futimes(dirfd, t) };
        }
        // SAFETY: futimesat(2)'s caller passes `p` NUL-terminated; it is only read.
        if let Some((_g, loc)) = unsafe { lib_path("futimesat", dirfd, p) } {
            // SAFETY: futimesat(2)'s caller passes `t` NULL or pointing to two timevals.
            return set_path_attr(loc, unsafe { timeval_attr(t) }, true);
        }
        pass!()
    }

    fn utime(p: *const c_char, t: *const libc::utimbuf) -> c_int
        => (path "utime", libc::AT_FDCWD, p, |loc| {
            let attr = if t.is_null() {
                // SAFETY: a NULL pointer, which means now.
                unsafe { timespec_attr(std::ptr::null()) }
            } else {
                // SAFETY: utime(2)'s caller passes `t` NULL or pointing to a utimbuf.
                let u = unsafe { &*t };
                Ok(SetAttr {
                    atime_ns: Some(u.actime * 1_000_000_000),
                    mtime_ns: Some(u.modtime * 1_000_000_000),
                    ..SetAttr::default()
                })
            };
            set_path_attr(loc, attr, true)
        });

    fn mknod(p: *const c_char, m: mode_t, d: libc::dev_t) -> c_int
        => (path "mknod", libc::AT_FDCWD, p, |loc| make_node(loc, m, d));

    fn mknodat(dirfd: c_int, p: *const c_char, m: mode_t, d: libc::dev_t) -> c_int
        => (path "mknodat", dirfd, p, |loc| make_node(loc, m, d));

    fn mkfifo(p: *const c_char, m: mode_t) -> c_int
        => (path "mkfifo", libc::AT_FDCWD, p, |loc| make_node(loc, libc::S_IFIFO | (m & 0o7777), 0));

    fn mkfifoat(dirfd: c_int, p: *const c_char, m: mode_t) -> c_int
        => (path "mkfifoat", dirfd, p, |loc| make_node(loc, libc::S_IFIFO | (m & 0o7777), 0));
}

/// mknod and mkfifo on a library path.
fn make_node(loc: VfsResult<LibPath>, mode: mode_t, dev: libc::dev_t) -> c_int {
    int(loc.and_then(|l| shim().mknod(&l, mode, dev)))
}

/// chmod, chown, utimens on a library path; `follow`: through a final symbolic link (no
/// `AT_SYMLINK_NOFOLLOW`, not an l* call).
fn set_path_attr(loc: VfsResult<LibPath>, attr: VfsResult<SetAttr>, follow: bool) -> c_int {
    int(loc.and_then(|l| attr.and_then(|a| shim().set_attr(&l, &a, follow))))
}

/// fchmod, fchown, futimens on a library descriptor.
fn set_fd_attr(o: &Ofd, attr: VfsResult<SetAttr>) -> c_int {
    int(attr.and_then(|a| shim().fset_attr(o, &a)))
}

fn mode_attr(mode: mode_t) -> VfsResult<SetAttr> {
    Ok(SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    })
}

fn owner_attr(u: libc::uid_t, g: libc::gid_t) -> VfsResult<SetAttr> {
    Ok(SetAttr {
        uid: (u != u32::MAX).then_some(u),
        gid: (g != u32::MAX).then_some(g),
        ..SetAttr::default()
    })
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// `utimensat`'s times: NULL is now for both; UTIME_NOW and UTIME_OMIT per field.
///
/// # Safety
/// `t` is NULL or points to two timespecs.
unsafe fn timespec_attr(t: *const libc::timespec) -> VfsResult<SetAttr> {
    if t.is_null() {
        let now = now_ns();
        return Ok(SetAttr {
            atime_ns: Some(now),
            mtime_ns: Some(now),
            touch: true,
            ..SetAttr::default()
        });
    }
    // SAFETY: non-null here, and pointing to two timespecs by this function's contract.
    let ts = unsafe { std::slice::from_raw_parts(t, 2) };
    let one = |t: &libc::timespec| -> VfsResult<Option<i64>> {
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            n if (0..1_000_000_000).contains(&n) => Ok(Some(t.tv_sec * 1_000_000_000 + n)),
            _ => Err(libc::EINVAL),
        }
    };
    // Only both at now is a touch; now beside an omitted time is an explicit change (the kernel's
    // `vfs_utimes`).
    Ok(SetAttr {
        atime_ns: one(&ts[0])?,
        mtime_ns: one(&ts[1])?,
        touch: ts.iter().all(|t| t.tv_nsec == libc::UTIME_NOW),
        ..SetAttr::default()
    })
}

/// `utimes`' times (microseconds); NULL is now.
///
/// # Safety
/// `t` is NULL or points to two timevals.
unsafe fn timeval_attr(t: *const libc::timeval) -> VfsResult<SetAttr> {
    if t.is_null() {
        // SAFETY: a NULL pointer, which means now.
        return unsafe { timespec_attr(std::ptr::null()) };
    }
    // SAFETY: non-null here, and pointing to two timevals by this function's contract.
    let tv = unsafe { std::slice::from_raw_parts(t, 2) };
    let ns = |t: &libc::timeval| -> VfsResult<i64> {
        if !(0..1_000_000).contains(&t.tv_usec) {
            return Err(libc::EINVAL);
        }
        Ok(t.tv_sec * 1_000_000_000 + t.tv_usec * 1000)
    };
    Ok(SetAttr {
        atime_ns: Some(ns(&tv[0])?),
        mtime_ns: Some(ns(&tv[1])?),
        ..SetAttr::default()
    })
}
