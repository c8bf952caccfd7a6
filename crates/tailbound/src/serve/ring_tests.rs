//! The shared-memory transport: rings on their own (wrap-around, a full ring, frames longer than
//! the ring), sessions on rings (negotiation, big frames, many threads with one blocked, a client
//! that vanishes while parked), and a hostile client writing garbage into its memfd.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestRunner};

use super::codec::read_frame;
use super::protocol::{LockArgs, Reply, Request, VERSION};
use super::ring::{
    self, testing, ClientRings, RingError, RingSizes, ServerRings, Wake, FEATURE_RING,
};
use super::*;
use crate::dev::memory::MemoryPool;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{Config, Fs, OpenFlags};

const SMALL: RingSizes = RingSizes {
    request: 4096,
    completion: 4096,
    data: 1 << 16,
};

/// A server of a fresh memory pool (also used by `worker_tests`).
pub(super) struct Fixture {
    pub(super) server: ServerHandle,
    pub(super) socket: std::path::PathBuf,
    pub(super) fs: Arc<Fs>,
    _dir: tempfile::TempDir,
}

pub(super) fn fixture(no_ring: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(MemoryPool::anonymous(64 << 20).unwrap());
    let fs = Arc::new(
        Fs::format(
            dev,
            &Config {
                segment_bytes: 1 << 20,
                ..Config::memory_pool()
            },
        )
        .unwrap(),
    );
    let socket = dir.path().join("pool.sock");
    let opts = ServerOptions {
        no_ring,
        ..ServerOptions::default()
    };
    let server = Server::start(fs.clone(), &socket, opts).unwrap();
    Fixture {
        server,
        socket,
        fs,
        _dir: dir,
    }
}

/// Waits until the server counts `n` sessions. The bound only turns a hang into a failure.
pub(super) fn await_sessions(server: &ServerHandle, n: usize) {
    let start = Instant::now();
    while server.sessions() != n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} sessions, {n} expected",
            server.sessions()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn range(start: u64, end: u64, kind: Kind) -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind,
        start,
        end,
        per_handle: false,
    }
}

#[test]
fn frames_of_any_length_wrap_around_a_small_ring_intact() {
    let rings = ClientRings::create(SMALL).unwrap();
    let memfd = rings.memfd.try_clone().unwrap();
    let server = ServerRings::attach(vec![memfd.into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let (producer, mut consumer) = (rings.requests, server.requests);
    // Lengths from empty to several times the data area, so records wrap at every offset and
    // long frames go as fragments.
    let lengths: Vec<usize> = (0..400).map(|i| (i * 97) % 13_000).collect();
    let frame = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|j| (i * 31 + j) as u8).collect() };
    let sent = lengths.clone();
    // The producer runs ahead of a consumer that starts late, so it fills the ring and waits for
    // room many times.
    let t = std::thread::spawn(move || {
        for (i, &n) in sent.iter().enumerate() {
            producer.push(&frame(i, n), &a).unwrap();
        }
        a
    });
    for (i, &n) in lengths.iter().enumerate() {
        let got = consumer.pop(1 << 20, &b).unwrap();
        assert_eq!(got, frame(i, n), "frame {i} of {n} bytes");
    }
    let a = t.join().unwrap();
    // The producer went: a consumer waiting on an empty ring is told so.
    drop(a);
    assert_eq!(consumer.pop(1 << 20, &b), Err(RingError::Gone));
}

/// Threads pushing through one producer at once copy their frames outside its lock: every
/// frame still arrives whole, each thread's frames in the order it pushed them, short frames
/// and fragmented ones mixed, through a ring small enough that pushes wait for room and for
/// the records reserved before them.
#[test]
fn frames_pushed_by_many_threads_at_once_arrive_whole_and_in_each_threads_order() {
    // A lost or stuck record leaves the reader or a pusher waiting for ever: that must fail
    // the test, not hang it.
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        many_threads_push_at_once();
        done_tx.send(()).unwrap();
    });
    match done_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the pushes or the reads failed"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("a push or a read waits for ever"),
    }
}

fn many_threads_push_at_once() {
    let rings = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let (producer, mut consumer) = (rings.requests, server.requests);
    const THREADS: usize = 6;
    const EACH: usize = 300;
    // A frame: the thread, its sequence number, then bytes derived from both; some longer
    // than a record (half the ring), which go as fragments.
    let frame = |t: usize, i: usize| -> Vec<u8> {
        let n = 2 + (t * 131 + i * 977) % if i.is_multiple_of(25) { 5000 } else { 900 };
        let mut f = vec![t as u8, (i % 256) as u8];
        f.extend((2..n).map(|j| (t * 7 + i * 13 + j) as u8));
        f
    };
    let mut next = [0usize; THREADS];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (producer, a) = (&producer, &a);
            s.spawn(move || {
                for i in 0..EACH {
                    producer
                        .push_parts(&[&frame(t, i)[..1], &frame(t, i)[1..]], Wake::One, a)
                        .unwrap();
                }
            });
        }
        for _ in 0..THREADS * EACH {
            let got = consumer.pop(1 << 20, &b).unwrap();
            let t = got[0] as usize;
            assert!(
                t < THREADS,
                "a frame of no thread: {:?}",
                &got[..got.len().min(8)]
            );
            assert_eq!(got, frame(t, next[t]), "thread {t}'s frame {}", next[t]);
            next[t] += 1;
        }
    });
    assert_eq!(next, [EACH; THREADS]);
}

