//! `tailbound bench fairness` and `bench priority`: the I/O schedulers' experiments (seeds 003
//! and 004), with their tenants and background copy as child processes.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailbound::units::{parse_bytes, parse_duration};
use tailbound_bench::experiments::blockdev::KernelSched;
use tailbound_bench::experiments::fairness::{self, FairnessBench, IoOp, TenantSpec};
use tailbound_bench::experiments::priority::{
    CopyMode, CopySpec, PriorityBench, Rate, ServedCopySpec, ServedWriterSpec,
};
use tailbound_bench::plot::{grouped_bar_svg, latency_boxplot_svg};
use tailbound_bench::report::write_json;

use crate::cmd_bench_common::{current_exe, interrupt_flag};
use crate::CliResult;

#[derive(Args)]
pub(crate) struct FairnessArgs {
    /// 2:1 at 1 and 10 MiB, reads and writes, every system, a 1 s window (seconds in all).
    #[arg(long)]
    quick: bool,
    /// Comma-separated systems: tbfs (a tbfs pool behind tailbound's fair scheduler, each tenant a
    /// thread reading its own file or writing it direct, tbfs's O_DIRECT), tbfs-fifo (the same
    /// behind fifo: the throughput baseline), bfq, none. Default: all four.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Weight sets, separated by commas, weights by colons (e.g. 2:1,3:2:2:1). Default: 2:1,3:2,3:2:2:1
    /// (2:1 with --quick).
    #[arg(long, value_delimiter = ',')]
    weights: Vec<String>,
    /// Comma-separated operations: read, write.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Comma-separated block sizes in MiB. Default: 1,10,30,50,100 (1,10 with --quick).
    #[arg(long, value_delimiter = ',')]
    block_mb: Vec<u64>,
    /// The shortest measurement window per case. Default: 4s (1s with --quick).
    #[arg(long, value_parser = parse_duration)]
    window: Option<Duration>,
    /// Lengthen a case's window to hold about this many blocks of its lightest tenant, at most
    /// 60 s; 0 keeps every window at --window. Default: 10 (0 with --quick).
    #[arg(long)]
    min_blocks: Option<u32>,
    /// Time from the start of the tenants until the window opens. Default: 1s (300ms with --quick).
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Directory on the disk to measure for the loop device's scratch file (default: /var/tmp).
    /// The file is removed when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write grouped bars of each case's ratio error as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// The tbfs cases' tenants are separate processes, each in a cgroup v1 blkio group of its
    /// weight (100 x weight), all clients of one pool server in this process, which charges
    /// their requests to their cgroups (seed 003's setting). Without it they are threads of
    /// this process with tenants of their own. The kernel cases are processes either way.
    #[arg(long)]
    processes: bool,
    /// Run as one tenant of --processes (internal).
    #[arg(long, hide = true, requires_all = ["socket", "file", "op", "block_bytes", "blocks"])]
    served_child: bool,
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
    #[arg(long, hide = true)]
    file: Option<String>,
    #[arg(long, hide = true)]
    blocks: Option<u64>,
    /// Run as one tenant (internal).
    #[arg(long, hide = true, requires_all = ["device", "region_offset", "region_bytes", "op", "block_bytes"])]
    child: bool,
    #[arg(long, hide = true)]
    device: Option<PathBuf>,
    #[arg(long, hide = true)]
    region_offset: Option<u64>,
    #[arg(long, hide = true)]
    region_bytes: Option<u64>,
    #[arg(long, hide = true)]
    op: Option<String>,
    #[arg(long, hide = true)]
    block_bytes: Option<u64>,
}

