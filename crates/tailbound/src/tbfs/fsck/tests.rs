//! fsck tests: clean pools (random workloads, both backends, after crashes and recovery) are never
//! reported damaged; every injected corruption is found with its specific finding and repaired.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::analyse::{analyse, Analysis};
use super::index::*;
use super::repair::*;
use super::*;
use crate::dev::sim::SimDevice;
use crate::dev::Device;
use crate::tbfs::format;
use crate::tbfs::format::Extents;
use crate::tbfs::format::*;
use crate::tbfs::Error;
use crate::tbfs::{Barrier, Clock, Config, FileKind, Fs, OpenFlags, OpenOptions, Ordering};

fn config(ordering: Ordering, barrier: Barrier) -> Config {
    Config {
        ordering,
        barrier,
        segment_bytes: 64 << 10,
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

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn read_all(fs: &Fs, path: &str) -> Vec<u8> {
    let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let size = f.stat().unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), size);
    buf
}

/// Every file in the tree with its contents.
fn tree(fs: &Fs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_string()];
    while let Some(dir) = stack.pop() {
        for e in fs.readdir(&dir).unwrap() {
            let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
            match e.kind {
                FileKind::Dir => stack.push(path),
                FileKind::File => {
                    out.insert(path.clone(), read_all(fs, &path));
                }
                FileKind::Symlink => {
                    out.insert(path.clone(), fs.readlink(&path).unwrap().into_bytes());
                }
                special => {
                    let st = fs.lstat(&path).unwrap();
                    out.insert(
                        path.clone(),
                        format!("{special:?} {}", st.rdev).into_bytes(),
                    );
                }
            }
        }
    }
    out
}

/// A random workload: directories, files of many sizes (some with two-level maps), overwrites,
/// truncation, renames, deletes, and fsyncs that write data-only logs.
fn workload(fs: &Fs, seed: u64, ops: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut dirs = vec!["/".to_string()];
    let mut files: Vec<String> = Vec::new();
    for op in 0..ops {
        let join = |d: &str, n: String| format!("{}/{}", d.trim_end_matches('/'), n);
        match rng.u8(0..10) {
            0 => {
                let d = join(&dirs[rng.usize(..dirs.len())], format!("d{seed}_{op}"));
                fs.mkdir(&d, 0o755).unwrap();
                dirs.push(d);
            }
            1..=3 => {
                let p = join(&dirs[rng.usize(..dirs.len())], format!("f{seed}_{op}"));
                let len = match rng.u8(0..10) {
                    0 => 0,
                    1 => (2 << 20) + rng.usize(..300_000),
                    _ => rng.usize(1..200_000),
                };
                let f = fs.open_file(&p, OpenFlags::create()).unwrap();
                f.pwrite(&pattern(seed + op as u64, len), 0).unwrap();
                if rng.bool() {
                    f.fsync().unwrap();
                }
                files.push(p);
            }
            4 | 5 if !files.is_empty() => {
                let p = &files[rng.usize(..files.len())];
                let f = fs.open_file(p, OpenFlags::create()).unwrap();
                let at = rng.u64(..100_000);
                f.pwrite(&pattern(op as u64, rng.usize(1..20_000)), at)
                    .unwrap();
                if rng.bool() {
                    f.fdatasync().unwrap();
                }
            }
            6 if !files.is_empty() => {
                let p = &files[rng.usize(..files.len())];
                fs.truncate(p, rng.u64(..50_000)).unwrap();
            }
            7 if !files.is_empty() => {
                let i = rng.usize(..files.len());
                let to = join(&dirs[rng.usize(..dirs.len())], format!("r{seed}_{op}"));
                fs.rename(&files[i], &to).unwrap();
                files[i] = to;
            }
            8 if !files.is_empty() => {
                let i = rng.usize(..files.len());
                fs.unlink(&files.swap_remove(i)).unwrap();
            }
            9 if dirs.len() > 1 => {
                // Move a directory (with whatever it holds) under the root.
                let i = rng.usize(1..dirs.len());
                let to = format!("/m{seed}_{op}");
                if fs.rename(&dirs[i], &to).is_ok() {
                    let from = std::mem::replace(&mut dirs[i], to.clone());
                    for d in dirs.iter_mut().chain(files.iter_mut()) {
                        if let Some(rest) = d.strip_prefix(&format!("{from}/")) {
                            *d = format!("{to}/{rest}");
                        }
                    }
                }
            }
            _ => fs.sync().unwrap(),
        }
    }
}

