//! Compiles `tests/edge.c` and runs it under `libtailbound_preload.so` against a fresh pool: the
//! descriptor numbers, dup2, fcntl, locks, unlink-while-open, mmap, directories, stdio, fork and
//! exec edge cases (the C program checks each and names the first that fails).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{Config, Fs};

/// The shim library cargo built next to this test binary.
fn preload() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("libtailbound_preload.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libtailbound_preload.so not found next to {}",
        exe.display()
    );
}

fn compile(src: &Path, out: &Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| {
            panic!("running {cc}: {e} (a C compiler is needed; .ci/run installs gcc)")
        });
    assert!(status.success(), "compiling {}", src.display());
}

fn pool(dir: &Path) -> PathBuf {
    let path = dir.join("edge.pool");
    let dev = MemoryPool::create(&path, 64 << 20).expect("creating the pool");
    Fs::format(Arc::new(dev), &Config::default())
        .expect("formatting")
        .close()
        .expect("closing");
    path
}

#[test]
fn library_descriptors_behave_like_kernel_ones_in_the_edge_cases() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = work.path().join("edge");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/edge.c"),
        &exe,
    );
    let pool = pool(work.path());
    let mount = format!("/tailbound-edge-test-{}", std::process::id());
    let out = Command::new(&exe)
        .arg(&mount)
        .env("LD_PRELOAD", preload())
        .env("TAILBOUND_MOUNT", format!("{mount}={}", pool.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert_eq!(
        stdout, "back on the terminal\nall edge cases passed\n",
        "{stderr}"
    );
    for check in [
        "numbers",
        "locks",
        "mmap",
        "stdio",
        "fork and exec",
        "mkstemp",
    ] {
        assert!(stderr.contains(&format!("ok {check}\n")), "{stderr}");
    }
    assert!(!Path::new(&mount).exists());
}

fn run_edge(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = work.path().join("edge");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/edge.c"),
        &exe,
    );
    let pool = pool(work.path());
    let mount = format!("/tailbound-edge-test-{}-{}", std::process::id(), args.len());
    let mut cmd = Command::new(&exe);
    cmd.arg(&mount)
        .args(args)
        .env("LD_PRELOAD", preload())
        .env("TAILBOUND_MOUNT", format!("{mount}={}", pool.display()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn an_unsupported_call_fails_cleanly_or_aborts_under_strict() {
    let out = run_edge(&["unsupported"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "fallocate -1 Operation not supported\n"
    );
    let out = run_edge(&["unsupported"], &[("TAILBOUND_STRICT", "1")]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not supported on a library file (TAILBOUND_STRICT=1)"),
        "{err}"
    );
}

#[test]
fn the_report_counts_served_and_passed_through_calls() {
    let out = run_edge(&[], &[("TAILBOUND_REPORT", "1")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("calls served from tbfs, and passed to the kernel"),
        "{err}"
    );
    // The program opened /dev/null once through the kernel and many files under the mount.
    let open_line = err
        .lines()
        .find(|l| l.trim_start().starts_with("open "))
        .unwrap_or_else(|| panic!("no open line: {err}"));
    let counts: Vec<u64> = open_line
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(counts[0] >= 10 && counts[1] >= 1, "{open_line}");
}
