//! One direction of a session's rings: a byte ring of records in the shared memfd, written by one
//! producer and read by one consumer, each keeping its own position and publishing it.
//!
//! A record is a `u32` header (bit 31: more fragments of the same frame follow; bit 30: the
//! frame's data lies in the request data area, `area`; the rest: the fragment's length), the
//! fragment, and padding to 4 bytes. A frame longer than half the ring is
//! cut into fragments, written back to back, so a frame of any length up to the reader's limit
//! passes through a ring of any size. Positions are free-running `u32` byte counts; the data area
//! is a power of two, so a position's offset is its low bits.
//!
//! Neither side trusts what it reads from the other: every length and position is checked
//! against the ring's size and the bytes published before anything is copied, and a value that
//! does not fit is [`RingError::Corrupt`].

use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::lent::Lent;
use super::shm::{futex_wait, futex_wait_bits, futex_wake, futex_wake_bits, Mapping};

/// A fragment header's "more fragments follow" bit.
const MORE: u32 = 1 << 31;
/// A record header's "the frame's data lies in the data area" bit: the record is the frame's
/// head, then a `u32` offset in the area and a `u32` length, and the frame is the head followed
/// by those bytes of the area. Such a record is a whole frame.
const OUT: u32 = 1 << 30;
/// A record header's length bits.
const LEN: u32 = OUT - 1;
/// How long a side with nothing to do looks at the other side's position before parking, in
/// ns: [`set_spin`].
static SPIN_NS: AtomicU64 = AtomicU64::new(DEFAULT_SPIN.as_nanos() as u64);
/// Short: on a machine with fewer free cores than busy threads, spinning only delays the side
/// it waits for.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(2);

/// Sets how long every ring of this process spins before parking (zero: parks at once). A
/// waiting side that spins while its peer runs on another core answers without a system call.
pub fn set_spin(spin: Duration) {
    SPIN_NS.store(
        u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}
/// How long a parked side sleeps before it looks whether its peer hung up. Only bounds how soon a
/// vanished peer is noticed; a live peer's wake ends the sleep at once.
const PARK: Duration = Duration::from_millis(100);

/// Why a ring cannot be used any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The other side wrote something a ring cannot hold.
    Corrupt(String),
    /// The other side hung up its socket.
    Gone,
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::Corrupt(why) => write!(f, "corrupt ring: {why}"),
            RingError::Gone => f.write_str("the other side hung up"),
        }
    }
}

/// Byte offsets of one ring's control words in the header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctrl {
    /// The producer's position: bytes published.
    pub tail: usize,
    /// Set by a producer parked for room.
    pub space_waiter: usize,
    /// The consumer's position: bytes consumed.
    pub head: usize,
    /// Set by a consumer parked for data.
    pub data_waiter: usize,
}

/// Where one ring lives in a mapping: its control words and data area (checked at construction).
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    map: Arc<Mapping>,
    ctrl: Ctrl,
    base: usize,
    cap: usize,
}

impl Queue {
    /// `None` unless the data area is a power of two lying inside the mapping and the control
    /// words are aligned words inside it.
    pub fn new(map: Arc<Mapping>, ctrl: Ctrl, base: usize, cap: usize) -> Option<Queue> {
        let inside = cap.is_power_of_two()
            && (64..=1 << 30).contains(&cap)
            && base.checked_add(cap)? <= map.len()
            && [ctrl.tail, ctrl.space_waiter, ctrl.head, ctrl.data_waiter]
                .iter()
                .all(|&o| map.word(o).is_some());
        inside.then_some(Queue {
            map,
            ctrl,
            base,
            cap,
        })
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // Every offset used was checked in `new`: the fallback is never reached.
        self.map.word(offset).unwrap_or(&FALLBACK)
    }

    fn offset(&self, pos: u32) -> usize {
        pos as usize & (self.cap - 1)
    }

    /// Copies out `out.len()` bytes at `pos`, wrapping at the end of the data area.
    fn read(&self, pos: u32, out: &mut [u8]) -> Result<(), RingError> {
        let off = self.offset(pos);
        let first = out.len().min(self.cap - off);
        let (a, b) = out.split_at_mut(first);
        if self.map.read(self.base + off, a) && self.map.read(self.base, b) {
            Ok(())
        } else {
            Err(RingError::Corrupt("a record outside the data area".into()))
        }
    }

    /// Appends `len` bytes at `pos` to `out`, wrapping at the end of the data area.
    fn read_append(&self, pos: u32, len: usize, out: &mut Vec<u8>) -> Result<(), RingError> {
        let off = self.offset(pos);
        let first = len.min(self.cap - off);
        if self.map.read_append(self.base + off, first, out)
            && self.map.read_append(self.base, len - first, out)
        {
            Ok(())
        } else {
            Err(RingError::Corrupt("a record outside the data area".into()))
        }
    }

