//! A pool filled with synced files until it refuses one, then given attribute changes (which
//! take no room check) and syncs until a sync is refused or the rounds run out, then emptied by
//! deletes: the emptied pool must take the sync that gives its space back, a new file, a close
//! and fsck.
//!
//! Single-threaded on a stepped clock. Each seed below had that sync refused on 37fc1ed, in
//! release builds and most in debug builds too: syncs and the cleaner had spent the room the
//! checkpoint of the deletes needed. Two changes make it fit: a checkpoint that a superblock
//! follows at once counts the segments it gives back towards its floor
//! (`Engine::checkpoint_floor`), and an inode page whose slots are all free is left a hole
//! rather than written (`Engine::checkpoint_inode_pages`), so the deletes' checkpoint no longer
//! rewrites every page (docs/results/soak.md, 2026-12-02).

mod common;
use common::{data, stepped_pool, Rng};

use tailbound::tbfs::{fsck, Error, Fs, OpenFlags, SetAttr};

const POOL_BYTES: u64 = 8 << 20;

/// Files of 1 to 16 blocks, each synced, until the pool refuses one.
fn fill(fs: &Fs, rng: &mut Rng) -> Vec<String> {
    let mut files = Vec::new();
    for n in 0.. {
        let path = format!("/f{n}");
        let len = 4096 * (1 + rng.below(16) as usize);
        let written = fs.open_file(&path, OpenFlags::create()).and_then(|f| {
            f.pwrite(&data(n, len), 0)?;
            f.fsync()
        });
        match written {
            Ok(()) => files.push(path),
            Err(Error::NoSpace(_)) => {
                let _ = fs.unlink(&path);
                return files;
            }
            Err(e) => panic!("{path}: {e}"),
        }
    }
    unreachable!("the loop returns once the pool is full")
}

fn empty_after_attribute_changes(seed: u64) {
    let (dev, _, fs) = stepped_pool(POOL_BYTES);
    let mut rng = Rng(seed + 1);
    let files = fill(&fs, &mut rng);
    assert!(files.len() > 100, "seed {seed}: only {} files", files.len());
    for round in 0..rng.below(40) {
        for path in &files {
            let attr = SetAttr {
                mode: Some(0o600 | (round % 2) as u32),
                ..SetAttr::default()
            };
            fs.set_attr(path, &attr).unwrap();
        }
        // A sync of a full pool may be refused: the changes then wait in the debt.
        if fs.sync().is_err() {
            break;
        }
    }
    for path in &files {
        fs.unlink(path).unwrap();
    }
    if let Err(e) = fs.sync() {
        let census = fs.space_census().unwrap();
        panic!(
            "seed {seed}: the emptied pool's sync: {e}\nfree {} pending {}",
            census.free, census.pending
        );
    }
    let f = fs.open_file("/after", OpenFlags::create()).unwrap();
    f.pwrite(&data(seed, 1 << 20), 0)
        .unwrap_or_else(|e| panic!("seed {seed}: a write into the emptied pool: {e}"));
    f.fsync().unwrap();
    drop(f);
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(
        damage.is_empty(),
        "seed {seed}: fsck found damage: {damage:#?}"
    );
}

#[test]
fn an_emptied_pool_syncs_after_attribute_changes_filled_its_room() {
    for seed in [52, 60, 64, 68, 70, 86, 140, 224] {
        empty_after_attribute_changes(seed);
    }
}
