//! A power cut in a pool that refuses every call (issue 38, the 10-minute soak's failed
//! recovery, docs/results/soak.md 2026-11-29 18:41): one thread churns a memory pool at 85 %
//! live with files of 4 KiB to 8 MiB (created, overwritten in place, appended to, truncated,
//! deleted, fsynced, the pool synced now and then) until it answers `NoSpace` to many calls in
//! a row, goes on issuing calls there, and then the power goes. The model marks a file durable
//! when an fsync (durable under `every-log`) or a sync of the pool returned `Ok`, and unmarks it
//! only when a call that changes it is acknowledged: a refused call changes nothing.
//!
//! After the cut: fsck of the crashed image is clean, the pool opens, and every file marked
//! durable reads back exactly as it was made durable. The test prints what the model held
//! before the cut (files, durable files, their bytes) and what the recovered pool holds, so a
//! run shows which files the cut may take (changed since they were made durable) and which it
//! kept.
//!
//! Single-threaded with background cleaning off and a stepped clock: a seed's run is the same
//! each time. `STUCK_CUT_SEED`, `STUCK_CUT_POOL_MIB`, `STUCK_CUT_SEGMENT_KIB`, `STUCK_CUT_OPS`
//! vary it.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{data, program_file_size as size, read, Rng};

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{fsck, Barrier, Clock, Config, Error, Fs, OpenFlags, OpenOptions, Ordering};

/// A file the model holds: its bytes are the first `len` of the stream seeded with `seed` (an
/// overwrite writes the bytes the file already holds). `durable`: the length it had when an
/// fsync or a sync returned `Ok`, if no acknowledged call has changed it since.
#[derive(Clone)]
struct File {
    path: String,
    seed: u64,
    len: u64,
    durable: Option<u64>,
}

/// Refusals in a row after which the pool counts as refusing everything.
const STUCK_AFTER: u64 = 200;
/// Calls issued to the refusing pool before the power goes.
const CALLS_WHILE_STUCK: u64 = 1_000;

struct Churn {
    dev: Arc<SimDevice>,
    fs: Fs,
    rng: Rng,
    files: Vec<File>,
    live: u64,
    next: u64,
    ops: u64,
    refused: u64,
    refused_in_a_row: u64,
    /// The op at which the pool first refused `STUCK_AFTER` calls in a row.
    stuck_at: Option<u64>,
    /// Whether an fsync that returns makes its file durable (the barrier policy).
    fsync_durable: bool,
    snapshots: Vec<u64>,
}

