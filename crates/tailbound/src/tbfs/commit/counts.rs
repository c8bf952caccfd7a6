//! Releasing counts that other parts keep and that must not go below zero: the log pipeline's
//! bytes in flight and running flushes, the budget's buffered bytes. A release past zero is a
//! bug and poisons the pool (`Engine::poison_bug`), so these join a part to the poison.

use crate::tbfs::state::Engine;

impl Engine {
    /// `bytes` of sealed data are written: they leave the bytes in flight
    /// (`LogPipeline::in_flight`). More than are counted poisons the pool, and the count is
    /// left as it was.
    pub(crate) fn release_in_flight(&self, bytes: u64) {
        if let Err(held) = self.logs.release_in_flight(bytes) {
            self.poison_bug(format!(
                "{bytes} bytes in flight released of the {held} counted"
            ));
        }
    }

    /// A device flush counted as running ended. One ending more than were counted poisons the
    /// pool, and the count is left at zero.
    pub(crate) fn end_flush(&self) {
        if self.logs.flush_ended().is_err() {
            self.poison_bug("a device flush ended that was not counted as running".into());
        }
    }

    /// `bytes` of buffered data left memory (written, dropped or freed): they leave
    /// the buffered bytes. More than are counted poisons the pool, and the count is left as it was.
    pub(crate) fn release_dirty_bytes(&self, bytes: u64) {
        if let Err(held) = self.budget.release(bytes) {
            self.poison_bug(format!(
                "{bytes} buffered bytes released of the {held} counted"
            ));
        }
    }
}
