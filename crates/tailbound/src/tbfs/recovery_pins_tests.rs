//! Recovery's pinned table: after a power cut, recovery's checkpoint writes only the pages its
//! own changes mark (the pins roll-forward adds), not every page holding a pin, and ends with
//! the same pins as the pool had before the cut.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::SimDevice;
use crate::dev::Device;
use crate::tbfs::{fsck, Barrier, Clock, Config, Fs, OpenFlags, OpenOptions, Ordering};

/// 64 KiB segments (one pinned-table page each), relaxed ordering so an fsync of data is a
/// data-only log recovery rolls forward, no superblock refresh in the way, no protection period.
/// Files in different segments mark different pinned-table pages (`deletes_debt_tests` too).
pub(super) fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes: 64 << 10,
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(29).wrapping_add(seed * 13) % 251) as u8)
        .collect()
}

fn write(fs: &Fs, path: &str, data: &[u8], at: u64) {
    let f = fs.open_file(path, OpenFlags::create()).unwrap();
    f.pwrite(data, at).unwrap();
    f.fsync().unwrap();
}

fn read(fs: &Fs, path: &str) -> Vec<u8> {
    let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let mut buf = vec![0u8; f.stat().unwrap().size as usize];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), buf.len());
    buf
}

/// Every pinned block with the checkpoints that may reference it.
fn pins(fs: &Fs) -> Vec<(u64, u64, u64)> {
    let m = fs.inner.lock_meta();
    m.life
        .pins()
        .runs()
        .flat_map(|r| (r.start..r.end()).map(move |b| (b, r.pin.born, r.pin.died)))
        .collect()
}

/// The pinned-table pages holding a pin: what recovery rewrote before.
fn pages_holding_pins(fs: &Fs) -> usize {
    let sb = fs.inner.segment_blocks();
    let m = fs.inner.lock_meta();
    let pages: BTreeSet<u64> = m
        .life
        .pins()
        .runs()
        .flat_map(|r| r.start..r.end())
        .map(|b| m.life.pinned_page(b, sb))
        .collect();
    pages.len()
}

/// Opens a copy of `dev`'s latest bytes, as a power cut of the process leaves them.
fn after_cut(dev: &SimDevice) -> (Arc<SimDevice>, Fs) {
    let copy = Arc::new(SimDevice::from_image(dev.image()));
    let fs = Fs::open(copy.clone(), &OpenOptions::default()).unwrap();
    (copy, fs)
}

fn fsck_clean(dev: &SimDevice, context: &str) {
    let image: Arc<dyn Device> = Arc::new(SimDevice::from_image(dev.image()));
    let report = fsck::check(&*image).unwrap();
    assert_eq!(
        report.verdict,
        fsck::Verdict::Clean,
        "{context}: {report:#?}"
    );
}

const FILES: u64 = 48;
const LEN: usize = 48 << 10;

/// `FILES` files of `LEN` bytes, synced, a snapshot of them, and every other one deleted under
/// it, synced: the snapshot's pins lie in pages all over the pool.
fn pool_with_pins_everywhere(dev: &Arc<SimDevice>) -> (Fs, u64) {
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    for n in 0..FILES {
        write(&fs, &format!("/f{n}"), &bytes(n, LEN), 0);
    }
    fs.sync().unwrap();
    let snap = fs.snapshot(Some("keep")).unwrap();
    for n in (1..FILES).step_by(2) {
        fs.unlink(&format!("/f{n}")).unwrap();
    }
    fs.sync().unwrap();
    (fs, snap)
}

