//! Making and opening pools. Opening is recovery: the newest valid superblock, the checkpoint it
//! names, a scan of the log chain after it (sequence, previous-summary CRC, summary and payload
//! CRCs), the newest complete checkpoint in that chain, roll-forward of the data-only logs after
//! it, and a fresh checkpoint and superblock. Every byte read is checked before it is trusted.

pub(crate) mod scan;
pub(crate) mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::tbfs::dense::DenseSet;
use crate::tbfs::format::{self, *};
use crate::tbfs::inode::*;
use crate::tbfs::log::*;
use crate::tbfs::retention::*;
use crate::tbfs::space::segments::*;
use crate::tbfs::state::*;
use crate::tbfs::*;
use scan::*;
use tree::*;

/// Smallest pool: superblocks and a handful of segments.
const SEGMENTS_MIN: u64 = 4;

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

#[allow(clippy::too_many_arguments)]
fn new_inner(
    dev: DeviceRef,
    config: Config,
    pool_id: [u8; 16],
    segment_blocks: u64,
    segment_count: u64,
    read_only: bool,
    meta: State,
    log: LogWriter,
) -> Engine {
    let written = meta.writer.seq;
    // Threads waiting for `meta` or the log writer lend their I/O priority to the holder, unless
    // the pool is memory, whose commits are copies with no I/O priority to raise.
    let copies = dev.writes_are_copies();
    let inheritance = || {
        if copies {
            crate::sched::inherit::Inheritance::inert()
        } else {
            crate::sched::inherit::Inheritance::new()
        }
    };
    let buffer_limit = AtomicU64::new(config.dirty_bytes_max);
    // Every map as loaded (and rolled forward); writes raise it from here.
    let widest = meta
        .inodes
        .values()
        .map(|c| c.lock().map.blocks.len() as u64)
        .max()
        .unwrap_or(0);
    Engine {
        dev,
        config,
        pool_id,
        segment_blocks,
        segment_count,
        read_only,
        meta: parking_lot::Mutex::new(meta),
        log_queue: Mutex::new(std::collections::VecDeque::new()),
        log_writer: Mutex::new(log),
        log_inherit: inheritance(),
        written_seq: AtomicU64::new(written),
        summary_seq: AtomicU64::new(written),
        ahead_pending: Mutex::new(BTreeMap::new()),
        ahead_unflushed: AtomicBool::new(false),
        releases: Mutex::new(BTreeMap::new()),
        queued_total: AtomicU64::new(0),
        sb_checkpoint_seq: AtomicU64::new(0),
        sb_writer: Mutex::new(0),
        sb_handoff: Mutex::new(Vec::new()),
        #[cfg(test)]
        sb_taken_gate: Mutex::new(None),
        durable_seq: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        space_tight: AtomicBool::new(false),
        copies: Default::default(),
        buffer_fit_limit: AtomicU64::new(buffer_limit.load(AtomicOrdering::Relaxed)),
        buffer_limit,
        widest: AtomicU64::new(widest),
        ns_pending: AtomicBool::new(true),
        full_passes: AtomicBool::new(true),
        flushes_running: AtomicU64::new(0),
        bg_pass: Mutex::new(()),
        dirty: Mutex::new(Default::default()),
        dirty_bytes: AtomicU64::new(0),
        meta_held_ns: AtomicU64::new(0),
        meta_section_ns: Default::default(),
        poisoned: Mutex::new(None),
        poisoned_set: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        counters: Mutex::new(FsCounters::default()),
        report: Mutex::new(RecoveryReport::default()),
        background: Mutex::new(None),
        wake: Arc::new((Mutex::new(Wake::default()), Condvar::new())),
        inherit: inheritance(),
        locks: super::locks::LockTable::new(),
        names: Default::default(),
        mount_point: Mutex::new(None),
        atime: std::sync::atomic::AtomicU8::new(AtimePolicy::Relatime as u8),
    }
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
        next_ino: ROOT_INO + 1,
        seg: SegmentTable::new(segment_count as usize, segment_blocks),
        life: Retention::new(
            segment_count as usize,
            segment_blocks,
            config.protection_period,
        ),
        writer: Writer {
            pos: format::FIRST_SEGMENT_BLOCK,
            cur_seg: 0,
            next_seg: 1,
            seq: 1,
            log: None,
            ..Writer::default()
        },
        created_ns: now,
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
    meta.life.since_ckpt = vec![(0, format::FIRST_SEGMENT_BLOCK)];
    meta.life.seg_born[0] = 1;
    meta.inodes.insert(ROOT_INO, root);
    meta.dirs.insert(ROOT_INO, DirEntries::new());
    meta.dirs_dirty.insert(ROOT_INO);
    meta.pending.insert(ROOT_INO);
    meta.ns_dirty = true;
    let inner = Arc::new(new_inner(
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
        m.in_refresh = true;
        inner.commit_checkpoint(&mut m)?;
        // Both copies valid from the start, so a torn first refresh still leaves one.
        inner.write_superblock(&mut m)?;
        inner.write_superblock(&mut m)?;
        m.in_refresh = false;
    }
    Ok(inner)
}

/// Opens and recovers a pool, in eight steps (numbered so in the body):
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
    let dev_bytes = dev.len();
    let mut report = RecoveryReport::default();

    // 1. The newest valid superblock.
    let mut candidates = Vec::new();
    let mut problems = Vec::new();
    for copy in 0..format::SUPERBLOCKS {
        let b = read_block(&dev, copy, &|| {
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

    // 2. The log chain after the superblock's checkpoint.
    let seg_start = |s: u64| format::FIRST_SEGMENT_BLOCK + s * sb.segment_blocks;
    let seg_of = |b: u64| (b - format::FIRST_SEGMENT_BLOCK) / sb.segment_blocks;
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
        let seg_end = seg_start(seg_of(pos)) + sb.segment_blocks;
        let b = window.get(&dev, pos, 1, seg_end)?;
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
        let payload = window.get(&dev, pos + 1, summary.payload_blocks as u64, seg_end)?;
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
                let next = window.get(&dev, end, 1, seg_end)?;
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

    // 3. The newest complete checkpoint: the superblock's, or one found in the chain before
    // any incomplete payload.
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
    // 4. Load that checkpoint: its root, the inode file, every map and directory.
    let geo = Geometry {
        segment_blocks: sb.segment_blocks,
        segment_count: sb.segment_count,
    };
    let Tree {
        root,
        ifile,
        cells,
        dirs,
        reached,
        subdirs,
    } = load_tree(&dev, &geo, base_root)?;
    report.checkpoint = root.number;

    // 5. Roll forward the data-only logs after that checkpoint.
    let applied = &logs[base_index..];
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
    let mut unfinished =
        unfinished_run_data(&replayed.iter().map(|l| &l.summary).collect::<Vec<_>>());
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
                        if st.kind == FileKind::File
                            && d.offset + d.blocks as u64 <= file_blocks_max
                        {
                            for i in 0..d.blocks as u64 {
                                let old = st.map.set(d.offset + i, addr + i);
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
                        if st.kind == FileKind::File
                            && d.offset <= crate::tbfs::limits::FILE_BYTES_MAX
                        {
                            st.size = d.offset;
                            st.mtime_ns = d.extra;
                            // Blocks wholly past the logged size were dropped before this log.
                            let keep = st.size.div_ceil(BLOCK_U64);
                            replaced.extend(st.map.truncate(keep));
                        }
                    }
                }
                _ => addr += d.blocks as u64,
            }
        }
    }

    // 6. The checkpoint's tables: snapshots, segment ages, pinned blocks; and the plain
    // checkpoints kept for the protection period, down the chain of roots.
    let tables = load_tables(&dev, &geo, &root)?;
    let mut life = Retention::new(
        segment_count_of(&sb),
        sb.segment_blocks,
        config.protection_period,
    );
    let mut kept: BTreeMap<u64, Retained> = BTreeMap::new();
    if let Some(snaps) = read_snapshots(&dev, &tables[2])? {
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
            let b = read_block(&dev, prev, &|| {
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
    life.list = kept;
    let usage = read_usage(&dev, &tables[0], sb.segment_count)?;
    for (s, u) in usage.into_iter().enumerate() {
        life.seg_born[s] = u.born.min(root.number);
        life.seg_written[s] = u.written_ns;
    }
    let pinned_entries = read_pinned(&dev, &tables[1], &geo)?;

    // 7. Memory state: segment usage from everything the tree references.
    let segment_count = sb.segment_count as usize;
    let mut seg = SegmentTable::new(segment_count, sb.segment_blocks);
    let mut pending = DenseSet::default();
    let mut overfull = None;
    {
        let mut live = |a: u64| {
            let s = seg_of(a) as usize;
            if !seg.add_live_loaded(s) {
                overfull.get_or_insert(s);
            }
        };
        for (&ino, cell) in &cells {
            let st = cell.lock();
            st.map
                .blocks
                .iter()
                .filter(|&&a| a != 0)
                .for_each(|&a| live(a));
            st.map.node_addrs().for_each(&mut live);
            if st.map.is_dirty() {
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
        for t in &tables {
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
    for log in &logs {
        let s = seg_of(log.start) as usize;
        seg.note_written(s, log.summary.sequence);
        life.seg_written[s] = life.seg_written[s].max(log.summary.time_ns);
    }
    // Logs after the base checkpoint hold blocks no retained checkpoint references.
    for log in applied {
        let s = seg_of(log.start) as usize;
        if !life.since_ckpt.iter().any(|&(seg, _)| seg == s) {
            life.since_ckpt.push((s, log.start));
        }
    }
    let cur_seg = seg_of(pos);
    let next_seg = if logs.last().is_some_and(|l| seg_of(l.start) == cur_seg)
        || (logs.is_empty() && pos == sb.next.block)
    {
        segment_next
    } else {
        // The chain just entered this segment; its successor is chosen below.
        u64::MAX
    };

    let next_ino = root.next_ino.max(ROOT_INO + 1);
    let free_inos: BTreeSet<u64> = (ROOT_INO + 1..next_ino)
        .filter(|i| !cells.contains_key(i))
        .collect();
    let mut nlinks = Vec::new();
    for (&ino, cell) in &cells {
        let st = cell.lock();
        let n = if st.kind == FileKind::Dir {
            2 + subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            reached.get(&ino).copied().unwrap_or(0)
        };
        let n = if ino != ROOT_INO && !reached.contains_key(&ino) {
            0
        } else {
            n
        };
        if n != st.nlink {
            nlinks.push((ino, n));
        }
    }
    for &(ino, n) in &nlinks {
        cells[&ino].lock().nlink = n;
        pending.insert(ino);
    }
    let mut meta = State {
        inodes: cells,
        dirs,
        pending,
        free_inos,
        next_ino,
        ifile,
        ifile_pages: root.ifile_pages,
        writer: Writer {
            pos,
            cur_seg,
            next_seg,
            seq,
            log: None,
            ..Writer::default()
        },
        seg,
        checkpoint: root.number,
        checkpoint_root: base_root,
        checkpoint_seq: base_seq,
        sb_generation: sb.generation,
        created_ns: sb.created_ns,
        life,
        ..State::default()
    };
    // Pinned blocks: the stored ones still some retained checkpoint's, and what roll-forward
    // replaced.
    let mut usage_mismatch = false;
    for (page, e) in pinned_entries {
        // Rewritten at the recovery checkpoint: a page stored before pins were kept by block
        // range holds entries the page for their range now holds.
        meta.life.pins.mark_page_dirty(page);
        if let Some(anchor) = meta.life.anchor(e.born, e.died) {
            if meta.life.pins.contains(e.block) {
                return Err(corrupt(
                    "pinned table",
                    format!("block {} listed twice", e.block),
                ));
            }
            meta.pin(
                e.block,
                super::retention::BlockPin {
                    born: e.born,
                    died: e.died,
                    anchor,
                },
                sb.segment_blocks,
            );
        } else {
            usage_mismatch = true;
        }
    }
    meta.checkpoint = root.number;
    for b in replaced {
        if !meta.life.pins.contains(b) {
            meta.pin_if_retained(b, sb.segment_blocks);
        }
    }
    let now = now_ns();
    for (b, seq) in rewritten {
        if meta.life.pins.contains(b) {
            continue;
        }
        let born = meta.born_of(b, sb.segment_blocks);
        // (A read-only open writes nothing: the pin keeps the base checkpoint readable.)
        if !options.read_only && meta.life.only_newest_unkept(born, meta.checkpoint, now) {
            // Recovery replays the log over the base checkpoint's pointer, so the old copy's
            // segment is reusable once that log is durable (a flush before recovery writes).
            // Pinning it would make every segment light cleaning reused since the superblock
            // unusable here, and can leave recovery no room for its checkpoint.
            let s = seg_of(b) as usize;
            meta.seg.raise_soft_dead(s, seq + 1);
            meta.superseded_since_ckpt = true;
        } else {
            meta.pin_if_retained(b, sb.segment_blocks);
        }
    }
    let _ = usage_mismatch;
    meta.life.tables = tables;
    meta.life.usage_dirty.clear();
    let inner = Arc::new(new_inner(
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
    inner
        .sb_checkpoint_seq
        .store(sb.checkpoint_sequence, AtomicOrdering::Release);

    // 8. Orphans (unlinked while open when the pool went down) are freed; then a fresh
    // checkpoint and superblock make the recovered state the new base.
    {
        let mut m = inner.lock_meta();
        let orphans: Vec<Arc<InodeCell>> = m
            .inodes
            .values()
            .filter(|c| c.ino != ROOT_INO && c.lock().nlink == 0)
            .cloned()
            .collect();
        report.orphans_reclaimed = orphans.len() as u64;
        if !options.read_only {
            // Everything before the tail is settled once the recovery superblock is durable.
            inner.sb_checkpoint_seq.store(0, AtomicOrdering::Release);
            // The chain rolled forward is durable from here on, so the segments its data-only
            // logs emptied may be reused by what recovery writes.
            let end = m.writer.seq;
            inner.flush_written(end, "before recovery writes")?;
            for o in &orphans {
                inner.free_inode(&mut m, o);
            }
            if m.writer.next_seg == u64::MAX {
                m.writer.next_seg = m.writer.cur_seg;
                let pick = (1..=sb.segment_count)
                    .map(|i| (cur_seg + i) % sb.segment_count)
                    .find(|&s| {
                        s != cur_seg
                            && m.seg.live(s as usize) == 0
                            && !logs.iter().any(|l| seg_of(l.start) == s)
                    });
                match pick {
                    Some(s) => m.writer.next_seg = s,
                    None => {
                        return Err(Error::NoSpace(
                            "recovery: no free segment to continue the log".into(),
                        ))
                    }
                }
            }
            m.in_refresh = true;
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
            m.in_refresh = false;
            result?;
        }
    }
    report.elapsed = started.elapsed();
    *inner.report.lock().unwrap_or_else(|p| p.into_inner()) = report;
    Ok(inner)
}
