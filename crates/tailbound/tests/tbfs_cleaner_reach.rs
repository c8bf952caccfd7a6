//! Which segments light cleaning passes can reach. A light pass may not take a segment that
//! lost blocks to a delete or a truncate since the superblock's checkpoint, nor one in the
//! roll-forward chain; with files deleted all the time those are the emptiest segments, and
//! passes that keep to the others copy far fuller victims than greedy's. The cleaner writes a
//! checkpoint and its superblock first when that saves more copies than the checkpoint
//! writes. Checked on the counters a pass keeps (`FsCounters::victim_live_blocks` against
//! `greedy_live_blocks`, the emptiest written segments), in a memory pool with one writer, so
//! the run is the same on any machine.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering};

const BLOCK: u64 = 4096;
const POOL_BYTES: u64 = 64 << 20;

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
        clock: Clock::wall(),
    }
}

/// Files of 4 KiB to 256 KiB created and deleted at random, the live data held at 70 % of the
/// pool, for `capacities` pool capacities of writes after the fill. Returns the victims' live
/// blocks, greedy's, and the victims, over the passes after the fill, and how many of greedy's
/// choice the rule for blocks dropped since the superblock kept from the passes.
fn churn(capacities: u64) -> (u64, u64, u64, u64) {
    let dev: Arc<dyn Device> = Arc::new(MemoryPool::anonymous(POOL_BYTES).unwrap());
    let fs = Fs::format(dev, &config()).unwrap();
    let size = fs.space().unwrap().size;
    let target = size * 7 / 10;
    let mut rng = Rng(0x7eac);
    let mut files: Vec<(String, u64)> = Vec::new();
    let (mut live, mut next, mut written) = (0u64, 0u64, 0u64);
    let mut before = None;
    let buf = vec![0x5au8; 256 << 10];
    while written < (capacities + 1) * size {
        if before.is_none() && written >= size {
            before = Some(fs.counters());
        }
        if live + (256 << 10) <= target || files.is_empty() {
            let len = BLOCK * (1 + rng.below(64));
            let path = format!("/c{next:06}");
            next += 1;
            let f = fs.open_file(&path, OpenFlags::create()).unwrap();
            f.pwrite(&buf[..len as usize], 0).unwrap();
            files.push((path, len));
            live += len;
            written += len;
        } else {
            let (path, len) = files.swap_remove(rng.below(files.len() as u64) as usize);
            fs.unlink(&path).unwrap();
            live -= len;
        }
    }
    fs.sync().unwrap();
    let (b, a) = (before.unwrap(), fs.counters());
    (
        a.victim_live_blocks - b.victim_live_blocks,
        a.greedy_live_blocks - b.greedy_live_blocks,
        a.victims_chosen - b.victims_chosen,
        a.greedy_kept_by_dead - b.greedy_kept_by_dead,
    )
}

#[test]
fn light_passes_reach_the_segments_deletes_emptied() {
    let (victims_live, greedy_live, victims, kept) = churn(3);
    assert!(victims > 100, "the cleaner ran: {victims} victims");
    let segment_blocks = (256 << 10) / BLOCK;
    let per_victim = |l: u64| l as f64 / (victims * segment_blocks) as f64;
    let (chosen, greedy) = (per_victim(victims_live), per_victim(greedy_live));
    println!(
        "victims' live fraction {chosen:.3}, greedy's {greedy:.3}, {victims} victims, {kept} of greedy's kept by drops since the superblock"
    );
    // Deletes keep emptying segments the light passes may not take until a checkpoint. Without
    // the checkpoint first, that rule kept three quarters of greedy's choice from the passes
    // and the victims were 0.45 of a segment fuller than greedy's (a run of this test before
    // the change); with it, an eighth and 0.18. What is left of the difference is victim
    // choice's own (cost-benefit, since ages differ; ages are wall time, hence the margins).
    assert!(
        kept as f64 <= 0.3 * victims as f64,
        "{kept} of greedy's {victims} segments kept from the passes by drops since the superblock"
    );
    assert!(
        chosen <= greedy + 0.3,
        "victims' live fraction {chosen:.3} against greedy's {greedy:.3}"
    );
}

