//! Making and opening pools. Opening is recovery: the newest valid superblock, the checkpoint it
//! names, a scan of the log chain after it (sequence, previous-summary CRC, summary and payload
//! CRCs), the newest complete checkpoint in that chain, roll-forward of the data-only logs after
//! it, and a fresh checkpoint and superblock. Every byte read is checked before it is trusted.

pub(crate) mod scan;
pub(crate) mod tree;

use crate::tbfs::inode_table::InodeTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::tbfs::dense::DenseSet;
use crate::tbfs::format::{self, *};
use crate::tbfs::inode::*;
use crate::tbfs::log::Writer;
use crate::tbfs::map::BlockMap;
use crate::tbfs::retention::*;
use crate::tbfs::space::segments::*;
use crate::tbfs::{
    Barrier, Config, DeviceRef, Error, FileKind, OpenOptions, Ordering, RecoveryMode,
    RecoveryReport, Result,
};
use scan::*;
use tree::*;

pub(in crate::tbfs) fn pool_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut id).is_ok() {
            return id;
        }
    }
    let t = crate::tbfs::clock::wall_ns() as u128 ^ ((std::process::id() as u128) << 64);
    id.copy_from_slice(&t.to_le_bytes());
    id
}

/// Step 1: the newest valid superblock, and the configuration it records (with what `options`
/// overrides).
pub(in crate::tbfs) fn newest_superblock(
    dev: &DeviceRef,
    options: &OpenOptions,
    report: &mut RecoveryReport,
) -> Result<(Superblock, Config)> {
    let dev_bytes = dev.len();
    let mut candidates = Vec::new();
    let mut problems = Vec::new();
    for copy in 0..format::SUPERBLOCKS {
        let b = read_block(dev, copy, &|| {
            format!("{} device: reading superblock {copy}", dev.kind())
        })?;
        match Superblock::decode(&b[..], dev_bytes) {
            Ok(sb) => candidates.push((copy as u8, sb)),
            Err(e) => problems.push(format!("superblock {copy}: {e}")),
        }
    }
    let Some((copy, sb)) = candidates.into_iter().max_by_key(|(_, sb)| sb.generation) else {
        return Err(Error::Corrupt(format!(
            "{} device: no valid superblock ({})",
            dev.kind(),
            problems.join("; ")
        )));
    };
    report.superblock = copy;
    report.superblock_checkpoint = sb.checkpoint;

    let mut config = Config {
        protection_period: Duration::from_millis(sb.protection_ms),
        background_gc: options.background_gc.unwrap_or(sb.background_gc),
        gc_free_percent: sb.gc_free_percent as u32,
        clock: options.clock.clone(),
        ordering: Ordering::from_code(sb.ordering),
        barrier: Barrier::from_code(sb.barrier),
        segment_bytes: sb.segment_blocks * BLOCK_U64,
        superblock_every_bytes: sb.superblock_every_bytes,
        superblock_every: Duration::from_millis(sb.superblock_every_ms),
        checkpoint_every: (sb.checkpoint_every_ms > 0)
            .then(|| Duration::from_millis(sb.checkpoint_every_ms)),
        dirty_bytes_max: sb.dirty_bytes_max,
    };
    if let Some(o) = options.ordering {
        config.ordering = o;
    }
    if let Some(b) = options.barrier {
        config.barrier = b;
    }
    Ok((sb, config))
}

/// The log chain after the superblock's checkpoint, and where the next log goes: its block,
/// sequence, previous-summary CRC and the segment after the current one.
pub(in crate::tbfs) struct Chain {
    pub logs: Vec<ScannedLog>,
    /// The first log whose payload is incomplete: no checkpoint at or after it counts.
    pub first_incomplete: Option<usize>,
    pub pos: u64,
    pub seq: u64,
    pub prev: u32,
    pub segment_next: u64,
}

