//! The engine's one source of time: segment ages, protection cut-offs, checkpoint, log and
//! superblock times, and files' times are all read from a [`Clock`]. The wall clock by default;
//! a stepped clock lets a test fix every age the cleaner sees.
//!
//! Names no part of the engine, so every part may hold one.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where the engine reads the time (nanoseconds since the Unix epoch).
///
/// [`Clock::wall`] (the default) is the system's clock. [`Clock::stepped`] starts at a given
/// time and moves forward by a fixed step at every read, and when [`Clock::advance`] is called:
/// nothing else moves it, so what a single-threaded test sees of segment ages and protection
/// periods depends only on what it does, not on how long it took. Clones share one clock.
#[derive(Clone, Default)]
pub struct Clock {
    stepped: Option<Arc<Stepped>>,
}

struct Stepped {
    /// What the next read answers.
    next_ns: AtomicI64,
    step_ns: i64,
}

impl Clock {
    /// The system's wall clock.
    pub fn wall() -> Clock {
        Clock::default()
    }

    /// A clock whose first read answers `start_ns` and every later read `step` more than the
    /// one before (a step of zero stops it between [`Clock::advance`] calls).
    ///
    /// A step greater than zero keeps every read after a checkpoint later than the
    /// checkpoint's time, as the wall clock does: with no protection period, a checkpoint is
    /// unprotected once any time has passed.
    pub fn stepped(start_ns: i64, step: Duration) -> Clock {
        Clock {
            stepped: Some(Arc::new(Stepped {
                next_ns: AtomicI64::new(start_ns),
                step_ns: duration_ns(step),
            })),
        }
    }

    /// Now, in nanoseconds since the Unix epoch.
    pub fn now_ns(&self) -> i64 {
        match &self.stepped {
            None => wall_ns(),
            Some(s) => s.next_ns.fetch_add(s.step_ns, Ordering::Relaxed),
        }
    }

    /// Now, without moving a stepped clock: what the next [`Clock::now_ns`] would answer. For
    /// deciding whether timed work is due, which is no event of its own.
    pub fn peek_ns(&self) -> i64 {
        match &self.stepped {
            None => wall_ns(),
            Some(s) => s.next_ns.load(Ordering::Relaxed),
        }
    }

    /// Moves a stepped clock forward by `by`; the wall clock is not moved.
    pub fn advance(&self, by: Duration) {
        if let Some(s) = &self.stepped {
            s.next_ns.fetch_add(duration_ns(by), Ordering::Relaxed);
        }
    }

    /// Whether this is the system's wall clock.
    pub fn is_wall(&self) -> bool {
        self.stepped.is_none()
    }
}

/// Two clocks are equal when they are the same clock: both the wall clock, or clones of one
/// stepped clock.
impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        match (&self.stepped, &other.stepped) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Clock {}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stepped {
            None => f.write_str("Clock::wall"),
            Some(s) => write!(
                f,
                "Clock::stepped(next {} ns, step {} ns)",
                s.next_ns.load(Ordering::Relaxed),
                s.step_ns
            ),
        }
    }
}

/// Saturating: a step beyond the clock's range is as far as it goes.
fn duration_ns(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

/// The system's clock, in nanoseconds since the Unix epoch (0 before it).
pub(crate) fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stepped_clock_moves_only_by_its_step_and_advance_and_clones_share_it() {
        let c = Clock::stepped(1_000, Duration::from_nanos(10));
        let twin = c.clone();
        assert_eq!(c.peek_ns(), 1_000);
        assert_eq!(c.now_ns(), 1_000);
        assert_eq!(twin.now_ns(), 1_010);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now_ns(), 1_020 + 1_000_000_000);
        assert_eq!(c, twin);
        assert_ne!(c, Clock::stepped(1_000, Duration::from_nanos(10)));
        assert_ne!(c, Clock::wall());
        let frozen = Clock::stepped(5, Duration::ZERO);
        assert_eq!((frozen.now_ns(), frozen.now_ns()), (5, 5));
    }

    #[test]
    fn the_wall_clock_is_the_default_and_reads_the_system_time() {
        let c = Clock::default();
        assert!(c.is_wall() && c == Clock::wall());
        let before = wall_ns();
        let now = c.now_ns();
        assert!(now >= before && now <= wall_ns());
        c.advance(Duration::from_secs(3600));
        assert!(
            c.now_ns() <= wall_ns(),
            "advance does not move the wall clock"
        );
    }
}