fn assert_clean(report: &FsckReport, what: &str) {
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "{what}: {damage:#?}");
    assert_eq!(report.verdict, Verdict::Clean, "{what}");
    assert!(!report.stats.checkpoints.is_empty(), "{what}");
}

#[test]
fn clean_pools_after_random_workloads_are_clean() {
    for seed in 0..12u64 {
        let (ordering, barrier) = [
            (Ordering::Relaxed, Barrier::EveryCheckpoint),
            (Ordering::Strict, Barrier::EveryLog),
            (Ordering::Relaxed, Barrier::Superblock),
        ][seed as usize % 3];
        let dev = Arc::new(SimDevice::new(24 << 20));
        let fs = Fs::format(dev.clone(), &config(ordering, barrier)).unwrap();
        workload(&fs, seed, 60);
        // As a process crash leaves it (logs after the last superblock, data-only logs).
        let running = SimDevice::from_image(dev.image());
        assert_clean(&check(&running).unwrap(), &format!("seed {seed}, running"));
        fs.close().unwrap();
        let report = check(&*dev).unwrap();
        assert_clean(&report, &format!("seed {seed}, closed"));
        assert!(report.stats.files > 0 && report.stats.logs > 0);
        // Reopened and used again.
        let fs = Fs::open(dev.clone(), &OpenOptions::default()).unwrap();
        workload(&fs, seed + 100, 30);
        fs.close().unwrap();
        assert_clean(&check(&*dev).unwrap(), &format!("seed {seed}, reopened"));
    }
}

#[test]
fn a_full_pool_whose_segments_were_reused_is_clean() {
    // Small pool, much more written than it holds: segments are cleaned and reused.
    let dev = Arc::new(SimDevice::new(4 << 20));
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    for round in 0..40u64 {
        let f = fs.open_file("/hot", OpenFlags::create()).unwrap();
        f.pwrite(&pattern(round, 300_000), 0).unwrap();
        f.fsync().unwrap();
        fs.open_file(&format!("/small{}", round % 5), OpenFlags::create())
            .unwrap()
            .pwrite(&pattern(round, 5000), 0)
            .unwrap();
        if round % 7 == 0 {
            fs.sync().unwrap();
        }
        let running = SimDevice::from_image(dev.image());
        assert_clean(&check(&running).unwrap(), &format!("round {round}"));
    }
    fs.close().unwrap();
    assert_clean(&check(&*dev).unwrap(), "closed");
}

#[test]
fn the_memory_backend_is_clean_too() {
    let dev: Arc<dyn Device> =
        Arc::new(crate::dev::memory::MemoryPool::anonymous(16 << 20).unwrap());
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    workload(&fs, 7, 80);
    fs.sync().unwrap();
    assert_clean(&check(&*dev).unwrap(), "memory backend");
    fs.close().unwrap();
}

