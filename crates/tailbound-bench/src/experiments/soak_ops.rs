//! The soak threads' operations.

use super::run_loop::check_snapshot;
use super::*;

/// One thread of the soak: operations until its budget for the level is spent, the power is
/// cut, or the run stops.
pub(super) fn worker(ctx: &Ctx<'_>, t: usize) {
    loop {
        if ctx.stop.load(AtOrd::Acquire) || ctx.dev.power_is_out() {
            return;
        }
        let reached = ctx.reached.load(AtOrd::Acquire);
        let held_from = *ctx.held_from.lock();
        let progress = {
            let m = ctx.models[t].lock();
            // A level that is not reached in many times the operations it needs never will
            // be: give up and report it. Reaching it takes no part of the budget, so a slow
            // machine holds the level as long as a fast one.
            let needed = ctx.target / (ctx.cfg.mix.mean() as u64).max(1) + 1;
            let give_up = |extra: u64| m.reach_ops > 20 * needed / ctx.models.len() as u64 + extra;
            match (ctx.cfg.budget, held_from) {
                (Budget::Ops(n), _) => {
                    if !reached {
                        if give_up(n) {
                            return;
                        }
                        0.0
                    } else {
                        if m.hold_ops >= n {
                            return;
                        }
                        m.hold_ops as f64 / n.max(1) as f64
                    }
                }
                (Budget::Time(_), None) => {
                    if give_up(0) {
                        return;
                    }
                    0.0
                }
                (Budget::Time(d), Some(from)) => {
                    let held = from.elapsed();
                    if held >= d {
                        return;
                    }
                    held.as_secs_f64() / d.as_secs_f64()
                }
            }
        };
        let cut_due = match ctx.cfg.budget {
            Budget::Ops(_) => reached,
            Budget::Time(_) => held_from.is_some(),
        };
        if t == 0 && cut_due {
            let mut cuts = ctx.cuts.lock();
            if cuts.front().is_some_and(|&p| progress >= p) && !ctx.armed.load(AtOrd::Acquire) {
                cuts.pop_front();
                let k = ctx.models[0].lock().rng.below(CUT_WRITES_MAX);
                (ctx.log)(&format!(
                    "arming a power cut after {k} more device writes ({:.0} % into level {:.0} %)",
                    progress * 100.0,
                    ctx.level * 100.0
                ));
                ctx.armed.store(true, AtOrd::Release);
                ctx.dev.cut_power_after(k);
            }
        }
        step(ctx, t);
        if ctx.tally.full.swap(false, AtOrd::AcqRel) {
            // A full pool: as a user would, give back what the oldest snapshot holds.
            snapshot_drop(ctx);
        }
        let mut m = ctx.models[t].lock();
        if reached {
            m.hold_ops += 1;
        } else {
            m.reach_ops += 1;
        }
        drop(m);
        if !reached && ctx.live.load(AtOrd::Relaxed) >= ctx.reach_at {
            ctx.reached.store(true, AtOrd::Release);
            ctx.held_from.lock().get_or_insert_with(Instant::now);
            if t == 0 || ctx.models.len() == 1 {
                (ctx.log)(&format!(
                    "level {:.0} % reached ({} MiB live) after {:.1} s",
                    ctx.level * 100.0,
                    ctx.live.load(AtOrd::Relaxed) >> 20,
                    ctx.level_start.elapsed().as_secs_f64()
                ));
            }
        }
    }
}

