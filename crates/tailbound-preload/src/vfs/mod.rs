//! What the shim does, in safe Rust: mounts, path resolution, the library descriptor table, and
//! every operation on library paths and descriptors. Each operation returns `Err(errno)`; the
//! hooks turn that into `-1` and `errno`.
//!
//! Layer: names [`crate::real`] only (for the shim's own kernel calls), and has no `unsafe`.
//!
//! A library descriptor is a kernel descriptor number the shim reserved (see
//! [`real::reserve_fd`]) mapped here to an open file description ([`Ofd`]): the tbfs handle,
//! offset, status flags and directory cursor that `dup` shares.
//!
//! Files: `ofd` (the values operations take and return), `path` (normalizing, the mount spec),
//! `dir` (a directory description's cursor), `locks` (record locks and `flock`), `maps` (shared
//! mappings' backings), `backend` (a mount's pool: in this process or through its server),
//! `procs` (descriptions handed to a forked child or an exec'd image), and this one: the [`Shim`] that holds the mounts, the descriptor table
//! and the working directory, and every operation.

mod backend;
mod dir;
pub mod exec;
mod locks;
pub mod maps;
pub mod nodes;
pub mod ofd;
pub mod path;
pub mod procs;
mod special;

pub use backend::{Handle, Pool};
pub use maps::Backing;
pub use ofd::{Attr, Ent, LibPath, Ofd, VfsResult, Where};
pub use path::{normalize, parse_mounts};
pub use procs::HandOver;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tailbound::dev::file::FileDevice;
use tailbound::dev::memory::MemoryPool;
use tailbound::dev::Device;
use tailbound::tbfs::locks::Owner;
use tailbound::tbfs::{self, FileKind, Fs, OpenFlags};

use crate::vfs::backend::Remote;

use crate::real;
use crate::vfs::maps::Mappings;
use crate::vfs::ofd::lock;

/// One `DIR=POOL` entry of `TAILBOUND_MOUNT`.
pub struct Mount {
    /// Absolute, normalized, without a trailing slash.
    pub prefix: String,
    pub pool: PathBuf,
    fs: OnceLock<Result<Arc<Pool>, String>>,
    /// The `st_dev` reported for files under this mount.
    pub dev: u64,
}

#[derive(Clone)]
struct FdEntry {
    ofd: Arc<Ofd>,
    cloexec: bool,
}

