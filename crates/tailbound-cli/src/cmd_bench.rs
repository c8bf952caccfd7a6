//! `tailbound bench`: each paper's experiment, run side by side against the kernel's conventional
//! path on this machine, printed as a Markdown table, with `--json` and `--svg` outputs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use tailbound::bench::experiments::loopfs::LoopFs;
use tailbound::bench::experiments::record::{self, RecordBench};
use tailbound::bench::experiments::recovery::{
    self, ChildSpec, CrashKind, RecoveryBench, Workload,
};
use tailbound::bench::experiments::sync_write::{self, SyncWriteBench};
use tailbound::bench::plot::{grouped_bar_svg, latency_boxplot_svg};
use tailbound::bench::report::write_json;
use tailbound::units::{parse_bytes, parse_duration};

use crate::CliResult;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Subcommand)]
enum Experiment {
    /// Real-time recording (seed 000, Table 1): write() latency of 16 KiB every 5 ms for the paper's
    /// designs and tailbound's recorder modes, under background loads.
    ///
    /// Each case records `--writes` records per set, `--sets` times, and reports the worst set (the
    /// one with the largest maximum), like the paper. The full run (5 sets x 10,000 writes x 47 cases)
    /// takes about three and a half hours; `--quick` takes about two minutes. Cases that turn the kernel flusher
    /// off need root and are reported as skipped otherwise. FLOOR is the same loop with no I/O: the
    /// machine's own noise.
    Record(RecordArgs),
    /// O_SYNC throughput (Table 2, Fig. 6-7): an iozone-like write, rewrite and random-rewrite of
    /// one file opened with O_SYNC, in MB/s, for tbfs {strict, relaxed} x {every-checkpoint,
    /// superblock} (and relaxed x every-log) on the file backend, and for ext4, in one run.
    ///
    /// Each case (a configuration and a buffer size) writes the file three times: `write` creates
    /// it, `rewrite` writes it again in order, `random-rewrite` writes every buffer-sized block once
    /// in a seeded random order. MB/s (MB = 2^20 bytes) is bytes over the time of the writes only.
    /// The tbfs pool file and the ext4 file sit in one directory, so on one disk; with --loop-ext4
    /// both sit on a fresh loop-mounted ext4 (root). The full run (128 MiB, 6 configurations x 2
    /// buffers) took 2 to 4 minutes on a VM disk and takes longer where flushes are slow; --quick
    /// writes 8 MiB. Ratios (relaxed/strict, tbfs relaxed/ext4) and the targets follow
    /// the table.
    SyncWrite(SyncWriteArgs),
    /// Recovery time after a crash: a pool with 1 GB written (relaxed ordering) is crashed at
    /// random points and the wall time of opening it (superblock, checkpoint, roll-forward) is
    /// reported as mean and max over the trials, for the superblock barrier policy and, for
    /// comparison, every-checkpoint.
    ///
    /// Two kinds of crash: `sim` cuts the power of the simulated device (in memory: the pool takes
    /// its size in RAM, one trial at a time) a random number of writes after a random point;
    /// `kill` runs the workload in a child `tailbound` process on the file backend and kills it
    /// with SIGKILL at a random point. The workload writes 32 MiB files with O_SYNC, then rewrites
    /// each in place, 64 KiB per write; the crash falls in the second half of the bytes written.
    /// The full run (1 GB, 5 trials x 2 kinds x 2 barriers) writes 20 GB, about 2 minutes on a VM
    /// disk; --quick writes 64 MiB per trial.
    Recovery(RecoveryArgs),
}

#[derive(Args)]
struct RecoveryArgs {
    /// 64 MiB written per trial and 2 trials per row, a few seconds in all.
    #[arg(long)]
    quick: bool,
    /// Trials (crashes) per kind and barrier. Default: 5, or 2 with --quick.
    #[arg(long)]
    trials: Option<u32>,
    /// MB (2^20 bytes) written before the crash point's range ends. Default: 1024, or 64 with --quick.
    #[arg(long)]
    written_mb: Option<u64>,
    /// The pool's size in MB (2^20 bytes). Default: twice what is written, plus 64.
    #[arg(long)]
    pool_mb: Option<u64>,
    /// Bytes per write of the workload.
    #[arg(long, value_parser = parse_bytes, default_value = "64KiB")]
    buffer: u64,
    /// Comma-separated barrier policies: superblock, every-checkpoint, every-log.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "superblock,every-checkpoint"
    )]
    barriers: Vec<String>,
    /// Comma-separated kinds of crash: sim (power cut on the simulated device), kill (SIGKILL of a
    /// child writing through the file backend).
    #[arg(long, value_delimiter = ',', default_value = "sim,kill")]
    kinds: Vec<String>,
    /// Seed of the crash points.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Directory for the kill trials' pool file (default: a new temporary directory under
    /// /var/tmp, removed afterwards). The pool file is removed when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run as the child of a kill trial (internal).
    #[arg(long, hide = true, requires = "pool")]
    child: bool,
    /// The child's pool file (internal).
    #[arg(long, hide = true)]
    pool: Option<PathBuf>,
    /// The child's exact bytes to write (internal).
    #[arg(long, hide = true)]
    written_bytes: Option<u64>,
}

