//! The soak's run loop, and its checks after levels and power cuts.

use super::ops::worker;
use super::*;
use tailbound::tbfs::fsck::{Finding, FsckReport};

/// The run: format, the levels in turn (each split into epochs by power cuts), the final checks.
pub(super) fn run(cfg: &SoakConfig, log: &(dyn Fn(&str) + Sync)) -> Result<SoakReport, Error> {
    let started = Instant::now();
    let mut rng = SplitMix64::new(cfg.seed);
    let threads = cfg.threads.max(1);
    let tally = Tally::default();
    let failures = Mutex::new(Failures::default());
    let spurious = Mutex::new(Vec::new());
    let snaps = Mutex::new(Snaps::default());
    let writes = Mutex::new(WriteLog::default());
    let reopen = AtomicBool::new(false);
    let mut reopens = 0u32;
    let (armed, stop, fatal, reached) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    let (live, in_flight) = (AtomicU64::new(0), AtomicU64::new(0));
    let world = RwLock::new(());
    let models: Vec<Mutex<ThreadModel>> = (0..threads)
        .map(|id| Mutex::new(ThreadModel::new(id, cfg.seed)))
        .collect();
    // Power cuts: each at a random level and a random point of it.
    let levels = cfg.levels.len().max(1);
    let mut cut_plan: Vec<Vec<f64>> = vec![Vec::new(); levels];
    for _ in 0..cfg.power_cuts {
        let l = rng.below(levels as u64) as usize;
        cut_plan[l].push(0.05 + rng.below(900) as f64 / 1000.0);
    }
    for p in &mut cut_plan {
        p.sort_by(f64::total_cmp);
    }
    let mut report = SoakReport {
        experiment: "soak",
        seed: cfg.seed,
        pool_bytes: cfg.pool_bytes,
        segment_bytes: cfg.segment_bytes(),
        threads,
        levels: Vec::new(),
        enospc: 0,
        enospc_spurious: 0,
        spurious: Vec::new(),
        files_checked: 0,
        snapshot_files_checked: 0,
        durable_files_checked: 0,
        after_cuts: CutCheck::default(),
        full_checks: 0,
        fsck_runs: 0,
        power_cuts_planned: cfg.power_cuts,
        power_cuts_survived: 0,
        reopens: 0,
        fsck_final: "not run".into(),
        failures: Vec::new(),
        failures_total: 0,
        seconds: 0.0,
        passed: false,
    };
    let fail = |msg: String| {
        log(&format!("FAILED: {msg}"));
        failures.lock().push(msg);
    };

    let mut policy_index = 0usize;
    let mut dev = Arc::new(SimDevice::new(cfg.pool_bytes));
    dev.set_writes_are_copies(true);
    let config = Config {
        ordering: POLICIES[0].0,
        barrier: POLICIES[0].1,
        segment_bytes: cfg.segment_bytes(),
        background_gc: cfg.background_gc,
        ..Config::memory_pool()
    };
    let mut fs = Some(Fs::format(dev.clone(), &config)?);
    if let Some(f) = &fs {
        for t in 0..threads {
            for dir in [format!("/t{t}"), format!("/t{t}/sub")] {
                if let Err(e) = f.mkdir(&dir, 0o755) {
                    fail(format!("seed {:#x}: mkdir {dir}: {e}", cfg.seed));
                    fatal.store(true, AtOrd::Release);
                }
            }
        }
    }

    for (li, &level) in cfg.levels.iter().enumerate() {
        let Some(cur) = fs.as_ref() else { break };
        if fatal.load(AtOrd::Acquire) {
            break;
        }
        let level_start = Instant::now();
        let before: Vec<u64> = tally.ops.iter().map(|a| a.load(AtOrd::Relaxed)).collect();
        let (bytes0, enospc0, spurious0) = (
            tally.bytes.load(AtOrd::Relaxed),
            tally.enospc.load(AtOrd::Relaxed),
            tally.spurious.load(AtOrd::Relaxed),
        );
        let target = (level * cfg.pool_bytes as f64) as u64;
        let reach_at = target.saturating_sub(cfg.mix.max().min(target / 8));
        reached.store(live.load(AtOrd::Relaxed) >= reach_at, AtOrd::Release);
        let held_from = Mutex::new(reached.load(AtOrd::Acquire).then_some(level_start));
        for m in &models {
            let mut m = m.lock();
            m.hold_ops = 0;
            m.reach_ops = 0;
        }
        let cuts = Mutex::new(cut_plan[li].iter().copied().collect::<VecDeque<f64>>());
        log(&format!(
            "level {:.0} %: target {} MiB of {} MiB, {} power cut(s) planned",
            level * 100.0,
            target >> 20,
            cfg.pool_bytes >> 20,
            cuts.lock().len()
        ));
        let mut fs_now = cur.clone();
        // Reached at some point: a power cut late in a level may leave it below at the end.
        let mut ever_reached = false;
        loop {
            let ctx = Ctx {
                cfg,
                fs: fs_now.clone(),
                dev: dev.clone(),
                policy: POLICIES[policy_index % POLICIES.len()],
                level,
                target,
                reach_at,
                level_start,
                held_from: &held_from,
                cuts: &cuts,
                armed: &armed,
                stop: &stop,
                reopen: &reopen,
                reached: &reached,
                live: &live,
                in_flight: &in_flight,
                world: &world,
                models: &models,
                snaps: &snaps,
                writes: &writes,
                tally: &tally,
                failures: &failures,
                spurious: &spurious,
                log,
            };
            stop.store(false, AtOrd::Release);
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let ctx = &ctx;
                        std::thread::Builder::new()
                            .name(format!("soak-{t}"))
                            .spawn_scoped(s, move || worker(ctx, t))
                            .expect("spawning a soak thread")
                    })
                    .collect();
                for (t, h) in handles.into_iter().enumerate() {
                    if let Err(p) = h.join() {
                        let what = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "a panic".into());
                        ctx.fail(format!(
                            "seed {:#x}, level {:.0} %: thread {t} panicked: {what}",
                            cfg.seed,
                            level * 100.0
                        ));
                        fatal.store(true, AtOrd::Release);
                    }
                }
            });
            ever_reached |= reached.load(AtOrd::Acquire);
            if fatal.load(AtOrd::Acquire) {
                break;
            }
            let reopening = reopen.swap(false, AtOrd::AcqRel) && !armed.load(AtOrd::Acquire);
            if !armed.load(AtOrd::Acquire) && !reopening {
                // A cut the threads did not reach before the level's budget ran out (an
                // operation can outlast a short level): it falls here, between operations.
                if cuts.lock().pop_front().is_none() {
                    break;
                }
                let k = rng.below(CUT_WRITES_MAX);
                log(&format!(
                    "arming a power cut after {k} more device writes (level end)"
                ));
                armed.store(true, AtOrd::Release);
                dev.cut_power_after(k);
            }
            let (image, what) = if reopening {
                // A failure that stopped the pool: reopen it, as a program would, from what
                // the device holds (a process crash: every write handed to it stays), and go on.
                reopens += 1;
                if reopens > REOPENS_MAX {
                    fail(format!(
                        "seed {:#x}: more than {REOPENS_MAX} failures that stopped the pool; giving up",
                        cfg.seed
                    ));
                    fatal.store(true, AtOrd::Release);
                    break;
                }
                (dev.image(), format!("reopening after failure {reopens}"))
            } else {
                // The power cut: make sure it has happened (a sync writes), then recover.
                for _ in 0..=CUT_WRITES_MAX + 2 {
                    if dev.power_is_out() {
                        break;
                    }
                    let _ = fs_now.sync();
                }
                let crash_seed = rng.next_u64();
                let cut = report.power_cuts_survived + 1;
                (
                    dev.crash_image(crash_seed),
                    format!("power cut {cut} (crash seed {crash_seed:#x})"),
                )
            };
            drop(ctx);
            drop(fs_now);
            fs = None;
            dev = Arc::new(SimDevice::from_image(image));
            dev.set_writes_are_copies(true);
            let was_cut = armed.swap(false, AtOrd::AcqRel);
            policy_index += 1;
            let policy = POLICIES[policy_index % POLICIES.len()];
            log(&format!(
                "{what} at level {:.0} %; recovering under {:?}/{:?}",
                level * 100.0,
                policy.0,
                policy.1
            ));
            match recover(
                cfg,
                &dev,
                policy,
                &models,
                &snaps,
                &live,
                &tally,
                &writes,
                level,
                &what,
                was_cut,
                &fail,
                log,
                &mut report.after_cuts,
            ) {
                Some(f) => {
                    if was_cut {
                        report.power_cuts_survived += 1;
                    }
                    // What the crash took is written again before the level counts as held.
                    reached.store(live.load(AtOrd::Relaxed) >= reach_at, AtOrd::Release);
                    if reached.load(AtOrd::Acquire) {
                        held_from.lock().get_or_insert_with(Instant::now);
                    }
                    fs_now = f.clone();
                    fs = Some(f);
                }
                None => {
                    fatal.store(true, AtOrd::Release);
                    break;
                }
            }
        }
        let cur = fs.as_ref();
        if let Some(cur) = cur.filter(|_| !fatal.load(AtOrd::Acquire)) {
            full_check(
                cur,
                cfg,
                &models,
                &tally,
                &writes,
                &format!("end of level {:.0} %", level * 100.0),
                &fail,
            );
        }
        let ops: Vec<(String, u64)> = OPS
            .iter()
            .zip(&before)
            .map(|(o, b)| {
                (
                    o.name().to_string(),
                    tally.ops[*o as usize].load(AtOrd::Relaxed) - b,
                )
            })
            .collect();
        let lr = LevelReport {
            level,
            reached: ever_reached,
            ops,
            bytes_written: tally.bytes.load(AtOrd::Relaxed) - bytes0,
            enospc: tally.enospc.load(AtOrd::Relaxed) - enospc0,
            enospc_spurious: tally.spurious.load(AtOrd::Relaxed) - spurious0,
            live_fraction_end: live.load(AtOrd::Relaxed) as f64 / cfg.pool_bytes as f64,
            df_end: cur.map_or_else(|| "the pool stopped".to_string(), df),
            seconds: level_start.elapsed().as_secs_f64(),
        };
        log(&format!(
            "level {:.0} % done in {:.1} s: reached {}, live {:.1} %, {} ENOSPC ({} spurious); df: {}",
            level * 100.0,
            lr.seconds,
            lr.reached,
            lr.live_fraction_end * 100.0,
            lr.enospc,
            lr.enospc_spurious,
            lr.df_end
        ));
        if !lr.reached && !fatal.load(AtOrd::Acquire) {
            fail(format!(
                "seed {:#x}: level {:.0} % was never reached (live {:.1} % of the pool)",
                cfg.seed,
                level * 100.0,
                lr.live_fraction_end * 100.0
            ));
        }
        report.levels.push(lr);
        if cur.is_none() {
            break;
        }
    }

    // The end: every snapshot and file read back, the pool closed, fsck.
    if let Some(f) = fs.take() {
        if !fatal.load(AtOrd::Acquire) {
            let held: Vec<SnapRecord> = snaps.lock().held.drain(..).collect();
            for s in held {
                check_snapshot(&f, cfg, &s, &tally, &writes, &|| false, &fail);
            }
        }
        if let Err(e) = f.close() {
            fail(format!("seed {:#x}: closing the pool: {e}", cfg.seed));
        }
        tally.fsck_runs.fetch_add(1, AtOrd::Relaxed);
        report.fsck_final = match fsck::check(&*dev) {
            Ok(r) => {
                if r.verdict != Verdict::Clean {
                    let damage: Vec<String> = r.damage().take(5).map(|d| d.to_string()).collect();
                    fail(format!(
                        "seed {:#x}: final fsck: {:?}: {}",
                        cfg.seed,
                        r.verdict,
                        damage.join("; ")
                    ));
                }
                format!("{:?}", r.verdict).to_lowercase()
            }
            Err(e) => {
                fail(format!("seed {:#x}: final fsck: {e}", cfg.seed));
                format!("fsck failed: {e}")
            }
        };
    }
    report.enospc = tally.enospc.load(AtOrd::Relaxed);
    report.enospc_spurious = tally.spurious.load(AtOrd::Relaxed);
    report.spurious = spurious.into_inner();
    report.files_checked = tally.files_checked.load(AtOrd::Relaxed);
    report.snapshot_files_checked = tally.snapshot_files_checked.load(AtOrd::Relaxed);
    report.durable_files_checked = report.after_cuts.durable;
    report.full_checks = tally.full_checks.load(AtOrd::Relaxed);
    report.fsck_runs = tally.fsck_runs.load(AtOrd::Relaxed);
    let f = failures.into_inner();
    report.failures = f.list;
    report.failures_total = f.total;
    report.seconds = started.elapsed().as_secs_f64();
    report.reopens = reopens;
    report.passed = report.passed();
    Ok(report)
}

