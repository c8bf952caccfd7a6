//! `tailbound bench priority` (seed 004): how long does a high-priority 4 KiB synchronous append
//! take while a low-priority process copies a multi-GB file, and how much of its throughput does
//! the copy keep?
//!
//! Kernel side: ext4 on a loop device with direct I/O (`losetup --direct-io=on`, mounted
//! `noatime,lazytime`) over a scratch file on the real disk, under each kernel scheduler (none,
//! mq-deadline, kyber, bfq; set on the loop device's `queue/scheduler` and put back after).
//!
//! - The writer is a thread of this process in the real-time I/O class (`ioprio_set`, what
//!   `ionice -c1 -n0` does) appending 4 KiB with `O_SYNC` to a log file, either paced at 111
//!   writes per second (the paper's call-processing load) or flat out. Each `write()` is timed
//!   into an HDR histogram. The log is started afresh every 256 MiB so a long run fits the disk.
//! - The copy is a separate process (`tailbound bench priority --child`) in the best-effort class
//!   at its lowest level (`ionice -c2 -n7`), copying the source file to a new file again and again
//!   with `O_DIRECT` reads and writes of 1 MiB, so its I/O reaches the block layer with its own
//!   priority and its throughput is the disk's, not the page cache's. It runs alone first (its
//!   throughput alone), then beside the writer (its throughput under the writer).
//!
//! MB are 2^20 bytes. Latencies are in microseconds.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::experiments::blockdev::{BlockDevError, KernelSched, SchedulerGuard};
use crate::experiments::loopfs::LoopFs;
use crate::experiments::tenants::{
    child_wait_go, growth_in_window, interrupted, sleep_watching, TenantProcess, DONE, GO, READY,
};
use crate::progress::Progress;
use crate::report::{fmt_us, targets_markdown, Align, Table, TargetCheck};
use crate::stats::{BoxStats, LatencyHistogram};
use crate::timer::PeriodicTimer;
use tailbound::sched::{Class, Policy, Prio};
use tailbound::sys::file::{AlignedBuf, O_DIRECT};
use tailbound::sys::time::{monotonic_now, MonoNanos};

const MIB: u64 = 1 << 20;
/// The paper's write: 4 KiB.
pub const WRITE_BYTES: usize = 4096;
/// The paper's rate: 111 synchronous writes per second (400,000 BHCA).
pub const PAPER_RATE_PER_S: u32 = 111;
/// The paper's run: 1,000,000 writes.
pub const WRITES_FULL: u64 = 1_000_000;
pub const WRITES_QUICK: u64 = 200;
/// The copy's source file.
pub const COPY_BYTES_FULL: u64 = 2 << 30;
pub const COPY_BYTES_QUICK: u64 = 64 << 20;
/// The copy's request size.
pub const COPY_CHUNK_BYTES: u64 = MIB;
/// The writer's log is started afresh after this many bytes.
pub const LOG_BYTES_MAX: u64 = 256 << 20;
/// Default latency goal of the tbfs cases' calibration: the p99.99 target, so no piece the
/// scheduler dispatches, and no flush it makes for its debt, takes longer than that.
pub const LATENCY_GOAL_DEFAULT: Duration = Duration::from_millis(5);
/// Largest size the tbfs cases' calibration times (the goal is a few milliseconds).
const CALIBRATE_MAX_SIZE: u64 = 16 << 20;
/// The writer's I/O priority: real time, level 0 (`ionice -c1 -n0`).
pub const WRITER_PRIO: Prio = Prio {
    class: Class::Rt,
    level: 0,
};
/// The copy's I/O priority: best effort, level 7 (`ionice -c2 -n7`).
pub const COPY_PRIO: Prio = Prio {
    class: Class::Be,
    level: 7,
};
/// The targets.
pub const MAX_VS_BEST_KERNEL: f64 = 10.0;
pub const P9999_US_MAX: f64 = 5_000.0;
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

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriorityError {
    #[error("priority: {0}")]
    Invalid(String),
    #[error("priority: {0}")]
    Setup(String),
    #[error("priority case {case}: {message}")]
    Case { case: String, message: String },
}

impl From<BlockDevError> for PriorityError {
    fn from(e: BlockDevError) -> Self {
        PriorityError::Setup(e.to_string())
    }
}

/// The copy process: copies `src` into new files in `dst_dir` over and over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySpec {
    pub src: PathBuf,
    pub dst_dir: PathBuf,
    pub chunk_bytes: u64,
}

/// The copy's progress line: `c TIME_NS TOTAL_BYTES`.
const COPIED: &str = "c";

