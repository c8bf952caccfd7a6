//! Clocks and absolute-time sleeps on `CLOCK_MONOTONIC`.

use std::io;
use std::time::Duration;

/// A point on `CLOCK_MONOTONIC`, in nanoseconds since an unspecified start (boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MonoNanos(pub u64);

impl MonoNanos {
    /// Adds a duration, saturating at the end of time.
    pub fn plus(self, d: Duration) -> MonoNanos {
        MonoNanos(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: MonoNanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Reads `CLOCK_MONOTONIC`.
pub fn monotonic_now() -> MonoNanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(ret, 0, "clock_gettime(CLOCK_MONOTONIC) cannot fail");
    MonoNanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time the calling thread has run so far (`CLOCK_THREAD_CPUTIME_ID`), in nanoseconds. Time
/// the hypervisor took (steal) is not counted where the kernel accounts it.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock exists for every thread on Linux.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if ret != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until the absolute monotonic time `deadline` (`clock_nanosleep(TIMER_ABSTIME)`), so a
/// periodic loop never accumulates drift. Returns at once if the deadline has passed.
pub fn sleep_until(deadline: MonoNanos) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: (deadline.0 / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline.0 % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null with TIMER_ABSTIME.
        let ret = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        match ret {
            0 => return Ok(()),
            libc::EINTR => continue,
            err => return Err(io::Error::from_raw_os_error(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_does_not_go_back_and_sleep_reaches_deadline() {
        let start = monotonic_now();
        let deadline = start.plus(Duration::from_millis(2));
        sleep_until(deadline).unwrap();
        assert!(monotonic_now() >= deadline);
        // A deadline in the past returns at once without error.
        sleep_until(start).unwrap();
    }
}