/// The shim's whole state, made on first use.
pub struct Shim {
    pub mounts: Vec<Mount>,
    fds: RwLock<HashMap<i32, FdEntry>>,
    nfds: AtomicUsize,
    cwd: Mutex<Option<String>>,
    kcwd: Mutex<Option<String>>,
    umask: AtomicU32,
    next_id: AtomicU64,
    pub forked: AtomicBool,
    /// `TAILBOUND_PRIVATE=1`: every pool is opened in this process, even a served one.
    pub private: bool,
    /// Holds made before a fork, for the child to adopt: (mount, token).
    fork_holds: Mutex<Vec<(usize, u64)>>,
    pub strict: bool,
    pub report: bool,
    streams: Mutex<HashMap<usize, i32>>,
    /// Writable shared mappings of library files and their backings.
    pub maps: Mappings,
    pub errors_said: Mutex<Vec<String>>,
    /// Called once, when the first pool opens (the abi layer registers its exit flush then).
    on_first_pool: fn(),
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Shim {
    /// The shim as the environment describes it; `on_first_pool` runs when a pool first opens.
    pub fn from_env(on_first_pool: fn()) -> Shim {
        tailbound::failpoint::arm_from_env();
        let spec = std::env::var("TAILBOUND_MOUNT").unwrap_or_default();
        let mounts = match parse_mounts(&spec) {
            Ok(m) => m,
            Err(e) => {
                real::say(&format!("tailbound: {e}; no mounts\n"));
                Vec::new()
            }
        };
        let mounts = mounts
            .into_iter()
            .enumerate()
            .map(|(i, (prefix, pool))| Mount {
                prefix,
                pool,
                fs: OnceLock::new(),
                // A device number no kernel file system uses: major 0x7462 ("tb"), in the
                // encoding `major()` and `minor()` read.
                dev: libc::makedev(0x7462, i as u32),
            })
            .collect();
        let mask = real::set_umask(0o022);
        real::set_umask(mask);
        let shim = Shim {
            mounts,
            fds: RwLock::new(HashMap::new()),
            nfds: AtomicUsize::new(0),
            cwd: Mutex::new(None),
            kcwd: Mutex::new(None),
            umask: AtomicU32::new(mask),
            next_id: AtomicU64::new(1),
            forked: AtomicBool::new(false),
            private: env_flag("TAILBOUND_PRIVATE"),
            fork_holds: Mutex::new(Vec::new()),
            strict: env_flag("TAILBOUND_STRICT"),
            report: env_flag("TAILBOUND_REPORT"),
            streams: Mutex::new(HashMap::new()),
            maps: Mappings::default(),
            errors_said: Mutex::new(Vec::new()),
            on_first_pool,
        };
        if !shim.mounts.is_empty() {
            let k = real::kernel_cwd();
            // Started inside a mount directory that also exists on the kernel file system: the
            // process's working directory is the tbfs one.
            if let Some(k) = &k {
                if shim.mount_of(k).is_some() {
                    *lock(&shim.cwd) = Some(k.clone());
                }
            }
            *lock(&shim.kcwd) = k;
            shim.adopt_from_env();
        }
        shim
    }

    fn mount_of(&self, abs: &str) -> Option<usize> {
        self.mounts.iter().position(|m| {
            abs == m.prefix
                || (abs.len() > m.prefix.len()
                    && abs.starts_with(&m.prefix)
                    && abs.as_bytes()[m.prefix.len()] == b'/')
        })
    }

    fn classify(&self, abs: String) -> Where {
        match self.mount_of(&abs) {
            None => Where::Kernel,
            Some(m) if self.forked.load(Ordering::Relaxed) && self.is_local(m) => {
                Where::Refused(libc::EACCES)
            }
            Some(m) => {
                let rel = abs[self.mounts[m].prefix.len()..]
                    .trim_start_matches('/')
                    .to_string();
                // As the kernel's walk: a name longer than a directory entry can hold.
                if rel.split('/').any(|c| c.len() > NAME_MAX) {
                    return Where::Refused(libc::ENAMETOOLONG);
                }
                Where::Lib(LibPath { mount: m, rel, abs })
            }
        }
    }

    /// Resolves a path given to a call, relative to `dirfd` (`AT_FDCWD` for the working
    /// directory), to a mount location or the kernel.
    pub fn resolve(&self, dirfd: i32, path: &[u8]) -> Where {
        if self.mounts.is_empty() || path.is_empty() {
            return Where::Kernel;
        }
        let Ok(p) = std::str::from_utf8(path) else {
            return Where::Kernel;
        };
        match self.resolve_str(dirfd, p) {
            // The kernel refuses a path string of PATH_MAX bytes or more before it walks it.
            Where::Lib(_) if path.len() >= libc::PATH_MAX as usize => {
                Where::Refused(libc::ENAMETOOLONG)
            }
            w => w,
        }
    }

    fn resolve_str(&self, dirfd: i32, p: &str) -> Where {
        if p.starts_with('/') {
            return self.classify(normalize(p));
        }
        if dirfd != libc::AT_FDCWD {
            return match self.ofd(dirfd) {
                Some(o) => self.classify(normalize(&format!("{}/{p}", o.abs))),
                None => Where::Kernel,
            };
        }
        if let Some(c) = lock(&self.cwd).as_ref() {
            return self.classify(normalize(&format!("{c}/{p}")));
        }
        // Relative to a kernel working directory, which is never under a mount: only `..` can
        // lead into one.
        if !p.split('/').any(|c| c == "..") {
            return Where::Kernel;
        }
        let base = lock(&self.kcwd).clone().or_else(real::kernel_cwd);
        match base {
            Some(b) => self.classify(normalize(&format!("{b}/{p}"))),
            None => Where::Kernel,
        }
    }

    /// Whether a string names a path under a mount (for `freopen`).
    pub fn is_library_path(&self, path: &[u8]) -> bool {
        matches!(
            self.resolve(libc::AT_FDCWD, path),
            Where::Lib(_) | Where::Refused(_)
        )
    }

    /// Whether mount number `mount`'s pool is open in this process (not through a server).
    fn is_local(&self, m: usize) -> bool {
        matches!(self.mounts[m].fs.get(), Some(Ok(p)) if p.local().is_some())
    }

    /// The server session of mount number `mount`, if its pool is served and open here.
    fn remote(&self, m: usize) -> Option<&Remote> {
        match self.mounts[m].fs.get() {
            Some(Ok(p)) => p.remote(),
            _ => None,
        }
    }

    /// The pool of mount number `mount`, opened on first use: through its server when one answers (and
    /// `TAILBOUND_PRIVATE` is not set), else in this process.
    pub fn fs(&self, m: usize) -> VfsResult<&Arc<Pool>> {
        let mount = &self.mounts[m];
        let r = mount.fs.get_or_init(|| {
            let forked = self.forked.load(Ordering::Relaxed);
            let r = Pool::open(&mount.pool, self.private, || {
                if forked {
                    // The parent may have it open: only its server can share it.
                    return Err(FORKED.into());
                }
                open_pool(&mount.pool)
            });
            if let Ok(p) = &r {
                if let Some(fs) = p.local() {
                    fs.set_mount_point(Some(&mount.prefix));
                }
                (self.on_first_pool)();
            }
            r
        });
        match r {
            Ok(fs) => Ok(fs),
            // As for a pool the parent opened in-process (`classify`).
            Err(e) if e == FORKED => Err(libc::EACCES),
            // Another process opened it in-process (`--private`): the pool is that process's
            // alone, as for a forked child, and an exec'd child sees the same errno.
            Err(e) if e.starts_with(HELD) => {
                self.say_once(m, e);
                Err(libc::EACCES)
            }
            Err(e) => {
                self.say_once(m, e);
                Err(libc::EIO)
            }
        }
    }

    /// Says why mount number `m`'s pool cannot be opened, once per reason.
    fn say_once(&self, m: usize, e: &String) {
        let mount = &self.mounts[m];
        let mut said = lock(&self.errors_said);
        if !said.contains(e) {
            real::say(&format!(
                "tailbound: {} cannot be served from {}: {e}\n",
                mount.prefix,
                mount.pool.display()
            ));
            said.push(e.clone());
        }
    }

    /// Flushes every open pool (at exit): writes back shared mappings, then syncs.
    pub fn flush_all(&self) {
        if self.forked.load(Ordering::Relaxed) {
            return;
        }
        let backings = self.maps.all();
        for b in backings {
            let _ = self.maps.write_back(&b);
        }
        // A served pool is its server's to sync, as the kernel's page cache outlives a process.
        for m in &self.mounts {
            if let Some(Ok(fs)) = m.fs.get().map(|r| r.as_ref().map(|p| p.local())) {
                let Some(fs) = fs else { continue };
                if let Err(e) = fs.sync() {
                    real::say(&format!(
                        "tailbound: syncing {} at exit: {e}\n",
                        m.pool.display()
                    ));
                }
            }
        }
    }

    /// Poisons every pool the process has open, after a panic inside a call (the abi layer's panic
    /// boundary), and says so on stderr.
    pub fn poison_all(&self, reason: &str) {
        let mut any = false;
        for m in &self.mounts {
            if let Some(Ok(Some(fs))) = m.fs.get().map(|r| r.as_ref().map(|p| p.local())) {
                any = true;
                fs.poison_with(reason);
                real::say(&format!(
                    "tailbound: the pool {} mounted at {} is poisoned: {}; its calls fail with \
                     EIO until it is reopened\n",
                    m.pool.display(),
                    m.prefix,
                    fs.poisoned().unwrap_or_default()
                ));
            }
        }
        if !any {
            real::say(&format!("tailbound: {reason}; the call failed with EIO\n"));
        }
    }

    // ---- the descriptor table ----

    /// Whether any library descriptor exists (the fast path for kernel descriptors).
    pub fn any_fds(&self) -> bool {
        self.nfds.load(Ordering::Acquire) != 0
    }

    pub fn ofd(&self, fd: i32) -> Option<Arc<Ofd>> {
        if !self.any_fds() {
            return None;
        }
        self.fds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fd)
            .map(|e| e.ofd.clone())
    }

