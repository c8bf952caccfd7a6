//! How often a file's blocks are overwritten: a hint the cleaner routes its copies by
//! (docs/ARCHITECTURE.md, "Copies by their file's write rate"). Time is counted in host blocks
//! written (`SegmentTable::host_clock`), as segment ages are for host writes, so no wall clock
//! is read. Kept in memory only: a fresh mount knows no file's rate until the file is written.

/// A file's overwrites over a span of host writes; the span is halved with the count once it
/// grows past a window, so the estimate follows a file whose rate changes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteRate {
    /// The host clock where the count starts; `None` until a log first holds the file's data.
    since: Option<u64>,
    /// The file's blocks whose mapped version a newer one replaced since `since`.
    overwrites: u64,
}

impl WriteRate {
    /// A log took `overwrites` of the file's blocks that replaced mapped versions (and maybe
    /// first writes too) at host clock `now`. A span past `window` host blocks is halved, with
    /// its count, before these are added.
    pub fn note(&mut self, now: u64, overwrites: u64, window: u64) {
        let since = *self.since.get_or_insert(now);
        let span = now.saturating_sub(since);
        if span > window.max(1) {
            self.since = Some(now - span / 2);
            self.overwrites /= 2;
        }
        self.overwrites = self.overwrites.saturating_add(overwrites);
    }

    /// Whether a log has held the file's data since the mount, so the rate says something.
    pub fn known(&self) -> bool {
        self.since.is_some()
    }

    /// Whether each of the file's `blocks` blocks, overwritten at this rate, lives less than
    /// `than` host blocks, as of host clock `now`: `blocks · span / overwrites < than`. A file
    /// never overwritten lives long.
    pub fn lives_less_than(&self, now: u64, blocks: u64, than: u64) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        let span = now.saturating_sub(since);
        self.overwrites > 0
            && u128::from(blocks) * u128::from(span)
                < u128::from(than) * u128::from(self.overwrites)
    }
}

#[cfg(test)]
mod tests {
    use super::WriteRate;

    #[test]
    fn a_file_overwritten_often_lives_short_and_one_never_overwritten_long() {
        let mut hot = WriteRate::default();
        let mut cold = WriteRate::default();
        assert!(!hot.known() && !hot.lives_less_than(100, 10, 1_000));
        hot.note(0, 0, 1 << 20);
        cold.note(0, 0, 1 << 20);
        assert!(hot.known() && cold.known());
        // Ten blocks, a hundred overwrites in a thousand host blocks: each lives about 100.
        hot.note(1_000, 100, 1 << 20);
        assert!(hot.lives_less_than(1_000, 10, 101));
        assert!(!hot.lives_less_than(1_000, 10, 100));
        assert!(!cold.lives_less_than(1_000, 10, u64::MAX));
    }

    #[test]
    fn past_the_window_the_span_and_count_are_halved_so_a_file_that_cooled_turns_long_lived() {
        let mut r = WriteRate::default();
        r.note(0, 0, 1_000);
        r.note(1_000, 1_000, 1_000);
        assert!(r.lives_less_than(1_000, 10, 11));
        // Quiet for a while: each note past the window halves what it knew.
        r.note(3_000, 0, 1_000);
        assert_eq!(r.overwrites, 500);
        assert_eq!(r.since, Some(1_500));
        r.note(6_000, 0, 1_000);
        assert_eq!((r.overwrites, r.since), (250, Some(3_750)));
        // 10 blocks · 2,250 / 250 = 90 host blocks each.
        assert!(!r.lives_less_than(6_000, 10, 90));
        assert!(r.lives_less_than(6_000, 10, 91));
    }
}
