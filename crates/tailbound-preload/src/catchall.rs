//! The catch-all mode (`TAILBOUND_CATCH_ALL=1`): Syscall User Dispatch (Linux 5.11+) turns every
//! system call the program makes outside the shim into a `SIGSYS`, so calls no symbol hook sees
//! (glibc internals, raw `syscall()`) reach the library file system too.
//!
//! - Each thread has a selector byte (thread-local, kept by [`crate::guard`]): `BLOCK` while the
//!   program runs, `ALLOW` while the shim works (the re-entrancy guard flips it) and inside the
//!   handler. The kernel does not carry dispatch over `fork` or `clone`: a `fork` child and every
//!   thread started with `pthread_create` switch it on again here; a thread from a raw `clone` runs
//!   without it.
//! - The shim's own raw system calls, the handler's `rt_sigreturn` and the redirected `clone`
//!   calls run from one small assembly block, the always-allowed code region.
//! - The handler serves file system calls through the same entry points as the symbol hooks and
//!   re-issues everything else; signal handling calls are adjusted so `SIGSYS` is never blocked.
//!
//! This module owns the dispatch state and the `SIGSYS` handler; it must not keep state of its own
//! about files (that is [`crate::vfs`]'s).

use libc::{c_char, c_int, c_long, c_uint, c_void, mode_t, off_t, size_t};

use crate::abi::base::{boundary, boundary_or, eio_number};
use crate::abi::{attrs, dirs, fds, io, mmap, paths, process, stat, xattr};
use crate::guard::{
    self, active, busy, on_this_thread, selector_set, set_on_this_thread, SELECTOR_ALLOW,
    SELECTOR_BLOCK,
};
use crate::real::{self, errno, set_errno};

const PR_SET_SYSCALL_USER_DISPATCH: c_long = 59;
const PR_SYS_DISPATCH_OFF: c_long = 0;
const PR_SYS_DISPATCH_ON: c_long = 1;
/// `si_code` of a `SIGSYS` raised by Syscall User Dispatch.
const SYS_USER_DISPATCH: c_int = 2;
const SA_RESTORER: u64 = 0x0400_0000;
/// The kernel's signal set on x86_64 is 64 bits.
const KERNEL_SIGSET_BYTES: c_long = 8;

// The always-allowed region: a raw system call, the signal restorer and the `syscall; ret`
// target of redirected `clone` calls. Nothing else may live between begin and end.
std::arch::global_asm!(
    ".pushsection .text.tailbound_sud,\"ax\",@progbits",
    ".p2align 4",
    ".globl tailbound_sud_begin",
    ".hidden tailbound_sud_begin",
    "tailbound_sud_begin:",
    ".globl tailbound_sud_syscall",
    ".hidden tailbound_sud_syscall",
    "tailbound_sud_syscall:",
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "mov r10, r8",
    "mov r8, r9",
    "mov r9, [rsp + 8]",
    "syscall",
    "ret",
    ".globl tailbound_sud_restore_rt",
    ".hidden tailbound_sud_restore_rt",
    "tailbound_sud_restore_rt:",
    "mov eax, 15",
    "syscall",
    "ud2",
    ".globl tailbound_sud_syscall_ret",
    ".hidden tailbound_sud_syscall_ret",
    "tailbound_sud_syscall_ret:",
    "syscall",
    "ret",
    ".globl tailbound_sud_end",
    ".hidden tailbound_sud_end",
    "tailbound_sud_end:",
    "ud2",
    ".popsection",
);

extern "C" {
    fn tailbound_sud_begin();
    fn tailbound_sud_end();
    fn tailbound_sud_restore_rt();
    fn tailbound_sud_syscall_ret();
    /// A raw system call from the allowed region: the result, or `-errno`.
    fn tailbound_sud_syscall(
        nr: c_long,
        a: c_long,
        b: c_long,
        c: c_long,
        d: c_long,
        e: c_long,
        f: c_long,
    ) -> c_long;
}

