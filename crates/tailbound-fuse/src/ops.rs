//! The kernel's requests, answered from the pool.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, Notifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tailbound::tbfs::by_ino::ROOT;
use tailbound::tbfs::locks::{Kind, Owner, Request as LockRequest, Space};
use tailbound::tbfs::{self, File, FileKind, Fs, OpenFlags, RenameMode, SetAttr, Snapshot, Stat};

use crate::generations::Generations;
use crate::inodes::Inodes;
use crate::privs;
use crate::snapshots::{self, Place, Views};
use crate::stats::{Kind as Req, RequestCounts};
use crate::Options;

/// An open file or directory.
enum Handle {
    File(Arc<File>),
    /// A directory's entries as they were when it was opened (`.` and `..` first), so a
    /// listing read in several requests is one consistent list.
    Dir(Arc<Vec<(u64, FileType, String)>>),
    /// A file of a snapshot, and its inode number there.
    View(Arc<Snapshot>, u64),
}

/// Where a read, write or sync goes.
enum Target {
    File(Arc<File>),
    View(Arc<Snapshot>, u64),
}

/// Keeps a file the kernel may have open from being freed by the loss of its last name. With
/// no-open the server does not know which inodes the kernel has open: any inode the kernel
/// holds (its lookup count above zero) gets its pool handle before it loses a name, and keeps
/// its data until the kernel forgets it.
#[derive(Clone)]
pub struct Keeper {
    fs: Arc<Fs>,
    inodes: Arc<Inodes>,
    generations: Arc<Generations>,
    no_open: bool,
}

impl Keeper {
    /// Inode `ino` is about to lose a name, by this mount's request or another front end's.
    pub fn keep(&self, ino: u64) {
        if !self.no_open || !self.generations.holds(ino) {
            return;
        }
        if self
            .fs
            .stat_ino(ino)
            .is_ok_and(|st| st.kind == FileKind::File)
        {
            let _ = self.inodes.get(&self.fs, ino);
        }
    }
}

/// The FUSE file system over one pool.
pub struct TbFuse {
    fs: Arc<Fs>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Pool handles of files the kernel opened without asking ([`crate::inodes`]).
    inodes: Arc<Inodes>,

    generations: Arc<Generations>,
    /// The process that last took a lock as each lock owner, for `F_GETLK`.
    lock_pids: Arc<Mutex<HashMap<u64, u32>>>,
    views: Views,
    /// The mount's channel for dropping what the kernel caches, once mounted.
    notifier: Arc<OnceLock<Notifier>>,
    /// How the pool is mounted (its TTL, writeback cache, request sizes).
    options: Options,
    stats: Option<Arc<RequestCounts>>,
    /// The kernel leaves set-ID bits to the server and asks about capabilities once per inode
    /// (`FUSE_HANDLE_KILLPRIV_V2`, [`crate::privs`]).
    killpriv: bool,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno(e: &tbfs::Error) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

fn time_of(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn ns_of(t: TimeOrNow) -> i64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

fn attr_of(st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(st.ino),
        size: st.size,
        blocks: st.blocks * (tailbound::dev::BLOCK_SIZE / 512),
        atime: time_of(st.atime_ns),
        mtime: time_of(st.mtime_ns),
        ctime: time_of(st.ctime_ns),
        crtime: UNIX_EPOCH,
        kind: file_type(st.kind),
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        blksize: tailbound::dev::BLOCK_SIZE as u32,
        flags: 0,
    }
}

/// A name the pool can hold (UTF-8).
fn name_of(name: &OsStr) -> Result<&str, Errno> {
    name.to_str().ok_or(Errno::EINVAL)
}

/// A lock range from the kernel's inclusive `start..=end` (`end` at `i64::MAX` or more: to the
/// end of the file), as the lock table's exclusive one.
fn lock_range(start: u64, end: u64) -> (u64, u64) {
    let end = if end >= i64::MAX as u64 {
        u64::MAX
    } else {
        end + 1
    };
    (start, end)
}

fn lock_kind(typ: i32) -> Result<Kind, Errno> {
    match typ {
        libc::F_RDLCK => Ok(Kind::Read),
        libc::F_WRLCK => Ok(Kind::Write),
        libc::F_UNLCK => Ok(Kind::Unlock),
        _ => Err(Errno::EINVAL),
    }
}

/// A POSIX record lock request of an open file description, from the kernel's inclusive range
/// and `F_*` type.
fn record_lock(owner: LockOwner, start: u64, end: u64, typ: i32) -> Result<LockRequest, Errno> {
    let kind = lock_kind(typ)?;
    let (start, end) = lock_range(start, end);
    Ok(LockRequest {
        owner: Owner::Description(owner.0),
        space: Space::Record,
        kind,
        start,
        end,
    })
}

impl TbFuse {
    pub fn new(fs: Arc<Fs>, options: &Options) -> TbFuse {
        TbFuse {
            fs,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            inodes: Arc::default(),
            generations: Arc::default(),
            lock_pids: Arc::new(Mutex::new(HashMap::new())),
            views: Views::default(),
            notifier: Arc::default(),
            options: options.clone(),
            stats: options.stats.clone(),
            killpriv: false,
        }
    }

