//! Long-running churn through the public API: files are created, overwritten, resized and deleted in
//! a pool twice the size of the live data, until 50 pool capacities have been written (scaled down
//! in pool size, not in ratio, so it takes seconds). The cleaner must keep up: the pool never says
//! `NoSpace` while the live data fits, every byte reads back as the model says, free space comes back
//! after deletes, and a reopened pool (clean or after a crash) holds the same files.
//!
//! Longer runs: `TBFS_CHURN_CAPACITIES=<n>` (pool capacities written, default 50) and
//! `TBFS_CHURN_POOL_MIB=<n>` (pool size, default 8); `TBFS_CHURN_SEED` replays one run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::Rng;

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{Barrier, Clock, Config, Error, Fs, OpenFlags, OpenOptions, Ordering};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8 | 1
        })
        .collect()
}

fn read(fs: &Fs, path: &str) -> Vec<u8> {
    let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let size = f.stat().unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), size, "{path}");
    buf
}

fn check_all(fs: &Fs, model: &BTreeMap<String, Vec<u8>>, when: &str) {
    let names: Vec<String> = fs
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| format!("/{}", e.name))
        .collect();
    assert_eq!(
        names,
        model.keys().cloned().collect::<Vec<_>>(),
        "{when}: the file list"
    );
    for (path, data) in model {
        assert!(read(fs, path) == *data, "{when}: {path} differs");
    }
}

#[test]
fn churn_at_twice_the_live_data_never_runs_out_and_reads_back() {
    let pool_bytes = env_u64("TBFS_CHURN_POOL_MIB", 8) << 20;
    let capacities = env_u64("TBFS_CHURN_CAPACITIES", 50);
    let seed = env_u64("TBFS_CHURN_SEED", 6);
    let dev = Arc::new(SimDevice::new(pool_bytes));
    // As a memory pool for even seeds (the default): the cleaner reads victims block by block.
    dev.set_writes_are_copies(seed.is_multiple_of(2));
    let config = Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        // 31 segments: cleaning costs a checkpoint, which must be small beside a segment.
        segment_bytes: 256 << 10,
        superblock_every_bytes: 1 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        // Small beside the pool, as 32 MiB is beside a real one.
        dirty_bytes_max: 32 << 10,
        // The default protection period: plain checkpoints give way when the pool is full.
        protection_period: Duration::from_secs(3600),
        // Deterministic: only writers and `gc` clean.
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let size = fs.space().unwrap().size;
    let live_target = size / 2;
    let mut rng = Rng(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut live: u64 = 0;
    let mut written: u64 = 0;
    let mut next_name = 0u64;
    let mut ops = 0u64;
    let file_max = (size / 32).max(8192);
    let fail = |e: Error, what: &str, live: u64, written: u64| -> ! {
        panic!(
            "seed {seed}: {what} failed with {e} after {written} bytes written, live data {live} of {size} bytes"
        )
    };
    while written < capacities * size {
        ops += 1;
        let r = rng.below(100);
        if live > live_target || (r < 15 && !model.is_empty()) {
            // Delete a file.
            let i = rng.below(model.len() as u64) as usize;
            let path = model.keys().nth(i).unwrap().clone();
            fs.unlink(&path)
                .unwrap_or_else(|e| fail(e, "unlink", live, written));
            live -= model.remove(&path).unwrap().len() as u64;
        } else if r < 45 || model.is_empty() {
            // Create a file.
            let len = 1 + rng.below(file_max) as usize;
            if live + len as u64 > live_target {
                continue;
            }
            let path = format!("/f{next_name:06}");
            next_name += 1;
            let data = bytes(rng.next(), len);
            let f = fs
                .open_file(&path, OpenFlags::create())
                .unwrap_or_else(|e| fail(e, "create", live, written));
            f.pwrite(&data, 0)
                .unwrap_or_else(|e| fail(e, "write", live, written));
            live += len as u64;
            written += len as u64;
            model.insert(path, data);
        } else {
            // Overwrite part of a file, maybe past its end.
            let i = rng.below(model.len() as u64) as usize;
            let path = model.keys().nth(i).unwrap().clone();
            let data = model.get_mut(&path).unwrap();
            let at = rng.below(data.len() as u64 + 1) as usize;
            let len = 1 + rng.below(file_max / 2) as usize;
            let grow = (at + len).saturating_sub(data.len()) as u64;
            if live + grow > live_target {
                continue;
            }
            let buf = bytes(rng.next(), len);
            let f = fs
                .open_file(&path, OpenFlags::create())
                .unwrap_or_else(|e| fail(e, "open", live, written));
            f.pwrite(&buf, at as u64)
                .unwrap_or_else(|e| fail(e, "overwrite", live, written));
            if at + len > data.len() {
                data.resize(at + len, 0);
            }
            data[at..at + len].copy_from_slice(&buf);
            live += grow;
            written += len as u64;
        }
        if rng.below(8) == 0 {
            fs.sync().unwrap_or_else(|e| fail(e, "sync", live, written));
        }
        if ops.is_multiple_of(200) {
            check_all(&fs, &model, &format!("seed {seed}, op {ops}"));
        }
    }
    check_all(&fs, &model, "after the churn");
    fs.sync().unwrap();
    let counters = fs.counters();
    assert!(
        counters.segments_cleaned > 0,
        "the cleaner never ran: {counters:?}"
    );
    eprintln!(
        "churn: {ops} operations, {written} bytes written into a {size}-byte pool ({:.1} capacities), cleaner emptied {} segments copying {} blocks, write amplification {:.2}",
        written as f64 / size as f64,
        counters.segments_cleaned,
        counters.blocks_copied,
        counters.bytes_written as f64 / written as f64
    );

    // A crash image and a clean reopen hold the same files.
    let crashed = Fs::open(
        Arc::new(SimDevice::from_image(dev.image())),
        &OpenOptions::default(),
    )
    .unwrap();
    check_all(&crashed, &model, "after a crash");
    drop(crashed);

    // Free space comes back after deletes: at once as reclaimable (the deleted blocks are kept
    // for the protection period), and as free space once the period is over.
    for path in model.keys() {
        fs.unlink(path).unwrap();
    }
    fs.sync().unwrap();
    let space = fs.space().unwrap();
    assert!(
        (space.free + space.reclaimable) as f64 >= 0.85 * size as f64,
        "after deleting everything: {space:?}"
    );
    fs.set_protection_period(Duration::ZERO);
    fs.sync().unwrap();
    let report = fs.gc(0.9).unwrap();
    let space = fs.space().unwrap();
    assert!(
        space.free as f64 >= 0.85 * size as f64,
        "after deleting everything: {space:?}, {report:?}"
    );
    fs.close().unwrap();
    let fs = Fs::open(dev.clone(), &OpenOptions::default()).unwrap();
    assert!(fs.readdir("/").unwrap().is_empty());
}
