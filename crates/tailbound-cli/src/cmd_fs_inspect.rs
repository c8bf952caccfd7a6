//! `tailbound fs fsck` and `tailbound fs info`: checking a pool and describing it.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tailbound::serve::Client;
use tailbound::tbfs::format::{Superblock, BLOCK_U64};
use tailbound::tbfs::fsck::{self, FsckReport, RepairReport, Verdict};
use tailbound::tbfs::{Fs, OpenOptions};
use tailbound::units::Bytes;
use tailbound_bench::progress::Progress;
use tailbound_bench::report::write_json;

use crate::cmd_fs_common::{
    barrier_name, detect_backend, in_pool, open_device, ordering_name, refuse_served, utc, Backend,
    PoolArg,
};
use crate::{CliResult, ExitStatus};

#[derive(Serialize)]
struct FsckJson<'a> {
    verdict: Verdict,
    findings: &'a [fsck::Finding],
    stats: &'a fsck::FsckStats,
    repair: Option<&'a RepairReport>,
}

fn print_report(r: &FsckReport, verbose: bool) {
    let s = &r.stats;
    println!(
        "superblocks: {} of 2 valid (generation {}); segments: {} of {} in use; logs: {}",
        s.superblocks_valid, s.generation, s.segments_in_use, s.segments, s.logs
    );
    println!(
        "roll-forward chain: {} logs; {}",
        s.chain_logs,
        if s.chain_end.is_empty() {
            "-"
        } else {
            &s.chain_end
        }
    );
    println!(
        "checkpoints checked: {}; tree: {} directories, {} files, {}",
        s.checkpoints
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        s.directories,
        s.files,
        Bytes(s.file_bytes)
    );
    let shown = if verbose { usize::MAX } else { 50 };
    for f in r.findings.iter().take(shown) {
        println!("  {f}");
    }
    if r.findings.len() > shown {
        println!(
            "  ... and {} more (--verbose or --json for all)",
            r.findings.len() - shown
        );
    }
    let damage = r.damage().count();
    let notes = r.findings.len() - damage;
    println!(
        "{}: {damage} damage, {notes} notes",
        match r.verdict {
            Verdict::Clean => "clean",
            Verdict::Damaged => "damaged",
            Verdict::Unrecoverable => "unrecoverable",
        }
    );
}

pub(crate) fn run_fsck(
    pool: &PoolArg,
    repair: bool,
    verbose: bool,
    json: Option<&Path>,
) -> CliResult {
    if let Err(e) = refuse_served(pool, "check it") {
        eprintln!("tailbound: error: {e}");
        return Err(ExitStatus(8).into());
    }
    let (dev, backend) = match open_device(pool) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tailbound: error: {e}");
            return Err(ExitStatus(8).into());
        }
    };
    if repair {
        // Holding the pool's lock to change it, as a server would.
        crate::serving::warn_of_last_server(&pool.pool);
    }
    println!("fsck {} ({backend} backend)", pool.pool.display());
    let bar = Progress::new(0, "fsck: reading segments");
    let checked = fsck::check_with_progress(&*dev, &|done, total| {
        if done == 0 {
            bar.set_length(total);
        }
        bar.set_position(done);
    });
    bar.finish();
    let before = match checked {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tailbound: error: {}: {e}", pool.pool.display());
            return Err(ExitStatus(8).into());
        }
    };
    print_report(&before, verbose);
    let mut repaired = None;
    let mut code = match before.verdict {
        Verdict::Clean => 0,
        Verdict::Damaged => 1,
        Verdict::Unrecoverable => 2,
    };
    if repair && before.verdict == Verdict::Damaged {
        match fsck::repair(dev) {
            Ok(r) => {
                println!(
                    "repair ({}):",
                    match r.method {
                        fsck::RepairMethod::None => "nothing to do",
                        fsck::RepairMethod::InPlace => "in place",
                        fsck::RepairMethod::Rebuilt => "rebuilt",
                    }
                );
                for a in &r.actions {
                    println!("  {a}");
                }
                if r.lost.is_empty() {
                    println!("lost: nothing");
                } else {
                    println!("lost:");
                    for l in &r.lost {
                        println!("  {l}");
                    }
                }
                println!("after repair:");
                print_report(&r.after, verbose);
                if r.after.verdict != Verdict::Clean {
                    code = 2;
                }
                repaired = Some(r);
            }
            Err(e) => {
                eprintln!(
                    "tailbound: error: repair failed: {}: {e}",
                    pool.pool.display()
                );
                code = 2;
            }
        }
    } else if before.verdict == Verdict::Damaged {
        println!(
            "run `tailbound fs fsck --repair` to salvage what is intact (copy the pool first)"
        );
    }
    if let Some(json) = json {
        let last = repaired.as_ref().map_or(&before, |r| &r.after);
        write_json(
            json,
            &FsckJson {
                verdict: last.verdict,
                findings: &before.findings,
                stats: &before.stats,
                repair: repaired.as_ref(),
            },
        )?;
    }
    if code == 0 {
        Ok(())
    } else {
        Err(ExitStatus(code).into())
    }
}

