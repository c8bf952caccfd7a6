//! `tailbound bench sched-overhead`: what tailbound's scheduler costs in CPU per request, with a
//! device that completes at once so nothing but the scheduler is measured.
//!
//! Two parts per policy and tenant count:
//! - **policy**: the decision logic alone ([`Queue`]), driven by one thread in a closed loop: every
//!   tenant keeps [`QUEUED_PER_TENANT`] requests queued, each completion is answered by a new request
//!   of the same tenant. The figure is the thread's CPU time per request. This is the part that
//!   compares with a kernel elevator's own per-request cost.
//! - **executor**: the whole [`Scheduler`] (submission, dispatcher threads, completion replies) in
//!   front of an anonymous memory pool, one thread per tenant writing 4 KiB blocks as fast as it
//!   can, against the same threads writing the pool directly. The figures are requests per
//!   second and the process's CPU time per request, and the scheduler's share: its CPU per
//!   request beyond the direct run's.
//!
//! Offsets never touch, so no two requests merge and a dispatch is one request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::progress::Progress;
use crate::report::{Table, TargetCheck};
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::sched::queue::{Queue, Request};
use tailbound::sched::{Config, Op, Policy, Prio, Scheduler, TenantId};

/// Requests each tenant keeps queued in the policy part.
pub const QUEUED_PER_TENANT: u64 = 4;
/// The size of every request.
pub const REQUEST_BYTES: u64 = 4096;
/// The most CPU the `default` policy may spend per request (the target).
pub const POLICY_NS_TARGET: f64 = 1000.0;
/// The rate the `default` policy must keep through the executor with [`TARGET_TENANTS`] tenants.
pub const EXECUTOR_RATE_TARGET: f64 = 100_000.0;
/// The tenant count the targets are read at.
pub const TARGET_TENANTS: usize = 4;
/// Room per tenant in the pool the executor part writes.
const REGION_BYTES: u64 = 8 << 20;
/// Longest split a request could see: far above [`REQUEST_BYTES`], so nothing is split.
const MAX_IO: u64 = 1 << 20;

/// The experiment's settings.
#[derive(Debug, Clone)]
pub struct SchedOverheadBench {
    pub policies: Vec<Policy>,
    pub tenants: Vec<usize>,
    /// Requests per policy case.
    pub requests: u64,
    /// How long each executor case runs.
    pub duration: Duration,
    /// Each case this many times; the report keeps every run and their medians.
    pub repeats: u32,
}

impl SchedOverheadBench {
    pub fn full() -> SchedOverheadBench {
        SchedOverheadBench {
            policies: Policy::ALL.to_vec(),
            tenants: vec![1, 4, 16],
            requests: 2_000_000,
            duration: Duration::from_secs(2),
            repeats: 3,
        }
    }

    pub fn quick() -> SchedOverheadBench {
        SchedOverheadBench {
            requests: 200_000,
            duration: Duration::from_millis(500),
            repeats: 1,
            ..SchedOverheadBench::full()
        }
    }

    pub fn case_count(&self) -> usize {
        self.policies.len() * self.tenants.len()
    }
}

/// One policy and tenant count: every run's figures and their medians.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadCase {
    pub policy: &'static str,
    pub tenants: usize,
    /// Policy part: CPU ns per request, one per run.
    pub policy_ns: Vec<f64>,
    /// Executor part: requests per second through the scheduler, one per run.
    pub executor_rate: Vec<f64>,
    /// Executor part: process CPU ns per request through the scheduler, one per run.
    pub executor_ns: Vec<f64>,
    /// The same threads writing the pool directly: requests per second and CPU ns per request.
    pub direct_rate: Vec<f64>,
    pub direct_ns: Vec<f64>,
    pub policy_ns_median: f64,
    pub executor_rate_median: f64,
    pub executor_ns_median: f64,
    /// Median of (executor − direct) CPU ns per request, run by run.
    pub scheduler_ns_median: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OverheadReport {
    pub experiment: &'static str,
    pub request_bytes: u64,
    pub requests: u64,
    pub duration_s: f64,
    pub repeats: u32,
    pub cases: Vec<OverheadCase>,
    pub targets: Vec<TargetCheck>,
}

