//! The soak: tbfs written as real programs write, for a long time, near full, with power cuts.
//!
//! Threads, each owning a directory, create, write, append, overwrite, rename, replace (write a
//! new file, fsync it, rename it over an old one), truncate and delete files of mixed sizes
//! ([`SizeMix`]: many small, few large, 4 KiB to 8 MiB), fsync some of them, and now and then
//! sync the pool or take and drop snapshots. They steer the live data to each target fraction of
//! the pool in turn and hold it there: create when below, delete when above.
//!
//! A model ([`soak_model`](super::soak_model)) keeps every file's acknowledged content and what a
//! power cut must leave. The run checks:
//! - no panic, no error other than `NoSpace` (and, after a power cut, the device's);
//! - no spurious `NoSpace`: in a pool of at least [`ENOSPC_RULE_MIN_POOL`], one refused while the
//!   live data plus what snapshots pin plus the writes in flight is below [`ENOSPC_FLOOR`] of the
//!   pool. Each is reported with the pool's space figures at that moment. Above it `NoSpace` is
//!   an answer and the model keeps the file as it was;
//! - every file reads back as acknowledged (one file now and then, all of them after each level);
//! - snapshots read back as the files were when they were taken;
//! - at each power cut (the simulated device loses, keeps or tears every unflushed write), `fsck`
//!   of the crashed image finds no damage but what the cut itself leaves (a summary lost while
//!   a later log that was not flushed either reached the device), it opens, every file made
//!   durable and not changed since reads back (a lost block is named with its address and the
//!   logs that wrote it), nothing deleted durably comes back, and every snapshot is there. A
//!   file not durable may come back as last acknowledged or as last made durable (kept), in
//!   another state (removed), or not at all: each cut counts these apart from lost durable
//!   files, which fail the run ([`CutCheck`]). A refused call changes nothing, so it leaves a
//!   durable file durable. The run then goes on from the recovered pool, under the next ordering and barrier
//!   policy;
//! - at the end, `fsck` of the closed pool is clean.
//!
//! An error that stops the pool (a poisoned pool, say) is a failure; the run then reopens the
//! pool from what the device holds, with the same checks as after a power cut, and goes on, so a
//! long run counts every failure, not only the first.
//!
//! What a power cut must keep (docs/FORMAT.md, barriers): `Fs::sync` makes everything durable; an
//! fsync does under `every-log`, and under `every-checkpoint` with strict ordering (a checkpoint,
//! flushed); in relaxed ordering under `every-checkpoint` it may be a data-only log that is not.
//!
//! One seed gives each thread the same choices; threads interleave as the machine runs them, so a
//! failure names the seed, the level and the operation, and a rerun with the seed usually, not
//! always, meets it again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtOrd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use super::soak_model::{fill, Content, FileModel, Mismatch, SizeMix, WriteLog};
use crate::report::Table;
use crate::rng::SplitMix64;
use tailbound::dev::sim::SimDevice;
use tailbound::dev::Device;
use tailbound::tbfs::fsck::{self, Verdict};
use tailbound::tbfs::{Barrier, Config, Error, Fs, OpenFlags, OpenOptions, Ordering};

/// A `NoSpace` below this fraction of the pool (live + pinned + in flight) is spurious.
pub const ENOSPC_FLOOR: f64 = 0.90;
/// ... in pools of at least this size (the capacity target).
pub const ENOSPC_RULE_MIN_POOL: u64 = 256 << 20;
/// Largest single write; larger files are written in chunks, as programs copy.
const CHUNK: u64 = 1 << 20;
/// Detailed records kept of each kind of failure (all are counted).
const DETAILS_MAX: usize = 25;
/// Snapshots held at once, at most.
const SNAPSHOTS_MAX: usize = 2;
/// Files a snapshot's check reads back.
const SNAPSHOT_SAMPLE: usize = 6;
/// Paths deleted durably that a power cut's check looks for, per thread, at most.
const GONE_MAX: usize = 4096;
/// Failures that stop the pool after which the run reopens it and goes on, at most.
const REOPENS_MAX: u32 = 10;
/// Writes the device takes after a power cut is armed, at most.
const CUT_WRITES_MAX: u64 = 48;

