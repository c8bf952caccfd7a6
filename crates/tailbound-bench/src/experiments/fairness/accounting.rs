//! The same case's shares counted other ways, to tell the scheduler's error from the machine's
//! and from the point at which a write is counted: each whole second of the window on its own
//! (how much the shares move between 1 s windows of one run), the window moved earlier (how much
//! the error depends on where its ends fall), each request counted when it was
//! issued or when it returned rather than spread over its time, and for tbfs's thread cases the
//! scheduler's own bytes per tenant and each write counted once a device flush after its return
//! made it durable.

use serde::Serialize;

use super::ratio::ratio_error;
use crate::experiments::tenants::{bytes_in_window, growth_in_window};

/// A case's shares counted other ways, as ratio errors (see the module).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accounting {
    /// Each whole second of the window on its own, in order (none under 2 s).
    pub per_second_errors: Vec<f64>,
    /// The window moved earlier in steps of [`SHIFT_STEP`], its length kept, as far back as
    /// the case's first request (into the warm-up), starting with the window itself: how much
    /// one run's error depends on where the window's ends fall among the requests (a request
    /// that spans a stall is counted evenly over it) rather than on the shares the tenants got.
    pub shifted_errors: Vec<f64>,
    /// Every request's bytes counted when it was issued, and when it returned.
    pub at_issue_error: f64,
    pub at_return_error: f64,
    /// tbfs thread cases: the bytes the scheduler completed for each tenant in the window
    /// (its data, and cleaning it did), sampled every [`SAMPLE_EVERY`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_error: Option<f64>,
    /// tbfs thread cases: each write counted when the pool's flush count first rose after it
    /// returned (to within [`SAMPLE_EVERY`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable_error: Option<f64>,
    /// Device flushes inside the window (tbfs thread cases).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flushes_in_window: Option<u64>,
}

/// How often a tbfs case's counters are sampled.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// One sample of a tbfs case's counters: the time (monotonic ns), each case tenant's bytes
/// completed by the scheduler, and the pool's device flushes so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: u64,
    pub device_bytes: Vec<u64>,
    pub flushes: u64,
}

const NS_PER_S: u64 = 1_000_000_000;

/// How far apart the windows of [`Accounting::shifted_errors`] start.
pub const SHIFT_STEP: std::time::Duration = std::time::Duration::from_millis(50);

/// At most this many windows in [`Accounting::shifted_errors`].
const SHIFTS_MAX: u64 = 40;

/// The accounting of a case whose tenants did `ops` (`(start, end, bytes)` each) with the
/// window `[open, close]`, and `samples` (sorted by time) for a tbfs thread case.
pub fn account(
    weights: &[u32],
    ops: &[Vec<(u64, u64, u64)>],
    open: u64,
    close: u64,
    samples: &[Sample],
) -> Accounting {
    let err = |shares: Vec<f64>| ratio_error(weights, &shares);
    let seconds = close.saturating_sub(open) / NS_PER_S;
    let per_second_errors = if seconds >= 2 {
        (0..seconds)
            .map(|s| {
                let (lo, hi) = (open + s * NS_PER_S, open + (s + 1) * NS_PER_S);
                err(ops.iter().map(|o| bytes_in_window(o, lo, hi)).collect())
            })
            .collect()
    } else {
        Vec::new()
    };
    let first = ops
        .iter()
        .flat_map(|o| o.iter().map(|op| op.0))
        .min()
        .unwrap_or(open);
    let step = SHIFT_STEP.as_nanos() as u64;
    let shifts = (open.saturating_sub(first) / step + 1).min(SHIFTS_MAX);
    let shifted_errors = (0..shifts)
        .map(|k| {
            let (lo, hi) = (open - k * step, close - k * step);
            err(ops.iter().map(|o| bytes_in_window(o, lo, hi)).collect())
        })
        .collect();
    let counted_at = |pick: fn(&(u64, u64, u64)) -> u64| {
        err(ops
            .iter()
            .map(|o| {
                o.iter()
                    .filter(|op| (open..close).contains(&pick(op)))
                    .map(|op| op.2 as f64)
                    .sum()
            })
            .collect())
    };
    let at_issue_error = counted_at(|op| op.0);
    let at_return_error = counted_at(|op| op.1);
    if samples.len() < 2 {
        return Accounting {
            per_second_errors,
            shifted_errors,
            at_issue_error,
            at_return_error,
            device_error: None,
            durable_error: None,
            flushes_in_window: None,
        };
    }
    let device_error = err((0..ops.len())
        .map(|k| {
            let series: Vec<(u64, u64)> = samples
                .iter()
                .map(|s| (s.at, s.device_bytes.get(k).copied().unwrap_or(0)))
                .collect();
            growth_in_window(&series, open, close)
        })
        .collect());
    // The first sample at or after `t`, and the flushes it had seen.
    let after = |t: u64| samples.iter().position(|s| s.at >= t);
    let durable_at = |end: u64| -> Option<u64> {
        let i = after(end)?;
        let seen = if i == 0 { 0 } else { samples[i - 1].flushes };
        samples[i..].iter().find(|s| s.flushes > seen).map(|s| s.at)
    };
    let durable_error = err(ops
        .iter()
        .map(|o| {
            o.iter()
                .filter(|op| durable_at(op.1).is_some_and(|t| (open..close).contains(&t)))
                .map(|op| op.2 as f64)
                .sum()
        })
        .collect());
    let flushes =
        |t: u64| after(t).map_or(samples[samples.len() - 1].flushes, |i| samples[i].flushes);
    Accounting {
        per_second_errors,
        shifted_errors,
        at_issue_error,
        at_return_error,
        device_error: Some(device_error),
        durable_error: Some(durable_error),
        flushes_in_window: Some(flushes(close).saturating_sub(flushes(open))),
    }
}