fn config(policy: Policy) -> Config {
    Config {
        policy,
        max_io: Some(MAX_IO),
        ..Config::default()
    }
}

/// Tenant `i`'s priority and weight: best effort at a spread of levels, weights 1 to 4.
fn tenant_of(i: usize) -> (Prio, u32) {
    let level = (i % 8) as u8;
    (
        Prio {
            class: tailbound::sched::Class::Be,
            level,
        },
        1 + (i % 4) as u32,
    )
}

/// The `k`th request of tenant `t`: a block in its own region, never next to its last one.
fn request(t: TenantId, k: u64) -> Request {
    let blocks = REGION_BYTES / REQUEST_BYTES / 2;
    Request {
        tenant: t,
        op: Op::Write,
        offset: u64::from(t.0) * REGION_BYTES + (k % blocks) * 2 * REQUEST_BYTES,
        len: REQUEST_BYTES,
    }
}

/// The policy part: CPU nanoseconds per request of `requests` requests through a [`Queue`].
pub fn policy_ns(policy: Policy, tenants: usize, requests: u64) -> Result<f64, String> {
    let mut q = Queue::new(&config(policy));
    let ids: Vec<TenantId> = (0..tenants)
        .map(|i| {
            let (prio, weight) = tenant_of(i);
            q.add_tenant(&format!("tenant {i}"), prio, weight)
        })
        .collect();
    let mut issued = vec![0u64; tenants];
    let mut by_req = std::collections::HashMap::new();
    let mut now = 0u64;
    for (i, &t) in ids.iter().enumerate() {
        for _ in 0..QUEUED_PER_TENANT {
            let id = q.push(now, request(t, issued[i]));
            issued[i] += 1;
            by_req.insert(id, i);
        }
    }
    let mut done = 0u64;
    let cpu0 = tailbound::sys::time::thread_cpu_ns();
    while done < requests {
        now += 1_000;
        let d = q.pop(now).ok_or_else(|| {
            format!(
                "{} queue with work queued dispatched nothing",
                policy.name()
            )
        })?;
        for c in q.complete(now + 500, &d) {
            let i = by_req
                .remove(&c.req)
                .ok_or_else(|| format!("completion of unknown request {}", c.req))?;
            done += 1;
            let id = q.push(now + 500, request(ids[i], issued[i]));
            issued[i] += 1;
            by_req.insert(id, i);
        }
    }
    let cpu = tailbound::sys::time::thread_cpu_ns().saturating_sub(cpu0);
    Ok(cpu as f64 / done as f64)
}

