//! The policy core: a queue of requests that decides what goes to the device next, driven by
//! explicit `now` times (nanoseconds on any monotonic clock) so the simulator and the real
//! executor share it. It splits requests on `push`, merges adjacent pieces on `pop`, keeps the
//! dispatch depth, and records per-tenant statistics on `complete`.
//!
//! Weighted fairness is WF2Q+ over the tenants of a group (one group per class for
//! [`Policy::Default`], a single group for [`Policy::Fair`]): each backlogged tenant has a start
//! tag `S` and, for its head piece of cost `c`, a finish tag `F = S + c / weight`; the group's
//! virtual time `V` advances by `c / (sum of backlogged weights)` per dispatch and never falls
//! behind the smallest start tag. Among tenants with `S <= V` the smallest `F` goes first. A
//! tenant that empties its queue and comes back restarts at `max(V - credit, S_last)`, where the
//! credit is the virtual time the others advance while `depth` pieces of `max_io` are served
//! (times [`CREDIT_PIECES`]): a tenant whose queue emptied only because its own last pieces were
//! in the device gets back what it lost meanwhile; one that was idle a long time gets at most that
//! much, no windfall. Under [`Policy::Fair`] idle-class tenants are served by the same tags but
//! their service does not advance `V` (`Queue::moves_clock`).
//!
//! Does no I/O and reads no clock.

use std::collections::{HashMap, VecDeque};

use hdrhistogram::Histogram;

use super::{Class, Config, DeviceProfile, Op, Policy, Prio, TenantId, TenantStats};

/// Nanoseconds on the caller's clock.
pub type Nanos = u64;

/// Names one submitted request inside a [`Queue`].
pub type ReqId = u64;

/// How many rounds of `depth` pieces of `max_io` a rejoining tenant may be credited.
pub const CREDIT_PIECES: f64 = 1.0;

/// RT completions under half the target before the adaptive depth rises by one.
pub const DEPTH_RAISE_AFTER: u32 = 16;

/// Largest dispatch merging may build when splitting is off (`fifo` never merges).
pub const MERGED_BYTES_MAX: u64 = 64 << 20;

/// Longest latency the histograms hold (one hour, in nanoseconds); longer values are clamped.
/// A request costing at most 1/this of the piece an anticipated tenant last completed is served
/// during the anticipation window anyway: idling protects a share against large dispatches, and
/// a small one (a tbfs log summary, say) delays the anticipated tenant by little.
pub const SMALL_PASSES_ANTICIPATION: f64 = 8.0;
const HIST_NS_MAX: u64 = 3_600_000_000_000;

/// A request as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub tenant: TenantId,
    pub op: Op,
    pub offset: u64,
    /// Bytes; 0 for a flush.
    pub len: u64,
}

/// A part of one request, as queued and dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub req: ReqId,
    pub tenant: TenantId,
    pub op: Op,
    /// Device offset of this piece.
    pub offset: u64,
    pub len: u64,
    /// Where this piece starts within its request's buffer.
    pub req_offset: u64,
    /// Global submission order of the piece.
    pub(crate) seq: u64,
    /// When the piece became the head of its tenant's queue (or was submitted, if later).
    pub(crate) head_since: Nanos,
}

/// One device request the queue decided on: one or more adjacent pieces, in device order.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub class: Class,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    pub pieces: Vec<Piece>,
    /// The modelled device cost charged for it, in nanoseconds.
    pub cost_ns: f64,
    pub dispatched_at: Nanos,
    /// Served ahead of a higher class because its head waited `aging`.
    pub aged: bool,
    /// This dispatch's number, unique within its queue.
    pub flight: u64,
}

/// A request all of whose pieces completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub req: ReqId,
    pub tenant: TenantId,
    /// Submission to completion.
    pub latency_ns: Nanos,
}

#[derive(Debug)]
struct ReqTrack {
    tenant: TenantId,
    arrival: Nanos,
    first_dispatch: Option<Nanos>,
    pieces_left: u64,
    bytes: u64,
}

#[derive(Debug)]
struct TenantState {
    name: String,
    prio: Prio,
    weight: u32,
    queue: VecDeque<Piece>,
    /// WF2Q+ start tag (virtual time); while idle, the finish tag of its last piece.
    start: f64,
    /// Its threads waiting for shared work another thread holds ([`Queue::hold`]).
    held: u32,
    /// The virtual time the clock moved past its start while it was held with nothing queued:
    /// what its next request may restart behind the clock, besides the usual credit.
    held_credit: f64,
    bytes: u64,
    ops: u64,
    splits: u64,
    merges: u64,
    queue_ns: Histogram<u64>,
    service_ns: Histogram<u64>,
}

