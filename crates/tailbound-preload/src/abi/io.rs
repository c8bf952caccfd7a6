//! Reads and writes: `read`/`write`, the positioned and vector forms (`pread`, `readv`,
//! `preadv2`...), `lseek`, and the copies between descriptors (`sendfile`, `copy_file_range`,
//! `splice`), made through a buffer when either side is a library descriptor.

use libc::{c_int, c_uint, c_void, off_t, size_t, ssize_t};

use crate::abi::base::{count, fail, lib_fd, shim, size, slice, slice_mut};
use crate::guard::{enter, Guard};
use crate::real::{self, errno};
use crate::vfs::{Ofd, VfsResult};

hooks! {
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t => (fd "read", fd, |o| {
        // SAFETY: read's caller passes `buf` writable for `n` bytes.
        size(shim().read(&o, unsafe { slice_mut(buf, n) }))
    });

    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, _len: size_t) -> ssize_t
        => (same_as read(fd, buf, n));

    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t => (fd "write", fd, |o| {
        // SAFETY: write's caller passes `buf` readable for `n` bytes.
        size(shim().write(&o, unsafe { slice(buf, n) }))
    });

    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t
        => (fd "pread", fd, |o| {
            if off < 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: pread64's caller passes `buf` writable for `n` bytes.
            size(shim().pread(&o, unsafe { slice_mut(buf, n) }, off as u64))
        });

    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t => (same_as pread64);

    fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _l: size_t) -> ssize_t
        => (same_as pread64(fd, buf, n, off));

    fn __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, _l: size_t) -> ssize_t
        => (same_as pread64(fd, buf, n, off));

    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t
        => (fd "pwrite", fd, |o| {
            if off < 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: pwrite64's caller passes `buf` readable for `n` bytes.
            size(shim().pwrite(&o, unsafe { slice(buf, n) }, off as u64))
        });

    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t
        => (same_as pwrite64);

    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t => (fd "readv", fd, |o| {
        // SAFETY: readv's caller passes `n` iovecs at `iov`, each a buffer valid for its length.
        size(unsafe { vector_io(&o, iov, n, None, false) })
    });

    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t => (fd "writev", fd, |o| {
        // SAFETY: writev's caller passes `n` iovecs at `iov`, each a buffer valid for its length.
        size(unsafe { vector_io(&o, iov, n, None, true) })
    });

    fn preadv64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t => {
        if off == -1 {
            return fail(libc::EINVAL);
        }
        // SAFETY: preadv64's caller passes `n` iovecs at `iov`, each a buffer valid for its
        // length; the same arguments go to libc for a kernel descriptor.
        unsafe {
            pvector("preadv", fd, iov, n, off, false, 0)
                .unwrap_or_else(|| real::preadv64(fd, iov, n, off))
        }
    }

    fn preadv(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t
        => (same_as preadv64);

    fn pwritev64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t => {
        if off == -1 {
            return fail(libc::EINVAL);
        }
        // SAFETY: pwritev64's caller passes `n` iovecs at `iov`, each a buffer valid for its
        // length; the same arguments go to libc for a kernel descriptor.
        unsafe {
            pvector("pwritev", fd, iov, n, off, true, 0)
                .unwrap_or_else(|| real::pwritev64(fd, iov, n, off))
        }
    }

    fn pwritev(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t
        => (same_as pwritev64);

    fn preadv64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        => {
        // SAFETY: preadv64v2's caller passes `n` iovecs at `iov`, each a buffer valid for its
        // length; the same arguments go to libc for a kernel descriptor.
        unsafe {
            pvector("preadv2", fd, iov, n, off, false, fl)
                .unwrap_or_else(|| real::preadv64v2(fd, iov, n, off, fl))
        }
    }

    fn preadv2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        => (same_as preadv64v2);

    fn pwritev64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        => {
        // SAFETY: pwritev64v2's caller passes `n` iovecs at `iov`, each a buffer valid for its
        // length; the same arguments go to libc for a kernel descriptor.
        unsafe {
            pvector("pwritev2", fd, iov, n, off, true, fl)
                .unwrap_or_else(|| real::pwritev64v2(fd, iov, n, off, fl))
        }
    }

    fn pwritev2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        => (same_as pwritev64v2);

    fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t
        => (fd "lseek", fd, |o| shim().lseek(&o, off, whence).unwrap_or_else(fail));

    fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t => (same_as lseek64);

    fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t => {
        if let Some(_g) = either_lib("sendfile", out, inp) {
            // SAFETY: sendfile64's caller passes each offset pointer NULL or pointing to an
            // `off_t` it may write.
            return size(unsafe { copy_between(inp, off, out, std::ptr::null_mut(), n) });
        }
        pass!()
    }

    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t
        => (same_as sendfile64);

    fn copy_file_range(
        a: c_int,
        ao: *mut off_t,
        b: c_int,
        bo: *mut off_t,
        n: size_t,
        fl: c_uint,
    ) -> ssize_t => {
        if let Some(_g) = either_lib("copy_file_range", a, b) {
            if fl != 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: copy_file_range's caller passes each offset pointer NULL or pointing to an
            // `off_t` it may write.
            return size(unsafe { copy_between(a, ao, b, bo, n) });
        }
        pass!()
    }

    fn splice(a: c_int, ao: *mut off_t, b: c_int, bo: *mut off_t, n: size_t, fl: c_uint) -> ssize_t
        => {
        if let Some(_g) = either_lib("splice", a, b) {
            // SAFETY: splice's caller passes each offset pointer NULL or pointing to an `off_t` it
            // may write.
            return size(unsafe { copy_between(a, ao, b, bo, n) });
        }
        pass!()
    }
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> VfsResult<&'a [libc::iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 || iov.is_null() {
        return Ok(&[]);
    }
    // SAFETY: the caller passes `n` iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// Vector reads and writes, one buffer after another; `off` `None` uses and moves the offset.
unsafe fn vector_io(
    o: &Ofd,
    iov: *const libc::iovec,
    n: c_int,
    off: Option<u64>,
    writing: bool,
) -> VfsResult<usize> {
    // SAFETY: this function's caller passes `n` iovecs at `iov`, each a buffer valid for its
    // length.
    let v = unsafe { iovecs(iov, n) }?;
    let s = shim();
    let mut done = 0usize;
    for b in v {
        let r = if writing {
            // SAFETY: each iovec is a readable buffer.
            let buf = unsafe { slice(b.iov_base, b.iov_len) };
            match off {
                Some(o0) => s.pwrite(o, buf, o0 + done as u64),
                None => s.write(o, buf),
            }
        } else {
            // SAFETY: each iovec is a writable buffer.
            let buf = unsafe { slice_mut(b.iov_base, b.iov_len) };
            match off {
                Some(o0) => s.pread(o, buf, o0 + done as u64),
                None => s.read(o, buf),
            }
        };
        match r {
            Ok(k) => {
                done += k;
                if k < b.iov_len {
                    break;
                }
            }
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

unsafe fn pvector(
    name: &'static str,
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    writing: bool,
    flags: c_int,
) -> Option<ssize_t> {
    let (_g, o) = lib_fd(name, fd)?;
    // preadv2/pwritev2 take -1 for "the current offset".
    let at = if off == -1 {
        None
    } else if off < 0 {
        return Some(fail(libc::EINVAL));
    } else {
        Some(off as u64)
    };
    // RWF_HIPRI and RWF_NOWAIT change nothing for a pool; RWF_DSYNC/RWF_SYNC sync after a write;
    // RWF_APPEND and flags this library does not know are refused, as the kernel does.
    let known = libc::RWF_HIPRI | libc::RWF_NOWAIT | libc::RWF_DSYNC | libc::RWF_SYNC;
    if flags & !known != 0 {
        return Some(fail(shim().unsupported(name, libc::EOPNOTSUPP)));
    }
    // SAFETY: this function's caller passes `n` iovecs at `iov`, each a buffer valid for its
    // length.
    let r = unsafe { vector_io(&o, iov, n, at, writing) };
    if writing && flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
        if let Err(e) = shim().fsync(&o) {
            return Some(fail(e));
        }
    }
    Some(size(r))
}

/// Reads from any descriptor (library or kernel) at `off` (or its offset).
unsafe fn read_any(fd: c_int, buf: &mut [u8], off: Option<u64>) -> VfsResult<usize> {
    let s = shim();
    if let Some(o) = s.ofd(fd) {
        return match off {
            Some(at) => s.pread(&o, buf, at),
            None => s.read(&o, buf),
        };
    }
    // SAFETY: `buf` is writable for its length.
    let n = unsafe {
        match off {
            Some(at) => real::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), at as off_t),
            None => real::read(fd, buf.as_mut_ptr().cast(), buf.len()),
        }
    };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

unsafe fn write_any(fd: c_int, buf: &[u8], off: Option<u64>) -> VfsResult<usize> {
    let s = shim();
    if let Some(o) = s.ofd(fd) {
        return match off {
            Some(at) => s.pwrite(&o, buf, at),
            None => s.write(&o, buf),
        };
    }
    // SAFETY: `buf` is readable for its length.
    let n = unsafe {
        match off {
            Some(at) => real::pwrite64(fd, buf.as_ptr().cast(), buf.len(), at as off_t),
            None => real::write(fd, buf.as_ptr().cast(), buf.len()),
        }
    };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// Copies up to `n` bytes between descriptors through a buffer, updating the offsets given.
unsafe fn copy_between(
    inp: c_int,
    in_off: *mut off_t,
    out: c_int,
    out_off: *mut off_t,
    n: size_t,
) -> VfsResult<usize> {
    let mut buf = vec![0u8; n.min(1 << 20)];
    let mut done = 0usize;
    while done < n {
        let want = buf.len().min(n - done);
        // SAFETY: offsets are the caller's pointers when non-null.
        let ioff = if in_off.is_null() {
            None
        } else {
            Some(unsafe { *in_off } as u64 + done as u64)
        };
        // SAFETY: `buf` is a live slice; the descriptors need no promise.
        let got = match unsafe { read_any(inp, &mut buf[..want], ioff) } {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        };
        let mut w = 0;
        while w < got {
            // SAFETY: as above.
            let ooff = if out_off.is_null() {
                None
            } else {
                Some(unsafe { *out_off } as u64 + (done + w) as u64)
            };
            // SAFETY: `buf` is a live slice; the descriptors need no promise.
            match unsafe { write_any(out, &buf[w..got], ooff) } {
                Ok(k) => w += k,
                Err(e) if done + w == 0 => return Err(e),
                Err(_) => {
                    done += w;
                    return Ok(done);
                }
            }
        }
        done += got;
        if got < want {
            break;
        }
    }
    // SAFETY: the caller's offset pointers.
    unsafe {
        if !in_off.is_null() {
            *in_off += done as off_t;
        }
        if !out_off.is_null() {
            *out_off += done as off_t;
        }
    }
    Ok(done)
}

fn either_lib(name: &'static str, a: c_int, b: c_int) -> Option<Guard> {
    let g = enter()?;
    let s = shim();
    let lib = s.is_fd(a) || s.is_fd(b);
    count(name, lib);
    lib.then_some(g)
}
