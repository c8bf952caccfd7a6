//! `tailbound bench record` and `tailbound demo` end to end, on small sizes. These check that the
//! experiment runs, reports and cleans up; they never judge the latencies it measures.

use std::path::Path;
use std::process::{Command, Output};

fn tailbound(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(args)
        .output()
        .expect("running the tailbound binary")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("reading the JSON report");
    serde_json::from_str(&text).expect("the JSON report parses")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Root-only tests run as root; under CI they must not be skipped.
fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root and CI must run it as root"
    );
    eprintln!("skipping {test}: needs root");
    false
}

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
        "FLOOR@bgall",
    ] {
        assert!(text.contains(id), "missing {id} in:\n{text}");
    }
    // 12 paper columns, NONE under the 5 other loads, and 4 tailbound modes and FLOOR under all 6.
    assert_eq!(text.lines().count(), 12 + 5 + 6 * 5);
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
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains("tailbound-loop-"),
        "loop device detached"
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains("tailbound-loop-"), "unmounted");
}

#[test]
fn demo_runs_end_to_end_on_a_short_stream() {
    let out = tailbound(&["demo", "--writes", "40"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("NONE@buffered-writer"), "{text}");
    assert!(text.contains("tailbound@none"), "{text}");
    assert!(text.contains("targets met"), "{text}");
    assert!(text.contains("whole frames"), "{text}");
}
