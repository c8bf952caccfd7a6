//! `tailbound record`: records periodic data with bounded write() latency; `record verify` checks a
//! recording; `record prepare-pool` makes files ready for `--allocation recycle`.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use tailbound::record::{
    read_full, verify, Allocation, DecoupledOptions, FlushMode, Flusher, Framing, Overflow,
    RecordCounters, Recorder, RecorderOptions, RecyclePool, SlowTrace, TracedCalls,
};
use tailbound::units::{parse_bytes, parse_duration, Bytes};
use tailbound_bench::periodic::{run_periodic, Flow, PeriodicConfig};
use tailbound_bench::progress::Progress;
use tailbound_bench::report::write_json;
use tailbound_bench::stats::LatencySummary;

use crate::CliResult;

#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  \
tailbound record --total 100MiB rec.tbr               16 KiB every 5 ms, tailbound's default mode\n  \
some-sensor | tailbound record --input - rec.tbr     record a stream from stdin\n  \
tailbound record --allocation fallocate --flush sync-file-range --flusher off rec.tbr   the paper's design (root)\n  \
tailbound record verify rec.tbr                       what survived"
)]
pub struct RecordArgs {
    #[command(subcommand)]
    command: Option<RecordCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum RecordCommand {
    /// Check a framed recording: frames, bytes, the valid prefix and the last sequence number.
    ///
    /// Exits 0 for any recording, including one cut off by a crash (the valid prefix is what
    /// survived); exits 1 when the file is not a tailbound recording or cannot be read.
    Verify {
        /// The recording.
        file: PathBuf,
        /// Also write the report as JSON (keys frames, bytes, valid_bytes, last_sequence, ...).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also check FILE frame by frame against this original (a `tailbound fetch` copy against
        /// the recording it was shipped from); exits 1 unless they are equal.
        #[arg(long)]
        against: Option<PathBuf>,
    },
    /// Prepare a recycle pool: COUNT files of SIZE, written with zeros and flushed, so recordings
    /// with `--allocation recycle --pool DIR` never allocate.
    PreparePool {
        /// The pool directory (created if needed).
        dir: PathBuf,
        /// How many ready files the pool should hold.
        #[arg(long, default_value_t = 2)]
        count: usize,
        /// Size of each file: at least a recording's size plus 32 bytes per record.
        #[arg(long, value_parser = parse_bytes)]
        file_size: u64,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Where to record.
    #[arg(required = true)]
    output: Option<PathBuf>,
    /// Time between records.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    period: Duration,
    /// Bytes per record.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    size: u64,
    /// Stop after this many bytes.
    #[arg(long, default_value = "100MiB", value_parser = parse_bytes)]
    total: u64,
    /// Record this stream (`-` for stdin) in records of --size at --period instead of synthetic
    /// data; the recording ends at end of input.
    #[arg(long)]
    input: Option<String>,
    /// Block allocation: append (conventional), fallocate (the paper), zero-fill (written up front),
    /// recycle (a file from --pool; no allocation at all).
    #[arg(long, default_value = "zero-fill")]
    allocation: Allocation,
    /// Background flush: fdatasync (S_ALL), sync-file-range (S_DATA, the paper), pipelined (start
    /// window N, wait for N-1 and drop it from the cache), none.
    #[arg(long, default_value = "pipelined")]
    flush: FlushMode,
    /// Flush window.
    #[arg(long, default_value = "2MiB", value_parser = parse_bytes)]
    flush_every: u64,
    /// The kernel's writeback flusher: on, or off for the recording (root; restored afterwards).
    #[arg(long, default_value = "on")]
    flusher: Flusher,
    /// framed (length, sequence, epoch and CRC32C per record, so `verify` works) or raw bytes.
    #[arg(long, default_value = "framed")]
    framing: Framing,
    /// Recycle pool directory (see `record prepare-pool`).
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Decouple: the producer copies into a ring of this size and a writer thread writes.
    #[arg(long, value_parser = parse_bytes)]
    decoupled: Option<u64>,
    /// With --decoupled, when the ring is full: block, drop (the new record) or overwrite (the
    /// oldest unwritten records).
    #[arg(long, default_value = "block", requires = "decoupled")]
    overflow: Overflow,
    /// Store records with write() calls instead of through a shared mapping of the preallocated
    /// file (the mapping, the default, keeps page faults and timestamp updates, which ext4
    /// journals, out of the recording's path; append always uses write()).
    #[arg(long)]
    syscall_writes: bool,
    /// Lock the process in memory (mlockall, pages locked as they are touched) and the mapped
    /// windows ahead of the writer (mlock) until they are flushed. `tailbound doctor` says whether
    /// this machine permits it.
    #[arg(long)]
    mlockall: bool,
    /// SCHED_FIFO priority (1-99) for the thread that writes (root or CAP_SYS_NICE).
    #[arg(long)]
    rt_priority: Option<u8>,
    /// Pin the thread that writes to this CPU; the flush thread then runs on the other CPUs.
    #[arg(long)]
    cpu: Option<usize>,
    /// Trace every write slower than this (e.g. 200us): its index and file offset, what the flush
    /// thread was doing, page faults, context switches and the CPU; printed after the report and
    /// kept in --json. Costs two getrusage calls per write, outside the timed part.
    #[arg(long, value_parser = parse_duration)]
    trace_slow: Option<Duration>,
    /// Print a line on stderr each time more data is known to be on the device.
    #[arg(long)]
    verbose: bool,
    /// Write the latency summary and counters as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Ship the frames to Apache Kafka while recording (kafka://HOST:PORT/TOPIC), on a thread of
    /// its own that reads only what the flusher made durable (so not with --flush none, which
    /// makes nothing durable before the end). A slow or absent broker only makes it fall behind.
    #[arg(long)]
    ship: Option<tailbound_ship::KafkaUrl>,
    /// With --ship: the recorder id (default: this host's name/OUTPUT's file name).
    #[arg(long, requires = "ship")]
    recorder: Option<String>,
    /// With --ship: how long to keep shipping after the recording ends; what is left then is
    /// shipped by `tailbound ship OUTPUT` later.
    #[arg(long, default_value = "60s", value_parser = parse_duration, requires = "ship")]
    ship_linger: Duration,
}

pub fn run(args: RecordArgs) -> CliResult {
    match args.command {
        Some(RecordCommand::Verify {
            file,
            json,
            against,
        }) => {
            run_verify(&file, json)?;
            match against {
                Some(original) => {
                    if crate::cmd_ship::verify_against(&file, &original)?.identical() {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} is not {} frame for frame",
                            file.display(),
                            original.display()
                        )
                        .into())
                    }
                }
                None => Ok(()),
            }
        }
        Some(RecordCommand::PreparePool {
            dir,
            count,
            file_size,
        }) => {
            let pool = RecyclePool::prepare(&dir, count, file_size)?;
            println!(
                "pool {}: {} ready files of {}",
                dir.display(),
                pool.ready(),
                Bytes(file_size)
            );
            Ok(())
        }
        None => run_record(args.run),
    }
}