fn raw(nr: c_long, a: [c_long; 6]) -> c_long {
    // SAFETY: a system call with the caller's arguments, as the program itself issued it (or as
    // this module builds it from valid memory); the kernel checks every pointer.
    unsafe { tailbound_sud_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// Switches dispatch on for the calling thread (selector `BLOCK` afterwards).
fn switch_on_this_thread() -> Result<(), i32> {
    let begin = tailbound_sud_begin as *const () as usize as c_long;
    let len = tailbound_sud_end as *const () as usize as c_long - begin;
    selector_set(SELECTOR_ALLOW);
    let sel = guard::selector_ptr() as c_long;
    let r = raw(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_ON,
            begin,
            len,
            sel,
            0,
        ],
    );
    if r < 0 {
        return Err(-r as i32);
    }
    set_on_this_thread(true);
    selector_set(SELECTOR_BLOCK);
    Ok(())
}

fn switch_off_this_thread() {
    selector_set(SELECTOR_ALLOW);
    raw(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_OFF,
            0,
            0,
            0,
            0,
        ],
    );
    set_on_this_thread(false);
}

/// The kernel's `struct sigaction` on x86_64.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

fn sigbit(sig: c_int) -> u64 {
    1u64 << (sig - 1)
}

/// Signals no mask may hold while dispatch is on: a `SIGSYS` raised while blocked kills.
const NEVER_BLOCKED: u64 = 1u64 << (libc::SIGSYS - 1);

extern "C" fn forked_child() {
    boundary(|| {
        if on_this_thread() {
            set_on_this_thread(false);
            // The child has no dispatch (the kernel drops it at fork); failing here leaves it off.
            let _ = switch_on_this_thread();
        }
    })
}

/// Installs the handler and switches dispatch on for the calling thread. Runs from the library's
/// constructor when `TAILBOUND_CATCH_ALL=1`.
fn enable() -> Result<(), String> {
    let act = KernelSigaction {
        handler: on_sigsys as *const () as usize,
        // SA_NODEFER: another signal delivered together with SIGSYS runs its handler before
        // this one starts, with the selector still BLOCK; its system calls must be able to trap.
        flags: (libc::SA_SIGINFO | libc::SA_NODEFER) as u64 | SA_RESTORER,
        restorer: tailbound_sud_restore_rt as *const () as usize,
        mask: 0,
    };
    let r = raw(
        libc::SYS_rt_sigaction,
        [
            libc::SIGSYS as c_long,
            &act as *const KernelSigaction as c_long,
            0,
            KERNEL_SIGSET_BYTES,
            0,
            0,
        ],
    );
    if r < 0 {
        return Err(format!("installing the SIGSYS handler: errno {}", -r));
    }
    // Handlers installed before now must not block SIGSYS either.
    for sig in 1..=64 {
        if sig == libc::SIGSYS || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut old = KernelSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let args = [
            sig as c_long,
            0,
            &mut old as *mut KernelSigaction as c_long,
            KERNEL_SIGSET_BYTES,
            0,
            0,
        ];
        if raw(libc::SYS_rt_sigaction, args) == 0 && old.mask & NEVER_BLOCKED != 0 {
            old.mask &= !NEVER_BLOCKED;
            let set = [
                sig as c_long,
                &old as *const KernelSigaction as c_long,
                0,
                KERNEL_SIGSET_BYTES,
                0,
                0,
            ];
            raw(libc::SYS_rt_sigaction, set);
        }
    }
    let mut mask: u64 = 0;
    raw(
        libc::SYS_rt_sigprocmask,
        [
            libc::SIG_UNBLOCK as c_long,
            &NEVER_BLOCKED as *const u64 as c_long,
            &mut mask as *mut u64 as c_long,
            KERNEL_SIGSET_BYTES,
            0,
            0,
        ],
    );
    // SAFETY: registers a plain function with no captured state.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    guard::set_active();
    switch_on_this_thread().map_err(|e| {
        format!("prctl(PR_SET_SYSCALL_USER_DISPATCH) failed with errno {e} (Linux 5.11+ needed)")
    })
}

