//! The log queue and the log writer: writing sealed logs in order, ahead payloads, superblocks,
//! device flushes, and the written/durable watermarks. Names only the log pipeline: where the
//! writing meets the superblock writer, the cleaner's copies or the budget
//! (`write_logs_until`, `write_queued`, `write_handed_off_superblocks`, `in_flight_max`), it is
//! `commit/writing.rs`'s.

use std::sync::Arc;

use crate::dev::PendingWrite;
use crate::tbfs::format::{Superblock, BLOCK, BLOCK_U64, FLAG_AHEAD};
use crate::tbfs::limits::{AHEAD_CHUNKS_IN_FLIGHT, AHEAD_CHUNK_BLOCKS, BEHIND_BUFFERS};
use crate::tbfs::log::{AheadPayload, AheadState, LogWriter, Queued, SealedLog};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

/// Where [`Engine::write_queued`] stopped before the sequence it was asked to reach: at a
/// superblock, taken from the queue ([`Engine::take_superblock`]) and put with the handed-off
/// ones, to be written without the log writer once every payload before it is complete.
#[derive(Debug)]
pub(crate) struct AtSuperblock;

/// What a thread writing queued logs does with a superblock it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Superblocks {
    /// Writes it (and the flushes around it) before going on.
    Write,
    /// Leaves it to the background thread and goes on to its own logs: a writer waiting for
    /// its log does not wait for two device flushes it does not need.
    HandOff,
}

impl Engine {
    pub(crate) fn enqueue(&self, entry: Queued) {
        self.logs.enqueue(entry);
    }

    /// Returns once the logs up to `seq` that hold buffers of inode `ino` are written (the
    /// summaries up to `seq`, and the payloads naming `ino`; with `all`, every payload up to
    /// `seq`, as a checkpoint needs them to count), and durable too if `flush` (the barrier
    /// policy flushes after that log). Payloads of other files sealed before are not waited
    /// for without `all`: recovery replays this file's logs whether or not they are complete.
    pub(crate) fn wait_sealed(&self, seq: u64, flush: bool, ino: u64, all: bool) -> Result<()> {
        if self.logs.durable() > seq {
            return self.check_not_poisoned();
        }
        self.write_queued_until(seq + 1, Superblocks::HandOff)?;
        let inos = [ino];
        self.wait_ahead(seq + 1, (!all).then_some(&inos[..]))?;
        if flush && self.logs.durable() <= seq {
            self.flush_ahead()?;
        }
        self.check_not_poisoned()
    }

    /// Writes the logs sealed under one hold of `meta` (`end`: the sequence after the last;
    /// `own`: their ahead payloads) and returns once they are written and, if the barrier
    /// policy says so, flushed. The payloads go first, concurrently with other threads', each
    /// through `sched` as this thread's I/O; then the summaries up to `end`. Earlier logs are
    /// waited for only where they name one of the same files.
    pub(crate) fn write_own_logs(
        &self,
        end: u64,
        own: &[Arc<AheadPayload>],
        small: &[(u64, Vec<u64>, bool)],
    ) -> Result<()> {
        for a in own {
            self.write_ahead(a)?;
        }
        self.write_queued_until(end, Superblocks::HandOff)?;
        // Logs the log writer wrote whole were flushed with their write if the policy says
        // so; if an earlier payload of the same files was still in flight then, flush again.
        let mut flush = own.iter().any(|a| a.flush);
        for (seq, inos, flushed) in small {
            flush |= self.wait_ahead(*seq, Some(inos))? && *flushed;
        }
        for a in own {
            self.wait_ahead(a.seq, Some(&a.inos))?;
            self.wait_payload(a)?;
        }
        if flush {
            self.flush_ahead()?;
        }
        self.check_not_poisoned()
    }

    /// The error a poisoned pool reports.
    pub(crate) fn poison_error(&self) -> Error {
        self.check_not_poisoned()
            .err()
            .unwrap_or_else(|| Error::Invalid("a log payload was not written".into()))
    }

    /// Writes an ahead payload if nobody has taken it on yet (this thread's I/O), or finishes it
    /// if another thread started it and nobody waits for its chunks yet; then releases what its
    /// completion lets go. A payload another thread is finishing is left to it
    /// ([`Engine::wait_payload`] waits for it).
    pub(crate) fn write_ahead(&self, a: &AheadPayload) -> Result<()> {
        let _writing = crate::phases::enter(crate::phases::Phase::Payload);
        self.start_ahead(a);
        self.finish_ahead(a)
    }

