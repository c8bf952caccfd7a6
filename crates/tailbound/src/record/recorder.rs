//! `Recorder`: create → write → finish, in direct or decoupled mode.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::record::fileops::{FileOp, Probe, RecFile};
use crate::record::flusher::FlusherGuard;
use crate::record::frame::{
    decode_frame_header, FileHeader, FILE_FLAG_RECYCLED, FILE_HEADER_BYTES, FRAME_HEADER_BYTES,
};
use crate::record::options::{Allocation, Flusher, Framing, RecorderOptions};
use crate::record::recycle::RecyclePool;
use crate::record::ring::{Pushed, Ring};
use crate::record::trace::{SlowTrace, TracedCalls};
use crate::record::writer::{Shared, Writer, WriterSetup};
use crate::record::{io_err, RecordCounters, RecordError, RecordSummary};
use crate::sys::proc::{lock_all_memory, pin_to_cpu, prefault_stack, set_fifo_priority};

/// Stack the recording thread touches before recording, so its calls take no stack page fault.
const STACK_PREFAULT_BYTES: usize = 256 << 10;

/// See [`Recorder::durable_watch`].
#[derive(Clone)]
pub struct DurableWatch {
    pub(crate) shared: Arc<Shared>,
}

impl DurableWatch {
    /// Bytes known to be on the device.
    pub fn bytes(&self) -> u64 {
        self.shared.durable_bytes.load(Ordering::Acquire)
    }
}

enum Mode {
    Direct(Box<Writer>),
    Decoupled {
        ring: Arc<Ring>,
        thread: Option<JoinHandle<Result<Writer, RecordError>>>,
        shared: Arc<Shared>,
    },
    /// After `finish` took the writer.
    Finished,
}

/// A recording in progress. See the module documentation of [`crate::record`].
pub struct Recorder {
    path: PathBuf,
    options: RecorderOptions,
    mode: Mode,
    started: bool,
    file: Arc<RecFile>,
    _flusher: Option<FlusherGuard>,
    /// The decoupled producer's slow calls, with `trace_slow` (direct mode traces in the writer).
    producer_trace: Option<SlowTrace>,
    calls: u64,
}

/// Applies the options' real-time settings to the calling thread (the one that makes the writes).
fn apply_hygiene(options: &RecorderOptions) -> Result<(), RecordError> {
    prefault_stack(STACK_PREFAULT_BYTES);
    if let Some(p) = options.rt_priority {
        set_fifo_priority(p).map_err(|source| RecordError::Hygiene {
            what: format!("SCHED_FIFO priority {p} (needs root or CAP_SYS_NICE)"),
            source,
        })?;
    }
    if let Some(cpu) = options.cpu {
        pin_to_cpu(cpu).map_err(|source| RecordError::Hygiene {
            what: format!("pinning to CPU {cpu}"),
            source,
        })?;
    }
    Ok(())
}

/// Opens and prepares the file per the allocation; returns it, the epoch, the reserved size and
/// the file header flags.
fn prepare_file(
    path: &Path,
    options: &RecorderOptions,
    probe: Option<Probe>,
) -> Result<(RecFile, u64, Option<u64>, u32), RecordError> {
    let open = |create_new_len: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if create_new_len {
            o.create(true).truncate(true);
        }
        o.open(path).map_err(io_err(path, "creating"))
    };
    match options.allocation {
        Allocation::Append => Ok((RecFile::new(open(true)?, path, probe), 1, None, 0)),
        Allocation::Fallocate => {
            let f = RecFile::new(open(true)?, path, probe);
            f.fallocate(0, options.expected_bytes)?;
            Ok((f, 1, Some(options.expected_bytes), 0))
        }
        Allocation::ZeroFill => {
            let f = RecFile::new(open(true)?, path, probe);
            f.write_zeroes(0, options.expected_bytes)?;
            f.sync_data()?;
            Ok((f, 1, Some(options.expected_bytes), 0))
        }
        Allocation::Recycle => {
            let dir = options
                .recycle_pool
                .as_deref()
                .ok_or_else(|| RecordError::Options("allocation=recycle needs pool=DIR".into()))?;
            if path.exists() {
                return Err(RecordError::Io {
                    path: path.to_path_buf(),
                    op: "recycling into",
                    source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
                });
            }
            RecyclePool::open(dir)?.take(path)?;
            let f = RecFile::new(open(false)?, path, probe);
            let epoch = next_epoch(&f);
            let len = f.len()?;
            Ok((f, epoch, Some(len), FILE_FLAG_RECYCLED))
        }
    }
}

