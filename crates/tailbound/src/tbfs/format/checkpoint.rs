//! A checkpoint's root and its three tables: segment usage, pinned blocks, snapshots.

use super::*;

/// The root of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointRoot {
    pub number: u64,
    pub sequence: u64,
    pub time_ns: i64,
    pub ifile_root: u64,
    pub ifile_height: u8,
    pub ifile_pages: u64,
    pub next_ino: u64,
    pub inodes: u64,
    /// Root block of the checkpoint before this one (0: none).
    pub prev_root: u64,
    /// The oldest plain checkpoint kept for the protection period; the chain of `prev_root`s is
    /// followed down to it.
    pub oldest_protected: u64,
    /// The tables: segment usage, pinned blocks, snapshots.
    pub tables: [TableRef; TABLES],
}

/// Where one table's map is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableRef {
    pub root: u64,
    pub height: u8,
}

/// Number of tables a checkpoint carries.
pub const TABLES: usize = 3;
/// Table ids (index + 1).
pub const TABLE_USAGE: u8 = 1;
pub const TABLE_PINNED: u8 = 2;
pub const TABLE_SNAPSHOTS: u8 = 3;
pub(super) const TABLE_HEADER: usize = 16;
pub const USAGE_ENTRY: usize = 16;
pub const PINNED_ENTRY: usize = 24;
pub const SNAPSHOT_ENTRY: usize = 96;
/// Longest snapshot name in bytes.
pub const SNAPSHOT_NAME_MAX: usize = 64;

/// Entries a page of table `id` holds.
pub fn table_entries_per_page(id: u8) -> usize {
    let size = match id {
        TABLE_USAGE => USAGE_ENTRY,
        TABLE_PINNED => PINNED_ENTRY,
        _ => SNAPSHOT_ENTRY,
    };
    (BLOCK - TABLE_HEADER) / size
}

/// One segment's entry in the usage table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageEntry {
    /// The checkpoint number that was next when the writer entered the segment: no block in it
    /// belongs to an earlier checkpoint.
    pub born: u64,
    /// Time of the newest log written into it (ns since the epoch).
    pub written_ns: i64,
}

/// A block no longer in the live tree but referenced by a retained checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedEntry {
    pub block: u64,
    /// The checkpoints that can reference it: `born ..= died`.
    pub born: u64,
    pub died: u64,
}

/// A snapshot: a checkpoint kept until it is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotEntry {
    pub number: u64,
    pub root: u64,
    pub time_ns: i64,
    pub name: Option<String>,
}

pub(super) fn table_page(id: u8, count: usize) -> Box<Block> {
    let mut b = Box::new([0u8; BLOCK]);
    b[4] = id;
    put_u32(&mut b[..], 8, count as u32);
    b
}

pub(super) fn seal_table(b: &mut Block) {
    let c = crc(&b[4..]);
    put_u32(&mut b[..], 0, c);
}

/// Checks a table page's CRC, id and count; returns the entry count.
pub(super) fn open_table(b: &[u8], id: u8) -> Result<usize, Invalid> {
    if b.len() != BLOCK || get_u32(b, 0) != crc(&b[4..BLOCK]) {
        return invalid("table page CRC mismatch");
    }
    if b[4] != id {
        return invalid(format!("table page of table {}, expected {id}", b[4]));
    }
    let count = get_u32(b, 8) as usize;
    if count > table_entries_per_page(id) {
        return invalid(format!("table page claims {count} entries"));
    }
    Ok(count)
}

pub fn encode_usage_page(entries: &[UsageEntry]) -> Box<Block> {
    let mut b = table_page(TABLE_USAGE, entries.len());
    for (i, e) in entries.iter().enumerate() {
        let at = TABLE_HEADER + i * USAGE_ENTRY;
        put_u64(&mut b[..], at, e.born);
        put_u64(&mut b[..], at + 8, e.written_ns as u64);
    }
    seal_table(&mut b);
    b
}

pub fn decode_usage_page(b: &[u8]) -> Result<Vec<UsageEntry>, Invalid> {
    let count = open_table(b, TABLE_USAGE)?;
    Ok((0..count)
        .map(|i| {
            let at = TABLE_HEADER + i * USAGE_ENTRY;
            UsageEntry {
                born: get_u64(b, at),
                written_ns: get_u64(b, at + 8) as i64,
            }
        })
        .collect())
}

pub fn encode_pinned_page(entries: &[PinnedEntry]) -> Box<Block> {
    let mut b = table_page(TABLE_PINNED, entries.len());
    for (i, e) in entries.iter().enumerate() {
        let at = TABLE_HEADER + i * PINNED_ENTRY;
        put_u64(&mut b[..], at, e.block);
        put_u64(&mut b[..], at + 8, e.born);
        put_u64(&mut b[..], at + 16, e.died);
    }
    seal_table(&mut b);
    b
}

