//! The cleaning tax: while the pool needs cleaning, every writer admitted owes cleaning in
//! proportion to the blocks it writes, at the current rate (copies per block written), and pays
//! it in small pieces on its own thread ([`crate::tbfs::state::Engine`]'s `pay_cleaning_tax`).
//! So each tenant's time lost to cleaning follows what it writes, instead of falling on
//! whichever writer found room short. What is owed, by writer, lives here; it is changed only
//! under `meta`.

use crate::tbfs::admission::WriterKey;

/// Copies owed, by writer, in blocks, and what a piece has copied lately.
#[derive(Debug, Default)]
pub(crate) struct CleaningTax {
    /// A handful of tenants: a list beats a map. Below nothing: a writer whose last piece
    /// copied more than it owed has that much to its credit, up to a piece.
    owed: Vec<(WriterKey, f64)>,
    /// The blocks a piece copied, averaged over the recent ones (`None` before the first):
    /// the victim a pass picks is not always the emptiest, so the rate follows what pieces do.
    piece: Option<f64>,
    /// The pool needs cleaning: a write's space check found less free than the low-water mark
    /// wants, and none since found the band above it free.
    needed: bool,
    /// How much the rate is raised, averaged over the recent admissions (`None` before the
    /// first): raised by how deep each admission found free space, the one after another
    /// tenant's would pay more for the same blocks.
    raise: Option<f64>,
}

/// The weight of the newest admission in the average raise.
const RAISE_WEIGHT: f64 = 0.05;

/// The weight of the newest piece in the average of what pieces copy.
const PIECE_WEIGHT: f64 = 0.25;

impl CleaningTax {
    fn slot(&mut self, key: WriterKey) -> &mut f64 {
        let at = match self.owed.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.owed.push((key, 0.0));
                self.owed.len() - 1
            }
        };
        &mut self.owed[at].1
    }

    /// An admission found free space calling for the rate raised `raise` times: returns the
    /// raise averaged over the recent admissions, which is what it pays.
    pub(crate) fn raise(&mut self, raise: f64) -> f64 {
        let r = match self.raise {
            Some(r) => r + RAISE_WEIGHT * (raise - r),
            None => raise,
        };
        self.raise = Some(r);
        r
    }

    /// Whether the pool needs cleaning (see `needed`).
    pub(crate) fn needed(&self) -> bool {
        self.needed
    }

    pub(crate) fn set_needed(&mut self, needed: bool) {
        self.needed = needed;
    }

    /// `key` is admitted to write `blocks` while cleaning copies `rate` blocks per block
    /// written; returns what it owes now.
    pub(crate) fn accrue(&mut self, key: WriterKey, blocks: u64, rate: f64) -> f64 {
        assert!(
            rate.is_finite() && rate >= 0.0,
            "a cleaning rate of {rate} copies per block"
        );
        let owed = self.slot(key);
        *owed += blocks as f64 * rate;
        *owed
    }

    /// What `key` owes.
    pub(crate) fn owed(&self, key: WriterKey) -> f64 {
        self.owed
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0.0, |(_, o)| *o)
    }

    /// `key` copied `blocks` on its own thread, in a piece: that much less is owed, down to a
    /// credit of at most the piece's average (so no writer pays far ahead of the others).
    pub(crate) fn paid(&mut self, key: WriterKey, blocks: u64) {
        let piece = match self.piece {
            Some(p) => p + PIECE_WEIGHT * (blocks as f64 - p),
            None => blocks as f64,
        };
        self.piece = Some(piece);
        let owed = self.slot(key);
        *owed = (*owed - blocks as f64).max(-piece);
    }

    /// The blocks a piece copied lately, if any piece copied yet.
    pub(crate) fn piece(&self) -> Option<f64> {
        self.piece
    }

    /// Nothing is left to clean: what `key` owes is dropped, since no piece could pay it.
    pub(crate) fn forgive(&mut self, key: WriterKey) {
        *self.slot(key) = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::CleaningTax;
    use crate::tbfs::admission::WriterKey;

    const A: WriterKey = WriterKey::Tenant(0);
    const B: WriterKey = WriterKey::Tenant(1);

    #[test]
    fn each_writer_owes_by_its_own_blocks_and_pays_down_to_nothing() {
        let mut t = CleaningTax::default();
        assert_eq!(t.accrue(A, 200, 0.5), 100.0);
        assert_eq!(t.accrue(B, 100, 0.5), 50.0);
        assert_eq!(t.accrue(A, 100, 1.0), 200.0);
        t.paid(A, 150);
        assert_eq!(t.owed(A), 50.0);
        assert_eq!(t.piece(), Some(150.0));
        t.paid(A, 70);
        assert_eq!(
            t.piece(),
            Some(130.0),
            "the average moves a quarter of the way"
        );
        assert_eq!(
            t.owed(A),
            -20.0,
            "a piece larger than the debt leaves a credit"
        );
        t.paid(A, 310);
        assert_eq!(t.piece(), Some(175.0));
        assert_eq!(t.owed(A), -175.0, "a credit of at most a piece");
        assert_eq!(t.owed(B), 50.0, "B's debt is its own");
        t.forgive(B);
        assert_eq!(t.owed(B), 0.0);
    }

    #[test]
    #[should_panic(expected = "a cleaning rate of")]
    fn a_rate_that_is_not_a_number_is_caught() {
        CleaningTax::default().accrue(A, 1, f64::NAN);
    }
}
