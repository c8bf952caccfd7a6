//! tbfs's limits and tuning constants, in one place, with compile-time checks where they
//! relate. The format's own constants (block size, descriptors per summary, ...) are in
//! `format`.

use crate::tbfs::format::{BLOCK_U64, DESCRIPTORS_MAX, NAME_MAX};

/// Largest file, so a block map always fits in memory (16 Mi blocks).
pub const FILE_BYTES_MAX: u64 = 64 << 30;

/// Data-only logs with at least this many payload blocks have their payload written by the
/// thread that sealed them, apart from the summary; smaller ones go whole with the log writer.
pub(crate) const AHEAD_MIN_BLOCKS: usize = 16;
/// Blocks sealed in one part of a full buffer ([`Engine::commit_data_logs_in_parts`]), so a
/// hold of `meta` stays short.
pub(crate) const SEAL_PART_BLOCKS: u64 = 1024;
/// Blocks a checkpoint's quick bound allows for writes being buffered while it is taken
/// ([`Engine::quick_inode_bound`]).
pub(crate) const QUICK_BOUND_SLACK_BLOCKS: u64 = 1024;
/// An ahead payload goes to a device that does not take blocks in place this many blocks per
/// request (`sched` splits further as its policy says).
pub(crate) const AHEAD_CHUNK_BLOCKS: usize = 256;
/// At most this many chunks of one ahead payload are in flight at once.
pub(crate) const AHEAD_CHUNKS_IN_FLIGHT: usize = 8;
/// Most payload blocks in one log (bounds the write buffer).
pub(crate) const LOG_BLOCKS_MAX: usize = 1024;
/// The roll-forward chain is kept to at most this fraction of the pool (see `maybe_refresh`).
pub(crate) const SUPERBLOCK_POOL_DIVISOR: u64 = 4;
/// Descriptors kept free in every log for the attribute records a data-only log ends with.
pub(crate) const DESCRIPTORS_RESERVED: usize = 2;

/// Direct writes leave their summaries to the background thread until this many write
/// buffers' worth of sealed data is unwritten ([`Engine::write_logs_behind`]). Each direct
/// writer has up to two pieces of [`DIRECT_PIECE_BYTES`] sealed while they are in the device,
/// so a few writers alone hold more than the default buffer; at one buffer they wrote their own
/// summaries again and lost their shares. In a memory pool, also how far the log writer may fall behind buffered writers before they wait
/// for it ([`Engine::in_flight_max`]).
pub(crate) const BEHIND_BUFFERS: u64 = 4;

/// Blocks a buffered write's space check asks for beyond its own and a thirty-second of them
/// (`make_room_for_write`): the summary, map nodes and attributes record of the commit that
/// carries it.
pub(crate) const WRITE_COMMIT_SLACK_BLOCKS: u64 = 8;
/// A file holding 1/this of the write buffer is written on its own when the buffer fills, and
/// behind its writes (see [`Engine::write_behind_bytes`]).
pub(crate) const OWN_FLUSH_DIVISOR: u64 = 8;
/// The least a file must hold to be written on its own or behind its writes (one payload chunk).
pub(crate) const WRITE_BEHIND_MIN: u64 = 1 << 20;
/// On a device whose writes are memory copies, a write of at least this many bytes (an ahead
/// payload's worth) is sealed as soon as it is buffered, and its writer copies it into the pool
/// while its bytes are still in the CPU's cache ([`Engine::seals_hot`]).
pub(crate) const HOT_SEAL_BYTES: u64 = AHEAD_MIN_BLOCKS as u64 * BLOCK_U64;
/// A direct write goes out in pieces of at most this many bytes, each made while the one before
/// it is in the device ([`Engine::write_direct`]).
pub(crate) const DIRECT_PIECE_BYTES: u64 = 8 << 20;

/// A direct write's first piece is at most this many bytes, and each next one twice the one
/// before, up to [`DIRECT_PIECE_BYTES`]: the first is copied with nothing of the write in the
/// device, so a large first piece leaves the writer idle in `sched` that long.
pub(crate) const DIRECT_FIRST_PIECE_BYTES: u64 = 1 << 20;
/// Segments that would give back less than this fraction of themselves are not cleaned.
pub(crate) const MIN_RECLAIMABLE: f64 = 0.02;

