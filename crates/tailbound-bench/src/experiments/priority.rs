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
//!   at its lowest level (`ionice -c2 -n7`), copying the source file to a new file again and again.
//!   With `--copy buffered` (the default, the seed's load) it runs coreutils' `cp`, which inherits
//!   that priority: its writes go through the page cache, and writeback and ext4's journal
//!   commits (the default `data=ordered`) carry them to the disk outside its priority, as they
//!   did in the seed. With `--copy direct` it copies with `O_DIRECT` reads and writes of 1 MiB, so
//!   its I/O reaches the block layer with its own priority and its throughput is the disk's. It
//!   runs alone first (its throughput alone), then beside the writer (its throughput under the
//!   writer).
//!
//! MB are 2^20 bytes. Latencies are in microseconds.

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::experiments::blockdev::{BlockDevError, KernelSched, SchedulerGuard};
use crate::experiments::loopfs::LoopFs;
use crate::experiments::tenants::{child_wait_go, sleep_watching, TenantProcess, DONE, GO, READY};
use crate::progress::Progress;
use tailbound::sched::{Class, Policy, Prio};
use tailbound::sys::file::{AlignedBuf, O_DIRECT};
use tailbound::sys::time::monotonic_now;

mod io;
mod model;
pub(crate) mod phases;
mod report;
mod served;
mod settle;
mod tbfs;
#[cfg(test)]
mod tests;

use io::{copy_rates, timed_appends, write_source, CaseDir, LogStep, Writer, WriterResult};
use model::MIB;
pub use model::{
    PriorityRow, Rate, COPY_KEPT_MIN, ISOLATION_MAX, ISOLATION_P999, LOG_BYTES_MAX, WRITER_PRIO,
    WRITE_BYTES,
};
pub use report::{check_targets, PriorityReport, TbfsProfile};
pub use served::{ServedCopySpec, ServedWriterSpec};
use settle::settled_case;

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
/// Default latency goal of the tbfs cases' calibration: the p99.99 target, so no piece the
/// scheduler dispatches, and no flush it makes for its debt, takes longer than that.
pub const LATENCY_GOAL_DEFAULT: Duration = Duration::from_millis(5);
/// Largest size the tbfs cases' calibration times (the goal is a few milliseconds).
const CALIBRATE_MAX_SIZE: u64 = 16 << 20;
/// The copy's I/O priority: best effort, level 7 (`ionice -c2 -n7`).
pub const COPY_PRIO: Prio = Prio {
    class: Class::Be,
    level: 7,
};

/// How the background copy writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyMode {
    /// coreutils' `cp` through the page cache on the kernel side; tbfs's buffered writes with no
    /// sync on the tbfs side.
    #[default]
    Buffered,
    /// `O_DIRECT` 1 MiB reads and writes on the kernel side; each 1 MiB write followed by
    /// `fdatasync` on the tbfs side.
    Direct,
}

impl CopyMode {
    pub fn name(self) -> &'static str {
        match self {
            CopyMode::Buffered => "buffered",
            CopyMode::Direct => "direct",
        }
    }

    /// `buffered` or `direct`.
    pub fn parse(text: &str) -> Option<CopyMode> {
        [CopyMode::Buffered, CopyMode::Direct]
            .into_iter()
            .find(|m| m.name() == text)
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
    pub mode: CopyMode,
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
            "--copy".into(),
            self.mode.name().into(),
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
        if self.mode == CopyMode::Buffered {
            return self.run_cp(input, out);
        }
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

impl CopySpec {
    /// The buffered copy: `cp SRC DIR/copy-N` again and again, each pass removing the copy
    /// before, with `c TIME_NS TOTAL_BYTES` every [`CP_POLL`] from the bytes of the passes done
    /// and the size of the file `cp` is writing. `cp` is forked from this thread, so it has the
    /// copy's I/O priority.
    fn run_cp(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        let src_len = std::fs::metadata(&self.src)
            .map_err(|e| format!("stat {}: {e}", self.src.display()))?
            .len();
        if src_len == 0 {
            return Err(format!("{} is empty", self.src.display()));
        }
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(());
        };
        say(out, &format!("{COPIED} {} 0", monotonic_now().0))?;
        let mut done = 0u64;
        let mut pass = 0u64;
        let mut previous: Option<PathBuf> = None;
        while !stop.load(Ordering::Relaxed) {
            let dst_path = self.dst_dir.join(format!("copy-{pass}"));
            if let Some(p) = previous.take() {
                std::fs::remove_file(&p).map_err(|e| format!("removing {}: {e}", p.display()))?;
            }
            let mut cp = std::process::Command::new("cp")
                .arg("--")
                .arg(&self.src)
                .arg(&dst_path)
                .stdin(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("starting cp (coreutils): {e}"))?;
            let status = loop {
                if stop.load(Ordering::Relaxed) {
                    let _ = cp.kill();
                    let _ = cp.wait();
                    return say(out, DONE);
                }
                if let Some(status) = cp.try_wait().map_err(|e| format!("waiting for cp: {e}"))? {
                    break status;
                }
                let writing = std::fs::metadata(&dst_path).map_or(0, |m| m.len());
                say(
                    out,
                    &format!("{COPIED} {} {}", monotonic_now().0, done + writing),
                )?;
                std::thread::sleep(CP_POLL);
            };
            if !status.success() {
                return Err(format!(
                    "cp {} {} failed: {status}",
                    self.src.display(),
                    dst_path.display()
                ));
            }
            done += src_len;
            say(out, &format!("{COPIED} {} {done}", monotonic_now().0))?;
            previous = Some(dst_path);
            pass += 1;
        }
        say(out, DONE)
    }
}

