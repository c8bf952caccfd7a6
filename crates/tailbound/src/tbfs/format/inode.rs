//! Inode records (with their extents) and directory blocks.

use super::*;

/// Runs an inode record holds at most ([`Extents`]): the 180 bytes after its fields.
pub const EXTENTS_MAX: usize = 15;
/// Where the runs start in an inode record, and the bytes of each (address, count).
pub(super) const EXTENTS_AT: usize = 72;
pub(super) const EXTENT_BYTES: usize = 12;

/// A block map kept in the inode record itself (format 3): runs of consecutive addresses
/// from file block 0, each an address and a count of blocks (address 0: a hole). A file
/// written whole, or in a few pieces, needs no map node, so a checkpoint writes none for it
/// and the cleaner finds none of its to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extents {
    len: u8,
    pub(super) runs: [(u64, u32); EXTENTS_MAX],
}

impl Extents {
    /// The runs of `blocks` (one address per file block, 0 for a hole), if there are at most
    /// [`EXTENTS_MAX`] of them.
    pub fn of(blocks: &[u64]) -> Option<Extents> {
        let mut e = Extents::default();
        let mut i = 0;
        while i < blocks.len() {
            let first = blocks[i];
            let mut n = 1usize;
            while i + n < blocks.len()
                && n < u32::MAX as usize
                && Some(blocks[i + n])
                    == if first == 0 {
                        Some(0)
                    } else {
                        first.checked_add(n as u64)
                    }
            {
                n += 1;
            }
            if e.len as usize == EXTENTS_MAX {
                return None;
            }
            e.runs[e.len as usize] = (first, n as u32);
            e.len += 1;
            i += n;
        }
        Some(e)
    }

    /// `(address, blocks)` of each run, in file order.
    pub fn runs(&self) -> &[(u64, u32)] {
        &self.runs[..self.len as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// File blocks the runs cover.
    pub fn blocks(&self) -> u64 {
        self.runs().iter().map(|&(_, n)| n as u64).sum()
    }

    /// The runs (address, blocks) that do not lie wholly where `inside` says blocks may be.
    pub fn runs_outside<'a>(
        &'a self,
        inside: impl Fn(u64) -> bool + 'a,
    ) -> impl Iterator<Item = (u64, u32)> + 'a {
        self.runs().iter().copied().filter(move |&(addr, n)| {
            addr != 0 && !(inside(addr) && inside(addr.saturating_add(n as u64 - 1)))
        })
    }

    /// The address of every file block (saturating: a run read from damaged storage may reach
    /// past the largest address, which [`Extents::runs_outside`] reports).
    pub fn expand(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.blocks() as usize);
        for &(addr, n) in self.runs() {
            if addr == 0 {
                out.extend(std::iter::repeat_n(0, n as usize));
            } else {
                out.extend((0..n as u64).map(|k| addr.saturating_add(k)));
            }
        }
        out
    }
}

/// One inode as stored in an inode page. Its block map is either a tree of map nodes
/// (`root`, `height`) or, from format 3, the runs in the record (`extents`, with `root` and
/// `height` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InodeRecord {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub root: u64,
    pub height: u8,
    pub uid: u32,
    pub gid: u32,
    pub atime_ns: i64,
    pub extents: Extents,
    /// A device inode's number (`Stat::rdev`); 0 for every other kind.
    pub rdev: u32,
}

pub const S_IFMT: u32 = 0o170000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFIFO: u32 = 0o010000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFBLK: u32 = 0o060000;
pub const S_IFSOCK: u32 = 0o140000;
/// Where a device's number is kept in an inode record.
pub(super) const RDEV_AT: usize = 60;

impl InodeRecord {
    pub fn encode_into(&self, b: &mut [u8]) {
        b[..INODE_BYTES].fill(0);
        if self.ino == 0 {
            return;
        }
        put_u64(b, 0, self.ino);
        put_u32(b, 8, self.mode);
        put_u32(b, 12, self.nlink);
        put_u64(b, 16, self.size);
        put_u64(b, 24, self.mtime_ns as u64);
        put_u64(b, 32, self.ctime_ns as u64);
        put_u64(b, 40, self.root);
        b[48] = self.height;
        put_u32(b, 52, self.uid);
        put_u32(b, 56, self.gid);
        put_u64(b, 64, self.atime_ns as u64);
        put_u32(b, RDEV_AT, self.rdev);
        b[49] = self.extents.len;
        for (i, &(addr, n)) in self.extents.runs().iter().enumerate() {
            let at = EXTENTS_AT + i * EXTENT_BYTES;
            put_u64(b, at, addr);
            put_u32(b, at + 8, n);
        }
        let c = crc(&b[..INODE_BYTES - 4]);
        put_u32(b, INODE_BYTES - 4, c);
    }

