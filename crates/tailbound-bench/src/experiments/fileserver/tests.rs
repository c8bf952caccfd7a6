use super::*;

fn tiny() -> FileserverBench {
    FileserverBench {
        threads: vec![4],
        mean_sizes: vec![16 << 10],
        duration: Duration::from_millis(200),
        files: Some(100),
        systems: vec![System::Tmpfs, System::TbfsNative, System::TbfsShimPrivate],
        repeats: 3,
        pool_bytes_override: Some(256 << 20),
        ..FileserverBench::paper()
    }
}

/// Without tmpfs at `SHM_DIR` these tests cannot run; CI has it, so there they must.
fn no_shm() -> bool {
    if Path::new(SHM_DIR).is_dir() {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI has {SHM_DIR} and must run this test"
    );
    eprintln!("skipped: no {SHM_DIR}");
    true
}

#[test]
fn a_run_reports_medians_and_names_what_could_not_run() {
    if no_shm() {
        return;
    }
    // Its own directory on tmpfs, so "nothing left" is about this run alone.
    let shm = tempfile::tempdir_in(SHM_DIR).unwrap();
    let bench = FileserverBench {
        shm_dir: shm.path().to_path_buf(),
        ..tiny()
    };
    let mut heard = 0;
    let report = bench.run(|_, _| heard += 1).unwrap();
    assert_eq!(heard, 6, "two systems, three runs each");
    assert_eq!(report.cases.len(), 2);
    for c in &report.cases {
        assert_eq!(c.runs_ops_per_s.len(), 3);
        let mut sorted = c.runs_ops_per_s.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(c.ops_per_s, sorted[1], "the median run");
        assert!(c.ops_per_s > 0.0 && c.mb_per_s > 0.0);
        assert_eq!(
            (c.workload, c.threads, c.mean_file_kib),
            ("fileserver", 4, 16)
        );
    }
    assert_eq!(report.unavailable.len(), 1);
    assert_eq!(report.unavailable[0].system, "tbfs-shim-private");
    // The targets name the missing shim and are not met.
    assert_eq!(report.targets.len(), 4);
    assert!(report.targets.iter().all(|t| !t.met));
    assert!(report.targets[0]
        .measured
        .contains("tbfs-shim-private unavailable"));
    let md = report.to_markdown();
    assert!(md.contains("tbfs-native/tmpfs"), "{md}");
    assert!(md.contains("createfile1"));
    // Nothing is left in its directory.
    let left: Vec<_> = std::fs::read_dir(shm.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn targets_compare_the_shim_with_the_baselines_of_the_same_run() {
    let run = |ops: f64, user: f64, sys: f64| RunResult {
        workload: Workload::Fileserver,
        processes: 0,
        threads: 20,
        files: 10,
        mean_file_kib: 128,
        elapsed_s: 1.0,
        setup_s: 0.0,
        mkfs_s: 0.0,
        ops: ops as u64,
        ops_per_s: ops,
        bytes: 0,
        mb_per_s: 0.0,
        user_cpu_s: user,
        sys_cpu_s: sys,
        cpus: 2,
        user_cpu_pct: 50.0 * user,
        sys_cpu_pct: 50.0 * sys,
        flowops: Vec::new(),
        engine: None,
    };
    let cases = vec![
        CaseRow::from_runs(System::XfsRam, vec![run(1000.0, 0.2, 1.6)]),
        CaseRow::from_runs(System::Tmpfs, vec![run(1500.0, 0.3, 1.5)]),
        CaseRow::from_runs(System::TbfsShimPrivate, vec![run(1800.0, 1.9, 0.1)]),
    ];
    let t = targets(&cases, &[]);
    assert!(t[0].met, "{:?}", t[0]);
    assert!(t[0].measured.starts_with("1.80x"));
    assert!(t[..3]
        .iter()
        .all(|t| t.target.starts_with("tbfs-shim-private ")));
    assert!(!t[1].met, "1.2x tmpfs is short of 1.3x");
    assert!(t[2].met, "95 % user");
    assert!(t[3].measured.contains("tbfs-fuse not run"), "{:?}", t[3]);
    let mut with_fuse = cases.clone();
    with_fuse.push(CaseRow::from_runs(
        System::Ext4Ram,
        vec![run(1000.0, 0.2, 1.6)],
    ));
    with_fuse.push(CaseRow::from_runs(
        System::TbfsFuse,
        vec![run(800.0, 0.5, 1.0)],
    ));
    let t = targets(&with_fuse, &[]);
    assert!(t[3].met && t[3].measured.starts_with("0.80x"), "{:?}", t[3]);
    assert!(
        !t[3].measured.contains("floor"),
        "no floor measured: {:?}",
        t[3]
    );
    // With FUSE's floor in the same run, the FUSE target's line gives both of its ratios.
    let mut with_floor = with_fuse.clone();
    with_floor.push(CaseRow::from_runs(
        System::FusePassthrough,
        vec![run(400.0, 0.1, 1.0)],
    ));
    let t = targets(&with_floor, &[]);
    assert!(
        t[3].measured
            .ends_with("; FUSE's floor fuse-passthrough 0.40x ext4-ram, tbfs-fuse 2.00x fuse-passthrough (400 ops/s)"),
        "{:?}",
        t[3]
    );
    assert_eq!(
        t[3].met,
        targets(&with_fuse, &[])[3].met,
        "the floor is not a target"
    );
    with_fuse.last_mut().unwrap().ops_per_s = 600.0;
    assert!(!targets(&with_fuse, &[])[3].met, "0.6x is short of 0.7x");
    let t = targets(&cases[..2], &[]);
    assert!(t.iter().all(|t| !t.met));
    assert!(t[0].measured.contains("not run"));
    // The served shim's figures are not the single-process shim's: at 20 threads in one
    // process they meet none of its targets.
    let mut served = cases.clone();
    served[2] = CaseRow::from_runs(System::TbfsShim, vec![run(1800.0, 1.9, 0.1)]);
    let t = targets(&served, &[]);
    assert!(t[..3].iter().all(|t| !t.met), "{t:?}");
    assert!(
        t[0].measured.contains("tbfs-shim-private not run"),
        "{:?}",
        t[0]
    );
}

#[test]
fn the_process_model_targets_name_the_served_shim() {
    let run = |system: System, processes: u32, threads: u32, ops: f64| {
        let r = RunResult {
            workload: Workload::Fileserver,
            processes,
            threads,
            files: 10,
            mean_file_kib: 128,
            elapsed_s: 1.0,
            setup_s: 0.0,
            mkfs_s: 0.0,
            ops: ops as u64,
            ops_per_s: ops,
            bytes: 0,
            mb_per_s: 0.0,
            user_cpu_s: 1.0,
            sys_cpu_s: 0.1,
            cpus: 2,
            user_cpu_pct: 50.0,
            sys_cpu_pct: 5.0,
            flowops: Vec::new(),
            engine: None,
        };
        CaseRow::from_runs(system, vec![r])
    };
    let cases = vec![
        run(System::Tmpfs, 1, 20, 1000.0),
        run(System::XfsRam, 1, 20, 600.0),
        run(System::TbfsShim, 1, 20, 1000.0),
        run(System::Tmpfs, 4, 5, 1000.0),
        run(System::TbfsShim, 4, 5, 900.0),
    ];
    let t = targets(&cases, &[]);
    assert_eq!(t.len(), 3);
    assert!(
        t.iter().all(|t| t.target.starts_with("tbfs-shim >= ")),
        "{t:?}"
    );
    assert!(t[0].met && t[1].met, "{t:?}");
    assert!(
        !t[2].met && t[2].measured.starts_with("0.90x"),
        "{:?}",
        t[2]
    );
}

#[test]
fn the_child_prints_one_json_line_the_parent_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        files: 50,
        threads: 2,
        mean_file_bytes: 4 << 10,
        duration: Duration::from_millis(100),
        // Two loops per thread, however slow the machine: a run ended by the clock could
        // finish no operation on a loaded one.
        loops_max: Some(2),
        ..Params::fileserver()
    };
    let mut out = Vec::new();
    run_child(&dir.path().join("mnt"), &p, None, &mut out).unwrap();
    let mut noisy = b"some other line\n".to_vec();
    noisy.extend_from_slice(&out);
    let r = parse_child_output(&noisy).unwrap();
    assert_eq!((r.threads, r.files, r.mean_file_kib), (2, 50, 4));
    assert!(r.ops > 0);
    assert!(parse_child_output(b"").is_err());
    assert!(parse_child_output(b"{not json").is_err());
    // The arguments name everything the child needs.
    let args = child_args(Path::new("/m"), &p, None);
    assert_eq!(args[..2], ["--dir", "/m"]);
    // The private system's child runs under `run --private`; the served one's does not.
    for private in [false, true] {
        let shim = ShimPool {
            pool: Path::new("/shm/p"),
            mount: Path::new("/m"),
            bytes: 1 << 30,
            private,
        };
        let run = shim_run_args(&shim);
        assert_eq!(run[..3], ["run", "--mount", "/m=/shm/p"]);
        assert_eq!(run.last().map(String::as_str), Some("--"));
        assert_eq!(run.iter().any(|a| a == "--private"), private);
    }
    assert!(args.windows(2).any(|w| w == ["--duration", "100ms"]));
}

