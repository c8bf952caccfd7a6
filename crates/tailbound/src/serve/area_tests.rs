//! The request data area: a long write is one record however long it is, data in the area and
//! short frames from many threads arrive whole and in each thread's order, a thread waiting for
//! room in the area holds up no other thread's call, a write's data there is read where it
//! lies (not copied out first), and a record naming data the area does not hold ends that
//! session only.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codec::{read_frame, FRAME_MAX};
use super::protocol::{Reply, Request, VERSION};
use super::ring::{
    self, testing, ClientRings, RingError, RingSizes, ServerRings, Wake, CHUNK, FEATURE_RING,
};
use super::ring_tests::{await_sessions, fixture};
use super::Client;
use crate::tbfs::OpenFlags;

/// Rings with a data area of four chunks, so that threads writing at once wait for room.
const TIGHT: RingSizes = RingSizes {
    request: 4096,
    completion: 1 << 16,
    data: 4 * CHUNK as u32,
};

fn pattern(seed: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|j| (seed * 131 + j * 7 + j / 251) as u8)
        .collect()
}

#[test]
fn a_write_of_128_kib_1_mib_or_4_mib_is_one_record() {
    let f = fixture(false);
    let c = Client::connect(&f.socket).unwrap();
    let file = c.open_file("/w", OpenFlags::create()).unwrap();
    let mut at = 0u64;
    for (i, n) in [128 << 10, 1 << 20, 4 << 20].into_iter().enumerate() {
        let data = pattern(i, n);
        let before = c.records_sent().unwrap();
        assert_eq!(file.pwrite(&data, at).unwrap(), n);
        assert_eq!(
            c.records_sent().unwrap() - before,
            1,
            "a write of {n} bytes"
        );
        let mut back = vec![0u8; n];
        assert_eq!(file.pread(&mut back, at).unwrap(), n);
        assert!(back == data, "the {n} bytes read back differ");
        at += n as u64;
    }
}

/// With the default rings a read of 128 KiB, 1 MiB or 2 MiB less a page (within half the
/// completion ring) comes back in completions of one record each, never in fragments.
#[test]
fn a_read_of_128_kib_or_1_mib_completes_in_one_record() {
    let f = fixture(false);
    let c = Client::connect(&f.socket).unwrap();
    let file = c.open_file("/r", OpenFlags::create()).unwrap();
    let data = pattern(3, 2 << 20);
    file.pwrite(&data, 0).unwrap();
    for n in [128 << 10, 1 << 20, (2 << 20) - 4096] {
        let before = c.completions_taken().unwrap();
        let mut back = vec![0u8; n];
        assert_eq!(file.pread(&mut back, 0).unwrap(), n);
        assert!(back == data[..n], "the {n} bytes read back differ");
        let after = c.completions_taken().unwrap();
        let frames = after.frames - before.frames;
        assert!(frames >= 1, "a read of {n} bytes crossed no completion");
        assert_eq!(
            after.records - before.records,
            frames,
            "a read of {n} bytes: its completions in fragments"
        );
    }
}

/// Threads of one session write long pieces (through a data area of four chunks, so they wait
/// for room) and short ones (through the ring) into the same files at once: every write lands,
/// and where a thread wrote a place twice its later write is what is there.
#[test]
fn long_and_short_writes_of_many_threads_through_a_small_area_all_land() {
    let f = fixture(false);
    let c = Client::connect_with(&f.socket, Some(TIGHT)).unwrap();
    const THREADS: usize = 8;
    const EACH: usize = 30;
    const PLACES: usize = 3;
    let long =
        |t: usize, i: usize| pattern(t * 1000 + i, CHUNK + (t * 977 + i * 4099) % (2 * CHUNK));
    let (done_tx, done_rx) = mpsc::channel();
    for t in 0..THREADS {
        let (c, done_tx) = (c.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let file = c.open_file(&format!("/m{t}"), OpenFlags::create()).unwrap();
            for i in 0..EACH {
                let at = (i % PLACES * 4 * CHUNK) as u64;
                file.pwrite(&long(t, i), at).unwrap();
                file.pwrite(&(i as u64).to_le_bytes(), (1 << 20) + i as u64 * 8)
                    .unwrap();
            }
            done_tx.send(t).unwrap();
        });
    }
    for _ in 0..THREADS {
        // Only turns a hang into a failure.
        done_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a thread's writes never finished");
    }
    for t in 0..THREADS {
        let file = c
            .open_file(&format!("/m{t}"), OpenFlags::read_only())
            .unwrap();
        for place in 0..PLACES {
            let last = (0..EACH).rev().find(|i| i % PLACES == place).unwrap();
            let want = long(t, last);
            let mut back = vec![0u8; want.len()];
            file.pread(&mut back, (place * 4 * CHUNK) as u64).unwrap();
            assert!(
                back == want,
                "thread {t}'s place {place}: not its write {last}"
            );
        }
        let mut log = vec![0u8; EACH * 8];
        file.pread(&mut log, 1 << 20).unwrap();
        let got: Vec<u64> = log
            .chunks(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            (0..EACH as u64).collect::<Vec<_>>(),
            "thread {t}'s log"
        );
    }
}

