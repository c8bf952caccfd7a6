//! A tbfs pool at a kernel path, through FUSE: [`serve`] mounts an open pool ([`tailbound::tbfs::Fs`])
//! on a directory and answers the kernel's requests until the directory is unmounted.
//!
//! The kernel does the path walk, the dentry and attribute caches and, with the
//! `default_permissions` mount option, every permission check (owner, mode bits, sticky
//! directories, `chown`/`chmod` rules): the pool sees one directory and one name at a time, by
//! inode number ([`tailbound::tbfs::by_ino`]). Writes go through the kernel's writeback cache, in
//! requests of up to [`Options::max_write`] bytes. POSIX record locks go to the pool's lock table
//! ([`tailbound::tbfs::Fs::locks`]), so any other front end of the same pool sees them; `flock`
//! locks stay in the kernel, which is the only client of a mount.
//!
//! The pool is held as an `Arc<Fs>`: the same process can serve it through other front ends
//! while it is mounted.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tailbound::tbfs::Fs;

mod generations;
mod inodes;
mod invalidate;
mod ops;
mod options;
mod privs;
mod snapshots;
mod stats;

/// The `fuser` this crate is built on, for other FUSE file systems mounted the same way.
pub use fuser;
pub use invalidate::Invalidator;
pub use ops::TbFuse;
pub use options::{Options, DEFAULT_THREADS};
pub use stats::{Kind, RequestCounts};

/// Unmounts a mount [`serve`] made, from any thread (a signal handler's, say): lazily, so
/// processes still using the mount finish with it, and [`serve`] returns once they have.
#[derive(Clone)]
pub struct Unmounter(Arc<Mutex<fuser::SessionUnmounter>>);

impl Unmounter {
    pub fn unmount(&self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).unmount()
    }
}

/// Mounts `fs` on `dir` and serves it until `dir` is unmounted (`umount`, `fusermount3 -u`,
/// or [`Unmounter::unmount`]). `mounted` is called once the kernel has the mount, with a way to
/// end it. `invalidator`, once mounted, drops from the kernel's caches what other front ends of
/// the pool change. The pool is left open: sync or close it after this returns.
pub fn serve(
    fs: Arc<Fs>,
    dir: &Path,
    options: &Options,
    invalidator: &Invalidator,
    mounted: impl FnOnce(Unmounter),
) -> io::Result<()> {
    let config = options.session_config();
    let fuse = TbFuse::new(fs, options);
    let keeper = fuse.keeper();
    let notifier = fuse.notifier_slot();
    let mut session = fuser::Session::new(fuse, dir, &config)?;
    let _ = notifier.set(session.notifier());
    invalidator.attach(session.notifier(), keeper);
    mounted(Unmounter(Arc::new(Mutex::new(session.unmount_callable()))));
    session.run()
}

/// Whether this process may mount through FUSE here: `/dev/fuse` opens, and `fusermount3` is
/// installed or the process is root.
pub fn can_mount() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    let root = tailbound::sys::proc::is_root();
    let helper = ["/usr/bin/fusermount3", "/bin/fusermount3"]
        .iter()
        .any(|p| Path::new(p).exists());
    if root || helper {
        Ok(())
    } else {
        Err("neither root nor fusermount3 (Debian's fuse3 package)".to_string())
    }
}
