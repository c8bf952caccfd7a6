//! `tailbound run --mount DIR=POOL -- PROGRAM ARGS...`: runs an unmodified program with its files
//! under DIR kept in a tbfs pool, through the LD_PRELOAD shim (`libtailbound_preload.so`): a
//! client of the pool's server (started for the program's lifetime when none answers), or with
//! `--private` the pool opened in the program's own process.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use tailbound::dev::file::FileDevice;
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::serve::{self, Client};
use tailbound::tbfs::{fsck, Config, Fs};
use tailbound_bench::progress::Progress;

use crate::CliResult;

/// Run a program with a directory served from a tbfs pool.
///
/// Every file call the program makes under DIR (open, read, write, stat, readdir, rename, mmap,
/// fopen, ...) is served from the pool by `libtailbound_preload.so`; everything else goes to the
/// kernel as usual. DIR need not exist on the kernel file system. The pool is created (and
/// formatted) when it does not exist, and can be mounted again by a later run.
///
/// The pool is shared through its server (`tailbound serve`): when one answers on POOL.sock the
/// program is its client; when none does, `run` starts one for the program's lifetime (it exits,
/// pool synced, once its last client is gone). The program's children (fork, exec, posix_spawn,
/// a shell's pipelines) keep their descriptors and working directory in the mount, and
/// unrelated programs run with the same --mount share the tree, as processes share a kernel
/// file system. With --private the pool is opened in the program's own process instead: the
/// fastest, without a system call per file call, but for one process only (a forked child sees
/// the mount refuse every call with EACCES).
///
/// Examples:
///
///   tailbound run --mount /mnt/fast=/dev/shm/app.pool -- python3 app.py
///
///   tailbound run --mount /data=/dev/shm/a.pool --report -- tar -xf src.tar -C /data
///
/// The program's exit status is passed through (128+N when a signal N ended it).
///
/// The program runs with glibc's heap trim threshold at 256 MiB (`GLIBC_TUNABLES`
/// glibc.malloc.trim_threshold, unless it is set already): the pool's write buffers turn over
/// every few milliseconds, and heaps given back and grown again cost page faults.
#[derive(clap::Args)]
pub struct RunArgs {
    /// DIR=POOL: serve DIR (absolute) from the pool file POOL. Repeat for several mounts.
    #[arg(long = "mount", value_name = "DIR=POOL", required = true)]
    mounts: Vec<String>,
    /// Size of a pool created because it did not exist (K, M, G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pool_size: u64,
    /// Storage backend: `memory` maps the pool file (use /dev/shm for DRAM); `file` writes it
    /// with O_DIRECT through io_uring (a file on a disk, or a block device).
    #[arg(long, default_value = "memory", value_parser = ["memory", "file"])]
    backend: String,
    /// Open the pool in the program's own process rather than through its server: fastest,
    /// but only that process can use the mount.
    #[arg(long)]
    private: bool,
    /// Print how many calls of each kind were served from tbfs and passed to the kernel.
    #[arg(long)]
    report: bool,
    /// Abort the program on a call the shim does not support on a library file, instead of
    /// failing that call with an errno.
    #[arg(long)]
    strict: bool,
    /// Also serve system calls no symbol hook sees (glibc internals, raw `syscall()`), through
    /// Syscall User Dispatch (Linux 5.11+, x86_64): slower, every system call becomes a signal.
    #[arg(long)]
    catch_all: bool,
    /// Let processes of other users reach a pool's server `run` starts (as `serve
    /// --allow-other`), held to the kernel's permission rules: for a program that switches
    /// users, such as a file system test suite run as root.
    #[arg(long)]
    allow_other: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<String>,
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n >= 1 << 20)
        .ok_or_else(|| format!("`{s}` is not a size of at least 1M (like 512M or 2G)"))
}

