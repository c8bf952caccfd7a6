//! The on-storage format of a tbfs pool, byte for byte. Little-endian everywhere; every length and
//! count read from storage is bounded before it is used, so decoding never panics on any bytes.
//!
//! ```text
//! block 0, 1      superblock copies (written alternately; the valid one with the higher generation wins)
//! block 2 ..      segments of `segment_blocks` blocks each, filled with logs back to back
//! ```
//!
//! Superblock (one 4 KiB block):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBFSSUPR` |
//! | 8 | 4 | format version (2; 1 is read and upgraded) |
//! | 12 | 4 | block size (4096) |
//! | 16 | 16 | pool id |
//! | 32 | 8 | generation (+1 on every superblock write) |
//! | 40 | 8 | pool bytes |
//! | 48 | 8 | segment blocks |
//! | 56 | 8 | segment count |
//! | 64 | 8 | first segment block (2) |
//! | 72 | 1 | ordering (0 strict, 1 relaxed) |
//! | 73 | 1 | barrier (0 every-log, 1 every-checkpoint, 2 superblock) |
//! | 74 | 6 | zero |
//! | 80 | 8 | superblock every bytes |
//! | 88 | 8 | superblock every ms |
//! | 96 | 8 | checkpoint every ms (0: never) |
//! | 104 | 8 | dirty bytes max |
//! | 112 | 8 | checkpoint number |
//! | 120 | 8 | checkpoint root block |
//! | 128 | 8 | sequence of the log holding that root |
//! | 136 | 8 | roll-forward start: block of the next log |
//! | 144 | 8 | roll-forward start: sequence of the next log |
//! | 152 | 4 | roll-forward start: summary CRC of the log before it |
//! | 156 | 4 | zero |
//! | 160 | 8 | segment after the one holding the next log |
//! | 168 | 8 | created (ns since the epoch) |
//! | 176 | 8 | written (ns since the epoch) |
//! | 184 | 8 | protection period of plain checkpoints in ms |
//! | 192 | 1 | background cleaner: 1 on, 0 off |
//! | 193 | 1 | free space the background cleaner aims for, percent |
//! | 194 | 3898 | zero |
//! | 4092 | 4 | CRC32C of bytes 0..4092 |
//!
//! Log: one summary block, then `payload_blocks` blocks in descriptor order.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBFSLOG1` |
//! | 8 | 2 | format version (2; 1 in a version-1 pool's logs) |
//! | 10 | 2 | flags: 1 begin, 2 end, 4 checkpoint (root is the last payload block), 8 data-only, 16 pad, 32 ahead (a data-only log whose summary may reach the device before its payload) |
//! | 12 | 4 | payload blocks |
//! | 16 | 16 | pool id |
//! | 32 | 8 | sequence (previous log's + 1) |
//! | 40 | 8 | checkpoint number (this log's if it ends a checkpoint, else the last one written) |
//! | 48 | 8 | segment after this log's segment |
//! | 56 | 4 | descriptor count (≤ 125) |
//! | 60 | 4 | previous log's summary CRC |
//! | 64 | 4 | CRC32C of the payload blocks |
//! | 68 | 4 | CRC32C of the summary block with this field zero |
//! | 72 | 8 | time (ns since the epoch) |
//! | 80 | 8 | zero |
//! | 88 | 32 × n | descriptors |
//!
//! Descriptor (32 bytes): kind u8 (1 data, 2 map node, 3 inode page, 4 inode-file map node,
//! 5 checkpoint root, 6 attributes, 7 table page, 8 table map node, 9 placed data: file data
//! roll-forward does not replay), level u8, zero u16, block count u32, inode u64, then for data
//! and nodes the first file block (or node index) u64 and a zero u64; for attributes the size u64
//! and mtime i64 (no payload).
//!
//! Map node (4 KiB): CRC32C u32 of bytes 4..4096, level u8, zero 3 bytes, then 511 block addresses
//! u64 (0: hole). A file of `n` blocks has height 0 (its root is the data block itself, `n ≤ 1`) or
//! the least `h` with 511^h ≥ n.
//!
//! Inode page (4 KiB): 16 inode records of 256 bytes. Record: ino u64 (0: free slot), mode u32,
//! nlink u32, size u64, mtime i64, ctime i64, map root u64, map height u8, zero 199 bytes, CRC32C u32
//! of bytes 0..252 of the record.
//!
//! Directory data (a directory's file blocks): per block, entry count u16, then entries of
//! ino u64, kind u8 (1 file, 2 dir), name length u8, name bytes; the block's last 4 bytes are the
//! CRC32C of the bytes before them.
//!
//! Checkpoint root (4 KiB): magic `TBFSCKPT`, number u64, sequence u64, time i64, inode-file root
//! u64, inode-file height u8 + 7 zero, inode-file pages u64, next inode u64, inode count u64, then
//! at 72 the previous checkpoint's root block u64 (0: none), at 80 the oldest plain checkpoint
//! still kept for the protection period u64, and the three tables as (map root u64, then map
//! height u8 and 7 zero) at 88 (segment usage), 104 (pinned blocks) and 120 (snapshots); zero to
//! 4092, CRC32C of bytes 0..4092.
//!
//! Table page (4 KiB): CRC32C u32 of bytes 4..4096, table id u8 (1 usage, 2 pinned, 3 snapshots),
//! zero 3 bytes, entry count u32, zero 4 bytes, then entries from byte 16:
//! - usage (16 bytes, 255 a page, page `p` holds segments `255p ..`): the checkpoint number that
//!   was next when the writer entered the segment u64, time of its newest log i64 (ns);
//! - pinned (24 bytes, 170 a page, page `s * pages_per_segment + j` holds segment `s`'s): block
//!   u64, the first checkpoint that can reference it u64, the last one that does u64;
//! - snapshots (96 bytes, 42 a page, packed in number order): number u64, root block u64,
//!   time i64, name length u8 + 7 zero, name (UTF-8, at most 64 bytes) zero-padded to 64.

mod checkpoint;
mod inode;
mod layout;
mod log;
mod superblock;
#[cfg(test)]
mod tests;

pub use checkpoint::*;
pub use inode::*;
pub use layout::*;
pub use log::*;
pub use superblock::*;