/// Frames pushed by many threads through the producer, some with their data in the area and
/// some through the ring (some of those in fragments), arrive whole and in each thread's
/// order; each thread keeps one slot until the reader has taken its frame.
#[test]
fn frames_with_data_in_the_area_and_in_the_ring_keep_each_threads_order() {
    let rings = ClientRings::create(TIGHT).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let area = rings.data.as_ref().unwrap();
    let (producer, mut consumer) = (&rings.requests, server.requests);
    const THREADS: usize = 6;
    const EACH: usize = 60;
    // A frame: the thread, its number, bytes from both. Every third goes through the area.
    let frame = |t: usize, i: usize| -> Vec<u8> {
        let n = if i.is_multiple_of(3) {
            CHUNK + 1 + (t * 5003 + i * 31) % (3 * CHUNK)
        } else {
            2 + (t * 131 + i * 977) % 3000
        };
        let mut f = vec![t as u8, i as u8];
        f.extend(pattern(t * 100 + i, n - 2));
        f
    };
    let (acks, gots): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<()>()).unzip();
    let mut next = [0usize; THREADS];
    std::thread::scope(|s| {
        for (t, got) in gots.into_iter().enumerate() {
            let a = &a;
            s.spawn(move || {
                for i in 0..EACH {
                    let f = frame(t, i);
                    if i.is_multiple_of(3) {
                        let slot = area.put(&f[1..]).unwrap();
                        producer
                            .push_out(&f[..1], slot.place(), Wake::One, a)
                            .unwrap();
                        // The slot is let go only once the reader has the frame.
                        got.recv().unwrap();
                    } else {
                        producer.push_parts(&[&f], Wake::One, a).unwrap();
                    }
                }
            });
        }
        for _ in 0..THREADS * EACH {
            let got = consumer.pop(1 << 20, &b).unwrap();
            let t = got[0] as usize;
            assert!(t < THREADS, "a frame of no thread");
            assert_eq!(got, frame(t, next[t]), "thread {t}'s frame {}", next[t]);
            if next[t].is_multiple_of(3) {
                acks[t].send(()).unwrap();
            }
            next[t] += 1;
        }
    });
    assert_eq!(next, [EACH; THREADS]);
    let taken = consumer.taken();
    assert_eq!(taken.frames, (THREADS * EACH) as u64);
    assert_eq!(taken.out_of_line, (THREADS * EACH / 3) as u64);
}

#[test]
fn a_thread_waiting_for_room_in_the_area_holds_up_no_other_call() {
    let f = fixture(false);
    let c = Client::connect_with(&f.socket, Some(TIGHT)).unwrap();
    let file = Arc::new(c.open_file("/r", OpenFlags::create()).unwrap());
    let area = c.data_area().unwrap();
    // Every chunk held, as by calls in flight.
    let hold = area.put(&vec![0u8; 4 * CHUNK]).unwrap();
    let (wrote_tx, wrote_rx) = mpsc::channel();
    let writer = {
        let file = file.clone();
        std::thread::spawn(move || {
            file.pwrite(&pattern(9, 2 * CHUNK), 0).unwrap();
            wrote_tx.send(()).unwrap();
        })
    };
    let start = Instant::now();
    while area.waiters() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the writer never waited"
        );
        std::thread::yield_now();
    }
    // Short calls of other threads are answered meanwhile.
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (c, file) = (c.clone(), file.clone());
        std::thread::spawn(move || {
            c.mkdir("/d", 0o755).unwrap();
            file.pwrite(b"short", 1 << 20).unwrap();
            assert!(c.stat("/d").is_ok());
            done_tx.send(()).unwrap();
        });
    }
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a short call held up behind a wait for room in the data area");
    // The writer still waits: its room is still held.
    assert!(wrote_rx.try_recv().is_err());
    assert_eq!(area.waiters(), 1);
    drop(hold);
    wrote_rx.recv().unwrap();
    writer.join().unwrap();
    let mut back = vec![0u8; 2 * CHUNK];
    file.pread(&mut back, 0).unwrap();
    assert!(back == pattern(9, 2 * CHUNK));
    let mut short = [0u8; 5];
    file.pread(&mut short, 1 << 20).unwrap();
    assert_eq!(&short, b"short");
}

