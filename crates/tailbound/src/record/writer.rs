//! The part of a recorder that makes the `write()` calls: framing, positions, flush windows and
//! growth. It runs on the producer's thread (direct mode) or on the writer thread (decoupled).
//!
//! Flushing and growth run on a background thread fed by a channel, so `write()` only copies,
//! writes and, once per window, sends a message.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use hdrhistogram::Histogram;

use crate::record::fileops::RecFile;
use crate::record::frame::{
    encode_frame_header, trailer_payload, FRAME_FLAG_TRAILER, FRAME_HEADER_BYTES,
};
use crate::record::options::{FlushMode, Framing, RECORD_BYTES_MAX};
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

/// Work for the background thread.
enum Job {
    /// Flush the completed window `[start, end)`.
    Flush { start: u64, end: u64 },
    /// Reserve `[from, from + len)` ahead of the writer.
    Grow { from: u64, len: u64 },
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
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

fn run_background(
    file: Arc<RecFile>,
    mode: FlushMode,
    prefetch: bool,
    mapping: Option<Arc<SharedMapping>>,
    shared: Arc<Shared>,
    jobs: std::sync::mpsc::Receiver<Job>,
) {
    let mut previous: Option<(u64, u64)> = None;
    for job in jobs {
        crate::failpoint::hit("record.flush");
        if let Job::Flush { start, end } = &job {
            let ahead = PREFETCH_WINDOWS * (end - start);
            let r = match &mapping {
                // Fault the next windows in writable here, off the producer's path.
                Some(m) => m
                    .populate_write(*end as usize, ahead as usize)
                    .map_err(|source| RecordError::Io {
                        path: file.path().to_path_buf(),
                        op: "mapping ahead in",
                        source,
                    }),
                // Keep the pages the writer reaches next in the cache: a write that covers part
                // of an uncached page of a written file would otherwise wait for a read.
                None if prefetch => file.prefetch(*end, ahead),
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
                let _ = file.fallocate(from, len);
                Ok(())
            }
            Job::Flush { start, end } => {
                let len = end - start;
                let r = match mode {
                    FlushMode::Fdatasync => file.sync_data().map(|_| Some(end)),
                    FlushMode::SyncFileRange => file
                        .sync_range(start, len, SyncRange::WriteAndWait)
                        .map(|_| Some(end)),
                    FlushMode::Pipelined => (|| {
                        file.sync_range(start, len, SyncRange::StartWrite)?;
                        let done = match previous {
                            Some((ps, pe)) => {
                                file.sync_range(ps, pe - ps, SyncRange::WaitAfter)?;
                                if let Some(m) = &mapping {
                                    // Mapped pages cannot leave the cache: unmap them first.
                                    m.discard(ps as usize, (pe - ps) as usize).map_err(
                                        |source| RecordError::Io {
                                            path: file.path().to_path_buf(),
                                            op: "unmapping flushed pages of",
                                            source,
                                        },
                                    )?;
                                }
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
        if let Err(e) = result {
            shared.fail(e);
        }
    }
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
}

impl Writer {
    pub fn start(setup: WriterSetup) -> Result<Writer, RecordError> {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = channel();
        let file = setup.file.clone();
        let thread_shared = shared.clone();
        let mode = setup.flush;
        let prefetch = setup.prefetch;
        let first_windows = PREFETCH_WINDOWS * setup.flush_every;
        let mapping = match (setup.mapped, setup.reserved) {
            // The mapping is an optimisation: where the file cannot be mapped or faulted in ahead
            // (no MADV_POPULATE_WRITE before Linux 5.14; file systems without shared writable
            // mappings), the recording makes write() calls instead of failing.
            (true, Some(reserved)) if reserved > 0 => setup
                .file
                .map_shared(reserved as usize)
                .and_then(|m| {
                    m.populate_write(setup.start_offset as usize, first_windows as usize)?;
                    Ok(Arc::new(m))
                })
                .ok(),
            _ => None,
        };
        if mapping.is_none() && prefetch {
            setup.file.warm(setup.start_offset, first_windows)?;
        }
        let thread_mapping = mapping.clone();
        let thread = std::thread::Builder::new()
            .name("tailbound-flush".into())
            .spawn(move || {
                let failed = thread_shared.clone();
                let run = crate::panics::catch(|| {
                    run_background(file, mode, prefetch, thread_mapping, thread_shared, rx)
                });
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
            frame: Vec::with_capacity(FRAME_HEADER_BYTES + (64 << 10)),
            payload_bytes: 0,
            latency,
            mapping,
            shared,
            background: Background {
                jobs: Some(tx),
                thread: Some(thread),
            },
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

    fn send(&self, job: Job) -> Result<(), RecordError> {
        match &self.background.jobs {
            Some(tx) if tx.send(job).is_ok() => Ok(()),
            _ => Err(RecordError::Closed),
        }
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

    /// Writes one record and, when a window is complete, hands it to the background thread.
    pub fn write_record(&mut self, record: &[u8]) -> Result<(), RecordError> {
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
            if end > self.window_start {
                self.send(Job::Flush {
                    start: self.window_start,
                    end,
                })?;
                self.window_start = end;
            }
        }
        if let Some(reserved) = self.reserved {
            // One window ahead of the end: rare, and never on the producer's thread.
            if self.offset + self.flush_every > reserved {
                self.send(Job::Grow {
                    from: reserved,
                    len: self.grow_by,
                })?;
                self.reserved = Some(reserved + self.grow_by);
            }
        }
        Ok(())
    }

    /// Stops the background thread and returns its first error, if any.
    fn stop_background(&mut self) -> Result<(), RecordError> {
        drop(self.background.jobs.take());
        if let Some(t) = self.background.thread.take() {
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
