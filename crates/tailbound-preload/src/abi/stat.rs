//! File status: the `stat` family (with the pre-2.33 `__xstat` forms), `statx`,
//! `statfs`/`statvfs`, and `access`.

use libc::{c_char, c_int, c_uint};

use crate::abi::base::{bytes, fail, int, lib_fd, lib_path, shim};
use crate::guard::Guard;
use crate::vfs::{Attr, VfsResult};

hooks! {
    fn fstat64(fd: c_int, st: *mut libc::stat64) -> c_int
        => (fd "fstat", fd, |o| stat_result(shim().fstat(&o), st));

    fn fstat(fd: c_int, st: *mut libc::stat64) -> c_int => (same_as fstat64);

    fn stat64(path: *const c_char, st: *mut libc::stat64) -> c_int
        => (path "stat", libc::AT_FDCWD, path, |loc| {
            stat_result(loc.and_then(|l| shim().stat(&l)), st)
        });

    fn stat(path: *const c_char, st: *mut libc::stat64) -> c_int => (same_as stat64);

    fn lstat64(path: *const c_char, st: *mut libc::stat64) -> c_int
        => (path "lstat", libc::AT_FDCWD, path, |loc| {
            stat_result(loc.and_then(|l| shim().lstat(&l)), st)
        });

    fn lstat(path: *const c_char, st: *mut libc::stat64) -> c_int => (same_as lstat64);

    fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int
        => {
        // SAFETY: fstatat64's caller passes its path arguments NUL-terminated (or NULL); they are
        // only read.
        if flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_empty() {
            // SAFETY: the program's own arguments, to the hook `fstat64` with the same contract.
            return unsafe { fstat64(dirfd, st) };
        }
        // SAFETY: fstatat64's caller passes its path arguments NUL-terminated (or NULL); they are
        // only read.
        if let Some((_g, loc)) = unsafe { lib_path("fstatat", dirfd, path) } {
            let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
            return stat_result(
                loc.and_then(|l| {
                    if nofollow {
                        shim().lstat(&l)
                    } else {
                        shim().stat(&l)
                    }
                }),
                st,
            );
        }
        pass!()
    }

    fn fstatat(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int
        => (same_as fstatat64);

    // glibc < 2.33 programs call the versioned __xstat family.
    fn __xstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int
        => (path "stat", libc::AT_FDCWD, path, |loc| {
            stat_result(loc.and_then(|l| shim().stat(&l)), st)
        });

    fn __xstat(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int
        => (same_as __xstat64);

    fn __lxstat64(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int
        => (path "lstat", libc::AT_FDCWD, path, |loc| {
            stat_result(loc.and_then(|l| shim().lstat(&l)), st)
        });

    fn __lxstat(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int
        => (same_as __lxstat64);

    fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int
        => (fd "fstat", fd, |o| stat_result(shim().fstat(&o), st));

    fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int => (same_as __fxstat64);

    fn __fxstatat64(
        ver: c_int,
        dirfd: c_int,
        path: *const c_char,
        st: *mut libc::stat64,
        flags: c_int,
    ) -> c_int => {
        // SAFETY: __fxstatat64's caller passes its path arguments NUL-terminated (or NULL); they
        // are only read.
        if flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_empty() {
            // SAFETY: the program's own arguments, to the hook `fstat64` with the same contract.
            return unsafe { fstat64(dirfd, st) };
        }
        // SAFETY: __fxstatat64's caller passes its path arguments NUL-terminated (or NULL); they
        // are only read.
        if let Some((_g, loc)) = unsafe { lib_path("fstatat", dirfd, path) } {
            let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
            return stat_result(
                loc.and_then(|l| {
                    if nofollow {
                        shim().lstat(&l)
                    } else {
                        shim().stat(&l)
                    }
                }),
                st,
            );
        }
        pass!()
    }

    fn __fxstatat(
        ver: c_int,
        dirfd: c_int,
        path: *const c_char,
        st: *mut libc::stat64,
        flags: c_int,
    ) -> c_int => (same_as __fxstatat64);

    fn statx(
        dirfd: c_int,
        path: *const c_char,
        flags: c_int,
        mask: c_uint,
        out: *mut libc::statx,
    ) -> c_int => {
        // SAFETY: statx's caller passes its path arguments NUL-terminated (or NULL); they are only
        // read.
        let empty = unsafe { bytes(path) }.is_empty();
        let r = if flags & libc::AT_EMPTY_PATH != 0 && empty {
            lib_fd("statx", dirfd).map(|(g, o)| (g, shim().fstat(&o)))
        } else {
            // SAFETY: statx's caller passes its path arguments NUL-terminated (or NULL); they are
            // only read.
            unsafe { lib_path("statx", dirfd, path) }.map(|(g, loc)| {
                let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
                (
                    g,
                    loc.and_then(|l| {
                        if nofollow {
                            shim().lstat(&l)
                        } else {
                            shim().stat(&l)
                        }
                    }),
                )
            })
        };
        if let Some((_g, r)) = r {
            return match r {
                Ok(a) if !out.is_null() => {
                    // SAFETY: checked non-null; the caller's buffer.
                    unsafe { put_statx(&a, out) };
                    0
                }
                Ok(_) => fail(libc::EFAULT),
                Err(e) => fail(e),
            };
        }
        pass!()
    }

    fn statfs64(p: *const c_char, out: *mut libc::statfs64) -> c_int => {
        // SAFETY: statfs64's caller passes `p` NUL-terminated, as statfs(2) requires; it is only
        // read.
        if let Some((_g, v)) = unsafe { vfs_of_path("statfs", p) } {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statfs(&v, out) });
        }
        pass!()
    }

    fn statfs(p: *const c_char, out: *mut libc::statfs64) -> c_int => (same_as statfs64);

    fn fstatfs64(fd: c_int, out: *mut libc::statfs64) -> c_int => {
        if let Some((_g, v)) = vfs_of_fd("fstatfs", fd) {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statfs(&v, out) });
        }
        pass!()
    }

    fn fstatfs(fd: c_int, out: *mut libc::statfs64) -> c_int => (same_as fstatfs64);

    fn statvfs64(p: *const c_char, out: *mut libc::statvfs64) -> c_int => {
        // SAFETY: statvfs64's caller passes `p` NUL-terminated, as statfs(2) requires; it is only
        // read.
        if let Some((_g, v)) = unsafe { vfs_of_path("statvfs", p) } {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statvfs(&v, out) });
        }
        pass!()
    }

    fn statvfs(p: *const c_char, out: *mut libc::statvfs64) -> c_int => (same_as statvfs64);

    fn fstatvfs64(fd: c_int, out: *mut libc::statvfs64) -> c_int => {
        if let Some((_g, v)) = vfs_of_fd("fstatvfs", fd) {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statvfs(&v, out) });
        }
        pass!()
    }

    fn fstatvfs(fd: c_int, out: *mut libc::statvfs64) -> c_int => (same_as fstatvfs64);

    fn access(path: *const c_char, mode: c_int) -> c_int
        => (path "access", libc::AT_FDCWD, path, |loc| {
            int(loc.and_then(|l| shim().access(&l, mode)))
        });

    fn euidaccess(path: *const c_char, mode: c_int) -> c_int
        => (path "access", libc::AT_FDCWD, path, |loc| {
            int(loc.and_then(|l| shim().access(&l, mode)))
        });

    fn eaccess(path: *const c_char, mode: c_int) -> c_int => (same_as euidaccess);

    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int
        => (path "faccessat", dirfd, path, |loc| int(loc.and_then(|l| shim().access(&l, mode))));
}