// How the limits relate. A direct write's pieces grow from the first to the largest, in whole
// blocks; a file written on its own holds at least one ahead payload chunk; an ahead payload is
// at least as long as the smallest one written apart, and fits a log; a log keeps room for its
// ordinary descriptors beside the reserved ones; a file's size is whole blocks.
const _: () = {
    assert!(DIRECT_FIRST_PIECE_BYTES <= DIRECT_PIECE_BYTES);
    assert!(
        DIRECT_FIRST_PIECE_BYTES.is_multiple_of(BLOCK_U64)
            && DIRECT_PIECE_BYTES.is_multiple_of(BLOCK_U64)
    );
    assert!(WRITE_BEHIND_MIN == AHEAD_CHUNK_BLOCKS as u64 * BLOCK_U64);
    assert!(HOT_SEAL_BYTES <= WRITE_BEHIND_MIN);
    assert!(AHEAD_MIN_BLOCKS <= AHEAD_CHUNK_BLOCKS && AHEAD_MIN_BLOCKS <= LOG_BLOCKS_MAX);
    assert!(DESCRIPTORS_RESERVED < DESCRIPTORS_MAX);
    assert!(FILE_BYTES_MAX.is_multiple_of(BLOCK_U64));
};

/// Symbolic links followed while resolving one path, as the kernel allows, before `ELOOP`.
pub(crate) const SYMLINK_HOPS_MAX: u32 = 40;
/// Under the relatime policy an access time older than this is updated even if it is after
/// the file's last change.
pub(crate) const RELATIME_AGE_NS: i64 = 24 * 3600 * 1_000_000_000;

/// Smallest pool: superblocks and a handful of segments.
pub(crate) const SEGMENTS_MIN: u64 = 4;
/// Blocks a recovery scan reads ahead at once (within the current segment).
pub(crate) const SCAN_WINDOW_BLOCKS: u64 = 256;
/// Bytes fsck reads per request while scanning segments.
pub(crate) const FSCK_READ_BYTES: u64 = 4 << 20;

/// Spare block buffers kept for reuse by every pool of the process together.
pub(crate) const SPARE_BLOCKS_MAX: usize = 8192;
/// Buffers a thread keeps for itself, and moves from and to the shared spares at once: one
/// trip to the shared spares' mutex per this many blocks, not one per block. A thread taking
/// it was often preempted holding it, and whoever waited behind it (a checkpoint holding
/// `meta` among them) waited a time slice.
pub(crate) const LOCAL_SPARE_BATCH: usize = 64;
/// Inode pages kept in the inode file's page cache; past it the cache starts over.
pub(crate) const IFILE_CACHE_PAGES: usize = 4096;
/// Shards of the path cache (`names`), each behind its own lock.
pub(crate) const NAME_CACHE_SHARDS: usize = 16;
/// Entries per path cache shard; a full shard is emptied (the cache is only ever a shortcut).
pub(crate) const NAME_CACHE_SHARD_ENTRIES_MAX: usize = 8192;

/// The largest directory entry: its fixed part and a name of [`NAME_MAX`] bytes.
pub(crate) const DIR_ENTRY_MAX: u64 = 10 + NAME_MAX as u64;
/// Bytes of a directory block entries fill at least: all but its count, its CRC and the
/// largest entry that did not fit.
pub(crate) const DIR_BLOCK_FILL: u64 = BLOCK_U64 - 6 - DIR_ENTRY_MAX;
/// Blocks a new name adds to the checkpoint debt beside its directory: a page of inodes, the
/// inode file's map path to it, and the new inode's map.
pub(crate) const CHANGE_BLOCKS: u64 = 4;
/// Blocks the checkpoint header, root and the log's ends take beside what the debt counts.
pub(crate) const FIXED_BLOCKS: u64 = 6;
/// Blocks a checkpoint with nothing changed takes at most: the header, root and the log's
/// ends, the segment-usage page and the tables' roots. Every checkpoint leaves at least this
/// free, so the one after it can be written (`Engine::checkpoint_floor`).
pub(crate) const CHECKPOINT_FLOOR_BLOCKS: u64 = 16;

