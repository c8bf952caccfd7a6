//! Every `unsafe` of the ring transport: the sealed memfd, its shared mapping, 32-bit atomics and
//! byte copies at offsets into it, the futex calls on its words, and passing its descriptor over
//! the Unix socket with `SCM_RIGHTS`.
//!
//! The mapping is shared with another process that may write anything into it at any time, so
//! nothing here hands out a Rust reference to its bytes: bytes are copied in and out, words are
//! touched only as atomics, and every offset is checked against the mapping's length here.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::sys::cvt;

/// A new memfd of `len` zero bytes named `name`, sealed so it can neither shrink nor grow: a
/// process that maps it can never fault on a load another process's resize made.
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, len: usize) -> io::Result<File> {
    // SAFETY: `name` is NUL-terminated; the flags are valid memfd_create flags and the result is
    // checked.
    let fd = cvt(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(len as u64)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(file)
}

/// A `MAP_SHARED` read-write mapping of a whole memfd.
#[derive(Debug)]
pub(crate) struct Mapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until drop; it is reached only through
// atomics and raw byte copies, which are sound from any thread (another process writes into it
// anyway, so no access assumes the bytes hold still).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new memfd of `len` bytes, sealed so that neither side can shrink or grow it (a shrink
    /// would turn the other side's loads into SIGBUS), and its mapping.
    pub fn create(len: usize) -> io::Result<(File, Mapping)> {
        let file = sealed_memfd(c"tailbound-ring", len)?;
        let map = Mapping::map(&file, len)?;
        Ok((file, map))
    }

    /// Maps `len` bytes of a memfd another process made. Refused unless it is sealed against
    /// shrinking (so no load through the mapping can fault later) and at least `len` long.
    pub fn attach(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: fcntl on a descriptor we own; F_GET_SEALS takes no argument and fails with
        // EINVAL on anything that is not a memfd.
        let seals = cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) })
            .map_err(|e| io::Error::new(e.kind(), format!("not a sealed memfd: {e}")))?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the ring's memfd is not sealed against shrinking",
            ));
        }
        let have = file.metadata()?.len();
        if have < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the ring's memfd holds {have} bytes, its header asks for {len}"),
            ));
        }
        Mapping::map(file, len)
    }

    fn map(file: &File, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses (null hint) of a descriptor we
        // own; the result is checked against MAP_FAILED.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            addr: addr.cast(),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The 32-bit word at byte `offset`, or `None` outside the mapping or unaligned.
    pub fn word(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || offset.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: the word lies inside the live mapping (checked above) and is 4-aligned (the
        // mapping is page-aligned); the reference lives no longer than `self`, which keeps the
        // mapping, and the word is only ever used as an atomic, here and in the other process.
        Some(unsafe { &*self.addr.add(offset).cast::<AtomicU32>() })
    }

    /// Copies `out.len()` bytes from `offset`; `false` (and nothing copied) outside the mapping.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the source range is inside the live mapping (checked above) and `out` is a
        // distinct private buffer of the length copied. The other process may be writing the
        // source meanwhile: the copy then holds garbage, which the caller validates.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Appends `len` bytes from `offset` to `out`, without zeroing them first; `false` (and
    /// nothing appended) outside the mapping.
    pub fn read_append(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> bool {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return false;
        }
        out.reserve(len);
        let at = out.len();
        // SAFETY: the source range is inside the live mapping (checked above); the destination
        // is the vector's spare capacity, reserved above for `len` bytes and distinct from the
        // mapping. The copy initializes those bytes (any value is a valid `u8`), so the length
        // may then cover them. A concurrent writer in the other process only makes them garbage.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr().add(at), len);
            out.set_len(at + len);
        }
        true
    }

    /// The `len` bytes at `offset`, read where they lie; `None` outside the mapping. Only for a
    /// range this process never writes (the request data area, on the server): the other
    /// process may still write it meanwhile, and a reader then sees some mix of its old and new
    /// bytes, which it must treat as it treats any bytes from that process.
    pub fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: the range is inside the live mapping (checked above), which lives as long as
        // `self`, so the slice cannot outlive it; every value is a valid `u8`; nothing in this
        // process writes the range (the caller's promise), so no Rust write aliases it.
        Some(unsafe { std::slice::from_raw_parts(self.addr.add(offset), len) })
    }

    /// Copies `bytes` to `offset`; `false` (and nothing copied) outside the mapping.
    pub fn write(&self, offset: usize, bytes: &[u8]) -> bool {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the destination range is inside the live mapping (checked above) and never
        // aliased by a Rust reference; `bytes` is a distinct buffer of the length copied.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr.add(offset), bytes.len())
        };
        true
    }
}

