//! The path cache: full paths of the live tree to their inodes, looked up without `meta`.
//!
//! `open` of an existing file and `stat` resolve their path here first, so they do not queue
//! behind `meta` while a commit holds it. Only paths that resolve plainly are kept: absolute or
//! relative to the pool's root, no `.` or `..` component, no empty component, and no symbolic
//! link on the way (the target itself is never a link). Such a path keeps its meaning until a
//! name on it is removed or moved, and both are detected without invalidating entries one by one:
//!
//! - The last component: every removal or move of a name of an inode (unlink, rmdir, rename
//!   from it or over it) raises that inode's `names_gen`, under its lock. An entry remembers the
//!   value it saw and is stale once it differs.
//! - The directories above it: renaming or removing a directory raises the cache's `dirs_gen`,
//!   which every entry also remembers. Those operations are rare.
//!
//! An entry is checked, and acted on, under the inode's lock, so an open found here and an
//! unlink racing it order as they would under `meta`: either the open counts first and the
//! unlink leaves the inode to its last close, or the unlink counts first and the open misses.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::tbfs::inode::{InodeCell, InodeState};
use crate::tbfs::limits::{NAME_CACHE_SHARDS, NAME_CACHE_SHARD_ENTRIES_MAX};

/// A cached inode, to be checked with [`Hit::valid`] under its lock before use.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub cell: Arc<InodeCell>,
    names_gen: u64,
    dirs_gen: u64,
}

impl Hit {
    /// The entry still names this inode: it is not freed and no name on its path moved.
    pub fn valid(&self, st: &InodeState, cache: &NameCache) -> bool {
        !st.freed()
            && st.nlink() > 0
            && st.names_gen() == self.names_gen
            && cache.dirs_gen.load(Ordering::Acquire) == self.dirs_gen
    }
}

#[derive(Debug)]
pub(crate) struct NameCache {
    shards: Vec<RwLock<HashMap<String, Hit>>>,
    hasher: std::collections::hash_map::RandomState,
    dirs_gen: AtomicU64,
}

impl Default for NameCache {
    fn default() -> NameCache {
        NameCache {
            shards: (0..NAME_CACHE_SHARDS)
                .map(|_| RwLock::new(HashMap::new()))
                .collect(),
            hasher: Default::default(),
            dirs_gen: AtomicU64::new(0),
        }
    }
}

/// Whether `path` is in the form the cache keeps: components separated by single slashes, none
/// `.` or `..`, at most one leading slash and no trailing one. Returns it without the slash.
fn plain(path: &str) -> Option<&str> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let ok = !rel.is_empty()
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    ok.then_some(rel)
}

impl NameCache {
    fn shard(&self, key: &str) -> &RwLock<HashMap<String, Hit>> {
        &self.shards[self.hasher.hash_one(key) as usize % NAME_CACHE_SHARDS]
    }

    pub fn get(&self, path: &str) -> Option<Hit> {
        let key = plain(path)?;
        let shard = self.shard(key).read().unwrap_or_else(|p| p.into_inner());
        shard.get(key).cloned()
    }

    /// Remembers that `path` resolved, with no symbolic link on the way, to `cell`, whose state
    /// is `st`. Called under `meta`, where names change.
    pub fn insert(&self, path: &str, cell: &Arc<InodeCell>, st: &InodeState) {
        let Some(key) = plain(path) else {
            return;
        };
        let entry = Hit {
            cell: cell.clone(),
            names_gen: st.names_gen(),
            dirs_gen: self.dirs_gen.load(Ordering::Acquire),
        };
        let mut shard = self.shard(key).write().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= NAME_CACHE_SHARD_ENTRIES_MAX && !shard.contains_key(key) {
            shard.clear();
        }
        shard.insert(key.to_string(), entry);
    }

    /// Forgets `path` (an entry found stale).
    pub fn forget(&self, path: &str) {
        if let Some(key) = plain(path) {
            self.shard(key)
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
        }
    }

    /// A directory was renamed or removed: every entry is stale. Called under `meta`, before
    /// the directory maps change.
    pub fn dirs_changed(&self) {
        self.dirs_gen.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn only_plain_paths_are_kept() {
        assert_eq!(plain("/a/b"), Some("a/b"));
        assert_eq!(plain("a/b"), Some("a/b"));
        for p in ["", "/", "/a//b", "/a/./b", "/a/../b", "/a/", "..", "./a"] {
            assert_eq!(plain(p), None, "{p:?}");
        }
    }
}
