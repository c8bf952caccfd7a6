//! Priority inheritance for shared work done on behalf of waiters (seed 004 §4.2), such as a file
//! system commit: a thread about to wait for the work lends its priority ([`Inheritance::lend`]);
//! the thread doing it marks that while it holds the work ([`Inheritance::hold`]). While any
//! lender waits, the holder's scheduler requests go to the tenant of the highest lent priority
//! (see [`SchedDevice`](super::SchedDevice)) and its kernel ioprio is raised to match
//! ([`sync_kernel_ioprio`]), so I/O it issues outside the scheduler is ordered the same way; the
//! holder's own ioprio is restored when it stops holding.
//!
//! A boost applies to the holder's next requests and to the one it is waiting for: a holder
//! blocked on a queued request looks at what is lent every [`BOOST_POLL`] and moves the request's
//! pieces that are still queued to the lent priority's tenant
//! ([`Queue::boost`](super::queue::Queue::boost)).
//!
//! Owns only the bookkeeping; it issues no I/O.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

use super::Prio;

/// The priorities lent to one piece of shared work.
#[derive(Debug, Default)]
pub struct Inheritance {
    lent: Mutex<Vec<Prio>>,
    /// Work whose waiters lend nothing: work that does no I/O with a priority (a memory pool's
    /// commits are memory copies). Waiting then costs no system call for the waiter's ioprio.
    inert: bool,
}

/// A lent priority; returned when dropped.
#[derive(Debug)]
pub struct Lend {
    cell: Arc<Inheritance>,
    prio: Prio,
}

/// The calling thread holds the work until this is dropped.
#[derive(Debug)]
pub struct Hold {
    /// False when the thread's local state was already torn down (a thread exiting): then
    /// nothing is inherited.
    registered: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// `a` is served before `b`: a better class, or the same class and a lower level.
pub fn is_higher(a: Prio, b: Prio) -> bool {
    (a.class.rank(), a.level) < (b.class.rank(), b.level)
}

struct Holding {
    cells: Vec<Arc<Inheritance>>,
    /// The thread's kernel ioprio (class, level) before a boost changed it, and the boost applied.
    restore: Option<((u32, u32), Prio)>,
}

thread_local! {
    static HOLDING: RefCell<Holding> = const { RefCell::new(Holding { cells: Vec::new(), restore: None }) };
}

impl Inheritance {
    pub fn new() -> Arc<Inheritance> {
        Arc::new(Inheritance::default())
    }

    /// Work nothing is lent to (see [`Inheritance::is_inert`]).
    pub fn inert() -> Arc<Inheritance> {
        Arc::new(Inheritance {
            inert: true,
            ..Inheritance::default()
        })
    }

    /// Whether waiters lend nothing and holders are not registered.
    pub fn is_inert(&self) -> bool {
        self.inert
    }

    fn lent(&self) -> std::sync::MutexGuard<'_, Vec<Prio>> {
        self.lent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lends `prio` to whoever holds the work, until the returned guard is dropped.
    pub fn lend(self: &Arc<Self>, prio: Prio) -> Lend {
        self.lent().push(prio);
        Lend {
            cell: Arc::clone(self),
            prio,
        }
    }

    /// The highest priority lent now, if any.
    pub fn highest(&self) -> Option<Prio> {
        self.lent()
            .iter()
            .copied()
            .reduce(|a, b| if is_higher(b, a) { b } else { a })
    }

