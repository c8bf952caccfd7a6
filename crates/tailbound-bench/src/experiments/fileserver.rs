//! `tailbound bench fileserver`: seed 002's filebench experiment. The workload generators of
//! [`crate::workload`] run against tmpfs, XFS and ext4 on loop devices backed by `/dev/shm`
//! (kernel file systems on DRAM), tbfs's native API on a memory pool in `/dev/shm`, and tbfs
//! through the LD_PRELOAD shim (the generator re-executed as a child under `tailbound run`, through
//! the pool's server, or under `tailbound run --private` in its own process), in one run, each on
//! a fresh file system.
//!
//! Every case (system, workload, threads, mean file size) runs `repeats` times, the systems taking
//! turns within each round so a noisy minute hits them alike; a case reports the run with the median
//! ops/s. A system that cannot run here (no root for the loop devices, no shim) is reported as
//! unavailable with the reason, never dropped.
//!
//! This module owns what it creates (temporary directories and pool files in `/dev/shm`, loop
//! devices and mounts) and removes them when each run ends, on error paths too.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::experiments::loopfs::{LoopFs, LoopKind};
use crate::report::{targets_markdown, Align, Table, TargetCheck};
use crate::workload::{self, EngineFigures, Params, PosixFs, RunResult, TbfsFs, Workload};
use passthrough::FUSE_FLOOR;
use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{Config, Fs};

/// The paper's figure: tbfs through the library file system in one process (the private shim)
/// against XFS on DRAM.
pub const TARGET_VS_XFS: f64 = 1.73;
/// The figure for the private shim against tmpfs.
pub const TARGET_VS_TMPFS: f64 = 1.3;
/// The FUSE front end against ext4 on RAM: what the writeback cache and large requests must
/// win back of FUSE's kernel crossings.
pub const TARGET_FUSE_VS_EXT4: f64 = 0.7;
/// The process model: tbfs through the shim, its processes sharing the pool through the server,
/// against tmpfs and XFS on DRAM.
pub const TARGET_PROCESSES_VS_TMPFS: f64 = 1.0;
pub const TARGET_PROCESSES_VS_XFS: f64 = 1.5;
/// Share of the CPU time used that must be user mode.
pub const TARGET_USER_SHARE_PCT: f64 = 90.0;
/// Where RAM-backed file systems and pools go.
pub const SHM_DIR: &str = "/dev/shm";
/// The hidden child mode's subcommand arguments, after the binary.
pub const CHILD_ARGS: [&str; 3] = ["bench", "fileserver", "--child"];

/// The single-process shim's name, which the threads-mode targets compare.
const PRIVATE: &str = System::TbfsShimPrivate.name();

/// A file system the experiment runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Tmpfs,
    XfsRam,
    Ext4Ram,
    TbfsNative,
    TbfsShim,
    TbfsShimPrivate,
    TbfsFuse,
    FusePassthrough,
}