extern "C" fn constructor() {
    boundary(|| {
        if std::env::var_os("TAILBOUND_CATCH_ALL").is_some_and(|v| v == "1") {
            if let Err(e) = enable() {
                real::say(&format!("tailbound: TAILBOUND_CATCH_ALL=1: {e}\n"));
                // SAFETY: ends the process before the program starts, as asked for an unusable mode.
                unsafe { libc::_exit(127) };
            }
        }
    })
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;

// ---- threads ----

struct Start {
    f: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
}

extern "C" fn thread_start(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the box `pthread_create` below leaked for this thread, used once.
    let s = unsafe { Box::from_raw(p.cast::<Start>()) };
    // A thread that cannot switch dispatch on runs without it, like one from a raw `clone`.
    boundary(|| {
        let _ = switch_on_this_thread();
    });
    (s.f)(s.arg)
}

hooks! {
    /// `pthread_create`: a new thread of a program in catch-all mode switches dispatch on first.
    fn pthread_create(
        t: *mut libc::pthread_t,
        attr: *const libc::pthread_attr_t,
        f: extern "C" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> c_int, or eio_number => {
        // Threads the shim or the engine start, and every thread when the mode is off, start as
        // asked.
        let wrap = active() && on_this_thread() && !busy();
        if !wrap {
            return pass!();
        }
        let prev = guard::allow();
        let p = Box::into_raw(Box::new(Start { f, arg }));
        // SAFETY: the program's own thread, attributes and argument, as pthread_create(3)
        // requires; `thread_start` takes the box back exactly once, in the new thread.
        let r = unsafe { real::pthread_create(t, attr, thread_start, p.cast()) };
        if r != 0 {
            // SAFETY: the thread was not created, so the box is still ours, and used no more.
            drop(unsafe { Box::from_raw(p) });
        }
        guard::restore(prev);
        r
    }
}

// ---- the SIGSYS handler ----

/// What the handler does with the interrupted system call.
enum Outcome {
    /// Return this value (or `-errno`) as the call's result.
    Value(c_long),
    /// The context now resumes somewhere in the allowed region, which finishes the call.
    Redirected,
}

extern "C" fn on_sigsys(_sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    selector_set(SELECTOR_ALLOW);
    let saved_errno = errno();
    // SAFETY: the kernel passes valid siginfo and ucontext pointers to an SA_SIGINFO handler.
    let (code, ctx) = unsafe { ((*info).si_code, &mut *uc.cast::<libc::ucontext_t>()) };
    if code != SYS_USER_DISPATCH {
        // A SIGSYS from elsewhere (seccomp, kill): what the program would get without the shim.
        switch_off_this_thread();
        let dfl = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let act = &dfl as *const KernelSigaction as c_long;
        let args = [libc::SIGSYS as c_long, act, 0, KERNEL_SIGSET_BYTES, 0, 0];
        raw(libc::SYS_rt_sigaction, args);
        let pid = raw(libc::SYS_getpid, [0; 6]);
        let tid = raw(libc::SYS_gettid, [0; 6]);
        raw(
            libc::SYS_tgkill,
            [pid, tid, libc::SIGSYS as c_long, 0, 0, 0],
        );
        return;
    }
    let g = &mut ctx.uc_mcontext.gregs;
    let nr = g[libc::REG_RAX as usize] as c_long;
    let a = [
        g[libc::REG_RDI as usize] as c_long,
        g[libc::REG_RSI as usize] as c_long,
        g[libc::REG_RDX as usize] as c_long,
        g[libc::REG_R10 as usize] as c_long,
        g[libc::REG_R8 as usize] as c_long,
        g[libc::REG_R9 as usize] as c_long,
    ];
    let outcome = boundary_or(
        || Outcome::Value(-(libc::EIO as c_long)),
        || dispatch(nr, a, ctx),
    );
    if let Outcome::Value(v) = outcome {
        ctx.uc_mcontext.gregs[libc::REG_RAX as usize] = v;
    }
    set_errno(saved_errno);
    selector_set(SELECTOR_BLOCK);
}

/// A hook's C result as a system call result.
fn sys(r: c_long) -> Outcome {
    Outcome::Value(if r == -1 { -(errno() as c_long) } else { r })
}

fn sys_ptr<T>(p: *mut T) -> Option<*mut T> {
    if p.is_null() || p as isize == -1 {
        None
    } else {
        Some(p)
    }
}

fn dispatch(nr: c_long, a: [c_long; 6], ctx: &mut libc::ucontext_t) -> Outcome {
    let fd = |i: usize| a[i] as c_int;
    let p = |i: usize| a[i] as *const c_char;
    let m = |i: usize| a[i] as *mut c_void;
    // SAFETY (every hook call below): the arguments are the program's own system call arguments,
    // which the hook checks the way the kernel would (a library path or descriptor is served from
    // the pool, anything else goes to libc and so to the kernel).
    unsafe {
        match nr {
            libc::SYS_rt_sigreturn => {
                // The program's own restorer is outside the allowed region: finish the return
                // from ours, on the same frame.
                ctx.uc_mcontext.gregs[libc::REG_RIP as usize] =
                    tailbound_sud_restore_rt as *const () as i64;
                Outcome::Redirected
            }
            libc::SYS_rt_sigaction => sigaction(a),
            libc::SYS_rt_sigprocmask => sigprocmask(a, ctx),
            libc::SYS_clone | libc::SYS_clone3 | libc::SYS_fork | libc::SYS_vfork => {
                redirect_clone(nr, a, ctx)
            }
            libc::SYS_execve | libc::SYS_execveat => {
                switch_off_this_thread();
                let r = raw(nr, a);
                let _ = switch_on_this_thread();
                Outcome::Value(r)
            }
            // Inside the shim (it may hold the engine's locks) file calls are never routed. The
            // guard lets calls through while it is held, so this is a signal handler's call that
            // arrived as the guard was taken or dropped.
            _ if busy() => Outcome::Value(raw(nr, a)),
            libc::SYS_exit_group => process::_exit(fd(0)),
            libc::SYS_read => sys(io::read(fd(0), m(1), a[2] as size_t) as c_long),
            libc::SYS_write => sys(io::write(fd(0), m(1), a[2] as size_t) as c_long),
            libc::SYS_pread64 => {
                sys(io::pread64(fd(0), m(1), a[2] as size_t, a[3] as off_t) as c_long)
            }
            libc::SYS_pwrite64 => {
                sys(io::pwrite64(fd(0), m(1), a[2] as size_t, a[3] as off_t) as c_long)
            }
            libc::SYS_readv => sys(io::readv(fd(0), a[1] as _, fd(2)) as c_long),
            libc::SYS_writev => sys(io::writev(fd(0), a[1] as _, fd(2)) as c_long),
            libc::SYS_preadv => sys(io::preadv64(fd(0), a[1] as _, fd(2), a[3]) as c_long),
            libc::SYS_pwritev => sys(io::pwritev64(fd(0), a[1] as _, fd(2), a[3]) as c_long),
            libc::SYS_preadv2 => {
                sys(io::preadv64v2(fd(0), a[1] as _, fd(2), a[3], fd(5)) as c_long)
            }
            libc::SYS_pwritev2 => {
                sys(io::pwritev64v2(fd(0), a[1] as _, fd(2), a[3], fd(5)) as c_long)
            }
            libc::SYS_lseek => sys(io::lseek64(fd(0), a[1], fd(2))),
            libc::SYS_open => sys(paths::open64(p(0), fd(1), a[2] as c_uint) as c_long),
            libc::SYS_creat => sys(paths::creat64(p(0), a[1] as mode_t) as c_long),
            libc::SYS_openat => sys(paths::openat64(fd(0), p(1), fd(2), a[3] as c_uint) as c_long),
            libc::SYS_openat2 => openat2(a),
            libc::SYS_close => sys(fds::close(fd(0)) as c_long),
            libc::SYS_close_range => {
                sys(fds::close_range(a[0] as c_uint, a[1] as c_uint, fd(2)) as c_long)
            }
            libc::SYS_stat => sys(stat::stat64(p(0), a[1] as _) as c_long),
            libc::SYS_lstat => sys(stat::lstat64(p(0), a[1] as _) as c_long),
            libc::SYS_fstat => sys(stat::fstat64(fd(0), a[1] as _) as c_long),
            libc::SYS_newfstatat => sys(stat::fstatat64(fd(0), p(1), a[2] as _, fd(3)) as c_long),
            libc::SYS_statx => {
                sys(stat::statx(fd(0), p(1), fd(2), a[3] as c_uint, a[4] as _) as c_long)
            }
            libc::SYS_statfs => sys(stat::statfs64(p(0), a[1] as _) as c_long),
            libc::SYS_fstatfs => sys(stat::fstatfs64(fd(0), a[1] as _) as c_long),
            libc::SYS_access => sys(stat::access(p(0), fd(1)) as c_long),
            libc::SYS_faccessat => sys(stat::faccessat(fd(0), p(1), fd(2), 0) as c_long),
            libc::SYS_faccessat2 => sys(stat::faccessat(fd(0), p(1), fd(2), fd(3)) as c_long),
            libc::SYS_mkdir => sys(paths::mkdir(p(0), a[1] as mode_t) as c_long),
            libc::SYS_mkdirat => sys(paths::mkdirat(fd(0), p(1), a[2] as mode_t) as c_long),
            libc::SYS_rmdir => sys(paths::rmdir(p(0)) as c_long),
            libc::SYS_unlink => sys(paths::unlink(p(0)) as c_long),
            libc::SYS_unlinkat => sys(paths::unlinkat(fd(0), p(1), fd(2)) as c_long),
            libc::SYS_rename => sys(paths::rename(p(0), p(1)) as c_long),
            libc::SYS_renameat => sys(paths::renameat(fd(0), p(1), fd(2), p(3)) as c_long),
            libc::SYS_renameat2 => {
                sys(paths::renameat2(fd(0), p(1), fd(2), p(3), a[4] as c_uint) as c_long)
            }
            libc::SYS_link => sys(paths::link(p(0), p(1)) as c_long),
            libc::SYS_linkat => sys(paths::linkat(fd(0), p(1), fd(2), p(3), fd(4)) as c_long),
            libc::SYS_symlink => sys(paths::symlink(p(0), p(1)) as c_long),
            libc::SYS_symlinkat => sys(paths::symlinkat(p(0), fd(1), p(2)) as c_long),
            libc::SYS_readlink => sys(paths::readlink(p(0), a[1] as _, a[2] as size_t) as c_long),
            libc::SYS_readlinkat => {
                sys(paths::readlinkat(fd(0), p(1), a[2] as _, a[3] as size_t) as c_long)
            }
            libc::SYS_truncate => sys(paths::truncate64(p(0), a[1]) as c_long),
            libc::SYS_ftruncate => sys(fds::ftruncate64(fd(0), a[1]) as c_long),
            libc::SYS_fallocate => sys(fds::fallocate64(fd(0), fd(1), a[2], a[3]) as c_long),
            libc::SYS_fadvise64 => {
                Outcome::Value(-(fds::posix_fadvise64(fd(0), a[1], a[2], fd(3)) as c_long))
            }
            libc::SYS_fsync => sys(fds::fsync(fd(0)) as c_long),
            libc::SYS_fdatasync => sys(fds::fdatasync(fd(0)) as c_long),
            libc::SYS_syncfs => sys(fds::syncfs(fd(0)) as c_long),
            libc::SYS_sync_file_range => {
                sys(fds::sync_file_range(fd(0), a[1], a[2], a[3] as c_uint) as c_long)
            }
            libc::SYS_getdents64 => sys(dirs::getdents64(fd(0), m(1), a[2] as size_t) as c_long),
            libc::SYS_dup => sys(fds::dup(fd(0)) as c_long),
            libc::SYS_dup2 => sys(fds::dup2(fd(0), fd(1)) as c_long),
            libc::SYS_dup3 => sys(fds::dup3(fd(0), fd(1), fd(2)) as c_long),
            libc::SYS_fcntl => sys(fds::fcntl64(fd(0), fd(1), m(2)) as c_long),
            libc::SYS_flock => sys(fds::flock(fd(0), fd(1)) as c_long),
            libc::SYS_ioctl => sys(fds::ioctl(fd(0), a[1] as _, m(2)) as c_long),
            libc::SYS_chdir => sys(paths::chdir(p(0)) as c_long),
            libc::SYS_fchdir => sys(paths::fchdir(fd(0)) as c_long),
            libc::SYS_getcwd => {
                if a[0] == 0 {
                    return Outcome::Value(raw(nr, a));
                }
                match sys_ptr(paths::getcwd(a[0] as *mut c_char, a[1] as size_t)) {
                    Some(buf) => {
                        Outcome::Value(std::ffi::CStr::from_ptr(buf).to_bytes().len() as c_long + 1)
                    }
                    None => Outcome::Value(-(errno() as c_long)),
                }
            }
            libc::SYS_chmod => sys(attrs::chmod(p(0), a[1] as mode_t) as c_long),
            libc::SYS_fchmod => sys(attrs::fchmod(fd(0), a[1] as mode_t) as c_long),
            libc::SYS_fchmodat => sys(attrs::fchmodat(fd(0), p(1), a[2] as mode_t, 0) as c_long),
            libc::SYS_chown => sys(attrs::chown(p(0), a[1] as _, a[2] as _) as c_long),
            libc::SYS_lchown => sys(attrs::lchown(p(0), a[1] as _, a[2] as _) as c_long),
            libc::SYS_fchown => sys(attrs::fchown(fd(0), a[1] as _, a[2] as _) as c_long),
            libc::SYS_fchownat => {
                sys(attrs::fchownat(fd(0), p(1), a[2] as _, a[3] as _, fd(4)) as c_long)
            }
            libc::SYS_utimensat if a[1] == 0 => {
                sys(attrs::futimens(fd(0), a[2] as *const libc::timespec) as c_long)
            }
            libc::SYS_utimensat => sys(attrs::utimensat(fd(0), p(1), a[2] as _, fd(3)) as c_long),
            libc::SYS_utime => sys(attrs::utime(p(0), a[1] as _) as c_long),
            libc::SYS_utimes => sys(attrs::utimes(p(0), a[1] as _) as c_long),
            libc::SYS_futimesat => sys(attrs::futimesat(fd(0), p(1), a[2] as _) as c_long),
            libc::SYS_mknod => sys(attrs::mknod(p(0), a[1] as mode_t, a[2] as _) as c_long),
            libc::SYS_mknodat => {
                sys(attrs::mknodat(fd(0), p(1), a[2] as mode_t, a[3] as _) as c_long)
            }
            libc::SYS_sendfile => {
                sys(io::sendfile64(fd(0), fd(1), a[2] as _, a[3] as size_t) as c_long)
            }
            libc::SYS_copy_file_range => sys(io::copy_file_range(
                fd(0),
                a[1] as _,
                fd(2),
                a[3] as _,
                a[4] as size_t,
                a[5] as c_uint,
            ) as c_long),
            libc::SYS_splice => sys(io::splice(
                fd(0),
                a[1] as _,
                fd(2),
                a[3] as _,
                a[4] as size_t,
                a[5] as c_uint,
            ) as c_long),
            libc::SYS_mmap if a[3] as c_int & libc::MAP_ANONYMOUS == 0 => {
                let r = mmap::mmap64(m(0), a[1] as size_t, fd(2), fd(3), fd(4), a[5]);
                match sys_ptr(r) {
                    Some(r) => Outcome::Value(r as c_long),
                    None if r.is_null() => Outcome::Value(0),
                    None => Outcome::Value(-(errno() as c_long)),
                }
            }
            libc::SYS_munmap => sys(mmap::munmap(m(0), a[1] as size_t) as c_long),
            libc::SYS_msync => sys(mmap::msync(m(0), a[1] as size_t, fd(2)) as c_long),
            libc::SYS_getxattr => sys(xattr::getxattr(p(0), p(1), m(2), a[3] as size_t) as c_long),
            libc::SYS_lgetxattr => {
                sys(xattr::lgetxattr(p(0), p(1), m(2), a[3] as size_t) as c_long)
            }
            libc::SYS_fgetxattr => {
                sys(xattr::fgetxattr(fd(0), p(1), m(2), a[3] as size_t) as c_long)
            }
            libc::SYS_setxattr => {
                sys(xattr::setxattr(p(0), p(1), m(2), a[3] as size_t, fd(4)) as c_long)
            }
            libc::SYS_lsetxattr => {
                sys(xattr::lsetxattr(p(0), p(1), m(2), a[3] as size_t, fd(4)) as c_long)
            }
            libc::SYS_fsetxattr => {
                sys(xattr::fsetxattr(fd(0), p(1), m(2), a[3] as size_t, fd(4)) as c_long)
            }
            libc::SYS_listxattr => sys(xattr::listxattr(p(0), a[1] as _, a[2] as size_t) as c_long),
            libc::SYS_llistxattr => {
                sys(xattr::llistxattr(p(0), a[1] as _, a[2] as size_t) as c_long)
            }
            libc::SYS_flistxattr => {
                sys(xattr::flistxattr(fd(0), a[1] as _, a[2] as size_t) as c_long)
            }
            libc::SYS_removexattr => sys(xattr::removexattr(p(0), p(1)) as c_long),
            libc::SYS_lremovexattr => sys(xattr::lremovexattr(p(0), p(1)) as c_long),
            libc::SYS_fremovexattr => sys(xattr::fremovexattr(fd(0), p(1)) as c_long),
            _ => Outcome::Value(raw(nr, a)),
        }
    }
}

/// `openat2`: glibc has no wrapper, so only this mode sees it. `RESOLVE_*` flags on a library
/// path fail as unsupported.
fn openat2(a: [c_long; 6]) -> Outcome {
    /// The first version of the kernel's `struct open_how`.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    if a[2] == 0 || (a[3] as usize) < std::mem::size_of::<OpenHow>() {
        return Outcome::Value(raw(libc::SYS_openat2, a));
    }
    // SAFETY: a non-null `struct open_how` of at least its first version's size, as the caller
    // of openat2 promises.
    let how = unsafe { std::ptr::read_unaligned(a[2] as *const OpenHow) };
    // A larger struct from a newer ABI: its extra fields must be zero, as the kernel requires.
    let extra = (a[3] as usize).min(4096) - std::mem::size_of::<OpenHow>();
    // SAFETY: the caller's struct is `a[3]` bytes long; at most a page of it is read.
    let tail = unsafe {
        std::slice::from_raw_parts(
            (a[2] as *const u8).add(std::mem::size_of::<OpenHow>()),
            extra,
        )
    };
    if (a[3] as usize) > 4096 || tail.iter().any(|&b| b != 0) {
        return Outcome::Value(raw(libc::SYS_openat2, a));
    }
    // SAFETY: the program's own path argument.
    let served = unsafe {
        paths::open_library_path(
            "openat2",
            a[0] as c_int,
            a[1] as *const c_char,
            how.flags,
            how.mode,
            how.resolve,
        )
    };
    match served {
        Some(r) => sys(r as c_long),
        None => Outcome::Value(raw(libc::SYS_openat2, a)),
    }
}

/// `rt_sigaction`: `SIGSYS` stays this module's, and no handler may block it.
fn sigaction(a: [c_long; 6]) -> Outcome {
    let (sig, act) = (a[0] as c_int, a[1] as *const KernelSigaction);
    if act.is_null() || a[3] != KERNEL_SIGSET_BYTES {
        return Outcome::Value(raw(libc::SYS_rt_sigaction, a));
    }
    if sig == libc::SIGSYS {
        return Outcome::Value(-(libc::EINVAL as c_long));
    }
    // SAFETY: a non-null `struct sigaction` pointer from the program; copied before use.
    let mut copy = unsafe { std::ptr::read_unaligned(act) };
    copy.mask &= !NEVER_BLOCKED;
    let mut b = a;
    b[1] = &copy as *const KernelSigaction as c_long;
    Outcome::Value(raw(libc::SYS_rt_sigaction, b))
}

/// `rt_sigprocmask`: works on the mask the handler's return restores, never blocking `SIGSYS`.
fn sigprocmask(a: [c_long; 6], ctx: &mut libc::ucontext_t) -> Outcome {
    if a[3] != KERNEL_SIGSET_BYTES {
        return Outcome::Value(-(libc::EINVAL as c_long));
    }
    let (how, set, old) = (a[0] as c_int, a[1] as *const u64, a[2] as *mut u64);
    let cur = (&mut ctx.uc_sigmask as *mut libc::sigset_t).cast::<u64>();
    // SAFETY: the saved mask's first 64 bits are the kernel's signal set; `set` and `old` are the
    // program's own pointers (read before writing, as they may be the same).
    unsafe {
        let now = cur.read_unaligned();
        let want = if set.is_null() {
            now
        } else {
            let s = set.read_unaligned();
            match how {
                libc::SIG_BLOCK => now | s,
                libc::SIG_UNBLOCK => now & !s,
                libc::SIG_SETMASK => s,
                _ => return Outcome::Value(-(libc::EINVAL as c_long)),
            }
        };
        if !old.is_null() {
            old.write_unaligned(now);
        }
        let keep = sigbit(libc::SIGKILL) | sigbit(libc::SIGSTOP) | NEVER_BLOCKED;
        cur.write_unaligned(want & !keep);
    }
    Outcome::Value(0)
}

/// `clone`, `clone3`, `fork`, `vfork`: a child on a new stack cannot come back through this
/// handler, so the call is made from the allowed region (`syscall; ret`) after the handler
/// returns, with the return address pushed on the parent's stack and on the child's. A child
/// sharing the parent's memory and stack (`vfork`) is made a copy instead, so it cannot overwrite
/// that return address.
fn redirect_clone(nr: c_long, a: [c_long; 6], ctx: &mut libc::ucontext_t) -> Outcome {
    let g = &mut ctx.uc_mcontext.gregs;
    let rip = g[libc::REG_RIP as usize] as u64;
    let share = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
    let mut nr = nr;
    match nr {
        libc::SYS_vfork => nr = libc::SYS_fork,
        libc::SYS_clone => {
            let (flags, stack) = (a[0] as u64, a[1] as u64);
            if flags & libc::CLONE_VM as u64 != 0 {
                if stack == 0 {
                    g[libc::REG_RDI as usize] = (flags & !share) as i64;
                } else {
                    // SAFETY: the program gave the child this stack; its top word is free.
                    unsafe { ((stack - 8) as *mut u64).write_unaligned(rip) };
                    g[libc::REG_RSI as usize] = (stack - 8) as i64;
                }
            }
        }
        libc::SYS_clone3 => {
            /// The start of the kernel's `struct clone_args`.
            #[repr(C)]
            struct CloneArgs {
                flags: u64,
                pidfd: u64,
                child_tid: u64,
                parent_tid: u64,
                exit_signal: u64,
                stack: u64,
                stack_size: u64,
            }
            let args = a[0] as *mut CloneArgs;
            if args.is_null() || (a[1] as usize) < std::mem::size_of::<CloneArgs>() {
                return Outcome::Value(raw(nr, a));
            }
            // SAFETY: the program's own `struct clone_args` of at least this size, changed in
            // place as documented.
            unsafe {
                let mut c = args.read_unaligned();
                if c.flags & libc::CLONE_VM as u64 != 0 {
                    if c.stack == 0 {
                        c.flags &= !share;
                    } else {
                        c.stack_size -= 8;
                        ((c.stack + c.stack_size) as *mut u64).write_unaligned(rip);
                    }
                    args.write_unaligned(c);
                }
            }
        }
        _ => {}
    }
    let sp = g[libc::REG_RSP as usize] as u64 - 8;
    // SAFETY: the word just below the interrupted stack pointer, on the thread's own stack.
    unsafe { (sp as *mut u64).write_unaligned(rip) };
    g[libc::REG_RSP as usize] = sp as i64;
    g[libc::REG_RAX as usize] = nr;
    g[libc::REG_RIP as usize] = tailbound_sud_syscall_ret as *const () as i64;
    Outcome::Redirected
}
