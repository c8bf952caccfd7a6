//! The public types of tbfs: its configuration, errors, attributes and counters. Names no part
//! of the engine (only the format's mode bits), so every part may use it without a cycle.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::dev::Device;
use crate::tbfs::clock::Clock;
use crate::tbfs::format;

/// What a rename does when the new name exists (`renameat2` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace it (a file by a file, an empty directory by a directory).
    #[default]
    Replace,
    /// Fail with `Exists` (`RENAME_NOREPLACE`).
    NoReplace,
    /// Swap the two names, which must both exist, whatever their kinds (`RENAME_EXCHANGE`).
    Exchange,
}

/// When a synchronous write (fsync, fdatasync, O_SYNC, O_DSYNC) writes a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ordering {
    /// Every synchronous write writes a checkpoint.
    Strict = 0,
    /// A synchronous write writes a data-only log, recovered by roll-forward, unless its file
    /// has a change only a checkpoint records (creation, a name or link, an attribute or size
    /// set) not yet in one: then a checkpoint.
    #[default]
    Relaxed = 1,
}

impl Ordering {
    /// From its superblock code (`as u8` is the other way); the superblock decoder bounds it.
    pub(crate) fn from_code(code: u8) -> Ordering {
        if code == Ordering::Strict as u8 {
            Ordering::Strict
        } else {
            Ordering::Relaxed
        }
    }
}

/// When the device's volatile cache is flushed. In every policy a log's write completes before the
/// next log is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Barrier {
    /// After every log: nothing acknowledged is ever lost.
    EveryLog = 0,
    /// After every log that ends a checkpoint, and before a superblock write.
    #[default]
    EveryCheckpoint = 1,
    /// Only around superblock refreshes (every `superblock_every_bytes` or `superblock_every`).
    Superblock = 2,
}

impl Barrier {
    /// From its superblock code (`as u8` is the other way); the superblock decoder bounds it.
    pub(crate) fn from_code(code: u8) -> Barrier {
        match code {
            0 => Barrier::EveryLog,
            1 => Barrier::EveryCheckpoint,
            _ => Barrier::Superblock,
        }
    }
}

/// What recovery does with corruption it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse a pool with an invalid log before the end of the log chain.
    Strict,
    /// Stop roll-forward at the first log that does not verify and keep everything before it.
    #[default]
    TolerateTail,
}

/// How a pool is made and run. Recorded in the superblock by
/// [`Fs::format`](crate::tbfs::Fs::format); `open` uses the recorded values unless told
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub ordering: Ordering,
    pub barrier: Barrier,
    /// Segment size in bytes (a multiple of the block size; default 8 MiB, smaller for small pools).
    pub segment_bytes: u64,
    /// Refresh the superblock after at most this many bytes of logs (bounds roll-forward;
    /// default 128 MiB, and at most a quarter of the pool). Each refresh writes a checkpoint,
    /// which holds the metadata lock while it lays out every inode and directory changed since
    /// the last, so refreshing too often makes most checkpoints refreshes.
    pub superblock_every_bytes: u64,
    /// ... or after this long.
    pub superblock_every: Duration,
    /// Write a checkpoint in the background this often when anything is dirty (`None`: never).
    pub checkpoint_every: Option<Duration>,
    /// Buffered (not yet logged) file data above this many bytes is written out (default
    /// 32 MiB; 8 MiB in a memory pool, [`Config::memory_pool`]).
    pub dirty_bytes_max: u64,
    /// Plain checkpoints are kept (readable with [`Fs::at`](crate::tbfs::Fs::at), their
    /// blocks never reused) this long; snapshots until dropped. When writers would otherwise
    /// find the pool full, the oldest plain checkpoints are released early; snapshots never
    /// are.
    pub protection_period: Duration,
    /// Run the cleaner in a background thread, keeping at least `gc_free_percent` of the pool
    /// free when it can.
    pub background_gc: bool,
    /// Free space (percent of the pool, at most 90) the background cleaner aims for.
    pub gc_free_percent: u32,
    /// Where the engine reads the time (not recorded: `open` takes [`OpenOptions::clock`]).
    pub clock: Clock,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ordering: Ordering::Relaxed,
            barrier: Barrier::EveryCheckpoint,
            segment_bytes: 8 << 20,
            superblock_every_bytes: 128 << 20,
            superblock_every: Duration::from_secs(5),
            checkpoint_every: Some(Duration::from_secs(5)),
            dirty_bytes_max: 32 << 20,
            protection_period: Duration::from_secs(3600),
            background_gc: true,
            gc_free_percent: 20,
            clock: Clock::wall(),
        }
    }
}

