//! Workload generators with filebench's semantics (fileserver, varmail, webserver), written once
//! over the small [`WorkFs`] interface so kernel file systems, tbfs through the shim and tbfs's
//! native API all run the same code.
//!
//! A run has filebench's shape. A *fileset* of `files` entries in a directory tree of width
//! `dir_width` gets each entry's size drawn once from a gamma distribution (mean `mean_file_bytes`,
//! shape `gamma_shape`); `prealloc_pct` of the entries are created and written before the clock
//! starts. Then `threads` threads each loop over the workload's *flowops* for `duration`. Each
//! flowop is one operation, as filebench counts them: `createfile` takes an entry that does not
//! exist, `openfile`, `deletefile` and `statfile` take a random one that does (an entry is used by
//! one thread at a time), `writewholefile` writes the entry's size in `io_bytes` pieces,
//! `readwholefile` reads the file to its end in `io_bytes` pieces, `appendfilerand` appends a
//! uniformly random 1 .. 2 × `mean_append_bytes` - 1 bytes (mean `mean_append_bytes`).
//!
//! Every byte written is a function of the file and the offset, so a run with `verify` checks that
//! every read returns exactly what was written, and every `stat` the size the writes left.
//!
//! This module owns the fileset under the directory it is given; it does not clean up the file
//! system itself (the experiment throws the whole file system away).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};

mod flowops;
pub mod fs;
mod result;

pub use flowops::{Flowop, Step, Workload};
pub use fs::{PosixFs, TbfsFs, WorkFile, WorkFs};
pub use result::{EngineFigures, FlowopResult, RunResult};

/// The period of the data pattern; prime, so a block read from the wrong place does not match.
const PATTERN_PERIOD: usize = 251;

/// A run's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub workload: Workload,
    pub files: u64,
    pub dir_width: u64,
    pub mean_file_bytes: u64,
    pub gamma_shape: f64,
    pub io_bytes: u64,
    pub mean_append_bytes: u64,
    pub threads: u32,
    pub duration: Duration,
    /// Percent of the entries created before the clock starts.
    pub prealloc_pct: u32,
    pub seed: u64,
    /// Check every read and stat against what was written (costs a compare per byte read).
    pub verify: bool,
    /// Stop each thread after this many loops (`None`: run for `duration`). For tests.
    pub loops_max: Option<u64>,
    /// webserver: the append that takes the log past this many bytes cuts it to zero (log
    /// rotation), so a long run's log fits the room every system gets (filebench lets it grow).
    pub log_max_bytes: u64,
}

/// The name of the webserver's log file, at the top of the tree.
const LOG_NAME: &str = "logfile";

impl Params {
    /// filebench's `fileserver.f`: 10,000 files of mean 128 KiB (gamma, shape 1.5) in directories
    /// of width 20, 80 % preallocated, 1 MiB I/O, 16 KiB mean appends, 50 threads, 60 s.
    pub fn fileserver() -> Params {
        Params {
            workload: Workload::Fileserver,
            files: 10_000,
            dir_width: 20,
            mean_file_bytes: 128 << 10,
            gamma_shape: 1.5,
            io_bytes: 1 << 20,
            mean_append_bytes: 16 << 10,
            threads: 50,
            duration: Duration::from_secs(60),
            prealloc_pct: 80,
            seed: 0x5eed,
            verify: false,
            loops_max: None,
            log_max_bytes: 256 << 20,
        }
    }

    /// `varmail.f`: 1,000 files of mean 16 KiB in one directory, 80 % preallocated, 16 threads.
    pub fn varmail() -> Params {
        Params {
            workload: Workload::Varmail,
            files: 1_000,
            dir_width: 1_000_000,
            mean_file_bytes: 16 << 10,
            threads: 16,
            ..Params::fileserver()
        }
    }

    /// `webserver.f`: 1,000 files of mean 16 KiB in directories of width 20, all preallocated,
    /// 100 threads, and one log file every thread appends to.
    pub fn webserver() -> Params {
        Params {
            workload: Workload::Webserver,
            files: 1_000,
            mean_file_bytes: 16 << 10,
            threads: 100,
            prealloc_pct: 100,
            ..Params::fileserver()
        }
    }

