//! `tailbound mount POOL DIR` and `tailbound umount DIR`: a pool at a kernel path, through FUSE,
//! for any number of processes.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailbound::dev::file::FileDevice;
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::serve::{Server, ServerOptions};
use tailbound::tbfs::{Fs, OpenOptions};

use crate::cmd_run::ensure_pool;
use crate::serving::{take_serving, take_sync_failure, ServingNote};
use crate::{CliResult, ExitStatus};

/// Serve a pool at a directory through FUSE, for every process.
///
/// The pool is created (and formatted) when it does not exist. The command returns once DIR is
/// mounted, leaving a server process behind (`--foreground` keeps it in the terminal). Every
/// program then uses DIR as an ordinary directory: shells, git, make, databases, tar. The
/// server holds the pool; `tailbound umount DIR` (or `fusermount3 -u DIR`, or SIGTERM to the
/// server) syncs it and ends the mount.
///
/// The kernel checks permissions (the `default_permissions` mount option). Only the mounting
/// user can use the mount unless `--allow-other` is given.
///
/// The server also listens on POOL.sock, as `tailbound serve` does: `tailbound fs` commands
/// given POOL work while it is mounted, and the mount sees what they change.
///
/// Examples:
///
///   tailbound mount /dev/shm/work.pool /mnt/work
///
///   tailbound umount /mnt/work
#[derive(clap::Args)]
pub struct MountArgs {
    /// The pool: a file (in /dev/shm for a memory pool) or, with `--backend file`, a file on a
    /// disk or a block device.
    pool: PathBuf,
    /// The directory to mount it on (it must exist).
    dir: PathBuf,
    /// Size of a pool created because it did not exist (K, M, G suffixes).
    #[arg(long, default_value = "256M", value_parser = crate::cmd_run::parse_size)]
    pool_size: u64,
    /// Storage backend: `memory` maps the pool file (use /dev/shm for DRAM); `file` writes it
    /// with O_DIRECT through io_uring (a file on a disk, or a block device).
    #[arg(long, default_value = "memory", value_parser = ["memory", "file"])]
    backend: String,
    /// Stay in the foreground instead of returning once mounted.
    #[arg(long)]
    foreground: bool,
    /// Let every user use the mount (a user other than root needs `user_allow_other` in
    /// /etc/fuse.conf).
    #[arg(long)]
    allow_other: bool,
    /// Threads answering the kernel's requests (default 16).
    #[arg(long)]
    threads: Option<usize>,
    /// Send every write to the pool as it is made, instead of through the kernel's writeback
    /// cache.
    #[arg(long)]
    no_writeback_cache: bool,
    /// When the mount ends, write to FILE how many requests of each kind the kernel sent it
    /// (`LOOKUP 1234` lines, then `TOTAL`).
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
}

/// Unmount a directory `tailbound mount` serves, after its pool is synced.
///
/// Returns once the server has synced the pool and let it go; fails, naming the pool and the
/// error, if that final sync failed, or if the server ended (was killed) without confirming it
/// (the pool's last writes may then not be durable; the next mount recovers what was). A mount
/// that a process still uses is refused (EBUSY) unless `--lazy`, which detaches it now and lets
/// the server finish when the last user is done.
#[derive(clap::Args)]
pub struct UmountArgs {
    /// The mounted directory.
    dir: PathBuf,
    /// Detach the mount even while it is in use.
    #[arg(long)]
    lazy: bool,
    /// How long to wait for the server to let the pool go, in seconds.
    #[arg(long, default_value_t = 120)]
    wait: u64,
}

