//! A full pool refuses cheaply: once cleaning has found no room for a call, the calls after it
//! that need as much are refused without cleaning again, copying nothing and writing no
//! checkpoint, until something is freed; then a call that fits is admitted.

use std::sync::Arc;

mod common;
use common::{data, read, Rng};

use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{fsck, Config, Error, Fs, FsCounters, OpenFlags};

fn write_file(fs: &Fs, path: &str, bytes: &[u8], sync: bool) -> Result<(), Error> {
    let f = fs.open_file(path, OpenFlags::create())?;
    f.pwrite(bytes, 0)?;
    if sync {
        f.fsync()?;
    }
    Ok(())
}

/// What the pool wrote: blocks copied by the cleaner, checkpoints, superblocks, bytes.
fn written(c: &FsCounters) -> [u64; 4] {
    [
        c.blocks_copied,
        c.checkpoints,
        c.superblock_writes,
        c.bytes_written,
    ]
}

/// A fresh 24 MiB memory pool with no background cleaner: only the calls a test makes clean,
/// so what is written is theirs.
fn small_pool() -> Fs {
    let pool_bytes = 24 << 20;
    let dev = Arc::new(MemoryPool::anonymous(pool_bytes).unwrap());
    let config = Config {
        segment_bytes: fsck::default_segment_bytes(pool_bytes),
        background_gc: false,
        ..Config::memory_pool()
    };
    Fs::format(dev, &config).unwrap()
}

#[test]
fn refusals_in_a_full_pool_write_nothing_until_something_is_freed() {
    let fs = small_pool();
    // As an archive unpacks: directories of small files, until the pool refuses one.
    let mut rng = Rng(38);
    let mut files: Vec<(String, u64, usize)> = Vec::new();
    let mut d = 0;
    let refused = 'fill: loop {
        d += 1;
        let dir = format!("/d{d}");
        if let Err(e) = fs.mkdir(&dir, 0o755) {
            break 'fill e;
        }
        for i in 0..40 {
            let path = format!("{dir}/f{i}");
            let (seed, len) = (rng.next(), 1024 + rng.below(64 << 10) as usize);
            match write_file(&fs, &path, &data(seed, len), i % 10 == 9) {
                Ok(()) => files.push((path, seed, len)),
                Err(e) => {
                    // What the refused call left (an empty file, or data it could not sync) goes.
                    let _ = fs.unlink(&path);
                    break 'fill e;
                }
            }
        }
    };
    assert!(matches!(refused, Error::NoSpace(_)), "{refused}");
    // What the unlink above freed is taken, until a call is refused again (that one may
    // clean).
    let settled = (0..1000).find_map(|k| fs.mkdir(&format!("/settle{k}"), 0o755).err());
    assert!(matches!(settled, Some(Error::NoSpace(_))), "{settled:?}");
    let before = written(&fs.counters());
    for i in 1..=20 {
        let r = fs.mkdir(&format!("/late{i}"), 0o755);
        assert!(matches!(r, Err(Error::NoSpace(_))), "mkdir {i}: {r:?}");
        let path = format!("/late{i}.f");
        let r = write_file(&fs, &path, &data(i, 16 << 10), true);
        assert!(matches!(r, Err(Error::NoSpace(_))), "{path}: {r:?}");
    }
    let after = written(&fs.counters());
    assert_eq!(
        after, before,
        "20 refused mkdirs and file writes in a full pool with nothing freed between them wrote \
         (blocks copied, checkpoints, superblocks, bytes) {before:?} -> {after:?}"
    );
    // Something freed: a call that fits is admitted, and what was acknowledged reads back.
    for (path, _, _) in files.drain(..files.len() / 4) {
        fs.unlink(&path).unwrap();
    }
    fs.mkdir("/later", 0o755).unwrap();
    write_file(&fs, "/later/f", &data(99, 16 << 10), true).unwrap();
    assert_eq!(read(&fs, "/later/f"), data(99, 16 << 10));
    for (path, seed, len) in &files {
        assert_eq!(read(&fs, path), data(*seed, *len), "{path}");
    }
    fs.close().unwrap();
}

#[test]
fn the_background_cleaner_stops_in_a_full_pool_whose_passes_gain_nothing() {
    let fs = small_pool();
    let mut rng = Rng(43);
    let mut n = 0;
    loop {
        n += 1;
        let (seed, len) = (rng.next(), 1024 + rng.below(64 << 10) as usize);
        if write_file(&fs, &format!("/f{n}"), &data(seed, len), n % 10 == 0).is_err() {
            let _ = fs.unlink(&format!("/f{n}"));
            break;
        }
    }
    // Nothing is freed from here on. Passes may gain at first; once one gains nothing, the
    // cleaner rests: later steps run no pass and copy nothing.
    let step = || {
        let before = fs.counters();
        fs.clean_step().unwrap();
        let after = fs.counters();
        (
            after.cleaning_passes - before.cleaning_passes,
            after.blocks_copied - before.blocks_copied,
        )
    };
    let steps: Vec<(u64, u64)> = (0..12).map(|_| step()).collect();
    assert!(
        steps[steps.len() - 4..] == [(0, 0); 4],
        "steps in a full pool with nothing freed still ran passes (passes, blocks copied): \
         {steps:?}"
    );
    // Deletes make dead blocks: the cleaner works again.
    for i in (1..n).step_by(3) {
        let _ = fs.unlink(&format!("/f{i}"));
    }
    let after_deletes = step();
    assert!(after_deletes.0 >= 1, "{after_deletes:?}");
    fs.close().unwrap();
}