    pub fn for_workload(workload: Workload) -> Params {
        match workload {
            Workload::Fileserver => Params::fileserver(),
            Workload::Varmail => Params::varmail(),
            Workload::Webserver => Params::webserver(),
        }
    }

    /// Checks the parameters before anything is created.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |m: &str| Err(WorkloadError::Invalid(m.to_string()));
        if self.files == 0 || self.files > u32::MAX as u64 {
            return bad("the number of files must be between 1 and 2^32 - 1");
        }
        if self.dir_width == 0 {
            return bad("the directory width must be at least 1");
        }
        if self.threads == 0 {
            return bad("at least one thread is needed");
        }
        if self.io_bytes == 0 || self.io_bytes > 1 << 30 {
            return bad("the I/O size must be between 1 byte and 1 GiB");
        }
        if self.mean_file_bytes == 0 || !(self.gamma_shape.is_finite() && self.gamma_shape > 0.0) {
            return bad("the mean file size and the gamma shape must be positive");
        }
        if self.mean_append_bytes == 0 {
            return bad("the mean append size must be positive");
        }
        if self.prealloc_pct > 100 {
            return bad("prealloc is a percentage (0-100)");
        }
        Ok(())
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    #[error("workload: {0}")]
    Invalid(String),
    #[error("{workload} setup: {source}")]
    Setup {
        workload: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{workload} {flowop}: {source}")]
    Flowop {
        workload: &'static str,
        flowop: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{workload} {flowop}: verification failed: {message}")]
    Verify {
        workload: &'static str,
        flowop: &'static str,
        message: String,
    },
    #[error("measuring CPU time: {0}")]
    Cpu(#[source] std::io::Error),
}

/// One entry of the fileset.
#[derive(Debug)]
struct Entry {
    path: String,
    /// The size `writewholefile` writes, drawn once.
    size: u64,
    /// The file's length now; only the thread holding the entry touches it.
    len: AtomicU64,
    /// Differs per file, so a block of one file is not mistaken for another's.
    salt: usize,
}

/// Entries by state; an entry being used by a thread is in neither list.
#[derive(Debug, Default)]
struct Pools {
    absent: Vec<u32>,
    present: Vec<u32>,
}

/// The files and directories of a run.
#[derive(Debug)]
pub struct Fileset {
    dirs: Vec<String>,
    entries: Vec<Entry>,
    pools: Mutex<Pools>,
    log_path: String,
    /// Bytes appended to the log since it was made or last cut ([`Params::log_max_bytes`]).
    log_bytes: AtomicU64,
    /// Set while a thread cuts the log.
    log_cutting: AtomicBool,
}

/// The tree path of entry `i`'s directory components, in base `width` over `depth` levels.
fn dir_components(leaf: u64, width: u64, depth: u32) -> Vec<u64> {
    let mut parts = vec![0; depth as usize];
    let mut rest = leaf;
    for part in parts.iter_mut().rev() {
        *part = rest % width;
        rest /= width;
    }
    parts
}

impl Fileset {
    /// Lays out the tree and draws each entry's size. Creates nothing.
    pub fn new<F: WorkFs>(fs: &F, p: &Params) -> Fileset {
        let leaves = p.files.div_ceil(p.dir_width);
        let mut depth = 1u32;
        let mut span = p.dir_width;
        while span < leaves {
            span = span.saturating_mul(p.dir_width);
            depth += 1;
        }
        let digits = (p.dir_width.saturating_sub(1)).to_string().len().max(2);
        let dir_name = |parts: &[u64]| -> String {
            parts
                .iter()
                .map(|d| format!("/d{d:0digits$}"))
                .collect::<String>()
        };
        let mut dirs = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for leaf in 0..leaves {
            let parts = dir_components(leaf, p.dir_width, depth);
            for level in 1..=parts.len() {
                let name = dir_name(&parts[..level]);
                if seen.insert(name.clone()) {
                    dirs.push(name);
                }
            }
        }
        let gamma = Gamma::new(p.gamma_shape, p.mean_file_bytes as f64 / p.gamma_shape)
            .expect("shape and scale checked positive by validate");
        let mut rng = SmallRng::seed_from_u64(p.seed);
        let entries = (0..p.files)
            .map(|i| {
                let parts = dir_components(i / p.dir_width, p.dir_width, depth);
                let rel = format!("{}/f{i:07}", dir_name(&parts));
                Entry {
                    path: fs.path(&rel),
                    size: gamma.sample(&mut rng).round() as u64,
                    len: AtomicU64::new(0),
                    salt: (i as usize * 7) % PATTERN_PERIOD,
                }
            })
            .collect();
        Fileset {
            dirs: dirs.iter().map(|d| fs.path(d)).collect(),
            entries,
            pools: Mutex::new(Pools::default()),
            log_path: fs.path(LOG_NAME),
            log_bytes: AtomicU64::new(0),
            log_cutting: AtomicBool::new(false),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every directory, parents before children.
    pub fn dirs(&self) -> &[String] {
        &self.dirs
    }

    /// The sizes `writewholefile` writes, per entry.
    pub fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().map(|e| e.size)
    }

    pub fn path(&self, i: usize) -> &str {
        &self.entries[i].path
    }

    /// How many entries exist as files now (those in use by a thread not counted).
    pub fn present(&self) -> usize {
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .present
            .len()
    }

    /// Keeps, of the idle entries, only share `k` of `n` (entry `i` where `i % n == k`): a worker
    /// process of the process model draws from its own share, so two processes never hold
    /// one file at once (filebench shares one fileset in shared memory with a lock per entry
    /// instead; the two differ only in which files two processes could touch together).
    pub fn keep_share(&self, k: u32, n: u32) {
        assert!(k < n, "share {k} of {n}");
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let mine = |e: &u32| e % n == k;
        pools.present.retain(mine);
        pools.absent.retain(mine);
    }

    /// Takes a random idle entry that exists (`present`) or does not; `None` when there is none.
    fn take(&self, present: bool, rng: &mut SmallRng) -> Option<usize> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let list = if present {
            &mut pools.present
        } else {
            &mut pools.absent
        };
        if list.is_empty() {
            return None;
        }
        let at = rng.random_range(0..list.len());
        Some(list.swap_remove(at) as usize)
    }

    fn put(&self, entry: usize, present: bool) {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if present {
            pools.present.push(entry as u32);
        } else {
            pools.absent.push(entry as u32);
        }
    }
}

/// Bytes whose value depends on the file and the offset: `pattern[(offset + salt) % PERIOD ..]`.
struct Pattern {
    bytes: Vec<u8>,
}

impl Pattern {
    fn new(io_bytes: u64) -> Pattern {
        Pattern {
            bytes: (0..io_bytes as usize + PATTERN_PERIOD)
                .map(|k| (k % PATTERN_PERIOD) as u8)
                .collect(),
        }
    }

    /// What a file with `salt` holds at `offset .. offset + len` (`len` at most the I/O size).
    fn at(&self, salt: usize, offset: u64, len: usize) -> &[u8] {
        let start = ((offset % PATTERN_PERIOD as u64) as usize + salt) % PATTERN_PERIOD;
        &self.bytes[start..start + len]
    }
}

/// Writes `len` bytes of entry `e`'s pattern from offset `from` through `file`, in I/O-size pieces.
fn write_pattern<W: WorkFile>(
    file: &mut W,
    pattern: &Pattern,
    e: &Entry,
    from: u64,
    len: u64,
    io_bytes: u64,
    append: bool,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(io_bytes) as usize;
        let chunk = pattern.at(e.salt, from + done, n);
        if append {
            file.append_all(chunk)?;
        } else {
            file.write_all(chunk)?;
        }
        done += n as u64;
    }
    Ok(())
}

/// Creates the directories and the preallocated files, and fills the state lists.
pub fn setup<F: WorkFs>(fs: &F, set: &Fileset, p: &Params) -> Result<(), WorkloadError> {
    let wrap = |source| WorkloadError::Setup {
        workload: p.workload.name(),
        source,
    };
    for d in &set.dirs {
        fs.mkdir(d).map_err(wrap)?;
    }
    let pattern = Pattern::new(p.io_bytes);
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x9e37_79b9);
    let mut order: Vec<u32> = (0..set.len() as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let created = (set.len() as u64 * u64::from(p.prealloc_pct) / 100) as usize;
    let mut pools = Pools::default();
    for (k, &i) in order.iter().enumerate() {
        if k < created {
            let e = &set.entries[i as usize];
            let mut f = fs.create(&e.path).map_err(wrap)?;
            write_pattern(&mut f, &pattern, e, 0, e.size, p.io_bytes, false).map_err(wrap)?;
            e.len.store(e.size, Ordering::Relaxed);
            pools.present.push(i);
        } else {
            pools.absent.push(i);
        }
    }
    *set.pools.lock().unwrap_or_else(|p| p.into_inner()) = pools;
    if p.workload == Workload::Webserver {
        let mut log = fs.open_append(&set.log_path).map_err(wrap)?;
        let e = &set.entries[0];
        let size = e.size.min(p.io_bytes);
        log.append_all(pattern.at(0, 0, size as usize))
            .map_err(wrap)?;
        set.log_bytes.store(size, Ordering::Relaxed);
    }
    Ok(())
}

/// Per-flowop counters of one thread.
#[derive(Debug, Clone, Copy, Default)]
struct OpStat {
    ops: u64,
    nanos: u64,
    bytes: u64,
}

/// What one thread did.
struct ThreadOut {
    stats: Vec<OpStat>,
}

/// Runs the workload's loop on `threads` threads over a fileset already [`setup`], for the
/// duration (or `loops_max` loops each), and measures it.
pub fn run_loops<F: WorkFs>(
    fs: &F,
    set: &Fileset,
    p: &Params,
    setup_s: f64,
    mut trace: Option<&mut dyn FnMut(u32, &'static str)>,
) -> Result<RunResult, WorkloadError> {
    let flowops = p.workload.flowops();
    let pattern = Pattern::new(p.io_bytes);
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(p.threads as usize + 1);
    let trace_log: Mutex<Vec<(u32, &'static str)>> = Mutex::new(Vec::new());
    let tracing = trace.is_some();
    let (outs, elapsed, cpu_before, cpu_after) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let flowops = &flowops;
                let pattern = &pattern;
                let stop = &stop;
                let start_line = &start_line;
                let trace_log = &trace_log;
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(p.seed.wrapping_add(u64::from(t) + 1));
                    let mut log = if p.workload == Workload::Webserver {
                        fs.open_append(&set.log_path).map(Some)
                    } else {
                        Ok(None)
                    };
                    start_line.wait();
                    let log = log.as_mut().map_err(|e| WorkloadError::Flowop {
                        workload: p.workload.name(),
                        flowop: "appendlog",
                        source: std::io::Error::new(e.kind(), e.to_string()),
                    })?;
                    let mut out = ThreadOut {
                        stats: vec![OpStat::default(); flowops.len()],
                    };
                    let mut trace_fn = |name: &'static str| {
                        if tracing {
                            trace_log
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push((t, name));
                        }
                    };
                    let result = thread_loop(
                        fs,
                        set,
                        p,
                        flowops,
                        pattern,
                        stop,
                        &mut rng,
                        log.as_mut(),
                        &mut out,
                        &mut trace_fn,
                    );
                    // Whatever happens, the other threads stop too.
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result.map(|()| out)
                })
            })
            .collect();
        let cpu_before = tailbound::sys::proc::process_cpu_times();
        let started = Instant::now();
        start_line.wait();
        if p.loops_max.is_none() {
            let until = started + p.duration;
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                std::thread::sleep((until - now).min(Duration::from_millis(50)));
            }
            stop.store(true, Ordering::Relaxed);
        }
        let outs: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a workload thread panicked"))
            .collect();
        let elapsed = started.elapsed();
        let cpu_after = tailbound::sys::proc::process_cpu_times();
        (outs, elapsed, cpu_before, cpu_after)
    });
    let cpu_before = cpu_before.map_err(WorkloadError::Cpu)?;
    let cpu_after = cpu_after.map_err(WorkloadError::Cpu)?;
    let mut total = vec![OpStat::default(); flowops.len()];
    for out in outs {
        for (sum, s) in total.iter_mut().zip(out?.stats) {
            sum.ops += s.ops;
            sum.nanos += s.nanos;
            sum.bytes += s.bytes;
        }
    }
    if let Some(trace) = trace.as_mut() {
        for (t, name) in trace_log.into_inner().unwrap_or_else(|p| p.into_inner()) {
            trace(t, name);
        }
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mib = (1u64 << 20) as f64;
    let flowop_results: Vec<FlowopResult> = flowops
        .iter()
        .zip(&total)
        .map(|(f, s)| FlowopResult {
            name: f.name.to_string(),
            ops: s.ops,
            ops_per_s: s.ops as f64 / secs,
            mean_latency_us: if s.ops > 0 {
                s.nanos as f64 / s.ops as f64 / 1e3
            } else {
                0.0
            },
            bytes: s.bytes,
            mb_per_s: s.bytes as f64 / mib / secs,
        })
        .collect();
    let ops: u64 = total.iter().map(|s| s.ops).sum();
    let bytes: u64 = total.iter().map(|s| s.bytes).sum();
    let cpus = tailbound::sys::proc::online_cpus();
    let user = cpu_after.user.saturating_sub(cpu_before.user).as_secs_f64();
    let sys = cpu_after
        .system
        .saturating_sub(cpu_before.system)
        .as_secs_f64();
    let capacity = secs * cpus as f64;
    Ok(RunResult {
        workload: p.workload,
        processes: 0,
        threads: p.threads,
        files: p.files,
        mean_file_kib: p.mean_file_bytes >> 10,
        elapsed_s: secs,
        setup_s,
        mkfs_s: 0.0,
        ops,
        ops_per_s: ops as f64 / secs,
        bytes,
        mb_per_s: bytes as f64 / mib / secs,
        user_cpu_s: user,
        sys_cpu_s: sys,
        cpus,
        user_cpu_pct: 100.0 * user / capacity,
        sys_cpu_pct: 100.0 * sys / capacity,
        flowops: flowop_results,
        engine: None,
    })
}

