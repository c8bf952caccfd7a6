//! What the `tailbound fs` subcommands share: the pool argument, opening a pool (here or
//! through its server), the live tree or a checkpoint as one view, and how configurations and
//! times are printed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use tailbound::dev::file::FileDevice;
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::serve::Client;
use tailbound::tbfs::{self, Barrier, Fs, OpenFlags, OpenOptions, Ordering, Stat};

use crate::cmd_fs_pool::{Pool, PoolView};
use crate::CliResult;

/// The `f_type` of tmpfs (and so of /dev/shm).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// Bytes copied per request by put/get/cat.
pub(crate) const COPY_CHUNK: usize = 1 << 20;

/// Where the pool is and how to open it.
#[derive(Args, Clone)]
pub(crate) struct PoolArg {
    /// The pool: a file (in /dev/shm for a memory pool) or a block device.
    pub(crate) pool: PathBuf,
    /// Open it as a memory pool or a file pool (default: memory in tmpfs, file elsewhere).
    #[arg(long)]
    pub(crate) backend: Option<Backend>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "kebab-case")]
pub(crate) enum Backend {
    /// Mapped into memory (dev::memory::MemoryPool); meant for tmpfs or DAX.
    Memory,
    /// O_DIRECT reads and writes through io_uring (dev::file::FileDevice).
    File,
}

// ---------------------------------------------------------------------------------------------
// Opening

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Memory => "memory",
            Backend::File => "file",
        })
    }
}

pub(crate) fn in_pool(pool: &PoolArg, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", pool.pool.display())
}

/// The backend a pool opens with: the one asked for, else memory in tmpfs and file elsewhere.
pub(crate) fn detect_backend(path: &Path, asked: Option<Backend>) -> Backend {
    if let Some(b) = asked {
        return b;
    }
    use std::os::unix::fs::FileTypeExt;
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device()) {
        return Backend::File;
    }
    let dir = if path.exists() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    match tailbound::sys::fs::statfs(&dir) {
        Ok(st) if st.magic == TMPFS_MAGIC => Backend::Memory,
        _ => Backend::File,
    }
}

pub(crate) fn open_device(pool: &PoolArg) -> Result<(Arc<dyn Device>, Backend), String> {
    let backend = detect_backend(&pool.pool, pool.backend);
    let dev: Arc<dyn Device> = match backend {
        Backend::Memory => Arc::new(MemoryPool::open(&pool.pool).map_err(|e| e.to_string())?),
        Backend::File => tailbound::sched::scheduled(
            Arc::new(FileDevice::open(&pool.pool).map_err(|e| e.to_string())?),
            &pool.pool,
        )
        .map_err(|e| e.to_string())?,
    };
    Ok((dev, backend))
}

/// The pool: through its server when one answers on its socket (`tailbound serve`), else
/// opened here (`read_only`: without writing anything).
pub(crate) fn open_fs(pool: &PoolArg, read_only: bool) -> Result<Pool, String> {
    let socket = tailbound::serve::socket_path(&pool.pool);
    if socket.exists() {
        match Client::connect(&socket) {
            Ok(client) => return Ok(Pool::Served(client)),
            Err(tbfs::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                return Err(format!(
                    "{}: served on {}, which is not open to you (the server's --allow-other opens it)",
                    pool.pool.display(),
                    socket.display()
                ));
            }
            // A socket left by a server that is gone: the pool is opened here.
            Err(_) => {}
        }
    }
    let fs = open_local(pool, read_only)?;
    if !read_only {
        // This process holds the pool's lock now, as a server would: what a server left is
        // from one that is gone.
        crate::serving::warn_of_last_server(&pool.pool);
    }
    Ok(Pool::Local(fs))
}

fn open_local(pool: &PoolArg, read_only: bool) -> Result<Fs, String> {
    open_local_with_device(pool, read_only).map(|(fs, _)| fs)
}