    fn write(&self, pos: u32, bytes: &[u8]) -> Result<(), RingError> {
        let off = self.offset(pos);
        let first = bytes.len().min(self.cap - off);
        if self.map.write(self.base + off, &bytes[..first])
            && self.map.write(self.base, &bytes[first..])
        {
            Ok(())
        } else {
            Err(RingError::Corrupt("a record outside the data area".into()))
        }
    }

    /// Waits until `word` no longer holds `seen`: spins a while (if `spin`), then parks on it
    /// with `waiter` set so the other side knows to wake it (with `bits`, only a wake naming one
    /// of them, or a plain one, ends the sleep). `Gone` once the peer hung up.
    fn wait_change(
        &self,
        word: usize,
        seen: u32,
        waiter: usize,
        bits: Option<u32>,
        spin: bool,
        peer: &UnixStream,
    ) -> Result<(), RingError> {
        let w = self.word(word);
        let spin = if spin {
            SPIN_NS.load(Ordering::Relaxed)
        } else {
            0
        };
        if spin > 0 {
            let start = Instant::now();
            'spin: loop {
                for _ in 0..64 {
                    if w.load(Ordering::Acquire) != seen {
                        return Ok(());
                    }
                    std::hint::spin_loop();
                }
                if start.elapsed().as_nanos() as u64 >= spin {
                    break 'spin;
                }
            }
        }
        // A count, not a flag: several threads of one side (a session's workers) may park on
        // the same word, and one leaving must not hide the others from the waker.
        let count = self.word(waiter);
        count.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence after the other side's publish: either it sees the count and
        // wakes one of us, or we see its new position here and do not sleep.
        // A waiter with bits is woken without the word moving (another thread of its side
        // drained its record): it looks at the peer only when it slept the whole bound.
        let mut look = true;
        if w.load(Ordering::SeqCst) == seen {
            match bits {
                None => futex_wait(w, seen, PARK),
                Some(bits) => look = futex_wait_bits(w, seen, PARK, bits),
            }
        }
        count.fetch_sub(1, Ordering::SeqCst);
        if look
            && w.load(Ordering::Acquire) == seen
            && crate::sys::sock::wait_hangup(peer, 0).unwrap_or(true)
        {
            return Err(RingError::Gone);
        }
        Ok(())
    }

    /// Publishes `pos` in `word` and wakes one thread of the other side if any parked on it
    /// (with `bits`: every thread parked with one of them).
    fn publish(&self, word: usize, pos: u32, waiter: usize, bits: Option<u32>) {
        self.publish_unwoken(word, pos);
        self.wake(word, waiter, bits);
    }

    /// Publishes `pos` in `word`; the wake is the caller's, after it ([`Queue::wake`]).
    fn publish_unwoken(&self, word: usize, pos: u32) {
        self.word(word).store(pos, Ordering::Release);
        // Pairs with a parking side raising its count before its last look at `word`: either
        // a wake after this sees the count, or the parking side sees `pos` and does not sleep.
        fence(Ordering::SeqCst);
    }

    /// Wakes one thread parked on `word` (with `bits`: every thread parked with one of them),
    /// if the count at `waiter` says any is; returns how many it woke (with `bits`; else 0).
    fn wake(&self, word: usize, waiter: usize, bits: Option<u32>) -> usize {
        match bits {
            None => {
                self.wake_one(word, waiter);
                0
            }
            Some(bits) => self.wake_bits(word, waiter, bits),
        }
    }

    /// Wakes the threads parked on `word` with one of `bits`, if the count at `waiter` says
    /// any thread is parked; returns how many it woke.
    fn wake_bits(&self, word: usize, waiter: usize, bits: u32) -> usize {
        if self.word(waiter).load(Ordering::SeqCst) == 0 {
            return 0;
        }
        futex_wake_bits(self.word(word), bits)
    }

    /// Wakes one thread parked on `word`, if the count at `waiter` says any is.
    fn wake_one(&self, word: usize, waiter: usize) {
        self.wake_n(word, waiter, 1);
    }

    /// Wakes up to `n` threads parked on `word`, if the count at `waiter` says any is.
    fn wake_n(&self, word: usize, waiter: usize, n: i32) {
        if self.word(waiter).load(Ordering::SeqCst) != 0 {
            futex_wake(self.word(word), n);
        }
    }
}

static FALLBACK: AtomicU32 = AtomicU32::new(0);

fn padded(len: usize) -> usize {
    4 + len.div_ceil(4) * 4
}

/// Whom a frame's publication wakes on the reading side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// No one: the reader takes it with a later frame, or when it looks on its own.
    Nobody,
    /// One parked reader.
    One,
    /// The readers parked with one of these bits ([`Parking::wait_bits`]).
    Bits(u32),
}

