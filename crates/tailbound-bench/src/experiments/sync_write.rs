//! `tailbound bench sync-write`: the paper's Table 2 / Fig. 6–7 (iozone-like) O_SYNC throughput,
//! tbfs under each ordering and barrier policy on the file backend against ext4 on the same disk,
//! in one run.
//!
//! One case is one file system configuration and one buffer size. Each case opens a file with
//! O_SYNC three times, in iozone's order: `write` creates it and writes it sequentially, `rewrite`
//! writes it again sequentially, `random-rewrite` writes every buffer-aligned block of it once, in a
//! seeded random order (a permutation). MB/s is the pattern's bytes over the wall time of its
//! writes: opening, formatting and closing are setup and are not timed. MB are 2^20 bytes, as
//! iozone counts them.
//!
//! tbfs runs on one pool file beside the ext4 file (same directory, so same disk), created and
//! zero-filled once and formatted afresh for every case. This module owns those two files and
//! removes them when done; it does not touch anything else in the directory.

use std::fs::OpenOptions as StdOpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::experiments::pool;
use crate::progress::Progress;
use crate::report::{targets_markdown, Align, Table, TargetCheck};
use crate::rng::SplitMix64;
use tailbound::dev::BLOCK_SIZE;
use tailbound::tbfs::{self, Barrier, Config, DeviceRef, Fs, OpenFlags, Ordering, SyncMode};

/// The paper's file size: 128 MiB.
pub const FILE_BYTES_PAPER: u64 = 128 << 20;
/// `--quick`: a file small enough that every case runs in a few seconds.
pub const FILE_BYTES_QUICK: u64 = 8 << 20;
/// The paper's buffer sizes: 4 KiB and 64 KiB.
pub const BUFFERS_PAPER: [u64; 2] = [4 << 10, 64 << 10];
/// The pool holds this many times the file. There is no cleaner yet, so a pool never reclaims a
/// partly-live segment, and a dead one only at the next superblock refresh. Measured: strict
/// ordering at 4 KiB logs 24 KiB per write (a checkpoint each), 17.75 times the file over the
/// three patterns, and an 8 MiB file needed a pool of 18 times it; 20 leaves a margin.
pub const POOL_PER_FILE: u64 = 20;
/// Room for the superblocks, the first checkpoint and segment rounding on top of that.
pub const POOL_SLACK_BYTES: u64 = 64 << 20;
/// The file name both file systems write.
const FILE_NAME: &str = "sync-write.dat";
/// The pool file's name in the directory.
const POOL_NAME: &str = "tbfs-sync-write.pool";
/// The ext4 file's name in the directory.
const EXT4_NAME: &str = "ext4-sync-write.dat";

/// Which file system a case writes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    Tbfs,
    Ext4,
}

impl FsKind {
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Tbfs => "tbfs",
            FsKind::Ext4 => "ext4",
        }
    }
}

/// iozone's access patterns, in the order a case runs them (each needs the file the previous left).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Write,
    Rewrite,
    RandomRewrite,
}

impl Pattern {
    pub const ALL: [Pattern; 3] = [Pattern::Write, Pattern::Rewrite, Pattern::RandomRewrite];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Write => "write",
            Pattern::Rewrite => "rewrite",
            Pattern::RandomRewrite => "random-rewrite",
        }
    }
}

/// The name for an ordering policy.
pub fn ordering_name(ordering: Ordering) -> &'static str {
    match ordering {
        Ordering::Strict => "strict",
        Ordering::Relaxed => "relaxed",
    }
}

/// The name for a barrier policy.
pub fn barrier_name(barrier: Barrier) -> &'static str {
    match barrier {
        Barrier::EveryLog => "every-log",
        Barrier::EveryCheckpoint => "every-checkpoint",
        Barrier::Superblock => "superblock",
    }
}

/// The label of ext4's barrier: mounted with barriers (the default), an O_SYNC write ends in a
/// journal commit or a cache flush, so every write is flushed, like tbfs's `every-log`.
const EXT4_BARRIER: &str = "every-log";
/// The label of a policy that does not apply (ext4's ordering).
const NOT_APPLICABLE: &str = "n/a";

