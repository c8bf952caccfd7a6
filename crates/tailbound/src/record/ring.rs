//! The decoupled mode's ring: the producer copies records in, the writer thread copies them out
//! and makes the `write()` calls.
//!
//! The ring is one preallocated, pre-faulted buffer. For the block and drop policies it is a
//! wait-free single-producer single-consumer ring: the producer and the writer share only atomics,
//! so a writer preempted mid-copy never holds the producer up. For overwrite (the producer discards
//! the oldest records, so both sides change the same state) it sits behind one mutex, held only for
//! a copy, never across I/O. The producer does not wake the writer for each record (a wake-up would let the writer
//! preempt the producer on a busy CPU): the writer drains the ring every [`WRITER_POLL`], and is
//! woken early only when the ring is half full. When full — of bytes, or of records (the queue of
//! record lengths is sized once, one entry per [`RING_BYTES_PER_RECORD_MIN`] bytes) — the overflow
//! policy decides: wait, drop the new record, or discard the oldest records not yet taken by the
//! writer. Sequence numbers are given by the writer, so discarded records leave no gap in the file.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

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
    buf: Vec<u8>,
    head: usize,
    used: usize,
    /// Lengths of the queued records, oldest first; never longer than `Ring::records_max`.
    records: VecDeque<usize>,
    closed: bool,
    writer_waiting: bool,
    producer_waiting: bool,
    /// Test hook: the writer takes nothing while set.
    stalled: bool,
    counters: RingCounters,
}

/// The ring behind one mutex, for the overwrite policy (the producer discards the oldest records,
/// so both sides change the same state).
struct LockedRing {
    state: Mutex<State>,
    /// The buffer's length, fixed at creation: read without the lock.
    capacity: usize,
    /// Most records queued at once, so the queue never grows (allocates) on the producer's path,
    /// even for empty records.
    records_max: usize,
    not_empty: Condvar,
    not_full: Condvar,
    overflow: Overflow,
}

/// What a `push` did with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    Dropped,
    Closed,
}