// A thread's spares (up to two batches) fit the shared ones; a directory block holds at least
// one entry of the largest size; the smallest pool has room for the writer's current and next
// segments, which differ; a path's shard is picked by a remainder.
const _: () = {
    assert!(2 * LOCAL_SPARE_BATCH <= SPARE_BLOCKS_MAX);
    assert!(DIR_ENTRY_MAX <= DIR_BLOCK_FILL);
    assert!(SEGMENTS_MIN >= 2);
    assert!(NAME_CACHE_SHARDS > 0);
    assert!(
        FIXED_BLOCKS < CHECKPOINT_FLOOR_BLOCKS && CHECKPOINT_FLOOR_BLOCKS <= RESERVE_BLOCKS_MIN
    );
};

/// The low-water mark is at most 1/this of the pool.
pub(crate) const LOW_WATER_DIVISOR: u64 = 10;
/// Segments of copies the low-water mark keeps room for in relaxed ordering: one victim's live
/// blocks, what a light cleaning pass needs to make progress.
pub(crate) const CLEAN_ROOM_SEGMENTS: u64 = 1;
/// Segments of copies it keeps room for in strict ordering, where every pass is a checkpoint.
pub(crate) const FULL_PASS_ROOM_SEGMENTS: u64 = 4;
/// Segments a pool needs for a light pass's copies to go to a log head of their own. The
/// cleaner's head holds the rest of its segment between passes, room the space checks do not
/// count as free; in a pool of fewer segments that is too large a share of it.
pub(crate) const COPY_HEAD_MIN_SEGMENTS: u64 = 128;
/// Smallest space reserve, in blocks, whatever the segment size.
pub(crate) const RESERVE_BLOCKS_MIN: u64 = 64;
/// Blocks of checkpoint debt deletes and truncates may add without a space check while a
/// snapshot or a view keeps what they drop (`DeletesDebt`): the room keeps this beyond the
/// counted debt, and a change that takes the charge past half of it pays the debt with a
/// checkpoint.
/// Small, since every checkpoint keeps it free after what it writes; large enough that a
/// delete of a file of a few MiB (a pinned-table page per 170 blocks) stays under it.
pub(crate) const DELETES_ALLOWANCE_BLOCKS: u64 = 64;
/// Inode pages the room keeps for deletes with nothing keeping what they drop
/// (`Engine::deletes_reserve`), in a pool whose inode file holds more: once the pages deletes
/// may have dirtied since the debt was last counted pass half of it, and the free blocks do not
/// hold every page, a delete writes the next checkpoint first (`Engine::record_deletes_first`).
/// Room for every page would hold back a page per sixteen files, a twentieth of a pool of
/// one-block files.
pub(crate) const DELETES_PAGES_ALLOWANCE: u64 = 256;
/// The least a writer may buffer before it commits however short space is
/// (`Engine::set_buffer_limit`), so a pool near full still commits in logs of some size.
pub(crate) const BUFFER_LIMIT_MIN_BLOCKS: u64 = 256;
/// Most segments emptied by one cleaning checkpoint. Every pass writes a checkpoint, whose map
/// nodes and inode pages are paid once per pass: fewer, larger passes copy the same blocks with
/// less metadata. The space there is bounds a pass well before this.
pub(crate) const VICTIMS_PER_PASS: usize = 32;
/// Most segments the background cleaner empties per wake-up, so it holds the metadata lock for
/// short spells and its idle-class I/O stays a trickle beside the writers'.
pub(crate) const BACKGROUND_VICTIMS: usize = 4;
/// The spread of `ln λ` (`space::cleaner::age_spread`) above which victims are chosen by
/// cost-benefit, below which greedily.
pub(crate) const AGE_SIGNAL_SPREAD: f64 = 1.3;
/// Dead blocks from which a roll-forward chain segment's rate counts fully in that spread
/// (`space::cleaner::light_pass_spread`): `ln λ` read from `d` deaths varies by about
/// `1 / √d`, a quarter here.
pub(crate) const AGE_SIGNAL_CHAIN_DEATHS: u64 = 16;

// A background pass is a light one: no more victims than a full pass; strict ordering keeps at
// least the room relaxed ordering does; the low-water mark is a fraction of the pool.
const _: () = {
    assert!(BACKGROUND_VICTIMS <= VICTIMS_PER_PASS);
    assert!(CLEAN_ROOM_SEGMENTS <= FULL_PASS_ROOM_SEGMENTS);
    assert!(LOW_WATER_DIVISOR >= 2);
};
/// Blocks of a file a seal looks at to tell whether the versions they replace lived long
/// (`Engine::long_lived_files`).
pub(crate) const LIFETIME_SAMPLE: usize = 16;
