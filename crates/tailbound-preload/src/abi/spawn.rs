//! New processes and images: `fork` (and `vfork`, which is `fork` here), the `exec` family and
//! `posix_spawn`. Served descriptors are handed over through the pool's server
//! ([`crate::vfs::Shim::hand_over`]): a fork's child adopts them in the `atfork` child handler,
//! a new image at its shim's start, from its environment.
//!
//! `execl`, `execlp` and `execle` (x86_64) are stubs in `execl.rs` that call the hooks here.
//! `system()`
//! and `popen()` (with `pclose()`) are done here on the hooked spawn when there is something to
//! hand over, since glibc's own start their shell where no hook sees it.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

use libc::{c_char, c_int, pid_t};

use crate::abi::base::{shim, SHIM};
use crate::guard::enter;
use crate::real;
use crate::vfs::exec::ExecImage;
use crate::vfs::procs::{ADOPT_ENV, CWD_ENV};
use crate::vfs::HandOver;

extern "C" {
    static environ: *const *const c_char;
}

/// An environment for the new image: `base` (NULL: this process's) without the shim's
/// hand-over variables, with `add` after it (and, when `add` hands something over, the shim's
/// own variables `base` lacks).
///
/// # Safety
/// `base` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn with_env(
    base: *const *const c_char,
    add: &[String],
) -> (Vec<CString>, Vec<*const c_char>) {
    // SAFETY: reading the process's environment pointer, which libc keeps valid.
    let base = if base.is_null() {
        unsafe { environ }
    } else {
        base
    };
    let mut keep: Vec<CString> = Vec::new();
    let ours = |e: &[u8]| {
        [ADOPT_ENV, CWD_ENV]
            .iter()
            .any(|n| e.len() > n.len() && e.starts_with(n.as_bytes()) && e[n.len()] == b'=')
    };
    if !base.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: the array is NULL-terminated, per the contract.
            let p = unsafe { *base.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: each entry is NUL-terminated, per the contract.
            let e = unsafe { CStr::from_ptr(p) };
            if !ours(e.to_bytes()) {
                keep.push(e.to_owned());
            }
            i += 1;
        }
    }
    if !add.is_empty() {
        // A hand-over needs the shim in the new image: an environment the program made (an
        // `execle`, `env -i`) keeps the shim's own variables it lacks.
        let has = |name: &str| {
            keep.iter().any(|e| {
                let e = e.to_bytes();
                e.len() > name.len() && e.starts_with(name.as_bytes()) && e[name.len()] == b'='
            })
        };
        let missing: Vec<CString> = std::env::vars_os()
            .filter_map(|(k, v)| {
                let k = k.into_string().ok()?;
                let shim_var = k == "LD_PRELOAD"
                    || (k.starts_with("TAILBOUND_") && k != ADOPT_ENV && k != CWD_ENV);
                (shim_var && !has(&k)).then(|| {
                    let mut e = k.into_bytes();
                    e.push(b'=');
                    e.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()));
                    CString::new(e).ok()
                })?
            })
            .collect();
        keep.extend(missing);
    }
    keep.extend(add.iter().filter_map(|a| CString::new(a.as_str()).ok()));
    let mut ptrs: Vec<*const c_char> = keep.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (keep, ptrs)
}

/// The kernel copy of the program `p` names when it is in a mount (`Err(errno)`: refused).
/// With `searched`, a name without a slash is left to the `PATH` search, which looks only in
/// kernel directories.
fn image_for(p: *const c_char, searched: bool) -> Result<Option<ExecImage>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    let Some(_g) = enter() else {
        return Ok(None);
    };
    // SAFETY: the program's path, NUL-terminated per the exec's contract.
    let path = unsafe { CStr::from_ptr(p) }.to_bytes();
    if searched && !path.contains(&b'/') {
        return Ok(None);
    }
    shim().exec_image(path).transpose()
}

/// Runs `f` with the path to exec: `p`, or its kernel copy's. When the copy is refused,
/// `refused` turns its errno into the call's return.
fn with_image(
    p: *const c_char,
    searched: bool,
    f: impl FnOnce(*const c_char) -> c_int,
    refused: impl FnOnce(c_int) -> c_int,
) -> c_int {
    match image_for(p, searched) {
        Ok(None) => f(p),
        Ok(Some(image)) => f(image.path().as_ptr()),
        Err(e) => refused(e),
    }
}

