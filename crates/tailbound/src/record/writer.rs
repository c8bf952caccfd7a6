//! The part of a recorder that makes the `write()` calls: framing, positions, flush windows and
//! growth. It runs on the producer's thread (direct mode) or on the writer thread (decoupled).
//!
//! Flushing and growth run on a background thread. The writer hands it work through atomics only
//! ([`Board`]): no system call, lock or allocation on the recording path. The background thread
//! polls for work and runs in `SCHED_BATCH`, so it never preempts the recording thread: a wake-up
//! of a thread that shares the recording thread's CPU would otherwise make the recording wait for
//! that thread's system calls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::record::fileops::RecFile;
use crate::record::frame::{
    encode_frame_header, trailer_payload, FRAME_FLAG_TRAILER, FRAME_HEADER_BYTES,
};
use crate::record::options::{FlushMode, Framing, RECORD_BYTES_MAX};
use crate::record::trace::{ActivityWord, FlusherActivity, SlowTrace, TracedCalls};
use crate::record::RecordError;
use crate::sys::file::SyncRange;
use crate::sys::mmap::SharedMapping;
use crate::sys::time::monotonic_now;

/// Smallest flush-window alignment: the page size on every Linux platform tailbound runs on.
const PAGE_BYTES: u64 = 4096;
/// Largest page-cache folio to keep whole: a PMD-sized folio on x86-64.
const FOLIO_BYTES_MAX: u64 = 2 << 20;

/// Where flush windows end: the largest power of two no larger than the window, between a page and
/// the largest folio.
fn window_alignment(flush_every: u64) -> u64 {
    let pow2 = 1u64 << (63 - flush_every.max(1).leading_zeros());
    pow2.clamp(PAGE_BYTES, FOLIO_BYTES_MAX)
}

/// How many flush windows ahead of the writer are kept in the page cache (written files only).
const PREFETCH_WINDOWS: u64 = 4;

/// Completed flush windows the background thread has not taken yet, at most.
const PENDING_WINDOWS_MAX: usize = 64;
/// How often the background thread looks for work while there is some, and at most between two
/// looks when there is none.
const POLL_BUSY: Duration = Duration::from_millis(1);
const POLL_IDLE_MAX: Duration = Duration::from_millis(16);

/// Work the writer hands the background thread: a single-producer, single-consumer queue of
/// completed windows' ends, the size the file should be reserved to, and the stop flag.
struct Board {
    window_ends: [AtomicU64; PENDING_WINDOWS_MAX],
    /// Windows published (by the writer) and taken (by the background thread) so far.
    published: AtomicU64,
    taken: AtomicU64,
    /// Reserve the file up to here.
    reserve_to: AtomicU64,
    stop: AtomicBool,
}

impl Board {
    fn new(reserved: u64) -> Board {
        Board {
            window_ends: std::array::from_fn(|_| AtomicU64::new(0)),
            published: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            reserve_to: AtomicU64::new(reserved),
            stop: AtomicBool::new(false),
        }
    }

    /// Publishes a completed window ending at `end`; false when the queue is full (the writer
    /// then keeps the window open and publishes it, larger, later).
    fn publish_window(&self, end: u64) -> bool {
        let published = self.published.load(Ordering::Relaxed);
        if published - self.taken.load(Ordering::Acquire) >= PENDING_WINDOWS_MAX as u64 {
            return false;
        }
        self.window_ends[published as usize % PENDING_WINDOWS_MAX].store(end, Ordering::Relaxed);
        self.published.store(published + 1, Ordering::Release);
        true
    }

    /// The next window's end, if one is published.
    fn next_window(&self) -> Option<u64> {
        let taken = self.taken.load(Ordering::Relaxed);
        if taken == self.published.load(Ordering::Acquire) {
            return None;
        }
        let end = self.window_ends[taken as usize % PENDING_WINDOWS_MAX].load(Ordering::Relaxed);
        self.taken.store(taken + 1, Ordering::Release);
        Some(end)
    }
}