#[test]
fn recovery_writes_only_the_pinned_pages_roll_forward_changes() {
    let dev = Arc::new(SimDevice::new(8 << 20));
    let (fs, snap) = pool_with_pins_everywhere(&dev);
    let holding = pages_holding_pins(&fs);
    assert!(
        holding >= 16,
        "the snapshot's pins lie in {holding} pages only"
    );
    // One block of a file the snapshot keeps is overwritten, in a data-only log: roll-forward
    // replays it and pins the old block, in one page.
    let fresh = bytes(1_000, 4096);
    write(&fs, "/f0", &fresh, 0);
    let before = pins(&fs);

    let (cut, recovered) = after_cut(&dev);
    let rep = recovered.recovery_report();
    assert!(rep.logs_rolled_forward >= 1, "{rep:?}");
    assert_eq!(
        recovered.counters().recovery_pinned_pages,
        1,
        "recovery marked more than the page of the block it replayed over ({holding} pages hold pins)"
    );
    // The pins before the cut, and those of the blocks recovery's own checkpoint dropped (the
    // root it superseded, which the snapshot's range covers).
    let after = pins(&recovered);
    assert!(
        before.iter().all(|p| after.contains(p)),
        "recovery lost pins: {before:?} -> {after:?}"
    );
    assert!(
        after
            .iter()
            .all(|p| before.contains(p) || p.2 == rep.checkpoint),
        "recovery added pins of its own: {before:?} -> {after:?}"
    );
    // The table recovery's checkpoint stores, the pages it did not write with those it did,
    // holds what memory holds.
    let stored = Fs::open(
        Arc::new(SimDevice::from_image(cut.image())),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(pins(&stored), after, "the stored table after recovery");
    drop(stored);
    let mut now = bytes(0, LEN);
    now[..4096].copy_from_slice(&fresh);
    assert!(read(&recovered, "/f0") == now, "/f0 after the cut");
    let view = recovered.at(snap).unwrap();
    for n in 0..FILES {
        assert!(
            view.read_file(&format!("/f{n}")).unwrap() == bytes(n, LEN),
            "/f{n} in the snapshot"
        );
    }
    drop(view);
    recovered.close().unwrap();
    fsck_clean(&cut, "after recovery");
    // A clean reopen marks nothing.
    let reopened = after_cut(&cut).1;
    assert_eq!(reopened.counters().recovery_pinned_pages, 0);
    // The snapshot's drop gives everything back.
    reopened.set_snapshot(snap, false).unwrap();
    assert_eq!(reopened.space().unwrap().pinned_by_snapshots, 0);
    assert!(pins(&reopened).is_empty(), "pins left after the drop");
}

#[test]
fn pins_only_a_view_kept_are_passed_over_after_a_cut() {
    let dev = Arc::new(SimDevice::new(8 << 20));
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    for n in 0..FILES {
        write(&fs, &format!("/f{n}"), &bytes(n, LEN), 0);
    }
    fs.sync().unwrap();
    let newest = fs.checkpoints().unwrap().last().unwrap().number;
    let view = fs.at(newest).unwrap();
    for n in (0..FILES).step_by(2) {
        fs.unlink(&format!("/f{n}")).unwrap();
    }
    fs.sync().unwrap();
    assert!(
        pins(&fs).len() as u64 >= FILES / 2 * (LEN as u64 / 4096),
        "the view pins what was deleted"
    );
    // The power goes with the view open: views are not stored, so nothing keeps those pins.
    let (cut, recovered) = after_cut(&dev);
    assert!(
        pins(&recovered).is_empty(),
        "pins of a view survived the cut"
    );
    assert_eq!(
        recovered.counters().recovery_pinned_pages,
        0,
        "recovery rewrote pages only to drop entries it passes over"
    );
    assert_eq!(recovered.space().unwrap().pinned_by_snapshots, 0);
    for n in (1..FILES).step_by(2) {
        assert!(read(&recovered, &format!("/f{n}")) == bytes(n, LEN));
    }
    recovered.close().unwrap();
    fsck_clean(&cut, "after recovery");
    // The stale entries stay in their pages and are passed over again.
    let reopened = after_cut(&cut).1;
    assert!(pins(&reopened).is_empty(), "stale entries loaded as pins");
    let m = reopened.inner.lock_meta();
    let pinned: u64 = (0..reopened.inner.segment_count() as usize)
        .map(|s| u64::from(m.seg.pinned(s)))
        .sum();
    assert_eq!(pinned, 0, "segments count pins nothing keeps");
    drop(m);
    drop(view);
    drop(fs);
}
