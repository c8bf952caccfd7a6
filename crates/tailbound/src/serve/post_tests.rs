//! Posted closes (`posted.rs`): a close goes without waiting only where nothing another call
//! sees depends on when the server applies it. Each test below fails if a close it makes were
//! posted where it must wait, or applied later than the calls after it may look.

use std::sync::Arc;

use super::protocol::LockArgs;
use super::ring_tests::{await_sessions, start_client_process};
use super::*;
use crate::dev::sim::SimDevice;
use crate::tbfs::fsck;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{Config, Fs, OpenFlags};

struct Fixture {
    server: ServerHandle,
    socket: std::path::PathBuf,
    fs: Arc<Fs>,
    dev: Arc<SimDevice>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(SimDevice::new(64 << 20));
    let fs = Arc::new(
        Fs::format(
            dev.clone(),
            &Config {
                segment_bytes: 1 << 20,
                background_gc: false,
                checkpoint_every: None,
                ..Config::memory_pool()
            },
        )
        .unwrap(),
    );
    let socket = dir.path().join("pool.sock");
    let server = Server::start(fs.clone(), &socket, ServerOptions::default()).unwrap();
    Fixture {
        server,
        socket,
        fs,
        dev,
        _dir: dir,
    }
}

fn connect(f: &Fixture) -> Client {
    let c = Client::connect(&f.socket).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    c
}

fn rw() -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        create: true,
        ..OpenFlags::default()
    }
}

fn write_lock(per_handle: bool) -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind: Kind::Write,
        start: 0,
        end: 100,
        per_handle,
    }
}

fn unlock(per_handle: bool) -> LockArgs {
    LockArgs {
        kind: Kind::Unlock,
        ..write_lock(per_handle)
    }
}

/// Inodes in use, as a client's `statvfs` (`fs df`) counts them.
fn files(c: &Client) -> u64 {
    c.statvfs().unwrap().files
}

#[test]
fn closes_are_posted_unless_a_lock_or_another_session_may_depend_on_them() {
    let f = fixture();
    let c = connect(&f);
    drop(c.open_file("/plain", rw()).unwrap());
    assert_eq!(c.closes_posted(), 1, "a file of this session alone");

    // Its description put in a hold for another session: the close waits.
    let held = c.open_file("/held", rw()).unwrap();
    let token = c.hold(vec![(held.handle(), String::new())]).unwrap();
    drop(held);
    assert_eq!(c.closes_posted(), 1, "a held description");
    // Adopted elsewhere: not this session's own either.
    let other = connect(&f);
    let adopted = other.adopt(token).unwrap();
    drop(adopted);
    assert_eq!(other.closes_posted(), 0, "an adopted description");

    // A lock asked for once, even let go since: every close of the file waits.
    for (path, per_handle) in [("/posix", false), ("/ofd", true)] {
        let a = c.open_file(path, rw()).unwrap();
        a.lock(write_lock(per_handle), false).unwrap();
        a.lock(unlock(per_handle), false).unwrap();
        drop(a);
        drop(c.open_file(path, rw()).unwrap());
        assert_eq!(c.closes_posted(), 1, "{path}: a file the session locked");
    }
    // Other files still go without waiting.
    drop(c.open_file("/plain", rw()).unwrap());
    assert_eq!(c.closes_posted(), 2);
}

#[test]
fn a_lock_is_free_to_another_session_once_its_holders_close_returns() {
    let f = fixture();
    let (a, b) = (connect(&f), connect(&f));
    for (path, per_handle) in [("/posix", false), ("/ofd", true), ("/flock", true)] {
        let lock = if path == "/flock" {
            LockArgs {
                space: Space::Flock,
                end: u64::MAX,
                ..write_lock(per_handle)
            }
        } else {
            write_lock(per_handle)
        };
        let mine = a.open_file(path, rw()).unwrap();
        mine.lock(lock, false).unwrap();
        let theirs = b.open_file(path, rw()).unwrap();
        assert!(theirs.lock(lock, false).is_err(), "{path}: held by a");
        drop(mine);
        // The close released the lock before it returned: taken without waiting.
        theirs.lock(lock, false).unwrap();
    }
    assert_eq!(a.closes_posted(), 0);
}

/// Makes what [`remove`] renames over `path`, if it renames.
fn prepare(c: &Client, path: &str, by_rename: bool) {
    if by_rename {
        drop(c.open_file(&format!("{path}.new"), rw()).unwrap());
    }
}

