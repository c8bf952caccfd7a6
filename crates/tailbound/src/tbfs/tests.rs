//! Engine unit tests on a plain in-memory device (the crash harness lives in `tests/tbfs_crash.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::dev::sim::SimDevice;
use crate::dev::Device;
use crate::tbfs::format::{BLOCK, INODES_PER_PAGE};
use crate::tbfs::limits::HOT_SEAL_BYTES;

fn small_config(ordering: Ordering, barrier: Barrier) -> Config {
    Config {
        ordering,
        barrier,
        segment_bytes: 64 << 10,
        superblock_every_bytes: 256 << 10,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

/// For files of several MiB: 1 MiB segments, no superblock refresh in the way, and a write
/// buffer of `dirty_bytes_max`.
pub(super) fn large_file_config(dirty_bytes_max: u64) -> Config {
    Config {
        segment_bytes: 1 << 20,
        superblock_every_bytes: 64 << 20,
        dirty_bytes_max,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    }
}

/// A pool on `dev` (`large_file_config(dirty_bytes_max)`) holding `/x` = `data`, made durable,
/// and `/x` open.
fn pool_with_synced_x(dev: &Arc<SimDevice>, dirty_bytes_max: u64, data: &[u8]) -> (Fs, File) {
    let fs = Fs::format(dev.clone(), &large_file_config(dirty_bytes_max)).unwrap();
    let f = fs.open_file("/x", OpenFlags::create()).unwrap();
    f.pwrite(data, 0).unwrap();
    fs.sync().unwrap();
    (fs, f)
}

/// A device of `len` bytes; the tests copy its latest bytes, as a process crash leaves them.
fn device(len: u64) -> Arc<SimDevice> {
    Arc::new(SimDevice::new(len))
}

/// A device holding `image`.
fn from_image(image: Vec<u8>) -> Arc<dyn Device> {
    Arc::new(SimDevice::from_image(image))
}

/// A copy of `dev`'s image, and fsck's report on it, which must find no damage.
fn checked_clean(dev: &SimDevice, context: &str) -> (Arc<dyn Device>, fsck::FsckReport) {
    let image = from_image(dev.image());
    let report = fsck::check(&*image).unwrap();
    assert_eq!(
        report.verdict,
        fsck::Verdict::Clean,
        "{context}: {report:#?}"
    );
    (image, report)
}

fn reopen(dev: &SimDevice) -> Fs {
    let copy = from_image(dev.image());
    Fs::open(copy, &OpenOptions::default()).unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn read_all(fs: &Fs, path: &str) -> Vec<u8> {
    let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let size = f.stat().unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), size);
    buf
}

#[test]
fn a_new_pool_has_an_empty_root_and_reopens() {
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    assert!(fs.readdir("/").unwrap().is_empty());
    assert_eq!(fs.stat("/").unwrap().kind, FileKind::Dir);
    fs.close().unwrap();
    let fs = reopen(&dev);
    assert!(fs.readdir("/").unwrap().is_empty());
    assert_eq!(fs.recovery_report().logs_rolled_forward, 0);
}

#[test]
fn files_and_directories_survive_close_and_reopen() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o700).unwrap();
    let mut f = fs.open_file("/a/b/data", OpenFlags::create()).unwrap();
    let big = pattern(1, 3 * 1024 * 1024 + 123);
    f.write(&big).unwrap();
    drop(f);
    fs.open_file("/top", OpenFlags::create())
        .unwrap()
        .write(b"hello")
        .unwrap();
    fs.close().unwrap();

    let fs = reopen(&dev);
    assert_eq!(read_all(&fs, "/a/b/data"), big);
    assert_eq!(read_all(&fs, "/top"), b"hello");
    let names: Vec<String> = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a", "top"]);
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    assert_eq!(fs.stat("/a/b").unwrap().mode, 0o700);
}

#[test]
fn relaxed_fsync_writes_a_data_only_log_that_roll_forward_recovers() {
    for barrier in [
        Barrier::EveryLog,
        Barrier::EveryCheckpoint,
        Barrier::Superblock,
    ] {
        let dev = device(8 << 20);
        let fs = Fs::format(dev.clone(), &small_config(Ordering::Relaxed, barrier)).unwrap();
        let f = fs.open_file("/f", OpenFlags::create()).unwrap();
        f.pwrite(&pattern(2, 8192), 0).unwrap();
        f.fsync().unwrap(); // creation is metadata: a checkpoint
        let before = fs.counters();
        f.pwrite(&pattern(3, 4096), 4096).unwrap();
        f.pwrite(&pattern(4, 100), 8192).unwrap(); // grows the file: carried by the log
        f.fsync().unwrap();
        let after = fs.counters();
        assert_eq!(after.checkpoints, before.checkpoints, "{barrier:?}");
        assert_eq!(
            after.data_only_logs,
            before.data_only_logs + 1,
            "{barrier:?}"
        );
        // The pool is copied as it stands: no close, so only logs make it.
        let fs2 = reopen(&dev);
        let mut want = pattern(2, 8192);
        want[4096..].copy_from_slice(&pattern(3, 4096));
        want.extend(pattern(4, 100));
        assert_eq!(read_all(&fs2, "/f"), want, "{barrier:?}");
        assert!(fs2.recovery_report().logs_rolled_forward >= 1);
    }
}

#[test]
fn a_sync_writes_a_checkpoint_only_for_its_own_files_namespace_change() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let a = fs.open_file("/a", OpenFlags::create()).unwrap();
    a.pwrite(&pattern(1, 8192), 0).unwrap();
    a.fsync().unwrap();
    // Another file's creation waits for a checkpoint; syncing `/a` does not write it.
    let b = fs.open_file("/b", OpenFlags::create()).unwrap();
    b.pwrite(b"not synced", 0).unwrap();
    let before = fs.counters();
    a.pwrite(&pattern(2, 4096), 4096).unwrap();
    a.pwrite(&pattern(3, 100), 8192).unwrap();
    a.fsync().unwrap();
    let after = fs.counters();
    assert_eq!(after.checkpoints, before.checkpoints, "a checkpoint for /b");
    assert_eq!(after.data_only_logs, before.data_only_logs + 1);
    let mut want = pattern(1, 4096);
    want.extend(pattern(2, 4096));
    want.extend(pattern(3, 100));
    // As a crash leaves it: `/a` as synced, `/b` never made durable.
    let (image, _) = checked_clean(&dev, "after the data-only sync");
    let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&crashed, "/a"), want);
    assert!(matches!(crashed.stat("/b"), Err(Error::NotFound(_))));
    drop(crashed);

    // The file's own name, attributes or size: a checkpoint, as before.
    let changes: [(&str, &dyn Fn()); 3] = [
        ("rename", &|| fs.rename("/a", "/c").unwrap()),
        ("chmod", &|| {
            a.set_attr(&SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            })
            .unwrap()
        }),
        ("truncate", &|| a.set_len(5000).unwrap()),
    ];
    for (what, change) in changes {
        let before = fs.counters();
        change();
        a.pwrite(b"after", 0).unwrap();
        a.fsync().unwrap();
        assert_eq!(
            fs.counters().checkpoints,
            before.checkpoints + 1,
            "{what}: no checkpoint"
        );
    }
    want.truncate(5000);
    want[..5].copy_from_slice(b"after");
    let crashed = reopen(&dev);
    assert_eq!(read_all(&crashed, "/c"), want);
    assert_eq!(crashed.stat("/c").unwrap().mode & 0o777, 0o600);
    assert!(matches!(crashed.stat("/a"), Err(Error::NotFound(_))));
    // `/b` went into the rename's checkpoint, with what was written to it.
    assert_eq!(read_all(&crashed, "/b"), b"not synced");
}

#[test]
fn strict_fsync_writes_a_checkpoint_every_time() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Strict, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.pwrite(b"x", 0).unwrap();
    f.fsync().unwrap();
    let before = fs.counters();
    for i in 0..5 {
        f.pwrite(&pattern(i, 4096), 0).unwrap();
        f.fsync().unwrap();
    }
    let after = fs.counters();
    assert_eq!(after.checkpoints - before.checkpoints, 5);
    assert_eq!(after.data_only_logs, before.data_only_logs);
    assert_eq!(read_all(&reopen(&dev), "/f"), pattern(4, 4096));
}

#[test]
fn unlinked_open_files_live_until_closed_and_orphans_are_reclaimed() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    let mut f = fs.open_file("/gone", OpenFlags::create()).unwrap();
    f.write(&pattern(5, 10000)).unwrap();
    fs.unlink("/gone").unwrap();
    assert!(matches!(fs.stat("/gone"), Err(Error::NotFound(_))));
    let mut back = vec![0u8; 10000];
    assert_eq!(f.pread(&mut back, 0).unwrap(), 10000);
    assert_eq!(back, pattern(5, 10000));
    f.fsync().unwrap();
    // The pool goes down with the file still open: the next open reclaims it.
    let fs2 = reopen(&dev);
    assert_eq!(fs2.recovery_report().orphans_reclaimed, 1);
    assert_eq!(fs2.statvfs().unwrap().files, 1);
    drop(f);
    assert_eq!(fs.statvfs().unwrap().files, 1);
}

#[test]
fn rename_replaces_atomically_and_refuses_bad_moves() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    fs.open_file("/a", OpenFlags::create())
        .unwrap()
        .write(b"new")
        .unwrap();
    fs.open_file("/b", OpenFlags::create())
        .unwrap()
        .write(b"old")
        .unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/e", 0o755).unwrap();
    fs.rename("/a", "/b").unwrap();
    assert!(matches!(fs.rename("/d", "/d/e/f"), Err(Error::Invalid(_))));
    assert!(matches!(fs.rename("/b", "/d"), Err(Error::IsDir(_))));
    assert!(matches!(fs.rmdir("/d"), Err(Error::NotEmpty(_))));
    fs.rename("/d/e", "/e").unwrap();
    fs.rmdir("/d").unwrap();
    fs.sync().unwrap();
    let fs2 = reopen(&dev);
    assert_eq!(read_all(&fs2, "/b"), b"new");
    let names: Vec<String> = fs2
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["b", "e"]);
    assert_eq!(fs2.stat("/").unwrap().nlink, 3);
}

#[test]
fn truncate_zeroes_the_tail_and_sparse_files_read_zeros() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    let f = fs.open_file("/s", OpenFlags::create()).unwrap();
    f.pwrite(&[7u8; 10000], 0).unwrap();
    f.fsync().unwrap();
    f.set_len(5000).unwrap();
    f.set_len(9000).unwrap();
    f.pwrite(b"end", 100_000).unwrap();
    fs.sync().unwrap();
    let got = read_all(&reopen(&dev), "/s");
    assert_eq!(got.len(), 100_003);
    assert!(got[..5000].iter().all(|&b| b == 7));
    assert!(got[5000..100_000].iter().all(|&b| b == 0));
    assert_eq!(&got[100_000..], b"end");
}

#[test]
fn space_is_reused_after_overwrites_and_a_full_pool_says_so() {
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    // Rewrite 1 MiB twenty times over in a 4 MiB pool: dead segments must come back.
    for round in 0..20u64 {
        for i in 0..16u64 {
            f.pwrite(&pattern(round * 100 + i, 64 << 10), i * (64 << 10))
                .unwrap();
        }
        f.fsync().unwrap();
    }
    let mut want = Vec::new();
    for i in 0..16u64 {
        want.extend(pattern(19 * 100 + i, 64 << 10));
    }
    assert_eq!(read_all(&fs, "/f"), want);
    // Now fill it: a clean ENOSPC, and the pool still opens with what was synced.
    let g = fs.open_file("/g", OpenFlags::create()).unwrap();
    let mut err = None;
    for i in 0..200u64 {
        if let Err(e) = g
            .pwrite(&pattern(i, 64 << 10), i * (64 << 10))
            .and_then(|_| g.fsync())
        {
            err = Some(e);
            break;
        }
    }
    assert!(matches!(err, Some(Error::NoSpace(_))), "{err:?}");
    drop(g);
    let fs2 = reopen(&dev);
    assert_eq!(read_all(&fs2, "/f"), want);
}

