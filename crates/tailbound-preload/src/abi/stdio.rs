//! stdio entry points: `fopen`, `fdopen`, `freopen`, `tmpfile` and `fileno`. A stream on a
//! library file is a `fopencookie` stream (see `streams`).

use libc::{c_char, c_int};

use crate::abi::base::{bytes, lib_fd, lib_path, shim, SHIM};
use crate::abi::fds::{close, dup2};
use crate::abi::paths::{mkostemp, open, unlink};
use crate::abi::streams::{fopen_flags, rebind_std_stream, std_stream_var, stream_for};
use crate::guard::enter;
use crate::real::{self, errno, set_errno};

hooks! {
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE => {
        // SAFETY: fopen's caller passes `path` and `mode` NUL-terminated, as fopen(3) requires;
        // the same go to libc for a kernel path.
        unsafe { fopen_any("fopen", path, mode).unwrap_or_else(|| real::fopen(path, mode)) }
    }

    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE => {
        // SAFETY: fopen64's caller passes `path` and `mode` NUL-terminated, as fopen(3) requires;
        // the same go to libc for a kernel path.
        unsafe { fopen_any("fopen", path, mode).unwrap_or_else(|| real::fopen64(path, mode)) }
    }

    fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE => {
        if let Some((g, o)) = lib_fd("fdopen", fd) {
            // SAFETY: fdopen's caller passes `mode` NUL-terminated, as fopen(3) requires; it is
            // only read.
            let want = match fopen_flags(unsafe { bytes(mode) }) {
                Ok(f) => f & libc::O_ACCMODE,
                Err(e) => {
                    set_errno(e);
                    return std::ptr::null_mut();
                }
            };
            let ok = match want {
                libc::O_RDONLY => o.acc == libc::O_RDONLY || o.acc == libc::O_RDWR,
                libc::O_WRONLY => o.acc == libc::O_WRONLY || o.acc == libc::O_RDWR,
                _ => o.acc == libc::O_RDWR,
            };
            if !ok {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            drop(g);
            // SAFETY: fdopen's caller passes `mode` NUL-terminated, as fdopen(3) requires; `fd` is
            // a library descriptor.
            return unsafe { stream_for(fd, mode) };
        }
        pass!()
    }

    fn tmpfile() -> *mut libc::FILE => {
        // SAFETY: no arguments.
        unsafe { tmpfile_in_pool() }.unwrap_or_else(|| unsafe { real::tmpfile() })
    }

    fn tmpfile64() -> *mut libc::FILE => {
        // SAFETY: no arguments.
        unsafe { tmpfile_in_pool() }.unwrap_or_else(|| unsafe { real::tmpfile64() })
    }

    fn freopen(path: *const c_char, mode: *const c_char, fp: *mut libc::FILE) -> *mut libc::FILE
        => {
        // SAFETY: freopen's caller passes `path` NULL or NUL-terminated, `mode` NUL-terminated and
        // `fp` a live stream, as freopen(3) requires.
        if let Some(r) = unsafe { freopen_std_stream(path, mode, fp) } {
            return r;
        }
        // SAFETY: freopen's caller passes `path` NULL or NUL-terminated, `mode` NUL-terminated and
        // `fp` a live stream, as freopen(3) requires.
        if unsafe { freopen_refused(path, fp) } {
            set_errno(libc::ENOTSUP);
            return std::ptr::null_mut();
        }
        pass!()
    }

    fn freopen64(path: *const c_char, mode: *const c_char, fp: *mut libc::FILE) -> *mut libc::FILE
        => {
        // SAFETY: freopen64's caller passes `path` NULL or NUL-terminated, `mode` NUL-terminated
        // and `fp` a live stream, as freopen(3) requires.
        if let Some(r) = unsafe { freopen_std_stream(path, mode, fp) } {
            return r;
        }
        // SAFETY: freopen64's caller passes `path` NULL or NUL-terminated, `mode` NUL-terminated
        // and `fp` a live stream, as freopen(3) requires.
        if unsafe { freopen_refused(path, fp) } {
            set_errno(libc::ENOTSUP);
            return std::ptr::null_mut();
        }
        pass!()
    }

    fn fileno(fp: *mut libc::FILE) -> c_int => {
        stream_fd(fp).unwrap_or_else(|| pass!())
    }

    fn fileno_unlocked(fp: *mut libc::FILE) -> c_int => {
        stream_fd(fp).unwrap_or_else(|| pass!())
    }
}

unsafe fn fopen_any(
    name: &'static str,
    path: *const c_char,
    mode: *const c_char,
) -> Option<*mut libc::FILE> {
    // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they are
    // only read.
    let (g, loc) = unsafe { lib_path(name, libc::AT_FDCWD, path) }?;
    // SAFETY: this function's caller passes `mode` NUL-terminated, as fopen(3) requires; it is
    // only read.
    let flags = match fopen_flags(unsafe { bytes(mode) }) {
        Ok(f) => f,
        Err(e) => {
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
    };
    let fd = match loc.and_then(|l| shim().open(&l, flags, 0o666)) {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
    };
    drop(g);
    // SAFETY: this function's caller passes `mode` NUL-terminated, as fdopen(3) requires; `fd` is
    // a library descriptor.
    let fp = unsafe { stream_for(fd, mode) };
    if fp.is_null() {
        let e = errno();
        let _g = enter();
        shim().close(fd);
        set_errno(e);
    }
    Some(fp)
}

/// `None` when this is not such a call.
/// A library path cannot be attached to an existing `FILE` (its buffer belongs to glibc's
/// kernel-descriptor I/O), so `freopen` onto one, or of a library stream, fails with `ENOTSUP`.
/// `freopen` of `stdin`, `stdout` or `stderr` onto a library path (`freopen("log", "w", stdout)`):
/// the file is opened and `dup2`'d onto 0, 1 or 2, which points the stream variable at a stream
/// on it. Returns that stream (not `fp`: glibc's own stream cannot do I/O on a library file);
unsafe fn freopen_std_stream(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut libc::FILE,
) -> Option<*mut libc::FILE> {
    if path.is_null() || fp.is_null() {
        return None;
    }
    let fd = (0..=2).find(|&fd| {
        let var = std_stream_var(fd);
        // SAFETY: glibc's stream variable.
        !var.is_null() && unsafe { *var } == fp
    })?;
    {
        let _g = enter()?;
        // SAFETY: this function's caller passes its path arguments NUL-terminated (or NULL); they
        // are only read.
        if !shim().is_library_path(unsafe { bytes(path) }) {
            return None;
        }
    }
    // SAFETY: this function's caller passes `mode` NUL-terminated, as fopen(3) requires; it is
    // only read.
    let flags = match fopen_flags(unsafe { bytes(mode) }) {
        Ok(f) => f,
        Err(e) => return Some(fail_ptr(e)),
    };
    // SAFETY: the stream being replaced; its buffered bytes go where they were headed.
    unsafe { libc::fflush(fp) };
    // SAFETY: `path` is NUL-terminated (this function's contract); the mode goes with the flags.
    let new = unsafe { open(path, flags, 0o666) };
    if new < 0 {
        return Some(std::ptr::null_mut());
    }
    if new != fd {
        // SAFETY: as above.
        let r = unsafe { dup2(new, fd) };
        let e = errno();
        // SAFETY: as above.
        unsafe { close(new) };
        if r < 0 {
            return Some(fail_ptr(e));
        }
    } else {
        rebind_std_stream(fd);
    }
    // SAFETY: glibc's stream variable, now the stream on the library file.
    Some(unsafe { *std_stream_var(fd) })
}

fn fail_ptr<T>(e: i32) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// `tmpfile`: glibc makes it in `P_tmpdir` (`/tmp`, whatever `TMPDIR` says); when that is under a
/// mount, the file is made (and unlinked) in the pool instead.
unsafe fn tmpfile_in_pool() -> Option<*mut libc::FILE> {
    {
        let _g = enter()?;
        if !shim().is_library_path(b"/tmp/tmpf") {
            return None;
        }
    }
    let mut name = *b"/tmp/tmpfXXXXXX\0";
    // SAFETY: a writable NUL-terminated template; these are this library's own entry points.
    let fd = unsafe { mkostemp(name.as_mut_ptr().cast(), libc::O_CLOEXEC) };
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: as above.
    unsafe { unlink(name.as_ptr().cast()) };
    // SAFETY: as above; a literal mode.
    let fp = unsafe { fdopen(fd, c"w+".as_ptr()) };
    if fp.is_null() {
        let e = errno();
        // SAFETY: as above.
        unsafe { close(fd) };
        set_errno(e);
    }
    Some(fp)
}

unsafe fn freopen_refused(path: *const c_char, fp: *mut libc::FILE) -> bool {
    let Some(_g) = enter() else { return false };
    let s = shim();
    // SAFETY: this function's caller passes `path` NULL or NUL-terminated; it is only read.
    s.stream_fd(fp as usize).is_some()
        || (!path.is_null() && s.is_library_path(unsafe { bytes(path) }))
}

fn stream_fd(fp: *mut libc::FILE) -> Option<c_int> {
    SHIM.get().and_then(|s| s.stream_fd(fp as usize))
}
