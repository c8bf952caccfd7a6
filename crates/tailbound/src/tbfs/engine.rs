//! The file tree: namespace, inodes, buffered file data, and the public [`Fs`] / [`File`] API.
//!
//! Locking: one `meta` mutex guards the namespace, the inode table, the log writer and segment
//! usage; each inode has its own mutex for its attributes, block map and buffered data. Order:
//! `meta` before an inode; the write path takes only the inode (and the small `dirty` set), so data
//! copies into buffers happen outside any global lock, and so does a close unless it is the last
//! handle to an unlinked file. Storage is written only by `commit`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::SeekFrom;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::dense::DenseSet;
use super::format::{self, Block, InodeRecord, BLOCK, BLOCK_U64, NAME_MAX};
use super::map::BlockMap;
use super::*;

/// The root directory's inode number.
pub(crate) const ROOT_INO: u64 = 1;
/// Largest file, so a block map always fits in memory (16 Mi blocks).
pub const FILE_BYTES_MAX: u64 = 64 << 30;

/// Blocks a buffered write's space check asks for beyond its own and a thirty-second of them
/// (`make_room_for_write`): the summary, map nodes and attributes record of the commit that
/// carries it.
const WRITE_COMMIT_SLACK_BLOCKS: u64 = 8;
/// A file holding 1/this of the write buffer is written on its own when the buffer fills, and
/// behind its writes (see [`Inner::write_behind_bytes`]).
const OWN_FLUSH_DIVISOR: u64 = 8;
/// The least a file must hold to be written on its own or behind its writes (one payload chunk).
const WRITE_BEHIND_MIN: u64 = 1 << 20;
/// A direct write goes out in pieces of at most this many bytes, each made while the one before
/// it is in the device ([`Inner::write_direct`]).
pub(crate) const DIRECT_PIECE_BYTES: u64 = 8 << 20;

/// A direct write's first piece is at most this many bytes, and each next one twice the one
/// before, up to [`DIRECT_PIECE_BYTES`]: the first is copied with nothing of the write in the
/// device, so a large first piece leaves the writer idle in `sched` that long.
pub(crate) const DIRECT_FIRST_PIECE_BYTES: u64 = 1 << 20;

/// One piece of a direct write, sealed ([`Inner::direct_piece`]).
struct DirectPiece {
    /// The end of the write so far.
    end: u64,
    /// Its payloads, started.
    started: Vec<Arc<AheadPayload>>,
}

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
    /// checkpoint records (`Meta::ns_changed`); 0 if none did in this process. A sync of the
    /// file waits for it. Its data, size and times need no checkpoint: its data-only logs
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

/// Inode pages kept in [`Meta::ifile_cache`] (16 MiB); past it the cache starts over.
pub(crate) const IFILE_CACHE_PAGES: usize = 4096;

/// A directory's entries: name → (inode, is a directory).
pub(crate) type DirEntries = BTreeMap<compact_str::CompactString, (u64, bool)>;

/// Per-segment usage, for choosing where the next logs go.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegUsage {
    /// Blocks the in-memory state references in each segment.
    pub live: Vec<u32>,
    /// Sequence of the newest log that dropped a block of the segment in a way roll-forward
    /// does not replay (a checkpoint rewriting it, a truncation, a deletion, a released pin):
    /// until a superblock names a checkpoint written after it, the durable state may use it.
    pub dead_at: Vec<u64>,
    /// One more than the sequence of the newest data-only log that superseded a block of the
    /// segment which no retained checkpoint but the newest (or none) references (`seg_supersede`):
    /// once that log is durable, recovery replays it over any stale pointer. 0 for none.
    pub soft_dead_at: Vec<u64>,
    /// Highest log sequence written into each segment.
    pub last_seq: Vec<u64>,
    /// Blocks in each segment that the live tree no longer references but a retained checkpoint
    /// does (see `lifecycle`).
    pub pinned: Vec<u32>,
}

/// Where the next log goes and the log being built (under `meta`). Logs are laid out here and
/// sealed into [`Inner::log_queue`]; the log writer ([`LogWriter`]) writes them in order.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub pos: u64,
    pub cur_seg: u64,
    pub next_seg: u64,
    /// Sequence of the next log.
    pub seq: u64,
    pub log: Option<LogBuild>,
    /// Buffered blocks the next sealed log releases once it is written: `(inode, [(block,
    /// generation)])`, set by a commit just before its last log is sealed.
    pub release: Vec<Release>,
    /// Ahead payloads sealed under the current hold of `meta`: the holder writes them after
    /// it lets go ([`MetaGuard`]).
    pub sealed_ahead: Vec<Arc<AheadPayload>>,
    /// Smaller ahead logs sealed under the current hold, written whole by the log writer:
    /// `(sequence, inodes, flush)`.
    pub sealed_small: Vec<(u64, Vec<u64>, bool)>,
    /// Whose I/O the data-only logs being laid out are (their files' last writer's); `None`
    /// outside a data commit, so other logs stay the I/O of the thread writing them.
    pub charge: Option<crate::sched::Charge>,
    /// A checkpoint a superblock follows at once is being laid out: its logs are not flushed on
    /// their own under `every-checkpoint`, the superblock's flush covers them (see
    /// [`Inner::commit_checkpoint_for_superblock`]).
    pub refreshing: bool,
    /// A direct write's logs are being laid out: every one with a payload has it written apart
    /// from its summary, however small, so the write waits for no other log
    /// ([`Inner::write_direct`]).
    pub direct: bool,
}

/// Buffered blocks of one inode a log writes, as `(block, generation)`: they go once it is
/// written, unless rewritten meanwhile.
pub(crate) type Release = (Arc<InodeCell>, Vec<(u64, u64)>);

#[derive(Debug)]
pub(crate) struct LogBuild {
    pub start: u64,
    pub flags: u16,
    pub descriptors: Vec<format::Descriptor>,
    /// Payload blocks added so far, in order.
    pub payload: Vec<Arc<Block>>,
    /// Their CRCs where already known (buffered file blocks), in the same order.
    pub crcs: Vec<Option<u32>>,
}

/// What waits in [`Inner::log_queue`], in the order the log writer writes it.
#[derive(Debug)]
pub(crate) enum Queued {
    Log(SealedLog),
    /// A superblock naming the checkpoint that ends right before log `next.sequence`: written
    /// (after a flush, and flushed) once every log before that is, with the CRC of the last.
    Superblock(format::Superblock),
}

impl Queued {
    /// Written by `write_logs_until(seq)` when this is below `seq`: a log's sequence, or for a
    /// superblock the sequence of the log after it (so waiting for one's own logs does not
    /// wait for a superblock sealed behind them).
    pub fn order(&self) -> u64 {
        match self {
            Queued::Log(l) => l.summary.sequence,
            Queued::Superblock(sb) => sb.next.sequence,
        }
    }

    /// For what may name blocks of earlier logs (a log that is not data-only, a superblock):
    /// the sequence below which every ahead payload must be complete before it is written.
    pub fn barrier(&self) -> Option<u64> {
        match self {
            Queued::Log(l) if l.summary.flags & (format::FLAG_AHEAD | format::FLAG_PAD) == 0 => {
                Some(l.summary.sequence)
            }
            Queued::Log(_) => None,
            Queued::Superblock(sb) => Some(sb.next.sequence),
        }
    }
}

/// A log laid out under `meta` and waiting for the log writer: its place, sequence and
/// descriptors are final; the writer fills in the payload CRC and the previous log's CRC.
#[derive(Debug)]
pub(crate) struct SealedLog {
    pub start: u64,
    pub summary: format::Summary,
    pub payload: Vec<Arc<Block>>,
    /// The payload blocks' CRCs where known ([`payload_crc`]).
    pub crcs: Vec<Option<u32>>,
    /// A large data-only log's payload, written by the thread that sealed it (or by whoever
    /// needs it done first) while the log writer writes only its summary.
    pub ahead: Option<Arc<AheadPayload>>,
    /// Flush the device after it (the barrier policy).
    pub flush: bool,
}

/// The CRC of a payload, put together from its blocks' CRCs where they are known (taken when
/// the blocks were written, so the blocks are not read again here) and computed from the
/// others. Debug builds check every known one against the bytes.
pub(crate) fn payload_crc(blocks: &[Arc<Block>], crcs: &[Option<u32>]) -> u32 {
    debug_assert_eq!(blocks.len(), crcs.len());
    blocks.iter().zip(crcs).fold(0, |crc, (b, known)| {
        let own = known.unwrap_or_else(|| format::crc_blocks(&b[..]));
        debug_assert_eq!(own, format::crc_blocks(&b[..]), "a stale block CRC");
        format::crc_extend_block(crc, own)
    })
}

/// Where an ahead payload's write stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AheadState {
    Pending,
    Writing,
    Done,
    Failed,
}

/// The payload of a data-only log written apart from its summary (`FLAG_AHEAD`): concurrently
/// with other threads' payloads, each through `sched` with the tenant of the thread writing it,
/// so no log waits behind another it does not depend on.
#[derive(Debug)]
pub(crate) struct AheadPayload {
    pub seq: u64,
    pub start: u64,
    pub blocks: Vec<Arc<Block>>,
    /// Their CRCs where known ([`payload_crc`]).
    pub crcs: Vec<Option<u32>>,
    /// The inodes the log names (sorted): a later log of one of them waits for this one.
    pub inos: Vec<u64>,
    /// Flush after it (the barrier policy).
    pub flush: bool,
    /// Whose I/O it is, whichever thread writes it.
    pub charge: Option<crate::sched::Charge>,
    pub crc: std::sync::OnceLock<u32>,
    /// Its state, and a condition variable to wait for it on: `parking_lot`'s, whose
    /// notifications make no system call when no thread waits (the standard one's did, two per
    /// payload: about 2,200 futex calls a second in a native fileserver run).
    pub state: parking_lot::Mutex<AheadState>,
    pub done: parking_lot::Condvar,
    /// Its chunks in the device, once started and until a thread takes them to wait for them
    /// ([`Inner::start_ahead`]): whoever needs the payload complete finishes it, so the thread
    /// that started it may go on meanwhile (a direct write makes its next piece) without
    /// anyone waiting on it.
    pub started: Mutex<Option<Result<Vec<crate::dev::PendingWrite>>>>,
}

impl Drop for AheadPayload {
    fn drop(&mut self) {
        // Its buffers go back to the spares if it was their last holder, as the log writer
        // does with the logs it writes whole (`write_sealed`): a payload is often dropped after
        // its files' buffers are (`drop_written`), and handing its blocks to the allocator here
        // had the next writes allocate them again (3 % of a native fileserver run's CPU in
        // `free`, 6 % in `malloc`).
        recycle_blocks(std::mem::take(&mut self.blocks));
    }
}

impl AheadPayload {
    /// The payload's CRC, computed from memory by whoever needs it first.
    pub fn crc(&self) -> u32 {
        *self
            .crc
            .get_or_init(|| payload_crc(&self.blocks, &self.crcs))
    }

    /// Takes the payload's write on: true if it was not taken yet.
    pub fn claim(&self) -> bool {
        let mut st = self.state.lock();
        if *st == AheadState::Pending {
            *st = AheadState::Writing;
            true
        } else {
            false
        }
    }

    pub fn finish(&self, ok: bool) {
        *self.state.lock() = if ok {
            AheadState::Done
        } else {
            AheadState::Failed
        };
        self.done.notify_all();
    }

    /// Hands over its chunks in the device (under the state lock, so a thread waiting for the
    /// payload sees them: [`Inner::wait_payload`]).
    pub fn set_started(&self, started: Result<Vec<crate::dev::PendingWrite>>) {
        let _st = self.state.lock();
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        self.done.notify_all();
    }
}

/// The log writer's state, under [`Inner::log_writer`]: the chain of summary CRCs and whether
/// a written log still waits for a device flush.
#[derive(Debug, Default)]
pub(crate) struct LogWriter {
    pub prev_crc: u32,
    pub unflushed: bool,
    /// A log's summary and payload, for devices that do not take each block in place.
    pub buf: Vec<u8>,
}

/// Work under `meta` whose share of the lock's hold time is counted apart
/// ([`Inner::in_section`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Checkpoint = 0,
    Cleaning = 1,
    /// Sealing buffered file data as data-only logs.
    Sealing = 2,
}

