//! A set of small, dense numbers kept as a bitmap: the sets a checkpoint's work is gathered in
//! (`Changes`' pending and `ns_changed`, `Directories::dirty`, `State::freed_slots`, the dirty
//! set), and a block map's changed leaves (`BlockMap::dirty_leaves`). Inode numbers are dense
//! (a freed number is the next one handed out, and the root's record bounds them by the inode
//! file's size), as are a map's leaf indices, so the bitmap spans no more than the pool's
//! inodes or the file's leaves: a membership change is a bit flip, where a B-tree of a few
//! thousand numbers took a search with its cache misses (and a one-leaf set an allocation),
//! most of them while `meta` was held.

use bit_set::BitSet;

#[derive(Debug, Clone, Default)]
pub(crate) struct DenseSet {
    bits: BitSet,
    len: usize,
}

impl DenseSet {
    /// Adds `n`; true if it was not in the set.
    pub fn insert(&mut self, n: u64) -> bool {
        let added = self.bits.insert(n as usize);
        self.len += usize::from(added);
        added
    }

    /// Removes `n`; true if it was in the set.
    pub fn remove(&mut self, n: &u64) -> bool {
        let removed = self.bits.remove(*n as usize);
        self.len -= usize::from(removed);
        removed
    }

    pub fn contains(&self, n: &u64) -> bool {
        self.bits.contains(*n as usize)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the set, keeping its room.
    pub fn clear(&mut self) {
        if self.len > 0 {
            self.bits.make_empty();
            self.len = 0;
        }
    }

    /// The numbers in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.bits.iter().map(|i| i as u64)
    }

    /// The numbers in `range`, ascending.
    pub fn range(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = u64> + '_ {
        range.filter(|n| self.contains(n))
    }

    /// The numbers in the set and not in `other`, ascending.
    pub fn difference<'a>(&'a self, other: &'a DenseSet) -> impl Iterator<Item = u64> + 'a {
        self.iter().filter(|n| !other.contains(n))
    }

    /// Keeps the numbers `keep` is true for.
    pub fn retain(&mut self, mut keep: impl FnMut(&u64) -> bool) {
        let dropped: Vec<u64> = self.iter().filter(|n| !keep(n)).collect();
        for n in &dropped {
            self.remove(n);
        }
    }
}

impl Extend<u64> for DenseSet {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, ns: I) {
        for n in ns {
            self.insert(n);
        }
    }
}

impl FromIterator<u64> for DenseSet {
    fn from_iter<I: IntoIterator<Item = u64>>(ns: I) -> DenseSet {
        let mut set = DenseSet::default();
        set.extend(ns);
        set
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::DenseSet;

    proptest! {
        /// Any sequence of inserts and removes leaves the set, its count and its order as a
        /// `BTreeSet` has them.
        #[test]
        fn behaves_as_an_ordered_set(ops in prop::collection::vec((any::<bool>(), 0u64..2000), 0..400)) {
            let mut set = DenseSet::default();
            let mut model = BTreeSet::new();
            for (add, ino) in ops {
                if add {
                    prop_assert_eq!(set.insert(ino), model.insert(ino));
                } else {
                    prop_assert_eq!(set.remove(&ino), model.remove(&ino));
                }
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.is_empty(), model.is_empty());
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(
                set.range(100..900).collect::<Vec<_>>(),
                model.range(100..900).copied().collect::<Vec<_>>()
            );
            let other: DenseSet = model.iter().copied().filter(|i| i % 3 == 0).collect();
            prop_assert_eq!(
                set.difference(&other).collect::<Vec<_>>(),
                model.iter().copied().filter(|i| i % 3 != 0).collect::<Vec<_>>()
            );
            set.retain(|i| i % 2 == 0);
            model.retain(|i| i % 2 == 0);
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            set.clear();
            prop_assert!(set.is_empty());
            prop_assert_eq!(set.iter().count(), 0);
        }
    }
}
