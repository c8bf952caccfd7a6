//! The on-storage format of a tbfs pool, byte for byte. Little-endian everywhere; every length and
//! count read from storage is bounded before it is used, so decoding never panics on any bytes.
//!
//! ```text
//! block 0, 1      superblock copies (written alternately; the valid one with the higher generation wins)
//! block 2 ..      segments of `segment_blocks` blocks each, filled with logs back to back
//! ```
//!
//! Superblock (one 4 KiB block):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBFSSUPR` |
//! | 8 | 4 | format version (2; 1 is read and upgraded) |
//! | 12 | 4 | block size (4096) |
//! | 16 | 16 | pool id |
//! | 32 | 8 | generation (+1 on every superblock write) |
//! | 40 | 8 | pool bytes |
//! | 48 | 8 | segment blocks |
//! | 56 | 8 | segment count |
//! | 64 | 8 | first segment block (2) |
//! | 72 | 1 | ordering (0 strict, 1 relaxed) |
//! | 73 | 1 | barrier (0 every-log, 1 every-checkpoint, 2 superblock) |
//! | 74 | 6 | zero |
//! | 80 | 8 | superblock every bytes |
//! | 88 | 8 | superblock every ms |
//! | 96 | 8 | checkpoint every ms (0: never) |
//! | 104 | 8 | dirty bytes max |
//! | 112 | 8 | checkpoint number |
//! | 120 | 8 | checkpoint root block |
//! | 128 | 8 | sequence of the log holding that root |
//! | 136 | 8 | roll-forward start: block of the next log |
//! | 144 | 8 | roll-forward start: sequence of the next log |
//! | 152 | 4 | roll-forward start: summary CRC of the log before it |
//! | 156 | 4 | zero |
//! | 160 | 8 | segment after the one holding the next log |
//! | 168 | 8 | created (ns since the epoch) |
//! | 176 | 8 | written (ns since the epoch) |
//! | 184 | 8 | protection period of plain checkpoints in ms |
//! | 192 | 1 | background cleaner: 1 on, 0 off |
//! | 193 | 1 | free space the background cleaner aims for, percent |
//! | 194 | 3898 | zero |
//! | 4092 | 4 | CRC32C of bytes 0..4092 |
//!
//! Log: one summary block, then `payload_blocks` blocks in descriptor order.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBFSLOG1` |
//! | 8 | 2 | format version (2; 1 in a version-1 pool's logs) |
//! | 10 | 2 | flags: 1 begin, 2 end, 4 checkpoint (root is the last payload block), 8 data-only, 16 pad, 32 ahead (a data-only log whose summary may reach the device before its payload) |
//! | 12 | 4 | payload blocks |
//! | 16 | 16 | pool id |
//! | 32 | 8 | sequence (previous log's + 1) |
//! | 40 | 8 | checkpoint number (this log's if it ends a checkpoint, else the last one written) |
//! | 48 | 8 | segment after this log's segment |
//! | 56 | 4 | descriptor count (≤ 125) |
//! | 60 | 4 | previous log's summary CRC |
//! | 64 | 4 | CRC32C of the payload blocks |
//! | 68 | 4 | CRC32C of the summary block with this field zero |
//! | 72 | 8 | time (ns since the epoch) |
//! | 80 | 8 | zero |
//! | 88 | 32 × n | descriptors |
//!
//! Descriptor (32 bytes): kind u8 (1 data, 2 map node, 3 inode page, 4 inode-file map node,
//! 5 checkpoint root, 6 attributes, 7 table page, 8 table map node, 9 placed data: file data
//! roll-forward does not replay), level u8, zero u16, block count u32, inode u64, then for data
//! and nodes the first file block (or node index) u64 and a zero u64; for attributes the size u64
//! and mtime i64 (no payload).
//!
//! Map node (4 KiB): CRC32C u32 of bytes 4..4096, level u8, zero 3 bytes, then 511 block addresses
//! u64 (0: hole). A file of `n` blocks has height 0 (its root is the data block itself, `n ≤ 1`) or
//! the least `h` with 511^h ≥ n.
//!
//! Inode page (4 KiB): 16 inode records of 256 bytes. Record: ino u64 (0: free slot), mode u32,
//! nlink u32, size u64, mtime i64, ctime i64, map root u64, map height u8, zero 199 bytes, CRC32C u32
//! of bytes 0..252 of the record.
//!
//! Directory data (a directory's file blocks): per block, entry count u16, then entries of
//! ino u64, kind u8 (1 file, 2 dir), name length u8, name bytes; the block's last 4 bytes are the
//! CRC32C of the bytes before them.
//!
//! Checkpoint root (4 KiB): magic `TBFSCKPT`, number u64, sequence u64, time i64, inode-file root
//! u64, inode-file height u8 + 7 zero, inode-file pages u64, next inode u64, inode count u64, then
//! at 72 the previous checkpoint's root block u64 (0: none), at 80 the oldest plain checkpoint
//! still kept for the protection period u64, and the three tables as (map root u64, then map
//! height u8 and 7 zero) at 88 (segment usage), 104 (pinned blocks) and 120 (snapshots); zero to
//! 4092, CRC32C of bytes 0..4092.
//!
//! Table page (4 KiB): CRC32C u32 of bytes 4..4096, table id u8 (1 usage, 2 pinned, 3 snapshots),
//! zero 3 bytes, entry count u32, zero 4 bytes, then entries from byte 16:
//! - usage (16 bytes, 255 a page, page `p` holds segments `255p ..`): the checkpoint number that
//!   was next when the writer entered the segment u64, time of its newest log i64 (ns);
//! - pinned (24 bytes, 170 a page, page `s * pages_per_segment + j` holds segment `s`'s): block
//!   u64, the first checkpoint that can reference it u64, the last one that does u64;
//! - snapshots (96 bytes, 42 a page, packed in number order): number u64, root block u64,
//!   time i64, name length u8 + 7 zero, name (UTF-8, at most 64 bytes) zero-padded to 64.