/// Step 2: scans the log chain after the superblock's checkpoint, up to the first log that does not
/// verify (which ends it, or fails the open in strict mode when valid logs follow).
pub(in crate::tbfs) fn scan_chain(
    dev: &DeviceRef,
    sb: &Superblock,
    options: &OpenOptions,
    report: &mut RecoveryReport,
) -> Result<Chain> {
    let seg_start = |s: u64| format::FIRST_SEGMENT_BLOCK + s * sb.segment_blocks;
    let mut logs: Vec<ScannedLog> = Vec::new();
    let mut pos = sb.next.block;
    let mut seq = sb.next.sequence;
    let mut prev = sb.next.prev_crc;
    let mut segment_next = sb.next.segment_next;
    let total_blocks = sb.segment_blocks * sb.segment_count;
    let mut scanned_blocks = 0u64;
    let mut window = Window::default();
    // Files of ahead logs skipped so far: their later logs are skipped too.
    let mut torn: BTreeSet<u64> = BTreeSet::new();
    // The first log of the chain whose payload is incomplete: no checkpoint at or after it
    // counts, since it may name blocks of that payload.
    let mut first_incomplete: Option<usize> = None;
    let stop_reason;
    loop {
        if scanned_blocks > total_blocks {
            stop_reason = "log chain longer than the pool".to_string();
            break;
        }
        let seg_end = seg_start(segment_of(pos, sb.segment_blocks) as u64) + sb.segment_blocks;
        let b = window.get(dev, pos, 1, seg_end)?;
        let (summary, crc) = match Summary::decode(b) {
            Ok(x) => x,
            Err(e) => {
                stop_reason = format!("end of log chain at block {pos}: {e}");
                break;
            }
        };
        if summary.pool_id != sb.pool_id || summary.sequence != seq || summary.prev_crc != prev {
            stop_reason = format!(
                "end of log chain at block {pos}: a log of another pool, sequence or chain"
            );
            break;
        }
        let end = pos + 1 + summary.payload_blocks as u64;
        if end > seg_end || summary.segment_next >= sb.segment_count {
            stop_reason = format!("log {seq} at block {pos} runs past its segment");
            break;
        }
        let jump = summary.jump_to();
        if jump.is_some_and(|t| {
            t < format::FIRST_SEGMENT_BLOCK || t >= format::FIRST_SEGMENT_BLOCK + total_blocks
        }) {
            stop_reason = format!("log {seq} at block {pos} jumps past the pool");
            break;
        }
        let payload = window.get(dev, pos + 1, summary.payload_blocks as u64, seg_end)?;
        let ahead = summary.flags & FLAG_AHEAD != 0 && summary.flags & FLAG_DATA_ONLY != 0;
        // A checkpoint's log written without waiting for earlier payloads (version 4): the
        // chain goes on past it whatever they are; the checkpoint counts only if they and its
        // own payload are complete (step 3).
        let checkpoint_ahead =
            summary.flags & FLAG_AHEAD != 0 && summary.flags & FLAG_DATA_ONLY == 0;
        let payload_ok = format::crc_blocks(payload) == summary.payload_crc;
        let pad = summary.flags & FLAG_PAD != 0 && summary.payload_blocks == 0;
        if !ahead && !checkpoint_ahead && !pad && !torn.is_empty() {
            // Written only once every earlier payload was: this log cannot have been
            // acknowledged, and it may name blocks of the payload that is missing.
            stop_reason = format!(
                "log {seq} at block {pos} follows an incomplete data-only log ({} skipped)",
                report.logs_skipped
            );
            break;
        }
        let skipped = (checkpoint_ahead && !payload_ok)
            || (ahead
                && (!payload_ok || summary.descriptors.iter().any(|d| torn.contains(&d.ino))));
        if skipped && checkpoint_ahead {
            // Its checkpoint does not count (step 3); later logs of the files depending on it
            // are left out of roll-forward (step 5).
            first_incomplete.get_or_insert(logs.len());
            report.logs_skipped += 1;
        } else if skipped {
            first_incomplete.get_or_insert(logs.len());
            torn.extend(summary.descriptors.iter().map(|d| d.ino));
            report.logs_skipped += 1;
        } else if !payload_ok {
            // A torn tail, or damage with valid logs after it?
            let behind = end < seg_end && {
                let next = window.get(dev, end, 1, seg_end)?;
                Summary::decode(next).is_ok_and(|(s, _)| {
                    s.sequence == seq + 1 && s.prev_crc == crc && s.pool_id == sb.pool_id
                })
            };
            if behind && options.recovery == RecoveryMode::Strict {
                return Err(Error::Corrupt(format!(
                    "log {seq} at block {pos}: payload CRC mismatch with valid logs after it (open with tolerate-tail to keep what precedes it)"
                )));
            }
            stop_reason = format!(
                "log {seq} at block {pos}: payload CRC mismatch{}",
                if behind {
                    " (valid logs after it were dropped)"
                } else {
                    " (torn tail)"
                }
            );
            break;
        }
        scanned_blocks += end - pos;
        segment_next = summary.segment_next;
        logs.push(ScannedLog {
            start: pos,
            summary,
            skipped,
        });
        seq += 1;
        prev = crc;
        pos = end;
        if let Some(t) = jump {
            // The chain goes on in the other log head (version 5).
            pos = t;
        } else if pos == seg_end {
            pos = seg_start(segment_next);
        }
    }
    report.stop_reason = stop_reason;
    Ok(Chain {
        logs,
        first_incomplete,
        pos,
        seq,
        prev,
        segment_next,
    })
}

