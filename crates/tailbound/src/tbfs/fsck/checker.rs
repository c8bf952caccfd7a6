//! Checking one retained checkpoint: its root, maps, inode records, tables and namespace.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::index::*;
use super::report::*;
use crate::tbfs::format::{self, *};

/// What a block is used as by a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    Root,
    InodeMapNode { level: u8, index: u64 },
    InodePage { page: u64 },
    MapNode { ino: u64, level: u8, index: u64 },
    Data { ino: u64, block: u64 },
    TableNode { table: u8, level: u8, index: u64 },
    TablePage { table: u8, page: u64 },
}

pub(super) fn table_name(id: u8) -> &'static str {
    match id {
        format::TABLE_USAGE => "segment usage",
        format::TABLE_PINNED => "pinned-block",
        format::TABLE_SNAPSHOTS => "snapshot",
        _ => "unknown",
    }
}

impl Claim {
    pub(super) fn describe(&self) -> String {
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

    pub(super) fn ino(&self) -> Option<u64> {
        match *self {
            Claim::MapNode { ino, .. } | Claim::Data { ino, .. } => Some(ino),
            _ => None,
        }
    }

    /// Whether the descriptor `d` (at `within` blocks into its extent) wrote this block.
    pub(super) fn matches(&self, d: &format::Descriptor, within: u64) -> bool {
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
pub(super) const LOST: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub(super) struct InodeView {
    pub(super) rec: InodeRecord,
    /// Address of every file block (0: hole, `LOST`: its map node is damaged).
    pub(super) blocks: Vec<u64>,
    /// Directory entries that loaded (directories only).
    pub(super) entries: Vec<DirRecord>,
    /// File blocks whose pointer is wrong (another block, or outside the pool): unreadable.
    pub(super) bad_blocks: BTreeSet<u64>,
    /// File blocks read from a log that fails its payload CRC or whose summary is damaged: the
    /// bytes are there but cannot be vouched for.
    pub(super) suspect: BTreeSet<u64>,
}

impl InodeView {
    pub(super) fn is_dir(&self) -> bool {
        self.rec.mode & S_IFMT == S_IFDIR
    }
}

/// One checkpoint as loaded, tolerating damage.
#[derive(Debug, Clone)]
pub(super) struct CheckpointView {
    pub(super) number: u64,
    pub(super) root_block: u64,
    /// Address of every inode page (for tests that damage one).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) pages: Vec<u64>,
    pub(super) inodes: BTreeMap<u64, InodeView>,
    /// Path of every inode reachable from the root.
    pub(super) paths: HashMap<u64, String>,
    /// Whether its root directory loaded.
    pub(super) usable: bool,
    /// The root of the checkpoint before it, and the oldest plain checkpoint it keeps.
    pub(super) prev_root: u64,
    pub(super) oldest_protected: u64,
    /// Its tables, as far as they loaded.
    pub(super) snapshots: Vec<format::SnapshotEntry>,
    pub(super) usage: Vec<Option<format::UsageEntry>>,
    /// Every block it uses.
    pub(super) blocks: Vec<u64>,
}

pub(super) struct Checker<'a> {
    pub(super) rd: Reader<'a>,
    pub(super) geo: Geometry,
    pub(super) index: LogIndex,
    pub(super) findings: Vec<Finding>,
    /// File blocks (inode, block) that data-only logs later in the roll-forward chain rewrote,
    /// for the checkpoint being checked: recovery replays those logs over its pointers, so the
    /// blocks it names there are not part of the recovered state, and their space may have been
    /// reused (see `State::seg_supersede`).
    pub(super) superseded: HashSet<(u64, u64)>,
}

impl Checker<'_> {
    pub(super) fn push(
        &mut self,
        severity: Severity,
        location: Location,
        message: impl Into<String>,
    ) {
        self.findings.push(Finding {
            severity,
            location,
            message: message.into(),
        });
    }

    pub(super) fn damage(&mut self, location: Location, message: impl Into<String>) {
        self.push(Severity::Damage, location, message);
    }

    /// Reads a block map tolerantly; damaged subtrees become `LOST` blocks.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load_map(
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
            // Holes after the last mapped subtree map nothing: expanded, a few levels of them
            // would ask for more memory than there is.
            while level_nodes.last() == Some(&0) {
                level_nodes.pop();
            }
            let most = limit.div_ceil(span).saturating_add(FANOUT as u64);
            let mut children: Vec<u64> = Vec::with_capacity(
                (level_nodes.len() * FANOUT).min(usize::try_from(most).unwrap_or(usize::MAX)),
            );
            for (i, &addr) in level_nodes.iter().enumerate() {
                if children.len() as u64 > most {
                    self.damage(loc(None), format!("{what} is larger than any file may be"));
                    return (vec![LOST], true);
                }
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
            }
            if children.len() as u64 > most {
                self.damage(loc(None), format!("{what} is larger than any file may be"));
                return (vec![LOST], true);
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
    pub(super) fn record_map(
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

    /// Loads and checks one checkpoint, in steps: its root, its inode records and their maps,
    /// its tables, every block it claims, its directories, its namespace. `None` when its root
    /// does not decode.
    pub(super) fn checkpoint(
        &mut self,
        root_block: u64,
        expect: Option<(u64, Option<u64>)>,
        with_tables: bool,
    ) -> Option<CheckpointView> {
        let root = self.checkpoint_root(root_block, expect)?;
        let n = root.number;
        let mut claims: Vec<(u64, Claim)> = vec![(root_block, Claim::Root)];
        let (pages, records) = self.inode_records(&root, root_block, &mut claims);
        let mut inodes = self.inode_maps(n, &records, &mut claims);
        let (snapshots, usage) = self.tables(&root, with_tables, &mut claims);
        self.claims(n, &mut claims, &mut inodes);
        self.directories(n, &mut inodes);
        let (paths, usable) = self.namespace(n, &inodes);
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
    /// The root block, decoded, with a finding if it is not the checkpoint `expect` names.
    fn checkpoint_root(
        &mut self,
        root_block: u64,
        expect: Option<(u64, Option<u64>)>,
    ) -> Option<CheckpointRoot> {
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
        Some(root)
    }

    /// The inode file's pages (claimed) and the records they hold.
    fn inode_records(
        &mut self,
        root: &CheckpointRoot,
        root_block: u64,
        claims: &mut Vec<(u64, Claim)>,
    ) -> (Vec<u64>, BTreeMap<u64, InodeRecord>) {
        let n = root.number;
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
        let (pages, _) = self.load_map(
            n,
            None,
            None,
            root.ifile_root,
            root.ifile_height,
            claims,
            // The inode file is a file: no larger than any file may be, whatever the root says.
            root.ifile_pages
                .clamp(1, crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64),
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
        (pages, records)
    }

    /// Each record's block map, its blocks claimed, and a finding for a file that maps blocks
    /// past its size.
    fn inode_maps(
        &mut self,
        n: u64,
        records: &BTreeMap<u64, InodeRecord>,
        claims: &mut Vec<(u64, Claim)>,
    ) -> BTreeMap<u64, InodeView> {
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
        let file_limit = crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64;
        let mut inodes: BTreeMap<u64, InodeView> = BTreeMap::new();
        for (&ino, &rec) in records {
            let (blocks, _) = if rec.extents.is_empty() {
                self.load_map(n, Some(ino), None, rec.root, rec.height, claims, file_limit)
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

        inodes
    }

    /// The tables: segment usage, pinned blocks, snapshots (only the newest checkpoint's,
    /// `with_tables`: older ones' are not kept).
    fn tables(
        &mut self,
        root: &CheckpointRoot,
        with_tables: bool,
        claims: &mut Vec<(u64, Claim)>,
    ) -> (Vec<format::SnapshotEntry>, Vec<Option<format::UsageEntry>>) {
        let n = root.number;
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
        let mut snapshots = Vec::new();
        let mut usage: Vec<Option<format::UsageEntry>> = vec![None; self.geo.segments.len()];
        // Only the newest checkpoint's tables are in use: older ones' are not kept.
        let tables = if with_tables { &root.tables[..] } else { &[] };
        for (i, t) in tables.iter().enumerate() {
            let id = i as u8 + 1;
            let (pages, _) =
                self.load_map(n, None, Some(id), t.root, t.height, claims, self.geo.end);
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

        (snapshots, usage)
    }

    /// No block used twice; every block in a log that verifies and says it is that block.
    fn claims(
        &mut self,
        n: u64,
        claims: &mut Vec<(u64, Claim)>,
        inodes: &mut BTreeMap<u64, InodeView>,
    ) {
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
        let mut owner: HashMap<u64, Claim> = HashMap::with_capacity(claims.len());
        let mut bad_logs: BTreeMap<u64, Vec<Claim>> = BTreeMap::new();
        let superseded = std::mem::take(&mut self.superseded);
        let stale = |claim: &Claim| {
            matches!(claim, Claim::Data { ino, block } if superseded.contains(&(*ino, *block))
                && inodes.get(ino).is_some_and(|v| !v.is_dir()))
        };
        claims.retain(|(_, c)| !stale(c));
        for &(block, claim) in claims.iter() {
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
    }

    /// Directory contents. Damaged metadata blocks (those with their own CRC) are dropped.
    fn directories(&mut self, n: u64, inodes: &mut BTreeMap<u64, InodeView>) {
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
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
    }

    /// The namespace: a tree over live inodes, rooted at inode 1. Returns every reachable
    /// inode's path, and whether the root directory loaded.
    fn namespace(
        &mut self,
        n: u64,
        inodes: &BTreeMap<u64, InodeView>,
    ) -> (HashMap<u64, String>, bool) {
        let cloc = |ino: Option<u64>, block: Option<u64>| at(n, ino, block);
        let usable = inodes.get(&ROOT_INO).is_some_and(InodeView::is_dir);
        if !usable {
            self.damage(cloc(Some(ROOT_INO), None), "no root directory");
        }
        let mut paths: HashMap<u64, String> = HashMap::new();
        let mut parents: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut refs: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for (&dir, v) in inodes {
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
        for (&ino, v) in inodes {
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
        (paths, usable)
    }
}

/// Where a finding about checkpoint `n` is: an inode, a block, or both.
fn at(n: u64, ino: Option<u64>, block: Option<u64>) -> Location {
    Location {
        checkpoint: Some(n),
        inode: ino,
        block,
        ..Location::default()
    }
}

/// The number (and, when known, the log sequence) a checkpoint root is expected to hold.
pub(super) type Expected = Option<(u64, Option<u64>)>;
