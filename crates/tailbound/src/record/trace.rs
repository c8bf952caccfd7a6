//! Tracing slow writes: for every recording call over a bound, what the recording thread went
//! through (page faults, context switches, the CPUs it ran on) and what the background flush
//! thread was doing at that moment.
//!
//! The flush thread publishes its activity in one atomic word ([`ActivityWord`]); the recording
//! thread reads it before and after each call. The trace keeps its events in a buffer allocated when
//! the recording is created, so tracing adds a `getrusage` and a CPU-clock read per write (more for
//! a slow one) and never allocates on the recording path.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::sys::proc::{current_cpu, thread_usage, ThreadUsage};
use crate::sys::time::{monotonic_now, thread_cpu_ns, MonoNanos};

/// Slow writes a trace keeps; later ones are counted in [`SlowTrace::not_kept`].
pub const TRACE_EVENTS_MAX: usize = 4096;

macro_rules! activities {
    ($($(#[$meta:meta])* $variant:ident = $code:literal, $name:literal;)+) => {
        /// What the background flush thread is doing.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
        #[serde(rename_all = "kebab-case")]
        #[repr(u8)]
        pub enum FlusherActivity {
            $($(#[$meta])* $variant = $code),+
        }

        impl FlusherActivity {
            fn from_code(code: u8) -> FlusherActivity {
                match code {
                    $($code => FlusherActivity::$variant,)+
                    _ => FlusherActivity::Idle,
                }
            }

            /// What the activity is, in a few words naming the system call.
            pub fn name(self) -> &'static str {
                match self {
                    $(FlusherActivity::$variant => $name),+
                }
            }
        }
    };
}

activities! {
    /// Waiting for work.
    Idle = 0, "idle";
    /// `MADV_POPULATE_WRITE` of the windows ahead of the writer.
    MappingAhead = 1, "mapping windows ahead (MADV_POPULATE_WRITE)";
    /// `mlock` of the windows ahead.
    LockingAhead = 2, "locking windows ahead (mlock)";
    /// `posix_fadvise(WILLNEED)` of the windows ahead.
    Prefetching = 3, "reading ahead (fadvise WILLNEED)";
    /// `sync_file_range(WRITE)`: starting a window's writeback.
    StartingWriteback = 4, "starting writeback (sync_file_range WRITE)";
    /// `sync_file_range(WAIT_AFTER)`: waiting for the previous window's writeback.
    WaitingWriteback = 5, "waiting for writeback (sync_file_range WAIT_AFTER)";
    /// `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`.
    SyncFileRange = 6, "writing and waiting (sync_file_range)";
    /// `fdatasync`.
    Fdatasync = 7, "fdatasync";
    /// `munlock` and `MADV_DONTNEED` of a flushed window.
    Unmapping = 8, "unmapping a flushed window (munlock, MADV_DONTNEED)";
    /// `posix_fadvise(DONTNEED)` of a flushed window.
    DroppingCache = 9, "dropping a flushed window (fadvise DONTNEED)";
    /// `fallocate` ahead of the writer.
    Allocating = 10, "allocating ahead (fallocate)";
}

/// The flush thread's activity and how many times it changed, in one word: the low byte is the
/// activity, the rest counts changes. Only the flush thread stores; anyone may read.
#[derive(Debug, Default)]
pub struct ActivityWord(AtomicU64);

impl ActivityWord {
    /// Publishes that the flush thread now does `activity`. Called by one thread only.
    pub fn set(&self, activity: FlusherActivity) {
        let changes = (self.0.load(Ordering::Relaxed) >> 8).wrapping_add(1);
        self.0
            .store((changes << 8) | activity as u64, Ordering::Release);
    }

    /// The activity now and the number of changes so far.
    pub fn read(&self) -> (FlusherActivity, u64) {
        let w = self.0.load(Ordering::Acquire);
        (FlusherActivity::from_code(w as u8), w >> 8)
    }
}

/// Which thread's calls a trace holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TracedCalls {
    /// The application's `Recorder::write` calls (in decoupled mode: copies into the ring).
    Recorder,
    /// The decoupled writer thread's writes into the file.
    Writer,
}

/// One call over the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SlowWrite {
    /// The call's index, from 0.
    pub index: u64,
    /// Where its record went in the file; `None` for a decoupled producer's copy into the ring.
    pub offset: Option<u64>,
    pub latency_ns: u64,
    /// What the flush thread was doing when the call began and when it ended, and how many times
    /// its activity changed in between.
    pub flusher_at_start: FlusherActivity,
    pub flusher_at_end: FlusherActivity,
    pub flusher_changes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// CPU time the thread ran during the call: far below `latency_ns` with no context switch
    /// means the time was taken from it (the hypervisor, interrupts).
    pub cpu_time_ns: u64,
    /// The CPU at the start and at the end of the call (`None` where the kernel cannot say).
    pub cpu_at_start: Option<u32>,
    pub cpu_at_end: Option<u32>,
}

impl SlowWrite {
    /// The call's most likely cause, from what it went through (most telling first).
    pub fn cause(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.major_faults > 0 {
            parts.push(format!(
                "{} major page fault(s) (waited for a read)",
                self.major_faults
            ));
        }
        if self.voluntary_switches > 0 {
            parts.push(format!(
                "blocked {} time(s) in the kernel (a lock or I/O)",
                self.voluntary_switches
            ));
        }
        if self.minor_faults > 0 {
            parts.push(format!("{} minor page fault(s)", self.minor_faults));
        }
        if self.involuntary_switches > 0 {
            parts.push(format!(
                "preempted {} time(s) (another thread had the CPU)",
                self.involuntary_switches
            ));
        }
        if let (Some(a), Some(b)) = (self.cpu_at_start, self.cpu_at_end) {
            if a != b {
                parts.push(format!("moved from CPU {a} to CPU {b}"));
            }
        }
        let switched = self.voluntary_switches + self.involuntary_switches > 0;
        if !switched && self.cpu_time_ns.saturating_mul(2) < self.latency_ns {
            parts.push(format!(
                "ran only {:.0} of {:.0} us without a context switch: the time was taken from the \
                 thread (the hypervisor, interrupts)",
                self.cpu_time_ns as f64 / 1000.0,
                self.latency_ns as f64 / 1000.0
            ));
        }
        if parts.is_empty() {
            parts.push(format!(
                "no fault and no context switch: ran {:.0} us on the CPU as the kernel counts it \
                 (in the call; in interrupts and softirqs served on this CPU, such as disk \
                 completions; spinning for a lock; or a hypervisor that took the CPU unseen)",
                self.cpu_time_ns as f64 / 1000.0
            ));
        }
        let flusher = if self.flusher_changes == 0 {
            format!("flusher {}", self.flusher_at_start.name())
        } else {
            format!(
                "flusher {} -> {} ({} change(s))",
                self.flusher_at_start.name(),
                self.flusher_at_end.name(),
                self.flusher_changes
            )
        };
        format!("{}; {flusher}", parts.join(", "))
    }
}

impl fmt::Display for SlowWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = |c: Option<u32>| c.map_or("?".to_string(), |c| c.to_string());
        write!(
            f,
            "#{} {:.1} us (on CPU {:.1} us) offset {} cpu {}->{} minflt {} majflt {} vcsw {} \
             ivcsw {}: {}",
            self.index,
            self.latency_ns as f64 / 1000.0,
            self.cpu_time_ns as f64 / 1000.0,
            self.offset.map_or("-".to_string(), |o| o.to_string()),
            cpu(self.cpu_at_start),
            cpu(self.cpu_at_end),
            self.minor_faults,
            self.major_faults,
            self.voluntary_switches,
            self.involuntary_switches,
            self.cause()
        )
    }
}

