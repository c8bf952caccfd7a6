//! `tailbound bench record`: the paper's Table 1 (seed 000) and tailbound's recorder modes, side by
//! side, under background loads, in one run on this machine.
//!
//! Each case records `writes` records of `record_bytes` every `period` with one recorder design under
//! one background load, `sets` times, and keeps the set with the largest maximum (as the paper does).
//! The latency measured is the call the application makes: `Recorder::write` (for the decoupled
//! mode also the writer thread's `write()` system calls, as a separate row).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::load::{Load, LoadConfig, LoadKind};
use crate::periodic::{run_periodic, Flow, PeriodicConfig};
use crate::progress::Progress;
pub use crate::report::TargetCheck;
use crate::stats::{BoxStats, LatencyHistogram, LatencySummary};
use tailbound::record::{
    Allocation, DecoupledOptions, FlushMode, Flusher, FlusherGuard, Framing, Overflow, Recorder,
    RecorderOptions, RecyclePool, SlowTrace, TracedCalls,
};

/// Bytes a framed record adds on top of its payload, rounded up generously for preallocation.
mod model;
mod report;
#[cfg(test)]
mod tests;

pub use model::{
    CaseResult, WorstWrite, FLOOR, PRODUCER_DESIGN, TAILBOUND, TAILBOUND_DECOUPLED, TRACE_BOUND,
};
pub use report::{
    check_targets, RecordReport, TARGET_HALF_OF_CONVENTIONAL, TARGET_NO_LOAD_CONVENTIONAL,
    TARGET_NO_LOAD_FLOOR, TARGET_NO_MISSES, TARGET_PRODUCER_FLOOR,
};

const FRAME_OVERHEAD_BYTES_MAX: u64 = 64;
/// Ring size of the decoupled mode: 256 records of 16 KiB, over a second of data at 5 ms.
const DECOUPLED_RING_BYTES: u64 = 4 << 20;

/// One recorder design: the options a case records with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Design {
    /// Short name of the design, e.g. `append/fdatasync/flusher-on`.
    pub label: String,
    pub allocation: Allocation,
    pub flush: FlushMode,
    pub flusher: Flusher,
    pub framing: Framing,
    pub decoupled: bool,
    /// Records are stored through a mapping of the preallocated file instead of `write()`.
    pub mapped: bool,
    /// No I/O at all: the record is copied into memory. Measures the machine's own scheduling
    /// noise, the floor no design can go below.
    pub noise_floor: bool,
}

impl Design {
    fn new(allocation: Allocation, flush: FlushMode, flusher: Flusher, framing: Framing) -> Design {
        let flusher_label = match flusher {
            Flusher::On => "flusher-on",
            Flusher::Off => "flusher-off",
        };
        Design {
            label: format!("{allocation}/{flush}/{flusher_label}"),
            allocation,
            flush,
            flusher,
            framing,
            decoupled: false,
            mapped: false,
            noise_floor: false,
        }
    }

    /// The same design storing through a mapping of the file (tailbound's modes).
    pub fn mapped(mut self) -> Design {
        self.mapped = true;
        self.label.push_str("/mapped");
        self
    }

    /// The noise floor: the same periodic loop copying each record into memory, with no I/O.
    pub fn noise_floor() -> Design {
        Design {
            label: "memcpy, no I/O".into(),
            noise_floor: true,
            ..Design::conventional()
        }
    }

    /// The same design behind a decoupled ring and writer thread.
    pub fn decoupled(mut self) -> Design {
        self.decoupled = true;
        self.label.push_str("/decoupled");
        self
    }

    /// The paper's conventional design (NONE): append, `fdatasync`, kernel flusher on.
    pub fn conventional() -> Design {
        Design::new(
            Allocation::Append,
            FlushMode::Fdatasync,
            Flusher::On,
            Framing::Raw,
        )
    }