/// The depth limit in effect, lowered while RT requests miss their latency target.
#[derive(Debug, Clone)]
pub struct DepthControl {
    max: usize,
    limit: usize,
    target_ns: Option<u64>,
    good: u32,
}

impl DepthControl {
    pub fn new(max: usize, target_ns: Option<u64>) -> DepthControl {
        let max = max.max(1);
        DepthControl {
            max,
            limit: max,
            target_ns,
            good: 0,
        }
    }

    /// The number of requests allowed in the device now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Feeds one RT request's submission-to-completion latency: halves the limit on a miss, adds
    /// one after [`DEPTH_RAISE_AFTER`] completions under half the target.
    pub fn on_rt_complete(&mut self, latency_ns: u64) {
        let Some(target) = self.target_ns else { return };
        if latency_ns > target {
            self.limit = (self.limit / 2).max(1);
            self.good = 0;
        } else if latency_ns < target / 2 {
            self.good += 1;
            if self.good >= DEPTH_RAISE_AFTER {
                self.limit = (self.limit + 1).min(self.max);
                self.good = 0;
            }
        }
    }
}

/// The scheduler's queue; see the module documentation.
#[derive(Debug)]
pub struct Queue {
    policy: Policy,
    max_io: Option<u64>,
    merge_cap: usize,
    aging_ns: Nanos,
    profile: DeviceProfile,
    tenants: Vec<TenantState>,
    /// Virtual time per fairness group (by class rank for `default`; group 0 for `fair`).
    vtime: [f64; 3],
    reqs: HashMap<ReqId, ReqTrack>,
    next_req: ReqId,
    next_seq: u64,
    queued: usize,
    in_flight: usize,
    depth: DepthControl,
    anticipation_ns: Option<Nanos>,
    /// The tenant whose last queued piece completed most recently, when it completed, and the
    /// cost of that dispatch (the guess for its next one): the one anticipation waits for.
    last_done: Option<(usize, Nanos, f64)>,
    /// [`Config::flush_debt`].
    flush_debt: Option<u64>,
    /// Bytes of writes completed since the last flush was dispatched.
    unflushed: u64,
    /// Flushes the queue dispatched on its own because of the flush debt.
    debt_flushes: u64,
    /// Write dispatches completed so far.
    writes_done: u64,
    /// The flush dispatches in the device.
    flushes_in_flight: Vec<FlushInFlight>,
    next_flight: u64,
    /// [`Config::rt_window`], when the policy ranks classes.
    rt_window_ns: Option<Nanos>,
    /// When a real-time request last arrived or a real-time dispatch last completed.
    rt_seen: Option<Nanos>,
    /// Real-time dispatches in the device.
    rt_in_flight: usize,
}

/// A flush dispatch in the device.
#[derive(Debug)]
struct FlushInFlight {
    /// Its dispatch's number ([`Dispatch::flight`]).
    flight: u64,
    /// `writes_done` when it was dispatched: the writes it makes durable.
    covers: u64,
    /// Flush requests that ride on it: no write completed between its dispatch and their
    /// arrival, so it makes durable everything they ask for, and they complete with it.
    riders: Vec<Piece>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_NS_MAX, 3).expect("constant histogram bounds are valid")
}

fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, HIST_NS_MAX));
}

impl Queue {
    /// A queue with `cfg`'s policy, limits and device profile. `cfg` must be valid
    /// ([`Config::validate`]).
    pub fn new(cfg: &Config) -> Queue {
        Queue {
            policy: cfg.policy,
            max_io: cfg.max_io,
            merge_cap: cfg.merge_cap,
            aging_ns: u64::try_from(cfg.aging.as_nanos()).unwrap_or(u64::MAX),
            profile: cfg.profile.clone(),
            tenants: Vec::new(),
            vtime: [0.0; 3],
            reqs: HashMap::new(),
            next_req: 0,
            next_seq: 0,
            queued: 0,
            in_flight: 0,
            depth: DepthControl::new(
                cfg.depth,
                cfg.adaptive_rt_target
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            ),
            anticipation_ns: cfg
                .anticipation
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            last_done: None,
            flush_debt: cfg.flush_debt,
            unflushed: 0,
            debt_flushes: 0,
            writes_done: 0,
            flushes_in_flight: Vec::new(),
            next_flight: 0,
            rt_window_ns: cfg
                .rt_window
                .filter(|_| matches!(cfg.policy, Policy::Priority | Policy::Default))
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            rt_seen: None,
            rt_in_flight: 0,
        }
    }

