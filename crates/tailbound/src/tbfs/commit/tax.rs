//! Paying the cleaning tax on the writer path (`tbfs::tax`): a writer admitted while the pool
//! needs cleaning (a space check found less free than the low-water mark wants, and it has more
//! than the floor below which a writer cleans until there is room again) owes copies in
//! proportion to the blocks it writes, at the rate cleaning costs now, and pays them on its own
//! thread one victim at a time once it owes half what a piece copies. As log-structured systems
//! throttle their writers, so that each writer's time lost to cleaning follows what it writes:
//! the writer that happened to find room short no longer pays for everyone's writes at once.

use std::time::Instant;

use crate::tbfs::admission::WriterKey;
use crate::tbfs::limits::MIN_RECLAIMABLE;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

/// The most victims one admission pays for: what is owed beyond stays owed, for the writer's
/// next admission, so no write waits for more than a few pieces.
const PIECES_PER_ADMISSION_MAX: u32 = 4;

/// How much the rate is raised at the floor: `1 + DEPTH_GAIN` times it there, less above, so
/// free space climbs back before a writer must clean until there is room.
const DEPTH_GAIN: f64 = 3.0;

/// What one admission paid ([`Engine::pay_cleaning_tax`]).
pub(in crate::tbfs) struct TaxPaid {
    /// Blocks of the buffer seal being admitted that the cleaner sealed before its passes
    /// (`Cleaning::take_sealed_first`): the seal needs that much less room now.
    pub sealed_first: u64,
}

impl Engine {
    /// The writer the cleaning tax applies to in this space check: a write's, with a tenant or
    /// priority behind a scheduler (`WriterKey::of_current_thread_on`), not a real-time one
    /// (its class goes before every weight, and it leaves cleaning to the others, as it skips
    /// the turns for room).
    pub(in crate::tbfs) fn taxed_writer(&self, is_write: bool) -> Option<WriterKey> {
        if !is_write {
            return None;
        }
        let key = WriterKey::of_current_thread_on(&**self.dev())?;
        let class = crate::sched::Charge::of_current_thread().prio().class;
        (class != crate::sched::Class::Rt).then_some(key)
    }

    /// The live blocks of the victim a piece would clean now (the emptiest segment the writer
    /// does not hold, with nothing pinned and enough dead to be worth cleaning, that may be
    /// cleaned now) and the copies per block written cleaning at that rate costs: its live
    /// blocks against the blocks it gives back. None: nothing may be cleaned now.
    fn cleaning_rate(&self, m: &State) -> Option<(u64, f64)> {
        let sb = self.segment_blocks();
        let now = self.now_ns();
        let live = (0..self.segment_count() as usize)
            .filter(|&s| {
                !m.writer.holds_segment(s as u64)
                    && m.seg.pinned(s) == 0
                    && m.seg.live(s) > 0
                    && (sb - u64::from(m.seg.live(s))) as f64 >= sb as f64 * MIN_RECLAIMABLE
                    && m.cleanable(s, now)
            })
            .map(|s| u64::from(m.seg.live(s)))
            .min()?;
        Some((live, live as f64 / (sb - live) as f64))
    }

    /// A writer of `key` admitted to write `need` blocks, with `free` blocks free above
    /// `floor`, while the pool needs cleaning (less free than `want`, or not yet as much again
    /// above it since there was: see the module doc): it owes `need` times the rate, raised the
    /// nearer `free` is to `floor` ([`DEPTH_GAIN`]) so that free space climbs back rather than
    /// reach the floor where a writer cleans until there is room, and pays what it owes one
    /// victim at a time while it owes at least half what a piece copies and less than `want`
    /// is free (a piece cleans only below the mark: above it a write only adds to what it
    /// owes, though the piece it tries seals the buffered data first). `for_buffer`: the
    /// space check is a buffer seal's (`Cleaning::set_for_buffer`).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::tbfs) fn pay_cleaning_tax(
        &self,
        m: &mut State,
        key: WriterKey,
        need: u64,
        free: u64,
        floor: u64,
        want: u64,
        for_buffer: bool,
    ) -> Result<TaxPaid> {
        assert!(
            floor <= free && floor <= want,
            "the cleaning tax is paid above the floor {floor} (the mark {want}), with {free} free"
        );
        let mut paid = TaxPaid { sealed_first: 0 };
        // The pool needs cleaning from the first write that finds less free than the mark
        // until one finds as much again above it free: whether a write pays does not turn on
        // whether the piece before it just lifted free space over the mark.
        if free < want {
            m.tax.set_needed(true);
        } else if !m.tax.needed() {
            return Ok(paid);
        } else {
            let high = want + (want - floor);
            if self.free_blocks_up_to(m, high) >= high {
                m.tax.set_needed(false);
                return Ok(paid);
            }
        }
        let Some((live, _)) = self.cleaning_rate(m) else {
            m.tax.forgive(key);
            return Ok(paid);
        };
        // What pieces copied lately, or before the first the emptiest victim's live blocks;
        // the rate is a piece's copies against what its victim gives back.
        let sb = self.segment_blocks() as f64;
        let piece = m.tax.piece().unwrap_or(live as f64).min(sb - 1.0);
        let rate = piece / (sb - piece);
        let depth = want.saturating_sub(free) as f64 / (want - floor).max(1) as f64;
        let raise = m.tax.raise(1.0 + DEPTH_GAIN * depth);
        m.tax.accrue(key, need, rate * raise);
        let mut pieces = 0;
        while m.tax.owed(key) >= piece / 2.0 && pieces < PIECES_PER_ADMISSION_MAX {
            m.cleaning.set_for_buffer(if for_buffer {
                need - paid.sealed_first
            } else {
                0
            });
            let start = Instant::now();
            let cleaned = {
                let _work = crate::phases::meta_work(crate::phases::MetaWork::TaxPiece);
                self.clean_one_victim(m, want)
            };
            paid.sealed_first += m.cleaning.take_sealed_first();
            let copied = cleaned.as_ref().map_or(0, |r| r.blocks_copied);
            self.writes.cleaned(Some(key), start.elapsed(), copied);
            match cleaned {
                Ok(_) | Err(Error::NoSpace(_)) => {}
                Err(e) => return Err(e),
            }
            pieces += 1;
            if copied > 0 {
                m.tax.paid(key, copied);
            } else if self.free_blocks_up_to(m, free.max(want)) < free.max(want) {
                // A piece that copied nothing below the mark: nothing it could pay with is
                // left (the victims hold no live blocks, or none may be cleaned now).
                m.tax.forgive(key);
                break;
            } else {
                // The pool needs no cleaning now: the debt waits for the next time it does.
                break;
            }
        }
        Ok(paid)
    }
}
