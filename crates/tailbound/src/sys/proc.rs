//! Process and thread real-time hygiene: memory locking, SCHED_FIFO, CPU affinity, identity.

use std::io;

use super::cvt;

/// `mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`: every page the process has, and every page
/// it touches later, stays resident, so a recording never waits for a page to come back.
/// Nothing is faulted in ahead (a recorder's file mapping may be far larger than memory): the
/// recorder touches what it uses before recording. Needs `CAP_IPC_LOCK` or a large enough
/// `RLIMIT_MEMLOCK`.
pub fn lock_all_memory() -> io::Result<()> {
    // SAFETY: plain syscall with constant flags.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) })?;
    Ok(())
}

/// Touches `bytes` of the calling thread's stack, so calls that go that deep later take no page
/// fault (and, under [`lock_all_memory`], find the pages locked).
#[inline(never)]
pub fn prefault_stack(bytes: usize) {
    const CHUNK: usize = 16 << 10;
    let mut chunk = [0u8; CHUNK];
    std::hint::black_box(&mut chunk);
    if bytes > CHUNK {
        prefault_stack(bytes - CHUNK);
    }
    // Used after the call, so the frame stays on the stack under it.
    std::hint::black_box(&mut chunk);
}

/// Undoes [`lock_all_memory`].
pub fn unlock_all_memory() -> io::Result<()> {
    // SAFETY: plain syscall without arguments.
    cvt(unsafe { libc::munlockall() })?;
    Ok(())
}

/// Puts the calling thread in `SCHED_FIFO` at `priority` (1–99). Needs `CAP_SYS_NICE`.
pub fn set_fifo_priority(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: `param` is a valid sched_param; pid 0 means the calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })?;
    Ok(())
}

/// Puts the calling thread in `SCHED_BATCH`: it gets its fair share of the CPU, but its wake-ups
/// never preempt a running thread (it waits for the running thread to block or for the tick).
/// Needs no privilege.
pub fn set_batch_policy() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 means the calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) })?;
    Ok(())
}

/// The calling thread's kernel id (`gettid`).
pub fn thread_id() -> i32 {
    // SAFETY: no arguments; gettid cannot fail.
    unsafe { libc::gettid() }
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is out of range"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked against CPU_SETSIZE, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// True when the process runs with effective user id 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// CPU time the whole process (every thread) has used so far, in user and in kernel mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: std::time::Duration,
    pub system: std::time::Duration,
}

/// `getrusage(RUSAGE_SELF)`: the process's user and system CPU time.
pub fn process_cpu_times() -> io::Result<CpuTimes> {
    let usage = rusage(libc::RUSAGE_SELF)?;
    let time = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
    };
    Ok(CpuTimes {
        user: time(usage.ru_utime),
        system: time(usage.ru_stime),
    })
}

/// `getrusage(RUSAGE_THREAD)`: page faults the calling thread took that needed no I/O (a page
/// allocated, or mapped from the page cache).
pub fn thread_minor_faults() -> io::Result<u64> {
    Ok(rusage(libc::RUSAGE_THREAD)?.ru_minflt.max(0) as u64)
}

/// What `getrusage(RUSAGE_THREAD)` counts for the calling thread: page faults and context switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// Faults served without I/O (a page allocated, or mapped from the page cache).
    pub minor_faults: u64,
    /// Faults that waited for I/O.
    pub major_faults: u64,
    /// The thread gave the CPU up (it blocked: a lock, I/O, a sleep).
    pub voluntary_switches: u64,
    /// The scheduler took the CPU away (preemption, end of its time slice).
    pub involuntary_switches: u64,
}

/// `getrusage(RUSAGE_THREAD)` for the calling thread. No allocation.
pub fn thread_usage() -> io::Result<ThreadUsage> {
    let u = rusage(libc::RUSAGE_THREAD)?;
    Ok(ThreadUsage {
        minor_faults: u.ru_minflt.max(0) as u64,
        major_faults: u.ru_majflt.max(0) as u64,
        voluntary_switches: u.ru_nvcsw.max(0) as u64,
        involuntary_switches: u.ru_nivcsw.max(0) as u64,
    })
}

