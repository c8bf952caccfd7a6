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
