//! An absolute-time periodic schedule on `CLOCK_MONOTONIC`.
//!
//! Release `k` is at `start + k * period`, computed from the start, never from the previous wake-up,
//! so the schedule does not drift. A late wake-up is reported, not corrected by bursting.

use std::io;
use std::time::Duration;

use tailbound::sys::time::{monotonic_now, sleep_until, MonoNanos};

/// One release of a [`PeriodicTimer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Which release this is, from 0.
    pub index: u64,
    /// When the release was due.
    pub release: MonoNanos,
    /// How long after `release` the caller got control back.
    pub late: Duration,
}

/// A fixed-period schedule that starts when it is created.
#[derive(Debug, Clone)]
pub struct PeriodicTimer {
    start: MonoNanos,
    period: Duration,
    next: u64,
}

impl PeriodicTimer {
    /// A schedule whose first release is now.
    pub fn new(period: Duration) -> PeriodicTimer {
        PeriodicTimer::starting_at(monotonic_now(), period)
    }

    /// A schedule whose first release is at `start`.
    pub fn starting_at(start: MonoNanos, period: Duration) -> PeriodicTimer {
        PeriodicTimer {
            start,
            period,
            next: 0,
        }
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// When release `index` is due.
    pub fn release_of(&self, index: u64) -> MonoNanos {
        let offset = self.period.as_nanos().saturating_mul(u128::from(index));
        MonoNanos(
            self.start
                .0
                .saturating_add(offset.min(u64::MAX as u128) as u64),
        )
    }

    /// Sleeps until the next release and returns it; returns at once if it is already due.
    pub fn wait(&mut self) -> io::Result<Tick> {
        let index = self.next;
        let release = self.release_of(index);
        sleep_until(release)?;
        self.next += 1;
        Ok(Tick {
            index,
            release,
            late: monotonic_now().since(release),
        })
    }

    /// Skips releases that are already past, so a caller that overran several periods resumes on
    /// the schedule: the next [`wait`](Self::wait) returns the latest release that is due (or the
    /// next one to come). Returns how many were skipped. A zero period never skips.
    pub fn skip_missed(&mut self) -> u64 {
        let period_ns = self.period.as_nanos();
        let now = monotonic_now();
        if period_ns == 0 || now < self.start {
            return 0;
        }
        // The latest release at or before now.
        let due = u64::try_from(u128::from(now.0 - self.start.0) / period_ns).unwrap_or(u64::MAX);
        let skipped = due.saturating_sub(self.next);
        self.next += skipped;
        skipped
    }

    /// The index the next [`wait`](Self::wait) will return.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Release 0.
    pub fn start(&self) -> MonoNanos {
        self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_exact_multiples_of_the_period_from_the_start() {
        let start = monotonic_now();
        let period = Duration::from_micros(700);
        let mut timer = PeriodicTimer::starting_at(start, period);
        for k in 0..20u64 {
            let tick = timer.wait().unwrap();
            assert_eq!(tick.index, k);
            assert_eq!(tick.release.0, start.0 + k * 700_000);
            assert!(monotonic_now() >= tick.release);
        }
    }

    #[test]
    fn a_release_already_past_returns_at_once_one_per_call() {
        let start = MonoNanos(monotonic_now().0.saturating_sub(1_000_000_000));
        let mut timer = PeriodicTimer::starting_at(start, Duration::from_millis(100));
        for k in 0..3u64 {
            let tick = timer.wait().unwrap();
            assert_eq!(tick.index, k);
            assert_eq!(
                tick.release,
                start.plus(Duration::from_millis(100) * k as u32)
            );
            assert!(tick.late >= Duration::from_millis(1000 - 100 * k));
        }
        assert_eq!(timer.next_index(), 3);
        assert_eq!(timer.start(), start);
    }

    #[test]
    fn a_zero_period_never_skips() {
        let mut timer = PeriodicTimer::new(Duration::ZERO);
        timer.wait().unwrap();
        assert_eq!(timer.skip_missed(), 0);
        assert_eq!(timer.wait().unwrap().index, 1);
    }

    #[test]
    fn a_long_overrun_is_skipped_not_burst() {
        let mut timer = PeriodicTimer::new(Duration::from_millis(1));
        timer.wait().unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let skipped = timer.skip_missed();
        assert!(skipped >= 8, "skipped {skipped}");
        let tick = timer.wait().unwrap();
        assert_eq!(tick.index, 1 + skipped);
        // It resumes on the original grid.
        assert_eq!(tick.release, timer.release_of(tick.index));
    }
}
