//! fsck: checks a pool without changing it, and salvages a damaged one.
//!
//! [`check`] reads the device and never writes. It verifies, each finding carrying its location:
//!
//! - both superblock copies;
//! - every log in every segment: magic, summary CRC, pool id, that it fits its segment, payload
//!   CRC, and the sequence/previous-CRC chain between neighbouring logs; the roll-forward chain from
//!   the superblock across segments, and why it ends (torn tail, or damage with valid logs after it);
//! - every retained checkpoint (the superblock's, every complete one in the roll-forward chain,
//!   the snapshots and the protection period's plain checkpoints the newest one keeps): its root, the inode file's and every file's block map (node CRCs, levels, heights,
//!   addresses inside the segment area), that no block is claimed twice, and that every block it
//!   uses lies in a log that verifies and whose descriptor says it is that block (data of that inode
//!   at that offset, that map node, that inode page) — which is how damaged file data is found;
//! - the newest checkpoint's tables (segment usage, pinned blocks, snapshots), and that no
//!   retained checkpoint uses a block in a segment the usage table says was entered after it;
//! - inode records, directory blocks, and the namespace: entries name live inodes of the kind they
//!   say, no directory has two parents or lies on a cycle, every inode is reachable from the root
//!   (an unreachable file with no links is an orphan, unlinked while open, which the next open frees),
//!   link counts, and no file maps blocks past its size.
//!
//! [`repair`] makes a damaged pool consistent again, in one of two ways (the report says which):
//!
//! - **in place** when the engine can open the pool (recovery with
//!   [`RecoveryMode::TolerateTail`]): recovery drops logs after damage in the chain and fixes link
//!   counts, file blocks whose logs fail their CRC are rewritten as read (reported as possibly
//!   damaged) and those whose pointer is wrong as zeros, older retained checkpoints that still use
//!   damaged blocks are released (snapshots among them become plain checkpoints first), and a
//!   fresh checkpoint and both superblock copies are written. Every step is an ordinary crash-safe
//!   commit.
//! - **rebuilt** when it cannot (damaged checkpoint metadata, both superblocks lost, a truncated
//!   pool): the newest checkpoint whose root directory loads is salvaged — intact files and
//!   directories, the rest dropped, inodes that are no longer reachable reattached under
//!   `/lost+found` as `#INO`, damaged file blocks as zeros — into a new pool built in memory, which
//!   then replaces the device's contents. This rewrite is not crash-safe: copy the pool first.
//!
//! Both then check the result again. Nothing here panics on any bytes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use super::format::{
    self, decode_dir_block, decode_node, height_for, CheckpointRoot, DescKind, DirRecord,
    InodeRecord, Summary, Superblock, BLOCK, BLOCK_U64, FANOUT, FLAG_AHEAD, FLAG_CHECKPOINT,
    FLAG_DATA_ONLY, FLAG_END, FLAG_PAD, INODES_PER_PAGE, INODE_BYTES, S_IFDIR, S_IFMT,
};
use super::{Config, Error, Fs, OpenFlags, OpenOptions, RecoveryMode, Result};
use crate::dev::Device;

const ROOT_INO: u64 = 1;
/// Where `repair` reattaches inodes it cannot reach from the root.
pub const LOST_FOUND: &str = "lost+found";
/// Bytes read per request while scanning segments.
const READ_CHUNK: u64 = 4 << 20;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, not damage: a torn log tail after a crash, an orphan the next open frees.
    Note,
    /// Damage: something the pool should hold is wrong or missing.
    Damage,
}

/// Where a finding is. Every field that applies is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    /// Superblock copy (0 or 1).
    pub superblock: Option<u8>,
    pub segment: Option<u64>,
    /// Sequence number of the log concerned.
    pub log: Option<u64>,
    pub block: Option<u64>,
    pub checkpoint: Option<u64>,
    pub inode: Option<u64>,
    pub path: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = self.superblock {
            parts.push(format!("superblock {c}"));
        }
        if let Some(s) = self.segment {
            parts.push(format!("segment {s}"));
        }
        if let Some(l) = self.log {
            parts.push(format!("log {l}"));
        }
        if let Some(b) = self.block {
            parts.push(format!("block {b}"));
        }
        if let Some(c) = self.checkpoint {
            parts.push(format!("checkpoint {c}"));
        }
        match (self.inode, &self.path) {
            (Some(i), Some(p)) => parts.push(format!("inode {i} ({p})")),
            (Some(i), None) => parts.push(format!("inode {i}")),
            (None, Some(p)) => parts.push(p.clone()),
            (None, None) => {}
        }
        if parts.is_empty() {
            parts.push("pool".into());
        }
        f.write_str(&parts.join(", "))
    }
}

/// One thing fsck found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub location: Location,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.severity {
            Severity::Note => "note",
            Severity::Damage => "damage",
        };
        write!(f, "{s}: {}: {}", self.location, self.message)
    }
}

/// The overall result of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No damage (notes are possible).
    Clean,
    /// Damage that [`repair`] can salvage around.
    Damaged,
    /// No checkpoint with a usable root directory: nothing to salvage.
    Unrecoverable,
}

/// What was looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsckStats {
    pub superblocks_valid: u32,
    pub generation: u64,
    pub segments: u64,
    pub segments_in_use: u64,
    /// Logs found in the segments (including stale ones of earlier passes).
    pub logs: u64,
    /// Logs in the roll-forward chain after the superblock's checkpoint.
    pub chain_logs: u64,
    /// Why the roll-forward chain ends.
    pub chain_end: String,
    /// Retained checkpoints checked.
    pub checkpoints: Vec<u64>,
    /// Of the newest checkpoint checked:
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub file_bytes: u64,
}

/// What [`check`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsckReport {
    pub verdict: Verdict,
    pub findings: Vec<Finding>,
    pub stats: FsckStats,
}

impl FsckReport {
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Damage)
    }
}

/// How [`repair`] went about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairMethod {
    /// Nothing to repair.
    None,
    /// Recovery with tolerate-tail plus ordinary writes, in place.
    InPlace,
    /// A new pool built from what could be salvaged, written over the device.
    Rebuilt,
}

/// What [`repair`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    pub method: RepairMethod,
    /// Steps taken.
    pub actions: Vec<String>,
    /// What is gone (files, blocks, logs, history).
    pub lost: Vec<String>,
    /// The check before the repair and the one after it.
    pub before: FsckReport,
    pub after: FsckReport,
}

// ---------------------------------------------------------------------------------------------
// Reading

struct Reader<'a> {
    dev: &'a dyn Device,
    blocks: u64,
}

