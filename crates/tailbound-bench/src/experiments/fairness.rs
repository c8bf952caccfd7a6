//! `tailbound bench fairness` (seed 003): do tenants with weights 2:1, 3:2 and 3:2:2:1 get their
//! weight's share of the disk when each streams huge direct reads (then writes)?
//!
//! Kernel side: a loop device (`losetup --direct-io=on`) over a scratch file on the real disk,
//! filled once so every block is allocated; each tenant owns a region of the raw device and is a
//! separate process (`tailbound bench fairness --child`) streaming `O_DIRECT` requests of one block
//! size (1, 10, 30, 50, 100 MiB) through its region, round and round. Under `bfq` each tenant
//! sits in its own cgroup v1 `blkio` group with `blkio.bfq.weight` = 100 x its weight; under
//! `none` there are no weights to give, so it shows what the disk does on its own.
//!
//! Measurement: every tenant logs the start and end of each request (`CLOCK_MONOTONIC`). All are
//! started together; after a warm-up the window opens, and it closes when the tenants are told to
//! stop, so every tenant is active over the whole window. A tenant's MB/s is its bytes in the
//! window (a request counted in proportion to the part of it inside) over the window's length.
//! The window is longer than `--window` where that would hold only a few of the lightest
//! tenant's blocks ([`window_for`]): the part of a request inside the window is a guess (its
//! bytes spread evenly over its time), and with one or two 100 MiB requests a tenant in the
//! window, the disk's own swings of speed made that guess, not the shares, decide the error.
//! `ratio_error` is the largest relative deviation of any tenant's share of the total from its
//! weight's share: `max_i |s_i/S - w_i/W| / (w_i/W)`. MB are 2^20 bytes.

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::experiments::blockdev::{BlkioCgroup, KernelSched, LoopDevice, SchedulerGuard};
use crate::experiments::tenants::{
    bytes_in_window, child_wait_go, sleep_watching, TenantProcess, DONE, GO, READY,
};
use crate::progress::Progress;
use tailbound::sched::Policy;
use tailbound::sys::file::{AlignedBuf, O_DIRECT};
use tailbound::sys::time::monotonic_now;

mod accounting;
mod counts;
mod ratio;
mod report;
mod row;
mod served;
#[cfg(test)]
mod tests;

pub use accounting::{account, Accounting, Sample, SAMPLE_EVERY, SHIFT_STEP};
pub use counts::WriterCounts;
pub use ratio::ratio_error;
pub use report::{check_targets, weights_label, FairnessReport};
pub use row::{ratio_string, FairnessRow, RATIO_ERROR_MAX, TOTAL_VS_FIFO_MIN};
pub use served::{served_supported, ServedTenantSpec};

const MIB: u64 = 1 << 20;
/// The paper's weight sets.
pub const WEIGHT_SETS: [&[u32]; 3] = [&[2, 1], &[3, 2], &[3, 2, 2, 1]];
/// The paper's block sizes in MiB (Tables 4-8 go from 1 to 100 MB).
pub const BLOCK_MIBS: [u64; 5] = [1, 10, 30, 50, 100];
/// A tenant's region is at least this big, and at least [`REGION_BLOCKS_MIN`] blocks.
pub const REGION_BYTES_FULL: u64 = 1 << 30;
pub const REGION_BYTES_QUICK: u64 = 64 << 20;
pub const REGION_BLOCKS_MIN: u64 = 4;
/// The cgroup weight of one unit of a tenant's weight (BFQ takes 1-1000).
pub const BFQ_WEIGHT_UNIT: u32 = 100;
/// A case's window holds about this many blocks of its lightest tenant (`--min-blocks`).
pub const MIN_BLOCKS_FULL: u32 = 10;
/// ... but is never longer than this.
pub const WINDOW_MAX: Duration = Duration::from_secs(60);