    /// Starts writing an ahead payload if nobody has taken it on yet (this thread's I/O): on a
    /// device that takes requests in flight its chunks are queued, and whoever needs the
    /// payload complete waits for them ([`Engine::finish_ahead`]).
    pub(crate) fn start_ahead(&self, a: &AheadPayload) {
        if !a.claim() {
            return;
        }
        let _fail = crate::tbfs::poison::FailOnUnwind {
            inner: self,
            payload: a,
        };
        let _charged = a.charge.map(crate::sched::Charge::apply);
        let started = self.check_not_poisoned().and_then(|()| {
            a.crc();
            let base = (a.start + 1) * BLOCK_U64;
            let mut started = Vec::new();
            if self.dev().writes_are_copies() {
                // The payload's blocks are fenced once, after the last: nothing is published
                // between them.
                crate::sys::mmap::stream_batch(|| {
                    for (i, block) in a.blocks.iter().enumerate() {
                        self.dev()
                            .write_at(base + i as u64 * BLOCK_U64, &block[..])
                            .map_err(|e| self.payload_error(a, e))?;
                    }
                    Ok::<(), Error>(())
                })?;
            } else {
                // Several chunks in flight, so a scheduler sees the writer backlogged for the
                // whole payload; the window bounds the copies held.
                let mut window = std::collections::VecDeque::new();
                for (k, chunk) in a.blocks.chunks(AHEAD_CHUNK_BLOCKS).enumerate() {
                    if window.len() == AHEAD_CHUNKS_IN_FLIGHT {
                        window
                            .pop_front()
                            .map_or(Ok(()), PendingWrite::wait)
                            .map_err(|e| self.payload_error(a, e))?;
                    }
                    let mut buf = Vec::with_capacity(chunk.len() * BLOCK);
                    for block in chunk {
                        buf.extend_from_slice(&block[..]);
                    }
                    let at = base + (k * AHEAD_CHUNK_BLOCKS) as u64 * BLOCK_U64;
                    window.push_back(self.dev().start_write(at, buf));
                }
                started.extend(window);
            }
            Ok(started)
        });
        a.set_started(started);
    }

    /// Waits until an ahead payload is written, writing it if nobody has taken it on and
    /// finishing it if its chunks are in the device and nobody waits for them. A failed payload
    /// poisons the pool: its error, or the pool's.
    pub(crate) fn wait_payload(&self, a: &AheadPayload) -> Result<()> {
        loop {
            self.start_ahead(a);
            let finished = self.finish_ahead(a);
            let mut st = a.state.lock();
            match *st {
                AheadState::Done => return finished,
                AheadState::Failed => return finished.and_then(|()| Err(self.poison_error())),
                AheadState::Pending => continue,
                AheadState::Writing => {
                    // Started chunks are handed over under the state lock: checked under it,
                    // a hand-over cannot be missed.
                    if a.started
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some()
                    {
                        continue;
                    }
                    let _waiting = crate::phases::enter(crate::phases::Phase::PayloadWait);
                    a.done.wait(&mut st);
                }
            }
        }
    }

