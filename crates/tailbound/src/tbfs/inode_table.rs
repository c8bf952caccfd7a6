//! The inode table: every inode in memory by number, and the numbering. Changed only through
//! [`InodeTable`]'s methods, under the `meta` lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::tbfs::inode::{InodeCell, ROOT_INO};

/// The inodes by number, the numbers freed for reuse, and the next number never used. Its
/// methods keep: every inode's number is below `next`; a freed number names no inode and is
/// handed out again before `next` is; the root is never freed.
#[derive(Debug, Default)]
pub(crate) struct InodeTable {
    cells: HashMap<u64, Arc<InodeCell>>,
    free: BTreeSet<u64>,
    /// Every number from here on is unused.
    next: u64,
}

impl InodeTable {
    /// A new pool's table: the root alone.
    pub fn formatted(root: Arc<InodeCell>) -> InodeTable {
        assert_eq!(root.ino, ROOT_INO, "a new pool's first inode is its root");
        InodeTable {
            cells: HashMap::from([(ROOT_INO, root)]),
            free: BTreeSet::new(),
            next: ROOT_INO + 1,
        }
    }

    /// The table a checkpoint holds: `cells`, numbered below `next`; the numbers between the
    /// root's and `next` that name no inode are free. `Err` names an inode numbered at or past
    /// `next` (storage that contradicts itself).
    pub fn loaded(cells: HashMap<u64, Arc<InodeCell>>, next: u64) -> Result<InodeTable, u64> {
        let next = next.max(ROOT_INO + 1);
        if let Some(&ino) = cells.keys().find(|&&ino| ino >= next) {
            return Err(ino);
        }
        let free = (ROOT_INO + 1..next)
            .filter(|i| !cells.contains_key(i))
            .collect();
        Ok(InodeTable { cells, free, next })
    }

    /// A read-only view's table: nothing is numbered in it.
    pub fn viewed(cells: HashMap<u64, Arc<InodeCell>>) -> InodeTable {
        InodeTable {
            cells,
            ..InodeTable::default()
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Arc<InodeCell>> {
        self.cells.get(&ino)
    }

    pub fn contains(&self, ino: u64) -> bool {
        self.cells.contains_key(&ino)
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<InodeCell>> {
        self.cells.values()
    }

    /// The next number never used (what a checkpoint records).
    pub fn next_ino(&self) -> u64 {
        self.next
    }

    /// Adds the inode `make` builds with the number it is given: the lowest freed one, else the
    /// next.
    pub fn create(&mut self, make: impl FnOnce(u64) -> InodeCell) -> Arc<InodeCell> {
        let ino = match self.free.pop_first() {
            Some(ino) => ino,
            None => {
                let ino = self.next;
                self.next = ino.checked_add(1).expect("inode numbers overflow");
                ino
            }
        };
        let cell = Arc::new(make(ino));
        assert_eq!(cell.ino, ino, "an inode built with another number");
        let old = self.cells.insert(ino, cell.clone());
        assert!(old.is_none(), "inode number {ino} handed out while in use");
        cell
    }

    /// Drops inode `ino` and frees its number.
    pub fn free(&mut self, ino: u64) {
        assert_ne!(ino, ROOT_INO, "the root inode freed");
        assert!(
            self.cells.remove(&ino).is_some(),
            "inode {ino} freed that is not in the table"
        );
        self.free.insert(ino);
    }
}

impl std::ops::Index<&u64> for InodeTable {
    type Output = Arc<InodeCell>;

    fn index(&self, ino: &u64) -> &Arc<InodeCell> {
        self.cells
            .get(ino)
            .unwrap_or_else(|| panic!("inode {ino} not in the table"))
    }
}

#[cfg(test)]
mod tests {
    use super::InodeTable;
    use crate::tbfs::inode::{InodeCell, InodeState, ROOT_INO};
    use crate::tbfs::FileKind;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    fn cell(ino: u64) -> InodeCell {
        InodeCell {
            ino,
            st: Mutex::new(InodeState::new(FileKind::File, 0o644, 0, (0, 0))),
        }
    }

    #[test]
    fn freed_numbers_are_handed_out_again_lowest_first() {
        let mut t = InodeTable::formatted(Arc::new(cell(ROOT_INO)));
        let a = t.create(cell).ino;
        let b = t.create(cell).ino;
        let c = t.create(cell).ino;
        assert_eq!((a, b, c), (ROOT_INO + 1, ROOT_INO + 2, ROOT_INO + 3));
        t.free(c);
        t.free(a);
        assert_eq!(t.create(cell).ino, a);
        assert_eq!(t.create(cell).ino, c);
        assert_eq!(t.create(cell).ino, ROOT_INO + 4);
        assert_eq!((t.len(), t.next_ino()), (5, ROOT_INO + 5));
        assert!(t.contains(b) && t[&b].ino == b);
    }

    #[test]
    fn a_loaded_table_frees_the_numbers_no_inode_has() {
        let cells = HashMap::from([
            (ROOT_INO, Arc::new(cell(ROOT_INO))),
            (ROOT_INO + 2, Arc::new(cell(ROOT_INO + 2))),
        ]);
        let mut t = InodeTable::loaded(cells, ROOT_INO + 3).unwrap();
        assert_eq!(t.create(cell).ino, ROOT_INO + 1);
        assert_eq!(t.create(cell).ino, ROOT_INO + 3);
    }

    #[test]
    fn a_loaded_inode_past_the_next_number_is_refused() {
        let cells = HashMap::from([(ROOT_INO + 5, Arc::new(cell(ROOT_INO + 5)))]);
        assert_eq!(
            InodeTable::loaded(cells, ROOT_INO + 3).err(),
            Some(ROOT_INO + 5)
        );
    }

    #[test]
    #[should_panic(expected = "not in the table")]
    fn freeing_an_inode_twice_is_caught() {
        let mut t = InodeTable::formatted(Arc::new(cell(ROOT_INO)));
        let a = t.create(cell).ino;
        t.free(a);
        t.free(a);
    }

    #[test]
    #[should_panic(expected = "the root inode freed")]
    fn freeing_the_root_is_caught() {
        InodeTable::formatted(Arc::new(cell(ROOT_INO))).free(ROOT_INO);
    }
}