#[derive(Args)]
struct SyncWriteArgs {
    /// An 8 MiB file instead of 128 MiB (every case, both buffer sizes), well under a minute.
    #[arg(long)]
    quick: bool,
    /// File size (a whole number of buffers). Default: 128MiB, or 8MiB with --quick.
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// Comma-separated buffer sizes (multiples of 4 KiB).
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, default_value = "4KiB,64KiB")]
    buffers: Vec<u64>,
    /// Comma-separated configurations to run: an id (ext4, tbfs-relaxed-superblock, ...) or a
    /// leading part of one (tbfs, tbfs-strict). See --list.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// List every configuration and exit.
    #[arg(long)]
    list: bool,
    /// Seed of the random-rewrite order and the data written.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// The tbfs pool file's size. Default: large enough for every case without a cleaner.
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Directory for the ext4 file and the tbfs pool file (default: a new temporary directory
    /// under /var/tmp, removed afterwards). Both files are removed when the run ends.
    #[arg(long, conflicts_with = "loop_ext4")]
    dir: Option<PathBuf>,
    /// Put the ext4 file and the tbfs pool file on a fresh loop-mounted ext4 (noatime,lazytime),
    /// sharing one disk (root only). The loop device and mount are removed afterwards.
    #[arg(long)]
    loop_ext4: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write grouped bars of MB/s per pattern and buffer size as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Args)]
struct RecordArgs {
    /// The representative subset (NONE, ALL, tailbound, tailbound-decoupled; no load and the
    /// buffered writer), 1 set of 2,000 writes.
    #[arg(long)]
    quick: bool,
    /// Sets per case (the worst set is reported). Default: 5, or 1 with --quick.
    #[arg(long)]
    sets: Option<u32>,
    /// Writes per set. Default: 10000, or 2000 with --quick.
    #[arg(long)]
    writes: Option<u64>,
    /// Period between writes.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    period: Duration,
    /// Bytes per write.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    size: u64,
    /// Flush window of the recorder's background flush thread.
    #[arg(long, default_value = "2MiB", value_parser = parse_bytes)]
    flush_every: u64,
    /// Comma-separated cases to run: a name (every load it runs under: NONE, ALL, tailbound, …) or
    /// NAME@load (e.g. NONE@buffered-writer). See --list.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// List every case and exit.
    #[arg(long)]
    list: bool,
    /// Directory to record in (default: a new temporary directory, removed afterwards).
    #[arg(long, conflicts_with = "loop_ext4")]
    dir: Option<PathBuf>,
    /// Record on a fresh loop-mounted ext4 (noatime,lazytime) like the paper's setup (root only).
    #[arg(long)]
    loop_ext4: bool,
    /// Run the periodic (measuring) thread of every case in SCHED_FIFO at this priority (1-99,
    /// root), so deadline misses come from I/O rather than from waiting for a CPU.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=99))]
    rt_priority: Option<u8>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a box plot of the latencies (log scale) as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> CliResult {
    match args.experiment {
        Experiment::Record(args) => run_record(args),
        Experiment::SyncWrite(args) => run_sync_write(args),
        Experiment::Recovery(args) => run_recovery(args),
    }
}

/// Where experiments put their files when not told: /var/tmp, which is on disk where /tmp may be
/// a tmpfs.
fn scratch_parent() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A directory an experiment works in, and what must be undone when it is done with.
enum WorkDir {
    Loop(LoopFs),
    Given(PathBuf),
    Scratch(tempfile::TempDir),
}

impl WorkDir {
    /// A fresh loop-mounted ext4 of `loop_bytes` when `loop_ext4`, else `dir` (created if missing),
    /// else a new temporary directory under [`scratch_parent`].
    fn new(
        loop_ext4: bool,
        loop_bytes: u64,
        dir: Option<PathBuf>,
    ) -> Result<WorkDir, Box<dyn std::error::Error + Send + Sync>> {
        if loop_ext4 {
            let fs = LoopFs::create_ext4(&scratch_parent(), loop_bytes)?;
            eprintln!(
                "working on ext4 (noatime,lazytime) on {} at {}",
                fs.device().unwrap_or("a loop device"),
                fs.mount_point().display()
            );
            Ok(WorkDir::Loop(fs))
        } else if let Some(dir) = dir {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            Ok(WorkDir::Given(dir))
        } else {
            let scratch = tempfile::Builder::new()
                .prefix("tailbound-bench-")
                .tempdir_in(scratch_parent())
                .map_err(|e| format!("creating a temporary directory: {e}"))?;
            Ok(WorkDir::Scratch(scratch))
        }
    }

