//! The server and client in one process: calls, sessions ending, locks between sessions, and
//! bytes that are not frames.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use proptest::prelude::*;

use super::codec::Enc;
use super::descs::STATUS_APPEND;
use super::protocol::{Caller, LockArgs, Reply, Request, VERSION};
use super::DataLease;
use super::*;
use crate::dev::memory::MemoryPool;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{Config, Error, FileKind, Fs, OpenFlags, SetAttr};

struct Fixture {
    server: Option<ServerHandle>,
    socket: std::path::PathBuf,
    fs: Arc<Fs>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
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
    let server = Server::start(fs.clone(), &socket, ServerOptions::default()).unwrap();
    Fixture {
        _dir: dir,
        socket,
        fs,
        server: Some(server),
    }
}

fn whole(per_handle: bool, kind: Kind) -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind,
        start: 0,
        end: u64::MAX,
        per_handle,
    }
}

#[test]
fn calls_reach_the_pool_and_errors_keep_their_kind() {
    let f = fixture();
    let c = Client::connect(&f.socket).unwrap();
    c.mkdir("/d", 0o755).unwrap();
    let file = c.open_file("/d/a", OpenFlags::create()).unwrap();
    // Larger than one request carries: split and put back together.
    let data: Vec<u8> = (0..IO_MAX + 12_345).map(|i| (i % 251) as u8).collect();
    assert_eq!(file.pwrite(&data, 0).unwrap(), data.len());
    assert_eq!(file.append(b"tail").unwrap(), data.len() as u64 + 4);
    file.fsync().unwrap();
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(file.pread(&mut back, 0).unwrap(), data.len() + 4);
    assert_eq!(&back[..data.len()], &data[..]);
    assert_eq!(&back[data.len()..data.len() + 4], b"tail");
    // The pool itself has it: the server wrote to the shared engine.
    assert_eq!(f.fs.stat("/d/a").unwrap().size, data.len() as u64 + 4);
    assert_eq!(file.stat().unwrap().ino, file.ino());
    file.close().unwrap();

    c.symlink("a", "/d/l").unwrap();
    assert_eq!(c.readlink("/d/l").unwrap(), "a");
    assert_eq!(c.lstat("/d/l").unwrap().kind, FileKind::Symlink);
    c.link("/d/a", "/d/b").unwrap();
    c.rename("/d/b", "/d/c").unwrap();
    c.truncate("/d/c", 3).unwrap();
    assert_eq!(c.stat("/d/a").unwrap().size, 3);
    c.set_attr(
        "/d/a",
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(c.stat("/d/a").unwrap().mode & 0o777, 0o600);
    let names: Vec<String> = c
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a", "c", "l"]);
    assert!(matches!(c.stat("/nope"), Err(Error::NotFound(_))));
    assert!(matches!(c.mkdir("/d", 0o755), Err(Error::Exists(_))));
    assert!(matches!(c.rmdir("/d"), Err(Error::NotEmpty(_))));
    c.unlink("/d/c").unwrap();
    c.sync().unwrap();
    assert!(c.statvfs().unwrap().files >= 3);
    let sp = c.space().unwrap();
    assert_eq!(
        sp.live + sp.pinned_by_snapshots + sp.reclaimable + sp.free,
        sp.size
    );
    let info = c.info().unwrap();
    assert_eq!(info.config.segment_bytes, 1 << 20);
    assert_eq!(info.superblocks.len(), 2 * crate::dev::BLOCK_SIZE as usize);
}

#[test]
fn a_directory_longer_than_a_reply_comes_in_pages() {
    let f = fixture();
    let c = Client::connect(&f.socket).unwrap();
    c.mkdir("/big", 0o755).unwrap();
    // Long names make a listing of 6000 entries span several replies.
    let name = |i: usize| format!("{i:05}{}", "x".repeat(240));
    for i in 0..6000 {
        f.fs.mkdir(&format!("/big/{}", name(i)), 0o755).unwrap();
    }
    let got = c.readdir("/big").unwrap();
    assert_eq!(got.len(), 6000);
    assert!(got.iter().enumerate().all(|(i, e)| e.name == name(i)));
}

#[test]
fn snapshots_through_the_server() {
    let f = fixture();
    let c = Client::connect(&f.socket).unwrap();
    let file = c.open_file("/f", OpenFlags::create()).unwrap();
    file.pwrite(b"old", 0).unwrap();
    let n = c.snapshot(Some("before")).unwrap();
    file.pwrite(b"new", 0).unwrap();
    let list = c.checkpoints().unwrap();
    assert!(list
        .iter()
        .any(|k| k.number == n && k.snapshot && k.name.as_deref() == Some("before")));
    let view = c.at(n).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(view.pread("/f", &mut buf, 0).unwrap(), 3);
    assert_eq!(&buf[..3], b"old");
    assert_eq!(view.readdir("/").unwrap().len(), 1);
    assert_eq!(view.stat("/f").unwrap().size, 3);
    drop(view);
    c.set_snapshot(n, false).unwrap();
    assert!(!c
        .checkpoints()
        .unwrap()
        .iter()
        .any(|k| k.number == n && k.snapshot));
}

#[test]
fn sessions_lock_against_each_other_and_a_closed_session_lets_go() {
    let f = fixture();
    let a = Client::connect(&f.socket).unwrap();
    let b = Client::connect(&f.socket).unwrap();
    let fa = a.open_file("/lock", OpenFlags::create()).unwrap();
    let fb = b.open_file("/lock", OpenFlags::create()).unwrap();
    fa.lock(whole(false, Kind::Write), false).unwrap();
    // Another session is another process: its POSIX lock conflicts.
    let err = fb.lock(whole(false, Kind::Write), false).unwrap_err();
    assert_eq!(err.errno(), libc::EAGAIN);
    let held = fb.test_lock(whole(false, Kind::Read)).unwrap().unwrap();
    assert_eq!(held.pid, std::process::id() as i32);
    assert!(held.write);
    // The same session's second handle is the same process: no conflict for a POSIX lock,
    // but a handle's own (OFD) lock conflicts with the process's POSIX lock.
    let fa2 = a.open_file("/lock", OpenFlags::read_only()).unwrap();
    assert!(fa2.test_lock(whole(false, Kind::Write)).unwrap().is_none());
    assert!(fa2.test_lock(whole(true, Kind::Write)).unwrap().is_some());
    fa.lock(whole(false, Kind::Unlock), false).unwrap();

    // A session that ends without unlocking or closing anything: a raw client whose stream
    // is dropped after it took the lock.
    let mut raw = UnixStream::connect(&f.socket).unwrap();
    raw_call(&mut raw, &hello_frame()).unwrap();
    let open = Request::Open {
        path: "/lock".into(),
        flags: OpenFlags::create(),
    };
    let (_, opened) = Reply::decode(&raw_call(&mut raw, &open.encode(2)).unwrap()).unwrap();
    let Ok(Reply::Opened { handle, .. }) = opened else {
        panic!("open: {opened:?}")
    };
    let lock = Request::Lock {
        handle,
        lock: whole(true, Kind::Write),
        wait: false,
    };
    let (_, locked) = Reply::decode(&raw_call(&mut raw, &lock.encode(3)).unwrap()).unwrap();
    assert_eq!(locked.unwrap(), Reply::Done);
    assert!(fb.test_lock(whole(false, Kind::Write)).unwrap().is_some());
    drop(raw);
    // Once the server has seen the end, b gets the lock, waiting for it.
    fb.lock(whole(false, Kind::Write), true).unwrap();
    assert!(fa.test_lock(whole(false, Kind::Write)).unwrap().is_some());
}

#[test]
fn closing_any_handle_drops_the_sessions_posix_locks_on_that_file() {
    let f = fixture();
    let a = Client::connect(&f.socket).unwrap();
    let b = Client::connect(&f.socket).unwrap();
    let fa = a.open_file("/lock", OpenFlags::create()).unwrap();
    let fa2 = a.open_file("/lock", OpenFlags::read_only()).unwrap();
    let fb = b.open_file("/lock", OpenFlags::create()).unwrap();
    fa.lock(whole(false, Kind::Write), false).unwrap();
    fa2.close().unwrap();
    fb.lock(whole(false, Kind::Write), false).unwrap();
}

#[test]
fn unsynced_writes_of_a_gone_client_stay() {
    let f = fixture();
    let a = Client::connect(&f.socket).unwrap();
    let file = a.open_file("/w", OpenFlags::create()).unwrap();
    file.pwrite(b"kept", 0).unwrap();
    std::mem::forget(file);
    drop(a);
    let b = Client::connect(&f.socket).unwrap();
    let file = b.open_file("/w", OpenFlags::read_only()).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(file.pread(&mut buf, 0).unwrap(), 4);
    assert_eq!(&buf, b"kept");
}

#[test]
fn a_held_description_is_shared_by_the_adopting_session_offset_and_locks_alike() {
    let f = fixture();
    let a = Client::connect(&f.socket).unwrap();
    let b = Client::connect(&f.socket).unwrap();
    let c = Client::connect(&f.socket).unwrap();
    let fa = a.open_file("/shared", OpenFlags::create()).unwrap();
    assert_eq!(fa.write_on(b"abc").unwrap(), 3);
    fa.lock(whole(true, Kind::Write), false).unwrap();
    let token = a.hold(vec![(fa.handle(), "note".into())]).unwrap();
    let mut adopted = b.adopt(token).unwrap();
    assert_eq!(adopted.len(), 1);
    let (fb, note) = adopted.pop().unwrap();
    assert_eq!((fb.handle(), note.as_str()), (fa.handle(), "note"));
    // One offset: b writes where a left it, and a reads on from where b left it.
    assert_eq!(fb.write_on(b"def").unwrap(), 6);
    assert_eq!(fa.seek(0, 1).unwrap(), 6);
    fa.seek(2, 0).unwrap();
    let mut buf = [0u8; 2];
    assert_eq!(fb.read_on(&mut buf).unwrap(), 2);
    assert_eq!(&buf, b"cd");
    assert_eq!(fa.seek(0, 1).unwrap(), 4);
    // One description's lock: b holds it too, and it outlives a's close.
    fb.lock(whole(true, Kind::Write), false).unwrap();
    let fc = c.open_file("/shared", OpenFlags::create()).unwrap();
    fa.close().unwrap();
    assert!(fc.lock(whole(true, Kind::Write), false).is_err());
    // Status flags are the description's: O_APPEND set through b makes a's writes appends.
    fb.set_status(STATUS_APPEND).unwrap();
    fb.seek(0, 0).unwrap();
    assert_eq!(fb.write_on(b"g").unwrap(), 7);
    fb.close().unwrap();
    fc.lock(whole(true, Kind::Write), false).unwrap();
    // A hold is taken once.
    assert!(b.adopt(token).is_err());
}

#[test]
fn a_hold_whose_process_exits_unadopted_is_dropped_with_its_locks() {
    let f = fixture();
    let a = Client::connect(&f.socket).unwrap();
    let c = Client::connect(&f.socket).unwrap();
    let fa = a.open_file("/held", OpenFlags::create()).unwrap();
    fa.lock(whole(true, Kind::Write), false).unwrap();
    let token = a.hold(vec![(fa.handle(), String::new())]).unwrap();
    // The process that was to adopt it: alive until its stdin closes.
    let mut child = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    a.hold_for(token, child.id() as i32).unwrap();
    fa.close().unwrap();
    drop(a);
    let fc = c.open_file("/held", OpenFlags::create()).unwrap();
    let server = f.server.as_ref().unwrap();
    // Held for the child: the description and its lock stay.
    assert!(fc.lock(whole(true, Kind::Write), false).is_err());
    drop(child.stdin.take());
    child.wait().unwrap();
    // The child is gone: the server drops the hold (here when asked whether it is idle).
    assert!(!server.idle(), "c's session is open");
    fc.lock(whole(true, Kind::Write), false).unwrap();
    drop(fc);
    drop(c);
    while !server.idle() {
        std::thread::yield_now();
    }
}

fn raw_call(stream: &mut UnixStream, frame: &[u8]) -> Option<Vec<u8>> {
    stream.write_all(frame).ok()?;
    super::codec::read_frame(stream).ok().flatten()
}

fn hello_frame() -> Vec<u8> {
    Request::Hello {
        version: VERSION,
        features: 0,
    }
    .encode(1)
}

#[test]
fn bad_frames_get_an_error_or_a_closed_session_and_the_server_goes_on() {
    let f = fixture();
    // Garbage before hello: the session is closed.
    let mut s = UnixStream::connect(&f.socket).unwrap();
    let mut junk = Enc::new();
    junk.u64(7).u8(200).u32(5);
    let reply = raw_call(&mut s, &junk.finish()).unwrap();
    let (id, r) = Reply::decode(&reply).unwrap();
    assert_eq!(id, 7);
    assert!(matches!(r, Err(Error::Invalid(_))));
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);

    // After hello, a request that does not decode gets an error and the session goes on.
    let mut s = UnixStream::connect(&f.socket).unwrap();
    assert!(matches!(
        Reply::decode(&raw_call(&mut s, &hello_frame()).unwrap())
            .unwrap()
            .1,
        Ok(Reply::Hello { .. })
    ));
    let mut bad = Enc::new();
    bad.u64(9).u8(2).u32(1 << 30); // an open whose path claims a gigabyte
    let (id, r) = Reply::decode(&raw_call(&mut s, &bad.finish()).unwrap()).unwrap();
    assert_eq!((id, r.is_err()), (9, true));
    let sync = Request::Sync.encode(10);
    let (id, r) = Reply::decode(&raw_call(&mut s, &sync).unwrap()).unwrap();
    assert_eq!((id, r.unwrap()), (10, Reply::Done));
    // A frame longer than the most: the session ends.
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);

    // A wrong protocol version is refused by name.
    let mut s = UnixStream::connect(&f.socket).unwrap();
    let old = Request::Hello {
        version: VERSION + 1,
        features: 0,
    }
    .encode(1);
    let (_, r) = Reply::decode(&raw_call(&mut s, &old).unwrap()).unwrap();
    assert!(r.unwrap_err().to_string().contains("protocol version"));

    // The server still serves.
    let c = Client::connect(&f.socket).unwrap();
    c.sync().unwrap();
}