#[test]
fn bad_parameters_are_refused() {
    for bench in [
        FileserverBench {
            threads: vec![],
            ..tiny()
        },
        FileserverBench {
            threads: vec![0],
            ..tiny()
        },
        FileserverBench {
            repeats: 0,
            ..tiny()
        },
        FileserverBench {
            systems: vec![],
            ..tiny()
        },
        FileserverBench {
            duration: Duration::ZERO,
            ..tiny()
        },
        FileserverBench {
            files: Some(0),
            ..tiny()
        },
    ] {
        assert!(matches!(bench.validate(), Err(FileserverError::Invalid(_))));
    }
    assert_eq!(System::parse("XFS-RAM"), Some(System::XfsRam));
    assert_eq!(System::parse("xfs"), None);
    assert_eq!(
        System::parse("tbfs-shim-private"),
        Some(System::TbfsShimPrivate)
    );
    // The private shim serves one process: the process model cannot run it.
    let forked = FileserverBench {
        processes: Some(2),
        exe: Some(PathBuf::from("/bin/true")),
        ..tiny()
    };
    assert!(forked
        .unavailable(System::TbfsShimPrivate)
        .is_some_and(|why| why.contains("one process")));
}

#[test]
fn ratios_set_tbfs_and_the_fuse_floor_against_kernel_file_systems() {
    use passthrough::ratio_shown;
    assert!(ratio_shown("tbfs-native", "tmpfs"));
    assert!(ratio_shown("fuse-passthrough", "ext4-ram"));
    assert!(ratio_shown("tbfs-fuse", "fuse-passthrough"));
    // The floor is FUSE's: only the FUSE front end is set against it.
    assert!(!ratio_shown("tbfs-shim", "fuse-passthrough"));
    assert!(!ratio_shown("tbfs-native", "fuse-passthrough"));
    assert!(!ratio_shown("ext4-ram", "fuse-passthrough"));
    assert!(!ratio_shown("tmpfs", "xfs-ram"));
    assert!(!ratio_shown("fuse-passthrough", "tbfs-fuse"));
    assert_eq!(
        System::parse("fuse-passthrough"),
        Some(System::FusePassthrough)
    );
}

