//! A client's connection: the `hello` that opens a session and picks its transport (the rings
//! when both sides want them, else the socket), and calls from any number of threads at once.
//!
//! Every call sends its request with a fresh id and waits for the completion with that id.
//! Completions may come in any order. On the socket, one waiting thread at a time (the reader)
//! takes them off the transport, keeps its own and hands the others to their threads, waking
//! only the thread (or the few threads) a completion is for. On the rings, every waiting thread
//! parks on the completion ring and the server wakes the thread a completion is for, which
//! drains what is published. So a thread whose call waits for a lock or an fsync holds up no
//! other thread's call.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::codec::{read_frame, FRAME_MAX};
use super::protocol::{
    Reply, Request, FEATURE_CALLER, FEATURE_OPEN_STAT, FEATURE_POSTED_CLOSE, VERSION,
};
use super::ring::{
    self, ClientRings, Consumer, DataArea, HeaderWord, Mapping, Parking, Producer, RingSizes, Slot,
    Wake, FEATURE_RING,
};
use crate::sys::sock::send_all;
use crate::tbfs::{Error, Result};

/// How a session's requests and completions travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Frames on the Unix socket.
    Socket,
    /// The shared-memory rings beside the socket.
    Ring,
}

/// Either way the session holds one descriptor, its socket (the shim keeps a program from
/// closing it): the memfd is closed once the server has it, the mapping keeps the memory.
enum Wire {
    Socket {
        stream: UnixStream,
        /// Taken by a thread writing a frame, and by the thread reading one.
        send: Mutex<()>,
        recv: Mutex<()>,
    },
    Ring {
        /// Watched for the server's hang-up while a side waits; carries nothing else.
        socket: UnixStream,
        /// Pushed through by the client's threads at once (boxed: it would make this
        /// variant much larger than the socket's).
        send: Box<Producer>,
        /// Taken only to drain what is published, never held while parked.
        recv: Mutex<Consumer>,
        /// Where a thread waits for its completion, with its id's bits (boxed: it would make
        /// this variant much larger than the socket's).
        parking: Box<Parking>,
        /// The rings' mapping, reached here without their locks (see [`Conn::abandon`]).
        map: Arc<Mapping>,
        /// The closes word the server raises when a removal leaves an inode open.
        closes: Box<HeaderWord>,
        /// Where a long request's data goes, its record then holding only the head.
        data: Option<Box<DataArea>>,
    },
}

impl Wire {
    fn socket(&self) -> &UnixStream {
        match self {
            Wire::Socket { stream, .. } => stream,
            Wire::Ring { socket, .. } => socket,
        }
    }
}

#[derive(Default)]
struct Replies {
    /// Completions taken off the transport by the reader for other threads, by id.
    pending: HashMap<u64, Vec<u8>>,
    /// The ids whose threads wait for a completion not yet taken off the transport.
    waiting: HashSet<u64>,
    /// A thread is reading the transport.
    reading: bool,
    /// Set once the transport failed: no later call can trust it.
    broken: Option<String>,
}

pub(super) struct Conn {
    pub socket: PathBuf,
    pub session: u64,
    pub server_pid: u32,
    wire: Wire,
    /// Each request names its caller (the server has a scheduler to charge).
    called: bool,
    /// The server answers `OpenStat`.
    pub open_stat: bool,
    /// Given up in this process (a forked child's copy of its parent's connection).
    abandoned: AtomicBool,
    /// Closes may be posted: the server granted it, on the rings.
    posts: bool,
    /// Inodes this session asked a lock of: a close of them may let a lock go, so it waits.
    locked: Mutex<HashSet<u64>>,
    /// Handles put in a hold for another session: their descriptions are shared, so a close
    /// of them waits.
    held: Mutex<HashSet<u64>>,
    /// Closes posted since the session began.
    posted: AtomicU64,
    next_id: AtomicU64,
    /// Calls on the rings between their send and their completion.
    in_flight: AtomicUsize,
    replies: Mutex<Replies>,
    /// A waiting thread sleeps on the slot of its id: a completion wakes the threads of one
    /// slot, not every waiting thread.
    arrived: [Condvar; SLOTS],
}

