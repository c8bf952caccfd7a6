//! The cleaner's bookkeeping under `meta`: whether a cleaning pass runs, how many ran, and what
//! the space check running may take from the reserve on a pass's or a checkpoint's behalf.
//! Changed only through [`Cleaning`]'s methods.

use std::sync::Mutex;

use crate::tbfs::limits::AGE_SIGNAL_SPREAD;
use crate::tbfs::space::copies_debt::CopiesDebt;

/// How many of victim choice's recent findings the averaged age spread weighs
/// ([`Cleaning::note_age_spread`]).
const AGE_SPREAD_WEIGHT: f64 = 16.0;

/// Whether a spread of segment ages tells short-lived data from long-lived (above
/// [`AGE_SIGNAL_SPREAD`]): the one mark victim choice and the cleaner's log head both go by.
pub(crate) fn spread_is_signal(spread: f64) -> bool {
    spread > AGE_SIGNAL_SPREAD
}

/// Whether cleaning runs, and what the space check it or a checkpoint runs may use.
#[derive(Debug, Default)]
pub(crate) struct Cleaning {
    /// The cleaner is running (no nested cleaning from `ensure_space`).
    running: bool,
    /// The space check about to run is a checkpoint's, before it writes anything (which keeps
    /// only `Engine::checkpoint_floor`, since it pays the debt), with the inode pages and
    /// inode-file map nodes it writes. Taken by that check, so what it runs (cleaning passes,
    /// nested checkpoints) sets its own.
    checkpoint_check: Option<u64>,
    /// Blocks of whole segments the running pass makes reusable (its victims), while the space
    /// check of its copies or of its checkpoint runs: that check may leave that much less of
    /// the room the invariant keeps (`Engine::ensure_space`).
    gain: u64,
    /// The space check about to run is for a light pass's copies, which keep room for the
    /// checkpoint they add to (`Engine::copies_floor`). Taken by that check.
    copies_check: bool,
    /// Cleaning passes so far: a checkpoint whose space check cleaned starts over, since a pass
    /// changes maps and marks blocks it must write.
    passes: u64,
    /// A pass is copying live blocks: the logs closed meanwhile carry the cleaner's output, not
    /// the host's (counted apart per segment, `SegmentTable::note_data`).
    copying: bool,
    /// The space check about to run is for sealing the buffered data. Taken by that check.
    buffer_check: bool,
    /// The room a buffer seal's space check asked for, when that check runs the cleaning
    /// running (0 otherwise): what the cleaner seals of the buffer before its passes is what
    /// the check asked room for, up to this much.
    for_buffer: u64,
    /// Blocks the cleaner's seal of the buffer before its passes took, up to `for_buffer`.
    sealed_first: u64,
    /// The spread of segment ages victim choice found (`Engine::choose_victims`), averaged
    /// over its recent choices: one choice among few or odd candidates may find none where
    /// lifetimes do differ. `None` until a choice had two candidates to tell.
    age_spread: Option<f64>,
    /// What copies may add to the next checkpoint, counted once after each checkpoint (by its
    /// number): until the next one a map grows only by writes, which dirty what they add, so
    /// the count stays a bound.
    copies_debt: Mutex<Option<(u64, CopiesDebt)>>,
}

impl Cleaning {
    /// The bound of what copies add to the next checkpoint counted since checkpoint `newest`.
    pub(crate) fn copies_debt_since(&self, newest: u64) -> Option<CopiesDebt> {
        let kept = *self.copies_debt.lock().unwrap_or_else(|p| p.into_inner());
        kept.and_then(|(at, d)| (at == newest).then_some(d))
    }

    /// Keeps `debt`, counted since checkpoint `newest`.
    pub(crate) fn keep_copies_debt(&self, newest: u64, debt: CopiesDebt) {
        *self.copies_debt.lock().unwrap_or_else(|p| p.into_inner()) = Some((newest, debt));
    }

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

    /// Whether a pass is copying live blocks.
    pub(crate) fn copying(&self) -> bool {
        self.copying
    }

    /// A pass starts (`true`) or ends copying live blocks.
    pub(crate) fn set_copying(&mut self, copying: bool) {
        assert!(
            self.running || !copying,
            "a cleaning pass's copies outside cleaning"
        );
        self.copying = copying;
    }

    /// The next space check is for sealing the buffered data.
    pub(crate) fn buffer_seal_checks_space(&mut self) {
        self.buffer_check = true;
    }

    /// Whether the space check starting is for sealing the buffered data; cleared for what it
    /// runs.
    pub(crate) fn take_buffer_check(&mut self) -> bool {
        std::mem::take(&mut self.buffer_check)
    }

    /// The cleaning about to start is a buffer seal's that asked room for `need` blocks (0: it
    /// is not a buffer seal's); `sealed_first` starts again from nothing.
    pub(crate) fn set_for_buffer(&mut self, need: u64) {
        assert!(
            !self.running,
            "a buffer seal's cleaning set inside cleaning"
        );
        self.for_buffer = need;
        self.sealed_first = 0;
    }