unsafe fn put_stat(a: &Attr, st: *mut libc::stat64) {
    // SAFETY: all-zero is a valid stat64.
    let mut s: libc::stat64 = unsafe { std::mem::zeroed() };
    s.st_dev = a.dev;
    s.st_ino = a.ino;
    s.st_nlink = a.nlink;
    s.st_mode = a.mode;
    s.st_uid = a.uid;
    s.st_gid = a.gid;
    s.st_size = a.size as i64;
    s.st_rdev = libc::makedev(a.rdev.0, a.rdev.1);
    s.st_blksize = tailbound::dev::BLOCK_SIZE as i64;
    s.st_blocks = a.blocks512 as i64;
    s.st_atime = a.atime_ns.div_euclid(1_000_000_000);
    s.st_atime_nsec = a.atime_ns.rem_euclid(1_000_000_000);
    s.st_mtime = a.mtime_ns.div_euclid(1_000_000_000);
    s.st_mtime_nsec = a.mtime_ns.rem_euclid(1_000_000_000);
    s.st_ctime = a.ctime_ns.div_euclid(1_000_000_000);
    s.st_ctime_nsec = a.ctime_ns.rem_euclid(1_000_000_000);
    // SAFETY: the caller passes a writable stat buffer.
    unsafe { st.write(s) };
}

