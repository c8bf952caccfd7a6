//! A file's buffers: putting a write's bytes into them (counted in the budget, the one part of
//! `Engine` it names), the buffer limit, and the per-file operations (attributes, size, stat,
//! close). Reads are `read.rs`'s; the write path around the buffering (turns, room, commits,
//! direct writes) is `commit/write_path.rs`'s.

use std::sync::Arc;

use crate::tbfs::blocks::*;
use crate::tbfs::format::*;
use crate::tbfs::inode::*;
use crate::tbfs::limits::*;
use crate::tbfs::state::Engine;
use crate::tbfs::{Error, FileKind, Ordering, Result, SetAttr, Stat};

/// The end of a write of `len` bytes at `offset` to inode `ino`, if it stays within the largest
/// file.
pub(in crate::tbfs) fn write_end(ino: u64, offset: u64, len: usize) -> Result<u64> {
    offset
        .checked_add(len as u64)
        .filter(|&e| e <= FILE_BYTES_MAX)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "inode {ino}: write past the largest file ({FILE_BYTES_MAX} bytes)"
            ))
        })
}

impl Engine {
    /// Writes `buf` at `offset`; `direct` as `O_DIRECT` ([`Engine::write_direct`]).
    pub fn pwrite(&self, cell: &InodeCell, buf: &[u8], offset: u64, direct: bool) -> Result<usize> {
        self.write_at(cell, buf, Some(offset), direct)
            .map(|(_, n)| n)
    }

    /// Writes `buf` at the end of the file, read under the inode lock so concurrent appends
    /// never overlap; returns the offset after the write.
    pub fn append(&self, cell: &InodeCell, buf: &[u8], direct: bool) -> Result<u64> {
        self.write_at(cell, buf, None, direct).map(|(end, _)| end)
    }

    /// Puts `buf` at `offset` (the end of the file for `None`) into the file's buffers, under
    /// its inode lock (`st`), and returns the end of the write. `whole` holds buffers already
    /// made for some of the whole blocks the write covers (block number and bytes, in order), so
    /// that a direct write copies and checksums outside every lock.
    pub(in crate::tbfs) fn buffer_write(
        &self,
        cell: &InodeCell,
        st: &mut InodeState,
        buf: &[u8],
        offset: Option<u64>,
        whole: Vec<(u64, DirtyBlock)>,
        charge: Option<crate::sched::Charge>,
    ) -> Result<u64> {
        if st.freed() {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let offset = offset.unwrap_or(st.size());
        let end = write_end(cell.ino, offset, buf.len())?;
        // The buffers may reach past the file's map (noted before any is put in).
        self.note_width(end.div_ceil(BLOCK_U64));
        let mut whole = whole.into_iter().peekable();
        // Buffers a made block replaced, kept for reuse in one go after the loop.
        let mut replaced = Vec::new();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let block = pos / BLOCK_U64;
            let within = (pos % BLOCK_U64) as usize;
            let n = (BLOCK - within).min(buf.len() - done);
            let gen = st.take_gen();
            let made = whole.next_if(|(b, _)| *b == block).map(|(_, d)| d);
            if let Some(d) = st.dirty_mut().get_mut(&block) {
                match made {
                    // Made already: it takes the old buffer's place (a sealed log keeps its
                    // own reference), instead of being copied again.
                    Some(mut fresh) => {
                        fresh.gen = gen;
                        replaced.push(std::mem::replace(d, fresh).into_data());
                    }
                    None => d.write(gen, within, &buf[done..done + n]),
                }
            } else {
                let mut fresh = match made {
                    Some(d) => d,
                    // A whole block: copied without clearing it first.
                    None if n == BLOCK => DirtyBlock::new(gen, shared_copy(&buf[done..done + n])),
                    None => {
                        let mut data = zeroed_block();
                        let bytes = Arc::get_mut(&mut data).expect("a new block is not shared");
                        if block * BLOCK_U64 < st.size() {
                            self.read_block(cell.ino, st, block, &mut bytes[..])?;
                        }
                        bytes[within..within + n].copy_from_slice(&buf[done..done + n]);
                        DirtyBlock::new(gen, data)
                    }
                };
                fresh.gen = gen;
                st.dirty_mut().insert(block, fresh);
                // Counted under the inode lock, so a commit dropping it subtracts after.
                self.budget.add(BLOCK_U64);
            }
            done += n;
        }
        recycle_blocks(replaced);
        st.grow_to(end);
        // Room in the map for the blocks written, made here under the inode lock: sealing and
        // checkpoints set the blocks' addresses under `meta` and find the room made.
        let mapped = end.div_ceil(BLOCK_U64) as usize;
        if mapped > st.map().blocks.len() {
            let len = st.map().blocks.len();
            st.map_mut().blocks.reserve(mapped - len);
        }
        st.touch_modified(self.now_ns());
        st.mark_attr_dirty();
        st.set_charge(charge);
        self.mark_dirty(cell.ino);
        Ok(end)
    }

