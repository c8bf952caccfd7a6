//! Advisory file locks inside one process: POSIX record locks (`fcntl` F_SETLK), open file
//! description locks (F_OFD_SETLK) and `flock`, with Linux's conflict rules between the process's
//! own descriptors and threads.
//!
//! - Record locks (POSIX and OFD) share one byte-range space per inode; `flock` locks are a
//!   separate whole-file space and never conflict with record locks.
//! - POSIX locks belong to the process: they never conflict with each other, a new one replaces the
//!   process's locks on the bytes it covers, and closing *any* descriptor of the inode drops them
//!   all ([`LockTable::release`] with [`Owner::Process`]).
//! - OFD and `flock` locks belong to an open file description: two descriptions conflict with
//!   each other (and OFD locks with POSIX locks); they go away when the description's last
//!   descriptor closes.
//!
//! A pool opened in a process is private to it, so these rules are the whole story there. A pool
//! server (`crate::serve`) speaks for many processes: their locks are [`Owner::Client`], one
//! owner per session for POSIX locks, and the same rules hold between sessions as between
//! processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Who holds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A POSIX record lock: the whole process.
    Process,
    /// An OFD record lock or a `flock` lock: one open file description, by its id.
    Description(u64),
    /// A lock a client of the pool server holds (`crate::serve`): with `description` 0 the
    /// client process's POSIX lock, otherwise one of its open file descriptions'. Sessions are
    /// processes, so two sessions' locks conflict as two processes' do.
    Client { session: u64, description: u64 },
}

/// Which lock space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// Byte-range record locks (`fcntl`).
    Record,
    /// Whole-file `flock` locks.
    Flock,
}

/// The kind of a lock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Unlock,
}

/// A held lock, as `F_GETLK` reports a conflicting one. `end` is exclusive; `u64::MAX` means to
/// the end of the file however it grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub owner: Owner,
    pub space: Space,
    pub write: bool,
    pub start: u64,
    pub end: u64,
}

/// What a lock request can fail with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// Another owner holds a conflicting lock and the request would not wait (`EAGAIN`).
    WouldBlock,
    /// A lock range that ends before it starts or overflows (`EINVAL`).
    Invalid,
}

impl LockError {
    pub fn errno(self) -> i32 {
        match self {
            LockError::WouldBlock => libc::EAGAIN,
            LockError::Invalid => libc::EINVAL,
        }
    }
}

/// A lock request: `owner` wants a `kind` lock on `start..end` (exclusive; `u64::MAX` is to the
/// end of the file) in `space`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub owner: Owner,
    pub space: Space,
    pub kind: Kind,
    pub start: u64,
    pub end: u64,
}

/// Every lock of one pool, by inode number. Cheap when unused: a close, which releases its
/// owner's locks, then neither takes the table nor wakes anyone.
#[derive(Debug, Default)]
pub struct LockTable {
    locks: Mutex<HashMap<u64, Vec<Held>>>,
    changed: Condvar,
    /// Whether the table holds any lock, kept under `locks`. Without it every close took the
    /// table's mutex and woke its waiters (a `futex` system call each time, with or without
    /// waiters): in `bench fileserver` through the shim, four in five of all the process's
    /// `futex` calls.
    any: AtomicBool,
    /// Threads waiting in [`LockTable::set`] (tests wait for a waiter to block).
    #[cfg(test)]
    waiting: std::sync::atomic::AtomicUsize,
}

