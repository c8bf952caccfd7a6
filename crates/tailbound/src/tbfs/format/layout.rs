//! Block size, versions, magics and flags, the CRCs, and the little-endian field helpers every
//! record of the format uses.

use std::fmt;

/// Bytes per block.
pub const BLOCK: usize = 4096;
pub const BLOCK_U64: u64 = BLOCK as u64;
/// The format version this build writes. Version 2 added the placed-data descriptor
/// ([`DescKind::Placed`](super::DescKind::Placed)), which a version-1 build would take for the end of the log chain.
/// Version 3 added block maps kept in the inode record ([`Extents`](super::Extents)), which an older build
/// would read as an empty file.
/// Version 4 writes checkpoint logs ahead of earlier payloads (`FLAG_AHEAD` on a log that is not
/// data-only) with their dependencies (`DescKind::Depends`); an older build would end the log
/// chain at such a checkpoint after an incomplete payload, and lose the acknowledged logs after it.
/// Version 5 adds the jump ([`DescKind::Jump`](super::DescKind::Jump)): a pad log after which the
/// chain goes on at a block it names, so the cleaner's copies have a segment of their own beside
/// the writers' logs; an older build would end the chain at the first jump.
pub const VERSION: u32 = 5;
/// The oldest version this build reads. A version-1 to -4 pool has no jump (nor, before
/// versions 2, 3 and 4, placed data, inode extents or checkpoints written ahead); opening it
/// for writing makes it version 5 (both superblock copies, before any log of this build).
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
/// CRC (and the later logs of its files) instead of ending the chain there. On a log that is not
/// data-only (a checkpoint's, version 4): written without waiting for earlier payloads, so the
/// checkpoint counts only if they and its own are complete, and the chain goes on past it.
pub const FLAG_AHEAD: u16 = 32;
pub(super) const FLAGS_KNOWN: u16 = 63;

pub type Block = [u8; BLOCK];

/// CRC32C (CRC-32/ISCSI). crc-fast folds with VPCLMULQDQ where the CPU has it, faster than
/// crc32c on 4 KiB blocks; block CRCs are taken at every buffered write.
pub(super) fn crc(bytes: &[u8]) -> u32 {
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
pub(super) fn block_shift_tables() -> &'static [[u32; 256]; 4] {
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

pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(super) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub(super) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(super) fn put_u16(b: &mut [u8], at: usize, v: u16) {
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

pub(super) fn invalid<T>(what: impl Into<String>) -> Result<T, Invalid> {
    Err(Invalid(what.into()))
}