    /// A file holding this much buffered data after a write is written behind (relaxed
    /// ordering): a [`OWN_FLUSH_DIVISOR`]th of the write buffer, and at least
    /// [`WRITE_BEHIND_MIN`], so small files and small buffers keep their data together in
    /// fewer logs.
    pub(super) fn write_behind_bytes(&self) -> u64 {
        (self.config().dirty_bytes_max / OWN_FLUSH_DIVISOR).max(WRITE_BEHIND_MIN)
    }

    /// Whether a write of `len` bytes is sealed and written right after it is buffered, on a
    /// device whose writes are memory copies: a write of [`HOT_SEAL_BYTES`] or more. Copied into
    /// the pool by its writer then, its bytes are still in the cache from the copy into the
    /// buffers; left until the buffer fills, they had left the cache, and the copy into the pool
    /// waited on their loads. Small writes stay buffered, so overwrites of a few blocks still
    /// meet in the buffer; so do large ones while space is tight (`BufferBudget::tight`), when
    /// every block written out early that is then overwritten, truncated or deleted is a block
    /// the cleaner must copy past or free.
    pub(super) fn seals_hot(&self, len: u64) -> bool {
        len >= HOT_SEAL_BYTES && self.dev().writes_are_copies() && !self.budget.tight()
    }

    /// Whether buffered data may go out as data-only logs (a full buffer, write-behind, the
    /// cleaner's flush of the buffer first): in relaxed ordering. The data of a file with a
    /// change only a checkpoint records goes out placed, not replayed (`seal_file_data`), so a
    /// pending namespace change no longer makes a full buffer a checkpoint.
    pub(super) fn buffer_in_data_logs(&self) -> bool {
        self.config().ordering == Ordering::Relaxed
    }

    /// Bytes writers may buffer before they commit: `Config::dirty_bytes_max`, or, while a
    /// cleaning pass would have to write the buffer in its checkpoint (a namespace change is
    /// pending, or passes are full), what the free space allows ([`Engine::set_buffer_limit`]).
    /// Light passes write no buffered data, so overwrites keep the whole buffer however short
    /// space is (writing it out sooner raised `bench cleaner`'s hot/cold write
    /// amplification).
    pub(super) fn buffer_limit(&self) -> u64 {
        self.budget.limit()
    }

    /// Notes a file's buffers spanning `blocks` blocks (`BufferBudget::widest`).
    pub(super) fn note_width(&self, blocks: u64) {
        self.budget.widen(blocks);
    }

