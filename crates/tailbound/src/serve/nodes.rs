//! `mknod` by path, for the server's sessions and for a pool opened in a client's own process:
//! the engine makes special files by parent inode ([`Fs::mknod_in`]), as a kernel front end asks.

use crate::tbfs::by_ino::ROOT;
use crate::tbfs::{Error, FileKind, Fs, Result};

/// The kind `mode`'s type bits name for `mknod` (no type bits: a regular file); a directory,
/// a link or bits that name no type are `EINVAL`, as the kernel says.
pub fn mknod_kind(mode: u32) -> Result<FileKind> {
    if mode & libc::S_IFMT == 0 {
        return Ok(FileKind::File);
    }
    match FileKind::from_mode(mode) {
        Some(k) if k.is_special() || k == FileKind::File => Ok(k),
        _ => Err(Error::Invalid(format!("mknod of mode {mode:o}"))),
    }
}

/// Makes `path` (relative to the pool's root) a FIFO, socket, device or empty regular file as
/// `mode`'s type bits say, with its permission bits and `owner`.
pub fn mknod_path(fs: &Fs, path: &str, mode: u32, rdev: u32, owner: (u32, u32)) -> Result<()> {
    let kind = mknod_kind(mode)?;
    let path = path.trim_matches('/');
    let (parent, name) = match path.rsplit_once('/') {
        Some((p, n)) => (fs.stat(p)?.ino, n),
        None if path.is_empty() => return Err(Error::Exists("/".into())),
        None => (ROOT, path),
    };
    fs.mknod_in(parent, name, kind, mode & 0o7777, rdev, owner)
        .map(|_| ())
}
