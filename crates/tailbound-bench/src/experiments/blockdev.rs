//! The kernel's side of the scheduler experiments: a loop device over a scratch file on the real
//! disk, the I/O scheduler of a block device, and cgroup v1 `blkio` groups with BFQ weights.
//!
//! Each is a guard that undoes what it did when dropped (on success, error and early return
//! alike): the loop device is detached and its file removed, the scheduler put back, the cgroup's
//! processes moved back to the root group and the cgroup removed. Everything needs root.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::loopfs::run;
use tailbound::sys::file::{AlignedBuf, O_DIRECT};

/// Where cgroup v1 mounts its `blkio` controller.
pub const BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";
/// Bytes written per request when a loop device's backing file is filled.
const FILL_CHUNK_BYTES: usize = 8 << 20;

/// Why the kernel side could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockDevError {
    #[error("{0} needs root (loop devices, I/O schedulers and cgroups)")]
    NotRoot(&'static str),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Loop(#[from] super::loopfs::LoopFsError),
    #[error("{0}")]
    Unsupported(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> BlockDevError {
    let what = what.into();
    move |source| BlockDevError::Io { what, source }
}

/// A loop device attached with direct I/O over a file in a scratch directory; detached and
/// removed when dropped.
#[derive(Debug)]
pub struct LoopDevice {
    scratch: Option<tempfile::TempDir>,
    device: Option<String>,
    len: u64,
}

impl LoopDevice {
    /// Writes a file of `len_bytes` (rounded down to whole MiB) in a new scratch directory under
    /// `parent`, filled with a repeating non-zero pattern so every block is allocated (a read of a
    /// hole would cost the disk nothing), then attaches it with `losetup --find --direct-io=on`.
    pub fn create_filled(parent: &Path, len_bytes: u64) -> Result<LoopDevice, BlockDevError> {
        if !tailbound::sys::proc::is_root() {
            return Err(BlockDevError::NotRoot("a loop device"));
        }
        let len = len_bytes / (1 << 20) * (1 << 20);
        if len == 0 {
            return Err(BlockDevError::Unsupported(
                "a loop device needs at least 1 MiB".into(),
            ));
        }
        let scratch = tempfile::Builder::new()
            .prefix("tailbound-loop-")
            .tempdir_in(parent)
            .map_err(io_err(format!(
                "creating a scratch directory in {}",
                parent.display()
            )))?;
        let image = scratch.path().join("disk.img");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(O_DIRECT)
            .open(&image)
            .map_err(io_err(format!("creating {} (O_DIRECT)", image.display())))?;
        let mut chunk = AlignedBuf::zeroed(FILL_CHUNK_BYTES, 4096);
        for (i, b) in chunk.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8 | 1;
        }
        let mut at = 0;
        while at < len {
            let n = (len - at).min(FILL_CHUNK_BYTES as u64) as usize;
            file.write_all_at(&chunk.as_slice()[..n], at)
                .map_err(io_err(format!("filling {}", image.display())))?;
            at += n as u64;
        }
        file.sync_all()
            .map_err(io_err(format!("fsync {}", image.display())))?;
        drop(file);
        let mut dev = LoopDevice {
            scratch: Some(scratch),
            device: None,
            len,
        };
        let image = image.display().to_string();
        let device = run(
            "losetup",
            &["--find", "--show", "--direct-io=on", image.as_str()],
        )?;
        dev.device = Some(device);
        Ok(dev)
    }

    /// The device node, e.g. `/dev/loop3`.
    pub fn path(&self) -> &str {
        self.device.as_deref().unwrap_or("")
    }

    /// The device's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Some(device) = self.device.take() {
            if let Err(err) = run("losetup", &["--detach", device.as_str()]) {
                eprintln!("tailbound: warning: {err}");
            }
        }
        drop(self.scratch.take());
    }
}

/// The kernel I/O schedulers the experiments compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSched {
    None,
    MqDeadline,
    Kyber,
    Bfq,
}