    /// Whether a real-time tenant is active at `now` ([`Config::rt_window`]): one of its requests
    /// is queued or in the device, or one arrived or completed less than the window ago. Always
    /// false under `fifo` and `fair`, which do not rank classes, or without a window.
    pub fn rt_active(&self, now: Nanos) -> bool {
        let Some(window) = self.rt_window_ns else {
            return false;
        };
        self.rt_in_flight > 0
            || self.rt_seen.is_some_and(|s| now < s.saturating_add(window))
            || self
                .tenants
                .iter()
                .any(|s| s.prio.class == Class::Rt && !s.queue.is_empty())
    }

    /// The largest dispatch of `op` a lower class gets while a real-time tenant is active: the
    /// split size cut to [`DeviceProfile::guard_piece`] (`None` where nothing is split).
    pub fn guard_size(&self, op: Op) -> Option<u64> {
        self.split_size(op)
            .map(|full| full.min(self.profile.guard_piece(op)))
    }

    /// Flushes dispatched on the queue's own account ([`Config::flush_debt`]): dispatches with
    /// no pieces, which the executor performs like any flush.
    pub fn debt_flushes(&self) -> u64 {
        self.debt_flushes
    }

    /// Whether a write of `class` must wait for a flush of what the device cached: the debt is
    /// reached (twice it for a real-time write, which goes ahead of the flush until then).
    fn flush_due(&self, class: Class) -> bool {
        let Some(limit) = self.flush_debt else {
            return false;
        };
        let due = if class == Class::Rt {
            limit.saturating_mul(2)
        } else {
            limit
        };
        self.unflushed >= due
    }

    /// Changes the anticipation window ([`Config::anticipation`]).
    pub fn set_anticipation(&mut self, window: Option<std::time::Duration>) {
        self.anticipation_ns = window.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.last_done = None;
    }

    /// The anticipation window ([`Config::anticipation`]).
    pub fn anticipation(&self) -> Option<std::time::Duration> {
        self.anticipation_ns.map(std::time::Duration::from_nanos)
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Adds a tenant; `weight` 0 is taken as 1.
    pub fn add_tenant(&mut self, name: &str, prio: Prio, weight: u32) -> TenantId {
        let id = TenantId(self.tenants.len() as u32);
        let group = self.group_of_prio(prio);
        self.tenants.push(TenantState {
            name: name.to_string(),
            prio,
            weight: weight.max(1),
            queue: VecDeque::new(),
            start: self.vtime[group],
            held: 0,
            held_credit: 0.0,
            bytes: 0,
            ops: 0,
            splits: 0,
            merges: 0,
            queue_ns: histogram(),
            service_ns: histogram(),
        });
        id
    }

    pub fn tenant_count(&self) -> usize {
        self.tenants.len()
    }

    pub fn tenant_weight(&self, t: TenantId) -> u32 {
        self.tenants[t.0 as usize].weight
    }

    pub fn tenant_prio(&self, t: TenantId) -> Prio {
        self.tenants[t.0 as usize].prio
    }

    /// Pieces waiting to be dispatched.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Dispatches not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests submitted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.reqs.len()
    }

    pub fn depth_limit(&self) -> usize {
        self.depth.limit()
    }

    /// The split size for `op` under this policy (`None`: no splitting).
    pub fn split_size(&self, op: Op) -> Option<u64> {
        match (self.policy, op) {
            (Policy::Fifo, _) | (_, Op::Flush) => None,
            _ => Some(self.max_io.unwrap_or_else(|| self.profile.max_io(op))),
        }
    }

    fn group_of_prio(&self, prio: Prio) -> usize {
        match self.policy {
            Policy::Fair => 0,
            _ => prio.class.rank(),
        }
    }

    fn group_of(&self, t: usize) -> usize {
        self.group_of_prio(self.tenants[t].prio)
    }

    /// How far behind the virtual time tenant `t` may restart: the virtual time the other
    /// backlogged tenants of its group advance while [`CREDIT_PIECES`] times `depth` pieces of
    /// `max_io` are served, which is what they can get while `t`'s own last pieces are in the device.
    fn credit(&self, t: usize, op: Op) -> f64 {
        let piece = self.split_size(op).unwrap_or(MERGED_BYTES_MAX);
        let g = self.group_of(t);
        let others: f64 = (0..self.tenants.len())
            .filter(|&u| u != t && self.group_of(u) == g && !self.tenants[u].queue.is_empty())
            .map(|u| f64::from(self.tenants[u].weight))
            .sum();
        CREDIT_PIECES * self.depth.max as f64 * self.profile.cost_ns(op, piece) / others.max(1.0)
    }

