//! Bytes from outside the process never panic their readers: valid pool images and recordings,
//! mutated with a fixed seed and their CRCs sealed again (most of the time) so the checks behind
//! the CRCs are reached, are read the ways `tailbound fs fsck`, pool open and `record verify`
//! read them. Every panic anywhere in the process (the library's own threads included, whose
//! panics it catches) counts.
//!
//! `TAILBOUND_MUTATION_CASES` (cases per image, default a few dozen) and
//! `TAILBOUND_MUTATION_SEED` run more of them, in release, to search for new inputs.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use tailbound::dev::sim::SimDevice;
use tailbound::dev::Device;
use tailbound::record::frame::{
    encode_frame, FileHeader, FILE_HEADER_BYTES, FRAME_FLAG_TRAILER, FRAME_HEADER_BYTES,
};
use tailbound::record::verify;
use tailbound::tbfs::format::{
    crc_append, crc_blocks, encode_node_into, CheckpointRoot, Summary, BLOCK, FANOUT, INODE_BYTES,
};
use tailbound::tbfs::{
    fsck, Barrier, Clock, Config, FileKind, Fs, OpenFlags, OpenOptions, Ordering, RecoveryMode,
};

/// Panics seen anywhere in the process since the hook went in.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();
/// One test at a time: the panic count is the process's.
static SERIAL: Mutex<()> = Mutex::new(());

fn count_panics() {
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, AtomicOrdering::SeqCst);
            before(info);
        }));
    });
}

