//! Waiting for a lock while lending this thread's I/O priority to the lock's holder
//! (`sched::inherit`): a thread that waits for `meta` or the log writer does not leave its
//! priority idle while a lower one holds what it needs.

use std::sync::{Arc, Mutex, MutexGuard};

/// Locks `lock`; a thread that has to wait lends its I/O priority to the holder (registered
/// with `inherit`) until it gets it.
pub(crate) fn lock_lending<'a, T>(
    lock: &'a Mutex<T>,
    inherit: &Arc<crate::sched::inherit::Inheritance>,
) -> MutexGuard<'a, T> {
    match lock.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            lending_while(inherit, || lock.lock().unwrap_or_else(|p| p.into_inner()))
        }
    }
}

/// Runs `wait` (a thread waiting for a lock) lending the thread's I/O priority to the lock's
/// holder (registered with `inherit`) meanwhile.
pub(crate) fn lending_while<R>(
    inherit: &Arc<crate::sched::inherit::Inheritance>,
    wait: impl FnOnce() -> R,
) -> R {
    let _lend = (!inherit.is_inert()).then(|| inherit.lend(crate::sched::inherit::own_prio()));
    wait()
}

/// The calling thread's name and I/O priority, for the longest holds of a lock
/// (`phases::note_hold`).
pub(crate) fn holder() -> String {
    let prio = crate::sched::current_prio();
    format!(
        "{} ({:?} {})",
        std::thread::current().name().unwrap_or("unnamed"),
        prio.class,
        prio.level
    )
}

/// Times a hold of the log writer, with the holder in [`Phase::LogWriter`] meanwhile; its end
/// is noted among the longest holds (`phases::note_hold`).
///
/// [`Phase::LogWriter`]: crate::phases::Phase::LogWriter
pub(crate) struct HoldNoted {
    start: std::time::Instant,
    at_start: crate::phases::PhaseTimes,
    taken_at: &'static std::panic::Location<'static>,
    _phase: crate::phases::InPhase,
}

impl HoldNoted {
    #[track_caller]
    pub(crate) fn log_writer() -> HoldNoted {
        HoldNoted {
            start: std::time::Instant::now(),
            at_start: crate::phases::peek(),
            taken_at: std::panic::Location::caller(),
            _phase: crate::phases::enter(crate::phases::Phase::LogWriter),
        }
    }
}

impl Drop for HoldNoted {
    fn drop(&mut self) {
        let held_ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        crate::phases::note_hold(
            crate::phases::Lock::LogWriter,
            held_ns,
            &self.at_start,
            self.taken_at,
            holder,
        );
    }
}