impl KernelSched {
    pub const ALL: [KernelSched; 4] = [
        KernelSched::None,
        KernelSched::MqDeadline,
        KernelSched::Kyber,
        KernelSched::Bfq,
    ];

    /// The name the kernel uses in `queue/scheduler`.
    pub fn name(self) -> &'static str {
        match self {
            KernelSched::None => "none",
            KernelSched::MqDeadline => "mq-deadline",
            KernelSched::Kyber => "kyber",
            KernelSched::Bfq => "bfq",
        }
    }

    pub fn parse(name: &str) -> Option<KernelSched> {
        KernelSched::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// `/sys/block/NAME/queue/scheduler` of a device node such as `/dev/loop3`.
pub fn scheduler_path(device: &str) -> PathBuf {
    let name = Path::new(device)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Path::new("/sys/block").join(name).join("queue/scheduler")
}

/// The scheduler a `queue/scheduler` line marks as active: `none [mq-deadline] kyber` gives
/// `mq-deadline`.
pub fn active_scheduler(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
}

/// A block device's I/O scheduler, set for as long as this guard lives and put back after.
#[derive(Debug)]
pub struct SchedulerGuard {
    path: PathBuf,
    previous: String,
}

impl SchedulerGuard {
    /// Sets `device`'s scheduler to `sched`, remembering the one it had.
    pub fn set(device: &str, sched: KernelSched) -> Result<SchedulerGuard, BlockDevError> {
        let path = scheduler_path(device);
        let line = std::fs::read_to_string(&path)
            .map_err(io_err(format!("reading {}", path.display())))?;
        let previous = active_scheduler(&line)
            .ok_or_else(|| {
                BlockDevError::Unsupported(format!(
                    "{}: no active scheduler in {line:?}",
                    path.display()
                ))
            })?
            .to_string();
        if !line
            .split_whitespace()
            .any(|w| w.trim_matches(['[', ']']) == sched.name())
        {
            return Err(BlockDevError::Unsupported(format!(
                "{device} does not offer the {} scheduler (it offers: {})",
                sched.name(),
                line.trim()
            )));
        }
        let guard = SchedulerGuard { path, previous };
        std::fs::write(&guard.path, sched.name()).map_err(io_err(format!(
            "setting {} to {}",
            guard.path.display(),
            sched.name()
        )))?;
        Ok(guard)
    }
}

impl Drop for SchedulerGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.previous) {
            // The device may already be gone (a loop device detached first); nothing to restore.
            if self.path.exists() {
                eprintln!(
                    "tailbound: warning: restoring {} to {}: {e}",
                    self.path.display(),
                    self.previous
                );
            }
        }
    }
}

/// A cgroup v1 `blkio` group with a BFQ weight (`blkio.bfq.weight`, 1-1000); removed when
/// dropped, after moving any process still in it back to the root group.
#[derive(Debug)]
pub struct BlkioCgroup {
    path: PathBuf,
}