    fn path(&self) -> &Path {
        match self {
            WorkDir::Loop(fs) => fs.mount_point(),
            WorkDir::Given(dir) => dir,
            WorkDir::Scratch(dir) => dir.path(),
        }
    }
}

fn run_sync_write(args: SyncWriteArgs) -> CliResult {
    if args.list {
        for config in sync_write::catalogue() {
            println!(
                "{:<32} fs={} ordering={} barrier={}",
                config.id(),
                config.fs.name(),
                config.ordering_label(),
                config.barrier_label()
            );
        }
        return Ok(());
    }
    // Everything is checked before anything is created on the machine.
    let mut bench = if args.quick {
        SyncWriteBench::quick(PathBuf::new())
    } else {
        SyncWriteBench::paper(PathBuf::new())
    };
    if let Some(size) = args.size {
        bench.file_bytes = size;
    }
    bench.buffers = args.buffers;
    bench.seed = args.seed;
    bench.pool_bytes_override = args.pool_size;
    if !args.cases.is_empty() {
        bench.configs = sync_write::select_configs(&args.cases)?;
    }
    bench.validate()?;
    // The loop file system holds the pool, the ext4 file and ext4's own overhead.
    let loop_bytes = bench.pool_bytes() + bench.file_bytes + (1 << 30);
    let work = WorkDir::new(args.loop_ext4, loop_bytes, args.dir)?;
    bench.dir = work.path().to_path_buf();
    eprintln!(
        "bench sync-write: {} configurations x {} buffer sizes x 3 patterns on a {} MiB file, \
         pool {} MiB, in {}",
        bench.configs.len(),
        bench.buffers.len(),
        bench.file_bytes >> 20,
        bench.pool_bytes() >> 20,
        bench.dir.display()
    );
    let report = bench.run(|rows| {
        let figures: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {:.1} MB/s", r.pattern, r.mb_per_s))
            .collect();
        if let Some(r) = rows.first() {
            eprintln!(
                "  {} {} KiB: {}",
                r.series(),
                r.buffer_kib,
                figures.join(", ")
            );
        }
    })?;
    drop(work);
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        let title = format!("O_SYNC throughput, {} MiB file", report.file_mib);
        grouped_bar_svg(path, &title, "MB/s (MB = 2^20 bytes)", &groups, &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn run_record(args: RecordArgs) -> CliResult {
    if args.list {
        for case in record::catalogue() {
            println!("{:<32} {}", case.id(), case.design.label);
        }
        return Ok(());
    }
    // Checked before anything is created on the machine.
    if args.sets == Some(0) {
        return Err("--sets must be at least 1".into());
    }
    if args.writes == Some(0) {
        return Err("--writes must be at least 1".into());
    }
    if args.size < 8 {
        return Err("--size must be at least 8 bytes".into());
    }
    if args.period.is_zero() {
        return Err("--period must be more than zero".into());
    }
    let scratch;
    let loop_fs;
    let dir = if args.loop_ext4 {
        loop_fs = LoopFs::create_ext4(&std::env::temp_dir(), 4 << 30)?;
        eprintln!(
            "recording on ext4 (noatime,lazytime) on {} at {}",
            loop_fs.device().unwrap_or("a loop device"),
            loop_fs.mount_point().display()
        );
        loop_fs.mount_point().to_path_buf()
    } else if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        dir
    } else {
        scratch = tempfile::Builder::new()
            .prefix("tailbound-bench-")
            .tempdir()
            .map_err(|e| format!("creating a temporary directory: {e}"))?;
        scratch.path().to_path_buf()
    };
    let mut bench = if args.quick {
        RecordBench::quick(dir)
    } else {
        RecordBench::paper(dir)
    };
    bench.period = args.period;
    bench.record_bytes = args.size;
    bench.flush_every_bytes = args.flush_every;
    bench.rt_priority = args.rt_priority;
    if let Some(sets) = args.sets {
        bench.sets = sets;
    }
    if let Some(writes) = args.writes {
        bench.writes = writes;
    }
    if !args.cases.is_empty() {
        bench.cases = record::select_cases(&args.cases)?;
    }
    eprintln!(
        "bench record: {} cases x {} sets x {} writes of {} B every {:?} in {}",
        bench.cases.len(),
        bench.sets,
        bench.writes,
        bench.record_bytes,
        bench.period,
        bench.dir.display()
    );
    let report = bench.run(|rows| {
        for r in rows {
            match &r.skipped {
                Some(why) => eprintln!("  {}: skipped: {why}", r.label()),
                None => eprintln!(
                    "  {}: max {:.0} us, p99.9 {:.0} us, {} deadline misses",
                    r.label(),
                    r.latency.max_us,
                    r.latency.p999_us,
                    r.latency.deadline_misses
                ),
            }
        }
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "write() latency, {} B every {} us",
            report.record_bytes, report.period_us
        );
        latency_boxplot_svg(
            path,
            &title,
            &report.box_series(),
            Some(report.period_us as f64),
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn parse_barriers(names: &[String]) -> Result<Vec<tailbound::tbfs::Barrier>, String> {
    names
        .iter()
        .map(|name| {
            recovery::parse_barrier(name).ok_or_else(|| {
                format!("unknown barrier policy {name:?} (superblock, every-checkpoint, every-log)")
            })
        })
        .collect()
}

fn run_recovery(args: RecoveryArgs) -> CliResult {
    let barriers = parse_barriers(&args.barriers)?;
    if args.child {
        return run_recovery_child(&args, &barriers);
    }
    let kinds = args
        .kinds
        .iter()
        .map(|name| {
            CrashKind::parse(name)
                .ok_or_else(|| format!("unknown kind of crash {name:?} (sim, kill)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut bench = if args.quick {
        RecoveryBench::quick(PathBuf::new())
    } else {
        RecoveryBench::paper(PathBuf::new())
    };
    if let Some(written_mb) = args.written_mb {
        bench.written_bytes = written_mb << 20;
        bench.pool_bytes = recovery::pool_bytes_for(bench.written_bytes);
    }
    if let Some(pool_mb) = args.pool_mb {
        bench.pool_bytes = pool_mb << 20;
    }
    if let Some(trials) = args.trials {
        bench.trials = trials;
    }
    bench.buffer_bytes = args.buffer;
    bench.barriers = barriers;
    bench.kinds = kinds;
    bench.seed = args.seed;
    bench.child_exe =
        Some(std::env::current_exe().map_err(|e| format!("finding the tailbound binary: {e}"))?);
    bench.validate()?;
    let work = WorkDir::new(false, 0, args.dir)?;
    bench.dir = work.path().to_path_buf();
    eprintln!(
        "bench recovery: {} trials x {} kinds x {} barriers, {} MiB written of a {} MiB pool, in {}",
        bench.trials,
        bench.kinds.len(),
        bench.barriers.len(),
        bench.written_bytes >> 20,
        bench.pool_bytes >> 20,
        bench.dir.display()
    );
    let report = bench.run(|r| {
        eprintln!(
            "  {} {}: mean {:.1} ms, max {:.1} ms over {} trials",
            r.kind, r.barrier, r.mean_ms, r.max_ms, r.trials
        );
    })?;
    drop(work);
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The child of a kill trial: writes until killed, reporting progress on stdout.
fn run_recovery_child(args: &RecoveryArgs, barriers: &[tailbound::tbfs::Barrier]) -> CliResult {
    let [barrier] = barriers else {
        return Err("--child takes exactly one barrier policy".into());
    };
    let spec = ChildSpec {
        pool: args.pool.clone().ok_or("--child needs --pool")?,
        workload: Workload {
            written_bytes: args.written_bytes.ok_or("--child needs --written-bytes")?,
            buffer_bytes: args.buffer,
            barrier: *barrier,
        },
    };
    let mut out = std::io::stdout().lock();
    spec.run(&mut out, || {
        // The parent kills the child; should the parent go away first, stdin closes and the
        // child ends too.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    })?;
    Ok(())
}
