//! stdio streams on library descriptors: `fopencookie` streams whose reads, writes, seeks and
//! close go to the shim, and the standard streams pointed at one while a library descriptor
//! stands at 0, 1 or 2.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::abi::base::{boundary, fail, int, shim, size, slice, slice_mut};
use crate::guard::enter;
use crate::vfs::VfsResult;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t,
    write: unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t,
    seek: unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int,
    close: unsafe extern "C" fn(*mut c_void) -> c_int,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The `stdin`/`stdout`/`stderr` streams glibc made, saved while a library descriptor stands in.
static ORIGINAL_STD: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// The address of glibc's `stdin`, `stdout` or `stderr` variable.
pub fn std_stream_var(fd: c_int) -> *mut *mut libc::FILE {
    let name: &[u8] = match fd {
        0 => b"stdin\0",
        1 => b"stdout\0",
        _ => b"stderr\0",
    };
    // SAFETY: a NUL-terminated literal; the result is the variable everyone uses (the executable's
    // copy when it has one).
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) as *mut *mut libc::FILE }
}

/// A library descriptor now stands at 0, 1 or 2. glibc's standard streams do their I/O with
/// internal system calls no hook sees, so the stream variable is pointed at a stream on the
/// library descriptor (`sort -o`, a shell's redirection, then stdio writes).
pub fn rebind_std_stream(fd: c_int) {
    let var = std_stream_var(fd);
    if var.is_null() {
        return;
    }
    // SAFETY: `var` is glibc's stream variable.
    let cur = unsafe { *var };
    if !cur.is_null() && ORIGINAL_STD[fd as usize].load(Ordering::Acquire) == 0 {
        // SAFETY: flushing the stream glibc made before it stops being used.
        unsafe { libc::fflush(cur) };
        ORIGINAL_STD[fd as usize].store(cur as usize, Ordering::Release);
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
    // SAFETY: `fd` is a library descriptor; the mode is a literal.
    let fp = unsafe { stream_for(fd, mode.as_ptr().cast()) };
    if fp.is_null() {
        return;
    }
    if fd == 2 {
        // SAFETY: a fresh stream; stderr is unbuffered.
        unsafe { libc::setvbuf(fp, std::ptr::null_mut(), libc::_IONBF, 0) };
    }
    // SAFETY: as above.
    unsafe { *var = fp };
}

/// A kernel descriptor is back at 0, 1 or 2: glibc's own stream serves it again.
pub fn restore_std_stream(fd: c_int) {
    let orig = ORIGINAL_STD[fd as usize].swap(0, Ordering::AcqRel);
    let var = std_stream_var(fd);
    if orig != 0 && !var.is_null() {
        // SAFETY: glibc's stream variable and the stream it held before.
        unsafe { *var = orig as *mut libc::FILE };
    }
}

/// Opens a stream whose reads, writes, seeks and close go to library descriptor `fd`.
///
/// # Safety
/// `mode` is a NUL-terminated fopen mode.
pub unsafe fn stream_for(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let io = CookieIo {
        read: cookie_read,
        write: cookie_write,
        seek: cookie_seek,
        close: cookie_close,
    };
    // SAFETY: the cookie is the descriptor number; the callbacks take it back.
    let fp = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !fp.is_null() {
        let _g = enter();
        shim().stream_register(fp as usize, fd);
    }
    fp
}

/// Parses an fopen mode into open flags.
pub fn fopen_flags(mode: &[u8]) -> VfsResult<c_int> {
    let mut flags = match mode.first() {
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        Some(b'a') => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return Err(libc::EINVAL),
    };
    for &c in &mode[1..] {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'e' => flags |= libc::O_CLOEXEC,
            b'x' => flags |= libc::O_EXCL,
            b',' => break,
            _ => {}
        }
    }
    Ok(flags)
}

// The stream callbacks serve library descriptors whatever the guard says: a stream flushed from
// inside the shim (at exit) still writes to its file.

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    boundary(|| {
        let fd = c as usize as c_int;
        let _g = enter();
        let s = shim();
        match s.ofd(fd) {
            // SAFETY: glibc passes its stream buffer.
            Some(o) => size(s.read(&o, unsafe { slice_mut(buf.cast(), n) })),
            None => fail(libc::EBADF),
        }
    })
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    boundary(|| {
        let fd = c as usize as c_int;
        let _g = enter();
        let s = shim();
        match s.ofd(fd) {
            // SAFETY: glibc passes its stream buffer.
            Some(o) => match s.write(&o, unsafe { slice(buf.cast(), n) }) {
                // A cookie write returning 0 is an error to glibc; a short write is retried.
                Ok(k) => k as ssize_t,
                Err(e) => fail(e),
            },
            None => fail(libc::EBADF),
        }
    })
}

unsafe extern "C" fn cookie_seek(c: *mut c_void, pos: *mut i64, whence: c_int) -> c_int {
    boundary(|| {
        let fd = c as usize as c_int;
        let _g = enter();
        let s = shim();
        match s.ofd(fd) {
            // SAFETY: glibc's fopencookie passes a pointer to its own `off64_t` local, valid and
            // unshared for the call.
            Some(o) => match s.lseek(&o, unsafe { *pos }, whence) {
                Ok(p) => {
                    // SAFETY: the same local, written back as the seek function's contract asks.
                    unsafe { *pos = p };
                    0
                }
                Err(e) => fail(e),
            },
            None => fail(libc::EBADF),
        }
    })
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    boundary(|| {
        let fd = c as usize as c_int;
        let _g = enter();
        int(shim().close(fd).unwrap_or(Err(libc::EBADF)))
    })
}
