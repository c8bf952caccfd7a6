//! Snapshots in a full pool: dropping a snapshot is how a user makes room when snapshots hold
//! the space, so it must work in a pool that answers `NoSpace` to writes; and so must the
//! checkpoints that record it and that close the pool.

use std::sync::Arc;

mod common;
use common::{data, read, Rng};

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{fsck, Config, Error, Fs, OpenFlags};

const POOL: u64 = 64 << 20;

fn write_file(fs: &Fs, path: &str, bytes: &[u8]) -> Result<(), Error> {
    let f = fs.open_file(path, OpenFlags::create())?;
    f.pwrite(bytes, 0)?;
    f.fsync()
}

fn pool() -> (Arc<SimDevice>, Fs) {
    let dev = Arc::new(SimDevice::new(POOL));
    dev.set_writes_are_copies(true);
    let config = Config {
        segment_bytes: fsck::default_segment_bytes(POOL),
        background_gc: false,
        ..Config::memory_pool()
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    (dev, fs)
}

/// Files of 16 to 512 KiB until the pool answers `NoSpace`; returns those written.
fn fill(fs: &Fs, tag: &str, rng: &mut Rng) -> Vec<(String, u64, usize)> {
    let mut files = Vec::new();
    loop {
        let len = (16 << 10) + rng.below(496 << 10) as usize;
        let path = format!("/{tag}{:05}", files.len());
        let seed = rng.next();
        match write_file(fs, &path, &data(seed, len)) {
            Ok(()) => files.push((path, seed, len)),
            Err(Error::NoSpace(_)) => {
                // A refused file may have been created; it holds nothing acknowledged.
                let _ = fs.unlink(&path);
                return files;
            }
            Err(e) => panic!("{path}: {e}"),
        }
    }
}

fn check_and_reopen(dev: &Arc<SimDevice>, fs: Fs, files: &[(String, u64, usize)]) {
    for (path, seed, len) in files {
        assert_eq!(read(&fs, path), data(*seed, *len), "{path}");
    }
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck found damage: {damage:#?}");
    let reopened = Fs::open(dev.clone(), &Default::default()).unwrap();
    for (path, seed, len) in files {
        assert_eq!(read(&reopened, path), data(*seed, *len), "reopened {path}");
    }
}

#[test]
fn dropping_the_snapshot_that_holds_a_full_pool_makes_room() {
    let (dev, fs) = pool();
    let mut rng = Rng(71);
    let size = fs.space().unwrap().size;
    // Half the pool in files a snapshot keeps, then deleted: the snapshot alone holds them.
    let mut old = Vec::new();
    let mut user = 0u64;
    while user < size / 2 {
        let len = (64 << 10) + rng.below(448 << 10) as usize;
        let path = format!("/old{:05}", old.len());
        let seed = rng.next();
        write_file(&fs, &path, &data(seed, len)).unwrap();
        user += len as u64;
        old.push((path, seed, len));
    }
    let snap = fs.snapshot(Some("before")).unwrap();
    for (path, _, _) in &old {
        fs.unlink(path).unwrap();
    }
    fs.sync().unwrap();
    let mut files = fill(&fs, "new", &mut rng);
    let full = fs.space().unwrap();
    assert!(
        full.pinned_by_snapshots >= size / 3,
        "the snapshot pins {} of {size}",
        full.pinned_by_snapshots
    );
    // The user's way out of a full pool.
    fs.set_snapshot(snap, false)
        .unwrap_or_else(|e| panic!("dropping the snapshot in a full pool: {e}; {full:?}"));
    assert!(
        fs.checkpoints().unwrap().iter().all(|c| !c.snapshot),
        "the snapshot is gone"
    );
    let after = fs.space().unwrap();
    assert!(
        after.pinned_by_snapshots < size / 20,
        "the dropped snapshot's blocks are released: {after:?}"
    );
    // Its room takes new files.
    let more = fill(&fs, "more", &mut rng);
    let more_bytes: usize = more.iter().map(|f| f.2).sum();
    assert!(
        more_bytes as u64 >= size / 4,
        "only {more_bytes} bytes fit after the drop"
    );
    files.extend(more);
    check_and_reopen(&dev, fs, &files);
}

#[test]
fn a_snapshot_that_pins_nothing_drops_in_a_full_pool_and_the_pool_closes() {
    // Dropping it gives nothing back, so the checkpoint recording the drop, and the one closing
    // the pool, must fit in the room writes left for them.
    let (dev, fs) = pool();
    let mut rng = Rng(72);
    write_file(&fs, "/kept", &data(1, 256 << 10)).unwrap();
    let snap = fs.snapshot(Some("empty")).unwrap();
    let mut files = fill(&fs, "f", &mut rng);
    files.push(("/kept".to_string(), 1, 256 << 10));
    // Reads touch access times: more for the next checkpoint to write.
    for (path, seed, len) in &files {
        assert_eq!(read(&fs, path), data(*seed, *len), "{path}");
    }
    fs.set_snapshot(snap, false)
        .unwrap_or_else(|e| panic!("dropping a snapshot in a full pool: {e}"));
    assert!(fs.checkpoints().unwrap().iter().all(|c| !c.snapshot));
    check_and_reopen(&dev, fs, &files);
}

#[test]
fn new_names_in_a_full_pool_get_no_space_and_deletes_still_make_room() {
    // Names cost the next checkpoint their directory's blocks and inode pages. A pool that
    // took names without room for that checkpoint could write none again, not even the one
    // recording the deletes that would make room.
    let (dev, fs) = pool();
    let mut rng = Rng(73);
    let files = fill(&fs, "f", &mut rng);
    let mut names = 0u64;
    let refused = loop {
        if names == 200_000 {
            break None;
        }
        let path = format!("/d{}/n{names:07}", names / 4096);
        if names.is_multiple_of(4096) {
            if let Err(e) = fs.mkdir(&format!("/d{}", names / 4096), 0o755) {
                break Some(e);
            }
        }
        match fs.open_file(&path, OpenFlags::create()) {
            Ok(_) => names += 1,
            Err(e) => break Some(e),
        }
    };
    let refused = refused.expect("200,000 new names (51 MB of inodes) fit in a full 64 MiB pool");
    assert!(matches!(refused, Error::NoSpace(_)), "{refused}");
    // Every name taken is recorded.
    fs.sync()
        .unwrap_or_else(|e| panic!("sync after {names} names: {e}"));
    // Half of the files go; their room takes new data.
    let (gone, kept): (Vec<_>, Vec<_>) =
        files.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, (path, _, _)) in &gone {
        fs.unlink(path).unwrap();
    }
    fs.sync().unwrap();
    let mut kept: Vec<_> = kept.into_iter().map(|(_, f)| f).collect();
    write_file(&fs, "/after", &data(9, 1 << 20)).unwrap();
    kept.push(("/after".to_string(), 9, 1 << 20));
    check_and_reopen(&dev, fs, &kept);
}
