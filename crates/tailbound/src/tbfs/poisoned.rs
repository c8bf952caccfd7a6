//! Whether the pool is poisoned, and why: set once by `poison.rs`'s operations, read by every
//! call on the pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Why the pool is poisoned, if it is: set once, never cleared (a reopen recovers the pool).
///
/// Rule: the flag is set only after the reason, so a reader that sees the flag finds a reason.
#[derive(Debug, Default)]
pub(crate) struct Poison {
    reason: Mutex<Option<String>>,
    /// Whether `reason` holds one: read by every operation, so the mutex (one cache line every
    /// thread would take) is locked only once a write failed.
    set: AtomicBool,
}

impl Poison {
    /// Poisons with `reason`, unless poisoned already (the first reason is kept).
    pub(crate) fn set(&self, reason: String) {
        let mut p = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_none() {
            *p = Some(reason);
            self.set.store(true, Ordering::Release);
        }
    }

    /// Why the pool is poisoned, if it is.
    pub(crate) fn reason(&self) -> Option<String> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        let reason = self
            .reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert!(
            reason.is_some(),
            "the pool is marked poisoned without a reason"
        );
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::Poison;
    use std::sync::atomic::Ordering;

    #[test]
    fn the_first_reason_is_kept() {
        let p = Poison::default();
        assert_eq!(p.reason(), None);
        p.set("first".into());
        p.set("second".into());
        assert_eq!(p.reason().as_deref(), Some("first"));
    }

    #[test]
    #[should_panic(expected = "poisoned without a reason")]
    fn a_flag_set_without_a_reason_is_caught() {
        let p = Poison::default();
        p.set.store(true, Ordering::Release);
        p.reason();
    }
}
