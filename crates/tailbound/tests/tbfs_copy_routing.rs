//! Where a light cleaning pass puts its copies under hot and cold overwrites: by the write
//! rate of the file each block belongs to, a hot file's blocks to the writers' log head and a
//! cold file's to the cleaner's, whichever head wrote the victim (docs/ARCHITECTURE.md,
//! "Copies by their file's write rate"). Victims written by the cleaner hold cold data and the
//! hot blocks that outlived their first segment; copied together again, those hot survivors
//! keep every next victim of that head fuller. Checked through the blocks' segments as a
//! client of a memory pool sees them (`File::lease_blocks`), on a stepped clock and one
//! writer, so the run is the same on any machine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::{Barrier, Clock, Config, File, Fs, OpenFlags, Ordering};

const BLOCK: u64 = 4096;
const POOL_BYTES: u64 = 64 << 20;
const FILES: u64 = 16;
/// Files `0..HOT_FILES` take nine overwrites in ten.
const HOT_FILES: u64 = 2;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        // 256 segments: enough for the cleaner's own log head.
        segment_bytes: 256 << 10,
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
        clock: Clock::stepped(1 << 40, Duration::from_micros(10)),
    }
}

/// Each block's address in the pool, per file.
fn addresses(files: &[File], per_file: u64) -> Vec<Vec<u64>> {
    files
        .iter()
        .map(|f| f.lease_blocks(0, per_file, &mut |_| {}).unwrap().blocks)
        .collect()
}

#[test]
fn a_light_pass_copies_a_hot_files_blocks_and_a_cold_files_to_different_heads() {
    let dev: Arc<dyn Device> = Arc::new(MemoryPool::anonymous(POOL_BYTES).unwrap());
    let fs = Fs::format(dev, &config()).unwrap();
    let size = fs.space().unwrap().size;
    let per_file = size * 85 / 100 / FILES / BLOCK;
    let buf = vec![0x3cu8; (per_file * BLOCK) as usize];
    let files: Vec<File> = (0..FILES)
        .map(|i| {
            let f = fs
                .open_file(&format!("/h{i:02}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&buf, 0).unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    // Two pool capacities of 4 KiB overwrites, nine in ten to the hot files.
    let mut rng = Rng(0x40c0);
    let block = vec![0xa5u8; BLOCK as usize];
    for _ in 0..2 * (size / BLOCK) {
        let f = if rng.below(10) == 0 {
            HOT_FILES + rng.below(FILES - HOT_FILES)
        } else {
            rng.below(HOT_FILES)
        };
        files[f as usize]
            .pwrite(&block, rng.below(per_file) * BLOCK)
            .unwrap();
    }
    fs.sync().unwrap();
    let before = addresses(&files, per_file);
    let counted = fs.counters();
    // No writes from here on: every block that moves is a cleaner's copy.
    let free = fs.space().unwrap().free as f64 / size as f64;
    fs.gc((free + 0.02).min(1.0)).unwrap();
    fs.sync().unwrap();
    let after = addresses(&files, per_file);
    let counters = fs.counters();
    let segment_blocks = (256 << 10) / BLOCK;
    // Per segment the copies went to: how many of them are of cold files and of hot ones.
    let mut to: BTreeMap<u64, [u64; 2]> = BTreeMap::new();
    let mut copied = [0u64, 0u64];
    for (f, (old, new)) in before.iter().zip(&after).enumerate() {
        let hot = usize::from((f as u64) < HOT_FILES);
        for (&a, &b) in old.iter().zip(new) {
            if a != b {
                to.entry(b / segment_blocks).or_default()[hot] += 1;
                copied[hot] += 1;
            }
        }
    }
    // The copies among the other kind's in a segment (the fewer of the two there).
    let mixed: u64 = to.values().map(|&[cold, hot]| cold.min(hot)).sum();
    let shared = to
        .values()
        .filter(|&&[cold, hot]| cold > 0 && hot > 0)
        .count();
    println!(
        "passes {}, light {}, apart {}; {} blocks copied, {} checkpoints; copied: cold {}, hot \
         {}, into {} segments, {} of them holding both; {} copies among the other kind's; {} \
         copies by file",
        counters.cleaning_passes - counted.cleaning_passes,
        counters.light_cleaning_passes - counted.light_cleaning_passes,
        counters.light_passes_apart - counted.light_passes_apart,
        counters.blocks_copied - counted.blocks_copied,
        counters.checkpoints - counted.checkpoints,
        copied[0],
        copied[1],
        to.len(),
        shared,
        mixed,
        counters.copies_by_file - counted.copies_by_file,
    );
    assert!(
        counters.light_passes_apart > counted.light_passes_apart,
        "no light pass put its copies in the cleaner's head"
    );
    assert!(
        copied[0] > 0 && copied[1] > 0,
        "the passes copied cold blocks ({}) and hot ones ({})",
        copied[0],
        copied[1]
    );
    // Routed by the victim's head alone, 135 of 1,766 copies here went among the other
    // kind's, most of them hot survivors among cold data (135 of the 219 hot copies), into 10
    // of 57 segments. Routed by their file's write rate, a handful still do, at the edges of
    // a head's segment.
    assert!(
        mixed * 50 <= copied[0] + copied[1],
        "{mixed} of {} copies went among the other kind's (into {shared} of {} segments)",
        copied[0] + copied[1],
        to.len()
    );
}
