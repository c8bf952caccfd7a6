//! The superblock writer's state: superblocks taken from the log queue and not yet written, the
//! newest generation written, and the checkpoint the newest durable superblock names. Changed
//! only through [`SuperblockWriter`]'s methods; the writing itself is `log::write`'s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::tbfs::format::Superblock;

/// Rules: superblocks reach the device in generation order (an older one found after a newer
/// is left out), and the checkpoint sequence a durable superblock names only rises, but for
/// recovery's reset.
#[derive(Debug, Default)]
pub(crate) struct SuperblockWriter {
    /// The checkpoint sequence the newest durable superblock names: segments that died before
    /// it are reusable.
    checkpoint_seq: AtomicU64,
    /// Taken by whoever writes a superblock (without the log writer), with the newest
    /// generation written.
    newest: Mutex<u64>,
    /// Superblocks taken from the queue and not yet written, with whether a flush must go
    /// first: put here under the log writer by whoever takes one, then written by that thread
    /// ([`crate::tbfs::log::write::Superblocks::Write`]), or left to the background thread by a
    /// thread on its way to its own logs, or written by whichever thread calls
    /// `Engine::write_handed_off_superblocks` first.
    handoff: Mutex<Vec<(Superblock, bool)>>,
    /// Tests: stops the next thread that takes a superblock to write it, between letting the
    /// log writer go and writing it.
    #[cfg(test)]
    taken_gate: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
}

/// The superblock writer's lock, held while superblocks are written.
pub(crate) struct Writing<'a> {
    newest: MutexGuard<'a, u64>,
    checkpoint_seq: &'a AtomicU64,
}

impl SuperblockWriter {
    /// The checkpoint sequence the newest durable superblock names.
    pub(crate) fn checkpoint_seq(&self) -> u64 {
        self.checkpoint_seq.load(Ordering::Acquire)
    }

    /// Recovery: the durable superblock names checkpoint `seq` (0 while recovery rewrites the
    /// tail: nothing before it is settled until the recovery superblock is durable).
    pub(crate) fn recovered(&self, seq: u64) {
        self.checkpoint_seq.store(seq, Ordering::Release);
    }

    /// A superblock taken from the queue waits to be written (`flush_first`: a flush, counted
    /// as running, must go before it).
    pub(crate) fn hand_off(&self, sb: Superblock, flush_first: bool) {
        self.handoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((sb, flush_first));
    }

    /// Takes the superblock writer's lock, then every superblock handed off, oldest first: a
    /// thread finding the list empty while another writes what it took waits for that write.
    pub(crate) fn take_handed_off(&self) -> (Writing<'_>, Vec<(Superblock, bool)>) {
        let newest = self.newest.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken =
            std::mem::take(&mut *self.handoff.lock().unwrap_or_else(|p| p.into_inner()));
        taken.sort_by_key(|(sb, _)| sb.generation);
        let writing = Writing {
            newest,
            checkpoint_seq: &self.checkpoint_seq,
        };
        (writing, taken)
    }

    /// Tests: sets the gate [`SuperblockWriter::take_gate`] stops at.
    #[cfg(test)]
    pub(crate) fn set_gate(
        &self,
        gate: (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>),
    ) {
        *self.taken_gate.lock().unwrap_or_else(|p| p.into_inner()) = Some(gate);
    }

    /// Tests: the gate set for the next thread that takes a superblock, if any.
    #[cfg(test)]
    pub(crate) fn take_gate(
        &self,
    ) -> Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)> {
        self.taken_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Writing<'_> {
    /// Whether a superblock of `generation` is superseded: a later one, taken after it, was
    /// written first.
    pub(crate) fn superseded(&self, generation: u64) -> bool {
        *self.newest >= generation
    }

    /// A superblock of `generation` naming checkpoint `checkpoint_seq` is durable.
    pub(crate) fn written(&mut self, generation: u64, checkpoint_seq: u64) {
        assert!(
            generation > *self.newest,
            "superblock {generation} written after {}",
            *self.newest
        );
        *self.newest = generation;
        self.checkpoint_seq
            .fetch_max(checkpoint_seq, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::SuperblockWriter;

    #[test]
    fn a_written_superblock_supersedes_older_ones_and_raises_the_settled_checkpoint() {
        let w = SuperblockWriter::default();
        let (mut writing, taken) = w.take_handed_off();
        assert!(taken.is_empty());
        writing.written(3, 40);
        assert!(writing.superseded(2) && writing.superseded(3) && !writing.superseded(4));
        writing.written(4, 30);
        drop(writing);
        assert_eq!(w.checkpoint_seq(), 40, "it only rises");
    }

    #[test]
    #[should_panic(expected = "superblock 2 written after 3")]
    fn a_superblock_written_out_of_generation_order_is_caught() {
        let w = SuperblockWriter::default();
        let (mut writing, _) = w.take_handed_off();
        writing.written(3, 1);
        writing.written(2, 1);
    }
}