impl Reader<'_> {
    fn block(&self, b: u64) -> std::result::Result<Box<format::Block>, String> {
        if b >= self.blocks {
            return Err(format!("block {b} is past the end of the device"));
        }
        let mut buf = Box::new([0u8; BLOCK]);
        self.dev
            .read_at(b * BLOCK_U64, &mut buf[..])
            .map_err(|e| format!("reading block {b}: {e}"))?;
        Ok(buf)
    }

    /// Blocks `[from, to)` clipped to the device.
    fn range(&self, from: u64, to: u64) -> Result<Vec<u8>> {
        let to = to.min(self.blocks);
        let mut out = vec![0u8; (to.saturating_sub(from) * BLOCK_U64) as usize];
        let mut at = 0usize;
        while at < out.len() {
            let n = (out.len() - at).min(READ_CHUNK as usize);
            let off = from * BLOCK_U64 + at as u64;
            self.dev.read_at(off, &mut out[at..at + n]).map_err(|e| {
                Error::io(
                    format!("{} device: reading {n} bytes at {off}", self.dev.kind()),
                    e,
                )
            })?;
            at += n;
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// The log index: every log found in the segments

#[derive(Debug)]
struct LogEntry {
    start: u64,
    segment: u64,
    summary: Summary,
    crc: u32,
    payload_ok: bool,
}

impl LogEntry {
    fn end(&self) -> u64 {
        self.start + 1 + self.summary.payload_blocks as u64
    }

    /// The descriptor covering `block` of this log's payload.
    fn descriptor_of(&self, block: u64) -> Option<(format::Descriptor, u64)> {
        let mut at = self.start + 1;
        for d in &self.summary.descriptors {
            let n = d.blocks as u64;
            if block >= at && block < at + n {
                return Some((*d, block - at));
            }
            at += n;
        }
        None
    }
}

#[derive(Default)]
struct LogIndex {
    /// Sorted by start block.
    logs: Vec<LogEntry>,
    by_start: HashMap<u64, usize>,
}

impl LogIndex {
    /// The log whose payload holds `block`.
    fn holding(&self, block: u64) -> Option<&LogEntry> {
        let i = self.logs.partition_point(|l| l.start <= block);
        let l = self.logs.get(i.checked_sub(1)?)?;
        (block > l.start && block < l.end()).then_some(l)
    }

    fn at(&self, start: u64) -> Option<&LogEntry> {
        self.by_start.get(&start).map(|&i| &self.logs[i])
    }
}

/// The pool's layout as fsck uses it (from a superblock, or guessed when both are lost).
#[derive(Debug, Clone)]
struct Geometry {
    pool_id: [u8; 16],
    /// `(segment, first block, end block)` of every segment.
    segments: Vec<(u64, u64, u64)>,
    segment_blocks: u64,
    first: u64,
    end: u64,
}

impl Geometry {
    fn from_sb(sb: &Superblock) -> Geometry {
        let segments = (0..sb.segment_count)
            .map(|s| {
                let a = format::FIRST_SEGMENT_BLOCK + s * sb.segment_blocks;
                (s, a, a + sb.segment_blocks)
            })
            .collect();
        Geometry {
            pool_id: sb.pool_id,
            segments,
            segment_blocks: sb.segment_blocks,
            first: format::FIRST_SEGMENT_BLOCK,
            end: format::FIRST_SEGMENT_BLOCK + sb.segment_blocks * sb.segment_count,
        }
    }

    fn contains(&self, b: u64) -> bool {
        b >= self.first && b < self.end
    }

    fn segment_of(&self, b: u64) -> u64 {
        (b - self.first) / self.segment_blocks.max(1)
    }
}

/// Walks every segment from its start: valid summaries are indexed with their payload CRC
/// checked; after anything else the walk moves on one block at a time until the next summary of
/// this pool, so damage in one log does not hide the logs after it.
fn index_logs(rd: &Reader<'_>, geo: &Geometry, progress: &dyn Fn(u64, u64)) -> Result<LogIndex> {
    let mut index = LogIndex::default();
    let total = geo.segments.len() as u64;
    for &(seg, from, to) in &geo.segments {
        progress(seg, total);
        if from >= rd.blocks {
            break;
        }
        let bytes = rd.range(from, to)?;
        let have = bytes.len() as u64 / BLOCK_U64;
        let blk = |b: u64| {
            &bytes[((b - from) * BLOCK_U64) as usize..((b - from + 1) * BLOCK_U64) as usize]
        };
        let mut p = from;
        while p < from + have {
            let decoded = Summary::decode(blk(p))
                .ok()
                .filter(|(s, _)| s.pool_id == geo.pool_id)
                .filter(|(s, _)| p + 1 + s.payload_blocks as u64 <= to);
            let Some((summary, crc)) = decoded else {
                p += 1;
                continue;
            };
            let end = p + 1 + summary.payload_blocks as u64;
            let payload_ok = end <= from + have
                && format::crc_blocks(
                    &bytes[((p + 1 - from) * BLOCK_U64) as usize
                        ..((end - from) * BLOCK_U64) as usize],
                ) == summary.payload_crc;
            index.by_start.insert(p, index.logs.len());
            index.logs.push(LogEntry {
                start: p,
                segment: seg,
                summary,
                crc,
                payload_ok,
            });
            p = end;
        }
    }
    Ok(index)
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

/// What a block is used as by a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Root,
    InodeMapNode { level: u8, index: u64 },
    InodePage { page: u64 },
    MapNode { ino: u64, level: u8, index: u64 },
    Data { ino: u64, block: u64 },
    TableNode { table: u8, level: u8, index: u64 },
    TablePage { table: u8, page: u64 },
}

fn table_name(id: u8) -> &'static str {
    match id {
        format::TABLE_USAGE => "segment usage",
        format::TABLE_PINNED => "pinned-block",
        format::TABLE_SNAPSHOTS => "snapshot",
        _ => "unknown",
    }
}

impl Claim {
    fn describe(&self) -> String {
        match *self {
            Claim::Root => "the checkpoint root".into(),
            Claim::InodeMapNode { level, index } => {
                format!("inode-file map node {index} at level {level}")
            }
            Claim::InodePage { page } => format!("inode page {page}"),
            Claim::MapNode { ino, level, index } => {
                format!("inode {ino}'s map node {index} at level {level}")
            }
            Claim::Data { ino, block } => format!("inode {ino}'s block {block}"),
            Claim::TableNode {
                table,
                level,
                index,
            } => format!(
                "{} table map node {index} at level {level}",
                table_name(table)
            ),
            Claim::TablePage { table, page } => {
                format!("{} table page {page}", table_name(table))
            }
        }
    }

    fn ino(&self) -> Option<u64> {
        match *self {
            Claim::MapNode { ino, .. } | Claim::Data { ino, .. } => Some(ino),
            _ => None,
        }
    }

    /// Whether the descriptor `d` (at `within` blocks into its extent) wrote this block.
    fn matches(&self, d: &format::Descriptor, within: u64) -> bool {
        let at = d.offset.wrapping_add(within);
        match *self {
            Claim::Root => d.kind == DescKind::Root,
            Claim::InodeMapNode { level, index } => {
                d.kind == DescKind::InodeMapNode && d.level == level && at == index
            }
            Claim::InodePage { page } => d.kind == DescKind::InodePage && at == page,
            Claim::MapNode { ino, level, index } => {
                d.kind == DescKind::MapNode && d.ino == ino && d.level == level && at == index
            }
            Claim::Data { ino, block } => {
                matches!(d.kind, DescKind::Data | DescKind::Placed) && d.ino == ino && at == block
            }
            Claim::TableNode {
                table,
                level,
                index,
            } => {
                d.kind == DescKind::TableNode
                    && d.ino == u64::from(table)
                    && d.level == level
                    && at == index
            }
            Claim::TablePage { table, page } => {
                d.kind == DescKind::TablePage && d.ino == u64::from(table) && at == page
            }
        }
    }
}

/// Marks a file block whose contents could not be read back.
const LOST: u64 = u64::MAX;

#[derive(Debug, Clone)]
struct InodeView {
    rec: InodeRecord,
    /// Address of every file block (0: hole, `LOST`: its map node is damaged).
    blocks: Vec<u64>,
    /// Directory entries that loaded (directories only).
    entries: Vec<DirRecord>,
    /// File blocks whose pointer is wrong (another block, or outside the pool): unreadable.
    bad_blocks: BTreeSet<u64>,
    /// File blocks read from a log that fails its payload CRC or whose summary is damaged: the
    /// bytes are there but cannot be vouched for.
    suspect: BTreeSet<u64>,
}

impl InodeView {
    fn is_dir(&self) -> bool {
        self.rec.mode & S_IFMT == S_IFDIR
    }
}

/// One checkpoint as loaded, tolerating damage.
#[derive(Debug, Clone)]
struct CheckpointView {
    number: u64,
    root_block: u64,
    /// Address of every inode page (for tests that damage one).
    #[cfg_attr(not(test), allow(dead_code))]
    pages: Vec<u64>,
    inodes: BTreeMap<u64, InodeView>,
    /// Path of every inode reachable from the root.
    paths: HashMap<u64, String>,
    /// Whether its root directory loaded.
    usable: bool,
    /// The root of the checkpoint before it, and the oldest plain checkpoint it keeps.
    prev_root: u64,
    oldest_protected: u64,
    /// Its tables, as far as they loaded.
    snapshots: Vec<format::SnapshotEntry>,
    usage: Vec<Option<format::UsageEntry>>,
    /// Every block it uses.
    blocks: Vec<u64>,
}

struct Checker<'a> {
    rd: Reader<'a>,
    geo: Geometry,
    index: LogIndex,
    findings: Vec<Finding>,
    /// File blocks (inode, block) that data-only logs later in the roll-forward chain rewrote,
    /// for the checkpoint being checked: recovery replays those logs over its pointers, so the
    /// blocks it names there are not part of the recovered state, and their space may have been
    /// reused (see `Meta::seg_supersede`).
    superseded: HashSet<(u64, u64)>,
}

