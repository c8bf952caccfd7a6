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
    compile_with(src, out, &[]);
}

fn compile_with(src: &Path, out: &Path, extra: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
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
    for check in ALL_CHECKS {
        assert!(stderr.contains(&format!("ok {check}\n")), "{stderr}");
    }
    assert!(!Path::new(&mount).exists());
}

/// Every check `tests/edge.c` names when all pass.
const ALL_CHECKS: &[&str] = &[
    "numbers",
    "unmapped path pointers",
    "raw syscalls fail with EBADF",
    "dup, dup2, fcntl flags",
    "closed numbers",
    "append",
    "O_DIRECT",
    "locks",
    "unlink while open",
    "mmap",
    "directories",
    "ioctl",
    "stdio",
    "fork and exec",
    "mkstemp",
    "close_range",
    "closefrom",
    "preadv2 pwritev2",
    "statx",
    "__xstat",
    "copy_file_range sendfile splice",
    "shared mappings",
    "stdio family",
    "mkostemp",
    "lockf",
    "fortified entry points",
    "getwd telldir seekdir",
];

#[test]
fn a_fortified_build_reaches_the_chk_and_open_2_entry_points() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = work.path().join("edge-fortified");
    compile_with(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/edge.c"),
        &exe,
        &["-O2", "-D_FORTIFY_SOURCE=2"],
    );
    // The build really calls them (they are in its dynamic symbol table).
    let image = std::fs::read(&exe).unwrap();
    for sym in [
        "__read_chk",
        "__pread_chk",
        "__readlink_chk",
        "__realpath_chk",
        "__getcwd_chk",
        "__getwd_chk",
        "__open_2",
        "__openat_2",
    ] {
        assert!(
            image
                .windows(sym.len() + 1)
                .any(|w| w[..sym.len()] == *sym.as_bytes() && w[sym.len()] == 0),
            "the fortified build does not call {sym}"
        );
    }
    let pool = pool(work.path());
    let mount = format!("/tailbound-edge-fortified-{}", std::process::id());
    let out = Command::new(&exe)
        .arg(&mount)
        .env("LD_PRELOAD", preload())
        .env("TAILBOUND_MOUNT", format!("{mount}={}", pool.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for check in ALL_CHECKS {
        assert!(stderr.contains(&format!("ok {check}\n")), "{stderr}");
    }
    assert!(!Path::new(&mount).exists());
}

#[test]
fn every_edge_case_also_passes_in_the_catch_all_mode() {
    let out = run_edge(&[], &[("TAILBOUND_CATCH_ALL", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "back on the terminal\nall edge cases passed\n",
        "{stderr}"
    );
    assert!(stderr.contains("ok raw syscalls served\n"), "{stderr}");
    for check in ALL_CHECKS.iter().filter(|c| !c.starts_with("raw syscalls")) {
        assert!(stderr.contains(&format!("ok {check}\n")), "{stderr}");
    }
}

#[test]
fn tmpfile_is_made_in_the_pool_when_tmp_is_under_a_mount() {
    // The mount prefix applies to the test program only: its /tmp is the pool.
    let out = run_edge_at("/tmp", &["tmpfile"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "tmpfile in the pool\n"
    );
}

fn run_edge(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mount = format!("/tailbound-edge-test-{}-{}", std::process::id(), args.len());
    run_edge_at(&mount, args, env)
}

fn run_edge_at(mount: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = work.path().join("edge");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/edge.c"),
        &exe,
    );
    let pool = pool(work.path());
    let mut cmd = Command::new(&exe);
    cmd.arg(mount)
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

/// Runs `tests/catchall.c` (raw `syscall()`s only) with `MOUNT=DIR` over a fresh pool.
fn run_catchall(work: &Path, mount: &Path, pool: &Path, mode: &str) -> std::process::Output {
    let exe = work.join("catchall");
    if !exe.exists() {
        compile_with(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/catchall.c"),
            &exe,
            &["-pthread"],
        );
    }
    let mut cmd = Command::new(&exe);
    cmd.arg(mount).arg(mode).env("LD_PRELOAD", preload()).env(
        "TAILBOUND_MOUNT",
        format!("{}={}", mount.display(), pool.display()),
    );
    if mode == "on" {
        cmd.env("TAILBOUND_CATCH_ALL", "1");
    }
    cmd.output().unwrap()
}

fn pool_file(pool: &Path, path: &str) -> Option<Vec<u8>> {
    let dev = MemoryPool::open(pool).expect("opening the pool");
    let options = tailbound::tbfs::OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let fs = Fs::open(Arc::new(dev), &options).expect("mounting the pool");
    let file = fs
        .open_file(path, tailbound::tbfs::OpenFlags::read_only())
        .ok()?;
    let mut buf = vec![0u8; 4096];
    let n = file.pread(&mut buf, 0).expect("reading from the pool");
    buf.truncate(n);
    Some(buf)
}

#[test]
fn the_catch_all_mode_serves_raw_system_calls_from_the_pool() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = pool(work.path());
    let mount = PathBuf::from(format!("/tailbound-catchall-test-{}", std::process::id()));
    let out = run_catchall(work.path(), &mount, &pool, "on");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "raw openat, write, read, close\nhooks and raw calls agree\nopenat2\nthread\nsignals\n\
         fork and spawn\n",
        "{stderr}"
    );
    // Every file is in the pool, none on the kernel file system.
    assert!(!mount.exists());
    assert_eq!(pool_file(&pool, "/raw").as_deref(), Some(&b"hello raw"[..]));
    assert_eq!(pool_file(&pool, "/raw2").as_deref(), Some(&b"openat2"[..]));
    assert_eq!(
        pool_file(&pool, "/thread").as_deref(),
        Some(&b"from a thread"[..])
    );
}

#[test]
fn without_the_catch_all_mode_raw_system_calls_reach_the_kernel() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = pool(work.path());
    // The mount is a real directory here, so the kernel can serve what reaches it.
    let mount = work.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let out = run_catchall(work.path(), &mount, &pool, "off");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "raw openat, write, read, close\n"
    );
    assert_eq!(std::fs::read(mount.join("raw")).unwrap(), b"hello raw");
    assert_eq!(pool_file(&pool, "/raw"), None);
}
