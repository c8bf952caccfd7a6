//! The one place for `unsafe` code and raw system calls. Everything here is a small safe wrapper with
//! a `// SAFETY:` line on each `unsafe` block; the rest of the crate is `#![deny(unsafe_code)]`.
//!
//! Submodules by area: `time` (clocks and absolute sleeps), `file` (allocation, flushing, advice),
//! `proc` (memory locking, scheduling, affinity), `fs` (file system facts for `doctor`), `mmap`
//! (shared file mappings for the recorder).

pub mod file;
pub mod fs;
pub mod mmap;
pub mod proc;
pub mod time;

use std::io;

/// Turns a libc-style return value (`-1` and `errno` on failure) into an `io::Result`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
