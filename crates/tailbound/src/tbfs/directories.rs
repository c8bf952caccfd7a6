//! The directories: each one's entries, and which of them the next checkpoint writes again.
//! Changed only through [`Directories`]'s methods, under the `meta` lock.

use std::collections::HashMap;

use crate::tbfs::dense::DenseSet;
use crate::tbfs::inode::DirEntries;

/// Every directory's entries by inode number, and the directories changed since the last
/// checkpoint. Its methods keep: a change of a directory's entries marks it for the next
/// checkpoint; a directory is created once, empty; only a directory that exists gains or loses
/// an entry.
#[derive(Debug, Default)]
pub(crate) struct Directories {
    entries: HashMap<u64, DirEntries>,
    /// Directories whose entries the next checkpoint writes.
    dirty: DenseSet,
}

impl Directories {
    /// The directories a checkpoint holds (or a read-only view reads): none changed since.
    pub fn loaded(entries: HashMap<u64, DirEntries>) -> Directories {
        Directories {
            entries,
            dirty: DenseSet::default(),
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
        let old = self.entries.insert(dir, DirEntries::new());
        assert!(old.is_none(), "directory {dir} created twice");
        self.dirty.insert(dir);
    }

    /// Inode `ino` is freed: if it was a directory, it is gone and nothing writes it.
    pub fn forget(&mut self, ino: u64) {
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
        let old = self
            .entries
            .get_mut(&dir)
            .unwrap_or_else(|| panic!("an entry added to {dir}, which is not a directory"))
            .insert(name.into(), (child, is_dir));
        self.dirty.insert(dir);
        old
    }

    /// Removes `name` from directory `dir`: returns what it named, if anything.
    pub fn remove_entry(&mut self, dir: u64, name: &str) -> Option<(u64, bool)> {
        let old = self
            .entries
            .get_mut(&dir)
            .unwrap_or_else(|| panic!("an entry removed from {dir}, which is not a directory"))
            .remove(name);
        self.dirty.insert(dir);
        old
    }

    /// Marks directory `dir` for the next checkpoint to write (its block moved, or its
    /// attributes changed with it).
    pub fn mark_dirty(&mut self, dir: u64) {
        self.dirty.insert(dir);
    }

    /// The directories the next checkpoint writes.
    pub fn dirty(&self) -> &DenseSet {
        &self.dirty
    }

    /// The checkpoint wrote every changed directory.
    pub fn written(&mut self) {
        self.dirty.clear();
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
