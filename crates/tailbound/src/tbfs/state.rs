//! The pool's shared state: [`Engine`], everything under the `meta` lock ([`State`]), and the
//! guard that writes what a hold of `meta` sealed once it is let go.
//!
//! Locking: one `meta` mutex guards the namespace, the inode table, the log writer and segment
//! usage; each inode has its own mutex for its attributes, block map and buffered data. Order:
//! `meta` before an inode; the write path takes only the inode (and the small `dirty` set), so data
//! copies into buffers happen outside any global lock, and so does a close unless it is the last
//! handle to an unlinked file. Storage is written only by the log writer (`log`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::tbfs::blocks::*;
use crate::tbfs::budget::BufferBudget;
use crate::tbfs::dense::DenseSet;
use crate::tbfs::inode::*;
use crate::tbfs::log::pipeline::LogPipeline;
use crate::tbfs::log::{AheadPayload, LogWriter, Writer};
use crate::tbfs::space::segments::*;
use crate::tbfs::{AtimePolicy, Config, DeviceRef, Error, FsCounters, Result};
use std::thread::JoinHandle;

pub(crate) use crate::tbfs::stats::Section;

/// Everything guarded by the `meta` lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The inodes by number, and the numbering.
    pub inodes: crate::tbfs::inode_table::InodeTable,
    /// The directories' entries, and which the next checkpoint writes.
    pub dirs: crate::tbfs::directories::Directories,
    /// The namespace changes not yet checkpointed.
    pub changes: crate::tbfs::changes::Changes,
    /// The inode file: its map, its pages, the pages the next checkpoint writes again.
    pub ifile: crate::tbfs::ifile::InodeFile,
    pub writer: Writer,
    pub seg: SegmentTable,
    /// The newest checkpoint, what happened since, and the checkpoints running.
    pub ckpt: crate::tbfs::checkpoints::Checkpoints,
    /// The superblock's generation, when a refresh is due, whether one is running.
    pub refresh: crate::tbfs::refresh::Refresh,
    /// Retention, snapshots, pinned blocks and the checkpoint's tables.
    pub life: super::retention::Retention,
    /// Whether cleaning runs, its passes so far, and what the space check running may take
    /// from the reserve on a pass's or a checkpoint's behalf.
    pub cleaning: crate::tbfs::space::cleaning::Cleaning,
    /// The last call refused for room after cleaning, so calls like it are refused without
    /// cleaning again until blocks are freed.
    pub refusals: crate::tbfs::space::refusals::Refusals,
    /// What deletes and truncates added to the checkpoint debt since it was last counted
    /// whole, charged against the room kept for them.
    pub deletes_debt: crate::tbfs::space::deletes_debt::DeletesDebt,
    /// The cleaning each writer owes for what it wrote while the pool needed cleaning.
    pub tax: crate::tbfs::tax::CleaningTax,
    /// The background cleaner's victims read without `meta`, and what its pass leaves to do
    /// after `meta` is released.
    pub bg_clean: crate::tbfs::space::background::BackgroundPass,
    /// Segments whose superseded blocks wait for the end of a data-only run, or for a
    /// checkpoint, before the segment may be reused.
    pub soft_dead: crate::tbfs::space::soft_dead::SoftDead,
    /// What the present hold of `meta` leaves for its release, and tests' staging: reached
    /// only through `State`'s methods.
    pub hold: HoldScratch,
}

/// What the present hold of `meta` leaves for its release, and tests' staging: no part's state.
#[derive(Debug, Default)]
pub(crate) struct HoldScratch {
    /// Buffers of freed inodes, dropped once `meta` is released (freeing a file's buffers is
    /// memory work no other thread needs to wait for).
    drop_later: Vec<BTreeMap<u64, DirtyBlock>>,
    /// The timed sections of the present hold, innermost last, each with when its own time last
    /// started running ([`Engine::in_section`]).
    sections: Vec<(Section, Instant)>,
    /// This hold was taken again after its thread waited, with `meta` let go, for the logs in
    /// flight before it (`Engine::wait_for_room_outside`): its writers' space checks count
    /// what that wait freed and do not wait for the device again under `meta`.
    room_waited: bool,
    /// Tests: segments the writer may still enter before it finds none free (`None`: no limit),
    /// to stage what happens when the space check fell short.
    #[cfg(test)]
    segment_picks_left: Option<u64>,
}

