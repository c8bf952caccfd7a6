//! Light cleaning passes and live metadata. A light pass copies file data into data-only logs;
//! the map nodes and inode pages its victims still hold move only at a checkpoint. A checkpoint
//! written for those victims alone rewrote the metadata into a segment that later became a
//! light victim in turn and asked for another: under uniform overwrites most of the cleaner's
//! checkpoints were such. The victims now wait for the next checkpoint the cleaner writes
//! anyway. Checked on the counters in a memory pool with one writer (the same run on any
//! machine), and on the data: every block reads back, before and after reopening, and fsck
//! finds no damage.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::memory::MemoryPool;
use tailbound::dev::sim::SimDevice;
use tailbound::dev::Device;
use tailbound::tbfs::{fsck, Barrier, Clock, Config, Fs, FsCounters, OpenFlags, Ordering};

const BLOCK: u64 = 4096;
const POOL_BYTES: u64 = 64 << 20;
const FILES: u64 = 8;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes: 256 << 10,
        superblock_every_bytes: 8 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
        clock: Clock::wall(),
    }
}

/// Block `index` of file `file` as written for the `version`th time.
fn content(file: u64, index: u64, version: u32) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK as usize];
    b[..8].copy_from_slice(&file.to_le_bytes());
    b[8..16].copy_from_slice(&index.to_le_bytes());
    b[16..20].copy_from_slice(&version.to_le_bytes());
    b[20] = 0xa5;
    b
}

fn check(fs: &Fs, versions: &[Vec<u32>], what: &str) {
    let mut buf = vec![0u8; BLOCK as usize];
    for (file, v) in versions.iter().enumerate() {
        let f = fs
            .open_file(&format!("/u{file}"), OpenFlags::read_only())
            .unwrap();
        for (index, &version) in v.iter().enumerate() {
            let n = f.pread(&mut buf, index as u64 * BLOCK).unwrap();
            assert_eq!(n, BLOCK as usize, "{what}: file {file} block {index}");
            assert!(
                buf == content(file as u64, index as u64, version),
                "{what}: file {file} block {index} is not version {version}"
            );
        }
    }
}

#[test]
fn light_victims_holding_metadata_wait_for_the_next_checkpoint() {
    let dev: Arc<dyn Device> = Arc::new(MemoryPool::anonymous(POOL_BYTES).unwrap());
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    let size = fs.space().unwrap().size;
    // 85 % of the pool in files of a few map nodes each (more than 511 blocks), written
    // block by block so that each file's map has nodes.
    let per_file = size * 85 / 100 / BLOCK / FILES;
    assert!(per_file > 511, "{per_file} blocks per file");
    let mut files = Vec::new();
    let mut versions = Vec::new();
    for file in 0..FILES {
        let f = fs
            .open_file(&format!("/u{file}"), OpenFlags::create())
            .unwrap();
        for index in 0..per_file {
            f.pwrite(&content(file, index, 0), index * BLOCK).unwrap();
        }
        files.push(f);
        versions.push(vec![0u32; per_file as usize]);
    }
    fs.sync().unwrap();
    // Uniform 4 KiB overwrites: three capacities of them, the last two counted.
    let mut rng = Rng(0x3e7a);
    let writes = size / BLOCK;
    let mut before = None;
    for w in 0..3 * writes {
        if w == writes {
            before = Some(fs.counters());
        }
        let file = rng.below(FILES);
        let index = rng.below(per_file);
        let v = &mut versions[file as usize][index as usize];
        *v += 1;
        files[file as usize]
            .pwrite(&content(file, index, *v), index * BLOCK)
            .unwrap();
    }
    fs.sync().unwrap();
    let (b, a) = (before.unwrap(), fs.counters());
    let left = a.victims_left_for_checkpoint - b.victims_left_for_checkpoint;
    let for_metadata = a.cleaner_checkpoints_for_metadata - b.cleaner_checkpoints_for_metadata;
    let cleaners = for_metadata + a.cleaner_checkpoints_for_victims
        - b.cleaner_checkpoints_for_victims
        + a.cleaner_checkpoints_other
        - b.cleaner_checkpoints_other;
    let light = a.light_cleaning_passes - b.light_cleaning_passes;
    let metadata = a.metadata_blocks - b.metadata_blocks;
    println!(
        "{light} light passes, {left} victims left for a checkpoint, the cleaner's checkpoints \
         {cleaners} ({for_metadata} while metadata waited), {metadata} metadata blocks for \
         {} written",
        2 * writes
    );
    assert!(light > 100, "the cleaner ran: {light} light passes");
    // Without the wait no victim is left (each got a checkpoint of its own). How many share a
    // checkpoint is printed, not asserted: victim choice follows segment ages, wall time.
    assert!(
        left > 0,
        "no light victim was left waiting for a checkpoint"
    );
    check(&fs, &versions, "open");
    drop(files);
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck found damage: {damage:#?}");
    let reopened = Fs::open(dev, &Default::default()).unwrap();
    check(&reopened, &versions, "reopened");
}

/// A 24 MiB pool of 1 MiB segments with an 8 MiB write buffer, on `clock`.
fn small_files_config(clock: Clock) -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes: 1 << 20,
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 8 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock,
    }
}

