//! The real executor: [`Scheduler`] runs `depth` dispatcher threads that take decisions from a
//! [`Queue`] and perform them on an `Arc<dyn Device>`; callers block until their request's pieces
//! are all done. [`SchedDevice`] puts a scheduler behind the [`Device`] trait, with the tenant of
//! the calling thread.
//!
//! Buffers: a write's bytes are copied once into the scheduler when submitted (the dispatcher
//! threads outlive the caller's borrow), and a read's bytes are copied once out of the dispatcher's
//! buffer into the caller's. No unsafe code is needed for either.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use super::inherit::BOOST_POLL;
use super::queue::{Dispatch, Piece, Queue, ReqId, Request};
use super::{Config, Op, Prio, TenantId, TenantStats};
use crate::dev::{check_request, Device, PendingWrite};

/// What a dispatcher sends back for one piece.
struct PieceDone {
    req_offset: u64,
    len: u64,
    data: Option<Vec<u8>>,
    result: io::Result<()>,
    /// How long the device took for the dispatch that carried the piece (its time queued in
    /// the scheduler is the rest of the caller's wait).
    served_ns: u64,
}

enum Payload {
    Read,
    Write(Arc<Vec<u8>>),
    Flush,
}

struct Job {
    payload: Payload,
    reply: mpsc::Sender<PieceDone>,
}

/// What the dispatcher threads and callers share under one lock: the queue, the jobs waiting
/// for their pieces, dispatches ready for a dispatcher thread, and whether to stop.
struct QueueState {
    queue: Queue,
    jobs: HashMap<ReqId, Job>,
    /// Dispatches a caller took from the queue that were not its own, for a dispatcher thread
    /// ([`Scheduler::run_own`]); they count in the queue's depth already.
    ready: VecDeque<Dispatch>,
    by_prio: HashMap<Prio, TenantId>,
    shutdown: bool,
    /// The failure of a flush the queue made on its own ([`Config::flush_debt`]), kept for the
    /// next flush a caller asks for: the device may report an error only once, and a caller's
    /// flush must not succeed over data that a failed one did not make durable.
    flush_error: Option<io::Error>,
}

