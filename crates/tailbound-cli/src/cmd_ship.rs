//! `tailbound ship`, `tailbound fetch` and `tailbound bench ship`: recordings to Apache Kafka and
//! back (crates/tailbound-ship).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use tailbound::record::RecyclePool;
use tailbound::units::{parse_bytes, parse_duration, Bytes};
use tailbound_bench::report::write_json;
use tailbound_ship::fetch::{compare, fetch, CompareReport};
use tailbound_ship::ledger::{Ledger, LedgerState, LEDGER_SUFFIX};
use tailbound_ship::retire::{retire, Retired};
use tailbound_ship::ship::{ship_with, Backlog, Follow, ShipOptions, ShipReport};
use tailbound_ship::source::FrameReader;
use tailbound_ship::KafkaUrl;

use crate::CliResult;

#[derive(Args)]
#[command(after_help = "Examples:\n  \
tailbound ship rec.tbr --to kafka://broker:9092/recordings            one finished recording\n  \
tailbound ship /data/rings --to kafka://broker:9092/recordings --retire-to /data/pool\n  \
tailbound ship --follow rec.tbr --to kafka://broker:9092/recordings   a recording another process makes\n\n\
Each recording's Kafka records are keyed by its recorder id, its identity and the frame's index; a\n\
ledger beside it (REC.ship) holds what the broker acknowledged. Shipping again, after any crash of\n\
the shipper or the broker, sends each frame once.")]
pub struct ShipArgs {
    /// Recordings, or directories of recordings (their files that are not recordings are named
    /// and skipped).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// The destination: kafka://HOST:PORT/TOPIC (the topic is created with one partition if it
    /// does not exist).
    #[arg(long)]
    to: KafkaUrl,
    /// The recorder id for a single recording; with several, ID/FILE-NAME. Default: this host's
    /// name/FILE-NAME.
    #[arg(long)]
    recorder: Option<String>,
    /// Ship a recording another process is still making, until its trailer (recycle allocation
    /// writes one).
    #[arg(long)]
    follow: bool,
    /// Hand each fully shipped, finished recording back to this recycle pool (atomically, once
    /// the broker acknowledged its last frame).
    #[arg(long)]
    retire_to: Option<PathBuf>,
    /// Payload bytes per Kafka batch (the broker's message.max.bytes bounds it).
    #[arg(long, default_value = "960KiB", value_parser = parse_bytes)]
    batch: u64,
    /// Give up after this long without progress (default: retry for ever).
    #[arg(long, value_parser = parse_duration)]
    give_up_after: Option<Duration>,
    /// Write the reports as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub struct FetchArgs {
    /// The source: kafka://HOST:PORT/TOPIC.
    url: KafkaUrl,
    /// The recorder id the recording was shipped under.
    #[arg(long)]
    recorder: String,
    /// Where to write the rebuilt recording (check it with `tailbound record verify OUT
    /// --against ORIGINAL`).
    out: PathBuf,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// This host's name/FILE-NAME: the recorder id when none is given.
pub fn default_recorder_id(recording: &Path) -> String {
    format!("{}/{}", host_name(), file_name(recording))
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Expands directories into their recordings; names what it skips.
fn recordings(paths: &[PathBuf], dangling: &mut Vec<PathBuf>) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| format!("listing {}: {e}", p.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|e| e.is_file())
            .collect();
        entries.sort();
        for e in entries {
            let name = file_name(&e);
            if name.ends_with(".tmp") {
                continue;
            }
            if let Some(rec) = name.strip_suffix(LEDGER_SUFFIX) {
                let rec = e.with_file_name(rec);
                if !rec.exists() {
                    dangling.push(rec);
                }
                continue;
            }
            match FrameReader::open(&e) {
                Ok(_) => out.push(e),
                Err(why) => eprintln!("skipping {}: {why}", e.display()),
            }
        }
    }
    Ok(out)
}

fn print_ship(r: &ShipReport) {
    println!(
        "{}: {} records on the broker as {:?} (partition {}), {} sent now ({}), {} found already there, {} reconnects{}",
        r.recording,
        r.acknowledged,
        r.recorder,
        r.partition,
        r.sent,
        Bytes(r.sent_bytes),
        r.found_on_broker,
        r.reconnects,
        if r.already_retired {
            ", already retired"
        } else if r.finished {
            ", complete (trailer shipped)"
        } else if r.incomplete {
            ", INCOMPLETE"
        } else {
            ""
        }
    );
}