/// Everything guarded by the `meta` lock.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub inodes: HashMap<u64, Arc<InodeCell>>,
    pub dirs: HashMap<u64, DirEntries>,
    pub dirs_dirty: DenseSet,
    /// Inodes whose record, data or map must go into the next checkpoint.
    pub pending: DenseSet,
    /// Slots of freed inodes whose inode page must be rewritten.
    pub freed_slots: DenseSet,
    pub free_inos: BTreeSet<u64>,
    pub next_ino: u64,
    /// The inode file: the map of its pages.
    pub ifile: BlockMap,
    pub ifile_pages: u64,
    /// A namespace or size change of some file not yet in a checkpoint: buffered data of many
    /// files goes out in a checkpoint rather than data-only logs (a sync of one file looks at
    /// that file's own changes, `ns_changed`).
    pub ns_dirty: bool,
    pub writer: Writer,
    pub seg: SegUsage,
    pub checkpoint: u64,
    pub checkpoint_root: u64,
    pub checkpoint_seq: u64,
    /// The writer's sequence right after the last checkpoint (and any pad log after it): while it
    /// is unchanged, that checkpoint is the newest state on storage.
    pub checkpoint_next_seq: u64,
    /// Superblock state.
    pub sb_generation: u64,
    pub sb_bytes_since: u64,
    pub sb_written_at: Option<Instant>,
    pub checkpoint_at: Option<Instant>,
    pub created_ns: i64,
    /// A superblock refresh is running (its checkpoint may use the space reserve).
    pub in_refresh: bool,
    /// Inode pages the cleaner moves: rewritten at the next checkpoint.
    pub pages_dirty: BTreeSet<u64>,
    /// Inode pages as the newest checkpoint wrote them, so the next one re-encodes only the
    /// slots of inodes it writes (bounded by [`IFILE_CACHE_PAGES`]; a page missing is encoded
    /// whole).
    pub ifile_cache: HashMap<u64, Arc<format::Block>>,
    /// Checkpoints in progress: 2 while one runs inside another's space check.
    pub checkpoint_depth: u32,
    /// Retention, snapshots, pinned blocks and the checkpoint's tables.
    pub life: super::lifecycle::Life,
    /// The cleaner is running (no nested cleaning from `ensure_space`).
    pub in_clean: bool,
    /// The space check running is a checkpoint's, before it writes anything (which may use the
    /// reserve its dropped blocks give back, `dropped_since_ckpt`). Cleared for what that check
    /// runs: cleaning passes and nested checkpoints set their own.
    pub checking_checkpoint: bool,
    /// Blocks a light cleaning pass's victims give back beyond its copies, while its space
    /// check runs: the copies may use that much of the reserve.
    pub clean_gain: u64,
    /// A block the newest checkpoint references was superseded without a pin since it was
    /// written (`seg_supersede`): that checkpoint may no longer be read on its own.
    pub superseded_since_ckpt: bool,
    /// Blocks the live tree dropped since the newest checkpoint (deleted, truncated or
    /// superseded), and pins released (a snapshot dropped): a checkpoint may use as much of the
    /// space reserve as these give back
    /// ([`Inner::ensure_space`]), so a full pool still takes the deletes that make room.
    pub dropped_since_ckpt: u64,
    /// Cleaning passes so far: a checkpoint whose space check cleaned starts over, since a
    /// pass changes maps and marks blocks it must write.
    pub clean_passes: u64,
    /// The background cleaner's victims read without `meta`, and what its pass leaves to do
    /// after `meta` is released.
    pub bg_clean: super::cleaner::BackgroundPass,
    /// Buffers of freed inodes, dropped once `meta` is released (freeing a file's buffers is
    /// memory work no other thread needs to wait for).
    pub drop_later: Vec<BTreeMap<u64, DirtyBlock>>,
    /// Segments in which the open run of data-only logs superseded blocks (`seg_supersede`):
    /// unusable until the run's last log is durable (`log_close` sets when), since recovery
    /// replays a file's part of a run only whole (`recovery::unfinished_run_data`).
    pub run_soft_dead: Vec<usize>,
    /// The same for a run an error cut short before its last log: the maps in memory name what
    /// recovery would leave out, so these wait for a checkpoint (which writes those maps) to be
    /// durable.
    pub soft_dead_to_checkpoint: Vec<usize>,
    /// Inodes whose record changed, since the last checkpoint, in a way only a checkpoint
    /// records (creation, names and links, attributes or size set): the checkpoint that writes
    /// one marks it (`InodeState::ckpt_seq`) for its file's syncs to wait for.
    pub ns_changed: DenseSet,
    /// The timed sections of the present hold, innermost last, each with when its own time last
    /// started running ([`Inner::in_section`]).
    pub sections: Vec<(Section, Instant)>,
    /// Tests: segments the writer may still enter before it finds none free (`None`: no limit),
    /// to stage what happens when the space check fell short.
    #[cfg(test)]
    pub segment_picks_left: Option<u64>,
}

/// Shared by every clone of an [`Fs`] and every [`File`].
#[derive(Debug)]
pub(crate) struct Inner {
    pub dev: DeviceRef,
    pub config: Config,
    pub pool_id: [u8; 16],
    pub segment_blocks: u64,
    pub segment_count: u64,
    pub read_only: bool,
    /// A fair-capable lock ([`MetaGuard::unlock_fair_and_write`]): long holds hand it over
    /// between their parts instead of taking it straight back.
    pub meta: parking_lot::Mutex<Meta>,
    /// Logs sealed under `meta`, in sequence order, waiting for the log writer.
    pub log_queue: Mutex<std::collections::VecDeque<Queued>>,
    /// Entries ever put in `log_queue` (a guard that saw it move writes them on release).
    pub queued_total: AtomicU64,
    /// The checkpoint sequence the newest durable superblock names: segments that died before
    /// it are reusable.
    pub sb_checkpoint_seq: AtomicU64,
    /// Taken by whoever writes a superblock (without the log writer), with the newest
    /// generation written: superblocks go out in generation order, an older one found after a
    /// newer is left out.
    pub sb_writer: Mutex<u64>,
    /// Superblocks taken from the queue and not yet written, with whether a flush must go
    /// first: put here under the log writer by whoever takes one, then written by that thread
    /// ([`super::commit::Superblocks::Write`]), or left to the background thread by a thread
    /// on its way to its own logs, or written by whichever thread calls
    /// [`Inner::write_handed_off_superblocks`] first.
    pub sb_handoff: Mutex<Vec<(format::Superblock, bool)>>,
    /// Tests: stops the next thread that takes a superblock to write it, between letting the
    /// log writer go and writing it.
    #[cfg(test)]
    pub sb_taken_gate: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
    /// The log writer: whoever holds it writes the queue's logs in order, without `meta`.
    pub log_writer: Mutex<LogWriter>,
    /// Priorities lent to whoever holds `log_writer` by threads waiting for their logs.
    pub log_inherit: Arc<crate::sched::inherit::Inheritance>,
    /// Every log with a sequence below this is written (not necessarily flushed): its summary
    /// and its payload.
    pub written_seq: AtomicU64,
    /// Every summary with a sequence below this is written (the log writer's progress); ahead
    /// payloads below it may still be in flight.
    pub summary_seq: AtomicU64,
    /// Ahead payloads not yet written, by sequence.
    pub ahead_pending: Mutex<BTreeMap<u64, Arc<AheadPayload>>>,
    /// An ahead payload was written since the last flush began.
    pub ahead_unflushed: AtomicBool,
    /// Buffers sealed logs release, by the log's sequence: they go once `written_seq` passes
    /// it (every log up to it complete), with their bytes for [`Inner::in_flight`].
    pub releases: Mutex<BTreeMap<u64, (Vec<Release>, u64)>>,
    /// Every log with a sequence below this is durable (a device flush followed it).
    pub durable_seq: AtomicU64,
    /// Buffered bytes in sealed logs not yet written: still in `dirty_bytes`, but no longer a
    /// reason to commit.
    pub in_flight: AtomicU64,
    /// In a memory pool, free space was within twice the low-water mark (and the reserve) of
    /// running out at the last space check ([`Inner::urgent_mark`]): its writers then wait for
    /// the log writer at one buffer in flight again ([`Inner::in_flight_max`]).
    pub space_tight: AtomicBool,
    /// Bytes writers may buffer before they commit while a cleaning pass would carry the buffer
    /// ([`Inner::buffer_limit`]), set at each space check ([`Inner::set_buffer_limit`]):
    /// `Config::dirty_bytes_max`, or less when free space is short, so the checkpoint such a
    /// pass writes always finds room.
    pub buffer_limit: AtomicU64,
    /// Bytes writers may buffer whatever cleaning carries: half of what was free beyond the
    /// space reserve at the last space check, so buffered data always has room to go
    /// ([`Inner::set_buffer_limit`]).
    pub buffer_fit_limit: AtomicU64,
    /// The cleaner's copies of file data whose logs are not written yet: reads find them here.
    pub copies: super::copies::CopiesInFlight,
    /// The most blocks any file's map or buffers in this pool have spanned (holes included):
    /// every map as loaded at open, raised where a file buffers a block past its map. Only
    /// grows; a checkpoint's quick space bound assumes every map it writes may be this wide
    /// (`Inner::quick_inode_bound`).
    pub widest: AtomicU64,
    /// A namespace change was pending when `meta` was last let go (`Meta::ns_dirty`): a
    /// cleaning pass would write what is buffered in its checkpoint ([`Inner::buffer_limit`]).
    pub ns_pending: AtomicBool,
    /// The last space check found that cleaning passes are full ones (not
    /// [`Inner::light_cleaning`]), which also write what is buffered in their checkpoint.
    pub full_passes: AtomicBool,
    /// Device flushes running without the log writer ([`Inner::flush_written`]): until they
    /// end, `LogWriter::unflushed` being false does not mean the writes are durable.
    pub flushes_running: AtomicU64,
    /// Held for a whole background cleaning pass: one at a time (the background thread and
    /// `Fs::clean_step`), since a pass's marks and pre-read victims live in `Meta::bg_clean`.
    pub bg_pass: Mutex<()>,
    /// Inodes the write path dirtied (buffers or attributes) since the last commit took them.
    pub dirty: Mutex<DirtySet>,
    pub dirty_bytes: AtomicU64,
    /// Nanoseconds `meta` was held, over every hold (`FsCounters::meta_held_ns`): the share of
    /// the time every operation that needs it may have to wait.
    pub meta_held_ns: AtomicU64,
    /// Of that, the nanoseconds of each [`Section`] (`FsCounters::meta_checkpoint_ns` and the
    /// others), in `Section` order.
    pub meta_section_ns: [AtomicU64; 3],
    pub poisoned: Mutex<Option<String>>,
    /// Whether `poisoned` holds a reason: read by every operation, so the mutex (one cache line
    /// every thread would take) is locked only once a write failed.
    pub poisoned_set: AtomicBool,
    pub closed: AtomicBool,
    pub counters: Mutex<FsCounters>,
    pub report: Mutex<RecoveryReport>,
    pub background: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the background thread (to stop, write a sealed superblock or clean); shared with
    /// it so it waits without holding `Inner`.
    pub wake: Arc<(Mutex<Wake>, Condvar)>,
    /// Priorities lent to whoever holds `meta` (and so does the commit) by threads waiting for it.
    pub inherit: Arc<crate::sched::inherit::Inheritance>,
    /// Advisory locks of the process on this pool's files.
    pub locks: super::locks::LockTable,
    /// Where the pool is mounted in the process's paths (absolute symbolic links under it
    /// resolve inside the pool).
    pub mount_point: Mutex<Option<String>>,
    /// [`AtimePolicy`] as its code.
    pub atime: std::sync::atomic::AtomicU8,
    /// Paths of the live tree to inodes, for lookups without `meta`.
    pub names: super::names::NameCache,
}

/// Why the background thread should wake before its period ends.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    pub stop: bool,
    /// Logs or superblocks wait for the background thread to write them (a direct write's
    /// summaries; a superblock sealed or handed off by a writer that went on).
    pub logs: bool,
    /// Free space is below the low-water mark: clean now.
    pub clean: bool,
}

/// `meta` locked by the calling thread, which meanwhile inherits the priority of any thread that
/// waits for it: a commit an RT thread waits on runs at RT, in `sched` and in the kernel.
///
/// Logs sealed while it is held are written when it is released (after `meta` is unlocked, so
/// other threads go on meanwhile); [`MetaGuard::unlock_and_write`] does that and reports how it
/// went.
pub(crate) struct MetaGuard<'a> {
    guard: Option<parking_lot::MutexGuard<'a, Meta>>,
    /// Unlock fairly: hand `meta` to the longest waiter, if any, instead of letting whoever
    /// comes first (this thread again, most often) take it.
    fair: bool,
    /// When the lock was taken ([`Inner::meta_held_ns`]).
    acquired: Instant,
    hold: Option<crate::sched::inherit::Hold>,
    inner: &'a Inner,
    /// [`Inner::queued_total`] when the lock was taken.
    start_queued: u64,
}

impl std::ops::Deref for MetaGuard<'_> {
    type Target = Meta;
    fn deref(&self) -> &Meta {
        self.guard.as_ref().expect("held")
    }
}

impl std::ops::DerefMut for MetaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Meta {
        self.guard.as_mut().expect("held")
    }
}

