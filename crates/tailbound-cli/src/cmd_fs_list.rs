//! `tailbound fs ls`, `stat` and `df`: what a pool holds, as text or `--json`.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use tailbound::tbfs::format::BLOCK_U64;
use tailbound::tbfs::{FileKind, Stat};
use tailbound::units::Bytes;
use tailbound_bench::report::write_json;

use crate::cmd_fs_common::{in_pool, open_fs, utc, PoolArg, View};
use crate::CliResult;

#[derive(Serialize)]
struct EntryJson {
    name: String,
    ino: u64,
    kind: &'static str,
    size: u64,
    mode: u32,
    nlink: u32,
    mtime_ns: i64,
}

#[derive(Serialize)]
struct ListingJson {
    path: String,
    entries: Vec<EntryJson>,
}

fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Fifo => "fifo",
        FileKind::CharDevice => "char-device",
        FileKind::BlockDevice => "block-device",
        FileKind::Socket => "socket",
    }
}

fn mode_string(st: &Stat) -> String {
    let mut s = String::from(match st.kind {
        FileKind::Dir => "d",
        FileKind::Symlink => "l",
        FileKind::File => "-",
        FileKind::Fifo => "p",
        FileKind::CharDevice => "c",
        FileKind::BlockDevice => "b",
        FileKind::Socket => "s",
    });
    for shift in [6u32, 3, 0] {
        let bits = (st.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub(crate) fn ls(
    pool: &PoolArg,
    path: &str,
    long: bool,
    at: Option<u64>,
    json: Option<&Path>,
) -> CliResult {
    let fs = View::open(pool, at)?;
    let st = fs.stat(path).map_err(|e| in_pool(pool, e))?;
    let entries: Vec<(String, Stat)> = if st.kind == FileKind::Dir {
        let mut out = Vec::new();
        for e in fs.readdir(path).map_err(|e| in_pool(pool, e))? {
            let child = format!("{}/{}", path.trim_end_matches('/'), e.name);
            out.push((e.name, fs.stat(&child).map_err(|e| in_pool(pool, e))?));
        }
        out
    } else {
        vec![(path.rsplit('/').next().unwrap_or(path).to_string(), st)]
    };
    let mut stdout = std::io::stdout().lock();
    let width = entries
        .iter()
        .map(|(_, s)| s.size.to_string().len())
        .max()
        .unwrap_or(1);
    for (name, s) in &entries {
        let suffix = if s.kind == FileKind::Dir { "/" } else { "" };
        if long {
            writeln!(
                stdout,
                "{} {:>3} {:>width$} {} {:>8} {name}{suffix}",
                mode_string(s),
                s.nlink,
                s.size,
                utc(s.mtime_ns),
                s.ino
            )?;
        } else {
            writeln!(stdout, "{name}{suffix}")?;
        }
    }
    if let Some(json) = json {
        let listing = ListingJson {
            path: path.to_string(),
            entries: entries
                .iter()
                .map(|(name, s)| EntryJson {
                    name: name.clone(),
                    ino: s.ino,
                    kind: kind_name(s.kind),
                    size: s.size,
                    mode: s.mode,
                    nlink: s.nlink,
                    mtime_ns: s.mtime_ns,
                })
                .collect(),
        };
        write_json(json, &listing)?;
    }
    Ok(())
}

#[derive(Serialize)]
struct StatJson {
    path: String,
    ino: u64,
    kind: &'static str,
    mode: u32,
    nlink: u32,
    size: u64,
    blocks: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

pub(crate) fn stat(pool: &PoolArg, path: &str, at: Option<u64>, json: Option<&Path>) -> CliResult {
    let fs = View::open(pool, at)?;
    let s = fs.stat(path).map_err(|e| in_pool(pool, e))?;
    println!("  path: {path}");
    println!(
        "  type: {}   mode: {:04o} ({})   inode: {}   links: {}",
        kind_name(s.kind),
        s.mode,
        mode_string(&s),
        s.ino,
        s.nlink
    );
    println!(
        "  size: {} ({})   blocks: {} of {} bytes",
        s.size,
        Bytes(s.size),
        s.blocks,
        BLOCK_U64
    );
    println!("modify: {} UTC", utc(s.mtime_ns));
    println!("change: {} UTC", utc(s.ctime_ns));
    if let Some(json) = json {
        write_json(
            json,
            &StatJson {
                path: path.to_string(),
                ino: s.ino,
                kind: kind_name(s.kind),
                mode: s.mode,
                nlink: s.nlink,
                size: s.size,
                blocks: s.blocks,
                mtime_ns: s.mtime_ns,
                ctime_ns: s.ctime_ns,
            },
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct DfJson {
    size: u64,
    live: u64,
    pinned_by_snapshots: u64,
    reclaimable: u64,
    free: u64,
    available: u64,
    inodes: u64,
}

pub(crate) fn df(pool: &PoolArg, json: Option<&Path>) -> CliResult {
    let fs = open_fs(pool, true)?;
    let sp = fs.space().map_err(|e| in_pool(pool, e))?;
    let inodes = fs.statvfs().map_err(|e| in_pool(pool, e))?.files;
    let pct = |v: u64| v as f64 * 100.0 / sp.size.max(1) as f64;
    println!(
        "{:>12} {:>16} {:>22} {:>16} {:>16} {:>16} {:>8}",
        "size", "live", "pinned by snapshots", "reclaimable", "free", "available", "inodes"
    );
    println!(
        "{:>12} {:>16} {:>22} {:>16} {:>16} {:>16} {:>8}",
        Bytes(sp.size).to_string(),
        format!("{} {:.0}%", Bytes(sp.live), pct(sp.live)),
        format!(
            "{} {:.0}%",
            Bytes(sp.pinned_by_snapshots),
            pct(sp.pinned_by_snapshots)
        ),
        format!("{} {:.0}%", Bytes(sp.reclaimable), pct(sp.reclaimable)),
        format!("{} {:.0}%", Bytes(sp.free), pct(sp.free)),
        format!("{} {:.0}%", Bytes(sp.available), pct(sp.available)),
        inodes
    );
    if let Some(json) = json {
        write_json(
            json,
            &DfJson {
                size: sp.size,
                live: sp.live,
                pinned_by_snapshots: sp.pinned_by_snapshots,
                reclaimable: sp.reclaimable,
                free: sp.free,
                available: sp.available,
                inodes,
            },
        )?;
    }
    Ok(())
}
