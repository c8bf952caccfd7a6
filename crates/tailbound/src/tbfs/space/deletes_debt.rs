//! The debt deletes and truncates add without a space check, while a snapshot or a view keeps
//! what they drop: the pinned-table pages of the blocks they pin, the directories they change
//! and a truncated file's map and kept tail block. They never answer `NoSpace`, so the room
//! check cannot refuse them; instead what they add since the whole debt was last counted (by a
//! space check that kept room beyond it, or a checkpoint that paid it) is charged against an
//! allowance the room keeps (`Engine::deletes_reserve`), and a change that takes the charge
//! past it pays the debt with a checkpoint (`Engine::settle_deletes_debt`).

/// What deletes and truncates added to the checkpoint debt since it was last counted whole.
/// The added debt is read from a probe the orchestration takes of the parts (`probe`: the
/// pinned-table pages marked and the dirty directories' bound), plus what a truncate charges
/// itself (its map nodes and tail block, which no total holds).
#[derive(Debug, Default)]
pub(crate) struct DeletesDebt {
    /// The probe's value when the debt was last counted whole.
    counted_at: u64,
    /// Blocks charged outside the probe since then.
    extra: u64,
    /// A change took the charge past the allowance and its checkpoint found no room since
    /// then: the bound the room keeps may not hold until the debt is counted again.
    unpaid: bool,
    /// Inode pages deletes, truncates, replacing renames and directory removals may have
    /// dirtied since then, with nothing keeping what they drop (`Engine::deletes_pages_due`).
    pages: u64,
}

impl DeletesDebt {
    /// A space check kept the allowance beyond the whole debt, or a checkpoint paid it, with
    /// the probe at `probe`: nothing is charged any more.
    pub(crate) fn counted(&mut self, probe: u64) {
        self.counted_at = probe;
        self.extra = 0;
        self.unpaid = false;
        self.pages = 0;
    }

    /// A change about to be made may dirty `pages` inode pages.
    pub(crate) fn charge_pages(&mut self, pages: u64) {
        self.pages += pages;
    }

    /// Inode pages charged since the debt was last counted.
    pub(crate) fn pages_charged(&self) -> u64 {
        self.pages
    }

    /// A truncate added `blocks` the probe does not see.
    pub(crate) fn charge(&mut self, blocks: u64) {
        self.extra += blocks;
    }

    /// Blocks charged since the debt was last counted, with the probe now at `probe`.
    pub(crate) fn charged(&self, probe: u64) -> u64 {
        probe.saturating_sub(self.counted_at) + self.extra
    }

    /// The checkpoint that was to pay the charge past the allowance found no room.
    pub(crate) fn left_unpaid(&mut self) {
        self.unpaid = true;
    }

    /// Whether every charge past the allowance since the debt was last counted was paid.
    pub(crate) fn within_bound(&self) -> bool {
        !self.unpaid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_run_from_the_last_count() {
        let mut d = DeletesDebt::default();
        d.counted(10);
        assert_eq!(d.charged(10), 0);
        assert_eq!(d.charged(25), 15);
        d.charge(3);
        assert_eq!(d.charged(25), 18);
        assert_eq!(
            d.charged(4),
            3,
            "a probe below the count charges nothing of it"
        );
        assert!(d.within_bound());
        d.left_unpaid();
        assert!(!d.within_bound());
        d.charge_pages(2);
        d.charge_pages(3);
        assert_eq!(d.pages_charged(), 5);
        d.counted(25);
        assert_eq!(d.charged(25), 0);
        assert_eq!(d.pages_charged(), 0, "a count clears the pages' charge");
        assert!(d.within_bound());
    }
}
