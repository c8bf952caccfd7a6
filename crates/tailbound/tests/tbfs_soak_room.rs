//! The soak's room, on one thread (issue 38, item 5): a memory pool churned at 85 % live with
//! files of 4 KiB to 8 MiB (created, overwritten in place, appended to, truncated, deleted),
//! snapshots taken and dropped, syncs, and a simulated power cut and reopen, with only writers
//! cleaning. The pool may answer `NoSpace` only once live data and what snapshots pin reach
//! 90 % of it; a snapshot drop never answers it, nor does a delete or a truncate with no
//! snapshot held (under one they free nothing, and answer it as a write does, only at 90 %,
//! when the checkpoint that pays earlier deletes' debt finds no room), nor the sync after
//! recovery; the pool closes, fsck finds it clean, and it reopens.
//!
//! The long run is ignored: it takes minutes in release; it is the single-threaded
//! reproduction of the soak's spurious `NoSpace` (docs/results/soak.md, 2026-11-29 17:45).
//! `SOAK_ROOM_SEED`, `SOAK_ROOM_OPS`, `SOAK_ROOM_POOL_MIB` and `SOAK_ROOM_SEGMENT_KIB` vary the
//! run. The quick tests below make the snapshot drop seed 7 saw refused, the close seeds 2
//! and 5 saw refused (deletes under a snapshot adding to a debt no checkpoint could pay), and
//! the writes under a
//! snapshot seed 4 saw refused while the cleaner's checkpoint kept the whole pinned table's
//! room (docs/results/soak.md). Seed 4 of the long run had writes refused at 89.5 % live +
//! pinned under one snapshot while the deletes' charge was paid at the whole allowance; paid
//! at half it passed its one run (docs/results/soak.md, 2026-11-30 08:20). The cleaner
//! picks victims by their ages where ages tell segments apart, and ages come from the clock,
//! so a seed's run is not bit-for-bit the same each time (a test clock for victim ages is
//! issue 38's other branch).

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{data, program_file_size as size, read, Rng};

use tailbound::dev::sim::SimDevice;
use tailbound::tbfs::{
    fsck, Clock, Config, Error, FileKind, Fs, OpenFlags, OpenOptions, SpaceReport,
};

/// A file the model holds: its path, the stream its bytes come from, and its length (an
/// overwrite writes the bytes the file already holds, so the content is always a prefix of
/// the stream).
#[derive(Clone)]
struct File {
    path: String,
    seed: u64,
    len: u64,
}

struct Soak {
    dev: Arc<SimDevice>,
    fs: Fs,
    pool: u64,
    rng: Rng,
    files: Vec<File>,
    live: u64,
    next: u64,
    snapshots: Vec<u64>,
    refused: u64,
    /// Operations so far.
    ops: u64,
    /// What went wrong, as it happened: spurious `NoSpace` and failed calls.
    failures: Vec<String>,
}

impl Soak {
    /// Whether the pool holds a snapshot (asked of the pool, not the model).
    fn snapshot_held(&self) -> bool {
        self.fs
            .checkpoints()
            .is_ok_and(|c| c.iter().any(|c| c.snapshot))
    }

    fn pinned(&self) -> u64 {
        self.fs.space().map_or(0, |s| s.pinned_by_snapshots)
    }

    /// A `NoSpace` answer to a call that would write `len` more bytes of files: allowed only
    /// at 90 % of the pool live and pinned (and never for calls that free space).
    /// Drops every snapshot the model holds (a drop is never refused), after a power cut's
    /// recovery found the pool full under them.
    fn drop_snapshots_after_the_cut(&mut self) {
        for n in std::mem::take(&mut self.snapshots) {
            if let Err(e) = self.fs.set_snapshot(n, false) {
                self.failures
                    .push(format!("dropping snapshot {n} after the cut: {e}"));
            }
        }
    }

    fn no_space(&mut self, what: &str, len: u64, frees: bool, e: &Error) {
        self.refused += 1;
        let used = self.live + len + self.pinned();
        if frees || used * 10 < self.pool * 9 {
            let s = self.fs.space().unwrap();
            self.failures.push(format!(
                "op {}: {what}: {e} at {:.1} % live + pinned ({} live, {} pinned, {} free, {} reclaimable of {})",
                self.ops,
                used as f64 * 100.0 / self.pool as f64,
                self.live,
                s.pinned_by_snapshots,
                s.free,
                s.reclaimable,
                self.pool
            ));
        }
    }