/// Pages of this process's mapping of `path` that are in its page tables, and the mapping's
/// size, in KiB (`/proc/self/smaps`).
fn mapped_kib(path: &Path) -> Option<(u64, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.display().to_string();
    let mut lines = smaps.lines().skip_while(|l| !l.ends_with(&name));
    lines.next()?;
    let field = |l: &str, key: &str| {
        l.strip_prefix(key)
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    let (mut size, mut rss) = (None, None);
    for l in lines.take_while(|l| !l.ends_with(&name)) {
        size = size.or_else(|| field(l, "Size:"));
        rss = rss.or_else(|| field(l, "Rss:"));
    }
    Some((rss?, size?))
}

#[test]
fn the_child_starts_its_clock_once_a_reopened_pool_is_mapped() {
    if no_shm() {
        return;
    }
    let shm = tempfile::tempdir_in(SHM_DIR).unwrap();
    let path = shm.path().join("mapped.pool");
    let bytes = 256u64 << 20;
    drop(MemoryPool::create(&path, bytes).unwrap());
    // Reopened, as the private shim's child opens the pool the bench made: its pages are mapped
    // by a background thread.
    let pool = MemoryPool::open(&path).unwrap();
    // The thread names itself once it runs: wait for that (or for its work, if it was quick).
    while !this_process_has_thread(POOL_MAPPING_THREAD)
        && mapped_kib(&path).is_some_and(|(rss, size)| rss < size)
    {
        std::thread::yield_now();
    }
    wait_for_pool_mapping(Duration::from_secs(600));
    let (rss, size) = mapped_kib(&path).expect("the pool is mapped");
    assert_eq!(size, bytes >> 10);
    assert_eq!(
        rss, size,
        "every page of the pool is mapped once the wait returns"
    );
    drop(pool);
}