#[derive(Args)]
pub(crate) struct PriorityArgs {
    /// 200 writes per case and a 64 MiB copy (seconds in all).
    #[arg(long)]
    quick: bool,
    /// Writes per case. Default: 1000000 (the paper's), or 200 with --quick.
    #[arg(long)]
    writes: Option<u64>,
    /// Comma-separated writer rates: N/s (e.g. 111/s) or flat-out.
    #[arg(long, value_delimiter = ',', default_value = "111/s,flat-out")]
    rates: Vec<String>,
    /// Comma-separated kernel schedulers: none, mq-deadline, kyber, bfq.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,mq-deadline,kyber,bfq"
    )]
    schedulers: Vec<String>,
    /// Comma-separated policies of tailbound's scheduler for the tbfs cases (fifo, priority,
    /// fair, default); `none` runs no tbfs case.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    policies: Vec<String>,
    /// How the background process copies: buffered (coreutils' cp through the page cache, whose
    /// writeback and journal commits reach the disk outside its priority, as in the seed; on the
    /// tbfs side the pool's buffered writes with no sync) or direct (O_DIRECT 1 MiB reads and
    /// writes; on the tbfs side each write followed by fdatasync).
    #[arg(long, default_value = "buffered", value_parser = parse_copy_mode)]
    copy: CopyMode,
    /// Size of the file the background process copies. Default: 2GiB, or 64MiB with --quick.
    #[arg(long, value_parser = parse_bytes)]
    copy_size: Option<u64>,
    /// How long the copy runs alone before the writer starts, and again after it ends (its
    /// speed alone is measured on both sides). Default: 5s (500ms with --quick).
    #[arg(long, value_parser = parse_duration)]
    copy_alone: Option<Duration>,
    /// Latency goal for tbfs's scheduler: before the cases, the loop file system is calibrated
    /// (as `tailbound calibrate --latency-goal`) and the tbfs cases split requests to the largest
    /// size served within it and flush after as many bytes as a flush writes back within a
    /// write piece's time.
    #[arg(long, value_parser = parse_duration, default_value = "5ms")]
    latency_goal: Duration,
    /// Dispatch depth of tbfs's scheduler in the tbfs cases (1 to 64). At 2 or more the copy
    /// leaves one slot free for the writer while it is active.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    tbfs_depth: u16,
    /// Skip the writer-alone runs (no copy) made before the cases.
    #[arg(long)]
    no_writer_alone: bool,
    /// Directory on the disk to measure for the loop device's image (default: /var/tmp). Removed
    /// when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a box plot of write() latency per case (log scale) as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// The tbfs cases' real-time writer and copy are separate processes, each setting its own
    /// I/O priority, both clients of one pool server in this process, which charges their
    /// requests at their classes (seed 004's setting). Without it they are threads of this
    /// process. The kernel cases' copy is a process either way.
    #[arg(long)]
    processes: bool,
    /// Run as the writer of --processes (internal).
    #[arg(long, hide = true, requires_all = ["socket", "served_rate"])]
    served_writer: bool,
    /// Run as the copy of --processes (internal).
    #[arg(long, hide = true, requires_all = ["socket", "chunks"])]
    served_copy: bool,
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
    #[arg(long, hide = true)]
    served_rate: Option<String>,
    #[arg(long, hide = true)]
    chunks: Option<u64>,
    /// Run as the background copy (internal).
    #[arg(long, hide = true, requires_all = ["src", "dst_dir", "chunk_bytes"])]
    child: bool,
    #[arg(long, hide = true)]
    src: Option<PathBuf>,
    #[arg(long, hide = true)]
    dst_dir: Option<PathBuf>,
    #[arg(long, hide = true)]
    chunk_bytes: Option<u64>,
}

/// A tenant's side: reads its orders on stdin and reports on stdout.
pub(crate) fn run_fairness_child(args: &FairnessArgs) -> CliResult {
    let op = args.op.as_deref().unwrap_or_default();
    let spec = TenantSpec {
        device: args.device.clone().ok_or("--child needs --device")?,
        region_offset: args.region_offset.ok_or("--child needs --region-offset")?,
        region_bytes: args.region_bytes.ok_or("--child needs --region-bytes")?,
        op: IoOp::parse(op).ok_or_else(|| format!("unknown --op {op:?} (read, write)"))?,
        block_bytes: args.block_bytes.ok_or("--child needs --block-bytes")?,
    };
    let input = std::io::BufReader::new(std::io::stdin());
    spec.run(input, &mut std::io::stdout().lock())?;
    Ok(())
}

fn parse_weight_set(text: &str) -> Result<Vec<u32>, String> {
    text.split(':')
        .map(|w| {
            w.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad weight set {text:?} (e.g. 2:1 or 3:2:2:1)"))
        })
        .collect()
}

/// A tenant of `--processes`: reads its orders on stdin and reports on stdout.
fn run_fairness_served_child(args: &FairnessArgs) -> CliResult {
    let op = args.op.as_deref().unwrap_or_default();
    let spec = fairness::ServedTenantSpec {
        socket: args.socket.clone().ok_or("--served-child needs --socket")?,
        file: args.file.clone().ok_or("--served-child needs --file")?,
        op: IoOp::parse(op).ok_or_else(|| format!("unknown --op {op:?} (read, write)"))?,
        block_bytes: args
            .block_bytes
            .ok_or("--served-child needs --block-bytes")?,
        blocks: args.blocks.ok_or("--served-child needs --blocks")?,
    };
    let input = std::io::BufReader::new(std::io::stdin());
    spec.run(input, &mut std::io::stdout().lock())?;
    Ok(())
}