#[test]
fn a_frame_longer_than_the_readers_limit_is_corrupt() {
    let rings = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let (producer, mut consumer) = (rings.requests, server.requests);
    let t = std::thread::spawn(move || {
        // Fails once the reader stops reading and hangs up.
        let _ = producer.push(&vec![7u8; 20_000], &a);
    });
    let err = consumer.pop(10_000, &b).unwrap_err();
    assert!(matches!(err, RingError::Corrupt(_)), "{err:?}");
    drop(b);
    t.join().unwrap();
}

/// A frame as it travels on the socket and the rings: its body's length, then the body.
fn framed(body: &[u8], announced: usize) -> Vec<u8> {
    let mut f = (announced as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[test]
fn framed_bodies_come_without_their_length_and_a_wrong_length_is_corrupt() {
    let rings = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let (producer, mut consumer) = (rings.requests, server.requests);
    // From empty to several times the data area: bodies in one record and in fragments.
    let lengths: Vec<usize> = (0..120).map(|i| (i * 211) % 13_000).collect();
    let body = |i: usize, n: usize| -> Vec<u8> { (0..n).map(|j| (i * 7 + j) as u8).collect() };
    let sent = lengths.clone();
    let t = std::thread::spawn(move || {
        for (i, &n) in sent.iter().enumerate() {
            producer.push(&framed(&body(i, n), n), &a).unwrap();
        }
        // A length that disagrees with the records', after the good frames.
        producer.push(&framed(&[1, 2, 3], 2), &a).unwrap();
        (producer, a)
    });
    for (i, &n) in lengths.iter().enumerate() {
        assert_eq!(
            consumer.pop_frame(1 << 20, &b).unwrap(),
            body(i, n),
            "body {i}"
        );
    }
    let err = consumer.pop_frame(1 << 20, &b).unwrap_err();
    assert!(matches!(err, RingError::Corrupt(_)), "{err:?}");
    t.join().unwrap();
    // A length beyond the reader's limit, and a first record too short to hold a length.
    for (raw, limit) in [(framed(&[0; 8], 8), 4), (vec![9, 9], 1 << 20)] {
        let rings = ClientRings::create(SMALL).unwrap();
        let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let (producer, mut consumer) = (rings.requests, server.requests);
        producer.push(&raw, &a).unwrap();
        let err = consumer.pop_frame(limit, &b).unwrap_err();
        assert!(matches!(err, RingError::Corrupt(_)), "{raw:?}: {err:?}");
    }
}

#[test]
fn threads_parked_on_one_ring_take_every_frame_once() {
    let rings = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let producer = rings.requests;
    let consumer = std::sync::Mutex::new(server.requests);
    let parking = consumer.lock().unwrap().parking();
    let frames = 2_000usize;
    let t = std::thread::spawn(move || {
        for i in 0..frames {
            // Some long enough to go as fragments.
            let n = if i % 50 == 0 { 5_000 } else { 8 };
            let mut body = vec![0u8; n];
            body[..8].copy_from_slice(&(i as u64).to_le_bytes());
            producer.push(&framed(&body, n), &a).unwrap();
        }
        // Hanging up tells every parked thread the ring is done.
        drop(a);
    });
    // Each thread takes a frame, parks on the ring without holding it when there is none, as
    // a session's workers do.
    let taken: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut got = Vec::new();
                    loop {
                        let seen = match consumer.lock().unwrap().try_frame(1 << 20).unwrap() {
                            Ok(body) => {
                                got.push(u64::from_le_bytes(body[..8].try_into().unwrap()));
                                continue;
                            }
                            Err(seen) => seen,
                        };
                        match parking.wait(seen, &b) {
                            Ok(()) => {}
                            Err(RingError::Gone) => return got,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    t.join().unwrap();
    let mut all: Vec<u64> = taken.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (0..frames as u64).collect::<Vec<_>>());
}

#[test]
fn hello_picks_the_rings_unless_either_side_declines() {
    let f = fixture(false);
    let c = Client::connect(&f.socket).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    let old = Client::connect_with(&f.socket, None).unwrap();
    assert_eq!(old.transport(), Transport::Socket);
    c.mkdir("/d", 0o755).unwrap();
    assert!(old.stat("/d").unwrap().kind == crate::tbfs::FileKind::Dir);

    let no = fixture(true);
    let c = Client::connect(&no.socket).unwrap();
    assert_eq!(c.transport(), Transport::Socket);
    c.mkdir("/d", 0o755).unwrap();
}

#[test]
fn a_megabyte_write_and_read_go_through_rings_smaller_than_them() {
    let f = fixture(false);
    let c = Client::connect_with(&f.socket, Some(SMALL)).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    let file = c.open_file("/big", OpenFlags::create()).unwrap();
    let data: Vec<u8> = (0..(1 << 20) + 333).map(|i| (i % 253) as u8).collect();
    assert_eq!(file.pwrite(&data, 0).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.pread(&mut back, 0).unwrap(), data.len());
    assert!(back == data);
    // Many small calls after: the positions keep wrapping.
    for i in 0..2000u64 {
        file.pwrite(&i.to_le_bytes(), i * 8).unwrap();
    }
    let mut word = [0u8; 8];
    file.pread(&mut word, 1999 * 8).unwrap();
    assert_eq!(u64::from_le_bytes(word), 1999);
}

/// One thread of a client waits for a lock another client holds; the client's other threads'
/// calls are answered meanwhile, and the waiter gets the lock once it is let go.
fn others_go_on_while_one_thread_waits(transport: Option<RingSizes>) {
    let f = fixture(false);
    let holder = Client::connect(&f.socket).unwrap();
    let held = holder.open_file("/l", OpenFlags::create()).unwrap();
    held.lock(range(0, 10, Kind::Write), false).unwrap();

    let c = Client::connect_with(&f.socket, transport).unwrap();
    let file = Arc::new(c.open_file("/l", OpenFlags::create()).unwrap());
    let (got_tx, got_rx) = mpsc::channel();
    let waiter = {
        let file = file.clone();
        std::thread::spawn(move || {
            file.lock(range(0, 10, Kind::Write), true).unwrap();
            got_tx.send(()).unwrap();
        })
    };
    let (done_tx, done_rx) = mpsc::channel();
    for t in 0..4u64 {
        let (c, file, done_tx) = (c.clone(), file.clone(), done_tx.clone());
        std::thread::spawn(move || {
            for i in 0..50u64 {
                let path = format!("/t{t}-{i}");
                c.mkdir(&path, 0o755).unwrap();
                assert!(c.stat(&path).is_ok());
                file.pwrite(&[t as u8; 16], 100 + t * 16).unwrap();
                file.fsync().unwrap();
            }
            done_tx.send(t).unwrap();
        });
    }
    for _ in 0..4 {
        // Without requests running apart, these wait behind the lock wait for ever.
        done_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a thread's calls held up behind another's lock wait");
    }
    // The lock is still held, so the waiter still waits.
    assert!(got_rx.try_recv().is_err());
    held.lock(range(0, 10, Kind::Unlock), false).unwrap();
    got_rx.recv().unwrap();
    waiter.join().unwrap();
    assert!(held.test_lock(range(0, 10, Kind::Write)).unwrap().is_some());
}

#[test]
fn a_lock_wait_holds_up_no_other_thread_on_the_rings() {
    others_go_on_while_one_thread_waits(Some(SMALL));
}

#[test]
fn a_lock_wait_holds_up_no_other_thread_on_the_socket() {
    others_go_on_while_one_thread_waits(None);
}

/// A client on the rings, by hand: a test plays it to vanish or misbehave.
struct RawRings {
    socket: UnixStream,
    rings: ClientRings,
}

fn raw_rings(socket: &std::path::Path) -> RawRings {
    let mut s = UnixStream::connect(socket).unwrap();
    let hello = Request::Hello {
        version: VERSION,
        features: FEATURE_RING,
    };
    crate::sys::sock::send_all(&s, &hello.encode(1)).unwrap();
    let (_, r) = Reply::decode(&read_frame(&mut s).unwrap().unwrap()).unwrap();
    let Ok(Reply::Hello { features, .. }) = r else {
        panic!("hello: {r:?}")
    };
    assert_eq!(features & FEATURE_RING, FEATURE_RING);
    let rings = ClientRings::create(SMALL).unwrap();
    ring::send_memfd(&s, Some(&rings.memfd)).unwrap();
    let mut answer = [0u8];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], ring::ANSWER_RINGS);
    RawRings { socket: s, rings }
}

impl RawRings {
    fn call(&mut self, req: &Request, id: u64) -> Result<Reply, crate::tbfs::Error> {
        self.rings
            .requests
            .push(&req.encode(id), &self.socket)
            .unwrap();
        let body = self.rings.completions.pop_frame(1 << 23, &self.socket);
        let (rid, r) = Reply::decode(&body.unwrap()).unwrap();
        assert_eq!(rid, id);
        r
    }

    fn send(&mut self, req: &Request, id: u64) {
        self.rings
            .requests
            .push(&req.encode(id), &self.socket)
            .unwrap();
    }
}

#[test]
fn a_client_that_vanishes_while_parked_or_waiting_is_cleaned_up() {
    let f = fixture(false);
    // Parked: the server's reader sleeps on an empty ring when the client goes.
    let idle = raw_rings(&f.socket);
    await_sessions(&f.server, 1);
    drop(idle);
    await_sessions(&f.server, 0);

    // Waiting: it holds one lock and waits for another when it goes.
    let other = Client::connect(&f.socket).unwrap();
    let theirs = other.open_file("/l", OpenFlags::create()).unwrap();
    theirs.lock(range(10, 20, Kind::Write), false).unwrap();
    let mut raw = raw_rings(&f.socket);
    let open = Request::Open {
        path: "/l".into(),
        flags: OpenFlags::create(),
    };
    let Ok(Reply::Opened { handle, .. }) = raw.call(&open, 2) else {
        panic!("open")
    };
    let lock = |start, end, wait| Request::Lock {
        handle,
        lock: range(start, end, Kind::Write),
        wait,
    };
    assert_eq!(raw.call(&lock(0, 10, false), 3).unwrap(), Reply::Done);
    raw.send(&lock(10, 20, true), 4);
    // The wait is in: the server answers the next request while it goes on.
    assert!(matches!(
        raw.call(
            &Request::Stat {
                path: "/l".into(),
                follow: true
            },
            5
        ),
        Ok(Reply::Stat(_))
    ));
    assert!(theirs
        .test_lock(range(0, 10, Kind::Write))
        .unwrap()
        .is_some());
    drop(raw);
    await_sessions(&f.server, 1);
    // Its lock went with it, and its wait took nothing.
    theirs.lock(range(0, 10, Kind::Write), false).unwrap();
    theirs.lock(range(10, 20, Kind::Unlock), false).unwrap();
    theirs.lock(range(0, 20, Kind::Write), false).unwrap();
}

/// The lines a started client process prints, kept open while the test runs.
pub(super) type ChildLines = std::io::Lines<std::io::BufReader<std::process::ChildStdout>>;

/// Starts this test binary's ignored test `name` as a client process, with `socket` in the
/// environment variable `env`, and waits until it prints a line ending with `ready`.
pub(super) fn start_client_process(
    name: &str,
    env: &str,
    socket: &std::path::Path,
    ready: &str,
) -> (std::process::Child, ChildLines) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.ends_with(ready))),
        "the client process {name} did not get going"
    );
    (child, lines)
}

