//! A throw-away ext4 or XFS file system on a loop device, mounted `noatime,lazytime` like the
//! papers' setups; with its image in `/dev/shm` it is a kernel file system on DRAM.
//!
//! Owns the image file, the loop device and the mount, and undoes all three on drop, in reverse
//! order. Needs root and the `losetup`, `mkfs.ext4` (or `mkfs.xfs`), `mount` and `umount` programs.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a loop file system could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopFsError {
    #[error("a loop-mounted file system needs root (run as root or drop --loop-ext4)")]
    NotRoot,
    #[error("loop file system: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("loop file system: `{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
}

/// Which file system a loop device gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopKind {
    Ext4,
    Xfs,
}

impl LoopKind {
    pub fn name(self) -> &'static str {
        match self {
            LoopKind::Ext4 => "ext4",
            LoopKind::Xfs => "xfs",
        }
    }

    fn mkfs(self) -> (&'static str, &'static [&'static str]) {
        match self {
            LoopKind::Ext4 => ("mkfs.ext4", &["-q", "-F"]),
            LoopKind::Xfs => ("mkfs.xfs", &["-q", "-f"]),
        }
    }
}

/// An ext4 or XFS image on a loop device, mounted at [`LoopFs::mount_point`] until dropped.
#[derive(Debug)]
pub struct LoopFs {
    scratch: Option<tempfile::TempDir>,
    image: PathBuf,
    device: Option<String>,
    mount_point: PathBuf,
    mounted: bool,
}

pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, LoopFsError> {
    let command = format!("{program} {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| LoopFsError::Io {
            what: format!("running {program}"),
            source,
        })?;
    if !output.status.success() {
        return Err(LoopFsError::Command {
            command,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

impl LoopFs {
    /// Creates a sparse image of `size_bytes` in a temporary directory under `parent`, attaches it
    /// with direct I/O (so the backing file's page cache does not double-buffer), formats it ext4
    /// and mounts it with `noatime,lazytime`.
    pub fn create_ext4(parent: &Path, size_bytes: u64) -> Result<LoopFs, LoopFsError> {
        LoopFs::create(LoopKind::Ext4, parent, size_bytes)
    }

    /// Like [`LoopFs::create_ext4`], for either file system.
    pub fn create(kind: LoopKind, parent: &Path, size_bytes: u64) -> Result<LoopFs, LoopFsError> {
        if !tailbound::sys::proc::is_root() {
            return Err(LoopFsError::NotRoot);
        }
        let scratch = tempfile::Builder::new()
            .prefix("tailbound-loop-")
            .tempdir_in(parent)
            .map_err(|source| LoopFsError::Io {
                what: format!("creating a scratch directory in {}", parent.display()),
                source,
            })?;
        let image = scratch.path().join(format!("{}.img", kind.name()));
        let mount_point = scratch.path().join("mnt");
        std::fs::create_dir(&mount_point).map_err(|source| LoopFsError::Io {
            what: format!("creating {}", mount_point.display()),
            source,
        })?;
        let file = std::fs::File::create(&image).map_err(|source| LoopFsError::Io {
            what: format!("creating {}", image.display()),
            source,
        })?;
        file.set_len(size_bytes).map_err(|source| LoopFsError::Io {
            what: format!("sizing {}", image.display()),
            source,
        })?;
        drop(file);
        let mut fs = LoopFs {
            scratch: Some(scratch),
            image,
            device: None,
            mount_point,
            mounted: false,
        };
        let image = fs.image.display().to_string();
        let device = run(
            "losetup",
            &["--find", "--show", "--direct-io=on", image.as_str()],
        )?;
        fs.device = Some(device.clone());
        let (mkfs, mkfs_args) = kind.mkfs();
        let mut args = mkfs_args.to_vec();
        args.push(device.as_str());
        run(mkfs, &args)?;
        let mount_point = fs.mount_point.display().to_string();
        run(
            "mount",
            &[
                "-t",
                kind.name(),
                "-o",
                "noatime,lazytime",
                device.as_str(),
                mount_point.as_str(),
            ],
        )?;
        fs.mounted = true;
        Ok(fs)
    }

    /// Where the file system is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.mount_point
    }

    /// The loop device, e.g. `/dev/loop3`.
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let mount_point = self.mount_point.display().to_string();
            // A file closed just before may still be held for a moment (an io_uring instance is
            // torn down asynchronously), which makes umount fail with "target is busy": retry
            // for up to 5 s before giving up.
            let mut tries = 0;
            while let Err(err) = run("umount", &[mount_point.as_str()]) {
                tries += 1;
                if tries >= 100 {
                    eprintln!("tailbound: warning: {err}");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        if let Some(device) = self.device.take() {
            if let Err(err) = run("losetup", &["--detach", device.as_str()]) {
                eprintln!("tailbound: warning: {err}");
            }
        }
        drop(self.scratch.take());
    }
}