impl MetaGuard<'_> {
    /// Unlocks `meta`, then writes the logs sealed while it was held (and any before them).
    pub fn unlock_and_write(mut self) -> Result<()> {
        self.release()
    }

    /// [`MetaGuard::unlock_and_write`], handing `meta` to the thread that waited longest for
    /// it, if any. A long piece of work done in parts under `meta` (sealing a full buffer)
    /// lets waiters through between its parts this way: with a plain unlock the holder took the
    /// lock straight back before any waiter woke, and every thread that needed `meta` for a
    /// create or a delete slept through the whole of it, leaving a core idle.
    pub fn unlock_fair_and_write(mut self) -> Result<()> {
        self.fair = true;
        self.release()
    }

    /// Unlocks `meta` and leaves what was sealed in the queue (tests stage the log writer).
    #[cfg(test)]
    pub fn unlock_without_writing(mut self) {
        self.guard = None;
        self.hold = None;
    }

    /// Unlocks `meta` for a direct write and hands over the payloads sealed while it was held,
    /// for the caller to write: if every log sealed has its payload apart from its summary
    /// (`FLAG_AHEAD`). A checkpoint or superblock queued meanwhile (a refresh) is left to
    /// whoever writes the queue next, the background thread included. Otherwise (logs written
    /// whole) as [`MetaGuard::unlock_and_write`], and `None`.
    pub fn unlock_taking_payloads(mut self) -> Result<Option<Vec<Arc<AheadPayload>>>> {
        let payloads_only = self
            .guard
            .as_ref()
            .is_some_and(|g| !g.writer.sealed_ahead.is_empty() && g.writer.sealed_small.is_empty());
        if !payloads_only {
            return self.release().map(|()| None);
        }
        Ok(self.unlock().map(|sealed| sealed.own))
    }

    /// Unlocks `meta` (if still held) and hands over what was sealed under it; the buffers of
    /// freed inodes are recycled after.
    fn unlock(&mut self) -> Option<Sealed> {
        let mut guard = self.guard.take()?;
        self.inner.meta_held_ns.fetch_add(
            self.acquired.elapsed().as_nanos() as u64,
            AtomicOrdering::Relaxed,
        );
        let sealed = Sealed {
            end: guard.writer.seq,
            own: std::mem::take(&mut guard.writer.sealed_ahead),
            small: std::mem::take(&mut guard.writer.sealed_small),
            queued: self.inner.queued_total.load(AtomicOrdering::Acquire) != self.start_queued,
        };
        let garbage = std::mem::take(&mut guard.drop_later);
        // Stored only when it changes: most holds leave it as it was, and every writer reads it.
        if self.inner.ns_pending.load(AtomicOrdering::Relaxed) != guard.ns_dirty {
            self.inner
                .ns_pending
                .store(guard.ns_dirty, AtomicOrdering::Release);
        }
        if self.fair {
            parking_lot::MutexGuard::unlock_fair(guard);
        } else {
            drop(guard);
        }
        recycle_dropped(garbage);
        self.hold = None;
        Some(sealed)
    }

    fn release(&mut self) -> Result<()> {
        let Some(Sealed {
            end,
            own,
            small,
            queued,
        }) = self.unlock()
        else {
            return Ok(());
        };
        if !own.is_empty() || !small.is_empty() {
            self.inner.write_own_logs(end, &own, &small)
        } else if queued {
            self.inner.write_logs_until(end)
        } else {
            Ok(())
        }
    }
}

/// What one hold of `meta` sealed, taken when it is let go ([`MetaGuard`]).
struct Sealed {
    /// The sequence after the last log sealed.
    end: u64,
    /// Ahead payloads, for the holder to write.
    own: Vec<Arc<AheadPayload>>,
    /// Smaller ahead logs the log writer writes whole: `(sequence, inodes, flush)`.
    small: Vec<(u64, Vec<u64>, bool)>,
    /// Anything was queued meanwhile (a checkpoint, a superblock).
    queued: bool,
}

impl Drop for MetaGuard<'_> {
    fn drop(&mut self) {
        // What a panicking holder changed is half done: none of it may reach the device.
        self.inner
            .poison_if_unwinding("a thread holding the metadata lock");
        // A failed write poisons the pool: later calls report it.
        let _ = self.release();
    }
}

/// The end of a write of `len` bytes at `offset` to inode `ino`, if it stays within the largest
/// file.
fn write_end(ino: u64, offset: u64, len: usize) -> Result<u64> {
    offset
        .checked_add(len as u64)
        .filter(|&e| e <= FILE_BYTES_MAX)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "inode {ino}: write past the largest file ({FILE_BYTES_MAX} bytes)"
            ))
        })
}

/// Recycles the buffers of freed inodes `meta` left to drop after its release.
fn recycle_dropped(garbage: Vec<BTreeMap<u64, DirtyBlock>>) {
    if !garbage.is_empty() {
        recycle_blocks(
            garbage
                .into_iter()
                .flat_map(|buffers| buffers.into_values().map(DirtyBlock::into_data))
                .collect(),
        );
    }
}

/// Locks `lock`; a thread that has to wait lends its I/O priority to the holder (registered
/// with `inherit`) until it gets it.
pub(crate) fn lock_lending<'a, T>(
    lock: &'a Mutex<T>,
    inherit: &Arc<crate::sched::inherit::Inheritance>,
) -> MutexGuard<'a, T> {
    match lock.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            lending_while(inherit, || lock.lock().unwrap_or_else(|p| p.into_inner()))
        }
    }
}

/// Runs `wait` (a thread waiting for a lock) lending the thread's I/O priority to the lock's
/// holder (registered with `inherit`) meanwhile.
fn lending_while<R>(
    inherit: &Arc<crate::sched::inherit::Inheritance>,
    wait: impl FnOnce() -> R,
) -> R {
    let _lend = (!inherit.is_inert()).then(|| inherit.lend(crate::sched::inherit::own_prio()));
    wait()
}

/// Block buffers written and released, kept for the next writes: the write buffer's memory
/// turns over every few milliseconds, and handing it back to the allocator had it trim and
/// grow its heaps a page at a time (`madvise`, `mprotect`, page faults and clearing). Shared by
/// every pool of the process, at most [`SPARE_BLOCKS_MAX`]; each thread keeps a few of its own
/// in front of it ([`LOCAL_SPARE`]).
static SPARE_BLOCKS: Mutex<Vec<Arc<Block>>> = Mutex::new(Vec::new());
/// 32 MiB of spare buffers at most.
pub(crate) const SPARE_BLOCKS_MAX: usize = 8192;
/// Buffers a thread keeps for itself, and moves from and to the shared spares at once: one
/// trip to [`SPARE_BLOCKS`]'s mutex per this many blocks, not one per block. A thread taking
/// it was often preempted holding it (20 writers on 2 cores), and whoever waited behind it
/// (a checkpoint holding `meta` among them) waited a time slice.
pub(crate) const LOCAL_SPARE_BATCH: usize = 64;

thread_local! {
    /// This thread's spare buffers, at most 2 × [`LOCAL_SPARE_BATCH`] (512 KiB).
    static LOCAL_SPARE: std::cell::RefCell<Vec<Arc<Block>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps the buffers of `blocks` nothing else references for reuse (up to the caps); the
/// others are dropped.
pub(crate) fn recycle_blocks(blocks: Vec<Arc<Block>>) {
    let mut unique = blocks
        .into_iter()
        .filter(|b| Arc::strong_count(b) == 1 && Arc::weak_count(b) == 0);
    // Into this thread's own first (none when its storage is being torn down), and what does
    // not fit to the shared spares in one go.
    let _ = LOCAL_SPARE.try_with(|local| {
        if let Ok(mut local) = local.try_borrow_mut() {
            let room = (2 * LOCAL_SPARE_BATCH).saturating_sub(local.len());
            local.extend(unique.by_ref().take(room));
        }
    });
    let mut rest = unique.peekable();
    if rest.peek().is_none() {
        return;
    }
    let mut spare = SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner());
    let room = SPARE_BLOCKS_MAX.saturating_sub(spare.len());
    spare.extend(rest.take(room));
}

/// A spare buffer (this thread's, else a batch from the shared spares), if one is kept.
pub(crate) fn take_spare() -> Option<Arc<Block>> {
    let local = LOCAL_SPARE.try_with(|local| {
        let mut local = local.try_borrow_mut().ok()?;
        if local.is_empty() {
            let mut spare = SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner());
            let from = spare.len().saturating_sub(LOCAL_SPARE_BATCH);
            local.extend(spare.drain(from..));
        }
        local.pop()
    });
    match local {
        Ok(b) => b,
        Err(_) => SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner()).pop(),
    }
}

/// A spare buffer with `fill` applied, if one is kept.
fn reuse_block(fill: impl FnOnce(&mut Block)) -> Option<Arc<Block>> {
    let mut b = take_spare()?;
    // Unique when it was kept, and nothing can have cloned it since.
    fill(Arc::get_mut(&mut b)?);
    Some(b)
}

/// A new block holding a copy of `data` (one block's bytes), ready to share with a log: a spare
/// buffer, else a new allocation the bytes are copied into without clearing it first.
pub(crate) fn shared_copy(data: &[u8]) -> Arc<Block> {
    reuse_block(|b| b.copy_from_slice(data)).unwrap_or_else(|| {
        let block: Arc<[u8]> = Arc::from(data);
        block.try_into().expect("a block's bytes")
    })
}

/// A new block of zeros (a spare buffer cleared, or a new allocation).
pub(crate) fn zeroed_block() -> Arc<Block> {
    reuse_block(|b| b.fill(0)).unwrap_or_else(|| Arc::new([0u8; BLOCK]))
}

/// A new block of zeros `fill` writes into, ready to share with a log: metadata encoded in
/// place rather than encoded and then copied.
pub(crate) fn new_block(fill: impl FnOnce(&mut Block)) -> Arc<Block> {
    let mut b = FreshBlock::new();
    fill(b.as_mut());
    b.0
}

/// A block of zeros no one else holds yet, to encode into ([`format::encode_dir_entries_in`]).
pub(crate) struct FreshBlock(pub Arc<Block>);

impl FreshBlock {
    pub fn new() -> FreshBlock {
        FreshBlock(zeroed_block())
    }
}

