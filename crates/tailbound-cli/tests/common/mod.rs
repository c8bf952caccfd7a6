//! Helpers shared by the CLI's end-to-end test binaries: running the binary, reading its output
//! and JSON reports, and the root check for tests that need root.

// Each test binary uses a subset.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub mod mount;
pub mod programs;

pub fn tailbound(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(args)
        .output()
        .expect("running the tailbound binary")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("reading the JSON report");
    serde_json::from_str(&text).expect("the JSON report parses")
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Root-only tests run as root; under CI they must not be skipped.
pub fn require_root(test: &str) -> bool {
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

/// The program's standard output, once it succeeded; its status and both streams otherwise.
pub fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}