/// For the exec family: `-1` with `errno`.
fn refused_exec(e: c_int) -> c_int {
    real::set_errno(e);
    -1
}

/// For the spawns, which return the error number.
fn refused_spawn(e: c_int) -> c_int {
    e
}

/// Hands the served descriptors over for an exec by this process; `None` when there is
/// nothing to hand over (no mount, or none served and the working directory outside them).
fn hand_over_for(pid: Option<i32>) -> Option<HandOver> {
    hand_over_with(pid, &[])
}

/// [`hand_over_for`] with a spawn's `dup2` file actions.
fn hand_over_with(pid: Option<i32>, dup2s: &[(i32, i32)]) -> Option<HandOver> {
    let s = shim();
    if s.mounts.is_empty() {
        return None;
    }
    let h = s.hand_over(pid, dup2s);
    if h.env.is_empty() {
        s.hand_over_done(h, false);
        return None;
    }
    Some(h)
}

/// Runs an exec with the hand-over's environment; undoes the hand-over if it returns (failed).
fn exec_with(
    base: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
    fallback: impl FnOnce() -> c_int,
) -> c_int {
    let Some(g) = enter() else {
        return fallback();
    };
    let Some(h) = hand_over_for(Some(real::pid())) else {
        drop(g);
        return fallback();
    };
    // SAFETY: `base` is the program's envp (or NULL for `environ`), NULL-terminated.
    let (_keep, env) = unsafe { with_env(base, &h.env) };
    drop(g);
    let r = exec(env.as_ptr());
    let errno = real::errno();
    if let Some(_g) = enter() {
        shim().hand_over_done(h, true);
    }
    real::set_errno(errno);
    r
}

/// A spawn with the hand-over's environment, tied to the child once it exists.
fn spawn_with(
    pid: *mut pid_t,
    fa: *const libc::posix_spawn_file_actions_t,
    base: *const *mut c_char,
    spawn: impl FnOnce(*mut pid_t, *const *mut c_char) -> c_int,
    fallback: impl FnOnce() -> c_int,
) -> c_int {
    let Some(g) = enter() else {
        return fallback();
    };
    let dup2s = DUP2S
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(fa as usize))
        .cloned()
        .unwrap_or_default();
    let Some(h) = hand_over_with(None, &dup2s) else {
        drop(g);
        return fallback();
    };
    // SAFETY: `base` is the program's envp (or NULL for `environ`), NULL-terminated.
    let (_keep, env) = unsafe { with_env(base.cast(), &h.env) };
    drop(g);
    let mut child: pid_t = 0;
    let r = spawn(&mut child, env.as_ptr().cast());
    if let Some(_g) = enter() {
        if r == 0 {
            shim().handed_to(&h, child);
        }
        shim().hand_over_done(h, r != 0);
    }
    if r == 0 && !pid.is_null() {
        // SAFETY: the caller's pid slot, which posix_spawn may write.
        unsafe { *pid = child };
    }
    r
}

