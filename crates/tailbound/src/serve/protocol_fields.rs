//! The fields several messages share: open flags, lock requests, stat, the configuration.

use std::time::Duration;

use super::codec::{Dec, Enc, WireError, WireResult};
use super::messages::LockArgs;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{Barrier, Config, FileKind, OpenFlags, Ordering, Stat, SyncMode};

pub(super) fn flags_enc(e: &mut Enc, f: &OpenFlags) {
    let bits = u32::from(f.read)
        | u32::from(f.write) << 1
        | u32::from(f.create) << 2
        | u32::from(f.exclusive) << 3
        | u32::from(f.truncate) << 4
        | u32::from(f.append) << 5
        | u32::from(f.direct) << 6
        | match f.sync {
            SyncMode::None => 0,
            SyncMode::Data => 1 << 7,
            SyncMode::Full => 1 << 8,
        };
    e.u32(bits).u32(f.mode);
}

pub(super) fn flags_dec(d: &mut Dec<'_>) -> WireResult<OpenFlags> {
    let bits = d.u32("open flags")?;
    if bits >> 9 != 0 || bits & (3 << 7) == 3 << 7 {
        return Err(WireError(format!("open flags {bits:#x}")));
    }
    let bit = |n: u32| bits & (1 << n) != 0;
    Ok(OpenFlags {
        read: bit(0),
        write: bit(1),
        create: bit(2),
        exclusive: bit(3),
        truncate: bit(4),
        append: bit(5),
        direct: bit(6),
        sync: if bit(7) {
            SyncMode::Data
        } else if bit(8) {
            SyncMode::Full
        } else {
            SyncMode::None
        },
        mode: d.u32("mode")? & 0o7777,
    })
}

pub(super) fn lock_enc(e: &mut Enc, l: &LockArgs) {
    e.u8(match l.space {
        Space::Record => 0,
        Space::Flock => 1,
    })
    .u8(match l.kind {
        Kind::Read => 0,
        Kind::Write => 1,
        Kind::Unlock => 2,
    })
    .u64(l.start)
    .u64(l.end)
    .bool(l.per_handle);
}

pub(super) fn lock_dec(d: &mut Dec<'_>) -> WireResult<LockArgs> {
    let space = match d.u8("lock space")? {
        0 => Space::Record,
        1 => Space::Flock,
        v => return Err(WireError(format!("lock space {v}"))),
    };
    let kind = match d.u8("lock kind")? {
        0 => Kind::Read,
        1 => Kind::Write,
        2 => Kind::Unlock,
        v => return Err(WireError(format!("lock kind {v}"))),
    };
    Ok(LockArgs {
        space,
        kind,
        start: d.u64("lock start")?,
        end: d.u64("lock end")?,
        per_handle: d.bool("lock owner")?,
    })
}

pub(super) fn stat_enc(e: &mut Enc, s: &Stat) {
    e.u64(s.ino)
        .u8(kind_code(s.kind))
        .u32(s.mode)
        .u32(s.nlink)
        .u64(s.size)
        .u64(s.blocks)
        .i64(s.mtime_ns)
        .i64(s.ctime_ns)
        .i64(s.atime_ns)
        .u32(s.uid)
        .u32(s.gid)
        .u32(s.rdev);
}

pub(super) fn stat_dec(d: &mut Dec<'_>) -> WireResult<Stat> {
    Ok(Stat {
        ino: d.u64("ino")?,
        kind: kind_dec(d)?,
        mode: d.u32("mode")?,
        nlink: d.u32("nlink")?,
        size: d.u64("size")?,
        blocks: d.u64("blocks")?,
        mtime_ns: d.i64("mtime")?,
        ctime_ns: d.i64("ctime")?,
        atime_ns: d.i64("atime")?,
        uid: d.u32("uid")?,
        gid: d.u32("gid")?,
        rdev: d.u32("rdev")?,
    })
}

pub(super) fn kind_code(k: FileKind) -> u8 {
    match k {
        FileKind::File => 0,
        FileKind::Dir => 1,
        FileKind::Symlink => 2,
        FileKind::Fifo => 3,
        FileKind::CharDevice => 4,
        FileKind::BlockDevice => 5,
        FileKind::Socket => 6,
    }
}

pub(super) fn kind_dec(d: &mut Dec<'_>) -> WireResult<FileKind> {
    match d.u8("kind")? {
        0 => Ok(FileKind::File),
        1 => Ok(FileKind::Dir),
        2 => Ok(FileKind::Symlink),
        3 => Ok(FileKind::Fifo),
        4 => Ok(FileKind::CharDevice),
        5 => Ok(FileKind::BlockDevice),
        6 => Ok(FileKind::Socket),
        v => Err(WireError(format!("file kind {v}"))),
    }
}

pub(super) fn config_enc(e: &mut Enc, c: &Config) {
    e.u8(c.ordering as u8)
        .u8(c.barrier as u8)
        .u64(c.segment_bytes)
        .u64(c.superblock_every_bytes)
        .u64(duration_ns(c.superblock_every))
        .opt_u64(c.checkpoint_every.map(duration_ns))
        .u64(c.dirty_bytes_max)
        .u64(duration_ns(c.protection_period))
        .bool(c.background_gc)
        .u32(c.gc_free_percent);
}

pub(super) fn config_dec(d: &mut Dec<'_>) -> WireResult<Config> {
    let ordering = d.u8("ordering")?;
    let barrier = d.u8("barrier")?;
    if ordering > 1 || barrier > 2 {
        return Err(WireError(format!("ordering {ordering}, barrier {barrier}")));
    }
    Ok(Config {
        ordering: Ordering::from_code(ordering),
        barrier: Barrier::from_code(barrier),
        segment_bytes: d.u64("segment bytes")?,
        superblock_every_bytes: d.u64("superblock bytes")?,
        superblock_every: Duration::from_nanos(d.u64("superblock period")?),
        checkpoint_every: d.opt_u64("checkpoint period")?.map(Duration::from_nanos),
        dirty_bytes_max: d.u64("dirty bytes")?,
        protection_period: Duration::from_nanos(d.u64("protection")?),
        background_gc: d.bool("background gc")?,
        gc_free_percent: d.u32("gc free percent")?,
        clock: crate::tbfs::Clock::wall(),
    })
}

pub(super) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