/// The writing end of a ring, pushed through by any number of threads at once.
///
/// A frame that fits one record reserves its room under a short lock, is copied outside it,
/// and is published in the order reserved once every record reserved before it is written;
/// the thread that publishes a run of records makes their wake-ups, after letting go of the
/// lock. So threads do not queue behind one another's copies. A longer frame (fragments, which
/// must follow each other and may wait for the reader between them) waits until every record
/// reserved before it is published and then holds the lock throughout.
///
/// A frame pushed with its wake-up deferred ([`Producer::push_deferred`]) is published as any
/// other, but the wake-up it owes is kept in [`Producer::deferred`] until a
/// [`Producer::wake_deferred`]: a pushing thread that goes on working wakes its reader when it
/// is about to stop, not while it still has the CPU to give away.
#[derive(Debug)]
pub(crate) struct Producer {
    q: Queue,
    tails: Mutex<Tails>,
    /// Told when the last record reserved is published, if a thread waits for that.
    drained: Condvar,
    /// The bits of wake-ups owed for frames published with their wake deferred. Only a thread
    /// that pushed with its wake deferred adds to it, and each such thread calls
    /// [`Producer::wake_deferred`] later, so no bit stays here for good.
    deferred: AtomicU32,
    /// Records written so far (a frame in fragments counts each).
    #[cfg(test)]
    records: AtomicU64,
}

/// A producer's positions, behind its lock.
#[derive(Debug, Default)]
struct Tails {
    /// Bytes reserved: the next record starts here.
    reserved: u32,
    /// Bytes published: ours, never read back from the shared word.
    published: u32,
    /// Records reserved and not yet published, in the order reserved.
    pending: VecDeque<Pending>,
    /// Threads waiting for `pending` to empty (a long frame, or a frame waiting for room).
    drain_waiters: usize,
}

#[derive(Debug)]
struct Pending {
    end: u32,
    wake: Wake,
    /// Its wake-up may wait for [`Producer::wake_deferred`].
    defer: bool,
    written: bool,
}

/// Wake-ups owed for records published.
#[derive(Debug, Default)]
struct Owed {
    one: i32,
    bits: u32,
    /// Bits of records pushed with their wake deferred.
    deferred: u32,
}

impl Owed {
    fn add(&mut self, w: Wake) {
        match w {
            Wake::Nobody => {}
            Wake::One => self.one += 1,
            Wake::Bits(b) => self.bits |= b,
        }
    }

    /// Adds a record's wake-up: one pushed with its wake deferred owes its bits to later
    /// (only bits are ever deferred; a plain wake-up is made now).
    fn add_record(&mut self, w: Wake, defer: bool) {
        match (w, defer) {
            (Wake::Bits(b), true) => self.deferred |= b,
            _ => self.add(w),
        }
    }
}

impl Producer {
    pub fn new(q: Queue) -> Producer {
        Producer {
            q,
            tails: Mutex::new(Tails::default()),
            drained: Condvar::new(),
            deferred: AtomicU32::new(0),
            #[cfg(test)]
            records: AtomicU64::new(0),
        }
    }

    fn tails(&self) -> MutexGuard<'_, Tails> {
        self.tails.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `frame` as one or more records, waiting for room as the consumer reads.
    #[cfg(test)]
    pub fn push(&self, frame: &[u8], peer: &UnixStream) -> Result<(), RingError> {
        self.push_parts(&[frame], Wake::One, peer).map(|_| ())
    }

    /// Writes the frame `parts` make one after the other, as [`Producer::push`] writes one:
    /// each part is copied into the ring from where it lies, and the frame is published
    /// whole before this returns (by this thread, or by the one whose record was reserved
    /// before it, which then also makes its wake-up). `wake` says whom its publication
    /// wakes; returns how many threads the wake-ups this call made woke with bits. The
    /// records of a frame too long for one record each wake as they go (the reader must take
    /// them to make room for the rest).
    pub fn push_parts(
        &self,
        parts: &[&[u8]],
        wake: Wake,
        peer: &UnixStream,
    ) -> Result<usize, RingError> {
        self.push_as(parts, wake, false, 0, peer)
    }

    /// Pushes the frame `head` followed by the `len` bytes at byte `offset` of the request
    /// data area ([`super::area::DataArea::put`] put them there) as one record holding
    /// `head` and where the data lies. The data must stay there until the reader has taken
    /// the record.
    pub fn push_out(
        &self,
        head: &[u8],
        (offset, len): (u32, u32),
        wake: Wake,
        peer: &UnixStream,
    ) -> Result<usize, RingError> {
        let mut place = [0u8; 8];
        place[..4].copy_from_slice(&offset.to_le_bytes());
        place[4..].copy_from_slice(&len.to_le_bytes());
        self.push_as(&[head, &place], wake, false, OUT, peer)
    }