impl CopySpec {
    /// The arguments of `tailbound` that run this copy.
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "priority".into(),
            "--child".into(),
            "--src".into(),
            self.src.display().to_string(),
            "--dst-dir".into(),
            self.dst_dir.display().to_string(),
            "--chunk-bytes".into(),
            self.chunk_bytes.to_string(),
        ]
    }

    /// The child's work: lowers its I/O priority to best-effort 7, prints `ready`, waits for
    /// `go`, then copies until `stop`, printing `c TIME_NS TOTAL_BYTES` after every chunk (and
    /// once at the start with 0), then `done`. Each pass writes a new file and removes the one
    /// before, so the copy allocates space as a backup would.
    pub fn run(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        if self.chunk_bytes == 0 || !self.chunk_bytes.is_multiple_of(4096) {
            return Err(format!(
                "chunk of {} bytes is not a multiple of 4 KiB",
                self.chunk_bytes
            ));
        }
        COPY_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("lowering the copy's I/O priority: {e}"))?;
        let src = OpenOptions::new()
            .read(true)
            .custom_flags(O_DIRECT)
            .open(&self.src)
            .map_err(|e| format!("opening {} O_DIRECT: {e}", self.src.display()))?;
        let src_len = src
            .metadata()
            .map_err(|e| format!("stat {}: {e}", self.src.display()))?
            .len();
        let usable = src_len / self.chunk_bytes * self.chunk_bytes;
        if usable == 0 {
            return Err(format!("{} is smaller than one chunk", self.src.display()));
        }
        let mut buf = AlignedBuf::zeroed(self.chunk_bytes as usize, 4096);
        let say = |out: &mut dyn Write, line: &str| {
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("reporting: {e}"))
        };
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(());
        };
        let mut total = 0u64;
        say(out, &format!("{COPIED} {} 0", monotonic_now().0))?;
        let mut pass = 0u64;
        let mut previous: Option<PathBuf> = None;
        'passes: while !stop.load(Ordering::Relaxed) {
            let dst_path = self.dst_dir.join(format!("copy-{pass}"));
            let dst = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(O_DIRECT)
                .open(&dst_path)
                .map_err(|e| format!("creating {} O_DIRECT: {e}", dst_path.display()))?;
            if let Some(p) = previous.take() {
                std::fs::remove_file(&p).map_err(|e| format!("removing {}: {e}", p.display()))?;
            }
            let mut at = 0;
            while at < usable {
                if stop.load(Ordering::Relaxed) {
                    break 'passes;
                }
                src.read_exact_at(buf.as_mut_slice(), at)
                    .map_err(|e| format!("reading {} at {at}: {e}", self.src.display()))?;
                dst.write_all_at(buf.as_slice(), at)
                    .map_err(|e| format!("writing {} at {at}: {e}", dst_path.display()))?;
                at += self.chunk_bytes;
                total += self.chunk_bytes;
                say(out, &format!("{COPIED} {} {total}", monotonic_now().0))?;
            }
            previous = Some(dst_path);
            pass += 1;
        }
        say(out, DONE)
    }
}

/// Parses the copy's progress lines into `(time_ns, total_bytes)`.
pub fn parse_copied(line: &str) -> Option<(u64, u64)> {
    let mut words = line.split_whitespace();
    if words.next()? != COPIED {
        return None;
    }
    let t = words.next()?.parse().ok()?;
    let total = words.next()?.parse().ok()?;
    words.next().is_none().then_some((t, total))
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

    fn from_histogram(
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
        }
    }
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct PriorityBench {
    /// Where the loop device's image goes (on the disk to measure, not a tmpfs).
    pub scratch_parent: PathBuf,
    pub schedulers: Vec<KernelSched>,
    /// tailbound's cases: a tbfs pool behind the scheduler with each of these policies.
    pub tbfs_policies: Vec<Policy>,
    pub rates: Vec<Rate>,
    /// Writes per case.
    pub writes: u64,
    pub copy_bytes: u64,
    /// How long the copy runs alone before the writer starts, and again after it ends.
    pub copy_alone: Duration,
    /// The tbfs cases' scheduler uses a profile calibrated on the loop file system at the start
    /// of the run with this latency goal (split sizes and flush debt).
    pub latency_goal: Duration,
    /// Before the cases, the writer runs alone (no copy) at each rate, on the kernel path (the
    /// loop device under `none`) and in a tbfs pool per policy: what the device gives a lone
    /// writer in this run, the floor under any scheduler's figures.
    pub writer_alone: bool,
    pub child_exe: Option<PathBuf>,
    pub interrupted: Option<Arc<AtomicBool>>,
    pub progress: bool,
}

impl PriorityBench {
    /// The paper's run: 1,000,000 writes per case at 111/s and flat out, a 2 GiB copy, every
    /// kernel scheduler.
    pub fn full(scratch_parent: PathBuf) -> PriorityBench {
        PriorityBench {
            scratch_parent,
            schedulers: KernelSched::ALL.to_vec(),
            tbfs_policies: vec![Policy::Default],
            rates: vec![Rate::Paced(PAPER_RATE_PER_S), Rate::FlatOut],
            writes: WRITES_FULL,
            copy_bytes: COPY_BYTES_FULL,
            copy_alone: Duration::from_secs(5),
            latency_goal: LATENCY_GOAL_DEFAULT,
            writer_alone: true,
            child_exe: None,
            interrupted: None,
            progress: true,
        }
    }

    /// `--quick`: 200 writes per case and a 64 MiB copy, 0.5 s alone.
    pub fn quick(scratch_parent: PathBuf) -> PriorityBench {
        PriorityBench {
            writes: WRITES_QUICK,
            copy_bytes: COPY_BYTES_QUICK,
            copy_alone: Duration::from_millis(500),
            ..PriorityBench::full(scratch_parent)
        }
    }

    pub fn case_count(&self) -> usize {
        (self.schedulers.len() + self.tbfs_policies.len()) * self.rates.len()
    }

    /// The writer-alone runs: per rate, one on the kernel path (when any kernel scheduler is
    /// measured) and one per tbfs policy.
    pub fn alone_count(&self) -> usize {
        self.alone_sides() * self.rates.len()
    }

    /// The sides the writer runs alone on: the kernel path and each tbfs policy.
    fn alone_sides(&self) -> usize {
        if !self.writer_alone {
            return 0;
        }
        usize::from(!self.schedulers.is_empty()) + self.tbfs_policies.len()
    }

    /// The ext4 image: the source, two copies (one being written, one being removed), two logs,
    /// and room for ext4 itself.
    pub fn image_bytes(&self) -> u64 {
        3 * self.copy_bytes + 2 * LOG_BYTES_MAX + (512 << 20)
    }

    /// A rough length of the run, for the progress message: the writes at their rate (flat-out
    /// writes counted at 1 ms) plus the copy alone, per case.
    pub fn estimate(&self) -> Duration {
        let per_rate: Duration = self
            .rates
            .iter()
            .map(|r| match r {
                Rate::Paced(n) => Duration::from_secs_f64(self.writes as f64 / f64::from(*n)),
                Rate::FlatOut => Duration::from_millis(self.writes),
            })
            .sum();
        (per_rate + 2 * self.copy_alone * self.rates.len() as u32)
            * (self.schedulers.len() + self.tbfs_policies.len()) as u32
            + per_rate * self.alone_sides() as u32
    }

