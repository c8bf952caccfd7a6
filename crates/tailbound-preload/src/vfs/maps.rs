//! Writable shared mappings of library files: one memfd per inode holds the file's bytes while
//! it is mapped, so every mapping and every read or write of the file see the same bytes; it is
//! written back into the pool on `msync`, `munmap`, `fsync` and at exit.
//!
//! On a served mount the memfd is the server's, one per inode for every process (opened here as
//! `/proc/SERVER/fd/N`), so two processes' mappings are the same pages, and the server answers
//! other processes' calls on the inode from it; the server writes it back when asked. Where
//! that cannot be opened (a server of another user) the memfd is this process's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::real;
use crate::vfs::ofd::{lock, Ofd, VfsResult};

/// A writable shared mapping's backing: one memfd per inode, holding the file's bytes while it is
/// mapped, so every mapping and every read/write of the file see the same bytes.
pub struct Backing {
    pub memfd: i32,
    ofd: Arc<Ofd>,
    maps: AtomicUsize,
    /// The server's memfd, shared with every process that maps the inode.
    served: bool,
}

/// The server's memory for `o`'s inode, opened here, if the mount is served and it can be.
fn served_memory(o: &Ofd) -> Option<i32> {
    let f = o.file.remote()?;
    let pid = o.fs.remote()?.client().server_pid();
    let n = f.shared_memory(ATTACH).ok()?;
    match real::kernel_open_rw(&format!("/proc/{pid}/fd/{n}")) {
        Ok(fd) => Some(fd),
        Err(_) => {
            let _ = f.shared_memory(LET_GO);
            None
        }
    }
}

/// `RemoteFile::shared_memory`'s operations.
const ATTACH: u8 = 0;
const WRITE_BACK: u8 = 1;
const LET_GO: u8 = 2;

/// The backings and the mappings of them, owned here: only these methods change them.
#[derive(Default)]
pub struct Mappings {
    backings: Mutex<HashMap<(usize, u64), Arc<Backing>>>,
    /// How many backings exist: the fast path for files that were never mapped.
    nbackings: AtomicUsize,
    /// Shared mappings of library files: start address → (length, backing).
    maps: Mutex<HashMap<usize, (usize, Arc<Backing>)>>,
}

impl Mappings {
    /// Every backing, to write them all back (at exit).
    pub fn all(&self) -> Vec<Arc<Backing>> {
        lock(&self.backings).values().cloned().collect()
    }

    pub fn backing_of(&self, m: usize, ino: u64) -> Option<Arc<Backing>> {
        if self.nbackings.load(Ordering::Acquire) == 0 {
            return None;
        }
        lock(&self.backings).get(&(m, ino)).cloned()
    }

    /// The memfd backing every shared mapping of `o`'s inode, made (and filled with the file's
    /// bytes) by the first one.
    pub fn backing_for_map(&self, o: &Arc<Ofd>) -> VfsResult<Arc<Backing>> {
        let mut all = lock(&self.backings);
        if let Some(b) = all.get(&(o.mount, o.ino)) {
            return Ok(b.clone());
        }
        let (memfd, served) = match served_memory(o) {
            Some(fd) => (fd, true),
            None => (self.own_memory(o)?, false),
        };
        let b = Arc::new(Backing {
            memfd,
            ofd: o.clone(),
            maps: AtomicUsize::new(0),
            served,
        });
        all.insert((o.mount, o.ino), b.clone());
        self.nbackings.fetch_add(1, Ordering::AcqRel);
        Ok(b)
    }