/// Opens the pool; also returns its device, whose open file holds the pool's lock for as long
/// as any handle to it lives.
fn open_pool(pool: &Path, backend: &str) -> Result<(Fs, Arc<dyn Device>), String> {
    let dev: Arc<dyn Device> = match backend {
        "file" => tailbound::sched::scheduled(
            Arc::new(FileDevice::open(pool).map_err(|e| format!("{}: {e}", pool.display()))?),
            pool,
        )
        .map_err(|e| format!("{}: {e}", pool.display()))?,
        _ => Arc::new(MemoryPool::open(pool).map_err(|e| format!("{}: {e}", pool.display()))?),
    };
    let fs = Fs::open(dev.clone(), &OpenOptions::default())
        .map_err(|e| format!("{}: {e}", pool.display()))?;
    Ok((fs, dev))
}

pub fn run(args: MountArgs) -> CliResult {
    let dir = std::path::absolute(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()).into());
    }
    let pool =
        std::path::absolute(&args.pool).map_err(|e| format!("{}: {e}", args.pool.display()))?;
    tailbound_fuse::can_mount().map_err(|e| format!("cannot mount through FUSE: {e}"))?;
    // The server forks before anything starts a thread; the parent returns once the child
    // reports the mount made, or prints why it failed.
    let ready = if args.foreground {
        None
    } else {
        Some(daemonize()?)
    };
    let detached = ready.is_some();
    let result = mount_and_serve(&args, &pool, &dir, ready);
    if detached && result.is_err() {
        // Printed once: the parent prints what the server reported before the mount was made,
        // and afterwards stderr is /dev/null.
        return Err(ExitStatus(1).into());
    }
    result
}

/// The write end the server reports on: `ok` once mounted, else the error.
struct Ready(Option<std::io::PipeWriter>);

impl Ready {
    fn report(&mut self, message: &str) {
        if let Some(mut w) = self.0.take() {
            let _ = w.write_all(message.as_bytes());
        }
    }
}

