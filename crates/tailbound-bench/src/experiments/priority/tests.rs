use tailbound::sys::time::MonoNanos;

use super::*;
use crate::stats::LatencyHistogram;

#[test]
fn rates_parse_and_print() {
    assert_eq!(Rate::parse("111"), Some(Rate::Paced(111)));
    assert_eq!(Rate::parse("111/s"), Some(Rate::Paced(111)));
    assert_eq!(Rate::parse("flat-out"), Some(Rate::FlatOut));
    assert_eq!(Rate::parse("0"), None);
    assert_eq!(Rate::parse("fast"), None);
    assert_eq!(Rate::Paced(111).name(), "111/s");
    assert_eq!(Rate::FlatOut.name(), "flat-out");
}

#[test]
fn copy_progress_lines_parse_strictly() {
    assert_eq!(parse_copied("c 10 4096"), Some((10, 4096)));
    assert_eq!(parse_copied("c 10"), None);
    assert_eq!(parse_copied("c 10 4096 9"), None);
    assert_eq!(parse_copied("x 10 4096"), None);
}

#[test]
fn bad_parameters_are_refused_before_anything_runs() {
    let mut b = PriorityBench::quick(PathBuf::new());
    assert!(b.validate().unwrap_err().to_string().contains("binary"));
    b.child_exe = Some(PathBuf::from("/bin/true"));
    assert!(b.validate().is_ok());
    b.writes = 0;
    assert!(b.validate().is_err());
    b.writes = 1;
    b.rates.clear();
    assert!(b.validate().is_err());
    assert_eq!(PriorityBench::full(PathBuf::new()).case_count(), 10);
    assert_eq!(PriorityBench::full(PathBuf::new()).writes, 1_000_000);
}

#[test]
fn the_writer_runs_alone_on_each_side_that_is_measured() {
    let mut b = PriorityBench::quick(PathBuf::new());
    // Kernel path and tbfs's default policy, at both rates.
    assert_eq!(b.alone_count(), 4);
    let with = b.estimate();
    b.writer_alone = false;
    assert_eq!(b.alone_count(), 0);
    // 200 writes at 111/s and flat out (counted at 1 ms each), on two sides.
    let alone = Duration::from_secs_f64(200.0 / 111.0) + Duration::from_millis(200);
    let diff = with - b.estimate();
    assert!(
        diff.abs_diff(2 * alone) < Duration::from_millis(1),
        "{diff:?}"
    );
    b.writer_alone = true;
    b.schedulers.clear();
    b.tbfs_policies = vec![Policy::Default, Policy::Fifo];
    assert_eq!(b.alone_count(), 4);
}

fn row(system: &'static str, sched: &str, max_us: f64, p9999: f64, kept: f64) -> PriorityRow {
    PriorityRow {
        system,
        scheduler: sched.into(),
        rate: "111/s".into(),
        writes: 100,
        min_us: 1.0,
        p50_us: 2.0,
        p99_us: 3.0,
        p999_us: 4.0,
        p9999_us: p9999,
        p999999_us: p9999,
        max_us,
        background_mb_per_s: 100.0 * kept,
        background_alone_mb_per_s: 100.0,
        box_stats: None,
        slowest: Vec::new(),
        phases_sum: None,
        meta_holds: Vec::new(),
        log_writer_holds: Vec::new(),
        pool_waits: None,
        with_copy: true,
    }
}

fn alone(system: &'static str, max_us: f64, p9999: f64) -> PriorityRow {
    PriorityRow {
        background_mb_per_s: 0.0,
        background_alone_mb_per_s: 0.0,
        with_copy: false,
        ..row(system, "none", max_us, p9999, 0.0)
    }
}

/// A row whose p99.9 is `p999` and max `max_us`, at `rate`.
fn lat(system: &'static str, sched: &str, rate: &str, p999: f64, max_us: f64) -> PriorityRow {
    PriorityRow {
        rate: rate.into(),
        p999_us: p999,
        ..row(system, sched, max_us, p999, 0.9)
    }
}