/// The epoch for the next lap of a recycled file: one more than the newest epoch its header or
/// first frame shows, so a torn header from a crash during the last lap's create can never make
/// this lap reuse an epoch whose frames are still in the file. A fresh pool file (zeros) gets 1.
fn next_epoch(file: &RecFile) -> u64 {
    let mut head = [0u8; FILE_HEADER_BYTES + FRAME_HEADER_BYTES];
    if file.read_exact_at(&mut head, 0).is_err() {
        return 1;
    }
    let header = FileHeader::decode(&head[..FILE_HEADER_BYTES]).map_or(0, |h| h.epoch);
    let first_frame = decode_frame_header(&head[FILE_HEADER_BYTES..]).map_or(0, |h| h.epoch);
    header.max(first_frame).saturating_add(1)
}

/// Makes the recording's directory entry durable, so a crash during the recording finds the file
/// under its name (a recycled file otherwise may still be in the pool after a power cut).
fn sync_parent_dir(file: &RecFile, path: &Path) -> Result<(), RecordError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    file.note(FileOp::SyncDir)
        .and_then(|()| std::fs::File::open(parent))
        .and_then(|d| d.sync_all())
        .map_err(io_err(parent, "flushing the directory entry (fsync) of"))
}

impl Recorder {
    /// Creates the recording at `path` and prepares everything the recording needs (allocation,
    /// threads, ring, flusher settings), so `write` does as little as possible.
    pub fn create(
        path: impl AsRef<Path>,
        options: RecorderOptions,
    ) -> Result<Recorder, RecordError> {
        Recorder::create_probed(path.as_ref(), options, None)
    }

