//! The one place for `unsafe` code and raw system calls. Everything here is a small safe wrapper with
//! a `// SAFETY:` line on each `unsafe` block; the rest of the crate is `#![deny(unsafe_code)]`.
//!
//! Submodules by area: `time` (clocks and absolute sleeps), `file` (allocation, flushing, advice),
//! `proc` (memory locking, scheduling, affinity), `ioprio` (kernel I/O priorities), `fs` (file system facts for `doctor`), `mmap`
//! (shared file mappings for the recorder and memory pools), `uring` (io_uring for the file backend),
//! `blockdev_bytes` (the size of a block device).

pub mod file;
pub mod fs;
pub mod ioprio;
pub mod mmap;
pub mod proc;
pub mod sock;
pub mod time;
pub mod uring;

use std::io;

/// Turns a libc-style return value (`-1` and `errno` on failure) into an `io::Result`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A new memfd named `name`, close-on-exec and unsealed (its size may change): memory a server
/// shares with its clients, which open it as `/proc/PID/fd/N`.
pub fn memfd(name: &std::ffi::CStr) -> io::Result<std::fs::File> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: `name` is NUL-terminated (a CStr) and MFD_CLOEXEC a valid flag; the result is
    // checked before use.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The size in bytes of a block device (`BLKGETSIZE64`).
pub fn blockdev_bytes(file: &std::fs::File) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at a live local.
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut bytes as *mut u64) })?;
    Ok(bytes)
}