pub fn run_ship(args: ShipArgs) -> CliResult {
    let mut dangling = Vec::new();
    let files = recordings(&args.paths, &mut dangling)?;
    let pool = args
        .retire_to
        .as_deref()
        .map(RecyclePool::open)
        .transpose()?;
    let single = files.len() == 1 && args.paths.len() == 1 && !args.paths[0].is_dir();
    let mut reports = Vec::new();
    for path in &files {
        let recorder = match (&args.recorder, single) {
            (Some(id), true) => id.clone(),
            (Some(id), false) => format!("{id}/{}", file_name(path)),
            (None, _) => default_recorder_id(path),
        };
        let mut opts = ShipOptions::new(recorder.clone());
        opts.batch_bytes = args.batch as usize;
        opts.give_up_after = args.give_up_after;
        let report = if args.follow {
            ship_with(path, &args.to, &opts, &Follow(path))?
        } else {
            ship_with(path, &args.to, &opts, &Backlog(path))?
        };
        print_ship(&report);
        if let Some(pool) = &pool {
            if report.finished || report.already_retired {
                match retire(path, pool, &args.to, &recorder)? {
                    Retired::Now => {
                        println!("{}: retired to {}", path.display(), pool.dir().display())
                    }
                    Retired::Earlier => {}
                }
            }
        }
        reports.push(report);
    }
    if let Some(pool) = &pool {
        for rec in dangling {
            if let Ok(Some(l)) = Ledger::load(&tailbound_ship::ledger::ledger_path(&rec)) {
                if l.state == LedgerState::Retired {
                    // The recording's recorder id does not matter once it is gone.
                    retire(&rec, pool, &args.to, "-")?;
                    println!("{}: finished an interrupted retire", rec.display());
                }
            }
        }
    }
    if let Some(path) = args.json {
        write_json(&path, &reports)?;
    }
    if reports.iter().any(|r| r.incomplete) {
        return Err("some recordings were not shipped completely".into());
    }
    Ok(())
}

pub fn run_fetch(args: FetchArgs) -> CliResult {
    let r = fetch(&args.url, &args.recorder, &args.out)?;
    println!(
        "{}: {} frames ({}) of recorder {:?} from partition {}{}",
        args.out.display(),
        r.frames,
        Bytes(r.bytes),
        r.recorder,
        r.partition,
        if r.finished {
            ", finished (trailer)"
        } else {
            ""
        }
    );
    println!(
        "duplicates on the broker {}  missing {}  records of other recordings {}",
        r.duplicates, r.missing, r.other_recordings
    );
    if let Some(path) = args.json {
        write_json(&path, &r)?;
    }
    if r.missing > 0 {
        return Err(format!(
            "{} records are missing on the broker; the copy ends before the first",
            r.missing
        )
        .into());
    }
    Ok(())
}

/// `record verify COPY --against ORIGINAL`.
pub fn verify_against(
    copy: &Path,
    original: &Path,
) -> Result<CompareReport, Box<dyn std::error::Error + Send + Sync>> {
    let c = compare(original, copy)?;
    println!(
        "against {}: {} of its {} frames equal byte for byte; lost {}  extra {}  header {}",
        original.display(),
        c.matching,
        c.original_frames,
        c.lost,
        c.extra,
        if c.same_header { "equal" } else { "DIFFERENT" }
    );
    Ok(c)
}

