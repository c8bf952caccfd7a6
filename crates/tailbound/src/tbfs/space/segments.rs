//! The segment table: each segment's live, pinned and dead-since counts.

/// Per-segment usage, for choosing where the next logs go.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegUsage {
    /// Blocks the in-memory state references in each segment.
    pub live: Vec<u32>,
    /// Sequence of the newest log that dropped a block of the segment in a way roll-forward
    /// does not replay (a checkpoint rewriting it, a truncation, a deletion, a released pin):
    /// until a superblock names a checkpoint written after it, the durable state may use it.
    pub dead_at: Vec<u64>,
    /// One more than the sequence of the newest data-only log that superseded a block of the
    /// segment which no retained checkpoint but the newest (or none) references (`seg_supersede`):
    /// once that log is durable, recovery replays it over any stale pointer. 0 for none.
    pub soft_dead_at: Vec<u64>,
    /// Highest log sequence written into each segment.
    pub last_seq: Vec<u64>,
    /// Blocks in each segment that the live tree no longer references but a retained checkpoint
    /// does (see `lifecycle`).
    pub pinned: Vec<u32>,
}

/// The segment that holds `block` (a block of the segment area).
pub(crate) fn segment_of(block: u64, segment_blocks: u64) -> usize {
    ((block - crate::tbfs::format::FIRST_SEGMENT_BLOCK) / segment_blocks) as usize
}