#[test]
fn many_files_in_one_directory_and_many_threads() {
    let dev = device(32 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..150u64 {
                    let mut f = fs
                        .open_file(&format!("/t{t}-{i:04}"), OpenFlags::create())
                        .unwrap();
                    f.write(&pattern(t * 1000 + i, (i as usize % 7) * 1500 + 1))
                        .unwrap();
                    if i % 10 == 0 {
                        f.fsync().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    fs.close().unwrap();
    let fs = reopen(&dev);
    assert_eq!(fs.readdir("/").unwrap().len(), 600);
    for t in 0..4u64 {
        for i in (0..150u64).step_by(17) {
            assert_eq!(
                read_all(&fs, &format!("/t{t}-{i:04}")),
                pattern(t * 1000 + i, (i as usize % 7) * 1500 + 1)
            );
        }
    }
}

#[test]
fn damaged_superblocks_fall_back_or_fail_clearly() {
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    fs.open_file("/x", OpenFlags::create())
        .unwrap()
        .write(b"kept")
        .unwrap();
    fs.close().unwrap();
    let mut image = dev.image();
    let newest = (0..2).max_by_key(|&c| {
        format::Superblock::decode(&image[c * 4096..(c + 1) * 4096], u64::MAX)
            .map(|s| s.generation)
            .unwrap_or(0)
    });
    let newest = newest.unwrap();
    image[newest * 4096 + 100] ^= 0xff;
    let one = from_image(image.clone());
    let fs = Fs::open(one, &OpenOptions::default()).unwrap();
    assert_eq!(fs.recovery_report().superblock as usize, 1 - newest);
    // The older copy names an older checkpoint; roll-forward brings the tree up to date.
    assert_eq!(read_all(&fs, "/x"), b"kept");
    image[(1 - newest) * 4096 + 8] ^= 0xff;
    let none = from_image(image);
    let err = Fs::open(none, &OpenOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("superblock 0") && err.to_string().contains("superblock 1"),
        "{err}"
    );
}

#[test]
fn bad_paths_and_handles_give_posix_errors() {
    let dev = device(4 << 20);
    let fs = Fs::format(dev, &small_config(Ordering::Relaxed, Barrier::EveryLog)).unwrap();
    assert_eq!(fs.stat("/nope").unwrap_err().errno(), libc::ENOENT);
    fs.open_file("/f", OpenFlags::create()).unwrap();
    assert_eq!(fs.mkdir("/f/x", 0o755).unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(
        fs.mkdir(&format!("/{}", "n".repeat(300)), 0o755)
            .unwrap_err()
            .errno(),
        libc::ENAMETOOLONG
    );
    let excl = OpenFlags {
        exclusive: true,
        ..OpenFlags::create()
    };
    assert_eq!(fs.open_file("/f", excl).unwrap_err().errno(), libc::EEXIST);
    // A symbolic link at the last name, dangling or not, is there: O_EXCL creates nothing.
    fs.symlink("/target", "/dangling").unwrap();
    assert_eq!(
        fs.open_file("/dangling", excl).unwrap_err().errno(),
        libc::EEXIST
    );
    assert_eq!(fs.stat("/target").unwrap_err().errno(), libc::ENOENT);
    fs.symlink("/f", "/to-f").unwrap();
    assert_eq!(
        fs.open_file("/to-f", excl).unwrap_err().errno(),
        libc::EEXIST
    );
    // Without O_EXCL, a dangling link's target is created, as the kernel does.
    fs.open_file("/dangling", OpenFlags::create()).unwrap();
    assert!(fs.stat("/target").is_ok());
    assert_eq!(fs.lstat("/dangling").unwrap().kind, FileKind::Symlink);
    fs.mkdir("/d", 0o755).unwrap();
    fs.symlink("next", "/d/first").unwrap();
    fs.symlink("../made", "/d/next").unwrap();
    fs.open_file("/d/first", OpenFlags::create()).unwrap();
    assert!(
        fs.stat("/made").is_ok(),
        "a chain of relative dangling links"
    );
    fs.symlink("/loop-b", "/loop-a").unwrap();
    fs.symlink("/loop-a", "/loop-b").unwrap();
    assert_eq!(
        fs.open_file("/loop-a", OpenFlags::create())
            .unwrap_err()
            .errno(),
        libc::ELOOP
    );
    let ro = fs.open_file("/f", OpenFlags::read_only()).unwrap();
    assert_eq!(ro.pwrite(b"x", 0).unwrap_err().errno(), libc::EBADF);
    assert_eq!(fs.unlink("/").unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn dropping_the_last_handle_releases_the_pool_at_once_and_keeps_its_data() {
    let dev = device(4 << 20);
    let config = Config {
        checkpoint_every: Some(Duration::from_secs(3600)),
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    fs.open_file("/kept", OpenFlags::create())
        .unwrap()
        .write(b"buffered")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(fs);
    assert_eq!(Arc::strong_count(&dev), 1, "no thread still holds the pool");
    assert_eq!(read_all(&reopen(&dev), "/kept"), b"buffered");
}

/// A small pool with a few files, directories and data-only logs, as an image.
fn sample_image() -> Vec<u8> {
    let dev = device(2 << 20);
    let config = Config {
        segment_bytes: 32 << 10,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let f = fs.open_file("/d/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 20000), 0).unwrap();
    f.fsync().unwrap();
    f.pwrite(&pattern(2, 5000), 3000).unwrap();
    f.fsync().unwrap();
    fs.open_file("/g", OpenFlags::create())
        .unwrap()
        .write(b"g")
        .unwrap();
    fs.sync().unwrap();
    f.pwrite(&pattern(3, 9000), 15000).unwrap();
    f.fsync().unwrap();
    drop(f);
    // Taken as a crash would leave it; closing afterwards changes only the device, not the copy.
    let image = dev.image();
    fs.close().unwrap();
    image
}

/// Opens an image and uses whatever it holds; must return errors, never panic.
fn exercise(image: Vec<u8>) {
    let dev = from_image(image);
    let Ok(fs) = Fs::open(dev, &OpenOptions::default()) else {
        return;
    };
    let mut stack = vec!["/".to_string()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs.readdir(&dir) else {
            continue;
        };
        for e in entries {
            let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
            match e.kind {
                FileKind::Dir => stack.push(path),
                FileKind::File => {
                    if let Ok(f) = fs.open_file(&path, OpenFlags::create()) {
                        let mut buf = vec![0u8; 64 << 10];
                        let _ = f.pread(&mut buf, 0);
                        let _ = f.pwrite(b"more", 1);
                        let _ = f.fsync();
                    }
                }
                _ => {}
            }
        }
    }
    let _ = fs
        .open_file("/new", OpenFlags::create())
        .map(|f| f.pwrite(b"x", 0));
    let _ = fs.sync();
    let _ = fs.close();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    #[test]
    fn opening_a_damaged_pool_never_panics(
        flips in proptest::collection::vec((0usize..(2 << 20), 1u8..=255), 1..24),
        hot in proptest::collection::vec((0usize..(256 << 10), 1u8..=255), 0..8),
    ) {
        let mut image = sample_image();
        for (at, x) in flips.into_iter().chain(hot) {
            image[at] ^= x;
        }
        exercise(image);
    }
}

#[test]
fn opening_an_image_cut_short_or_zeroed_never_panics() {
    let image = sample_image();
    for blocks in [0usize, 1, 2, 3, 10, 60, 200] {
        let mut cut = image.clone();
        cut[blocks * 4096..].fill(0);
        exercise(cut);
    }
    for seed in 0..64u64 {
        // Whole-block garbage over the used area.
        let mut img = image.clone();
        let block = 2 + (seed as usize * 7) % 60;
        for (i, b) in img[block * 4096..(block + 1) * 4096].iter_mut().enumerate() {
            *b = (i as u64 ^ seed).wrapping_mul(0x9e37) as u8;
        }
        exercise(img);
    }
}

#[test]
fn damage_to_a_checkpoint_payload_before_the_tail_keeps_the_prefix_in_either_recovery_mode() {
    // Strict ordering: every fsync a checkpoint. A checkpoint's log is written ahead of earlier
    // payloads (format version 4), so a damaged payload with valid logs after it cannot be told
    // from one in flight at a crash: in either mode that checkpoint and every later one do not
    // count, and the one before is loaded.
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Strict, Barrier::EveryLog),
    )
    .unwrap();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 4096), 0).unwrap();
    f.fsync().unwrap();
    let mut payloads = Vec::new();
    for i in 0..3u64 {
        f.pwrite(&pattern(10 + i, 4096), 0).unwrap();
        f.fsync().unwrap();
        payloads.push(pattern(10 + i, 4096));
    }
    let mut image = dev.image();
    // Damage the second checkpoint's file data: valid logs follow it.
    let at = image
        .windows(4096)
        .step_by(4096)
        .position(|b| b == &payloads[1][..])
        .expect("the second checkpoint's payload is on storage");
    image[at * 4096 + 10] ^= 0xff;
    for recovery in [RecoveryMode::Strict, RecoveryMode::TolerateTail] {
        let options = OpenOptions {
            recovery,
            ..OpenOptions::default()
        };
        let fs2 = Fs::open(from_image(image.clone()), &options).unwrap();
        assert_eq!(
            read_all(&fs2, "/f"),
            payloads[0],
            "the checkpoint before the damage is loaded ({recovery:?})"
        );
        assert!(
            fs2.recovery_report().logs_skipped > 0,
            "{:?}",
            fs2.recovery_report()
        );
    }
}

#[test]
fn a_data_only_log_with_an_incomplete_payload_is_skipped_with_its_files_later_logs_only() {
    // Relaxed ordering: fsyncs without a namespace change write data-only logs, whose summaries
    // may reach the device before their payloads. One left incomplete (here: damaged) is skipped
    // with the later logs of its file; the other file's later log is replayed.
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    let g = fs.open_file("/g", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 4096), 0).unwrap();
    g.pwrite(&pattern(2, 4096), 0).unwrap();
    f.fsync().unwrap(); // a checkpoint (the creates)
    f.pwrite(&pattern(10, 4096), 0).unwrap();
    f.fsync().unwrap();
    f.pwrite(&pattern(11, 4096), 0).unwrap();
    f.fsync().unwrap(); // to be damaged
    g.pwrite(&pattern(20, 4096), 0).unwrap();
    g.fsync().unwrap(); // another file's: replayed
    f.pwrite(&pattern(12, 4096), 0).unwrap();
    f.fsync().unwrap(); // a later log of the damaged one's file: skipped
    let mut image = dev.image();
    let at = image
        .windows(4096)
        .step_by(4096)
        .position(|b| b == &pattern(11, 4096)[..])
        .expect("the log's payload is on storage");
    image[at * 4096 + 10] ^= 0xff;
    let strict = OpenOptions {
        recovery: RecoveryMode::Strict,
        ..OpenOptions::default()
    };
    let fs2 = Fs::open(from_image(image.clone()), &strict).unwrap();
    let report = fs2.recovery_report();
    assert_eq!(report.logs_skipped, 2, "{report:?}");
    assert_eq!(read_all(&fs2, "/f"), pattern(10, 4096));
    assert_eq!(read_all(&fs2, "/g"), pattern(20, 4096));
    drop(fs2);
    // The undamaged image replays all of them.
    let fs3 = Fs::open(from_image(dev.image()), &strict).unwrap();
    assert_eq!(fs3.recovery_report().logs_skipped, 0);
    assert_eq!(read_all(&fs3, "/f"), pattern(12, 4096));
    assert_eq!(read_all(&fs3, "/g"), pattern(20, 4096));
}

#[test]
fn symbolic_links_hard_links_and_attributes_work_and_survive_a_reopen() {
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let mut f = fs.open_file("/d/file", OpenFlags::create()).unwrap();
    f.write(b"data").unwrap();
    drop(f);
    fs.symlink("file", "/d/rel").unwrap();
    fs.symlink("/d", "/abs").unwrap();
    fs.symlink("loop2", "/loop1").unwrap();
    fs.symlink("loop1", "/loop2").unwrap();
    fs.link("/d/file", "/hard").unwrap();
    assert_eq!(read_all(&fs, "/d/rel"), b"data");
    assert_eq!(read_all(&fs, "/abs/rel"), b"data");
    assert_eq!(read_all(&fs, "/abs/../d/./file"), b"data");
    assert_eq!(read_all(&fs, "/hard"), b"data");
    assert_eq!(fs.stat("/hard").unwrap().nlink, 2);
    assert_eq!(fs.lstat("/d/rel").unwrap().kind, FileKind::Symlink);
    assert_eq!(fs.stat("/d/rel").unwrap().kind, FileKind::File);
    assert_eq!(fs.readlink("/abs").unwrap(), "/d");
    assert_eq!(fs.readlink("/d/file").unwrap_err().errno(), libc::EINVAL);
    assert_eq!(fs.stat("/loop1").unwrap_err().errno(), libc::ELOOP);
    assert_eq!(fs.link("/d", "/d2").unwrap_err().errno(), libc::EPERM);
    let kinds: Vec<(String, FileKind)> = fs
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("file".to_string(), FileKind::File),
            ("rel".to_string(), FileKind::Symlink)
        ]
    );
    // With a mount point, absolute targets under it resolve inside the pool; others do not.
    fs.symlink("/mnt/fast/d/file", "/via-mount").unwrap();
    fs.symlink("/etc/hostname", "/outside").unwrap();
    fs.set_mount_point(Some("/mnt/fast"));
    assert_eq!(read_all(&fs, "/via-mount"), b"data");
    assert_eq!(fs.stat("/outside").unwrap_err().errno(), libc::ENOENT);
    fs.set_mount_point(None);

    fs.set_attr(
        "/d/file",
        &SetAttr {
            mode: Some(0o640),
            uid: Some(1234),
            gid: Some(99),
            atime_ns: Some(1_000_000_007),
            mtime_ns: Some(2_000_000_009),
            touch: false,
        },
    )
    .unwrap();
    fs.lset_attr(
        "/d/rel",
        &SetAttr {
            mtime_ns: Some(5),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.unlink("/d/file").unwrap();
    assert_eq!(fs.stat("/hard").unwrap().nlink, 1);
    assert_eq!(fs.stat("/d/rel").unwrap_err().errno(), libc::ENOENT);
    fs.sync().unwrap();

    let back = reopen(&dev);
    let st = back.stat("/hard").unwrap();
    assert_eq!(
        (st.mode, st.uid, st.gid, st.atime_ns, st.mtime_ns, st.nlink),
        (0o640, 1234, 99, 1_000_000_007, 2_000_000_009, 1)
    );
    assert!(st.ctime_ns > st.mtime_ns);
    assert_eq!(read_all(&back, "/hard"), b"data");
    assert_eq!(back.readlink("/d/rel").unwrap(), "file");
    assert_eq!(back.lstat("/d/rel").unwrap().mtime_ns, 5);
    assert_eq!(back.readlink("/loop2").unwrap(), "loop1");
}

#[test]
fn reads_update_the_access_time_per_the_policy() {
    let dev = device(4 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    let mut f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.write(b"x").unwrap();
    let old = 1_000;
    let set = |t| {
        fs.set_attr(
            "/f",
            &SetAttr {
                atime_ns: Some(t),
                ..SetAttr::default()
            },
        )
        .unwrap()
    };
    fs.set_atime_policy(AtimePolicy::Never);
    set(old);
    f.pread(&mut [0u8; 1], 0).unwrap();
    assert_eq!(fs.stat("/f").unwrap().atime_ns, old);
    fs.set_atime_policy(AtimePolicy::Relatime);
    f.pread(&mut [0u8; 1], 0).unwrap();
    let first = fs.stat("/f").unwrap().atime_ns;
    assert!(
        first > old,
        "relatime updates an access time older than the change time"
    );
    // Now newer than mtime and ctime and not a day old: relatime leaves it.
    f.pread(&mut [0u8; 1], 0).unwrap();
    assert_eq!(fs.stat("/f").unwrap().atime_ns, first);
    fs.set_atime_policy(AtimePolicy::Strict);
    f.pread(&mut [0u8; 1], 0).unwrap();
    assert!(fs.stat("/f").unwrap().atime_ns >= first);
    drop(f);
    fs.sync().unwrap();
    assert!(reopen(&dev).stat("/f").unwrap().atime_ns >= first);
}

// ---------------------------------------------------------------------------------------------
// Retention, snapshots, views and the cleaner.

fn life_config(protection: Duration) -> Config {
    Config {
        protection_period: protection,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    }
}

fn write_file(fs: &Fs, path: &str, data: &[u8]) {
    let f = fs.open_file(path, OpenFlags::create()).unwrap();
    f.set_len(0).unwrap();
    f.pwrite(data, 0).unwrap();
    f.fsync().unwrap();
}

#[test]
fn a_snapshot_keeps_old_contents_readable_across_overwrites_reopen_and_crash() {
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let old = pattern(1, 300 << 10);
    write_file(&fs, "/d/f", &old);
    let snap = fs.snapshot(Some("before")).unwrap();
    // Overwrite, delete and rewrite many times: without the snapshot these blocks would be reused.
    for round in 0..30u64 {
        write_file(&fs, "/d/f", &pattern(100 + round, 300 << 10));
        write_file(&fs, "/g", &pattern(200 + round, 200 << 10));
        fs.unlink("/g").unwrap();
        fs.sync().unwrap();
    }
    let newest = pattern(129, 300 << 10);
    let list = fs.checkpoints().unwrap();
    let s = list
        .iter()
        .find(|c| c.number == snap)
        .expect("snapshot listed");
    assert!(s.snapshot);
    assert_eq!(s.name.as_deref(), Some("before"));
    assert!(
        s.pinned_bytes >= 300 << 10,
        "the snapshot alone pins its old file data: {s:?}"
    );
    // Protection period zero: only the snapshot and the newest checkpoint are retained.
    assert_eq!(list.len(), 2, "{list:?}");
    let view = fs.at(snap).unwrap();
    assert_eq!(view.read_file("/d/f").unwrap(), old);
    assert!(matches!(view.stat("/g"), Err(Error::NotFound(_))));
    assert_eq!(view.readdir("/").unwrap().len(), 1);
    drop(view);
    assert_eq!(read_all(&fs, "/d/f"), newest);
    let space = fs.space().unwrap();
    assert!(space.pinned_by_snapshots >= 300 << 10, "{space:?}");
    assert_eq!(
        space.live + space.pinned_by_snapshots + space.reclaimable + space.free,
        space.size
    );

    // A crash (the latest bytes, no close) and a clean reopen both keep the snapshot.
    let crashed = reopen(&dev);
    let list = crashed.checkpoints().unwrap();
    assert!(
        list.iter().any(|c| c.number == snap && c.snapshot),
        "{list:?}"
    );
    assert_eq!(crashed.at(snap).unwrap().read_file("/d/f").unwrap(), old);
    assert_eq!(read_all(&crashed, "/d/f"), newest);
    drop(crashed);
    fs.close().unwrap();
    let dev = Arc::new(SimDevice::from_image(dev.image()));
    let fs = Fs::open(dev.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(fs.at(snap).unwrap().read_file("/d/f").unwrap(), old);

    // Dropping it gives its blocks back.
    let before = fs.space().unwrap();
    fs.set_snapshot(snap, false).unwrap();
    assert!(fs.checkpoints().unwrap().iter().all(|c| c.number != snap));
    assert!(matches!(fs.at(snap), Err(Error::NotFound(_))));
    let after = fs.space().unwrap();
    assert!(
        after.pinned_by_snapshots < before.pinned_by_snapshots,
        "{before:?} -> {after:?}"
    );
    let gc = fs.gc(0.5).unwrap();
    assert!(gc.free_fraction_after >= 0.5, "{gc:?}");
    let fs2 = reopen(&dev);
    let list = fs2.checkpoints().unwrap();
    assert!(
        list.iter().all(|c| !c.snapshot),
        "{list:?} (dropped {snap})"
    );
    assert_eq!(read_all(&fs2, "/d/f"), newest);
}

#[test]
fn plain_checkpoints_are_kept_for_the_protection_period_and_released_after() {
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::from_secs(3600))).unwrap();
    let mut versions = Vec::new();
    for round in 0..5u64 {
        let data = pattern(round, 40 << 10);
        write_file(&fs, "/f", &data);
        fs.sync().unwrap();
        versions.push(data);
    }
    let list = fs.checkpoints().unwrap();
    assert!(list.len() >= 5, "{list:?}");
    assert!(list.iter().all(|c| !c.snapshot));
    // Every retained checkpoint reads as some version of the file, oldest to newest, and each
    // version written and synced is among them.
    let mut seen = Vec::new();
    for c in &list {
        let view = fs.at(c.number).unwrap();
        if let Ok(data) = view.read_file("/f") {
            let v = versions.iter().position(|v| *v == data);
            assert!(
                v.is_some() || data.is_empty(),
                "checkpoint {} holds garbage",
                c.number
            );
            if let Some(v) = v {
                seen.push(v);
            }
        }
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    for v in 0..versions.len() {
        assert!(
            seen.contains(&v),
            "version {v} not in any checkpoint: {seen:?}"
        );
    }
    // They survive a crash, found along the chain of roots.
    let crashed = reopen(&dev);
    let listed: Vec<u64> = crashed
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.number)
        .collect();
    for c in &list {
        assert!(listed.contains(&c.number), "{} lost: {listed:?}", c.number);
    }
    drop(crashed);
    // Shortening the protection period releases them at the next checkpoint.
    fs.set_protection_period(Duration::ZERO);
    write_file(&fs, "/f", &pattern(9, 4096));
    fs.sync().unwrap();
    let list = fs.checkpoints().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    let fs2 = reopen(&dev);
    assert_eq!(fs2.checkpoints().unwrap().len(), 1);
    assert_eq!(fs2.protection_period(), Duration::ZERO);
}

#[test]
fn on_a_stepped_clock_timed_refreshes_and_checkpoints_wait_for_it_not_for_the_wall_clock() {
    // A test on a stepped clock takes the same decisions however fast it runs: the superblock
    // refresh and the checkpoint due every so often are due by the pool's clock. They were due
    // by the wall clock, so a slower build (a debug one) took refreshes a faster one did not.
    let clock = Clock::stepped(1 << 40, Duration::ZERO);
    let every = Duration::from_millis(10);
    let config = Config {
        clock: clock.clone(),
        superblock_every: every,
        checkpoint_every: Some(every),
        superblock_every_bytes: 1 << 40,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    };
    let fs = Fs::format(device(8 << 20), &config).unwrap();
    let sealed = |fs: &Fs| fs.inner.lock_meta().refresh.sealed_state().0;
    let newest = |fs: &Fs| fs.inner.lock_meta().ckpt.newest();
    write_file(&fs, "/f", &pattern(1, 8192));
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    let overwrite = |seed: u64| {
        f.pwrite(&pattern(seed, 8192), 0).unwrap();
        f.fsync().unwrap();
    };
    overwrite(2);
    let before = (sealed(&fs), newest(&fs));
    // Many periods of the wall clock go by, and the background thread wakes in each; the
    // pool's clock stands still.
    std::thread::sleep(every * 10);
    overwrite(3);
    assert_eq!(
        (sealed(&fs), newest(&fs)),
        before,
        "a refresh or a checkpoint came due by the wall clock"
    );
    // The pool's clock passes the period: the next fsync refreshes.
    clock.advance(every * 2);
    overwrite(4);
    assert!(
        sealed(&fs) > before.0,
        "no refresh once the pool's clock passed superblock_every"
    );
    assert_eq!(read_all(&fs, "/f"), pattern(4, 8192));
}

#[test]
fn on_a_stepped_clock_plain_checkpoints_are_kept_until_it_passes_their_protection() {
    // Every time the engine records or measures against comes from the pool's clock: the
    // checkpoints' and files' times are the stepped clock's, and the protection period runs
    // out when that clock says so, not when the wall clock does.
    let start = 1i64 << 40;
    let clock = Clock::stepped(start, Duration::from_micros(1));
    let dev = device(8 << 20);
    let config = Config {
        clock: clock.clone(),
        ..life_config(Duration::from_secs(3600))
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    for round in 0..3u64 {
        write_file(&fs, "/f", &pattern(round, 40 << 10));
        fs.sync().unwrap();
    }
    let early = fs.checkpoints().unwrap();
    assert!(early.len() >= 3, "{early:?}");
    let now = clock.now_ns();
    assert!(
        early.iter().all(|c| c.time_ns >= start && c.time_ns < now),
        "{early:?}"
    );
    let st = fs.stat("/f").unwrap();
    assert!(st.mtime_ns >= start && st.mtime_ns < now, "{st:?}");
    // A second short of the period: every one is still kept.
    clock.advance(Duration::from_secs(3599));
    write_file(&fs, "/f", &pattern(7, 40 << 10));
    fs.sync().unwrap();
    let listed =
        |fs: &Fs| -> Vec<u64> { fs.checkpoints().unwrap().iter().map(|c| c.number).collect() };
    let kept = listed(&fs);
    for c in &early {
        assert!(
            kept.contains(&c.number),
            "{} released early: {kept:?}",
            c.number
        );
    }
    // Past it: the next checkpoint releases those written before, and keeps the younger.
    clock.advance(Duration::from_secs(2));
    write_file(&fs, "/f", &pattern(8, 40 << 10));
    fs.sync().unwrap();
    let late = listed(&fs);
    for c in &early {
        assert!(
            !late.contains(&c.number),
            "{} still kept: {late:?}",
            c.number
        );
    }
    let young = *kept.last().unwrap();
    assert!(late.contains(&young), "{young} released: {late:?}");
    // Reopened on the same clock, the same checkpoints are kept.
    let options = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    let reopened = Fs::open(from_image(dev.image()), &options).unwrap();
    let listed_again = listed(&reopened);
    for c in &late {
        assert!(listed_again.contains(c), "{c} lost: {listed_again:?}");
    }
}

#[test]
fn an_open_view_keeps_its_checkpoint_until_dropped() {
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    let old = pattern(5, 200 << 10);
    write_file(&fs, "/f", &old);
    fs.sync().unwrap();
    let n = fs.checkpoints().unwrap().last().unwrap().number;
    let view = fs.at(n).unwrap();
    for round in 0..40u64 {
        write_file(&fs, "/f", &pattern(50 + round, 200 << 10));
        fs.sync().unwrap();
        fs.gc(0.9).unwrap();
    }
    assert_eq!(view.read_file("/f").unwrap(), old);
    let mut f = view.open_file("/f").unwrap();
    let mut head = [0u8; 10];
    f.read(&mut head).unwrap();
    assert_eq!(&head[..], &old[..10]);
    drop(view);
    fs.sync().unwrap();
    assert!(fs.checkpoints().unwrap().iter().all(|c| c.number != n));
}

#[test]
fn the_cleaner_empties_partly_live_segments_and_everything_reads_back() {
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    let kept = half_live_files(&fs, 120, 20 << 10);
    let before = fs.space().unwrap();
    let report = fs.gc(0.9).unwrap();
    let after = fs.space().unwrap();
    assert!(report.segments_cleaned > 0, "{report:?}");
    assert!(report.blocks_copied > 0, "{report:?}");
    assert!(after.free > before.free, "{before:?} -> {after:?}");
    assert!(fs.counters().segments_cleaned >= report.segments_cleaned);
    {
        let m = fs.inner.lock_meta();
        assert_eq!(
            fs.inner.recount_live(&m),
            m.seg.live_counts(),
            "the usage table kept up"
        );
    }
    for (path, data) in &kept {
        assert_eq!(&read_all(&fs, path), data, "{path}");
    }
    let crashed = reopen(&dev);
    for (path, data) in &kept {
        assert_eq!(&read_all(&crashed, path), data, "{path} after a crash");
    }
}

#[test]
fn the_cleaner_skips_old_data_of_a_reused_inode_number_and_copies_what_is_still_mapped() {
    // A victim's data descriptors name files by number. `/old`'s number goes to `/new`, so its
    // descriptors name a file that exists but maps none of those blocks; `/half` has its first
    // two thirds written again, so a descriptor may begin with dead blocks and end with live
    // ones. Cleaning everything it can must keep exactly the blocks still mapped.
    for copies in [true, false] {
        let dev = device(8 << 20);
        dev.set_writes_are_copies(copies);
        let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
        let half_before = pattern(1, 24 * BLOCK);
        write_file(&fs, "/old", &pattern(2, 24 * BLOCK));
        write_file(&fs, "/half", &half_before);
        fs.sync().unwrap();
        let old_ino = fs.stat("/old").unwrap().ino;
        fs.unlink("/old").unwrap();
        fs.sync().unwrap();
        let new_data = pattern(3, 20 * BLOCK);
        write_file(&fs, "/new", &new_data);
        assert_eq!(
            fs.stat("/new").unwrap().ino,
            old_ino,
            "the number is reused"
        );
        let mut half = half_before.clone();
        let overwrite = pattern(4, 16 * BLOCK);
        half[..16 * BLOCK].copy_from_slice(&overwrite);
        let f = fs.open_file("/half", OpenFlags::create()).unwrap();
        f.pwrite(&overwrite, 0).unwrap();
        drop(f);
        // Filler written and deleted, so the segments above are worth cleaning.
        let filler = half_live_files(&fs, 40, 8 * BLOCK);
        let half_ino = fs.stat("/half").unwrap().ino;
        let half_map = |fs: &Fs| {
            let m = fs.inner.lock_meta();
            let blocks = m.inodes[&half_ino].lock().map().blocks.clone();
            blocks
        };
        let tail_before = half_map(&fs)[16..].to_vec();
        let report = fs.gc(0.95).unwrap();
        assert!(report.segments_cleaned > 0, "copies {copies}: {report:?}");
        // The old tail's segments are mostly dead (the head written again beside it): victims,
        // whose live blocks the pass copies out.
        let tail_after = half_map(&fs)[16..].to_vec();
        assert!(
            tail_before.iter().zip(&tail_after).all(|(b, a)| b != a),
            "copies {copies}: the live tail stayed where it was: {tail_before:?} -> {tail_after:?}"
        );
        assert!(report.blocks_copied > 0, "copies {copies}: {report:?}");
        {
            let m = fs.inner.lock_meta();
            assert_eq!(
                fs.inner.recount_live(&m),
                m.seg.live_counts(),
                "copies {copies}"
            );
        }
        // Reusing the freed segments: anything the pass dropped that was live reads back wrong.
        for i in 0..40 {
            write_file(&fs, &format!("/g{i}"), &pattern(100 + i, 8 * BLOCK));
        }
        fs.sync().unwrap();
        for (path, data) in [("/new", &new_data), ("/half", &half)]
            .into_iter()
            .chain(filler.iter().map(|(p, d)| (p.as_str(), d)))
        {
            assert_eq!(&read_all(&fs, path), data, "copies {copies}: {path}");
        }
        let (image, _) = checked_clean(&dev, "after cleaning");
        let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
        assert_eq!(read_all(&crashed, "/new"), new_data, "copies {copies}");
        assert_eq!(read_all(&crashed, "/half"), half, "copies {copies}");
    }
}

#[test]
fn the_cleaner_moves_symbolic_links_whose_target_is_a_data_block() {
    // A symbolic link's target is its data. On a device whose reads are copies the cleaner
    // reads a victim a block at a time, and only the blocks whose bytes it carries: a link's
    // block that it did not read reached the move as no bytes at all.
    for copies in [true, false] {
        let dev = device(8 << 20);
        dev.set_writes_are_copies(copies);
        let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
        let target = |i: u64| format!("/{}/{i}", "t".repeat(1000 + i as usize));
        for i in 0..24 {
            fs.symlink(&target(i), &format!("/l{i}")).unwrap();
            write_file(&fs, &format!("/x{i}"), &pattern(i, 6 * BLOCK));
        }
        fs.sync().unwrap();
        for i in 0..24 {
            fs.unlink(&format!("/x{i}")).unwrap();
        }
        fs.sync().unwrap();
        let report = fs.gc(0.95).unwrap();
        assert!(report.segments_cleaned > 0, "copies {copies}: {report:?}");
        assert!(report.blocks_copied > 0, "copies {copies}: {report:?}");
        // Reusing the freed segments: a link the pass dropped reads back wrong.
        for i in 0..24 {
            write_file(&fs, &format!("/y{i}"), &pattern(50 + i, 6 * BLOCK));
        }
        fs.sync().unwrap();
        for i in 0..24 {
            assert_eq!(
                fs.readlink(&format!("/l{i}")).unwrap(),
                target(i),
                "copies {copies}"
            );
        }
        let (image, _) = checked_clean(&dev, "after cleaning links");
        let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
        for i in 0..24 {
            assert_eq!(crashed.readlink(&format!("/l{i}")).unwrap(), target(i));
        }
    }
}

#[test]
fn the_metadata_locks_hold_is_split_into_checkpoints_cleaning_and_sealing() {
    let fs = Fs::format(device(8 << 20), &life_config(Duration::ZERO)).unwrap();
    fs.inner.stop_background();
    let start = fs.counters();
    // Synced files (checkpoints), half of them deleted and cleaned away, and a file larger than
    // the write-behind size written without a sync (sealed as data-only logs).
    half_live_files(&fs, 120, 20 << 10);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    big.pwrite(&pattern(7, 3 << 19), 0).unwrap();
    let report = fs.gc(0.9).unwrap();
    assert!(report.segments_cleaned > 0, "{report:?}");
    let c = fs.counters();
    assert!(c.meta_checkpoint_ns > start.meta_checkpoint_ns, "{c:?}");
    assert!(c.meta_cleaning_ns > start.meta_cleaning_ns, "{c:?}");
    assert!(c.meta_sealing_ns > start.meta_sealing_ns, "{c:?}");
    assert!(
        c.meta_checkpoint_ns + c.meta_cleaning_ns + c.meta_sealing_ns <= c.meta_held_ns,
        "{c:?}"
    );
}

#[test]
fn a_section_nested_in_another_is_counted_once_as_its_own() {
    let fs = Fs::format(device(8 << 20), &life_config(Duration::ZERO)).unwrap();
    fs.inner.stop_background();
    let inner = &fs.inner;
    let before = fs.counters();
    let spin = |d: Duration| {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    };
    let outer = std::time::Instant::now();
    {
        let mut m = inner.lock_meta();
        inner.in_section(&mut m, crate::tbfs::state::Section::Cleaning, |m| {
            spin(Duration::from_millis(1));
            inner.in_section(m, crate::tbfs::state::Section::Checkpoint, |_| {
                spin(Duration::from_millis(3))
            });
            spin(Duration::from_millis(1));
        });
        assert_eq!(m.sections_open(), 0, "a section left open");
    }
    let elapsed = outer.elapsed().as_nanos() as u64;
    let c = fs.counters();
    let checkpoint = c.meta_checkpoint_ns - before.meta_checkpoint_ns;
    let cleaning = c.meta_cleaning_ns - before.meta_cleaning_ns;
    assert!(checkpoint >= 3_000_000, "{checkpoint} ns");
    assert!(cleaning >= 2_000_000, "{cleaning} ns");
    // Counted inclusively, the cleaning would hold the checkpoint's 3 ms as well, and the two
    // would add up to more than the time the whole took.
    assert!(
        checkpoint + cleaning <= elapsed,
        "{checkpoint} + {cleaning} > {elapsed} ns"
    );
    assert_eq!(c.meta_sealing_ns, before.meta_sealing_ns);
}

/// Writes `count` files of `len` bytes, one after the other, then deletes every other one and
/// syncs: the segments end up half live. Returns the kept files' paths and contents.
fn half_live_files(fs: &Fs, count: u64, len: usize) -> Vec<(String, Vec<u8>)> {
    let mut kept = Vec::new();
    for i in 0..count {
        let data = pattern(i, len);
        write_file(fs, &format!("/f{i}"), &data);
        if i % 2 == 0 {
            kept.push((format!("/f{i}"), data));
        }
    }
    for i in (1..count).step_by(2) {
        fs.unlink(&format!("/f{i}")).unwrap();
    }
    fs.sync().unwrap();
    kept
}

/// A 24 MiB pool (1 MiB segments, an 8 MiB write buffer, no background cleaner) whose
/// segments are half live and whose free space is less than the write buffer: 300 files of
/// 64 KiB written, every other one deleted. Returns the pool, the kept files, and a write size
/// over the free space and under the write buffer that the dead blocks can hold.
fn half_dead_pool_short_of_space(dev: &Arc<SimDevice>) -> (Fs, Vec<(String, Vec<u8>)>, usize) {
    let fs = Fs::format(dev.clone(), &large_file_config(8 << 20)).unwrap();
    let kept = half_live_files(&fs, 300, 64 << 10);
    let space = fs.space().unwrap();
    let over = (space.free + (512 << 10)).next_multiple_of(64 << 10);
    assert!(over < 8 << 20, "{space:?}");
    // Cleaning can give back what the free space lacks.
    assert!(space.reclaimable > over - space.free, "{space:?}");
    (fs, kept, over as usize)
}

/// Checks that `/new` holds `data`, that the kept files read back, and that all of it survives a
/// crash.
fn check_written_after_cleaning(dev: &SimDevice, fs: &Fs, kept: &[(String, Vec<u8>)], data: &[u8]) {
    assert_eq!(read_all(fs, "/new"), data);
    let crashed = reopen(dev);
    assert_eq!(read_all(&crashed, "/new"), data, "after a crash");
    for (path, want) in kept {
        assert_eq!(&read_all(&crashed, path), want, "{path} after a crash");
    }
}

#[test]
fn writers_buffer_less_while_space_is_short_so_a_cleaning_checkpoint_has_room() {
    // While a namespace change is pending (the new file), the buffer is limited as if every
    // cleaning pass were a checkpoint carrying all buffered data (as it was before passes could
    // run light whatever is pending). A full 8 MiB buffer would not fit the free space.
    let dev = device(24 << 20);
    let (fs, kept, over) = half_dead_pool_short_of_space(&dev);
    // Whatever cleaning carries, writers buffer at most half of what is free: what they buffer
    // always has room to go.
    let free = fs.space().unwrap().free;
    let light_limit = fs.inner.buffer_limit();
    assert!(
        light_limit <= free / 2,
        "{light_limit} buffered of {free} free"
    );
    let f = fs.open_file("/new", OpenFlags::create()).unwrap();
    assert!(
        fs.inner.buffer_limit() < light_limit,
        "the buffer limit follows the free space beyond a full pass's room: {}",
        fs.inner.buffer_limit()
    );
    let data = pattern(999, over);
    for (i, piece) in data.chunks(64 << 10).enumerate() {
        f.pwrite(piece, (i * (64 << 10)) as u64)
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
        assert!(
            fs.inner.buffered_bytes() <= (1 << 20) + (64 << 10),
            "write {i}: {} bytes buffered",
            fs.inner.buffered_bytes()
        );
    }
    f.fsync().unwrap();
    check_written_after_cleaning(&dev, &fs, &kept, &data);
}

#[test]
fn a_write_larger_than_the_free_space_cleans_before_it_is_buffered() {
    // One write under the 8 MiB buffer but over the free space, in a new file.
    let dev = device(24 << 20);
    let (fs, kept, over) = half_dead_pool_short_of_space(&dev);
    let f = fs.open_file("/new", OpenFlags::create()).unwrap();
    let data = pattern(999, over);
    f.pwrite(&data, 0).unwrap();
    f.fsync().unwrap();
    check_written_after_cleaning(&dev, &fs, &kept, &data);
}

#[test]
fn gc_refuses_a_target_outside_zero_to_one_and_snapshot_names_are_checked() {
    let fs = Fs::format(device(4 << 20), &life_config(Duration::ZERO)).unwrap();
    assert!(matches!(fs.gc(1.5), Err(Error::Invalid(_))));
    assert!(matches!(fs.snapshot(Some("")), Err(Error::Invalid(_))));
    assert!(matches!(
        fs.snapshot(Some(&"x".repeat(65))),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.set_snapshot(999, true),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(fs.at(999), Err(Error::NotFound(_))));
}

#[test]
fn a_long_protection_period_gives_way_when_writers_need_the_space() {
    let dev = device(4 << 20);
    let config = Config {
        ordering: Ordering::Strict,
        ..life_config(Duration::from_secs(3600))
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let mut flags = OpenFlags::create();
    flags.sync = SyncMode::Full;
    let f = fs.open_file("/f", flags).unwrap();
    let mut model = vec![0u8; 256 << 10];
    f.pwrite(&model, 0).unwrap();
    // Every 4 KiB O_SYNC write is a checkpoint, all protected for an hour: the pool (4 MiB) is
    // written over many times, so protection must yield rather than the writer fail.
    for i in 0..3000u64 {
        let at = (i * 7919 % 64) * 4096;
        let data = pattern(i, 4096);
        f.pwrite(&data, at)
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
        model[at as usize..at as usize + 4096].copy_from_slice(&data);
    }
    assert!(fs.counters().protection_released > 0);
    assert_eq!(read_all(&fs, "/f"), model);
    drop(f);
    assert_eq!(read_all(&reopen(&dev), "/f"), model);
}

/// Checkpoint `n` can be neither opened as a view nor made a snapshot: data it named was
/// overwritten without a pin.
fn assert_refused_as_overwritten(fs: &Fs, n: u64) {
    for err in [fs.at(n).err(), fs.set_snapshot(n, true).err()] {
        match err {
            Some(Error::NotFound(why)) => assert!(why.contains("overwritten"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn the_newest_checkpoint_is_not_offered_once_a_data_only_log_rewrote_its_blocks() {
    // No protection period: a block the newest checkpoint names, rewritten by a data-only log,
    // is not pinned (its space may be reused before the next checkpoint), so that checkpoint
    // cannot be read or kept as it was until a new one is written.
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    write_file(&fs, "/f", &pattern(1, 64 << 10));
    fs.sync().unwrap();
    let n = fs.checkpoints().unwrap().last().unwrap().number;
    assert!(fs.at(n).is_ok(), "nothing rewritten yet");
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(2, 4096), 0).unwrap();
    f.fdatasync().unwrap();
    assert_eq!(
        fs.checkpoints().unwrap().last().unwrap().number,
        n,
        "fdatasync of an overwrite wrote a data-only log, not a checkpoint"
    );
    assert_refused_as_overwritten(&fs, n);
    // A snapshot made now is a new checkpoint, and readable.
    let s = fs.snapshot(None).unwrap();
    assert!(s > n);
    let mut want = pattern(1, 64 << 10);
    want[..4096].copy_from_slice(&pattern(2, 4096));
    assert_eq!(fs.at(s).unwrap().read_file("/f").unwrap(), want);

    // With a protection period the old block is pinned instead, and the checkpoint stays whole.
    let dev = device(8 << 20);
    let fs = Fs::format(dev, &life_config(Duration::from_secs(3600))).unwrap();
    write_file(&fs, "/f", &pattern(1, 64 << 10));
    fs.sync().unwrap();
    let n = fs.checkpoints().unwrap().last().unwrap().number;
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(2, 4096), 0).unwrap();
    f.fdatasync().unwrap();
    assert_eq!(
        fs.at(n).unwrap().read_file("/f").unwrap(),
        pattern(1, 64 << 10)
    );
}

#[test]
fn without_protection_a_deleted_file_pins_nothing_and_the_newest_checkpoint_is_refused() {
    // A file the newest checkpoint names is deleted. With no protection period only that
    // checkpoint could reference its blocks and nothing keeps it: the blocks are not pinned
    // (the segments' death times hold them until a later checkpoint is durable), and the
    // checkpoint is no longer offered whole.
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    write_file(&fs, "/f", &pattern(1, 64 << 10));
    write_file(&fs, "/g", &pattern(2, 8 << 10));
    fs.sync().unwrap();
    let n = fs.checkpoints().unwrap().last().unwrap().number;
    fs.unlink("/f").unwrap();
    assert!(
        fs.inner.lock_meta().life.pins().is_empty(),
        "the deleted file's blocks were pinned"
    );
    assert_refused_as_overwritten(&fs, n);
    // Power lost before the next checkpoint: the pool is as that checkpoint left it.
    let crashed = Fs::open(from_image(dev.durable_image()), &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&crashed, "/f"), pattern(1, 64 << 10));
    // Space written after the deletion never lands on the deleted file's blocks while the
    // durable checkpoint still names them.
    for i in 0..40 {
        write_file(&fs, &format!("/n{i}"), &pattern(10 + i, 64 << 10));
        let crashed = Fs::open(from_image(dev.durable_image()), &OpenOptions::default()).unwrap();
        if crashed.stat("/f").is_ok() {
            assert_eq!(
                read_all(&crashed, "/f"),
                pattern(1, 64 << 10),
                "after {i} files"
            );
        }
        assert_eq!(
            read_all(&crashed, "/g"),
            pattern(2, 8 << 10),
            "after {i} files"
        );
    }
    let s = fs.snapshot(None).unwrap();
    assert!(s > n);
    assert!(fs.at(s).unwrap().read_file("/f").is_err());

    // With a protection period the blocks are pinned, and the checkpoint stays readable.
    let fs = Fs::format(device(8 << 20), &life_config(Duration::from_secs(3600))).unwrap();
    write_file(&fs, "/f", &pattern(1, 64 << 10));
    fs.sync().unwrap();
    let n = fs.checkpoints().unwrap().last().unwrap().number;
    fs.unlink("/f").unwrap();
    // Its 16 data blocks and its block-map nodes.
    assert!(fs.inner.lock_meta().life.pins().len() >= 16);
    assert_eq!(
        fs.at(n).unwrap().read_file("/f").unwrap(),
        pattern(1, 64 << 10)
    );
}

#[test]
fn a_superblock_due_right_after_a_checkpoint_names_it_instead_of_writing_another() {
    let dev = device(16 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let a = fs.open_file("/a", OpenFlags::create()).unwrap();
    let b = fs.open_file("/b", OpenFlags::create()).unwrap();
    a.pwrite(&pattern(1, 300 << 10), 0).unwrap();
    b.pwrite(&pattern(2, 4096), 0).unwrap();
    {
        let mut m = fs.inner.lock_meta();
        fs.inner.commit_checkpoint(&mut m).unwrap();
        m.unlock_and_write().unwrap();
    }
    // Another writer fills the buffer again before the superblock, which is now due (the
    // checkpoint alone wrote more than the 256 KiB interval).
    b.pwrite(&pattern(3, 4096), 0).unwrap();
    let before = fs.counters();
    {
        let mut m = fs.inner.lock_meta();
        let (generation, bytes_since) = m.refresh.sealed_state();
        assert!(bytes_since >= 256 << 10);
        fs.inner.maybe_refresh(&mut m).unwrap();
        assert_eq!(
            m.refresh.sealed_state().0,
            generation + 1,
            "a superblock was sealed"
        );
        m.unlock_and_write().unwrap();
    }
    assert_eq!(
        fs.counters().checkpoints,
        before.checkpoints,
        "nothing was logged since the checkpoint: the superblock names it"
    );
    // A crash now recovers the checkpoint; the buffered write was never logged.
    let crashed = Fs::open(from_image(dev.durable_image()), &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&crashed, "/a"), pattern(1, 300 << 10));
    assert_eq!(read_all(&crashed, "/b"), pattern(2, 4096));

    // Logs written after the newest checkpoint are named by a new one: the data-only log of
    // this fdatasync passes the interval, and its refresh writes a checkpoint.
    b.fdatasync().unwrap();
    let before = fs.counters();
    a.pwrite(&pattern(4, 300 << 10), 0).unwrap();
    a.fdatasync().unwrap();
    // The superblock the refresh sealed is left to whichever thread writes logs next (the
    // background one here): write what is queued, so the count does not race it.
    fs.inner.write_logs_until(u64::MAX).unwrap();
    let after = fs.counters();
    assert!(after.checkpoints > before.checkpoints);
    assert!(after.superblock_writes > before.superblock_writes);
    let crashed = Fs::open(from_image(dev.durable_image()), &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&crashed, "/a"), pattern(4, 300 << 10));
    assert_eq!(read_all(&crashed, "/b"), pattern(3, 4096));
}

#[test]
fn waiters_lend_their_io_priority_except_on_a_memory_pool() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    assert!(!fs.inner.inheritance().is_inert() && !fs.inner.logs.inheritance().is_inert());
    drop(fs);
    // The same pool as memory: its commits are copies, and nothing has an I/O priority.
    dev.set_writes_are_copies(true);
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    assert!(fs.inner.inheritance().is_inert() && fs.inner.logs.inheritance().is_inert());
    let _hold = fs.inner.inheritance().hold();
    assert!(
        !crate::sched::inherit::is_holding(),
        "a holder of inert work is not registered"
    );
}

#[test]
fn logs_are_written_after_the_metadata_lock_is_released() {
    let dev = device(16 << 20);
    // The 300 KB fsync passes the superblock's 256 KiB: the refresh is sealed too, and written
    // by the log writer, not under `meta`.
    let cfg = small_config(Ordering::Relaxed, Barrier::EveryLog);
    let fs = Fs::format(dev.clone(), &cfg).unwrap();
    let superblocks = fs.counters().superblock_writes;
    let data = pattern(7, 300_000);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let synced = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (fs, data, synced) = (&fs, &data, &synced);
        // Stands for a log writer busy with a slow device: holds the log writer until told.
        s.spawn(move || {
            let w = fs.inner.logs.lock_writer();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(w);
        });
        held_rx.recv().unwrap();
        let writer = s.spawn(move || {
            let f = fs.open_file("/a", OpenFlags::create()).unwrap();
            f.pwrite(data, 0).unwrap();
            f.fsync().unwrap();
            synced.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        // The fsync's logs are sealed and queued while the log writer is busy...
        while fs.inner.logs.queue_is_empty() {
            std::thread::yield_now();
        }
        // ...and meanwhile the namespace stays usable: `meta` is not held across the write.
        fs.mkdir("/d", 0o755).unwrap();
        assert_eq!(fs.stat("/a").unwrap().size, data.len() as u64);
        assert_eq!(
            read_all(fs, "/a"),
            *data,
            "buffered data reads back before it is written"
        );
        assert!(
            !synced.load(std::sync::atomic::Ordering::SeqCst),
            "fsync returned before its logs were written"
        );
        go_tx.send(()).unwrap();
        writer.join().unwrap();
    });
    assert!(synced.load(std::sync::atomic::Ordering::SeqCst));
    // The superblock follows (here, or from the background thread).
    fs.inner.write_logs_until(u64::MAX).unwrap();
    assert!(
        fs.counters().superblock_writes > superblocks,
        "{:?}",
        fs.counters()
    );
    // What fsync acknowledged survives a crash right after it.
    let back = reopen(&dev);
    assert_eq!(read_all(&back, "/a"), data);
}

#[test]
fn with_the_background_cleaner_a_small_write_leaves_cleaning_to_it_and_a_large_one_cleans() {
    let cfg = Config {
        background_gc: true,
        // The background thread never finds cleaning worth doing here: the state stays put.
        gc_free_percent: 0,
        ..small_config(Ordering::Relaxed, Barrier::Superblock)
    };
    let fs = Fs::format(device(4 << 20), &cfg).unwrap();
    let f = fs.open_file("/hot", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 64 << 10), 0).unwrap();
    f.fsync().unwrap();
    let cold = fs.open_file("/cold", OpenFlags::create()).unwrap();
    // Append to one file and overwrite a block of another, synced each time, until free space is
    // under the low-water mark: segments hold live and dead blocks, so there is something to
    // clean and no flush alone frees them.
    let inner = &fs.inner;
    let mut i = 0u64;
    let (low_water, reserve) = loop {
        {
            let m = inner.lock_meta();
            let (lw, reserve) = (inner.low_water(&m), inner.reserve_blocks());
            if inner.free_blocks(&m) < 1 + 1 + 4 + reserve + lw {
                break (lw, reserve);
            }
        }
        f.pwrite(&pattern(i, 4096), (i % 16) * 4096).unwrap();
        f.fsync().unwrap();
        cold.append(&pattern(i + 1, 4096)).unwrap();
        cold.fsync().unwrap();
        i += 1;
        assert!(i < 10_000, "the pool never filled");
    };
    let mut m = inner.lock_meta();
    let free = inner.free_blocks(&m);
    assert!(
        free >= 1 + 1 + 4 + reserve + low_water / 2,
        "free {free} fell below half the low-water mark {low_water}"
    );
    let passes = m.cleaning.passes();
    inner.ensure_space(&mut m, 1).unwrap();
    assert_eq!(m.cleaning.passes(), passes, "a one-block write cleaned");
    let large = low_water / 4 + 1;
    inner.ensure_space(&mut m, large).unwrap();
    assert!(
        m.cleaning.passes() > passes,
        "a {large}-block write under the low-water mark did not clean"
    );
}

/// A device that, once armed, stops the first read of `len` bytes or the first flush until the
/// test lets it go: stands for a slow device under the background cleaner.
#[derive(Debug)]
struct GatedDevice {
    inner: Arc<SimDevice>,
    /// The read size to stop (a segment), and whether flushes stop.
    armed: std::sync::Mutex<(Option<usize>, bool)>,
    stopped: std::sync::Mutex<std::sync::mpsc::Sender<&'static str>>,
    resume: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl GatedDevice {
    fn stop(&self, what: &'static str) {
        self.stopped.lock().unwrap().send(what).unwrap();
        self.resume.lock().unwrap().recv().unwrap();
    }
}

impl Device for GatedDevice {
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let hit = {
            let mut armed = self.armed.lock().unwrap();
            let hit = armed.0 == Some(buf.len());
            if hit {
                armed.0 = None;
            }
            hit
        };
        if hit {
            self.stop("read");
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        let hit = std::mem::take(&mut self.armed.lock().unwrap().1);
        if hit {
            self.stop("flush");
        }
        self.inner.flush()
    }
}

/// A device of `len` bytes that stops when armed (`armed`: a read of that size, the next
/// flush) until `resume` is sent; `stopped` says which.
fn flush_gated_device(
    len: u64,
) -> (
    Arc<SimDevice>,
    Arc<GatedDevice>,
    std::sync::mpsc::Receiver<&'static str>,
    std::sync::mpsc::Sender<()>,
) {
    let sim = device(len);
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    let gated = Arc::new(GatedDevice {
        inner: sim.clone(),
        armed: std::sync::Mutex::new((None, false)),
        stopped: std::sync::Mutex::new(stopped_tx),
        resume: std::sync::Mutex::new(resume_rx),
    });
    (sim, gated, stopped_rx, resume_tx)
}

#[test]
fn a_sync_sealed_behind_a_superblock_refresh_does_not_wait_for_its_flushes() {
    let (sim, gated, stopped_rx, resume_tx) = flush_gated_device(8 << 20);
    // Relaxed `fsync`s write data-only logs, not flushed under this policy: a device flush is
    // the refresh's alone.
    let cfg = small_config(Ordering::Relaxed, Barrier::EveryCheckpoint);
    let fs = Fs::format(gated.clone(), &cfg).unwrap();
    let a = fs.open_file("/a", OpenFlags::create()).unwrap();
    let b = fs.open_file("/b", OpenFlags::create()).unwrap();
    a.pwrite(b"a", 0).unwrap();
    b.pwrite(b"b", 0).unwrap();
    fs.sync().unwrap();
    let superblocks = fs.counters().superblock_writes;
    let big = pattern(5, 300_000);
    let small = pattern(6, 4096);
    gated.armed.lock().unwrap().1 = true;
    std::thread::scope(|s| {
        // Past the 256 KiB interval: the sync seals a superblock refresh behind its log.
        let refresh = s.spawn(|| {
            a.pwrite(&big, 0).unwrap();
            a.fsync().unwrap();
        });
        // Whoever writes the refresh is now in a device flush for it.
        assert_eq!(stopped_rx.recv().unwrap(), "flush");
        let (finished, _, synced) = run_while_stopped(s, &sim, &resume_tx, || {
            b.pwrite(&small, 0).unwrap();
            b.fsync().unwrap();
        });
        assert!(
            finished,
            "a data-only sync sealed after the refresh waited for its flush"
        );
        synced.join().unwrap();
        refresh.join().unwrap();
    });
    fs.inner.write_logs_until(u64::MAX).unwrap();
    assert!(
        fs.counters().superblock_writes > superblocks,
        "the refresh's superblock was not written: {:?}",
        fs.counters()
    );
    let (image, _) = checked_clean(&sim, "after the refresh");
    let fs2 = Fs::open(image, &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&fs2, "/a"), big);
    assert_eq!(read_all(&fs2, "/b"), small);
}

#[test]
fn the_background_cleaner_reads_its_victims_and_flushes_without_holding_the_pool() {
    background_pass_without_the_pool(true);
}

#[test]
fn a_background_pass_that_finds_a_namespace_change_does_no_device_io_holding_the_pool() {
    // The change made during the read is the pass's to checkpoint first (unless the checkpoint
    // thread gets there before it). Its checkpoint then changes which victims a pass would
    // pick, and its superblock waits to be written: the pass cleans only what it read, and
    // writes that superblock after it lets the pool go, flushing then. So does a pass whose
    // victims hold live metadata, which it checkpoints for.
    background_pass_without_the_pool(false);
}

/// A background pass on a device that stops at the pass's read of its victims, and then at
/// the next flush: the namespace and the writers go on while it is stopped. With
/// `checkpoint_during_read`, the test checkpoints its own changes during the read, so the pass
/// cleans what it read (and must have cleaned something). A stepped clock gives the history's
/// segments the same ages on every run, so the pass picks the same victims.
fn background_pass_without_the_pool(checkpoint_during_read: bool) {
    let (sim, gated, stopped_rx, resume_tx) = flush_gated_device(4 << 20);
    let cfg = Config {
        // Called by hand below; the pass cleans while less than 60 % is free.
        background_gc: false,
        gc_free_percent: 60,
        clock: Clock::stepped(1 << 40, Duration::from_micros(10)),
        ..small_config(Ordering::Relaxed, Barrier::Superblock)
    };
    let fs = Fs::format(gated.clone(), &cfg).unwrap();
    // Overwrite blocks of one file among appends to another: segments of live and dead blocks.
    let expect_cold = hot_and_cold_history(&fs);
    let hot = fs.open_file("/hot", OpenFlags::create()).unwrap();
    let segment = cfg.segment_bytes as usize;
    let cleaned = fs.counters().segments_cleaned;
    gated.armed.lock().unwrap().0 = Some(segment);
    std::thread::scope(|s| {
        let inner = &fs.inner;
        let cleaner = s.spawn(move || inner.background_clean());
        // What the test does while the device is stopped must finish without the device: a
        // pass holding `meta` across its I/O would leave it waiting (then the device is let go
        // and the test fails instead of hanging).
        let unblocked = |what: &str, work: &(dyn Fn() + Sync)| {
            let finished = std::thread::scope(|t| {
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                t.spawn(move || {
                    work();
                    let _ = done_tx.send(());
                });
                let finished = done_rx.recv_timeout(Duration::from_secs(60)).is_ok();
                if !finished {
                    resume_tx.send(()).unwrap();
                }
                finished
            });
            assert!(
                finished,
                "{what} waited for the background cleaner's device I/O"
            );
        };
        assert_eq!(stopped_rx.recv().unwrap(), "read");
        unblocked("the namespace, during the read", &|| {
            // The victims being read are not reusable meanwhile...
            let m = inner.lock_meta();
            assert!(!m.bg_clean.reading.is_empty());
            for &v in &m.bg_clean.reading {
                assert!(!inner.segment_free(&m, v), "segment {v} is being read");
            }
            drop(m);
            // ...and the namespace and the writers go on.
            fs.mkdir("/during-read", 0o755).unwrap();
            hot.pwrite(&pattern(7, 4096), 0).unwrap();
            hot.fsync().unwrap();
            if checkpoint_during_read {
                fs.sync().unwrap();
            }
        });
        gated.armed.lock().unwrap().1 = true;
        resume_tx.send(()).unwrap();
        // The flush that makes the emptied segments reusable (or writes the pass's superblock)
        // runs without `meta` too. A pass that cleaned nothing and sealed nothing flushes
        // nothing: then the cleaner finishes without stopping.
        let stopped = loop {
            match stopped_rx.recv_timeout(Duration::from_millis(10)) {
                Ok(what) => break Some(what),
                Err(_) if cleaner.is_finished() => break None,
                Err(_) => {}
            }
        };
        if checkpoint_during_read || stopped.is_some() {
            assert_eq!(stopped, Some("flush"));
            // The namespace is read, under `meta`. Not changed: a new name's space check in a
            // pool below its writers' mark (this one) waits for what is in flight, the
            // superblock the pass handed off included, as it would for any thread's; that
            // wait is the check's own, not the pass's hold of the pool.
            unblocked("the namespace, during the flush", &|| {
                assert!(inner.lock_meta().bg_clean.reading.is_empty());
                assert!(fs.stat("/during-read").is_ok());
                let names = fs.readdir("/").unwrap();
                assert!(names.iter().any(|e| e.name == "during-read"), "{names:?}");
            });
            resume_tx.send(()).unwrap();
        }
        fs.mkdir("/during-flush", 0o755).unwrap();
        cleaner.join().unwrap().unwrap();
    });
    gated.armed.lock().unwrap().1 = false;
    if checkpoint_during_read {
        assert!(
            fs.counters().segments_cleaned > cleaned,
            "{:?}",
            fs.counters()
        );
    }
    fs.sync().unwrap();
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/cold"), expect_cold);
    assert_eq!(read_all(&back, "/hot")[..4096], pattern(7, 4096)[..]);
    assert!(back.stat("/during-read").is_ok() && back.stat("/during-flush").is_ok());
}

#[test]
fn a_buffer_already_in_a_sealed_log_is_not_sealed_again_and_a_sync_waits_for_that_log() {
    let sim = device(16 << 20);
    let fs = Fs::format(
        sim.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let f = fs.open_file("/a", OpenFlags::create()).unwrap();
    f.fsync().unwrap();
    let data = pattern(3, 8192);
    f.pwrite(&data, 0).unwrap();
    let inner = &fs.inner;
    // One commit seals the buffered blocks; another comes before the log writer got to it.
    let mut m = inner.lock_meta();
    let cell = m.inodes.get(f.ino()).cloned().unwrap();
    inner.commit_data_log(&mut m, &cell).unwrap();
    let first_end = m.writer.seq();
    inner.commit_data_log(&mut m, &cell).unwrap();
    assert_eq!(
        m.writer.seq(),
        first_end,
        "the second commit sealed the same buffers again"
    );
    m.unlock_without_writing();
    assert!(
        inner.logs.written() < first_end,
        "the sealed log is still queued"
    );
    assert!(
        read_all(&fs, "/a") == data,
        "a read before the log was written found other bytes"
    );
    // A sync finds nothing left to seal and waits for the log that holds its buffers.
    f.fsync().unwrap();
    assert!(inner.logs.written() >= first_end);
    assert_eq!(
        inner.budget.buffered(),
        0,
        "the buffers go once their log is written"
    );
    // A buffer changed after it was sealed is sealed again, as its new contents.
    f.pwrite(&pattern(4, 4096), 0).unwrap();
    let mut m = inner.lock_meta();
    inner.commit_data_log(&mut m, &cell).unwrap();
    let second_end = m.writer.seq();
    f.pwrite(&pattern(5, 4096), 0).unwrap();
    inner.commit_data_log(&mut m, &cell).unwrap();
    assert!(
        m.writer.seq() > second_end,
        "the changed buffer was left out"
    );
    m.unlock_without_writing();
    f.fsync().unwrap();
    drop(f);
    drop(fs);
    let back = reopen(&sim);
    let mut expect = data.clone();
    expect[..4096].copy_from_slice(&pattern(5, 4096));
    assert_eq!(read_all(&back, "/a"), expect);
}

/// Stages two checkpoints' logs, each sealing 900 KiB of a 1 MiB write buffer, and makes a
/// small buffered write, with space tight or not; returns whether the write came back with
/// those logs still queued.
fn small_write_returns_with_more_than_a_buffer_in_flight(
    dev: Arc<dyn Device>,
    tight: bool,
) -> bool {
    let fs = Fs::format(
        dev,
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let files: Vec<File> = ["/a", "/b", "/c"]
        .iter()
        .map(|p| fs.open_file(p, OpenFlags::create()).unwrap())
        .collect();
    let inner = &fs.inner;
    let mut end = 0;
    for (i, f) in files[..2].iter().enumerate() {
        // In writes under `HOT_SEAL_BYTES`, so a memory pool keeps them buffered too.
        let data = pattern(i as u64, 900 << 10);
        for (k, piece) in data.chunks(HOT_SEAL_BYTES as usize / 2).enumerate() {
            f.pwrite(piece, (k * HOT_SEAL_BYTES as usize / 2) as u64)
                .unwrap();
        }
        let mut m = inner.lock_meta();
        inner.commit_checkpoint(&mut m).unwrap();
        end = m.writer.seq();
        m.unlock_without_writing();
    }
    let in_flight = inner.logs.in_flight();
    assert!(
        in_flight > inner.config().dirty_bytes_max,
        "more than a buffer is in flight: {in_flight}"
    );
    // What the last space check found (the staged checkpoints made one).
    inner.budget.set_tight(tight);
    files[2].pwrite(&pattern(9, 4096), 0).unwrap();
    let queued = inner.logs.written() < end;
    fs.sync().unwrap();
    assert_eq!(read_all(&fs, "/a"), pattern(0, 900 << 10));
    assert_eq!(read_all(&fs, "/b"), pattern(1, 900 << 10));
    assert_eq!(read_all(&fs, "/c"), pattern(9, 4096));
    queued
}

#[test]
fn a_writer_waits_for_the_log_writer_past_one_buffer_on_a_device_and_goes_on_in_a_memory_pool_while_space_is_not_tight(
) {
    assert!(
        !small_write_returns_with_more_than_a_buffer_in_flight(device(16 << 20), false),
        "on a device the writer wrote the queue first"
    );
    for tight in [false, true] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let pool =
            crate::dev::memory::MemoryPool::create(dir.path().join("pool"), 16 << 20).unwrap();
        assert_eq!(
            small_write_returns_with_more_than_a_buffer_in_flight(Arc::new(pool), tight),
            !tight,
            "in a memory pool the writer goes on (space tight: {tight})"
        );
    }
}

#[test]
fn an_inode_page_a_queued_checkpoint_shares_is_copied_before_the_next_checkpoint_changes_it() {
    let sim = device(16 << 20);
    let config = Config {
        protection_period: Duration::from_secs(3600),
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    };
    let fs = Fs::format(sim.clone(), &config).unwrap();
    let a = fs.open_file("/a", OpenFlags::create()).unwrap();
    let b = fs.open_file("/b", OpenFlags::create()).unwrap();
    assert_eq!(
        a.ino() / INODES_PER_PAGE as u64,
        b.ino() / INODES_PER_PAGE as u64,
        "both inodes are on one page"
    );
    b.pwrite(&pattern(1, 100), 0).unwrap();
    // The page is written once, so the checkpoints below take it from the cache.
    fs.sync().unwrap();
    let inner = &fs.inner;
    a.pwrite(&pattern(2, 300), 0).unwrap();
    let mut m = inner.lock_meta();
    inner.commit_checkpoint(&mut m).unwrap();
    let first = m.ckpt.newest();
    let first_end = m.writer.seq();
    m.unlock_without_writing();
    // The next checkpoint changes `/b`'s slot while the first one's log still holds the page.
    b.pwrite(&pattern(3, 5000), 0).unwrap();
    let mut m = inner.lock_meta();
    assert!(
        inner.logs.written() < first_end,
        "the first checkpoint is still queued"
    );
    inner.commit_checkpoint(&mut m).unwrap();
    let second = m.ckpt.newest();
    m.unlock_without_writing();
    fs.sync().unwrap();
    let view = fs.at(first).unwrap();
    assert_eq!(view.stat("/a").unwrap().size, 300);
    assert_eq!(
        view.stat("/b").unwrap().size,
        100,
        "the first checkpoint's page took the second one's change"
    );
    let view = fs.at(second).unwrap();
    assert_eq!(view.stat("/b").unwrap().size, 5000);
    drop((a, b));
    drop(fs);
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/a"), pattern(2, 300));
    assert_eq!(read_all(&back, "/b"), pattern(3, 5000));
}

/// A device that stops the first write of at least `min` bytes until the test lets it go.
#[derive(Debug)]
struct WriteGate {
    inner: Arc<SimDevice>,
    min: std::sync::Mutex<Option<usize>>,
    /// Stops the first write of exactly this many bytes instead (once set).
    exact: std::sync::Mutex<Option<usize>>,
    stopped: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    resume: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Device for WriteGate {
    fn kind(&self) -> &'static str {
        "write-gated"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let hit = {
            let mut min = self.min.lock().unwrap();
            let mut exact = self.exact.lock().unwrap();
            let hit = min.is_some_and(|m| buf.len() >= m) || *exact == Some(buf.len());
            if hit {
                *min = None;
                *exact = None;
            }
            hit
        };
        if hit {
            self.stopped.lock().unwrap().send(()).unwrap();
            self.resume.lock().unwrap().recv().unwrap();
        }
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An 8 MiB device whose first write of `min` bytes or more, or of `exact` bytes (once set),
/// stops until `resume` is sent; `stopped` is sent when it does.
fn gated_device() -> (
    Arc<SimDevice>,
    Arc<WriteGate>,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    let sim = device(8 << 20);
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    let gated = Arc::new(WriteGate {
        inner: sim.clone(),
        min: std::sync::Mutex::new(None),
        exact: std::sync::Mutex::new(None),
        stopped: std::sync::Mutex::new(stopped_tx),
        resume: std::sync::Mutex::new(resume_rx),
    });
    (sim, gated, stopped_rx, resume_tx)
}

/// Runs `f` on a thread of `s` while a write is stopped in `sim` (a [`gated_device`]), and
/// waits up to 60 s for it. Returns whether it finished meanwhile, what was on the device
/// then (what a power cut there would leave) and the thread; the stopped write resumes.
fn run_while_stopped<'scope, T: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    sim: &SimDevice,
    resume: &std::sync::mpsc::Sender<()>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> (bool, Vec<u8>, std::thread::ScopedJoinHandle<'scope, T>) {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let handle = s.spawn(move || {
        let r = f();
        let _ = done_tx.send(());
        r
    });
    let finished = done_rx.recv_timeout(Duration::from_secs(60)).is_ok();
    let image = sim.image();
    resume.send(()).unwrap();
    (finished, image, handle)
}

/// A pool on `gated` (relaxed ordering, a flush after every log) with no superblock refresh
/// in the way: a test's syncs seal nothing it did not stage.
fn gated_pool(gated: &Arc<WriteGate>) -> Fs {
    let cfg = Config {
        segment_bytes: 256 << 10,
        superblock_every_bytes: 64 << 20,
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    Fs::format(gated.clone(), &cfg).unwrap()
}

#[test]
fn a_small_sync_does_not_wait_for_a_large_payload_sealed_before_it_and_a_crash_then_skips_that() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let cfg = Config {
        segment_bytes: 256 << 10,
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(gated.clone(), &cfg).unwrap();
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let small = fs.open_file("/small", OpenFlags::create()).unwrap();
    small.pwrite(&pattern(1, 4096), 0).unwrap();
    big.pwrite(&pattern(2, 32 * 4096), 0).unwrap();
    fs.sync().unwrap();
    // Rewriting 32 blocks (no size change): a data-only log whose payload its sealer writes
    // apart from the summary.
    let large = pattern(3, 32 * 4096);
    *gated.min.lock().unwrap() = Some(16 * 4096);
    std::thread::scope(|s| {
        let writer = s.spawn(|| big.pwrite(&large, 0).and_then(|_| big.fsync()));
        stopped_rx.recv().unwrap();
        // The large payload is stopped in the device. A sync of another file sealed after it
        // completes: its summary follows the large log's, which goes ahead of its payload.
        let small = &small;
        let (finished, crashed, synced) = run_while_stopped(s, &sim, &resume_tx, move || {
            small
                .pwrite(&pattern(4, 4096), 0)
                .and_then(|_| small.fsync())
        });
        assert!(finished, "the small sync waited for the large payload");
        synced.join().unwrap().unwrap();
        writer.join().unwrap().unwrap();
        let after = open_held_image(crashed);
        // The large write's logs (it may span a segment boundary) are skipped.
        let report = after.recovery_report();
        assert!(report.logs_skipped >= 1, "{report:?}");
        assert_eq!(
            report.logs_rolled_forward, 1,
            "the small sync's log: {report:?}"
        );
    });
    let back = reopen_after_release(&sim, &large);
    assert_eq!(back.recovery_report().logs_skipped, 0);
}

/// A crash image taken while `/big`'s 32-block rewrite was held in the device, reopened: the
/// acknowledged 4 KiB sync of `/small` is there, the unacknowledged rewrite is not.
fn open_held_image(crashed: Vec<u8>) -> Fs {
    let after = Fs::open(from_image(crashed), &OpenOptions::default()).unwrap();
    assert_eq!(
        read_all(&after, "/small"),
        pattern(4, 4096),
        "the acknowledged sync"
    );
    assert_eq!(
        read_all(&after, "/big"),
        pattern(2, 32 * 4096),
        "the unacknowledged write"
    );
    after
}

/// The pool reopened once the held rewrite went through: both writes are there.
fn reopen_after_release(sim: &SimDevice, large: &[u8]) -> Fs {
    let back = reopen(sim);
    assert_eq!(read_all(&back, "/big"), large);
    assert_eq!(read_all(&back, "/small"), pattern(4, 4096));
    back
}

/// A sync of a file whose log went out before a checkpoint waits neither for that checkpoint,
/// which holds nothing of the file its log does not, nor for a thread that waits, log writer
/// in hand, for the payloads that checkpoint needs: here a large payload of another file,
/// stopped in the device. A crash then keeps the acknowledged sync.
#[test]
fn a_sync_waits_for_no_later_checkpoint_nor_for_other_files_payloads_under_the_log_writer() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = gated_pool(&gated);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let small = fs.open_file("/small", OpenFlags::create()).unwrap();
    small.pwrite(&pattern(1, 8 * 4096), 0).unwrap();
    big.pwrite(&pattern(2, 32 * 4096), 0).unwrap();
    fs.sync().unwrap();
    let large = pattern(3, 32 * 4096);
    *gated.min.lock().unwrap() = Some(16 * 4096);
    std::thread::scope(|s| {
        // The large payload stops in the device.
        let writer = s.spawn(|| big.pwrite(&large, 0).and_then(|_| big.fsync()));
        stopped_rx.recv().unwrap();
        // After it: `/small`'s new data in a log of its own, then a checkpoint, which may be
        // written only once the large payload is.
        small.pwrite(&pattern(4, 8 * 4096), 0).unwrap();
        let small_log = {
            let mut m = fs.inner.lock_meta();
            let small_log = m.writer.seq();
            let ino = fs.inner.lookup(&m.dirs, &m.inodes, "/small").unwrap();
            let cell = fs.inner.cell(&m.inodes, ino).unwrap();
            fs.inner.commit_data_log(&mut m, &cell).unwrap();
            fs.inner.commit_checkpoint(&mut m).unwrap();
            // Left queued for the thread below (nobody here waits on the small log).
            let (_, small) = m.writer.take_sealed();
            assert!(
                !small.is_empty(),
                "the small log was sealed under this hold"
            );
            m.unlock_without_writing();
            small_log
        };
        // A thread writes the queue: `/small`'s log, then it has to wait for the payload.
        let inner = &fs.inner;
        let queue = s.spawn(move || inner.write_logs_until(u64::MAX));
        while fs.inner.logs.summaries() <= small_log {
            std::thread::yield_now();
        }
        let small = &small;
        let (finished, crashed, synced) =
            run_while_stopped(s, &sim, &resume_tx, move || small.fsync());
        assert!(finished, "the sync waited for another file's payload");
        synced.join().unwrap().unwrap();
        queue.join().unwrap().unwrap();
        writer.join().unwrap().unwrap();
        let after = Fs::open(from_image(crashed), &OpenOptions::default()).unwrap();
        assert_eq!(
            read_all(&after, "/small"),
            pattern(4, 8 * 4096),
            "the acknowledged sync"
        );
        assert_eq!(
            read_all(&after, "/big"),
            pattern(2, 32 * 4096),
            "the unacknowledged write"
        );
    });
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/big"), large);
    assert_eq!(read_all(&back, "/small"), pattern(4, 8 * 4096));
}

/// The room a commit of `need` blocks finds (blocks free, what the space check wants free, and
/// the floor below which a write cleans until there is room), as `Engine::ensure_space` counts
/// them.
fn room_for(fs: &Fs, need: u64) -> (u64, u64, u64) {
    let m = fs.inner.lock_meta();
    let (reserve, low_water) = fs.inner.space_margins(&m);
    let debt = fs.inner.writers_debt(&m);
    (
        fs.inner.free_blocks(&m),
        need + reserve + low_water.max(debt),
        need + reserve + (low_water / 2).max(debt),
    )
}

/// A pool on `gated` in which a test stages room short by hand: background cleaning on, so a
/// write between the floor and the mark leaves the cleaning to that thread; the thread itself
/// stopped, so nothing cleans meanwhile and the room staged stays as it is.
fn room_staging_pool(gated: &Arc<WriteGate>) -> Fs {
    let cfg = Config {
        segment_bytes: 256 << 10,
        superblock_every_bytes: 64 << 20,
        background_gc: true,
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(gated.clone(), &cfg).unwrap();
    fs.inner.stop_background();
    fs
}

/// A real-time writer's append and sync that find room short (less free than the low-water mark
/// wants, more than the floor) complete while a best-effort writer's payload is stopped in the
/// device: the space check does not wait, under `meta`, for the payloads in flight. Before, it
/// wrote the queue and waited for every payload so the segments they free would count, the
/// real-time sync with it, for as long as the best-effort payload took. So does a best-effort
/// thread's check while a real-time thread lends it its priority for `meta`. A crash meanwhile
/// keeps the acknowledged append.
#[test]
fn a_real_time_sync_finding_room_short_does_not_wait_for_a_best_effort_payload() {
    use crate::sched::{Charge, Class, Prio, TenantId, LEVEL_MAX};
    let rt_prio = Prio {
        class: Class::Rt,
        level: 0,
    };
    let real_time = Charge::to(TenantId(1), rt_prio);
    let best_effort = Charge::to(
        TenantId(2),
        Prio {
            class: Class::Be,
            level: LEVEL_MAX,
        },
    );
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = room_staging_pool(&gated);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let small = fs.open_file("/small", OpenFlags::create()).unwrap();
    small.pwrite(&pattern(1, 4096), 0).unwrap();
    big.pwrite(&pattern(2, 32 * 4096), 0).unwrap();
    fs.sync().unwrap();
    // Live data until less is free than the space check wants for the smallest commit (a
    // sync's needs more), and still more than the floor of a larger one beside the best-effort
    // write's 32 blocks and its summary.
    let fill = fs.open_file("/fill", OpenFlags::create()).unwrap();
    let mut at = 0;
    loop {
        let (free, want, _) = room_for(&fs, 2);
        if free < want {
            break;
        }
        assert!(at < 8 << 20, "the pool never got short of room");
        fill.pwrite(&pattern(5, 4 * 4096), at).unwrap();
        fill.fdatasync().unwrap();
        at += 4 * 4096;
    }
    let (free, _, floor) = room_for(&fs, 16);
    assert!(
        free >= floor + 48,
        "{free} blocks free, the floor {floor}: no room for the best-effort write above it"
    );
    let large = pattern(3, 32 * 4096);
    *gated.min.lock().unwrap() = Some(16 * 4096);
    let before = fs.counters();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let _be = best_effort.apply();
            big.pwrite(&large, 0).and_then(|_| big.fsync())
        });
        stopped_rx.recv().unwrap();
        let (fs, small) = (&fs, &small);
        let (finished, crashed, synced) = run_while_stopped(s, &sim, &resume_tx, move || {
            let _rt = real_time.apply();
            // Room is still short with the payload held (and `meta` free).
            let room = room_for(fs, 2);
            let floor = room_for(fs, 16).2;
            assert!(fs.inner.logs.payloads_in_flight_below(u64::MAX));
            let _ = crate::phases::take();
            let done = small
                .pwrite(&pattern(4, 4096), 0)
                .and_then(|_| small.fdatasync());
            let rt_phases = crate::phases::take();
            // A best-effort thread's check, while a real-time thread waits on it for `meta`
            // (its priority lent), goes on the same way: it would keep that thread waiting.
            let lent = std::thread::scope(|s| {
                s.spawn(|| {
                    let _be = best_effort.apply();
                    let room = room_for(fs, 16);
                    let mut m = fs.inner.lock_meta();
                    let _lent = fs.inner.inheritance().lend(rt_prio);
                    let _ = crate::phases::take();
                    let checked = fs.inner.ensure_space(&mut m, 2);
                    (room, checked, crate::phases::take())
                })
                .join()
                .unwrap()
            });
            (room, floor, done, rt_phases, lent)
        });
        assert!(
            finished,
            "the real-time sync waited for the best-effort payload"
        );
        let ((free, want, _), floor, done, phases, lent) = synced.join().unwrap();
        done.unwrap();
        let ((lent_free, lent_want, lent_floor), checked, lent_phases) = lent;
        checked.unwrap();
        assert!(
            lent_free < lent_want && lent_free >= lent_floor,
            "room short but above the floor for the lent check: {lent_free} free, {lent_want} wanted, floor {lent_floor}"
        );
        assert_eq!(
            (lent_phases.space_waits, lent_phases.space_waits_left),
            (0, 1),
            "{lent_phases:?}"
        );
        assert!(
            free < want && free >= floor,
            "room short but above the floor: {free} free, {want} wanted, floor {floor}"
        );
        // Its space checks found the room short and went on without the wait.
        assert_eq!(phases.space_waits, 0, "{phases:?}");
        assert!(phases.space_waits_left >= 1, "{phases:?}");
        assert!(fs.counters().space_waits_left > before.space_waits_left);
        writer.join().unwrap().unwrap();
        open_held_image(crashed);
    });
    reopen_after_release(&sim, &large);
}

/// A best-effort writer whose space check finds room short while another best-effort payload
/// is stopped in the device waits for it with `meta` let go, so a real-time writer's append and
/// sync meanwhile complete. Before, the check wrote the queue and waited for every payload in
/// flight under `meta`, and the real-time writer waited for `meta` (lending its priority to a
/// wait already under way) until the payload was let go. A crash meanwhile keeps the
/// acknowledged append.
#[test]
fn a_best_effort_space_check_waits_for_a_held_payload_with_meta_let_go() {
    use crate::sched::{Charge, Class, Prio, TenantId, LEVEL_MAX};
    let real_time = Charge::to(
        TenantId(1),
        Prio {
            class: Class::Rt,
            level: 0,
        },
    );
    let best_effort = Charge::to(
        TenantId(2),
        Prio {
            class: Class::Be,
            level: LEVEL_MAX,
        },
    );
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = room_staging_pool(&gated);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let small = fs.open_file("/small", OpenFlags::create()).unwrap();
    let copy = fs.open_file("/copy", OpenFlags::create()).unwrap();
    small.pwrite(&pattern(1, 4096), 0).unwrap();
    big.pwrite(&pattern(2, 32 * 4096), 0).unwrap();
    copy.pwrite(&pattern(6, 4096), 0).unwrap();
    fs.sync().unwrap();
    let fill = fs.open_file("/fill", OpenFlags::create()).unwrap();
    let mut at = 0;
    loop {
        let (free, want, _) = room_for(&fs, 2);
        if free < want {
            break;
        }
        assert!(at < 8 << 20, "the pool never got short of room");
        fill.pwrite(&pattern(5, 4 * 4096), at).unwrap();
        fill.fdatasync().unwrap();
        at += 4 * 4096;
    }
    let (free, _, floor) = room_for(&fs, 16);
    assert!(
        free >= floor + 48,
        "{free} blocks free, the floor {floor}: no room for the writes above it"
    );
    let large = pattern(3, 32 * 4096);
    let copied = pattern(7, 4 * 4096);
    *gated.min.lock().unwrap() = Some(16 * 4096);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let _be = best_effort.apply();
            big.pwrite(&large, 0).and_then(|_| big.fsync())
        });
        stopped_rx.recv().unwrap();
        // The held payload's writer is past its space check, waiting for the payload.
        let before = fs.counters();
        // A second best-effort writer syncs a few blocks: its space check finds room short
        // with the payload held.
        let copier = s.spawn(|| {
            let _be = best_effort.apply();
            copy.pwrite(&copied, 0).and_then(|_| copy.fsync())
        });
        // Its check has found room short and is waiting for the logs in flight.
        while {
            let c = fs.counters();
            c.space_waits + c.space_waits_outside == before.space_waits + before.space_waits_outside
        } {
            assert!(
                !copier.is_finished(),
                "the copy's write went on without waiting"
            );
            std::thread::yield_now();
        }
        let (fs, small) = (&fs, &small);
        let (finished, crashed, synced) = run_while_stopped(s, &sim, &resume_tx, move || {
            let _rt = real_time.apply();
            assert!(fs.inner.logs.payloads_in_flight_below(u64::MAX));
            let _ = crate::phases::take();
            let done = small
                .pwrite(&pattern(4, 4096), 0)
                .and_then(|_| small.fdatasync());
            (done, crate::phases::take())
        });
        assert!(
            finished,
            "the real-time sync waited for meta behind the copy's space check"
        );
        let (done, phases) = synced.join().unwrap();
        done.unwrap();
        // The real-time writer's own check went on without the wait, as before.
        assert_eq!(phases.space_waits, 0, "{phases:?}");
        writer.join().unwrap().unwrap();
        copier.join().unwrap().unwrap();
        let after = fs.counters();
        assert_eq!(
            after.space_waits_outside,
            before.space_waits_outside + 1,
            "the copy's check waited with meta let go"
        );
        assert_eq!(
            after.space_waits, before.space_waits,
            "no check waited for the device under meta"
        );
        open_held_image(crashed);
    });
    let back = reopen_after_release(&sim, &large);
    assert_eq!(read_all(&back, "/copy"), copied);
}