/// One executor run: `tenants` threads writing 4 KiB blocks for `duration`, through a scheduler
/// with `policy` or (`None`) straight to the pool. Returns (requests per second, process CPU ns
/// per request).
pub fn executor_run(
    policy: Option<Policy>,
    tenants: usize,
    duration: Duration,
) -> Result<(f64, f64), String> {
    let bytes = tenants as u64 * REGION_BYTES;
    let pool: Arc<dyn Device> = Arc::new(
        MemoryPool::anonymous(bytes).map_err(|e| format!("{bytes} bytes of memory: {e}"))?,
    );
    // Touch every page first so the runs measure no page faults.
    let zero = vec![0u8; REGION_BYTES as usize];
    for i in 0..tenants as u64 {
        pool.write_at(i * REGION_BYTES, &zero)
            .map_err(|e| format!("clearing the pool: {e}"))?;
    }
    let sched = match policy {
        Some(p) => Some(
            Scheduler::new(Arc::clone(&pool), config(p))
                .map_err(|e| format!("starting the scheduler: {e}"))?,
        ),
        None => None,
    };
    let ids: Vec<Option<TenantId>> = (0..tenants)
        .map(|i| {
            sched.as_ref().map(|s| {
                let (prio, weight) = tenant_of(i);
                s.add_tenant(&format!("tenant {i}"), prio, weight)
            })
        })
        .collect();
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let start = std::sync::Barrier::new(tenants + 1);
    let (elapsed, cpu) = std::thread::scope(|s| -> Result<(Duration, Duration), String> {
        let handles: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let (pool, sched, stop, count, start) = (&pool, &sched, &stop, &count, &start);
                s.spawn(move || -> Result<(), String> {
                    let block = vec![i as u8 | 1; REQUEST_BYTES as usize];
                    let tenant = TenantId(i as u32);
                    let mut k = 0u64;
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let r = request(tenant, k);
                        match (sched, id) {
                            (Some(s), Some(t)) => s.write_at(*t, r.offset, &block),
                            _ => pool.write_at(r.offset, &block),
                        }
                        .map_err(|e| format!("tenant {i}'s write at {}: {e}", r.offset))?;
                        k += 1;
                    }
                    count.fetch_add(k, Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        let cpu0 = cpu_now()?;
        let t0 = Instant::now();
        start.wait();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut first_error = None;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert_with(|| "a tenant thread panicked".to_string());
                }
            }
        }
        let elapsed = t0.elapsed();
        let cpu = cpu_now()?.saturating_sub(cpu0);
        match first_error {
            Some(e) => Err(e),
            None => Ok((elapsed, cpu)),
        }
    })?;
    drop(sched);
    let n = count.load(Ordering::Relaxed).max(1) as f64;
    Ok((n / elapsed.as_secs_f64(), cpu.as_nanos() as f64 / n))
}