    pub fn is_fd(&self, fd: i32) -> bool {
        self.any_fds()
            && self
                .fds
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&fd)
    }

    fn insert(&self, fd: i32, ofd: Arc<Ofd>, cloexec: bool) -> Option<Arc<Ofd>> {
        let mut t = self.fds.write().unwrap_or_else(|p| p.into_inner());
        let old = t.insert(fd, FdEntry { ofd, cloexec });
        if old.is_none() {
            self.nfds.fetch_add(1, Ordering::AcqRel);
        }
        old.map(|e| e.ofd)
    }

    fn remove(&self, fd: i32) -> Option<Arc<Ofd>> {
        let mut t = self.fds.write().unwrap_or_else(|p| p.into_inner());
        let old = t.remove(&fd);
        if old.is_some() {
            self.nfds.fetch_sub(1, Ordering::AcqRel);
        }
        old.map(|e| e.ofd)
    }

    /// What a descriptor's close does to the library side: POSIX locks of the process on the
    /// inode go (any close does that), and the description when this was its last descriptor.
    fn closed(&self, ofd: Arc<Ofd>) {
        if let Some(locks) = ofd.fs.locks() {
            locks.release(ofd.ino, Owner::Process);
        } else if Arc::strong_count(&ofd) > 1 {
            // Through a server the description's last close releases them there; a close that
            // leaves it open (a dup) unlocks the process's locks on the file itself.
            ofd.unlock_process_locks();
        }
    }

    /// `close` of a library descriptor. `None` if `fd` is not one.
    pub fn close(&self, fd: i32) -> Option<VfsResult<()>> {
        let ofd = self.remove(fd)?;
        real::park_fd(fd);
        self.closed(ofd);
        lock(&self.streams).retain(|_, v| *v != fd);
        Some(Ok(()))
    }

    /// A kernel call is about to replace `fd` (`dup2` onto it): forget the library side.
    pub fn forget(&self, fd: i32) {
        if let Some(ofd) = self.remove(fd) {
            self.closed(ofd);
        }
    }

    /// `close_range`: forgets every library descriptor in `first..=last`.
    pub fn forget_range(&self, first: u32, last: u32, cloexec_only: bool) {
        if !cloexec_only {
            real::unpark_range(first, last);
        }
        if !self.any_fds() {
            return;
        }
        let fds: Vec<i32> = self
            .fds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .filter(|&fd| fd >= 0 && (fd as u32) >= first && (fd as u32) <= last)
            .collect();
        for fd in fds {
            if cloexec_only {
                // The kernel descriptor stays close-on-exec; so does the library one now.
                if let Some(e) = self
                    .fds
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(&fd)
                {
                    e.cloexec = true;
                }
            } else {
                self.forget(fd);
            }
        }
    }

    // ---- stdio streams ----

    pub fn stream_register(&self, fp: usize, fd: i32) {
        lock(&self.streams).insert(fp, fd);
    }

    pub fn stream_fd(&self, fp: usize) -> Option<i32> {
        if !self.any_fds() {
            return None;
        }
        lock(&self.streams).get(&fp).copied()
    }

    // ---- opening ----

    fn umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    pub fn set_umask(&self, mask: u32) {
        self.umask.store(mask & 0o777, Ordering::Relaxed);
    }

    pub fn open(&self, loc: &LibPath, flags: i32, mode: u32) -> VfsResult<i32> {
        let fs = self.fs(loc.mount)?;
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(libc::EOPNOTSUPP);
        }
        let acc = if flags & libc::O_PATH != 0 {
            libc::O_PATH
        } else {
            flags & libc::O_ACCMODE
        };
        if flags & libc::O_NOFOLLOW != 0
            && fs
                .lstat(&loc.rel)
                .is_ok_and(|st| st.kind == FileKind::Symlink)
        {
            return Err(libc::ELOOP);
        }
        // As the kernel: `O_CREAT` with `O_DIRECTORY` is `EINVAL`, and `O_CREAT` on a directory
        // `EISDIR` (below, once it is open).
        let create = flags & libc::O_CREAT != 0 && acc != libc::O_PATH;
        if create && flags & libc::O_DIRECTORY != 0 {
            return Err(libc::EINVAL);
        }
        // Only `O_DIRECTORY` needs the file's kind before it is opened. Every other check
        // (`O_EXCL`, a directory opened for writing) is made by `open_file` under the lock that
        // creates the file: a look-up first would be a second trip, and for a new file one under
        // `meta`.
        if flags & libc::O_DIRECTORY != 0 {
            let st = fs.stat(&loc.rel).map_err(|e| e.errno())?;
            if st.kind != FileKind::Dir {
                return Err(libc::ENOTDIR);
            }
            if acc == libc::O_WRONLY || acc == libc::O_RDWR {
                return Err(libc::EISDIR);
            }
        }
        let mut of = OpenFlags::from_libc(flags, mode & !self.umask());
        if acc == libc::O_PATH {
            of = OpenFlags::read_only();
        } else {
            // tbfs needs a readable handle for fstat-then-read patterns through dup'd descriptors;
            // the access mode is enforced here instead.
            of.read = true;
        }
        let file = match fs.open_file(&loc.rel, of) {
            // A server checks the access the handle asks for: a write-only file opened for
            // writing only is the caller's to open.
            Err(e)
                if e.errno() == libc::EACCES && acc == libc::O_WRONLY && fs.remote().is_some() =>
            {
                of.read = false;
                fs.open_file(&loc.rel, of)
            }
            r => r,
        }
        .map_err(|e| e.errno())?;
        let st = file.stat_at_open().map_err(|e| e.errno())?;
        if create && st.kind == FileKind::Dir {
            return Err(libc::EISDIR);
        }
        if of.truncate {
            // This process's mappings' memory is the file's data (a server truncates its own).
            if let Some(b) = self.maps.backing_of(loc.mount, st.ino) {
                real::kernel_ftruncate(b.memfd, 0)?;
            }
        }
        ofd::may_open(st.kind, flags)?;
        if acc != libc::O_PATH {
            if let Some(r) = special::open_special(&self.mounts[loc.mount].pool, &st, flags) {
                return r;
            }
        }
        let status = flags
            & (libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DSYNC
                | libc::O_SYNC
                | libc::O_DIRECT
                | libc::O_NOATIME
                | libc::O_LARGEFILE);
        if let (Some(f), true) = (file.remote(), status != 0) {
            f.set_status(status as u32).map_err(|e| e.errno())?;
        }
        let fd = real::reserve_fd()?;
        let ofd = Arc::new(Ofd {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            mount: loc.mount,
            ino: st.ino,
            abs: loc.abs.clone(),
            rel: loc.rel.clone(),
            file,
            dir: st.kind == FileKind::Dir,
            acc,
            status: AtomicI32::new(status),
            pos: Mutex::new(0),
            offset_shared: AtomicBool::new(false),
            listing: Mutex::new(None),
            fs: fs.clone(),
        });
        self.insert(fd, ofd, flags & libc::O_CLOEXEC != 0);
        Ok(fd)
    }

    // ---- data ----

    fn readable(o: &Ofd) -> VfsResult<()> {
        if o.dir {
            return Err(libc::EISDIR);
        }
        if o.acc == libc::O_WRONLY || o.acc == libc::O_PATH {
            return Err(libc::EBADF);
        }
        Ok(())
    }

    fn writable(o: &Ofd) -> VfsResult<()> {
        if o.acc == libc::O_RDONLY || o.acc == libc::O_PATH || o.dir {
            return Err(libc::EBADF);
        }
        Ok(())
    }

    pub fn pread(&self, o: &Ofd, buf: &mut [u8], off: u64) -> VfsResult<usize> {
        Self::readable(o)?;
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            let size = real::kernel_size(b.memfd)?;
            if off >= size {
                return Ok(0);
            }
            let n = buf.len().min((size - off) as usize);
            return real::kernel_pread(b.memfd, &mut buf[..n], off);
        }
        o.file.pread(buf, off).map_err(|e| e.errno())
    }

    pub fn pwrite(&self, o: &Ofd, buf: &[u8], off: u64) -> VfsResult<usize> {
        Self::writable(o)?;
        if o.status.load(Ordering::Relaxed) & libc::O_APPEND != 0 {
            // Linux: pwrite on an O_APPEND descriptor appends.
            return self.append(o, buf).map(|(_, n)| n);
        }
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            real::kernel_pwrite(b.memfd, buf, off)?;
            return Ok(buf.len());
        }
        o.file
            .pwrite_as(buf, off, Self::direct(o))
            .map_err(|e| e.errno())
    }

    /// Whether the descriptor is `O_DIRECT` now (`fcntl(F_SETFL)` may change it).
    fn direct(o: &Ofd) -> bool {
        o.status.load(Ordering::Relaxed) & libc::O_DIRECT != 0
    }

    fn append(&self, o: &Ofd, buf: &[u8]) -> VfsResult<(u64, usize)> {
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            let size = real::kernel_size(b.memfd)?;
            real::kernel_pwrite(b.memfd, buf, size)?;
            return Ok((size + buf.len() as u64, buf.len()));
        }
        let end = o
            .file
            .append_as(buf, Self::direct(o))
            .map_err(|e| e.errno())?;
        Ok((end, buf.len()))
    }

    pub fn read(&self, o: &Ofd, buf: &mut [u8]) -> VfsResult<usize> {
        let mut pos = lock(&o.pos);
        if let Some(f) = o.file.remote().filter(|_| o.offset_is_servers()) {
            drop(pos);
            return self.read_shared(o, f, buf);
        }
        let n = self.pread(o, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    pub fn write(&self, o: &Ofd, buf: &[u8]) -> VfsResult<usize> {
        Self::writable(o)?;
        let mut pos = lock(&o.pos);
        if let Some(f) = o.file.remote().filter(|_| o.offset_is_servers()) {
            drop(pos);
            return self.write_shared(o, f, buf);
        }
        if o.status.load(Ordering::Relaxed) & libc::O_APPEND != 0 {
            let (end, n) = self.append(o, buf)?;
            *pos = end;
            return Ok(n);
        }
        let n = self.pwrite(o, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    pub fn size(&self, o: &Ofd) -> VfsResult<u64> {
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            return real::kernel_size(b.memfd);
        }
        Ok(o.file.stat().map_err(|e| e.errno())?.size)
    }

    pub fn lseek(&self, o: &Ofd, off: i64, whence: i32) -> VfsResult<i64> {
        let mut pos = lock(&o.pos);
        if let Some(f) = o.file.remote().filter(|_| o.offset_is_servers() && !o.dir) {
            drop(pos);
            return self.remote_seek(o, f, off, whence);
        }
        let base: i64 = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => *pos as i64,
            libc::SEEK_END => self.size(o)? as i64,
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let size = self.size(o)? as i64;
                if off < 0 || off >= size {
                    return Err(libc::ENXIO);
                }
                let at = if whence == libc::SEEK_DATA { off } else { size };
                *pos = at as u64;
                return Ok(at);
            }
            _ => return Err(libc::EINVAL),
        };
        let target = base.checked_add(off).ok_or(libc::EOVERFLOW)?;
        if target < 0 {
            return Err(libc::EINVAL);
        }
        *pos = target as u64;
        if o.dir && target == 0 {
            *lock(&o.listing) = None;
        }
        Ok(target)
    }

    pub fn ftruncate(&self, o: &Ofd, len: i64) -> VfsResult<()> {
        if len < 0 {
            return Err(libc::EINVAL);
        }
        if o.dir || o.acc == libc::O_RDONLY || o.acc == libc::O_PATH {
            return Err(libc::EINVAL);
        }
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            return real::kernel_ftruncate(b.memfd, len as u64);
        }
        o.file.set_len(len as u64).map_err(|e| e.errno())
    }

    pub fn fsync(&self, o: &Ofd) -> VfsResult<()> {
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            self.maps.write_back(&b)?;
        }
        if o.dir {
            // A directory's entries are made durable with the namespace: a pool sync.
            return o.fs.sync().map_err(|e| e.errno());
        }
        o.file.fsync().map_err(|e| e.errno())
    }

    pub fn syncfs(&self, o: &Ofd) -> VfsResult<()> {
        o.fs.sync().map_err(|e| e.errno())
    }

    pub fn allocate(&self, o: &Ofd, off: i64, len: i64, keep_size: bool) -> VfsResult<()> {
        if off < 0 || len <= 0 {
            return Err(libc::EINVAL);
        }
        Self::writable(o)?;
        if keep_size {
            // Space is taken when a block is written (a log-structured pool); a reservation
            // that does not change the size is a check that the room is there now.
            let v = o.fs.statvfs().map_err(|e| e.errno())?;
            if (len as u64).div_ceil(v.block_size) > v.blocks_free {
                return Err(libc::ENOSPC);
            }
            return Ok(());
        }
        if self.maps.backing_of(o.mount, o.ino).is_some() {
            let size = self.size(o)?;
            if (off + len) as u64 > size {
                self.ftruncate(o, off + len)?;
            }
            return Ok(());
        }
        o.file
            .allocate(off as u64, len as u64)
            .map_err(|e| e.errno())
    }

    // ---- attributes ----

    fn attr_of(&self, m: usize, st: &tbfs::Stat) -> Attr {
        let type_bits = st.kind.type_bits();
        Attr {
            dev: self.mounts[m].dev,
            ino: st.ino,
            mode: type_bits | (st.mode & 0o7777),
            nlink: st.nlink as u64,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            blocks512: st.blocks * (tailbound::dev::BLOCK_SIZE / 512),
            atime_ns: st.atime_ns,
            mtime_ns: st.mtime_ns,
            ctime_ns: st.ctime_ns,
            rdev: ofd::split_dev(st.rdev),
        }
    }

    pub fn fstat(&self, o: &Ofd) -> VfsResult<Attr> {
        let st = o.file.stat().map_err(|e| e.errno())?;
        let mut a = self.attr_of(o.mount, &st);
        if let Some(b) = self.maps.backing_of(o.mount, o.ino) {
            a.size = real::kernel_size(b.memfd)?;
        }
        Ok(a)
    }

    pub fn stat(&self, loc: &LibPath) -> VfsResult<Attr> {
        let fs = self.fs(loc.mount)?;
        let st = fs.stat(&loc.rel).map_err(|e| e.errno())?;
        let mut a = self.attr_of(loc.mount, &st);
        if let Some(b) = self.maps.backing_of(loc.mount, st.ino) {
            a.size = real::kernel_size(b.memfd)?;
        }
        Ok(a)
    }

    /// chmod, chown, utimens on a path. Only root or the owner may change them (`EPERM`).
    /// `follow`: through a final symbolic link (chmod, chown, utimensat without
    /// `AT_SYMLINK_NOFOLLOW`). A symbolic link's own mode cannot change (`EOPNOTSUPP`, as Linux).
    pub fn set_attr(&self, loc: &LibPath, attr: &tbfs::SetAttr, follow: bool) -> VfsResult<()> {
        let fs = self.fs(loc.mount)?;
        let st = if follow {
            fs.stat(&loc.rel)
        } else {
            fs.lstat(&loc.rel)
        }
        .map_err(|e| e.errno())?;
        Self::may_change(&st, attr)?;
        if follow {
            fs.set_attr(&loc.rel, attr).map_err(|e| e.errno())
        } else {
            if st.kind == FileKind::Symlink && attr.mode.is_some() {
                return Err(libc::EOPNOTSUPP);
            }
            fs.lset_attr(&loc.rel, attr).map_err(|e| e.errno())
        }
    }

    /// fchmod, fchown, futimens on a descriptor.
    pub fn fset_attr(&self, o: &Ofd, attr: &tbfs::SetAttr) -> VfsResult<()> {
        let st = o.file.stat().map_err(|e| e.errno())?;
        Self::may_change(&st, attr)?;
        o.file.set_attr(attr).map_err(|e| e.errno())
    }

    fn may_change(st: &tbfs::Stat, attr: &tbfs::SetAttr) -> VfsResult<()> {
        let euid = real::euid();
        if euid == 0 {
            return Ok(());
        }
        let owner = st.uid == euid;
        let chown = attr.uid.is_some_and(|u| u != st.uid);
        if chown || (!owner && (attr.mode.is_some() || attr.gid.is_some())) {
            return Err(libc::EPERM);
        }
        if !owner && (attr.atime_ns.is_some() || attr.mtime_ns.is_some()) {
            if !attr.touch {
                return Err(libc::EPERM);
            }
            let class = if st.gid == real::egid() { 3 } else { 0 };
            if (st.mode >> class) & 2 == 0 {
                return Err(libc::EACCES);
            }
        }
        Ok(())
    }

    /// `lstat`: a symbolic link itself.
    pub fn lstat(&self, loc: &LibPath) -> VfsResult<Attr> {
        let fs = self.fs(loc.mount)?;
        let st = fs.lstat(&loc.rel).map_err(|e| e.errno())?;
        if st.kind == FileKind::Symlink {
            return Ok(self.attr_of(loc.mount, &st));
        }
        self.stat(loc)
    }

    pub fn symlink(&self, target: &str, loc: &LibPath) -> VfsResult<()> {
        let fs = self.fs(loc.mount)?;
        if loc.rel.is_empty() {
            return Err(libc::EEXIST);
        }
        fs.symlink(target, &loc.rel).map_err(|e| e.errno())
    }

    pub fn readlink(&self, loc: &LibPath) -> VfsResult<String> {
        let fs = self.fs(loc.mount)?;
        fs.readlink(&loc.rel).map_err(|e| e.errno())
    }

    pub fn link(&self, from: &LibPath, to: &LibPath) -> VfsResult<()> {
        if from.mount != to.mount {
            return Err(libc::EXDEV);
        }
        let fs = self.fs(from.mount)?;
        if to.rel.is_empty() {
            return Err(libc::EEXIST);
        }
        fs.link(&from.rel, &to.rel).map_err(|e| e.errno())
    }

    /// The canonical absolute path of a library path: symbolic links followed, `.` and `..`
    /// resolved. A link that leaves the mount is not followed further (`EXDEV`).
    pub fn realpath(&self, loc: &LibPath) -> VfsResult<String> {
        let fs = self.fs(loc.mount)?;
        let prefix = &self.mounts[loc.mount].prefix;
        let mut done: Vec<String> = Vec::new();
        let mut todo: Vec<String> = loc
            .rel
            .split('/')
            .rev()
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        let mut links = 0;
        while let Some(part) = todo.pop() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            done.push(part);
            let rel = done.join("/");
            let st = fs.lstat(&rel).map_err(|e| e.errno())?;
            if st.kind != FileKind::Symlink {
                if st.kind != FileKind::Dir && !todo.is_empty() {
                    return Err(libc::ENOTDIR);
                }
                continue;
            }
            links += 1;
            if links > 40 {
                return Err(libc::ELOOP);
            }
            let target = fs.readlink(&rel).map_err(|e| e.errno())?;
            done.pop();
            if target.starts_with('/') {
                let t = normalize(&target);
                match self.mount_of(&t) {
                    Some(m) if m == loc.mount => {
                        done.clear();
                        let inner = t[prefix.len()..].trim_start_matches('/').to_string();
                        todo.extend(
                            inner
                                .split('/')
                                .rev()
                                .filter(|p| !p.is_empty())
                                .map(str::to_string),
                        );
                    }
                    _ => return Err(libc::EXDEV),
                }
            } else {
                todo.extend(
                    target
                        .split('/')
                        .rev()
                        .filter(|p| !p.is_empty())
                        .map(str::to_string),
                );
            }
        }
        Ok(if done.is_empty() {
            prefix.clone()
        } else {
            format!("{prefix}/{}", done.join("/"))
        })
    }

    pub fn access(&self, loc: &LibPath, mode: i32) -> VfsResult<()> {
        let a = self.stat(loc)?;
        if mode & libc::X_OK != 0 && a.mode & 0o111 == 0 && a.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(libc::EACCES);
        }
        if real::euid() != 0 {
            let bits = (a.mode >> 6) & 7;
            if (mode & libc::R_OK != 0 && bits & 4 == 0)
                || (mode & libc::W_OK != 0 && bits & 2 == 0)
            {
                return Err(libc::EACCES);
            }
        }
        Ok(())
    }

    pub fn statvfs(&self, m: usize) -> VfsResult<tbfs::StatVfs> {
        self.fs(m)?.statvfs().map_err(|e| e.errno())
    }

    // ---- namespace ----

    pub fn mkdir(&self, loc: &LibPath, mode: u32) -> VfsResult<()> {
        let fs = self.fs(loc.mount)?;
        if loc.rel.is_empty() {
            return Err(libc::EEXIST);
        }
        fs.mkdir(&loc.rel, mode & !self.umask() & 0o7777)
            .map_err(|e| e.errno())
    }

    pub fn rmdir(&self, loc: &LibPath) -> VfsResult<()> {
        let fs = self.fs(loc.mount)?;
        if loc.rel.is_empty() {
            return Err(libc::EBUSY);
        }
        fs.rmdir(&loc.rel).map_err(|e| e.errno())
    }

    pub fn unlink(&self, loc: &LibPath) -> VfsResult<()> {
        let fs = self.fs(loc.mount)?;
        if loc.rel.is_empty() {
            return Err(libc::EISDIR);
        }
        fs.unlink(&loc.rel).map_err(|e| e.errno())
    }

    pub fn rename(&self, from: &LibPath, to: &LibPath, flags: u32) -> VfsResult<()> {
        if from.mount != to.mount {
            return Err(libc::EXDEV);
        }
        let fs = self.fs(from.mount)?;
        if from.rel.is_empty() || to.rel.is_empty() {
            return Err(libc::EBUSY);
        }
        if flags & libc::RENAME_NOREPLACE != 0 {
            if fs.stat(&to.rel).is_ok() {
                return Err(libc::EEXIST);
            }
        } else if flags != 0 {
            return Err(libc::EINVAL);
        }
        fs.rename(&from.rel, &to.rel).map_err(|e| e.errno())
    }

    pub fn truncate(&self, loc: &LibPath, len: i64) -> VfsResult<()> {
        if len < 0 {
            return Err(libc::EINVAL);
        }
        let fs = self.fs(loc.mount)?;
        let st = fs.stat(&loc.rel).map_err(|e| e.errno())?;
        if st.kind == FileKind::Dir {
            return Err(libc::EISDIR);
        }
        if let Some(b) = self.maps.backing_of(loc.mount, st.ino) {
            return real::kernel_ftruncate(b.memfd, len as u64);
        }
        fs.truncate(&loc.rel, len as u64).map_err(|e| e.errno())
    }

    // ---- directories ----

    // ---- working directory ----

    pub fn chdir(&self, loc: &LibPath) -> VfsResult<()> {
        let a = self.stat(loc)?;
        if a.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(libc::ENOTDIR);
        }
        *lock(&self.cwd) = Some(loc.abs.clone());
        Ok(())
    }

    /// The process left the mounts for a kernel directory (after the kernel chdir succeeded).
    pub fn left_for_kernel(&self) {
        *lock(&self.cwd) = None;
        *lock(&self.kcwd) = real::kernel_cwd();
    }

    /// The working directory if it is under a mount.
    pub fn library_cwd(&self) -> Option<String> {
        if self.mounts.is_empty() {
            return None;
        }
        lock(&self.cwd).clone()
    }

    // ---- descriptors ----

    pub fn dup(&self, fd: i32, min: i32, cloexec: bool) -> VfsResult<i32> {
        let o = self.ofd(fd).ok_or(libc::EBADF)?;
        let new = real::reserve_dup(fd, min)?;
        self.insert(new, o, cloexec);
        Ok(new)
    }

    /// `dup2`/`dup3` from a library descriptor.
    pub fn dup_onto(&self, fd: i32, new: i32, cloexec: bool) -> VfsResult<i32> {
        let o = self.ofd(fd).ok_or(libc::EBADF)?;
        if fd == new {
            return Ok(new);
        }
        let was_parked = real::unpark(new);
        if let Err(e) = real::reserve_dup_onto(fd, new) {
            if was_parked {
                real::park_fd(new);
            }
            return Err(e);
        }
        if let Some(old) = self.insert(new, o, cloexec) {
            self.closed(old);
        }
        Ok(new)
    }

    pub fn get_cloexec(&self, fd: i32) -> VfsResult<bool> {
        self.fds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fd)
            .map(|e| e.cloexec)
            .ok_or(libc::EBADF)
    }

    pub fn set_cloexec(&self, fd: i32, on: bool) -> VfsResult<()> {
        self.fds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fd)
            .map(|e| e.cloexec = on)
            .ok_or(libc::EBADF)
    }

    pub fn get_fl(&self, o: &Ofd) -> i32 {
        if let Some(Ok(s)) = o.file.remote().map(|f| f.status()) {
            // Another process sharing the description may have changed them.
            o.status.store(s as i32, Ordering::Relaxed);
        }
        o.acc | o.status.load(Ordering::Relaxed)
    }

    pub fn set_fl(&self, o: &Ofd, flags: i32) {
        let changeable = libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;
        let old = o.status.load(Ordering::Relaxed);
        let new = (old & !changeable) | (flags & changeable);
        o.status.store(new, Ordering::Relaxed);
        if let Some(f) = o.file.remote() {
            // F_SETFL cannot fail on a description that exists: a lost server shows in the
            // next call.
            let _ = f.set_status(new as u32);
        }
    }

    // ---- locks ----

    // ---- shared mappings ----

    /// Reports an unsupported call on a library descriptor or path: aborts under
    /// `TAILBOUND_STRICT=1`, else returns the errno to fail with.
    pub fn unsupported(&self, call: &str, errno: i32) -> i32 {
        if self.strict {
            real::say(&format!(
                "tailbound: `{call}` is not supported on a library file (TAILBOUND_STRICT=1)\n"
            ));
            std::process::abort();
        }
        errno
    }
}

