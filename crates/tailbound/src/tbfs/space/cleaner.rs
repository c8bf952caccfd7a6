//! The cleaner: empties partly live segments so the writer has whole segments to fill.
//!
//! Victims are chosen by cost-benefit (Rosenblum & Ousterhout's LFS) when segment ages carry a
//! signal ([`ages_carry_signal`]), greedily (the emptiest first) when they do not: a segment
//! with live fraction `u` and age `a` (time since its newest log) scores `(1 − u) · a / (1 + u)`:
//! the space it gives back, weighted by how long that space is likely to stay free, over the
//! cost of reading it and writing its live blocks again. Segments giving back less than
//! [`MIN_RECLAIMABLE`] are skipped, and so are segments a snapshot, an open view or a protected
//! checkpoint may reference (moving their live blocks would pin the old copies, not free them).
//!
//! Live blocks are found from the segment's log summaries: a block is live if the in-memory tree
//! still points at its address. Moving a block means making it dirty again (file data, a
//! directory, a map node, an inode page, a table page), so the copies go out through the normal
//! commit path in a checkpoint; the emptied segments are reused only after a superblock names that
//! checkpoint, as for any dead segment. A crash at any point recovers the previous checkpoint,
//! whose blocks are all still in place.

use std::collections::{BTreeSet, HashMap};

use crate::tbfs::format::{self, BLOCK_U64};
use crate::tbfs::inode::now_ns;
use crate::tbfs::limits::{
    AGE_SIGNAL_SPREAD, BACKGROUND_VICTIMS, MIN_RECLAIMABLE, VICTIMS_PER_PASS,
};
use crate::tbfs::state::{Engine, Section, State};
use crate::tbfs::GcReport;
use crate::tbfs::{Error, Result};

/// The priority of a background pass made under pressure ([`Engine::cleaning_is_urgent`]):
/// best effort, lowest level, so it shares the device with best-effort writers by weight
/// instead of waiting for them to pause.
pub const URGENT_PRIO: crate::sched::Prio = crate::sched::Prio {
    class: crate::sched::Class::Be,
    level: crate::sched::LEVEL_MAX,
};

/// The calling thread raised from the idle class to [`URGENT_PRIO`] for one pass, and put back
/// when dropped. A thread of any other class is left as it is.
struct RaisedPrio(Option<crate::sched::Prio>);

impl RaisedPrio {
    fn raise() -> RaisedPrio {
        let before = crate::sched::Prio::of_current_thread();
        if before.class != crate::sched::Class::Idle {
            return RaisedPrio(None);
        }
        // Without the raise the pass runs as before, at idle class: nothing to report.
        RaisedPrio(URGENT_PRIO.apply_to_current_thread().ok().map(|()| before))
    }
}

impl Drop for RaisedPrio {
    fn drop(&mut self) {
        if let Some(before) = self.0 {
            let _ = before.apply_to_current_thread();
        }
    }
}

/// How far apart the rates at which segments lose their live blocks are: the standard deviation
/// of `ln λ` over segments with live fraction `u` and age `a`, `λ = −ln u / a` (a segment's blocks
/// were all live when it was written). Uniform overwrites kill every block at the same rate, so
/// the rates agree and age says nothing a segment's emptiness does not; hot and cold data die at
/// rates far apart, and age tells the cold segments (worth cleaning when fuller) from the hot.
fn age_spread(segments: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut n, mut sum, mut sq) = (0.0, 0.0, 0.0);
    for (u, age) in segments {
        if !(u > 0.0 && u < 1.0 && age > 0.0) {
            continue;
        }
        let l = (-u.ln() / age).ln();
        n += 1.0;
        sum += l;
        sq += l * l;
    }
    if n < 2.0 {
        return 0.0;
    }
    let mean = sum / n;
    (sq / n - mean * mean).max(0.0).sqrt()
}

/// Whether segment ages carry a signal worth choosing victims by ([`age_spread`]).
pub(in crate::tbfs) fn ages_carry_signal(segments: impl Iterator<Item = (f64, f64)>) -> bool {
    age_spread(segments) > AGE_SIGNAL_SPREAD
}

