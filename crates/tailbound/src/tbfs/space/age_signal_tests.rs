//! Victim choice's age signal (`Cleaning::ages_differ`). Under hot and cold overwrites the
//! roll-forward chain holds the hot segments: a light pass may not take them, and the cold
//! segments it may take, all alike, tell no ages apart. The signal counts the chain's segments
//! too, so it does not fall there; when it fell, the copies stopped going apart, the chain's
//! bound stopped, and the passes copied cold segments nearly full
//! (docs/results/cleaner.md, 2026-12-01). Under uniform overwrites it must stay off: there the
//! chain's young segments, each with a few dead blocks, read as rates far apart by chance, so a
//! chain segment counts by the blocks it lost (`light_pass_spread`, checked on segments drawn
//! from one death rate and from two). A stepped clock and one writer make the pool's run the
//! same on any machine; the drawn segments come from a seeded generator.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::memory::MemoryPool;
use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::limits::AGE_SIGNAL_SPREAD;
use crate::tbfs::space::cleaner::light_pass_spread;
use crate::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering};

const FILES: u64 = 16;
/// Files `0..HOT_FILES` take nine overwrites in ten.
const HOT_FILES: u64 = 2;

/// A memory pool of `segment_bytes` segments, enough of them for the cleaner's own log head,
/// cleaned only by writers.
fn config(segment_bytes: u64) -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes,
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
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The live blocks left of a segment of `blocks` whose every block dies at `rate` (per
    /// second) and has been exposed `exposed_s` seconds.
    fn live(&mut self, blocks: u64, rate: f64, exposed_s: f64) -> u32 {
        let p = (-rate * exposed_s).exp();
        (0..blocks).filter(|_| self.unit() < p).count() as u32
    }
}

#[test]
fn ages_differ_under_hot_and_cold_overwrites_whatever_the_chain_holds() {
    let fs = Fs::format(
        Arc::new(MemoryPool::anonymous(64 << 20).unwrap()),
        &config(256 << 10),
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

/// A drawn segment: its live blocks and its age in seconds.
type Segment = (u32, f64);

/// Segments of eight blocks under uniform deaths (one per block and second), as a small pool's
/// light pass sees them: 200 candidates aged 20 ms to 1.2 s, and a chain of 40 segments whose
/// newest log is 20 µs to 2 ms old while their blocks have been exposed 100 ms longer (the
/// segments filled by small logs). Such a young segment that lost a block or two reads as a
/// rate hundreds of times the candidates'.
fn uniform_small_segments(rng: &mut Rng) -> (Vec<Segment>, Vec<Segment>) {
    let candidates = (0..200)
        .map(|i| {
            let age = 0.02 + f64::from(i) * 0.006;
            (rng.live(8, 1.0, age), age)
        })
        .collect();
    let chain = (0..40)
        .map(|i| {
            let age = 20e-6 + f64::from(i) * 50e-6;
            (rng.live(8, 1.0, age + 0.1), age)
        })
        .collect();
    (candidates, chain)
}

#[test]
fn a_uniform_pools_young_chain_does_not_turn_the_signal_on() {
    for seed in [0x5eed, 1, 2, 3] {
        let mut rng = Rng(seed);
        let (candidates, chain) = uniform_small_segments(&mut rng);
        let alone = light_pass_spread(8, candidates.iter().copied(), std::iter::empty());
        let with_chain = light_pass_spread(8, candidates.iter().copied(), chain.iter().copied());
        println!("seed {seed:#x}: candidates alone {alone:.2}, with the chain {with_chain:.2}");
        assert!(
            alone < AGE_SIGNAL_SPREAD,
            "seed {seed:#x}: one death rate, yet the candidates spread {alone:.2}"
        );
        assert!(
            with_chain < AGE_SIGNAL_SPREAD,
            "seed {seed:#x}: one death rate, yet with the chain the spread is {with_chain:.2}"
        );
    }
}

/// Segments of 256 blocks: 150 cold candidates (a block dies at 0.05 per second) aged 1 to
/// 2.5 s, alike, and a chain of 50 hot segments (81 times the rate) aged 50 to 300 ms.
#[test]
fn a_hot_chain_beside_cold_candidates_turns_the_signal_on() {
    for seed in [0x5eed, 1, 2, 3] {
        let mut rng = Rng(seed);
        let candidates: Vec<Segment> = (0..150)
            .map(|i| {
                let age = 1.0 + f64::from(i) * 0.01;
                (rng.live(256, 0.05, age), age)
            })
            .collect();
        let chain: Vec<Segment> = (0..50)
            .map(|i| {
                let age = 0.05 + f64::from(i) * 0.005;
                (rng.live(256, 0.05 * 81.0, age), age)
            })
            .collect();
        let alone = light_pass_spread(256, candidates.iter().copied(), std::iter::empty());
        let with_chain = light_pass_spread(256, candidates.iter().copied(), chain.iter().copied());
        println!("seed {seed:#x}: candidates alone {alone:.2}, with the chain {with_chain:.2}");
        assert!(
            alone < AGE_SIGNAL_SPREAD,
            "seed {seed:#x}: cold candidates alone spread {alone:.2}"
        );
        assert!(
            with_chain > AGE_SIGNAL_SPREAD,
            "seed {seed:#x}: hot chain, cold candidates, yet the spread is {with_chain:.2}"
        );
    }
}
