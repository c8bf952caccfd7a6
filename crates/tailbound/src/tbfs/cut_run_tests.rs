//! A light cleaning pass cut short by a device read error, then later runs that empty the
//! segments it copied from, then writes that would reuse them, then a power cut: driven
//! through the public API, with the pool's maps looked at only to choose which blocks the later
//! runs supersede and to see where the writer goes.

use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::{SimDevice, SimFaults};
use crate::tbfs::state::State;
use crate::tbfs::{Barrier, Clock, Config, Error, Fs, OpenFlags, OpenOptions, Ordering};

const BLOCK: usize = 4096;
const FILES: u64 = 6;
const FILE_BLOCKS: u64 = 120;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryLog,
        segment_bytes: 64 << 10,
        superblock_every_bytes: 64 << 20,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 32 << 10,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

/// Block `index` of file `file` at `version`, its header naming all three.
fn content(file: u64, index: u64, version: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..BLOCK as u64)
        .map(|i| {
            (i.wrapping_mul(131) ^ file.wrapping_mul(7) ^ index.wrapping_mul(13) ^ version) as u8
        })
        .collect();
    b[..8].copy_from_slice(&file.to_le_bytes());
    b[8..16].copy_from_slice(&index.to_le_bytes());
    b[16..24].copy_from_slice(&version.to_le_bytes());
    b
}

fn path(file: u64) -> String {
    format!("/f{file}")
}

/// Where every block of every file is now.
fn addresses(fs: &Fs) -> Vec<Vec<u64>> {
    let m = fs.inner.lock_meta();
    (0..FILES)
        .map(|f| {
            let ino = fs.inner.lookup(&m.dirs, &m.inodes, &path(f)).unwrap();
            let st = m.inodes[&ino].lock();
            (0..FILE_BLOCKS).map(|i| st.map().get(i)).collect()
        })
        .collect()
}

/// One run; `None` if the cut pass copied nothing before the error (nothing to test then),
/// else whether its segments were checked before a checkpoint.
fn run(seed: u64) -> Option<bool> {
    let dev = Arc::new(SimDevice::new(4 << 20));
    // Victims read a block at a time, as in a memory pool: the error falls between blocks.
    dev.set_writes_are_copies(true);
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    let sb = fs.inner.segment_blocks();
    let mut files = Vec::new();
    for f in 0..FILES {
        let file = fs.open_file(&path(f), OpenFlags::create()).unwrap();
        for i in 0..FILE_BLOCKS {
            file.pwrite(&content(f, i, 0), i * BLOCK as u64).unwrap();
        }
        files.push(file);
    }
    fs.sync().unwrap();
    // Every third block overwritten: the fill's segments are partly dead, and after the sync's
    // superblock their live blocks go in light passes.
    let mut version = vec![vec![0u64; FILE_BLOCKS as usize]; FILES as usize];
    for f in 0..FILES {
        for i in (((f + seed) % 3)..FILE_BLOCKS).step_by(3) {
            version[f as usize][i as usize] = 1;
            files[f as usize]
                .pwrite(&content(f, i, 1), i * BLOCK as u64)
                .unwrap();
        }
    }
    fs.sync().unwrap();
    let before = addresses(&fs);

    let reads = dev.stats().reads;
    dev.set_faults(SimFaults {
        fail_reads_after: Some(reads + 3 + seed % 6),
        ..SimFaults::default()
    });
    let cut = fs.gc(1.0);
    dev.set_faults(SimFaults::default());
    assert!(matches!(cut, Err(Error::Io { .. })), "seed {seed}: {cut:?}");
    let after = addresses(&fs);
    // What the cut run copied, and the segments it copied from.
    let mut copied = Vec::new();
    let mut cut_from = std::collections::BTreeSet::new();
    for f in 0..FILES as usize {
        for i in 0..FILE_BLOCKS as usize {
            if before[f][i] != after[f][i] {
                copied.push((f, i));
                cut_from.insert(State::seg_of(before[f][i], sb));
            }
        }
    }
    if copied.is_empty() {
        return None;
    }
    let newest = fs.inner.lock_meta().ckpt.newest();
    // Later runs supersede every other block still in those segments: each file's, one run.
    for f in 0..FILES as usize {
        let mut any = false;
        for i in 0..FILE_BLOCKS as usize {
            if !copied.contains(&(f, i)) && cut_from.contains(&State::seg_of(after[f][i], sb)) {
                version[f][i] += 1;
                files[f]
                    .pwrite(
                        &content(f as u64, i as u64, version[f][i]),
                        (i * BLOCK) as u64,
                    )
                    .unwrap();
                any = true;
            }
        }
        if any {
            files[f].fdatasync().unwrap();
        }
    }
    let checked = {
        let m = fs.inner.lock_meta();
        // A checkpoint in between (a writer's space check may clean and write one, depending
        // on the segments' wall-clock ages) writes the maps, after which reuse is allowed:
        // then there is nothing to check here.
        if m.ckpt.newest() == newest {
            for &s in &cut_from {
                assert!(
                    m.seg.live(s) > 0 || !fs.inner.segment_free(&m, s),
                    "seed {seed}: segment {s}, which the cut run copied from, is reusable \
                     before a checkpoint"
                );
            }
        }
        m.ckpt.newest() == newest
    };
    // Writes that move on through the free segments, runs of blocks the cut run did not copy,
    // until the writer enters one of its segments or a checkpoint is written.
    let others: Vec<(usize, usize)> = (0..FILES as usize)
        .flat_map(|f| (0..FILE_BLOCKS as usize).map(move |i| (f, i)))
        .filter(|b| !copied.contains(b))
        .collect();
    'writes: for round in 0..8 {
        for (k, &(f, i)) in others.iter().enumerate() {
            if (k + round) % 2 == 0 {
                continue;
            }
            version[f][i] += 1;
            files[f]
                .pwrite(
                    &content(f as u64, i as u64, version[f][i]),
                    (i * BLOCK) as u64,
                )
                .unwrap();
            if k % 16 == 0 {
                files[f].fdatasync().unwrap();
                let m = fs.inner.lock_meta();
                if m.ckpt.newest() != newest || cut_from.contains(&(m.writer.cur_seg() as usize)) {
                    break 'writes;
                }
            }
        }
    }
    drop(files);
    // Power cut. Every block the cut run copied was synced at `version` and not written since.
    let image = dev.crash_image(seed);
    std::mem::forget(fs);
    let fs = Fs::open(
        Arc::new(SimDevice::from_image(image)),
        &OpenOptions::default(),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: recovery: {e}"));
    let mut buf = vec![0u8; BLOCK];
    for &(f, i) in &copied {
        let file = fs
            .open_file(&path(f as u64), OpenFlags::read_only())
            .unwrap();
        file.pread(&mut buf, (i * BLOCK) as u64).unwrap();
        assert!(
            buf == content(f as u64, i as u64, version[f][i]),
            "seed {seed}: file {f} block {i}, which the cut run copied, reads back as version {} \
             of file {} block {} (want version {})",
            u64::from_le_bytes(buf[16..24].try_into().unwrap()),
            u64::from_le_bytes(buf[..8].try_into().unwrap()),
            u64::from_le_bytes(buf[8..16].try_into().unwrap()),
            version[f][i]
        );
    }
    Some(checked)
}

#[test]
fn a_run_cut_by_a_read_error_keeps_what_it_copied_when_later_runs_empty_its_segments() {
    let runs: Vec<bool> = (0..12).filter_map(run).collect();
    assert!(
        runs.iter().any(|&checked| checked),
        "no cut pass copied anything before its error and was checked before a checkpoint: \
         {runs:?}"
    );
}