    /// Queues a request, split into pieces of at most the split size, and returns its id.
    /// Panics if the tenant does not exist (a programming error, not outside input).
    pub fn push(&mut self, now: Nanos, req: Request) -> ReqId {
        let t = req.tenant.0 as usize;
        assert!(t < self.tenants.len(), "unknown tenant {}", req.tenant.0);
        let id = self.next_req;
        self.next_req += 1;
        if self.tenants[t].prio.class == Class::Rt {
            self.rt_seen = Some(now);
        }
        if req.op == Op::Flush {
            let writes_done = self.writes_done;
            if let Some(flush) = self
                .flushes_in_flight
                .iter_mut()
                .find(|f| f.covers >= writes_done)
            {
                // Every write completed before this request completed before that flush was
                // dispatched: it makes them durable, and this request completes with it.
                let seq = self.next_seq;
                self.next_seq += 1;
                flush.riders.push(Piece {
                    req: id,
                    tenant: req.tenant,
                    op: Op::Flush,
                    offset: req.offset,
                    len: 0,
                    req_offset: 0,
                    seq,
                    head_since: now,
                });
                self.reqs.insert(
                    id,
                    ReqTrack {
                        tenant: req.tenant,
                        arrival: now,
                        first_dispatch: Some(now),
                        pieces_left: 1,
                        bytes: 0,
                    },
                );
                return id;
            }
        }
        let was_idle = self.tenants[t].queue.is_empty();
        if was_idle && self.uses_tags() {
            let g = self.group_of(t);
            let rejoin = self.vtime[g] - self.credit(t, req.op) - self.tenants[t].held_credit;
            let state = &mut self.tenants[t];
            state.start = state.start.max(rejoin);
            state.held_credit = 0.0;
        }
        let piece_len = self.split_size(req.op).unwrap_or(u64::MAX).max(1);
        let mut pieces = 0u64;
        let mut done = 0u64;
        loop {
            let len = (req.len - done).min(piece_len);
            let seq = self.next_seq;
            self.next_seq += 1;
            self.tenants[t].queue.push_back(Piece {
                req: id,
                tenant: req.tenant,
                op: req.op,
                offset: req.offset + done,
                len,
                req_offset: done,
                seq,
                head_since: now,
            });
            pieces += 1;
            done += len;
            if done >= req.len {
                break;
            }
        }
        self.queued += pieces as usize;
        self.tenants[t].splits += pieces - 1;
        self.reqs.insert(
            id,
            ReqTrack {
                tenant: req.tenant,
                arrival: now,
                first_dispatch: None,
                pieces_left: pieces,
                bytes: if req.op == Op::Flush { 0 } else { req.len },
            },
        );
        id
    }

    fn uses_tags(&self) -> bool {
        matches!(self.policy, Policy::Fair | Policy::Default)
    }

    fn head_cost(&self, t: usize) -> f64 {
        let p = &self.tenants[t].queue[0];
        self.profile.cost_ns(p.op, p.len)
    }

    /// The WF2Q+ choice among the backlogged tenants of group `g`. The virtual clock catches up
    /// with the earliest start among the tenants that move it (the one waited for included);
    /// tenants whose service does not move it ([`Queue::moves_clock`]) set it only when they are
    /// all that is backlogged. If no tenant is eligible (start not past the clock), the earliest
    /// finish goes anyway.
    fn pick_fair(&mut self, g: usize, now: Nanos) -> Option<usize> {
        let members: Vec<usize> = (0..self.tenants.len())
            .filter(|&t| !self.tenants[t].queue.is_empty() && self.group_of(t) == g)
            .collect();
        if members.is_empty() {
            return None;
        }
        let waited_for = self.anticipated(now).filter(|&w| self.group_of(w) == g);
        let min_start = |all: bool| {
            let held = (0..self.tenants.len())
                .filter(|&t| self.tenants[t].held > 0 && self.group_of(t) == g);
            members
                .iter()
                .copied()
                .chain(waited_for)
                .chain(held)
                .filter(|&t| all || self.moves_clock(t))
                .map(|t| self.tenants[t].start)
                .fold(f64::INFINITY, f64::min)
        };
        let mut floor = min_start(false);
        if floor.is_infinite() {
            floor = min_start(true);
        }
        if floor > self.vtime[g] {
            self.vtime[g] = floor;
        }
        let v = self.vtime[g];
        let finish = |t: usize| {
            self.tenants[t].start + self.head_cost(t) / f64::from(self.tenants[t].weight)
        };
        let by_finish = |&a: &usize, &b: &usize| {
            finish(a).total_cmp(&finish(b)).then(
                self.tenants[a].queue[0]
                    .seq
                    .cmp(&self.tenants[b].queue[0].seq),
            )
        };
        members
            .iter()
            .copied()
            .filter(|&t| self.tenants[t].start <= v)
            .min_by(by_finish)
            .or_else(|| members.iter().copied().min_by(by_finish))
    }

