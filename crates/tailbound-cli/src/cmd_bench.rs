//! `tailbound bench`: each paper's experiment, run side by side against the kernel's conventional
//! path on this machine, printed as a Markdown table, with `--json` and `--svg` outputs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use tailbound::bench::experiments::loopfs::LoopFs;
use tailbound::bench::experiments::record::{self, RecordBench};
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
    /// buffers) takes from minutes to over an hour depending on the disk's flush latency; --quick
    /// writes 8 MiB. Ratios (relaxed/strict, tbfs relaxed/ext4) and the targets follow
    /// the table.
    SyncWrite(SyncWriteArgs),
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