impl AsMut<Block> for FreshBlock {
    fn as_mut(&mut self) -> &mut Block {
        // Unique when made, so no copy is made here.
        Arc::make_mut(&mut self.0)
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Inner {
    /// Locks the metadata (and with it the commit path). A thread that has to wait lends its
    /// I/O priority to the holder until it gets the lock.
    pub fn lock_meta(&self) -> MetaGuard<'_> {
        let guard = self
            .meta
            .try_lock()
            .unwrap_or_else(|| lending_while(&self.inherit, || self.meta.lock()));
        let start_queued = self.queued_total.load(AtomicOrdering::Acquire);
        MetaGuard {
            guard: Some(guard),
            fair: false,
            acquired: Instant::now(),
            hold: Some(self.inherit.hold()),
            inner: self,
            start_queued,
        }
    }

    /// Runs `f` as a timed section of the present hold of `meta` (`m`): its time, less that of
    /// the sections nested in it, is counted as `section`'s ([`FsCounters::meta_checkpoint_ns`]
    /// and the others).
    pub(crate) fn in_section<R>(
        &self,
        m: &mut Meta,
        section: Section,
        f: impl FnOnce(&mut Meta) -> R,
    ) -> R {
        let start = Instant::now();
        if let Some(&(outer, since)) = m.sections.last() {
            self.count_section(outer, start - since);
        }
        m.sections.push((section, start));
        let result = f(m);
        let end = Instant::now();
        if let Some((inner, since)) = m.sections.pop() {
            self.count_section(inner, end - since);
        }
        if let Some(outer) = m.sections.last_mut() {
            outer.1 = end;
        }
        result
    }

    fn count_section(&self, section: Section, time: Duration) {
        self.meta_section_ns[section as usize]
            .fetch_add(time.as_nanos() as u64, AtomicOrdering::Relaxed);
    }

    pub fn check_usable(&self) -> Result<()> {
        self.check_not_poisoned()?;
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Invalid("pool is closed".into()));
        }
        Ok(())
    }

    /// Fails once a write failed (see [`Inner::poison`]).
    pub fn check_not_poisoned(&self) -> Result<()> {
        if !self.poisoned_set.load(AtomicOrdering::Acquire) {
            return Ok(());
        }
        match self
            .poisoned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    pub fn check_writable(&self) -> Result<()> {
        self.check_usable()?;
        if self.read_only {
            return Err(Error::ReadOnly(format!("{} pool", self.dev.kind())));
        }
        Ok(())
    }

    /// Marks the pool unusable after a failed write: what is on storage no longer matches memory.
    pub fn poison(&self, err: &Error) {
        self.poison_reason(err.to_string());
    }

    pub fn count(&self, f: impl FnOnce(&mut FsCounters)) {
        f(&mut self.counters.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Notes that inode `ino` has buffers or attributes to write; called under its inode lock,
    /// after the change.
    fn mark_dirty(&self, ino: u64) {
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ino);
    }

    /// Reads file block `block` of an inode into `out` (buffered data first, then storage).
    fn read_block(&self, ino: u64, st: &InodeState, block: u64, out: &mut [u8]) -> Result<()> {
        if let Some(d) = st.dirty.get(&block) {
            out.copy_from_slice(&d.data()[..]);
            return Ok(());
        }
        let addr = st.map.get(block);
        if addr == 0 {
            out.fill(0);
            return Ok(());
        }
        if let Some(copy) = self.copies.get(addr) {
            out.copy_from_slice(&copy[..]);
            return Ok(());
        }
        self.dev
            .read_at(addr * BLOCK_U64, out)
            .map_err(|e| Error::io(format!("inode {ino}: reading block {block} at {addr}"), e))
    }

    pub fn pread(&self, cell: &InodeCell, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.pread_with(cell, buf, offset, true)
    }

    /// Reads without touching the access time (a checkpoint's files are read-only).
    pub fn pread_at_rest(&self, cell: &InodeCell, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.pread_with(cell, buf, offset, false)
    }

    fn pread_with(
        &self,
        cell: &InodeCell,
        buf: &mut [u8],
        offset: u64,
        touch: bool,
    ) -> Result<usize> {
        let mut st = cell.lock();
        if st.freed {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        if touch {
            self.touch_atime(cell.ino, &mut st);
        }
        if offset >= st.size {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(st.size - offset) as usize;
        let mut done = 0usize;
        let mut scratch = [0u8; BLOCK];
        while done < len {
            let pos = offset + done as u64;
            let block = pos / BLOCK_U64;
            let within = (pos % BLOCK_U64) as usize;
            let n = (BLOCK - within).min(len - done);
            // Whole blocks that are contiguous on storage and not buffered are read in one
            // request, unless the cleaner has copies whose logs are not written yet.
            if within == 0
                && n == BLOCK
                && !st.dirty.contains_key(&block)
                && st.map.get(block) != 0
                && !self.copies.any()
            {
                let first = st.map.get(block);
                let mut run = 1u64;
                while (done + (run as usize + 1) * BLOCK) <= len
                    && !st.dirty.contains_key(&(block + run))
                    && st.map.get(block + run) == first + run
                    && run < 256
                {
                    run += 1;
                }
                let bytes = run as usize * BLOCK;
                self.dev
                    .read_at(first * BLOCK_U64, &mut buf[done..done + bytes])
                    .map_err(|e| {
                        Error::io(
                            format!("inode {}: reading {run} blocks at {first}", cell.ino),
                            e,
                        )
                    })?;
                done += bytes;
                continue;
            }
            self.read_block(cell.ino, &st, block, &mut scratch)?;
            buf[done..done + n].copy_from_slice(&scratch[within..within + n]);
            done += n;
        }
        Ok(len)
    }

    /// Writes `buf` at `offset`; `direct` as `O_DIRECT` ([`Inner::write_direct`]).
    pub fn pwrite(&self, cell: &InodeCell, buf: &[u8], offset: u64, direct: bool) -> Result<usize> {
        self.write_at(cell, buf, Some(offset), direct)
            .map(|(_, n)| n)
    }

    /// Writes `buf` at the end of the file, read under the inode lock so concurrent appends
    /// never overlap; returns the offset after the write.
    pub fn append(&self, cell: &InodeCell, buf: &[u8], direct: bool) -> Result<u64> {
        self.write_at(cell, buf, None, direct).map(|(end, _)| end)
    }

    /// Puts `buf` at `offset` (the end of the file for `None`) into the file's buffers, under
    /// its inode lock (`st`), and returns the end of the write. `whole` holds buffers already
    /// made for some of the whole blocks the write covers (block number and bytes, in order), so
    /// that a direct write copies and checksums outside every lock.
    fn buffer_write(
        &self,
        cell: &InodeCell,
        st: &mut InodeState,
        buf: &[u8],
        offset: Option<u64>,
        whole: Vec<(u64, DirtyBlock)>,
        charge: Option<crate::sched::Charge>,
    ) -> Result<u64> {
        if st.freed {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let offset = offset.unwrap_or(st.size);
        let end = write_end(cell.ino, offset, buf.len())?;
        // The buffers may reach past the file's map (noted before any is put in).
        self.note_width(end.div_ceil(BLOCK_U64));
        let mut whole = whole.into_iter().peekable();
        // Buffers a made block replaced, kept for reuse in one go after the loop.
        let mut replaced = Vec::new();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let block = pos / BLOCK_U64;
            let within = (pos % BLOCK_U64) as usize;
            let n = (BLOCK - within).min(buf.len() - done);
            let gen = st.next_gen;
            st.next_gen += 1;
            let made = whole.next_if(|(b, _)| *b == block).map(|(_, d)| d);
            if let Some(d) = st.dirty.get_mut(&block) {
                match made {
                    // Made already: it takes the old buffer's place (a sealed log keeps its
                    // own reference), instead of being copied again.
                    Some(mut fresh) => {
                        fresh.gen = gen;
                        replaced.push(std::mem::replace(d, fresh).into_data());
                    }
                    None => d.write(gen, within, &buf[done..done + n]),
                }
            } else {
                let mut fresh = match made {
                    Some(d) => d,
                    // A whole block: copied without clearing it first.
                    None if n == BLOCK => DirtyBlock::new(gen, shared_copy(&buf[done..done + n])),
                    None => {
                        let mut data = zeroed_block();
                        let bytes = Arc::get_mut(&mut data).expect("a new block is not shared");
                        if block * BLOCK_U64 < st.size {
                            self.read_block(cell.ino, st, block, &mut bytes[..])?;
                        }
                        bytes[within..within + n].copy_from_slice(&buf[done..done + n]);
                        DirtyBlock::new(gen, data)
                    }
                };
                fresh.gen = gen;
                st.dirty.insert(block, fresh);
                // Counted under the inode lock, so a commit dropping it subtracts after.
                self.dirty_bytes
                    .fetch_add(BLOCK_U64, AtomicOrdering::AcqRel);
            }
            done += n;
        }
        recycle_blocks(replaced);
        if end > st.size {
            st.size = end;
        }
        // Room in the map for the blocks written, made here under the inode lock: sealing and
        // checkpoints set the blocks' addresses under `meta` and find the room made.
        let mapped = end.div_ceil(BLOCK_U64) as usize;
        if mapped > st.map.blocks.len() {
            let len = st.map.blocks.len();
            st.map.blocks.reserve(mapped - len);
        }
        st.mtime_ns = now_ns();
        st.ctime_ns = st.mtime_ns;
        st.attr_dirty = true;
        st.charge = charge;
        self.mark_dirty(cell.ino);
        Ok(end)
    }

    /// A file holding this much buffered data after a write is written behind (relaxed
    /// ordering): a [`OWN_FLUSH_DIVISOR`]th of the write buffer, and at least
    /// [`WRITE_BEHIND_MIN`], so small files and small buffers keep their data together in
    /// fewer logs.
    fn write_behind_bytes(&self) -> u64 {
        (self.config.dirty_bytes_max / OWN_FLUSH_DIVISOR).max(WRITE_BEHIND_MIN)
    }

    /// Writes at `offset`, or at the end of the file for `None`; returns the end and the count.
    /// A file left holding [`Inner::write_behind_bytes`] or more goes out right after the
    /// write (written behind, as its writer's I/O) instead of waiting in the buffer for
    /// whichever commit comes next; a write is never split, so what a crash leaves of it is
    /// all or nothing. A `direct` write goes out before the call returns ([`Inner::write_direct`]).
    fn write_at(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        direct: bool,
    ) -> Result<(u64, usize)> {
        self.check_writable()?;
        // Taken before the inode lock: without a tenant it asks the kernel for the ioprio. A
        // device without a scheduler charges nothing, so nothing is asked.
        let charge = self
            .dev
            .charged()
            .then(crate::sched::Charge::of_current_thread);
        if direct && !buf.is_empty() {
            return self.write_direct(cell, buf, offset, charge);
        }
        let len = buf.len() as u64;
        // A write that would take the buffer past its limit finds room first, so a write there
        // is no room for fails with `NoSpace` before any of it is buffered, rather than after
        // (its data would then stay buffered with nowhere to go).
        let limit = self.buffer_limit();
        let room_checked = len > limit / 2 || self.buffered_bytes() + len > limit;
        if room_checked {
            self.make_room_for_write(len)?;
        }
        let end;
        let held;
        {
            let mut st = cell.lock();
            end = self.buffer_write(cell, &mut st, buf, offset, Vec::new(), charge)?;
            held = st.dirty.len() as u64 * BLOCK_U64;
        }
        if self.buffered_bytes() > self.buffer_limit() {
            match self.commit_over_limit(cell) {
                // The room for this write was found before it was buffered: it is written, and
                // what is buffered goes out at the next commit that finds room (a sync, or the
                // next write's check). A commit's estimate counts more than it writes.
                Err(Error::NoSpace(_)) if room_checked && self.check_not_poisoned().is_ok() => {}
                r => r?,
            }
        } else if self.config.ordering == Ordering::Relaxed && held >= self.write_behind_bytes() {
            // Write-behind: a file with a large amount buffered goes out now as data-only logs,
            // its writer's I/O.
            let mut m = self.lock_meta();
            if self.buffer_in_data_logs() {
                self.commit_data_log(&mut m, cell)?;
                self.maybe_refresh(&mut m)?;
            }
            m.unlock_and_write()?;
        } else if self.in_flight.load(AtomicOrdering::Acquire) > self.in_flight_max() {
            // More than that waits for the log writer: wait with it, so the memory buffered
            // stays bounded when writers outpace the device.
            self.wait_in_flight()?;
        }
        Ok((end, buf.len()))
    }

    /// Commits what is buffered once writers took the buffer past its limit.
    fn commit_over_limit(&self, cell: &InodeCell) -> Result<()> {
        let mut m = self.lock_meta();
        if self.buffered_bytes() > self.buffer_limit() {
            // Relaxed ordering writes a full buffer as data-only logs; the maps follow at the
            // next checkpoint.
            if self.buffer_in_data_logs() {
                // A writer holding a good part of the buffer writes its own file first (its
                // I/O, at its priority and weight); other files' data only if that is not
                // enough. Many small files go out together, in fewer logs.
                let own = cell.lock().dirty.len() as u64 * BLOCK_U64;
                if own >= self.write_behind_bytes() {
                    self.commit_data_log(&mut m, cell)?;
                }
                if self.buffered_bytes() > self.buffer_limit() {
                    m = self.commit_data_logs_in_parts(m)?;
                }
            } else {
                self.commit_checkpoint(&mut m)?;
            }
            self.maybe_refresh(&mut m)?;
        }
        // The logs are written here, after `meta` is released.
        m.unlock_and_write()
    }

    /// Before a write of `len` bytes that is large against the buffer limit (the write is
    /// large, or space is short: [`Inner::set_buffer_limit`]) or would take the buffer past
    /// it, makes sure the checkpoint that
    /// will carry it, and a cleaning pass's, find room: if the free space is short for what is
    /// buffered and the write, what is buffered goes out first and the space check cleans for
    /// the write, before any of it is buffered. A write buffered first could leave the cleaner
    /// no room for the checkpoint that frees anything (every block buffered goes into it while a
    /// namespace change is pending), and fail with most of the pool dead. A write there is no
    /// room for fails here with `NoSpace`, having changed nothing.
    fn make_room_for_write(&self, len: u64) -> Result<()> {
        let mut m = self.lock_meta();
        let buffered = self.buffered_bytes();
        if self.buffer_fits(&m, (buffered + len).div_ceil(BLOCK_U64)) {
            return m.unlock_and_write();
        }
        if buffered > 0 {
            if self.buffer_in_data_logs() {
                self.commit_data_logs(&mut m, false)?;
            } else {
                self.commit_checkpoint(&mut m)?;
            }
        }
        // Room for the commit that carries it: its logs' summaries and its map's nodes beside
        // its blocks, so that commit does not fail once the write is buffered.
        let blocks = len.div_ceil(BLOCK_U64);
        let room = blocks + blocks / 32 + WRITE_COMMIT_SLACK_BLOCKS;
        match self.ensure_space(&mut m, room) {
            Err(Error::NoSpace(_)) => {
                // The room the next checkpoint needs may be what is missing: paid, it is free
                // again (beyond what the checkpoint wrote).
                self.commit_checkpoint(&mut m)?;
                self.ensure_space(&mut m, room)?;
            }
            r => r?,
        }
        m.unlock_and_write()
    }

    /// A direct write (`O_DIRECT`): returns once the data is on the device (not flushed:
    /// durability still takes `fsync`). In relaxed ordering, unless the file has a change only a
    /// checkpoint records, it goes out as data-only logs whose payloads this thread writes, as
    /// its I/O, in pieces from [`DIRECT_FIRST_PIECE_BYTES`] up to [`DIRECT_PIECE_BYTES`], each
    /// made while the one before it is in the device, so a scheduler sees the writer busy for
    /// the whole write (a crash may keep some pieces of a write and not others, as `O_DIRECT`
    /// on a kernel file system may).
    /// Each piece's bytes are copied into buffers outside every lock and put into the file
    /// under `meta`, so no other thread's commit takes them half-written (a checkpoint seals
    /// every buffered block: the tenant refreshing the superblock wrote the other's data, and
    /// the other waited for it). The summaries are left to the background thread, as its I/O
    /// ([`Inner::write_logs_behind`]): a summary the writer wrote itself waited for a turn in
    /// `sched` with nothing of the writer's data queued, and a summary behind a checkpoint
    /// waits for every payload before it, other writers' included. The write's buffers stay
    /// until its summaries are written (a sync writes them at once).
    /// In strict ordering, or for a new or changed file, a piece is written and synced.
    fn write_direct(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        charge: Option<crate::sched::Charge>,
    ) -> Result<(u64, usize)> {
        if let Some(offset) = offset {
            // Checked before the pieces are cut (an append is checked as it is buffered).
            write_end(cell.ino, offset, buf.len())?;
        }
        let mut in_flight = std::collections::VecDeque::new();
        let mut end = 0;
        let mut written = Ok(());
        let mut done = 0;
        let mut pieces = 0u32;
        while done < buf.len() {
            // An append is one piece: its offset is the end of the file when it is made.
            let n = match offset {
                Some(offset) => {
                    // Pieces grow from [`DIRECT_FIRST_PIECE_BYTES`] (the first is made with
                    // nothing of the write in the device yet) and end on block boundaries.
                    let at = offset + done as u64;
                    let most = (DIRECT_FIRST_PIECE_BYTES << pieces.min(8)).min(DIRECT_PIECE_BYTES);
                    let boundary = (at + most) / BLOCK_U64 * BLOCK_U64;
                    let boundary = if boundary > at { boundary } else { at + most };
                    ((boundary - at) as usize).min(buf.len() - done)
                }
                None => buf.len(),
            };
            pieces += 1;
            let at = offset.map(|o| o + done as u64);
            match self.direct_piece(cell, &buf[done..done + n], at, charge) {
                Ok(piece) => {
                    end = piece.end;
                    in_flight.push_back(piece.started);
                }
                Err(e) => {
                    written = Err(e);
                    break;
                }
            }
            // The piece before this one: the device has had it while this one was made.
            while in_flight.len() > 1 && written.is_ok() {
                written = self.finish_direct(in_flight.pop_front().expect("two in flight"));
            }
            done += n;
        }
        // Every payload started is waited for, also after an error.
        for started in in_flight {
            let finished = self.finish_direct(started);
            written = written.and(finished);
        }
        written?;
        // Every byte of the write is in its own pieces' payloads (a buffer another commit had
        // sealed is copied before it is changed), and those are on the device.
        self.write_logs_behind()?;
        Ok((end, buf.len()))
    }

    /// One piece of a direct write: buffered, sealed, and its payloads started.
    fn direct_piece(
        &self,
        cell: &InodeCell,
        buf: &[u8],
        offset: Option<u64>,
        charge: Option<crate::sched::Charge>,
    ) -> Result<DirectPiece> {
        // Whole blocks of a write at a known offset are made here, without any lock.
        let whole: Vec<(u64, DirtyBlock)> = match offset {
            Some(offset) => {
                let first = offset.div_ceil(BLOCK_U64);
                let last = (offset + buf.len() as u64) / BLOCK_U64;
                (first..last)
                    .map(|block| {
                        let at = (block * BLOCK_U64 - offset) as usize;
                        (block, DirtyBlock::new(0, shared_copy(&buf[at..at + BLOCK])))
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let mut m = self.lock_meta();
        self.check_usable()?;
        let end = {
            let mut st = cell.lock();
            self.buffer_write(cell, &mut st, buf, offset, whole, charge)?
        };
        if self.config.ordering == Ordering::Strict || m.ns_changed.contains(&cell.ino) {
            drop(m);
            self.sync_file(cell)?;
            return Ok(DirectPiece {
                end,
                started: Vec::new(),
            });
        }
        m.writer.direct = true;
        let committed = self.commit_data_log(&mut m, cell);
        m.writer.direct = false;
        committed?;
        self.maybe_refresh(&mut m)?;
        let started = m.unlock_taking_payloads()?.unwrap_or_default();
        for a in &started {
            self.start_ahead(a);
        }
        Ok(DirectPiece { end, started })
    }

    /// Waits for a direct write's payloads (finishing those nobody is finishing yet).
    fn finish_direct(&self, started: Vec<Arc<AheadPayload>>) -> Result<()> {
        let mut result = Ok(());
        for a in started {
            result = result.and(self.wait_payload(&a));
        }
        result
    }

    /// Whether buffered data may go out as data-only logs (a full buffer, write-behind, the
    /// cleaner's flush of the buffer first): in relaxed ordering. The data of a file with a
    /// change only a checkpoint records goes out placed, not replayed (`seal_file_data`), so a
    /// pending namespace change no longer makes a full buffer a checkpoint.
    pub(crate) fn buffer_in_data_logs(&self) -> bool {
        self.config.ordering == Ordering::Relaxed
    }

    /// Bytes writers may buffer before they commit: `Config::dirty_bytes_max`, or, while a
    /// cleaning pass would have to write the buffer in its checkpoint (a namespace change is
    /// pending, or passes are full), what the free space allows ([`Inner::set_buffer_limit`]).
    /// Light passes write no buffered data, so overwrites keep the whole buffer however short
    /// space is (writing it out sooner raised `bench cleaner`'s hot/cold write amplification
    /// at 70 % from 1.48 to 1.57).
    pub(crate) fn buffer_limit(&self) -> u64 {
        let fit = self.buffer_fit_limit.load(AtomicOrdering::Acquire);
        if self.ns_pending.load(AtomicOrdering::Acquire)
            || self.full_passes.load(AtomicOrdering::Acquire)
        {
            self.buffer_limit
                .load(AtomicOrdering::Acquire)
                .min(self.config.dirty_bytes_max)
                .min(fit)
        } else {
            self.config.dirty_bytes_max.min(fit)
        }
    }

    /// Buffered bytes not yet in a sealed log: what the buffer limit counts.
    /// Notes a file's buffers spanning `blocks` blocks ([`Inner::widest`]).
    pub(crate) fn note_width(&self, blocks: u64) {
        // A plain load first: growth is rare, and every writer passes here.
        if blocks > self.widest.load(AtomicOrdering::Relaxed) {
            self.widest.fetch_max(blocks, AtomicOrdering::Relaxed);
        }
    }

    pub(crate) fn buffered_bytes(&self) -> u64 {
        self.dirty_bytes
            .load(AtomicOrdering::Acquire)
            .saturating_sub(self.in_flight.load(AtomicOrdering::Acquire))
    }

    /// Updates the access time of a file being read, per the pool's [`AtimePolicy`]. The new
    /// time is written with the file's next checkpoint.
    fn touch_atime(&self, ino: u64, st: &mut InodeState) {
        const DAY_NS: i64 = 24 * 3600 * 1_000_000_000;
        let policy = self.atime.load(AtomicOrdering::Relaxed);
        if policy == AtimePolicy::Never as u8 || self.read_only {
            return;
        }
        let now = now_ns();
        let due = policy == AtimePolicy::Strict as u8
            || st.atime_ns <= st.mtime_ns
            || st.atime_ns <= st.ctime_ns
            || now - st.atime_ns >= DAY_NS;
        if due {
            st.atime_ns = now;
            st.attr_dirty = true;
            self.mark_dirty(ino);
        }
    }

    /// Changes attributes (chmod, chown, utimens); the change time becomes now.
    pub fn set_attr(&self, cell: &InodeCell, attr: &SetAttr) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        {
            let mut st = cell.lock();
            if st.freed {
                return Err(Error::BadHandle(format!("inode {}", cell.ino)));
            }
            if let Some(mode) = attr.mode {
                st.mode = mode & 0o7777;
            }
            if let Some(uid) = attr.uid {
                st.uid = uid;
            }
            if let Some(gid) = attr.gid {
                st.gid = gid;
            }
            if let Some(t) = attr.atime_ns {
                st.atime_ns = t;
            }
            if let Some(t) = attr.mtime_ns {
                st.mtime_ns = t;
            }
            st.ctime_ns = now_ns();
            st.attr_dirty = true;
        }
        m.namespace_changed(cell.ino);
        Ok(())
    }

    /// Makes one file durable: a checkpoint, or in relaxed ordering a data-only log when no
    /// metadata changed.
    pub fn sync_file(&self, cell: &InodeCell) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        self.check_usable()?;
        // Buffers another thread's commit sealed already stay in its logs: waited for below.
        let sealed = cell
            .lock()
            .dirty
            .values()
            .filter_map(|d| d.sealed_in)
            .reduce(|a, b| (a.0.max(b.0), a.1 || b.1));
        // A data-only log is replayed onto the file as the newest checkpoint before it holds
        // it, so it serves unless the file itself changed since in a way only a checkpoint
        // records (its creation, a name or link, an attribute or size set: `ns_changed`).
        // Other files' pending changes are theirs to sync: a real-time writer's sync does not
        // become a checkpoint, which waits for every payload in flight, because another
        // process created a file.
        if self.config.ordering == Ordering::Strict || m.ns_changed.contains(&cell.ino) {
            self.commit_checkpoint(&mut m)?;
        } else {
            match self.commit_data_log(&mut m, cell) {
                // The log would take the room the next checkpoint needs: a checkpoint, which
                // records this file too, is written in it instead.
                Err(Error::NoSpace(_)) => self.commit_checkpoint(&mut m)?,
                r => r?,
            }
        }
        self.maybe_refresh(&mut m)?;
        // The newest checkpoint that wrote a change of the file only a checkpoint records (its
        // creation, a name, an attribute set), whoever sealed it: recovered only once its last
        // log is written. Waiting for later checkpoints too would wait for every payload
        // sealed before them, other writers' included: a checkpoint is written only once all
        // of those are.
        let newest = (
            cell.lock().ckpt_seq,
            self.config.barrier != Barrier::Superblock,
        );
        // Durable once written: the log writer writes (and flushes) after `meta` is released.
        m.unlock_and_write()?;
        self.wait_sealed(newest.0, newest.1, cell.ino)?;
        sealed.map_or(Ok(()), |(seq, flush)| {
            self.wait_sealed(seq, flush, cell.ino)
        })
    }

    pub fn sync_all(&self) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        self.check_usable()?;
        self.refresh_superblock(&mut m)?;
        m.unlock_and_write()
    }

    /// Resolves a path to its inode, following symbolic links; `/`, empty components and `.`
    /// are ignored, `..` goes to the parent.
    pub fn lookup(&self, m: &Meta, path: &str) -> Result<u64> {
        self.resolve(m, path, true)
    }

    /// Resolves a path, following symbolic links in every component but the last unless
    /// `follow_last`. A relative link target is resolved from the link's directory; an absolute
    /// one from the pool's root, after removing the mount point set with
    /// [`Fs::set_mount_point`] (a target outside it is not found). At most 40 links are followed.
    pub fn resolve(&self, m: &Meta, path: &str, follow_last: bool) -> Result<u64> {
        self.resolve_traced(m, path, follow_last)
            .map(|(ino, _)| ino)
    }

    /// [`Inner::resolve`], also telling whether no symbolic link was followed on the way.
    pub fn resolve_traced(&self, m: &Meta, path: &str, follow_last: bool) -> Result<(u64, bool)> {
        if let Some(found) = self.resolve_plain(m, path, follow_last) {
            return found;
        }
        const LINKS_MAX: u32 = 40;
        let mut todo: Vec<String> = path
            .split('/')
            .rev()
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::to_string)
            .collect();
        let mut cur = ROOT_INO;
        let mut trail: Vec<u64> = Vec::new();
        let mut links = 0;
        while let Some(part) = todo.pop() {
            if part == "." {
                continue;
            }
            let Some(entries) = m.dirs.get(&cur) else {
                return Err(Error::NotDir(path.to_string()));
            };
            if part == ".." {
                cur = trail.pop().unwrap_or(ROOT_INO);
                continue;
            }
            let Some(&(child, is_dir)) = entries.get(part.as_str()) else {
                return Err(Error::NotFound(path.to_string()));
            };
            let last = todo.is_empty();
            if !is_dir && (follow_last || !last) {
                let cell = self.cell(m, child)?;
                if cell.lock().kind == FileKind::Symlink {
                    links += 1;
                    if links > LINKS_MAX {
                        return Err(Error::Loop(path.to_string()));
                    }
                    let target = self.link_target(&cell)?;
                    let rest = if let Some(abs) = target.strip_prefix('/') {
                        cur = ROOT_INO;
                        trail.clear();
                        let mount = self.mount_point.lock().unwrap_or_else(|p| p.into_inner());
                        match mount.as_deref() {
                            None => abs.to_string(),
                            Some(mp) => match target.strip_prefix(mp) {
                                Some(r) if r.is_empty() || r.starts_with('/') => r.to_string(),
                                _ => {
                                    return Err(Error::NotFound(format!(
                                        "{path} (its link to {target} leaves the pool)"
                                    )))
                                }
                            },
                        }
                    } else {
                        target
                    };
                    todo.extend(
                        rest.split('/')
                            .rev()
                            .filter(|p| !p.is_empty() && *p != ".")
                            .map(str::to_string),
                    );
                    continue;
                }
            }
            trail.push(cur);
            cur = child;
        }
        Ok((cur, links == 0))
    }

    /// [`Inner::resolve_traced`] without allocating, for a path with no `..` that meets no
    /// symbolic link to follow (the common case); `None` sends the others the general way.
    fn resolve_plain(
        &self,
        m: &Meta,
        path: &str,
        follow_last: bool,
    ) -> Option<Result<(u64, bool)>> {
        let mut parts = path
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .peekable();
        let mut cur = ROOT_INO;
        while let Some(part) = parts.next() {
            if part == ".." {
                return None;
            }
            let Some(entries) = m.dirs.get(&cur) else {
                return Some(Err(Error::NotDir(path.to_string())));
            };
            let Some(&(child, is_dir)) = entries.get(part) else {
                return Some(Err(Error::NotFound(path.to_string())));
            };
            let last = parts.peek().is_none();
            if !is_dir && (follow_last || !last) {
                let cell = m.inodes.get(&child)?;
                if cell.lock().kind == FileKind::Symlink {
                    return None;
                }
            }
            cur = child;
        }
        Some(Ok((cur, true)))
    }

    /// Remembers in the path cache that `path` names `cell`, when it resolved with no link
    /// followed (`plain`) and is not a link itself. Under `meta`.
    fn remember(&self, path: &str, plain: bool, cell: &Arc<InodeCell>) {
        if plain {
            let st = cell.lock();
            if st.kind != FileKind::Symlink && !st.freed {
                self.names.insert(path, cell, &st);
            }
        }
    }

    /// A symbolic link's target.
    pub fn link_target(&self, cell: &InodeCell) -> Result<String> {
        let size = {
            let st = cell.lock();
            if st.kind != FileKind::Symlink {
                return Err(Error::Invalid(format!(
                    "inode {}: not a symbolic link",
                    cell.ino
                )));
            }
            st.size
        };
        let mut buf = vec![0u8; size as usize];
        let n = self.pread(cell, &mut buf, 0)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| {
            Error::Corrupt(format!(
                "inode {}: symbolic link target is not UTF-8",
                cell.ino
            ))
        })
    }

    /// Splits a path into its parent directory's inode and the last name.
    pub fn parent_of<'p>(&self, m: &Meta, path: &'p str) -> Result<(u64, &'p str)> {
        self.parent_of_traced(m, path)
            .map(|(parent, name, _)| (parent, name))
    }

    /// [`Inner::parent_of`], also telling whether no symbolic link was followed to the parent.
    pub fn parent_of_traced<'p>(&self, m: &Meta, path: &'p str) -> Result<(u64, &'p str, bool)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(Error::Invalid(format!(
                "{path}: not a name that can be created or removed"
            )));
        }
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong(path.to_string()));
        }
        let (parent, plain) = self.resolve_traced(m, dir, true)?;
        if !m.dirs.contains_key(&parent) {
            return Err(Error::NotDir(path.to_string()));
        }
        Ok((parent, name, plain))
    }

    pub fn cell(&self, m: &Meta, ino: u64) -> Result<Arc<InodeCell>> {
        m.inodes
            .get(&ino)
            .cloned()
            .ok_or_else(|| Error::Corrupt(format!("directory entry names missing inode {ino}")))
    }

    fn alloc_ino(&self, m: &mut Meta) -> u64 {
        if let Some(ino) = m.free_inos.pop_first() {
            return ino;
        }
        let ino = m.next_ino;
        m.next_ino += 1;
        ino
    }

    /// Adds a new inode to the tree under `parent`.
    pub fn create_inode(
        &self,
        m: &mut Meta,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        owner: (u32, u32),
    ) -> Result<Arc<InodeCell>> {
        self.make_room_for_change(m, parent)?;
        let ino = self.alloc_ino(m);
        let cell = Arc::new(InodeCell {
            ino,
            st: Mutex::new(InodeState::new(kind, mode, now_ns(), owner)),
        });
        m.inodes.insert(ino, cell.clone());
        if kind == FileKind::Dir {
            m.dirs.insert(ino, DirEntries::new());
            m.dirs_dirty.insert(ino);
            if let Some(p) = m.inodes.get(&parent) {
                p.lock().nlink += 1;
            }
        }
        m.dirs
            .get_mut(&parent)
            .expect("parent checked")
            .insert(name.into(), (ino, kind == FileKind::Dir));
        self.touch_dir(m, parent);
        m.namespace_changed(ino);
        Ok(cell)
    }

    pub fn touch_dir(&self, m: &mut Meta, dir: u64) {
        m.dirs_dirty.insert(dir);
        m.namespace_changed(dir);
        if let Some(c) = m.inodes.get(&dir) {
            let mut st = c.lock();
            st.mtime_ns = now_ns();
            st.ctime_ns = st.mtime_ns;
        }
    }

    /// Drops one link to `ino`; frees it if nothing holds it open.
    pub fn drop_link(&self, m: &mut Meta, ino: u64) -> Result<()> {
        let cell = self.cell(m, ino)?;
        let free = {
            let mut st = cell.lock();
            st.names_gen += 1;
            st.nlink = if st.kind == FileKind::Dir {
                0
            } else {
                st.nlink.saturating_sub(1)
            };
            st.ctime_ns = now_ns();
            st.nlink == 0 && st.open == 0
        };
        m.namespace_changed(ino);
        if free {
            self.free_inode(m, &cell);
        }
        Ok(())
    }

    /// Releases an inode's blocks and number.
    pub fn free_inode(&self, m: &mut Meta, cell: &InodeCell) {
        let mut st = cell.lock();
        if st.freed {
            return;
        }
        st.freed = true;
        let seq = m.writer.seq;
        let now = now_ns();
        let blocks = st.map.blocks.iter().copied().filter(|&a| a != 0);
        m.seg_dec_all_at(
            blocks.chain(st.map.node_addrs()),
            seq,
            self.segment_blocks,
            now,
        );
        let released = st.dirty.len() as u64 * BLOCK_U64;
        let buffers = std::mem::take(&mut st.dirty);
        drop(st);
        if !buffers.is_empty() {
            m.drop_later.push(buffers);
        }
        self.dirty_bytes.fetch_sub(released, AtomicOrdering::AcqRel);
        m.inodes.remove(&cell.ino);
        m.dirs.remove(&cell.ino);
        m.dirs_dirty.remove(&cell.ino);
        m.pending.remove(&cell.ino);
        m.freed_slots.insert(cell.ino);
        m.free_inos.insert(cell.ino);
        m.ns_dirty = true;
    }

    pub fn set_len(&self, cell: &InodeCell, len: u64) -> Result<()> {
        self.check_writable()?;
        if len > FILE_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "inode {}: size {len} past the largest file",
                cell.ino
            )));
        }
        let mut m = self.lock_meta();
        let mut st = cell.lock();
        if st.freed {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        if st.kind == FileKind::Dir {
            return Err(Error::IsDir(format!("inode {}", cell.ino)));
        }
        if len < st.size {
            let keep = len.div_ceil(BLOCK_U64);
            let seq = m.writer.seq;
            for a in st.map.truncate(keep) {
                m.seg_dec(a, seq, self.segment_blocks);
            }
            let dropped: Vec<u64> = st.dirty.range(keep..).map(|(&b, _)| b).collect();
            for b in &dropped {
                st.dirty.remove(b);
            }
            self.dirty_bytes
                .fetch_sub(dropped.len() as u64 * BLOCK_U64, AtomicOrdering::AcqRel);
            // The kept tail block must read as zeros past the new size if the file grows again.
            let within = (len % BLOCK_U64) as usize;
            if within != 0 {
                let block = len / BLOCK_U64;
                let mut data = zeroed_block();
                let bytes = Arc::get_mut(&mut data).expect("a new block is not shared");
                self.read_block(cell.ino, &st, block, &mut bytes[..])?;
                bytes[within..].fill(0);
                let gen = st.next_gen;
                st.next_gen += 1;
                let fresh = DirtyBlock::new(gen, data);
                self.note_width(block + 1);
                if st.dirty.insert(block, fresh).is_none() {
                    self.dirty_bytes
                        .fetch_add(BLOCK_U64, AtomicOrdering::AcqRel);
                }
                // A buffer to seal, as after a write.
                self.mark_dirty(cell.ino);
            }
        }
        st.size = len;
        st.mtime_ns = now_ns();
        st.ctime_ns = st.mtime_ns;
        st.attr_dirty = true;
        drop(st);
        m.namespace_changed(cell.ino);
        Ok(())
    }

    pub fn stat_cell(&self, cell: &InodeCell) -> Result<Stat> {
        let st = cell.lock();
        if st.freed {
            return Err(Error::BadHandle(format!("inode {}", cell.ino)));
        }
        let extra = st.dirty.keys().filter(|&&b| st.map.get(b) == 0).count() as u64;
        Ok(Stat {
            ino: cell.ino,
            kind: st.kind,
            mode: st.mode & 0o7777,
            nlink: st.nlink,
            size: st.size,
            blocks: st.map.mapped_blocks() + extra,
            mtime_ns: st.mtime_ns,
            ctime_ns: st.ctime_ns,
            atime_ns: st.atime_ns,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev,
        })
    }

    /// A handle closed: free the inode if it was the last one to an unlinked file.
    pub fn release(&self, cell: &InodeCell) {
        // Only the inode lock unless this may be the last handle to an unlinked file: `drop_link`
        // changes the link count under the inode lock too, so of a close and an unlink racing,
        // the later one sees both counts at zero and frees.
        let maybe_free = {
            let mut st = cell.lock();
            st.open = st.open.saturating_sub(1);
            st.open == 0 && st.nlink == 0 && !st.freed
        };
        if !maybe_free || self.read_only {
            return;
        }
        let mut m = self.lock_meta();
        let free = {
            let st = cell.lock();
            st.open == 0 && st.nlink == 0 && !st.freed
        };
        if free {
            self.free_inode(&mut m, cell);
        }
    }
}

