//! The experiment framework every `tailbound bench` experiment is built on, and the experiments.
//!
//! - [`timer`]: an absolute-time periodic schedule (`clock_nanosleep(TIMER_ABSTIME)`, no drift).
//! - [`periodic`]: runs an operation once per period, times each call, counts deadline misses.
//! - [`stats`]: HDR latency histograms and their summaries (min … p99.99, max, deadline misses).
//! - [`sets`]: repeated sets, keeping the worst, as the papers report.
//! - [`load`]: background loads on their own threads (truncation, allocation, readers, writers).
//! - [`report`], [`plot`], [`progress`]: Markdown tables, JSON, SVG box plots and bar charts,
//!   progress bars, and the check of an issue's targets.
//! - [`rng`]: a seeded random number generator, so one seed replays one run.
//! - [`workload`]: filebench-like workload generators (fileserver, varmail, webserver) over a small
//!   file-system interface with POSIX and native tbfs implementations.
//! - [`experiments`]: the experiments themselves.
//!
//! The framework measures; it never decides whether a figure is good. Experiments compare against
//! a baseline measured in the same run. It reaches the kernel only through `tailbound::sys` and
//! knows nothing of `record` or any other engine: experiments bring the operation to time. It has no `unsafe` of its own.
#![forbid(unsafe_code)]

pub mod experiments;
pub mod load;
pub mod periodic;
pub mod plot;
pub mod progress;
pub mod report;
pub mod rng;
pub mod sets;
pub mod stats;
pub mod timer;
pub mod workload;