#[test]
fn a_file_left_holding_an_eighth_of_the_buffer_is_written_behind() {
    // A buffer of 8 MiB: a file holding an eighth of it (1 MiB) after a write goes out.
    let dev = device(32 << 20);
    let cfg = large_file_config(8 << 20);
    let fs = Fs::format(dev.clone(), &cfg).unwrap();
    let f = fs.open_file("/big", OpenFlags::create()).unwrap();
    f.fsync().unwrap(); // the creation's checkpoint: no namespace change pending after it
    let small = pattern(8, 512 << 10);
    f.pwrite(&small, 0).unwrap();
    let before = fs.counters();
    assert!(
        fs.inner.budget.buffered() >= 512 << 10,
        "512 KiB stays buffered"
    );
    let data = pattern(9, 1280 << 10);
    assert_eq!(f.pwrite(&data, 0).unwrap(), data.len());
    let after = fs.counters();
    assert_eq!(
        after.data_only_logs,
        before.data_only_logs + 1,
        "the whole write, once, after it was copied in"
    );
    assert_eq!(fs.inner.budget.buffered(), 0, "nothing stays buffered");
    // Nothing was synced: the written-behind log rolls forward after a process crash.
    assert_eq!(read_all(&reopen(&dev), "/big"), data);
    // A new file's data is written behind too, placed: a crash before the checkpoint that
    // records the file keeps neither; its sync is that checkpoint.
    let g = fs.open_file("/new", OpenFlags::create()).unwrap();
    g.pwrite(&data, 0).unwrap();
    let placed = fs.counters();
    assert_eq!(placed.data_only_logs, after.data_only_logs + 1);
    assert_eq!(
        placed.placed_blocks - after.placed_blocks,
        data.len() as u64 / BLOCK as u64
    );
    assert!(matches!(reopen(&dev).stat("/new"), Err(Error::NotFound(_))));
    g.fsync().unwrap();
    assert_eq!(fs.counters().checkpoints, placed.checkpoints + 1);
    assert_eq!(read_all(&reopen(&dev), "/new"), data);
}

