//! `tailbound fs checkpoints`, `snapshot`, `restore` and `gc`: the pool's retained checkpoints
//! and snapshots, and what they keep.

use std::path::Path;

use serde::Serialize;
use tailbound::tbfs::{self, FileKind, OpenFlags, Stat};
use tailbound::units::Bytes;
use tailbound_bench::report::write_json;

use crate::cmd_fs_common::{close, in_pool, open_fs, utc, PoolArg, COPY_CHUNK};
use crate::cmd_fs_pool::{Pool, PoolView};
use crate::CliResult;

/// `20%` or `0.2`.
pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
    let (v, scale) = match s.strip_suffix('%') {
        Some(p) => (p, 100.0),
        None => (s, 1.0),
    };
    let f = v
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{s:?}: a percentage (20%) or a fraction (0.2)"))?
        / scale;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("{s:?}: between 0% and 100%"))
    }
}

#[derive(Serialize)]
struct CheckpointJson {
    number: u64,
    time: String,
    snapshot: bool,
    pinned_bytes: u64,
}

#[derive(Serialize)]
struct CheckpointsJson {
    checkpoints: Vec<CheckpointJson>,
}

pub(crate) fn checkpoints(pool: &PoolArg, json: Option<&Path>) -> CliResult {
    let fs = open_fs(pool, true)?;
    let list = fs.checkpoints().map_err(|e| in_pool(pool, e))?;
    println!(
        "{:>10}  {:<23}  {:<8}  {:>10}  name",
        "number", "time (UTC)", "kind", "pinned"
    );
    for c in &list {
        println!(
            "{:>10}  {:<23}  {:<8}  {:>10}  {}",
            c.number,
            utc(c.time_ns),
            if c.snapshot { "snapshot" } else { "plain" },
            Bytes(c.pinned_bytes).to_string(),
            c.name.as_deref().unwrap_or("")
        );
    }
    if let Some(json) = json {
        write_json(
            json,
            &CheckpointsJson {
                checkpoints: list
                    .iter()
                    .map(|c| CheckpointJson {
                        number: c.number,
                        time: rfc3339(c.time_ns),
                        snapshot: c.snapshot,
                        pinned_bytes: c.pinned_bytes,
                    })
                    .collect(),
            },
        )?;
    }
    Ok(())
}

pub(crate) fn snapshot(
    pool: &PoolArg,
    name: Option<&str>,
    keep: Option<u64>,
    drop: Option<u64>,
) -> CliResult {
    let fs = open_fs(pool, false)?;
    match (keep, drop) {
        (Some(n), _) => {
            fs.set_snapshot(n, true).map_err(|e| in_pool(pool, e))?;
            println!("checkpoint {n} is now a snapshot");
        }
        (None, Some(n)) => {
            fs.set_snapshot(n, false).map_err(|e| in_pool(pool, e))?;
            println!(
                "checkpoint {n} is a plain checkpoint again; it is released once older than the protection period ({:?})",
                fs.protection_period().map_err(|e| in_pool(pool, e))?
            );
        }
        (None, None) => {
            let n = fs.snapshot(name).map_err(|e| in_pool(pool, e))?;
            println!(
                "snapshot {n}{}",
                name.map(|n| format!(" ({n})")).unwrap_or_default()
            );
        }
    }
    close(fs, pool)
}

pub(crate) fn restore(pool: &PoolArg, at: u64, path: &str, to: &str) -> CliResult {
    let fs = open_fs(pool, false)?;
    let view = fs.at(at).map_err(|e| in_pool(pool, e))?;
    let st = view.stat(path).map_err(|e| in_pool(pool, e))?;
    let mut counts = (0u64, 0u64, 0u64); // directories, files, bytes
    restore_one(&fs, &view, path, to, st, &mut counts).map_err(|e| in_pool(pool, e))?;
    drop(view);
    close(fs, pool)?;
    println!(
        "restored {path} from checkpoint {at} to {to}: {} directories, {} files, {}",
        counts.0,
        counts.1,
        Bytes(counts.2)
    );
    Ok(())
}

fn restore_one(
    fs: &Pool,
    view: &PoolView,
    from: &str,
    to: &str,
    st: Stat,
    counts: &mut (u64, u64, u64),
) -> tbfs::Result<()> {
    let join = |d: &str, n: &str| format!("{}/{n}", d.trim_end_matches('/'));
    if st.kind == FileKind::Dir {
        match fs.stat(to) {
            Ok(s) if s.kind == FileKind::Dir => {}
            Ok(_) => return Err(tbfs::Error::NotDir(to.to_string())),
            Err(tbfs::Error::NotFound(_)) => fs.mkdir(to, st.mode)?,
            Err(e) => return Err(e),
        }
        counts.0 += 1;
        for e in view.readdir(from)? {
            let child = join(from, &e.name);
            let cst = view.stat(&child)?;
            restore_one(fs, view, &child, &join(to, &e.name), cst, counts)?;
        }
        return Ok(());
    }
    // Written beside the target, then renamed over it: the target is old or new, never half.
    let (dir, name) = to.rsplit_once('/').unwrap_or(("", to));
    let temp = format!("{dir}/.{name}.restoring");
    let file = fs.open_file(
        &temp,
        OpenFlags {
            truncate: true,
            mode: st.mode,
            ..OpenFlags::create()
        },
    )?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut at = 0u64;
    while at < st.size {
        let n = view.pread(from, &mut buf, at)?;
        if n == 0 {
            break;
        }
        file.pwrite(&buf[..n], at)?;
        at += n as u64;
    }
    file.set_len(st.size)?;
    drop(file);
    fs.rename(&temp, to)?;
    counts.1 += 1;
    counts.2 += st.size;
    Ok(())
}

pub(crate) fn gc(pool: &PoolArg, target_free: f64) -> CliResult {
    let fs = open_fs(pool, false)?;
    let before = fs.space().map_err(|e| in_pool(pool, e))?;
    let r = fs.gc(target_free).map_err(|e| in_pool(pool, e))?;
    let after = fs.space().map_err(|e| in_pool(pool, e))?;
    close(fs, pool)?;
    println!(
        "cleaned {} segments, copied {} blocks, freed {}; free space {} -> {} ({:.1}% of the pool, target {:.1}%)",
        r.segments_cleaned,
        r.blocks_copied,
        Bytes(r.bytes_freed),
        Bytes(before.free),
        Bytes(after.free),
        r.free_fraction_after * 100.0,
        target_free * 100.0
    );
    if r.free_fraction_after < target_free {
        println!(
            "the target is out of reach: live data holds {}, snapshots pin {}, and {} is kept for the protection period or not worth cleaning",
            Bytes(after.live),
            Bytes(after.pinned_by_snapshots),
            Bytes(after.reclaimable)
        );
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339(ns: i64) -> String {
    let t = utc(ns).replacen(' ', "T", 1);
    format!("{t}.{:03}Z", ns.rem_euclid(1_000_000_000) / 1_000_000)
}