impl LockedRing {
    fn new(capacity: usize, overflow: Overflow) -> LockedRing {
        let mut buf = vec![0u8; capacity];
        buf.fill(0xa5);
        std::hint::black_box(&mut buf);
        buf.fill(0);
        let records_max =
            (capacity / RING_BYTES_PER_RECORD_MIN).clamp(RING_RECORDS_MIN, RING_RECORDS_MAX);
        let mut records = VecDeque::with_capacity(records_max);
        // Touch the queue's pages too.
        records.resize(records_max, 0);
        std::hint::black_box(&mut records);
        records.clear();
        LockedRing {
            state: Mutex::new(State {
                buf,
                head: 0,
                used: 0,
                records,
                closed: false,
                writer_waiting: false,
                producer_waiting: false,
                stalled: false,
                counters: RingCounters::default(),
            }),
            capacity,
            records_max,
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            overflow,
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

    /// Copies `record` in, applying the overflow policy when there is no room.
    /// The caller checks `record.len() <= capacity` first.
    pub fn push(&self, record: &[u8]) -> Pushed {
        let mut s = self.lock();
        let cap = s.buf.len();
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
        let tail = (s.head + s.used) % cap;
        let first = record.len().min(cap - tail);
        s.buf[tail..tail + first].copy_from_slice(&record[..first]);
        s.buf[..record.len() - first].copy_from_slice(&record[first..]);
        s.used += record.len();
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
                    let cap = s.buf.len();
                    let head = s.head;
                    let first = len.min(cap - head);
                    out.clear();
                    out.extend_from_slice(&s.buf[head..head + first]);
                    out.extend_from_slice(&s.buf[..len - first]);
                    s.head = (head + len) % cap;
                    s.used -= len;
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

/// Bytes of the length header in front of each record in the wait-free ring.
const HEADER_BYTES: usize = 4;

/// The wait-free ring, for the block and drop policies: a single-producer single-consumer byte
/// ring (`rtrb`) of length-prefixed records. The producer's half and the writer's half are each
/// behind a mutex only their own thread takes, so the producer never waits for a writer that was
/// preempted mid-copy; the two sides share only atomics. Sleeping (an idle writer, a producer
/// blocked on a full ring) uses a separate mutex and condvars, off the fast path.
struct SpscRing {
    tx: Mutex<rtrb::Producer<u8>>,
    rx: Mutex<rtrb::Consumer<u8>>,
    capacity: usize,
    records_max: usize,
    overflow: Overflow,
    used_bytes: AtomicUsize,
    used_records: AtomicUsize,
    closed: AtomicBool,
    stalled: AtomicBool,
    writer_waiting: AtomicBool,
    producer_waiting: AtomicBool,
    blocked: AtomicU64,
    dropped: AtomicU64,
    sleep: Mutex<()>,
    not_empty: Condvar,
    not_full: Condvar,
}

/// Copies `sources`, in order, into `dest`'s slices, in order (a ring chunk that may wrap).
fn copy_split(dest: &mut [&mut [u8]; 2], sources: &[&[u8]]) {
    let (mut d, mut at) = (0usize, 0usize);
    for src in sources {
        let mut src: &[u8] = src;
        while !src.is_empty() {
            let room = dest[d].len() - at;
            if room == 0 {
                d += 1;
                at = 0;
                continue;
            }
            let n = room.min(src.len());
            dest[d][at..at + n].copy_from_slice(&src[..n]);
            at += n;
            src = &src[n..];
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SpscRing {
    fn new(capacity: usize, overflow: Overflow) -> SpscRing {
        let records_max =
            (capacity / RING_BYTES_PER_RECORD_MIN).clamp(RING_RECORDS_MIN, RING_RECORDS_MAX);
        let size = capacity + HEADER_BYTES * records_max;
        let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(size);
        // One full lap now touches every page, so the producer never faults later.
        if let Ok(mut chunk) = tx.write_chunk(size) {
            let (a, b) = chunk.as_mut_slices();
            a.fill(0xa5);
            b.fill(0xa5);
            chunk.commit_all();
        }
        if let Ok(chunk) = rx.read_chunk(size) {
            chunk.commit_all();
        }
        SpscRing {
            tx: Mutex::new(tx),
            rx: Mutex::new(rx),
            capacity,
            records_max,
            overflow,
            used_bytes: AtomicUsize::new(0),
            used_records: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            writer_waiting: AtomicBool::new(false),
            producer_waiting: AtomicBool::new(false),
            blocked: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            sleep: Mutex::new(()),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
        }
    }

    fn has_room(&self, len: usize) -> bool {
        self.used_bytes.load(Ordering::Acquire) + len <= self.capacity
            && self.used_records.load(Ordering::Acquire) < self.records_max
    }

    fn push(&self, record: &[u8]) -> Pushed {
        let mut counted_block = false;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Pushed::Closed;
            }
            if self.has_room(record.len()) {
                break;
            }
            match self.overflow {
                Overflow::Drop | Overflow::Overwrite => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    return Pushed::Dropped;
                }
                Overflow::Block => {
                    if !counted_block {
                        self.blocked.fetch_add(1, Ordering::Relaxed);
                        counted_block = true;
                    }
                    self.producer_waiting.store(true, Ordering::Release);
                    let guard = locked(&self.sleep);
                    if !self.has_room(record.len()) && !self.closed.load(Ordering::Acquire) {
                        let _ = self.not_full.wait_timeout(guard, WRITER_POLL);
                    }
                }
            }
        }
        {
            let mut tx = locked(&self.tx);
            let n = HEADER_BYTES + record.len();
            // Room was checked against the counters, which never exceed the ring's size.
            let Ok(mut chunk) = tx.write_chunk(n) else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Pushed::Dropped;
            };
            let header = (record.len() as u32).to_le_bytes();
            let (a, b) = chunk.as_mut_slices();
            copy_split(&mut [a, b], &[&header, record]);
            chunk.commit_all();
        }
        self.used_bytes.fetch_add(record.len(), Ordering::AcqRel);
        self.used_records.fetch_add(1, Ordering::AcqRel);
        if self.writer_waiting.load(Ordering::Acquire)
            && self.used_bytes.load(Ordering::Acquire) * 2 >= self.capacity
        {
            let _guard = locked(&self.sleep);
            self.not_empty.notify_one();
        }
        Pushed::Queued
    }

    fn pop(&self, out: &mut Vec<u8>) -> bool {
        loop {
            if !self.stalled.load(Ordering::Acquire)
                && self.used_records.load(Ordering::Acquire) > 0
            {
                let mut rx = locked(&self.rx);
                let mut header = [0u8; HEADER_BYTES];
                if let Ok(chunk) = rx.read_chunk(HEADER_BYTES) {
                    let (a, b) = chunk.as_slices();
                    header[..a.len()].copy_from_slice(a);
                    header[a.len()..].copy_from_slice(b);
                    chunk.commit_all();
                }
                let len = u32::from_le_bytes(header) as usize;
                out.clear();
                if let Ok(chunk) = rx.read_chunk(len) {
                    let (a, b) = chunk.as_slices();
                    out.extend_from_slice(a);
                    out.extend_from_slice(b);
                    chunk.commit_all();
                }
                drop(rx);
                self.used_bytes.fetch_sub(len, Ordering::AcqRel);
                self.used_records.fetch_sub(1, Ordering::AcqRel);
                if self.producer_waiting.swap(false, Ordering::AcqRel) {
                    let _guard = locked(&self.sleep);
                    self.not_full.notify_one();
                }
                return true;
            }
            if self.closed.load(Ordering::Acquire) && self.used_records.load(Ordering::Acquire) == 0
            {
                return false;
            }
            self.writer_waiting.store(true, Ordering::Release);
            let guard = locked(&self.sleep);
            let _ = self.not_empty.wait_timeout(guard, WRITER_POLL);
            self.writer_waiting.store(false, Ordering::Release);
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stalled.store(false, Ordering::Release);
        let _guard = locked(&self.sleep);
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// A bounded byte ring of whole records: wait-free for the block and drop policies, behind one
/// mutex for overwrite.
pub struct Ring {
    kind: RingKind,
}

enum RingKind {
    Spsc(SpscRing),
    Locked(LockedRing),
}

impl Ring {
    /// A ring of `capacity` bytes of records, every page touched now so the producer never faults.
    pub fn new(capacity: usize, overflow: Overflow) -> Ring {
        let kind = match overflow {
            Overflow::Overwrite => RingKind::Locked(LockedRing::new(capacity, overflow)),
            Overflow::Block | Overflow::Drop => RingKind::Spsc(SpscRing::new(capacity, overflow)),
        };
        Ring { kind }
    }

    pub fn capacity(&self) -> usize {
        match &self.kind {
            RingKind::Spsc(r) => r.capacity,
            RingKind::Locked(r) => r.capacity(),
        }
    }

    pub fn counters(&self) -> RingCounters {
        match &self.kind {
            RingKind::Spsc(r) => RingCounters {
                blocked: r.blocked.load(Ordering::Relaxed),
                dropped: r.dropped.load(Ordering::Relaxed),
                overwritten: 0,
            },
            RingKind::Locked(r) => r.counters(),
        }
    }

    /// Copies `record` in, applying the overflow policy when there is no room.
    /// The caller checks `record.len() <= capacity` first.
    pub fn push(&self, record: &[u8]) -> Pushed {
        match &self.kind {
            RingKind::Spsc(r) => r.push(record),
            RingKind::Locked(r) => r.push(record),
        }
    }

    /// Takes the oldest record into `out`; waits while the ring is empty. Returns false once the
    /// ring is closed and drained.
    pub fn pop(&self, out: &mut Vec<u8>) -> bool {
        match &self.kind {
            RingKind::Spsc(r) => r.pop(out),
            RingKind::Locked(r) => r.pop(out),
        }
    }

    /// No more records: the writer drains what is queued and stops; a blocked producer returns.
    pub fn close(&self) {
        match &self.kind {
            RingKind::Spsc(r) => r.close(),
            RingKind::Locked(r) => r.close(),
        }
    }

    /// Test hook: holds the writer back (or lets it go).
    #[cfg(test)]
    pub fn set_stalled(&self, stalled: bool) {
        match &self.kind {
            RingKind::Spsc(r) => {
                r.stalled.store(stalled, Ordering::Release);
                let _guard = locked(&r.sleep);
                r.not_empty.notify_all();
            }
            RingKind::Locked(r) => r.set_stalled(stalled),
        }
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
    fn concurrent_records_of_every_size_arrive_whole_and_in_order_across_many_wraps() {
        for overflow in [Overflow::Block, Overflow::Drop] {
            let ring = std::sync::Arc::new(Ring::new(1000, overflow));
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
            let sent: Vec<Vec<u8>> = (0..5000u32)
                .map(|i| vec![(i % 251) as u8; (i as usize * 7) % 300])
                .collect();
            let mut queued = Vec::new();
            for rec in &sent {
                match ring.push(rec) {
                    Pushed::Queued => queued.push(rec.clone()),
                    Pushed::Dropped => assert_eq!(overflow, Overflow::Drop),
                    Pushed::Closed => panic!("closed early"),
                }
            }
            ring.close();
            let got = reader.join().unwrap();
            assert_eq!(got, queued, "{overflow:?}");
            let c = ring.counters();
            assert_eq!(c.dropped as usize, sent.len() - queued.len());
        }
    }
}
