//! Shared memory for `MAP_SHARED` mappings across processes: one memfd per inode, made by the
//! server when a client first maps the file (filled with its bytes) and opened by every client
//! that maps it (`/proc/SERVER/fd/N`), so their mappings are the same pages. While it exists
//! it *is* the file's data: every session's reads, writes, truncations and sizes of that inode
//! go through it (`session_shmem`), and its bytes are written into the pool when a client syncs
//! (`msync`, `fsync`, exit), when one lets go of it (`munmap`), and when the last goes.

use std::collections::HashMap;
use std::fs::File as KernelFile;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::tbfs::{Error, File, Fs, OpenFlags, Result};

/// The memory of one inode's shared mappings.
pub(super) struct SharedFile {
    pub memfd: KernelFile,
    /// The pool's file, written back from the memfd.
    file: File,
    /// Sessions that asked for it, with how many times each.
    users: Mutex<HashMap<u64, u32>>,
    /// Taken by appends, so two never write at one end.
    pub appending: Mutex<()>,
}

impl SharedFile {
    pub fn size(&self) -> Result<u64> {
        self.memfd
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io("shared memory: size", e))
    }

    pub fn read(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let size = self.size()?;
        if offset >= size {
            return Ok(0);
        }
        let want = buf.len().min((size - offset) as usize);
        self.memfd
            .read_at(&mut buf[..want], offset)
            .map_err(|e| Error::io("shared memory: read", e))
    }

    pub fn write(&self, data: &[u8], offset: u64) -> Result<usize> {
        self.memfd
            .write_all_at(data, offset)
            .map(|()| data.len())
            .map_err(|e| Error::io("shared memory: write", e))
    }

    pub fn set_len(&self, len: u64) -> Result<()> {
        self.memfd
            .set_len(len)
            .map_err(|e| Error::io("shared memory: truncate", e))
    }

    /// Copies the memory into the pool's file.
    pub fn write_back(&self) -> Result<()> {
        let size = self.size()?;
        copy_range(
            size,
            |b, off| self.read(b, off),
            |b, off| self.file.pwrite(b, off),
        )?;
        if self.file.stat()?.size != size {
            self.file.set_len(size)?;
        }
        Ok(())
    }
}

/// Every inode's shared memory.
#[derive(Default)]
pub(super) struct SharedFiles {
    /// How many exist: the fast path for a pool nobody maps.
    count: AtomicUsize,
    table: Mutex<HashMap<u64, Arc<SharedFile>>>,
}

/// A memfd the server owns (close-on-exec; not sealed: the file's size changes).
fn memfd() -> Result<KernelFile> {
    crate::sys::memfd(c"tailbound-shared-file").map_err(|e| Error::io("memfd_create", e))
}

impl SharedFiles {
    fn table(&self) -> MutexGuard<'_, HashMap<u64, Arc<SharedFile>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any inode has shared memory.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) != 0
    }

    /// The shared memory of `ino`, if a client has it.
    pub fn get(&self, ino: u64) -> Option<Arc<SharedFile>> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.table().get(&ino).cloned()
    }

    /// `session` maps `ino`: its memory, made from the pool's file by the first, as the server's
    /// descriptor number the client opens through `/proc`.
    pub fn attach(&self, fs: &Fs, session: u64, ino: u64) -> Result<i32> {
        let mut t = self.table();
        let sf = match t.get(&ino) {
            Some(sf) => sf.clone(),
            None => {
                let file = fs.open_ino(
                    ino,
                    OpenFlags {
                        read: true,
                        write: true,
                        ..OpenFlags::default()
                    },
                )?;
                let sf = Arc::new(SharedFile {
                    memfd: memfd()?,
                    file,
                    users: Mutex::new(HashMap::new()),
                    appending: Mutex::new(()),
                });
                let size = sf.file.stat()?.size;
                copy_range(
                    size,
                    |b, off| sf.file.pread(b, off),
                    |b, off| sf.write(b, off),
                )?;
                sf.set_len(size)?;
                t.insert(ino, sf.clone());
                self.count.fetch_add(1, Ordering::AcqRel);
                sf
            }
        };
        *sf.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(session)
            .or_default() += 1;
        Ok(sf.memfd.as_raw_fd())
    }

    /// `session` lets go of `ino`'s memory once: written back, and dropped after its last user.
    pub fn detach(&self, session: u64, ino: u64) -> Result<()> {
        let Some(sf) = self.get(ino) else {
            return Ok(());
        };
        let r = sf.write_back();
        let last = {
            let mut users = sf.users.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = users.get_mut(&session) {
                *n -= 1;
                if *n == 0 {
                    users.remove(&session);
                }
            }
            users.is_empty()
        };
        if last {
            self.drop_if_unused(ino, &sf);
        }
        r
    }

    fn drop_if_unused(&self, ino: u64, sf: &Arc<SharedFile>) {
        let mut t = self.table();
        let unused = sf
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if unused && t.get(&ino).is_some_and(|x| Arc::ptr_eq(x, sf)) {
            t.remove(&ino);
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A session ended: it uses no shared memory any more; what it shared is written back.
    pub fn session_ended(&self, session: u64) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let all: Vec<(u64, Arc<SharedFile>)> =
            self.table().iter().map(|(i, s)| (*i, s.clone())).collect();
        for (ino, sf) in all {
            let was = sf
                .users
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&session)
                .is_some();
            if was {
                let _ = sf.write_back();
                self.drop_if_unused(ino, &sf);
            }
        }
    }
}

/// Copies the first `size` bytes from `read` to `write`, a MiB at a time (less if `read` ends
/// early).
fn copy_range(
    size: u64,
    read: impl Fn(&mut [u8], u64) -> Result<usize>,
    write: impl Fn(&[u8], u64) -> Result<usize>,
) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = read(&mut buf, off)?.min((size - off) as usize);
        if n == 0 {
            break;
        }
        write(&buf[..n], off)?;
        off += n as u64;
    }
    Ok(())
}