fn cpu_now() -> Result<Duration, String> {
    let t = tailbound::sys::proc::process_cpu_times().map_err(|e| format!("getrusage: {e}"))?;
    Ok(t.user + t.system)
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

impl SchedOverheadBench {
    pub fn run(&self, progress: &Progress) -> Result<OverheadReport, String> {
        if self.case_count() == 0 || self.repeats == 0 || self.requests == 0 {
            return Err("nothing to run: no policy, tenant count, repeat or request".into());
        }
        if self.tenants.contains(&0) {
            return Err("a tenant count must be at least 1".into());
        }
        let mut cases = Vec::new();
        for &tenants in &self.tenants {
            for &policy in &self.policies {
                progress.set_message(format!("{} with {tenants} tenants", policy.name()));
                let mut c = OverheadCase {
                    policy: policy.name(),
                    tenants,
                    policy_ns: Vec::new(),
                    executor_rate: Vec::new(),
                    executor_ns: Vec::new(),
                    direct_rate: Vec::new(),
                    direct_ns: Vec::new(),
                    policy_ns_median: f64::NAN,
                    executor_rate_median: f64::NAN,
                    executor_ns_median: f64::NAN,
                    scheduler_ns_median: f64::NAN,
                };
                let mut extra = Vec::new();
                for _ in 0..self.repeats {
                    c.policy_ns.push(policy_ns(policy, tenants, self.requests)?);
                    // Direct and scheduled runs alternate, so drift on the host hits both.
                    let (dr, dn) = executor_run(None, tenants, self.duration)?;
                    let (er, en) = executor_run(Some(policy), tenants, self.duration)?;
                    c.direct_rate.push(dr);
                    c.direct_ns.push(dn);
                    c.executor_rate.push(er);
                    c.executor_ns.push(en);
                    extra.push(en - dn);
                }
                c.policy_ns_median = median(&c.policy_ns);
                c.executor_rate_median = median(&c.executor_rate);
                c.executor_ns_median = median(&c.executor_ns);
                c.scheduler_ns_median = median(&extra);
                cases.push(c);
                progress.inc(1);
            }
        }
        let targets = targets(&cases);
        Ok(OverheadReport {
            experiment: "sched-overhead",
            request_bytes: REQUEST_BYTES,
            requests: self.requests,
            duration_s: self.duration.as_secs_f64(),
            repeats: self.repeats,
            cases,
            targets,
        })
    }
}

fn targets(cases: &[OverheadCase]) -> Vec<TargetCheck> {
    let at = cases
        .iter()
        .find(|c| c.policy == Policy::Default.name() && c.tenants == TARGET_TENANTS);
    let Some(c) = at else {
        let missing =
            format!("not measured: no `default` case with {TARGET_TENANTS} tenants in this run");
        return vec![TargetCheck {
            target: "default policy at 4 tenants".into(),
            measured: missing,
            met: false,
        }];
    };
    vec![
        TargetCheck {
            target: format!(
                "default policy, {TARGET_TENANTS} tenants: decision CPU <= {:.0} ns per request",
                POLICY_NS_TARGET
            ),
            measured: format!("{:.0} ns (policy part, median)", c.policy_ns_median),
            met: c.policy_ns_median <= POLICY_NS_TARGET,
        },
        TargetCheck {
            target: format!(
                "default policy, {TARGET_TENANTS} tenants: >= {:.0}K requests/s through the executor",
                EXECUTOR_RATE_TARGET / 1e3
            ),
            measured: format!(
                "{:.0}K requests/s (median), {:.0} ns CPU per request beyond writing directly",
                c.executor_rate_median / 1e3,
                c.scheduler_ns_median
            ),
            met: c.executor_rate_median >= EXECUTOR_RATE_TARGET,
        },
    ]
}

impl OverheadReport {
    /// One row per case: the medians, and the direct run's for reference.
    pub fn table(&self) -> Table {
        let mut t = Table::new(
            [
                "policy",
                "tenants",
                "policy ns/req",
                "executor req/s",
                "executor CPU ns/req",
                "direct req/s",
                "direct CPU ns/req",
                "scheduler CPU ns/req",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        );
        for c in &self.cases {
            t.push(vec![
                c.policy.to_string(),
                c.tenants.to_string(),
                format!("{:.0}", c.policy_ns_median),
                format!("{:.0}", c.executor_rate_median),
                format!("{:.0}", c.executor_ns_median),
                format!("{:.0}", median(&c.direct_rate)),
                format!("{:.0}", median(&c.direct_ns)),
                format!("{:.0}", c.scheduler_ns_median),
            ]);
        }
        t
    }

    /// The table, then the targets.
    pub fn to_markdown(&self) -> String {
        format!(
            "{}\nTargets\n{}",
            self.table().to_markdown(),
            crate::report::targets_markdown(&self.targets)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_serves_every_request_of_the_closed_loop() {
        for policy in Policy::ALL {
            for tenants in [1, 4, 16] {
                let ns = policy_ns(policy, tenants, 5_000).unwrap();
                assert!(
                    ns.is_finite() && ns > 0.0,
                    "{} {tenants}: {ns}",
                    policy.name()
                );
            }
        }
    }

    #[test]
    fn the_executor_part_counts_writes_through_the_scheduler_and_without() {
        for policy in [None, Some(Policy::Default)] {
            let (rate, ns) = executor_run(policy, 2, Duration::from_millis(50)).unwrap();
            assert!(rate > 0.0 && ns > 0.0, "{policy:?}: {rate} req/s, {ns} ns");
        }
    }

    #[test]
    fn targets_name_what_is_missing() {
        let t = targets(&[]);
        assert_eq!(t.len(), 1);
        assert!(!t[0].met);
        assert!(t[0].measured.contains("not measured"));
    }

    #[test]
    fn requests_of_one_tenant_never_touch() {
        let t = TenantId(3);
        let a = request(t, 0);
        let b = request(t, 1);
        assert!(b.offset >= a.offset + 2 * REQUEST_BYTES);
        assert!(a.offset >= 3 * REGION_BYTES && b.offset + REQUEST_BYTES <= 4 * REGION_BYTES);
    }
}