/// A client on the rings of `sizes`, by hand.
fn raw(socket: &std::path::Path, sizes: RingSizes) -> (UnixStream, ClientRings) {
    let mut s = UnixStream::connect(socket).unwrap();
    let hello = Request::Hello {
        version: VERSION,
        features: FEATURE_RING,
    };
    crate::sys::sock::send_all(&s, &hello.encode(1)).unwrap();
    let (_, r) = Reply::decode(&read_frame(&mut s).unwrap().unwrap()).unwrap();
    assert!(matches!(r, Ok(Reply::Hello { .. })), "hello: {r:?}");
    let rings = ClientRings::create(sizes).unwrap();
    ring::send_memfd(&s, Some(&rings.memfd)).unwrap();
    let mut answer = [0u8];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], ring::ANSWER_RINGS);
    (s, rings)
}

/// Records naming data the session's area does not hold (past its end, wrapping the offset,
/// a session without one, too short to say where, or in the middle of a fragmented frame):
/// each ends its session, and the server goes on serving another.
#[test]
fn a_record_naming_data_outside_the_area_ends_that_session_only() {
    let f = fixture(false);
    let good = Client::connect(&f.socket).unwrap();
    let head = Request::Stat {
        path: "/".into(),
        follow: true,
    }
    .encode(2);
    let none = RingSizes { data: 0, ..TIGHT };
    type Bad<'a> = Box<dyn Fn(&ClientRings, &UnixStream) + 'a>;
    let cases: Vec<(RingSizes, Bad<'_>)> = vec![
        (
            TIGHT,
            Box::new(|r, s| {
                let end = TIGHT.data - 8;
                r.requests.push_out(&head, (end, 64), Wake::One, s).unwrap();
            }),
        ),
        (
            TIGHT,
            Box::new(|r, s| {
                r.requests
                    .push_out(&head, (u32::MAX, 16), Wake::One, s)
                    .unwrap();
            }),
        ),
        (
            none,
            Box::new(|r, s| {
                r.requests.push_out(&head, (0, 16), Wake::One, s).unwrap();
            }),
        ),
        (
            TIGHT,
            Box::new(|r, _| {
                // A record of 4 bytes (with the "data in the area" bit): no room for where.
                let mut raw = (4u32 | 1 << 30).to_le_bytes().to_vec();
                raw.extend_from_slice(&[0; 4]);
                testing::scribble(r, testing::REQUEST_DATA_AT, &raw);
                testing::poke(r, testing::REQUEST_TAIL_AT, 8);
            }),
        ),
        (
            TIGHT,
            Box::new(|r, _| {
                // A first fragment, then a record naming the area as if it went on the frame.
                let mut raw = (8u32 | 1 << 31).to_le_bytes().to_vec();
                raw.extend_from_slice(&100u32.to_le_bytes());
                raw.extend_from_slice(&[0; 4]);
                raw.extend_from_slice(&(8u32 | 1 << 30).to_le_bytes());
                raw.extend_from_slice(&0u32.to_le_bytes());
                raw.extend_from_slice(&16u32.to_le_bytes());
                testing::scribble(r, testing::REQUEST_DATA_AT, &raw);
                testing::poke(r, testing::REQUEST_TAIL_AT, raw.len() as u32);
            }),
        ),
    ];
    for (i, (sizes, bad)) in cases.iter().enumerate() {
        let (mut s, rings) = raw(&f.socket, *sizes);
        bad(&rings, &s);
        // The server ends the session by itself: the socket reaches its end.
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "case {i}");
        await_sessions(&f.server, 1);
        assert!(good.stat("/").is_ok(), "case {i}");
    }
}

#[test]
fn data_too_long_or_too_short_for_the_area_is_refused_there() {
    let rings = ClientRings::create(TIGHT).unwrap();
    let area = rings.data.as_ref().unwrap();
    assert!(!area.takes(CHUNK - 1));
    assert!(area.takes(CHUNK));
    assert!(area.takes(4 * CHUNK));
    assert!(!area.takes(4 * CHUNK + 1));
    let err = area.put(&vec![0u8; 4 * CHUNK + 1]).unwrap_err();
    assert!(matches!(err, RingError::Corrupt(_)), "{err:?}");
    // A size that is not a power of two, or a data area smaller than a chunk, is refused.
    for data in [3 * CHUNK as u32, CHUNK as u32 / 2] {
        assert!(
            ClientRings::create(RingSizes { data, ..TIGHT }).is_err(),
            "{data}"
        );
    }
}

#[test]
fn a_memfd_of_the_layout_before_the_data_area_is_refused_with_its_version() {
    let rings = ClientRings::create(TIGHT).unwrap();
    assert!(ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).is_ok());
    // The version word, as a client of layout 1 writes it.
    testing::poke(&rings, 4, 1);
    let err = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap_err();
    assert!(err.contains("version 1"), "{err}");
}