pub(crate) fn run_fairness(args: FairnessArgs) -> CliResult {
    if args.child {
        return run_fairness_child(&args);
    }
    if args.served_child {
        return run_fairness_served_child(&args);
    }
    let mut bench = if args.quick {
        FairnessBench::quick(PathBuf::new())
    } else {
        FairnessBench::full(PathBuf::new())
    };
    if !args.systems.is_empty() {
        bench.systems = args
            .systems
            .iter()
            .map(|s| {
                fairness::System::parse(s)
                    .ok_or_else(|| format!("unknown system {s:?} (tbfs, tbfs-fifo, bfq, none)"))
            })
            .collect::<Result<_, _>>()?;
    }
    if !args.weights.is_empty() {
        bench.weight_sets = args
            .weights
            .iter()
            .map(|w| parse_weight_set(w))
            .collect::<Result<_, _>>()?;
    }
    if !args.ops.is_empty() {
        bench.ops = args
            .ops
            .iter()
            .map(|o| IoOp::parse(o).ok_or_else(|| format!("unknown op {o:?} (read, write)")))
            .collect::<Result<_, _>>()?;
    }
    if !args.block_mb.is_empty() {
        bench.block_mibs = args.block_mb.clone();
    }
    if let Some(window) = args.window {
        bench.window = window;
    }
    if let Some(warmup) = args.warmup {
        bench.warmup = warmup;
    }
    if let Some(min_blocks) = args.min_blocks {
        bench.min_blocks = min_blocks;
    }
    bench.scratch_parent = args
        .dir
        .clone()
        .unwrap_or_else(fairness::default_scratch_parent);
    bench.child_exe = Some(current_exe()?);
    bench.processes = args.processes;
    if bench.processes {
        fairness::served_supported()?;
    }
    bench.validate()?;
    bench.interrupted = Some(interrupt_flag()?);
    let lengthened = if bench.min_blocks > 0 {
        format!(
            " (or long enough for {} blocks of the lightest tenant)",
            bench.min_blocks
        )
    } else {
        String::new()
    };
    eprintln!(
        "bench fairness: {} cases, {:?} warm-up + {:?} window{lengthened} each, a {} MiB loop \
         device over a file in {}{}",
        bench.case_count(),
        bench.warmup,
        bench.window,
        bench.device_bytes() >> 20,
        bench.scratch_parent.display(),
        if bench.processes {
            "; tbfs tenants are processes in blkio cgroups, clients of one pool server"
        } else {
            ""
        }
    );
    let report = bench.run(|r| {
        // The same run's error with the window placed earlier (into the warm-up).
        let shifted = r
            .accounting
            .as_ref()
            .map(|a| &a.shifted_errors[..])
            .filter(|e| e.len() > 1)
            .map_or(String::new(), |e| {
                let lo = e.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = e.iter().copied().fold(0.0, f64::max);
                let back = fairness::SHIFT_STEP * (e.len() as u32 - 1);
                format!(
                    "; window up to {} ms earlier: {:.1}–{:.1} %",
                    back.as_millis(),
                    lo * 100.0,
                    hi * 100.0
                )
            });
        eprintln!(
            "  {} {} {} {} MiB, {:.1} s window: {} MB/s, ratio {} (error {:.1} %{shifted})",
            r.system,
            fairness::weights_label(&r.weights),
            r.op,
            r.block_mb,
            r.window_s,
            r.shares_mb_per_s
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
            fairness::ratio_string(&r.weights, &r.shares_mb_per_s),
            r.ratio_error * 100.0
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        grouped_bar_svg(
            path,
            "Deviation of the shares from the weights",
            "ratio error (%)",
            &groups,
            &series,
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The background copy's side: reads its orders on stdin and reports on stdout.
fn parse_copy_mode(s: &str) -> Result<CopyMode, String> {
    CopyMode::parse(s).ok_or_else(|| format!("unknown copy mode {s:?} (buffered, direct)"))
}

pub(crate) fn run_priority_child(args: &PriorityArgs) -> CliResult {
    let spec = CopySpec {
        src: args.src.clone().ok_or("--child needs --src")?,
        dst_dir: args.dst_dir.clone().ok_or("--child needs --dst-dir")?,
        chunk_bytes: args.chunk_bytes.ok_or("--child needs --chunk-bytes")?,
        mode: args.copy,
    };
    let input = std::io::BufReader::new(std::io::stdin());
    spec.run(input, &mut std::io::stdout().lock())?;
    Ok(())
}

/// The writer or the copy of `--processes`: reads its orders on stdin, reports on stdout.
fn run_priority_served_child(args: &PriorityArgs) -> CliResult {
    let socket = args.socket.clone().ok_or("a served child needs --socket")?;
    let input = std::io::BufReader::new(std::io::stdin());
    let mut out = std::io::stdout().lock();
    if args.served_writer {
        let rate = args.served_rate.as_deref().unwrap_or_default();
        let spec = ServedWriterSpec {
            socket,
            writes: args.writes.ok_or("--served-writer needs --writes")?,
            rate: Rate::parse(rate).ok_or_else(|| format!("unknown rate {rate:?}"))?,
        };
        spec.run(input, &mut out)?;
    } else {
        let spec = ServedCopySpec {
            socket,
            chunks: args.chunks.ok_or("--served-copy needs --chunks")?,
            mode: args.copy,
        };
        spec.run(input, &mut out)?;
    }
    Ok(())
}

pub(crate) fn run_priority(args: PriorityArgs) -> CliResult {
    if args.child {
        return run_priority_child(&args);
    }
    if args.served_writer || args.served_copy {
        return run_priority_served_child(&args);
    }
    let mut bench = if args.quick {
        PriorityBench::quick(PathBuf::new())
    } else {
        PriorityBench::full(PathBuf::new())
    };
    bench.rates = args
        .rates
        .iter()
        .map(|r| Rate::parse(r).ok_or_else(|| format!("unknown rate {r:?} (N/s or flat-out)")))
        .collect::<Result<_, _>>()?;
    bench.schedulers = args
        .schedulers
        .iter()
        .map(|s| {
            KernelSched::parse(s)
                .ok_or_else(|| format!("unknown scheduler {s:?} (none, mq-deadline, kyber, bfq)"))
        })
        .collect::<Result<_, _>>()?;
    bench.tbfs_policies = args
        .policies
        .iter()
        .filter(|p| p.as_str() != "none")
        .map(|p| p.parse::<tailbound::sched::Policy>())
        .collect::<Result<_, _>>()?;
    if let Some(writes) = args.writes {
        bench.writes = writes;
    }
    bench.copy_mode = args.copy;
    if let Some(bytes) = args.copy_size {
        bench.copy_bytes = bytes;
    }
    if let Some(alone) = args.copy_alone {
        bench.copy_alone = alone;
    }
    bench.latency_goal = args.latency_goal;
    bench.tbfs_depth = usize::from(args.tbfs_depth);
    bench.writer_alone = !args.no_writer_alone;
    bench.processes = args.processes;
    bench.scratch_parent = args
        .dir
        .clone()
        .unwrap_or_else(fairness::default_scratch_parent);
    bench.child_exe = Some(current_exe()?);
    bench.validate()?;
    bench.interrupted = Some(interrupt_flag()?);
    eprintln!(
        "bench priority: {} cases and {} writer-alone runs x {} writes, a {} MiB copy, about {:.0} \
         s of measuring, on ext4 on a loop device over a file in {}{}",
        bench.case_count(),
        bench.alone_count(),
        bench.writes,
        bench.copy_bytes >> 20,
        bench.estimate().as_secs_f64(),
        bench.scratch_parent.display(),
        if bench.processes {
            "; the tbfs writer and copy are processes, clients of one pool server"
        } else {
            ""
        }
    );
    let report = bench.run(|r| {
        if !r.with_copy {
            eprintln!(
                "  {} {} {} writer alone: p99.9 {:.0} us, max {:.0} us",
                r.system, r.scheduler, r.rate, r.p999_us, r.max_us
            );
            return;
        }
        eprintln!(
            "  {} {} {}: p99.9 {:.0} us, max {:.0} us; copy {:.1} MB/s ({:.1} alone)",
            r.system,
            r.scheduler,
            r.rate,
            r.p999_us,
            r.max_us,
            r.background_mb_per_s,
            r.background_alone_mb_per_s
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "{} B O_SYNC append latency under a {} MiB copy",
            report.write_bytes, report.copy_mb
        );
        latency_boxplot_svg(path, &title, &report.box_series(), None)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
