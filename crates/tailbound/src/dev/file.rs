//! The file or block-device backend: `O_DIRECT` requests from 4 KiB-aligned buffers, writes and
//! flushes through io_uring (a linked write + `fdatasync` for write-and-flush), reads with `pread`
//! so threads read concurrently. Falls back to `pwrite`/`fdatasync` where io_uring is unavailable,
//! and to buffered I/O where the file system refuses `O_DIRECT` (tmpfs); both are reported.
//!
//! Owns the open file and its bounce buffers; knows nothing of what the bytes mean.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{check_request, Device, BLOCK_SIZE};
use crate::sys::file::{AlignedBuf, O_DIRECT};
use crate::sys::uring::Ring;

/// Bytes zero-filled per request when a pool file is made.
const ZERO_CHUNK_BYTES: usize = 1 << 20;
/// Bounce buffers kept for reuse (larger requests allocate their own).
const BOUNCE_KEEP_BYTES_MAX: usize = 4 << 20;

/// How a [`FileDevice`] does its I/O; the defaults try the fastest and fall back.
#[derive(Debug, Clone, Copy)]
pub struct FileOptions {
    /// Try `O_DIRECT` (falls back to buffered I/O where the file system refuses it).
    pub direct: bool,
    /// Try io_uring for writes and flushes (falls back to `pwrite` and `fdatasync`).
    pub io_uring: bool,
}

impl Default for FileOptions {
    fn default() -> FileOptions {
        FileOptions {
            direct: true,
            io_uring: true,
        }
    }
}

/// A pool in a regular file or on a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    ring: Option<Mutex<Ring>>,
    bounce: Mutex<Vec<AlignedBuf>>,
}