/// One file system configuration: ext4, or tbfs with an ordering and a barrier policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsConfig {
    pub fs: FsKind,
    /// `Some` exactly for tbfs.
    pub policy: Option<(Ordering, Barrier)>,
}

impl FsConfig {
    pub fn ext4() -> FsConfig {
        FsConfig {
            fs: FsKind::Ext4,
            policy: None,
        }
    }

    pub fn tbfs(ordering: Ordering, barrier: Barrier) -> FsConfig {
        FsConfig {
            fs: FsKind::Tbfs,
            policy: Some((ordering, barrier)),
        }
    }

    pub fn ordering_label(&self) -> &'static str {
        self.policy
            .map_or(NOT_APPLICABLE, |(ordering, _)| ordering_name(ordering))
    }

    pub fn barrier_label(&self) -> &'static str {
        self.policy
            .map_or(EXT4_BARRIER, |(_, barrier)| barrier_name(barrier))
    }

    /// `ext4` or `tbfs-ORDERING-BARRIER`, unique within the catalogue.
    pub fn id(&self) -> String {
        match self.policy {
            None => self.fs.name().to_string(),
            Some((ordering, barrier)) => format!(
                "{}-{}-{}",
                self.fs.name(),
                ordering_name(ordering),
                barrier_name(barrier)
            ),
        }
    }

    /// Whether a `--cases` selector picks this configuration: its id, or a leading part of it
    /// ending at a dash (`tbfs`, `tbfs-relaxed`).
    pub fn matches(&self, selector: &str) -> bool {
        let id = self.id();
        let selector = selector.to_ascii_lowercase();
        id == selector || id.starts_with(&format!("{selector}-"))
    }
}

/// Every configuration: ext4, tbfs {strict, relaxed} × {every-checkpoint, superblock} (the issue's
/// grid), and tbfs relaxed × every-log (what full durability of every write costs).
pub fn catalogue() -> Vec<FsConfig> {
    use Barrier::{EveryCheckpoint, EveryLog, Superblock};
    use Ordering::{Relaxed, Strict};
    vec![
        FsConfig::ext4(),
        FsConfig::tbfs(Strict, EveryCheckpoint),
        FsConfig::tbfs(Strict, Superblock),
        FsConfig::tbfs(Relaxed, EveryCheckpoint),
        FsConfig::tbfs(Relaxed, Superblock),
        FsConfig::tbfs(Relaxed, EveryLog),
    ]
}

