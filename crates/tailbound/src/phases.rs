//! Where one thread's call spends its time: a per-thread clock split into [`Phase`]s, each
//! counted without the phases nested in it. tbfs and `sched` mark their waits and their I/O
//! with [`enter`]; a caller that wants one call's breakdown (the priority bench's writer) calls
//! [`take`] before and after it. Nothing is shared between threads, so marking a phase costs two
//! clock reads and no lock.

use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What a thread is doing. Time in no marked phase is [`Phase::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not in a marked phase (copying into buffers, bookkeeping).
    Other = 0,
    /// Waiting for the `meta` lock.
    MetaWait,
    /// A writer's turn for room while room is short (`Engine::room_turn`).
    Turn,
    /// Finding room for a write (the space check, the cleaning it runs).
    Room,
    /// Laying out a checkpoint under `meta`.
    Checkpoint,
    /// Sealing buffered data as data-only logs under `meta`.
    Seal,
    /// Waiting for the log writer's lock.
    LogWriterWait,
    /// Holding the log writer: writing queued summaries and whole logs.
    LogWriter,
    /// Writing an ahead payload (this thread's own, or one it took over).
    Payload,
    /// Waiting for another thread's payload (an earlier log, a checkpoint's).
    PayloadWait,
    /// A write or read of the device through the scheduler: queued, then served.
    DeviceIo,
    /// A device flush through the scheduler.
    DeviceFlush,
    /// Handing off or running a superblock refresh.
    Refresh,
    /// Releasing the buffers of logs found written (`Engine::advance_written`), whoever's.
    Release,
    /// Waiting for an inode's lock to release its buffers.
    InodeWait,
}

/// The phases, in order, for reports.
pub const PHASES: [Phase; 15] = [
    Phase::Other,
    Phase::MetaWait,
    Phase::Turn,
    Phase::Room,
    Phase::Checkpoint,
    Phase::Seal,
    Phase::LogWriterWait,
    Phase::LogWriter,
    Phase::Payload,
    Phase::PayloadWait,
    Phase::DeviceIo,
    Phase::DeviceFlush,
    Phase::Refresh,
    Phase::Release,
    Phase::InodeWait,
];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Other => "other",
            Phase::MetaWait => "meta_wait",
            Phase::Turn => "turn",
            Phase::Room => "room",
            Phase::Checkpoint => "checkpoint",
            Phase::Seal => "seal",
            Phase::LogWriterWait => "log_writer_wait",
            Phase::LogWriter => "log_writer",
            Phase::Payload => "payload",
            Phase::PayloadWait => "payload_wait",
            Phase::DeviceIo => "device_io",
            Phase::DeviceFlush => "device_flush",
            Phase::Refresh => "refresh",
            Phase::Release => "release",
            Phase::InodeWait => "inode_wait",
        }
    }
}

/// What a thread holding `meta` is doing when it waits for the device, as the engine marks it
/// ([`meta_work`]). Each such wait counts under the outermost work marked when it began (what
/// the hold is for) and, apart, under the innermost (the step that waited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaWork {
    /// Nothing marked.
    Other = 0,
    /// A space check's wait for every log in flight, room being short.
    SpaceWait,
    /// A piece of the cleaning tax a writer pays.
    TaxPiece,
    /// Cleaning until there is room, below the floor (or for a commit the tax does not cover).
    CleanForRoom,
    /// A checkpoint, laid out and committed.
    Checkpoint,
    /// A superblock written now, with everything queued before it.
    Superblock,
    /// Room made for a namespace change (`Engine::make_room_for_change`).
    RoomForChange,
    /// Buffered data sealed as data-only logs.
    Seal,
}

/// The kinds of [`MetaWork`], in order, for reports.
pub const META_WORKS: [MetaWork; 8] = [
    MetaWork::Other,
    MetaWork::SpaceWait,
    MetaWork::TaxPiece,
    MetaWork::CleanForRoom,
    MetaWork::Checkpoint,
    MetaWork::Superblock,
    MetaWork::RoomForChange,
    MetaWork::Seal,
];

impl MetaWork {
    pub fn name(self) -> &'static str {
        match self {
            MetaWork::Other => "other",
            MetaWork::SpaceWait => "space_wait",
            MetaWork::TaxPiece => "tax_piece",
            MetaWork::CleanForRoom => "clean_for_room",
            MetaWork::Checkpoint => "checkpoint",
            MetaWork::Superblock => "superblock",
            MetaWork::RoomForChange => "room_for_change",
            MetaWork::Seal => "seal",
        }
    }
}

/// Waits counted and their summed nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitCount {
    pub waits: u64,
    pub ns: u64,
}

impl WaitCount {
    fn add(&mut self, other: WaitCount) {
        self.waits = self.waits.saturating_add(other.waits);
        self.ns = self.ns.saturating_add(other.ns);
    }

    fn since(&self, earlier: &WaitCount) -> WaitCount {
        WaitCount {
            waits: self.waits.saturating_sub(earlier.waits),
            ns: self.ns.saturating_sub(earlier.ns),
        }
    }
}

/// Waits by [`MetaWork`], indexed by `MetaWork as usize`.
pub type ByMetaWork = [WaitCount; META_WORKS.len()];

/// Adds `other` to `into`, kind by kind.
pub fn add_by_work(into: &mut ByMetaWork, other: &ByMetaWork) {
    for (a, b) in into.iter_mut().zip(other) {
        a.add(*b);
    }
}

/// What `later` counts beyond `earlier`, kind by kind.
pub fn by_work_since(later: &ByMetaWork, earlier: &ByMetaWork) -> ByMetaWork {
    let mut d = ByMetaWork::default();
    for (k, w) in d.iter_mut().enumerate() {
        *w = later[k].since(&earlier[k]);
    }
    d
}

/// One thread's time by phase since the last [`take`], in nanoseconds, and its counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Indexed by `Phase as usize`.
    pub ns: [u64; PHASES.len()],
    /// Checkpoints this thread laid out.
    pub checkpoints: u32,
    /// Device requests (writes, reads, flushes) this thread waited for.
    pub requests: u32,
    /// Times a request this thread waited for was moved to a higher priority lent to it.
    pub boosts: u32,
    /// Of [`Phase::DeviceIo`] and [`Phase::DeviceFlush`], the time the device took for the
    /// dispatches carrying this thread's requests; the rest was spent queued in the scheduler.
    pub served_ns: u64,
    /// Space checks of this thread that found room short and waited for every log in flight,
    /// and those (a real-time thread's above the floor) that went on without that wait.
    pub space_waits: u32,
    pub space_waits_left: u32,
    /// Waits for the device (an I/O or flush, a payload, the log writer) this thread made while
    /// it held `meta`, each counted once however deeply its phases nest, and their summed
    /// time: every other thread needing `meta` waited for the device with it.
    pub meta_device_waits: u32,
    pub meta_device_wait_ns: u64,
    /// The same waits by the outermost [`MetaWork`] marked when each began, and by the
    /// innermost.
    pub meta_device_outer: ByMetaWork,
    pub meta_device_inner: ByMetaWork,
}

impl PhaseTimes {
    pub fn get(&self, phase: Phase) -> u64 {
        self.ns[phase as usize]
    }

    /// What happened between `earlier` (a [`peek`] of the same thread) and `self`.
    pub fn since(&self, earlier: &PhaseTimes) -> PhaseTimes {
        let mut d = PhaseTimes {
            checkpoints: self.checkpoints.saturating_sub(earlier.checkpoints),
            requests: self.requests.saturating_sub(earlier.requests),
            boosts: self.boosts.saturating_sub(earlier.boosts),
            served_ns: self.served_ns.saturating_sub(earlier.served_ns),
            space_waits: self.space_waits.saturating_sub(earlier.space_waits),
            space_waits_left: self
                .space_waits_left
                .saturating_sub(earlier.space_waits_left),
            meta_device_waits: self
                .meta_device_waits
                .saturating_sub(earlier.meta_device_waits),
            meta_device_wait_ns: self
                .meta_device_wait_ns
                .saturating_sub(earlier.meta_device_wait_ns),
            meta_device_outer: by_work_since(&self.meta_device_outer, &earlier.meta_device_outer),
            meta_device_inner: by_work_since(&self.meta_device_inner, &earlier.meta_device_inner),
            ..PhaseTimes::default()
        };
        for (k, ns) in d.ns.iter_mut().enumerate() {
            // A `take` in between restarts the clock; the hold's time is then only partly
            // known, never negative.
            *ns = self.ns[k].saturating_sub(earlier.ns[k]);
        }
        d
    }

    pub fn total(&self) -> u64 {
        self.ns.iter().sum()
    }
}

struct Clock {
    current: Phase,
    since: Instant,
    times: PhaseTimes,
    /// The thread holds `meta` ([`set_meta_held`]).
    meta_held: bool,
    /// How many device-wait phases ([`Phase::waits_for_device`]) are entered and not left.
    device_depth: u32,
    /// When the outermost device wait begun while `meta` was held started, and the work
    /// (outermost, innermost) marked then.
    meta_device_since: Option<(Instant, (MetaWork, MetaWork))>,
    /// The work marked now ([`meta_work`]): outermost, innermost.
    work: (MetaWork, MetaWork),
}

impl Phase {
    /// Whether the thread waits for the device in this phase: its own I/O or a flush, a
    /// payload it writes or waits for, the log writer it holds or waits for.
    pub fn waits_for_device(self) -> bool {
        matches!(
            self,
            Phase::LogWriterWait
                | Phase::LogWriter
                | Phase::Payload
                | Phase::PayloadWait
                | Phase::DeviceIo
                | Phase::DeviceFlush
        )
    }
}

impl Clock {
    /// Counts the time since the last switch to the phase running, and switches to `next`.
    fn switch(&mut self, next: Phase) -> Phase {
        let now = Instant::now();
        let ns = u64::try_from(now.duration_since(self.since).as_nanos()).unwrap_or(u64::MAX);
        let slot = &mut self.times.ns[self.current as usize];
        *slot = slot.saturating_add(ns);
        self.since = now;
        std::mem::replace(&mut self.current, next)
    }

    /// A device wait started (`true`) or ended; only the outermost counts.
    fn device_wait(&mut self, start: bool) {
        if start {
            self.device_depth += 1;
            if self.device_depth == 1 && self.meta_held {
                self.meta_device_since = Some((Instant::now(), self.work));
                self.times.meta_device_waits = self.times.meta_device_waits.saturating_add(1);
            }
        } else {
            self.device_depth = self.device_depth.saturating_sub(1);
            if self.device_depth == 0 {
                self.end_meta_device_wait();
            }
        }
    }

    fn end_meta_device_wait(&mut self) {
        if let Some((since, (outer, inner))) = self.meta_device_since.take() {
            let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.times.meta_device_wait_ns = self.times.meta_device_wait_ns.saturating_add(ns);
            let one = WaitCount { waits: 1, ns };
            self.times.meta_device_outer[outer as usize].add(one);
            self.times.meta_device_inner[inner as usize].add(one);
        }
    }
}

thread_local! {
    static CLOCK: RefCell<Clock> = RefCell::new(Clock {
        current: Phase::Other,
        since: Instant::now(),
        times: PhaseTimes::default(),
        meta_held: false,
        device_depth: 0,
        meta_device_since: None,
        work: (MetaWork::Other, MetaWork::Other),
    });
}

/// Marks the calling thread as doing `work` until the guard drops (what it marked before
/// resumes then): a wait for the device it makes meanwhile while holding `meta` counts under
/// it ([`PhaseTimes::meta_device_inner`]), and under it as the outermost work if nothing was
/// marked before ([`PhaseTimes::meta_device_outer`]).
#[must_use = "the work ends when the guard drops"]
pub struct InMetaWork {
    previous: (MetaWork, MetaWork),
}

pub fn meta_work(work: MetaWork) -> InMetaWork {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        let previous = c.work;
        let outer = if previous.0 == MetaWork::Other {
            work
        } else {
            previous.0
        };
        c.work = (outer, work);
        InMetaWork { previous }
    })
}

impl Drop for InMetaWork {
    fn drop(&mut self) {
        CLOCK.with(|c| c.borrow_mut().work = self.previous);
    }
}

/// Marks the calling thread as in `phase` until the guard drops; the phase it was in before
/// resumes then.
#[must_use = "the phase ends when the guard drops"]
pub struct InPhase {
    previous: Phase,
    device: bool,
}

pub fn enter(phase: Phase) -> InPhase {
    let device = phase.waits_for_device();
    let previous = CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        if device {
            c.device_wait(true);
        }
        c.switch(phase)
    });
    InPhase { previous, device }
}

impl Drop for InPhase {
    fn drop(&mut self) {
        CLOCK.with(|c| {
            let mut c = c.borrow_mut();
            c.switch(self.previous);
            if self.device {
                c.device_wait(false);
            }
        });
    }
}

/// Notes that the calling thread took (`true`) or let go of `meta`: a device wait it makes
/// meanwhile counts in [`PhaseTimes::meta_device_waits`]. A wait running when `meta` is let
/// go ends its count there.
pub fn set_meta_held(held: bool) {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        c.meta_held = held;
        if !held {
            c.end_meta_device_wait();
        }
    });
}

/// Counts an event of the calling thread's (a checkpoint laid out, a request, a boost).
pub fn count(f: impl FnOnce(&mut PhaseTimes)) {
    CLOCK.with(|c| f(&mut c.borrow_mut().times));
}

/// The calling thread's times since the last [`take`], left running.
pub fn peek() -> PhaseTimes {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        let current = c.current;
        c.switch(current);
        c.times
    })
}

/// A lock of tbfs's whose longest holds are noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// The `meta` lock (the namespace and the commit path).
    Meta = 0,
    /// The log writer (summaries written in sequence).
    LogWriter = 1,
}

/// One of the longest holds of a lock: how long, where it was taken, who held it, and the
/// holder's phases meanwhile.
#[derive(Debug, Clone)]
pub struct Hold {
    pub held_ns: u64,
    pub taken_at: &'static Location<'static>,
    /// The holding thread's name and I/O priority.
    pub holder: String,
    pub phases: PhaseTimes,
}

/// How many of the longest holds are kept, per lock.
pub const HOLDS_KEPT: usize = 5;

/// The longest holds of each lock since the last [`take_longest_holds`], process-wide,
/// longest first; and the shortest of them once there are [`HOLDS_KEPT`], so a shorter hold
/// costs one atomic load.
static HOLDS: [Mutex<Vec<Hold>>; 2] = [Mutex::new(Vec::new()), Mutex::new(Vec::new())];
static HOLD_FLOOR: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// A hold of `lock` ended after `held_ns`; `at_start` is the holder's [`peek`] when it took the
/// lock at `taken_at`; `holder` names it, asked only for a hold that is kept.
pub fn note_hold(
    lock: Lock,
    held_ns: u64,
    at_start: &PhaseTimes,
    taken_at: &'static Location<'static>,
    holder: impl FnOnce() -> String,
) {
    let k = lock as usize;
    if held_ns <= HOLD_FLOOR[k].load(Ordering::Relaxed) {
        return;
    }
    let hold = Hold {
        held_ns,
        taken_at,
        holder: holder(),
        phases: peek().since(at_start),
    };
    let mut holds = HOLDS[k].lock().unwrap_or_else(|p| p.into_inner());
    holds.push(hold);
    holds.sort_by_key(|h| std::cmp::Reverse(h.held_ns));
    holds.truncate(HOLDS_KEPT);
    if holds.len() == HOLDS_KEPT {
        HOLD_FLOOR[k].store(holds[HOLDS_KEPT - 1].held_ns, Ordering::Relaxed);
    }
}

/// The longest holds of `lock` since the last call, longest first; the next call starts anew.
pub fn take_longest_holds(lock: Lock) -> Vec<Hold> {
    let k = lock as usize;
    let mut holds = HOLDS[k].lock().unwrap_or_else(|p| p.into_inner());
    HOLD_FLOOR[k].store(0, Ordering::Relaxed);
    std::mem::take(&mut *holds)
}

/// The calling thread's times since the last call, which start again from zero.
pub fn take() -> PhaseTimes {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        let current = c.current;
        c.switch(current);
        std::mem::take(&mut c.times)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_phases_count_apart_and_take_starts_again() {
        let _ = take();
        {
            let _outer = enter(Phase::MetaWait);
            std::thread::sleep(std::time::Duration::from_millis(2));
            {
                let _inner = enter(Phase::DeviceFlush);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            count(|t| t.requests += 1);
        }
        let t = take();
        // Each phase's time excludes the other's: both hold at least their own sleep, and the
        // outer one does not also count the inner one's.
        assert!(t.get(Phase::MetaWait) >= 2_000_000);
        assert!(t.get(Phase::DeviceFlush) >= 2_000_000);
        assert_eq!(t.total(), t.ns.iter().sum::<u64>());
        assert_eq!(t.requests, 1);
        let again = take();
        assert_eq!(again.requests, 0);
        assert!(again.get(Phase::DeviceFlush) == 0 && again.get(Phase::MetaWait) == 0);
    }

    #[test]
    fn device_waits_count_once_each_and_only_with_meta_held() {
        let _ = take();
        {
            // Not holding `meta`: not counted.
            let _io = enter(Phase::DeviceIo);
        }
        set_meta_held(true);
        {
            // A payload waited for, with the device I/O nested in it: one wait.
            let _wait = enter(Phase::PayloadWait);
            let _io = enter(Phase::DeviceIo);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        {
            // Not a device wait.
            let _seal = enter(Phase::Seal);
        }
        {
            let _flush = enter(Phase::DeviceFlush);
        }
        set_meta_held(false);
        {
            let _io = enter(Phase::DeviceIo);
        }
        let t = take();
        assert_eq!(t.meta_device_waits, 2);
        assert!(t.meta_device_wait_ns >= 1_000_000);
        // Unmarked, both count as other work.
        assert_eq!(t.meta_device_outer[MetaWork::Other as usize].waits, 2);
        assert_eq!(t.meta_device_inner[MetaWork::Other as usize].waits, 2);
    }

    #[test]
    fn device_waits_under_meta_count_by_outermost_and_innermost_work() {
        let _ = take();
        set_meta_held(true);
        {
            let _tax = meta_work(MetaWork::TaxPiece);
            {
                let _io = enter(Phase::DeviceIo);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            {
                let _sb = meta_work(MetaWork::Superblock);
                let _flush = enter(Phase::DeviceFlush);
            }
            // The superblock's mark ended with its guard.
            let _io = enter(Phase::DeviceIo);
        }
        {
            let _io = enter(Phase::PayloadWait);
        }
        set_meta_held(false);
        let t = take();
        let (outer, inner) = (t.meta_device_outer, t.meta_device_inner);
        assert_eq!(t.meta_device_waits, 4);
        assert_eq!(outer[MetaWork::TaxPiece as usize].waits, 3);
        assert!(outer[MetaWork::TaxPiece as usize].ns >= 1_000_000);
        assert_eq!(outer[MetaWork::Other as usize].waits, 1);
        assert_eq!(inner[MetaWork::TaxPiece as usize].waits, 2);
        assert_eq!(inner[MetaWork::Superblock as usize].waits, 1);
        assert_eq!(outer[MetaWork::Superblock as usize].waits, 0);
        let ns: u64 = outer.iter().map(|w| w.ns).sum();
        assert_eq!(ns, t.meta_device_wait_ns);
    }
}
