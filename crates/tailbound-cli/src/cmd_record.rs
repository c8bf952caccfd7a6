//! `tailbound record`: records periodic data; `tailbound record verify`: checks a recording.

use crate::CliResult;

#[derive(clap::Args)]
pub struct RecordArgs {}

pub fn run(_args: RecordArgs) -> CliResult {
    Err("record: not built yet".into())
}
