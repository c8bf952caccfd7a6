//! No panic crosses into the program. `tests/boundary.c` runs under the shim with a failpoint
//! that makes one call of a family of hooks panic inside the shim, for each family: the call
//! fails with EIO, the pool is poisoned (later calls on it fail with EIO), files outside the
//! mount still work, the process exits normally, and stderr names the panic's site.
//!
//! And no exported symbol escapes the boundary: every dynamic symbol of the library is one the
//! `hooks!` macro made (its registry, `tailbound_preload::exported`), and only that macro
//! exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{Config, Fs};

/// The shim library cargo built next to this test binary.
fn preload() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|dir| dir.join("libtailbound_preload.so"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libtailbound_preload.so not found next to {}",
                exe.display()
            )
        })
}

fn compile(src: &Path, out: &Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (a C compiler is needed)"));
    assert!(status.success(), "compiling {}", src.display());
}

/// Each family `boundary.c` knows, with the hook its call reaches (whose failpoint is armed) and
/// the file that defines it.
const FAMILIES: &[(&str, &str, &str)] = &[
    ("io", "write", "abi/io.rs"),
    ("stat", "stat64", "abi/stat.rs"),
    ("paths", "mkdir", "abi/paths.rs"),
    ("attrs", "chmod", "abi/attrs.rs"),
    ("xattr", "getxattr", "abi/xattr.rs"),
    ("fds", "fsync", "abi/fds.rs"),
    ("dirs", "opendir", "abi/dirs.rs"),
    ("stdio", "fopen", "abi/stdio.rs"),
    ("mmap", "mmap64", "abi/mmap.rs"),
    ("process", "umask", "abi/process.rs"),
    #[cfg(target_arch = "x86_64")]
    ("threads", "pthread_create", "catchall.rs"),
];

fn run(family: &str, hook: &str, file: &str, catch_all: bool) {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = work.path().join("boundary");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/boundary.c"),
        &exe,
    );
    let pool = work.path().join("boundary.pool");
    let dev = MemoryPool::create(&pool, 64 << 20).unwrap();
    Fs::format(Arc::new(dev), &Config::default())
        .unwrap()
        .close()
        .unwrap();
    let outside = work.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mount = format!("/tailbound-boundary-test-{}", std::process::id());
    let failpoint = format!("shim.{hook}");
    let mut cmd = Command::new(&exe);
    cmd.arg(family)
        .arg(&mount)
        .arg(&outside)
        .env("LD_PRELOAD", preload())
        .env("TAILBOUND_MOUNT", format!("{mount}={}", pool.display()))
        .env("TAILBOUND_FAILPOINTS", &failpoint);
    if catch_all {
        cmd.env("TAILBOUND_CATCH_ALL", "1");
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let what = format!("family {family} ({failpoint})");
    assert!(
        out.status.success(),
        "{what}: {:?}\n{stderr}\n{stdout}",
        out.status
    );
    assert_eq!(stdout, "all boundary checks passed\n", "{what}: {stderr}");
    for line in [
        "ok the panicking call failed with EIO",
        "ok later calls on the pool fail with EIO",
        "ok files outside the mount still work",
    ] {
        assert!(stderr.contains(line), "{what}: {stderr}");
    }
    // The panic's own message, and the poisoning, naming the site.
    let site = format!("crates/tailbound-preload/src/{file}:");
    let message = format!("failpoint {failpoint}");
    assert!(stderr.contains(&message), "{what}: {stderr}");
    let poisoned = stderr
        .lines()
        .find(|l| l.contains("is poisoned"))
        .unwrap_or_else(|| panic!("{what}: no poison message: {stderr}"));
    assert!(
        poisoned.contains(&mount) && poisoned.contains(&site) && poisoned.contains(&message),
        "{what}: {poisoned}"
    );
    assert_eq!(
        std::fs::read(outside.join("outside")).unwrap(),
        b"outside the mount"
    );
}

#[test]
fn a_panic_in_a_hook_of_any_family_fails_the_call_with_eio_and_poisons_the_pool() {
    for &(family, hook, file) in FAMILIES {
        run(family, hook, file, false);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_panic_in_a_hook_is_caught_in_the_catch_all_mode_too() {
    run("io", "write", "abi/io.rs", true);
}

/// The library's exported (dynamic, defined) function symbols: `nm -D --defined-only`.
fn dynamic_symbols(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("running nm: {e} (binutils is needed)"));
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            let name = f.next()?;
            let kind = f.next()?;
            // Functions (text); the library exports no data.
            assert!(
                matches!(kind, "T" | "W" | "i"),
                "{name}: an exported symbol of kind {kind}"
            );
            Some(name.to_string())
        })
        .collect()
}

#[test]
fn every_exported_symbol_is_one_the_hooks_macro_made_behind_the_boundary() {
    let registry: BTreeSet<String> = tailbound_preload::exported()
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(
        registry.len(),
        tailbound_preload::exported().len(),
        "a symbol is listed twice"
    );
    let exported = dynamic_symbols(&preload());
    let outside: Vec<_> = exported.difference(&registry).collect();
    let missing: Vec<_> = registry.difference(&exported).collect();
    assert!(
        outside.is_empty(),
        "exported without the hooks! macro (and its boundary): {outside:?}"
    );
    assert!(missing.is_empty(), "listed but not exported: {missing:?}");
    assert!(exported.len() > 170, "only {} symbols", exported.len());
}

/// The only `#[no_mangle]` in the sources is the one in the `hooks!` macro.
#[test]
fn only_the_hooks_macro_exports_symbols() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut found = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, line) in text.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("#[no_mangle]") || line.starts_with("#[unsafe(no_mangle)]") {
                    found.push(format!(
                        "{}:{}",
                        p.strip_prefix(&src).unwrap().display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("abi/mod.rs:"), "{found:?}");
}