/// Reads every file back and compares the directory listings with the model.
fn full_check(
    fs: &Fs,
    cfg: &SoakConfig,
    models: &[Mutex<ThreadModel>],
    tally: &Tally,
    writes: &Mutex<WriteLog>,
    when: &str,
    fail: &dyn Fn(String),
) {
    tally.full_checks.fetch_add(1, AtOrd::Relaxed);
    for m in models {
        let m = m.lock();
        let mut want: Vec<String> = m.files.iter().map(|f| f.path.clone()).collect();
        want.sort();
        let mut have = Vec::new();
        for dir in [m.dir(), format!("{}/sub", m.dir())] {
            match fs.readdir(&dir) {
                Ok(list) => have.extend(
                    list.into_iter()
                        .filter(|e| e.name != "sub")
                        .map(|e| format!("{dir}/{}", e.name)),
                ),
                Err(e) => fail(format!("seed {:#x}, {when}: readdir {dir}: {e}", cfg.seed)),
            }
        }
        have.sort();
        if have != want {
            let extra: Vec<&String> = have.iter().filter(|p| !want.contains(p)).take(5).collect();
            let missing: Vec<&String> = want.iter().filter(|p| !have.contains(p)).take(5).collect();
            fail(format!(
                "seed {:#x}, {when}: thread {} lists {} files, the model {}: extra {extra:?}, missing {missing:?}",
                cfg.seed,
                m.id,
                have.len(),
                want.len()
            ));
        }
        for f in &m.files {
            if let Err(e) = fs.statvfs() {
                fail(format!(
                    "seed {:#x}, {when}: the pool stopped: {e}",
                    cfg.seed
                ));
                return;
            }
            tally.files_checked.fetch_add(1, AtOrd::Relaxed);
            match read_all(fs, &f.path, cfg.pool_bytes) {
                Ok(got) => {
                    if let Some(bad) = f.content.mismatch(&got) {
                        fail(format!(
                            "seed {:#x}, {when}: {}: {}",
                            cfg.seed,
                            f.path,
                            explain(writes, &got, &bad)
                        ));
                    }
                }
                Err(e) => fail(format!(
                    "seed {:#x}, {when}: reading {}: {e}",
                    cfg.seed, f.path
                )),
            }
        }
    }
}