pub fn decode_pinned_page(b: &[u8]) -> Result<Vec<PinnedEntry>, Invalid> {
    let count = open_table(b, TABLE_PINNED)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = TABLE_HEADER + i * PINNED_ENTRY;
        let e = PinnedEntry {
            block: get_u64(b, at),
            born: get_u64(b, at + 8),
            died: get_u64(b, at + 16),
        };
        if e.born > e.died {
            return invalid(format!("pinned entry {i}: born after it died"));
        }
        out.push(e);
    }
    Ok(out)
}

pub fn encode_snapshot_page(entries: &[SnapshotEntry]) -> Box<Block> {
    let mut b = table_page(TABLE_SNAPSHOTS, entries.len());
    for (i, e) in entries.iter().enumerate() {
        let at = TABLE_HEADER + i * SNAPSHOT_ENTRY;
        put_u64(&mut b[..], at, e.number);
        put_u64(&mut b[..], at + 8, e.root);
        put_u64(&mut b[..], at + 16, e.time_ns as u64);
        if let Some(name) = &e.name {
            let n = name.len().min(SNAPSHOT_NAME_MAX);
            b[at + 24] = n as u8;
            b[at + 32..at + 32 + n].copy_from_slice(&name.as_bytes()[..n]);
        }
    }
    seal_table(&mut b);
    b
}

pub fn decode_snapshot_page(b: &[u8]) -> Result<Vec<SnapshotEntry>, Invalid> {
    let count = open_table(b, TABLE_SNAPSHOTS)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = TABLE_HEADER + i * SNAPSHOT_ENTRY;
        let n = b[at + 24] as usize;
        if n > SNAPSHOT_NAME_MAX {
            return invalid(format!("snapshot entry {i}: name of {n} bytes"));
        }
        let name = if n == 0 {
            None
        } else {
            match std::str::from_utf8(&b[at + 32..at + 32 + n]) {
                Ok(s) => Some(s.to_string()),
                Err(_) => return invalid(format!("snapshot entry {i}: name is not UTF-8")),
            }
        };
        out.push(SnapshotEntry {
            number: get_u64(b, at),
            root: get_u64(b, at + 8),
            time_ns: get_u64(b, at + 16) as i64,
            name,
        });
    }
    Ok(out)
}

impl CheckpointRoot {
    pub fn encode(&self) -> Box<Block> {
        let mut b = Box::new([0u8; BLOCK]);
        b[0..8].copy_from_slice(ROOT_MAGIC);
        put_u64(&mut b[..], 8, self.number);
        put_u64(&mut b[..], 16, self.sequence);
        put_u64(&mut b[..], 24, self.time_ns as u64);
        put_u64(&mut b[..], 32, self.ifile_root);
        b[40] = self.ifile_height;
        put_u64(&mut b[..], 48, self.ifile_pages);
        put_u64(&mut b[..], 56, self.next_ino);
        put_u64(&mut b[..], 64, self.inodes);
        put_u64(&mut b[..], 72, self.prev_root);
        put_u64(&mut b[..], 80, self.oldest_protected);
        for (i, t) in self.tables.iter().enumerate() {
            put_u64(&mut b[..], 88 + i * 16, t.root);
            b[96 + i * 16] = t.height;
        }
        let c = crc(&b[..BLOCK - 4]);
        put_u32(&mut b[..], BLOCK - 4, c);
        b
    }

    pub fn decode(b: &[u8]) -> Result<CheckpointRoot, Invalid> {
        if b.len() != BLOCK || &b[0..8] != ROOT_MAGIC {
            return invalid("checkpoint root: bad magic");
        }
        if get_u32(b, BLOCK - 4) != crc(&b[..BLOCK - 4]) {
            return invalid("checkpoint root: CRC mismatch");
        }
        let r = CheckpointRoot {
            number: get_u64(b, 8),
            sequence: get_u64(b, 16),
            time_ns: get_u64(b, 24) as i64,
            ifile_root: get_u64(b, 32),
            ifile_height: b[40],
            ifile_pages: get_u64(b, 48),
            next_ino: get_u64(b, 56),
            inodes: get_u64(b, 64),
            prev_root: get_u64(b, 72),
            oldest_protected: get_u64(b, 80),
            tables: std::array::from_fn(|i| TableRef {
                root: get_u64(b, 88 + i * 16),
                height: b[96 + i * 16],
            }),
        };
        if r.tables.iter().any(|t| t.height > HEIGHT_MAX) {
            return invalid("checkpoint root: table map too high");
        }
        if r.ifile_height > HEIGHT_MAX || r.ifile_height != height_for(r.ifile_pages) {
            return invalid("checkpoint root: inode-file height does not fit its size");
        }
        if r.ifile_pages.saturating_mul(INODES_PER_PAGE as u64) < r.next_ino {
            return invalid("checkpoint root: next inode past the inode file");
        }
        Ok(r)
    }
}