#[test]
fn targets_hold_tbfs_to_its_own_writer_alone_and_below_every_kernel_scheduler() {
    let kernel = [
        lat("kernel", "bfq", "111/s", 20_000.0, 30_000.0),
        lat("kernel", "none", "111/s", 50_000.0, 90_000.0),
        lat("kernel", "bfq", "flat-out", 9_000.0, 12_000.0),
    ];
    // No tbfs case: nothing passes, and each line says why.
    let checks = check_targets(&kernel, &[]);
    assert_eq!(checks.len(), 3);
    assert!(
        checks
            .iter()
            .all(|c| !c.met && c.measured.contains("not measured")),
        "{checks:?}"
    );

    let mut rows = kernel.to_vec();
    rows.push(lat("tbfs", "default", "111/s", 3_000.0, 5_000.0));
    let lone = [lat("tbfs", "default", "111/s", 2_000.0, 2_000.0)];
    let checks = check_targets(&rows, &lone);
    assert!(checks.iter().all(|c| c.met), "{checks:?}");
    assert!(
        checks[0].measured.contains("1.5x alone's 2,000"),
        "{checks:?}"
    );
    assert!(
        checks[1].measured.contains("against 20,000 (bfq: 6.67x)"),
        "{checks:?}"
    );

    // Without its writer-alone run the isolation target is not measured.
    let checks = check_targets(&rows, &[]);
    assert!(
        !checks[0].met && checks[0].measured.contains("not measured"),
        "{checks:?}"
    );
    assert!(checks[1].met, "{checks:?}");

    // A max over 3x its lone max fails isolation even when below every kernel scheduler.
    let mut spiky = kernel.to_vec();
    spiky.push(lat("tbfs", "default", "111/s", 3_000.0, 7_000.0));
    let checks = check_targets(&spiky, &lone);
    assert!(!checks[0].met && checks[1].met, "{checks:?}");

    // Above the best kernel scheduler at its rate: the kernel target fails; a rate without any
    // kernel case is not measured.
    let mut slow = kernel.to_vec();
    slow.push(lat("tbfs", "default", "flat-out", 10_000.0, 11_000.0));
    slow.push(lat("tbfs", "default", "500/s", 1_000.0, 1_000.0));
    let checks = check_targets(&slow, &[]);
    assert!(!checks[1].met, "{checks:?}");
    assert!(
        checks[1].measured.contains("500/s: not measured"),
        "{checks:?}"
    );

    // The copy's share.
    rows.push(row("tbfs", "priority", 1_000.0, 1_000.0, 0.7));
    let checks = check_targets(&rows, &lone);
    assert!(
        !checks[2].met && checks[2].measured.contains("70 %"),
        "{checks:?}"
    );
    let quiet = [
        alone("kernel", 3_000.0, 2_000.0),
        alone("tbfs", 4_000.0, 2_500.0),
    ];
    let report = PriorityReport {
        experiment: "priority",
        write_bytes: 4096,
        copy_mb: 64,
        copy: "buffered",
        processes: false,
        tbfs_profile: Some(TbfsProfile {
            latency_goal_ms: 5.0,
            depth: 1,
            max_io_read: 1 << 20,
            max_io_write: 1 << 20,
            guard_write: 192 << 10,
            write_io_ns: 200_000.0,
            write_byte_ns: 4.0,
            flush_debt: Some(900 << 10),
            flush_byte_ns: 1.7,
        }),
        cases: rows,
        writer_alone: quiet.to_vec(),
        targets: checks,
    };
    let md = report.to_markdown();
    let (_, alone_part) = md.split_once("The writer alone, no copy").expect(&md);
    let alone_table: Vec<&str> = alone_part
        .lines()
        .take_while(|l| !l.starts_with("tbfs's scheduler"))
        .filter(|l| l.starts_with("| kernel") || l.starts_with("| tbfs"))
        .collect();
    assert_eq!(alone_table.len(), 2, "{md}");
    assert!(
        alone_table[1].contains("4,000") && !alone_table[1].contains('%'),
        "{md}"
    );
    assert_eq!(report.box_series().len(), 0);
    assert!(md.contains("| kernel | bfq "), "{md}");
    assert!(md.contains("90,000"), "{md}");
    assert!(md.contains("| NO "), "{md}");
    assert!(
        md.contains(
            "at depth 1, calibrated on the loop file system for a 5.0 ms goal: reads split to 1 MiB, writes to 1 MiB (192 KiB while the writer \
             is active: writes cost 200 µs + 4.000 ns per byte), a flush after 900 KiB"
        ),
        "{md}"
    );
}