    /// Records written so far: a frame that fits one record counts one, a frame in fragments
    /// one per fragment.
    #[cfg(test)]
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// [`Producer::push_parts`] for the readers parked with one of `bits`, whose wake-up is
    /// left in [`Producer::deferred`]: the caller must call [`Producer::wake_deferred`] later
    /// (before it sleeps, and soon). Wake-ups owed for other threads' frames this call
    /// publishes are made now, as theirs ask.
    pub fn push_deferred(
        &self,
        parts: &[&[u8]],
        bits: u32,
        peer: &UnixStream,
    ) -> Result<(), RingError> {
        self.push_as(parts, Wake::Bits(bits), true, 0, peer)
            .map(|_| ())
    }

    /// Makes every wake-up deferred so far; returns how many threads it woke.
    pub fn wake_deferred(&self) -> usize {
        // Loaded first: most calls find nothing owed and make no write to the shared word.
        if self.deferred.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let bits = self.deferred.swap(0, Ordering::AcqRel);
        if bits == 0 {
            return 0;
        }
        self.q
            .wake_bits(self.q.ctrl.tail, self.q.ctrl.data_waiter, bits)
    }

    /// The bits of the wake-ups deferred and not yet made.
    #[cfg(test)]
    pub fn deferred_bits(&self) -> u32 {
        self.deferred.load(Ordering::Acquire)
    }