/// Names the server's socket to [`ring_client_process`] when a test starts it.
const CHILD_SOCKET: &str = "TAILBOUND_RING_TEST_SOCKET";
/// What it prints once it holds its lock.
const HOLDING: &str = "ring client process: holding its lock";

#[test]
#[ignore = "the client process that a_client_killed_by_sigkill_while_parked starts and kills"]
fn ring_client_process() {
    let socket = std::env::var_os(CHILD_SOCKET).expect("started by its parent test only");
    let c = Client::connect(std::path::Path::new(&socket)).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    let f = c.open_file("/k", OpenFlags::create()).unwrap();
    f.lock(range(0, 10, Kind::Write), false).unwrap();
    // libtest prints the test's name on the same line first.
    println!("{HOLDING}");
    // The parent holds this range: the call parks until the process is killed.
    let _ = f.lock(range(10, 20, Kind::Write), true);
}

#[test]
fn a_client_killed_by_sigkill_while_parked_is_cleaned_up() {
    let f = fixture(false);
    let me = Client::connect(&f.socket).unwrap();
    let mine = me.open_file("/k", OpenFlags::create()).unwrap();
    mine.lock(range(10, 20, Kind::Write), false).unwrap();
    let (mut child, _lines) = start_client_process(
        "serve::ring_tests::ring_client_process",
        CHILD_SOCKET,
        &f.socket,
        HOLDING,
    );
    await_sessions(&f.server, 2);
    assert!(mine.test_lock(range(0, 10, Kind::Write)).unwrap().is_some());
    child.kill().unwrap();
    child.wait().unwrap();
    await_sessions(&f.server, 1);
    // Its lock went with it; its wait took nothing.
    mine.lock(range(0, 10, Kind::Write), false).unwrap();
    assert!(mine.test_lock(range(0, 20, Kind::Write)).unwrap().is_none());
}