/// How long each level is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Operations per thread once the level is reached: the same work on any machine.
    Ops(u64),
    /// Wall time each level is held, counted from when it is first reached.
    Time(Duration),
}

/// The soak's settings.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub pool_bytes: u64,
    /// Fractions of the pool the live data is held at, in turn.
    pub levels: Vec<f64>,
    pub budget: Budget,
    pub threads: usize,
    /// Power cuts over the whole run, spread over the levels at random points.
    pub power_cuts: u32,
    pub seed: u64,
    pub mix: SizeMix,
    /// Run the engine's background cleaner (the default, as programs get it); off, writers
    /// clean when they need room.
    pub background_gc: bool,
    /// The pool's segment size; `None`: what `mkfs` picks for the pool's size
    /// ([`fsck::default_segment_bytes`]).
    pub segment_bytes: Option<u64>,
}

impl SoakConfig {
    pub fn new(pool_bytes: u64, levels: Vec<f64>, budget: Budget) -> SoakConfig {
        SoakConfig {
            pool_bytes,
            levels,
            budget,
            threads: 4,
            power_cuts: 3,
            seed: 0x50a4,
            mix: SizeMix::default(),
            background_gc: true,
            segment_bytes: None,
        }
    }

    /// The segment size the pool is formatted with.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
            .unwrap_or_else(|| fsck::default_segment_bytes(self.pool_bytes))
    }
}

/// Operation kinds, as the report counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Overwrite,
    Append,
    Truncate,
    Rename,
    Replace,
    Delete,
    Fsync,
    Read,
    Sync,
    Snapshot,
    SnapshotDrop,
}

const OPS: [Op; 12] = [
    Op::Create,
    Op::Overwrite,
    Op::Append,
    Op::Truncate,
    Op::Rename,
    Op::Replace,
    Op::Delete,
    Op::Fsync,
    Op::Read,
    Op::Sync,
    Op::Snapshot,
    Op::SnapshotDrop,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Overwrite => "overwrite",
            Op::Append => "append",
            Op::Truncate => "truncate",
            Op::Rename => "rename",
            Op::Replace => "replace",
            Op::Delete => "delete",
            Op::Fsync => "fsync",
            Op::Read => "read-check",
            Op::Sync => "sync",
            Op::Snapshot => "snapshot",
            Op::SnapshotDrop => "snapshot-drop",
        }
    }
}

/// One refused operation, with the pool's figures when it was refused.
#[derive(Debug, Clone, Serialize)]
pub struct EnospcEvent {
    pub level: f64,
    pub op: &'static str,
    pub path: String,
    pub error: String,
    /// Bytes the model holds live, writes in flight (this one included), and what snapshots pin.
    pub live: u64,
    pub in_flight: u64,
    pub pinned: u64,
    /// (live + in flight + pinned) / pool.
    pub fraction: f64,
    /// `Fs::space` and `statvfs` at that moment.
    pub df: String,
}

/// One level's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    pub level: f64,
    /// Whether the live data reached the level (within one file of the largest size), at some
    /// point: a power cut late in the level may leave it below at the end.
    pub reached: bool,
    pub ops: Vec<(String, u64)>,
    pub bytes_written: u64,
    pub enospc: u64,
    pub enospc_spurious: u64,
    /// Live data at the level's end, as a fraction of the pool, and the pool's figures.
    pub live_fraction_end: f64,
    pub df_end: String,
    pub seconds: f64,
}

/// What a soak run found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Always `soak`.
    pub experiment: &'static str,
    pub seed: u64,
    pub pool_bytes: u64,
    pub segment_bytes: u64,
    pub threads: usize,
    pub levels: Vec<LevelReport>,
    pub enospc: u64,
    pub enospc_spurious: u64,
    /// The first spurious refusals, in detail.
    pub spurious: Vec<EnospcEvent>,
    /// Files read back and compared (whole), snapshot files compared, durable files checked
    /// after power cuts (and reopens), full checks of every file, fsck runs.
    pub files_checked: u64,
    pub snapshot_files_checked: u64,
    pub durable_files_checked: u64,
    /// The checks after power cuts and reopens, summed: durable files lost (each also a
    /// failure), and what the cuts took or left of changes not made durable.
    pub after_cuts: CutCheck,
    pub full_checks: u64,
    pub fsck_runs: u64,
    pub power_cuts_planned: u32,
    pub power_cuts_survived: u32,
    /// Times a failure stopped the pool and the run reopened it.
    pub reopens: u32,
    /// The final fsck's verdict (`clean`, `damaged`, ... or why it did not run).
    pub fsck_final: String,
    /// Everything else that went wrong (first `DETAILS_MAX` of each check), in order.
    pub failures: Vec<String>,
    pub failures_total: u64,
    pub seconds: f64,
    /// [`SoakReport::passed`], for readers of the JSON.
    pub passed: bool,
}