impl Meta {
    /// `ino`'s record changed in a way only a checkpoint records (creation, a name or link, an
    /// attribute or size set): the next checkpoint writes it, and the file's syncs wait for
    /// that checkpoint (`InodeState::ckpt_seq`).
    pub fn namespace_changed(&mut self, ino: u64) {
        self.pending.insert(ino);
        self.ns_changed.insert(ino);
        self.ns_dirty = true;
    }

    pub fn seg_of(block: u64, segment_blocks: u64) -> usize {
        ((block - format::FIRST_SEGMENT_BLOCK) / segment_blocks) as usize
    }

    pub fn seg_inc(&mut self, block: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        self.seg.live[s] += 1;
    }

    /// The live tree drops `block`. A retained checkpoint that references it keeps it pinned.
    pub fn seg_dec(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        self.seg_dec_at(block, seq, segment_blocks, now_ns());
    }

    /// [`Meta::seg_dec_at`] for every block of `blocks` (a deleted file's): whether nothing
    /// keeps the checkpoints that may reference a block depends only on the checkpoint it was
    /// born after, the same for most blocks of a file, so it is looked up once per run of
    /// blocks born alike instead of once per block.
    pub fn seg_dec_all_at(
        &mut self,
        blocks: impl Iterator<Item = u64>,
        seq: u64,
        segment_blocks: u64,
        now: i64,
    ) {
        let mut known: Option<(u64, bool)> = None;
        // Blocks born alike have the same anchor: one look-up per run of them.
        let mut anchored: Option<(u64, Option<u64>)> = None;
        let died = self.checkpoint;
        let mut pins = Vec::new();
        for block in blocks {
            self.seg_dec_unpinned(block, seq, segment_blocks);
            let born = self.born_of(block, segment_blocks);
            let unkept = match known {
                Some((b, unkept)) if b == born => unkept,
                _ => {
                    let unkept = born <= self.checkpoint
                        && self.life.only_newest_unkept(born, self.checkpoint, now);
                    known = Some((born, unkept));
                    unkept
                }
            };
            if unkept {
                // Only the newest checkpoint can reference it, and nothing keeps that one (no
                // snapshot, view or protection period, as in a memory pool): the next
                // checkpoint releases it. Until a superblock names a later checkpoint the
                // segment's `dead_at` keeps the block from reuse, so no pin is needed (one per
                // block of every file deleted or overwritten, dropped again at the next
                // checkpoint); the newest checkpoint just cannot be opened as a view or made a
                // snapshot any more.
                self.superseded_since_ckpt = true;
            } else {
                let anchor = match anchored {
                    Some((b, anchor)) if b == born => anchor,
                    _ => {
                        let anchor = self.life.anchor(born, died);
                        anchored = Some((born, anchor));
                        anchor
                    }
                };
                if let Some(anchor) = anchor {
                    pins.push((block, super::lifecycle::Pin { born, died, anchor }));
                }
            }
        }
        if !pins.is_empty() {
            self.pin_all(pins, segment_blocks);
        }
    }