    /// Pushes the frame `parts` make; `flag` is [`OUT`] for a record naming its data in the
    /// data area (which must fit one record), else 0.
    fn push_as(
        &self,
        parts: &[&[u8]],
        wake: Wake,
        defer: bool,
        flag: u32,
        peer: &UnixStream,
    ) -> Result<usize, RingError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.q.cap / 2 - 4 {
            if flag != 0 {
                return Err(RingError::Corrupt(format!(
                    "a head of {len} bytes does not fit one record"
                )));
            }
            return self.push_long(parts, len, wake, defer, peer);
        }
        let need = padded(len);
        let start = {
            let mut t = self.tails();
            // Waiting for room while holding the lock is only sound with no record of ours
            // being written: its writer needs the lock to publish it, and the reader cannot
            // make room past it until then.
            while self.free(t.reserved)? < need {
                if t.pending.is_empty() {
                    self.room(t.reserved, need, peer)?;
                    break;
                }
                t = self.wait_drained(t);
            }
            let start = t.reserved;
            t.reserved = start.wrapping_add(need as u32);
            let end = t.reserved;
            t.pending.push_back(Pending {
                end,
                wake,
                defer,
                written: false,
            });
            start
        };
        let written = self.write_record(start, len, flag, &mut parts.iter().copied());
        let end = start.wrapping_add(need as u32);
        let mut owed = Owed::default();
        {
            let mut t = self.tails();
            // Written or not, the record is let go: a failed copy is corrupt anyway, and the
            // records behind it must not wait for it for ever.
            if let Some(p) = t.pending.iter_mut().find(|p| p.end == end) {
                p.written = true;
            }
            let before = t.published;
            while t.pending.front().is_some_and(|p| p.written) {
                if let Some(p) = t.pending.pop_front() {
                    t.published = p.end;
                    owed.add_record(p.wake, p.defer);
                }
            }
            if t.published != before {
                self.q.publish_unwoken(self.q.ctrl.tail, t.published);
            }
            if t.pending.is_empty() && t.drain_waiters > 0 {
                self.drained.notify_all();
            }
        }
        written?;
        Ok(self.pay(owed, defer))
    }

    /// Makes the wake-ups `owed`; returns how many threads the bits woke. Those of records
    /// pushed with their wake deferred are left in [`Producer::deferred`] if this thread
    /// pushed so too (it will make them), made now if not (it may never come back).
    fn pay(&self, mut owed: Owed, defer: bool) -> usize {
        if defer {
            if owed.deferred != 0 {
                self.deferred.fetch_or(owed.deferred, Ordering::AcqRel);
            }
        } else {
            owed.bits |= owed.deferred;
        }
        if owed.one > 0 {
            self.q
                .wake_n(self.q.ctrl.tail, self.q.ctrl.data_waiter, owed.one);
        }
        if owed.bits != 0 {
            return self
                .q
                .wake_bits(self.q.ctrl.tail, self.q.ctrl.data_waiter, owed.bits);
        }
        0
    }

    /// Writes one record at `start`: its header (`more` set if fragments follow) and `n` bytes
    /// taken from `parts` in order.
    fn write_record<'a>(
        &self,
        start: u32,
        n: usize,
        more: u32,
        parts: &mut impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), RingError> {
        #[cfg(test)]
        self.records.fetch_add(1, Ordering::Relaxed);
        self.q.write(start, &(n as u32 | more).to_le_bytes())?;
        let mut at = start.wrapping_add(4);
        let mut want = n;
        while want > 0 {
            let Some(part) = parts.next() else {
                // The parts held fewer bytes than they added up to: cannot happen.
                return Err(RingError::Corrupt("a frame shorter than its parts".into()));
            };
            let k = want.min(part.len());
            self.q.write(at, &part[..k])?;
            at = at.wrapping_add(k as u32);
            want -= k;
        }
        Ok(())
    }

    /// A frame longer than a record: its fragments written and published one after the other
    /// under the lock, once every record reserved before it is published.
    fn push_long(
        &self,
        parts: &[&[u8]],
        len: usize,
        wake: Wake,
        defer: bool,
        peer: &UnixStream,
    ) -> Result<usize, RingError> {
        let max = self.q.cap / 2 - 4;
        let mut t = self.tails();
        while !t.pending.is_empty() {
            t = self.wait_drained(t);
        }
        let mut left = len;
        // Pieces of the parts, each at most a record's worth, in order.
        let mut pieces = parts
            .iter()
            .filter(|p| !p.is_empty())
            .flat_map(|p| p.chunks(max));
        let mut carry: &[u8] = &[];
        loop {
            let n = left.min(max);
            left -= n;
            let need = padded(n);
            self.room(t.reserved, need, peer)?;
            let more = if left == 0 { 0 } else { MORE };
            // The record's bytes: what was left of the last piece, then whole pieces, the
            // last one split where the record ends.
            let mut take = n;
            let mut chunks: Vec<&[u8]> = Vec::new();
            while take > 0 {
                if carry.is_empty() {
                    match pieces.next() {
                        Some(p) => carry = p,
                        None => break,
                    }
                }
                let k = take.min(carry.len());
                chunks.push(&carry[..k]);
                carry = &carry[k..];
                take -= k;
            }
            self.write_record(t.reserved, n, more, &mut chunks.into_iter())?;
            t.reserved = t.reserved.wrapping_add(need as u32);
            t.published = t.reserved;
            if left == 0 {
                self.q.publish_unwoken(self.q.ctrl.tail, t.published);
                drop(t);
                let mut owed = Owed::default();
                owed.add_record(wake, defer);
                return Ok(self.pay(owed, defer));
            }
            let bits = match wake {
                Wake::Bits(b) => Some(b),
                _ => None,
            };
            self.q
                .publish(self.q.ctrl.tail, t.published, self.q.ctrl.data_waiter, bits);
        }
    }

    /// Lets go of the lock until the records reserved are all published (or a spurious
    /// wake-up: the caller looks again).
    fn wait_drained<'a>(&self, mut t: MutexGuard<'a, Tails>) -> MutexGuard<'a, Tails> {
        t.drain_waiters += 1;
        let mut t = self.drained.wait(t).unwrap_or_else(|p| p.into_inner());
        t.drain_waiters -= 1;
        t
    }

    /// The bytes free after `reserved`, by the consumer's position now.
    fn free(&self, reserved: u32) -> Result<usize, RingError> {
        let head = self.q.word(self.q.ctrl.head).load(Ordering::Acquire);
        let used = reserved.wrapping_sub(head) as usize;
        if used > self.q.cap {
            return Err(RingError::Corrupt(format!(
                "consumer position {head} is not within the ring behind {reserved}"
            )));
        }
        Ok(self.q.cap - used)
    }

    /// Waits until `need` bytes after `reserved` are free.
    fn room(&self, reserved: u32, need: usize, peer: &UnixStream) -> Result<(), RingError> {
        loop {
            let head = self.q.word(self.q.ctrl.head).load(Ordering::Acquire);
            let used = reserved.wrapping_sub(head) as usize;
            if used > self.q.cap {
                return Err(RingError::Corrupt(format!(
                    "consumer position {head} is not within the ring behind {reserved}"
                )));
            }
            if self.q.cap - used >= need {
                return Ok(());
            }
            // The reader makes room only once woken for what is in the ring: wake-ups kept
            // for later are made before this thread sleeps.
            self.wake_deferred();
            self.q.wait_change(
                self.q.ctrl.head,
                head,
                self.q.ctrl.space_waiter,
                None,
                true,
                peer,
            )?;
        }
    }

    /// Wakes this ring's readers apart from a push (tests: a frame pushed with
    /// [`Wake::Nobody`]).
    #[cfg(test)]
    pub fn waker(&self) -> Waker {
        Waker { q: self.q.clone() }
    }
}

/// Wakes a ring's readers apart from a push.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct Waker {
    q: Queue,
}

#[cfg(test)]
impl Waker {
    /// Wakes the readers a frame pushed with `bits` is for (`None`: one reader), if any
    /// parked; returns how many it woke when `bits` are given, else 0.
    pub fn wake(&self, bits: Option<u32>) -> usize {
        self.q.wake(self.q.ctrl.tail, self.q.ctrl.data_waiter, bits)
    }
}

/// The reading end of a ring.
#[derive(Debug)]
pub(crate) struct Consumer {
    q: Queue,
    /// Bytes consumed: ours, never read back from the shared word.
    head: u32,
    /// The fragments of a frame read so far.
    partial: Vec<u8>,
    /// In a framed read, the body length the frame being read announced in its first 4 bytes.
    announced: Option<usize>,
    /// The request data area's first byte in the mapping and its length (`None`: records
    /// naming data there are corrupt).
    area: Option<(usize, usize)>,
    /// What was taken so far.
    counts: Taken,
}

