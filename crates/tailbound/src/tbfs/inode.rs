//! An inode in memory: its attributes, block map and buffered blocks, behind its own mutex.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::tbfs::format::{self, *};
use crate::tbfs::limits::FILE_BYTES_MAX;
use crate::tbfs::map::BlockMap;
use crate::tbfs::write_rate::WriteRate;
use crate::tbfs::FileKind;

/// The root directory's inode number.
pub(crate) const ROOT_INO: u64 = 1;
/// A buffered block not yet in a log. Shared with a sealed log waiting for the log writer: a
/// write then changes a copy (`Arc::make_mut`), never the bytes being written.
#[derive(Debug)]
pub(crate) struct DirtyBlock {
    pub gen: u64,
    /// Changed only through [`DirtyBlock::write`], which keeps `crc` and `for_log` right.
    data: Arc<Block>,
    /// A second reference to `data`, taken when the bytes were written, for the log that seals
    /// this generation ([`DirtyBlock::share_with_log`]). Cloning the buffer there instead, under
    /// `meta` and milliseconds after the write, took a cache miss on the reference count of
    /// every block: half of a checkpoint's own time under the fileserver workload.
    for_log: Option<Arc<Block>>,
    /// `format::crc_blocks(data)`, taken while the bytes were fresh in the cache: a log's
    /// payload CRC is put together from these (`format::crc_extend_block`) instead of reading
    /// every block again when the log is written.
    crc: u32,
    /// Already in a sealed log not yet written, as this generation: that log's sequence (or a
    /// later one) and whether the barrier policy flushes after it. A later commit leaves the
    /// block to that log instead of writing it again; a sync waits for it.
    pub sealed_in: Option<(u64, bool)>,
}

impl DirtyBlock {
    pub fn new(gen: u64, data: Arc<Block>) -> DirtyBlock {
        let crc = format::crc_blocks(&data[..]);
        DirtyBlock {
            gen,
            for_log: Some(data.clone()),
            data,
            crc,
            sealed_in: None,
        }
    }

    pub fn data(&self) -> &Arc<Block> {
        &self.data
    }

    /// A reference to the bytes for the log sealing them (the one taken when they were written,
    /// if no log took it yet).
    pub fn share_with_log(&mut self) -> Arc<Block> {
        self.for_log.take().unwrap_or_else(|| self.data.clone())
    }

    pub fn into_data(self) -> Arc<Block> {
        // Only the buffer's own reference: a spare is recycled only when nothing else holds it.
        drop(self.for_log);
        self.data
    }

    pub fn crc(&self) -> u32 {
        self.crc
    }

    /// Puts `bytes` at `within` as generation `gen` (a copy if a sealed log shares the buffer).
    pub fn write(&mut self, gen: u64, within: usize, bytes: &[u8]) {
        // The log's reference is taken again below: without it the buffer is changed in place
        // unless a sealed log holds it.
        self.for_log = None;
        let data = Arc::make_mut(&mut self.data);
        data[within..within + bytes.len()].copy_from_slice(bytes);
        self.crc = format::crc_blocks(&data[..]);
        self.for_log = Some(self.data.clone());
        self.gen = gen;
        self.sealed_in = None;
    }
}

