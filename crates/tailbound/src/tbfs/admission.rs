//! Writes by tenant: what each scheduler tenant's writers put through the pool, and where their
//! time went (waiting for `meta`, cleaning inline, waiting for their payloads). Read with
//! [`crate::tbfs::Fs::tenant_writes`]; it tells where the tenants' shares of the device part
//! from their weights.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sched::turns::Next;
use crate::sched::{Charge, Class};

/// Whose writes a count is: a scheduler tenant, or (without one) a priority's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WriterKey {
    /// A scheduler tenant, by number.
    Tenant(u32),
    /// No tenant: the priority the work ran at (the background thread's idle class, say).
    Prio(Class, u8),
}

impl WriterKey {
    /// The key of work charged to `charge`.
    pub fn of(charge: Charge) -> WriterKey {
        match charge.tenant() {
            Some(t) => WriterKey::Tenant(t.0),
            None => WriterKey::Prio(charge.prio().class, charge.prio().level),
        }
    }

    /// The key of the calling thread's work on `dev`, if it is charged to a tenant there (a
    /// scheduler in front of it).
    pub(crate) fn of_current_thread_on(dev: &dyn crate::dev::Device) -> Option<WriterKey> {
        dev.charged()
            .then(|| WriterKey::of(Charge::of_current_thread()))
    }
}

/// One tenant's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantWrites {
    pub key: WriterKey,
    /// Bytes of file data written (buffered or direct).
    pub bytes: u64,
    /// Writes (calls).
    pub writes: u64,
    /// Nanoseconds the write path waited to lock `meta` (sealing a direct write's piece, making
    /// room for a buffered one, committing a full buffer).
    pub meta_wait_ns: u64,
    /// Nanoseconds of cleaning its writers did inline, under `meta`, and the blocks it copied.
    pub clean_ns: u64,
    pub clean_blocks: u64,
    /// The part of `clean_ns` and `clean_blocks` its writers spent cleaning until there was
    /// room (below the floor), rather than paying the cleaning tax in pieces.
    pub room_clean_ns: u64,
    pub room_clean_blocks: u64,
    /// Nanoseconds its direct writes waited for their payloads (the scheduler and the device).
    pub payload_wait_ns: u64,
    /// Nanoseconds its writers waited, under `meta`, for every log sealed so far (other
    /// writers' payloads included) to be written, because space was short.
    pub logs_wait_ns: u64,
}

impl TenantWrites {
    /// Nothing written yet by `key`.
    pub fn new(key: WriterKey) -> TenantWrites {
        TenantWrites {
            key,
            bytes: 0,
            writes: 0,
            meta_wait_ns: 0,
            clean_ns: 0,
            clean_blocks: 0,
            room_clean_ns: 0,
            room_clean_blocks: 0,
            payload_wait_ns: 0,
            logs_wait_ns: 0,
        }
    }
}

