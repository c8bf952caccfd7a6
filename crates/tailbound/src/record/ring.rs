//! The decoupled mode's ring: the producer copies records in, the writer thread copies them out
//! and makes the `write()` calls.
//!
//! The ring is one preallocated, pre-faulted buffer. Its lock guards positions only: each side
//! claims its part of the buffer under the lock and copies outside it, so neither ever waits for the
//! other's copy (or for the other thread to be scheduled again while holding the lock). The producer does not wake the writer for each record (a wake-up would let the writer
//! preempt the producer on a busy CPU): the writer drains the ring every [`WRITER_POLL`], and is
//! woken early only when the ring is half full. When full — of bytes, or of records (the queue of
//! record lengths is sized once, one entry per [`RING_BYTES_PER_RECORD_MIN`] bytes) — the overflow
//! policy decides: wait, drop the new record, or discard the oldest records not yet taken by the
//! writer. Sequence numbers are given by the writer, so discarded records leave no gap in the file.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::sys::mmap::SharedMapping;

/// How often an idle writer looks at the ring.
pub const WRITER_POLL: Duration = Duration::from_millis(1);
/// The ring's record queue holds one entry per this many bytes of ring: records smaller than this
/// on average fill the queue before the bytes, and the overflow policy applies as when full.
pub const RING_BYTES_PER_RECORD_MIN: usize = 64;
/// Bounds of the record queue's length, whatever the ring's size.
pub const RING_RECORDS_MIN: usize = 64;
pub const RING_RECORDS_MAX: usize = 1 << 20;

use crate::record::options::Overflow;

/// Counters of what the overflow policy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCounters {
    pub blocked: u64,
    pub dropped: u64,
    pub overwritten: u64,
}

struct State {
    head: usize,
    /// Bytes from `head` that are queued, being copied out, or being copied in.
    used: usize,
    /// The record at `head` the writer is copying out (its length), which no policy may discard.
    reading: usize,
    /// Lengths of the queued records, oldest first; never longer than `Ring::records_max`.
    records: VecDeque<usize>,
    closed: bool,
    writer_waiting: bool,
    producer_waiting: bool,
    /// Test hook: the writer takes nothing while set.
    stalled: bool,
    counters: RingCounters,
}

/// A bounded byte ring of whole records.
pub struct Ring {
    state: Mutex<State>,
    /// The bytes. Each side copies only the part it claimed under the lock: the producer a free
    /// part, the writer the record it took.
    buf: SharedMapping,
    /// The buffer's length, fixed at creation: read without the lock.
    capacity: usize,
    /// Most records queued at once, so the queue never grows (allocates) on the producer's path,
    /// even for empty records.
    records_max: usize,
    not_empty: Condvar,
    not_full: Condvar,
    overflow: Overflow,
    /// Test hook: runs on the writer thread while it copies a record out.
    #[cfg(test)]
    copy_hook: Mutex<Option<Box<dyn Fn() + Send>>>,
}

/// What a `push` did with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    Dropped,
    Closed,
}

