//! What the experiment and its report share: the names of the tables' modes, a case's row and
//! its slowest call. Names no other file of the experiment, so `report` depends on it and not on
//! `record.rs`.

use std::time::Duration;

use serde::Serialize;
use tailbound::record::{SlowTrace, SlowWrite};

use crate::stats::{BoxStats, LatencySummary};

/// Calls slower than this are traced (faults, context switches, the flush thread's activity), so
/// each case's worst call has a cause.
pub const TRACE_BOUND: Duration = Duration::from_micros(50);

/// Name of tailbound's default mode in the tables.
pub const TAILBOUND: &str = "tailbound";
/// Name of the noise-floor case in the tables.
pub const FLOOR: &str = "FLOOR";
/// Name of the decoupled mode in the tables.
pub const TAILBOUND_DECOUPLED: &str = "tailbound-decoupled";

/// What one case measured (the worst of its sets), as one row of the table and the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub design: String,
    pub load: String,
    pub sets: u32,
    pub writes: u64,
    /// The worst set's latency: `count`, `min_us` … `max_us`, `deadline_misses`, flattened into
    /// the JSON row.
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// Records the recorder discarded (decoupled mode with a drop policy; 0 otherwise).
    pub dropped: u64,
    /// The worst set's slowest call and what its trace found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_write: Option<WorstWrite>,
    /// Why the case did not run, when it did not (e.g. it needs root). Its figures are then 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(skip)]
    pub box_stats: Option<BoxStats>,
}

impl CaseResult {
    /// `NAME@load` (with `/producer` for the decoupled producer row).
    pub fn label(&self) -> String {
        if self.design == PRODUCER_DESIGN {
            format!("{}/producer@{}", self.name, self.load)
        } else {
            format!("{}@{}", self.name, self.load)
        }
    }
}

/// The `design` of the extra decoupled-mode row holding the producer's call latency.
pub const PRODUCER_DESIGN: &str = "decoupled-producer";

/// A case's slowest call: which one, and what the slow-write trace found about it.
#[derive(Debug, Clone, Serialize)]
pub struct WorstWrite {
    /// The call's index in its set, from 0.
    pub index: u64,
    /// Calls over the trace bound in that set.
    pub slow_calls: u64,
    /// The trace's explanation; `None` when the call was not over the trace bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<SlowWrite>,
}

impl WorstWrite {
    /// The call `index` as `trace` saw it.
    pub(super) fn of(index: u64, trace: Option<&SlowTrace>) -> WorstWrite {
        let event = trace.and_then(|t| t.find(index)).copied();
        WorstWrite {
            index,
            slow_calls: trace.map_or(0, |t| t.events.len() as u64 + t.not_kept),
            cause: event.map(|e| e.cause()),
            trace: event,
        }
    }

    /// The slowest call `trace` kept.
    pub(super) fn slowest_in(trace: &SlowTrace) -> Option<WorstWrite> {
        trace.worst().map(|e| WorstWrite::of(e.index, Some(trace)))
    }
}