impl BlkioCgroup {
    /// Creates `BLKIO_ROOT/NAME` and sets its weight.
    pub fn create(name: &str, weight: u32) -> Result<BlkioCgroup, BlockDevError> {
        let root = Path::new(BLKIO_ROOT);
        if !root.join("cgroup.procs").exists() {
            return Err(BlockDevError::Unsupported(format!(
                "no cgroup v1 blkio controller at {BLKIO_ROOT}"
            )));
        }
        let path = root.join(name);
        std::fs::create_dir(&path).map_err(io_err(format!("creating {}", path.display())))?;
        let group = BlkioCgroup { path };
        let weight_file = group.path.join("blkio.bfq.weight");
        if !weight_file.exists() {
            return Err(BlockDevError::Unsupported(format!(
                "{} does not exist: this kernel's blkio controller has no BFQ weights",
                weight_file.display()
            )));
        }
        std::fs::write(&weight_file, weight.to_string()).map_err(io_err(format!(
            "writing {weight} to {}",
            weight_file.display()
        )))?;
        Ok(group)
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add(&self, pid: u32) -> Result<(), BlockDevError> {
        let procs = self.path.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .map_err(io_err(format!("moving {pid} into {}", procs.display())))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The weight the kernel holds for the group.
    pub fn weight(&self) -> Result<u32, BlockDevError> {
        let file = self.path.join("blkio.bfq.weight");
        let text = std::fs::read_to_string(&file)
            .map_err(io_err(format!("reading {}", file.display())))?;
        // `default 200` on some kernels, a bare number on others.
        text.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .next_back()
            .ok_or_else(|| {
                BlockDevError::Unsupported(format!("{}: unexpected {text:?}", file.display()))
            })
    }
}

impl Drop for BlkioCgroup {
    fn drop(&mut self) {
        let root_procs = Path::new(BLKIO_ROOT).join("cgroup.procs");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(pids) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
                for pid in pids.split_whitespace() {
                    let _ = std::fs::write(&root_procs, pid);
                }
            }
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                // EBUSY while an exiting process still counts as a member.
                Err(e) if Instant::now() >= deadline => {
                    eprintln!(
                        "tailbound: warning: removing cgroup {}: {e}",
                        self.path.display()
                    );
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n"),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("[none] bfq"), Some("none"));
        assert_eq!(active_scheduler("none"), None);
        assert_eq!(
            scheduler_path("/dev/loop7"),
            Path::new("/sys/block/loop7/queue/scheduler")
        );
        for s in KernelSched::ALL {
            assert_eq!(KernelSched::parse(s.name()), Some(s));
        }
        assert_eq!(KernelSched::parse("cfq"), None);
    }

    /// Root only: a loop device, its scheduler and a weighted cgroup are made and every one of
    /// them is undone when dropped.
    #[test]
    fn guards_undo_everything_they_did() {
        if !tailbound::sys::proc::is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test as root"
            );
            eprintln!("skipping guards_undo_everything_they_did: needs root");
            return;
        }
        let parent = tempfile::tempdir_in("/var/tmp").unwrap();
        let dev = LoopDevice::create_filled(parent.path(), 3 << 20).unwrap();
        let node = dev.path().to_string();
        assert_eq!(dev.len(), 3 << 20);
        let sysfs = scheduler_path(&node);
        let before = std::fs::read_to_string(&sysfs).unwrap();
        {
            let _bfq = SchedulerGuard::set(&node, KernelSched::Bfq).unwrap();
            let now = std::fs::read_to_string(&sysfs).unwrap();
            assert_eq!(active_scheduler(&now), Some("bfq"));
        }
        assert_eq!(std::fs::read_to_string(&sysfs).unwrap(), before);
        // The data reads back through the device.
        let file = std::fs::File::open(&node).unwrap();
        let mut buf = vec![0u8; 4096];
        file.read_exact_at(&mut buf, 1 << 20).unwrap();
        assert!(buf.iter().all(|&b| b != 0));
        drop(file);
        let name = format!("tailbound-test-{}", std::process::id());
        let cg_path;
        {
            let cg = BlkioCgroup::create(&name, 300).unwrap();
            cg_path = cg.path().to_path_buf();
            assert_eq!(cg.weight().unwrap(), 300);
            let mut sleeper = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            cg.add(sleeper.id()).unwrap();
            let members = std::fs::read_to_string(cg.path().join("cgroup.procs")).unwrap();
            assert_eq!(members.trim(), sleeper.id().to_string());
            drop(cg); // moves the sleeper out and removes the group
            assert!(!cg_path.exists());
            sleeper.kill().unwrap();
            sleeper.wait().unwrap();
        }
        let image_dir = std::fs::read_dir(parent.path()).unwrap().count();
        assert_eq!(image_dir, 1);
        drop(dev);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        // No loop device is left over our image (the number itself may be reused at once).
        let attached = run("losetup", &["--list", "--noheadings", "-O", "BACK-FILE"]).unwrap();
        let parent_path = parent.path().display().to_string();
        assert!(!attached.contains(&parent_path), "{attached}");
    }
}
