//! Where a pool's blocks are: the live tree's blocks by kind, what retained checkpoints pin,
//! what is free, what the writer's heads hold, what waits for reuse, and the room the space
//! check keeps ([`SpaceCensus`]). A count for benchmarks and tests, walking the whole tree.

use std::collections::BTreeSet;

use crate::tbfs::format::{BLOCK_U64, FIRST_SEGMENT_BLOCK};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::types::{FileKind, SpaceCensus};

impl Engine {
    /// The census of `m`'s pool ([`SpaceCensus`]).
    pub(in crate::tbfs) fn census(&self, m: &State) -> SpaceCensus {
        let sb = self.segment_blocks();
        let segments = self.segment_count();
        let mut c = SpaceCensus {
            segment_blocks: sb,
            segments,
            fixed_blocks: FIRST_SEGMENT_BLOCK,
            ..SpaceCensus::default()
        };
        let mut with_meta = BTreeSet::new();
        let mut meta = |a: u64, n: &mut u64| {
            *n += 1;
            with_meta.insert(State::seg_of(a, sb));
        };
        for cell in m.inodes.values() {
            let st = cell.lock();
            let data = st.map().blocks.iter().filter(|&&a| a != 0).count() as u64;
            if st.kind() == FileKind::Dir {
                // A directory's blocks are metadata a checkpoint writes.
                for &a in st.map().blocks.iter().filter(|&&a| a != 0) {
                    meta(a, &mut c.directory_blocks);
                }
            } else {
                c.file_data += data;
            }
            for a in st.map().node_addrs() {
                meta(a, &mut c.file_map_nodes);
            }
        }
        for &a in m.ifile.map().blocks.iter().filter(|&&a| a != 0) {
            meta(a, &mut c.inode_pages);
        }
        for a in m.ifile.map().node_addrs() {
            meta(a, &mut c.inode_file_nodes);
        }
        for t in m.life.tables() {
            for &a in t.blocks.iter().filter(|&&a| a != 0) {
                meta(a, &mut c.table_blocks);
            }
            for a in t.node_addrs() {
                meta(a, &mut c.table_nodes);
            }
        }
        if m.ckpt.root() != 0 {
            meta(m.ckpt.root(), &mut c.roots);
        }
        c.segments_with_metadata = with_meta.len() as u64;
        c.live_counted = m.seg.live_counts().iter().map(|&l| u64::from(l)).sum();
        c.pinned = (0..segments as usize)
            .map(|s| u64::from(m.seg.pinned(s)))
            .sum();
        c.free = self.free_blocks(m);
        c.pending = self.pending_free_segments(m) as u64 * sb;
        let w = m.writer.place();
        // The next segment is held out of the free count while nothing is written in it.
        let next_held =
            w.next_seg < segments && w.next_seg != w.cur_seg && m.seg.is_empty(w.next_seg as usize);
        c.heads_rest = self.copy_head_rest(m) + if next_held { sb } else { 0 };
        let total = sb * segments;
        // Saturating: the free count and the block counts come from different tables, and a
        // census is not where a mismatch should stop anything.
        c.dead =
            total.saturating_sub(c.live_counted + c.pinned + c.free + c.pending + c.heads_rest);
        let (reserve, low_water) = self.space_margins(m);
        c.reserve = reserve;
        c.low_water = low_water;
        c.checkpoint_debt = self.checkpoint_debt(m, false);
        c.buffered = self.budget.buffered().div_ceil(BLOCK_U64);
        c
    }
}
