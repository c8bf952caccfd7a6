//! The interposed C symbols. Each one turns raw pointers into Rust values, asks [`crate::vfs`]
//! whether the path or descriptor is a library one, and either serves it there or calls the real
//! libc function ([`real`]).
//!
//! A thread-local reentrancy guard makes every libc call the shim itself makes (opening the pool,
//! allocating, the engine's own I/O) go straight to libc.

#![allow(clippy::missing_safety_doc)] // each symbol has its libc function's contract

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use libc::{c_char, c_int, c_long, c_uint, c_ulong, c_void, mode_t, off_t, size_t, ssize_t};

use tailbound::tbfs::SetAttr;

use crate::real;
use crate::vfs::{Attr, Loc, Ofd, Shim, Where, R};

// ---- guard, state, errno ----

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Held while the shim works on a call; a nested call on the same thread passes through. In
/// catch-all mode it also lets the thread's system calls through (the selector it found is kept).
pub struct Guard(u8);

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
        crate::catchall::restore(self.0);
    }
}

fn enter() -> Option<Guard> {
    BUSY.with(|b| {
        if b.get() {
            None
        } else {
            // Calls are let through before the flag is set (and the flag cleared before they are
            // blocked again), so a signal handler that runs in between never traps while busy.
            let prev = crate::catchall::allow();
            b.set(true);
            Some(Guard(prev))
        }
    })
}

/// Whether the shim is working on a call on this thread.
pub fn busy() -> bool {
    BUSY.with(|b| b.get())
}

static SHIM: OnceLock<Shim> = OnceLock::new();
static REPORT: AtomicBool = AtomicBool::new(false);

extern "C" fn before_fork() {
    boundary(|| {
        real::hold_parked_for_fork();
    })
}

extern "C" fn in_forking_parent() {
    boundary(|| {
        real::release_parked_after_fork();
    })
}

extern "C" fn in_forked_child() {
    boundary(|| {
        real::release_parked_after_fork();
        let _g = enter();
        if let Some(s) = SHIM.get() {
            s.after_fork_in_child();
        }
    })
}

fn sh() -> &'static Shim {
    SHIM.get_or_init(|| {
        let s = Shim::from_env();
        REPORT.store(s.report, Ordering::Relaxed);
        // SAFETY: registers a plain function with no captured state.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(in_forking_parent),
                Some(in_forked_child),
            )
        };
        s
    })
}

pub fn errno() -> i32 {
    // SAFETY: the calling thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

fn fail<T: From<i8>>(e: i32) -> T {
    set_errno(e);
    T::from(-1)
}

fn int(r: R<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn num(r: R<i32>) -> c_int {
    r.unwrap_or_else(fail)
}

fn size(r: R<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e),
    }
}

// ---- the panic boundary ----

/// What a hook returns when the shim panicked inside it: the libc function's error value, `-1`
/// or NULL with `errno` EIO.
pub trait Failed {
    fn failed() -> Self;
}

impl Failed for c_int {
    fn failed() -> c_int {
        fail(libc::EIO)
    }
}

impl Failed for ssize_t {
    fn failed() -> ssize_t {
        fail(libc::EIO)
    }
}

/// `off_t` and `c_long`.
impl Failed for i64 {
    fn failed() -> i64 {
        fail(libc::EIO)
    }
}

impl<T> Failed for *mut T {
    fn failed() -> *mut T {
        set_errno(libc::EIO);
        std::ptr::null_mut()
    }
}

impl Failed for () {
    fn failed() {}
}

/// Runs a hook's body. A panic inside it (a bug in the shim or the engine) must not unwind into
/// the program's frames, which cannot take it: the call fails as [`Failed`] says, every pool the
/// shim has open is poisoned (`panicked`), and the program goes on. A hook that only calls
/// another hook (`pread` calls `pread64`) has no boundary of its own: the one it calls catches.
#[inline(always)]
pub fn boundary<T: Failed>(body: impl FnOnce() -> T) -> T {
    boundary_or(T::failed, body)
}

/// [`boundary`] for a function whose error value is not its type's usual one.
#[inline(always)]
pub fn boundary_or<T>(failed: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    match tailbound::panics::catch(body) {
        Ok(v) => v,
        Err(p) => {
            panicked(&p);
            failed()
        }
    }
}

/// The error number itself, for functions that return it (`posix_fallocate`, `readdir_r`).
pub fn eio_number() -> c_int {
    libc::EIO
}

/// `value` with `errno` EIO (`mmap`'s `MAP_FAILED`, `isatty`'s 0).
fn eio_and<T>(value: T) -> impl FnOnce() -> T {
    move || {
        set_errno(libc::EIO);
        value
    }
}

/// After a panic in a hook: the engine may have been stopped half way through a change, so no
/// pool the shim has open can be trusted any more. Each is poisoned (its calls fail with EIO
/// until it is reopened) and stderr says so, under the panic's own message.
#[cold]
#[inline(never)]
fn panicked(p: &tailbound::panics::Panic) {
    let _g = enter();
    let reason = format!("a call into the shim {p}");
    match SHIM.get() {
        Some(s) => s.poison_all(&reason),
        None => real::say(&format!("tailbound: {reason}; the call failed with EIO\n")),
    }
}

// ---- per-call counters (TAILBOUND_REPORT=1) ----

static COUNTS: Mutex<BTreeMap<&'static str, (u64, u64)>> = Mutex::new(BTreeMap::new());

fn count(name: &'static str, lib: bool) {
    if !REPORT.load(Ordering::Relaxed) {
        return;
    }
    let mut c = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let e = c.entry(name).or_default();
    if lib {
        e.0 += 1;
    } else {
        e.1 += 1;
    }
}

fn print_report() {
    let c = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    // Processes that never touched a mount (a shell's helpers, say) stay quiet.
    if c.values().all(|&(lib, _)| lib == 0) {
        return;
    }
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let mut out = format!(
        "tailbound: process {} ({}): calls served from tbfs, and passed to the kernel:\n",
        real::pid(),
        comm.trim()
    );
    for (name, (lib, kernel)) in c.iter() {
        out.push_str(&format!("  {name:<20} {lib:>10} {kernel:>10}\n"));
    }
    real::say(&out);
}

// ---- at exit ----

static EXIT_DONE: AtomicBool = AtomicBool::new(false);

/// Flushes stdio (library streams write through the shim), writes back shared mappings and syncs
/// every open pool, once.
fn flush_at_exit(stdio: bool) {
    if EXIT_DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    if stdio {
        // SAFETY: fflush(NULL) flushes every open stream; library streams call back into the shim.
        unsafe { libc::fflush(std::ptr::null_mut()) };
    }
    let _g = enter();
    if let Some(s) = SHIM.get() {
        s.flush_all();
    }
    if REPORT.load(Ordering::Relaxed) {
        print_report();
    }
}

extern "C" fn exit_handler() {
    boundary(|| {
        flush_at_exit(true);
    })
}

/// Runs at `exit` after the program's own `atexit` handlers (it is a destructor of this library).
extern "C" fn library_destructor() {
    boundary(|| {
        flush_at_exit(true);
    })
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = library_destructor;

static ATEXIT_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Called when a pool is first opened: also flush from an `atexit` handler, in case a destructor
/// is skipped.
pub fn register_exit_flush() {
    if !ATEXIT_REGISTERED.swap(true, Ordering::AcqRel) {
        extern "C" {
            fn atexit(f: extern "C" fn()) -> c_int;
        }
        // SAFETY: registers a plain function.
        unsafe { atexit(exit_handler) };
    }
}

// ---- routing helpers ----

unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: the caller passes a NUL-terminated string, as the libc call requires.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

/// A library path: `Some((guard, Ok(loc)))`, or `Some((guard, Err(errno)))` for a refused one;
/// `None` to pass through.
unsafe fn lib_path(name: &'static str, dirfd: c_int, p: *const c_char) -> Option<(Guard, R<Loc>)> {
    let g = enter()?;
    if p.is_null() {
        return None;
    }
    // SAFETY: forwarded contract.
    match sh().resolve(dirfd, unsafe { bytes(p) }) {
        Where::Kernel => {
            count(name, false);
            None
        }
        Where::Lib(loc) => {
            count(name, true);
            Some((g, Ok(loc)))
        }
        Where::Refused(e) => Some((g, Err(e))),
    }
}

/// A library descriptor: `Some((guard, ofd))`, else `None` to pass through.
fn lib_fd(name: &'static str, fd: c_int) -> Option<(Guard, Arc<Ofd>)> {
    let g = enter()?;
    let s = sh();
    match s.ofd(fd) {
        Some(o) => {
            count(name, true);
            Some((g, o))
        }
        None => {
            count(name, false);
            None
        }
    }
}

// ---- open / close ----

/// Every open-like entry point ends here.
unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: forwarded contract.
    if let Some((_g, loc)) = unsafe { lib_path("open", dirfd, path) } {
        return num(loc.and_then(|l| sh().open(&l, flags, mode)));
    }
    // SAFETY: forwarded contract.
    unsafe { real::openat(dirfd, path, flags, mode) }
}

