//! The request data area: where a client puts a long request's data (a write's) so that its
//! record in the request ring holds only the frame's head and where the data lies
//! (docs/PROTOCOL.md, "Rings").
//!
//! The area is cut into [`CHUNK`]-byte chunks; a frame's data takes a run of them, the lowest
//! that is free (so the memory touched stays small while few writes are in flight), until its
//! call's completion comes back (the server took the data before it answered). Only the
//! client allocates and frees: the server reads where a record says, after checking it lies
//! inside the area, and reads it where it lies ([`Lent`](super::Lent)). A thread that finds no room waits
//! here, holding no lock of the ring: other threads' frames are published meanwhile.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::queue::RingError;
use super::shm::Mapping;

/// The area's unit of allocation, in bytes; also the shortest data a frame puts there.
pub const CHUNK: usize = 16 << 10;

/// The client's end of the data area.
#[derive(Debug)]
pub(crate) struct DataArea {
    map: Arc<Mapping>,
    /// The area's first byte in the mapping.
    base: usize,
    chunks: usize,
    state: Mutex<Chunks>,
    /// Told when chunks are freed, if a thread waits for room.
    freed: Condvar,
}

#[derive(Debug, Default)]
struct Chunks {
    /// Bit `i % 64` of word `i / 64`: chunk `i` is taken.
    used: Vec<u64>,
    /// Threads waiting for room.
    waiters: usize,
}

impl Chunks {
    fn taken(&self, i: usize) -> bool {
        self.used[i / 64] & (1 << (i % 64)) != 0
    }

    fn mark(&mut self, first: usize, count: usize, taken: bool) {
        for i in first..first + count {
            // Every run marked was found free (or is being given back): flipping is exact.
            assert_eq!(
                self.taken(i),
                !taken,
                "chunk {i} taken twice or freed twice"
            );
            self.used[i / 64] ^= 1 << (i % 64);
        }
    }

    /// The lowest run of `count` free chunks among `chunks`.
    fn find(&self, chunks: usize, count: usize) -> Option<usize> {
        let mut run = 0;
        for i in 0..chunks {
            if self.taken(i) {
                run = 0;
            } else {
                run += 1;
                if run == count {
                    return Some(i + 1 - count);
                }
            }
        }
        None
    }
}

/// A run of chunks holding one frame's data, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    area: &'a DataArea,
    first: usize,
    count: usize,
    len: usize,
}

impl Slot<'_> {
    /// Where the data lies, as the record says it: its byte offset in the area and length.
    pub fn place(&self) -> (u32, u32) {
        ((self.first * CHUNK) as u32, self.len as u32)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut s = self.area.state();
        s.mark(self.first, self.count, false);
        if s.waiters > 0 {
            self.area.freed.notify_all();
        }
    }
}

impl DataArea {
    /// The area of `len` bytes (a multiple of [`CHUNK`]) at byte `base` of `map`; `None` if it
    /// does not lie inside it.
    pub fn new(map: Arc<Mapping>, base: usize, len: usize) -> Option<DataArea> {
        let fits = len > 0 && len.is_multiple_of(CHUNK) && base.checked_add(len)? <= map.len();
        let chunks = len / CHUNK;
        fits.then(|| DataArea {
            map,
            base,
            chunks,
            state: Mutex::new(Chunks {
                used: vec![0; chunks.div_ceil(64)],
                waiters: 0,
            }),
            freed: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, Chunks> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether data of `len` bytes goes here: long enough to be worth it, short enough to fit.
    pub fn takes(&self, len: usize) -> bool {
        (CHUNK..=self.chunks * CHUNK).contains(&len)
    }

    /// Copies `data` into a run of free chunks, waiting for one as long as it takes; the run
    /// is the caller's until the slot is dropped. `data` must be one the area
    /// [`DataArea::takes`].
    pub fn put(&self, data: &[u8]) -> Result<Slot<'_>, RingError> {
        if !self.takes(data.len()) {
            return Err(RingError::Corrupt(format!(
                "{} bytes of data for an area of {} chunks",
                data.len(),
                self.chunks
            )));
        }
        let count = data.len().div_ceil(CHUNK);
        let first = {
            let mut s = self.state();
            loop {
                if let Some(first) = s.find(self.chunks, count) {
                    s.mark(first, count, true);
                    break first;
                }
                // Every run taken belongs to a call in flight, which frees it when its
                // completion (or the session's end) comes back.
                s.waiters += 1;
                s = self.freed.wait(s).unwrap_or_else(|p| p.into_inner());
                s.waiters -= 1;
            }
        };
        let slot = Slot {
            area: self,
            first,
            count,
            len: data.len(),
        };
        if !self.map.write(self.base + first * CHUNK, data) {
            return Err(RingError::Corrupt("data area outside the mapping".into()));
        }
        Ok(slot)
    }

    /// Threads waiting for room now (tests: that a thread is parked here before going on).
    #[cfg(test)]
    pub fn waiters(&self) -> usize {
        self.state().waiters
    }
}
