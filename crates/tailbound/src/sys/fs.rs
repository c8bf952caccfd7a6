//! File system facts: `statfs(2)` for `doctor`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::cvt;

/// What `statfs(2)` says about the file system holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    /// The `f_type` magic number (e.g. `0xEF53` for ext2/3/4).
    pub magic: i64,
    pub block_size: u64,
    pub blocks_total: u64,
    pub blocks_free: u64,
    /// Blocks free for unprivileged users.
    pub blocks_available: u64,
}

/// `statfs(2)` on `path`.
pub fn statfs(path: &Path) -> io::Result<FsStat> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `st` is a valid, writable statfs.
    cvt(unsafe { libc::statfs(c_path.as_ptr(), &mut st) })?;
    Ok(FsStat {
        magic: st.f_type as i64,
        block_size: st.f_bsize as u64,
        blocks_total: st.f_blocks,
        blocks_free: st.f_bfree,
        blocks_available: st.f_bavail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statfs_reports_a_sane_file_system() {
        let st = statfs(Path::new("/")).unwrap();
        assert!(st.block_size > 0);
        assert!(st.blocks_free <= st.blocks_total);
        assert!(statfs(Path::new("/nonexistent/tailbound")).is_err());
    }
}