use std::fmt;

/// Bytes per block.
pub const BLOCK: usize = 4096;
pub const BLOCK_U64: u64 = BLOCK as u64;
/// The format version this build writes. Version 2 added the placed-data descriptor
/// ([`DescKind::Placed`]), which a version-1 build would take for the end of the log chain.
/// Version 3 added block maps kept in the inode record ([`Extents`]), which an older build
/// would read as an empty file.
pub const VERSION: u32 = 3;
/// The oldest version this build reads. A version-1 or -2 pool has no placed data or inode
/// extents; opening it for writing makes it version 3 (both superblock copies, before any log
/// of this build).
pub const VERSION_OLDEST: u32 = 1;
pub const SUPER_MAGIC: &[u8; 8] = b"TBFSSUPR";
pub const LOG_MAGIC: &[u8; 8] = b"TBFSLOG1";
pub const ROOT_MAGIC: &[u8; 8] = b"TBFSCKPT";
/// Superblock copies live in blocks 0 and 1; segments start after them.
pub const SUPERBLOCKS: u64 = 2;
pub const FIRST_SEGMENT_BLOCK: u64 = SUPERBLOCKS;
/// Addresses per map node.
pub const FANOUT: usize = 511;
pub const INODE_BYTES: usize = 256;
pub const INODES_PER_PAGE: usize = BLOCK / INODE_BYTES;
pub const NAME_MAX: usize = 255;
pub const SUMMARY_HEADER_BYTES: usize = 88;
pub const DESCRIPTOR_BYTES: usize = 32;
pub const DESCRIPTORS_MAX: usize = (BLOCK - SUMMARY_HEADER_BYTES) / DESCRIPTOR_BYTES;
/// Largest height a block map may have (511^5 blocks is far past any pool).
pub const HEIGHT_MAX: u8 = 5;
/// Smallest segment: a summary and at least a few payload blocks.
pub const SEGMENT_BLOCKS_MIN: u64 = 8;

pub const FLAG_BEGIN: u16 = 1;
pub const FLAG_END: u16 = 2;
pub const FLAG_CHECKPOINT: u16 = 4;
pub const FLAG_DATA_ONLY: u16 = 8;
pub const FLAG_PAD: u16 = 16;
/// A data-only log whose summary may be written before its payload is complete, so that
/// independent logs need not wait for each other: roll-forward skips one whose payload fails its
/// CRC (and the later logs of its files) instead of ending the chain there.
pub const FLAG_AHEAD: u16 = 32;
const FLAGS_KNOWN: u16 = 63;

pub type Block = [u8; BLOCK];