/// Picks and runs one operation.
fn step(ctx: &Ctx<'_>, t: usize) {
    // Pool-wide operations wait for every thread to finish its operation first.
    let roll = ctx.models[t].lock().rng.below(1000);
    match roll {
        0..=3 => return global_sync(ctx),
        4..=5 => return snapshot(ctx),
        6..=7 => return snapshot_drop(ctx),
        _ => {}
    }
    let _world = ctx.world.read();
    let mut guard = ctx.models[t].lock();
    let m = &mut *guard;
    let pressure = ctx.pressure();
    let reached = ctx.reached.load(AtOrd::Acquire);
    let room = (-pressure).max(0) as u64;
    let r = m.rng.below(100);
    if m.files.is_empty() {
        return create(ctx, m, room.max(4096));
    }
    if pressure > 0 {
        match r {
            0..=59 => delete(ctx, m),
            60..=74 => truncate(ctx, m, true),
            75..=84 => overwrite(ctx, m),
            85..=92 => rename(ctx, m),
            _ => fsync(ctx, m),
        }
    } else if !reached {
        match r {
            0..=79 => create(ctx, m, room),
            80..=84 => append(ctx, m, room),
            85..=89 => overwrite(ctx, m),
            90..=94 => fsync(ctx, m),
            _ => read_check(ctx, m),
        }
    } else {
        match r {
            0..=21 => create(ctx, m, room),
            22..=31 => delete(ctx, m),
            32..=53 => overwrite(ctx, m),
            54..=63 => append(ctx, m, room),
            64..=69 => truncate(ctx, m, false),
            70..=76 => rename(ctx, m),
            77..=81 => replace(ctx, m, room),
            82..=91 => fsync(ctx, m),
            _ => read_check(ctx, m),
        }
    }
}

/// A file index, preferring large files (for overwrites) when `large`.
fn pick(m: &mut ThreadModel, large: bool) -> usize {
    let n = m.files.len() as u64;
    let mut best = m.rng.below(n) as usize;
    if large {
        for _ in 0..8 {
            let i = m.rng.below(n) as usize;
            if m.files[i].content.len() > m.files[best].content.len() {
                best = i;
            }
        }
    }
    best
}

fn add_live(ctx: &Ctx<'_>, before: u64, after: u64) {
    if after >= before {
        ctx.live.fetch_add(after - before, AtOrd::AcqRel);
    } else {
        ctx.live.fetch_sub(before - after, AtOrd::AcqRel);
    }
}

/// A change to file `i` that the power cut may leave or not: no longer durable.
fn touched(m: &mut ThreadModel, i: usize) {
    m.files[i].durable = None;
}

fn create(ctx: &Ctx<'_>, m: &mut ThreadModel, room: u64) {
    let mut size = ctx.cfg.mix.draw(&mut m.rng);
    if size > room {
        if room < 4096 {
            return overwrite_or_nothing(ctx, m);
        }
        size = room;
    }
    let path = m.new_path();
    let stamp = m.stamp();
    ctx.count(Op::Create);
    let flags = OpenFlags {
        create: true,
        exclusive: true,
        mode: 0o644,
        ..write_flags()
    };
    let f = match ctx.fs.open_file(&path, flags) {
        Ok(f) => f,
        Err(e) => return ctx.failed(Op::Create, &path, 0, e.into()),
    };
    m.files.push(FileModel::new(path.clone()));
    let i = m.files.len() - 1;
    let mut off = 0;
    while off < size {
        let len = CHUNK.min(size - off);
        let buf = data(stamp, off, len);
        let res = {
            let _g = InFlight::new(ctx.in_flight, len);
            f.pwrite(&buf, off)
        };
        match res {
            Ok(n) if n as u64 == len => {
                acknowledged(ctx, m, i, &path, stamp, off, len);
                off += len;
            }
            Ok(n) => {
                ctx.fail(format!(
                    "{}: short write {n} of {len}",
                    ctx.where_(Op::Create, &path)
                ));
                return;
            }
            Err(e) => {
                let no_space = matches!(e, Error::NoSpace(_));
                ctx.failed(Op::Create, &path, len, e.into());
                drop(f);
                if no_space {
                    // As a copy that fails for room does: remove what it wrote.
                    remove(ctx, m, i, Op::Delete);
                }
                return;
            }
        }
    }
    if m.rng.below(10) < 3 {
        finish_fsync(ctx, m, i, &f);
    }
}

fn overwrite_or_nothing(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    if !m.files.is_empty() {
        overwrite(ctx, m);
    }
}