impl Checker<'_> {
    fn push(&mut self, severity: Severity, location: Location, message: impl Into<String>) {
        self.findings.push(Finding {
            severity,
            location,
            message: message.into(),
        });
    }

    fn damage(&mut self, location: Location, message: impl Into<String>) {
        self.push(Severity::Damage, location, message);
    }

    /// Reads a block map tolerantly; damaged subtrees become `LOST` blocks.
    #[allow(clippy::too_many_arguments)]
    fn load_map(
        &mut self,
        ckpt: u64,
        ino: Option<u64>,
        table: Option<u8>,
        root: u64,
        height: u8,
        claims: &mut Vec<(u64, Claim)>,
        limit: u64,
    ) -> (Vec<u64>, bool) {
        let loc = |block: Option<u64>| Location {
            checkpoint: Some(ckpt),
            inode: ino,
            block,
            ..Location::default()
        };
        let what = match (ino, table) {
            (Some(i), _) => format!("inode {i}'s block map"),
            (None, Some(t)) => format!("the {} table's map", table_name(t)),
            (None, None) => "the inode file's map".to_string(),
        };
        if root == 0 {
            return (Vec::new(), false);
        }
        if !self.geo.contains(root) {
            self.damage(
                loc(None),
                format!("{what}: root {root} lies outside the segment area"),
            );
            return (vec![LOST], true);
        }
        if height == 0 {
            return (vec![root], false);
        }
        let mut damaged = false;
        // (level, index, address) of the nodes at the current level.
        let mut level_nodes: Vec<u64> = vec![root];
        let mut level = height;
        loop {
            let span = (FANOUT as u64).saturating_pow(level as u32 - 1);
            let mut children: Vec<u64> = Vec::with_capacity(level_nodes.len() * FANOUT);
            for (i, &addr) in level_nodes.iter().enumerate() {
                if addr == 0 {
                    children.extend(std::iter::repeat_n(0, FANOUT));
                    continue;
                }
                if addr == LOST {
                    children.extend(std::iter::repeat_n(LOST, FANOUT));
                    continue;
                }
                let claim = match (ino, table) {
                    (Some(ino), _) => Claim::MapNode {
                        ino,
                        level,
                        index: i as u64,
                    },
                    (None, Some(table)) => Claim::TableNode {
                        table,
                        level,
                        index: i as u64,
                    },
                    (None, None) => Claim::InodeMapNode {
                        level,
                        index: i as u64,
                    },
                };
                let bad = if !self.geo.contains(addr) {
                    Some(format!(
                        "{what}: level-{level} node {i} points outside the segment area ({addr})"
                    ))
                } else {
                    claims.push((addr, claim));
                    match self.rd.block(addr) {
                        Err(e) => Some(format!("{what}: level-{level} node {i}: {e}")),
                        Ok(b) => match decode_node(&b[..], level) {
                            Ok(c) => {
                                children.extend(c);
                                None
                            }
                            Err(e) => Some(format!("{what}: level-{level} node {i}: {e}")),
                        },
                    }
                };
                if let Some(msg) = bad {
                    self.damage(loc(Some(addr)), msg);
                    damaged = true;
                    children.extend(std::iter::repeat_n(LOST, FANOUT));
                }
                if children.len() as u64 > limit.div_ceil(span).saturating_add(FANOUT as u64) {
                    self.damage(loc(None), format!("{what} is larger than any file may be"));
                    return (vec![LOST], true);
                }
            }
            while children.last() == Some(&0) {
                children.pop();
            }
            if level == 1 {
                // Data addresses must lie in the segment area.
                for c in children.iter_mut() {
                    if *c != 0 && *c != LOST && !self.geo.contains(*c) {
                        let bad = *c;
                        *c = LOST;
                        damaged = true;
                        self.findings.push(Finding {
                            severity: Severity::Damage,
                            location: loc(None),
                            message: format!(
                                "{what}: an entry points outside the segment area ({bad})"
                            ),
                        });
                    }
                }
                if !damaged && height_for(children.len() as u64) != height {
                    self.damage(
                        loc(Some(root)),
                        format!(
                            "{what} has height {height} but {} blocks need height {}",
                            children.len(),
                            height_for(children.len() as u64)
                        ),
                    );
                    damaged = true;
                }
                return (children, damaged);
            }
            level_nodes = children;
            level -= 1;
        }
    }

    /// The block map an inode record holds itself (format 3): runs outside the segment area
    /// become `LOST` blocks, and a map past the largest file one `LOST` block.
    fn record_map(
        &mut self,
        ckpt: u64,
        ino: u64,
        extents: &format::Extents,
        limit: u64,
    ) -> (Vec<u64>, bool) {
        let loc = Location {
            checkpoint: Some(ckpt),
            inode: Some(ino),
            ..Location::default()
        };
        if extents.blocks() > limit {
            self.damage(
                loc,
                format!("inode {ino}'s block map is larger than any file may be"),
            );
            return (vec![LOST], true);
        }
        let mut blocks = extents.expand();
        let outside: Vec<(u64, u32)> = extents.runs_outside(|b| self.geo.contains(b)).collect();
        for &(addr, n) in &outside {
            let last = addr.saturating_add(n as u64 - 1);
            for b in blocks.iter_mut().filter(|b| (addr..=last).contains(*b)) {
                *b = LOST;
            }
            self.damage(
                loc.clone(),
                format!(
                    "inode {ino}'s block map: a run of {n} blocks at {addr} lies outside the \
                     segment area"
                ),
            );
        }
        (blocks, !outside.is_empty())
    }

    /// Loads and checks one checkpoint. `None` when its root does not decode.
    fn checkpoint(
        &mut self,
        root_block: u64,
        expect: Option<(u64, Option<u64>)>,
        with_tables: bool,
    ) -> Option<CheckpointView> {
        let loc = Location {
            block: Some(root_block),
            checkpoint: expect.map(|e| e.0),
            ..Location::default()
        };
        let root = match self
            .rd
            .block(root_block)
            .map_err(format::Invalid)
            .and_then(|b| CheckpointRoot::decode(&b[..]))
        {
            Ok(r) => r,
            Err(e) => {
                self.damage(loc, format!("checkpoint root: {e}"));
                return None;
            }
        };
        let n = root.number;
        if let Some((number, sequence)) = expect {
            if root.number != number || sequence.is_some_and(|s| s != root.sequence) {
                self.damage(
                    loc.clone(),
                    format!(
                        "checkpoint root holds number {} of log {}, but the pool names number {number}{} here",
                        root.number,
                        root.sequence,
                        sequence.map(|s| format!(" of log {s}")).unwrap_or_default()
                    ),
                );
            }
        }
        let cloc = |ino: Option<u64>, block: Option<u64>| Location {
            checkpoint: Some(n),
            inode: ino,
            block,
            ..Location::default()
        };
        let mut claims: Vec<(u64, Claim)> = vec![(root_block, Claim::Root)];
        let (pages, _) = self.load_map(
            n,
            None,
            None,
            root.ifile_root,
            root.ifile_height,
            &mut claims,
            root.ifile_pages.max(1),
        );
        if pages.len() as u64 > root.ifile_pages {
            self.damage(
                cloc(None, Some(root_block)),
                format!(
                    "the inode file maps {} pages but the root says {}",
                    pages.len(),
                    root.ifile_pages
                ),
            );
        }
        let mut records: BTreeMap<u64, InodeRecord> = BTreeMap::new();
        for (p, &addr) in pages.iter().enumerate() {
            let p = p as u64;
            if addr == 0 {
                continue;
            }
            if addr == LOST {
                // Already reported with the node that lost it.
                continue;
            }
            claims.push((addr, Claim::InodePage { page: p }));
            let page = match self.rd.block(addr) {
                Ok(b) => b,
                Err(e) => {
                    self.damage(cloc(None, Some(addr)), format!("inode page {p}: {e}"));
                    continue;
                }
            };
            for slot in 0..INODES_PER_PAGE {
                let ino = p * INODES_PER_PAGE as u64 + slot as u64;
                let bytes = &page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES];
                match InodeRecord::decode(bytes) {
                    Ok(None) => {}
                    Ok(Some(r)) if r.ino != ino || ino >= root.next_ino => {
                        self.damage(
                            cloc(Some(ino), Some(addr)),
                            format!(
                                "inode page {p} slot {slot} holds a record for inode {}",
                                r.ino
                            ),
                        );
                    }
                    Ok(Some(r)) => {
                        records.insert(ino, r);
                    }
                    Err(e) => {
                        self.damage(
                            cloc(Some(ino), Some(addr)),
                            format!("inode page {p} slot {slot}: {e}"),
                        );
                    }
                }
            }
        }
        let file_limit = super::engine::FILE_BYTES_MAX / BLOCK_U64;
        let mut inodes: BTreeMap<u64, InodeView> = BTreeMap::new();
        for (&ino, &rec) in &records {
            let (blocks, _) = if rec.extents.is_empty() {
                self.load_map(
                    n,
                    Some(ino),
                    None,
                    rec.root,
                    rec.height,
                    &mut claims,
                    file_limit,
                )
            } else {
                self.record_map(n, ino, &rec.extents, file_limit)
            };
            let v = InodeView {
                rec,
                blocks,
                entries: Vec::new(),
                bad_blocks: BTreeSet::new(),
                suspect: BTreeSet::new(),
            };
            for (i, &a) in v.blocks.iter().enumerate() {
                if a != 0 && a != LOST {
                    claims.push((
                        a,
                        Claim::Data {
                            ino,
                            block: i as u64,
                        },
                    ));
                }
            }
            if !v.is_dir() {
                let mapped_end = v
                    .blocks
                    .iter()
                    .rposition(|&a| a != 0)
                    .map_or(0, |i| i as u64 + 1);
                if mapped_end > rec.size.div_ceil(BLOCK_U64) {
                    self.damage(
                        cloc(Some(ino), None),
                        format!(
                            "file of {} bytes maps block {} past its end",
                            rec.size,
                            mapped_end - 1
                        ),
                    );
                }
            }
            inodes.insert(ino, v);
        }

        // The tables: segment usage, pinned blocks, snapshots.
        let mut snapshots = Vec::new();
        let mut usage: Vec<Option<format::UsageEntry>> = vec![None; self.geo.segments.len()];
        // Only the newest checkpoint's tables are in use: older ones' are not kept.
        let tables = if with_tables { &root.tables[..] } else { &[] };
        for (i, t) in tables.iter().enumerate() {
            let id = i as u8 + 1;
            let (pages, _) = self.load_map(
                n,
                None,
                Some(id),
                t.root,
                t.height,
                &mut claims,
                u64::MAX / 2,
            );
            let per = format::table_entries_per_page(id) as u64;
            for (p, &addr) in pages.iter().enumerate() {
                let p = p as u64;
                if addr == 0 || addr == LOST {
                    continue;
                }
                claims.push((addr, Claim::TablePage { table: id, page: p }));
                let here = cloc(None, Some(addr));
                let what = format!("{} table page {p}", table_name(id));
                let b = match self.rd.block(addr) {
                    Ok(b) => b,
                    Err(e) => {
                        self.damage(here, format!("{what}: {e}"));
                        continue;
                    }
                };
                let problem = match id {
                    format::TABLE_USAGE => match format::decode_usage_page(&b[..]) {
                        Ok(es) => {
                            let mut bad = None;
                            for (j, e) in es.into_iter().enumerate() {
                                match usage.get_mut((p * per + j as u64) as usize) {
                                    Some(slot) => *slot = Some(e),
                                    None => bad = Some("entries past the last segment".to_string()),
                                }
                            }
                            bad
                        }
                        Err(e) => Some(e.0),
                    },
                    format::TABLE_PINNED => match format::decode_pinned_page(&b[..]) {
                        Ok(es) => es
                            .iter()
                            .find(|e| !self.geo.contains(e.block) || e.died > n)
                            .map(|e| {
                                format!(
                                    "pinned block {} ({}..={}) out of range",
                                    e.block, e.born, e.died
                                )
                            }),
                        Err(e) => Some(e.0),
                    },
                    _ => match format::decode_snapshot_page(&b[..]) {
                        Ok(es) => {
                            let bad = es
                                .iter()
                                .find(|e| e.number > n || !self.geo.contains(e.root))
                                .map(|e| {
                                    format!("snapshot {} (root {}) out of range", e.number, e.root)
                                });
                            snapshots.extend(es);
                            bad
                        }
                        Err(e) => Some(e.0),
                    },
                };
                if let Some(msg) = problem {
                    self.damage(here, format!("{what}: {msg}"));
                }
            }
        }

        // No block used twice; every block in a log that verifies and says it is that block.
        let mut owner: HashMap<u64, Claim> = HashMap::with_capacity(claims.len());
        let mut bad_logs: BTreeMap<u64, Vec<Claim>> = BTreeMap::new();
        let superseded = std::mem::take(&mut self.superseded);
        let stale = |claim: &Claim| {
            matches!(claim, Claim::Data { ino, block } if superseded.contains(&(*ino, *block))
                && inodes.get(ino).is_some_and(|v| !v.is_dir()))
        };
        claims.retain(|(_, c)| !stale(c));
        for &(block, claim) in &claims {
            if let Some(prev) = owner.insert(block, claim) {
                self.damage(
                    cloc(claim.ino(), Some(block)),
                    format!(
                        "block used twice: as {} and as {}",
                        prev.describe(),
                        claim.describe()
                    ),
                );
                continue;
            }
            // File data has no CRC of its own: its log's payload CRC vouches for it. Everything
            // else (nodes, pages, directory blocks, the root) carries its own CRC, checked as it
            // loaded.
            let file_data = matches!(claim, Claim::Data { ino, .. } if inodes.get(&ino).is_some_and(|v| !v.is_dir()));
            let verdict = match self.index.holding(block) {
                None => {
                    if let Claim::Data { ino, block: fb } = claim {
                        if let Some(v) = inodes.get_mut(&ino).filter(|_| file_data) {
                            v.suspect.insert(fb);
                        }
                    }
                    Err(format!(
                        "{} lies in no log that verifies (its log's summary is damaged or gone)",
                        claim.describe()
                    ))
                }
                Some(log) => match log.descriptor_of(block) {
                    Some((d, within)) if claim.matches(&d, within) => {
                        if log.payload_ok || !file_data {
                            Ok(())
                        } else {
                            bad_logs.entry(log.start).or_default().push(claim);
                            Ok(())
                        }
                    }
                    Some((d, within)) => Err(format!(
                        "{} is not what log {} wrote there ({:?} of inode {} at {})",
                        claim.describe(),
                        log.summary.sequence,
                        d.kind,
                        d.ino,
                        d.offset.wrapping_add(within)
                    )),
                    None => Err(format!(
                        "{} lies in log {} but no descriptor covers it",
                        claim.describe(),
                        log.summary.sequence
                    )),
                },
            };
            if let Err(msg) = verdict {
                self.damage(cloc(claim.ino(), Some(block)), msg);
                if let Claim::Data { ino, block: fb } = claim {
                    if let Some(v) = inodes.get_mut(&ino) {
                        if !v.suspect.contains(&fb) {
                            v.bad_blocks.insert(fb);
                        }
                    }
                }
            }
        }
        for (start, held) in bad_logs {
            let seq = self.index.at(start).map(|l| l.summary.sequence);
            let mut what: Vec<String> = held.iter().take(6).map(Claim::describe).collect();
            if held.len() > 6 {
                what.push(format!("{} more", held.len() - 6));
            }
            self.damage(
                Location {
                    log: seq,
                    block: Some(start),
                    checkpoint: Some(n),
                    segment: Some(self.geo.segment_of(start)),
                    ..Location::default()
                },
                format!(
                    "payload CRC mismatch in a log holding live blocks: {}",
                    what.join(", ")
                ),
            );
            for c in held {
                if let Claim::Data { ino, block } = c {
                    if let Some(v) = inodes.get_mut(&ino) {
                        v.suspect.insert(block);
                    }
                }
            }
        }

        // Directory contents. Damaged metadata blocks (those with their own CRC) are dropped.
        let dir_inos: Vec<u64> = inodes
            .iter()
            .filter(|(_, v)| v.is_dir())
            .map(|(&i, _)| i)
            .collect();
        for ino in dir_inos {
            let blocks = inodes[&ino].blocks.clone();
            let mut entries = Vec::new();
            for (i, &a) in blocks.iter().enumerate() {
                if a == 0 {
                    continue;
                }
                if a == LOST {
                    self.damage(
                        cloc(Some(ino), None),
                        format!("directory block {i} is lost with its map node"),
                    );
                    continue;
                }
                match self.rd.block(a).map_err(format::Invalid).and_then(|b| {
                    let mut out = Vec::new();
                    decode_dir_block(&b[..], &mut out).map(|()| out)
                }) {
                    Ok(es) => entries.extend(es),
                    Err(e) => {
                        self.damage(
                            cloc(Some(ino), Some(a)),
                            format!("directory block {i}: {e}"),
                        );
                    }
                }
            }
            let mut names = BTreeSet::new();
            entries.retain(|e| {
                if names.insert(e.name.clone()) {
                    true
                } else {
                    self.findings.push(Finding {
                        severity: Severity::Damage,
                        location: cloc(Some(ino), None),
                        message: format!("directory names {:?} twice", e.name),
                    });
                    false
                }
            });
            inodes.get_mut(&ino).expect("dir").entries = entries;
        }

        // The namespace: a tree over live inodes, rooted at inode 1.
        let usable = inodes.get(&ROOT_INO).is_some_and(InodeView::is_dir);
        if !usable {
            self.damage(cloc(Some(ROOT_INO), None), "no root directory");
        }
        let mut paths: HashMap<u64, String> = HashMap::new();
        let mut parents: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut refs: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for (&dir, v) in &inodes {
            for e in &v.entries {
                let child = inodes.get(&e.ino);
                let problem = match child {
                    None => Some(format!(
                        "{:?} names inode {}, which is not in use",
                        e.name, e.ino
                    )),
                    Some(c) if c.is_dir() != e.is_dir => Some(format!(
                        "{:?} says inode {} is a {} but it is a {}",
                        e.name,
                        e.ino,
                        if e.is_dir { "directory" } else { "file" },
                        if c.is_dir() { "directory" } else { "file" }
                    )),
                    Some(_) if e.ino == ROOT_INO => {
                        Some(format!("{:?} names the root directory", e.name))
                    }
                    _ => None,
                };
                if let Some(msg) = problem {
                    self.findings.push(Finding {
                        severity: Severity::Damage,
                        location: cloc(Some(dir), None),
                        message: msg,
                    });
                    continue;
                }
                *refs.entry(e.ino).or_default() += 1;
                parents.entry(e.ino).or_default().push(dir);
                if e.is_dir {
                    *subdirs.entry(dir).or_default() += 1;
                }
            }
        }
        if usable {
            paths.insert(ROOT_INO, "/".into());
            let mut stack = vec![ROOT_INO];
            while let Some(d) = stack.pop() {
                let base = paths[&d].clone();
                for e in &inodes[&d].entries {
                    if !inodes.contains_key(&e.ino)
                        || e.ino == ROOT_INO
                        || paths.contains_key(&e.ino)
                    {
                        continue;
                    }
                    if inodes[&e.ino].is_dir() != e.is_dir {
                        continue;
                    }
                    let p = if base == "/" {
                        format!("/{}", e.name)
                    } else {
                        format!("{base}/{}", e.name)
                    };
                    paths.insert(e.ino, p);
                    if e.is_dir {
                        stack.push(e.ino);
                    }
                }
            }
        }
        for (&ino, v) in &inodes {
            let path = paths.get(&ino).cloned();
            let loc = Location {
                path: path.clone(),
                ..cloc(Some(ino), None)
            };
            let n_parents = parents.get(&ino).map_or(0, Vec::len);
            if v.is_dir() && ino != ROOT_INO && n_parents > 1 {
                self.damage(loc.clone(), format!("directory has {n_parents} parents"));
            }
            if usable && path.is_none() {
                if !v.is_dir() && v.rec.nlink == 0 && n_parents == 0 {
                    self.push(
                        Severity::Note,
                        loc.clone(),
                        "orphan (unlinked while open); the next open frees it",
                    );
                } else if n_parents > 0 {
                    self.damage(loc.clone(), "unreachable from the root: on a directory cycle or under a detached directory");
                } else {
                    self.damage(
                        loc.clone(),
                        format!("unreachable from the root (link count {})", v.rec.nlink),
                    );
                }
                continue;
            }
            let expect = if v.is_dir() {
                2 + subdirs.get(&ino).copied().unwrap_or(0)
            } else {
                refs.get(&ino).copied().unwrap_or(0)
            };
            if path.is_some() && v.rec.nlink != expect {
                self.damage(
                    loc,
                    format!("link count {} but {expect} expected", v.rec.nlink),
                );
            }
        }
        Some(CheckpointView {
            number: n,
            root_block,
            inodes,
            paths,
            usable,
            pages,
            prev_root: root.prev_root,
            oldest_protected: root.oldest_protected,
            snapshots,
            usage,
            blocks: claims.iter().map(|c| c.0).collect(),
        })
    }
}