/// CRC32C (CRC-32/ISCSI). crc-fast folds with VPCLMULQDQ where the CPU has it: on 4 KiB blocks
/// about twice crc32c's speed (57 against 21–27 GB/s here), and the block CRCs taken at every
/// buffered write were about 9 % of the CPU time in `bench fileserver`.
fn crc(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// CRC32C over several blocks, in order.
pub fn crc_blocks(bytes: &[u8]) -> u32 {
    crc(bytes)
}

/// `crc_blocks` of the bytes `crc` covered followed by `bytes`.
pub fn crc_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// `crc_blocks` of the bytes `crc` covered followed by one block whose own CRC
/// (`crc_blocks(block)`) is `block_crc`, without reading the block: the CRC of a
/// concatenation is the first part's CRC moved past [`BLOCK`] zero bytes (a linear map, kept
/// as four byte tables) combined with the second's. So a payload's CRC can be put together
/// from its blocks' CRCs, taken while each block was fresh in the cache.
pub fn crc_extend_block(crc: u32, block_crc: u32) -> u32 {
    let t = block_shift_tables();
    let b = crc.to_le_bytes();
    t[0][b[0] as usize]
        ^ t[1][b[1] as usize]
        ^ t[2][b[2] as usize]
        ^ t[3][b[3] as usize]
        ^ block_crc
}

/// The map "move a CRC past one block of zeros", as its values on each byte of the input.
fn block_shift_tables() -> &'static [[u32; 256]; 4] {
    static TABLES: std::sync::OnceLock<Box<[[u32; 256]; 4]>> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        // `crc32c_combine(x, 0, n)` is that map applied to `x`; being linear over GF(2), it is
        // known from its values on the 32 single bits.
        let bit: Vec<u32> = (0..32)
            .map(|i| crc32c::crc32c_combine(1 << i, 0, BLOCK))
            .collect();
        let mut t = Box::new([[0u32; 256]; 4]);
        for (k, table) in t.iter_mut().enumerate() {
            for (v, out) in table.iter_mut().enumerate() {
                *out = (0..8)
                    .filter(|j| v >> j & 1 == 1)
                    .fold(0, |acc, j| acc ^ bit[8 * k + j]);
            }
        }
        t
    })
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Why a structure read from storage was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn invalid<T>(what: impl Into<String>) -> Result<T, Invalid> {
    Err(Invalid(what.into()))
}

/// Where roll-forward starts: the log after the superblock's checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogPosition {
    pub block: u64,
    pub sequence: u64,
    pub prev_crc: u32,
    /// The segment that follows the one holding `block`.
    pub segment_next: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The format version it was read with ([`VERSION`] for one made by this build); encoding
    /// always writes [`VERSION`].
    pub version: u32,
    pub pool_id: [u8; 16],
    pub generation: u64,
    pub pool_bytes: u64,
    pub segment_blocks: u64,
    pub segment_count: u64,
    pub ordering: u8,
    pub barrier: u8,
    pub superblock_every_bytes: u64,
    pub superblock_every_ms: u64,
    pub checkpoint_every_ms: u64,
    pub dirty_bytes_max: u64,
    pub checkpoint: u64,
    pub checkpoint_root: u64,
    pub checkpoint_sequence: u64,
    pub next: LogPosition,
    pub created_ns: i64,
    pub written_ns: i64,
    /// How long plain checkpoints are kept, in ms.
    pub protection_ms: u64,
    pub background_gc: bool,
    pub gc_free_percent: u8,
}

impl Superblock {
    pub fn encode(&self) -> Box<Block> {
        let mut b = Box::new([0u8; BLOCK]);
        b[0..8].copy_from_slice(SUPER_MAGIC);
        put_u32(&mut b[..], 8, VERSION);
        put_u32(&mut b[..], 12, BLOCK as u32);
        b[16..32].copy_from_slice(&self.pool_id);
        put_u64(&mut b[..], 32, self.generation);
        put_u64(&mut b[..], 40, self.pool_bytes);
        put_u64(&mut b[..], 48, self.segment_blocks);
        put_u64(&mut b[..], 56, self.segment_count);
        put_u64(&mut b[..], 64, FIRST_SEGMENT_BLOCK);
        b[72] = self.ordering;
        b[73] = self.barrier;
        put_u64(&mut b[..], 80, self.superblock_every_bytes);
        put_u64(&mut b[..], 88, self.superblock_every_ms);
        put_u64(&mut b[..], 96, self.checkpoint_every_ms);
        put_u64(&mut b[..], 104, self.dirty_bytes_max);
        put_u64(&mut b[..], 112, self.checkpoint);
        put_u64(&mut b[..], 120, self.checkpoint_root);
        put_u64(&mut b[..], 128, self.checkpoint_sequence);
        put_u64(&mut b[..], 136, self.next.block);
        put_u64(&mut b[..], 144, self.next.sequence);
        put_u32(&mut b[..], 152, self.next.prev_crc);
        put_u64(&mut b[..], 160, self.next.segment_next);
        put_u64(&mut b[..], 168, self.created_ns as u64);
        put_u64(&mut b[..], 176, self.written_ns as u64);
        put_u64(&mut b[..], 184, self.protection_ms);
        b[192] = u8::from(self.background_gc);
        b[193] = self.gc_free_percent;
        let c = crc(&b[..BLOCK - 4]);
        put_u32(&mut b[..], BLOCK - 4, c);
        b
    }