/// Shown the first bytes of a frame's body, names the part of it (start, length) that goes
/// straight into the reader's buffer ([`Consumer::try_frame_into`]), if any.
type Pick<'a> = dyn FnMut(&[u8]) -> Option<(usize, usize)> + 'a;

/// A frame's body, and the length of its part that went into the reader's buffer instead.
type Split = (Vec<u8>, Option<usize>);

/// What a consumer took so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub frames: u64,
    pub records: u64,
    /// Frames whose data lay in the data area.
    pub out_of_line: u64,
    /// Of those, the frames whose data was copied out of the area here (the rest were handed
    /// on with their data where it lies).
    pub copied_out: u64,
    /// Frames part of which went straight to the reader's buffer
    /// ([`Consumer::try_frame_into`]).
    pub into_dest: u64,
}

/// A frame's body as taken: the bytes of its records and, when its data lay in the request
/// data area, that data after them, where it lies.
#[derive(Debug)]
pub(crate) struct Frame {
    pub head: Vec<u8>,
    pub tail: Option<Lent>,
}

impl From<Vec<u8>> for Frame {
    fn from(head: Vec<u8>) -> Frame {
        Frame { head, tail: None }
    }
}

impl Frame {
    /// The body's length, the tail's bytes included.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.as_ref().map_or(0, Lent::len)
    }
}

/// What one look at a ring found.
enum Polled {
    /// A whole frame.
    Frame(Frame),
    /// No whole frame yet; the producer's position seen.
    Wait(u32),
}

/// A consumer's way to park until its ring has more, held apart from the consumer so that
/// several threads may park on the ring while another reads it.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    q: Queue,
}

impl Parking {
    /// Waits until the producer's position moves from `seen`. `Gone` once the peer hung up.
    pub fn wait(&self, seen: u32, peer: &UnixStream) -> Result<(), RingError> {
        self.q.wait_change(
            self.q.ctrl.tail,
            seen,
            self.q.ctrl.data_waiter,
            None,
            true,
            peer,
        )
    }

    /// [`Parking::wait`] that only a record pushed for `bits`, a [`Parking::wake_bits`] naming
    /// one of them, or a plain wake ends: the threads of a client that wait for their own
    /// completions each sleep until theirs is there. `spin`: look a while before parking
    /// (worth it only while the record waited for is the next one likely published).
    pub fn wait_bits(
        &self,
        seen: u32,
        bits: u32,
        spin: bool,
        peer: &UnixStream,
    ) -> Result<(), RingError> {
        self.q.wait_change(
            self.q.ctrl.tail,
            seen,
            self.q.ctrl.data_waiter,
            Some(bits),
            spin,
            peer,
        )
    }

    /// Wakes the threads parked in [`Parking::wait_bits`] with one of `bits`, if any is;
    /// returns how many it woke.
    pub fn wake_bits(&self, bits: u32) -> usize {
        self.q
            .wake_bits(self.q.ctrl.tail, self.q.ctrl.data_waiter, bits)
    }

    /// The producer's position as published now: the bytes the other side wrote so far.
    pub fn published(&self) -> u32 {
        self.q.word(self.q.ctrl.tail).load(Ordering::SeqCst)
    }

    /// Wakes every thread parked in [`Parking::wait`] (the session ends, or a removal waits
    /// for posted closes published without a wake-up).
    pub fn wake_all(&self) {
        futex_wake(self.q.word(self.q.ctrl.tail), i32::MAX);
    }
}

impl Consumer {
    pub fn new(q: Queue) -> Consumer {
        Consumer {
            q,
            head: 0,
            partial: Vec::new(),
            announced: None,
            area: None,
            counts: Taken::default(),
        }
    }

    /// Lets records name data in the area of `len` bytes at byte `base` of the mapping;
    /// `None` if it does not lie inside it.
    pub fn with_area(mut self, base: usize, len: usize) -> Option<Consumer> {
        (base.checked_add(len)? <= self.q.map.len()).then_some(())?;
        self.area = Some((base, len));
        Some(self)
    }

    /// What was taken so far.
    pub fn taken(&self) -> Taken {
        self.counts
    }

    /// The next whole record-level frame, waiting for it; a frame longer than `limit` is
    /// corrupt.
    #[cfg(test)]
    pub fn pop(&mut self, limit: usize, peer: &UnixStream) -> Result<Vec<u8>, RingError> {
        self.pop_as(limit, false, peer)
    }

    /// The body of the next frame, which travels as on the socket (a `u32` length, then the
    /// body), waiting for it. The length is checked and left out as the bytes are copied; a
    /// body longer than `limit` is corrupt. Tests only: the client and the server wait
    /// their own ways, after [`Consumer::try_frame`].
    #[cfg(test)]
    pub fn pop_frame(&mut self, limit: usize, peer: &UnixStream) -> Result<Vec<u8>, RingError> {
        self.pop_as(limit, true, peer)
    }

