//! A pool filled with one-block files holds more inode pages than the room keeps for deletes
//! (`DELETES_PAGES_ALLOWANCE`, docs/ARCHITECTURE.md): its deletes write their checkpoint first
//! once the next checkpoint's inode pages pass half that allowance. Filled until `NoSpace`,
//! such a pool must still take a snapshot or refuse it, delete any file, fill again, be
//! emptied by deletes in random order and sync, and close with fsck clean.

use std::sync::Arc;

mod common;
use common::{data, Rng};

use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{fsck, Config, Error, Fs, OpenFlags};

const POOL_BYTES: u64 = 32 << 20;

/// Creates one-block files `/f<n>` from `*next` on until the first `NoSpace`, fsyncing every
/// 64th; returns the numbers made.
fn fill(fs: &Fs, rng: &mut Rng, next: &mut usize) -> Vec<usize> {
    let mut made = Vec::new();
    loop {
        let path = format!("/f{:07}", *next);
        let written = fs.open_file(&path, OpenFlags::create()).and_then(|f| {
            f.pwrite(&data(rng.next(), 4096), 0)?;
            if (*next).is_multiple_of(64) {
                f.fsync()?;
            }
            Ok(())
        });
        match written {
            Ok(()) => made.push(*next),
            Err(Error::NoSpace(_)) => {
                // A create refused after its name was made leaves an empty file, which counts.
                if fs.stat(&path).is_ok() {
                    made.push(*next);
                }
                *next += 1;
                return made;
            }
            Err(e) => panic!("{path}: {e}"),
        }
        *next += 1;
    }
}

/// A snapshot of the full pool is made or refused for room; one made is dropped at once.
fn snapshot_or_no_space(fs: &Fs) {
    match fs.snapshot(None) {
        Ok(n) => fs.set_snapshot(n, false).expect("dropping the snapshot"),
        Err(Error::NoSpace(_)) => {}
        Err(e) => panic!("snapshot of a full pool: {e}"),
    }
}

/// Unlinks `count` of `live` at random.
fn delete(fs: &Fs, rng: &mut Rng, live: &mut Vec<usize>, count: usize) {
    for _ in 0..count {
        let i = rng.below(live.len() as u64) as usize;
        let k = live.swap_remove(i);
        fs.unlink(&format!("/f{k:07}"))
            .unwrap_or_else(|e| panic!("unlink /f{k:07} in a full pool: {e}"));
    }
}

#[test]
fn a_pool_full_of_one_block_files_deletes_refills_and_empties() {
    let dev = Arc::new(MemoryPool::anonymous(POOL_BYTES).unwrap());
    let config = Config {
        segment_bytes: fsck::default_segment_bytes(POOL_BYTES),
        background_gc: false,
        ..Config::memory_pool()
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let mut rng = Rng(0x5a11);
    let mut next = 0;
    let mut live = fill(&fs, &mut rng, &mut next);
    // More inode pages (sixteen inodes each) than the deletes' allowance, or this tests nothing.
    assert!(live.len() > 256 * 16, "only {} files fit", live.len());
    snapshot_or_no_space(&fs);
    let half = live.len() / 2;
    delete(&fs, &mut rng, &mut live, half);
    fs.sync().expect("sync after deleting half");
    live.extend(fill(&fs, &mut rng, &mut next));
    assert!(live.len() > 256 * 16, "only {} files fit again", live.len());
    snapshot_or_no_space(&fs);
    let all = live.len();
    delete(&fs, &mut rng, &mut live, all);
    fs.sync().expect("sync of the emptied pool");
    let counters = fs.counters();
    assert!(
        counters.deletes_pages_checkpoints > 0,
        "no delete wrote its checkpoint first for the inode pages"
    );
    assert!(fs.readdir("/").unwrap().is_empty());
    let f = fs.open_file("/after", OpenFlags::create()).unwrap();
    f.pwrite(&data(1, 1 << 20), 0)
        .expect("a write into the emptied pool");
    f.fsync().unwrap();
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck found damage: {damage:#?}");
}