/// Forks: the parent waits for the child's report and exits; the child returns the write end.
fn daemonize() -> Result<Ready, String> {
    let (mut r, w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let forked = tailbound::sys::proc::fork_single_threaded().map_err(|e| format!("fork: {e}"))?;
    if forked.is_some() {
        drop(w);
        let mut msg = String::new();
        let _ = r.read_to_string(&mut msg);
        if msg == "ok" {
            std::process::exit(0);
        }
        if msg.is_empty() {
            msg = "the server exited before mounting".to_string();
        }
        eprintln!("tailbound: error: {msg}");
        std::process::exit(1);
    }
    drop(r);
    tailbound::sys::proc::new_session().map_err(|e| format!("setsid: {e}"))?;
    Ok(Ready(Some(w)))
}

fn mount_and_serve(
    args: &MountArgs,
    pool: &Path,
    dir: &Path,
    mut ready: Option<Ready>,
) -> CliResult {
    let fail = |ready: &mut Option<Ready>, e: String| {
        if let Some(r) = ready {
            r.report(&e);
        }
        e
    };
    if ensure_pool(pool, args.pool_size, &args.backend).map_err(|e| fail(&mut ready, e))? {
        eprintln!(
            "tailbound: created a {} MiB {} pool at {}",
            args.pool_size >> 20,
            args.backend,
            pool.display()
        );
    }
    let (fs, dev) = open_pool(pool, &args.backend).map_err(|e| fail(&mut ready, e))?;
    let fs = Arc::new(fs);
    // What the last server left that no `umount` took: its final sync failed, or it ended
    // before it confirmed one.
    crate::serving::warn_of_last_server(pool);
    let mut options = tailbound_fuse::Options {
        source: pool.display().to_string(),
        allow_other: args.allow_other,
        writeback_cache: !args.no_writeback_cache,
        ..tailbound_fuse::Options::default()
    };
    if let Some(t) = args.threads {
        options.threads = t.max(1);
    }
    let stats_file = args
        .stats
        .as_ref()
        .map(std::path::absolute)
        .transpose()
        .map_err(|e| fail(&mut ready, format!("--stats: {e}")))?;
    if stats_file.is_some() {
        options.stats = Some(Arc::default());
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| fail(&mut ready, format!("signals: {e}")))?;
    let signal_handle = signals.handle();
    // The socket server beside the mount: `tailbound fs` commands and other clients of the pool
    // go through it, and what they change is dropped from the kernel's caches of the mount.
    let invalidator = Arc::new(tailbound_fuse::Invalidator::default());
    let owner = std::fs::metadata(pool).map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.uid(), m.gid())
    });
    let socket = tailbound::serve::socket_path(pool);
    let server = owner
        .and_then(|owner| {
            Server::start_observed(
                fs.clone(),
                &socket,
                ServerOptions {
                    allow_other: args.allow_other,
                    owner: Some(owner),
                    // The mount changes the pool itself, raising no lease's word.
                    no_leases: true,
                    ..ServerOptions::default()
                },
                Some(invalidator.observer()),
            )
        })
        .map_err(|e| fail(&mut ready, format!("{}: {e}", pool.display())))?;
    // From here on the server ends only through the final sync below, which confirms itself
    // by removing this note.
    let note = match ServingNote::write(
        pool,
        &format!("pid {}, mounted on {}", std::process::id(), dir.display()),
    ) {
        Ok(note) => note,
        Err(e) => {
            server.stop();
            return Err(fail(&mut ready, e).into());
        }
    };
    let mut mounted = false;
    let served = tailbound::panics::catch(|| {
        let served = serve(fs.clone(), dir, &options, &invalidator, |unmounter| {
            mounted = true;
            // SIGTERM (and ^C in the foreground) unmounts; the pool is synced below, once the
            // kernel has sent the last request.
            // The loop holds the signals' wake-up socket open until `signal_handle.close()` ends
            // it: closing a handle whose socket was dropped raised SIGPIPE, which killed the server
            // before it synced the pool.
            std::thread::spawn(move || {
                for _ in signals.forever() {
                    let _ = unmounter.unmount();
                }
            });
            if let Some(r) = ready.as_mut() {
                r.report("ok");
                let _ = tailbound::sys::proc::stdio_to_null();
            }
        });
        // Fault tests end the session with an error here, as a failing FUSE session would.
        tailbound::failpoint::hit("mount.session-end");
        served
    })
    .unwrap_or_else(|panic| Err(std::io::Error::other(panic.to_string())));
    signal_handle.close();
    if let (Some(file), Some(counts)) = (&stats_file, &options.stats) {
        if let Err(e) = std::fs::write(file, counts.report()) {
            eprintln!("tailbound: {}: {e}", file.display());
        }
    }
    // Its clients' files close and their locks go before the pool is synced.
    server.stop();
    if !mounted {
        // Never mounted: no final sync to confirm.
        note.withdraw();
        let e = served
            .err()
            .map_or_else(|| "not mounted".to_string(), |e| e.to_string());
        let msg = format!("mounting {} on {}: {e}", pool.display(), dir.display());
        return Err(fail(&mut ready, msg).into());
    }
    // However the session ended (an unmount, or an error of the FUSE session), what the pool
    // acknowledged is synced and the sync confirmed: left unconfirmed, `umount` would report
    // a server that died.
    let session = served.map_err(|e| format!("the FUSE session of {} ended: {e}", dir.display()));
    let fs = Arc::try_unwrap(fs).unwrap_or_else(|shared| (*shared).clone());
    // Fault tests end the server here, as a kill in its final sync would.
    tailbound::failpoint::hit("mount.final-sync");
    // A panic in the final sync is its failure, reported in the note `umount` reads.
    let closed = crate::serving::final_sync(|| {
        tailbound::failpoint::hit("mount.final-sync-panics");
        fs.close()
    });
    // Confirmed while the device still holds the pool's lock: `umount` reads the notes once
    // the lock is free.
    note.confirm(closed.as_ref().err().map(String::as_str));
    drop(dev);
    if let Err(report) = closed {
        return Err(format!(
            "{}: the final sync failed, so the pool's last writes may not be durable: {report}",
            pool.display()
        )
        .into());
    }
    session.map_err(Into::into)
}

