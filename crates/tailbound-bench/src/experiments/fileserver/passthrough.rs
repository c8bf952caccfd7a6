//! `fuse-passthrough`: the floor FUSE itself sets on this machine. A minimal FUSE file system
//! that passes every request to a directory on tmpfs, mounted as `tailbound mount` mounts a
//! pool (the same mount options, INIT flags, request threads, timeouts and no-open, from
//! [`tailbound_fuse::Options`]), so that the bench shows how much of tbfs-fuse's distance from
//! the kernel's own file systems is FUSE's.
//!
//! A baseline, not a product: it answers what filebench's workloads and `rm -rf` ask (lookups,
//! attributes, regular files and directories made, removed and renamed, reads, writes, syncs and
//! listings) and refuses the rest: links, symlinks, special files, rename flags, extended
//! attributes. POSIX locks stay in the kernel. It runs in a process of its own (`bench
//! fileserver --passthrough-server`, [`PassthroughMount`]), as tbfs-fuse's server does, so the
//! generator's CPU figures hold the generator alone.
//!
//! Each inode the kernel holds is a node naming its directory and name in the backing tree; a
//! regular file also has an open descriptor from the request that first showed it to the
//! kernel, which serves its reads and writes (also after an unlink). Inode numbers are the backing ones, with the backing root's and
//! FUSE's root (1) swapped: tmpfs numbers inodes from a counter, so a number is not reused while
//! the kernel may still hold it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, FileTimes, Metadata, OpenOptions, Permissions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tailbound_fuse::fuser::{
    self, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use tailbound_fuse::Options;

use crate::workload::RunResult;

