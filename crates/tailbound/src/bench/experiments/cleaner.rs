//! `tailbound bench cleaner`: sustained write throughput and write amplification of tbfs with its
//! cleaner, at several pool utilisations, for a uniform-random overwrite workload and a hot/cold
//! one (90 % of the writes to 10 % of the data), after Rosenblum & Ousterhout's LFS evaluation.
//!
//! Each case formats a memory pool, fills `utilisation` of it with files, overwrites 4 KiB blocks
//! until `warmup` pool capacities have been written (so the cleaner reaches its steady state), then
//! measures while `measure` more capacities are written: MB/s over the wall time of the writes
//! (cleaning included, since writers wait for the cleaner), and write amplification = bytes the
//! engine wrote to the device (logs of data, metadata, checkpoints, superblocks and the cleaner's
//! copies) / bytes the workload wrote. The amplification is a count, the same on any machine for
//! a seed; the throughput depends on the machine and what else runs on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::progress::Progress;
use crate::bench::report::{Table, TargetCheck};
use crate::dev::memory::MemoryPool;
use crate::dev::Device;
use crate::tbfs::{Barrier, Config, Fs, OpenFlags, Ordering};

/// Which blocks the overwrites hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Every block equally likely.
    Uniform,
    /// 90 % of the writes to the first 10 % of the blocks.
    HotCold,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Uniform => "uniform",
            Access::HotCold => "hot-cold",
        }
    }

    pub fn parse(s: &str) -> Option<Access> {
        match s {
            "uniform" => Some(Access::Uniform),
            "hot-cold" | "hotcold" => Some(Access::HotCold),
            _ => None,
        }
    }
}

/// The experiment's settings.
#[derive(Debug, Clone)]
pub struct CleanerBench {
    pub pool_bytes: u64,
    pub segment_bytes: u64,
    pub utilisations: Vec<f64>,
    pub workloads: Vec<Access>,
    /// Pool capacities written before measuring, and while measuring.
    pub warmup: f64,
    pub measure: f64,
    /// Files the live data is spread over.
    pub files: u64,
    /// Buffered data written out in one checkpoint.
    pub dirty_bytes: u64,
    pub repeats: u32,
    pub seed: u64,
}

impl CleanerBench {
    /// The default run: a 256 MiB pool of 1 MiB segments, 2 capacities of warm-up, 4 measured.
    pub fn full() -> CleanerBench {
        CleanerBench {
            pool_bytes: 256 << 20,
            segment_bytes: 1 << 20,
            utilisations: vec![0.5, 0.7, 0.9],
            workloads: vec![Access::Uniform, Access::HotCold],
            warmup: 2.0,
            measure: 4.0,
            files: 64,
            dirty_bytes: 4 << 20,
            repeats: 3,
            seed: 0xc1ea,
        }
    }

    /// Seconds: a 64 MiB pool of 256 KiB segments, one repeat (at 90 % a 32 MiB pool has no room
    /// for a flush of buffered data besides the reserve and the low-water mark).
    pub fn quick() -> CleanerBench {
        CleanerBench {
            pool_bytes: 64 << 20,
            segment_bytes: 256 << 10,
            warmup: 1.0,
            measure: 2.0,
            repeats: 1,
            dirty_bytes: 1 << 20,
            ..CleanerBench::full()
        }
    }
}