    /// Checks the parameters before anything is created.
    pub fn validate(&self) -> Result<(), PriorityError> {
        let invalid = |m: &str| Err(PriorityError::Invalid(m.to_string()));
        if self.case_count() == 0 {
            return invalid("no cases (schedulers and rates must be non-empty)");
        }
        if self.writes == 0 {
            return invalid("--writes must be at least 1");
        }
        if self.copy_bytes < COPY_CHUNK_BYTES {
            return invalid("the copy needs at least 1 MiB");
        }
        if self.copy_alone.is_zero() {
            return invalid("the copy must run alone for some time");
        }
        if self.latency_goal.is_zero() {
            return invalid("--latency-goal must be positive");
        }
        if self.child_exe.is_none() {
            return invalid("no tailbound binary to run the copy");
        }
        Ok(())
    }

    /// Runs every case (schedulers, then rates), calling `on_row` as each is measured.
    pub fn run(
        &self,
        mut on_row: impl FnMut(&PriorityRow),
    ) -> Result<PriorityReport, PriorityError> {
        self.validate()?;
        let total = (self.case_count() + self.alone_count()) as u64;
        let progress = if self.progress {
            Progress::new(total, "priority")
        } else {
            Progress::hidden(total)
        };
        progress.set_message("making ext4 on a loop device and the copy's source");
        let fs = LoopFs::create_ext4(&self.scratch_parent, self.image_bytes())
            .map_err(|e| PriorityError::Setup(e.to_string()))?;
        let device = fs
            .device()
            .ok_or_else(|| PriorityError::Setup("the loop file system has no device".into()))?
            .to_string();
        let src = fs.mount_point().join("source.dat");
        write_source(&src, self.copy_bytes).map_err(PriorityError::Setup)?;
        let profile = if self.tbfs_policies.is_empty() {
            None
        } else {
            progress.set_message("calibrating the loop file system for tailbound's scheduler");
            Some(self.calibrate(&fs).map_err(PriorityError::Setup)?)
        };
        let mut rows = Vec::new();
        let mut alone_rows = Vec::new();
        let mut run_case = |case: String,
                            run: &dyn Fn() -> Result<PriorityRow, String>|
         -> Result<(), PriorityError> {
            progress.set_message(case.clone());
            let row = run().map_err(|message| PriorityError::Case { case, message })?;
            on_row(&row);
            if row.with_copy {
                rows.push(row);
            } else {
                alone_rows.push(row);
            }
            progress.inc(1);
            Ok(())
        };
        if self.writer_alone {
            if !self.schedulers.is_empty() {
                for &rate in &self.rates {
                    run_case(format!("kernel writer alone {}", rate.name()), &|| {
                        self.run_kernel_alone(&fs, &device, rate)
                    })?;
                }
            }
            if let Some(profile) = &profile {
                for &policy in &self.tbfs_policies {
                    for &rate in &self.rates {
                        run_case(
                            format!("tbfs {} writer alone {}", policy.name(), rate.name()),
                            &|| self.run_tbfs_alone(&fs, &device, profile, policy, rate),
                        )?;
                    }
                }
            }
        }
        for &sched in &self.schedulers {
            for &rate in &self.rates {
                run_case(format!("kernel {} {}", sched.name(), rate.name()), &|| {
                    self.run_kernel_case(&fs, &device, &src, sched, rate)
                })?;
            }
        }
        // Calibrated exactly when there are tbfs cases.
        if let Some(profile) = &profile {
            for &policy in &self.tbfs_policies {
                for &rate in &self.rates {
                    run_case(format!("tbfs {} {}", policy.name(), rate.name()), &|| {
                        self.run_tbfs_case(&fs, &device, profile, policy, rate)
                    })?;
                }
            }
        }
        progress.finish();
        drop(fs);
        let targets = check_targets(&rows, &alone_rows);
        Ok(PriorityReport {
            experiment: "priority",
            write_bytes: WRITE_BYTES as u64,
            copy_mb: self.copy_bytes / MIB,
            tbfs_profile: profile.map(|p| TbfsProfile {
                latency_goal_ms: self.latency_goal.as_secs_f64() * 1e3,
                max_io_read: p.max_io_read,
                max_io_write: p.max_io_write,
                flush_debt: p.flush_debt(),
                flush_byte_ns: p.flush_byte_ns,
            }),
            cases: rows,
            writer_alone: alone_rows,
            targets,
        })
    }

    /// Calibrates a scratch file on the loop file system (removed afterwards) with the latency
    /// goal, as `tailbound calibrate FILE --latency-goal GOAL --max-size 16MiB` would.
    fn calibrate(&self, fs: &LoopFs) -> Result<tailbound::sched::DeviceProfile, String> {
        use tailbound::sched::calibrate::{calibrate, CalibrateOptions, SIZES_DEFAULT};
        let path = fs.mount_point().join("calibrate.tmp");
        let opts = CalibrateOptions {
            latency_goal: self.latency_goal,
            sizes: SIZES_DEFAULT
                .into_iter()
                .filter(|&s| s <= CALIBRATE_MAX_SIZE)
                .collect(),
            samples: 5,
            create_bytes: 4 * CALIBRATE_MAX_SIZE,
            ..CalibrateOptions::new(&path)
        };
        calibrate(&opts, |_| {})
            .map(|c| c.profile)
            .map_err(|e| format!("calibrating {}: {e}", path.display()))
    }