/// A request's body with the `u32` at `at` (counted in the body) set to `v`, framed.
fn with_u32_at(req: &Request, id: u64, at: usize, v: u32) -> Vec<u8> {
    let mut frame = req.encode(id);
    frame[4 + at..4 + at + 4].copy_from_slice(&v.to_le_bytes());
    frame
}

#[test]
fn malformed_requests_on_the_rings_are_errors_of_that_request_only() {
    let f = fixture(false);
    let mut raw = raw_rings(&f.socket);
    let open = Request::Open {
        path: "/f".into(),
        flags: OpenFlags {
            read: true,
            write: true,
            create: true,
            ..OpenFlags::default()
        },
    };
    let Ok(Reply::Opened { handle, .. }) = raw.call(&open, 2) else {
        panic!("open")
    };
    let write = Request::Write {
        handle,
        offset: 0,
        data: vec![7u8; 100].into(),
    };
    // Body: id 8, operation 1, handle 8, offset 8, then the data's length.
    let past_the_end = with_u32_at(&write, 3, 25, 101);
    // Body: id 8, operation 1, then the path's length.
    let stat = Request::Stat {
        path: "/f".into(),
        follow: true,
    };
    let unended = with_u32_at(&stat, 4, 9, 4000);
    // A length so large that adding it to a position would overflow.
    let huge = with_u32_at(&write, 5, 25, u32::MAX);
    for (id, frame) in [(3, past_the_end), (4, unended), (5, huge)] {
        raw.rings.requests.push(&frame, &raw.socket).unwrap();
        let body = raw.rings.completions.pop_frame(1 << 23, &raw.socket);
        let (rid, r) = Reply::decode(&body.unwrap()).unwrap();
        assert_eq!(rid, id);
        assert!(
            matches!(r, Err(crate::tbfs::Error::Invalid(_))),
            "{id}: {r:?}"
        );
    }
    // The session goes on, and nothing of the malformed writes reached the file.
    assert_eq!(raw.call(&write, 6).unwrap(), Reply::Number(100));
    let read = Request::Read {
        handle,
        offset: 0,
        len: 1000,
    };
    assert_eq!(raw.call(&read, 7).unwrap(), Reply::Data(vec![7u8; 100]));
    assert_eq!(f.server.sessions(), 1);
}