/// Writes one line of the copy's report to the parent, at once.
fn say(out: &mut dyn Write, line: &str) -> Result<(), String> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("reporting: {e}"))
}

/// How often the buffered copy reports its progress.
pub const CP_POLL: Duration = Duration::from_millis(20);

impl PriorityBench {
    /// After the writer's run (`writer_ok`: it ran to its end), lets the copy run alone again
    /// as long as before, stops it and returns its progress; an error if it ended early.
    pub(crate) fn copy_after(
        &self,
        copy: TenantProcess,
        reader: CopyProgress,
        writer_ok: bool,
    ) -> Result<Vec<(u64, u64)>, String> {
        let after_end = monotonic_now().plus(self.copy_alone);
        let mut copies = [copy];
        let watched = if writer_ok {
            sleep_watching(after_end, &self.interrupted, &mut copies)
        } else {
            Ok(())
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
        Ok(samples)
    }
}

/// The copy's progress lines ([`parse_copied`]), collected until it is done.
pub(crate) type CopyProgress = std::thread::JoinHandle<Vec<(u64, u64)>>;

/// Starts the copy process with `args` once it is ready, and a thread that collects its
/// progress lines ([`parse_copied`]) until it says it is done.
pub(crate) fn start_copy(
    exe: &Path,
    args: &[String],
) -> Result<(TenantProcess, CopyProgress), String> {
    let mut copy = TenantProcess::spawn(exe, args, "copy")?;
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
    Ok((copy, reader))
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
    pub copy_mode: CopyMode,
    /// How long the copy runs alone before the writer starts, and again after it ends.
    pub copy_alone: Duration,
    /// The tbfs cases' scheduler uses a profile calibrated on the loop file system at the start
    /// of the run with this latency goal (split sizes and flush debt).
    pub latency_goal: Duration,
    /// Most requests the tbfs cases' scheduler keeps in the device (`--tbfs-depth`; 1, BFQ's
    /// `strict_guarantees`, by default). At 2 or more the copy leaves one slot free while the
    /// writer is active (`sched::Config::rt_window`).
    pub tbfs_depth: usize,
    /// Before the cases, the writer runs alone (no copy) at each rate, on the kernel path (the
    /// loop device under `none`) and in a tbfs pool per policy: what the device gives a lone
    /// writer in this run, the floor under any scheduler's figures.
    pub writer_alone: bool,
    /// The tbfs cases' writer and copy are separate processes, clients of a pool server, each
    /// at its own I/O priority (`--processes`), rather than threads of this process.
    pub processes: bool,
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
            copy_mode: CopyMode::Buffered,
            copy_alone: Duration::from_secs(5),
            latency_goal: LATENCY_GOAL_DEFAULT,
            tbfs_depth: 1,
            writer_alone: true,
            processes: false,
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
        let mut settle = || tailbound::sys::fs::syncfs(fs.mount_point());
        let mut run_case = |case: String,
                            run: &dyn Fn() -> Result<PriorityRow, String>|
         -> Result<(), PriorityError> {
            progress.set_message(case.clone());
            let row = settled_case(&mut settle, run)
                .map_err(|message| PriorityError::Case { case, message })?;
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
                            &|| {
                                if self.processes {
                                    self.run_tbfs_served_alone(&fs, &device, profile, policy, rate)
                                } else {
                                    self.run_tbfs_alone(&fs, &device, profile, policy, rate)
                                }
                            },
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
                        if self.processes {
                            self.run_tbfs_served_case(&fs, &device, profile, policy, rate)
                        } else {
                            self.run_tbfs_case(&fs, &device, profile, policy, rate)
                        }
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
            copy: self.copy_mode.name(),
            processes: self.processes,
            tbfs_profile: profile.map(|p| TbfsProfile {
                latency_goal_ms: self.latency_goal.as_secs_f64() * 1e3,
                depth: self.tbfs_depth,
                max_io_read: p.max_io_read,
                max_io_write: p.max_io_write,
                guard_write: p.guard_piece(tailbound::sched::Op::Write),
                write_io_ns: p.write_io_ns,
                write_byte_ns: p.write_byte_ns,
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
            mode: self.copy_mode,
        };
        let (mut copy, reader) = start_copy(exe, &spec.args())?;
        copy.send(GO)?;
        let go = monotonic_now();
        let alone_end = go.plus(self.copy_alone);
        let mut copies = [copy];
        sleep_watching(alone_end, &self.interrupted, &mut copies)?;
        let [copy] = copies;
        let result = self.kernel_writer(&work, rate)?;
        // The copy runs alone again as long, so its speed alone is measured on both sides of
        // the writer's run (a shared disk drifts).
        let samples = self.copy_after(copy, reader, result.is_ok())?;
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