#[test]
fn the_copy_alone_is_measured_before_and_after_the_writer() {
    // 100 MiB/s for 2 s alone, 50 MiB/s for 4 s under the writer, 200 MiB/s for 2 s alone.
    const S: u64 = 1_000_000_000;
    let mut samples = Vec::new();
    let mut bytes = 0;
    for ms in (0..=8000u64).step_by(10) {
        samples.push((ms * 1_000_000, bytes));
        let rate_mib = match ms {
            0..2000 => 100,
            2000..6000 => 50,
            _ => 200,
        };
        bytes += rate_mib * MIB / 100;
    }
    let (alone, under) = copy_rates(
        &samples,
        MonoNanos(0),
        MonoNanos(2 * S),
        2 * S,
        6 * S,
        Duration::from_secs(2),
    );
    assert!((alone - 150.0).abs() < 1.0, "alone {alone}");
    assert!((under - 50.0).abs() < 1.0, "under {under}");
    // A copy that stopped 1 s after the writer: only that second counts.
    let cut: Vec<_> = samples
        .iter()
        .copied()
        .filter(|&(t, _)| t <= 7 * S)
        .collect();
    let (alone, _) = copy_rates(
        &cut,
        MonoNanos(0),
        MonoNanos(2 * S),
        2 * S,
        6 * S,
        Duration::from_secs(2),
    );
    assert!((alone - 400.0 / 3.0).abs() < 1.0, "alone {alone}");
}

#[test]
fn percentiles_come_from_the_histogram() {
    let mut h = LatencyHistogram::new();
    for us in 1..=1000u64 {
        h.record(Duration::from_micros(us));
    }
    let r = PriorityRow::from_histogram("kernel", "none".into(), Rate::FlatOut, &h, 1.0, 2.0);
    assert_eq!(r.writes, 1000);
    assert!((r.p50_us - 500.0).abs() < 1.0, "{r:?}");
    assert!((r.max_us - 1000.0).abs() < 1.0, "{r:?}");
    assert!(r.p999999_us <= r.max_us && r.p9999_us <= r.p999999_us);
    assert!((r.copy_kept() - 0.5).abs() < 1e-12);
}

#[test]
fn the_copy_copies_whole_passes_and_reports_its_progress() {
    let dir = tempfile::tempdir_in(crate::experiments::fairness::default_scratch_parent()).unwrap();
    let src = dir.path().join("src");
    if let Err(e) = write_source(&src, 2 * MIB) {
        // A file system without O_DIRECT (tmpfs) cannot run the copy; nothing else may fail.
        assert!(
            e.contains("O_DIRECT") || e.contains("Invalid argument"),
            "{e}"
        );
        return;
    }
    let dst_dir = dir.path().join("dst");
    std::fs::create_dir(&dst_dir).unwrap();
    let spec = CopySpec {
        src: src.clone(),
        dst_dir: dst_dir.clone(),
        chunk_bytes: 512 << 10,
        mode: CopyMode::Direct,
    };
    let (handle, writer) = start_copy(spec);
    // Stop once a second pass has begun, so one whole copy was made.
    while !handle.is_finished() && passes(&dst_dir).iter().all(|&n| n == 0) {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(writer);
    let (result, out) = handle.join().unwrap();
    result.unwrap();
    let samples = progress_of(out);
    assert!(samples
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[1].1 == w[0].1 + (512 << 10)));
    assert!(samples.last().unwrap().1 >= 2 * MIB);
    // A pass is removed once the next has begun: one or two remain, the older one whole.
    let left = passes(&dst_dir);
    assert!(
        !left.is_empty() && left.len() <= 2 && left[0] >= 1,
        "{left:?}"
    );
    let src_bytes = std::fs::read(&src).unwrap();
    for (i, n) in left.iter().enumerate() {
        let copy = std::fs::read(dst_dir.join(format!("copy-{n}"))).unwrap();
        if i + 1 < left.len() {
            assert_eq!(copy, src_bytes, "copy-{n} is whole");
        } else {
            assert!(copy.len() <= src_bytes.len());
            assert_eq!(copy[..], src_bytes[..copy.len()], "copy-{n} is a prefix");
        }
    }
}

