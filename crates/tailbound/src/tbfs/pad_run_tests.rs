//! A light cleaning pass whose run of data-only logs crosses a segment's end with a pad log
//! inside it, victims that become reusable and are reused before any checkpoint, then a power
//! cut: recovery must replay the run whole (the pad keeps its sequence), so every file reads
//! back at what was last synced, and fsck finds the image clean before and after.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::SimDevice;
use crate::tbfs::format::{FLAG_BEGIN, FLAG_DATA_ONLY, FLAG_END, FLAG_PAD};
use crate::tbfs::recovery::scan::ScannedLog;
use crate::tbfs::{fsck, Barrier, Clock, Config, Fs, OpenFlags, OpenOptions, Ordering};
use std::collections::BTreeMap;

const BLOCK: usize = 4096;
const SEGMENT_BLOCKS: u64 = 512;
const SEGMENTS: u64 = 40;
/// Segments' worth of `/b`, the live data that fills the pool around the victim.
const B_SEGMENTS: u64 = 23;
/// Segments of `/a`, every other block of which the light pass moves.
const A_SEGMENTS: u64 = 6;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryLog,
        segment_bytes: SEGMENT_BLOCKS * BLOCK as u64,
        superblock_every_bytes: 1 << 40,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 30,
        // Victims are chosen by segment age: the same ages whatever the machine's load.
        clock: Clock::stepped(1 << 40, Duration::from_micros(1)),
    }
}

/// Block `index` of the file tagged `tag` at `version`, its header naming all three.
fn content(tag: u64, index: u64, version: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..BLOCK as u64)
        .map(|i| {
            (i.wrapping_mul(131) ^ tag.wrapping_mul(7) ^ index.wrapping_mul(13) ^ version) as u8
        })
        .collect();
    b[..8].copy_from_slice(&tag.to_le_bytes());
    b[8..16].copy_from_slice(&index.to_le_bytes());
    b[16..24].copy_from_slice(&version.to_le_bytes());
    b
}

/// The writer's current segment and the blocks left in it.
fn writer_at(fs: &Fs) -> (u64, u64) {
    let m = fs.inner.lock_meta();
    let seg = m.writer.cur_seg();
    let end = fs.inner.seg_start(seg) + fs.inner.segment_blocks();
    (seg, end - m.writer.pos())
}

/// One data-only log of `blocks` blocks: blocks `first..first + blocks` of `file` at
/// `version`, synced.
fn filler_log(file: &crate::tbfs::File, tag: u64, first: u64, blocks: u64, version: u64) {
    let data: Vec<u8> = (first..first + blocks)
        .flat_map(|i| content(tag, i, version))
        .collect();
    file.pwrite(&data, first * BLOCK as u64).unwrap();
    file.fdatasync().unwrap();
}

/// A checkpoint and a superblock naming it, as the cleaner's refresh writes them.
fn refresh(fs: &Fs) {
    let inner = &fs.inner;
    let mut m = inner.lock_meta();
    let was = m.refresh.set_running(true);
    let r = inner
        .commit_checkpoint_for_superblock(&mut m)
        .and_then(|()| inner.write_superblock(&mut m));
    m.refresh.set_running(was);
    r.unwrap();
}

/// Whether the log chain after the newest superblock's checkpoint in `image` has a pad log
/// between two data-only logs of one run.
fn pad_inside_a_run(image: &[u8]) -> bool {
    let logs = chain(image);
    logs.windows(3).any(|w| {
        let (before, pad, after) = (w[0].summary.flags, w[1].summary.flags, w[2].summary.flags);
        before & FLAG_DATA_ONLY != 0
            && before & FLAG_END == 0
            && pad & FLAG_PAD != 0
            && after & FLAG_DATA_ONLY != 0
            && after & FLAG_BEGIN == 0
    })
}

