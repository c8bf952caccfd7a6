use super::*;

#[test]
fn ratio_error_is_the_worst_relative_deviation() {
    assert_eq!(ratio_error(&[2, 1], &[200.0, 100.0]), 0.0);
    // 1.5:1 for 2:1: shares 0.6/0.4 against 2/3 and 1/3; B is 20 % over its share.
    let e = ratio_error(&[2, 1], &[150.0, 100.0]);
    assert!((e - 0.2).abs() < 1e-12, "{e}");
    let e = ratio_error(&[3, 2, 2, 1], &[300.0, 200.0, 200.0, 100.0]);
    assert!(e.abs() < 1e-12, "{e}");
    let e = ratio_error(&[1, 1], &[100.0, 100.0 * 1.1]);
    assert!((e - (1.1 / 2.1 - 0.5) / 0.5).abs() < 1e-12, "{e}");
    assert!(ratio_error(&[2, 1], &[0.0, 0.0]).is_nan());
    assert!(ratio_error(&[2, 1], &[1.0]).is_nan());
}

#[test]
fn ratios_print_like_the_paper() {
    assert_eq!(ratio_string(&[2, 1], &[193.0, 100.0]), "1.93:1");
    assert_eq!(
        ratio_string(&[3, 2, 2, 1], &[3.0, 2.0, 2.0, 1.0]),
        "3:2:2:1"
    );
    assert_eq!(ratio_string(&[2, 1], &[1.0, 0.0]), "-");
    assert_eq!(weights_label(&[3, 2, 2, 1]), "3:2:2:1");
}

#[test]
fn tenant_lines_parse_and_garbage_is_an_error() {
    let ops = parse_ops(&["op 1 5 4096".into(), "op 5 9 4096".into()]).unwrap();
    assert_eq!(ops, [(1, 5, 4096), (5, 9, 4096)]);
    assert!(parse_ops(&["op 1 x 4096".into()]).is_err());
    assert!(parse_ops(&["hello".into()]).is_err());
}

#[test]
fn sizes_follow_the_largest_block_and_weight_set() {
    let mut b = FairnessBench::quick(PathBuf::from("/nonexistent"));
    assert_eq!(b.region_bytes(), REGION_BYTES_QUICK);
    assert_eq!(b.device_bytes(), 2 * REGION_BYTES_QUICK);
    b.block_mibs = vec![100];
    b.weight_sets = WEIGHT_SETS.iter().map(|w| w.to_vec()).collect();
    assert_eq!(b.region_bytes(), 400 * MIB);
    assert_eq!(b.device_bytes(), 1600 * MIB);
    assert_eq!(b.case_count(), 4 * 3 * 2);
    let full = FairnessBench::full(PathBuf::new());
    assert_eq!(full.case_count(), 4 * 3 * 2 * 5);
}

#[test]
fn bad_parameters_are_refused_before_anything_runs() {
    let mut b = FairnessBench::quick(PathBuf::new());
    assert!(b.validate().unwrap_err().to_string().contains("binary"));
    b.child_exe = Some(PathBuf::from("/bin/true"));
    assert!(b.validate().is_ok());
    b.weight_sets = vec![vec![11, 1]];
    assert!(b.validate().is_err());
    b.weight_sets = vec![vec![2]];
    assert!(b.validate().is_err());
    b.weight_sets = vec![vec![2, 1]];
    b.block_mibs = vec![];
    assert!(b.validate().is_err());
}

#[test]
fn a_window_holds_enough_blocks_of_the_lightest_tenant() {
    let four = Duration::from_secs(4);
    // Nothing measured yet for the operation, or lengthening off: the window as given.
    assert_eq!(window_for(four, 10, 100, &[3, 2, 2, 1], None), four);
    assert_eq!(window_for(four, 0, 100, &[3, 2, 2, 1], Some(240.0)), four);
    // Small blocks fit in the shortest window.
    assert_eq!(window_for(four, 10, 1, &[2, 1], Some(300.0)), four);
    // The weight-1 tenant of 3:2:2:1 gets 240/8 = 30 MB/s: 10 blocks of 10 MiB take 3.3 s,
    // of 30 MiB 10 s.
    assert_eq!(window_for(four, 10, 10, &[3, 2, 2, 1], Some(240.0)), four);
    let w = window_for(four, 10, 30, &[3, 2, 2, 1], Some(240.0));
    assert!((w.as_secs_f64() - 10.0).abs() < 1e-9, "{w:?}");
    // At most a minute, unless the shortest window is longer; a nonsense total is ignored.
    assert_eq!(
        window_for(four, 10, 100, &[3, 2, 2, 1], Some(1.0)),
        WINDOW_MAX
    );
    let long = Duration::from_secs(90);
    assert_eq!(window_for(long, 10, 100, &[2, 1], Some(1.0)), long);
    assert_eq!(window_for(four, 10, 100, &[2, 1], Some(f64::NAN)), four);
    assert_eq!(window_for(four, 10, 100, &[2, 1], Some(0.0)), four);
}

