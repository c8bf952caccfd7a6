//! No panic crosses into the program: `tests/boundary.c` runs under the shim with a failpoint
//! that makes its first `write` to the mount panic inside the shim. The call fails with EIO,
//! the pool is poisoned (later calls on it fail with EIO), files outside the mount still work,
//! the process exits normally, and stderr names the panic's site.

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
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (a C compiler is needed)"));
    assert!(status.success(), "compiling {}", src.display());
}

fn run(catch_all: bool) {
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
    let mut cmd = Command::new(&exe);
    cmd.arg(&mount)
        .arg(&outside)
        .env("LD_PRELOAD", preload())
        .env("TAILBOUND_MOUNT", format!("{mount}={}", pool.display()))
        .env("TAILBOUND_FAILPOINTS", "shim.write");
    if catch_all {
        cmd.env("TAILBOUND_CATCH_ALL", "1");
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stderr}\n{stdout}", out.status);
    assert_eq!(stdout, "all boundary checks passed\n", "{stderr}");
    for line in [
        "ok the panicking write failed with EIO",
        "ok later calls on the pool fail with EIO",
        "ok files outside the mount still work",
    ] {
        assert!(stderr.contains(line), "{stderr}");
    }
    // The panic's own message, and the poisoning, naming the site.
    let site = "crates/tailbound-preload/src/hooks.rs:";
    assert!(stderr.contains("failpoint shim.write"), "{stderr}");
    let poisoned = stderr
        .lines()
        .find(|l| l.contains("is poisoned"))
        .unwrap_or_else(|| panic!("no poison message: {stderr}"));
    assert!(
        poisoned.contains(&mount) && poisoned.contains(site),
        "{poisoned}"
    );
    assert!(poisoned.contains("failpoint shim.write"), "{poisoned}");
    assert_eq!(
        std::fs::read(outside.join("outside")).unwrap(),
        b"outside the mount"
    );
}

#[test]
fn a_panic_in_a_hook_fails_the_call_with_eio_and_poisons_the_pool() {
    run(false);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_panic_in_a_hook_is_caught_in_the_catch_all_mode_too() {
    run(true);
}

/// Every exported symbol of the shim runs its body through `boundary`, or only calls another
/// exported symbol (whose boundary catches): a new hook without one fails here.
#[test]
fn every_exported_symbol_has_a_panic_boundary() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    for file in ["hooks.rs", "catchall.rs"] {
        let src = std::fs::read_to_string(dir.join(file)).unwrap();
        let exported: Vec<&str> = src
            .split("#[no_mangle]\npub unsafe extern \"C\" fn ")
            .skip(1)
            .collect();
        let names: Vec<&str> = exported
            .iter()
            .map(|f| &f[..f.find('(').unwrap()])
            .collect();
        for (name, f) in names.iter().zip(&exported) {
            // The body: from the signature's end to the next item.
            let body = &f[f.find(" {\n").unwrap()..];
            let body = &body[..body.find("\n}\n").unwrap()];
            let code: Vec<&str> = body
                .lines()
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.starts_with("//"))
                .collect();
            let delegates = code.len() == 1
                && names
                    .iter()
                    .any(|other| code[0].starts_with(&format!("unsafe {{ {other}(")));
            assert!(
                body.contains("boundary(") || body.contains("boundary_or(") || delegates,
                "{file}: {name} has no panic boundary"
            );
            checked += 1;
        }
    }
    assert!(checked > 170, "only {checked} symbols found");
}
