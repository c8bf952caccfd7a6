//! Where experiments get a tbfs pool on the file backend: one place that creates (zero-filling once)
//! and reopens the pool file, so every experiment measures the same backend.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tailbound::dev::file::FileDevice;
use tailbound::sched::{SchedDevice, Scheduler};
use tailbound::tbfs::{Config as FsConfig, Fs};

/// Creates a pool file of `len_bytes` at `path` (zero-filled once) on the file backend.
pub fn create_file_pool(path: &Path, len_bytes: u64) -> io::Result<Arc<FileDevice>> {
    FileDevice::create(path, len_bytes).map(Arc::new)
}

/// Opens an existing pool file on the file backend.
pub fn open_file_pool(path: &Path) -> io::Result<Arc<FileDevice>> {
    FileDevice::open(path).map(Arc::new)
}

/// How the backend does its I/O, for reports: `O_DIRECT` or buffered, io_uring or `pwrite`.
pub fn describe(dev: &FileDevice) -> String {
    format!(
        "{}, {}",
        if dev.direct() { "O_DIRECT" } else { "buffered" },
        if dev.uses_io_uring() {
            "io_uring"
        } else {
            "pwrite"
        }
    )
}

/// A fresh tbfs pool on `dev` behind a scheduler with `cfg`, for the scheduler experiments: no
/// background checkpoints and no protection period, so only the workload's own commits (and the
/// cleaning they cause) reach the device; `barrier` says which logs are flushed; segments of
/// the size `tailbound fs mkfs` gives a pool of this size. Returns the scheduler too, for
/// adding tenants.
pub fn format_behind_scheduler(
    dev: Arc<FileDevice>,
    cfg: tailbound::sched::Config,
    barrier: tailbound::tbfs::Barrier,
) -> Result<(Arc<Scheduler>, Fs), String> {
    let segment_bytes =
        tailbound::tbfs::fsck::default_segment_bytes(tailbound::dev::Device::len(dev.as_ref()));
    let sched = Scheduler::new(dev, cfg).map_err(|e| e.to_string())?;
    let fs = Fs::format(
        Arc::new(SchedDevice::new(Arc::clone(&sched))),
        &FsConfig {
            checkpoint_every: None,
            protection_period: Duration::ZERO,
            barrier,
            segment_bytes,
            ..FsConfig::default()
        },
    )
    .map_err(|e| format!("formatting the pool: {e}"))?;
    Ok((sched, fs))
}
