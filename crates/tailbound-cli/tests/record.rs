//! `tailbound record` end to end: every allocation mode, stdin input, errors, and a recording
//! killed with SIGKILL whose flushed frames all survive.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tailbound() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
}

fn run(args: &[&str]) -> Output {
    tailbound().args(args).output().expect("running tailbound")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn verify_json(file: &Path) -> serde_json::Value {
    let json = file.with_extension("verify.json");
    let out = run(&[
        "record",
        "verify",
        file.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn every_allocation_mode_records_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let out = run(&[
        "record",
        "prepare-pool",
        pool.to_str().unwrap(),
        "--count",
        "1",
        "--file-size",
        "2MiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for allocation in ["append", "fallocate", "zero-fill", "recycle"] {
        let file = dir.path().join(format!("{allocation}.tbr"));
        let json = dir.path().join(format!("{allocation}.json"));
        let out = run(&[
            "record",
            "--period",
            "1ms",
            "--size",
            "4KiB",
            "--total",
            "800KiB",
            "--flush-every",
            "64KiB",
            "--allocation",
            allocation,
            "--pool",
            pool.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{allocation}: {}", stderr(&out));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["records"], 200, "{allocation}");
        assert_eq!(report["latency"]["count"], 200, "{allocation}");
        let v = verify_json(&file);
        assert_eq!(v["frames"], 200, "{allocation}: {v}");
        assert_eq!(v["last_sequence"], 199, "{allocation}: {v}");
        assert_eq!(v["finished"], allocation == "recycle", "{allocation}: {v}");
        if allocation != "recycle" {
            assert_eq!(v["valid_bytes"], v["bytes"], "{allocation}: {v}");
        }
    }
}

#[test]
fn a_stream_from_stdin_is_recorded_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stdin.tbr");
    let mut child = tailbound()
        .args([
            "record",
            "--input",
            "-",
            "--period",
            "1ms",
            "--size",
            "1000",
            "--allocation",
            "append",
            file.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let data: Vec<u8> = (0..10_500u32).map(|i| (i % 256) as u8).collect();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = verify_json(&file);
    // 10 whole records and the 500-byte remainder.
    assert_eq!(v["frames"], 11, "{v}");
    assert_eq!(v["payload_bytes"], 10_500, "{v}");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[64 + 32..64 + 32 + 1000], &data[..1000]);
}

#[test]
fn bad_flags_and_bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("x.tbr");
    let x = out_file.to_str().unwrap();
    for (args, needle) in [
        (vec!["record", "--allocation", "sideways", x], "sideways"),
        (vec!["record", "--period", "5", x], "unit"),
        (vec!["record", "--allocation", "recycle", x], "pool"),
        (vec!["record", "--overflow", "drop", x], "--decoupled"),
        (vec!["record", "--size", "0", x], "--size"),
        (
            vec!["record", "verify", "/nonexistent/rec.tbr"],
            "/nonexistent/rec.tbr",
        ),
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    std::fs::write(&out_file, vec![7u8; 300]).unwrap();
    let out = run(&["record", "verify", x]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a tailbound recording"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_killed_recording_keeps_every_flushed_frame() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("killed.tbr");
    let mut child = tailbound()
        .args([
            "record",
            "--period",
            "1ms",
            "--size",
            "4KiB",
            "--total",
            "1GiB",
            "--flush",
            "sync-file-range",
            "--flush-every",
            "64KiB",
            "--allocation",
            "fallocate",
            "--verbose",
            file.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read "durable N bytes" lines until a few windows are durable, then kill it mid-recording.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut durable = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while durable < 5 * 65536 {
        assert!(Instant::now() < deadline, "no flush reported in time");
        let Some(Ok(line)) = lines.next() else {
            panic!("recorder ended early");
        };
        if let Some(n) = line
            .strip_prefix("durable ")
            .and_then(|l| l.strip_suffix(" bytes"))
        {
            durable = n.parse().unwrap();
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let v = verify_json(&file);
    let valid = v["valid_bytes"].as_u64().unwrap();
    let frames = v["frames"].as_u64().unwrap();
    assert!(valid >= durable, "valid {valid} < durable {durable}: {v}");
    assert!(frames >= (durable - 64) / (4096 + 32), "{v}");
    assert_eq!(
        v["last_sequence"].as_u64().unwrap(),
        frames - 1,
        "no gap: {v}"
    );
    assert_eq!(v["finished"], false);
    // The preallocated tail that was never written reads as zeroes or as a torn frame: one cut
    // short, or (the kill landing while a frame was being copied in, its header already there)
    // one whose CRC does not match. Either way after every durable byte, checked above.
    let stop = v["stop"].as_str().unwrap();
    assert!(
        ["zeroes", "truncated", "end-of-file", "bad-crc"].contains(&stop),
        "{v}"
    );
}

#[test]
fn trace_slow_lists_each_slow_write_and_keeps_it_in_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("traced.tbr");
    let json = dir.path().join("traced.json");
    // A zero bound traces every write: 8 records of 4 KiB.
    let out = run(&[
        "record",
        "--period",
        "1ms",
        "--size",
        "4KiB",
        "--total",
        "32KiB",
        "--trace-slow",
        "0us",
        "--json",
        json.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("slow write() calls (over 0 µs): 8 of 8"),
        "{text}"
    );
    for i in 0..8 {
        assert!(text.contains(&format!("  #{i} ")), "{text}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let events = report["slow_writes"]["events"].as_array().unwrap();
    assert_eq!(events.len(), 8);
    assert_eq!(events[0]["index"], 0);
    assert!(events[7]["offset"].as_u64().unwrap() > 0);
    assert!(events[0]["flusher_at_start"].is_string());
    assert_eq!(verify_json(&file)["frames"], 8);
}
