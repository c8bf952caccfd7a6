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

use std::collections::HashMap;

use crate::tbfs::format::{self, BLOCK_U64};
use crate::tbfs::limits::{AGE_SIGNAL_CHAIN_DEATHS, MIN_RECLAIMABLE};
use crate::tbfs::log::WriterPlace;
use crate::tbfs::space::cleaning::spread_is_signal;
use crate::tbfs::space::copies_debt::CopiesDebt;
use crate::tbfs::space::segments::SegmentTable;
use crate::tbfs::state::{Engine, State};
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
pub(in crate::tbfs) struct RaisedPrio(Option<crate::sched::Prio>);

impl RaisedPrio {
    pub(in crate::tbfs) fn raise() -> RaisedPrio {
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
/// were all live when it was written), each weighed by `weight`. Uniform overwrites kill every
/// block at the same rate, so the rates agree and age says nothing a segment's emptiness does
/// not; hot and cold data die at rates far apart, and age tells the cold segments (worth
/// cleaning when fuller) from the hot.
fn age_spread(segments: impl Iterator<Item = (f64, f64, f64)>) -> f64 {
    let (mut n, mut w_sum, mut sum, mut sq) = (0u32, 0.0, 0.0, 0.0);
    for (u, age, w) in segments {
        if !(u > 0.0 && u < 1.0 && age > 0.0 && w > 0.0) {
            continue;
        }
        let l = (-u.ln() / age).ln();
        n += 1;
        w_sum += w;
        sum += w * l;
        sq += w * l * l;
    }
    if n < 2 {
        return 0.0;
    }
    let mean = sum / w_sum;
    (sq / w_sum - mean * mean).max(0.0).sqrt()
}

/// The age spread victim choice goes by ([`age_spread`]): over `candidates`, the segments a
/// pass may take, and `chain`, the roll-forward chain's segments a light pass may not (each as
/// its live blocks and its age), in segments of `segment_blocks` blocks.
///
/// A chain segment counts in proportion to the blocks it lost, fully from
/// [`AGE_SIGNAL_CHAIN_DEATHS`] on. The chain's segments are the youngest, and a young segment's
/// rate rests on its few dead blocks and on an age (since its newest log) that may be far
/// shorter than its blocks have been exposed, so under uniform overwrites their rates spread
/// by chance alone; counted whole they turned the signal on there. Under hot and cold
/// overwrites the chain's hot segments lose many blocks fast, and count.
pub(in crate::tbfs) fn light_pass_spread(
    segment_blocks: u64,
    candidates: impl Iterator<Item = (u32, f64)>,
    chain: impl Iterator<Item = (u32, f64)>,
) -> f64 {
    let u = |live: u32| f64::from(live) / segment_blocks as f64;
    let chain_weight = |live: u32| {
        let dead = segment_blocks.saturating_sub(u64::from(live));
        (dead as f64 / AGE_SIGNAL_CHAIN_DEATHS as f64).min(1.0)
    };
    age_spread(
        candidates
            .map(|(live, age)| (u(live), age, 1.0))
            .chain(chain.map(|(live, age)| (u(live), age, chain_weight(live)))),
    )
}

/// Whether segment ages carry a signal worth choosing victims by ([`age_spread`]), as
/// [`Engine::choose_victims`] decides it (the cleaner model's adaptive policy).
#[cfg(test)]
pub(in crate::tbfs) fn ages_carry_signal(segments: impl Iterator<Item = (f64, f64)>) -> bool {
    spread_is_signal(age_spread(segments.map(|(u, a)| (u, a, 1.0))))
}

/// Why a segment may not be a victim of a pass (the first rule that keeps it out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::tbfs) enum NotVictim {
    /// A log head of the writer's or the cleaner's is in it.
    Writer,
    /// It holds no live block.
    NothingLive,
    /// An earlier pass of this cleaning could not empty it.
    Skipped,
    /// A snapshot, an open view, a protection period or a pin keeps what it holds.
    Retained,
    /// A light pass's only: a log in it was written after the superblock's checkpoint (the
    /// roll-forward chain).
    Chain,
    /// A light pass's only: a block of it was dropped after the superblock's checkpoint in a
    /// way roll-forward does not replay (a checkpoint's rewrite, a delete, a truncate).
    DeadSinceSuperblock,
}

/// What a pass about to begin sees beside its victims ([`Engine::count_pass`]).
pub(in crate::tbfs) struct PassView<'a, F: Fn(usize) -> Option<NotVictim>> {
    pub seg: &'a SegmentTable,
    pub writer: WriterPlace,
    /// Blocks free.
    pub free: u64,
    /// Blocks of segments holding nothing live or pinned that are not free yet (they wait for
    /// a flush, or a checkpoint and its superblock).
    pub pending: u64,
    /// Why a segment may not be one of this pass's victims.
    pub why_not: F,
}