#[test]
fn a_frame_pushed_in_parts_pops_whole_across_wraps_and_fragments() {
    let (a, _b) = UnixStream::pair().unwrap();
    let rings = ClientRings::create(SMALL).unwrap();
    let ClientRings {
        requests, memfd, ..
    } = rings;
    let mut server = ServerRings::attach(vec![memfd.into()]).unwrap();
    let mut rng = fastrand::Rng::with_seed(42);
    for round in 0..200 {
        let head: Vec<u8> = (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect();
        let tail: Vec<u8> = (0..rng.usize(0..6000)).map(|_| rng.u8(..)).collect();
        let whole = [&head[..], &tail[..]].concat();
        let mut framed_head = ((whole.len()) as u32).to_le_bytes().to_vec();
        framed_head.extend_from_slice(&head);
        // The consumer reads as the producer writes: the frame may be longer than the ring.
        std::thread::scope(|s| {
            let reader = s.spawn(|| server.requests.pop_frame(1 << 20, &a));
            requests
                .push_parts(&[&framed_head, &tail], Wake::One, &a)
                .unwrap();
            assert_eq!(reader.join().unwrap().unwrap(), whole, "round {round}");
        });
    }
}

/// Waits until the thread at `/proc/<task>` sleeps in a futex call (the kernel shows the call
/// it is blocked in); `false` once the thread is gone.
fn await_futex_sleep(task: &std::path::Path) -> bool {
    loop {
        let Ok(call) = std::fs::read_to_string(task.join("syscall")) else {
            return false;
        };
        if call.starts_with(&format!("{} ", libc::SYS_futex)) {
            return true;
        }
        std::thread::yield_now();
    }
}

#[test]
fn a_completion_wakes_only_the_thread_waiting_for_it() {
    let (a, _b) = UnixStream::pair().unwrap();
    let rings = ClientRings::create(SMALL).unwrap();
    let parking = rings.completions.parking();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            tx.send(std::fs::read_link("/proc/thread-self").unwrap())
                .unwrap();
            // Nothing is ever published: only a wake (or the park's bound) ends each wait.
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                parking
                    .wait_bits(0, ring::waiter_bits(5), true, &a)
                    .unwrap();
            }
        });
        let task = std::path::Path::new("/proc").join(rx.recv().unwrap());
        // A completion for another id, on another bit, leaves the thread asleep.
        let others: Vec<usize> = (0..3)
            .map(|_| {
                assert!(await_futex_sleep(&task));
                parking.wake_bits(ring::waiter_bits(6))
            })
            .collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        // Its own wakes it (tried again if the park's bound ended a sleep in between).
        let own = loop {
            if !await_futex_sleep(&task) {
                break 0;
            }
            let n = parking.wake_bits(ring::waiter_bits(5));
            if n == 1 {
                break n;
            }
        };
        assert_eq!((others, own), (vec![0, 0, 0], 1));
    });
}