#[test]
fn pools_recovered_after_crashes_are_clean() {
    for seed in 0..16u64 {
        let barrier = [
            Barrier::EveryLog,
            Barrier::EveryCheckpoint,
            Barrier::Superblock,
        ][seed as usize % 3];
        let dev = Arc::new(SimDevice::new(16 << 20));
        let fs = Fs::format(dev.clone(), &config(Ordering::Relaxed, barrier)).unwrap();
        workload(&fs, seed * 13, 40);
        let crashed: Arc<dyn Device> = Arc::new(dev.crash(seed));
        drop(fs);
        // Before recovery: never panics; whatever it says, recovery then leaves a clean pool.
        let _ = check(&*crashed).unwrap();
        let fs = Fs::open(crashed.clone(), &OpenOptions::default()).unwrap();
        fs.close().unwrap();
        assert_clean(&check(&*crashed).unwrap(), &format!("crash seed {seed}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Injected corruption

struct Sample {
    image: Vec<u8>,
    files: BTreeMap<String, Vec<u8>>,
}

/// A closed pool with a few directories and files, one large enough for a two-level map.
fn sample() -> Sample {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    fs.mkdir("/docs", 0o755).unwrap();
    fs.mkdir("/docs/old", 0o700).unwrap();
    for (path, len, seed) in [
        ("/docs/a.txt", 10_000usize, 1u64),
        ("/docs/old/b.bin", 300_000, 2),
        ("/big", (2 << 20) + 12_345, 3),
        ("/tiny", 5, 4),
    ] {
        fs.open_file(path, OpenFlags::create())
            .unwrap()
            .pwrite(&pattern(seed, len), 0)
            .unwrap();
    }
    fs.sync().unwrap();
    fs.open_file("/docs/later", OpenFlags::create())
        .unwrap()
        .pwrite(&pattern(9, 9000), 0)
        .unwrap();
    let files = tree(&fs);
    fs.close().unwrap();
    Sample {
        image: dev.image(),
        files,
    }
}

fn analysed(image: &[u8]) -> Analysis {
    analyse(&SimDevice::from_image(image.to_vec()), &|_, _| {}).unwrap()
}

fn ino_of(a: &Analysis, path: &str) -> u64 {
    let v = a.views.last().unwrap();
    *v.paths.iter().find(|(_, p)| p.as_str() == path).unwrap().0
}

/// Where inode `ino`'s record lies in `image` (the newest checkpoint's), and the record.
fn record_of(a: &Analysis, image: &[u8], ino: u64) -> (usize, InodeRecord) {
    let page = a.views.last().unwrap().pages[(ino / INODES_PER_PAGE as u64) as usize];
    let at = page as usize * BLOCK + (ino % INODES_PER_PAGE as u64) as usize * INODE_BYTES;
    let rec = InodeRecord::decode(&image[at..at + INODE_BYTES])
        .unwrap()
        .unwrap();
    (at, rec)
}

fn flip(image: &mut [u8], block: u64, byte: usize) {
    image[block as usize * BLOCK + byte] ^= 0x40;
}

fn finding<'r>(report: &'r FsckReport, needle: &str) -> &'r Finding {
    report
        .findings
        .iter()
        .find(|f| f.severity == Severity::Damage && f.message.contains(needle))
        .unwrap_or_else(|| {
            panic!(
                "no damage finding with {needle:?} in {:#?}",
                report.findings
            )
        })
}

/// Repairs `image`; the result must check clean and reopen; returns it with the report.
fn repaired(image: Vec<u8>) -> (Fs, RepairReport) {
    let dev: Arc<dyn Device> = Arc::new(SimDevice::from_image(image));
    let report = repair(dev.clone()).unwrap();
    assert_clean(&report.after, "after repair");
    assert_ne!(report.before.verdict, Verdict::Clean);
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    (fs, report)
}

#[test]
fn the_sample_is_clean() {
    let s = sample();
    assert_clean(&analysed(&s.image).report, "sample");
    let (big_ino, a) = {
        let a = analysed(&s.image);
        (ino_of(&a, "/big"), a)
    };
    assert_eq!(a.views.last().unwrap().inodes[&big_ino].rec.height, 2);
}

#[test]
fn a_damaged_superblock_copy_is_found_and_rewritten() {
    let s = sample();
    for copy in 0..2u64 {
        let mut image = s.image.clone();
        flip(&mut image, copy, 300);
        let report = analysed(&image).report;
        let f = finding(&report, "invalid: CRC mismatch");
        assert_eq!(f.location.superblock, Some(copy as u8));
        assert_eq!(report.verdict, Verdict::Damaged);
        let (fs, r) = repaired(image);
        assert_eq!(r.method, RepairMethod::InPlace);
        assert_eq!(tree(&fs), s.files);
    }
}

#[test]
fn both_superblocks_lost_is_salvaged_by_scanning() {
    let s = sample();
    let mut image = s.image.clone();
    flip(&mut image, 0, 20);
    flip(&mut image, 1, 20);
    let report = analysed(&image).report;
    assert_eq!(
        report
            .damage()
            .filter(|f| f.location.superblock.is_some())
            .count(),
        2
    );
    assert!(
        report.stats.chain_end.contains("found at block"),
        "{}",
        report.stats.chain_end
    );
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::Rebuilt);
    assert_eq!(tree(&fs), s.files);
}

#[test]
fn a_truncated_pool_is_found_and_what_remains_salvaged() {
    let s = sample();
    let a = analysed(&s.image);
    // Cut the pool after the last block in use: everything is still there.
    let last = a.index.logs.iter().map(LogEntry::end).max().unwrap();
    assert!(last < (8 << 20) / BLOCK_U64);
    let image = s.image[..10 << 20].to_vec();
    let report = analysed(&image).report;
    let f = finding(&report, "device has only");
    assert_eq!(f.location.superblock, Some(0));
    assert_eq!(report.verdict, Verdict::Damaged);
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::Rebuilt);
    assert_eq!(tree(&fs), s.files);

    // Cut into the data: the files whose blocks are gone lose them, the rest survive.
    let image = s.image[..(last as usize / 2) * BLOCK].to_vec();
    let report = analysed(&image).report;
    assert_ne!(report.verdict, Verdict::Clean);
    let dev: Arc<dyn Device> = Arc::new(SimDevice::from_image(image));
    if let Ok(r) = repair(dev) {
        assert_clean(&r.after, "after repairing a pool cut in half");
        assert!(!r.lost.is_empty());
    }
}