impl SoakReport {
    /// No failed check: no panic or error, no spurious `NoSpace`, nothing lost, fsck clean.
    pub fn passed(&self) -> bool {
        self.failures_total == 0
            && self.after_cuts.durable_lost == 0
            && self.enospc_spurious == 0
            && self.fsck_final == "clean"
            && self.power_cuts_survived == self.power_cuts_planned
            && self.levels.iter().all(|l| l.reached)
    }

    /// The summary: per level, and the checks.
    pub fn to_markdown(&self) -> String {
        let mut headers = vec!["live target".to_string(), "reached".into()];
        headers.extend(OPS.iter().map(|o| o.name().to_string()));
        headers.extend(
            [
                "MiB written",
                "ENOSPC",
                "spurious",
                "live at end",
                "seconds",
            ]
            .map(String::from),
        );
        let mut t = Table::new(headers);
        for c in 2..t.headers().len() {
            t.set_align(c, crate::report::Align::Right);
        }
        for l in &self.levels {
            let mut row = vec![format!("{:.0} %", l.level * 100.0), yes(l.reached)];
            row.extend(l.ops.iter().map(|(_, n)| n.to_string()));
            row.push(format!("{:.0}", l.bytes_written as f64 / (1 << 20) as f64));
            row.push(l.enospc.to_string());
            row.push(l.enospc_spurious.to_string());
            row.push(format!("{:.1} %", l.live_fraction_end * 100.0));
            row.push(format!("{:.1}", l.seconds));
            t.push(row);
        }
        let mut out = t.to_markdown();
        out.push('\n');
        let mut c = Table::new(vec!["check".into(), "result".into()]);
        let rows: Vec<(&str, String)> = vec![
            ("seed", format!("{:#x}", self.seed)),
            (
                "pool",
                format!(
                    "{} MiB in {} KiB segments, {} threads",
                    self.pool_bytes >> 20,
                    self.segment_bytes >> 10,
                    self.threads
                ),
            ),
            (
                "ENOSPC (total / spurious)",
                format!("{} / {}", self.enospc, self.enospc_spurious),
            ),
            ("files read back whole", self.files_checked.to_string()),
            (
                "snapshot files read back",
                self.snapshot_files_checked.to_string(),
            ),
            (
                "durable files checked after power cuts",
                format!(
                    "{} ({:.1} MiB)",
                    self.durable_files_checked,
                    mib(self.after_cuts.durable_bytes)
                ),
            ),
            (
                "durable files lost (acknowledged data)",
                format!(
                    "{} ({:.1} MiB)",
                    self.after_cuts.durable_lost,
                    mib(self.after_cuts.durable_lost_bytes)
                ),
            ),
            (
                "not durable after power cuts: kept / rolled back / removed / absent",
                format!(
                    "{} / {} / {} ({:.1} MiB) / {} ({:.1} MiB)",
                    self.after_cuts.acknowledged_kept,
                    self.after_cuts.rolled_back,
                    self.after_cuts.removed,
                    mib(self.after_cuts.removed_bytes),
                    self.after_cuts.absent,
                    mib(self.after_cuts.absent_bytes)
                ),
            ),
            ("full checks of every file", self.full_checks.to_string()),
            ("fsck runs", self.fsck_runs.to_string()),
            (
                "power cuts survived",
                format!(
                    "{} of {}",
                    self.power_cuts_survived, self.power_cuts_planned
                ),
            ),
            ("pool reopened after a failure", self.reopens.to_string()),
            ("final fsck", self.fsck_final.clone()),
            ("other failures", self.failures_total.to_string()),
            (
                "verdict",
                if self.passed() {
                    "PASS".into()
                } else {
                    "FAIL".into()
                },
            ),
        ];
        for (k, v) in rows {
            c.push(vec![k.to_string(), v]);
        }
        out.push_str(&c.to_markdown());
        for e in &self.spurious {
            out.push_str(&format!(
                "\nspurious ENOSPC at {:.0} %: {} {} ({:.1} % of the pool live + in flight + pinned: live {} MiB, in flight {} KiB, pinned {} MiB): {}\n  df: {}\n",
                e.level * 100.0,
                e.op,
                e.path,
                e.fraction * 100.0,
                e.live >> 20,
                e.in_flight >> 10,
                e.pinned >> 20,
                e.error,
                e.df
            ));
        }
        for f in &self.failures {
            out.push_str(&format!("\nFAILED: {f}\n"));
        }
        out
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// The ordering and barrier policies the run goes through, one per power-cut epoch.
const POLICIES: [(Ordering, Barrier); 3] = [
    (Ordering::Relaxed, Barrier::EveryCheckpoint),
    (Ordering::Strict, Barrier::EveryCheckpoint),
    (Ordering::Relaxed, Barrier::EveryLog),
];

/// Whether a successful fsync is durable across a power cut under this policy (docs/FORMAT.md).
fn fsync_is_durable(ordering: Ordering, barrier: Barrier) -> bool {
    match barrier {
        Barrier::EveryLog => true,
        Barrier::EveryCheckpoint => ordering == Ordering::Strict,
        Barrier::Superblock => false,
    }
}

/// One thread's files and choices; kept across power cuts.
#[derive(Debug)]
struct ThreadModel {
    id: usize,
    rng: SplitMix64,
    files: Vec<FileModel>,
    next_name: u64,
    next_stamp: u64,
    /// Paths unlinked or renamed away since the last `Fs::sync`, and those deleted before one
    /// (a power cut must not bring them back).
    gone: Vec<String>,
    gone_durable: VecDeque<String>,
    /// Operations done in the current level after it was reached, and before.
    hold_ops: u64,
    reach_ops: u64,
}

impl ThreadModel {
    /// Thread `id`'s model, its choices drawn from `seed`.
    fn new(id: usize, seed: u64) -> ThreadModel {
        ThreadModel {
            id,
            rng: SplitMix64::new(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9)),
            files: Vec::new(),
            next_name: 0,
            next_stamp: 0,
            gone: Vec::new(),
            gone_durable: VecDeque::new(),
            hold_ops: 0,
            reach_ops: 0,
        }
    }

    fn dir(&self) -> String {
        format!("/t{}", self.id)
    }

    fn new_path(&mut self) -> String {
        self.next_name += 1;
        let sub = if self.rng.below(3) == 0 { "/sub" } else { "" };
        format!("/t{}{sub}/f{}", self.id, self.next_name)
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        ((self.id as u64 + 1) << 40) | self.next_stamp
    }
}

/// A snapshot the run holds, and some files as they were when it was taken.
#[derive(Debug, Clone)]
struct SnapRecord {
    number: u64,
    sample: Vec<(String, Content)>,
    /// Acknowledged (taken, or a drop refused): a power cut must keep it. A drop cut short by
    /// the power may go either way.
    sure: bool,
}

/// The snapshots the run holds, and those it dropped since the last power cut.
#[derive(Debug, Default)]
struct Snaps {
    held: Vec<SnapRecord>,
    dropped: Vec<u64>,
}

/// Counters and failure records the threads share.
#[derive(Debug, Default)]
struct Tally {
    ops: [AtomicU64; OPS.len()],
    bytes: AtomicU64,
    enospc: AtomicU64,
    spurious: AtomicU64,
    files_checked: AtomicU64,
    snapshot_files_checked: AtomicU64,
    full_checks: AtomicU64,
    fsck_runs: AtomicU64,
    /// A write was refused for room: the next thread to finish an operation drops a snapshot.
    full: AtomicBool,
}

/// One epoch's shared state: the pool and device between two power cuts.
struct Ctx<'a> {
    cfg: &'a SoakConfig,
    fs: Fs,
    dev: Arc<SimDevice>,
    policy: (Ordering, Barrier),
    level: f64,
    target: u64,
    /// Live data counted as reached (target minus the largest file).
    reach_at: u64,
    level_start: Instant,
    /// When the level was first reached (a time budget counts from there).
    held_from: &'a Mutex<Option<Instant>>,
    /// Points of the level (fractions of its budget) where thread 0 cuts the power.
    cuts: &'a Mutex<VecDeque<f64>>,
    armed: &'a AtomicBool,
    stop: &'a AtomicBool,
    /// An error stopped the pool (or the model): the epoch ends and the pool is reopened.
    reopen: &'a AtomicBool,
    reached: &'a AtomicBool,
    live: &'a AtomicU64,
    in_flight: &'a AtomicU64,
    world: &'a RwLock<()>,
    models: &'a [Mutex<ThreadModel>],
    snaps: &'a Mutex<Snaps>,
    writes: &'a Mutex<WriteLog>,
    tally: &'a Tally,
    failures: &'a Mutex<Failures>,
    spurious: &'a Mutex<Vec<EnospcEvent>>,
    log: &'a (dyn Fn(&str) + Sync),
}

