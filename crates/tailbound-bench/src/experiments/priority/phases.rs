//! Where the tbfs writer's slowest appends spent their time: each append and its `fdatasync`
//! split into the phases tbfs and `sched` mark ([`tailbound::phases`]), the slowest few kept for
//! the JSON report, and every append's phases summed.

use std::collections::BTreeMap;

use serde::Serialize;
use tailbound::phases::{ByMetaWork, Hold, PhaseTimes, META_WORKS, PHASES};
use tailbound::tbfs::FsCounters;

/// How many of a case's slowest appends keep their breakdown.
pub const SLOWEST_KEPT: usize = 5;

/// One append's (with its sync) time by phase, in µs; phases with no time are left out.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlowWrite {
    /// Which append of the case (from 0).
    pub index: u64,
    pub total_us: f64,
    pub phases_us: BTreeMap<&'static str, f64>,
    /// Checkpoints the writer laid out in it, device requests it waited for, and how often one
    /// of those was moved to a priority lent to the writer.
    pub checkpoints: u32,
    pub requests: u32,
    pub boosts: u32,
    /// Space checks that found room short and waited, under `meta`, for every log in flight
    /// (other writers' payloads included), and those that went on without that wait (a
    /// real-time writer's, above the floor).
    pub space_waits: u32,
    pub space_waits_left: u32,
    /// Waits for the device made while holding `meta`, and their summed time.
    pub meta_device_waits: u32,
    pub meta_device_wait_us: f64,
    /// Of `device_io` and `device_flush`, the device's own time for the dispatches that carried
    /// the requests; the rest was spent queued in the scheduler.
    pub served_us: f64,
}

/// One of the longest holds of the pool's `meta` lock while the writer ran, by any thread.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MetaHold {
    pub held_us: f64,
    /// Where the lock was taken (file:line in tailbound).
    pub taken_at: String,
    /// The holding thread's name and I/O priority.
    pub holder: String,
    /// What the holder did meanwhile (its phases, as [`SlowWrite`]'s).
    pub phases: SlowWrite,
}

impl MetaHold {
    pub fn of(h: &Hold) -> MetaHold {
        MetaHold {
            held_us: us(h.held_ns),
            taken_at: format!("{}:{}", h.taken_at.file(), h.taken_at.line()),
            holder: h.holder.clone(),
            phases: SlowWrite::of(0, &h.phases),
        }
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl SlowWrite {
    fn of(index: u64, t: &PhaseTimes) -> SlowWrite {
        SlowWrite {
            index,
            total_us: us(t.total()),
            phases_us: PHASES
                .iter()
                .filter(|p| t.get(**p) > 0)
                .map(|p| (p.name(), us(t.get(*p))))
                .collect(),
            checkpoints: t.checkpoints,
            requests: t.requests,
            boosts: t.boosts,
            space_waits: t.space_waits,
            space_waits_left: t.space_waits_left,
            meta_device_waits: t.meta_device_waits,
            meta_device_wait_us: us(t.meta_device_wait_ns),
            served_us: us(t.served_ns),
        }
    }
}

/// The pool's counts over a case's appends, every thread's (the copy's included).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PoolWaits {
    /// Waits for the device made by a thread holding `meta` (an I/O or flush, a payload, the
    /// log writer), and their summed time: every thread needing `meta` waited with them.
    pub meta_device_waits: u64,
    pub meta_device_wait_ms: f64,
    /// Space checks that waited for the logs in flight under `meta`, that went on without
    /// that wait (a real-time writer's above the floor), and that waited with `meta` let go.
    pub space_waits: u64,
    pub space_waits_left: u64,
    pub space_waits_outside: u64,
    /// The waits for the device under `meta` by what the hold was for (the outermost work the
    /// engine marked, [`tailbound::phases::MetaWork`]) and by the step that waited (the
    /// innermost); kinds with no wait are left out.
    pub meta_device_by_hold: Vec<WorkWaits>,
    pub meta_device_by_step: Vec<WorkWaits>,
}

/// Waits for the device under `meta` of one kind of work.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct WorkWaits {
    pub work: &'static str,
    pub waits: u64,
    pub ms: f64,
}

/// The kinds of `later` beyond `earlier` that waited, in [`META_WORKS`] order.
pub fn work_waits(later: &ByMetaWork, earlier: &ByMetaWork) -> Vec<WorkWaits> {
    let d = tailbound::phases::by_work_since(later, earlier);
    META_WORKS
        .iter()
        .zip(d)
        .filter(|(_, w)| w.waits > 0)
        .map(|(k, w)| WorkWaits {
            work: k.name(),
            waits: w.waits,
            ms: w.ns as f64 / 1e6,
        })
        .collect()
}

