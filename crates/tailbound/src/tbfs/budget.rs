//! The buffered-bytes budget: what writers have buffered, how much they may buffer before they
//! commit, and what the last space check said about it. Read by every writer without `meta`, so
//! its fields are atomics; changed only through [`BufferBudget`]'s methods.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Buffered bytes, the limits on them, and what sets those limits.
#[derive(Debug)]
pub(crate) struct BufferBudget {
    /// `Config::dirty_bytes_max`: the most writers may buffer however much space is free.
    max: u64,
    /// Bytes buffered in memory (sealed ones included until their log is written).
    buffered: AtomicU64,
    /// Bytes of writes admitted and not yet buffered ([`Admission`]): counted as buffered by
    /// every check, so writers admitted together cannot each take the same room.
    admitted: AtomicU64,
    /// Bytes writers may buffer before they commit while a cleaning pass would carry the buffer
    /// ([`BufferBudget::limit`]), set at each space check: `max`, or less when free space is
    /// short, so the checkpoint such a pass writes always finds room.
    limit: AtomicU64,
    /// Bytes writers may buffer whatever cleaning carries: half of what was free beyond the
    /// space reserve at the last space check, so buffered data always has room to go.
    fit_limit: AtomicU64,
    /// In a memory pool, free space was within twice the low-water mark (and the reserve) of
    /// running out at the last space check (`Engine::urgent_mark`): its writers then wait for
    /// the log writer at one buffer in flight again (`Engine::in_flight_max`).
    tight: AtomicBool,
    /// The last space check of a write found less free than it wants (the cleaner's low-water
    /// mark and the reserve beside the write): writers then take turns by weight for the room
    /// (`Engine::room_turn`).
    room_short: AtomicBool,
    /// The most blocks any file's map or buffers in this pool have spanned (holes included):
    /// every map as loaded at open, raised where a file buffers a block past its map. Only
    /// grows; a checkpoint's quick space bound assumes every map it writes may be this wide
    /// (`Engine::quick_inode_bound`).
    widest: AtomicU64,
    /// A namespace change was pending when `meta` was last let go (`Changes::namespace_dirty`): a
    /// cleaning pass would write what is buffered in its checkpoint.
    ns_pending: AtomicBool,
    /// The last space check found that cleaning passes are full ones (not
    /// `Engine::light_cleaning`), which also write what is buffered in their checkpoint.
    full_passes: AtomicBool,
}

/// A write admitted to the buffer: its bytes count as buffered until it is dropped, once the
/// write has buffered them (or failed).
#[must_use]
pub(crate) struct Admission<'a> {
    budget: &'a BufferBudget,
    bytes: u64,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let before = self.budget.admitted.fetch_sub(self.bytes, Ordering::AcqRel);
        assert!(
            before >= self.bytes,
            "admitted bytes underflow: {} let go of {before}",
            self.bytes
        );
    }
}

impl BufferBudget {
    /// The budget of a pool that may buffer `max` bytes, whose widest map spans `widest`
    /// blocks. Until the first space check, passes count as full and a namespace change as
    /// pending, so the limit is the one that holds for both.
    pub(crate) fn new(max: u64, widest: u64) -> BufferBudget {
        BufferBudget {
            max,
            buffered: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            limit: AtomicU64::new(max),
            fit_limit: AtomicU64::new(max),
            tight: AtomicBool::new(false),
            room_short: AtomicBool::new(false),
            widest: AtomicU64::new(widest),
            ns_pending: AtomicBool::new(true),
            full_passes: AtomicBool::new(true),
        }
    }

