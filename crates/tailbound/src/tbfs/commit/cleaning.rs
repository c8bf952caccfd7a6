//! Cleaning passes: when to clean, and a pass from victim choice to the checkpoint or flush
//! that makes the emptied segments reusable. The cleaner's own parts are `space::cleaner`
//! (victim choice from the segment table, reading victims) and `commit::clean` (moving their
//! live blocks); a pass also asks retention, the checkpoints and the writer, which is why it
//! lives in the orchestration.

use std::collections::{BTreeSet, HashMap};

use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::limits::{BACKGROUND_VICTIMS, CHECKPOINT_FLOOR_BLOCKS, VICTIMS_PER_PASS};
use crate::tbfs::space::cleaner::{NotVictim, PassView};
use crate::tbfs::state::{Engine, Section, State};
use crate::tbfs::GcReport;
use crate::tbfs::{Error, Result};

/// What the cleaner writes a checkpoint for (counted in `FsCounters`).
#[derive(Debug, Clone, Copy)]
enum RefreshFor {
    /// Segments in the roll-forward chain become light victims.
    Victims,
    /// A light pass's victims hold live metadata.
    Metadata,
    /// A full pass, retention, dead segments waiting, pins.
    Other,
}

impl Engine {
    /// Cleans until `want` blocks are free or nothing more can be cleaned. With `pressure`, plain
    /// checkpoints lose their protection if that is what stands in the way (writers are waiting).
    pub(crate) fn clean(&self, m: &mut State, want: u64, pressure: bool) -> Result<GcReport> {
        self.clean_at_most(m, want, pressure, VICTIMS_PER_PASS, u64::MAX)
    }

    /// One pass of one victim, unless `want` blocks are free already: a piece of the cleaning
    /// tax a writer pays (`commit::tax`).
    pub(in crate::tbfs) fn clean_one_victim(&self, m: &mut State, want: u64) -> Result<GcReport> {
        self.clean_at_most(m, want, false, 1, 1)
    }

    /// `clean` with at most `passes` passes of at most `per_pass` victims.
    fn clean_at_most(
        &self,
        m: &mut State,
        want: u64,
        pressure: bool,
        per_pass: usize,
        passes: u64,
    ) -> Result<GcReport> {
        m.cleaning.start();
        let before = self.free_blocks(m);
        let r = self.in_section(m, Section::Cleaning, |m| {
            self.clean_passes(m, want, pressure, per_pass, passes)
        });
        m.cleaning.end();
        if m.life.under_pressure() {
            m.life.set_pressure(false);
        }
        let mut report = r?;
        let after = self.free_blocks(m);
        // Saturating: a pass whose copies took more than it freed freed nothing.
        report.bytes_freed = after.saturating_sub(before) * BLOCK_U64;
        report.free_fraction_after = after.min(self.segment_blocks() * self.segment_count()) as f64
            / (self.segment_blocks() * self.segment_count()) as f64;
        Ok(report)
    }