    /// The backlogged tenant (optionally within class rank `class`) whose head was submitted first.
    fn pick_oldest(&self, class: Option<usize>) -> Option<usize> {
        (0..self.tenants.len())
            .filter(|&t| !self.tenants[t].queue.is_empty())
            .filter(|&t| class.is_none_or(|c| self.tenants[t].prio.class.rank() == c))
            .min_by_key(|&t| self.tenants[t].queue[0].seq)
    }

    /// The tenant whose head waited longest among classes ranked below `top`, if it waited
    /// at least the aging bound.
    fn pick_aged(&self, now: Nanos, top: usize) -> Option<usize> {
        (0..self.tenants.len())
            .filter(|&t| {
                !self.tenants[t].queue.is_empty() && self.tenants[t].prio.class.rank() > top
            })
            .min_by_key(|&t| {
                (
                    self.tenants[t].queue[0].head_since,
                    self.tenants[t].queue[0].seq,
                )
            })
            .filter(|&t| now.saturating_sub(self.tenants[t].queue[0].head_since) >= self.aging_ns)
    }

    /// The next dispatch, or `None` if nothing is queued or the depth limit is reached.
    pub fn pop(&mut self, now: Nanos) -> Option<Dispatch> {
        if self.queued == 0 || self.in_flight >= self.depth.limit() {
            return None;
        }
        let top = (0..self.tenants.len())
            .filter(|&t| !self.tenants[t].queue.is_empty())
            .map(|t| self.tenants[t].prio.class.rank())
            .min()?;
        let mut aged = false;
        let t = match self.policy {
            Policy::Fifo => self.pick_oldest(None)?,
            Policy::Fair => self.pick_fair(0, now)?,
            Policy::Priority | Policy::Default => match self.pick_aged(now, top) {
                Some(t) => {
                    aged = true;
                    t
                }
                None if self.policy == Policy::Priority => self.pick_oldest(Some(top))?,
                None => self.pick_fair(top, now)?,
            },
        };
        if !aged && self.anticipates_instead_of(now, t) {
            return None;
        }
        let class = self.tenants[t].prio.class;
        // An aged dispatch keeps aging's promise (one full piece per interval): it is neither
        // cut nor kept out of the slot left for real time, or a real-time tenant that never
        // lets the device go idle would starve the others outright.
        let guarded = !aged && class != Class::Rt && self.rt_active(now);
        if guarded && self.depth.limit() >= 2 && self.in_flight + 1 >= self.depth.limit() {
            // The last slot stays free for the real-time tenant's next request.
            return None;
        }
        if self.tenants[t]
            .queue
            .front()
            .is_some_and(|p| p.op == Op::Write)
            && self.flush_due(class)
        {
            // The write waits for a flush of what the device holds, so no flush (this one or
            // the next one asked for) has to write back more than the debt.
            let cost_ns = self.profile.flush_cost_ns(self.unflushed);
            self.unflushed = 0;
            self.debt_flushes += 1;
            self.in_flight += 1;
            let flight = self.new_flight(Op::Flush);
            if class == Class::Rt {
                self.rt_in_flight += 1;
            }
            return Some(Dispatch {
                class,
                op: Op::Flush,
                offset: 0,
                len: 0,
                pieces: Vec::new(),
                cost_ns,
                dispatched_at: now,
                aged: false,
                flight,
            });
        }
        let guard = if guarded {
            self.tenants[t]
                .queue
                .front()
                .and_then(|p| self.guard_size(p.op))
        } else {
            None
        };
        if let Some(limit) = guard {
            self.cut_head(t, limit);
        }
        let head = self.tenants[t].queue.pop_front()?;
        self.queued -= 1;
        let op = head.op;
        if op == Op::Flush {
            self.unflushed = 0;
        }
        let offset = head.offset;
        let mut len = head.len;
        let mut pieces = vec![head];
        let mut touched = vec![t];
        if self.policy != Policy::Fifo && op != Op::Flush {
            let limit = guard.or(self.split_size(op)).unwrap_or(MERGED_BYTES_MAX);
            let cap = if class == Class::Rt {
                usize::MAX
            } else {
                self.merge_cap
            };
            let mut merges = 0usize;
            while merges < cap {
                let end = offset + len;
                let next = (0..self.tenants.len()).find(|&u| {
                    let same_source = match self.policy {
                        // Across tenants only where ordering is by class, not by tenant.
                        Policy::Priority => self.tenants[u].prio.class == class,
                        _ => u == t,
                    };
                    same_source
                        && self.tenants[u]
                            .queue
                            .front()
                            .is_some_and(|p| p.op == op && p.offset == end && len + p.len <= limit)
                });
                let Some(u) = next else { break };
                let p = self.tenants[u].queue.pop_front()?;
                self.queued -= 1;
                len += p.len;
                self.tenants[u].merges += 1;
                pieces.push(p);
                if !touched.contains(&u) {
                    touched.push(u);
                }
                merges += 1;
            }
        }
        let cost_ns = self.profile.cost_ns(op, len);
        if self.uses_tags() {
            self.charge(now, t, cost_ns);
        }
        for u in touched {
            if let Some(p) = self.tenants[u].queue.front_mut() {
                p.head_since = p.head_since.max(now);
            }
        }
        for p in &pieces {
            if let Some(r) = self.reqs.get_mut(&p.req) {
                r.first_dispatch.get_or_insert(now);
            }
        }
        self.in_flight += 1;
        if class == Class::Rt {
            self.rt_in_flight += 1;
        }
        let flight = self.new_flight(op);
        Some(Dispatch {
            class,
            op,
            offset,
            len,
            pieces,
            cost_ns,
            dispatched_at: now,
            aged,
            flight,
        })
    }