impl Config {
    /// The defaults for a pool in memory (`MemoryPool`): as [`Config::default`], but without a
    /// protection period and with an 8 MiB write buffer.
    ///
    /// A memory pool is a process's working tree, gone at reboot; an hour of plain checkpoints
    /// kept in it would hold every deleted or overwritten byte of that hour in memory (the pool
    /// would fill with history, and the cleaner could not free it). Snapshots still keep what
    /// they name, and the newest checkpoint is always kept.
    ///
    /// Writing a memory pool's log is a copy from the buffered blocks into the pool, so what is
    /// buffered and in flight should stay well inside the processor's last-level cache: a
    /// buffer as large as that cache cost more CPU per operation, copying into the pool and
    /// computing CRCs (docs/results/fileserver.md). A disk pool keeps the larger buffer, for
    /// longer sequential writes.
    pub fn memory_pool() -> Config {
        Config {
            protection_period: Duration::ZERO,
            dirty_bytes_max: 8 << 20,
            ..Config::default()
        }
    }
}

/// Options for opening an existing pool.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub recovery: RecoveryMode,
    /// Run with this ordering/barrier instead of the recorded ones.
    pub ordering: Option<Ordering>,
    pub barrier: Option<Barrier>,
    /// Open without writing anything (no recovery checkpoint; every write fails).
    pub read_only: bool,
    /// Run the background cleaner or not, instead of what the pool recorded.
    pub background_gc: Option<bool>,
    /// Where the engine reads the time ([`Config::clock`]).
    pub clock: Clock,
}

/// What recovery found and did when a pool was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Which superblock copy (0 or 1) was used.
    pub superblock: u8,
    /// The checkpoint the superblock named, and the newest one found by roll-forward.
    pub superblock_checkpoint: u64,
    pub checkpoint: u64,
    /// Logs replayed after the superblock's checkpoint, and the bytes they spanned.
    pub logs_rolled_forward: u64,
    pub bytes_rolled_forward: u64,
    /// Data-only logs written ahead of their payloads whose payload was incomplete, and the
    /// later logs of the same files: part of the chain, not replayed (nothing they held was
    /// acknowledged durable). Also the logs of checkpoints after the one loaded, written ahead
    /// of a payload that turned out incomplete (format version 4): they do not count.
    pub logs_skipped: u64,
    /// Files' parts of runs of data-only logs left out because the run stopped before their
    /// attributes record (or its end): a write spread over several logs is replayed whole or
    /// not at all. Also parts of files that depend on a checkpoint that does not count (see
    /// `logs_skipped`). Counted per log and file.
    pub run_parts_dropped: u64,
    /// Why roll-forward stopped (`end of log chain`, `CRC mismatch at block N`, ...).
    pub stop_reason: String,
    /// Orphaned inodes (unlinked while open) reclaimed.
    pub orphans_reclaimed: u64,
    /// Retained checkpoints (snapshots and protected plain checkpoints) found.
    pub checkpoints_retained: u64,
    pub elapsed: Duration,
}

/// What kind of inode a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    /// A symbolic link; its target is its data.
    Symlink,
    /// A named pipe (`S_IFIFO`). Special files hold no data: the kernel serves their I/O.
    Fifo,
    /// A character device (`S_IFCHR`), with its device number in [`Stat::rdev`].
    CharDevice,
    /// A block device (`S_IFBLK`), with its device number in [`Stat::rdev`].
    BlockDevice,
    /// A Unix socket's name (`S_IFSOCK`).
    Socket,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    pub fn type_bits(self) -> u32 {
        match self {
            FileKind::File => format::S_IFREG,
            FileKind::Dir => format::S_IFDIR,
            FileKind::Symlink => format::S_IFLNK,
            FileKind::Fifo => format::S_IFIFO,
            FileKind::CharDevice => format::S_IFCHR,
            FileKind::BlockDevice => format::S_IFBLK,
            FileKind::Socket => format::S_IFSOCK,
        }
    }

    /// The kind of a mode's `S_IFMT` bits; `None` for bits that name no kind.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & format::S_IFMT {
            format::S_IFREG => FileKind::File,
            format::S_IFDIR => FileKind::Dir,
            format::S_IFLNK => FileKind::Symlink,
            format::S_IFIFO => FileKind::Fifo,
            format::S_IFCHR => FileKind::CharDevice,
            format::S_IFBLK => FileKind::BlockDevice,
            format::S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }

    /// A FIFO, device or socket: an inode with no data of its own.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::CharDevice | FileKind::BlockDevice | FileKind::Socket
        )
    }
}