    /// Changes attributes (chmod, chown, utimens); the change time becomes now.
    pub fn set_attr(&self, cell: &InodeCell, attr: &SetAttr) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        {
            let mut st = cell.lock();
            if st.freed() {
                return Err(Error::BadHandle(format!("inode {}", cell.ino)));
            }
            if let Some(mode) = attr.mode {
                st.set_mode(mode);
            }
            if let Some(uid) = attr.uid {
                st.set_uid(uid);
            }
            if let Some(gid) = attr.gid {
                st.set_gid(gid);
            }
            if let Some(t) = attr.atime_ns {
                st.set_atime_ns(t);
            }
            if let Some(t) = attr.mtime_ns {
                st.set_mtime_ns(t);
            }
            st.set_ctime_ns(self.now_ns());
            st.mark_attr_dirty();
        }
        m.namespace_changed(cell.ino);
        Ok(())
    }

    pub fn set_len(&self, cell: &InodeCell, len: u64) -> Result<()> {
        self.check_writable()?;
        if len > FILE_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "inode {}: size {len} past the largest file",
                cell.ino
            )));
        }
        let mut m = self.lock_meta();
        let mut st = cell.lock();
        if st.freed() {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        if st.kind() == FileKind::Dir {
            return Err(Error::IsDir(format!("inode {}", cell.ino)));
        }
        if len < st.size() {
            // The checkpoint it may write takes the inode's lock.
            drop(st);
            self.pay_deletes_debt_first(&mut m, &[])?;
            st = cell.lock();
            if st.freed() {
                return Err(Error::BadHandle(format!("inode {}", cell.ino)));
            }
        }
        // What the truncate adds to the checkpoint debt is charged to deletes' room.
        let debt_before = Self::truncate_debt(&st);
        if len < st.size() {
            let seq = m.writer.seq();
            let trimmed = st.truncate(len);
            for a in trimmed.unmapped {
                m.seg_dec(a, seq, self.segment_blocks());
            }
            self.release_dirty_bytes(trimmed.dropped * BLOCK_U64);
            // The kept tail block must read as zeros past the new size if the file grows again.
            let within = (len % BLOCK_U64) as usize;
            if within != 0 {
                let block = len / BLOCK_U64;
                let mut data = zeroed_block();
                let bytes = Arc::get_mut(&mut data).expect("a new block is not shared");
                self.read_block(cell.ino, &st, block, &mut bytes[..])?;
                bytes[within..].fill(0);
                let gen = st.take_gen();
                let fresh = DirtyBlock::new(gen, data);
                self.note_width(block + 1);
                if st.dirty_mut().insert(block, fresh).is_none() {
                    self.budget.add(BLOCK_U64);
                }
                // A buffer to seal, as after a write.
                self.mark_dirty(cell.ino);
            }
        }
        st.grow_to(len);
        st.touch_modified(self.now_ns());
        st.mark_attr_dirty();
        Self::charge_truncate(&mut m, debt_before, &st);
        drop(st);
        m.namespace_changed(cell.ino);
        self.settle_deletes_debt(&mut m)
    }

    pub fn stat_cell(&self, cell: &InodeCell) -> Result<Stat> {
        let st = cell.lock();
        if st.freed() {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let extra = st.dirty().keys().filter(|&&b| st.map().get(b) == 0).count() as u64;
        Ok(Stat {
            ino: cell.ino,
            kind: st.kind(),
            mode: st.mode() & 0o7777,
            nlink: st.nlink(),
            size: st.size(),
            blocks: st.map().mapped_blocks() + extra,
            mtime_ns: st.mtime_ns(),
            ctime_ns: st.ctime_ns(),
            atime_ns: st.atime_ns(),
            uid: st.uid(),
            gid: st.gid(),
            rdev: st.rdev(),
        })
    }

    /// A handle closed: free the inode if it was the last one to an unlinked file.
    pub fn release(&self, cell: &InodeCell) {
        // Only the inode lock unless this may be the last handle to an unlinked file: `drop_link`
        // changes the link count under the inode lock too, so of a close and an unlink racing,
        // the later one sees both counts at zero and frees.
        let maybe_free = {
            let mut st = cell.lock();
            if self.drop_open(&mut st, cell.ino).is_err() {
                // Poisoned: nothing is freed on a count that went wrong.
                return;
            }
            st.unreferenced()
        };
        if !maybe_free || self.read_only() {
            return;
        }
        let mut m = self.lock_meta();
        let free = {
            let st = cell.lock();
            st.unreferenced()
        };
        if free {
            self.free_inode(&mut m, cell);
            // Under a snapshot the freed blocks are pinned, marking pinned-table pages that
            // deletes' charge counts: paid here as after an unlink. `NoSpace` leaves the debt
            // counted unpaid; a write error has poisoned the pool where it happened.
            if let Err(e) = self.settle_deletes_debt(&mut m) {
                self.poison(&e);
            }
        }
    }
}