fn stat_result(r: VfsResult<Attr>, st: *mut libc::stat64) -> c_int {
    match r {
        Ok(a) => {
            if st.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: checked non-null; the caller's buffer.
            unsafe { put_stat(&a, st) };
            0
        }
        Err(e) => fail(e),
    }
}

fn ts(ns: i64) -> libc::statx_timestamp {
    // SAFETY: all-zero is a valid statx_timestamp.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = ns.div_euclid(1_000_000_000);
    t.tv_nsec = ns.rem_euclid(1_000_000_000) as u32;
    t
}

unsafe fn put_statx(a: &Attr, out: *mut libc::statx) {
    // SAFETY: all-zero is a valid statx.
    let mut s: libc::statx = unsafe { std::mem::zeroed() };
    s.stx_mask = libc::STATX_BASIC_STATS;
    s.stx_blksize = tailbound::dev::BLOCK_SIZE as u32;
    s.stx_nlink = a.nlink as u32;
    s.stx_uid = a.uid;
    s.stx_gid = a.gid;
    s.stx_mode = a.mode as u16;
    s.stx_ino = a.ino;
    s.stx_size = a.size;
    s.stx_blocks = a.blocks512;
    s.stx_atime = ts(a.atime_ns);
    s.stx_mtime = ts(a.mtime_ns);
    s.stx_ctime = ts(a.ctime_ns);
    (s.stx_rdev_major, s.stx_rdev_minor) = a.rdev;
    s.stx_dev_major = (a.dev >> 32) as u32;
    s.stx_dev_minor = a.dev as u32;
    // SAFETY: the caller passes a writable statx buffer.
    unsafe { out.write(s) };
}

/// `f_type` of a tbfs mount ("tbfs").
const TBFS_MAGIC: i64 = 0x7462_6673;

fn vfs_of_fd(
    name: &'static str,
    fd: c_int,
) -> Option<(Guard, VfsResult<tailbound::tbfs::StatVfs>)> {
    lib_fd(name, fd).map(|(g, o)| (g, shim().statvfs(o.mount)))
}

unsafe fn vfs_of_path(
    name: &'static str,
    p: *const c_char,
) -> Option<(Guard, VfsResult<tailbound::tbfs::StatVfs>)> {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    unsafe { lib_path(name, libc::AT_FDCWD, p) }.map(|(g, loc)| {
        (
            g,
            loc.and_then(|l| shim().stat(&l).and_then(|_| shim().statvfs(l.mount))),
        )
    })
}

unsafe fn put_statfs(v: &tailbound::tbfs::StatVfs, out: *mut libc::statfs64) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: all-zero is a valid statfs64.
    let mut s: libc::statfs64 = unsafe { std::mem::zeroed() };
    s.f_type = TBFS_MAGIC;
    s.f_bsize = v.block_size as i64;
    s.f_frsize = v.block_size as i64;
    s.f_blocks = v.blocks;
    s.f_bfree = v.blocks_free;
    s.f_bavail = v.blocks_free;
    s.f_files = v.files + v.blocks_free;
    s.f_ffree = v.blocks_free;
    s.f_namelen = v.name_max as i64;
    // SAFETY: checked non-null; the caller's buffer.
    unsafe { out.write(s) };
    0
}

unsafe fn put_statvfs(v: &tailbound::tbfs::StatVfs, out: *mut libc::statvfs64) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: all-zero is a valid statvfs64.
    let mut s: libc::statvfs64 = unsafe { std::mem::zeroed() };
    s.f_bsize = v.block_size;
    s.f_frsize = v.block_size;
    s.f_blocks = v.blocks;
    s.f_bfree = v.blocks_free;
    s.f_bavail = v.blocks_free;
    s.f_files = v.files + v.blocks_free;
    s.f_ffree = v.blocks_free;
    s.f_favail = v.blocks_free;
    s.f_namemax = v.name_max;
    // SAFETY: checked non-null; the caller's buffer.
    unsafe { out.write(s) };
    0
}
