//! Writing what the log pipeline queued, where it meets the other parts: up to a sequence, with
//! the cleaner's copies told once their logs are written; superblocks taken from the queue and
//! handed to the superblock writer, and written from there; the bytes in flight a writer may
//! leave, from the budget. The rest of the log writer is `log/write.rs`, which names only the
//! pipeline.

use crate::tbfs::limits::BEHIND_BUFFERS;
use crate::tbfs::log::write::{AtSuperblock, Superblocks};
use crate::tbfs::log::{LogWriter, Queued};
use crate::tbfs::state::Engine;
use crate::tbfs::Result;

impl Engine {
    /// Writes every sealed log up to sequence `seq` (exclusive), in order, with the CRC chain;
    /// returns once they are written (by this thread or another). Takes no lock but the log
    /// writer's and the queue's, so it runs with or without `meta`. A failed write poisons the
    /// pool: the logs behind it are dropped and every caller gets the error.
    pub(crate) fn write_logs_until(&self, seq: u64) -> Result<()> {
        if self.logs.written() >= seq {
            // A superblock below `seq` was taken from the queue: written, or handed off.
            self.write_handed_off_superblocks()?;
            self.check_not_poisoned()?;
            // The cleaner's copies in those logs are on the device, once their payloads are.
            if !self.payloads_in_flight_below(seq) {
                self.copies.written_below(seq);
            }
            return Ok(());
        }
        self.write_queued_until(seq, Superblocks::Write)?;
        self.write_handed_off_superblocks()?;
        self.wait_ahead(seq, None)?;
        // The cleaner's copies in those logs are on the device now.
        self.copies.written_below(seq);
        Ok(())
    }

    /// Sealed bytes not yet written ((`LogPipeline::in_flight`)) above which a writer that buffers
    /// waits for the log writer ([`Engine::wait_in_flight`]), so the memory held stays bounded
    /// when writers outpace it: one write buffer when the log writer does device I/O;
    /// [`BEHIND_BUFFERS`] buffers in a memory pool, where it writes by copying memory, while
    /// space is not tight (`BufferBudget::tight`). At one buffer there, every buffer-full
    /// checkpoint sealed a whole buffer and so stopped every writer until the copy of it was
    /// done. Without the space condition, writers used space faster than the cleaner freed it,
    /// and could leave no room for the checkpoint (with the buffered data) a cleaning pass needs.
    pub(crate) fn in_flight_max(&self) -> u64 {
        let buffers = if self.dev().writes_are_copies() && !self.budget.tight() {
            BEHIND_BUFFERS
        } else {
            1
        };
        self.config().dirty_bytes_max.saturating_mul(buffers)
    }

    /// Writes the queued logs below sequence `seq` with the log writer held (`w`), whatever
    /// payloads are still in flight: no log waits for another's payload (a checkpoint counts
    /// only once they are complete, see `FLAG_AHEAD`). Stops at a superblock, which it takes
    /// from the queue for the caller to write once the log writer is released.
    pub(crate) fn write_queued(&self, w: &mut LogWriter, seq: u64) -> Result<Option<AtSuperblock>> {
        loop {
            // Up to `seq` only: later logs are their sealers' to wait for.
            let written = match self.logs.pop_below(seq) {
                None => break,
                Some(Queued::Log(mut log)) => {
                    // A later log of this run (no superblock between), written whole and flushed
                    // after by this thread, makes this one durable too: one flush for the run,
                    // not one each, so a real-time sync writing a lower class's logs on its way
                    // to its own pays for its own flush only. An ahead log's flush is its
                    // sealer's, after its payload.
                    if log.flush
                        && log.ahead.is_none()
                        && self.logs.flushed_whole_log_next_below(seq)
                    {
                        log.flush = false;
                    }
                    self.write_sealed(w, log)
                }
                Some(Queued::Superblock(sb)) => {
                    // Put with the handed-off superblocks before the log writer is let go: a
                    // thread that then finds it gone from the queue writes it, or waits for the
                    // one writing it (`write_handed_off_superblocks` writes under the
                    // superblock writer's lock), instead of taking it for written.
                    let (sb, flush_first) = self.take_superblock(w, sb)?;
                    self.superblocks.hand_off(sb, flush_first);
                    return Ok(Some(AtSuperblock));
                }
            };
            if let Err(e) = written {
                self.logs.clear_queue();
                return Err(e);
            }
        }
        self.check_not_poisoned().map(|()| None)
    }

    /// Tests: stops a thread that took a superblock from the queue, after it let the log writer
    /// go and before it writes the superblock, while a gate is set
    /// (`SuperblockWriter::set_gate`): it says so on the gate's first channel and goes on when
    /// told on the second.
    #[cfg(test)]
    pub(crate) fn stop_at_superblock_gate(&self) {
        if let Some((taken, go_on)) = self.superblocks.take_gate() {
            let _ = taken.send(());
            let _ = go_on.recv();
        }
    }

    /// Writes the superblocks taken from the queue and not yet written (by a thread writing the
    /// queue, or passed by one on its way to its own logs), oldest first. Taken under the
    /// superblock writer's lock, so a thread finding the list empty while another writes what
    /// it took waits for that write.
    pub(crate) fn write_handed_off_superblocks(&self) -> Result<()> {
        let (mut writing, taken) = self.superblocks.take_handed_off();
        let mut result = Ok(());
        for (sb, flush_first) in taken {
            // Each one counted a flush as running: each ends it, even after an error.
            let written = if result.is_ok() {
                // A superblock names a checkpoint, which counts only once every payload before
                // it is complete: the payloads still in flight are waited for here, by the
                // thread writing superblocks, not by the writers of later logs.
                match self.wait_ahead(sb.next.sequence, None) {
                    Ok(_) => self.write_superblock_locked(&mut writing, sb, flush_first),
                    Err(e) => {
                        if flush_first {
                            self.end_flush();
                        }
                        Err(e)
                    }
                }
            } else if flush_first {
                self.end_flush();
                Ok(())
            } else {
                Ok(())
            };
            result = result.and(written);
        }
        result
    }
}