/// The window of a case: at least `window`, and long enough for the lightest tenant to move
/// `min_blocks` blocks at its weight's share of `total_mb_per_s` (the last total measured for
/// the same operation in the run; none yet: `window`), at most [`WINDOW_MAX`] (or `window` if
/// that is longer).
pub fn window_for(
    window: Duration,
    min_blocks: u32,
    block_mib: u64,
    weights: &[u32],
    total_mb_per_s: Option<f64>,
) -> Duration {
    let Some(total) = total_mb_per_s.filter(|t| t.is_finite() && *t > 0.0) else {
        return window;
    };
    let sum: u32 = weights.iter().sum();
    let lightest = weights.iter().copied().min().unwrap_or(1).max(1);
    let share = total * f64::from(lightest) / f64::from(sum.max(1));
    let secs = f64::from(min_blocks) * block_mib as f64 / share;
    let needed = Duration::try_from_secs_f64(secs).unwrap_or(WINDOW_MAX);
    window.max(needed.min(WINDOW_MAX))
}

/// Direct reads or direct writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write,
}

impl IoOp {
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
        }
    }

    pub fn parse(name: &str) -> Option<IoOp> {
        [IoOp::Read, IoOp::Write]
            .into_iter()
            .find(|o| o.name() == name)
    }
}

/// What the tenants' I/O goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// The kernel's block layer with this scheduler on the loop device (weights only under bfq).
    Kernel(KernelSched),
    /// A tbfs pool on the loop device (file backend) behind tailbound's scheduler with this
    /// policy; each tenant a thread with its own scheduler tenant and file.
    Tbfs(Policy),
}

impl System {
    /// The JSON `system`: `tbfs` (policy `fair`), `tbfs-fifo` (the throughput baseline), or the
    /// kernel scheduler's name.
    pub fn name(self) -> &'static str {
        match self {
            System::Kernel(s) => s.name(),
            System::Tbfs(Policy::Fifo) => "tbfs-fifo",
            System::Tbfs(_) => "tbfs",
        }
    }

    pub fn parse(name: &str) -> Option<System> {
        match name {
            "bfq" => Some(System::Kernel(KernelSched::Bfq)),
            "none" => Some(System::Kernel(KernelSched::None)),
            "tbfs" => Some(System::Tbfs(Policy::Fair)),
            "tbfs-fifo" => Some(System::Tbfs(Policy::Fifo)),
            _ => None,
        }
    }
}

/// How long tailbound's `fair` waits for a tenant's next request, as BFQ's `slice_idle` (see
/// [`tailbound::sched::Config::anticipation`]).
pub const TBFS_ANTICIPATION: Duration = Duration::from_millis(8);

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FairnessError {
    #[error("fairness: {0}")]
    Invalid(String),
    #[error("fairness: {0}")]
    Setup(#[from] crate::experiments::blockdev::BlockDevError),
    #[error("fairness case {case}: {message}")]
    Case { case: String, message: String },
}

/// One tenant process: streams `op` requests of `block_bytes` through its region of `device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    pub device: PathBuf,
    pub region_offset: u64,
    pub region_bytes: u64,
    pub op: IoOp,
    pub block_bytes: u64,
}