    /// [`Meta::seg_dec`] with the time read once by a caller dropping many blocks.
    pub fn seg_dec_at(&mut self, block: u64, seq: u64, segment_blocks: u64, now: i64) {
        self.seg_dec_all_at(std::iter::once(block), seq, segment_blocks, now);
    }

    /// The live tree drops `block`, which no retained checkpoint needs (a table block: only the
    /// newest checkpoint's tables are ever read).
    pub fn seg_dec_unpinned(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let s = Self::seg_of(block, segment_blocks);
        debug_assert!(
            self.seg.live[s] > 0,
            "segment {s} live count underflow at block {block}"
        );
        self.seg.live[s] = self.seg.live[s].saturating_sub(1);
        self.dropped_since_ckpt += 1;
        // Every such drop counts, not only the last: the durable checkpoint may reference any
        // block that died after it, whatever killed the segment's last block.
        self.seg.dead_at[s] = self.seg.dead_at[s].max(seq);
    }

    /// The live tree drops file data `block` because the data-only log `seq` wrote a newer copy
    /// of it. Roll-forward replays that log over every checkpoint written before it, so when
    /// the only retained checkpoint that can reference the block is the newest and nothing keeps
    /// that one (no snapshot, open view or protection period), the block needs no pin and its
    /// segment may be reused as soon as the last log of the run holding that log is durable
    /// (`Inner::segment_free`; recovery replays a run's parts only whole), without waiting for a
    /// checkpoint. Otherwise as `seg_dec`.
    pub fn seg_supersede(&mut self, block: u64, seq: u64, segment_blocks: u64) {
        let born = self.born_of(block, segment_blocks);
        if !self
            .life
            .only_newest_unkept(born, self.checkpoint, now_ns())
        {
            self.seg_dec(block, seq, segment_blocks);
            return;
        }
        let s = Self::seg_of(block, segment_blocks);
        debug_assert!(
            self.seg.live[s] > 0,
            "segment {s} live count underflow at block {block}"
        );
        self.seg.live[s] = self.seg.live[s].saturating_sub(1);
        // Not reusable at all until the run's last log is sealed, which says from when.
        self.seg.soft_dead_at[s] = u64::MAX;
        if self.run_soft_dead.last() != Some(&s) {
            self.run_soft_dead.push(s);
        }
        if born <= self.checkpoint {
            self.superseded_since_ckpt = true;
        }
    }
}

