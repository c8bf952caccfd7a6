//! The small file-system interface the workload generators run on, and its two implementations:
//! [`PosixFs`] (POSIX calls under a directory: kernel file systems, or tbfs through the LD_PRELOAD
//! shim when the process runs under it) and [`TbfsFs`] (the native tbfs API).

use std::fs::{File as StdFile, OpenOptions as StdOpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use tailbound::tbfs::{self, Fs, OpenFlags};

/// What the generators need of a file system. Paths are what [`WorkFs::path`] made of a tree path,
/// so they are built once at setup and not per operation.
pub trait WorkFs: Sync {
    type File: WorkFile;
    /// The name this file system gives the tree path `rel` (`/d00/f000017`).
    fn path(&self, rel: &str) -> String;
    fn mkdir(&self, path: &str) -> io::Result<()>;
    /// Creates a file that does not exist, open for reading and writing (`O_RDWR|O_CREAT|O_EXCL`).
    fn create(&self, path: &str) -> io::Result<Self::File>;
    /// Opens an existing file for reading and writing (`O_RDWR`), as filebench's `openfile` does.
    fn open(&self, path: &str) -> io::Result<Self::File>;
    /// Opens a file for appending, creating it if missing (`O_WRONLY|O_CREAT|O_APPEND`).
    fn open_append(&self, path: &str) -> io::Result<Self::File>;
    fn delete(&self, path: &str) -> io::Result<()>;
    /// The file's size, from `stat`.
    fn stat(&self, path: &str) -> io::Result<u64>;
}

/// An open file; dropping it closes it.
pub trait WorkFile: Send {
    /// Writes all of `buf` at the current position.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Writes all of `buf` at the end of the file.
    fn append_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at the current position; 0 at the end.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    fn fsync(&mut self) -> io::Result<()>;
    /// Cuts the file to zero bytes (`ftruncate`).
    fn truncate(&mut self) -> io::Result<()>;
}

/// POSIX calls on paths under a directory.
#[derive(Debug, Clone)]
pub struct PosixFs {
    root: PathBuf,
}

impl PosixFs {
    pub fn new(root: impl Into<PathBuf>) -> PosixFs {
        PosixFs { root: root.into() }
    }
}

fn named(path: &str, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{path}: {what}: {e}"))
}

impl WorkFs for PosixFs {
    type File = StdFile;

    fn path(&self, rel: &str) -> String {
        format!(
            "{}/{}",
            self.root.display().to_string().trim_end_matches('/'),
            rel.trim_start_matches('/')
        )
    }

    fn mkdir(&self, path: &str) -> io::Result<()> {
        std::fs::create_dir(path).map_err(|e| named(path, "mkdir", e))
    }

    fn create(&self, path: &str) -> io::Result<StdFile> {
        StdOpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| named(path, "create", e))
    }

    fn open(&self, path: &str) -> io::Result<StdFile> {
        StdOpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| named(path, "open", e))
    }

    fn open_append(&self, path: &str) -> io::Result<StdFile> {
        StdOpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| named(path, "open for append", e))
    }

    fn delete(&self, path: &str) -> io::Result<()> {
        std::fs::remove_file(path).map_err(|e| named(path, "unlink", e))
    }

    fn stat(&self, path: &str) -> io::Result<u64> {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| named(path, "stat", e))
    }
}

impl WorkFile for StdFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }

    fn append_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.seek(SeekFrom::End(0))?;
        Write::write_all(self, buf)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Read::read(self, buf)
    }

    fn fsync(&mut self) -> io::Result<()> {
        self.sync_all()
    }

    fn truncate(&mut self) -> io::Result<()> {
        self.set_len(0)
    }
}

/// The native tbfs API on an open pool.
#[derive(Debug, Clone)]
pub struct TbfsFs {
    fs: Fs,
}

impl TbfsFs {
    pub fn new(fs: Fs) -> TbfsFs {
        TbfsFs { fs }
    }
}

/// A tbfs error as an `io::Error` with the errno's kind and tbfs's message (which names the path).
pub fn tbfs_io(e: tbfs::Error) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(e.errno()).kind(),
        e.to_string(),
    )
}

impl WorkFs for TbfsFs {
    type File = tbfs::File;

    fn path(&self, rel: &str) -> String {
        format!("/{}", rel.trim_start_matches('/'))
    }

    fn mkdir(&self, path: &str) -> io::Result<()> {
        self.fs.mkdir(path, 0o755).map_err(tbfs_io)
    }

    fn create(&self, path: &str) -> io::Result<tbfs::File> {
        let flags = OpenFlags {
            exclusive: true,
            ..OpenFlags::create()
        };
        self.fs.open_file(path, flags).map_err(tbfs_io)
    }

    fn open(&self, path: &str) -> io::Result<tbfs::File> {
        let flags = OpenFlags {
            read: true,
            write: true,
            ..OpenFlags::default()
        };
        self.fs.open_file(path, flags).map_err(tbfs_io)
    }

    fn open_append(&self, path: &str) -> io::Result<tbfs::File> {
        let flags = OpenFlags {
            read: false,
            append: true,
            ..OpenFlags::create()
        };
        self.fs.open_file(path, flags).map_err(tbfs_io)
    }

    fn delete(&self, path: &str) -> io::Result<()> {
        self.fs.unlink(path).map_err(tbfs_io)
    }

    fn stat(&self, path: &str) -> io::Result<u64> {
        self.fs.stat(path).map(|s| s.size).map_err(tbfs_io)
    }
}

impl WorkFile for tbfs::File {
    fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write(buf).map_err(tbfs_io)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("inode {}: a write took no bytes", self.ino()),
                ));
            }
            buf = &buf[n..];
        }
        Ok(())
    }

    fn append_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.seek(SeekFrom::End(0)).map_err(tbfs_io)?;
        WorkFile::write_all(self, buf)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        tbfs::File::read(self, buf).map_err(tbfs_io)
    }

    fn fsync(&mut self) -> io::Result<()> {
        tbfs::File::fsync(self).map_err(tbfs_io)
    }

    fn truncate(&mut self) -> io::Result<()> {
        self.set_len(0).map_err(tbfs_io)
    }
}