struct Shared {
    dev: Arc<dyn Device>,
    inner: Mutex<QueueState>,
    work: Condvar,
    start: Instant,
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic in a dispatcher cannot leave the queue half-updated: every update is done
        // before any I/O, so the state behind a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A user-space I/O scheduler in front of one device; see the module documentation of `sched`.
pub struct Scheduler {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    depth: usize,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("device", &self.shared.dev)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Starts a scheduler with `cfg.depth` dispatcher threads over `dev`.
    pub fn new(dev: Arc<dyn Device>, cfg: Config) -> io::Result<Arc<Scheduler>> {
        cfg.validate().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("scheduler config: {e}"),
            )
        })?;
        let shared = Arc::new(Shared {
            dev,
            inner: Mutex::new(QueueState {
                queue: Queue::new(&cfg),
                jobs: HashMap::new(),
                ready: VecDeque::new(),
                by_prio: HashMap::new(),
                shutdown: false,
                flush_error: None,
            }),
            work: Condvar::new(),
            start: Instant::now(),
        });
        let mut threads = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let worker = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("tb-sched-{i}"))
                .spawn(move || dispatcher(&worker));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    stop(&shared, threads);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("scheduler: starting dispatcher thread {i}: {e}"),
                    ));
                }
            }
        }
        Ok(Arc::new(Scheduler {
            shared,
            threads,
            depth: cfg.depth,
        }))
    }

    /// The device requests go to.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.shared.dev
    }

    /// Adds a tenant with its priority and weight (0 is taken as 1).
    pub fn add_tenant(&self, name: &str, prio: Prio, weight: u32) -> TenantId {
        self.shared.lock().queue.add_tenant(name, prio, weight)
    }

    /// The tenant for threads with kernel I/O priority `prio` (made on first use, named
    /// `ioprio CLASS/LEVEL`, weighted by level).
    pub fn tenant_for_prio(&self, prio: Prio) -> TenantId {
        let mut inner = self.shared.lock();
        if let Some(&t) = inner.by_prio.get(&prio) {
            return t;
        }
        let t = inner
            .queue
            .add_tenant(&format!("ioprio {prio}"), prio, prio.default_weight());
        inner.by_prio.insert(prio, t);
        t
    }

    /// The tenant of the calling thread: the one of a [`Charge`] it applies, else the one set
    /// by [`set_thread_tenant`], else the one for its kernel I/O priority; but while the thread
    /// holds work a higher priority waits for ([`inherit`](super::inherit)), the tenant of that
    /// priority.
    pub fn current_tenant(&self) -> TenantId {
        let charged = CHARGED_TO.with(Cell::get);
        let explicit = charged.map_or_else(|| THREAD_TENANT.with(Cell::get), |c| c.tenant);
        let own = match (explicit, charged) {
            (Some(t), _) => self.tenant_prio(t).unwrap_or(Prio::DEFAULT),
            (None, Some(c)) => c.prio,
            (None, None) => super::inherit::own_prio(),
        };
        if super::inherit::inherited().is_some() {
            let effective = super::inherit::sync_kernel_ioprio(own);
            if effective != own {
                return self.tenant_for_prio(effective);
            }
        }
        explicit.unwrap_or_else(|| self.tenant_for_prio(own))
    }

    /// How long the device is held for a tenant between its requests ([`Config::anticipation`]).
    pub fn anticipation(&self) -> Option<std::time::Duration> {
        self.shared.lock().queue.anticipation()
    }

    /// The weight of tenant `t`, if it exists.
    pub fn tenant_weight(&self, t: TenantId) -> Option<u32> {
        let inner = self.shared.lock();
        ((t.0 as usize) < inner.queue.tenant_count()).then(|| inner.queue.tenant_weight(t))
    }

    /// The priority of tenant `t`, if it exists.
    pub fn tenant_prio(&self, t: TenantId) -> Option<Prio> {
        let inner = self.shared.lock();
        ((t.0 as usize) < inner.queue.tenant_count()).then(|| inner.queue.tenant_prio(t))
    }

    /// Reads `buf.len()` bytes at `offset` for tenant `t`; blocks until done.
    pub fn read_at(&self, t: TenantId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_request(self.shared.dev.as_ref(), offset, buf.len())?;
        let _io = crate::phases::enter(crate::phases::Phase::DeviceIo);
        let sub = self.submit(t, Op::Read, offset, buf.len() as u64, Payload::Read, true)?;
        self.wait(sub, buf.len() as u64, Some(buf), "read", offset)
    }

    /// Writes `buf` at `offset` for tenant `t`; blocks until the device holds it.
    pub fn write_at(&self, t: TenantId, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_request(self.shared.dev.as_ref(), offset, buf.len())?;
        let _io = crate::phases::enter(crate::phases::Phase::DeviceIo);
        let data = Arc::new(buf.to_vec());
        let sub = self.submit(
            t,
            Op::Write,
            offset,
            buf.len() as u64,
            Payload::Write(data),
            true,
        )?;
        self.wait(sub, buf.len() as u64, None, "write", offset)
    }

    /// Queues a write of `buf` at `offset` for tenant `t` and returns at once; the returned
    /// [`PendingWrite`] waits for it.
    pub fn start_write(
        self: &Arc<Self>,
        t: TenantId,
        offset: u64,
        buf: Vec<u8>,
    ) -> io::Result<PendingWrite> {
        check_request(self.shared.dev.as_ref(), offset, buf.len())?;
        let len = buf.len() as u64;
        // Returns at once: the write is a dispatcher thread's, never the caller's.
        let sub = self.submit(
            t,
            Op::Write,
            offset,
            len,
            Payload::Write(Arc::new(buf)),
            false,
        )?;
        let sched = Arc::clone(self);
        Ok(PendingWrite::new(move || {
            let _io = crate::phases::enter(crate::phases::Phase::DeviceIo);
            sched.wait(sub, len, None, "write", offset)
        }))
    }

    /// Flushes the device for tenant `t`; blocks until done.
    pub fn flush(&self, t: TenantId) -> io::Result<()> {
        let _flush = crate::phases::enter(crate::phases::Phase::DeviceFlush);
        let sub = self.submit(t, Op::Flush, 0, 0, Payload::Flush, true)?;
        self.wait(sub, 0, None, "flush", 0)
    }

    /// Every tenant's statistics so far, in the order tenants were added.
    pub fn stats(&self) -> Vec<TenantStats> {
        self.shared.lock().queue.stats()
    }

    /// The dispatch depth in effect now (lower than the configured one while the adaptive mode
    /// holds it down).
    pub fn depth_limit(&self) -> usize {
        self.shared.lock().queue.depth_limit()
    }

    /// Tenant `t` waits for shared work another thread holds until the guard is dropped
    /// ([`Queue::hold`]): the dispatchers stop waiting for its next request, and its share is
    /// kept for it.
    pub fn hold(&self, t: TenantId) -> Held {
        let mut inner = self.shared.lock();
        if (t.0 as usize) < inner.queue.tenant_count() {
            inner.queue.hold(t);
        }
        drop(inner);
        // A dispatcher idling for this tenant's next request looks again.
        self.shared.work.notify_all();
        Held {
            shared: Arc::clone(&self.shared),
            tenant: t,
        }
    }

    /// Flushes the scheduler made on its own for the flush debt ([`Config::flush_debt`]).
    pub fn debt_flushes(&self) -> u64 {
        self.shared.lock().queue.debt_flushes()
    }

    fn submit(
        &self,
        t: TenantId,
        op: Op,
        offset: u64,
        len: u64,
        payload: Payload,
        inline: bool,
    ) -> io::Result<Submitted> {
        let (tx, rx) = mpsc::channel();
        let mut inner = self.shared.lock();
        if t.0 as usize >= inner.queue.tenant_count() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "scheduler: no tenant {} (it has {})",
                    t.0,
                    inner.queue.tenant_count()
                ),
            ));
        }
        let now = self.shared.now();
        let id = inner.queue.push(
            now,
            Request {
                tenant: t,
                op,
                offset,
                len,
            },
        );
        inner.jobs.insert(id, Job { payload, reply: tx });
        if inline {
            self.run_own(inner, id);
        } else {
            drop(inner);
            self.shared.work.notify_one();
        }
        Ok(Submitted { id, tenant: t, rx })
    }

    /// Performs on the calling thread the dispatches the queue makes of request `id` now, so a
    /// request the queue lets go at once costs no hand-over to a dispatcher thread and back.
    /// The queue decides as it would for a dispatcher thread; the first dispatch that is not all
    /// `id`'s is left to the dispatcher threads (one is free: there are as many as the depth),
    /// so a caller never performs another tenant's I/O.
    fn run_own<'a>(&'a self, mut inner: MutexGuard<'a, QueueState>, id: ReqId) {
        let shared = &*self.shared;
        while !inner.shutdown && inner.ready.is_empty() {
            let Some(d) = inner.queue.pop(shared.now()) else {
                break;
            };
            if !d.pieces.is_empty() && d.pieces.iter().all(|p| p.req == id) {
                inner = execute(shared, inner, d);
            } else {
                inner.ready.push_back(d);
            }
        }
        let pending = !inner.ready.is_empty() || inner.queue.queued() > 0;
        drop(inner);
        if pending {
            shared.work.notify_one();
        }
    }

    /// Collects a request's pieces; copies read data into `buf`. A thread that holds work others
    /// may wait for ([`inherit`](super::inherit)) checks every [`BOOST_POLL`] whether a higher
    /// priority was lent meanwhile and moves the request's queued pieces to its tenant.
    fn wait(
        &self,
        sub: Submitted,
        len: u64,
        mut buf: Option<&mut [u8]>,
        what: &str,
        offset: u64,
    ) -> io::Result<()> {
        let Submitted { id, mut tenant, rx } = sub;
        crate::phases::count(|t| t.requests += 1);
        let holding = super::inherit::is_holding();
        let mut covered = 0u64;
        let mut first_error = None;
        loop {
            let next = if holding {
                match rx.recv_timeout(BOOST_POLL) {
                    Ok(done) => Some(done),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(lost(what, offset, len))
                    }
                }
            } else {
                Some(rx.recv().map_err(|_| lost(what, offset, len))?)
            };
            let Some(done) = next else {
                tenant = self.follow_inheritance(id, tenant);
                continue;
            };
            if let (Some(buf), Some(data)) = (buf.as_deref_mut(), done.data.as_deref()) {
                let at = done.req_offset as usize;
                buf[at..at + data.len()].copy_from_slice(data);
            }
            crate::phases::count(|t| t.served_ns = t.served_ns.saturating_add(done.served_ns));
            if let Err(e) = done.result {
                first_error.get_or_insert(e);
            }
            covered += done.len;
            if covered >= len {
                break;
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Moves request `id`'s queued pieces from `tenant` to the calling thread's tenant now, if
    /// that one has a higher priority (one was lent); returns the tenant the pieces are with.
    fn follow_inheritance(&self, id: ReqId, tenant: TenantId) -> TenantId {
        let now_tenant = self.current_tenant();
        if now_tenant == tenant {
            return tenant;
        }
        let mut inner = self.shared.lock();
        let higher = super::inherit::is_higher(
            inner.queue.tenant_prio(now_tenant),
            inner.queue.tenant_prio(tenant),
        );
        if !higher {
            return tenant;
        }
        let now = self.shared.now();
        inner.queue.boost(now, id, now_tenant);
        drop(inner);
        crate::phases::count(|t| t.boosts += 1);
        now_tenant
    }

    /// Requests submitted and not completed yet, of every tenant.
    pub fn outstanding(&self) -> usize {
        self.shared.lock().queue.outstanding()
    }

    /// Pieces queued (not yet dispatched) for tenant `t`.
    pub fn queued_for(&self, t: TenantId) -> usize {
        self.shared.lock().queue.queued_for(t)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        stop(&self.shared, std::mem::take(&mut self.threads));
    }
}

fn stop(shared: &Shared, threads: Vec<JoinHandle<()>>) {
    shared.lock().shutdown = true;
    shared.work.notify_all();
    for h in threads {
        let _ = h.join();
    }
}

/// A request handed to the queue, and where its pieces report.
struct Submitted {
    id: ReqId,
    tenant: TenantId,
    rx: mpsc::Receiver<PieceDone>,
}

fn lost(what: &str, offset: u64, len: u64) -> io::Error {
    io::Error::other(format!(
        "scheduler: {what} at {offset}+{len} lost (the scheduler stopped)"
    ))
}

fn dispatcher(shared: &Shared) {
    let mut inner = shared.lock();
    loop {
        if inner.shutdown {
            return;
        }
        if let Some(d) = inner.ready.pop_front() {
            inner = execute(shared, inner, d);
            continue;
        }
        let now = shared.now();
        let Some(d) = inner.queue.pop(now) else {
            inner = match inner.queue.next_timer() {
                // Anticipating a tenant's next request: try again when the window ends.
                Some(at) => {
                    let wait = std::time::Duration::from_nanos(at.saturating_sub(now).max(1));
                    shared
                        .work
                        .wait_timeout(inner, wait)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
                None => shared.work.wait(inner).unwrap_or_else(|e| e.into_inner()),
            };
            continue;
        };
        inner = execute(shared, inner, d);
    }
}

/// Performs one dispatch the queue made: the I/O without the lock, then its completion and the
/// replies to every piece's caller. Takes the lock held and returns it held.
fn execute<'a>(
    shared: &'a Shared,
    mut inner: MutexGuard<'a, QueueState>,
    d: Dispatch,
) -> MutexGuard<'a, QueueState> {
    // Gather what the I/O needs while the lock is held.
    let replies: Vec<mpsc::Sender<PieceDone>> = d
        .pieces
        .iter()
        .map(|p| inner.jobs[&p.req].reply.clone())
        .collect();
    let write_data: Vec<(Arc<Vec<u8>>, u64, u64)> = match d.op {
        Op::Write => d
            .pieces
            .iter()
            .filter_map(|p| match &inner.jobs[&p.req].payload {
                Payload::Write(data) => Some((Arc::clone(data), p.req_offset, p.len)),
                Payload::Read | Payload::Flush => None,
            })
            .collect(),
        Op::Read | Op::Flush => Vec::new(),
    };
    drop(inner);
    // A panic in the device's call fails this dispatch's requests: unwinding past here would
    // leave their callers waiting for ever (their reply senders stay in `jobs`).
    let started = Instant::now();
    let outcome = crate::panics::catch(|| {
        crate::failpoint::hit("sched.dispatch");
        perform(shared.dev.as_ref(), &d, &write_data)
    })
    .unwrap_or_else(|p| Err(io::Error::other(format!("scheduler: a dispatcher {p}"))));
    let served_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    inner = shared.lock();
    // Flush requests that rode on this flush get its outcome; a failure of the queue's own
    // flush, or one kept from before, is theirs as a caller's flush.
    let riders: Vec<(Piece, mpsc::Sender<PieceDone>)> = inner
        .queue
        .riders(&d)
        .iter()
        .map(|p| (p.clone(), inner.jobs[&p.req].reply.clone()))
        .collect();
    let rider_error = if riders.is_empty() {
        None
    } else {
        match &outcome {
            Err(e) => Some(copy_error(e)),
            Ok(_) => inner.flush_error.as_ref().map(copy_error),
        }
    };
    let outcome = match (d.op, d.pieces.is_empty(), outcome) {
        (Op::Flush, true, Err(e)) => {
            inner.flush_error = Some(e);
            Ok(None)
        }
        (Op::Flush, false, Ok(_)) => match inner.flush_error.take() {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("an earlier flush made by the scheduler failed: {e}"),
            )),
            None => Ok(None),
        },
        (_, _, outcome) => outcome,
    };
    for c in inner.queue.complete(shared.now(), &d) {
        inner.jobs.remove(&c.req);
    }
    // A slot in the device is free again: another dispatcher may go, if there is work for it
    // (waking one for nothing costs two context switches per request).
    let more = inner.queue.queued() > 0 || !inner.ready.is_empty();
    drop(inner);
    if more {
        shared.work.notify_one();
    }
    for (p, tx) in riders {
        let _ = tx.send(PieceDone {
            req_offset: p.req_offset,
            len: 0,
            data: None,
            result: rider_error.as_ref().map_or(Ok(()), |e| Err(copy_error(e))),
            served_ns,
        });
    }
    send_results(&d, outcome, replies, served_ns);
    shared.lock()
}

