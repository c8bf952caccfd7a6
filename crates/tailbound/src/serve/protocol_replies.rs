//! Replies and errors on the wire (the request side is in `protocol`).

use std::io;
use std::time::Duration;

use super::codec::{Dec, Enc, WireError, WireResult};
use super::lease_wire as lease;
use super::messages::{Adopted, LockHolder, PoolInfo, Reply};
use super::protocol_fields::{
    config_dec, config_enc, duration_ns, kind_code, kind_dec, stat_dec, stat_enc,
};
use crate::tbfs::{
    CheckpointInfo, DirEntry, Error, GcReport, RecoveryReport, SpaceReport, StatVfs,
};

pub(super) fn encode_reply(e: &mut Enc, r: &Reply) {
    match r {
        Reply::Hello {
            version,
            features,
            server_pid,
            session,
        } => {
            e.u8(1)
                .u16(*version)
                .u64(*features)
                .u32(*server_pid)
                .u64(*session);
        }
        Reply::Done => {
            e.u8(2);
        }
        Reply::Opened { handle, ino } => {
            e.u8(3).u64(*handle).u64(*ino);
        }
        Reply::OpenedStat { handle, ino, stat } => {
            e.u8(33).u64(*handle).u64(*ino);
            lease::stat_lease_enc(e, stat);
        }
        Reply::Data(b) => {
            e.u8(4).bytes(b);
        }
        Reply::Number(n) => {
            e.u8(5).u64(*n);
        }
        Reply::Stat(s) => {
            e.u8(6);
            stat_enc(e, s);
        }
        Reply::Entries { entries, more } => {
            e.u8(7).u32(entries.len() as u32);
            for en in entries {
                e.str(&en.name).u64(en.ino).u8(kind_code(en.kind));
            }
            e.bool(*more);
        }
        Reply::Text(s) => {
            e.u8(8).str(s);
        }
        Reply::StatVfs(v) => {
            e.u8(9)
                .u64(v.block_size)
                .u64(v.blocks)
                .u64(v.blocks_free)
                .u64(v.files)
                .u64(v.name_max);
        }
        Reply::Space(s) => {
            e.u8(10)
                .u64(s.size)
                .u64(s.live)
                .u64(s.pinned_by_snapshots)
                .u64(s.reclaimable)
                .u64(s.free)
                .u64(s.available);
        }
        Reply::Checkpoints(list) => {
            e.u8(11).u32(list.len() as u32);
            for c in list {
                e.u64(c.number)
                    .i64(c.time_ns)
                    .bool(c.snapshot)
                    .opt_str(c.name.as_deref())
                    .u64(c.pinned_bytes);
            }
        }
        Reply::Gc(g) => {
            e.u8(12)
                .u64(g.segments_cleaned)
                .u64(g.blocks_copied)
                .u64(g.bytes_freed)
                .f64(g.free_fraction_after);
        }
        Reply::Lock(h) => {
            e.u8(13);
            match h {
                None => {
                    e.u8(0);
                }
                Some(h) => {
                    e.u8(1).i32(h.pid).bool(h.write).u64(h.start).u64(h.end);
                }
            }
        }
        Reply::Info(info) => {
            e.u8(14).u64(info.device_bytes).bytes(&info.superblocks);
            config_enc(e, &info.config);
            let r = &info.recovery;
            e.u8(r.superblock)
                .u64(r.superblock_checkpoint)
                .u64(r.checkpoint)
                .u64(r.logs_rolled_forward)
                .u64(r.bytes_rolled_forward)
                .u64(r.logs_skipped)
                .u64(r.run_parts_dropped)
                .str(&r.stop_reason)
                .u64(r.orphans_reclaimed)
                .u64(r.checkpoints_retained)
                .u64(duration_ns(r.elapsed));
        }
        Reply::Held(items) => {
            e.u8(15).u32(items.len() as u32);
            for a in items {
                e.u64(a.handle).u64(a.ino).str(&a.note);
            }
        }
        Reply::LeaseTable(t) => {
            e.u8(30);
            lease::table_enc(e, t);
        }
        Reply::LeasedStat(s) => {
            e.u8(31);
            lease::stat_lease_enc(e, s);
        }
        Reply::LeasedData { data, lease: l } => {
            e.u8(32);
            lease::data_enc(e, data, l.as_ref());
        }
    }
}