/// Random overwrites inside a (preferably large) file: 4 KiB aligned mostly, odd sizes too.
fn overwrite(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    let i = pick(m, true);
    let size = m.files[i].content.len();
    if size == 0 {
        return;
    }
    let (off, len) = if m.rng.below(10) < 7 {
        let blocks = size.div_ceil(4096);
        let b = m.rng.below(blocks);
        let n = 1 + m.rng.below(4);
        (b * 4096, (n * 4096).min(size - b * 4096).max(1))
    } else {
        let off = m.rng.below(size);
        (off, (1 + m.rng.below(64 << 10)).min(size - off).max(1))
    };
    let path = m.files[i].path.clone();
    let stamp = m.stamp();
    ctx.count(Op::Overwrite);
    let f = match ctx.fs.open_file(&path, write_flags()) {
        Ok(f) => f,
        Err(e) => return ctx.failed(Op::Overwrite, &path, 0, e.into()),
    };
    let buf = data(stamp, off, len);
    let res = {
        let _g = InFlight::new(ctx.in_flight, len);
        f.pwrite(&buf, off)
    };
    match res {
        Ok(_) => {
            touched(m, i);
            acknowledged(ctx, m, i, &path, stamp, off, len);
            if m.rng.below(10) < 2 {
                finish_fsync(ctx, m, i, &f);
            }
        }
        Err(e) => {
            if !matches!(e, Error::NoSpace(_)) {
                touched(m, i);
            } else {
                refused_left_alone(ctx, m, i, &f, Op::Overwrite, off, len);
            }
            ctx.failed(Op::Overwrite, &path, len, e.into())
        }
    }
}

/// After a write of `off..off + len` to file `i` was refused for room: the file's size and the
/// bytes of that range read as the model holds them, since a refused write changes nothing.
fn refused_left_alone(
    ctx: &Ctx<'_>,
    m: &ThreadModel,
    i: usize,
    f: &tailbound::tbfs::File,
    op: Op,
    off: u64,
    len: u64,
) {
    let content = &m.files[i].content;
    let size = match f.stat() {
        Ok(st) => st.size,
        Err(e) => return ctx.failed(Op::Read, &m.files[i].path, 0, e.into()),
    };
    let bad = if size != content.len() {
        Some(format!(
            "size {size} where {} was acknowledged",
            content.len()
        ))
    } else {
        let end = (off + len).min(size);
        let mut got = vec![0u8; end.saturating_sub(off) as usize];
        match f.pread(&mut got, off) {
            Ok(n) if n == got.len() => content.mismatch_at(off, &got).map(|bad| {
                let whose = ctx
                    .writes
                    .lock()
                    .whose(&got[(bad.offset - off) as usize..], bad.offset);
                format!("{}; {whose}", bad.detail)
            }),
            Ok(n) => Some(format!("read {n} of {} bytes at {off}", got.len())),
            Err(e) => return ctx.failed(Op::Read, &m.files[i].path, 0, e.into()),
        }
    };
    if let Some(bad) = bad {
        ctx.fail(format!(
            "{}: a write of {off}..{} refused for room changed the file: {bad}",
            ctx.where_(op, &m.files[i].path),
            off + len
        ));
    }
}

/// Puts an acknowledged write of `len` bytes at `off` of file `i` into the model: the write log
/// (which explains a mismatch), the file's content, live data and the bytes written.
fn acknowledged(
    ctx: &Ctx<'_>,
    m: &mut ThreadModel,
    i: usize,
    path: &str,
    stamp: u64,
    off: u64,
    len: u64,
) {
    ctx.writes.lock().push(stamp, off, len, path);
    let before = m.files[i].bytes();
    m.files[i].content.write(off, len, stamp);
    add_live(ctx, before, m.files[i].bytes());
    ctx.tally.bytes.fetch_add(len, AtOrd::Relaxed);
}

