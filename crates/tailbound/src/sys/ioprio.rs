//! Linux I/O priorities (`ioprio_get`/`ioprio_set`, see ioprio_set(2)) for the calling thread.
//!
//! The kernel packs a priority as `class << 13 | level`: class 1 = real time, 2 = best effort,
//! 3 = idle, 0 = none (the thread follows its CPU nice value, which the kernel treats as best
//! effort at level `(nice + 20) / 5`).

use std::io;

/// `IOPRIO_WHO_PROCESS`: `who` is a thread id, 0 meaning the calling thread.
const IOPRIO_WHO_PROCESS: libc::c_long = 1;
const IOPRIO_CLASS_SHIFT: u32 = 13;
const IOPRIO_LEVEL_MASK: u32 = (1 << IOPRIO_CLASS_SHIFT) - 1;

/// The kernel's class numbers.
pub const IOPRIO_CLASS_NONE: u32 = 0;
pub const IOPRIO_CLASS_RT: u32 = 1;
pub const IOPRIO_CLASS_BE: u32 = 2;
pub const IOPRIO_CLASS_IDLE: u32 = 3;

/// The calling thread's I/O priority as `(class, level)` in the kernel's numbering.
pub fn get_current_thread() -> io::Result<(u32, u32)> {
    // SAFETY: ioprio_get takes two integers and touches no memory of ours.
    let ret = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0 as libc::c_long) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    let value = ret as u32;
    Ok((value >> IOPRIO_CLASS_SHIFT, value & IOPRIO_LEVEL_MASK))
}

/// Sets the calling thread's I/O priority. Raising a thread to the real-time class needs
/// `CAP_SYS_ADMIN` (or `CAP_SYS_NICE` on newer kernels).
pub fn set_current_thread(class: u32, level: u32) -> io::Result<()> {
    let value = (class << IOPRIO_CLASS_SHIFT) | (level & IOPRIO_LEVEL_MASK);
    // SAFETY: ioprio_set takes three integers and touches no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            value as libc::c_long,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's CPU nice value, which a thread without an I/O class inherits from.
pub fn current_nice() -> io::Result<i32> {
    // getpriority can legitimately return -1, so errno is cleared first and checked after.
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: plain syscall; PRIO_PROCESS with id 0 means the calling thread on Linux.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    // SAFETY: as above.
    let errno = unsafe { *libc::__errno_location() };
    if nice == -1 && errno != 0 {
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(nice)
}

/// Thread `tid`'s I/O priority as `(class, level)` (any thread of any process the caller may
/// see; a pool server asks this of its clients' threads).
pub fn get_thread(tid: u32) -> io::Result<(u32, u32)> {
    // SAFETY: ioprio_get takes two integers and touches no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_ioprio_get,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_long,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    let value = ret as u32;
    Ok((value >> IOPRIO_CLASS_SHIFT, value & IOPRIO_LEVEL_MASK))
}

/// Thread `tid`'s CPU nice value.
pub fn nice_of(tid: u32) -> io::Result<i32> {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: plain syscall; PRIO_PROCESS with a thread id names that thread on Linux.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    // SAFETY: as above.
    let errno = unsafe { *libc::__errno_location() };
    if nice == -1 && errno != 0 {
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(nice)
}
