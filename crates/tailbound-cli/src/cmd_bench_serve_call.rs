//! `tailbound bench serve-call`: µs per call through the pool server, from
//! `tailbound_bench::experiments::serve_call`.

use std::path::PathBuf;

use clap::Args;
use tailbound_bench::experiments::serve_call::ServeCallBench;

use crate::CliResult;

/// Per-call cost of the pool server: a memory pool served in this process, and one client
/// thread on the server's socket and one on its shared-memory rings making the same calls: an
/// empty round trip (a request answered from a constant), `stat` of one path again and again,
/// `stat` of a different path each call (round-robin over many files), `fstat`, and a 4 KiB
/// `pread`. Beside them the same calls on the pool in process (no server) and the kernel's on
/// tmpfs, in the same run. Reports the median µs per call over repeats. The full run (7 repeats
/// of 20,000 calls per case) takes about a minute in a release build; --quick seconds.
#[derive(Args)]
pub struct ServeCallArgs {
    /// 3 repeats of 2,000 calls, 2,000 files.
    #[arg(long)]
    quick: bool,
    /// Calls per case and repeat.
    #[arg(long)]
    calls: Option<u32>,
    /// Repeats of every case; medians are reported.
    #[arg(long)]
    repeats: Option<u32>,
    /// A tmpfs directory for the kernel's side (default /dev/shm).
    #[arg(long)]
    tmpfs: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: ServeCallArgs) -> CliResult {
    let mut bench = if args.quick {
        ServeCallBench::quick()
    } else {
        ServeCallBench::full()
    };
    if let Some(v) = args.calls {
        bench.calls = v.max(1);
    }
    if let Some(v) = args.repeats {
        bench.repeats = v.max(1);
    }
    if let Some(v) = args.tmpfs {
        bench.tmpfs = v;
    }
    eprintln!(
        "bench serve-call: {} repeats of {} calls per case, uncached stats over {} files",
        bench.repeats, bench.calls, bench.files
    );
    crate::cmd_bench_common::run_with_progress(
        bench.steps(),
        "serve-call",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}