impl Churn {
    /// Counts an answer: `Ok`, `NoSpace` (the model is unchanged), or anything else (a failure).
    /// `writes`: a call that needs room, whose `Ok` ends a run of refusals (unlinks and
    /// truncates free room, and a pool refusing every write still takes them).
    fn answer<T>(&mut self, writes: bool, what: &str, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => {
                if writes {
                    self.refused_in_a_row = 0;
                }
                Some(v)
            }
            Err(Error::NoSpace(_)) => {
                self.refused += 1;
                self.refused_in_a_row += 1;
                if self.refused_in_a_row >= STUCK_AFTER && self.stuck_at.is_none() {
                    self.stuck_at = Some(self.ops);
                }
                None
            }
            Err(e) => panic!("op {}: {what}: {e}", self.ops),
        }
    }

    fn create(&mut self, len: u64) {
        self.next += 1;
        let dir = ["/a", "/b", "/b/c"][self.rng.below(3) as usize];
        let path = format!("{dir}/f{}", self.next);
        let seed = self.rng.next();
        let sync = self.rng.below(4) == 0;
        let bytes = data(seed, len as usize);
        let r = self.fs.open_file(&path, OpenFlags::create()).and_then(|f| {
            for (i, piece) in bytes.chunks(1 << 20).enumerate() {
                f.pwrite(piece, (i as u64) << 20)?;
            }
            if sync {
                f.fsync()?;
            }
            Ok(())
        });
        if self.answer(true, &format!("create {path}"), r).is_some() {
            self.live += len;
            let durable = sync.then_some(len);
            self.files.push(File {
                path,
                seed,
                len,
                durable,
            });
        } else {
            // Whatever of it was taken is not the model's: it goes (or stays, refused, and a
            // cut may leave it: the check after the cut looks only at the model's files).
            let r = match self.fs.unlink(&path) {
                Err(Error::NotFound(_)) => Ok(()),
                r => r,
            };
            self.answer(false, &format!("unlink {path}"), r);
        }
    }

    fn delete(&mut self) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let path = self.files[i].path.clone();
        let r = self.fs.unlink(&path);
        if self.answer(false, &format!("unlink {path}"), r).is_some() {
            let f = self.files.swap_remove(i);
            self.live -= f.len;
        }
    }

    /// A random piece of a large file written again with the bytes it holds: the content stays
    /// the same, so a durable file stays durable.
    fn overwrite(&mut self) {
        let mut i = self.rng.below(self.files.len() as u64) as usize;
        for _ in 0..8 {
            let j = self.rng.below(self.files.len() as u64) as usize;
            if self.files[j].len > self.files[i].len {
                i = j;
            }
        }
        let f = self.files[i].clone();
        if f.len == 0 {
            return;
        }
        let at = self.rng.below(f.len) & !4095;
        let n = (f.len - at).min(4096 * (1 + self.rng.below(64)));
        let bytes = data(f.seed, (at + n) as usize);
        let r = self
            .fs
            .open_file(&f.path, OpenFlags::create())
            .and_then(|h| h.pwrite(&bytes[at as usize..], at));
        self.answer(true, &format!("overwrite {}", f.path), r);
    }

    fn append(&mut self, room: u64) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let f = self.files[i].clone();
        let n = (1 + self.rng.below(64 << 10)).min(room.max(1));
        let bytes = data(f.seed, (f.len + n) as usize);
        let r = self
            .fs
            .open_file(&f.path, OpenFlags::create())
            .and_then(|h| h.pwrite(&bytes[f.len as usize..], f.len));
        if self
            .answer(true, &format!("append to {}", f.path), r)
            .is_some()
        {
            self.files[i].len += n;
            self.files[i].durable = None;
            self.live += n;
        }
    }

    fn truncate(&mut self) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let f = self.files[i].clone();
        let len = self.rng.below(f.len + 1);
        let r = self.fs.truncate(&f.path, len);
        if self
            .answer(false, &format!("truncate {}", f.path), r)
            .is_some()
            && len != f.len
        {
            self.files[i].len = len;
            self.files[i].durable = None;
            self.live -= f.len - len;
        }
    }

    fn fsync(&mut self) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let path = self.files[i].path.clone();
        let r = self
            .fs
            .open_file(&path, OpenFlags::create())
            .and_then(|h| h.fsync());
        if self.answer(false, &format!("fsync {path}"), r).is_some() && self.fsync_durable {
            self.files[i].durable = Some(self.files[i].len);
        }
    }

    /// A snapshot, or the oldest dropped when two are held.
    fn snapshot(&mut self) {
        if self.snapshots.len() >= 2 {
            let n = self.snapshots[0];
            let r = self.fs.set_snapshot(n, false);
            if self
                .answer(false, &format!("dropping snapshot {n}"), r)
                .is_some()
            {
                self.snapshots.remove(0);
            }
            return;
        }
        let r = self.fs.snapshot(None);
        if let Some(n) = self.answer(true, "snapshot", r) {
            self.snapshots.push(n);
        }
    }

    fn sync(&mut self) {
        let r = self.fs.sync();
        if self.answer(true, "sync", r).is_some() {
            for f in &mut self.files {
                f.durable = Some(f.len);
            }
        }
    }

    /// One operation, steering the live data to `target` bytes.
    fn step(&mut self, target: u64) {
        self.ops += 1;
        match self.rng.below(1000) {
            0..=3 => return self.sync(),
            4..=7 => return self.snapshot(),
            _ => {}
        }
        let room = target.saturating_sub(self.live);
        if self.files.is_empty() {
            let len = size(&mut self.rng).min(room.max(4096));
            return self.create(len);
        }
        let r = self.rng.below(100);
        if self.live > target {
            match r {
                0..=59 => self.delete(),
                60..=74 => self.truncate(),
                75..=89 => self.overwrite(),
                _ => self.fsync(),
            }
        } else {
            match r {
                0..=29 => {
                    let len = size(&mut self.rng);
                    if len <= room {
                        self.create(len)
                    } else {
                        self.overwrite()
                    }
                }
                30..=39 => self.delete(),
                40..=64 => self.overwrite(),
                65..=74 => self.append(room),
                75..=79 => self.truncate(),
                _ => self.fsync(),
            }
        }
    }
}