    /// Where [`crate::serve`] puts the mount's channel once the kernel has the mount.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    fn count(&self, kind: Req) {
        if let Some(s) = &self.stats {
            s.count(kind);
        }
    }

    /// The permission bits a live inode's set-ID bits leave after `change`, if any go.
    fn cleared_mode(&self, ino: u64, change: privs::Change) -> tbfs::Result<Option<u32>> {
        let st = self.fs.stat_ino(ino)?;
        Ok(privs::cleared(st.mode, st.kind == FileKind::Dir, change))
    }

    /// A live inode that may change: a snapshot's is read-only.
    fn live(&self, ino: INodeNo) -> Result<u64, Errno> {
        match self.views.place(ino.0)? {
            Place::Live(i) => Ok(i),
            _ => Err(Errno::EROFS),
        }
    }

    /// A directory and a name in it that may be made, removed or renamed (not the root's
    /// `.snapshots`, nor anything in a snapshot).
    fn new_name<'n>(&self, parent: INodeNo, name: &'n OsStr) -> Result<(u64, &'n str), Errno> {
        let parent = self.live(parent)?;
        let name = name_of(name)?;
        if parent == ROOT && name == snapshots::NAME {
            return Err(Errno::EBUSY);
        }
        Ok((parent, name))
    }

    fn stat_any(&self, ino: u64) -> Result<Stat, Errno> {
        match self.views.place(ino)? {
            Place::Live(i) => self.fs.stat_ino(i).map_err(|e| errno(&e)),
            Place::Dir => self.views.dir_stat(&self.fs),
            Place::View(v, i) => {
                let st = v.stat_ino(i).map_err(|e| errno(&e))?;
                self.views.outer(&v, st)
            }
        }
    }

    /// A directory's entries, `.` and `..` first, as `opendir` keeps them.
    fn list_dir(&self, ino: u64) -> Result<Vec<(u64, FileType, String)>, Errno> {
        let e = |e: tbfs::Error| errno(&e);
        let (up, entries) = match self.views.place(ino)? {
            Place::Live(i) => {
                let entries = self.fs.readdir_ino(i).map_err(e)?;
                let up = self.fs.lookup_in(i, "..").map_err(e)?.ino;
                let entries: Vec<_> = entries
                    .into_iter()
                    .map(|d| (d.ino, file_type(d.kind), d.name))
                    .collect();
                (up, entries)
            }
            Place::Dir => {
                let mut entries = Vec::new();
                for (name, number) in self.views.list(&self.fs)? {
                    let view = self.views.open(&self.fs, number)?;
                    entries.push((
                        self.views.outer_ino(&view, ROOT)?,
                        FileType::Directory,
                        name,
                    ));
                }
                (ROOT, entries)
            }
            Place::View(v, i) => {
                let up = if i == ROOT {
                    snapshots::DIR_INO
                } else {
                    let st = v.lookup_in(i, "..").map_err(e)?;
                    self.views.outer_ino(&v, st.ino)?
                };
                let mut entries = Vec::new();
                for d in v.readdir_ino(i).map_err(e)? {
                    entries.push((self.views.outer_ino(&v, d.ino)?, file_type(d.kind), d.name));
                }
                (up, entries)
            }
        };
        let mut all = Vec::with_capacity(entries.len() + 2);
        all.push((ino, FileType::Directory, ".".to_string()));
        all.push((up, FileType::Directory, "..".to_string()));
        all.extend(entries);
        Ok(all)
    }

    fn entry(&self, st: &Stat, reply: ReplyEntry, new: bool) {
        let generation = Generation(self.generations.given(st.ino, new));
        // A snapshot's names are looked up at every walk, so a renewed inode (see `setattr`)
        // is taken up at once.
        let ttl = if st.ino > snapshots::DIR_INO {
            Duration::ZERO
        } else {
            self.options.ttl
        };
        reply.entry(&ttl, &attr_of(st), generation);
    }

    fn add_handle(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        guard(&self.handles).insert(fh, h);
        FileHandle(fh)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        match guard(&self.handles).get(&fh.0) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// The kernel opens files without asking ([`Options::no_open`]).
    fn no_open(&self) -> bool {
        self.options.no_open()
    }

    /// What a read, write or sync of `fh` on `ino` goes to: the handle the server gave at
    /// open, else (no-open, `fh` 0) the inode's own pool handle or its snapshot.
    fn target(&self, ino: INodeNo, fh: FileHandle) -> Result<Target, Errno> {
        match guard(&self.handles).get(&fh.0) {
            Some(Handle::File(f)) => return Ok(Target::File(f.clone())),
            Some(Handle::View(v, i)) => return Ok(Target::View(v.clone(), *i)),
            Some(Handle::Dir(_)) => return Err(Errno::EBADF),
            None => {}
        }
        match self.views.place(ino.0)? {
            Place::Live(i) => self
                .inodes
                .get(&self.fs, i)
                .map(Target::File)
                .map_err(|e| errno(&e)),
            Place::View(v, i) => Ok(Target::View(v, i)),
            Place::Dir => Err(Errno::EISDIR),
        }
    }

    /// Before `name` in `parent` may lose its last link: see [`Keeper`].
    fn keep_if_held(&self, parent: u64, name: &str) {
        if let Ok(st) = self.fs.lookup_in(parent, name) {
            self.keeper().keep(st.ino);
        }
    }

    /// What keeps inodes the kernel may have open alive across another front end's unlinks.
    pub fn keeper(&self) -> Keeper {
        Keeper {
            fs: self.fs.clone(),
            inodes: self.inodes.clone(),
            generations: self.generations.clone(),
            no_open: self.no_open(),
        }
    }

    /// The owner of a new inode in `parent`: the caller, with the directory's group when it is
    /// set-group-ID (and then also set-group-ID itself if a directory).
    fn owner(&self, req: &Request, parent: u64, mode: u32, dir: bool) -> (u32, u32, u32) {
        match self.fs.stat_ino(parent) {
            Ok(p) if p.mode & libc::S_ISGID != 0 => {
                let mode = if dir { mode | libc::S_ISGID } else { mode };
                (req.uid(), p.gid, mode)
            }
            _ => (req.uid(), req.gid(), mode),
        }
    }

    /// The pool's open flags for the kernel's: always readable (the writeback cache reads
    /// pages of write-only files to fill them), and with the cache, no append or sync of its
    /// own (the kernel places appends and calls fsync for O_SYNC).
    fn open_flags(&self, flags: i32, mode: u32) -> OpenFlags {
        let mut f = OpenFlags::from_libc(flags, mode);
        f.read = true;
        if self.options.writeback_cache {
            f.append = false;
            f.sync = tbfs::SyncMode::None;
        }
        f
    }
}

