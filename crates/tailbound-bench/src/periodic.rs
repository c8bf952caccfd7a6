//! Runs an operation once per period on an absolute-time schedule and times every call.
//!
//! Call `i` is released at `start + i * period` unless earlier calls overran (see below). Each
//! call is timed on `CLOCK_MONOTONIC`, from just after its release to its return.
//!
//! A **deadline miss** is a period that ended without its work done:
//! - a *late call* completes after the end of its own slot (its release plus one period);
//! - a *skipped period* passed entirely while an earlier call was still running (or while the
//!   thread waited to be scheduled). The run does not burst to catch up: after an overrun the
//!   next call goes to the latest release that is due, and every release jumped over is a
//!   skipped period. Periods after the last call are not part of the run and are not counted.
//!
//! So a call that overran by `k` whole periods costs `k` misses, and a run of `count` calls
//! lasts `count + skipped_periods` periods.

use std::io;
use std::time::Duration;

use crate::progress::Progress;
use crate::stats::LatencyHistogram;
use crate::timer::PeriodicTimer;
use tailbound::sys::time::monotonic_now;

/// What to run: `count` calls, one every `period`, each advancing `progress` by one if set.
#[derive(Debug, Clone)]
pub struct PeriodicConfig {
    pub period: Duration,
    pub count: u64,
    pub progress: Option<Progress>,
}

/// What a periodic run measured.
#[derive(Debug, Clone)]
pub struct PeriodicResult {
    /// How long each call took.
    pub latency: LatencyHistogram,
    /// How late the thread got control back after each release (scheduler and timer noise,
    /// before the call started). Zero-lateness wake-ups are recorded as 1 ns.
    pub wake_late: LatencyHistogram,
    /// `late_calls + skipped_periods`.
    pub deadline_misses: u64,
    /// Calls that completed after their release plus one period; never more than the calls made.
    pub late_calls: u64,
    /// Periods that passed with no call because an earlier call or wake-up ran past them.
    pub skipped_periods: u64,
    /// From the first release to the end of the last call.
    pub elapsed: Duration,
    /// The index of the slowest call (the first of equals); `None` when no call was made.
    pub slowest_call: Option<u64>,
}

/// Whether a periodic run goes on after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End the run after this call (e.g. the input ended).
    Stop,
}

/// An operation that returns `()` always continues.
impl From<()> for Flow {
    fn from((): ()) -> Flow {
        Flow::Continue
    }
}

