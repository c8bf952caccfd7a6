//! Repairing a damaged pool: in place through the engine, or rebuilt from the newest
//! checkpoint that loads.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::analyse::*;
use super::checker::*;
use super::index::*;
use super::report::*;
use crate::dev::Device;
use crate::tbfs::format::{self, *};
use crate::tbfs::limits::FSCK_READ_BYTES;
use crate::tbfs::{Config, Error, Fs, OpenFlags, OpenOptions, RecoveryMode, Result};

/// Checks the pool and, if it is damaged, repairs it (see the module documentation), then checks
/// it again. Fails with `Corrupt` when nothing can be salvaged.
pub fn repair(dev: Arc<dyn Device>) -> Result<RepairReport> {
    let before = analyse(&*dev, &|_, _| {})?;
    let report_before = before.report.clone();
    match before.report.verdict {
        Verdict::Clean => {
            return Ok(RepairReport {
                method: RepairMethod::None,
                actions: Vec::new(),
                lost: Vec::new(),
                before: report_before.clone(),
                after: report_before,
            })
        }
        Verdict::Unrecoverable => {
            return Err(Error::Corrupt(format!(
                "{} device: nothing to salvage ({})",
                dev.kind(),
                before
                    .report
                    .damage()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            )))
        }
        Verdict::Damaged => {}
    }
    let mut actions = Vec::new();
    let mut lost = Vec::new();
    let mut method = RepairMethod::InPlace;
    if let Err(e) = repair_in_place(&dev, &before, &mut actions, &mut lost) {
        actions.push(format!(
            "the engine cannot open the pool ({e}): rebuilding from what can be salvaged"
        ));
        method = RepairMethod::Rebuilt;
        rebuild(&dev, &before, &mut actions, &mut lost)?;
    } else {
        let again = analyse(&*dev, &|_, _| {})?;
        if again.report.verdict != Verdict::Clean {
            actions.push(format!(
                "after the in-place repair {} damage findings remain ({}): rebuilding from what can be salvaged",
                again.report.damage().count(),
                again.report.damage().next().map(|f| f.to_string()).unwrap_or_default()
            ));
            method = RepairMethod::Rebuilt;
            rebuild(&dev, &again, &mut actions, &mut lost)?;
        }
    }
    let after = check(&*dev)?;
    Ok(RepairReport {
        method,
        actions,
        lost,
        before: report_before,
        after,
    })
}

