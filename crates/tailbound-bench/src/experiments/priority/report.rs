//! The report of `bench priority`: its rows as Markdown and box plots, and the check of the
//! issue's targets.

use serde::Serialize;

use super::model::{PriorityRow, COPY_KEPT_MIN, ISOLATION_MAX, ISOLATION_P999};
use crate::report::{fmt_us, targets_markdown, Align, Table, TargetCheck};
use crate::stats::BoxStats;

/// The targets, for tailbound's rows (issue 43):
/// - **isolation**: each tbfs case's p99.9 is at most [`ISOLATION_P999`] times, and its max at
///   most [`ISOLATION_MAX`] times, what the same policy's writer had alone at the same rate in
///   this run (`alone`): what the scheduler controls, whatever the device gives a lone writer;
/// - **against the kernel**: each tbfs case's p99.9 and max are below every kernel scheduler's
///   at the same rate, with the ratio to the best;
/// - the copy keeps at least [`COPY_KEPT_MIN`] of its throughput alone.
///
/// A run without tailbound's rows, or without the rows a target compares with, says so instead
/// of passing.
pub fn check_targets(rows: &[PriorityRow], alone: &[PriorityRow]) -> Vec<TargetCheck> {
    let tb: Vec<&PriorityRow> = rows.iter().filter(|r| r.system == "tbfs").collect();
    let not_run = |what: &str| format!("not measured: no {what} in this run");
    let case = |r: &PriorityRow| format!("{} {}", r.scheduler, r.rate);

    // Isolation: against the same policy's writer alone at the same rate.
    let mut isolation = Vec::new();
    let mut isolated = !tb.is_empty();
    for r in &tb {
        let lone = alone
            .iter()
            .find(|a| a.system == "tbfs" && a.scheduler == r.scheduler && a.rate == r.rate);
        match lone {
            Some(a) => {
                let (p, m) = (r.p999_us / a.p999_us, r.max_us / a.max_us);
                isolated &= p <= ISOLATION_P999 && m <= ISOLATION_MAX;
                isolation.push(format!(
                    "{}: p99.9 {} us = {p:.1}x alone's {}, max {} us = {m:.1}x alone's {}",
                    case(r),
                    fmt_us(r.p999_us),
                    fmt_us(a.p999_us),
                    fmt_us(r.max_us),
                    fmt_us(a.max_us)
                ));
            }
            None => {
                isolated = false;
                isolation.push(format!(
                    "{}: {}",
                    case(r),
                    not_run("writer-alone run of it")
                ));
            }
        }
    }

    // Against every kernel scheduler at the same rate.
    let mut kernel = Vec::new();
    let mut below_kernel = !tb.is_empty();
    for r in &tb {
        let same_rate: Vec<&PriorityRow> = rows
            .iter()
            .filter(|k| k.system == "kernel" && k.rate == r.rate)
            .collect();
        let best_p = same_rate
            .iter()
            .min_by(|a, b| a.p999_us.total_cmp(&b.p999_us));
        let best_m = same_rate
            .iter()
            .min_by(|a, b| a.max_us.total_cmp(&b.max_us));
        match (best_p, best_m) {
            (Some(bp), Some(bm)) => {
                below_kernel &= r.p999_us < bp.p999_us && r.max_us < bm.max_us;
                kernel.push(format!(
                    "{}: p99.9 {} us against {} ({}: {:.2}x), max {} us against {} ({}: {:.2}x)",
                    case(r),
                    fmt_us(r.p999_us),
                    fmt_us(bp.p999_us),
                    bp.scheduler,
                    bp.p999_us / r.p999_us,
                    fmt_us(r.max_us),
                    fmt_us(bm.max_us),
                    bm.scheduler,
                    bm.max_us / r.max_us
                ));
            }
            _ => {
                below_kernel = false;
                kernel.push(format!(
                    "{}: {}",
                    case(r),
                    not_run("kernel case at its rate")
                ));
            }
        }
    }
    let worst_kept = tb
        .iter()
        .min_by(|a, b| a.copy_kept().total_cmp(&b.copy_kept()));
    vec![
        TargetCheck {
            target: format!(
                "tbfs under the copy: p99.9 <= {ISOLATION_P999:.0}x and max <= {ISOLATION_MAX:.0}x \
                 its own writer alone (same policy and rate, this run)"
            ),
            measured: if tb.is_empty() {
                not_run("tbfs case")
            } else {
                isolation.join("; ")
            },
            met: isolated,
        },
        TargetCheck {
            target: "tbfs p99.9 and max below every kernel scheduler's (same rate; ratio to the \
                     best)"
                .into(),
            measured: if tb.is_empty() {
                not_run("tbfs case")
            } else {
                kernel.join("; ")
            },
            met: below_kernel,
        },
        TargetCheck {
            target: format!(
                "the copy keeps >= {:.0} % of its throughput alone (tbfs)",
                COPY_KEPT_MIN * 100.0
            ),
            measured: worst_kept.map_or(not_run("tbfs case"), |t| {
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
    /// `buffered` (coreutils' `cp` through the page cache) or `direct` (`O_DIRECT`).
    pub copy: &'static str,
    /// The tbfs cases' writer and copy were processes, clients of a pool server.
    pub processes: bool,
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
    /// The scheduler's dispatch depth.
    pub depth: usize,
    pub max_io_read: u64,
    pub max_io_write: u64,
    /// Largest write piece of a lower class while a real-time tenant is active
    /// (`DeviceProfile::guard_piece`).
    pub guard_write: u64,
    /// The calibrated write costs the guard piece comes from.
    pub write_io_ns: f64,
    pub write_byte_ns: f64,
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
                "tbfs's scheduler at depth {}, calibrated on the loop file system for a {:.1} ms \
                 goal: reads \
                 split to {}, writes to {} ({} while the writer is active: writes cost {:.0} µs \
                 + {:.3} ns per byte), a flush after {} written ({:.2} ns per byte cached)\n\n",
                p.depth,
                p.latency_goal_ms,
                tailbound::units::Bytes(p.max_io_read),
                tailbound::units::Bytes(p.max_io_write),
                tailbound::units::Bytes(p.guard_write),
                p.write_io_ns / 1e3,
                p.write_byte_ns,
                p.flush_debt
                    .map_or("never (flushes did not grow)".to_string(), |d| {
                        tailbound::units::Bytes(d).to_string()
                    }),
                p.flush_byte_ns
            )
        });
        format!(
            "High-priority {} B O_SYNC appends under a {} MiB {} copy{} (latencies in µs; copy \
             MB/s under the writer, alone, and the share kept; MB = 2^20 bytes)\n\n{}\n{alone}\
             {profile}Targets\n\n{}",
            self.write_bytes,
            self.copy_mb,
            self.copy,
            if self.processes {
                "; the tbfs writer and copy are processes, clients of one pool server"
            } else {
                ""
            },
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
