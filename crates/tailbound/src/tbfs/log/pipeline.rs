//! The log pipeline between sealing and the device: the queue of sealed logs, the log writer,
//! the ahead payloads in flight, the buffers their logs release, and the durability
//! watermarks. Changed only through [`LogPipeline`]'s methods; `log::write` does the I/O.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sched::inherit::Inheritance;
use crate::tbfs::log::{AheadPayload, LogWriter, Queued, Release};

/// Queued entries looked at for a later flushed log ([`LogPipeline::flushed_whole_log_next_below`]):
/// bounds the look per log written.
const FLUSH_COVER_SCAN: usize = 64;

/// Rules: the watermarks only rise, and `durable <= written <= summaries`: a log is written
/// once its summary and its payload are, and durable once a flush followed that. A flush
/// (counted in `flushes_running` while it runs) ends only once for each start.
#[derive(Debug)]
pub(crate) struct LogPipeline {
    /// Logs sealed under `meta`, in sequence order, waiting for the log writer.
    queue: Mutex<VecDeque<Queued>>,
    /// Entries ever put in `queue` (a guard that saw it move writes them on release).
    queued_total: AtomicU64,
    /// The log writer: whoever holds it writes the queue's logs in order, without `meta`.
    writer: Mutex<LogWriter>,
    /// Priorities lent to whoever holds `writer` by threads waiting for their logs.
    inherit: Arc<Inheritance>,
    /// Every log with a sequence below this is written (not necessarily flushed): its summary
    /// and its payload.
    written_seq: AtomicU64,
    /// Every summary with a sequence below this is written (the log writer's progress); ahead
    /// payloads below it may still be in flight.
    summary_seq: AtomicU64,
    /// Every log with a sequence below this is durable (a device flush followed it).
    durable_seq: AtomicU64,
    /// Ahead payloads not yet written, by sequence.
    ahead_pending: Mutex<BTreeMap<u64, Arc<AheadPayload>>>,
    /// An ahead payload was written since the last flush began.
    ahead_unflushed: AtomicBool,
    /// Buffers sealed logs release, by the log's sequence: they go once `written_seq` passes
    /// it (every log up to it complete), with their bytes for `in_flight`.
    releases: Mutex<BTreeMap<u64, (Vec<Release>, u64)>>,
    /// Buffered bytes in sealed logs not yet written: still in the budget's buffered bytes,
    /// but no longer a reason to commit.
    in_flight: AtomicU64,
    /// Device flushes running without the log writer: until they end, `LogWriter::unflushed`
    /// being false does not mean the writes are durable.
    flushes_running: AtomicU64,
}

impl LogPipeline {
    /// The pipeline of a pool whose next log is `seq`, every log before it written.
    pub(crate) fn new(seq: u64, writer: LogWriter, inherit: Arc<Inheritance>) -> LogPipeline {
        LogPipeline {
            queue: Mutex::new(VecDeque::new()),
            queued_total: AtomicU64::new(0),
            writer: Mutex::new(writer),
            inherit,
            written_seq: AtomicU64::new(seq),
            summary_seq: AtomicU64::new(seq),
            durable_seq: AtomicU64::new(0),
            ahead_pending: Mutex::new(BTreeMap::new()),
            ahead_unflushed: AtomicBool::new(false),
            releases: Mutex::new(BTreeMap::new()),
            in_flight: AtomicU64::new(0),
            flushes_running: AtomicU64::new(0),
        }
    }

    // The queue and the log writer.

