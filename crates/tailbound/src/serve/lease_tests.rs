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

    a.rename("/d/x", "/d/y").unwrap();
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
