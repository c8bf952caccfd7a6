//! The shipping loop: read the next frames below the limit, send them as one batch, advance the
//! ledger; after any failure reconnect, learn from the partition's tail what the broker already
//! holds, and go on from there.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rskafka::record::Record;
use serde::Serialize;
use tailbound::record::DurableWatch;

use crate::kafka::Dest;
use crate::key::{check_recorder_id, StreamId};
use crate::ledger::{dest_hash, ledger_path, Ledger, LedgerState};
use crate::source::{FrameReader, Next};
use crate::{KafkaUrl, ShipError};

/// How a shipper behaves.
#[derive(Debug, Clone)]
pub struct ShipOptions {
    /// The recorder's id, the first part of every key.
    pub recorder: String,
    /// Payload bytes per batch (at least one frame is sent). The broker's `message.max.bytes`
    /// (1 MiB by default) bounds it.
    pub batch_bytes: usize,
    /// Write the ledger at most this often while shipping (and always at the end). Exactly-once
    /// does not depend on it: the tail read covers what the ledger has not caught up with.
    pub ledger_every: Duration,
    /// Give up after this long without progress (broker unreachable); `None` retries for ever.
    pub give_up_after: Option<Duration>,
}

impl ShipOptions {
    pub fn new(recorder: impl Into<String>) -> ShipOptions {
        ShipOptions {
            recorder: recorder.into(),
            batch_bytes: 960 << 10,
            ledger_every: Duration::from_millis(100),
            give_up_after: None,
        }
    }
}

/// How far a recording may be read, and whether more will come.
pub trait Limit {
    /// Bytes from the start of the file that may be shipped.
    fn limit(&self) -> Result<u64, ShipError>;
    /// True once the limit will not grow any more.
    fn done(&self) -> bool;
    /// True when the caller wants the shipper to stop now, shipped or not.
    fn abandoned(&self) -> bool {
        false
    }
}

/// A finished recording (or whatever valid prefix a crashed one left): the whole file.
pub struct Backlog<'a>(pub &'a Path);

impl Limit for Backlog<'_> {
    fn limit(&self) -> Result<u64, ShipError> {
        std::fs::metadata(self.0)
            .map(|m| m.len())
            .map_err(crate::io_err(self.0, "reading the size of"))
    }
    fn done(&self) -> bool {
        true
    }
}

/// A recording another process is making: what its file holds now, until its trailer. It ships
/// what was written, which a crash of the machine may still lose; [`LiveShipper`] ships only what
/// the flusher made durable.
pub struct Follow<'a>(pub &'a Path);

impl Limit for Follow<'_> {
    fn limit(&self) -> Result<u64, ShipError> {
        Backlog(self.0).limit()
    }
    fn done(&self) -> bool {
        false
    }
}

/// The recorder's durable watermark, until `done`.
struct Durable {
    watch: DurableWatch,
    done: Arc<AtomicBool>,
    abandon: Arc<AtomicBool>,
}

impl Limit for Durable {
    fn limit(&self) -> Result<u64, ShipError> {
        Ok(self.watch.bytes())
    }
    fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
    fn abandoned(&self) -> bool {
        self.abandon.load(Ordering::Acquire)
    }
}

/// What a shipper did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShipReport {
    pub recording: String,
    pub recorder: String,
    pub partition: i32,
    /// Records (the header and each frame) the broker holds for this recording now.
    pub acknowledged: u64,
    /// Of those, sent by this run.
    pub sent: u64,
    /// Bytes sent by this run (keys excluded).
    pub sent_bytes: u64,
    /// Records the ledger did not know of but the partition's tail showed as already there
    /// (acknowledged before a crash, or sent before a lost acknowledgement): not sent again.
    pub found_on_broker: u64,
    /// Connections lost and made again.
    pub reconnects: u64,
    /// The trailer was shipped: the recording is complete on the broker.
    pub finished: bool,
    /// The ledger said the recording was retired: nothing was sent.
    pub already_retired: bool,
    /// The shipper stopped before everything below the limit was acknowledged.
    pub incomplete: bool,
    #[serde(skip)]
    pub elapsed: Duration,
}

struct Shipper {
    url: KafkaUrl,
    opts: ShipOptions,
    path: PathBuf,
    ledger_path: PathBuf,
    reader: FrameReader,
    stream: StreamId,
    dest: u32,
    /// Known to the broker: records 0..next.
    next: u64,
    resume_offset: i64,
    partition: Option<i32>,
    stored: Option<Ledger>,
    stored_at: Instant,
    report: ShipReport,
}

/// Sleeps `d` in short steps, returning early when `limit` is abandoned.
async fn pause(d: Duration, limit: &dyn Limit) {
    let until = Instant::now() + d;
    while Instant::now() < until && !limit.abandoned() {
        tokio::time::sleep(Duration::from_millis(20).min(d)).await;
    }
}