    /// Decodes and checks a superblock against the device it was read from.
    pub fn decode(b: &[u8], device_bytes: u64) -> Result<Superblock, Invalid> {
        if b.len() != BLOCK {
            return invalid(format!("is {} bytes, not {BLOCK}", b.len()));
        }
        if &b[0..8] != SUPER_MAGIC {
            return invalid("bad magic (not a tbfs pool)");
        }
        if get_u32(b, BLOCK - 4) != crc(&b[..BLOCK - 4]) {
            return invalid("CRC mismatch");
        }
        let version = get_u32(b, 8);
        if !(VERSION_OLDEST..=VERSION).contains(&version) {
            return invalid(format!(
                "format version {version}, this build reads {VERSION_OLDEST} to {VERSION}"
            ));
        }
        if get_u32(b, 12) as usize != BLOCK || get_u64(b, 64) != FIRST_SEGMENT_BLOCK {
            return invalid("unsupported block size or layout");
        }
        let sb = Superblock {
            version,
            pool_id: b[16..32].try_into().expect("16 bytes"),
            generation: get_u64(b, 32),
            pool_bytes: get_u64(b, 40),
            segment_blocks: get_u64(b, 48),
            segment_count: get_u64(b, 56),
            ordering: b[72],
            barrier: b[73],
            superblock_every_bytes: get_u64(b, 80),
            superblock_every_ms: get_u64(b, 88),
            checkpoint_every_ms: get_u64(b, 96),
            dirty_bytes_max: get_u64(b, 104),
            checkpoint: get_u64(b, 112),
            checkpoint_root: get_u64(b, 120),
            checkpoint_sequence: get_u64(b, 128),
            next: LogPosition {
                block: get_u64(b, 136),
                sequence: get_u64(b, 144),
                prev_crc: get_u32(b, 152),
                segment_next: get_u64(b, 160),
            },
            created_ns: get_u64(b, 168) as i64,
            written_ns: get_u64(b, 176) as i64,
            protection_ms: get_u64(b, 184),
            background_gc: b[192] == 1,
            gc_free_percent: b[193].min(90),
        };
        if sb.pool_bytes > device_bytes {
            return invalid(format!(
                "pool is {} bytes but the device has only {device_bytes}",
                sb.pool_bytes
            ));
        }
        if sb.segment_blocks < SEGMENT_BLOCKS_MIN || sb.segment_count < 3 {
            return invalid("segment geometry out of range");
        }
        let end = sb
            .segment_blocks
            .checked_mul(sb.segment_count)
            .and_then(|v| v.checked_add(FIRST_SEGMENT_BLOCK))
            .and_then(|v| v.checked_mul(BLOCK_U64));
        if end.is_none_or(|e| e > sb.pool_bytes) {
            return invalid("segments run past the end of the pool");
        }
        if sb.ordering > 1 || sb.barrier > 2 {
            return invalid("unknown ordering or barrier policy");
        }
        if !sb.contains(sb.checkpoint_root) || !sb.contains(sb.next.block) {
            return invalid("checkpoint or log position outside the segments");
        }
        if sb.next.segment_next >= sb.segment_count {
            return invalid("next segment out of range");
        }
        if sb.next.sequence <= sb.checkpoint_sequence {
            return invalid("roll-forward start is not after its checkpoint");
        }
        Ok(sb)
    }

    /// Whether `block` lies inside the segment area.
    pub fn contains(&self, block: u64) -> bool {
        block >= FIRST_SEGMENT_BLOCK
            && block < FIRST_SEGMENT_BLOCK + self.segment_blocks * self.segment_count
    }
}

/// What a descriptor says its blocks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DescKind {
    Data = 1,
    MapNode = 2,
    InodePage = 3,
    InodeMapNode = 4,
    Root = 5,
    Attr = 6,
    /// A page of one of the checkpoint's tables (`ino` is the table id, `offset` the page).
    TablePage = 7,
    /// A map node of one of the checkpoint's tables (`ino` is the table id).
    TableNode = 8,
    /// File data placed for the next checkpoint, which roll-forward does not replay: the data
    /// of a file with a change only a checkpoint records (created, renamed, linked, its
    /// attributes or size set) when it was written. The newest checkpoint before the log may
    /// not hold that file, or hold another file under its number (version 2).
    Placed = 9,
}

