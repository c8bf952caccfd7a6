//! Shared writable file mappings: stores into the page cache without a system call.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A `MAP_SHARED`, writable mapping of `[0, len)` of a file. Bytes are copied in and out through
/// methods only (never exposed as Rust references), so concurrent use of disjoint ranges from
/// several threads is sound.
#[derive(Debug)]
pub struct SharedMapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through `write_at`,
// `populate_write` and `discard`, which take byte ranges and never hand out references.
unsafe impl Send for SharedMapping {}
// SAFETY: as above; callers coordinate which ranges they write, and the kernel handles the rest.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes of `file` (which must be at least that long) shared and writable.
    pub fn new(file: &File, len: usize) -> io::Result<SharedMapping> {
        SharedMapping::map(len, libc::MAP_SHARED, file.as_raw_fd())
    }

    /// A private anonymous mapping of `len` zeroed bytes (memory that lives as long as the process).
    pub fn anonymous(len: usize) -> io::Result<SharedMapping> {
        SharedMapping::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
    }

    /// Maps `len` bytes of `file` with `MAP_SHARED_VALIDATE | MAP_SYNC` (a DAX file system: stores
    /// reach persistent memory without page-cache writeback). Fails where DAX is not available.
    pub fn new_sync(file: &File, len: usize) -> io::Result<SharedMapping> {
        const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
        const MAP_SYNC: libc::c_int = 0x80000;
        SharedMapping::map(len, MAP_SHARED_VALIDATE | MAP_SYNC, file.as_raw_fd())
    }

    /// A fresh readable, writable mapping of `len` bytes with `flags` (of `fd`, or -1).
    fn map(len: usize, flags: libc::c_int, fd: libc::c_int) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (null hint) of a descriptor the caller owns
        // (or anonymous memory); the kernel validates the flags and the result is checked against
        // MAP_FAILED.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping {
            addr: addr.cast(),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies `[offset, offset + out.len())` of the mapping into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> io::Result<()> {
        self.check(offset, out.len())?;
        // SAFETY: the range was checked to lie inside the mapping; `out` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// `msync(MS_SYNC)` of the pages covering `[offset, offset + len)`: they reach the file.
    pub fn sync(&self, offset: usize, len: usize) -> io::Result<()> {
        let Some((addr, len)) = self.page_range(offset, len) else {
            return Ok(());
        };
        // SAFETY: a page-aligned range inside our mapping; msync does not change contents.
        super::cvt(unsafe { libc::msync(addr, len, libc::MS_SYNC) })?;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> io::Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "range {offset}+{len} is outside the {}-byte mapping",
                    self.len
                ),
            )),
        }
    }

    /// Copies `bytes` to `offset` in the mapping.
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.check(offset, bytes.len())?;
        // SAFETY: the range was checked to lie inside the mapping, which lives as long as `self`;
        // the source is a distinct Rust slice, so the regions cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr.add(offset), bytes.len());
        }
        Ok(())
    }

    fn page_range(&self, offset: usize, len: usize) -> Option<(*mut libc::c_void, usize)> {
        let page = 4096;
        let start = offset / page * page;
        let end = offset.saturating_add(len).min(self.len);
        (end > start).then(|| {
            // SAFETY: `start` is inside the mapping (start <= offset < end <= len).
            (unsafe { self.addr.add(start) }.cast(), end - start)
        })
    }

    /// Faults `[offset, offset + len)` in writable now (`MADV_POPULATE_WRITE`), so later stores
    /// there take no page fault and update no timestamps.
    pub fn populate_write(&self, offset: usize, len: usize) -> io::Result<()> {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let Some((addr, len)) = self.page_range(offset, len) else {
            return Ok(());
        };
        // SAFETY: a page-aligned range inside our mapping; the advice does not change contents.
        super::cvt(unsafe { libc::madvise(addr, len, MADV_POPULATE_WRITE) })?;
        Ok(())
    }

    /// Locks the pages covering `[offset, offset + len)` in memory (`mlock`): reclaim cannot take
    /// them away, so a store there never faults them back in.
    pub fn lock(&self, offset: usize, len: usize) -> io::Result<()> {
        let Some((addr, len)) = self.page_range(offset, len) else {
            return Ok(());
        };
        // SAFETY: a page-aligned range inside our mapping; mlock changes residency only.
        super::cvt(unsafe { libc::mlock(addr, len) })?;
        Ok(())
    }

    /// Undoes [`SharedMapping::lock`] for the pages covering `[offset, offset + len)`.
    pub fn unlock(&self, offset: usize, len: usize) -> io::Result<()> {
        let Some((addr, len)) = self.page_range(offset, len) else {
            return Ok(());
        };
        // SAFETY: a page-aligned range inside our mapping; munlock changes residency only.
        super::cvt(unsafe { libc::munlock(addr, len) })?;
        Ok(())
    }

    /// Drops the page-table entries of `[offset, offset + len)` (`MADV_DONTNEED`; the data stays in
    /// the file and its page cache), so the pages can then leave the cache.
    pub fn discard(&self, offset: usize, len: usize) -> io::Result<()> {
        let page = 4096;
        // Whole pages inside the range only: never the page a writer may still be filling.
        let start = offset.div_ceil(page) * page;
        let end = (offset.saturating_add(len) / page * page).min(self.len);
        if end <= start {
            return Ok(());
        }
        // SAFETY: a page-aligned range inside our mapping; for a shared file mapping MADV_DONTNEED
        // only unmaps the pages, the file keeps their contents.
        super::cvt(unsafe {
            libc::madvise(
                self.addr.add(start).cast(),
                end - start,
                libc::MADV_DONTNEED,
            )
        })?;
        Ok(())
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are exactly what mmap returned, unmapped once here.
        unsafe {
            libc::munmap(self.addr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn stores_reach_the_file_and_ranges_are_checked() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(3 * 4096).unwrap();
        let map = SharedMapping::new(&file, 3 * 4096).unwrap();
        map.populate_write(0, 2 * 4096).unwrap();
        map.write_at(4000, b"across a page boundary").unwrap();
        let mut back = vec![0u8; 22];
        file.read_exact_at(&mut back, 4000).unwrap();
        assert_eq!(&back, b"across a page boundary");
        assert!(map.write_at(3 * 4096 - 2, b"abc").is_err());
        assert!(map.write_at(usize::MAX, b"a").is_err());
        map.discard(0, 4096).unwrap();
        file.read_exact_at(&mut back, 4000).unwrap();
        assert_eq!(&back, b"across a page boundary", "discard keeps the data");
        assert!(SharedMapping::new(&file, 0).is_err());
    }
}