/// Finds `libtailbound_preload.so`: `$TAILBOUND_PRELOAD`, else next to this binary (also in its
/// `deps/` and `../lib/`), the newest if there are several (`cargo build` puts one next to the
/// binary, `cargo test` refreshes only the one in `deps/`).
pub fn find_preload() -> Result<PathBuf, String> {
    const NAME: &str = "libtailbound_preload.so";
    if let Some(p) = std::env::var_os("TAILBOUND_PRELOAD") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "TAILBOUND_PRELOAD={} does not name a file",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(NAME),
        dir.join("deps").join(NAME),
        dir.join("../lib").join(NAME),
        dir.join("..").join(NAME),
    ];
    newest_file(&candidates).ok_or_else(|| {
        format!(
            "{NAME} not found next to {} (looked in {}); build it with \
             `cargo build -p tailbound-preload` or set TAILBOUND_PRELOAD to its path",
            exe.display(),
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The most recently modified of `paths` that are files (the first of equals).
fn newest_file(paths: &[PathBuf]) -> Option<PathBuf> {
    let mut best: Option<(std::time::SystemTime, &PathBuf)> = None;
    for p in paths {
        let Ok(meta) = std::fs::metadata(p) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let at = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.is_none_or(|(t, _)| at > t) {
            best = Some((at, p));
        }
    }
    best.map(|(_, p)| p.clone())
}

/// Creates and formats a pool at `path` unless a file is already there.
pub fn ensure_pool(path: &Path, size: u64, backend: &str) -> Result<bool, String> {
    if path.exists() {
        return Ok(false);
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(format!(
                "{}: the pool's directory {} does not exist",
                path.display(),
                parent.display()
            ));
        }
    }
    let dev: Arc<dyn Device> = match backend {
        "file" => {
            Arc::new(FileDevice::create(path, size).map_err(|e| format!("creating the pool: {e}"))?)
        }
        _ => {
            Arc::new(create_memory_pool(path, size).map_err(|e| format!("creating the pool: {e}"))?)
        }
    };
    // The new pool's lock is held: notes beside the path are about a pool that was removed.
    crate::serving::discard_for_new_pool(path);
    let config = Config {
        // As `fs format` picks it: enough segments that what the engine keeps free is a small
        // share of the pool.
        segment_bytes: fsck::default_segment_bytes(size),
        ..if backend == "file" {
            Config::default()
        } else {
            Config::memory_pool()
        }
    };
    let fs = Fs::format(dev, &config)
        .map_err(|e| format!("{}: formatting the pool: {e}", path.display()))?;
    fs.close()
        .map_err(|e| format!("{}: closing the new pool: {e}", path.display()))?;
    Ok(true)
}

/// Makes a memory pool, with a progress bar while its memory is cleared (tmpfs).
pub fn create_memory_pool(path: &Path, size: u64) -> std::io::Result<MemoryPool> {
    let bar = Progress::new(size >> 20, "clearing the pool (MiB)");
    let pool =
        MemoryPool::create_with_progress(path, size, &mut |done, _| bar.set_position(done >> 20));
    bar.finish();
    pool
}

/// A pool's server for the program: one that already answered, or one `run` started.
struct Served {
    /// A session held for the program's lifetime, so a server started here outlives the
    /// moments when no process of the program has one open.
    session: Client,
    started: Option<Child>,
}

/// Connects to the server of `pool`, starting one (that exits once idle) if none answers.
fn serve_pool(pool: &Path, backend: &str, allow_other: bool) -> Result<Served, String> {
    let socket = serve::socket_path(pool);
    if let Ok(session) = Client::connect(&socket) {
        return Ok(Served {
            session,
            started: None,
        });
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg(pool)
        .args(["--foreground", "--exit-when-idle", "--backend", backend])
        .args(allow_other.then_some("--allow-other"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group: the terminal's Ctrl-C is for the program, whose exit ends it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: starting its server: {e}", pool.display()))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    let mut errors = child.stderr.take();
    if !line.starts_with("serving ") {
        let status = child.wait().map_err(|e| e.to_string())?;
        let mut said = String::new();
        if let Some(e) = errors.as_mut() {
            let _ = std::io::Read::read_to_string(e, &mut said);
        }
        // Another `run` of the same pool may have started its server a moment before (it holds
        // the pool, its socket not answering yet): that one serves this program too.
        for _ in 0..100 {
            if let Ok(session) = Client::connect(&socket) {
                return Ok(Served {
                    session,
                    started: None,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        return Err(format!(
            "{}: its server did not start ({status}): {}",
            pool.display(),
            said.trim()
        ));
    }
    // What the server says later (a pool poisoned, a session refused) reaches the terminal;
    // only a server that lost the start race to another `run`'s is kept quiet, above.
    if let Some(mut e) = errors {
        std::thread::spawn(move || std::io::copy(&mut e, &mut std::io::stderr()));
    }
    let session = Client::connect(&socket).map_err(|e| format!("{}: {e}", pool.display()))?;
    Ok(Served {
        session,
        started: Some(child),
    })
}

pub fn run(args: RunArgs) -> CliResult {
    // Found first: without it the program cannot run, and no pool is made or served for it.
    let preload = find_preload()?;
    let mut spec = Vec::new();
    let mut served = Vec::new();
    for m in &args.mounts {
        let Some((dir, pool)) = m.split_once('=') else {
            return Err(format!("--mount {m}: expected DIR=POOL").into());
        };
        if !dir.starts_with('/') || dir.trim_end_matches('/').is_empty() {
            return Err(format!("--mount {m}: DIR must be an absolute path other than /").into());
        }
        if dir.contains(':') || pool.contains(':') {
            return Err(format!("--mount {m}: paths cannot contain `:`").into());
        }
        let pool = std::path::absolute(pool)
            .map_err(|e| format!("--mount {m}: making {pool} absolute: {e}"))?;
        if ensure_pool(&pool, args.pool_size, &args.backend)? {
            eprintln!(
                "tailbound: created a {} MiB {} pool at {}",
                args.pool_size >> 20,
                args.backend,
                pool.display()
            );
        }
        if args.private {
            // The program opens the pool itself and no server will warn of what the last one
            // left; a pool held by a live server is refused by the program's open, as before.
            crate::serving::warn_of_last_server_if_free(&pool);
        } else {
            served.push(serve_pool(&pool, &args.backend, args.allow_other)?);
        }
        spec.push(format!("{dir}={}", pool.display()));
    }
    let mut ld_preload = preload.display().to_string();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            ld_preload = format!("{ld_preload}:{old}");
        }
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", ld_preload)
        .env("TAILBOUND_MOUNT", spec.join(":"))
        .env("TAILBOUND_BACKEND", &args.backend)
        .env(
            "GLIBC_TUNABLES",
            with_trim_threshold(std::env::var("GLIBC_TUNABLES").ok().as_deref()),
        );
    if args.private {
        cmd.env("TAILBOUND_PRIVATE", "1");
    }
    if args.report {
        cmd.env("TAILBOUND_REPORT", "1");
    }
    if args.strict {
        cmd.env("TAILBOUND_STRICT", "1");
    }
    if args.catch_all {
        cmd.env("TAILBOUND_CATCH_ALL", "1");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("starting {}: {e}", args.command[0]));
    // A server started here exits, the pool synced, once the program's last process is gone.
    for s in served {
        drop(s.session);
        if let Some(mut child) = s.started {
            let _ = child.wait();
        }
    }
    let status = status?;
    let code = match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }
    };
    std::process::exit(code);
}

/// glibc's heap trim threshold for the program, in bytes. In `bench fileserver` through the shim
/// the default (128 KiB, raised as large blocks are freed) had heaps shrunk and grown again:
/// page faults and page clearing were about 1 % of the CPUs (system time 8.4–9.1 % against
/// 7.0–8.1 % with this, three alternating pairs), with no change in ops/s.
const TRIM_THRESHOLD_BYTES: u64 = 256 << 20;

/// `GLIBC_TUNABLES` for the program: the user's own (`tunables`), with the heap trim threshold
/// added unless they set it.
fn with_trim_threshold(tunables: Option<&str>) -> String {
    let own = tunables.unwrap_or("").trim_matches(':');
    if own
        .split(':')
        .any(|t| t.starts_with("glibc.malloc.trim_threshold="))
    {
        return own.to_string();
    }
    let trim = format!("glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}");
    if own.is_empty() {
        trim
    } else {
        format!("{own}:{trim}")
    }
}

#[cfg(test)]
mod tests {
    use super::{newest_file, with_trim_threshold};
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_trim_threshold_joins_the_users_tunables_unless_they_set_it() {
        let trim = "glibc.malloc.trim_threshold=268435456";
        assert_eq!(with_trim_threshold(None), trim);
        assert_eq!(with_trim_threshold(Some("")), trim);
        assert_eq!(
            with_trim_threshold(Some("glibc.malloc.arena_max=2")),
            format!("glibc.malloc.arena_max=2:{trim}")
        );
        let own = "glibc.malloc.trim_threshold=4096:glibc.malloc.arena_max=2";
        assert_eq!(with_trim_threshold(Some(own)), own);
    }

    #[test]
    fn the_newest_of_several_preload_libraries_is_taken_and_missing_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str, age_s: u64| {
            let p = dir.path().join(name);
            let f = std::fs::File::create(&p).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
                .unwrap();
            p
        };
        // A stale copy next to the binary, a fresh one in `deps/`.
        let stale = at("next-to-binary.so", 3600);
        let fresh = at("in-deps.so", 10);
        let missing = dir.path().join("missing.so");
        let a_dir = dir.path().to_path_buf();
        assert_eq!(
            newest_file(&[stale.clone(), a_dir.clone(), fresh.clone(), missing.clone()]),
            Some(fresh)
        );
        assert_eq!(newest_file(&[missing.clone(), stale.clone()]), Some(stale));
        assert_eq!(newest_file(&[missing, a_dir]), None);
    }
}