fn run_verify(file: &std::path::Path, json: Option<PathBuf>) -> CliResult {
    let report = verify(file)?;
    println!("recording     {}", file.display());
    println!("frames        {}", report.frames);
    println!("payload       {}", Bytes(report.payload_bytes));
    println!("file bytes    {}", report.bytes);
    println!("valid bytes   {}", report.valid_bytes);
    println!(
        "last sequence {}",
        report
            .last_sequence
            .map_or("none".to_string(), |s| s.to_string())
    );
    if let Some(epoch) = report.epoch {
        println!("epoch         {epoch}");
    }
    println!(
        "finished      {}",
        if report.finished {
            "yes (trailer found)"
        } else {
            "no trailer"
        }
    );
    println!("valid prefix ends: {:?}", report.stop);
    if let Some(path) = json {
        write_json(&path, &report)?;
    }
    Ok(())
}

#[derive(Serialize)]
struct RecordReport {
    output: String,
    options: String,
    period_us: u64,
    record_bytes: u64,
    records: u64,
    latency: LatencySummary,
    frames: u64,
    payload_bytes: u64,
    file_bytes: u64,
    dropped: u64,
    overwritten: u64,
    blocked: u64,
    flushes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_writes: Option<SlowTrace>,
    #[serde(skip_serializing_if = "Option::is_none")]
    writer_slow_writes: Option<SlowTrace>,
}

