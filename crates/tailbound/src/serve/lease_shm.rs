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
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
        let file = super::ring::sealed_memfd(c"tailbound-leases", len)?;
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

    /// The 32-bit word at byte `offset` (the liveness word), or `None` outside or unaligned.
    pub fn word32(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: as `word`: inside the live mapping, 4-aligned, used only as an atomic (by the
        // kernel too, which writes it with a compare-and-exchange when the holder dies).
        Some(unsafe { &*self.addr.add(offset).cast::<AtomicU32>() })
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

/// The bit the kernel sets in a robust futex word whose holder died (`FUTEX_OWNER_DIED`).
pub(super) const OWNER_DIED: u32 = 0x4000_0000;

#[repr(C)]
struct RobustList {
    next: *mut RobustList,
}

#[repr(C)]
struct RobustListHead {
    list: RobustList,
    futex_offset: libc::c_long,
    list_op_pending: *mut RobustList,
}

/// Holds the word at `offset` of `map` as a robust futex from a thread of its own until `stop`
/// says so: the word holds the thread's id, and when the thread ends, however the process
/// ends (`SIGKILL` too), the kernel sets [`OWNER_DIED`] in it. A client reads the word to
/// know, without a system call, that the server is still there.
pub(super) fn hold_liveness(
    map: std::sync::Arc<Map>,
    offset: usize,
    stop: std::sync::mpsc::Receiver<()>,
) -> io::Result<std::thread::JoinHandle<()>> {
    if map.word32(offset).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no liveness word",
        ));
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("tbfs-lease-live".into())
        .spawn(move || {
            let word = map
                .word32(offset)
                .expect("checked before the thread started");
            // SAFETY: gettid takes no argument and cannot fail.
            let tid = unsafe { libc::gettid() } as u32;
            // The list lives as long as the thread and after it: the kernel walks it as the
            // thread exits, after this closure returns, so it is leaked (two words, once per
            // server).
            let entry: &'static mut RobustList = Box::leak(Box::new(RobustList {
                next: std::ptr::null_mut(),
            }));
            let head: &'static mut RobustListHead = Box::leak(Box::new(RobustListHead {
                list: RobustList {
                    next: std::ptr::null_mut(),
                },
                futex_offset: 0,
                list_op_pending: std::ptr::null_mut(),
            }));
            let entry_ptr: *mut RobustList = entry;
            head.list.next = entry_ptr;
            entry.next = &mut head.list;
            head.futex_offset = (word as *const AtomicU32 as isize - entry_ptr as isize) as _;
            word.store(tid, Ordering::SeqCst);
            // SAFETY: `head` is a well-formed robust list head (a circular list of one entry
            // whose futex word, at `futex_offset` from it, is `word`, inside the mapping that
            // this thread keeps alive through `map` until it exits), valid for the thread's
            // whole life and after (leaked). This thread takes no robust pthread mutex, so
            // replacing the C library's list for it loses nothing.
            let set = unsafe {
                libc::syscall(
                    libc::SYS_set_robust_list,
                    head as *mut RobustListHead,
                    std::mem::size_of::<RobustListHead>(),
                )
            };
            let _ = ready_tx.send(if set == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            });
            if set == 0 {
                // Until the server stops (or its end drops the sender).
                let _ = stop.recv();
            }
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(io::Error::other("the liveness thread ended early")),
    }
}
