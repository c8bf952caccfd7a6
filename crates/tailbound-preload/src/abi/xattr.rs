//! Extended attributes: tbfs keeps none yet, so every xattr call on a library path or descriptor
//! fails with `ENOTSUP` (what a file system without xattr support answers); the rest pass through.

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::abi::base::{fail, refused, shim};

hooks! {
    fn getxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t
        => (path "getxattr", libc::AT_FDCWD, p, |loc| {
            refused("getxattr", loc, libc::ENOTSUP) as ssize_t
        });

    fn lgetxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t
        => (path "lgetxattr", libc::AT_FDCWD, p, |loc| {
            refused("lgetxattr", loc, libc::ENOTSUP) as ssize_t
        });

    fn setxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int
        => (path "setxattr", libc::AT_FDCWD, p, |loc| {
            refused("setxattr", loc, libc::ENOTSUP)
        });

    fn lsetxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int
        => (path "lsetxattr", libc::AT_FDCWD, p, |loc| {
            refused("lsetxattr", loc, libc::ENOTSUP)
        });

    fn listxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t
        => (path "listxattr", libc::AT_FDCWD, p, |loc| {
            refused("listxattr", loc, libc::ENOTSUP) as ssize_t
        });

    fn llistxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t
        => (path "llistxattr", libc::AT_FDCWD, p, |loc| {
            refused("llistxattr", loc, libc::ENOTSUP) as ssize_t
        });

    fn removexattr(p: *const c_char, n: *const c_char) -> c_int
        => (path "removexattr", libc::AT_FDCWD, p, |loc| {
            refused("removexattr", loc, libc::ENOTSUP)
        });

    fn lremovexattr(p: *const c_char, n: *const c_char) -> c_int
        => (path "lremovexattr", libc::AT_FDCWD, p, |loc| {
            refused("lremovexattr", loc, libc::ENOTSUP)
        });

    fn fgetxattr(fd: c_int, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t
        => (fd "fgetxattr", fd, |_o| {
            fail::<c_int>(shim().unsupported("fgetxattr", libc::ENOTSUP)) as ssize_t
        });

    fn fsetxattr(fd: c_int, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int
        => (fd "fsetxattr", fd, |_o| {
            fail::<c_int>(shim().unsupported("fsetxattr", libc::ENOTSUP))
        });

    fn flistxattr(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t => (fd "flistxattr", fd, |_o| {
        fail::<c_int>(shim().unsupported("flistxattr", libc::ENOTSUP)) as ssize_t
    });

    fn fremovexattr(fd: c_int, n: *const c_char) -> c_int => (fd "fremovexattr", fd, |_o| {
        fail::<c_int>(shim().unsupported("fremovexattr", libc::ENOTSUP))
    });
}
