//! A session's transport on the server: the `hello`, taking the client's rings when it asks for
//! them, and the loop that reads requests and sends completions.
//!
//! One thread (the session's) reads requests and answers most of them itself, in order. A
//! request that may wait long (a lock wait, an fsync, a sync) runs on a thread of its own, and
//! its completion goes out when it is done, so the client's other threads' requests are answered
//! meanwhile. Completions carry their request's id; the client matches them.

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::caller::{self, Callers};
use super::codec::{read_frame, FRAME_MAX};
use super::protocol::{Reply, Request, FEATURE_CALLER, VERSION};
use super::ring::{self, Consumer, Producer, RingError, ServerRings, FEATURE_RING};
use super::session::Session;
use super::shared::Shared;
use crate::sched::Charge;
use crate::sys::sock::{send_all, PeerCred};
use crate::tbfs::{Error, Result};

/// At most this many of a session's requests run on threads of their own at once; beyond it,
/// the session's thread runs them itself (and so reads nothing more until one is done).
const MOST_APART: usize = 64;

/// Serves one client until it goes, then cleans up after it.
pub(super) fn run(shared: &Shared, mut stream: UnixStream, id: u64, cred: PeerCred) {
    let Ok(watch) = stream.try_clone() else {
        return;
    };
    let mut s = Session::new(shared, id, cred, watch);
    let Some((rings, called)) = greet(shared, &mut stream, id) else {
        s.end();
        return;
    };
    // With the caller in each request's header, the I/O done for it is charged to the
    // caller's tenant.
    let mut callers = shared
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
            serve(&mut s, &mut callers, &stream, &mut inbound, &out)
        }
        Some(rings) => {
            let out = RingOut {
                socket: &stream,
                producer: Mutex::new(rings.completions),
            };
            let mut inbound = RingIn {
                socket: &stream,
                consumer: rings.requests,
            };
            serve(&mut s, &mut callers, &stream, &mut inbound, &out)
        }
    };
    if let Some(why) = ending {
        eprintln!("tailbound serve: session {id} ended: {why}");
    }
    s.end();
}

/// Answers the client's `hello`; then, if the rings were granted, takes its memfd. `None`: the
/// session ends; else it goes on over the rings if given, the socket if not, and with the
/// caller in each request's header if `true`.
fn greet(shared: &Shared, stream: &mut UnixStream, id: u64) -> Option<(Option<ServerRings>, bool)> {
    let body = read_frame(stream).ok()??;
    let (req_id, decoded) = Request::decode(&body);
    let req_id = req_id.unwrap_or(0);
    let offered =
        if shared.rings { FEATURE_RING } else { 0 } | caller::offered(shared.tenants.as_ref());
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
    send_all(stream, &completion(req_id, &reply)).ok()?;
    let Ok(Reply::Hello { features, .. }) = reply else {
        return None;
    };
    let called = features & FEATURE_CALLER != 0;
    if features & FEATURE_RING == 0 {
        return Some((None, called));
    }
    // The client's next bytes on the socket are the tag and its memfd.
    let (tag, fds) = ring::recv_memfd(stream).ok()??;
    if tag != ring::TAG_MEMFD {
        return None;
    }
    match ServerRings::attach(fds) {
        Ok(rings) => {
            send_all(stream, &[ring::ANSWER_RINGS]).ok()?;
            Some((Some(rings), called))
        }
        Err(why) => {
            eprintln!("tailbound serve: session {id}: rings refused, the socket serves: {why}");
            send_all(stream, &[ring::ANSWER_SOCKET]).ok()?;
            Some((None, called))
        }
    }
}

fn completion(id: u64, reply: &Result<Reply>) -> Vec<u8> {
    match reply {
        Ok(r) => r.encode(id),
        Err(e) => Reply::encode_error(id, e),
    }
}

/// Where requests come from. `Ok(None)`: the client went; `Err`: why the session must end.
trait Inbound {
    fn next(&mut self) -> std::result::Result<Option<Vec<u8>>, String>;
}

/// Where completions go, from the session's thread and the threads it started. `Err(None)`:
/// the client went; `Err(Some(_))`: why the session must end.
trait Outbound: Sync {
    fn send(&self, frame: &[u8]) -> std::result::Result<(), Option<String>>;
}

