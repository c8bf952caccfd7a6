//! `tailbound bench fairness` and `tailbound bench priority` end to end with `--quick`. These check
//! that each experiment runs, writes the issue's JSON schema with consistent figures, and leaves
//! no loop device, mount, cgroup or scheduler change behind; they never judge the shares or
//! latencies it measures. Both need root (loop devices, cgroups, I/O schedulers).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;

/// The root tests change loop devices and schedulers; one at a time keeps their checks exact.
static MACHINE: Mutex<()> = Mutex::new(());

mod common;
use common::{read_json, require_root, stderr, tailbound};

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// Runs the tailbound binary; returns its output and its process id (which names its cgroups).
fn tailbound_with_pid(args: &[&str]) -> (Output, u32) {
    let child = Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running the tailbound binary");
    let pid = child.id();
    (
        child.wait_with_output().expect("waiting for tailbound"),
        pid,
    )
}

/// Nothing the run (process `pid`) made under `scratch` is left: no file, no loop device over it,
/// no mount in it, no cgroup of its, and every loop device's scheduler is what it was.
fn machine_is_clean(scratch: &Path, pid: u32, schedulers_before: &[(String, String)]) {
    let left: Vec<_> = std::fs::read_dir(scratch).unwrap().collect();
    assert!(
        left.is_empty(),
        "left behind in the scratch directory: {left:?}"
    );
    let out = Command::new("losetup")
        .args(["--list", "--noheadings", "-O", "NAME,BACK-FILE"])
        .output()
        .unwrap();
    let attached = String::from_utf8_lossy(&out.stdout);
    let scratch_text = scratch.display().to_string();
    assert!(
        !attached.contains(&scratch_text),
        "a loop device is still attached: {attached}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&scratch_text), "still mounted: {mounts}");
    let cgroups: Vec<String> = std::fs::read_dir("/sys/fs/cgroup/blkio")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("tailbound-fairness-{pid}-")))
        .collect();
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
    // A loop device another program holds now (not this run's: none of those is left, above)
    // may have had its scheduler set by that program.
    let busy = attached_loops();
    for (path, before) in schedulers_before {
        if busy.iter().any(|name| path.contains(&format!("/{name}/"))) {
            continue;
        }
        if let Ok(now) = std::fs::read_to_string(path) {
            assert_eq!(&now, before, "{path} changed");
        }
    }
}

/// Names (`loop3`) of the loop devices attached to a file now.
fn attached_loops() -> Vec<String> {
    let out = Command::new("losetup")
        .args(["--list", "--noheadings", "-O", "NAME"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("/dev/").map(String::from))
        .collect()
}

/// The schedulers of the loop devices no program holds now: the run's own devices come from
/// these, and it must leave each as it found it.
fn loop_schedulers() -> Vec<(String, String)> {
    let busy = attached_loops();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("loop") && !busy.contains(&name) {
            let path = format!("/sys/block/{name}/queue/scheduler");
            if let Ok(s) = std::fs::read_to_string(&path) {
                out.push((path, s));
            }
        }
    }
    out
}