/// State shared with the background thread.
#[derive(Default)]
pub struct Shared {
    pub flushes: AtomicU64,
    /// Records written so far and their payload bytes, published by the writer after each record
    /// so `counters()` reads them from any thread.
    pub frames: AtomicU64,
    pub payload_bytes: AtomicU64,
    /// Bytes known durable on the device (end of the last completed data flush).
    pub durable_bytes: AtomicU64,
    /// What the background thread is doing now, for tracing slow writes.
    pub activity: ActivityWord,
    /// Kernel thread ids of the flush thread and of the decoupled writer thread (0 until known).
    pub flush_tid: std::sync::atomic::AtomicI32,
    pub writer_tid: std::sync::atomic::AtomicI32,
    failed: AtomicBool,
    error: Mutex<Option<RecordError>>,
    /// The first error's message, kept after the error itself was returned once.
    message: Mutex<String>,
}

impl Shared {
    /// Keeps `e` unless an earlier error is kept already: the first failure is the one reported.
    pub fn fail(&self, e: RecordError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if !self.failed.load(Ordering::Acquire) {
            *self.message.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
            *slot = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Keeps an error the writer thread hit, for the producer: like [`Shared::fail`], and if the
    /// first error was already taken (by the writer thread itself, which is how it learned of it),
    /// puts `e` back so the producer still receives an error naming the file and the operation.
    pub fn keep_for_producer(&self, e: RecordError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if !self.failed.load(Ordering::Acquire) {
            *self.message.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
            self.failed.store(true, Ordering::Release);
        }
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// The first background error, if any. Sticky: the error itself comes back once, then every
    /// later call reports it again as [`RecordError::BackgroundFailed`], so `finish` cannot succeed
    /// after a flush failed.
    pub fn take_error(&self) -> Option<RecordError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let first = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        Some(first.unwrap_or_else(|| {
            RecordError::BackgroundFailed(
                self.message
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            )
        }))
    }
}

/// Background flushing and growth.
struct Background {
    board: Arc<Board>,
    thread: Option<JoinHandle<()>>,
}

/// How the background thread runs.
struct BackgroundSetup {
    file: Arc<RecFile>,
    mode: FlushMode,
    prefetch: bool,
    mapping: Option<Arc<SharedMapping>>,
    /// Lock the windows ahead in memory (`mlock`) until they are flushed.
    lock_windows: bool,
    /// The end of what `Writer::start` locked already.
    locked_from_start: u64,
    /// Keep the thread off this CPU (the recording thread's).
    avoid_cpu: Option<usize>,
    /// The size of the file's reservation at the start.
    reserved: u64,
    flush_every: u64,
    shared: Arc<Shared>,
}

/// Work the background thread does, one item at a time.
enum Job {
    /// Flush the completed window `[start, end)`.
    Flush { start: u64, end: u64 },
    /// Reserve `[from, from + len)` ahead of the writer.
    Grow { from: u64, len: u64 },
}

/// Waits for work on `board` and yields it in order; ends once the board is stopped and empty.
fn jobs(board: &Board, reserved: u64) -> impl Iterator<Item = Job> + '_ {
    // The writer's first window starts at 0 (the file header is flushed with it).
    let mut window_start = 0u64;
    let mut reserved = reserved;
    let mut idle = POLL_BUSY;
    std::iter::from_fn(move || loop {
        // Read before looking for work, so work published before the stop is never missed.
        let stopping = board.stop.load(Ordering::Acquire);
        let reserve_to = board.reserve_to.load(Ordering::Acquire);
        if reserve_to > reserved {
            let from = reserved;
            reserved = reserve_to;
            idle = POLL_BUSY;
            return Some(Job::Grow {
                from,
                len: reserve_to - from,
            });
        }
        if let Some(end) = board.next_window() {
            let start = window_start;
            window_start = end;
            idle = POLL_BUSY;
            return Some(Job::Flush { start, end });
        }
        if stopping {
            return None;
        }
        std::thread::park_timeout(idle);
        idle = (idle * 2).min(POLL_IDLE_MAX);
    })
}

/// Gives the background thread its scheduling before it takes work: `SCHED_BATCH`, and off the
/// recording thread's CPU when that is pinned.
fn prepare_background(avoid_cpu: Option<usize>, shared: &Shared) {
    shared
        .flush_tid
        .store(crate::sys::proc::thread_id(), Ordering::Release);
    // Best effort: without it the thread still works, and may preempt the recording thread.
    let _ = crate::sys::proc::set_batch_policy();
    if let Some(cpu) = avoid_cpu {
        if let Err(source) = crate::sys::proc::avoid_cpu(cpu) {
            shared.fail(RecordError::Hygiene {
                what: format!("keeping the flush thread off CPU {cpu}"),
                source,
            });
        }
    }
}

fn run_background(setup: BackgroundSetup, board: &Board) {
    let BackgroundSetup {
        file,
        mode,
        prefetch,
        mapping,
        lock_windows,
        locked_from_start,
        reserved,
        flush_every,
        shared,
        ..
    } = setup;
    let activity = |a| shared.activity.set(a);
    let io = |op: &'static str| {
        let path = file.path().to_path_buf();
        move |source| RecordError::Io { path, op, source }
    };
    let mut previous: Option<(u64, u64)> = None;
    // Up to where the mapping's pages are locked in memory.
    let mut locked_to = locked_from_start;
    for job in jobs(board, reserved) {
        crate::failpoint::hit("record.flush");
        if let Job::Flush { end, .. } = &job {
            let ahead_to = end + PREFETCH_WINDOWS * flush_every;
            let r = match &mapping {
                // Fault the next windows in writable here, off the producer's path.
                // Pages mapped before are faulted in again if the kernel's writeback made them
                // read-only meanwhile; new pages are locked once.
                Some(m) => {
                    activity(FlusherActivity::MappingAhead);
                    let mut r = m
                        .populate_write(*end as usize, (ahead_to - end) as usize)
                        .map_err(io("mapping ahead in"));
                    let from = locked_to.max(*end);
                    if lock_windows && r.is_ok() && ahead_to > from {
                        activity(FlusherActivity::LockingAhead);
                        r = m
                            .lock(from as usize, (ahead_to - from) as usize)
                            .map_err(io("locking in memory (mlock) the windows ahead in"));
                        locked_to = ahead_to;
                    }
                    r
                }
                // Keep the pages the writer reaches next in the cache: a write that covers part
                // of an uncached page of a written file would otherwise wait for a read.
                None if prefetch => {
                    activity(FlusherActivity::Prefetching);
                    file.prefetch(*end, ahead_to - end)
                }
                None => Ok(()),
            };
            if let Err(e) = r {
                shared.fail(e);
            }
        }
        let result = match job {
            // Growth only saves the writes the work of allocating: if it fails (no space for the
            // whole extension, no fallocate on this file system), writes past the end still
            // extend the file, and a real lack of space fails the write itself.
            Job::Grow { from, len } => {
                activity(FlusherActivity::Allocating);
                let _ = file.fallocate(from, len);
                Ok(())
            }
            Job::Flush { start, end } => {
                let len = end - start;
                let r = match mode {
                    FlushMode::Fdatasync => {
                        activity(FlusherActivity::Fdatasync);
                        file.sync_data().map(|_| Some(end))
                    }
                    FlushMode::SyncFileRange => {
                        activity(FlusherActivity::SyncFileRange);
                        file.sync_range(start, len, SyncRange::WriteAndWait)
                            .map(|_| Some(end))
                    }
                    FlushMode::Pipelined => (|| {
                        activity(FlusherActivity::StartingWriteback);
                        file.sync_range(start, len, SyncRange::StartWrite)?;
                        let done = match previous {
                            Some((ps, pe)) => {
                                activity(FlusherActivity::WaitingWriteback);
                                file.sync_range(ps, pe - ps, SyncRange::WaitAfter)?;
                                if let Some(m) = &mapping {
                                    // Mapped pages cannot leave the cache: unmap them first.
                                    activity(FlusherActivity::Unmapping);
                                    if lock_windows {
                                        m.unlock(ps as usize, (pe - ps) as usize)
                                            .map_err(io("unlocking flushed pages of"))?;
                                    }
                                    m.discard(ps as usize, (pe - ps) as usize)
                                        .map_err(io("unmapping flushed pages of"))?;
                                }
                                activity(FlusherActivity::DroppingCache);
                                file.drop_cache(ps, pe - ps)?;
                                Some(pe)
                            }
                            None => None,
                        };
                        previous = Some((start, end));
                        Ok(done)
                    })(),
                    FlushMode::None => Ok(None),
                };
                r.map(|durable| {
                    if let Some(end) = durable {
                        shared.durable_bytes.fetch_max(end, Ordering::AcqRel);
                        shared.flushes.fetch_add(1, Ordering::AcqRel);
                    }
                })
            }
        };
        activity(FlusherActivity::Idle);
        if let Err(e) = result {
            shared.fail(e);
        }
    }
}

