//! Background loads that compete with a measurement for the file system and the device.
//!
//! Each load prepares its files in [`Load::start`] (so preparation never overlaps a measurement),
//! runs on its own thread until [`Load::stop`], and removes its files when stopped or dropped.
//! A load never panics: an error in its thread ends the load and is returned by [`Load::stop`].
//!
//! | load | what it does (defaults of [`LoadConfig`]) |
//! |---|---|
//! | `none` | nothing (no thread, no files) |
//! | `bgtrunc` | the paper's (seed 000 §4.2): a 100 MiB `fallocate`d file truncated by 256 KiB every 5 ms; when it reaches 0 bytes the next step `fallocate`s it to 100 MiB again, so the load never runs out |
//! | `bgall` | `bgtrunc`, plus every 5 ms on a second file `ftruncate(0)` then `fallocate` 100 MiB |
//! | `seq-read` | a 100 MiB file written and `fsync`ed at start, then read sequentially in 2 MiB reads, its cache dropped (`POSIX_FADV_DONTNEED`) every lap so reads reach the device |
//! | `buffered-writer` | 1 MiB buffered writes as fast as possible, `fsync` every 64 MiB, wrapping to offset 0 at 1 GiB so the disk never fills |
//! | `direct-writer` | `O_DIRECT` 1 MiB aligned writes as fast as possible, wrapping at 1 GiB; refused at start where the file system has no direct I/O |
//!
//! Files are named `tailbound-load-<pid>-<n>-<kind>-<role>`, so several loads (and several
//! processes) can share a directory.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::timer::PeriodicTimer;
use tailbound::sys::file::{fadvise, fallocate, Advice, AlignedBuf, Allocate, O_DIRECT};

/// Alignment of `direct-writer`'s buffer, offsets and write size (the largest common logical
/// block size).
pub const DIRECT_ALIGN_BYTES: u64 = 4096;
/// Largest single read or write a load issues; its buffer is allocated at start.
pub const REQUEST_BYTES_MAX: u64 = 256 << 20;

/// Which background load to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LoadKind {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "bgtrunc")]
    BgTrunc,
    #[serde(rename = "bgall")]
    BgAll,
    #[serde(rename = "seq-read")]
    SeqRead,
    #[serde(rename = "buffered-writer")]
    BufferedWriter,
    #[serde(rename = "direct-writer")]
    DirectWriter,
}

impl LoadKind {
    /// Every load, in the order tables list them.
    pub const ALL: [LoadKind; 6] = [
        LoadKind::None,
        LoadKind::BgTrunc,
        LoadKind::BgAll,
        LoadKind::SeqRead,
        LoadKind::BufferedWriter,
        LoadKind::DirectWriter,
    ];

    /// The name `Display` prints and `FromStr` parses (`seq-read`).
    pub fn name(self) -> &'static str {
        match self {
            LoadKind::None => "none",
            LoadKind::BgTrunc => "bgtrunc",
            LoadKind::BgAll => "bgall",
            LoadKind::SeqRead => "seq-read",
            LoadKind::BufferedWriter => "buffered-writer",
            LoadKind::DirectWriter => "direct-writer",
        }
    }
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoadKind {
    type Err = LoadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LoadKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| LoadError::UnknownKind(s.to_string()))
    }
}

/// Sizes and pacing of the loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadConfig {
    /// Size of the truncated, allocated and read files.
    pub file_bytes: u64,
    /// Pace of `bgtrunc` and `bgall`.
    pub period: Duration,
    /// How much `bgtrunc` cuts off each period.
    pub trunc_step_bytes: u64,
    /// Size of each `seq-read` read.
    pub read_bytes: u64,
    /// Size of each writer's write (a multiple of [`DIRECT_ALIGN_BYTES`] for `direct-writer`).
    pub write_bytes: u64,
    /// `buffered-writer` calls `fsync` after this many bytes.
    pub fsync_every_bytes: u64,
    /// The writers wrap to offset 0 here, so the disk never fills.
    pub writer_cap_bytes: u64,
}