    /// `Ok(None)` for a free slot.
    pub fn decode(b: &[u8]) -> Result<Option<InodeRecord>, Invalid> {
        if b[..INODE_BYTES].iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if get_u32(b, INODE_BYTES - 4) != crc(&b[..INODE_BYTES - 4]) {
            return invalid("inode record CRC mismatch");
        }
        let mut extents = Extents::default();
        let len = b[49] as usize;
        if len > EXTENTS_MAX {
            return invalid(format!(
                "inode record {}: {len} extents, at most {EXTENTS_MAX}",
                get_u64(b, 0)
            ));
        }
        for i in 0..len {
            let at = EXTENTS_AT + i * EXTENT_BYTES;
            extents.runs[i] = (get_u64(b, at), get_u32(b, at + 8));
        }
        extents.len = len as u8;
        let r = InodeRecord {
            ino: get_u64(b, 0),
            mode: get_u32(b, 8),
            nlink: get_u32(b, 12),
            size: get_u64(b, 16),
            mtime_ns: get_u64(b, 24) as i64,
            ctime_ns: get_u64(b, 32) as i64,
            root: get_u64(b, 40),
            height: b[48],
            uid: get_u32(b, 52),
            gid: get_u32(b, 56),
            atime_ns: get_u64(b, 64) as i64,
            extents,
            rdev: get_u32(b, RDEV_AT),
        };
        let kind = r.mode & S_IFMT;
        let special = matches!(kind, S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK);
        if r.ino == 0
            || !(special || kind == S_IFREG || kind == S_IFDIR || kind == S_IFLNK)
            || (special && (r.size != 0 || r.root != 0 || len != 0))
            || (!matches!(kind, S_IFCHR | S_IFBLK) && r.rdev != 0)
            || r.height > HEIGHT_MAX
            || (len > 0 && (r.root != 0 || r.height != 0))
            || r.extents.runs().iter().any(|&(_, n)| n == 0)
        {
            return invalid(format!("inode record {} malformed", r.ino));
        }
        Ok(Some(r))
    }
}

/// One directory entry as stored in directory data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRecord {
    pub ino: u64,
    pub is_dir: bool,
    pub name: String,
}

/// Packs entries into directory blocks.
pub fn encode_dir(entries: &[DirRecord]) -> Vec<Box<Block>> {
    encode_dir_entries(entries.iter().map(|e| (e.ino, e.is_dir, e.name.as_str())))
}

/// [`encode_dir`] from `(ino, is_dir, name)`, without a record per entry.
pub fn encode_dir_entries<'a>(
    entries: impl IntoIterator<Item = (u64, bool, &'a str)>,
) -> Vec<Box<Block>> {
    encode_dir_entries_in(entries, || Box::new([0u8; BLOCK]))
}

/// [`encode_dir_entries`] into blocks `new_block` makes (each holding zeros), so a caller can
/// encode straight into the buffers it hands on.
pub fn encode_dir_entries_in<'a, B: AsMut<Block>>(
    entries: impl IntoIterator<Item = (u64, bool, &'a str)>,
    mut new_block: impl FnMut() -> B,
) -> Vec<B> {
    let mut out = Vec::new();
    let mut cur: Option<B> = None;
    let mut at = 2usize;
    let mut count: u16 = 0;
    for (ino, is_dir, name) in entries {
        let need = 10 + name.len();
        if at + need > BLOCK - 4 {
            if let Some(mut full) = cur.take() {
                let b = full.as_mut();
                put_u16(&mut b[..], 0, count);
                finish_dir_block(b);
                out.push(full);
            }
            at = 2;
            count = 0;
        }
        let b = cur.get_or_insert_with(&mut new_block).as_mut();
        put_u64(&mut b[..], at, ino);
        b[at + 8] = if is_dir { 2 } else { 1 };
        b[at + 9] = name.len() as u8;
        b[at + 10..at + 10 + name.len()].copy_from_slice(name.as_bytes());
        at += need;
        count += 1;
    }
    if let Some(mut last) = cur.filter(|_| count > 0) {
        let b = last.as_mut();
        put_u16(&mut b[..], 0, count);
        finish_dir_block(b);
        out.push(last);
    }
    out
}

pub(super) fn finish_dir_block(b: &mut Block) {
    let c = crc(&b[..BLOCK - 4]);
    put_u32(&mut b[..], BLOCK - 4, c);
}

pub fn decode_dir_block(b: &[u8], out: &mut Vec<DirRecord>) -> Result<(), Invalid> {
    if b.len() != BLOCK {
        return invalid("directory block is not one block");
    }
    if b.iter().all(|&x| x == 0) {
        return Ok(());
    }
    if get_u32(b, BLOCK - 4) != crc(&b[..BLOCK - 4]) {
        return invalid("directory block CRC mismatch");
    }
    let count = get_u16(b, 0) as usize;
    let mut at = 2usize;
    for i in 0..count {
        if at + 10 > BLOCK - 4 {
            return invalid(format!("directory entry {i} runs past the block"));
        }
        let ino = get_u64(b, at);
        let kind = b[at + 8];
        let len = b[at + 9] as usize;
        if at + 10 + len > BLOCK - 4 || len == 0 || ino == 0 || !(1..=2).contains(&kind) {
            return invalid(format!("directory entry {i} malformed"));
        }
        let Ok(name) = std::str::from_utf8(&b[at + 10..at + 10 + len]) else {
            return invalid(format!("directory entry {i}: name is not UTF-8"));
        };
        if name.contains('/') || name == "." || name == ".." {
            return invalid(format!("directory entry {i}: invalid name {name:?}"));
        }
        out.push(DirRecord {
            ino,
            is_dir: kind == 2,
            name: name.to_string(),
        });
        at += 10 + len;
    }
    Ok(())
}
