//! Checkpoint retention, snapshots, read-only views of retained checkpoints, and space accounting.
//!
//! Every checkpoint is numbered and timestamped. The ones still **retained** are: snapshots (until
//! dropped), plain checkpoints younger than the protection period, the newest checkpoint, and any
//! checkpoint a [`Snapshot`] view is reading. Nothing a retained checkpoint references is reused.
//!
//! tbfs has no block indirection: a checkpoint names physical blocks. So when the live tree drops
//! a block (an overwrite, a truncate, an unlink, the cleaner moving it), the block is **pinned** if
//! a retained checkpoint may reference it: one numbered `born ..= died`, where `born` is the first
//! checkpoint that can contain the block and `died` the last that does. A segment is reused only
//! once it holds nothing live and nothing pinned. The pinned blocks, the snapshots and each
//! segment's age go into every checkpoint as three copy-on-write tables (`docs/FORMAT.md`); the
//! plain checkpoints kept for the protection period are found after a restart by following each
//! root's link to the root before it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::tbfs::checkpoints::Checkpoints;
use crate::tbfs::directories::Directories;
use crate::tbfs::format::{
    self, encode_pinned_page, encode_snapshot_page, encode_usage_page, table_entries_per_page,
    DescKind, PinnedEntry, SnapshotEntry, TableRef, UsageEntry, BLOCK_U64, SNAPSHOT_NAME_MAX,
    TABLES, TABLE_PINNED, TABLE_SNAPSHOTS, TABLE_USAGE,
};
use crate::tbfs::inode::InodeCell;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::map::BlockMap;
use crate::tbfs::retention::*;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{DirEntry, Error, FileKind, Fs, Result, Stat};

/// One checkpoint, as `Fs::checkpoints` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub number: u64,
    /// When it was written, ns since the Unix epoch.
    pub time_ns: i64,
    /// Kept until dropped (`set_snapshot(number, false)`), not only for the protection period.
    pub snapshot: bool,
    pub name: Option<String>,
    /// Bytes of blocks no other retained checkpoint and not the live tree references: what
    /// releasing this checkpoint alone would give back.
    pub pinned_bytes: u64,
}

/// Where the pool's space is, in bytes. `live + pinned_by_snapshots + reclaimable + free == size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceReport {
    /// Bytes of segment space (the superblocks are not counted).
    pub size: u64,
    /// Blocks the live tree references.
    pub live: u64,
    /// Blocks only snapshots (or open [`Snapshot`] views) keep: dead blocks they reference, and
    /// the unused space of segments the cleaner cannot empty because a snapshot references blocks
    /// in them.
    pub pinned_by_snapshots: u64,
    /// Space the cleaner can give back: dead blocks in segments it may clean, and blocks kept
    /// only for the protection period (released early when writers need the space).
    pub reclaimable: u64,
    /// Space the writer can fill now without cleaning.
    pub free: u64,
    /// What a user can still write: free and reclaimable space, less the reserve the engine
    /// keeps for its own checkpoints and a segment of slack, the dead space in segments too full
    /// to be worth cleaning, and data still buffered (see "Space" in docs/ARCHITECTURE.md).
    pub available: u64,
}

/// What one `gc` run did.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GcReport {
    pub segments_cleaned: u64,
    pub blocks_copied: u64,
    pub bytes_freed: u64,
    pub free_fraction_after: f64,
}

impl State {
    /// An upper bound on the blocks the next checkpoint's tables take.
    pub fn table_estimate(&self) -> u64 {
        let snaps = self.life.snapshot_count() as u64;
        self.life.dirty_usage_page_count() as u64
            + 1
            + self.life.pins().dirty_page_count() as u64
            + snaps.div_ceil(table_entries_per_page(TABLE_SNAPSHOTS) as u64)
            + self
                .life
                .tables()
                .iter()
                .map(|t| t.height as u64 + 1)
                .sum::<u64>()
    }

    /// The first checkpoint that can reference `block`.
    pub fn born_of(&self, block: u64, segment_blocks: u64) -> u64 {
        let s = Self::seg_of(block, segment_blocks);
        if self.life.written_since_checkpoint(s, block) {
            return self.ckpt.next_number();
        }
        self.life.segment_born(s)
    }