fn cases() -> u64 {
    std::env::var("TAILBOUND_MUTATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

fn seed() -> u64 {
    std::env::var("TAILBOUND_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x7a11_b0d5)
}

/// xorshift64*: the cases are the same on every run of a seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, case: u64) -> Rng {
        let mut r = Rng((seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Values that sit on the edges parsers check: zero, one, powers of two and their neighbours,
/// the largest of each width.
fn interesting(r: &mut Rng, blocks: u64) -> u64 {
    let v = [
        0,
        1,
        2,
        3,
        7,
        8,
        15,
        16,
        31,
        32,
        64,
        125,
        126,
        127,
        128,
        255,
        256,
        511,
        512,
        4095,
        4096,
        4097,
        65535,
        65536,
        blocks - 1,
        blocks,
        blocks + 1,
        blocks * 2,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        1 << 32,
        1 << 40,
        i64::MAX as u64,
        1 << 63,
        u64::MAX - 1,
        u64::MAX,
    ];
    v[r.below(v.len() as u64) as usize]
}

/// Changes 1-6 places of `b`: flips, edge values over fields of 1, 2, 4 or 8 bytes (aligned,
/// as the formats' fields are), a field copied over another.
fn mutate(r: &mut Rng, b: &mut [u8], hot: usize, blocks: u64) {
    for _ in 0..1 + r.below(6) {
        // Most edits land in a structure's header and first entries.
        let span = if r.chance(60) {
            hot.min(b.len())
        } else {
            b.len()
        };
        let at = r.below(span as u64) as usize;
        match r.below(5) {
            0 => b[at] ^= 1 << r.below(8),
            1 => b[at] = r.next() as u8,
            2 | 3 => {
                let width = [1usize, 2, 4, 8][r.below(4) as usize];
                let at = at / width * width;
                if at + width <= b.len() {
                    let v = interesting(r, blocks).to_le_bytes();
                    b[at..at + width].copy_from_slice(&v[..width]);
                }
            }
            _ => {
                let from = (r.below(span as u64) as usize) / 8 * 8;
                let to = at / 8 * 8;
                if from + 8 <= b.len() && to + 8 <= b.len() {
                    let v: [u8; 8] = b[from..from + 8].try_into().unwrap();
                    b[to..to + 8].copy_from_slice(&v);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pool images

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The superblock's first sector carries its own CRC in its last 4 bytes.
const SECTOR_CRC: usize = 508;
/// Where a superblock keeps the CRC of the log summary its roll-forward continues from.
const SUPER_PREV_CRC: usize = 152;

/// How a block of the valid image is sealed, so a mutated copy can be sealed again.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Seal {
    Superblock,
    /// A log summary: its CRC at 68 (taken with the field zero), and the payload's at 64
    /// when `payload` (the payload CRC matched).
    Summary {
        payload: bool,
    },
    /// A table page or map node: CRC of bytes 4.. at 0.
    Head,
    /// A checkpoint root or directory block: CRC of all but the last 4 bytes, there.
    Tail,
    /// Inode records, each with its CRC in its last 4 bytes.
    Inodes,
    Data,
}

fn crc(b: &[u8]) -> u32 {
    crc_blocks(b)
}

fn summary_crc(b: &[u8]) -> u32 {
    let mut copy = b.to_vec();
    put_u32(&mut copy, 68, 0);
    crc(&copy)
}

struct Image {
    bytes: Vec<u8>,
    seals: Vec<Seal>,
    /// Summaries in chain order: (block, payload blocks, the summary whose CRC its
    /// `prev_crc` holds).
    logs: Vec<(usize, usize, Option<usize>)>,
    /// The summary each superblock's roll-forward CRC names.
    super_prev: [Option<usize>; 2],
    /// Blocks worth mutating: everything but file data.
    structured: Vec<usize>,
}

impl Image {
    fn classify(bytes: Vec<u8>) -> Image {
        let n = bytes.len() / BLOCK;
        let mut seals = vec![Seal::Data; n];
        let mut logs = Vec::new();
        for (i, b) in bytes.chunks_exact(BLOCK).enumerate() {
            seals[i] = if i < 2 {
                Seal::Superblock
            } else if let Ok((s, _)) = Summary::decode(b) {
                let p = s.payload_blocks as usize;
                let payload = i + 1 + p <= n
                    && crc(&bytes[(i + 1) * BLOCK..(i + 1 + p) * BLOCK]) == u32_at(b, 64);
                logs.push((i, p, s.sequence));
                Seal::Summary { payload }
            } else if u32_at(b, 0) == crc(&b[4..]) {
                Seal::Head
            } else if u32_at(b, BLOCK - 4) == crc(&b[..BLOCK - 4]) {
                Seal::Tail
            } else if b
                .chunks_exact(INODE_BYTES)
                .any(|r| r.iter().any(|&x| x != 0))
                && b.chunks_exact(INODE_BYTES).all(|r| {
                    r.iter().all(|&x| x == 0)
                        || u32_at(r, INODE_BYTES - 4) == crc(&r[..INODE_BYTES - 4])
                })
            {
                Seal::Inodes
            } else {
                Seal::Data
            };
        }
        logs.sort_by_key(|&(_, _, seq)| seq);
        let crcs: Vec<u32> = logs
            .iter()
            .map(|&(i, _, _)| u32_at(&bytes[i * BLOCK..], 68))
            .collect();
        let named = |c: u32| crcs.iter().position(|&x| x == c);
        let logs: Vec<(usize, usize, Option<usize>)> = logs
            .iter()
            .map(|&(i, p, _)| (i, p, named(u32_at(&bytes[i * BLOCK..], 60))))
            .collect();
        let super_prev = [0, 1].map(|s| named(u32_at(&bytes[s * BLOCK..], SUPER_PREV_CRC)));
        let structured = (0..n).filter(|&i| seals[i] != Seal::Data).collect();
        Image {
            bytes,
            seals,
            logs,
            super_prev,
            structured,
        }
    }

    /// A mutated copy: 1-3 blocks changed, and (mostly) sealed again: their own CRCs, the
    /// payload CRCs of the logs holding them and the chain of summary CRCs after them.
    fn mutated(&self, r: &mut Rng) -> Vec<u8> {
        let mut img = self.bytes.clone();
        let n = img.len() / BLOCK;
        let mut touched = Vec::new();
        for _ in 0..1 + r.below(3) {
            let block = if r.chance(85) {
                self.structured[r.below(self.structured.len() as u64) as usize]
            } else {
                r.below(n as u64) as usize
            };
            let hot = match self.seals[block] {
                Seal::Superblock => 256,
                Seal::Summary { .. } => 88 + 32 * 4,
                Seal::Head | Seal::Tail => 256,
                Seal::Inodes => BLOCK,
                Seal::Data => BLOCK,
            };
            mutate(
                r,
                &mut img[block * BLOCK..(block + 1) * BLOCK],
                hot,
                n as u64,
            );
            touched.push(block);
        }
        if r.chance(85) {
            self.seal(&mut img, &touched);
        }
        img
    }

    fn seal(&self, img: &mut [u8], touched: &[usize]) {
        for &i in touched {
            let b = &mut img[i * BLOCK..(i + 1) * BLOCK];
            match self.seals[i] {
                Seal::Head => {
                    let c = crc(&b[4..]);
                    put_u32(b, 0, c);
                }
                Seal::Tail => {
                    let c = crc(&b[..BLOCK - 4]);
                    put_u32(b, BLOCK - 4, c);
                }
                Seal::Inodes => {
                    for rec in b.chunks_exact_mut(INODE_BYTES) {
                        if rec.iter().any(|&x| x != 0) {
                            let c = crc(&rec[..INODE_BYTES - 4]);
                            put_u32(rec, INODE_BYTES - 4, c);
                        }
                    }
                }
                Seal::Superblock | Seal::Summary { .. } | Seal::Data => {}
            }
        }
        // The chain, in order: payload CRCs, each summary's link to the one before, its CRC.
        let n = img.len() / BLOCK;
        let mut sealed: Vec<u32> = Vec::with_capacity(self.logs.len());
        for &(i, p, prev) in &self.logs {
            if let Seal::Summary { payload: true } = self.seals[i] {
                if i + 1 + p <= n {
                    let c = crc(&img[(i + 1) * BLOCK..(i + 1 + p) * BLOCK]);
                    put_u32(&mut img[i * BLOCK..], 64, c);
                }
            }
            if let Some(j) = prev.filter(|&j| j < sealed.len()) {
                put_u32(&mut img[i * BLOCK..], 60, sealed[j]);
            }
            let c = summary_crc(&img[i * BLOCK..(i + 1) * BLOCK]);
            put_u32(&mut img[i * BLOCK..], 68, c);
            sealed.push(c);
        }
        for s in 0..2 {
            let b = &mut img[s * BLOCK..(s + 1) * BLOCK];
            if let Some(j) = self.super_prev[s] {
                put_u32(b, SUPER_PREV_CRC, sealed[j]);
            }
            let c = crc(&b[..SECTOR_CRC]);
            put_u32(b, SECTOR_CRC, c);
            let c = crc(&b[..BLOCK - 4]);
            put_u32(b, BLOCK - 4, c);
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed, 0);
    (0..len).map(|_| r.next() as u8).collect()
}

fn small_config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryCheckpoint,
        segment_bytes: 32 << 10,
        superblock_every_bytes: 256 << 10,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

/// A pool with something of everything on it: directories of one and several blocks, a file
/// with a two-level map, links, a snapshot, deletes, and logs rolled forward past the last
/// checkpoint. `crash`: the image as a crash would leave it (not closed).
fn sample_pool(crash: bool) -> Vec<u8> {
    let dev = Arc::new(SimDevice::new(8 << 20));
    let fs = Fs::format(dev.clone(), &small_config()).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.mkdir("/d/many", 0o700).unwrap();
    for i in 0..90 {
        let name = format!("/d/many/entry-with-a-longer-name-{i:03}");
        fs.open_file(&name, OpenFlags::create())
            .unwrap()
            .pwrite(&[i as u8; 3], 0)
            .unwrap();
    }
    let big = fs.open_file("/big", OpenFlags::create()).unwrap();
    big.pwrite(&pattern(1, 600 * 4096), 0).unwrap();
    big.fsync().unwrap();
    fs.symlink("/d/many", "/link").unwrap();
    fs.link("/big", "/d/hard").unwrap();
    fs.sync().unwrap();
    fs.snapshot(Some("kept")).unwrap();
    for i in 0..30 {
        fs.unlink(&format!("/d/many/entry-with-a-longer-name-{i:03}"))
            .unwrap();
    }
    big.pwrite(&pattern(2, 9000), 5000).unwrap();
    fs.sync().unwrap();
    let f = fs.open_file("/d/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(3, 20000), 0).unwrap();
    f.fsync().unwrap();
    big.pwrite(&pattern(4, 4096), 100 * 4096).unwrap();
    big.fsync().unwrap();
    drop((f, big));
    if crash {
        return dev.image();
    }
    fs.close().unwrap();
    dev.image()
}

fn device(image: Vec<u8>) -> Arc<dyn Device> {
    Arc::new(SimDevice::from_image(image))
}

/// Walks and reads everything a view of the pool shows, then writes to it.
fn exercise(fs: &Fs) {
    let mut stack = vec!["/".to_string()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs.readdir(&dir) else {
            continue;
        };
        for e in entries {
            seen += 1;
            if seen > 2000 {
                return;
            }
            let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
            let _ = fs.stat(&path);
            match e.kind {
                FileKind::Dir => stack.push(path),
                FileKind::File => {
                    if let Ok(f) = fs.open_file(&path, OpenFlags::create()) {
                        let mut buf = vec![0u8; 256 << 10];
                        let mut at = 0;
                        while let Ok(n) = f.pread(&mut buf, at) {
                            if n == 0 || at > 8 << 20 {
                                break;
                            }
                            at += n as u64;
                        }
                        let _ = f.pwrite(b"more", 4093);
                        let _ = f.set_len(at / 2);
                        let _ = f.fsync();
                    }
                }
                _ => {}
            }
        }
    }
    let _ = fs.rename("/d", "/moved");
    let _ = fs.unlink("/moved/hard");
    let _ = fs
        .open_file("/new", OpenFlags::create())
        .map(|f| f.pwrite(&[7; 9000], 0));
    let _ = fs.sync();
}

fn read_views(fs: &Fs) {
    let Ok(checkpoints) = fs.checkpoints() else {
        return;
    };
    for c in checkpoints.iter().take(4) {
        let Ok(view) = fs.at(c.number) else {
            continue;
        };
        let mut stack = vec!["/".to_string()];
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = view.readdir(&dir) else {
                continue;
            };
            for e in entries {
                seen += 1;
                if seen > 500 {
                    break;
                }
                let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
                match e.kind {
                    FileKind::Dir => stack.push(path),
                    _ => {
                        let mut buf = vec![0u8; 64 << 10];
                        let _ = view.pread(&path, &mut buf, 0);
                    }
                }
            }
        }
    }
}

/// Reads `image` every way a pool is read: fsck, repair, open (both recovery modes, read-only
/// and to write), and uses what opens.
fn read_pool(image: Vec<u8>) {
    let _ = fsck::check(&SimDevice::from_image(image.clone()));
    if let Ok(r) = fsck::repair(device(image.clone())) {
        let _ = r.after;
    }
    let strict = OpenOptions {
        recovery: RecoveryMode::Strict,
        read_only: true,
        background_gc: Some(false),
        ..OpenOptions::default()
    };
    if let Ok(fs) = Fs::open(device(image.clone()), &strict) {
        let _ = fs.close();
    }
    let writable = OpenOptions {
        background_gc: Some(false),
        ..OpenOptions::default()
    };
    if let Ok(fs) = Fs::open(device(image), &writable) {
        read_views(&fs);
        exercise(&fs);
        let _ = fs.gc(0.5);
        let _ = fs.close();
    }
}

/// Runs `cases` of `one`, each under catch_unwind; returns the cases that panicked.
/// `TAILBOUND_MUTATION_TRACE` names each case before it runs (a case may abort the process).
fn run_cases(what: &str, cases: u64, mut one: impl FnMut(u64)) -> Vec<u64> {
    count_panics();
    let trace = std::env::var_os("TAILBOUND_MUTATION_TRACE").is_some();
    let mut failed = Vec::new();
    for case in 0..cases {
        if trace {
            eprintln!("{what}: case {case}");
        }
        let before = PANICS.load(AtomicOrdering::SeqCst);
        let r = catch_unwind(AssertUnwindSafe(|| one(case)));
        if r.is_err() || PANICS.load(AtomicOrdering::SeqCst) != before {
            eprintln!("{what}: case {case} (seed {}) panicked", seed());
            failed.push(case);
        }
    }
    failed
}

fn mutated_pools_never_panic(crash: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let image = Image::classify(sample_pool(crash));
    // The sample has every kind of block the sealing knows; else it would seal nothing.
    for kind in [Seal::Head, Seal::Tail, Seal::Inodes] {
        assert!(image.seals.contains(&kind), "no {kind:?} block");
    }
    assert!(image.logs.len() > 10, "{} logs", image.logs.len());
    assert!(image.logs.iter().any(|&(_, _, prev)| prev.is_some()));
    let what = if crash { "crashed pool" } else { "closed pool" };
    let failed = run_cases(what, cases(), |case| {
        let mut r = Rng::new(seed() ^ crash as u64, case);
        read_pool(image.mutated(&mut r));
    });
    assert!(failed.is_empty(), "{what}: cases {failed:?} panicked");
}

#[test]
fn mutated_closed_pools_never_panic_their_readers() {
    mutated_pools_never_panic(false);
}

#[test]
fn mutated_crashed_pools_never_panic_their_readers() {
    mutated_pools_never_panic(true);
}

#[test]
fn sealing_a_pool_again_reaches_past_its_crcs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let image = Image::classify(sample_pool(false));
    // Sealing changes nothing in a valid image.
    let mut img = image.bytes.clone();
    image.seal(&mut img, &[]);
    assert!(img == image.bytes, "sealing changed a valid image");
    // A byte of file data in a log's payload is damage fsck finds by the payload CRC, until the
    // log is sealed again.
    let (log, _, _) = image
        .logs
        .iter()
        .copied()
        .rfind(|&(i, p, _)| {
            image.seals[i] == Seal::Summary { payload: true }
                && (i + 1..=i + p).any(|b| image.seals[b] == Seal::Data)
        })
        .expect("a log holding file data");
    let data = (log + 1..).find(|&b| image.seals[b] == Seal::Data).unwrap();
    img[data * BLOCK + 10] ^= 0x55;
    let verdict = |img: &[u8]| {
        fsck::check(&SimDevice::from_image(img.to_vec()))
            .unwrap()
            .verdict
    };
    assert_ne!(verdict(&img), fsck::Verdict::Clean);
    image.seal(&mut img, &[]);
    assert_eq!(verdict(&img), fsck::Verdict::Clean);
}

/// The newest checkpoint root of a valid image: its block and what it holds.
fn newest_root(image: &Image) -> (usize, CheckpointRoot) {
    image
        .bytes
        .chunks_exact(BLOCK)
        .enumerate()
        .filter(|&(i, _)| image.seals[i] == Seal::Tail)
        .filter_map(|(i, b)| CheckpointRoot::decode(b).ok().map(|r| (i, r)))
        .max_by_key(|(_, r)| r.number)
        .expect("a checkpoint root")
}

/// Found by the mutations above: a table's map made five levels high, its root node holes and
/// then an address outside the segment area. fsck expanded every hole to a full node at each
/// level below and asked for 545 GB (the process aborted).
#[test]
fn a_table_map_of_holes_is_damage_not_an_allocation_per_hole() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let image = Image::classify(sample_pool(false));
    let mut img = image.bytes.clone();
    let (at, mut root) = newest_root(&image);
    let node = root.tables[0].root as usize;
    assert_ne!(node, 0, "no usage table");
    let mut b = [0u8; BLOCK];
    let mut children = vec![0u64; FANOUT - 1];
    children.push(1);
    encode_node_into(&mut b, 5, &children);
    img[node * BLOCK..(node + 1) * BLOCK].copy_from_slice(&b);
    root.tables[0].height = 5;
    img[at * BLOCK..(at + 1) * BLOCK].copy_from_slice(&root.encode()[..]);
    image.seal(&mut img, &[]);
    let report = fsck::check(&SimDevice::from_image(img.clone())).unwrap();
    assert_ne!(report.verdict, fsck::Verdict::Clean);
    assert!(
        report
            .damage()
            .any(|f| f.message.contains("is larger than any file may be")),
        "{:#?}",
        report.findings
    );
    // The same map with nothing after its holes maps nothing.
    let mut b = [0u8; BLOCK];
    encode_node_into(&mut b, 5, &[]);
    img[node * BLOCK..(node + 1) * BLOCK].copy_from_slice(&b);
    image.seal(&mut img, &[]);
    let report = fsck::check(&SimDevice::from_image(img.clone())).unwrap();
    assert_ne!(report.verdict, fsck::Verdict::Clean);
    count_panics();
    let before = PANICS.load(AtomicOrdering::SeqCst);
    read_pool(img);
    assert_eq!(PANICS.load(AtomicOrdering::SeqCst), before);
}

// ---------------------------------------------------------------------------------------------
// Recordings

/// A recording: its header, frames of 0-300 bytes, and (`trailer`) the trailer. Returns the
/// bytes and where each frame starts.
fn sample_recording(trailer: bool) -> (Vec<u8>, Vec<usize>) {
    let epoch = 0x1234_5678;
    let mut b = FileHeader {
        flags: 0,
        epoch,
        created_unix_ns: 1,
    }
    .encode()
    .to_vec();
    let mut starts = Vec::new();
    let mut payload_bytes = 0u64;
    for i in 0..40u64 {
        starts.push(b.len());
        let p = pattern(i, (i as usize * 37) % 301);
        payload_bytes += p.len() as u64;
        encode_frame(&mut b, i, epoch, 0, &p);
    }
    if trailer {
        starts.push(b.len());
        let mut t = 40u64.to_le_bytes().to_vec();
        t.extend_from_slice(&payload_bytes.to_le_bytes());
        encode_frame(&mut b, 40, epoch, FRAME_FLAG_TRAILER, &t);
    }
    (b, starts)
}

/// Seals the file header and every frame at `starts` again, with the length it now says when
/// that fits in the file.
fn seal_recording(b: &mut [u8], starts: &[usize]) {
    let c = crc32c_of(&b[..60]);
    put_u32(b, 60, c);
    for &s in starts {
        if s + FRAME_HEADER_BYTES > b.len() {
            continue;
        }
        let len = u32_at(b, s + 4) as usize;
        let end = s + FRAME_HEADER_BYTES + len;
        if end > b.len() {
            continue;
        }
        let c = crc_append(crc32c_of(&b[s..s + 28]), &b[s + FRAME_HEADER_BYTES..end]);
        put_u32(b, s + 28, c);
    }
}

fn crc32c_of(b: &[u8]) -> u32 {
    crc_append(0, b)
}

#[test]
fn mutated_recordings_never_panic_verify() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tbr");
    for trailer in [false, true] {
        let (valid, starts) = sample_recording(trailer);
        std::fs::write(&path, &valid).unwrap();
        let v = verify(&path).unwrap();
        assert_eq!(v.valid_bytes, valid.len() as u64, "{v:?}");
        let failed = run_cases("recording", cases() * 10, |case| {
            let mut r = Rng::new(seed() ^ 0xf00d ^ trailer as u64, case);
            let mut b = valid.clone();
            for _ in 0..1 + r.below(3) {
                let s = starts[r.below(starts.len() as u64) as usize];
                let (at, hot) = if r.chance(20) {
                    (0, FILE_HEADER_BYTES)
                } else {
                    (s, FRAME_HEADER_BYTES)
                };
                let end = (at + 400).min(b.len());
                mutate(&mut r, &mut b[at..end], hot, 64);
            }
            if r.chance(80) {
                seal_recording(&mut b, &starts);
            }
            if r.chance(20) {
                b.truncate(r.below(b.len() as u64 + 1) as usize);
            }
            std::fs::write(&path, &b).unwrap();
            if let Ok(v) = verify(&path) {
                assert!(v.valid_bytes <= b.len() as u64, "{v:?}");
            }
        });
        assert!(failed.is_empty(), "recording: cases {failed:?} panicked");
    }
}