#[test]
fn flipped_file_data_is_found_through_its_log_crc_and_rewritten() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/docs/old/b.bin");
    let block = a.views.last().unwrap().inodes[&ino].blocks[3];
    let log = a.index.holding(block).unwrap().summary.sequence;
    let mut image = s.image.clone();
    flip(&mut image, block, 77);
    let report = analysed(&image).report;
    let f = finding(&report, "payload CRC mismatch in a log holding live blocks");
    assert_eq!(f.location.log, Some(log));
    assert!(
        f.message.contains(&format!("inode {ino}'s block")),
        "{}",
        f.message
    );
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::InPlace, "{:#?}", r.actions);
    assert!(
        r.lost
            .iter()
            .any(|l| l.contains("/docs/old/b.bin") && l.contains("may hold damaged bytes")),
        "{:?}",
        r.lost
    );
    // Kept as read: only the flipped byte differs.
    let mut expect = s.files.clone();
    expect.get_mut("/docs/old/b.bin").unwrap()[3 * BLOCK + 77] ^= 0x40;
    assert_eq!(tree(&fs), expect);
}

#[test]
fn a_flipped_log_summary_is_found_and_its_blocks_salvaged() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/docs/a.txt");
    let block = a.views.last().unwrap().inodes[&ino].blocks[1];
    let start = a.index.holding(block).unwrap().start;
    let mut image = s.image.clone();
    flip(&mut image, start, 100);
    let report = analysed(&image).report;
    assert!(
        report
            .damage()
            .any(|f| f.message.contains("lies in no log that verifies")
                && f.location.inode == Some(ino)),
        "{:#?}",
        report.findings
    );
    // The block went out in a full buffer while the file was new: a data-only log of placed
    // data, whose summary the checkpoint mapping the block does not need. So the pool opens and
    // is repaired in place, the block rewritten as read.
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::InPlace, "{:#?}", r.actions);
    assert!(
        r.actions
            .iter()
            .any(|a| a.starts_with("/docs/a.txt: rewrote")),
        "{:#?}",
        r.actions
    );
    assert_eq!(tree(&fs), s.files);
}

#[test]
fn a_flipped_checkpoint_root_falls_back_to_an_older_checkpoint() {
    let s = sample();
    let a = analysed(&s.image);
    let root = a.views.last().unwrap().root_block;
    let mut image = s.image.clone();
    flip(&mut image, root, 50);
    let report = analysed(&image).report;
    let f = finding(&report, "checkpoint root: CRC mismatch");
    assert_eq!(f.location.block, Some(root));
    assert_eq!(report.verdict, Verdict::Damaged);
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::Rebuilt);
    assert!(
        r.lost
            .iter()
            .any(|l| l.contains("changes after checkpoint")),
        "{:?}",
        r.lost
    );
    // The older checkpoint predates nothing of the sample but the last file's fate at close.
    let got = tree(&fs);
    for (path, data) in &got {
        assert_eq!(Some(data), s.files.get(path), "{path}");
    }
    assert!(got.contains_key("/big"));
}

#[test]
fn a_flipped_map_node_is_found_and_the_file_salvaged_around_it() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/big");
    let node = a.views.last().unwrap().inodes[&ino].rec.root;
    let mut image = s.image.clone();
    flip(&mut image, node, 600);
    let report = analysed(&image).report;
    let f = finding(&report, "level-2 node 0: map node CRC mismatch");
    assert_eq!(
        (f.location.inode, f.location.block),
        (Some(ino), Some(node))
    );
    let (fs, r) = repaired(image);
    assert_eq!(r.method, RepairMethod::Rebuilt);
    assert!(
        r.lost
            .iter()
            .any(|l| l.starts_with("/big: contents of blocks")),
        "{:?}",
        r.lost
    );
    let got = tree(&fs);
    assert_eq!(got["/big"].len(), s.files["/big"].len());
    assert!(got["/big"].iter().all(|&b| b == 0));
    for (path, data) in got.iter().filter(|(p, _)| p.as_str() != "/big") {
        assert_eq!(Some(data), s.files.get(path), "{path}");
    }
}