    /// Called when the live tree drops `block`: pins it if a retained checkpoint references it.
    pub fn pin_if_retained(&mut self, block: u64, segment_blocks: u64) {
        let born = self.born_of(block, segment_blocks);
        let died = self.ckpt.newest();
        if let Some(anchor) = self.life.anchor(born, died) {
            self.pin(block, BlockPin { born, died, anchor }, segment_blocks);
        }
    }

    /// Pins runs of blocks at once, as [`State::pin`] does one block: the blocks dropped
    /// together (a deleted or truncated file's) are mostly a few runs of adjacent blocks pinned
    /// alike, each one entry.
    pub fn pin_all(&mut self, mut runs: Vec<PinRun>, segment_blocks: u64) {
        runs.sort_unstable_by_key(|r| r.start);
        let overlap = runs.windows(2).any(|w| w[0].end() > w[1].start)
            || runs
                .iter()
                .any(|r| self.life.pins().any_in(r.start, r.end() - 1));
        if overlap {
            // Some are pinned already, or listed twice (cannot happen for blocks the tree
            // referenced once): one at a time keeps the counts right.
            for r in runs {
                for block in r.start..r.end() {
                    self.pin(block, r.pin, segment_blocks);
                }
            }
            return;
        }
        for r in runs {
            self.count_pinned(r.start, r.len, segment_blocks, true);
            self.life.pin_new_run(r, segment_blocks);
        }
    }

    pub fn pin(&mut self, block: u64, pin: BlockPin, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        // Dropped twice (cannot happen for a block the tree referenced once): the pin is
        // replaced, and counted once.
        if self.life.pin(block, pin, segment_blocks) {
            // The block was just dropped from the live tree: it must fit beside the others.
            self.seg.assert_fits(s, 1);
            self.seg.add_pinned(s);
        }
    }

    /// Recovery: a pin as the pinned table stores it ([`Retention::load_pin`]): counted in its
    /// segment, no page marked. `false` if the block was pinned already.
    pub fn load_pin(&mut self, block: u64, pin: BlockPin, segment_blocks: u64) -> bool {
        let s = Self::seg_of(block, segment_blocks);
        let new = self.life.load_pin(block, pin);
        if new {
            self.seg.add_pinned(s);
        }
        new
    }

    /// Counts blocks `start .. start + len` pinned (`true`) or released in their segments.
    fn count_pinned(&mut self, start: u64, len: u64, segment_blocks: u64, pinned: bool) {
        let mut b = start;
        while b < start + len {
            let s = Self::seg_of(b, segment_blocks);
            let seg_end = format::FIRST_SEGMENT_BLOCK + (s as u64 + 1) * segment_blocks;
            let n = (seg_end.min(start + len) - b) as u32;
            if pinned {
                self.seg.add_pinned_blocks(s, n);
            } else {
                self.seg.drop_pinned_blocks(s, n);
            }
            b += u64::from(n);
        }
    }

    /// Releases the run of pinned blocks starting at `start`.
    fn unpin_run(&mut self, start: u64, seq: u64, segment_blocks: u64) {
        let r = self.life.unpin_run(start, segment_blocks);
        self.count_pinned(r.start, r.len, segment_blocks, false);
        let (first, last) = (
            Self::seg_of(r.start, segment_blocks),
            Self::seg_of(r.end() - 1, segment_blocks),
        );
        for s in first..=last {
            self.seg.note_dead(s, seq);
        }
    }

    /// Re-anchors or unpins the blocks anchored at `c`, which is no longer retained (or no longer
    /// the newest retained checkpoint of their range).
    pub fn reanchor(&mut self, c: u64, seq: u64, segment_blocks: u64) {
        for r in self.life.pins().anchored_at(c) {
            if self.life.reanchor_run(r.start, c, &r.pin).is_none() {
                self.unpin_run(r.start, seq, segment_blocks);
            }
        }
    }