impl System {
    pub const ALL: [System; 8] = [
        System::Tmpfs,
        System::XfsRam,
        System::Ext4Ram,
        System::TbfsNative,
        System::TbfsShim,
        System::TbfsShimPrivate,
        System::TbfsFuse,
        System::FusePassthrough,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            System::Tmpfs => "tmpfs",
            System::XfsRam => "xfs-ram",
            System::Ext4Ram => "ext4-ram",
            System::TbfsNative => "tbfs-native",
            System::TbfsShim => "tbfs-shim",
            System::TbfsShimPrivate => "tbfs-shim-private",
            System::TbfsFuse => "tbfs-fuse",
            System::FusePassthrough => FUSE_FLOOR,
        }
    }

    pub fn parse(name: &str) -> Option<System> {
        System::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    pub fn describe(self) -> &'static str {
        match self {
            System::Tmpfs => "a directory in /dev/shm",
            System::XfsRam => "XFS on a loop device backed by a file in /dev/shm (root)",
            System::Ext4Ram => "ext4 on a loop device backed by a file in /dev/shm (root)",
            System::TbfsNative => "tbfs's native API on a memory pool in /dev/shm",
            System::TbfsShim => {
                "tbfs through the LD_PRELOAD shim and the pool's server (`tailbound run`), the \
                 generator in a child process"
            }
            System::TbfsShimPrivate => {
                "tbfs through the LD_PRELOAD shim in the program's own process, no server \
                 (`tailbound run --private`), the generator in a child process"
            }
            System::TbfsFuse => {
                "tbfs through FUSE (`tailbound mount`, a server process), the generator on its path (root)"
            }
            System::FusePassthrough => {
                "FUSE's floor: a minimal FUSE server passing requests to /dev/shm, mounted as tbfs-fuse is (root)"
            }
        }
    }
}

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileserverError {
    #[error("fileserver: {0}")]
    Invalid(String),
    #[error("{system} {case}: {message}")]
    Case {
        system: &'static str,
        case: String,
        message: String,
    },
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct FileserverBench {
    pub workload: Workload,
    pub threads: Vec<u32>,
    pub mean_sizes: Vec<u64>,
    pub duration: Duration,
    /// Files in the fileset (default: the workload's).
    pub files: Option<u64>,
    pub systems: Vec<System>,
    pub repeats: u32,
    pub seed: u64,
    /// Directory for tmpfs cases, loop images and pools (`/dev/shm`).
    pub shm_dir: PathBuf,
    /// The tailbound binary, for the shim's child (`None`: tbfs-shim is unavailable).
    pub exe: Option<PathBuf>,
    /// The tbfs pool's size (default: [`FileserverBench::pool_bytes`]).
    pub pool_bytes_override: Option<u64>,
    /// The filebench process model: this many worker processes of `threads` threads each,
    /// forked by a generator child after it makes the fileset ([`processes::run_processes`]).
    /// `None`: the threads run in one process.
    pub processes: Option<u32>,
}

impl FileserverBench {
    /// The paper's run: fileserver, 20 and 50 threads, 128 KiB, 60 s, every system, once.
    pub fn paper() -> FileserverBench {
        FileserverBench {
            workload: Workload::Fileserver,
            threads: vec![20, 50],
            mean_sizes: vec![128 << 10],
            duration: Duration::from_secs(60),
            files: None,
            systems: System::ALL.to_vec(),
            repeats: 1,
            seed: 0x5eed,
            shm_dir: PathBuf::from(SHM_DIR),
            exe: None,
            pool_bytes_override: None,
            processes: None,
        }
    }

    /// `--quick`: 20 threads, 1,000 files, 1 s per case.
    pub fn quick() -> FileserverBench {
        FileserverBench {
            threads: vec![20],
            duration: Duration::from_secs(1),
            files: Some(1_000),
            ..FileserverBench::paper()
        }
    }

    pub fn params(&self, threads: u32, mean_file_bytes: u64) -> Params {
        let base = Params::for_workload(self.workload);
        Params {
            threads,
            mean_file_bytes,
            duration: self.duration,
            files: self.files.unwrap_or(base.files),
            seed: self.seed,
            ..base
        }
    }

    /// Bytes the fileset holds at most for a mean size: every file at its mean plus appends, with
    /// a margin for the gamma tail.
    fn fileset_bytes(&self, mean_file_bytes: u64) -> u64 {
        let p = self.params(1, mean_file_bytes);
        p.files * (mean_file_bytes + 4 * p.mean_append_bytes) * 2
    }

    /// The tbfs pool: the room XFS and ext4 get, the fileset's bound and 1 GiB (the cleaner, and
    /// under pressure the release of protected checkpoints, keep deleted files' blocks coming back).
    pub fn pool_bytes(&self, mean_file_bytes: u64) -> u64 {
        self.pool_bytes_override
            .unwrap_or(self.fileset_bytes(mean_file_bytes) + (1 << 30))
    }

    pub fn validate(&self) -> Result<(), FileserverError> {
        let bad = |m: String| Err(FileserverError::Invalid(m));
        if self.threads.is_empty() || self.threads.contains(&0) {
            return bad("--threads needs one or more counts above zero".into());
        }
        if self.mean_sizes.is_empty() || self.mean_sizes.contains(&0) {
            return bad("--mean-size needs one or more sizes above zero".into());
        }
        if self.systems.is_empty() {
            return bad("no systems to run".into());
        }
        if self.repeats == 0 {
            return bad("--repeats must be at least 1".into());
        }
        if self.duration.is_zero() {
            return bad("--duration must be more than zero".into());
        }
        if self.processes == Some(0) {
            return bad("--processes must be at least 1".into());
        }
        if self.processes.is_some() && self.workload == Workload::Webserver {
            return bad("--processes runs fileserver and varmail, not webserver".into());
        }
        for &t in &self.threads {
            for &m in &self.mean_sizes {
                self.params(t, m)
                    .validate()
                    .map_err(|e| FileserverError::Invalid(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Why `system` cannot run on this machine, or `None` when it can.
    pub fn unavailable(&self, system: System) -> Option<String> {
        if self.processes.is_some() {
            if system == System::TbfsNative {
                return Some("the native API serves one process; the process model forks".into());
            }
            if system == System::TbfsShimPrivate {
                return Some("the private shim serves one process; the process model forks".into());
            }
            if self.exe.is_none() {
                return Some("the tailbound binary was not found to run the generator".into());
            }
        }
        match system {
            System::Tmpfs | System::TbfsNative => {
                (!self.shm_dir.is_dir()).then(|| format!("{} is missing", self.shm_dir.display()))
            }
            System::XfsRam | System::Ext4Ram => {
                let mkfs = if system == System::XfsRam {
                    "mkfs.xfs"
                } else {
                    "mkfs.ext4"
                };
                if !tailbound::sys::proc::is_root() {
                    Some("a loop-mounted file system needs root".into())
                } else if !program_exists(mkfs) {
                    Some(format!("{mkfs} is not installed"))
                } else {
                    None
                }
            }
            System::TbfsShim | System::TbfsShimPrivate => match &self.exe {
                None => Some("the tailbound binary was not found to run the child".into()),
                Some(exe) => shim_missing(exe, system == System::TbfsShimPrivate),
            },
            System::TbfsFuse | System::FusePassthrough => {
                if self.exe.is_none() {
                    Some("the tailbound binary was not found to run the server".into())
                } else if !tailbound::sys::proc::is_root() {
                    Some("a FUSE mount with other users' access needs root".into())
                } else if !Path::new("/dev/fuse").exists() {
                    Some("/dev/fuse is missing".into())
                } else if !program_exists("fusermount3") {
                    Some("fusermount3 is not installed (Debian: fuse3)".into())
                } else {
                    None
                }
            }
        }
    }

    /// Runs every case `repeats` times; `on_run` hears each run as it ends.
    pub fn run(
        &self,
        mut on_run: impl FnMut(System, &RunResult),
    ) -> Result<FileserverReport, FileserverError> {
        self.validate()?;
        let mut unavailable = Vec::new();
        let mut systems = Vec::new();
        for &s in &self.systems {
            match self.unavailable(s) {
                Some(reason) => unavailable.push(Unavailable {
                    system: s.name(),
                    reason,
                }),
                None => systems.push(s),
            }
        }
        let mut runs: Vec<(System, u32, u64, Vec<RunResult>)> = Vec::new();
        for &threads in &self.threads {
            for &mean in &self.mean_sizes {
                for &s in &systems {
                    runs.push((s, threads, mean, Vec::new()));
                }
            }
        }
        for _ in 0..self.repeats {
            for (system, threads, mean, results) in runs.iter_mut() {
                let p = self.params(*threads, *mean);
                let result =
                    self.run_one(*system, &p)
                        .map_err(|message| FileserverError::Case {
                            system: system.name(),
                            case: format!(
                                "{} {} threads {} KiB",
                                p.workload.name(),
                                threads,
                                *mean >> 10
                            ),
                            message,
                        })?;
                on_run(*system, &result);
                results.push(result);
            }
        }
        let cases = runs
            .into_iter()
            .map(|(system, _, _, results)| CaseRow::from_runs(system, results))
            .collect::<Vec<_>>();
        let targets = targets(&cases, &unavailable);
        Ok(FileserverReport {
            experiment: "fileserver",
            workload: self.workload,
            duration_s: self.duration.as_secs_f64(),
            repeats: self.repeats,
            files: self.params(1, 1).files,
            cases,
            unavailable,
            targets,
        })
    }

    /// One run of one case on a fresh file system, removed afterwards.
    fn run_one(&self, system: System, p: &Params) -> Result<RunResult, String> {
        let scratch = |prefix: &str| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(&self.shm_dir)
                .map_err(|e| format!("creating a directory in {}: {e}", self.shm_dir.display()))
        };
        let made = Instant::now();
        let (result, mkfs_s) = match system {
            System::Tmpfs => {
                let dir = scratch("tailbound-fileserver-")?;
                let mkfs_s = made.elapsed().as_secs_f64();
                (self.run_posix(dir.path(), p)?, mkfs_s)
            }
            System::XfsRam | System::Ext4Ram => {
                let kind = if system == System::XfsRam {
                    LoopKind::Xfs
                } else {
                    LoopKind::Ext4
                };
                let size = self.fileset_bytes(p.mean_file_bytes) + (1 << 30);
                let fs = LoopFs::create(kind, &self.shm_dir, size).map_err(|e| e.to_string())?;
                let mkfs_s = made.elapsed().as_secs_f64();
                let result = self.run_posix(fs.mount_point(), p);
                drop(fs);
                (result?, mkfs_s)
            }
            System::TbfsNative => {
                let dir = scratch("tailbound-fileserver-pool-")?;
                let fs = make_pool(
                    &dir.path().join("fileserver.pool"),
                    self.pool_bytes(p.mean_file_bytes),
                )?;
                let mkfs_s = made.elapsed().as_secs_f64();
                // The engine's counters when the measured run starts and when it ends.
                let mut readings = Vec::with_capacity(2);
                let result = workload::run_marked(&TbfsFs::new(fs.clone()), p, || {
                    readings.push(fs.counters())
                });
                let closed = fs.close().map_err(|e| format!("closing the pool: {e}"));
                let mut result = result.map_err(|e| e.to_string())?;
                closed?;
                if let [before, after] = readings[..] {
                    result.engine = Some(EngineFigures::between(&before, &after, result.elapsed_s));
                }
                (result, mkfs_s)
            }
            System::TbfsShim | System::TbfsShimPrivate => {
                let exe = self.exe.as_deref().ok_or("no tailbound binary")?;
                let dir = scratch("tailbound-fileserver-shim-")?;
                let pool = dir.path().join("fileserver.pool");
                // Made here, as for tbfs-native, so `tailbound run` finds it and the child's
                // figures hold the workload alone.
                make_pool(&pool, self.pool_bytes(p.mean_file_bytes))?
                    .close()
                    .map_err(|e| format!("closing the new pool: {e}"))?;
                let mkfs_s = made.elapsed().as_secs_f64();
                // The mount point exists only inside the child, served by the shim.
                let mount = dir.path().join("mnt");
                let result = run_shim_child(
                    exe,
                    ShimPool {
                        pool: &pool,
                        mount: &mount,
                        bytes: self.pool_bytes(p.mean_file_bytes),
                        private: system == System::TbfsShimPrivate,
                    },
                    p,
                    self.processes,
                )?;
                (result, mkfs_s)
            }
            System::TbfsFuse => {
                let exe = self.exe.as_deref().ok_or("no tailbound binary")?;
                let dir = scratch("tailbound-fileserver-fuse-")?;
                let pool = dir.path().join("fileserver.pool");
                make_pool(&pool, self.pool_bytes(p.mean_file_bytes))?
                    .close()
                    .map_err(|e| format!("closing the new pool: {e}"))?;
                let mount = FuseMount::new(exe, &pool, &dir.path().join("mnt"))?;
                let mkfs_s = made.elapsed().as_secs_f64();
                let result = self.run_posix(&mount.dir, p);
                let unmounted = mount.unmount();
                let result = result?;
                unmounted?;
                (result, mkfs_s)
            }
            System::FusePassthrough => {
                let exe = self.exe.as_deref().ok_or("no tailbound binary")?;
                let dir = scratch("tailbound-fileserver-passthrough-")?;
                passthrough::run_case(exe, dir.path(), made, |mnt| self.run_posix(mnt, p))?
            }
        };
        Ok(RunResult { mkfs_s, ..result })
    }

    /// The workload on POSIX calls under `dir`: in this process, or in the process model's
    /// generator child.
    fn run_posix(&self, dir: &Path, p: &Params) -> Result<RunResult, String> {
        match (self.processes, self.exe.as_deref()) {
            (None, _) => workload::run(&PosixFs::new(dir), p).map_err(|e| e.to_string()),
            (Some(n), Some(exe)) => {
                let out = Command::new(exe)
                    .args(CHILD_ARGS)
                    .args(child_args(dir, p, Some(n)))
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("running {}: {e}", exe.display()))?;
                if !out.status.success() {
                    return Err(format!(
                        "the generator failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                parse_child_output(&out.stdout)
            }
            (Some(_), None) => Err("the process model needs the tailbound binary".into()),
        }
    }
}

/// Creates a memory pool of `bytes` at `path` (cleared in tmpfs) and formats it with a memory
/// pool's defaults, as `tailbound run` does.
fn make_pool(path: &Path, bytes: u64) -> Result<Fs, String> {
    let pool = MemoryPool::create(path, bytes).map_err(|e| e.to_string())?;
    Fs::format(Arc::new(pool), &Config::memory_pool())
        .map_err(|e| format!("formatting the pool: {e}"))
}

fn program_exists(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
                .any(|d| d.join(name).is_file())
        })
        .unwrap_or(false)
}

/// Why the shim cannot run the child: `tailbound run` (or its `--private` mode) missing from
/// this binary.
fn shim_missing(exe: &Path, private: bool) -> Option<String> {
    let out = Command::new(exe)
        .args(["run", "--help"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let help = String::from_utf8_lossy(&o.stdout);
            (private && !help.contains("--private")).then(|| {
                format!(
                    "`{} run` has no --private (single-process) mode",
                    exe.display()
                )
            })
        }
        Ok(_) => Some(format!(
            "the LD_PRELOAD shim is not in this build: `{} run` does not exist",
            exe.display()
        )),
        Err(e) => Some(format!("running {}: {e}", exe.display())),
    }
}

/// The child's arguments after [`CHILD_ARGS`]: the directory and the run's parameters.
pub fn child_args(dir: &Path, p: &Params, processes: Option<u32>) -> Vec<String> {
    let mut args = vec![
        "--dir".into(),
        dir.display().to_string(),
        "--workload".into(),
        p.workload.name().into(),
        "--threads".into(),
        p.threads.to_string(),
        "--mean-size".into(),
        p.mean_file_bytes.to_string(),
        "--duration".into(),
        format!("{}ms", p.duration.as_millis()),
        "--files".into(),
        p.files.to_string(),
        "--seed".into(),
        p.seed.to_string(),
    ];
    if let Some(n) = processes {
        args.extend(["--processes".into(), n.to_string()]);
    }
    args
}

/// The pool a shim child mounts, and how.
struct ShimPool<'a> {
    pool: &'a Path,
    mount: &'a Path,
    bytes: u64,
    /// `run --private`: the pool opened in the child's own process, not through its server.
    private: bool,
}

/// The arguments of `tailbound run` that mount `shim`'s pool, up to the program's.
fn shim_run_args(shim: &ShimPool<'_>) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        "--mount".into(),
        format!("{}={}", shim.mount.display(), shim.pool.display()),
        "--pool-size".into(),
        shim.bytes.to_string(),
        "--backend".into(),
        "memory".into(),
    ];
    if shim.private {
        args.push("--private".into());
    }
    args.push("--".into());
    args
}

/// Runs the generator in a child under `tailbound run [--private] --mount MOUNT=POOL` and reads
/// its result.
fn run_shim_child(
    exe: &Path,
    shim: ShimPool<'_>,
    p: &Params,
    processes: Option<u32>,
) -> Result<RunResult, String> {
    let mut cmd = Command::new(exe);
    cmd.args(shim_run_args(&shim))
        .arg(exe)
        .args(CHILD_ARGS)
        .args(child_args(shim.mount, p, processes))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the child under the shim failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_child_output(&out.stdout)
}

/// A pool served at a directory by `tailbound mount` (a server process of its own), unmounted
/// when dropped if [`FuseMount::unmount`] was not called.
struct FuseMount {
    exe: PathBuf,
    dir: PathBuf,
    mounted: bool,
}

impl FuseMount {
    fn new(exe: &Path, pool: &Path, dir: &Path) -> Result<FuseMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Returns once the kernel serves the mount (the server forks and reports back).
        let out = Command::new(exe)
            .arg("mount")
            .arg(pool)
            .arg(dir)
            .arg("--allow-other")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {} mount: {e}", exe.display()))?;
        if !out.status.success() {
            return Err(format!(
                "tailbound mount failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(FuseMount {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            mounted: true,
        })
    }

    /// Syncs, unmounts and waits for the server to let the pool go.
    fn unmount(mut self) -> Result<(), String> {
        self.mounted = false;
        let out = Command::new(&self.exe)
            .arg("umount")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {} umount: {e}", self.exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "tailbound umount failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new(&self.exe)
                .arg("umount")
                .arg(&self.dir)
                .arg("--lazy")
                .status();
        }
    }
}

/// The child prints one line of JSON, its [`RunResult`], last on stdout.
pub fn parse_child_output(stdout: &[u8]) -> Result<RunResult, String> {
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .last()
        .ok_or("the child printed no result")?;
    serde_json::from_str(&line).map_err(|e| format!("the child's result {line:?}: {e}"))
}

/// The child mode: runs one case on POSIX calls under `dir` (in the process model when
/// `processes` is given) and prints its result as JSON.
pub fn run_child(
    dir: &Path,
    p: &Params,
    processes: Option<u32>,
    out: &mut impl Write,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: mkdir: {e}", dir.display()))?;
    let result = match processes {
        // Marked after the set-up (and after the run, where the run's result is taken and
        // the mapping long done).
        None => workload::run_marked(&PosixFs::new(dir), p, || {
            wait_for_pool_mapping(POOL_MAPPING_WAIT_MAX);
        })
        .map_err(|e| e.to_string())?,
        Some(n) => processes::run_processes(dir, p, n)?,
    };
    let line = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    writeln!(out, "{line}").map_err(|e| format!("writing the result: {e}"))
}

/// The thread that maps a reopened tmpfs pool into the process in the background.
pub const POOL_MAPPING_THREAD: &str = tailbound::dev::memory::POPULATE_THREAD;

/// How long the child waits for that thread at most.
const POOL_MAPPING_WAIT_MAX: Duration = Duration::from_secs(60);

/// Waits, at most `max`, until no thread of this process is mapping a pool, and returns how long
/// it waited. The private shim's child opens its pool when the fileset is made, and the pool's
/// pages are then mapped by that thread; tbfs-native's pool was mapped when it was made, before
/// its clock started. Waiting here starts the child's clock with its pool mapped too, so a run
/// of a second is not charged for mapping the whole pool once. Kernel file systems and the
/// served shim (whose server maps the pool) have no such thread and do not wait.
pub fn wait_for_pool_mapping(max: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < max && this_process_has_thread(POOL_MAPPING_THREAD) {
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

/// Whether a thread of this process is named `name` (`/proc/self/task/*/comm`).
fn this_process_has_thread(name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
}

/// A system that did not run, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unavailable {
    pub system: &'static str,
    pub reason: String,
}

/// One case: the run with the median ops/s, and every run's ops/s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseRow {
    pub system: &'static str,
    pub workload: &'static str,
    /// Worker processes of the process model, 0 for threads in one process.
    pub processes: u32,
    /// Threads (per worker process in the process model).
    pub threads: u32,
    pub mean_file_kib: u64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    pub user_cpu_pct: f64,
    pub sys_cpu_pct: f64,
    /// User time as a share of the CPU time used.
    pub user_share_pct: f64,
    /// ops/s of every run, in the order they ran.
    pub runs_ops_per_s: Vec<f64>,
    /// The median run in full (per-flowop figures).
    pub median_run: RunResult,
}

impl CaseRow {
    fn from_runs(system: System, mut runs: Vec<RunResult>) -> CaseRow {
        let runs_ops_per_s = runs.iter().map(|r| r.ops_per_s).collect();
        runs.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
        let median = runs.swap_remove((runs.len() - 1) / 2);
        CaseRow {
            system: system.name(),
            workload: median.workload.name(),
            processes: median.processes,
            threads: median.threads,
            mean_file_kib: median.mean_file_kib,
            ops_per_s: median.ops_per_s,
            mb_per_s: median.mb_per_s,
            user_cpu_pct: median.user_cpu_pct,
            sys_cpu_pct: median.sys_cpu_pct,
            user_share_pct: median.user_share_pct(),
            runs_ops_per_s,
            median_run: median,
        }
    }

    /// `20` for 20 threads in one process, `4x5` for 4 worker processes of 5 threads.
    pub fn threads_label(&self) -> String {
        match self.processes {
            0 => self.threads.to_string(),
            n => format!("{n}x{}", self.threads),
        }
    }

    fn same_case(&self, other: &CaseRow) -> bool {
        self.workload == other.workload
            && self.processes == other.processes
            && self.threads == other.threads
            && self.mean_file_kib == other.mean_file_kib
    }
}

/// `a`'s ops/s against `b`'s as a target line, or why one is missing.
fn ratio_target(
    target: String,
    (a_name, a): (&str, Option<&CaseRow>),
    (b_name, b): (&str, Option<&CaseRow>),
    want: f64,
    missing: &dyn Fn(&str) -> String,
) -> TargetCheck {
    match (a, b) {
        (Some(a), Some(b)) if b.ops_per_s > 0.0 => {
            let ratio = a.ops_per_s / b.ops_per_s;
            TargetCheck {
                target,
                measured: format!(
                    "{ratio:.2}x ({:.0} / {:.0} ops/s)",
                    a.ops_per_s, b.ops_per_s
                ),
                met: ratio >= want,
            }
        }
        (None, _) => TargetCheck {
            target,
            measured: missing(a_name),
            met: false,
        },
        (_, _) => TargetCheck {
            target,
            measured: missing(b_name),
            met: false,
        },
    }
}

/// The targets, from the fileserver case at 128 KiB: at 20 threads in one process (the private
/// shim's), or in the process model at 1 process of 20 threads and 4 of 5 (the served shim's).
fn targets(cases: &[CaseRow], unavailable: &[Unavailable]) -> Vec<TargetCheck> {
    let find = |system: &str, processes: u32, threads: u32| {
        cases.iter().find(|c| {
            c.system == system
                && c.workload == "fileserver"
                && c.processes == processes
                && c.threads == threads
                && c.mean_file_kib == 128
        })
    };
    let missing_at = |processes: u32, threads: u32| {
        move |system: &str| -> String {
            match unavailable.iter().find(|u| u.system == system) {
                Some(u) => format!("{system} unavailable: {}", u.reason),
                None if processes == 0 => {
                    format!("{system} not run at fileserver, {threads} threads, 128 KiB")
                }
                None => format!(
                    "{system} not run at fileserver, {processes} processes x {threads} threads, 128 KiB"
                ),
            }
        }
    };
    if cases.iter().any(|c| c.processes > 0) {
        let mut out = Vec::new();
        for (n, t, checks) in [
            (
                1,
                20,
                &[
                    ("tmpfs", TARGET_PROCESSES_VS_TMPFS),
                    ("xfs-ram", TARGET_PROCESSES_VS_XFS),
                ][..],
            ),
            (4, 5, &[("tmpfs", TARGET_PROCESSES_VS_TMPFS)][..]),
        ] {
            for &(baseline, want) in checks {
                out.push(ratio_target(
                    format!(
                        "tbfs-shim >= {want}x {baseline} ops/s (fileserver, {n} processes x {t} threads, 128 KiB)"
                    ),
                    ("tbfs-shim", find("tbfs-shim", n, t)),
                    (baseline, find(baseline, n, t)),
                    want,
                    &missing_at(n, t),
                ));
            }
        }
        return out;
    }
    // Threads in one process: the single-process shim's targets (seed 002); the served shim's
    // are the process model's above.
    let missing = missing_at(0, 20);
    let shim = find(PRIVATE, 0, 20);
    let ratio_check = |baseline: &str, want: f64| {
        ratio_target(
            format!("{PRIVATE} >= {want}x {baseline} ops/s (fileserver, 20 threads, 128 KiB)"),
            (PRIVATE, shim),
            (baseline, find(baseline, 0, 20)),
            want,
            &missing,
        )
    };
    let mut out = vec![
        ratio_check("xfs-ram", TARGET_VS_XFS),
        ratio_check("tmpfs", TARGET_VS_TMPFS),
    ];
    let target = format!(
        "{PRIVATE} > {TARGET_USER_SHARE_PCT:.0} % of its CPU time in user mode (fileserver, 20 threads, 128 KiB)"
    );
    out.push(match shim {
        Some(s) => TargetCheck {
            target,
            measured: format!(
                "{:.1} % (user {:.1} %, sys {:.1} % of the CPUs)",
                s.user_share_pct, s.user_cpu_pct, s.sys_cpu_pct
            ),
            met: s.user_share_pct > TARGET_USER_SHARE_PCT,
        },
        None => TargetCheck {
            target,
            measured: missing(PRIVATE),
            met: false,
        },
    });
    let mut fuse = ratio_target(
        format!(
            "tbfs-fuse >= {TARGET_FUSE_VS_EXT4}x ext4-ram ops/s (fileserver, 20 threads, 128 KiB)"
        ),
        ("tbfs-fuse", find("tbfs-fuse", 0, 20)),
        ("ext4-ram", find("ext4-ram", 0, 20)),
        TARGET_FUSE_VS_EXT4,
        &missing,
    );
    let ops = |system: &str| find(system, 0, 20).map(|c| c.ops_per_s);
    if let Some(note) = passthrough::floor_note(ops(FUSE_FLOOR), ops("tbfs-fuse"), ops("ext4-ram"))
    {
        fuse.measured.push_str(&note);
    }
    out.push(fuse);
    out
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileserverReport {
    pub experiment: &'static str,
    pub workload: Workload,
    pub duration_s: f64,
    pub repeats: u32,
    pub files: u64,
    pub cases: Vec<CaseRow>,
    pub unavailable: Vec<Unavailable>,
    pub targets: Vec<TargetCheck>,
}

impl FileserverReport {
    /// The summary table, per-flowop tables, ratios, unavailable systems and targets.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let mut t = Table::new(
            [
                "system",
                "workload",
                "threads",
                "mean KiB",
                "ops/s",
                "MB/s",
                "user %",
                "sys %",
                "user share %",
                "ops/s of each run",
            ]
            .map(String::from)
            .to_vec(),
        );
        for c in 2..9 {
            t.set_align(c, Align::Right);
        }
        for c in &self.cases {
            t.push(vec![
                c.system.into(),
                c.workload.into(),
                c.threads_label(),
                c.mean_file_kib.to_string(),
                format!("{:.0}", c.ops_per_s),
                format!("{:.1}", c.mb_per_s),
                format!("{:.1}", c.user_cpu_pct),
                format!("{:.1}", c.sys_cpu_pct),
                format!("{:.1}", c.user_share_pct),
                c.runs_ops_per_s
                    .iter()
                    .map(|v| format!("{v:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        out.push_str(&t.to_markdown());
        for c in &self.cases {
            if let Some(e) = &c.median_run.engine {
                out.push_str(&format!(
                    "\n{} {} at {} threads, {} KiB, its median run: {:.1} checkpoints/s, {:.1} \
                     data-only runs/s, {:.0} MiB/s placed, {:.1} light cleaning passes/s, {:.1} \
                     segments cleaned/s; the metadata lock held {:.0} % of the time ({:.0} % \
                     checkpoints, {:.0} % cleaning, {:.0} % sealing buffered data, {:.0} % the \
                     namespace and the rest)\n",
                    c.system,
                    c.workload,
                    c.threads,
                    c.mean_file_kib,
                    e.checkpoints_per_s,
                    e.data_only_runs_per_s,
                    e.placed_mb_per_s,
                    e.light_cleaning_passes_per_s,
                    e.segments_cleaned_per_s,
                    e.meta_held_pct,
                    e.meta_checkpoint_pct,
                    e.meta_cleaning_pct,
                    e.meta_sealing_pct,
                    (e.meta_held_pct
                        - e.meta_checkpoint_pct
                        - e.meta_cleaning_pct
                        - e.meta_sealing_pct)
                        .max(0.0)
                ));
            }
        }
        // Per flowop: ops/s and mean latency, one column pair per system, per case.
        let mut groups: Vec<&CaseRow> = Vec::new();
        for c in &self.cases {
            if !groups.iter().any(|g| g.same_case(c)) {
                groups.push(c);
            }
        }
        for g in &groups {
            let members: Vec<&CaseRow> = self.cases.iter().filter(|c| c.same_case(g)).collect();
            out.push_str(&format!(
                "\n{} at {} threads, {} KiB: ops/s and mean latency (µs) per flowop\n\n",
                g.workload,
                g.threads_label(),
                g.mean_file_kib
            ));
            let mut headers = vec!["flowop".to_string()];
            for m in &members {
                headers.push(format!("{} ops/s", m.system));
                headers.push(format!("{} µs", m.system));
            }
            let mut t = Table::new(headers);
            for c in 1..=2 * members.len() {
                t.set_align(c, Align::Right);
            }
            for (k, f) in g.median_run.flowops.iter().enumerate() {
                let mut row = vec![f.name.clone()];
                for m in &members {
                    let mf = &m.median_run.flowops[k];
                    row.push(format!("{:.0}", mf.ops_per_s));
                    row.push(format!("{:.1}", mf.mean_latency_us));
                }
                t.push(row);
            }
            out.push_str(&t.to_markdown());
            let mut ratios = Vec::new();
            for m in &members {
                for b in members
                    .iter()
                    .filter(|b| passthrough::ratio_shown(m.system, b.system))
                {
                    if b.ops_per_s > 0.0 {
                        ratios.push(format!(
                            "{}/{} {:.2}x",
                            m.system,
                            b.system,
                            m.ops_per_s / b.ops_per_s
                        ));
                    }
                }
            }
            if !ratios.is_empty() {
                out.push_str(&format!("\nops/s ratios: {}\n", ratios.join(", ")));
            }
        }
        for u in &self.unavailable {
            out.push_str(&format!("\n{}: unavailable: {}\n", u.system, u.reason));
        }
        out.push('\n');
        out.push_str(&targets_markdown(&self.targets));
        out
    }

    /// ops/s per case (groups) and system (series), for a bar chart.
    pub fn bar_series(&self) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
        let mut groups: Vec<&CaseRow> = Vec::new();
        let mut systems: Vec<&str> = Vec::new();
        for c in &self.cases {
            if !groups.iter().any(|g| g.same_case(c)) {
                groups.push(c);
            }
            if !systems.contains(&c.system) {
                systems.push(c.system);
            }
        }
        let series = systems
            .iter()
            .map(|&s| {
                let values = groups
                    .iter()
                    .map(|g| {
                        self.cases
                            .iter()
                            .find(|c| c.system == s && c.same_case(g))
                            .map_or(f64::NAN, |c| c.ops_per_s)
                    })
                    .collect();
                (s.to_string(), values)
            })
            .collect();
        let labels = groups
            .iter()
            .map(|g| {
                format!(
                    "{} {}t {} KiB",
                    g.workload,
                    g.threads_label(),
                    g.mean_file_kib
                )
            })
            .collect();
        (labels, series)
    }
}

pub mod passthrough;
pub mod processes;

#[cfg(test)]
mod tests;
