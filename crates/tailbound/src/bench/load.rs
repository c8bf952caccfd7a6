//! Background loads that compete with a measurement for the file system and the device.
//!
//! Each load prepares its files in [`Load::start`] (so preparation never overlaps a measurement),
//! runs on its own thread until [`Load::stop`], and removes its files when stopped or dropped.
//!
//! | load | what it does (defaults) |
//! |---|---|
//! | `none` | nothing |
//! | `bgtrunc` | the paper's: a 100 MiB `fallocate`d file truncated by 256 KiB every 5 ms; re-allocated when empty |
//! | `bgall` | `bgtrunc`, plus every 5 ms on a second file `ftruncate(0)` then `fallocate` 100 MiB |
//! | `seq-read` | a 100 MiB file read sequentially in 2 MiB reads, its cache dropped every lap so reads reach the device |
//! | `buffered-writer` | 1 MiB buffered writes as fast as possible, `fsync` every 64 MiB, wrapping at 1 GiB |
//! | `direct-writer` | `O_DIRECT` 1 MiB writes as fast as possible, wrapping at 1 GiB |

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bench::timer::PeriodicTimer;
use crate::sys::file::{fadvise, fallocate, Advice, AlignedBuf, Allocate, O_DIRECT};

/// Which background load to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadKind {
    None,
    BgTrunc,
    BgAll,
    SeqRead,
    BufferedWriter,
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
    pub trunc_step_bytes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
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
}

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("unknown load {0:?} (one of none, bgtrunc, bgall, seq-read, buffered-writer, direct-writer)")]
    UnknownKind(String),
    #[error("load {kind}: {what} {path}: {source}")]
    Io {
        kind: LoadKind,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("load {kind}: its thread panicked")]
    Panicked { kind: LoadKind },
}

/// What a load did while it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    pub kind: LoadKind,
    /// Operations completed (truncations, allocations, reads or writes).
    pub ops: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