#[test]
fn a_flipped_inode_page_is_found_and_the_lost_inodes_reported() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/tiny");
    let page = a.views.last().unwrap().pages[(ino / INODES_PER_PAGE as u64) as usize];
    let slot = (ino % INODES_PER_PAGE as u64) as usize;
    let mut image = s.image.clone();
    flip(&mut image, page, slot * INODE_BYTES + 20);
    let report = analysed(&image).report;
    let f = finding(&report, "inode record CRC mismatch");
    assert_eq!(
        (f.location.inode, f.location.block),
        (Some(ino), Some(page))
    );
    finding(
        &report,
        &format!("\"tiny\" names inode {ino}, which is not in use"),
    );
    let (fs, r) = repaired(image);
    assert!(r.lost.iter().any(|l| l.contains("/tiny")), "{:?}", r.lost);
    let mut expect = s.files.clone();
    expect.remove("/tiny");
    assert_eq!(tree(&fs), expect);
}

#[test]
fn a_flipped_directory_block_is_found_and_its_children_reattached() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/docs");
    let block = a.views.last().unwrap().inodes[&ino].blocks[0];
    let mut image = s.image.clone();
    flip(&mut image, block, 30);
    let report = analysed(&image).report;
    let f = finding(&report, "directory block 0: directory block CRC mismatch");
    assert_eq!(
        (f.location.inode, f.location.block),
        (Some(ino), Some(block))
    );
    let a_txt = ino_of(&a, "/docs/a.txt");
    let old = ino_of(&a, "/docs/old");
    let unreachable = report
        .damage()
        .filter(|f| f.message.starts_with("unreachable from the root"))
        .map(|f| f.location.inode.unwrap())
        .collect::<Vec<_>>();
    assert!(
        unreachable.contains(&a_txt) && unreachable.contains(&old),
        "{unreachable:?}"
    );
    let (fs, r) = repaired(image);
    assert!(
        r.actions.iter().any(|a| a.contains("lost+found")),
        "{:?}",
        r.actions
    );
    assert_eq!(
        read_all(&fs, &format!("/lost+found/#{a_txt}")),
        s.files["/docs/a.txt"]
    );
    assert_eq!(
        read_all(&fs, &format!("/lost+found/#{old}/b.bin")),
        s.files["/docs/old/b.bin"]
    );
    assert_eq!(read_all(&fs, "/big"), s.files["/big"]);
}

#[test]
fn damage_in_the_log_chain_before_its_tail_is_found() {
    // A pool left running: data-only logs after the last superblock.
    let dev = Arc::new(SimDevice::new(8 << 20));
    let fs = Fs::format(dev.clone(), &config(Ordering::Relaxed, Barrier::EveryLog)).unwrap();
    let f = fs.open_file("/log", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 8192), 0).unwrap();
    f.fsync().unwrap();
    fs.sync().unwrap();
    for i in 0..4u64 {
        f.pwrite(&pattern(i + 2, 4096), 8192 + i * 4096).unwrap();
        f.fsync().unwrap();
    }
    let image = dev.image();
    drop(f);
    drop(fs);
    let a = analysed(&image);
    assert_clean(&a.report, "running");
    assert_eq!(a.tail.len(), 4);
    // Data-only logs are written ahead of their payloads: one whose payload fails its CRC is
    // what a crash leaves while it is in flight. Recovery skips it and the later logs of its
    // file, so it is a note, and the file keeps what precedes it.
    let second = &a.index.logs[a.tail[1].0];
    let mut skipped = image.clone();
    flip(&mut skipped, second.start + 1, 9);
    let report = analysed(&skipped).report;
    assert_eq!(report.verdict, Verdict::Clean, "{:#?}", report.findings);
    let f = report
        .findings
        .iter()
        .find(|f| {
            f.severity == Severity::Note && f.message.contains("written ahead of its payload")
        })
        .expect("a note on the skipped log");
    assert_eq!(f.location.log, Some(second.summary.sequence));
    let fs = Fs::open(
        Arc::new(SimDevice::from_image(skipped)),
        &OpenOptions::default(),
    )
    .unwrap();
    assert_eq!(
        fs.recovery_report().logs_skipped,
        3,
        "the torn log and the file's later two"
    );
    assert_eq!(
        read_all(&fs, "/log"),
        [pattern(1, 8192), pattern(2, 4096)].concat()
    );
    drop(fs);
    // A checkpoint log's payload (written ahead of earlier payloads since version 4, but named
    // by the superblock, which is written only once every payload before it is complete)
    // damaged is damage.
    let ckpt = a
        .index
        .logs
        .iter()
        .filter(|l| l.summary.flags & format::FLAG_DATA_ONLY == 0 && l.summary.payload_blocks > 0)
        .max_by_key(|l| l.summary.sequence)
        .expect("a checkpoint log");
    let mut bad = image.clone();
    flip(&mut bad, ckpt.start + 1, 9);
    let report = analysed(&bad).report;
    assert_eq!(report.verdict, Verdict::Damaged, "{:#?}", report.findings);
    // The last log torn instead: a note, not damage.
    let last = &a.index.logs[a.tail.last().unwrap().0];
    let mut torn = image.clone();
    flip(&mut torn, last.start + 1, 9);
    let report = analysed(&torn).report;
    assert_eq!(report.verdict, Verdict::Clean, "{:#?}", report.findings);
    assert!(report
        .findings
        .iter()
        .any(|f| f.message.contains("written ahead of its payload")));
}