    /// `create`, with a test's probe on the file operations.
    pub(crate) fn create_probed(
        path: &Path,
        options: RecorderOptions,
        probe: Option<Probe>,
    ) -> Result<Recorder, RecordError> {
        options.validate()?;
        let flusher = match options.flusher {
            Flusher::Off => Some(FlusherGuard::disable()?),
            Flusher::On => None,
        };
        if options.mlockall {
            lock_all_memory().map_err(|source| RecordError::Hygiene {
                what: "locking memory (mlockall; needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK)"
                    .into(),
                source,
            })?;
        }
        let (file, epoch, reserved, flags) = prepare_file(path, &options, probe)?;
        let file = Arc::new(file);
        let start_offset = match options.framing {
            Framing::Framed => {
                let created_unix_ns = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let header = FileHeader {
                    flags,
                    epoch,
                    created_unix_ns,
                };
                file.write_all_at(&header.encode(), 0)?;
                if options.allocation == Allocation::Recycle {
                    // The new epoch must be on the device before any frame of this lap: with the
                    // old header, the old lap's frames would read as valid after a crash.
                    file.sync_data()?;
                }
                FILE_HEADER_BYTES as u64
            }
            Framing::Raw => 0,
        };
        sync_parent_dir(&file, path)?;
        let writer = Writer::start(WriterSetup {
            file: file.clone(),
            framing: options.framing,
            epoch,
            start_offset,
            flush: options.flush,
            flush_every: options.flush_every_bytes,
            reserved,
            measure_writes: options.measure_writes,
            prefetch: matches!(
                options.allocation,
                Allocation::ZeroFill | Allocation::Recycle
            ),
            mapped: options.mapped && options.allocation != Allocation::Append,
            lock_windows: options.mlockall,
            avoid_cpu: options.cpu,
        })?;
        let mut writer = writer;
        let bound_ns = options.trace_slow.map(|t| t.as_nanos() as u64);
        if let Some(bound) = bound_ns {
            let calls = if options.decoupled.is_some() {
                TracedCalls::Writer
            } else {
                TracedCalls::Recorder
            };
            writer.trace_slow(calls, bound);
        }
        let mode = match options.decoupled {
            None => {
                apply_hygiene(&options)?;
                Mode::Direct(Box::new(writer))
            }
            Some(d) => {
                let ring = Arc::new(Ring::new(d.ring_bytes as usize, d.overflow));
                let shared = writer.shared().clone();
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let thread_ring = ring.clone();
                let thread_options = options.clone();
                let thread_shared = shared.clone();
                let thread = std::thread::Builder::new()
                    .name("tailbound-writer".into())
                    .spawn(move || {
                        let ring = thread_ring.clone();
                        crate::panics::catch(move || {
                            let mut writer = writer;
                            writer
                                .shared()
                                .writer_tid
                                .store(crate::sys::proc::thread_id(), Ordering::Release);
                            if thread_options.rt_priority.is_none() {
                                // Best effort, as for the flush thread: the writer's wake-ups
                                // then never preempt the producer on a shared CPU.
                                let _ = crate::sys::proc::set_batch_policy();
                            }
                            let hygiene = apply_hygiene(&thread_options);
                            let ok = hygiene.is_ok();
                            let _ = ready_tx.send(hygiene);
                            if !ok {
                                return Err(RecordError::Closed);
                            }
                            let mut record = Vec::with_capacity(64 << 10);
                            while thread_ring.pop(&mut record) {
                                crate::failpoint::hit("record.writer");
                                if let Err(e) = writer.write_record(&record) {
                                    // Kept where the producer's next write() and finish() find it.
                                    writer.shared().keep_for_producer(e);
                                    thread_ring.close();
                                    return Err(RecordError::Closed);
                                }
                            }
                            Ok(writer)
                        })
                        .unwrap_or_else(|p| {
                            // The producer hears of it, and does not wait for room in the ring
                            // for ever.
                            thread_shared.keep_for_producer(RecordError::BackgroundFailed(
                                format!("the writer thread {p}"),
                            ));
                            ring.close();
                            Err(RecordError::Closed)
                        })
                    })
                    .map_err(io_err(path, "starting the writer thread for"))?;
                match ready_rx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let _ = thread.join();
                        return Err(e);
                    }
                    Err(_) => return Err(RecordError::Closed),
                }
                Mode::Decoupled {
                    ring,
                    thread: Some(thread),
                    shared,
                }
            }
        };
        let producer_trace = match (&mode, bound_ns) {
            (Mode::Decoupled { .. }, Some(bound)) => {
                Some(SlowTrace::new(TracedCalls::Recorder, bound))
            }
            _ => None,
        };
        Ok(Recorder {
            path: path.to_path_buf(),
            options,
            mode,
            started: false,
            file,
            _flusher: flusher,
            producer_trace,
            calls: 0,
        })
    }

    /// The recording's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it records with.
    pub fn options(&self) -> &RecorderOptions {
        &self.options
    }

    /// Records one record (one frame when framed). In decoupled mode this copies into the ring and
    /// returns; a record the overflow policy discards is counted, not an error.
    pub fn write(&mut self, record: &[u8]) -> Result<(), RecordError> {
        if !self.started {
            self.started = true;
            // A marker in a test's log, never failed.
            let _ = self.file.note(FileOp::RecordingStarted);
        }
        let index = self.calls;
        self.calls += 1;
        match &mut self.mode {
            Mode::Finished => Err(RecordError::Closed),
            Mode::Direct(w) => w.write_record(record),
            Mode::Decoupled { ring, shared, .. } => {
                let Some(trace) = self.producer_trace.as_mut() else {
                    return Recorder::push(ring, shared, record);
                };
                let start = trace.begin(Some(&shared.activity));
                let r = Recorder::push(ring, shared, record);
                trace.end(start, index, None, Some(&shared.activity));
                r
            }
        }
    }

    /// The decoupled producer's call: copies `record` into the ring.
    fn push(ring: &Ring, shared: &Shared, record: &[u8]) -> Result<(), RecordError> {
        if record.len() > ring.capacity() {
            return Err(RecordError::Options(format!(
                "a record of {} bytes does not fit the {}-byte ring",
                record.len(),
                ring.capacity()
            )));
        }
        if let Some(e) = shared.take_error() {
            return Err(e);
        }
        match ring.push(record) {
            Pushed::Queued | Pushed::Dropped => Ok(()),
            // The writer thread stopped on an error it kept in `shared`.
            Pushed::Closed => Err(shared.take_error().unwrap_or(RecordError::Closed)),
        }
    }

    /// Bytes known to be on the device: the end of the last completed data flush.
    pub fn durable_bytes(&self) -> u64 {
        match &self.mode {
            Mode::Finished => 0,
            Mode::Direct(w) => w.shared().durable_bytes.load(Ordering::Acquire),
            Mode::Decoupled { shared, .. } => shared.durable_bytes.load(Ordering::Acquire),
        }
    }

    /// A handle another thread can poll for [`Recorder::durable_bytes`] without touching the
    /// recorder.
    pub fn durable_watch(&self) -> DurableWatch {
        let shared = match &self.mode {
            Mode::Direct(w) => w.shared().clone(),
            Mode::Decoupled { shared, .. } => shared.clone(),
            Mode::Finished => Arc::new(Shared::default()),
        };
        DurableWatch { shared }
    }

    /// What the recording has done so far. In decoupled mode `frames` and `payload_bytes` count
    /// the records the writer thread has written, not those still in the ring. While the recording
    /// runs, each counter is read on its own, so `payload_bytes` may already include a record that
    /// `frames` does not yet count (or the reverse); `finish()` returns exact totals.
    pub fn counters(&self) -> RecordCounters {
        let from_shared = |shared: &Shared| RecordCounters {
            frames: shared.frames.load(Ordering::Relaxed),
            payload_bytes: shared.payload_bytes.load(Ordering::Relaxed),
            flushes: shared.flushes.load(Ordering::Acquire),
            ..RecordCounters::default()
        };
        match &self.mode {
            Mode::Finished => RecordCounters::default(),
            Mode::Direct(w) => from_shared(w.shared()),
            Mode::Decoupled { ring, shared, .. } => {
                let c = ring.counters();
                RecordCounters {
                    dropped: c.dropped,
                    overwritten: c.overwritten,
                    blocked: c.blocked,
                    ..from_shared(shared)
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn stall_writer(&self, stalled: bool) {
        if let Mode::Decoupled { ring, .. } = &self.mode {
            ring.set_stalled(stalled);
        }
    }

    /// Ends the recording: drains the ring, stops the threads, writes the trailer (recycle) or cuts
    /// the unused tail (fallocate, zero-fill), and `fsync`s.
    pub fn finish(mut self) -> Result<RecordSummary, RecordError> {
        let trailer = self.options.allocation == Allocation::Recycle;
        let truncate = matches!(
            self.options.allocation,
            Allocation::Fallocate | Allocation::ZeroFill
        );
        let mut counters = self.counters();
        let mode = std::mem::replace(&mut self.mode, Mode::Finished);
        let mut writer = match mode {
            Mode::Finished => return Err(RecordError::Closed),
            Mode::Direct(w) => *w,
            Mode::Decoupled {
                ring,
                mut thread,
                shared,
            } => {
                ring.close();
                let c = ring.counters();
                counters.dropped = c.dropped;
                counters.overwritten = c.overwritten;
                counters.blocked = c.blocked;
                match thread.take().map(JoinHandle::join) {
                    Some(Ok(Ok(writer))) => writer,
                    // The writer thread's own error, kept in `shared`, says more than `Closed`.
                    Some(Ok(Err(e))) => return Err(shared.take_error().unwrap_or(e)),
                    _ => return Err(RecordError::Closed),
                }
            }
        };
        let writer_trace = writer.take_trace();
        let (slow_writes, writer_slow_writes) = match self.producer_trace.take() {
            Some(producer) => (Some(producer), writer_trace),
            None => (writer_trace, None),
        };
        let (file_bytes, latency) = writer.finish(trailer, truncate)?;
        counters.frames = writer.frames();
        counters.payload_bytes = writer.payload_bytes();
        counters.flushes = writer.shared().flushes.load(Ordering::Acquire);
        Ok(RecordSummary {
            counters,
            file_bytes,
            writer_latency: latency,
            slow_writes,
            writer_slow_writes,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Mode::Decoupled { ring, thread, .. } = &mut self.mode {
            ring.close();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}