/// Picks configurations by `--cases` selectors, in catalogue order; an unknown selector is an
/// error naming it.
pub fn select_configs(selectors: &[String]) -> Result<Vec<FsConfig>, SyncWriteError> {
    let catalogue = catalogue();
    for selector in selectors {
        if !catalogue.iter().any(|c| c.matches(selector)) {
            return Err(SyncWriteError::UnknownCase(selector.clone()));
        }
    }
    Ok(catalogue
        .into_iter()
        .filter(|c| selectors.iter().any(|s| c.matches(s)))
        .collect())
}

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncWriteError {
    #[error("unknown case {0:?} (see `tailbound bench sync-write --list`)")]
    UnknownCase(String),
    #[error("sync-write: {0}")]
    Invalid(String),
    #[error("case {case}: {message}")]
    Case { case: String, message: String },
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct SyncWriteBench {
    /// Directory of the ext4 file and the tbfs pool file.
    pub dir: PathBuf,
    pub file_bytes: u64,
    pub buffers: Vec<u64>,
    pub configs: Vec<FsConfig>,
    /// Seeds the random-rewrite order and the data written.
    pub seed: u64,
    /// The pool file's size, instead of [`SyncWriteBench::pool_bytes`]'s rule.
    pub pool_bytes_override: Option<u64>,
    /// Draw progress bars (on a terminal only).
    pub progress: bool,
}

impl SyncWriteBench {
    /// The paper's parameters: a 128 MiB file, 4 KiB and 64 KiB buffers, every configuration.
    pub fn paper(dir: PathBuf) -> SyncWriteBench {
        SyncWriteBench {
            dir,
            file_bytes: FILE_BYTES_PAPER,
            buffers: BUFFERS_PAPER.to_vec(),
            configs: catalogue(),
            seed: 0x5eed,
            pool_bytes_override: None,
            progress: true,
        }
    }

    /// `--quick`: the same cases on an 8 MiB file.
    pub fn quick(dir: PathBuf) -> SyncWriteBench {
        SyncWriteBench {
            file_bytes: FILE_BYTES_QUICK,
            ..SyncWriteBench::paper(dir)
        }
    }

    /// The pool file's size: [`POOL_PER_FILE`] files plus [`POOL_SLACK_BYTES`], unless overridden.
    pub fn pool_bytes(&self) -> u64 {
        self.pool_bytes_override
            .unwrap_or(self.file_bytes * POOL_PER_FILE + POOL_SLACK_BYTES)
    }

    /// Checks the parameters before anything is created.
    pub fn validate(&self) -> Result<(), SyncWriteError> {
        let invalid = |m: String| Err(SyncWriteError::Invalid(m));
        if self.buffers.is_empty() {
            return invalid("no buffer sizes".into());
        }
        if self.configs.is_empty() {
            return invalid("no cases".into());
        }
        for &buffer in &self.buffers {
            if buffer == 0 || buffer % BLOCK_SIZE != 0 {
                return invalid(format!(
                    "buffer of {buffer} bytes is not a multiple of {BLOCK_SIZE}"
                ));
            }
            if self.file_bytes < buffer || !self.file_bytes.is_multiple_of(buffer) {
                return invalid(format!(
                    "file size {} is not a whole number of {buffer}-byte buffers",
                    self.file_bytes
                ));
            }
        }
        Ok(())
    }

    /// Runs every case in order (configurations, then buffer sizes), calling `on_case` with each
    /// case's three rows as they are measured.
    pub fn run(
        &self,
        mut on_case: impl FnMut(&[SyncWriteRow]),
    ) -> Result<SyncWriteReport, SyncWriteError> {
        self.validate()?;
        let files = OwnedFiles {
            pool: self.dir.join(POOL_NAME),
            ext4: self.dir.join(EXT4_NAME),
        };
        let mut pool_dev: Option<DeviceRef> = None;
        let mut pool_io = String::new();
        let mut rows = Vec::new();
        for config in &self.configs {
            for &buffer in &self.buffers {
                let case = format!("{}@{}KiB", config.id(), buffer >> 10);
                let fail = |message: String| SyncWriteError::Case {
                    case: case.clone(),
                    message,
                };
                let progress = if self.progress {
                    Progress::new(Pattern::ALL.len() as u64 * self.file_bytes, &case)
                } else {
                    Progress::hidden(Pattern::ALL.len() as u64 * self.file_bytes)
                };
                let case_rows = match config.policy {
                    None => self.run_ext4(&files.ext4, buffer, &progress),
                    Some((ordering, barrier)) => {
                        let dev = match &pool_dev {
                            Some(dev) => dev.clone(),
                            None => {
                                progress.set_message("zero-filling the pool (once)");
                                let dev = pool::create_file_pool(&files.pool, self.pool_bytes())
                                    .map_err(|e| fail(format!("creating the pool: {e}")))?;
                                pool_io = pool::describe(&dev);
                                let dev: DeviceRef = dev;
                                pool_dev = Some(dev.clone());
                                dev
                            }
                        };
                        self.run_tbfs(dev, ordering, barrier, buffer, &progress)
                    }
                }
                .map_err(fail)?;
                progress.finish();
                let case_rows: Vec<SyncWriteRow> = case_rows
                    .into_iter()
                    .map(|m| SyncWriteRow::new(config, buffer, self.file_bytes, m))
                    .collect();
                on_case(&case_rows);
                rows.extend(case_rows);
            }
        }
        drop(pool_dev);
        files.remove().map_err(SyncWriteError::Invalid)?;
        let ratios = ratios(&rows);
        let targets = check_targets(&ratios);
        Ok(SyncWriteReport {
            experiment: "sync-write",
            file_mib: self.file_bytes >> 20,
            pool_mib: self.pool_bytes() >> 20,
            pool_io,
            cases: rows,
            ratios,
            targets,
        })
    }

    /// The order random-rewrite visits the file's blocks of `buffer` bytes: a seeded permutation.
    pub fn random_order(&self, buffer: u64) -> Vec<u64> {
        let mut order: Vec<u64> = (0..self.file_bytes / buffer).collect();
        SplitMix64::new(self.seed ^ buffer).shuffle(&mut order);
        order
    }

    fn payload(&self, buffer: u64) -> Vec<u8> {
        let mut data = vec![0u8; buffer as usize];
        SplitMix64::new(self.seed.rotate_left(17) ^ buffer).fill(&mut data);
        data
    }

    fn run_ext4(
        &self,
        path: &Path,
        buffer: u64,
        progress: &Progress,
    ) -> Result<Vec<Measured>, String> {
        let data = self.payload(buffer);
        let blocks = self.file_bytes / buffer;
        let order = self.random_order(buffer);
        let mut measured = Vec::new();
        for pattern in Pattern::ALL {
            progress.set_message(pattern.name());
            let mut options = StdOpenOptions::new();
            options.write(true).custom_flags(libc::O_SYNC);
            if pattern == Pattern::Write {
                options.create(true).truncate(true).mode(0o644);
            }
            let mut file = options
                .open(path)
                .map_err(|e| format!("opening {} O_SYNC: {e}", path.display()))?;
            let write_err =
                |e: std::io::Error| format!("{}: {}: {e}", path.display(), pattern.name());
            let start = Instant::now();
            match pattern {
                Pattern::Write | Pattern::Rewrite => {
                    for _ in 0..blocks {
                        file.write_all(&data).map_err(write_err)?;
                        progress.inc(buffer);
                    }
                }
                Pattern::RandomRewrite => {
                    for &block in &order {
                        file.write_all_at(&data, block * buffer)
                            .map_err(write_err)?;
                        progress.inc(buffer);
                    }
                }
            }
            measured.push(Measured {
                pattern,
                elapsed: start.elapsed(),
                tbfs: None,
            });
        }
        std::fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
        Ok(measured)
    }

    fn run_tbfs(
        &self,
        dev: DeviceRef,
        ordering: Ordering,
        barrier: Barrier,
        buffer: u64,
        progress: &Progress,
    ) -> Result<Vec<Measured>, String> {
        let data = self.payload(buffer);
        let blocks = self.file_bytes / buffer;
        let order = self.random_order(buffer);
        // Segments of the size `tailbound fs mkfs` gives a pool of this size.
        let config = Config {
            ordering,
            barrier,
            segment_bytes: tailbound::tbfs::fsck::default_segment_bytes(dev.len()),
            ..Config::default()
        };
        progress.set_message("formatting the pool");
        let fs = Fs::format(dev, &config).map_err(|e| format!("formatting the pool: {e}"))?;
        let path = format!("/{FILE_NAME}");
        let mut measured = Vec::new();
        for pattern in Pattern::ALL {
            progress.set_message(pattern.name());
            let flags = OpenFlags {
                write: true,
                create: pattern == Pattern::Write,
                truncate: pattern == Pattern::Write,
                sync: SyncMode::Full,
                mode: 0o644,
                ..OpenFlags::default()
            };
            let mut file = fs
                .open_file(&path, flags)
                .map_err(|e| format!("opening {path} O_SYNC: {e}"))?;
            let write_err = |e: tbfs::Error| format!("{path}: {}: {e}", pattern.name());
            let before = fs.counters();
            let start = Instant::now();
            match pattern {
                Pattern::Write | Pattern::Rewrite => {
                    for _ in 0..blocks {
                        write_all_tbfs(&data, |buf| file.write(buf)).map_err(write_err)?;
                        progress.inc(buffer);
                    }
                }
                Pattern::RandomRewrite => {
                    for &block in &order {
                        let offset = block * buffer;
                        let mut done = 0u64;
                        write_all_tbfs(&data, |buf| {
                            let n = file.pwrite(buf, offset + done)?;
                            done += n as u64;
                            Ok(n)
                        })
                        .map_err(write_err)?;
                        progress.inc(buffer);
                    }
                }
            }
            let elapsed = start.elapsed();
            let after = fs.counters();
            measured.push(Measured {
                pattern,
                elapsed,
                tbfs: Some(TbfsCounts::between(&before, &after)),
            });
        }
        fs.close().map_err(|e| format!("closing the pool: {e}"))?;
        Ok(measured)
    }
}

/// Writes all of `data` through `write`, which may write less than it was given.
fn write_all_tbfs(
    data: &[u8],
    mut write: impl FnMut(&[u8]) -> tbfs::Result<usize>,
) -> tbfs::Result<()> {
    let mut rest = data;
    while !rest.is_empty() {
        let n = write(rest)?;
        if n == 0 {
            return Err(tbfs::Error::Invalid(format!(
                "a write of {} bytes wrote nothing",
                rest.len()
            )));
        }
        rest = &rest[n..];
    }
    Ok(())
}

/// The pool file and the ext4 file, removed when the run ends, however it ends.
struct OwnedFiles {
    pool: PathBuf,
    ext4: PathBuf,
}

impl OwnedFiles {
    fn remove(&self) -> Result<(), String> {
        for path in [&self.pool, &self.ext4] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing {}: {e}", path.display())),
            }
        }
        Ok(())
    }
}

