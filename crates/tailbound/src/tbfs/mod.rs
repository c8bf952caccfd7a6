//! tbfs: a log-structured, checkpointed, CRC-protected file tree kept in a pool on a
//! [`Device`](crate::dev::Device).
//!
//! Its parts, lowest first (docs/ARCHITECTURE.md has the map):
//!
//! - [`format`](mod@format): the on-storage format (superblocks, logs, checkpoints), byte for
//!   byte; `limits`: every size, bound and tuning constant; `types`: the public types, which
//!   this file re-exports by name (it names no part itself); `clock`: where the engine reads
//!   the time ([`Clock`]).
//! - `inode`, `inode_table`, `directories`, `changes`, `names`, `retention`, `refresh`,
//!   `checkpoints`, `ifile`, `space::segments`, `space::cleaning`, `log`: each part's state (an
//!   inode in memory, the inodes by number, the directories' entries, the changes not yet
//!   checkpointed, the path cache, retained checkpoints and
//!   pins, the superblock's bookkeeping, the newest checkpoint's, the inode file, the segment
//!   table, the cleaner's, logs in flight); `budget`: the buffered bytes and their limits.
//! - `state`: `Engine` and `State`, the pool's shared state and what the `meta` lock guards.
//! - `buffer`, `namespace`, `log::{build, write, data}`, `space`, [`recovery`]: the operations
//!   on that state, each meant to name one part (those that still name more are listed in
//!   `tests/module_graph.rs`). Only the log writer (`log::write`) writes to the device.
//! - `commit` (the superblock refresh, and under it `checkpoint`, [`lifecycle`], `unlink`,
//!   `clean`, `cleaning`, `room`, `usage`, `seal` and `open`) and `fs` (the [`Fs`] / [`File`] API): the orchestration, the only modules that
//!   name more than one part of `State`; [`by_ino`]: the same tree by inode number.
//! - [`fsck`]: checking a pool without changing it, and repairing a damaged one.
//!
//! This module owns the pool's contents. It must not touch the device except through
//! [`Device`](crate::dev::Device).

pub mod admission;
mod blocks;
mod budget;
mod buffer;
pub mod by_ino;
mod changes;
mod checkpoints;
mod clock;
mod commit;
mod copies;
mod debt;
mod dense;
mod directories;
pub mod format;
mod fs;
pub mod fsck;
mod ifile;
mod inode;
mod inode_table;
mod lease_map;
mod lending;
mod limits;
pub mod locks;
mod log;
mod map;
mod names;
mod namespace;
mod poison;
mod poisoned;
mod read;
pub mod recovery;
mod refresh;
mod retention;
mod space;
mod state;
mod stats;
mod tax;
mod types;
mod watch;
mod write_rate;

pub use admission::{TenantWrites, WriterKey};
pub use clock::Clock;
pub use commit::lifecycle::{self, CheckpointInfo, GcReport, Snapshot, SpaceReport};
pub use fs::{File, Fs};
pub use lease_map::{BlockLease, ASK};
pub use limits::FILE_BYTES_MAX;
pub use types::{
    AtimePolicy, Barrier, Config, DeviceRef, DirEntry, Error, FileKind, FsCounters, OpenFlags,
    OpenOptions, Ordering, RecoveryMode, RecoveryReport, RenameMode, Result, SetAttr, SpaceCensus,
    Stat, StatVfs, SyncMode,
};
pub use watch::Watcher;

#[cfg(test)]
mod by_ino_tests;
#[cfg(test)]
mod checked_tests;
#[cfg(test)]
mod copies_debt_tests;
#[cfg(test)]
mod cut_run_tests;
#[cfg(test)]
mod deletes_debt_tests;
#[cfg(test)]
mod drop_tests;
#[cfg(test)]
mod pad_run_tests;
#[cfg(test)]
mod recovery_pins_tests;
#[cfg(test)]
mod tests;