impl Engine {
    /// Cleans until `want` blocks are free or nothing more can be cleaned. With `pressure`, plain
    /// checkpoints lose their protection if that is what stands in the way (writers are waiting).
    pub(crate) fn clean(&self, m: &mut State, want: u64, pressure: bool) -> Result<GcReport> {
        self.clean_at_most(m, want, pressure, VICTIMS_PER_PASS, u64::MAX)
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
                    && k.time_ns < m.life.unprotected_before(now_ns())
            });
        if m.prune(seq, self.segment_blocks(), false) > 0 || newest_pins {
            self.refresh_for_cleaner(m)?;
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
            let mut victims = if light_ok {
                self.pick_victims(m, &skip, per_pass, true, stalled > 0)
            } else {
                Vec::new()
            };
            self.keep_read_ahead(m, &mut victims);
            if light_ok && (victims.is_empty() || stalled > 0) && !refreshed {
                // Segments in the roll-forward chain, or that lost blocks in a checkpoint since
                // the superblock's, become light victims once a superblock names a newer one:
                // when there are no others, or the others gave nothing back (recently written
                // segments are where hot data dies).
                refreshed = true;
                match self.refresh_for_cleaner(m) {
                    Ok(()) => continue,
                    Err(Error::NoSpace(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let light = !victims.is_empty();
            if !light {
                if self.pending_free_segments(m) > 0 {
                    // Dead segments wait only for a checkpoint and a superblock.
                    self.refresh_for_cleaner(m)?;
                    if self.free_blocks_up_to(m, want) >= want {
                        break;
                    }
                }
                victims = self.pick_victims(m, &skip, per_pass, false, stalled > 0);
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
            m.cleaning.pass_started();
            self.count_pass(m, &victims, free_before);
            // The copies are as old as the youngest data they come from.
            let age = victims.iter().map(|&v| m.life.segment_written(v)).max();
            m.life.start_copies(age);
            m.cleaning.set_copying(true);
            let moved = self.move_live(m, &victims, light);
            m.cleaning.set_copying(false);
            let moved = moved.and_then(|(copied, metadata)| {
                if !light {
                    return self.refresh_for_cleaner(m).map(|()| (copied, false));
                }
                if m.bg_clean.defer_io {
                    m.bg_clean.flush = true;
                } else {
                    self.flush_logs(m, "after cleaning")?;
                }
                if metadata > 0 {
                    // Live metadata moves at a checkpoint; without room for one now (it
                    // writes the buffered data too), at a later one.
                    match self.refresh_for_cleaner(m) {
                        Ok(()) | Err(Error::NoSpace(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok((copied, metadata == 0))
            });
            m.life.end_copies();
            let (copied, was_light) = moved?;
            // The newest checkpoint before the cleaning one may still pin the old copies (it
            // was the newest when they died); the next checkpoint releases it.
            if !was_light
                && victims
                    .iter()
                    .any(|&v| m.seg.live(v) == 0 && m.seg.pinned(v) != 0)
            {
                self.refresh_for_cleaner(m)?;
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
                match self.refresh_for_cleaner(m) {
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
            stalled = if self.free_blocks(m) <= free_before {
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

    /// Counts what a pass about to clean `victims` sees (`FsCounters::cleaning_passes` and
    /// the figures beside it), with `free` blocks free.
    fn count_pass(&self, m: &State, victims: &[usize], free: u64) {
        let w = &m.writer;
        let mut written: Vec<u32> = (0..self.segment_count() as usize)
            .filter(|&s| s as u64 != w.cur_seg() && s as u64 != w.next_seg() && m.seg.live(s) > 0)
            .map(|s| m.seg.live(s))
            .collect();
        let n = victims.len().min(written.len());
        let greedy: u64 = if n == 0 {
            0
        } else {
            written.select_nth_unstable(n - 1);
            written[..n].iter().map(|&l| u64::from(l)).sum()
        };
        let live: u64 = m.seg.live_counts().iter().map(|&l| u64::from(l)).sum();
        let chosen: u64 = victims.iter().map(|&v| u64::from(m.seg.live(v))).sum();
        let mixed = victims.iter().filter(|&&v| m.seg.mixed(v)).count() as u64;
        let total = self.segment_blocks() * self.segment_count();
        self.count(|c| {
            c.cleaning_passes += 1;
            c.pass_free_blocks += free.min(total);
            c.pass_live_blocks += live;
            c.victims_chosen += victims.len() as u64;
            c.victim_live_blocks += chosen;
            c.greedy_live_blocks += greedy;
            c.victims_mixed += mixed;
        });
    }

    /// In a background pass on a device whose reads are I/O, keeps only the victims read
    /// ahead: reading another under `meta` would first write every log sealed so far, and the
    /// namespace would wait for that. The rest are left to a later pass.
    fn keep_read_ahead(&self, m: &State, victims: &mut Vec<usize>) {
        if m.bg_clean.defer_io && !self.dev().writes_are_copies() {
            victims.retain(|v| m.bg_clean.read.contains_key(v));
        }
    }

    /// A new checkpoint and a superblock naming it, which may use the space reserve: afterwards
    /// every segment that died before is reusable.
    fn refresh_for_cleaner(&self, m: &mut State) -> Result<()> {
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

    /// The best segments to clean, best first, as many as one checkpoint can move with the
    /// space there is.
    ///
    /// With `greedy`, by free fraction alone.
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
    ) -> Vec<usize> {
        let now = now_ns();
        let sb = self.segment_blocks();
        let sb_seq = self.superblocks.checkpoint_seq();
        let candidates: Vec<usize> = (0..self.segment_count() as usize)
            .filter(|&s| {
                !m.writer.holds_segment(s as u64)
                    && m.seg.live(s) > 0
                    && !skip.contains(&s)
                    && m.cleanable(s, now)
                    && (!light
                        || (m.seg.last_seq(s) <= sb_seq
                            && m.seg.dead_at(s) <= sb_seq
                            && m.life.only_newest_unkept(
                                m.life.segment_born(s),
                                m.ckpt.newest(),
                                now,
                            )))
            })
            .collect();
        let age_of = |s: usize| (now - m.life.segment_written(s)).max(1) as f64;
        // Cost-benefit only when ages tell segments apart (hot and cold data): for data that
        // dies at one rate it picks fuller victims than greedy does, for no gain.
        let greedy = greedy
            || !ages_carry_signal(
                candidates
                    .iter()
                    .map(|&s| (m.seg.live(s) as f64 / sb as f64, age_of(s))),
            );
        let mut scored: Vec<(f64, usize)> = candidates
            .into_iter()
            .filter_map(|s| {
                let u = m.seg.live(s) as f64 / sb as f64;
                if 1.0 - u < MIN_RECLAIMABLE {
                    return None;
                }
                // Greedy (the emptiest first) once cost-benefit's choices stopped freeing space:
                // old, nearly full segments give back too little to a writer that waits.
                let age = if greedy { 1.0 } else { age_of(s) };
                Some(((1.0 - u) * age / (1.0 + u), s))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let cheap: Vec<usize> = scored.iter().map(|&(_, s)| s).collect();
        // The copies and the checkpoint that writes them (with whatever else is buffered and
        // pending) must fit in what is free now.
        let free = self.free_blocks(m);
        let mut budget = if light {
            // The copies' space check keeps the reserve; their summaries take a block per up
            // to 123 extents. Buffered data is not written with them.
            // Saturating here and below: no budget for copies once free space is at what must
            // stay free.
            free.saturating_sub(self.reserve_blocks() + 16)
        } else {
            let pending = self.budget.buffered() / BLOCK_U64
                + m.changes.pending().len() as u64 * 4
                + m.dirs.dirty().len() as u64 * 2
                + m.table_estimate()
                + 16;
            free.saturating_sub(pending + sb / 2)
        };
        let mut out = Vec::new();
        for (_, s) in scored {
            let live = m.seg.live(s) as u64;
            // What the logs' estimate charges for moving them: the blocks, and for a checkpoint
            // the map nodes and inode records of the files they belong to.
            let cost = if light {
                // At least what `ensure_space` asks for them (their summaries, pads).
                live + live / 32 + 8
            } else {
                live + live / 4 + 16
            };
            if cost > budget || out.len() == most {
                break;
            }
            budget -= cost;
            out.push(s);
        }
        if light && out.is_empty() {
            // Free space is below the reserve and the copies' cost: victims that give back
            // what their copies borrow of it may still be cleaned.
            return self.light_victims_repaying_reserve(m, &cheap, most);
        }
        out
    }

    /// Reads the background pass's victims whole, without `meta`, once every log sealed
    /// before `seq` is written.
    fn read_victims(&self, victims: &[usize], seq: u64) -> Result<HashMap<usize, Vec<u8>>> {
        self.write_logs_until(seq).and_then(|()| {
            let mut read = HashMap::with_capacity(victims.len());
            for &s in victims {
                let mut buf = vec![0u8; (self.segment_blocks() * BLOCK_U64) as usize];
                self.read_segment(s, &mut buf)?;
                read.insert(s, buf);
            }
            Ok(read)
        })
    }

    pub(in crate::tbfs) fn read_segment(&self, s: usize, buf: &mut [u8]) -> Result<()> {
        let start = format::FIRST_SEGMENT_BLOCK + s as u64 * self.segment_blocks();
        self.dev().read_at(start * BLOCK_U64, buf).map_err(|e| {
            Error::io(
                format!("{} device: cleaner reading segment {s}", self.dev().kind()),
                e,
            )
        })
    }

    /// Whether free space is within twice the low-water mark (and the reserve) of running out:
    /// below the mark, a writer's commit cleans in the foreground, holding `meta` while it does.
    pub(in crate::tbfs) fn cleaning_is_urgent(&self, m: &State) -> bool {
        let mark = self.urgent_mark(m);
        self.free_blocks_up_to(m, mark) < mark
    }

    /// The free blocks below which cleaning is urgent ([`Engine::cleaning_is_urgent`]).
    pub(in crate::tbfs) fn urgent_mark(&self, m: &State) -> u64 {
        2 * self.low_water(m) + self.reserve_blocks()
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
    /// returns whether it emptied any segment and more cleaning is wanted.
    fn background_pass(&self, victims_max: usize) -> Result<bool> {
        let total = self.segment_blocks() * self.segment_count();
        let want = total * self.config().gc_free_percent.min(90) as u64 / 100;
        let (victims, seq, urgent) = {
            let mut m = self.lock_meta();
            if self.free_blocks_up_to(&m, want) >= want {
                return Ok(false);
            }
            let none = BTreeSet::new();
            let full = self.pick_victims(&m, &none, victims_max, false, false);
            if full.is_empty() {
                return Ok(false);
            }
            // What the pass will most likely pick (it cleans no others: see `keep_read_ahead`).
            let light = if self.light_cleaning(&m) {
                self.pick_victims(&m, &none, victims_max, true, false)
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
        let _raised = (urgent && !self.dev().writes_are_copies()).then(RaisedPrio::raise);
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
        let cleaned = if self.free_blocks_up_to(&m, want) >= want {
            Ok(0)
        } else {
            self.clean_at_most(&mut m, want, false, victims_max, 1)
                .map(|r| r.segments_cleaned)
        };
        m.bg_clean.read.clear();
        m.bg_clean.defer_io = false;
        let flush = std::mem::take(&mut m.bg_clean.flush);
        let end = m.writer.seq();
        let more = self.free_blocks_up_to(&m, want) < want;
        m.unlock_fair_and_write()?;
        let cleaned = cleaned?;
        // Under pressure the next pass follows at once, not a period later, while passes
        // empty segments.
        if urgent && cleaned > 0 && self.config().background_gc {
            self.wake_background(|w| w.clean = true);
        }
        if flush {
            self.flush_written(end, "after background cleaning")?;
        } else {
            // Every log and superblock the pass sealed is below `end + 1`.
            self.write_logs_until(end + 1)?;
        }
        Ok(cleaned > 0 && more)
    }
}