impl Default for LoadConfig {
    /// The paper's sizes (seed 000 §4.2) and tailbound's writer loads.
    fn default() -> Self {
        LoadConfig {
            file_bytes: 100 << 20,
            period: Duration::from_millis(5),
            trunc_step_bytes: 256 << 10,
            read_bytes: 2 << 20,
            write_bytes: 1 << 20,
            fsync_every_bytes: 64 << 20,
            writer_cap_bytes: 1 << 30,
        }
    }
}

impl LoadConfig {
    /// Smaller files for quick runs and tests; same pacing and request sizes.
    pub fn quick() -> LoadConfig {
        LoadConfig {
            file_bytes: 32 << 20,
            writer_cap_bytes: 256 << 20,
            ..LoadConfig::default()
        }
    }

    /// Checks the settings `kind` uses; `Load::start` calls this before creating any file.
    pub fn check(&self, kind: LoadKind) -> Result<(), LoadError> {
        let bad = |reason: String| Err(LoadError::Config { kind, reason });
        let request = |name: &str, bytes: u64| {
            if bytes == 0 || bytes > REQUEST_BYTES_MAX {
                bad(format!("{name} {bytes} is not in 1..={REQUEST_BYTES_MAX}"))
            } else {
                Ok(())
            }
        };
        match kind {
            LoadKind::None => Ok(()),
            LoadKind::BgTrunc | LoadKind::BgAll => {
                if self.period.is_zero() {
                    return bad("period is zero".into());
                }
                if self.file_bytes == 0 || self.trunc_step_bytes == 0 {
                    return bad("file_bytes and trunc_step_bytes must not be zero".into());
                }
                Ok(())
            }
            LoadKind::SeqRead => {
                if self.file_bytes == 0 {
                    return bad("file_bytes is zero".into());
                }
                request("read_bytes", self.read_bytes)
            }
            LoadKind::BufferedWriter | LoadKind::DirectWriter => {
                request("write_bytes", self.write_bytes)?;
                if self.writer_cap_bytes < self.write_bytes {
                    return bad(format!(
                        "writer_cap_bytes {} is below write_bytes {}",
                        self.writer_cap_bytes, self.write_bytes
                    ));
                }
                if kind == LoadKind::BufferedWriter && self.fsync_every_bytes == 0 {
                    return bad("fsync_every_bytes is zero".into());
                }
                if kind == LoadKind::DirectWriter
                    && !self.write_bytes.is_multiple_of(DIRECT_ALIGN_BYTES)
                {
                    return bad(format!(
                        "write_bytes {} is not a multiple of {DIRECT_ALIGN_BYTES} (O_DIRECT)",
                        self.write_bytes
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("unknown load {0:?} (one of none, bgtrunc, bgall, seq-read, buffered-writer, direct-writer)")]
    UnknownKind(String),
    #[error("load {kind}: bad configuration: {reason}")]
    Config { kind: LoadKind, reason: String },
    #[error("load {kind}: {what} {path}: {source}")]
    Io {
        kind: LoadKind,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "load direct-writer: the file system of {path} does not support O_DIRECT \
         (use a directory on a disk-backed file system): {source}"
    )]
    DirectIoUnsupported {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("load {kind}: periodic timer: {source}")]
    Timer {
        kind: LoadKind,
        #[source]
        source: io::Error,
    },
    #[error("load {kind}: its thread panicked")]
    Panicked { kind: LoadKind },
}

/// What a load did while it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadReport {
    pub kind: LoadKind,
    /// Operations completed: truncations, allocations, reads or writes. `bgall` counts two a
    /// period: the step on the first file and the truncate-and-allocate of the second.
    pub ops: u64,
    /// Bytes truncated, allocated, read or written.
    pub bytes: u64,
    /// From the start of the thread to its stop.
    pub elapsed: Duration,
}

#[derive(Default)]
struct Counters {
    ops: AtomicU64,
    bytes: AtomicU64,
}

/// What a load's thread shares with its [`Load`] handle.
struct Ctx {
    kind: LoadKind,
    cfg: LoadConfig,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    /// Tests only: the operation number at which the thread fails, to prove errors reach `stop`.
    #[cfg(test)]
    fail_at_op: Option<u64>,
}

impl Ctx {
    fn io<T>(&self, what: &'static str, path: &Path, r: io::Result<T>) -> Result<T, LoadError> {
        r.map_err(|source| LoadError::Io {
            kind: self.kind,
            what,
            path: path.to_path_buf(),
            source,
        })
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// Counts one finished operation of `bytes`.
    fn done(&self, bytes: u64) -> Result<(), LoadError> {
        let ops = self.counters.ops.fetch_add(1, Ordering::Relaxed) + 1;
        self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.failpoint(ops)
    }

    #[cfg(test)]
    fn failpoint(&self, ops: u64) -> Result<(), LoadError> {
        if self.fail_at_op != Some(ops) {
            return Ok(());
        }
        Err(LoadError::Io {
            kind: self.kind,
            what: "failing on purpose at",
            path: PathBuf::from(format!("operation {ops}")),
            source: io::Error::other("test failpoint"),
        })
    }

    #[cfg(not(test))]
    fn failpoint(&self, _ops: u64) -> Result<(), LoadError> {
        Ok(())
    }
}

fn open_rw(path: &Path, direct: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true);
    if direct {
        options.custom_flags(O_DIRECT);
    }
    options.open(path)
}

/// `bgtrunc`'s file: cut by one step each period, allocated whole again once it is empty.
struct Truncator {
    file: File,
    path: PathBuf,
    size_bytes: u64,
}

impl Truncator {
    fn prepare(ctx: &Ctx, path: PathBuf) -> Result<Truncator, LoadError> {
        let file = ctx.io("creating", &path, open_rw(&path, false))?;
        let size_bytes = ctx.cfg.file_bytes;
        let grown = fallocate(&file, 0, size_bytes, Allocate::Grow);
        ctx.io("allocating", &path, grown)?;
        Ok(Truncator {
            file,
            path,
            size_bytes,
        })
    }

    fn step(&mut self, ctx: &Ctx) -> Result<(), LoadError> {
        if self.size_bytes == 0 {
            let grown = fallocate(&self.file, 0, ctx.cfg.file_bytes, Allocate::Grow);
            ctx.io("allocating", &self.path, grown)?;
            self.size_bytes = ctx.cfg.file_bytes;
            return ctx.done(ctx.cfg.file_bytes);
        }
        let cut = self.size_bytes.min(ctx.cfg.trunc_step_bytes);
        ctx.io(
            "truncating",
            &self.path,
            self.file.set_len(self.size_bytes - cut),
        )?;
        self.size_bytes -= cut;
        ctx.done(cut)
    }
}

/// `bgall`'s second file: emptied and allocated whole again each period.
struct Allocator {
    file: File,
    path: PathBuf,
}

impl Allocator {
    fn step(&mut self, ctx: &Ctx) -> Result<(), LoadError> {
        ctx.io("truncating", &self.path, self.file.set_len(0))?;
        let grown = fallocate(&self.file, 0, ctx.cfg.file_bytes, Allocate::Grow);
        ctx.io("allocating", &self.path, grown)?;
        ctx.done(ctx.cfg.file_bytes)
    }
}

/// Runs `bgtrunc` (and `bgall`'s second file) once per period until stopped.
fn run_truncation(
    ctx: &Ctx,
    mut trunc: Truncator,
    mut alloc: Option<Allocator>,
) -> Result<(), LoadError> {
    let mut timer = PeriodicTimer::new(ctx.cfg.period);
    while ctx.running() {
        timer.wait().map_err(|source| LoadError::Timer {
            kind: ctx.kind,
            source,
        })?;
        if !ctx.running() {
            break;
        }
        trunc.step(ctx)?;
        if let Some(a) = alloc.as_mut() {
            a.step(ctx)?;
        }
        // Behind schedule (a slow file system), go on at the pace rather than in a burst.
        timer.skip_missed();
    }
    Ok(())
}

/// Writes `bytes` to a new file, makes them durable and drops them from the cache.
fn fill_file(ctx: &Ctx, path: &Path, bytes: u64) -> Result<File, LoadError> {
    let mut file = ctx.io("creating", path, open_rw(path, false))?;
    let chunk = vec![0x5au8; 1 << 20];
    let mut written = 0;
    while written < bytes {
        let n = chunk.len().min((bytes - written) as usize);
        ctx.io("filling", path, file.write_all(&chunk[..n]))?;
        written += n as u64;
    }
    ctx.io("syncing", path, file.sync_all())?;
    let dropped = fadvise(&file, 0, 0, Advice::DontNeed);
    ctx.io("dropping the cache of", path, dropped)?;
    Ok(file)
}

fn run_seq_read(ctx: &Ctx, path: &Path, file: File) -> Result<(), LoadError> {
    let mut buf = vec![0u8; ctx.cfg.read_bytes as usize];
    let mut offset = 0u64;
    while ctx.running() {
        let n = ctx.io("reading", path, file.read_at(&mut buf, offset))?;
        if n == 0 {
            // End of a lap: drop what it cached, so the next lap reads the device again.
            let dropped = fadvise(&file, 0, 0, Advice::DontNeed);
            ctx.io("dropping the cache of", path, dropped)?;
            offset = 0;
            continue;
        }
        offset += n as u64;
        ctx.done(n as u64)?;
    }
    Ok(())
}

fn run_buffered_writer(ctx: &Ctx, path: &Path, file: File) -> Result<(), LoadError> {
    let chunk = vec![0xa5u8; ctx.cfg.write_bytes as usize];
    let len = ctx.cfg.write_bytes;
    let (mut offset, mut unsynced_bytes) = (0u64, 0u64);
    while ctx.running() {
        if offset + len > ctx.cfg.writer_cap_bytes {
            offset = 0;
        }
        ctx.io("writing", path, file.write_all_at(&chunk, offset))?;
        offset += len;
        unsynced_bytes += len;
        if unsynced_bytes >= ctx.cfg.fsync_every_bytes {
            ctx.io("syncing", path, file.sync_all())?;
            unsynced_bytes = 0;
        }
        ctx.done(len)?;
    }
    Ok(())
}

fn run_direct_writer(ctx: &Ctx, path: &Path, file: File, buf: AlignedBuf) -> Result<(), LoadError> {
    let len = ctx.cfg.write_bytes;
    let mut offset = 0u64;
    while ctx.running() {
        if offset + len > ctx.cfg.writer_cap_bytes {
            offset = 0;
        }
        debug_assert_eq!(offset % DIRECT_ALIGN_BYTES, 0);
        let written = file.write_all_at(buf.as_slice(), offset);
        ctx.io("writing (O_DIRECT)", path, written)?;
        offset += len;
        ctx.done(len)?;
    }
    Ok(())
}

/// `EINVAL` from an `O_DIRECT` open or aligned write means the file system has no direct I/O.
fn direct_io_error(ctx: &Ctx, path: &Path, source: io::Error) -> LoadError {
    if source.raw_os_error() == Some(libc::EINVAL) {
        LoadError::DirectIoUnsupported {
            path: path.to_path_buf(),
            source,
        }
    } else {
        LoadError::Io {
            kind: ctx.kind,
            what: "opening and writing with O_DIRECT",
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Opens `path` for direct I/O and proves one aligned write works: some file systems refuse
/// `O_DIRECT` at open, others only at the first write; either way the error says so plainly.
fn prepare_direct(ctx: &Ctx, path: &Path) -> Result<(File, AlignedBuf), LoadError> {
    let unsupported = |source| direct_io_error(ctx, path, source);
    let file = open_rw(path, true).map_err(unsupported)?;
    let mut buf = AlignedBuf::zeroed(ctx.cfg.write_bytes as usize, DIRECT_ALIGN_BYTES as usize);
    buf.as_mut_slice().fill(0x3c);
    let probe = &buf.as_slice()[..DIRECT_ALIGN_BYTES as usize];
    file.write_all_at(probe, 0).map_err(unsupported)?;
    Ok((file, buf))
}

type Body = Box<dyn FnOnce(&Ctx) -> Result<(), LoadError> + Send>;

/// Creates and fills `kind`'s files (each listed in `files` before it is created, so a failure
/// can remove it) and returns what the thread will run.
fn prepare(ctx: &Ctx, dir: &Path, files: &mut Vec<PathBuf>) -> Result<Option<Body>, LoadError> {
    static NEXT_LOAD: AtomicU64 = AtomicU64::new(0);
    let n = NEXT_LOAD.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let kind = ctx.kind;
    let mut file = |role: &str| {
        let path = dir.join(format!("tailbound-load-{pid}-{n}-{kind}-{role}"));
        files.push(path.clone());
        path
    };
    let body: Body = match kind {
        LoadKind::None => return Ok(None),
        LoadKind::BgTrunc => {
            let trunc = Truncator::prepare(ctx, file("trunc"))?;
            Box::new(move |ctx| run_truncation(ctx, trunc, None))
        }
        LoadKind::BgAll => {
            let trunc = Truncator::prepare(ctx, file("trunc"))?;
            let path = file("alloc");
            let alloc = Allocator {
                file: ctx.io("creating", &path, open_rw(&path, false))?,
                path,
            };
            Box::new(move |ctx| run_truncation(ctx, trunc, Some(alloc)))
        }
        LoadKind::SeqRead => {
            let path = file("read");
            let f = fill_file(ctx, &path, ctx.cfg.file_bytes)?;
            Box::new(move |ctx| run_seq_read(ctx, &path, f))
        }
        LoadKind::BufferedWriter => {
            let path = file("write");
            let f = ctx.io("creating", &path, open_rw(&path, false))?;
            Box::new(move |ctx| run_buffered_writer(ctx, &path, f))
        }
        LoadKind::DirectWriter => {
            let path = file("direct");
            let (f, buf) = prepare_direct(ctx, &path)?;
            Box::new(move |ctx| run_direct_writer(ctx, &path, f, buf))
        }
    };
    Ok(Some(body))
}

/// A running background load. Dropping it stops the thread and removes its files, discarding
/// any error; call [`Load::stop`] to see it.
pub struct Load {
    kind: LoadKind,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<Result<(), LoadError>>>,
    files: Vec<PathBuf>,
    started: Instant,
}

impl Load {
    /// Checks `cfg`, prepares the load's files in `dir` and starts its thread. Nothing is left
    /// in `dir` when this fails.
    pub fn start(kind: LoadKind, dir: &Path, cfg: &LoadConfig) -> Result<Load, LoadError> {
        cfg.check(kind)?;
        let ctx = Ctx {
            kind,
            cfg: cfg.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            #[cfg(test)]
            fail_at_op: None,
        };
        Load::start_ctx(ctx, dir)
    }

    fn start_ctx(ctx: Ctx, dir: &Path) -> Result<Load, LoadError> {
        let mut load = Load {
            kind: ctx.kind,
            stop: ctx.stop.clone(),
            counters: ctx.counters.clone(),
            thread: None,
            files: Vec::new(),
            started: Instant::now(),
        };
        // On failure `load` is dropped here, which removes whatever was created.
        let Some(body) = prepare(&ctx, dir, &mut load.files)? else {
            return Ok(load);
        };
        let kind = ctx.kind;
        let thread = std::thread::Builder::new()
            .name(format!("load-{kind}"))
            .spawn(move || body(&ctx))
            .map_err(|source| LoadError::Io {
                kind,
                what: "starting a thread for the load in",
                path: dir.to_path_buf(),
                source,
            })?;
        load.thread = Some(thread);
        load.started = Instant::now();
        Ok(load)
    }

    pub fn kind(&self) -> LoadKind {
        self.kind
    }

    /// Operations completed so far.
    pub fn ops(&self) -> u64 {
        self.counters.ops.load(Ordering::Relaxed)
    }

    /// Stops the load, removes its files and reports what it did, or the first error its
    /// thread hit (the files are removed either way).
    pub fn stop(mut self) -> Result<LoadReport, LoadError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<LoadReport, LoadError> {
        self.stop.store(true, Ordering::Relaxed);
        let result = match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or(Err(LoadError::Panicked { kind: self.kind })),
            None => Ok(()),
        };
        let elapsed = self.started.elapsed();
        for f in self.files.drain(..) {
            // Best effort: a file that is already gone is what we want.
            let _ = std::fs::remove_file(&f);
        }
        result?;
        Ok(LoadReport {
            kind: self.kind,
            ops: self.counters.ops.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
            elapsed,
        })
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if self.thread.is_some() || !self.files.is_empty() {
            let _ = self.halt();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> LoadConfig {
        LoadConfig {
            file_bytes: 4 << 20,
            period: Duration::from_millis(1),
            trunc_step_bytes: 256 << 10,
            read_bytes: 256 << 10,
            write_bytes: 256 << 10,
            fsync_every_bytes: 1 << 20,
            writer_cap_bytes: 4 << 20,
        }
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    /// Waits for `ops` operations (not for a time): every load must get going.
    fn wait_for_ops(load: &Load, ops: u64) {
        let give_up = Instant::now() + Duration::from_secs(60);
        while load.ops() < ops && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn names_round_trip_through_display_fromstr_and_serde() {
        for k in LoadKind::ALL {
            assert_eq!(k.to_string().parse::<LoadKind>().unwrap(), k);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<LoadKind>(&json).unwrap(), k);
        }
        let err = "heavy".parse::<LoadKind>().unwrap_err();
        assert!(err.to_string().contains("seq-read"), "{err}");
    }

    #[test]
    fn every_load_works_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        for kind in LoadKind::ALL {
            let load = Load::start(kind, dir.path(), &small()).unwrap();
            assert_eq!(load.kind(), kind);
            if kind == LoadKind::None {
                assert!(entries(dir.path()).is_empty());
            } else {
                assert!(!entries(dir.path()).is_empty(), "{kind} prepared no file");
                wait_for_ops(&load, 3);
            }
            let report = load.stop().unwrap();
            assert_eq!(report.kind, kind);
            if kind == LoadKind::None {
                assert_eq!((report.ops, report.bytes), (0, 0));
            } else {
                assert!(report.ops >= 3, "{kind}: {report:?}");
                assert!(report.bytes > 0, "{kind}: {report:?}");
            }
            let left = entries(dir.path());
            assert!(left.is_empty(), "{kind} left {left:?}");
        }
    }

    #[test]
    fn bgtrunc_allocates_again_when_the_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        // Two steps empty the file; the third allocates it whole again.
        let cfg = LoadConfig {
            file_bytes: 512 << 10,
            ..small()
        };
        let load = Load::start(LoadKind::BgTrunc, dir.path(), &cfg).unwrap();
        wait_for_ops(&load, 7);
        let report = load.stop().unwrap();
        assert!(report.ops >= 7, "{report:?}");
        // Each lap of three steps: 256 KiB, 256 KiB cut, then 512 KiB allocated.
        let laps = report.ops / 3;
        assert!(report.bytes >= laps * (1 << 20), "{report:?}");
    }

    #[test]
    fn two_loads_share_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let a = Load::start(LoadKind::BgTrunc, dir.path(), &small()).unwrap();
        let b = Load::start(LoadKind::BgTrunc, dir.path(), &small()).unwrap();
        assert_eq!(entries(dir.path()).len(), 2);
        a.stop().unwrap();
        b.stop().unwrap();
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn dropping_a_running_load_stops_it_and_removes_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let load = Load::start(LoadKind::BgAll, dir.path(), &small()).unwrap();
        assert_eq!(entries(dir.path()).len(), 2);
        drop(load);
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn an_error_in_the_thread_is_returned_by_stop_and_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx {
            kind: LoadKind::BufferedWriter,
            cfg: small(),
            stop: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            fail_at_op: Some(2),
        };
        let load = Load::start_ctx(ctx, dir.path()).unwrap();
        wait_for_ops(&load, 2);
        let err = load.stop().unwrap_err();
        assert!(err.to_string().contains("test failpoint"), "{err}");
        assert!(err.to_string().contains("buffered-writer"), "{err}");
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let err = Load::start(LoadKind::SeqRead, Path::new("/nonexistent/tb"), &small())
            .err()
            .expect("no directory");
        assert!(err.to_string().contains("/nonexistent/tb"), "{err}");
    }

    #[test]
    fn bad_configurations_are_refused_before_any_file_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                LoadKind::BgTrunc,
                LoadConfig {
                    period: Duration::ZERO,
                    ..small()
                },
            ),
            (
                LoadKind::SeqRead,
                LoadConfig {
                    read_bytes: 0,
                    ..small()
                },
            ),
            (
                LoadKind::BufferedWriter,
                LoadConfig {
                    writer_cap_bytes: 1,
                    ..small()
                },
            ),
            (
                LoadKind::DirectWriter,
                LoadConfig {
                    write_bytes: 1000,
                    ..small()
                },
            ),
        ];
        for (kind, cfg) in cases {
            let err = Load::start(kind, dir.path(), &cfg).err().expect("refused");
            assert!(matches!(err, LoadError::Config { .. }), "{kind}: {err}");
            assert!(err.to_string().contains(kind.name()), "{err}");
            assert!(entries(dir.path()).is_empty());
        }
        // `none` uses no setting, so any configuration will do.
        let zero = LoadConfig {
            file_bytes: 0,
            period: Duration::ZERO,
            ..small()
        };
        Load::start(LoadKind::None, dir.path(), &zero)
            .unwrap()
            .stop()
            .unwrap();
    }

    #[test]
    fn direct_writer_on_tmpfs_works_or_says_o_direct_is_unsupported() {
        // tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        match Load::start(LoadKind::DirectWriter, dir.path(), &small()) {
            Ok(load) => {
                wait_for_ops(&load, 1);
                assert!(load.stop().unwrap().ops >= 1);
            }
            Err(err) => {
                assert!(
                    matches!(err, LoadError::DirectIoUnsupported { .. }),
                    "{err}"
                );
                assert!(
                    err.to_string().contains("does not support O_DIRECT"),
                    "{err}"
                );
                assert!(err.to_string().contains("/dev/shm"), "{err}");
            }
        }
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn einval_from_direct_io_reads_as_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx {
            kind: LoadKind::DirectWriter,
            cfg: small(),
            stop: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            fail_at_op: None,
        };
        let err = direct_io_error(
            &ctx,
            &dir.path().join("x"),
            io::Error::from_raw_os_error(libc::EINVAL),
        );
        assert!(
            err.to_string().contains("does not support O_DIRECT"),
            "{err}"
        );
        let err = direct_io_error(
            &ctx,
            &dir.path().join("x"),
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(matches!(err, LoadError::Io { .. }), "{err}");
    }
}