    fn run_kernel_case(
        &self,
        fs: &LoopFs,
        device: &str,
        src: &Path,
        sched: KernelSched,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        let exe = self.child_exe.as_ref().ok_or("no tailbound binary")?;
        let _sched = SchedulerGuard::set(device, sched).map_err(|e| e.to_string())?;
        let work = CaseDir::create(fs.mount_point())?;
        let copy_dir = work.0.join("copy");
        std::fs::create_dir(&copy_dir)
            .map_err(|e| format!("creating {}: {e}", copy_dir.display()))?;
        let spec = CopySpec {
            src: src.to_path_buf(),
            dst_dir: copy_dir,
            chunk_bytes: COPY_CHUNK_BYTES,
        };
        let mut copy = TenantProcess::spawn(exe, &spec.args(), "copy")?;
        copy.wait_ready()?;
        let lines = copy.take_lines().ok_or("the copy's output is gone")?;
        let reader = std::thread::spawn(move || {
            let mut samples = Vec::new();
            for line in lines {
                let Ok(line) = line else { break };
                if line == DONE {
                    break;
                }
                if let Some(s) = parse_copied(&line) {
                    samples.push(s);
                }
            }
            samples
        });
        copy.send(GO)?;
        let go = monotonic_now();
        let alone_end = go.plus(self.copy_alone);
        let mut copies = [copy];
        sleep_watching(alone_end, &self.interrupted, &mut copies)?;
        let [copy] = copies;
        let result = self.kernel_writer(&work, rate)?;
        // The copy runs alone again as long, so its speed alone is measured on both sides of
        // the writer's run (a shared disk drifts).
        let after_end = monotonic_now().plus(self.copy_alone);
        let mut copies = [copy];
        let watched = match &result {
            Ok(_) => sleep_watching(after_end, &self.interrupted, &mut copies),
            Err(_) => Ok(()),
        };
        let [mut copy] = copies;
        let stopped_early = copy.exited();
        copy.stop();
        let samples = reader
            .join()
            .map_err(|_| "the copy's reader panicked".to_string())?;
        if stopped_early {
            return Err(copy.failure("ended while the writer ran"));
        }
        watched?;
        copy.wait_exit()?;
        let (hist, w0, w1) = result?;
        let (alone, under) = copy_rates(&samples, go, alone_end, w0, w1, self.copy_alone);
        Ok(PriorityRow::from_histogram(
            "kernel",
            sched.name().into(),
            rate,
            &hist,
            under,
            alone,
        ))
    }

    /// The kernel cases' writer, in `work/log`, on a thread of its own (its I/O priority stays
    /// with it). The outer error is the set-up's, the inner the writer's.
    fn kernel_writer(&self, work: &CaseDir, rate: Rate) -> Result<WriterResult, String> {
        let log_dir = work.0.join("log");
        std::fs::create_dir(&log_dir)
            .map_err(|e| format!("creating {}: {e}", log_dir.display()))?;
        let writer = Writer {
            dir: log_dir,
            writes: self.writes,
            rate,
            interrupted: self.interrupted.clone(),
        };
        std::thread::spawn(move || writer.run_kernel())
            .join()
            .map_err(|_| "the writer thread panicked".to_string())
    }

    /// The writer of the kernel cases alone, with no copy, on the loop device under `none`.
    fn run_kernel_alone(
        &self,
        fs: &LoopFs,
        device: &str,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        let _sched = SchedulerGuard::set(device, KernelSched::None).map_err(|e| e.to_string())?;
        let work = CaseDir::create(fs.mount_point())?;
        let (hist, _, _) = self.kernel_writer(&work, rate)??;
        Ok(PriorityRow {
            with_copy: false,
            ..PriorityRow::from_histogram(
                "kernel",
                KernelSched::None.name().into(),
                rate,
                &hist,
                0.0,
                0.0,
            )
        })
    }
}

/// A tbfs case's pool, dropped in this order: the file system, then its directory on the loop
/// file system, then the loop device's scheduler setting.
struct TbfsPool {
    fs: tailbound::tbfs::Fs,
    _work: CaseDir,
    _sched: SchedulerGuard,
}

impl PriorityBench {
    /// A fresh pool for a tbfs case: a pool file on the loop file system (the loop device's
    /// scheduler set to `none`, so only tailbound's orders the I/O) behind tailbound's scheduler
    /// with `policy` and depth 1, flushing every log (so a sync is durable on return).
    fn tbfs_pool(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
    ) -> Result<TbfsPool, String> {
        let sched = SchedulerGuard::set(device, KernelSched::None).map_err(|e| e.to_string())?;
        let work = CaseDir::create(fs.mount_point())?;
        let pool = work.0.join("pool.tbfs");
        let file_dev = super::pool::create_file_pool(&pool, 2 * self.copy_bytes + (512 << 20))
            .map_err(|e| format!("creating the pool {}: {e}", pool.display()))?;
        // One request in the device at a time (BFQ's strict_guarantees): an RT request waits for
        // at most one piece of the copy, or one flush of the debt. The copy is one thread doing
        // one request at a time, so it loses nothing by it.
        let cfg = tailbound::sched::Config {
            policy,
            depth: 1,
            ..tailbound::sched::Config::with_profile(profile.clone())
        };
        // Every log flushed (`every-log`): a sync returns once its append is durable on the
        // device, as the kernel side's `fdatasync` on ext4 does. Under the default barrier a
        // sync's data-only log is written but left in the device's cache until the next
        // checkpoint, which a power cut could lose.
        let (_, tbfs) = super::pool::format_behind_scheduler(
            file_dev,
            cfg,
            tailbound::tbfs::Barrier::EveryLog,
        )?;
        Ok(TbfsPool {
            fs: tbfs,
            _work: work,
            _sched: sched,
        })
    }