#[test]
fn a_map_of_few_runs_is_kept_in_the_inode_record_and_a_fragmented_one_in_nodes() {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let whole = pattern(1, 40 * BLOCK + 100);
    fs.open_file("/whole", OpenFlags::create())
        .unwrap()
        .pwrite(&whole, 0)
        .unwrap();
    let mut frag_data = pattern(2, 40 * BLOCK);
    let frag = fs.open_file("/frag", OpenFlags::create()).unwrap();
    frag.pwrite(&frag_data, 0).unwrap();
    fs.sync().unwrap();
    // Every other block written again, elsewhere: forty runs.
    for i in (0..40).step_by(2) {
        let block = pattern(100 + i as u64, BLOCK);
        frag.pwrite(&block, (i * BLOCK) as u64).unwrap();
        frag_data[i * BLOCK..(i + 1) * BLOCK].copy_from_slice(&block);
    }
    drop(frag);
    fs.close().unwrap();

    let a = analysed(&dev.image());
    assert_clean(&a.report, "written");
    let live = a.views.last().unwrap();
    let w = &live.inodes[&ino_of(&a, "/whole")];
    // 64 KiB segments: the 41 blocks come in a few runs, in the record.
    assert!(!w.rec.extents.is_empty() && w.rec.root == 0, "{:?}", w.rec);
    assert_eq!(w.rec.extents.blocks(), 41);
    assert_eq!(w.blocks, w.rec.extents.expand());
    let f = &live.inodes[&ino_of(&a, "/frag")];
    assert!(f.rec.extents.is_empty() && f.rec.root != 0 && f.rec.height == 1);

    // Read back after a reopen; then the fragmented file cut to three blocks goes back into its
    // record, and its node is freed (the usage counts check clean).
    let again = Arc::new(SimDevice::from_image(dev.image()));
    let fs = Fs::open(again.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&fs, "/whole"), whole);
    assert_eq!(read_all(&fs, "/frag"), frag_data);
    fs.truncate("/frag", 3 * BLOCK as u64).unwrap();
    fs.close().unwrap();
    let a = analysed(&again.image());
    assert_clean(&a.report, "cut");
    let f = &a.views.last().unwrap().inodes[&ino_of(&a, "/frag")];
    assert_eq!(f.rec.extents.blocks(), 3, "{:?}", f.rec);
    assert!(f.rec.root == 0 && f.rec.height == 0);
    let fs = Fs::open(again, &OpenOptions::default()).unwrap();
    assert_eq!(read_all(&fs, "/frag"), frag_data[..3 * BLOCK]);
}

/// fsck reports inode `ino`'s record map as reaching outside the segment area, and open refuses
/// the pool.
fn run_outside_is_found_and_refused(image: Vec<u8>, ino: u64) {
    let report = analysed(&image).report;
    let f = finding(&report, "lies outside the segment area");
    assert_eq!(f.location.inode, Some(ino));
    let err = Fs::open(
        Arc::new(SimDevice::from_image(image)),
        &OpenOptions::default(),
    )
    .expect_err("the pool is refused");
    assert!(err.to_string().contains("outside the pool"), "{err}");
}

#[test]
fn a_run_outside_the_pool_is_found_and_refused_at_open() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/docs/a.txt");
    let mut image = s.image.clone();
    let (at, mut rec) = record_of(&a, &image, ino);
    assert!(!rec.extents.is_empty(), "{rec:?}");
    let end = (image.len() / BLOCK) as u64;
    rec.extents = Extents::of(&[end - 1, end, end + 1]).unwrap();
    rec.encode_into(&mut image[at..at + INODE_BYTES]);
    run_outside_is_found_and_refused(image, ino);
}