pub(super) fn repair_in_place(
    dev: &Arc<dyn Device>,
    a: &Analysis,
    actions: &mut Vec<String>,
    lost: &mut Vec<String>,
) -> Result<()> {
    let options = OpenOptions {
        recovery: RecoveryMode::TolerateTail,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev.clone(), &options)?;
    let r = fs.recovery_report();
    actions.push(format!(
        "opened with tolerate-tail recovery: checkpoint {}, {} logs rolled forward, {}",
        r.checkpoint, r.logs_rolled_forward, r.stop_reason
    ));
    if r.orphans_reclaimed > 0 {
        actions.push(format!("freed {} orphaned inodes", r.orphans_reclaimed));
    }
    if a.report
        .findings
        .iter()
        .any(|f| f.message.contains("link count"))
    {
        actions.push("recovery set link counts from the directory tree".into());
    }
    if a.report.findings.iter().any(|f| {
        f.message.contains("valid logs after it") || f.message.contains("cannot be replayed")
    }) {
        lost.push(format!(
            "logs after the damage in the log chain ({})",
            r.stop_reason
        ));
    }
    // File blocks whose logs fail their CRC, unless a later data-only log replaced them.
    if let Some(v) = a.views.iter().rev().find(|v| v.number == r.checkpoint) {
        let mut replaced: BTreeSet<(u64, u64)> = BTreeSet::new();
        for (i, dropped) in &a.tail {
            for d in &a.index.logs[*i].summary.descriptors {
                if d.kind == DescKind::Data && !dropped.contains(&d.ino) {
                    for k in 0..d.blocks as u64 {
                        replaced.insert((d.ino, d.offset + k));
                    }
                }
            }
        }
        for (&ino, iv) in &v.inodes {
            if iv.is_dir() || (iv.bad_blocks.is_empty() && iv.suspect.is_empty()) {
                continue;
            }
            let Some(path) = v.paths.get(&ino) else {
                continue;
            };
            let f = match fs.open_file(
                path,
                OpenFlags {
                    read: true,
                    write: true,
                    ..OpenFlags::default()
                },
            ) {
                Ok(f) => f,
                Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            if f.ino() != ino {
                continue;
            }
            let size = f.stat()?.size;
            let (mut zeroed, mut kept) = (Vec::new(), Vec::new());
            let mut buf = vec![0u8; BLOCK];
            for &b in iv.bad_blocks.union(&iv.suspect) {
                if replaced.contains(&(ino, b)) || b * BLOCK_U64 >= size {
                    continue;
                }
                let n = (size - b * BLOCK_U64).min(BLOCK_U64) as usize;
                if iv.bad_blocks.contains(&b) {
                    buf[..n].fill(0);
                    zeroed.push(b);
                } else {
                    // Rewritten as read, so the bytes move into a log that verifies.
                    f.pread(&mut buf[..n], b * BLOCK_U64)?;
                    kept.push(b);
                }
                f.pwrite(&buf[..n], b * BLOCK_U64)?;
            }
            if !zeroed.is_empty() {
                actions.push(format!(
                    "{path}: overwrote {} unreadable blocks with zeros",
                    zeroed.len()
                ));
                lost.push(format!(
                    "{path}: contents of blocks {} (now zeros)",
                    ranges(&zeroed)
                ));
            }
            if !kept.is_empty() {
                actions.push(format!(
                    "{path}: rewrote {} blocks from logs that fail their CRC, as read",
                    kept.len()
                ));
                lost.push(format!(
                    "{path}: blocks {} may hold damaged bytes (their log failed its CRC)",
                    ranges(&kept)
                ));
            }
        }
    }
    fs.sync()?;
    // Older retained checkpoints that use damaged blocks: plain ones are released (by a
    // protection period of zero for one checkpoint), snapshots turned into plain checkpoints.
    let newest = fs.checkpoints()?.last().map(|c| c.number);
    let damaged: BTreeSet<u64> = a
        .report
        .damage()
        .filter_map(|f| f.location.checkpoint)
        .filter(|&c| Some(c) != newest)
        .collect();
    if !damaged.is_empty() {
        let kept = fs.checkpoints()?;
        for c in kept
            .iter()
            .filter(|c| c.snapshot && damaged.contains(&c.number))
        {
            fs.set_snapshot(c.number, false)?;
            lost.push(format!(
                "snapshot {}{}: it used damaged blocks",
                c.number,
                c.name
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ));
        }
        let plain = kept
            .iter()
            .filter(|c| !c.snapshot && Some(c.number) != newest)
            .count();
        if kept.iter().any(|c| damaged.contains(&c.number)) && plain > 0 {
            let period = fs.protection_period();
            fs.set_protection_period(std::time::Duration::ZERO);
            // A change, so the sync writes a checkpoint, which releases them.
            let marker = "/.tbfs-fsck-release";
            drop(fs.open_file(marker, OpenFlags::create())?);
            fs.unlink(marker)?;
            fs.sync()?;
            fs.set_protection_period(period);
            lost.push(format!(
                "{plain} plain checkpoints kept for the protection period (some used damaged blocks)"
            ));
        }
        fs.sync()?;
    }
    actions.push("wrote a fresh checkpoint and both superblock copies".into());
    fs.close()
}

/// `1-3, 7, 9-10`.
pub(super) fn ranges(v: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Builds a new pool from the newest usable checkpoint and writes it over the device.
pub(super) fn rebuild(
    dev: &Arc<dyn Device>,
    a: &Analysis,
    actions: &mut Vec<String>,
    lost: &mut Vec<String>,
) -> Result<()> {
    let Some(src) = a.views.iter().rev().find(|v| v.usable) else {
        return Err(Error::Corrupt(format!(
            "{} device: no checkpoint with a usable root directory",
            dev.kind()
        )));
    };
    let newest = a.newest.unwrap_or(src.number);
    if newest > src.number {
        lost.push(format!(
            "changes after checkpoint {} (checkpoint {newest} is damaged beyond use)",
            src.number
        ));
    }
    actions.push(format!(
        "salvaging checkpoint {} (root at block {})",
        src.number, src.root_block
    ));
    let rd = Reader {
        dev: &**dev,
        blocks: dev.len() / BLOCK_U64,
    };
    let mut inodes = src.inodes.clone();
    let mut suspect_note: Vec<String> = Vec::new();
    // Roll forward the data-only logs after the newest checkpoint, as recovery does.
    if newest == src.number {
        let file_blocks_max = crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64;
        for (i, dropped) in &a.tail {
            let log = &a.index.logs[*i];
            let mut addr = log.start + 1;
            for d in &log.summary.descriptors {
                match d.kind {
                    DescKind::Data => {
                        if let Some(v) = inodes
                            .get_mut(&d.ino)
                            .filter(|v| !v.is_dir() && !dropped.contains(&d.ino))
                        {
                            if d.offset + d.blocks as u64 <= file_blocks_max {
                                for k in 0..d.blocks as u64 {
                                    let fb = (d.offset + k) as usize;
                                    if v.blocks.len() <= fb {
                                        v.blocks.resize(fb + 1, 0);
                                    }
                                    v.blocks[fb] = addr + k;
                                    v.bad_blocks.remove(&(fb as u64));
                                    v.suspect.remove(&(fb as u64));
                                }
                            }
                        }
                        addr += d.blocks as u64;
                    }
                    DescKind::Attr => {
                        if let Some(v) = inodes.get_mut(&d.ino).filter(|v| !v.is_dir()) {
                            if d.offset <= crate::tbfs::limits::FILE_BYTES_MAX {
                                v.rec.size = d.offset;
                                v.blocks.truncate(d.offset.div_ceil(BLOCK_U64) as usize);
                            }
                        }
                    }
                    _ => addr += d.blocks as u64,
                }
            }
        }
    }

    // The new pool, laid out in memory, with the old configuration.
    let config = match &a.sb {
        Some(sb) => Config {
            ordering: crate::tbfs::Ordering::from_code(sb.ordering),
            barrier: crate::tbfs::Barrier::from_code(sb.barrier),
            segment_bytes: sb.segment_blocks * BLOCK_U64,
            superblock_every_bytes: sb.superblock_every_bytes,
            superblock_every: std::time::Duration::from_millis(sb.superblock_every_ms),
            checkpoint_every: None,
            dirty_bytes_max: sb.dirty_bytes_max,
            protection_period: std::time::Duration::from_millis(sb.protection_ms),
            background_gc: sb.background_gc,
            gc_free_percent: sb.gc_free_percent as u32,
            clock: crate::tbfs::Clock::wall(),
        },
        None => Config {
            segment_bytes: default_segment_bytes(dev.len()),
            checkpoint_every: None,
            ..Config::default()
        },
    };
    let scratch: Arc<dyn Device> = Arc::new(
        crate::dev::memory::MemoryPool::anonymous(dev.len()).map_err(|e| {
            Error::io(
                format!("{} bytes of memory for the rebuilt pool", dev.len()),
                e,
            )
        })?,
    );
    let fs = Fs::format(scratch.clone(), &config)?;
    // Directories first (breadth first from the root), then files.
    let mut placed: HashMap<u64, String> = HashMap::from([(ROOT_INO, "/".to_string())]);
    let mut queue = std::collections::VecDeque::from([ROOT_INO]);
    let join = |base: &str, name: &str| {
        if base == "/" {
            format!("/{name}")
        } else {
            format!("{base}/{name}")
        }
    };
    let mut files: Vec<(u64, String)> = Vec::new();
    while let Some(d) = queue.pop_front() {
        let base = placed[&d].clone();
        for e in &inodes[&d].entries {
            let Some(child) = inodes.get(&e.ino) else {
                continue;
            };
            if e.ino == ROOT_INO || placed.contains_key(&e.ino) || child.is_dir() != e.is_dir {
                continue;
            }
            let p = join(&base, &e.name);
            if child.is_dir() {
                fs.mkdir(&p, child.rec.mode & 0o7777)?;
                queue.push_back(e.ino);
            } else {
                files.push((e.ino, p.clone()));
            }
            placed.insert(e.ino, p);
        }
    }
    // Unreachable inodes (not orphans) go under /lost+found.
    let mut attached = Vec::new();
    for (&ino, v) in &inodes {
        if placed.contains_key(&ino) || (!v.is_dir() && v.rec.nlink == 0) {
            continue;
        }
        if attached.is_empty() && fs.stat(&format!("/{LOST_FOUND}")).is_err() {
            fs.mkdir(&format!("/{LOST_FOUND}"), 0o700)?;
        }
        let p = format!("/{LOST_FOUND}/#{ino}");
        if v.is_dir() {
            fs.mkdir(&p, v.rec.mode & 0o7777)?;
            // Its own subtree follows it.
            placed.insert(ino, p.clone());
            let mut q = std::collections::VecDeque::from([ino]);
            while let Some(d) = q.pop_front() {
                let base = placed[&d].clone();
                for e in &inodes[&d].entries {
                    let Some(child) = inodes.get(&e.ino) else {
                        continue;
                    };
                    if e.ino == ROOT_INO
                        || placed.contains_key(&e.ino)
                        || child.is_dir() != e.is_dir
                    {
                        continue;
                    }
                    let cp = join(&base, &e.name);
                    if child.is_dir() {
                        fs.mkdir(&cp, child.rec.mode & 0o7777)?;
                        q.push_back(e.ino);
                    } else {
                        files.push((e.ino, cp.clone()));
                    }
                    placed.insert(e.ino, cp);
                }
            }
        } else {
            files.push((ino, p.clone()));
            placed.insert(ino, p.clone());
        }
        attached.push(p);
    }
    if !attached.is_empty() {
        actions.push(format!(
            "reattached {} unreachable inodes under /{LOST_FOUND}: {}",
            attached.len(),
            attached.join(", ")
        ));
    }
    let dropped: Vec<String> = inodes
        .iter()
        .filter(|(ino, v)| !placed.contains_key(ino) && (v.is_dir() || v.rec.nlink != 0))
        .map(|(ino, _)| format!("inode {ino}"))
        .collect();
    if !dropped.is_empty() {
        lost.push(format!("inodes not placed: {}", dropped.join(", ")));
    }
    // Lost inodes: in the old tree's names but not loadable.
    for (&dir, v) in &src.inodes {
        for e in &v.entries {
            if !src.inodes.contains_key(&e.ino) {
                let base = src
                    .paths
                    .get(&dir)
                    .cloned()
                    .unwrap_or_else(|| format!("directory inode {dir}"));
                lost.push(format!(
                    "{} (inode {} could not be read)",
                    join(&base, &e.name),
                    e.ino
                ));
            }
        }
    }
    for (ino, path) in files {
        let v = &inodes[&ino];
        let f = fs.open_file(
            &path,
            OpenFlags {
                mode: v.rec.mode & 0o7777,
                ..OpenFlags::create()
            },
        )?;
        let mut zeroed = Vec::new();
        let mut buf = vec![0u8; BLOCK];
        for (i, &addr) in v.blocks.iter().enumerate() {
            let off = i as u64 * BLOCK_U64;
            if addr == 0 || off >= v.rec.size {
                continue;
            }
            let n = (v.rec.size - off).min(BLOCK_U64) as usize;
            let ok = addr != LOST && !v.bad_blocks.contains(&(i as u64));
            match ok.then(|| rd.block(addr)) {
                Some(Ok(b)) => buf.copy_from_slice(&b[..]),
                _ => {
                    buf.fill(0);
                    zeroed.push(i as u64);
                }
            }
            f.pwrite(&buf[..n], off)?;
        }
        f.set_len(v.rec.size)?;
        if !zeroed.is_empty() {
            lost.push(format!(
                "{path}: contents of blocks {} (now zeros)",
                ranges(&zeroed)
            ));
        }
        let kept: Vec<u64> = v
            .suspect
            .iter()
            .copied()
            .filter(|&b| b * BLOCK_U64 < v.rec.size)
            .collect();
        if !kept.is_empty() {
            suspect_note.push(format!(
                "{path}: blocks {} may hold damaged bytes (their log failed its CRC)",
                ranges(&kept)
            ));
        }
    }
    lost.extend(suspect_note);
    fs.close()?;
    lost.push("checkpoint history before the rebuild, and modification times".into());
    // Replace the device's contents: segments first, the superblocks last.
    let len = dev.len();
    let mut buf = vec![0u8; FSCK_READ_BYTES as usize];
    let mut off = format::SUPERBLOCKS * BLOCK_U64;
    while off < len {
        let n = (len - off).min(FSCK_READ_BYTES) as usize;
        scratch
            .read_at(off, &mut buf[..n])
            .map_err(|e| Error::io("reading the rebuilt pool", e))?;
        dev.write_at(off, &buf[..n]).map_err(|e| {
            Error::io(
                format!("{} device: writing the rebuilt pool at {off}", dev.kind()),
                e,
            )
        })?;
        off += n as u64;
    }
    dev.flush()
        .map_err(|e| Error::io(format!("{} device: flush", dev.kind()), e))?;
    let mut sbs = vec![0u8; (format::SUPERBLOCKS * BLOCK_U64) as usize];
    scratch
        .read_at(0, &mut sbs)
        .map_err(|e| Error::io("reading the rebuilt pool", e))?;
    dev.write_and_flush(0, &sbs)
        .map_err(|e| Error::io(format!("{} device: writing the superblocks", dev.kind()), e))?;
    actions.push(format!("wrote a new pool of {len} bytes over the device"));
    Ok(())
}

/// The segment size `mkfs` picks for a pool of `len` bytes: 8 MiB, or less so that a pool under
/// 2 GiB still has at least 256 segments (never below 64 KiB). What the engine keeps free is
/// counted in segments (two open ones, a reserve of two), so with fewer segments it takes a
/// larger share of the pool, and a pool with few segments could not fill.
pub fn default_segment_bytes(len: u64) -> u64 {
    let mut seg: u64 = 8 << 20;
    while seg > 64 << 10 && len / seg < 256 {
        seg /= 2;
    }
    seg
}
