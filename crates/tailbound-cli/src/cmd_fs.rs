//! `tailbound fs`: make, inspect, fill, check and repair tbfs pools from the shell.
//!
//! This file holds the subcommand, opening a pool and `mkfs`; the listings are in
//! `cmd_fs_list`, checkpoints and snapshots in `cmd_fs_snapshot`, copying files in and out in
//! `cmd_fs_files`, and `fsck` and `info` in `cmd_fs_inspect`.

use std::fs::File as HostFile;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use tailbound::dev::file::FileDevice;
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::serve::Client;
use tailbound::tbfs::format::{Superblock, BLOCK_U64};
use tailbound::tbfs::fsck;
use tailbound::tbfs::{self, Barrier, Config, Fs, OpenFlags, OpenOptions, Ordering, Stat};
use tailbound::units::{parse_bytes, Bytes};

use crate::cmd_fs_files::{copy_out, mkdir, put, rm};
use crate::cmd_fs_list::{df, ls, stat};
use crate::cmd_fs_pool::{Pool, PoolView};
use crate::cmd_fs_snapshot::{checkpoints, gc, parse_fraction, restore, snapshot};
use crate::CliResult;

/// The `f_type` of tmpfs (and so of /dev/shm).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// Bytes copied per request by put/get/cat.
pub(crate) const COPY_CHUNK: usize = 1 << 20;