/// What `stat` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    /// Blocks of [`crate::dev::BLOCK_SIZE`] mapped to storage or buffered.
    pub blocks: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub atime_ns: i64,
    pub uid: u32,
    pub gid: u32,
    /// A device's number, as the kernel encodes it in 32 bits (`new_encode_dev`: minor bits 0–7,
    /// major bits 8–19, the rest of the minor from bit 20); 0 for every other kind.
    pub rdev: u32,
}

/// Attribute changes for [`Fs::set_attr`](crate::tbfs::Fs::set_attr) /
/// [`File::set_attr`](crate::tbfs::File::set_attr) (chmod, chown, utimens); `None`
/// leaves an attribute as it is. Any change sets the change time to now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the low 12 bits are used).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
    /// The times given are the current time (`utimensat` with NULL or `UTIME_NOW`): then a
    /// caller who does not own the file may set them if it may write to it, as the kernel lets it.
    pub touch: bool,
}

/// When reads update a file's access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    /// Never (like `noatime`).
    Never = 0,
    /// When the access time is not after the modification or change time, or is a day old (like
    /// Linux's default `relatime`).
    #[default]
    Relatime = 1,
    /// On every read (like `strictatime`).
    Strict = 2,
}

/// One directory entry from `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: FileKind,
}

/// What `statvfs` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatVfs {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub files: u64,
    pub name_max: u64,
}

/// How writes to an open file are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    #[default]
    None,
    /// O_DSYNC: every write is followed by `fdatasync`.
    Data,
    /// O_SYNC: every write is followed by `fsync`.
    Full,
}

/// How to open a file, like `open(2)` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub exclusive: bool,
    pub truncate: bool,
    pub append: bool,
    pub sync: SyncMode,
    /// `O_DIRECT`: each write goes out before it returns, as its writer's I/O, and returns once
    /// its data is on the device (not flushed: durability still takes `fsync` or `O_SYNC`), in
    /// relaxed ordering as data-only logs that wait for no other writer's I/O. Reads are not
    /// affected.
    pub direct: bool,
    /// Permission bits for a created file.
    pub mode: u32,
}

impl OpenFlags {
    pub fn read_only() -> OpenFlags {
        OpenFlags {
            read: true,
            ..OpenFlags::default()
        }
    }
    /// Read-write, created if missing (mode 0644).
    pub fn create() -> OpenFlags {
        OpenFlags {
            read: true,
            write: true,
            create: true,
            mode: 0o644,
            ..OpenFlags::default()
        }
    }
    /// From `open(2)` flags and mode.
    pub fn from_libc(flags: i32, mode: u32) -> OpenFlags {
        let acc = flags & libc::O_ACCMODE;
        OpenFlags {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            create: flags & libc::O_CREAT != 0,
            exclusive: flags & libc::O_EXCL != 0,
            truncate: flags & libc::O_TRUNC != 0,
            append: flags & libc::O_APPEND != 0,
            sync: if flags & libc::O_SYNC == libc::O_SYNC {
                SyncMode::Full
            } else if flags & libc::O_DSYNC != 0 {
                SyncMode::Data
            } else {
                SyncMode::None
            },
            direct: flags & libc::O_DIRECT != 0,
            mode: mode & 0o7777,
        }
    }
}