/// Reads both superblock copies: the valid ones, and findings for the others. A copy that is valid
/// but describes a pool longer than the device (a truncated pool file) comes back in the second
/// list, so the layout is still known.
fn superblocks(
    rd: &Reader<'_>,
    findings: &mut Vec<Finding>,
) -> (Vec<(u8, Superblock)>, Vec<Superblock>) {
    let mut valid = Vec::new();
    let mut truncated = Vec::new();
    for copy in 0..format::SUPERBLOCKS {
        let loc = Location {
            superblock: Some(copy as u8),
            block: Some(copy),
            ..Location::default()
        };
        let r = rd
            .block(copy)
            .map_err(format::Invalid)
            .and_then(|b| Superblock::decode(&b[..], rd.blocks * BLOCK_U64));
        match r {
            Ok(sb) => valid.push((copy as u8, sb)),
            Err(e) => {
                if let Ok(sb) = rd
                    .block(copy)
                    .map_err(format::Invalid)
                    .and_then(|b| Superblock::decode(&b[..], u64::MAX))
                {
                    truncated.push(sb);
                }
                findings.push(Finding {
                    severity: Severity::Damage,
                    location: loc,
                    message: format!("invalid: {e}"),
                })
            }
        }
    }
    (valid, truncated)
}

/// Everything a check learned, for `repair`.
struct Analysis {
    report: FsckReport,
    sb: Option<Superblock>,
    index: LogIndex,
    /// Checkpoints checked, oldest first.
    views: Vec<CheckpointView>,
    /// Data-only logs after the newest checkpoint in the chain (indices into `index`), each with
    /// the files whose data in it recovery leaves out (`replayed_data_logs`).
    tail: Vec<(usize, BTreeSet<u64>)>,
    /// The newest checkpoint the pool names (whether or not it loads).
    newest: Option<u64>,
}

