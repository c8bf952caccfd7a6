//! Special files in a mount: `mknod` and `mkfifo` make FIFOs, sockets and device nodes in the
//! pool (the kernel serves their I/O, so a pool keeps only the inode).
//!
//! A Unix socket bound at a library path: the pool keeps its inode (a socket node, which
//! `stat`, `chmod` and `unlink` see as on any file system) and the kernel's socket is bound to
//! an abstract address named after the pool and that inode, which a `connect` to the path
//! finds again. Unlinking the node leaves the bound socket alone, as the kernel does.

use crate::real;
#[cfg(test)]
use crate::vfs::ofd::split_dev;
use crate::vfs::ofd::VfsResult;
use crate::vfs::{LibPath, Shim};

/// A device number as `mknod` gives it (glibc's `dev_t`) in the 32-bit form a pool keeps, the
/// kernel's own for FUSE (`new_encode_dev`), so both front ends agree on it.
pub fn join_dev(dev: u64) -> VfsResult<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major > 0xfff || minor > 0xf_ffff {
        return Err(libc::EINVAL);
    }
    Ok((minor & 0xff) | (major << 8) | ((minor & !0xff) << 12))
}

impl Shim {
    /// `mknod`: a FIFO, socket, device node or empty regular file, by the kernel's rules (a
    /// directory `EPERM`, no type `EINVAL`, a device only for root).
    pub fn mknod(&self, loc: &LibPath, mode: u32, dev: u64) -> VfsResult<()> {
        let kind = mode & libc::S_IFMT;
        match kind {
            0 | libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => {}
            libc::S_IFCHR | libc::S_IFBLK if real::euid() == 0 => {}
            libc::S_IFCHR | libc::S_IFBLK | libc::S_IFDIR => return Err(libc::EPERM),
            _ => return Err(libc::EINVAL),
        }
        let rdev = if matches!(kind, libc::S_IFCHR | libc::S_IFBLK) {
            join_dev(dev)?
        } else {
            0
        };
        let fs = self.fs(loc.mount)?;
        if loc.rel.is_empty() {
            return Err(libc::EEXIST);
        }
        let mode = kind | (mode & 0o7777 & !self.umask());
        fs.mknod(&loc.rel, mode, rdev).map_err(|e| e.errno())
    }
}

/// The abstract Unix address (without its leading NUL) of a socket bound at inode `ino` of
/// mount number `m`'s pool: the same in every process with the same pool.
fn socket_name(pool: &std::path::Path, ino: u64) -> Vec<u8> {
    use std::hash::{Hash, Hasher};
    // Fixed keys: every process computes the same name for one pool.
    let mut h = std::hash::DefaultHasher::new();
    pool.hash(&mut h);
    format!("tailbound/{:016x}/{ino}", h.finish()).into_bytes()
}

impl Shim {
    /// `bind` of a Unix socket at a library path: makes the socket node (`EADDRINUSE` if the
    /// name exists) and answers the abstract name to bind the kernel's socket to. `undo`
    /// removes the node again if the kernel's bind then fails.
    pub fn bind_socket(&self, loc: &LibPath) -> VfsResult<Vec<u8>> {
        let mode = libc::S_IFSOCK | 0o777;
        match self.mknod(loc, mode, 0) {
            Err(libc::EEXIST) => return Err(libc::EADDRINUSE),
            r => r?,
        }
        let fs = self.fs(loc.mount)?;
        let st = fs.lstat(&loc.rel).map_err(|e| e.errno())?;
        Ok(socket_name(&self.mounts[loc.mount].pool, st.ino))
    }

    /// Takes back the node `bind_socket` made, when the kernel's bind failed.
    pub fn unbind_socket(&self, loc: &LibPath) {
        if let Ok(fs) = self.fs(loc.mount) {
            let _ = fs.unlink(&loc.rel);
        }
    }

    /// `connect` (or `sendto`) to a library path: the abstract name of the socket bound there;
    /// `ECONNREFUSED` for a file that is not a socket, as the kernel says.
    pub fn socket_at(&self, loc: &LibPath) -> VfsResult<Vec<u8>> {
        let fs = self.fs(loc.mount)?;
        let st = fs.stat(&loc.rel).map_err(|e| e.errno())?;
        if st.kind != tailbound::tbfs::FileKind::Socket {
            return Err(libc::ECONNREFUSED);
        }
        Ok(socket_name(&self.mounts[loc.mount].pool, st.ino))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_survive_the_pools_encoding() {
        for (major, minor) in [
            (0, 0),
            (1, 2),
            (8, 1),
            (0xfff, 0xff),
            (3, 0x12345),
            (259, 7),
        ] {
            let kept = join_dev(libc::makedev(major, minor)).unwrap();
            assert_eq!(split_dev(kept), (major, minor));
        }
        // The kernel's encoding of 8:1 (sda1), as FUSE hands it to a pool.
        assert_eq!(join_dev(libc::makedev(8, 1)).unwrap(), 0x801);
        assert_eq!(join_dev(libc::makedev(0x1000, 0)), Err(libc::EINVAL));
    }
}
