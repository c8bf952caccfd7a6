//! Light cleaning passes under power cuts. With relaxed ordering and no protection period the
//! cleaner writes its copies of file data as data-only logs and reuses the segments they empty
//! as soon as those logs are durable, before any checkpoint stops referencing the old copies
//! (roll-forward replays the copies over them). A power cut at any write must recover every
//! block as durable as its barrier policy promises (every sync; an `fdatasync` too under
//! `every-log`), show each block at a version written since then, and leave an image `fsck`
//! finds free of damage, before and after recovery. The same holds with the background
//! cleaner's passes, which read their victims and flush without the metadata lock.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::fsck;
use tailbound::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, OpenOptions, Ordering, SetAttr};

const BLOCK: usize = 4096;
const DEVICE_BYTES: u64 = 8 << 20;
const FILES: u64 = 8;
/// Blocks per file: the files fill about 65 % of the pool.
const FILE_BLOCKS: u64 = 160;
/// Overwrites per run: about 1.5 pool capacities, so the cleaner runs many times.
const OPS: u64 = 3000;
const RUNS: u64 = 36;

fn config(barrier: Barrier) -> Config {
    config_in(barrier, 256 << 10)
}

/// [`config`] with segments of `segment_bytes`.
fn config_in(barrier: Barrier, segment_bytes: u64) -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier,
        segment_bytes,
        // Rare checkpoints: segments are reused between them.
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 64 << 10,
        protection_period: Duration::ZERO,
        background_gc: false,
        // The background pass (`Fs::clean_step`) cleans while less than this is free.
        gc_free_percent: 40,
        clock: Clock::wall(),
    }
}

