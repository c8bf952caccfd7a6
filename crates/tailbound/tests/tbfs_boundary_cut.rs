//! A power cut just after the log chain entered a segment, with segments ahead of it that only
//! a snapshot holds (issue 38).
//!
//! When the chain ends at the start of a segment (its last log filled the segment before, and
//! nothing was written in the new one yet), recovery chooses the segment the writer goes to
//! after it. A segment whose blocks only a snapshot still reads holds nothing live, but it is
//! not free: writing there overwrites the snapshot.
//!
//! The pool is laid out so that such segments lie between free ones: small files a snapshot
//! keeps alternate with large files deleted before it, and the kept files are deleted after
//! it. A file is then rewritten piece by piece, each piece fsynced, until the writer has gone
//! round the pool. Every state between two calls whose log chain ends at the start of a
//! segment is a power cut there: the image is recovered, written through more than two
//! segments and checkpointed, and then every file of the snapshot must read back byte for
//! byte and fsck must find the pool clean. One test cuts with every write issued (fsync
//! flushes each log), the other with the writes since the last flush kept, dropped or torn
//! (fsync flushes nothing), which ends the chain where a log of it was lost.
//!
//! Single-threaded with background cleaning off and a stepped clock: the run is the same each
//! time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{data, read, Rng};

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{
    fsck, Barrier, Clock, Config, Fs, OpenFlags, OpenOptions, Ordering, Snapshot,
};

const POOL: u64 = 4 << 20;
const SEGMENT: u64 = 64 << 10;
const BLOCK: u64 = 4096;
/// Blocks before the first segment (the superblock copies).
const FIRST_SEGMENT_BLOCK: u64 = 2;
/// The file rewritten after the snapshot, and how much of it one call writes at most.
const CHURN_BYTES: u64 = 96 << 10;
const PIECE_BLOCKS_MAX: u64 = 5;
/// Calls of the rewrite phase: enough to go round the pool more than once.
const CHURN_CALLS: u64 = 700;
/// Bytes written after recovery: more than two segments, so the writer leaves the segment the
/// chain ended in and fills the one recovery chose after it.
const AFTER_BYTES: usize = 40 * BLOCK as usize;

/// Where the power goes.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// Between two calls, every fsync having flushed its log (`every-log`): the image holds
    /// every write issued.
    BetweenCalls,
    /// Between two calls, fsyncs flushing nothing (`every-checkpoint`): each write since the
    /// last flush is kept whole, dropped or torn, seeded by the call.
    DroppingUnflushed,
}

fn config(clock: &Clock, cut: Cut) -> Config {
    Config {
        segment_bytes: SEGMENT,
        background_gc: false,
        ordering: Ordering::Relaxed,
        barrier: match cut {
            Cut::BetweenCalls => Barrier::EveryLog,
            Cut::DroppingUnflushed => Barrier::EveryCheckpoint,
        },
        superblock_every_bytes: 1 << 20,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 64 << 10,
        clock: clock.clone(),
        ..Config::memory_pool()
    }
}

fn write_file(fs: &Fs, path: &str, bytes: &[u8]) {
    let f = fs.open_file(path, OpenFlags::create()).unwrap();
    f.pwrite(bytes, 0).unwrap();
    f.fsync().unwrap();
}

/// Every file of a snapshot and its bytes.
fn snapshot_files(view: &Snapshot) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for dir in ["/keep", "/churn"] {
        for e in view.readdir(dir).unwrap() {
            let path = format!("{dir}/{}", e.name);
            let bytes = view.read_file(&path).unwrap();
            out.insert(path, bytes);
        }
    }
    out
}

/// The block the log chain of `image` ends at, as recovery reports it (`end of log chain at
/// block N: ...`), if it stopped at the end of the chain.
fn chain_end(image: Vec<u8>, opts: &OpenOptions) -> Option<u64> {
    let fs = Fs::open(
        Arc::new(SimDevice::from_image(image)),
        &OpenOptions {
            read_only: true,
            ..opts.clone()
        },
    )
    .unwrap();
    let reason = fs.recovery_report().stop_reason;
    reason
        .strip_prefix("end of log chain at block ")?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// Recovers `image` (a power cut between two calls), writes `AFTER_BYTES` and checkpoints, and
/// checks the snapshot and the pool.
fn recover_and_check(
    image: Vec<u8>,
    opts: &OpenOptions,
    snapshot: u64,
    want: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    let dev = Arc::new(SimDevice::from_image(image));
    dev.set_writes_are_copies(true);
    let fs = Fs::open(dev.clone(), opts).unwrap_or_else(|e| panic!("{what}: opening: {e}"));
    let f = fs
        .open_file("/after", OpenFlags::create())
        .unwrap_or_else(|e| panic!("{what}: creating /after: {e}"));
    for (i, piece) in data(0xaf7e, AFTER_BYTES).chunks(BLOCK as usize).enumerate() {
        f.pwrite(piece, i as u64 * BLOCK)
            .and_then(|_| f.fsync())
            .unwrap_or_else(|e| panic!("{what}: writing /after: {e}"));
    }
    drop(f);
    fs.sync()
        .unwrap_or_else(|e| panic!("{what}: the checkpoint after recovery: {e}"));
    let got = snapshot_files(&fs.at(snapshot).unwrap());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: the snapshot's files"
    );
    for (path, bytes) in want {
        assert!(
            got[path] == *bytes,
            "{what}: snapshot {snapshot}'s {path} does not read back as it was taken"
        );
    }
    assert_eq!(read(&fs, "/after"), data(0xaf7e, AFTER_BYTES), "{what}");
    fs.close()
        .unwrap_or_else(|e| panic!("{what}: closing: {e}"));
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "{what}: fsck: {damage:#?}");
}