/// The checkpoint recovery starts from: its root block, its sequence, and the index in the
/// chain of the first log after it.
pub(in crate::tbfs) struct Base {
    pub root: u64,
    pub seq: u64,
    pub index: usize,
}

/// Step 3: the newest complete checkpoint: the superblock's, or one found in the chain before
/// any incomplete payload (`first_incomplete`, the index of the first log whose payload is).
pub(in crate::tbfs) fn newest_checkpoint(
    sb: &Superblock,
    logs: &[ScannedLog],
    first_incomplete: Option<usize>,
) -> Base {
    let mut base_root = sb.checkpoint_root;
    let mut base_seq = sb.checkpoint_sequence;
    let mut base_index = 0usize;
    for (i, log) in logs.iter().enumerate() {
        let f = log.summary.flags;
        if first_incomplete.is_some_and(|t| t <= i) {
            break;
        }
        if f & FLAG_CHECKPOINT != 0 && f & FLAG_END != 0 {
            base_root = log.start + log.summary.payload_blocks as u64;
            base_seq = log.summary.sequence;
            base_index = i + 1;
        }
    }
    Base {
        root: base_root,
        seq: base_seq,
        index: base_index,
    }
}

/// What roll-forward replaced in the base checkpoint's tree.
pub(in crate::tbfs) struct RolledForward {
    /// Blocks of the base checkpoint that roll-forward replaced: pinned if it stays retained.
    pub replaced: Vec<u64>,
    /// Of those, file data a data-only log rewrote, with the log's sequence.
    pub rewritten: Vec<(u64, u64)>,
}