    /// tailbound's default recorder mode: zero-filled file, pipelined flushing, framed records,
    /// kernel flusher left alone (no root needed).
    pub fn tailbound_default() -> Design {
        let d = RecorderOptions::default();
        let design = Design::new(d.allocation, d.flush, d.flusher, d.framing);
        if d.mapped {
            design.mapped()
        } else {
            design
        }
    }

    /// True when the design changes kernel sysctls and so needs root.
    pub fn needs_root(&self) -> bool {
        self.flusher == Flusher::Off
    }
}

/// One case: a name, a design and a load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordCase {
    /// The paper's column name (NONE, ALL, ALL-BGTRUNC, …) or tailbound's own name.
    pub name: String,
    pub design: Design,
    pub load: LoadKind,
}

impl RecordCase {
    fn new(name: &str, design: Design, load: LoadKind) -> RecordCase {
        RecordCase {
            name: name.to_string(),
            design,
            load,
        }
    }

    /// `NAME@load`, unique within the catalogue.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.load)
    }

    /// Whether a `--cases` selector picks this case: `NAME` (every load) or `NAME@load`.
    pub fn matches(&self, selector: &str) -> bool {
        selector.eq_ignore_ascii_case(&self.name) || selector.eq_ignore_ascii_case(&self.id())
    }
}

fn paper_cases() -> Vec<RecordCase> {
    use Allocation::{Append, Fallocate};
    use FlushMode::{Fdatasync, SyncFileRange};
    use Flusher::{Off, On};
    let raw = Framing::Raw;
    let all = Design::new(Fallocate, SyncFileRange, Off, raw);
    let wpre_sall_foff = Design::new(Fallocate, Fdatasync, Off, raw);
    let wpre_sdata_fon = Design::new(Fallocate, SyncFileRange, On, raw);
    vec![
        RecordCase::new("NONE", Design::conventional(), LoadKind::None),
        RecordCase::new("ALL", all.clone(), LoadKind::None),
        RecordCase::new("ALL-BGTRUNC", all.clone(), LoadKind::BgTrunc),
        RecordCase::new("ALL-BGALL", all, LoadKind::BgAll),
        RecordCase::new(
            "WAPPEND-SDATA-FOFF",
            Design::new(Append, SyncFileRange, Off, raw),
            LoadKind::None,
        ),
        RecordCase::new(
            "WAPPEND-SALL-FOFF",
            Design::new(Append, Fdatasync, Off, raw),
            LoadKind::None,
        ),
        RecordCase::new("WPRE-SALL-FOFF", wpre_sall_foff.clone(), LoadKind::None),
        RecordCase::new(
            "WPRE-SALL-FOFF-BGTRUNC",
            wpre_sall_foff.clone(),
            LoadKind::BgTrunc,
        ),
        RecordCase::new("WPRE-SALL-FOFF-BGALL", wpre_sall_foff, LoadKind::BgAll),
        RecordCase::new("WPRE-SDATA-FON", wpre_sdata_fon.clone(), LoadKind::None),
        RecordCase::new(
            "WPRE-SDATA-FON-BGTRUNC",
            wpre_sdata_fon.clone(),
            LoadKind::BgTrunc,
        ),
        RecordCase::new("WPRE-SDATA-FON-BGALL", wpre_sdata_fon, LoadKind::BgAll),
    ]
}

fn tailbound_designs() -> Vec<(&'static str, Design)> {
    use FlushMode::{Pipelined, SyncFileRange};
    vec![
        (TAILBOUND, Design::tailbound_default()),
        (
            "tailbound-zero-fill",
            Design::new(
                Allocation::ZeroFill,
                SyncFileRange,
                Flusher::On,
                Framing::Framed,
            )
            .mapped(),
        ),
        (
            "tailbound-recycle",
            Design::new(Allocation::Recycle, Pipelined, Flusher::On, Framing::Framed).mapped(),
        ),
        (
            "tailbound-write",
            Design::new(
                Allocation::ZeroFill,
                Pipelined,
                Flusher::On,
                Framing::Framed,
            ),
        ),
        (TAILBOUND_DECOUPLED, Design::tailbound_default().decoupled()),
    ]
}