#[test]
fn fairness_quick_writes_the_issues_schema_and_restores_the_machine() {
    if !require_root("fairness_quick_writes_the_issues_schema_and_restores_the_machine") {
        return;
    }
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let json = dir.path().join("fairness.json");
    let svg = dir.path().join("fairness.svg");
    let before = loop_schedulers();
    let (out, pid) = tailbound_with_pid(&[
        "bench",
        "fairness",
        "--quick",
        "--window",
        "500ms",
        "--dir",
        scratch.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| bfq "), "{table}");
    assert!(table.contains("| tbfs "), "{table}");
    assert!(table.contains("Targets"), "{table}");

    let report = read_json(&json);
    assert_eq!(report["experiment"], "fairness");
    let cases = report["cases"].as_array().unwrap();
    // --quick: 2:1 at 1 and 10 MiB, read and write, under tbfs, tbfs-fifo, bfq and none.
    assert_eq!(cases.len(), 16, "{report:#}");
    let schema: BTreeSet<String> = [
        "system",
        "weights",
        "op",
        "block_mb",
        "window_s",
        "shares_mb_per_s",
        "ratio_error",
        "total_mb_per_s",
    ]
    .map(String::from)
    .into();
    let mut seen = BTreeSet::new();
    for case in cases {
        let system = case["system"].as_str().unwrap();
        let op = case["op"].as_str().unwrap();
        // tbfs cases add each writer's counts: kernel cases cannot have them, and a tbfs write
        // case must show its writers' bytes.
        let mut expected = schema.clone();
        if case.get("writers").is_some() {
            assert!(system.starts_with("tbfs"), "{case}");
            expected.insert("writers".to_string());
        }
        // tbfs cases add the pool's waits (waits for the device under `meta` among them).
        if let Some(waits) = case.get("pool_waits") {
            assert!(system.starts_with("tbfs"), "{case}");
            assert!(waits["meta_device_waits"].is_number(), "{case}");
            expected.insert("pool_waits".to_string());
        }
        // Every case counts its shares other ways too (the bench's `accounting`).
        expected.insert("accounting".to_string());
        assert!(case["accounting"]["at_return_error"].is_number(), "{case}");
        assert_eq!(keys(case), expected, "{case}");
        if system == "tbfs" && op == "write" {
            let written: f64 = case["writers"]
                .as_array()
                .unwrap_or_else(|| panic!("no writers' counts: {case}"))
                .iter()
                .map(|w| w["written_mb"].as_f64().unwrap())
                .sum();
            assert!(written > 0.0, "{case}");
        }
        let block = case["block_mb"].as_u64().unwrap();
        assert!(
            ["tbfs", "tbfs-fifo", "bfq", "none"].contains(&system),
            "{case}"
        );
        assert!(["read", "write"].contains(&op), "{case}");
        assert!([1, 10].contains(&block), "{case}");
        seen.insert((system.to_string(), op.to_string(), block));
        assert_eq!(case["weights"], serde_json::json!([2, 1]));
        // --quick keeps every window at --window.
        let window = case["window_s"].as_f64().unwrap();
        assert!((0.5..5.0).contains(&window), "{case}");
        let shares: Vec<f64> = case["shares_mb_per_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect();
        assert_eq!(shares.len(), 2, "{case}");
        assert!(
            shares.iter().all(|&s| s > 0.0),
            "every tenant moved data: {case}"
        );
        let total = case["total_mb_per_s"].as_f64().unwrap();
        assert!(
            (total - shares.iter().sum::<f64>()).abs() < 1e-6 * total,
            "{case}"
        );
        // ratio_error is what the shares say it is.
        let a = shares[0] / total;
        let expected =
            ((a - 2.0 / 3.0).abs() / (2.0 / 3.0)).max(((1.0 - a) - 1.0 / 3.0).abs() / (1.0 / 3.0));
        let ratio_error = case["ratio_error"].as_f64().unwrap();
        assert!((ratio_error - expected).abs() < 1e-9, "{case}");
    }
    assert_eq!(seen.len(), 16, "every case once: {seen:?}");
    assert!(report["targets"].as_array().is_some_and(|t| !t.is_empty()));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    machine_is_clean(&scratch, pid, &before);
}

#[test]
fn priority_quick_writes_the_issues_schema_and_restores_the_machine() {
    if !require_root("priority_quick_writes_the_issues_schema_and_restores_the_machine") {
        return;
    }
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let json = dir.path().join("priority.json");
    let svg = dir.path().join("priority.svg");
    let before = loop_schedulers();
    let (out, pid) = tailbound_with_pid(&[
        "bench",
        "priority",
        "--quick",
        "--dir",
        scratch.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&json);
    assert_eq!(report["experiment"], "priority");
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(
        cases.len(),
        10,
        "4 kernel schedulers and tbfs's default policy x 2 rates: {report:#}"
    );
    let mut seen = BTreeSet::new();
    for case in cases {
        let k = keys(case);
        for key in [
            "system",
            "scheduler",
            "writes",
            "p50_us",
            "p99_us",
            "p999_us",
            "p9999_us",
            "p999999_us",
            "max_us",
            "background_mb_per_s",
        ] {
            assert!(k.contains(key), "missing {key} in {case}");
        }
        let system = case["system"].as_str().unwrap();
        assert!(["kernel", "tbfs"].contains(&system), "{case}");
        assert_eq!(case["writes"], 200);
        let scheduler = case["scheduler"].as_str().unwrap().to_string();
        let rate = case["rate"].as_str().unwrap().to_string();
        assert!(["111/s", "flat-out"].contains(&rate.as_str()), "{case}");
        seen.insert((scheduler, rate));
        let figures: Vec<f64> = [
            "min_us",
            "p50_us",
            "p99_us",
            "p999_us",
            "p9999_us",
            "p999999_us",
            "max_us",
        ]
        .iter()
        .map(|k| case[*k].as_f64().unwrap())
        .collect();
        assert!(figures[0] > 0.0, "{case}");
        assert!(
            figures.windows(2).all(|w| w[0] <= w[1]),
            "percentiles in order: {case}"
        );
        assert!(
            case["background_mb_per_s"].as_f64().unwrap() > 0.0,
            "{case}"
        );
        assert!(
            case["background_alone_mb_per_s"].as_f64().unwrap() > 0.0,
            "{case}"
        );
    }
    let schedulers: BTreeSet<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        schedulers,
        ["bfq", "default", "kyber", "mq-deadline", "none"]
            .into_iter()
            .collect()
    );
    assert_eq!(seen.len(), 10);
    assert_eq!(report["targets"].as_array().unwrap().len(), 3);
    // Before the cases, the writer ran alone on the kernel path and in a tbfs pool, at each rate,
    // with no copy.
    let alone = report["writer_alone"].as_array().unwrap();
    let sides: BTreeSet<(&str, &str, &str)> = alone
        .iter()
        .map(|r| {
            assert_eq!(r["writes"], 200, "{r}");
            assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["p50_us"].as_f64() <= r["max_us"].as_f64(), "{r}");
            assert_eq!(r["background_mb_per_s"], 0.0, "{r}");
            (
                r["system"].as_str().unwrap(),
                r["scheduler"].as_str().unwrap(),
                r["rate"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sides,
        [
            ("kernel", "none", "111/s"),
            ("kernel", "none", "flat-out"),
            ("tbfs", "default", "111/s"),
            ("tbfs", "default", "flat-out"),
        ]
        .into_iter()
        .collect(),
        "{report:#}"
    );
    assert_eq!(alone.len(), 4);
    assert!(
        report["targets"][0]["measured"]
            .as_str()
            .unwrap()
            .contains("x alone's"),
        "{report:#}"
    );
    // The tbfs cases ran on a profile calibrated for the default 5 ms goal.
    let profile = &report["tbfs_profile"];
    assert_eq!(profile["latency_goal_ms"], 5.0, "{report:#}");
    for key in ["max_io_read", "max_io_write"] {
        let v = profile[key].as_u64().unwrap_or(0);
        assert!(v > 0 && v.is_multiple_of(4096), "{key}: {profile}");
    }
    assert!(profile["flush_byte_ns"].as_f64().is_some(), "{profile}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    machine_is_clean(&scratch, pid, &before);
}

#[test]
fn bad_arguments_are_clear_errors_before_anything_is_made() {
    let out = tailbound(&["bench", "fairness", "--systems", "cfq"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cfq"), "{}", stderr(&out));
    let out = tailbound(&["bench", "fairness", "--weights", "2:x"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("2:x"), "{}", stderr(&out));
    let out = tailbound(&["bench", "fairness", "--weights", "20:1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("weights"), "{}", stderr(&out));
    let out = tailbound(&["bench", "priority", "--schedulers", "cfq"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cfq"), "{}", stderr(&out));
    let out = tailbound(&["bench", "priority", "--rates", "often"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("often"), "{}", stderr(&out));
    let out = tailbound(&["bench", "priority", "--writes", "0"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--writes"), "{}", stderr(&out));
}