/// An inode's state in memory, changed only through its methods, which keep these rules:
///
/// - No buffered block and no mapped block lies wholly past `size`: a write grows the size to
///   cover what it buffered ([`InodeState::grow_to`]), and a truncation drops what lies past
///   the new size with it ([`InodeState::truncate`]). Neither takes a size past
///   [`FILE_BYTES_MAX`].
/// - The link and open-handle counts never wrap: a rise past the limit is refused and a fall
///   below zero is reported to the caller, which poisons the pool, with the count unchanged.
/// - Buffer generations only rise ([`InodeState::take_gen`]), so a log written later never
///   releases a buffer rewritten after it was sealed.
/// - `attr_dirty` is set by whoever changes the size or a time a data-only log carries, and
///   cleared only once a log carries them ([`InodeState::attr_logged`]).
#[derive(Debug)]
pub(crate) struct InodeState {
    kind: FileKind,
    mode: u32,
    nlink: u32,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    atime_ns: i64,
    uid: u32,
    gid: u32,
    /// A device's number (`Stat::rdev`); 0 for every other kind.
    rdev: u32,
    map: BlockMap,
    dirty: BTreeMap<u64, DirtyBlock>,
    next_gen: u64,
    /// Size or mtime changed since they were last logged.
    attr_dirty: bool,
    /// Open handles.
    open: u32,
    /// Freed: every later operation on a handle to it fails.
    freed: bool,
    /// Whose I/O writing its buffered data is: its last writer's ([`crate::sched::Charge`]).
    charge: Option<crate::sched::Charge>,
    /// Raised whenever a name of this inode is removed or moved: the path cache's entries
    /// for it are stale from then (see `names`).
    names_gen: u64,
    /// The last log of the newest checkpoint that wrote a change of this inode only a
    /// checkpoint records (`Changes::only_checkpoint_records`); 0 if none did in this process.
    /// A sync of the file waits for it. Its data, size and times need no checkpoint: its data-only logs
    /// carry them, and recovery replays those over whichever checkpoint it starts from.
    ckpt_seq: u64,
    /// How often its blocks are overwritten, for the cleaner's copies (`WriteRate`).
    writes: WriteRate,
    /// Counted by commits that hold `meta` and have yet to seal it (a checkpoint may run inside
    /// a run's space check): writers wait for `meta` before they buffer more into it, so a
    /// commit writes no more than it counted.
    held: u32,
}

/// Lets writers buffer into the inodes of `cells` again: one hold each ([`InodeState::hold`])
/// is let go.
pub(crate) fn unhold_all(cells: &[Arc<InodeCell>]) {
    for cell in cells {
        cell.lock().unhold();
    }
}

/// What [`InodeState::truncate`] took away: the addresses no longer mapped, and how many
/// buffered blocks were dropped.
#[derive(Debug, Default)]
pub(crate) struct Trimmed {
    pub unmapped: Vec<u64>,
    pub dropped: u64,
}

impl InodeState {
    pub fn new(kind: FileKind, mode: u32, now: i64, owner: (u32, u32)) -> InodeState {
        InodeState {
            kind,
            mode,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            size: 0,
            mtime_ns: now,
            ctime_ns: now,
            atime_ns: now,
            uid: owner.0,
            gid: owner.1,
            rdev: 0,
            map: BlockMap::default(),
            dirty: BTreeMap::new(),
            next_gen: 1,
            attr_dirty: true,
            open: 0,
            freed: false,
            names_gen: 0,
            charge: None,
            ckpt_seq: 0,
            writes: WriteRate::default(),
            held: 0,
        }
    }

    /// An inode as a checkpoint recorded it (`kind` decoded from `r.mode`), with its map read
    /// back. The record comes from the device, so nothing of it is asserted here; recovery
    /// and fsck judge it.
    pub fn from_record(kind: FileKind, r: &InodeRecord, map: BlockMap) -> InodeState {
        InodeState {
            kind,
            mode: r.mode & 0o7777,
            nlink: r.nlink,
            size: r.size,
            mtime_ns: r.mtime_ns,
            ctime_ns: r.ctime_ns,
            atime_ns: r.atime_ns,
            uid: r.uid,
            gid: r.gid,
            rdev: r.rdev,
            map,
            dirty: BTreeMap::new(),
            next_gen: 1,
            attr_dirty: false,
            open: 0,
            freed: false,
            charge: None,
            names_gen: 0,
            ckpt_seq: 0,
            writes: WriteRate::default(),
            held: 0,
        }
    }

    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// The permission bits (without the kind's).
    pub fn mode(&self) -> u32 {
        self.mode
    }