#[derive(Debug, Default)]
struct Failures {
    list: Vec<String>,
    total: u64,
}

impl Failures {
    fn push(&mut self, msg: String) {
        self.total += 1;
        if self.list.len() < DETAILS_MAX * 4 {
            self.list.push(msg);
        }
    }
}

/// How an operation failed.
enum Fail {
    NoSpace(Error),
    Other(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e {
            Error::NoSpace(_) => Fail::NoSpace(e),
            e => Fail::Other(e),
        }
    }
}

fn df(fs: &Fs) -> String {
    let sp = match fs.space() {
        Ok(sp) => format!(
            "size {} MiB, live {:.1} MiB, pinned by snapshots {:.1} MiB, reclaimable {:.1} MiB, free {:.1} MiB",
            sp.size >> 20,
            mib(sp.live),
            mib(sp.pinned_by_snapshots),
            mib(sp.reclaimable),
            mib(sp.free)
        ),
        Err(e) => format!("space: {e}"),
    };
    match fs.statvfs() {
        Ok(v) => format!(
            "{sp}; statvfs {:.1} MiB free of {:.1} MiB",
            mib(v.blocks_free * v.block_size),
            mib(v.blocks * v.block_size)
        ),
        Err(e) => format!("{sp}; statvfs: {e}"),
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Reads a whole file.
fn read_all(fs: &Fs, path: &str, limit: u64) -> tailbound::tbfs::Result<Vec<u8>> {
    let f = fs.open_file(path, OpenFlags::read_only())?;
    let size = f.stat()?.size;
    if size > limit {
        return Err(Error::Invalid(format!(
            "{path}: size {size} is larger than the pool"
        )));
    }
    let mut buf = vec![0u8; size as usize];
    let mut at = 0usize;
    while at < buf.len() {
        let n = f.pread(&mut buf[at..], at as u64)?;
        if n == 0 {
            buf.truncate(at);
            break;
        }
        at += n;
    }
    Ok(buf)
}

fn write_flags() -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        ..OpenFlags::default()
    }
}