impl Drop for OwnedFiles {
    fn drop(&mut self) {
        // Best effort: after a successful run they are gone already.
        let _ = self.remove();
    }
}

/// One pattern's timing, before it becomes a row.
struct Measured {
    pattern: Pattern,
    elapsed: Duration,
    tbfs: Option<TbfsCounts>,
}

/// What tbfs wrote during one pattern (the difference of its counters), to explain a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TbfsCounts {
    pub logs: u64,
    pub data_only_logs: u64,
    pub checkpoints: u64,
    pub device_flushes: u64,
    pub bytes_written: u64,
}

impl TbfsCounts {
    fn between(before: &tbfs::FsCounters, after: &tbfs::FsCounters) -> TbfsCounts {
        TbfsCounts {
            logs: after.logs.saturating_sub(before.logs),
            data_only_logs: after.data_only_logs.saturating_sub(before.data_only_logs),
            checkpoints: after.checkpoints.saturating_sub(before.checkpoints),
            device_flushes: after.device_flushes.saturating_sub(before.device_flushes),
            bytes_written: after.bytes_written.saturating_sub(before.bytes_written),
        }
    }
}

/// One pattern of one case: a row of the table and of the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct SyncWriteRow {
    pub fs: &'static str,
    pub ordering: &'static str,
    pub barrier: &'static str,
    pub pattern: &'static str,
    pub buffer_kib: u64,
    /// MB (2^20 bytes) per second of the pattern's writes.
    pub mb_per_s: f64,
    pub bytes: u64,
    pub seconds: f64,
    /// What tbfs wrote (tbfs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tbfs: Option<TbfsCounts>,
}