/// Opens the pool here; also returns its device, whose open file holds the pool's lock for as
/// long as any handle to it lives.
fn open_local_with_device(
    pool: &PoolArg,
    read_only: bool,
) -> Result<(Fs, Arc<dyn Device>), String> {
    let (dev, _) = open_device(pool)?;
    let fs = Fs::open(
        dev.clone(),
        &OpenOptions {
            read_only,
            ..OpenOptions::default()
        },
    )
    .map_err(|e| {
        format!(
            "{}: {e}{}",
            pool.pool.display(),
            if matches!(e, tbfs::Error::Corrupt(_)) {
                " (run `tailbound fs fsck` on it)"
            } else {
                ""
            }
        )
    })?;
    Ok((fs, dev))
}

/// Opens a pool for `command` to own (`tailbound serve`): writable, with the pool lock, which
/// the returned device keeps after the pool is closed.
pub(crate) fn open_pool_for(
    path: &Path,
    backend: Option<Backend>,
    command: &str,
) -> Result<(Fs, Arc<dyn Device>), String> {
    let pool = PoolArg {
        pool: path.to_path_buf(),
        backend,
    };
    open_local_with_device(&pool, false).map_err(|e| {
        if e.contains("pool lock") {
            format!("{e}; `tailbound {command}` needs the pool to itself")
        } else {
            e
        }
    })
}

/// Refuses a command that needs the pool's device to itself while a server owns the pool.
pub(crate) fn refuse_served(pool: &PoolArg, what: &str) -> CliResult {
    match Client::for_pool(&pool.pool) {
        Some(c) => Err(format!(
            "{}: served by process {} on {}; stop the server (kill {}) to {what}",
            pool.pool.display(),
            c.server_pid(),
            c.socket().display(),
            c.server_pid()
        )
        .into()),
        None => Ok(()),
    }
}

/// The live tree, or a read-only view of a retained checkpoint.
pub(crate) enum View {
    Live(Pool),
    At(PoolView),
}

impl View {
    pub(crate) fn open(pool: &PoolArg, at: Option<u64>) -> Result<View, String> {
        let fs = open_fs(pool, true)?;
        Ok(match at {
            None => View::Live(fs),
            Some(n) => View::At(fs.at(n).map_err(|e| in_pool(pool, e))?),
        })
    }

    pub(crate) fn stat(&self, path: &str) -> tbfs::Result<Stat> {
        match self {
            View::Live(fs) => fs.stat(path),
            View::At(s) => s.stat(path),
        }
    }

    pub(crate) fn readdir(&self, path: &str) -> tbfs::Result<Vec<tbfs::DirEntry>> {
        match self {
            View::Live(fs) => fs.readdir(path),
            View::At(s) => s.readdir(path),
        }
    }

    /// Calls `f` with each piece of a file, in order.
    pub(crate) fn read_each(
        &self,
        path: &str,
        size: u64,
        mut f: impl FnMut(&[u8]) -> CliResult,
    ) -> CliResult {
        let mut buf = vec![0u8; COPY_CHUNK];
        let mut at = 0u64;
        match self {
            View::Live(fs) => {
                let file = fs.open_file(path, OpenFlags::read_only())?;
                while at < size {
                    let n = file.pread(&mut buf, at)?;
                    if n == 0 {
                        break;
                    }
                    f(&buf[..n])?;
                    at += n as u64;
                }
            }
            View::At(s) => {
                while at < size {
                    let n = s.pread(path, &mut buf, at)?;
                    if n == 0 {
                        break;
                    }
                    f(&buf[..n])?;
                    at += n as u64;
                }
            }
        }
        Ok(())
    }
}

pub(crate) fn close(fs: Pool, pool: &PoolArg) -> CliResult {
    fs.close().map_err(|e| in_pool(pool, e))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Names and times, for printing

pub(crate) fn ordering_name(o: Ordering) -> &'static str {
    match o {
        Ordering::Strict => "strict",
        Ordering::Relaxed => "relaxed",
    }
}

pub(crate) fn barrier_name(b: Barrier) -> &'static str {
    match b {
        Barrier::EveryLog => "every-log",
        Barrier::EveryCheckpoint => "every-checkpoint",
        Barrier::Superblock => "superblock",
    }
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
pub(crate) fn utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