/// The same error again, for one more receiver (`io::Error` is not `Clone`).
fn copy_error(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

fn perform(
    dev: &dyn Device,
    d: &Dispatch,
    write_data: &[(Arc<Vec<u8>>, u64, u64)],
) -> io::Result<Option<Vec<u8>>> {
    match d.op {
        Op::Flush => dev.flush().map(|()| None),
        Op::Read => {
            let mut data = vec![0u8; d.len as usize];
            dev.read_at(d.offset, &mut data).map(|()| Some(data))
        }
        Op::Write => {
            if let [(data, at, len)] = write_data {
                let (at, len) = (*at as usize, *len as usize);
                return dev.write_at(d.offset, &data[at..at + len]).map(|()| None);
            }
            let mut joined = Vec::with_capacity(d.len as usize);
            for (data, at, len) in write_data {
                joined.extend_from_slice(&data[*at as usize..(*at + *len) as usize]);
            }
            dev.write_at(d.offset, &joined).map(|()| None)
        }
    }
}

fn send_results(
    d: &Dispatch,
    outcome: io::Result<Option<Vec<u8>>>,
    replies: Vec<mpsc::Sender<PieceDone>>,
    served_ns: u64,
) {
    match outcome {
        Ok(Some(mut data)) if d.pieces.len() == 1 => {
            data.truncate(d.pieces[0].len as usize);
            let p = &d.pieces[0];
            let _ = replies[0].send(PieceDone {
                req_offset: p.req_offset,
                len: p.len,
                data: Some(data),
                result: Ok(()),
                served_ns,
            });
        }
        Ok(data) => {
            let mut at = 0usize;
            for (p, tx) in d.pieces.iter().zip(replies) {
                let piece = data
                    .as_ref()
                    .map(|all| all[at..at + p.len as usize].to_vec());
                at += p.len as usize;
                let _ = tx.send(PieceDone {
                    req_offset: p.req_offset,
                    len: p.len,
                    data: piece,
                    result: Ok(()),
                    served_ns,
                });
            }
        }
        Err(e) => {
            for (p, tx) in d.pieces.iter().zip(replies) {
                let _ = tx.send(PieceDone {
                    req_offset: p.req_offset,
                    len: p.len,
                    data: None,
                    result: Err(io::Error::new(e.kind(), e.to_string())),
                    served_ns,
                });
            }
        }
    }
}

thread_local! {
    static THREAD_TENANT: Cell<Option<TenantId>> = const { Cell::new(None) };
    static CHARGED_TO: Cell<Option<Charge>> = const { Cell::new(None) };
}

/// Whose I/O a piece of work is: a thread's tenant ([`set_thread_tenant`]) or, without one, its
/// own I/O priority. Taken where work is handed over ([`Charge::of_current_thread`]) and applied
/// by the thread that ends up doing it ([`Charge::apply`]), so that work keeps its owner's
/// weight and class whoever issues it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    tenant: Option<TenantId>,
    prio: Prio,
}

