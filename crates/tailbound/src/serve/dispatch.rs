//! A session's transport on the server: the `hello`, taking the client's rings when it asks for
//! them, and the loop that reads requests and sends completions.
//!
//! A session's requests are answered by a few worker threads at once (the session's own thread
//! and those it starts as requests pile up, up to a bound), so one client's threads do not queue
//! behind each other's calls. A request that may wait long (a lock wait, an fsync, a sync) runs
//! on a thread of its own besides. Completions carry their request's id; the client matches them.

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::caller::{self, Callers};
use super::codec::{read_frame, FRAME_MAX};
use super::posted::Gate;
use super::protocol::{
    Reply, Request, CLOSE_POSTED, FEATURE_CALLER, FEATURE_OPEN_STAT, FEATURE_POSTED_CLOSE, VERSION,
};
use super::ring::{
    self, Consumer, Frame, Parking, Producer, RingError, ServerRings, Wake, FEATURE_RING,
};
use super::session::Session;
use super::shared::Shared;
use super::tally::{Event, Tally};
use crate::sched::Charge;
use crate::sys::sock::{send_all, PeerCred};
use crate::tbfs::{Error, Result};

/// At most this many of a session's requests run on threads of their own at once; beyond it,
/// the session's thread runs them itself (and so reads nothing more until one is done).
pub(super) const MOST_APART: usize = 64;

/// Serves one client until it goes, then cleans up after it.
pub(super) fn run(shared: &Shared, mut stream: UnixStream, id: u64, cred: PeerCred) {
    let Ok(watch) = stream.try_clone() else {
        return;
    };
    let s = Session::new(shared, id, cred, watch);
    let tally = Tally::from_env();
    let Some((rings, called, posts)) = greet(shared, &mut stream, id) else {
        s.end();
        return;
    };
    // With the caller in each request's header, the I/O done for it is charged to the
    // caller's tenant.
    let callers = shared
        .tenants
        .as_ref()
        .filter(|_| called)
        .map(|t| Callers::new(t, cred.pid as u32));
    let ending = match rings {
        None => {
            let out = SocketOut {
                stream: Mutex::new(&stream),
            };
            let mut inbound = SocketIn {
                stream: stream.try_clone().ok(),
            };
            serve(
                &s,
                callers,
                &stream,
                &mut inbound,
                &out,
                None,
                tally.as_ref(),
            )
        }
        Some(rings) => {
            let gate = posts.then(|| {
                let g = Arc::new(Gate::new(rings.closes.clone(), rings.requests.parking()));
                shared.closes.register(id, g.clone());
                g
            });
            let out = RingOut {
                socket: &stream,
                producer: rings.completions,
                tally: tally.as_ref(),
            };
            let mut inbound = RingIn {
                consumer: rings.requests,
            };
            let ending = serve(
                &s,
                callers,
                &stream,
                &mut inbound,
                &out,
                gate.as_deref(),
                tally.as_ref(),
            );
            if let Some(t) = &tally {
                t.ring(inbound.consumer.taken());
            }
            ending
        }
    };
    if let Some(t) = &tally {
        t.write(id);
    }
    if let Some(why) = ending {
        eprintln!("tailbound serve: session {id} ended: {why}");
    }
    s.end();
    // Everything it had open is closed: a removal waiting for its posted closes goes on.
    shared.closes.ended(id);
}

