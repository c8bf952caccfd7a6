//! Counts that must not go below zero: a bug that would take one there poisons the pool with a
//! reason naming it, where the count used to saturate or wrap.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::dev::sim::SimDevice;
use crate::tbfs::format::BLOCK_U64;

fn pool() -> Fs {
    let config = Config {
        segment_bytes: 64 << 10,
        superblock_every_bytes: 256 << 10,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        ..Config::default()
    };
    Fs::format(Arc::new(SimDevice::new(16 << 20)), &config).unwrap()
}

/// Sets inode `ino`'s link count as a bug in the link bookkeeping would have left it.
fn set_nlink(fs: &Fs, ino: u64, nlink: u32) {
    let m = fs.inner.lock_meta();
    m.inodes[&ino].lock().set_nlink(nlink);
}

fn poisoned_naming(result: Result<()>, fs: &Fs, what: &str) {
    match result {
        Err(Error::Poisoned(why)) => assert!(why.contains(what), "poisoned for {why:?}"),
        other => panic!("expected the pool poisoned for {what:?}, got {other:?}"),
    }
    assert!(fs.poisoned().is_some_and(|why| why.contains(what)));
}

#[test]
fn unlinking_a_file_whose_link_count_is_zero_poisons_the_pool() {
    let fs = pool();
    drop(fs.open_file("/a", OpenFlags::create()).unwrap());
    let ino = fs.stat("/a").unwrap().ino;
    set_nlink(&fs, ino, 0);
    poisoned_naming(fs.unlink("/a"), &fs, &format!("inode {ino}'s link count"));
    assert!(fs.stat("/a").is_err(), "a poisoned pool answers nothing");
}

#[test]
fn removing_a_directory_whose_parent_has_no_links_poisons_the_pool() {
    let fs = pool();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o755).unwrap();
    let parent = fs.stat("/d").unwrap().ino;
    set_nlink(&fs, parent, 0);
    poisoned_naming(
        fs.rmdir("/d/e"),
        &fs,
        &format!("inode {parent}'s link count"),
    );
}

#[test]
fn releasing_more_buffered_bytes_than_counted_poisons_the_pool() {
    let fs = pool();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.pwrite(&vec![7u8; 3 * BLOCK_U64 as usize], 0).unwrap();
    // A count one block short of the three buffered, as a release counted twice leaves it.
    fs.inner.release_dirty_bytes(BLOCK_U64);
    assert!(fs.poisoned().is_none());
    let _ = f.set_len(0);
    let why = fs.poisoned().expect("the pool is poisoned");
    assert!(
        why.contains("buffered bytes released"),
        "poisoned for {why:?}"
    );
    assert_eq!(
        fs.inner.budget.buffered(),
        2 * BLOCK_U64,
        "the count is left as it was, not wrapped"
    );
}

#[test]
fn closing_a_handle_of_a_file_with_no_open_handles_poisons_the_pool() {
    let fs = pool();
    let f = fs.open_file("/a", OpenFlags::create()).unwrap();
    let ino = fs.stat("/a").unwrap().ino;
    // The count a close counted twice leaves.
    assert!(fs.inner.lock_meta().inodes[&ino].lock().close_handle());
    drop(f);
    let why = fs.poisoned().expect("the pool is poisoned");
    assert!(
        why.contains(&format!("inode {ino}'s open handles")),
        "poisoned for {why:?}"
    );
    assert_eq!(
        fs.inner.lock_meta().inodes[&ino].lock().open_handles(),
        0,
        "the count is left at zero, not wrapped"
    );
}

#[test]
fn releasing_more_bytes_in_flight_than_counted_poisons_the_pool() {
    let fs = pool();
    let held = fs.inner.logs.in_flight();
    fs.inner.release_in_flight(held + BLOCK_U64);
    let why = fs.poisoned().expect("the pool is poisoned");
    assert!(
        why.contains("bytes in flight released"),
        "poisoned for {why:?}"
    );
    assert_eq!(
        fs.inner.logs.in_flight(),
        held,
        "the count is left as it was, not wrapped"
    );
}

#[test]
fn ending_a_device_flush_that_never_started_poisons_the_pool() {
    let fs = pool();
    fs.inner.end_flush();
    let why = fs.poisoned().expect("the pool is poisoned");
    assert!(
        why.contains("a device flush ended that was not counted as running"),
        "poisoned for {why:?}"
    );
}