/// 300 files of 64 KiB, each created, written and synced, into a 24 MiB pool: 82 % live at the
/// end, the dead blocks the metadata each sync's checkpoint superseded. Light passes near the
/// end leave victims holding a checkpoint's map nodes and inode pages waiting for the next
/// checkpoint; with 1 MiB segments one such victim holds more room than the last files' new
/// names and syncs lack. The clock steps by what the test says (a seeded jitter between
/// files, as a wall clock under load gives), so segment ages, and with them victim choice
/// and whether victims wait, are the same in every run. Returns the counters after the fill.
fn fill_with_synced_small_files(seed: u64) -> FsCounters {
    let clock = Clock::stepped(1_700_000_000_000_000_000, Duration::from_micros(1));
    let dev: Arc<dyn Device> = Arc::new(SimDevice::new(24 << 20));
    let fs = Fs::format(dev.clone(), &small_files_config(clock.clone())).unwrap();
    let mut rng = Rng(seed);
    const FILES: u64 = 300;
    for i in 0..FILES {
        clock.advance(Duration::from_micros(rng.below(1000)));
        let f = fs
            .open_file(&format!("/f{i}"), OpenFlags::create())
            .unwrap_or_else(|e| panic!("seed {seed}, file {i}: {e}"));
        f.pwrite(&common::data(seed ^ i, 64 << 10), 0)
            .unwrap_or_else(|e| panic!("seed {seed}, file {i}: {e}"));
        f.fsync()
            .unwrap_or_else(|e| panic!("seed {seed}, file {i}: sync: {e}"));
    }
    let counters = fs.counters();
    let check = |fs: &Fs, what: &str| {
        for i in 0..FILES {
            assert!(
                common::read(fs, &format!("/f{i}")) == common::data(seed ^ i, 64 << 10),
                "seed {seed}, {what}: file {i}"
            );
        }
    };
    check(&fs, "open");
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(
        damage.is_empty(),
        "seed {seed}: fsck found damage: {damage:#?}"
    );
    check(&Fs::open(dev, &Default::default()).unwrap(), "reopened");
    counters
}

#[test]
fn a_sync_near_full_gets_the_room_victims_waiting_for_a_checkpoint_hold() {
    // Without the wait's end seed 5 answered `NoSpace` to the last file ("118784 bytes to
    // write, 24576 bytes free after cleaning", as the lib tests' half-dead pool did in CI)
    // while a waiting victim held more than the write lacked; seed 1 passed, but its cleaning
    // too fell short while victims waited. Since the cleaner keeps the chain's bound whatever
    // segment ages say, its checkpoints end those seeds' waits first; seed 8's cleaning still
    // falls short while victims wait. Every file must be acknowledged.
    let (mut left, mut ended) = (0, 0);
    for seed in [1, 5, 8] {
        let c = fill_with_synced_small_files(seed);
        println!(
            "seed {seed}: {} victims left for a checkpoint, {} waits ended by cleaning that fell short",
            c.victims_left_for_checkpoint, c.metadata_waits_ended
        );
        left += c.victims_left_for_checkpoint;
        ended += c.metadata_waits_ended;
    }
    assert!(left > 0, "no light victim waited: the case is not made");
    assert!(
        ended > 0,
        "no wait was ended for a writer: the case is not made"
    );
}
