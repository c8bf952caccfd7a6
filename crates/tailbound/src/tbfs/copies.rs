//! The cleaner's copies of file data whose logs are not written yet.
//!
//! A light cleaning pass copies a live block into a data-only log and points the file's map at the
//! copy at once, under the file's inode lock; the log reaches the device later (after the pass,
//! or after `meta` is released by the background pass). A read in between, which needs only the
//! inode lock, would read the copy's address on the device before the copy is there: bytes of
//! whatever that segment held before. Until its log is written, a copy is read from here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::format::Block;

#[derive(Debug, Default)]
pub(crate) struct CopiesInFlight {
    /// Whether `blocks` may hold anything: one load on every read's path when it does not.
    any: AtomicBool,
    /// Address of a copy -> the sequence of the log holding it, and its bytes.
    blocks: Mutex<HashMap<u64, (u64, Arc<Block>)>>,
}

impl CopiesInFlight {
    /// Notes a copy at `addr` in log `seq`.
    pub fn note(&self, addr: u64, seq: u64, block: Arc<Block>) {
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.insert(addr, (seq, block));
        self.any.store(true, Ordering::Release);
    }

    /// The copy at `addr`, if its log may not be written yet.
    pub fn get(&self, addr: u64) -> Option<Arc<Block>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.get(&addr).map(|(_, b)| b.clone())
    }

    /// Whether any copy may be unwritten.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Forgets the copies in logs below `seq`, which are written.
    pub fn written_below(&self, seq: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.retain(|_, (s, _)| *s >= seq);
        if blocks.is_empty() {
            self.any.store(false, Ordering::Release);
        }
    }
}