/// A successful reply's kind and fields. With `data_at` given, a leased read's data is left out
/// and its place in the body put there ([`lease::data_dec`]).
pub(super) fn decode_reply(
    d: &mut Dec<'_>,
    data_at: Option<&mut Option<(usize, usize)>>,
) -> WireResult<Reply> {
    Ok(match d.u8("reply")? {
        1 => Reply::Hello {
            version: d.u16("version")?,
            features: d.u64("features")?,
            server_pid: d.u32("server pid")?,
            session: d.u64("session")?,
        },
        2 => Reply::Done,
        3 => Reply::Opened {
            handle: d.u64("handle")?,
            ino: d.u64("ino")?,
        },
        33 => Reply::OpenedStat {
            handle: d.u64("handle")?,
            ino: d.u64("ino")?,
            stat: lease::stat_lease_dec(d)?,
        },
        4 => Reply::Data(d.bytes("data")?.to_vec()),
        5 => Reply::Number(d.u64("number")?),
        6 => Reply::Stat(stat_dec(d)?),
        7 => {
            // Each entry is at least a length, an inode and a kind.
            let n = d.count("entries", 13)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(DirEntry {
                    name: d.str("name")?,
                    ino: d.u64("ino")?,
                    kind: kind_dec(d)?,
                });
            }
            Reply::Entries {
                entries,
                more: d.bool("more")?,
            }
        }
        8 => Reply::Text(d.str("text")?),
        9 => Reply::StatVfs(StatVfs {
            block_size: d.u64("block size")?,
            blocks: d.u64("blocks")?,
            blocks_free: d.u64("free")?,
            files: d.u64("files")?,
            name_max: d.u64("name max")?,
        }),
        10 => Reply::Space(SpaceReport {
            size: d.u64("size")?,
            live: d.u64("live")?,
            pinned_by_snapshots: d.u64("pinned")?,
            reclaimable: d.u64("reclaimable")?,
            free: d.u64("free")?,
            available: d.u64("available")?,
        }),
        11 => {
            let n = d.count("checkpoints", 26)?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                list.push(CheckpointInfo {
                    number: d.u64("number")?,
                    time_ns: d.i64("time")?,
                    snapshot: d.bool("snapshot")?,
                    name: d.opt_str("name")?,
                    pinned_bytes: d.u64("pinned")?,
                });
            }
            Reply::Checkpoints(list)
        }
        12 => Reply::Gc(GcReport {
            segments_cleaned: d.u64("segments")?,
            blocks_copied: d.u64("blocks")?,
            bytes_freed: d.u64("bytes")?,
            free_fraction_after: d.f64("free fraction")?,
        }),
        13 => Reply::Lock(if d.bool("held")? {
            Some(LockHolder {
                pid: d.i32("pid")?,
                write: d.bool("write")?,
                start: d.u64("start")?,
                end: d.u64("end")?,
            })
        } else {
            None
        }),
        14 => {
            let device_bytes = d.u64("device bytes")?;
            let superblocks = d.bytes("superblocks")?.to_vec();
            let config = config_dec(d)?;
            let recovery = RecoveryReport {
                superblock: d.u8("superblock copy")?,
                superblock_checkpoint: d.u64("superblock checkpoint")?,
                checkpoint: d.u64("checkpoint")?,
                logs_rolled_forward: d.u64("logs")?,
                bytes_rolled_forward: d.u64("bytes")?,
                logs_skipped: d.u64("skipped")?,
                run_parts_dropped: d.u64("dropped")?,
                stop_reason: d.str("stop reason")?,
                orphans_reclaimed: d.u64("orphans")?,
                checkpoints_retained: d.u64("retained")?,
                elapsed: Duration::from_nanos(d.u64("elapsed")?),
            };
            Reply::Info(Box::new(PoolInfo {
                device_bytes,
                superblocks,
                config,
                recovery,
            }))
        }
        15 => {
            let n = d.count("adopted descriptions", 20)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(Adopted {
                    handle: d.u64("handle")?,
                    ino: d.u64("ino")?,
                    note: d.str("note")?,
                });
            }
            Reply::Held(items)
        }
        30 => Reply::LeaseTable(lease::table_dec(d)?),
        31 => Reply::LeasedStat(lease::stat_lease_dec(d)?),
        32 => {
            let (data, l) = lease::data_dec(d, data_at)?;
            Reply::LeasedData { data, lease: l }
        }
        v => return Err(WireError(format!("reply kind {v}"))),
    })
}

/// An error as it travels: which [`Error`] it is, its errno and its message (without the
/// wording the variant adds, which the client's copy adds again).
pub(super) fn error_parts(e: &Error) -> (u8, i32, String) {
    let errno = e.errno();
    let (kind, message) = match e {
        Error::NotFound(m) => (1, m.clone()),
        Error::Exists(m) => (2, m.clone()),
        Error::NotDir(m) => (3, m.clone()),
        Error::IsDir(m) => (4, m.clone()),
        Error::NotEmpty(m) => (5, m.clone()),
        Error::NameTooLong(m) => (6, m.clone()),
        Error::Loop(m) => (7, m.clone()),
        Error::NotPermitted(m) => (8, m.clone()),
        Error::Invalid(m) => (9, m.clone()),
        Error::BadHandle(m) => (10, m.clone()),
        Error::ReadOnly(m) => (11, m.clone()),
        Error::NoSpace(m) => (12, m.clone()),
        Error::Corrupt(m) => (13, m.clone()),
        Error::Poisoned(m) => (14, m.clone()),
        Error::Io { what, .. } => (15, what.clone()),
    };
    (kind, errno, message)
}

/// The client's copy of an error the server sent. An unknown kind (a newer server) keeps its
/// errno and message as an I/O error.
pub(super) fn error_from_parts(kind: u8, errno: i32, m: String) -> Error {
    match kind {
        1 => Error::NotFound(m),
        2 => Error::Exists(m),
        3 => Error::NotDir(m),
        4 => Error::IsDir(m),
        5 => Error::NotEmpty(m),
        6 => Error::NameTooLong(m),
        7 => Error::Loop(m),
        8 => Error::NotPermitted(m),
        9 => Error::Invalid(m),
        10 => Error::BadHandle(m),
        11 => Error::ReadOnly(m),
        12 => Error::NoSpace(m),
        13 => Error::Corrupt(m),
        14 => Error::Poisoned(m),
        _ => Error::Io {
            what: m,
            source: io::Error::from_raw_os_error(errno),
        },
    }
}