    pub fn set_mode(&mut self, mode: u32) {
        self.mode = mode & 0o7777;
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn set_uid(&mut self, uid: u32) {
        self.uid = uid;
    }

    pub fn gid(&self) -> u32 {
        self.gid
    }

    pub fn set_gid(&mut self, gid: u32) {
        self.gid = gid;
    }

    pub fn rdev(&self) -> u32 {
        self.rdev
    }

    pub fn set_rdev(&mut self, rdev: u32) {
        self.rdev = rdev;
    }

    pub fn mtime_ns(&self) -> i64 {
        self.mtime_ns
    }

    pub fn set_mtime_ns(&mut self, t: i64) {
        self.mtime_ns = t;
    }

    pub fn ctime_ns(&self) -> i64 {
        self.ctime_ns
    }

    pub fn set_ctime_ns(&mut self, t: i64) {
        self.ctime_ns = t;
    }

    pub fn atime_ns(&self) -> i64 {
        self.atime_ns
    }

    pub fn set_atime_ns(&mut self, t: i64) {
        self.atime_ns = t;
    }

    /// The contents changed at `now`: the modification and change times both become it.
    pub fn touch_modified(&mut self, now: i64) {
        self.mtime_ns = now;
        self.ctime_ns = now;
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Blocks the size covers, the last one partly.
    fn size_blocks(&self) -> u64 {
        self.size.div_ceil(BLOCK_U64)
    }

    /// No buffered block lies wholly past the size.
    fn buffers_within_size(&self) -> bool {
        self.dirty
            .last_key_value()
            .is_none_or(|(&b, _)| b < self.size_blocks())
    }

    /// A write ending at `end` buffered its blocks: the size covers them. Never shrinks.
    pub fn grow_to(&mut self, end: u64) {
        assert!(end <= FILE_BYTES_MAX, "size {end} past the largest file");
        self.size = self.size.max(end);
        assert!(
            self.buffers_within_size(),
            "a buffered block past the size {}",
            self.size
        );
    }

    /// Sets the size to `len` and drops every mapped or buffered block wholly past it; returns
    /// what was dropped, for the caller to count out of the segments and the write budget.
    pub fn truncate(&mut self, len: u64) -> Trimmed {
        assert!(len <= FILE_BYTES_MAX, "size {len} past the largest file");
        self.size = len;
        let keep = self.size_blocks();
        let unmapped = self.map.truncate(keep);
        let dropped = self.dirty.split_off(&keep).len() as u64;
        Trimmed { unmapped, dropped }
    }

    pub fn nlink(&self) -> u32 {
        self.nlink
    }

    /// A name (or a subdirectory's `..`) now links to the inode (number `ino`); refused at the
    /// count's limit, which only a bug in the link bookkeeping reaches.
    pub fn add_link(&mut self, ino: u64) -> crate::tbfs::Result<()> {
        self.nlink = self.nlink.checked_add(1).ok_or_else(|| {
            crate::tbfs::Error::Invalid(format!("inode {ino}: {} links", self.nlink))
        })?;
        Ok(())
    }

    /// A link went: false, with the count left at zero, if there was none to drop (the caller
    /// poisons the pool: [`crate::tbfs::Engine::drop_nlink`]).
    #[must_use]
    pub fn drop_link(&mut self) -> bool {
        match self.nlink.checked_sub(1) {
            Some(n) => {
                self.nlink = n;
                true
            }
            None => false,
        }
    }

    /// A directory removed: its name and its `.` go together.
    pub fn drop_dir_links(&mut self) {
        debug_assert_eq!(
            self.kind,
            FileKind::Dir,
            "only a directory drops all its links"
        );
        self.nlink = 0;
    }

    /// The count recovery found by walking the tree (or a test sets to stage a bug).
    pub fn set_nlink(&mut self, n: u32) {
        self.nlink = n;
    }

    pub fn open_handles(&self) -> u32 {
        self.open
    }

    /// A handle to the inode (number `ino`) opens; refused once the count is at its limit,
    /// which only a caller that never closes reaches.
    pub fn open_handle(&mut self, ino: u64) -> crate::tbfs::Result<()> {
        self.open = self.open.checked_add(1).ok_or_else(|| {
            crate::tbfs::Error::Invalid(format!("inode {ino}: {} handles open", self.open))
        })?;
        Ok(())
    }

    /// A handle closed: false, with the count left at zero, if none was open (the caller
    /// poisons the pool: [`crate::tbfs::Engine::drop_open`]).
    #[must_use]
    pub fn close_handle(&mut self) -> bool {
        match self.open.checked_sub(1) {
            Some(n) => {
                self.open = n;
                true
            }
            None => false,
        }
    }

    /// Neither linked nor open, and not freed yet: the inode is to be freed.
    pub fn unreferenced(&self) -> bool {
        self.open == 0 && self.nlink == 0 && !self.freed
    }

    pub fn freed(&self) -> bool {
        self.freed
    }

    /// Marks the inode freed, once.
    pub fn mark_freed(&mut self) {
        assert!(!self.freed, "an inode freed twice");
        self.freed = true;
    }

    /// The generation for the next buffered change of a block: each is above every one before.
    pub fn take_gen(&mut self) -> u64 {
        let gen = self.next_gen;
        self.next_gen = gen.checked_add(1).expect("buffer generations ran out");
        gen
    }

    pub fn attr_dirty(&self) -> bool {
        self.attr_dirty
    }

    /// The size or a time changed and no log carries it yet.
    pub fn mark_attr_dirty(&mut self) {
        self.attr_dirty = true;
    }

    /// A log now carries the size and times as they are.
    pub fn attr_logged(&mut self) {
        self.attr_dirty = false;
    }

    pub fn charge(&self) -> Option<crate::sched::Charge> {
        self.charge
    }

    /// Whether a commit counted this inode and has yet to seal it (`held`).
    pub fn held(&self) -> bool {
        self.held > 0
    }

    pub fn hold(&mut self) {
        self.held += 1;
    }

    pub fn unhold(&mut self) {
        assert!(self.held > 0, "an inode let go that no commit held");
        self.held -= 1;
    }

    pub fn set_charge(&mut self, charge: Option<crate::sched::Charge>) {
        self.charge = charge;
    }

    pub fn names_gen(&self) -> u64 {
        self.names_gen
    }

    /// A name of the inode was removed or moved: the path cache's entries for it go stale.
    pub fn names_changed(&mut self) {
        self.names_gen += 1;
    }

    pub fn ckpt_seq(&self) -> u64 {
        self.ckpt_seq
    }

    /// A checkpoint whose last log is `seq` wrote the inode's namespace change.
    pub fn set_ckpt_seq(&mut self, seq: u64) {
        self.ckpt_seq = seq;
    }

    /// How often the file's blocks are overwritten (a hint, not recorded).
    pub fn writes(&self) -> &WriteRate {
        &self.writes
    }

    /// A log took `overwrites` of the file's blocks replacing mapped versions, at host clock
    /// `now` ([`WriteRate::note`]).
    pub fn note_writes(&mut self, now: u64, overwrites: u64, window: u64) {
        self.writes.note(now, overwrites, window);
    }

    pub fn map(&self) -> &BlockMap {
        &self.map
    }

    pub fn map_mut(&mut self) -> &mut BlockMap {
        &mut self.map
    }

    /// The buffered blocks, by block number.
    pub fn dirty(&self) -> &BTreeMap<u64, DirtyBlock> {
        &self.dirty
    }

    pub fn dirty_mut(&mut self) -> &mut BTreeMap<u64, DirtyBlock> {
        &mut self.dirty
    }

    /// The map and the buffers at once, for sealing buffers into the map.
    pub fn map_and_dirty_mut(&mut self) -> (&mut BlockMap, &mut BTreeMap<u64, DirtyBlock>) {
        (&mut self.map, &mut self.dirty)
    }

    pub fn record(&self, ino: u64) -> InodeRecord {
        InodeRecord {
            ino,
            mode: self.kind.type_bits() | (self.mode & 0o7777),
            nlink: self.nlink,
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            root: self.map.root,
            height: self.map.height,
            uid: self.uid,
            gid: self.gid,
            atime_ns: self.atime_ns,
            extents: self.map.inline.unwrap_or_default(),
            rdev: self.rdev,
        }
    }
}

#[derive(Debug)]
pub(crate) struct InodeCell {
    pub ino: u64,
    pub st: Mutex<InodeState>,
}

impl InodeCell {
    pub fn lock(&self) -> MutexGuard<'_, InodeState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A directory's entries: name → (inode, is a directory).
pub(crate) type DirEntries = BTreeMap<compact_str::CompactString, (u64, bool)>;

/// The kind of a stored mode (the record decoder admits only the kinds there are).
pub(super) fn mode_kind(mode: u32) -> FileKind {
    FileKind::from_mode(mode).unwrap_or(FileKind::File)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tbfs::blocks::zeroed_block;

    fn file() -> InodeState {
        InodeState::new(FileKind::File, 0o644, 0, (0, 0))
    }

    fn buffer(st: &mut InodeState, block: u64) {
        let gen = st.take_gen();
        st.dirty_mut()
            .insert(block, DirtyBlock::new(gen, zeroed_block()));
    }

    #[test]
    fn a_link_dropped_at_zero_is_refused_and_the_count_stays_at_zero() {
        let mut st = file();
        assert!(st.drop_link());
        assert_eq!(st.nlink(), 0);
        assert!(!st.drop_link());
        assert_eq!(st.nlink(), 0, "the count did not wrap");
    }

    #[test]
    fn a_link_added_at_the_limit_is_refused_and_the_count_kept() {
        let mut st = file();
        st.set_nlink(u32::MAX);
        assert!(st.add_link(7).is_err());
        assert_eq!(st.nlink(), u32::MAX);
    }

    #[test]
    fn a_handle_closed_with_none_open_is_refused_and_the_count_stays_at_zero() {
        let mut st = file();
        st.open_handle(7).unwrap();
        assert!(st.close_handle());
        assert!(!st.close_handle());
        assert_eq!(st.open_handles(), 0, "the count did not wrap");
        assert!(!st.unreferenced(), "still linked");
        assert!(st.drop_link());
        assert!(st.unreferenced());
    }

    #[test]
    fn generations_only_rise() {
        let mut st = file();
        let gens: Vec<u64> = (0..4).map(|_| st.take_gen()).collect();
        assert!(gens.windows(2).all(|w| w[0] < w[1]), "{gens:?}");
    }

    #[test]
    #[should_panic(expected = "a buffered block past the size")]
    fn a_size_short_of_a_buffered_block_fires_the_assertion() {
        let mut st = file();
        buffer(&mut st, 3);
        // Covers blocks 0 and 1 only.
        st.grow_to(BLOCK_U64 + 1);
    }

    #[test]
    #[should_panic(expected = "past the largest file")]
    fn a_size_past_the_largest_file_fires_the_assertion() {
        file().grow_to(FILE_BYTES_MAX + 1);
    }

    #[test]
    fn a_write_grows_the_size_and_never_shrinks_it() {
        let mut st = file();
        buffer(&mut st, 1);
        st.grow_to(2 * BLOCK_U64);
        st.grow_to(10);
        assert_eq!(st.size(), 2 * BLOCK_U64);
    }

    #[test]
    fn a_truncation_drops_the_blocks_past_the_new_size() {
        let mut st = file();
        for b in 0..4 {
            buffer(&mut st, b);
            st.map_mut().set(b, 100 + b);
        }
        st.grow_to(4 * BLOCK_U64);
        // Block 1 keeps its first byte; blocks 2 and 3 go.
        let trimmed = st.truncate(BLOCK_U64 + 1);
        assert_eq!(trimmed.dropped, 2);
        assert_eq!(trimmed.unmapped, vec![102, 103]);
        assert_eq!(st.size(), BLOCK_U64 + 1);
        assert_eq!(st.dirty().keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(st.map().get(1), 101);
        assert_eq!(st.map().get(2), 0);
    }

    #[test]
    #[should_panic(expected = "an inode freed twice")]
    fn an_inode_freed_twice_fires_the_assertion() {
        let mut st = file();
        st.mark_freed();
        st.mark_freed();
    }

    #[test]
    fn attributes_stay_dirty_until_logged() {
        let mut st = file();
        assert!(st.attr_dirty(), "a new inode is not logged yet");
        st.attr_logged();
        assert!(!st.attr_dirty());
        st.mark_attr_dirty();
        assert!(st.attr_dirty());
    }
}
