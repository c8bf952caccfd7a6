//! How much free space the cleaner leaves behind when a writer's seal of the buffer cleans.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::SimDevice;
use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::state::Engine;
use crate::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering};

/// A 32 MiB pool of 256 KiB segments with a 1 MiB buffer, cleaned only by writers.
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

/// A writer whose full buffer finds too little room cleans, and the cleaner writes the buffer
/// before its passes. The room the seal asked for is then used: the cleaner stops once the
/// reserve and the low-water mark are free again, not that and the buffer's size, which would
/// keep a buffer's worth of the pool free (and fill the segments it cleans fuller) for nothing.
#[test]
fn a_buffer_the_cleaner_writes_first_is_not_cleaned_for_twice() {
    let fs = Fs::format(Arc::new(SimDevice::new(32 << 20)), &config()).unwrap();
    let size = fs.space().unwrap().size;
    let files = 8u64;
    let per_file = size * 8 / 10 / BLOCK_U64 / files;
    let handles: Vec<_> = (0..files)
        .map(|i| {
            let f = fs
                .open_file(&format!("/f{i}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&vec![i as u8; (per_file * BLOCK_U64) as usize], 0)
                .unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    let inner = &fs.inner;
    let buffer = config().dirty_bytes_max / BLOCK_U64;
    let (margin, room) = {
        let m = inner.lock_meta();
        let margin = inner.reserve_blocks() + Engine::deletes_reserve(&m) + inner.low_water(&m);
        (margin, inner.space_needed(buffer))
    };
    // Random overwrites (a fixed sequence) until many writes have cleaned.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let block = vec![7u8; BLOCK_U64 as usize];
    let (mut cleaned, mut left_low) = (0u32, 0u32);
    let mut writes = 0u64;
    while cleaned < 40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let target = x % (per_file * files);
        let passes = fs.counters().cleaning_passes;
        handles[(target / per_file) as usize]
            .pwrite(&block, target % per_file * BLOCK_U64)
            .unwrap();
        if fs.counters().cleaning_passes > passes {
            cleaned += 1;
            let m = inner.lock_meta();
            if inner.free_blocks(&m) < margin + room {
                left_low += 1;
            }
        }
        writes += 1;
        assert!(writes < 2_000_000, "the writers never cleaned 40 times");
    }
    // Without the seal's room counted as used, every cleaning left at least the margin and the
    // buffer's room free.
    assert!(
        left_low > cleaned / 2,
        "{left_low} of {cleaned} cleanings left less than the margin {margin} and the \
         buffer's room {room} free"
    );
}