#[derive(Default)]
struct Counters {
    ops: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    fn add(&self, bytes: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A running background load.
pub struct Load {
    kind: LoadKind,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<Result<(), LoadError>>>,
    files: Vec<PathBuf>,
    started: Instant,
}

struct Ctx {
    kind: LoadKind,
    cfg: LoadConfig,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
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
}

fn open_rw(path: &Path, direct: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    if direct {
        options.custom_flags(O_DIRECT);
    }
    options.open(path)
}

/// Truncates `file` by one step every period; refills it with `fallocate` when it is empty.
struct Truncator {
    file: File,
    path: PathBuf,
    size: u64,
}

impl Truncator {
    fn prepare(ctx: &Ctx, path: PathBuf) -> Result<Truncator, LoadError> {
        let file = ctx.io("creating", &path, open_rw(&path, false))?;
        let size = ctx.cfg.file_bytes;
        ctx.io(
            "allocating",
            &path,
            fallocate(&file, 0, size, Allocate::Grow),
        )?;
        Ok(Truncator { file, path, size })
    }

    fn step(&mut self, ctx: &Ctx) -> Result<(), LoadError> {
        if self.size == 0 {
            self.size = ctx.cfg.file_bytes;
            ctx.io(
                "allocating",
                &self.path,
                fallocate(&self.file, 0, self.size, Allocate::Grow),
            )?;
        } else {
            self.size = self.size.saturating_sub(ctx.cfg.trunc_step_bytes);
            ctx.io("truncating", &self.path, self.file.set_len(self.size))?;
        }
        ctx.counters.add(ctx.cfg.trunc_step_bytes);
        Ok(())
    }
}

/// Every period, `ftruncate(0)` then `fallocate(file_bytes)` on its own file.
struct Allocator {
    file: File,
    path: PathBuf,
}

impl Allocator {
    fn step(&mut self, ctx: &Ctx) -> Result<(), LoadError> {
        ctx.io("truncating", &self.path, self.file.set_len(0))?;
        ctx.io(
            "allocating",
            &self.path,
            fallocate(&self.file, 0, ctx.cfg.file_bytes, Allocate::Grow),
        )?;
        ctx.counters.add(ctx.cfg.file_bytes);
        Ok(())
    }
}

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
    ctx.io(
        "dropping the cache of",
        path,
        fadvise(&file, 0, 0, Advice::DontNeed),
    )?;
    Ok(file)
}

fn run_paced(
    ctx: &Ctx,
    mut step: impl FnMut(&Ctx) -> Result<(), LoadError>,
) -> Result<(), LoadError> {
    let mut timer = PeriodicTimer::new(ctx.cfg.period);
    while ctx.running() {
        let tick = timer.wait();
        ctx.io("sleeping", Path::new("-"), tick)?;
        step(ctx)?;
        timer.skip_missed();
    }
    Ok(())
}

fn run_seq_read(ctx: &Ctx, path: &Path, mut file: File) -> Result<(), LoadError> {
    let mut buf = vec![0u8; ctx.cfg.read_bytes as usize];
    while ctx.running() {
        let n = ctx.io("reading", path, file.read(&mut buf))?;
        if n == 0 {
            ctx.io(
                "dropping the cache of",
                path,
                fadvise(&file, 0, 0, Advice::DontNeed),
            )?;
            ctx.io("rewinding", path, file.seek(SeekFrom::Start(0)))?;
            continue;
        }
        ctx.counters.add(n as u64);
    }
    Ok(())
}

fn run_buffered_writer(ctx: &Ctx, path: &Path, file: File) -> Result<(), LoadError> {
    let chunk = vec![0xa5u8; ctx.cfg.write_bytes as usize];
    let (mut offset, mut since_fsync) = (0u64, 0u64);
    while ctx.running() {
        if offset + chunk.len() as u64 > ctx.cfg.writer_cap_bytes {
            offset = 0;
        }
        ctx.io("writing", path, file.write_all_at(&chunk, offset))?;
        offset += chunk.len() as u64;
        since_fsync += chunk.len() as u64;
        ctx.counters.add(chunk.len() as u64);
        if since_fsync >= ctx.cfg.fsync_every_bytes {
            ctx.io("syncing", path, file.sync_all())?;
            since_fsync = 0;
        }
    }
    Ok(())
}

fn run_direct_writer(ctx: &Ctx, path: &Path, file: File) -> Result<(), LoadError> {
    let mut buf = AlignedBuf::zeroed(ctx.cfg.write_bytes as usize, 4096);
    buf.as_mut_slice().fill(0x3c);
    let mut offset = 0u64;
    while ctx.running() {
        if offset + ctx.cfg.write_bytes > ctx.cfg.writer_cap_bytes {
            offset = 0;
        }
        ctx.io(
            "writing (O_DIRECT)",
            path,
            file.write_all_at(buf.as_slice(), offset),
        )?;
        offset += ctx.cfg.write_bytes;
        ctx.counters.add(ctx.cfg.write_bytes);
    }
    Ok(())
}

impl Load {
    /// Prepares the load's files in `dir` and starts it.
    pub fn start(kind: LoadKind, dir: &Path, cfg: &LoadConfig) -> Result<Load, LoadError> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let ctx = Ctx {
            kind,
            cfg: cfg.clone(),
            stop: stop.clone(),
            counters: counters.clone(),
        };
        let file = |name: &str| dir.join(format!("tailbound-load-{kind}-{name}"));
        let mut files = Vec::new();
        let load = |ctx: Ctx,
                    files: Vec<PathBuf>,
                    body: Box<dyn FnOnce(Ctx) -> Result<(), LoadError> + Send>|
         -> Result<Load, LoadError> {
            let thread = std::thread::Builder::new()
                .name(format!("load-{kind}"))
                .spawn(move || body(ctx))
                .map_err(|source| LoadError::Io {
                    kind,
                    what: "starting a thread for",
                    path: dir.to_path_buf(),
                    source,
                })?;
            Ok(Load {
                kind,
                stop: stop.clone(),
                counters: counters.clone(),
                thread: Some(thread),
                files,
                started: Instant::now(),
            })
        };
        // Files are recorded before preparation, so a failed preparation still removes them.
        let cleanup = |files: &[PathBuf]| {
            for f in files {
                let _ = std::fs::remove_file(f);
            }
        };
        let prepared: Result<Load, LoadError> = (|| match kind {
            LoadKind::None => load(ctx, Vec::new(), Box::new(|_| Ok(()))),
            LoadKind::BgTrunc | LoadKind::BgAll => {
                files.push(file("trunc"));
                let mut trunc = Truncator::prepare(&ctx, files[0].clone())?;
                let mut alloc = if kind == LoadKind::BgAll {
                    let path = file("alloc");
                    files.push(path.clone());
                    let f = ctx.io("creating", &path, open_rw(&path, false))?;
                    Some(Allocator { file: f, path })
                } else {
                    None
                };
                load(
                    ctx,
                    files.clone(),
                    Box::new(move |ctx| {
                        let r = run_paced(&ctx, |ctx| {
                            trunc.step(ctx)?;
                            if let Some(a) = alloc.as_mut() {
                                a.step(ctx)?;
                            }
                            Ok(())
                        });
                        drop((trunc.file, alloc));
                        r
                    }),
                )
            }
            LoadKind::SeqRead => {
                let path = file("read");
                files.push(path.clone());
                let f = fill_file(&ctx, &path, cfg.file_bytes)?;
                load(
                    ctx,
                    files.clone(),
                    Box::new(move |ctx| run_seq_read(&ctx, &path, f)),
                )
            }
            LoadKind::BufferedWriter => {
                let path = file("write");
                files.push(path.clone());
                let f = ctx.io("creating", &path, open_rw(&path, false))?;
                load(
                    ctx,
                    files.clone(),
                    Box::new(move |ctx| run_buffered_writer(&ctx, &path, f)),
                )
            }
            LoadKind::DirectWriter => {
                let path = file("direct");
                files.push(path.clone());
                let f = ctx.io("opening with O_DIRECT", &path, open_rw(&path, true))?;
                // Probe once: tmpfs and some others refuse O_DIRECT at open, others at write.
                let probe = AlignedBuf::zeroed(4096, 4096);
                ctx.io(
                    "writing (O_DIRECT)",
                    &path,
                    f.write_all_at(probe.as_slice(), 0),
                )?;
                load(
                    ctx,
                    files.clone(),
                    Box::new(move |ctx| run_direct_writer(&ctx, &path, f)),
                )
            }
        })();
        if prepared.is_err() {
            cleanup(&files);
        }
        prepared
    }

