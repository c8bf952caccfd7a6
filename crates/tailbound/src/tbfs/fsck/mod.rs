//! fsck: checks a pool without changing it, and salvages a damaged one.
//!
//! [`check`] reads the device and never writes. It verifies, each finding carrying its location:
//!
//! - both superblock copies;
//! - every log in every segment: magic, summary CRC, pool id, that it fits its segment, payload
//!   CRC, and the sequence/previous-CRC chain between neighbouring logs; the roll-forward chain from
//!   the superblock across segments, and why it ends (torn tail, or damage with valid logs after it);
//! - every retained checkpoint (the superblock's, every complete one in the roll-forward chain,
//!   the snapshots and the protection period's plain checkpoints the newest one keeps): its root, the inode file's and every file's block map (node CRCs, levels, heights,
//!   addresses inside the segment area), that no block is claimed twice, and that every block it
//!   uses lies in a log that verifies and whose descriptor says it is that block (data of that inode
//!   at that offset, that map node, that inode page) — which is how damaged file data is found;
//! - the newest checkpoint's tables (segment usage, pinned blocks, snapshots), and that no
//!   retained checkpoint uses a block in a segment the usage table says was entered after it;
//! - inode records, directory blocks, and the namespace: entries name live inodes of the kind they
//!   say, no directory has two parents or lies on a cycle, every inode is reachable from the root
//!   (an unreachable file with no links is an orphan, unlinked while open, which the next open frees),
//!   link counts, and no file maps blocks past its size.
//!
//! [`repair`] makes a damaged pool consistent again, in one of two ways (the report says which):
//!
//! - **in place** when the engine can open the pool (recovery with
//!   [`RecoveryMode::TolerateTail`](crate::tbfs::RecoveryMode::TolerateTail)): recovery drops logs after damage in the chain and fixes link
//!   counts, file blocks whose logs fail their CRC are rewritten as read (reported as possibly
//!   damaged) and those whose pointer is wrong as zeros, older retained checkpoints that still use
//!   damaged blocks are released (snapshots among them become plain checkpoints first), and a
//!   fresh checkpoint and both superblock copies are written. Every step is an ordinary crash-safe
//!   commit.
//! - **rebuilt** when it cannot (damaged checkpoint metadata, both superblocks lost, a truncated
//!   pool): the newest checkpoint whose root directory loads is salvaged — intact files and
//!   directories, the rest dropped, inodes that are no longer reachable reattached under
//!   `/lost+found` as `#INO`, damaged file blocks as zeros — into a new pool built in memory, which
//!   then replaces the device's contents. This rewrite is not crash-safe: copy the pool first.
//!
//! Both then check the result again. Nothing here panics on any bytes.

mod analyse;
mod checker;
mod index;
mod repair;
mod report;
#[cfg(test)]
mod tests;

pub use analyse::{check, check_with_progress};
pub use repair::{default_segment_bytes, repair};
pub use report::*;