impl Shipper {
    fn new(path: &Path, url: &KafkaUrl, opts: &ShipOptions) -> Result<Shipper, ShipError> {
        check_recorder_id(&opts.recorder).map_err(ShipError::Usage)?;
        let reader = FrameReader::open(path)?;
        let stream = reader.stream(&opts.recorder);
        Ok(Shipper {
            url: url.clone(),
            opts: opts.clone(),
            path: path.to_path_buf(),
            ledger_path: ledger_path(path),
            reader,
            dest: dest_hash(&url.topic, &opts.recorder),
            stream,
            next: 0,
            resume_offset: 0,
            partition: None,
            stored: None,
            stored_at: Instant::now(),
            report: ShipReport {
                recording: path.display().to_string(),
                recorder: opts.recorder.clone(),
                ..ShipReport::default()
            },
        })
    }

    fn ledger(&self, state: LedgerState) -> Ledger {
        Ledger {
            state,
            created_unix_ns: self.stream.created_unix_ns,
            epoch: self.stream.epoch,
            next_index: self.next,
            resume_offset: self.resume_offset,
            partition: self.partition.unwrap_or(0),
            dest: self.dest,
        }
    }

    fn store_ledger(&mut self) -> Result<(), ShipError> {
        let l = self.ledger(LedgerState::Shipping);
        if self.stored != Some(l) {
            l.store(&self.ledger_path)?;
            self.stored = Some(l);
        }
        self.stored_at = Instant::now();
        Ok(())
    }

    /// Reads the ledger once: `false` when it says the recording was retired.
    fn load_ledger(&mut self) -> Result<bool, ShipError> {
        match Ledger::load(&self.ledger_path)? {
            Some(l) if l.is_for(&self.stream, self.dest) => {
                if l.state == LedgerState::Retired {
                    return Ok(false);
                }
                self.next = l.next_index;
                self.resume_offset = l.resume_offset;
                self.partition = Some(l.partition);
                self.stored = Some(l);
            }
            // None, or about an earlier lap of a recycled file or another destination.
            _ => {}
        }
        Ok(true)
    }

    /// After (re)connecting: what does the broker hold? Moves `next` past it and the reader to
    /// `next`.
    async fn resume(&mut self, dest: &Dest) -> Result<(), ShipError> {
        if self.partition.is_none() {
            // Nothing of this stream was ever sent to this destination: anything sent from now on
            // lands at or after the partition's current end. That goes to disk before the first
            // batch, so a crash before the first acknowledgement still finds it.
            self.partition = Some(dest.partition);
            self.resume_offset = dest.end_offset().await?;
            self.next = 0;
            self.store_ledger()?;
        }
        let (highest, end) = dest.highest_index(&self.stream, self.resume_offset).await?;
        if let Some(h) = highest {
            if h + 1 > self.next {
                self.report.found_on_broker += h + 1 - self.next;
                self.next = h + 1;
            }
        }
        // Everything of this stream before `end` is below `next` now; what is sent next lands
        // after it.
        self.resume_offset = end;
        self.store_ledger()?;
        if self.reader.index() > self.next {
            self.reader = FrameReader::open(&self.path)?;
        }
        if !self.reader.skip_to(self.next, u64::MAX)? {
            return Err(ShipError::Recording {
                path: self.path.clone(),
                reason: format!(
                    "the broker holds {} records of this recording but the file has only {} valid ones",
                    self.next,
                    self.reader.index()
                ),
            });
        }
        Ok(())
    }

    /// Ships until everything below the limit is acknowledged and the limit is done.
    async fn pump(
        &mut self,
        dest: &Dest,
        limit: &dyn Limit,
        progress: &mut Instant,
    ) -> Result<bool, ShipError> {
        loop {
            if limit.abandoned() {
                return Ok(false);
            }
            let done = limit.done();
            let end = limit.limit()?;
            let mut batch = Vec::new();
            let mut bytes = 0usize;
            while bytes < self.opts.batch_bytes {
                let mut value = Vec::new();
                match self.reader.next(end, &mut value)? {
                    Next::Frame => {
                        bytes += value.len();
                        batch.push(Record {
                            key: Some(self.stream.key(self.reader.index() - 1)),
                            value: Some(value),
                            headers: Default::default(),
                            timestamp: now(),
                        });
                    }
                    Next::NotYet | Next::Finished => break,
                }
            }
            if batch.is_empty() {
                if self.reader.finished() || done {
                    self.store_ledger()?;
                    return Ok(true);
                }
                self.write_ledger_if_due()?;
                pause(Duration::from_millis(5), limit).await;
                continue;
            }
            let n = batch.len() as u64;
            let offsets = dest.produce(batch).await?;
            self.next += n;
            if let Some(last) = offsets.last() {
                self.resume_offset = last + 1;
            }
            self.report.sent += n;
            self.report.sent_bytes += bytes as u64;
            *progress = Instant::now();
            self.write_ledger_if_due()?;
        }
    }