    /// Stops retaining checkpoint `c` (pruning found it kept by nothing) and frees what only it
    /// pinned.
    pub fn release(&mut self, c: u64, seq: u64, segment_blocks: u64) {
        if self.life.release(c) {
            self.reanchor(c, seq, segment_blocks);
        }
    }

    /// Releases plain checkpoints past the protection period (all of them under pressure),
    /// except the ones views hold, the newest unless a checkpoint is being written (which
    /// becomes the newest), and a snapshot being dropped unless it is that checkpoint. Returns
    /// how many were released.
    pub fn prune(&mut self, seq: u64, segment_blocks: u64, in_commit: bool) -> u64 {
        let out = self.to_prune(in_commit);
        for &c in &out {
            self.release(c, seq, segment_blocks);
        }
        out.len() as u64
    }

    /// The pinned-table pages the next checkpoint writes, with up to `more` pages for what it
    /// supersedes ([`Retention::pinned_pages_after_release`]): the release it makes
    /// ([`State::prune`]) empties the pages that held only pins of the checkpoints it releases
    /// (a dropped snapshot's, the newest plain checkpoint's), and an empty page takes no block.
    pub fn pinned_pages_after_prune(&self, more: u64) -> u64 {
        let released = self.to_prune(true).into_iter().collect();
        self.life.pinned_pages_after_release(&released, more)
    }

    /// The checkpoints [`State::prune`] releases.
    fn to_prune(&self, in_commit: bool) -> Vec<u64> {
        let cutoff = self.life.protection_cutoff(self.life.now_ns());
        let newest = self.ckpt.newest();
        let mut out = Vec::new();
        for (c, k) in self.life.retained_all() {
            if k.snapshot || self.life.is_held(c) {
                continue;
            }
            if !in_commit && self.life.is_dropping(c) {
                // Released with the checkpoint that records its drop, not before it.
                continue;
            }
            if c == newest && !in_commit {
                // The newest checkpoint stays until a newer one is written.
                break;
            }
            if k.time_ns >= cutoff {
                break;
            }
            out.push(c);
        }
        out
    }

    /// Segment `s` can be emptied without pinning its live blocks' old copies: no retained
    /// checkpoint that stays retained (a snapshot, a held view, or a protected plain checkpoint
    /// other than the newest) can reference a block in it.
    pub fn cleanable(&self, s: usize, now: i64) -> bool {
        if self.seg.pinned(s) != 0 {
            return false;
        }
        let born = self.life.segment_born(s);
        let cutoff = self.life.protection_cutoff(now);
        let newest = self.ckpt.newest();
        !self
            .life
            .retained_from(born)
            .any(|(c, k)| k.snapshot || (c != newest && k.time_ns >= cutoff))
            && !self.life.any_held_from(born)
            // The newest checkpoint is released at the cleaning checkpoint only if unprotected.
            && self
                .life
                .retained(newest)
                .is_none_or(|k| k.snapshot || k.time_ns < cutoff || newest < born)
    }
}

/// The newest checkpoint, past its protection period and kept by nothing, had data blocks
/// superseded since, whose space the cleaner may already have reused.
fn superseded(number: u64) -> Error {
    Error::NotFound(format!(
        "checkpoint {number} as it was: it is past its protection period and data it referenced has been overwritten since (make a snapshot, or set a protection period, to keep versions)"
    ))
}

