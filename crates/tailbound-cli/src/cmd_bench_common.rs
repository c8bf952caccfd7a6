//! What the `tailbound bench` experiments share: running behind a progress bar, where scratch
//! files go, the directory an experiment works in, stopping on a signal, and finding this binary.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tailbound_bench::experiments::loopfs::LoopFs;
use tailbound_bench::report::write_json;

use crate::CliResult;

/// Runs an experiment of `runs` steps behind a progress bar, prints its report and writes it as
/// JSON to `json` if given.
pub(crate) fn run_with_progress<R: serde::Serialize>(
    runs: u64,
    label: &str,
    json: Option<&Path>,
    run: impl FnOnce(&tailbound_bench::progress::Progress) -> Result<R, String>,
    markdown: impl FnOnce(&R) -> String,
) -> CliResult {
    let progress = tailbound_bench::progress::Progress::new(runs, label);
    let report = run(&progress)?;
    progress.finish();
    println!("{}", markdown(&report));
    if let Some(path) = json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// A directory an experiment works in, and what must be undone when it is done with.
pub(crate) enum WorkDir {
    Loop(LoopFs),
    Given(PathBuf),
    Scratch(tempfile::TempDir),
}

impl WorkDir {
    /// A fresh loop-mounted ext4 of `loop_bytes` when `loop_ext4`, else `dir` (created if missing),
    /// else a new temporary directory under [`scratch_parent`].
    pub(crate) fn new(
        loop_ext4: bool,
        loop_bytes: u64,
        dir: Option<PathBuf>,
    ) -> Result<WorkDir, Box<dyn std::error::Error + Send + Sync>> {
        if loop_ext4 {
            let fs = LoopFs::create_ext4(
                &tailbound_bench::experiments::fairness::default_scratch_parent(),
                loop_bytes,
            )?;
            eprintln!(
                "working on ext4 (noatime,lazytime) on {} at {}",
                fs.device().unwrap_or("a loop device"),
                fs.mount_point().display()
            );
            Ok(WorkDir::Loop(fs))
        } else if let Some(dir) = dir {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            Ok(WorkDir::Given(dir))
        } else {
            let scratch = tempfile::Builder::new()
                .prefix("tailbound-bench-")
                .tempdir_in(tailbound_bench::experiments::fairness::default_scratch_parent())
                .map_err(|e| format!("creating a temporary directory: {e}"))?;
            Ok(WorkDir::Scratch(scratch))
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            WorkDir::Loop(fs) => fs.mount_point(),
            WorkDir::Given(dir) => dir,
            WorkDir::Scratch(dir) => dir.path(),
        }
    }
}

/// A flag SIGINT and SIGTERM set instead of killing the process, so an experiment that changed
/// the machine stops at the next check and undoes its changes on the way out.
pub(crate) fn interrupt_flag() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, flag.clone())
            .map_err(|e| format!("installing a handler for signal {signal}: {e}"))?;
    }
    Ok(flag)
}

pub(crate) fn current_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("finding the tailbound binary: {e}"))
}