/// The system's name in `bench fileserver --systems`.
pub const FUSE_FLOOR: &str = "fuse-passthrough";
/// The server's subcommand arguments, after the binary: `bench fileserver --passthrough-server
/// BACKING --dir DIR` (a hidden flag).
pub const SERVER_ARGS: [&str; 3] = ["bench", "fileserver", "--passthrough-server"];
/// What the server prints on stdout once the kernel has the mount.
const MOUNTED: &str = "mounted";

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind_of(t: std::fs::FileType) -> FileType {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_fifo() {
        FileType::NamedPipe
    } else if t.is_char_device() {
        FileType::CharDevice
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else if t.is_socket() {
        FileType::Socket
    } else {
        FileType::RegularFile
    }
}

fn time_of(secs: i64, nsecs: i64) -> SystemTime {
    let d = Duration::new(secs.unsigned_abs(), nsecs.clamp(0, 999_999_999) as u32);
    if secs >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn system_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

/// One inode the kernel holds.
struct Node {
    /// Where it is in the backing tree: its directory's node and its name (the root: 0, "").
    place: Mutex<(u64, OsString)>,
    /// A regular file's read-write descriptor.
    io: OnceLock<File>,
}

/// A directory's entries as opendir found them: inode number, kind, name.
type Listing = Vec<(u64, FileType, OsString)>;

/// The FUSE file system over a backing directory.
pub struct Passthrough {
    backing: PathBuf,
    /// Each node with the kernel's lookup count of it; a node goes at the FORGET that takes
    /// its count to zero (handlers hold their own reference meanwhile).
    nodes: Mutex<HashMap<u64, (Arc<Node>, u64)>>,
    root_ino: u64,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    options: Options,
    /// Who this process is: the owner of what it makes, unless the caller is someone else.
    ids: (u32, u32),
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Passthrough {
    /// Serves `backing` with `options` (their writeback cache must be on: no-open is what
    /// this baseline answers).
    pub fn new(backing: &Path, options: Options) -> io::Result<Passthrough> {
        if !options.no_open() {
            return Err(io::Error::other(
                "the passthrough serves no-open mounts only (the writeback cache on)",
            ));
        }
        let root_ino = std::fs::metadata(backing)?.ino();
        let root = Node {
            place: Mutex::new((0, OsString::new())),
            io: OnceLock::new(),
        };
        Ok(Passthrough {
            backing: backing.to_path_buf(),
            nodes: Mutex::new(HashMap::from([(1, (Arc::new(root), 1))])),
            root_ino,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            options,
            ids: tailbound::sys::proc::effective_ids(),
        })
    }

    /// FUSE's number for a backing inode number (the roots swapped).
    fn outer(&self, backing: u64) -> u64 {
        if backing == self.root_ino {
            1
        } else if backing == 1 {
            self.root_ino
        } else {
            backing
        }
    }

    fn node(&self, ino: INodeNo) -> Result<Arc<Node>, Errno> {
        guard(&self.nodes)
            .get(&ino.0)
            .map(|(n, _)| n.clone())
            .ok_or(Errno::ESTALE)
    }

    /// The backing path of a node, walking its directories up to the root.
    fn path(&self, ino: u64) -> Result<PathBuf, Errno> {
        let nodes = guard(&self.nodes);
        let mut names = Vec::new();
        let mut at = ino;
        while at != 1 {
            let (node, _) = nodes.get(&at).ok_or(Errno::ESTALE)?;
            let (up, name) = guard(&node.place).clone();
            names.push(name);
            at = up;
        }
        let mut path = self.backing.clone();
        path.extend(names.iter().rev());
        Ok(path)
    }

    fn attr(&self, m: &Metadata) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.outer(m.ino())),
            size: m.size(),
            blocks: m.blocks(),
            atime: time_of(m.atime(), m.atime_nsec()),
            mtime: time_of(m.mtime(), m.mtime_nsec()),
            ctime: time_of(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: kind_of(m.file_type()),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: m.blksize() as u32,
            flags: 0,
        }
    }

    /// A node's attributes: from its descriptor if it has one, else from its path, checked to
    /// still name the same inode.
    fn stat(&self, ino: INodeNo) -> Result<Metadata, Errno> {
        let node = self.node(ino)?;
        if let Some(f) = node.io.get() {
            return f.metadata().map_err(errno);
        }
        let m = std::fs::symlink_metadata(self.path(ino.0)?).map_err(errno)?;
        if self.outer(m.ino()) != ino.0 {
            return Err(Errno::ESTALE);
        }
        Ok(m)
    }

    /// `name` in `parent`, found or just made (`io`: its descriptor, when just made): its
    /// attributes, and the kernel's count of it raised by one (a node made on first sight).
    fn look_up(
        &self,
        parent: INodeNo,
        name: &OsStr,
        m: Metadata,
        io: Option<File>,
    ) -> Result<FileAttr, Errno> {
        let ino = self.outer(m.ino());
        let mut nodes = guard(&self.nodes);
        let held = nodes.entry(ino).or_insert_with(|| {
            let node = Node {
                place: Mutex::new((parent.0, name.to_os_string())),
                io: OnceLock::new(),
            };
            (Arc::new(node), 0)
        });
        held.1 += 1;
        if let Some(f) = io {
            let _ = held.0.io.set(f);
        }
        Ok(self.attr(&m))
    }

    /// A regular file's node with its read-write descriptor (opened here if the lookup could
    /// not).
    fn io(&self, ino: INodeNo) -> Result<Arc<Node>, Errno> {
        let node = self.node(ino)?;
        if node.io.get().is_none() {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path(ino.0)?)
                .map_err(errno)?;
            // Another thread may have opened one first: the first stays, this one closes.
            let _ = node.io.set(f);
        }
        Ok(node)
    }

    /// What a new inode needs after the call that made it: the mode asked for (this process's
    /// umask may have taken bits the caller's had not), and the caller as its owner.
    fn finish(&self, req: &Request, path: &Path, mode: u32) -> Result<Metadata, Errno> {
        let mut m = std::fs::symlink_metadata(path).map_err(errno)?;
        if m.mode() & 0o7777 != mode & 0o7777 {
            std::fs::set_permissions(path, Permissions::from_mode(mode & 0o7777)).map_err(errno)?;
            m = std::fs::symlink_metadata(path).map_err(errno)?;
        }
        if (req.uid(), req.gid()) != self.ids {
            std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid())).map_err(errno)?;
            m = std::fs::symlink_metadata(path).map_err(errno)?;
        }
        Ok(m)
    }

    fn entry(&self, reply: ReplyEntry, found: Result<FileAttr, Errno>) {
        match found {
            Ok(attr) => reply.entry(&self.options.ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn list(&self, ino: INodeNo) -> Result<Listing, Errno> {
        use std::os::unix::fs::DirEntryExt;
        let path = self.path(ino.0)?;
        // The root's parent is outside the mount: the kernel answers `..` of the root itself.
        let up = if ino.0 == 1 {
            1
        } else {
            self.outer(std::fs::metadata(path.join("..")).map_err(errno)?.ino())
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (up, FileType::Directory, OsString::from("..")),
        ];
        for e in std::fs::read_dir(&path).map_err(errno)? {
            let e = e.map_err(errno)?;
            let kind = kind_of(e.file_type().map_err(errno)?);
            all.push((self.outer(e.ino()), kind, e.file_name()));
        }
        Ok(all)
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Locks stay in the kernel: the baseline keeps none of its own.
        self.options.negotiate(config, false);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.path(parent.0).and_then(|p| {
            let path = p.join(name);
            let m = std::fs::symlink_metadata(&path).map_err(errno)?;
            // A regular file seen for the first time gets its descriptor now, while its name
            // still leads to it: the kernel may write its cached pages back after an unlink.
            let io = if m.is_file() && self.node(INodeNo(self.outer(m.ino()))).is_err() {
                OpenOptions::new().read(true).write(true).open(&path).ok()
            } else {
                None
            };
            self.look_up(parent, name, m, io)
        });
        self.entry(reply, found);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut nodes = guard(&self.nodes);
        if let Some(held) = nodes.get_mut(&ino.0) {
            held.1 = held.1.saturating_sub(nlookup);
            if held.1 == 0 {
                nodes.remove(&ino.0);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat(ino) {
            Ok(m) => reply.attr(&self.options.ttl, &self.attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let run = || -> Result<Metadata, Errno> {
            let node = self.node(ino)?;
            let path = || self.path(ino.0);
            if let Some(mode) = mode {
                let perm = Permissions::from_mode(mode & 0o7777);
                match node.io.get() {
                    Some(f) => f.set_permissions(perm),
                    None => std::fs::set_permissions(path()?, perm),
                }
                .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                match node.io.get() {
                    Some(f) => std::os::unix::fs::fchown(f, uid, gid),
                    None => std::os::unix::fs::lchown(path()?, uid, gid),
                }
                .map_err(errno)?;
            }
            if let Some(len) = size {
                let node = self.io(ino)?;
                let f = node.io.get().ok_or(Errno::EIO)?;
                f.set_len(len).map_err(errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                let mut times = FileTimes::new();
                if let Some(t) = atime {
                    times = times.set_accessed(system_time(t));
                }
                if let Some(t) = mtime {
                    times = times.set_modified(system_time(t));
                }
                match node.io.get() {
                    Some(f) => f.set_times(times),
                    None => File::open(path()?).and_then(|f| f.set_times(times)),
                }
                .map_err(errno)?;
            }
            self.stat(ino)
        };
        match run() {
            Ok(m) => reply.attr(&self.options.ttl, &self.attr(&m)),
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
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let made = self.path(parent.0).and_then(|p| {
            if mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno::from_i32(libc::EOPNOTSUPP));
            }
            let path = p.join(name);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode & 0o7777)
                .open(&path)
                .map_err(errno)?;
            let m = self.finish(req, &path, mode)?;
            self.look_up(parent, name, m, Some(f))
        });
        self.entry(reply, made);
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
        let made = self.path(parent.0).and_then(|p| {
            let path = p.join(name);
            std::fs::DirBuilder::new()
                .mode(mode & 0o7777)
                .create(&path)
                .map_err(errno)?;
            let m = self.finish(req, &path, mode)?;
            self.look_up(parent, name, m, None)
        });
        self.entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .path(parent.0)
            .and_then(|p| std::fs::remove_file(p.join(name)).map_err(errno));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .path(parent.0)
            .and_then(|p| std::fs::remove_dir(p.join(name)).map_err(errno));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
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
        let r = (|| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let to = self.path(newparent.0)?.join(newname);
            std::fs::rename(self.path(parent.0)?.join(name), &to).map_err(errno)?;
            // The moved inode's node, if the kernel holds it, now lives at its new place.
            let ino = self.outer(std::fs::symlink_metadata(&to).map_err(errno)?.ino());
            if let Ok(node) = self.node(INodeNo(ino)) {
                *guard(&node.place) = (newparent.0, newname.to_os_string());
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        // No-open, as tbfs-fuse: the kernel opens files itself from here on.
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        // The kernel makes the file with MKNOD instead, as it does for tbfs-fuse.
        reply.error(Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.io(ino).and_then(|node| {
            let f = node.io.get().ok_or(Errno::EIO)?;
            let mut buf = vec![0u8; size as usize];
            // A short answer means the end of the file to the kernel: fill what the file has.
            let mut got = 0;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        match r {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.io(ino).and_then(|node| {
            let f = node.io.get().ok_or(Errno::EIO)?;
            f.write_all_at(data, offset).map_err(errno)
        });
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.io(ino).and_then(|node| {
            let f = node.io.get().ok_or(Errno::EIO)?;
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        match self.list(ino) {
            Ok(all) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                guard(&self.dirs).insert(fh, Arc::new(all));
                reply.opened(FileHandle(fh), FopenFlags::empty());
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
        let Some(entries) = guard(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
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
        guard(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match tailbound::sys::fs::statfs(&self.backing) {
            // The backing file system's inode counts are not known here: none are reported.
            Ok(s) => reply.statfs(
                s.blocks_total,
                s.blocks_free,
                s.blocks_available,
                0,
                0,
                s.block_size as u32,
                255,
                s.block_size as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }
}

/// The mount's options: `tailbound mount`'s defaults, open to every user as the bench mounts
/// tbfs-fuse (`--allow-other`).
pub fn options() -> Options {
    Options {
        source: "fuse-passthrough".to_string(),
        allow_other: true,
        ..Options::default()
    }
}

/// Mounts `backing` on `dir` and serves it until `dir` is unmounted; `mounted` is called once
/// the kernel has the mount.
pub fn serve(backing: &Path, dir: &Path, mounted: impl FnOnce()) -> io::Result<()> {
    let options = options();
    let config = options.session_config();
    let fs = Passthrough::new(backing, options)?;
    let session = fuser::Session::new(fs, dir, &config)?;
    mounted();
    session.run()
}

/// The server process's body (`bench fileserver --passthrough-server BACKING --dir DIR`):
/// serves until unmounted, telling `out` once mounted.
///
/// It leaves the bench's session first, as `tailbound mount`'s server does when it daemonizes:
/// with the kernel's autogroups each session is scheduled as a group of its own, so a server
/// in its clients' session is woken within their share of the CPU, and one in its own waits
/// for its group's turn. On a busy machine that placement alone changes the figures.
pub fn run_server(backing: &Path, dir: &Path, out: &mut impl Write) -> Result<(), String> {
    tailbound::sys::proc::new_session().map_err(|e| format!("setsid: {e}"))?;
    let mut told = Ok(());
    serve(backing, dir, || {
        told = writeln!(out, "{MOUNTED}").and_then(|()| out.flush());
    })
    .map_err(|e| format!("serving {} at {}: {e}", backing.display(), dir.display()))?;
    told.map_err(|e| format!("telling the bench the mount is made: {e}"))
}

/// A passthrough server process serving a directory, unmounted (and the process waited for)
/// when dropped if [`PassthroughMount::unmount`] was not called.
pub struct PassthroughMount {
    pub dir: PathBuf,
    child: Option<Child>,
}

impl PassthroughMount {
    /// Starts the server of `backing` at `dir` (both must exist) and returns once the kernel
    /// serves the mount.
    pub fn new(exe: &Path, backing: &Path, dir: &Path) -> Result<PassthroughMount, String> {
        let mut child = Command::new(exe)
            .args(SERVER_ARGS)
            .arg(backing)
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running {}: {e}", exe.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("the server's stdout")?;
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim() != MOUNTED {
            let out = child
                .wait_with_output()
                .map_err(|e| format!("waiting for the passthrough server: {e}"))?;
            return Err(format!(
                "the passthrough server did not mount ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(PassthroughMount {
            dir: dir.to_path_buf(),
            child: Some(child),
        })
    }

    /// Unmounts and waits for the server to end.
    pub fn unmount(mut self) -> Result<(), String> {
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        tailbound::sys::fs::unmount(&self.dir, false)
            .map_err(|e| format!("unmounting {}: {e}", self.dir.display()))?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the passthrough server: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "the passthrough server failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Drop for PassthroughMount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = tailbound::sys::fs::unmount(&self.dir, true);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One run on a passthrough mount of a new directory under `scratch` (the backing directory
/// and the mount point both go there): `run` runs the workload at the mount point. Returns its
/// result and the seconds from `made` (when the case began) until the mount was served.
pub fn run_case(
    exe: &Path,
    scratch: &Path,
    made: Instant,
    run: impl FnOnce(&Path) -> Result<RunResult, String>,
) -> Result<(RunResult, f64), String> {
    let (backing, dir) = (scratch.join("data"), scratch.join("mnt"));
    for d in [&backing, &dir] {
        std::fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let mount = PassthroughMount::new(exe, &backing, &dir)?;
    let mkfs_s = made.elapsed().as_secs_f64();
    let result = run(&mount.dir);
    let unmounted = mount.unmount();
    let result = result?;
    unmounted?;
    Ok((result, mkfs_s))
}

/// Whether the report's ratios set `a` against `b`: tbfs and the FUSE floor against the
/// kernel's file systems, and tbfs-fuse against the floor.
pub fn ratio_shown(a: &str, b: &str) -> bool {
    let kernel = |s: &str| !s.starts_with("tbfs") && s != FUSE_FLOOR;
    ((a.starts_with("tbfs") || a == FUSE_FLOOR) && kernel(b))
        || (a == "tbfs-fuse" && b == FUSE_FLOOR)
}

/// What the FUSE target's line adds when the floor ran in the same run (ops/s of the floor,
/// tbfs-fuse and ext4-ram): the floor against ext4-ram (what any FUSE file system here can
/// reach) and tbfs-fuse against the floor.
pub fn floor_note(floor: Option<f64>, fuse: Option<f64>, ext4: Option<f64>) -> Option<String> {
    let floor = floor.filter(|f| *f > 0.0)?;
    let mut parts = Vec::new();
    if let Some(e) = ext4.filter(|e| *e > 0.0) {
        parts.push(format!(
            "FUSE's floor {FUSE_FLOOR} {:.2}x ext4-ram",
            floor / e
        ));
    }
    if let Some(t) = fuse {
        parts.push(format!(
            "tbfs-fuse {:.2}x {FUSE_FLOOR} ({floor:.0} ops/s)",
            t / floor
        ));
    }
    (!parts.is_empty()).then(|| format!("; {}", parts.join(", ")))
}