/// Checks the pool on `dev` without writing anything.
pub fn check(dev: &dyn Device) -> Result<FsckReport> {
    Ok(analyse(dev, &|_, _| {})?.report)
}

/// [`check`], calling `progress(segments read, segments)` as it reads the segments (most of the
/// time a check takes).
pub fn check_with_progress(dev: &dyn Device, progress: &dyn Fn(u64, u64)) -> Result<FsckReport> {
    Ok(analyse(dev, progress)?.report)
}

fn analyse(dev: &dyn Device, progress: &dyn Fn(u64, u64)) -> Result<Analysis> {
    let rd = Reader {
        dev,
        blocks: dev.len() / BLOCK_U64,
    };
    let mut findings = Vec::new();
    let mut stats = FsckStats::default();
    let (valid, truncated) = superblocks(&rd, &mut findings);
    stats.superblocks_valid = valid.len() as u32;
    let sb = valid
        .iter()
        .map(|(_, sb)| sb)
        .max_by_key(|sb| sb.generation)
        .or_else(|| truncated.iter().max_by_key(|sb| sb.generation))
        .cloned();
    if valid.len() == 2 && valid[0].1.pool_id != valid[1].1.pool_id {
        findings.push(Finding {
            severity: Severity::Damage,
            location: Location::default(),
            message: "the two superblock copies belong to different pools".into(),
        });
    }

    let geo = match &sb {
        Some(sb) => Some(Geometry::from_sb(sb)),
        None => guess_geometry(&rd)?,
    };
    let Some(geo) = geo else {
        findings.push(Finding {
            severity: Severity::Damage,
            location: Location::default(),
            message: "no valid superblock and no checkpoint found by scanning the device".into(),
        });
        return Ok(Analysis {
            report: FsckReport {
                verdict: Verdict::Unrecoverable,
                findings,
                stats,
            },
            sb: None,
            index: LogIndex::default(),
            views: Vec::new(),
            tail: Vec::new(),
            newest: None,
        });
    };
    let index = index_logs(&rd, &geo, progress)?;
    stats.segments = geo.segments.len() as u64;
    stats.logs = index.logs.len() as u64;
    stats.segments_in_use = index
        .logs
        .iter()
        .map(|l| l.segment)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    let mut ck = Checker {
        rd,
        geo: geo.clone(),
        index,
        findings,
        superseded: HashSet::new(),
    };

    // The roll-forward chain and the retained checkpoints: (root block, expected number, sequence).
    let mut retained: Vec<(u64, Expected)> = Vec::new();
    // For each of those from the chain: where in the chain the logs replayed over it begin.
    let mut replayed_from: Vec<usize> = Vec::new();
    let mut chain: Vec<usize> = Vec::new();
    if let Some(sb) = &sb {
        stats.generation = sb.generation;
        retained.push((
            sb.checkpoint_root,
            Some((sb.checkpoint, Some(sb.checkpoint_sequence))),
        ));
        replayed_from.push(0);
        let (c, end) = follow_chain(&mut ck, sb);
        chain = c;
        stats.chain_end = end;
        for (p, &i) in chain.iter().enumerate() {
            let l = &ck.index.logs[i];
            let f = l.summary.flags;
            if f & FLAG_CHECKPOINT != 0 && f & FLAG_END != 0 {
                retained.push((
                    l.end() - 1,
                    Some((l.summary.checkpoint, Some(l.summary.sequence))),
                ));
                replayed_from.push(p + 1);
            }
        }
    } else {
        // No superblock: the newest checkpoint log found anywhere.
        if let Some(l) = ck
            .index
            .logs
            .iter()
            .filter(|l| {
                l.payload_ok
                    && l.summary.flags & FLAG_CHECKPOINT != 0
                    && l.summary.flags & FLAG_END != 0
            })
            .max_by_key(|l| l.summary.sequence)
        {
            retained.push((
                l.end() - 1,
                Some((l.summary.checkpoint, Some(l.summary.sequence))),
            ));
            stats.chain_end = format!(
                "no superblock: using checkpoint {} found at block {} by scanning",
                l.summary.checkpoint,
                l.end() - 1
            );
        }
    }
    stats.chain_logs = chain.len() as u64;
    let newest_ckpt_pos = chain.iter().rposition(|&i| {
        let f = ck.index.logs[i].summary.flags;
        f & FLAG_CHECKPOINT != 0 && f & FLAG_END != 0
    });
    let tail = replayed_data_logs(&ck.index, &chain[newest_ckpt_pos.map_or(0, |p| p + 1)..]);
    for (i, dropped) in &tail {
        let (seq, start) = (ck.index.logs[*i].summary.sequence, ck.index.logs[*i].start);
        for &ino in dropped {
            ck.push(
                Severity::Note,
                Location {
                    log: Some(seq),
                    block: Some(start),
                    inode: Some(ino),
                    ..Location::default()
                },
                "file data in a run of data-only logs that stops before the file's attributes record: recovery leaves it out, so the write it belongs to is not kept in part (none of it was acknowledged durable)",
            );
        }
    }

    let newest = retained.iter().filter_map(|r| r.1.map(|e| e.0)).max();
    let mut views: Vec<CheckpointView> = Vec::new();
    let mut tried: BTreeSet<u64> = retained.iter().map(|r| r.0).collect();
    for (k, (root, expect)) in retained.into_iter().enumerate() {
        let tables = expect.is_some_and(|e| Some(e.0) == newest);
        ck.superseded = replayed_from
            .get(k)
            .map(|&from| superseded_after(&ck.index, &chain[from.min(chain.len())..]))
            .unwrap_or_default();
        if let Some(v) = ck.checkpoint(root, expect, tables) {
            views.push(v);
        }
    }
    // What the newest checkpoint retains besides: its snapshots, and the plain checkpoints of the
    // protection period down the chain of previous roots.
    if let Some(top) = views.iter().rfind(|v| Some(v.number) == newest).cloned() {
        for e in &top.snapshots {
            if tried.insert(e.root) {
                if let Some(v) = ck.checkpoint(e.root, Some((e.number, None)), false) {
                    views.push(v);
                }
            }
        }
        let (mut prev, mut number) = (top.prev_root, top.number);
        let mut guard = 0usize;
        while number > top.oldest_protected.max(1) && prev != 0 && guard <= ck.index.logs.len() {
            guard += 1;
            number -= 1;
            if !tried.insert(prev) {
                prev = views
                    .iter()
                    .find(|v| v.root_block == prev)
                    .map_or(0, |v| v.prev_root);
                continue;
            }
            match ck.checkpoint(prev, Some((number, None)), false) {
                Some(v) => {
                    prev = v.prev_root;
                    views.push(v);
                }
                None => break,
            }
        }
        // Segment usage: a segment the writer entered after checkpoint N was born cannot hold a
        // block N uses; if one does, the segment was reused under a retained checkpoint.
        let mut reported = BTreeSet::new();
        for v in &views {
            for &b in &v.blocks {
                if !ck.geo.contains(b) {
                    continue;
                }
                let s = ck.geo.segment_of(b);
                if let Some(Some(u)) = top.usage.get(s as usize) {
                    if u.born > v.number && reported.insert((s, v.number)) {
                        ck.damage(
                            Location {
                                segment: Some(s),
                                block: Some(b),
                                checkpoint: Some(v.number),
                                ..Location::default()
                            },
                            format!(
                                "the usage table says segment {s} was entered after checkpoint {} was written (born {}), yet checkpoint {} uses its block {b}",
                                u.born - 1,
                                u.born,
                                v.number
                            ),
                        );
                    }
                }
            }
        }
    }
    views.sort_by_key(|v| v.number);
    stats.checkpoints = views.iter().map(|v| v.number).collect();
    if !views.iter().any(|v| v.usable) {
        // No retained checkpoint is usable: try older ones still on the device, newest first.
        // Their blocks may since have been reused; what fails to verify is salvaged around.
        let mut older: Vec<(u64, u64, u64)> = ck
            .index
            .logs
            .iter()
            .filter(|l| {
                l.payload_ok
                    && l.summary.flags & FLAG_CHECKPOINT != 0
                    && l.summary.flags & FLAG_END != 0
            })
            .filter(|l| !tried.contains(&(l.end() - 1)))
            .map(|l| (l.summary.sequence, l.summary.checkpoint, l.end() - 1))
            .collect();
        older.sort_unstable_by(|a, b| b.cmp(a));
        for (seq, number, root) in older.into_iter().take(16) {
            let saved = ck.findings.len();
            let v = ck.checkpoint(root, Some((number, Some(seq))), true);
            let problems = ck.findings.len() - saved;
            ck.findings.truncate(saved);
            if let Some(v) = v.filter(|v| v.usable) {
                ck.push(
                    Severity::Note,
                    Location {
                        checkpoint: Some(v.number),
                        block: Some(root),
                        ..Location::default()
                    },
                    format!(
                        "an older checkpoint, no longer retained, still loads ({problems} problems in it): repair salvages it"
                    ),
                );
                views.insert(0, v);
                break;
            }
        }
    }
    if let Some(v) = views.last() {
        stats.inodes = v.inodes.len() as u64;
        stats.directories = v.inodes.values().filter(|i| i.is_dir()).count() as u64;
        stats.files = stats.inodes - stats.directories;
        stats.file_bytes = v
            .inodes
            .values()
            .filter(|i| !i.is_dir())
            .map(|i| i.rec.size)
            .sum();
    }
    let mut findings = ck.findings;
    // Duplicates arise when two retained checkpoints share a damaged block; keep the first.
    let mut seen = BTreeSet::new();
    findings.retain(|f| {
        seen.insert((
            f.message.clone(),
            f.location.block,
            f.location.superblock,
            f.location.inode,
            f.location.checkpoint,
        ))
    });
    let has_damage = findings.iter().any(|f| f.severity == Severity::Damage);
    let verdict = if views.iter().any(|v| v.usable) {
        if has_damage {
            Verdict::Damaged
        } else {
            Verdict::Clean
        }
    } else {
        if !findings.iter().any(|f| f.message.contains("checkpoint")) {
            findings.push(Finding {
                severity: Severity::Damage,
                location: Location::default(),
                message: "no checkpoint with a usable root directory".into(),
            });
        }
        Verdict::Unrecoverable
    };
    Ok(Analysis {
        report: FsckReport {
            verdict,
            findings,
            stats,
        },
        sb,
        index: ck.index,
        views,
        tail,
        newest,
    })
}

