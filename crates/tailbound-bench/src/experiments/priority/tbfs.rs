//! The tbfs side of `bench priority`: a pool on the loop file system behind tailbound's
//! scheduler, with the writer and the copy as threads of this process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tailbound::sched::{Policy, Prio};
use tailbound::sys::time::monotonic_now;

use super::phases::PhaseLog;
use super::{
    copy_rates, timed_appends, CaseDir, CopyMode, LogStep, PriorityBench, PriorityRow, Rate,
    COPY_CHUNK_BYTES, COPY_PRIO, WRITER_PRIO, WRITE_BYTES,
};
use crate::experiments::blockdev::{KernelSched, SchedulerGuard};
use crate::experiments::loopfs::LoopFs;
use crate::experiments::tenants::interrupted;
use crate::stats::LatencyHistogram;
use tailbound::phases::Lock;

/// A tbfs case's pool, dropped in this order: the file system, then its directory on the loop
/// file system, then the loop device's scheduler setting.
pub(super) struct TbfsPool {
    pub(super) fs: tailbound::tbfs::Fs,
    /// The scheduler in front of the pool (the served cases check whom it charged).
    pub(super) scheduler: std::sync::Arc<tailbound::sched::Scheduler>,
    _work: CaseDir,
    _sched: SchedulerGuard,
}

impl PriorityBench {
    /// A fresh pool for a tbfs case: a pool file on the loop file system (the loop device's
    /// scheduler set to `none`, so only tailbound's orders the I/O) behind tailbound's scheduler
    /// with `policy` and depth 1, flushing every log (so a sync is durable on return).
    pub(super) fn tbfs_pool(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
    ) -> Result<TbfsPool, String> {
        let sched = SchedulerGuard::set(device, KernelSched::None).map_err(|e| e.to_string())?;
        let work = CaseDir::create(fs.mount_point())?;
        let pool = work.0.join("pool.tbfs");
        let file_dev =
            crate::experiments::pool::create_file_pool(&pool, 2 * self.copy_bytes + (512 << 20))
                .map_err(|e| format!("creating the pool {}: {e}", pool.display()))?;
        // By default one request in the device at a time (BFQ's strict_guarantees): an RT request
        // waits for at most one piece of the copy, or one flush of the debt. The copy is one
        // thread doing one request at a time, so it loses little by it.
        let cfg = tailbound::sched::Config {
            policy,
            depth: self.tbfs_depth,
            ..tailbound::sched::Config::with_profile(profile.clone())
        };
        // Every log flushed (`every-log`): a sync returns once its append is durable on the
        // device, as the kernel side's `fdatasync` on ext4 does. Under the default barrier a
        // sync's data-only log is written but left in the device's cache until the next
        // checkpoint, which a power cut could lose.
        let (scheduler, tbfs) = crate::experiments::pool::format_behind_scheduler(
            file_dev,
            cfg,
            tailbound::tbfs::Barrier::EveryLog,
        )?;
        Ok(TbfsPool {
            fs: tbfs,
            scheduler,
            _work: work,
            _sched: sched,
        })
    }

    /// The writer of the tbfs cases alone, with no copy, in a fresh pool.
    pub(super) fn run_tbfs_alone(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        let pool = self.tbfs_pool(fs, device, profile, policy)?;
        let ((hist, _, _), phases) = self.tbfs_writer(&pool.fs, rate)?;
        Ok(PriorityRow {
            with_copy: false,
            slowest: phases.slowest(),
            phases_sum: Some(phases.sum()),
            meta_holds: phases.holds(),
            log_writer_holds: phases.log_writer_holds(),
            pool_waits: phases.pool(),
            ..PriorityRow::from_histogram("tbfs", policy.name().into(), rate, &hist, 0.0, 0.0)
        })
    }