fn append(ctx: &Ctx<'_>, m: &mut ThreadModel, room: u64) {
    let most = if m.rng.below(4) == 0 {
        1 << 20
    } else {
        64 << 10
    };
    let len = (1 + m.rng.below(most)).min(room);
    if len == 0 {
        return overwrite(ctx, m);
    }
    let i = pick(m, false);
    let path = m.files[i].path.clone();
    let stamp = m.stamp();
    ctx.count(Op::Append);
    let f = match ctx.fs.open_file(
        &path,
        OpenFlags {
            append: true,
            ..write_flags()
        },
    ) {
        Ok(f) => f,
        Err(e) => return ctx.failed(Op::Append, &path, 0, e.into()),
    };
    let off = m.files[i].content.len();
    let buf = data(stamp, off, len);
    let res = {
        let _g = InFlight::new(ctx.in_flight, len);
        f.append(&buf)
    };
    match res {
        Ok(end) => {
            touched(m, i);
            if end != off + len {
                ctx.fail(format!(
                    "{}: append ended at {end}, the file was {off} bytes and {len} were appended",
                    ctx.where_(Op::Append, &path)
                ));
            }
            acknowledged(ctx, m, i, &path, stamp, off, len);
            if m.rng.below(10) < 4 {
                finish_fsync(ctx, m, i, &f);
            }
        }
        Err(e) => {
            if !matches!(e, Error::NoSpace(_)) {
                touched(m, i);
            } else {
                refused_left_alone(ctx, m, i, &f, Op::Append, off, len);
            }
            ctx.failed(Op::Append, &path, len, e.into())
        }
    }
}

/// Cuts a file (to a random shorter length, or, when `shrink` is not asked, sometimes extends it
/// by a hole).
fn truncate(ctx: &Ctx<'_>, m: &mut ThreadModel, shrink: bool) {
    let i = pick(m, shrink);
    let size = m.files[i].content.len();
    let len = if !shrink && m.rng.below(4) == 0 {
        size + 1 + m.rng.below(64 << 10)
    } else {
        m.rng.below(size + 1)
    };
    let path = m.files[i].path.clone();
    ctx.count(Op::Truncate);
    let res = ctx
        .fs
        .open_file(&path, write_flags())
        .and_then(|f| f.set_len(len));
    match res {
        Ok(()) => {
            touched(m, i);
            let before = m.files[i].bytes();
            m.files[i].content.set_len(len);
            add_live(ctx, before, m.files[i].bytes());
        }
        Err(e) => {
            if !matches!(e, Error::NoSpace(_)) {
                touched(m, i);
            }
            ctx.failed(Op::Truncate, &path, len.saturating_sub(size), e.into())
        }
    }
}

fn rename(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    let i = pick(m, false);
    let from = m.files[i].path.clone();
    let to = m.new_path();
    ctx.count(Op::Rename);
    match ctx.fs.rename(&from, &to) {
        Ok(()) => {
            touched(m, i);
            // Nothing was made durable under the new name.
            m.files[i].last_durable = None;
            m.files[i].path = to;
            m.gone.push(from);
        }
        Err(e) => {
            if !matches!(e, Error::NoSpace(_)) {
                touched(m, i);
            }
            ctx.failed(Op::Rename, &from, 0, e.into())
        }
    }
}

