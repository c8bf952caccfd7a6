//! Usable capacity: a 256 MiB memory pool (with the segment size `tailbound run` and `fs format`
//! give it) fills with files of mixed sizes to 89 % of its size without `NoSpace`, says
//! `NoSpace` only once live data reaches 90 %, reports in `space` and `statvfs` about what a user
//! can still fill, and stays usable when full: every file reads back, unlinks work, and writes
//! that fit after them succeed.

use std::sync::Arc;

mod common;
use common::{data, read, Rng};

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{fsck, Config, Error, Fs, OpenFlags};

const POOL: u64 = 256 << 20;

/// Sizes from 4 KiB to 8 MiB, spread evenly over the powers of two, so most files are small and
/// most bytes are in large files.
fn size(rng: &mut Rng) -> usize {
    let shift = 12 + rng.below(12);
    let base = 1u64 << shift;
    (base + rng.below(base)) as usize
}

/// Writes a file in 1 MiB pieces and syncs it; `NoSpace` from any step is returned.
fn write_file(fs: &Fs, path: &str, bytes: &[u8]) -> Result<(), Error> {
    let f = fs.open_file(path, OpenFlags::create())?;
    for (i, piece) in bytes.chunks(1 << 20).enumerate() {
        f.pwrite(piece, (i << 20) as u64)?;
    }
    f.fsync()
}

#[test]
fn a_256_mib_pool_fills_to_90_percent_before_no_space_and_stays_usable() {
    let dev = Arc::new(SimDevice::new(POOL));
    dev.set_writes_are_copies(true);
    let config = Config {
        segment_bytes: fsck::default_segment_bytes(POOL),
        // Deterministic: only writers clean.
        background_gc: false,
        ..Config::memory_pool()
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    let pool = fs.space().unwrap().size;
    let mut rng = Rng(38);
    let mut files: Vec<(String, u64, usize)> = Vec::new();
    let mut user: u64 = 0;
    // First churn at about 70 %: files created, overwritten in place and deleted, so
    // the dead space is spread over the segments as real use leaves it.
    let mut written = 0u64;
    while written < 2 * pool {
        let r = rng.below(100);
        if user > pool * 70 / 100 || (r < 20 && !files.is_empty()) {
            let i = rng.below(files.len() as u64) as usize;
            let (path, _, len) = files.swap_remove(i);
            fs.unlink(&path).unwrap();
            user -= len as u64;
        } else if r < 40 && !files.is_empty() {
            // Overwrite a piece of a file in place with the bytes it holds: new copies, the
            // old ones dead.
            let i = rng.below(files.len() as u64) as usize;
            let (path, seed, len) = files[i].clone();
            let at = rng.below(len as u64) as usize & !4095;
            let n = (len - at).min(256 << 10);
            let f = fs.open_file(&path, OpenFlags::create()).unwrap();
            f.pwrite(&data(seed, len)[at..at + n], at as u64).unwrap();
            written += n as u64;
        } else {
            let len = size(&mut rng);
            let path = format!("/c{written:012}");
            let seed = rng.next();
            write_file(&fs, &path, &data(seed, len)).unwrap();
            user += len as u64;
            written += len as u64;
            files.push((path, seed, len));
        }
    }
    let churned = fs.space().unwrap();
    eprintln!(
        "after churn: {} files of {user} bytes; live {} free {} reclaimable {}",
        files.len(),
        churned.live,
        churned.free,
        churned.reclaimable
    );
    // Up to 89 %: every file fits.
    while user < pool * 89 / 100 {
        let len = size(&mut rng).min((pool * 89 / 100 - user) as usize).max(1);
        let path = format!("/f{:05}", files.len());
        let seed = rng.next();
        write_file(&fs, &path, &data(seed, len)).unwrap_or_else(|e| {
            let s = fs.space().unwrap();
            panic!(
                "{path} ({len} bytes) at {user} bytes of files ({:.1} % of {pool}): {e}; live {} free {} reclaimable {}",
                user as f64 * 100.0 / pool as f64,
                s.live,
                s.free,
                s.reclaimable
            )
        });
        user += len as u64;
        files.push((path, seed, len));
    }
    // What statvfs and space report as still fillable is there to fill: at least what
    // is left below 90 %, and no more than what is not live.
    let v = fs.statvfs().unwrap();
    let avail = v.blocks_free * v.block_size;
    let s = fs.space().unwrap();
    assert!(
        avail >= (pool * 90 / 100).saturating_sub(s.live) && avail <= pool - s.live,
        "statvfs says {avail} bytes available with {} live of {pool}",
        s.live
    );
    // Beyond: 64 KiB files until the pool says NoSpace, which it may only say at 90 % live.
    let mut extra = 0u64;
    let err = loop {
        let path = format!("/g{extra:05}");
        let seed = rng.next();
        match write_file(&fs, &path, &data(seed, 64 << 10)) {
            Ok(()) => files.push((path, seed, 64 << 10)),
            Err(e) => break e,
        }
        extra += 1;
        assert!(extra < pool / (64 << 10), "the pool never filled");
    };
    assert!(matches!(err, Error::NoSpace(_)), "{err}");
    let s = fs.space().unwrap();
    eprintln!(
        "NoSpace after {extra} more files: live {} pinned {} free {} reclaimable {} available {} of {pool}: {err}",
        s.live, s.pinned_by_snapshots, s.free, s.reclaimable, s.available
    );
    assert!(
        (s.live + s.pinned_by_snapshots) * 10 >= pool * 9,
        "NoSpace with {} live and {} pinned of {pool}: {err}",
        s.live,
        s.pinned_by_snapshots
    );
    // And statvfs says so: what it offers is less than a percent of the pool.
    let v = fs.statvfs().unwrap();
    let avail = v.blocks_free * v.block_size;
    assert!(
        avail < pool / 100,
        "statvfs offers {avail} bytes of a {pool}-byte pool that said NoSpace"
    );
    assert_eq!(avail, s.available);
    // Still usable: everything reads back, unlinks work, and a file that fits is written.
    if let Ok(f) = fs.open_file(&format!("/g{extra:05}"), OpenFlags::read_only()) {
        // The file the pool refused may exist, with what it took before the refusal.
        assert!(f.stat().unwrap().size <= 64 << 10);
    }
    for (path, seed, len) in files.iter().step_by(7) {
        assert!(read(&fs, path) == data(*seed, *len), "{path} differs");
    }
    let mut freed = 0u64;
    while freed < 16 << 20 {
        let (path, _, len) = files.remove(0);
        fs.unlink(&path).unwrap();
        freed += len as u64;
    }
    write_file(&fs, "/after", &data(1, 8 << 20)).unwrap();
    assert!(read(&fs, "/after") == data(1, 8 << 20));
    fs.close().unwrap();
    let fs = Fs::open(dev, &Default::default()).unwrap();
    assert!(read(&fs, "/after") == data(1, 8 << 20));
    for (path, seed, len) in files.iter().step_by(11) {
        assert!(
            read(&fs, path) == data(*seed, *len),
            "{path} differs after reopening"
        );
    }
}
