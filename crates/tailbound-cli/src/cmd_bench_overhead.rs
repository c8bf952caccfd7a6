//! `tailbound bench sched-overhead`: the scheduler's CPU per request, from
//! `tailbound_bench::experiments::sched_overhead`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tailbound::sched::Policy;
use tailbound::units::parse_duration;
use tailbound_bench::experiments::sched_overhead::SchedOverheadBench;

use crate::CliResult;

/// Scheduler cost: the CPU tailbound's scheduler spends per request, against a memory device
/// that completes at once, with 1, 4 and 16 tenants under every policy.
///
/// Two parts per case. The policy part drives the decision logic alone from one thread in a
/// closed loop (each tenant keeps 4 requests of 4 KiB queued) and reports its CPU ns per
/// request: the figure to hold against a kernel elevator's own. The executor part runs one
/// thread per tenant writing 4 KiB blocks through the whole scheduler (submission, dispatcher
/// threads, completion) and, alternating with it, straight to the memory: requests per second,
/// process CPU ns per request, and the scheduler's share (the difference). The targets (default
/// policy, 4 tenants: <= 1 µs per request, >= 100K requests/s) follow the table. The full run
/// (3 repeats, 2 s per executor run) takes about 2 minutes; --quick about 15 seconds.
#[derive(Args)]
pub struct SchedOverheadArgs {
    /// One repeat, 200,000 policy requests and 0.5 s executor runs.
    #[arg(long)]
    quick: bool,
    /// Comma-separated policies (fifo, priority, fair, default). Default: all.
    #[arg(long, value_delimiter = ',')]
    policies: Vec<Policy>,
    /// Comma-separated tenant counts. Default: 1,4,16.
    #[arg(long, value_delimiter = ',')]
    tenants: Vec<usize>,
    /// Requests per policy case.
    #[arg(long)]
    requests: Option<u64>,
    /// How long each executor run lasts (e.g. 2s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Runs of every case; medians are reported.
    #[arg(long)]
    repeats: Option<u32>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: SchedOverheadArgs) -> CliResult {
    let mut bench = if args.quick {
        SchedOverheadBench::quick()
    } else {
        SchedOverheadBench::full()
    };
    if !args.policies.is_empty() {
        bench.policies = args.policies;
    }
    if !args.tenants.is_empty() {
        bench.tenants = args.tenants;
    }
    if let Some(v) = args.requests {
        bench.requests = v;
    }
    if let Some(v) = args.duration {
        bench.duration = v;
    }
    if let Some(v) = args.repeats {
        bench.repeats = v;
    }
    let cases = bench.case_count() as u64;
    eprintln!(
        "bench sched-overhead: {cases} cases x {} repeats, each a policy run of {} requests and two executor runs of {:?}",
        bench.repeats, bench.requests, bench.duration
    );
    crate::cmd_bench_common::run_with_progress(
        cases,
        "sched-overhead",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}