impl SyncWriteRow {
    fn new(config: &FsConfig, buffer: u64, bytes: u64, m: Measured) -> SyncWriteRow {
        let seconds = m.elapsed.as_secs_f64();
        SyncWriteRow {
            fs: config.fs.name(),
            ordering: config.ordering_label(),
            barrier: config.barrier_label(),
            pattern: m.pattern.name(),
            buffer_kib: buffer >> 10,
            mb_per_s: mb_per_s(bytes, seconds),
            bytes,
            seconds,
            tbfs: m.tbfs,
        }
    }

    /// `fs ordering barrier`, e.g. `tbfs relaxed every-checkpoint` or `ext4`: a series of the plot.
    pub fn series(&self) -> String {
        if self.fs == FsKind::Ext4.name() {
            self.fs.to_string()
        } else {
            format!("{} {} {}", self.fs, self.ordering, self.barrier)
        }
    }
}

/// MB (2^20 bytes) per second; 0 when no time passed, so a figure is always finite.
pub fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / (1u64 << 20) as f64 / seconds
    } else {
        0.0
    }
}

/// One ratio the targets need: `numerator / denominator` for one pattern and buffer size.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// E.g. `relaxed/strict every-checkpoint` or `tbfs relaxed superblock/ext4`.
    pub what: String,
    pub pattern: &'static str,
    pub buffer_kib: u64,
    pub ratio: f64,
}

fn find<'a>(
    rows: &'a [SyncWriteRow],
    series: &str,
    pattern: &str,
    buffer_kib: u64,
) -> Option<&'a SyncWriteRow> {
    rows.iter()
        .find(|r| r.series() == series && r.pattern == pattern && r.buffer_kib == buffer_kib)
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        f64::NAN
    }
}

