//! A pool churned full of small files spread over every segment, then emptied by deletes in
//! passes (each pass touching every inode page, a checkpoint after each, as `rm -rf` of a
//! tree with the pool's timed checkpoints does), must give its space back: once every file is
//! gone, a new file is admitted, and the deletes reach the device at close.

use std::sync::Arc;

mod common;
use common::{data, stepped_pool, Rng};

use tailbound::dev::memory::MemoryPool;

use tailbound::tbfs::{Clock, Error, Fs, OpenFlags, OpenOptions};

fn write_file(fs: &Fs, path: &str, bytes: &[u8]) -> Result<(), Error> {
    let f = fs.open_file(path, OpenFlags::create())?;
    f.pwrite(bytes, 0)?;
    Ok(())
}

/// In an emptied pool a new file is admitted, and after a close and a reopen it is all there
/// is: the deletes reached the device.
fn only_a_new_write_is_left(fs: Fs, dev: Arc<MemoryPool>, clock: Clock) {
    write_file(&fs, "/after", &data(1, 4096)).expect("a write into an emptied pool");
    fs.close().unwrap();
    let options = OpenOptions {
        clock,
        ..OpenOptions::default()
    };
    let fs = Fs::open(dev, &options).unwrap();
    let names: Vec<String> = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["after"], "the deletes reached the device");
    assert_eq!(common::read(&fs, "/after"), data(1, 4096));
}

#[test]
fn a_pool_emptied_by_deletes_in_passes_admits_writes_again() {
    let pool_bytes: u64 = 32 << 20;
    let (dev, clock, fs) = stepped_pool(pool_bytes);
    let mut rng = Rng(13);
    let dirs = 16;
    for d in 0..dirs {
        fs.mkdir(&format!("/d{d}"), 0o755).unwrap();
    }
    // Fill with small files, each directory's spread over the whole pool and every inode
    // page, as an archive's files land when several programs write at once.
    let mut n = 0u64;
    loop {
        let path = format!("/d{}/f{n}", n % dirs);
        let len = 4096 * (1 + rng.below(2) as usize);
        match write_file(&fs, &path, &data(n, len)) {
            Ok(()) => {}
            Err(Error::NoSpace(_)) => {
                let _ = fs.unlink(&path);
                break;
            }
            Err(e) => panic!("{path}: {e}"),
        }
        n += 1;
        if n.is_multiple_of(256) {
            fs.sync().unwrap();
        }
    }
    let _ = fs.sync();
    let before = fs.statvfs().unwrap();
    eprintln!("filled: {n} files; {before:?}");
    // `rm -rf`: one directory after another, each pass touching every inode page; the pool's
    // timed checkpoints fall between them.
    for d in 0..dirs {
        let mut i = d;
        while i < n {
            fs.unlink(&format!("/d{d}/f{i}")).unwrap();
            i += dirs;
        }
        fs.rmdir(&format!("/d{d}")).unwrap();
        if let Err(e) = fs.sync() {
            eprintln!("sync after /d{d}: {e}");
        }
    }
    let after = fs.statvfs().unwrap();
    eprintln!("emptied: {after:?}");
    only_a_new_write_is_left(fs, dev, clock);
}

/// `rm -rf` of a churned full pool: files of one to three blocks, half of a first fill
/// deleted so the next fill's inodes land in the free slots of every inode page, directories
/// of 64 files filled one after another until `NoSpace`, then every file and directory
/// removed in name order with a checkpoint every 300 deletes (as the pool's timed ones fall).
/// Those checkpoints record deletes only. Before the fix the debt the deletes added outgrew
/// the free room, syncs were refused with most of the pool dead, and in larger pools nothing
/// could be written again: once every file is gone, a write must be admitted and the deletes
/// must reach the device at close.
#[test]
fn rm_rf_of_a_churned_full_pool_keeps_its_checkpoints_writable() {
    let pool_bytes: u64 = 32 << 20;
    let (dev, clock, fs) = stepped_pool(pool_bytes);
    let mut rng = Rng(13);
    let per_dir = 64;
    let (mut n, mut dirs) = (0u64, 0u64);
    let mut files: Vec<String> = Vec::new();
    for round in 0..2 {
        let mut made: Vec<String> = Vec::new();
        loop {
            if n.is_multiple_of(per_dir) {
                if fs.mkdir(&format!("/s{dirs}"), 0o755).is_err() {
                    break;
                }
                dirs += 1;
            }
            let path = format!("/s{}/f{n}", dirs - 1);
            let len = 4096 * (1 + rng.below(3) as usize);
            n += 1;
            match write_file(&fs, &path, &data(n, len)) {
                Ok(()) => made.push(path),
                Err(Error::NoSpace(_)) => {
                    let _ = fs.unlink(&path);
                    break;
                }
                Err(e) => panic!("{path}: {e}"),
            }
            if n.is_multiple_of(256) && fs.sync().is_err() {
                break;
            }
        }
        if round == 0 {
            for p in made {
                if rng.below(2) == 0 {
                    fs.unlink(&p).unwrap();
                } else {
                    files.push(p);
                }
            }
            fs.sync().unwrap();
            // The next fill starts in a directory of its own.
            n = n.next_multiple_of(per_dir);
        } else {
            files.extend(made);
        }
    }
    // What the last writes buffered and no seal found room for goes with their files: the
    // checkpoints below then record deletes only.
    while let Err(e) = fs.sync() {
        let p = files
            .pop()
            .unwrap_or_else(|| panic!("nothing left to delete: {e}"));
        fs.unlink(&p).unwrap();
    }
    let full = fs.statvfs().unwrap();
    assert!(
        full.blocks_free * 5 < full.blocks,
        "filled: {} files, {full:?}",
        files.len()
    );
    files.sort();
    let mut deletes = 0u64;
    let mut removed_dirs = std::collections::BTreeSet::new();
    for p in &files {
        fs.unlink(p).unwrap();
        deletes += 1;
        if deletes.is_multiple_of(300) {
            if let Err(e) = fs.sync() {
                eprintln!("sync after {deletes} deletes: {e}");
            }
        }
        let dir = &p[..p.rfind('/').unwrap()];
        if fs.readdir(dir).unwrap().is_empty() && removed_dirs.insert(dir.to_string()) {
            fs.rmdir(dir).unwrap();
        }
    }
    for d in 0..dirs {
        let dir = format!("/s{d}");
        if !removed_dirs.contains(&dir) {
            fs.rmdir(&dir).unwrap();
        }
    }
    fs.sync().expect("the last deletes' checkpoint");
    let after = fs.statvfs().unwrap();
    assert!(
        after.blocks_free * 10 > after.blocks * 9,
        "emptied: {after:?}"
    );
    only_a_new_write_is_left(fs, dev, clock);
}