/// Everything that can go wrong in tbfs. Messages name the path or pool and the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: file exists")]
    Exists(String),
    #[error("{0}: not a directory")]
    NotDir(String),
    #[error("{0}: is a directory")]
    IsDir(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("{0}: file name too long")]
    NameTooLong(String),
    #[error("{0}: too many levels of symbolic links")]
    Loop(String),
    #[error("{0}: operation not permitted")]
    NotPermitted(String),
    #[error("{0}: invalid argument")]
    Invalid(String),
    #[error("{0}: bad file handle for this operation")]
    BadHandle(String),
    #[error("{0}: read-only pool")]
    ReadOnly(String),
    #[error("pool is full: {0}")]
    NoSpace(String),
    #[error("corrupt pool: {0}")]
    Corrupt(String),
    #[error("pool is unusable after an earlier failure (reopen it to recover): {0}")]
    Poisoned(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The `errno` a POSIX call would return for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::Exists(_) => libc::EEXIST,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::BadHandle(_) => libc::EBADF,
            Error::ReadOnly(_) => libc::EROFS,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::Corrupt(_) => libc::EUCLEAN,
            Error::Poisoned(_) => libc::EIO,
            Error::Loop(_) => libc::ELOOP,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) fn io(what: impl fmt::Display, source: io::Error) -> Error {
        Error::Io {
            what: what.to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Where a pool's blocks are, in blocks ([`Fs::space_census`](crate::tbfs::Fs::space_census)).
/// The live tree's blocks by kind add up to `live_counted` (the segment table's count); those
/// and `pinned`, `free`, `pending`, `heads_rest` and `dead` add up to the segment space
/// (`segments × segment_blocks`). `reserve`, `low_water`, `checkpoint_debt` and `buffered` are
/// the room the space check keeps beyond what is written, part of `free`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceCensus {
    pub segment_blocks: u64,
    pub segments: u64,
    /// Blocks before the first segment (the superblocks).
    pub fixed_blocks: u64,
    /// Live blocks of regular files' (and symbolic links') data.
    pub file_data: u64,
    /// Live metadata: directories' blocks, file maps' nodes, inode pages, the inode file's
    /// map nodes, the retention tables' pages and their maps' nodes, the newest checkpoint's
    /// root.
    pub directory_blocks: u64,
    pub file_map_nodes: u64,
    pub inode_pages: u64,
    pub inode_file_nodes: u64,
    pub table_blocks: u64,
    pub table_nodes: u64,
    pub roots: u64,
    /// Segments holding at least one live metadata block.
    pub segments_with_metadata: u64,
    /// Live blocks as the segment table counts them.
    pub live_counted: u64,
    /// Dead blocks a retained checkpoint still references.
    pub pinned: u64,
    /// Blocks the writer can fill without cleaning (the rest of its current segment
    /// included).
    pub free: u64,
    /// Blocks of segments with nothing live or pinned that wait for a flush, or a checkpoint
    /// and its superblock, before reuse.
    pub pending: u64,
    /// Blocks the writer's other heads hold out of the free count: the rest of the cleaner's
    /// parked head, and the next segment while nothing is written in it.
    pub heads_rest: u64,
    /// Dead blocks in written segments: what only cleaning gives back.
    pub dead: u64,
    /// What a write's space check keeps free beyond what it writes: the reserve (with the
    /// deletes' room), and the low-water mark below which writers clean.
    pub reserve: u64,
    pub low_water: u64,
    /// The next checkpoint's debt as the quick bound counts it, and the data buffered.
    pub checkpoint_debt: u64,
    pub buffered: u64,
}

impl SpaceCensus {
    /// The live metadata blocks, every kind.
    pub fn metadata(&self) -> u64 {
        self.directory_blocks
            + self.file_map_nodes
            + self.inode_pages
            + self.inode_file_nodes
            + self.table_blocks
            + self.table_nodes
            + self.roots
    }

    /// Every field by name, in declaration order, for reports.
    pub fn fields(&self) -> [(&'static str, u64); 22] {
        [
            ("segment_blocks", self.segment_blocks),
            ("segments", self.segments),
            ("fixed_blocks", self.fixed_blocks),
            ("file_data", self.file_data),
            ("directory_blocks", self.directory_blocks),
            ("file_map_nodes", self.file_map_nodes),
            ("inode_pages", self.inode_pages),
            ("inode_file_nodes", self.inode_file_nodes),
            ("table_blocks", self.table_blocks),
            ("table_nodes", self.table_nodes),
            ("roots", self.roots),
            ("segments_with_metadata", self.segments_with_metadata),
            ("live_counted", self.live_counted),
            ("pinned", self.pinned),
            ("free", self.free),
            ("pending", self.pending),
            ("heads_rest", self.heads_rest),
            ("dead", self.dead),
            ("reserve", self.reserve),
            ("low_water", self.low_water),
            ("checkpoint_debt", self.checkpoint_debt),
            ("buffered", self.buffered),
        ]
    }
}

// Keep the trait object type in the public signatures of this module easy to name.
pub type DeviceRef = std::sync::Arc<dyn Device>;

/// What the engine has written since the pool was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsCounters {
    pub logs: u64,
    pub data_only_logs: u64,
    pub checkpoints: u64,
    pub superblock_writes: u64,
    pub device_flushes: u64,
    pub bytes_written: u64,
    /// Segments the cleaner emptied, and the live blocks it copied forward to do so.
    pub segments_cleaned: u64,
    pub blocks_copied: u64,
    /// Cleaning passes whose copies went out as data-only logs, with no checkpoint.
    pub light_cleaning_passes: u64,
    /// Cleaning passes whose copies of file data went to the cleaner's own log head, in
    /// segments that hold no writer's logs (light passes that also moved metadata included,
    /// which `light_cleaning_passes` leaves out).
    pub light_passes_apart: u64,
    /// Seals of buffered data whose files' last versions lived long went to that head, in a
    /// run of their own (host writes parted by expected lifetime).
    pub seals_apart: u64,
    /// Blocks of file data written in the cleaner's log head: the host's (a seal's run of
    /// long-lived files) and the cleaner's copies. Against the host's writes and
    /// `blocks_copied`, how far data is parted by lifetime at all.
    pub host_blocks_apart: u64,
    pub copies_apart: u64,
    /// Copies a light pass sent to the other log head than their victim's, by their file's
    /// write rate (a hot file's blocks out of a long-lived victim, a cold file's out of a
    /// short-lived one).
    pub copies_by_file: u64,
    /// What the cleaner saw, summed over its passes (`cleaning_passes`), to tell its write
    /// amplification apart: the free blocks and the live blocks in the pool as each pass began;
    /// the victims it chose and their live blocks, and the live blocks of as many of the
    /// emptiest segments (greedy's choice over every written segment but the writer's, had it
    /// been free to take any); the blocks of its victims past the end of what had been written
    /// in them; and the victims that held both the host's data and the cleaner's copies.
    pub cleaning_passes: u64,
    pub pass_free_blocks: u64,
    pub pass_live_blocks: u64,
    pub victims_chosen: u64,
    pub victim_live_blocks: u64,
    pub greedy_live_blocks: u64,
    pub victim_unwritten_blocks: u64,
    pub victims_mixed: u64,
    /// Of greedy's choice at each pass (the segments of `greedy_live_blocks`), how many a rule
    /// kept from the pass: the roll-forward chain (a log written since the superblock's
    /// checkpoint), a block dropped since that checkpoint (by a checkpoint's rewrite, a delete
    /// or a truncate; both rules keep segments from light passes only), retention (a snapshot,
    /// a view, a protection period, a pin), or an earlier pass that could not empty it.
    pub greedy_kept_by_chain: u64,
    pub greedy_kept_by_dead: u64,
    pub greedy_kept_by_retention: u64,
    pub greedy_kept_by_skip: u64,
    /// Live blocks of as many of the emptiest segments as each pass's victims among those
    /// the pass may take (no rule keeps them out), summed over passes: greedy's choice within
    /// the rules, between `greedy_live_blocks` and `victim_live_blocks`.
    pub reach_live_blocks: u64,
    /// Written segments the roll-forward chain kept from each pass (light passes only),
    /// summed over passes.
    pub pass_chain_segments: u64,
    /// Blocks of segments holding nothing live or pinned but not yet free (waiting for a flush,
    /// or a checkpoint and its superblock), summed over passes as each began.
    pub pass_pending_blocks: u64,
    /// Checkpoints the cleaner wrote for light victims (none were left out of the
    /// roll-forward chain, passes stopped giving space back, a checkpoint saves more copies
    /// than it writes, or the chain reached its bound while segment ages differ), for the live
    /// metadata of a light pass's victims, and for anything else (full passes, retention, dead
    /// segments waiting, pins).
    pub cleaner_checkpoints_for_victims: u64,
    pub cleaner_checkpoints_for_metadata: u64,
    pub cleaner_checkpoints_other: u64,
    /// Live metadata blocks found in light passes' victims, which only a checkpoint moves: map
    /// nodes of files, inode pages and the inode file's map nodes, the tables' pages and
    /// nodes, directories' blocks, and the rest (roots, attributes).
    pub victim_meta_maps: u64,
    pub victim_meta_inodes: u64,
    pub victim_meta_tables: u64,
    pub victim_meta_dirs: u64,
    pub victim_meta_other: u64,
    /// File blocks written in data-only logs as placed data, for the next checkpoint to map:
    /// buffered data of files with a change only a checkpoint records.
    pub placed_blocks: u64,
    /// Blocks of logs that are not file or directory data: summaries, pads, map nodes, inode
    /// pages, tables and checkpoint roots (part of `bytes_written`).
    pub metadata_blocks: u64,
    /// Plain checkpoints released before their protection period ended because the pool was full.
    pub protection_released: u64,
    /// Checkpoints written to pay what deletes and truncates under a snapshot or a view added
    /// to the checkpoint debt past the room kept for it, or, with neither, before a delete
    /// would take the debt past the free room (`Engine::record_deletes_first`); and such
    /// payments that found no room (the debt then stood unpaid until the next space check
    /// counted it).
    pub deletes_debt_checkpoints: u64,
    pub deletes_debt_unpaid: u64,
    /// Checkpoints a delete with nothing keeping what it drops wrote first, or tried to (those
    /// that found no room count in `deletes_debt_unpaid`), because the inode pages deletes may
    /// have dirtied were past half the allowance the room keeps for them
    /// (`DELETES_PAGES_ALLOWANCE`) and the free blocks did not hold every page.
    pub deletes_pages_checkpoints: u64,
    /// Checkpoints written under a snapshot or a view in the room a drop after them needs,
    /// without the cleaning cycle beside it, which did not fit (`Engine::drop_floor`).
    pub checkpoints_in_drop_floor: u64,
    /// Space checks that found room short and waited, under `meta`, for every log sealed before
    /// them to be written (other writers' payloads included), and those of real-time writers
    /// that found the room above the floor and went on without that wait.
    pub space_waits: u64,
    pub space_waits_left: u64,
    /// Writers' space checks that would have waited for the logs in flight under `meta` and
    /// waited with `meta` let go instead, before their commit (`Engine::wait_for_room_outside`).
    pub space_waits_outside: u64,
    /// Deletes, truncates, replacing renames and directory removals refused with `NoSpace`
    /// under a snapshot or a view because the debt earlier ones added could not be paid
    /// (`Engine::pay_deletes_debt_first`).
    pub deletes_refused: u64,
    /// Pinned-table pages the recovery that opened the pool marked for its checkpoint: those
    /// holding a pin roll-forward or the orphans it freed added (or a pool of the older
    /// layout's pages), not every page holding a pin.
    pub recovery_pinned_pages: u64,
    /// Nanoseconds the metadata lock was held, summed over every hold: most operations (creates,
    /// deletes, commits, cleaning) need it, so its share of the wall time bounds how much they
    /// overlap.
    pub meta_held_ns: u64,
    /// Waits for the device (an I/O or flush, a payload, the log writer) made by a thread
    /// holding `meta`, each counted once however its phases nest, and the nanoseconds they
    /// took: every thread needing `meta` meanwhile waited for the device too. Counted where
    /// the waits are marked as phases (`phases::Phase::waits_for_device`): a device behind
    /// `sched` marks its own I/O, a bare device only the payloads and the log writer.
    pub meta_device_waits: u64,
    pub meta_device_wait_ns: u64,
    /// The same waits by what the thread holding `meta` was doing (`phases::MetaWork`, indexed
    /// by `MetaWork as usize`): the outermost work marked (what the hold was for) and the
    /// innermost (the step that waited).
    pub meta_device_outer: crate::phases::ByMetaWork,
    pub meta_device_inner: crate::phases::ByMetaWork,
    /// Of `meta_held_ns`, the nanoseconds spent writing checkpoints, cleaning, and sealing
    /// buffered data as data-only logs, each without what is nested in it (a checkpoint a
    /// cleaning pass writes counts as a checkpoint, the buffer a pass writes first as sealing).
    /// The rest is namespace work (creates, deletes, renames, look-ups) and short holds.
    pub meta_checkpoint_ns: u64,
    pub meta_cleaning_ns: u64,
    pub meta_sealing_ns: u64,
}