    /// The writer of the tbfs cases alone, with no copy, in a fresh pool.
    fn run_tbfs_alone(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        let pool = self.tbfs_pool(fs, device, profile, policy)?;
        let (hist, _, _) = self.tbfs_writer(&pool.fs, rate)?;
        Ok(PriorityRow {
            with_copy: false,
            ..PriorityRow::from_histogram("tbfs", policy.name().into(), rate, &hist, 0.0, 0.0)
        })
    }

    /// One tbfs case: a pool as [`PriorityBench::tbfs_pool`] makes it; the copy is a thread at
    /// best-effort level 7 copying a file inside the pool in 1 MiB reads and writes, each write
    /// made durable (`fdatasync`); the writer a thread in the real-time class appending 4 KiB
    /// with `fdatasync`. Both threads' scheduler tenants follow their kernel ioprio.
    fn run_tbfs_case(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        use tailbound::tbfs::OpenFlags;
        let pool = self.tbfs_pool(fs, device, profile, policy)?;
        let tbfs = &pool.fs;
        let chunk = COPY_CHUNK_BYTES as usize;
        let pattern: Vec<u8> = (0..chunk).map(|i| (i % 239) as u8 | 0x40).collect();
        let chunks = (self.copy_bytes / COPY_CHUNK_BYTES).max(1);
        {
            let src = tbfs
                .open_file("/source", OpenFlags::create())
                .map_err(|e| format!("creating the copy's source: {e}"))?;
            for k in 0..chunks {
                src.pwrite(&pattern, k * COPY_CHUNK_BYTES)
                    .map_err(|e| format!("writing the copy's source: {e}"))?;
            }
            src.fsync()
                .map_err(|e| format!("writing the copy's source: {e}"))?;
        }
        let stop = AtomicBool::new(false);
        let (samples, go, alone_end, result) = std::thread::scope(|s| {
            let stop = &stop;
            let copier = s.spawn(move || -> Result<Vec<(u64, u64)>, String> {
                COPY_PRIO
                    .apply_to_current_thread()
                    .map_err(|e| format!("setting the copy's I/O priority: {e}"))?;
                let src = tbfs
                    .open_file("/source", OpenFlags::read_only())
                    .map_err(|e| format!("opening the source: {e}"))?;
                let mut buf = vec![0u8; chunk];
                let mut samples = vec![(monotonic_now().0, 0u64)];
                let mut total = 0u64;
                let mut pass = 0u64;
                'copying: loop {
                    // The previous copy goes before the next starts, so the pool holds the
                    // source and one copy.
                    if pass > 0 {
                        let old = format!("/copy-{}", pass - 1);
                        tbfs.unlink(&old)
                            .map_err(|e| format!("removing {old}: {e}"))?;
                    }
                    let name = format!("/copy-{pass}");
                    let dst = tbfs
                        .open_file(&name, OpenFlags::create())
                        .map_err(|e| format!("creating {name}: {e}"))?;
                    for k in 0..chunks {
                        if stop.load(Ordering::Relaxed) {
                            break 'copying;
                        }
                        let at = k * COPY_CHUNK_BYTES;
                        src.pread(&mut buf, at)
                            .and_then(|_| dst.pwrite(&buf, at))
                            .and_then(|_| dst.fdatasync())
                            .map_err(|e| format!("copying at {at}: {e}"))?;
                        total += COPY_CHUNK_BYTES;
                        samples.push((monotonic_now().0, total));
                    }
                    drop(dst);
                    pass += 1;
                }
                Ok(samples)
            });
            let go = monotonic_now();
            let alone_end = go.plus(self.copy_alone);
            while monotonic_now().0 < alone_end.0 && !copier.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let result = if copier.is_finished() {
                Err("the copy ended before the writer started".to_string())
            } else {
                self.tbfs_writer(tbfs, rate)
            };
            // Alone again as long (see the kernel case).
            if result.is_ok() {
                let after_end = monotonic_now().plus(self.copy_alone);
                while monotonic_now().0 < after_end.0
                    && !copier.is_finished()
                    && !interrupted(&self.interrupted)
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            stop.store(true, Ordering::Relaxed);
            let samples = copier
                .join()
                .unwrap_or_else(|_| Err("the copy thread panicked".into()));
            (samples, go, alone_end, result)
        });
        let samples = samples?;
        let (hist, w0, w1) = result?;
        if interrupted(&self.interrupted) {
            return Err("interrupted".into());
        }
        let (alone, under) = copy_rates(&samples, go, alone_end, w0, w1, self.copy_alone);
        Ok(PriorityRow::from_histogram(
            "tbfs",
            policy.name().into(),
            rate,
            &hist,
            under,
            alone,
        ))
    }

    /// The writer of a tbfs case, on the calling thread in the real-time I/O class: `writes`
    /// appends of 4 KiB to `/log`, each followed by `fdatasync`, paced or flat out; the log is
    /// started afresh every [`LOG_BYTES_MAX`].
    fn tbfs_writer(
        &self,
        tbfs: &tailbound::tbfs::Fs,
        rate: Rate,
    ) -> Result<(LatencyHistogram, u64, u64), String> {
        use tailbound::tbfs::OpenFlags;
        let before = Prio::of_current_thread();
        WRITER_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("setting the writer's real-time I/O priority: {e}"))?;
        let outcome = (|| {
            let data = [0x5au8; WRITE_BYTES];
            let open_log = || {
                tbfs.open_file(
                    "/log",
                    OpenFlags {
                        truncate: true,
                        ..OpenFlags::create()
                    },
                )
                .map_err(|e| format!("creating /log: {e}"))
            };
            let mut log = open_log()?;
            timed_appends(self.writes, rate, &self.interrupted, |step| {
                if step == LogStep::NewLog {
                    log = open_log()?;
                    return Ok(());
                }
                log.append(&data)
                    .and_then(|_| log.fdatasync())
                    .map_err(|e| format!("appending to /log: {e}"))
            })
        })();
        // The calling thread goes back to the priority it had.
        let _ = before.apply_to_current_thread();
        outcome
    }
}