/// Step 5: roll forward the data-only logs after the base checkpoint (`applied`) over its tree.
pub(in crate::tbfs) fn roll_forward(
    applied: &[ScannedLog],
    first_incomplete: Option<usize>,
    cells: &HashMap<u64, Arc<InodeCell>>,
    report: &mut RecoveryReport,
) -> RolledForward {
    report.logs_rolled_forward = applied.iter().filter(|l| !l.skipped).count() as u64;
    report.bytes_rolled_forward = applied
        .iter()
        .filter(|l| !l.skipped)
        .map(|l| (1 + l.summary.payload_blocks as u64) * BLOCK_U64)
        .sum();
    let file_blocks_max = crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64;
    // Blocks of the base checkpoint that roll-forward replaced: pinned if it stays retained.
    let mut replaced: Vec<u64> = Vec::new();
    // Of those, file data a data-only log rewrote, with the log's sequence: as in normal
    // operation (`State::seg_supersede`), these need no pin while the base checkpoint is the only
    // one naming them.
    let mut rewritten: Vec<(u64, u64)> = Vec::new();
    let replayed: Vec<&ScannedLog> = applied
        .iter()
        .filter(|l| l.summary.flags & FLAG_DATA_ONLY != 0 && !l.skipped)
        .collect();
    // With the pads between them, which keep a run's sequence whole where it crosses a segment.
    let mut unfinished = unfinished_run_data(
        &applied
            .iter()
            .filter(|l| l.summary.flags & (FLAG_DATA_ONLY | FLAG_PAD) != 0 && !l.skipped)
            .map(|l| &l.summary)
            .collect::<Vec<_>>(),
    );
    report.run_parts_dropped = unfinished.len() as u64;
    // Checkpoint logs after the loaded one belong to checkpoints that do not count (or to one
    // the chain ends in, before its last log).
    let dependent = dependent_data(applied);
    if first_incomplete.is_some() {
        report.logs_skipped += applied
            .iter()
            .filter(|l| !l.skipped && l.summary.flags & (FLAG_DATA_ONLY | FLAG_PAD) == 0)
            .count() as u64;
    }
    report.run_parts_dropped += dependent.difference(&unfinished).count() as u64;
    unfinished.extend(dependent);
    for (k, log) in replayed.into_iter().enumerate() {
        let mut addr = log.start + 1;
        for d in &log.summary.descriptors {
            let cell = cells
                .get(&d.ino)
                .filter(|_| !unfinished.contains(&(k, d.ino)));
            match d.kind {
                DescKind::Data => {
                    if let Some(cell) = cell {
                        let mut st = cell.lock();
                        if st.kind() == FileKind::File
                            && d.offset + d.blocks as u64 <= file_blocks_max
                        {
                            for i in 0..d.blocks as u64 {
                                let old = st.map_mut().set(d.offset + i, addr + i);
                                if old != 0 {
                                    rewritten.push((old, log.summary.sequence));
                                }
                            }
                        }
                    }
                    addr += d.blocks as u64;
                }
                DescKind::Attr => {
                    if let Some(cell) = cell {
                        let mut st = cell.lock();
                        if st.kind() == FileKind::File
                            && d.offset <= crate::tbfs::limits::FILE_BYTES_MAX
                        {
                            // Blocks wholly past the logged size were dropped before this log.
                            replaced.extend(st.truncate(d.offset).unmapped);
                            st.set_mtime_ns(d.extra);
                        }
                    }
                }
                _ => addr += d.blocks as u64,
            }
        }
    }
    RolledForward {
        replaced,
        rewritten,
    }
}

/// What step 6 reads: the retention state, the checkpoint's tables, and the stored pinned
/// entries with their pages.
pub(in crate::tbfs) struct LoadedRetention {
    pub life: Retention,
    pub tables: [BlockMap; format::TABLES],
    pub pinned: Vec<(u64, format::PinnedEntry)>,
}

