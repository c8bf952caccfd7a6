//! `tailbound doctor` end to end.

use std::process::Command;

#[test]
fn doctor_reports_a_directory_as_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("doctor.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args([
            "doctor",
            dir.path().to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for section in [
        "File system",
        "Writeback",
        "sync_file_range probe",
        "Advice",
    ] {
        assert!(text.contains(section), "{text}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "path",
        "mount",
        "writeback",
        "space",
        "sync_file_range",
        "advice",
        "root",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let ratio: u64 = std::fs::read_to_string("/proc/sys/vm/dirty_ratio")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(v["writeback"]["dirty_ratio"], ratio);
}

#[test]
fn doctor_names_a_missing_path() {
    let out = Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(["doctor", "/nonexistent/tailbound-dir"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tailbound-dir"));
}