/// The slow calls of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct SlowTrace {
    pub calls: TracedCalls,
    pub bound_ns: u64,
    /// Calls traced.
    pub traced: u64,
    /// The slow calls, oldest first; at most [`TRACE_EVENTS_MAX`].
    pub events: Vec<SlowWrite>,
    /// Slow calls not kept because the buffer was full.
    pub not_kept: u64,
}

impl SlowTrace {
    /// A trace of calls slower than `bound_ns`, with room for every event allocated now.
    pub fn new(calls: TracedCalls, bound_ns: u64) -> SlowTrace {
        SlowTrace {
            calls,
            bound_ns,
            traced: 0,
            events: Vec::with_capacity(TRACE_EVENTS_MAX),
            not_kept: 0,
        }
    }

    /// Samples the calling thread just before a call. The call's clock starts first, so a delay
    /// while sampling counts (and is explained) too.
    pub fn begin(&self, flusher: Option<&ActivityWord>) -> CallStart {
        let at = monotonic_now();
        let (activity, changes) = flusher.map_or((FlusherActivity::Idle, 0), ActivityWord::read);
        let usage = thread_usage().unwrap_or_default();
        CallStart {
            usage,
            cpu: current_cpu(),
            cpu_ns: thread_cpu_ns(),
            activity,
            changes,
            at,
        }
    }

