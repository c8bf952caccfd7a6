//! Reads of a file: its buffered blocks first, then the cleaner's copies whose logs are not
//! written yet, then the device. Names one part of `Engine`, the copies; a read's access time
//! is set by `Engine::touch_atime` (`commit/write_path.rs`).

use crate::tbfs::format::*;
use crate::tbfs::inode::*;
use crate::tbfs::state::Engine;
use crate::tbfs::{Error, Result};

impl Engine {
    /// Reads file block `block` of an inode into `out` (buffered data first, then storage).
    pub(super) fn read_block(
        &self,
        ino: u64,
        st: &InodeState,
        block: u64,
        out: &mut [u8],
    ) -> Result<()> {
        if let Some(d) = st.dirty().get(&block) {
            out.copy_from_slice(&d.data()[..]);
            return Ok(());
        }
        let addr = st.map().get(block);
        if addr == 0 {
            out.fill(0);
            return Ok(());
        }
        if let Some(copy) = self.copies.get(addr) {
            out.copy_from_slice(&copy[..]);
            return Ok(());
        }
        self.dev()
            .read_at(addr * BLOCK_U64, out)
            .map_err(|e| Error::io(format!("inode {ino}: reading block {block} at {addr}"), e))
    }

    pub fn pread(&self, cell: &InodeCell, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.pread_with(cell, buf, offset, true)
    }

    /// Reads without touching the access time (a checkpoint's files are read-only).
    pub fn pread_at_rest(&self, cell: &InodeCell, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.pread_with(cell, buf, offset, false)
    }

    fn pread_with(
        &self,
        cell: &InodeCell,
        buf: &mut [u8],
        offset: u64,
        touch: bool,
    ) -> Result<usize> {
        let mut st = cell.lock();
        if st.freed() {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        if touch {
            self.touch_atime(cell.ino, &mut st);
        }
        if offset >= st.size() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(st.size() - offset) as usize;
        let mut done = 0usize;
        let mut scratch = [0u8; BLOCK];
        while done < len {
            let pos = offset + done as u64;
            let block = pos / BLOCK_U64;
            let within = (pos % BLOCK_U64) as usize;
            let n = (BLOCK - within).min(len - done);
            // Whole blocks that are contiguous on storage and not buffered are read in one
            // request, unless the cleaner has copies whose logs are not written yet.
            if within == 0
                && n == BLOCK
                && !st.dirty().contains_key(&block)
                && st.map().get(block) != 0
                && !self.copies.any()
            {
                let first = st.map().get(block);
                let mut run = 1u64;
                while (done + (run as usize + 1) * BLOCK) <= len
                    && !st.dirty().contains_key(&(block + run))
                    && st.map().get(block + run) == first + run
                    && run < 256
                {
                    run += 1;
                }
                let bytes = run as usize * BLOCK;
                self.dev()
                    .read_at(first * BLOCK_U64, &mut buf[done..done + bytes])
                    .map_err(|e| {
                        Error::io(
                            format!("inode {}: reading {run} blocks at {first}", cell.ino),
                            e,
                        )
                    })?;
                done += bytes;
                continue;
            }
            self.read_block(cell.ino, &st, block, &mut scratch)?;
            buf[done..done + n].copy_from_slice(&scratch[within..within + n]);
            done += n;
        }
        Ok(len)
    }
}