/// Every case of the full experiment: the paper's 12 columns, then NONE and tailbound's modes under
/// each load.
pub fn catalogue() -> Vec<RecordCase> {
    let mut cases = paper_cases();
    for load in LoadKind::ALL {
        if load != LoadKind::None {
            cases.push(RecordCase::new("NONE", Design::conventional(), load));
        }
        for (name, design) in tailbound_designs() {
            cases.push(RecordCase::new(name, design, load));
        }
        cases.push(RecordCase::new(FLOOR, Design::noise_floor(), load));
    }
    cases
}

/// The `--quick` subset: NONE, ALL, tailbound's default and decoupled modes, under no load and under
/// the buffered writer.
pub fn quick_cases() -> Vec<RecordCase> {
    let all = Design::new(
        Allocation::Fallocate,
        FlushMode::SyncFileRange,
        Flusher::Off,
        Framing::Raw,
    );
    let mut cases = Vec::new();
    for load in [LoadKind::None, LoadKind::BufferedWriter] {
        cases.push(RecordCase::new("NONE", Design::conventional(), load));
        cases.push(RecordCase::new("ALL", all.clone(), load));
        cases.push(RecordCase::new(
            TAILBOUND,
            Design::tailbound_default(),
            load,
        ));
        cases.push(RecordCase::new(
            TAILBOUND_DECOUPLED,
            Design::tailbound_default().decoupled(),
            load,
        ));
        cases.push(RecordCase::new(FLOOR, Design::noise_floor(), load));
    }
    cases
}

/// Picks cases from the catalogue by `--cases` selectors; an unknown selector is an error naming it.
pub fn select_cases(selectors: &[String]) -> Result<Vec<RecordCase>, RecordBenchError> {
    let catalogue = catalogue();
    let mut picked: Vec<RecordCase> = Vec::new();
    for selector in selectors {
        let matching: Vec<&RecordCase> = catalogue.iter().filter(|c| c.matches(selector)).collect();
        if matching.is_empty() {
            return Err(RecordBenchError::UnknownCase(selector.clone()));
        }
        for case in matching {
            if !picked.contains(case) {
                picked.push(case.clone());
            }
        }
    }
    Ok(picked)
}

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordBenchError {
    #[error("unknown case {0:?} (see `tailbound bench record --list`)")]
    UnknownCase(String),
    #[error("case {case}: {message}")]
    Case { case: String, message: String },
}

/// The experiment's parameters.
#[derive(Debug, Clone)]
pub struct RecordBench {
    /// Directory the recordings and loads use.
    pub dir: PathBuf,
    pub period: Duration,
    pub record_bytes: u64,
    /// Writes per set.
    pub writes: u64,
    pub sets: u32,
    pub flush_every_bytes: u64,
    pub cases: Vec<RecordCase>,
    pub load: LoadConfig,
    /// Draw progress bars (on a terminal only).
    pub progress: bool,
    /// Run every case's periodic thread in SCHED_FIFO at this priority (root), so deadline misses
    /// come from I/O and not from waiting for a CPU. Applies to every case alike.
    pub rt_priority: Option<u8>,
    /// Pin every case's periodic thread to this CPU (and tailbound's flush thread off it).
    /// Applies to every case alike.
    pub cpu: Option<usize>,
    /// Lock tailbound's recorders in memory (`mlockall`, the windows ahead `mlock`ed).
    pub mlock: bool,
}

impl RecordBench {
    /// The paper's parameters: 16 KiB every 5 ms, flush every 2 MiB, 5 sets of 10,000 writes.
    pub fn paper(dir: PathBuf) -> RecordBench {
        RecordBench {
            dir,
            period: Duration::from_millis(5),
            record_bytes: 16 << 10,
            writes: 10_000,
            sets: 5,
            flush_every_bytes: 2 << 20,
            cases: catalogue(),
            load: LoadConfig::default(),
            progress: true,
            rt_priority: None,
            cpu: None,
            mlock: false,
        }
    }

