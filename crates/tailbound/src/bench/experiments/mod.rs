//! The experiments of `tailbound bench`, one module each, built on the framework in `bench`.
//!
//! - [`record`]: the recorder experiment (seed 000, Table 1) under background loads.
//! - [`sync_write`]: O_SYNC write, rewrite and random-rewrite throughput, tbfs against ext4 (Table 2).
//! - [`recovery`]: how long opening a crashed tbfs pool takes, on the simulated device and after `kill -9`.
//! - [`loopfs`]: a throw-away loop-mounted ext4 for experiments that want the paper's mount options.
//! - [`pool`]: the tbfs pool file every experiment on the file backend uses.

pub mod loopfs;
pub mod pool;
pub mod record;
pub mod recovery;
pub mod sync_write;
