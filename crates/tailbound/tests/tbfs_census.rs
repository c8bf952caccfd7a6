//! `Fs::space_census`: every block of the segment space is counted once, as live data, live
//! metadata of a kind, pinned, free, waiting for reuse, held by a log head, or dead; the live
//! kinds add up to the segment table's count; and light passes that wrote a checkpoint for
//! their victims' metadata counted that metadata by kind.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering, SpaceCensus};

const BLOCK: u64 = 4096;
const FILES: u64 = 12;
/// Blocks per file: the files fill about 70 % of the 8 MiB pool.
const FILE_BLOCKS: u64 = 120;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes: 256 << 10,
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 64 << 10,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
        clock: Clock::stepped(1_000_000_000, Duration::from_millis(1)),
    }
}

/// Every part of the census against the others and the pool's shape.
fn check_adds_up(c: &SpaceCensus, file_blocks: u64) {
    assert_eq!(c.file_data, file_blocks, "{c:?}");
    assert_eq!(c.file_data + c.metadata(), c.live_counted, "{c:?}");
    assert_eq!(
        c.live_counted + c.pinned + c.free + c.pending + c.heads_rest + c.dead,
        c.segments * c.segment_blocks,
        "{c:?}"
    );
    // The root directory and /d, the inode file's pages, the newest checkpoint's root.
    assert!(c.directory_blocks >= 2, "{c:?}");
    assert!(c.inode_pages >= 1, "{c:?}");
    assert_eq!(c.roots, 1, "{c:?}");
    assert!(c.segments_with_metadata >= 1, "{c:?}");
    assert!(c.reserve > 0 && c.low_water > 0, "{c:?}");
}

#[test]
fn every_block_of_the_pool_is_counted_once() {
    let dev: Arc<dyn Device> = Arc::new(MemoryPool::anonymous(8 << 20).unwrap());
    let fs = Fs::format(dev, &config()).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let mut files = Vec::new();
    for i in 0..FILES {
        let f = fs
            .open_file(&format!("/d/f{i}"), OpenFlags::create())
            .unwrap();
        f.pwrite(&common::data(i, (FILE_BLOCKS * BLOCK) as usize), 0)
            .unwrap();
        files.push(f);
    }
    fs.sync().unwrap();
    check_adds_up(&fs.space_census().unwrap(), FILES * FILE_BLOCKS);

    // Overwrites at random places, several pool capacities: light passes clean, and the files'
    // maps grow nodes.
    let mut rng = Rng(0xce05);
    let block = vec![0x5au8; BLOCK as usize];
    for _ in 0..5 * 2048 {
        let f = rng.below(FILES) as usize;
        let at = rng.below(FILE_BLOCKS) * BLOCK;
        files[f].pwrite(&block, at).unwrap();
    }
    fs.sync().unwrap();
    let c = fs.space_census().unwrap();
    check_adds_up(&c, FILES * FILE_BLOCKS);
    assert!(c.file_map_nodes >= 1, "{c:?}");
    let n = fs.counters();
    assert!(n.light_cleaning_passes > 0, "{n:?}");
    // Each checkpoint a light pass wrote for its victims' metadata found some.
    let found = n.victim_meta_maps
        + n.victim_meta_inodes
        + n.victim_meta_tables
        + n.victim_meta_dirs
        + n.victim_meta_other;
    assert!(found >= n.cleaner_checkpoints_for_metadata, "{n:?}");

    // Deletes give their blocks back: the census follows.
    drop(files.pop());
    drop(files.pop());
    fs.unlink(&format!("/d/f{}", FILES - 1)).unwrap();
    fs.unlink(&format!("/d/f{}", FILES - 2)).unwrap();
    fs.sync().unwrap();
    check_adds_up(&fs.space_census().unwrap(), (FILES - 2) * FILE_BLOCKS);
    drop(files);
    fs.close().unwrap();
}
