//! A file's blocks as a client of a memory pool may read them itself: the device address of
//! each block whose bytes are in the pool, "ask" for one still only in the engine's buffers
//! (or a cleaner's copy not yet written), a hole as 0. The server hands this out under a lease
//! (`serve/lease.rs`) it revokes before the file changes or a segment is written again.

use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::inode::InodeCell;
use crate::tbfs::state::Engine;
use crate::tbfs::{Error, Result};

/// A block whose bytes the pool does not hold yet: ask the server.
pub const ASK: u64 = u64::MAX;

/// Blocks `first..first + blocks.len()` of a file of `size` bytes, as the pool holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockLease {
    pub size: u64,
    pub first: u64,
    /// Per block: its address in blocks of the device, 0 for a hole, [`ASK`].
    pub blocks: Vec<u64>,
    /// Blocks per segment: a block at address `a` is in segment `a / segment_blocks`.
    pub segment_blocks: u64,
}

impl Engine {
    /// Up to `count` blocks of inode `cell` from block `first`, read under its lock, with
    /// `under_lock` called on them before the lock is let go: no block named here moves, and
    /// so no segment holding one is chosen for reuse, before it returns.
    pub fn lease_blocks(
        &self,
        cell: &InodeCell,
        first: u64,
        count: u64,
        under_lock: &mut dyn FnMut(&BlockLease),
    ) -> Result<BlockLease> {
        let st = cell.lock();
        if st.freed {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let end = st.size.div_ceil(BLOCK_U64).min(first.saturating_add(count));
        let blocks = (first..end.max(first))
            .map(|b| {
                if st.dirty.contains_key(&b) {
                    return ASK;
                }
                match st.map.get(b) {
                    0 => 0,
                    a if self.copies.get(a).is_some() => ASK,
                    a => a,
                }
            })
            .collect();
        let lease = BlockLease {
            size: st.size,
            first,
            blocks,
            segment_blocks: self.segment_blocks,
        };
        under_lock(&lease);
        Ok(lease)
    }
}