/// The number (and, when known, the log sequence) a checkpoint root is expected to hold.
type Expected = Option<(u64, Option<u64>)>;

/// The file blocks the data-only logs among `logs` (indices into the index) write.
fn superseded_after(index: &LogIndex, logs: &[usize]) -> HashSet<(u64, u64)> {
    let mut out = HashSet::new();
    for (i, dropped) in replayed_data_logs(index, logs) {
        for d in index.logs[i].summary.descriptors.iter() {
            if d.kind == DescKind::Data && !dropped.contains(&d.ino) {
                out.extend((0..d.blocks as u64).map(|b| (d.ino, d.offset + b)));
            }
        }
    }
    out
}

/// The data-only logs among `logs` (indices into `index`, in chain order, starting after a
/// checkpoint), each with the files whose data in it recovery leaves out: their part of a run
/// of data-only logs never completed (`recovery::unfinished_run_data`).
fn replayed_data_logs(index: &LogIndex, logs: &[usize]) -> Vec<(usize, BTreeSet<u64>)> {
    let data: Vec<usize> = logs
        .iter()
        .copied()
        .filter(|&i| index.logs[i].summary.flags & FLAG_DATA_ONLY != 0)
        .collect();
    let summaries: Vec<&Summary> = data.iter().map(|&i| &index.logs[i].summary).collect();
    let mut dropped: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); data.len()];
    for (k, ino) in super::recovery::unfinished_run_data(&summaries) {
        dropped[k].insert(ino);
    }
    data.into_iter().zip(dropped).collect()
}