impl Ring {
    /// A ring of `capacity` bytes, every page touched now so the producer never faults.
    pub fn new(capacity: usize, overflow: Overflow) -> Ring {
        let buf = SharedMapping::anonymous(capacity.max(1)).expect("mapping the decoupled ring");
        let zeros = vec![0u8; capacity.min(1 << 20)];
        for at in (0..capacity).step_by(zeros.len().max(1)) {
            let n = zeros.len().min(capacity - at);
            buf.write_at(at, &zeros[..n])
                .expect("the ring's own range is inside it");
        }
        let records_max =
            (capacity / RING_BYTES_PER_RECORD_MIN).clamp(RING_RECORDS_MIN, RING_RECORDS_MAX);
        let mut records = VecDeque::with_capacity(records_max);
        // Touch the queue's pages too.
        records.resize(records_max, 0);
        std::hint::black_box(&mut records);
        records.clear();
        Ring {
            state: Mutex::new(State {
                head: 0,
                used: 0,
                reading: 0,
                records,
                closed: false,
                writer_waiting: false,
                producer_waiting: false,
                stalled: false,
                counters: RingCounters::default(),
            }),
            buf,
            capacity,
            records_max,
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            overflow,
            #[cfg(test)]
            copy_hook: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn counters(&self) -> RingCounters {
        self.lock().counters
    }

    /// Copies `bytes` into the buffer at `at`, wrapping at the end.
    fn copy_in(&self, at: usize, bytes: &[u8]) {
        let first = bytes.len().min(self.capacity - at);
        let ok = self.buf.write_at(at, &bytes[..first]).is_ok()
            && self.buf.write_at(0, &bytes[first..]).is_ok();
        debug_assert!(ok, "ring positions stay inside the ring");
    }

    /// Copies `len` bytes from the buffer at `at`, wrapping at the end, into `out`.
    fn copy_out(&self, at: usize, len: usize, out: &mut Vec<u8>) {
        out.resize(len, 0);
        let first = len.min(self.capacity - at);
        let (a, b) = out.split_at_mut(first);
        let ok = self.buf.read_at(at, a).is_ok() && self.buf.read_at(0, b).is_ok();
        debug_assert!(ok, "ring positions stay inside the ring");
    }

    /// Copies `record` in, applying the overflow policy when there is no room.
    /// The caller checks `record.len() <= capacity` first.
    pub fn push(&self, record: &[u8]) -> Pushed {
        let mut s = self.lock();
        let cap = self.capacity;
        debug_assert!(record.len() <= cap);
        let mut counted_block = false;
        while cap - s.used < record.len() || s.records.len() == self.records_max {
            if s.closed {
                return Pushed::Closed;
            }
            match self.overflow {
                Overflow::Block => {
                    if !counted_block {
                        s.counters.blocked += 1;
                        counted_block = true;
                    }
                    s.producer_waiting = true;
                    s = self.not_full.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                Overflow::Drop => {
                    s.counters.dropped += 1;
                    return Pushed::Dropped;
                }
                Overflow::Overwrite => {
                    if s.reading > 0 {
                        // Only bytes at `head` can come free, and the writer is copying the record
                        // there: its copy ends soon.
                        s.producer_waiting = true;
                        s = self.not_full.wait(s).unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                    let Some(oldest) = s.records.pop_front() else {
                        break;
                    };
                    s.head = (s.head + oldest) % cap;
                    s.used -= oldest;
                    s.counters.overwritten += 1;
                }
            }
        }
        if s.closed {
            return Pushed::Closed;
        }
        // Claim the free bytes after the queue, copy outside the lock, then queue the record.
        let tail = (s.head + s.used) % cap;
        s.used += record.len();
        drop(s);
        self.copy_in(tail, record);
        let mut s = self.lock();
        s.records.push_back(record.len());
        if s.writer_waiting && s.used * 2 >= cap {
            s.writer_waiting = false;
            self.not_empty.notify_one();
        }
        Pushed::Queued
    }

    /// Takes the oldest record into `out`; waits while the ring is empty. Returns false once the
    /// ring is closed and drained.
    pub fn pop(&self, out: &mut Vec<u8>) -> bool {
        let mut s = self.lock();
        loop {
            if !s.stalled {
                if let Some(len) = s.records.pop_front() {
                    // Claim the record, copy it outside the lock, then free its bytes.
                    let head = s.head;
                    s.reading = len;
                    drop(s);
                    #[cfg(test)]
                    if let Some(hook) = &*self.copy_hook.lock().unwrap_or_else(|p| p.into_inner()) {
                        hook();
                    }
                    self.copy_out(head, len, out);
                    let mut s = self.lock();
                    s.head = (head + len) % self.capacity;
                    s.used -= len;
                    s.reading = 0;
                    if s.producer_waiting {
                        s.producer_waiting = false;
                        self.not_full.notify_one();
                    }
                    return true;
                }
                if s.closed {
                    return false;
                }
            }
            s.writer_waiting = true;
            s = self
                .not_empty
                .wait_timeout(s, WRITER_POLL)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
            s.writer_waiting = false;
        }
    }

    /// No more records: the writer drains what is queued and stops; a blocked producer returns.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.stalled = false;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }

    /// Test hook: holds the writer back (or lets it go).
    #[cfg(test)]
    pub fn set_stalled(&self, stalled: bool) {
        let mut s = self.lock();
        s.stalled = stalled;
        self.not_empty.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_out_whole_and_in_order_across_the_wrap() {
        let ring = Ring::new(100, Overflow::Drop);
        let mut out = Vec::new();
        for i in 0..50u8 {
            let rec = vec![i; 7 + (i as usize % 5)];
            assert_eq!(ring.push(&rec), Pushed::Queued);
            assert!(ring.pop(&mut out));
            assert_eq!(out, rec);
        }
        assert_eq!(ring.counters(), RingCounters::default());
    }

    #[test]
    fn drop_and_overwrite_count_what_they_discard() {
        let ring = Ring::new(30, Overflow::Drop);
        ring.set_stalled(true);
        for i in 0..5u8 {
            ring.push(&[i; 10]);
        }
        assert_eq!(ring.counters().dropped, 2);
        ring.close();
        let mut out = Vec::new();
        let mut got = Vec::new();
        while ring.pop(&mut out) {
            got.push(out[0]);
        }
        assert_eq!(got, vec![0, 1, 2], "the newest records were dropped");

        let ring = Ring::new(30, Overflow::Overwrite);
        ring.set_stalled(true);
        for i in 0..5u8 {
            ring.push(&[i; 10]);
        }
        assert_eq!(ring.counters().overwritten, 2);
        ring.close();
        let mut got = Vec::new();
        while ring.pop(&mut out) {
            got.push(out[0]);
        }
        assert_eq!(got, vec![2, 3, 4], "the oldest records were overwritten");
    }

    #[test]
    fn empty_records_are_bounded_by_the_record_queue() {
        let ring = Ring::new(1024, Overflow::Drop);
        ring.set_stalled(true);
        for _ in 0..RING_RECORDS_MIN + 10 {
            ring.push(&[]);
        }
        assert_eq!(ring.counters().dropped, 10);
        let ring = Ring::new(1024, Overflow::Overwrite);
        ring.set_stalled(true);
        for i in 0..RING_RECORDS_MIN as u8 + 10 {
            ring.push(&[i]);
        }
        assert_eq!(ring.counters().overwritten, 10);
        ring.close();
        let mut out = Vec::new();
        assert!(ring.pop(&mut out));
        assert_eq!(out, vec![10], "the ten oldest were overwritten");
    }

    #[test]
    fn block_waits_for_the_writer_and_loses_nothing() {
        let ring = std::sync::Arc::new(Ring::new(64, Overflow::Block));
        let reader = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut got = Vec::new();
                while ring.pop(&mut out) {
                    got.push(out.clone());
                }
                got
            })
        };
        let sent: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_le_bytes().repeat(4)).collect();
        for rec in &sent {
            assert_eq!(ring.push(rec), Pushed::Queued);
        }
        ring.close();
        assert_eq!(reader.join().unwrap(), sent);
    }

    #[test]
    fn neither_side_holds_the_lock_while_it_copies() {
        use std::sync::mpsc::channel;
        let ring = std::sync::Arc::new(Ring::new(1 << 16, Overflow::Block));
        assert_eq!(ring.push(&[7u8; 4000]), Pushed::Queued);
        let (copying_tx, copying_rx) = channel();
        let (go_on_tx, go_on_rx) = channel::<()>();
        let go_on_rx = Mutex::new(go_on_rx);
        *ring.copy_hook.lock().unwrap() = Some(Box::new(move || {
            let _ = copying_tx.send(());
            let _ = go_on_rx.lock().unwrap().recv();
        }));
        let reader = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                assert!(ring.pop(&mut out));
                out
            })
        };
        copying_rx.recv().unwrap();
        // The writer is in the middle of its copy: the lock is free, and the producer queues a
        // record without waiting for it.
        assert!(
            ring.state.try_lock().is_ok(),
            "the lock is free during the copy"
        );
        assert_eq!(ring.push(&[8u8; 4000]), Pushed::Queued);
        go_on_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), vec![7u8; 4000]);
        *ring.copy_hook.lock().unwrap() = None;
        let mut out = Vec::new();
        assert!(ring.pop(&mut out));
        assert_eq!(out, vec![8u8; 4000]);
    }
}