/// Shared by every clone of an [`Fs`] and every [`File`].
#[derive(Debug)]
pub(crate) struct Engine {
    dev: DeviceRef,
    config: Config,
    pool_id: [u8; 16],
    segment_blocks: u64,
    segment_count: u64,
    read_only: bool,
    /// A fair-capable lock ([`StateGuard::unlock_fair_and_write`]): long holds hand it over
    /// between their parts instead of taking it straight back.
    meta: parking_lot::Mutex<State>,
    /// The queue of sealed logs, the log writer, the payloads and buffers in flight, and the
    /// written and durable watermarks.
    pub logs: crate::tbfs::log::pipeline::LogPipeline,
    /// Superblocks taken from the queue and not yet written, the newest generation written,
    /// and the checkpoint the newest durable superblock names.
    pub superblocks: crate::tbfs::log::superblocks::SuperblockWriter,
    /// The cleaner's copies of file data whose logs are not written yet: reads find them here.
    pub copies: super::copies::CopiesInFlight,
    /// Held for a whole background cleaning pass: one at a time (the background thread and
    /// `Fs::clean_step`), since a pass's marks and pre-read victims live in `State::bg_clean`.
    pub bg_pass: Mutex<()>,
    /// Inodes the write path dirtied (buffers or attributes) since the last commit took them.
    pub dirty: Mutex<DirtySet>,
    /// Bytes buffered, the limits on them, the widest map: read by every writer.
    pub budget: crate::tbfs::budget::BufferBudget,
    /// The counters, the time `meta` was held, and what recovery found.
    pub stats: super::stats::Statistics,
    /// Why the pool is poisoned, if it is.
    pub poison: super::poisoned::Poison,
    /// Told of segments written again and access times set (`watch.rs`).
    pub watchers: super::watch::Watchers,
    closed: AtomicBool,
    /// Writes by tenant, and where their time went ([`crate::tbfs::Fs::tenant_writes`]).
    pub writes: crate::tbfs::admission::WriteCounts,
    /// Writers take turns here, by their tenants' weights, while room is short.
    pub room_gate: crate::tbfs::admission::RoomGate,
    background: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the background thread (to stop, write a sealed superblock or clean); shared with
    /// it so it waits without holding `Engine`.
    wake: Arc<(Mutex<Wake>, Condvar)>,
    /// Priorities lent to whoever holds `meta` (and so does the commit) by threads waiting for it.
    inherit: Arc<crate::sched::inherit::Inheritance>,
    /// Advisory locks of the process on this pool's files.
    pub locks: super::locks::LockTable,
    /// Where the pool is mounted in the process's paths (absolute symbolic links under it
    /// resolve inside the pool).
    mount_point: Mutex<Option<String>>,
    /// [`AtimePolicy`] as its code.
    atime: std::sync::atomic::AtomicU8,
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
    /// A superblock refresh is due: a sync left it to the background thread.
    pub refresh: bool,
}

/// `meta` locked by the calling thread, which meanwhile inherits the priority of any thread that
/// waits for it: a commit an RT thread waits on runs at RT, in `sched` and in the kernel.
///
/// Logs sealed while it is held are written when it is released (after `meta` is unlocked, so
/// other threads go on meanwhile); [`StateGuard::unlock_and_write`] does that and reports how it
/// went.
pub(crate) struct StateGuard<'a> {
    guard: Option<parking_lot::MutexGuard<'a, State>>,
    /// Unlock fairly: hand `meta` to the longest waiter, if any, instead of letting whoever
    /// comes first (this thread again, most often) take it.
    fair: bool,
    /// When the lock was taken (`Statistics::meta_held`).
    acquired: Instant,
    hold: Option<crate::sched::inherit::Hold>,
    inner: &'a Engine,
    /// `LogPipeline::queued_total` when the lock was taken.
    start_queued: u64,
    /// The holder's phase clock when it took the lock, and where it took it: the longest
    /// holds are noted with what they did (`phases::note_hold`).
    phases_at: crate::phases::PhaseTimes,
    taken_at: &'static std::panic::Location<'static>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held")
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held")
    }
}