    /// Queues a sealed log or a superblock for the log writer.
    pub(crate) fn enqueue(&self, entry: Queued) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(entry);
        self.queued_total.fetch_add(1, Ordering::AcqRel);
    }

    /// Entries ever queued.
    pub(crate) fn queued_total(&self) -> u64 {
        self.queued_total.load(Ordering::Acquire)
    }

    /// Takes the next queued entry, if it is ordered before `seq`.
    pub(crate) fn pop_below(&self, seq: u64) -> Option<Queued> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        match q.front() {
            Some(e) if e.order() < seq => q.pop_front(),
            _ => None,
        }
    }

    /// Whether a log the log writer writes whole and flushes after (no ahead payload) is
    /// queued before `seq` with no superblock before it, among the next [`FLUSH_COVER_SCAN`]
    /// entries: the holder of the log writer writes it in the same run as the logs before it,
    /// and its flush makes them durable too.
    pub(crate) fn flushed_whole_log_next_below(&self, seq: u64) -> bool {
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.iter()
            .take(FLUSH_COVER_SCAN)
            .map_while(|e| match e {
                Queued::Log(l) if l.summary.sequence < seq => Some(l.flush && l.ahead.is_none()),
                _ => None,
            })
            .any(|covers| covers)
    }

    /// Drops every queued entry (a write failed: the pool is poisoned).
    pub(crate) fn clear_queue(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Tests: whether nothing is queued.
    #[cfg(test)]
    pub(crate) fn queue_is_empty(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Takes the log writer; a thread that has to wait lends its I/O priority to the holder.
    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, LogWriter> {
        let _waiting = crate::phases::enter(crate::phases::Phase::LogWriterWait);
        crate::tbfs::lending::lock_lending(&self.writer, &self.inherit)
    }

    /// The priorities lent to the log writer's holder.
    pub(crate) fn inheritance(&self) -> &Arc<Inheritance> {
        &self.inherit
    }

    // The watermarks.

    /// Every log below this is written, summary and payload.
    pub(crate) fn written(&self) -> u64 {
        self.written_seq.load(Ordering::Acquire)
    }

    /// Every summary below this is written.
    pub(crate) fn summaries(&self) -> u64 {
        self.summary_seq.load(Ordering::Acquire)
    }

    /// Every log below this is durable.
    pub(crate) fn durable(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    /// The log writer wrote the summary of log `seq`: the next in order.
    pub(crate) fn summary_written(&self, seq: u64) {
        let before = self.summary_seq.swap(seq + 1, Ordering::AcqRel);
        assert!(
            before <= seq,
            "the summary of log {seq} written after those below {before}"
        );
    }

    /// Every log below `durable` is durable: a flush followed its summary and its payload.
    pub(crate) fn made_durable(&self, durable: u64) {
        let written = self.complete();
        assert!(
            durable <= written,
            "logs below {durable} made durable with only those below {written} written"
        );
        self.durable_seq.fetch_max(durable, Ordering::AcqRel);
    }

    /// The first log not complete (summary and payload): `written_seq` may lag behind it
    /// until [`LogPipeline::take_due_releases`] moves it.
    fn complete(&self) -> u64 {
        let written = self.written_seq.load(Ordering::Acquire);
        let summaries = self.summaries();
        assert!(
            written <= summaries,
            "logs below {written} written with only the summaries below {summaries}"
        );
        let pending = self.ahead_pending.lock().unwrap_or_else(|p| p.into_inner());
        pending
            .keys()
            .next()
            .map_or(summaries, |&k| k.min(summaries))
    }

    // Ahead payloads.

    /// An ahead payload was sealed: it is in flight until written.
    pub(crate) fn ahead_sealed(&self, a: Arc<AheadPayload>) {
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(a.seq, a);
    }

    /// The ahead payload of log `seq` was written (or failed): a flush must follow for it to be
    /// durable.
    pub(crate) fn ahead_written(&self, seq: u64) {
        self.ahead_unflushed.store(true, Ordering::Release);
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
    }

    /// The ahead payloads in flight below `seq` (of the inodes `inos` only, if given).
    pub(crate) fn ahead_below(&self, seq: u64, inos: Option<&[u64]>) -> Vec<Arc<AheadPayload>> {
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(..seq)
            .filter(|(_, a)| inos.is_none_or(|inos| a.inos.iter().any(|i| inos.contains(i))))
            .map(|(_, a)| a.clone())
            .collect()
    }

    /// Whether an ahead payload below sequence `seq` is not written yet.
    pub(crate) fn payloads_in_flight_below(&self, seq: u64) -> bool {
        self.ahead_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(..seq)
            .next()
            .is_some()
    }

    /// Whether an ahead payload was written since the last flush began.
    pub(crate) fn ahead_unflushed(&self) -> bool {
        self.ahead_unflushed.load(Ordering::Acquire)
    }

    /// A flush begins: whether an ahead payload was written since the last one began.
    pub(crate) fn take_ahead_unflushed(&self) -> bool {
        self.ahead_unflushed.swap(false, Ordering::AcqRel)
    }

    /// A write flushed with it covers every ahead payload written so far.
    pub(crate) fn ahead_flushed(&self) {
        self.ahead_unflushed.store(false, Ordering::Release);
    }

    // Flushes running without the log writer.

    pub(crate) fn flush_started(&self) {
        self.flushes_running.fetch_add(1, Ordering::AcqRel);
    }

    /// A flush counted by [`LogPipeline::flush_started`] ended; `Err` if none was running
    /// (the count is left at zero).
    pub(crate) fn flush_ended(&self) -> std::result::Result<(), ()> {
        self.flushes_running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .map(drop)
            .map_err(drop)
    }

    pub(crate) fn flushes_running(&self) -> bool {
        self.flushes_running.load(Ordering::Acquire) > 0
    }

    // Buffers in flight.

    /// Log `seq` was sealed with buffers holding `bytes`, released once it is written.
    pub(crate) fn sealed(&self, seq: u64, release: Vec<Release>, bytes: u64) {
        self.in_flight.fetch_add(bytes, Ordering::AcqRel);
        if !release.is_empty() {
            self.releases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(seq, (release, bytes));
        }
    }

    /// Buffered bytes in sealed logs not yet written.
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// `bytes` of sealed data were written; `Err(counted)` if more than are counted (the
    /// count is left as it was).
    pub(crate) fn release_in_flight(&self, bytes: u64) -> std::result::Result<(), u64> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_sub(bytes)
            })
            .map(drop)
    }

    /// Moves `written_seq` up to the first log not complete, and takes the buffers of the logs
    /// it passed (with their bytes) for the caller to release.
    pub(crate) fn take_due_releases(&self) -> Vec<(Vec<Release>, u64)> {
        let pending = self.ahead_pending.lock().unwrap_or_else(|p| p.into_inner());
        let summaries = self.summaries();
        let written = pending
            .keys()
            .next()
            .map_or(summaries, |&k| k.min(summaries));
        self.written_seq.fetch_max(written, Ordering::AcqRel);
        // A log's buffers go once it and every earlier log naming one of their files are
        // written: a run of data-only logs releases with its last log, and the others may have
        // been written by other threads.
        let mut releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        let due: Vec<u64> = releases
            .iter()
            .filter(|&(&seq, (release, _))| {
                seq < written
                    || (seq < summaries
                        && !pending.range(..=seq).any(|(_, a)| {
                            release
                                .iter()
                                .any(|(cell, _)| a.inos.binary_search(&cell.ino).is_ok())
                        }))
            })
            .map(|(&seq, _)| seq)
            .collect();
        due.into_iter()
            .filter_map(|seq| releases.remove(&seq))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::LogPipeline;
    use crate::sched::inherit::Inheritance;

    fn pipeline(seq: u64) -> LogPipeline {
        LogPipeline::new(seq, Default::default(), Inheritance::inert())
    }

    #[test]
    fn the_watermarks_follow_the_summaries_and_flushes() {
        let p = pipeline(5);
        assert_eq!((p.durable(), p.written(), p.summaries()), (0, 5, 5));
        p.summary_written(5);
        assert!(p.take_due_releases().is_empty());
        assert_eq!((p.written(), p.summaries()), (6, 6));
        p.made_durable(6);
        assert_eq!(p.durable(), 6);
        p.made_durable(4);
        assert_eq!(p.durable(), 6, "it only rises");
    }

    #[test]
    #[should_panic(expected = "made durable with only those below 5 written")]
    fn a_flush_claiming_logs_not_yet_written_is_caught() {
        pipeline(5).made_durable(7);
    }

    #[test]
    #[should_panic(expected = "the summary of log 5 written after those below 7")]
    fn a_summary_written_out_of_order_is_caught() {
        pipeline(7).summary_written(5);
    }

    #[test]
    fn a_flush_ends_once_for_each_start() {
        let p = pipeline(1);
        p.flush_started();
        assert!(p.flushes_running());
        assert_eq!(p.flush_ended(), Ok(()));
        assert!(!p.flushes_running());
        assert_eq!(p.flush_ended(), Err(()), "none running");
        assert!(!p.flushes_running(), "left at zero, not wrapped");
    }
}