/// Condition variables a connection's waiting threads are spread over.
const SLOTS: usize = 64;

fn lost_error(socket: &Path, e: impl std::fmt::Display, kind: io::ErrorKind) -> Error {
    Error::Io {
        what: format!("pool server at {}", socket.display()),
        source: io::Error::new(kind, e.to_string()),
    }
}

impl Conn {
    /// Connects and says hello, asking for the rings when `rings` is given.
    pub fn connect(socket: &Path, rings: Option<RingSizes>) -> Result<Conn> {
        let mut stream = UnixStream::connect(socket)
            .map_err(|e| Error::io(format!("pool server at {}", socket.display()), e))?;
        let lost = |e: &dyn std::fmt::Display, kind| lost_error(socket, e, kind);
        let hello = Request::Hello {
            version: VERSION,
            features: if rings.is_some() { FEATURE_RING } else { 0 }
                | FEATURE_CALLER
                | FEATURE_OPEN_STAT
                | if rings.is_some() {
                    FEATURE_POSTED_CLOSE
                } else {
                    0
                },
        };
        super::caller::connected();
        send_all(&stream, &hello.encode(1)).map_err(|e| lost(&e, io::ErrorKind::BrokenPipe))?;
        let body = read_frame(&mut stream)
            .map_err(|e| lost(&e, io::ErrorKind::BrokenPipe))?
            .ok_or_else(|| {
                lost(
                    &"the server closed the session",
                    io::ErrorKind::UnexpectedEof,
                )
            })?;
        let (features, server_pid, session) = match Reply::decode(&body) {
            Ok((
                1,
                Ok(Reply::Hello {
                    features,
                    server_pid,
                    session,
                    ..
                }),
            )) => (features, server_pid, session),
            Ok((_, Err(e))) => return Err(e),
            Ok((_, Ok(other))) => {
                return Err(lost(
                    &format!("unexpected reply {other:?}"),
                    io::ErrorKind::InvalidData,
                ))
            }
            Err(e) => return Err(lost(&e, io::ErrorKind::InvalidData)),
        };
        let wire = match rings.filter(|_| features & FEATURE_RING != 0) {
            Some(sizes) => ring_wire(stream, sizes).map_err(|e| lost(&e, e.kind()))?,
            None => socket_wire(stream).map_err(|e| lost(&e, e.kind()))?,
        };
        let posts = features & FEATURE_POSTED_CLOSE != 0 && matches!(wire, Wire::Ring { .. });
        Ok(Conn {
            socket: socket.to_path_buf(),
            session,
            server_pid,
            wire,
            called: features & FEATURE_CALLER != 0,
            open_stat: features & FEATURE_OPEN_STAT != 0,
            abandoned: AtomicBool::new(false),
            posts,
            locked: Mutex::new(HashSet::new()),
            held: Mutex::new(HashSet::new()),
            posted: AtomicU64::new(0),
            next_id: AtomicU64::new(2),
            in_flight: AtomicUsize::new(0),
            replies: Mutex::new(Replies::default()),
            arrived: std::array::from_fn(|_| Condvar::new()),
        })
    }

    pub fn transport(&self) -> Transport {
        match self.wire {
            Wire::Socket { .. } => Transport::Socket,
            Wire::Ring { .. } => Transport::Ring,
        }
    }

    /// The session's socket descriptor, unless the connection was abandoned.
    pub fn socket_fd(&self) -> Option<RawFd> {
        if self.abandoned.load(Ordering::Acquire) {
            return None;
        }
        Some(self.wire.socket().as_raw_fd())
    }

    /// Lets go of this process's copy of the connection without a word to the server, and
    /// without taking a lock (a thread of the parent may have held one at the fork): the socket
    /// descriptor is pointed at /dev/null, so the session stays the parent's; the rings' pages
    /// are replaced by private ones, so nothing here writes the parent's positions or wakes its
    /// futex, and the mapping's later unmapping touches only those private pages.
    pub fn abandon(&self) {
        if self.abandoned.swap(true, Ordering::AcqRel) {
            return;
        }
        // Neither can fail short of descriptor or memory exhaustion; calls fail from now on
        // whatever they did.
        let _ = ring::detach_fd(self.wire.socket().as_raw_fd());
        if let Wire::Ring { map, .. } = &self.wire {
            let _ = map.forsake();
        }
    }