impl StateGuard<'_> {
    /// Unlocks `meta`, then writes the logs sealed while it was held (and any before them).
    pub fn unlock_and_write(mut self) -> Result<()> {
        self.release()
    }

    /// [`StateGuard::unlock_and_write`], handing `meta` to the thread that waited longest for
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
        // What was sealed is nobody's to write: whoever needs it writes it.
        if let Some(g) = self.guard.as_mut() {
            g.writer.take_sealed();
        }
        crate::phases::set_meta_held(false);
        self.guard = None;
        self.hold = None;
    }

    /// Unlocks `meta` for a direct write and hands over the payloads sealed while it was held,
    /// for the caller to write: if every log sealed has its payload apart from its summary
    /// (`FLAG_AHEAD`). A checkpoint or superblock queued meanwhile (a refresh) is left to
    /// whoever writes the queue next, the background thread included. Otherwise (logs written
    /// whole) as [`StateGuard::unlock_and_write`], and `None`.
    pub fn unlock_taking_payloads(mut self) -> Result<Option<Vec<Arc<AheadPayload>>>> {
        let payloads_only = self
            .guard
            .as_ref()
            .is_some_and(|g| g.writer.only_ahead_sealed());
        if !payloads_only {
            return self.release().map(|()| None);
        }
        Ok(self.unlock().map(|sealed| sealed.own))
    }

    /// Unlocks `meta` (if still held) and hands over what was sealed under it; the buffers of
    /// freed inodes are recycled after.
    pub(crate) fn unlock(&mut self) -> Option<Sealed> {
        let mut guard = self.guard.take()?;
        let held_ns = self.acquired.elapsed().as_nanos() as u64;
        self.inner.stats.meta_held(held_ns);
        crate::phases::set_meta_held(false);
        let during = crate::phases::peek().since(&self.phases_at);
        self.inner.stats.meta_device_waited(
            u64::from(during.meta_device_waits),
            during.meta_device_wait_ns,
            &during.meta_device_outer,
            &during.meta_device_inner,
        );
        crate::phases::note_hold(
            crate::phases::Lock::Meta,
            held_ns,
            &self.phases_at,
            self.taken_at,
            crate::tbfs::lending::holder,
        );
        let (own, small) = guard.writer.take_sealed();
        let sealed = Sealed {
            end: guard.writer.seq(),
            own,
            small,
            queued: self.inner.logs.queued_total() != self.start_queued,
        };
        let garbage = std::mem::take(&mut guard.hold.drop_later);
        guard.hold.room_waited = false;
        // Stored only when it changes: most holds leave it as it was, and every writer reads it.
        self.inner
            .budget
            .set_ns_pending(guard.changes.namespace_dirty());
        if self.fair {
            parking_lot::MutexGuard::unlock_fair(guard);
        } else {
            drop(guard);
        }
        recycle_dropped(garbage);
        self.hold = None;
        Some(sealed)
    }

    pub(crate) fn release(&mut self) -> Result<()> {
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

/// What one hold of `meta` sealed, taken when it is let go ([`StateGuard`]).
pub(crate) struct Sealed {
    /// The sequence after the last log sealed.
    end: u64,
    /// Ahead payloads, for the holder to write.
    own: Vec<Arc<AheadPayload>>,
    /// Smaller ahead logs the log writer writes whole: `(sequence, inodes, flush)`.
    small: Vec<(u64, Vec<u64>, bool)>,
    /// Anything was queued meanwhile (a checkpoint, a superblock).
    queued: bool,
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        // What a panicking holder changed is half done: none of it may reach the device.
        self.inner
            .poison_if_unwinding("a thread holding the metadata lock");
        // A failed write poisons the pool: later calls report it.
        let _ = self.release();
    }
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

impl Engine {
    /// Locks the metadata (and with it the commit path). A thread that has to wait lends its
    /// I/O priority to the holder until it gets the lock.
    #[track_caller]
    pub fn lock_meta(&self) -> StateGuard<'_> {
        let guard = self.meta.try_lock().unwrap_or_else(|| {
            let _waiting = crate::phases::enter(crate::phases::Phase::MetaWait);
            let _shared = self.dev().wait_for_shared_work();
            crate::tbfs::lending::lending_while(&self.inherit, || self.meta.lock())
        });
        let start_queued = self.logs.queued_total();
        crate::phases::set_meta_held(true);
        StateGuard {
            guard: Some(guard),
            fair: false,
            acquired: Instant::now(),
            hold: Some(self.inherit.hold()),
            inner: self,
            start_queued,
            phases_at: crate::phases::peek(),
            taken_at: std::panic::Location::caller(),
        }
    }

    /// [`Engine::lock_meta`] for the write path: the time it waited is counted to the writer's
    /// tenant (`key`), if it has one.
    #[track_caller]
    pub fn lock_meta_for_write(
        &self,
        key: Option<crate::tbfs::admission::WriterKey>,
    ) -> StateGuard<'_> {
        let Some(key) = key else {
            return self.lock_meta();
        };
        let start = Instant::now();
        let m = self.lock_meta();
        self.writes.waited_for_meta(Some(key), start.elapsed());
        m
    }

    /// Runs `f` as a timed section of the present hold of `meta` (`m`): its time, less that of
    /// the sections nested in it, is counted as `section`'s ([`FsCounters::meta_checkpoint_ns`]
    /// and the others).
    pub(super) fn in_section<R>(
        &self,
        m: &mut State,
        section: Section,
        f: impl FnOnce(&mut State) -> R,
    ) -> R {
        let start = Instant::now();
        if let Some(&(outer, since)) = m.hold.sections.last() {
            self.count_section(outer, start - since);
        }
        m.hold.sections.push((section, start));
        let result = f(m);
        let end = Instant::now();
        if let Some((inner, since)) = m.hold.sections.pop() {
            self.count_section(inner, end - since);
        }
        if let Some(outer) = m.hold.sections.last_mut() {
            outer.1 = end;
        }
        result
    }

    fn count_section(&self, section: Section, time: Duration) {
        self.stats.section_ran(section, time.as_nanos() as u64);
    }

    pub fn check_usable(&self) -> Result<()> {
        self.check_not_poisoned()?;
        if self.closed.load(AtomicOrdering::Acquire) {
            return Err(Error::Invalid("pool is closed".into()));
        }
        Ok(())
    }

    /// Fails once a write failed (see [`Engine::poison`]).
    pub fn check_not_poisoned(&self) -> Result<()> {
        match self.poison.reason() {
            Some(why) => Err(Error::Poisoned(why)),
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
        self.stats.count(f);
    }
}