/// Step 6: the checkpoint's tables: snapshots, segment ages, pinned blocks; and the plain
/// checkpoints kept for the protection period, down the chain of roots.
pub(in crate::tbfs) fn load_retention(
    dev: &DeviceRef,
    geo: &Geometry,
    sb: &Superblock,
    config: &Config,
    root: &CheckpointRoot,
    base_root: u64,
    report: &mut RecoveryReport,
) -> Result<LoadedRetention> {
    let tables = load_tables(dev, geo, root)?;
    let mut life = Retention::new(
        segment_count_of(sb),
        sb.segment_blocks,
        config.protection_period,
        config.clock.clone(),
    );
    let mut kept: BTreeMap<u64, Retained> = BTreeMap::new();
    if let Some(snaps) = read_snapshots(dev, &tables[2])? {
        for e in snaps {
            if e.number > root.number || !geo.contains(e.root) {
                return Err(corrupt(
                    &format!("snapshot table of checkpoint {}", root.number),
                    format!("snapshot {} is out of range", e.number),
                ));
            }
            kept.insert(
                e.number,
                Retained {
                    time_ns: e.time_ns,
                    root: e.root,
                    snapshot: true,
                    name: e.name,
                },
            );
        }
    }
    kept.entry(root.number).or_insert(Retained {
        time_ns: root.time_ns,
        root: base_root,
        snapshot: false,
        name: None,
    });
    {
        let mut prev = root.prev_root;
        let mut number = root.number;
        while number > root.oldest_protected.max(1) && prev != 0 && geo.contains(prev) {
            number -= 1;
            let b = read_block(dev, prev, &|| {
                format!(
                    "{} device: reading checkpoint root {number} at block {prev}",
                    dev.kind()
                )
            })?;
            let r = CheckpointRoot::decode(&b[..])
                .map_err(|e| corrupt(&format!("checkpoint root {number} at block {prev}"), e))?;
            if r.number != number {
                return Err(corrupt(
                    &format!("checkpoint root at block {prev}"),
                    format!("holds checkpoint {}, expected {number}", r.number),
                ));
            }
            kept.entry(number).or_insert(Retained {
                time_ns: r.time_ns,
                root: prev,
                snapshot: false,
                name: None,
            });
            prev = r.prev_root;
        }
    }
    report.checkpoints_retained = kept.len() as u64;
    life.load_retained(kept);
    let usage = read_usage(dev, &tables[0], sb.segment_count)?;
    for (s, u) in usage.into_iter().enumerate() {
        life.load_segment(s, u.born.min(root.number), u.written_ns);
    }
    let pinned_entries = read_pinned(dev, &tables[1], geo)?;
    Ok(LoadedRetention {
        life,
        tables,
        pinned: pinned_entries,
    })
}

/// Step 7, first part: each segment's live count from every block the loaded tree, the inode file,
/// the root and the tables reference; and the inodes whose map must be written again.
fn segment_usage(
    sb: &Superblock,
    root: &CheckpointRoot,
    cells: &HashMap<u64, Arc<InodeCell>>,
    ifile: &BlockMap,
    base_root: u64,
    tables: &[BlockMap; format::TABLES],
) -> Result<(SegmentTable, DenseSet)> {
    let segment_count = sb.segment_count as usize;
    let mut seg = SegmentTable::new(segment_count, sb.segment_blocks);
    let mut pending = DenseSet::default();
    let mut overfull = None;
    {
        let mut live = |a: u64| {
            let s = segment_of(a, sb.segment_blocks);
            if !seg.add_live_loaded(s) {
                overfull.get_or_insert(s);
            }
        };
        for (&ino, cell) in cells {
            let st = cell.lock();
            st.map()
                .blocks
                .iter()
                .filter(|&&a| a != 0)
                .for_each(|&a| live(a));
            st.map().node_addrs().for_each(&mut live);
            if st.map().is_dirty() {
                pending.insert(ino);
            }
        }
        ifile
            .blocks
            .iter()
            .filter(|&&a| a != 0)
            .for_each(|&a| live(a));
        ifile.node_addrs().for_each(&mut live);
        live(base_root);
        for t in tables {
            t.blocks.iter().filter(|&&a| a != 0).for_each(|&a| live(a));
            t.node_addrs().for_each(&mut live);
        }
    }
    if let Some(s) = overfull {
        return Err(corrupt(
            &format!("checkpoint {}", root.number),
            format!("segment {s} holds more blocks the tree references than it has"),
        ));
    }
    Ok((seg, pending))
}