/// Lays out the pool, then rewrites the churn file piece by piece with its own bytes, each
/// piece fsynced; after every call whose crash image (`cut`) ends the log chain at a segment's
/// start, a power cut there. Returns how many such cuts were checked.
fn cuts_at_segment_starts(cut: Cut) -> u64 {
    let clock = Clock::stepped(1_700_000_000_000_000_000, Duration::from_micros(10));
    let dev = Arc::new(SimDevice::new(POOL));
    dev.set_writes_are_copies(true);
    let fs = Fs::format(dev.clone(), &config(&clock, cut)).unwrap();
    let opts = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    let segment_blocks = SEGMENT / BLOCK;
    let mut rng = Rng(0xb0a2d);
    for d in ["/keep", "/gone", "/churn"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    // Small files the snapshot keeps between large files deleted before it: once the small
    // ones are deleted too, the segments holding them hold only what the snapshot reads.
    let size = fs.space().unwrap().size;
    let mut laid = 0;
    let mut i = 0;
    while laid < size * 55 / 100 {
        let small = (1 + rng.below(3)) * BLOCK;
        let large = SEGMENT + rng.below(SEGMENT / BLOCK) * BLOCK;
        write_file(
            &fs,
            &format!("/keep/k{i}"),
            &data(rng.next(), small as usize),
        );
        write_file(
            &fs,
            &format!("/gone/g{i}"),
            &data(rng.next(), large as usize),
        );
        laid += small + large;
        i += 1;
    }
    for e in fs.readdir("/gone").unwrap() {
        fs.unlink(&format!("/gone/{}", e.name)).unwrap();
    }
    let churn_seed = rng.next();
    write_file(&fs, "/churn/c", &data(churn_seed, CHURN_BYTES as usize));
    fs.sync().unwrap();
    let snapshot = fs.snapshot(Some("kept")).unwrap();
    let want = snapshot_files(&fs.at(snapshot).unwrap());
    assert!(want.len() > 10, "the snapshot holds {} files", want.len());
    for e in fs.readdir("/keep").unwrap() {
        fs.unlink(&format!("/keep/{}", e.name)).unwrap();
    }
    fs.sync().unwrap();
    fs.gc(0.9).unwrap();
    fs.sync().unwrap();

    let churn = data(churn_seed, CHURN_BYTES as usize);
    let churn_blocks = CHURN_BYTES / BLOCK;
    let mut cuts = 0;
    for call in 0..CHURN_CALLS {
        let at = rng.below(churn_blocks);
        let n = (1 + rng.below(PIECE_BLOCKS_MAX)).min(churn_blocks - at);
        let (from, to) = ((at * BLOCK) as usize, ((at + n) * BLOCK) as usize);
        let f = fs.open_file("/churn/c", OpenFlags::create()).unwrap();
        f.pwrite(&churn[from..to], at * BLOCK).unwrap();
        f.fsync().unwrap();
        drop(f);
        if call % 50 == 49 {
            fs.sync().unwrap();
        }
        let image = match cut {
            Cut::BetweenCalls => dev.image(),
            Cut::DroppingUnflushed => dev.crash_image(0xc07 ^ call),
        };
        let Some(end) = chain_end(image.clone(), &opts) else {
            continue;
        };
        if !(end - FIRST_SEGMENT_BLOCK).is_multiple_of(segment_blocks) {
            continue;
        }
        cuts += 1;
        let seg = (end - FIRST_SEGMENT_BLOCK) / segment_blocks;
        recover_and_check(
            image,
            &opts,
            snapshot,
            &want,
            &format!("power cut after call {call}, the chain ending at the start of segment {seg}"),
        );
    }
    assert_eq!(read(&fs, "/churn/c"), churn);
    fs.close().unwrap();
    cuts
}

#[test]
fn a_power_cut_as_the_log_enters_a_segment_keeps_the_snapshot_segments_ahead_of_it() {
    let cuts = cuts_at_segment_starts(Cut::BetweenCalls);
    eprintln!("{cuts} power cuts at a segment's start checked");
    assert!(
        cuts >= 5,
        "only {cuts} states between calls ended the log chain at a segment's start"
    );
}

#[test]
fn a_power_cut_dropping_unflushed_logs_at_a_segment_start_keeps_the_snapshot() {
    let cuts = cuts_at_segment_starts(Cut::DroppingUnflushed);
    eprintln!("{cuts} power cuts at a segment's start checked");
    assert!(
        cuts >= 5,
        "only {cuts} crash images ended the log chain at a segment's start"
    );
}