/// A write's data of 16 KiB, 128 KiB or 1 MiB in the area reaches the request the server
/// decodes where it lies: each frame is one record, no frame's data is copied out of the area,
/// and the data is what was written.
#[test]
fn a_writes_data_in_the_area_is_read_where_it_lies() {
    let rings = ClientRings::create(RingSizes::default()).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, _b) = UnixStream::pair().unwrap();
    let area = rings.data.as_ref().unwrap();
    let mut consumer = server.requests;
    let sizes = [CHUNK, 128 << 10, 1 << 20];
    for (i, n) in sizes.into_iter().enumerate() {
        let data = pattern(i, n);
        let id = i as u64 + 1;
        let lent = Request::Write {
            handle: 7,
            offset: 3,
            data: Default::default(),
        };
        let (head, tail) = lent.encode_with(id, None, Some(&data));
        let slot = area.put(tail).unwrap();
        rings
            .requests
            .push_out(&head, slot.place(), Wake::Nobody, &a)
            .unwrap();
        let frame = consumer.try_lent(FRAME_MAX).unwrap().unwrap();
        assert!(frame.tail.is_some(), "a write of {n} bytes");
        let (got_id, decoded) = Request::decode_frame(frame, false);
        assert_eq!(got_id, Some(id));
        let Ok((
            None,
            Request::Write {
                handle,
                offset,
                data: got,
            },
        )) = decoded
        else {
            panic!("a write of {n} bytes decoded as {decoded:?}");
        };
        assert_eq!((handle, offset), (7, 3));
        assert!(got.is_lent(), "a write of {n} bytes: its data was copied");
        assert!(got.as_slice() == data.as_slice(), "a write of {n} bytes");
        // The client lets go of its chunks once the completion is back.
        drop(got);
        drop(slot);
    }
    let t = consumer.taken();
    assert_eq!(t.frames, sizes.len() as u64);
    assert_eq!(t.records, sizes.len() as u64);
    assert_eq!(t.out_of_line, sizes.len() as u64);
    assert_eq!(t.copied_out, 0);
}

/// Data in the area that is not a write's whole data right after its length (a request that
/// takes no data, a length that disagrees with the area's, data begun in the head) is decoded
/// as one buffer, as from the socket: an error for the first two, the whole write for the
/// last.
#[test]
fn data_in_the_area_that_is_not_a_writes_whole_data_is_decoded_as_one_buffer() {
    let rings = ClientRings::create(TIGHT).unwrap();
    let server = ServerRings::attach(vec![rings.memfd.try_clone().unwrap().into()]).unwrap();
    let (a, _b) = UnixStream::pair().unwrap();
    let area = rings.data.as_ref().unwrap();
    let mut consumer = server.requests;
    let data = pattern(5, 2 * CHUNK);
    let write = Request::Write {
        handle: 9,
        offset: 0,
        data: Default::default(),
    };
    let mut take = |head: &[u8], tail: &[u8]| {
        let slot = area.put(tail).unwrap();
        rings
            .requests
            .push_out(head, slot.place(), Wake::Nobody, &a)
            .unwrap();
        let frame = consumer.try_lent(FRAME_MAX).unwrap().unwrap();
        Request::decode_frame(frame, false)
    };
    // A stat with data: left over.
    let stat = Request::Stat {
        path: "/".into(),
        follow: true,
    };
    let (mut head, _) = stat.encode_with(1, None, None);
    let body = (head.len() - 4 + data.len()) as u32;
    head[..4].copy_from_slice(&body.to_le_bytes());
    let (id, r) = take(&head, &data);
    assert_eq!(id, Some(1));
    assert!(r.is_err(), "{r:?}");
    // A write whose data is said to be longer than the area's.
    let (mut head, _) = write.encode_with(2, None, Some(&data));
    let at = head.len() - 4;
    head[at..].copy_from_slice(&(data.len() as u32 + 5).to_le_bytes());
    let (id, r) = take(&head, &data);
    assert_eq!(id, Some(2));
    assert!(r.is_err(), "{r:?}");
    // A write whose data begins in the head and goes on in the area: decoded whole, copied.
    let (mut head, _) = write.encode_with(3, None, Some(&data));
    head.extend_from_slice(&data[..5]);
    let (id, r) = take(&head, &data[5..]);
    assert_eq!(id, Some(3));
    let Ok((None, Request::Write { data: got, .. })) = r else {
        panic!("{r:?}");
    };
    assert!(!got.is_lent());
    assert!(got.as_slice() == data.as_slice());
}