/// The CPU the calling thread runs on now (`sched_getcpu`), or `None` where the kernel cannot say.
pub fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; returns -1 with errno on failure.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Lets the calling thread run on every online CPU except `cpu` (a helper thread kept off the
/// recording thread's CPU; the kernel keeps it inside the process's cpuset). Does nothing when
/// `cpu` is the only CPU online.
pub fn avoid_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: sysconf takes a constant name and cannot fail for it in a way that harms.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let online = online.min(libc::CPU_SETSIZE as usize);
    if (0..online).all(|c| c == cpu) {
        return Ok(());
    }
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in (0..online).filter(|&c| c != cpu) {
        // SAFETY: `c` is below CPU_SETSIZE, so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// The process's `RLIMIT_MEMLOCK` soft limit in bytes (`None`: unlimited).
pub fn memlock_limit() -> io::Result<Option<u64>> {
    // SAFETY: an all-zero rlimit is a valid value for getrlimit to overwrite.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is a live, writable rlimit.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) })?;
    Ok((lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur))
}

/// `getrusage(who)`.
fn rusage(who: libc::c_int) -> io::Result<libc::rusage> {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable rusage.
    cvt(unsafe { libc::getrusage(who, &mut usage) })?;
    Ok(usage)
}

/// How many CPUs this process may run on (its affinity mask), at least 1.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The process's effective user and group ids (owners of the files it creates).
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: no arguments; these calls cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Restores the default action of `SIGPIPE`, which the Rust runtime ignores, so a command whose
/// output goes into a closed pipe (`tailbound fs cat POOL FILE | head`) ends quietly, as shell
/// tools do, instead of failing on its next write.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Threads this process runs now (`Threads:` in /proc/self/status).
pub fn thread_count() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self/status names no thread count"))
}

/// Forks a process that runs one thread: `Some(child pid)` in the parent, `None` in the child.
/// Refused while other threads run, since the child would inherit the locks they hold.
pub fn fork_single_threaded() -> io::Result<Option<u32>> {
    if thread_count()? != 1 {
        return Err(io::Error::other(
            "fork refused: the process runs other threads",
        ));
    }
    // SAFETY: with one thread no lock can be held by a thread the child lacks.
    let pid = unsafe { libc::fork() };
    match pid {
        p if p < 0 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        p => Ok(Some(p as u32)),
    }
}

/// Waits for the child `pid` to end and returns its exit code, or `128 + signal` when a signal
/// ended it (as a shell reports it).
pub fn wait_child(pid: u32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the call; waiting has no other effect.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Ok(128 + libc::WTERMSIG(status))
    }
}

/// Runs `command` through libc's `system()` (`sh -c`), as programs that shell out do, and
/// returns the shell's exit code (`128 + signal` when a signal ended it).
pub fn system(command: &str) -> io::Result<i32> {
    let c = std::ffi::CString::new(command)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let status = unsafe { libc::system(c.as_ptr()) };
    if status == -1 {
        return Err(io::Error::last_os_error());
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Ok(128 + libc::WTERMSIG(status))
    }
}

/// Starts a new session (`setsid`): the process leaves its terminal's job control.
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid takes no arguments and changes only the process's session.
    cvt(unsafe { libc::setsid() })?;
    Ok(())
}

/// Points standard input, output and error at /dev/null, as a daemon keeps no terminal.
pub fn stdio_to_null() -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors, which belong to this process; `null`
        // stays open for the call.
        cvt(unsafe { libc::dup2(null.as_raw_fd(), fd) })?;
    }
    Ok(())
}

/// A descriptor that becomes readable when process `pid` exits (`pidfd_open`, Linux 5.3+).
pub fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain integers; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process a pidfd refers to has exited (its pidfd is readable).
pub fn pidfd_exited(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_is_refused_while_another_thread_runs() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        assert!(thread_count().unwrap() >= 2);
        let err = fork_single_threaded().expect_err("two threads run");
        assert!(err.to_string().contains("other threads"), "{err}");
        drop(tx);
        let _ = other.join();
    }

    #[test]
    fn cpu_times_grow_with_work() {
        let before = process_cpu_times().unwrap();
        // Spin until the kernel has accounted some of it (its accounting is tick-grained).
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut x = 0u64;
        let mut after = before;
        while after == before && std::time::Instant::now() < give_up {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = process_cpu_times().unwrap();
        }
        assert!(after.user + after.system > before.user + before.system);
        assert!(after.user >= before.user && after.system >= before.system);
        assert!(online_cpus() >= 1);
    }

    #[test]
    fn pinning_to_an_absurd_cpu_is_an_error() {
        assert!(pin_to_cpu(1 << 20).is_err());
    }

    #[test]
    fn pinning_to_cpu_zero_works_in_a_thread() {
        std::thread::spawn(|| pin_to_cpu(0).unwrap())
            .join()
            .unwrap();
    }
}