#[test]
fn a_run_at_the_top_of_the_address_space_is_damage_not_a_panic() {
    let s = sample();
    let a = analysed(&s.image);
    let ino = ino_of(&a, "/docs/a.txt");
    let mut image = s.image.clone();
    let (at, mut rec) = record_of(&a, &image, ino);
    rec.extents = Extents::of(&[u64::MAX - 1]).unwrap();
    rec.encode_into(&mut image[at..at + INODE_BYTES]);
    // The run made 4 blocks long, past the largest address, its CRC made to match.
    image[at + 80..at + 84].copy_from_slice(&4u32.to_le_bytes());
    let crc = format::crc_blocks(&image[at..at + INODE_BYTES - 4]);
    image[at + INODE_BYTES - 4..at + INODE_BYTES].copy_from_slice(&crc.to_le_bytes());
    run_outside_is_found_and_refused(image, ino);
}

#[test]
fn a_block_claimed_twice_is_found() {
    // Point the tiny file's map (one run in its inode record) at a block of another file by
    // rewriting the record with a fresh CRC.
    let s = sample();
    let a = analysed(&s.image);
    let tiny = ino_of(&a, "/tiny");
    let other = a.views.last().unwrap().inodes[&ino_of(&a, "/docs/a.txt")].blocks[0];
    let mut image = s.image.clone();
    let (at, mut rec) = record_of(&a, &image, tiny);
    assert_eq!(rec.extents.runs().len(), 1, "{rec:?}");
    rec.extents = Extents::of(&[other]).unwrap();
    rec.encode_into(&mut image[at..at + INODE_BYTES]);
    // The page is in a log whose payload CRC now fails too; that is reported separately.
    let report = analysed(&image).report;
    let f = finding(&report, "block used twice");
    assert_eq!(f.location.block, Some(other));
    let (fs, _) = repaired(image);
    assert_eq!(read_all(&fs, "/docs/a.txt"), s.files["/docs/a.txt"]);
}

#[test]
fn link_counts_that_disagree_with_the_tree_are_found_and_fixed() {
    let s = sample();
    let a = analysed(&s.image);
    let docs = ino_of(&a, "/docs");
    let mut image = s.image.clone();
    let (at, mut rec) = record_of(&a, &image, docs);
    rec.nlink = 7;
    rec.encode_into(&mut image[at..at + INODE_BYTES]);
    let report = analysed(&image).report;
    let f = finding(&report, "link count 7 but 3 expected");
    assert_eq!(f.location.path.as_deref(), Some("/docs"));
    let (fs, r) = repaired(image);
    assert!(
        r.actions.iter().any(|a| a.contains("link counts")),
        "{:?}",
        r.actions
    );
    assert_eq!(fs.stat("/docs").unwrap().nlink, 3);
}

