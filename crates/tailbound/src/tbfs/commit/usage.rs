//! The live tree's blocks as the segment table counts them: the only place a segment's live
//! count changes after recovery. Dropping a block also tells the checkpoint what it gives back,
//! pins it for the retained checkpoints that reference it, or marks it soft-dead when only a
//! durable log stands between its segment and reuse.

use crate::tbfs::retention::{BlockPin, PinRun};
use crate::tbfs::space::segments;
use crate::tbfs::state::State;

impl State {
    pub fn seg_of(block: u64, segment_blocks: u64) -> usize {
        segments::segment_of(block, segment_blocks)
    }

    pub fn seg_inc(&mut self, block: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        self.seg.add_live(s);
    }

    /// The live tree drops `block`. A retained checkpoint that references it keeps it pinned.
    pub fn seg_dec(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        self.seg_dec_at(block, seq, segment_blocks, self.life.now_ns());
    }

    /// [`State::seg_dec_at`] for every block of `blocks` (a deleted file's): whether nothing
    /// keeps the checkpoints that may reference a block depends only on the checkpoint it was
    /// born after, the same for most blocks of a file, so it is looked up once per run of
    /// blocks born alike instead of once per block.
    pub fn seg_dec_all_at(
        &mut self,
        blocks: impl Iterator<Item = u64>,
        seq: u64,
        segment_blocks: u64,
        now: i64,
    ) {
        let mut known: Option<(u64, bool)> = None;
        // Blocks born alike have the same anchor: one look-up per run of them.
        let mut anchored: Option<(u64, Option<u64>)> = None;
        let died = self.ckpt.newest();
        let mut runs: Vec<PinRun> = Vec::new();
        for block in blocks {
            self.seg_dec_unpinned(block, seq, segment_blocks);
            let born = self.born_of(block, segment_blocks);
            let unkept = match known {
                Some((b, unkept)) if b == born => unkept,
                _ => {
                    let unkept = born <= died && self.life.only_newest_unkept(born, died, now);
                    known = Some((born, unkept));
                    unkept
                }
            };
            if unkept {
                // Only the newest checkpoint can reference it, and nothing keeps that one (no
                // snapshot, view or protection period, as in a memory pool): the next
                // checkpoint releases it. Until a superblock names a later checkpoint the
                // segment's `dead_at` keeps the block from reuse, so no pin is needed (one per
                // block of every file deleted or overwritten, dropped again at the next
                // checkpoint); the newest checkpoint just cannot be opened as a view or made a
                // snapshot any more.
                self.ckpt.note_superseded();
            } else {
                let anchor = match anchored {
                    Some((b, anchor)) if b == born => anchor,
                    _ => {
                        let anchor = self.life.anchor(born, died);
                        anchored = Some((born, anchor));
                        anchor
                    }
                };
                if let Some(anchor) = anchor {
                    let pin = BlockPin { born, died, anchor };
                    // A file's blocks mostly follow each other: one run for each stretch.
                    match runs.last_mut() {
                        Some(r) if r.end() == block && r.pin == pin => r.len += 1,
                        _ => runs.push(PinRun {
                            start: block,
                            len: 1,
                            pin,
                        }),
                    }
                }
            }
        }
        if !runs.is_empty() {
            self.pin_all(runs, segment_blocks);
        }
    }

    /// [`State::seg_dec`] with the time read once by a caller dropping many blocks.
    pub fn seg_dec_at(&mut self, block: u64, seq: u64, segment_blocks: u64, now: i64) {
        self.seg_dec_all_at(std::iter::once(block), seq, segment_blocks, now);
    }

    /// The live tree drops `block`, which no retained checkpoint needs (a table block: only the
    /// newest checkpoint's tables are ever read).
    pub fn seg_dec_unpinned(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        self.seg.drop_live(s);
        // Every such drop counts, not only the last: the durable checkpoint may reference any
        // block that died after it, whatever killed the segment's last block.
        self.seg.note_dead(s, seq);
    }

    /// The live tree drops file data `block` because the data-only log `seq` wrote a newer copy
    /// of it. Roll-forward replays that log over every checkpoint written before it, so when
    /// the only retained checkpoint that can reference the block is the newest and nothing keeps
    /// that one (no snapshot, open view or protection period), the block needs no pin and its
    /// segment may be reused as soon as the last log of the run holding that log is durable
    /// (`Engine::segment_free`; recovery replays a run's parts only whole), without waiting for a
    /// checkpoint. Otherwise as `seg_dec`.
    pub fn seg_supersede(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let born = self.born_of(block, segment_blocks);
        if !self
            .life
            .only_newest_unkept(born, self.ckpt.newest(), self.life.now_ns())
        {
            self.seg_dec(block, seq, segment_blocks);
            return;
        }
        let s = Self::seg_of(block, segment_blocks);
        self.seg.drop_live(s);
        self.soft_dead.superseded(&mut self.seg, s);
        if born <= self.ckpt.newest() {
            self.ckpt.note_superseded();
        }
    }
}
