//! tailbound: fast, bounded-latency, crash-safe writes on Linux, in user space, on an unmodified kernel.
//!
//! Modules by concept:
//! - [`record`]: the real-time recorder for periodic data (preallocated files, data-only flushing).
//! - [`sched`]: the user-space I/O scheduler (priority classes, weighted fairness, request splitting).
//! - [`tbfs`]: the log-structured file tree engine; [`dev`]: the storage backends it runs on.
//! - [`serve`]: the pool server, which shares one pool among processes over a Unix socket.
//! - [`doctor`]: inspects a directory's file system and the kernel's writeback settings.
//! - [`units`]: parsing and printing of byte sizes and durations (`16KiB`, `5ms`).
//! - [`panics`]: panics caught at the boundaries (C ABI, shim, the library's threads) with their
//!   site; [`failpoint`]: named places that panic on purpose when a test arms them.
//!
//! All `unsafe` code and raw system calls live in the `sys` module (public: the CLI and the other
//! crates of the workspace use its wrappers too); the rest of the crate calls its safe wrappers.
#![deny(unsafe_code)]

pub mod dev;
pub mod doctor;
pub mod failpoint;
pub mod panics;
pub mod phases;
pub mod record;
pub mod sched;
pub mod serve;
#[allow(unsafe_code)]
pub mod sys;
pub mod tbfs;
pub mod units;

/// Serialises the unit tests that write or compare the `vm.dirty_*` sysctls, which are global.
#[cfg(test)]
pub(crate) static VM_SYSCTL_TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