/// Relaxed over strict (per barrier) and tbfs relaxed over ext4 (per barrier), for every pattern
/// and buffer size both sides of which ran.
pub fn ratios(rows: &[SyncWriteRow]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut cells: Vec<(&'static str, u64)> = Vec::new();
    for r in rows {
        if !cells.contains(&(r.pattern, r.buffer_kib)) {
            cells.push((r.pattern, r.buffer_kib));
        }
    }
    let pairs: Vec<(String, String, String)> = [Barrier::EveryCheckpoint, Barrier::Superblock]
        .into_iter()
        .map(|b| {
            let b = barrier_name(b);
            (
                format!("relaxed/strict {b}"),
                format!("tbfs relaxed {b}"),
                format!("tbfs strict {b}"),
            )
        })
        .chain(
            [
                Barrier::EveryLog,
                Barrier::EveryCheckpoint,
                Barrier::Superblock,
            ]
            .into_iter()
            .map(|b| {
                let relaxed = format!("tbfs relaxed {}", barrier_name(b));
                (format!("{relaxed}/ext4"), relaxed, "ext4".to_string())
            }),
        )
        .collect();
    for (what, numerator, denominator) in &pairs {
        for &(pattern, buffer_kib) in &cells {
            if let (Some(n), Some(d)) = (
                find(rows, numerator, pattern, buffer_kib),
                find(rows, denominator, pattern, buffer_kib),
            ) {
                out.push(Ratio {
                    what: what.clone(),
                    pattern,
                    buffer_kib,
                    ratio: ratio(n.mb_per_s, d.mb_per_s),
                });
            }
        }
    }
    out
}

/// The targets, for the ratios this run measured: relaxed ≥ 2× strict on 4 KiB rewrite and
/// random rewrite (per barrier), and tbfs relaxed at least as fast as ext4 on every pattern and
/// buffer size (per barrier).
pub fn check_targets(ratios: &[Ratio]) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for barrier in [Barrier::EveryCheckpoint, Barrier::Superblock] {
        let what = format!("relaxed/strict {}", barrier_name(barrier));
        let picked: Vec<&Ratio> = ratios
            .iter()
            .filter(|r| {
                r.what == what
                    && r.buffer_kib == 4
                    && (r.pattern == Pattern::Rewrite.name()
                        || r.pattern == Pattern::RandomRewrite.name())
            })
            .collect();
        if picked.is_empty() {
            continue;
        }
        checks.push(TargetCheck {
            target: format!(
                "relaxed >= 2x strict ({}), 4 KiB rewrite and random-rewrite",
                barrier_name(barrier)
            ),
            measured: picked
                .iter()
                .map(|r| format!("{} {:.2}x", r.pattern, r.ratio))
                .collect::<Vec<_>>()
                .join(", "),
            met: picked.iter().all(|r| r.ratio >= 2.0),
        });
    }
    for barrier in [
        Barrier::EveryLog,
        Barrier::EveryCheckpoint,
        Barrier::Superblock,
    ] {
        let what = format!("tbfs relaxed {}/ext4", barrier_name(barrier));
        let picked: Vec<&Ratio> = ratios.iter().filter(|r| r.what == what).collect();
        let Some(worst) = picked.iter().min_by(|a, b| a.ratio.total_cmp(&b.ratio)) else {
            continue;
        };
        checks.push(TargetCheck {
            target: format!(
                "tbfs relaxed ({}) >= ext4 on every pattern and buffer",
                barrier_name(barrier)
            ),
            measured: format!(
                "lowest {:.2}x ({} {} KiB) over {} cells",
                worst.ratio,
                worst.pattern,
                worst.buffer_kib,
                picked.len()
            ),
            met: picked.iter().all(|r| r.ratio >= 1.0),
        });
    }
    checks
}

/// The experiment's result: what `--json` writes.
#[derive(Debug, Clone, Serialize)]
pub struct SyncWriteReport {
    pub experiment: &'static str,
    pub file_mib: u64,
    pub pool_mib: u64,
    /// How the file backend did its I/O (`O_DIRECT, io_uring`), empty when no tbfs case ran.
    pub pool_io: String,
    pub cases: Vec<SyncWriteRow>,
    pub ratios: Vec<Ratio>,
    pub targets: Vec<TargetCheck>,
}

