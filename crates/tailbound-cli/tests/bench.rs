//! `tailbound bench record`, `sync-write`, `recovery` and `tailbound demo` end to end, on small
//! sizes. These check that each experiment runs, reports and cleans up; they never judge the
//! latencies, throughputs or recovery times it measures.

use std::path::Path;
use std::process::Command;

mod common;
use common::{is_root, read_json, require_root, stderr, stdout, tailbound};

#[test]
fn list_shows_the_papers_columns_and_tailbounds_modes() {
    let out = tailbound(&["bench", "record", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for id in [
        "NONE@none",
        "ALL@none",
        "ALL-BGTRUNC@bgtrunc",
        "WPRE-SDATA-FON-BGALL@bgall",
        "tailbound@buffered-writer",
        "tailbound-recycle@direct-writer",
        "tailbound-decoupled@seq-read",
        "tailbound-write@none",
        "FLOOR@bgall",
    ] {
        assert!(text.contains(id), "missing {id} in:\n{text}");
    }
    // 12 paper columns, NONE under the 5 other loads, and 5 tailbound modes and FLOOR under all 6.
    assert_eq!(text.lines().count(), 12 + 5 + 6 * 6);
}

#[test]
fn a_small_run_writes_table_json_and_svg_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let json = dir.path().join("out/record.json");
    let svg = dir.path().join("out/record.svg");
    let out = tailbound(&[
        "bench",
        "record",
        "--cases",
        "NONE@none,tailbound@none,tailbound-recycle@none,tailbound-decoupled@none",
        "--writes",
        "60",
        "--sets",
        "2",
        "--period",
        "1ms",
        "--size",
        "4KiB",
        "--dir",
        work.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("| case"), "{table}");
    assert!(table.contains("tailbound-decoupled (producer)"), "{table}");

    let report = read_json(&json);
    assert_eq!(report["experiment"], "record");
    let cases = report["cases"].as_array().unwrap();
    // Four cases, and the decoupled one has an extra producer row.
    assert_eq!(cases.len(), 5, "{report:#}");
    for case in cases {
        for key in [
            "name",
            "design",
            "load",
            "sets",
            "writes",
            "min_us",
            "mean_us",
            "p99_us",
            "p999_us",
            "max_us",
            "deadline_misses",
        ] {
            assert!(case.get(key).is_some(), "missing {key} in {case}");
        }
        assert_eq!(case["writes"], 60);
        assert_eq!(case["sets"], 2);
        assert_eq!(case["load"], "none");
        let min = case["min_us"].as_f64().unwrap();
        let max = case["max_us"].as_f64().unwrap();
        assert!(min > 0.0 && min <= max, "{case}");
    }
    assert!(cases
        .iter()
        .any(|c| c["name"] == "tailbound-decoupled" && c["design"] == "decoupled-producer"));
    assert!(report["targets"].as_array().is_some_and(|t| !t.is_empty()));

    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.contains("<svg"));
    assert!(svg_text.contains("tailbound-recycle@none"));

    // Recordings, pools and load files are removed; the directory itself is the user's.
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn unknown_cases_and_bad_numbers_are_clear_errors() {
    let out = tailbound(&["bench", "record", "--cases", "BOGUS"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("BOGUS"), "{}", stderr(&out));
    let out = tailbound(&["bench", "record", "--writes", "0", "--cases", "NONE@none"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--writes"), "{}", stderr(&out));
    let out = tailbound(&["bench", "record", "--period", "5 fortnights"]);
    assert!(!out.status.success());
}

fn dirty_sysctls() -> Vec<String> {
    [
        "dirty_ratio",
        "dirty_background_ratio",
        "dirty_bytes",
        "dirty_background_bytes",
        "dirty_expire_centisecs",
    ]
    .iter()
    .map(|name| std::fs::read_to_string(format!("/proc/sys/vm/{name}")).unwrap())
    .collect()
}

#[test]
fn loop_ext4_runs_flusher_off_cases_and_restores_the_machine() {
    let _loops = loop_guard();
    if !require_root("loop_ext4_runs_flusher_off_cases_and_restores_the_machine") {
        return;
    }
    let before = dirty_sysctls();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("record.json");
    let out = tailbound(&[
        "bench",
        "record",
        "--loop-ext4",
        "--cases",
        "ALL@none,WAPPEND-SDATA-FOFF@none,tailbound@none",
        "--writes",
        "40",
        "--period",
        "1ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&json);
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    assert!(
        cases.iter().all(|c| c.get("skipped").is_none()),
        "as root nothing is skipped: {report:#}"
    );
    assert_eq!(dirty_sysctls(), before, "flusher sysctls restored");
    loop_devices_and_mounts_are_gone(&stderr(&out));
}

#[test]
fn demo_runs_end_to_end_on_a_short_stream() {
    let out = tailbound(&["demo", "--writes", "40"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("NONE@buffered-writer"), "{text}");
    assert!(text.contains("tailbound@none"), "{text}");
    assert!(text.contains("targets met"), "{text}");
    // At least 3 sets, FLOOR and the conventional design beside tailbound, the targets,
    // and what real-time settings were used.
    assert!(text.contains("3 sets of 40 writes"), "{text}");
    assert!(text.contains("FLOOR@none"), "{text}");
    assert!(text.contains("FLOOR@buffered-writer"), "{text}");
    assert!(
        text.contains("tailbound-decoupled/producer@buffered-writer"),
        "{text}"
    );
    for target in [
        "tailbound's max ≤ ½ of the conventional design's max under every background load",
        "with no load, tailbound's max ≤ the conventional design's max",
        "with no load, tailbound's max ≤ FLOOR's max + 100 µs",
        "the decoupled producer's max ≤ FLOOR's max + 50 µs under the buffered writer",
        "zero deadline misses under every load for every tailbound mode",
    ] {
        assert!(
            text.contains(target),
            "missing target {target:?} in:\n{text}"
        );
    }
    assert!(
        text.contains("Real-time settings this machine permits"),
        "{text}"
    );
    assert!(text.contains("slowest call"), "{text}");
    assert!(text.contains("whole frames"), "{text}");
    // The tbfs parts: both file systems measured, and every acknowledged write recovered.
    assert!(
        text.contains("relaxed/strict every-checkpoint (rewrite, 4 KiB)"),
        "{text}"
    );
    assert!(text.contains("/ext4 (write, 4 KiB)"), "{text}");
    assert!(
        text.contains("50 of 50 acknowledged writes read back exactly"),
        "{text}"
    );
}

/// Held by every test that makes loop devices, so one test's check that its loop devices are gone
/// does not see another's that are still in use.
static LOOP_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn loop_guard() -> std::sync::MutexGuard<'static, ()> {
    LOOP_TESTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The run's own loop file system (named in its stderr: "... on /dev/loopN at MOUNT_POINT") is
/// unmounted, its loop device detached and its directory removed. Only this run's are checked, so
/// other runs on the machine cannot make it fail.
fn loop_devices_and_mounts_are_gone(stderr_text: &str) {
    let mount_point = stderr_text
        .lines()
        .find_map(|l| {
            l.contains(" on /dev/loop")
                .then(|| l.rsplit(" at ").next())
                .flatten()
        })
        .unwrap_or_else(|| panic!("the run names its loop mount: {stderr_text}"))
        .trim()
        .to_string();
    let scratch = Path::new(&mount_point)
        .parent()
        .expect("the mount point is inside the run's directory")
        .to_str()
        .unwrap()
        .to_string();
    assert!(scratch.contains("tailbound-loop-"), "{scratch}");
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains(&scratch),
        "loop device over {scratch} detached"
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(&mount_point), "{mount_point} unmounted");
    assert!(!Path::new(&scratch).exists(), "{scratch} removed");
}

fn positive_finite(case: &serde_json::Value, key: &str) -> f64 {
    let v = case[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {case}"));
    assert!(v.is_finite() && v > 0.0, "{key} = {v} in {case}");
    v
}

#[test]
fn sync_write_list_names_every_configuration() {
    let out = tailbound(&["bench", "sync-write", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for id in [
        "ext4",
        "tbfs-strict-every-checkpoint",
        "tbfs-strict-superblock",
        "tbfs-relaxed-every-checkpoint",
        "tbfs-relaxed-superblock",
        "tbfs-relaxed-every-log",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(id)),
            "missing {id} in:\n{text}"
        );
    }
    assert_eq!(text.lines().count(), 6);
}

/// Checks one sync-write report: the keys and values, and every figure positive.
fn check_sync_write_report(report: &serde_json::Value, rows: usize) {
    assert_eq!(report["experiment"], "sync-write");
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), rows, "{report:#}");
    for case in cases {
        for key in [
            "fs",
            "ordering",
            "barrier",
            "pattern",
            "buffer_kib",
            "mb_per_s",
        ] {
            assert!(case.get(key).is_some(), "missing {key} in {case}");
        }
        let fs = case["fs"].as_str().unwrap();
        assert!(["tbfs", "ext4"].contains(&fs), "{case}");
        let ordering = case["ordering"].as_str().unwrap();
        if fs == "ext4" {
            assert_eq!(ordering, "n/a", "{case}");
        } else {
            assert!(["strict", "relaxed"].contains(&ordering), "{case}");
        }
        let barrier = case["barrier"].as_str().unwrap();
        assert!(
            ["every-log", "every-checkpoint", "superblock"].contains(&barrier),
            "{case}"
        );
        let pattern = case["pattern"].as_str().unwrap();
        assert!(
            ["write", "rewrite", "random-rewrite"].contains(&pattern),
            "{case}"
        );
        assert!(
            [4, 64].contains(&case["buffer_kib"].as_u64().unwrap()),
            "{case}"
        );
        positive_finite(case, "mb_per_s");
    }
    assert!(report["targets"].as_array().is_some());
}

#[test]
fn sync_write_quick_writes_table_json_and_svg_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let json = dir.path().join("out/sync-write.json");
    let svg = dir.path().join("out/sync-write.svg");
    let out = tailbound(&[
        "bench",
        "sync-write",
        "--quick",
        "--size",
        "1MiB",
        "--dir",
        work.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("| fs "), "{table}");
    assert!(table.contains("Ratios of MB/s"), "{table}");
    assert!(table.contains("relaxed/strict every-checkpoint"), "{table}");
    assert!(table.contains("Targets"), "{table}");

    let report = read_json(&json);
    // 6 configurations x 2 buffer sizes x 3 patterns.
    check_sync_write_report(&report, 36);
    let cases = report["cases"].as_array().unwrap();
    for fs in ["tbfs", "ext4"] {
        assert!(cases.iter().any(|c| c["fs"] == fs), "no {fs} rows");
    }
    assert!(cases
        .iter()
        .any(|c| c["ordering"] == "relaxed" && c["barrier"] == "every-log"));
    assert_eq!(report["targets"].as_array().unwrap().len(), 5, "{report:#}");

    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.contains("<svg"));
    assert!(svg_text.contains("random-rewrite 64 KiB"));
    assert!(svg_text.contains("tbfs relaxed superblock"));

    // The pool file and the ext4 file are removed; the directory itself is the user's.
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn sync_write_refuses_bad_cases_and_sizes_before_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("never");
    let w = work.to_str().unwrap();
    let out = tailbound(&["bench", "sync-write", "--cases", "zfs", "--dir", w]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("zfs"), "{}", stderr(&out));
    let out = tailbound(&["bench", "sync-write", "--buffers", "6000", "--dir", w]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("6000"), "{}", stderr(&out));
    let out = tailbound(&["bench", "sync-write", "--size", "100KiB", "--dir", w]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("whole number"), "{}", stderr(&out));
    assert!(!work.exists(), "nothing is created for a refused run");
}

#[test]
fn sync_write_loop_ext4_puts_both_on_one_loop_mount_and_restores_the_machine() {
    let _loops = loop_guard();
    if !require_root("sync_write_loop_ext4_puts_both_on_one_loop_mount_and_restores_the_machine") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sync-write.json");
    let out = tailbound(&[
        "bench",
        "sync-write",
        "--quick",
        "--loop-ext4",
        "--size",
        "1MiB",
        "--buffers",
        "4KiB",
        "--cases",
        "ext4,tbfs-relaxed-superblock",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("/dev/loop"), "{}", stderr(&out));
    let report = read_json(&json);
    check_sync_write_report(&report, 6);
    loop_devices_and_mounts_are_gone(&stderr(&out));
}

#[test]
fn recovery_quick_reports_every_kind_and_barrier_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let json = dir.path().join("out/recovery.json");
    let out = tailbound(&[
        "bench",
        "recovery",
        "--quick",
        "--written-mb",
        "8",
        "--dir",
        work.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("| kind "), "{table}");
    assert!(table.contains("Targets"), "{table}");
    let report = read_json(&json);
    assert_eq!(report["experiment"], "recovery");
    let cases = report["cases"].as_array().unwrap();
    // 2 kinds x 2 barriers.
    assert_eq!(cases.len(), 4, "{report:#}");
    for case in cases {
        for key in ["kind", "barrier", "trials", "mean_ms", "max_ms", "pool_mb"] {
            assert!(case.get(key).is_some(), "missing {key} in {case}");
        }
        assert!(
            ["sim", "kill"].contains(&case["kind"].as_str().unwrap()),
            "{case}"
        );
        assert!(
            ["superblock", "every-checkpoint"].contains(&case["barrier"].as_str().unwrap()),
            "{case}"
        );
        assert_eq!(case["trials"], 2, "{case}");
        let mean = positive_finite(case, "mean_ms");
        let max = positive_finite(case, "max_ms");
        assert!(mean <= max * (1.0 + 1e-9), "{case}");
        assert!(case["pool_mb"].as_u64().unwrap() > 8, "{case}");
    }
    for kind in ["sim", "kill"] {
        assert!(
            cases
                .iter()
                .any(|c| c["kind"] == kind && c["barrier"] == "superblock"),
            "no {kind} superblock row"
        );
    }
    // One target per kind, for the superblock policy.
    assert_eq!(report["targets"].as_array().unwrap().len(), 2, "{report:#}");
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn recovery_refuses_unknown_policies_kinds_and_zero_trials() {
    let out = tailbound(&["bench", "recovery", "--barriers", "sometimes"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("sometimes"), "{}", stderr(&out));
    let out = tailbound(&["bench", "recovery", "--kinds", "meteor"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("meteor"), "{}", stderr(&out));
    let out = tailbound(&["bench", "recovery", "--trials", "0"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--trials"), "{}", stderr(&out));
    let out = tailbound(&["bench", "recovery", "--written-mb", "64", "--pool-mb", "32"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot hold"), "{}", stderr(&out));
}

#[test]
fn fileserver_quick_reports_every_system_or_why_not_and_leaves_nothing_behind() {
    let root = is_root();
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "the fileserver test needs root under CI for xfs-ram and ext4-ram"
        );
        eprintln!(
            "fileserver test: not root, so xfs-ram and ext4-ram must be reported unavailable"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // Its own directory on tmpfs, so "nothing left behind" is about this run alone.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = dir.path().join("fs.json");
    let svg = dir.path().join("fs.svg");
    let out = tailbound(&[
        "bench",
        "fileserver",
        "--quick",
        "--shm-dir",
        shm.path().to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&json);
    assert_eq!(report["experiment"], "fileserver");
    let cases = report["cases"].as_array().unwrap();
    let unavailable = report["unavailable"].as_array().unwrap();
    let mut systems: Vec<&str> = Vec::new();
    for c in cases {
        for key in [
            "system",
            "workload",
            "threads",
            "mean_file_kib",
            "ops_per_s",
            "mb_per_s",
            "user_cpu_pct",
            "sys_cpu_pct",
        ] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
        assert_eq!(c["workload"], "fileserver");
        assert_eq!(c["threads"], 20);
        assert_eq!(c["mean_file_kib"], 128);
        positive_finite(c, "ops_per_s");
        positive_finite(c, "mb_per_s");
        let user = c["user_cpu_pct"].as_f64().unwrap();
        let sys = c["sys_cpu_pct"].as_f64().unwrap();
        assert!(user >= 0.0 && sys >= 0.0 && user + sys > 0.0, "{c}");
        systems.push(c["system"].as_str().unwrap());
    }
    for u in unavailable {
        assert!(!u["reason"].as_str().unwrap().is_empty());
        systems.push(u["system"].as_str().unwrap());
    }
    systems.sort_unstable();
    assert_eq!(
        systems,
        [
            "ext4-ram",
            "fuse-passthrough",
            "tbfs-fuse",
            "tbfs-native",
            "tbfs-shim",
            "tbfs-shim-private",
            "tmpfs",
            "xfs-ram"
        ],
        "every system is measured or reported unavailable"
    );
    let measured = |s: &str| cases.iter().any(|c| c["system"] == s);
    assert!(measured("tmpfs") && measured("tbfs-native"));
    // The single-process shim runs wherever the served one does (one binary, one library).
    assert_eq!(
        measured("tbfs-shim-private"),
        measured("tbfs-shim"),
        "{report}"
    );
    // The engine's figures come with its native runs only; the run takes the metadata lock.
    for c in cases {
        let engine = c["median_run"].get("engine");
        if c["system"] == "tbfs-native" {
            let e = engine.unwrap_or_else(|| panic!("no engine figures in {c}"));
            positive_finite(e, "meta_held_pct");
            positive_finite(e, "data_only_runs_per_s");
            // The run checkpoints and seals its buffer; the lock's parts fit in its whole (give
            // or take a background hold in progress when the counters were read: a section is
            // counted as it ends, a hold as it is let go).
            positive_finite(e, "meta_checkpoint_pct");
            positive_finite(e, "meta_sealing_pct");
            let part = |k: &str| e[k].as_f64().unwrap_or(f64::NAN);
            let parts =
                part("meta_checkpoint_pct") + part("meta_cleaning_pct") + part("meta_sealing_pct");
            assert!(
                parts <= part("meta_held_pct") + 5.0,
                "the lock's parts {parts} % exceed its hold {} %",
                part("meta_held_pct")
            );
        } else {
            assert!(engine.is_none(), "engine figures for {}", c["system"]);
        }
    }
    assert_eq!(measured("xfs-ram"), root);
    assert_eq!(measured("ext4-ram"), root);
    assert_eq!(measured("tbfs-fuse"), root);
    assert_eq!(measured("fuse-passthrough"), root);
    // The targets are always checked and printed.
    assert_eq!(report["targets"].as_array().unwrap().len(), 4);
    let text = stdout(&out);
    assert!(text.contains("| target"), "{text}");
    assert!(text.contains("createfile1"));
    assert!(text.contains("the metadata lock held"), "{text}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let left: Vec<_> = std::fs::read_dir(shm.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let shm_path = shm.path().to_str().unwrap();
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains(shm_path),
        "loop device detached"
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(shm_path), "unmounted");
}

#[test]
fn fileserver_refuses_unknown_systems_and_workloads_and_zero_threads() {
    for (args, what) in [
        (&["--systems", "zfs"][..], "unknown system"),
        (&["--workload", "mail"][..], "unknown workload"),
        (&["--threads", "0"][..], "--threads"),
        (&["--repeats", "0"][..], "--repeats"),
    ] {
        let mut all = vec!["bench", "fileserver", "--quick"];
        all.extend_from_slice(args);
        let out = tailbound(&all);
        assert!(!out.status.success());
        assert!(stderr(&out).contains(what), "{what}: {}", stderr(&out));
    }
}

#[test]
fn cleaner_quick_reports_every_case_and_amplification_grows_with_utilisation() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cleaner.json");
    let out = tailbound(&[
        "bench",
        "cleaner",
        "--quick",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("| workload") && text.contains("| target"),
        "{text}"
    );
    let report = read_json(&json);
    assert_eq!(report["experiment"], "cleaner");
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12, "{report}");
    for workload in ["uniform", "hot-cold", "mixed"] {
        let mut amplification = Vec::new();
        for utilisation in [0.5, 0.7, 0.8, 0.9] {
            let c = cases
                .iter()
                .find(|c| c["workload"] == workload && c["utilisation"] == utilisation)
                .unwrap_or_else(|| panic!("no {workload} case at {utilisation}: {report}"));
            positive_finite(c, "mb_per_s");
            // Every byte written is a distinct block write beside a much larger pool.
            let wa = positive_finite(c, "write_amplification");
            assert!(wa > 0.9, "{c}");
            // Overwrites leave nothing free without the cleaner. The mixed workload's deletes of
            // whole files do, and at half full whether its one pass lands in the measured
            // writes or before them is incidental.
            if workload != "mixed" || utilisation > 0.5 {
                assert!(c["segments_cleaned"].as_u64().unwrap() > 0, "{c}");
            }
            // Metadata is counted, and reported apart from data.
            let data = positive_finite(c, "data_write_amplification");
            let metadata = positive_finite(c, "metadata_write_amplification");
            assert!((data + metadata - wa).abs() < 1e-9, "{c}");
            amplification.push(wa);
        }
        // Fuller pools leave emptier victims for the cleaner to find: more copying.
        assert!(
            amplification.windows(2).all(|w| w[0] < w[1]),
            "{workload}: {amplification:?}"
        );
    }
    // Uniform and hot/cold at 70, 80 and 90 %.
    assert_eq!(report["targets"].as_array().unwrap().len(), 6, "{report}");
}

#[test]
fn cleaner_refuses_bad_utilisations_and_workloads() {
    for args in [
        ["--utilisation", "1.5"],
        ["--utilisation", "zero"],
        ["--workload", "sequential"],
    ] {
        let mut all = vec!["bench", "cleaner", "--quick"];
        all.extend(args);
        let out = tailbound(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            !stderr(&out).trim().is_empty(),
            "{args:?}: no error message"
        );
    }
}

#[test]
fn soak_tiny_run_reports_every_level_and_exits_by_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("soak.json");
    let out = tailbound(&[
        "bench",
        "soak",
        "--live",
        "0.4,0.6",
        "--duration",
        "2s",
        "--pool-size",
        "32MiB",
        "--threads",
        "2",
        "--power-cuts",
        "1",
        "--seed",
        "7",
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("| live target") && text.contains("| power cuts survived"),
        "{text}\n{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("level 40 %"), "{}", stderr(&out));
    let report = read_json(&json);
    assert_eq!(report["experiment"], "soak");
    assert_eq!(report["seed"], 7);
    let levels = report["levels"].as_array().unwrap();
    // Both levels, unless a failure the pool could not be reopened from ended the run early
    // (then the verdict below is a failure).
    assert!(
        levels.len() == 2 || (levels.len() == 1 && report["passed"] == false),
        "{report}"
    );
    for l in levels {
        let ops: u64 = l["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kv| kv[1].as_u64().unwrap())
            .sum();
        assert!(ops > 0 && l["bytes_written"].as_u64().unwrap() > 0, "{l}");
    }
    assert!(report["fsck_runs"].as_u64().unwrap() >= 2, "{report}");
    // The exit status is the verdict: zero exactly when every check passed.
    assert_eq!(
        out.status.success(),
        report["passed"].as_bool().unwrap(),
        "{text}\n{}",
        stderr(&out)
    );
}

#[test]
fn soak_refuses_bad_levels_and_sizes() {
    for args in [
        ["--live", "1.2"],
        ["--live", "x"],
        ["--pool-size", "1MiB"],
        ["--threads", "0"],
    ] {
        let mut all = vec!["bench", "soak", "--duration", "1s"];
        all.extend(args);
        let out = tailbound(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            !stderr(&out).trim().is_empty(),
            "{args:?}: no error message"
        );
    }
}

#[test]
fn fileserver_process_model_deletes_the_old_fileset_and_adds_up_its_workers() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("bigfileset");
    std::fs::create_dir_all(set.join("old/deeper")).unwrap();
    std::fs::write(set.join("old/deeper/stale"), b"from an earlier run").unwrap();
    let out = tailbound(&[
        "bench",
        "fileserver",
        "--child",
        "--dir",
        dir.path().to_str().unwrap(),
        "--processes",
        "3",
        "--threads",
        "2",
        "--mean-size",
        "16KiB",
        "--duration",
        "200ms",
        "--files",
        "60",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !set.join("old").exists(),
        "system(\"rm -rf\") removed the old fileset"
    );
    let line = stdout(&out).lines().last().unwrap_or_default().to_string();
    let run: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(run["processes"], 3, "{run}");
    assert_eq!(run["threads"], 2, "{run}");
    let names: Vec<&str> = run["flowops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"createfile1") && names.contains(&"deletefile1"),
        "{run}"
    );
    // 80 % of the fileset is made before the workers start; they leave it in the new tree.
    let files = walk_files(&set);
    assert!(files > 0, "the new fileset is under {}", set.display());
}

#[test]
fn fileserver_process_mode_leaves_the_native_api_out_and_names_processes() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fs.json");
    let out = tailbound(&[
        "bench",
        "fileserver",
        "--quick",
        "--processes",
        "2",
        "--threads",
        "2",
        "--files",
        "50",
        "--duration",
        "200ms",
        "--systems",
        "tmpfs,tbfs-native,tbfs-shim-private",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&json);
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "{report}");
    assert_eq!(cases[0]["system"], "tmpfs");
    assert_eq!(cases[0]["processes"], 2);
    // Both serve one process: the forked workers cannot share them.
    let unavailable = report["unavailable"].as_array().unwrap();
    assert_eq!(unavailable[0]["system"], "tbfs-native", "{report}");
    assert_eq!(unavailable[1]["system"], "tbfs-shim-private", "{report}");
    assert!(stdout(&out).contains(" 2x2 |"), "{}", stdout(&out));
}

fn walk_files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += walk_files(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

#[test]
fn soak_takes_a_segment_size_and_refuses_one_the_format_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("soak.json");
    let out = tailbound(&[
        "bench",
        "soak",
        "--pool-size",
        "64MiB",
        "--segment-size",
        "256KiB",
        "--live",
        "0.5",
        "--duration",
        "2s",
        "--threads",
        "1",
        "--power-cuts",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("in 256 KiB segments"),
        "{}",
        stderr(&out)
    );
    let report = read_json(&json);
    assert_eq!(report["segment_bytes"], 256 << 10);
    assert_eq!(report["after_cuts"]["durable_lost"], 0);
    for (size, says) in [
        ("16KiB", "segment size 16384"),
        ("5000", "segment size 5000"),
        ("64MiB", "tbfs needs at least"),
    ] {
        let out = tailbound(&[
            "bench",
            "soak",
            "--pool-size",
            "64MiB",
            "--segment-size",
            size,
            "--duration",
            "1s",
        ]);
        assert!(!out.status.success(), "--segment-size {size} ran");
        assert!(stderr(&out).contains(says), "{size}: {}", stderr(&out));
    }
}