/// Block `index` of file `file` at `version`: a header naming all three, then bytes derived
/// from them, so a block read back says which version it is and whether it is intact.
fn content(file: u64, index: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(&file.to_le_bytes());
    b[8..16].copy_from_slice(&index.to_le_bytes());
    b[16..24].copy_from_slice(&version.to_le_bytes());
    let mut x = (file << 40) ^ (index << 20) ^ version ^ 0x5bd1_e995;
    for byte in &mut b[24..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    b
}

/// Per block: the version the last successful sync made durable, and the newest written.
struct Model {
    durable: Vec<Vec<u64>>,
    written: Vec<Vec<u64>>,
}

fn path(file: u64) -> String {
    format!("/f{file}")
}

/// Creates the files with every block at version 0, durable.
fn fill(fs: &Fs) -> Vec<tailbound::tbfs::File> {
    let mut files = Vec::new();
    for f in 0..FILES {
        let file = fs.open_file(&path(f), OpenFlags::create()).unwrap();
        for i in 0..FILE_BLOCKS {
            file.pwrite(&content(f, i, 0), i * BLOCK as u64).unwrap();
        }
        files.push(file);
    }
    fs.sync().unwrap();
    files
}

fn assert_no_damage(image: Vec<u8>, what: &str) {
    assert_damage_only_from_the_cut(image, false, what);
}

/// fsck of a raw crash image (not opened since the cut, `raw`) finds no damage but what the cut
/// itself leaves, which recovery handles (each run checks the recovered pool after):
/// - one superblock copy torn by a cut during a sync's superblock write (before the flush that
///   ends the sync), the state the other copy is there for;
/// - a summary lost or torn while a later log that was not flushed either made it: unflushed
///   writes are lost in any order, and under every barrier, `every-log` included, a run of logs
///   one thread writes is flushed once, after its last (docs/DURABILITY.md), so nothing in it
///   was acknowledged.
///
/// A pool recovery has opened (`raw` false) fails on any damage.
fn assert_damage_only_from_the_cut(image: Vec<u8>, raw: bool, what: &str) {
    let dev = SimDevice::from_image(image);
    let report = fsck::check(&dev).unwrap_or_else(|e| panic!("{what}: fsck failed: {e}"));
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    if !raw {
        assert!(damage.is_empty(), "{what}: fsck found damage: {damage:#?}");
        return;
    }
    let torn_superblock = |f: &String| f.starts_with("damage: superblock ") && f.contains("CRC");
    let lost_out_of_order = |f: &String| f.contains("is damaged") && f.contains("follows it");
    let torn = damage.iter().filter(|f| torn_superblock(f)).count();
    let rest: Vec<&String> = damage
        .iter()
        .filter(|f| !torn_superblock(f) && !lost_out_of_order(f))
        .collect();
    assert!(
        rest.is_empty() && torn <= 1,
        "{what}: fsck found damage: {damage:#?}"
    );
}

/// What a run's workload does besides overwriting the files.
#[derive(Clone, Copy)]
struct Workload {
    /// Runs the background cleaner's pass now and then (victims read, flush and superblock
    /// written without `meta`).
    background: bool,
    /// Namespace changes: files renamed back and forth and their modes set (so their data goes
    /// out placed until a checkpoint), and scratch files created and deleted (so numbers are
    /// reused, and data is logged under a number the checkpoint holds for another file).
    namespace: bool,
    /// Segments of 32 KiB, 255 of them: enough for the cleaner's copies to go to a log head
    /// of their own (the chain jumps between it and the writers' head). With 256 KiB, 32
    /// segments: too few, and the copies follow the writers' logs.
    own_head: bool,
    /// Hot and cold overwrites (nine in ten to the first tenth of each file's blocks), else
    /// uniform: the cleaner opens its own head only while segment ages differ, which uniform
    /// overwrites do not make them.
    hot_cold: bool,
}

/// What a run counted before the power went out.
#[derive(Default)]
struct Outcome {
    light: u64,
    /// Passes whose copies went to the cleaner's own log head.
    apart: u64,
    /// Victims chosen, and those holding both writers' data and copies.
    victims: u64,
    mixed: u64,
    /// Buffer seals whose long-lived files went to the cleaner's head, a run of their own.
    sealed_apart: u64,
    /// Segments background passes emptied.
    emptied: u64,
    placed: u64,
}

/// The two names a file of the run may have.
fn names(file: u64) -> [String; 2] {
    [path(file), format!("/g{file}")]
}

/// Scratch file `k`'s block `index`: its own file id, so a block logged under a reused number
/// and replayed onto another file shows.
fn scratch(k: u64, index: u64) -> Vec<u8> {
    content(1000 + k, index, 1)
}

/// One run.
fn run(seed: u64, barrier: Barrier, work: Workload) -> Outcome {
    let background = work.background;
    let mut rng = Rng(seed);
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    // Half the runs as a memory pool: the cleaner then reads its victims a block at a time.
    dev.set_writes_are_copies(seed % 2 == 1);
    let segment_bytes = if work.own_head { 32 << 10 } else { 256 << 10 };
    let fs = Fs::format(dev.clone(), &config_in(barrier, segment_bytes)).unwrap();
    let files = fill(&fs);
    let mut model = Model {
        durable: vec![vec![0; FILE_BLOCKS as usize]; FILES as usize],
        written: vec![vec![0; FILE_BLOCKS as usize]; FILES as usize],
    };
    // The power goes out somewhere in the workload (or never, then the crash is at its end).
    let cut = rng.below(OPS * 3 / 2);
    dev.cut_power_after(cut);
    let mut background_cleaned = 0;
    // Which of its names each file has now; scratch files alive, oldest first.
    let mut named = vec![0usize; FILES as usize];
    let mut scratches: std::collections::VecDeque<u64> = Default::default();
    let mut next_scratch = 0u64;
    for _ in 0..OPS {
        let f = rng.below(FILES);
        let hot = FILE_BLOCKS / 10;
        let i = if !work.hot_cold {
            rng.below(FILE_BLOCKS)
        } else if rng.below(10) != 0 {
            rng.below(hot)
        } else {
            hot + rng.below(FILE_BLOCKS - hot)
        };
        let v = model.written[f as usize][i as usize] + 1;
        // A failed write may still have reached the device: its version is possible too.
        model.written[f as usize][i as usize] = v;
        if files[f as usize]
            .pwrite(&content(f, i, v), i * BLOCK as u64)
            .is_err()
        {
            break;
        }
        let synced = match rng.below(40) {
            // A relaxed fdatasync is a data-only log, flushed only under `every-log`; the other
            // barriers may lose it on power loss (docs/FORMAT.md), until a sync.
            0 => files[f as usize]
                .fdatasync()
                .map(|()| {
                    if barrier == Barrier::EveryLog {
                        vec![f]
                    } else {
                        Vec::new()
                    }
                })
                .map_err(|_| ()),
            1 => fs.sync().map(|()| (0..FILES).collect()).map_err(|_| ()),
            2 | 3 if background => {
                let before = fs.counters().segments_cleaned;
                let r = fs.clean_step().map(|()| Vec::new()).map_err(|_| ());
                background_cleaned += fs.counters().segments_cleaned - before;
                r
            }
            4 if work.namespace => {
                let n = &mut named[f as usize];
                let r = fs.rename(&names(f)[*n], &names(f)[1 - *n]);
                *n = 1 - *n;
                r.map(|()| Vec::new()).map_err(|_| ())
            }
            5 if work.namespace => {
                let attr = SetAttr {
                    mode: Some(0o600 | (rng.below(2) as u32) << 5),
                    ..SetAttr::default()
                };
                fs.set_attr(&names(f)[named[f as usize]], &attr)
                    .map(|()| Vec::new())
                    .map_err(|_| ())
            }
            6 | 7 if work.namespace && scratches.len() < 3 => {
                let k = next_scratch;
                next_scratch += 1;
                scratches.push_back(k);
                // Up to twice the write buffer: some go out in a full buffer.
                let blocks = 1 + rng.below(32);
                let data: Vec<u8> = (0..blocks).flat_map(|i| scratch(k, i)).collect();
                fs.open_file(&format!("/s{k}"), OpenFlags::create())
                    .and_then(|file| file.pwrite(&data, 0))
                    .map(|_| Vec::new())
                    .map_err(|_| ())
            }
            6 | 7 if work.namespace => {
                let k = scratches.pop_front().expect("three scratch files");
                fs.unlink(&format!("/s{k}"))
                    .map(|()| Vec::new())
                    .map_err(|_| ())
            }
            _ => Ok(Vec::new()),
        };
        match synced {
            Ok(done) => {
                for g in done {
                    model.durable[g as usize] = model.written[g as usize].clone();
                }
            }
            Err(()) => break,
        }
    }
    let counters = fs.counters();
    drop(files);
    drop(fs);

    let image = dev.crash_image(rng.next());
    let what = format!("seed {seed:#x}, {barrier:?}, power cut after {cut} writes");
    // The raw image: only what the cut leaves (with background passes superblocks are written
    // often, so a cut tears one more often). The recovered pool is checked below.
    assert_damage_only_from_the_cut(image.clone(), true, &format!("{what}: the crash image"));
    let crashed = Arc::new(SimDevice::from_image(image));
    let fs = Fs::open(crashed.clone(), &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    for f in 0..FILES {
        let found: Vec<String> = names(f)
            .into_iter()
            .filter(|p| fs.stat(p).is_ok())
            .collect();
        assert_eq!(found.len(), 1, "{what}: file {f} is at {found:?}");
        let file = fs
            .open_file(&found[0], OpenFlags::read_only())
            .unwrap_or_else(|e| panic!("{what}: {} is gone: {e}", found[0]));
        let mut buf = vec![0u8; BLOCK];
        for i in 0..FILE_BLOCKS {
            assert_eq!(
                file.pread(&mut buf, i * BLOCK as u64).unwrap(),
                BLOCK,
                "{what}: file {f} block {i} is short"
            );
            let version = u64::from_le_bytes(buf[16..24].try_into().unwrap());
            let (lo, hi) = (
                model.durable[f as usize][i as usize],
                model.written[f as usize][i as usize],
            );
            assert!(
                (lo..=hi).contains(&version) && buf == content(f, i, version),
                "{what}: file {f} block {i} holds version {version} (intact: {}), expected one of {lo}..={hi}",
                buf == content(f, i, version)
            );
        }
    }
    // Scratch files are there or not, as their creation and deletion made it; one that is
    // holds its own bytes.
    for entry in fs.readdir("/").unwrap() {
        let Some(k) = entry
            .name
            .strip_prefix('s')
            .and_then(|k| k.parse::<u64>().ok())
        else {
            continue;
        };
        let file = fs
            .open_file(&format!("/{}", entry.name), OpenFlags::read_only())
            .unwrap();
        let size = file.stat().unwrap().size;
        let mut buf = vec![0u8; BLOCK];
        for i in 0..size.div_ceil(BLOCK as u64) {
            file.pread(&mut buf, i * BLOCK as u64).unwrap();
            assert!(
                buf == scratch(k, i),
                "{what}: scratch file {k} block {i} holds another's bytes (file {}, version {})",
                u64::from_le_bytes(buf[..8].try_into().unwrap()),
                u64::from_le_bytes(buf[16..24].try_into().unwrap())
            );
        }
    }
    let report = fs.recovery_report();
    fs.close().unwrap();
    assert_no_damage(
        crashed.image(),
        &format!("{what}: the recovered pool, closed (recovery: {report:?})"),
    );
    Outcome {
        light: counters.light_cleaning_passes,
        apart: counters.light_passes_apart,
        mixed: counters.victims_mixed,
        sealed_apart: counters.seals_apart,
        victims: counters.victims_chosen,
        emptied: background_cleaned,
        placed: counters.placed_blocks,
    }
}

/// Every run of `RUNS`, the barriers in turn; what they counted, summed.
fn runs(seed_base: u64, work: Workload) -> Outcome {
    let mut sum = Outcome::default();
    for seed in 0..RUNS {
        let barrier = [
            Barrier::EveryCheckpoint,
            Barrier::EveryLog,
            Barrier::Superblock,
        ][(seed % 3) as usize];
        let o = run(seed_base + seed, barrier, work);
        sum.light += o.light;
        sum.apart += o.apart;
        sum.mixed += o.mixed;
        sum.sealed_apart += o.sealed_apart;
        sum.victims += o.victims;
        sum.emptied += o.emptied;
        sum.placed += o.placed;
    }
    sum
}

#[test]
fn light_cleaning_survives_power_cuts_and_fsck_finds_no_damage() {
    let o = runs(
        0x11c1_ea00,
        Workload {
            background: false,
            namespace: false,
            own_head: false,
            hot_cold: false,
        },
    );
    // The property is about light passes: the runs must have made them.
    assert!(o.light > 0, "no light cleaning pass in {RUNS} runs");
}

#[test]
fn background_cleaning_passes_survive_power_cuts_and_fsck_finds_no_damage() {
    let o = runs(
        0xb6c1_ea00,
        Workload {
            background: true,
            namespace: false,
            own_head: false,
            hot_cold: false,
        },
    );
    assert!(o.light > 0, "no light cleaning pass in {RUNS} runs");
    assert!(
        o.emptied > 0,
        "no background pass emptied a segment in {RUNS} runs"
    );
}

/// With namespace changes pending most of the time, full buffers and cleaning passes still go
/// out as data-only logs, the data of the files changed placed: a crash must replay none of it
/// onto whatever the checkpoint holds under those numbers.
#[test]
fn placed_data_and_light_passes_with_namespace_changes_survive_power_cuts() {
    let o = runs(
        0x9ace_da7a,
        Workload {
            background: true,
            namespace: true,
            own_head: false,
            hot_cold: false,
        },
    );
    assert!(o.light > 0, "no light cleaning pass in {RUNS} runs");
    assert!(o.placed > 0, "no placed data in {RUNS} runs");
}

/// The cleaner's copies in a log head of their own: the chain jumps from the writers' head to
/// the cleaner's before a light pass's copies and back after them, in the foreground and in
/// background passes, with namespace changes pending, under hot and cold overwrites (the head
/// is opened only while segment ages differ). Buffer seals put long-lived files' data in that
/// head too, a run of their own between two jumps, and the copies of victims holding
/// short-lived data stay in the writers' head, so each head's victims hold host data and
/// copies alike. A power cut anywhere, between or inside the jumps, must lose no acknowledged
/// write and leave no damage; copies and host data must both have gone apart. Under uniform
/// overwrites the head stays shut but for a few passes.
#[test]
fn copies_in_a_log_head_of_their_own_survive_power_cuts() {
    for (seed, background, namespace) in [(0xc0_bead, false, false), (0xc1_bead, true, true)] {
        let o = runs(
            seed,
            Workload {
                background,
                namespace,
                own_head: true,
                hot_cold: true,
            },
        );
        println!(
            "seed {seed:#x}: {} light passes, {} passes' copies apart; {} seals apart; {} of {} \
             victims mixed",
            o.light, o.apart, o.sealed_apart, o.mixed, o.victims
        );
        assert!(o.light > 0, "no light cleaning pass in {RUNS} runs");
        assert!(
            o.apart > 0,
            "no pass put its copies in a head of their own ({} light passes)",
            o.light
        );
        assert!(
            o.sealed_apart > 0,
            "no seal put long-lived files in the cleaner's head ({} passes' copies apart)",
            o.apart
        );
    }
    let o = runs(
        0xc2_bead,
        Workload {
            background: false,
            namespace: false,
            own_head: true,
            hot_cold: false,
        },
    );
    println!(
        "seed 0xc2bead, uniform: {} light passes, {} passes' copies apart, {} seals apart",
        o.light, o.apart, o.sealed_apart
    );
    assert!(o.light > 0, "no light cleaning pass in {RUNS} runs");
    assert!(
        o.apart * 10 < o.light,
        "uniform overwrites: {} of {} light passes put their copies apart",
        o.apart,
        o.light
    );
}

/// What a killed process leaves is every write it issued. Such an image, taken after each
/// overwrite (so between every light pass and the writes that reuse its victims), must show no
/// damage to `fsck` (it holds checkpoints whose pointers into reused segments roll-forward
/// replaces) and must reopen with every block at its newest version.
#[test]
fn process_kill_images_between_light_passes_are_consistent() {
    let mut rng = Rng(7);
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    // A killed process leaves its memory pool as it wrote it.
    dev.set_writes_are_copies(true);
    let fs = Fs::format(dev.clone(), &config(Barrier::EveryCheckpoint)).unwrap();
    let files = fill(&fs);
    let mut newest = vec![vec![0u64; FILE_BLOCKS as usize]; FILES as usize];
    let (mut checked, mut reopened) = (0u64, 0u64);
    for op in 1..=1500u64 {
        let f = rng.below(FILES);
        let i = rng.below(FILE_BLOCKS);
        files[f as usize]
            .pwrite(&content(f, i, op), i * BLOCK as u64)
            .unwrap();
        newest[f as usize][i as usize] = op;
        if op % 40 == 0 {
            // A checkpoint whose space check cleans must write the maps the passes changed.
            fs.sync().unwrap();
        }
        if fs.counters().light_cleaning_passes == 0 || op % 3 != 0 {
            continue;
        }
        // Buffered writes are not in the image; what was flushed is.
        let image = dev.image();
        assert_no_damage(
            image.clone(),
            &format!("process killed after overwrite {op}"),
        );
        checked += 1;
        if op % 150 == 0 {
            let reopened_dev = Arc::new(SimDevice::from_image(image));
            let again = Fs::open(reopened_dev, &OpenOptions::default())
                .unwrap_or_else(|e| panic!("reopening after overwrite {op}: {e}"));
            let mut buf = vec![0u8; BLOCK];
            for g in 0..FILES {
                let file = again.open_file(&path(g), OpenFlags::read_only()).unwrap();
                for j in 0..FILE_BLOCKS {
                    file.pread(&mut buf, j * BLOCK as u64).unwrap();
                    let version = u64::from_le_bytes(buf[16..24].try_into().unwrap());
                    assert!(
                        version <= newest[g as usize][j as usize] && buf == content(g, j, version),
                        "after overwrite {op}: file {g} block {j} holds version {version} (intact: {})",
                        buf == content(g, j, version)
                    );
                }
            }
            again.close().unwrap();
            reopened += 1;
        }
    }
    assert!(
        checked > 100 && reopened > 0,
        "light passes came too late: {checked} images checked"
    );
}