#[derive(Serialize)]
struct InfoJson {
    path: String,
    backend: String,
    format_version: u32,
    pool_id: String,
    size: u64,
    block_size: u64,
    segment_bytes: u64,
    segments: u64,
    generation: u64,
    created_ns: i64,
    superblock_written_ns: i64,
    checkpoint: u64,
    ordering: String,
    barrier: String,
    superblock_every_bytes: u64,
    superblock_every_ms: u64,
    checkpoint_every_ms: u64,
    dirty_bytes_max: u64,
    recovery: RecoveryJson,
    inodes: u64,
    free_bytes: u64,
    /// The I/O scheduler's profile for a file pool (none for a memory pool, which does no I/O).
    scheduler: Option<SchedulerJson>,
    /// The server that owns the pool (`tailbound serve`), if one answers on its socket; then
    /// `recovery` is what it found when it opened the pool.
    server: Option<ServerJson>,
}

#[derive(Serialize)]
struct ServerJson {
    pid: u32,
    socket: String,
}

#[derive(Serialize)]
struct SchedulerJson {
    /// `stored` (read from `profile_path`), `missing` or `unreadable` (then the conservative
    /// profile is used).
    profile: &'static str,
    profile_path: Option<String>,
    /// Why a stored profile could not be used.
    problem: Option<String>,
    max_io_read: u64,
    max_io_write: u64,
    /// Bytes written before the scheduler flushes on its own (none: it never does).
    flush_debt: Option<u64>,
}

impl SchedulerJson {
    fn for_pool(path: &Path) -> SchedulerJson {
        use tailbound::sched::calibrate::{profile_and_source, ProfileSource};
        let (p, source) = profile_and_source(path);
        let shown = |q: &Path| Some(q.display().to_string());
        let (profile, profile_path, problem) = match &source {
            ProfileSource::Stored(q) => ("stored", shown(q), None),
            ProfileSource::Missing(q) => ("missing", q.as_deref().and_then(shown), None),
            ProfileSource::Unreadable(q, e) => ("unreadable", shown(q), Some(e.clone())),
        };
        SchedulerJson {
            profile,
            profile_path,
            problem,
            max_io_read: p.max_io_read,
            max_io_write: p.max_io_write,
            flush_debt: p.flush_debt(),
        }
    }

    fn describe(&self) -> String {
        let pieces = format!(
            "reads split to {}, writes to {}, {}",
            Bytes(self.max_io_read),
            Bytes(self.max_io_write),
            self.flush_debt
                .map_or("no flush debt".to_string(), |d| format!(
                    "a flush after {} written",
                    Bytes(d)
                ))
        );
        let path = self
            .profile_path
            .as_deref()
            .unwrap_or("(no profile directory)");
        match (self.profile, &self.problem) {
            ("stored", _) => format!("profile {path}: {pieces}"),
            (_, Some(problem)) => {
                format!("conservative profile ({problem}; it is not used): {pieces}")
            }
            _ => format!(
                "conservative profile (none at {path}; `tailbound calibrate` on a scratch file \
                 on the same storage with --out {path} makes one): {pieces}"
            ),
        }
    }
}

#[derive(Serialize)]
struct RecoveryJson {
    superblock_copy: u8,
    checkpoint: u64,
    logs_rolled_forward: u64,
    bytes_rolled_forward: u64,
    stop_reason: String,
    orphans: u64,
    elapsed_ms: f64,
}