    fn clean_passes(
        &self,
        m: &mut State,
        want: u64,
        pressure: bool,
        per_pass: usize,
        passes_max: u64,
    ) -> Result<GcReport> {
        let mut report = GcReport::default();
        let mut skip = BTreeSet::new();
        let (mut passes, mut stalled) = (0u64, 0u32);
        let mut refreshed = false;
        // Checkpoints whose protection ran out since the last checkpoint go first; a checkpoint
        // makes that durable (and releases the newest before it, if that too is unprotected).
        let seq = m.writer.seq();
        let newest = m.ckpt.newest();
        let newest_pins = m.life.pins().any_anchored_at(newest)
            && m.life.retained(newest).is_some_and(|k| {
                !k.snapshot
                    && !m.life.is_held(newest)
                    && k.time_ns < m.life.unprotected_before(self.now_ns())
            });
        if m.prune(seq, self.segment_blocks(), false) > 0 || newest_pins {
            self.refresh_for_cleaner(m, RefreshFor::Other)?;
        }
        // Buffered data goes out first, in its own logs, so the copies that follow fill
        // segments of their own and keep their age (without room for it now, it waits for the
        // cleaning checkpoint).
        let mut want = want;
        if self.buffer_in_data_logs() {
            let free = self.free_blocks(m);
            self.commit_data_logs(m, true)?;
            // When the space check that runs this cleaning is a buffer seal's, it asked room
            // for that very buffer: written, it is not cleaned for a second time.
            // (Saturating: a seal that freed segments took nothing.)
            let sealed = free.saturating_sub(self.free_blocks(m));
            want = want.saturating_sub(m.cleaning.note_sealed_first(sealed));
        }
        // Light passes (`light_cleaning`: relaxed ordering and a newest checkpoint nothing keeps)
        // write the copies of file data as data-only logs, which roll-forward replays over the
        // newest checkpoint: once they are durable the victims are reusable, with no checkpoint
        // and so no map nodes per pass. Their victims are segments only a flush stands between
        // and reuse (`pick_victims`); live metadata in them still needs a checkpoint. Otherwise
        // a full pass: the copies go out in a checkpoint, followed by a superblock.
        //
        // A pending namespace change does not stop a light pass. Its victims are out of the
        // roll-forward chain, so a block still live in one was written before the superblock's
        // checkpoint and not rewritten since: that checkpoint holds it, with these bytes, under
        // the same file and number (a file created, or a number reused, since has all its blocks
        // in the chain). Replaying the copy over it changes no file's contents, whatever was
        // renamed, truncated or had its attributes set since.
        loop {
            if self.free_blocks_up_to(m, want) >= want {
                break;
            }
            if self.logs_unflushed(m) && self.pending_free_segments(m) > 0 {
                // Segments emptied by superseded blocks wait only for their logs to be durable.
                if m.bg_clean.defer_io {
                    // The background thread flushes once `meta` is released.
                    m.bg_clean.flush = true;
                    break;
                }
                self.flush_logs(m, "for the cleaner")?;
                if self.free_blocks_up_to(m, want) >= want {
                    break;
                }
            }
            let light_ok = self.light_cleaning(m);
            // The chain's bound (`refresh_due`) is the writers' to keep after a full buffer,
            // but the cleaner seals the buffer before its passes, so under steady overwrites
            // that refresh seldom runs and the chain grew to whatever the cleaner's own
            // checkpoints left: while ages differ it holds the hot segments, the emptiest.
            // (Not while they do not: under uniform overwrites each such checkpoint rewrites
            // metadata later victims carry, see `refresh_pays`. Nor in a one-pass call, a
            // cleaning tax's piece: a piece pays for one victim, and the checkpoint with what
            // it brings in reach made one write pay for several.)
            if light_ok
                && !refreshed
                && !m.bg_clean.defer_io
                && m.cleaning.ages_differ()
                && passes_max > 1
                && self.refresh_due(m)
            {
                refreshed = true;
                match self.refresh_for_cleaner(m, RefreshFor::Victims) {
                    Ok(()) => continue,
                    Err(Error::NoSpace(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let mut pays = false;
            let mut victims = if light_ok {
                let (victims, spread) = self.pick_victims(m, &skip, per_pass, true, stalled > 0);
                m.cleaning.note_age_spread(spread);
                let ahead = want.saturating_sub(self.free_blocks_up_to(m, want));
                // Not in a background pass: one small pass per wake-up, whose checkpoint would
                // hold `meta` for the writers; theirs weighs it.
                pays = !refreshed
                    && !m.bg_clean.defer_io
                    && self.refresh_pays(m, &skip, &victims, stalled > 0, ahead);
                victims
            } else {
                Vec::new()
            };
            self.keep_read_ahead(m, &mut victims);
            if light_ok && (victims.is_empty() || stalled > 0 || pays) && !refreshed {
                // Segments in the roll-forward chain, or that lost blocks in a checkpoint since
                // the superblock's, become light victims once a superblock names a newer one:
                // when there are no others, or the others gave nothing back (recently written
                // segments are where hot data dies).
                refreshed = true;
                match self.refresh_for_cleaner(m, RefreshFor::Victims) {
                    Ok(()) => continue,
                    Err(Error::NoSpace(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let light = !victims.is_empty();
            if !light {
                if self.pending_free_segments(m) > 0 {
                    // Dead segments wait only for a checkpoint and a superblock.
                    self.refresh_for_cleaner(m, RefreshFor::Other)?;
                    if self.free_blocks_up_to(m, want) >= want {
                        break;
                    }
                }
                let spread;
                (victims, spread) = self.pick_victims(m, &skip, per_pass, false, stalled > 0);
                m.cleaning.note_age_spread(spread);
                self.keep_read_ahead(m, &mut victims);
            }
            if victims.is_empty() {
                if pressure && !m.life.under_pressure() {
                    // Give up the protection period: release every plain checkpoint but the
                    // newest now (the next checkpoint releases that one too), and make the
                    // release durable so the segments it empties can be reused.
                    m.life.set_pressure(true);
                    let seq = m.writer.seq();
                    let released = m.prune(seq, self.segment_blocks(), false);
                    self.count(|c| c.protection_released += released);
                    continue;
                }
                break;
            }
            let free_before = self.free_blocks(m);
            // What the pass gains: the cleaner's head takes whole segments from the free count
            // and fills them over several passes, so its rest counts here too.
            let room_before = free_before + self.copy_head_rest(m);
            m.cleaning.pass_started();
            let now = self.now_ns();
            let pending = (0..self.segment_count() as usize)
                .filter(|&s| {
                    m.seg.is_empty(s)
                        && !m.writer.holds_segment(s as u64)
                        && !self.segment_free(m, s)
                })
                .count() as u64;
            self.count_pass(
                PassView {
                    seg: &m.seg,
                    writer: m.writer.place(),
                    free: free_before,
                    pending: pending * self.segment_blocks(),
                    why_not: |s| self.why_not_victim(m, &skip, s, now, light),
                },
                &victims,
            );
            // The copies are as old as the youngest data they come from.
            let age = victims.iter().map(|&v| m.life.segment_written(v)).max();
            m.life.start_copies(age);
            m.seg.start_copies(&victims);
            m.cleaning.set_copying(true);
            let moved = self.move_live(m, &victims, light);
            m.cleaning.set_copying(false);
            let moved = moved.and_then(|(copied, metadata)| {
                if !light {
                    // The checkpoint empties the victims: it may leave that much less of the
                    // next cycle's room (`Engine::checkpoint_floor`).
                    m.cleaning
                        .set_gain(victims.len() as u64 * self.segment_blocks());
                    let written = self.refresh_for_cleaner(m, RefreshFor::Other);
                    m.cleaning.set_gain(0);
                    return written.map(|()| (copied, false));
                }
                if m.bg_clean.defer_io {
                    m.bg_clean.flush = true;
                } else {
                    self.flush_logs(m, "after cleaning")?;
                }
                if metadata > 0 {
                    // Live metadata moves at a checkpoint; without room for one now (it
                    // writes the buffered data too), at a later one.
                    match self.refresh_for_cleaner(m, RefreshFor::Metadata) {
                        Ok(()) | Err(Error::NoSpace(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok((copied, metadata == 0))
            });
            m.life.end_copies();
            m.seg.end_copies();
            let (copied, was_light) = moved?;
            // The newest checkpoint before the cleaning one may still pin the old copies (it
            // was the newest when they died); the next checkpoint releases it.
            if !was_light
                && victims
                    .iter()
                    .any(|&v| m.seg.live(v) == 0 && m.seg.pinned(v) != 0)
            {
                self.refresh_for_cleaner(m, RefreshFor::Other)?;
            }
            // A light pass whose victims are empty but not reusable (a pin the soft rule could
            // not avoid): a checkpoint releases them, if there is room for it now.
            // (A deferred flush makes every log so far durable.)
            let durable = if m.bg_clean.defer_io {
                m.writer.seq()
            } else {
                self.logs.durable()
            };
            if was_light
                && victims
                    .iter()
                    .any(|&v| m.seg.live(v) == 0 && !self.segment_free_if_durable(m, v, durable))
            {
                match self.refresh_for_cleaner(m, RefreshFor::Other) {
                    Ok(()) | Err(Error::NoSpace(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            self.count(|c| c.light_cleaning_passes += u64::from(was_light));
            let mut cleaned = 0;
            for &v in &victims {
                if m.seg.is_empty(v) {
                    cleaned += 1;
                } else {
                    skip.insert(v);
                }
            }
            report.segments_cleaned += cleaned;
            report.blocks_copied += copied;
            self.count(|c| {
                c.segments_cleaned += cleaned;
                c.blocks_copied += copied;
            });
            // Stop when passes stop emptying segments (or gain nothing, twice in a row: what is
            // left to clean is what cleaning writes).
            passes += 1;
            stalled = if self.free_blocks(m) + self.copy_head_rest(m) <= room_before {
                stalled + 1
            } else {
                0
            };
            // A light pass that emptied nothing (its victims hold metadata) left them in `skip`:
            // the next pass tries others.
            if (cleaned == 0 && !was_light)
                || stalled >= 2
                || passes >= passes_max
                || passes > self.segment_count()
            {
                break;
            }
        }
        Ok(report)
    }

    /// In a background pass on a device whose reads are I/O, keeps only the victims read
    /// ahead: reading another under `meta` would first write every log sealed so far, and the
    /// namespace would wait for that. The rest are left to a later pass.
    fn keep_read_ahead(&self, m: &State, victims: &mut Vec<usize>) {
        if m.bg_clean.defer_io && !self.dev().writes_are_copies() {
            victims.retain(|v| m.bg_clean.read.contains_key(v));
        }
    }

    /// The best segments to clean, best first, as many as one checkpoint can move with the
    /// space there is ([`Engine::choose_victims`], given the segments that may be cleaned and
    /// the room for their copies).
    ///
    /// With `greedy`, by free fraction alone. Also returns the spread of the candidates' ages,
    /// and for a light pass those of the roll-forward chain's segments
    /// (`Engine::choose_victims`).
    ///
    /// With `light`, only segments a light pass can release (see `clean_passes`): nothing in
    /// them is in the roll-forward chain or lost by a checkpoint the superblock does not name,
    /// and the budget is for data-only logs, not a checkpoint.
    fn pick_victims(
        &self,
        m: &State,
        skip: &BTreeSet<usize>,
        most: usize,
        light: bool,
        greedy: bool,
    ) -> (Vec<usize>, Option<f64>) {
        let now = self.now_ns();
        let sb = self.segment_blocks();
        // The roll-forward chain's segments, which a light pass may not take, count in the
        // age spread, each by the blocks it lost (`light_pass_spread`): under hot and cold
        // overwrites the chain holds the hot segments, and the cold ones left, all alike,
        // would say ages do not differ. That verdict then stopped the copies going apart and
        // the chain's bound, so the chain grew and the passes copied cold segments nearly
        // full (docs/results/cleaner.md, 2026-12-01). Not the
        // segments that lost blocks since the superblock's checkpoint: under deletes those
        // are emptied by the deletes, not by their data's age, and counted they turned a
        // filling pool's choice to cost-benefit, which left it refusing writes early.
        let mut candidates = Vec::new();
        let mut kept_out = Vec::new();
        for s in 0..self.segment_count() as usize {
            match self.why_not_victim(m, skip, s, now, light) {
                None => candidates.push(s),
                Some(NotVictim::Chain) => kept_out.push(s),
                Some(_) => {}
            }
        }
        // The copies and the checkpoint that writes them (with whatever else is buffered and
        // pending) must fit in what is free now.
        let free = self.free_blocks(m);
        let debt = if light {
            self.checkpoint_debt(m, true)
        } else {
            0
        };
        let budget = if light {
            // The copies' space check keeps room for the next checkpoint and what the copies
            // add to it (`Engine::copies_floor`; `choose_victims` charges the latter per
            // victim); their summaries take a block per up to 123 extents.
            // Saturating here and below: no budget for copies once free space is at what must
            // stay free.
            free.saturating_sub(debt + self.budget.buffered().div_ceil(BLOCK_U64) + 16)
        } else {
            let pending = self.budget.buffered() / BLOCK_U64
                + m.changes.pending().len() as u64 * 4
                + m.dirs.dirty().len() as u64 * 2
                + m.table_estimate()
                + 16;
            free.saturating_sub(pending + sb / 2)
        };
        // A light pass charges its victims what their copies add to that checkpoint: a leaf per
        // block in files whose maps have leaves under a root (`CopiesDebt`).
        let copies = light.then(|| self.copies_debt(m));
        let (chosen, spread) = self.choose_victims(
            &m.seg,
            candidates.clone(),
            &kept_out,
            |s| m.life.segment_written(s),
            now,
            budget,
            most,
            copies,
            greedy,
        );
        if light && chosen.is_empty() {
            // Free space is below the room the copies keep (recovery, or deletes, may leave a
            // pool there): the emptiest victim whose copies fit at all, which its space check
            // admits if it gives back more than it copies (`Engine::ensure_space`).
            let physical = free.saturating_sub(CHECKPOINT_FLOOR_BLOCKS + 16);
            let (one, _) = self.choose_victims(
                &m.seg,
                candidates,
                &kept_out,
                |s| m.life.segment_written(s),
                now,
                physical,
                1,
                copies,
                true,
            );
            return (one, spread);
        }
        (chosen, spread)
    }

    /// Whether a checkpoint and its superblock, written before a light pass about to clean
    /// `chosen`, would save more copies than the checkpoint costs. Light passes may not take
    /// segments in the roll-forward chain or that lost blocks since the superblock's checkpoint
    /// (`why_not_victim`); after deletes and truncates those are often the emptiest, and
    /// segments emptied whole wait for that checkpoint too. Compared over the space this
    /// cleaning is to free (`ahead` blocks, at least what this pass frees): the copies per block
    /// freed of this pass, against the same chooser's with those segments back (the waiting
    /// segments counted as space freed with no copy); and the checkpoint's blocks at this
    /// pass's rate, since they take space the cleaner must free again. The space compared over
    /// is what this cleaning is to free (`ahead`), or if more, what the segments kept out that
    /// are emptier than this pass's victims and the waiting ones would give back.
    fn refresh_pays(
        &self,
        m: &State,
        skip: &BTreeSet<usize>,
        chosen: &[usize],
        greedy: bool,
        ahead: u64,
    ) -> bool {
        if chosen.is_empty() {
            return false;
        }
        let now = self.now_ns();
        let sb = self.segment_blocks();
        let cost = self.checkpoint_debt(m, true)
            + self.budget.buffered().div_ceil(BLOCK_U64)
            + CHECKPOINT_FLOOR_BLOCKS;
        let live_of = |v: &[usize]| v.iter().map(|&s| u64::from(m.seg.live(s))).sum::<u64>();
        let copies = live_of(chosen);
        let freed = chosen.len() as u64 * sb - copies;
        // The segments those rules keep out, and the space the ones emptier than this pass's
        // victims would give back: what a checkpoint brings within reach at a better rate.
        // The chain only while segment ages differ: there it holds the hot segments, which die
        // fastest; under uniform overwrites it holds the fullest, and each checkpoint written
        // for it rewrites metadata that later victims carry, which asks for more checkpoints.
        let chain_too = m.cleaning.ages_differ();
        let mut wider = Vec::new();
        let mut within_reach = 0;
        for s in 0..self.segment_count() as usize {
            match self.why_not_victim(m, skip, s, now, true) {
                None => wider.push(s),
                Some(NotVictim::Chain) if !chain_too => {}
                Some(NotVictim::Chain | NotVictim::DeadSinceSuperblock) => {
                    wider.push(s);
                    let live = u64::from(m.seg.live(s));
                    if live * (chosen.len() as u64) < copies {
                        within_reach += sb - live;
                    }
                }
                Some(_) => {}
            }
        }
        let waiting = self.pending_free_segments(m) as u64 * sb;
        let (alt, _) = self.choose_victims(
            &m.seg,
            wider,
            &[],
            |s| m.life.segment_written(s),
            now,
            u64::MAX,
            chosen.len(),
            None,
            greedy,
        );
        let alt_copies = live_of(&alt);
        let alt_freed = (alt.len() as u64 * sb).saturating_sub(alt_copies) + waiting;
        if freed == 0 || alt_freed == 0 {
            return false;
        }
        // Estimates, as ratios of block counts.
        let rate = copies as f64 / freed as f64;
        let alt_rate = alt_copies as f64 / alt_freed as f64;
        let ahead = ahead.max(freed).max(within_reach + waiting) as f64;
        (rate - alt_rate) * ahead > cost as f64 * (1.0 + rate)
    }

    /// Why segment `s` may not be a victim of a pass now (light or full, see `pick_victims`):
    /// the first rule that keeps it out, `None` if none does.
    pub(in crate::tbfs) fn why_not_victim(
        &self,
        m: &State,
        skip: &BTreeSet<usize>,
        s: usize,
        now: i64,
        light: bool,
    ) -> Option<NotVictim> {
        let sb_seq = self.superblocks.checkpoint_seq();
        if m.writer.holds_segment(s as u64) {
            Some(NotVictim::Writer)
        } else if m.seg.live(s) == 0 {
            Some(NotVictim::NothingLive)
        } else if skip.contains(&s) {
            Some(NotVictim::Skipped)
        } else if !m.cleanable(s, now) {
            Some(NotVictim::Retained)
        } else if !light {
            None
        } else if m.seg.last_seq(s) > sb_seq {
            Some(NotVictim::Chain)
        } else if m.seg.dead_at(s) > sb_seq {
            Some(NotVictim::DeadSinceSuperblock)
        } else if !m
            .life
            .only_newest_unkept(m.life.segment_born(s), m.ckpt.newest(), now)
        {
            Some(NotVictim::Retained)
        } else {
            None
        }
    }

    /// A new checkpoint and a superblock naming it, which may use the space reserve: afterwards
    /// every segment that died before is reusable.
    fn refresh_for_cleaner(&self, m: &mut State, why: RefreshFor) -> Result<()> {
        self.count(|c| match why {
            RefreshFor::Victims => c.cleaner_checkpoints_for_victims += 1,
            RefreshFor::Metadata => c.cleaner_checkpoints_for_metadata += 1,
            RefreshFor::Other => c.cleaner_checkpoints_other += 1,
        });
        let was = m.refresh.set_running(true);
        let r = self.commit_checkpoint_for_superblock(m).and_then(|()| {
            if m.bg_clean.defer_io {
                // Written with the pass's logs once `meta` is released.
                self.seal_superblock(m);
                Ok(())
            } else {
                self.write_superblock(m)
            }
        });
        m.refresh.set_running(was);
        r
    }

    /// Background work (on the idle-class thread, called without `meta`): while less than the
    /// configured share of the pool is free, one small pass per wake-up, so writers get the lock
    /// between passes and the cleaner's I/O is throttled to [`BACKGROUND_VICTIMS`] segments per
    /// period.
    ///
    /// A pass made while [`Engine::cleaning_is_urgent`] runs as best-effort I/O at the lowest
    /// level ([`URGENT_PRIO`]) if its thread is idle-class, and goes back to idle after it; and
    /// if it emptied anything, the background thread makes the next pass at once.
    ///
    /// Only the pass's bookkeeping holds `meta`: the victims it is expected to pick are read
    /// before it takes the lock (marked so that none is reused meanwhile), and the flush and
    /// superblock that make the emptied segments reusable are written after it lets go. So a
    /// writer that needs `meta` waits for memory work, not for the cleaner's device I/O.
    ///
    /// In a memory pool the pass's victims are cleaned one per hold of `meta`, handing it to the
    /// threads waiting for it between them ([`crate::tbfs::state::StateGuard::unlock_fair_and_write`]):
    /// a pass of [`BACKGROUND_VICTIMS`] in one hold kept every create and delete waiting 3 to
    /// 10 ms.
    pub(in crate::tbfs) fn background_clean(&self) -> Result<()> {
        let _one_pass = self.bg_pass.lock().unwrap_or_else(|p| p.into_inner());
        let (holds, per_hold) = if self.dev().writes_are_copies() {
            (BACKGROUND_VICTIMS, 1)
        } else {
            (1, BACKGROUND_VICTIMS)
        };
        for _ in 0..holds {
            if !self.background_pass(per_hold)? {
                break;
            }
        }
        Ok(())
    }

    /// One background pass of at most `victims_max` victims ([`Engine::background_clean`]);
    /// returns whether it gave back more blocks than it wrote and more cleaning is wanted.
    fn background_pass(&self, victims_max: usize) -> Result<bool> {
        let total = self.segment_blocks() * self.segment_count();
        let want = total * self.config().gc_free_percent.min(90) as u64 / 100;
        let (victims, seq, urgent) = {
            let mut m = self.lock_meta();
            if self.free_blocks_up_to(&m, want) >= want {
                return Ok(false);
            }
            let dead = self.dead_blocks(&m);
            if !m.bg_clean.may_run(dead) {
                return Ok(false);
            }
            let none = BTreeSet::new();
            let (full, _) = self.pick_victims(&m, &none, victims_max, false, false);
            if full.is_empty() {
                return Ok(false);
            }
            // What the pass will most likely pick (it cleans no others: see `keep_read_ahead`).
            let light = if self.light_cleaning(&m) {
                self.pick_victims(&m, &none, victims_max, true, false).0
            } else {
                Vec::new()
            };
            let victims = if light.is_empty() { full } else { light };
            m.bg_clean.reading.extend(victims.iter().copied());
            (victims, m.writer.seq(), self.cleaning_is_urgent(&m))
        };
        // Under pressure the pass is no longer idle-class I/O: held back behind best-effort
        // writers, it fell behind a steady copy until a writer's commit found too little room
        // and cleaned in the foreground, holding `meta` for up to a whole pass (with a real-time
        // writer waiting on it). A memory pool does no
        // device I/O, so it keeps its thread's priority.
        let _raised = (urgent && !self.dev().writes_are_copies())
            .then(crate::tbfs::space::cleaner::RaisedPrio::raise);
        // Every log in the victims was sealed before `seq`. A memory pool's victims are not
        // read ahead: the pass reads their summaries and live file data a block at a time
        // (`move_live`), a fraction of copying every victim whole into fresh memory.
        let read = if self.dev().writes_are_copies() {
            Ok(HashMap::new())
        } else {
            self.read_victims(&victims, seq)
        };
        let mut m = self.lock_meta();
        m.bg_clean.reading.clear();
        m.bg_clean.read = read?;
        m.bg_clean.defer_io = true;
        // Whether the pass gave back more than it wrote: near full, a pass empties its victims
        // but its copies and checkpoint take as much again, and passes run back to back would
        // rewrite the pool for nothing while it sits idle. (Counted under `meta`, so the
        // metadata sealed meanwhile is the pass's.)
        let ran = self.free_blocks_up_to(&m, want) < want;
        let gained = if !ran {
            Ok(false)
        } else {
            let metadata = self.stats.counters().metadata_blocks;
            self.clean_at_most(&mut m, want, false, victims_max, 1)
                .map(|r| {
                    let wrote =
                        r.blocks_copied + (self.stats.counters().metadata_blocks - metadata);
                    r.segments_cleaned * self.segment_blocks() > wrote
                })
        };
        m.bg_clean.read.clear();
        m.bg_clean.defer_io = false;
        let flush = std::mem::take(&mut m.bg_clean.flush);
        let end = m.writer.seq();
        let more = self.free_blocks_up_to(&m, want) < want;
        m.unlock_fair_and_write()?;
        let gained = gained?;
        // Under pressure the next pass follows at once, not a period later, while passes
        // give space back.
        if urgent && gained && self.config().background_gc {
            self.wake_background(|w| w.clean = true);
        }
        if flush {
            self.flush_written(end, "after background cleaning")?;
        } else {
            // Every log and superblock the pass sealed is below `end + 1`.
            self.write_logs_until(end + 1)?;
        }
        if ran && !gained {
            // Counted once the pass's writes are out, when its victims are reusable.
            let mut m = self.lock_meta();
            let dead = self.dead_blocks(&m);
            m.bg_clean.gained_nothing(dead);
        }
        Ok(gained && more)
    }

    /// Blocks neither free, live nor pinned: what cleaning could give back at best.
    fn dead_blocks(&self, m: &State) -> u64 {
        let total = self.segment_blocks() * self.segment_count();
        total.saturating_sub(self.free_blocks(m) + m.seg.used_blocks())
    }
}