    /// Cuts the head piece of tenant `t` to `limit` bytes if it is longer: the rest stays at the
    /// head of its queue as a piece of the same request (a piece split at `push` to the full
    /// size, queued before a real-time tenant became active).
    fn cut_head(&mut self, t: usize, limit: u64) {
        let q = &mut self.tenants[t].queue;
        let Some(head) = q.front_mut() else { return };
        if head.op == Op::Flush || head.len <= limit {
            return;
        }
        let rest = Piece {
            offset: head.offset + limit,
            len: head.len - limit,
            req_offset: head.req_offset + limit,
            ..head.clone()
        };
        head.len = limit;
        let req = head.req;
        q.insert(1, rest);
        self.queued += 1;
        if let Some(r) = self.reqs.get_mut(&req) {
            r.pieces_left += 1;
            let owner = r.tenant.0 as usize;
            self.tenants[owner].splits += 1;
        }
    }

    /// Numbers a dispatch of `op`; a flush is recorded with the writes it makes durable.
    fn new_flight(&mut self, op: Op) -> u64 {
        let flight = self.next_flight;
        self.next_flight += 1;
        if op == Op::Flush {
            self.flushes_in_flight.push(FlushInFlight {
                flight,
                covers: self.writes_done,
                riders: Vec::new(),
            });
        }
        flight
    }

    /// The flush requests riding on dispatch `d` (see [`Queue::push`]): they complete with it,
    /// with its outcome.
    pub fn riders(&self, d: &Dispatch) -> &[Piece] {
        self.flushes_in_flight
            .iter()
            .find(|f| f.flight == d.flight)
            .map_or(&[], |f| f.riders.as_slice())
    }

    /// The tenant whose next request is anticipated at `now`, if any.
    fn anticipated(&self, now: Nanos) -> Option<usize> {
        self.waiting_for(now).map(|(w, _)| w)
    }

    /// The tenant anticipation waits for at `now` and the cost of its last dispatch: the one
    /// whose last queued piece completed most recently, if within the window, with nothing
    /// queued, and not held by another thread's work ([`Queue::hold`]: it can send nothing
    /// before that thread goes on, and that thread may be waiting for the device).
    fn waiting_for(&self, now: Nanos) -> Option<(usize, f64)> {
        let (window, (w, done_at, cost)) = (self.anticipation_ns?, self.last_done?);
        let state = &self.tenants[w];
        (now < done_at.saturating_add(window) && state.queue.is_empty() && state.held == 0)
            .then_some((w, cost))
    }

    /// A thread of tenant `t` waits for shared work another thread holds (a lock of the file
    /// system's). Until as many [`Queue::unhold`]s, the tenant counts as backlogged: the
    /// virtual clock does not run ahead of it, so it gets back the service it could not ask
    /// for meanwhile, and the device is not kept idle waiting for its next request.
    pub fn hold(&mut self, t: TenantId) {
        let state = &mut self.tenants[t.0 as usize];
        state.held += 1;
    }

