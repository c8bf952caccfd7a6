//! `tailbound bench record`: the recorder (seed 000) under background loads.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailbound::units::{parse_bytes, parse_duration};
use tailbound_bench::experiments::loopfs::LoopFs;
use tailbound_bench::experiments::record::{self, RecordBench};
use tailbound_bench::plot::latency_boxplot_svg;
use tailbound_bench::report::write_json;

use crate::CliResult;

#[derive(Args)]
pub(crate) struct RecordArgs {
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
    /// Pin every case's periodic (measuring) thread to this CPU; tailbound's flush thread keeps
    /// off it.
    #[arg(long)]
    cpu: Option<usize>,
    /// Lock tailbound's recorders in memory (mlockall; the mapped windows ahead are mlocked).
    #[arg(long)]
    mlock: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a box plot of the latencies (log scale) as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

pub(crate) fn run_record(args: RecordArgs) -> CliResult {
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
    bench.cpu = args.cpu;
    bench.mlock = args.mlock;
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