/// Answers the client's `hello`; then, if the rings were granted, takes its memfd. `None`: the
/// session ends; else it goes on over the rings if given, the socket if not, with the caller
/// in each request's header if the first `bool`, and with posted closes if the second (only
/// on the rings).
fn greet(
    shared: &Shared,
    stream: &mut UnixStream,
    id: u64,
) -> Option<(Option<ServerRings>, bool, bool)> {
    let body = read_frame(stream).ok()??;
    let (req_id, decoded) = Request::decode(&body);
    let req_id = req_id.unwrap_or(0);
    let offered = if shared.rings { FEATURE_RING } else { 0 }
        | caller::offered(shared.tenants.as_ref())
        | FEATURE_OPEN_STAT
        | if shared.posts_closes {
            FEATURE_POSTED_CLOSE
        } else {
            0
        };
    let reply = match decoded {
        Err(e) => Err(Error::Invalid(e.to_string())),
        Ok(Request::Hello { version, .. }) if version != VERSION => Err(Error::Invalid(format!(
            "protocol version {version}: this server speaks version {VERSION}"
        ))),
        Ok(Request::Hello { features, .. }) => Ok(Reply::Hello {
            version: VERSION,
            features: features & offered,
            server_pid: std::process::id(),
            session: id,
        }),
        Ok(_) => Err(Error::Invalid("the first request must be hello".into())),
    };
    let frame = match &reply {
        Ok(r) => r.encode(req_id),
        Err(e) => Reply::encode_error(req_id, e),
    };
    send_all(stream, &frame).ok()?;
    let Ok(Reply::Hello { features, .. }) = reply else {
        return None;
    };
    let called = features & FEATURE_CALLER != 0;
    let posts = features & FEATURE_POSTED_CLOSE != 0;
    if features & FEATURE_RING == 0 {
        return Some((None, called, false));
    }
    // The client's next bytes on the socket are the tag and its memfd.
    let (tag, fds) = ring::recv_memfd(stream).ok()??;
    if tag != ring::TAG_MEMFD {
        return None;
    }
    match ServerRings::attach(fds) {
        Ok(rings) => {
            send_all(stream, &[ring::ANSWER_RINGS]).ok()?;
            Some((Some(rings), called, posts))
        }
        Err(why) => {
            eprintln!("tailbound serve: session {id}: rings refused, the socket serves: {why}");
            send_all(stream, &[ring::ANSWER_SOCKET]).ok()?;
            Some((None, called, false))
        }
    }
}

/// Sends the completion of request `id`: a reply's data goes from where it lies into the
/// transport, not through a frame first. `Later`: the wake-up of the thread waiting for it
/// may wait for the sender's [`Outbound::wake_deferred`].
fn complete(
    out: &dyn Outbound,
    id: u64,
    reply: &Result<Reply>,
    when: Woken,
) -> std::result::Result<(), Option<String>> {
    match reply {
        Ok(r) => {
            let (head, data, after) = r.encode_parts(id);
            out.send(id, &[&head, data, &after], when)
        }
        Err(e) => out.send(id, &[&Reply::encode_error(id, e)], when),
    }
}

/// When a completion's waiting thread is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// As it is published.
    Now,
    /// By the sender's next [`Outbound::wake_deferred`], which a worker makes before it waits
    /// for anything and after at most [`DEFER_MOST`] answers.
    Later,
}

/// The most completions a worker publishes before it makes their wake-ups: a client thread's
/// completion waits for at most the next answer of the worker that made it. A woken client
/// thread tends to take the CPU of the worker that woke it; waking after the next answer
/// lets the worker finish that answer first, and makes one wake-up call for both.
const DEFER_MOST: usize = 2;

/// What a look at the transport found.
enum Next {
    /// A request's body.
    Body(Frame),
    /// Nothing yet: park on the [`Inbound::parking`] until the ring moves from this position.
    Wait(u32),
}

/// Where requests come from. `Ok(None)`: the client went; `Err`: why the session must end.
trait Inbound: Send {
    fn next(&mut self) -> std::result::Result<Option<Next>, String>;
    /// Where workers park while the transport has nothing, without holding it (`None`: a
    /// transport that blocks in [`Inbound::next`] instead).
    fn parking(&self) -> Option<Parking> {
        None
    }
    /// How far the transport's requests are taken (`None`: a transport without positions).
    fn position(&self) -> Option<u32> {
        None
    }
}

/// Where completions go, from the session's thread and the threads it started. `Err(None)`:
/// the client went; `Err(Some(_))`: why the session must end.
trait Outbound: Sync {
    /// Sends the frame `parts` make one after the other, the completion of request `id`,
    /// waking its thread as `when` says.
    fn send(
        &self,
        id: u64,
        parts: &[&[u8]],
        when: Woken,
    ) -> std::result::Result<(), Option<String>>;
    /// Makes the wake-ups of completions sent [`Woken::Later`] (by any thread) that are not
    /// made yet.
    fn wake_deferred(&self) {}
}

