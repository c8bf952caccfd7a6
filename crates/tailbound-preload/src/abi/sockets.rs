//! Unix sockets at library paths (`bind`, `connect`): the node is the pool's, the socket the
//! kernel's, bound to an abstract address the shim derives from the node
//! ([`crate::vfs::nodes`]).

use std::ffi::CString;

use libc::{c_int, sockaddr, sockaddr_un, socklen_t};

use crate::abi::base::{fail, lib_path, shim};
use crate::vfs::{LibPath, VfsResult};

/// The path of a Unix address that names a file (not an abstract or unnamed one).
///
/// # Safety
/// `addr` is NULL or points to `len` readable bytes.
unsafe fn unix_path(addr: *const sockaddr, len: socklen_t) -> Option<CString> {
    let len = len as usize;
    let at = std::mem::offset_of!(sockaddr_un, sun_path);
    if addr.is_null() || len <= at || len > std::mem::size_of::<sockaddr_un>() {
        return None;
    }
    // SAFETY: `len` readable bytes at `addr`, per the contract; the family is its first field.
    let family = unsafe { (*addr).sa_family };
    if c_int::from(family) != libc::AF_UNIX {
        return None;
    }
    // SAFETY: as above: the bytes after the family, up to `len`.
    let path = unsafe { std::slice::from_raw_parts(addr.cast::<u8>().add(at), len - at) };
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    if path.is_empty() {
        return None;
    }
    CString::new(path).ok()
}

/// An abstract Unix address with `name`.
fn abstract_addr(name: &[u8]) -> VfsResult<(sockaddr_un, socklen_t)> {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut a: sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() + 1 > a.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in a.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::offset_of!(sockaddr_un, sun_path) + 1 + name.len();
    Ok((a, len as socklen_t))
}

/// Runs `call` with the kernel's address for a library path, or returns `None` for any other
/// address.
///
/// # Safety
/// As [`unix_path`].
unsafe fn on_library_path(
    name: &'static str,
    addr: *const sockaddr,
    len: socklen_t,
    call: impl FnOnce(&LibPath) -> c_int,
) -> Option<c_int> {
    // SAFETY: the caller's contract.
    let path = unsafe { unix_path(addr, len) }?;
    // SAFETY: a NUL-terminated copy of the path.
    let (_g, loc) = unsafe { lib_path(name, libc::AT_FDCWD, path.as_ptr()) }?;
    Some(match loc {
        Ok(l) => call(&l),
        Err(e) => fail(e),
    })
}

hooks! {
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int => {
        // SAFETY: bind(2)'s caller passes `len` readable bytes at `addr`.
        let served = unsafe {
            on_library_path("bind", addr, len, |l| {
                let (a, alen) = match shim().bind_socket(l).and_then(|n| abstract_addr(&n)) {
                    Ok(a) => a,
                    Err(e) => return fail(e),
                };
                // SAFETY: the program's socket and an address of ours with its length.
                let r = crate::real::bind(fd, (&a as *const sockaddr_un).cast(), alen);
                if r != 0 {
                    let errno = crate::real::errno();
                    shim().unbind_socket(l);
                    crate::real::set_errno(errno);
                }
                r
            })
        };
        served.unwrap_or_else(|| pass!())
    }

    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int => {
        // SAFETY: connect(2)'s caller passes `len` readable bytes at `addr`.
        let served = unsafe {
            on_library_path("connect", addr, len, |l| {
                match shim().socket_at(l).and_then(|n| abstract_addr(&n)) {
                    // SAFETY: the program's socket and an address of ours with its length.
                    Ok((a, alen)) => {
                        crate::real::connect(fd, (&a as *const sockaddr_un).cast(), alen)
                    }
                    Err(e) => fail(e),
                }
            })
        };
        served.unwrap_or_else(|| pass!())
    }
}
