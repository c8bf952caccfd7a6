//! What every hook shares: the shim's state, the panic boundary, routing a path or a descriptor
//! to the library or the kernel, the per-call counters, and the flush at exit.
//!
//! Layer: names [`crate::guard`], [`crate::real`] and [`crate::vfs`]; the family files and the
//! `hooks!` macro name this one.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::guard::{enter, Guard};
use crate::real::{self, set_errno};
use crate::vfs::{LibPath, Ofd, Shim, VfsResult, Where};

pub static SHIM: OnceLock<Shim> = OnceLock::new();
static REPORT: AtomicBool = AtomicBool::new(false);

extern "C" fn before_fork() {
    boundary(|| {
        if let (Some(_g), Some(s)) = (enter(), SHIM.get()) {
            // Before the parked list is taken: holding asks the server, which takes no number.
            s.before_fork();
        }
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

/// The shim's state, made on the first call.
pub fn shim() -> &'static Shim {
    SHIM.get_or_init(|| {
        let s = Shim::from_env(register_exit_flush);
        REPORT.store(s.report, Ordering::Relaxed);
        // SAFETY: registers three plain `extern "C"` functions that capture nothing and live as
        // long as the process (this library is never unloaded).
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

pub fn fail<T: From<i8>>(e: i32) -> T {
    set_errno(e);
    T::from(-1)
}

pub fn int(r: VfsResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

pub fn num(r: VfsResult<i32>) -> c_int {
    r.unwrap_or_else(fail)
}

pub fn size(r: VfsResult<usize>) -> ssize_t {
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
/// shim has open is poisoned (`panicked`), and the program goes on. The `hooks!` macro puts every
/// exported symbol's body in here; callbacks handed to libc (the stream cookies, `atfork` and exit
/// handlers) call it themselves.
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
pub fn eio_and<T>(value: T) -> impl FnOnce() -> T {
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

pub fn count(name: &'static str, lib: bool) {
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
pub fn flush_at_exit(stdio: bool) {
    if EXIT_DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    if stdio {
        // SAFETY: fflush(NULL) takes no pointer of ours and flushes every open stream; library
        // streams call back into the shim, whose guard is not held here.
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
fn register_exit_flush() {
    if !ATEXIT_REGISTERED.swap(true, Ordering::AcqRel) {
        extern "C" {
            fn atexit(f: extern "C" fn()) -> c_int;
        }
        // SAFETY: registers a plain `extern "C"` function that captures nothing and lives as long
        // as the process.
        unsafe { atexit(exit_handler) };
    }
}

// ---- routing helpers ----

/// The bytes of a C string argument: `None` for NULL or a pointer to unmapped memory, which
/// the kernel answers with `EFAULT` (see [`crate::real::readable_cstr`]).
///
/// # Safety
/// `p` is NULL, points to unmapped memory, or is a NUL-terminated string that outlives the
/// call.
pub unsafe fn path_bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if !crate::real::readable_cstr(p) {
        return None;
    }
    // SAFETY: readable up to its NUL here, and NUL-terminated by this function's contract;
    // only read.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// The bytes of a C string argument (empty for NULL or a pointer to unmapped memory).
///
/// # Safety
/// As [`path_bytes`].
pub unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    // SAFETY: this function's contract is `path_bytes`'.
    unsafe { path_bytes(p) }.unwrap_or(&[])
}

/// A library path: `Some((guard, Ok(loc)))`, or `Some((guard, Err(errno)))` for a refused one;
/// `None` to pass through.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string, as the path argument of every libc path call is.
pub unsafe fn lib_path(
    name: &'static str,
    dirfd: c_int,
    p: *const c_char,
) -> Option<(Guard, VfsResult<LibPath>)> {
    let g = enter()?;
    // Unreadable: the kernel answers `EFAULT` (or whatever NULL means to this call).
    // SAFETY: this function's caller passes `p` NULL or NUL-terminated.
    let path = unsafe { path_bytes(p) }?;
    match shim().resolve(dirfd, path) {
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
pub fn lib_fd(name: &'static str, fd: c_int) -> Option<(Guard, Arc<Ofd>)> {
    let g = enter()?;
    let s = shim();
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

// ---- read / write ----

/// A C buffer argument as a slice (empty when `n` is 0 or `buf` NULL).
///
/// # Safety
/// `buf` is writable for `n` bytes and nothing else uses it during the call, as the C caller of
/// `read`-like functions promises.
pub unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: non-null, and writable for `n` bytes by this function's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
}

/// A C buffer argument as a slice (empty when `n` is 0 or `buf` NULL).
///
/// # Safety
/// `buf` is readable for `n` bytes during the call, as the C caller of `write`-like functions
/// promises.
pub unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: non-null, and readable for `n` bytes by this function's contract.
    unsafe { std::slice::from_raw_parts(buf.cast(), n) }
}

/// A call on a library path or descriptor that tbfs cannot honour: fails with `errno` (or, for a
/// refused path, the errno that refuses it), or aborts under `TAILBOUND_STRICT=1`.
pub fn refused(name: &str, loc: VfsResult<LibPath>, errno: i32) -> c_int {
    match loc {
        Ok(_) => fail(shim().unsupported(name, errno)),
        Err(e) => fail(e),
    }
}
