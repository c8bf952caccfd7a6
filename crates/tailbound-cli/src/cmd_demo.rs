//! `tailbound demo`: a one-minute tour on a temporary directory, needing no configuration.
//!
//! Records the same periodic stream with the conventional design and with tailbound's recorder,
//! side by side, with and without a competing buffered writer, prints the comparison, then shows
//! what `record verify` finds in a recording cut off mid-write.

use std::io::Write;
use std::path::Path;

use tailbound::bench::experiments::record::{
    check_targets, Design, RecordBench, RecordCase, FLOOR, TAILBOUND, TAILBOUND_DECOUPLED,
};
use tailbound::bench::load::{LoadConfig, LoadKind};
use tailbound::record::{verify, Recorder, RecorderOptions};

use crate::CliResult;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Directory to work in (default: a new temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Writes per case (at 5 ms each: 1,500 writes take 7.5 s).
    #[arg(long, default_value_t = 1500)]
    writes: u64,
}

pub fn run(args: DemoArgs) -> CliResult {
    let scratch = tempfile::Builder::new()
        .prefix("tailbound-demo-")
        .tempdir_in(args.dir.as_deref().unwrap_or(&std::env::temp_dir()))
        .map_err(|e| format!("creating the demo directory: {e}"))?;
    let dir = scratch.path();
    println!("tailbound demo — working in {}\n", dir.display());
    println!(
        "1. Recording 16 KiB every 5 ms, {} writes per case.",
        args.writes
    );
    println!(
        "   conventional: append + fdatasync every 2 MiB on a background thread (the paper's NONE)"
    );
    println!("   tailbound:    zero-filled file + pipelined data-only flushing + framed, checksummed records");
    println!("   decoupled:    tailbound with a writer thread behind a preallocated ring");
    println!("   Each runs alone, then beside a buffered writer that fsyncs every 64 MiB.");
    println!("   FLOOR copies each record into memory with no I/O: this machine's own noise.\n");
    let mut cases = Vec::new();
    for load in [LoadKind::None, LoadKind::BufferedWriter] {
        cases.push(RecordCase {
            name: "NONE".into(),
            design: Design::conventional(),
            load,
        });
        cases.push(RecordCase {
            name: TAILBOUND.into(),
            design: Design::tailbound_default(),
            load,
        });
    }
    cases.push(RecordCase {
        name: TAILBOUND_DECOUPLED.into(),
        design: Design::tailbound_default().decoupled(),
        load: LoadKind::BufferedWriter,
    });
    cases.push(RecordCase {
        name: FLOOR.into(),
        design: Design::noise_floor(),
        load: LoadKind::None,
    });
    let bench = RecordBench {
        writes: args.writes.max(1),
        sets: 1,
        cases,
        load: LoadConfig::quick(),
        ..RecordBench::paper(dir.to_path_buf())
    };
    let report = bench.run(|rows| {
        for r in rows {
            println!(
                "   {:<46} max {:>8.0} µs   p99.9 {:>8.0} µs   misses {}",
                r.label(),
                r.latency.max_us,
                r.latency.p999_us,
                r.latency.deadline_misses
            );
        }
        let _ = std::io::stdout().flush();
    })?;
    println!("\n{}", report.to_markdown());
    let targets = check_targets(&report.cases);
    let met = targets.iter().filter(|t| t.met).count();
    println!(
        "{met} of {} targets met on this machine in this run (machines are noisy: `tailbound bench record` repeats sets).\n",
        targets.len()
    );

    println!("2. A recording cut off by a crash.");
    crash_tour(dir)?;
    println!("\nNext: `tailbound doctor DIR` explains a directory's settings; `tailbound record --help`;");
    println!("`tailbound bench record --quick` runs the experiment with the paper's cases.");
    Ok(())
}

fn crash_tour(dir: &Path) -> CliResult {
    let path = dir.join("cut.tbr");
    let options = RecorderOptions {
        expected_bytes: 4 << 20,
        ..RecorderOptions::default()
    };
    let mut recorder = Recorder::create(&path, options)?;
    for i in 0u64..100 {
        let mut record = vec![0u8; 4096];
        record[..8].copy_from_slice(&i.to_le_bytes());
        recorder.write(&record)?;
    }
    recorder.finish()?;
    let whole = verify(&path)?;
    // Cut the file in the middle of record 73, as a power cut during a write would.
    let cut_at = whole.valid_bytes * 73 / 100 + 1000;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    file.set_len(cut_at)
        .map_err(|e| format!("cutting {}: {e}", path.display()))?;
    let cut = verify(&path)?;
    println!(
        "   recorded 100 frames ({} bytes); cut the file at byte {cut_at};",
        whole.valid_bytes
    );
    println!(
        "   `tailbound record verify` finds {} whole frames (last sequence {}), {} valid bytes, and stops: {:?}.",
        cut.frames,
        cut.last_sequence.map_or("none".to_string(), |s| s.to_string()),
        cut.valid_bytes,
        cut.stop
    );
    Ok(())
}