struct SocketIn {
    stream: Option<UnixStream>,
}

impl Inbound for SocketIn {
    fn next(&mut self) -> std::result::Result<Option<Next>, String> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(None);
        };
        // A frame too long or cut short cannot be skipped safely: the session ends, quietly, as
        // a client that sent it has no one to read a complaint.
        Ok(read_frame(stream)
            .ok()
            .flatten()
            .map(|b| Next::Body(Frame::from(b))))
    }
}

struct SocketOut<'a> {
    stream: Mutex<&'a UnixStream>,
}

impl Outbound for SocketOut<'_> {
    /// On the socket, the reader is woken by the bytes: nothing is deferred.
    fn send(
        &self,
        _id: u64,
        parts: &[&[u8]],
        _when: Woken,
    ) -> std::result::Result<(), Option<String>> {
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        for part in parts.iter().filter(|p| !p.is_empty()) {
            send_all(&s, part).map_err(|_| None)?;
        }
        Ok(())
    }
}

struct RingIn {
    consumer: Consumer,
}

impl Inbound for RingIn {
    fn next(&mut self) -> std::result::Result<Option<Next>, String> {
        // A write's data in the request data area stays there until the engine takes it.
        match self.consumer.try_lent(FRAME_MAX) {
            Ok(Ok(body)) => Ok(Some(Next::Body(body))),
            Ok(Err(seen)) => Ok(Some(Next::Wait(seen))),
            Err(RingError::Gone) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
    fn parking(&self) -> Option<Parking> {
        Some(self.consumer.parking())
    }
    fn position(&self) -> Option<u32> {
        Some(self.consumer.position())
    }
}

struct RingOut<'a> {
    socket: &'a UnixStream,
    /// Pushed through by the session's workers at once.
    producer: Producer,
    tally: Option<&'a Tally>,
}

impl Outbound for RingOut<'_> {
    fn send(
        &self,
        id: u64,
        parts: &[&[u8]],
        when: Woken,
    ) -> std::result::Result<(), Option<String>> {
        // Only the client's thread that waits for this completion is woken.
        let bits = ring::waiter_bits(id);
        let pushed = match when {
            Woken::Now => self
                .producer
                .push_parts(parts, Wake::Bits(bits), self.socket),
            Woken::Later => self
                .producer
                .push_deferred(parts, bits, self.socket)
                .map(|()| 0),
        };
        let woke = pushed.map_err(|e| match e {
            RingError::Gone => None,
            RingError::Corrupt(_) => Some(e.to_string()),
        })?;
        if let Some(t) = self.tally {
            t.event(Event::Completion);
            if woke > 0 {
                t.event(Event::CompletionWake);
            }
        }
        Ok(())
    }

    fn wake_deferred(&self) {
        let woke = self.producer.wake_deferred();
        if let Some(t) = self.tally {
            for _ in 0..woke {
                t.event(Event::CompletionWake);
            }
        }
    }
}

/// The most threads that answer one session's requests at once: enough to keep the cores busy
/// while some of them wait on the device or on a lock of the engine's, few enough that a
/// session cannot take the machine's threads.
pub(super) fn most_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).clamp(4, 32)
}

/// What a session's workers share while it is served.
struct Workers<'w> {
    inbound: Mutex<&'w mut dyn Inbound>,
    /// Where idle workers park on the rings: each request then wakes at most one of them, and
    /// a worker that takes one hands nothing over to another.
    parking: Option<Parking>,
    /// With the caller in each request's header: whose tenant its I/O is charged to.
    callers: Option<Mutex<Callers<'w>>>,
    out: &'w dyn Outbound,
    socket: &'w UnixStream,
    /// Set once the client went or the transport failed: no worker reads again.
    ending: AtomicBool,
    /// Why the session must end, if the transport failed.
    failed: Mutex<Option<String>>,
    /// Workers not answering a request (reading, or waiting for their turn to read).
    idle: AtomicUsize,
    /// Workers started, the session's own thread included.
    started: AtomicUsize,
    most: usize,
    /// Requests running on threads of their own (they may wait long).
    apart: AtomicUsize,
    /// The session's posted closes (on the rings, where granted).
    gate: Option<&'w Gate>,
    tally: Option<&'w Tally>,
    times: Option<super::timing::Times>,
}