/// A directory for one case's files on the loop file system, removed with them when dropped.
struct CaseDir(PathBuf);

impl CaseDir {
    fn create(parent: &Path) -> Result<CaseDir, String> {
        let dir = tempfile::Builder::new()
            .prefix("case-")
            .tempdir_in(parent)
            .map_err(|e| format!("creating a case directory in {}: {e}", parent.display()))?;
        Ok(CaseDir(dir.keep()))
    }
}

impl Drop for CaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the copy's source: `bytes` of a non-zero pattern with `O_DIRECT`, then `fsync`.
fn write_source(path: &Path, bytes: u64) -> Result<(), String> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(O_DIRECT)
        .open(path)
        .map_err(|e| format!("creating {} O_DIRECT: {e}", path.display()))?;
    let chunk = 8 * MIB;
    let mut buf = AlignedBuf::zeroed(chunk as usize, 4096);
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 239) as u8 | 0x40;
    }
    let bytes = bytes / MIB * MIB;
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(chunk) as usize;
        file.write_all_at(&buf.as_slice()[..n], at)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        at += n as u64;
    }
    file.sync_all()
        .map_err(|e| format!("fsync {}: {e}", path.display()))
}

/// A writer's latencies and its first write's start and last write's end (`CLOCK_MONOTONIC` ns).
type WriterResult = Result<(LatencyHistogram, u64, u64), String>;

/// The high-priority writer: `writes` appends of 4 KiB with `O_SYNC`, paced or flat out.
struct Writer {
    dir: PathBuf,
    writes: u64,
    rate: Rate,
    interrupted: Option<Arc<AtomicBool>>,
}

impl Writer {
    fn open_log(&self, n: u64) -> Result<(File, PathBuf), String> {
        let path = self.dir.join(format!("log-{n}"));
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .custom_flags(libc::O_SYNC)
            .open(&path)
            .map_err(|e| format!("creating {} O_SYNC: {e}", path.display()))?;
        Ok((file, path))
    }

    /// On the calling thread, in the real-time I/O class: returns the latencies and the first
    /// write's start and the last write's end (`CLOCK_MONOTONIC` ns).
    fn run_kernel(self) -> Result<(LatencyHistogram, u64, u64), String> {
        WRITER_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("setting the writer's real-time I/O priority: {e}"))?;
        let data = [0x5au8; WRITE_BYTES];
        let mut log_no = 0;
        let (mut log, mut log_path) = self.open_log(log_no)?;
        timed_appends(self.writes, self.rate, &self.interrupted, |step| {
            if step == LogStep::NewLog {
                std::fs::remove_file(&log_path)
                    .map_err(|e| format!("removing {}: {e}", log_path.display()))?;
                log_no += 1;
                (log, log_path) = self.open_log(log_no)?;
                return Ok(());
            }
            log.write_all(&data)
                .map_err(|e| format!("writing {}: {e}", log_path.display()))
        })
    }
}

/// What the writer's loop asks of its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogStep {
    /// Start a new log (every [`LOG_BYTES_MAX`]; not timed).
    NewLog,
    /// Append [`WRITE_BYTES`] synchronously (timed).
    Append,
}

/// The writer's loop: `writes` timed appends, paced at `rate` or flat out, with a new log every
/// [`LOG_BYTES_MAX`]; `step` does each. Returns the latencies and the first write's start and the
/// last write's end (`CLOCK_MONOTONIC` ns).
fn timed_appends(
    writes: u64,
    rate: Rate,
    interrupt: &Option<Arc<AtomicBool>>,
    mut step: impl FnMut(LogStep) -> Result<(), String>,
) -> Result<(LatencyHistogram, u64, u64), String> {
    let mut hist = LatencyHistogram::new();
    let mut log_bytes = 0u64;
    let mut timer = match rate {
        Rate::Paced(n) => Some(PeriodicTimer::new(Duration::from_secs_f64(
            1.0 / f64::from(n),
        ))),
        Rate::FlatOut => None,
    };
    let first = monotonic_now().0;
    for i in 0..writes {
        if i % 64 == 0 && interrupted(interrupt) {
            return Err("interrupted".into());
        }
        if log_bytes >= LOG_BYTES_MAX {
            step(LogStep::NewLog)?;
            log_bytes = 0;
        }
        if let Some(timer) = timer.as_mut() {
            timer.skip_missed();
            timer
                .wait()
                .map_err(|e| format!("waiting for the timer: {e}"))?;
        }
        let start = Instant::now();
        step(LogStep::Append)?;
        hist.record(start.elapsed());
        log_bytes += WRITE_BYTES as u64;
    }
    Ok((hist, first, monotonic_now().0))
}

