//! One client's session: its open files, snapshot views and locks, and the requests it sends
//! (read and answered by `dispatch`). When the client goes (end of stream, a broken frame, or the server
//! stopping) its files are closed and its locks released; what it wrote stays in the pool's
//! buffers, as a killed process's writes stay in the kernel's page cache.

use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::access::{Who, EXEC, READ, WRITE};
use super::codec::IO_MAX;
use super::descs::{read_reply, Desc};
use super::lease::LeasedStat;
use super::observe::{self, Change};
use super::posted::{Drain, Names};
use super::protocol::{Adopted, LockArgs, LockHolder, PoolInfo, Reply, Request};
use super::shared::Shared;
use crate::dev::BLOCK_SIZE;
use crate::sys::sock::PeerCred;
use crate::tbfs::locks::{Owner, Request as LockRequest};
use crate::tbfs::{Error, File, Fs, OpenFlags, Result, SetAttr, Snapshot};

/// A reply to a directory listing is cut at about this many bytes of names.
const ENTRIES_BYTES: usize = 1 << 20;

pub(super) struct Session<'a> {
    shared: &'a Shared,
    fs: &'a Fs,
    id: u64,
    cred: PeerCred,
    /// The client's user and groups, for permission checks.
    who: Who,
    /// The session's socket, watched for a hang-up while a request waits for a lock.
    watch: UnixStream,
    /// The descriptions this session refers to, by their (server-wide) handles; shared with
    /// other sessions and with requests running apart (an fsync may outlive the handle's close).
    /// Several threads answer the session's requests at once: the tables are locked only to
    /// look up, insert or remove, never while a request runs.
    files: RwLock<HashMap<u64, Arc<Desc>>>,
    views: Mutex<HashMap<u64, Arc<Snapshot>>>,
    next_handle: AtomicU64,
}

#[path = "session_shmem.rs"]
mod session_shmem;

/// A request run on a thread of its own: it holds what it needs, not the session.
pub(super) type Apart<'a> = Box<dyn FnOnce() -> Result<Reply> + Send + 'a>;

impl<'a> Session<'a> {
    pub(super) fn new(shared: &'a Shared, id: u64, cred: PeerCred, watch: UnixStream) -> Self {
        Session {
            shared,
            fs: &shared.fs,
            id,
            cred,
            who: Who::of_process(cred.pid, cred.uid, cred.gid),
            watch,
            files: RwLock::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
        }
    }

    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Answers `req` as [`Session::serve`] does. A removal that leaves its inode open (a close
    /// another session posted may be that inode's last) comes with the [`Drain`] its answer
    /// must wait for (`posted.rs`).
    pub(super) fn serve_ordered(&self, req: Request) -> (Result<Reply>, Option<Drain<'a>>) {
        let closes = &self.shared.closes;
        if !self.shared.posts_closes {
            return (self.serve(req), None);
        }
        match closes.names(&req) {
            Names::Untouched => (self.serve(req), None),
            Names::Makes(_made) => (self.serve(req), None),
            Names::Removes(path, removing) => {
                // No name appears meanwhile: what the name is now is what goes.
                let victim = self.fs.lstat(&path).ok().map(|st| st.ino);
                let reply = self.serve(req);
                let left_open = reply.is_ok()
                    && victim
                        .is_some_and(|ino| self.fs.stat_ino(ino).is_ok_and(|st| st.nlink == 0));
                drop(removing);
                (reply, left_open.then(|| closes.raise()))
            }
        }
    }

    /// Applies a posted close (its reader calls this before it takes the session's next
    /// request); an error has no one to go to.
    pub(super) fn close_posted(&self, req: Request) {
        self.shared.closes.before_applying();
        let _ = self.serve(req);
    }

    /// `req` as a job for a thread of its own, if it may wait long (a lock wait, an fsync, a
    /// sync), so the client's other requests are answered meanwhile. `None`: the session's
    /// thread answers it (also when it names no open handle: the answer is an error at once).
    pub(super) fn apart<'s>(&'s self, req: &Request) -> Option<Apart<'s>> {
        use Request as R;
        if !self.who.is_root() && self.allow(req).is_err() {
            return None;
        }
        let shared = self.shared;
        Some(match req {
            R::Fsync { handle } => {
                let desc = self.desc(*handle).ok()?;
                Box::new(move || desc.file.fsync().map(|()| Reply::Done))
            }
            R::Fdatasync { handle } => {
                let desc = self.desc(*handle).ok()?;
                Box::new(move || desc.file.fdatasync().map(|()| Reply::Done))
            }
            R::Sync => Box::new(move || shared.fs.sync().map(|()| Reply::Done)),
            R::Lock {
                handle,
                lock,
                wait: true,
            } => {
                let handle = *handle;
                let ino = self.desc(handle).ok()?.file.ino();
                let r = self.lock_request(handle, lock);
                let watch = self.watch.try_clone().ok()?;
                Box::new(move || {
                    lock_waiting(shared, &watch, self.id, ino, &r)?;
                    self.closed_meanwhile(handle, ino, &r);
                    Ok(Reply::Done)
                })
            }
            _ => return None,
        })
    }
}

