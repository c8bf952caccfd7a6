//! Latency histograms (HDR, nanoseconds) and their summaries in microseconds.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency a histogram holds exactly: one hour. Larger values are clamped to it.
const LATENCY_NS_MAX: u64 = 3_600_000_000_000;
const SIGNIFICANT_FIGURES: u8 = 3;

/// What a latency distribution comes to, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
    pub deadline_misses: u64,
}

/// The five numbers a box plot draws, plus p99, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoxStats {
    pub min_us: f64,
    pub q1_us: f64,
    pub median_us: f64,
    pub q3_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// An HDR histogram of latencies in nanoseconds (1 ns to 1 h, 3 significant figures).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

fn ns_to_us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            hist: Histogram::new_with_bounds(1, LATENCY_NS_MAX, SIGNIFICANT_FIGURES)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// Wraps an existing histogram of nanoseconds.
    pub fn from_histogram(hist: Histogram<u64>) -> LatencyHistogram {
        LatencyHistogram { hist }
    }

    pub fn record(&mut self, latency: Duration) {
        self.record_ns(latency.as_nanos().min(u128::from(LATENCY_NS_MAX)) as u64);
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, LATENCY_NS_MAX));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if self.hist.add(&other.hist).is_ok() {
            return;
        }
        // `other` came from `from_histogram` with wider bounds: clamp its values instead of failing.
        for v in other.hist.iter_recorded() {
            let value = v.value_iterated_to().clamp(1, LATENCY_NS_MAX);
            let _ = self.hist.record_n(value, v.count_at_value());
        }
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The largest value recorded, in nanoseconds (0 when empty).
    pub fn max(&self) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.max()
        }
    }

    /// The number of values above `ns`.
    pub fn count_above(&self, ns: u64) -> u64 {
        if self.hist.is_empty() || ns >= self.hist.max() {
            return 0;
        }
        self.hist.count_between(ns.saturating_add(1), u64::MAX)
    }

    fn quantile_us(&self, q: f64) -> f64 {
        ns_to_us(self.hist.value_at_quantile(q))
    }

    pub fn summary(&self, deadline_misses: u64) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary {
                count: 0,
                min_us: 0.0,
                mean_us: 0.0,
                p50_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                p9999_us: 0.0,
                max_us: 0.0,
                deadline_misses,
            };
        }
        LatencySummary {
            count: self.hist.len(),
            min_us: ns_to_us(self.hist.min()),
            mean_us: self.hist.mean() / 1000.0,
            p50_us: self.quantile_us(0.50),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            p9999_us: self.quantile_us(0.9999),
            max_us: ns_to_us(self.hist.max()),
            deadline_misses,
        }
    }

    pub fn box_stats(&self) -> BoxStats {
        let s = self.summary(0);
        BoxStats {
            min_us: s.min_us,
            q1_us: self.quantile_us(0.25),
            median_us: s.p50_us,
            q3_us: self.quantile_us(0.75),
            p99_us: s.p99_us,
            max_us: s.max_us,
        }
    }

    pub fn inner(&self) -> &Histogram<u64> {
        &self.hist
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 0.002 + 0.001
    }

    #[test]
    fn summary_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary(7);
        assert_eq!(s.count, 1000);
        assert!(close(s.min_us, 1.0), "{s:?}");
        assert!(close(s.max_us, 1000.0), "{s:?}");
        assert!(close(s.mean_us, 500.5), "{s:?}");
        assert!(close(s.p50_us, 500.0), "{s:?}");
        assert!(close(s.p99_us, 990.0), "{s:?}");
        assert_eq!(s.deadline_misses, 7);
        let b = h.box_stats();
        assert!(close(b.q1_us, 250.0) && close(b.q3_us, 750.0), "{b:?}");
        assert!(b.min_us <= b.q1_us && b.q1_us <= b.median_us && b.median_us <= b.q3_us);
        assert!(b.q3_us <= b.p99_us && b.p99_us <= b.max_us);
    }

    #[test]
    fn empty_histograms_summarise_to_zero_and_merge_adds() {
        let empty = LatencyHistogram::new();
        assert_eq!(empty.summary(0).count, 0);
        assert_eq!(empty.max(), 0);
        assert_eq!(empty.count_above(5), 0);
        let mut a = LatencyHistogram::new();
        a.record_ns(1_000);
        let mut b = LatencyHistogram::new();
        b.record_ns(9_000_000);
        b.record(Duration::from_secs(7200)); // clamped to the bound, not lost
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.count_above(5_000_000), 2);
        assert!(a.max() >= LATENCY_NS_MAX - LATENCY_NS_MAX / 500);
    }

    #[test]
    fn merging_halves_equals_recording_everything_in_one() {
        let (mut all, mut odd, mut even) = (
            LatencyHistogram::new(),
            LatencyHistogram::new(),
            LatencyHistogram::new(),
        );
        for ns in (1..5000u64).map(|k| k * 997) {
            all.record_ns(ns);
            if ns % 2 == 1 {
                odd.record_ns(ns)
            } else {
                even.record_ns(ns)
            }
        }
        odd.merge(&even);
        assert_eq!(odd.summary(0), all.summary(0));
        assert_eq!(odd.box_stats(), all.box_stats());
    }

    #[test]
    fn a_histogram_with_wider_bounds_merges_clamped() {
        let mut wide = Histogram::<u64>::new_with_bounds(1, u64::MAX / 4, 3).unwrap();
        wide.record(5_000).unwrap();
        wide.record(LATENCY_NS_MAX * 10).unwrap();
        let wide = LatencyHistogram::from_histogram(wide);
        let mut h = LatencyHistogram::new();
        h.merge(&wide);
        assert_eq!(h.count(), 2);
        assert!(h.max() <= LATENCY_NS_MAX + LATENCY_NS_MAX / 500);
        // Zero and huge records saturate rather than fail or vanish.
        h.record_ns(0);
        h.record_ns(u64::MAX);
        assert_eq!(h.count(), 4);
    }
}
