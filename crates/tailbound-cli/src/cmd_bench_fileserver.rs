//! `tailbound bench fileserver`: filebench's workloads on kernel file systems and on tbfs
//! (seed 002).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailbound::units::{parse_bytes, parse_duration};
use tailbound_bench::experiments::fileserver::{self, passthrough, FileserverBench, System};
use tailbound_bench::plot::grouped_bar_svg;
use tailbound_bench::report::write_json;
use tailbound_bench::workload::{Params, Workload as FsWorkload};

use crate::CliResult;

#[derive(Args)]
pub(crate) struct FileserverArgs {
    /// 1,000 files, 20 threads (fileserver) and 1 s per case: seconds in all.
    #[arg(long)]
    quick: bool,
    /// fileserver, varmail or webserver.
    #[arg(long, default_value = "fileserver")]
    workload: String,
    /// Comma-separated thread counts. Default: 20,50 for fileserver (20 with --quick), 16 for
    /// varmail, 100 for webserver.
    #[arg(long, value_delimiter = ',')]
    threads: Vec<u32>,
    /// Comma-separated mean file sizes (the paper: 64KiB,128KiB,256KiB). Default: 128KiB for
    /// fileserver, 16KiB for varmail and webserver.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    mean_size: Vec<u64>,
    /// How long each case runs. Default: 60s, or 1s with --quick.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Files in the fileset. Default: the workload's (10,000 or 1,000), or 1,000 with --quick.
    #[arg(long)]
    files: Option<u64>,
    /// Comma-separated systems: tmpfs, xfs-ram, ext4-ram, tbfs-native, tbfs-shim (through the
    /// pool's server), tbfs-shim-private (`run --private`, one process, no server), tbfs-fuse
    /// (root), fuse-passthrough (root: FUSE's floor, a minimal FUSE server over /dev/shm mounted
    /// as tbfs-fuse is).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tmpfs,xfs-ram,ext4-ram,tbfs-native,tbfs-shim,tbfs-shim-private,tbfs-fuse,fuse-passthrough"
    )]
    systems: Vec<String>,
    /// filebench's process model: a generator makes the fileset (deleting the old one through
    /// `system()` first) and forks this many worker processes of --threads threads each, which
    /// share the file system (tbfs-shim: through the pool's server). tbfs-native and
    /// tbfs-shim-private, which serve one process, are left out.
    #[arg(long)]
    processes: Option<u32>,
    /// Runs of every case; each case reports its median run.
    #[arg(long, default_value_t = 1)]
    repeats: u32,
    /// Seed of the file sizes and the random choices.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// The tbfs pool's size. Default: four times the fileset's largest size, plus 1 GiB.
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Where the tmpfs directories, loop images and pools go: a directory on tmpfs, so every
    /// system runs on memory.
    #[arg(long, default_value = fileserver::SHM_DIR)]
    shm_dir: PathBuf,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write bars of ops/s per case and system as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Run one case on POSIX calls under --dir and print its result as JSON (internal: the child
    /// the tbfs-shim systems run under the shim).
    #[arg(long, hide = true, requires = "dir")]
    child: bool,
    /// The child's directory (internal).
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    /// Serve this directory at --dir through FUSE until unmounted (internal: the server of the
    /// fuse-passthrough system).
    #[arg(long, hide = true, requires = "dir")]
    passthrough_server: Option<PathBuf>,
}

pub(crate) fn run_fileserver(args: FileserverArgs) -> CliResult {
    let workload = FsWorkload::parse(&args.workload).ok_or_else(|| {
        format!(
            "unknown workload {:?} (fileserver, varmail, webserver)",
            args.workload
        )
    })?;
    let base = Params::for_workload(workload);
    if let Some(backing) = &args.passthrough_server {
        let dir = args
            .dir
            .as_deref()
            .ok_or("--passthrough-server needs --dir")?;
        passthrough::run_server(backing, dir, &mut std::io::stdout().lock())?;
        return Ok(());
    }
    if args.child {
        let dir = args.dir.as_deref().ok_or("--child needs --dir")?;
        let [threads] = args.threads[..] else {
            return Err("--child takes exactly one thread count".into());
        };
        let [mean] = args.mean_size[..] else {
            return Err("--child takes exactly one mean size".into());
        };
        let p = Params {
            threads,
            mean_file_bytes: mean,
            duration: args.duration.ok_or("--child needs --duration")?,
            files: args.files.unwrap_or(base.files),
            seed: args.seed,
            ..base
        };
        p.validate()?;
        fileserver::run_child(dir, &p, args.processes, &mut std::io::stdout().lock())?;
        return Ok(());
    }
    let mut bench = if args.quick {
        FileserverBench::quick()
    } else {
        FileserverBench::paper()
    };
    bench.workload = workload;
    if workload != FsWorkload::Fileserver {
        bench.threads = vec![base.threads];
        bench.mean_sizes = vec![base.mean_file_bytes];
    }
    if !args.threads.is_empty() {
        bench.threads = args.threads;
    }
    if !args.mean_size.is_empty() {
        bench.mean_sizes = args.mean_size;
    }
    if let Some(d) = args.duration {
        bench.duration = d;
    }
    if args.files.is_some() {
        bench.files = args.files;
    }
    bench.systems = args
        .systems
        .iter()
        .map(|name| {
            System::parse(name).ok_or_else(|| {
                format!(
                    "unknown system {name:?} (tmpfs, xfs-ram, ext4-ram, tbfs-native, tbfs-shim, \
                     tbfs-shim-private, tbfs-fuse, fuse-passthrough)"
                )
            })
        })
        .collect::<Result<_, _>>()?;
    bench.repeats = args.repeats;
    bench.seed = args.seed;
    bench.shm_dir = args.shm_dir;
    bench.pool_bytes_override = args.pool_size;
    bench.exe = std::env::current_exe().ok();
    bench.processes = args.processes;
    bench.validate()?;
    let cases = bench.threads.len() * bench.mean_sizes.len() * bench.systems.len();
    eprintln!(
        "bench fileserver: {} x {} threads x {} mean sizes x {} systems, {:?} per run, {} repeats          (about {} s of runs plus setup)",
        workload.name(),
        bench.threads.len(),
        bench.mean_sizes.len(),
        bench.systems.len(),
        bench.duration,
        bench.repeats,
        (cases as f64 * bench.repeats as f64 * bench.duration.as_secs_f64()).ceil()
    );
    for &s in &bench.systems {
        if let Some(why) = bench.unavailable(s) {
            eprintln!("  {}: unavailable: {why}", s.name());
        }
    }
    let report = bench.run(|system, r| {
        eprintln!(
            "  {} {} {} threads {} KiB: {:.0} ops/s, {:.1} MB/s, user {:.1} %, sys {:.1} % \
             (file system made in {:.1} s, fileset in {:.1} s)",
            system.name(),
            r.workload.name(),
            match r.processes {
                0 => r.threads.to_string(),
                n => format!("{n} processes x {}", r.threads),
            },
            r.mean_file_kib,
            r.ops_per_s,
            r.mb_per_s,
            r.user_cpu_pct,
            r.sys_cpu_pct,
            r.mkfs_s,
            r.setup_s
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        let title = format!("filebench {} ops/s", workload.name());
        grouped_bar_svg(path, &title, "ops/s", &groups, &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