#[test]
fn every_log_of_a_write_behind_has_its_payload_apart_and_its_writer_writes_it() {
    // Written behind, a file's data goes out in logs that end at segment ends, so the last one
    // in a segment may hold fewer than `AHEAD_MIN_BLOCKS` blocks. Each still has its payload
    // apart from its summary: its writer writes it (its lane), and a sync of another file that
    // writes the queue on its way to its own log writes only the summaries. The writer's writes
    // are held from its first on, so every log of the run is still pending when it is looked at.
    use crate::tbfs::limits::AHEAD_MIN_BLOCKS;
    let mut small_seen = 0;
    for extra in (0..64).step_by(7) {
        let dev = device(32 << 20);
        let cfg = Config {
            segment_bytes: 256 << 10,
            ..large_file_config(8 << 20)
        };
        let fs = Fs::format(dev.clone(), &cfg).unwrap();
        let f = fs.open_file("/big", OpenFlags::create()).unwrap();
        f.fsync().unwrap();
        let ino = f.stat().unwrap().ino;
        let data = pattern(extra, (256 + extra as usize) * BLOCK);
        let before = fs.counters();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                go_rx.recv().unwrap();
                f.pwrite(&data, 0).map(|_| f)
            })
        };
        dev.hold_writes_of(writer.thread().id());
        go_tx.send(()).unwrap();
        while dev.held_writes() == 0 {
            assert!(!writer.is_finished(), "the write ended before it was held");
            std::thread::yield_now();
        }
        let logs = fs.counters().logs - before.logs;
        let pending = fs.inner.logs.ahead_below(u64::MAX, Some(&[ino]));
        assert!(logs > 1, "{} blocks in one log", data.len() / BLOCK);
        // Every block of the write is in a payload written apart (a pad log at a segment's end
        // has none).
        assert_eq!(
            pending.iter().map(|a| a.blocks.len()).sum::<usize>(),
            data.len() / BLOCK,
            "every log of the write has its payload apart (extra {extra})"
        );
        small_seen += pending
            .iter()
            .filter(|a| a.blocks.len() < AHEAD_MIN_BLOCKS)
            .count();
        dev.release_held();
        let f = writer.join().unwrap().unwrap();
        f.fsync().unwrap();
        assert_eq!(read_all(&reopen(&dev), "/big"), data);
    }
    assert!(small_seen > 0, "no log of a write-behind was a small one");
}

