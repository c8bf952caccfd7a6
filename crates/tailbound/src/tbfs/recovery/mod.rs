//! Making and opening pools. Opening is recovery: the newest valid superblock, the checkpoint it
//! names, a scan of the log chain after it (sequence, previous-summary CRC, summary and payload
//! CRCs), the newest complete checkpoint in that chain, roll-forward of the data-only logs after
//! it, and a fresh checkpoint and superblock. Every byte read is checked before it is trusted.

pub(crate) mod scan;
pub(crate) mod tree;

use crate::tbfs::directories::Directories;
use crate::tbfs::inode_table::InodeTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::tbfs::changes::Changes;
use crate::tbfs::checkpoints::Checkpoints;
use crate::tbfs::dense::DenseSet;
use crate::tbfs::format::{self, *};
use crate::tbfs::ifile::InodeFile;
use crate::tbfs::inode::*;
use crate::tbfs::limits::SEGMENTS_MIN;
use crate::tbfs::log::{LogWriter, Writer};
use crate::tbfs::map::BlockMap;
use crate::tbfs::refresh::Refresh;
use crate::tbfs::retention::*;
use crate::tbfs::space::segments::*;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{
    Barrier, Config, DeviceRef, Error, FileKind, OpenOptions, Ordering, RecoveryMode,
    RecoveryReport, Result,
};
use scan::*;
use tree::*;

fn pool_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut id).is_ok() {
            return id;
        }
    }
    let t = now_ns() as u128 ^ ((std::process::id() as u128) << 64);
    id.copy_from_slice(&t.to_le_bytes());
    id
}

/// Lays a new pool on `dev`: both superblocks, an empty root directory and its checkpoint.
pub(crate) fn format(dev: DeviceRef, config: &Config) -> Result<Arc<Engine>> {
    let blocks = dev.len() / BLOCK_U64;
    let segment_blocks = config.segment_bytes / BLOCK_U64;
    if !config.segment_bytes.is_multiple_of(BLOCK_U64)
        || segment_blocks < format::SEGMENT_BLOCKS_MIN
    {
        return Err(Error::Invalid(format!(
            "segment size {} (a multiple of {BLOCK} bytes, at least {} bytes)",
            config.segment_bytes,
            format::SEGMENT_BLOCKS_MIN * BLOCK_U64
        )));
    }
    // Saturating: a device smaller than the superblocks holds no segment (refused below).
    let segment_count = blocks.saturating_sub(format::FIRST_SEGMENT_BLOCK) / segment_blocks;
    if segment_count < SEGMENTS_MIN {
        return Err(Error::NoSpace(format!(
            "a {} device of {} bytes holds {segment_count} segments of {} bytes; tbfs needs at least {SEGMENTS_MIN}",
            dev.kind(),
            dev.len(),
            config.segment_bytes
        )));
    }
    let now = now_ns();
    let mut meta = State {
        seg: SegmentTable::new(segment_count as usize, segment_blocks),
        life: Retention::new(
            segment_count as usize,
            segment_blocks,
            config.protection_period,
        ),
        writer: Writer::new(format::FIRST_SEGMENT_BLOCK, 0, 1, 1),
        refresh: Refresh::new(0, now),
        ..State::default()
    };
    let root = Arc::new(InodeCell {
        ino: ROOT_INO,
        st: Mutex::new(InodeState::new(
            FileKind::Dir,
            0o755,
            now,
            crate::sys::proc::effective_ids(),
        )),
    });
    meta.life.entered_segment(0, 1, format::FIRST_SEGMENT_BLOCK);
    meta.inodes = InodeTable::formatted(root);
    meta.dirs.create(ROOT_INO);
    meta.changes.formatted(ROOT_INO);
    let inner = Arc::new(Engine::new(
        dev,
        config.clone(),
        pool_id(),
        segment_blocks,
        segment_count,
        false,
        meta,
        LogWriter::default(),
    ));
    {
        let mut m = inner.lock_meta();
        m.refresh.set_running(true);
        inner.commit_checkpoint(&mut m)?;
        // Both copies valid from the start, so a torn first refresh still leaves one.
        inner.write_superblock(&mut m)?;
        inner.write_superblock(&mut m)?;
        m.refresh.set_running(false);
    }
    Ok(inner)
}