/// The copy's throughput alone (from `go` to `alone_end`, and for `alone_after` after the
/// writer's run) and under the writer (over the writer's run `w0..w1`), from its `(time, bytes
/// copied)` samples, in MB/s.
fn copy_rates(
    samples: &[(u64, u64)],
    go: MonoNanos,
    alone_end: MonoNanos,
    w0: u64,
    w1: u64,
    alone_after: Duration,
) -> (f64, f64) {
    let after_ns = u64::try_from(alone_after.as_nanos()).unwrap_or(u64::MAX);
    // The window after the writer ends where the samples end, should the copy stop early.
    let after_end = samples
        .last()
        .map_or(w1, |&(t, _)| t.min(w1.saturating_add(after_ns)));
    let alone_ns = alone_end.0.saturating_sub(go.0) + after_end.saturating_sub(w1);
    let alone = (growth_in_window(samples, go.0, alone_end.0)
        + growth_in_window(samples, w1, after_end))
        / MIB as f64
        / Duration::from_nanos(alone_ns.max(1)).as_secs_f64();
    let under = growth_in_window(samples, w0, w1)
        / MIB as f64
        / Duration::from_nanos(w1.saturating_sub(w0)).as_secs_f64();
    (alone, under)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!(Rate::parse("111"), Some(Rate::Paced(111)));
        assert_eq!(Rate::parse("111/s"), Some(Rate::Paced(111)));
        assert_eq!(Rate::parse("flat-out"), Some(Rate::FlatOut));
        assert_eq!(Rate::parse("0"), None);
        assert_eq!(Rate::parse("fast"), None);
        assert_eq!(Rate::Paced(111).name(), "111/s");
        assert_eq!(Rate::FlatOut.name(), "flat-out");
    }

    #[test]
    fn copy_progress_lines_parse_strictly() {
        assert_eq!(parse_copied("c 10 4096"), Some((10, 4096)));
        assert_eq!(parse_copied("c 10"), None);
        assert_eq!(parse_copied("c 10 4096 9"), None);
        assert_eq!(parse_copied("x 10 4096"), None);
    }

    #[test]
    fn bad_parameters_are_refused_before_anything_runs() {
        let mut b = PriorityBench::quick(PathBuf::new());
        assert!(b.validate().unwrap_err().to_string().contains("binary"));
        b.child_exe = Some(PathBuf::from("/bin/true"));
        assert!(b.validate().is_ok());
        b.writes = 0;
        assert!(b.validate().is_err());
        b.writes = 1;
        b.rates.clear();
        assert!(b.validate().is_err());
        assert_eq!(PriorityBench::full(PathBuf::new()).case_count(), 10);
        assert_eq!(PriorityBench::full(PathBuf::new()).writes, 1_000_000);
    }

    #[test]
    fn the_writer_runs_alone_on_each_side_that_is_measured() {
        let mut b = PriorityBench::quick(PathBuf::new());
        // Kernel path and tbfs's default policy, at both rates.
        assert_eq!(b.alone_count(), 4);
        let with = b.estimate();
        b.writer_alone = false;
        assert_eq!(b.alone_count(), 0);
        // 200 writes at 111/s and flat out (counted at 1 ms each), on two sides.
        let alone = Duration::from_secs_f64(200.0 / 111.0) + Duration::from_millis(200);
        let diff = with - b.estimate();
        assert!(
            diff.abs_diff(2 * alone) < Duration::from_millis(1),
            "{diff:?}"
        );
        b.writer_alone = true;
        b.schedulers.clear();
        b.tbfs_policies = vec![Policy::Default, Policy::Fifo];
        assert_eq!(b.alone_count(), 4);
    }

    fn row(system: &'static str, sched: &str, max_us: f64, p9999: f64, kept: f64) -> PriorityRow {
        PriorityRow {
            system,
            scheduler: sched.into(),
            rate: "111/s".into(),
            writes: 100,
            min_us: 1.0,
            p50_us: 2.0,
            p99_us: 3.0,
            p999_us: 4.0,
            p9999_us: p9999,
            p999999_us: p9999,
            max_us,
            background_mb_per_s: 100.0 * kept,
            background_alone_mb_per_s: 100.0,
            box_stats: None,
            with_copy: true,
        }
    }

    fn alone(system: &'static str, max_us: f64, p9999: f64) -> PriorityRow {
        PriorityRow {
            background_mb_per_s: 0.0,
            background_alone_mb_per_s: 0.0,
            with_copy: false,
            ..row(system, "none", max_us, p9999, 0.0)
        }
    }

    #[test]
    fn targets_compare_tailbound_with_the_best_kernel_scheduler() {
        let kernel = [
            row("kernel", "bfq", 70_000.0, 9_000.0, 0.5),
            row("kernel", "none", 900_000.0, 9_000.0, 0.9),
        ];
        let checks = check_targets(&kernel, &[]);
        assert!(checks.iter().all(|c| !c.met), "{checks:?}");
        assert!(checks[0].measured.contains("70,000"), "{checks:?}");
        let mut rows = kernel.to_vec();
        rows.push(row("tbfs", "default", 6_000.0, 4_000.0, 0.85));
        let checks = check_targets(&rows, &[]);
        assert!(checks.iter().all(|c| c.met), "{checks:?}");
        assert!(
            checks[0].measured.contains("target is 7,000 us"),
            "{checks:?}"
        );
        assert!(!checks[0].measured.contains("alone"), "{checks:?}");
        // The writer alone below both latency targets: said, and the checks unchanged.
        let quiet = [
            alone("kernel", 3_000.0, 2_000.0),
            alone("tbfs", 4_000.0, 2_500.0),
        ];
        let checks = check_targets(&rows, &quiet);
        assert!(checks.iter().all(|c| c.met), "{checks:?}");
        assert!(
            checks[0]
                .measured
                .ends_with("the writer alone, no copy: at best 3,000 us (kernel none 111/s)"),
            "{checks:?}"
        );
        assert!(
            checks[1].measured.contains("at best 2,000 us"),
            "{checks:?}"
        );
        // A device whose lone writer already had more than the target: said as such.
        let slow = [
            alone("kernel", 9_000.0, 6_000.0),
            alone("tbfs", 8_000.0, 7_000.0),
        ];
        let checks = check_targets(&rows, &slow);
        assert!(
            checks[0].measured.contains(
                "at best 8,000 us (tbfs none 111/s), above the target: the device alone missed it"
            ),
            "{checks:?}"
        );
        assert!(
            checks[1]
                .measured
                .contains("at best 6,000 us (kernel none 111/s), above"),
            "{checks:?}"
        );
        rows.push(row("tbfs", "priority", 8_000.0, 6_000.0, 0.7));
        let checks = check_targets(&rows, &[]);
        assert!(checks.iter().all(|c| !c.met), "{checks:?}");
        let report = PriorityReport {
            experiment: "priority",
            write_bytes: 4096,
            copy_mb: 64,
            tbfs_profile: Some(TbfsProfile {
                latency_goal_ms: 5.0,
                max_io_read: 1 << 20,
                max_io_write: 1 << 20,
                flush_debt: Some(900 << 10),
                flush_byte_ns: 1.7,
            }),
            cases: rows,
            writer_alone: quiet.to_vec(),
            targets: checks,
        };
        let md = report.to_markdown();
        let (_, alone_part) = md.split_once("The writer alone, no copy").expect(&md);
        let alone_table: Vec<&str> = alone_part
            .lines()
            .take_while(|l| !l.starts_with("tbfs's scheduler"))
            .filter(|l| l.starts_with("| kernel") || l.starts_with("| tbfs"))
            .collect();
        assert_eq!(alone_table.len(), 2, "{md}");
        assert!(
            alone_table[1].contains("4,000") && !alone_table[1].contains('%'),
            "{md}"
        );
        assert_eq!(report.box_series().len(), 0);
        assert!(md.contains("| kernel | bfq "), "{md}");
        assert!(md.contains("70,000"), "{md}");
        assert!(md.contains("| NO "), "{md}");
        assert!(
            md.contains(
                "for a 5.0 ms goal: reads split to 1 MiB, writes to 1 MiB, a flush after 900 KiB"
            ),
            "{md}"
        );
    }

    #[test]
    fn the_copy_alone_is_measured_before_and_after_the_writer() {
        // 100 MiB/s for 2 s alone, 50 MiB/s for 4 s under the writer, 200 MiB/s for 2 s alone.
        const S: u64 = 1_000_000_000;
        let mut samples = Vec::new();
        let mut bytes = 0;
        for ms in (0..=8000u64).step_by(10) {
            samples.push((ms * 1_000_000, bytes));
            let rate_mib = match ms {
                0..2000 => 100,
                2000..6000 => 50,
                _ => 200,
            };
            bytes += rate_mib * MIB / 100;
        }
        let (alone, under) = copy_rates(
            &samples,
            MonoNanos(0),
            MonoNanos(2 * S),
            2 * S,
            6 * S,
            Duration::from_secs(2),
        );
        assert!((alone - 150.0).abs() < 1.0, "alone {alone}");
        assert!((under - 50.0).abs() < 1.0, "under {under}");
        // A copy that stopped 1 s after the writer: only that second counts.
        let cut: Vec<_> = samples
            .iter()
            .copied()
            .filter(|&(t, _)| t <= 7 * S)
            .collect();
        let (alone, _) = copy_rates(
            &cut,
            MonoNanos(0),
            MonoNanos(2 * S),
            2 * S,
            6 * S,
            Duration::from_secs(2),
        );
        assert!((alone - 400.0 / 3.0).abs() < 1.0, "alone {alone}");
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let r = PriorityRow::from_histogram("kernel", "none".into(), Rate::FlatOut, &h, 1.0, 2.0);
        assert_eq!(r.writes, 1000);
        assert!((r.p50_us - 500.0).abs() < 1.0, "{r:?}");
        assert!((r.max_us - 1000.0).abs() < 1.0, "{r:?}");
        assert!(r.p999999_us <= r.max_us && r.p9999_us <= r.p999999_us);
        assert!((r.copy_kept() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_copy_copies_whole_passes_and_reports_its_progress() {
        let dir =
            tempfile::tempdir_in(crate::experiments::fairness::default_scratch_parent()).unwrap();
        let src = dir.path().join("src");
        if let Err(e) = write_source(&src, 2 * MIB) {
            // A file system without O_DIRECT (tmpfs) cannot run the copy; nothing else may fail.
            assert!(
                e.contains("O_DIRECT") || e.contains("Invalid argument"),
                "{e}"
            );
            return;
        }
        let dst_dir = dir.path().join("dst");
        std::fs::create_dir(&dst_dir).unwrap();
        let spec = CopySpec {
            src: src.clone(),
            dst_dir: dst_dir.clone(),
            chunk_bytes: 512 << 10,
        };
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let mut out = Vec::new();
            let r = spec.run(std::io::BufReader::new(reader), &mut out);
            (r, out)
        });
        writeln!(writer, "{GO}").unwrap();
        // The passes in `dst_dir`, by number (at most two exist at a time).
        let passes = |dir: &Path| -> Vec<u64> {
            let mut n: Vec<u64> = std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("copy-").and_then(|n| n.parse().ok())
                })
                .collect();
            n.sort_unstable();
            n
        };
        // Stop once a second pass has begun, so one whole copy was made.
        while !handle.is_finished() && passes(&dst_dir).iter().all(|&n| n == 0) {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(writer);
        let (result, out) = handle.join().unwrap();
        result.unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.first(), Some(&READY));
        assert_eq!(lines.last(), Some(&DONE));
        let samples: Vec<(u64, u64)> = lines[1..lines.len() - 1]
            .iter()
            .map(|l| parse_copied(l).unwrap())
            .collect();
        assert_eq!(samples[0].1, 0);
        assert!(samples
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[1].1 == w[0].1 + (512 << 10)));
        assert!(samples.last().unwrap().1 >= 2 * MIB);
        // A pass is removed once the next has begun: one or two remain, the older one whole.
        let left = passes(&dst_dir);
        assert!(
            !left.is_empty() && left.len() <= 2 && left[0] >= 1,
            "{left:?}"
        );
        let src_bytes = std::fs::read(&src).unwrap();
        for (i, n) in left.iter().enumerate() {
            let copy = std::fs::read(dst_dir.join(format!("copy-{n}"))).unwrap();
            if i + 1 < left.len() {
                assert_eq!(copy, src_bytes, "copy-{n} is whole");
            } else {
                assert!(copy.len() <= src_bytes.len());
                assert_eq!(copy[..], src_bytes[..copy.len()], "copy-{n} is a prefix");
            }
        }
    }
}