/// What the check after the cut found, per file of the model.
#[derive(Debug, Default)]
struct AfterCut {
    /// Files marked durable, and their bytes (model).
    durable: u64,
    durable_bytes: u64,
    /// Of those, read back exactly.
    durable_kept: u64,
    /// Not marked durable: read back as last acknowledged, as they were made durable before (a
    /// change the cut took), missing, or something else.
    other_current: u64,
    other_missing: u64,
    other_else: u64,
    /// The lost ones: path and what was found.
    lost: Vec<String>,
}

fn check_after_cut(fs: &Fs, files: &[File]) -> AfterCut {
    let mut out = AfterCut::default();
    for f in files {
        let got = fs
            .open_file(&f.path, OpenFlags::read_only())
            .map(|_| read(fs, &f.path));
        match (f.durable, got) {
            (Some(len), Ok(bytes)) => {
                out.durable += 1;
                out.durable_bytes += len;
                if bytes == data(f.seed, len as usize) {
                    out.durable_kept += 1;
                } else {
                    out.lost.push(format!(
                        "{}: {} bytes read, {len} made durable",
                        f.path,
                        bytes.len()
                    ));
                }
            }
            (Some(len), Err(e)) => {
                out.durable += 1;
                out.durable_bytes += len;
                out.lost
                    .push(format!("{}: {e}, {len} bytes made durable", f.path));
            }
            (None, Ok(bytes)) if bytes == data(f.seed, f.len as usize) => out.other_current += 1,
            (None, Ok(_)) => out.other_else += 1,
            (None, Err(Error::NotFound(_))) => out.other_missing += 1,
            (None, Err(e)) => panic!("reading {} after the cut: {e}", f.path),
        }
    }
    out
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The model's files at the cut, the crashed device, and how to open it.
struct Cut {
    files: Vec<File>,
    crashed: Arc<SimDevice>,
    opts: OpenOptions,
}

/// Churns a pool (`STUCK_CUT_*`, see the module doc) until it has refused `STUCK_AFTER` writes
/// in a row and `CALLS_WHILE_STUCK` more calls were issued (or `STUCK_CUT_OPS` ran out), then
/// cuts the power; fsck of the crashed image must be clean.
fn churn_and_cut() -> Cut {
    let pool = env("STUCK_CUT_POOL_MIB", 256) << 20;
    let segment = env("STUCK_CUT_SEGMENT_KIB", 1024) << 10;
    let fsync_durable = env("STUCK_CUT_EVERY_LOG", 0) != 0;
    let seed = env("STUCK_CUT_SEED", 1);
    let ops_max = env("STUCK_CUT_OPS", 20_000);
    let dev = Arc::new(SimDevice::new(pool));
    dev.set_writes_are_copies(true);
    let clock = Clock::stepped(1_700_000_000_000_000_000, Duration::from_micros(10));
    let config = Config {
        segment_bytes: segment,
        background_gc: false,
        ordering: Ordering::Relaxed,
        // The soak's first policy: only a sync is durable. Under `every-log` an fsync is too.
        barrier: if fsync_durable {
            Barrier::EveryLog
        } else {
            Barrier::EveryCheckpoint
        },
        clock: clock.clone(),
        ..Config::memory_pool()
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    for d in ["/a", "/b", "/b/c"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    let size = fs.space().unwrap().size;
    let target = size * 85 / 100;
    let mut c = Churn {
        dev,
        fs,
        rng: Rng(seed),
        files: Vec::new(),
        live: 0,
        next: 0,
        ops: 0,
        refused: 0,
        refused_in_a_row: 0,
        stuck_at: None,
        fsync_durable,
        snapshots: Vec::new(),
    };
    while c.ops < ops_max {
        c.step(target);
        if c.stuck_at.is_some_and(|at| c.ops >= at + CALLS_WHILE_STUCK) {
            break;
        }
    }
    let space = c.fs.space().unwrap();
    let durable: Vec<&File> = c.files.iter().filter(|f| f.durable.is_some()).collect();
    eprintln!(
        "seed {seed}: {} ops, {} refused, refusing every write from op {:?}; model: {} files, {} bytes live, {} durable ({} bytes); pool: {space:?}",
        c.ops,
        c.refused,
        c.stuck_at,
        c.files.len(),
        c.live,
        durable.len(),
        durable.iter().map(|f| f.durable.unwrap_or(0)).sum::<u64>()
    );
    c.dev.cut_power_after(0);
    let crashed = Arc::new(c.dev.crash(seed ^ 0x5eed));
    drop(c.fs);
    crashed.set_writes_are_copies(true);
    let report = fsck::check(crashed.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck of the crashed image: {damage:#?}");
    Cut {
        files: c.files,
        crashed,
        opts: OpenOptions {
            clock,
            ..OpenOptions::default()
        },
    }
}

/// Every durable file reads back from the crashed pool, opened read-only: what the cut left,
/// before recovery writes anything.
#[test]
fn a_power_cut_in_a_pool_refusing_every_call_keeps_every_durable_file() {
    let cut = churn_and_cut();
    let fs = Fs::open(
        cut.crashed,
        &OpenOptions {
            read_only: true,
            ..cut.opts
        },
    )
    .expect("opening the pool read-only after the power cut");
    let rec = fs.recovery_report();
    let after = check_after_cut(&fs, &cut.files);
    eprintln!(
        "after the cut: superblock checkpoint {}, checkpoint {}, {} logs rolled forward, {} skipped, stop: {}; pool: {:?}; {after:?}",
        rec.superblock_checkpoint,
        rec.checkpoint,
        rec.logs_rolled_forward,
        rec.logs_skipped,
        rec.stop_reason,
        fs.space()
    );
    assert!(
        after.lost.is_empty(),
        "{} of {} durable files lost: {:#?}",
        after.lost.len(),
        after.durable,
        after.lost
    );
    assert!(
        after.durable > 0,
        "no file was durable at the cut: nothing was checked"
    );
}

/// The crashed pool opens for writing and its durable files read back. The sync after
/// recovery may answer `NoSpace` only as the 90 % rule allows (the cut undid deletes, so the
/// recovered tree can hold more than the pool did), and then dropping the snapshots, which
/// never answers `NoSpace`, lets it through.
#[test]
fn a_pool_refusing_every_call_opens_for_writing_after_a_power_cut() {
    let cut = churn_and_cut();
    let fs = Fs::open(cut.crashed, &cut.opts).expect("opening the pool after the power cut");
    let after = check_after_cut(&fs, &cut.files);
    assert!(after.lost.is_empty(), "{after:#?}");
    match fs.sync() {
        Ok(()) => {}
        Err(e @ Error::NoSpace(_)) => {
            let space = fs.space().unwrap();
            let held = space.live + space.pinned_by_snapshots;
            assert!(
                held * 10 >= space.size * 9,
                "the sync after recovery answered {e} at {:.1} % live + pinned",
                held as f64 * 100.0 / space.size as f64
            );
            let snapshots: Vec<u64> = fs
                .checkpoints()
                .unwrap()
                .iter()
                .filter(|c| c.snapshot)
                .map(|c| c.number)
                .collect();
            assert!(!snapshots.is_empty(), "{e}, and no snapshot to drop");
            for n in snapshots {
                fs.set_snapshot(n, false)
                    .unwrap_or_else(|e| panic!("dropping snapshot {n} after recovery: {e}"));
            }
            fs.sync()
                .expect("the sync after recovery, the snapshots dropped");
        }
        Err(e) => panic!("the sync after recovery: {e}"),
    }
    fs.close().expect("closing the recovered pool");
}