impl Workers<'_> {
    fn count(&self, e: Event) {
        if let Some(t) = self.tally {
            t.event(e);
        }
    }

    /// Records why the session ends (if it must) and wakes whatever waits on the client: the
    /// reader and lock waits watch the socket.
    fn fail(&self, why: Option<String>) {
        self.ending.store(true, Ordering::Release);
        if let Some(why) = why {
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(why);
        }
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(p) = &self.parking {
            p.wake_all();
        }
    }

    /// The next request, taken by one worker at a time; `None` once the session ends. On the
    /// rings a worker parks without holding them, so the next request goes to whichever
    /// worker is free first. A worker wakes no other: the client's push of a request wakes
    /// one parked worker if any is parked, so a wake-up here would be a second one for the
    /// same request (the one that finds nothing, or a `FUTEX_WAKE` that finds no one).
    ///
    /// A posted close is applied here, by the reader, before the reader's turn goes to the
    /// next: no later request of the session is taken before it is applied.
    fn next(&self, s: &Session<'_>) -> Option<Frame> {
        let mut woken = false;
        loop {
            let tl = self.times.as_ref().map(|_| std::time::Instant::now());
            let mut inbound = match self.inbound.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    // This worker may sleep for its turn: the wake-ups it deferred are made
                    // first.
                    self.out.wake_deferred();
                    self.inbound.lock().unwrap_or_else(|p| p.into_inner())
                }
            };
            if let (Some(t), Some(tl)) = (&self.times, tl) {
                t.extra(0, tl.elapsed().as_nanos() as u64);
            }
            if self.ending.load(Ordering::Acquire) {
                return None;
            }
            let got = inbound.next();
            // What the session published up to here is taken (a posted close: applied).
            let taken = || {
                if let (Some(g), Some(pos)) = (self.gate, inbound.position()) {
                    g.applied(pos);
                }
            };
            let seen = match got {
                Ok(Some(Next::Body(body))) if self.gate.is_some() && self.posted(s, &body) => {
                    taken();
                    continue;
                }
                // No other worker is woken for the requests behind this one: each request's
                // push woke a parked worker when one was parked, and when none was, every
                // worker is awake and reads again once it has answered.
                Ok(Some(Next::Body(body))) => {
                    taken();
                    return Some(body);
                }
                Ok(Some(Next::Wait(seen))) => {
                    taken();
                    if woken {
                        self.count(Event::EmptyWake);
                    }
                    seen
                }
                Ok(None) => {
                    self.fail(None);
                    return None;
                }
                Err(why) => {
                    self.fail(Some(why));
                    return None;
                }
            };
            drop(inbound);
            // Nothing to answer: the completions whose wake-ups wait are woken before this
            // worker parks.
            self.out.wake_deferred();
            let Some(p) = &self.parking else {
                self.fail(Some("a transport that cannot wait".into()));
                return None;
            };
            self.count(Event::Park);
            let tp = self.times.as_ref().map(|_| std::time::Instant::now());
            let waited = p.wait(seen, self.socket);
            if let (Some(t), Some(tp)) = (&self.times, tp) {
                t.extra(1, tp.elapsed().as_nanos() as u64);
                t.extra(2, 1);
            }
            match waited {
                Ok(()) => woken = true,
                Err(RingError::Gone) => {
                    self.fail(None);
                    return None;
                }
                Err(e) => {
                    self.fail(Some(e.to_string()));
                    return None;
                }
            }
        }
    }
}