impl TenantSpec {
    /// The arguments of `tailbound` that run this tenant.
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "fairness".into(),
            "--child".into(),
            "--device".into(),
            self.device.display().to_string(),
            "--region-offset".into(),
            self.region_offset.to_string(),
            "--region-bytes".into(),
            self.region_bytes.to_string(),
            "--op".into(),
            self.op.name().into(),
            "--block-bytes".into(),
            self.block_bytes.to_string(),
        ]
    }

    /// The child's work: opens the device `O_DIRECT`, prints `ready`, waits for `go` on `input`,
    /// streams requests until `stop`, then prints one `op START END BYTES` line per request and
    /// `done` on `out`.
    pub fn run(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        let blocks = self.region_bytes / self.block_bytes.max(1);
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(4096) || blocks == 0 {
            return Err(format!(
                "a region of {} bytes does not hold a whole 4 KiB-aligned block of {} bytes",
                self.region_bytes, self.block_bytes
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(self.op == IoOp::Write)
            .custom_flags(O_DIRECT)
            .open(&self.device)
            .map_err(|e| format!("opening {} O_DIRECT: {e}", self.device.display()))?;
        let mut buf = AlignedBuf::zeroed(self.block_bytes as usize, 4096);
        for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 241) as u8 | 0x80;
        }
        let say = |out: &mut dyn Write, line: &str| {
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("reporting: {e}"))
        };
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(()); // the parent went away before the start
        };
        let mut ops: Vec<(u64, u64, u64)> = Vec::new();
        let mut k = 0;
        while !stop.load(Ordering::Relaxed) {
            let at = self.region_offset + (k % blocks) * self.block_bytes;
            let start = monotonic_now().0;
            match self.op {
                IoOp::Read => file.read_exact_at(buf.as_mut_slice(), at),
                IoOp::Write => file.write_all_at(buf.as_slice(), at),
            }
            .map_err(|e| {
                format!(
                    "{} of {} bytes at {at} on {}: {e}",
                    self.op.name(),
                    self.block_bytes,
                    self.device.display()
                )
            })?;
            ops.push((start, monotonic_now().0, self.block_bytes));
            k += 1;
        }
        let mut text = String::with_capacity(ops.len() * 40);
        for (start, end, bytes) in &ops {
            text.push_str(&format!("op {start} {end} {bytes}\n"));
        }
        text.push_str(DONE);
        say(out, &text)
    }
}