    /// A thread of tenant `t` stopped waiting ([`Queue::hold`]). When none waits any more and
    /// nothing of it is queued, the virtual time the clock moved past its start is kept as the
    /// credit its next request restarts with.
    pub fn unhold(&mut self, t: TenantId) {
        let t = t.0 as usize;
        let g = self.group_of(t);
        let v = self.vtime[g];
        let state = &mut self.tenants[t];
        assert!(
            state.held > 0,
            "tenant {t} let go of a wait it did not hold"
        );
        state.held -= 1;
        if state.held == 0 && state.queue.is_empty() {
            state.held_credit = (v - state.start).max(0.0);
        }
    }

    /// Whether the device should wait for the tenant whose last piece just completed rather than
    /// serve `t`: within the anticipation window, in `t`'s fairness group, and with a finish tag
    /// (for a request like its last) earlier than `t`'s head.
    fn anticipates_instead_of(&self, now: Nanos, t: usize) -> bool {
        let Some((w, cost)) = self.waiting_for(now) else {
            return false;
        };
        if w == t
            || !self.uses_tags()
            || self.group_of(w) != self.group_of(t)
            || self.head_cost(t) * SMALL_PASSES_ANTICIPATION <= cost
        {
            return false;
        }
        let finish_w = self.tenants[w].start + cost / f64::from(self.tenants[w].weight);
        let finish_t =
            self.tenants[t].start + self.head_cost(t) / f64::from(self.tenants[t].weight);
        finish_w < finish_t
    }

    /// When `pop` should be tried again even if nothing is pushed or completed meanwhile (the end
    /// of an anticipation window), if pieces wait.
    pub fn next_timer(&self) -> Option<Nanos> {
        let (window, (w, done_at, _)) = (self.anticipation_ns?, self.last_done?);
        let state = &self.tenants[w];
        (self.queued > 0 && state.queue.is_empty() && state.held == 0)
            .then(|| done_at.saturating_add(window))
    }

    /// Whether tenant `t`'s service moves its group's virtual clock. Under `fair`, whose one group
    /// holds every class, an idle-class tenant's does not: it is served by weight among the
    /// others, but what it gets is not counted against them, so a best-effort tenant that pauses
    /// between requests (and is not waited for) does not find the clock moved past it by idle
    /// work when it comes back. Counting it cost the lighter tenant of `bench fairness`'s 3:2
    /// writes of 1 MiB 2-3 % of its share, moved by tbfs's background log summaries.
    fn moves_clock(&self, t: usize) -> bool {
        !(self.policy == Policy::Fair && self.tenants[t].prio.class == Class::Idle)
    }

    /// Charges `cost_ns` of service to tenant `t` in its group's WF2Q+ clock.
    /// A tenant anticipated at `now` counts as backlogged, so the virtual clock does not run ahead
    /// of it while it prepares its next request.
    fn charge(&mut self, now: Nanos, t: usize, cost_ns: f64) {
        self.tenants[t].start += cost_ns / f64::from(self.tenants[t].weight);
        if !self.moves_clock(t) {
            return;
        }
        let g = self.group_of(t);
        let anticipated = self.anticipated(now);
        let counted = |u: usize| {
            self.group_of(u) == g
                && self.moves_clock(u)
                && (!self.tenants[u].queue.is_empty()
                    || anticipated == Some(u)
                    || self.tenants[u].held > 0)
        };
        let weight_sum: f64 = (0..self.tenants.len())
            .filter(|&u| u == t || counted(u))
            .map(|u| f64::from(self.tenants[u].weight))
            .sum();
        let min_start = (0..self.tenants.len())
            .filter(|&u| counted(u))
            .map(|u| self.tenants[u].start)
            .fold(f64::INFINITY, f64::min);
        let v = self.vtime[g] + cost_ns / weight_sum;
        self.vtime[g] = if min_start.is_finite() {
            v.max(min_start)
        } else {
            v
        };
    }

