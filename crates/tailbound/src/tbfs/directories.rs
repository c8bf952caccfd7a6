//! The directories: each one's entries, and which of them the next checkpoint writes again.
//! Changed only through [`Directories`]'s methods, under the `meta` lock.

use std::collections::{BTreeMap, HashMap};

use crate::tbfs::dense::DenseSet;
use crate::tbfs::inode::DirEntries;
use crate::tbfs::limits::{DIR_BLOCK_FILL, DIR_ENTRY_MAX};

/// Every directory's entries by inode number, and the directories changed since the last
/// checkpoint. Its methods keep: a change of a directory's entries marks it for the next
/// checkpoint; a directory is created once, empty; only a directory that exists gains or loses
/// an entry; the bound of the changed directories' blocks ([`Directories::dirty_bound`]) is
/// their sum and widest at every moment.
#[derive(Debug, Default)]
pub(crate) struct Directories {
    entries: HashMap<u64, DirEntries>,
    /// Directories whose entries the next checkpoint writes.
    dirty: DenseSet,
    /// The blocks of [`bound_blocks`] over the dirty directories, kept as they change: every
    /// write checks the checkpoint debt, and a walk of the dirty directories there cost a hash
    /// lookup per directory on each call.
    dirty_blocks: u64,
    /// How many dirty directories have each (non-zero) bound, for the widest.
    dirty_widths: BTreeMap<u64, u64>,
}

/// The blocks a directory of `entries` entries takes at most, every name as long as a name
/// can be.
pub(crate) fn bound_blocks(entries: usize) -> u64 {
    (entries as u64 * DIR_ENTRY_MAX).div_ceil(DIR_BLOCK_FILL)
}

impl Directories {
    /// The directories a checkpoint holds (or a read-only view reads): none changed since.
    pub fn loaded(entries: HashMap<u64, DirEntries>) -> Directories {
        Directories {
            entries,
            ..Directories::default()
        }
    }

    /// Directory `dir`'s entries, if `dir` is a directory.
    pub fn get(&self, dir: u64) -> Option<&DirEntries> {
        self.entries.get(&dir)
    }

    pub fn contains(&self, dir: u64) -> bool {
        self.entries.contains_key(&dir)
    }

    /// Every directory with its entries.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &DirEntries)> {
        self.entries.iter().map(|(&d, e)| (d, e))
    }

    /// Directory `dir` is created, empty.
    pub fn create(&mut self, dir: u64) {
        self.untally(dir);
        let old = self.entries.insert(dir, DirEntries::new());
        assert!(old.is_none(), "directory {dir} created twice");
        self.dirty.insert(dir);
        self.tally(dir);
    }

    /// Inode `ino` is freed: if it was a directory, it is gone and nothing writes it.
    pub fn forget(&mut self, ino: u64) {
        self.untally(ino);
        self.entries.remove(&ino);
        self.dirty.remove(&ino);
    }

    /// Names `child` (a directory if `is_dir`) `name` in directory `dir`: returns what the name
    /// named before, if anything.
    pub fn insert_entry(
        &mut self,
        dir: u64,
        name: &str,
        child: u64,
        is_dir: bool,
    ) -> Option<(u64, bool)> {
        self.untally(dir);
        let old = self
            .entries
            .get_mut(&dir)
            .unwrap_or_else(|| panic!("an entry added to {dir}, which is not a directory"))
            .insert(name.into(), (child, is_dir));
        self.dirty.insert(dir);
        self.tally(dir);
        old
    }

    /// Removes `name` from directory `dir`: returns what it named, if anything.
    pub fn remove_entry(&mut self, dir: u64, name: &str) -> Option<(u64, bool)> {
        self.untally(dir);
        let old = self
            .entries
            .get_mut(&dir)
            .unwrap_or_else(|| panic!("an entry removed from {dir}, which is not a directory"))
            .remove(name);
        self.dirty.insert(dir);
        self.tally(dir);
        old
    }

    /// Marks directory `dir` for the next checkpoint to write (its block moved, or its
    /// attributes changed with it).
    pub fn mark_dirty(&mut self, dir: u64) {
        self.untally(dir);
        self.dirty.insert(dir);
        self.tally(dir);
    }

    /// The directories the next checkpoint writes.
    pub fn dirty(&self) -> &DenseSet {
        &self.dirty
    }

    /// The checkpoint wrote every changed directory.
    pub fn written(&mut self) {
        self.dirty.clear();
        self.dirty_blocks = 0;
        self.dirty_widths.clear();
    }

    /// The dirty directories' [`bound_blocks`]: their sum and the widest (0 for none).
    pub fn dirty_bound(&self) -> (u64, u64) {
        let widest = self.dirty_widths.last_key_value().map_or(0, |(&w, _)| w);
        // Debug builds check the running tally against the walk it stands for.
        #[cfg(debug_assertions)]
        {
            let walked = self
                .dirty
                .iter()
                .map(|d| self.entries.get(&d).map_or(0, |e| bound_blocks(e.len())));
            let (sum, max) = walked.fold((0, 0), |(s, m), b| (s + b, m.max(b)));
            assert_eq!(
                (sum, max),
                (self.dirty_blocks, widest),
                "the dirty directories' tally drifted"
            );
        }
        (self.dirty_blocks, widest)
    }

    /// Directory `dir`'s bound, if it is dirty.
    fn dirty_blocks_of(&self, dir: u64) -> Option<u64> {
        self.dirty
            .contains(&dir)
            .then(|| self.entries.get(&dir).map_or(0, |e| bound_blocks(e.len())))
    }

    /// Takes `dir` out of the tally before its entries or dirtiness change.
    fn untally(&mut self, dir: u64) {
        let Some(b) = self.dirty_blocks_of(dir) else {
            return;
        };
        self.dirty_blocks -= b;
        if b > 0 {
            let n = self
                .dirty_widths
                .get_mut(&b)
                .expect("a dirty directory's width is tallied");
            *n -= 1;
            if *n == 0 {
                self.dirty_widths.remove(&b);
            }
        }
    }

    /// Puts `dir` back into the tally after the change.
    fn tally(&mut self, dir: u64) {
        let Some(b) = self.dirty_blocks_of(dir) else {
            return;
        };
        self.dirty_blocks += b;
        if b > 0 {
            *self.dirty_widths.entry(b).or_default() += 1;
        }
    }
}

