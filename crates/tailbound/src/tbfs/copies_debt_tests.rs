//! What a light cleaning pass's copies add to the next checkpoint, against the bound the room
//! keeps for it (`CopiesDebt`): overwrites at random places in many files leave segments whose
//! live blocks lie under as many map leaves, and copying one dirties about a leaf per block.

use std::sync::Arc;

use super::*;
use crate::dev::sim::SimDevice;
use crate::tbfs::commit::room::copies_debt;
use crate::tbfs::format::BLOCK;

/// 512 MiB in files of 8 MiB (four leaves under a root each) overwritten at random (each
/// flush's blocks, sorted by file, lie under nearly as many leaves), made durable
/// (every map node clean), then the segment of overwrites with the most live blocks a light
/// pass may take, copied as a light pass copies it.
#[test]
fn a_light_pass_adds_no_more_than_its_copies_bound_and_scattered_copies_add_a_leaf_each() {
    let dev = Arc::new(SimDevice::new(768 << 20));
    dev.set_writes_are_copies(true);
    let cfg = Config {
        segment_bytes: 256 << 10,
        ..super::tests::large_file_config(1 << 20)
    };
    let fs = Fs::format(dev, &cfg).unwrap();
    let (files, file_blocks) = (64u64, 2048u64);
    let handles: Vec<File> = (0..files)
        .map(|i| {
            let f = fs
                .open_file(&format!("/f{i}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&vec![i as u8; (file_blocks * BLOCK as u64) as usize], 0)
                .unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    // The segments the files were written to in order: their blocks lie under one leaf.
    let filled: Vec<usize> = {
        let m = fs.inner.lock_meta();
        (0..fs.inner.segment_count() as usize)
            .filter(|&s| m.seg.live(s) > 0)
            .collect()
    };
    let mut r = 0x9e37_79b9_7f4a_7c15u64;
    let block = vec![7u8; BLOCK];
    for _ in 0..8192 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let b = r % (files * file_blocks);
        handles[(b / file_blocks) as usize]
            .pwrite(&block, (b % file_blocks) * BLOCK as u64)
            .unwrap();
    }
    // The segments the overwrites' full buffers went to, before the checkpoint's own.
    let overwritten: Vec<usize> = {
        let m = fs.inner.lock_meta();
        (0..fs.inner.segment_count() as usize)
            .filter(|&s| m.seg.live(s) > 0 && !filled.contains(&s))
            .collect()
    };
    fs.sync().unwrap();
    let e = &fs.inner;
    let mut m = e.lock_meta();
    let sb = e.segment_blocks();
    let now = e.now_ns();
    let skip = std::collections::BTreeSet::new();
    let victim = (0..e.segment_count() as usize)
        .filter(|&s| {
            overwritten.contains(&s)
                && (m.seg.live(s) as u64) < sb
                && e.why_not_victim(&m, &skip, s, now, true).is_none()
        })
        .max_by_key(|&s| m.seg.live(s))
        .expect("a segment a light pass may take");
    let live = u64::from(m.seg.live(victim));
    assert!(live > sb / 2, "the fullest victim holds {live} live blocks");
    let before = e.checkpoint_debt(&m, true);
    let bound = copies_debt(live) + e.copies_debt(&m).beyond_runs(live);
    m.cleaning.start();
    let age = m.life.segment_written(victim);
    m.life.start_copies(Some(age));
    m.seg.start_copies(&[victim]);
    m.cleaning.set_copying(true);
    let (copied, _) = e.move_live(&mut m, &[victim], true).unwrap();
    m.cleaning.set_copying(false);
    m.life.end_copies();
    m.seg.end_copies();
    m.cleaning.end();
    let added = e.checkpoint_debt(&m, true) - before;
    println!(
        "copied {copied}: added {added}, bound {bound}, per-run estimate {}",
        copies_debt(copied)
    );
    assert_eq!(copied, live, "every live block of the victim copied");
    assert!(
        added <= bound,
        "copying {copied} blocks added {added} to the checkpoint debt, above the bound {bound}"
    );
    // What the bound is for: copies under scattered leaves dirty far more than a node per
    // run of blocks.
    assert!(
        added > copies_debt(copied),
        "copying {copied} blocks added {added}, within the per-run estimate {}",
        copies_debt(copied)
    );
    drop(m);
    fs.sync().unwrap();
}