#[test]
fn the_throughput_target_compares_each_tbfs_case_with_its_fifo_case() {
    let row = |system: &'static str, block_mb: u64, total: f64| FairnessRow {
        system,
        weights: vec![2, 1],
        op: "read",
        block_mb,
        window_s: 4.0,
        shares_mb_per_s: vec![total * 2.0 / 3.0, total / 3.0],
        ratio_error: 0.0,
        total_mb_per_s: total,
        writers: Vec::new(),
        accounting: None,
        pool_waits: None,
    };
    let rows = [
        row("tbfs", 1, 99.0),
        row("tbfs-fifo", 1, 100.0),
        row("tbfs", 10, 97.0),
        row("tbfs-fifo", 10, 100.0),
    ];
    let check = &check_targets(&rows)[1];
    assert!(!check.met, "{check:?}");
    assert!(check.measured.contains("97.0 %"), "{check:?}");
    assert!(check.measured.contains("10 MiB"), "{check:?}");
    assert!(check_targets(&rows[..2])[1].met);
    // A tbfs case without its fifo case cannot pass.
    assert!(!check_targets(&rows[..1])[1].met);
    assert!(!check_targets(&[rows[0].clone(), rows[1].clone(), rows[2].clone()])[1].met);
}

#[test]
fn targets_are_not_met_without_tailbounds_rows() {
    let row = FairnessRow {
        system: "bfq",
        weights: vec![2, 1],
        op: "read",
        block_mb: 1,
        window_s: 4.0,
        shares_mb_per_s: vec![2.0, 1.0],
        ratio_error: 0.0,
        total_mb_per_s: 3.0,
        writers: Vec::new(),
        accounting: None,
        pool_waits: None,
    };
    let checks = check_targets(std::slice::from_ref(&row));
    assert!(checks.iter().all(|c| !c.met), "{checks:?}");
    let tb = FairnessRow {
        system: "tbfs",
        ratio_error: 0.05,
        ..row.clone()
    };
    let checks = check_targets(&[row.clone(), tb.clone()]);
    assert!(
        !checks[0].met && checks[0].measured.contains("5.0 %"),
        "{checks:?}"
    );
    let tb = FairnessRow {
        ratio_error: 0.01,
        ..tb
    };
    assert!(check_targets(std::slice::from_ref(&tb))[0].met);
    let report = FairnessReport {
        experiment: "fairness",
        device: "x".into(),
        region_mb: 1,
        warmup_s: 0.1,
        window_s: 1.0,
        cases: vec![row, tb],
        targets: vec![],
    };
    let md = report.to_markdown();
    assert!(md.contains("| bfq "), "{md}");
    assert!(md.contains("2:1"), "{md}");
    let (groups, series) = report.bar_series();
    assert_eq!(groups, ["2:1 read 1 MiB"]);
    assert_eq!(series.len(), 2);
}

#[test]
fn tenant_specs_round_trip_their_arguments() {
    let spec = TenantSpec {
        device: PathBuf::from("/dev/loop9"),
        region_offset: 1 << 20,
        region_bytes: 64 << 20,
        op: IoOp::Write,
        block_bytes: 10 << 20,
    };
    let args = spec.args();
    assert_eq!(&args[..3], ["bench", "fairness", "--child"]);
    let value_of = |flag: &str| {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1].clone()
    };
    assert_eq!(value_of("--device"), "/dev/loop9");
    assert_eq!(value_of("--op"), "write");
    assert_eq!(value_of("--block-bytes"), (10u64 << 20).to_string());
}

#[test]
fn a_tenant_streams_through_its_region_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    let spec = TenantSpec {
        device: path.clone(),
        region_offset: 256 << 10,
        region_bytes: 512 << 10,
        op: IoOp::Write,
        block_bytes: 128 << 10,
    };
    let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut out = Vec::new();
    let handle = std::thread::spawn(move || {
        let r = spec.run(std::io::BufReader::new(reader), &mut out);
        (r, out)
    });
    writeln!(writer, "{GO}").unwrap();
    // Stop once the first request has reached the file (or the tenant gave up).
    while !handle.is_finished() && std::fs::read(&path).unwrap()[256 << 10] == 7 {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(writer);
    let (result, out) = handle.join().unwrap();
    let result: Result<(), String> = result;
    if let Err(e) = &result {
        // tmpfs refuses O_DIRECT; nothing else may fail.
        assert!(e.contains("O_DIRECT"), "{e}");
        return;
    }
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<String> = text.lines().map(String::from).collect();
    assert_eq!(lines.first().map(String::as_str), Some(READY));
    assert_eq!(lines.last().map(String::as_str), Some(DONE));
    let ops = parse_ops(&lines[1..lines.len() - 1]).unwrap();
    assert!(!ops.is_empty());
    assert!(ops.iter().all(|&(s, e, b)| s <= e && b == 128 << 10));
    // Only the region was written.
    let data = std::fs::read(&path).unwrap();
    assert!(data[..256 << 10].iter().all(|&b| b == 7));
    assert!(data[768 << 10..].iter().all(|&b| b == 7));
    assert!(data[256 << 10..384 << 10].iter().all(|&b| b != 7));
}
