//! An inode in memory: its attributes, block map and buffered blocks, behind its own mutex.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::tbfs::format::{self, *};
use crate::tbfs::map::BlockMap;
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

/// An inode's state in memory.
#[derive(Debug)]
pub(crate) struct InodeState {
    pub kind: FileKind,
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub atime_ns: i64,
    pub uid: u32,
    pub gid: u32,
    /// A device's number (`Stat::rdev`); 0 for every other kind.
    pub rdev: u32,
    pub map: BlockMap,
    pub dirty: BTreeMap<u64, DirtyBlock>,
    pub next_gen: u64,
    /// Size or mtime changed since they were last logged.
    pub attr_dirty: bool,
    /// Open handles.
    pub open: u32,
    /// Freed: every later operation on a handle to it fails.
    pub freed: bool,
    /// Whose I/O writing its buffered data is: its last writer's ([`crate::sched::Charge`]).
    pub charge: Option<crate::sched::Charge>,
    /// Raised whenever a name of this inode is removed or moved: the path cache's entries
    /// for it are stale from then (see `names`).
    pub names_gen: u64,
    /// The last log of the newest checkpoint that wrote a change of this inode only a
    /// checkpoint records (`Changes::only_checkpoint_records`); 0 if none did in this process.
    /// A sync of the file waits for it. Its data, size and times need no checkpoint: its data-only logs
    /// carry them, and recovery replays those over whichever checkpoint it starts from.
    pub ckpt_seq: u64,
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
        }
    }

    /// A handle to the inode (number `ino`) opens; refused once the count is at its limit,
    /// which only a caller that never closes reaches.
    pub fn open_handle(&mut self, ino: u64) -> crate::tbfs::Result<()> {
        self.open = self.open.checked_add(1).ok_or_else(|| {
            crate::tbfs::Error::Invalid(format!("inode {ino}: {} handles open", self.open))
        })?;
        Ok(())
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

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The kind of a stored mode (the record decoder admits only the kinds there are).
pub(super) fn mode_kind(mode: u32) -> FileKind {
    FileKind::from_mode(mode).unwrap_or(FileKind::File)
}