/// Opens and recovers a pool, in eight steps, each a function below but for the fourth
/// (`tree::load_tree`):
///
/// 1. the newest valid superblock;
/// 2. the log chain after the superblock's checkpoint;
/// 3. the newest complete checkpoint in it;
/// 4. loading that checkpoint's tree;
/// 5. roll-forward: the data-only logs after it are replayed over the tree;
/// 6. the checkpoint's tables (snapshots, segment ages, pinned blocks) and the retained
///    checkpoints;
/// 7. the memory state: segment usage of everything the tree references, pins;
/// 8. orphans freed, and a fresh checkpoint and superblock.
pub(crate) fn open(dev: DeviceRef, options: &OpenOptions) -> Result<Arc<Engine>> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let (sb, config) = newest_superblock(&dev, options, &mut report)?;
    let chain = scan_chain(&dev, &sb, options, &mut report)?;
    let base = newest_checkpoint(&sb, &chain.logs, chain.first_incomplete);
    // 4. Load that checkpoint: its root, the inode file, every map and directory.
    let geo = Geometry {
        segment_blocks: sb.segment_blocks,
        segment_count: sb.segment_count,
    };
    let tree = load_tree(&dev, &geo, base.root)?;
    report.checkpoint = tree.root.number;
    let applied = &chain.logs[base.index..];
    let rolled = roll_forward(applied, chain.first_incomplete, &tree.cells, &mut report);
    let retained = load_retention(&dev, &geo, &sb, &config, &tree.root, base.root, &mut report)?;
    let meta = memory_state(&sb, options, tree, &chain, &base, retained, rolled)?;
    let cur_seg = meta.writer.cur_seg();
    let prev = chain.prev;
    let inner = Arc::new(Engine::new(
        dev,
        config,
        sb.pool_id,
        sb.segment_blocks,
        sb.segment_count,
        options.read_only,
        meta,
        // What was recovered may not be durable yet: the first superblock flushes first.
        LogWriter {
            prev_crc: prev,
            unflushed: true,
            buf: Vec::new(),
        },
    ));
    inner.superblocks.recovered(sb.checkpoint_sequence);
    settle(&inner, &sb, &chain.logs, cur_seg, options, &mut report)?;
    report.elapsed = started.elapsed();
    inner.stats.set_report(report);
    Ok(inner)
}

