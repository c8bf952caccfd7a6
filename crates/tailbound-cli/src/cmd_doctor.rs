//! `tailbound doctor [PATH]`: what a directory's file system and writeback settings mean for latency.

use crate::CliResult;

#[derive(clap::Args)]
pub struct DoctorArgs {}

pub fn run(_args: DoctorArgs) -> CliResult {
    Err("doctor: not built yet".into())
}
