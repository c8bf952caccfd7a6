//! `tailbound demo`: a tour of a few minutes on a temporary directory, needing no configuration.
//!
//! Records the same periodic stream with the conventional design and with tailbound's recorder,
//! side by side, with and without a competing buffered writer, prints the comparison, then shows
//! what `record verify` finds in a recording cut off mid-write; then runs O_SYNC writes through tbfs
//! and ext4 side by side, recovers a tbfs pool whose power was cut mid-write, and lets fsck find and
//! repair a flipped bit in it.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use tailbound::dev::sim::SimDevice;
use tailbound::dev::Device;
use tailbound::record::{verify, Recorder, RecorderOptions};
use tailbound::tbfs::fsck;
use tailbound::tbfs::{Barrier, Config, Fs, OpenFlags, OpenOptions, Ordering, SyncMode};
use tailbound_bench::experiments::record::{
    check_targets, Design, RecordBench, RecordCase, FLOOR, TAILBOUND, TAILBOUND_DECOUPLED,
};
use tailbound_bench::experiments::sync_write::{FsConfig, SyncWriteBench};
use tailbound_bench::load::{LoadConfig, LoadKind};

use crate::CliResult;

/// The SCHED_FIFO priority of the demo's recording threads, where permitted.
const DEMO_RT_PRIORITY: u8 = 50;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Directory to work in (default: a new temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Writes per set (at 5 ms each: 1,500 writes take 7.5 s).
    #[arg(long, default_value_t = 1500)]
    writes: u64,
    /// Sets per case; each case reports its worst set.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(3..))]
    sets: u32,
}

pub fn run(args: DemoArgs) -> CliResult {
    let scratch = tempfile::Builder::new()
        .prefix("tailbound-demo-")
        .tempdir_in(args.dir.as_deref().unwrap_or(&std::env::temp_dir()))
        .map_err(|e| format!("creating the demo directory: {e}"))?;
    let dir = scratch.path();
    println!("tailbound demo — working in {}\n", dir.display());
    println!(
        "1. Recording 16 KiB every 5 ms, {} sets of {} writes per case (each case shows its worst set).",
        args.sets, args.writes
    );
    println!(
        "   conventional: append + fdatasync every 2 MiB on a background thread (the paper's NONE)"
    );
    println!("   tailbound:    zero-filled file stored through a mapping + pipelined data-only flushing + framed, checksummed records");
    println!("   decoupled:    tailbound with a writer thread behind a preallocated ring");
    println!("   Each runs alone, then beside a buffered writer that fsyncs every 64 MiB.");
    println!("   FLOOR copies each record into memory with no I/O: this machine's own noise.");
    let hygiene = tailbound::record::hygiene::probe();
    let rt_priority = hygiene.rt_priority.permitted.then_some(DEMO_RT_PRIORITY);
    let cpu = hygiene.suggested_cpu;
    let mlock = hygiene.lock_memory.permitted;
    println!("   Real-time settings this machine permits, used here:");
    println!(
        "     recording threads of every case (FLOOR and conventional too): {}",
        match (rt_priority, cpu) {
            (Some(p), Some(c)) => format!("SCHED_FIFO {p}, pinned to CPU {c}"),
            (Some(p), None) => format!("SCHED_FIFO {p} (one CPU: not pinned)"),
            (None, Some(c)) => format!(
                "pinned to CPU {c}; not SCHED_FIFO ({})",
                hygiene.rt_priority
            ),
            (None, None) => format!("ordinary threads ({})", hygiene.rt_priority),
        }
    );
    println!(
        "     tailbound: flush thread {}in SCHED_BATCH, next windows prefaulted: {}, memory locked: {}",
        cpu.map_or(String::new(), |c| format!("kept off CPU {c}, ")),
        hygiene.prefault_windows,
        if mlock {
            "yes (mlockall; the windows ahead mlocked)".to_string()
        } else {
            hygiene.lock_memory.to_string()
        }
    );
    println!();
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
        if load == LoadKind::BufferedWriter {
            cases.push(RecordCase {
                name: TAILBOUND_DECOUPLED.into(),
                design: Design::tailbound_default().decoupled(),
                load,
            });
        }
        cases.push(RecordCase {
            name: FLOOR.into(),
            design: Design::noise_floor(),
            load,
        });
    }
    let bench = RecordBench {
        writes: args.writes.max(1),
        sets: args.sets,
        cases,
        load: LoadConfig::quick(),
        rt_priority,
        cpu,
        mlock,
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
        "{met} of {} recorder targets met on this machine in this run{}.\n",
        targets.len(),
        if met == targets.len() {
            ""
        } else {
            " (the slowest calls above say why; `tailbound record --trace-slow 200us` traces them)"
        }
    );

    println!("2. A recording cut off by a crash.");
    crash_tour(dir)?;
    println!(
        "\n3. tbfs, the log-structured engine: 4 KiB writes to a 4 MiB file opened with O_SYNC."
    );
    println!("   ext4: a kernel file in the same directory. tbfs: a pool file on the same disk (O_DIRECT).");
    println!("   strict writes a checkpoint per write; relaxed a data-only log, recovered by roll-forward.");
    sync_write_tour(dir)?;
    println!(
        "\n4. A tbfs pool on the simulated device, with the power cut in the middle of a write; then fsck."
    );
    tbfs_crash_tour()?;
    println!("\nNext: `tailbound doctor DIR` explains a directory's settings; `tailbound record --help`;");
    println!(
        "`tailbound bench record --quick`, `bench sync-write --quick` and `bench recovery --quick`"
    );
    println!("run the experiments.");
    Ok(())
}