#[test]
fn a_position_outside_the_ring_ends_that_session_only() {
    let f = fixture(false);
    let good = Client::connect(&f.socket).unwrap();
    let mut bad = raw_rings(&f.socket);
    // Published past the data area's end.
    testing::poke(&bad.rings, testing::REQUEST_TAIL_AT, SMALL.request + 64);
    // The server ends the session by itself: the socket reaches its end.
    let mut rest = Vec::new();
    assert_eq!(bad.socket.read_to_end(&mut rest).unwrap(), 0);
    await_sessions(&f.server, 1);
    assert!(good.stat("/").is_ok());
}

#[test]
fn garbage_in_the_memfd_never_stops_the_server() {
    let f = fixture(false);
    let good = Client::connect(&f.socket).unwrap();
    let len = testing::len(&raw_rings(&f.socket).rings);
    await_sessions(&f.server, 1);
    let scribbles = prop::collection::vec(
        (
            prop_oneof![
                0..testing::REQUEST_DATA_AT,
                testing::REQUEST_DATA_AT..testing::REQUEST_DATA_AT + 64,
                0..len,
            ],
            prop::collection::vec(any::<u8>(), 1..64),
        ),
        1..8,
    );
    let mut runner = TestRunner::new(PropConfig {
        cases: 64,
        failure_persistence: None,
        ..PropConfig::default()
    });
    runner
        .run(
            &(
                scribbles,
                prop_oneof![0..SMALL.request + 16, any::<u32>()],
                any::<bool>(),
            ),
            |(scribbles, tail, valid_first)| {
                let mut raw = raw_rings(&f.socket);
                if valid_first {
                    let r = raw.call(&Request::Statvfs, 2);
                    prop_assert!(r.is_ok());
                }
                for (at, bytes) in &scribbles {
                    testing::scribble(&raw.rings, *at, bytes);
                }
                testing::poke(&raw.rings, testing::REQUEST_TAIL_AT, tail);
                // Whatever the garbage did to that session, the others are answered.
                prop_assert!(good.stat("/").is_ok());
                drop(raw);
                await_sessions(&f.server, 1);
                Ok(())
            },
        )
        .unwrap();
    assert!(good.stat("/").is_ok());
}

/// What the forking client process prints once its child and it have checked everything.
const FORKED_OK: &str = "ring fork process: parent and child as expected";

/// Checks in a forked child: its copy of the parent's connection, abandoned, reaches nothing
/// (not even the close its file's drop sends), and a session of its own is on rings.
fn forked_child_checks(c: &Client, f: RemoteFile, socket: &std::path::Path) -> bool {
    c.abandon();
    let fd_gone = c.socket_fd().is_none();
    // The drop's close of the parent's handle must not reach the server.
    drop(f);
    let refused = c.stat("/forked").is_err();
    let fresh = Client::connect(socket);
    let own = fresh
        .as_ref()
        .is_ok_and(|n| n.transport() == Transport::Ring && n.stat("/forked").is_ok());
    fd_gone && refused && own
}

/// `fork`: `None` in the child, its pid in the parent.
#[allow(unsafe_code)]
fn fork_here() -> Option<u32> {
    // SAFETY: called from the helper process's test thread; its only other thread is libtest's
    // main thread, blocked waiting for the test and holding no lock the child goes on to take
    // (the child's allocations use glibc's malloc, which is reset for the child at fork).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    (pid > 0).then_some(pid as u32)
}

#[test]
#[ignore = "the client process that a_forked_child_leaves_its_parents_rings_alone starts"]
fn ring_fork_process() {
    use crate::sys::proc::wait_child;
    let socket = std::env::var_os(CHILD_SOCKET).expect("started by its parent test only");
    let socket = std::path::Path::new(&socket);
    let c = Client::connect(socket).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    let f = c.open_file("/forked", OpenFlags::create()).unwrap();
    f.pwrite(b"the parent's bytes", 0).unwrap();
    let before = c.socket_fd().unwrap();
    match fork_here() {
        None => {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                forked_child_checks(&c, f, socket)
            }))
            .unwrap_or(false);
            // The child must not go on into the test harness's copy of the parent's state.
            std::process::exit(if ok { 0 } else { 1 });
        }
        Some(pid) => {
            assert_eq!(
                wait_child(pid).unwrap(),
                0,
                "the forked child's checks failed"
            );
            // The parent's handle is still open and its rings answer in order.
            assert_eq!(c.socket_fd(), Some(before));
            let mut buf = [0u8; 18];
            assert_eq!(f.pread(&mut buf, 0).unwrap(), 18);
            assert_eq!(&buf, b"the parent's bytes");
            for _ in 0..100 {
                c.stat("/forked").unwrap();
            }
            f.close().unwrap();
            println!("{FORKED_OK}");
        }
    }
}

#[test]
fn a_forked_child_leaves_its_parents_rings_alone() {
    let f = fixture(false);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "serve::ring_tests::ring_fork_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SOCKET, &f.socket)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(FORKED_OK),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Both processes' sessions end with them.
    await_sessions(&f.server, 0);
}