impl DescKind {
    fn from_u8(v: u8) -> Option<DescKind> {
        Some(match v {
            1 => DescKind::Data,
            2 => DescKind::MapNode,
            3 => DescKind::InodePage,
            4 => DescKind::InodeMapNode,
            5 => DescKind::Root,
            6 => DescKind::Attr,
            7 => DescKind::TablePage,
            8 => DescKind::TableNode,
            9 => DescKind::Placed,
            _ => return None,
        })
    }
}

/// One extent (or attribute record) of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: DescKind,
    pub level: u8,
    pub blocks: u32,
    pub ino: u64,
    /// First file block (data), node index (nodes), page index (inode pages); size for `Attr`.
    pub offset: u64,
    /// mtime for `Attr`, else 0.
    pub extra: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub flags: u16,
    pub payload_blocks: u32,
    pub pool_id: [u8; 16],
    pub sequence: u64,
    pub checkpoint: u64,
    pub segment_next: u64,
    pub prev_crc: u32,
    pub payload_crc: u32,
    pub time_ns: i64,
    pub descriptors: Vec<Descriptor>,
}

impl Summary {
    /// Encodes into `b` (one block) and returns the summary CRC.
    pub fn encode_into(&self, b: &mut [u8]) -> u32 {
        assert!(
            self.descriptors.len() <= DESCRIPTORS_MAX,
            "descriptor count bounded by the writer"
        );
        b[..BLOCK].fill(0);
        b[0..8].copy_from_slice(LOG_MAGIC);
        put_u16(b, 8, VERSION as u16);
        put_u16(b, 10, self.flags);
        put_u32(b, 12, self.payload_blocks);
        b[16..32].copy_from_slice(&self.pool_id);
        put_u64(b, 32, self.sequence);
        put_u64(b, 40, self.checkpoint);
        put_u64(b, 48, self.segment_next);
        put_u32(b, 56, self.descriptors.len() as u32);
        put_u32(b, 60, self.prev_crc);
        put_u32(b, 64, self.payload_crc);
        put_u64(b, 72, self.time_ns as u64);
        for (i, d) in self.descriptors.iter().enumerate() {
            let at = SUMMARY_HEADER_BYTES + i * DESCRIPTOR_BYTES;
            b[at] = d.kind as u8;
            b[at + 1] = d.level;
            put_u32(b, at + 4, d.blocks);
            put_u64(b, at + 8, d.ino);
            put_u64(b, at + 16, d.offset);
            put_u64(b, at + 24, d.extra as u64);
        }
        let c = crc(&b[..BLOCK]);
        put_u32(b, 68, c);
        c
    }

    /// Decodes a summary block, checking everything that needs no payload. Returns the summary
    /// and its CRC.
    pub fn decode(b: &[u8]) -> Result<(Summary, u32), Invalid> {
        if b.len() != BLOCK {
            return invalid("summary is not one block");
        }
        if &b[0..8] != LOG_MAGIC {
            return invalid("no log summary (bad magic)");
        }
        let stored = get_u32(b, 68);
        let mut copy = [0u8; BLOCK];
        copy.copy_from_slice(b);
        put_u32(&mut copy, 68, 0);
        if crc(&copy) != stored {
            return invalid("summary CRC mismatch");
        }
        if !(VERSION_OLDEST..=VERSION).contains(&(get_u16(b, 8) as u32)) {
            return invalid("unknown log version");
        }
        let flags = get_u16(b, 10);
        if flags & !FLAGS_KNOWN != 0 {
            return invalid(format!("unknown log flags {flags:#x}"));
        }
        let count = get_u32(b, 56) as usize;
        if count > DESCRIPTORS_MAX {
            return invalid(format!("{count} descriptors (at most {DESCRIPTORS_MAX})"));
        }
        let mut descriptors = Vec::with_capacity(count);
        let mut blocks_total: u64 = 0;
        for i in 0..count {
            let at = SUMMARY_HEADER_BYTES + i * DESCRIPTOR_BYTES;
            let Some(kind) = DescKind::from_u8(b[at]) else {
                return invalid(format!("descriptor {i}: unknown kind {}", b[at]));
            };
            let d = Descriptor {
                kind,
                level: b[at + 1],
                blocks: get_u32(b, at + 4),
                ino: get_u64(b, at + 8),
                offset: get_u64(b, at + 16),
                extra: get_u64(b, at + 24) as i64,
            };
            if (kind == DescKind::Attr) != (d.blocks == 0) {
                return invalid(format!(
                    "descriptor {i}: block count {} for {kind:?}",
                    d.blocks
                ));
            }
            if d.offset.checked_add(d.blocks as u64).is_none() {
                return invalid(format!("descriptor {i}: offset overflows"));
            }
            blocks_total += d.blocks as u64;
            descriptors.push(d);
        }
        let payload_blocks = get_u32(b, 12);
        if blocks_total != payload_blocks as u64 {
            return invalid(format!(
                "descriptors cover {blocks_total} blocks, summary says {payload_blocks}"
            ));
        }
        let s = Summary {
            flags,
            payload_blocks,
            pool_id: b[16..32].try_into().expect("16 bytes"),
            sequence: get_u64(b, 32),
            checkpoint: get_u64(b, 40),
            segment_next: get_u64(b, 48),
            prev_crc: get_u32(b, 60),
            payload_crc: get_u32(b, 64),
            time_ns: get_u64(b, 72) as i64,
            descriptors,
        };
        if s.flags & FLAG_CHECKPOINT != 0
            && s.descriptors
                .last()
                .is_none_or(|d| d.kind != DescKind::Root || d.blocks != 1)
        {
            return invalid("checkpoint log does not end with its root");
        }
        Ok((s, stored))
    }
}