/// The frame buffer, its pages touched now so the first records take no page fault.
fn prefaulted_frame() -> Vec<u8> {
    let mut frame = vec![0u8; FRAME_HEADER_BYTES + (64 << 10)];
    frame.fill(0xa5);
    std::hint::black_box(&mut frame);
    frame.clear();
    frame
}

/// Writes frames (or raw bytes) at increasing offsets and schedules flushes and growth.
pub struct Writer {
    file: Arc<RecFile>,
    framing: Framing,
    epoch: u64,
    sequence: u64,
    offset: u64,
    window_start: u64,
    flush_every: u64,
    /// Bytes reserved so far; `None` when the file just grows (append).
    reserved: Option<u64>,
    grow_by: u64,
    frame: Vec<u8>,
    payload_bytes: u64,
    latency: Option<Histogram<u64>>,
    mapping: Option<Arc<SharedMapping>>,
    shared: Arc<Shared>,
    background: Background,
    trace: Option<SlowTrace>,
}

/// How a [`Writer`] starts.
pub struct WriterSetup {
    pub file: Arc<RecFile>,
    pub framing: Framing,
    pub epoch: u64,
    pub start_offset: u64,
    pub flush: FlushMode,
    pub flush_every: u64,
    pub reserved: Option<u64>,
    pub measure_writes: bool,
    /// The file's blocks hold data already (zero-fill, recycle): read ahead of the writer.
    pub prefetch: bool,
    /// Store through a shared mapping of `[0, reserved)` instead of `write()`.
    pub mapped: bool,
    /// Keep the mapped windows ahead of the writer locked in memory (with `mlockall`).
    pub lock_windows: bool,
    /// Keep the background thread off this CPU (the recording thread's).
    pub avoid_cpu: Option<usize>,
}

