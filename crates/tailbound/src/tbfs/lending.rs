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