struct SocketIn {
    stream: Option<UnixStream>,
}

impl Inbound for SocketIn {
    fn next(&mut self) -> std::result::Result<Option<Vec<u8>>, String> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(None);
        };
        // A frame too long or cut short cannot be skipped safely: the session ends, quietly, as
        // a client that sent it has no one to read a complaint.
        Ok(read_frame(stream).ok().flatten())
    }
}

struct SocketOut<'a> {
    stream: Mutex<&'a UnixStream>,
}

impl Outbound for SocketOut<'_> {
    fn send(&self, frame: &[u8]) -> std::result::Result<(), Option<String>> {
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        send_all(&s, frame).map_err(|_| None)
    }
}

struct RingIn<'a> {
    socket: &'a UnixStream,
    consumer: Consumer,
}

impl Inbound for RingIn<'_> {
    fn next(&mut self) -> std::result::Result<Option<Vec<u8>>, String> {
        match self.consumer.pop(FRAME_MAX + 4, self.socket) {
            Ok(frame) => ring::frame_body(frame).map(Some),
            Err(RingError::Gone) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct RingOut<'a> {
    socket: &'a UnixStream,
    producer: Mutex<Producer>,
}

impl Outbound for RingOut<'_> {
    fn send(&self, frame: &[u8]) -> std::result::Result<(), Option<String>> {
        let mut p = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        p.push(frame, self.socket).map_err(|e| match e {
            RingError::Gone => None,
            RingError::Corrupt(_) => Some(e.to_string()),
        })
    }
}

/// Reads and answers requests until the client goes or the transport fails; returns why it
/// failed, if it did. Requests running apart are finished (or given up, for a lock wait) before
/// it returns.
fn serve(
    s: &mut Session<'_>,
    callers: &mut Option<Callers<'_>>,
    socket: &UnixStream,
    inbound: &mut dyn Inbound,
    out: &dyn Outbound,
) -> Option<String> {
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let apart = AtomicUsize::new(0);
    let fail = |why: Option<String>| {
        if let Some(why) = why {
            failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(why);
        }
        // Wakes whatever waits on the client: the reader, lock waits (they watch the socket).
        let _ = socket.shutdown(std::net::Shutdown::Both);
    };
    std::thread::scope(|scope| {
        loop {
            let body = match inbound.next() {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(why) => {
                    fail(Some(why));
                    break;
                }
            };
            let (req_id, decoded) = match callers {
                Some(callers) => {
                    let (id, d) = Request::decode_from(&body);
                    (id, d.map(|(c, r)| (Some(callers.charge(&c)), r)))
                }
                None => {
                    let (id, d) = Request::decode(&body);
                    (id, d.map(|r| (None, r)))
                }
            };
            let req_id = req_id.unwrap_or(0);
            let reply = match decoded {
                Err(e) => Err(Error::Invalid(e.to_string())),
                Ok((charge, req)) => {
                    let job = (apart.load(Ordering::Acquire) < MOST_APART)
                        .then(|| s.apart(&req))
                        .flatten();
                    match job {
                        None => {
                            let _charged = charge.map(Charge::apply);
                            s.serve(req)
                        }
                        Some(job) => {
                            apart.fetch_add(1, Ordering::AcqRel);
                            let (apart, fail) = (&apart, &fail);
                            let spawned = std::thread::Builder::new()
                                .name(format!("tbfs-session-{}-apart", s.id()))
                                .spawn_scoped(scope, move || {
                                    let charged = charge.map(Charge::apply);
                                    let reply = job();
                                    drop(charged);
                                    if let Err(why) = out.send(&completion(req_id, &reply)) {
                                        fail(why);
                                    }
                                    apart.fetch_sub(1, Ordering::AcqRel);
                                });
                            match spawned {
                                Ok(_) => continue,
                                Err(e) => {
                                    apart.fetch_sub(1, Ordering::AcqRel);
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
            if let Err(why) = out.send(&completion(req_id, &reply)) {
                fail(why);
                break;
            }
        }
        // The client is gone or must be: requests still waiting on it give up.
        let _ = socket.shutdown(std::net::Shutdown::Both);
    });
    failed.into_inner().unwrap_or_else(|p| p.into_inner())
}
