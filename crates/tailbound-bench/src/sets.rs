//! Repeated sets of one measurement, keeping the worst, as the papers report.
//!
//! The paper runs each case several times and reports the set with the largest maximum
//! latency, since a bounded-latency claim is only as good as its worst run. Every set is kept,
//! so tables can show the spread as well.

use std::io;

use crate::periodic::PeriodicResult;
use crate::stats::LatencySummary;

/// Every set's result and which one was worst.
#[derive(Debug, Clone)]
pub struct SetsResult<T> {
    pub sets: Vec<T>,
    /// Index in `sets` of the set with the largest key.
    pub worst: usize,
}

impl<T> SetsResult<T> {
    pub fn worst(&self) -> &T {
        &self.sets[self.worst]
    }

    pub fn into_worst(mut self) -> T {
        self.sets.swap_remove(self.worst)
    }
}

impl SetsResult<PeriodicResult> {
    /// Every set's latency summary, in the order they ran.
    pub fn summaries(&self) -> Vec<LatencySummary> {
        self.sets
            .iter()
            .map(|r| r.latency.summary(r.deadline_misses))
            .collect()
    }
}

/// The key the papers pick the worst set by: the largest latency of any call, in µs.
pub fn max_latency_us(result: &PeriodicResult) -> f64 {
    result.latency.max() as f64 / 1000.0
}

/// Runs `f(set)` for `set` in `0..sets` (at least one) and picks the set whose `key` is largest
/// (e.g. [`max_latency_us`]); the first such set wins a tie, and a NaN key never wins. The first
/// error ends the run and is returned with the set's number.
pub fn run_sets<T>(
    sets: u32,
    mut f: impl FnMut(u32) -> io::Result<T>,
    key: impl Fn(&T) -> f64,
) -> io::Result<SetsResult<T>> {
    let mut results = Vec::new();
    let mut worst = 0;
    for set in 0..sets.max(1) {
        let result =
            f(set).map_err(|e| io::Error::new(e.kind(), format!("set {}: {e}", set + 1)))?;
        if !results.is_empty() && key(&result) > key(&results[worst]) {
            worst = results.len();
        }
        results.push(result);
    }
    Ok(SetsResult {
        sets: results,
        worst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_set_is_the_one_with_the_largest_key() {
        let maxima = [3.0, 9.0, 4.0, 9.0, 1.0];
        let r = run_sets(5, |s| Ok(maxima[s as usize]), |m| *m).unwrap();
        assert_eq!(r.sets.len(), 5);
        assert_eq!(r.worst, 1);
        assert_eq!(*r.worst(), 9.0);
        assert_eq!(r.into_worst(), 9.0);
    }

    #[test]
    fn zero_sets_runs_one_and_errors_stop() {
        let r = run_sets(0, |_| Ok(1.0), |m| *m).unwrap();
        assert_eq!(r.sets.len(), 1);
        let err = run_sets(
            3,
            |s| {
                if s == 1 {
                    Err(io::Error::other("boom"))
                } else {
                    Ok(0.0)
                }
            },
            |m| *m,
        );
        let err = err.expect_err("set 2 fails");
        assert!(err.to_string().contains("set 2: boom"), "{err}");
    }

    #[test]
    fn periodic_sets_are_picked_by_their_largest_call() {
        use crate::stats::LatencyHistogram;
        use std::time::Duration;
        let run = |max_ns: u64, misses: u64| {
            let mut latency = LatencyHistogram::new();
            latency.record_ns(1_000);
            latency.record_ns(max_ns);
            PeriodicResult {
                latency,
                wake_late: LatencyHistogram::new(),
                deadline_misses: misses,
                late_calls: misses,
                skipped_periods: 0,
                elapsed: Duration::from_millis(10),
                slowest_call: Some(1),
            }
        };
        let runs = [run(50_000, 0), run(4_454_000, 1), run(300_000, 0)];
        let r = run_sets(3, |s| Ok(runs[s as usize].clone()), max_latency_us).unwrap();
        assert_eq!(r.worst, 1);
        let summaries = r.summaries();
        assert_eq!(summaries.len(), 3);
        assert_eq!(summaries[1].deadline_misses, 1);
        assert!((summaries[1].max_us - 4454.0).abs() < 4454.0 * 0.001);
        assert!((max_latency_us(r.worst()) - 4454.0).abs() < 5.0);
    }
}