hooks! {
    fn fork() -> pid_t => {
        let pid = pass!();
        if pid != 0 {
            if let (Some(_g), Some(s)) = (enter(), SHIM.get()) {
                s.after_fork_in_parent((pid > 0).then_some(pid));
            }
        }
        pid
    }

    /// The child runs on its own memory, so it may call what it likes before its exec.
    fn vfork() -> pid_t => (same_as fork);

    fn execve(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int => {
        with_image(
            p,
            false,
            |p| {
                exec_with(
                    e,
                    // SAFETY: the program's path (or its image's) and arguments, and an
                    // environment built above.
                    |env| unsafe { real::execve(p, a, env) },
                    // SAFETY: as above, with the program's own environment.
                    || unsafe { real::execve(p, a, e) },
                )
            },
            refused_exec,
        )
    }

    fn execv(p: *const c_char, a: *const *const c_char) -> c_int => {
        with_image(
            p,
            false,
            |p| {
                exec_with(
                    std::ptr::null(),
                    // SAFETY: as in `execve`.
                    |env| unsafe { real::execve(p, a, env) },
                    // SAFETY: as in `execve`; `environ` is the process's environment.
                    || unsafe { real::execve(p, a, environ) },
                )
            },
            refused_exec,
        )
    }

    fn execvp(p: *const c_char, a: *const *const c_char) -> c_int => {
        with_image(
            p,
            true,
            |p| {
                exec_with(
                    std::ptr::null(),
                    // SAFETY: as in `execve`; `execvpe` searches PATH as `execvp` does.
                    |env| unsafe { real::execvpe(p, a, env) },
                    // SAFETY: as above, with the process's environment.
                    || unsafe { real::execvpe(p, a, environ) },
                )
            },
            refused_exec,
        )
    }

    fn execvpe(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int => {
        with_image(
            p,
            true,
            |p| {
                exec_with(
                    e,
                    // SAFETY: as in `execve`.
                    |env| unsafe { real::execvpe(p, a, env) },
                    // SAFETY: as above, with the program's own environment.
                    || unsafe { real::execvpe(p, a, e) },
                )
            },
            refused_exec,
        )
    }

    fn fexecve(fd: c_int, a: *const *const c_char, e: *const *const c_char) -> c_int => {
        exec_with(
            e,
            // SAFETY: as in `execve`.
            |env| unsafe { real::fexecve(fd, a, env) },
            || pass!(),
        )
    }

    fn posix_spawn(
        pid: *mut pid_t,
        p: *const c_char,
        fa: *const libc::posix_spawn_file_actions_t,
        at: *const libc::posix_spawnattr_t,
        a: *const *mut c_char,
        e: *const *mut c_char,
    ) -> c_int, or crate::abi::base::eio_number => {
        with_image(
            p,
            false,
            |p| {
                spawn_with(
                    pid,
                    fa,
                    e,
                    // SAFETY: the program's path (or its image's) and arguments, a pid slot of
                    // ours, and an environment built above.
                    |child, env| unsafe { real::posix_spawn(child, p, fa, at, a, env) },
                    // SAFETY: as above, with the caller's pid slot and environment.
                    || unsafe { real::posix_spawn(pid, p, fa, at, a, e) },
                )
            },
            refused_spawn,
        )
    }

    fn posix_spawnp(
        pid: *mut pid_t,
        p: *const c_char,
        fa: *const libc::posix_spawn_file_actions_t,
        at: *const libc::posix_spawnattr_t,
        a: *const *mut c_char,
        e: *const *mut c_char,
    ) -> c_int, or crate::abi::base::eio_number => {
        with_image(
            p,
            true,
            |p| {
                spawn_with(
                    pid,
                    fa,
                    e,
                    // SAFETY: as in `posix_spawn`.
                    |child, env| unsafe { real::posix_spawnp(child, p, fa, at, a, env) },
                    // SAFETY: as in `posix_spawn`.
                    || unsafe { real::posix_spawnp(pid, p, fa, at, a, e) },
                )
            },
            refused_spawn,
        )
    }

    /// Noted for the spawn (a library descriptor duplicated in the child is handed over
    /// under its new number), then libc's.
    fn posix_spawn_file_actions_adddup2(
        fa: *mut libc::posix_spawn_file_actions_t,
        fd: c_int,
        to: c_int,
    ) -> c_int, or crate::abi::base::eio_number => {
        let r = pass!();
        if r == 0 {
            let mut t = DUP2S.lock().unwrap_or_else(|p| p.into_inner());
            t.entry(fa as usize).or_default().push((fd, to));
        }
        r
    }

    fn posix_spawn_file_actions_init(
        fa: *mut libc::posix_spawn_file_actions_t
    ) -> c_int, or crate::abi::base::eio_number => {
        DUP2S.lock().unwrap_or_else(|p| p.into_inner()).remove(&(fa as usize));
        pass!()
    }

    fn posix_spawn_file_actions_destroy(
        fa: *mut libc::posix_spawn_file_actions_t
    ) -> c_int, or crate::abi::base::eio_number => {
        DUP2S.lock().unwrap_or_else(|p| p.into_inner()).remove(&(fa as usize));
        pass!()
    }

    /// On a hand-over, done here on the hooked spawn (see `system_handing_over`).
    fn system(cmd: *const c_char) -> c_int => {
        if cmd.is_null() {
            return pass!();
        }
        let Some(g) = enter() else {
            return pass!();
        };
        let Some(h) = hand_over_for(None) else {
            drop(g);
            return pass!();
        };
        drop(g);
        let status = system_handing_over(cmd, &h);
        if let Some(_g) = enter() {
            shim().hand_over_done(h, status == -1);
        }
        status
    }

    /// On a hand-over, done here on the hooked spawn (see `popen_handing_over`).
    fn popen(cmd: *const c_char, mode: *const c_char) -> *mut libc::FILE => {
        if cmd.is_null() || mode.is_null() {
            return pass!();
        }
        let Some(g) = enter() else {
            return pass!();
        };
        let Some(h) = hand_over_for(None) else {
            drop(g);
            return pass!();
        };
        drop(g);
        // SAFETY: `mode` is the program's NUL-terminated mode string.
        let mode = unsafe { CStr::from_ptr(mode) }.to_bytes();
        let (fp, pid) = popen_handing_over(cmd, mode, &h);
        if let Some(_g) = enter() {
            if fp.is_null() {
                shim().hand_over_done(h, true);
            } else {
                shim().handed_to(&h, pid);
                shim().hand_over_done(h, false);
            }
        }
        fp
    }

    /// A stream `popen` made here: closed, then its shell waited for.
    fn pclose(fp: *mut libc::FILE) -> c_int => {
        let pid = {
            let mut t = POPENED.lock().unwrap_or_else(|p| p.into_inner());
            let at = t.iter().position(|&(f, _)| f == fp as usize);
            at.map(|i| t.swap_remove(i).1)
        };
        let Some(pid) = pid else {
            return pass!();
        };
        // SAFETY: the stream `popen` returned, closed once here.
        unsafe { libc::fclose(fp) };
        wait_for(pid)
    }
}

/// At load, in an image a previous one handed descriptors to: adopts them now, before the
/// program's first call, and points the standard streams at those standing at 0, 1 or 2
/// (glibc's own streams do their I/O with internal calls no hook sees).
extern "C" fn adopt_at_start() {
    crate::abi::base::boundary(|| {
        // Another library's constructor may have made a call that started the shim (and
        // adopted) already.
        let s = match SHIM.get() {
            Some(s) => s,
            None => {
                if std::env::var_os(ADOPT_ENV).is_none() && std::env::var_os(CWD_ENV).is_none() {
                    return;
                }
                let _g = enter();
                shim()
            }
        };
        for fd in 0..3 {
            if s.is_fd(fd) {
                crate::abi::streams::rebind_std_stream(fd);
            }
        }
    })
}

#[used]
#[link_section = ".init_array"]
static ADOPT_AT_START: extern "C" fn() = adopt_at_start;

/// `system()` with a hand-over: glibc's own spawns its shell internally, where no hook sees it,
/// so it is done here as POSIX describes it, on the hooked spawn: `/bin/sh -c CMD`, with SIGINT
/// and SIGQUIT ignored and SIGCHLD blocked in the caller while it waits.
fn system_handing_over(cmd: *const c_char, h: &HandOver) -> c_int {
    // SAFETY: all-zero bytes are valid sigaction and sigset_t values, filled in below.
    let (mut ignore, mut old_int, mut old_quit): (
        libc::sigaction,
        libc::sigaction,
        libc::sigaction,
    ) = unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
    ignore.sa_sigaction = libc::SIG_IGN;
    // SAFETY: as above.
    let (mut chld, mut old_mask): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid pointers to the values above; these calls change only this process's
    // signal dispositions and mask, restored below.
    unsafe {
        libc::sigaction(libc::SIGINT, &ignore, &mut old_int);
        libc::sigaction(libc::SIGQUIT, &ignore, &mut old_quit);
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old_mask);
    }
    let status = spawn_shell(cmd, h, &old_int, &old_quit, &old_mask);
    // SAFETY: restores what was saved above.
    unsafe {
        libc::sigaction(libc::SIGINT, &old_int, std::ptr::null_mut());
        libc::sigaction(libc::SIGQUIT, &old_quit, std::ptr::null_mut());
        libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
    }
    status
}

/// Spawns `/bin/sh -c CMD` with the hand-over and waits for it: its wait status, or -1.
fn spawn_shell(
    cmd: *const c_char,
    h: &HandOver,
    old_int: &libc::sigaction,
    old_quit: &libc::sigaction,
    old_mask: &libc::sigset_t,
) -> c_int {
    // SAFETY: NULL is `environ`.
    let (_keep, env) = unsafe { with_env(std::ptr::null(), &h.env) };
    let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), cmd, std::ptr::null()];
    // SAFETY: all-zero bytes, then initialized by posix_spawnattr_init before any use.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    // SAFETY: all-zero bytes are a valid sigset_t, filled in below.
    let mut defaults: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut pid: pid_t = 0;
    // SAFETY: `attr` is initialized first and destroyed last; the signal sets and the caller's
    // mask are valid; argv and env are NULL-terminated arrays of NUL-terminated strings that live
    // until the spawn returns.
    let r = unsafe {
        libc::posix_spawnattr_init(&mut attr);
        libc::sigemptyset(&mut defaults);
        // The child takes the caller's own dispositions back, unless those were "ignore".
        if old_int.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut defaults, libc::SIGINT);
        }
        if old_quit.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut defaults, libc::SIGQUIT);
        }
        libc::posix_spawnattr_setsigdefault(&mut attr, &defaults);
        libc::posix_spawnattr_setsigmask(&mut attr, old_mask);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as libc::c_short,
        );
        let r = real::posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            std::ptr::null(),
            &attr,
            argv.as_ptr().cast(),
            env.as_ptr().cast(),
        );
        libc::posix_spawnattr_destroy(&mut attr);
        r
    };
    if let Some(_g) = enter() {
        if r == 0 {
            shim().handed_to(h, pid);
        }
    }
    if r != 0 {
        real::set_errno(r);
        return -1;
    }
    wait_for(pid)
}