/// The inodes with something buffered for the next commit, behind one mutex (a writer notes its
/// file in both sets in one trip).
#[derive(Debug, Default)]
pub(crate) struct DirtySet {
    /// Every inode dirtied since a checkpoint took them: the next checkpoint's work.
    pub all: DenseSet,
    /// Those that may still have something a data-only log can take: buffers in no sealed log,
    /// or attributes, unless only a checkpoint may record the file (`Meta::ns_changed`). What
    /// sealing a full buffer looks through. Entries are added with `all` (under the inode's
    /// lock, after the change, or under `meta`) and dropped under `meta` and the inode's lock
    /// by a seal that finds nothing more to take (`Inner::settle_sealed`; never for a freed
    /// inode, whose number may be a newer file's by then); a checkpoint leaves them for the
    /// next seal to drop. Sealing went through every file written since the last
    /// checkpoint before, most of them sealed already and placed (their attributes wait for the
    /// checkpoint): 909 files per seal of a full buffer in a 10 s fileserver run, 482 now.
    pub to_seal: DenseSet,
}

impl DirtySet {
    pub fn insert(&mut self, ino: u64) {
        self.all.insert(ino);
        self.to_seal.insert(ino);
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// An open pool. Cheap to clone; all clones share one file tree. Thread-safe.
#[derive(Clone, Debug)]
pub struct Fs {
    pub(crate) inner: Arc<Inner>,
}

/// An open file. Dropping it closes it.
#[derive(Debug)]
pub struct File {
    inner: Arc<Inner>,
    cell: Arc<InodeCell>,
    flags: OpenFlags,
    pos: u64,
}

impl Fs {
    /// Makes a new, empty pool on `dev` (destroying what was there) and opens it.
    pub fn format(dev: DeviceRef, config: &Config) -> Result<Fs> {
        let inner = super::recovery::format(dev, config)?;
        Ok(Fs::start(inner))
    }

    /// Opens an existing pool, recovering it: newest valid superblock, its checkpoint,
    /// roll-forward over the logs after it, and a fresh checkpoint.
    pub fn open(dev: DeviceRef, options: &OpenOptions) -> Result<Fs> {
        let inner = super::recovery::open(dev, options)?;
        Ok(Fs::start(inner))
    }

    fn start(inner: Arc<Inner>) -> Fs {
        // A panic in any thread using the pool then names its site when it poisons the pool.
        crate::panics::install_hook();
        // Recovery's checkpoint ran before `meta` was a lock: only holds count.
        for ns in &inner.meta_section_ns {
            ns.store(0, AtomicOrdering::Relaxed);
        }
        if !inner.read_only {
            let period = [
                inner.config.checkpoint_every,
                Some(inner.config.superblock_every),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(5))
            .min(if inner.config.background_gc {
                // The cleaner looks at the free space this often.
                Duration::from_millis(100)
            } else {
                Duration::MAX
            })
            .max(Duration::from_millis(10));
            let weak = Arc::downgrade(&inner);
            let wake = inner.wake.clone();
            let handle = std::thread::Builder::new()
                .name("tbfs-checkpoint".into())
                .spawn(move || {
                    // A panic poisons the pool, naming its site, instead of ending the thread
                    // unseen (the cleaner would stop, and writers would find no space).
                    let run = crate::panics::catch(|| background(weak.clone(), wake, period));
                    if let (Err(p), Some(inner)) = (run, weak.upgrade()) {
                        inner.poison_reason(format!("the background thread {p}"));
                    }
                })
                .ok();
            *inner.background.lock().unwrap_or_else(|p| p.into_inner()) = handle;
        }
        Fs { inner }
    }

    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner
            .report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The advisory lock table every handle to this pool shares (POSIX, OFD and `flock` locks,
    /// see [`super::locks`]).
    pub fn locks(&self) -> &super::locks::LockTable {
        &self.inner.locks
    }

    /// The configuration in effect.
    pub fn config(&self) -> Config {
        self.inner.config.clone()
    }

    pub fn counters(&self) -> FsCounters {
        let mut c = *self
            .inner
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        c.meta_held_ns = self.inner.meta_held_ns.load(AtomicOrdering::Relaxed);
        let section =
            |s: Section| self.inner.meta_section_ns[s as usize].load(AtomicOrdering::Relaxed);
        c.meta_checkpoint_ns = section(Section::Checkpoint);
        c.meta_cleaning_ns = section(Section::Cleaning);
        c.meta_sealing_ns = section(Section::Sealing);
        c
    }

    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<File> {
        let inner = &self.inner;
        inner.check_usable()?;
        if (flags.write || flags.create || flags.truncate) && inner.read_only {
            return Err(Error::ReadOnly(path.to_string()));
        }
        let cell = match self.open_cached(path, flags)? {
            Some(cell) => cell,
            None => {
                // The new file's owner, asked of the kernel before `meta` is taken: a system
                // call under the lock is a point where its holder may be preempted.
                let owner = flags.create.then(crate::sys::proc::effective_ids);
                let mut m = inner.lock_meta();
                let create = |m: &mut Meta, parent: u64, name: &str| {
                    let owner = owner.unwrap_or_else(crate::sys::proc::effective_ids);
                    inner.create_inode(m, parent, name, FileKind::File, flags.mode, owner)
                };
                // Most creates name a new file: one walk to its directory, rather than a walk
                // to the file that fails at its last name and a second one to the directory.
                // Anything else (the name exists, or is `.` or `..`) takes the full walk.
                let new = flags
                    .create
                    .then(|| inner.parent_of_traced(&m, path).ok())
                    .flatten()
                    .filter(|&(parent, name, _)| {
                        m.dirs.get(&parent).is_some_and(|d| !d.contains_key(name))
                    });
                let (cell, plain) = match new {
                    Some((parent, name, plain)) => (create(&mut m, parent, name)?, plain),
                    None => match inner.resolve_traced(&m, path, true) {
                        Ok((ino, plain)) => {
                            if flags.create && flags.exclusive {
                                return Err(Error::Exists(path.to_string()));
                            }
                            (inner.cell(&m, ino)?, plain)
                        }
                        Err(Error::NotFound(_)) if flags.create => {
                            let (parent, name, plain) = inner.parent_of_traced(&m, path)?;
                            (create(&mut m, parent, name)?, plain)
                        }
                        Err(e) => return Err(e),
                    },
                };
                inner.remember(path, plain, &cell);
                {
                    let mut st = cell.lock();
                    if st.kind == FileKind::Dir && (flags.write || flags.truncate) {
                        return Err(Error::IsDir(path.to_string()));
                    }
                    st.open += 1;
                }
                drop(m);
                cell
            }
        };
        let file = File {
            inner: inner.clone(),
            cell,
            flags,
            pos: 0,
        };
        if flags.truncate && flags.write && file.cell.lock().size > 0 {
            inner.set_len(&file.cell, 0)?;
        }
        Ok(file)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.inner.check_writable()?;
        let owner = crate::sys::proc::effective_ids();
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m, path)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(path.to_string()));
        }
        self.inner
            .create_inode(&mut m, parent, name, FileKind::Dir, mode, owner)?;
        Ok(())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m, path)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(path.to_string()));
        };
        if !is_dir {
            return Err(Error::NotDir(path.to_string()));
        }
        if !m.dirs[&ino].is_empty() {
            return Err(Error::NotEmpty(path.to_string()));
        }
        self.inner.names.dirs_changed();
        m.dirs.get_mut(&parent).expect("parent").remove(name);
        if let Some(p) = m.inodes.get(&parent) {
            let mut st = p.lock();
            st.nlink = st.nlink.saturating_sub(1);
        }
        self.inner.touch_dir(&mut m, parent);
        self.inner.drop_link(&mut m, ino)
    }

    /// Removes the name now; the inode is freed when the last open handle closes.
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m, path)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(path.to_string()));
        };
        if is_dir {
            return Err(Error::IsDir(path.to_string()));
        }
        m.dirs.get_mut(&parent).expect("parent").remove(name);
        self.inner.touch_dir(&mut m, parent);
        self.inner.drop_link(&mut m, ino)
    }

    /// Atomically renames, replacing an existing file (or empty directory) at `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        let (src_parent, src_name) = inner.parent_of(&m, from)?;
        let (dst_parent, dst_name) = inner.parent_of(&m, to)?;
        let what = |dst: bool| if dst { to } else { from }.to_string();
        inner.rename_entry(
            &mut m,
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            super::by_ino::RenameMode::Replace,
            &what,
        )
    }

    pub fn stat(&self, path: &str) -> Result<Stat> {
        self.stat_at(path, true)
    }

    /// `stat` (`follow`) or `lstat`: from the path cache when it holds the path.
    fn stat_at(&self, path: &str, follow: bool) -> Result<Stat> {
        self.inner.check_usable()?;
        if let Some(hit) = self.inner.names.get(path) {
            let valid = hit.valid(&hit.cell.lock(), &self.inner.names);
            if valid {
                return self.inner.stat_cell(&hit.cell);
            }
            self.inner.names.forget(path);
        }
        let m = self.inner.lock_meta();
        let (ino, plain) = self.inner.resolve_traced(&m, path, follow)?;
        let cell = self.inner.cell(&m, ino)?;
        self.inner.remember(path, plain, &cell);
        drop(m);
        self.inner.stat_cell(&cell)
    }

    /// `open_file` of a path the path cache holds, without `meta`: `None` sends it the long way
    /// (not cached, or stale). A truncation follows in `open_file`, as after any open.
    fn open_cached(&self, path: &str, flags: OpenFlags) -> Result<Option<Arc<InodeCell>>> {
        let Some(hit) = self.inner.names.get(path) else {
            return Ok(None);
        };
        let mut st = hit.cell.lock();
        if !hit.valid(&st, &self.inner.names) {
            drop(st);
            self.inner.names.forget(path);
            return Ok(None);
        }
        if flags.create && flags.exclusive {
            return Err(Error::Exists(path.to_string()));
        }
        if st.kind == FileKind::Dir && (flags.write || flags.truncate) {
            return Err(Error::IsDir(path.to_string()));
        }
        st.open += 1;
        drop(st);
        Ok(Some(hit.cell))
    }

    /// Changes a file's or directory's attributes (chmod, chown, utimens), following a
    /// symbolic link.
    pub fn set_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.set_attr_at(path, attr, true)
    }

    /// Like [`Fs::set_attr`], but changes a symbolic link itself (lchown, `AT_SYMLINK_NOFOLLOW`).
    pub fn lset_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.set_attr_at(path, attr, false)
    }

    fn set_attr_at(&self, path: &str, attr: &SetAttr, follow: bool) -> Result<()> {
        self.inner.check_writable()?;
        let cell = {
            let m = self.inner.lock_meta();
            let ino = self.inner.resolve(&m, path, follow)?;
            self.inner.cell(&m, ino)?
        };
        self.inner.set_attr(&cell, attr)
    }

    /// When reads update access times, from now on in this process (default: relatime).
    pub fn set_atime_policy(&self, policy: AtimePolicy) {
        self.inner
            .atime
            .store(policy as u8, AtomicOrdering::Relaxed);
    }

    /// Like [`Fs::stat`], but a symbolic link is described itself, not followed.
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        self.stat_at(path, false)
    }

    /// Makes a symbolic link at `path` to `target` (stored as given).
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        if target.is_empty() || target.len() > 4095 {
            return Err(Error::Invalid(format!(
                "{path}: link target of {} bytes",
                target.len()
            )));
        }
        let owner = crate::sys::proc::effective_ids();
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m, path)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(path.to_string()));
        }
        let cell =
            self.inner
                .create_inode(&mut m, parent, name, FileKind::Symlink, 0o777, owner)?;
        drop(m);
        self.inner.pwrite(&cell, target.as_bytes(), 0, false)?;
        Ok(())
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let ino = self.inner.resolve(&m, path, false)?;
        let cell = self.inner.cell(&m, ino)?;
        drop(m);
        if cell.lock().kind != FileKind::Symlink {
            return Err(Error::Invalid(format!("{path}: not a symbolic link")));
        }
        self.inner.link_target(&cell)
    }

    /// Makes `new` another name of the file at `existing` (a hard link; not for directories).
    pub fn link(&self, existing: &str, new: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let ino = self.inner.resolve(&m, existing, false)?;
        let cell = self.inner.cell(&m, ino)?;
        if cell.lock().kind == FileKind::Dir {
            return Err(Error::NotPermitted(format!(
                "{existing}: a hard link to a directory"
            )));
        }
        let (parent, name) = self.inner.parent_of(&m, new)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(new.to_string()));
        }
        self.inner.make_room_for_change(&mut m, parent)?;
        m.dirs
            .get_mut(&parent)
            .expect("parent checked")
            .insert(name.into(), (ino, false));
        {
            let mut st = cell.lock();
            st.nlink += 1;
            st.ctime_ns = now_ns();
        }
        self.inner.touch_dir(&mut m, parent);
        m.namespace_changed(ino);
        Ok(())
    }

    /// Where this pool is mounted in the process's paths, for absolute symbolic link targets:
    /// `/mnt/fast/x` then resolves to `/x` in the pool. `None` (the default): absolute targets
    /// start at the pool's root.
    pub fn set_mount_point(&self, mount: Option<&str>) {
        *self
            .inner
            .mount_point
            .lock()
            .unwrap_or_else(|p| p.into_inner()) =
            mount.map(|s| s.trim_end_matches('/').to_string());
    }

    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        self.inner.check_writable()?;
        let cell = {
            let m = self.inner.lock_meta();
            let ino = self.inner.lookup(&m, path)?;
            self.inner.cell(&m, ino)?
        };
        self.inner.set_len(&cell, len)
    }

    /// Entries of a directory, sorted by name, without `.` and `..`.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let ino = self.inner.lookup(&m, path)?;
        let Some(entries) = m.dirs.get(&ino) else {
            return Err(Error::NotDir(path.to_string()));
        };
        Ok(dir_entries(entries, |ino| kind_in(&m, ino)))
    }

    pub fn statvfs(&self) -> Result<StatVfs> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let total = self.inner.segment_blocks * self.inner.segment_count;
        // What can really be written (`SpaceReport::available`), not what is not live.
        let available = self.inner.space_report(&m).available / BLOCK_U64;
        Ok(StatVfs {
            block_size: BLOCK_U64,
            blocks: total,
            blocks_free: available,
            files: m.inodes.len() as u64,
            name_max: NAME_MAX as u64,
        })
    }

    /// Writes all buffered data and a checkpoint, and makes them durable (like `syncfs`).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Syncs, stops background work and releases the device. Later calls on clones fail.
    pub fn close(self) -> Result<()> {
        let result = if self.inner.read_only {
            self.inner.check_usable()
        } else {
            self.inner.sync_all()
        };
        self.inner.closed.store(true, AtomicOrdering::Release);
        stop_background(&self.inner);
        result
    }
}