impl std::ops::Index<&u64> for Directories {
    type Output = DirEntries;

    fn index(&self, dir: &u64) -> &DirEntries {
        self.entries
            .get(dir)
            .unwrap_or_else(|| panic!("{dir} is not a directory"))
    }
}

#[cfg(test)]
mod tests {
    use super::Directories;

    #[test]
    fn every_change_of_entries_marks_the_directory() {
        let mut d = Directories::default();
        d.create(1);
        d.written();
        assert!(d.dirty().is_empty());
        assert_eq!(d.insert_entry(1, "a", 2, false), None);
        assert!(d.dirty().contains(&1));
        d.written();
        assert_eq!(d.insert_entry(1, "a", 3, false), Some((2, false)));
        assert_eq!(d.remove_entry(1, "a"), Some((3, false)));
        assert!(d.dirty().contains(&1) && d[&1].is_empty());
        d.create(4);
        d.forget(4);
        assert!(!d.contains(4) && !d.dirty().contains(&4));
    }

    /// The running tally of the dirty directories' bound agrees with a walk of them through
    /// every kind of change, across checkpoints.
    #[test]
    fn the_dirty_bound_follows_every_change() {
        use super::bound_blocks;
        let walk = |d: &Directories| {
            d.dirty().iter().fold((0, 0), |(sum, widest), dir| {
                let b = d.get(dir).map_or(0, |e| bound_blocks(e.len()));
                (sum + b, widest.max(b))
            })
        };
        let mut d = Directories::default();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut names = 0u64;
        for dir in 1..=6 {
            d.create(dir);
        }
        for step in 0..4_000 {
            let dir = rng.u64(1..=6);
            match rng.u8(0..10) {
                0..=4 => {
                    names += 1;
                    d.insert_entry(dir, &format!("n{names}"), 100 + names, false);
                }
                5..=6 => {
                    let first = d[&dir].keys().next().cloned();
                    if let Some(name) = first {
                        d.remove_entry(dir, &name);
                    }
                }
                7 => d.mark_dirty(rng.u64(1..=8)),
                8 if step % 50 == 0 => {
                    d.forget(dir);
                    d.create(dir);
                }
                _ => d.written(),
            }
            assert_eq!(d.dirty_bound(), walk(&d), "after step {step}");
        }
        // Wide enough that the widest is more than one block.
        for n in 0..200 {
            d.insert_entry(1, &format!("wide{n}"), 1, false);
        }
        let (sum, widest) = d.dirty_bound();
        assert!(widest > 1 && sum >= widest, "{sum} {widest}");
        assert_eq!((sum, widest), walk(&d));
        d.written();
        assert_eq!(d.dirty_bound(), (0, 0));
    }

    #[test]
    #[should_panic(expected = "created twice")]
    fn a_directory_created_twice_is_caught() {
        let mut d = Directories::default();
        d.create(1);
        d.create(1);
    }

    #[test]
    #[should_panic(expected = "which is not a directory")]
    fn an_entry_in_a_directory_that_does_not_exist_is_caught() {
        Directories::default().insert_entry(7, "a", 2, false);
    }
}