#[test]
fn a_large_write_to_a_memory_pool_goes_out_at_once_and_small_ones_stay_buffered() {
    // On a device whose writes are copies, a write of `HOT_SEAL_BYTES` or more is sealed and
    // copied by its writer right away (its bytes still in the cache) while space is not tight;
    // smaller writes, and any write to a device that is not a memory copy, wait for the buffer
    // to fill.
    for copies in [true, false] {
        let dev = device(32 << 20);
        dev.set_writes_are_copies(copies);
        let fs = Fs::format(dev.clone(), &large_file_config(8 << 20)).unwrap();
        let f = fs.open_file("/f", OpenFlags::create()).unwrap();
        f.fsync().unwrap(); // the creation's checkpoint: no namespace change pending after it
        let small = pattern(1, HOT_SEAL_BYTES as usize - BLOCK);
        f.pwrite(&small, 0).unwrap();
        let before = fs.counters();
        assert!(
            fs.inner.budget.buffered() >= small.len() as u64,
            "a write under the threshold stays buffered (copies {copies})"
        );
        let large = pattern(2, HOT_SEAL_BYTES as usize);
        f.pwrite(&large, small.len() as u64).unwrap();
        let after = fs.counters();
        let mut whole = small.clone();
        whole.extend_from_slice(&large);
        if copies {
            assert_eq!(
                after.data_only_logs,
                before.data_only_logs + 1,
                "the large write and the file's earlier buffers, in one log"
            );
            assert_eq!(fs.inner.budget.buffered(), 0, "nothing stays buffered");
            // Not synced: the log rolls forward after a crash of the process.
            assert_eq!(read_all(&reopen(&dev), "/f"), whole);
        } else {
            assert_eq!(after.data_only_logs, before.data_only_logs);
            assert!(fs.inner.budget.buffered() >= whole.len() as u64);
            // Not synced and not written: a crash keeps the file empty.
            assert_eq!(read_all(&reopen(&dev), "/f"), Vec::<u8>::new());
        }
        assert_eq!(read_all(&fs, "/f"), whole);
        f.fsync().unwrap();
        assert_eq!(read_all(&reopen(&dev), "/f"), whole);
        // While space is tight (what the last space check found), a large write stays
        // buffered too: written out early, what is overwritten or deleted soon after is more
        // for the cleaner.
        fs.inner.budget.set_tight(true);
        let before = fs.counters();
        f.pwrite(&large, 0).unwrap();
        assert_eq!(fs.counters().data_only_logs, before.data_only_logs);
        assert!(fs.inner.budget.buffered() >= large.len() as u64);
        fs.inner.budget.set_tight(false);
        f.fsync().unwrap();
        whole[..large.len()].copy_from_slice(&large);
        assert_eq!(read_all(&reopen(&dev), "/f"), whole);
    }
}

/// Opens `path` read-only and returns its contents, or the error.
fn try_read(fs: &Fs, path: &str) -> Result<Vec<u8>> {
    let f = fs.open_file(path, OpenFlags::read_only())?;
    let mut buf = vec![0u8; f.stat()?.size as usize];
    let n = f.pread(&mut buf, 0)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn the_path_cache_answers_open_and_stat_and_never_outlives_a_name() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    let put = |path: &str, data: &[u8]| {
        fs.open_file(path, OpenFlags::create())
            .unwrap()
            .write(data)
            .unwrap();
    };
    fs.mkdir("/d", 0o755).unwrap();
    put("/d/f", b"one");
    // A created file, a stat and an open all land in the cache; non-plain paths do not.
    assert_eq!(fs.stat("/d/f").unwrap().size, 3);
    assert_eq!(fs.stat("d/./f").unwrap().size, 3);
    assert_eq!(try_read(&fs, "/d/f").unwrap(), b"one");
    assert_eq!(fs.inner.names.len(), 1, "only /d/f is kept");

    // Unlink: the cached path misses, with or without an open handle; the handle keeps the data.
    let held = fs.open_file("/d/f", OpenFlags::read_only()).unwrap();
    fs.unlink("/d/f").unwrap();
    assert!(matches!(fs.stat("/d/f"), Err(Error::NotFound(_))));
    assert!(matches!(try_read(&fs, "/d/f"), Err(Error::NotFound(_))));
    let mut back = [0u8; 3];
    assert_eq!(held.pread(&mut back, 0).unwrap(), 3);
    assert_eq!(&back, b"one");
    drop(held);
    // A new file under the same name is the one found.
    put("/d/f", b"two!");
    assert_eq!(try_read(&fs, "/d/f").unwrap(), b"two!");
    // O_EXCL on a cached path still fails.
    assert!(matches!(
        fs.open_file(
            "/d/f",
            OpenFlags {
                exclusive: true,
                ..OpenFlags::create()
            }
        ),
        Err(Error::Exists(_))
    ));

    // Rename of the file: the old path misses, the new one and a replaced one are right.
    put("/d/g", b"gee");
    assert_eq!(try_read(&fs, "/d/g").unwrap(), b"gee");
    fs.rename("/d/f", "/d/g").unwrap();
    assert!(matches!(fs.stat("/d/f"), Err(Error::NotFound(_))));
    assert_eq!(try_read(&fs, "/d/g").unwrap(), b"two!");

    // Rename of the directory above: paths through its old name miss.
    assert_eq!(fs.stat("/d/g").unwrap().size, 4);
    fs.rename("/d", "/e").unwrap();
    assert!(matches!(fs.stat("/d/g"), Err(Error::NotFound(_))));
    assert!(matches!(try_read(&fs, "/d/g"), Err(Error::NotFound(_))));
    assert_eq!(try_read(&fs, "/e/g").unwrap(), b"two!");
    // A new directory under the old name holds what is made in it, not the old entries.
    fs.mkdir("/d", 0o755).unwrap();
    assert!(matches!(fs.stat("/d/g"), Err(Error::NotFound(_))));
    put("/d/g", b"new");
    assert_eq!(try_read(&fs, "/d/g").unwrap(), b"new");

    // Hard links: removing one name leaves the other found.
    fs.link("/e/g", "/e/h").unwrap();
    assert_eq!(try_read(&fs, "/e/h").unwrap(), b"two!");
    fs.unlink("/e/g").unwrap();
    assert!(matches!(fs.stat("/e/g"), Err(Error::NotFound(_))));
    assert_eq!(try_read(&fs, "/e/h").unwrap(), b"two!");

    // A path through a symbolic link follows the link as it is now.
    put("/x", b"ex");
    put("/y", b"why");
    fs.symlink("/x", "/l").unwrap();
    assert_eq!(try_read(&fs, "/l").unwrap(), b"ex");
    assert_eq!(fs.lstat("/l").unwrap().kind, FileKind::Symlink);
    fs.unlink("/l").unwrap();
    fs.symlink("/y", "/l").unwrap();
    assert_eq!(try_read(&fs, "/l").unwrap(), b"why");
    assert_eq!(fs.lstat("/l").unwrap().kind, FileKind::Symlink);

    // A directory opened for writing is refused whether cached or not.
    assert!(fs.stat("/e").is_ok());
    assert!(matches!(
        fs.open_file("/e", OpenFlags::create()),
        Err(Error::IsDir(_))
    ));
}

#[test]
fn a_buffer_is_changed_in_place_until_a_log_shares_it_and_never_under_the_log() {
    use super::format::{crc_blocks, BLOCK};
    use crate::tbfs::blocks::shared_copy;
    use crate::tbfs::inode::DirtyBlock;
    let mut d = DirtyBlock::new(1, shared_copy(&[1; BLOCK]));
    let first = Arc::as_ptr(d.data());
    d.write(2, 0, &[2; 8]);
    assert_eq!(
        Arc::as_ptr(d.data()),
        first,
        "copied although no log shares it"
    );
    let logged = d.share_with_log();
    assert!(Arc::ptr_eq(&logged, d.data()), "the log got other bytes");
    d.write(3, 4, &[3; 8]);
    assert_eq!(
        &logged[..12],
        &[2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1],
        "the log's bytes changed"
    );
    assert_eq!(&d.data()[..12], &[2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]);
    assert_eq!(d.crc(), crc_blocks(&d.data()[..]));
    assert_eq!(d.gen, 3);
    // Sealed again: the new generation's bytes, shared with that log.
    let again = d.share_with_log();
    assert!(Arc::ptr_eq(&again, d.data()));
    drop((logged, again));
    // Released: only the buffer's own reference is left, so it can be reused.
    let data = d.into_data();
    assert_eq!(Arc::strong_count(&data), 1, "a reference was left behind");
}

#[test]
fn a_thread_reuses_the_buffers_it_released_itself_up_to_its_own_cap_whatever_other_threads_take() {
    use crate::tbfs::blocks::{recycle_blocks, zeroed_block};
    use crate::tbfs::limits::{LOCAL_SPARE_BATCH, SPARE_BLOCKS_MAX};
    let cap = 2 * LOCAL_SPARE_BATCH;
    let (released_tx, released_rx) = std::sync::mpsc::channel();
    let (drained_tx, drained_rx) = std::sync::mpsc::channel::<()>();
    let owner = std::thread::spawn(move || {
        // New allocations: taking spares would fill this thread's own with the shared ones.
        let released: Vec<Arc<super::format::Block>> =
            (0..cap + 10).map(|_| Arc::new([0x77; BLOCK])).collect();
        let addrs: std::collections::HashSet<_> =
            released.iter().map(|b| Arc::as_ptr(b) as usize).collect();
        recycle_blocks(released);
        released_tx.send(()).unwrap();
        drained_rx.recv().unwrap();
        // The thread's own cap comes back, cleared, though another thread took every shared
        // spare meanwhile (the 10 past the cap among them).
        for i in 0..cap {
            let b = zeroed_block();
            assert!(
                addrs.contains(&(Arc::as_ptr(&b) as usize)),
                "block {i} was not one this thread released"
            );
            assert!(b.iter().all(|&x| x == 0), "a reused block kept old bytes");
        }
    });
    released_rx.recv().unwrap();
    // Another thread takes more than the shared spares can hold, and keeps it all (so no
    // address comes free for a new allocation to reuse).
    let taken: Vec<_> = (0..SPARE_BLOCKS_MAX + cap)
        .map(|_| zeroed_block())
        .collect();
    drained_tx.send(()).unwrap();
    owner.join().unwrap();
    drop(taken);
}

#[test]
fn released_buffers_are_reused_only_when_nothing_else_holds_them_and_reuse_never_shows_old_bytes() {
    // Shared (a log or a file still holds it): not kept, the holder's reference stays alone.
    let held = crate::tbfs::blocks::shared_copy(&[0x5a; super::format::BLOCK]);
    crate::tbfs::blocks::recycle_blocks(vec![held.clone()]);
    assert_eq!(
        Arc::strong_count(&held),
        1,
        "a shared buffer was kept for reuse"
    );
    // Unique buffers full of old bytes are kept; whatever a new block gets, it holds only what
    // it was made from.
    let old: Vec<_> = (0..64)
        .map(|_| crate::tbfs::blocks::shared_copy(&[0xab; super::format::BLOCK]))
        .collect();
    crate::tbfs::blocks::recycle_blocks(old);
    for i in 0..64u8 {
        assert!(crate::tbfs::blocks::zeroed_block().iter().all(|&b| b == 0));
        let data = [i; super::format::BLOCK];
        assert_eq!(&crate::tbfs::blocks::shared_copy(&data)[..], &data[..]);
    }
    // Files written, rewritten and deleted read back right through reused buffers.
    let fs = Fs::format(
        device(8 << 20),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    for round in 0..6u64 {
        write_file(&fs, "/f", &pattern(round, 100_000));
        let f = fs.open_file("/f", OpenFlags::create()).unwrap();
        f.pwrite(&pattern(round + 50, 5000), 1000).unwrap();
        let mut want = pattern(round, 100_000);
        want[1000..6000].copy_from_slice(&pattern(round + 50, 5000));
        assert_eq!(read_all(&fs, "/f"), want, "round {round}");
        drop(f);
        fs.unlink("/f").unwrap();
    }
}

/// Overwrites of 8 blocks of `/hot` and appends to `/cold`, each synced, 400 times, then a
/// sync: many segments left half dead. Returns what `/cold` holds.
fn hot_and_cold_history(fs: &Fs) -> Vec<u8> {
    let hot = fs.open_file("/hot", OpenFlags::create()).unwrap();
    let cold = fs.open_file("/cold", OpenFlags::create()).unwrap();
    let mut expect_cold = Vec::new();
    for i in 0..400u64 {
        hot.pwrite(&pattern(i, 4096), (i % 8) * 4096).unwrap();
        hot.fsync().unwrap();
        let data = pattern(i + 1000, 4096);
        cold.append(&data).unwrap();
        cold.fsync().unwrap();
        expect_cold.extend(data);
    }
    fs.sync().unwrap();
    expect_cold
}

#[test]
fn a_background_pass_in_a_memory_pool_cleans_one_victim_per_hold_of_meta() {
    // In a memory pool the background cleaner empties its victims one per hold of `meta`
    // (each its own pass), so other threads get the lock between them; elsewhere one pass takes
    // them all. Overwrites leave many segments half dead.
    for copies in [true, false] {
        let cfg = Config {
            gc_free_percent: 90,
            background_gc: true,
            ..small_config(Ordering::Relaxed, Barrier::Superblock)
        };
        let dev = device(32 << 20);
        dev.set_writes_are_copies(copies);
        let fs = Fs::format(dev.clone(), &cfg).unwrap();
        fs.inner.stop_background();
        let expect_cold = hot_and_cold_history(&fs);
        fs.inner.write_logs_until(u64::MAX).unwrap();
        let before = (fs.counters(), fs.inner.lock_meta().cleaning.passes());
        fs.inner.background_clean().unwrap();
        let after = (fs.counters(), fs.inner.lock_meta().cleaning.passes());
        let cleaned = after.0.segments_cleaned - before.0.segments_cleaned;
        // Light or not: whether a victim holds live metadata depends on which ones
        // cost-benefit picks, by age, so on the history's timing.
        let passes = after.1 - before.1;
        assert!(cleaned >= 2, "copies {copies}: {cleaned} segments cleaned");
        if copies {
            assert_eq!(passes, cleaned, "one pass per victim");
        } else {
            assert_eq!(passes, 1, "one pass for {cleaned} victims");
        }
        assert_eq!(read_all(&fs, "/cold"), expect_cold, "copies {copies}");
    }
}

#[test]
fn a_checkpoints_quick_space_bound_covers_what_it_counts_inode_by_inode() {
    // The quick bound assumes every map as wide as the widest the pool has had: a file
    // buffering one block at the end of the largest file must raise it, or the bound for that
    // file's map (a whole tree of that width) would fall short. Files mapped by a checkpoint and
    // written again, a truncation, a directory of many entries and its files are in the work
    // too. (Debug builds also compare the two bounds at every checkpoint.)
    let dev = device(256 << 20);
    let fs = Fs::format(dev.clone(), &large_file_config(64 << 20)).unwrap();
    fs.inner.stop_background();
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..300 {
        let f = fs
            .open_file(&format!("/d/f{i}"), OpenFlags::create())
            .unwrap();
        f.pwrite(&pattern(i, 100 + i as usize * 50), 0).unwrap();
    }
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    big.pwrite(&pattern(7, 3000 * BLOCK), 0).unwrap();
    fs.sync().unwrap();
    big.pwrite(&pattern(8, 5 * BLOCK), 1000 * BLOCK as u64)
        .unwrap();
    fs.open_file("/d/f3", OpenFlags::create())
        .unwrap()
        .set_len(10)
        .unwrap();
    let last = crate::tbfs::limits::FILE_BYTES_MAX - BLOCK as u64;
    fs.open_file("/sparse", OpenFlags::create())
        .unwrap()
        .pwrite(&pattern(9, BLOCK), last)
        .unwrap();
    let m = fs.inner.lock_meta();
    let (quick, counted) = fs.inner.checkpoint_inode_bounds(&m);
    assert!(
        counted > (last / BLOCK as u64) / format::FANOUT as u64,
        "the sparse file's whole tree is counted ({counted})"
    );
    assert!(quick >= counted, "quick {quick} against counted {counted}");
    drop(m);
    fs.sync().unwrap();
    assert_eq!(read_all(&fs, "/d/f3"), pattern(3, 250)[..10].to_vec());
}

/// `/f0` to `/f{n-1}`, created, open, and their creation made durable.
fn synced_files(fs: &Fs, n: usize) -> Vec<File> {
    let files = (0..n)
        .map(|i| {
            fs.open_file(&format!("/f{i}"), OpenFlags::create())
                .unwrap()
        })
        .collect();
    fs.sync().unwrap();
    files
}

#[test]
fn a_seal_looks_only_at_files_it_can_still_take_something_from() {
    // Sealing a full buffer goes through `DirtySet::to_seal`, not every file written since the
    // last checkpoint. New files are placed: once their blocks are sealed, their attributes
    // wait for the checkpoint, so a seal drops them (and opens no log for them); a file whose
    // creation is durable has its record sealed too, and is dropped after. A write puts its
    // file back. (Debug builds check at every seal that no file with something to seal is
    // missing from the set.)
    let dev = device(16 << 20);
    let cfg = Config {
        barrier: Barrier::Superblock,
        ..large_file_config(1 << 20)
    };
    let fs = Fs::format(dev.clone(), &cfg).unwrap();
    fs.inner.stop_background();
    let old = synced_files(&fs, 3);
    let new: Vec<File> = (0..3)
        .map(|i| {
            fs.open_file(&format!("/new{i}"), OpenFlags::create())
                .unwrap()
        })
        .collect();
    for (i, f) in old.iter().chain(&new).enumerate() {
        f.pwrite(&pattern(i as u64, 3 * BLOCK), 0).unwrap();
    }
    let to_seal =
        |fs: &Fs| -> Vec<u64> { fs.inner.dirty.lock().unwrap().to_seal().iter().collect() };
    let all = |fs: &Fs| fs.inner.dirty.lock().unwrap().all().len();
    let mut written: Vec<u64> = old.iter().chain(&new).map(|f| f.ino()).collect();
    written.sort_unstable();
    assert_eq!(to_seal(&fs), written);

    let mut m = fs.inner.lock_meta();
    fs.inner.commit_data_logs(&mut m, false).unwrap();
    drop(m);
    assert!(to_seal(&fs).is_empty(), "left to seal: {:?}", to_seal(&fs));
    assert_eq!(all(&fs), 6, "the checkpoint still has every file to write");
    // Nothing to seal: no log, not even an empty one for the placed files' attributes.
    let logs = fs.counters().logs;
    let mut m = fs.inner.lock_meta();
    fs.inner.commit_data_logs(&mut m, false).unwrap();
    drop(m);
    assert_eq!(fs.counters().logs, logs);

    new[1].pwrite(&pattern(9, 100), 0).unwrap();
    assert_eq!(to_seal(&fs), vec![new[1].ino()]);
    // A truncation inside a block buffers that block's zeroed tail: the file is listed again.
    new[2].set_len(2 * BLOCK as u64 + 10).unwrap();
    let mut listed = vec![new[1].ino(), new[2].ino()];
    listed.sort_unstable();
    assert_eq!(to_seal(&fs), listed);
    fs.sync().unwrap();
    let reopened = reopen(&dev);
    for (i, name) in ["/f0", "/f1", "/f2", "/new0", "/new1", "/new2"]
        .iter()
        .enumerate()
    {
        let mut expect = pattern(i as u64, 3 * BLOCK);
        if i == 4 {
            expect[..100].copy_from_slice(&pattern(9, 100));
        }
        if i == 5 {
            expect.truncate(2 * BLOCK + 10);
        }
        assert_eq!(read_all(&reopened, name), expect, "{name}");
    }
}

#[test]
fn a_full_buffer_is_sealed_in_parts_each_a_run_that_roll_forward_recovers() {
    // A writer that fills the buffer seals it in parts of about `SEAL_PART_BLOCKS` blocks, each
    // its own run of data-only logs (letting other threads have `meta` between them). Files of
    // 64 blocks and a record each: a part takes files until it holds that many blocks.
    const FILE_BLOCKS: usize = 64;
    let dev = device(128 << 20);
    let limit = 12u64 << 20;
    let fs = Fs::format(dev.clone(), &large_file_config(limit)).unwrap();
    fs.inner.stop_background();
    let files_to_fill = (limit / (FILE_BLOCKS * BLOCK) as u64) as usize + 1;
    // Their creation durable: their data goes out as replayed data, not placed.
    let files = synced_files(&fs, files_to_fill);
    let runs = || fs.counters().data_only_logs;
    let before = runs();
    let checkpoints = fs.counters().checkpoints;
    let data: Vec<Vec<u8>> = (0..files_to_fill)
        .map(|i| pattern(i as u64, FILE_BLOCKS * BLOCK))
        .collect();
    for (f, d) in files.iter().zip(&data).take(files_to_fill - 1) {
        f.pwrite(d, 0).unwrap();
    }
    assert_eq!(runs(), before, "the buffer is not over its limit yet");
    // This write takes the buffer over its limit.
    files[files_to_fill - 1]
        .pwrite(&data[files_to_fill - 1], 0)
        .unwrap();
    let per_part = (crate::tbfs::limits::SEAL_PART_BLOCKS as usize).div_ceil(FILE_BLOCKS + 1);
    assert_eq!(
        runs() - before,
        files_to_fill.div_ceil(per_part) as u64,
        "one run per part of {per_part} files"
    );
    assert_eq!(
        fs.counters().checkpoints,
        checkpoints,
        "no checkpoint since the sync"
    );
    // The parts' logs alone bring every file back.
    fs.inner.dev().flush().unwrap();
    let again = reopen(&dev);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(&read_all(&again, &format!("/f{i}")), d, "file {i}");
    }
    drop(again);
    checked_clean(&dev, "after the parts");
}