/// Why a forked child's mount without a server refuses its calls.
/// The longest name a directory entry holds (the kernel's `NAME_MAX`).
const NAME_MAX: usize = 255;

const FORKED: &str = "a forked child cannot open a pool in-process";
/// How an in-process open's error starts when another process holds the pool's lock.
const HELD: &str = "another process has the pool open in-process (--private): ";

/// Opens a pool file: `TAILBOUND_BACKEND=file` for the O_DIRECT file backend, else a memory pool.
/// An open's error as text, marked with [`HELD`] when another process holds the pool lock.
fn held_or(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        format!("{HELD}{e}")
    } else {
        e.to_string()
    }
}

fn open_pool(path: &std::path::Path) -> Result<Fs, String> {
    let backend = std::env::var("TAILBOUND_BACKEND").unwrap_or_else(|_| "memory".into());
    let dev: Arc<dyn Device> = match backend.as_str() {
        "memory" | "" => Arc::new(MemoryPool::open(path).map_err(held_or)?),
        "file" => {
            tailbound::sched::scheduled(Arc::new(FileDevice::open(path).map_err(held_or)?), path)
                .map_err(|e| e.to_string())?
        }
        other => {
            return Err(format!(
                "TAILBOUND_BACKEND={other}: not a backend (memory or file)"
            ))
        }
    };
    Fs::open(dev, &tbfs::OpenOptions::default()).map_err(|e| e.to_string())
}
