//! The `tailbound` command-line tool: one binary, one subcommand per capability.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_bench;
mod cmd_demo;
mod cmd_doctor;
mod cmd_record;

/// What a subcommand returns: any error is printed as `tailbound: error: ...` and exits with 1.
pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser)]
#[command(
    name = "tailbound",
    version,
    about = "Fast, bounded-latency, crash-safe writes on Linux, in user space",
    long_about = "tailbound makes writes on Linux fast, bounded in latency and crash-safe, in user space, \
on an unmodified kernel.\n\n\
Start with `tailbound demo` for a one-minute tour, `tailbound doctor DIR` to see what a directory's \
file system and the kernel's writeback settings mean for latency, and `tailbound record --help` to \
record periodic data with bounded write() latency."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A one-minute tour on a temporary directory: the conventional design and tailbound's
    /// recorder side by side, with and without background load, then a crash-cut recording.
    Demo(cmd_demo::DemoArgs),
    /// Record periodic data with bounded write() latency, or verify a recording.
    Record(cmd_record::RecordArgs),
    /// Inspect a directory's file system and the kernel's writeback settings, with advice.
    Doctor(cmd_doctor::DoctorArgs),
    /// Run a paper's experiment side by side against the kernel's conventional path on this
    /// machine: a Markdown table on stdout, optionally JSON and an SVG plot.
    Bench(cmd_bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cmd_demo::run(args),
        Command::Record(args) => cmd_record::run(args),
        Command::Bench(args) => cmd_bench::run(args),
        Command::Doctor(args) => cmd_doctor::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tailbound: error: {err}");
            ExitCode::FAILURE
        }
    }
}
