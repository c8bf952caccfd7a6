//! A checkpoint's metadata in a log head of its own (docs/ARCHITECTURE.md, "The metadata's log
//! head"): the map nodes and inode pages a checkpoint writes share no segment with file data,
//! and a power cut while a checkpoint is being written there recovers a checkpoint, every synced
//! block and an image fsck finds clean. A pool of 128 segments (the fewest that has the head),
//! a stepped clock and one writer, so each run is the same on any machine.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::dev::sim::SimDevice;
use crate::tbfs::format::FIRST_SEGMENT_BLOCK;
use crate::tbfs::state::State;
use crate::tbfs::{fsck, Barrier, Clock, Config, File, Fs, OpenFlags, OpenOptions, Ordering};

const BLOCK: u64 = 4096;
const SEGMENT_BLOCKS: u64 = 64;
const SEGMENTS: u64 = 128;
const FILES: u64 = 4;
/// Two map leaves and a level-2 node each, once overwrites break the file into many runs.
const FILE_BLOCKS: u64 = 1024;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        // Every log flushed: a sync's data is durable before the checkpoint the cut stops.
        barrier: Barrier::EveryLog,
        segment_bytes: SEGMENT_BLOCKS * BLOCK,
        superblock_every_bytes: 1 << 40,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
        clock: Clock::stepped(1 << 40, Duration::from_micros(1)),
    }
}

/// Block `index` of file `tag` at `version`, its header naming all three.
fn content(tag: u64, index: u64, version: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..BLOCK)
        .map(|i| {
            (i.wrapping_mul(131) ^ tag.wrapping_mul(7) ^ index.wrapping_mul(13) ^ version) as u8
        })
        .collect();
    b[..8].copy_from_slice(&tag.to_le_bytes());
    b[8..16].copy_from_slice(&index.to_le_bytes());
    b[16..24].copy_from_slice(&version.to_le_bytes());
    b
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The files' blocks at their versions.
type Model = Vec<Vec<u64>>;

/// A pool with `FILES` files of `FILE_BLOCKS` blocks, written whole and synced.
fn setup() -> (Arc<SimDevice>, Fs, Vec<File>, Model) {
    let dev = Arc::new(SimDevice::new(
        (FIRST_SEGMENT_BLOCK + SEGMENTS * SEGMENT_BLOCKS) * BLOCK,
    ));
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    let files: Vec<File> = (0..FILES)
        .map(|f| {
            let file = fs
                .open_file(&format!("/f{f}"), OpenFlags::create())
                .unwrap();
            for chunk in 0..FILE_BLOCKS / 64 {
                let data: Vec<u8> = (chunk * 64..(chunk + 1) * 64)
                    .flat_map(|i| content(f, i, 0))
                    .collect();
                file.pwrite(&data, chunk * 64 * BLOCK).unwrap();
            }
            file
        })
        .collect();
    fs.sync().unwrap();
    (
        dev,
        fs,
        files,
        vec![vec![0; FILE_BLOCKS as usize]; FILES as usize],
    )
}

/// `n` single-block overwrites at random places of the files, each a new version.
fn overwrite(files: &[File], model: &mut Model, rng: &mut Rng, n: u64) {
    for _ in 0..n {
        let f = rng.below(FILES) as usize;
        let i = rng.below(FILE_BLOCKS);
        let v = &mut model[f][i as usize];
        *v += 1;
        files[f]
            .pwrite(&content(f as u64, i, *v), i * BLOCK)
            .unwrap();
    }
}

/// A checkpoint and a superblock naming it, as the cleaner's refresh writes them.
fn refresh(fs: &Fs) -> crate::tbfs::Result<()> {
    let inner = &fs.inner;
    let mut m = inner.lock_meta();
    let was = m.refresh.set_running(true);
    let r = inner
        .commit_checkpoint_for_superblock(&mut m)
        .and_then(|()| inner.write_superblock(&mut m));
    m.refresh.set_running(was);
    r
}

/// The segments holding the files' map nodes and the inode file's pages and nodes (what the
/// newest checkpoint wrote), and those holding the files' data.
fn segments_of(fs: &Fs, files: &[File]) -> (BTreeSet<usize>, BTreeSet<usize>) {
    let m = fs.inner.lock_meta();
    let seg = |a: u64| State::seg_of(a, SEGMENT_BLOCKS);
    let (mut meta, mut data) = (BTreeSet::new(), BTreeSet::new());
    for f in files {
        let cell = m.inodes[&f.ino()].clone();
        let st = cell.lock();
        meta.extend(st.map().node_addrs().map(seg));
        data.extend(st.map().blocks.iter().filter(|&&a| a != 0).map(|&a| seg(a)));
    }
    meta.extend(m.ifile.map().node_addrs().map(seg));
    meta.extend(
        m.ifile
            .map()
            .blocks
            .iter()
            .filter(|&&a| a != 0)
            .map(|&a| seg(a)),
    );
    (meta, data)
}

fn check_files(fs: &Fs, model: &Model, when: &str) {
    for (f, versions) in model.iter().enumerate() {
        let file = fs
            .open_file(&format!("/f{f}"), OpenFlags::read_only())
            .unwrap();
        let mut buf = vec![0u8; BLOCK as usize];
        for (i, &v) in versions.iter().enumerate() {
            file.pread(&mut buf, i as u64 * BLOCK).unwrap();
            assert!(
                buf == content(f as u64, i as u64, v),
                "{when}: /f{f} block {i} is not version {v} (reads {:?})",
                &buf[..24]
            );
        }
    }
}

