//! Every `unsafe` of the leases: the generation table's memfd and its mapping (the server's,
//! writable), read-only mappings of it and of the pool (a client's), the words as atomics,
//! byte copies out of the pool, and taking descriptors off the session's socket.
//!
//! A client's mappings are of memory another process writes at any time: no Rust reference
//! to their bytes is handed out, bytes are copied out, words are read only as atomics, and
//! every offset is checked against the mapping's length here.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicU64;

use crate::sys::cvt;

/// A `MAP_SHARED` mapping of the first `len` bytes of a file.
#[derive(Debug)]
pub(super) struct Map {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until drop, reached only through
// atomics and raw byte copies, which are sound from any thread (another process writes it
// anyway, so no access assumes the bytes hold still).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// The server's table: a new memfd of `len` zero bytes, sealed so it can neither shrink
    /// nor grow (a client's load can never fault), mapped writable.
    pub fn table(len: usize) -> io::Result<(File, Map)> {
        let name = c"tailbound-leases";
        // SAFETY: `name` is a NUL-terminated literal; the flags are valid memfd_create flags and
        // the result is checked.
        let fd = cvt(unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        })?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own, with an integer argument.
        cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
        let map = Map::of(&file, len, libc::PROT_READ | libc::PROT_WRITE)?;
        Ok((file, map))
    }

    /// A client's read-only mapping of `len` bytes of `file` (the table or the pool), refused
    /// if the file is shorter.
    pub fn read_only(file: &File, len: usize) -> io::Result<Map> {
        let have = file.metadata()?.len();
        if have < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{have} bytes where the server said {len}"),
            ));
        }
        Map::of(file, len, libc::PROT_READ)
    }

    fn of(file: &File, len: usize, prot: libc::c_int) -> io::Result<Map> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses (null hint) of a descriptor
        // we own; the result is checked against MAP_FAILED.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            addr: addr.cast(),
            len,
        })
    }

    /// The 64-bit word at byte `offset`, or `None` outside the mapping or unaligned.
    pub fn word(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: the word lies inside the live mapping (checked above) and is 8-aligned (the
        // mapping is page-aligned); the reference lives no longer than `self`, which keeps the
        // mapping, and the word is only ever used as an atomic, here and in the other process.
        // A read-only mapping's words are only loaded: a 64-bit atomic load is a plain load on
        // the 64-bit targets tailbound builds for, allowed on read-only memory.
        Some(unsafe { &*self.addr.add(offset).cast::<AtomicU64>() })
    }

    /// Copies `out.len()` bytes from `offset`; `false` (nothing copied) outside the mapping.
    pub fn copy(&self, offset: u64, out: &mut [u8]) -> bool {
        let Ok(offset) = usize::try_from(offset) else {
            return false;
        };
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the source range is inside the live mapping (checked above) and `out` is a
        // distinct private buffer of the length copied. The server may be writing the source
        // meanwhile (a segment written again): the bytes are plain `u8`s, any value is valid,
        // and the caller keeps them only if the generation words it checks after the copy are
        // unchanged (a seqlock).
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr(), out.len())
        };
        true
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are exactly what mmap returned, unmapped once, here; no reference
        // into the mapping outlives `self` (words borrow it).
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// `file` opened again read-only through /proc: a new description that cannot be mapped
/// writable or written, for a client.
pub(super) fn reopen_read_only(file: &File) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Receives one byte and its descriptors on the socket `fd` (borrowed, not closed).
pub(super) fn recv_on(fd: RawFd) -> io::Result<Option<(u8, Vec<OwnedFd>)>> {
    // SAFETY: the caller keeps `fd` open for the call; ManuallyDrop keeps this temporary
    // stream from closing it.
    let stream = ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
    super::ring::recv_memfd(&stream)
}
