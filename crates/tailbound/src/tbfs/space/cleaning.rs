//! The cleaner's bookkeeping under `meta`: whether a cleaning pass runs, how many ran, and what
//! the space check running may take from the reserve on a pass's or a checkpoint's behalf.
//! Changed only through [`Cleaning`]'s methods.

/// Whether cleaning runs, and what the space check it or a checkpoint runs may use.
#[derive(Debug, Default)]
pub(crate) struct Cleaning {
    /// The cleaner is running (no nested cleaning from `ensure_space`).
    running: bool,
    /// The space check about to run is a checkpoint's, before it writes anything (which may use
    /// the reserve its dropped blocks give back, `Checkpoints::dropped`). Taken by that check,
    /// so what it runs (cleaning passes, nested checkpoints) sets its own.
    checkpoint_check: bool,
    /// Blocks a light cleaning pass's victims give back beyond its copies, while its space
    /// check runs: the copies may use that much of the reserve.
    gain: u64,
    /// Cleaning passes so far: a checkpoint whose space check cleaned starts over, since a pass
    /// changes maps and marks blocks it must write.
    passes: u64,
}

impl Cleaning {
    /// Whether cleaning runs.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// Cleaning starts (or a checkpoint that must not clean again runs); it never nests.
    pub(crate) fn start(&mut self) {
        assert!(!self.running, "cleaning started inside cleaning");
        self.running = true;
    }

    /// Cleaning ends.
    pub(crate) fn end(&mut self) {
        assert!(self.running, "cleaning ended that never started");
        self.running = false;
    }

    /// Cleaning passes so far.
    pub(crate) fn passes(&self) -> u64 {
        self.passes
    }

    /// A cleaning pass starts.
    pub(crate) fn pass_started(&mut self) {
        debug_assert!(self.running, "a cleaning pass outside cleaning");
        self.passes = self
            .passes
            .checked_add(1)
            .expect("cleaning pass count overflow");
    }

    /// The next space check is a checkpoint's.
    pub(crate) fn checkpoint_checks_space(&mut self) {
        self.checkpoint_check = true;
    }

    /// Whether the space check starting is a checkpoint's; cleared for what it runs.
    pub(crate) fn take_checkpoint_check(&mut self) -> bool {
        std::mem::take(&mut self.checkpoint_check)
    }

    /// What a light pass's copies may use of the reserve.
    pub(crate) fn gain(&self) -> u64 {
        self.gain
    }

    /// A light pass's space check starts (`gain` blocks its victims give back beyond its
    /// copies) or ends (0); only a running pass has one.
    pub(crate) fn set_gain(&mut self, gain: u64) {
        assert!(
            self.running || gain == 0,
            "a light pass's gain set outside cleaning"
        );
        self.gain = gain;
    }
}

#[cfg(test)]
mod tests {
    use super::Cleaning;

    #[test]
    fn passes_count_and_a_checkpoint_check_is_taken_once() {
        let mut c = Cleaning::default();
        c.start();
        c.pass_started();
        c.set_gain(12);
        assert_eq!((c.running(), c.passes(), c.gain()), (true, 1, 12));
        c.set_gain(0);
        c.end();
        c.checkpoint_checks_space();
        assert!(c.take_checkpoint_check());
        assert!(!c.take_checkpoint_check());
    }

    #[test]
    #[should_panic(expected = "inside cleaning")]
    fn nested_cleaning_is_caught() {
        let mut c = Cleaning::default();
        c.start();
        c.start();
    }

    #[test]
    #[should_panic(expected = "never started")]
    fn cleaning_ending_twice_is_caught() {
        let mut c = Cleaning::default();
        c.start();
        c.end();
        c.end();
    }

    #[test]
    #[should_panic(expected = "outside cleaning")]
    fn a_gain_outside_cleaning_is_caught() {
        Cleaning::default().set_gain(3);
    }
}