    #[cfg(test)]
    fn pop_as(
        &mut self,
        limit: usize,
        framed: bool,
        peer: &UnixStream,
    ) -> Result<Vec<u8>, RingError> {
        loop {
            match self.poll(limit, framed)? {
                Polled::Frame(f) => return Ok(self.flatten(f)),
                Polled::Wait(tail) => self.q.wait_change(
                    self.q.ctrl.tail,
                    tail,
                    self.q.ctrl.data_waiter,
                    None,
                    true,
                    peer,
                )?,
            }
        }
    }

    /// [`Consumer::pop_frame`] without waiting: `Ok(Err(seen))` when no whole frame is
    /// published yet (fragments already published are taken meanwhile), with the producer's
    /// position seen, for [`Parking::wait`].
    pub fn try_frame(&mut self, limit: usize) -> Result<Result<Vec<u8>, u32>, RingError> {
        Ok(match self.poll(limit, true)? {
            Polled::Frame(f) => Ok(self.flatten(f)),
            Polled::Wait(tail) => Err(tail),
        })
    }

    /// [`Consumer::try_frame`] that may copy part of the next frame straight into `dest`: when
    /// the frame is one record and `pick`, shown its body's first bytes (up to 32), names a
    /// range of the body (start, length) that fits `dest`, that range goes into `dest`, is left
    /// out of the body returned, and its length comes with it. So a reader that knows the frame
    /// copies its data once, not into a buffer of its own first.
    pub fn try_frame_into(
        &mut self,
        limit: usize,
        pick: &mut Pick<'_>,
        dest: &mut [u8],
    ) -> Result<Result<Split, u32>, RingError> {
        if let Some(taken) = self.take_into(limit, pick, dest)? {
            return Ok(Ok(taken));
        }
        Ok(self.try_frame(limit)?.map(|body| (body, None)))
    }

