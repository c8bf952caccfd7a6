//! A throw-away ext4 file system on a loop device, mounted `noatime,lazytime` like the paper's setup.
//!
//! Owns the image file, the loop device and the mount, and undoes all three on drop, in reverse
//! order. Needs root and the `losetup`, `mkfs.ext4`, `mount` and `umount` programs.

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

/// An ext4 image on a loop device, mounted at [`LoopFs::mount_point`] until dropped.
#[derive(Debug)]
pub struct LoopFs {
    scratch: Option<tempfile::TempDir>,
    image: PathBuf,
    device: Option<String>,
    mount_point: PathBuf,
    mounted: bool,
}

fn run(program: &str, args: &[&str]) -> Result<String, LoopFsError> {
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
        if !crate::sys::proc::is_root() {
            return Err(LoopFsError::NotRoot);
        }
        let scratch = tempfile::Builder::new()
            .prefix("tailbound-loop-")
            .tempdir_in(parent)
            .map_err(|source| LoopFsError::Io {
                what: format!("creating a scratch directory in {}", parent.display()),
                source,
            })?;
        let image = scratch.path().join("ext4.img");
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
        run("mkfs.ext4", &["-q", "-F", device.as_str()])?;
        let mount_point = fs.mount_point.display().to_string();
        run(
            "mount",
            &[
                "-t",
                "ext4",
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
            if let Err(err) = run("umount", &[mount_point.as_str()]) {
                eprintln!("tailbound: warning: {err}");
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
