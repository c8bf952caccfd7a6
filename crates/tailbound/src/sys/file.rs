//! File allocation, data-only flushing and page-cache advice.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use super::cvt;

/// Which `sync_file_range` phases to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncRange {
    /// `SYNC_FILE_RANGE_WRITE`: start writeback of dirty pages in the range, do not wait.
    StartWrite,
    /// `WAIT_BEFORE | WRITE | WAIT_AFTER`: write the range and wait until it is on the device (data
    /// only: no metadata, no device cache flush).
    WriteAndWait,
    /// `SYNC_FILE_RANGE_WAIT_AFTER`: wait for writeback already started on the range.
    WaitAfter,
}

/// `sync_file_range(2)`: flushes file data in `[offset, offset + len)` without touching metadata.
pub fn sync_file_range(file: &File, offset: u64, len: u64, how: SyncRange) -> io::Result<()> {
    let flags = match how {
        SyncRange::StartWrite => libc::SYNC_FILE_RANGE_WRITE,
        SyncRange::WriteAndWait => {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        }
        SyncRange::WaitAfter => libc::SYNC_FILE_RANGE_WAIT_AFTER,
    };
    // SAFETY: plain syscall on a descriptor owned by `file`; no pointers are passed.
    cvt(unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    })?;
    Ok(())
}

/// How `fallocate` should allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocate {
    /// Allocate blocks and grow the file size (mode 0). Blocks are *unwritten* extents on ext4/xfs.
    Grow,
    /// Allocate blocks but keep the file size (`FALLOC_FL_KEEP_SIZE`).
    KeepSize,
}

/// `fallocate(2)`.
pub fn fallocate(file: &File, offset: u64, len: u64, how: Allocate) -> io::Result<()> {
    let mode = match how {
        Allocate::Grow => 0,
        Allocate::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
    };
    // SAFETY: plain syscall on a descriptor owned by `file`; no pointers are passed.
    cvt(unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            mode,
            offset as libc::off_t,
            len as libc::off_t,
        )
    })?;
    Ok(())
}

/// Page-cache advice for `posix_fadvise(2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `POSIX_FADV_DONTNEED`: drop clean cached pages of the range.
    DontNeed,
    /// `POSIX_FADV_SEQUENTIAL`.
    Sequential,
    /// `POSIX_FADV_WILLNEED`: start reading the range into the page cache.
    WillNeed,
}

/// `posix_fadvise(2)`.
pub fn fadvise(file: &File, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
    };
    // SAFETY: plain syscall on a descriptor owned by `file`; no pointers are passed.
    let ret = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            advice,
        )
    };
    // posix_fadvise returns the error number instead of setting errno.
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(false)` if another open file
/// description holds it. Released when every descriptor of this open file is closed.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own; it only changes lock state.
    let ret = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if ret == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// The `open(2)` flag for direct I/O, for `OpenOptionsExt::custom_flags`.
pub const O_DIRECT: i32 = libc::O_DIRECT;

/// A heap buffer whose start is aligned to `align` bytes (for `O_DIRECT`), built without `unsafe`
/// by over-allocating and slicing at the first aligned address.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        let storage = vec![0u8; len + align];
        let addr = storage.as_ptr() as usize;
        let start = addr.next_multiple_of(align) - addr;
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffer_is_aligned_and_sized() {
        for align in [512, 4096] {
            let mut buf = AlignedBuf::zeroed(8192, align);
            assert_eq!(buf.as_slice().as_ptr() as usize % align, 0);
            assert_eq!(buf.as_slice().len(), 8192);
            buf.as_mut_slice()[8191] = 7;
            assert_eq!(buf.as_slice()[8191], 7);
        }
    }

    #[test]
    fn allocation_flush_and_advice_work_on_a_temp_file() {
        let file = tempfile::tempfile().unwrap();
        fallocate(&file, 0, 1 << 20, Allocate::Grow).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 20);
        fallocate(&file, 1 << 20, 1 << 20, Allocate::KeepSize).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 20);
        sync_file_range(&file, 0, 1 << 20, SyncRange::StartWrite).unwrap();
        sync_file_range(&file, 0, 1 << 20, SyncRange::WaitAfter).unwrap();
        sync_file_range(&file, 0, 1 << 20, SyncRange::WriteAndWait).unwrap();
        fadvise(&file, 0, 1 << 20, Advice::DontNeed).unwrap();
        fadvise(&file, 0, 0, Advice::Sequential).unwrap();
        fadvise(&file, 0, 1 << 20, Advice::WillNeed).unwrap();
    }
}
