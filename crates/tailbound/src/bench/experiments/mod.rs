//! The experiments of `tailbound bench`, one module each, built on the framework in `bench`.
//!
//! - [`record`]: the recorder experiment (seed 000, Table 1) under background loads.
//! - [`loopfs`]: a throw-away loop-mounted ext4 for experiments that want the paper's mount options.

pub mod loopfs;
pub mod record;