/// Follows the roll-forward chain from the superblock; returns its logs and why it ends.
fn follow_chain(ck: &mut Checker<'_>, sb: &Superblock) -> (Vec<usize>, String) {
    let mut chain = Vec::new();
    // Files of skipped ahead logs (see recovery): their later logs are skipped too.
    let mut torn: BTreeSet<u64> = BTreeSet::new();
    let mut skipped = 0usize;
    let mut pos = sb.next.block;
    let mut seq = sb.next.sequence;
    let mut prev = sb.next.prev_crc;
    let seg_blocks = sb.segment_blocks;
    let seg_end = |b: u64| {
        let s = (b - format::FIRST_SEGMENT_BLOCK) / seg_blocks;
        format::FIRST_SEGMENT_BLOCK + (s + 1) * seg_blocks
    };
    loop {
        if chain.len() + skipped > ck.index.logs.len() {
            return (chain, "log chain longer than the logs found".into());
        }
        let here = Location {
            log: Some(seq),
            block: Some(pos),
            segment: Some(ck.geo.segment_of(pos)),
            ..Location::default()
        };
        let Some(&i) = ck.index.by_start.get(&pos) else {
            // Why is there no log here? A summary of this chain that fails its CRC, with a log of
            // the next sequence right after it, is damage; anything else is the end of the chain.
            let why = match ck.rd.block(pos) {
                Err(e) => e,
                Ok(b) => match Summary::decode(&b[..]) {
                    Ok(_) => "a log of another pool or beyond its segment".into(),
                    Err(e) => {
                        let fields_match = &b[0..8] == format::LOG_MAGIC
                            && b[16..32] == ck.geo.pool_id
                            && u64::from_le_bytes(b[32..40].try_into().expect("8")) == seq
                            && u32::from_le_bytes(b[60..64].try_into().expect("4")) == prev;
                        let later = ck.index.logs.iter().any(|l| {
                            l.summary.sequence == seq + 1 && l.start > pos && l.start < seg_end(pos)
                        });
                        if fields_match && later {
                            ck.damage(
                                here,
                                format!(
                                    "summary of log {seq} is damaged ({e}) and log {} follows it: the logs after it cannot be replayed (or, on a pool not opened since a crash, an unflushed write was lost out of order)",
                                    seq + 1
                                ),
                            );
                        }
                        e.0
                    }
                },
            };
            return (chain, format!("end of log chain at block {pos}: {why}"));
        };
        let l = &ck.index.logs[i];
        if l.summary.sequence != seq || l.summary.prev_crc != prev {
            return (
                chain,
                format!(
                    "end of log chain at block {pos}: a log of an earlier pass (sequence {})",
                    l.summary.sequence
                ),
            );
        }
        let end = l.end();
        let f = l.summary.flags;
        let ahead = f & FLAG_AHEAD != 0 && f & FLAG_DATA_ONLY != 0;
        let pad = f & FLAG_PAD != 0 && l.summary.payload_blocks == 0;
        if !ahead && !pad && !torn.is_empty() {
            ck.push(
                Severity::Note,
                here,
                "a log after an incomplete data-only log ends the chain: it was written after payloads that are missing, so recovery stops there",
            );
            return (
                chain,
                format!("log {seq} at block {pos} follows an incomplete data-only log"),
            );
        }
        let skip =
            ahead && (!l.payload_ok || l.summary.descriptors.iter().any(|d| torn.contains(&d.ino)));
        if skip {
            let (payload_ok, next_seg, crc) = (l.payload_ok, l.summary.segment_next, l.crc);
            torn.extend(l.summary.descriptors.iter().map(|d| d.ino));
            skipped += 1;
            if next_seg >= sb.segment_count {
                ck.damage(
                    here,
                    format!("names segment {next_seg} next, past the last"),
                );
                return (chain, format!("log {seq} at block {pos}: bad next segment"));
            }
            if !payload_ok {
                ck.push(
                    Severity::Note,
                    here,
                    "data-only log written ahead of its payload, which is incomplete: recovery skips it and the later logs of its files (none was acknowledged durable)",
                );
            }
            seq += 1;
            prev = crc;
            pos = if end == seg_end(pos) {
                format::FIRST_SEGMENT_BLOCK + next_seg * seg_blocks
            } else {
                end
            };
            continue;
        }
        if !l.payload_ok {
            let next_pos = if end == seg_end(pos) {
                format::FIRST_SEGMENT_BLOCK + l.summary.segment_next * seg_blocks
            } else {
                end
            };
            let crc = l.crc;
            let behind = ck
                .index
                .at(next_pos)
                .is_some_and(|n| n.summary.sequence == seq + 1 && n.summary.prev_crc == crc);
            if behind {
                ck.damage(
                    here,
                    "payload CRC mismatch with valid logs after it: recovery keeps only what precedes it",
                );
                return (
                    chain,
                    format!("log {seq} at block {pos}: payload CRC mismatch (valid logs follow)"),
                );
            }
            ck.push(
                Severity::Note,
                here,
                "payload CRC mismatch at the end of the log chain: a torn tail that recovery drops",
            );
            return (
                chain,
                format!("log {seq} at block {pos}: payload CRC mismatch (torn tail)"),
            );
        }
        if l.summary.segment_next >= sb.segment_count {
            ck.damage(
                here,
                format!(
                    "names segment {} next, past the last",
                    l.summary.segment_next
                ),
            );
            return (chain, format!("log {seq} at block {pos}: bad next segment"));
        }
        chain.push(i);
        seq += 1;
        prev = l.crc;
        pos = if end == seg_end(pos) {
            format::FIRST_SEGMENT_BLOCK + l.summary.segment_next * seg_blocks
        } else {
            end
        };
    }
}