impl Engine {
    /// Writes the three tables and returns where they are. Called by `commit_checkpoint` just
    /// before the root; the pinned table goes last, after everything that may pin a block.
    pub(in crate::tbfs) fn write_tables(&self, m: &mut State) -> Result<[TableRef; TABLES]> {
        let sb = self.segment_blocks();
        // Snapshots.
        if m.life.snapshots_dirty()
            || m.life.table(2).blocks.is_empty() && m.life.snapshot_count() > 0
        {
            let entries: Vec<SnapshotEntry> = m
                .life
                .retained_all()
                .filter(|(_, k)| k.snapshot)
                .map(|(number, k)| SnapshotEntry {
                    number,
                    root: k.root,
                    time_ns: k.time_ns,
                    name: k.name.clone(),
                })
                .collect();
            let per = table_entries_per_page(TABLE_SNAPSHOTS);
            let pages: Vec<Box<format::Block>> =
                entries.chunks(per).map(encode_snapshot_page).collect();
            let mut map = m.life.take_table(2);
            let r = self.write_table_pages(
                m,
                TABLE_SNAPSHOTS,
                &mut map,
                pages
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| (i as u64, Some(p)))
                    .collect(),
            );
            m.life.put_table(2, map);
            r?;
            m.life.snapshots_written();
        }
        // Segment usage: age and birth of every segment whose entry changed.
        let per = table_entries_per_page(TABLE_USAGE) as u64;
        let dirty = m
            .life
            .take_dirty_usage_pages(self.segment_count().div_ceil(per));
        let mut pages = Vec::with_capacity(dirty.len());
        for p in dirty {
            let first = p * per;
            let last = (first + per).min(self.segment_count());
            let entries: Vec<UsageEntry> = (first..last)
                .map(|s| UsageEntry {
                    born: m.life.segment_born(s as usize),
                    written_ns: m.life.segment_written(s as usize),
                })
                .collect();
            pages.push((p, Some(encode_usage_page(&entries))));
        }
        let mut map = m.life.take_table(0);
        let r = self.write_table_pages(m, TABLE_USAGE, &mut map, pages);
        m.life.put_table(0, map);
        r?;
        // Pinned blocks: each page holds the pins of a fixed range of its segment's blocks, so a
        // pin or an unpin rewrites one page, not every pin of the segment.
        let pps = m.life.pinned_pages_per_segment();
        let per = table_entries_per_page(TABLE_PINNED) as u64;
        let dirty = m.life.take_dirty_pinned_pages();
        let mut pages = Vec::with_capacity(dirty.len());
        for p in dirty {
            let seg_start = format::FIRST_SEGMENT_BLOCK + p / pps * sb;
            let start = seg_start + p % pps * per;
            let end = (start + per).min(seg_start + sb);
            let entries: Vec<PinnedEntry> = m
                .life
                .pins()
                .in_range(start, end)
                .map(|(block, p)| PinnedEntry {
                    block,
                    born: p.born,
                    died: p.died,
                })
                .collect();
            pages.push((
                p,
                (!entries.is_empty()).then(|| encode_pinned_page(&entries)),
            ));
        }
        let mut map = m.life.take_table(1);
        let r = self.write_table_pages(m, TABLE_PINNED, &mut map, pages);
        m.life.put_table(1, map);
        r?;
        Ok(std::array::from_fn(|i| TableRef {
            root: m.life.table(i).root,
            height: m.life.table(i).height,
        }))
    }

    /// Writes table pages (`None`: the page becomes a hole) and the table's map.
    fn write_table_pages(
        &self,
        m: &mut State,
        id: u8,
        map: &mut BlockMap,
        pages: Vec<(u64, Option<Box<format::Block>>)>,
    ) -> Result<()> {
        let seq = m.writer.seq();
        let sb = self.segment_blocks();
        let mut highest_written = None;
        for (index, page) in pages {
            let addr = match page {
                Some(p) => {
                    let a = self.log_add(m, DescKind::TablePage, id as u64, 0, index, &p[..])?;
                    m.seg_inc(a, sb);
                    highest_written = highest_written.max(Some(index));
                    a
                }
                None => 0,
            };
            if addr == 0 && map.get(index) == 0 {
                continue;
            }
            let old = map.set(index, addr);
            if old != 0 {
                m.seg_dec_unpinned(old, seq, sb);
            }
        }
        if id == TABLE_SNAPSHOTS {
            // Packed: everything past the pages just written goes.
            let keep = highest_written.map_or(0, |h| h + 1);
            for old in map.truncate(keep) {
                m.seg_dec_unpinned(old, seq, sb);
            }
        } else {
            // Trailing holes need no entries.
            let keep = map
                .blocks
                .iter()
                .rposition(|&a| a != 0)
                .map_or(0, |i| i + 1);
            map.truncate(keep as u64);
        }
        self.write_map(m, DescKind::TableNode, id as u64, map)
    }

    /// Bytes the pool's space divides into (see [`SpaceReport`]). A segment counted with more
    /// blocks live or pinned than it holds poisons the pool, saying which and what it counts.
    pub(in crate::tbfs) fn space_report(&self, m: &State) -> SpaceReport {
        let sb = self.segment_blocks();
        let now = self.now_ns();
        let free = self.free_blocks(m).min(sb * self.segment_count());
        let live: u64 = m.seg.live_counts().iter().map(|&l| l as u64).sum();
        let mut by_snapshots = 0u64;
        for r in m.life.pins().runs() {
            if m.life.snapshot_in(r.pin.born, r.pin.died) {
                by_snapshots += r.len;
            }
        }
        // Dead space the cleaner cannot reach: segments a snapshot or view holds blocks in.
        let free_segs: BTreeSet<usize> = (0..self.segment_count() as usize)
            .filter(|&s| self.segment_free(m, s))
            .collect();
        // Dead blocks in segments the cleaner passes over as giving back too little.
        let mut stranded = 0u64;
        for s in 0..self.segment_count() as usize {
            if free_segs.contains(&s) || m.writer.holds_segment(s as u64) {
                continue;
            }
            let used = m.seg.live(s) as u64 + m.seg.pinned(s) as u64;
            if used == 0 {
                continue;
            }
            let Some(dead) = sb.checked_sub(used) else {
                // Each block is live or pinned, never both (a pin is taken as the live tree
                // drops it): counts adding up to more than the segment no longer match the
                // tree, and the cleaner would act on them. The pool is poisoned with what was
                // found (the caller's call fails with it), not a panic in a statistics call.
                self.poison_reason(format!(
                    "segment table: segment {s} counts {} live and {} pinned blocks, more \
                     than its {sb}",
                    m.seg.live(s),
                    m.seg.pinned(s)
                ));
                continue;
            };
            if (dead as f64) < sb as f64 * crate::tbfs::limits::MIN_RECLAIMABLE {
                stranded += dead;
            }
            let born = m.life.segment_born(s);
            let locked =
                m.life.retained_from(born).any(|(_, k)| k.snapshot) || m.life.any_held_from(born);
            if locked {
                by_snapshots += sb - used;
            }
        }
        let total = sb * self.segment_count();
        let by_snapshots = by_snapshots.min(total - live.min(total));
        let _ = now;
        // Clamped, not checked: `free` comes from segment states and the rest from block counts,
        // and a report is not where a mismatch between the two should stop the pool.
        let reclaimable = total.saturating_sub(live + by_snapshots + free);
        let buffered = self.budget.buffered() / BLOCK_U64;
        // Saturating: what must stay free may exceed what is free; then nothing is available.
        let available =
            (free + reclaimable).saturating_sub(stranded + self.kept_blocks() + buffered);
        SpaceReport {
            size: total * BLOCK_U64,
            live: live * BLOCK_U64,
            pinned_by_snapshots: by_snapshots * BLOCK_U64,
            reclaimable: reclaimable * BLOCK_U64,
            free: free * BLOCK_U64,
            available: available * BLOCK_U64,
        }
    }
}