/// One case's result (the median run of its repeats by write amplification).
#[derive(Debug, Clone, Serialize)]
pub struct CleanerCase {
    pub workload: &'static str,
    pub utilisation: f64,
    pub mb_per_s: f64,
    pub write_amplification: f64,
    /// Every repeat's figures, in run order.
    pub runs_mb_per_s: Vec<f64>,
    pub runs_write_amplification: Vec<f64>,
    pub segments_cleaned: u64,
    pub blocks_copied: u64,
    /// Bytes of metadata (summaries, map nodes, inode pages, tables, roots) per user byte.
    pub metadata_per_user_byte: f64,
    /// Checkpoints written while measuring (each cleaning pass writes one).
    pub checkpoints: u64,
    pub user_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CleanerReport {
    pub experiment: &'static str,
    pub pool_bytes: u64,
    pub segment_bytes: u64,
    pub warmup_capacities: f64,
    pub measured_capacities: f64,
    pub repeats: u32,
    pub cases: Vec<CleanerCase>,
    pub targets: Vec<TargetCheck>,
}

struct Run {
    mb_per_s: f64,
    wa: f64,
    segments_cleaned: u64,
    blocks_copied: u64,
    metadata_blocks: u64,
    checkpoints: u64,
    user_bytes: u64,
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

const BLOCK: u64 = 4096;

impl CleanerBench {
    fn config(&self) -> Config {
        Config {
            ordering: Ordering::Relaxed,
            barrier: Barrier::EveryCheckpoint,
            segment_bytes: self.segment_bytes,
            superblock_every_bytes: 64 << 20,
            superblock_every: Duration::from_secs(3600),
            checkpoint_every: None,
            dirty_bytes_max: self.dirty_bytes,
            // History is not what is measured: cleaning is.
            protection_period: Duration::ZERO,
            // Writers clean when they need room, so every copy is one the workload caused.
            background_gc: false,
            gc_free_percent: 0,
        }
    }

    fn run_one(&self, access: Access, utilisation: f64, seed: u64) -> Result<Run, String> {
        let dev: Arc<dyn Device> = Arc::new(
            MemoryPool::anonymous(self.pool_bytes)
                .map_err(|e| format!("{} bytes of memory for the pool: {e}", self.pool_bytes))?,
        );
        let fs = Fs::format(dev, &self.config()).map_err(|e| format!("format: {e}"))?;
        let size = fs.space().map_err(|e| e.to_string())?.size;
        let live_blocks = ((size as f64 * utilisation) as u64 / BLOCK).max(self.files);
        let per_file = live_blocks / self.files;
        let mut files = Vec::with_capacity(self.files as usize);
        let mut buf = vec![0u8; 256 * BLOCK as usize];
        let mut rng = Rng(seed);
        for i in 0..self.files {
            let f = fs
                .open_file(&format!("/f{i:04}"), OpenFlags::create())
                .map_err(|e| format!("create: {e}"))?;
            let mut done = 0;
            while done < per_file {
                let n = (per_file - done).min(256);
                for b in buf.chunks_mut(8) {
                    b.copy_from_slice(&rng.next().to_le_bytes());
                }
                f.pwrite(&buf[..(n * BLOCK) as usize], done * BLOCK)
                    .map_err(|e| format!("filling the pool to {utilisation}: {e}"))?;
                done += n;
            }
            files.push(f);
        }
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let total_blocks = per_file * self.files;
        let hot_blocks = (total_blocks / 10).max(1);
        let mut block = vec![0u8; BLOCK as usize];
        let mut write = |rng: &mut Rng, n: u64| -> Result<(), String> {
            for _ in 0..n {
                let r = rng.next();
                let target = match access {
                    Access::Uniform => r % total_blocks,
                    Access::HotCold => {
                        if !r.is_multiple_of(10) {
                            (r >> 8) % hot_blocks
                        } else {
                            hot_blocks + (r >> 8) % (total_blocks - hot_blocks).max(1)
                        }
                    }
                };
                block[..8].copy_from_slice(&r.to_le_bytes());
                let (file, at) = (target / per_file, target % per_file);
                files[file as usize]
                    .pwrite(&block, at * BLOCK)
                    .map_err(|e| format!("overwrite at {utilisation}: {e}"))?;
            }
            Ok(())
        };
        let capacity_blocks = size / BLOCK;
        write(&mut rng, (self.warmup * capacity_blocks as f64) as u64)?;
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let before = fs.counters();
        let n = (self.measure * capacity_blocks as f64) as u64;
        let started = Instant::now();
        write(&mut rng, n)?;
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let elapsed = started.elapsed().as_secs_f64();
        let after = fs.counters();
        let user = n * BLOCK;
        drop(files);
        fs.close().map_err(|e| format!("close: {e}"))?;
        Ok(Run {
            mb_per_s: user as f64 / (1 << 20) as f64 / elapsed,
            wa: (after.bytes_written - before.bytes_written) as f64 / user as f64,
            segments_cleaned: after.segments_cleaned - before.segments_cleaned,
            blocks_copied: after.blocks_copied - before.blocks_copied,
            metadata_blocks: after.metadata_blocks - before.metadata_blocks,
            checkpoints: after.checkpoints - before.checkpoints,
            user_bytes: user,
        })
    }

