//! The superblock's bookkeeping: the newest generation sealed, what was logged since, when a
//! refresh is due, and whether one is running. Changed only through [`Refresh`]'s methods, under
//! the `meta` lock.

use std::time::Duration;

/// When the next superblock refresh is due, and what the last superblock sealed.
#[derive(Debug, Default)]
pub(crate) struct Refresh {
    /// Generation of the newest superblock sealed (or read at open).
    generation: u64,
    /// Bytes of logs laid out since that superblock was sealed.
    bytes_since: u64,
    /// When it was sealed, by the pool's clock (ns); `None` until one is sealed in this
    /// process.
    sealed_at_ns: Option<i64>,
    /// When the pool was made: every superblock records it.
    created_ns: i64,
    /// A superblock refresh is running (its checkpoint may use the space reserve).
    running: bool,
}

impl Refresh {
    /// The bookkeeping of a pool whose newest superblock has `generation`.
    pub(crate) fn new(generation: u64, created_ns: i64) -> Refresh {
        Refresh {
            generation,
            created_ns,
            ..Refresh::default()
        }
    }

    /// The generation the next superblock gets.
    pub(super) fn next_generation(&self) -> u64 {
        self.generation
            .checked_add(1)
            .expect("superblock generation overflow")
    }

    pub(crate) fn created_ns(&self) -> i64 {
        self.created_ns
    }

    /// A log of `bytes` was laid out.
    pub(super) fn note_logged(&mut self, bytes: u64) {
        self.bytes_since = self
            .bytes_since
            .checked_add(bytes)
            .expect("bytes logged since the superblock overflow");
    }

    /// Whether a refresh is due at `now_ns` (the pool's clock): `every_bytes` logged since the
    /// last superblock, or anything logged and `every` gone by (or the clock set back since).
    pub(crate) fn due(&self, every_bytes: u64, every: Duration, now_ns: i64) -> bool {
        let every_ns = i64::try_from(every.as_nanos()).unwrap_or(i64::MAX);
        let by_bytes = self.bytes_since >= every_bytes;
        let by_time = self.bytes_since > 0
            && self
                .sealed_at_ns
                .is_none_or(|t| now_ns < t || now_ns - t >= every_ns);
        by_bytes || by_time
    }

    /// A superblock of `generation` was sealed at `now_ns` (the pool's clock); it must be the
    /// next one.
    pub(super) fn sealed(&mut self, generation: u64, now_ns: i64) {
        assert_eq!(
            generation,
            self.next_generation(),
            "superblocks are sealed in generation order"
        );
        self.generation = generation;
        self.bytes_since = 0;
        self.sealed_at_ns = Some(now_ns);
    }

    /// Whether a refresh is running.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// Marks a refresh running or not; returns what it was, for a nested one to put back.
    pub(super) fn set_running(&mut self, running: bool) -> bool {
        std::mem::replace(&mut self.running, running)
    }

    /// Tests: the generation of the newest superblock sealed, and the bytes logged since.
    #[cfg(test)]
    pub(super) fn sealed_state(&self) -> (u64, u64) {
        (self.generation, self.bytes_since)
    }
}

#[cfg(test)]
mod tests {
    use super::Refresh;
    use std::time::Duration;

    #[test]
    fn a_refresh_is_due_by_bytes_or_by_time_once_anything_was_logged() {
        let mut r = Refresh::new(7, 0);
        assert!(!r.due(100, Duration::ZERO, 0), "nothing logged");
        r.note_logged(40);
        assert!(
            r.due(100, Duration::ZERO, 0),
            "never sealed here: due by time"
        );
        r.sealed(8, 1_000);
        assert_eq!(r.sealed_state(), (8, 0));
        r.note_logged(99);
        let hour_ns = 3_600_000_000_000;
        assert!(!r.due(100, Duration::from_secs(3600), 1_000 + hour_ns - 1));
        assert!(
            r.due(100, Duration::from_secs(3600), 1_000 + hour_ns),
            "by time"
        );
        r.note_logged(1);
        assert!(r.due(100, Duration::from_secs(3600), 1_000));
    }

    #[test]
    #[should_panic(expected = "generation order")]
    fn a_superblock_out_of_generation_order_is_caught() {
        let mut r = Refresh::new(7, 0);
        r.sealed(9, 0);
    }
}
