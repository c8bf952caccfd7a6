//! FUSE generations: the pool reuses the numbers of freed inodes, so an inode created while
//! mounted gets a generation no earlier inode of its number had, and the kernel does not take the
//! new inode for an old one it still caches.
//!
//! Each number is kept while the kernel holds it (its lookup count above zero, counting every
//! inode of that number the kernel has), so the table is as large as the kernel's inode cache, not
//! as the number of inodes ever made.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Generations {
    /// Inode number → (its newest generation, the kernel's lookups of the number).
    table: Mutex<HashMap<u64, (u64, u64)>>,
    next: Mutex<u64>,
}

impl Default for Generations {
    fn default() -> Generations {
        Generations {
            table: Mutex::new(HashMap::new()),
            next: Mutex::new(1),
        }
    }
}

impl Generations {
    /// The kernel is given `ino` in an entry (one more lookup); `new`: an inode just created.
    /// Returns the generation to give with it.
    pub fn given(&self, ino: u64, new: bool) -> u64 {
        let fresh = new.then(|| self.fresh());
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let e = t.entry(ino).or_insert((0, 0));
        if let Some(g) = fresh {
            e.0 = g;
        }
        e.1 += 1;
        e.0
    }

    /// The inode the kernel caches as `ino` is not to be used again: its next entry carries a
    /// new generation, so the kernel drops the cached inode (its size and pages with it) when
    /// it revalidates a name of it, and takes a new one.
    pub fn renew(&self, ino: u64) {
        let fresh = self.fresh();
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = t.get_mut(&ino) {
            e.0 = fresh;
        }
    }

    fn fresh(&self) -> u64 {
        let mut n = self.next.lock().unwrap_or_else(|p| p.into_inner());
        *n += 1;
        *n - 1
    }

    /// The kernel dropped `lookups` of its lookups of `ino`. Returns whether it now holds
    /// none.
    pub fn forget(&self, ino: u64, lookups: u64) -> bool {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        match t.get_mut(&ino) {
            Some(e) => {
                e.1 = e.1.saturating_sub(lookups);
                if e.1 == 0 {
                    t.remove(&ino);
                    true
                } else {
                    false
                }
            }
            None => true,
        }
    }

    /// Whether the kernel holds `ino` (may still send requests naming it).
    pub fn holds(&self, ino: u64) -> bool {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&ino)
    }

    /// Numbers the kernel holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::Generations;

    #[test]
    fn a_reused_number_gets_a_new_generation_and_goes_when_every_lookup_is_forgotten() {
        let g = Generations::default();
        assert_eq!(g.given(7, false), 0, "an inode from before the mount");
        let first = g.given(9, true);
        assert_eq!(g.given(9, false), first, "looked up again");
        // Number 9 freed and reused while the kernel still holds the old inode.
        let second = g.given(9, true);
        assert_ne!(second, first);
        assert_eq!(g.len(), 2);
        // The old inode's two lookups are forgotten: the new one's generation stays.
        assert!(!g.forget(9, 2));
        assert!(g.holds(9));
        assert_eq!(g.given(9, false), second);
        assert!(g.forget(9, 2), "the last lookups forgotten");
        assert!(!g.holds(9));
        g.forget(7, 1);
        assert_eq!(g.len(), 0, "nothing is kept once the kernel holds nothing");
        g.forget(9, 1);
    }

    #[test]
    fn a_renewed_number_keeps_its_lookups_under_a_new_generation() {
        let g = Generations::default();
        let first = g.given(5, false);
        g.renew(5);
        let second = g.given(5, false);
        assert_ne!(second, first);
        assert_eq!(
            g.given(5, false),
            second,
            "renewed once, not at every entry"
        );
        assert!(!g.forget(5, 2), "the lookups of both generations count");
        assert!(g.forget(5, 1));
        g.renew(6);
        assert!(
            !g.holds(6),
            "a number the kernel does not hold is not added"
        );
    }
}