    /// Runs every case (workloads × utilisations × repeats, repeats taking turns).
    pub fn run(&self, progress: &Progress) -> Result<CleanerReport, String> {
        let mut cases = Vec::new();
        let mut runs: Vec<Vec<Run>> = Vec::new();
        for _ in 0..self.workloads.len() * self.utilisations.len() {
            runs.push(Vec::new());
        }
        for r in 0..self.repeats {
            let mut i = 0;
            for &w in &self.workloads {
                for &u in &self.utilisations {
                    progress.set_message(format!(
                        "{} at {:.0} %, run {}",
                        w.name(),
                        u * 100.0,
                        r + 1
                    ));
                    let run = self.run_one(w, u, self.seed.wrapping_add(r as u64 * 7919))?;
                    runs[i].push(run);
                    progress.inc(1);
                    i += 1;
                }
            }
        }
        let mut i = 0;
        for &w in &self.workloads {
            for &u in &self.utilisations {
                let rs = &runs[i];
                let mut order: Vec<usize> = (0..rs.len()).collect();
                order.sort_by(|&a, &b| rs[a].wa.total_cmp(&rs[b].wa));
                let mut speeds: Vec<f64> = rs.iter().map(|r| r.mb_per_s).collect();
                speeds.sort_by(f64::total_cmp);
                let med = &rs[order[order.len() / 2]];
                cases.push(CleanerCase {
                    workload: w.name(),
                    utilisation: u,
                    mb_per_s: speeds[speeds.len() / 2],
                    write_amplification: med.wa,
                    runs_mb_per_s: rs.iter().map(|r| r.mb_per_s).collect(),
                    runs_write_amplification: rs.iter().map(|r| r.wa).collect(),
                    segments_cleaned: med.segments_cleaned,
                    blocks_copied: med.blocks_copied,
                    metadata_per_user_byte: (med.metadata_blocks * BLOCK) as f64
                        / med.user_bytes as f64,
                    checkpoints: med.checkpoints,
                    user_bytes: med.user_bytes,
                });
                i += 1;
            }
        }
        let targets = targets(&cases);
        Ok(CleanerReport {
            experiment: "cleaner",
            pool_bytes: self.pool_bytes,
            segment_bytes: self.segment_bytes,
            warmup_capacities: self.warmup,
            measured_capacities: self.measure,
            repeats: self.repeats,
            cases,
            targets,
        })
    }
}

/// The targets at 70 % utilisation: hot/cold ≤ 1.6, uniform ≤ 2.3.
pub fn targets(cases: &[CleanerCase]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for (workload, limit) in [("hot-cold", 1.6), ("uniform", 2.3)] {
        if let Some(c) = cases
            .iter()
            .find(|c| c.workload == workload && (c.utilisation - 0.7).abs() < 1e-9)
        {
            out.push(TargetCheck {
                target: format!("{workload} write amplification at 70 % <= {limit}"),
                measured: format!("{:.2}", c.write_amplification),
                met: c.write_amplification <= limit,
            });
        }
    }
    out
}

impl CleanerReport {
    pub fn to_markdown(&self) -> String {
        let mut t = Table::new(vec![
            "workload".into(),
            "utilisation".into(),
            "MB/s".into(),
            "write amplification".into(),
            "segments cleaned".into(),
            "blocks copied".into(),
            "metadata / user bytes".into(),
            "checkpoints".into(),
        ]);
        for c in &self.cases {
            t.push(vec![
                c.workload.into(),
                format!("{:.0} %", c.utilisation * 100.0),
                format!("{:.1}", c.mb_per_s),
                format!("{:.2}", c.write_amplification),
                c.segments_cleaned.to_string(),
                c.blocks_copied.to_string(),
                format!("{:.3}", c.metadata_per_user_byte),
                c.checkpoints.to_string(),
            ]);
        }
        format!(
            "{}\n{}",
            t.to_markdown(),
            crate::bench::report::targets_markdown(&self.targets)
        )
    }
}
