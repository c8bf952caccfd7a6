//! Files created and deleted while the background cleaner runs must read back their own bytes.

use std::sync::Arc;

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{fsck, Config, Fs, OpenFlags};

fn bytes(stamp: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (stamp.wrapping_mul(0x9e37_79b9) as usize).wrapping_add(i * 7) as u8 ^ (i >> 12) as u8
        })
        .collect()
}

fn run(copies: bool) {
    let pool = 64u64 << 20;
    let cfg = Config {
        segment_bytes: fsck::default_segment_bytes(pool),
        background_gc: true,
        ..Config::memory_pool()
    };
    let dev = Arc::new(SimDevice::new(pool));
    dev.set_writes_are_copies(copies);
    let fs = Fs::format(dev, &cfg).unwrap();
    let mut files: Vec<(String, usize, u64)> = Vec::new();
    let mut rng = 0x1234_5678u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for stamp in 1..3000u64 {
        let space = fs.space().unwrap();
        if (space.live as f64) < 0.75 * space.size as f64 {
            let size = if next() % 10 == 0 {
                (1 << 20) + (next() % (1 << 20)) as usize
            } else {
                (4 << 10) + (next() % (60 << 10)) as usize
            } | 1;
            let path = format!("/f{stamp}");
            let f = fs.open_file(&path, OpenFlags::create()).unwrap();
            f.pwrite(&bytes(stamp, size), 0).unwrap();
            files.push((path, size, stamp));
        } else if !files.is_empty() {
            let i = (next() % files.len() as u64) as usize;
            let (path, _, _) = files.swap_remove(i);
            fs.unlink(&path).unwrap();
        }
        if stamp % 200 == 0 {
            for (path, size, stamp) in &files {
                let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
                let mut buf = vec![0u8; *size];
                assert_eq!(f.pread(&mut buf, 0).unwrap(), *size);
                let want = bytes(*stamp, *size);
                let wrong = buf
                    .chunks(4096)
                    .zip(want.chunks(4096))
                    .filter(|(a, b)| a != b)
                    .count();
                assert_eq!(
                    wrong, 0,
                    "copies {copies}: {path} ({size} bytes): {wrong} blocks hold other bytes"
                );
            }
        }
    }
}

#[test]
fn files_read_their_own_bytes_while_the_background_cleaner_runs() {
    run(false);
}

#[test]
fn files_read_their_own_bytes_while_the_background_cleaner_runs_on_a_memory_like_device() {
    run(true);
}