    /// Samples again just after the call and keeps it if it was slow. Never allocates.
    pub fn end(
        &mut self,
        start: CallStart,
        index: u64,
        offset: Option<u64>,
        flusher: Option<&ActivityWord>,
    ) {
        self.traced += 1;
        if monotonic_now().since(start.at).as_nanos() as u64 <= self.bound_ns {
            return;
        }
        let (activity, changes) = flusher.map_or((FlusherActivity::Idle, 0), ActivityWord::read);
        let cpu = current_cpu();
        let cpu_ns = thread_cpu_ns();
        let usage = thread_usage().unwrap_or(start.usage);
        let latency_ns = monotonic_now().since(start.at).as_nanos() as u64;
        if self.events.len() == self.events.capacity() {
            self.not_kept += 1;
            return;
        }
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.events.push(SlowWrite {
            index,
            offset,
            latency_ns,
            flusher_at_start: start.activity,
            flusher_at_end: activity,
            flusher_changes: changes.wrapping_sub(start.changes),
            minor_faults: d(usage.minor_faults, start.usage.minor_faults),
            major_faults: d(usage.major_faults, start.usage.major_faults),
            voluntary_switches: d(usage.voluntary_switches, start.usage.voluntary_switches),
            involuntary_switches: d(usage.involuntary_switches, start.usage.involuntary_switches),
            cpu_time_ns: d(cpu_ns, start.cpu_ns),
            cpu_at_start: start.cpu,
            cpu_at_end: cpu,
        });
    }

    /// The kept event of call `index`, if that call was slow.
    pub fn find(&self, index: u64) -> Option<&SlowWrite> {
        self.events.iter().find(|e| e.index == index)
    }

    /// The slowest kept event.
    pub fn worst(&self) -> Option<&SlowWrite> {
        self.events.iter().max_by_key(|e| e.latency_ns)
    }
}

/// What [`SlowTrace::begin`] sampled.
#[derive(Debug, Clone, Copy)]
pub struct CallStart {
    usage: ThreadUsage,
    cpu: Option<u32>,
    cpu_ns: u64,
    activity: FlusherActivity,
    changes: u64,
    at: MonoNanos,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_activity_word_keeps_the_activity_and_counts_changes() {
        let w = ActivityWord::default();
        assert_eq!(w.read(), (FlusherActivity::Idle, 0));
        w.set(FlusherActivity::WaitingWriteback);
        w.set(FlusherActivity::Unmapping);
        assert_eq!(w.read(), (FlusherActivity::Unmapping, 2));
        for code in 0..=u8::MAX {
            // Unknown codes read as idle rather than failing.
            let _ = FlusherActivity::from_code(code).name();
        }
    }