/// While alive, the calling thread's requests are charged to a [`Charge`]; restores the
/// previous one when dropped.
#[derive(Debug)]
pub struct Charged {
    previous: Option<Charge>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Charge {
    /// The calling thread's: its tenant if it has one, else its own priority.
    pub fn of_current_thread() -> Charge {
        match CHARGED_TO.with(Cell::get) {
            Some(c) => c,
            None => Charge {
                tenant: thread_tenant(),
                prio: super::inherit::own_prio(),
            },
        }
    }

    /// A charge to `tenant` at `prio` (a pool server's for a client's request).
    pub fn to(tenant: TenantId, prio: Prio) -> Charge {
        Charge {
            tenant: Some(tenant),
            prio,
        }
    }

    /// The tenant charged, if the charge names one (else the priority's tenant is).
    pub fn tenant(&self) -> Option<TenantId> {
        self.tenant
    }

    /// The priority the charged work runs at.
    pub fn prio(&self) -> Prio {
        self.prio
    }

    /// Charges the calling thread's requests to `self` until the guard is dropped.
    pub fn apply(self) -> Charged {
        super::inherit::set_charged_prio(Some(self.prio));
        Charged {
            previous: CHARGED_TO.with(|c| c.replace(Some(self))),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Charged {
    fn drop(&mut self) {
        CHARGED_TO.with(|c| c.set(self.previous));
        super::inherit::set_charged_prio(self.previous.map(|c| c.prio));
    }
}

/// The priority the calling thread's work runs at: that of a [`Charge`] it applies (a pool
/// server's, for a client's request), else its kernel I/O priority.
pub fn current_prio() -> Prio {
    CHARGED_TO
        .with(Cell::get)
        .map_or_else(Prio::of_current_thread, |c| c.prio)
}

/// Sets (or with `None` clears) the tenant the calling thread's [`SchedDevice`] requests use.
pub fn set_thread_tenant(t: Option<TenantId>) {
    THREAD_TENANT.with(|c| c.set(t));
}

/// The tenant set by [`set_thread_tenant`] on the calling thread, if any.
pub fn thread_tenant() -> Option<TenantId> {
    THREAD_TENANT.with(Cell::get)
}

/// A tenant's wait for shared work ([`Scheduler::hold`]); ends when dropped.
pub struct Held {
    shared: Arc<Shared>,
    tenant: TenantId,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        if (self.tenant.0 as usize) < inner.queue.tenant_count() {
            inner.queue.unhold(self.tenant);
        }
    }
}

/// A [`Device`] that routes every call through a [`Scheduler`], with the tenant of the calling
/// thread: the one set by [`set_thread_tenant`], else a tenant made from the thread's kernel ioprio.
#[derive(Debug, Clone)]
pub struct SchedDevice {
    sched: Arc<Scheduler>,
}

impl SchedDevice {
    pub fn new(s: Arc<Scheduler>) -> SchedDevice {
        SchedDevice { sched: s }
    }

    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }
}

impl Device for SchedDevice {
    fn kind(&self) -> &'static str {
        self.sched.device().kind()
    }

    fn len(&self) -> u64 {
        self.sched.device().len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.sched.read_at(self.sched.current_tenant(), offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.sched
            .write_at(self.sched.current_tenant(), offset, buf)
    }

    fn flush(&self) -> io::Result<()> {
        self.sched.flush(self.sched.current_tenant())
    }

    fn charged(&self) -> bool {
        true
    }

    fn wait_for_shared_work(&self) -> crate::dev::SharedWait {
        crate::dev::SharedWait::new(self.sched.hold(self.sched.current_tenant()))
    }

    fn start_write(&self, offset: u64, buf: Vec<u8>) -> PendingWrite {
        self.sched
            .start_write(self.sched.current_tenant(), offset, buf)
            .unwrap_or_else(|e| PendingWrite::done(Err(e)))
    }
}
