//! A session's requests answered by several server threads: a request blocked on a worker holds
//! up none of the session's others, many client threads' mixed calls on shared and separate files
//! come out whole, and a client killed with requests in flight leaves nothing behind.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::codec::read_frame;
use super::dispatch::{most_workers, MOST_APART};
use super::protocol::{LockArgs, Reply, Request, VERSION};
use super::ring::{self, ClientRings, RingSizes, FEATURE_RING};
use super::ring_tests::{await_sessions, fixture, start_client_process};
use super::*;
use crate::sys::sock::send_all;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{Error, OpenFlags};

/// Room for every request the tests send before reading a completion.
const ROOMY: RingSizes = RingSizes {
    request: 1 << 16,
    completion: 1 << 16,
    data: 1 << 20,
};

fn range(start: u64, end: u64, kind: Kind, per_handle: bool) -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind,
        start,
        end,
        per_handle,
    }
}

/// A client by hand, on the socket or the rings: it sends requests without waiting for their
/// completions, which the [`Client`] never does.
enum Raw {
    Socket(UnixStream),
    Rings(UnixStream, Box<ClientRings>),
}

impl Raw {
    fn connect(socket: &std::path::Path, rings: bool) -> Raw {
        let mut s = UnixStream::connect(socket).unwrap();
        let hello = Request::Hello {
            version: VERSION,
            features: if rings { FEATURE_RING } else { 0 },
        };
        send_all(&s, &hello.encode(1)).unwrap();
        let (_, r) = Reply::decode(&read_frame(&mut s).unwrap().unwrap()).unwrap();
        assert!(matches!(r, Ok(Reply::Hello { .. })), "hello: {r:?}");
        if !rings {
            return Raw::Socket(s);
        }
        let rings = ClientRings::create(ROOMY).unwrap();
        ring::send_memfd(&s, Some(&rings.memfd)).unwrap();
        let mut answer = [0u8];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(answer[0], ring::ANSWER_RINGS);
        Raw::Rings(s, Box::new(rings))
    }

    fn send(&mut self, req: &Request, id: u64) {
        match self {
            Raw::Socket(s) => send_all(s, &req.encode(id)).unwrap(),
            Raw::Rings(s, r) => r.requests.push(&req.encode(id), s).unwrap(),
        }
    }

    /// The next completion, whichever request it answers.
    fn recv(&mut self) -> (u64, Result<Reply, crate::tbfs::Error>) {
        let body = match self {
            Raw::Socket(s) => read_frame(s).unwrap().unwrap(),
            Raw::Rings(s, r) => r.completions.pop_frame(1 << 23, s).unwrap(),
        };
        Reply::decode(&body).unwrap()
    }

    fn call(&mut self, req: &Request, id: u64) -> Result<Reply, crate::tbfs::Error> {
        self.send(req, id);
        let (rid, r) = self.recv();
        assert_eq!(rid, id);
        r
    }
}

/// More lock waits than go to threads of their own: the rest wait on the session's workers.
/// A request sent after them is answered while they wait, by a worker still free; once the lock
/// is let go, every wait gets it.
fn a_blocked_worker_holds_up_no_other_request(rings: bool) {
    let f = fixture(false);
    let holder = Client::connect(&f.socket).unwrap();
    let held = holder.open_file("/l", OpenFlags::create()).unwrap();
    held.lock(range(0, 10, Kind::Write, false), false).unwrap();

    let mut raw = Raw::connect(&f.socket, rings);
    let open = Request::Open {
        path: "/l".into(),
        flags: OpenFlags::create(),
    };
    let Ok(Reply::Opened { handle, .. }) = raw.call(&open, 2) else {
        panic!("open")
    };
    // Requests read together may all find room apart; past the bound, at most one fewer than
    // the workers block on them, so one worker stays free.
    let waits = MOST_APART + most_workers() - 1;
    let wait = Request::Lock {
        handle,
        lock: range(0, 10, Kind::Write, false),
        wait: true,
    };
    for i in 0..waits as u64 {
        raw.send(&wait, 100 + i);
    }
    let stat = Request::Stat {
        path: "/l".into(),
        follow: true,
    };
    raw.send(&stat, 3);
    // Nothing has been let go: the first completion can only be the stat's. With one thread
    // answering the session, it would wait behind a lock wait for ever.
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let first = raw.recv();
        tx.send(first).unwrap();
        raw
    });
    let (id, r) = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the stat waited behind a blocked request");
    assert_eq!(id, 3);
    assert!(matches!(r, Ok(Reply::Stat(_))), "{r:?}");
    let mut raw = reader.join().unwrap();

    held.lock(range(0, 10, Kind::Unlock, false), false).unwrap();
    let mut answered = BTreeSet::new();
    for _ in 0..waits {
        let (id, r) = raw.recv();
        assert_eq!(r.unwrap(), Reply::Done);
        answered.insert(id);
    }
    assert_eq!(answered, (100..100 + waits as u64).collect());
    assert!(held
        .test_lock(range(0, 10, Kind::Write, false))
        .unwrap()
        .is_some());
    drop(raw);
    await_sessions(&f.server, 1);
    held.lock(range(0, 10, Kind::Write, false), false).unwrap();
}

