//! What deletes under a snapshot add to the checkpoint debt stays within the room kept for it
//! (`DeletesDebt`), whichever call frees the blocks: an unlink, or the last close of a file
//! unlinked while open.

use std::sync::Arc;

use crate::dev::sim::SimDevice;
use crate::dev::Device;
use crate::tbfs::limits::DELETES_ALLOWANCE_BLOCKS;
use crate::tbfs::state::Engine;
use crate::tbfs::{fsck, Fs, OpenFlags};

const FILES: u64 = 100;
const LEN: usize = 48 << 10;

/// What deletes charged since the debt was last counted whole.
fn charged(fs: &Fs) -> u64 {
    let m = fs.inner.lock_meta();
    m.deletes_debt.charged(Engine::deletes_probe(&m))
}

#[test]
fn the_last_close_of_files_unlinked_under_a_snapshot_pays_their_debt() {
    let dev = Arc::new(SimDevice::new(8 << 20));
    let fs = Fs::format(dev.clone(), &crate::tbfs::recovery_pins_tests::config()).unwrap();
    let files: Vec<_> = (0..FILES)
        .map(|n| {
            let f = fs
                .open_file(&format!("/f{n}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&vec![n as u8 + 1; LEN], 0).unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    let snap = fs.snapshot(Some("keep")).unwrap();
    // Unlinked while open: their blocks stay live until the last handle goes.
    for n in 0..FILES {
        fs.unlink(&format!("/f{n}")).unwrap();
    }
    let paid = fs.counters().deletes_debt_checkpoints;
    // Each close frees a file whose blocks the snapshot keeps: pinned, in their segment's page.
    // One close adds at most the pages of one file (12 blocks, in two segments at most).
    let bound = DELETES_ALLOWANCE_BLOCKS + 2;
    let mut most = 0;
    for f in files {
        drop(f);
        most = most.max(charged(&fs));
        assert!(
            most <= bound,
            "the closes charged {most} blocks to the deletes' debt, past {bound}"
        );
    }
    assert!(
        fs.counters().deletes_debt_checkpoints > paid,
        "no checkpoint paid the closes' debt"
    );
    let space = fs.space().unwrap();
    assert!(
        space.pinned_by_snapshots >= FILES * LEN as u64,
        "the snapshot keeps the files: {space:?}"
    );
    let view = fs.at(snap).unwrap();
    for n in (0..FILES).step_by(7) {
        assert!(view.read_file(&format!("/f{n}")).unwrap() == vec![n as u8 + 1; LEN]);
    }
    drop(view);
    fs.set_snapshot(snap, false).unwrap();
    fs.close().unwrap();
    let image: Arc<dyn Device> = Arc::new(SimDevice::from_image(dev.image()));
    let report = fsck::check(&*image).unwrap();
    assert_eq!(report.verdict, fsck::Verdict::Clean, "{report:#?}");
}