/// Step 1: the newest valid superblock, and the configuration it records (with what `options`
/// overrides).
fn newest_superblock(
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
struct Chain {
    logs: Vec<ScannedLog>,
    /// The first log whose payload is incomplete: no checkpoint at or after it counts.
    first_incomplete: Option<usize>,
    pos: u64,
    seq: u64,
    prev: u32,
    segment_next: u64,
}

/// Step 2: scans the log chain after the superblock's checkpoint, up to the first log that does not
/// verify (which ends it, or fails the open in strict mode when valid logs follow).
fn scan_chain(
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
        if pos == seg_end {
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
struct Base {
    root: u64,
    seq: u64,
    index: usize,
}

/// Step 3: the newest complete checkpoint: the superblock's, or one found in the chain before
/// any incomplete payload (`first_incomplete`, the index of the first log whose payload is).
fn newest_checkpoint(
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
struct RolledForward {
    /// Blocks of the base checkpoint that roll-forward replaced: pinned if it stays retained.
    replaced: Vec<u64>,
    /// Of those, file data a data-only log rewrote, with the log's sequence.
    rewritten: Vec<(u64, u64)>,
}

/// Step 5: roll forward the data-only logs after the base checkpoint (`applied`) over its tree.
fn roll_forward(
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
struct LoadedRetention {
    life: Retention,
    tables: [BlockMap; format::TABLES],
    pinned: Vec<(u64, format::PinnedEntry)>,
}

/// Step 6: the checkpoint's tables: snapshots, segment ages, pinned blocks; and the plain
/// checkpoints kept for the protection period, down the chain of roots.
fn load_retention(
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

/// Step 7: memory state: segment usage from everything the tree references, link counts, where
/// the writer continues, and the pins.
fn memory_state(
    sb: &Superblock,
    options: &OpenOptions,
    tree: Tree,
    chain: &Chain,
    base: &Base,
    retained: LoadedRetention,
    rolled: RolledForward,
) -> Result<State> {
    let Tree {
        root,
        ifile,
        cells,
        dirs,
        reached,
        subdirs,
    } = tree;
    let LoadedRetention {
        mut life,
        tables,
        pinned: pinned_entries,
    } = retained;
    let (mut seg, mut pending) = segment_usage(sb, &root, &cells, &ifile, base.root, &tables)?;
    let logs = chain.logs.as_slice();
    let applied = &logs[base.index..];
    let (pos, seq, segment_next) = (chain.pos, chain.seq, chain.segment_next);
    for log in logs {
        let s = segment_of(log.start, sb.segment_blocks);
        seg.note_written(s, log.summary.sequence);
        life.recovered_log(s, log.summary.time_ns);
    }
    // Logs after the base checkpoint hold blocks no retained checkpoint references.
    for log in applied {
        let s = segment_of(log.start, sb.segment_blocks);
        life.recovered_since_checkpoint(s, log.start);
    }
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

    link_counts(&cells, &reached, &subdirs, &mut pending);
    let inodes = InodeTable::loaded(cells, root.next_ino).map_err(|ino| {
        corrupt(
            &format!("checkpoint {}", root.number),
            format!(
                "inode {ino} is numbered past the next number, {}",
                root.next_ino
            ),
        )
    })?;
    let mut meta = State {
        inodes,
        dirs: Directories::loaded(dirs),
        changes: Changes::loaded(pending),
        ifile: InodeFile::loaded(ifile, root.ifile_pages),
        writer: Writer::new(pos, cur_seg, next_seg, seq),
        seg,
        ckpt: Checkpoints::loaded(root.number, base.root, base.seq),
        refresh: Refresh::new(sb.generation, sb.created_ns),
        life,
        ..State::default()
    };
    restore_pins(&mut meta, sb, options, root.number, pinned_entries, rolled)?;
    meta.life.load_tables(tables);
    Ok(meta)
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

/// Step 7, last part: the pinned blocks: the stored ones still some retained checkpoint's, and
/// what roll-forward replaced.
fn restore_pins(
    meta: &mut State,
    sb: &Superblock,
    options: &OpenOptions,
    checkpoint: u64,
    pinned_entries: Vec<(u64, format::PinnedEntry)>,
    rolled: RolledForward,
) -> Result<()> {
    for (page, e) in pinned_entries {
        // Rewritten at the recovery checkpoint: a page stored before pins were kept by block
        // range holds entries the page for their range now holds.
        meta.life.mark_pinned_page_dirty(page);
        if let Some(anchor) = meta.life.anchor(e.born, e.died) {
            if meta.life.pins().contains(e.block) {
                return Err(corrupt(
                    "pinned table",
                    format!("block {} listed twice", e.block),
                ));
            }
            meta.pin(
                e.block,
                BlockPin {
                    born: e.born,
                    died: e.died,
                    anchor,
                },
                sb.segment_blocks,
            );
        }
    }
    debug_assert_eq!(
        meta.ckpt.newest(),
        checkpoint,
        "pins restored at another checkpoint"
    );
    for b in rolled.replaced {
        if !meta.life.pins().contains(b) {
            meta.pin_if_retained(b, sb.segment_blocks);
        }
    }
    let now = now_ns();
    for (b, seq) in rolled.rewritten {
        if meta.life.pins().contains(b) {
            continue;
        }
        let born = meta.born_of(b, sb.segment_blocks);
        // (A read-only open writes nothing: the pin keeps the base checkpoint readable.)
        if !options.read_only && meta.life.only_newest_unkept(born, meta.ckpt.newest(), now) {
            // Recovery replays the log over the base checkpoint's pointer, so the old copy's
            // segment is reusable once that log is durable (a flush before recovery writes).
            // Pinning it would make every segment light cleaning reused since the superblock
            // unusable here, and can leave recovery no room for its checkpoint.
            let s = segment_of(b, sb.segment_blocks);
            meta.seg.raise_soft_dead(s, seq + 1);
            meta.ckpt.note_superseded();
        } else {
            meta.pin_if_retained(b, sb.segment_blocks);
        }
    }
    Ok(())
}

/// Step 8: orphans (unlinked while open when the pool went down) are freed; then a fresh
/// checkpoint and superblock make the recovered state the new base.
fn settle(
    inner: &Arc<Engine>,
    sb: &Superblock,
    logs: &[ScannedLog],
    cur_seg: u64,
    options: &OpenOptions,
    report: &mut RecoveryReport,
) -> Result<()> {
    let mut m = inner.lock_meta();
    let orphans: Vec<Arc<InodeCell>> = m
        .inodes
        .values()
        .filter(|c| c.ino != ROOT_INO && c.lock().nlink() == 0)
        .cloned()
        .collect();
    report.orphans_reclaimed = orphans.len() as u64;
    if !options.read_only {
        // Everything before the tail is settled once the recovery superblock is durable.
        inner.superblocks.recovered(0);
        // The chain rolled forward is durable from here on, so the segments its data-only
        // logs emptied may be reused by what recovery writes.
        let end = m.writer.seq();
        inner.flush_written(end, "before recovery writes")?;
        for o in &orphans {
            inner.free_inode(&mut m, o);
        }
        if m.writer.next_seg() == u64::MAX {
            let pick = (1..=sb.segment_count)
                .map(|i| (cur_seg + i) % sb.segment_count)
                .find(|&s| {
                    s != cur_seg
                        && m.seg.live(s as usize) == 0
                        && !logs
                            .iter()
                            .any(|l| segment_of(l.start, sb.segment_blocks) as u64 == s)
                });
            match pick {
                Some(s) => m.writer.set_next_seg(s),
                None => {
                    return Err(Error::NoSpace(
                        "recovery: no free segment to continue the log".into(),
                    ))
                }
            }
        }
        m.refresh.set_running(true);
        // Segments with nothing live may be overwritten only after this superblock; the
        // recovery checkpoint goes where the chain ended.
        let result = inner
            .commit_checkpoint(&mut m)
            .and_then(|()| inner.write_superblock(&mut m))
            // An older version's pool is upgraded here, before any log of this build's:
            // both copies, or a build of that version would take the one it still reads
            // and stop its log chain at the first descriptor it does not know.
            .and_then(|()| {
                if sb.version < format::VERSION {
                    inner.write_superblock(&mut m)
                } else {
                    Ok(())
                }
            });
        m.refresh.set_running(false);
        result?;
    }

    Ok(())
}