/// Hot/cold overwrites (nine writes in ten to the first tenth of the blocks) of 4 KiB into
/// files holding 85 % of the pool, on a stepped clock so segment ages, and so victim choice
/// and the cleaner's heads, are the same on any machine. Returns, over `capacities` pool
/// capacities of writes after one of warm-up, the cleaning passes, the segments the
/// roll-forward chain kept from them (summed over passes), and the victims' live blocks,
/// greedy's within the rules and greedy's over every written segment.
fn hot_cold(capacities: u64) -> (u64, u64, u64, u64, u64) {
    let cfg = Config {
        clock: Clock::stepped(1 << 40, Duration::from_micros(10)),
        ..config()
    };
    let dev: Arc<dyn Device> = Arc::new(MemoryPool::anonymous(POOL_BYTES).unwrap());
    let fs = Fs::format(dev, &cfg).unwrap();
    let size = fs.space().unwrap().size;
    let files = 16u64;
    let per_file = size * 85 / 100 / files / BLOCK;
    let buf = vec![0x3cu8; (per_file * BLOCK) as usize];
    let handles: Vec<_> = (0..files)
        .map(|i| {
            let f = fs
                .open_file(&format!("/h{i:02}"), OpenFlags::create())
                .unwrap();
            f.pwrite(&buf, 0).unwrap();
            f
        })
        .collect();
    fs.sync().unwrap();
    let blocks = per_file * files;
    let hot = blocks / 10;
    let mut rng = Rng(0x40c0);
    let mut before = None;
    let block = vec![0xa5u8; BLOCK as usize];
    for i in 0..(capacities + 1) * (size / BLOCK) {
        if i == size / BLOCK {
            before = Some(fs.counters());
        }
        let b = if rng.below(10) == 0 {
            hot + rng.below(blocks - hot)
        } else {
            rng.below(hot)
        };
        handles[(b / per_file) as usize]
            .pwrite(&block, (b % per_file) * BLOCK)
            .unwrap();
    }
    fs.sync().unwrap();
    let (b, a) = (before.unwrap(), fs.counters());
    (
        a.cleaning_passes - b.cleaning_passes,
        a.pass_chain_segments - b.pass_chain_segments,
        a.victim_live_blocks - b.victim_live_blocks,
        a.reach_live_blocks - b.reach_live_blocks,
        a.greedy_live_blocks - b.greedy_live_blocks,
    )
}

#[test]
fn the_chain_keeps_within_a_quarter_of_the_pool_while_the_cleaner_seals_the_buffer() {
    let (passes, chain, victims, reach, greedy) = hot_cold(3);
    assert!(passes > 100, "the cleaner ran: {passes} passes");
    let segments = POOL_BYTES / (256 << 10);
    let per_pass = chain as f64 / passes as f64;
    println!(
        "{passes} passes, {per_pass:.1} of {segments} segments in the chain at a pass; live blocks of the victims {victims}, of greedy's within the rules {reach}, of greedy's {greedy}"
    );
    assert!(
        greedy <= reach && reach <= victims,
        "greedy's {greedy} <= greedy's within the rules {reach} <= the victims' {victims}"
    );
    // The chain grows from nothing to at most a quarter of the pool between superblocks, so
    // a pass finds about an eighth of it there on average; half that again is allowed for
    // the passes of a cleaning call after its refresh. The cleaner seals the buffer before
    // its passes, so the writers' refresh after a full buffer seldom runs: without the
    // cleaner's own, a pass found 58.8 of the 256 segments in the chain (a run of this test).
    assert!(
        per_pass <= (segments * 3 / 16) as f64,
        "{per_pass:.1} segments in the chain at a pass, in a pool of {segments}"
    );
}
