//! `tailbound bench soak`: the soak of `tailbound_bench::experiments::soak` for as long as asked.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailbound::units::{parse_bytes, parse_duration};
use tailbound_bench::experiments::soak::{self, Budget, SoakConfig};
use tailbound_bench::report::write_json;

use crate::CliResult;

/// tbfs soak: threads write as real programs do (create, write, append, overwrite, rename,
/// replace, truncate, delete files of 4 KiB to 8 MiB, mostly small; fsync, sync, snapshots)
/// with the live data held at each --live fraction of the pool in turn, on the simulated
/// device with power cuts at random points.
///
/// It checks, and exits non-zero if any check failed: no panic or error; no spurious ENOSPC
/// (refused while live data + what snapshots pin + writes in flight is below 90 % of a pool
/// of 256 MiB or more; each is printed with the pool's df figures); every acknowledged write
/// reads back (files now and then, all of them after each level, snapshots' files before
/// they are dropped); after each power cut, fsck of the crashed image finds no damage but a
/// summary lost before a later unflushed log (what a cut may leave), and what was durable
/// reads back (a lost block is named with its address and the logs that wrote it) (each cut logs the files lost, and apart from them those not durable it
/// kept, rolled back, removed or took); fsck is clean at the end. Progress goes to stderr, the summary (ops
/// by kind, bytes written, ENOSPC total and spurious, checks, power cuts) to stdout.
#[derive(Args)]
pub struct SoakArgs {
    /// Comma-separated fractions of the pool the live data is held at, in turn.
    #[arg(long, value_delimiter = ',', default_value = "0.6,0.75,0.85")]
    live: Vec<f64>,
    /// How long each level is held once reached (10m is the run).
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    duration: Duration,
    /// The pool's size (in memory, on the simulated device: it takes about twice this in RAM,
    /// and a power cut briefly once more).
    #[arg(long, value_parser = parse_bytes, default_value = "1GiB")]
    pool_size: u64,
    /// The pool's segment size (bytes, or with KiB/MiB): a multiple of 4 KiB, at least
    /// 32 KiB, and small enough for the pool to hold the segments tbfs needs. Default: what
    /// `fs mkfs` picks for the pool's size (4 MiB for 1 GiB, 1 MiB for 256 MiB).
    #[arg(long, value_parser = parse_bytes)]
    segment_size: Option<u64>,
    /// Writer threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Power cuts over the whole run, at random points of random levels.
    #[arg(long, default_value_t = 3)]
    power_cuts: u32,
    /// Seed of every random choice (printed with any failure, to replay it).
    #[arg(long, default_value_t = 0x50a4)]
    seed: u64,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: SoakArgs) -> CliResult {
    if let Some(bad) = args.live.iter().find(|l| !(0.05..=0.95).contains(*l)) {
        return Err(format!("--live {bad}: a fraction of the pool between 0.05 and 0.95").into());
    }
    if args.pool_size < 16 << 20 {
        return Err(format!("--pool-size {}: at least 16MiB", args.pool_size).into());
    }
    if args.threads == 0 {
        return Err("--threads 0: at least one".into());
    }
    let mut cfg = SoakConfig::new(
        args.pool_size,
        args.live.clone(),
        Budget::Time(args.duration),
    );
    cfg.threads = args.threads;
    cfg.power_cuts = args.power_cuts;
    cfg.seed = args.seed;
    cfg.segment_bytes = args.segment_size;
    eprintln!(
        "bench soak: {} MiB pool (simulated device) in {} KiB segments, {} threads, live {} for {} s each, {} power cut(s), seed {:#x}",
        args.pool_size >> 20,
        cfg.segment_bytes() >> 10,
        args.threads,
        args.live
            .iter()
            .map(|l| format!("{:.0} %", l * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        args.duration.as_secs(),
        args.power_cuts,
        args.seed
    );
    let report = soak::run(&cfg, &|line| eprintln!("soak: {line}")).map_err(|e| {
        format!(
            "bench soak: a {}-byte pool in segments of {} bytes: {e}",
            args.pool_size,
            cfg.segment_bytes()
        )
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    if report.passed() {
        Ok(())
    } else {
        Err(format!(
            "bench soak: checks failed (seed {:#x}; rerun with --seed {} to replay)",
            args.seed, args.seed
        )
        .into())
    }
}
