//! Who outside the engine is told of changes no request shows: a segment chosen to be written
//! again, an access time a read set, an inode freed (its number free for a new file). A server whose clients read a memory pool's bytes and
//! cache attributes themselves (`serve/lease.rs`) revokes their leases from here.
//!
//! Plain data: names no other part.

use std::sync::Arc;

/// Told of changes made inside the engine, on the thread that makes them (under `meta` or an
/// inode's lock): it must only note them, quickly, and call back into nothing.
pub trait Watcher: Send + Sync {
    /// Segment `seg` was chosen as the next the log writer fills: its bytes may change from
    /// now on (no live or pinned block is in it).
    fn segment_reused(&self, seg: u64);
    /// A read set inode `ino`'s access time.
    fn atime_touched(&self, ino: u64);
    /// Inode `ino` was freed (its number may be given to a new file).
    fn inode_freed(&self, ino: u64);
}

/// The watchers of one pool.
#[derive(Default)]
pub(crate) struct Watchers(parking_lot::RwLock<Vec<Arc<dyn Watcher>>>);

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watchers({})", self.0.read().len())
    }
}

impl Watchers {
    pub fn add(&self, w: Arc<dyn Watcher>) {
        self.0.write().push(w);
    }

    pub fn remove(&self, w: &Arc<dyn Watcher>) {
        self.0.write().retain(|x| !Arc::ptr_eq(x, w));
    }

    pub fn segment_reused(&self, seg: u64) {
        for w in self.0.read().iter() {
            w.segment_reused(seg);
        }
    }

    pub fn atime_touched(&self, ino: u64) {
        for w in self.0.read().iter() {
            w.atime_touched(ino);
        }
    }

    pub fn inode_freed(&self, ino: u64) {
        for w in self.0.read().iter() {
            w.inode_freed(ino);
        }
    }
}
