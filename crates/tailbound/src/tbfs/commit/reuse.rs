//! Which segments may be written again, and so how many blocks are free: the segment table and
//! where the writer stands (passed in), the durable watermark of the log pipeline and the
//! checkpoint the newest durable superblock names (the superblock writer). The rest of the
//! space counts are `space/mod.rs`'s; `commit/room.rs` gathers the arguments from `State`.

use std::collections::BTreeSet;

use crate::tbfs::log::WriterPlace;
use crate::tbfs::space::segments::SegmentTable;
use crate::tbfs::state::Engine;

impl Engine {
    /// Blocks the writer (at `w`) can still fill without reusing anything not yet reclaimable,
    /// counted up to `enough` (so the check on every sync does not walk the whole segment
    /// table), with `reading` the segments the background cleaner reads without `meta`.
    ///
    /// The rest of the current segment, and a segment's worth for each free segment. The next
    /// segment, chosen already, does not count: the writer enters it only once it has chosen
    /// the one after (every log's summary names the segment that follows its own), so the
    /// last free segment is always the next one and is never written.
    pub(in crate::tbfs) fn free_blocks_in(
        &self,
        seg: &SegmentTable,
        w: WriterPlace,
        reading: &BTreeSet<usize>,
        enough: u64,
    ) -> u64 {
        let mut free = self.seg_start(w.cur_seg) + self.segment_blocks() - w.pos;
        for s in 0..self.segment_count() as usize {
            if free >= enough {
                break;
            }
            if self.segment_reusable(seg, w, reading, s, self.logs.durable()) {
                free += self.segment_blocks();
            }
        }
        free
    }

    /// Segments that would be free after the next durable superblock ([`Engine::free_blocks_in`]
    /// for the arguments).
    pub(in crate::tbfs) fn pending_free_in(
        &self,
        seg: &SegmentTable,
        w: WriterPlace,
        reading: &BTreeSet<usize>,
    ) -> usize {
        (0..self.segment_count() as usize)
            .filter(|&s| {
                !w.holds_segment(s as u64)
                    && seg.is_empty(s)
                    && !self.segment_reusable(seg, w, reading, s, self.logs.durable())
            })
            .count()
    }

    /// Whether segment `s` may be written again once every log below `durable` is durable:
    /// the writer (at `w`) does not hold it, nothing in it is live, a durable superblock names a
    /// checkpoint written after it died, and the background cleaner is not reading it
    /// (`reading`).
    pub(in crate::tbfs) fn segment_reusable(
        &self,
        seg: &SegmentTable,
        w: WriterPlace,
        reading: &BTreeSet<usize>,
        s: usize,
        durable: u64,
    ) -> bool {
        !w.holds_segment(s as u64)
            && seg.is_empty(s)
            && seg.dead_at(s) <= self.superblocks.checkpoint_seq()
            && seg.last_seq(s) <= self.superblocks.checkpoint_seq()
            && seg.soft_dead_at(s) <= durable
            // The background cleaner is reading it without `meta`.
            && !reading.contains(&s)
    }
}
