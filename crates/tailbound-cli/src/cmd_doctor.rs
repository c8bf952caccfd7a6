//! `tailbound doctor [PATH]`: what a directory's file system and writeback settings mean for latency.

use std::path::PathBuf;

use tailbound::doctor::{diagnose, DoctorOptions};
use tailbound_bench::report::write_json;

use crate::CliResult;

/// Inspect where you are about to record: the file system and its mount options (atime, lazytime,
/// journaling mode), the device's I/O scheduler, the kernel's dirty-page settings, free space, and a
/// live probe of whether sync_file_range starts writeback there; then advice, with commands.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Directory (or file) to inspect. Default: the current directory.
    path: Option<PathBuf>,
    /// Also write the findings as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Skip the live probe (it writes and removes a 4 MiB file in PATH).
    #[arg(long)]
    no_probe: bool,
}

pub fn run(args: DoctorArgs) -> CliResult {
    let path = args.path.unwrap_or_else(|| PathBuf::from("."));
    let d = diagnose(
        &path,
        &DoctorOptions {
            probe: !args.no_probe,
        },
    )?;
    print!("{d}");
    if let Some(json) = args.json {
        write_json(&json, &d)?;
    }
    Ok(())
}