impl SyncWriteReport {
    /// The results (one row per case and pattern), the ratios as a pattern × buffer table, and the
    /// targets.
    pub fn to_markdown(&self) -> String {
        let mut table = Table::new(
            [
                "fs", "ordering", "barrier", "pattern", "buffer", "MB/s", "flushes", "ckpts",
                "written",
            ]
            .map(String::from)
            .to_vec(),
        );
        for column in 4..9 {
            table.set_align(column, Align::Right);
        }
        for r in &self.cases {
            let counts = r
                .tbfs
                .map_or([String::new(), String::new(), String::new()], |c| {
                    [
                        c.device_flushes.to_string(),
                        c.checkpoints.to_string(),
                        format!("{:.2}x", c.bytes_written as f64 / r.bytes.max(1) as f64),
                    ]
                });
            let [flushes, ckpts, written] = counts;
            table.push(vec![
                r.fs.into(),
                r.ordering.into(),
                r.barrier.into(),
                r.pattern.into(),
                format!("{} KiB", r.buffer_kib),
                format!("{:.1}", r.mb_per_s),
                flushes,
                ckpts,
                written,
            ]);
        }
        let backend = if self.pool_io.is_empty() {
            String::new()
        } else {
            format!("; tbfs pool file: {}", self.pool_io)
        };
        let mut out = format!(
            "O_SYNC throughput, {} MiB file (MB = 2^20 bytes; flushes, checkpoints and bytes \
             written relative to the data are tbfs's own counters{backend})\n\n{}",
            self.file_mib,
            table.to_markdown()
        );
        if !self.ratios.is_empty() {
            let mut whats: Vec<&str> = Vec::new();
            let mut cells: Vec<(&str, u64)> = Vec::new();
            for r in &self.ratios {
                if !whats.contains(&r.what.as_str()) {
                    whats.push(&r.what);
                }
                if !cells.contains(&(r.pattern, r.buffer_kib)) {
                    cells.push((r.pattern, r.buffer_kib));
                }
            }
            let mut headers = vec!["pattern".to_string(), "buffer".to_string()];
            headers.extend(whats.iter().map(|w| w.to_string()));
            let mut ratios = Table::new(headers);
            for column in 1..whats.len() + 2 {
                ratios.set_align(column, Align::Right);
            }
            for (pattern, buffer_kib) in cells {
                let mut row = vec![pattern.to_string(), format!("{buffer_kib} KiB")];
                for what in &whats {
                    row.push(
                        self.ratios
                            .iter()
                            .find(|r| {
                                r.what == *what
                                    && r.pattern == pattern
                                    && r.buffer_kib == buffer_kib
                            })
                            .map_or(String::new(), |r| format!("{:.2}x", r.ratio)),
                    );
                }
                ratios.push(row);
            }
            out.push_str("\nRatios of MB/s\n\n");
            out.push_str(&ratios.to_markdown());
        }
        if !self.targets.is_empty() {
            out.push_str("\nTargets\n\n");
            out.push_str(&targets_markdown(&self.targets));
        }
        out
    }

    /// The plot's groups (`pattern buffer`) and series (one per configuration, MB/s per group).
    pub fn bar_series(&self) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
        let mut groups: Vec<(&str, u64)> = Vec::new();
        let mut series: Vec<String> = Vec::new();
        for r in &self.cases {
            if !groups.contains(&(r.pattern, r.buffer_kib)) {
                groups.push((r.pattern, r.buffer_kib));
            }
            if !series.contains(&r.series()) {
                series.push(r.series());
            }
        }
        let values = series
            .into_iter()
            .map(|s| {
                let v = groups
                    .iter()
                    .map(|&(p, b)| find(&self.cases, &s, p, b).map_or(f64::NAN, |r| r.mb_per_s))
                    .collect();
                (s, v)
            })
            .collect();
        let labels = groups.iter().map(|(p, b)| format!("{p} {b} KiB")).collect();
        (labels, values)
    }
}

#[cfg(test)]
mod tests;