#[test]
fn a_files_attributes_record_joins_the_log_of_its_last_block_where_the_descriptors_run_out() {
    // Files of one block and an attributes record each, sealed in one run: two descriptors a
    // file, so some file's block takes the last descriptor data may use. Its record must go in
    // that log too, in the descriptors kept for it: roll-forward replays the block only with
    // the record, and a sync of a file whose blocks another's run sealed waits for their log.
    // With a file of two extents first, the other parity. (Debug builds also check each
    // record's log in `seal_file_data`.)
    for two_extents_first in [false, true] {
        let dev = device(16 << 20);
        // Room in a segment for a log of every file's block, and no superblock refresh (its
        // checkpoint would write every log before it).
        let fs = Fs::format(dev.clone(), &large_file_config(1 << 20)).unwrap();
        fs.inner.stop_background();
        let n = format::DESCRIPTORS_MAX;
        // Their creation durable: their data is replayed, not placed, so it has records.
        let files = synced_files(&fs, n);
        let mut expect = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let mut data = pattern(i as u64, 100);
            if i == 0 && two_extents_first {
                data.resize(2 * BLOCK + 100, 0);
                f.pwrite(&pattern(99, 100), 0).unwrap();
                f.pwrite(&pattern(98, 100), 2 * BLOCK as u64).unwrap();
                data[..100].copy_from_slice(&pattern(99, 100));
                data[2 * BLOCK..].copy_from_slice(&pattern(98, 100));
            } else {
                f.pwrite(&data, 0).unwrap();
            }
            expect.push(data);
        }
        // Another thread's run seals every file; its logs wait in the queue.
        let mut m = fs.inner.lock_meta();
        fs.inner.commit_data_logs(&mut m, false).unwrap();
        let sealed_in = |i: usize| {
            let cell = fs.inner.cell(&m.inodes, files[i].ino()).unwrap();
            let st = cell.lock();
            st.dirty()
                .values()
                .filter_map(|d| d.sealed_in)
                .max()
                .unwrap()
                .0
        };
        // The last file whose blocks are in the run's first log.
        let first = sealed_in(0);
        let last = (0..n).rev().find(|&i| sealed_in(i) == first).unwrap();
        assert!(last + 1 < n, "the run fits one log");
        m.unlock_without_writing();
        // A crash once that log is durable and no later one keeps the file, record and all.
        // (With the record in the next log, the file read back empty.)
        fs.inner.write_logs_until(first + 1).unwrap();
        fs.inner.dev().flush().unwrap();
        assert_eq!(
            fs.inner.logs.written(),
            first + 1,
            "only the first log written"
        );
        let crashed = reopen(&dev);
        assert_eq!(
            &read_all(&crashed, &format!("/f{last}")),
            &expect[last],
            "file {last}, the last in the first log (two extents first: {two_extents_first})"
        );
        drop(crashed);
        fs.inner.write_logs_until(u64::MAX).unwrap();
        fs.inner.dev().flush().unwrap();
        // The run alone (no checkpoint after it) brings every file back.
        let again = reopen(&dev);
        for (i, data) in expect.iter().enumerate() {
            assert_eq!(
                &read_all(&again, &format!("/f{i}")),
                data,
                "file {i} (two extents first: {two_extents_first})"
            );
        }
    }
}

#[test]
fn a_full_buffer_with_many_files_whose_only_change_is_their_access_time_writes_them_all() {
    // Reading a file changes its access time (here on every read), so it joins the next
    // run of data-only logs with an attributes record and no blocks; hundreds of them must
    // spread over as many logs as their records need.
    let dev = device(64 << 20);
    let cfg = Config {
        superblock_every_bytes: 64 << 20,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    };
    let fs = Fs::format(dev.clone(), &cfg).unwrap();
    let files = 3 * format::DESCRIPTORS_MAX;
    for i in 0..files {
        let f = fs
            .open_file(&format!("/f{i}"), OpenFlags::create())
            .unwrap();
        f.pwrite(&pattern(i as u64, 100), 0).unwrap();
    }
    fs.sync().unwrap();
    for i in 0..files {
        assert_eq!(read_all(&fs, &format!("/f{i}")), pattern(i as u64, 100));
    }
    let big = 300 << 10;
    let bigs: Vec<_> = (0..4)
        .map(|i| {
            fs.open_file(&format!("/big{i}"), OpenFlags::create())
                .unwrap()
        })
        .collect();
    for i in 0..files {
        assert_eq!(read_all(&fs, &format!("/f{i}")), pattern(i as u64, 100));
    }
    // The namespace changes are made durable first, so the buffer fills with none pending.
    // (Their checkpoint writes the access times: every read changes them again.)
    fs.sync().unwrap();
    fs.set_atime_policy(AtimePolicy::Strict);
    for i in 0..files {
        let f = fs
            .open_file(&format!("/f{i}"), OpenFlags::read_only())
            .unwrap();
        let mut buf = [0u8; 10];
        f.pread(&mut buf, 0).unwrap();
    }
    for (i, f) in bigs.iter().enumerate() {
        f.pwrite(&pattern(1000 + i as u64, big), 0).unwrap();
    }
    fs.sync().unwrap();
    let again = reopen(&dev);
    for i in 0..4 {
        assert_eq!(
            read_all(&again, &format!("/big{i}")),
            pattern(1000 + i as u64, big)
        );
    }
    for i in [0, files / 2, files - 1] {
        assert_eq!(read_all(&again, &format!("/f{i}")), pattern(i as u64, 100));
    }
}

/// What another thread's checkpoint sealed is recovered only with that whole checkpoint, whose
/// data logs roll-forward does not replay. A sync of a file whose buffers (or whose creation)
/// it holds returns only once the checkpoint's last log is written, so a crash right after
/// keeps the file.
#[test]
fn a_sync_of_what_another_checkpoint_sealed_waits_for_all_of_it() {
    for with_data in [true, false] {
        let sim = device(32 << 20);
        let fs = Fs::format(sim.clone(), &large_file_config(16 << 20)).unwrap();
        let f = fs.open_file("/a", OpenFlags::create()).unwrap();
        let data = if with_data {
            pattern(6, 8192)
        } else {
            Vec::new()
        };
        f.pwrite(&data, 0).unwrap();
        // A later file's 6 MiB go into the same checkpoint, after /a: several logs.
        let big = fs.open_file("/c", OpenFlags::create()).unwrap();
        big.pwrite(&pattern(7, 6 << 20), 0).unwrap();
        let inner = &fs.inner;
        let mut m = inner.lock_meta();
        assert!(
            m.changes.namespace_dirty(),
            "creations pending: the next commit is a checkpoint"
        );
        inner.commit_checkpoint(&mut m).unwrap();
        let end = m.writer.seq();
        m.unlock_without_writing();
        f.fsync().unwrap();
        let written = inner.logs.written();
        assert!(
            written >= end,
            "with data {with_data}: the sync returned with the checkpoint's logs \
             {written}..{end} unwritten"
        );
        // A process crash now: the device holds every write issued.
        let back = reopen(&sim);
        assert!(
            read_all(&back, "/a") == data,
            "with data {with_data}: the synced file is not there as written"
        );
    }
}

/// A write too large for one log goes out as several data-only logs. Whichever write the power
/// goes out after, and whether the device holds its writes in place or as whole logs, the file
/// recovers wholly as it was or wholly as written: never the first logs' part of the write
/// without the rest.
#[test]
fn a_write_spread_over_several_logs_recovers_whole_or_not_at_all() {
    const FILE: usize = 6 << 20; // 1,536 blocks: more than one log holds
    /// Power cuts tried per device mode, spread over the write's device writes.
    const CUTS: u64 = 48;
    let old = pattern(1, FILE);
    let new = pattern(2, FILE);
    // The pool with the old contents durable, and the file open.
    let setup = |copies: bool| {
        let dev = device(24 << 20);
        dev.set_writes_are_copies(copies);
        let (fs, f) = pool_with_synced_x(&dev, 1 << 20, &old);
        (dev, fs, f)
    };
    for copies in [false, true] {
        let (dev, fs, f) = setup(copies);
        let before = dev.stats().writes;
        f.pwrite(&new, 0).unwrap();
        f.fsync().unwrap();
        let writes = dev.stats().writes - before;
        drop((f, fs));
        assert!(writes > 2, "the write went out in {writes} device writes");
        let mut partial = Vec::new();
        let mut dropped_seen = false;
        for cut in (0..writes).step_by((writes / CUTS).max(1) as usize) {
            let (dev, fs, f) = setup(copies);
            dev.cut_power_after(cut);
            let acknowledged = f.pwrite(&new, 0).and_then(|_| f.fsync()).is_ok();
            drop((f, fs));
            // fsck names a part recovery leaves out, and finds no damage.
            let (image, report) = checked_clean(&dev, &format!("cut after {cut}"));
            let noted = report
                .findings
                .iter()
                .filter(|f| f.message.contains("recovery leaves it out"))
                .count() as u64;
            let back = Fs::open(image, &OpenOptions::default()).unwrap();
            assert_eq!(
                noted,
                back.recovery_report().run_parts_dropped,
                "cut after {cut}"
            );
            dropped_seen |= noted > 0;
            let got = read_all(&back, "/x");
            assert_eq!(
                got.len(),
                FILE,
                "cut after {cut} of {writes} writes (copies: {copies})"
            );
            if acknowledged {
                assert!(
                    got == new,
                    "acknowledged, yet not all there (copies: {copies})"
                );
            } else if got != old && got != new {
                let new_blocks = got
                    .chunks(BLOCK)
                    .zip(new.chunks(BLOCK))
                    .filter(|(g, n)| g == n)
                    .count();
                partial.push((cut, new_blocks));
            }
        }
        assert!(
            partial.is_empty(),
            "copies {copies}: recovered part of the write, (cut of {writes}, new blocks of {}): \
             {partial:?}",
            FILE / BLOCK
        );
        assert!(
            dropped_seen,
            "copies {copies}: no cut fell between the write's logs"
        );
    }
}

/// The blocks a run of data-only logs supersedes stay where they are until the run's last log is
/// durable: recovery replays a file's part of a run only whole, so until then it may need them.
#[test]
fn segments_a_run_superseded_are_reused_only_once_its_last_log_is_durable() {
    let (fs, f) = pool_with_synced_x(&device(48 << 20), 64 << 20, &pattern(1, 6 << 20));
    f.pwrite(&pattern(2, 6 << 20), 0).unwrap();
    let inner = &fs.inner;
    let mut m = inner.lock_meta();
    let cell = m.inodes.get(f.ino()).cloned().unwrap();
    let first = m.writer.seq();
    inner.commit_data_log(&mut m, &cell).unwrap();
    let last = m.writer.seq() - 1;
    assert!(last > first, "the overwrite went out in one log");
    // Segments that only the old copy of /x kept in use.
    let freed: Vec<usize> = (0..inner.segment_count() as usize)
        .filter(|&s| inner.segment_free_if_durable(&m, s, u64::MAX))
        .filter(|&s| !inner.segment_free_if_durable(&m, s, first))
        .collect();
    assert!(!freed.is_empty(), "the overwrite freed no segment");
    for &s in &freed {
        assert!(
            !inner.segment_free_if_durable(&m, s, last),
            "segment {s} is reusable before the run's last log {last} is durable"
        );
        assert!(inner.segment_free_if_durable(&m, s, last + 1));
    }
    m.unlock_without_writing();
    f.fsync().unwrap();
}

/// The rule roll-forward uses for runs of data-only logs, case by case: `(sequence, flags,
/// descriptors as (inode, has data, has record))` in, the `(log, inode)` parts left out.
#[test]
fn roll_forward_keeps_a_files_part_of_a_run_only_whole() {
    use super::format::{
        DescKind, Descriptor, Summary, FLAG_BEGIN, FLAG_DATA_ONLY, FLAG_END, FLAG_PAD,
    };
    type Log = (u64, u16, Vec<(u64, bool, bool)>);
    let summary = |(sequence, flags, files): &Log| Summary {
        flags: if flags & FLAG_PAD != 0 {
            *flags
        } else {
            flags | FLAG_DATA_ONLY
        },
        payload_blocks: 0,
        pool_id: [0; 16],
        sequence: *sequence,
        checkpoint: 0,
        segment_next: 0,
        prev_crc: 0,
        payload_crc: 0,
        time_ns: 0,
        descriptors: files
            .iter()
            .flat_map(|&(ino, data, record)| {
                let d = |kind| Descriptor {
                    kind,
                    level: 0,
                    blocks: u32::from(kind == DescKind::Data),
                    ino,
                    offset: 0,
                    extra: 0,
                };
                data.then(|| d(DescKind::Data))
                    .into_iter()
                    .chain(record.then(|| d(DescKind::Attr)))
            })
            .collect(),
    };
    let left_out = |logs: &[Log]| -> Vec<(usize, u64)> {
        let summaries: Vec<Summary> = logs.iter().map(summary).collect();
        super::recovery::scan::unfinished_run_data(&summaries.iter().collect::<Vec<_>>())
            .into_iter()
            .collect()
    };
    let (b, e, be) = (FLAG_BEGIN, FLAG_END, FLAG_BEGIN | FLAG_END);
    // A write over three logs, whole.
    let whole: Vec<Log> = vec![
        (1, b, vec![(7, true, false)]),
        (2, 0, vec![(7, true, false)]),
        (3, e, vec![(7, true, true)]),
    ];
    assert_eq!(left_out(&whole), vec![]);
    // The chain ends before its record: all of it out.
    assert_eq!(left_out(&whole[..2]), vec![(0, 7), (1, 7)]);
    // Another run starts where its last log should be.
    let cut = vec![
        whole[0].clone(),
        whole[1].clone(),
        (4, be, vec![(8, true, true)]),
    ];
    assert_eq!(left_out(&cut), vec![(0, 7), (1, 7)]);
    // A file whose record came before another file's log went missing is whole.
    let other = vec![
        (1, b, vec![(7, true, true), (9, true, false)]),
        (3, e, vec![(10, true, true)]),
    ];
    assert_eq!(left_out(&other), vec![(0, 9)]);
    // A cleaning pass's copies (no record) count at the run's last log...
    let copies: Vec<Log> = vec![
        (1, b, vec![(7, true, false)]),
        (2, e, vec![(8, true, false)]),
    ];
    assert_eq!(left_out(&copies), vec![]);
    assert_eq!(left_out(&copies[..1]), vec![(0, 7)]);
    // ... but not when a log of the run is missing, in the middle or first.
    let gap = vec![copies[0].clone(), (3, e, vec![(8, true, false)])];
    assert_eq!(left_out(&gap), vec![(0, 7), (1, 8)]);
    assert_eq!(left_out(&copies[1..]), vec![(0, 8)]);
    // A record alone (an access time) leaves nothing out.
    assert_eq!(left_out(&[(1, be, vec![(7, false, true)])]), vec![]);
    // A run that crosses a segment's end has a pad log between its logs: the sequence is whole,
    // so a cleaning pass's copies on both sides count...
    let padded: Vec<Log> = vec![
        (1, b, vec![(7, true, false)]),
        (2, FLAG_PAD, vec![]),
        (3, e, vec![(8, true, false)]),
    ];
    assert_eq!(left_out(&padded), vec![]);
    // ... and positions count data-only logs only, the pad not among them.
    assert_eq!(left_out(&padded[..2]), vec![(0, 7)]);
    let cut_after_pad = vec![
        padded[0].clone(),
        padded[1].clone(),
        (3, 0, vec![(8, true, false)]),
    ];
    assert_eq!(left_out(&cut_after_pad), vec![(0, 7), (1, 8)]);
    // A log missing after the pad is still missing.
    let gap_after_pad = vec![
        padded[0].clone(),
        padded[1].clone(),
        (4, e, vec![(8, true, false)]),
    ];
    assert_eq!(left_out(&gap_after_pad), vec![(0, 7), (1, 8)]);
}

/// A run an error cut short before its last log leaves maps in memory that recovery would not
/// rebuild: what it superseded waits for a checkpoint, not for the next run's end.
#[test]
fn what_a_run_cut_short_superseded_waits_for_a_checkpoint() {
    use super::format::{FLAG_BEGIN, FLAG_DATA_ONLY, FLAG_END};
    let (fs, f) = pool_with_synced_x(&device(48 << 20), 64 << 20, &pattern(1, 1 << 20));
    let inner = &fs.inner;
    let mut m = inner.lock_meta();
    let cell = m.inodes.get(f.ino()).cloned().unwrap();
    let old = cell.lock().map().get(0);
    let s = crate::tbfs::state::State::seg_of(old, inner.segment_blocks());
    // A run supersedes the block, then stops before its last log (as `?` on an error does).
    inner.log_open(&mut m, FLAG_BEGIN | FLAG_DATA_ONLY);
    let seq = m.writer.seq();
    m.seg_supersede(old, seq, inner.segment_blocks());
    m.seg_inc(old, inner.segment_blocks()); // the test's block stays the file's
    assert_eq!(
        m.seg.soft_dead_at(s),
        u64::MAX,
        "reusable before the run's end"
    );
    inner.log_close(&mut m, 0).unwrap();
    // The next run supersedes another block of the same segment and ends; the cut one's
    // segment still waits.
    let next = cell.lock().map().get(1);
    assert_eq!(
        crate::tbfs::state::State::seg_of(next, inner.segment_blocks()),
        s
    );
    inner.log_open(&mut m, FLAG_BEGIN | FLAG_DATA_ONLY);
    let seq = m.writer.seq();
    m.seg_supersede(next, seq, inner.segment_blocks());
    m.seg_inc(next, inner.segment_blocks());
    inner.log_close(&mut m, FLAG_END).unwrap();
    assert_eq!(
        m.seg.soft_dead_at(s),
        u64::MAX,
        "released by a later run's end"
    );
    // A checkpoint writes the maps in memory: from its last log on, the segment may go.
    inner.commit_checkpoint(&mut m).unwrap();
    assert!(m.seg.soft_dead_at(s) <= m.writer.seq());
    m.unlock_and_write().unwrap();
    f.fsync().unwrap();
}

/// A commit that runs out of segments between its logs (the space check before it fell short)
/// stops the pool with a clear error instead of going on from a writer with nowhere to go:
/// later calls fail even once room comes back, and reopening recovers the file as it was last
/// acknowledged, wholly.
#[test]
fn a_commit_that_finds_no_segment_between_its_logs_stops_the_pool() {
    const FILE: usize = 6 << 20; // six 1 MiB segments' worth
    let old = pattern(1, FILE);
    let new = pattern(2, FILE);
    for ordering in [Ordering::Relaxed, Ordering::Strict] {
        let dev = device(24 << 20);
        let config = Config {
            ordering,
            ..large_file_config(1 << 20)
        };
        let fs = Fs::format(dev.clone(), &config).unwrap();
        let f = fs.open_file("/x", OpenFlags::create()).unwrap();
        f.pwrite(&old, 0).unwrap();
        fs.sync().unwrap();
        // Room for two more segments only, whatever the space check counted.
        fs.inner.lock_meta().stage_segment_picks(Some(2));
        let err = f
            .pwrite(&new, 0)
            .and_then(|_| f.fsync())
            .expect_err("the commit cannot finish");
        assert!(
            matches!(&err, Error::NoSpace(why) if why.contains("middle of a commit")),
            "{ordering:?}: {err}"
        );
        // Room again (as if the cleaner had freed segments): the pool still takes nothing.
        fs.inner.lock_meta().stage_segment_picks(None);
        for (what, r) in [
            ("write", f.pwrite(b"more", 0).map(|_| ())),
            ("sync", f.fsync()),
            (
                "create",
                fs.open_file("/y", OpenFlags::create()).map(|_| ()),
            ),
        ] {
            assert!(
                matches!(r, Err(Error::Poisoned(_))),
                "{ordering:?}: {what} after the failed commit: {r:?}"
            );
        }
        drop((f, fs));
        let (image, _) = checked_clean(&dev, &format!("{ordering:?}"));
        let back = Fs::open(image, &OpenOptions::default()).unwrap();
        assert!(
            read_all(&back, "/x") == old,
            "{ordering:?}: /x is not as last acknowledged"
        );
    }
}

/// A thread whose logs another thread has written while it wrote its own payload does not
/// wait for that thread, which holds on, past them, for a payload of a third file stopped in
/// the device: the log writer is let go while a checkpoint waits for earlier payloads.
#[test]
fn the_log_writer_is_not_held_while_a_checkpoint_waits_for_other_payloads() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = gated_pool(&gated);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let other = fs.open_file("/other", OpenFlags::create()).unwrap();
    fs.sync().unwrap();
    *gated.min.lock().unwrap() = Some(16 * 4096);
    std::thread::scope(|s| {
        // The large payload stops in the device.
        let writer = s.spawn(|| {
            big.pwrite(&pattern(2, 32 * 4096), 0)
                .and_then(|_| big.fsync())
        });
        stopped_rx.recv().unwrap();
        // After it: `/other`'s data as a log with a payload of its own, then a checkpoint,
        // which may be written only once both payloads are. Its sealer's part (writing its
        // payload, then the summaries up to its own) is done below, by hand.
        other.pwrite(&pattern(5, 20 * 4096), 0).unwrap();
        let (own, end) = {
            let mut m = fs.inner.lock_meta();
            let ino = fs.inner.lookup(&m.dirs, &m.inodes, "/other").unwrap();
            let cell = fs.inner.cell(&m.inodes, ino).unwrap();
            fs.inner.commit_data_log(&mut m, &cell).unwrap();
            let end = m.writer.seq();
            let (own, _) = m.writer.take_sealed();
            fs.inner.commit_checkpoint(&mut m).unwrap();
            m.unlock_without_writing();
            (own, end)
        };
        assert_eq!(own.len(), 1, "one payload of its own");
        // Another thread writes the queue: the summaries, then the checkpoint, which waits.
        let inner = &fs.inner;
        let queue = s.spawn(move || inner.write_logs_until(u64::MAX));
        while fs.inner.logs.summaries() < end {
            std::thread::yield_now();
        }
        let (finished, _, sealer) = run_while_stopped(s, &sim, &resume_tx, move || {
            inner.write_own_logs(end, &own, &[])
        });
        assert!(finished, "the sealer waited for the log writer's holder");
        sealer.join().unwrap().unwrap();
        queue.join().unwrap().unwrap();
        writer.join().unwrap().unwrap();
    });
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/other"), pattern(5, 20 * 4096));
    assert_eq!(read_all(&back, "/big"), pattern(2, 32 * 4096));
}

