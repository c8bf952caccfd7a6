//! Recycle pools: fully written files prepared ahead of time, so a recording never allocates.
//!
//! A pool is a directory of `ready-NNNNNN.tbr` files. `prepare` tops it up to a count by writing
//! each file with zeros and `fdatasync`ing it, outside any recording. A recorder with
//! `allocation=recycle` renames one ready file into place; `give_back` renames a finished recording
//! into the pool again. A recycled file keeps its old bytes: the new lap's header carries the next
//! epoch, and `verify` stops at the first frame of an older lap.

use std::path::{Path, PathBuf};

use crate::record::fileops::RecFile;
use crate::record::{io_err, RecordError};

const READY_PREFIX: &str = "ready-";
const READY_SUFFIX: &str = ".tbr";

/// A directory of ready files.
#[derive(Debug, Clone)]
pub struct RecyclePool {
    dir: PathBuf,
}

impl RecyclePool {
    /// Opens an existing pool directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<RecyclePool, RecordError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(RecordError::PoolEmpty {
                dir: dir.to_path_buf(),
                why:
                    "the directory does not exist (prepare it with `tailbound record prepare-pool`)"
                        .into(),
            });
        }
        Ok(RecyclePool {
            dir: dir.to_path_buf(),
        })
    }

    /// Creates the pool directory if needed and tops it up to `count` ready files of at least
    /// `file_bytes` each, written with zeros and flushed.
    pub fn prepare(
        dir: impl AsRef<Path>,
        count: usize,
        file_bytes: u64,
    ) -> Result<RecyclePool, RecordError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(io_err(dir, "creating the pool directory"))?;
        let pool = RecyclePool {
            dir: dir.to_path_buf(),
        };
        let mut ready = pool.ready_files()?;
        // Files already there but too small are grown to size.
        for path in &ready {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path, "opening"))?;
            let f = RecFile::new(file, path, None);
            let len = f.len()?;
            if len < file_bytes {
                f.write_zeroes(len, file_bytes - len)?;
                f.sync_data()?;
            }
        }
        while ready.len() < count {
            let path = pool.next_name()?;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(io_err(&path, "creating"))?;
            let f = RecFile::new(file, &path, None);
            f.write_zeroes(0, file_bytes)?;
            f.sync_data()?;
            ready.push(path);
        }
        // The new names survive a power cut, so the pool holds what `ready` said.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir, "flushing (fsync) the pool directory"))?;
        Ok(pool)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ready_files(&self) -> Result<Vec<PathBuf>, RecordError> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_err(&self.dir, "listing"))? {
            let entry = entry.map_err(io_err(&self.dir, "listing"))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(READY_PREFIX) && name.ends_with(READY_SUFFIX) {
                files.push(entry.path());
            }
        }
        files.sort();
        Ok(files)
    }

    fn next_name(&self) -> Result<PathBuf, RecordError> {
        let used: Vec<u64> = self
            .ready_files()?
            .iter()
            .filter_map(|p| {
                let name = p.file_name()?.to_string_lossy().into_owned();
                name[READY_PREFIX.len()..name.len() - READY_SUFFIX.len()]
                    .parse()
                    .ok()
            })
            .collect();
        let next = used.iter().max().map_or(0, |m| m + 1);
        Ok(self
            .dir
            .join(format!("{READY_PREFIX}{next:06}{READY_SUFFIX}")))
    }

    /// How many ready files the pool holds.
    pub fn ready(&self) -> usize {
        self.ready_files().map_or(0, |f| f.len())
    }

    /// Moves one ready file to `target` (same file system) and returns nothing else: the caller
    /// opens it.
    pub(crate) fn take(&self, target: &Path) -> Result<(), RecordError> {
        let Some(first) = self.ready_files()?.into_iter().next() else {
            return Err(RecordError::PoolEmpty {
                dir: self.dir.clone(),
                why: "no ready file left (prepare more with `tailbound record prepare-pool`)"
                    .into(),
            });
        };
        std::fs::rename(&first, target).map_err(io_err(target, "moving a pool file to"))
    }

    /// Returns a finished recording to the pool for its next lap.
    pub fn give_back(&self, recording: &Path) -> Result<(), RecordError> {
        let target = self.next_name()?;
        std::fs::rename(recording, &target).map_err(io_err(recording, "returning to the pool"))
    }
}