fn conflicts(a: &Held, b: &Held) -> bool {
    a.space == b.space
        && (a.write || b.write)
        && a.start < b.end
        && b.start < a.end
        && !(a.owner == b.owner)
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable::default()
    }

    fn table(&self) -> MutexGuard<'_, HashMap<u64, Vec<Held>>> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first lock another owner holds that conflicts with a `kind` lock on
    /// `start..end` (`F_GETLK`); `None` if the request would succeed.
    pub fn test(&self, ino: u64, r: &Request) -> Option<Held> {
        let Request {
            owner,
            space,
            kind,
            start,
            end,
        } = *r;
        if kind == Kind::Unlock || start >= end {
            return None;
        }
        let want = Held {
            owner,
            space,
            write: kind == Kind::Write,
            start,
            end,
        };
        self.table()
            .get(&ino)
            .and_then(|v| v.iter().find(|h| conflicts(h, &want)).copied())
    }

    /// Takes, changes or drops `owner`'s lock on `start..end` (`F_SETLK`, `F_SETLKW` with `wait`,
    /// `flock`). A new lock replaces the owner's locks on the bytes it covers; unlocking splits.
    pub fn set(&self, ino: u64, r: &Request, wait: bool) -> Result<(), LockError> {
        self.set_or_give_up(ino, r, wait, None)
    }

    /// [`LockTable::set`] that stops waiting, with [`LockError::WouldBlock`], once `give_up` is
    /// set and [`LockTable::wake_waiters`] called (a pool server's client went away while its
    /// request waited).
    pub fn set_or_give_up(
        &self,
        ino: u64,
        r: &Request,
        wait: bool,
        give_up: Option<&AtomicBool>,
    ) -> Result<(), LockError> {
        let Request {
            owner,
            space,
            kind,
            start,
            end,
        } = *r;
        if start > end {
            return Err(LockError::Invalid);
        }
        let want = Held {
            owner,
            space,
            write: kind == Kind::Write,
            start,
            end,
        };
        let mut table = self.table();
        if kind != Kind::Unlock {
            loop {
                let blocked = table
                    .get(&ino)
                    .is_some_and(|v| v.iter().any(|h| conflicts(h, &want)));
                if !blocked {
                    break;
                }
                if !wait || give_up.is_some_and(|g| g.load(Ordering::Acquire)) {
                    return Err(LockError::WouldBlock);
                }
                #[cfg(test)]
                self.waiting.fetch_add(1, Ordering::AcqRel);
                table = self.changed.wait(table).unwrap_or_else(|p| p.into_inner());
                #[cfg(test)]
                self.waiting
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .expect("a lock waiter left with none counted");
            }
        }
        let list = table.entry(ino).or_default();
        // Cut the owner's existing locks in this space out of start..end.
        let mut kept = Vec::with_capacity(list.len() + 1);
        for h in list.drain(..) {
            if h.owner != owner || h.space != space || h.end <= start || end <= h.start {
                kept.push(h);
                continue;
            }
            if h.start < start {
                kept.push(Held { end: start, ..h });
            }
            if end < h.end {
                kept.push(Held { start: end, ..h });
            }
        }
        if kind != Kind::Unlock && start < end {
            kept.push(want);
        }
        if kept.is_empty() {
            table.remove(&ino);
        } else {
            *table.get_mut(&ino).expect("entry made above") = kept;
        }
        self.any.store(!table.is_empty(), Ordering::Release);
        drop(table);
        self.changed.notify_all();
        Ok(())
    }

    /// Wakes every waiting request to look again (see [`LockTable::set_or_give_up`]).
    pub fn wake_waiters(&self) {
        let table = self.table();
        drop(table);
        self.changed.notify_all();
    }

    /// Drops every lock `owner` holds on `ino` (in both spaces).
    pub fn release(&self, ino: u64, owner: Owner) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut table = self.table();
        let mut released = false;
        if let Some(list) = table.get_mut(&ino) {
            let before = list.len();
            list.retain(|h| h.owner != owner);
            released = list.len() < before;
            if list.is_empty() {
                table.remove(&ino);
            }
        }
        self.released(table, released);
    }

    /// Drops every lock of `owner` on any inode (a description closed).
    pub fn release_everywhere(&self, owner: Owner) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut table = self.table();
        let mut released = false;
        table.retain(|_, list| {
            let before = list.len();
            list.retain(|h| h.owner != owner);
            released |= list.len() < before;
            !list.is_empty()
        });
        self.released(table, released);
    }

    /// Drops every lock a pool server's session holds, of the process and of each of its open
    /// file descriptions (its client went away).
    pub fn release_session(&self, session: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut table = self.table();
        let mut released = false;
        table.retain(|_, list| {
            let before = list.len();
            list.retain(|h| !matches!(h.owner, Owner::Client { session: s, .. } if s == session));
            released |= list.len() < before;
            !list.is_empty()
        });
        self.released(table, released);
    }

    /// After a release: notes whether any lock is left, and wakes the waiters if a lock went
    /// (nothing else a release does can unblock them).
    fn released(&self, table: MutexGuard<'_, HashMap<u64, Vec<Held>>>, released: bool) {
        self.any.store(!table.is_empty(), Ordering::Release);
        drop(table);
        if released {
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: Owner = Owner::Description(1);
    const B: Owner = Owner::Description(2);
    const P: Owner = Owner::Process;

    fn rq(owner: Owner, space: Space, kind: Kind, start: u64, end: u64) -> Request {
        Request {
            owner,
            space,
            kind,
            start,
            end,
        }
    }

    #[test]
    fn a_sessions_release_drops_its_process_and_handle_locks_only() {
        let t = LockTable::new();
        let s1 = Owner::Client {
            session: 1,
            description: 0,
        };
        let s1_handle = Owner::Client {
            session: 1,
            description: 7,
        };
        let s2 = Owner::Client {
            session: 2,
            description: 0,
        };
        t.set(10, &rq(s1, Space::Record, Kind::Write, 0, 10), false)
            .unwrap();
        t.set(
            11,
            &rq(s1_handle, Space::Flock, Kind::Write, 0, u64::MAX),
            false,
        )
        .unwrap();
        t.set(12, &rq(s2, Space::Record, Kind::Write, 0, 10), false)
            .unwrap();
        // Two sessions are two processes: their POSIX locks conflict.
        let want = rq(s2, Space::Record, Kind::Write, 0, 10);
        assert_eq!(t.set(10, &want, false), Err(LockError::WouldBlock));
        t.release_session(1);
        t.set(10, &want, false).unwrap();
        t.set(11, &rq(s2, Space::Flock, Kind::Write, 0, u64::MAX), false)
            .unwrap();
        // The other session keeps what it holds.
        assert!(t
            .test(12, &rq(s1, Space::Record, Kind::Read, 0, 1))
            .is_some());
    }

    #[test]
    fn posix_locks_of_the_process_never_conflict_and_replace_each_other() {
        let t = LockTable::new();
        t.set(7, &rq(P, Space::Record, Kind::Write, 0, 100), false)
            .unwrap();
        t.set(7, &rq(P, Space::Record, Kind::Read, 10, 20), false)
            .unwrap();
        assert_eq!(t.test(7, &rq(P, Space::Record, Kind::Write, 0, 100)), None);
        // The description-owned view sees the process's locks, split by the read lock.
        let c = t.test(7, &rq(A, Space::Record, Kind::Read, 10, 20));
        assert_eq!(c, None, "a read lock on 10..20 is compatible with reading");
        let c = t.test(7, &rq(A, Space::Record, Kind::Read, 0, 5)).unwrap();
        assert!(c.write && c.owner == P && c.start == 0 && c.end == 10);
        t.release(7, P);
        assert_eq!(
            t.test(7, &rq(A, Space::Record, Kind::Write, 0, u64::MAX)),
            None
        );
    }

    #[test]
    fn descriptions_conflict_with_each_other_and_with_posix_locks() {
        let t = LockTable::new();
        t.set(1, &rq(A, Space::Record, Kind::Read, 0, 10), false)
            .unwrap();
        t.set(1, &rq(B, Space::Record, Kind::Read, 5, 15), false)
            .unwrap();
        assert_eq!(
            t.set(1, &rq(B, Space::Record, Kind::Write, 0, 10), false),
            Err(LockError::WouldBlock)
        );
        assert_eq!(
            t.set(1, &rq(P, Space::Record, Kind::Write, 9, 10), false),
            Err(LockError::WouldBlock)
        );
        t.set(1, &rq(P, Space::Record, Kind::Write, 15, 20), false)
            .unwrap();
        // Unlocking the middle of A's lock leaves both ends.
        t.set(1, &rq(A, Space::Record, Kind::Unlock, 3, 6), false)
            .unwrap();
        assert!(t
            .test(1, &rq(B, Space::Record, Kind::Write, 3, 5))
            .is_none());
        assert!(t
            .test(1, &rq(P, Space::Record, Kind::Write, 0, 3))
            .is_some());
        t.release_everywhere(A);
        t.release_everywhere(B);
        assert!(t
            .test(1, &rq(A, Space::Record, Kind::Write, 0, 15))
            .is_none());
        assert!(t
            .test(1, &rq(A, Space::Record, Kind::Write, 0, 16))
            .is_some());
    }

    #[test]
    fn flock_and_record_locks_are_separate() {
        let t = LockTable::new();
        t.set(3, &rq(A, Space::Flock, Kind::Write, 0, u64::MAX), false)
            .unwrap();
        t.set(3, &rq(B, Space::Record, Kind::Write, 0, u64::MAX), false)
            .unwrap();
        assert_eq!(
            t.set(3, &rq(B, Space::Flock, Kind::Read, 0, u64::MAX), false),
            Err(LockError::WouldBlock)
        );
        // Converting A's exclusive lock to shared lets B share it.
        t.set(3, &rq(A, Space::Flock, Kind::Read, 0, u64::MAX), false)
            .unwrap();
        t.set(3, &rq(B, Space::Flock, Kind::Read, 0, u64::MAX), false)
            .unwrap();
    }

    #[test]
    fn a_waiting_lock_is_granted_when_its_holders_description_closes_and_after_every_lock_went() {
        let t = Arc::new(LockTable::new());
        // A close with no lock anywhere, then one of an owner holding none: nothing changes.
        t.release_everywhere(B);
        t.set(5, &rq(B, Space::Record, Kind::Write, 0, 10), false)
            .unwrap();
        t.release_everywhere(A);
        t.release(5, Owner::Process);
        assert_eq!(
            t.test(5, &rq(A, Space::Record, Kind::Write, 0, 10))
                .map(|h| h.owner),
            Some(B)
        );
        let t2 = t.clone();
        let (done, granted) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(t2.set(5, &rq(A, Space::Record, Kind::Write, 0, 10), true));
        });
        // Once A waits (the count is taken under the table's lock, which the release needs),
        // B's description closes and A's lock is granted: a release that woke no one would
        // leave A blocked for good.
        while t.waiting.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        t.release_everywhere(B);
        granted
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the waiting lock is granted once B's description closes")
            .unwrap();
        assert_eq!(
            t.test(5, &rq(B, Space::Record, Kind::Read, 0, 10))
                .map(|h| h.owner),
            Some(A)
        );
        // Every lock gone, then a new one: the table is used again.
        t.release_everywhere(A);
        assert_eq!(t.test(5, &rq(B, Space::Record, Kind::Write, 0, 10)), None);
        t.set(5, &rq(A, Space::Record, Kind::Read, 0, 10), false)
            .unwrap();
        assert!(t
            .test(5, &rq(B, Space::Record, Kind::Write, 0, 10))
            .is_some());
    }

    #[test]
    fn a_waiting_lock_is_granted_when_the_holder_unlocks() {
        let t = Arc::new(LockTable::new());
        t.set(9, &rq(A, Space::Flock, Kind::Write, 0, u64::MAX), false)
            .unwrap();
        let t2 = t.clone();
        let waiter = std::thread::spawn(move || {
            t2.set(9, &rq(B, Space::Flock, Kind::Write, 0, u64::MAX), true)
        });
        // Whatever the scheduling, B gets the lock only after A lets go, and then holds it.
        t.release(9, A);
        waiter.join().unwrap().unwrap();
        assert_eq!(
            t.test(9, &rq(A, Space::Flock, Kind::Read, 0, u64::MAX))
                .map(|h| h.owner),
            Some(B)
        );
    }
}
