//! The file operations a recorder performs, in one place, so tests can see every one of them.
//!
//! [`RecFile`] wraps the recording's `File`. When a [`Probe`] is attached (tests only), each
//! operation is appended to its log, and a failpoint can make chosen operations fail; otherwise the
//! cost is one branch.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::record::RecordError;
use crate::sys::file::{fadvise, fallocate, sync_file_range, Advice, Allocate, SyncRange};

/// One operation on the recording's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    Write,
    Fallocate,
    Ftruncate,
    Fdatasync,
    Fsync,
    /// `sync_file_range` of `[offset, offset + len)`.
    SyncFileRange {
        how: SyncRange,
        offset: u64,
        len: u64,
    },
    /// `posix_fadvise` of `[offset, offset + len)`.
    Fadvise {
        advice: Advice,
        offset: u64,
        len: u64,
    },
    /// `fsync` of the recording's directory (at create).
    SyncDir,
    /// Marks where recording (the first `write` call of the producer) began.
    RecordingStarted,
    /// Marks where `finish` began.
    FinishStarted,
}

/// Where a test collects the operations.
pub type OpLog = Arc<Mutex<Vec<FileOp>>>;

/// Which operations fail while armed: a test can arm it after `create`.
pub type Failpoint = Arc<Mutex<Option<fn(&FileOp) -> bool>>>;

/// What a test attaches to a recording's file.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub log: OpLog,
    pub fail: Failpoint,
}

#[cfg(test)]
impl Probe {
    pub fn ops(&self) -> Vec<FileOp> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// From now on, operations for which `which` is true fail (after being logged).
    pub fn arm(&self, which: fn(&FileOp) -> bool) {
        if let Ok(mut f) = self.fail.lock() {
            *f = Some(which);
        }
    }
}

/// The recording's file, with its path for error messages.
#[derive(Debug)]
pub struct RecFile {
    file: File,
    path: PathBuf,
    probe: Option<Probe>,
}

impl RecFile {
    pub fn new(file: File, path: &Path, probe: Option<Probe>) -> RecFile {
        RecFile {
            file,
            path: path.to_path_buf(),
            probe,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs `op`; fails it if the probe's failpoint is armed for it.
    pub fn note(&self, op: FileOp) -> io::Result<()> {
        let Some(probe) = &self.probe else {
            return Ok(());
        };
        if let Ok(mut log) = probe.log.lock() {
            log.push(op);
        }
        let armed = probe.fail.lock().ok().and_then(|f| *f);
        match armed {
            Some(which) if which(&op) => Err(io::Error::other("failpoint")),
            _ => Ok(()),
        }
    }

    fn err(&self, op: &'static str) -> impl FnOnce(io::Error) -> RecordError + '_ {
        move |source| RecordError::Io {
            path: self.path.clone(),
            op,
            source,
        }
    }

    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), RecordError> {
        self.note(FileOp::Write)
            .and_then(|()| self.file.write_all_at(buf, offset))
            .map_err(self.err("writing"))
    }

    pub fn fallocate(&self, offset: u64, len: u64) -> Result<(), RecordError> {
        self.note(FileOp::Fallocate)
            .and_then(|()| fallocate(&self.file, offset, len, Allocate::Grow))
            .map_err(self.err("allocating"))
    }

    pub fn set_len(&self, len: u64) -> Result<(), RecordError> {
        self.note(FileOp::Ftruncate)
            .and_then(|()| self.file.set_len(len))
            .map_err(self.err("truncating"))
    }

    pub fn sync_data(&self) -> Result<(), RecordError> {
        self.note(FileOp::Fdatasync)
            .and_then(|()| self.file.sync_data())
            .map_err(self.err("flushing (fdatasync)"))
    }

    pub fn sync_all(&self) -> Result<(), RecordError> {
        self.note(FileOp::Fsync)
            .and_then(|()| self.file.sync_all())
            .map_err(self.err("flushing (fsync)"))
    }

    pub fn sync_range(&self, offset: u64, len: u64, how: SyncRange) -> Result<(), RecordError> {
        self.note(FileOp::SyncFileRange { how, offset, len })
            .and_then(|()| sync_file_range(&self.file, offset, len, how))
            .map_err(self.err("flushing (sync_file_range)"))
    }

    pub fn drop_cache(&self, offset: u64, len: u64) -> Result<(), RecordError> {
        self.note(FileOp::Fadvise {
            advice: Advice::DontNeed,
            offset,
            len,
        })
        .and_then(|()| fadvise(&self.file, offset, len, Advice::DontNeed))
        .map_err(self.err("dropping cached pages of"))
    }

    /// Starts reading `[offset, offset + len)` into the page cache, so writes that cover part of a
    /// page there never wait for a read.
    pub fn prefetch(&self, offset: u64, len: u64) -> Result<(), RecordError> {
        self.note(FileOp::Fadvise {
            advice: Advice::WillNeed,
            offset,
            len,
        })
        .and_then(|()| fadvise(&self.file, offset, len, Advice::WillNeed))
        .map_err(self.err("prefetching"))
    }

    /// Reads `[offset, offset + len)` into the page cache and waits for it (at create time).
    pub fn warm(&self, offset: u64, len: u64) -> Result<(), RecordError> {
        let mut buf = vec![0u8; (1 << 20).min(len.max(1)) as usize];
        let mut done = 0;
        while done < len {
            let n = (buf.len() as u64).min(len - done) as usize;
            match self.file.read_at(&mut buf[..n], offset + done) {
                Ok(0) => break,
                Ok(got) => done += got as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err("reading ahead in")(e)),
            }
        }
        Ok(())
    }

    /// A shared writable mapping of the file's first `len` bytes.
    pub fn map_shared(&self, len: usize) -> io::Result<crate::sys::mmap::SharedMapping> {
        crate::sys::mmap::SharedMapping::new(&self.file, len)
    }

    pub fn len(&self) -> Result<u64, RecordError> {
        Ok(self
            .file
            .metadata()
            .map_err(self.err("reading the size of"))?
            .len())
    }

    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Writes `len` zero bytes from `offset` in 1 MiB writes (zero-fill and pool preparation).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), RecordError> {
        let chunk = vec![0u8; (1 << 20).min(len.max(1)) as usize];
        let mut done = 0;
        while done < len {
            let n = (chunk.len() as u64).min(len - done) as usize;
            self.write_all_at(&chunk[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }
}