    pub fn kind(&self) -> LoadKind {
        self.kind
    }

    /// Stops the load, removes its files and reports what it did, or the first error it hit.
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
        for f in self.files.drain(..) {
            let _ = std::fs::remove_file(&f);
        }
        result?;
        Ok(LoadReport {
            kind: self.kind,
            ops: self.counters.ops.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
            elapsed: self.started.elapsed(),
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

    #[test]
    fn names_round_trip() {
        for k in LoadKind::ALL {
            assert_eq!(k.to_string().parse::<LoadKind>().unwrap(), k);
        }
        assert!("heavy".parse::<LoadKind>().is_err());
    }

    #[test]
    fn every_load_works_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        for kind in LoadKind::ALL {
            let load = Load::start(kind, dir.path(), &small()).unwrap();
            // Wait for work rather than for time: each load must get going.
            let deadline = Instant::now() + Duration::from_secs(30);
            while kind != LoadKind::None
                && load.counters.ops.load(Ordering::Relaxed) < 3
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            let report = load.stop().unwrap();
            assert_eq!(report.kind, kind);
            if kind == LoadKind::None {
                assert_eq!(report.ops, 0);
            } else {
                assert!(report.ops >= 3, "{kind}: {report:?}");
                assert!(report.bytes > 0, "{kind}: {report:?}");
            }
            let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert!(left.is_empty(), "{kind} left {left:?}");
        }
    }

    #[test]
    fn dropping_a_running_load_stops_it_and_removes_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let load = Load::start(LoadKind::BgAll, dir.path(), &small()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        drop(load);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let err = Load::start(LoadKind::SeqRead, Path::new("/nonexistent/tb"), &small())
            .err()
            .expect("no directory");
        assert!(err.to_string().contains("/nonexistent/tb"), "{err}");
    }
}