fn ctx(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

/// Opens the pool file (with `O_DIRECT` where allowed) and takes the pool lock before anything
/// looks at or changes it. Returns the file and whether it is direct.
fn open_file(path: &Path, create: bool, direct: bool) -> io::Result<(File, bool)> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(create);
    let mut opened = None;
    if direct {
        match o.clone().custom_flags(O_DIRECT).open(path) {
            Ok(f) => opened = Some((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(ctx(path, "open", e)),
        }
    }
    let (file, direct) = match opened {
        Some(x) => x,
        None => (o.open(path).map_err(|e| ctx(path, "open", e))?, false),
    };
    super::lock_pool(&file, path)?;
    Ok((file, direct))
}

impl FileDevice {
    /// Makes (or grows) a regular file of exactly `len` bytes (rounded down to whole blocks) and
    /// opens it. New bytes are written as zeros once: `O_DIRECT` writes into never-written extents
    /// would otherwise each cost a metadata update in the host file system.
    pub fn create(path: impl AsRef<Path>, len: u64) -> io::Result<FileDevice> {
        FileDevice::create_with(path, len, FileOptions::default())
    }

    pub fn create_with(
        path: impl AsRef<Path>,
        len: u64,
        options: FileOptions,
    ) -> io::Result<FileDevice> {
        let path = path.as_ref();
        let len = len / BLOCK_SIZE * BLOCK_SIZE;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a pool needs at least one block", path.display()),
            ));
        }
        let (file, direct) = open_file(path, true, options.direct)?;
        let old = file.metadata().map_err(|e| ctx(path, "stat", e))?.len();
        if old > len {
            file.set_len(len).map_err(|e| ctx(path, "truncate", e))?;
        }
        if old < len {
            let start = old / BLOCK_SIZE * BLOCK_SIZE;
            file.set_len(len).map_err(|e| ctx(path, "extend", e))?;
            let zeros = AlignedBuf::zeroed(ZERO_CHUNK_BYTES, BLOCK_SIZE as usize);
            let mut at = start;
            while at < len {
                let n = (len - at).min(ZERO_CHUNK_BYTES as u64) as usize;
                file.write_all_at(&zeros.as_slice()[..n], at)
                    .map_err(|e| ctx(path, "zero-filling", e))?;
                at += n as u64;
            }
            file.sync_all().map_err(|e| ctx(path, "fsync", e))?;
        }
        FileDevice::finish(file, path, len, direct, options)
    }

    /// Opens an existing regular file or block device; its length is the file's size (or the
    /// device's) rounded down to whole blocks.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        FileDevice::open_with(path, FileOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, options: FileOptions) -> io::Result<FileDevice> {
        let path = path.as_ref();
        let (file, direct) = open_file(path, false, options.direct)?;
        let meta = file.metadata().map_err(|e| ctx(path, "stat", e))?;
        let len = if meta.file_type().is_block_device() {
            crate::sys::blockdev_bytes(&file).map_err(|e| ctx(path, "BLKGETSIZE64", e))?
        } else {
            meta.len()
        };
        let len = len / BLOCK_SIZE * BLOCK_SIZE;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: empty, not a pool", path.display()),
            ));
        }
        FileDevice::finish(file, path, len, direct, options)
    }

    fn finish(
        file: File,
        path: &Path,
        len: u64,
        direct: bool,
        options: FileOptions,
    ) -> io::Result<FileDevice> {
        let ring = if options.io_uring {
            Ring::new().ok().map(Mutex::new)
        } else {
            None
        };
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            len,
            direct,
            ring,
            bounce: Mutex::new(Vec::new()),
        })
    }

    /// Whether requests bypass the page cache (`O_DIRECT`).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Whether writes and flushes go through io_uring.
    pub fn uses_io_uring(&self) -> bool {
        self.ring.is_some()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn take_bounce(&self, len: usize) -> AlignedBuf {
        let mut pool = self.bounce.lock().unwrap_or_else(|p| p.into_inner());
        match pool.iter().position(|b| b.as_slice().len() >= len) {
            Some(i) => pool.swap_remove(i),
            None => AlignedBuf::zeroed(
                len.next_power_of_two().max(BLOCK_SIZE as usize),
                BLOCK_SIZE as usize,
            ),
        }
    }

    fn give_bounce(&self, buf: AlignedBuf) {
        if buf.as_slice().len() <= BOUNCE_KEEP_BYTES_MAX {
            let mut pool = self.bounce.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < 4 {
                pool.push(buf);
            }
        }
    }

    /// Runs `f` on `buf` itself when it is aligned for `O_DIRECT`, else on an aligned copy.
    fn with_aligned<T>(&self, buf: &[u8], f: impl FnOnce(&[u8]) -> io::Result<T>) -> io::Result<T> {
        if !self.direct || (buf.as_ptr() as usize).is_multiple_of(BLOCK_SIZE as usize) {
            return f(buf);
        }
        let mut b = self.take_bounce(buf.len());
        b.as_mut_slice()[..buf.len()].copy_from_slice(buf);
        let r = f(&b.as_slice()[..buf.len()]);
        self.give_bounce(b);
        r
    }

    fn write_all(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let Some(ring) = &self.ring else {
            return self.file.write_all_at(buf, offset);
        };
        let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = 0;
        while done < buf.len() {
            match ring.write_at(&self.file, &buf[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "device accepted no bytes",
                    ))
                }
                Ok(n) => done += n,
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Device for FileDevice {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        let r = if !self.direct || (buf.as_ptr() as usize).is_multiple_of(BLOCK_SIZE as usize) {
            self.file.read_exact_at(buf, offset)
        } else {
            let mut b = self.take_bounce(buf.len());
            let r = self
                .file
                .read_exact_at(&mut b.as_mut_slice()[..buf.len()], offset);
            if r.is_ok() {
                buf.copy_from_slice(&b.as_slice()[..buf.len()]);
            }
            self.give_bounce(b);
            r
        };
        r.map_err(|e| ctx(&self.path, &format!("read {}+{}", offset, buf.len()), e))
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        self.with_aligned(buf, |b| self.write_all(b, offset))
            .map_err(|e| ctx(&self.path, &format!("write {}+{}", offset, buf.len()), e))
    }

    fn flush(&self) -> io::Result<()> {
        let r = match &self.ring {
            Some(ring) => ring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .fdatasync(&self.file),
            None => self.file.sync_data(),
        };
        r.map_err(|e| ctx(&self.path, "fdatasync", e))
    }

    fn write_and_flush(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        let Some(ring) = &self.ring else {
            self.write_at(offset, buf)?;
            return self.flush();
        };
        let linked = self.with_aligned(buf, |b| {
            let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
            ring.write_then_fdatasync(&self.file, b, offset)
        });
        match linked {
            Ok((n, true)) if n == buf.len() => Ok(()),
            // A short write or a cancelled sync: finish the rest one step at a time.
            Ok((n, _)) => {
                let n = n / BLOCK_SIZE as usize * BLOCK_SIZE as usize;
                self.write_at(offset + n as u64, &buf[n..])?;
                self.flush()
            }
            Err(e) => Err(ctx(
                &self.path,
                &format!("write and sync {}+{}", offset, buf.len()),
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_round_trip(options: FileOptions) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let dev = FileDevice::create_with(&path, 1 << 20, options).unwrap();
        assert_eq!(dev.len(), 1 << 20);
        let data: Vec<u8> = (0..3 * 4096 + 1).map(|i| (i % 251) as u8).collect();
        // An unaligned buffer goes through the bounce buffer.
        dev.write_at(4096, &data[1..]).unwrap();
        dev.write_and_flush(0, &data[1..4097]).unwrap();
        dev.flush().unwrap();
        let mut back = vec![0u8; 3 * 4096];
        dev.read_at(4096, &mut back).unwrap();
        assert_eq!(back, data[1..]);
        drop(dev);
        let dev = FileDevice::open_with(&path, options).unwrap();
        let mut first = vec![0u8; 4096];
        dev.read_at(0, &mut first).unwrap();
        assert_eq!(first, data[1..4097]);
        assert!(dev.write_at(1, &[0u8; 4096]).is_err());
        assert!(dev.read_at(1 << 20, &mut first).is_err());
    }

    #[test]
    fn every_io_path_round_trips_and_persists() {
        check_round_trip(FileOptions::default());
        check_round_trip(FileOptions {
            direct: false,
            io_uring: true,
        });
        check_round_trip(FileOptions {
            direct: true,
            io_uring: false,
        });
        check_round_trip(FileOptions {
            direct: false,
            io_uring: false,
        });
    }

    #[test]
    fn a_new_pool_file_is_written_zeros_and_direct_io_is_used_on_a_disk_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let dev = FileDevice::create(&path, 3 << 20).unwrap();
        let mut back = vec![1u8; 4096];
        dev.read_at(2 << 20, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        // Zero-filled means allocated: no holes left for O_DIRECT writes to convert.
        use std::os::unix::fs::MetadataExt;
        assert!(std::fs::metadata(&path).unwrap().blocks() * 512 >= 3 << 20);
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        let fs = crate::sys::fs::statfs(dir.path()).unwrap();
        if fs.magic != TMPFS_MAGIC {
            assert!(dev.direct(), "O_DIRECT on file system {:#x}", fs.magic);
        }
    }

    #[test]
    fn a_pool_file_has_one_opener_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let first = FileDevice::create(&path, 1 << 20).unwrap();
        let err = FileDevice::open(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
        assert!(
            FileDevice::create(&path, 2 << 20).is_err(),
            "a second create must not resize it"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        drop(first);
        FileDevice::open(&path).unwrap();
    }

    #[test]
    fn opening_a_missing_or_empty_file_says_which() {
        let dir = tempfile::tempdir().unwrap();
        let err = FileDevice::open(dir.path().join("nope")).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let err = FileDevice::open(dir.path().join("empty")).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
