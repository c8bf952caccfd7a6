//! Compiles `examples/record.c` against the generated header and the built library, and runs it.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>` of this test run (the test binary is in `target/<profile>/deps`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf()
}

#[test]
fn the_c_example_records_and_verifies() {
    let header_dir = PathBuf::from(env!("OUT_DIR"));
    assert!(header_dir.join("tailbound.h").exists(), "header generated");
    let header = std::fs::read_to_string(header_dir.join("tailbound.h")).unwrap();
    for symbol in [
        "tb_recorder_create",
        "tb_recorder_write",
        "tb_recorder_finish",
        "tb_record_verify",
        "tb_last_error",
        "typedef struct tb_verify_report",
    ] {
        assert!(header.contains(symbol), "tailbound.h lacks {symbol}");
    }
    let lib_dir = profile_dir();
    // `cargo test` builds no cdylib for its tests: build the library the way a C user would.
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "-p", "tailbound-capi", "--lib"]);
    if lib_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    if let Some(target) = lib_dir.parent() {
        build.env("CARGO_TARGET_DIR", target);
    }
    let built = build.status().expect("running cargo build");
    assert!(built.success(), "cargo build -p tailbound-capi failed");
    assert!(
        lib_dir.join("libtailbound.so").exists(),
        "cdylib built in {}",
        lib_dir.display()
    );
    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("record-example");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/record.c");
    let cc = Command::new("cc")
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&header_dir)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-ltailbound")
        .output()
        .expect("running cc");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .arg(work.path().join("from-c.tbr"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("frames 100"), "{stdout}");
    assert!(stdout.contains("last sequence 99"), "{stdout}");
    assert!(stdout.contains("bad options rejected"), "{stdout}");
}