impl Writer {
    pub fn start(setup: WriterSetup) -> Result<Writer, RecordError> {
        let shared = Arc::new(Shared::default());
        let board = Arc::new(Board::new(setup.reserved.unwrap_or(0)));
        let thread_board = board.clone();
        let file = setup.file.clone();
        let thread_shared = shared.clone();
        let mode = setup.flush;
        let prefetch = setup.prefetch;
        let first_windows = PREFETCH_WINDOWS * setup.flush_every;
        let lock_windows = setup.lock_windows;
        let mapping = match (setup.mapped, setup.reserved) {
            // The mapping is an optimisation: where the file cannot be mapped or faulted in ahead
            // (no MADV_POPULATE_WRITE before Linux 5.14; file systems without shared writable
            // mappings), the recording makes write() calls instead of failing.
            (true, Some(reserved)) if reserved > 0 => setup
                .file
                .map_shared(reserved as usize)
                .and_then(|m| {
                    if lock_windows {
                        // mlockall's MCL_FUTURE locked the whole mapping, and flushed pages
                        // cannot be unmapped from a locked range: only the windows ahead of the
                        // writer are locked, by the background thread.
                        m.unlock(0, reserved as usize)?;
                    }
                    m.populate_write(setup.start_offset as usize, first_windows as usize)?;
                    Ok(Arc::new(m))
                })
                .ok(),
            _ => None,
        };
        let mut locked_from_start = 0;
        if let Some(m) = &mapping {
            if lock_windows {
                let (from, len) = (setup.start_offset as usize, first_windows as usize);
                m.lock(from, len).map_err(|source| RecordError::Hygiene {
                    what: format!(
                        "locking the first windows of {} in memory (mlock)",
                        setup.file.path().display()
                    ),
                    source,
                })?;
                locked_from_start = setup.start_offset + first_windows;
            }
        }
        if mapping.is_none() && prefetch {
            setup.file.warm(setup.start_offset, first_windows)?;
        }
        let background = BackgroundSetup {
            file,
            mode,
            prefetch,
            mapping: mapping.clone(),
            lock_windows,
            locked_from_start,
            avoid_cpu: setup.avoid_cpu,
            reserved: setup.reserved.unwrap_or(0),
            flush_every: setup.flush_every,
            shared: thread_shared.clone(),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tailbound-flush".into())
            .spawn(move || {
                prepare_background(background.avoid_cpu, &background.shared);
                let _ = ready_tx.send(());
                let failed = thread_shared.clone();
                let run = crate::panics::catch(|| run_background(background, &thread_board));
                if let Err(p) = run {
                    // The recording is not durable past the last flush: say why.
                    failed.fail(RecordError::BackgroundFailed(format!(
                        "the flush thread {p}"
                    )));
                }
            })
            .map_err(|source| RecordError::Io {
                path: setup.file.path().to_path_buf(),
                op: "starting the flush thread for",
                source,
            })?;
        // Its scheduling is settled before the recording starts.
        let _ = ready_rx.recv();
        let latency = if setup.measure_writes {
            Some(
                Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                    .expect("constant histogram bounds are valid"),
            )
        } else {
            None
        };
        Ok(Writer {
            file: setup.file,
            framing: setup.framing,
            epoch: setup.epoch,
            sequence: 0,
            offset: setup.start_offset,
            window_start: 0,
            flush_every: setup.flush_every,
            reserved: setup.reserved,
            grow_by: setup.reserved.unwrap_or(0).max(16 << 20),
            frame: prefaulted_frame(),
            payload_bytes: 0,
            latency,
            mapping,
            shared,
            background: Background {
                board,
                thread: Some(thread),
            },
            trace: None,
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub fn frames(&self) -> u64 {
        self.sequence
    }

    pub fn payload_bytes(&self) -> u64 {
        self.payload_bytes
    }

    fn write_bytes(&mut self, bytes_from_frame: bool, raw: &[u8]) -> Result<(), RecordError> {
        let buf: &[u8] = if bytes_from_frame { &self.frame } else { raw };
        let len = buf.len() as u64;
        let t0 = self.latency.is_some().then(monotonic_now);
        let in_mapping = self
            .mapping
            .as_ref()
            .filter(|m| self.offset + len <= m.len() as u64);
        match in_mapping {
            Some(m) => m
                .write_at(self.offset as usize, buf)
                .map_err(|source| RecordError::Io {
                    path: self.file.path().to_path_buf(),
                    op: "storing into the mapping of",
                    source,
                })?,
            None => self.file.write_all_at(buf, self.offset)?,
        }
        if let (Some(h), Some(t0)) = (self.latency.as_mut(), t0) {
            h.saturating_record(monotonic_now().since(t0).as_nanos().max(1) as u64);
        }
        self.offset += len;
        Ok(())
    }

    /// Traces this writer's calls slower than `bound_ns` from now on.
    pub fn trace_slow(&mut self, calls: TracedCalls, bound_ns: u64) {
        self.trace = Some(SlowTrace::new(calls, bound_ns));
    }

    /// The trace of slow calls, if tracing.
    pub fn take_trace(&mut self) -> Option<SlowTrace> {
        self.trace.take()
    }

    /// Writes one record and, when a window is complete, hands it to the background thread.
    pub fn write_record(&mut self, record: &[u8]) -> Result<(), RecordError> {
        let Some(mut trace) = self.trace.take() else {
            return self.write_record_untraced(record);
        };
        let (index, offset) = (self.sequence, self.offset);
        let start = trace.begin(Some(&self.shared.activity));
        let r = self.write_record_untraced(record);
        trace.end(start, index, Some(offset), Some(&self.shared.activity));
        self.trace = Some(trace);
        r
    }

    fn write_record_untraced(&mut self, record: &[u8]) -> Result<(), RecordError> {
        if let Some(e) = self.shared.take_error() {
            return Err(e);
        }
        if record.len() as u64 > RECORD_BYTES_MAX {
            return Err(RecordError::Options(format!(
                "a record of {} bytes is larger than the 64 MiB maximum",
                record.len()
            )));
        }
        match self.framing {
            Framing::Framed => {
                let mut header = [0u8; FRAME_HEADER_BYTES];
                encode_frame_header(&mut header, self.sequence, self.epoch, 0, record);
                self.frame.clear();
                self.frame.extend_from_slice(&header);
                self.frame.extend_from_slice(record);
                self.write_bytes(true, &[])?;
            }
            Framing::Raw => self.write_bytes(false, record)?,
        }
        self.sequence += 1;
        self.payload_bytes += record.len() as u64;
        // Plain stores: only this thread writes them.
        self.shared.frames.store(self.sequence, Ordering::Relaxed);
        self.shared
            .payload_bytes
            .store(self.payload_bytes, Ordering::Relaxed);
        if self.offset - self.window_start >= self.flush_every {
            // Windows end on a folio boundary: the folio the next record goes into is never under
            // writeback (which write-protects and locks whole folios) or being dropped while the
            // producer writes into it. The page cache uses naturally aligned folios of up to
            // 2 MiB, so an end aligned to min(2 MiB, flush window) splits none of them.
            let align = window_alignment(self.flush_every);
            let end = self.offset / align * align;
            if end > self.window_start && self.background.board.publish_window(end) {
                self.window_start = end;
            }
        }
        if let Some(reserved) = self.reserved {
            // One window ahead of the end: rare, and never on the producer's thread.
            if self.offset + self.flush_every > reserved {
                let to = reserved + self.grow_by;
                self.background
                    .board
                    .reserve_to
                    .store(to, Ordering::Release);
                self.reserved = Some(to);
            }
        }
        Ok(())
    }

    /// Stops the background thread and returns its first error, if any.
    fn stop_background(&mut self) -> Result<(), RecordError> {
        self.background.board.stop.store(true, Ordering::Release);
        if let Some(t) = self.background.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                return Err(RecordError::Closed);
            }
        }
        match self.shared.take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Ends the recording: waits for the background thread, writes the trailer (`trailer`) or cuts
    /// the file to its length (`truncate`), and makes everything durable with `fsync`.
    pub fn finish(
        &mut self,
        trailer: bool,
        truncate: bool,
    ) -> Result<(u64, Option<Histogram<u64>>), RecordError> {
        self.stop_background()?;
        // Everything before this mark was the recording, background flushes included.
        let _ = self
            .file
            .note(crate::record::fileops::FileOp::FinishStarted);
        if trailer {
            let payload = trailer_payload(self.sequence, self.payload_bytes);
            let mut header = [0u8; FRAME_HEADER_BYTES];
            encode_frame_header(
                &mut header,
                self.sequence,
                self.epoch,
                FRAME_FLAG_TRAILER,
                &payload,
            );
            self.frame.clear();
            self.frame.extend_from_slice(&header);
            self.frame.extend_from_slice(&payload);
            self.write_bytes(true, &[])?;
        }
        if truncate {
            self.file.set_len(self.offset)?;
        }
        self.file.sync_all()?;
        self.shared
            .durable_bytes
            .fetch_max(self.offset, Ordering::AcqRel);
        Ok((self.offset, self.latency.take()))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.stop_background();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_whole_folios() {
        assert_eq!(window_alignment(2 << 20), 2 << 20);
        assert_eq!(window_alignment(3 << 20), 2 << 20);
        assert_eq!(window_alignment(64 << 10), 64 << 10);
        assert_eq!(window_alignment(100_000), 65_536);
        assert_eq!(window_alignment(4096), 4096);
        assert_eq!(window_alignment(1), 4096);
    }

    #[test]
    fn an_error_the_writer_thread_took_is_handed_on_to_the_producer() {
        let shared = Shared::default();
        shared.fail(RecordError::Options("flush failed".into()));
        // The decoupled writer thread learns of it first...
        let taken = shared.take_error().unwrap();
        shared.keep_for_producer(taken);
        // ...and the producer still gets the error itself, then the sticky copy.
        let first = shared.take_error().unwrap();
        assert!(matches!(first, RecordError::Options(ref m) if m == "flush failed"));
        let again = shared.take_error().unwrap();
        assert!(
            matches!(again, RecordError::BackgroundFailed(ref m) if m.contains("flush failed"))
        );
    }

    #[test]
    fn a_background_error_is_reported_first_as_itself_then_again_and_again() {
        let shared = Shared::default();
        assert!(shared.take_error().is_none());
        shared.fail(RecordError::Options("disk on fire".into()));
        shared.fail(RecordError::Options("a later one".into()));
        let first = shared.take_error().unwrap();
        assert!(matches!(first, RecordError::Options(ref m) if m == "disk on fire"));
        for _ in 0..2 {
            let again = shared.take_error().unwrap().to_string();
            assert!(again.contains("disk on fire"), "{again}");
        }
    }
}
