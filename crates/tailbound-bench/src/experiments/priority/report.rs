//! The report of `bench priority`: its rows as Markdown and box plots, and the check of the
//! issue's targets.

use serde::Serialize;

use super::{PriorityRow, COPY_KEPT_MIN, MAX_VS_BEST_KERNEL, P9999_US_MAX};
use crate::report::{fmt_us, targets_markdown, Align, Table, TargetCheck};
use crate::stats::BoxStats;

/// The targets, for tailbound's rows against the best kernel scheduler of the same run;
/// a run without tailbound's rows says so instead of passing. The writer-alone rows (`alone`)
/// only inform: each latency target's line also gives what the writer had with the device to
/// itself, and says when the target lies below it.
pub fn check_targets(rows: &[PriorityRow], alone: &[PriorityRow]) -> Vec<TargetCheck> {
    let kernel_best = rows
        .iter()
        .filter(|r| r.system == "kernel")
        .min_by(|a, b| a.max_us.total_cmp(&b.max_us));
    let tb: Vec<&PriorityRow> = rows.iter().filter(|r| r.system == "tbfs").collect();
    let not_run = |extra: String| format!("not measured: no tbfs case in this run{extra}");
    let best = kernel_best.map_or(String::new(), |k| {
        format!(
            "; best kernel max {} us ({} {})",
            fmt_us(k.max_us),
            k.scheduler,
            k.rate
        )
    });
    let worst_max = tb.iter().max_by(|a, b| a.max_us.total_cmp(&b.max_us));
    let worst_p9999 = tb.iter().max_by(|a, b| a.p9999_us.total_cmp(&b.p9999_us));
    let worst_kept = tb
        .iter()
        .min_by(|a, b| a.copy_kept().total_cmp(&b.copy_kept()));
    // The lowest figure any writer had alone: what the device gave a writer with nothing else
    // to do, which a writer under a copy is not expected to beat.
    let alone_floor = |figure: fn(&PriorityRow) -> f64, limit: f64| -> String {
        let Some(best) = alone.iter().min_by(|a, b| figure(a).total_cmp(&figure(b))) else {
            return String::new();
        };
        let below = if limit < figure(best) {
            ", above the target: the device alone missed it in this run"
        } else {
            ""
        };
        format!(
            "; the writer alone, no copy: at best {} us ({} {} {}){below}",
            fmt_us(figure(best)),
            best.system,
            best.scheduler,
            best.rate
        )
    };
    vec![
        TargetCheck {
            target: format!(
                "tbfs max >= {MAX_VS_BEST_KERNEL:.0}x lower than the best kernel scheduler's"
            ),
            measured: match (worst_max, kernel_best) {
                (Some(t), Some(k)) => format!(
                    "{:.1}x: worst tbfs max {} us ({} {}), best kernel {} us ({} {}), so the \
                     target is {} us{}",
                    k.max_us / t.max_us,
                    fmt_us(t.max_us),
                    t.scheduler,
                    t.rate,
                    fmt_us(k.max_us),
                    k.scheduler,
                    k.rate,
                    fmt_us(k.max_us / MAX_VS_BEST_KERNEL),
                    alone_floor(|r| r.max_us, k.max_us / MAX_VS_BEST_KERNEL)
                ),
                _ => not_run(best.clone()),
            },
            met: match (worst_max, kernel_best) {
                (Some(t), Some(k)) => t.max_us * MAX_VS_BEST_KERNEL <= k.max_us,
                _ => false,
            },
        },
        TargetCheck {
            target: format!("tbfs p99.99 <= {} us", fmt_us(P9999_US_MAX)),
            measured: worst_p9999.map_or(not_run(String::new()), |t| {
                format!(
                    "worst {} us ({} {}){}",
                    fmt_us(t.p9999_us),
                    t.scheduler,
                    t.rate,
                    alone_floor(|r| r.p9999_us, P9999_US_MAX)
                )
            }),
            met: !tb.is_empty() && tb.iter().all(|r| r.p9999_us <= P9999_US_MAX),
        },
        TargetCheck {
            target: format!(
                "the copy keeps >= {:.0} % of its throughput alone (tbfs)",
                COPY_KEPT_MIN * 100.0
            ),
            measured: worst_kept.map_or(not_run(String::new()), |t| {
                format!(
                    "worst {:.0} % ({} {})",
                    t.copy_kept() * 100.0,
                    t.scheduler,
                    t.rate
                )
            }),
            met: !tb.is_empty() && tb.iter().all(|r| r.copy_kept() >= COPY_KEPT_MIN),
        },
    ]
}