/// Parses a child's `op START END BYTES` lines.
pub fn parse_ops(lines: &[String]) -> Result<Vec<(u64, u64, u64)>, String> {
    lines
        .iter()
        .map(|line| {
            let mut words = line.split_whitespace();
            let tag = words.next();
            let nums: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
            match (tag, nums.as_slice()) {
                (Some("op"), &[start, end, bytes]) => Ok((start, end, bytes)),
                _ => Err(format!("unexpected line from a tenant: {line:?}")),
            }
        })
        .collect()
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct FairnessBench {
    /// Where the loop device's scratch file goes (on the disk to measure, not a tmpfs).
    pub scratch_parent: PathBuf,
    pub systems: Vec<System>,
    pub weight_sets: Vec<Vec<u32>>,
    pub ops: Vec<IoOp>,
    pub block_mibs: Vec<u64>,
    /// Each tenant's region: at least this, and at least [`REGION_BLOCKS_MIN`] of the largest block.
    pub region_bytes_min: u64,
    /// From the start until the window opens.
    pub warmup: Duration,
    /// The shortest measurement window.
    pub window: Duration,
    /// Longer windows hold about this many blocks of the lightest tenant ([`window_for`]; 0:
    /// always `window`).
    pub min_blocks: u32,
    /// The `tailbound` binary the tenants run as.
    pub child_exe: Option<PathBuf>,
    /// The tbfs cases' tenants are separate processes in blkio cgroups of their weights,
    /// clients of a pool server (`--processes`), rather than threads with tenants of their own.
    pub processes: bool,
    /// Set by SIGINT/SIGTERM: the run stops and cleans up.
    pub interrupted: Option<Arc<AtomicBool>>,
    pub progress: bool,
}

impl FairnessBench {
    /// Every weight set, both operations, every block size, under bfq and none; a 4 s window
    /// after 1 s of warm-up per case.
    pub fn full(scratch_parent: PathBuf) -> FairnessBench {
        FairnessBench {
            scratch_parent,
            systems: vec![
                System::Tbfs(Policy::Fair),
                System::Tbfs(Policy::Fifo),
                System::Kernel(KernelSched::Bfq),
                System::Kernel(KernelSched::None),
            ],
            weight_sets: WEIGHT_SETS.iter().map(|w| w.to_vec()).collect(),
            ops: vec![IoOp::Read, IoOp::Write],
            block_mibs: BLOCK_MIBS.to_vec(),
            region_bytes_min: REGION_BYTES_FULL,
            warmup: Duration::from_secs(1),
            window: Duration::from_secs(4),
            min_blocks: MIN_BLOCKS_FULL,
            child_exe: None,
            processes: false,
            interrupted: None,
            progress: true,
        }
    }

    /// `--quick`: 2:1 at 1 and 10 MiB, reads and writes, 0.3 s warm-up and a 1 s window (not
    /// lengthened).
    pub fn quick(scratch_parent: PathBuf) -> FairnessBench {
        FairnessBench {
            weight_sets: vec![vec![2, 1]],
            block_mibs: vec![1, 10],
            region_bytes_min: REGION_BYTES_QUICK,
            warmup: Duration::from_millis(300),
            window: Duration::from_secs(1),
            min_blocks: 0,
            ..FairnessBench::full(scratch_parent)
        }
    }

    /// Each tenant's region, in bytes.
    pub fn region_bytes(&self) -> u64 {
        let largest = self.block_mibs.iter().copied().max().unwrap_or(1) * MIB;
        self.region_bytes_min.max(largest * REGION_BLOCKS_MIN)
    }

    /// The loop device's size: one region per tenant of the largest weight set.
    pub fn device_bytes(&self) -> u64 {
        let tenants = self.weight_sets.iter().map(Vec::len).max().unwrap_or(0) as u64;
        tenants * self.region_bytes()
    }

    pub fn case_count(&self) -> usize {
        self.systems.len() * self.weight_sets.len() * self.ops.len() * self.block_mibs.len()
    }

    /// Checks the parameters before anything is created.
    pub fn validate(&self) -> Result<(), FairnessError> {
        let invalid = |m: &str| Err(FairnessError::Invalid(m.to_string()));
        if self.case_count() == 0 {
            return invalid("no cases (systems, weights, ops and block sizes must be non-empty)");
        }
        for set in &self.weight_sets {
            if set.len() < 2 {
                return invalid("a weight set needs at least two tenants");
            }
            if set.iter().any(|&w| w == 0 || w * BFQ_WEIGHT_UNIT > 1000) {
                return invalid("weights must be 1 to 10 (BFQ takes 100 x weight, at most 1000)");
            }
        }
        if self.block_mibs.contains(&0) {
            return invalid("block sizes must be at least 1 MiB");
        }
        if self.window.is_zero() {
            return invalid("the window must be longer than zero");
        }
        if self.child_exe.is_none() {
            return invalid("no tailbound binary to run the tenants");
        }
        Ok(())
    }

    /// Runs every case (weight sets, then ops, block sizes and systems), calling `on_row` as
    /// each is measured.
    pub fn run(
        &self,
        mut on_row: impl FnMut(&FairnessRow),
    ) -> Result<FairnessReport, FairnessError> {
        self.validate()?;
        let progress = if self.progress {
            Progress::new(self.case_count() as u64, "fairness")
        } else {
            Progress::hidden(self.case_count() as u64)
        };
        progress.set_message("filling the loop device's file");
        let dev = LoopDevice::create_filled(&self.scratch_parent, self.device_bytes())?;
        let mut rows: Vec<FairnessRow> = Vec::new();
        // Systems innermost: the cases compared with each other run back to back, so a change in
        // what else the disk is doing shifts them alike.
        for weights in &self.weight_sets {
            for &op in &self.ops {
                for &block_mib in &self.block_mibs {
                    for &system in &self.systems {
                        let case = format!(
                            "{} {} {} {} MiB",
                            system.name(),
                            weights_label(weights),
                            op.name(),
                            block_mib
                        );
                        progress.set_message(case.clone());
                        let last_total = rows
                            .iter()
                            .rev()
                            .find(|r| r.op == op.name())
                            .map(|r| r.total_mb_per_s);
                        let window = window_for(
                            self.window,
                            self.min_blocks,
                            block_mib,
                            weights,
                            last_total,
                        );
                        let spec = Case {
                            weights,
                            op,
                            block_mib,
                            window,
                        };
                        let row = match system {
                            System::Kernel(sched) => self.run_kernel_case(&dev, sched, &spec),
                            System::Tbfs(policy) => self.run_tbfs_case(&dev, policy, &spec),
                        }
                        .map_err(|message| FairnessError::Case {
                            case: case.clone(),
                            message,
                        })?;
                        on_row(&row);
                        rows.push(row);
                        progress.inc(1);
                    }
                }
            }
        }
        progress.finish();
        drop(dev);
        let targets = check_targets(&rows);
        let mut device = "loop device (direct I/O) over a file on the scratch disk".to_string();
        if self.processes {
            device.push_str(
                "; tbfs tenants are processes in blkio cgroups of their weights, clients of one \
                 pool server",
            );
        }
        Ok(FairnessReport {
            experiment: "fairness",
            device,
            region_mb: self.region_bytes() / MIB,
            warmup_s: self.warmup.as_secs_f64(),
            window_s: self.window.as_secs_f64(),
            cases: rows,
            targets,
        })
    }

    fn run_kernel_case(
        &self,
        dev: &LoopDevice,
        sched: KernelSched,
        case: &Case<'_>,
    ) -> Result<FairnessRow, String> {
        let &Case {
            weights,
            op,
            block_mib,
            window,
        } = case;
        let exe = self.child_exe.as_ref().ok_or("no tailbound binary")?;
        // Dropped in reverse: tenants first, then their cgroups, then the scheduler.
        let _sched = SchedulerGuard::set(dev.path(), sched).map_err(|e| e.to_string())?;
        let mut groups = Vec::new();
        if sched == KernelSched::Bfq {
            for (i, &w) in weights.iter().enumerate() {
                let name = format!("tailbound-fairness-{}-{i}", std::process::id());
                groups.push(
                    BlkioCgroup::create(&name, w * BFQ_WEIGHT_UNIT).map_err(|e| e.to_string())?,
                );
            }
        }
        let mut tenants = Vec::new();
        for i in 0..weights.len() {
            let spec = TenantSpec {
                device: PathBuf::from(dev.path()),
                region_offset: i as u64 * self.region_bytes(),
                region_bytes: self.region_bytes(),
                op,
                block_bytes: block_mib * MIB,
            };
            let tenant = TenantProcess::spawn(exe, &spec.args(), &format!("tenant {i}"))?;
            if let Some(group) = groups.get(i) {
                group.add(tenant.pid()).map_err(|e| e.to_string())?;
            }
            tenants.push(tenant);
        }
        for t in &mut tenants {
            t.wait_ready()?;
        }
        for t in &mut tenants {
            t.send(GO)?;
        }
        let go = monotonic_now();
        let open = go.plus(self.warmup);
        sleep_watching(open.plus(window), &self.interrupted, &mut tenants)?;
        let close = monotonic_now();
        for t in &mut tenants {
            t.stop();
        }
        let mut shares = Vec::new();
        let mut all_ops = Vec::new();
        let seconds = close.since(open).as_secs_f64();
        for t in tenants {
            let ops = parse_ops(&t.finish()?)?;
            shares.push(bytes_in_window(&ops, open.0, close.0) / MIB as f64 / seconds);
            all_ops.push(ops);
        }
        let accounting = Some(account(weights, &all_ops, open.0, close.0, &[]));
        Ok(FairnessRow {
            system: System::Kernel(sched).name(),
            weights: weights.to_vec(),
            op: op.name(),
            block_mb: block_mib,
            window_s: seconds,
            ratio_error: ratio_error(weights, &shares),
            total_mb_per_s: shares.iter().sum(),
            shares_mb_per_s: shares,
            writers: Vec::new(),
            accounting,
            pool_waits: None,
        })
    }
}

impl FairnessBench {
    /// One tbfs case: a fresh pool on the loop device (the kernel's scheduler set to `none` under
    /// it), tailbound's scheduler with `policy` in front (depth 1, anticipation for `fair`), and
    /// one thread per tenant with its own file of half a region, reading (`pread`) or writing
    /// (`pwrite` on a file opened `direct`, tbfs's `O_DIRECT`: each write is on the device when
    /// it returns, as the kernel side's are) whole blocks round and round. The files are made
    /// and synced first, so the writes are overwrites as on the kernel side.
    fn run_tbfs_case(
        &self,
        dev: &LoopDevice,
        policy: Policy,
        case: &Case<'_>,
    ) -> Result<FairnessRow, String> {
        let &Case {
            weights,
            op,
            block_mib,
            window,
        } = case;
        use tailbound::sched::Prio;
        use tailbound::tbfs::OpenFlags;
        let _kernel =
            SchedulerGuard::set(dev.path(), KernelSched::None).map_err(|e| e.to_string())?;
        let file_dev = super::pool::open_file_pool(Path::new(dev.path()))
            .map_err(|e| format!("opening {} as a tbfs pool: {e}", dev.path()))?;
        let mut cfg = tailbound::sched::Config::for_device(Path::new(dev.path()));
        cfg.policy = policy;
        cfg.depth = 1;
        cfg.anticipation = (policy != Policy::Fifo).then_some(TBFS_ANTICIPATION);
        // Its tenants never sync: the default barrier, as `tailbound fs mkfs` makes.
        let (sched, fs) = super::pool::format_behind_scheduler(
            file_dev,
            cfg,
            tailbound::tbfs::Barrier::default(),
        )?;
        let block = block_mib * MIB;
        let blocks = (self.region_bytes() / 2 / block).max(1);
        let data: Vec<u8> = (0..block).map(|i| (i % 241) as u8 | 0x80).collect();
        let mut files = Vec::new();
        for (i, &w) in weights.iter().enumerate() {
            let f = fs
                .open_file(
                    &format!("/tenant-{i}"),
                    OpenFlags {
                        direct: true,
                        ..OpenFlags::create()
                    },
                )
                .map_err(|e| format!("creating tenant {i}'s file: {e}"))?;
            for k in 0..blocks {
                f.pwrite(&data, k * block)
                    .map_err(|e| format!("filling tenant {i}'s file: {e}"))?;
            }
            f.fsync()
                .map_err(|e| format!("filling tenant {i}'s file: {e}"))?;
            let tenant = (!self.processes)
                .then(|| sched.add_tenant(&format!("tenant {i}"), Prio::DEFAULT, w));
            files.push((f, tenant));
        }
        let before = counts::Snapshot::take(&fs, &sched);
        let counters_before = fs.counters();
        let pool_waits = |fs: &tailbound::tbfs::Fs| {
            crate::experiments::priority::phases::PoolWaits::between(
                &counters_before,
                &fs.counters(),
            )
        };
        if self.processes {
            drop(files);
            let (open, close, ops) = self.measure_served(&fs, &sched, case, blocks)?;
            let writers = before.until(&counts::Snapshot::take(&fs, &sched), &sched);
            let waits = pool_waits(&fs);
            drop(fs);
            let mut row = row(
                System::Tbfs(policy),
                weights,
                op,
                block_mib,
                (open, close),
                ops,
                &[],
            );
            row.writers = writers;
            row.pool_waits = Some(waits);
            return Ok(row);
        }
        let stop = AtomicBool::new(false);
        let start = std::sync::Barrier::new(weights.len() + 1);
        let (open, close, results, samples) = std::thread::scope(|s| {
            let handles: Vec<_> = files
                .iter()
                .map(|(f, tenant)| {
                    let (stop, start, data) = (&stop, &start, &data);
                    s.spawn(move || -> Result<Vec<(u64, u64, u64)>, String> {
                        tailbound::sched::set_thread_tenant(*tenant);
                        let mut buf = vec![0u8; block as usize];
                        let mut ops = Vec::new();
                        start.wait();
                        let mut k = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let at = (k % blocks) * block;
                            let t0 = monotonic_now().0;
                            match op {
                                IoOp::Read => f.pread(&mut buf, at).map(|_| ()),
                                IoOp::Write => f.pwrite(data, at).map(drop),
                            }
                            .map_err(|e| format!("{} of {block} bytes at {at}: {e}", op.name()))?;
                            ops.push((t0, monotonic_now().0, block));
                            k += 1;
                        }
                        Ok(ops)
                    })
                })
                .collect();
            // The scheduler's bytes per tenant and the pool's flushes, over the case.
            let sampler = s.spawn(|| {
                let ids: Vec<Option<usize>> =
                    files.iter().map(|(_, t)| t.map(|t| t.0 as usize)).collect();
                let mut samples = Vec::new();
                loop {
                    let stats = sched.stats();
                    samples.push(Sample {
                        at: monotonic_now().0,
                        device_bytes: ids
                            .iter()
                            .map(|i| i.and_then(|i| stats.get(i)).map_or(0, |t| t.bytes))
                            .collect(),
                        flushes: fs.counters().device_flushes,
                    });
                    if stop.load(Ordering::Relaxed) {
                        return samples;
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
            });
            start.wait();
            let go = monotonic_now();
            let open = go.plus(self.warmup);
            let until = open.plus(window);
            while monotonic_now().0 < until.0 {
                if self
                    .interrupted
                    .as_ref()
                    .is_some_and(|f| f.load(Ordering::Relaxed))
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20).min(until.since(monotonic_now())));
            }
            let close = monotonic_now();
            stop.store(true, Ordering::Relaxed);
            let samples = sampler.join().unwrap_or_default();
            let results: Vec<_> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a tenant thread panicked".into()))
                })
                .collect();
            (open, close, results, samples)
        });
        if self
            .interrupted
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            return Err("interrupted".into());
        }
        let ops = results.into_iter().collect::<Result<Vec<_>, String>>()?;
        let writers = before.until(&counts::Snapshot::take(&fs, &sched), &sched);
        let waits = pool_waits(&fs);
        drop(files);
        drop(fs);
        let mut row = row(
            System::Tbfs(policy),
            weights,
            op,
            block_mib,
            (open, close),
            ops,
            &samples,
        );
        row.writers = writers;
        row.pool_waits = Some(waits);
        Ok(row)
    }
}

