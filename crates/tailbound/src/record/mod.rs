//! The real-time recorder (seed 000): periodic records written with bounded `write()` latency.
//!
//! `Recorder::create(path, options)` prepares everything a recording needs — the file's blocks
//! (appended, `fallocate`d, zero-filled or recycled from a pool), a background flush thread, the
//! decoupled ring, the flusher settings — so that `write` only frames, copies and writes.
//! `finish` cuts the unused tail (or writes a trailer in recycle mode) and `fsync`s. `verify`
//! reads a framed recording back and reports its valid prefix, as after a crash.
//!
//! This module owns the recording's file and the threads it starts. It changes system settings only
//! through [`FlusherGuard`], which restores them.

mod error;
mod fileops;
mod flusher;
pub mod frame;
pub mod hygiene;
mod options;
mod recorder;
mod recycle;
mod ring;
pub mod trace;
mod verify;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_rt;

pub(crate) use error::io_err;
pub use error::RecordError;
pub use fileops::FileOp;
pub use flusher::FlusherGuard;
pub use options::{
    Allocation, DecoupledOptions, FlushMode, Flusher, Framing, Overflow, RecorderOptions,
    FLUSH_EVERY_BYTES_MIN, RECORD_BYTES_MAX,
};
pub use recorder::{DurableWatch, Recorder};
pub use recycle::RecyclePool;
pub use trace::{FlusherActivity, SlowTrace, SlowWrite, TracedCalls};
pub use verify::{read_full, verify, StopReason, VerifyReport};

/// What a recording has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordCounters {
    /// Records written to the file.
    pub frames: u64,
    pub payload_bytes: u64,
    /// Records the decoupled ring's `drop` policy discarded.
    pub dropped: u64,
    /// Records the decoupled ring's `overwrite` policy discarded.
    pub overwritten: u64,
    /// Writes that waited for room in the decoupled ring (`block` policy).
    pub blocked: u64,
    /// Completed background flushes.
    pub flushes: u64,
}

/// What `finish` reports.
#[derive(Debug, Clone)]
pub struct RecordSummary {
    pub counters: RecordCounters,
    /// The recorded length: the end of the last frame (or of the trailer, in recycle mode). The
    /// file is cut to it, except in recycle mode, where it keeps its pool size.
    pub file_bytes: u64,
    /// Each `write()` system call's latency in ns, with `measure_writes`.
    pub writer_latency: Option<hdrhistogram::Histogram<u64>>,
    /// The application's `write` calls slower than `trace_slow` (in decoupled mode, its copies into
    /// the ring).
    pub slow_writes: Option<SlowTrace>,
    /// In decoupled mode, the writer thread's writes slower than `trace_slow`.
    pub writer_slow_writes: Option<SlowTrace>,
}