#[test]
fn a_blocked_worker_holds_up_no_other_request_on_the_socket() {
    a_blocked_worker_holds_up_no_other_request(false);
}

#[test]
fn a_blocked_worker_holds_up_no_other_request_on_the_rings() {
    a_blocked_worker_holds_up_no_other_request(true);
}

const THREADS: u64 = 12;
const ROUNDS: u64 = 40;
const RECORD: usize = 64;

/// What thread `t` writes in round `i`: its numbers, so a record torn or misplaced shows.
fn record(t: u64, i: u64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    for (k, chunk) in r.chunks_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&t.to_le_bytes());
        chunk[8..].copy_from_slice(&(i * 4 + k as u64).to_le_bytes());
    }
    r
}

/// Threads of one session: each writes its own file and its own slots of a shared file, writes
/// at a shared description's offset, opens, closes, renames and lists, and reads everything
/// back; a write seen by one thread is seen by every other once its call returned.
fn many_threads_of_one_session(transport: Option<RingSizes>) {
    let f = fixture(false);
    let c = Client::connect_with(&f.socket, transport).unwrap();
    let shared = Arc::new(c.open_file("/shared", OpenFlags::create()).unwrap());
    let on = Arc::new(c.open_file("/on", OpenFlags::create()).unwrap());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (c, shared, on) = (c.clone(), shared.clone(), on.clone());
            std::thread::spawn(move || {
                let dir = format!("/t{t}");
                c.mkdir(&dir, 0o755).unwrap();
                let own = c
                    .open_file(&format!("{dir}/own"), OpenFlags::create())
                    .unwrap();
                for i in 0..ROUNDS {
                    let r = record(t, i);
                    own.pwrite(&r, i * RECORD as u64).unwrap();
                    let slot = (i * THREADS + t) * RECORD as u64;
                    shared.pwrite(&r, slot).unwrap();
                    on.write_on(&r).unwrap();
                    let mut back = [0u8; RECORD];
                    assert_eq!(shared.pread(&mut back, slot).unwrap(), RECORD);
                    assert_eq!(back, r);
                    // A file made, filled, renamed and gone, on every round.
                    let tmp = format!("{dir}/tmp{i}");
                    let made = c.open_file(&tmp, OpenFlags::create()).unwrap();
                    made.pwrite(&r, 0).unwrap();
                    made.close().unwrap();
                    c.rename(&tmp, &format!("{dir}/kept")).unwrap();
                    assert_eq!(c.stat(&format!("{dir}/kept")).unwrap().size, RECORD as u64);
                    let names: Vec<String> = c
                        .readdir(&dir)
                        .unwrap()
                        .into_iter()
                        .map(|e| e.name)
                        .collect();
                    assert_eq!(names, ["kept", "own"]);
                }
                own.fsync().unwrap();
                let mut all = vec![0u8; ROUNDS as usize * RECORD];
                assert_eq!(own.pread(&mut all, 0).unwrap(), all.len());
                for (i, r) in all.chunks(RECORD).enumerate() {
                    assert_eq!(r, record(t, i as u64));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let n = (THREADS * ROUNDS) as usize;
    let mut all = vec![0u8; n * RECORD];
    assert_eq!(shared.pread(&mut all, 0).unwrap(), all.len());
    for (k, r) in all.chunks(RECORD).enumerate() {
        let k = k as u64;
        assert_eq!(r, record(k % THREADS, k / THREADS));
    }
    // Writes at the shared offset: every record whole, none lost or written twice.
    let mut seen = BTreeSet::new();
    let mut at = vec![0u8; n * RECORD];
    assert_eq!(on.pread(&mut at, 0).unwrap(), at.len());
    assert_eq!(on.stat().unwrap().size, at.len() as u64);
    for r in at.chunks(RECORD) {
        let t = u64::from_le_bytes(r[..8].try_into().unwrap());
        let i = u64::from_le_bytes(r[8..16].try_into().unwrap()) / 4;
        assert!(t < THREADS && i < ROUNDS, "a torn record");
        assert_eq!(r, record(t, i));
        assert!(seen.insert((t, i)), "a record written twice");
    }
    assert_eq!(seen.len(), n);
    assert_eq!(f.fs.stat("/shared").unwrap().size, (n * RECORD) as u64);
}

#[test]
fn many_threads_of_one_session_on_the_rings() {
    many_threads_of_one_session(Some(RingSizes::default()));
}

#[test]
fn many_threads_of_one_session_on_the_socket() {
    many_threads_of_one_session(None);
}

/// Names the server's socket to [`busy_client_process`] when a test starts it.
const CHILD_SOCKET: &str = "TAILBOUND_WORKER_TEST_SOCKET";
/// What it prints once its locks are taken and its threads are calling.
const BUSY: &str = "busy client process: locks held, calls in flight";

#[test]
#[ignore = "the client process that a_client_killed_with_requests_in_flight starts and kills"]
fn busy_client_process() {
    let socket = std::env::var_os(CHILD_SOCKET).expect("started by its parent test only");
    let c = Client::connect(std::path::Path::new(&socket)).unwrap();
    let k = Arc::new(c.open_file("/k", OpenFlags::create()).unwrap());
    k.lock(range(0, 10, Kind::Write, false), false).unwrap();
    k.lock(range(10, 20, Kind::Write, true), false).unwrap();
    // Calls that never end: writes, reads, opens and closes; and waits for the range the
    // parent holds, more than go apart.
    for t in 0..8u64 {
        let c = c.clone();
        std::thread::spawn(move || loop {
            // Unlinked while open: the inode lives until its description goes.
            let name = format!("/busy{t}");
            let f = c.open_file(&name, OpenFlags::create()).unwrap();
            c.unlink(&name).unwrap();
            f.pwrite(&[t as u8; 4096], 0).unwrap();
            let mut b = [0u8; 4096];
            f.pread(&mut b, 0).unwrap();
            c.stat("/k").unwrap();
        });
    }
    for _ in 0..MOST_APART + 1 {
        let k = k.clone();
        std::thread::spawn(move || {
            let _ = k.lock(range(20, 30, Kind::Write, false), true);
        });
    }
    // libtest prints the test's name on the same line first.
    println!("{BUSY}");
    loop {
        std::thread::park();
    }
}

/// A child process killed however the test ends: the busy client never exits by itself.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A client killed while its threads' calls run and wait: its session ends, its process and
/// description locks go, and every description it had open is let go.
#[test]
fn a_client_killed_with_requests_in_flight_leaves_nothing() {
    let f = fixture(false);
    let me = Client::connect(&f.socket).unwrap();
    let mine = me.open_file("/k", OpenFlags::create()).unwrap();
    mine.lock(range(20, 30, Kind::Write, false), false).unwrap();
    let (child, _lines) = start_client_process(
        "serve::worker_tests::busy_client_process",
        CHILD_SOCKET,
        &f.socket,
        BUSY,
    );
    let mut child = KillOnDrop(child);
    await_sessions(&f.server, 2);
    for held in [
        range(0, 10, Kind::Write, false),
        range(10, 20, Kind::Write, false),
    ] {
        assert!(mine.test_lock(held).unwrap().is_some());
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    await_sessions(&f.server, 1);
    // Its process lock and its description's lock went with it; its waits took nothing.
    mine.lock(range(0, 20, Kind::Write, false), false).unwrap();
    let other = me.open_file("/k", OpenFlags::default()).unwrap();
    mine.lock(range(0, 30, Kind::Unlock, false), false).unwrap();
    other.lock(range(0, 30, Kind::Write, true), false).unwrap();
    // Every description it had open went, those of calls in flight too: the unlinked files
    // they kept are gone, and the root and /k are all that is left, once the names a kill
    // between a create and its unlink left are removed.
    for t in 0..8u64 {
        match f.fs.unlink(&format!("/busy{t}")) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => panic!("/busy{t}: {e}"),
        }
    }
    assert_eq!(f.fs.statvfs().unwrap().files, 2);
}