    /// Finishes a started payload if nobody has yet: waits for its chunks, marks it written
    /// (or failed: the pool is poisoned) and releases what its completion lets go. Its error if
    /// this thread finished it and it failed.
    pub(crate) fn finish_ahead(&self, a: &AheadPayload) -> Result<()> {
        let Some(started) = a.started.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(());
        };
        let _fail = crate::tbfs::poison::FailOnUnwind {
            inner: self,
            payload: a,
        };
        let written = started.and_then(|started| {
            started
                .into_iter()
                .try_for_each(PendingWrite::wait)
                .map_err(|e| self.payload_error(a, e))
        });
        self.logs.ahead_written(a.seq);
        a.finish(written.is_ok());
        self.advance_written();
        written
    }

    /// A payload write that failed: poisons the pool.
    pub(crate) fn payload_error(&self, a: &AheadPayload, e: std::io::Error) -> Error {
        let err = Error::io(
            format!(
                "{} device: writing the payload of log {} at block {}",
                self.dev().kind(),
                a.seq,
                a.start + 1
            ),
            e,
        );
        self.poison(&err);
        err
    }

    /// Waits until the ahead payloads below `seq` (of the inodes `inos` only, if given) are
    /// written, writing those nobody has taken on.
    pub(crate) fn wait_ahead(&self, seq: u64, inos: Option<&[u64]>) -> Result<bool> {
        let waiting = self.logs.ahead_below(seq, inos);
        for a in &waiting {
            self.write_ahead(a)?;
        }
        for a in &waiting {
            self.wait_payload(a)?;
        }
        self.check_not_poisoned()?;
        Ok(!waiting.is_empty())
    }

    /// Moves `written_seq` up to the first log not complete (summary and payload), and releases
    /// the buffers of the logs it passed.
    pub(crate) fn advance_written(&self) {
        let _releasing = crate::phases::enter(crate::phases::Phase::Release);
        let due = self.logs.take_due_releases();
        let mut spare = Vec::new();
        for (release, bytes) in due {
            for (cell, blocks) in release {
                let mut st = {
                    let _waiting = crate::phases::enter(crate::phases::Phase::InodeWait);
                    cell.lock()
                };
                self.drop_written(&mut st, &blocks, &mut spare);
            }
            self.release_in_flight(bytes);
        }
        crate::tbfs::blocks::recycle_blocks(spare);
    }

    /// Called when more than [`Engine::in_flight_max`] of sealed data is unwritten: writes the
    /// queued summaries and whole logs with the log writer, then, oldest first, the ahead
    /// payloads nobody has started while that is still so. Payloads their sealers are writing
    /// are not waited for: each sealer waits for its own, which bounds them, and waiting here
    /// would tie every writer's pace to the slowest payload in the device.
    pub(crate) fn wait_in_flight(&self) -> Result<()> {
        self.write_queued_until(u64::MAX, Superblocks::HandOff)?;
        for a in self.logs.ahead_below(u64::MAX, None) {
            if self.logs.in_flight() <= self.in_flight_max() {
                break;
            }
            // Nothing if its sealer (or anyone) has it; else written here, as its owner's I/O.
            self.write_ahead(&a)?;
        }
        self.check_not_poisoned()
    }

    /// A flush after ahead payloads: every log complete when it starts is durable after it.
    pub(crate) fn flush_ahead(&self) -> Result<()> {
        let complete = self.logs.written();
        self.logs.ahead_flushed();
        self.logs.flush_started();
        self.flush_counted("after a log", complete)
    }

    /// Flushes the device for a caller that counted itself in `flushes_running`; afterwards
    /// every log below `durable` is durable.
    pub(crate) fn flush_counted(&self, why: &str, durable: u64) -> Result<()> {
        let flushed = self
            .dev()
            .flush()
            .map_err(|e| Error::io(format!("{} device: flush {why}", self.dev().kind()), e))
            .inspect_err(|e| self.poison(e));
        self.end_flush();
        flushed?;
        self.count(|c| c.device_flushes += 1);
        self.logs.made_durable(durable);
        Ok(())
    }

    /// Leaves the queued logs (a direct write's summaries) to the background thread, which
    /// writes them as its own I/O while the writer goes on with its data (without a background
    /// thread, which only a failed thread start leaves, the writer writes them).
    /// Past [`BEHIND_BUFFERS`] buffers' worth of sealed data unwritten (the background
    /// thread's idle-class writes wait in `sched` behind busier classes, say), the writer
    /// writes with them, lending its priority, so the memory held stays bounded.
    pub(crate) fn write_logs_behind(&self) -> Result<()> {
        let most = self.config().dirty_bytes_max.saturating_mul(BEHIND_BUFFERS);
        if self.logs.in_flight() > most {
            return self.wait_in_flight();
        }
        let background = self.has_background();
        if background {
            self.wake_background(|w| w.logs = true);
            self.check_not_poisoned()
        } else {
            self.write_logs_until(u64::MAX)
        }
    }

    /// Takes the log writer (lending this thread's priority while it waits) and writes the
    /// queued logs below sequence `seq`.
    pub(crate) fn write_queued_until(&self, seq: u64, superblocks: Superblocks) -> Result<()> {
        loop {
            let stop = {
                let mut w = self.logs.lock_writer();
                let _hold = self.logs.inheritance().hold();
                let _writing = crate::tbfs::lending::HoldNoted::log_writer();
                self.write_queued(&mut w, seq)?
            };
            match stop {
                None => return Ok(()),
                Some(AtSuperblock) => match superblocks {
                    Superblocks::Write => {
                        #[cfg(test)]
                        self.stop_at_superblock_gate();
                        self.write_handed_off_superblocks()?;
                    }
                    Superblocks::HandOff => self.wake_background(|w| w.logs = true),
                },
            }
        }
    }

    /// Whether an ahead payload below sequence `seq` is not written yet.
    pub(crate) fn payloads_in_flight_below(&self, seq: u64) -> bool {
        self.logs.payloads_in_flight_below(seq)
    }

    /// Takes a superblock the log writer reached (`w` held): every summary before it is
    /// written; payloads may still be in flight, and its writer waits for them
    /// ([`Engine::write_handed_off_superblocks`]). Fills in the last log's CRC and says whether
    /// a flush must make those logs durable first (counted as running, so a flush under the
    /// log writer meanwhile does not take it for done): always, if payloads are in flight.
    pub(crate) fn take_superblock(
        &self,
        w: &mut LogWriter,
        mut sb: Superblock,
    ) -> Result<(Superblock, bool)> {
        self.check_not_poisoned()?;
        sb.next.prev_crc = w.prev_crc;
        let in_flight = self.payloads_in_flight_below(sb.next.sequence);
        let started = self.start_flush(w);
        if in_flight && !started {
            self.logs.flush_started();
        }
        Ok((sb, started || in_flight))
    }

    /// Writes a superblock taken by [`Engine::take_superblock`], without the log writer, with
    /// the superblock writer's lock held (`writing`): a flush
    /// makes the logs before it durable, then the superblock goes, flushed too. The logs after
    /// it are written meanwhile; a flush covers at least every write that completed before it
    /// began, so those before the superblock are covered.
    pub(crate) fn write_superblock_locked(
        &self,
        writing: &mut crate::tbfs::log::superblocks::Writing<'_>,
        mut sb: Superblock,
        flush_first: bool,
    ) -> Result<()> {
        self.finish_flush(flush_first, "before superblock", sb.next.sequence)?;
        self.check_not_poisoned()?;
        if writing.superseded(sb.generation) {
            // A later superblock, taken after this one, got here first: it supersedes it.
            return Ok(());
        }
        // Whichever thread gets here first writes it, often the background one: a read that
        // moved a stepped clock would shift every time the calls read after it by when that
        // thread ran.
        sb.written_ns = self.config().clock.peek_ns();
        let copy = sb.generation % 2;
        self.dev()
            .write_and_flush(copy * BLOCK_U64, &sb.encode()[..])
            .map_err(|e| {
                Error::io(
                    format!("{} device: writing superblock {copy}", self.dev().kind()),
                    e,
                )
            })
            .inspect_err(|e| self.poison(e))?;
        writing.written(sb.generation, sb.checkpoint_sequence);
        self.count(|c| {
            c.superblock_writes += 1;
            c.device_flushes += 1;
        });
        Ok(())
    }

    /// Writes one sealed log: payload first, then the summary that makes it a log.
    pub(crate) fn write_sealed(&self, w: &mut LogWriter, log: SealedLog) -> Result<()> {
        self.check_not_poisoned()?;
        let SealedLog {
            start,
            mut summary,
            payload,
            crcs,
            ahead,
            flush,
        } = log;
        let seq = summary.sequence;
        let fail = |what: String, e: std::io::Error| {
            let err = Error::io(format!("{} device: {what}", self.dev().kind()), e);
            self.poison(&err);
            err
        };
        // No flush before a flushed log, whatever earlier logs are not durable yet. Every
        // earlier summary completed before this write is issued (the log writer writes them in
        // order, one at a time), so this log's own flush makes them durable with it, and a power
        // cut before that flush returns leaves this log unacknowledged. An earlier payload still
        // in flight (another file's lane) is covered by no flush issued now, before or after:
        // every log with a payload carries the ahead flag, so recovery skips such a log and the
        // later logs of its files instead of ending the chain there, and a sync that depends on
        // it waits for it and flushes after (`write_own_logs`, `wait_sealed`).
        assert!(
            summary.flags & FLAG_AHEAD != 0 || summary.payload_blocks == 0,
            "log {seq} has a payload but not the ahead flag: a torn payload would end the chain"
        );
        if let Some(a) = ahead {
            // Only the summary: the payload is its sealer's to write (`write_ahead`).
            summary.prev_crc = w.prev_crc;
            summary.payload_crc = a.crc();
            w.buf.clear();
            w.buf.resize(BLOCK, 0);
            let summary_crc = summary.encode_into(&mut w.buf[..BLOCK]);
            self.dev()
                .write_at(start * BLOCK_U64, &w.buf[..BLOCK])
                .map_err(|e| {
                    fail(
                        format!("writing the summary of log {seq} at block {start}"),
                        e,
                    )
                })?;
            w.prev_crc = summary_crc;
            w.unflushed = true;
            self.logs.summary_written(seq);
            self.advance_written();
            return Ok(());
        }
        let complete = self.logs.written();
        let crc = crate::tbfs::log::payload_crc(&payload, &crcs);
        w.buf.clear();
        w.buf.resize(BLOCK, 0);
        let copies = self.dev().writes_are_copies();
        for (i, block) in payload.iter().enumerate() {
            if copies {
                let addr = start + 1 + i as u64;
                self.dev()
                    .write_at(addr * BLOCK_U64, &block[..])
                    .map_err(|e| fail(format!("writing block {addr} of log {seq}"), e))?;
            } else {
                w.buf.extend_from_slice(&block[..]);
            }
        }
        // The payload is on the device or staged. Metadata blocks (held by the log alone) are
        // kept for reuse now; file buffers' last holders are now their files, which release
        // them once the log is written (`advance_written`).
        crate::tbfs::blocks::recycle_blocks(payload);
        summary.prev_crc = w.prev_crc;
        summary.payload_crc = crc;
        let summary_crc = summary.encode_into(&mut w.buf[..BLOCK]);
        // In-place devices already hold the payload: the summary, written last, makes it a log.
        let bytes = if copies { &w.buf[..BLOCK] } else { &w.buf[..] };
        let offset = start * BLOCK_U64;
        let written = if flush {
            self.dev().write_and_flush(offset, bytes)
        } else {
            self.dev().write_at(offset, bytes)
        };
        written.map_err(|e| fail(format!("writing log {seq} at block {start}"), e))?;
        w.prev_crc = summary_crc;
        w.unflushed = !flush;
        self.logs.summary_written(seq);
        if flush {
            // Everything complete before the write is durable with it; ahead payloads of
            // earlier logs still in flight are not.
            let ahead_in_flight = complete < seq;
            if !ahead_in_flight {
                self.logs.ahead_flushed();
            }
            let durable = if ahead_in_flight { complete } else { seq + 1 };
            self.logs.made_durable(durable);
        }
        // Buffers go once their blocks are on the device (`advance_written`).
        self.advance_written();
        Ok(())
    }

    /// Flushes the device if a log was written since the last flush: every log so far is then
    /// durable.
    pub(crate) fn flush_logs(&self, m: &mut State, why: &str) -> Result<()> {
        // Every entry queued is below this while `meta` is held (superblocks included).
        self.flush_written(m.writer.seq, why)
    }

    /// Writes every log below `seq` and flushes the device: those logs are then durable.
    ///
    /// The flush runs without the log writer, so logs sealed meanwhile (an RT thread's data-only
    /// log) are written while it runs instead of waiting for it; a flush covers every write
    /// that completed before it started.
    pub(crate) fn flush_written(&self, seq: u64, why: &str) -> Result<()> {
        self.write_logs_until(seq + 1)?;
        let started = {
            let mut w = self.logs.lock_writer();
            self.start_flush(&mut w)
        };
        self.finish_flush(started, why, seq)
    }

    /// With the log writer held: whether a flush must run for the writes so far to be
    /// durable, counted as running if so (a flush under the log writer meanwhile then does not
    /// take the writes for flushed).
    pub(crate) fn start_flush(&self, w: &mut LogWriter) -> bool {
        let ahead = self.logs.take_ahead_unflushed();
        let needed = w.unflushed || ahead || self.logs.flushes_running();
        if needed {
            w.unflushed = false;
            self.logs.flush_started();
        }
        needed
    }

    /// Without the log writer: runs the flush [`Engine::start_flush`] counted, if any; after it
    /// every log below `durable` is durable.
    pub(crate) fn finish_flush(&self, started: bool, why: &str, durable: u64) -> Result<()> {
        if started {
            self.flush_counted(why, durable)
        } else {
            // Every write so far was covered by a flush that has ended.
            self.logs.made_durable(durable);
            Ok(())
        }
    }

    /// Whether a log sealed so far is not yet durable (written and flushed).
    pub(crate) fn logs_unflushed(&self, m: &State) -> bool {
        self.logs.durable() < m.writer.seq
            && (self.logs.written() < m.writer.seq
                || self.logs.ahead_unflushed()
                || self.logs.lock_writer().unflushed)
    }
}
