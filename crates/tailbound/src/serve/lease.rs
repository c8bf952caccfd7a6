//! Leases: what a client may answer itself, and the words that revoke it (docs/PROTOCOL.md,
//! "Leases"). The server keeps one table of generation words per pool in a memfd every leasing
//! client maps read-only: a word per inode slot (an inode's number modulo the slots) and a word
//! per segment slot. The server raises an inode's word once a change to the inode (its bytes,
//! size, attributes, names in it for a directory, its access time) is made and before the
//! change is acknowledged, and a segment's word before the log writer writes into it again.
//! A lease names the words it depends on and their values when it was granted; it holds while
//! they are unchanged. Words are 64 bits wide, so none comes back to a value it had.
//!
//! - here: the leases; `lease_wire`: their bytes;
//! - `lease_shm`: every `unsafe` of them (the table's memfd, read-only mappings of it and of
//!   the pool, descriptor passing);
//! - `lease_server`: the table, raising its words, granting leases;
//! - `lease_client`: the client's caches and its reads from the pool.

use crate::tbfs::Stat;

/// Bytes before the first generation word.
pub(super) const HEADER_BYTES: usize = 4096;
/// The liveness word: a `u32` in the header the server holds as a robust futex (its thread's
/// id; the kernel sets bit 30 when that thread ends, however the server ends).
pub(super) const LIVENESS_AT: usize = 0;
/// Inode slots: inode `i`'s word is slot `i % INODE_SLOTS`.
pub(super) const INODE_SLOTS: u32 = 1 << 16;
/// Segment slots: segment `s`'s word is slot `s % SEGMENT_SLOTS`, after the inode slots.
pub(super) const SEGMENT_SLOTS: u32 = 1 << 14;
/// The most blocks one data lease names.
pub(super) const LEASE_BLOCKS: u64 = 1024;

/// The table's byte length.
pub(super) fn table_bytes(inode_slots: u32, segment_slots: u32) -> usize {
    HEADER_BYTES + 8 * (inode_slots as usize + segment_slots as usize)
}

/// The offset of an inode slot's word.
pub(super) fn inode_word(slots: u32, ino: u64) -> usize {
    HEADER_BYTES + 8 * (ino % u64::from(slots.max(1))) as usize
}

/// The offset of a segment slot's word.
pub(super) fn segment_word(inode_slots: u32, segment_slots: u32, seg: u64) -> usize {
    HEADER_BYTES + 8 * (inode_slots as usize + (seg % u64::from(segment_slots.max(1))) as usize)
}

/// The table's shape, as the server tells a client (with the descriptors on the socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTableInfo {
    pub inode_slots: u32,
    pub segment_slots: u32,
    /// The pool's bytes, when its read-only descriptor follows the table's; 0: no direct reads.
    pub pool_bytes: u64,
}

/// Words a lease depends on: (byte offset of the word in the table, its value at the grant).
pub type Words = Vec<(u32, u64)>;

/// A stat the client may answer again while `words` hold (empty: not to be kept).
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedStat {
    pub stat: Stat,
    pub words: Words,
}

/// Blocks of a file a client may read from the pool while the inode's word and each block's
/// segment word hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataLease {
    /// The inode's word and its value.
    pub inode: (u32, u64),
    pub size: u64,
    pub first: u64,
    /// Per block from `first`: its device address (0 a hole, `tbfs::ASK` ask the server),
    /// its segment's word and that word's value (0 and 0 where no address).
    pub blocks: Vec<(u64, u32, u64)>,
}
