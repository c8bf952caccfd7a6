//! What a run reports: each flowop's figures, the engine's counters over the run (native tbfs),
//! and the run's totals and CPU time.

use serde::{Deserialize, Serialize};

use super::Workload;

/// One flowop's figures over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowopResult {
    pub name: String,
    pub ops: u64,
    pub ops_per_s: f64,
    pub mean_latency_us: f64,
    pub bytes: u64,
    pub mb_per_s: f64,
}

/// What the tbfs engine did over a run of its native API (from `tbfs::FsCounters`), per second
/// of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineFigures {
    pub checkpoints_per_s: f64,
    /// Logs that end a run of data-only logs.
    pub data_only_runs_per_s: f64,
    /// File data written as placed blocks (MiB/s).
    pub placed_mb_per_s: f64,
    pub light_cleaning_passes_per_s: f64,
    pub segments_cleaned_per_s: f64,
    /// The share of the run's wall time the metadata lock was held, in percent.
    pub meta_held_pct: f64,
    /// Of that, the shares spent writing checkpoints, cleaning, and sealing buffered data as
    /// data-only logs (each without what is nested in it); the rest went to the namespace and
    /// short holds. Percent of the wall time.
    #[serde(default)]
    pub meta_checkpoint_pct: f64,
    #[serde(default)]
    pub meta_cleaning_pct: f64,
    #[serde(default)]
    pub meta_sealing_pct: f64,
}

impl EngineFigures {
    /// The engine's work between two readings of its counters `secs` apart.
    pub fn between(
        before: &tailbound::tbfs::FsCounters,
        after: &tailbound::tbfs::FsCounters,
        secs: f64,
    ) -> EngineFigures {
        let secs = secs.max(1e-9);
        let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        // Nanoseconds per second of the run, as a share of it.
        let share = |a: u64, b: u64| 100.0 * rate(a, b) / 1e9;
        EngineFigures {
            checkpoints_per_s: rate(before.checkpoints, after.checkpoints),
            data_only_runs_per_s: rate(before.data_only_logs, after.data_only_logs),
            placed_mb_per_s: rate(before.placed_blocks, after.placed_blocks)
                * tailbound::tbfs::format::BLOCK as f64
                / (1u64 << 20) as f64,
            light_cleaning_passes_per_s: rate(
                before.light_cleaning_passes,
                after.light_cleaning_passes,
            ),
            segments_cleaned_per_s: rate(before.segments_cleaned, after.segments_cleaned),
            meta_held_pct: share(before.meta_held_ns, after.meta_held_ns),
            meta_checkpoint_pct: share(before.meta_checkpoint_ns, after.meta_checkpoint_ns),
            meta_cleaning_pct: share(before.meta_cleaning_ns, after.meta_cleaning_ns),
            meta_sealing_pct: share(before.meta_sealing_ns, after.meta_sealing_ns),
        }
    }
}

/// A run's figures. MB are 2^20 bytes; CPU percentages are of every CPU the process may use over
/// the run's wall time (so user + system + idle = 100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub workload: Workload,
    /// Worker processes of the process model (each running `threads` threads), or 0 when the
    /// threads ran in the generator's own process.
    #[serde(default)]
    pub processes: u32,
    pub threads: u32,
    pub files: u64,
    pub mean_file_kib: u64,
    pub elapsed_s: f64,
    /// Seconds to create the fileset before the clock starts.
    pub setup_s: f64,
    /// Seconds to make the file system before that (loop device and mkfs, or the pool cleared
    /// and formatted; 0 for tmpfs), filled in by the experiment.
    #[serde(default)]
    pub mkfs_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub bytes: u64,
    pub mb_per_s: f64,
    pub user_cpu_s: f64,
    pub sys_cpu_s: f64,
    pub cpus: usize,
    pub user_cpu_pct: f64,
    pub sys_cpu_pct: f64,
    pub flowops: Vec<FlowopResult>,
    /// tbfs's native API only: what the engine did over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineFigures>,
}

impl RunResult {
    /// The process model's run from its workers' runs, which ran at once: operations, bytes,
    /// CPU time and rates add up; the elapsed time is the longest worker's; a flowop's mean
    /// latency is weighted by its operations. `None` for no workers.
    pub fn merge_workers(workers: &[RunResult]) -> Option<RunResult> {
        let first = workers.first()?;
        let elapsed = workers.iter().map(|w| w.elapsed_s).fold(0.0, f64::max);
        let user: f64 = workers.iter().map(|w| w.user_cpu_s).sum();
        let sys: f64 = workers.iter().map(|w| w.sys_cpu_s).sum();
        let capacity = elapsed.max(1e-9) * first.cpus as f64;
        let flowops = first
            .flowops
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let same: Vec<&FlowopResult> =
                    workers.iter().filter_map(|w| w.flowops.get(i)).collect();
                let ops: u64 = same.iter().map(|x| x.ops).sum();
                let weighted: f64 = same.iter().map(|x| x.mean_latency_us * x.ops as f64).sum();
                FlowopResult {
                    name: f.name.clone(),
                    ops,
                    ops_per_s: same.iter().map(|x| x.ops_per_s).sum(),
                    mean_latency_us: if ops > 0 { weighted / ops as f64 } else { 0.0 },
                    bytes: same.iter().map(|x| x.bytes).sum(),
                    mb_per_s: same.iter().map(|x| x.mb_per_s).sum(),
                }
            })
            .collect();
        Some(RunResult {
            workload: first.workload,
            processes: workers.len() as u32,
            threads: first.threads,
            files: first.files,
            mean_file_kib: first.mean_file_kib,
            elapsed_s: elapsed,
            setup_s: first.setup_s,
            mkfs_s: first.mkfs_s,
            ops: workers.iter().map(|w| w.ops).sum(),
            ops_per_s: workers.iter().map(|w| w.ops_per_s).sum(),
            bytes: workers.iter().map(|w| w.bytes).sum(),
            mb_per_s: workers.iter().map(|w| w.mb_per_s).sum(),
            user_cpu_s: user,
            sys_cpu_s: sys,
            cpus: first.cpus,
            user_cpu_pct: 100.0 * user / capacity,
            sys_cpu_pct: 100.0 * sys / capacity,
            flowops,
            engine: None,
        })
    }

    /// The share of the CPU time used that was spent in user mode, in percent.
    pub fn user_share_pct(&self) -> f64 {
        let total = self.user_cpu_s + self.sys_cpu_s;
        if total > 0.0 {
            100.0 * self.user_cpu_s / total
        } else {
            0.0
        }
    }
}
