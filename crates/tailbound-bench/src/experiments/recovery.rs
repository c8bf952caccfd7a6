//! `tailbound bench recovery`: how long opening a crashed tbfs pool takes, for a pool with about
//! 1 GB written, under the superblock barrier policy (and every-checkpoint for comparison).
//!
//! Two kinds of crash, several trials each, every crash point drawn from one seed:
//! - `sim`: the workload runs on the simulated device, whose power is cut a random number of device
//!   writes after a random amount of data was acknowledged; the pool is the image that crash leaves
//!   (unflushed writes applied, dropped or torn).
//! - `kill`: a child process (the `tailbound` binary itself, see [`ChildSpec`]) runs the workload on
//!   the file backend and is killed with SIGKILL at a random point; the pool file is what it left.
//!
//! Either way the figure is the wall time of `Fs::open` on the crashed pool: finding the newest
//! superblock, its checkpoint, and rolling forward. The workload is the same for both: files of
//! [`FILE_BYTES_MAX`] created and written sequentially with O_SYNC (so every write changes metadata
//! and ends in a checkpoint), then rewritten in place with O_SYNC (data-only logs under relaxed
//! ordering, recovered by roll-forward), until the written bytes reach the target. The crash falls
//! between half the target and the target.
//!
//! This module owns its pool file (kill trials) and removes it when done.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::experiments::pool;
use crate::experiments::sync_write::barrier_name;
use crate::progress::Progress;
use crate::report::{targets_markdown, Align, Table, TargetCheck};
use crate::rng::SplitMix64;
use tailbound::dev::sim::SimDevice;
use tailbound::dev::BLOCK_SIZE;
use tailbound::tbfs::{
    self, Barrier, Config, DeviceRef, Fs, OpenFlags, OpenOptions, Ordering, RecoveryReport,
    SyncMode,
};

/// The pool: 1 GB written.
pub const WRITTEN_BYTES_PAPER: u64 = 1 << 30;
/// `--quick`: 64 MiB written, enough for a superblock refresh or two.
pub const WRITTEN_BYTES_QUICK: u64 = 64 << 20;
/// Each write of the workload.
pub const BUFFER_BYTES: u64 = 64 << 10;
/// The workload's files are at most this big; each is written, then rewritten.
pub const FILE_BYTES_MAX: u64 = 32 << 20;
/// The pool holds this many times the bytes written. There is no cleaner: the rewrites' dead
/// blocks stay in partly-live segments, and every O_SYNC append adds a checkpoint.
// TODO(measure): set from the space a full run uses once the engine lands.
pub const POOL_PER_WRITTEN: u64 = 2;
/// Room for the superblocks, the first checkpoint and segment rounding on top of that.
pub const POOL_SLACK_BYTES: u64 = 64 << 20;
/// A simulated crash falls at most this many device writes after the chosen point.
const CUT_WRITES_MAX: u64 = 64;
/// The pool file of the kill trials in the experiment's directory.
const POOL_NAME: &str = "tbfs-recovery.pool";
/// What the child prints after each acknowledged write, followed by the bytes acknowledged so far.
const ACKED: &str = "acked ";
/// What the child prints when the workload is complete.
const DONE: &str = "done";

/// How a trial crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashKind {
    /// Power cut on the simulated device.
    Sim,
    /// SIGKILL of a child process writing through the file backend.
    Kill,
}

impl CrashKind {
    pub const ALL: [CrashKind; 2] = [CrashKind::Sim, CrashKind::Kill];

    pub fn name(self) -> &'static str {
        match self {
            CrashKind::Sim => "sim",
            CrashKind::Kill => "kill",
        }
    }

    pub fn parse(name: &str) -> Option<CrashKind> {
        CrashKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }
}

/// A barrier policy by its issue name (`every-log`, `every-checkpoint`, `superblock`).
pub fn parse_barrier(name: &str) -> Option<Barrier> {
    [
        Barrier::EveryLog,
        Barrier::EveryCheckpoint,
        Barrier::Superblock,
    ]
    .into_iter()
    .find(|b| barrier_name(*b).eq_ignore_ascii_case(name))
}

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryBenchError {
    #[error("recovery: {0}")]
    Invalid(String),
    #[error("recovery {kind} {barrier} trial {trial}: {message}")]
    Trial {
        kind: &'static str,
        barrier: &'static str,
        trial: u32,
        message: String,
    },
    #[error("recovery: {0}")]
    Setup(String),
}

