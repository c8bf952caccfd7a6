//! The inode file: the map of its pages, how many pages it has, which pages the next checkpoint
//! must write again, and the pages as the newest checkpoint wrote them. Changed only through
//! [`InodeFile`]'s methods, under the `meta` lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::tbfs::dense::DenseSet;
use crate::tbfs::format::{self, INODES_PER_PAGE};
use crate::tbfs::limits::IFILE_CACHE_PAGES;
use crate::tbfs::map::BlockMap;

/// The inode file in memory.
#[derive(Debug, Default)]
pub(crate) struct InodeFile {
    /// Where each page is, and the map's nodes.
    map: BlockMap,
    /// Pages the inode file has (at least as many as its map spans).
    pages: u64,
    /// Pages the cleaner moved: rewritten at the next checkpoint.
    pages_dirty: BTreeSet<u64>,
    /// Slots of freed inodes whose page must be rewritten.
    freed_slots: DenseSet,
    /// Pages as the newest checkpoint wrote them, so the next one re-encodes only the slots of
    /// inodes it writes (at most [`IFILE_CACHE_PAGES`]; a page missing is encoded whole).
    cache: HashMap<u64, Arc<format::Block>>,
}

impl InodeFile {
    /// The inode file a checkpoint names: its map and its page count.
    pub(crate) fn loaded(map: BlockMap, pages: u64) -> InodeFile {
        InodeFile {
            map,
            pages,
            ..InodeFile::default()
        }
    }

    pub(crate) fn map(&self) -> &BlockMap {
        &self.map
    }

    /// The map, for the checkpoint that places pages and the cleaner that moves its nodes.
    pub(crate) fn map_mut(&mut self) -> &mut BlockMap {
        &mut self.map
    }

    /// The map, taken out while its nodes are written (which needs the rest of the state);
    /// [`InodeFile::put_map`] puts it back.
    pub(crate) fn take_map(&mut self) -> BlockMap {
        std::mem::take(&mut self.map)
    }

    pub(crate) fn put_map(&mut self, map: BlockMap) {
        assert!(
            self.map.blocks.is_empty() && self.map.root == 0,
            "the inode file's map was put back over another"
        );
        self.map = map;
    }

    /// Pages the inode file has.
    pub(crate) fn pages(&self) -> u64 {
        self.pages
    }

    /// Grows the page count to cover the map and every inode number below `next_ino`.
    pub(crate) fn cover(&mut self, next_ino: u64) {
        self.pages = self
            .pages
            .max(self.map.blocks.len() as u64)
            .max(next_ino.div_ceil(INODES_PER_PAGE as u64));
    }

    /// The cleaner moved page `page`: the next checkpoint writes it again.
    pub(crate) fn page_moved(&mut self, page: u64) {
        self.pages_dirty.insert(page);
    }

    pub(crate) fn pages_dirty(&self) -> &BTreeSet<u64> {
        &self.pages_dirty
    }

    /// The pages the cleaner moved, for the checkpoint that writes them.
    pub(crate) fn take_pages_dirty(&mut self) -> BTreeSet<u64> {
        std::mem::take(&mut self.pages_dirty)
    }

    /// Inode `ino` was freed: its slot's page must be written again.
    pub(crate) fn slot_freed(&mut self, ino: u64) {
        self.freed_slots.insert(ino);
    }

    pub(crate) fn freed_slots(&self) -> &DenseSet {
        &self.freed_slots
    }

    /// A checkpoint wrote every page holding a freed slot.
    pub(crate) fn freed_slots_written(&mut self) {
        self.freed_slots.clear();
    }

    /// The pages a checkpoint writing the inodes `inos` writes: theirs, the freed slots' and
    /// those the cleaner moved.
    pub(crate) fn pages_to_write(&self, inos: impl Iterator<Item = u64>) -> BTreeSet<u64> {
        let mut pages: BTreeSet<u64> = inos
            .chain(self.freed_slots.iter())
            .map(|ino| ino / INODES_PER_PAGE as u64)
            .collect();
        pages.extend(self.pages_dirty.iter().copied());
        pages
    }

    /// Page `page` as the newest checkpoint wrote it, taken out of the cache.
    pub(crate) fn take_cached(&mut self, page: u64) -> Option<Arc<format::Block>> {
        self.cache.remove(&page)
    }

    /// Keeps page `page` as a checkpoint writes it; a full cache starts over.
    pub(crate) fn cache(&mut self, page: u64, block: Arc<format::Block>) {
        if self.cache.len() >= IFILE_CACHE_PAGES {
            self.cache.clear();
        }
        self.cache.insert(page, block);
    }
}

#[cfg(test)]
mod tests {
    use super::{InodeFile, IFILE_CACHE_PAGES};
    use crate::tbfs::format::INODES_PER_PAGE;
    use std::sync::Arc;

    #[test]
    fn the_pages_to_write_are_the_inodes_the_freed_slots_and_the_moved_pages() {
        let ipp = INODES_PER_PAGE as u64;
        let mut f = InodeFile::default();
        f.slot_freed(3 * ipp + 1);
        f.page_moved(7);
        let pages: Vec<u64> = f.pages_to_write([1, ipp].into_iter()).into_iter().collect();
        assert_eq!(pages, vec![0, 1, 3, 7]);
        assert_eq!(f.take_pages_dirty().len(), 1);
        f.freed_slots_written();
        assert!(f.pages_to_write(std::iter::empty()).is_empty());
        f.cover(5 * ipp + 1);
        assert_eq!(f.pages(), 6);
    }

    #[test]
    fn the_page_cache_stays_within_its_bound() {
        let mut f = InodeFile::default();
        let block = Arc::new([0u8; crate::tbfs::format::BLOCK]);
        for p in 0..IFILE_CACHE_PAGES as u64 + 1 {
            f.cache(p, block.clone());
        }
        assert!(f.cache.len() <= IFILE_CACHE_PAGES);
        assert!(f.take_cached(IFILE_CACHE_PAGES as u64).is_some());
    }

    #[test]
    #[should_panic(expected = "put back over another")]
    fn a_map_put_back_over_another_is_caught() {
        let mut f = InodeFile::default();
        f.map_mut().set(0, 99);
        let taken = f.take_map();
        f.map_mut().set(0, 100);
        f.put_map(taken);
    }
}
