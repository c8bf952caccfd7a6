use super::*;

#[test]
fn catalogue_has_the_issues_grid_and_ext4() {
    let ids: Vec<String> = catalogue().iter().map(FsConfig::id).collect();
    assert_eq!(
        ids,
        [
            "ext4",
            "tbfs-strict-every-checkpoint",
            "tbfs-strict-superblock",
            "tbfs-relaxed-every-checkpoint",
            "tbfs-relaxed-superblock",
            "tbfs-relaxed-every-log",
        ]
    );
    let ext4 = FsConfig::ext4();
    assert_eq!(ext4.ordering_label(), "n/a");
    assert_eq!(ext4.barrier_label(), "every-log");
}

#[test]
fn selectors_pick_by_id_or_leading_part() {
    assert_eq!(select_configs(&["tbfs".into()]).unwrap().len(), 5);
    assert_eq!(select_configs(&["tbfs-relaxed".into()]).unwrap().len(), 3);
    let picked = select_configs(&["TBFS-strict-superblock".into(), "ext4".into()]).unwrap();
    assert_eq!(
        picked,
        [
            FsConfig::ext4(),
            FsConfig::tbfs(Ordering::Strict, Barrier::Superblock)
        ]
    );
    assert!(matches!(
        select_configs(&["tbfs-rel".into()]),
        Err(SyncWriteError::UnknownCase(_))
    ));
}

#[test]
fn random_rewrite_visits_every_block_once_and_replays() {
    let bench = SyncWriteBench {
        file_bytes: 1 << 20,
        ..SyncWriteBench::quick(PathBuf::from("/nonexistent"))
    };
    let order = bench.random_order(4096);
    assert_eq!(order, bench.random_order(4096));
    assert_ne!(order, (0..256).collect::<Vec<_>>());
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..256).collect::<Vec<_>>());
}

#[test]
fn bad_sizes_are_refused_before_anything_runs() {
    let dir = PathBuf::from("/nonexistent");
    let mut bench = SyncWriteBench::quick(dir);
    assert!(bench.validate().is_ok());
    bench.buffers = vec![6000];
    assert!(bench.validate().is_err());
    bench.buffers = vec![64 << 10];
    bench.file_bytes = 100 << 10;
    let err = bench.validate().unwrap_err();
    assert!(err.to_string().contains("whole number"), "{err}");
}

fn row(config: FsConfig, pattern: Pattern, buffer_kib: u64, mb_per_s: f64) -> SyncWriteRow {
    SyncWriteRow {
        fs: config.fs.name(),
        ordering: config.ordering_label(),
        barrier: config.barrier_label(),
        pattern: pattern.name(),
        buffer_kib,
        mb_per_s,
        bytes: 1 << 20,
        seconds: 1.0,
        tbfs: None,
    }
}

#[test]
fn ratios_and_targets_follow_the_rows() {
    use Barrier::EveryCheckpoint as Ec;
    let strict = FsConfig::tbfs(Ordering::Strict, Ec);
    let relaxed = FsConfig::tbfs(Ordering::Relaxed, Ec);
    let mut rows = Vec::new();
    for pattern in Pattern::ALL {
        rows.push(row(FsConfig::ext4(), pattern, 4, 10.0));
        rows.push(row(strict, pattern, 4, 10.0));
        rows.push(row(relaxed, pattern, 4, 25.0));
    }
    let r = ratios(&rows);
    // relaxed/strict and relaxed/ext4 for each of three patterns at one buffer size.
    assert_eq!(r.len(), 6, "{r:?}");
    assert!(r.iter().all(|r| (r.ratio - 2.5).abs() < 1e-9));
    let checks = check_targets(&r);
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert!(checks.iter().all(|c| c.met), "{checks:?}");
    rows[2].mb_per_s = 5.0; // relaxed write slower than ext4
    let checks = check_targets(&ratios(&rows));
    assert!(checks[0].met && !checks[1].met, "{checks:?}");
    assert!(
        checks[1].measured.contains("0.50x (write 4 KiB)"),
        "{checks:?}"
    );
    let report = SyncWriteReport {
        experiment: "sync-write",
        file_mib: 1,
        pool_mib: 72,
        pool_io: String::new(),
        cases: rows,
        ratios: ratios(&[]),
        targets: checks,
    };
    let md = report.to_markdown();
    assert!(md.contains("| ext4 "), "{md}");
    assert!(md.contains("| NO "), "{md}");
    let (groups, series) = report.bar_series();
    assert_eq!(groups.len(), 3);
    assert_eq!(series.len(), 3);
    assert_eq!(series[0].0, "ext4");
}

#[test]
fn throughput_is_finite_even_without_elapsed_time() {
    assert_eq!(mb_per_s(1 << 20, 0.0), 0.0);
    assert!((mb_per_s(4 << 20, 2.0) - 2.0).abs() < 1e-12);
}