    fn write_new(&mut self, len: u64) {
        self.next += 1;
        let dir = ["/a", "/b", "/b/c"][self.rng.below(3) as usize];
        let path = format!("{dir}/f{}", self.next);
        let seed = self.rng.next();
        let bytes = data(seed, len as usize);
        let r = self.fs.open_file(&path, OpenFlags::create()).and_then(|f| {
            for (i, piece) in bytes.chunks(1 << 20).enumerate() {
                f.pwrite(piece, (i as u64) << 20)?;
            }
            if self.rng.below(4) == 0 {
                f.fsync()?;
            }
            Ok(())
        });
        match r {
            Ok(()) => {
                self.live += len;
                self.files.push(File { path, seed, len });
            }
            Err(e @ Error::NoSpace(_)) => {
                self.no_space(&format!("create {path} ({len} bytes)"), len, false, &e);
                // Whatever of it was taken is not the model's: it goes.
                if let Err(e) = self.fs.unlink(&path) {
                    if !matches!(e, Error::NotFound(_)) {
                        self.failures.push(format!("unlink refused {path}: {e}"));
                    }
                }
            }
            Err(e) => panic!("create {path}: {e}"),
        }
    }

    fn delete(&mut self) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let f = self.files.swap_remove(i);
        match self.fs.unlink(&f.path) {
            Ok(()) => self.live -= f.len,
            Err(e @ Error::NoSpace(_)) => {
                // Under a snapshot a delete frees nothing, and may be refused as a write is
                // (at 90 % live + pinned) when the checkpoint paying earlier deletes' debt
                // finds no room; with none held it frees, and is never refused.
                let frees = !self.snapshot_held();
                self.no_space(&format!("unlink {}", f.path), 0, frees, &e);
                self.files.push(f);
            }
            Err(e) => panic!("unlink {}: {e}", f.path),
        }
    }

    /// A random piece of a large file written again with the bytes it holds.
    fn overwrite(&mut self) {
        let mut i = self.rng.below(self.files.len() as u64) as usize;
        for _ in 0..8 {
            let j = self.rng.below(self.files.len() as u64) as usize;
            if self.files[j].len > self.files[i].len {
                i = j;
            }
        }
        let f = self.files[i].clone();
        let at = self.rng.below(f.len) & !4095;
        let n = (f.len - at).min(4096 * (1 + self.rng.below(64)));
        let bytes = data(f.seed, (at + n) as usize);
        let r = self
            .fs
            .open_file(&f.path, OpenFlags::create())
            .and_then(|h| h.pwrite(&bytes[at as usize..], at).map(|_| ()));
        match r {
            Ok(()) => {}
            Err(e @ Error::NoSpace(_)) => {
                self.no_space(&format!("overwrite {} at {at}", f.path), n, false, &e)
            }
            Err(e) => panic!("overwrite {}: {e}", f.path),
        }
    }

    fn append(&mut self, room: u64) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let f = self.files[i].clone();
        let n = (1 + self.rng.below(64 << 10)).min(room.max(1));
        let bytes = data(f.seed, (f.len + n) as usize);
        let r = self
            .fs
            .open_file(&f.path, OpenFlags::create())
            .and_then(|h| h.pwrite(&bytes[f.len as usize..], f.len).map(|_| ()));
        match r {
            Ok(()) => {
                self.files[i].len += n;
                self.live += n;
            }
            Err(e @ Error::NoSpace(_)) => {
                self.no_space(&format!("append to {}", f.path), n, false, &e)
            }
            Err(e) => panic!("append to {}: {e}", f.path),
        }
    }

    fn truncate(&mut self) {
        let i = self.rng.below(self.files.len() as u64) as usize;
        let f = self.files[i].clone();
        let len = self.rng.below(f.len + 1);
        match self.fs.truncate(&f.path, len) {
            Ok(()) => {
                self.files[i].len = len;
                self.live -= f.len - len;
            }
            Err(e @ Error::NoSpace(_)) => {
                // As a delete: refused only under a snapshot, at 90 % live + pinned.
                let frees = !self.snapshot_held();
                self.no_space(&format!("truncate {}", f.path), 0, frees, &e)
            }
            Err(e) => panic!("truncate {}: {e}", f.path),
        }
    }

    fn sync(&mut self) {
        if let Err(e) = self.fs.sync() {
            match e {
                Error::NoSpace(_) => self.no_space("sync", 0, false, &e),
                e => panic!("sync: {e}"),
            }
        }
    }

    fn snapshot(&mut self) {
        if self.snapshots.len() >= 2 {
            return self.drop_snapshot();
        }
        match self.fs.snapshot(None) {
            Ok(n) => self.snapshots.push(n),
            Err(e @ Error::NoSpace(_)) => self.no_space("snapshot", 0, false, &e),
            Err(e) => panic!("snapshot: {e}"),
        }
    }

    fn drop_snapshot(&mut self) {
        if self.snapshots.is_empty() {
            return;
        }
        let n = self.snapshots.remove(0);
        if let Err(e) = self.fs.set_snapshot(n, false) {
            match e {
                Error::NoSpace(_) => {
                    self.no_space(&format!("dropping snapshot {n}"), 0, true, &e);
                    self.snapshots.insert(0, n);
                }
                e => self.failures.push(format!("dropping snapshot {n}: {e}")),
            }
        }
    }

    /// One operation, steering the live data to `target` bytes.
    fn step(&mut self, target: u64) {
        self.ops += 1;
        match self.rng.below(1000) {
            0..=3 => return self.sync(),
            4..=5 => return self.snapshot(),
            6..=7 => return self.drop_snapshot(),
            _ => {}
        }
        let room = target.saturating_sub(self.live);
        let r = self.rng.below(100);
        if self.files.is_empty() {
            let len = size(&mut self.rng).min(room.max(4096));
            return self.write_new(len);
        }
        if self.live > target {
            match r {
                0..=69 => self.delete(),
                70..=84 => self.truncate(),
                _ => self.overwrite(),
            }
        } else {
            match r {
                0..=29 => {
                    let len = size(&mut self.rng);
                    if len <= room {
                        self.write_new(len)
                    } else {
                        self.overwrite()
                    }
                }
                30..=39 => self.delete(),
                40..=69 => self.overwrite(),
                70..=79 => self.append(room),
                80..=84 => self.truncate(),
                _ => {
                    let i = self.rng.below(self.files.len() as u64) as usize;
                    let f = self.files[i].clone();
                    assert!(
                        read(&self.fs, &f.path) == data(f.seed, f.len as usize),
                        "{} differs",
                        f.path
                    );
                }
            }
        }
    }

    /// The power goes out: the pool is opened again from what the device kept. The model
    /// keeps the files that came back whole (a sync before the cut made all of them durable,
    /// and the writes since may or may not have reached the device).
    fn power_cut(self, crash_seed: u64) -> Soak {
        let Soak {
            dev,
            fs,
            pool,
            rng,
            files,
            next,
            refused,
            ops,
            failures,
            ..
        } = self;
        dev.cut_power_after(0);
        let crashed = Arc::new(dev.crash(crash_seed));
        drop(fs);
        crashed.set_writes_are_copies(true);
        let report = fsck::check(crashed.as_ref()).unwrap();
        let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
        assert!(damage.is_empty(), "fsck after the cut: {damage:#?}");
        let fs = Fs::open(crashed.clone(), &OpenOptions::default())
            .unwrap_or_else(|e| panic!("opening the pool after the power cut: {e}"));
        let mut soak = Soak {
            dev: crashed,
            fs,
            pool,
            rng,
            files: Vec::new(),
            live: 0,
            next,
            snapshots: Vec::new(),
            refused,
            ops,
            failures,
        };
        soak.snapshots = soak
            .fs
            .checkpoints()
            .unwrap()
            .iter()
            .filter(|c| c.snapshot)
            .map(|c| c.number)
            .collect();
        let mut refused_unlinks = Vec::new();
        for f in files {
            let whole = soak
                .fs
                .open_file(&f.path, OpenFlags::read_only())
                .is_ok_and(|h| h.stat().is_ok_and(|s| s.size == f.len))
                && read(&soak.fs, &f.path) == data(f.seed, f.len as usize);
            if whole {
                soak.live += f.len;
                soak.files.push(f);
            } else {
                match soak.fs.unlink(&f.path) {
                    Ok(()) | Err(Error::NotFound(_)) => {}
                    Err(Error::NoSpace(_)) => refused_unlinks.push(f.path),
                    Err(e) => soak
                        .failures
                        .push(format!("unlink {} after the cut: {e}", f.path)),
                }
            }
        }
        // The cut may have undone deletes: files the model removed are back in the tree, live
        // data the model does not count. They go too, so the 90 % rule is judged on what the
        // pool holds.
        let known: std::collections::HashSet<String> =
            soak.files.iter().map(|f| f.path.clone()).collect();
        for dir in ["/a", "/b", "/b/c"] {
            for e in soak.fs.readdir(dir).unwrap() {
                let path = format!("{dir}/{}", e.name);
                if e.kind == FileKind::File && !known.contains(&path) {
                    match soak.fs.unlink(&path) {
                        Ok(()) => {}
                        Err(Error::NoSpace(_)) => refused_unlinks.push(path),
                        Err(e) => soak
                            .failures
                            .push(format!("unlink {path} after the cut: {e}")),
                    }
                }
            }
        }
        // A delete under a snapshot may be refused only in a pool full by the 90 % rule, as the
        // pool itself counts it (the cut brought back files the model does not count); dropping
        // the snapshots, which is never refused, then lets it through.
        if !refused_unlinks.is_empty() {
            let s = soak.fs.space().unwrap();
            if !full_by_rule(&s) || soak.snapshots.is_empty() {
                soak.failures.push(format!(
                    "{} unlinks after the cut refused below the 90 % rule or with no snapshot: {s:?}",
                    refused_unlinks.len()
                ));
            }
            soak.drop_snapshots_after_the_cut();
            for path in refused_unlinks {
                if let Err(e) = soak.fs.unlink(&path) {
                    soak.failures.push(format!(
                        "unlink {path} after the cut, the snapshots dropped: {e}"
                    ));
                }
            }
        }
        // Nothing new is written beyond the deletes, but the cut may have undone deletes that
        // the snapshots now pin too: the sync may answer `NoSpace` only as the 90 % rule allows,
        // and then dropping the snapshots, which never answers `NoSpace`, must let it through
        // (as `tests/tbfs_stuck_cut.rs` asserts of a refusing pool).
        match soak.fs.sync() {
            Ok(()) => {}
            Err(e @ Error::NoSpace(_)) => {
                soak.no_space("the sync after recovering from the cut", 0, false, &e);
                soak.drop_snapshots_after_the_cut();
                if let Err(e) = soak.fs.sync() {
                    soak.failures.push(format!(
                        "the sync after recovering from the cut, the snapshots dropped: {e}"
                    ));
                }
            }
            Err(e) => soak
                .failures
                .push(format!("the sync after recovering from the cut: {e}")),
        }
        soak
    }
}