#[test]
fn a_frame_pushed_unwoken_wakes_its_reader_only_through_the_waker() {
    let (a, _b) = UnixStream::pair().unwrap();
    let ClientRings {
        requests, memfd, ..
    } = ClientRings::create(SMALL).unwrap();
    let mut server = ServerRings::attach(vec![memfd.into()]).unwrap();
    let parking = server.requests.parking();
    let waker = requests.waker();
    let bits = ring::waiter_bits(7);
    // How many readers the waker woke in each round: the push left the reader asleep unless
    // the park's bound ended its sleep in between (then it saw the frame and left, and the
    // waker finds no one), so some round must show the waker's one.
    let mut woken = Vec::new();
    for round in 0..20u8 {
        let Ok(Err(seen)) = server.requests.try_frame(1 << 20) else {
            panic!("round {round}: a frame before any was pushed");
        };
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                tx.send(std::fs::read_link("/proc/thread-self").unwrap())
                    .unwrap();
                parking.wait_bits(seen, bits, false, &a)
            });
            let task = std::path::Path::new("/proc").join(rx.recv().unwrap());
            assert!(await_futex_sleep(&task), "round {round}");
            requests
                .push_parts(&[&framed(&[round], 1)], Wake::Nobody, &a)
                .unwrap();
            woken.push(waker.wake(Some(bits)));
            reader.join().unwrap().unwrap();
        });
        // The frame was published whole by the push alone.
        assert_eq!(
            server.requests.try_frame(1 << 20).unwrap(),
            Ok(vec![round]),
            "round {round}"
        );
    }
    assert!(woken.iter().all(|&n| n <= 1), "{woken:?}");
    assert!(woken.contains(&1), "{woken:?}");
}

/// Parks a thread on `server`'s completion ring with `bits` until it is asleep, then runs
/// `act`; returns what `act` returned each round (a count of threads woken) until a round in
/// which the thread was asleep when `act` ran (the park's bound may end a sleep in between:
/// then the round is tried again).
fn woken_while_parked(
    client: &ClientRings,
    bits: u32,
    mut act: impl FnMut(u8) -> usize,
) -> Vec<usize> {
    let (a, _b) = UnixStream::pair().unwrap();
    let parking = client.completions.parking();
    let mut woken = Vec::new();
    for round in 0..20u8 {
        let seen = parking.published();
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                tx.send(std::fs::read_link("/proc/thread-self").unwrap())
                    .unwrap();
                parking.wait_bits(seen, bits, false, &a)
            });
            let task = std::path::Path::new("/proc").join(rx.recv().unwrap());
            assert!(await_futex_sleep(&task), "round {round}");
            woken.push(act(round));
            reader.join().unwrap().unwrap();
        });
        if woken.last() == Some(&1) {
            break;
        }
    }
    woken
}

#[test]
fn a_deferred_wake_is_kept_until_made_and_then_wakes_its_reader() {
    let (a, _b) = UnixStream::pair().unwrap();
    let client = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![client.memfd.try_clone().unwrap().into()]).unwrap();
    let bits = ring::waiter_bits(9);
    let mut kept = Vec::new();
    let woken = woken_while_parked(&client, bits, |round| {
        server
            .completions
            .push_deferred(&[&framed(&[round], 1)], bits, &a)
            .unwrap();
        // Published, but its wake-up is kept: the reader still sleeps.
        kept.push(server.completions.deferred_bits());
        server.completions.wake_deferred()
    });
    assert!(kept.iter().all(|&k| k == bits), "{kept:?}");
    assert_eq!(woken.last(), Some(&1), "{woken:?}");
    assert_eq!(server.completions.deferred_bits(), 0);
    // Made once: a second call finds nothing owed.
    assert_eq!(server.completions.wake_deferred(), 0);
    let mut consumer = client.completions;
    for round in 0..woken.len() as u8 {
        assert_eq!(consumer.try_frame(1 << 20).unwrap(), Ok(vec![round]));
    }
}

#[test]
fn a_plain_push_makes_its_wake_at_once_and_leaves_none_deferred() {
    let (a, _b) = UnixStream::pair().unwrap();
    let client = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![client.memfd.try_clone().unwrap().into()]).unwrap();
    let bits = ring::waiter_bits(10);
    let woken = woken_while_parked(&client, bits, |round| {
        server
            .completions
            .push_parts(&[&framed(&[round], 1)], Wake::Bits(bits), &a)
            .unwrap()
    });
    assert_eq!(woken.last(), Some(&1), "{woken:?}");
    assert_eq!(server.completions.deferred_bits(), 0);
}