/// An editor's save: a new file written whole, fsynced, and renamed over the old one.
fn replace(ctx: &Ctx<'_>, m: &mut ThreadModel, room: u64) {
    let i = pick(m, false);
    let old = m.files[i].content.len();
    let size = ctx
        .cfg
        .mix
        .draw(&mut m.rng)
        .min(room + old)
        .min(old.max(64 << 10) * 2);
    if size == 0 {
        return;
    }
    let target = m.files[i].path.clone();
    let tmp = format!("{}.tmp", m.new_path());
    let stamp = m.stamp();
    ctx.count(Op::Replace);
    let flags = OpenFlags {
        create: true,
        exclusive: true,
        mode: 0o644,
        ..write_flags()
    };
    let f = match ctx.fs.open_file(&tmp, flags) {
        Ok(f) => f,
        Err(e) => return ctx.failed(Op::Replace, &tmp, 0, e.into()),
    };
    let mut content = Content::default();
    // The temporary counts as live until it replaces the old file or is removed.
    let mut tmp_live = 0u64;
    let give_up = |ctx: &Ctx<'_>, f: tailbound::tbfs::File, e: Error, len: u64, tmp_live: u64| {
        drop(f);
        let no_space = matches!(e, Error::NoSpace(_));
        ctx.failed(Op::Replace, &tmp, len, e.into());
        if no_space {
            match ctx.fs.unlink(&tmp) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => ctx.failed(Op::Delete, &tmp, 0, e.into()),
            }
        }
        ctx.live.fetch_sub(tmp_live, AtOrd::AcqRel);
    };
    let mut off = 0;
    while off < size {
        let len = CHUNK.min(size - off);
        let buf = data(stamp, off, len);
        let res = {
            let _g = InFlight::new(ctx.in_flight, len);
            f.pwrite(&buf, off)
        };
        if let Err(e) = res {
            return give_up(ctx, f, e, len, tmp_live);
        }
        content.write(off, len, stamp);
        ctx.writes.lock().push(stamp, off, len, &tmp);
        ctx.tally.bytes.fetch_add(len, AtOrd::Relaxed);
        let now = content.len().div_ceil(4096) * 4096;
        ctx.live.fetch_add(now - tmp_live, AtOrd::AcqRel);
        tmp_live = now;
        off += len;
    }
    if let Err(e) = f.fsync() {
        return give_up(ctx, f, e, 0, tmp_live);
    }
    drop(f);
    match ctx.fs.rename(&tmp, &target) {
        Ok(()) => {
            let before = m.files[i].bytes();
            ctx.live.fetch_sub(before, AtOrd::AcqRel);
            m.files[i].content = content;
            m.files[i].durable = None;
            m.gone.push(tmp);
        }
        Err(e) => {
            ctx.live.fetch_sub(tmp_live, AtOrd::AcqRel);
            let no_space = matches!(e, Error::NoSpace(_));
            ctx.failed(Op::Replace, &target, 0, e.into());
            if no_space {
                match ctx.fs.unlink(&tmp) {
                    Ok(()) | Err(Error::NotFound(_)) => {}
                    Err(e) => ctx.failed(Op::Delete, &tmp, 0, e.into()),
                }
            } else {
                touched(m, i);
            }
        }
    }
}

/// Unlinks file `i` and forgets it.
fn remove(ctx: &Ctx<'_>, m: &mut ThreadModel, i: usize, op: Op) {
    let path = m.files[i].path.clone();
    match ctx.fs.unlink(&path) {
        Ok(()) => {
            let f = m.files.swap_remove(i);
            ctx.live.fetch_sub(f.bytes(), AtOrd::AcqRel);
            m.gone.push(path);
        }
        Err(e) => {
            // A refused unlink left the file as it was (durable still); another error may
            // have left it either way.
            if !matches!(e, Error::NoSpace(_)) {
                touched(m, i);
            }
            ctx.failed(op, &path, 0, e.into())
        }
    }
}

fn delete(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    let i = pick(m, false);
    ctx.count(Op::Delete);
    remove(ctx, m, i, Op::Delete);
}

fn fsync(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    let i = pick(m, false);
    let path = m.files[i].path.clone();
    match ctx.fs.open_file(&path, write_flags()) {
        Ok(f) => finish_fsync(ctx, m, i, &f),
        Err(e) => ctx.failed(Op::Fsync, &path, 0, e.into()),
    }
}

/// fsyncs file `i` through `f`; under a policy where that is durable, the model says so.
fn finish_fsync(ctx: &Ctx<'_>, m: &mut ThreadModel, i: usize, f: &tailbound::tbfs::File) {
    ctx.count(Op::Fsync);
    match f.fsync() {
        Ok(()) => {
            if fsync_is_durable(ctx.policy.0, ctx.policy.1) {
                m.files[i].made_durable();
            }
        }
        Err(e) => {
            let path = m.files[i].path.clone();
            ctx.failed(Op::Fsync, &path, 0, e.into())
        }
    }
}

