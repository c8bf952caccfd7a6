//! The experiments of `tailbound bench`, one module each, built on the framework in `bench`.
//!
//! - [`record`]: the recorder experiment (seed 000, Table 1) under background loads.
//! - [`sync_write`]: O_SYNC write, rewrite and random-rewrite throughput, tbfs against ext4 (Table 2).
//! - [`recovery`]: how long opening a crashed tbfs pool takes, on the simulated device and after `kill -9`.
//! - [`soak`]: tbfs written as real programs write (mixed file sizes, renames, snapshots), held
//!   at several fractions of the pool, with power cuts; [`soak_model`] is what it expects back.
//! - [`cleaner`]: tbfs write throughput and write amplification with the cleaner, uniform and
//!   hot/cold overwrites at several pool utilisations.
//! - [`delete`]: how long deleting a large file holds tbfs's metadata lock.
//! - [`sched_overhead`]: the scheduler's CPU per request against a device that completes at once.
//! - [`serve_call`]: µs per call through the pool server, on its socket and on its rings, beside
//!   the kernel's calls on tmpfs.
//! - [`fairness`]: weighted shares of huge direct I/Os, BFQ with cgroup weights against `none` (seed 003).
//! - [`priority`]: high-priority O_SYNC append latency under a low-priority copy, per kernel
//!   scheduler (seed 004).
//! - [`fileserver`]: seed 002's filebench workloads on tmpfs, XFS and ext4 on DRAM, and tbfs (native
//!   and through the shim).
//! - [`blockdev`]: loop devices, kernel I/O schedulers and blkio cgroups, undone when dropped.
//! - [`tenants`]: tenants as separate processes, started and stopped together.
//! - [`loopfs`]: a throw-away loop-mounted ext4 or XFS for experiments that want the paper's mount options.
//! - [`pool`]: the tbfs pool file every experiment on the file backend uses.

pub mod blockdev;
pub mod cleaner;
pub mod delete;
pub mod fairness;
pub mod fileserver;
pub mod loopfs;
pub mod pool;
pub mod priority;
pub mod record;
pub mod recovery;
pub mod sched_overhead;
pub mod serve_call;
pub mod ship;
pub mod soak;
pub mod soak_model;
pub mod sync_write;
pub mod tenants;
