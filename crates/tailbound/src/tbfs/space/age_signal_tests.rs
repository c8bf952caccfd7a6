//! Victim choice's age signal (`Cleaning::ages_differ`) under hot and cold overwrites, while
//! the roll-forward chain holds the hot segments: a light pass may not take them, and the cold
//! segments it may take, all alike, tell no ages apart. The signal counts the chain's segments
//! too, so it does not fall there; when it fell, the copies stopped going apart, the chain's
//! bound stopped, and the passes copied cold segments nearly full
//! (docs/results/cleaner.md, 2026-12-01). A stepped clock and one writer make the run the same
//! on any machine.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::memory::MemoryPool;
use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering};

const FILES: u64 = 16;
/// Files `0..HOT_FILES` take nine overwrites in ten.
const HOT_FILES: u64 = 2;

/// A 64 MiB memory pool of 256 KiB segments (enough for the cleaner's own log head), cleaned
/// only by writers.
fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
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

/// The state of a small xorshift generator: the same writes on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn ages_differ_under_hot_and_cold_overwrites_whatever_the_chain_holds() {
    let fs = Fs::format(
        Arc::new(MemoryPool::anonymous(64 << 20).unwrap()),
        &config(),
    )
    .unwrap();
    let size = fs.space().unwrap().size;
    let per_file = size * 88 / 100 / FILES / BLOCK_U64;
    let buf = vec![0x3cu8; (per_file * BLOCK_U64) as usize];
    let files: Vec<_> = (0..FILES)
        .map(|i| {
            let f = fs
                .open_file(&format!("/h{i:02}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&buf, 0).unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    let mut rng = Rng(0x40c0_5eed);
    let block = vec![0xa5u8; BLOCK_U64 as usize];
    let capacity = size / BLOCK_U64;
    // Checked every 64 writes after a pool's worth of warm-up: how often the signal was off,
    // and how often the chain held more segments than the light passes' candidates.
    let (mut checks, mut off, mut chain_long) = (0u64, 0u64, 0u64);
    for i in 0..3 * capacity {
        let f = if rng.below(10) == 0 {
            HOT_FILES + rng.below(FILES - HOT_FILES)
        } else {
            rng.below(HOT_FILES)
        };
        files[f as usize]
            .pwrite(&block, rng.below(per_file) * BLOCK_U64)
            .unwrap();
        if i >= capacity && i % 64 == 0 {
            let m = fs.inner.lock_meta();
            checks += 1;
            off += u64::from(!m.cleaning.ages_differ());
            let sb_seq = fs.inner.superblocks.checkpoint_seq();
            let chain = (0..fs.inner.segment_count() as usize)
                .filter(|&s| m.seg.live(s) > 0 && m.seg.last_seq(s) > sb_seq)
                .count() as u64;
            chain_long += u64::from(chain * 4 > fs.inner.segment_count());
        }
    }
    let c = fs.counters();
    println!(
        "{checks} checks: the signal off at {off}, the chain over a quarter of the pool at \
         {chain_long}; {} passes, {} light, {} apart, {} blocks copied",
        c.cleaning_passes, c.light_cleaning_passes, c.light_passes_apart, c.blocks_copied
    );
    assert!(c.light_passes_apart > 0, "no light pass went apart");
    assert_eq!(
        off, 0,
        "the age signal was off at {off} of {checks} checks under hot and cold overwrites"
    );
}