    /// Bytes buffered in memory.
    pub(crate) fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Acquire)
    }

    /// Bytes of writes admitted and not yet buffered.
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Acquire)
    }

    /// Admits a write of `bytes` if what is buffered besides (`others`, admitted writes not
    /// included) and every admitted write leave room for it under `limit`; `None` if not. Two
    /// writers cannot both be admitted into the same room.
    pub(crate) fn try_admit(&self, bytes: u64, others: u64, limit: u64) -> Option<Admission<'_>> {
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |admitted| {
                (others + admitted + bytes <= limit).then_some(admitted + bytes)
            })
            .ok()
            .map(|_| Admission {
                budget: self,
                bytes,
            })
    }

    /// Admits a write of `bytes` whose room a space check found.
    pub(crate) fn admit(&self, bytes: u64) -> Admission<'_> {
        self.admitted.fetch_add(bytes, Ordering::AcqRel);
        Admission {
            budget: self,
            bytes,
        }
    }

    /// `bytes` more were buffered.
    pub(crate) fn add(&self, bytes: u64) {
        let before = self.buffered.fetch_add(bytes, Ordering::AcqRel);
        assert!(
            before.checked_add(bytes).is_some(),
            "buffered bytes overflow: {bytes} added to {before}"
        );
    }

    /// `bytes` left memory (written, dropped or freed). More than is counted is a bug: the
    /// count is left as it was and what it held is returned.
    pub(crate) fn release(&self, bytes: u64) -> std::result::Result<(), u64> {
        self.buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_sub(bytes)
            })
            .map(drop)
    }

    /// Bytes writers may buffer before they commit: `max`, or, while a cleaning pass would
    /// have to write the buffer in its checkpoint (a namespace change is pending, or passes are
    /// full), what the free space allows ([`BufferBudget::set_limits`]). Light passes write no
    /// buffered data, so overwrites keep the whole buffer however short space is (writing it
    /// out sooner raised the cleaner's write amplification).
    pub(crate) fn limit(&self) -> u64 {
        let fit = self.fit_limit.load(Ordering::Acquire);
        if self.ns_pending.load(Ordering::Acquire) || self.full_passes.load(Ordering::Acquire) {
            self.limit.load(Ordering::Acquire).min(self.max).min(fit)
        } else {
            self.max.min(fit)
        }
    }

    /// A space check set the limit for when cleaning carries the buffer (`limit`) and the one
    /// whatever it carries (`fit`), in bytes. Stored only when they change: every writer
    /// reads them.
    pub(crate) fn set_limits(&self, limit: u64, fit: u64) {
        if self.fit_limit.load(Ordering::Relaxed) != fit {
            self.fit_limit.store(fit, Ordering::Release);
        }
        if self.limit.load(Ordering::Relaxed) != limit {
            self.limit.store(limit, Ordering::Release);
        }
    }

    /// Whether space was tight in a memory pool at the last space check.
    pub(crate) fn tight(&self) -> bool {
        self.tight.load(Ordering::Acquire)
    }

    pub(crate) fn set_tight(&self, tight: bool) {
        self.tight.store(tight, Ordering::Release);
    }

    /// Whether the last space check of a write found room short.
    pub(crate) fn room_short(&self) -> bool {
        self.room_short.load(Ordering::Acquire)
    }

    pub(crate) fn set_room_short(&self, short: bool) {
        // Stored only when it changes: every writer reads it.
        if self.room_short.load(Ordering::Relaxed) != short {
            self.room_short.store(short, Ordering::Release);
        }
    }

    /// Whether the last space check found cleaning passes full.
    pub(crate) fn set_full_passes(&self, full: bool) {
        if self.full_passes.load(Ordering::Relaxed) != full {
            self.full_passes.store(full, Ordering::Release);
        }
    }

    /// Whether a namespace change was pending when `meta` was let go.
    pub(crate) fn set_ns_pending(&self, pending: bool) {
        if self.ns_pending.load(Ordering::Relaxed) != pending {
            self.ns_pending.store(pending, Ordering::Release);
        }
    }

    /// The most blocks any file's map or buffers have spanned.
    pub(crate) fn widest(&self) -> u64 {
        self.widest.load(Ordering::Relaxed)
    }

    /// A file's buffers span `blocks` blocks: the widest only grows.
    pub(crate) fn widen(&self, blocks: u64) {
        // A plain load first: growth is rare, and every writer passes here.
        if blocks > self.widest.load(Ordering::Relaxed) {
            self.widest.fetch_max(blocks, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BufferBudget;

    #[test]
    fn the_limit_is_cut_by_free_space_only_while_cleaning_would_carry_the_buffer() {
        let b = BufferBudget::new(1000, 4);
        assert_eq!(b.limit(), 1000);
        b.set_limits(300, 800);
        assert_eq!(b.limit(), 300, "passes full and a change pending at first");
        b.set_full_passes(false);
        b.set_ns_pending(false);
        assert_eq!(b.limit(), 800, "light passes: only what fits");
        b.set_ns_pending(true);
        assert_eq!(b.limit(), 300);
        b.widen(2);
        assert_eq!(b.widest(), 4, "the widest only grows");
        b.widen(9);
        assert_eq!(b.widest(), 9);
    }

    #[test]
    fn releasing_more_than_is_buffered_leaves_the_count_and_says_what_it_held() {
        let b = BufferBudget::new(1000, 0);
        b.add(8192);
        assert_eq!(b.release(4096), Ok(()));
        assert_eq!(b.release(8192), Err(4096));
        assert_eq!(b.buffered(), 4096);
    }

    #[test]
    fn writers_admitted_together_stay_under_the_limit_until_they_let_go() {
        let b = BufferBudget::new(1000, 0);
        let first = b.try_admit(400, 100, 1000).expect("room for the first");
        let second = b.try_admit(400, 100, 1000).expect("room for the second");
        assert!(
            b.try_admit(200, 100, 1000).is_none(),
            "the two admitted hold the room"
        );
        assert_eq!(b.admitted(), 800);
        drop(first);
        assert_eq!(b.admitted(), 400);
        let checked = b.admit(700);
        assert_eq!(
            b.admitted(),
            1100,
            "a checked write is counted past the limit"
        );
        drop((second, checked));
        assert_eq!(b.admitted(), 0);
        assert!(b.try_admit(900, 100, 1000).is_some());
    }

    #[test]
    fn admitting_from_many_threads_never_passes_the_limit() {
        let b = BufferBudget::new(1 << 20, 0);
        let most = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        if let Some(a) = b.try_admit(300, 0, 1000) {
                            most.fetch_max(b.admitted(), std::sync::atomic::Ordering::Relaxed);
                            drop(a);
                        }
                    }
                });
            }
        });
        assert!(most.into_inner() <= 1000);
        assert_eq!(b.admitted(), 0);
    }

    #[test]
    #[should_panic(expected = "buffered bytes overflow")]
    fn buffered_bytes_overflowing_is_caught() {
        let b = BufferBudget::new(1000, 0);
        b.add(u64::MAX);
        b.add(1);
    }
}