/// The pool's configuration, set once when it is made or opened; the background thread; how
/// the path walk and reads behave (mount point, access times).
impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: DeviceRef,
        config: Config,
        pool_id: [u8; 16],
        segment_blocks: u64,
        segment_count: u64,
        read_only: bool,
        meta: State,
        log: LogWriter,
    ) -> Engine {
        let written = meta.writer.seq();
        // Threads waiting for `meta` or the log writer lend their I/O priority to the holder, unless
        // the pool is memory, whose commits are copies with no I/O priority to raise.
        let copies = dev.writes_are_copies();
        let inheritance = || {
            if copies {
                crate::sched::inherit::Inheritance::inert()
            } else {
                crate::sched::inherit::Inheritance::new()
            }
        };
        // Every map as loaded (and rolled forward); writes raise it from here.
        let widest = meta
            .inodes
            .values()
            .map(|c| c.lock().map().blocks.len() as u64)
            .max()
            .unwrap_or(0);
        let budget = BufferBudget::new(config.dirty_bytes_max, widest);
        Engine {
            dev,
            config,
            pool_id,
            segment_blocks,
            segment_count,
            read_only,
            meta: parking_lot::Mutex::new(meta),
            logs: LogPipeline::new(written, log, inheritance()),
            superblocks: Default::default(),
            copies: Default::default(),
            bg_pass: Mutex::new(()),
            dirty: Mutex::new(Default::default()),
            budget,
            stats: Default::default(),
            poison: Default::default(),
            watchers: Default::default(),
            closed: AtomicBool::new(false),
            writes: Default::default(),
            room_gate: Default::default(),
            background: Mutex::new(None),
            wake: Arc::new((Mutex::new(Wake::default()), Condvar::new())),
            inherit: inheritance(),
            locks: super::locks::LockTable::new(),
            names: Default::default(),
            mount_point: Mutex::new(None),
            atime: std::sync::atomic::AtomicU8::new(AtimePolicy::Relatime as u8),
        }
    }

    pub fn dev(&self) -> &DeviceRef {
        &self.dev
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Now, by the pool's clock ([`Config::clock`]): every time the engine records or
    /// measures an age against.
    pub(crate) fn now_ns(&self) -> i64 {
        self.config.clock.now_ns()
    }

    pub fn pool_id(&self) -> [u8; 16] {
        self.pool_id
    }

    /// Blocks in a segment.
    pub fn segment_blocks(&self) -> u64 {
        self.segment_blocks
    }

    /// Segments in the pool.
    pub fn segment_count(&self) -> u64 {
        self.segment_count
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Later calls fail ([`Engine::check_usable`]).
    pub fn mark_closed(&self) {
        self.closed.store(true, AtomicOrdering::Release);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(AtomicOrdering::Acquire)
    }

    /// Tests: priorities lent to whoever holds `meta`.
    #[cfg(test)]
    pub fn inheritance(&self) -> &Arc<crate::sched::inherit::Inheritance> {
        &self.inherit
    }

    /// What the background thread waits on, for the thread itself.
    pub fn waker(&self) -> Arc<(Mutex<Wake>, Condvar)> {
        self.wake.clone()
    }

    /// Whether a background thread runs for this pool (not for a read-only one).
    pub fn has_background(&self) -> bool {
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The background thread started for this pool.
    pub fn set_background(&self, handle: Option<JoinHandle<()>>) {
        *self.background.lock().unwrap_or_else(|p| p.into_inner()) = handle;
    }

    /// Wakes the background thread for what `why` marks.
    pub(super) fn wake_background(&self, why: impl FnOnce(&mut crate::tbfs::state::Wake)) {
        let (lock, cv) = &*self.wake;
        why(&mut lock.lock().unwrap_or_else(|p| p.into_inner()));
        cv.notify_all();
    }

    /// Tells the background thread to stop, and waits for it unless this is it.
    pub(crate) fn stop_background(&self) {
        {
            let (lock, cv) = &*self.wake;
            lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            cv.notify_all();
        }
        let handle = self
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

    /// Tests: why the background thread would wake now.
    #[cfg(test)]
    pub fn wake_reasons(&self) -> std::sync::MutexGuard<'_, Wake> {
        self.wake.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tests: `meta` itself, whose guard writes nothing on release (a [`StateGuard`] writes
    /// what was sealed).
    #[cfg(test)]
    pub fn lock_meta_raw(&self) -> parking_lot::MutexGuard<'_, State> {
        self.meta.lock()
    }

    /// Where the pool is mounted in the process's paths ([`crate::tbfs::Fs::set_mount_point`]).
    pub fn mount_point(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.mount_point.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_atime_policy(&self, policy: AtimePolicy) {
        self.atime.store(policy as u8, AtomicOrdering::Relaxed);
    }

    /// [`AtimePolicy`] as its code.
    pub fn atime_policy(&self) -> u8 {
        self.atime.load(AtomicOrdering::Relaxed)
    }
}

impl State {
    /// Leaves a freed inode's buffers to be dropped once `meta` is released.
    pub fn drop_after_release(&mut self, buffers: BTreeMap<u64, DirtyBlock>) {
        if !buffers.is_empty() {
            self.hold.drop_later.push(buffers);
        }
    }

    /// Notes that this hold follows its thread's wait for the logs in flight with `meta` let
    /// go (`Engine::wait_for_room_outside`), until it ends.
    pub fn note_room_waited(&mut self) {
        self.hold.room_waited = true;
    }

    /// Whether this hold follows such a wait.
    pub fn room_waited(&self) -> bool {
        self.hold.room_waited
    }

    /// Tests: the timed sections open in the present hold.
    #[cfg(test)]
    pub fn sections_open(&self) -> usize {
        self.hold.sections.len()
    }

    /// Tests: lets the writer enter `picks` more segments before it finds none free (`None`:
    /// no limit), to stage what happens when the space check fell short.
    #[cfg(test)]
    pub fn stage_segment_picks(&mut self, picks: Option<u64>) {
        self.hold.segment_picks_left = picks;
    }

    /// Whether the writer finds no free segment this time (tests stage it,
    /// [`State::stage_segment_picks`]).
    pub fn staged_no_segment(&mut self) -> bool {
        #[cfg(test)]
        match self.hold.segment_picks_left.as_mut() {
            Some(0) => return true,
            Some(left) => *left -= 1,
            None => {}
        }
        false
    }

    /// `ino`'s record changed in a way only a checkpoint records (creation, a name or link, an
    /// attribute or size set): the next checkpoint writes it, and the file's syncs wait for
    /// that checkpoint (`InodeState::ckpt_seq`).
    pub fn namespace_changed(&mut self, ino: u64) {
        self.changes.namespace_changed(ino);
    }
}

/// The inodes with something buffered for the next commit, behind one mutex (a writer notes its
/// file in both sets in one trip).
#[derive(Debug, Default)]
pub(crate) struct DirtySet {
    /// Every inode dirtied since a checkpoint took them: the next checkpoint's work.
    all: DenseSet,
    /// Those that may still have something a data-only log can take: buffers in no sealed log,
    /// or attributes, unless only a checkpoint may record the file (`Changes::only_checkpoint_records`). What
    /// sealing a full buffer looks through. Entries are added with `all` (under the inode's
    /// lock, after the change, or under `meta`) and dropped under `meta` and the inode's lock
    /// by a seal that finds nothing more to take (`Engine::settle_sealed`; never for a freed
    /// inode, whose number may be a newer file's by then); a checkpoint leaves them for the
    /// next seal to drop. Without it, sealing went through every file written since the last
    /// checkpoint, most of them sealed already and placed (their attributes wait for the
    /// checkpoint).
    to_seal: DenseSet,
}

impl DirtySet {
    pub fn insert(&mut self, ino: u64) {
        self.all.insert(ino);
        self.to_seal.insert(ino);
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Every inode dirtied since a checkpoint took them.
    pub fn all(&self) -> &DenseSet {
        &self.all
    }

    /// A checkpoint takes every inode dirtied so far; those listed to seal stay listed, for
    /// the next seal to drop.
    pub fn take_all(&mut self) -> DenseSet {
        std::mem::take(&mut self.all)
    }

    /// A checkpoint that wrote nothing puts back what it took.
    pub fn put_back(&mut self, inos: impl Iterator<Item = u64>) {
        self.all.extend(inos);
    }

    /// The inodes a seal looks through.
    pub fn to_seal(&self) -> &DenseSet {
        &self.to_seal
    }

    /// Inode `ino` has nothing a data-only log can take now (or was freed).
    pub fn settled(&mut self, ino: u64) {
        self.to_seal.remove(&ino);
    }

    /// The inodes dirtied since a checkpoint that a seal does not look through.
    pub fn not_to_seal(&self) -> Vec<u64> {
        self.all.difference(&self.to_seal).collect()
    }
}