/// The counts of every tenant that wrote, in the order they first did.
#[derive(Debug, Default)]
pub(crate) struct WriteCounts {
    tenants: Mutex<Vec<TenantWrites>>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl WriteCounts {
    /// Adds to `key`'s counts; nothing without a key (a pool without a scheduler).
    pub(crate) fn add(&self, key: Option<WriterKey>, f: impl FnOnce(&mut TenantWrites)) {
        let Some(key) = key else { return };
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        // A handful of tenants: a linear search beats hashing.
        let at = match all.iter().position(|t| t.key == key) {
            Some(i) => i,
            None => {
                all.push(TenantWrites::new(key));
                all.len() - 1
            }
        };
        f(&mut all[at]);
    }

    pub(crate) fn wrote(&self, key: Option<WriterKey>, bytes: u64) {
        self.add(key, |t| {
            t.bytes = t.bytes.saturating_add(bytes);
            t.writes += 1;
        });
    }

    pub(crate) fn waited_for_meta(&self, key: Option<WriterKey>, d: Duration) {
        self.add(key, |t| {
            t.meta_wait_ns = t.meta_wait_ns.saturating_add(nanos(d))
        });
    }

    pub(crate) fn cleaned(&self, key: Option<WriterKey>, d: Duration, blocks: u64) {
        self.add(key, |t| {
            t.clean_ns = t.clean_ns.saturating_add(nanos(d));
            t.clean_blocks = t.clean_blocks.saturating_add(blocks);
        });
    }

    /// `key`'s writer cleaned until there was room: counted in `cleaned` too.
    pub(crate) fn cleaned_for_room(&self, key: Option<WriterKey>, d: Duration, blocks: u64) {
        self.add(key, |t| {
            t.clean_ns = t.clean_ns.saturating_add(nanos(d));
            t.clean_blocks = t.clean_blocks.saturating_add(blocks);
            t.room_clean_ns = t.room_clean_ns.saturating_add(nanos(d));
            t.room_clean_blocks = t.room_clean_blocks.saturating_add(blocks);
        });
    }

    pub(crate) fn waited_for_payloads(&self, key: Option<WriterKey>, d: Duration) {
        self.add(key, |t| {
            t.payload_wait_ns = t.payload_wait_ns.saturating_add(nanos(d))
        });
    }

    pub(crate) fn waited_for_logs(&self, key: Option<WriterKey>, d: Duration) {
        self.add(key, |t| {
            t.logs_wait_ns = t.logs_wait_ns.saturating_add(nanos(d))
        });
    }

    pub(crate) fn snapshot(&self) -> Vec<TenantWrites> {
        self.tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Writers waiting for room while the pool is short of it, let through one at a time in the
/// order of their tenants' virtual time ([`crate::sched::turns`]), each charged the blocks it
/// writes, so the room the cleaner frees goes to the tenants by weight rather than to whichever
/// thread takes `meta` first. Cleaning a writer does on its turn is not charged to it: the room
/// it makes is everyone's, shared out by the turns that follow.
///
/// A tenant whose writer is still writing what it had a turn for (its payload in the device),
/// or finished less than the scheduler's anticipation window ago, is expected back: the head
/// waits for it if it would finish first ([`crate::sched::turns::Turns::next`]), as the
/// scheduler holds the device for a tenant between its requests. Without that wait a tenant
/// with one writer is never waiting when the gate frees, and gets equal turns whatever its weight.
#[derive(Debug)]
pub(crate) struct RoomGate {
    state: Mutex<GateState>,
    changed: std::sync::Condvar,
    /// The longest a waiter waits for tenants expected back ([`EXPECTED_WAIT_MAX`]).
    expected_wait_max: Duration,
}

impl Default for RoomGate {
    fn default() -> RoomGate {
        RoomGate {
            state: Mutex::default(),
            changed: std::sync::Condvar::new(),
            expected_wait_max: EXPECTED_WAIT_MAX,
        }
    }
}

#[derive(Debug, Default)]
struct GateState {
    turns: crate::sched::turns::Turns<WriterKey>,
    /// A writer has its turn.
    busy: bool,
    /// Tenants that had turns: writes still going on, and when the last one ended.
    away: Vec<Away>,
}

#[derive(Debug)]
struct Away {
    key: WriterKey,
    writing: usize,
    since: Instant,
}

/// The longest a waiter waits for a tenant still writing: the turns hold no lock a writer
/// needs, but the caller of a write may (one thread serving two tenants' writes in turn), and
/// such a wait must end.
const EXPECTED_WAIT_MAX: Duration = Duration::from_secs(1);

/// A writer's turn at the [`RoomGate`]: the next waiter goes once it is dropped (or
/// [`Turn::done`]); the tenant is expected back until the write it had the turn for is finished
/// (the [`Writing`] that `done` leaves is dropped).
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    gate: &'a RoomGate,
    /// Dropped after the turn is let go (fields drop after `Drop::drop`).
    writing: Option<Writing<'a>>,
}

/// A write that had a turn and is not finished: its tenant is expected back at the gate.
#[derive(Debug)]
pub(crate) struct Writing<'a> {
    gate: &'a RoomGate,
    key: WriterKey,
}

impl RoomGate {
    /// Waits for the turn of a writer of tenant `key` (of `weight`) that needs room for `blocks`.
    /// `think`: how long after a tenant's write ends it is still expected back.
    pub(crate) fn enter(
        &self,
        key: WriterKey,
        weight: u32,
        blocks: u64,
        think: Duration,
    ) -> Turn<'_> {
        let arrived = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = st.turns.arrive(key, weight, blocks as f64);
        // A waiter waiting for this tenant may have to go first after all (this one asks for
        // more than last time): it looks again.
        self.changed.notify_all();
        loop {
            if !st.busy {
                let now = Instant::now();
                let waited_out = now.duration_since(arrived) >= self.expected_wait_max;
                let expected: Vec<WriterKey> = st
                    .away
                    .iter()
                    .filter(|a| {
                        a.key != key
                            && !waited_out
                            && (a.writing > 0 || now.duration_since(a.since) < think)
                    })
                    .map(|a| a.key)
                    .collect();
                match st.turns.next(expected) {
                    Next::Go(t) if t == ticket => break,
                    Next::Wait => {
                        // Woken when a write ends or a writer arrives; else when the soonest
                        // think time runs out, or the longest wait.
                        let until = st
                            .away
                            .iter()
                            .filter(|a| a.key != key && a.writing == 0)
                            .map(|a| a.since + think)
                            .filter(|&t| t > now)
                            .min()
                            .unwrap_or(arrived + self.expected_wait_max)
                            .min(arrived + self.expected_wait_max);
                        let wait = until.saturating_duration_since(now);
                        st = self
                            .changed
                            .wait_timeout(st, wait.max(Duration::from_micros(1)))
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                        continue;
                    }
                    Next::Go(_) | Next::Empty => {}
                }
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.turns.leave(ticket);
        st.busy = true;
        match st.away.iter_mut().find(|a| a.key == key) {
            Some(a) => a.writing += 1,
            None => st.away.push(Away {
                key,
                writing: 1,
                since: Instant::now(),
            }),
        }
        drop(st);
        Turn {
            gate: self,
            writing: Some(Writing { gate: self, key }),
        }
    }

    /// Writers that ever arrived.
    #[cfg(test)]
    pub(crate) fn arrived(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .turns
            .arrived()
    }
}

impl<'a> Turn<'a> {
    /// Ends the turn (the next waiter may go) and keeps the tenant expected back until the
    /// returned [`Writing`] is dropped, once the write it had the turn for is finished.
    pub(crate) fn done(mut self) -> Writing<'a> {
        self.writing
            .take()
            .expect("a turn holds its write until done")
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        st.busy = false;
        drop(st);
        self.gate.changed.notify_all();
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock().unwrap_or_else(|p| p.into_inner());
        // `enter` put the tenant in `away` (which only grows) and counted this write.
        let a = st
            .away
            .iter_mut()
            .find(|a| a.key == self.key)
            .expect("a writing tenant is in the away list");
        a.writing = a
            .writing
            .checked_sub(1)
            .expect("one end for each write a turn began");
        a.since = Instant::now();
        drop(st);
        self.gate.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::{RoomGate, WriterKey};