    /// `--quick`: the quick subset, 1 set of 2,000 writes, smaller load files.
    pub fn quick(dir: PathBuf) -> RecordBench {
        RecordBench {
            writes: 2_000,
            sets: 1,
            cases: quick_cases(),
            load: LoadConfig::quick(),
            ..RecordBench::paper(dir)
        }
    }

    fn expected_bytes(&self) -> u64 {
        // Two flush windows of slack: growing a file is rare and never needed in a bench run.
        self.writes * (self.record_bytes + FRAME_OVERHEAD_BYTES_MAX)
            + 2 * self.flush_every_bytes
            + (1 << 20)
    }

    fn options(&self, design: &Design, pool: &Path) -> RecorderOptions {
        RecorderOptions {
            allocation: design.allocation,
            flush: design.flush,
            flush_every_bytes: self.flush_every_bytes,
            flusher: design.flusher,
            framing: design.framing,
            expected_bytes: self.expected_bytes(),
            recycle_pool: (design.allocation == Allocation::Recycle).then(|| pool.to_path_buf()),
            decoupled: design.decoupled.then_some(DecoupledOptions {
                ring_bytes: DECOUPLED_RING_BYTES,
                overflow: Overflow::Block,
            }),
            measure_writes: design.decoupled,
            mapped: design.mapped,
            trace_slow: Some(TRACE_BOUND),
            // tailbound's designs (the framed ones) only: the paper's do not lock memory.
            mlockall: self.mlock && design.framing == Framing::Framed,
            // The flush thread keeps off the recording thread's CPU (which the bench pins).
            cpu: if design.decoupled { None } else { self.cpu },
            // The writer thread shares the ring's lock with the producer: it runs one real-time
            // priority below it, so no ordinary thread can preempt it while it holds the lock, and
            // the producer still preempts it.
            rt_priority: if design.decoupled {
                self.rt_priority.map(|p| p.saturating_sub(1).max(1))
            } else {
                None
            },
        }
    }
}

impl CaseResult {
    fn measured(
        case: &RecordCase,
        design: &str,
        bench: &RecordBench,
        summary: &LatencySummary,
        box_stats: BoxStats,
        dropped: u64,
        worst_write: Option<WorstWrite>,
    ) -> CaseResult {
        CaseResult {
            name: case.name.clone(),
            design: design.to_string(),
            load: case.load.to_string(),
            sets: bench.sets,
            writes: bench.writes,
            latency: *summary,
            dropped,
            worst_write,
            skipped: None,
            box_stats: Some(box_stats),
        }
    }

    fn skipped(case: &RecordCase, bench: &RecordBench, why: String) -> CaseResult {
        CaseResult {
            name: case.name.clone(),
            design: case.design.label.clone(),
            load: case.load.to_string(),
            sets: bench.sets,
            writes: bench.writes,
            latency: LatencyHistogram::new().summary(0),
            dropped: 0,
            worst_write: None,
            skipped: Some(why),
            box_stats: None,
        }
    }
}

/// One set's measurement of one case.
struct SetOutcome {
    /// The application's call latency (the producer's, in decoupled mode).
    calls: LatencyHistogram,
    call_misses: u64,
    /// The writer thread's `write()` latency in decoupled mode.
    writer: Option<LatencyHistogram>,
    dropped: u64,
    /// The slowest application call.
    worst_call: Option<WorstWrite>,
    /// The decoupled writer thread's slowest write.
    worst_writer_call: Option<WorstWrite>,
}

impl RecordBench {
    /// Gives the calling (measuring) thread the bench's real-time settings, the same for every
    /// case, and touches its stack before the first timed call.
    fn prepare_thread(&self) -> std::io::Result<()> {
        if let Some(p) = self.rt_priority {
            tailbound::sys::proc::set_fifo_priority(p).map_err(|e| {
                std::io::Error::new(e.kind(), format!("SCHED_FIFO priority {p}: {e}"))
            })?;
        }
        if let Some(cpu) = self.cpu {
            tailbound::sys::proc::pin_to_cpu(cpu)
                .map_err(|e| std::io::Error::new(e.kind(), format!("pinning to CPU {cpu}: {e}")))?;
        }
        tailbound::sys::proc::prefault_stack(256 << 10);
        Ok(())
    }

