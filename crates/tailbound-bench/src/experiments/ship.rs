//! `tailbound bench ship`: backlog shipping throughput to a local broker, the broker's own
//! ceiling measured with Kafka's `ProducerPerformance` in the same run, and the recorder's
//! `write()` latency with live shipping off and on, side by side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::periodic::{run_periodic, PeriodicConfig};
use crate::stats::LatencySummary;
use serde::Serialize;
use tailbound::record::{Allocation, FlushMode, Recorder, RecorderOptions};

use tailbound_ship::broker::TestBroker;
use tailbound_ship::ship::{ship_file, LiveShipper, ShipOptions};
use tailbound_ship::{io_err, ShipError};

/// What `bench ship` runs.
#[derive(Debug, Clone)]
pub struct BenchShipOptions {
    /// Scratch directory for the recordings.
    pub dir: PathBuf,
    /// Size of the backlog recording.
    pub backlog_bytes: u64,
    /// Payload bytes per frame of the backlog (and ProducerPerformance's record size).
    pub frame_bytes: u64,
    /// Payload bytes per Kafka batch.
    pub batch_bytes: usize,
    /// The recorder cases: period, record size and records per run.
    pub period: Duration,
    pub record_bytes: u64,
    pub records: u64,
    /// Shipping off and on, this many times each, alternating.
    pub runs: usize,
}

/// Backlog shipping.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogResult {
    pub frames: u64,
    pub payload_bytes: u64,
    pub seconds: f64,
    /// Payload MB/s (10^6 bytes).
    pub mb_per_s: f64,
    pub acknowledged: u64,
}

/// Kafka's own producer against the same broker.
#[derive(Debug, Clone, Serialize)]
pub struct ProducerPerfResult {
    pub records: u64,
    pub record_bytes: u64,
    /// MB/s (10^6 bytes), from its records/s.
    pub mb_per_s: f64,
    /// Its closing line, verbatim.
    pub summary: String,
}

/// One recorder case.
#[derive(Debug, Clone, Serialize)]
pub struct RecordCase {
    pub shipping: bool,
    pub run: usize,
    pub latency: LatencySummary,
    /// With shipping: records the broker acknowledged by the end, and whether all were.
    pub acknowledged: Option<u64>,
    pub shipped_all: Option<bool>,
}

/// Everything `bench ship` measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchShipReport {
    pub backlog: BacklogResult,
    pub producer_perf: ProducerPerfResult,
    pub record: Vec<RecordCase>,
}

/// Writes a finished recording of `total` payload bytes in frames of `frame` bytes, as fast as it
/// goes.
fn make_backlog(path: &Path, total: u64, frame: u64) -> Result<u64, ShipError> {
    let frames = total.div_ceil(frame);
    let options = RecorderOptions {
        allocation: Allocation::Append,
        flush: FlushMode::None,
        expected_bytes: frames * (frame + 32) + 64,
        ..RecorderOptions::default()
    };
    let mut r = Recorder::create(path, options)?;
    let mut record = vec![0u8; frame as usize];
    for i in 0..frames {
        record[..8].copy_from_slice(&i.to_le_bytes());
        r.write(&record)?;
    }
    r.finish()?;
    Ok(frames)
}