/// Reads a snapshot's sampled files back as they were when it was taken.
///
/// `power_out` says whether the device's power was cut: the pool then stops, and an error that
/// says so is expected, not a failure (the snapshot is checked again after recovery).
pub(super) fn check_snapshot(
    fs: &Fs,
    cfg: &SoakConfig,
    s: &SnapRecord,
    tally: &Tally,
    writes: &Mutex<WriteLog>,
    power_out: &dyn Fn() -> bool,
    fail: &dyn Fn(String),
) {
    let view = match fs.at(s.number) {
        Ok(v) => v,
        Err(_) if power_out() => return,
        Err(e) => {
            fail(format!(
                "seed {:#x}: opening snapshot {}: {e}",
                cfg.seed, s.number
            ));
            return;
        }
    };
    for (path, content) in &s.sample {
        tally.snapshot_files_checked.fetch_add(1, AtOrd::Relaxed);
        match view.read_file(path) {
            Ok(got) => {
                if let Some(bad) = content.mismatch(&got) {
                    fail(format!(
                        "seed {:#x}: snapshot {}: {path}: {}",
                        cfg.seed,
                        s.number,
                        explain(writes, &got, &bad)
                    ));
                }
            }
            Err(_) if power_out() => return,
            Err(e) => {
                let stopped = matches!(e, Error::Poisoned(_));
                fail(format!(
                    "seed {:#x}: snapshot {}: reading {path}: {e}",
                    cfg.seed, s.number
                ));
                if stopped {
                    // The pool stopped: every later read says the same.
                    return;
                }
            }
        }
    }
}