    /// Runs the periodic loop on a thread of its own, in SCHED_FIFO when `rt_priority` is set.
    fn periodic(
        &self,
        config: &PeriodicConfig,
        op: impl FnMut(u64) -> std::io::Result<Flow> + Send,
    ) -> std::io::Result<crate::periodic::PeriodicResult> {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.prepare_thread()?;
                run_periodic(config, op)
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the periodic thread panicked")))
        })
    }

    fn run_set(
        &self,
        case: &RecordCase,
        set: u32,
        progress: Option<Progress>,
    ) -> Result<SetOutcome, String> {
        let case_dir = self
            .dir
            .join(format!("case-{}", case.id().replace('@', "-")));
        std::fs::create_dir_all(&case_dir)
            .map_err(|e| format!("creating {}: {e}", case_dir.display()))?;
        let pool_dir = case_dir.join("recycle-pool");
        if case.design.allocation == Allocation::Recycle && set == 0 {
            // Prepared ahead of the recording, as a deployment would: no allocation beside it.
            RecyclePool::prepare(&pool_dir, 1, self.expected_bytes()).map_err(|e| e.to_string())?;
        }
        let output = case_dir.join("recording.tbr");
        let options = self.options(&case.design, &pool_dir);
        let locks_memory = options.mlockall;
        let load = Load::start(case.load, &case_dir, &self.load).map_err(|e| e.to_string())?;
        let mut payload = vec![0u8; self.record_bytes as usize];
        let config = PeriodicConfig {
            period: self.period,
            count: self.writes,
            progress,
        };
        if case.design.noise_floor {
            let mut sink = vec![0u8; payload.len()];
            let mut trace = SlowTrace::new(TracedCalls::Recorder, TRACE_BOUND.as_nanos() as u64);
            let run = self.periodic(&config, |i| {
                let start = trace.begin(None);
                payload[..8].copy_from_slice(&i.to_le_bytes());
                sink.copy_from_slice(&payload);
                std::hint::black_box(&mut sink);
                trace.end(start, i, None, None);
                Ok(Flow::Continue)
            });
            let stopped = load.stop().map_err(|e| e.to_string());
            let run = run.map_err(|e| e.to_string())?;
            stopped?;
            return Ok(SetOutcome {
                calls: run.latency,
                call_misses: run.deadline_misses,
                writer: None,
                dropped: 0,
                worst_call: run.slowest_call.map(|i| WorstWrite::of(i, Some(&trace))),
                worst_writer_call: None,
            });
        }
        let recorded = std::thread::scope(|s| {
            s.spawn(|| {
                // Created on the thread that records but before its real-time settings, so the
                // recorder's own threads keep ordinary ones.
                let mut recorder = Recorder::create(&output, options).map_err(|e| e.to_string())?;
                let run = self.prepare_thread().and_then(|()| {
                    run_periodic(&config, |i| {
                        payload[..8].copy_from_slice(&i.to_le_bytes());
                        recorder
                            .write(&payload)
                            .map(|()| Flow::Continue)
                            .map_err(|e| std::io::Error::other(e.to_string()))
                    })
                });
                match run {
                    Ok(run) => Ok((run, recorder.finish().map_err(|e| e.to_string())?)),
                    Err(err) => Err(err.to_string()),
                }
            })
            .join()
            .unwrap_or_else(|_| Err("the recording thread panicked".to_string()))
        });
        if locks_memory {
            // The next case starts with nothing locked, whatever its design.
            tailbound::sys::proc::unlock_all_memory().map_err(|e| format!("munlockall: {e}"))?;
        }
        let (run, summary) = match recorded {
            Ok(r) => r,
            Err(err) => {
                drop(load.stop());
                return Err(err);
            }
        };
        load.stop().map_err(|e| e.to_string())?;
        if case.design.allocation == Allocation::Recycle {
            RecyclePool::open(&pool_dir)
                .and_then(|pool| pool.give_back(&output))
                .map_err(|e| e.to_string())?;
        } else {
            std::fs::remove_file(&output)
                .map_err(|e| format!("removing {}: {e}", output.display()))?;
        }
        let writer = summary.writer_latency.map(LatencyHistogram::from_histogram);
        Ok(SetOutcome {
            calls: run.latency,
            call_misses: run.deadline_misses,
            writer,
            dropped: summary.counters.dropped + summary.counters.overwritten,
            worst_call: run
                .slowest_call
                .map(|i| WorstWrite::of(i, summary.slow_writes.as_ref())),
            worst_writer_call: summary
                .writer_slow_writes
                .as_ref()
                .and_then(WorstWrite::slowest_in),
        })
    }

    fn run_case(&self, case: &RecordCase) -> Result<Vec<CaseResult>, String> {
        let _flusher_off = if case.design.flusher == Flusher::Off {
            Some(FlusherGuard::disable().map_err(|e| e.to_string())?)
        } else {
            None
        };
        let mut worst: Option<SetOutcome> = None;
        for set in 0..self.sets {
            let label = format!("{} set {}/{}", case.id(), set + 1, self.sets);
            let progress = self.progress.then(|| Progress::new(self.writes, &label));
            let outcome = self.run_set(case, set, progress.clone())?;
            if let Some(p) = progress {
                p.finish();
            }
            let is_worse = worst
                .as_ref()
                .is_none_or(|w| outcome.calls.max() > w.calls.max());
            if is_worse {
                worst = Some(outcome);
            }
        }
        let case_dir = self
            .dir
            .join(format!("case-{}", case.id().replace('@', "-")));
        // Best effort: the case's own files are gone already; this removes its empty directory.
        let _ = std::fs::remove_dir_all(&case_dir);
        let Some(worst) = worst else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        match &worst.writer {
            Some(writer) => {
                // Decoupled: the writer thread's write() calls, and the producer's calls.
                let period_ns = self.period.as_nanos() as u64;
                let writer_misses = writer.inner().count_between(period_ns + 1, u64::MAX);
                rows.push(CaseResult::measured(
                    case,
                    &case.design.label,
                    self,
                    &writer.summary(writer_misses),
                    writer.box_stats(),
                    worst.dropped,
                    worst.worst_writer_call.clone(),
                ));
                rows.push(CaseResult::measured(
                    case,
                    PRODUCER_DESIGN,
                    self,
                    &worst.calls.summary(worst.call_misses),
                    worst.calls.box_stats(),
                    worst.dropped,
                    worst.worst_call.clone(),
                ));
            }
            None => rows.push(CaseResult::measured(
                case,
                &case.design.label,
                self,
                &worst.calls.summary(worst.call_misses),
                worst.calls.box_stats(),
                worst.dropped,
                worst.worst_call.clone(),
            )),
        }
        Ok(rows)
    }

    /// Runs every case in order, calling `on_case` with each case's rows as they are measured.
    /// Cases that need root are reported as skipped (with the reason) when not root.
    pub fn run(
        &self,
        mut on_case: impl FnMut(&[CaseResult]),
    ) -> Result<RecordReport, RecordBenchError> {
        let root = tailbound::sys::proc::is_root();
        let mut results = Vec::new();
        for case in &self.cases {
            let rows = if case.design.needs_root() && !root {
                vec![CaseResult::skipped(
                    case,
                    self,
                    "needs root (the kernel flusher is turned off through vm.dirty_* sysctls)"
                        .to_string(),
                )]
            } else {
                self.run_case(case)
                    .map_err(|message| RecordBenchError::Case {
                        case: case.id(),
                        message,
                    })?
            };
            on_case(&rows);
            results.extend(rows);
        }
        let targets = check_targets(&results);
        Ok(RecordReport {
            experiment: "record",
            period_us: self.period.as_micros() as u64,
            record_bytes: self.record_bytes,
            cases: results,
            targets,
        })
    }
}