    pub fn lost(&self, e: impl std::fmt::Display, kind: io::ErrorKind) -> Error {
        lost_error(&self.socket, e, kind)
    }

    pub fn unexpected(&self, r: &Reply) -> Error {
        self.lost(
            format!("unexpected reply {r:?}"),
            io::ErrorKind::InvalidData,
        )
    }

    fn replies(&self) -> MutexGuard<'_, Replies> {
        self.replies.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, id: u64) -> &Condvar {
        &self.arrived[(id % SLOTS as u64) as usize]
    }

    /// When no thread reads the transport, wakes one that waits for a completion not yet
    /// taken off it, to read (every id in `waiting` is such a one).
    fn pass_reading(&self, r: MutexGuard<'_, Replies>) {
        let next = (!r.reading)
            .then(|| r.waiting.iter().next().copied())
            .flatten();
        drop(r);
        if let Some(next) = next {
            self.slot(next).notify_all();
        }
    }

    fn broken(&self, why: String) -> Error {
        let mut r = self.replies();
        r.broken.get_or_insert(why.clone());
        r.reading = false;
        drop(r);
        for slot in &self.arrived {
            slot.notify_all();
        }
        if let Wire::Ring { parking, .. } = &self.wire {
            parking.wake_all();
        }
        self.lost(why, io::ErrorKind::BrokenPipe)
    }

    pub fn call(&self, req: &Request) -> Result<Reply> {
        self.call_with(req, None)
    }

    /// The closes word now, where closes may be posted: read before an open is sent, so a
    /// removal that leaves the file open afterwards moves it.
    pub fn closes_word(&self) -> Option<u32> {
        match &self.wire {
            Wire::Ring { closes, .. } if self.posts => Some(closes.load()),
            _ => None,
        }
    }

    /// Notes that this session asked for a lock on inode `ino`: its closes of the inode wait.
    pub fn mark_locked(&self, ino: u64) {
        self.locked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ino);
    }

    /// Notes handles put in a hold: their closes wait.
    pub fn mark_held(&self, handles: impl IntoIterator<Item = u64>) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(handles);
    }

    /// Closes posted since the session began.
    pub fn posted(&self) -> u64 {
        self.posted.load(Ordering::Relaxed)
    }

    /// Closes `handle` (of inode `ino`, opened when the closes word read `seen`) without
    /// waiting for the server, when nothing another call could see depends on when it is
    /// applied. `false`: not sent; the caller closes it the waiting way.
    ///
    /// A close waits when a lock of the session's may go with it (the kernel lets a process's
    /// locks go before `close` returns), when its description is shared with another session,
    /// and when it may be the last close of an unlinked file (its inode and space are freed
    /// then, and another process may look next): the server raised the closes word since
    /// the open. The word is read again after the close is published: a removal that raised it
    /// meanwhile may have missed this close, so the client waits for the server to take it.
    pub fn post_close(&self, handle: u64, ino: u64, seen: u32) -> bool {
        let Wire::Ring { closes, .. } = &self.wire else {
            return false;
        };
        if !self.posts
            || self.abandoned.load(Ordering::Acquire)
            || closes.load() != seen
            || self
                .locked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&ino)
            || self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&handle)
            || self.replies().broken.is_some()
        {
            return false;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let caller = self.called.then(super::caller::current);
        let close = Request::ClosePosted { handle };
        let (head, tail) = close.encode_with(id, caller.as_ref(), None);
        // No worker is woken for it: nothing waits for it but a removal, which wakes them, and
        // the session's next request, which is taken after it.
        if let Err(why) = self.send_as(&head, tail, false) {
            // Lost: the session's end closes it.
            let _ = self.broken(why);
            return true;
        }
        self.posted.fetch_add(1, Ordering::Relaxed);
        // The publish is ordered before this look (the ring's fence after a publish).
        if closes.load() != seen {
            let _ = self.call(&Request::Barrier);
        }
        true
    }

    /// [`Conn::call`] of a write whose data is `data`, sent from where it lies (the request's
    /// own data is left out).
    pub fn call_with(&self, req: &Request, data: Option<&[u8]>) -> Result<Reply> {
        self.call_parts(req, data, None).map(|(reply, _)| reply)
    }

    /// [`Conn::call`] of a leased read into `dest`: on the rings, when the calling thread takes
    /// its own completion off the ring, the data goes from the ring straight into `dest` and
    /// its length comes back with the reply (whose data is then empty); else the data is in
    /// the reply, as from [`Conn::call`].
    pub fn call_into(&self, req: &Request, dest: &mut [u8]) -> Result<(Reply, Option<usize>)> {
        self.call_parts(req, None, Some(dest))
    }

    fn call_parts(
        &self,
        req: &Request,
        data: Option<&[u8]>,
        dest: Option<&mut [u8]>,
    ) -> Result<(Reply, Option<usize>)> {
        if self.abandoned.load(Ordering::Acquire) {
            return Err(self.lost(
                "connection given up in this process",
                io::ErrorKind::NotConnected,
            ));
        }
        if let Some(why) = &self.replies().broken {
            return Err(self.lost(
                format!("connection lost earlier: {why}"),
                io::ErrorKind::NotConnected,
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let caller = self.called.then(super::caller::current);
        let (head, tail) = req.encode_with(id, caller.as_ref(), data);
        let times = super::timing::client();
        let t0 = times.map(|_| std::time::Instant::now());
        let mut t1 = t0;
        let (body, moved) = match &self.wire {
            Wire::Ring {
                socket,
                recv,
                parking,
                ..
            } => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                // The data's slot in the data area, if it went there, is held until the
                // completion (or the session's end) says the server has it.
                let body = self
                    .send_ring(&head, tail, true)
                    .map_err(|why| self.broken(why))
                    .and_then(|_slot| {
                        if t1.is_some() {
                            t1 = Some(std::time::Instant::now());
                        }
                        self.ring_completion(id, socket, recv, parking, dest)
                    });
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                body?
            }
            Wire::Socket { stream, recv, .. } => {
                self.send(&head, tail).map_err(|why| self.broken(why))?;
                (self.completion(id, stream, recv)?, None)
            }
        };
        let t2 = t0.map(|_| std::time::Instant::now());
        let decoded = Reply::decode_owned(body);
        if let (Some(t), Some(t0), Some(t1), Some(t2)) = (times, t0, t1, t2) {
            let op = head.get(if self.called { 18 } else { 12 }).copied();
            let n = t.add(op.unwrap_or(0), &[t0, t1, t2, std::time::Instant::now()]);
            super::timing::client_done(t, n);
        }
        match decoded {
            Ok((_, reply)) => reply.map(|r| (r, moved)),
            Err(e) => Err(self.broken(e.to_string())),
        }
    }

    /// Sends the frame `head` and `tail` make together.
    fn send(&self, head: &[u8], tail: &[u8]) -> std::result::Result<(), String> {
        self.send_as(head, tail, true)
    }

    /// [`Conn::send`]; on the rings, without `wake` no parked worker of the session is woken
    /// for the frame: one takes it with the next frame that wakes one, or when it looks again
    /// on its own.
    fn send_as(&self, head: &[u8], tail: &[u8], wake: bool) -> std::result::Result<(), String> {
        match &self.wire {
            Wire::Socket { stream, send, .. } => {
                let _turn = send.lock().unwrap_or_else(|p| p.into_inner());
                send_all(stream, head).map_err(|e| e.to_string())?;
                if tail.is_empty() {
                    return Ok(());
                }
                send_all(stream, tail).map_err(|e| e.to_string())
            }
            // Through the ring whatever its length: with no completion to wait for, nothing
            // would say when data put in the data area could be let go.
            Wire::Ring { socket, send, .. } => {
                let whom = if wake { Wake::One } else { Wake::Nobody };
                send.push_parts(&[head, tail], whom, socket)
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    }

    /// [`Conn::send_as`] of a request whose completion the caller waits for. On the rings, data
    /// long enough goes into the data area, and the frame into the ring as one short record;
    /// the slot returned holds the data there until it is dropped, which must not be before
    /// the completion of the request comes back.
    fn send_ring(
        &self,
        head: &[u8],
        tail: &[u8],
        wake: bool,
    ) -> std::result::Result<Option<Slot<'_>>, String> {
        let Wire::Ring {
            socket, send, data, ..
        } = &self.wire
        else {
            return self.send_as(head, tail, wake).map(|()| None);
        };
        let whom = if wake { Wake::One } else { Wake::Nobody };
        match data.as_deref().filter(|d| d.takes(tail.len())) {
            Some(area) => {
                let slot = area.put(tail).map_err(|e| e.to_string())?;
                send.push_out(head, slot.place(), whom, socket)
                    .map_err(|e| e.to_string())?;
                Ok(Some(slot))
            }
            None => {
                send.push_parts(&[head, tail], whom, socket)
                    .map_err(|e| e.to_string())?;
                Ok(None)
            }
        }
    }

    /// Records the request ring took so far (`None` on the socket): a frame whose data went
    /// to the data area, or that fits one record, counts one.
    #[cfg(test)]
    pub fn records_sent(&self) -> Option<u64> {
        match &self.wire {
            Wire::Ring { send, .. } => Some(send.records()),
            Wire::Socket { .. } => None,
        }
    }

    /// What the completion ring's reader took so far (`None` on the socket).
    #[cfg(test)]
    pub fn completions_taken(&self) -> Option<super::ring::Taken> {
        match &self.wire {
            Wire::Ring { recv, .. } => Some(recv.lock().unwrap_or_else(|p| p.into_inner()).taken()),
            Wire::Socket { .. } => None,
        }
    }

    /// The request data area, if the session has one.
    #[cfg(test)]
    pub fn data_area(&self) -> Option<&DataArea> {
        match &self.wire {
            Wire::Ring { data, .. } => data.as_deref(),
            Wire::Socket { .. } => None,
        }
    }

    /// Waits for the completion of request `id` on the rings. Every waiting thread parks on
    /// the completion ring with its id's bits, and the server wakes only the thread a
    /// completion is for; a thread that wakes drains whatever is published and hands others'
    /// completions to their threads, waking each. So a completion costs its own thread one
    /// wakeup and no other thread any, and no thread is woken only to take over reading.
    ///
    /// With `dest`, a leased read's data in its own completion goes from the ring into `dest`
    /// when this thread takes it, and its length comes back (`Some`) with the rest of the body.
    fn ring_completion(
        &self,
        id: u64,
        socket: &UnixStream,
        recv: &Mutex<Consumer>,
        parking: &Parking,
        mut dest: Option<&mut [u8]>,
    ) -> Result<(Vec<u8>, Option<usize>)> {
        let bits = ring::waiter_bits(id);
        loop {
            // Others' completions are put where their threads look before the ring is let go:
            // a thread that takes the ring after this one finds them.
            let seen = {
                let tl = super::timing::client().map(|_| std::time::Instant::now());
                let mut c = recv.lock().unwrap_or_else(|p| p.into_inner());
                if let (Some(t), Some(tl)) = (super::timing::client(), tl) {
                    t.extra(3, tl.elapsed().as_nanos() as u64);
                }
                loop {
                    let taken = match dest.as_deref_mut() {
                        Some(d) => {
                            let room = d.len();
                            let mut pick = |head: &[u8]| Reply::leased_data_in(head, id, room);
                            c.try_frame_into(FRAME_MAX, &mut pick, d)
                        }
                        None => c.try_frame(FRAME_MAX).map(|r| r.map(|body| (body, None))),
                    };
                    let (mut body, moved) = match taken {
                        Ok(Ok(taken)) => taken,
                        Ok(Err(seen)) => break seen,
                        Err(e) => {
                            drop(c);
                            return Err(self.broken(e.to_string()));
                        }
                    };
                    let Some(rid) = completion_id(&body) else {
                        drop(c);
                        return Err(self.broken("a completion too short for its id".into()));
                    };
                    if rid == id {
                        if moved.is_some() {
                            Reply::leased_data_taken_out(&mut body);
                        }
                        return Ok((body, moved));
                    }
                    self.replies().pending.insert(rid, body);
                    let woke = parking.wake_bits(ring::waiter_bits(rid));
                    if let Some(t) = super::timing::client() {
                        t.extra(1, 1);
                        t.extra(2, woke as u64);
                    }
                }
            };
            {
                let mut r = self.replies();
                if let Some(body) = r.pending.remove(&id) {
                    return Ok((body, None));
                }
                if let Some(why) = &r.broken {
                    return Err(self.lost(why.clone(), io::ErrorKind::BrokenPipe));
                }
            }
            // A completion published after `seen` ends the wait at once; one published before
            // was drained above, here or by the thread that had the ring. Only a call alone in
            // flight spins first: with others, a spinner is sent back to drain by every
            // completion published, mostly not its own, and holds a core its peer may need.
            let alone = self.in_flight.load(Ordering::Relaxed) <= 1;
            if let Some(t) = super::timing::client() {
                t.extra(0, 1);
            }
            if let Err(e) = parking.wait_bits(seen, bits, alone, socket) {
                return Err(self.broken(e.to_string()));
            }
        }
    }

    /// One completion's body off the socket, taking the reader's turn `recv`. (On the rings
    /// there is no reader: every waiting thread drains them itself, `ring_completion`.)
    fn receive(stream: &UnixStream, recv: &Mutex<()>) -> std::result::Result<Vec<u8>, String> {
        let _turn = recv.lock().unwrap_or_else(|p| p.into_inner());
        match read_frame(&mut &*stream) {
            Ok(Some(body)) => Ok(body),
            Ok(None) => Err("the server closed the session".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Waits for the completion of request `id` on the socket `stream`, reading it whenever
    /// no other thread is.
    fn completion(&self, id: u64, stream: &UnixStream, recv: &Mutex<()>) -> Result<Vec<u8>> {
        let mut r = self.replies();
        loop {
            if let Some(body) = r.pending.remove(&id) {
                r.waiting.remove(&id);
                self.pass_reading(r);
                return Ok(body);
            }
            if let Some(why) = &r.broken {
                let why = why.clone();
                r.waiting.remove(&id);
                return Err(self.lost(why, io::ErrorKind::BrokenPipe));
            }
            if r.reading {
                r.waiting.insert(id);
                r = self.slot(id).wait(r).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            r.waiting.remove(&id);
            r.reading = true;
            drop(r);
            loop {
                let body = Self::receive(stream, recv).map_err(|why| self.broken(why))?;
                let Some(rid) = completion_id(&body) else {
                    return Err(self.broken("a completion too short for its id".into()));
                };
                let mut g = self.replies();
                if rid == id {
                    g.reading = false;
                    self.pass_reading(g);
                    return Ok(body);
                }
                g.pending.insert(rid, body);
                // Its thread no longer waits to read: it has its completion.
                let waits = g.waiting.remove(&rid);
                drop(g);
                if waits {
                    self.slot(rid).notify_all();
                }
            }
        }
    }
}

/// The id a completion's body starts with.
fn completion_id(body: &[u8]) -> Option<u64> {
    let b: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

fn socket_wire(stream: UnixStream) -> io::Result<Wire> {
    Ok(Wire::Socket {
        stream,
        send: Mutex::new(()),
        recv: Mutex::new(()),
    })
}

/// Sends the memfd and reads the server's answer: rings, or (it could not use them) the socket.
fn ring_wire(mut stream: UnixStream, sizes: RingSizes) -> io::Result<Wire> {
    let rings = ClientRings::create(sizes).ok();
    ring::send_memfd(&stream, rings.as_ref().map(|r| &r.memfd))?;
    let mut answer = [0u8];
    stream.read_exact(&mut answer)?;
    match (answer[0], rings) {
        (ring::ANSWER_RINGS, Some(r)) => Ok(Wire::Ring {
            socket: stream,
            map: r.requests.mapping().clone(),
            closes: Box::new(r.closes),
            parking: Box::new(r.completions.parking()),
            send: Box::new(r.requests),
            recv: Mutex::new(r.completions),
            data: r.data.map(Box::new),
        }),
        (ring::ANSWER_SOCKET, _) => socket_wire(stream),
        (other, _) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("answer {other} to the rings"),
        )),
    }
}