#[derive(Args)]
pub struct BenchShipArgs {
    /// Scratch directory (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Backlog recording size.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    backlog: u64,
    /// Payload bytes per backlog frame, and ProducerPerformance's record size.
    #[arg(long, default_value = "64KiB", value_parser = parse_bytes)]
    frame_size: u64,
    /// Payload bytes per Kafka batch.
    #[arg(long, default_value = "960KiB", value_parser = parse_bytes)]
    batch: u64,
    /// Recorder cases: time between records.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    period: Duration,
    /// Recorder cases: bytes per record.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    size: u64,
    /// Recorder cases: records per run.
    #[arg(long, default_value_t = 2000)]
    records: u64,
    /// Recorder cases: runs with shipping off and on, alternating.
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Run the fault loop instead: this many random faults (kill -9 of the shipper, kill -9 and
    /// restart of the broker, broker unreachable) during a live recording, then fetch and compare.
    #[arg(long)]
    faults: Option<usize>,
    /// Fault loop: how long the broker stays unreachable.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    unreachable: Duration,
    /// Fault loop: the seed of the fault sequence.
    #[arg(long, default_value_t = 44)]
    seed: u64,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run_bench(args: BenchShipArgs) -> CliResult {
    let scratch;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            scratch = tempfile::Builder::new()
                .prefix("tailbound-bench-ship-")
                .tempdir()?;
            scratch.path().to_path_buf()
        }
    };
    let mut progress = |s: &str| eprintln!("bench ship: {s}");
    if let Some(faults) = args.faults {
        let exe = std::env::current_exe()?;
        let opts = tailbound_ship::faults::FaultOptions {
            faults,
            seed: args.seed,
            dir: dir.join("faults"),
            shipper: vec![OsString::from(exe), "ship".into()],
            unreachable: args.unreachable,
            record_bytes: 2048,
            period: Duration::from_millis(2),
        };
        let r = tailbound_ship::faults::run(&opts, &mut progress)?;
        println!("| faults | shipper kill -9 | broker kill -9 + restart | unreachable {:?} | frames recorded | frames fetched | lost | duplicated on the broker | missing | seconds |", args.unreachable);
        println!("|---|---|---|---|---|---|---|---|---|---|");
        println!(
            "| {faults} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            r.shipper_kills,
            r.broker_restarts,
            r.unreachable_spells,
            r.frames_recorded,
            r.fetch.frames,
            r.compare.lost,
            r.fetch.duplicates,
            r.fetch.missing,
            r.seconds
        );
        println!(
            "shipper processes that failed by themselves: {}",
            r.shipper_failures
        );
        if let Some(path) = &args.json {
            write_json(path, &r)?;
        }
        let passed = r.passed();
        tailbound_ship::faults::clean(&dir.join("faults"));
        if !passed {
            return Err(format!(
                "the fetched copy is not the recording: {:?} {:?}",
                r.fetch, r.compare
            )
            .into());
        }
        println!("zero lost, zero duplicated: the fetched copy is the recording, frame for frame");
        return Ok(());
    }
    let opts = tailbound_bench::experiments::ship::BenchShipOptions {
        dir: dir.clone(),
        backlog_bytes: args.backlog,
        frame_bytes: args.frame_size,
        batch_bytes: args.batch as usize,
        period: args.period,
        record_bytes: args.size,
        records: args.records,
        runs: args.runs,
    };
    let r = tailbound_bench::experiments::ship::run(&opts, &mut progress)?;
    println!("| what | MB/s | detail |");
    println!("|---|---|---|");
    println!(
        "| tailbound ship, backlog | {:.1} | {} frames of {}, {:.2} s, {} records acknowledged |",
        r.backlog.mb_per_s,
        r.backlog.frames,
        Bytes(args.frame_size),
        r.backlog.seconds,
        r.backlog.acknowledged
    );
    println!(
        "| Kafka ProducerPerformance (acks=all) | {:.1} | {} |",
        r.producer_perf.mb_per_s, r.producer_perf.summary
    );
    println!();
    println!("| recorder | run | p99 µs | p99.9 µs | max µs | deadline misses | shipped |");
    println!("|---|---|---|---|---|---|---|");
    for c in &r.record {
        println!(
            "| shipping {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
            if c.shipping { "on" } else { "off" },
            c.run + 1,
            c.latency.p99_us,
            c.latency.p999_us,
            c.latency.max_us,
            c.latency.deadline_misses,
            match (c.acknowledged, c.shipped_all) {
                (Some(n), Some(true)) => format!("all {n} records"),
                (Some(n), _) => format!("{n} records, NOT all"),
                _ => "-".into(),
            }
        );
    }
    let max = |on: bool| {
        r.record
            .iter()
            .filter(|c| c.shipping == on)
            .map(|c| c.latency.max_us)
            .fold(0.0, f64::max)
    };
    println!(
        "worst max write(): shipping off {:.1} µs, on {:.1} µs ({:+.1} %)",
        max(false),
        max(true),
        (max(true) / max(false) - 1.0) * 100.0
    );
    if let Some(path) = &args.json {
        write_json(path, &r)?;
    }
    Ok(())
}