#[test]
fn a_second_server_on_the_socket_is_refused_and_stop_removes_it() {
    let mut f = fixture();
    let err = Server::start(f.fs.clone(), &f.socket, ServerOptions::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    let c = Client::connect(&f.socket).unwrap();
    let file = c.open_file("/x", OpenFlags::create()).unwrap();
    f.server.take().unwrap().stop();
    assert!(!f.socket.exists());
    // The session ended with the server: the file was closed and calls fail cleanly.
    assert!(file.pwrite(b"x", 0).is_err());
    // A socket file left behind (a killed server) is replaced.
    let stale = std::os::unix::net::UnixListener::bind(&f.socket).unwrap();
    drop(stale);
    let again = Server::start(f.fs.clone(), &f.socket, ServerOptions::default()).unwrap();
    Client::connect(&f.socket).unwrap().sync().unwrap();
    again.stop();
}

#[test]
fn the_socket_is_private_unless_allowed() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let mode = std::fs::metadata(&f.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let other = f.socket.with_file_name("other.sock");
    let s = Server::start(
        f.fs.clone(),
        &other,
        ServerOptions {
            allow_other: true,
            ..ServerOptions::default()
        },
    )
    .unwrap();
    let mode = std::fs::metadata(&other).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    s.stop();
}

fn arb_request() -> impl Strategy<Value = Request> {
    let path = "[/a-z.]{0,12}";
    prop_oneof![
        (any::<u16>(), any::<u64>())
            .prop_map(|(version, features)| Request::Hello { version, features }),
        (path, any::<u32>(), 0u32..0o7777).prop_map(|(p, bits, mode)| Request::Open {
            path: p,
            flags: crate::tbfs::OpenFlags {
                mode,
                ..crate::tbfs::OpenFlags::from_libc(bits as i32, mode)
            }
        }),
        (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(handle, offset, len)| {
            Request::Read {
                handle,
                offset,
                len,
            }
        }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(handle, offset, data)| Request::Write {
                handle,
                offset,
                data: data.into()
            }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(handle, start, end, per_handle, wait)| Request::Lock {
                handle,
                lock: LockArgs {
                    space: Space::Flock,
                    kind: Kind::Read,
                    start,
                    end,
                    per_handle
                },
                wait
            }),
        (path, proptest::option::of(path))
            .prop_map(|(p, after)| Request::Readdir { path: p, after }),
        (path, path).prop_map(|(from, to)| Request::Rename { from, to }),
        (
            path,
            any::<Option<u32>>(),
            any::<Option<i64>>(),
            any::<bool>()
        )
            .prop_map(|(p, mode, t, follow)| Request::SetAttr {
                path: p,
                attr: SetAttr {
                    mode,
                    uid: mode,
                    gid: None,
                    atime_ns: t,
                    mtime_ns: t,
                    touch: follow
                },
                follow
            }),
        proptest::option::of(path).prop_map(|name| Request::Snapshot { name }),
        (any::<u64>(), path, any::<u64>(), any::<u32>()).prop_map(|(view, p, offset, len)| {
            Request::ViewRead {
                view,
                path: p,
                offset,
                len,
            }
        }),
        Just(Request::Info),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(handle, data)| {
            Request::WriteOn {
                handle,
                data: data.into(),
            }
        }),
        (any::<u64>(), any::<i64>(), 0u8..3).prop_map(|(handle, offset, whence)| {
            Request::Seek {
                handle,
                offset,
                whence,
            }
        }),
        prop::collection::vec((any::<u64>(), path), 0..4).prop_map(|items| Request::Hold { items }),
        (any::<u64>(), any::<i32>()).prop_map(|(token, pid)| Request::HoldFor { token, pid }),
        (any::<u64>(), any::<u32>()).prop_map(|(handle, mode)| Request::FsetAttr {
            handle,
            attr: SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        }),
        (path, any::<u32>(), any::<u32>()).prop_map(|(p, mode, rdev)| Request::Mknod {
            path: p,
            mode,
            rdev
        }),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(req in arb_request(), id in any::<u64>()) {
        let frame = req.encode(id);
        prop_assert_eq!(u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
        let (got_id, got) = Request::decode(&frame[4..]);
        prop_assert_eq!(got_id, Some(id));
        prop_assert_eq!(got.unwrap(), req);
    }

    #[test]
    fn a_body_given_up_decodes_as_one_lent(req in arb_request(), id in any::<u64>(), called in any::<bool>()) {
        let caller = Caller { tid: 7, class: 2, level: 4 };
        let frame = req.encode_from(id, called.then_some(&caller));
        let (got_id, got) = Request::decode_owned(frame[4..].to_vec(), called);
        prop_assert_eq!(got_id, Some(id));
        prop_assert_eq!(got.unwrap(), (called.then_some(caller), req));
    }

    #[test]
    fn a_write_sent_from_the_callers_buffer_is_the_same_frame(
        handle in any::<u64>(),
        offset in any::<u64>(),
        data in prop::collection::vec(any::<u8>(), 0..300),
        id in any::<u64>(),
    ) {
        let caller = Caller { tid: 9, class: 1, level: 3 };
        let lent = Request::Write { handle, offset, data: Default::default() };
        let whole = Request::Write { handle, offset, data: data.clone().into() };
        let (head, tail) = lent.encode_with(id, Some(&caller), Some(&data));
        prop_assert_eq!(tail.as_ptr(), data.as_ptr());
        prop_assert_eq!([head, tail.to_vec()].concat(), whole.encode_from(id, Some(&caller)));
        let (_, got) = Request::decode_from(&whole.encode_from(id, Some(&caller))[4..]);
        prop_assert_eq!(got.unwrap(), (caller, whole));
    }

    #[test]
    fn the_decoders_never_panic_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
    }

    #[test]
    fn the_decoders_never_panic_on_mutated_frames(
        req in arb_request(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut frame = req.encode(3)[4..].to_vec();
        for (at, b) in flips {
            let i = at.index(frame.len());
            frame[i] ^= b;
        }
        let _ = Request::decode(&frame);
        let _ = Request::decode_owned(frame.clone(), false);
        let _ = Request::decode_owned(frame.clone(), true);
        let keep = cut.index(frame.len() + 1);
        let _ = Request::decode(&frame[..keep]);
        let _ = Request::decode_owned(frame[..keep].to_vec(), false);
        let _ = Reply::decode(&frame[..keep]);
        let _ = Reply::decode_owned(frame[..keep].to_vec());
    }

    #[test]
    fn a_leased_read_in_parts_is_the_same_frame_and_decodes_in_place(
        data in prop::collection::vec(any::<u8>(), 0..300),
        blocks in prop::option::of(prop::collection::vec((any::<u64>(), any::<u32>(), any::<u64>()), 0..4)),
        id in any::<u64>(),
    ) {
        let reply = Reply::LeasedData {
            data: data.clone().into(),
            lease: blocks.map(|blocks| DataLease { inode: (3, 9), size: 77, first: 2, blocks }),
        };
        let (head, middle, after) = reply.encode_parts(id);
        let Reply::LeasedData { data: sent, .. } = &reply else { unreachable!() };
        // The data goes from where the reply holds it, not through a copy.
        prop_assert_eq!(middle.as_ptr(), sent.as_ptr());
        let frame = [&head[..], middle, &after[..]].concat();
        prop_assert_eq!(&frame, &reply.encode(id));
        let body = frame[4..].to_vec();
        let at = body.as_ptr() as usize + head.len() - 4;
        let (got_id, got) = Reply::decode_owned(body).unwrap();
        prop_assert_eq!(got_id, id);
        let got = got.unwrap();
        let Reply::LeasedData { data: kept, .. } = &got else { panic!("{got:?}") };
        // Left in the body: not copied out.
        prop_assert_eq!(kept.as_ptr() as usize, at);
        prop_assert_eq!(got, reply);
    }
}

#[test]
fn a_writes_data_is_decoded_in_place_in_the_body() {
    let data: Vec<u8> = (0..=255u8).cycle().take(64 << 10).collect();
    for (req, called) in [
        (
            Request::Write {
                handle: 3,
                offset: 9,
                data: data.clone().into(),
            },
            false,
        ),
        (
            Request::Append {
                handle: 3,
                data: data.clone().into(),
            },
            true,
        ),
        (
            Request::WriteOn {
                handle: 3,
                data: data.clone().into(),
            },
            true,
        ),
    ] {
        let caller = Caller {
            tid: 1,
            class: 2,
            level: 0,
        };
        let body = req.encode_from(5, called.then_some(&caller))[4..].to_vec();
        // Where the data lies in the body: its last bytes.
        let at = body.as_ptr() as usize + body.len() - data.len();
        let (_, got) = Request::decode_owned(body, called);
        let (_, got) = got.unwrap();
        let (Request::Write { data: d, .. }
        | Request::Append { data: d, .. }
        | Request::WriteOn { data: d, .. }) = &got
        else {
            panic!("{got:?}")
        };
        assert_eq!(&d[..], &data[..]);
        assert_eq!(
            d.as_ptr() as usize,
            at,
            "the data was copied out of the body"
        );
    }
}

#[test]
fn garbage_streams_do_not_stop_the_server() {
    let f = fixture();
    let mut rng = fastrand::Rng::with_seed(41);
    for _ in 0..200 {
        let mut s = UnixStream::connect(&f.socket).unwrap();
        let n = rng.usize(0..300);
        let junk: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    Client::connect(&f.socket).unwrap().sync().unwrap();
}