#[derive(Args)]
#[command(
    after_help = "A pool is one file (or block device) holding a whole tbfs file tree.\n\n\
Backends: a pool in tmpfs (/dev/shm, or any tmpfs) opens as a memory pool (mapped, no system \
calls per write); anything else, including block devices, opens as a file pool (O_DIRECT, io_uring). \
The bytes are the same either way; --backend overrides the guess.\n\n\
Examples:\n  \
tailbound fs mkfs /dev/shm/p.tbfs --size 256MiB\n  \
tailbound fs put /dev/shm/p.tbfs ./photo.jpg /photo.jpg\n  \
tailbound fs ls -l /dev/shm/p.tbfs /\n  \
tailbound fs get /dev/shm/p.tbfs /photo.jpg ./copy.jpg\n  \
tailbound fs fsck /dev/shm/p.tbfs"
)]
pub struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
}

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

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OrderingArg {
    /// A checkpoint for every fsync.
    Strict,
    /// A data-only log for an fsync that changes no metadata.
    Relaxed,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BarrierArg {
    /// Flush the device cache after every log.
    EveryLog,
    /// After every checkpoint.
    EveryCheckpoint,
    /// Only around superblock refreshes.
    Superblock,
}

#[derive(Subcommand)]
enum FsCommand {
    /// Make a new, empty pool (refuses to overwrite a pool unless --force).
    Mkfs {
        #[command(flatten)]
        pool: PoolArg,
        /// Pool size.
        #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
        size: u64,
        /// Segment size: the unit of log placement and reuse (default 8 MiB, smaller for pools
        /// under 256 MiB so they have at least 32 segments).
        #[arg(long, value_parser = parse_bytes)]
        segment_size: Option<u64>,
        /// When fsync writes a checkpoint.
        #[arg(long, default_value = "relaxed")]
        ordering: OrderingArg,
        /// When the device's volatile cache is flushed.
        #[arg(long, default_value = "every-checkpoint")]
        barrier: BarrierArg,
        /// Overwrite an existing pool.
        #[arg(long)]
        force: bool,
    },
    /// List a directory (or show one file).
    Ls {
        #[command(flatten)]
        pool: PoolArg,
        /// Path inside the pool.
        #[arg(default_value = "/")]
        path: String,
        /// Long listing: type and permissions, links, size, modification time (UTC), inode.
        #[arg(short = 'l')]
        long: bool,
        /// List it as it was in retained checkpoint N (see `checkpoints`).
        #[arg(long, value_name = "N")]
        at: Option<u64>,
        /// Also write the listing as JSON: {"path", "entries": [{"name", "ino", "kind", "size",
        /// "mode", "nlink", "mtime_ns"}]}.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Write a file's contents to stdout.
    Cat {
        #[command(flatten)]
        pool: PoolArg,
        path: String,
        /// The file as it was in retained checkpoint N.
        #[arg(long, value_name = "N")]
        at: Option<u64>,
    },
    /// Copy a host file into the pool (PATH may name a directory to copy into).
    Put {
        #[command(flatten)]
        pool: PoolArg,
        /// The file to copy in (`-` for stdin).
        host_file: PathBuf,
        /// Where in the pool.
        path: String,
    },
    /// Copy a file out of the pool.
    Get {
        #[command(flatten)]
        pool: PoolArg,
        path: String,
        /// Where to write it (`-` for stdout).
        host_file: PathBuf,
        /// The file as it was in retained checkpoint N.
        #[arg(long, value_name = "N")]
        at: Option<u64>,
    },
    /// Make a directory.
    Mkdir {
        #[command(flatten)]
        pool: PoolArg,
        path: String,
        /// Make missing parents too, and accept an existing directory.
        #[arg(short = 'p')]
        parents: bool,
    },
    /// Remove a file, or with -r a directory and everything under it.
    Rm {
        #[command(flatten)]
        pool: PoolArg,
        path: String,
        #[arg(short = 'r')]
        recursive: bool,
    },
    /// Rename or move, replacing a file (or empty directory) at TO.
    Mv {
        #[command(flatten)]
        pool: PoolArg,
        from: String,
        to: String,
    },
    /// Show one path's inode: type, permissions, links, size, blocks, times.
    Stat {
        #[command(flatten)]
        pool: PoolArg,
        path: String,
        /// As it was in retained checkpoint N.
        #[arg(long, value_name = "N")]
        at: Option<u64>,
        /// Also write it as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Space: pool size, live data, what only snapshots keep, what the cleaner can reclaim, free.
    ///
    /// live + pinned by snapshots + reclaimable + free = size. `gc` turns reclaimable into free;
    /// dropping snapshots (`snapshot --drop N`) turns what they pin into reclaimable.
    Df {
        #[command(flatten)]
        pool: PoolArg,
        /// Also write it as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Retained checkpoints, oldest first: snapshots, plain checkpoints younger than the
    /// protection period (1 h by default; none in a memory pool), and the newest. PINNED is
    /// what releasing that checkpoint alone would give back.
    Checkpoints {
        #[command(flatten)]
        pool: PoolArg,
        /// Also write the list as JSON: {"checkpoints": [{"number", "time", "snapshot",
        /// "pinned_bytes"}]}, `time` in RFC 3339 UTC.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Make a snapshot now (a checkpoint kept until dropped), or turn a retained checkpoint into
    /// a snapshot (--keep N) or back into a plain one (--drop N), which releases it once it is
    /// older than the protection period.
    Snapshot {
        #[command(flatten)]
        pool: PoolArg,
        /// A name for the new snapshot (1-64 bytes).
        #[arg(long, conflicts_with_all = ["keep", "drop"])]
        name: Option<String>,
        /// Keep retained checkpoint N as a snapshot.
        #[arg(long, value_name = "N", conflicts_with = "drop")]
        keep: Option<u64>,
        /// Make snapshot N a plain checkpoint again.
        #[arg(long, value_name = "N")]
        drop: Option<u64>,
    },
    /// Bring a file or directory back from retained checkpoint N into the live tree.
    ///
    /// A file replaces TO atomically (written beside it, then renamed over it). A directory is
    /// merged into TO: its subdirectories are made as needed and its files replace those of the
    /// same name; nothing else in TO is removed.
    Restore {
        #[command(flatten)]
        pool: PoolArg,
        /// The checkpoint to restore from (see `checkpoints`).
        #[arg(long, value_name = "N")]
        at: u64,
        /// What to restore, as it was named in that checkpoint.
        path: String,
        /// Where to put it in the live tree (default: PATH).
        #[arg(long)]
        to: Option<String>,
    },
    /// Run the cleaner now: copy live blocks out of the segments where it frees the most for the
    /// least copying, until the target fraction of the pool is free or nothing more can be
    /// cleaned. Snapshots and checkpoints inside the protection period are kept.
    Gc {
        #[command(flatten)]
        pool: PoolArg,
        /// Free space to aim for: a percentage (`20%`) or a fraction (`0.2`).
        #[arg(long, default_value = "20%", value_parser = parse_fraction)]
        target_free: f64,
    },
    /// Check the pool without changing it, or repair it.
    ///
    /// Verifies both superblocks, every log in every segment (magic, CRCs, sequence chain), the
    /// roll-forward chain, every retained checkpoint (maps, no block used twice, every block in a
    /// log that verifies, which is how damaged file data is found), inodes, directories, link
    /// counts and reachability. Findings name the block, checkpoint, inode and path.
    ///
    /// --repair salvages around damage: in place through recovery when the engine can open the
    /// pool (dropping logs after damage in the log chain, fixing link counts, rewriting file
    /// blocks whose log fails its CRC), otherwise by rebuilding the pool from its newest
    /// usable checkpoint (unreachable inodes go to /lost+found as #INO). It prints what was lost.
    /// A rebuild rewrites the whole pool and is not crash-safe: copy the pool first.
    ///
    /// Exit status: 0 clean (notes such as a torn log tail after a crash are not damage);
    /// 1 damage found (without --repair: repairable; with --repair: repaired);
    /// 2 unrecoverable (no checkpoint with a usable root directory, or the repair failed);
    /// 8 fsck could not run (cannot open or read the pool).
    Fsck {
        #[command(flatten)]
        pool: PoolArg,
        /// Repair a damaged pool.
        #[arg(long)]
        repair: bool,
        /// Print every finding (default: the first 50).
        #[arg(long, short = 'v')]
        verbose: bool,
        /// Also write the report as JSON: {"verdict", "findings": [{"severity", "location",
        /// "message"}], "stats", "repair"}.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Format version, configuration, history and what recovery did on open.
    Info {
        #[command(flatten)]
        pool: PoolArg,
        /// Also write it as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

pub fn run(args: FsArgs) -> CliResult {
    match args.command {
        FsCommand::Mkfs {
            pool,
            size,
            segment_size,
            ordering,
            barrier,
            force,
        } => mkfs(&pool, size, segment_size, ordering, barrier, force),
        FsCommand::Ls {
            pool,
            path,
            long,
            at,
            json,
        } => ls(&pool, &path, long, at, json.as_deref()),
        FsCommand::Cat { pool, path, at } => {
            let view = View::open(&pool, at)?;
            copy_out(&view, &pool, &path, None)
        }
        FsCommand::Put {
            pool,
            host_file,
            path,
        } => put(&pool, &host_file, &path),
        FsCommand::Get {
            pool,
            path,
            host_file,
            at,
        } => {
            let view = View::open(&pool, at)?;
            copy_out(&view, &pool, &path, Some(&host_file))
        }
        FsCommand::Mkdir {
            pool,
            path,
            parents,
        } => {
            let fs = open_fs(&pool, false)?;
            mkdir(&fs, &path, parents).map_err(|e| in_pool(&pool, e))?;
            close(fs, &pool)
        }
        FsCommand::Rm {
            pool,
            path,
            recursive,
        } => {
            let fs = open_fs(&pool, false)?;
            rm(&fs, &path, recursive).map_err(|e| in_pool(&pool, e))?;
            close(fs, &pool)
        }
        FsCommand::Mv { pool, from, to } => {
            let fs = open_fs(&pool, false)?;
            fs.rename(&from, &to).map_err(|e| in_pool(&pool, e))?;
            close(fs, &pool)
        }
        FsCommand::Stat {
            pool,
            path,
            at,
            json,
        } => stat(&pool, &path, at, json.as_deref()),
        FsCommand::Df { pool, json } => df(&pool, json.as_deref()),
        FsCommand::Checkpoints { pool, json } => checkpoints(&pool, json.as_deref()),
        FsCommand::Snapshot {
            pool,
            name,
            keep,
            drop,
        } => snapshot(&pool, name.as_deref(), keep, drop),
        FsCommand::Restore { pool, at, path, to } => {
            restore(&pool, at, &path, to.as_deref().unwrap_or(&path))
        }
        FsCommand::Gc { pool, target_free } => gc(&pool, target_free),
        FsCommand::Fsck {
            pool,
            repair,
            verbose,
            json,
        } => crate::cmd_fs_inspect::run_fsck(&pool, repair, verbose, json.as_deref()),
        FsCommand::Info { pool, json } => crate::cmd_fs_inspect::info(&pool, json.as_deref()),
    }
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
    open_local(pool, read_only).map(Pool::Local)
}

fn open_local(pool: &PoolArg, read_only: bool) -> Result<Fs, String> {
    let (dev, _) = open_device(pool)?;
    Fs::open(
        dev,
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
    })
}

/// Opens a pool for `command` to own (`tailbound serve`): writable, with the pool lock.
pub(crate) fn open_pool_for(
    path: &Path,
    backend: Option<Backend>,
    command: &str,
) -> Result<Fs, String> {
    let pool = PoolArg {
        pool: path.to_path_buf(),
        backend,
    };
    open_local(&pool, false).map_err(|e| {
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
// mkfs

fn mkfs(
    pool: &PoolArg,
    size: u64,
    segment_size: Option<u64>,
    ordering: OrderingArg,
    barrier: BarrierArg,
    force: bool,
) -> CliResult {
    refuse_served(pool, "make a new pool there")?;
    let path = &pool.pool;
    if !force && holds_a_pool(path) {
        return Err(format!(
            "{}: already holds a tbfs pool (use --force to overwrite it)",
            path.display()
        )
        .into());
    }
    let backend = detect_backend(path, pool.backend);
    let config = Config {
        ordering: match ordering {
            OrderingArg::Strict => Ordering::Strict,
            OrderingArg::Relaxed => Ordering::Relaxed,
        },
        barrier: match barrier {
            BarrierArg::EveryLog => Barrier::EveryLog,
            BarrierArg::EveryCheckpoint => Barrier::EveryCheckpoint,
            BarrierArg::Superblock => Barrier::Superblock,
        },
        segment_bytes: segment_size.unwrap_or_else(|| fsck::default_segment_bytes(size)),
        ..if backend == Backend::Memory {
            Config::memory_pool()
        } else {
            Config::default()
        }
    };
    let dev: Arc<dyn Device> = match backend {
        Backend::Memory => Arc::new(
            crate::cmd_run::create_memory_pool(path, size)
                .map_err(|e| format!("{}: making a memory pool: {e}", path.display()))?,
        ),
        Backend::File => tailbound::sched::scheduled(
            Arc::new(
                FileDevice::create(path, size)
                    .map_err(|e| format!("{}: making a file pool: {e}", path.display()))?,
            ),
            path,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?,
    };
    let len = dev.len();
    let fs = Fs::format(dev, &config).map_err(|e| format!("{}: {e}", path.display()))?;
    fs.close().map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "made a {} {} pool at {}: {} segments of {}, ordering {}, barrier {}",
        Bytes(len),
        backend,
        path.display(),
        (len / BLOCK_U64 - 2) / (config.segment_bytes / BLOCK_U64),
        Bytes(config.segment_bytes),
        ordering_name(config.ordering),
        barrier_name(config.barrier),
    );
    if backend == Backend::Memory && detect_backend(path, None) != Backend::Memory {
        println!(
            "note: {} is not in tmpfs; later commands open it as a file pool unless given --backend memory",
            path.display()
        );
    }
    Ok(())
}

/// Whether `path` starts with a valid tbfs superblock.
fn holds_a_pool(path: &Path) -> bool {
    let Ok(mut f) = HostFile::open(path) else {
        return false;
    };
    let mut b = vec![0u8; 2 * BLOCK_U64 as usize];
    if f.read_exact(&mut b).is_err() {
        return false;
    }
    b.chunks_exact(BLOCK_U64 as usize)
        .any(|c| Superblock::decode(c, u64::MAX).is_ok())
}

// ---------------------------------------------------------------------------------------------
// Times, for the listings

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