impl Engine {
    /// Counts what a pass about to clean `victims` sees (`FsCounters::cleaning_passes` and
    /// the figures beside it), among them which rules kept greedy's choice (as many of the
    /// emptiest written segments) from the pass.
    pub(in crate::tbfs) fn count_pass<F: Fn(usize) -> Option<NotVictim>>(
        &self,
        view: PassView<'_, F>,
        victims: &[usize],
    ) {
        let seg = view.seg;
        let mut written: Vec<(u32, usize)> = (0..self.segment_count() as usize)
            .filter(|&s| !view.writer.holds_segment(s as u64) && seg.live(s) > 0)
            .map(|s| (seg.live(s), s))
            .collect();
        // The emptiest the pass may take, as many as its victims: what greedy would take
        // within the rules, beside greedy's over every written segment.
        let why: Vec<Option<NotVictim>> = written.iter().map(|&(_, s)| (view.why_not)(s)).collect();
        let mut reach: Vec<u32> = written
            .iter()
            .zip(&why)
            .filter(|(_, w)| w.is_none())
            .map(|(&(l, _), _)| l)
            .collect();
        let chain = why.iter().filter(|&&w| w == Some(NotVictim::Chain)).count() as u64;
        let reach: u64 = emptiest(&mut reach, victims.len())
            .iter()
            .map(|&l| u64::from(l))
            .sum();
        let greedy = emptiest(&mut written, victims.len());
        let mut out = [0u64; 4];
        for &(_, s) in greedy {
            match (view.why_not)(s) {
                Some(NotVictim::Chain) => out[0] += 1,
                Some(NotVictim::DeadSinceSuperblock) => out[1] += 1,
                Some(NotVictim::Retained) => out[2] += 1,
                Some(NotVictim::Skipped) => out[3] += 1,
                Some(NotVictim::Writer | NotVictim::NothingLive) | None => {}
            }
        }
        let greedy: u64 = greedy.iter().map(|&(l, _)| u64::from(l)).sum();
        let live: u64 = seg.live_counts().iter().map(|&l| u64::from(l)).sum();
        let chosen: u64 = victims.iter().map(|&v| u64::from(seg.live(v))).sum();
        let mixed = victims.iter().filter(|&&v| seg.mixed(v)).count() as u64;
        let total = self.segment_blocks() * self.segment_count();
        self.count(|c| {
            c.cleaning_passes += 1;
            c.pass_free_blocks += view.free.min(total);
            c.pass_pending_blocks += view.pending;
            c.pass_live_blocks += live;
            c.victims_chosen += victims.len() as u64;
            c.victim_live_blocks += chosen;
            c.greedy_live_blocks += greedy;
            c.reach_live_blocks += reach;
            c.pass_chain_segments += chain;
            c.victims_mixed += mixed;
            c.greedy_kept_by_chain += out[0];
            c.greedy_kept_by_dead += out[1];
            c.greedy_kept_by_retention += out[2];
            c.greedy_kept_by_skip += out[3];
        });
    }

    /// Of `candidates` (segments that may be cleaned, each with live blocks), the best to clean,
    /// best first, as many as `budget` blocks of copies pay for and at most `most`: by
    /// cost-benefit when segment ages (from `written`, when each was last written, and `now`)
    /// carry a signal and `greedy` is not asked for, else by free fraction alone. `light`: the
    /// copies go out as data-only logs, not in a checkpoint, and cost less, with what they add
    /// to the next checkpoint charged by its bound ([`CopiesDebt`]). Also returns the
    /// spread of the ages ([`light_pass_spread`]) of the candidates and of `kept_out` (the
    /// roll-forward chain's segments, which a light pass may not take but whose ages still
    /// tell), whatever `greedy` asked (`None`: fewer than two segments to tell).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::tbfs) fn choose_victims(
        &self,
        seg: &SegmentTable,
        candidates: Vec<usize>,
        kept_out: &[usize],
        written: impl Fn(usize) -> i64,
        now: i64,
        budget: u64,
        most: usize,
        light: Option<CopiesDebt>,
        greedy: bool,
    ) -> (Vec<usize>, Option<f64>) {
        let sb = self.segment_blocks();
        let age_of = |s: usize| (now - written(s)).max(1) as f64;
        // Cost-benefit only when ages tell segments apart (hot and cold data): for data that
        // dies at one rate it picks fuller victims than greedy does, for no gain.
        let spread = (candidates.len() + kept_out.len() >= 2).then(|| {
            light_pass_spread(
                sb,
                candidates.iter().map(|&s| (seg.live(s), age_of(s))),
                kept_out.iter().map(|&s| (seg.live(s), age_of(s))),
            )
        });
        let greedy = greedy || !spread.is_some_and(spread_is_signal);
        let mut scored: Vec<(f64, usize)> = candidates
            .into_iter()
            .filter_map(|s| {
                let u = seg.live(s) as f64 / sb as f64;
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
        let mut budget = budget;
        let mut out = Vec::new();
        let mut copied = 0;
        for (_, s) in scored {
            let live = seg.live(s) as u64;
            // What the logs' estimate charges for moving them: the blocks, and for a checkpoint
            // the map nodes and inode records of the files they belong to.
            let cost = if let Some(debt) = &light {
                // At least what `ensure_space` asks for them (their summaries, pads) and
                // keeps for what they add to the next checkpoint.
                crate::tbfs::commit::room::cycle_cost(live) + debt.more(copied, live)
            } else {
                live + live / 4 + 16
            };
            if cost > budget || out.len() == most {
                break;
            }
            budget -= cost;
            copied += live;
            out.push(s);
        }
        (out, spread)
    }

    /// Reads the background pass's victims whole, without `meta`, once every log sealed
    /// before `seq` is written.
    pub(in crate::tbfs) fn read_victims(
        &self,
        victims: &[usize],
        seq: u64,
    ) -> Result<HashMap<usize, Vec<u8>>> {
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
}

/// The `n` smallest of `items` (all of them if fewer), in no order.
fn emptiest<T: Ord>(items: &mut [T], n: usize) -> &[T] {
    let n = n.min(items.len());
    if n > 0 {
        items.select_nth_unstable(n - 1);
    }
    &items[..n]
}