/// The experiment's result: what `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct PriorityReport {
    pub experiment: &'static str,
    pub write_bytes: u64,
    pub copy_mb: u64,
    /// What the tbfs cases' scheduler was calibrated to (none without tbfs cases).
    pub tbfs_profile: Option<TbfsProfile>,
    pub cases: Vec<PriorityRow>,
    /// The writer alone, no copy, measured before the cases (the same fields; the copy's are 0).
    pub writer_alone: Vec<PriorityRow>,
    pub targets: Vec<TargetCheck>,
}

/// The calibrated profile behind the tbfs cases.
#[derive(Debug, Clone, Serialize)]
pub struct TbfsProfile {
    pub latency_goal_ms: f64,
    pub max_io_read: u64,
    pub max_io_write: u64,
    /// Bytes written before the scheduler flushes on its own (`None`: flushes did not grow with
    /// what was written).
    pub flush_debt: Option<u64>,
    pub flush_byte_ns: f64,
}

impl PriorityReport {
    /// One row per case, then the writer-alone runs, then the targets.
    pub fn to_markdown(&self) -> String {
        // The writer's columns, then for the cases the copy's.
        let table_of = |rows: &[PriorityRow], with_copy: bool| {
            let mut head = vec![
                "system",
                "scheduler",
                "rate",
                "writes",
                "min",
                "p50",
                "p99",
                "p99.9",
                "p99.99",
                "p99.9999",
                "max (µs)",
            ];
            if with_copy {
                head.extend(["copy MB/s", "alone", "kept"]);
            }
            let columns = head.len();
            let mut table = Table::new(head.into_iter().map(String::from).collect());
            for column in 3..columns {
                table.set_align(column, Align::Right);
            }
            for r in rows {
                let mut cells = vec![
                    r.system.into(),
                    r.scheduler.clone(),
                    r.rate.clone(),
                    r.writes.to_string(),
                ];
                cells.extend(
                    [
                        r.min_us,
                        r.p50_us,
                        r.p99_us,
                        r.p999_us,
                        r.p9999_us,
                        r.p999999_us,
                        r.max_us,
                    ]
                    .map(fmt_us),
                );
                if with_copy {
                    cells.extend([
                        format!("{:.1}", r.background_mb_per_s),
                        format!("{:.1}", r.background_alone_mb_per_s),
                        format!("{:.0} %", r.copy_kept() * 100.0),
                    ]);
                }
                table.push(cells);
            }
            table
        };
        let table = table_of(&self.cases, true);
        let alone = if self.writer_alone.is_empty() {
            String::new()
        } else {
            let table = table_of(&self.writer_alone, false);
            format!(
                "The writer alone, no copy, before the cases (the device's own floor in this \
                 run)\n\n{}\n",
                table.to_markdown()
            )
        };
        let profile = self.tbfs_profile.as_ref().map_or(String::new(), |p| {
            format!(
                "tbfs's scheduler, calibrated on the loop file system for a {:.1} ms goal: reads \
                 split to {}, writes to {}, a flush after {} written ({:.2} ns per byte cached)\n\n",
                p.latency_goal_ms,
                tailbound::units::Bytes(p.max_io_read),
                tailbound::units::Bytes(p.max_io_write),
                p.flush_debt
                    .map_or("never (flushes did not grow)".to_string(), |d| {
                        tailbound::units::Bytes(d).to_string()
                    }),
                p.flush_byte_ns
            )
        });
        format!(
            "High-priority {} B O_SYNC appends under a {} MiB copy (latencies in µs; copy MB/s \
             under the writer, alone, and the share kept; MB = 2^20 bytes)\n\n{}\n{alone}{profile}\
             Targets\n\n{}",
            self.write_bytes,
            self.copy_mb,
            table.to_markdown(),
            targets_markdown(&self.targets)
        )
    }

    /// One box per case for the latency plot.
    pub fn box_series(&self) -> Vec<(String, BoxStats)> {
        let alone = self.writer_alone.iter().filter_map(|r| {
            r.box_stats
                .map(|b| (format!("{} {} {} alone", r.system, r.scheduler, r.rate), b))
        });
        let cases = self.cases.iter().filter_map(|r| {
            r.box_stats
                .map(|b| (format!("{} {} {}", r.system, r.scheduler, r.rate), b))
        });
        alone.chain(cases).collect()
    }
}