#[test]
fn the_buffered_copy_runs_cp_in_whole_passes_and_reports_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let src_bytes: Vec<u8> = (0..3 * MIB + 123).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &src_bytes).unwrap();
    let dst_dir = dir.path().join("dst");
    std::fs::create_dir(&dst_dir).unwrap();
    let spec = CopySpec {
        src: src.clone(),
        dst_dir: dst_dir.clone(),
        chunk_bytes: 512 << 10,
        mode: CopyMode::Buffered,
    };
    assert!(spec.args().windows(2).any(|w| w == ["--copy", "buffered"]));
    let (handle, writer) = start_copy(spec);
    // Stop once a pass numbered 2 or more was seen, whenever that is: two whole copies were
    // made by then, and the passes before it removed.
    while !handle.is_finished() && passes(&dst_dir).last().is_none_or(|&n| n < 2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(writer);
    let (result, out) = handle.join().unwrap();
    result.unwrap();
    let samples = progress_of(out);
    assert!(samples
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    let len = src_bytes.len() as u64;
    assert!(samples.last().unwrap().1 >= 2 * len);
    for whole in [len, 2 * len] {
        assert!(
            samples.iter().any(|s| s.1 == whole),
            "a pass ended at {whole}"
        );
    }
    // Each pass removes the copy before it: at most the last remains, a prefix of the source.
    let left = passes(&dst_dir);
    assert!(left.len() <= 1 && left.iter().all(|&n| n >= 2), "{left:?}");
    for n in left {
        let last = std::fs::read(dst_dir.join(format!("copy-{n}"))).unwrap();
        assert_eq!(last[..], src_bytes[..last.len()], "copy-{n} is a prefix");
    }
}

#[test]
fn copy_modes_parse_by_name() {
    for m in [CopyMode::Buffered, CopyMode::Direct] {
        assert_eq!(CopyMode::parse(m.name()), Some(m));
    }
    assert_eq!(CopyMode::parse("cached"), None);
    assert_eq!(CopyMode::default(), CopyMode::Buffered);
}

/// The copy passes in `dir`, by number.
fn passes(dir: &Path) -> Vec<u64> {
    let mut n: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("copy-").and_then(|n| n.parse().ok())
        })
        .collect();
    n.sort_unstable();
    n
}

/// A copy running on a thread of its own: its result and its output.
type CopyThread = std::thread::JoinHandle<(Result<(), String>, Vec<u8>)>;

/// Runs `spec` on a thread of its own, told `go` already; dropping the returned stream stops it.
fn start_copy(spec: CopySpec) -> (CopyThread, std::os::unix::net::UnixStream) {
    let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = spec.run(std::io::BufReader::new(reader), &mut out);
        (r, out)
    });
    writeln!(writer, "{GO}").unwrap();
    (handle, writer)
}

/// The copy's progress samples from its output, which starts with `ready`, ends with `done` and
/// counts from 0.
fn progress_of(out: Vec<u8>) -> Vec<(u64, u64)> {
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&READY));
    assert_eq!(lines.last(), Some(&DONE));
    let samples: Vec<(u64, u64)> = lines[1..lines.len() - 1]
        .iter()
        .map(|l| parse_copied(l).unwrap())
        .collect();
    assert_eq!(samples[0].1, 0);
    samples
}