impl Filesystem for TbFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // POSIX locks go to the pool's lock table, which other front ends share.
        self.options.negotiate(config, true);
        self.killpriv = config
            .add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_ok();
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.count(Req::Lookup);
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let found = match self.views.place(parent.0) {
            Ok(Place::Live(p)) if p == ROOT && name == snapshots::NAME => {
                self.views.dir_stat(&self.fs)
            }
            Ok(Place::Live(p)) => self.fs.lookup_in(p, name).map_err(|e| errno(&e)),
            Ok(Place::Dir) => self.views.root(&self.fs, name),
            Ok(Place::View(v, i)) => v
                .lookup_in(i, name)
                .map_err(|e| errno(&e))
                .and_then(|st| self.views.outer(&v, st)),
            Err(e) => Err(e),
        };
        match found {
            Ok(st) => self.entry(&st, reply, false),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.count(Req::Forget);
        if self.generations.forget(ino.0, nlookup) {
            self.inodes.forget(ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.count(Req::Getattr);
        let held = fh
            .and_then(|fh| self.file(fh).ok())
            .or_else(|| self.inodes.held(ino.0));
        let st = match held {
            Some(f) => f.stat().map_err(|e| errno(&e)),
            None => self.stat_any(ino.0),
        };
        match st {
            Ok(st) => reply.attr(&self.options.ttl, &attr_of(&st)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.count(Req::Setattr);
        let ino = match self.views.place(ino.0) {
            Ok(Place::Live(i)) => INodeNo(i),
            Ok(Place::View(..)) => {
                // Root's open of a snapshot's file for writing is not refused (no-open: the
                // kernel opens it without asking, and root passes its permission check). A
                // `write()` is refused at the call (`privs`), but a store through a shared
                // mapping lands in the kernel's page cache. The pool refuses the pages when
                // they are written back, and the kernel then flushes the times the write set:
                // this request. Its pages are no longer under writeback now, so the kernel can
                // drop them. The size the write gave stays (with the writeback cache the kernel
                // keeps its own), so the inode is renewed too: the next walk to the file (view
                // entries are not cached) takes a new inode, which reads as the snapshot has it.
                // Not for a size change: the kernel holds back writeback during one, and
                // dropping a dirty page waits for its writeback.
                if size.is_none() {
                    self.generations.renew(ino.0);
                    if let Some(n) = self.notifier.get() {
                        let _ = n.inval_inode(ino, 0, 0);
                    }
                }
                return reply.error(Errno::EROFS);
            }
            Ok(Place::Dir) => return reply.error(Errno::EROFS),
            Err(e) => return reply.error(e),
        };
        // The set-ID bits the kernel leaves to the pool (`privs`): an owner change clears them,
        // and so does a truncate by a caller other than root (taken as the one with CAP_FSETID).
        let change = if uid.is_some() || gid.is_some() {
            Some(privs::Change::Owner)
        } else if size.is_some() && req.uid() != 0 {
            Some(privs::Change::Data)
        } else {
            None
        };
        let run = || -> tbfs::Result<Stat> {
            let mut st = None;
            if let Some(len) = size {
                st = Some(self.fs.set_len_ino(ino.0, len)?);
            }
            let mode = match (mode, change) {
                (None, Some(change)) => self.cleared_mode(ino.0, change)?,
                (mode, _) => mode,
            };
            let attr = SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                atime_ns: atime.map(ns_of),
                mtime_ns: mtime.map(ns_of),
                ..SetAttr::default()
            };
            // A request carrying only the change time (`chown(f, -1, -1)`, which POSIX says
            // marks it for update) still changes it: the pool sets it to now.
            if attr != SetAttr::default() || (st.is_none() && ctime.is_some()) {
                st = Some(self.fs.set_attr_ino(ino.0, &attr)?);
            }
            match st {
                Some(st) => Ok(st),
                None => self.fs.stat_ino(ino.0),
            }
        };
        match run() {
            Ok(st) => reply.attr(&self.options.ttl, &attr_of(&st)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.count(Req::Readlink);
        let target = match self.views.place(ino.0) {
            Ok(Place::Live(i)) => self.fs.readlink_ino(i).map_err(|e| errno(&e)),
            Ok(Place::View(v, i)) => v.readlink_ino(i).map_err(|e| errno(&e)),
            Ok(Place::Dir) => Err(Errno::EINVAL),
            Err(e) => Err(e),
        };
        match target {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.count(Req::Mknod);
        let (parent, name) = match self.new_name(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let Some(kind) = FileKind::from_mode(mode).filter(|k| *k != FileKind::Dir) else {
            return reply.error(Errno::EINVAL);
        };
        let (uid, gid, perm) = self.owner(req, parent, mode & 0o7777, false);
        match self.fs.mknod_in(parent, name, kind, perm, rdev, (uid, gid)) {
            Ok(st) => self.entry(&st, reply, true),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.count(Req::Mkdir);
        let (parent, name) = match self.new_name(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let (uid, gid, perm) = self.owner(req, parent, mode & 0o7777, true);
        match self.fs.mkdir_in(parent, name, perm, (uid, gid)) {
            Ok(st) => self.entry(&st, reply, true),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count(Req::Unlink);
        let r = self.new_name(parent, name).and_then(|(p, n)| {
            self.keep_if_held(p, n);
            self.fs.unlink_in(p, n).map_err(|e| errno(&e))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count(Req::Rmdir);
        let r = self
            .new_name(parent, name)
            .and_then(|(p, n)| self.fs.rmdir_in(p, n).map_err(|e| errno(&e)));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.count(Req::Symlink);
        let (parent, name) = match self.new_name(parent, link_name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let Some(target) = target.to_str() else {
            return reply.error(Errno::EINVAL);
        };
        let (uid, gid, _) = self.owner(req, parent, 0o777, false);
        match self.fs.symlink_in(parent, name, target, (uid, gid)) {
            Ok(st) => self.entry(&st, reply, true),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Rename);
        let how = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else {
            return reply.error(Errno::EINVAL);
        };
        let names = self
            .new_name(parent, name)
            .and_then(|from| Ok((from, self.new_name(newparent, newname)?)));
        let ((parent, from), (newparent, to)) = match names {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        if how == RenameMode::Replace {
            self.keep_if_held(newparent, to);
        }
        match self.fs.rename_in(parent, from, newparent, to, how) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.count(Req::Link);
        let names = self
            .live(ino)
            .and_then(|ino| Ok((ino, self.new_name(newparent, newname)?)));
        let (ino, (newparent, name)) = match names {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.fs.link_in(ino, newparent, name) {
            Ok(st) => self.entry(&st, reply, false),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.count(Req::Open);
        let place = match self.views.place(ino.0) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        if self.no_open() {
            // The kernel stops sending OPEN and RELEASE, and opens files itself: it has
            // checked the access already, and reads and writes then name the inode.
            return reply.error(Errno::ENOSYS);
        }
        let flags = self.open_flags(flags.0, 0);
        let ino = match place {
            Place::Live(i) => i,
            Place::Dir => return reply.error(Errno::EISDIR),
            Place::View(_, _) if flags.write || flags.truncate => return reply.error(Errno::EROFS),
            Place::View(v, i) => {
                let fh = self.add_handle(Handle::View(v, i));
                return reply.opened(fh, FopenFlags::FOPEN_KEEP_CACHE);
            }
        };
        match self.fs.open_ino(ino, flags) {
            Ok(f) => {
                let fh = self.add_handle(Handle::File(Arc::new(f)));
                reply.opened(fh, FopenFlags::FOPEN_KEEP_CACHE);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.count(Req::Create);
        if self.no_open() {
            // The kernel makes the file with MKNOD instead and opens it without asking: no
            // RELEASE at its close.
            return reply.error(Errno::ENOSYS);
        }
        let (parent, name) = match self.new_name(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let (uid, gid, perm) = self.owner(req, parent, mode & 0o7777, false);
        let mut of = self.open_flags(flags, perm);
        of.create = true;
        let made = self
            .fs
            .create_in(parent, name, of, (uid, gid))
            .and_then(|f| f.stat().map(|st| (f, st)));
        match made {
            Ok((f, st)) => {
                let fh = self.add_handle(Handle::File(Arc::new(f)));
                let generation = Generation(self.generations.given(st.ino, true));
                reply.created(
                    &self.options.ttl,
                    &attr_of(&st),
                    generation,
                    fh,
                    FopenFlags::FOPEN_KEEP_CACHE,
                );
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.count(Req::Read);
        let target = match self.target(ino, fh) {
            Ok(t) => t,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; size as usize];
        let n = match target {
            Target::File(f) => f.pread(&mut buf, offset),
            Target::View(v, i) => v.pread_ino(i, &mut buf, offset),
        };
        match n {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.count(Req::Write);
        let opened = guard(&self.handles).contains_key(&fh.0);
        let f = match self.target(ino, fh) {
            Ok(Target::File(f)) => f,
            // Opened without asking, a snapshot's file is refused here, as the kernel writes
            // its pages back: the writer's close or fsync reports the error.
            Ok(Target::View(..)) => return reply.error(Errno::EROFS),
            Err(e) => return reply.error(e),
        };
        let written = if flags.0 & libc::O_DIRECT != 0 && !opened {
            // An O_DIRECT write the server saw no open of: a handle of its own, so the pool
            // writes it through to the device as it does for a direct open.
            let direct = OpenFlags {
                read: true,
                write: true,
                direct: true,
                ..OpenFlags::default()
            };
            self.fs
                .open_ino(ino.0, direct)
                .and_then(|d| d.pwrite(data, offset))
        } else {
            f.pwrite(data, offset)
        };
        let written = written.and_then(|n| {
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                if let Some(m) = self.cleared_mode(ino.0, privs::Change::Data)? {
                    let attr = SetAttr {
                        mode: Some(m),
                        ..SetAttr::default()
                    };
                    self.fs.set_attr_ino(ino.0, &attr)?;
                    // The kernel keeps its own copy of the mode: drop it (offset -1: the
                    // attributes only, as the written pages are still locked by this write).
                    if let Some(notifier) = self.notifier.get() {
                        let _ = notifier.inval_inode(ino, -1, 0);
                    }
                }
            }
            Ok(n)
        });
        match written {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Flush);
        // A close by a process drops all its record locks on the file (POSIX).
        self.fs
            .locks()
            .release(ino.0, Owner::Description(lock_owner.0));
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Release);
        let gone = guard(&self.handles).remove(&fh.0);
        drop(gone);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Fsync);
        let f = match self.target(ino, fh) {
            Ok(Target::File(f)) => f,
            // A snapshot's file has nothing to sync.
            Ok(Target::View(..)) => return reply.ok(),
            Err(e) => return reply.error(e),
        };
        let r = if datasync { f.fdatasync() } else { f.fsync() };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.count(Req::Opendir);
        match self.list_dir(ino.0) {
            Ok(all) => {
                let fh = self.add_handle(Handle::Dir(Arc::new(all)));
                reply.opened(fh, FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count(Req::Readdir);
        let entries = match guard(&self.handles).get(&fh.0) {
            Some(Handle::Dir(d)) => d.clone(),
            _ => return reply.error(Errno::EBADF),
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Releasedir);
        guard(&self.handles).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Fsyncdir);
        // A directory's entries are in the namespace, which only a checkpoint makes durable.
        match self.fs.sync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.count(Req::Statfs);
        match self.fs.statvfs() {
            Ok(s) => {
                // Inodes are not preallocated: as many more as there are free blocks.
                let ffree = s.blocks_free;
                reply.statfs(
                    s.blocks,
                    s.blocks_free,
                    s.blocks_free,
                    s.files + ffree,
                    ffree,
                    s.block_size as u32,
                    s.name_max as u32,
                    s.block_size as u32,
                );
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        self.count(Req::Getlk);
        let r = match record_lock(lock_owner, start, end, typ) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        match self.fs.locks().test(ino.0, &r) {
            None => reply.locked(0, 0, libc::F_UNLCK, 0),
            Some(held) => {
                let pid = match held.owner {
                    Owner::Description(o) => guard(&self.lock_pids).get(&o).copied(),
                    // A socket client's process is not known here.
                    Owner::Process | Owner::Client { .. } => None,
                };
                let last = if held.end == u64::MAX {
                    i64::MAX as u64
                } else {
                    held.end - 1
                };
                let typ = if held.write {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                };
                reply.locked(held.start, last, typ, pid.unwrap_or(0));
            }
        }
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Setlk);
        let r = match record_lock(lock_owner, start, end, typ) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        if r.kind != Kind::Unlock {
            guard(&self.lock_pids).insert(lock_owner.0, pid);
        }
        match self.fs.locks().set(ino.0, &r, false) {
            Ok(()) => reply.ok(),
            Err(tbfs::locks::LockError::WouldBlock) if sleep => {
                // F_SETLKW: wait on a thread of its own, so the request threads keep serving
                // the holder's unlock.
                let fs = self.fs.clone();
                let spawned = std::thread::Builder::new()
                    .name("tbfs-lock-wait".into())
                    .spawn(move || match fs.locks().set(ino.0, &r, true) {
                        Ok(()) => reply.ok(),
                        Err(e) => reply.error(Errno::from_i32(e.errno())),
                    });
                // Had the thread not started, the reply inside its closure is dropped
                // unanswered, which fails the request with EIO.
                drop(spawned);
            }
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // The pool stores no extended attributes; a snapshot's file shows a capability so
        // that a write to it is refused at the call (`privs`).
        self.count(Req::Getxattr);
        if !self.killpriv {
            // Without it the kernel would ask before every write: ENOSYS makes it stop asking.
            return reply.error(Errno::ENOSYS);
        }
        match self.views.place(ino.0) {
            Ok(Place::View(..)) if name == privs::CAPABILITY => {
                let value = privs::empty_capability();
                match size {
                    0 => reply.size(value.len() as u32),
                    n if (n as usize) < value.len() => reply.error(Errno::ERANGE),
                    _ => reply.data(&value),
                }
            }
            Ok(_) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        self.count(Req::Removexattr);
        match self.views.place(ino.0) {
            Ok(Place::Live(_)) => reply.error(Errno::ENODATA),
            Ok(_) => reply.error(Errno::EROFS),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        self.count(Req::Listxattr);
        reply.error(Errno::ENOSYS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.count(Req::Fallocate);
        let f = match self.target(ino, fh) {
            Ok(Target::File(f)) => f,
            Ok(Target::View(..)) => return reply.error(Errno::EROFS),
            Err(e) => return reply.error(e),
        };
        let r = match mode {
            0 => f.allocate(offset, length).map_err(|e| errno(&e)),
            // Every write goes to a new place, so there is nothing to reserve beyond the size.
            libc::FALLOC_FL_KEEP_SIZE => Ok(()),
            _ => Err(Errno::from_i32(libc::EOPNOTSUPP)),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ranges_convert_between_inclusive_and_exclusive_ends() {
        assert_eq!(lock_range(0, 9), (0, 10));
        assert_eq!(lock_range(5, i64::MAX as u64), (5, u64::MAX));
        assert_eq!(lock_range(5, u64::MAX), (5, u64::MAX));
        assert!(lock_kind(99).is_err());
    }

    #[test]
    fn times_before_the_epoch_survive_the_conversion() {
        for ns in [-1_500_000_000i64, 0, 1_700_000_000_123_456_789] {
            assert_eq!(ns_of(TimeOrNow::SpecificTime(time_of(ns))), ns);
        }
    }

    #[test]
    fn every_kind_has_its_file_type() {
        for (kind, ft) in [
            (FileKind::Fifo, FileType::NamedPipe),
            (FileKind::CharDevice, FileType::CharDevice),
            (FileKind::BlockDevice, FileType::BlockDevice),
            (FileKind::Socket, FileType::Socket),
        ] {
            assert_eq!(file_type(kind), ft);
        }
    }
}