/// A read-only view of a retained checkpoint. While it exists the checkpoint stays retained.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) inner: Arc<Engine>,
    number: u64,
    time_ns: i64,
    pub(crate) tree: State,
}

impl Snapshot {
    /// The view's directories and inode table, for the lookups by inode number.
    pub(crate) fn names(&self) -> (&Directories, &InodeTable) {
        (&self.tree.dirs, &self.tree.inodes)
    }

    /// The checkpoint this view shows.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// When the checkpoint was written, ns since the Unix epoch.
    pub fn time_ns(&self) -> i64 {
        self.time_ns
    }

    pub fn stat(&self, path: &str) -> Result<Stat> {
        let cell = self.cell(path)?;
        self.inner.stat_cell(&cell)
    }

    /// Entries of a directory, sorted by name.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let ino = self.lookup(path)?;
        let Some(entries) = self.tree.dirs.get(ino) else {
            return Err(Error::NotDir(self.name(path)));
        };
        Ok(crate::tbfs::namespace::dir_entries(entries, |ino| {
            crate::tbfs::namespace::kind_in(&self.tree.inodes, ino)
        }))
    }

    /// Reads up to `buf.len()` bytes of a file at `offset`.
    pub fn pread(&self, path: &str, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.check_usable()?;
        let cell = self.cell(path)?;
        if cell.lock().kind() == FileKind::Dir {
            return Err(Error::IsDir(self.name(path)));
        }
        self.inner.pread_at_rest(&cell, buf, offset)
    }

    /// A whole file.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let cell = self.cell(path)?;
        let size = cell.lock().size();
        if cell.lock().kind() == FileKind::Dir {
            return Err(Error::IsDir(self.name(path)));
        }
        let len = usize::try_from(size)
            .map_err(|_| Error::Invalid(format!("{}: too large to read whole", self.name(path))))?;
        let mut buf = vec![0u8; len];
        let n = self.inner.pread_at_rest(&cell, &mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// A read-only handle to a file in the view.
    pub fn open_file(&self, path: &str) -> Result<SnapshotFile<'_>> {
        let cell = self.cell(path)?;
        if cell.lock().kind() == FileKind::Dir {
            return Err(Error::IsDir(self.name(path)));
        }
        Ok(SnapshotFile {
            view: self,
            cell,
            pos: 0,
        })
    }

    fn name(&self, path: &str) -> String {
        format!("checkpoint {}: {path}", self.number)
    }

    fn lookup(&self, path: &str) -> Result<u64> {
        self.inner
            .lookup(&self.tree.dirs, &self.tree.inodes, path)
            .map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(self.name(path)),
                Error::NotDir(_) => Error::NotDir(self.name(path)),
                other => other,
            })
    }

    fn cell(&self, path: &str) -> Result<Arc<InodeCell>> {
        self.inner.check_usable()?;
        let ino = self.lookup(path)?;
        self.inner.cell(&self.tree.inodes, ino)
    }
}