    /// One tbfs case: a pool as [`PriorityBench::tbfs_pool`] makes it; the copy is a thread at
    /// best-effort level 7 copying a file inside the pool in 1 MiB reads and writes, through the
    /// pool's buffered write path with no sync as `cp` writes (`CopyMode::Buffered`), or each
    /// write made durable with `fdatasync` (`CopyMode::Direct`); the writer a thread in the real-time class appending 4 KiB
    /// with `fdatasync`. Both threads' scheduler tenants follow their kernel ioprio.
    pub(super) fn run_tbfs_case(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        use tailbound::tbfs::OpenFlags;
        let pool = self.tbfs_pool(fs, device, profile, policy)?;
        let tbfs = &pool.fs;
        let chunk = COPY_CHUNK_BYTES as usize;
        let chunks = self.tbfs_source(tbfs)?;
        let stop = AtomicBool::new(false);
        let copy_mode = self.copy_mode;
        let (samples, go, alone_end, result) = std::thread::scope(|s| {
            let stop = &stop;
            let copier = s.spawn(move || -> Result<Vec<(u64, u64)>, String> {
                COPY_PRIO
                    .apply_to_current_thread()
                    .map_err(|e| format!("setting the copy's I/O priority: {e}"))?;
                let src = tbfs
                    .open_file("/source", OpenFlags::read_only())
                    .map_err(|e| format!("opening the source: {e}"))?;
                let mut buf = vec![0u8; chunk];
                let mut samples = vec![(monotonic_now().0, 0u64)];
                let mut total = 0u64;
                let mut pass = 0u64;
                'copying: loop {
                    // The previous copy goes before the next starts, so the pool holds the
                    // source and one copy.
                    if pass > 0 {
                        let old = format!("/copy-{}", pass - 1);
                        tbfs.unlink(&old)
                            .map_err(|e| format!("removing {old}: {e}"))?;
                    }
                    let name = format!("/copy-{pass}");
                    let dst = tbfs
                        .open_file(&name, OpenFlags::create())
                        .map_err(|e| format!("creating {name}: {e}"))?;
                    for k in 0..chunks {
                        if stop.load(Ordering::Relaxed) {
                            break 'copying;
                        }
                        let at = k * COPY_CHUNK_BYTES;
                        src.pread(&mut buf, at)
                            .and_then(|_| dst.pwrite(&buf, at))
                            .and_then(|_| match copy_mode {
                                CopyMode::Direct => dst.fdatasync(),
                                CopyMode::Buffered => Ok(()),
                            })
                            .map_err(|e| format!("copying at {at}: {e}"))?;
                        total += COPY_CHUNK_BYTES;
                        samples.push((monotonic_now().0, total));
                    }
                    drop(dst);
                    pass += 1;
                }
                Ok(samples)
            });
            let go = monotonic_now();
            let alone_end = go.plus(self.copy_alone);
            while monotonic_now().0 < alone_end.0 && !copier.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let result = if copier.is_finished() {
                Err("the copy ended before the writer started".to_string())
            } else {
                self.tbfs_writer(tbfs, rate)
            };
            // Alone again as long (see the kernel case).
            if result.is_ok() {
                let after_end = monotonic_now().plus(self.copy_alone);
                while monotonic_now().0 < after_end.0
                    && !copier.is_finished()
                    && !interrupted(&self.interrupted)
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            stop.store(true, Ordering::Relaxed);
            let samples = copier
                .join()
                .unwrap_or_else(|_| Err("the copy thread panicked".into()));
            (samples, go, alone_end, result)
        });
        let samples = samples?;
        let ((hist, w0, w1), phases) = result?;
        if interrupted(&self.interrupted) {
            return Err("interrupted".into());
        }
        let (alone, under) = copy_rates(&samples, go, alone_end, w0, w1, self.copy_alone);
        Ok(PriorityRow {
            slowest: phases.slowest(),
            phases_sum: Some(phases.sum()),
            meta_holds: phases.holds(),
            log_writer_holds: phases.log_writer_holds(),
            pool_waits: phases.pool(),
            ..PriorityRow::from_histogram("tbfs", policy.name().into(), rate, &hist, under, alone)
        })
    }

    /// Writes the copy's source, `/source`, in the pool and syncs it; returns its chunks.
    pub(super) fn tbfs_source(&self, tbfs: &tailbound::tbfs::Fs) -> Result<u64, String> {
        use tailbound::tbfs::OpenFlags;
        let chunk = COPY_CHUNK_BYTES as usize;
        let pattern: Vec<u8> = (0..chunk).map(|i| (i % 239) as u8 | 0x40).collect();
        let chunks = (self.copy_bytes / COPY_CHUNK_BYTES).max(1);
        let src = tbfs
            .open_file("/source", OpenFlags::create())
            .map_err(|e| format!("creating the copy's source: {e}"))?;
        for k in 0..chunks {
            src.pwrite(&pattern, k * COPY_CHUNK_BYTES)
                .map_err(|e| format!("writing the copy's source: {e}"))?;
        }
        src.fsync()
            .map_err(|e| format!("writing the copy's source: {e}"))?;
        Ok(chunks)
    }

    /// The writer of a tbfs case, on the calling thread in the real-time I/O class: `writes`
    /// appends of 4 KiB to `/log`, each followed by `fdatasync`, paced or flat out; the log is
    /// started afresh every [`LOG_BYTES_MAX`]. Each append's phases go to the [`PhaseLog`].
    fn tbfs_writer(
        &self,
        tbfs: &tailbound::tbfs::Fs,
        rate: Rate,
    ) -> Result<((LatencyHistogram, u64, u64), PhaseLog), String> {
        use tailbound::tbfs::OpenFlags;
        let before = Prio::of_current_thread();
        WRITER_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("setting the writer's real-time I/O priority: {e}"))?;
        let outcome = (|| {
            let data = [0x5au8; WRITE_BYTES];
            let open_log = || {
                tbfs.open_file(
                    "/log",
                    OpenFlags {
                        truncate: true,
                        ..OpenFlags::create()
                    },
                )
                .map_err(|e| format!("creating /log: {e}"))
            };
            let mut log = open_log()?;
            let mut phases = PhaseLog::default();
            let _ = tailbound::phases::take_longest_holds(Lock::Meta);
            let _ = tailbound::phases::take_longest_holds(Lock::LogWriter);
            let counters_before = tbfs.counters();
            let timed = timed_appends(self.writes, rate, &self.interrupted, |step| {
                if step == LogStep::NewLog {
                    log = open_log()?;
                    return Ok(());
                }
                // The clock starts again here, so what it holds after is this append's.
                let _ = tailbound::phases::take();
                let done = log
                    .append(&data)
                    .and_then(|_| log.fdatasync())
                    .map_err(|e| format!("appending to /log: {e}"));
                phases.record(tailbound::phases::take());
                done
            })?;
            phases.set_pool(super::phases::PoolWaits::between(
                &counters_before,
                &tbfs.counters(),
            ));
            phases.set_holds(
                &tailbound::phases::take_longest_holds(Lock::Meta),
                &tailbound::phases::take_longest_holds(Lock::LogWriter),
            );
            Ok((timed, phases))
        })();
        // The calling thread goes back to the priority it had.
        let _ = before.apply_to_current_thread();
        outcome
    }
}