/// How a test's other session takes the name of a file away: unlinking it, or renaming
/// another file (made by [`prepare`]) over it and unlinking that.
fn remove(c: &Client, path: &str, by_rename: bool) {
    if by_rename {
        c.rename(&format!("{path}.new"), path).unwrap();
    }
    c.unlink(path).unwrap();
}

#[test]
fn the_last_close_after_another_sessions_rename_over_it_frees_the_inode() {
    let f = fixture();
    let (a, b) = (connect(&f), connect(&f));
    let before = files(&a);
    let w = b.open_file("/x", rw()).unwrap();
    let ino = w.ino();
    prepare(&a, "/x", true);
    a.rename("/x.new", "/x").unwrap();
    assert_eq!(files(&a), before + 2, "/x, and the old /x open in b");
    a.unlink("/x").unwrap();
    assert_eq!(files(&a), before + 1, "open in b");
    drop(w);
    assert_eq!(
        b.closes_posted(),
        0,
        "a close after a rename over its file waits"
    );
    assert_eq!(files(&a), before);
    let y = a.open_file("/y", rw()).unwrap();
    assert_eq!(y.ino(), ino, "the freed number is given to the next file");
}

#[test]
fn the_last_close_after_another_sessions_unlink_frees_the_inode_before_it_returns() {
    let f = fixture();
    let (a, b) = (connect(&f), connect(&f));
    let before = files(&a);
    let w = b.open_file("/x", rw()).unwrap();
    w.pwrite(&vec![7u8; 1 << 20], 0).unwrap();
    b.sync().unwrap();
    let ino = w.ino();
    a.unlink("/x").unwrap();
    // Still open in b: the inode and its data stay, and its number is not given out.
    assert_eq!(files(&a), before + 1);
    let open_free = a.statvfs().unwrap().blocks_free;
    let z = a.open_file("/z", rw()).unwrap();
    assert_ne!(z.ino(), ino, "the number of an open file");
    drop(z);
    a.unlink("/z").unwrap();
    drop(w);
    assert_eq!(
        b.closes_posted(),
        0,
        "a close after an unlink of its file waits"
    );
    // Freed when the close returned, seen by another session at once.
    assert_eq!(files(&a), before);
    assert!(a.statvfs().unwrap().blocks_free > open_free);
    let y = a.open_file("/y", rw()).unwrap();
    assert_eq!(y.ino(), ino, "the freed number is given to the next file");
}

#[test]
fn an_unlink_returns_only_once_a_close_posted_before_it_is_applied() {
    // The remover on the rings or on the socket (which posts no closes but removes as well),
    // by unlink or by a rename over the name.
    for (rings, by_rename) in [(true, false), (false, false), (true, true)] {
        removal_waits_for_a_posted_close(rings, by_rename);
    }
}

fn removal_waits_for_a_posted_close(rings: bool, by_rename: bool) {
    let f = fixture();
    let a = Client::connect_with(&f.socket, rings.then(RingSizes::default)).unwrap();
    let b = connect(&f);
    let before = files(&a);
    let w = b.open_file("/x", rw()).unwrap();
    w.pwrite(&[1u8; 4096], 0).unwrap();
    // Made before the stall, and its close taken (a posted close wakes no worker: a's next
    // request does): a's own close of it must not wait behind the stall.
    prepare(&a, "/x", by_rename);
    a.statvfs().unwrap();
    let stall = f
        .server
        .closes()
        .stall
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // Posted: b's reader takes it and stops before applying it while the stall is held.
    drop(w);
    assert_eq!(b.closes_posted(), 1);
    let unlinker = {
        let a = a.clone();
        std::thread::spawn(move || {
            remove(&a, "/x", by_rename);
            files(&a)
        })
    };
    // The unlink left the inode open (b's close is not applied): it waits for b's session.
    // A bound only so a regression fails rather than hangs the suite.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while f.server.closes().waiting() == 0 && !unlinker.is_finished() {
        assert!(
            std::time::Instant::now() < give_up,
            "rings {rings}, rename {by_rename}: the removal neither waited nor returned"
        );
        std::thread::yield_now();
    }
    drop(stall);
    assert_eq!(
        unlinker.join().unwrap(),
        before,
        "rings {rings}, rename {by_rename}: the removal returned with its file still open"
    );
}

