//! `tailbound bench` for the tbfs engine alone: `sync-write`, `recovery`, `cleaner` and `delete`.

use std::path::PathBuf;

use clap::Args;
use tailbound::units::parse_bytes;
use tailbound_bench::experiments::cleaner::{self, CleanerBench};
use tailbound_bench::experiments::delete::DeleteBench;
use tailbound_bench::experiments::recovery::{self, ChildSpec, CrashKind, RecoveryBench, Workload};
use tailbound_bench::experiments::sync_write::{self, SyncWriteBench};
use tailbound_bench::plot::grouped_bar_svg;
use tailbound_bench::report::write_json;

use crate::cmd_bench_common::{run_with_progress, WorkDir};
use crate::CliResult;

#[derive(Args)]
pub(crate) struct SyncWriteArgs {
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
pub(crate) struct RecoveryArgs {
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
pub(crate) struct CleanerArgs {
    /// A 64 MiB pool, 256 KiB segments, 1 + 2 capacities, one repeat: seconds.
    #[arg(long)]
    quick: bool,
    /// Pool size. Default 256MiB (64MiB with --quick).
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Segment size. Default 1MiB (256KiB with --quick).
    #[arg(long, value_parser = parse_bytes)]
    segment_size: Option<u64>,
    /// Comma-separated utilisations, fractions of the pool the live data fills.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.8,0.9")]
    utilisation: Vec<f64>,
    /// Comma-separated workloads: uniform, hot-cold, mixed.
    #[arg(long, value_delimiter = ',', default_value = "uniform,hot-cold,mixed")]
    workload: Vec<String>,
    /// Pool capacities overwritten before measuring.
    #[arg(long)]
    warmup: Option<f64>,
    /// Pool capacities overwritten while measuring.
    #[arg(long)]
    measure: Option<f64>,
    /// Runs of every case; each case reports its median.
    #[arg(long)]
    repeats: Option<u32>,
    #[arg(long, default_value_t = 0xc1ea)]
    seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct DeleteArgs {
    /// 16 and 64 MiB files, one run each.
    #[arg(long)]
    quick: bool,
    /// Comma-separated file sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    sizes: Vec<u64>,
    /// Runs of every size.
    #[arg(long)]
    repeats: Option<u32>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(crate) fn run_sync_write(args: SyncWriteArgs) -> CliResult {
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

pub(crate) fn run_recovery(args: RecoveryArgs) -> CliResult {
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
pub(crate) fn run_recovery_child(
    args: &RecoveryArgs,
    barriers: &[tailbound::tbfs::Barrier],
) -> CliResult {
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

pub(crate) fn run_cleaner(args: CleanerArgs) -> CliResult {
    let mut bench = if args.quick {
        CleanerBench::quick()
    } else {
        CleanerBench::full()
    };
    if let Some(v) = args.pool_size {
        bench.pool_bytes = v;
    }
    if let Some(v) = args.segment_size {
        bench.segment_bytes = v;
    }
    if let Some(v) = args.warmup {
        bench.warmup = v;
    }
    if let Some(v) = args.measure {
        bench.measure = v;
    }
    if let Some(v) = args.repeats {
        bench.repeats = v.max(1);
    }
    bench.seed = args.seed;
    if let Some(bad) = args
        .utilisation
        .iter()
        .find(|u| !(0.05..=0.95).contains(*u))
    {
        return Err(format!("--utilisation {bad}: a fraction between 0.05 and 0.95").into());
    }
    bench.utilisations = args.utilisation.clone();
    bench.workloads = args
        .workload
        .iter()
        .map(|w| {
            cleaner::Access::parse(w)
                .ok_or_else(|| format!("--workload {w}: uniform, hot-cold or mixed"))
        })
        .collect::<Result<_, _>>()?;
    let cases = (bench.workloads.len() * bench.utilisations.len()) as u64 * bench.repeats as u64;
    eprintln!(
        "bench cleaner: {cases} runs on a {} MiB memory pool of {} KiB segments, {} + {} capacities each",
        bench.pool_bytes >> 20,
        bench.segment_bytes >> 10,
        bench.warmup,
        bench.measure
    );
    run_with_progress(
        cases,
        "cleaner",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}

pub(crate) fn run_delete(args: DeleteArgs) -> CliResult {
    let mut bench = if args.quick {
        DeleteBench::quick()
    } else {
        DeleteBench::full()
    };
    if !args.sizes.is_empty() {
        bench.sizes = args.sizes.clone();
    }
    if let Some(v) = args.repeats {
        bench.repeats = v.max(1);
    }
    let runs = 2 * bench.sizes.len() as u64 * u64::from(bench.repeats);
    eprintln!("bench delete: {runs} runs, each on a memory pool of its own");
    run_with_progress(
        runs,
        "delete",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}
