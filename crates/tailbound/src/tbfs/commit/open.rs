//! Making and opening pools: the orchestration of recovery. Its steps (`recovery`) each read
//! the device or rebuild one part of [`State`] from what the steps before found; here the parts
//! are assembled into the state, the pins restored, and a fresh checkpoint and superblock make
//! the recovered state the new base.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::tbfs::changes::Changes;
use crate::tbfs::checkpoints::Checkpoints;
use crate::tbfs::directories::Directories;
use crate::tbfs::format::{self, *};
use crate::tbfs::ifile::InodeFile;
use crate::tbfs::inode::*;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::limits::SEGMENTS_MIN;
use crate::tbfs::log::{LogWriter, Writer};
use crate::tbfs::recovery::scan::{corrupt, ScannedLog};
use crate::tbfs::recovery::tree::{load_tree, Geometry, Tree};
use crate::tbfs::recovery::*;
use crate::tbfs::refresh::Refresh;
use crate::tbfs::retention::*;
use crate::tbfs::space::segments::*;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Config, DeviceRef, Error, FileKind, OpenOptions, RecoveryReport, Result};

/// Lays a new pool on `dev`: both superblocks, an empty root directory and its checkpoint.
pub(in crate::tbfs) fn format(dev: DeviceRef, config: &Config) -> Result<Arc<Engine>> {
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
    let now = config.clock.now_ns();
    let mut meta = State {
        seg: SegmentTable::new(segment_count as usize, segment_blocks),
        life: Retention::new(
            segment_count as usize,
            segment_blocks,
            config.protection_period,
            config.clock.clone(),
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
/// (`recovery::tree::load_tree`):
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
pub(in crate::tbfs) fn open(dev: DeviceRef, options: &OpenOptions) -> Result<Arc<Engine>> {
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

/// Step 7: the memory state, each part rebuilt from what the steps before found (segment usage
/// of everything the tree references, link counts, where the writer continues), then the pins.
fn memory_state(
    sb: &Superblock,
    options: &OpenOptions,
    tree: Tree,
    chain: &Chain,
    base: &Base,
    retained: LoadedRetention,
    rolled: RolledForward,
) -> Result<State> {
    let LoadedRetention {
        mut life,
        tables,
        pinned: pinned_entries,
    } = retained;
    let (seg, mut pending) = recovered_segments(sb, &tree, chain, base, &tables)?;
    note_chain_in_retention(&mut life, sb, chain, base);
    let Tree {
        root,
        ifile,
        cells,
        dirs,
        reached,
        subdirs,
    } = tree;
    let inodes = recovered_inodes(&root, cells, &reached, &subdirs, &mut pending)?;
    let mut meta = State {
        inodes,
        dirs: Directories::loaded(dirs),
        changes: Changes::loaded(pending),
        ifile: InodeFile::loaded(ifile, root.ifile_pages),
        writer: writer_after_chain(sb, chain),
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

/// Step 7, last part: the pinned blocks: the stored ones still some retained checkpoint's, and
/// what roll-forward replaced.
///
/// Recovery's checkpoint writes only the pinned-table pages that change: those holding a pin
/// roll-forward adds, and those of a pool written before pages held fixed block ranges (each
/// page an entry was read from and the page that holds it now). A stored entry no retained
/// checkpoint covers (one a view kept, which is not stored) is passed over and stays in its
/// page until that page is next written: no checkpoint made later can be in its range, so
/// every later load passes over it too. So after a power cut recovery needs room only for
/// the changes it replays, not for every page holding a pin.
fn restore_pins(
    meta: &mut State,
    sb: &Superblock,
    options: &OpenOptions,
    checkpoint: u64,
    pinned_entries: Vec<(u64, format::PinnedEntry)>,
    rolled: RolledForward,
) -> Result<()> {
    let mut moved_pages = std::collections::BTreeSet::new();
    for (page, e) in pinned_entries {
        let home = meta.life.pinned_page(e.block, sb.segment_blocks);
        if page != home {
            // The older layout packed a segment's entries into its first pages.
            moved_pages.extend([page, home]);
        }
        if let Some(anchor) = meta.life.anchor(e.born, e.died) {
            let pin = BlockPin {
                born: e.born,
                died: e.died,
                anchor,
            };
            if !meta.load_pin(e.block, pin, sb.segment_blocks) {
                return Err(corrupt(
                    "pinned table",
                    format!("block {} listed twice", e.block),
                ));
            }
        }
    }
    assert_eq!(
        meta.life.pins().dirty_page_count(),
        0,
        "loading the pinned table marked pages"
    );
    for &page in &moved_pages {
        meta.life.mark_pinned_page_dirty(page);
    }
    debug_assert_eq!(
        meta.ckpt.newest(),
        checkpoint,
        "pins restored at another checkpoint"
    );
    let loaded = meta.life.pins().len();
    for b in rolled.replaced {
        if !meta.life.pins().contains(b) {
            meta.pin_if_retained(b, sb.segment_blocks);
        }
    }
    let now = meta.life.now_ns();
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
    // Each block roll-forward pinned marks one page: what recovery writes of the table is
    // bounded by what it replays.
    let pinned = meta.life.pins().len() - loaded;
    assert!(
        meta.life.pins().dirty_page_count() as u64 <= moved_pages.len() as u64 + pinned,
        "recovery marked {} pinned-table pages for {pinned} blocks pinned by roll-forward and {} moved",
        meta.life.pins().dirty_page_count(),
        moved_pages.len()
    );
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
        // The orphans' blocks a retained checkpoint references are pinned, each marking one
        // page at most.
        let (pinned, marked) = (m.life.pins().len(), m.life.pins().dirty_page_count());
        for o in &orphans {
            inner.free_inode(&mut m, o);
        }
        let pages = m.life.pins().dirty_page_count();
        assert!(
            (pages - marked) as u64 <= m.life.pins().len() - pinned,
            "freeing {} orphans marked {} pinned-table pages for {} blocks pinned",
            orphans.len(),
            pages - marked,
            m.life.pins().len() - pinned
        );
        inner.count(|c| c.recovery_pinned_pages = pages as u64);
        if m.writer.next_seg() == u64::MAX {
            let in_chain = |s: u64| {
                logs.iter()
                    .any(|l| segment_of(l.start, sb.segment_blocks) as u64 == s)
            };
            match segment_to_follow(&m.seg, cur_seg, sb.segment_count, in_chain) {
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

/// The segment recovery has the writer go to after `cur_seg` when the chain just entered it:
/// the first after it (in segment order, round the pool) that holds nothing live or pinned and
/// no log of the chain. A segment whose blocks a retained checkpoint pins (a snapshot's) holds
/// nothing live, but writing there would overwrite what the checkpoint reads.
fn segment_to_follow(
    seg: &SegmentTable,
    cur_seg: u64,
    segment_count: u64,
    in_chain: impl Fn(u64) -> bool,
) -> Option<u64> {
    (1..=segment_count)
        .map(|i| (cur_seg + i) % segment_count)
        .find(|&s| s != cur_seg && seg.is_empty(s as usize) && !in_chain(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_does_not_continue_the_log_in_a_segment_only_pins_hold() {
        let mut seg = SegmentTable::new(5, 4);
        // Segment 2: every block dropped by the live tree and pinned by a snapshot.
        for _ in 0..4 {
            seg.add_live(2);
        }
        for _ in 0..4 {
            seg.drop_live(2);
            seg.add_pinned(2);
        }
        // Segment 3 holds a log of the chain; 4 is empty.
        assert_eq!(segment_to_follow(&seg, 1, 5, |s| s == 3), Some(4));
        assert_eq!(
            segment_to_follow(&seg, 1, 5, |s| s == 3 || s == 4),
            Some(0),
            "round the pool"
        );
        seg.add_live(0);
        assert_eq!(segment_to_follow(&seg, 1, 5, |s| s >= 3), None);
    }
}
