//! `tailbound bench delete`: how long deleting a large file holds tbfs's metadata lock.
//!
//! A log-structured file system frees a deleted file's blocks by bookkeeping, not by writing: each
//! block's segment loses a live block, and the checkpoint after it records the inode gone. That
//! bookkeeping runs under the metadata lock every other writer needs, so a large delete must not
//! stall them. Each case formats a memory pool, writes one file of the given size and syncs it,
//! then deletes it and syncs again, reading how long the metadata lock was held
//! (`FsCounters::meta_held_ns`) across the unlink alone and across the sync that records it. The
//! background thread is off, so nothing else takes the lock meanwhile. Each size runs twice: as
//! is, and with a snapshot taken before the delete, which keeps every block (each is pinned
//! rather than freed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::progress::Progress;
use crate::report::{Table, TargetCheck};
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::{Config, Fs, OpenFlags};

/// The most the unlink of a 1 GiB file may hold the metadata lock.
pub const UNLINK_HOLD_TARGET: Duration = Duration::from_millis(10);
const GIB: u64 = 1 << 30;

/// The experiment's settings.
#[derive(Debug, Clone)]
pub struct DeleteBench {
    /// File sizes, one case each.
    pub sizes: Vec<u64>,
    pub repeats: u32,
}

impl DeleteBench {
    pub fn full() -> DeleteBench {
        DeleteBench {
            sizes: vec![64 << 20, 256 << 20, GIB],
            repeats: 3,
        }
    }

    pub fn quick() -> DeleteBench {
        DeleteBench {
            sizes: vec![16 << 20, 64 << 20],
            repeats: 1,
        }
    }
}

/// One size's result: every repeat's figures, in run order, and their maxima.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteCase {
    pub file_bytes: u64,
    /// A snapshot taken before the delete keeps the file's blocks.
    pub snapshot: bool,
    pub unlink_hold_ms: Vec<f64>,
    pub unlink_wall_ms: Vec<f64>,
    pub sync_hold_ms: Vec<f64>,
    pub sync_wall_ms: Vec<f64>,
    pub unlink_hold_max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeleteReport {
    pub experiment: &'static str,
    pub repeats: u32,
    pub cases: Vec<DeleteCase>,
    pub targets: Vec<TargetCheck>,
}

struct Run {
    unlink_hold: Duration,
    unlink_wall: Duration,
    sync_hold: Duration,
    sync_wall: Duration,
}

fn held(fs: &Fs) -> u64 {
    fs.counters().meta_held_ns
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl DeleteBench {
    fn run_one(&self, file_bytes: u64, snapshot: bool) -> Result<Run, String> {
        // Room for the file, its metadata and the cleaner's margins.
        let pool_bytes = file_bytes + file_bytes / 4 + (256 << 20);
        let dev: Arc<dyn Device> = Arc::new(
            MemoryPool::anonymous(pool_bytes)
                .map_err(|e| format!("{pool_bytes} bytes of memory for the pool: {e}"))?,
        );
        let config = Config {
            background_gc: false,
            checkpoint_every: None,
            superblock_every: Duration::from_secs(3600),
            ..Config::memory_pool()
        };
        let fs = Fs::format(dev, &config).map_err(|e| format!("format: {e}"))?;
        let f = fs
            .open_file("/big", OpenFlags::create())
            .map_err(|e| format!("create: {e}"))?;
        let chunk: Vec<u8> = (0..8u64 << 20).map(|i| (i * 31 % 251) as u8).collect();
        let mut at = 0;
        while at < file_bytes {
            let n = (file_bytes - at).min(chunk.len() as u64) as usize;
            f.pwrite(&chunk[..n], at)
                .map_err(|e| format!("writing the file at {at}: {e}"))?;
            at += n as u64;
        }
        f.fsync().map_err(|e| format!("fsync: {e}"))?;
        drop(f);
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        if snapshot {
            fs.snapshot(Some("before-delete"))
                .map_err(|e| format!("snapshot: {e}"))?;
        }

        let before = held(&fs);
        let start = Instant::now();
        fs.unlink("/big").map_err(|e| format!("unlink: {e}"))?;
        let unlink_wall = start.elapsed();
        let after_unlink = held(&fs);
        let start = Instant::now();
        fs.sync()
            .map_err(|e| format!("sync after the unlink: {e}"))?;
        let sync_wall = start.elapsed();
        let after_sync = held(&fs);
        let space = fs.space().map_err(|e| e.to_string())?;
        if space.live >= file_bytes || (snapshot && space.pinned_by_snapshots < file_bytes) {
            return Err(format!(
                "the file's {file_bytes} bytes are still live, or not kept by the snapshot \
                 ({snapshot}), after the delete: {space:?}"
            ));
        }
        Ok(Run {
            unlink_hold: Duration::from_nanos(after_unlink - before),
            unlink_wall,
            sync_hold: Duration::from_nanos(after_sync - after_unlink),
            sync_wall,
        })
    }

    pub fn run(&self, progress: &Progress) -> Result<DeleteReport, String> {
        let mut cases = Vec::with_capacity(self.sizes.len());
        for (size, snapshot) in self.sizes.iter().flat_map(|&s| [(s, false), (s, true)]) {
            let mut runs = Vec::with_capacity(self.repeats as usize);
            for _ in 0..self.repeats {
                runs.push(self.run_one(size, snapshot)?);
                progress.inc(1);
            }
            let collect = |f: fn(&Run) -> Duration| runs.iter().map(|r| ms(f(r))).collect();
            let unlink_hold_ms: Vec<f64> = collect(|r| r.unlink_hold);
            cases.push(DeleteCase {
                file_bytes: size,
                snapshot,
                unlink_hold_max_ms: unlink_hold_ms.iter().copied().fold(0.0, f64::max),
                unlink_hold_ms,
                unlink_wall_ms: collect(|r| r.unlink_wall),
                sync_hold_ms: collect(|r| r.sync_hold),
                sync_wall_ms: collect(|r| r.sync_wall),
            });
        }
        let targets = cases
            .iter()
            .filter(|c| c.file_bytes == GIB)
            .map(|c| TargetCheck {
                target: format!(
                    "unlinking a 1 GiB file{} holds the metadata lock < {} ms (max of runs)",
                    if c.snapshot { " a snapshot keeps" } else { "" },
                    UNLINK_HOLD_TARGET.as_millis()
                ),
                measured: format!("{:.2} ms", c.unlink_hold_max_ms),
                met: c.unlink_hold_max_ms < ms(UNLINK_HOLD_TARGET),
            })
            .collect();
        Ok(DeleteReport {
            experiment: "delete",
            repeats: self.repeats,
            cases,
            targets,
        })
    }
}

impl DeleteReport {
    pub fn to_markdown(&self) -> String {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let mut table = Table::new(vec![
            "file".into(),
            "unlink: lock held (ms)".into(),
            "unlink: wall (ms)".into(),
            "sync after: lock held (ms)".into(),
            "sync after: wall (ms)".into(),
        ]);
        for c in &self.cases {
            table.push(vec![
                format!(
                    "{} MiB{}",
                    c.file_bytes >> 20,
                    if c.snapshot {
                        ", kept by a snapshot"
                    } else {
                        ""
                    }
                ),
                list(&c.unlink_hold_ms),
                list(&c.unlink_wall_ms),
                list(&c.sync_hold_ms),
                list(&c.sync_wall_ms),
            ]);
        }
        let mut out = table.to_markdown();
        if !self.targets.is_empty() {
            out.push('\n');
            out.push_str(&crate::report::targets_markdown(&self.targets));
        }
        out
    }
}
