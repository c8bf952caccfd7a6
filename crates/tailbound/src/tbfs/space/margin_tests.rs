//! The free space the space check keeps beside a write: what it asks for, and when it cleans.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::SimDevice;
use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::{Barrier, Config, Fs, OpenFlags, Ordering};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(29).wrapping_add(seed * 13) % 251) as u8)
        .collect()
}

/// A full buffer sealed as data-only logs asks the space check for its own blocks once: the
/// low-water room kept for the cleaner to write the buffer is not kept again on top of it. A
/// write of the same size that is not the buffer still keeps the whole room, and cleans.
#[test]
fn a_buffer_seal_does_not_keep_room_for_the_buffer_twice() {
    let cfg = Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::Superblock,
        segment_bytes: 64 << 10,
        superblock_every_bytes: 256 << 10,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
    };
    let fs = Fs::format(Arc::new(SimDevice::new(32 << 20)), &cfg).unwrap();
    let inner = &fs.inner;
    let flush = cfg.dirty_bytes_max.div_ceil(BLOCK_U64);
    let hot = fs.open_file("/hot", OpenFlags::create()).unwrap();
    hot.pwrite(&pattern(1, 64 << 10), 0).unwrap();
    hot.fsync().unwrap();
    let cold = fs.open_file("/cold", OpenFlags::create()).unwrap();
    let seal = flush + flush / 64 + 1;
    // What a write of a buffer's size asks to find free when it is not the buffer: its blocks,
    // the reserve and the low-water room (or the checkpoint debt, if larger).
    let wants = |m: &crate::tbfs::state::State| {
        let (reserve, low_water) = inner.space_margins(m);
        inner.space_needed(seal) + reserve + low_water.max(inner.checkpoint_debt(m, false))
    };
    // Overwrites of one file and appends to another, synced each time, until the free space
    // is just below that: segments hold live and dead blocks, so there is something to clean.
    let mut i = 0u64;
    let wanted = loop {
        {
            let m = inner.lock_meta();
            let wanted = wants(&m);
            if inner.free_blocks(&m) < wanted {
                break wanted;
            }
        }
        hot.pwrite(&pattern(i, 4096), (i % 16) * 4096).unwrap();
        hot.fsync().unwrap();
        cold.append(&pattern(i + 1, 4096)).unwrap();
        cold.fsync().unwrap();
        i += 1;
        assert!(i < 100_000, "the pool never filled");
    };
    let mut m = inner.lock_meta();
    let free = inner.free_blocks(&m);
    // Short of it by far less than the flush the low-water room holds for the buffer.
    assert!(
        free + flush / 2 >= wanted,
        "free {free} fell more than half a flush below {wanted}"
    );
    let passes = m.cleaning.passes();
    inner.ensure_space_for_buffered(&mut m, seal).unwrap();
    assert_eq!(
        m.cleaning.passes(),
        passes,
        "a seal of the buffer with {free} blocks free cleaned"
    );
    inner.ensure_space(&mut m, seal).unwrap();
    assert!(
        m.cleaning.passes() > passes,
        "a write of a buffer's size that is not the buffer, {free} blocks free under the \
         {wanted} it asks for, did not clean"
    );
}
