//! Leases: a client that answers stats and reads itself sees every change another session
//! makes (write, truncate, rename, unlink, chmod) and the cleaner moving a file's blocks and
//! writing their old segment again, on its very next call. No test sleeps: each change is
//! acknowledged before the next call is made, and the cleaner is run on demand.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::*;
use crate::dev::memory::MemoryPool;
use crate::dev::BLOCK_SIZE;
use crate::tbfs::{Config, Error, Fs, OpenFlags, SetAttr, ASK};

struct Fixture {
    fs: Arc<Fs>,
    _server: ServerHandle,
    socket: std::path::PathBuf,
    pool: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A server of a memory pool in /dev/shm (so clients may map it), with no background cleaning
/// or checkpoints: the tests run the cleaner themselves.
fn fixture(pool_bytes: u64) -> Fixture {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    let dev = Arc::new(MemoryPool::create(&pool, pool_bytes).unwrap());
    let fs = Arc::new(
        Fs::format(
            dev,
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
        fs,
        _server: server,
        socket,
        pool,
        _dir: dir,
    }
}

fn rw() -> OpenFlags {
    OpenFlags::create()
}

fn read_all(f: &RemoteFile, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = f.pread(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn a_kept_read_sees_another_sessions_write_and_truncate() {
    let f = fixture(32 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    let w = a.open_file("/f", rw()).unwrap();
    w.pwrite(&[1u8; 20_000], 0).unwrap();
    a.sync().unwrap();
    let r = b.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(read_all(&r, 30_000), vec![1u8; 20_000]);
    assert_eq!(read_all(&r, 30_000), vec![1u8; 20_000]);
    let c = b.lease_counters();
    assert!(
        c.reads_kept >= 1,
        "the second read came from the pool: {c:?}"
    );

    // Buffered in the server, not yet in the pool: the next read must see it.
    w.pwrite(&[2u8; 5000], 4096).unwrap();
    let mut want = vec![1u8; 20_000];
    want[4096..9096].fill(2);
    assert_eq!(read_all(&r, 30_000), want);
    // Kept again once the write is in the pool.
    a.sync().unwrap();
    assert_eq!(read_all(&r, 30_000), want);
    let kept = b.lease_counters().reads_kept;
    assert_eq!(read_all(&r, 30_000), want);
    assert_eq!(b.lease_counters().reads_kept, kept + 1);

    w.set_len(3000).unwrap();
    assert_eq!(read_all(&r, 30_000), vec![1u8; 3000]);
    assert_eq!(r.stat().unwrap().size, 3000);
    assert_eq!(b.stat("/f").unwrap().size, 3000);
    a.truncate("/f", 100).unwrap();
    assert_eq!(read_all(&r, 30_000), vec![1u8; 100]);
    assert_eq!(r.stat().unwrap().size, 100);
    assert_eq!(b.stat("/f").unwrap().size, 100);
}

/// An open answers with the file's stat under a lease: the opener's look at it and the next
/// `fstat` cross no more, and a write by another session after it is still seen.
#[test]
fn an_open_brings_its_stat_and_a_later_fstat_sees_another_sessions_write() {
    let f = fixture(32 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    let w = a.open_file("/f", rw()).unwrap();
    w.pwrite(&[7u8; 5000], 0).unwrap();
    let r = b.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(r.stat_at_open().unwrap().size, 5000);
    assert_eq!(r.stat().unwrap().size, 5000);
    let c = b.lease_counters();
    assert_eq!(
        (c.stats_kept, c.stats_asked),
        (1, 0),
        "the fstat was the open's answer: {c:?}"
    );
    w.pwrite(&[7u8; 3000], 5000).unwrap();
    assert_eq!(r.stat().unwrap().size, 8000);
    assert_eq!(b.lease_counters().stats_asked, 1);
    // Without leases the open still answers for itself, and nothing is kept.
    let c = Client::connect(&f.socket).unwrap();
    c.use_leases(false);
    let r = c.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(r.stat_at_open().unwrap().size, 8000);
    w.set_len(10).unwrap();
    assert_eq!(r.stat().unwrap().size, 10);
}

#[test]
fn a_kept_stat_sees_rename_unlink_and_chmod() {
    let f = fixture(32 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    a.mkdir("/d", 0o755).unwrap();
    drop(a.open_file("/d/x", rw()).unwrap());
    let ino = b.stat("/d/x").unwrap().ino;
    assert_eq!(b.stat("/d/x").unwrap().ino, ino);
    let kept = b.lease_counters().stats_kept;
    assert!(kept >= 1, "{:?}", b.lease_counters());

    let handle = b.open_file("/d/x", OpenFlags::read_only()).unwrap();
    let ctime = handle.stat().unwrap().ctime_ns;
    assert_eq!(handle.stat().unwrap().ctime_ns, ctime);
    a.rename("/d/x", "/d/y").unwrap();
    assert_ne!(
        handle.stat().unwrap().ctime_ns,
        ctime,
        "a rename changes the moved file's change time"
    );
    assert!(matches!(b.stat("/d/x"), Err(Error::NotFound(_))));
    assert_eq!(b.stat("/d/y").unwrap().ino, ino);
    assert_eq!(b.stat("/d/y").unwrap().ino, ino);
    // A directory on the way moves.
    a.rename("/d", "/e").unwrap();
    assert!(matches!(b.stat("/d/y"), Err(Error::NotFound(_))));
    assert_eq!(b.lstat("/e/y").unwrap().ino, ino);

    let chmod = |path: &str, mode: u64| {
        a.set_attr(
            path,
            &SetAttr {
                mode: Some(mode as u32),
                ..SetAttr::default()
            },
        )
        .unwrap()
    };
    assert_eq!(b.stat("/e/y").unwrap().mode & 0o777, 0o644);
    chmod("/e/y", 0o600);
    assert_eq!(b.stat("/e/y").unwrap().mode & 0o777, 0o600);
    assert_eq!(b.lstat("/e/y").unwrap().mode & 0o777, 0o600);
    chmod("/e", 0o700);
    assert_eq!(b.stat("/e").unwrap().mode & 0o777, 0o700);

    let open = b.open_file("/e/y", OpenFlags::read_only()).unwrap();
    assert_eq!(open.stat().unwrap().nlink, 1);
    assert_eq!(open.stat().unwrap().nlink, 1);
    a.unlink("/e/y").unwrap();
    assert!(matches!(b.stat("/e/y"), Err(Error::NotFound(_))));
    assert_eq!(open.stat().unwrap().nlink, 0);
    assert!(b.lease_counters().stats_kept > kept);
}

#[test]
fn a_kept_read_is_revoked_when_the_cleaner_writes_its_segment_again() {
    let pool_bytes = 16u64 << 20;
    let f = fixture(pool_bytes);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    // The leased file shares its segment with one that goes, so the cleaner moves it.
    let content: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
    let w = a.open_file("/f", rw()).unwrap();
    let g = a.open_file("/g", rw()).unwrap();
    for i in 0..16u64 {
        w.pwrite(&content[(i * 4096) as usize..][..4096], i * 4096)
            .unwrap();
        g.pwrite(&[0xAB; 4096], i * 4096).unwrap();
    }
    drop(g);
    a.sync().unwrap();
    let r = b.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(read_all(&r, content.len()), content);
    let lease = b.data_lease(r.ino()).expect("a data lease");
    let old = lease.blocks[0].0;
    assert!(old != 0 && old != ASK, "block 0 is in the pool: {lease:?}");
    assert_eq!(read_all(&r, content.len()), content);
    let kept = b.lease_counters().reads_kept;
    assert!(kept >= 1);

    a.unlink("/g").unwrap();
    a.sync().unwrap();
    f.fs.gc(0.9).unwrap();
    f.fs.sync().unwrap();
    // Churn until every free segment has been written again.
    for round in 0..6u8 {
        let name = format!("/churn{round}");
        let c = f.fs.open_file(&name, rw()).unwrap();
        c.pwrite(&vec![0xEE ^ round; 8 << 20], 0).unwrap();
        c.fsync().unwrap();
        drop(c);
        f.fs.unlink(&name).unwrap();
        f.fs.sync().unwrap();
        f.fs.gc(0.9).unwrap();
    }
    let mut at_old = vec![0u8; BLOCK_SIZE as usize];
    std::fs::File::open(&f.pool)
        .unwrap()
        .read_exact_at(&mut at_old, old * BLOCK_SIZE)
        .unwrap();
    assert_ne!(
        at_old,
        content[..BLOCK_SIZE as usize],
        "the block's old place was written again"
    );
    let asked = b.lease_counters().reads_asked;
    assert_eq!(read_all(&r, content.len()), content);
    assert_eq!(
        b.lease_counters().reads_asked,
        asked + 1,
        "revoked, so asked"
    );
}

#[test]
fn a_lease_of_a_freed_inode_does_not_answer_for_the_file_given_its_number() {
    let f = fixture(16 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    let w = a.open_file("/x", rw()).unwrap();
    w.pwrite(&[1u8; 10_000], 0).unwrap();
    drop(w);
    a.sync().unwrap();
    let r = b.open_file("/x", OpenFlags::read_only()).unwrap();
    let ino = r.ino();
    a.unlink("/x").unwrap();
    // Leased again after the unlink: the open handle keeps the file.
    for _ in 0..2 {
        assert_eq!(read_all(&r, 20_000), vec![1u8; 10_000]);
        assert_eq!(r.stat().unwrap().nlink, 0);
    }
    let kept = b.lease_counters();
    assert!(kept.reads_kept >= 1 && kept.stats_kept >= 1, "{kept:?}");
    drop(r);
    // Made empty, with nothing written through a session: only the free revokes.
    let y = a.open_file("/y", rw()).unwrap();
    assert_eq!(y.ino(), ino, "the freed number is given to the next file");
    let r = b.open_file("/y", OpenFlags::read_only()).unwrap();
    assert_eq!(r.ino(), ino);
    let st = r.stat().unwrap();
    assert_eq!((st.size, st.nlink), (0, 1));
    assert_eq!(read_all(&r, 20_000), Vec::<u8>::new());
}

#[test]
fn a_server_that_stops_revokes_every_lease() {
    let f = fixture(16 << 20);
    let b = Client::connect(&f.socket).unwrap();
    drop(b.open_file("/f", rw()).unwrap());
    b.stat("/f").unwrap();
    b.stat("/f").unwrap();
    assert_eq!(b.lease_counters().stats_kept, 1);
    let Fixture {
        _server: server, ..
    } = f;
    server.stop();
    assert!(
        b.stat("/f").is_err(),
        "the server is gone: the stat crossed and failed"
    );
}

#[test]
fn the_kernel_marks_the_liveness_word_when_its_thread_ends() {
    use super::lease_shm::{hold_liveness, Map, OWNER_DIED};
    use std::sync::atomic::Ordering;
    let (_file, map) = Map::table(8192).unwrap();
    let map = Arc::new(map);
    let (stop, stopped) = std::sync::mpsc::channel();
    let thread = hold_liveness(map.clone(), 0, stopped).unwrap();
    let word = map.word32(0).unwrap();
    let held = word.load(Ordering::Acquire);
    assert!(
        held != 0 && held & OWNER_DIED == 0,
        "held by a thread: {held:#x}"
    );
    // The thread ends without touching the word: the kernel marks it (as it does for every
    // thread of a process killed with SIGKILL).
    stop.send(()).unwrap();
    thread.join().unwrap();
    assert_eq!(word.load(Ordering::Acquire), OWNER_DIED);
}

/// What one session does to the tree between another session's checks.
#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        at: u64,
        len: usize,
        byte: u8,
    },
    Truncate {
        file: usize,
        len: u64,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Unlink {
        file: usize,
    },
    Chmod {
        file: usize,
        mode: u32,
    },
    Sync,
    Clean,
}

const NAMES: [&str; 4] = ["/p/a", "/p/b", "/q/c", "/q/d"];

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let file = 0..NAMES.len();
    prop_oneof![
        4 => (file.clone(), 0u64..40_000, 1usize..20_000, any::<u8>())
            .prop_map(|(file, at, len, byte)| Op::Write { file, at, len, byte }),
        1 => (file.clone(), 0u64..30_000).prop_map(|(file, len)| Op::Truncate { file, len }),
        1 => (file.clone(), file.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => file.clone().prop_map(|file| Op::Unlink { file }),
        1 => (file, 0o400u32..0o777).prop_map(|(file, mode)| Op::Chmod { file, mode }),
        1 => Just(Op::Sync),
        1 => Just(Op::Clean),
    ]
}

/// Checks every path through the leasing session `b` against the same calls through `c`,
/// which crosses for each: the same stat (or error) and the same bytes.
fn same_answers(b: &Client, c: &Client) {
    for name in NAMES {
        let (kept, asked) = (b.stat(name), c.stat(name));
        match (&kept, &asked) {
            (Ok(x), Ok(y)) => assert_eq!(x, y, "{name}"),
            (Err(x), Err(y)) => assert_eq!(x.errno(), y.errno(), "{name}"),
            _ => panic!("{name}: leased {kept:?}, asked {asked:?}"),
        }
        let (Ok(fb), Ok(fc)) = (
            b.open_file(name, OpenFlags::read_only()),
            c.open_file(name, OpenFlags::read_only()),
        ) else {
            continue;
        };
        // Twice: the second is answered from the lease the first was granted.
        for _ in 0..2 {
            assert_eq!(read_all(&fb, 64 << 10), read_all(&fc, 64 << 10), "{name}");
        }
        assert_eq!(fb.stat().unwrap(), fc.stat().unwrap(), "{name}");
    }
}

#[test]
fn leased_answers_match_a_session_that_crosses_for_each() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as PropConfig, TestRunner};
    let mut runner = TestRunner::new(PropConfig {
        cases: 12,
        ..PropConfig::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            let f = fixture(16 << 20);
            let a = Client::connect(&f.socket).unwrap();
            let b = Client::connect(&f.socket).unwrap();
            let c = Client::connect(&f.socket).unwrap();
            c.use_leases(false);
            a.mkdir("/p", 0o755).unwrap();
            a.mkdir("/q", 0o755).unwrap();
            for op in ops {
                match op {
                    Op::Write {
                        file,
                        at,
                        len,
                        byte,
                    } => {
                        let w = a.open_file(NAMES[file], OpenFlags::create()).unwrap();
                        w.pwrite(&vec![byte; len], at).unwrap();
                    }
                    Op::Truncate { file, len } => drop(a.truncate(NAMES[file], len)),
                    Op::Rename { from, to } => drop(a.rename(NAMES[from], NAMES[to])),
                    Op::Unlink { file } => drop(a.unlink(NAMES[file])),
                    Op::Chmod { file, mode } => drop(a.set_attr(
                        NAMES[file],
                        &SetAttr {
                            mode: Some(mode),
                            ..SetAttr::default()
                        },
                    )),
                    Op::Sync => a.sync().unwrap(),
                    Op::Clean => {
                        a.sync().unwrap();
                        f.fs.gc(0.9).unwrap();
                    }
                }
                same_answers(&b, &c);
            }
            // At least one file in the pool, checked twice: the second check is all kept.
            let w = a.open_file(NAMES[0], OpenFlags::create()).unwrap();
            w.pwrite(&[7u8; 10_000], 0).unwrap();
            a.sync().unwrap();
            same_answers(&b, &c);
            same_answers(&b, &c);
            let used = b.lease_counters();
            prop_assert!(used.stats_kept > 0 && used.reads_kept > 0, "{used:?}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_kept_read_sees_stores_into_the_files_shared_memory() {
    let f = fixture(32 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    let w = a.open_file("/f", rw()).unwrap();
    w.pwrite(&[1u8; 8192], 0).unwrap();
    a.sync().unwrap();
    let r = b.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(read_all(&r, 8192), vec![1u8; 8192]);
    assert_eq!(read_all(&r, 8192), vec![1u8; 8192]);
    assert!(b.lease_counters().reads_kept >= 1, "no read was kept");

    // A process's MAP_SHARED mapping stores into the server's memory for the file, which the
    // server never hears of: the server in this process, so its descriptor is ours.
    let fd = w.shared_memory(0).unwrap();
    let memory = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .unwrap();
    memory.write_at(&[3u8; 100], 1000).unwrap();
    let mut want = vec![1u8; 8192];
    want[1000..1100].fill(3);
    assert_eq!(read_all(&r, 8192), want, "a kept read missed a store");
    assert_eq!(read_all(&r, 8192), want, "a read leased the pool's bytes");
    assert_eq!(r.stat().unwrap().size, 8192);
    w.shared_memory(2).unwrap();
}

/// A leased read whose completion its own thread takes off the ring gets its data straight
/// into the caller's buffer (not into a buffer of the completion's first): the bytes are the
/// file's, the rest of the buffer is untouched, and the lease that came with it answers the
/// next read.
#[test]
fn a_leased_reads_data_goes_from_the_ring_into_the_callers_buffer() {
    let f = fixture(32 << 20);
    let (a, b) = (
        Client::connect(&f.socket).unwrap(),
        Client::connect(&f.socket).unwrap(),
    );
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let w = a.open_file("/f", rw()).unwrap();
    w.pwrite(&data, 0).unwrap();
    a.sync().unwrap();
    let r = b.open_file("/f", OpenFlags::read_only()).unwrap();
    let before = b.completions_taken().unwrap();
    let mut buf = vec![7u8; 150_000];
    assert_eq!(r.pread(&mut buf, 0).unwrap(), data.len());
    assert_eq!(&buf[..data.len()], &data[..]);
    assert!(buf[data.len()..].iter().all(|&x| x == 7));
    let after = b.completions_taken().unwrap();
    assert_eq!(
        after.into_dest,
        before.into_dest + 1,
        "{before:?} -> {after:?}"
    );
    // The lease came back with it: the next read is the client's own.
    let kept = b.lease_counters().reads_kept;
    assert_eq!(read_all(&r, 150_000), data);
    assert_eq!(b.lease_counters().reads_kept, kept + 1);
}
