//! Runs an operation once per period on an absolute-time schedule and times every call.
//!
//! A **deadline miss** is a call that completes after the end of its own period (its release plus
//! one period), or a period that passed without a call because an earlier call overran it.

use std::io;
use std::time::Duration;

use crate::bench::progress::Progress;
use crate::bench::stats::LatencyHistogram;
use crate::bench::timer::PeriodicTimer;
use crate::sys::time::monotonic_now;

/// What to run: `count` calls, one every `period`, optionally advancing a progress bar.
#[derive(Debug, Clone)]
pub struct PeriodicConfig {
    pub period: Duration,
    pub count: u64,
    pub progress: Option<Progress>,
}

/// What a periodic run measured.
#[derive(Debug, Clone)]
pub struct PeriodicResult {
    /// The latency of each call.
    pub latency: LatencyHistogram,
    pub deadline_misses: u64,
    pub elapsed: Duration,
}

/// Whether a periodic run goes on after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// End the run after this call (e.g. the input ended).
    Stop,
}

/// Calls `op(i)` for `i` in `0..cfg.count`, each at its release time, and times each call.
/// An error from `op` ends the run and is returned with the call's index; [`Flow::Stop`] ends it
/// early without error.
pub fn run_periodic(
    cfg: &PeriodicConfig,
    mut op: impl FnMut(u64) -> io::Result<Flow>,
) -> io::Result<PeriodicResult> {
    let mut latency = LatencyHistogram::new();
    let mut deadline_misses = 0;
    let start = monotonic_now();
    let mut timer = PeriodicTimer::starting_at(start, cfg.period);
    let period_ns = cfg.period.as_nanos() as u64;
    let mut calls = 0;
    while calls < cfg.count {
        let tick = timer.wait()?;
        let begin = monotonic_now();
        let flow = op(calls).map_err(|e| io::Error::new(e.kind(), format!("call {calls}: {e}")))?;
        let end = monotonic_now();
        latency.record(end.since(begin));
        if end.0 > tick.release.0.saturating_add(period_ns) {
            deadline_misses += 1;
        }
        calls += 1;
        // Periods that went by entirely during an overrun had no call at all: each is a miss too.
        let skipped = timer.skip_missed().min(cfg.count - calls);
        deadline_misses += skipped;
        if let Some(progress) = &cfg.progress {
            progress.inc(1);
        }
        if flow == Flow::Stop {
            break;
        }
    }
    Ok(PeriodicResult {
        latency,
        deadline_misses,
        elapsed: monotonic_now().since(start),
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
            progress: None,
        };
        let result = run_periodic(&cfg, |i| {
            seen.push(i);
            Ok(Flow::Continue)
        })
        .unwrap();
        assert_eq!(seen, (0..25).collect::<Vec<_>>());
        assert_eq!(result.latency.count(), 25);
        assert!(result.deadline_misses <= 25);
        assert!(result.elapsed >= Duration::from_micros(500 * 24));
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
            Ok(Flow::Continue)
        })
        .unwrap();
        assert!(result.deadline_misses >= overrun.len() as u64);
        assert!(result.latency.max() >= (period * 3).as_nanos() as u64);
    }

    #[test]
    fn an_error_stops_the_run_and_names_the_call() {
        let cfg = PeriodicConfig {
            period: Duration::from_micros(100),
            count: 10,
            progress: None,
        };
        let err = run_periodic(&cfg, |i| {
            if i == 4 {
                Err(io::Error::other("disk full"))
            } else {
                Ok(Flow::Continue)
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains("call 4"), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
    }

    #[test]
    fn stop_ends_the_run_after_that_call() {
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
    }
}