#[test]
fn a_checkpoints_map_nodes_and_inode_pages_share_no_segment_with_file_data() {
    let (_dev, fs, files, mut model) = setup();
    let mut rng = Rng(0x3e7a);
    let before = fs.counters();
    for round in 0..12 {
        overwrite(&files, &mut model, &mut rng, 300);
        refresh(&fs).unwrap();
        let (meta, data) = segments_of(&fs, &files);
        let nodes = {
            let m = fs.inner.lock_meta();
            files
                .iter()
                .map(|f| m.inodes[&f.ino()].lock().map().node_addrs().count())
                .sum::<usize>()
        };
        assert!(
            nodes >= 3 * FILES as usize,
            "round {round}: {nodes} map nodes"
        );
        let both: Vec<_> = meta.intersection(&data).collect();
        assert!(
            both.is_empty(),
            "round {round}: segments {both:?} hold both the checkpoint's metadata \
             (in {meta:?}) and file data"
        );
    }
    let counters = fs.counters();
    assert!(
        counters.checkpoints_apart - before.checkpoints_apart >= 12,
        "{} of {} checkpoints went to the metadata head",
        counters.checkpoints_apart - before.checkpoints_apart,
        counters.checkpoints - before.checkpoints
    );
    check_files(&fs, &model, "running");
}

#[test]
fn a_power_cut_while_a_checkpoint_is_in_the_metadata_head_recovers_a_checkpoint() {
    let (dev, fs, files, mut model) = setup();
    let mut rng = Rng(0x51c4);
    for _ in 0..3 {
        overwrite(&files, &mut model, &mut rng, 300);
        refresh(&fs).unwrap();
    }
    drop(files);
    drop(fs);
    let base = dev.image();
    let options = OpenOptions {
        clock: config().clock.clone(),
        ..OpenOptions::default()
    };
    // What recovery loaded, per cut: the checkpoint from before the cut or the one being
    // written.
    let (mut old, mut new) = (0, 0);
    for cut in 0..24 {
        let dev = Arc::new(SimDevice::from_image(base.clone()));
        let fs = Fs::open(dev.clone(), &options).unwrap();
        let files: Vec<File> = (0..FILES)
            .map(|f| {
                fs.open_file(&format!("/f{f}"), OpenFlags::create())
                    .unwrap()
            })
            .collect();
        let mut model = model.clone();
        let mut rng = Rng(0x7700 + cut);
        overwrite(&files, &mut model, &mut rng, 200);
        for f in &files {
            f.fdatasync().unwrap();
        }
        let (number, apart) = (
            fs.inner.lock_meta().ckpt.newest(),
            fs.counters().checkpoints_apart,
        );
        dev.cut_power_after(cut);
        // The cut may fail the checkpoint: what matters is what recovery finds.
        let _ = refresh(&fs);
        assert_eq!(
            fs.counters().checkpoints_apart,
            apart + 1,
            "cut {cut}: the checkpoint went to the metadata head"
        );
        let image = dev.durable_image();
        drop(files);
        drop(fs);
        let recovered = Arc::new(SimDevice::from_image(image.clone()));
        let back = Fs::open(recovered.clone(), &options).unwrap();
        check_files(&back, &model, &format!("cut {cut}"));
        if back.recovery_report().checkpoint > number {
            new += 1;
        } else {
            old += 1;
        }
        drop(back);
        for (when, image) in [("at the cut", image), ("after recovery", recovered.image())] {
            let device: crate::tbfs::DeviceRef = Arc::new(SimDevice::from_image(image));
            let report = fsck::check(&*device).unwrap();
            assert_eq!(
                report.verdict,
                fsck::Verdict::Clean,
                "cut {cut}, {when}: {report:#?}"
            );
        }
    }
    // The cuts fell before the checkpoint was durable and after.
    assert!(old > 0 && new > 0, "old checkpoint {old} times, new {new}");
}

#[test]
fn a_pool_filled_with_the_metadata_head_open_refuses_with_no_space_and_stays_usable() {
    let (dev, fs, files, mut model) = setup();
    let mut rng = Rng(0x0f11);
    overwrite(&files, &mut model, &mut rng, 300);
    refresh(&fs).unwrap();
    let apart = fs.counters().checkpoints_apart;
    assert!(apart > 0, "no checkpoint went to the metadata head");
    // New files of 64 blocks, each synced (a new file's sync writes a checkpoint), with
    // overwrites between them, until the pool refuses one.
    let write = |n: u64| -> crate::tbfs::Result<()> {
        let f = fs.open_file(&format!("/g{n}"), OpenFlags::create())?;
        f.pwrite(&content(100 + n, 0, 0).repeat(64), 0)?;
        f.fsync()
    };
    let mut n = 0;
    let refused = loop {
        if let Err(e) = write(n) {
            break e;
        }
        n += 1;
        overwrite(&files, &mut model, &mut rng, 16);
        assert!(
            n < 2 * SEGMENTS,
            "the pool took {n} files of a segment each"
        );
    };
    assert!(
        matches!(refused, crate::tbfs::Error::NoSpace(_)),
        "file {n} refused with {refused:?}"
    );
    assert_eq!(fs.poisoned(), None, "a full pool poisoned");
    assert!(
        fs.counters().checkpoints_apart > apart + n / 2,
        "{} of {n} files' checkpoints went to the metadata head",
        fs.counters().checkpoints_apart - apart
    );
    // Deletes make room again, and the files read back.
    for i in 0..n / 2 {
        fs.unlink(&format!("/g{i}")).unwrap();
    }
    fs.sync().unwrap();
    write(n).unwrap();
    fs.sync().unwrap();
    check_files(&fs, &model, "after the refusal");
    drop(files);
    drop(fs);
    let device: crate::tbfs::DeviceRef = Arc::new(SimDevice::from_image(dev.image()));
    let report = fsck::check(&*device).unwrap();
    assert_eq!(report.verdict, fsck::Verdict::Clean, "{report:#?}");
}
