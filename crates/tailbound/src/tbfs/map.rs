//! A file's block map in memory: the address of every file block, the addresses of the radix-tree
//! nodes that held them at the last checkpoint, and which nodes must be rewritten at the next one.
//! Owns no I/O; the commit path writes nodes and the loader fills maps from storage.

use super::dense::DenseSet;
use super::format::{height_for, Extents, FANOUT};

/// The nodes of a whole tree mapping `blocks` blocks, every level.
pub(super) fn tree_nodes(blocks: u64) -> u64 {
    let mut total = 0;
    let mut width = blocks;
    for _ in 0..height_for(blocks) {
        width = width.div_ceil(FANOUT as u64);
        total += width;
    }
    total
}

#[derive(Debug, Clone, Default)]
pub(crate) struct BlockMap {
    /// Address of each file block (0: hole).
    pub blocks: Vec<u64>,
    /// `nodes[l - 1][i]`: address of node `i` at level `l`, as last written.
    pub nodes: Vec<Vec<u64>>,
    /// Height of the tree on storage (0: `root` is the data block itself).
    pub height: u8,
    /// Root address on storage (0: empty map).
    pub root: u64,
    /// Level-1 node indices whose children changed since the last checkpoint.
    pub dirty_leaves: DenseSet,
    /// The tree's shape changed: every node is rewritten.
    pub all_dirty: bool,
    /// The map as last written, when it was written in the inode record (no nodes, `root` and
    /// `height` 0): what the inode's record holds until the map is written again.
    pub inline: Option<Extents>,
}

impl BlockMap {
    pub fn get(&self, block: u64) -> u64 {
        self.blocks.get(block as usize).copied().unwrap_or(0)
    }

    /// Points `block` at `addr` and returns the address it replaces (0 if none).
    pub fn set(&mut self, block: u64, addr: u64) -> u64 {
        let i = block as usize;
        if i >= self.blocks.len() {
            self.blocks.resize(i + 1, 0);
        }
        let old = std::mem::replace(&mut self.blocks[i], addr);
        if old != addr {
            self.dirty_leaves.insert((i / FANOUT) as u64);
        }
        old
    }

    /// Drops every block from `blocks` on and returns the addresses dropped.
    pub fn truncate(&mut self, blocks: u64) -> Vec<u64> {
        let keep = (blocks as usize).min(self.blocks.len());
        let before = self.blocks.len();
        let dropped: Vec<u64> = self.blocks.drain(keep..).filter(|&a| a != 0).collect();
        // Trailing holes need no entries.
        while self.blocks.last() == Some(&0) {
            self.blocks.pop();
        }
        if self.blocks.len() != before {
            self.all_dirty = true;
        }
        dropped
    }

    pub fn is_dirty(&self) -> bool {
        self.all_dirty
            || !self.dirty_leaves.is_empty()
            || (self.inline.is_none() && self.height != height_for(self.blocks.len() as u64))
    }

    /// Every node address currently on storage.
    pub fn node_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.nodes.iter().flatten().copied().filter(|&a| a != 0)
    }

    pub fn mapped_blocks(&self) -> u64 {
        self.blocks.iter().filter(|&&a| a != 0).count() as u64
    }
}