impl Workers<'_> {
    /// If `body` is a posted close, applies it and says so. It has no completion: an error
    /// (a handle already closed) has no one to go to.
    fn posted(&self, s: &Session<'_>, body: &Frame) -> bool {
        // The operation's byte follows the id and, when requests carry it, the caller.
        let at = if self.callers.is_some() { 14 } else { 8 };
        let Frame {
            head: body,
            tail: None,
        } = body
        else {
            return false;
        };
        if body.get(at) != Some(&CLOSE_POSTED) {
            return false;
        }
        let (_, decoded) = Request::decode_owned(body.to_vec(), self.callers.is_some());
        let Ok((_, req @ Request::ClosePosted { .. })) = decoded else {
            return false;
        };
        if let Some(t) = self.tally {
            t.request(CLOSE_POSTED);
        }
        s.close_posted(req);
        true
    }
}

/// Reads and answers requests until the client goes or the transport fails; returns why it
/// failed, if it did. Every request of the session is answered before it returns (a lock wait
/// gives up once the client is gone).
///
/// Workers take turns reading the transport; one that takes a request answers it itself, after
/// starting another worker if none is left to read (up to [`most_workers`]). So a request that
/// takes long holds up no other: the next is read and answered meanwhile. Each client thread
/// waits for its completion before it sends again, so a client's requests that must stay in
/// order are never in flight together.
fn serve<'w>(
    s: &Session<'_>,
    callers: Option<Callers<'w>>,
    socket: &'w UnixStream,
    inbound: &'w mut dyn Inbound,
    out: &'w dyn Outbound,
    gate: Option<&'w Gate>,
    tally: Option<&'w Tally>,
) -> Option<String> {
    let w = Workers {
        parking: inbound.parking(),
        inbound: Mutex::new(inbound),
        callers: callers.map(Mutex::new),
        out,
        socket,
        ending: AtomicBool::new(false),
        failed: Mutex::new(None),
        idle: AtomicUsize::new(1),
        started: AtomicUsize::new(1),
        most: most_workers(),
        apart: AtomicUsize::new(0),
        gate,
        tally,
        times: super::timing::session(),
    };
    std::thread::scope(|scope| {
        work(scope, s, &w);
        // No request of the session is taken from now on (what the client published before it
        // hung up was taken): a removal waiting for it goes on, rather than wait for the
        // session's end, which waits for that removal's thread.
        if let Some(g) = gate {
            g.end();
        }
        // The client is gone or must be: requests still waiting on it give up.
        let _ = socket.shutdown(std::net::Shutdown::Both);
    });
    if let Some(t) = &w.times {
        super::timing::session_done(t, s.id());
    }
    w.failed.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// One worker: reads a request when its turn comes, answers it, and again, until the session
/// ends.
fn work<'scope, 'env, 'w: 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    s: &'env Session<'_>,
    w: &'env Workers<'w>,
) {
    // Answers since this worker last made its deferred wake-ups.
    let mut unwoken = 0;
    while let Some(body) = w.next(s) {
        // This worker is about to answer: if it was the last one reading, another takes over.
        if w.idle.fetch_sub(1, Ordering::AcqRel) == 1 && w.started.load(Ordering::Acquire) < w.most
        {
            w.started.fetch_add(1, Ordering::AcqRel);
            w.idle.fetch_add(1, Ordering::AcqRel);
            let spawned = std::thread::Builder::new()
                .name(format!("tbfs-session-{}-worker", s.id()))
                .spawn_scoped(scope, move || work(scope, s, w));
            if spawned.is_err() {
                // This worker reads again once it has answered.
                w.started.fetch_sub(1, Ordering::AcqRel);
                w.idle.fetch_sub(1, Ordering::AcqRel);
            }
        }
        answer(scope, s, w, body);
        w.idle.fetch_add(1, Ordering::AcqRel);
        unwoken += 1;
        if unwoken >= DEFER_MOST {
            w.out.wake_deferred();
            unwoken = 0;
        }
    }
    w.out.wake_deferred();
}