/// Step 7, second part: each inode's link count as the tree names it (a directory: 2 and its
/// subdirectories; an inode no directory reaches: 0, an orphan); a changed one is pending.
fn link_counts(
    cells: &HashMap<u64, Arc<InodeCell>>,
    reached: &HashMap<u64, u32>,
    subdirs: &HashMap<u64, u32>,
    pending: &mut DenseSet,
) {
    let mut nlinks = Vec::new();
    for (&ino, cell) in cells {
        let st = cell.lock();
        let n = if st.kind() == FileKind::Dir {
            2 + subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            reached.get(&ino).copied().unwrap_or(0)
        };
        let n = if ino != ROOT_INO && !reached.contains_key(&ino) {
            0
        } else {
            n
        };
        if n != st.nlink() {
            nlinks.push((ino, n));
        }
    }
    for &(ino, n) in &nlinks {
        cells[&ino].lock().set_nlink(n);
        pending.insert(ino);
    }
}

/// Step 7: the segment table from every block the loaded tree references
/// ([`segment_usage`]) and the logs the chain wrote in each segment.
pub(in crate::tbfs) fn recovered_segments(
    sb: &Superblock,
    tree: &Tree,
    chain: &Chain,
    base: &Base,
    tables: &[BlockMap; format::TABLES],
) -> Result<(SegmentTable, DenseSet)> {
    let (mut seg, pending) =
        segment_usage(sb, &tree.root, &tree.cells, &tree.ifile, base.root, tables)?;
    for log in &chain.logs {
        seg.note_written(
            segment_of(log.start, sb.segment_blocks),
            log.summary.sequence,
        );
    }
    Ok((seg, pending))
}

/// Step 7: the segments' ages from the logs of the chain, and which segments hold blocks no
/// retained checkpoint references (those of the logs after the base checkpoint).
pub(in crate::tbfs) fn note_chain_in_retention(
    life: &mut Retention,
    sb: &Superblock,
    chain: &Chain,
    base: &Base,
) {
    for log in &chain.logs {
        let s = segment_of(log.start, sb.segment_blocks);
        life.recovered_log(s, log.summary.time_ns);
    }
    // Logs after the base checkpoint hold blocks no retained checkpoint references.
    for log in &chain.logs[base.index..] {
        let s = segment_of(log.start, sb.segment_blocks);
        life.recovered_since_checkpoint(s, log.start);
    }
}

/// Step 7: where the writer continues, after the chain's last log. Its next segment is
/// `u64::MAX` when the chain just entered the current one: step 8 chooses it.
pub(in crate::tbfs) fn writer_after_chain(sb: &Superblock, chain: &Chain) -> Writer {
    let logs = chain.logs.as_slice();
    let (pos, seq, segment_next) = (chain.pos, chain.seq, chain.segment_next);
    let cur_seg = segment_of(pos, sb.segment_blocks) as u64;
    let next_seg = if logs
        .last()
        .is_some_and(|l| segment_of(l.start, sb.segment_blocks) as u64 == cur_seg)
        || (logs.is_empty() && pos == sb.next.block)
    {
        segment_next
    } else {
        // The chain just entered this segment; its successor is chosen below.
        u64::MAX
    };
    Writer::new(pos, cur_seg, next_seg, seq)
}

/// Step 7: the inode table of the loaded tree, its link counts set as the tree names them
/// ([`link_counts`]; a changed one joins `pending`).
pub(in crate::tbfs) fn recovered_inodes(
    root: &CheckpointRoot,
    cells: HashMap<u64, Arc<InodeCell>>,
    reached: &HashMap<u64, u32>,
    subdirs: &HashMap<u64, u32>,
    pending: &mut DenseSet,
) -> Result<InodeTable> {
    link_counts(&cells, reached, subdirs, pending);
    InodeTable::loaded(cells, root.next_ino).map_err(|ino| {
        corrupt(
            &format!("checkpoint {}", root.number),
            format!(
                "inode {ino} is numbered past the next number, {}",
                root.next_ino
            ),
        )
    })
}