#[test]
fn a_file_closed_by_one_session_reads_whole_in_the_next() {
    let f = fixture();
    let (a, b) = (connect(&f), connect(&f));
    for i in 0..50u8 {
        let path = format!("/f{i}");
        let w = a.open_file(&path, rw()).unwrap();
        w.pwrite(&[i; 10_000], 0).unwrap();
        drop(w);
        let r = b.open_file(&path, OpenFlags::read_only()).unwrap();
        let mut buf = vec![0u8; 20_000];
        assert_eq!(r.pread(&mut buf, 0).unwrap(), 10_000, "{path}");
        assert!(buf[..10_000].iter().all(|&x| x == i), "{path}");
        drop(r);
        a.unlink(&path).unwrap();
    }
    assert_eq!(a.closes_posted(), 50);
    assert_eq!(b.closes_posted(), 50);
}

#[test]
fn many_threads_posting_closes_get_their_own_answers() {
    let f = fixture();
    let c = connect(&f);
    let before = files(&c);
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let c = c.clone();
            s.spawn(move || {
                for i in 0..100u32 {
                    let path = format!("/t{t}-{}", i % 5);
                    let w = c.open_file(&path, rw()).unwrap();
                    let data = vec![t ^ i as u8; 1000 + i as usize];
                    w.pwrite(&data, 0).unwrap();
                    w.set_len(data.len() as u64).unwrap();
                    let r = c.open_file(&path, OpenFlags::read_only()).unwrap();
                    drop(w);
                    let mut buf = vec![0u8; 4096];
                    let n = r.pread(&mut buf, 0).unwrap();
                    assert_eq!(&buf[..n], &data[..], "{path}");
                    if i % 3 == 0 {
                        // Open here and unlinked: this close is the inode's last.
                        c.unlink(&path).unwrap();
                    }
                    drop(r);
                }
            });
        }
    });
    assert!(c.closes_posted() > 0);
    for t in 0..8u8 {
        for k in 0..5 {
            let _ = c.unlink(&format!("/t{t}-{k}"));
        }
    }
    assert_eq!(files(&c), before, "every file closed and unlinked is freed");
}

/// Names the server's socket to [`posting_client_process`].
const CHILD_SOCKET: &str = "TAILBOUND_POST_TEST_SOCKET";
/// What it prints once its closes are posted.
const POSTED: &str = "posting client process: closes posted";

#[test]
#[ignore = "the client process that a_killed_client_with_posted_closes starts and kills"]
fn posting_client_process() {
    let socket = std::env::var_os(CHILD_SOCKET).expect("started by its parent test only");
    let c = Client::connect(std::path::Path::new(&socket)).unwrap();
    let mut kept = Vec::new();
    for i in 0..40u32 {
        let w = c.open_file(&format!("/p{i}"), rw()).unwrap();
        w.pwrite(&[i as u8; 8192], 0).unwrap();
        if i % 4 == 0 {
            // Left open, its name gone: the session's end must free it.
            c.unlink(&format!("/p{i}")).unwrap();
            kept.push(w);
        } else {
            drop(w);
        }
    }
    assert!(c.closes_posted() >= 30, "{}", c.closes_posted());
    // libtest prints the test's name on the same line first.
    println!("{POSTED}");
    loop {
        std::thread::park();
    }
}

#[test]
fn a_killed_client_with_posted_closes_leaves_a_clean_pool() {
    let f = fixture();
    let me = connect(&f);
    let before = files(&me);
    let (mut child, _lines) = start_client_process(
        "serve::post_tests::posting_client_process",
        CHILD_SOCKET,
        &f.socket,
        POSTED,
    );
    await_sessions(&f.server, 2);
    child.kill().unwrap();
    child.wait().unwrap();
    await_sessions(&f.server, 1);
    // Its descriptions are gone: the 10 unlinked files it kept open are freed, the 30 it
    // closed stay with their data.
    assert_eq!(files(&me), before + 30);
    for i in (1..40u32).filter(|i| i % 4 != 0) {
        let r = me
            .open_file(&format!("/p{i}"), OpenFlags::read_only())
            .unwrap();
        let mut buf = vec![0u8; 10_000];
        assert_eq!(r.pread(&mut buf, 0).unwrap(), 8192);
        assert!(buf[..8192].iter().all(|&x| x == i as u8));
    }
    me.sync().unwrap();
    drop(me);
    f.server.stop();
    f.fs.sync().unwrap();
    let image = SimDevice::from_image(f.dev.image());
    let report = fsck::check(&image).unwrap();
    assert_eq!(report.verdict, fsck::Verdict::Clean, "{report:#?}");
}
