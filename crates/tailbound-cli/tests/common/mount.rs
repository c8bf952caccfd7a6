//! A pool in /dev/shm and a mount directory that exists nowhere on the kernel file system, for
//! the binaries that run programs under `tailbound run`: nothing a program does can reach the
//! kernel by accident and still pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Mount {
    _pool_dir: tempfile::TempDir,
    pub pool: PathBuf,
    pub dir: String,
    /// `--pool-size` unless a call's options give one.
    pool_size: &'static str,
}

impl Mount {
    /// A fresh pool `<name>.pool` and mount directory `/tailbound-<name>-test-<pid>-<n>`, run
    /// with pools of `pool_size`.
    pub fn new(name: &str, pool_size: &'static str) -> Mount {
        Mount::new_in("/dev/shm", name, pool_size)
    }

    /// As [`Mount::new`], with the pool in a new directory under `parent`.
    pub fn new_in(parent: &str, name: &str, pool_size: &'static str) -> Mount {
        let pool_dir =
            tempfile::tempdir_in(parent).unwrap_or_else(|e| panic!("tempdir in {parent}: {e}"));
        let pool = pool_dir.path().join(format!("{name}.pool"));
        let dir = format!(
            "/tailbound-{name}-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        assert!(!Path::new(&dir).exists());
        Mount {
            _pool_dir: pool_dir,
            pool,
            dir,
            pool_size,
        }
    }

    /// `tailbound run` with this mount and `options`, running `program`.
    pub fn command_with(&self, options: &[&str], program: &str, args: &[&str]) -> Command {
        let size = if options.contains(&"--pool-size") {
            &[][..]
        } else {
            &["--pool-size", self.pool_size][..]
        };
        let mut c = Command::new(env!("CARGO_BIN_EXE_tailbound"));
        c.arg("run")
            .args(size)
            .args(options)
            .arg("--mount")
            .arg(format!("{}={}", self.dir, self.pool.display()))
            .arg("--")
            .arg(program)
            .args(args);
        c
    }

    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        self.command_with(&[], program, args)
    }

    /// Runs a program under the shim with this mount and more `tailbound run` options.
    pub fn run_with(&self, options: &[&str], program: &str, args: &[&str]) -> Output {
        let out = self
            .command_with(options, program, args)
            .output()
            .expect("running tailbound run");
        self.assert_not_on_kernel(program);
        out
    }

    /// Runs a program under the shim with this mount.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        self.run_with(&[], program, args)
    }

    /// Runs `script` with `sh -ec` under the shim, in the mount directory.
    pub fn sh(&self, script: &str) -> Output {
        self.run("sh", &["-ec", &format!("cd {}\n{script}", self.dir)])
    }

    /// The mount directory was not made on the kernel's file system (by `what`).
    pub fn assert_not_on_kernel(&self, what: &str) {
        assert!(
            !Path::new(&self.dir).exists(),
            "{what} created {} on the kernel file system",
            self.dir
        );
    }
}