/// A case's row from each tenant's operations and the window.
fn row(
    system: System,
    weights: &[u32],
    op: IoOp,
    block_mib: u64,
    (open, close): (
        tailbound::sys::time::MonoNanos,
        tailbound::sys::time::MonoNanos,
    ),
    ops: Vec<Vec<(u64, u64, u64)>>,
    samples: &[Sample],
) -> FairnessRow {
    let seconds = close.since(open).as_secs_f64();
    let shares: Vec<f64> = ops
        .iter()
        .map(|o| bytes_in_window(o, open.0, close.0) / MIB as f64 / seconds)
        .collect();
    FairnessRow {
        system: system.name(),
        weights: weights.to_vec(),
        op: op.name(),
        block_mb: block_mib,
        window_s: seconds,
        ratio_error: ratio_error(weights, &shares),
        total_mb_per_s: shares.iter().sum(),
        shares_mb_per_s: shares,
        writers: Vec::new(),
        accounting: Some(account(weights, &ops, open.0, close.0, samples)),
        pool_waits: None,
    }
}

/// What one case runs: its weight set, operation, block size and window.
struct Case<'a> {
    weights: &'a [u32],
    op: IoOp,
    block_mib: u64,
    window: Duration,
}

/// Where the loop device's file goes when not told: /var/tmp (on disk where /tmp may be a tmpfs).
pub fn default_scratch_parent() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}