/// The bytes of a write of `stamp`, `len` long at `off`.
fn data(stamp: u64, off: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    fill(stamp, off, &mut buf);
    buf
}

impl Ctx<'_> {
    fn fail(&self, msg: String) {
        (self.log)(&format!("FAILED: {msg}"));
        self.failures.lock().push(msg);
    }

    fn where_(&self, op: Op, path: &str) -> String {
        format!(
            "seed {:#x}, level {:.0} %, {:?}/{:?}, {} {path}",
            self.cfg.seed,
            self.level * 100.0,
            self.policy.0,
            self.policy.1,
            op.name()
        )
    }

    /// A failed operation: `NoSpace` is judged against the 90 % rule; other errors are expected
    /// only once the power is cut, and stop the run otherwise.
    fn failed(&self, op: Op, path: &str, write_len: u64, f: Fail) {
        match f {
            Fail::NoSpace(e) => {
                self.tally.enospc.fetch_add(1, AtOrd::Relaxed);
                self.tally.full.store(true, AtOrd::Release);
                let live = self.live.load(AtOrd::Relaxed);
                // Other threads' writes now, and this one (its hold ended with the call).
                let in_flight = self.in_flight.load(AtOrd::Relaxed) + write_len;
                // Unknown when the pool has stopped: then it is no judge of capacity.
                let pinned = self.fs.space().map(|s| s.pinned_by_snapshots);
                let pool = self.cfg.pool_bytes;
                let fraction =
                    (live + in_flight + *pinned.as_ref().unwrap_or(&0)) as f64 / pool as f64;
                // A truncate that extends passes its new bytes as `write_len`: it may need room.
                let frees = op == Op::Delete
                    || op == Op::SnapshotDrop
                    || (op == Op::Truncate && write_len == 0);
                if frees {
                    self.fail(format!(
                        "{}: NoSpace on a call that frees space: {e}; {}",
                        self.where_(op, path),
                        df(&self.fs)
                    ));
                } else if pool >= ENOSPC_RULE_MIN_POOL && fraction < ENOSPC_FLOOR && pinned.is_ok()
                {
                    let pinned = *pinned.as_ref().unwrap_or(&0);
                    self.tally.spurious.fetch_add(1, AtOrd::Relaxed);
                    let ev = EnospcEvent {
                        level: self.level,
                        op: op.name(),
                        path: path.to_string(),
                        error: e.to_string(),
                        live,
                        in_flight,
                        pinned,
                        fraction,
                        df: df(&self.fs),
                    };
                    let mut sp = self.spurious.lock();
                    if sp.len() < DETAILS_MAX {
                        (self.log)(&format!(
                            "spurious ENOSPC ({}): {:.1} % of the pool in use; {}; df: {}",
                            self.where_(op, path),
                            fraction * 100.0,
                            ev.error,
                            ev.df
                        ));
                        sp.push(ev);
                    }
                }
            }
            Fail::Other(e) => {
                let expected = self.armed.load(AtOrd::Acquire)
                    && matches!(e, Error::Io { .. } | Error::Poisoned(_));
                // Once one failure has stopped the pool, the others' `Poisoned` is its echo.
                let echo = matches!(e, Error::Poisoned(_)) && self.reopen.load(AtOrd::Acquire);
                if !expected && !echo {
                    self.fail(format!("{}: {e}; {}", self.where_(op, path), df(&self.fs)));
                    self.reopen.store(true, AtOrd::Release);
                }
                self.stop.store(true, AtOrd::Release);
            }
        }
    }

    fn count(&self, op: Op) {
        self.tally.ops[op as usize].fetch_add(1, AtOrd::Relaxed);
    }

    /// Live data plus what is in flight, against the target: positive when above it.
    fn pressure(&self) -> i64 {
        (self.live.load(AtOrd::Relaxed) + self.in_flight.load(AtOrd::Relaxed)) as i64
            - self.target as i64
    }
}

