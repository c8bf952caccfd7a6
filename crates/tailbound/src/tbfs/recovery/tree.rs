//! Loading a checkpoint: its root, the inode file, every map and directory, and its tables.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::scan::*;
use crate::tbfs::format::{self, *};
use crate::tbfs::inode::*;
use crate::tbfs::map::BlockMap;
use crate::tbfs::{DeviceRef, FileKind, Result};

/// The segment area of a pool, for checking addresses read from storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub segment_blocks: u64,
    pub segment_count: u64,
}

impl Geometry {
    pub fn contains(&self, block: u64) -> bool {
        block >= format::FIRST_SEGMENT_BLOCK
            && block < format::FIRST_SEGMENT_BLOCK + self.segment_blocks * self.segment_count
    }
}

/// A checkpoint's file tree, loaded and checked.
pub(crate) struct Tree {
    pub root: CheckpointRoot,
    pub ifile: BlockMap,
    pub cells: HashMap<u64, Arc<InodeCell>>,
    pub dirs: HashMap<u64, DirEntries>,
    /// Links to each inode and subdirectories of each directory, from the namespace.
    pub reached: HashMap<u64, u32>,
    pub subdirs: HashMap<u64, u32>,
}

/// Reads a block map of `height` from `root`, checking every node.
pub(in crate::tbfs) fn load_map(
    dev: &DeviceRef,
    sb: &Geometry,
    root: u64,
    height: u8,
    what: &str,
) -> Result<BlockMap> {
    let mut map = BlockMap {
        root,
        height,
        ..BlockMap::default()
    };
    if root == 0 {
        return Ok(map);
    }
    if !sb.contains(root) {
        return Err(corrupt(what, format!("map root {root} outside the pool")));
    }
    if height == 0 {
        map.blocks = vec![root];
        return Ok(map);
    }
    let limit = (crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64) as usize;
    let mut levels: Vec<Vec<u64>> = vec![vec![root]];
    for level in (1..=height).rev() {
        let nodes = levels.last().expect("one level").clone();
        let mut children = Vec::with_capacity(nodes.len() * FANOUT);
        for (i, &addr) in nodes.iter().enumerate() {
            if addr == 0 {
                children.extend(std::iter::repeat_n(0, FANOUT));
                continue;
            }
            if !sb.contains(addr) {
                return Err(corrupt(
                    what,
                    format!("level-{level} node {i} at {addr} outside the pool"),
                ));
            }
            let b = read_block(dev, addr, &|| {
                format!("{what}: reading level-{level} node {i} at block {addr}")
            })?;
            let c = decode_node(&b[..], level).map_err(|e| {
                corrupt(what, format!("level-{level} node {i} at block {addr}: {e}"))
            })?;
            children.extend(c);
            let cap = limit.div_ceil(FANOUT.pow(level as u32 - 1));
            if children.len() > cap + FANOUT {
                return Err(corrupt(what, "block map larger than the largest file"));
            }
        }
        while children.last() == Some(&0) {
            children.pop();
        }
        if let Some(&bad) = children.iter().find(|&&a| a != 0 && !sb.contains(a)) {
            return Err(corrupt(
                what,
                format!("level-{level} entry points outside the pool ({bad})"),
            ));
        }
        levels.push(children);
    }
    map.blocks = levels.pop().expect("data level");
    levels.reverse();
    // `levels[0]` is now level 1 ... `levels[h-1]` the root.
    map.nodes = levels;
    if map.height != height_for(map.blocks.len() as u64) {
        map.all_dirty = true;
    }
    Ok(map)
}

/// The block map an inode record holds itself (format 3, [`format::Extents`]), checking that
/// every run lies in the pool and that the file is no larger than the largest; `None` when the
/// record names a tree instead.
fn load_record_map(geo: &Geometry, r: &InodeRecord, what: &str) -> Option<Result<BlockMap>> {
    if r.extents.is_empty() {
        return None;
    }
    let limit = crate::tbfs::limits::FILE_BYTES_MAX / BLOCK_U64;
    if r.extents.blocks() > limit {
        return Some(Err(corrupt(what, "block map larger than the largest file")));
    }
    if let Some((addr, n)) = r.extents.runs_outside(|b| geo.contains(b)).next() {
        return Some(Err(corrupt(
            what,
            format!("a run of {n} blocks at {addr} lies outside the pool"),
        )));
    }
    Some(Ok(BlockMap {
        blocks: r.extents.expand(),
        inline: Some(r.extents),
        ..BlockMap::default()
    }))
}