    fn write_ledger_if_due(&mut self) -> Result<(), ShipError> {
        if self.stored_at.elapsed() >= self.opts.ledger_every {
            self.store_ledger()?;
        }
        Ok(())
    }

    async fn run(mut self, limit: &dyn Limit) -> Result<ShipReport, ShipError> {
        let started = Instant::now();
        if !self.load_ledger()? {
            self.report.already_retired = true;
            return Ok(self.report);
        }
        let mut progress = Instant::now();
        let mut backoff = Duration::from_millis(50);
        let mut first = true;
        let mut completed = false;
        let mut last_error = None;
        loop {
            if limit.abandoned() {
                break;
            }
            if let (Some(give_up), Some(e)) = (self.opts.give_up_after, &last_error) {
                if progress.elapsed() >= give_up {
                    return Err(ShipError::Kafka {
                        broker: self.url.broker.clone(),
                        what: "shipping",
                        detail: format!("no progress for {give_up:?}; last error: {e}"),
                    });
                }
            }
            if !first {
                self.report.reconnects += 1;
                pause(backoff, limit).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            first = false;
            let dest = match Dest::connect_to(&self.url, &self.opts.recorder, self.partition).await
            {
                Ok(d) => d,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            let r = match self.resume(&dest).await {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    self.pump(&dest, limit, &mut progress).await
                }
                Err(e) => Err(e),
            };
            match r {
                Ok(true) => {
                    completed = true;
                    self.report.finished = self.reader.finished();
                    break;
                }
                Ok(false) => break,
                Err(e @ ShipError::Recording { .. }) | Err(e @ ShipError::Io { .. }) => {
                    return Err(e)
                }
                Err(e) => last_error = Some(e),
            }
        }
        // Whatever was acknowledged is on record, also when stopping early.
        if self.partition.is_some() {
            self.store_ledger()?;
        }
        self.report.partition = self.partition.unwrap_or(-1);
        self.report.acknowledged = self.next;
        self.report.incomplete = !completed;
        self.report.elapsed = started.elapsed();
        Ok(self.report)
    }
}

fn now() -> chrono::DateTime<chrono::Utc> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Ships one recording up to `limit`, resuming where its ledger and the broker say.
pub fn ship_with(
    path: &Path,
    url: &KafkaUrl,
    opts: &ShipOptions,
    limit: &dyn Limit,
) -> Result<ShipReport, ShipError> {
    let shipper = Shipper::new(path, url, opts)?;
    crate::runtime()?.block_on(shipper.run(limit))
}

/// Ships a finished recording (or a crashed one's valid prefix).
pub fn ship_file(path: &Path, url: &KafkaUrl, opts: &ShipOptions) -> Result<ShipReport, ShipError> {
    ship_with(path, url, opts, &Backlog(path))
}

/// Ships a recording while it is made, on its own thread, reading only what the recorder's
/// flusher has made durable: the recording thread is never touched.
pub struct LiveShipper {
    thread: Option<JoinHandle<Result<ShipReport, ShipError>>>,
    result: mpsc::Receiver<()>,
    done: Arc<AtomicBool>,
    abandon: Arc<AtomicBool>,
}

impl LiveShipper {
    /// Starts shipping `path`, which a [`tailbound::record::Recorder`] is recording; `watch` is
    /// its [`tailbound::record::Recorder::durable_watch`].
    pub fn start(
        path: &Path,
        url: &KafkaUrl,
        opts: &ShipOptions,
        watch: DurableWatch,
    ) -> Result<LiveShipper, ShipError> {
        let shipper = Shipper::new(path, url, opts)?;
        let done = Arc::new(AtomicBool::new(false));
        let abandon = Arc::new(AtomicBool::new(false));
        let limit = Durable {
            watch,
            done: done.clone(),
            abandon: abandon.clone(),
        };
        let (tx, result) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tailbound-ship".into())
            .spawn(move || {
                // Best effort: its wake-ups then never preempt the recording thread.
                let _ = tailbound::sys::proc::set_batch_policy();
                let r = crate::runtime().and_then(|rt| rt.block_on(shipper.run(&limit)));
                let _ = tx.send(());
                r
            })
            .map_err(crate::io_err(path, "starting the shipping thread for"))?;
        Ok(LiveShipper {
            thread: Some(thread),
            result,
            done,
            abandon,
        })
    }

    /// Call once the recording is finished: ships what is left, waiting at most `linger`, then
    /// stops (the report says whether it completed; `tailbound ship` finishes the rest).
    pub fn finish(mut self, linger: Duration) -> Result<ShipReport, ShipError> {
        self.done.store(true, Ordering::Release);
        if self.result.recv_timeout(linger).is_err() {
            self.abandon.store(true, Ordering::Release);
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err(ShipError::Usage("the shipping thread panicked".into())),
        }
    }
}

impl Drop for LiveShipper {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.abandon.store(true, Ordering::Release);
            let _ = t.join();
        }
    }
}
