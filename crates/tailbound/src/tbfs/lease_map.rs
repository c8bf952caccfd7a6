//! A file's blocks as a client of a memory pool may read them itself: the device address of
//! each block whose bytes are in the pool, "ask" for one still only in the engine's buffers
//! (or a cleaner's copy not yet written), a hole as 0. The server hands this out under a lease
//! (`serve/lease.rs`) it revokes before the file changes or a segment is written again.

use crate::tbfs::format::{BLOCK_U64, FIRST_SEGMENT_BLOCK};
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
    /// Per block: the segment its address is in ([`ASK`] where it has none).
    pub segments: Vec<u64>,
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
        if st.freed() {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let end = st
            .size()
            .div_ceil(BLOCK_U64)
            .min(first.saturating_add(count));
        let blocks: Vec<u64> = (first..end.max(first))
            .map(|b| {
                if st.dirty().contains_key(&b) {
                    return ASK;
                }
                match st.map().get(b) {
                    0 => 0,
                    a if self.copies.get(a).is_some() => ASK,
                    a => a,
                }
            })
            .collect();
        let segments = blocks
            .iter()
            .map(|&a: &u64| match a {
                0 | ASK => ASK,
                a => (a - FIRST_SEGMENT_BLOCK) / self.segment_blocks(),
            })
            .collect();
        let lease = BlockLease {
            size: st.size(),
            first,
            blocks,
            segments,
        };
        under_lock(&lease);
        Ok(lease)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::ASK;
    use crate::dev::memory::MemoryPool;
    use crate::tbfs::{Config, Fs, OpenFlags};

    #[test]
    fn a_leased_block_lies_in_the_segment_it_is_named_with() {
        let dev = Arc::new(MemoryPool::anonymous(16 << 20).unwrap());
        let config = Config {
            segment_bytes: 1 << 20,
            ..Config::memory_pool()
        };
        let fs = Fs::format(dev, &config).unwrap();
        let f = fs.open_file("/f", OpenFlags::create()).unwrap();
        // Three segments' worth, so blocks sit at every place in a segment, ends included.
        f.pwrite(&vec![5u8; 3 << 20], 0).unwrap();
        fs.sync().unwrap();
        let lease = f.lease_blocks(0, 1 << 20, &mut |_| {}).unwrap();
        assert_eq!(lease.blocks.len(), (3 << 20) / 4096);
        let inner = &fs.inner;
        let mut ends = 0;
        for (&a, &s) in lease.blocks.iter().zip(&lease.segments) {
            assert!(a != 0 && a != ASK && s != ASK, "synced: in the pool");
            let start = inner.seg_start(s);
            assert!(
                (start..start + inner.segment_blocks()).contains(&a),
                "block {a} named with segment {s}, which starts at {start}"
            );
            ends += usize::from(a + 1 == start + inner.segment_blocks());
        }
        assert!(ends > 0, "some block is the last of its segment");
    }
}
