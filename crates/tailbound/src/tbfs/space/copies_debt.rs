//! What a light cleaning pass's copies may add to the next checkpoint beyond the estimate per
//! run of blocks, from the files whose maps have leaves under a root (counted once after each
//! checkpoint, `Engine::copies_debt`).

use crate::tbfs::format::height_for;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::map::tree_nodes;
use crate::tbfs::FileKind;

/// What a light cleaning pass's copies may add to the next checkpoint beyond a node per run of
/// blocks (`commit::room::copies_debt`), which holds for files whose map is a single node (or
/// inline): in a file whose map has leaves under a root, a copy dirties its own leaf, and the
/// first copy in such a file also the nodes above the leaf and the inode's page with the inode
/// file's path to it. The whole is capped at those files' map nodes; the few inode pages beside
/// them are left to the per-run estimate and the checks' margins. Random overwrites spread over
/// large files leave segments whose live blocks lie under as many leaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopiesDebt {
    /// Map nodes of the files with leaves under a root.
    nodes: u64,
    /// Those files, and what the first copy in one adds beyond its leaf.
    files: u64,
    per_file: u64,
}

impl CopiesDebt {
    /// Whether a map of `blocks` blocks has leaves under a root: only such files' copies are
    /// counted.
    pub(in crate::tbfs) fn has_leaves_under_a_root(blocks: u64) -> bool {
        height_for(blocks) >= 2
    }

    /// Nothing beyond the per-run estimate: no file has leaves under a root.
    pub(in crate::tbfs) fn none() -> CopiesDebt {
        CopiesDebt {
            nodes: 0,
            files: 0,
            per_file: 0,
        }
    }

    /// Counts the map nodes of `inodes`' files with leaves under a root; `ifile_len` is the
    /// inode file's map length (for the path to an inode page).
    pub(in crate::tbfs) fn of(inodes: &InodeTable, widest: u64, ifile_len: u64) -> CopiesDebt {
        let (mut nodes, mut files) = (0u64, 0u64);
        for cell in inodes.values() {
            let st = cell.lock();
            let n = st.map().blocks.len() as u64;
            if st.kind() != FileKind::Dir && Self::has_leaves_under_a_root(n) {
                nodes += tree_nodes(n);
                files += 1;
            }
        }
        CopiesDebt {
            nodes,
            files,
            per_file: u64::from(height_for(widest)) + u64::from(height_for(ifile_len)),
        }
    }

    /// The most copies can add to the checkpoint debt beyond what it counts now: every node of
    /// those files dirty.
    pub(in crate::tbfs) fn ceiling(&self) -> u64 {
        self.nodes
    }

    /// At most what copying `blocks` live blocks adds to the next checkpoint beyond a node per
    /// run.
    pub(in crate::tbfs) fn beyond_runs(&self, blocks: u64) -> u64 {
        let spread = blocks + blocks.min(self.files) * self.per_file;
        spread.min(self.nodes)
    }

    /// What copying `blocks` more adds to [`CopiesDebt::beyond_runs`] of copying `before`.
    pub(in crate::tbfs) fn more(&self, before: u64, blocks: u64) -> u64 {
        self.beyond_runs(before + blocks) - self.beyond_runs(before)
    }
}