/// Runs Kafka's `ProducerPerformance` (acks=all, like the shipper) and parses its closing line.
fn producer_perf(
    broker: &TestBroker,
    records: u64,
    record_bytes: u64,
) -> Result<ProducerPerfResult, ShipError> {
    broker.ensure_topic("tailbound-bench-perf")?;
    let mut cmd = Command::new("java");
    let out = tailbound_ship::broker::die_with_parent(&mut cmd)
        .arg("-cp")
        .arg(broker.classpath())
        .arg("org.apache.kafka.tools.ProducerPerformance")
        .args([
            "--topic",
            "tailbound-bench-perf",
            "--num-records",
            &records.to_string(),
        ])
        .args([
            "--record-size",
            &record_bytes.to_string(),
            "--throughput",
            "-1",
        ])
        .args([
            "--producer-props",
            &format!("bootstrap.servers={}", broker.bootstrap()),
            "acks=all",
        ])
        .output()
        .map_err(|e| ShipError::Broker(format!("running ProducerPerformance: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("th"))
        .unwrap_or_default()
        .to_string();
    // "N records sent, R records/sec (M MB/sec), ..."
    let per_sec = summary
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok());
    match (out.status.success(), per_sec) {
        (true, Some(r)) => Ok(ProducerPerfResult {
            records,
            record_bytes,
            mb_per_s: r * record_bytes as f64 / 1e6,
            summary,
        }),
        _ => Err(ShipError::Broker(format!(
            "ProducerPerformance failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}

/// One recorder run, with or without a live shipper.
fn record_case(
    dir: &Path,
    opts: &BenchShipOptions,
    broker: &TestBroker,
    shipping: bool,
    run: usize,
) -> Result<RecordCase, ShipError> {
    let path = dir.join(format!(
        "record-{}-{run}.tbr",
        if shipping { "on" } else { "off" }
    ));
    let options = RecorderOptions {
        expected_bytes: opts.records * (opts.record_bytes + 32) + 64 + (2 << 20),
        ..RecorderOptions::default()
    };
    let mut recorder = Recorder::create(&path, options)?;
    let shipper = if shipping {
        let url = broker.url("tailbound-bench-live");
        let ship = ShipOptions::new(format!(
            "bench/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        Some(LiveShipper::start(
            &path,
            &url,
            &ship,
            recorder.durable_watch(),
        )?)
    } else {
        None
    };
    let mut record = vec![0u8; opts.record_bytes as usize];
    let config = PeriodicConfig {
        period: opts.period,
        count: opts.records,
        progress: None,
    };
    let result = run_periodic(&config, |i| {
        record[..8].copy_from_slice(&i.to_le_bytes());
        recorder
            .write(&record)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map_err(io_err(&path, "recording"))?;
    let summary = recorder.finish()?;
    let (acknowledged, shipped_all) = match shipper {
        Some(s) => {
            let r = s.finish(Duration::from_secs(120))?;
            (
                Some(r.acknowledged),
                Some(r.acknowledged == summary.counters.frames + 1 && !r.incomplete),
            )
        }
        None => (None, None),
    };
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(tailbound_ship::ledger::ledger_path(&path));
    Ok(RecordCase {
        shipping,
        run,
        latency: result.latency.summary(result.deadline_misses),
        acknowledged,
        shipped_all,
    })
}

/// Runs the whole bench against a broker it starts (and stops).
pub fn run(
    opts: &BenchShipOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<BenchShipReport, ShipError> {
    std::fs::create_dir_all(&opts.dir).map_err(io_err(&opts.dir, "creating"))?;
    progress("starting a Kafka broker on 127.0.0.1");
    let broker = TestBroker::start()?;
    let backlog_path = opts.dir.join("backlog.tbr");
    progress("writing the backlog recording");
    let frames = make_backlog(&backlog_path, opts.backlog_bytes, opts.frame_bytes)?;
    progress("shipping the backlog");
    let mut ship = ShipOptions::new("bench/backlog");
    ship.batch_bytes = opts.batch_bytes;
    let started = Instant::now();
    let report = ship_file(&backlog_path, &broker.url("tailbound-bench-backlog"), &ship)?;
    let seconds = started.elapsed().as_secs_f64();
    let payload_bytes = frames * opts.frame_bytes;
    let backlog = BacklogResult {
        frames,
        payload_bytes,
        seconds,
        mb_per_s: payload_bytes as f64 / seconds / 1e6,
        acknowledged: report.acknowledged,
    };
    let _ = std::fs::remove_file(&backlog_path);
    let _ = std::fs::remove_file(tailbound_ship::ledger::ledger_path(&backlog_path));
    progress(&format!(
        "backlog shipped: {:.1} MB/s ({} frames in {:.2} s); running Kafka's ProducerPerformance",
        backlog.mb_per_s, frames, seconds
    ));
    let producer_perf = producer_perf(&broker, frames, opts.frame_bytes)?;
    progress(&format!(
        "ProducerPerformance: {:.1} MB/s",
        producer_perf.mb_per_s
    ));
    let mut record = Vec::new();
    for run in 0..opts.runs {
        for shipping in [false, true] {
            progress(&format!(
                "recorder, shipping {}, run {}",
                if shipping { "on" } else { "off" },
                run + 1
            ));
            let case = record_case(&opts.dir, opts, &broker, shipping, run)?;
            progress(&format!(
                "max write() {:.1} µs, p99.9 {:.1} µs, {} deadline misses",
                case.latency.max_us, case.latency.p999_us, case.latency.deadline_misses
            ));
            record.push(case);
        }
    }
    Ok(BenchShipReport {
        backlog,
        producer_perf,
        record,
    })
}