    #[test]
    fn only_calls_over_the_bound_are_kept_and_the_buffer_never_grows() {
        // A bound of an hour: the call below is under it however long the machine stalls it.
        let mut trace = SlowTrace::new(TracedCalls::Recorder, 3_600_000_000_000);
        let word = ActivityWord::default();
        let fast = trace.begin(Some(&word));
        trace.end(fast, 0, Some(0), Some(&word));
        assert_eq!((trace.traced, trace.events.len()), (1, 0));

        let mut trace = SlowTrace::new(TracedCalls::Writer, 0);
        let capacity = trace.events.capacity();
        let start = trace.begin(Some(&word));
        word.set(FlusherActivity::Fdatasync);
        // A call that touches fresh memory and sleeps: page faults and a voluntary switch.
        let mut fresh = vec![0u8; 64 << 20];
        for page in fresh.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&mut fresh);
        std::thread::sleep(std::time::Duration::from_millis(2));
        trace.end(start, 7, Some(4096), Some(&word));
        let e = trace.events[0];
        assert_eq!((e.index, e.offset), (7, Some(4096)));
        assert!(e.latency_ns >= 2_000_000, "{e}");
        assert_eq!(e.flusher_at_start, FlusherActivity::Idle);
        assert_eq!(e.flusher_at_end, FlusherActivity::Fdatasync);
        assert_eq!(e.flusher_changes, 1);
        assert!(e.minor_faults > 0, "{e}");
        assert!(e.voluntary_switches > 0, "{e}");
        assert!(e.cause().contains("blocked"), "{}", e.cause());
        assert!(e.cpu_time_ns < e.latency_ns, "{e}");
        assert!(e.cause().contains("fdatasync"), "{}", e.cause());
        for i in 0..capacity as u64 + 5 {
            let s = trace.begin(None);
            trace.end(s, i, None, None);
        }
        assert_eq!(trace.events.len(), capacity);
        assert_eq!(trace.events.capacity(), capacity, "no reallocation");
        assert_eq!(trace.not_kept, 6);
        // The slowest kept call, whichever it is: a stall of the machine may make any of them so.
        let slowest = trace.events.iter().map(|e| e.latency_ns).max();
        assert_eq!(trace.worst().map(|w| w.latency_ns), slowest);
        assert_eq!(trace.find(7).map(|w| w.offset), Some(Some(4096)));
    }

    #[test]
    fn a_call_without_faults_or_switches_is_told_apart_by_its_cpu_time() {
        let quiet = SlowWrite {
            index: 3,
            offset: None,
            latency_ns: 800_000,
            flusher_at_start: FlusherActivity::Idle,
            flusher_at_end: FlusherActivity::Idle,
            flusher_changes: 0,
            minor_faults: 0,
            major_faults: 0,
            voluntary_switches: 0,
            involuntary_switches: 0,
            cpu_time_ns: 20_000,
            cpu_at_start: Some(1),
            cpu_at_end: Some(1),
        };
        assert!(
            quiet.cause().contains("taken from the thread"),
            "{}",
            quiet.cause()
        );
        let busy = SlowWrite {
            cpu_time_ns: 790_000,
            ..quiet
        };
        assert!(
            busy.cause().contains("ran 790 us on the CPU"),
            "{}",
            busy.cause()
        );
        let moved = SlowWrite {
            involuntary_switches: 1,
            cpu_at_end: Some(0),
            flusher_changes: 2,
            flusher_at_end: FlusherActivity::WaitingWriteback,
            ..quiet
        };
        let cause = moved.cause();
        assert!(cause.contains("preempted 1 time"), "{cause}");
        assert!(cause.contains("moved from CPU 1 to CPU 0"), "{cause}");
        assert!(cause.contains("-> waiting for writeback"), "{cause}");
        assert!(!cause.contains("taken from the thread"), "{cause}");
    }
}
