//! The report of `bench record`: the worst set of each case as Markdown and box plots, and the
//! check of the targets.

use serde::Serialize;

use super::model::{
    CaseResult, FLOOR, PRODUCER_DESIGN, TAILBOUND, TAILBOUND_DECOUPLED, TRACE_BOUND,
};
pub use crate::report::TargetCheck;
use crate::report::{fmt_us, targets_markdown, Table};
use crate::stats::BoxStats;

/// The experiment's result: what `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct RecordReport {
    pub experiment: &'static str,
    pub period_us: u64,
    pub record_bytes: u64,
    pub cases: Vec<CaseResult>,
    pub targets: Vec<TargetCheck>,
}

fn find<'a>(
    results: &'a [CaseResult],
    name: &str,
    design_is_producer: bool,
    load: &str,
) -> Option<&'a CaseResult> {
    results.iter().find(|r| {
        r.name == name
            && r.load == load
            && r.skipped.is_none()
            && (r.design == PRODUCER_DESIGN) == design_is_producer
    })
}

/// The targets (issue 39), in its words.
pub const TARGET_HALF_OF_CONVENTIONAL: &str =
    "tailbound's max ≤ ½ of the conventional design's max under every background load";
pub const TARGET_NO_LOAD_CONVENTIONAL: &str =
    "with no load, tailbound's max ≤ the conventional design's max";
pub const TARGET_NO_LOAD_FLOOR: &str = "with no load, tailbound's max ≤ FLOOR's max + 100 µs";
pub const TARGET_PRODUCER_FLOOR: &str =
    "the decoupled producer's max ≤ FLOOR's max + 50 µs under the buffered writer";
pub const TARGET_NO_MISSES: &str = "zero deadline misses under every load for every tailbound mode";

/// Checks the targets that the cases in `results` allow checking.
pub fn check_targets(results: &[CaseResult]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    let max = |name: &str, producer: bool, load: &str| {
        find(results, name, producer, load).map(|r| r.latency.max_us)
    };
    let mut loads: Vec<&str> = Vec::new();
    for r in results {
        if r.load != "none" && !loads.contains(&r.load.as_str()) {
            loads.push(&r.load);
        }
    }
    let pairs: Vec<(&str, f64, f64)> = loads
        .iter()
        .filter_map(|&load| {
            Some((
                load,
                max(TAILBOUND, false, load)?,
                max("NONE", false, load)?,
            ))
        })
        .collect();
    if !pairs.is_empty() {
        checks.push(TargetCheck {
            target: TARGET_HALF_OF_CONVENTIONAL.into(),
            measured: pairs
                .iter()
                .map(|(load, tb, none)| format!("{load}: {} / {} µs", fmt_us(*tb), fmt_us(*none)))
                .collect::<Vec<_>>()
                .join("; "),
            met: pairs.iter().all(|(_, tb, none)| tb * 2.0 <= *none),
        });
    }
    if let (Some(tb), Some(none)) = (max(TAILBOUND, false, "none"), max("NONE", false, "none")) {
        checks.push(TargetCheck {
            target: TARGET_NO_LOAD_CONVENTIONAL.into(),
            measured: format!("{} / {} µs", fmt_us(tb), fmt_us(none)),
            met: tb <= none,
        });
    }
    if let (Some(tb), Some(floor)) = (max(TAILBOUND, false, "none"), max(FLOOR, false, "none")) {
        checks.push(TargetCheck {
            target: TARGET_NO_LOAD_FLOOR.into(),
            measured: format!("{} / {} + 100 µs", fmt_us(tb), fmt_us(floor)),
            met: tb <= floor + 100.0,
        });
    }
    let buffered = "buffered-writer";
    if let (Some(producer), Some(floor)) = (
        max(TAILBOUND_DECOUPLED, true, buffered),
        max(FLOOR, false, buffered),
    ) {
        checks.push(TargetCheck {
            target: TARGET_PRODUCER_FLOOR.into(),
            measured: format!("{} / {} + 50 µs", fmt_us(producer), fmt_us(floor)),
            met: producer <= floor + 50.0,
        });
    }
    let tailbound_rows: Vec<&CaseResult> = results
        .iter()
        .filter(|r| r.name.starts_with(TAILBOUND) && r.skipped.is_none())
        .collect();
    if !tailbound_rows.is_empty() {
        let missed: Vec<String> = tailbound_rows
            .iter()
            .filter(|r| r.latency.deadline_misses > 0)
            .map(|r| format!("{} {}", r.label(), r.latency.deadline_misses))
            .collect();
        checks.push(TargetCheck {
            target: TARGET_NO_MISSES.into(),
            measured: if missed.is_empty() {
                format!("0 misses in {} rows", tailbound_rows.len())
            } else {
                format!("misses: {}", missed.join(", "))
            },
            met: missed.is_empty(),
        });
    }
    checks
}

impl RecordReport {
    /// The results as the paper's table (one row per case, figures in µs), then the targets.
    pub fn to_markdown(&self) -> String {
        let mut table = Table::new(vec![
            "case".into(),
            "load".into(),
            "design".into(),
            "min".into(),
            "mean".into(),
            "p99".into(),
            "p99.9".into(),
            "max".into(),
            "misses".into(),
        ]);
        for r in &self.cases {
            let name = if r.design == PRODUCER_DESIGN {
                format!("{} (producer)", r.name)
            } else {
                r.name.clone()
            };
            match &r.skipped {
                Some(why) => table.push(vec![
                    name,
                    r.load.clone(),
                    r.design.clone(),
                    format!("skipped: {why}"),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
                None => table.push(vec![
                    name,
                    r.load.clone(),
                    r.design.clone(),
                    fmt_us(r.latency.min_us),
                    fmt_us(r.latency.mean_us),
                    fmt_us(r.latency.p99_us),
                    fmt_us(r.latency.p999_us),
                    fmt_us(r.latency.max_us),
                    r.latency.deadline_misses.to_string(),
                ]),
            }
        }
        let mut out = format!(
            "write() latency in µs, {} B every {} µs (worst set of each case)\n\n{}",
            self.record_bytes,
            self.period_us,
            table.to_markdown()
        );
        let worst: Vec<String> = self
            .cases
            .iter()
            .filter_map(|r| {
                let w = r.worst_write.as_ref()?;
                let bound = TRACE_BOUND.as_micros();
                let cause = w.cause.clone().unwrap_or_else(|| {
                    if r.latency.max_us <= bound as f64 {
                        format!("under the {bound} us trace bound")
                    } else {
                        format!(
                            "the traced part of the call took under {bound} us: the time went \
                             around it (the measuring thread was preempted or interrupted)"
                        )
                    }
                });
                // The trace times the whole call; the decoupled writer's row times only its
                // stores, so its call can be longer than the row's max.
                let took = w
                    .trace
                    .map_or(r.latency.max_us, |e| e.latency_ns as f64 / 1000.0);
                Some(format!(
                    "- {}: call {} of the worst set ({} us): {cause}\n",
                    r.label(),
                    w.index,
                    fmt_us(took)
                ))
            })
            .collect();
        if !worst.is_empty() {
            out.push_str("\nEach case's slowest call\n\n");
            out.push_str(&worst.concat());
        }
        if !self.targets.is_empty() {
            out.push_str("\nTargets\n\n");
            out.push_str(&targets_markdown(&self.targets));
        }
        out
    }

    /// Box-plot series (one per measured row) for the SVG.
    pub fn box_series(&self) -> Vec<(String, BoxStats)> {
        self.cases
            .iter()
            .filter_map(|r| r.box_stats.map(|b| (r.label(), b)))
            .collect()
    }
}