/// Sets up a fresh fileset on `fs` and runs the workload on it.
pub fn run<F: WorkFs>(fs: &F, p: &Params) -> Result<RunResult, WorkloadError> {
    run_marked(fs, p, || {})
}

/// [`run`], calling `mark` once the fileset is made and again once the measured run is over.
pub fn run_marked<F: WorkFs>(
    fs: &F,
    p: &Params,
    mut mark: impl FnMut(),
) -> Result<RunResult, WorkloadError> {
    p.validate()?;
    let started = Instant::now();
    let set = Fileset::new(fs, p);
    setup(fs, &set, p)?;
    mark();
    let result = run_loops(fs, &set, p, started.elapsed().as_secs_f64(), None);
    mark();
    result
}

/// The file a thread has open, and its entry.
struct Held<W> {
    file: W,
    entry: usize,
}

#[allow(clippy::too_many_arguments)]
fn thread_loop<F: WorkFs>(
    fs: &F,
    set: &Fileset,
    p: &Params,
    flowops: &[Flowop],
    pattern: &Pattern,
    stop: &AtomicBool,
    rng: &mut SmallRng,
    mut log: Option<&mut F::File>,
    out: &mut ThreadOut,
    trace: &mut dyn FnMut(&'static str),
) -> Result<(), WorkloadError> {
    let workload = p.workload.name();
    let mut held: Option<Held<F::File>> = None;
    let mut read_buf = vec![0u8; p.io_bytes as usize];
    let append_max = 2 * p.mean_append_bytes - 1;
    let mut loops = 0u64;
    'outer: loop {
        if p.loops_max.is_some_and(|max| loops >= max) {
            break;
        }
        for (k, op) in flowops.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break 'outer;
            }
            let fail = |source: std::io::Error| WorkloadError::Flowop {
                workload,
                flowop: op.name,
                source,
            };
            let verify_err = |message: String| WorkloadError::Verify {
                workload,
                flowop: op.name,
                message,
            };
            let t0 = Instant::now();
            let mut bytes = 0u64;
            match op.step {
                Step::Create => {
                    if held.is_some() {
                        continue;
                    }
                    let Some(i) = set.take(false, rng) else {
                        continue;
                    };
                    let e = &set.entries[i];
                    match fs.create(&e.path) {
                        Ok(file) => {
                            e.len.store(0, Ordering::Relaxed);
                            held = Some(Held { file, entry: i });
                        }
                        Err(err) => {
                            set.put(i, false);
                            return Err(fail(err));
                        }
                    }
                }
                Step::Open => {
                    if held.is_some() {
                        continue;
                    }
                    let Some(i) = set.take(true, rng) else {
                        continue;
                    };
                    match fs.open(&set.entries[i].path) {
                        Ok(file) => held = Some(Held { file, entry: i }),
                        Err(err) => {
                            set.put(i, true);
                            return Err(fail(err));
                        }
                    }
                }
                Step::WriteWhole => {
                    let Some(h) = held.as_mut() else { continue };
                    let e = &set.entries[h.entry];
                    let from = e.len.load(Ordering::Relaxed);
                    write_pattern(&mut h.file, pattern, e, from, e.size, p.io_bytes, false)
                        .map_err(fail)?;
                    e.len.store(from + e.size, Ordering::Relaxed);
                    bytes = e.size;
                }
                Step::Append => {
                    let Some(h) = held.as_mut() else { continue };
                    let e = &set.entries[h.entry];
                    let n = rng.random_range(1..=append_max);
                    let from = e.len.load(Ordering::Relaxed);
                    write_pattern(&mut h.file, pattern, e, from, n, p.io_bytes, true)
                        .map_err(fail)?;
                    e.len.store(from + n, Ordering::Relaxed);
                    bytes = n;
                }
                Step::AppendLog => {
                    let Some(log) = log.as_mut() else { continue };
                    let n = rng.random_range(1..=append_max).min(p.io_bytes);
                    log.append_all(pattern.at(0, 0, n as usize)).map_err(fail)?;
                    bytes = n;
                    // The first thread to find the log past its bound cuts it, the others
                    // go on appending. The count restarts before the cut: appends that land in
                    // between are cut with the log and counted towards the next bound, so the
                    // log never holds more than the count.
                    let total = set.log_bytes.fetch_add(n, Ordering::AcqRel) + n;
                    if total >= p.log_max_bytes && !set.log_cutting.swap(true, Ordering::AcqRel) {
                        set.log_bytes.store(0, Ordering::Release);
                        let cut = log.truncate();
                        set.log_cutting.store(false, Ordering::Release);
                        cut.map_err(fail)?;
                    }
                }
                Step::ReadWhole => {
                    let Some(h) = held.as_mut() else { continue };
                    let e = &set.entries[h.entry];
                    loop {
                        let n = h.file.read(&mut read_buf).map_err(fail)?;
                        if n == 0 {
                            break;
                        }
                        if p.verify && read_buf[..n] != *pattern.at(e.salt, bytes, n) {
                            return Err(verify_err(format!(
                                "{}: {n} bytes at offset {bytes} differ from what was written",
                                e.path
                            )));
                        }
                        bytes += n as u64;
                    }
                    let len = e.len.load(Ordering::Relaxed);
                    if p.verify && bytes != len {
                        return Err(verify_err(format!(
                            "{}: read {bytes} bytes of a file of {len}",
                            e.path
                        )));
                    }
                }
                Step::Fsync => {
                    let Some(h) = held.as_mut() else { continue };
                    h.file.fsync().map_err(fail)?;
                }
                Step::Close => {
                    let Some(h) = held.take() else { continue };
                    drop(h.file);
                    set.put(h.entry, true);
                }
                Step::Delete => {
                    let Some(i) = set.take(true, rng) else {
                        continue;
                    };
                    let result = fs.delete(&set.entries[i].path);
                    set.put(i, result.is_err());
                    result.map_err(fail)?;
                }
                Step::Stat => {
                    let Some(i) = set.take(true, rng) else {
                        continue;
                    };
                    let e = &set.entries[i];
                    let result = fs.stat(&e.path);
                    // Read before the entry goes back: another thread may change it after.
                    let len = e.len.load(Ordering::Relaxed);
                    set.put(i, true);
                    let size = result.map_err(fail)?;
                    if p.verify && size != len {
                        return Err(verify_err(format!(
                            "{}: stat says {size} bytes, the writes left {len}",
                            e.path
                        )));
                    }
                }
            }
            let s = &mut out.stats[k];
            s.ops += 1;
            s.nanos += t0.elapsed().as_nanos() as u64;
            s.bytes += bytes;
            trace(op.name);
        }
        loops += 1;
    }
    if let Some(h) = held.take() {
        drop(h.file);
        set.put(h.entry, true);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