impl PoolWaits {
    /// What changed between the pool's counters `before` and `after`.
    pub fn between(before: &FsCounters, after: &FsCounters) -> PoolWaits {
        PoolWaits {
            meta_device_waits: after.meta_device_waits - before.meta_device_waits,
            meta_device_wait_ms: (after.meta_device_wait_ns - before.meta_device_wait_ns) as f64
                / 1e6,
            space_waits: after.space_waits - before.space_waits,
            space_waits_left: after.space_waits_left - before.space_waits_left,
            space_waits_outside: after.space_waits_outside - before.space_waits_outside,
            meta_device_by_hold: work_waits(&after.meta_device_outer, &before.meta_device_outer),
            meta_device_by_step: work_waits(&after.meta_device_inner, &before.meta_device_inner),
        }
    }
}

/// A case's appends by phase: the slowest [`SLOWEST_KEPT`], and the sum over all.
#[derive(Debug, Default, Clone)]
pub struct PhaseLog {
    count: u64,
    sum: PhaseTimes,
    slowest: Vec<(u64, PhaseTimes)>,
    holds: Vec<MetaHold>,
    log_writer_holds: Vec<MetaHold>,
    pool: Option<PoolWaits>,
}

impl PhaseLog {
    /// Notes the next append's phases.
    pub fn record(&mut self, t: PhaseTimes) {
        let index = self.count;
        self.count += 1;
        for (s, n) in self.sum.ns.iter_mut().zip(t.ns) {
            *s = s.saturating_add(n);
        }
        self.sum.checkpoints += t.checkpoints;
        self.sum.requests += t.requests;
        self.sum.boosts += t.boosts;
        self.sum.served_ns += t.served_ns;
        self.sum.space_waits += t.space_waits;
        self.sum.space_waits_left += t.space_waits_left;
        self.sum.meta_device_waits += t.meta_device_waits;
        self.sum.meta_device_wait_ns += t.meta_device_wait_ns;
        self.slowest.push((index, t));
        // Slowest first; ties keep the earlier append.
        self.slowest
            .sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(&b.0)));
        self.slowest.truncate(SLOWEST_KEPT);
    }

    /// The longest holds of `meta` while the appends ran.
    pub fn set_holds(&mut self, meta: &[Hold], log_writer: &[Hold]) {
        self.holds = meta.iter().map(MetaHold::of).collect();
        self.log_writer_holds = log_writer.iter().map(MetaHold::of).collect();
    }

    /// The pool's counts over the appends.
    pub fn set_pool(&mut self, waits: PoolWaits) {
        self.pool = Some(waits);
    }

    pub fn pool(&self) -> Option<PoolWaits> {
        self.pool.clone()
    }

    pub fn holds(&self) -> Vec<MetaHold> {
        self.holds.clone()
    }

    pub fn log_writer_holds(&self) -> Vec<MetaHold> {
        self.log_writer_holds.clone()
    }

    /// The slowest appends, slowest first.
    pub fn slowest(&self) -> Vec<SlowWrite> {
        self.slowest
            .iter()
            .map(|(i, t)| SlowWrite::of(*i, t))
            .collect()
    }

    /// Every append's phases summed (its `index` is the number of appends).
    pub fn sum(&self) -> SlowWrite {
        SlowWrite::of(self.count, &self.sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailbound::phases::Phase;

    fn times(flush_ns: u64, meta_ns: u64) -> PhaseTimes {
        let mut t = PhaseTimes::default();
        t.ns[Phase::DeviceFlush as usize] = flush_ns;
        t.ns[Phase::MetaWait as usize] = meta_ns;
        t.requests = 1;
        t
    }

    #[test]
    fn the_slowest_appends_are_kept_with_their_phases_and_all_are_summed() {
        let mut log = PhaseLog::default();
        for k in 0..20u64 {
            log.record(times(1_000 * k, if k == 3 { 900_000 } else { 0 }));
        }
        let slowest = log.slowest();
        assert_eq!(slowest.len(), SLOWEST_KEPT);
        assert_eq!(slowest[0].index, 3);
        assert_eq!(slowest[0].phases_us["meta_wait"], 900.0);
        assert_eq!(slowest[0].phases_us["device_flush"], 3.0);
        assert!(!slowest[0].phases_us.contains_key("checkpoint"));
        let order: Vec<u64> = slowest.iter().map(|s| s.index).collect();
        assert_eq!(order, vec![3, 19, 18, 17, 16]);
        let sum = log.sum();
        assert_eq!(sum.index, 20);
        assert_eq!(sum.requests, 20);
        assert_eq!(sum.phases_us["device_flush"], 190.0);
        assert_eq!(sum.phases_us["meta_wait"], 900.0);
    }
}