/// Every block of the file at `path` in `fs` is the version `versions` says.
fn check_file(fs: &Fs, path: &str, tag: u64, versions: &BTreeMap<u64, u64>, when: &str) {
    let file = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let mut buf = vec![0u8; BLOCK];
    for (&i, &v) in versions {
        assert_eq!(file.pread(&mut buf, i * BLOCK as u64).unwrap(), BLOCK);
        if buf != content(tag, i, v) {
            let got: [u8; 24] = buf[..24].try_into().unwrap();
            panic!("{when}: {path} block {i} is not version {v}: header {got:?}");
        }
    }
}

/// The log chain after the newest superblock's checkpoint in `image`.
fn chain(image: &[u8]) -> Vec<ScannedLog> {
    let dev: crate::tbfs::DeviceRef = Arc::new(SimDevice::from_image(image.to_vec()));
    let options = OpenOptions::default();
    let mut report = Default::default();
    let (sb, _) = crate::tbfs::recovery::newest_superblock(&dev, &options, &mut report).unwrap();
    crate::tbfs::recovery::scan_chain(&dev, &sb, &options, &mut report)
        .unwrap()
        .logs
}

#[test]
fn a_pad_inside_a_light_pass_run_whose_victims_were_reused_is_replayed_whole() {
    // What the pad's placement takes: a light pass's run rolls to a new log when a log's
    // descriptors are full (123 file blocks, none adjacent to the one before), and a pad log
    // follows only a log that ends one block short of its segment's end. So the victims' live
    // blocks are every other block of a file, and the run starts 125 blocks before a
    // segment's end. For the bug to lose data, nothing may write a checkpoint between the
    // superblock and the power cut (not the pass: no metadata in its victims, no pin to
    // release; not a refresh: the chain stays under a quarter of the pool; not a writer's
    // space check: the victims freed keep the room it asks for), and the writer must reuse a
    // victim: it takes the first free segment after its own, and segments written since the
    // superblock are not free, so it passes the free segments after the run and then wraps
    // round to the first victim. The victims are the only segments a light pass may take:
    // the older ones are pinned by a snapshot or were entered before it.
    let dev = Arc::new(SimDevice::new(
        (crate::tbfs::format::FIRST_SEGMENT_BLOCK + SEGMENTS * SEGMENT_BLOCKS) * BLOCK as u64,
    ));
    let config = config();
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let a = fs.open_file("/a", OpenFlags::create()).unwrap();
    let b = fs.open_file("/b", OpenFlags::create()).unwrap();
    let f = fs.open_file("/f", OpenFlags::create()).unwrap();
    fs.sync().unwrap();
    let mut a_model = BTreeMap::new();
    let mut b_model = BTreeMap::new();
    let mut f_model = BTreeMap::new();
    // Live data filling most of the pool.
    let chunk = SEGMENT_BLOCKS - 1;
    for c in 0..B_SEGMENTS {
        let data: Vec<u8> = (0..chunk)
            .flat_map(|i| content(2, c * chunk + i, 0))
            .collect();
        b.pwrite(&data, c * chunk * BLOCK as u64).unwrap();
        b.fdatasync().unwrap();
        b_model.extend((0..chunk).map(|i| (c * chunk + i, 0)));
    }
    // A snapshot, and a block of /b overwritten in every segment so far: pinned, none of them
    // is cleanable.
    fs.snapshot(Some("before")).unwrap();
    for i in (0..B_SEGMENTS * chunk).step_by(64) {
        b.pwrite(&content(2, i, 1), i * BLOCK as u64).unwrap();
        b_model.insert(i, 1);
    }
    b.fdatasync().unwrap();
    // /a fills segments of its own; every other block of it is then written again.
    let (_, left) = writer_at(&fs);
    filler_log(&f, 3, 0, left - 1, 0);
    f_model.extend((0..left - 1).map(|i| (i, 0)));
    // The first of them, which the writer reaches first.
    let (victim, left) = writer_at(&fs);
    assert_eq!(left, SEGMENT_BLOCKS, "/a starts a segment");
    let a_blocks = A_SEGMENTS * chunk;
    for c in 0..A_SEGMENTS {
        let data: Vec<u8> = (0..chunk)
            .flat_map(|i| content(1, c * chunk + i, 0))
            .collect();
        a.pwrite(&data, c * chunk * BLOCK as u64).unwrap();
        a.fdatasync().unwrap();
    }
    a_model.extend((0..a_blocks).map(|i| (i, 0)));
    assert_eq!(writer_at(&fs), (victim + A_SEGMENTS, SEGMENT_BLOCKS));
    for i in (1..a_blocks).step_by(2) {
        a.pwrite(&content(1, i, 1), i * BLOCK as u64).unwrap();
        a_model.insert(i, 1);
        if i % (2 * chunk) == 2 * chunk - 1 {
            a.fdatasync().unwrap();
        }
    }
    a.fdatasync().unwrap();
    // A superblock names a checkpoint after all of it: /a's segments are light victims.
    refresh(&fs);
    // The pass's run starts 125 blocks before the segment's end (new blocks of /f: nothing is
    // superseded, so nothing is pinned for the next checkpoint to release).
    let mut first = 2 * SEGMENT_BLOCKS;
    let (_, mut left) = writer_at(&fs);
    if left < 127 {
        // Too close to the end: to the next segment first.
        filler_log(&f, 3, first, left - 1, 0);
        f_model.extend((first..first + left - 1).map(|i| (i, 0)));
        first += left - 1;
        left = writer_at(&fs).1;
    }
    filler_log(&f, 3, first, left - 126, 0);
    f_model.extend((first..first + left - 126).map(|i| (i, 0)));
    assert_eq!(writer_at(&fs).1, 125);
    // One pass: cleaning stops once it frees a little more than is free now.
    let target = {
        let m = fs.inner.lock_meta();
        let total = fs.inner.segment_blocks() * fs.inner.segment_count();
        (fs.inner.free_blocks(&m) + 64) as f64 / total as f64
    };
    let before = fs.counters();
    fs.gc(target).unwrap();
    let after = fs.counters();
    assert_eq!(
        (
            after.light_cleaning_passes - before.light_cleaning_passes,
            after.checkpoints - before.checkpoints,
        ),
        (1, 0),
        "one light pass and no checkpoint"
    );
    {
        let m = fs.inner.lock_meta();
        assert_eq!(m.seg.live(victim as usize), 0);
    }
    assert!(
        pad_inside_a_run(&dev.image()),
        "the pass's run has a pad log inside it"
    );
    // The writer goes on until it reuses the victim: overwrites of /f, each synced.
    let mut version = 1;
    while fs.inner.lock_meta().seg.live(victim as usize) == 0 {
        assert!(
            version < 2 * SEGMENTS,
            "the writer never reached the victim"
        );
        filler_log(&f, 3, 0, 200, version);
        f_model.extend((0..200).map(|i| (i, version)));
        version += 1;
    }
    assert_eq!(
        fs.counters().checkpoints,
        after.checkpoints,
        "no checkpoint before the cut"
    );
    // The power cut: only what flushes made durable (every log, under every-log).
    let image = dev.durable_image();
    assert!(
        pad_inside_a_run(&image),
        "the run with its pad is in the chain recovery replays"
    );
    let recovered = Arc::new(SimDevice::from_image(image.clone()));
    let options = OpenOptions {
        clock: config.clock.clone(),
        ..OpenOptions::default()
    };
    let fs2 = Fs::open(recovered.clone(), &options).unwrap();
    check_file(&fs2, "/a", 1, &a_model, "recovered");
    check_file(&fs2, "/b", 2, &b_model, "recovered");
    check_file(&fs2, "/f", 3, &f_model, "recovered");
    let r = fs2.recovery_report();
    assert_eq!(r.run_parts_dropped, 0, "{r:?}");
    drop(fs2);
    for (when, image) in [("at the cut", image), ("after recovery", recovered.image())] {
        let report = fsck::check(&*from_image(&image)).unwrap();
        assert_eq!(report.verdict, fsck::Verdict::Clean, "{when}: {report:#?}");
    }
}

fn from_image(image: &[u8]) -> crate::tbfs::DeviceRef {
    Arc::new(SimDevice::from_image(image.to_vec()))
}
