//! The `tailbound` command-line tool: one binary, one subcommand per capability.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_bench;
mod cmd_bench_common;
mod cmd_bench_fileserver;
mod cmd_bench_overhead;
mod cmd_bench_record;
mod cmd_bench_sched;
mod cmd_bench_serve_call;
mod cmd_bench_soak;
mod cmd_bench_tbfs;
mod cmd_calibrate;
mod cmd_demo;
mod cmd_doctor;
mod cmd_fs;
mod cmd_fs_common;
mod cmd_fs_files;
mod cmd_fs_inspect;
mod cmd_fs_list;
mod cmd_fs_pool;
mod cmd_fs_snapshot;
mod cmd_mount;
mod cmd_record;
mod cmd_run;
mod cmd_serve;
mod cmd_ship;
mod outcome;
mod serving;

use outcome::{CliResult, ExitStatus};

#[derive(Parser)]
#[command(
    name = "tailbound",
    version,
    about = "Fast, bounded-latency, crash-safe writes on Linux, in user space",
    long_about = "tailbound makes writes on Linux fast, bounded in latency and crash-safe, in user space, \
on an unmodified kernel.\n\n\
Start with `tailbound demo` for a tour of a few minutes, `tailbound doctor DIR` to see what a directory's \
file system and the kernel's writeback settings mean for latency, and `tailbound record --help` to \
record periodic data with bounded write() latency."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A tour of a few minutes on a temporary directory: the conventional design and tailbound's
    /// recorder side by side, with and without background load, then a crash-cut recording.
    Demo(cmd_demo::DemoArgs),
    /// Record periodic data with bounded write() latency, or verify a recording.
    Record(cmd_record::RecordArgs),
    /// Inspect a directory's file system and the kernel's writeback settings, with advice.
    Doctor(cmd_doctor::DoctorArgs),
    /// Run a paper's experiment side by side against the kernel's conventional path on this
    /// machine: a Markdown table on stdout, optionally JSON and an SVG plot.
    Bench(cmd_bench::BenchArgs),
    /// Run an unmodified program with a directory served from a tbfs pool in its own process
    /// (LD_PRELOAD shim).
    Run(cmd_run::RunArgs),
    /// Serve a pool at a directory through FUSE, for every process (returns once mounted).
    Mount(cmd_mount::MountArgs),
    /// Sync and unmount a directory `tailbound mount` serves.
    Umount(cmd_mount::UmountArgs),
    /// Make, fill, list, check and repair tbfs pools: mkfs, ls, cat, put, get, mkdir, rm, mv,
    /// stat, df, checkpoints, snapshot, restore, gc, fsck, info.
    Fs(cmd_fs::FsArgs),
    /// Own a pool and serve it to every process over a Unix socket beside it (POOL.sock);
    /// `tailbound fs` commands then go through the server.
    Serve(cmd_serve::ServeArgs),
    /// Measure a device's service time against request size and store the cost profile the I/O
    /// scheduler uses (per-I/O and per-byte costs, the split size max_io).
    Calibrate(cmd_calibrate::CalibrateArgs),
    /// Ship recordings to Apache Kafka, exactly once across crashes of either side.
    Ship(cmd_ship::ShipArgs),
    /// Rebuild a recording from a Kafka topic (check it with `record verify OUT --against`).
    Fetch(cmd_ship::FetchArgs),
}

/// The engine's block buffers (4 KiB and a header, alive from microseconds to minutes) interleave
/// with everything else the process allocates; glibc's per-thread arenas keep the holes they leave,
/// so a long-running server's or soak's resident memory kept growing while its live heap did not.
/// mimalloc's size-segregated pages give them back.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tailbound::sys::proc::default_sigpipe();
    // Fault tests arm failpoints in the servers this binary runs (`mount`, `serve`).
    tailbound::failpoint::arm_from_env();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cmd_demo::run(args),
        Command::Record(args) => cmd_record::run(args),
        Command::Bench(args) => cmd_bench::run(args),
        Command::Doctor(args) => cmd_doctor::run(args),
        Command::Run(args) => cmd_run::run(args),
        Command::Mount(args) => cmd_mount::run(args),
        Command::Umount(args) => cmd_mount::umount(args),
        Command::Fs(args) => cmd_fs::run(args),
        Command::Serve(args) => cmd_serve::run(args),
        Command::Calibrate(args) => cmd_calibrate::run(args),
        Command::Ship(args) => cmd_ship::run_ship(args),
        Command::Fetch(args) => cmd_ship::run_fetch(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if let Some(status) = err.downcast_ref::<ExitStatus>() {
                return ExitCode::from(status.0);
            }
            eprintln!("tailbound: error: {err}");
            ExitCode::FAILURE
        }
    }
}