fn describe(o: &RecorderOptions) -> String {
    let mut s = format!(
        "allocation={} flush={} flush-every={} flusher={} framing={}",
        o.allocation,
        o.flush,
        Bytes(o.flush_every_bytes),
        o.flusher,
        o.framing
    );
    if o.mapped && o.allocation != Allocation::Append {
        s.push_str(" mapped");
    }
    if let Some(d) = &o.decoupled {
        s.push_str(&format!(
            " decoupled={} overflow={}",
            Bytes(d.ring_bytes),
            d.overflow
        ));
    }
    if o.mlockall {
        s.push_str(" mlockall");
    }
    if let Some(p) = o.rt_priority {
        s.push_str(&format!(" SCHED_FIFO={p}"));
    }
    if let Some(cpu) = o.cpu {
        s.push_str(&format!(" cpu={cpu} (flush thread off it)"));
    }
    if let Some(t) = o.trace_slow {
        s.push_str(&format!(" trace-slow={t:?}"));
    }
    s
}

fn run_record(args: RunArgs) -> CliResult {
    let output = args.output.ok_or("an OUTPUT file is required")?;
    if args.size == 0 || args.size > tailbound::record::RECORD_BYTES_MAX {
        return Err("--size must be between 1 byte and 64 MiB".into());
    }
    if args.period.is_zero() {
        return Err("--period must be more than zero".into());
    }
    let records = args.total.div_ceil(args.size);
    let options = RecorderOptions {
        allocation: args.allocation,
        flush: args.flush,
        flush_every_bytes: args.flush_every,
        flusher: args.flusher,
        framing: args.framing,
        // Payload plus the frame headers, and a window of slack.
        expected_bytes: records * (args.size + 32) + 64 + args.flush_every,
        recycle_pool: args.pool,
        decoupled: args.decoupled.map(|ring_bytes| DecoupledOptions {
            ring_bytes,
            overflow: args.overflow,
        }),
        mlockall: args.mlockall,
        rt_priority: args.rt_priority,
        cpu: args.cpu,
        measure_writes: false,
        mapped: !args.syscall_writes,
        trace_slow: args.trace_slow,
    };
    options.validate()?;
    let mut input: Option<Box<dyn Read>> = match args.input.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdin().lock())),
        Some(path) => Some(Box::new(
            File::open(path).map_err(|e| format!("opening --input {path}: {e}"))?,
        )),
    };
    eprintln!(
        "recording {} every {:?} into {} ({})",
        Bytes(args.size),
        args.period,
        output.display(),
        describe(&options)
    );
    let mut recorder = Recorder::create(&output, options.clone())?;
    let shipper = match &args.ship {
        Some(url) => {
            let id = args
                .recorder
                .clone()
                .unwrap_or_else(|| crate::cmd_ship::default_recorder_id(&output));
            eprintln!("shipping to {url} as {id:?}");
            let opts = tailbound_ship::ship::ShipOptions::new(id);
            Some(tailbound_ship::ship::LiveShipper::start(
                &output,
                url,
                &opts,
                recorder.durable_watch(),
            )?)
        }
        None => None,
    };
    let progress = Progress::new(records, "recording");
    let config = PeriodicConfig {
        period: args.period,
        count: records,
        progress: Some(progress.clone()),
    };
    let mut record = vec![0u8; args.size as usize];
    let mut written = 0u64;
    // Durable progress is printed by its own thread, outside the timed calls.
    let stop_watch = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = args.verbose.then(|| {
        let watch = recorder.durable_watch();
        let stop = stop_watch.clone();
        std::thread::spawn(move || {
            let mut reported = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let durable = watch.bytes();
                if durable > reported {
                    reported = durable;
                    eprintln!("durable {durable} bytes");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
    let result = run_periodic(&config, |i| {
        let len = match input.as_mut() {
            Some(r) => {
                let n = read_full(r.as_mut(), &mut record)?;
                if n == 0 {
                    return Ok(Flow::Stop);
                }
                n
            }
            None => {
                fill_synthetic(&mut record, i);
                record.len()
            }
        };
        recorder
            .write(&record[..len])
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        written += 1;
        Ok(Flow::Continue)
    });
    progress.finish();
    stop_watch.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    let run = match result {
        Ok(run) => run,
        Err(e) => {
            // Keep what was recorded: finish it so it is durable, then report the error.
            let kept = recorder.finish();
            if let Some(s) = shipper {
                finish_shipping(s, args.ship_linger, &output);
            }
            return Err(match kept {
                Ok(s) => format!(
                    "{e} ({} records before it were kept in {})",
                    s.counters.frames,
                    output.display()
                ),
                Err(f) => format!("{e}; finishing the recording also failed: {f}"),
            }
            .into());
        }
    };
    let summary = recorder.finish()?;
    if let Some(s) = shipper {
        finish_shipping(s, args.ship_linger, &output);
    }
    if args.verbose {
        eprintln!("durable {} bytes", summary.file_bytes);
    }
    let latency = run.latency.summary(run.deadline_misses);
    print_report(
        &output,
        written,
        &latency,
        &summary.counters,
        summary.file_bytes,
    );
    for trace in [&summary.slow_writes, &summary.writer_slow_writes]
        .into_iter()
        .flatten()
    {
        print_trace(trace);
    }
    if let Some(path) = args.json {
        let c = summary.counters;
        write_json(
            &path,
            &RecordReport {
                output: output.display().to_string(),
                options: describe(&options),
                period_us: args.period.as_micros() as u64,
                record_bytes: args.size,
                records: written,
                latency,
                frames: c.frames,
                payload_bytes: c.payload_bytes,
                file_bytes: summary.file_bytes,
                dropped: c.dropped,
                overwritten: c.overwritten,
                blocked: c.blocked,
                flushes: c.flushes,
                slow_writes: summary.slow_writes.clone(),
                writer_slow_writes: summary.writer_slow_writes.clone(),
            },
        )?;
    }
    Ok(())
}

/// Ships what is left after the recording ended, for at most `linger`, and says how far it got.
fn finish_shipping(
    s: tailbound_ship::ship::LiveShipper,
    linger: Duration,
    output: &std::path::Path,
) {
    match s.finish(linger) {
        Ok(r) if !r.incomplete => eprintln!(
            "shipped: the broker holds all {} records ({} sent, {} found already there)",
            r.acknowledged, r.sent, r.found_on_broker
        ),
        Ok(r) => eprintln!(
            "shipping incomplete after {linger:?}: the broker holds {} records; `tailbound ship {}` ships the rest",
            r.acknowledged,
            output.display()
        ),
        Err(e) => eprintln!(
            "shipping stopped: {e}; `tailbound ship {}` ships the rest",
            output.display()
        ),
    }
}

/// Prints a trace's slow calls, one a line, then how many there were.
fn print_trace(trace: &SlowTrace) {
    let mut out = std::io::stdout().lock();
    let whose = match trace.calls {
        TracedCalls::Recorder => "write() calls",
        TracedCalls::Writer => "the writer thread's writes",
    };
    let _ = writeln!(
        out,
        "slow {whose} (over {:.0} µs): {} of {}{}",
        trace.bound_ns as f64 / 1000.0,
        trace.events.len() as u64 + trace.not_kept,
        trace.traced,
        if trace.not_kept > 0 {
            format!(" ({} not kept: the trace buffer was full)", trace.not_kept)
        } else {
            String::new()
        }
    );
    for e in &trace.events {
        let _ = writeln!(out, "  {e}");
    }
}

/// A deterministic record: its index, then a pattern derived from it.
fn fill_synthetic(record: &mut [u8], i: u64) {
    let seq = i.to_le_bytes();
    for (j, b) in record.iter_mut().enumerate() {
        *b = if j < 8 {
            seq[j]
        } else {
            (i as u8).wrapping_add(j as u8)
        };
    }
}

fn print_report(
    output: &std::path::Path,
    records: u64,
    l: &LatencySummary,
    c: &RecordCounters,
    file_bytes: u64,
) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "recorded {records} records into {} ({file_bytes} bytes)",
        output.display()
    );
    let _ = writeln!(
        out,
        "write() latency µs: min {:.1}  mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        l.min_us, l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
    );
    let _ = writeln!(out, "deadline misses: {}", l.deadline_misses);
    let _ = writeln!(
        out,
        "frames {}  flushes {}  dropped {}  overwritten {}  blocked {}",
        c.frames, c.flushes, c.dropped, c.overwritten, c.blocked
    );
    if std::io::stdout().is_terminal() && l.deadline_misses > 0 {
        let _ = writeln!(
            out,
            "hint: `tailbound doctor {}` explains what delays writes there",
            output
                .parent()
                .map_or(".".into(), |p| p.display().to_string())
        );
    }
}