impl Mapping {
    /// Puts private zeroed pages in place of the shared ones, at the same addresses: this
    /// process stops seeing the other's writes, and whatever it does through this value later
    /// (its unmapping included) reaches only its own pages. For a forked child's copy of its
    /// parent's mapping, which must leave the parent's rings as they are.
    pub fn forsake(&self) -> io::Result<()> {
        // SAFETY: MAP_FIXED over exactly the range this value mapped, which it still owns, so no
        // other mapping is replaced; the words `word` handed out stay valid memory (private now).
        let addr = unsafe {
            libc::mmap(
                self.addr.cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Points descriptor `fd` at /dev/null in this process: the file it referred to (a socket a
/// forked child shares with its parent) loses this process's reference, while the number stays
/// taken, so whatever owns it closes /dev/null later and never a descriptor opened since.
pub fn detach_fd(fd: RawFd) -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    // SAFETY: dup3 of a descriptor we own onto `fd`, which its owner keeps owning; the old
    // file's reference held by `fd` is dropped by the kernel.
    cvt(unsafe { libc::dup3(null.as_raw_fd(), fd, libc::O_CLOEXEC) })?;
    Ok(())
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `map` mapped; no reference into it outlives `self`.
        unsafe {
            libc::munmap(self.addr.cast(), self.len);
        }
    }
}

/// Sleeps while `word` holds `expected`, for at most `timeout`: returns early when woken, when
/// the word differs, on a signal, or spuriously; the caller looks again. Not a private futex:
/// the waker may be the other process.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `word` is a live, aligned 32-bit word of a shared mapping and `ts` a live local;
    // FUTEX_WAIT only reads both. Its result (woken, EAGAIN, ETIMEDOUT, EINTR) needs no handling:
    // the caller re-reads the word either way.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// The futex operations with a waiter's bits (linux/futex.h), which the `libc` crate names
/// only for Android.
const FUTEX_WAIT_BITSET: libc::c_int = 9;
const FUTEX_WAKE_BITSET: libc::c_int = 10;

/// [`futex_wait`] for a waiter that only wakes named by one of `bits` ([`futex_wake_bits`]), or
/// by a plain [`futex_wake`]; `true` if it slept until `timeout` ran out.
pub fn futex_wait_bits(word: &AtomicU32, expected: u32, timeout: Duration, bits: u32) -> bool {
    // FUTEX_WAIT_BITSET takes an absolute time on the monotonic clock.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live local clock_gettime writes; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let ts = libc::timespec {
        tv_sec: now.tv_sec
            + timeout.as_secs() as libc::time_t
            + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word of a shared mapping and `ts` a live local;
    // FUTEX_WAIT_BITSET only reads both. As for `futex_wait`, the caller re-reads the word
    // whatever the result.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAIT_BITSET,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            bits,
        )
    };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

/// Wakes every thread, of any process, sleeping on `word` whose bits share one with `bits`
/// (and every plain [`futex_wait`]er); returns how many it woke.
pub fn futex_wake_bits(word: &AtomicU32, bits: u32) -> usize {
    // SAFETY: `word` is a live, aligned 32-bit word; FUTEX_WAKE_BITSET does not access memory
    // through it beyond identifying the futex.
    let woken = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAKE_BITSET,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        )
    };
    usize::try_from(woken).unwrap_or(0)
}

/// Wakes up to `n` threads, of any process, sleeping on `word`.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a live, aligned 32-bit word; FUTEX_WAKE does not access memory through
    // it beyond identifying the futex.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Sends one byte `tag` with the descriptor `fd` attached (`SCM_RIGHTS`), without `SIGPIPE`.
pub fn send_fd(stream: &UnixStream, tag: u8, fd: &File) -> io::Result<()> {
    let mut byte = [tag];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    if space > std::mem::size_of_val(&control) {
        return Err(io::Error::other("control message buffer too small"));
    }
    // SAFETY: msghdr is plain data; all-zero is a valid empty value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which has room for one header and one descriptor
    // (checked above), so CMSG_FIRSTHDR is non-null and CMSG_DATA lies inside `control`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` and everything it points at (`iov`, `byte`, `control`) are live locals.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one byte and the descriptors sent with it. `Ok(None)` at the end of the stream. Every
/// descriptor that arrives is owned (closed on drop) whatever the caller makes of it; a message
/// whose control part was cut short is an error.
pub fn recv_fds(stream: &UnixStream) -> io::Result<Option<(u8, Vec<OwnedFd>)>> {
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; all-zero is a valid empty value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: `msg` and the buffers it points at are live locals of the lengths given.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with `msg_controllen` bytes of well-formed control
    // messages; CMSG_FIRSTHDR/NXTHDR stay inside it and return null at its end. Each SCM_RIGHTS
    // payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors, now ours, read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "descriptors cut short in passing",
        ));
    }
    if n == 0 {
        return Ok(None);
    }
    Ok(Some((byte[0], fds)))
}