    /// Marks the calling thread as holding the work until the guard is dropped.
    pub fn hold(self: &Arc<Self>) -> Hold {
        // `try_with`: this runs inside libc hooks too, possibly while the thread exits.
        let registered = !self.inert
            && HOLDING
                .try_with(|h| h.borrow_mut().cells.push(Arc::clone(self)))
                .is_ok();
        Hold {
            registered,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Lend {
    fn drop(&mut self) {
        let mut lent = self.cell.lent();
        if let Some(i) = lent.iter().position(|p| *p == self.prio) {
            lent.swap_remove(i);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.registered {
            return;
        }
        let _ = HOLDING.try_with(|h| {
            let mut h = h.borrow_mut();
            h.cells.pop();
            if h.cells.is_empty() {
                if let Some(((class, level), _)) = h.restore.take() {
                    // Best effort: the thread goes back to what it had.
                    let _ = crate::sys::ioprio::set_current_thread(class, level);
                }
            }
        });
    }
}

/// How often a holder waiting for its own request checks whether a priority was lent meanwhile.
pub const BOOST_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// The calling thread holds some work (a priority may be lent to it while it waits).
pub fn is_holding() -> bool {
    HOLDING
        .try_with(|h| !h.borrow().cells.is_empty())
        .unwrap_or(false)
}

thread_local! {
    /// The priority of the [`Charge`](super::Charge) the calling thread applies (kept here by
    /// `Charge::apply`, so this file needs nothing of the executor's).
    static CHARGED_PRIO: Cell<Option<Prio>> = const { Cell::new(None) };
}

/// Notes the priority of the charge the calling thread applies from now on (`None`: none).
pub(super) fn set_charged_prio(p: Option<Prio>) {
    CHARGED_PRIO.with(|c| c.set(p));
}

/// The calling thread's own priority: that of the [`Charge`](super::Charge) it applies (a pool
/// server's thread doing a client's work lends the client's priority when it waits), else its
/// kernel ioprio, or what that was before a boost raised it.
pub fn own_prio() -> Prio {
    if let Some(p) = CHARGED_PRIO.with(Cell::get) {
        return p;
    }
    HOLDING
        .try_with(|h| h.borrow().restore)
        .ok()
        .flatten()
        .map_or_else(Prio::of_current_thread, |((class, level), _)| {
            Prio::from_kernel(class, level)
        })
}

/// The highest priority lent to any work the calling thread holds.
pub fn inherited() -> Option<Prio> {
    HOLDING
        .try_with(|h| {
            h.borrow()
                .cells
                .iter()
                .filter_map(|c| c.highest())
                .reduce(|a, b| if is_higher(b, a) { b } else { a })
        })
        .ok()
        .flatten()
}

/// Raises the calling thread's kernel ioprio to the inherited one if that is higher than its own,
/// or puts it back once nothing is lent any more. Returns the priority the thread's I/O should
/// have now. Failures to change the kernel ioprio (no privilege for RT) leave it as it was.
pub fn sync_kernel_ioprio(own: Prio) -> Prio {
    let boost = inherited().filter(|p| is_higher(*p, own));
    let _ = HOLDING.try_with(|h| {
        let mut h = h.borrow_mut();
        match (boost, h.restore) {
            (Some(p), Some((_, applied))) if p == applied => {}
            (Some(p), restore) => {
                let original = match restore {
                    Some((orig, _)) => Some(orig),
                    None => crate::sys::ioprio::get_current_thread().ok(),
                };
                if let Some(orig) = original {
                    if p.apply_to_current_thread().is_ok() {
                        h.restore = Some((orig, p));
                    }
                }
            }
            (None, Some(((class, level), _))) => {
                let _ = crate::sys::ioprio::set_current_thread(class, level);
                h.restore = None;
            }
            (None, None) => {}
        }
    });
    boost.unwrap_or(own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Class;

    const RT: Prio = Prio {
        class: Class::Rt,
        level: 0,
    };
    const BE: Prio = Prio {
        class: Class::Be,
        level: 4,
    };
    const IDLE: Prio = Prio {
        class: Class::Idle,
        level: 7,
    };

    #[test]
    fn the_highest_lent_priority_wins_while_lent() {
        let cell = Inheritance::new();
        assert_eq!(cell.highest(), None);
        let a = cell.lend(BE);
        let b = cell.lend(RT);
        assert_eq!(cell.highest(), Some(RT));
        drop(b);
        assert_eq!(cell.highest(), Some(BE));
        drop(a);
        assert_eq!(cell.highest(), None);
    }

    /// A pool server's thread doing a real-time client's work, itself best effort, lends the
    /// client's class to whatever it waits for.
    #[test]
    fn a_charged_thread_lends_its_charges_priority() {
        let cell = Inheritance::new();
        let kernel = own_prio();
        assert_ne!(
            kernel.class,
            Class::Rt,
            "tests run outside the real-time class"
        );
        {
            let _charged = crate::sched::Charge::to(crate::sched::TenantId(0), RT).apply();
            let _lent = cell.lend(own_prio());
            assert_eq!(cell.highest(), Some(RT));
        }
        assert_eq!(own_prio(), kernel);
    }

    #[test]
    fn only_the_holder_inherits_and_its_ioprio_is_restored() {
        let cell = Inheritance::new();
        let holder_cell = Arc::clone(&cell);
        std::thread::spawn(move || {
            IDLE.apply_to_current_thread().expect("lowering to idle");
            assert_eq!(inherited(), None);
            let hold = holder_cell.hold();
            assert_eq!(sync_kernel_ioprio(IDLE), IDLE, "nothing lent yet");
            let lend = holder_cell.lend(BE);
            assert_eq!(inherited(), Some(BE));
            assert_eq!(sync_kernel_ioprio(IDLE), BE);
            // Raising an idle thread to best effort needs no privilege.
            assert_eq!(Prio::of_current_thread(), BE);
            drop(lend);
            assert_eq!(sync_kernel_ioprio(IDLE), IDLE);
            assert_eq!(Prio::of_current_thread(), IDLE);
            let _lend = holder_cell.lend(BE);
            sync_kernel_ioprio(IDLE);
            drop(hold);
            assert_eq!(
                Prio::of_current_thread(),
                IDLE,
                "restored when it stops holding"
            );
            assert_eq!(inherited(), None);
        })
        .join()
        .expect("holder thread");
        // A thread that holds nothing inherits nothing, whatever is lent.
        let _lend = cell.lend(RT);
        assert_eq!(inherited(), None);
    }
}
