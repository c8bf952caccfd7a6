//! `tailbound bench cleaner`: sustained write throughput and write amplification of tbfs with its
//! cleaner, at several pool utilisations, for a uniform-random overwrite workload, a hot/cold
//! one (90 % of the writes to 10 % of the data), after Rosenblum & Ousterhout's LFS evaluation,
//! and a mixed one: files of 4 KiB to 8 MiB created, appended to, truncated and deleted, with
//! random overwrites in the large ones, the live data held at the utilisation.
//!
//! Each case formats a memory pool, fills `utilisation` of it with files, writes until `warmup`
//! pool capacities have been written (so the cleaner reaches its steady state), then measures
//! while `measure` more capacities are written: MB/s over the wall time of the writes (cleaning
//! included, since writers wait for the cleaner), and write amplification = bytes the engine
//! wrote to the device (logs of data, metadata, checkpoints, superblocks and the cleaner's
//! copies) / bytes the workload wrote, with the metadata's share of it reported apart. The
//! amplification is a count, the same on any machine for a seed; the throughput depends on the
//! machine and what else runs on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::progress::Progress;
use crate::report::{Table, TargetCheck};
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::{Barrier, Clock, Config, File, Fs, OpenFlags, Ordering};

/// Which blocks the overwrites hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Every block equally likely.
    Uniform,
    /// 90 % of the writes to the first 10 % of the blocks.
    HotCold,
    /// Files of 4 KiB to 8 MiB created, appended to, truncated and deleted, and 4–64 KiB
    /// overwrites at random places in files of 1 MiB or more.
    Mixed,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Uniform => "uniform",
            Access::HotCold => "hot-cold",
            Access::Mixed => "mixed",
        }
    }

    pub fn parse(s: &str) -> Option<Access> {
        match s {
            "uniform" => Some(Access::Uniform),
            "hot-cold" | "hotcold" => Some(Access::HotCold),
            "mixed" => Some(Access::Mixed),
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
            utilisations: vec![0.5, 0.7, 0.8, 0.9],
            workloads: vec![Access::Uniform, Access::HotCold, Access::Mixed],
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
    /// The part of `write_amplification` that is metadata (summaries, map nodes, inode pages,
    /// tables, roots, superblocks), and the part that is file data (the workload's and the
    /// cleaner's copies).
    pub metadata_write_amplification: f64,
    pub data_write_amplification: f64,
    /// Every repeat's figures, in run order.
    pub runs_mb_per_s: Vec<f64>,
    pub runs_write_amplification: Vec<f64>,
    pub segments_cleaned: u64,
    pub blocks_copied: u64,
    /// Checkpoints written while measuring (each cleaning pass writes one).
    pub checkpoints: u64,
    pub user_bytes: u64,
    /// What the cleaner saw while measuring (`FsCounters::cleaning_passes` and beside it).
    pub seen: CleanerSeen,
    /// Where the pool's blocks were while measuring: `Fs::space_census`'s fields, each the
    /// mean of [`CENSUS_SAMPLES`] censuses taken at even steps of the measured writes.
    pub census: BTreeMap<&'static str, f64>,
}

/// Censuses of the pool taken while measuring (`CleanerCase::census`).
pub const CENSUS_SAMPLES: u64 = 16;

/// What the cleaner saw, averaged over its passes while measuring: what tells its write
/// amplification apart from the greedy model's.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CleanerSeen {
    pub passes: u64,
    /// Free segments as a pass began: space the writer keeps unused, which the live data does
    /// not fill and the cleaner does not choose from.
    pub free_segments: f64,
    /// Live blocks over the blocks of the segments not free as a pass began.
    pub effective_utilisation: f64,
    /// Live fraction of the victims chosen, and of as many of the emptiest written segments.
    pub victim_live_fraction: f64,
    pub greedy_live_fraction: f64,
    /// Live fraction of as many of the emptiest segments the passes were free to take.
    pub reach_live_fraction: f64,
    /// Written segments the roll-forward chain kept from a pass, per pass.
    pub chain_segments: f64,
    /// Of the victims' blocks, the share past the end of what had been written in them.
    pub unwritten_fraction: f64,
    /// Of the victims, the share holding both the host's data and the cleaner's copies.
    pub mixed_fraction: f64,
    /// Of the host's blocks written (the workload's), the share sealed in the cleaner's log
    /// head (parted by lifetime); of the blocks copied, the share written there.
    pub host_apart_fraction: f64,
    pub copies_apart_fraction: f64,
    /// Of the blocks copied, the share a light pass sent to the other head than their
    /// victim's, by their file's write rate.
    pub copies_by_file_fraction: f64,
    /// Of greedy's choice (as many of the emptiest written segments as there were victims),
    /// the share a rule kept from the pass: the roll-forward chain, a block dropped since the
    /// superblock's checkpoint (both for light passes only), retention, an earlier pass that
    /// could not empty it.
    pub greedy_kept_by_chain: f64,
    pub greedy_kept_by_dead: f64,
    pub greedy_kept_by_retention: f64,
    pub greedy_kept_by_skip: f64,
    /// Segments holding nothing live or pinned but not yet free as a pass began.
    pub pending_segments: f64,
    /// Checkpoints the cleaner wrote while measuring: for light victims, for live metadata in
    /// them, for anything else; the other checkpoints are the superblock's every so many bytes
    /// and syncs'.
    pub checkpoints_for_victims: u64,
    pub checkpoints_for_metadata: u64,
    pub checkpoints_other: u64,
    /// Live metadata blocks light passes found in their victims, by kind
    /// (`FsCounters::victim_meta_maps` and beside it).
    pub victim_meta_maps: u64,
    pub victim_meta_inodes: u64,
    pub victim_meta_tables: u64,
    pub victim_meta_dirs: u64,
    pub victim_meta_other: u64,
}