/// The workload one trial runs: what to write, so the parent and the child agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    pub written_bytes: u64,
    pub buffer_bytes: u64,
    pub barrier: Barrier,
}

impl Workload {
    /// Each file's size: [`FILE_BYTES_MAX`], or half the target for small targets, in whole buffers.
    pub fn file_bytes(&self) -> u64 {
        let half = (self.written_bytes / 2).max(self.buffer_bytes);
        let bytes = FILE_BYTES_MAX.min(half);
        (bytes / self.buffer_bytes).max(1) * self.buffer_bytes
    }

    /// The pool's configuration: relaxed ordering and this barrier, defaults otherwise.
    pub fn config(&self) -> Config {
        Config {
            ordering: Ordering::Relaxed,
            barrier: self.barrier,
            ..Config::default()
        }
    }

    /// Runs the workload on `fs`, calling `acked` with the bytes acknowledged after every write;
    /// it stops early when `acked` returns false. Returns the bytes acknowledged.
    pub fn run(&self, fs: &Fs, mut acked: impl FnMut(u64) -> bool) -> tbfs::Result<u64> {
        let file_bytes = self.file_bytes();
        let mut data = vec![0u8; self.buffer_bytes as usize];
        SplitMix64::new(self.written_bytes ^ self.buffer_bytes).fill(&mut data);
        let mut done = 0u64;
        let mut index = 0u64;
        while done < self.written_bytes {
            let path = format!("/data-{index:05}");
            for pass in 0..2 {
                let flags = OpenFlags {
                    write: true,
                    create: pass == 0,
                    exclusive: pass == 0,
                    sync: SyncMode::Full,
                    mode: 0o644,
                    ..OpenFlags::default()
                };
                let file = fs.open_file(&path, flags)?;
                let mut offset = 0;
                while offset < file_bytes && done < self.written_bytes {
                    let n = file.pwrite(&data, offset)? as u64;
                    if n == 0 {
                        return Err(tbfs::Error::Invalid(format!(
                            "{path}: a write of {} bytes wrote nothing",
                            data.len()
                        )));
                    }
                    offset += n;
                    done += n;
                    if !acked(done) {
                        return Ok(done);
                    }
                }
            }
            index += 1;
        }
        Ok(done)
    }
}

/// The child process of a kill trial: runs the workload on the pool file and reports each
/// acknowledged write on stdout, then waits for stdin to close. `tailbound bench recovery --child`
/// runs it from [`ChildSpec::args`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    pub pool: PathBuf,
    pub workload: Workload,
}

