//! Whose a request is. A client that agreed to [`FEATURE_CALLER`] names the calling thread and
//! its I/O priority in every request's header; the server charges the I/O it does for the
//! request to that thread's tenant of the pool's scheduler ([`crate::sched::clients`]): its
//! weighted cgroup's at its priority, as the kernel charges a thread's own I/O.
//!
//! The process is the socket's peer (`SO_PEERCRED`), so a client cannot speak for another
//! process. The thread is believed only as far as it is one of that process's threads
//! (`/proc/PID/task/TID` exists); the priority only as far as the process could give it to
//! itself ([`allowed_prio`]). Both are read once per thread and priority, not per request.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::protocol::{Caller, FEATURE_CALLER};
use crate::sched::clients::{allowed_prio, may_take_rt, ClientTenants, WeightedCgroup};
use crate::sched::{Charge, Class, Prio};
use crate::sys::time::monotonic_now;

/// A client thread asks the kernel for its I/O priority again after this long, so a change
/// (`ionice -p`, `ioprio_set`) is seen within it without a system call per request.
const CLIENT_REFRESH_NS: u64 = 1_000_000;

/// Bumped by every new connection: a forked child's threads carry their parent's cached
/// thread ids, and a child's first connection makes them read their own.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// (connections seen, when read, the caller).
    static SEEN: Cell<Option<(u64, u64, Caller)>> = const { Cell::new(None) };
}

/// Called when a connection is made (see [`CONNECTIONS`]).
pub(super) fn connected() {
    CONNECTIONS.fetch_add(1, Ordering::AcqRel);
}

/// The calling thread as a request's caller: its id and I/O priority, read at most every
/// [`CLIENT_REFRESH_NS`].
pub(super) fn current() -> Caller {
    let generation = CONNECTIONS.load(Ordering::Acquire);
    let now = monotonic_now().0;
    if let Some((g, at, c)) = SEEN.with(Cell::get) {
        if g == generation && now.saturating_sub(at) < CLIENT_REFRESH_NS {
            return c;
        }
    }
    let prio = Prio::of_current_thread();
    let c = Caller {
        tid: crate::sys::proc::thread_id() as u32,
        class: kernel_class(prio.class),
        level: prio.level,
    };
    SEEN.with(|s| s.set(Some((generation, now, c))));
    c
}

fn kernel_class(class: Class) -> u8 {
    use crate::sys::ioprio::{IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE, IOPRIO_CLASS_RT};
    (match class {
        Class::Rt => IOPRIO_CLASS_RT,
        Class::Be => IOPRIO_CLASS_BE,
        Class::Idle => IOPRIO_CLASS_IDLE,
    }) as u8
}

/// A claimed class and level as a priority; a class number that names none is best effort.
fn claimed(c: &Caller) -> Prio {
    use crate::sys::ioprio::{IOPRIO_CLASS_IDLE, IOPRIO_CLASS_RT};
    let level = c.level.min(crate::sched::LEVEL_MAX);
    let class = match u32::from(c.class) {
        IOPRIO_CLASS_RT => Class::Rt,
        IOPRIO_CLASS_IDLE => Class::Idle,
        _ => Class::Be,
    };
    Prio { class, level }
}

/// The features a server grants: the caller when it has a scheduler to charge.
pub(super) fn offered(tenants: Option<&ClientTenants>) -> u64 {
    if tenants.is_some() {
        FEATURE_CALLER
    } else {
        0
    }
}

/// At most this many threads and charges a session remembers; past it, it starts over.
const REMEMBERED_MAX: usize = 1024;

/// One session's callers resolved to charges, remembered by thread and priority.
pub(super) struct Callers<'a> {
    tenants: &'a ClientTenants,
    pid: u32,
    may_rt: Option<bool>,
    /// Each thread's weighted cgroup, `None` for a thread that is not the client's.
    threads: HashMap<u32, Option<Option<WeightedCgroup>>>,
    charges: HashMap<Caller, Charge>,
    /// The process's own cgroup, for threads that are not its own.
    process: Option<Option<WeightedCgroup>>,
}

impl<'a> Callers<'a> {
    pub(super) fn new(tenants: &'a ClientTenants, pid: u32) -> Callers<'a> {
        Callers {
            tenants,
            pid,
            may_rt: None,
            threads: HashMap::new(),
            charges: HashMap::new(),
            process: None,
        }
    }

    /// The charge for a request of `caller`.
    pub(super) fn charge(&mut self, caller: &Caller) -> Charge {
        if let Some(c) = self.charges.get(caller) {
            return *c;
        }
        if self.charges.len() >= REMEMBERED_MAX {
            self.charges.clear();
        }
        if self.threads.len() >= REMEMBERED_MAX {
            self.threads.clear();
        }
        let (pid, tid) = (self.pid, caller.tid);
        let tenants = self.tenants;
        let thread = self
            .threads
            .entry(tid)
            .or_insert_with(|| tenants.thread_cgroup(pid, tid))
            .clone();
        let may_rt = *self.may_rt.get_or_insert_with(|| may_take_rt(pid));
        let prio = allowed_prio(claimed(caller), may_rt, || {
            // Read right after finding the thread is the client's, so a thread id reused by
            // another process since is not taken for it.
            thread
                .is_some()
                .then(|| {
                    tenants
                        .thread_cgroup(pid, tid)
                        .map(|_| Prio::of_thread(tid))
                })
                .flatten()
        });
        let cgroup = match thread {
            Some(cgroup) => cgroup,
            None => self
                .process
                .get_or_insert_with(|| tenants.process_cgroup(pid))
                .clone(),
        };
        let charge = self.tenants.charge_in(cgroup.as_ref(), prio);
        self.charges.insert(*caller, charge);
        charge
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calling_thread_is_named_with_its_priority() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let idle = Prio {
                class: Class::Idle,
                level: 7,
            };
            idle.apply_to_current_thread().unwrap();
            tx.send((current(), crate::sys::proc::thread_id() as u32))
                .unwrap();
        })
        .join()
        .unwrap();
        let (c, tid) = rx.recv().unwrap();
        assert_eq!(c.tid, tid);
        assert_eq!(
            claimed(&c),
            Prio {
                class: Class::Idle,
                level: 7
            }
        );
    }

    #[test]
    fn claims_outside_the_kernels_numbers_are_best_effort() {
        let c = Caller {
            tid: 1,
            class: 9,
            level: 200,
        };
        assert_eq!(
            claimed(&c),
            Prio {
                class: Class::Be,
                level: crate::sched::LEVEL_MAX
            }
        );
    }
}