impl CleanerSeen {
    fn between(
        before: &tailbound::tbfs::FsCounters,
        after: &tailbound::tbfs::FsCounters,
        segment_blocks: u64,
        total_blocks: u64,
        host_blocks: u64,
    ) -> CleanerSeen {
        let passes = after.cleaning_passes - before.cleaning_passes;
        let victims = after.victims_chosen - before.victims_chosen;
        // A ratio of nothing is reported as nothing.
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let free = per(after.pass_free_blocks - before.pass_free_blocks, passes);
        let live = per(after.pass_live_blocks - before.pass_live_blocks, passes);
        let victim_blocks = victims * segment_blocks;
        CleanerSeen {
            passes,
            free_segments: free / segment_blocks as f64,
            effective_utilisation: if total_blocks as f64 > free {
                live / (total_blocks as f64 - free)
            } else {
                0.0
            },
            victim_live_fraction: per(
                after.victim_live_blocks - before.victim_live_blocks,
                victim_blocks,
            ),
            greedy_live_fraction: per(
                after.greedy_live_blocks - before.greedy_live_blocks,
                victim_blocks,
            ),
            reach_live_fraction: per(
                after.reach_live_blocks - before.reach_live_blocks,
                victim_blocks,
            ),
            chain_segments: per(
                after.pass_chain_segments - before.pass_chain_segments,
                passes,
            ),
            unwritten_fraction: per(
                after.victim_unwritten_blocks - before.victim_unwritten_blocks,
                victim_blocks,
            ),
            mixed_fraction: per(after.victims_mixed - before.victims_mixed, victims),
            host_apart_fraction: per(
                after.host_blocks_apart - before.host_blocks_apart,
                host_blocks,
            ),
            copies_apart_fraction: per(
                after.copies_apart - before.copies_apart,
                after.blocks_copied - before.blocks_copied,
            ),
            copies_by_file_fraction: per(
                after.copies_by_file - before.copies_by_file,
                after.blocks_copied - before.blocks_copied,
            ),
            greedy_kept_by_chain: per(
                after.greedy_kept_by_chain - before.greedy_kept_by_chain,
                victims,
            ),
            greedy_kept_by_dead: per(
                after.greedy_kept_by_dead - before.greedy_kept_by_dead,
                victims,
            ),
            greedy_kept_by_retention: per(
                after.greedy_kept_by_retention - before.greedy_kept_by_retention,
                victims,
            ),
            greedy_kept_by_skip: per(
                after.greedy_kept_by_skip - before.greedy_kept_by_skip,
                victims,
            ),
            pending_segments: per(
                after.pass_pending_blocks - before.pass_pending_blocks,
                passes * segment_blocks,
            ),
            checkpoints_for_victims: after.cleaner_checkpoints_for_victims
                - before.cleaner_checkpoints_for_victims,
            checkpoints_for_metadata: after.cleaner_checkpoints_for_metadata
                - before.cleaner_checkpoints_for_metadata,
            checkpoints_other: after.cleaner_checkpoints_other - before.cleaner_checkpoints_other,
            victim_meta_maps: after.victim_meta_maps - before.victim_meta_maps,
            victim_meta_inodes: after.victim_meta_inodes - before.victim_meta_inodes,
            victim_meta_tables: after.victim_meta_tables - before.victim_meta_tables,
            victim_meta_dirs: after.victim_meta_dirs - before.victim_meta_dirs,
            victim_meta_other: after.victim_meta_other - before.victim_meta_other,
        }
    }
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
    seen: CleanerSeen,
    census: BTreeMap<&'static str, f64>,
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

/// One of the benchmark's workloads, after its files are made.
trait Workload {
    /// Does one operation; returns the bytes it wrote.
    fn step(&mut self, fs: &Fs, rng: &mut Rng) -> Result<u64, String>;
}

/// 4 KiB overwrites of files that fill the utilisation (uniform or hot/cold).
struct Overwrites {
    access: Access,
    files: Vec<File>,
    per_file: u64,
    total_blocks: u64,
    block: Vec<u8>,
}

impl Overwrites {
    fn fill(
        bench: &CleanerBench,
        fs: &Fs,
        access: Access,
        utilisation: f64,
        size: u64,
        rng: &mut Rng,
    ) -> Result<Overwrites, String> {
        let live_blocks = ((size as f64 * utilisation) as u64 / BLOCK).max(bench.files);
        let per_file = live_blocks / bench.files;
        let mut files = Vec::with_capacity(bench.files as usize);
        let mut buf = vec![0u8; 256 * BLOCK as usize];
        for i in 0..bench.files {
            let f = fs
                .open_file(&format!("/f{i:04}"), OpenFlags::create())
                .map_err(|e| format!("create: {e}"))?;
            let mut done = 0;
            while done < per_file {
                let n = (per_file - done).min(256);
                random_bytes(rng, &mut buf);
                f.pwrite(&buf[..(n * BLOCK) as usize], done * BLOCK)
                    .map_err(|e| format!("filling the pool to {utilisation}: {e}"))?;
                done += n;
            }
            files.push(f);
        }
        Ok(Overwrites {
            access,
            files,
            per_file,
            total_blocks: per_file * bench.files,
            block: vec![0u8; BLOCK as usize],
        })
    }
}

impl Workload for Overwrites {
    fn step(&mut self, _: &Fs, rng: &mut Rng) -> Result<u64, String> {
        let r = rng.next();
        let total = self.total_blocks;
        let hot_blocks = (total / 10).max(1);
        let target = match self.access {
            Access::HotCold if !r.is_multiple_of(10) => (r >> 8) % hot_blocks,
            Access::HotCold => hot_blocks + (r >> 8) % (total - hot_blocks).max(1),
            _ => r % total,
        };
        self.block[..8].copy_from_slice(&r.to_le_bytes());
        let (file, at) = (target / self.per_file, target % self.per_file);
        self.files[file as usize]
            .pwrite(&self.block, at * BLOCK)
            .map_err(|e| format!("overwrite: {e}"))?;
        Ok(BLOCK)
    }
}

/// The soak's file mix: files of 4 KiB to 8 MiB (as many of each power of two, so most files
/// are small and most bytes are in large files) created, appended to, truncated and deleted,
/// with overwrites of 4–64 KiB in files of 1 MiB or more; live data held at the utilisation.
struct Mixed {
    files: Vec<(String, File, u64)>,
    live: u64,
    target: u64,
    next_name: u64,
    buf: Vec<u8>,
}

const MIXED_FILE_MAX: u64 = 8 << 20;
const MIXED_LARGE: u64 = 1 << 20;

fn mixed_size(rng: &mut Rng) -> u64 {
    let base = 1u64 << (12 + rng.next() % 11);
    base + rng.next() % base
}

impl Mixed {
    fn fill(fs: &Fs, utilisation: f64, size: u64, rng: &mut Rng) -> Result<Mixed, String> {
        let mut w = Mixed {
            files: Vec::new(),
            live: 0,
            target: (size as f64 * utilisation) as u64,
            next_name: 0,
            buf: vec![0u8; MIXED_FILE_MAX as usize],
        };
        while w.live < w.target {
            w.create(fs, rng)
                .map_err(|e| format!("filling the pool to {utilisation}: {e}"))?;
        }
        Ok(w)
    }

