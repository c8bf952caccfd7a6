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

    /// Copies `bytes` to `offset` in the mapping. Copies of [`STREAM_MIN`] bytes or more bypass
    /// the CPU caches (non-temporal stores, then a store fence, or one fence at the end of the
    /// [`stream_batch`] the call is in): a pool's log head moves through memory no cache holds,
    /// so ordinary stores would first read every line they fill, and would push out what the
    /// caller works on.
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.check(offset, bytes.len())?;
        // SAFETY: the range was checked to lie inside the mapping, which lives as long as `self`;
        // the source is a distinct Rust slice, so the regions cannot overlap.
        unsafe {
            copy_to_mapping(bytes.as_ptr(), self.addr.add(offset), bytes.len());
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

/// The shortest copy into a mapping made with non-temporal stores; shorter ones (superblock
/// fields, a summary's few bytes) go through the cache as plain stores.
pub const STREAM_MIN: usize = 1024;

thread_local! {
    /// Whether this thread is inside [`stream_batch`], which fences once at its end.
    static IN_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, whose copies into mappings are fenced once when it ends (also if it unwinds)
/// rather than each at its own end: for several copies of which no store of `f` depends on the
/// order, such as a payload's blocks written to their places. Every store `f` made is then
/// visible before any store this thread makes after it, as after a plain [`SharedMapping::write_at`].
pub fn stream_batch<R>(f: impl FnOnce() -> R) -> R {
    struct End(bool);
    impl Drop for End {
        fn drop(&mut self) {
            IN_BATCH.set(self.0);
            if !self.0 {
                store_fence();
            }
        }
    }
    // A batch inside a batch leaves the fence to the outer one.
    let _end = End(IN_BATCH.replace(true));
    f()
}

/// Orders every earlier store of this thread, streaming ones included, before any later one.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Copies `len` bytes from `src` to `dst`, with non-temporal stores for [`STREAM_MIN`] bytes or
/// more on x86_64. Every store is globally visible, in order before any later store of this
/// thread, when it returns (the fence), or when the [`stream_batch`] it is in ends, so a summary
/// written after its payload still lands after it for every other thread or process mapping
/// the pool.
///
/// # Safety
/// `src` must be valid for `len` bytes of reads, `dst` for `len` bytes of writes, and the two
/// ranges must not overlap.
unsafe fn copy_to_mapping(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_MIN {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // A plain copy up to the first 16-byte boundary of the destination (at most 15 bytes).
        let head = dst.align_offset(16).min(len);
        // SAFETY (this block and the loop): every offset below stays under `len`, which the
        // caller promised valid on both sides; `dst + head` is 16-byte aligned, as the streaming
        // store requires, and the loads are unaligned ones; SSE2 is part of x86_64.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut done = head;
            while done + 64 <= len {
                let s = src.add(done).cast::<__m128i>();
                let d = dst.add(done).cast::<__m128i>();
                let a = _mm_loadu_si128(s);
                let b = _mm_loadu_si128(s.add(1));
                let c = _mm_loadu_si128(s.add(2));
                let e = _mm_loadu_si128(s.add(3));
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
                done += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
            if !IN_BATCH.get() {
                _mm_sfence();
            }
        }
        return;
    }
    // SAFETY: the caller's promise, as above.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
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

    #[test]
    fn a_batch_fences_once_at_its_end_and_its_copies_land() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4 * 4096).unwrap();
        let map = SharedMapping::new(&file, 4 * 4096).unwrap();
        let blocks: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 4096]).collect();
        let got = stream_batch(|| {
            assert!(IN_BATCH.get());
            stream_batch(|| assert!(IN_BATCH.get(), "an inner batch"));
            assert!(IN_BATCH.get(), "the inner batch leaves the outer one open");
            for (i, b) in blocks.iter().enumerate() {
                map.write_at(i * 4096, b).unwrap();
            }
            7
        });
        assert_eq!(got, 7);
        assert!(!IN_BATCH.get(), "closed after");
        let mut back = vec![0u8; 3 * 4096];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, blocks.concat());
        let unwound = std::panic::catch_unwind(|| stream_batch(|| panic!("inside a batch")));
        assert!(unwound.is_err());
        assert!(!IN_BATCH.get(), "closed after unwinding");
    }

    #[test]
    fn long_copies_land_whole_at_every_alignment_and_length() {
        let len = 5 * 4096;
        let file = tempfile::tempfile().unwrap();
        file.set_len(len as u64).unwrap();
        let map = SharedMapping::new(&file, len).unwrap();
        let src: Vec<u8> = (0..2 * 4096 + 200)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let lengths = [
            STREAM_MIN - 1,
            STREAM_MIN,
            STREAM_MIN + 63,
            4096,
            4096 + 17,
            2 * 4096 + 129,
        ];
        for (round, &n) in lengths.iter().enumerate() {
            for (src_at, dst_at) in [(0, 0), (1, 4096 + 3), (13, 15), (64, 2 * 4096 - 9)] {
                // Clear the area first, so what is read back can only be this copy's bytes.
                map.write_at(0, &vec![0xEE; len]).unwrap();
                let bytes = &src[src_at..src_at + n];
                map.write_at(dst_at, bytes).unwrap();
                let mut back = vec![0u8; len];
                file.read_exact_at(&mut back, 0).unwrap();
                assert_eq!(
                    &back[dst_at..dst_at + n],
                    bytes,
                    "round {round}, at {dst_at}"
                );
                assert!(back[..dst_at].iter().all(|&b| b == 0xEE), "nothing before");
                assert!(
                    back[dst_at + n..].iter().all(|&b| b == 0xEE),
                    "nothing after"
                );
            }
        }
    }
}