impl ChildSpec {
    /// The arguments of `tailbound` that run this child.
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "recovery".into(),
            "--child".into(),
            "--pool".into(),
            self.pool.display().to_string(),
            "--barriers".into(),
            barrier_name(self.workload.barrier).into(),
            "--written-bytes".into(),
            self.workload.written_bytes.to_string(),
            "--buffer".into(),
            self.workload.buffer_bytes.to_string(),
        ]
    }

    /// Formats the pool and runs the workload, printing `acked BYTES` after every write and `done`
    /// at the end on `out`, then blocks until `wait_until` returns (the parent kills it first).
    pub fn run(&self, out: &mut impl Write, wait_until: impl FnOnce()) -> Result<(), String> {
        let dev: DeviceRef =
            pool::open_file_pool(&self.pool).map_err(|e| format!("opening the pool: {e}"))?;
        let fs = Fs::format(dev, &self.workload.config())
            .map_err(|e| format!("formatting {}: {e}", self.pool.display()))?;
        let mut report_err = None;
        self.workload
            .run(&fs, |done| {
                match writeln!(out, "{ACKED}{done}").and_then(|()| out.flush()) {
                    Ok(()) => true,
                    Err(e) => {
                        report_err = Some(e);
                        false
                    }
                }
            })
            .map_err(|e| format!("workload: {e}"))?;
        if let Some(e) = report_err {
            return Err(format!("reporting progress: {e}"));
        }
        writeln!(out, "{DONE}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("reporting progress: {e}"))?;
        wait_until();
        fs.close().map_err(|e| format!("closing the pool: {e}"))
    }
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct RecoveryBench {
    /// Directory of the kill trials' pool file.
    pub dir: PathBuf,
    pub pool_bytes: u64,
    pub written_bytes: u64,
    pub buffer_bytes: u64,
    pub barriers: Vec<Barrier>,
    pub kinds: Vec<CrashKind>,
    pub trials: u32,
    pub seed: u64,
    /// The `tailbound` binary the kill trials run as their child.
    pub child_exe: Option<PathBuf>,
    /// Draw progress bars (on a terminal only).
    pub progress: bool,
}

/// The pool size for `written_bytes`: [`POOL_PER_WRITTEN`] times it plus [`POOL_SLACK_BYTES`].
pub fn pool_bytes_for(written_bytes: u64) -> u64 {
    written_bytes * POOL_PER_WRITTEN + POOL_SLACK_BYTES
}

impl RecoveryBench {
    /// The parameters: 1 GB written, superblock and every-checkpoint, both kinds, 5 trials.
    pub fn paper(dir: PathBuf) -> RecoveryBench {
        RecoveryBench {
            dir,
            pool_bytes: pool_bytes_for(WRITTEN_BYTES_PAPER),
            written_bytes: WRITTEN_BYTES_PAPER,
            buffer_bytes: BUFFER_BYTES,
            barriers: vec![Barrier::Superblock, Barrier::EveryCheckpoint],
            kinds: CrashKind::ALL.to_vec(),
            trials: 5,
            seed: 0x5eed,
            child_exe: None,
            progress: true,
        }
    }

    /// `--quick`: 64 MiB written, 2 trials.
    pub fn quick(dir: PathBuf) -> RecoveryBench {
        RecoveryBench {
            pool_bytes: pool_bytes_for(WRITTEN_BYTES_QUICK),
            written_bytes: WRITTEN_BYTES_QUICK,
            trials: 2,
            ..RecoveryBench::paper(dir)
        }
    }

    /// Checks the parameters before anything is created.
    pub fn validate(&self) -> Result<(), RecoveryBenchError> {
        let invalid = |m: String| Err(RecoveryBenchError::Invalid(m));
        if self.trials == 0 {
            return invalid("--trials must be at least 1".into());
        }
        if self.barriers.is_empty() || self.kinds.is_empty() {
            return invalid("nothing to run".into());
        }
        if self.buffer_bytes == 0 || !self.buffer_bytes.is_multiple_of(BLOCK_SIZE) {
            return invalid(format!(
                "buffer of {} bytes is not a multiple of {BLOCK_SIZE}",
                self.buffer_bytes
            ));
        }
        if self.written_bytes < 2 * self.buffer_bytes {
            return invalid("write at least two buffers".into());
        }
        if !self.pool_bytes.is_multiple_of(BLOCK_SIZE) || self.pool_bytes <= self.written_bytes {
            return invalid(format!(
                "a pool of {} bytes cannot hold {} bytes written (and must be a multiple of \
                 {BLOCK_SIZE})",
                self.pool_bytes, self.written_bytes
            ));
        }
        if self.kinds.contains(&CrashKind::Kill) && self.child_exe.is_none() {
            return invalid("kill trials need the tailbound binary to run as their child".into());
        }
        Ok(())
    }

    fn workload(&self, barrier: Barrier) -> Workload {
        Workload {
            written_bytes: self.written_bytes,
            buffer_bytes: self.buffer_bytes,
            barrier,
        }
    }

    /// Runs every kind and barrier (kinds first), calling `on_row` as each row is measured.
    pub fn run(
        &self,
        mut on_row: impl FnMut(&RecoveryRow),
    ) -> Result<RecoveryBenchReport, RecoveryBenchError> {
        self.validate()?;
        let pool_path = self.dir.join(POOL_NAME);
        let _owned = RemoveOnDrop(pool_path.clone());
        let mut pool_created = false;
        let mut rows = Vec::new();
        let mut rng = SplitMix64::new(self.seed);
        for &kind in &self.kinds {
            for &barrier in &self.barriers {
                let workload = self.workload(barrier);
                let label = format!("{} {}", kind.name(), barrier_name(barrier));
                let len = u64::from(self.trials) * self.written_bytes;
                let progress = if self.progress {
                    Progress::new(len, &label)
                } else {
                    Progress::hidden(len)
                };
                if kind == CrashKind::Kill && !pool_created {
                    progress.set_message("zero-filling the pool (once)");
                    drop(
                        pool::create_file_pool(&pool_path, self.pool_bytes).map_err(|e| {
                            RecoveryBenchError::Setup(format!("creating the pool: {e}"))
                        })?,
                    );
                    pool_created = true;
                }
                let mut trials = Vec::new();
                for trial in 0..self.trials {
                    let crash_at = rng.range(self.written_bytes / 2, self.written_bytes);
                    let seed = rng.next_u64();
                    progress.set_message(format!("trial {}/{}", trial + 1, self.trials));
                    let base = progress.position();
                    let tick = |done: u64| {
                        let target = base + done.min(self.written_bytes);
                        progress.inc(target.saturating_sub(progress.position()));
                    };
                    let outcome = match kind {
                        CrashKind::Sim => self.sim_trial(workload, crash_at, seed, tick),
                        CrashKind::Kill => self.kill_trial(workload, &pool_path, crash_at, tick),
                    }
                    .map_err(|message| RecoveryBenchError::Trial {
                        kind: kind.name(),
                        barrier: barrier_name(barrier),
                        trial: trial + 1,
                        message,
                    })?;
                    progress.inc((base + self.written_bytes).saturating_sub(progress.position()));
                    trials.push(outcome);
                }
                progress.finish();
                let row = RecoveryRow::new(kind, barrier, self, &trials);
                on_row(&row);
                rows.push(row);
            }
        }
        let targets = check_targets(&rows);
        Ok(RecoveryBenchReport {
            experiment: "recovery",
            cases: rows,
            targets,
        })
    }

    fn sim_trial(
        &self,
        workload: Workload,
        crash_at: u64,
        seed: u64,
        tick: impl Fn(u64),
    ) -> Result<Trial, String> {
        let dev = Arc::new(SimDevice::new(self.pool_bytes));
        let shared: DeviceRef = dev.clone();
        let fs = Fs::format(shared, &workload.config()).map_err(|e| format!("formatting: {e}"))?;
        let mut armed = false;
        let cut_after = seed % (CUT_WRITES_MAX + 1);
        let result = workload.run(&fs, |done| {
            tick(done);
            if !armed && done >= crash_at {
                dev.cut_power_after(cut_after);
                armed = true;
            }
            true
        });
        let acked = match result {
            // The power went out within the remaining writes, as planned.
            Err(_) if armed => crash_at,
            Err(e) => return Err(format!("workload before the crash: {e}")),
            Ok(done) => {
                // The cut fell after the workload's last write: cut now.
                dev.cut_power_after(0);
                done
            }
        };
        // Best effort: the power is out, so closing only stops background work.
        let _ = fs.close();
        let crashed: DeviceRef = Arc::new(dev.crash(seed));
        drop(dev);
        // Under the `superblock` barrier a power cut may take everything since the format: no
        // sync made any of it durable, and which unflushed writes the image keeps is the seed's.
        let promised = workload.barrier != Barrier::Superblock;
        let trial = time_open(crashed, acked, promised)?;
        Ok(trial)
    }

    fn kill_trial(
        &self,
        workload: Workload,
        pool_path: &Path,
        crash_at: u64,
        tick: impl Fn(u64),
    ) -> Result<Trial, String> {
        let exe = self
            .child_exe
            .as_ref()
            .ok_or_else(|| "no child binary".to_string())?;
        let spec = ChildSpec {
            pool: pool_path.to_path_buf(),
            workload,
        };
        let mut child = Command::new(exe)
            .args(spec.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("the child has no stdout")?;
        let mut acked = 0;
        let mut reached = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix(ACKED).and_then(|n| n.parse::<u64>().ok()) {
                acked = n;
                tick(n);
                if n >= crash_at {
                    reached = true;
                    break;
                }
            } else if line == DONE {
                reached = true;
                break;
            }
        }
        // SIGKILL: the child gets no chance to sync or close anything.
        let killed = child.kill();
        let output = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the child: {e}"))?;
        if !reached || killed.is_err() {
            return Err(format!(
                "the child ended before the crash point ({acked} of {crash_at} bytes acknowledged, \
                 {}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let dev: DeviceRef =
            pool::open_file_pool(pool_path).map_err(|e| format!("reopening the pool: {e}"))?;
        time_open(dev, acked, true)
    }
}

/// Opens the crashed pool on `dev`, timing it, and checks the recovered tree can be listed (and,
/// if the crash could not lose what was acknowledged, is not empty).
fn time_open(dev: DeviceRef, acked: u64, promised: bool) -> Result<Trial, String> {
    let start = Instant::now();
    let fs = Fs::open(dev, &OpenOptions::default()).map_err(|e| format!("recovering: {e}"))?;
    let elapsed = start.elapsed();
    let report = fs.recovery_report();
    let files = fs
        .readdir("/")
        .map_err(|e| format!("listing / after recovery: {e}"))?;
    if files.is_empty() && promised {
        return Err(format!(
            "recovery left an empty pool after {acked} bytes were acknowledged"
        ));
    }
    fs.close()
        .map_err(|e| format!("closing the recovered pool: {e}"))?;
    Ok(Trial {
        open_ms: elapsed.as_secs_f64() * 1000.0,
        report,
    })
}

/// Removes a file when dropped (best effort).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One trial: how long opening took and what recovery did.
#[derive(Debug, Clone)]
struct Trial {
    open_ms: f64,
    report: RecoveryReport,
}

/// One kind and barrier over its trials: a row of the table and of the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryRow {
    pub kind: &'static str,
    pub barrier: &'static str,
    pub trials: u32,
    pub mean_ms: f64,
    pub max_ms: f64,
    pub min_ms: f64,
    /// The pool's size in MB (2^20 bytes).
    pub pool_mb: u64,
    pub written_mb: u64,
    /// The most any trial rolled forward after the superblock's checkpoint.
    pub logs_rolled_forward_max: u64,
    pub rolled_forward_mb_max: f64,
}

impl RecoveryRow {
    fn new(kind: CrashKind, barrier: Barrier, bench: &RecoveryBench, trials: &[Trial]) -> Self {
        let ms: Vec<f64> = trials.iter().map(|t| t.open_ms).collect();
        let n = ms.len().max(1) as f64;
        RecoveryRow {
            kind: kind.name(),
            barrier: barrier_name(barrier),
            trials: trials.len() as u32,
            mean_ms: ms.iter().sum::<f64>() / n,
            max_ms: ms.iter().copied().fold(0.0, f64::max),
            min_ms: ms.iter().copied().reduce(f64::min).unwrap_or(0.0),
            pool_mb: bench.pool_bytes >> 20,
            written_mb: bench.written_bytes >> 20,
            logs_rolled_forward_max: trials
                .iter()
                .map(|t| t.report.logs_rolled_forward)
                .max()
                .unwrap_or(0),
            rolled_forward_mb_max: trials
                .iter()
                .map(|t| t.report.bytes_rolled_forward)
                .max()
                .unwrap_or(0) as f64
                / (1u64 << 20) as f64,
        }
    }
}

/// The target: with the superblock policy, recovery takes at most 1 s, per kind of crash.
pub fn check_targets(rows: &[RecoveryRow]) -> Vec<TargetCheck> {
    rows.iter()
        .filter(|r| r.barrier == barrier_name(Barrier::Superblock))
        .map(|r| TargetCheck {
            target: format!(
                "superblock policy: recovery <= 1 s max ({}, {} MB written)",
                r.kind, r.written_mb
            ),
            measured: format!(
                "max {:.1} ms, mean {:.1} ms over {} trials",
                r.max_ms, r.mean_ms, r.trials
            ),
            met: r.max_ms <= 1000.0,
        })
        .collect()
}

/// The experiment's result: what `--json` writes. (Named apart from `tbfs::RecoveryReport`, which
/// is what one recovery found.)
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryBenchReport {
    pub experiment: &'static str,
    pub cases: Vec<RecoveryRow>,
    pub targets: Vec<TargetCheck>,
}

impl RecoveryBenchReport {
    /// One row per kind and barrier, then the targets.
    pub fn to_markdown(&self) -> String {
        let mut table = Table::new(
            [
                "kind",
                "barrier",
                "trials",
                "mean (ms)",
                "max (ms)",
                "min (ms)",
                "pool (MB)",
                "written (MB)",
                "rolled fwd max (MB)",
            ]
            .map(String::from)
            .to_vec(),
        );
        for column in 2..9 {
            table.set_align(column, Align::Right);
        }
        for r in &self.cases {
            table.push(vec![
                r.kind.into(),
                r.barrier.into(),
                r.trials.to_string(),
                format!("{:.1}", r.mean_ms),
                format!("{:.1}", r.max_ms),
                format!("{:.1}", r.min_ms),
                r.pool_mb.to_string(),
                r.written_mb.to_string(),
                format!("{:.1}", r.rolled_forward_mb_max),
            ]);
        }
        let mut out = format!(
            "Recovery time (wall time of opening the crashed pool), relaxed ordering\n\n{}",
            table.to_markdown()
        );
        if !self.targets.is_empty() {
            out.push_str("\nTargets\n\n");
            out.push_str(&targets_markdown(&self.targets));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for kind in CrashKind::ALL {
            assert_eq!(CrashKind::parse(kind.name()), Some(kind));
        }
        for b in [
            Barrier::EveryLog,
            Barrier::EveryCheckpoint,
            Barrier::Superblock,
        ] {
            assert_eq!(parse_barrier(barrier_name(b)), Some(b));
        }
        assert_eq!(parse_barrier("sometimes"), None);
        assert_eq!(CrashKind::parse("power"), None);
    }

    #[test]
    fn workload_files_are_whole_buffers_and_small_targets_get_two_files() {
        let w = Workload {
            written_bytes: WRITTEN_BYTES_PAPER,
            buffer_bytes: BUFFER_BYTES,
            barrier: Barrier::Superblock,
        };
        assert_eq!(w.file_bytes(), FILE_BYTES_MAX);
        let small = Workload {
            written_bytes: 1 << 20,
            ..w
        };
        assert_eq!(small.file_bytes(), 512 << 10);
        assert_eq!(small.config().ordering, Ordering::Relaxed);
        assert_eq!(small.config().barrier, Barrier::Superblock);
    }

    #[test]
    fn child_arguments_name_everything_the_child_needs() {
        let spec = ChildSpec {
            pool: PathBuf::from("/x/p.pool"),
            workload: Workload {
                written_bytes: 123 << 20,
                buffer_bytes: 8192,
                barrier: Barrier::EveryCheckpoint,
            },
        };
        let args = spec.args().join(" ");
        assert_eq!(
            args,
            "bench recovery --child --pool /x/p.pool --barriers every-checkpoint \
             --written-bytes 128974848 --buffer 8192"
        );
    }

    #[test]
    fn parameters_are_checked_before_anything_runs() {
        let mut bench = RecoveryBench::quick(PathBuf::from("/nonexistent"));
        bench.kinds = vec![CrashKind::Sim];
        assert!(bench.validate().is_ok());
        bench.kinds = vec![CrashKind::Kill];
        assert!(bench.validate().is_err(), "kill trials need a child binary");
        bench.child_exe = Some(PathBuf::from("/bin/true"));
        assert!(bench.validate().is_ok());
        bench.pool_bytes = bench.written_bytes;
        assert!(bench.validate().is_err());
        bench.pool_bytes = pool_bytes_for(bench.written_bytes);
        bench.trials = 0;
        assert!(bench.validate().is_err());
    }

    #[test]
    fn only_the_superblock_rows_carry_the_target() {
        let row = |barrier: Barrier, max_ms: f64| RecoveryRow {
            kind: "sim",
            barrier: barrier_name(barrier),
            trials: 3,
            mean_ms: max_ms / 2.0,
            max_ms,
            min_ms: 1.0,
            pool_mb: 2112,
            written_mb: 1024,
            logs_rolled_forward_max: 4,
            rolled_forward_mb_max: 1.5,
        };
        let rows = vec![
            row(Barrier::Superblock, 300.0),
            row(Barrier::EveryCheckpoint, 5000.0),
        ];
        let checks = check_targets(&rows);
        assert_eq!(checks.len(), 1);
        assert!(checks[0].met, "{checks:?}");
        let checks = check_targets(&[row(Barrier::Superblock, 1500.0)]);
        assert!(!checks[0].met);
        let report = RecoveryBenchReport {
            experiment: "recovery",
            cases: rows,
            targets: checks,
        };
        let md = report.to_markdown();
        assert!(md.contains("| sim  | superblock "), "{md}");
        assert!(md.contains("| NO "), "{md}");
    }
}
