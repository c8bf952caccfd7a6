//! Posted closes (docs/PROTOCOL.md, "Posted closes"): a client on the rings may publish a
//! close and go on without waiting for it. What keeps that invisible to every other call:
//!
//! - A session's reader applies a posted close as it takes it, before it takes the next request
//!   of the session ([`Gate::applied`] then records how far the session's requests are taken).
//! - A removal (`unlink`, `rmdir`, a `rename` over a name) that leaves its inode open raises
//!   the closes word of every session on the rings, then waits until each has taken every
//!   request it had published by then ([`Drain::wait`]): a close published before the raise is
//!   applied before the removal is answered.
//! - A client publishes its close, then reads its closes word; if the word moved since the file
//!   was opened, the close may be the last of an unlinked file, and the client waits for the
//!   server to take it (a `Barrier`) before it returns.
//!
//! The removal looks up what it takes a name from while no name can appear
//! ([`Closes::names`]): it then knows which inode lost the name, and whether that inode is still
//! open afterwards.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use super::protocol::Request;
use super::ring::{HeaderWord, Parking};

/// The server's side of the posted closes of every session on the rings.
#[derive(Default)]
pub(super) struct Closes {
    gates: Mutex<HashMap<u64, Arc<Gate>>>,
    /// Taken to read by a request that may make a name, to write by one that removes a name:
    /// what a removal looked up before it ran is what it removed.
    names: RwLock<()>,
    /// Removals waiting now for sessions to take their posted closes (tests watch it).
    waiting: AtomicUsize,
    /// Held by a test to keep every session's reader from applying a posted close.
    #[cfg(test)]
    pub stall: Mutex<()>,
}

/// One session's posted closes: its closes word and how far its requests are taken.
pub(super) struct Gate {
    word: HeaderWord,
    /// The request ring, to read how far the client published.
    requests: Parking,
    /// The request ring's position up to which every request is taken, posted closes applied.
    applied: AtomicU32,
    /// The session takes no more requests (its client went, or the server stops): what it
    /// published before was taken, and its end closes everything it had open.
    ended: AtomicBool,
    /// Removals waiting on this gate.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    moved: Condvar,
}

/// What a request does to names, for [`Closes::names`].
pub(super) enum Names<'a> {
    /// Neither makes nor removes one.
    Untouched,
    /// May make one.
    Makes(RwLockReadGuard<'a, ()>),
    /// Removes the name at this path (the other names a rename touches are made, not removed).
    Removes(String, RwLockWriteGuard<'a, ()>),
}

/// The sessions a removal that left an inode open waits for, and how far each must be taken.
pub(super) struct Drain<'a> {
    closes: &'a Closes,
    targets: Vec<(Arc<Gate>, u32)>,
}

impl Gate {
    pub fn new(word: HeaderWord, requests: Parking) -> Gate {
        Gate {
            word,
            requests,
            applied: AtomicU32::new(0),
            ended: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            moved: Condvar::new(),
        }
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's requests up to ring position `pos` are taken, and its posted closes
    /// among them applied.
    pub fn applied(&self, pos: u32) {
        self.applied.store(pos, Ordering::SeqCst);
        // Pairs with a waiter counting itself before its look at `applied`.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.guard();
            self.moved.notify_all();
        }
    }

    fn reached(&self, target: u32) -> bool {
        // Positions run free and wrap: `applied` is at or past `target` when it is less than
        // half the position space ahead.
        self.ended.load(Ordering::SeqCst)
            || (self.applied.load(Ordering::SeqCst).wrapping_sub(target) as i32) >= 0
    }

    /// Raises the session's closes word, then reads how far the client published: every
    /// close the client published before it looked at the word is before that position. A
    /// client publishes a posted close without waking a worker, so the session's parked
    /// workers are woken to take it.
    fn raise(&self) -> u32 {
        self.word.raise();
        fence(Ordering::SeqCst);
        let target = self.requests.published();
        if !self.reached(target) {
            self.requests.wake_all();
        }
        target
    }

    fn wait_for(&self, target: u32) {
        while !self.reached(target) {
            self.waiters.fetch_add(1, Ordering::SeqCst);
            let g = self.guard();
            if !self.reached(target) {
                // The session's reader wakes this when it moves; the bound only covers a
                // reader that took the last request while this thread was counting itself.
                let _ = self.moved.wait_timeout(g, Duration::from_millis(100));
            }
            self.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The session takes no more requests: it counts as caught up.
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        let _g = self.guard();
        self.moved.notify_all();
    }
}

impl Closes {
    /// A session on the rings that may post closes.
    pub fn register(&self, session: u64, gate: Arc<Gate>) {
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session, gate);
    }

    /// The session ended and closed everything it had open: no removal waits for it now.
    pub fn ended(&self, session: u64) {
        let gate = self
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
        if let Some(g) = gate {
            g.end();
        }
    }

    /// How many removals wait now for sessions' posted closes.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Holds a reader that is about to apply a posted close while a test holds the stall.
    pub fn before_applying(&self) {
        #[cfg(test)]
        drop(self.stall.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// What `req` does to names, holding the lock that goes with it.
    pub fn names(&self, req: &Request) -> Names<'_> {
        use Request as R;
        let read = || self.names.read().unwrap_or_else(|p| p.into_inner());
        let write = || self.names.write().unwrap_or_else(|p| p.into_inner());
        match req {
            R::Unlink { path } | R::Rmdir { path } => Names::Removes(path.clone(), write()),
            R::Rename { to, .. } => Names::Removes(to.clone(), write()),
            R::Open { flags, .. } | R::OpenStat { flags, .. } if flags.create => {
                Names::Makes(read())
            }
            R::Mkdir { .. } | R::Symlink { .. } | R::Link { .. } | R::Mknod { .. } => {
                Names::Makes(read())
            }
            _ => Names::Untouched,
        }
    }

    /// A removal left an inode open: raises every session's closes word; the answer waits for
    /// the [`Drain`].
    pub fn raise(&self) -> Drain<'_> {
        let gates: Vec<Arc<Gate>> = self
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let targets = gates
            .into_iter()
            .map(|g| {
                let t = g.raise();
                (g, t)
            })
            .collect();
        Drain {
            closes: self,
            targets,
        }
    }
}

impl Drain<'_> {
    /// Waits until every session raised has taken what it had published when raised (or
    /// ended). Each session's own workers take its requests, so this may run on any thread
    /// but one of theirs that is the only one left to read.
    pub fn wait(self) {
        self.closes.waiting.fetch_add(1, Ordering::SeqCst);
        for (g, target) in &self.targets {
            g.wait_for(*target);
        }
        self.closes.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}