/// A read-only file in a [`Snapshot`].
#[derive(Debug)]
pub struct SnapshotFile<'a> {
    view: &'a Snapshot,
    cell: Arc<InodeCell>,
    pos: u64,
}

impl SnapshotFile<'_> {
    pub fn stat(&self) -> Result<Stat> {
        self.view.inner.stat_cell(&self.cell)
    }

    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.view.inner.check_usable()?;
        self.view.inner.pread_at_rest(&self.cell, buf, offset)
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.pread(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut m = self.inner.lock_meta();
        let c = self.number;
        if m.life.unhold(c) {
            let seq = m.writer.seq();
            m.reanchor(c, seq, self.inner.segment_blocks());
            m.prune(seq, self.inner.segment_blocks(), false);
        }
    }
}

impl Fs {
    /// Retained checkpoints, oldest first: snapshots, plain checkpoints inside the protection
    /// period, and the newest.
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let mut alone: HashMap<u64, u64> = HashMap::new();
        for r in m.life.pins().runs() {
            if let Some(c) = m.life.sole_owner(&r.pin) {
                *alone.entry(c).or_default() += r.len;
            }
        }
        Ok(m.life
            .retained_all()
            .map(|(number, k)| CheckpointInfo {
                number,
                time_ns: k.time_ns,
                snapshot: k.snapshot,
                name: k.name.clone(),
                pinned_bytes: alone.get(&number).copied().unwrap_or(0) * BLOCK_U64,
            })
            .collect())
    }

    /// Writes a checkpoint now and keeps it as a snapshot; durable when this returns. Returns
    /// its number.
    pub fn snapshot(&self, name: Option<&str>) -> Result<u64> {
        let inner = &self.inner;
        inner.check_writable()?;
        if let Some(n) = name {
            if n.is_empty() || n.len() > SNAPSHOT_NAME_MAX || n.contains('\0') {
                return Err(Error::Invalid(format!(
                    "snapshot name {n:?}: 1 to {SNAPSHOT_NAME_MAX} bytes, no NUL"
                )));
            }
        }
        let mut m = inner.lock_meta();
        inner.check_usable()?;
        // Its checkpoint keeps room for the pinned table that deletes under the snapshot fill
        // (`Engine::deletes_reserve`), so the snapshot's drop can always be written.
        let coming_was = m.life.set_snapshot_coming(true);
        let committed = inner.commit_checkpoint(&mut m);
        m.life.set_snapshot_coming(coming_was);
        committed?;
        // The newest checkpoint is always retained: the commit just made it.
        let number = m.ckpt.newest();
        let was = m.life.set_snapshot(number, true, name.map(str::to_string));
        match inner.refresh_superblock(&mut m) {
            // A checkpoint after it (a cleaning pass's) wrote the snapshot table before a later
            // one found no room: the snapshot stands, made durable by a superblock naming it.
            Err(Error::NoSpace(_)) if m.ckpt.newest() != number => {
                inner.write_superblock(&mut m)?;
                Ok(number)
            }
            // Nothing records the mark: it is undone, so a snapshot the caller was told was
            // refused does not stay in memory and pin what deletes free from then on.
            Err(e @ Error::NoSpace(_)) => {
                m.life.restore_snapshot(number, was);
                Err(e)
            }
            r => r.map(|()| number),
        }
    }

    /// Makes a retained checkpoint a snapshot (`keep`) or a plain checkpoint again, which is
    /// then released if it is older than the protection period. Durable when this returns.
    pub fn set_snapshot(&self, number: u64, keep: bool) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        inner.check_usable()?;
        if keep && m.ckpt.superseded(number) {
            return Err(superseded(number));
        }
        let Some(k) = m.life.retained(number) else {
            return Err(Error::NotFound(format!(
                "checkpoint {number} (not retained; see `checkpoints`)"
            )));
        };
        if k.snapshot == keep {
            return Ok(());
        }
        let name = if keep { k.name.clone() } else { None };
        let was = m.life.set_snapshot(number, keep, name);
        if !keep {
            // No longer a snapshot: the next checkpoint releases it if it is past the protection
            // period, with what only it pinned. While it is retained every pin it covers keeps
            // an anchor, so this unpins nothing, and marking it a snapshot again undoes it.
            let seq = m.writer.seq();
            let pins = m.life.pins().len();
            m.reanchor(number, seq, inner.segment_blocks());
            assert_eq!(
                m.life.pins().len(),
                pins,
                "a retained checkpoint's drop unpinned"
            );
        }
        let before = m.ckpt.newest();
        let dropping = if keep { None } else { Some(number) };
        let dropping_was = m.life.set_dropping(dropping);
        let written = inner.refresh_superblock(&mut m);
        m.life.set_dropping(dropping_was);
        if let Err(Error::NoSpace(_)) = written {
            if m.ckpt.newest() != before {
                // A checkpoint was written with the change (by a cleaning pass the space check
                // ran) before a later one found no room: the change stands, made durable by
                // the superblock naming it, which takes no room.
                return inner.write_superblock(&mut m);
            }
            // Refused whole: nothing was written, and memory goes back to what storage holds.
            m.life.restore_snapshot(number, was);
        }
        written
    }

    /// A read-only view of retained checkpoint `number`, kept retained while the view exists.
    pub fn at(&self, number: u64) -> Result<Snapshot> {
        let inner = &self.inner;
        inner.check_usable()?;
        let (root, time_ns, sealed) = {
            let mut m = inner.lock_meta();
            if m.ckpt.superseded(number) {
                return Err(superseded(number));
            }
            let Some(k) = m.life.retained(number) else {
                return Err(Error::NotFound(format!(
                    "checkpoint {number} (not retained; see `checkpoints`)"
                )));
            };
            let found = (k.root, k.time_ns, m.writer.seq());
            m.life.hold(number);
            found
        };
        // From here the hold keeps every block of the checkpoint; a failed load drops it.
        let hold = HoldGuard { inner, number };
        // The checkpoint is read from the device: its logs must be on it.
        inner.write_logs_until(sealed)?;
        let geo = crate::tbfs::recovery::tree::Geometry {
            segment_blocks: inner.segment_blocks(),
            segment_count: inner.segment_count(),
        };
        let tree = crate::tbfs::recovery::tree::load_tree(inner.dev(), &geo, root)?;
        std::mem::forget(hold);
        let meta = State {
            inodes: crate::tbfs::inode_table::InodeTable::viewed(tree.cells),
            dirs: crate::tbfs::directories::Directories::loaded(tree.dirs),
            ckpt: Checkpoints::viewed(number),
            ..State::default()
        };
        Ok(Snapshot {
            inner: inner.clone(),
            number,
            time_ns,
            tree: meta,
        })
    }

    /// Space accounting (see [`SpaceReport`]).
    pub fn space(&self) -> Result<SpaceReport> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let report = self.inner.space_report(&m);
        // The report may have found the counts it adds up wrong (`Engine::space_report`).
        self.inner.check_not_poisoned()?;
        Ok(report)
    }

    /// How long plain checkpoints are kept from now on (recorded in the superblock at its next
    /// refresh).
    pub fn set_protection_period(&self, d: Duration) {
        let mut m = self.inner.lock_meta();
        m.life.set_protection(d);
    }

    /// The protection period in effect.
    pub fn protection_period(&self) -> Duration {
        self.inner.lock_meta().life.protection()
    }

    /// Runs the cleaner until at least `target_free_fraction` of the pool is free or nothing
    /// more can be cleaned, then makes the result durable.
    pub fn gc(&self, target_free_fraction: f64) -> Result<GcReport> {
        let inner = &self.inner;
        inner.check_writable()?;
        if !(0.0..=1.0).contains(&target_free_fraction) {
            return Err(Error::Invalid(format!(
                "gc target {target_free_fraction}: a fraction of the pool, 0 to 1"
            )));
        }
        let mut m = inner.lock_meta();
        inner.check_usable()?;
        let total = inner.segment_blocks() * inner.segment_count();
        let want = (target_free_fraction * total as f64).ceil() as u64;
        let report = inner.clean(&mut m, want, false)?;
        Ok(report)
    }

    /// One pass of the background cleaner, as its thread runs every period while less than
    /// `gc_free_percent` of the pool is free: victims read and the result flushed without
    /// holding the pool's metadata lock. For a program that turns `background_gc` off and runs
    /// its own maintenance thread (and for tests).
    pub fn clean_step(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.background_clean()
    }
}