/// Read-write, created if missing, direct.
fn direct_create() -> OpenFlags {
    OpenFlags {
        direct: true,
        ..OpenFlags::create()
    }
}

/// Whether every block of `data` is somewhere in `image`, block-aligned (a log may be split at
/// a segment's end).
fn holds_blocks(image: &[u8], data: &[u8]) -> bool {
    let on_device: std::collections::HashSet<&[u8]> = image.chunks(BLOCK).collect();
    data.chunks(BLOCK).all(|b| on_device.contains(b))
}

/// A direct write returns once its bytes are on the device, without waiting for a checkpoint
/// sealed behind another writer's payload that is still in the device (a superblock refresh
/// seals one like it): the checkpoint's summary waits for that payload, and the direct write's
/// summary, queued behind it, is written later by whoever comes next. Before, each writer's
/// write waited for the other's payloads at every refresh.
#[test]
fn a_direct_write_is_on_the_device_when_it_returns_without_waiting_for_another_writers_payload() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = gated_pool(&gated);
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    let direct = fs.open_file("/direct", direct_create()).unwrap();
    big.pwrite(&pattern(2, 32 * 4096), 0).unwrap();
    direct.pwrite(&pattern(5, 32 * 4096), 0).unwrap();
    fs.sync().unwrap();
    let large = pattern(3, 32 * 4096);
    let new = pattern(6, 32 * 4096);
    *gated.min.lock().unwrap() = Some(16 * 4096);
    std::thread::scope(|s| {
        // The large payload stops in the device.
        let writer = s.spawn(|| big.pwrite(&large, 0).and_then(|_| big.fsync()));
        stopped_rx.recv().unwrap();
        // A checkpoint behind it, which may be written only once the large payload is.
        {
            let mut m = fs.inner.lock_meta();
            fs.inner.commit_checkpoint(&mut m).unwrap();
            m.unlock_without_writing();
        }
        assert!(
            !holds_blocks(&sim.image(), &new),
            "the new bytes are not there yet"
        );
        let direct = &direct;
        let new = &new;
        let (finished, image, wrote) =
            run_while_stopped(s, &sim, &resume_tx, move || direct.pwrite(new, 0));
        assert!(
            finished,
            "the direct write waited for another file's payload"
        );
        assert_eq!(wrote.join().unwrap().unwrap(), new.len());
        assert!(
            holds_blocks(&image, new),
            "the direct write returned before its bytes were on the device"
        );
        writer.join().unwrap().unwrap();
    });
    assert_eq!(read_all(&fs, "/direct"), new);
    direct.fsync().unwrap();
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/direct"), new);
    assert_eq!(read_all(&back, "/big"), large);
}

/// A direct write leaves its summary to the background thread: it returns, its bytes on the
/// device, while that summary is stopped in the device, and the file is whole after a sync
/// and a reopen. (When the writer wrote its summaries itself, each waited for a turn in
/// `sched` with nothing of the writer's data queued: a weight-3 writer got 2.8 shares of 3.)
#[test]
fn a_direct_write_returns_while_the_background_thread_writes_its_summary() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let fs = gated_pool(&gated);
    let f = fs.open_file("/direct", direct_create()).unwrap();
    f.pwrite(&pattern(5, 8 * 4096), 0).unwrap();
    fs.sync().unwrap();
    let new = pattern(6, 8 * 4096);
    // The one-block write after the payload: the piece's summary.
    *gated.exact.lock().unwrap() = Some(4096);
    std::thread::scope(|s| {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (f, new) = (&f, &new);
        let writer = s.spawn(move || {
            let r = f.pwrite(new, 0);
            let _ = done_tx.send(());
            r
        });
        stopped_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the summary was never written");
        let finished = done_rx.recv_timeout(Duration::from_secs(60)).is_ok();
        let image = sim.image();
        resume_tx.send(()).unwrap();
        assert!(finished, "the direct write waited for its summary");
        assert!(
            holds_blocks(&image, new),
            "the direct write returned before its bytes were on the device"
        );
        assert_eq!(writer.join().unwrap().unwrap(), new.len());
    });
    assert_eq!(read_all(&fs, "/direct"), new);
    f.fsync().unwrap();
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/direct"), new);
}

/// Direct writes whose summaries the background thread cannot write (stopped in the device
/// here; waiting in `sched` behind busier classes in life) stop once `BEHIND_BUFFERS` buffers'
/// worth is left unwritten, instead of holding ever more memory; every byte is there after the
/// stop ends.
#[test]
fn direct_writes_stop_leaving_summaries_behind_past_a_bound() {
    let (sim, gated, stopped_rx, resume_tx) = gated_device();
    let buffer = 256 << 10;
    let cfg = Config {
        segment_bytes: 256 << 10,
        superblock_every_bytes: 64 << 20,
        dirty_bytes_max: buffer,
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(gated.clone(), &cfg).unwrap();
    let bound = (buffer * crate::tbfs::limits::BEHIND_BUFFERS) as usize;
    let f = fs.open_file("/direct", direct_create()).unwrap();
    f.pwrite(&pattern(1, 4096), 0).unwrap();
    fs.sync().unwrap();
    // 64 KiB at a time, 2 MiB in all: twice the bound.
    let piece = 16 * 4096;
    let writes = 32;
    let data = pattern(2, writes * piece);
    *gated.exact.lock().unwrap() = Some(4096);
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (f, data, done) = (&f, &data, &done);
        let writer = s.spawn(move || {
            for (i, chunk) in data.chunks(piece).enumerate() {
                f.pwrite(chunk, (i * piece) as u64)?;
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Ok::<_, Error>(())
        });
        stopped_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the first summary was never written");
        // Without the bound the writer finishes all 32 writes while the summary is stopped.
        std::thread::sleep(Duration::from_secs(2));
        let while_stopped = done.load(std::sync::atomic::Ordering::SeqCst);
        resume_tx.send(()).unwrap();
        writer.join().unwrap().unwrap();
        assert!(
            while_stopped * piece <= bound + piece,
            "{while_stopped} writes of 64 KiB returned with their summaries unwritten"
        );
    });
    assert_eq!(read_all(&fs, "/direct"), data);
    f.fsync().unwrap();
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/direct"), data);
}

/// A direct write of several pieces at an offset inside a block: each piece goes out while the
/// next is made, the partial blocks at either end keep the bytes around them, the new file's
/// first piece is synced (its creation needs a checkpoint) and the rest go out as data-only
/// logs. Read back before and after a reopen.
#[test]
fn a_direct_write_in_pieces_keeps_every_byte_and_the_file_around_it() {
    let sim = device(96 << 20);
    let fs = Fs::format(sim.clone(), &large_file_config(1 << 20)).unwrap();
    let f = fs.open_file("/x", direct_create()).unwrap();
    let head = pattern(1, 3 * BLOCK + 100);
    f.pwrite(&head, 0).unwrap();
    let at = 5000u64;
    let data = pattern(2, (20 << 20) + 12_345);
    let before = fs.counters().data_only_logs;
    assert_eq!(f.pwrite(&data, at).unwrap(), data.len());
    assert!(
        fs.counters().data_only_logs > before,
        "the pieces after the first did not go out as data-only logs"
    );
    let mut expect = head[..at as usize].to_vec();
    expect.extend_from_slice(&data);
    assert_eq!(read_all(&fs, "/x"), expect);
    // An append goes out direct too, at the end.
    // A write past the largest file is refused before anything is cut or buffered.
    assert!(matches!(
        f.pwrite(&[7u8; 10], u64::MAX - 2),
        Err(Error::Invalid(_))
    ));
    let tail = pattern(3, 70_000);
    assert_eq!(
        f.append(&tail).unwrap(),
        expect.len() as u64 + tail.len() as u64
    );
    expect.extend_from_slice(&tail);
    assert_eq!(read_all(&fs, "/x"), expect);
    f.fsync().unwrap();
    drop(f);
    drop(fs);
    let back = reopen(&sim);
    assert_eq!(read_all(&back, "/x"), expect);
    checked_clean(&sim, "after direct writes");
}

/// A power cut during a direct write keeps a prefix of its pieces, each whole (a piece's logs
/// are one run, and recovery skips the later logs of a file after a torn one), and the rest of
/// the file as it was; the recovered pool is clean. The cut falls after more and more of the
/// write's device writes.
#[test]
fn a_power_cut_during_a_direct_write_keeps_a_prefix_of_its_pieces_each_whole() {
    let len = 3 * limits::DIRECT_PIECE_BYTES as usize;
    // Where the pieces of a write at offset 0 end: each twice the one before, up to the most.
    let mut ends = Vec::new();
    let mut size = limits::DIRECT_FIRST_PIECE_BYTES as usize;
    let mut at = 0;
    while at < len {
        at = (at + size).min(len);
        ends.push(at);
        size = (size * 2).min(limits::DIRECT_PIECE_BYTES as usize);
    }
    let old = pattern(1, len);
    let new = pattern(2, len);
    let mut kept = std::collections::BTreeSet::new();
    for writes in [0, 3, 6, 9, 12, 16, 20, 25, 30, 40, 60] {
        let sim = device(128 << 20);
        let fs = Fs::format(sim.clone(), &large_file_config(1 << 20)).unwrap();
        let f = fs.open_file("/x", direct_create()).unwrap();
        f.pwrite(&old, 0).unwrap();
        fs.sync().unwrap();
        sim.cut_power_after(writes);
        // Fails once the power is out; nothing is acknowledged durable either way.
        let _ = f.pwrite(&new, 0);
        drop(f);
        drop(fs);
        let dev = Arc::new(SimDevice::from_image(sim.image()));
        let back = Fs::open(dev.clone(), &OpenOptions::default()).unwrap();
        let got = read_all(&back, "/x");
        assert_eq!(got.len(), old.len(), "cut after {writes}");
        let mut whole_new = 0;
        for (k, &end) in ends.iter().enumerate() {
            let range = if k == 0 { 0 } else { ends[k - 1] }..end;
            let bytes = &got[range.clone()];
            if bytes == &new[range.clone()] {
                assert_eq!(
                    whole_new, k,
                    "cut after {writes}: piece {k} kept after one lost"
                );
                whole_new += 1;
            } else {
                assert!(
                    bytes == &old[range],
                    "cut after {writes}: piece {k} is torn"
                );
            }
        }
        kept.insert(whole_new);
        back.close().unwrap();
        checked_clean(
            &dev,
            &format!("recovered after a cut after {writes} writes"),
        );
    }
    assert!(
        kept.len() > 2,
        "the cuts did not fall between pieces (pieces kept: {kept:?}, of {})",
        ends.len()
    );
}

/// A device that notes the calling thread's I/O priority at every read of `segment` bytes (a
/// background pass reading a victim whole).
#[derive(Debug)]
struct PrioNotingDevice {
    inner: Arc<SimDevice>,
    segment: usize,
    seen: std::sync::Mutex<Vec<crate::sched::Prio>>,
}