/// With both superblocks lost: the pool id of the newest checkpoint log on the device, and the
/// whole device as one segment.
fn guess_geometry(rd: &Reader<'_>) -> Result<Option<Geometry>> {
    let mut best: Option<(u64, [u8; 16])> = None;
    let mut b = format::FIRST_SEGMENT_BLOCK;
    while b < rd.blocks {
        let to = (b + READ_CHUNK / BLOCK_U64).min(rd.blocks);
        let bytes = rd.range(b, to)?;
        for (i, blk) in bytes.chunks_exact(BLOCK).enumerate() {
            if &blk[0..8] != format::LOG_MAGIC {
                continue;
            }
            if let Ok((s, _)) = Summary::decode(blk) {
                if s.flags & FLAG_CHECKPOINT != 0 && best.is_none_or(|(q, _)| s.sequence > q) {
                    best = Some((s.sequence, s.pool_id));
                }
            }
            let _ = i;
        }
        b = to;
    }
    Ok(best.map(|(_, pool_id)| Geometry {
        pool_id,
        segments: vec![(0, format::FIRST_SEGMENT_BLOCK, rd.blocks)],
        segment_blocks: rd.blocks.saturating_sub(format::FIRST_SEGMENT_BLOCK).max(1),
        first: format::FIRST_SEGMENT_BLOCK,
        end: rd.blocks,
    }))
}

// ---------------------------------------------------------------------------------------------
// Repair

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

fn repair_in_place(
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
fn ranges(v: &[u64]) -> String {
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
fn rebuild(
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
        let file_blocks_max = super::engine::FILE_BYTES_MAX / BLOCK_U64;
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
                            if d.offset <= super::engine::FILE_BYTES_MAX {
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
            ordering: super::Ordering::from_code(sb.ordering),
            barrier: super::Barrier::from_code(sb.barrier),
            segment_bytes: sb.segment_blocks * BLOCK_U64,
            superblock_every_bytes: sb.superblock_every_bytes,
            superblock_every: std::time::Duration::from_millis(sb.superblock_every_ms),
            checkpoint_every: None,
            dirty_bytes_max: sb.dirty_bytes_max,
            protection_period: std::time::Duration::from_millis(sb.protection_ms),
            background_gc: sb.background_gc,
            gc_free_percent: sb.gc_free_percent as u32,
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
    let mut buf = vec![0u8; READ_CHUNK as usize];
    let mut off = format::SUPERBLOCKS * BLOCK_U64;
    while off < len {
        let n = (len - off).min(READ_CHUNK) as usize;
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
/// larger share of the pool: with 32 it was an eighth, and a pool could not fill to 90 %.
pub fn default_segment_bytes(len: u64) -> u64 {
    let mut seg: u64 = 8 << 20;
    while seg > 64 << 10 && len / seg < 256 {
        seg /= 2;
    }
    seg
}

#[cfg(test)]
#[path = "fsck_tests.rs"]
mod tests;