#[test]
fn garbage_everywhere_is_unrecoverable_not_a_panic() {
    let image: Vec<u8> = (0..(4usize << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let report = analysed(&image).report;
    assert_eq!(report.verdict, Verdict::Unrecoverable);
    let dev: Arc<dyn Device> = Arc::new(SimDevice::from_image(image));
    assert!(matches!(repair(dev), Err(Error::Corrupt(_))));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
    #[test]
    fn checking_and_repairing_mutated_pools_never_panics(
        flips in proptest::collection::vec((0usize..(1 << 20), 1u8..=255), 1..24),
        blocks in proptest::collection::vec(0u64..256, 0..3),
    ) {
        let mut image = small_sample();
        for (at, x) in flips {
            image[at] ^= x;
        }
        for b in blocks {
            let at = b as usize * BLOCK;
            for (i, byte) in image[at..at + BLOCK].iter_mut().enumerate() {
                *byte = (i as u64).wrapping_mul(b + 7) as u8;
            }
        }
        let report = check(&SimDevice::from_image(image.clone())).unwrap();
        let dev: Arc<dyn Device> = Arc::new(SimDevice::from_image(image));
        if let Ok(r) = repair(dev) {
            proptest::prop_assert_eq!(r.after.verdict, Verdict::Clean, "{:#?}", r.after.findings);
        } else {
            proptest::prop_assert_ne!(report.verdict, Verdict::Clean);
        }
    }
}

fn small_sample() -> Vec<u8> {
    let dev = Arc::new(SimDevice::new(1 << 20));
    let fs = Fs::format(
        dev.clone(),
        &Config {
            segment_bytes: 32 << 10,
            ..config(Ordering::Relaxed, Barrier::EveryCheckpoint)
        },
    )
    .unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let f = fs.open_file("/d/f", OpenFlags::create()).unwrap();
    f.pwrite(&pattern(1, 20000), 0).unwrap();
    f.fsync().unwrap();
    fs.open_file("/g", OpenFlags::create())
        .unwrap()
        .pwrite(b"g", 0)
        .unwrap();
    fs.sync().unwrap();
    f.pwrite(&pattern(3, 9000), 15000).unwrap();
    f.fsync().unwrap();
    drop(f);
    let image = dev.image();
    fs.close().unwrap();
    image
}

// ---------------------------------------------------------------------------------------------
// Snapshots, retained checkpoints, the cleaner and the tables

#[test]
fn pools_with_snapshots_and_cleaning_are_clean() {
    for seed in 0..6u64 {
        let dev = Arc::new(SimDevice::new(48 << 20));
        // Half the seeds also keep every plain checkpoint for an hour (the default).
        let cfg = Config {
            protection_period: Duration::from_secs(if seed % 2 == 1 { 3600 } else { 0 }),
            ..config(Ordering::Relaxed, Barrier::EveryCheckpoint)
        };
        let fs = Fs::format(dev.clone(), &cfg).unwrap();
        let mut snaps = Vec::new();
        for round in 0..6u64 {
            workload(&fs, seed * 10 + round, 25);
            snaps.push(fs.snapshot(Some(&format!("s{round}"))).unwrap());
            if round % 2 == 1 {
                fs.set_snapshot(snaps[snaps.len() - 2], false).unwrap();
            }
            let _ = fs.gc(0.5).unwrap();
            let running = SimDevice::from_image(dev.image());
            let report = check(&running).unwrap();
            assert_clean(&report, &format!("seed {seed} round {round}"));
            let kept: Vec<u64> = fs.checkpoints().unwrap().iter().map(|c| c.number).collect();
            for n in &kept {
                assert!(
                    report.stats.checkpoints.contains(n),
                    "checkpoint {n} of {kept:?} not checked: {:?}",
                    report.stats.checkpoints
                );
            }
        }
        fs.close().unwrap();
        assert_clean(&check(&*dev).unwrap(), &format!("seed {seed} closed"));
    }
}

#[test]
fn damage_to_a_block_only_a_snapshot_keeps_is_found_in_that_snapshot() {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    let old = fs.open_file("/old", OpenFlags::create()).unwrap();
    old.pwrite(&pattern(5, 100_000), 0).unwrap();
    fs.sync().unwrap();
    // Every other block written again, elsewhere: more runs than a record holds, so the map
    // is a tree of nodes.
    for i in (0..25u64).step_by(2) {
        old.pwrite(&pattern(6 + i, 4096), i * 4096).unwrap();
    }
    drop(old);
    let snap = fs.snapshot(None).unwrap();
    fs.unlink("/old").unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
    let image = dev.image();
    let a = analysed(&image);
    assert_clean(&a.report, "before");
    let v = a
        .views
        .iter()
        .find(|v| v.number == snap)
        .expect("the snapshot is checked");
    let (&ino, iv) = v.inodes.iter().find(|(_, iv)| !iv.is_dir()).unwrap();
    assert!(
        !a.views.last().unwrap().inodes.contains_key(&ino),
        "deleted in the live tree"
    );
    assert!(iv.rec.extents.is_empty(), "a tree, not runs in the record");
    let node = iv.rec.root;
    let mut bad = image.clone();
    flip(&mut bad, node, 99);
    let report = analysed(&bad).report;
    let f = finding(&report, "map node CRC mismatch");
    assert_eq!(
        (f.location.checkpoint, f.location.inode),
        (Some(snap), Some(ino))
    );
}

#[test]
fn a_damaged_table_page_is_found() {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let fs = Fs::format(
        dev.clone(),
        &config(Ordering::Relaxed, Barrier::EveryCheckpoint),
    )
    .unwrap();
    workload(&fs, 3, 30);
    fs.snapshot(Some("t")).unwrap();
    fs.close().unwrap();
    let image = dev.image();
    let a = analysed(&image);
    assert_clean(&a.report, "before");
    // The newest root's usage table (height 0: its root is its only page).
    let root_block = a.views.last().unwrap().root_block;
    let root = CheckpointRoot::decode(
        &image[root_block as usize * BLOCK..(root_block as usize + 1) * BLOCK],
    )
    .unwrap();
    let usage = root.tables[0];
    assert_eq!(usage.height, 0);
    let mut bad = image.clone();
    flip(&mut bad, usage.root, 40);
    let report = analysed(&bad).report;
    let f = finding(
        &report,
        "segment usage table page 0: table page CRC mismatch",
    );
    assert_eq!(f.location.block, Some(usage.root));
}
