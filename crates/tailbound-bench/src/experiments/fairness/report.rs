//! The report of `bench fairness`: its rows as Markdown and bar charts, and the check of the
//! issue's targets.

use serde::Serialize;

use super::row::{ratio_string, FairnessRow, RATIO_ERROR_MAX, TOTAL_VS_FIFO_MIN};
use crate::report::{targets_markdown, Align, Table, TargetCheck};

/// `2:1`, `3:2:2:1`.
pub fn weights_label(weights: &[u32]) -> String {
    weights
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(":")
}

/// The targets, for tailbound's rows: ratio_error within 3 % in every case, and total
/// throughput within 2 % of tailbound's fifo. Rows of kernel schedulers are not targets; a run
/// without tailbound's rows says so instead of passing.
pub fn check_targets(rows: &[FairnessRow]) -> Vec<TargetCheck> {
    let tb: Vec<&FairnessRow> = rows.iter().filter(|r| r.system == "tbfs").collect();
    let not_run = "not measured: no tbfs case in this run".to_string();
    let worst = tb
        .iter()
        .max_by(|a, b| a.ratio_error.total_cmp(&b.ratio_error));
    vec![
        TargetCheck {
            target: format!(
                "tbfs ratio_error <= {:.0} % for every weight set, op and block size",
                RATIO_ERROR_MAX * 100.0
            ),
            measured: worst.map_or(not_run.clone(), |w| {
                format!(
                    "worst {:.1} % ({} {} {} MiB) over {} cases",
                    w.ratio_error * 100.0,
                    weights_label(&w.weights),
                    w.op,
                    w.block_mb,
                    tb.len()
                )
            }),
            met: !tb.is_empty() && tb.iter().all(|r| r.ratio_error <= RATIO_ERROR_MAX),
        },
        throughput_vs_fifo(rows, &tb),
    ]
}

/// Every tbfs case's total against the `tbfs-fifo` case with the same weights, op and block size.
fn throughput_vs_fifo(rows: &[FairnessRow], tb: &[&FairnessRow]) -> TargetCheck {
    let target = format!(
        "tbfs total throughput within {:.0} % of fifo",
        (1.0 - TOTAL_VS_FIFO_MIN) * 100.0
    );
    let pairs: Vec<(&FairnessRow, f64)> = tb
        .iter()
        .filter_map(|r| {
            rows.iter()
                .find(|f| {
                    f.system == "tbfs-fifo"
                        && f.weights == r.weights
                        && f.op == r.op
                        && f.block_mb == r.block_mb
                })
                .filter(|f| f.total_mb_per_s > 0.0)
                .map(|f| (*r, r.total_mb_per_s / f.total_mb_per_s))
        })
        .collect();
    let Some(&(worst, ratio)) = pairs.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return TargetCheck {
            target,
            measured: "not measured: no tbfs case with its tbfs-fifo case in this run".into(),
            met: false,
        };
    };
    TargetCheck {
        target,
        measured: format!(
            "worst {:.1} % of fifo ({} {} {} MiB) over {} cases",
            ratio * 100.0,
            weights_label(&worst.weights),
            worst.op,
            worst.block_mb,
            pairs.len()
        ),
        met: pairs.len() == tb.len() && pairs.iter().all(|p| p.1 >= TOTAL_VS_FIFO_MIN),
    }
}

/// The experiment's result: what `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    pub experiment: &'static str,
    pub device: String,
    pub region_mb: u64,
    pub warmup_s: f64,
    /// The shortest window (each case has its own: [`FairnessRow::window_s`]).
    pub window_s: f64,
    pub cases: Vec<FairnessRow>,
    pub targets: Vec<TargetCheck>,
}

impl FairnessReport {
    /// One row per case, then the targets.
    pub fn to_markdown(&self) -> String {
        let mut table = Table::new(
            [
                "system",
                "weights",
                "op",
                "block",
                "window",
                "MB/s per tenant",
                "measured ratio",
                "ratio error",
                "total MB/s",
            ]
            .map(String::from)
            .to_vec(),
        );
        for column in 3..9 {
            table.set_align(column, Align::Right);
        }
        for r in &self.cases {
            table.push(vec![
                r.system.into(),
                weights_label(&r.weights),
                r.op.into(),
                format!("{} MiB", r.block_mb),
                format!("{:.1} s", r.window_s),
                r.shares_mb_per_s
                    .iter()
                    .map(|s| format!("{s:.1}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                ratio_string(&r.weights, &r.shares_mb_per_s),
                format!("{:.1} %", r.ratio_error * 100.0),
                format!("{:.1}", r.total_mb_per_s),
            ]);
        }
        format!(
            "Weighted shares of direct I/O streams, windows of at least {} s after {} s warm-up, \
             {} MiB region per tenant on a {} (MB = 2^20 bytes)\n\n{}\nTargets\n\n{}",
            self.window_s,
            self.warmup_s,
            self.region_mb,
            self.device,
            table.to_markdown(),
            targets_markdown(&self.targets)
        )
    }

    /// The plot's groups (`weights op block`) and series (one per system, ratio error in %).
    pub fn bar_series(&self) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
        let mut groups: Vec<(String, &str, u64)> = Vec::new();
        let mut systems: Vec<&str> = Vec::new();
        for r in &self.cases {
            let g = (weights_label(&r.weights), r.op, r.block_mb);
            if !groups.contains(&g) {
                groups.push(g);
            }
            if !systems.contains(&r.system) {
                systems.push(r.system);
            }
        }
        let series = systems
            .iter()
            .map(|&s| {
                let values = groups
                    .iter()
                    .map(|(w, op, b)| {
                        self.cases
                            .iter()
                            .find(|r| {
                                r.system == s
                                    && weights_label(&r.weights) == *w
                                    && r.op == *op
                                    && r.block_mb == *b
                            })
                            .map_or(f64::NAN, |r| r.ratio_error * 100.0)
                    })
                    .collect();
                (s.to_string(), values)
            })
            .collect();
        let labels = groups
            .iter()
            .map(|(w, op, b)| format!("{w} {op} {b} MiB"))
            .collect();
        (labels, series)
    }
}
