//! Helpers shared by the tbfs integration tests.

/// SplitMix64: a seeded, reproducible stream for workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `len` bytes of the stream seeded with `seed`: a file's contents, rebuilt to check it.
#[allow(dead_code)] // not every test file writes files it reads back
pub fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The whole of file `path`.
#[allow(dead_code)] // not every test file reads files back
pub fn read(fs: &tailbound::tbfs::Fs, path: &str) -> Vec<u8> {
    let f = fs
        .open_file(path, tailbound::tbfs::OpenFlags::read_only())
        .unwrap();
    let size = f.stat().unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), size, "{path}");
    buf
}

/// A file size as programs leave them: most files small, most bytes in large ones, 4 KiB to
/// 8 MiB, half of them whole blocks.
#[allow(dead_code)] // only the churn tests draw file sizes
pub fn program_file_size(rng: &mut Rng) -> u64 {
    let (lo, hi) = match rng.below(100) {
        0..=69 => (4u64 << 10, 64u64 << 10),
        70..=91 => (64 << 10, 1 << 20),
        _ => (1 << 20, 8 << 20),
    };
    let u = rng.below(1 << 30) as f64 / (1u64 << 30) as f64;
    let len = (lo as f64 * (hi as f64 / lo as f64).powf(u)) as u64;
    if rng.below(2) == 0 {
        len.div_ceil(4096) * 4096
    } else {
        len
    }
}

/// A fresh memory pool of `pool_bytes` formatted with `config`, in the segment size `fsck`
/// takes for a pool of that size.
#[allow(dead_code)] // not every test file makes its pools this way
pub fn memory_fs(pool_bytes: u64, config: tailbound::tbfs::Config) -> tailbound::tbfs::Fs {
    let dev =
        std::sync::Arc::new(tailbound::dev::memory::MemoryPool::anonymous(pool_bytes).unwrap());
    let config = tailbound::tbfs::Config {
        segment_bytes: tailbound::tbfs::fsck::default_segment_bytes(pool_bytes),
        ..config
    };
    tailbound::tbfs::Fs::format(dev, &config).unwrap()
}

/// A memory pool of `pool_bytes` without the background cleaner, formatted on a stepped clock
/// (returned too, for reopening it): the timed checkpoints fall where the calls do, not where
/// the machine's load puts them.
#[allow(dead_code)] // not every test file makes its pools this way
pub fn stepped_pool(
    pool_bytes: u64,
) -> (
    std::sync::Arc<tailbound::dev::memory::MemoryPool>,
    tailbound::tbfs::Clock,
    tailbound::tbfs::Fs,
) {
    let clock = tailbound::tbfs::Clock::stepped(1 << 40, std::time::Duration::from_micros(10));
    let dev =
        std::sync::Arc::new(tailbound::dev::memory::MemoryPool::anonymous(pool_bytes).unwrap());
    let config = tailbound::tbfs::Config {
        segment_bytes: tailbound::tbfs::fsck::default_segment_bytes(pool_bytes),
        background_gc: false,
        clock: clock.clone(),
        ..tailbound::tbfs::Config::memory_pool()
    };
    let fs = tailbound::tbfs::Fs::format(dev.clone(), &config).unwrap();
    (dev, clock, fs)
}

/// Runs `f(t)` for each `t` below `threads`, all at once on threads of their own, and returns
/// what each returned, in order of `t`.
#[allow(dead_code)] // not every test file runs threads
pub fn on_threads<T: Send>(threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || f(t))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