/// Whether fsck's finding `f` on an image not opened since a power cut is one the cut itself
/// leaves: a summary lost or torn while a later log that was not flushed either reached the
/// device. Writes not yet flushed are lost in any order, and nothing after the lost summary was
/// acknowledged (a flush covers every summary written before the log it follows), so recovery
/// ends the chain there; fsck cannot tell it from damage, the check of the durable files can.
fn cut_left_it(f: &Finding) -> bool {
    f.message.contains("is damaged") && f.message.contains("follows it")
}

/// fsck's damage findings on a crashed image, split into what the cut left ([`cut_left_it`],
/// only after a power cut: a reopen's image lost no write) and damage (at most five of it).
fn crash_image_damage(r: &FsckReport, power_cut: bool) -> (Vec<String>, Vec<String>) {
    let (left, damage): (Vec<&Finding>, Vec<&Finding>) = r
        .damage()
        .partition(|f| power_cut && r.verdict == Verdict::Damaged && cut_left_it(f));
    (
        left.iter().map(|f| f.to_string()).collect(),
        damage.iter().take(5).map(|f| f.to_string()).collect(),
    )
}

/// After a power cut: fsck the crashed image, open it, check what was durable, drop what the
/// model cannot vouch for, and sync, so the run goes on from a known state.
#[allow(clippy::too_many_arguments)]
fn recover(
    cfg: &SoakConfig,
    dev: &Arc<SimDevice>,
    policy: (Ordering, Barrier),
    models: &[Mutex<ThreadModel>],
    snaps: &Mutex<Snaps>,
    live: &AtomicU64,
    tally: &Tally,
    writes: &Mutex<WriteLog>,
    level: f64,
    what: &str,
    power_cut: bool,
    fail: &dyn Fn(String),
    log: &(dyn Fn(&str) + Sync),
    after_cuts: &mut CutCheck,
) -> Option<Fs> {
    let at = format!("seed {:#x}, level {:.0} %, {what}", cfg.seed, level * 100.0);
    tally.fsck_runs.fetch_add(1, AtOrd::Relaxed);
    match fsck::check(&**dev) {
        Ok(r) if r.verdict == Verdict::Clean => {}
        Ok(r) => {
            let (left, damage) = crash_image_damage(&r, power_cut);
            if damage.is_empty() {
                log(&format!(
                    "{at}: fsck of the crashed image: what the cut left: {}",
                    left.join("; ")
                ));
            } else {
                fail(format!(
                    "{at}: fsck of the crashed image: {:?}: {}",
                    r.verdict,
                    damage.join("; ")
                ));
            }
        }
        Err(e) => fail(format!("{at}: fsck of the crashed image: {e}")),
    }
    let opts = OpenOptions {
        background_gc: Some(cfg.background_gc),
        ordering: Some(policy.0),
        barrier: Some(policy.1),
        ..OpenOptions::default()
    };
    let fs = match Fs::open(dev.clone() as Arc<dyn Device>, &opts) {
        Ok(fs) => fs,
        Err(e) => {
            fail(format!("{at}: opening the crashed pool: {e}"));
            return None;
        }
    };
    // Snapshots: every one held is there; every one dropped is gone.
    match fs.checkpoints() {
        Ok(list) => {
            let mut sn = snaps.lock();
            for s in sn.held.iter().filter(|s| s.sure) {
                if !list.iter().any(|c| c.number == s.number && c.snapshot) {
                    fail(format!("{at}: snapshot {} is gone", s.number));
                }
            }
            for &d in &sn.dropped {
                if list.iter().any(|c| c.number == d && c.snapshot) {
                    fail(format!("{at}: snapshot {d} was dropped and is back"));
                }
            }
            sn.dropped.clear();
            sn.held
                .retain(|s| list.iter().any(|c| c.number == s.number && c.snapshot));
            for s in &mut sn.held {
                s.sure = true;
            }
            for c in list.iter().filter(|c| c.snapshot) {
                if !sn.held.iter().any(|s| s.number == c.number) {
                    // Taken or dropped as the power went: not acknowledged either way.
                    if let Err(e) = fs.set_snapshot(c.number, false) {
                        fail(format!("{at}: dropping snapshot {}: {e}", c.number));
                    }
                }
            }
        }
        Err(e) => fail(format!("{at}: listing checkpoints: {e}")),
    }
    let rec = fs.recovery_report();
    log(&format!(
        "{at}: recovered from checkpoint {} (the superblock named {}), {} logs rolled forward, {} skipped ({}); the model held {:.1} MiB live; the pool: {}",
        rec.checkpoint,
        rec.superblock_checkpoint,
        rec.logs_rolled_forward,
        rec.logs_skipped,
        rec.stop_reason,
        mib(live.load(AtOrd::Relaxed)),
        df(&fs)
    ));
    let mut total = 0u64;
    let mut found = CutCheck::default();
    for m in models {
        let mut m = m.lock();
        match cut_check::check_thread(&fs, cfg, &mut m, writes, &at, fail) {
            Ok(c) => found.add(&c),
            Err(e) => {
                fail(format!("{at}: the recovered pool stopped: {e}"));
                after_cuts.add(&found);
                return None;
            }
        }
        total += m.files.iter().map(FileModel::bytes).sum::<u64>();
    }
    log(&format!("{at}: {}", found.summary()));
    if !found.lost_blocks.is_empty() {
        let image = dev.image();
        for l in &found.lost_blocks {
            for line in super::trace::who_wrote(&image, l) {
                log(&format!("{at}: {} block {}: {line}", l.path, l.block));
            }
        }
    }
    after_cuts.add(&found);
    live.store(total, AtOrd::Release);
    match fs.sync() {
        Ok(()) => {}
        Err(e @ Error::NoSpace(_)) => {
            // The cut may have undone deletes, so the recovered tree can hold more than the
            // pool did: the 90 % rule judges the refusal, and dropping the snapshots (which
            // never answers NoSpace) must let the sync through.
            tally.enospc.fetch_add(1, AtOrd::Relaxed);
            let pinned = fs.space().map(|s| s.pinned_by_snapshots).unwrap_or(0);
            let fraction = (total + pinned) as f64 / cfg.pool_bytes as f64;
            if cfg.pool_bytes >= ENOSPC_RULE_MIN_POOL && fraction < ENOSPC_FLOOR {
                tally.spurious.fetch_add(1, AtOrd::Relaxed);
                fail(format!(
                    "{at}: sync after recovery at {:.1} % of the pool live + pinned: {e}; {}",
                    fraction * 100.0,
                    df(&fs)
                ));
                return None;
            }
            log(&format!(
                "{at}: sync after recovery refused at {:.1} % of the pool live + pinned ({e}); dropping the snapshots",
                fraction * 100.0
            ));
            let mut sn = snaps.lock();
            for s in std::mem::take(&mut sn.held) {
                if let Err(e) = fs.set_snapshot(s.number, false) {
                    fail(format!("{at}: dropping snapshot {}: {e}", s.number));
                    return None;
                }
                sn.dropped.push(s.number);
            }
            drop(sn);
            if let Err(e) = fs.sync() {
                fail(format!(
                    "{at}: sync after recovery, the snapshots dropped: {e}; {}",
                    df(&fs)
                ));
                return None;
            }
        }
        Err(e) => {
            fail(format!("{at}: sync after recovery: {e}"));
            return None;
        }
    }
    Some(fs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailbound::tbfs::format::{Summary, BLOCK_U64};

    /// A pool whose chain after its superblock holds two unflushed data-only logs, as a cut
    /// can leave it: the first summary torn (a sector of it still holds what the block held
    /// before), the second whole.
    fn torn_before_a_later_log() -> Arc<SimDevice> {
        let dev = Arc::new(SimDevice::new(16 << 20));
        let config = Config {
            ordering: Ordering::Relaxed,
            barrier: Barrier::EveryCheckpoint,
            segment_bytes: 256 << 10,
            background_gc: false,
            // No timed checkpoint or superblock between the logs laid out below.
            checkpoint_every: None,
            superblock_every: Duration::from_secs(1 << 30),
            ..Config::memory_pool()
        };
        let fs = Fs::format(dev.clone(), &config).unwrap();
        for name in ["/a", "/b"] {
            fs.open_file(name, OpenFlags::create()).unwrap();
        }
        fs.sync().unwrap();
        // Under `every-checkpoint` a relaxed fsync is a data-only log, written, not flushed.
        for name in ["/a", "/b"] {
            let f = fs.open_file(name, OpenFlags::create()).unwrap();
            f.pwrite(&[7u8; 4096], 0).unwrap();
            f.fsync().unwrap();
        }
        let mut image = dev.image();
        drop(fs);
        // The newer of the two superblock copies.
        let sb = (0..2)
            .filter_map(|copy: usize| {
                let at = copy * BLOCK_U64 as usize;
                let b = &image[at..at + BLOCK_U64 as usize];
                tailbound::tbfs::format::Superblock::decode(b, image.len() as u64).ok()
            })
            .max_by_key(|sb| sb.generation)
            .unwrap();
        let first = (sb.next.block * BLOCK_U64) as usize;
        let (s, _) = Summary::decode(&image[first..first + BLOCK_U64 as usize]).unwrap();
        assert!(
            s.flags & tailbound::tbfs::format::FLAG_DATA_ONLY != 0,
            "{s:?}"
        );
        // Its fourth sector as the block held it before the write: not zeros.
        image[first + 3 * 512..first + 4 * 512].fill(0xa5);
        Arc::new(SimDevice::from_image(image))
    }

    #[test]
    fn a_summary_a_cut_tore_before_a_later_unflushed_log_is_what_the_cut_left() {
        let dev = torn_before_a_later_log();
        let r = fsck::check(&*dev).unwrap();
        assert_eq!(r.verdict, Verdict::Damaged, "{:?}", r.findings);
        let (left, damage) = crash_image_damage(&r, true);
        assert!(damage.is_empty(), "{damage:?}");
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].contains("follows it"), "{left:?}");
        // A reopen's image lost no write: there it is damage.
        let (left, damage) = crash_image_damage(&r, false);
        assert!(left.is_empty() && damage.len() == 1, "{left:?} {damage:?}");
        // Recovery ends the chain at the torn summary: what the sync made durable is there.
        let fs = Fs::open(dev.clone() as Arc<dyn Device>, &OpenOptions::default()).unwrap();
        for name in ["/a", "/b"] {
            assert_eq!(fs.stat(name).unwrap().size, 0, "{name}");
        }
    }
}