#[test]
fn a_long_frame_pushed_deferred_keeps_the_wake_of_its_end() {
    let (a, _b) = UnixStream::pair().unwrap();
    let client = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![client.memfd.try_clone().unwrap().into()]).unwrap();
    let bits = ring::waiter_bits(11);
    // Longer than a record, shorter than the ring: its fragments go in without a wait.
    let body = vec![7u8; SMALL.completion as usize / 2 + 64];
    server
        .completions
        .push_deferred(&[&framed(&body, body.len())], bits, &a)
        .unwrap();
    assert_eq!(server.completions.deferred_bits(), bits);
    server.completions.wake_deferred();
    assert_eq!(server.completions.deferred_bits(), 0);
    let mut consumer = client.completions;
    assert_eq!(consumer.try_frame(1 << 20).unwrap(), Ok(body));
}

#[test]
fn a_pusher_waiting_for_room_first_makes_the_wakes_kept_for_later() {
    let (a, _b) = UnixStream::pair().unwrap();
    let client = ClientRings::create(SMALL).unwrap();
    let server = ServerRings::attach(vec![client.memfd.try_clone().unwrap().into()]).unwrap();
    let (early, late) = (ring::waiter_bits(1), ring::waiter_bits(2));
    // Three records of a quarter of the ring each, their wake-ups kept: the fourth finds no
    // room (each record also takes its header and the frame's length).
    let body = vec![3u8; SMALL.completion as usize / 4];
    for _ in 0..3 {
        server
            .completions
            .push_deferred(&[&framed(&body, body.len())], early, &a)
            .unwrap();
    }
    assert_eq!(server.completions.deferred_bits(), early);
    let mut consumer = client.completions;
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let pusher = s.spawn(|| {
            tx.send(std::fs::read_link("/proc/thread-self").unwrap())
                .unwrap();
            server
                .completions
                .push_deferred(&[&framed(&body, body.len())], late, &a)
        });
        let task = std::path::Path::new("/proc").join(rx.recv().unwrap());
        assert!(await_futex_sleep(&task));
        // The pusher sleeps for room: it made the kept wake-ups before it slept (looked at
        // before the ring is drained, checked after, so a failure does not leave it asleep).
        let kept = server.completions.deferred_bits();
        for _ in 0..3 {
            assert_eq!(consumer.try_frame(1 << 20).unwrap(), Ok(body.clone()));
        }
        pusher.join().unwrap().unwrap();
        assert_eq!(kept, 0);
    });
    assert_eq!(server.completions.deferred_bits(), late);
    assert_eq!(consumer.try_frame(1 << 20).unwrap(), Ok(body));
}

/// A reader that knows a frame takes part of it straight into its buffer: wherever the record
/// lies in the ring (across its end too), that part arrives there and nowhere else, and the
/// rest of the body arrives in order without it. A frame not picked, or whose part would not
/// fit the buffer, arrives whole, and the buffer is left alone.
#[test]
fn part_of_a_frame_goes_straight_to_the_readers_buffer_across_wraps() {
    let (a, _b) = UnixStream::pair().unwrap();
    let rings = ClientRings::create(SMALL).unwrap();
    let ClientRings {
        completions: mut consumer,
        memfd,
        ..
    } = rings;
    let server = ServerRings::attach(vec![memfd.into()]).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let (mut picked, mut whole) = (0, 0);
    for round in 0..400 {
        // One record each (at most half the ring), so a frame never waits for this reader.
        let n = rng.usize(5..2000);
        let mut body: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
        let start = rng.usize(5..=n);
        let moved = rng.usize(0..=n - start);
        body[0] = u8::from(rng.bool());
        body[1..3].copy_from_slice(&(start as u16).to_le_bytes());
        body[3..5].copy_from_slice(&(moved as u16).to_le_bytes());
        let mut framed = (n as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(&body);
        server.completions.push(&framed, &a).unwrap();
        let mut pick = |head: &[u8]| {
            (head[0] == 1).then(|| {
                let at = u16::from_le_bytes([head[1], head[2]]) as usize;
                let len = u16::from_le_bytes([head[3], head[4]]) as usize;
                (at, len)
            })
        };
        let mut dest = vec![0xEEu8; 1024];
        let (got, into) = consumer
            .try_frame_into(1 << 20, &mut pick, &mut dest)
            .unwrap()
            .unwrap();
        if body[0] == 1 && moved <= dest.len() {
            picked += 1;
            assert_eq!(into, Some(moved), "round {round}");
            assert_eq!(&dest[..moved], &body[start..start + moved], "round {round}");
            assert!(dest[moved..].iter().all(|&x| x == 0xEE), "round {round}");
            let rest = [&body[..start], &body[start + moved..]].concat();
            assert_eq!(got, rest, "round {round}");
        } else {
            whole += 1;
            assert_eq!(into, None, "round {round}");
            assert_eq!(got, body, "round {round}");
            assert!(dest.iter().all(|&x| x == 0xEE), "round {round}");
        }
    }
    assert!(
        picked > 100 && whole > 100,
        "{picked} picked, {whole} whole"
    );
    assert_eq!(consumer.taken().into_dest, picked);
    assert_eq!(consumer.taken().frames, 400);
}