/// An `openat2` on a library path (`None`: not one, pass it on). `RESOLVE_*` flags are not
/// supported there.
pub unsafe fn open_library_path(
    name: &'static str,
    dirfd: c_int,
    path: *const c_char,
    flags: u64,
    mode: u64,
    resolve: u64,
) -> Option<c_int> {
    // SAFETY: forwarded contract.
    let (_g, loc) = unsafe { lib_path(name, dirfd, path) }?;
    Some(num(loc.and_then(|l| {
        if resolve != 0 {
            return Err(sh().unsupported("openat2 with RESOLVE_* flags", libc::EOPNOTSUPP));
        }
        let flags = c_int::try_from(flags).map_err(|_| libc::EINVAL)?;
        let mode = c_uint::try_from(mode).map_err(|_| libc::EINVAL)?;
        sh().open(&l, flags, mode)
    })))
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    boundary(|| {
        if let Some(g) = enter() {
            if let Some(r) = sh().close(fd) {
                count("close", true);
                drop(g);
                return int(r);
            }
            count("close", false);
            if real::is_parked(fd) {
                // Closed, as the program sees it: the number stays reserved for a library open.
                return fail(libc::EBADF);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::close(fd) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    boundary(|| {
        if let Some(_g) = enter() {
            count("close_range", false);
            sh().forget_range(first, last, flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0);
        }
        // SAFETY: forwarded contract.
        unsafe { real::close_range(first, last, flags) }
    })
}

/// glibc's `closefrom` (2.34) calls `close_range` inside libc, where no hook sees it: without this
/// one the program's library descriptors at or above `low` would stay in the shim's table after
/// their reserved numbers were closed, and the kernel could give those numbers to new files.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    boundary(|| {
        if let Some(_g) = enter() {
            count("closefrom", false);
            sh().forget_range(low.max(0) as c_uint, c_uint::MAX, false);
        }
        // SAFETY: forwarded contract.
        unsafe { real::closefrom(low) }
    })
}

// ---- read / write ----

unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: the caller passes a buffer writable for `n` bytes.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
}

unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: the caller passes a buffer readable for `n` bytes.
    unsafe { std::slice::from_raw_parts(buf.cast(), n) }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("read", fd) {
            // SAFETY: forwarded contract.
            return size(sh().read(&o, unsafe { slice_mut(buf, n) }));
        }
        // SAFETY: forwarded contract.
        unsafe { real::read(fd, buf, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _len: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { read(fd, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("write", fd) {
            tailbound::failpoint::hit("shim.write");
            // SAFETY: forwarded contract.
            return size(sh().write(&o, unsafe { slice(buf, n) }));
        }
        // SAFETY: forwarded contract.
        unsafe { real::write(fd, buf, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("pread", fd) {
            if off < 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: forwarded contract.
            return size(sh().pread(&o, unsafe { slice_mut(buf, n) }, off as u64));
        }
        // SAFETY: forwarded contract.
        unsafe { real::pread64(fd, buf, n, off) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pread64(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pread64(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pread64(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("pwrite", fd) {
            if off < 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: forwarded contract.
            return size(sh().pwrite(&o, unsafe { slice(buf, n) }, off as u64));
        }
        // SAFETY: forwarded contract.
        unsafe { real::pwrite64(fd, buf, n, off) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pwrite64(fd, buf, n, off) }
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> R<&'a [libc::iovec]> {
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
) -> R<usize> {
    // SAFETY: forwarded contract.
    let v = unsafe { iovecs(iov, n) }?;
    let s = sh();
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

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("readv", fd) {
            // SAFETY: forwarded contract.
            return size(unsafe { vector_io(&o, iov, n, None, false) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::readv(fd, iov, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("writev", fd) {
            // SAFETY: forwarded contract.
            return size(unsafe { vector_io(&o, iov, n, None, true) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::writev(fd, iov, n) }
    })
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
        return Some(fail(sh().unsupported(name, libc::EOPNOTSUPP)));
    }
    // SAFETY: forwarded contract.
    let r = unsafe { vector_io(&o, iov, n, at, writing) };
    if writing && flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
        if let Err(e) = sh().fsync(&o) {
            return Some(fail(e));
        }
    }
    Some(size(r))
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    boundary(|| {
        if off == -1 {
            return fail(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        unsafe {
            pvector("preadv", fd, iov, n, off, false, 0)
                .unwrap_or_else(|| real::preadv64(fd, iov, n, off))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { preadv64(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    boundary(|| {
        if off == -1 {
            return fail(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        unsafe {
            pvector("pwritev", fd, iov, n, off, true, 0)
                .unwrap_or_else(|| real::pwritev64(fd, iov, n, off))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pwritev64(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    fl: c_int,
) -> ssize_t {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            pvector("preadv2", fd, iov, n, off, false, fl)
                .unwrap_or_else(|| real::preadv64v2(fd, iov, n, off, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    fl: c_int,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { preadv64v2(fd, iov, n, off, fl) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    fl: c_int,
) -> ssize_t {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            pvector("pwritev2", fd, iov, n, off, true, fl)
                .unwrap_or_else(|| real::pwritev64v2(fd, iov, n, off, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    fl: c_int,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { pwritev64v2(fd, iov, n, off, fl) }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("lseek", fd) {
            return sh().lseek(&o, off, whence).unwrap_or_else(fail);
        }
        // SAFETY: forwarded contract.
        unsafe { real::lseek64(fd, off, whence) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: forwarded contract.
    unsafe { lseek64(fd, off, whence) }
}

// ---- stat family ----

unsafe fn put_stat(a: &Attr, st: *mut libc::stat64) {
    // SAFETY: all-zero is a valid stat64.
    let mut s: libc::stat64 = unsafe { std::mem::zeroed() };
    s.st_dev = a.dev;
    s.st_ino = a.ino;
    s.st_nlink = a.nlink;
    s.st_mode = a.mode;
    s.st_uid = a.uid;
    s.st_gid = a.gid;
    s.st_size = a.size as i64;
    s.st_blksize = tailbound::dev::BLOCK_SIZE as i64;
    s.st_blocks = a.blocks512 as i64;
    s.st_atime = a.atime_ns.div_euclid(1_000_000_000);
    s.st_atime_nsec = a.atime_ns.rem_euclid(1_000_000_000);
    s.st_mtime = a.mtime_ns.div_euclid(1_000_000_000);
    s.st_mtime_nsec = a.mtime_ns.rem_euclid(1_000_000_000);
    s.st_ctime = a.ctime_ns.div_euclid(1_000_000_000);
    s.st_ctime_nsec = a.ctime_ns.rem_euclid(1_000_000_000);
    // SAFETY: the caller passes a writable stat buffer.
    unsafe { st.write(s) };
}

fn stat_result(r: R<Attr>, st: *mut libc::stat64) -> c_int {
    match r {
        Ok(a) => {
            if st.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: checked non-null; the caller's buffer.
            unsafe { put_stat(&a, st) };
            0
        }
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat64) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fstat", fd) {
            return stat_result(sh().fstat(&o), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::fstat64(fd, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstat64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat64) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("stat", libc::AT_FDCWD, path) } {
            return stat_result(loc.and_then(|l| sh().stat(&l)), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::stat64(path, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { stat64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat64) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("lstat", libc::AT_FDCWD, path) } {
            return stat_result(loc.and_then(|l| sh().lstat(&l)), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::lstat64(path, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { lstat64(path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_empty() {
            // SAFETY: forwarded contract.
            return unsafe { fstat64(dirfd, st) };
        }
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("fstatat", dirfd, path) } {
            let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
            return stat_result(
                loc.and_then(|l| {
                    if nofollow {
                        sh().lstat(&l)
                    } else {
                        sh().stat(&l)
                    }
                }),
                st,
            );
        }
        // SAFETY: forwarded contract.
        unsafe { real::fstatat64(dirfd, path, st, flags) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstatat64(dirfd, path, st, flags) }
}

// glibc < 2.33 programs call the versioned __xstat family.
#[no_mangle]
pub unsafe extern "C" fn __xstat64(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("stat", libc::AT_FDCWD, path) } {
            return stat_result(loc.and_then(|l| sh().stat(&l)), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::__xstat64(ver, path, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __xstat(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { __xstat64(ver, path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    ver: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("lstat", libc::AT_FDCWD, path) } {
            return stat_result(loc.and_then(|l| sh().lstat(&l)), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::__lxstat64(ver, path, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(ver: c_int, path: *const c_char, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { __lxstat64(ver, path, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fstat", fd) {
            return stat_result(sh().fstat(&o), st);
        }
        // SAFETY: forwarded contract.
        unsafe { real::__fxstat64(ver, fd, st) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { __fxstat64(ver, fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_empty() {
            // SAFETY: forwarded contract.
            return unsafe { fstat64(dirfd, st) };
        }
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("fstatat", dirfd, path) } {
            let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
            return stat_result(
                loc.and_then(|l| {
                    if nofollow {
                        sh().lstat(&l)
                    } else {
                        sh().stat(&l)
                    }
                }),
                st,
            );
        }
        // SAFETY: forwarded contract.
        unsafe { real::__fxstatat64(ver, dirfd, path, st, flags) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { __fxstatat64(ver, dirfd, path, st, flags) }
}

fn ts(ns: i64) -> libc::statx_timestamp {
    // SAFETY: all-zero is a valid statx_timestamp.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = ns.div_euclid(1_000_000_000);
    t.tv_nsec = ns.rem_euclid(1_000_000_000) as u32;
    t
}

unsafe fn put_statx(a: &Attr, out: *mut libc::statx) {
    // SAFETY: all-zero is a valid statx.
    let mut s: libc::statx = unsafe { std::mem::zeroed() };
    s.stx_mask = libc::STATX_BASIC_STATS;
    s.stx_blksize = tailbound::dev::BLOCK_SIZE as u32;
    s.stx_nlink = a.nlink as u32;
    s.stx_uid = a.uid;
    s.stx_gid = a.gid;
    s.stx_mode = a.mode as u16;
    s.stx_ino = a.ino;
    s.stx_size = a.size;
    s.stx_blocks = a.blocks512;
    s.stx_atime = ts(a.atime_ns);
    s.stx_mtime = ts(a.mtime_ns);
    s.stx_ctime = ts(a.ctime_ns);
    s.stx_dev_major = (a.dev >> 32) as u32;
    s.stx_dev_minor = a.dev as u32;
    // SAFETY: the caller passes a writable statx buffer.
    unsafe { out.write(s) };
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut libc::statx,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        let empty = unsafe { bytes(path) }.is_empty();
        let r = if flags & libc::AT_EMPTY_PATH != 0 && empty {
            lib_fd("statx", dirfd).map(|(g, o)| (g, sh().fstat(&o)))
        } else {
            // SAFETY: forwarded contract.
            unsafe { lib_path("statx", dirfd, path) }.map(|(g, loc)| {
                let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
                (
                    g,
                    loc.and_then(|l| {
                        if nofollow {
                            sh().lstat(&l)
                        } else {
                            sh().stat(&l)
                        }
                    }),
                )
            })
        };
        if let Some((_g, r)) = r {
            return match r {
                Ok(a) if !out.is_null() => {
                    // SAFETY: checked non-null; the caller's buffer.
                    unsafe { put_statx(&a, out) };
                    0
                }
                Ok(_) => fail(libc::EFAULT),
                Err(e) => fail(e),
            };
        }
        // SAFETY: forwarded contract.
        unsafe { real::statx(dirfd, path, flags, mask, out) }
    })
}

// ---- statfs / statvfs ----

/// `f_type` of a tbfs mount ("tbfs").
const TBFS_MAGIC: i64 = 0x7462_6673;

fn vfs_of_fd(name: &'static str, fd: c_int) -> Option<(Guard, R<tailbound::tbfs::StatVfs>)> {
    lib_fd(name, fd).map(|(g, o)| (g, sh().statvfs(o.m)))
}

unsafe fn vfs_of_path(
    name: &'static str,
    p: *const c_char,
) -> Option<(Guard, R<tailbound::tbfs::StatVfs>)> {
    // SAFETY: forwarded contract.
    unsafe { lib_path(name, libc::AT_FDCWD, p) }.map(|(g, loc)| {
        (
            g,
            loc.and_then(|l| sh().stat(&l).and_then(|_| sh().statvfs(l.m))),
        )
    })
}

unsafe fn put_statfs(v: &tailbound::tbfs::StatVfs, out: *mut libc::statfs64) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: all-zero is a valid statfs64.
    let mut s: libc::statfs64 = unsafe { std::mem::zeroed() };
    s.f_type = TBFS_MAGIC;
    s.f_bsize = v.block_size as i64;
    s.f_frsize = v.block_size as i64;
    s.f_blocks = v.blocks;
    s.f_bfree = v.blocks_free;
    s.f_bavail = v.blocks_free;
    s.f_files = v.files + v.blocks_free;
    s.f_ffree = v.blocks_free;
    s.f_namelen = v.name_max as i64;
    // SAFETY: checked non-null; the caller's buffer.
    unsafe { out.write(s) };
    0
}

unsafe fn put_statvfs(v: &tailbound::tbfs::StatVfs, out: *mut libc::statvfs64) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: all-zero is a valid statvfs64.
    let mut s: libc::statvfs64 = unsafe { std::mem::zeroed() };
    s.f_bsize = v.block_size;
    s.f_frsize = v.block_size;
    s.f_blocks = v.blocks;
    s.f_bfree = v.blocks_free;
    s.f_bavail = v.blocks_free;
    s.f_files = v.files + v.blocks_free;
    s.f_ffree = v.blocks_free;
    s.f_favail = v.blocks_free;
    s.f_namemax = v.name_max;
    // SAFETY: checked non-null; the caller's buffer.
    unsafe { out.write(s) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn statfs64(p: *const c_char, out: *mut libc::statfs64) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, v)) = unsafe { vfs_of_path("statfs", p) } {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statfs(&v, out) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::statfs64(p, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn statfs(p: *const c_char, out: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { statfs64(p, out) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, out: *mut libc::statfs64) -> c_int {
    boundary(|| {
        if let Some((_g, v)) = vfs_of_fd("fstatfs", fd) {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statfs(&v, out) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::fstatfs64(fd, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, out: *mut libc::statfs64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstatfs64(fd, out) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(p: *const c_char, out: *mut libc::statvfs64) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, v)) = unsafe { vfs_of_path("statvfs", p) } {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statvfs(&v, out) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::statvfs64(p, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(p: *const c_char, out: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { statvfs64(p, out) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, out: *mut libc::statvfs64) -> c_int {
    boundary(|| {
        if let Some((_g, v)) = vfs_of_fd("fstatvfs", fd) {
            // SAFETY: the caller's buffer.
            return v.map_or_else(fail, |v| unsafe { put_statvfs(&v, out) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::fstatvfs64(fd, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, out: *mut libc::statvfs64) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstatvfs64(fd, out) }
}

// ---- access ----

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("access", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().access(&l, mode)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::access(path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("access", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().access(&l, mode)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::euidaccess(path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { euidaccess(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("faccessat", dirfd, path) } {
            return int(loc.and_then(|l| sh().access(&l, mode)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::faccessat(dirfd, path, mode, flags) }
    })
}

// ---- namespace ----

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("mkdir", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().mkdir(&l, mode)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::mkdir(path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("mkdirat", dirfd, path) } {
            return int(loc.and_then(|l| sh().mkdir(&l, mode)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::mkdirat(dirfd, path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("rmdir", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().rmdir(&l)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::rmdir(path) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("unlink", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().unlink(&l)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::unlink(path) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("unlinkat", dirfd, path) } {
            return int(loc.and_then(|l| {
                if flags & libc::AT_REMOVEDIR != 0 {
                    sh().rmdir(&l)
                } else {
                    sh().unlink(&l)
                }
            }));
        }
        // SAFETY: forwarded contract.
        unsafe { real::unlinkat(dirfd, path, flags) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("remove", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| match sh().unlink(&l) {
                Err(libc::EISDIR) => sh().rmdir(&l),
                r => r,
            }));
        }
        // SAFETY: forwarded contract.
        unsafe { real::remove(path) }
    })
}

unsafe fn rename_any(
    name: &'static str,
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_uint,
) -> Option<c_int> {
    let g = enter()?;
    let s = sh();
    // SAFETY: forwarded contract.
    let (wa, wb) = unsafe { (s.resolve(da, bytes(a)), s.resolve(db, bytes(b))) };
    let r = match (wa, wb) {
        (Where::Kernel, Where::Kernel) => {
            count(name, false);
            return None;
        }
        (Where::Refused(e), _) | (_, Where::Refused(e)) => Err(e),
        (Where::Lib(x), Where::Lib(y)) => s.rename(&x, &y, flags),
        // Across file systems: `mv` copies and removes on EXDEV.
        _ => Err(libc::EXDEV),
    };
    count(name, true);
    drop(g);
    Some(int(r))
}

#[no_mangle]
pub unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            rename_any("rename", libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0)
                .unwrap_or_else(|| real::rename(a, b))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            rename_any("renameat", da, a, db, b, 0).unwrap_or_else(|| real::renameat(da, a, db, b))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    fl: c_uint,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            rename_any("renameat2", da, a, db, b, fl)
                .unwrap_or_else(|| real::renameat2(da, a, db, b, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("truncate", libc::AT_FDCWD, path) } {
            return int(loc.and_then(|l| sh().truncate(&l, len)));
        }
        // SAFETY: forwarded contract.
        unsafe { real::truncate64(path, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { truncate64(path, len) }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off_t) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("ftruncate", fd) {
            return int(sh().ftruncate(&o, len));
        }
        // SAFETY: forwarded contract.
        unsafe { real::ftruncate64(fd, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { ftruncate64(fd, len) }
}

// ---- sync ----

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fsync", fd) {
            return int(sh().fsync(&o));
        }
        // SAFETY: forwarded contract.
        unsafe { real::fsync(fd) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fdatasync", fd) {
            return int(sh().fsync(&o));
        }
        // SAFETY: forwarded contract.
        unsafe { real::fdatasync(fd) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("syncfs", fd) {
            return int(sh().syncfs(&o));
        }
        // SAFETY: forwarded contract.
        unsafe { real::syncfs(fd) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(fd: c_int, off: off_t, n: off_t, fl: c_uint) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("sync_file_range", fd) {
            if off < 0 || n < 0 {
                return fail(libc::EINVAL);
            }
            // The whole file is made durable, which covers the range.
            return int(sh().fsync(&o));
        }
        // SAFETY: forwarded contract.
        unsafe { real::sync_file_range(fd, off, n, fl) }
    })
}

// ---- space ----

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fallocate", fd) {
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return fail(sh().unsupported("fallocate (punch/zero/collapse)", libc::EOPNOTSUPP));
            }
            return int(sh().allocate(&o, off, len, mode & libc::FALLOC_FL_KEEP_SIZE != 0));
        }
        // SAFETY: forwarded contract.
        unsafe { real::fallocate64(fd, mode, off, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fallocate64(fd, mode, off, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    boundary_or(eio_number, || {
        if let Some((_g, o)) = lib_fd("posix_fallocate", fd) {
            return sh().allocate(&o, off, len, false).err().unwrap_or(0);
        }
        // SAFETY: forwarded contract.
        unsafe { real::posix_fallocate64(fd, off, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    boundary_or(eio_number, || {
        // SAFETY: forwarded contract.
        unsafe { posix_fallocate64(fd, off, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    boundary_or(eio_number, || {
        if lib_fd("posix_fadvise", fd).is_some() {
            // Advice only: a pool in memory has no readahead or page cache to steer.
            if !(0..=5).contains(&advice) || len < 0 {
                return libc::EINVAL;
            }
            return 0;
        }
        // SAFETY: forwarded contract.
        unsafe { real::posix_fadvise64(fd, off, len, advice) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    boundary_or(eio_number, || {
        // SAFETY: forwarded contract.
        unsafe { posix_fadvise64(fd, off, len, advice) }
    })
}

// ---- directories ----

/// A `DIR` handed out for a library directory: the descriptor and the entry `readdir` fills.
#[repr(C)]
struct LibDir {
    fd: c_int,
    ent: libc::dirent64,
}

static DIRS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static NDIRS: AtomicUsize = AtomicUsize::new(0);

fn lib_dir(d: *mut libc::DIR) -> Option<c_int> {
    if NDIRS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if dirs.as_ref()?.contains(&(d as usize)) {
        // SAFETY: registered pointers are live LibDir boxes.
        Some(unsafe { (*(d as *mut LibDir)).fd })
    } else {
        None
    }
}

fn new_lib_dir(fd: c_int) -> *mut libc::DIR {
    // SAFETY: all-zero is a valid dirent64.
    let ent: libc::dirent64 = unsafe { std::mem::zeroed() };
    let p = Box::into_raw(Box::new(LibDir { fd, ent })) as usize;
    DIRS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(p);
    NDIRS.fetch_add(1, Ordering::AcqRel);
    p as *mut libc::DIR
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("opendir", libc::AT_FDCWD, path) } {
            return match loc.and_then(|l| {
                sh().open(&l, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)
            }) {
                Ok(fd) => new_lib_dir(fd),
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            };
        }
        // SAFETY: forwarded contract.
        unsafe { real::opendir(path) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("fdopendir", fd) {
            if !o.dir {
                set_errno(libc::ENOTDIR);
                return std::ptr::null_mut();
            }
            return new_lib_dir(fd);
        }
        // SAFETY: forwarded contract.
        unsafe { real::fdopendir(fd) }
    })
}

/// Fills the `DIR`'s entry with the next one; null at the end (errno untouched) or on error.
fn next_dirent(d: *mut libc::DIR, fd: c_int) -> *mut libc::dirent64 {
    let s = sh();
    let Some(o) = s.ofd(fd) else {
        set_errno(libc::EBADF);
        return std::ptr::null_mut();
    };
    match s.next_entry(&o) {
        Ok(Some((e, next))) => {
            // SAFETY: `d` is a live LibDir (checked by the caller).
            let ld = unsafe { &mut *(d as *mut LibDir) };
            ld.ent.d_ino = e.ino;
            ld.ent.d_off = next as i64;
            ld.ent.d_type = e.dtype;
            let name = e.name.as_bytes();
            let n = name.len().min(255);
            for (dst, &src) in ld.ent.d_name.iter_mut().zip(&name[..n]) {
                *dst = src as c_char;
            }
            ld.ent.d_name[n] = 0;
            ld.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
            &mut ld.ent
        }
        Ok(None) => std::ptr::null_mut(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("readdir", true);
                return next_dirent(d, fd);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::readdir64(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent64 {
    // SAFETY: `dirent` and `dirent64` have the same layout on 64-bit Linux.
    unsafe { readdir64(d) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut libc::DIR,
    e: *mut libc::dirent64,
    r: *mut *mut libc::dirent64,
) -> c_int {
    boundary_or(eio_number, || {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("readdir_r", true);
                let saved = errno();
                set_errno(0);
                let p = next_dirent(d, fd);
                let err = errno();
                set_errno(saved);
                if p.is_null() {
                    // SAFETY: the caller's result pointer.
                    unsafe { *r = std::ptr::null_mut() };
                    return err;
                }
                // SAFETY: `e` is the caller's entry buffer; `p` our filled entry.
                unsafe {
                    std::ptr::copy_nonoverlapping(p, e, 1);
                    *r = e;
                }
                return 0;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::readdir64_r(d, e, r) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    d: *mut libc::DIR,
    e: *mut libc::dirent64,
    r: *mut *mut libc::dirent64,
) -> c_int {
    boundary_or(eio_number, || {
        // SAFETY: same layout, forwarded contract.
        unsafe { readdir64_r(d, e, r) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    boundary(|| {
        if let Some(g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("closedir", true);
                DIRS.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                    .map(|s| s.remove(&(d as usize)));
                NDIRS.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: made by Box::into_raw in new_lib_dir, now unregistered.
                drop(unsafe { Box::from_raw(d as *mut LibDir) });
                let r = sh().close(fd).unwrap_or(Err(libc::EBADF));
                drop(g);
                return int(r);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::closedir(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                return fd;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::dirfd(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                if let Some(o) = sh().ofd(fd) {
                    sh().dir_seek(&o, 0);
                }
                return;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::rewinddir(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> c_long {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                return sh().ofd(fd).map_or(-1, |o| sh().dir_tell(&o) as c_long);
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::telldir(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, at: c_long) {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                if let Some(o) = sh().ofd(fd) {
                    sh().dir_seek(&o, at.max(0) as u64);
                }
                return;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::seekdir(d, at) }
    })
}

pub type DirFilter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
pub type DirCompare =
    Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// `scandir` reads with glibc-internal calls, so a library directory is listed here.
#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: DirFilter,
    compar: DirCompare,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        let lib = unsafe { lib_path("scandir", libc::AT_FDCWD, path) }.is_some();
        if !lib {
            // SAFETY: forwarded contract.
            return unsafe { real::scandir64(path, list, filter, compar) };
        }
        // SAFETY: forwarded contract; the DIR is ours.
        let d = unsafe { opendir(path) };
        if d.is_null() {
            return -1;
        }
        let mut out: Vec<*mut libc::dirent64> = Vec::new();
        loop {
            // SAFETY: our DIR.
            let e = unsafe { readdir64(d) };
            if e.is_null() {
                break;
            }
            // SAFETY: `e` is our filled entry; `filter` is the caller's.
            if let Some(f) = filter {
                if unsafe { f(e) } == 0 {
                    continue;
                }
            }
            let size = std::mem::size_of::<libc::dirent64>();
            // SAFETY: a plain allocation the caller frees, filled with a copy of the entry.
            let copy = unsafe { libc::malloc(size) } as *mut libc::dirent64;
            if copy.is_null() {
                for p in out {
                    // SAFETY: allocated above.
                    unsafe { libc::free(p.cast()) };
                }
                // SAFETY: our DIR.
                unsafe { closedir(d) };
                set_errno(libc::ENOMEM);
                return -1;
            }
            // SAFETY: both are entries of `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(e, copy, 1) };
            out.push(copy);
        }
        // SAFETY: our DIR.
        unsafe { closedir(d) };
        let n = out.len();
        // SAFETY: an array of `n` pointers the caller frees.
        let arr = unsafe { libc::malloc(n.max(1) * std::mem::size_of::<*mut libc::dirent64>()) }
            as *mut *mut libc::dirent64;
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return -1;
        }
        // SAFETY: `arr` has room for `n` pointers.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), arr, n) };
        if let Some(c) = compar {
            // SAFETY: qsort over the caller's comparison, which takes pointers to entry pointers.
            unsafe {
                libc::qsort(
                    arr.cast(),
                    n,
                    std::mem::size_of::<*mut libc::dirent64>(),
                    Some(std::mem::transmute::<
                        unsafe extern "C" fn(
                            *mut *const libc::dirent64,
                            *mut *const libc::dirent64,
                        ) -> c_int,
                        unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
                    >(c)),
                )
            };
        }
        // SAFETY: the caller's result pointer.
        unsafe { *list = arr };
        n as c_int
    })
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: DirFilter,
    compar: DirCompare,
) -> c_int {
    // SAFETY: `dirent` and `dirent64` have the same layout on 64-bit Linux.
    unsafe { scandir64(path, list, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("getdents64", fd) {
            // SAFETY: forwarded contract.
            return size(sh().getdents(&o, unsafe { slice_mut(buf, n) }));
        }
        // SAFETY: forwarded contract.
        unsafe { real::getdents64(fd, buf, n) }
    })
}

// ---- descriptors ----

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    boundary(|| {
        if let Some((_g, _)) = lib_fd("dup", fd) {
            return num(sh().dup(fd, 0, false));
        }
        // SAFETY: forwarded contract.
        unsafe { real::dup(fd) }
    })
}

/// The `stdin`/`stdout`/`stderr` streams glibc made, saved while a library descriptor stands in.
static ORIGINAL_STD: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// The address of glibc's `stdin`, `stdout` or `stderr` variable.
fn std_stream_var(fd: c_int) -> *mut *mut libc::FILE {
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
fn rebind_std_stream(fd: c_int) {
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
fn restore_std_stream(fd: c_int) {
    let orig = ORIGINAL_STD[fd as usize].swap(0, Ordering::AcqRel);
    let var = std_stream_var(fd);
    if orig != 0 && !var.is_null() {
        // SAFETY: glibc's stream variable and the stream it held before.
        unsafe { *var = orig as *mut libc::FILE };
    }
}

unsafe fn dup_onto(
    name: &'static str,
    fd: c_int,
    new: c_int,
    cloexec: bool,
    real_call: impl FnOnce() -> c_int,
) -> c_int {
    if let Some(g) = enter() {
        let s = sh();
        if s.is_fd(fd) {
            count(name, true);
            let r = num(s.dup_onto(fd, new, cloexec));
            drop(g);
            if r >= 0 && (0..=2).contains(&new) && fd != new {
                rebind_std_stream(new);
            }
            return r;
        }
        count(name, false);
        if real::unpark(new) {
            // A kernel descriptor takes a parked number: it is the program's now.
            let r = real_call();
            if r < 0 {
                let e = errno();
                real::park_fd(new);
                set_errno(e);
            }
            return r;
        }
        if s.is_fd(new) {
            // A kernel descriptor replaces a library one.
            let r = real_call();
            if r >= 0 {
                s.forget(new);
                if (0..=2).contains(&new) {
                    restore_std_stream(new);
                }
            }
            return r;
        }
    }
    real_call()
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, new: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { dup_onto("dup2", fd, new, false, || real::dup2(fd, new)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, new: c_int, fl: c_int) -> c_int {
    boundary(|| {
        if fd == new {
            return fail(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        unsafe {
            dup_onto("dup3", fd, new, fl & libc::O_CLOEXEC != 0, || {
                real::dup3(fd, new, fl)
            })
        }
    })
}

/// A `struct flock` as F_GETLK/F_SETLK take it.
unsafe fn lock_cmd(o: &Ofd, cmd: c_int, arg: *mut c_void) -> c_int {
    let fl = arg as *mut libc::flock64;
    if fl.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller passes a struct flock for these commands.
    let f = unsafe { &mut *fl };
    let s = sh();
    let ofd_lock = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    if ofd_lock && f.l_pid != 0 {
        return fail(libc::EINVAL);
    }
    match cmd {
        libc::F_GETLK | libc::F_OFD_GETLK => {
            match s.get_lock(
                o,
                ofd_lock,
                f.l_type as i32,
                f.l_whence as i32,
                f.l_start,
                f.l_len,
            ) {
                Ok(None) => {
                    f.l_type = libc::F_UNLCK as i16;
                    0
                }
                Ok(Some((t, start, len, pid))) => {
                    f.l_type = t as i16;
                    f.l_whence = libc::SEEK_SET as i16;
                    f.l_start = start;
                    f.l_len = len;
                    f.l_pid = pid;
                    0
                }
                Err(e) => fail(e),
            }
        }
        _ => {
            let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
            int(s.set_lock(
                o,
                ofd_lock,
                f.l_type as i32,
                f.l_whence as i32,
                f.l_start,
                f.l_len,
                wait,
            ))
        }
    }
}

unsafe fn fcntl_any(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    if let Some((_g, o)) = lib_fd("fcntl", fd) {
        let s = sh();
        let iarg = arg as usize as c_int;
        return match cmd {
            libc::F_DUPFD => num(s.dup(fd, iarg, false)),
            libc::F_DUPFD_CLOEXEC => num(s.dup(fd, iarg, true)),
            libc::F_GETFD => match s.get_cloexec(fd) {
                Ok(c) => {
                    if c {
                        libc::FD_CLOEXEC
                    } else {
                        0
                    }
                }
                Err(e) => fail(e),
            },
            libc::F_SETFD => int(s.set_cloexec(fd, iarg & libc::FD_CLOEXEC != 0)),
            libc::F_GETFL => s.get_fl(&o),
            libc::F_SETFL => {
                s.set_fl(&o, iarg);
                0
            }
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => {
                // SAFETY: forwarded contract.
                unsafe { lock_cmd(&o, cmd, arg) }
            }
            libc::F_GETOWN => 0,
            libc::F_GET_SEALS
            | libc::F_ADD_SEALS
            | libc::F_GETLEASE
            | libc::F_SETLEASE
            | libc::F_NOTIFY => fail(libc::EINVAL),
            _ => fail(s.unsupported("fcntl command", libc::EINVAL)),
        };
    }
    // SAFETY: forwarded contract.
    unsafe { real::fcntl(fd, cmd, arg) }
}

/// `ioctl` (variadic in C; see the module notes on variadic entry points).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("ioctl", fd) {
            let s = sh();
            return match request {
                libc::FIONREAD => {
                    if arg.is_null() {
                        return fail(libc::EFAULT);
                    }
                    let avail = match s.size(&o) {
                        Ok(size) => size.saturating_sub(s.dir_tell(&o)).min(c_int::MAX as u64),
                        Err(e) => return fail(e),
                    };
                    // SAFETY: FIONREAD takes an int pointer.
                    unsafe { *(arg as *mut c_int) = avail as c_int };
                    0
                }
                libc::FIOCLEX => int(s.set_cloexec(fd, true)),
                libc::FIONCLEX => int(s.set_cloexec(fd, false)),
                _ => fail(libc::ENOTTY),
            };
        }
        // SAFETY: forwarded contract.
        unsafe { real::ioctl(fd, request, arg) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    boundary_or(eio_and(0), || {
        if lib_fd("isatty", fd).is_some() {
            set_errno(libc::ENOTTY);
            return 0;
        }
        // SAFETY: forwarded contract.
        unsafe { real::isatty(fd) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("flock", fd) {
            return int(sh().flock(&o, op));
        }
        // SAFETY: forwarded contract.
        unsafe { real::flock(fd, op) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    boundary(|| {
        if let Some((_g, o)) = lib_fd("lockf", fd) {
            let s = sh();
            return match cmd {
                libc::F_LOCK => {
                    int(s.set_lock(&o, false, libc::F_WRLCK, libc::SEEK_CUR, 0, len, true))
                }
                libc::F_TLOCK => {
                    int(s.set_lock(&o, false, libc::F_WRLCK, libc::SEEK_CUR, 0, len, false))
                }
                libc::F_ULOCK => {
                    int(s.set_lock(&o, false, libc::F_UNLCK, libc::SEEK_CUR, 0, len, false))
                }
                libc::F_TEST => {
                    match s.get_lock(&o, false, libc::F_WRLCK, libc::SEEK_CUR, 0, len) {
                        Ok(None) => 0,
                        Ok(Some(_)) => fail(libc::EACCES),
                        Err(e) => fail(e),
                    }
                }
                _ => fail(libc::EINVAL),
            };
        }
        // SAFETY: forwarded contract.
        unsafe { real::lockf64(fd, cmd, len) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { lockf64(fd, cmd, len) }
}

// ---- working directory ----

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    boundary(|| {
        if let Some(g) = enter() {
            let s = sh();
            // SAFETY: forwarded contract.
            match s.resolve(libc::AT_FDCWD, unsafe { bytes(path) }) {
                Where::Lib(loc) => {
                    count("chdir", true);
                    return int(s.chdir(&loc));
                }
                Where::Refused(e) => return fail(e),
                Where::Kernel => {
                    count("chdir", false);
                    // SAFETY: forwarded contract.
                    let r = unsafe { real::chdir(path) };
                    if r == 0 {
                        s.left_for_kernel();
                    }
                    drop(g);
                    return r;
                }
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::chdir(path) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    boundary(|| {
        if let Some(g) = enter() {
            let s = sh();
            if let Some(o) = s.ofd(fd) {
                count("fchdir", true);
                if !o.dir {
                    return fail(libc::ENOTDIR);
                }
                let loc = Loc {
                    m: o.m,
                    rel: o.rel.clone(),
                    abs: o.abs.clone(),
                };
                return int(s.chdir(&loc));
            }
            count("fchdir", false);
            // SAFETY: forwarded contract.
            let r = unsafe { real::fchdir(fd) };
            if r == 0 {
                s.left_for_kernel();
            }
            drop(g);
            return r;
        }
        // SAFETY: forwarded contract.
        unsafe { real::fchdir(fd) }
    })
}

/// Copies a library working directory into the caller's buffer (or a malloc'd one).
unsafe fn give_cwd(cwd: &str, buf: *mut c_char, n: size_t) -> *mut c_char {
    let need = cwd.len() + 1;
    let out = if buf.is_null() {
        let cap = if n == 0 { need } else { n };
        if cap < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        // SAFETY: plain allocation the caller frees.
        let p = unsafe { libc::malloc(cap) } as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        if n < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        buf
    };
    // SAFETY: `out` has room for `need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(cwd.as_ptr() as *const c_char, out, cwd.len());
        *out.add(cwd.len()) = 0;
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(c) = sh().library_cwd() {
                count("getcwd", true);
                // SAFETY: forwarded contract.
                return unsafe { give_cwd(&c, buf, n) };
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::getcwd(buf, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, n: size_t, _l: size_t) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe { getcwd(buf, n) }
}

/// `getwd` (and its fortified form): glibc's asks the kernel directly.
#[no_mangle]
pub unsafe extern "C" fn getwd(buf: *mut c_char) -> *mut c_char {
    // SAFETY: the caller passes a buffer of PATH_MAX bytes, as getwd requires.
    unsafe { getcwd(buf, libc::PATH_MAX as size_t) }
}

#[no_mangle]
pub unsafe extern "C" fn __getwd_chk(buf: *mut c_char, len: size_t) -> *mut c_char {
    // SAFETY: the caller passes a buffer of `len` bytes.
    unsafe { getcwd(buf, len.min(libc::PATH_MAX as size_t)) }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    boundary(|| {
        if let Some(_g) = enter() {
            if let Some(c) = sh().library_cwd() {
                // SAFETY: a malloc'd copy.
                return unsafe { give_cwd(&c, std::ptr::null_mut(), 0) };
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::get_current_dir_name() }
    })
}

#[no_mangle]
pub unsafe extern "C" fn realpath(p: *const c_char, out: *mut c_char) -> *mut c_char {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some((_g, loc)) = unsafe { lib_path("realpath", libc::AT_FDCWD, p) } {
            return match loc.and_then(|l| sh().realpath(&l)) {
                // SAFETY: `out` is PATH_MAX bytes when given.
                Ok(path) => unsafe {
                    give_cwd(
                        &path,
                        out,
                        if out.is_null() {
                            0
                        } else {
                            libc::PATH_MAX as usize
                        },
                    )
                },
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            };
        }
        // SAFETY: forwarded contract.
        unsafe { real::realpath(p, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    p: *const c_char,
    out: *mut c_char,
    _l: size_t,
) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe { realpath(p, out) }
}

// ---- links ----

unsafe fn symlink_any(target: *const c_char, dirfd: c_int, p: *const c_char) -> Option<c_int> {
    // SAFETY: forwarded contract.
    let (_g, loc) = unsafe { lib_path("symlink", dirfd, p) }?;
    // SAFETY: forwarded contract.
    let t = unsafe { bytes(target) };
    Some(int(loc.and_then(|l| {
        let t = std::str::from_utf8(t).map_err(|_| libc::EINVAL)?;
        if t.is_empty() {
            return Err(libc::ENOENT);
        }
        sh().symlink(t, &l)
    })))
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, p: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            symlink_any(target, libc::AT_FDCWD, p).unwrap_or_else(|| real::symlink(target, p))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, p: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            symlink_any(target, dirfd, p).unwrap_or_else(|| real::symlinkat(target, dirfd, p))
        }
    })
}

unsafe fn readlink_any(
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> Option<ssize_t> {
    // SAFETY: forwarded contract.
    let (_g, loc) = unsafe { lib_path("readlink", dirfd, p) }?;
    Some(match loc.and_then(|l| sh().readlink(&l)) {
        Ok(t) => {
            // readlink truncates silently and does not terminate.
            let k = t.len().min(n);
            // SAFETY: the caller's buffer of `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(t.as_ptr() as *const c_char, buf, k) };
            k as ssize_t
        }
        Err(e) => fail(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn readlink(p: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            readlink_any(libc::AT_FDCWD, p, buf, n).unwrap_or_else(|| real::readlink(p, buf, n))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { readlink(p, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            readlink_any(dirfd, p, buf, n).unwrap_or_else(|| real::readlinkat(dirfd, p, buf, n))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { readlinkat(dirfd, p, buf, n) }
}

unsafe fn link_any(
    name: &'static str,
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> Option<c_int> {
    let g = enter()?;
    let s = sh();
    // SAFETY: forwarded contract.
    let (wa, wb) = unsafe { (s.resolve(da, bytes(a)), s.resolve(db, bytes(b))) };
    let r = match (wa, wb) {
        (Where::Kernel, Where::Kernel) => {
            count(name, false);
            return None;
        }
        (Where::Refused(e), _) | (_, Where::Refused(e)) => Err(e),
        (Where::Lib(x), Where::Lib(y)) => s.link(&x, &y),
        _ => Err(libc::EXDEV),
    };
    count(name, true);
    drop(g);
    Some(int(r))
}

#[no_mangle]
pub unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            link_any("link", libc::AT_FDCWD, a, libc::AT_FDCWD, b)
                .unwrap_or_else(|| real::link(a, b))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    fl: c_int,
) -> c_int {
    boundary(|| {
        // linkat does not follow a final symbolic link unless AT_SYMLINK_FOLLOW; tbfs links the
        // name itself either way, which is the default behaviour.
        // SAFETY: forwarded contract.
        unsafe {
            link_any("linkat", da, a, db, b).unwrap_or_else(|| real::linkat(da, a, db, b, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(p: *const c_char) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe { realpath(p, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    // SAFETY: no pointers.
    let old = unsafe { real::umask(mask) };
    boundary(|| {
        if let Some(_g) = enter() {
            sh().set_umask(mask);
        }
    });
    old
}

// ---- attributes ----

fn attr_call(r: Option<(Guard, R<()>)>) -> Option<c_int> {
    r.map(|(_g, r)| int(r))
}

unsafe fn path_attr(
    name: &'static str,
    dirfd: c_int,
    p: *const c_char,
    attr: R<SetAttr>,
) -> Option<c_int> {
    // SAFETY: forwarded contract.
    unsafe { path_attr_at(name, dirfd, p, attr, true) }
}

/// `follow`: through a final symbolic link (no `AT_SYMLINK_NOFOLLOW`, not an l* call).
unsafe fn path_attr_at(
    name: &'static str,
    dirfd: c_int,
    p: *const c_char,
    attr: R<SetAttr>,
    follow: bool,
) -> Option<c_int> {
    // SAFETY: forwarded contract.
    let (g, loc) = unsafe { lib_path(name, dirfd, p) }?;
    attr_call(Some((
        g,
        loc.and_then(|l| attr.and_then(|a| sh().set_attr(&l, &a, follow))),
    )))
}

fn fd_attr(name: &'static str, fd: c_int, attr: R<SetAttr>) -> Option<c_int> {
    let (g, o) = lib_fd(name, fd)?;
    attr_call(Some((g, attr.and_then(|a| sh().fset_attr(&o, &a)))))
}

fn mode_attr(mode: mode_t) -> R<SetAttr> {
    Ok(SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    })
}

fn owner_attr(u: libc::uid_t, g: libc::gid_t) -> R<SetAttr> {
    Ok(SetAttr {
        uid: (u != u32::MAX).then_some(u),
        gid: (g != u32::MAX).then_some(g),
        ..SetAttr::default()
    })
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// `utimensat`'s times: NULL is now for both; UTIME_NOW and UTIME_OMIT per field.
unsafe fn timespec_attr(t: *const libc::timespec) -> R<SetAttr> {
    if t.is_null() {
        let now = now_ns();
        return Ok(SetAttr {
            atime_ns: Some(now),
            mtime_ns: Some(now),
            ..SetAttr::default()
        });
    }
    // SAFETY: the caller passes two timespecs.
    let ts = unsafe { std::slice::from_raw_parts(t, 2) };
    let one = |t: &libc::timespec| -> R<Option<i64>> {
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            n if (0..1_000_000_000).contains(&n) => Ok(Some(t.tv_sec * 1_000_000_000 + n)),
            _ => Err(libc::EINVAL),
        }
    };
    Ok(SetAttr {
        atime_ns: one(&ts[0])?,
        mtime_ns: one(&ts[1])?,
        ..SetAttr::default()
    })
}

/// `utimes`' times (microseconds); NULL is now.
unsafe fn timeval_attr(t: *const libc::timeval) -> R<SetAttr> {
    if t.is_null() {
        // SAFETY: null means now.
        return unsafe { timespec_attr(std::ptr::null()) };
    }
    // SAFETY: the caller passes two timevals.
    let tv = unsafe { std::slice::from_raw_parts(t, 2) };
    let ns = |t: &libc::timeval| -> R<i64> {
        if !(0..1_000_000).contains(&t.tv_usec) {
            return Err(libc::EINVAL);
        }
        Ok(t.tv_sec * 1_000_000_000 + t.tv_usec * 1000)
    };
    Ok(SetAttr {
        atime_ns: Some(ns(&tv[0])?),
        mtime_ns: Some(ns(&tv[1])?),
        ..SetAttr::default()
    })
}

#[no_mangle]
pub unsafe extern "C" fn chmod(p: *const c_char, mode: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr("chmod", libc::AT_FDCWD, p, mode_attr(mode))
                .unwrap_or_else(|| real::chmod(p, mode))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        fd_attr("fchmod", fd, mode_attr(mode)).unwrap_or_else(|| unsafe { real::fchmod(fd, mode) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    p: *const c_char,
    mode: mode_t,
    fl: c_int,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr_at(
                "fchmodat",
                dirfd,
                p,
                mode_attr(mode),
                fl & libc::AT_SYMLINK_NOFOLLOW == 0,
            )
            .unwrap_or_else(|| real::fchmodat(dirfd, p, mode, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr("chown", libc::AT_FDCWD, p, owner_attr(u, g))
                .unwrap_or_else(|| real::chown(p, u, g))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr_at("lchown", libc::AT_FDCWD, p, owner_attr(u, g), false)
                .unwrap_or_else(|| real::lchown(p, u, g))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        fd_attr("fchown", fd, owner_attr(u, g)).unwrap_or_else(|| unsafe { real::fchown(fd, u, g) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    p: *const c_char,
    u: libc::uid_t,
    g: libc::gid_t,
    fl: c_int,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        if fl & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(p) }.is_empty() {
            // SAFETY: forwarded contract.
            return unsafe { fchown(dirfd, u, g) };
        }
        // SAFETY: forwarded contract.
        unsafe {
            path_attr_at(
                "fchownat",
                dirfd,
                p,
                owner_attr(u, g),
                fl & libc::AT_SYMLINK_NOFOLLOW == 0,
            )
            .unwrap_or_else(|| real::fchownat(dirfd, p, u, g, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    p: *const c_char,
    t: *const libc::timespec,
    fl: c_int,
) -> c_int {
    boundary(|| {
        if p.is_null() {
            // Linux: a NULL path is the descriptor itself (futimens).
            // SAFETY: forwarded contract.
            return unsafe { futimens(dirfd, t) };
        }
        // SAFETY: forwarded contract.
        unsafe {
            path_attr_at(
                "utimensat",
                dirfd,
                p,
                timespec_attr(t),
                fl & libc::AT_SYMLINK_NOFOLLOW == 0,
            )
            .unwrap_or_else(|| real::utimensat(dirfd, p, t, fl))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        fd_attr("futimens", fd, unsafe { timespec_attr(t) })
            .unwrap_or_else(|| unsafe { real::futimens(fd, t) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr("utimes", libc::AT_FDCWD, p, timeval_attr(t))
                .unwrap_or_else(|| real::utimes(p, t))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            path_attr_at("lutimes", libc::AT_FDCWD, p, timeval_attr(t), false)
                .unwrap_or_else(|| real::lutimes(p, t))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, t: *const libc::timeval) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        fd_attr("futimes", fd, unsafe { timeval_attr(t) })
            .unwrap_or_else(|| unsafe { real::futimes(fd, t) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    p: *const c_char,
    t: *const libc::timeval,
) -> c_int {
    boundary(|| {
        if p.is_null() {
            // SAFETY: forwarded contract.
            return unsafe { futimes(dirfd, t) };
        }
        // SAFETY: forwarded contract.
        unsafe {
            path_attr("futimesat", dirfd, p, timeval_attr(t))
                .unwrap_or_else(|| real::futimesat(dirfd, p, t))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, t: *const libc::utimbuf) -> c_int {
    boundary(|| {
        let attr = if t.is_null() {
            // SAFETY: null means now.
            unsafe { timespec_attr(std::ptr::null()) }
        } else {
            // SAFETY: the caller's utimbuf.
            let u = unsafe { &*t };
            Ok(SetAttr {
                atime_ns: Some(u.actime * 1_000_000_000),
                mtime_ns: Some(u.modtime * 1_000_000_000),
                ..SetAttr::default()
            })
        };
        // SAFETY: forwarded contract.
        unsafe { path_attr("utime", libc::AT_FDCWD, p, attr).unwrap_or_else(|| real::utime(p, t)) }
    })
}

// ---- attributes not kept by tbfs yet ----

/// Calls on library paths that tbfs cannot honour fail with the errno a program handles.
unsafe fn refuse_path(
    name: &'static str,
    dirfd: c_int,
    p: *const c_char,
    errno: i32,
) -> Option<c_int> {
    // SAFETY: forwarded contract.
    let (_g, loc) = unsafe { lib_path(name, dirfd, p) }?;
    Some(match loc {
        Ok(_) => fail(sh().unsupported(name, errno)),
        Err(e) => fail(e),
    })
}

fn refuse_fd(name: &'static str, fd: c_int, errno: i32) -> Option<c_int> {
    let (_g, _o) = lib_fd(name, fd)?;
    Some(fail(sh().unsupported(name, errno)))
}

macro_rules! xattr_path {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => { $(
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *const c_char, $($a: $t),*) -> $r {
            // SAFETY: forwarded contract.
            if let Some(r) = unsafe { refuse_path(stringify!($name), libc::AT_FDCWD, p, libc::ENOTSUP) } {
                return r as $r;
            }
            // SAFETY: forwarded contract.
            unsafe { real::$name(p, $($a),*) }
        }
    )* };
}

xattr_path! {
    getxattr(n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    lgetxattr(n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    setxattr(n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    lsetxattr(n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    listxattr(l: *mut c_char, s: size_t) -> ssize_t;
    llistxattr(l: *mut c_char, s: size_t) -> ssize_t;
    removexattr(n: *const c_char) -> c_int;
    lremovexattr(n: *const c_char) -> c_int;
}

macro_rules! xattr_fd {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => { $(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> $r {
            if let Some(r) = refuse_fd(stringify!($name), fd, libc::ENOTSUP) {
                return r as $r;
            }
            // SAFETY: forwarded contract.
            unsafe { real::$name(fd, $($a),*) }
        }
    )* };
}

xattr_fd! {
    fgetxattr(n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fsetxattr(n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    flistxattr(l: *mut c_char, s: size_t) -> ssize_t;
    fremovexattr(n: *const c_char) -> c_int;
}

// Device nodes and FIFOs are not supported in a pool.
#[no_mangle]
pub unsafe extern "C" fn mknod(p: *const c_char, m: mode_t, d: libc::dev_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            refuse_path("mknod", libc::AT_FDCWD, p, libc::EPERM)
                .unwrap_or_else(|| real::mknod(p, m, d))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    p: *const c_char,
    m: mode_t,
    d: libc::dev_t,
) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            refuse_path("mknodat", dirfd, p, libc::EPERM)
                .unwrap_or_else(|| real::mknodat(dirfd, p, m, d))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(p: *const c_char, m: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            refuse_path("mkfifo", libc::AT_FDCWD, p, libc::EPERM)
                .unwrap_or_else(|| real::mkfifo(p, m))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, p: *const c_char, m: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            refuse_path("mkfifoat", dirfd, p, libc::EPERM)
                .unwrap_or_else(|| real::mkfifoat(dirfd, p, m))
        }
    })
}

// ---- copying between descriptors ----

/// Reads from any descriptor (library or kernel) at `off` (or its offset).
unsafe fn read_any(fd: c_int, buf: &mut [u8], off: Option<u64>) -> R<usize> {
    let s = sh();
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

unsafe fn write_any(fd: c_int, buf: &[u8], off: Option<u64>) -> R<usize> {
    let s = sh();
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
) -> R<usize> {
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
        // SAFETY: forwarded contract.
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
            // SAFETY: forwarded contract.
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
    let s = sh();
    let lib = s.is_fd(a) || s.is_fd(b);
    count(name, lib);
    lib.then_some(g)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    boundary(|| {
        if let Some(_g) = either_lib("sendfile", out, inp) {
            // SAFETY: forwarded contract.
            return size(unsafe { copy_between(inp, off, out, std::ptr::null_mut(), n) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::sendfile64(out, inp, off, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { sendfile64(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    a: c_int,
    ao: *mut off_t,
    b: c_int,
    bo: *mut off_t,
    n: size_t,
    fl: c_uint,
) -> ssize_t {
    boundary(|| {
        if let Some(_g) = either_lib("copy_file_range", a, b) {
            if fl != 0 {
                return fail(libc::EINVAL);
            }
            // SAFETY: forwarded contract.
            return size(unsafe { copy_between(a, ao, b, bo, n) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::copy_file_range(a, ao, b, bo, n, fl) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    a: c_int,
    ao: *mut off_t,
    b: c_int,
    bo: *mut off_t,
    n: size_t,
    fl: c_uint,
) -> ssize_t {
    boundary(|| {
        if let Some(_g) = either_lib("splice", a, b) {
            // SAFETY: forwarded contract.
            return size(unsafe { copy_between(a, ao, b, bo, n) });
        }
        // SAFETY: forwarded contract.
        unsafe { real::splice(a, ao, b, bo, n, fl) }
    })
}

// ---- memory mappings ----

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    boundary_or(eio_and(libc::MAP_FAILED), || {
        if flags & libc::MAP_ANONYMOUS == 0 {
            if let Some((_g, o)) = lib_fd("mmap", fd) {
                // SAFETY: forwarded contract.
                return unsafe { map_library(&o, addr, len, prot, flags, off) };
            }
        }
        // SAFETY: forwarded contract.
        unsafe { real::mmap64(addr, len, prot, flags, fd, off) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    boundary_or(eio_and(libc::MAP_FAILED), || {
        // SAFETY: forwarded contract.
        unsafe { mmap64(addr, len, prot, flags, fd, off) }
    })
}

unsafe fn map_library(
    o: &Arc<Ofd>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> *mut c_void {
    let s = sh();
    let bad = |e: i32| {
        set_errno(e);
        libc::MAP_FAILED
    };
    if o.dir || o.acc == libc::O_PATH || o.acc == libc::O_WRONLY {
        return bad(libc::EACCES);
    }
    if off < 0 || len == 0 {
        return bad(libc::EINVAL);
    }
    let shared = flags & libc::MAP_SHARED != 0;
    if shared {
        if prot & libc::PROT_WRITE != 0 && o.acc != libc::O_RDWR {
            return bad(libc::EACCES);
        }
        let b = match s.backing_for_map(o) {
            Ok(b) => b,
            Err(e) => return bad(e),
        };
        // SAFETY: mapping the memfd with the caller's arguments.
        let p = unsafe { real::mmap64(addr, len, prot, flags, b.memfd, off) };
        if p != libc::MAP_FAILED {
            s.mapped(p as usize, len, b);
        }
        return p;
    }
    // A private mapping is a copy of the file's bytes in anonymous memory.
    let anon_flags = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping with the caller's address hint.
    let p = unsafe {
        real::mmap64(
            addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            anon_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return p;
    }
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    let view = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
    let mut done = 0;
    while done < len {
        match s.pread(o, &mut view[done..], off as u64 + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => {
                // SAFETY: our own mapping.
                unsafe { real::munmap(p, len) };
                return bad(e);
            }
        }
    }
    // SAFETY: our own mapping.
    if unsafe { libc::mprotect(p, len, prot) } != 0 {
        let e = errno();
        // SAFETY: our own mapping.
        unsafe { real::munmap(p, len) };
        return bad(e);
    }
    p
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { real::munmap(addr, len) };
        if r == 0 {
            if let Some(_g) = enter() {
                if let Some(s) = SHIM.get() {
                    if s.is_mapped(addr as usize) {
                        count("munmap", true);
                        if let Err(e) = s.munmap(addr as usize, len) {
                            return fail(e);
                        }
                    }
                }
            }
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, fl: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { real::msync(addr, len, fl) };
        if r == 0 {
            if let Some(_g) = enter() {
                if let Some(s) = SHIM.get() {
                    if s.is_mapped(addr as usize) {
                        count("msync", true);
                        return int(s.msync(addr as usize, len));
                    }
                }
            }
        }
        r
    })
}

// ---- temporary files ----

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// mkstemp and friends for a template under a mount: `XXXXXX` before `suffix` bytes replaced
/// until an `O_EXCL` create succeeds.
unsafe fn make_temp(t: *mut c_char, suffix: c_int, flags: c_int, dir: bool) -> Option<R<c_int>> {
    if t.is_null() {
        return None;
    }
    // SAFETY: forwarded contract.
    let (g, loc) = unsafe { lib_path(if dir { "mkdtemp" } else { "mkstemp" }, libc::AT_FDCWD, t) }?;
    drop(g);
    if let Err(e) = loc {
        return Some(Err(e));
    }
    // SAFETY: the template is a writable NUL-terminated string.
    let len = unsafe { libc::strlen(t) };
    let suffix = suffix.max(0) as usize;
    if len < 6 + suffix {
        return Some(Err(libc::EINVAL));
    }
    let start = len - suffix - 6;
    // SAFETY: within the string.
    let tb = unsafe { std::slice::from_raw_parts_mut(t as *mut u8, len) };
    if &tb[start..start + 6] != b"XXXXXX" {
        return Some(Err(libc::EINVAL));
    }
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for _ in 0..1000 {
        let mut v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ TMP_COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            ^ (real::pid() as u64) << 40;
        for c in &mut tb[start..start + 6] {
            *c = CHARS[(v % CHARS.len() as u64) as usize];
            v /= CHARS.len() as u64;
        }
        let r = if dir {
            // SAFETY: the template, now a name.
            if unsafe { mkdir(t, 0o700) } == 0 {
                Ok(0)
            } else {
                Err(errno())
            }
        } else {
            let f = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
            // SAFETY: the template, now a name.
            let fd = unsafe { open_at(libc::AT_FDCWD, t, f, 0o600) };
            if fd >= 0 {
                Ok(fd)
            } else {
                Err(errno())
            }
        };
        match r {
            Err(libc::EEXIST) => continue,
            r => return Some(r),
        }
    }
    Some(Err(libc::EEXIST))
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(t: *mut c_char) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { make_temp(t, 0, 0, false) }.map_or_else(|| unsafe { real::mkstemp(t) }, num)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp64(t: *mut c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mkstemp(t) }
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp(t: *mut c_char, fl: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { make_temp(t, 0, fl, false) }.map_or_else(|| unsafe { real::mkostemp(t, fl) }, num)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp64(t: *mut c_char, fl: c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mkostemp(t, fl) }
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps(t: *mut c_char, n: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { make_temp(t, n, 0, false) }.map_or_else(|| unsafe { real::mkstemps(t, n) }, num)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps(t: *mut c_char, n: c_int, fl: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { make_temp(t, n, fl, false) }
            .map_or_else(|| unsafe { real::mkostemps(t, n, fl) }, num)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(t: *mut c_char) -> *mut c_char {
    boundary(|| {
        // SAFETY: forwarded contract.
        match unsafe { make_temp(t, 0, 0, true) } {
            None => unsafe { real::mkdtemp(t) },
            Some(Ok(_)) => t,
            Some(Err(e)) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

// ---- process exit ----

#[no_mangle]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    // Buffered pool data is written like a kernel file system's page cache would keep it.
    boundary(|| flush_at_exit(false));
    // SAFETY: forwarded contract.
    unsafe { real::_exit(code) };
    // SAFETY: _exit does not return.
    unsafe { libc::abort() }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
    boundary(|| flush_at_exit(false));
    // SAFETY: forwarded contract.
    unsafe { real::_Exit(code) };
    // SAFETY: _Exit does not return.
    unsafe { libc::abort() }
}

// ---- variadic entry points ----
//
// `open`, `openat`, `fcntl` and `ioctl` are variadic in C. On the ABIs this library builds for
// (x86_64 System V and AArch64 Linux) variadic integer and pointer arguments travel in the same
// registers as named ones, so each is defined with its full argument list; the optional argument
// is read only when the flags or command say the caller passed it, as libc itself does.

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "the shim's variadic entry points assume x86_64 or AArch64 Linux calling conventions"
);

fn wants_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    boundary(|| {
        let mode = if wants_mode(flags) { mode } else { 0 };
        // SAFETY: forwarded contract.
        unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open(path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    boundary(|| {
        let mode = if wants_mode(flags) { mode } else { 0 };
        // SAFETY: forwarded contract.
        unsafe { open_at(dirfd, path, flags, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { openat(dirfd, path, flags, mode) }
}

// The fortified entry points are called without O_CREAT (the compiler checked); they take no mode.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { open_at(dirfd, path, flags, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { open_at(dirfd, path, flags, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe {
            open_at(
                libc::AT_FDCWD,
                path,
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                mode,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { creat(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { fcntl_any(fd, cmd, arg) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { fcntl_any(fd, cmd, arg) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn __fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { fcntl_any(fd, cmd, arg) }
    })
}

// ---- stdio streams over library descriptors (fopencookie) ----

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

/// Opens a stream whose reads, writes, seeks and close go to library descriptor `fd`.
unsafe fn stream_for(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
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
        sh().stream_register(fp as usize, fd);
    }
    fp
}

unsafe fn fopen_any(
    name: &'static str,
    path: *const c_char,
    mode: *const c_char,
) -> Option<*mut libc::FILE> {
    // SAFETY: forwarded contract.
    let (g, loc) = unsafe { lib_path(name, libc::AT_FDCWD, path) }?;
    // SAFETY: forwarded contract.
    let flags = match fopen_flags(unsafe { bytes(mode) }) {
        Ok(f) => f,
        Err(e) => {
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
    };
    let fd = match loc.and_then(|l| sh().open(&l, flags, 0o666)) {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(e);
            return Some(std::ptr::null_mut());
        }
    };
    drop(g);
    // SAFETY: forwarded contract.
    let fp = unsafe { stream_for(fd, mode) };
    if fp.is_null() {
        let e = errno();
        let _g = enter();
        sh().close(fd);
        set_errno(e);
    }
    Some(fp)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { fopen_any("fopen", path, mode).unwrap_or_else(|| real::fopen(path, mode)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: forwarded contract.
        unsafe { fopen_any("fopen", path, mode).unwrap_or_else(|| real::fopen64(path, mode)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    boundary(|| {
        if let Some((g, o)) = lib_fd("fdopen", fd) {
            // SAFETY: forwarded contract.
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
            // SAFETY: forwarded contract.
            return unsafe { stream_for(fd, mode) };
        }
        // SAFETY: forwarded contract.
        unsafe { real::fdopen(fd, mode) }
    })
}

/// A library path cannot be attached to an existing `FILE` (its buffer belongs to glibc's
/// kernel-descriptor I/O), so `freopen` onto one, or of a library stream, fails with `ENOTSUP`.
/// `freopen` of `stdin`, `stdout` or `stderr` onto a library path (`freopen("log", "w", stdout)`):
/// the file is opened and `dup2`'d onto 0, 1 or 2, which points the stream variable at a stream
/// on it. Returns that stream (not `fp`: glibc's own stream cannot do I/O on a library file);
/// `None` when this is not such a call.
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
        // SAFETY: forwarded contract.
        if !sh().is_library_path(unsafe { bytes(path) }) {
            return None;
        }
    }
    // SAFETY: forwarded contract.
    let flags = match fopen_flags(unsafe { bytes(mode) }) {
        Ok(f) => f,
        Err(e) => return Some(fail_ptr(e)),
    };
    // SAFETY: the stream being replaced; its buffered bytes go where they were headed.
    unsafe { libc::fflush(fp) };
    // SAFETY: forwarded contract; these are this library's own entry points.
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
        if !sh().is_library_path(b"/tmp/tmpf") {
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

#[no_mangle]
pub unsafe extern "C" fn tmpfile() -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: no arguments.
        unsafe { tmpfile_in_pool() }.unwrap_or_else(|| unsafe { real::tmpfile() })
    })
}

#[no_mangle]
pub unsafe extern "C" fn tmpfile64() -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: no arguments.
        unsafe { tmpfile_in_pool() }.unwrap_or_else(|| unsafe { real::tmpfile64() })
    })
}

unsafe fn freopen_refused(path: *const c_char, fp: *mut libc::FILE) -> bool {
    let Some(_g) = enter() else { return false };
    let s = sh();
    // SAFETY: forwarded contract.
    s.stream_fd(fp as usize).is_some()
        || (!path.is_null() && s.is_library_path(unsafe { bytes(path) }))
}

#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut libc::FILE,
) -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some(r) = unsafe { freopen_std_stream(path, mode, fp) } {
            return r;
        }
        // SAFETY: forwarded contract.
        if unsafe { freopen_refused(path, fp) } {
            set_errno(libc::ENOTSUP);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded contract.
        unsafe { real::freopen(path, mode, fp) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    fp: *mut libc::FILE,
) -> *mut libc::FILE {
    boundary(|| {
        // SAFETY: forwarded contract.
        if let Some(r) = unsafe { freopen_std_stream(path, mode, fp) } {
            return r;
        }
        // SAFETY: forwarded contract.
        if unsafe { freopen_refused(path, fp) } {
            set_errno(libc::ENOTSUP);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded contract.
        unsafe { real::freopen64(path, mode, fp) }
    })
}

fn stream_fd(fp: *mut libc::FILE) -> Option<c_int> {
    SHIM.get().and_then(|s| s.stream_fd(fp as usize))
}

#[no_mangle]
pub unsafe extern "C" fn fileno(fp: *mut libc::FILE) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        stream_fd(fp).unwrap_or_else(|| unsafe { real::fileno(fp) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(fp: *mut libc::FILE) -> c_int {
    boundary(|| {
        // SAFETY: forwarded contract.
        stream_fd(fp).unwrap_or_else(|| unsafe { real::fileno_unlocked(fp) })
    })
}

// ---- helpers for the C part (csrc/shim.c) ----

/// Parses an fopen mode into open flags.
fn fopen_flags(mode: &[u8]) -> R<c_int> {
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
        let s = sh();
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
        let s = sh();
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
        let s = sh();
        match s.ofd(fd) {
            // SAFETY: the C glue passes its own local.
            Some(o) => match s.lseek(&o, unsafe { *pos }, whence) {
                Ok(p) => {
                    // SAFETY: as above.
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
        int(sh().close(fd).unwrap_or(Err(libc::EBADF)))
    })
}