/// A mismatch's detail, and whose bytes were read instead.
fn explain(writes: &Mutex<WriteLog>, got: &[u8], bad: &Mismatch) -> String {
    let at = bad.offset as usize;
    if at < got.len() {
        format!(
            "{}; {}",
            bad.detail,
            writes.lock().whose(&got[at..], bad.offset)
        )
    } else {
        bad.detail.clone()
    }
}

/// Holds `n` bytes as in flight while alive.
struct InFlight<'a>(&'a AtomicU64, u64);

impl<'a> InFlight<'a> {
    fn new(c: &'a AtomicU64, n: u64) -> InFlight<'a> {
        c.fetch_add(n, AtOrd::AcqRel);
        InFlight(c, n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, AtOrd::AcqRel);
    }
}

#[path = "soak_cut.rs"]
mod cut_check;
#[path = "soak_ops.rs"]
mod ops;
pub use cut_check::CutCheck;
#[path = "soak_run.rs"]
mod run_loop;
#[path = "soak_trace.rs"]
mod trace;

/// Runs the soak. `log` gets one line per event (level reached, power cut, failure).
///
/// An error is the format's refusal of the pool `cfg` asks for (a segment size it does not
/// take, say): no run. Everything that goes wrong after is in the report.
pub fn run(cfg: &SoakConfig, log: &(dyn Fn(&str) + Sync)) -> Result<SoakReport, Error> {
    run_loop::run(cfg, log)
}
