//! File system facts and actions: `statfs(2)` for `doctor`, `syncfs(2)` and `umount2(2)` for
//! `tailbound umount`.

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

/// What `cachestat(2)` counts for a byte range of a file, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStat {
    pub nr_cache: u64,
    pub nr_dirty: u64,
    pub nr_writeback: u64,
    pub nr_evicted: u64,
    pub nr_recently_evicted: u64,
}

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `cachestat(2)` (Linux 6.5+): page-cache state of `[offset, offset + len)`. `ENOSYS` on older
/// kernels.
pub fn cachestat(file: &std::fs::File, offset: u64, len: u64) -> io::Result<CacheStat> {
    use std::os::fd::AsRawFd;
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = CachestatRange { off: offset, len };
    let mut out = [0u64; 5];
    // SAFETY: `range` and `out` are valid for the kernel's struct cachestat_range (two u64) and
    // struct cachestat (five u64); the descriptor is owned by `file`; flags must be 0.
    let ret = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            out.as_mut_ptr(),
            0u32,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(CacheStat {
        nr_cache: out[0],
        nr_dirty: out[1],
        nr_writeback: out[2],
        nr_evicted: out[3],
        nr_recently_evicted: out[4],
    })
}

/// `syncfs(2)` of the file system holding `path` (a directory or file that opens read-only).
pub fn syncfs(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)?;
    // SAFETY: syncfs on a descriptor that stays open for the call.
    cvt(unsafe { libc::syncfs(f.as_raw_fd()) })?;
    Ok(())
}

/// `umount2(2)` of the mount at `path`; `lazy` detaches it even while in use (`MNT_DETACH`).
pub fn unmount(path: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    cvt(unsafe { libc::umount2(c.as_ptr(), flags) })?;
    Ok(())
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

    #[test]
    fn cachestat_counts_written_pages() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        match cachestat(&f, 0, 1 << 20) {
            Ok(c) => assert_eq!(c.nr_cache, 256, "{c:?}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "{e}"),
        }
    }
}