/// Churns a `pool`-byte memory pool in segments of `segment` bytes at 85 % live for `ops`
/// operations after reaching it, with a power cut half-way; returns the failures.
fn soak(pool: u64, segment: u64, seed: u64, ops: u64) -> Vec<String> {
    let dev = Arc::new(SimDevice::new(pool));
    dev.set_writes_are_copies(true);
    let config = Config {
        segment_bytes: segment,
        // Deterministic: only writers clean.
        background_gc: false,
        // The memory pool's 8 MiB in 256 MiB, in proportion for the quick run's smaller pool.
        dirty_bytes_max: (pool / 32).min(Config::memory_pool().dirty_bytes_max),
        ..Config::memory_pool()
    };
    let fs = Fs::format(dev.clone(), &config).unwrap();
    for d in ["/a", "/b", "/b/c"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    let size = fs.space().unwrap().size;
    let mut s = Soak {
        dev,
        fs,
        pool: size,
        rng: Rng(seed),
        files: Vec::new(),
        live: 0,
        next: 0,
        snapshots: Vec::new(),
        refused: 0,
        ops: 0,
        failures: Vec::new(),
    };
    let target = size * 85 / 100;
    while s.live + (8 << 20) < target {
        s.step(target);
    }
    for n in 0..ops {
        if n == ops / 2 {
            s.sync();
            for _ in 0..50 {
                s.step(target);
            }
            let crash_seed = s.rng.next();
            s = s.power_cut(crash_seed);
        }
        s.step(target);
        if s.failures.len() > 20 {
            break;
        }
    }
    let space = s.fs.space().unwrap();
    eprintln!(
        "seed {seed}: {} files, {} live of {}, {} refused; {space:?}",
        s.files.len(),
        s.live,
        s.pool,
        s.refused
    );
    for n in std::mem::take(&mut s.snapshots) {
        if let Err(e) = s.fs.set_snapshot(n, false) {
            s.failures
                .push(format!("dropping snapshot {n} at the end: {e}"));
        }
    }
    let Soak {
        dev,
        fs,
        files,
        mut failures,
        ..
    } = s;
    if let Err(e) = fs.close() {
        failures.push(format!("closing the pool: {e}"));
        return failures;
    }
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck at the end: {damage:#?}");
    let fs = Fs::open(dev, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("reopening the closed pool: {e}"));
    for f in files.iter().step_by(13) {
        assert!(
            read(&fs, &f.path) == data(f.seed, f.len as usize),
            "{} differs after reopening",
            f.path
        );
    }
    failures
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "minutes in release; see the module doc"]
fn a_pool_churned_at_85_percent_answers_no_space_only_at_90() {
    let pool = env("SOAK_ROOM_POOL_MIB", 256) << 20;
    let segment = env("SOAK_ROOM_SEGMENT_KIB", 1024) << 10;
    let seed = env("SOAK_ROOM_SEED", 1);
    let ops = env("SOAK_ROOM_OPS", 20_000);
    let failures = soak(pool, segment, seed, ops);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Writes `/d/f{n}`: `len` bytes of `data(n, …)`.
fn write_numbered(fs: &Fs, n: u64, len: u64) -> Result<(), Error> {
    let f = fs.open_file(&format!("/d/f{n}"), OpenFlags::create())?;
    f.pwrite(&data(n, len as usize), 0).map(|_| ())
}

/// Files `/d/f0`, `/d/f1`, … of `len` bytes each ([`write_numbered`]), until the next would
/// pass 85 % of the pool: their numbers.
fn fill_to_85(fs: &Fs, len: u64) -> Vec<u64> {
    let size = fs.space().unwrap().size;
    let mut files = Vec::new();
    while (files.len() as u64 + 1) * len < size * 85 / 100 {
        let n = files.len() as u64;
        write_numbered(fs, n, len).unwrap();
        files.push(n);
    }
    files
}

/// Whether live data and what snapshots pin fill 90 % of the pool: the rule below which no
/// write, and no delete under a snapshot, may be refused.
fn full_by_rule(s: &SpaceReport) -> bool {
    (s.live + s.pinned_by_snapshots) * 10 >= s.size * 9
}

/// Asserts that `e`, answered to `what`, is `NoSpace` in a pool full by the 90 % rule.
fn assert_refused_at_90(fs: &Fs, what: &str, e: &Error) {
    let s = fs.space().unwrap();
    assert!(
        matches!(e, Error::NoSpace(_)) && full_by_rule(&s),
        "{what} refused below 90 % live + pinned: {e}; {s:?}"
    );
}

/// The quick tests' pool: a 32 MiB simulated device that writes as a memory pool does, in
/// 128 KiB segments, with a 1 MiB write buffer and no background cleaner.
fn small_pool() -> (Arc<SimDevice>, Config) {
    let dev = Arc::new(SimDevice::new(32 << 20));
    dev.set_writes_are_copies(true);
    let config = Config {
        segment_bytes: 128 << 10,
        background_gc: false,
        dirty_bytes_max: 1 << 20,
        ..Config::memory_pool()
    };
    (dev, config)
}

/// The drop the soak's seed 7 saw refused, made quickly (issue 38): a memory pool filled to
/// 85 % under a snapshot until it refuses writes, then files deleted all over it, which marks
/// every page of the pinned table, with no sync after. The snapshot's drop must be written
/// (its release empties those pages, and every checkpoint before it left the room deletes
/// may take), and then the pool takes writes again, fsck finds it clean, and every file
/// reads back.
#[test]
fn a_snapshot_drop_after_deletes_under_it_in_a_full_pool_is_written() {
    let (dev, config) = small_pool();
    let fs = Fs::format(dev.clone(), &config).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let len = 96u64 << 10;
    let mut files = fill_to_85(&fs, len);
    let mut next = files.len() as u64;
    fs.sync().unwrap();
    let snapshot = fs.snapshot(None).unwrap();
    // Churn under the snapshot: every delete pins what it frees, so the pool fills up.
    let mut rng = Rng(38);
    let mut refused_in_a_row = 0;
    let mut ops = 0;
    while refused_in_a_row < 20 {
        ops += 1;
        assert!(ops < 10_000, "the pool never filled under the snapshot");
        let i = rng.below(files.len() as u64) as usize;
        match fs.unlink(&format!("/d/f{}", files[i])) {
            Ok(()) => {
                files.swap_remove(i);
            }
            Err(e) => {
                assert_refused_at_90(&fs, "an unlink", &e);
            }
        }
        match write_numbered(&fs, next, len) {
            Ok(()) => {
                files.push(next);
                refused_in_a_row = 0;
            }
            Err(Error::NoSpace(_)) => {
                refused_in_a_row += 1;
                let _ = fs.unlink(&format!("/d/f{next}"));
            }
            Err(e) => panic!("write: {e}"),
        }
        next += 1;
        if ops % 8 == 0 {
            match fs.sync() {
                Ok(()) | Err(Error::NoSpace(_)) => {}
                Err(e) => panic!("sync: {e}"),
            }
        }
    }
    let full = fs.space().unwrap();
    assert!(
        full_by_rule(&full),
        "writes refused below 90 % live + pinned: {full:?}"
    );
    // Deletes all over the pool mark every pinned-table page; nothing writes them before
    // the drop.
    // One may be refused (what earlier ones added under the snapshot finds no room) only at
    // 90 % live + pinned; it goes through once the snapshot is dropped.
    let (gone, kept): (Vec<u64>, Vec<u64>) = files.iter().partition(|&&n| n % 2 == 0);
    let mut refused = Vec::new();
    for n in &gone {
        if let Err(e) = fs.unlink(&format!("/d/f{n}")) {
            assert_refused_at_90(&fs, &format!("unlink /d/f{n}"), &e);
            refused.push(*n);
        }
    }
    eprintln!(
        "{} of {} deletes refused before the drop",
        refused.len(),
        gone.len()
    );
    fs.set_snapshot(snapshot, false)
        .unwrap_or_else(|e| panic!("dropping the snapshot: {e}; {:?}", fs.space()));
    for n in &refused {
        fs.unlink(&format!("/d/f{n}"))
            .unwrap_or_else(|e| panic!("unlink /d/f{n} after the drop: {e}"));
    }
    write_numbered(&fs, next, len).unwrap();
    fs.sync().unwrap();
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck: {damage:#?}");
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    for n in kept.iter().chain([next].iter()) {
        assert!(
            read(&fs, &format!("/d/f{n}")) == data(*n, len as usize),
            "/d/f{n} differs"
        );
    }
}

/// Seeds 2 and 5's refused close and drop, made quickly (issue 38): under one snapshot a
/// pool churned until it refuses writes, then files deleted and truncated all over it. Each
/// delete marks pinned-table pages, and the checkpoints that pay what deletes charge must be
/// written though a cleaning cycle no longer fits beside them (they were refused for it, the
/// debt grew with every delete, and the close, which writes it all, was refused). The close
/// with the snapshot held must be written; the pool reopens clean, the snapshot's drop is
/// written, and every file reads back. On a stepped clock, so the cleaner's victims (chosen by
/// segment age) are the same in every run.
#[test]
fn a_close_after_deletes_under_a_snapshot_in_a_full_pool_is_written() {
    let (dev, mut config) = small_pool();
    config.clock = Clock::stepped(1_700_000_000_000_000_000, Duration::from_micros(10));
    let fs = Fs::format(dev.clone(), &config).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let len = 48u64 << 10;
    // A delete under the snapshot may be refused, as a write is, only at 90 % live + pinned.
    let mut files = fill_to_85(&fs, len);
    let mut next = files.len() as u64;
    fs.sync().unwrap();
    let snapshot = fs.snapshot(None).unwrap();
    let mut rng = Rng(211);
    let mut refused_in_a_row = 0;
    let mut ops = 0;
    while refused_in_a_row < 20 {
        ops += 1;
        assert!(ops < 10_000, "the pool never filled under the snapshot");
        let i = rng.below(files.len() as u64) as usize;
        if let Err(e) = fs.unlink(&format!("/d/f{}", files[i])) {
            assert_refused_at_90(&fs, "a delete", &e);
        } else {
            files.swap_remove(i);
        }
        match write_numbered(&fs, next, len) {
            Ok(()) => {
                files.push(next);
                refused_in_a_row = 0;
            }
            Err(Error::NoSpace(_)) => {
                refused_in_a_row += 1;
                match fs.unlink(&format!("/d/f{next}")) {
                    Ok(()) | Err(Error::NotFound(_)) => {}
                    Err(e) => panic!("unlink after a refused write: {e}"),
                }
            }
            Err(e) => panic!("write: {e}"),
        }
        next += 1;
    }
    // Deletes and truncates all over the pool, with no sync between them: each marks
    // pinned-table pages a plain checkpoint writes.
    // One refused (a snapshot keeps what it would free, and the debt earlier ones added finds
    // no room) is allowed only at 90 % live + pinned, and leaves the file as it was.
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    let mut tried = 0;
    for (k, n) in files.iter().enumerate() {
        let path = format!("/d/f{n}");
        let (done, l) = match k % 3 {
            0 => (fs.unlink(&path), 0),
            1 => (fs.truncate(&path, len / 3), len / 3),
            _ => {
                kept.push((*n, len));
                continue;
            }
        };
        tried += 1;
        match done {
            Ok(()) if l > 0 => kept.push((*n, l)),
            Ok(()) => {}
            Err(e) => {
                assert_refused_at_90(&fs, "a delete", &e);
                refused.push(*n);
            }
        }
    }
    eprintln!("{} of {tried} deletes and truncates refused", refused.len());
    let before = fs.counters();
    fs.close().unwrap_or_else(|e| {
        panic!(
            "closing the pool with the snapshot held: {e}; deletes' debt unpaid {} times",
            before.deletes_debt_unpaid
        )
    });
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck: {damage:#?}");
    let fs = Fs::open(dev.clone(), &OpenOptions::default()).unwrap();
    assert!(
        fs.checkpoints()
            .unwrap()
            .iter()
            .any(|c| c.number == snapshot && c.snapshot),
        "the snapshot is kept across the close"
    );
    fs.set_snapshot(snapshot, false)
        .unwrap_or_else(|e| panic!("dropping the snapshot after reopening: {e}"));
    // With the snapshot gone, the deletes refused under it go through, and a write fits.
    for n in &refused {
        fs.unlink(&format!("/d/f{n}"))
            .unwrap_or_else(|e| panic!("unlink /d/f{n} after the drop: {e}"));
    }
    fs.sync().unwrap();
    let f = fs.open_file("/d/after", OpenFlags::create()).unwrap();
    f.pwrite(&data(u64::MAX, len as usize), 0).unwrap();
    drop(f);
    fs.close().unwrap();
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    assert!(read(&fs, "/d/after") == data(u64::MAX, len as usize));
    for (n, l) in &kept {
        assert!(
            read(&fs, &format!("/d/f{n}")) == data(*n, len as usize)[..*l as usize],
            "/d/f{n} differs"
        );
    }
}

/// Seed 4's refusal, made quickly (issue 38): under one snapshot, the files written since
/// it are deleted and every other file it holds too. The first give their space back, but
/// only once a checkpoint releases the newest plain one, which pins them; the others mark
/// the pinned table's pages all over the pool. Every cleaning pass under a snapshot is a
/// checkpoint, and it must fit the room there is: writes up to 84 % live + pinned, far below
/// 90 %, must all go through. They were refused while the cleaner's checkpoint kept room for
/// the whole pinned table again beside the pages it wrote; now the pages deletes mark are
/// charged against a small allowance and paid as they go (`DeletesDebt`).
#[test]
fn writes_under_a_snapshot_get_the_space_deletes_under_it_give_back() {
    let (dev, mut config) = small_pool();
    config.clock = Clock::stepped(1_700_000_000_000_000_000, Duration::from_micros(10));
    let fs = Fs::format(dev.clone(), &config).unwrap();
    fs.mkdir("/old", 0o755).unwrap();
    fs.mkdir("/new", 0o755).unwrap();
    let size = fs.space().unwrap().size;
    // Half a segment each: deleting every other one touches every segment they fill.
    let len = 64u64 << 10;
    let write = |fs: &Fs, path: &str, seed: u64| -> Result<(), Error> {
        let f = fs.open_file(path, OpenFlags::create())?;
        f.pwrite(&data(seed, len as usize), 0).map(|_| ())
    };
    let old: Vec<u64> = (0..size * 7 / 10 / len).collect();
    for &n in &old {
        write(&fs, &format!("/old/f{n}"), n).unwrap();
    }
    fs.sync().unwrap();
    let snapshot = fs.snapshot(None).unwrap();
    // Files written under the snapshot: up to 80 % of the pool, made durable by a plain
    // checkpoint (once they are deleted, their segments wait for the next checkpoint to
    // release it), then more until the pool refuses one.
    let mut new = 0u64;
    while (old.len() as u64 + new) * len < size * 4 / 5 {
        write(&fs, &format!("/new/f{new}"), 1 << 32 | new).unwrap();
        new += 1;
    }
    fs.sync().unwrap();
    loop {
        assert!(new * len < size, "the pool never filled under the snapshot");
        match write(&fs, &format!("/new/f{new}"), 1 << 32 | new) {
            Ok(()) => new += 1,
            Err(Error::NoSpace(_)) => {
                // Refused at the create, or at the write with the name made.
                match fs.unlink(&format!("/new/f{new}")) {
                    Ok(()) | Err(Error::NotFound(_)) => break,
                    Err(e) => panic!("unlink after a refused write: {e}"),
                }
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    let durable = (size * 4 / 5).div_ceil(len) - old.len() as u64;
    assert!(new > durable + 8, "{new} files written under the snapshot");
    for n in 0..new {
        fs.unlink(&format!("/new/f{n}")).unwrap();
    }
    let (gone, kept): (Vec<u64>, Vec<u64>) = old.iter().partition(|&&n| n % 2 == 0);
    for n in &gone {
        fs.unlink(&format!("/old/f{n}")).unwrap();
    }
    let space = fs.space().unwrap();
    let used = |s: &SpaceReport| (s.live + s.pinned_by_snapshots) as f64 * 100.0 / s.size as f64;
    // New files up to 84 % live + pinned, far below the 90 % at which writes may be refused:
    // at least a quarter of the files the plain checkpoint made durable under the snapshot,
    // which stay pinned until a checkpoint releases it. (Not a share of every file written
    // under it: how many more fit before the refusal says nothing about the room after.)
    let count =
        ((space.size * 84 / 100).saturating_sub(space.live + space.pinned_by_snapshots)) / len;
    assert!(
        count >= durable / 4,
        "{:.1} % live + pinned after the deletes: room for {count} files, {durable} of the {new} \
         deleted were durable",
        used(&space)
    );
    for n in 0..count {
        write(&fs, &format!("/new/g{n}"), 2 << 32 | n).unwrap_or_else(|e| {
            let now = fs.space().unwrap();
            panic!(
                "write {n} of {count} under the snapshot, at {:.1} % live + pinned ({:.1} % after the deletes): {e}; {now:?}",
                used(&now),
                used(&space)
            )
        });
    }
    fs.sync().unwrap();
    fs.set_snapshot(snapshot, false).unwrap();
    fs.close().unwrap();
    let report = fsck::check(dev.as_ref()).unwrap();
    let damage: Vec<String> = report.damage().map(|f| f.to_string()).collect();
    assert!(damage.is_empty(), "fsck: {damage:#?}");
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    for n in &kept {
        assert!(
            read(&fs, &format!("/old/f{n}")) == data(*n, len as usize),
            "/old/f{n} differs"
        );
    }
    for n in 0..count {
        assert!(
            read(&fs, &format!("/new/g{n}")) == data(2 << 32 | n, len as usize),
            "/new/g{n} differs"
        );
    }
}