/// Drops a view's hold if loading it fails.
struct HoldGuard<'a> {
    inner: &'a Arc<Engine>,
    number: u64,
}

impl Drop for HoldGuard<'_> {
    fn drop(&mut self) {
        let mut m = self.inner.lock_meta();
        if m.life.unhold(self.number) {
            let seq = m.writer.seq();
            m.reanchor(self.number, seq, self.inner.segment_blocks());
        }
    }
}

#[cfg(test)]
impl Engine {
    /// Every segment's live count recomputed from the tree in memory (what recovery would find,
    /// plus what is not yet in a checkpoint). For checks.
    pub(in crate::tbfs) fn recount_live(&self, m: &State) -> Vec<u32> {
        let sb = self.segment_blocks();
        let mut live = vec![0u32; self.segment_count() as usize];
        let mut add = |a: u64| live[State::seg_of(a, sb)] += 1;
        for cell in m.inodes.values() {
            let st = cell.lock();
            st.map()
                .blocks
                .iter()
                .filter(|&&a| a != 0)
                .for_each(|&a| add(a));
            st.map().node_addrs().for_each(&mut add);
        }
        m.ifile
            .map()
            .blocks
            .iter()
            .filter(|&&a| a != 0)
            .for_each(|&a| add(a));
        m.ifile.map().node_addrs().for_each(&mut add);
        for t in m.life.tables() {
            t.blocks.iter().filter(|&&a| a != 0).for_each(|&a| add(a));
            t.node_addrs().for_each(&mut add);
        }
        if m.ckpt.root() != 0 {
            add(m.ckpt.root());
        }
        live
    }
}
