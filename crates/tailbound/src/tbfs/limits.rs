//! tbfs's limits and tuning constants, in one place, with compile-time checks where they
//! relate. The format's own constants (block size, descriptors per summary, ...) are in
//! `format`.

use crate::tbfs::format::{BLOCK_U64, DESCRIPTORS_MAX};

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
    assert!(AHEAD_MIN_BLOCKS <= AHEAD_CHUNK_BLOCKS && AHEAD_MIN_BLOCKS <= LOG_BLOCKS_MAX);
    assert!(DESCRIPTORS_RESERVED < DESCRIPTORS_MAX);
    assert!(FILE_BYTES_MAX.is_multiple_of(BLOCK_U64));
};