    /// Moves the pieces of request `req` that are still queued to tenant `to` (priority
    /// inheritance: work a higher-priority thread now waits for). They keep their submission
    /// order among `to`'s pieces; pieces already dispatched are not touched, and the request
    /// stays counted in its own tenant's statistics. Returns how many pieces moved.
    pub fn boost(&mut self, now: Nanos, req: ReqId, to: TenantId) -> usize {
        let Some(from) = self.reqs.get(&req).map(|r| r.tenant.0 as usize) else {
            return 0;
        };
        let to_i = to.0 as usize;
        if to_i >= self.tenants.len() || to_i == from {
            return 0;
        }
        // A request's pieces may sit in another tenant's queue after an earlier boost.
        let mut moved: Vec<Piece> = Vec::new();
        for t in 0..self.tenants.len() {
            if t == to_i {
                continue;
            }
            let q = &mut self.tenants[t].queue;
            if q.iter().any(|p| p.req == req) {
                let (mine, rest): (VecDeque<Piece>, VecDeque<Piece>) =
                    q.drain(..).partition(|p| p.req == req);
                *q = rest;
                moved.extend(mine);
            }
        }
        if moved.is_empty() {
            return 0;
        }
        if self.tenants[to_i].queue.is_empty() && self.uses_tags() {
            let g = self.group_of(to_i);
            let op = moved[0].op;
            let rejoin = self.vtime[g] - self.credit(to_i, op);
            let state = &mut self.tenants[to_i];
            state.start = state.start.max(rejoin);
        }
        let n = moved.len();
        let q = &mut self.tenants[to_i].queue;
        for mut p in moved {
            p.tenant = to;
            p.head_since = p.head_since.max(now);
            let at = q.partition_point(|x| x.seq < p.seq);
            q.insert(at, p);
        }
        n
    }

    /// Pieces queued (not dispatched) for tenant `t`.
    pub fn queued_for(&self, t: TenantId) -> usize {
        self.tenants.get(t.0 as usize).map_or(0, |s| s.queue.len())
    }

    /// Records that `d` finished at `now`; returns the requests it completed.
    pub fn complete(&mut self, now: Nanos, d: &Dispatch) -> Vec<Completed> {
        debug_assert!(self.in_flight > 0, "completion without a dispatch");
        self.in_flight = self.in_flight.saturating_sub(1);
        if d.class == Class::Rt {
            debug_assert!(
                self.rt_in_flight > 0,
                "a real-time completion without its dispatch"
            );
            self.rt_in_flight = self.rt_in_flight.saturating_sub(1);
            self.rt_seen = Some(now);
        }
        if d.op == Op::Write {
            self.unflushed = self.unflushed.saturating_add(d.len);
            self.writes_done += 1;
        }
        let riders = if d.op == Op::Flush {
            self.flushes_in_flight
                .iter()
                .position(|f| f.flight == d.flight)
                .map(|i| self.flushes_in_flight.swap_remove(i).riders)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if let Some(lead) = d.pieces.first() {
            let t = lead.tenant.0 as usize;
            // A dispatch let through while another tenant is waited for (a small one) leaves
            // that wait as it was, within its window. An idle-class tenant is never waited for
            // (as CFQ never idles for its idle class): it has no share worth holding the device
            // for, and waiting after each of a tbfs background thread's log summaries idled the
            // device for most of `bench fairness`'s small writes.
            let waiting_for_another = self.waiting_for(now).is_some_and(|(w, _)| w != t);
            if !waiting_for_another {
                let waits = self.anticipation_ns.is_some()
                    && self.uses_tags()
                    && d.op != Op::Flush
                    && self
                        .tenants
                        .get(t)
                        .is_some_and(|s| s.queue.is_empty() && s.prio.class != Class::Idle);
                self.last_done = waits.then_some((t, now, d.cost_ns));
            }
        }
        let mut done = Vec::new();
        for p in d.pieces.iter().chain(&riders) {
            let Some(r) = self.reqs.get_mut(&p.req) else {
                continue;
            };
            r.pieces_left -= 1;
            if r.pieces_left > 0 {
                continue;
            }
            let Some(r) = self.reqs.remove(&p.req) else {
                continue;
            };
            let first = r.first_dispatch.unwrap_or(d.dispatched_at);
            let latency_ns = now.saturating_sub(r.arrival);
            let state = &mut self.tenants[r.tenant.0 as usize];
            state.ops += 1;
            state.bytes += r.bytes;
            record(&mut state.queue_ns, first.saturating_sub(r.arrival));
            record(&mut state.service_ns, now.saturating_sub(first));
            if state.prio.class == Class::Rt {
                self.depth.on_rt_complete(latency_ns);
            }
            done.push(Completed {
                req: p.req,
                tenant: r.tenant,
                latency_ns,
            });
        }
        done
    }

    /// A snapshot of every tenant's statistics, in tenant order.
    pub fn stats(&self) -> Vec<TenantStats> {
        self.tenants
            .iter()
            .map(|s| TenantStats {
                name: s.name.clone(),
                prio: s.prio,
                weight: s.weight,
                bytes: s.bytes,
                ops: s.ops,
                splits: s.splits,
                merges: s.merges,
                queue_ns: s.queue_ns.clone(),
                service_ns: s.service_ns.clone(),
            })
            .collect()
    }
}