    /// The cleaner sealed the buffer before its passes, taking `blocks`; returns what of them
    /// the buffer seal whose space check runs this cleaning asked room for (none if no buffer
    /// seal's did).
    pub(crate) fn note_sealed_first(&mut self, blocks: u64) -> u64 {
        assert!(self.running, "a buffer sealed first outside cleaning");
        let counted = blocks.min(self.for_buffer - self.sealed_first);
        self.sealed_first += counted;
        counted
    }

    /// The blocks the cleaner's seal of the buffer took for the buffer seal whose space check
    /// ran it, at most the room it asked for; that cleaning is over.
    pub(crate) fn take_sealed_first(&mut self) -> u64 {
        self.for_buffer = 0;
        std::mem::take(&mut self.sealed_first)
    }

    /// Victim choice found `spread` among its candidates (`None`: too few to tell, which
    /// changes nothing).
    pub(crate) fn note_age_spread(&mut self, spread: Option<f64>) {
        if let Some(d) = spread {
            self.age_spread = Some(match self.age_spread {
                Some(avg) => avg + (d - avg) / AGE_SPREAD_WEIGHT,
                None => d,
            });
        }
    }

    /// Whether segment ages, as victim choice has recently found them, tell short-lived data
    /// from long-lived (above [`AGE_SIGNAL_SPREAD`]): then a light pass's copies, old data,
    /// are worth a log head apart from the writers' new data (`Engine::copy_head_room`).
    pub(crate) fn ages_differ(&self) -> bool {
        self.age_spread.is_some_and(spread_is_signal)
    }

    /// The next space check is a checkpoint's, which writes `inode_pages` inode pages and
    /// inode-file map nodes.
    pub(crate) fn checkpoint_checks_space(&mut self, inode_pages: u64) {
        self.checkpoint_check = Some(inode_pages);
    }

    /// The inode pages the checkpoint whose space check is starting writes, if it is a
    /// checkpoint's; cleared for what it runs.
    pub(crate) fn take_checkpoint_check(&mut self) -> Option<u64> {
        self.checkpoint_check.take()
    }

    /// Blocks of whole segments the checkpoint of the running pass makes reusable.
    pub(crate) fn gain(&self) -> u64 {
        self.gain
    }

    /// A pass's space check starts (`gain` blocks of victims it empties) or ends (0); only a
    /// running pass has one.
    pub(crate) fn set_gain(&mut self, gain: u64) {
        assert!(
            self.running || gain == 0,
            "a cleaning pass's gain set outside cleaning"
        );
        self.gain = gain;
    }

    /// The next space check is for a light pass's copies; only a running pass makes them.
    pub(crate) fn copies_check_space(&mut self) {
        assert!(self.running, "a light pass's copies outside cleaning");
        self.copies_check = true;
    }

    /// Whether the space check starting is for a light pass's copies; cleared for what it runs.
    pub(crate) fn take_copies_check(&mut self) -> bool {
        std::mem::take(&mut self.copies_check)
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
        c.set_copying(true);
        assert!(c.copying());
        c.set_copying(false);
        c.end();
        c.checkpoint_checks_space(3);
        assert_eq!(c.take_checkpoint_check(), Some(3));
        assert_eq!(c.take_checkpoint_check(), None);
    }

    #[test]
    fn the_age_signal_is_an_average_of_the_choices_that_could_tell() {
        let mut c = Cleaning::default();
        assert!(!c.ages_differ(), "nothing found yet");
        c.note_age_spread(Some(2.0));
        assert!(c.ages_differ());
        c.note_age_spread(None);
        assert!(
            c.ages_differ(),
            "a choice that could not tell changes nothing"
        );
        // One choice finding no spread does not turn the signal off ...
        c.note_age_spread(Some(0.0));
        assert!(c.ages_differ());
        // ... a run of them does.
        for _ in 0..16 {
            c.note_age_spread(Some(0.0));
        }
        assert!(!c.ages_differ());
    }

    #[test]
    fn a_buffer_sealed_first_counts_for_the_buffer_seal_that_cleaned_only() {
        let mut c = Cleaning::default();
        c.buffer_seal_checks_space();
        assert!(c.take_buffer_check());
        assert!(!c.take_buffer_check(), "taken once");
        c.set_for_buffer(50);
        c.start();
        assert_eq!(c.note_sealed_first(40), 40);
        assert_eq!(
            c.note_sealed_first(30),
            10,
            "no more than the seal asked room for"
        );
        c.end();
        assert_eq!(c.take_sealed_first(), 50);
        assert_eq!(c.take_sealed_first(), 0, "taken once");
        c.set_for_buffer(0);
        c.start();
        assert_eq!(c.note_sealed_first(7), 0, "another check's cleaning");
        c.end();
        assert_eq!(c.take_sealed_first(), 0);
    }

    #[test]
    #[should_panic(expected = "outside cleaning")]
    fn a_buffer_sealed_first_outside_cleaning_is_caught() {
        Cleaning::default().note_sealed_first(1);
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