/// Answers one request, or hands it to a thread of its own when it may wait long.
fn answer<'scope, 'env, 'w: 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    s: &'env Session<'_>,
    w: &'env Workers<'w>,
    body: Frame,
) {
    let t0 = w.times.as_ref().map(|_| std::time::Instant::now());
    let op = body
        .head
        .get(if w.callers.is_some() { 14 } else { 8 })
        .copied();
    if let Some(t) = w.tally {
        // The operation's byte follows the id and, when requests carry it, the caller.
        let at = if w.callers.is_some() { 14 } else { 8 };
        if let Some(&op) = body.head.get(at) {
            t.request(op);
        }
    }
    let (req_id, decoded) = Request::decode_frame(body, w.callers.is_some());
    let decoded = decoded.map(|(caller, r)| {
        let charge = caller
            .zip(w.callers.as_ref())
            .map(|(c, callers)| callers.lock().unwrap_or_else(|p| p.into_inner()).charge(&c));
        (charge, r)
    });
    let req_id = req_id.unwrap_or(0);
    let reply = match decoded {
        Err(e) => Err(Error::Invalid(e.to_string())),
        Ok((charge, req)) => {
            // A lock wait may last until another of the client's requests lets the lock go:
            // it must not hold a worker, or enough of them would stall the session.
            let job = (w.apart.load(Ordering::Acquire) < MOST_APART)
                .then(|| s.apart(&req))
                .flatten();
            match job {
                None => {
                    let _charged = charge.map(Charge::apply);
                    if matches!(req, Request::ClosePosted { .. }) {
                        // Sent without waiting: it has no completion.
                        s.close_posted(req);
                        return;
                    }
                    let t1 = t0.map(|_| std::time::Instant::now());
                    match s.serve_ordered(req) {
                        (reply, None) => {
                            if let (Some(t), Some(t0), Some(t1)) = (&w.times, t0, t1) {
                                let t2 = std::time::Instant::now();
                                let sent = complete(w.out, req_id, &reply, Woken::Later);
                                t.add(op.unwrap_or(0), &[t0, t1, t2, std::time::Instant::now()]);
                                if let Err(why) = sent {
                                    w.fail(why);
                                }
                                return;
                            }
                            reply
                        }
                        (reply, Some(drain)) => {
                            w.count(Event::Raise);
                            // The wait is on a thread of its own: this worker may be the one
                            // its own session needs to take the closes waited for.
                            let held = Arc::new(Mutex::new(Some((drain, reply))));
                            let theirs = held.clone();
                            let spawned = std::thread::Builder::new()
                                .name(format!("tbfs-session-{}-drain", s.id()))
                                .spawn_scoped(scope, move || {
                                    let taken =
                                        theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                                    if let Some((d, reply)) = taken {
                                        d.wait();
                                        if let Err(why) =
                                            complete(w.out, req_id, &reply, Woken::Now)
                                        {
                                            w.fail(why);
                                        }
                                    }
                                });
                            if spawned.is_ok() {
                                return;
                            }
                            // No thread (its closure never ran): this one waits.
                            let taken = held.lock().unwrap_or_else(|p| p.into_inner()).take();
                            let Some((d, reply)) = taken else { return };
                            // This worker sleeps: what it deferred is woken first.
                            w.out.wake_deferred();
                            d.wait();
                            reply
                        }
                    }
                }
                Some(job) => {
                    w.apart.fetch_add(1, Ordering::AcqRel);
                    let spawned = std::thread::Builder::new()
                        .name(format!("tbfs-session-{}-apart", s.id()))
                        .spawn_scoped(scope, move || {
                            let charged = charge.map(Charge::apply);
                            let reply = job();
                            drop(charged);
                            if let Err(why) = complete(w.out, req_id, &reply, Woken::Now) {
                                w.fail(why);
                            }
                            w.apart.fetch_sub(1, Ordering::AcqRel);
                        });
                    match spawned {
                        Ok(_) => return,
                        Err(e) => {
                            w.apart.fetch_sub(1, Ordering::AcqRel);
                            Err(Error::io(
                                "no thread for a request that may wait",
                                io::Error::new(e.kind(), e.to_string()),
                            ))
                        }
                    }
                }
            }
        }
    };
    if let Err(why) = complete(w.out, req_id, &reply, Woken::Later) {
        w.fail(why);
    }
}