/// A directory's entries as `readdir` returns them; `kind_of` tells the kind of a name that is
/// not a directory (entries store only whether a name is a directory).
pub(crate) fn dir_entries(
    entries: &DirEntries,
    kind_of: impl Fn(u64) -> Option<FileKind>,
) -> Vec<DirEntry> {
    entries
        .iter()
        .map(|(name, &(ino, is_dir))| DirEntry {
            name: name.to_string(),
            ino,
            kind: if is_dir {
                FileKind::Dir
            } else {
                kind_of(ino).unwrap_or(FileKind::File)
            },
        })
        .collect()
}

/// The kind of inode `ino` in `m`, for [`dir_entries`].
pub(crate) fn kind_in(m: &Meta, ino: u64) -> Option<FileKind> {
    m.inodes.get(&ino).map(|c| c.lock().kind)
}

/// Child → parent links of every directory.
pub(crate) fn parent_links(m: &Meta) -> HashMap<u64, u64> {
    let mut parents = HashMap::new();
    for (&dir, entries) in &m.dirs {
        for &(child, is_dir) in entries.values() {
            if is_dir {
                parents.insert(child, dir);
            }
        }
    }
    parents
}

pub(crate) fn stop_background(inner: &Inner) {
    {
        let (lock, cv) = &*inner.wake;
        lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        cv.notify_all();
    }
    let handle = inner
        .background
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(h) = handle {
        if h.thread().id() != std::thread::current().id() {
            let _ = h.join();
        }
    }
}

/// Writes checkpoints and refreshes the superblock on the configured schedule. Holds the pool only
/// while it works, so dropping the last handle drops the pool at once.
fn background(weak: Weak<Inner>, wake: Arc<(Mutex<Wake>, Condvar)>, period: Duration) {
    // Background checkpoints and cleaning are idle-class I/O (in the kernel, and in `sched` through the
    // thread's ioprio); a thread that waits for one lends it its own priority (`lock_meta`).
    let _ = crate::sched::Prio {
        class: crate::sched::Class::Idle,
        level: crate::sched::LEVEL_MAX,
    }
    .apply_to_current_thread();
    // The periodic work is due this long after it last ran, however often writers wake the
    // thread for their logs meanwhile.
    let mut last_periodic = Instant::now();
    loop {
        {
            let (lock, cv) = &*wake;
            let why = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (mut why, _) = cv
                .wait_timeout_while(why, period.saturating_sub(last_periodic.elapsed()), |w| {
                    !w.stop && !w.logs && !w.clean
                })
                .unwrap_or_else(|p| p.into_inner());
            if why.stop {
                return;
            }
            let logs = std::mem::take(&mut why.logs);
            let clean = std::mem::take(&mut why.clean);
            drop(why);
            if logs {
                // A writer sealed a superblock, or left its logs, and went on: write them (and
                // what is before them) here, without `meta`, so no writer waits for their
                // turns in the device or their flushes.
                let Some(inner) = weak.upgrade() else { return };
                if inner.write_logs_until(u64::MAX).is_err() {
                    return;
                }
                if inner.write_handed_off_superblocks().is_err() {
                    return;
                }
                if last_periodic.elapsed() < period && !clean {
                    continue;
                }
            }
        }
        last_periodic = Instant::now();
        let Some(inner) = weak.upgrade() else { return };
        if inner.check_writable().is_err() {
            return;
        }
        let mut m = inner.lock_meta();
        crate::failpoint::hit("tbfs.background");
        let due_checkpoint = inner
            .config
            .checkpoint_every
            .is_some_and(|every| m.checkpoint_at.is_none_or(|t| t.elapsed() >= every));
        let dirty = !m.pending.is_empty()
            || m.ns_dirty
            || !inner
                .dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty();
        let result = if due_checkpoint && dirty {
            inner
                .commit_checkpoint(&mut m)
                .and_then(|()| inner.maybe_refresh(&mut m))
        } else {
            inner.maybe_refresh(&mut m)
        };
        let result = result.and_then(|()| m.unlock_and_write());
        let result = result.and_then(|()| {
            if inner.config.background_gc {
                inner.background_clean()
            } else {
                Ok(())
            }
        });
        // Cleaning that finds no room is not an error for the background; writers see it.
        let result = match result {
            Err(Error::NoSpace(_)) => Ok(()),
            other => other,
        };
        if let Err(e) = result {
            inner.poison(&e);
            return;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropped by a panic's unwinding: what is in memory cannot be trusted to write.
        self.poison_if_unwinding("a thread that dropped the pool's last handle");
        // A pool dropped without `close` still writes what it buffered, like a process exiting
        // after its last write; errors have nowhere to go.
        if !self.read_only
            && !self.closed.load(AtomicOrdering::Acquire)
            && self.check_usable().is_ok()
        {
            let _ = self.sync_all();
        }
    }
}

impl File {
    /// A handle to `cell`, whose open count the caller raised (the count this handle drops).
    pub(crate) fn of_cell(inner: Arc<Inner>, cell: Arc<InodeCell>, flags: OpenFlags) -> File {
        File {
            inner,
            cell,
            flags,
            pos: 0,
        }
    }

    pub fn ino(&self) -> u64 {
        self.cell.ino
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.pread(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Writes at the position, or for a handle opened `append` at the end of the file, found
    /// under the inode lock as the bytes go in ([`File::append`]): appends through handles on
    /// several threads never overwrite each other, as on an `O_APPEND` descriptor.
    pub fn write(&mut self, buf: &[u8]) -> Result<usize> {
        if self.flags.append {
            self.pos = self.append(buf)?;
            return Ok(buf.len());
        }
        let n = self.pwrite(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.check_usable()?;
        if !self.flags.read {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for reading",
                self.cell.ino
            )));
        }
        if self.cell.lock().kind == FileKind::Dir {
            return Err(Error::IsDir(format!("inode {}", self.cell.ino)));
        }
        self.inner.pread(&self.cell, buf, offset)
    }

    /// Writes `buf` at `offset`: buffered, or direct if the file was opened `direct`.
    pub fn pwrite(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.pwrite_as(buf, offset, self.flags.direct)
    }

    /// [`File::pwrite`], buffered or `direct` (`O_DIRECT`) whatever the open flags said: for a
    /// descriptor whose `O_DIRECT` `fcntl(F_SETFL)` changed. A direct write returns once its data
    /// is on the device, not flushed ([`OpenFlags::direct`]).
    pub fn pwrite_as(&self, buf: &[u8], offset: u64, direct: bool) -> Result<usize> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let n = self.inner.pwrite(&self.cell, buf, offset, direct)?;
        match self.flags.sync {
            SyncMode::None => {}
            SyncMode::Data | SyncMode::Full => self.inner.sync_file(&self.cell)?,
        }
        Ok(n)
    }

    /// Writes `buf` at the end of the file (whatever its size is now, also while other handles
    /// append) and returns the offset after it, like a `write` on an `O_APPEND` descriptor.
    pub fn append(&self, buf: &[u8]) -> Result<u64> {
        self.append_as(buf, self.flags.direct)
    }

    /// [`File::append`], buffered or `direct` whatever the open flags said ([`File::pwrite_as`]).
    pub fn append_as(&self, buf: &[u8], direct: bool) -> Result<u64> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let end = self.inner.append(&self.cell, buf, direct)?;
        match self.flags.sync {
            SyncMode::None => {}
            SyncMode::Data | SyncMode::Full => self.inner.sync_file(&self.cell)?,
        }
        Ok(end)
    }

    pub fn seek(&mut self, pos: SeekFrom) -> Result<u64> {
        let size = self.cell.lock().size;
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let target = target.ok_or_else(|| {
            Error::Invalid(format!("inode {}: seek before the start", self.cell.ino))
        })?;
        self.pos = target;
        Ok(target)
    }

    /// Makes the file's data and metadata durable.
    pub fn fsync(&self) -> Result<()> {
        self.inner.sync_file(&self.cell)
    }

    /// Makes the file's data (and the size needed to read it) durable.
    pub fn fdatasync(&self) -> Result<()> {
        self.inner.sync_file(&self.cell)
    }

    pub fn set_len(&self, len: u64) -> Result<()> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        self.inner.set_len(&self.cell, len)
    }

    /// Reserves space so writes in `offset..offset+len` do not fail for lack of it, and extends
    /// the size like `fallocate(mode 0)`. tbfs writes every block to a new place, so the
    /// reservation is a check that the pool has the room now.
    pub fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= FILE_BYTES_MAX && len > 0)
            .ok_or_else(|| {
                Error::Invalid(format!("inode {}: allocate {offset}+{len}", self.cell.ino))
            })?;
        let free = {
            let m = self.inner.lock_meta();
            self.inner.free_blocks(&m)
        };
        if len.div_ceil(BLOCK_U64) > free {
            return Err(Error::NoSpace(format!(
                "allocate of {len} bytes: {} bytes free",
                free * BLOCK_U64
            )));
        }
        if end > self.cell.lock().size {
            self.inner.set_len(&self.cell, end)?;
        }
        Ok(())
    }

    pub fn stat(&self) -> Result<Stat> {
        self.inner.check_usable()?;
        self.inner.stat_cell(&self.cell)
    }

    /// Changes the open file's attributes (fchmod, fchown, futimens), whatever it was opened for.
    pub fn set_attr(&self, attr: &SetAttr) -> Result<()> {
        self.inner.set_attr(&self.cell, attr)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        self.inner.release(&self.cell);
    }
}

/// The kind of a stored mode (the record decoder admits only the kinds there are).
pub(crate) fn mode_kind(mode: u32) -> FileKind {
    FileKind::from_mode(mode).unwrap_or(FileKind::File)
}
