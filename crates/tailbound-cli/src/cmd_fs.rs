//! `tailbound fs`: make, inspect, fill, check and repair tbfs pools from the shell.
//!
//! This file holds the subcommand and `mkfs`; opening a pool is in `cmd_fs_common`, the
//! listings in `cmd_fs_list`, checkpoints and snapshots in `cmd_fs_snapshot`, copying files in
//! and out in `cmd_fs_files`, and `fsck` and `info` in `cmd_fs_inspect`.

use std::fs::File as HostFile;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use tailbound::dev::file::FileDevice;
use tailbound::dev::Device;
use tailbound::tbfs::format::{Superblock, BLOCK_U64};
use tailbound::tbfs::fsck;
use tailbound::tbfs::{Barrier, Config, Fs, Ordering};
use tailbound::units::{parse_bytes, Bytes};

use crate::cmd_fs_common::{
    barrier_name, close, detect_backend, in_pool, open_fs, ordering_name, refuse_served, Backend,
    PoolArg, View,
};
use crate::cmd_fs_files::{copy_out, mkdir, put, rm};
use crate::cmd_fs_list::{df, ls, stat};
use crate::cmd_fs_snapshot::{checkpoints, gc, parse_fraction, restore, snapshot};
use crate::CliResult;

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
    // The new pool's lock is held: notes beside the path are about the pool it replaces.
    crate::serving::discard_for_new_pool(path);
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