#[cfg(test)]
mod tests {
    use super::{account, Sample, NS_PER_S};

    #[test]
    fn each_way_of_counting_sees_what_it_should() {
        let s = NS_PER_S;
        // Window [10 s, 13 s). Tenant 0 (weight 2): four requests of 2 bytes, one each second
        // starting at 9.5 s, each taking a second. Tenant 1 (weight 1): one of 4 bytes from
        // 10 s to 12 s, then one of 1 byte from 12 s to 13 s.
        let t0: Vec<(u64, u64, u64)> = (0..4)
            .map(|i| (9 * s + s / 2 + i * s, 10 * s + s / 2 + i * s, 2))
            .collect();
        let t1 = vec![(10 * s, 12 * s, 4), (12 * s, 13 * s, 1)];
        // The pool flushed once, at 12.2 s; the scheduler's bytes grew evenly, 2:1.
        let samples: Vec<Sample> = (0..=40)
            .map(|i| Sample {
                at: 9 * s + i * s / 10,
                device_bytes: vec![20 * i, 10 * i],
                flushes: u64::from(9 * s + i * s / 10 >= 12 * s + s / 5),
            })
            .collect();
        let a = account(&[2, 1], &[t0, t1], 10 * s, 13 * s, &samples);
        // Second by second: 2 against 2, 2 against 2, 2 against 1.
        let err = |x: f64, y: f64| crate::experiments::fairness::ratio_error(&[2, 1], &[x, y]);
        let near = |got: f64, want: f64| (got - want).abs() < 1e-9;
        assert_eq!(a.per_second_errors.len(), 3);
        assert!(near(a.per_second_errors[0], err(2.0, 2.0)));
        assert!(near(a.per_second_errors[2], err(2.0, 1.0)));
        // The window moved back 0, 50, … 500 ms, to the first request (9.5 s). Unmoved: tenant
        // 0's 1 + 2 + 2 + 1 against 4 + 1. Moved back 500 ms, to [9.5 s, 12.5 s): tenant 0's first
        // three (6) against 4 and half of 1.
        assert_eq!(a.shifted_errors.len(), 11);
        assert!(near(a.shifted_errors[0], err(6.0, 5.0)), "{a:?}");
        assert!(near(a.shifted_errors[10], err(6.0, 4.5)), "{a:?}");
        // Issued in the window: tenant 0's last three (6), tenant 1's both (5).
        assert!(near(a.at_issue_error, err(6.0, 5.0)), "{a:?}");
        // Returned in the window: tenant 0's first three (6), tenant 1's first (4).
        assert!(near(a.at_return_error, err(6.0, 4.0)), "{a:?}");
        // Durable at 12.2 s: what returned by then, tenant 0's first two (4) and tenant 1's first.
        assert!(near(a.durable_error.unwrap(), err(4.0, 4.0)), "{a:?}");
        assert!(a.device_error.unwrap() < 1e-9, "{a:?}");
        assert_eq!(a.flushes_in_window, Some(1));
    }
}