pub(crate) fn info(pool: &PoolArg, json: Option<&Path>) -> CliResult {
    // A served pool is asked of its server: its device is the server's to open.
    let (device_bytes, superblocks, backend, config, r, v, server) =
        match Client::for_pool(&pool.pool) {
            Some(c) => {
                let i = c.info().map_err(|e| in_pool(pool, e))?;
                let v = c.statvfs().map_err(|e| in_pool(pool, e))?;
                let server = ServerJson {
                    pid: c.server_pid(),
                    socket: c.socket().display().to_string(),
                };
                let backend = detect_backend(&pool.pool, pool.backend);
                let (config, r) = (i.config, i.recovery);
                (
                    i.device_bytes,
                    i.superblocks,
                    backend,
                    config,
                    r,
                    v,
                    Some(server),
                )
            }
            None => {
                let (dev, backend) = open_device(pool)?;
                let mut blocks = vec![0u8; 2 * BLOCK_U64 as usize];
                dev.read_at(0, &mut blocks).map_err(|e| in_pool(pool, e))?;
                let len = dev.len();
                let fs = Fs::open(
                    dev,
                    &OpenOptions {
                        read_only: true,
                        ..OpenOptions::default()
                    },
                )
                .map_err(|e| in_pool(pool, e))?;
                let v = fs.statvfs().map_err(|e| in_pool(pool, e))?;
                (
                    len,
                    blocks,
                    backend,
                    fs.config(),
                    fs.recovery_report(),
                    v,
                    None,
                )
            }
        };
    let mut newest: Option<Superblock> = None;
    let mut why = Vec::new();
    for (copy, b) in superblocks.chunks_exact(BLOCK_U64 as usize).enumerate() {
        match Superblock::decode(b, device_bytes) {
            Ok(sb) => {
                if newest.as_ref().is_none_or(|n| sb.generation > n.generation) {
                    newest = Some(sb);
                }
            }
            Err(e) => why.push(format!("copy {copy}: {e}")),
        }
    }
    // Both copies refused: say why (a pool of a newer format is not damaged).
    let sb = newest.ok_or_else(|| {
        in_pool(
            pool,
            format!(
                "no valid superblock ({}; `tailbound fs fsck` checks a damaged pool)",
                why.join("; ")
            ),
        )
    })?;
    let c = config;
    let out = InfoJson {
        path: pool.pool.display().to_string(),
        backend: backend.to_string(),
        format_version: sb.version,
        pool_id: sb.pool_id.iter().map(|b| format!("{b:02x}")).collect(),
        size: sb.pool_bytes,
        block_size: BLOCK_U64,
        segment_bytes: sb.segment_blocks * BLOCK_U64,
        segments: sb.segment_count,
        generation: sb.generation,
        created_ns: sb.created_ns,
        superblock_written_ns: sb.written_ns,
        checkpoint: sb.checkpoint,
        ordering: ordering_name(c.ordering).into(),
        barrier: barrier_name(c.barrier).into(),
        superblock_every_bytes: c.superblock_every_bytes,
        superblock_every_ms: c.superblock_every.as_millis() as u64,
        checkpoint_every_ms: c.checkpoint_every.map_or(0, |d| d.as_millis() as u64),
        dirty_bytes_max: c.dirty_bytes_max,
        recovery: RecoveryJson {
            superblock_copy: r.superblock,
            checkpoint: r.checkpoint,
            logs_rolled_forward: r.logs_rolled_forward,
            bytes_rolled_forward: r.bytes_rolled_forward,
            stop_reason: r.stop_reason.clone(),
            orphans: r.orphans_reclaimed,
            elapsed_ms: r.elapsed.as_secs_f64() * 1e3,
        },
        inodes: v.files,
        free_bytes: v.blocks_free * v.block_size,
        scheduler: (backend == Backend::File).then(|| SchedulerJson::for_pool(&pool.pool)),
        server,
    };
    println!("pool:        {} ({} backend)", out.path, out.backend);
    if let Some(s) = &out.server {
        println!("served:      by process {} on {}", s.pid, s.socket);
    }
    println!(
        "format:      tbfs version {}, {}-byte blocks, id {}",
        out.format_version, out.block_size, out.pool_id
    );
    println!(
        "size:        {} in {} segments of {}",
        Bytes(out.size),
        out.segments,
        Bytes(out.segment_bytes)
    );
    println!("created:     {} UTC", utc(out.created_ns));
    println!(
        "superblock:  generation {}, written {} UTC, names checkpoint {}",
        out.generation,
        utc(out.superblock_written_ns),
        out.checkpoint
    );
    println!(
        "config:      ordering {}, barrier {}, superblock every {} or {}, checkpoint every {}, buffered data up to {}",
        out.ordering,
        out.barrier,
        Bytes(out.superblock_every_bytes),
        fmt_ms(out.superblock_every_ms),
        if out.checkpoint_every_ms == 0 { "never".to_string() } else { fmt_ms(out.checkpoint_every_ms) },
        Bytes(out.dirty_bytes_max)
    );
    println!(
        "open:        checkpoint {} from superblock copy {}, {} logs ({}) rolled forward in {:.1} ms; {}",
        out.recovery.checkpoint,
        out.recovery.superblock_copy,
        out.recovery.logs_rolled_forward,
        Bytes(out.recovery.bytes_rolled_forward),
        out.recovery.elapsed_ms,
        out.recovery.stop_reason
    );
    if out.recovery.orphans > 0 {
        println!(
            "             {} orphaned inodes would be freed on a writable open",
            out.recovery.orphans
        );
    }
    println!(
        "contents:    {} inodes, {} free",
        out.inodes,
        Bytes(out.free_bytes)
    );
    if let Some(sched) = &out.scheduler {
        println!("scheduler:   {}", sched.describe());
    }
    if let Some(json) = json {
        write_json(json, &out)?;
    }
    Ok(())
}

fn fmt_ms(ms: u64) -> String {
    format!("{:?}", Duration::from_millis(ms))
}