fn read_check(ctx: &Ctx<'_>, m: &mut ThreadModel) {
    let i = pick(m, false);
    let path = m.files[i].path.clone();
    ctx.count(Op::Read);
    ctx.tally.files_checked.fetch_add(1, AtOrd::Relaxed);
    match read_all(&ctx.fs, &path, ctx.cfg.pool_bytes) {
        Ok(got) => {
            if let Some(bad) = m.files[i].content.mismatch(&got) {
                ctx.fail(format!(
                    "{}: {}",
                    ctx.where_(Op::Read, &path),
                    explain(ctx.writes, &got, &bad)
                ));
                // Go on with what the pool holds as far as the model can say: drop the file.
                remove(ctx, m, i, Op::Delete);
            }
        }
        Err(e) => ctx.failed(Op::Read, &path, 0, e.into()),
    }
}

/// `Fs::sync` with every thread between operations: everything is durable after it.
fn global_sync(ctx: &Ctx<'_>) {
    let _world = ctx.world.write();
    ctx.count(Op::Sync);
    match ctx.fs.sync() {
        Ok(()) => {
            for m in ctx.models {
                let mut m = m.lock();
                for f in &mut m.files {
                    f.made_durable();
                }
                let gone = std::mem::take(&mut m.gone);
                m.gone_durable.extend(gone);
                while m.gone_durable.len() > GONE_MAX {
                    m.gone_durable.pop_front();
                }
            }
        }
        Err(e) => ctx.failed(Op::Sync, "/", 0, e.into()),
    }
}

/// A snapshot with every thread between operations, remembering some files as they are.
fn snapshot(ctx: &Ctx<'_>) {
    if ctx.snaps.lock().held.len() >= SNAPSHOTS_MAX {
        return snapshot_drop(ctx);
    }
    let _world = ctx.world.write();
    ctx.count(Op::Snapshot);
    match ctx.fs.snapshot(None) {
        Ok(number) => {
            let mut sample = Vec::new();
            for (k, m) in ctx.models.iter().enumerate() {
                let mut m = m.lock();
                let n = m.files.len() as u64;
                for _ in 0..SNAPSHOT_SAMPLE.div_ceil(ctx.models.len()) {
                    if n > 0 && sample.len() < SNAPSHOT_SAMPLE + k {
                        let i = m.rng.below(n) as usize;
                        sample.push((m.files[i].path.clone(), m.files[i].content.clone()));
                    }
                }
            }
            ctx.snaps.lock().held.push(SnapRecord {
                number,
                sample,
                sure: true,
            });
        }
        Err(e) => ctx.failed(Op::Snapshot, "/", 0, e.into()),
    }
}

/// Drops the oldest snapshot, after reading its sampled files back.
fn snapshot_drop(ctx: &Ctx<'_>) {
    let Some(s) = ({
        let mut snaps = ctx.snaps.lock();
        if snaps.held.is_empty() {
            None
        } else {
            Some(snaps.held.remove(0))
        }
    }) else {
        return;
    };
    ctx.count(Op::SnapshotDrop);
    let power_out = || ctx.dev.power_is_out();
    check_snapshot(
        &ctx.fs,
        ctx.cfg,
        &s,
        ctx.tally,
        ctx.writes,
        &power_out,
        &|msg| ctx.fail(format!("level {:.0} %: {msg}", ctx.level * 100.0)),
    );
    // Pool-wide, as a snapshot is taken: no other thread's operation is in flight, so one that
    // was refused judges the space that snapshots pin against what pinned it then.
    let world = ctx.world.write();
    let dropped = ctx.fs.set_snapshot(s.number, false);
    drop(world);
    match dropped {
        Ok(()) => ctx.snaps.lock().dropped.push(s.number),
        Err(e) => {
            let no_space = matches!(e, Error::NoSpace(_));
            ctx.failed(
                Op::SnapshotDrop,
                &format!("snapshot {}", s.number),
                0,
                e.into(),
            );
            // Not dropped, or not acknowledged (a power cut may keep it or not): held still.
            let sure = no_space;
            ctx.snaps.lock().held.insert(0, SnapRecord { sure, ..s });
        }
    }
}