/// Encodes a block-map node into `b`, which holds zeros: `FANOUT` child addresses at `level`
/// (1: children are data blocks).
pub fn encode_node_into(b: &mut Block, level: u8, children: &[u64]) {
    debug_assert!(children.len() <= FANOUT);
    b[4] = level;
    for (i, &c) in children.iter().enumerate() {
        put_u64(&mut b[..], 8 + i * 8, c);
    }
    let c = crc(&b[4..]);
    put_u32(&mut b[..], 0, c);
}

pub fn decode_node(b: &[u8], level: u8) -> Result<Vec<u64>, Invalid> {
    if b.len() != BLOCK || get_u32(b, 0) != crc(&b[4..BLOCK]) {
        return invalid("map node CRC mismatch");
    }
    if b[4] != level {
        return invalid(format!("map node has level {}, expected {level}", b[4]));
    }
    Ok((0..FANOUT).map(|i| get_u64(b, 8 + i * 8)).collect())
}

/// The least height whose tree covers `blocks` blocks.
pub fn height_for(blocks: u64) -> u8 {
    let mut h = 0u8;
    let mut cover: u64 = 1;
    while cover < blocks {
        cover = cover.saturating_mul(FANOUT as u64);
        h += 1;
    }
    h
}

/// Runs an inode record holds at most ([`Extents`]): the 180 bytes after its fields.
pub const EXTENTS_MAX: usize = 15;
/// Where the runs start in an inode record, and the bytes of each (address, count).
const EXTENTS_AT: usize = 72;
const EXTENT_BYTES: usize = 12;

/// A block map kept in the inode record itself (format 3): runs of consecutive addresses
/// from file block 0, each an address and a count of blocks (address 0: a hole). A file
/// written whole, or in a few pieces, needs no map node, so a checkpoint writes none for it
/// and the cleaner finds none of its to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extents {
    len: u8,
    runs: [(u64, u32); EXTENTS_MAX],
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
const RDEV_AT: usize = 60;

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