fn sync_write_tour(dir: &Path) -> CliResult {
    let bench = SyncWriteBench {
        file_bytes: 4 << 20,
        buffers: vec![4 << 10],
        configs: vec![
            FsConfig::ext4(),
            FsConfig::tbfs(Ordering::Strict, Barrier::EveryCheckpoint),
            FsConfig::tbfs(Ordering::Relaxed, Barrier::EveryCheckpoint),
            FsConfig::tbfs(Ordering::Relaxed, Barrier::EveryLog),
        ],
        progress: false,
        ..SyncWriteBench::quick(dir.to_path_buf())
    };
    let report = bench.run(|rows| {
        for r in rows {
            println!(
                "   {:<4} {:<8} {:<16} {:<15} {:>8.1} MB/s",
                r.fs, r.ordering, r.barrier, r.pattern, r.mb_per_s
            );
        }
        let _ = std::io::stdout().flush();
    })?;
    for r in &report.ratios {
        println!(
            "   {} ({}, {} KiB): {:.2}×",
            r.what, r.pattern, r.buffer_kib, r.ratio
        );
    }
    Ok(())
}

fn tbfs_crash_tour() -> CliResult {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let config = Config {
        barrier: Barrier::EveryLog,
        segment_bytes: 256 << 10,
        ..Config::default()
    };
    let fs = Fs::format(dev.clone(), &config)?;
    let file = fs.open_file(
        "/log",
        OpenFlags {
            sync: SyncMode::Full,
            ..OpenFlags::create()
        },
    )?;
    let record = |i: u64| -> Vec<u8> { (0..4096u64).map(|j| (i * 31 + j) as u8).collect() };
    let mut acknowledged = 0u64;
    for i in 0..50u64 {
        file.pwrite(&record(i), i * 4096)?;
        acknowledged += 1;
    }
    dev.cut_power_after(1);
    let mut failed = 0;
    for i in 50..60u64 {
        if file.pwrite(&record(i), i * 4096).is_err() {
            failed += 1;
        }
    }
    drop(file);
    let crashed: Arc<SimDevice> = Arc::new(dev.crash(7));
    drop(fs);
    println!(
        "   {acknowledged} O_SYNC writes acknowledged, then the power went out ({failed} later writes failed);"
    );
    let fs = Fs::open(crashed.clone(), &OpenOptions::default())?;
    let report = fs.recovery_report();
    let file = fs.open_file("/log", OpenFlags::read_only())?;
    let size = file.stat()?.size;
    let mut intact = 0u64;
    for i in 0..acknowledged {
        let mut back = vec![0u8; 4096];
        file.pread(&mut back, i * 4096)?;
        intact += u64::from(back == record(i));
    }
    println!(
        "   recovery in {:.1} ms: checkpoint {}, {} logs rolled forward, stopped at: {}",
        report.elapsed.as_secs_f64() * 1e3,
        report.checkpoint,
        report.logs_rolled_forward,
        report.stop_reason
    );
    println!("   /log is {size} bytes; {intact} of {acknowledged} acknowledged writes read back exactly.");
    if intact != acknowledged {
        return Err(format!("tbfs lost {} acknowledged writes", acknowledged - intact).into());
    }
    drop(file);
    fs.close()?;

    // One flipped bit in the file's data on storage: fsck finds it through its log's CRC.
    let mut image = crashed.image();
    let Some(block) = image
        .chunks_exact(4096)
        .position(|b| b == record(20).as_slice())
    else {
        return Err("record 20 is not on the simulated device".into());
    };
    image[block * 4096 + 100] ^= 0x08;
    let damaged: Arc<dyn Device> = Arc::new(SimDevice::from_image(image));
    let report = fsck::check(&*damaged)?;
    println!("   flipped one bit of record 20 on storage; `tailbound fs fsck` says:");
    for f in report.damage() {
        println!("     {f}");
    }
    let repaired = fsck::repair(damaged)?;
    println!(
        "   --repair rewrites the block as read, in place, and reports: {}; afterwards the pool is {}.",
        repaired.lost.join("; "),
        if repaired.after.verdict == fsck::Verdict::Clean {
            "clean"
        } else {
            "still damaged"
        }
    );
    if repaired.after.verdict != fsck::Verdict::Clean {
        return Err("fsck --repair left damage behind".into());
    }
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
