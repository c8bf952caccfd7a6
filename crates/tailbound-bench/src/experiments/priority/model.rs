//! What the experiment's parts share: the writer's pace and priority, the targets, and a case's
//! row. Names no other file of the experiment, so `io` and `report` depend on it and not on
//! `priority.rs`.

use serde::Serialize;
use tailbound::sched::{Class, Prio};

use crate::stats::{BoxStats, LatencyHistogram};

pub(super) const MIB: u64 = 1 << 20;

/// The paper's write: 4 KiB.
pub const WRITE_BYTES: usize = 4096;

/// The writer's log is started afresh after this many bytes.
pub const LOG_BYTES_MAX: u64 = 256 << 20;

/// The writer's I/O priority: real time, level 0 (`ionice -c1 -n0`).
pub const WRITER_PRIO: Prio = Prio {
    class: Class::Rt,
    level: 0,
};

/// The targets: a tbfs writer under the copy keeps its p99.9 within this factor of its own
/// writer-alone p99.9 in the same run, and its max within [`ISOLATION_MAX`] of its lone max.
pub const ISOLATION_P999: f64 = 2.0;
pub const ISOLATION_MAX: f64 = 3.0;
/// The copy keeps at least this share of its throughput alone.
pub const COPY_KEPT_MIN: f64 = 0.80;

/// How the writer paces its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// This many writes per second, on an absolute schedule.
    Paced(u32),
    /// Back to back.
    FlatOut,
}

impl Rate {
    pub fn name(self) -> String {
        match self {
            Rate::Paced(n) => format!("{n}/s"),
            Rate::FlatOut => "flat-out".into(),
        }
    }

    /// `111`, `111/s` or `flat-out`.
    pub fn parse(text: &str) -> Option<Rate> {
        if text == "flat-out" || text == "flat" {
            return Some(Rate::FlatOut);
        }
        let n: u32 = text.strip_suffix("/s").unwrap_or(text).parse().ok()?;
        (n > 0).then_some(Rate::Paced(n))
    }
}

/// The writer's latency figures and the copy's throughput for one scheduler and rate.
#[derive(Debug, Clone, Serialize)]
pub struct PriorityRow {
    /// `kernel` or `tbfs`.
    pub system: &'static str,
    /// The kernel scheduler, or tailbound's policy.
    pub scheduler: String,
    /// `111/s` or `flat-out`.
    pub rate: String,
    pub writes: u64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub p999999_us: f64,
    pub max_us: f64,
    /// The copy's throughput while the writer ran.
    pub background_mb_per_s: f64,
    /// The copy's throughput alone, just before the writer and again just after it.
    pub background_alone_mb_per_s: f64,
    /// tbfs rows: the writer's slowest appends by phase, slowest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<super::phases::SlowWrite>,
    /// tbfs rows: every append's phases summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases_sum: Option<super::phases::SlowWrite>,
    /// tbfs rows: the longest holds of the pool's `meta` lock while the writer ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub meta_holds: Vec<super::phases::MetaHold>,
    /// tbfs rows: the longest holds of the pool's log writer while the writer ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub log_writer_holds: Vec<super::phases::MetaHold>,
    /// tbfs rows: the pool's counts over the writer's appends, every thread's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_waits: Option<super::phases::PoolWaits>,
    #[serde(skip)]
    pub box_stats: Option<BoxStats>,
    /// Whether the copy ran (false for the writer-alone rows, whose copy figures are 0).
    #[serde(skip)]
    pub with_copy: bool,
}

impl PriorityRow {
    /// The share of its throughput alone the copy kept under the writer.
    pub fn copy_kept(&self) -> f64 {
        if self.background_alone_mb_per_s > 0.0 {
            self.background_mb_per_s / self.background_alone_mb_per_s
        } else {
            f64::NAN
        }
    }

    pub(super) fn from_histogram(
        system: &'static str,
        scheduler: String,
        rate: Rate,
        hist: &LatencyHistogram,
        background: f64,
        alone: f64,
    ) -> PriorityRow {
        let h = hist.inner();
        let q = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let s = hist.summary(0);
        PriorityRow {
            with_copy: true,
            system,
            scheduler,
            rate: rate.name(),
            writes: hist.count(),
            min_us: s.min_us,
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            p999999_us: q(0.999_999),
            max_us: s.max_us,
            background_mb_per_s: background,
            background_alone_mb_per_s: alone,
            box_stats: (!h.is_empty()).then(|| hist.box_stats()),
            slowest: Vec::new(),
            phases_sum: None,
            meta_holds: Vec::new(),
            log_writer_holds: Vec::new(),
            pool_waits: None,
        }
    }
}