fn serve(
    fs: Arc<Fs>,
    dir: &Path,
    options: &tailbound_fuse::Options,
    invalidator: &tailbound_fuse::Invalidator,
    mounted: impl FnOnce(tailbound_fuse::Unmounter),
) -> std::io::Result<()> {
    tailbound_fuse::serve(fs, dir, options, invalidator, mounted)
}

/// The pool of the tailbound mount at `dir`, from /proc/self/mountinfo.
fn tailbound_mount_at(dir: &Path) -> Result<Option<PathBuf>, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let want = dir.as_os_str().as_bytes();
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(sep + 1), fields.get(sep + 2))
        else {
            continue;
        };
        if !fstype.starts_with("fuse") || unescape(point) != want {
            continue;
        }
        let source: std::ffi::OsString =
            std::os::unix::ffi::OsStringExt::from_vec(unescape(source));
        let source = PathBuf::from(source);
        // A root mount has no subtype: a FUSE mount whose source is a pool file is ours.
        if *fstype == "fuse.tailbound" || (source.is_absolute() && source.exists()) {
            return Ok(Some(source));
        }
    }
    Ok(None)
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

pub fn umount(args: UmountArgs) -> CliResult {
    let dir = std::fs::canonicalize(&args.dir)
        .or_else(|_| std::path::absolute(&args.dir))
        .map_err(|e| format!("{}: {e}", args.dir.display()))?;
    let pool = tailbound_mount_at(&dir)?
        .ok_or_else(|| format!("{}: no tailbound mount there", dir.display()))?;
    // Push the kernel's buffered writes to the server before the mount goes.
    let _ = tailbound::sys::fs::syncfs(&dir);
    unmount(&dir, args.lazy)?;
    // The server syncs the pool and lets its lock go when the kernel is done with the mount.
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    let file = std::fs::File::open(&pool).map_err(|e| format!("{}: {e}", pool.display()))?;
    loop {
        match tailbound::sys::file::try_lock_exclusive(&file) {
            Ok(true) => break,
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(false) => {
                return Err(format!(
                    "{}: unmounted, but the server still holds {} after {} s",
                    dir.display(),
                    pool.display(),
                    args.wait
                )
                .into())
            }
            Err(e) => return Err(format!("{}: {e}", pool.display()).into()),
        }
    }
    let serving = take_serving(&pool);
    if let Some(report) = take_sync_failure(&pool) {
        return Err(format!(
            "{}: unmounted, but the final sync of {} failed, so its last writes may not be \
             durable: {report}",
            dir.display(),
            pool.display()
        )
        .into());
    }
    match serving {
        None => Ok(()),
        Some(note) => Err(format!(
            "{}: unmounted, but the server of {} ({note}) ended without confirming its final \
             sync, so its last writes may not be durable (the next mount recovers what was)",
            dir.display(),
            pool.display()
        )
        .into()),
    }
}

/// Unmounts `dir`: directly as root, else through fusermount3.
fn unmount(dir: &Path, lazy: bool) -> Result<(), String> {
    if tailbound::sys::proc::is_root() {
        return tailbound::sys::fs::unmount(dir, lazy)
            .map_err(|e| format!("unmounting {}: {e}", dir.display()));
    }
    let status = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(dir)
        .status()
        .map_err(|e| format!("running fusermount3: {e}"))?;
    if !status.success() {
        return Err(format!("fusermount3 -u {} failed: {status}", dir.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/mnt/a\040b"), b"/mnt/a b");
        assert_eq!(unescape(r"/x\134y"), b"/x\\y");
        assert_eq!(unescape(r"/trailing\04"), b"/trailing\\04");
        assert_eq!(unescape("/plain"), b"/plain");
    }
}
