//! Calls named by a path: the `open` family (with the variadic and fortified forms), the
//! namespace (`mkdir`, `unlink`, `rename`, `truncate`, links), the working directory and
//! `realpath`, and temporary files (`mkstemp` and friends).

use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_char, c_int, c_uint, mode_t, off_t, size_t, ssize_t};

use crate::abi::base::{bytes, count, fail, int, lib_path, num, path_bytes, shim};
use crate::guard::enter;
use crate::real::{self, errno, set_errno};
use crate::vfs::{LibPath, VfsResult, Where};

hooks! {
    fn mkdir(path: *const c_char, mode: mode_t) -> c_int
        => (path "mkdir", libc::AT_FDCWD, path, |loc| int(loc.and_then(|l| shim().mkdir(&l, mode))));

    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int
        => (path "mkdirat", dirfd, path, |loc| int(loc.and_then(|l| shim().mkdir(&l, mode))));

    fn rmdir(path: *const c_char) -> c_int
        => (path "rmdir", libc::AT_FDCWD, path, |loc| int(loc.and_then(|l| {
            // SAFETY: rmdir's caller passes `path` NUL-terminated (non-NULL: it was routed).
            match last_is_dot(unsafe { bytes(path) }) {
                Some(1) => Err(libc::EINVAL),
                Some(_) => Err(libc::ENOTEMPTY),
                None => shim().rmdir(&l),
            }
        })));

    fn unlink(path: *const c_char) -> c_int
        => (path "unlink", libc::AT_FDCWD, path, |loc| int(loc.and_then(|l| shim().unlink(&l))));

    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int
        => (path "unlinkat", dirfd, path, |loc| int(loc.and_then(|l| {
            if flags & libc::AT_REMOVEDIR != 0 {
                shim().rmdir(&l)
            } else {
                shim().unlink(&l)
            }
        })));

    fn remove(path: *const c_char) -> c_int
        => (path "remove", libc::AT_FDCWD, path, |loc| int(loc.and_then(|l| match shim().unlink(&l) {
            Err(libc::EISDIR) => shim().rmdir(&l),
            r => r,
        })));

    fn rename(a: *const c_char, b: *const c_char) -> c_int => {
        // SAFETY: rename's caller passes its paths NUL-terminated and its buffers valid, as rename
        // requires; the same arguments go to libc when no path is a library one.
        unsafe {
            rename_any("rename", libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0)
                .unwrap_or_else(|| real::rename(a, b))
        }
    }

    fn renameat(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> c_int => {
        // SAFETY: renameat's caller passes its paths NUL-terminated and its buffers valid, as
        // renameat requires; the same arguments go to libc when no path is a library one.
        unsafe {
            rename_any("renameat", da, a, db, b, 0).unwrap_or_else(|| real::renameat(da, a, db, b))
        }
    }

    fn renameat2(da: c_int, a: *const c_char, db: c_int, b: *const c_char, fl: c_uint) -> c_int => {
        // SAFETY: renameat2's caller passes its paths NUL-terminated and its buffers valid, as
        // renameat2 requires; the same arguments go to libc when no path is a library one.
        unsafe {
            rename_any("renameat2", da, a, db, b, fl)
                .unwrap_or_else(|| real::renameat2(da, a, db, b, fl))
        }
    }

    fn truncate64(path: *const c_char, len: off_t) -> c_int
        => (path "truncate", libc::AT_FDCWD, path, |loc| {
            int(loc.and_then(|l| shim().truncate(&l, len)))
        });

    fn truncate(path: *const c_char, len: off_t) -> c_int => (same_as truncate64);

    fn chdir(path: *const c_char) -> c_int => {
        if let Some(g) = enter() {
            let s = shim();
            // SAFETY: chdir's caller passes its path arguments NUL-terminated (or NULL); they are
            // only read.
            match s.resolve(libc::AT_FDCWD, unsafe { bytes(path) }) {
                Where::Lib(loc) => {
                    count("chdir", true);
                    return int(s.chdir(&loc));
                }
                Where::Refused(e) => return fail(e),
                Where::Kernel => {
                    count("chdir", false);
                    let r = pass!();
                    if r == 0 {
                        s.left_for_kernel();
                    }
                    drop(g);
                    return r;
                }
            }
        }
        pass!()
    }

    fn fchdir(fd: c_int) -> c_int => {
        if let Some(g) = enter() {
            let s = shim();
            if let Some(o) = s.ofd(fd) {
                count("fchdir", true);
                if !o.dir {
                    return fail(libc::ENOTDIR);
                }
                let loc = LibPath {
                    mount: o.mount,
                    rel: o.rel.clone(),
                    abs: o.abs.clone(),
                };
                return int(s.chdir(&loc));
            }
            count("fchdir", false);
            let r = pass!();
            if r == 0 {
                s.left_for_kernel();
            }
            drop(g);
            return r;
        }
        pass!()
    }

    fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char => {
        if let Some(_g) = enter() {
            if let Some(c) = shim().library_cwd() {
                count("getcwd", true);
                // SAFETY: getcwd's caller passes `buf` NULL or writable for `n` bytes, as
                // getcwd(3) requires.
                return unsafe { give_cwd(&c, buf, n) };
            }
        }
        pass!()
    }

    fn __getcwd_chk(buf: *mut c_char, n: size_t, _l: size_t) -> *mut c_char
        => (same_as getcwd(buf, n));

    /// `getwd` (and its fortified form): glibc's asks the kernel directly.
    fn getwd(buf: *mut c_char) -> *mut c_char => (same_as getcwd(buf, libc::PATH_MAX as size_t));

    fn __getwd_chk(buf: *mut c_char, len: size_t) -> *mut c_char => {
        // SAFETY: the caller passes a buffer of `len` bytes.
        unsafe { getcwd(buf, len.min(libc::PATH_MAX as size_t)) }
    }

    fn get_current_dir_name() -> *mut c_char => {
        if let Some(_g) = enter() {
            if let Some(c) = shim().library_cwd() {
                // SAFETY: a malloc'd copy.
                return unsafe { give_cwd(&c, std::ptr::null_mut(), 0) };
            }
        }
        pass!()
    }

    fn realpath(p: *const c_char, out: *mut c_char) -> *mut c_char
        => (path "realpath", libc::AT_FDCWD, p, |loc| match loc.and_then(|l| shim().realpath(&l)) {
            // SAFETY: `out` is PATH_MAX bytes when given.
            Ok(path) => unsafe {
                give_cwd(
                    &path,
                    out,
                    if out.is_null() {
                        0
                    } else {
                        libc::PATH_MAX as usize
                    },
                )
            },
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        });

    fn __realpath_chk(p: *const c_char, out: *mut c_char, _l: size_t) -> *mut c_char
        => (same_as realpath(p, out));

    fn symlink(target: *const c_char, p: *const c_char) -> c_int => {
        // SAFETY: symlink's caller passes its paths NUL-terminated and its buffers valid, as
        // symlink requires; the same arguments go to libc when no path is a library one.
        unsafe {
            symlink_any(target, libc::AT_FDCWD, p).unwrap_or_else(|| real::symlink(target, p))
        }
    }

    fn symlinkat(target: *const c_char, dirfd: c_int, p: *const c_char) -> c_int => {
        // SAFETY: symlinkat's caller passes its paths NUL-terminated and its buffers valid, as
        // symlinkat requires; the same arguments go to libc when no path is a library one.
        unsafe {
            symlink_any(target, dirfd, p).unwrap_or_else(|| real::symlinkat(target, dirfd, p))
        }
    }

    fn readlink(p: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t => {
        // SAFETY: readlink's caller passes its paths NUL-terminated and its buffers valid, as
        // readlink requires; the same arguments go to libc when no path is a library one.
        unsafe {
            readlink_any(libc::AT_FDCWD, p, buf, n).unwrap_or_else(|| real::readlink(p, buf, n))
        }
    }

    fn __readlink_chk(p: *const c_char, buf: *mut c_char, n: size_t, _l: size_t) -> ssize_t
        => (same_as readlink(p, buf, n));

    fn readlinkat(dirfd: c_int, p: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t => {
        // SAFETY: readlinkat's caller passes its paths NUL-terminated and its buffers valid, as
        // readlinkat requires; the same arguments go to libc when no path is a library one.
        unsafe {
            readlink_any(dirfd, p, buf, n).unwrap_or_else(|| real::readlinkat(dirfd, p, buf, n))
        }
    }

    fn __readlinkat_chk(
        dirfd: c_int,
        p: *const c_char,
        buf: *mut c_char,
        n: size_t,
        _l: size_t,
    ) -> ssize_t => (same_as readlinkat(dirfd, p, buf, n));

    fn link(a: *const c_char, b: *const c_char) -> c_int => {
        // SAFETY: link's caller passes its paths NUL-terminated and its buffers valid, as link
        // requires; the same arguments go to libc when no path is a library one.
        unsafe {
            link_any("link", libc::AT_FDCWD, a, libc::AT_FDCWD, b)
                .unwrap_or_else(|| real::link(a, b))
        }
    }

    fn linkat(da: c_int, a: *const c_char, db: c_int, b: *const c_char, fl: c_int) -> c_int => {
        // linkat does not follow a final symbolic link unless AT_SYMLINK_FOLLOW; tbfs links the
        // name itself either way, which is the default behaviour.
        // SAFETY: linkat's caller passes its paths NUL-terminated and its buffers valid, as linkat
        // requires; the same arguments go to libc when no path is a library one.
        unsafe {
            link_any("linkat", da, a, db, b).unwrap_or_else(|| real::linkat(da, a, db, b, fl))
        }
    }

    fn canonicalize_file_name(p: *const c_char) -> *mut c_char => {
        // SAFETY: the program's own arguments, to the hook `realpath` with the same contract.
        unsafe { realpath(p, std::ptr::null_mut()) }
    }

    fn mkstemp(t: *mut c_char) -> c_int => {
        unsafe { make_temp(t, 0, 0, false) }.map_or_else(|| pass!(), num)
    }

    fn mkstemp64(t: *mut c_char) -> c_int => (same_as mkstemp);

    fn mkostemp(t: *mut c_char, fl: c_int) -> c_int => {
        unsafe { make_temp(t, 0, fl, false) }.map_or_else(|| pass!(), num)
    }

    fn mkostemp64(t: *mut c_char, fl: c_int) -> c_int => (same_as mkostemp);

    fn mkstemps(t: *mut c_char, n: c_int) -> c_int => {
        unsafe { make_temp(t, n, 0, false) }.map_or_else(|| pass!(), num)
    }

    fn mkostemps(t: *mut c_char, n: c_int, fl: c_int) -> c_int => {
        // SAFETY: mkostemps's caller passes `t` a writable NUL-terminated template, as mkstemp(3)
        // requires.
        unsafe { make_temp(t, n, fl, false) }
            .map_or_else(|| unsafe { real::mkostemps(t, n, fl) }, num)
    }

    fn mkdtemp(t: *mut c_char) -> *mut c_char => {
        // SAFETY: mkdtemp's caller passes `t` a writable NUL-terminated template, as mkstemp(3)
        // requires.
        match unsafe { make_temp(t, 0, 0, true) } {
            None => unsafe { real::mkdtemp(t) },
            Some(Ok(_)) => t,
            Some(Err(e)) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    }

    fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int => {
        let mode = if wants_mode(flags) { mode } else { 0 };
        // SAFETY: open's caller passes `path` NUL-terminated, as open(2) requires; the mode is
        // read only when the flags say one was passed.
        unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
    }

    fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int => (same_as open);

    fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int => {
        let mode = if wants_mode(flags) { mode } else { 0 };
        // SAFETY: openat's caller passes `path` NUL-terminated, as open(2) requires; the mode is
        // read only when the flags say one was passed.
        unsafe { open_at(dirfd, path, flags, mode) }
    }

    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int
        => (same_as openat);

    // The fortified entry points are called without O_CREAT (the compiler checked); they take no
    // mode.
    fn __open_2(path: *const c_char, flags: c_int) -> c_int
        => (same_as open_at(libc::AT_FDCWD, path, flags, 0));

    fn __open64_2(path: *const c_char, flags: c_int) -> c_int
        => (same_as open_at(libc::AT_FDCWD, path, flags, 0));

    fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int
        => (same_as open_at(dirfd, path, flags, 0));

    fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int
        => (same_as open_at(dirfd, path, flags, 0));

    fn creat(path: *const c_char, mode: mode_t) -> c_int => {
        // SAFETY: creat's caller passes `path` NUL-terminated, as creat(2) requires.
        unsafe {
            open_at(
                libc::AT_FDCWD,
                path,
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                mode,
            )
        }
    }

    fn creat64(path: *const c_char, mode: mode_t) -> c_int => (same_as creat);
}

/// Every open-like entry point ends here.
unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    if let Some((_g, loc)) = unsafe { lib_path("open", dirfd, path) } {
        return num(loc.and_then(|l| shim().open(&l, flags, mode)));
    }
    // SAFETY: the program's own arguments, unchanged, to libc's openat: `path` is NUL-terminated
    // and the mode is passed as the flags ask.
    unsafe { real::openat(dirfd, path, flags, mode) }
}

/// An `openat2` on a library path (`None`: not one, pass it on). `RESOLVE_*` flags are not
/// supported there.
///
/// # Safety
/// `path` is NULL or NUL-terminated, as openat2(2) requires.
pub unsafe fn open_library_path(
    name: &'static str,
    dirfd: c_int,
    path: *const c_char,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Option<c_int> {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (_g, loc) = unsafe { lib_path(name, dirfd, path) }?;
    Some(num(loc.and_then(|l| {
        if resolve != 0 {
            return Err(shim().unsupported("openat2 with RESOLVE_* flags", libc::EOPNOTSUPP));
        }
        let flags = c_int::try_from(flags).map_err(|_| libc::EINVAL)?;
        let mode = c_uint::try_from(mode).map_err(|_| libc::EINVAL)?;
        shim().open(&l, flags, mode)
    })))
}

unsafe fn rename_any(
    name: &'static str,
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_uint,
) -> Option<c_int> {
    let g = enter()?;
    let s = shim();
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (pa, pb) = unsafe { (path_bytes(a), path_bytes(b)) };
    let unreadable = pa.is_none() || pb.is_none();
    let (pa, pb) = (pa.unwrap_or(&[]), pb.unwrap_or(&[]));
    let (wa, wb) = (s.resolve(da, pa), s.resolve(db, pb));
    let r = match (wa, wb) {
        (Where::Kernel, Where::Kernel) => {
            count(name, false);
            return None;
        }
        // As the kernel: a path it cannot read, and a last component `.` or `..`, which
        // normalizing would otherwise turn into its directory.
        _ if unreadable => Err(libc::EFAULT),
        _ if last_is_dot(pa).is_some() || last_is_dot(pb).is_some() => Err(libc::EINVAL),
        (Where::Refused(e), _) | (_, Where::Refused(e)) => Err(e),
        (Where::Lib(x), Where::Lib(y)) => s.rename(&x, &y, flags),
        // Across file systems: `mv` copies and removes on EXDEV.
        _ => Err(libc::EXDEV),
    };
    count(name, true);
    drop(g);
    Some(int(r))
}

/// Copies a library working directory into the caller's buffer (or a malloc'd one).
unsafe fn give_cwd(cwd: &str, buf: *mut c_char, n: size_t) -> *mut c_char {
    let need = cwd.len() + 1;
    let out = if buf.is_null() {
        let cap = if n == 0 { need } else { n };
        if cap < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        // SAFETY: plain allocation the caller frees.
        let p = unsafe { libc::malloc(cap) } as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        if n < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        buf
    };
    // SAFETY: `out` has room for `need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(cwd.as_ptr() as *const c_char, out, cwd.len());
        *out.add(cwd.len()) = 0;
    }
    out
}

unsafe fn symlink_any(target: *const c_char, dirfd: c_int, p: *const c_char) -> Option<c_int> {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (_g, loc) = unsafe { lib_path("symlink", dirfd, p) }?;
    // SAFETY: this function's caller passes `target` NUL-terminated, as symlink(2) requires; it is
    // only read.
    let t = unsafe { path_bytes(target) };
    Some(int(loc.and_then(|l| {
        let t = t.ok_or(libc::EFAULT)?;
        if t.len() >= libc::PATH_MAX as usize {
            return Err(libc::ENAMETOOLONG);
        }
        let t = std::str::from_utf8(t).map_err(|_| libc::EINVAL)?;
        if t.is_empty() {
            return Err(libc::ENOENT);
        }
        shim().symlink(t, &l)
    })))
}

unsafe fn readlink_any(
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> Option<ssize_t> {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (_g, loc) = unsafe { lib_path("readlink", dirfd, p) }?;
    Some(match loc.and_then(|l| shim().readlink(&l)) {
        Ok(t) => {
            // readlink truncates silently and does not terminate.
            let k = t.len().min(n);
            // SAFETY: the caller's buffer of `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(t.as_ptr() as *const c_char, buf, k) };
            k as ssize_t
        }
        Err(e) => fail(e),
    })
}

unsafe fn link_any(
    name: &'static str,
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> Option<c_int> {
    let g = enter()?;
    let s = shim();
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (pa, pb) = unsafe { (path_bytes(a), path_bytes(b)) };
    let unreadable = pa.is_none() || pb.is_none();
    let (wa, wb) = (
        s.resolve(da, pa.unwrap_or(&[])),
        s.resolve(db, pb.unwrap_or(&[])),
    );
    let r = match (wa, wb) {
        (Where::Kernel, Where::Kernel) => {
            count(name, false);
            return None;
        }
        _ if unreadable => Err(libc::EFAULT),
        (Where::Refused(e), _) | (_, Where::Refused(e)) => Err(e),
        (Where::Lib(x), Where::Lib(y)) => s.link(&x, &y),
        _ => Err(libc::EXDEV),
    };
    count(name, true);
    drop(g);
    Some(int(r))
}

/// The length of a path's last component when it is `.` or `..` (trailing slashes aside).
fn last_is_dot(p: &[u8]) -> Option<usize> {
    let p = p.strip_suffix(b"/").map_or(p, |_| {
        let end = p.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
        &p[..end]
    });
    let last = p.rsplit(|&c| c == b'/').next().unwrap_or(p);
    matches!(last, b"." | b"..").then_some(last.len())
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// mkstemp and friends for a template under a mount: `XXXXXX` before `suffix` bytes replaced
/// until an `O_EXCL` create succeeds.
unsafe fn make_temp(
    t: *mut c_char,
    suffix: c_int,
    flags: c_int,
    dir: bool,
) -> Option<VfsResult<c_int>> {
    if t.is_null() {
        return None;
    }
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (g, loc) = unsafe { lib_path(if dir { "mkdtemp" } else { "mkstemp" }, libc::AT_FDCWD, t) }?;
    drop(g);
    if let Err(e) = loc {
        return Some(Err(e));
    }
    // SAFETY: the template is a writable NUL-terminated string.
    let len = unsafe { libc::strlen(t) };
    let suffix = suffix.max(0) as usize;
    if len < 6 + suffix {
        return Some(Err(libc::EINVAL));
    }
    let start = len - suffix - 6;
    // SAFETY: within the string.
    let tb = unsafe { std::slice::from_raw_parts_mut(t as *mut u8, len) };
    if &tb[start..start + 6] != b"XXXXXX" {
        return Some(Err(libc::EINVAL));
    }
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for _ in 0..1000 {
        let mut v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ TMP_COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            ^ (real::pid() as u64) << 40;
        for c in &mut tb[start..start + 6] {
            *c = CHARS[(v % CHARS.len() as u64) as usize];
            v /= CHARS.len() as u64;
        }
        let r = if dir {
            // SAFETY: the template, now a name.
            if unsafe { mkdir(t, 0o700) } == 0 {
                Ok(0)
            } else {
                Err(errno())
            }
        } else {
            let f = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
            // SAFETY: the template, now a name.
            let fd = unsafe { open_at(libc::AT_FDCWD, t, f, 0o600) };
            if fd >= 0 {
                Ok(fd)
            } else {
                Err(errno())
            }
        };
        match r {
            Err(libc::EEXIST) => continue,
            r => return Some(r),
        }
    }
    Some(Err(libc::EEXIST))
}

fn wants_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}