    const A: WriterKey = WriterKey::Tenant(0);
    const B: WriterKey = WriterKey::Tenant(1);

    /// Waits (without a deadline) until `n` writers have arrived at `gate`.
    fn until_arrived(gate: &RoomGate, n: u64) {
        while gate.arrived() < n {
            std::thread::yield_now();
        }
    }

    /// A thread that waits for a turn of `key` and notes in `order` when it gets it.
    fn writer(
        gate: &Arc<RoomGate>,
        order: &Arc<Mutex<Vec<WriterKey>>>,
        key: WriterKey,
        weight: u32,
        blocks: u64,
    ) -> std::thread::JoinHandle<()> {
        let (gate, order) = (gate.clone(), order.clone());
        std::thread::spawn(move || {
            let turn = gate.enter(key, weight, blocks, Duration::ZERO);
            order.lock().unwrap().push(key);
            drop(turn);
        })
    }

    #[test]
    fn two_tenants_2_to_1_waiting_for_room_are_let_through_2_to_1() {
        let gate = Arc::new(RoomGate::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        // The gate is taken while every writer arrives, one after the other, so the order
        // does not depend on which thread runs first.
        let held = gate.enter(WriterKey::Tenant(9), 1, 1, Duration::ZERO);
        let mut writers = Vec::new();
        for (key, weight, blocks) in [(A, 2, 256); 4].into_iter().chain([(B, 1, 255); 2]) {
            writers.push(writer(&gate, &order, key, weight, blocks));
            until_arrived(&gate, writers.len() as u64 + 1);
        }
        drop(held);
        for w in writers {
            w.join().unwrap();
        }
        // Finish tags: A's 128, 256, 384, 512; B's 255, 510.
        assert_eq!(*order.lock().unwrap(), [A, B, A, A, B, A]);
    }

    #[test]
    fn a_tenant_still_writing_is_waited_for_when_it_would_finish_first() {
        let gate = Arc::new(RoomGate {
            expected_wait_max: Duration::from_secs(3600),
            ..RoomGate::default()
        });
        let order = Arc::new(Mutex::new(Vec::new()));
        // A (weight 2) had two turns and is writing what the second was for.
        drop(gate.enter(A, 2, 256, Duration::ZERO).done());
        let writing = gate.enter(A, 2, 256, Duration::ZERO).done();
        // B would finish at 128 + 257, after A's next (256 + 128): it waits for A while A
        // writes, though the gate is free.
        let b = writer(&gate, &order, B, 1, 257);
        until_arrived(&gate, 3);
        let turn = gate.enter(A, 2, 256, Duration::ZERO);
        order.lock().unwrap().push(A);
        drop(turn);
        // A's next would finish at 512, after B: B goes, though A still writes.
        b.join().unwrap();
        drop(writing);
        assert_eq!(*order.lock().unwrap(), [A, B]);
    }
}
