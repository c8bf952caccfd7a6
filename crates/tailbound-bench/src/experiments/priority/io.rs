//! The writer and the copy: the case directory, the source file, the timed appends and the
//! copy's rates as its process reports them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailbound::sys::file::{AlignedBuf, O_DIRECT};
use tailbound::sys::time::{monotonic_now, MonoNanos};

use super::model::{Rate, LOG_BYTES_MAX, MIB, WRITER_PRIO, WRITE_BYTES};
use crate::experiments::tenants::{growth_in_window, interrupted};
use crate::stats::LatencyHistogram;
use crate::timer::PeriodicTimer;

/// A directory for one case's files on the loop file system, removed with them when dropped.
pub(super) struct CaseDir(pub(super) PathBuf);

impl CaseDir {
    pub(super) fn create(parent: &Path) -> Result<CaseDir, String> {
        let dir = tempfile::Builder::new()
            .prefix("case-")
            .tempdir_in(parent)
            .map_err(|e| format!("creating a case directory in {}: {e}", parent.display()))?;
        Ok(CaseDir(dir.keep()))
    }
}

impl Drop for CaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the copy's source: `bytes` of a non-zero pattern with `O_DIRECT`, then `fsync`.
pub(super) fn write_source(path: &Path, bytes: u64) -> Result<(), String> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(O_DIRECT)
        .open(path)
        .map_err(|e| format!("creating {} O_DIRECT: {e}", path.display()))?;
    let chunk = 8 * MIB;
    let mut buf = AlignedBuf::zeroed(chunk as usize, 4096);
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 239) as u8 | 0x40;
    }
    let bytes = bytes / MIB * MIB;
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(chunk) as usize;
        file.write_all_at(&buf.as_slice()[..n], at)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        at += n as u64;
    }
    file.sync_all()
        .map_err(|e| format!("fsync {}: {e}", path.display()))
}

/// A writer's latencies and its first write's start and last write's end (`CLOCK_MONOTONIC` ns).
pub(super) type WriterResult = Result<(LatencyHistogram, u64, u64), String>;

/// The high-priority writer: `writes` appends of 4 KiB with `O_SYNC`, paced or flat out.
pub(super) struct Writer {
    pub(super) dir: PathBuf,
    pub(super) writes: u64,
    pub(super) rate: Rate,
    pub(super) interrupted: Option<Arc<AtomicBool>>,
}

impl Writer {
    fn open_log(&self, n: u64) -> Result<(File, PathBuf), String> {
        let path = self.dir.join(format!("log-{n}"));
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .custom_flags(libc::O_SYNC)
            .open(&path)
            .map_err(|e| format!("creating {} O_SYNC: {e}", path.display()))?;
        Ok((file, path))
    }

    /// On the calling thread, in the real-time I/O class: returns the latencies and the first
    /// write's start and the last write's end (`CLOCK_MONOTONIC` ns).
    pub(super) fn run_kernel(self) -> Result<(LatencyHistogram, u64, u64), String> {
        WRITER_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("setting the writer's real-time I/O priority: {e}"))?;
        let data = [0x5au8; WRITE_BYTES];
        let mut log_no = 0;
        let (mut log, mut log_path) = self.open_log(log_no)?;
        timed_appends(self.writes, self.rate, &self.interrupted, |step| {
            if step == LogStep::NewLog {
                std::fs::remove_file(&log_path)
                    .map_err(|e| format!("removing {}: {e}", log_path.display()))?;
                log_no += 1;
                (log, log_path) = self.open_log(log_no)?;
                return Ok(());
            }
            log.write_all(&data)
                .map_err(|e| format!("writing {}: {e}", log_path.display()))
        })
    }
}

/// What the writer's loop asks of its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogStep {
    /// Start a new log (every [`LOG_BYTES_MAX`]; not timed).
    NewLog,
    /// Append [`WRITE_BYTES`] synchronously (timed).
    Append,
}

/// The writer's loop: `writes` timed appends, paced at `rate` or flat out, with a new log every
/// [`LOG_BYTES_MAX`]; `step` does each. Returns the latencies and the first write's start and the
/// last write's end (`CLOCK_MONOTONIC` ns).
pub(super) fn timed_appends(
    writes: u64,
    rate: Rate,
    interrupt: &Option<Arc<AtomicBool>>,
    mut step: impl FnMut(LogStep) -> Result<(), String>,
) -> Result<(LatencyHistogram, u64, u64), String> {
    let mut hist = LatencyHistogram::new();
    let mut log_bytes = 0u64;
    let mut timer = match rate {
        Rate::Paced(n) => Some(PeriodicTimer::new(Duration::from_secs_f64(
            1.0 / f64::from(n),
        ))),
        Rate::FlatOut => None,
    };
    let first = monotonic_now().0;
    for i in 0..writes {
        if i % 64 == 0 && interrupted(interrupt) {
            return Err("interrupted".into());
        }
        if log_bytes >= LOG_BYTES_MAX {
            step(LogStep::NewLog)?;
            log_bytes = 0;
        }
        if let Some(timer) = timer.as_mut() {
            timer.skip_missed();
            timer
                .wait()
                .map_err(|e| format!("waiting for the timer: {e}"))?;
        }
        let start = Instant::now();
        step(LogStep::Append)?;
        hist.record(start.elapsed());
        log_bytes += WRITE_BYTES as u64;
    }
    Ok((hist, first, monotonic_now().0))
}

/// The copy's throughput alone (from `go` to `alone_end`, and for `alone_after` after the
/// writer's run) and under the writer (over the writer's run `w0..w1`), from its `(time, bytes
/// copied)` samples, in MB/s.
pub(super) fn copy_rates(
    samples: &[(u64, u64)],
    go: MonoNanos,
    alone_end: MonoNanos,
    w0: u64,
    w1: u64,
    alone_after: Duration,
) -> (f64, f64) {
    let after_ns = u64::try_from(alone_after.as_nanos()).unwrap_or(u64::MAX);
    // The window after the writer ends where the samples end, should the copy stop early.
    let after_end = samples
        .last()
        .map_or(w1, |&(t, _)| t.min(w1.saturating_add(after_ns)));
    let alone_ns = alone_end.0.saturating_sub(go.0) + after_end.saturating_sub(w1);
    let alone = (growth_in_window(samples, go.0, alone_end.0)
        + growth_in_window(samples, w1, after_end))
        / MIB as f64
        / Duration::from_nanos(alone_ns.max(1)).as_secs_f64();
    let under = growth_in_window(samples, w0, w1)
        / MIB as f64
        / Duration::from_nanos(w1.saturating_sub(w0)).as_secs_f64();
    (alone, under)
}