    /// The frame [`Consumer::try_frame_into`] copies part of into `dest`, if the next frame is
    /// one record and `pick` names such a part; `None` leaves everything to [`Consumer::poll`]
    /// (which also finds what is wrong with a record).
    fn take_into(
        &mut self,
        limit: usize,
        pick: &mut Pick<'_>,
        dest: &mut [u8],
    ) -> Result<Option<Split>, RingError> {
        if self.announced.is_some() || !self.partial.is_empty() {
            return Ok(None);
        }
        let tail = self.q.word(self.q.ctrl.tail).load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head) as usize;
        if !(8..=self.q.cap).contains(&avail) {
            return Ok(None);
        }
        let mut h = [0u8; 8];
        self.q.read(self.head, &mut h)?;
        let [h0, h1, h2, h3, l0, l1, l2, l3] = h;
        let header = u32::from_le_bytes([h0, h1, h2, h3]);
        let n = (header & LEN) as usize;
        let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
        let need = padded(n);
        if header & (MORE | OUT) != 0 || need > avail || n < 4 || len != n - 4 || len > limit {
            return Ok(None);
        }
        let body = self.head.wrapping_add(8);
        let mut first = [0u8; 32];
        let shown = &mut first[..len.min(32)];
        self.q.read(body, shown)?;
        let Some((start, moved)) = pick(shown) else {
            return Ok(None);
        };
        if start.checked_add(moved).is_none_or(|end| end > len) || moved > dest.len() {
            return Ok(None);
        }
        let mut rest = super::spare::take(len - moved);
        self.q.read_append(body, start, &mut rest)?;
        self.q
            .read(body.wrapping_add(start as u32), &mut dest[..moved])?;
        let after = start + moved;
        self.q
            .read_append(body.wrapping_add(after as u32), len - after, &mut rest)?;
        self.counts.records += 1;
        self.counts.frames += 1;
        self.counts.into_dest += 1;
        self.head = self.head.wrapping_add(need as u32);
        self.q
            .publish(self.q.ctrl.head, self.head, self.q.ctrl.space_waiter, None);
        Ok(Some((rest, Some(moved))))
    }

    /// [`Consumer::try_frame`] that leaves a frame's data in the request data area, where it
    /// lies, as the frame's [`Frame::tail`].
    pub fn try_lent(&mut self, limit: usize) -> Result<Result<Frame, u32>, RingError> {
        Ok(match self.poll(limit, true)? {
            Polled::Frame(f) => Ok(f),
            Polled::Wait(tail) => Err(tail),
        })
    }

    /// The frame's body in one buffer: its data in the area copied after its head.
    fn flatten(&mut self, f: Frame) -> Vec<u8> {
        let Frame { mut head, tail } = f;
        if let Some(t) = tail {
            t.copy_to(&mut head);
            self.counts.copied_out += 1;
        }
        head
    }

    pub fn parking(&self) -> Parking {
        Parking { q: self.q.clone() }
    }

    /// The bytes consumed so far (every frame before it taken whole or in part).
    pub fn position(&self) -> u32 {
        self.head
    }

    /// A record of `n` bytes at `at` whose data lies in the data area: its head's length, and
    /// where in the mapping its data lies and how long it is, all checked. `inside`: the record
    /// is not a whole frame (fragments came before it, or follow), which such a record must be.
    fn out_of_line(
        &self,
        at: u32,
        n: usize,
        inside: bool,
    ) -> Result<(usize, Option<Lent>), RingError> {
        let Some((base, size)) = self.area else {
            return Err(RingError::Corrupt(
                "a record naming a data area the session has none of".into(),
            ));
        };
        if inside {
            return Err(RingError::Corrupt(
                "a record naming the data area inside a frame in fragments".into(),
            ));
        }
        let Some(head) = n.checked_sub(8) else {
            return Err(RingError::Corrupt(format!(
                "a record of {n} bytes naming the data area"
            )));
        };
        let mut place = [0u8; 8];
        self.q.read(at.wrapping_add(head as u32), &mut place)?;
        let [o0, o1, o2, o3, l0, l1, l2, l3] = place;
        let offset = u32::from_le_bytes([o0, o1, o2, o3]) as usize;
        let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(RingError::Corrupt(format!(
                "{len} bytes at {offset} of a data area of {size}"
            )));
        }
        let lent = Lent::new(self.q.map.clone(), base + offset, len)
            .ok_or_else(|| RingError::Corrupt("data outside the mapping".into()))?;
        Ok((head, Some(lent)))
    }

    /// Takes the records published until a frame is whole.
    fn poll(&mut self, limit: usize, framed: bool) -> Result<Polled, RingError> {
        loop {
            let tail = self.q.word(self.q.ctrl.tail).load(Ordering::Acquire);
            let avail = tail.wrapping_sub(self.head) as usize;
            if avail > self.q.cap {
                return Err(RingError::Corrupt(format!(
                    "producer position {tail} is not within the ring ahead of {}",
                    self.head
                )));
            }
            if avail == 0 {
                return Ok(Polled::Wait(tail));
            }
            if avail < 4 {
                return Err(RingError::Corrupt(format!(
                    "{avail} bytes published: not a record"
                )));
            }
            let mut h = [0u8; 4];
            self.q.read(self.head, &mut h)?;
            let header = u32::from_le_bytes(h);
            let n = (header & LEN) as usize;
            let need = padded(n);
            if need > avail {
                return Err(RingError::Corrupt(format!(
                    "a record of {n} bytes where {avail} are published"
                )));
            }
            let mut at = self.head.wrapping_add(4);
            let (mut n, out) = if header & OUT == 0 {
                (n, None)
            } else {
                let mid_frame = (framed && self.announced.is_some()) || !self.partial.is_empty();
                self.out_of_line(at, n, header & MORE != 0 || mid_frame)?
            };
            if framed && self.announced.is_none() {
                // A frame's first fragment starts with the body's length.
                if n < 4 {
                    return Err(RingError::Corrupt(format!(
                        "a frame's first record of {n} bytes holds no length"
                    )));
                }
                let mut l = [0u8; 4];
                self.q.read(at, &mut l)?;
                let len = u32::from_le_bytes(l) as usize;
                if len > limit {
                    return Err(RingError::Corrupt(format!(
                        "a frame longer than {limit} bytes"
                    )));
                }
                // The whole body at once: assembling fragments then moves nothing. Data in the
                // area stays there.
                let lent = out.as_ref().map_or(0, Lent::len);
                self.partial = super::spare::take(len.saturating_sub(lent));
                self.announced = Some(len);
                at = at.wrapping_add(4);
                n -= 4;
            }
            let more_bytes = out.as_ref().map_or(0, Lent::len);
            if self.partial.len() + n + more_bytes > limit {
                return Err(RingError::Corrupt(format!(
                    "a frame longer than {limit} bytes"
                )));
            }
            self.q.read_append(at, n, &mut self.partial)?;
            if out.is_some() {
                self.counts.out_of_line += 1;
            }
            self.counts.records += 1;
            self.head = self.head.wrapping_add(need as u32);
            self.q
                .publish(self.q.ctrl.head, self.head, self.q.ctrl.space_waiter, None);
            if header & MORE == 0 {
                self.counts.frames += 1;
                let body = Frame {
                    head: std::mem::take(&mut self.partial),
                    tail: out,
                };
                if let Some(len) = self.announced.take() {
                    if len != body.len() {
                        return Err(RingError::Corrupt(
                            "a frame whose length disagrees with its records'".into(),
                        ));
                    }
                }
                return Ok(Polled::Frame(body));
            }
        }
    }
}

impl Producer {
    /// The mapping under the ring (a client giving up its copy; tests writing garbage).
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.q.map
    }
}