impl Device for PrioNotingDevice {
    fn kind(&self) -> &'static str {
        "prio-noting"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if buf.len() == self.segment {
            let prio = crate::sched::Prio::of_current_thread();
            self.seen.lock().unwrap().push(prio);
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn a_background_pass_under_pressure_runs_best_effort_and_one_with_room_stays_idle() {
    use crate::sched::{Class, Prio, LEVEL_MAX};
    let idle = Prio {
        class: Class::Idle,
        level: LEVEL_MAX,
    };
    // The same history of overwrites and appends in a small pool (little room left) and in a
    // large one; the pass runs in both, as it cleans while less than 90 % is free. The
    // background thread is stopped at once: the test makes the pass and reads the wake-up it
    // leaves.
    for (pool_bytes, pressed) in [(3584u64 << 10, true), (32 << 20, false)] {
        let cfg = Config {
            gc_free_percent: 90,
            background_gc: true,
            ..small_config(Ordering::Relaxed, Barrier::Superblock)
        };
        let dev = Arc::new(PrioNotingDevice {
            inner: device(pool_bytes),
            segment: cfg.segment_bytes as usize,
            seen: std::sync::Mutex::new(Vec::new()),
        });
        let fs = Fs::format(dev.clone(), &cfg).unwrap();
        fs.inner.stop_background();
        let expect_cold = hot_and_cold_history(&fs);
        // Superblocks handed to the background thread decide which segments are reusable.
        fs.inner.write_logs_until(u64::MAX).unwrap();
        let mut urgent = fs.inner.cleaning_is_urgent(&fs.inner.lock_meta());
        // How much room the history leaves in the small pool depends on the victims its own
        // cleaning chose, by age, so on its timing: overwrite until the free space is within
        // the urgent mark (between it and the low-water mark no writer cleans).
        let hot = fs.open_file("/hot", OpenFlags::create()).unwrap();
        for i in 0..400u64 {
            if urgent || !pressed {
                break;
            }
            hot.pwrite(&pattern(i + 5000, 4096), (i % 8) * 4096)
                .unwrap();
            hot.fsync().unwrap();
            fs.inner.write_logs_until(u64::MAX).unwrap();
            urgent = fs.inner.cleaning_is_urgent(&fs.inner.lock_meta());
        }
        drop(hot);
        assert_eq!(urgent, pressed, "pool of {pool_bytes} bytes");
        dev.seen.lock().unwrap().clear();
        let cleaned = fs.counters().segments_cleaned;
        fs.inner.wake_reasons().clean = false;
        let after = std::thread::scope(|s| {
            s.spawn(|| {
                idle.apply_to_current_thread().unwrap();
                fs.inner.background_clean().unwrap();
                Prio::of_current_thread()
            })
            .join()
            .unwrap()
        });
        assert_eq!(after, idle, "the pass put its thread back to idle");
        // Under pressure, a pass that emptied segments asks for the next one at once.
        let emptied = fs.counters().segments_cleaned > cleaned;
        assert!(
            emptied || !pressed,
            "the pass under pressure emptied nothing"
        );
        assert_eq!(
            fs.inner.wake_reasons().clean,
            pressed,
            "pool of {pool_bytes} bytes: the next pass asked for at once"
        );
        let seen = dev.seen.lock().unwrap().clone();
        assert!(!seen.is_empty(), "the pass read no victim");
        let expect = if pressed {
            crate::tbfs::space::cleaner::URGENT_PRIO
        } else {
            idle
        };
        assert!(
            seen.iter().all(|&p| p == expect),
            "pool of {pool_bytes} bytes: victims read at {seen:?}, expected {expect}"
        );
        assert_eq!(read_all(&fs, "/cold"), expect_cold);
    }
}

#[test]
fn writing_a_superblock_does_not_move_a_stepped_clock() {
    // A superblock is written by whichever thread gets to it first, most often the background
    // one, at a time the machine's speed decides. Had its time moved a stepped clock, the
    // times the calls read after it (segment ages, and so the cleaner's victims) would depend
    // on that: `tests/tbfs_tax.rs` copied different amounts from run to run in debug builds.
    let clock = Clock::stepped(1 << 40, Duration::from_millis(1));
    let config = Config {
        clock: clock.clone(),
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(device(16 << 20), &config).unwrap();
    fs.inner.stop_background();
    write_file(&fs, "/a", &pattern(5, 8192));
    let superblocks = fs.counters().superblock_writes;
    {
        let mut m = fs.inner.lock_meta();
        fs.inner.seal_superblock(&mut m);
        m.unlock_without_writing();
    }
    let before = clock.peek_ns();
    fs.inner.write_logs_until(u64::MAX).unwrap();
    assert_eq!(fs.counters().superblock_writes, superblocks + 1);
    assert_eq!(
        clock.peek_ns(),
        before,
        "writing the superblock moved the pool's clock"
    );
}

#[test]
fn a_superblock_another_thread_took_is_written_before_writing_the_logs_returns() {
    let dev = device(16 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryLog),
    )
    .unwrap();
    // Only the test's threads write the queue.
    fs.inner.stop_background();
    let f = fs.open_file("/a", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(3, 8192), 0).unwrap();
    fs.sync().unwrap();
    let superblocks = fs.counters().superblock_writes;
    // A superblock queued and not yet written.
    {
        let mut m = fs.inner.lock_meta();
        fs.inner.seal_superblock(&mut m);
        m.unlock_without_writing();
    }
    let (taken_tx, taken_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    fs.inner.superblocks.set_gate((taken_tx, go_rx));
    std::thread::scope(|s| {
        let inner = &fs.inner;
        // Takes the superblock from the queue and stops before writing it.
        let taker = s.spawn(move || inner.write_logs_until(u64::MAX));
        taken_rx.recv().unwrap();
        // Meanwhile another thread writes the logs up to the end of the queue: once it
        // returns, the superblock is written (by it, here: the taker is stopped).
        let written = fs.inner.write_logs_until(u64::MAX);
        let after = fs.counters().superblock_writes;
        go_tx.send(()).unwrap();
        taker.join().unwrap().unwrap();
        written.unwrap();
        assert_eq!(
            after,
            superblocks + 1,
            "the logs were written but the superblock taken from the queue was not"
        );
    });
    // Written once, not again by the taker.
    assert_eq!(fs.counters().superblock_writes, superblocks + 1);
    let back = reopen(&dev);
    assert_eq!(read_all(&back, "/a"), pattern(3, 8192));
}

/// Relaxed ordering, a 1 MiB buffer, and no superblock refresh (which writes a checkpoint)
/// during a test's few MiB of writes.
fn placing_config() -> Config {
    Config {
        superblock_every_bytes: 64 << 20,
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    }
}

/// `/old` and `/kept` made durable in a fresh pool (relaxed ordering, a 1 MiB buffer), then
/// `/old` deleted and `/new` created under its number.
fn pool_with_a_reused_number(dev: &Arc<SimDevice>) -> (Fs, File, File) {
    let fs = Fs::format(dev.clone(), &placing_config()).unwrap();
    fs.open_file("/old", OpenFlags::create())
        .unwrap()
        .pwrite(&pattern(1, 65536), 0)
        .unwrap();
    let kept = fs.open_file("/kept", OpenFlags::create()).unwrap();
    kept.pwrite(&pattern(2, 65536), 0).unwrap();
    fs.sync().unwrap();
    let old_ino = fs.stat("/old").unwrap().ino;
    fs.unlink("/old").unwrap();
    let new = fs.open_file("/new", OpenFlags::create()).unwrap();
    assert_eq!(
        fs.stat("/new").unwrap().ino,
        old_ino,
        "the number is reused"
    );
    (fs, kept, new)
}

#[test]
fn a_full_buffer_places_a_new_files_data_and_a_crash_does_not_replay_it_onto_its_number() {
    let dev = device(32 << 20);
    let (fs, kept, new) = pool_with_a_reused_number(&dev);
    let before = fs.counters();
    // Three times the buffer: it goes out while `/new`'s creation waits for a checkpoint.
    let data = pattern(4, 3 << 20);
    new.pwrite(&data, 0).unwrap();
    let after = fs.counters();
    assert_eq!(
        after.checkpoints, before.checkpoints,
        "a full buffer made a checkpoint"
    );
    assert!(after.data_only_logs > before.data_only_logs);
    let placed = after.placed_blocks - before.placed_blocks;
    assert!(placed >= (2 << 20) / BLOCK as u64, "{placed} blocks placed");
    // Placed blocks are file data: the metadata written with them is the summaries of logs of
    // at most a 64 KiB segment each.
    let metadata = after.metadata_blocks - before.metadata_blocks;
    assert!(metadata < placed / 8, "{metadata} metadata blocks");
    // A file the checkpoint holds as it is syncs as a data-only log after the placed ones.
    kept.pwrite(&pattern(3, 8192), 0).unwrap();
    kept.fsync().unwrap();
    assert_eq!(fs.counters().checkpoints, before.checkpoints);
    let mut kept_want = pattern(2, 65536);
    kept_want[..8192].copy_from_slice(&pattern(3, 8192));

    // A crash now: the deletion and the creation were never durable, so `/old` is back with its
    // own bytes, not `/new`'s, though they were logged under its number.
    let (image, _) = checked_clean(&dev, "placed data after the checkpoint");
    let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
    assert!(
        read_all(&crashed, "/old") == pattern(1, 65536),
        "/old lost its bytes"
    );
    assert!(matches!(crashed.stat("/new"), Err(Error::NotFound(_))));
    assert!(
        read_all(&crashed, "/kept") == kept_want,
        "/kept lost its sync"
    );
    drop(crashed);

    // The next checkpoint maps the placed blocks where they were written.
    fs.sync().unwrap();
    let (image, _) = checked_clean(&dev, "after the checkpoint that maps placed data");
    let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
    assert!(
        read_all(&crashed, "/new") == data,
        "/new lost its checkpoint"
    );
    assert!(matches!(crashed.stat("/old"), Err(Error::NotFound(_))));
    assert!(
        read_all(&crashed, "/kept") == kept_want,
        "/kept after the checkpoint"
    );
}

#[test]
fn a_renamed_files_data_goes_out_placed_and_what_it_superseded_waits_for_a_checkpoint() {
    let dev = device(32 << 20);
    let fs = Fs::format(dev.clone(), &placing_config()).unwrap();
    let f = fs.open_file("/a", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 65536), 0).unwrap();
    fs.sync().unwrap();
    let ino = fs.stat("/a").unwrap().ino;
    let block0 = |fs: &Fs| {
        let m = fs.inner.lock_meta();
        let cell = fs.inner.cell(&m.inodes, ino).unwrap();
        let at = cell.lock().map().get(0);
        at
    };
    let first = block0(&fs);
    fs.rename("/a", "/b").unwrap();
    let before = fs.counters();
    let data = pattern(5, 3 << 20);
    f.pwrite(&data, 0).unwrap();
    assert_eq!(fs.counters().checkpoints, before.checkpoints);
    assert!(fs.counters().placed_blocks > before.placed_blocks);
    {
        // The crash state below reads `/a`'s first block where the checkpoint put it: its
        // segment may not be reused before a checkpoint is durable, as it would be once the
        // superseding log alone were (which roll-forward does not replay).
        assert_ne!(block0(&fs), first, "block 0 was rewritten");
        let inner = &fs.inner;
        let m = inner.lock_meta();
        let s = state::State::seg_of(first, inner.segment_blocks());
        assert!(
            m.seg.dead_at(s) > inner.superblocks.checkpoint_seq(),
            "segment {s} is reusable before a checkpoint"
        );
        assert!(!inner.segment_free_if_durable(&m, s, u64::MAX));
    }
    let (image, _) = checked_clean(&dev, "placed data of a renamed file");
    let crashed = Fs::open(image, &OpenOptions::default()).unwrap();
    assert!(
        read_all(&crashed, "/a") == pattern(1, 65536),
        "/a lost its bytes"
    );
    assert!(matches!(crashed.stat("/b"), Err(Error::NotFound(_))));
    drop(crashed);
    f.fsync().unwrap();
    let crashed = reopen(&dev);
    assert!(read_all(&crashed, "/b") == data, "/b lost its sync");
    assert!(matches!(crashed.stat("/a"), Err(Error::NotFound(_))));
}

#[test]
fn a_pool_of_the_older_version_is_upgraded_in_both_superblock_copies_on_open() {
    let dev = device(8 << 20);
    let fs = Fs::format(
        dev.clone(),
        &small_config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    fs.open_file("/f", OpenFlags::create())
        .unwrap()
        .pwrite(&pattern(1, 10000), 0)
        .unwrap();
    fs.close().unwrap();
    // Both copies rewritten as version 1 (the records and logs are this build's; what is
    // checked is the superblocks' upgrade).
    let mut image = dev.image();
    let version_of = |image: &[u8], copy: usize| {
        let b = &image[copy * BLOCK..(copy + 1) * BLOCK];
        u32::from_le_bytes(b[8..12].try_into().unwrap())
    };
    // A superblock block `b` saying `version`, its CRC made to match.
    let set_version = |b: &mut [u8], version: u32| {
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = format::crc_blocks(&b[..BLOCK - 4]);
        b[BLOCK - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    for copy in 0..2 {
        set_version(&mut image[copy * BLOCK..(copy + 1) * BLOCK], 1);
    }
    let old = Arc::new(SimDevice::from_image(image));
    let sb = format::Superblock::decode(&old.image()[..BLOCK], 8 << 20).unwrap();
    assert_eq!(sb.version, 1);
    // Read-only: nothing is written, so the pool stays as it was.
    let view = Fs::open(
        old.clone(),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(read_all(&view, "/f"), pattern(1, 10000));
    drop(view);
    assert_eq!(
        [version_of(&old.image(), 0), version_of(&old.image(), 1)],
        [1, 1]
    );
    let fs = Fs::open(old.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&fs, "/f"), pattern(1, 10000));
    assert_eq!(
        [version_of(&old.image(), 0), version_of(&old.image(), 1)],
        [format::VERSION; 2],
        "a copy of the older version is left for its builds to take"
    );
    // A version from a newer build is refused with its number.
    let mut b = old.image()[..BLOCK].to_vec();
    set_version(&mut b, format::VERSION + 1);
    let err = format::Superblock::decode(&b, 8 << 20).unwrap_err();
    let newer = format!("format version {}", format::VERSION + 1);
    assert!(err.0.contains(&newer), "{}", err.0);
}

#[test]
fn a_payload_dropped_as_the_last_holder_of_its_buffers_gives_them_back_for_reuse() {
    // On a thread of its own, so its spare buffers start empty.
    std::thread::spawn(|| {
        let blocks: Vec<Arc<format::Block>> = (0..4u8)
            .map(|i| crate::tbfs::blocks::shared_copy(&[i; BLOCK]))
            .collect();
        let alone: Vec<*const format::Block> = blocks[1..].iter().map(Arc::as_ptr).collect();
        // A file's buffer still holding the first.
        let held = blocks[0].clone();
        let payload = crate::tbfs::log::AheadPayload {
            seq: 1,
            start: 2,
            blocks,
            crcs: vec![None; 4],
            inos: vec![7],
            flush: false,
            charge: None,
            crc: std::sync::OnceLock::new(),
            state: parking_lot::Mutex::new(crate::tbfs::log::AheadState::Pending),
            done: parking_lot::Condvar::new(),
            started: std::sync::Mutex::new(None),
        };
        drop(payload);
        assert_eq!(Arc::strong_count(&held), 1, "a shared buffer was kept");
        // This thread's spares are the three buffers the payload held alone (had they gone
        // back to the allocator, they would be taken from the shared spares, or be none).
        let next: Vec<Arc<format::Block>> = (0..3)
            .map(|_| crate::tbfs::blocks::take_spare().expect("a spare buffer"))
            .collect();
        let mut got: Vec<*const format::Block> = next.iter().map(Arc::as_ptr).collect();
        got.sort();
        let mut want = alone;
        want.sort();
        assert_eq!(got, want, "the payload's buffers were not kept for reuse");
    })
    .join()
    .unwrap();
}

#[test]
fn writes_through_append_handles_on_several_threads_never_overwrite_each_other() {
    let fs = Fs::format(device(64 << 20), &large_file_config(1 << 20)).unwrap();
    drop(fs.open_file("/log", OpenFlags::create()).unwrap());
    let (threads, appends) = (8u8, 200usize);
    std::thread::scope(|s| {
        for t in 0..threads {
            let fs = &fs;
            s.spawn(move || {
                let flags = OpenFlags {
                    read: false,
                    append: true,
                    ..OpenFlags::create()
                };
                let mut f = fs.open_file("/log", flags).unwrap();
                for i in 0..appends {
                    // Each thread's records are its own byte, of varying lengths.
                    let record = vec![b'a' + t; 1 + (i * 7 + t as usize) % 61];
                    assert_eq!(f.write(&record).unwrap(), record.len());
                }
            });
        }
    });
    let expected: usize = (0..threads)
        .map(|t| {
            (0..appends)
                .map(|i| 1 + (i * 7 + t as usize) % 61)
                .sum::<usize>()
        })
        .sum();
    let f = fs.open_file("/log", OpenFlags::read_only()).unwrap();
    let mut all = vec![0u8; expected + 1];
    assert_eq!(f.pread(&mut all, 0).unwrap(), expected, "appends were lost");
    for t in 0..threads {
        let want: usize = (0..appends).map(|i| 1 + (i * 7 + t as usize) % 61).sum();
        let got = all[..expected].iter().filter(|&&b| b == b'a' + t).count();
        assert_eq!(got, want, "thread {t}'s bytes");
    }
}

/// Writes files of `len` bytes into `fs` until a write or sync fails; returns every file whose
/// write was acknowledged (synced or not) and the error that stopped it.
fn fill_until_error(
    fs: &Fs,
    tag: &str,
    len: usize,
    sync_each: bool,
) -> (Vec<(String, Vec<u8>)>, Error) {
    let mut acked = Vec::new();
    for i in 0u64.. {
        let path = format!("/{tag}{i}");
        let data = pattern(i + len as u64, len);
        let f = match fs.open_file(&path, OpenFlags::create()) {
            Ok(f) => f,
            Err(e) => return (acked, e),
        };
        if let Err(e) = f.pwrite(&data, 0) {
            // Refused before any of it was buffered.
            assert_eq!(
                f.stat().unwrap().size,
                0,
                "{path} ({len} bytes): a refused write left data: {e}"
            );
            return (acked, e);
        }
        acked.push((path, data));
        let synced = if sync_each {
            f.fsync()
        } else if i % 8 == 7 {
            fs.sync()
        } else {
            Ok(())
        };
        if let Err(e) = synced {
            return (acked, e);
        }
    }
    unreachable!("a pool of finite size filled")
}

#[test]
fn a_full_pool_answers_no_space_and_stays_usable() {
    // Filling a pool must end in `NoSpace` before anything is written, never in a commit that
    // runs out of segments half-way (which poisons the pool), whatever the write sizes and
    // however often superblock refreshes and cleaning passes run; and the pool then takes
    // reads, unlinks, syncs and the writes that fit.
    for (len, sync_each, refresh_every) in [
        (4 << 10, true, 256 << 10),
        (12 << 10, false, 256 << 10),
        (60 << 10, true, 64 << 10),
        (200 << 10, false, 1 << 20),
        (1 << 20, true, 256 << 10),
        (1 << 20, false, 64 << 10),
    ] {
        let ctx = format!("len {len} sync_each {sync_each} refresh {refresh_every}");
        let dev = device(4 << 20);
        let config = Config {
            superblock_every_bytes: refresh_every,
            ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
        };
        let fs = Fs::format(dev.clone(), &config).unwrap();
        let (mut kept, err) = fill_until_error(&fs, "a", len, sync_each);
        assert!(matches!(err, Error::NoSpace(_)), "{ctx}: {err}");
        fs.inner
            .check_not_poisoned()
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        // What a sync refused is still there to read, and goes out once deletes make room.
        for (path, data) in &kept {
            assert_eq!(&read_all(&fs, path), data, "{ctx}: {path}");
        }
        // Half of what was written goes; the room it leaves takes new files.
        let gone: Vec<_> = kept
            .iter()
            .skip(1)
            .step_by(2)
            .map(|(p, _)| p.clone())
            .collect();
        for path in &gone {
            fs.unlink(path)
                .unwrap_or_else(|e| panic!("{ctx}: unlink {path}: {e}"));
        }
        kept.retain(|(p, _)| !gone.contains(p));
        fs.sync()
            .unwrap_or_else(|e| panic!("{ctx}: sync after unlinks: {e}"));
        // A write that fits: the writer cleans for it.
        let again = pattern(99, len.min(64 << 10));
        write_file(&fs, "/again", &again);
        kept.push(("/again".to_string(), again));
        fs.sync().unwrap();
        for (path, data) in &kept {
            assert_eq!(&read_all(&fs, path), data, "{ctx}: {path}");
        }
        let (image, _) = checked_clean(&dev, &ctx);
        let reopened = Fs::open(image, &OpenOptions::default()).unwrap();
        for (path, data) in &kept {
            assert_eq!(&read_all(&reopened, path), data, "{ctx}: reopened {path}");
        }
    }
}

/// Live blocks of the files `kept` moved as a full cleaning pass moves them (marked dirty, and
/// written by a checkpoint and superblock that may use the reserve), file by file, until at
/// most `target` blocks are free: what a fill's passes that gained nothing leave behind, staged
/// so that it does not depend on which victims they happened to pick.
fn spend_free_blocks_on_moves(fs: &Fs, kept: &[(String, Vec<u8>)], target: u64) {
    let inner = &fs.inner;
    for (path, data) in kept {
        let mut m = inner.lock_meta();
        if inner.free_blocks(&m) <= target {
            break;
        }
        let ino = inner.lookup(&m.dirs, &m.inodes, path).unwrap();
        let cell = m.inodes[&ino].clone();
        {
            let mut st = cell.lock();
            for (index, block) in data.chunks(BLOCK).enumerate() {
                let mut copy = block.to_vec();
                copy.resize(BLOCK, 0);
                let gen = st.take_gen();
                let buf = crate::tbfs::blocks::shared_copy(&copy);
                st.dirty_mut()
                    .insert(index as u64, crate::tbfs::inode::DirtyBlock::new(gen, buf));
                inner.budget.add(BLOCK as u64);
            }
        }
        m.changes.changed(ino);
        inner.dirty.lock().unwrap().insert(ino);
        let was = m.refresh.set_running(true);
        let r = inner
            .commit_checkpoint_for_superblock(&mut m)
            .and_then(|()| inner.write_superblock(&mut m));
        m.refresh.set_running(was);
        r.unwrap();
    }
    let free = inner.free_blocks(&inner.lock_meta());
    assert!(free <= target, "{free} blocks still free");
}

#[test]
fn a_sync_after_deletes_in_a_pool_below_its_reserve_does_not_answer_no_space() {
    // A pool whose free space fell below the reserve (the cleaner's checkpoints may use it)
    // before half its files are deleted, and whose every segment still holds live blocks
    // after. The
    // sync's checkpoint may use the reserve on the strength of the deletes; the cleaning its
    // space check runs first writes a checkpoint of its own that records them, so the sync's
    // checkpoint, started again, has no such credit: cleaning must then give back room with
    // light passes whose victims repay the reserve they borrow, not stop short of them.
    //
    // On a stepped clock: the fill's cleaning passes choose victims by segment age, so on the
    // wall clock the state the staging starts from depended on how fast the test ran.
    let len = 12 << 10;
    let dev = device(4 << 20);
    let config = Config {
        clock: Clock::stepped(1 << 40, Duration::from_micros(1)),
        ..small_config(Ordering::Relaxed, Barrier::EveryCheckpoint)
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let (mut kept, err) = fill_until_error(&fs, "a", len, false);
    assert!(matches!(err, Error::NoSpace(_)), "{err}");
    let reserve = fs.inner.reserve_blocks();
    // Moved: every fourth file, one of those that stay, so that neither the segments it leaves
    // nor those it goes to are emptied by the deletes below.
    let stay: Vec<_> = kept.iter().step_by(4).cloned().collect();
    spend_free_blocks_on_moves(&fs, &stay, reserve - 4);
    // Checked before the deletes: those that would take the debt past the free room write
    // their checkpoint first (`Engine::record_deletes_first`), whose space check may clean.
    {
        let m = fs.inner.lock_meta();
        let (reserve, _) = fs.inner.space_margins(&m);
        assert!(
            fs.inner.free_blocks(&m) < reserve,
            "the pool is below its reserve"
        );
    }
    let gone: Vec<_> = kept
        .iter()
        .skip(1)
        .step_by(2)
        .map(|(p, _)| p.clone())
        .collect();
    for path in &gone {
        fs.unlink(path).unwrap();
    }
    kept.retain(|(p, _)| !gone.contains(p));
    fs.sync()
        .unwrap_or_else(|e| panic!("sync after unlinks: {e}"));
    let again = pattern(99, len);
    write_file(&fs, "/again", &again);
    kept.push(("/again".to_string(), again));
    fs.sync().unwrap();
    for (path, data) in &kept {
        assert_eq!(&read_all(&fs, path), data, "{path}");
    }
    let (image, _) = checked_clean(&dev, "below the reserve");
    let reopened = Fs::open(image, &OpenOptions::default()).unwrap();
    for (path, data) in &kept {
        assert_eq!(&read_all(&reopened, path), data, "reopened {path}");
    }
}

#[test]
fn a_deleted_file_a_snapshot_keeps_is_pinned_whole_and_released_whole() {
    // A large file's blocks are pinned together when it is deleted under a snapshot
    // (`State::pin_all`), as runs of adjacent blocks: every block must be pinned once, counted in
    // its segment, written to the pinned table, readable through the snapshot, and given back
    // when the snapshot goes.
    let dev = device(16 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    let data = pattern(5, 2 << 20);
    write_file(&fs, "/big", &data);
    write_file(&fs, "/small", &pattern(6, 8 << 10));
    let snap = fs.snapshot(Some("keep")).unwrap();
    // Stretches of adjacent blocks in the file's map: the runs its pins may take at most.
    let file_runs = {
        let m = fs.inner.lock_meta();
        let ino = fs.inner.lookup(&m.dirs, &m.inodes, "/big").unwrap();
        let blocks = m.inodes[&ino].lock().map().blocks.clone();
        1 + blocks.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64
    };
    fs.unlink("/big").unwrap();
    fs.unlink("/small").unwrap();
    fs.sync().unwrap();
    {
        let m = fs.inner.lock_meta();
        // The files' data, and the metadata blocks the snapshot references that changed.
        let pins = m.life.pins().len();
        let file_blocks = (data.len() / BLOCK) as u64;
        assert!(pins >= file_blocks + 2, "{pins} pins");
        let runs = m.life.pins().run_count() as u64;
        assert_eq!(
            m.life.pins().anchor_entries() as u64,
            runs,
            "one anchor entry per run"
        );
        // One run per stretch of the file's blocks, and at most one per other pinned block.
        assert!(
            runs <= file_runs + (pins - file_blocks),
            "{runs} runs for {pins} pins, the file in {file_runs} stretches"
        );
        assert!(
            file_runs * 8 < file_blocks,
            "the file is in {file_runs} stretches"
        );
        let per_segment: u64 = m.seg.pinned_counts().iter().map(|&n| u64::from(n)).sum();
        assert_eq!(per_segment, pins, "every pin counted in its segment once");
    }
    let space = fs.space().unwrap();
    assert!(space.pinned_by_snapshots >= data.len() as u64, "{space:?}");
    assert_eq!(fs.at(snap).unwrap().read_file("/big").unwrap(), data);
    let (image, _) = checked_clean(&dev, "pinned");
    let reopened = Fs::open(image, &OpenOptions::default()).unwrap();
    assert_eq!(reopened.at(snap).unwrap().read_file("/big").unwrap(), data);
    fs.set_snapshot(snap, false).unwrap();
    fs.sync().unwrap();
    {
        let m = fs.inner.lock_meta();
        assert!(m.life.pins().is_empty() && m.life.pins().anchor_entries() == 0);
        assert!(m.seg.pinned_counts().iter().all(|&n| n == 0));
    }
    checked_clean(&dev, "released");
}

#[test]
fn the_cleaner_works_around_a_deleted_file_a_snapshot_keeps_and_moves_its_neighbours_after() {
    // A file deleted under a snapshot shares its segments with a live file. The cleaner must
    // leave the pinned runs where they are (the snapshot names them), still reclaim what it can
    // elsewhere, and once the snapshot is dropped, move the live neighbours out and reuse the
    // space. At every step the snapshot (while it exists) and the live file read back whole, the
    // pin counts agree with the runs, and fsck finds the pool clean.
    let dev = device(16 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    let kept_data = pattern(7, 1 << 20);
    let live_data = pattern(8, 1 << 20);
    let kept = fs.open_file("/kept", OpenFlags::create()).unwrap();
    let live = fs.open_file("/live", OpenFlags::create()).unwrap();
    // Interleaved, so each segment holds some of both files.
    for (i, (k, l)) in kept_data
        .chunks(32 << 10)
        .zip(live_data.chunks(32 << 10))
        .enumerate()
    {
        let at = (i * (32 << 10)) as u64;
        kept.pwrite(k, at).unwrap();
        kept.fsync().unwrap();
        live.pwrite(l, at).unwrap();
        live.fsync().unwrap();
    }
    drop((kept, live));
    let snap = fs.snapshot(Some("keeps /kept")).unwrap();
    fs.unlink("/kept").unwrap();
    fs.sync().unwrap();
    // Garbage elsewhere for the cleaner to reclaim.
    let filler = half_live_files(&fs, 40, 64 << 10);
    let live_ino = fs.stat("/live").unwrap().ino;
    let live_map = |fs: &Fs| {
        let m = fs.inner.lock_meta();
        let blocks = m.inodes[&live_ino].lock().map().blocks.clone();
        blocks
    };
    let check_pins = |fs: &Fs, ctx: &str| {
        let m = fs.inner.lock_meta();
        let sb = fs.inner.segment_blocks();
        let mut per_segment = vec![0u64; fs.inner.segment_count() as usize];
        for r in m.life.pins().runs() {
            for b in r.start..r.end() {
                let s = crate::tbfs::state::State::seg_of(b, sb);
                per_segment[s] += 1;
                assert!(
                    !fs.inner.segment_free(&m, s),
                    "{ctx}: pinned block {b} in free segment {s}"
                );
            }
        }
        let counted: Vec<u64> = m
            .seg
            .pinned_counts()
            .iter()
            .map(|&n| u64::from(n))
            .collect();
        assert_eq!(
            counted, per_segment,
            "{ctx}: pinned counts and runs disagree"
        );
        m.life.pins().len()
    };
    let pinned = check_pins(&fs, "before cleaning");
    assert!(pinned >= (kept_data.len() / BLOCK) as u64, "{pinned} pins");
    let before = live_map(&fs);
    let report = fs.gc(0.9).unwrap();
    assert!(report.segments_cleaned > 0, "{report:?}");
    assert_eq!(
        check_pins(&fs, "after cleaning"),
        pinned,
        "the cleaner released pins"
    );
    assert_eq!(fs.at(snap).unwrap().read_file("/kept").unwrap(), kept_data);
    assert_eq!(read_all(&fs, "/live"), live_data);
    for (path, data) in &filler {
        assert_eq!(&read_all(&fs, path), data, "{path}");
    }
    let (image, _) = checked_clean(&dev, "cleaned around the pins");
    let reopened = Fs::open(image, &OpenOptions::default()).unwrap();
    assert_eq!(
        reopened.at(snap).unwrap().read_file("/kept").unwrap(),
        kept_data
    );
    assert_eq!(
        reopened.inner.lock_meta().life.pins().len(),
        pinned,
        "the pins as recovery finds them"
    );
    check_pins(&reopened, "reopened");
    drop(reopened);

    // The snapshot goes: its pins are released and the segments they were in can be cleaned,
    // which moves the live file's blocks out of them.
    fs.set_snapshot(snap, false).unwrap();
    fs.sync().unwrap();
    assert_eq!(check_pins(&fs, "dropped"), 0);
    fs.gc(0.9).unwrap();
    let after = live_map(&fs);
    let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert!(moved > 0, "the cleaner left every block of /live in place");
    assert_eq!(read_all(&fs, "/live"), live_data);
    let (image, _) = checked_clean(&dev, "cleaned after the drop");
    let reopened = Fs::open(image, &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&reopened, "/live"), live_data);
    assert!(matches!(reopened.at(snap), Err(Error::NotFound(_))));
}

#[test]
fn a_real_time_writers_small_write_leaves_a_buffer_others_filled_to_them() {
    let config = Config {
        dirty_bytes_max: 1 << 20,
        ..small_config(Ordering::Relaxed, Barrier::EveryLog)
    };
    let fs = Fs::format(device(16 << 20), &config).unwrap();
    let be = fs.open_file("/be", OpenFlags::create()).unwrap();
    let rt = fs.open_file("/rt", OpenFlags::create()).unwrap();
    fs.sync().unwrap();
    // Another writer fills the buffer to just below its limit (below the write-behind size).
    let filled = (1 << 20) - 4096;
    be.pwrite(&pattern(1, filled), 0).unwrap();
    let logs = fs.counters().logs;
    let buffered = fs.inner.buffered_bytes();
    assert!(buffered >= filled as u64, "buffered {buffered}");
    // A real-time thread's small write takes the buffer past it.
    let written = std::thread::scope(|s| {
        s.spawn(|| {
            crate::sched::Prio {
                class: crate::sched::Class::Rt,
                level: 0,
            }
            .apply_to_current_thread()
            .expect("the real-time I/O class (this test needs the privilege to set it)");
            rt.pwrite(&pattern(2, 8192), 0).unwrap()
        })
        .join()
        .unwrap()
    });
    assert_eq!(written, 8192);
    assert_eq!(
        fs.counters().logs,
        logs,
        "the real-time write sealed the other writer's buffered data"
    );
    assert!(fs.inner.buffered_bytes() > fs.inner.buffer_limit());
    // The other writer's next write commits it; the real-time file's sync commits its own.
    be.pwrite(&pattern(3, 4096), filled as u64).unwrap();
    assert!(fs.counters().logs > logs);
    rt.fdatasync().unwrap();
    assert_eq!(read_all(&fs, "/rt"), pattern(2, 8192));
    let mut want = pattern(1, filled);
    want.extend_from_slice(&pattern(3, 4096));
    assert_eq!(read_all(&fs, "/be"), want);
}

/// The engine finds the scheduler behind its device (a downcast of the device itself, not of
/// the `Arc` holding it): while room is short, a best-effort writer on a scheduled pool takes a
/// turn by its tenant's weight, and on a pool without a scheduler it does not.
#[test]
fn a_writer_on_a_scheduled_pool_takes_a_turn_for_room_while_it_is_short() {
    use crate::sched::{Charge, SchedDevice, Scheduler};
    let cfg = small_config(Ordering::Strict, Barrier::EveryCheckpoint);
    let sched = Scheduler::new(
        Arc::new(SimDevice::new(16 << 20)),
        crate::sched::Config::default(),
    )
    .expect("scheduler");
    let scheduled: Arc<dyn Device> = Arc::new(SchedDevice::new(sched));
    let plain: Arc<dyn Device> = Arc::new(SimDevice::new(16 << 20));
    let charge = Charge::of_current_thread();
    for (dev, turns) in [(scheduled, true), (plain, false)] {
        let fs = Fs::format(dev, &cfg).expect("format");
        fs.inner.budget.set_room_short(true);
        let turn = fs
            .inner
            .room_turn(Some(WriterKey::of(charge)), Some(charge), 1);
        assert_eq!(turn.is_some(), turns);
    }
}

#[test]
fn a_segment_counted_fuller_than_it_is_poisons_the_pool_and_fails_the_space_report() {
    let dev = device(8 << 20);
    let fs = Fs::format(dev.clone(), &life_config(Duration::ZERO)).unwrap();
    for i in 0..4 {
        write_file(&fs, &format!("/f{i}"), &pattern(i, 512 << 10));
    }
    fs.sync().unwrap();
    assert!(fs.space().is_ok() && fs.statvfs().is_ok());
    let sb = fs.inner.segment_blocks();
    {
        let mut m = fs.inner.lock_meta();
        let s = (0..fs.inner.segment_count() as usize)
            .find(|&s| m.seg.live(s) > 0 && !m.writer.holds_segment(s as u64))
            .expect("a segment with live blocks the writer is not in");
        // As if a block were counted live and pinned at once: one more than the segment holds.
        let pins = sb - u64::from(m.seg.live(s)) - u64::from(m.seg.pinned(s)) + 1;
        for _ in 0..pins {
            m.seg.add_pinned(s);
        }
    }
    for (what, r) in [
        ("statvfs", fs.statvfs().map(|_| ())),
        ("space", fs.space().map(|_| ())),
        ("write", fs.open_file("/g", OpenFlags::create()).map(|_| ())),
    ] {
        match r {
            Err(Error::Poisoned(why)) => assert!(
                why.contains("segment table") && why.contains(&format!("more than its {sb}")),
                "{what}: {why}"
            ),
            r => panic!("{what} after the counts went wrong: {r:?}"),
        }
    }
}