/// Calls `op(i)` for `i` in `0..cfg.count`, each at its release time, and times each call.
///
/// `op` returns `io::Result<()>` to always go on, or `io::Result<Flow>` to be able to end the
/// run early with [`Flow::Stop`] (that call is still timed and counted). An error from `op` ends
/// the run and is returned with the call's index in its message, keeping its kind. A zero
/// `count` makes no call.
pub fn run_periodic<R: Into<Flow>>(
    cfg: &PeriodicConfig,
    mut op: impl FnMut(u64) -> io::Result<R>,
) -> io::Result<PeriodicResult> {
    let mut latency = LatencyHistogram::new();
    let mut wake_late = LatencyHistogram::new();
    let (mut late_calls, mut skipped_periods) = (0u64, 0u64);
    let start = monotonic_now();
    let mut timer = PeriodicTimer::starting_at(start, cfg.period);
    let mut end = start;
    let mut slowest: Option<(u64, Duration)> = None;
    for i in 0..cfg.count {
        if i > 0 {
            // Jump over releases that ended while the previous call (or a late wake-up) ran.
            skipped_periods += timer.skip_missed();
        }
        let tick = timer.wait()?;
        wake_late.record(tick.late);
        let begin = monotonic_now();
        let flow = op(i)
            .map_err(|e| io::Error::new(e.kind(), format!("periodic call {i}: {e}")))?
            .into();
        end = monotonic_now();
        let took = end.since(begin);
        latency.record(took);
        if slowest.is_none_or(|(_, worst)| took > worst) {
            slowest = Some((i, took));
        }
        if end > tick.release.plus(cfg.period) {
            late_calls += 1;
        }
        if let Some(progress) = &cfg.progress {
            progress.inc(1);
        }
        if flow == Flow::Stop {
            break;
        }
    }
    debug_assert!(late_calls <= latency.count());
    Ok(PeriodicResult {
        latency,
        wake_late,
        deadline_misses: late_calls + skipped_periods,
        late_calls,
        skipped_periods,
        elapsed: end.since(start),
        slowest_call: slowest.map(|(i, _)| i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_runs_once_in_order_and_is_timed() {
        let mut seen = Vec::new();
        let cfg = PeriodicConfig {
            period: Duration::from_micros(500),
            count: 25,
            progress: Some(Progress::hidden(25)),
        };
        let result = run_periodic(&cfg, |i| {
            seen.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, (0..25).collect::<Vec<_>>());
        assert_eq!(result.latency.count(), 25);
        assert_eq!(result.wake_late.count(), 25);
        assert!(result.late_calls <= 25);
        assert_eq!(
            result.deadline_misses,
            result.late_calls + result.skipped_periods
        );
        // The last call is released 24 periods (plus any skipped ones) after the first.
        let periods = 24 + result.skipped_periods;
        assert!(result.elapsed >= Duration::from_micros(500) * periods as u32);
        assert_eq!(cfg.progress.unwrap().position(), 25);
    }

    #[test]
    fn calls_that_overrun_their_period_are_counted_as_misses() {
        let period = Duration::from_millis(2);
        let cfg = PeriodicConfig {
            period,
            count: 10,
            progress: None,
        };
        let overrun = [3u64, 7];
        let result = run_periodic(&cfg, |i| {
            if overrun.contains(&i) {
                std::thread::sleep(period * 3);
            }
            Ok(())
        })
        .unwrap();
        // Each overrun is a late call, and it ran over at least two whole periods that follow.
        assert!(result.late_calls >= overrun.len() as u64, "{result:?}");
        assert!(result.late_calls <= 10, "{result:?}");
        assert!(
            result.skipped_periods >= 2 * overrun.len() as u64,
            "{result:?}"
        );
        assert!(
            result.deadline_misses >= 3 * overrun.len() as u64,
            "{result:?}"
        );
        assert!(result.latency.max() >= (period * 3).as_nanos() as u64);
        assert_eq!(result.latency.count(), 10);
        let slowest = result.slowest_call.unwrap();
        assert!(overrun.contains(&slowest), "{result:?}");
    }

    #[test]
    fn an_overrun_on_the_last_call_skips_nothing_after_the_run() {
        let period = Duration::from_millis(1);
        let cfg = PeriodicConfig {
            period,
            count: 1,
            progress: None,
        };
        let result = run_periodic(&cfg, |_| {
            std::thread::sleep(period * 4);
            Ok(())
        })
        .unwrap();
        assert_eq!(result.late_calls, 1);
        assert_eq!(result.skipped_periods, 0);
        assert_eq!(result.deadline_misses, 1);
    }

    #[test]
    fn an_error_stops_the_run_and_names_the_call() {
        let cfg = PeriodicConfig {
            period: Duration::from_micros(100),
            count: 10,
            progress: None,
        };
        let mut calls = 0;
        let err = run_periodic(&cfg, |i| {
            calls += 1;
            if i == 4 {
                Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(calls, 5);
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("call 4"), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
    }

    #[test]
    fn stop_ends_the_run_after_that_call_and_zero_calls_make_none() {
        let cfg = PeriodicConfig {
            period: Duration::from_micros(100),
            count: 1000,
            progress: None,
        };
        let r = run_periodic(&cfg, |i| {
            Ok(if i == 6 { Flow::Stop } else { Flow::Continue })
        })
        .unwrap();
        assert_eq!(r.latency.count(), 7);
        let none = PeriodicConfig { count: 0, ..cfg };
        let r = run_periodic(&none, |_| -> io::Result<()> { panic!("no call expected") }).unwrap();
        assert_eq!(r.latency.count(), 0);
        assert_eq!(r.deadline_misses, 0);
    }
}