    fn create(&mut self, fs: &Fs, rng: &mut Rng) -> Result<u64, String> {
        let len = mixed_size(rng).min(self.target.saturating_sub(self.live).max(BLOCK));
        let path = format!("/m{:08}", self.next_name);
        self.next_name += 1;
        let f = fs
            .open_file(&path, OpenFlags::create())
            .map_err(|e| format!("create: {e}"))?;
        random_bytes(rng, &mut self.buf[..len as usize]);
        f.pwrite(&self.buf[..len as usize], 0)
            .map_err(|e| format!("write: {e}"))?;
        self.files.push((path, f, len));
        self.live += len;
        Ok(len)
    }

    fn delete(&mut self, fs: &Fs, rng: &mut Rng) -> Result<u64, String> {
        let i = (rng.next() % self.files.len() as u64) as usize;
        let (path, f, len) = self.files.swap_remove(i);
        drop(f);
        fs.unlink(&path).map_err(|e| format!("unlink: {e}"))?;
        self.live -= len;
        Ok(0)
    }
}

impl Workload for Mixed {
    fn step(&mut self, fs: &Fs, rng: &mut Rng) -> Result<u64, String> {
        if self.files.is_empty() {
            return self.create(fs, rng);
        }
        if self.live > self.target {
            return self.delete(fs, rng);
        }
        let r = rng.next() % 100;
        let i = (rng.next() % self.files.len() as u64) as usize;
        let len = self.files[i].2;
        match r {
            // Overwrites in a large file.
            0..50 if len >= MIXED_LARGE => {
                let n = BLOCK * (1 + rng.next() % 16);
                let at = (rng.next() % (len / BLOCK)) * BLOCK;
                let n = n.min(len - at);
                random_bytes(rng, &mut self.buf[..n as usize]);
                self.files[i]
                    .1
                    .pwrite(&self.buf[..n as usize], at)
                    .map_err(|e| format!("overwrite: {e}"))?;
                Ok(n)
            }
            50..65 if len < MIXED_FILE_MAX => {
                let n = (1 + rng.next() % (256 << 10)).min(MIXED_FILE_MAX - len);
                random_bytes(rng, &mut self.buf[..n as usize]);
                self.files[i]
                    .1
                    .pwrite(&self.buf[..n as usize], len)
                    .map_err(|e| format!("append: {e}"))?;
                self.files[i].2 += n;
                self.live += n;
                Ok(n)
            }
            65..72 => {
                let to = rng.next() % (len + 1);
                self.files[i]
                    .1
                    .set_len(to)
                    .map_err(|e| format!("truncate: {e}"))?;
                self.files[i].2 = to;
                self.live -= len - to;
                Ok(0)
            }
            72..82 => self.delete(fs, rng),
            _ => self.create(fs, rng),
        }
    }
}

fn random_bytes(rng: &mut Rng, buf: &mut [u8]) {
    for b in buf.chunks_mut(8) {
        let r = rng.next().to_le_bytes();
        b.copy_from_slice(&r[..b.len()]);
    }
}

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
            clock: Clock::wall(),
        }
    }

    fn run_one(&self, access: Access, utilisation: f64, seed: u64) -> Result<Run, String> {
        let dev: Arc<dyn Device> = Arc::new(
            MemoryPool::anonymous(self.pool_bytes)
                .map_err(|e| format!("{} bytes of memory for the pool: {e}", self.pool_bytes))?,
        );
        let fs = Fs::format(dev, &self.config()).map_err(|e| format!("format: {e}"))?;
        let size = fs.space().map_err(|e| e.to_string())?.size;
        let capacity_blocks = size / BLOCK;
        let mut rng = Rng(seed);
        let mut workload: Box<dyn Workload> = match access {
            Access::Uniform | Access::HotCold => Box::new(Overwrites::fill(
                self,
                &fs,
                access,
                utilisation,
                size,
                &mut rng,
            )?),
            Access::Mixed => Box::new(Mixed::fill(&fs, utilisation, size, &mut rng)?),
        };
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let warmup = (self.warmup * size as f64) as u64;
        let mut done = 0;
        while done < warmup {
            done += workload
                .step(&fs, &mut rng)
                .map_err(|e| format!("{} at {utilisation}: {e}", access.name()))?;
        }
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let before = fs.counters();
        let n = (self.measure * capacity_blocks as f64) as u64 * BLOCK;
        let started = Instant::now();
        let mut user = 0;
        let mut census: BTreeMap<&'static str, f64> = BTreeMap::new();
        let every = (n / CENSUS_SAMPLES).max(1);
        let mut next_census = every / 2;
        while user < n {
            user += workload
                .step(&fs, &mut rng)
                .map_err(|e| format!("{} at {utilisation}: {e}", access.name()))?;
            if user >= next_census {
                next_census += every;
                let c = fs.space_census().map_err(|e| format!("census: {e}"))?;
                for (k, v) in c.fields() {
                    *census.entry(k).or_default() += v as f64 / CENSUS_SAMPLES as f64;
                }
            }
        }
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let elapsed = started.elapsed().as_secs_f64();
        let after = fs.counters();
        drop(workload);
        fs.close().map_err(|e| format!("close: {e}"))?;
        Ok(Run {
            mb_per_s: user as f64 / (1 << 20) as f64 / elapsed,
            wa: (after.bytes_written - before.bytes_written) as f64 / user as f64,
            segments_cleaned: after.segments_cleaned - before.segments_cleaned,
            blocks_copied: after.blocks_copied - before.blocks_copied,
            metadata_blocks: after.metadata_blocks - before.metadata_blocks,
            checkpoints: after.checkpoints - before.checkpoints,
            user_bytes: user,
            census,
            seen: CleanerSeen::between(
                &before,
                &after,
                self.segment_bytes / BLOCK,
                capacity_blocks,
                user / BLOCK,
            ),
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
                    metadata_write_amplification: (med.metadata_blocks * BLOCK) as f64
                        / med.user_bytes as f64,
                    data_write_amplification: med.wa
                        - (med.metadata_blocks * BLOCK) as f64 / med.user_bytes as f64,
                    runs_mb_per_s: rs.iter().map(|r| r.mb_per_s).collect(),
                    runs_write_amplification: rs.iter().map(|r| r.wa).collect(),
                    segments_cleaned: med.segments_cleaned,
                    blocks_copied: med.blocks_copied,
                    checkpoints: med.checkpoints,
                    user_bytes: med.user_bytes,
                    seen: med.seen,
                    census: med.census.clone(),
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

/// The targets: write amplification, metadata included, at most what greedy victim selection
/// gives for uniform overwrites, and cost-benefit with the cleaner's copies apart for hot/cold.
pub const TARGETS: [(&str, f64, f64); 6] = [
    ("uniform", 0.7, 1.9),
    ("uniform", 0.8, 2.8),
    ("uniform", 0.9, 5.5),
    ("hot-cold", 0.7, 1.5),
    ("hot-cold", 0.8, 2.0),
    ("hot-cold", 0.9, 3.5),
];

/// Each target whose case was run, met or not.
pub fn targets(cases: &[CleanerCase]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for (workload, u, limit) in TARGETS {
        if let Some(c) = cases
            .iter()
            .find(|c| c.workload == workload && (c.utilisation - u).abs() < 1e-9)
        {
            out.push(TargetCheck {
                target: format!(
                    "{workload} write amplification at {:.0} % <= {limit}",
                    u * 100.0
                ),
                measured: format!(
                    "{:.2} ({:.2} data + {:.2} metadata)",
                    c.write_amplification,
                    c.data_write_amplification,
                    c.metadata_write_amplification
                ),
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
            "of it data".into(),
            "of it metadata".into(),
            "segments cleaned".into(),
            "blocks copied".into(),
            "checkpoints".into(),
        ]);
        for c in &self.cases {
            t.push(vec![
                c.workload.into(),
                format!("{:.0} %", c.utilisation * 100.0),
                format!("{:.1}", c.mb_per_s),
                format!("{:.2}", c.write_amplification),
                format!("{:.2}", c.data_write_amplification),
                format!("{:.3}", c.metadata_write_amplification),
                c.segments_cleaned.to_string(),
                c.blocks_copied.to_string(),
                c.checkpoints.to_string(),
            ]);
        }
        let mut seen = Table::new(vec![
            "workload".into(),
            "utilisation".into(),
            "passes".into(),
            "free segments at a pass".into(),
            "effective utilisation".into(),
            "victims' live fraction".into(),
            "greedy's".into(),
            "greedy's within the rules".into(),
            "segments in the chain".into(),
            "unwritten".into(),
            "mixed victims".into(),
            "host data apart".into(),
            "copies apart".into(),
            "copies by file".into(),
            "pending segments".into(),
        ]);
        for c in &self.cases {
            let s = &c.seen;
            seen.push(vec![
                c.workload.into(),
                format!("{:.0} %", c.utilisation * 100.0),
                s.passes.to_string(),
                format!("{:.1}", s.free_segments),
                format!("{:.3}", s.effective_utilisation),
                format!("{:.3}", s.victim_live_fraction),
                format!("{:.3}", s.greedy_live_fraction),
                format!("{:.3}", s.reach_live_fraction),
                format!("{:.1}", s.chain_segments),
                format!("{:.3}", s.unwritten_fraction),
                format!("{:.2}", s.mixed_fraction),
                format!("{:.3}", s.host_apart_fraction),
                format!("{:.3}", s.copies_apart_fraction),
                format!("{:.3}", s.copies_by_file_fraction),
                format!("{:.1}", s.pending_segments),
            ]);
        }
        let mut kept = Table::new(vec![
            "workload".into(),
            "utilisation".into(),
            "greedy's kept by: chain".into(),
            "dropped since superblock".into(),
            "retention".into(),
            "earlier pass".into(),
            "cleaner's checkpoints: for victims".into(),
            "for metadata".into(),
            "other".into(),
            "victims' metadata: maps / inodes / tables / dirs / other".into(),
        ]);
        for c in &self.cases {
            let s = &c.seen;
            kept.push(vec![
                c.workload.into(),
                format!("{:.0} %", c.utilisation * 100.0),
                format!("{:.3}", s.greedy_kept_by_chain),
                format!("{:.3}", s.greedy_kept_by_dead),
                format!("{:.3}", s.greedy_kept_by_retention),
                format!("{:.3}", s.greedy_kept_by_skip),
                s.checkpoints_for_victims.to_string(),
                s.checkpoints_for_metadata.to_string(),
                s.checkpoints_other.to_string(),
                format!(
                    "{} / {} / {} / {} / {}",
                    s.victim_meta_maps,
                    s.victim_meta_inodes,
                    s.victim_meta_tables,
                    s.victim_meta_dirs,
                    s.victim_meta_other
                ),
            ]);
        }
        let mut census = Table::new(vec![
            "workload".into(),
            "utilisation".into(),
            "file data".into(),
            "metadata".into(),
            "segments with metadata".into(),
            "pinned".into(),
            "free".into(),
            "pending".into(),
            "heads' rest".into(),
            "dead".into(),
            "reserve".into(),
            "low-water mark".into(),
        ]);
        for c in &self.cases {
            let f = |k: &str| c.census.get(k).copied().unwrap_or(0.0);
            let metadata = [
                "directory_blocks",
                "file_map_nodes",
                "inode_pages",
                "inode_file_nodes",
                "table_blocks",
                "table_nodes",
                "roots",
            ]
            .iter()
            .map(|k| f(k))
            .sum::<f64>();
            let mut row = vec![
                c.workload.to_string(),
                format!("{:.0} %", c.utilisation * 100.0),
                format!("{:.0}", f("file_data")),
                format!("{metadata:.0}"),
            ];
            for k in [
                "segments_with_metadata",
                "pinned",
                "free",
                "pending",
                "heads_rest",
                "dead",
                "reserve",
                "low_water",
            ] {
                row.push(format!("{:.0}", f(k)));
            }
            census.push(row);
        }
        format!(
            "{}\nWhat the cleaner saw (the median run, averaged over its passes):\n\n{}\nWhat kept greedy's choice from the passes (share of it), and the cleaner's checkpoints:\n\n{}\nWhere the pool's blocks were (the median run, blocks, the mean of {CENSUS_SAMPLES} censuses):\n\n{}\n{}",
            t.to_markdown(),
            seen.to_markdown(),
            kept.to_markdown(),
            census.to_markdown(),
            crate::report::targets_markdown(&self.targets)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::CleanerSeen;
    use tailbound::tbfs::FsCounters;

    #[test]
    fn what_the_cleaner_saw_is_averaged_over_its_passes_and_victims() {
        let before = FsCounters {
            cleaning_passes: 10,
            pass_free_blocks: 5_000,
            pass_live_blocks: 1_000_000,
            victims_chosen: 100,
            victim_live_blocks: 12_800,
            greedy_live_blocks: 12_000,
            victims_mixed: 3,
            blocks_copied: 1_000,
            copies_apart: 200,
            host_blocks_apart: 50,
            ..Default::default()
        };
        // 2 passes of 4 victims of 256 blocks, 1,024 blocks free and 3,584 live at each, in a
        // pool of 8,192 blocks.
        let after = FsCounters {
            cleaning_passes: 12,
            pass_free_blocks: 5_000 + 2 * 1_024,
            pass_live_blocks: 1_000_000 + 2 * 3_584,
            victims_chosen: 108,
            victim_live_blocks: 12_800 + 1_024,
            greedy_live_blocks: 12_000 + 512,
            reach_live_blocks: 768,
            pass_chain_segments: 7,
            victim_unwritten_blocks: 256,
            victims_mixed: 5,
            // Of greedy's 8 segments, 4 in the chain and 2 dropped since the superblock; a
            // segment waiting at each pass; one checkpoint for victims, two for metadata.
            greedy_kept_by_chain: 4,
            greedy_kept_by_dead: 2,
            pass_pending_blocks: 2 * 256,
            cleaner_checkpoints_for_victims: 1,
            cleaner_checkpoints_for_metadata: 2,
            // 800 blocks copied, 600 of them to the cleaner's head; 100 of the host's 4,000
            // blocks sealed there.
            blocks_copied: 1_800,
            copies_apart: 800,
            host_blocks_apart: 150,
            ..before
        };
        let s = CleanerSeen::between(&before, &after, 256, 8_192, 4_000);
        assert_eq!(s.passes, 2);
        assert_eq!(s.free_segments, 4.0);
        assert_eq!(s.effective_utilisation, 0.5);
        assert_eq!(s.victim_live_fraction, 0.5);
        assert_eq!(s.greedy_live_fraction, 0.25);
        assert_eq!(s.reach_live_fraction, 0.375);
        assert_eq!(s.chain_segments, 3.5);
        assert_eq!(s.unwritten_fraction, 0.125);
        assert_eq!(s.mixed_fraction, 0.25);
        assert_eq!(
            (s.host_apart_fraction, s.copies_apart_fraction),
            (0.025, 0.75)
        );
        assert_eq!(
            (
                s.greedy_kept_by_chain,
                s.greedy_kept_by_dead,
                s.greedy_kept_by_retention
            ),
            (0.5, 0.25, 0.0)
        );
        assert_eq!(s.pending_segments, 1.0);
        assert_eq!(
            (
                s.checkpoints_for_victims,
                s.checkpoints_for_metadata,
                s.checkpoints_other
            ),
            (1, 2, 0)
        );
        let none = CleanerSeen::between(&after, &after, 256, 8_192, 0);
        assert_eq!((none.passes, none.victim_live_fraction), (0, 0.0));
    }
}