    /// A memfd of this process's own holding `o`'s bytes.
    fn own_memory(&self, o: &Arc<Ofd>) -> VfsResult<i32> {
        let memfd = real::memfd(c"tailbound-shared-mapping")?;
        let fill = || -> VfsResult<()> {
            let size = o.file.stat().map_err(|e| e.errno())?.size;
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0u64;
            while off < size {
                let n = o
                    .file
                    .pread(&mut buf, off)
                    .map_err(|e| e.errno())?
                    .min((size - off) as usize);
                if n == 0 {
                    break;
                }
                real::kernel_pwrite(memfd, &buf[..n], off)?;
                off += n as u64;
            }
            real::kernel_ftruncate(memfd, size)
        };
        if let Err(e) = fill() {
            real::release_fd(memfd);
            return Err(e);
        }
        Ok(memfd)
    }

    pub fn mapped(&self, addr: usize, len: usize, b: Arc<Backing>) {
        b.maps.fetch_add(1, Ordering::AcqRel);
        lock(&self.maps).insert(addr, (len, b));
    }

    /// Copies a backing's bytes into the file.
    pub fn write_back(&self, b: &Backing) -> VfsResult<()> {
        if b.served {
            let f = b.ofd.file.remote().ok_or(libc::EIO)?;
            return f
                .shared_memory(WRITE_BACK)
                .map(|_| ())
                .map_err(|e| e.errno());
        }
        let size = real::kernel_size(b.memfd)?;
        let f = &b.ofd.file;
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0u64;
        while off < size {
            let want = buf.len().min((size - off) as usize);
            let n = real::kernel_pread(b.memfd, &mut buf[..want], off)?;
            if n == 0 {
                break;
            }
            f.pwrite(&buf[..n], off).map_err(|e| e.errno())?;
            off += n as u64;
        }
        if f.stat().map_err(|e| e.errno())?.size != size {
            f.set_len(size).map_err(|e| e.errno())?;
        }
        Ok(())
    }

    /// `msync` over `addr..addr+len`: writes back every backing mapped there.
    pub fn msync(&self, addr: usize, len: usize) -> VfsResult<()> {
        let hit: Vec<Arc<Backing>> = lock(&self.maps)
            .iter()
            .filter(|(&a, (l, _))| a < addr + len.max(1) && addr < a + l)
            .map(|(_, (_, b))| b.clone())
            .collect();
        for b in hit {
            self.write_back(&b)?;
        }
        Ok(())
    }

    /// `munmap` over `addr..addr+len` (after the kernel unmapped it): writes back, and drops a
    /// backing whose last mapping this was.
    pub fn munmap(&self, addr: usize, len: usize) -> VfsResult<()> {
        let gone: Vec<(usize, Arc<Backing>)> = {
            let mut maps = lock(&self.maps);
            let keys: Vec<usize> = maps
                .iter()
                .filter(|(&a, (l, _))| a < addr + len.max(1) && addr < a + l)
                .map(|(&a, _)| a)
                .collect();
            keys.into_iter()
                .filter_map(|k| maps.remove(&k).map(|(_, b)| (k, b)))
                .collect()
        };
        let mut result = Ok(());
        for (_, b) in gone {
            let last = b.maps.fetch_sub(1, Ordering::AcqRel) == 1;
            let r = match b.ofd.file.remote() {
                // The server writes it back, and drops it after its last process.
                Some(f) if b.served && last => {
                    f.shared_memory(LET_GO).map(|_| ()).map_err(|e| e.errno())
                }
                _ => self.write_back(&b),
            };
            if let Err(e) = r {
                result = Err(e);
            }
            if last {
                let mut all = lock(&self.backings);
                if all
                    .get(&(b.ofd.mount, b.ofd.ino))
                    .is_some_and(|x| Arc::ptr_eq(x, &b))
                {
                    all.remove(&(b.ofd.mount, b.ofd.ino));
                    self.nbackings.fetch_sub(1, Ordering::AcqRel);
                    real::release_fd(b.memfd);
                }
            }
        }
        result
    }

    /// Whether `addr` starts a shared mapping of a library file.
    pub fn is_mapped(&self, addr: usize) -> bool {
        self.nbackings.load(Ordering::Acquire) != 0 && lock(&self.maps).contains_key(&addr)
    }
}