/// The `dup2` actions of each live `posix_spawn_file_actions_t` (by address): `(from, to)`.
static DUP2S: Mutex<BTreeMap<usize, Vec<(c_int, c_int)>>> = Mutex::new(BTreeMap::new());

/// Streams `popen` made here and their shells' pids, for `pclose`.
static POPENED: Mutex<Vec<(usize, pid_t)>> = Mutex::new(Vec::new());

/// `pid`'s wait status, or -1.
fn wait_for(pid: pid_t) -> c_int {
    let mut status: c_int = 0;
    loop {
        // SAFETY: our own child and a status slot of ours.
        let w = unsafe { libc::waitpid(pid, &mut status, 0) };
        if w == pid {
            return status;
        }
        if w < 0 && real::errno() != libc::EINTR {
            return -1;
        }
    }
}

/// `popen` as POSIX describes it, on the hooked spawn: `/bin/sh -c CMD` with its standard output
/// (mode `r`) or input (mode `w`) a pipe whose other end is the returned stream. The stream and
/// the shell's pid, or NULL (errno set).
fn popen_handing_over(cmd: *const c_char, mode: &[u8], h: &HandOver) -> (*mut libc::FILE, pid_t) {
    let read = match mode.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            real::set_errno(libc::EINVAL);
            return (std::ptr::null_mut(), 0);
        }
    };
    let cloexec = mode.contains(&b'e');
    let mut fds: [c_int; 2] = [-1; 2];
    // SAFETY: a two-slot array for the pipe's ends.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return (std::ptr::null_mut(), 0);
    }
    let (ours, theirs, target) = if read {
        (fds[0], fds[1], 1)
    } else {
        (fds[1], fds[0], 0)
    };
    // SAFETY: NULL is `environ`.
    let (_keep, env) = unsafe { with_env(std::ptr::null(), &h.env) };
    let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), cmd, std::ptr::null()];
    // SAFETY: all-zero bytes, then initialized by posix_spawn_file_actions_init before any use.
    let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    let mut pid: pid_t = 0;
    // SAFETY: `actions` is initialized first and destroyed last; the descriptors are the pipe's;
    // argv and env are NULL-terminated arrays of NUL-terminated strings that live until the spawn
    // returns. Both pipe ends are close-on-exec, so the shell keeps only the one made `target`.
    let r = unsafe {
        libc::posix_spawn_file_actions_init(&mut actions);
        libc::posix_spawn_file_actions_adddup2(&mut actions, theirs, target);
        let r = real::posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            &actions,
            std::ptr::null(),
            argv.as_ptr().cast(),
            env.as_ptr().cast(),
        );
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::close(theirs);
        r
    };
    if r != 0 {
        // SAFETY: our end of the pipe, unused.
        unsafe { libc::close(ours) };
        real::set_errno(r);
        return (std::ptr::null_mut(), 0);
    }
    if !cloexec {
        let _ = real::set_kernel_cloexec(ours, false);
    }
    let m: &CStr = if read { c"r" } else { c"w" };
    // SAFETY: our end of the pipe, handed to the new stream.
    let fp = unsafe { libc::fdopen(ours, m.as_ptr()) };
    if fp.is_null() {
        // SAFETY: as above; the shell sees the pipe close.
        unsafe { libc::close(ours) };
        wait_for(pid);
        return (std::ptr::null_mut(), 0);
    }
    POPENED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((fp as usize, pid));
    (fp, pid)
}