fn lock_error(e: crate::tbfs::locks::LockError) -> Error {
    Error::io("lock", io::Error::from_raw_os_error(e.errno()))
}

impl Session<'_> {
    fn files(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, Arc<Desc>>> {
        self.files.read().unwrap_or_else(|p| p.into_inner())
    }

    fn files_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Arc<Desc>>> {
        self.files.write().unwrap_or_else(|p| p.into_inner())
    }

    fn views(&self) -> MutexGuard<'_, HashMap<u64, Arc<Snapshot>>> {
        self.views.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn desc(&self, handle: u64) -> Result<Arc<Desc>> {
        self.files()
            .get(&handle)
            .cloned()
            .ok_or_else(|| Error::BadHandle(format!("handle {handle}")))
    }

    fn view(&self, view: u64) -> Result<Arc<Snapshot>> {
        self.views()
            .get(&view)
            .cloned()
            .ok_or_else(|| Error::BadHandle(format!("view {view}")))
    }

    /// A process lock taken on `handle` while another of the client's threads closed it: that
    /// close let the process's locks on the file go, so this one goes too, as if it had come
    /// first (the kernel undoes an `fcntl` lock that races a `close` the same way).
    fn closed_meanwhile(&self, handle: u64, ino: u64, r: &LockRequest) {
        if matches!(r.owner, Owner::Client { .. }) && !self.files().contains_key(&handle) {
            self.release_handle(ino);
        }
    }

    /// A handle's own locks belong to the description, whichever sessions share it; the
    /// others to the client process.
    fn owner(&self, handle: u64, lock: &LockArgs) -> Owner {
        if lock.per_handle {
            Owner::Description(handle)
        } else {
            Owner::Client {
                session: self.id,
                description: 0,
            }
        }
    }

    fn lock_request(&self, handle: u64, lock: &LockArgs) -> LockRequest {
        LockRequest {
            owner: self.owner(handle, lock),
            space: lock.space,
            kind: lock.kind,
            start: lock.start,
            end: lock.end,
        }
    }

    /// Whether things this client makes are given to it rather than left to the server's user.
    fn other_user(&self) -> Option<SetAttr> {
        let (uid, gid) = (self.cred.uid, self.cred.gid);
        ((uid, gid) != self.shared.server_ids).then_some(SetAttr {
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        })
    }

    /// Opens `path` as a new description of this session: its handle.
    fn open_handle(&self, path: &str, flags: OpenFlags) -> Result<(u64, Arc<Desc>)> {
        let file = self.open(path, flags)?;
        if flags.create {
            self.name_changed(path);
        }
        if flags.truncate {
            // Shared memory is the file's data while it exists: the pool's file was
            // truncated, the memory must be too.
            if let Some(sf) = self.shared.shmem.get(file.ino()) {
                sf.set_len(0)?;
            }
            self.changed(&Change::Inode { ino: file.ino() });
        }
        let handle = self
            .shared
            .next_handle
            .fetch_add(1, AtomicOrdering::Relaxed);
        let desc = Arc::new(Desc::new(handle, file, self.shared.fs.clone()));
        self.files_mut().insert(handle, desc.clone());
        Ok((handle, desc))
    }

    fn open(&self, path: &str, flags: OpenFlags) -> Result<File> {
        let Some(owner) = self.other_user().filter(|_| flags.create) else {
            return self.fs.open_file(path, flags);
        };
        // A file made for a client of another user is that user's: made exclusively, so a file
        // that already exists keeps its owner.
        match self.fs.open_file(
            path,
            OpenFlags {
                exclusive: true,
                ..flags
            },
        ) {
            Ok(f) => {
                f.set_attr(&owner)?;
                Ok(f)
            }
            Err(Error::Exists(_)) if !flags.exclusive => self.fs.open_file(
                path,
                OpenFlags {
                    create: false,
                    ..flags
                },
            ),
            Err(e) => Err(e),
        }
    }

    /// Checks that the client may make `req`, by the kernel's rules (root may do anything).
    fn allow(&self, req: &Request) -> Result<()> {
        use Request as R;
        let (fs, who) = (self.fs, &self.who);
        let owner = |path: &str| -> Result<_> {
            who.walk(fs, path, false)?
                .last
                .ok_or_else(|| Error::NotFound(path.to_string()))
        };
        match req {
            R::Open { path, flags } | R::OpenStat { path, flags } => {
                let w = who.walk(fs, path, true)?;
                match &w.last {
                    Some(_) if flags.create && flags.exclusive => {}
                    Some(st) => {
                        let want = if flags.read { READ } else { 0 }
                            | if flags.write || flags.truncate {
                                WRITE
                            } else {
                                0
                            };
                        who.check(st, want, path)?;
                    }
                    None if flags.create => who.check(&w.dir, WRITE | EXEC, path)?,
                    None => {}
                }
            }
            R::Stat { path, follow } | R::StatLeased { path, follow } => {
                who.walk(fs, path, *follow)?;
            }
            R::Readlink { path } => {
                who.walk(fs, path, false)?;
            }
            R::SetAttr { path, attr, follow } => {
                let st = who
                    .walk(fs, path, *follow)?
                    .last
                    .ok_or_else(|| Error::NotFound(path.clone()))?;
                who.may_set_attr(&st, attr, path)?;
            }
            R::Mkdir { path, .. } | R::Symlink { path, .. } => {
                who.check(&who.walk(fs, path, false)?.dir, WRITE | EXEC, path)?;
            }
            R::Rmdir { path } | R::Unlink { path } => {
                let w = who.walk(fs, path, false)?;
                if let Some(victim) = &w.last {
                    who.may_unlink(&w.dir, victim, path)?;
                }
            }
            R::Rename { from, to } => {
                let wf = who.walk(fs, from, false)?;
                let moved = owner(from)?;
                who.may_unlink(&wf.dir, &moved, from)?;
                let wt = who.walk(fs, to, false)?;
                who.check(&wt.dir, WRITE | EXEC, to)?;
                if let Some(replaced) = &wt.last {
                    who.may_unlink(&wt.dir, replaced, to)?;
                }
                // A directory that changes parent has its `..` rewritten.
                if moved.kind == crate::tbfs::FileKind::Dir && wf.dir.ino != wt.dir.ino {
                    who.check(&moved, WRITE, from)?;
                }
            }
            R::Link { existing, new } => {
                owner(existing)?;
                who.check(&who.walk(fs, new, false)?.dir, WRITE | EXEC, new)?;
            }
            R::Truncate { path, .. } => {
                let st = who
                    .walk(fs, path, true)?
                    .last
                    .ok_or_else(|| Error::NotFound(path.clone()))?;
                who.check(&st, WRITE, path)?;
            }
            R::Readdir { path, .. } => {
                let st = who
                    .walk(fs, path, true)?
                    .last
                    .ok_or_else(|| Error::NotFound(path.clone()))?;
                who.check(&st, READ, path)?;
            }
            R::ViewStat { view, path } => {
                who.walk(&*self.view(*view)?, path, true)?;
            }
            R::ViewReaddir { view, path, .. } | R::ViewRead { view, path, .. } => {
                let st = who
                    .walk(&*self.view(*view)?, path, true)?
                    .last
                    .ok_or_else(|| Error::NotFound(path.clone()))?;
                who.check(&st, READ, path)?;
            }
            R::Mknod { path, mode, .. } => {
                let kind = super::nodes::mknod_kind(*mode)?;
                if matches!(
                    kind,
                    crate::tbfs::FileKind::CharDevice | crate::tbfs::FileKind::BlockDevice
                ) {
                    return Err(Error::NotPermitted(format!("{path}: mknod of a device")));
                }
                who.check(&who.walk(fs, path, false)?.dir, WRITE | EXEC, path)?;
            }
            // The pool's retention and cleaning are its owner's to change.
            R::Snapshot { .. } | R::SetSnapshot { .. } | R::Gc { .. }
                if self.cred.uid != self.shared.owner_uid =>
            {
                return Err(Error::NotPermitted(
                    "snapshots and cleaning: only the pool's owner and root".into(),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn serve(&self, mut req: Request) -> Result<Reply> {
        use Request as R;
        if !self.who.is_root() {
            self.allow(&req)?;
            self.as_the_kernel(&mut req)?;
        }
        if let Some(reply) = self.through_shared_memory(&req)? {
            return Ok(reply);
        }
        let fs = self.fs;
        Ok(match req {
            R::Hello { .. } => return Err(Error::Invalid("hello twice".into())),
            R::Open { path, flags } => {
                let (handle, desc) = self.open_handle(&path, flags)?;
                Reply::Opened {
                    handle,
                    ino: desc.file.ino(),
                }
            }
            R::OpenStat { path, flags } => {
                let (handle, desc) = self.open_handle(&path, flags)?;
                // As `FstatLeased` answers; a server without leases gives no words to keep.
                let stat = match self.shared.leases.as_deref() {
                    Some(l) => l.fstat(&desc.file)?,
                    None => LeasedStat {
                        stat: desc.file.stat()?,
                        words: Vec::new(),
                    },
                };
                Reply::OpenedStat {
                    handle,
                    ino: desc.file.ino(),
                    stat,
                }
            }
            R::Close { handle } | R::ClosePosted { handle } => {
                let file = self
                    .files_mut()
                    .remove(&handle)
                    .ok_or_else(|| Error::BadHandle(format!("handle {handle}")))?;
                self.release_handle(file.file.ino());
                drop(file);
                Reply::Done
            }
            R::Read {
                handle,
                offset,
                len,
            } => {
                let desc = self.desc(handle)?;
                Reply::Data(read_reply((len as usize).min(IO_MAX), |buf| {
                    desc.file.pread(buf, offset)
                })?)
            }
            R::Write {
                handle,
                offset,
                data,
            } => {
                let desc = self.desc(handle)?;
                let file = &desc.file;
                let n = file.pwrite(&data, offset)?;
                self.changed(&Change::Written {
                    ino: file.ino(),
                    offset,
                    data: &data[..n.min(data.len())],
                });
                Reply::Number(n as u64)
            }
            R::Append { handle, data } => {
                let desc = self.desc(handle)?;
                let file = &desc.file;
                let offset = file.append(&data)?;
                self.changed(&Change::Written {
                    ino: file.ino(),
                    offset,
                    data: &data,
                });
                Reply::Number(offset)
            }
            R::Fsync { handle } => {
                self.desc(handle)?.file.fsync()?;
                Reply::Done
            }
            R::Fdatasync { handle } => {
                self.desc(handle)?.file.fdatasync()?;
                Reply::Done
            }
            R::SetLen { handle, len } => {
                let desc = self.desc(handle)?;
                let file = &desc.file;
                file.set_len(len)?;
                self.changed(&Change::Inode { ino: file.ino() });
                Reply::Done
            }
            R::Allocate {
                handle,
                offset,
                len,
            } => {
                let desc = self.desc(handle)?;
                let file = &desc.file;
                file.allocate(offset, len)?;
                self.changed(&Change::Inode { ino: file.ino() });
                Reply::Done
            }
            R::Fstat { handle } => Reply::Stat(self.desc(handle)?.file.stat()?),
            R::Lock { handle, lock, wait } => {
                let ino = self.desc(handle)?.file.ino();
                let r = self.lock_request(handle, &lock);
                if wait {
                    lock_waiting(self.shared, &self.watch, self.id, ino, &r)?;
                } else {
                    fs.locks().set(ino, &r, false).map_err(lock_error)?;
                }
                self.closed_meanwhile(handle, ino, &r);
                Reply::Done
            }
            R::TestLock { handle, lock } => {
                let ino = self.desc(handle)?.file.ino();
                let r = LockRequest {
                    owner: self.owner(handle, &lock),
                    space: lock.space,
                    kind: lock.kind,
                    start: lock.start,
                    end: lock.end,
                };
                Reply::Lock(fs.locks().test(ino, &r).map(|h| LockHolder {
                    pid: match h.owner {
                        Owner::Client {
                            session,
                            description: 0,
                        } => self.shared.sessions().get(&session).map_or(-1, |s| s.pid),
                        _ => -1,
                    },
                    write: h.write,
                    start: h.start,
                    end: h.end,
                }))
            }
            R::Stat { path, follow } => Reply::Stat(if follow {
                fs.stat(&path)?
            } else {
                fs.lstat(&path)?
            }),
            R::SetAttr { path, attr, follow } => {
                if follow {
                    fs.set_attr(&path, &attr)?;
                } else {
                    fs.lset_attr(&path, &attr)?;
                }
                self.inode_changed(&path, follow);
                Reply::Done
            }
            R::Mkdir { path, mode } => {
                fs.mkdir(&path, mode)?;
                if let Some(owner) = self.other_user() {
                    fs.lset_attr(&path, &owner)?;
                }
                self.name_changed(&path);
                Reply::Done
            }
            R::Rmdir { path } => {
                fs.rmdir(&path)?;
                self.name_changed(&path);
                Reply::Done
            }
            R::Unlink { path } => {
                let gone = self.ino_before(&path);
                fs.unlink(&path)?;
                self.name_changed(&path);
                self.inode_gone(gone);
                Reply::Done
            }
            R::Rename { from, to } => {
                let replaced = self.ino_before(&to);
                fs.rename(&from, &to)?;
                self.name_changed(&from);
                self.name_changed(&to);
                // The moved inode's change time (and a directory's `..`).
                self.inode_changed(&to, false);
                self.inode_gone(replaced);
                Reply::Done
            }
            R::Link { existing, new } => {
                fs.link(&existing, &new)?;
                self.name_changed(&new);
                self.inode_changed(&existing, false);
                Reply::Done
            }
            R::Symlink { target, path } => {
                fs.symlink(&target, &path)?;
                if let Some(owner) = self.other_user() {
                    fs.lset_attr(&path, &owner)?;
                }
                self.name_changed(&path);
                Reply::Done
            }
            R::Readlink { path } => Reply::Text(fs.readlink(&path)?),
            R::Truncate { path, len } => {
                fs.truncate(&path, len)?;
                self.inode_changed(&path, true);
                Reply::Done
            }
            R::Readdir { path, after } => entries_page(fs.readdir(&path)?, after.as_deref()),
            R::Sync => {
                fs.sync()?;
                Reply::Done
            }
            R::Statvfs => Reply::StatVfs(fs.statvfs()?),
            // Answered once taken: every request published before it was taken earlier.
            R::Barrier => Reply::Done,
            R::Space => Reply::Space(fs.space()?),
            R::Checkpoints => Reply::Checkpoints(fs.checkpoints()?),
            R::Snapshot { name } => Reply::Number(fs.snapshot(name.as_deref())?),
            R::SetSnapshot { number, keep } => {
                fs.set_snapshot(number, keep)?;
                Reply::Done
            }
            R::ProtectionPeriod => {
                Reply::Number(super::protocol_fields::duration_ns(fs.protection_period()))
            }
            R::Gc { target_free } => Reply::Gc(fs.gc(target_free)?),
            R::Info => Reply::Info(Box::new(self.info()?)),
            R::ViewOpen { number } => {
                let view = fs.at(number)?;
                let id = self.next_handle.fetch_add(1, AtomicOrdering::Relaxed);
                self.views().insert(id, Arc::new(view));
                Reply::Number(id)
            }
            R::ViewClose { view } => {
                self.views()
                    .remove(&view)
                    .ok_or_else(|| Error::BadHandle(format!("view {view}")))?;
                Reply::Done
            }
            R::ViewStat { view, path } => Reply::Stat(self.view(view)?.stat(&path)?),
            R::ViewReaddir { view, path, after } => {
                entries_page(self.view(view)?.readdir(&path)?, after.as_deref())
            }
            R::ViewRead {
                view,
                path,
                offset,
                len,
            } => {
                let view = self.view(view)?;
                Reply::Data(read_reply((len as usize).min(IO_MAX), |buf| {
                    view.pread(&path, buf, offset)
                })?)
            }
            R::ReadOn { handle, len } => {
                Reply::Data(self.desc(handle)?.read_on((len as usize).min(IO_MAX))?)
            }
            R::WriteOn { handle, data } => {
                let d = self.desc(handle)?;
                let offset = d.write_on(&data)?;
                self.changed(&Change::Written {
                    ino: d.file.ino(),
                    offset,
                    data: &data,
                });
                Reply::Number(offset)
            }
            R::Seek {
                handle,
                offset,
                whence,
            } => Reply::Number(self.desc(handle)?.seek(offset, whence)?),
            R::SetStatus { handle, status } => {
                self.desc(handle)?
                    .status
                    .store(status, AtomicOrdering::Relaxed);
                Reply::Done
            }
            R::GetStatus { handle } => Reply::Number(u64::from(
                self.desc(handle)?.status.load(AtomicOrdering::Relaxed),
            )),
            R::Hold { items } => {
                let mut held = Vec::with_capacity(items.len());
                for (handle, note) in items {
                    held.push((self.desc(handle)?.clone(), note));
                }
                Reply::Number(self.shared.holds.hold(self.id, held))
            }
            R::HoldFor { token, pid } => {
                self.shared.holds.tie(token, pid)?;
                Reply::Done
            }
            R::Adopt { token } => {
                let items = self.shared.holds.take(token)?;
                let mut out = Vec::with_capacity(items.len());
                for (d, note) in items {
                    out.push(Adopted {
                        handle: d.id,
                        ino: d.file.ino(),
                        note,
                    });
                    self.files_mut().entry(d.id).or_insert(d);
                }
                Reply::Held(out)
            }
            R::Release { token } => {
                drop(self.shared.holds.take(token)?);
                Reply::Done
            }
            R::FsetAttr { handle, attr } => {
                let desc = self.desc(handle)?;
                let file = &desc.file;
                if !self.who.is_root() {
                    self.who.may_set_attr(&file.stat()?, &attr, "")?;
                }
                file.set_attr(&attr)?;
                self.changed(&Change::Inode { ino: file.ino() });
                Reply::Done
            }
            R::LeaseTable => {
                Reply::LeaseTable(self.leases()?.hand_over(&self.watch, self.whole_pool())?)
            }
            R::StatLeased { path, follow } => {
                Reply::LeasedStat(self.leases()?.stat(fs, &path, follow)?)
            }
            R::FstatLeased { handle } => {
                Reply::LeasedStat(self.leases()?.fstat(&self.desc(handle)?.file)?)
            }
            R::ReadLeased {
                handle,
                offset,
                len,
            } => {
                let (data, lease) = self.leases()?.read(
                    fs,
                    &self.desc(handle)?.file,
                    offset,
                    len,
                    self.whole_pool(),
                )?;
                Reply::LeasedData { data, lease }
            }
            R::SharedMemory { handle, op } => {
                let ino = self.desc(handle)?.file.ino();
                let shmem = &self.shared.shmem;
                match op {
                    0 => {
                        let fd = shmem.attach(fs, self.id, ino)?;
                        // Leases taken before go: from now on the memory answers.
                        self.changed(&Change::Inode { ino });
                        Reply::Number(fd as u64)
                    }
                    1 => {
                        if let Some(sf) = shmem.get(ino) {
                            sf.write_back()?;
                        }
                        Reply::Done
                    }
                    2 => {
                        shmem.detach(self.id, ino)?;
                        Reply::Done
                    }
                    _ => return Err(Error::Invalid(format!("shared memory: op {op}"))),
                }
            }
            R::Mknod { path, mode, rdev } => {
                let owner = (self.cred.uid, self.cred.gid);
                super::nodes::mknod_path(fs, &path, mode, rdev, owner)?;
                self.name_changed(&path);
                Reply::Done
            }
        })
    }

    fn leases(&self) -> Result<&super::lease_server::LeaseTable> {
        self.shared
            .leases
            .as_deref()
            .ok_or_else(|| Error::Invalid("this server grants no leases".into()))
    }

    /// Whether the client may read the whole pool (its owner, or root), and so its blocks.
    fn whole_pool(&self) -> bool {
        self.cred.uid == 0 || self.cred.uid == self.shared.owner_uid
    }

    /// What the kernel does beside a call of a client other than root: a write or a truncation
    /// clears the file's set-user-ID bit, and its set-group-ID bit when group execute is set
    /// (`file_remove_privs`); a chmod that sets set-group-ID on a file whose group the caller
    /// is not in drops that bit (`setattr_prepare`), and a chown clears the set-ID bits of a
    /// file that is not a directory.
    fn as_the_kernel(&self, req: &mut Request) -> Result<()> {
        use Request as R;
        match req {
            R::Write { handle, .. }
            | R::WriteOn { handle, .. }
            | R::Append { handle, .. }
            | R::SetLen { handle, .. } => {
                let Ok(desc) = self.desc(*handle) else {
                    return Ok(());
                };
                let st = desc.file.stat()?;
                let kept = without_privs(st.mode);
                if kept != st.mode {
                    desc.file.set_attr(&SetAttr {
                        mode: Some(kept),
                        ..SetAttr::default()
                    })?;
                    self.changed(&Change::Inode { ino: st.ino });
                }
            }
            R::SetAttr {
                path, attr, follow, ..
            } if touches_privs(attr) => {
                let st = if *follow {
                    self.fs.stat(path)
                } else {
                    self.fs.lstat(path)
                };
                if let Ok(st) = st {
                    self.drop_privs(&st, attr);
                }
            }
            R::FsetAttr { handle, attr } if touches_privs(attr) => {
                if let Some(st) = self.desc(*handle).ok().and_then(|d| d.file.stat().ok()) {
                    self.drop_privs(&st, attr);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A chmod's set-group-ID bit on a file of a group the caller is not in goes; a chown of
    /// a file that is not a directory clears its set-ID bits (`ATTR_KILL_SUID`/`SGID`).
    fn drop_privs(&self, st: &crate::tbfs::Stat, attr: &mut SetAttr) {
        if st.kind == crate::tbfs::FileKind::Dir {
            return;
        }
        if attr.mode.is_some() && !self.who.in_group(attr.gid.unwrap_or(st.gid)) {
            attr.mode = attr.mode.map(|m| m & !libc::S_ISGID);
        }
        if attr.uid.is_some() || attr.gid.is_some() {
            let kept = without_privs(attr.mode.unwrap_or(st.mode));
            if kept != attr.mode.unwrap_or(st.mode) {
                attr.mode = Some(kept);
            }
        }
    }

    /// Tells the server's observer, if it has one, of a change made.
    fn changed(&self, change: &Change<'_>) {
        if let Some(o) = &self.shared.observer {
            o(change);
        }
    }

    fn name_changed(&self, path: &str) {
        if let Some(o) = &self.shared.observer {
            observe::name_changed(self.fs, o, path);
        }
    }

    fn inode_changed(&self, path: &str, follow: bool) {
        if let Some(o) = &self.shared.observer {
            observe::inode_changed(self.fs, o, path, follow);
        }
    }

    /// The inode a name that is about to go names, when an observer will want it; the
    /// observer is told first, so it can keep the inode ([`Change::Unlinking`]).
    fn ino_before(&self, path: &str) -> Option<u64> {
        self.shared.observer.as_ref()?;
        let ino = self.fs.lstat(path).ok()?.ino;
        self.changed(&Change::Unlinking { ino });
        Some(ino)
    }

    /// An inode lost a name (its link count changed).
    fn inode_gone(&self, ino: Option<u64>) {
        if let Some(ino) = ino {
            self.changed(&Change::Inode { ino });
        }
    }

    fn info(&self) -> Result<PoolInfo> {
        let dev = self.fs.inner.dev();
        let mut superblocks = vec![0u8; 2 * BLOCK_SIZE as usize];
        dev.read_at(0, &mut superblocks)
            .map_err(|e| Error::io("reading the superblocks", e))?;
        Ok(PoolInfo {
            device_bytes: dev.len(),
            superblocks,
            config: self.fs.config(),
            recovery: self.fs.recovery_report(),
        })
    }

    /// A handle closed: (POSIX's rule) the process's locks on its file go. The description's
    /// own locks go with its last reference.
    fn release_handle(&self, ino: u64) {
        let locks = self.fs.locks();
        locks.release(
            ino,
            Owner::Client {
                session: self.id,
                description: 0,
            },
        );
    }

    /// The client is gone: every lock it held is released and every file it had open closed.
    pub(super) fn end(&self) {
        self.fs.locks().release_session(self.id);
        // Taken out before they drop: a description's drop takes the lock table's lock.
        let files = std::mem::take(&mut *self.files_mut());
        drop(files);
        let views = std::mem::take(&mut *self.views());
        drop(views);
        self.shared.holds.session_ended(self.id);
        self.shared.shmem.session_ended(self.id);
    }
}

/// Takes a lock, waiting for it, unless the client goes meanwhile: then its session must
/// end (releasing what else it holds) rather than wait on, as a killed process's `F_SETLKW`
/// ends. A watcher thread sees the hang-up and wakes the wait.
fn lock_waiting(
    shared: &Shared,
    watch: &UnixStream,
    id: u64,
    ino: u64,
    r: &LockRequest,
) -> Result<()> {
    let watched = watch
        .try_clone()
        .map_err(|e| Error::io("lock: watching the client", e))?;
    let gone = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let fs = shared.fs.clone();
    let watcher = {
        let (gone, done) = (gone.clone(), done.clone());
        std::thread::Builder::new()
            .name(format!("tbfs-lockwait-{}", id))
            .spawn(move || {
                // Woken every so often to see whether the lock came.
                while !done.load(AtomicOrdering::Acquire) {
                    if crate::sys::sock::wait_hangup(&watched, 100).unwrap_or(true) {
                        gone.store(true, AtomicOrdering::Release);
                        fs.locks().wake_waiters();
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("lock: watching the client", e))?
    };
    let got = shared.fs.locks().set_or_give_up(ino, r, true, Some(&gone));
    done.store(true, AtomicOrdering::Release);
    let _ = watcher.join();
    got.map_err(lock_error)
}

/// The entries after `after`, as many as fit in a reply.
fn entries_page(entries: Vec<crate::tbfs::DirEntry>, after: Option<&str>) -> Reply {
    let start = after.map_or(0, |a| entries.partition_point(|e| e.name.as_str() <= a));
    let mut bytes = 0;
    let mut page = Vec::new();
    let mut rest = entries.into_iter().skip(start).peekable();
    while let Some(e) = rest.next_if(|e| page.is_empty() || bytes + e.name.len() <= ENTRIES_BYTES) {
        bytes += e.name.len() + 16;
        page.push(e);
    }
    Reply::Entries {
        entries: page,
        more: rest.peek().is_some(),
    }
}

/// Whether a set-attributes request may need set-ID bits dropped: a chmod setting
/// set-group-ID, or a chown.
fn touches_privs(attr: &SetAttr) -> bool {
    attr.mode.is_some_and(|m| m & libc::S_ISGID != 0) || attr.uid.is_some() || attr.gid.is_some()
}

/// `mode` as a write by a client other than root leaves it (the kernel's `should_remove_suid`).
fn without_privs(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        m &= !libc::S_ISGID;
    }
    m
}
