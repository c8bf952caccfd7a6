//! Process and thread real-time hygiene: memory locking, SCHED_FIFO, CPU affinity, identity.

use std::io;

use super::cvt;

/// `mlockall(MCL_CURRENT | MCL_FUTURE)`: keeps every page of the process resident, so a recording
/// never waits on a page fault. Needs `CAP_IPC_LOCK` or a large enough `RLIMIT_MEMLOCK`.
pub fn lock_all_memory() -> io::Result<()> {
    // SAFETY: plain syscall with constant flags.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) })?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