fn finish_dir_block(b: &mut Block) {
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
const TABLE_HEADER: usize = 16;
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

fn table_page(id: u8, count: usize) -> Box<Block> {
    let mut b = Box::new([0u8; BLOCK]);
    b[4] = id;
    put_u32(&mut b[..], 8, count as u32);
    b
}

fn seal_table(b: &mut Block) {
    let c = crc(&b[4..]);
    put_u32(&mut b[..], 0, c);
}

/// Checks a table page's CRC, id and count; returns the entry count.
fn open_table(b: &[u8], id: u8) -> Result<usize, Invalid> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_payload_crc_put_together_from_block_crcs_is_the_crc_of_the_bytes(
            blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), BLOCK), 0..5)
        ) {
            let whole = blocks.iter().fold(0, |c, b| crc_append(c, b));
            let combined = blocks.iter().fold(0, |c, b| crc_extend_block(c, crc_blocks(b)));
            prop_assert_eq!(whole, combined);
        }
    }

    fn sample_sb() -> Superblock {
        Superblock {
            version: VERSION,
            pool_id: [7; 16],
            generation: 3,
            pool_bytes: 64 << 20,
            segment_blocks: 256,
            segment_count: 60,
            ordering: 1,
            barrier: 1,
            superblock_every_bytes: 64 << 20,
            superblock_every_ms: 5000,
            checkpoint_every_ms: 5000,
            dirty_bytes_max: 32 << 20,
            checkpoint: 9,
            checkpoint_root: 100,
            checkpoint_sequence: 40,
            next: LogPosition {
                block: 101,
                sequence: 41,
                prev_crc: 0xdead,
                segment_next: 2,
            },
            created_ns: 1,
            written_ns: 2,
            protection_ms: 3_600_000,
            background_gc: true,
            gc_free_percent: 20,
        }
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let sb = sample_sb();
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b[..], 64 << 20).unwrap(), sb);
        let mut bad = b.clone();
        bad[200] ^= 1;
        assert!(Superblock::decode(&bad[..], 64 << 20)
            .unwrap_err()
            .0
            .contains("CRC"));
        assert!(Superblock::decode(&b[..], 1 << 20)
            .unwrap_err()
            .0
            .contains("device has only"));
    }

    #[test]
    fn summary_round_trips_and_checks_counts() {
        let s = Summary {
            flags: FLAG_BEGIN | FLAG_END | FLAG_DATA_ONLY,
            payload_blocks: 3,
            pool_id: [1; 16],
            sequence: 5,
            checkpoint: 2,
            segment_next: 4,
            prev_crc: 77,
            payload_crc: 99,
            time_ns: 12,
            descriptors: vec![
                Descriptor {
                    kind: DescKind::Data,
                    level: 0,
                    blocks: 3,
                    ino: 9,
                    offset: 10,
                    extra: 0,
                },
                Descriptor {
                    kind: DescKind::Attr,
                    level: 0,
                    blocks: 0,
                    ino: 9,
                    offset: 52000,
                    extra: 4,
                },
            ],
        };
        let mut b = [0u8; BLOCK];
        let c = s.encode_into(&mut b);
        let (d, c2) = Summary::decode(&b).unwrap();
        assert_eq!((d, c2), (s, c));
        // A payload count that disagrees with the descriptors is refused even with a fresh CRC.
        put_u32(&mut b, 12, 4);
        put_u32(&mut b, 68, 0);
        let c = crc(&b);
        put_u32(&mut b, 68, c);
        assert!(Summary::decode(&b).unwrap_err().0.contains("cover"));
    }

    #[test]
    fn nodes_inodes_dirs_and_roots_round_trip() {
        let children: Vec<u64> = (0..FANOUT as u64).map(|i| i * 3).collect();
        let mut n = [0u8; BLOCK];
        encode_node_into(&mut n, 2, &children);
        assert_eq!(decode_node(&n[..], 2).unwrap(), children);
        assert!(decode_node(&n[..], 1).is_err());

        let r = InodeRecord {
            ino: 5,
            mode: S_IFREG | 0o644,
            nlink: 1,
            size: 9,
            mtime_ns: 1,
            ctime_ns: 2,
            root: 77,
            height: 1,
            uid: 1000,
            gid: 100,
            atime_ns: 3,
            extents: Extents::default(),
            rdev: 0,
        };
        let mut b = [0u8; INODE_BYTES];
        r.encode_into(&mut b);
        assert_eq!(InodeRecord::decode(&b).unwrap(), Some(r));
        assert_eq!(InodeRecord::decode(&[0u8; INODE_BYTES]).unwrap(), None);

        // A map in the record: fifteen runs (holes among them) fill it to its CRC.
        let blocks: Vec<u64> = (0..15u64)
            .flat_map(|i| {
                let start = if i % 4 == 3 { 0 } else { 1000 + 100 * i };
                (0..i + 1).map(move |k| if start == 0 { 0 } else { start + k })
            })
            .collect();
        let extents = Extents::of(&blocks).expect("fifteen runs fit");
        assert_eq!(extents.runs().len(), EXTENTS_MAX);
        assert_eq!(extents.expand(), blocks);
        let inline = InodeRecord {
            root: 0,
            height: 0,
            extents,
            ..r
        };
        inline.encode_into(&mut b);
        assert_eq!(InodeRecord::decode(&b).unwrap(), Some(inline));
        let mut more = blocks.clone();
        more.push(1);
        assert!(Extents::of(&more).is_none(), "a sixteenth run does not fit");
        // Runs and a tree at once, or a run of no blocks, are malformed.
        InodeRecord { root: 77, ..inline }.encode_into(&mut b);
        assert!(InodeRecord::decode(&b).is_err());
        let mut empty_run = inline;
        empty_run.extents.runs[3].1 = 0;
        empty_run.encode_into(&mut b);
        assert!(InodeRecord::decode(&b).is_err());

        let entries: Vec<DirRecord> = (0..500)
            .map(|i| DirRecord {
                ino: i + 2,
                is_dir: i % 3 == 0,
                name: format!("entry-{i:05}-{}", "x".repeat(i as usize % 40)),
            })
            .collect();
        let blocks = encode_dir(&entries);
        assert!(blocks.len() > 1);
        let mut back = Vec::new();
        for b in &blocks {
            decode_dir_block(&b[..], &mut back).unwrap();
        }
        assert_eq!(back, entries);

        let root = CheckpointRoot {
            number: 4,
            sequence: 8,
            time_ns: 1,
            ifile_root: 50,
            ifile_height: 0,
            ifile_pages: 1,
            next_ino: 3,
            inodes: 2,
            prev_root: 49,
            oldest_protected: 2,
            tables: [
                TableRef {
                    root: 60,
                    height: 0,
                },
                TableRef {
                    root: 61,
                    height: 1,
                },
                TableRef { root: 0, height: 0 },
            ],
        };
        assert_eq!(CheckpointRoot::decode(&root.encode()[..]).unwrap(), root);

        let usage = vec![
            UsageEntry {
                born: 3,
                written_ns: 99,
            },
            UsageEntry {
                born: 7,
                written_ns: -1,
            },
        ];
        let page = encode_usage_page(&usage);
        assert_eq!(decode_usage_page(&page[..]).unwrap(), usage);
        assert!(
            decode_pinned_page(&page[..]).is_err(),
            "a page of another table"
        );
        let pinned: Vec<PinnedEntry> = (0..table_entries_per_page(TABLE_PINNED) as u64)
            .map(|i| PinnedEntry {
                block: 100 + i,
                born: i,
                died: i + 2,
            })
            .collect();
        let page = encode_pinned_page(&pinned);
        assert_eq!(decode_pinned_page(&page[..]).unwrap(), pinned);
        let snaps = vec![
            SnapshotEntry {
                number: 4,
                root: 9,
                time_ns: 5,
                name: Some("before-upgrade".into()),
            },
            SnapshotEntry {
                number: 8,
                root: 19,
                time_ns: 6,
                name: None,
            },
        ];
        let mut page = encode_snapshot_page(&snaps);
        assert_eq!(decode_snapshot_page(&page[..]).unwrap(), snaps);
        page[100] ^= 1;
        assert!(decode_snapshot_page(&page[..]).is_err());
    }

    #[test]
    fn heights_cover_their_blocks() {
        assert_eq!(height_for(0), 0);
        assert_eq!(height_for(1), 0);
        assert_eq!(height_for(2), 1);
        assert_eq!(height_for(511), 1);
        assert_eq!(height_for(512), 2);
        assert_eq!(height_for(511 * 511 + 1), 3);
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_blocks_never_panics(bytes in proptest::collection::vec(any::<u8>(), BLOCK), level in 0u8..7) {
            let _ = Superblock::decode(&bytes, u64::MAX);
            let _ = Summary::decode(&bytes);
            let _ = decode_node(&bytes, level);
            let _ = InodeRecord::decode(&bytes[..INODE_BYTES]);
            let mut out = Vec::new();
            let _ = decode_dir_block(&bytes, &mut out);
            let _ = CheckpointRoot::decode(&bytes);
            let _ = decode_usage_page(&bytes);
            let _ = decode_pinned_page(&bytes);
            let _ = decode_snapshot_page(&bytes);
        }

        #[test]
        fn decoding_mutated_structures_never_panics(flips in proptest::collection::vec((0usize..BLOCK, any::<u8>()), 1..8)) {
            let mut blocks: Vec<Vec<u8>> = vec![sample_sb().encode().to_vec(), CheckpointRoot::default().encode().to_vec()];
            let entries = vec![DirRecord { ino: 2, is_dir: false, name: "a".into() }];
            blocks.push(encode_dir(&entries)[0].to_vec());
            let mut s = [0u8; BLOCK];
            Summary { flags: FLAG_END, payload_blocks: 0, pool_id: [0; 16], sequence: 1, checkpoint: 0, segment_next: 0, prev_crc: 0, payload_crc: 0, time_ns: 0, descriptors: vec![] }.encode_into(&mut s);
            blocks.push(s.to_vec());
            for mut b in blocks {
                for &(at, v) in &flips {
                    b[at] ^= v;
                }
                // Re-seal the CRCs too, so the field checks behind them are reached.
                let mut resealed = b.clone();
                let c = crc(&resealed[..BLOCK - 4]);
                put_u32(&mut resealed, BLOCK - 4, c);
                for v in [&b, &resealed] {
                    let _ = Superblock::decode(v, u64::MAX);
                    let _ = Summary::decode(v);
                    let _ = CheckpointRoot::decode(v);
                    let _ = decode_usage_page(v);
                    let _ = decode_pinned_page(v);
                    let _ = decode_snapshot_page(v);
                    let mut out = Vec::new();
                    let _ = decode_dir_block(v, &mut out);
                }
            }
        }
    }
}