/// Loads the file tree of the checkpoint whose root is at `base_root`: inode file, inodes, block
/// maps and directories, checking every CRC, address and the shape of the namespace.
pub(in crate::tbfs) fn load_tree(dev: &DeviceRef, geo: &Geometry, base_root: u64) -> Result<Tree> {
    let what_root = format!("checkpoint root at block {base_root}");
    let rb = read_block(dev, base_root, &|| {
        format!("{} device: reading {what_root}", dev.kind())
    })?;
    let root = CheckpointRoot::decode(&rb[..]).map_err(|e| corrupt(&what_root, e))?;

    let ifile = load_map(dev, geo, root.ifile_root, root.ifile_height, "inode file")?;
    let mut records: BTreeMap<u64, InodeRecord> = BTreeMap::new();
    for (p, &addr) in ifile.blocks.iter().enumerate() {
        if addr == 0 {
            continue;
        }
        let page = read_block(dev, addr, &|| {
            format!(
                "{} device: reading inode page {p} at block {addr}",
                dev.kind()
            )
        })?;
        for slot in 0..INODES_PER_PAGE {
            let ino = (p * INODES_PER_PAGE + slot) as u64;
            let bytes = &page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES];
            let rec = InodeRecord::decode(bytes)
                .map_err(|e| corrupt(&format!("inode {ino} (page {p}, block {addr})"), e))?;
            if let Some(r) = rec {
                if r.ino != ino || ino >= root.next_ino {
                    return Err(corrupt(
                        &format!("inode page {p} at block {addr}"),
                        format!("slot {slot} holds inode {}", r.ino),
                    ));
                }
                records.insert(ino, r);
            }
        }
    }
    let mut cells: HashMap<u64, Arc<InodeCell>> = HashMap::new();
    let mut dirs: HashMap<u64, DirEntries> = HashMap::new();
    for (&ino, r) in &records {
        let what = format!("inode {ino}");
        let map = load_record_map(geo, r, &what)
            .unwrap_or_else(|| load_map(dev, geo, r.root, r.height, &what))?;
        let kind = mode_kind(r.mode);
        if kind == FileKind::Dir {
            let mut entries = Vec::new();
            for (i, &a) in map.blocks.iter().enumerate() {
                if a == 0 {
                    continue;
                }
                let b = read_block(dev, a, &|| {
                    format!("{what}: reading directory block {i} at {a}")
                })?;
                decode_dir_block(&b[..], &mut entries)
                    .map_err(|e| corrupt(&format!("{what}, directory block {i} at {a}"), e))?;
            }
            let mut d = DirEntries::new();
            for e in entries {
                if d.insert(e.name.as_str().into(), (e.ino, e.is_dir))
                    .is_some()
                {
                    return Err(corrupt(
                        &what,
                        format!("directory names {:?} twice", e.name),
                    ));
                }
            }
            dirs.insert(ino, d);
        }
        let st = InodeState::from_record(kind, r, map);
        cells.insert(
            ino,
            Arc::new(InodeCell {
                ino,
                st: Mutex::new(st),
            }),
        );
    }
    if !dirs.contains_key(&ROOT_INO) {
        return Err(corrupt(&what_root, "no root directory"));
    }

    // The namespace must be a tree over existing inodes; link counts follow from it.
    let mut reached: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    for (&dir, entries) in &dirs {
        for (name, &(child, is_dir)) in entries {
            let Some(cell) = cells.get(&child) else {
                return Err(corrupt(
                    &format!("directory {dir}"),
                    format!("{name:?} names missing inode {child}"),
                ));
            };
            if (cell.lock().kind() == FileKind::Dir) != is_dir {
                return Err(corrupt(
                    &format!("directory {dir}"),
                    format!("{name:?} has the wrong type"),
                ));
            }
            *reached.entry(child).or_default() += 1;
            if is_dir {
                *subdirs.entry(dir).or_default() += 1;
            }
        }
    }
    if reached.contains_key(&ROOT_INO)
        || dirs
            .keys()
            .any(|d| *d != ROOT_INO && reached.get(d) != Some(&1))
    {
        return Err(corrupt(&what_root, "directory tree is not a tree"));
    }
    // Every directory must be reachable from the root (no detached cycles).
    let mut seen = BTreeSet::from([ROOT_INO]);
    let mut stack = vec![ROOT_INO];
    while let Some(d) = stack.pop() {
        for &(child, is_dir) in dirs[&d].values() {
            if is_dir && seen.insert(child) {
                stack.push(child);
            }
        }
    }
    if seen.len() != dirs.len() {
        return Err(corrupt(&what_root, "directories unreachable from the root"));
    }

    Ok(Tree {
        root,
        ifile,
        cells,
        dirs,
        reached,
        subdirs,
    })
}

pub(in crate::tbfs) fn segment_count_of(sb: &Superblock) -> usize {
    sb.segment_count as usize
}

/// Reads every page of a table map (`None` for a table the checkpoint does not have).
pub(in crate::tbfs) fn load_tables(
    dev: &DeviceRef,
    geo: &Geometry,
    root: &CheckpointRoot,
) -> Result<[BlockMap; format::TABLES]> {
    let mut out: [BlockMap; format::TABLES] = Default::default();
    for (i, t) in root.tables.iter().enumerate() {
        out[i] = load_map(
            dev,
            geo,
            t.root,
            t.height,
            &format!("table {} of checkpoint {}", i + 1, root.number),
        )?;
    }
    Ok(out)
}

fn table_pages<'a>(
    dev: &'a DeviceRef,
    map: &'a BlockMap,
    id: u8,
) -> impl Iterator<Item = Result<(u64, Box<format::Block>)>> + 'a {
    map.blocks
        .iter()
        .enumerate()
        .filter(|(_, &a)| a != 0)
        .map(move |(i, &a)| {
            read_block(dev, a, &|| {
                format!(
                    "{} device: reading page {i} of table {id} at block {a}",
                    dev.kind()
                )
            })
            .map(|b| (i as u64, b))
        })
}

pub(in crate::tbfs) fn read_snapshots(
    dev: &DeviceRef,
    map: &BlockMap,
) -> Result<Option<Vec<format::SnapshotEntry>>> {
    if map.blocks.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for page in table_pages(dev, map, format::TABLE_SNAPSHOTS) {
        let (i, b) = page?;
        out.extend(
            format::decode_snapshot_page(&b[..])
                .map_err(|e| corrupt(&format!("snapshot table page {i}"), e))?,
        );
    }
    Ok(Some(out))
}

pub(in crate::tbfs) fn read_usage(
    dev: &DeviceRef,
    map: &BlockMap,
    segments: u64,
) -> Result<Vec<format::UsageEntry>> {
    let per = format::table_entries_per_page(format::TABLE_USAGE) as u64;
    let mut out = vec![format::UsageEntry::default(); segments as usize];
    for page in table_pages(dev, map, format::TABLE_USAGE) {
        let (i, b) = page?;
        let entries = format::decode_usage_page(&b[..])
            .map_err(|e| corrupt(&format!("usage table page {i}"), e))?;
        for (j, e) in entries.into_iter().enumerate() {
            let s = i * per + j as u64;
            if s >= segments {
                return Err(corrupt(
                    &format!("usage table page {i}"),
                    "entries past the last segment",
                ));
            }
            out[s as usize] = e;
        }
    }
    Ok(out)
}

/// The pinned table's entries, each with the page it was read from.
pub(in crate::tbfs) fn read_pinned(
    dev: &DeviceRef,
    map: &BlockMap,
    geo: &Geometry,
) -> Result<Vec<(u64, format::PinnedEntry)>> {
    let pps = geo
        .segment_blocks
        .div_ceil(format::table_entries_per_page(format::TABLE_PINNED) as u64);
    let mut out = Vec::new();
    for page in table_pages(dev, map, format::TABLE_PINNED) {
        let (i, b) = page?;
        let entries = format::decode_pinned_page(&b[..])
            .map_err(|e| corrupt(&format!("pinned table page {i}"), e))?;
        let s = i / pps;
        let start = format::FIRST_SEGMENT_BLOCK + s * geo.segment_blocks;
        for e in entries {
            if e.block < start || e.block >= start + geo.segment_blocks || !geo.contains(e.block) {
                return Err(corrupt(
                    &format!("pinned table page {i}"),
                    format!("block {} is not in segment {s}", e.block),
                ));
            }
            out.push((i, e));
        }
    }
    Ok(out)
}
