//! A client of a pool server: the calls of [`Fs`](crate::tbfs::Fs), [`File`](crate::tbfs::File)
//! and [`Snapshot`](crate::tbfs::Snapshot) through a server, with the same errors.

use std::path::Path;
use std::sync::Arc;

use super::codec::IO_MAX;
use super::conn::{Conn, Transport};
use super::lease_client::{ClientLeases, LeaseCounters};
use super::protocol::{Adopted, LockArgs, LockHolder, Payload, PoolInfo, Reply, Request};
use super::ring::RingSizes;
use crate::tbfs::{
    CheckpointInfo, DirEntry, Error, GcReport, OpenFlags, Result, SetAttr, SpaceReport, Stat,
    StatVfs,
};

macro_rules! expect {
    ($conn:expr, $req:expr, $pat:pat => $val:expr) => {
        match $conn.call(&$req)? {
            $pat => Ok($val),
            other => Err($conn.unexpected(&other)),
        }
    };
    ($conn:expr, $req:expr, data $data:expr, $pat:pat => $val:expr) => {
        match $conn.call_with(&$req, Some($data))? {
            $pat => Ok($val),
            other => Err($conn.unexpected(&other)),
        }
    };
}

/// A session with a pool server. Cheap to clone; clones share the session (its files and
/// locks). Calls from several threads are in flight at once: one waiting for a lock or an
/// fsync holds up no other.
#[derive(Clone)]
pub struct Client {
    conn: Arc<Conn>,
    leases: Arc<ClientLeases>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("socket", &self.conn.socket)
            .field("session", &self.conn.session)
            .finish()
    }
}

impl Client {
    /// Connects to the server at `socket` and opens a session, on the shared-memory rings if
    /// the server offers them.
    pub fn connect(socket: &Path) -> Result<Client> {
        Client::connect_with(socket, Some(RingSizes::default()))
    }

    /// [`Client::connect`], asking for rings of `rings`' sizes, or (`None`) keeping to the
    /// socket.
    pub fn connect_with(socket: &Path, rings: Option<RingSizes>) -> Result<Client> {
        Ok(Client {
            conn: Arc::new(Conn::connect(socket, rings)?),
            leases: Arc::new(ClientLeases::new()),
        })
    }

    /// How this session's calls travel.
    pub fn transport(&self) -> Transport {
        self.conn.transport()
    }

    /// A session with the server of the pool at `pool`, if one answers on its socket.
    pub fn for_pool(pool: &Path) -> Option<Client> {
        let socket = super::socket_path(pool);
        socket.exists().then(|| Client::connect(&socket).ok())?
    }

    pub fn socket(&self) -> &Path {
        &self.conn.socket
    }
    pub fn server_pid(&self) -> u32 {
        self.conn.server_pid
    }
    /// The server's number for this session.
    pub fn session(&self) -> u64 {
        self.conn.session
    }

    /// The connection's socket descriptor, while it stands (the shim keeps a program from
    /// closing it under the client).
    pub fn socket_fd(&self) -> Option<std::os::fd::RawFd> {
        self.conn.socket_fd()
    }

    /// Closes this process's copy of the connection without a word to the server: a forked
    /// child's copy of its parent's session, which stays the parent's (and ends when the parent
    /// goes). Its rings are unmapped here without touching them. Calls on it fail afterwards.
    /// Takes no lock, so a child forked while another thread was in a call may use it; no
    /// other thread of this process may be in a call on it meanwhile.
    pub fn abandon(&self) {
        self.conn.abandon();
    }

    /// Opens `path`. Where the server answers `OpenStat`, the file's attributes come with the
    /// handle ([`RemoteFile::stat_at_open`]) and are kept under their lease for later `fstat`s.
    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<RemoteFile> {
        let path = path.into();
        // Before the open is sent: a removal that leaves the file open later moves it.
        let closes_seen = self.conn.closes_word();
        let (handle, ino, at_open) = if self.conn.open_stat {
            let req = Request::OpenStat { path, flags };
            let (handle, ino, s) = expect!(self.conn, req,
                Reply::OpenedStat { handle, ino, stat } => (handle, ino, stat))?;
            let stat = s.stat;
            self.leases.opened(ino, s);
            (handle, ino, Some(stat))
        } else {
            let req = Request::Open { path, flags };
            let (handle, ino) =
                expect!(self.conn, req, Reply::Opened { handle, ino } => (handle, ino))?;
            (handle, ino, None)
        };
        Ok(RemoteFile {
            conn: self.conn.clone(),
            leases: self.leases.clone(),
            readable: flags.read,
            handle,
            ino,
            at_open,
            let_go: false,
            closes_seen,
        })
    }

    fn done(&self, req: Request) -> Result<()> {
        expect!(self.conn, req, Reply::Done => ())
    }

    /// How many closes this session sent without waiting for the server.
    pub fn closes_posted(&self) -> u64 {
        self.conn.posted()
    }

    /// How often this session answered a stat or a read itself (under a lease) and how often
    /// it crossed to the server.
    pub fn lease_counters(&self) -> LeaseCounters {
        self.leases.counters()
    }

    /// Whether this session answers stats and reads itself under leases where the server
    /// grants them (the default, unless `TAILBOUND_NO_LEASES=1`), or crosses for each.
    pub fn use_leases(&self, on: bool) {
        self.leases.set_on(on);
    }

    /// Drops every answer kept under a lease: the next call of each kind crosses.
    pub fn forget_leases(&self) {
        self.leases.forget();
    }

    /// Records the session's request ring took so far (`None` on the socket).
    #[cfg(test)]
    pub(super) fn records_sent(&self) -> Option<u64> {
        self.conn.records_sent()
    }

    /// What the session's completion ring's reader took so far (`None` on the socket).
    #[cfg(test)]
    pub(super) fn completions_taken(&self) -> Option<super::ring::Taken> {
        self.conn.completions_taken()
    }

    /// The session's request data area, if it has one.
    #[cfg(test)]
    pub(super) fn data_area(&self) -> Option<&super::ring::DataArea> {
        self.conn.data_area()
    }

    /// The data lease this session keeps for inode `ino` (tests).
    #[cfg(test)]
    pub(super) fn data_lease(&self, ino: u64) -> Option<Arc<super::lease::DataLease>> {
        self.leases.data_lease(ino)
    }

    pub fn stat(&self, path: &str) -> Result<Stat> {
        if let Some(r) = self.leases.stat(&self.conn, path, true) {
            return r;
        }
        let req = Request::Stat {
            path: path.into(),
            follow: true,
        };
        expect!(self.conn, req, Reply::Stat(s) => s)
    }
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        if let Some(r) = self.leases.stat(&self.conn, path, false) {
            return r;
        }
        let req = Request::Stat {
            path: path.into(),
            follow: false,
        };
        expect!(self.conn, req, Reply::Stat(s) => s)
    }
    pub fn set_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.done(Request::SetAttr {
            path: path.into(),
            attr: *attr,
            follow: true,
        })
    }
    /// [`Client::set_attr`] on a symbolic link itself.
    pub fn lset_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.done(Request::SetAttr {
            path: path.into(),
            attr: *attr,
            follow: false,
        })
    }

    /// Keeps open files' descriptions alive for another session to adopt (a forked child or
    /// an exec'd image), each with a note for the adopter; returns the hold's token.
    pub fn hold(&self, items: Vec<(u64, String)>) -> Result<u64> {
        self.conn.mark_held(items.iter().map(|(h, _)| *h));
        expect!(self.conn, Request::Hold { items }, Reply::Number(t) => t)
    }
    /// Ties a hold to the process that will adopt it: the server drops it if that process
    /// exits first.
    pub fn hold_for(&self, token: u64, pid: i32) -> Result<()> {
        self.done(Request::HoldFor { token, pid })
    }
    /// Drops a hold.
    pub fn release(&self, token: u64) -> Result<()> {
        self.done(Request::Release { token })
    }
    /// Takes over a hold's descriptions: files open in this session under their handles, each
    /// with its note.
    pub fn adopt(&self, token: u64) -> Result<Vec<(RemoteFile, String)>> {
        let held = expect!(self.conn, Request::Adopt { token }, Reply::Held(h) => h)?;
        Ok(held
            .into_iter()
            .map(|Adopted { handle, ino, note }| {
                (
                    RemoteFile {
                        conn: self.conn.clone(),
                        leases: self.leases.clone(),
                        readable: false,
                        handle,
                        ino,
                        at_open: None,
                        let_go: false,
                        closes_seen: None,
                    },
                    note,
                )
            })
            .collect())
    }
    /// A file this session has open by its handle (one adopted earlier, or open in the session
    /// this one's process inherited).
    pub fn file_by_handle(&self, handle: u64, ino: u64) -> RemoteFile {
        RemoteFile {
            conn: self.conn.clone(),
            leases: self.leases.clone(),
            readable: false,
            handle,
            ino,
            at_open: None,
            let_go: false,
            closes_seen: None,
        }
    }
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.done(Request::Mkdir {
            path: path.into(),
            mode,
        })
    }
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.done(Request::Rmdir { path: path.into() })
    }
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.done(Request::Unlink { path: path.into() })
    }
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.done(Request::Rename {
            from: from.into(),
            to: to.into(),
        })
    }
    pub fn link(&self, existing: &str, new: &str) -> Result<()> {
        self.done(Request::Link {
            existing: existing.into(),
            new: new.into(),
        })
    }
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.done(Request::Symlink {
            target: target.into(),
            path: path.into(),
        })
    }
    /// `mknod`: `mode` carries the file type bits (FIFO, socket, device, or regular).
    pub fn mknod(&self, path: &str, mode: u32, rdev: u32) -> Result<()> {
        self.done(Request::Mknod {
            path: path.into(),
            mode,
            rdev,
        })
    }
    pub fn readlink(&self, path: &str) -> Result<String> {
        let req = Request::Readlink { path: path.into() };
        expect!(self.conn, req, Reply::Text(t) => t)
    }
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        self.done(Request::Truncate {
            path: path.into(),
            len,
        })
    }
    /// Entries of a directory, sorted by name (fetched a frame's worth at a time).
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        readdir_pages(|after| {
            let req = Request::Readdir {
                path: path.into(),
                after,
            };
            expect!(self.conn, req, Reply::Entries { entries, more } => (entries, more))
        })
    }
    pub fn sync(&self) -> Result<()> {
        self.done(Request::Sync)
    }
    pub fn statvfs(&self) -> Result<StatVfs> {
        expect!(self.conn, Request::Statvfs, Reply::StatVfs(v) => v)
    }
    pub fn space(&self) -> Result<SpaceReport> {
        expect!(self.conn, Request::Space, Reply::Space(s) => s)
    }
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>> {
        expect!(self.conn, Request::Checkpoints, Reply::Checkpoints(c) => c)
    }
    pub fn snapshot(&self, name: Option<&str>) -> Result<u64> {
        let req = Request::Snapshot {
            name: name.map(str::to_string),
        };
        expect!(self.conn, req, Reply::Number(n) => n)
    }
    pub fn set_snapshot(&self, number: u64, keep: bool) -> Result<()> {
        self.done(Request::SetSnapshot { number, keep })
    }
    pub fn protection_period(&self) -> Result<std::time::Duration> {
        expect!(self.conn, Request::ProtectionPeriod, Reply::Number(n) => std::time::Duration::from_nanos(n))
    }
    pub fn gc(&self, target_free: f64) -> Result<GcReport> {
        expect!(self.conn, Request::Gc { target_free }, Reply::Gc(g) => g)
    }
    /// The pool's superblocks, configuration and what recovery did when the server opened it.
    pub fn info(&self) -> Result<PoolInfo> {
        expect!(self.conn, Request::Info, Reply::Info(i) => *i)
    }
    /// A read-only view of retained checkpoint `number`, kept retained while the view exists.
    pub fn at(&self, number: u64) -> Result<RemoteView> {
        let view = expect!(self.conn, Request::ViewOpen { number }, Reply::Number(v) => v)?;
        Ok(RemoteView {
            conn: self.conn.clone(),
            view,
            number,
        })
    }
}

fn readdir_pages(
    mut page: impl FnMut(Option<String>) -> Result<(Vec<DirEntry>, bool)>,
) -> Result<Vec<DirEntry>> {
    let mut all: Vec<DirEntry> = Vec::new();
    loop {
        let (entries, more) = page(all.last().map(|e| e.name.clone()))?;
        let empty = entries.is_empty();
        all.extend(entries);
        if !more || empty {
            return Ok(all);
        }
    }
}

/// A file open through a pool server. Dropping it closes it.
pub struct RemoteFile {
    conn: Arc<Conn>,
    leases: Arc<ClientLeases>,
    /// Opened for reading here: only then may a read be answered from a lease (an adopted
    /// description's mode is the server's to check).
    readable: bool,
    handle: u64,
    ino: u64,
    /// The attributes the open answered with, if it did.
    at_open: Option<Stat>,
    /// Closed already, or not this process's to close: the drop says nothing to the server.
    let_go: bool,
    /// The closes word before this session opened it (`None`: adopted or inherited, or the
    /// session posts no closes): its drop may post the close.
    closes_seen: Option<u32>,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("handle", &self.handle)
            .field("ino", &self.ino)
            .finish()
    }
}

impl RemoteFile {
    pub fn ino(&self) -> u64 {
        self.ino
    }
    /// The server's handle of the description, the same in every session that refers to it.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// Lets the file go without closing it in the server (the description stays open there for
    /// the session's other references to it).
    pub fn forget(mut self) {
        self.let_go = true;
    }

    /// Reads up to `buf.len()` bytes at the description's offset and advances it.
    pub fn read_on(&self, buf: &mut [u8]) -> Result<usize> {
        let want = buf.len().min(IO_MAX);
        let req = Request::ReadOn {
            handle: self.handle,
            len: want as u32,
        };
        let data = expect!(self.conn, req, Reply::Data(d) => d)?;
        let n = data.len().min(want);
        buf[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }

    /// Writes all of `buf` at the description's offset (its end under `O_APPEND`), advancing
    /// it; returns the offset after the data. Each piece of [`IO_MAX`] bytes is placed at once.
    pub fn write_on(&self, buf: &[u8]) -> Result<u64> {
        let mut end = 0;
        for piece in buf.chunks(IO_MAX) {
            // The data goes from the caller's buffer into the transport.
            let req = Request::WriteOn {
                handle: self.handle,
                data: Payload::default(),
            };
            end =
                expect!(self.conn, req, data piece, Reply::Number(at) => at)? + piece.len() as u64;
        }
        Ok(end)
    }

    /// Moves the description's offset (`whence` 0 start, 1 offset, 2 end).
    pub fn seek(&self, offset: i64, whence: u8) -> Result<u64> {
        let req = Request::Seek {
            handle: self.handle,
            offset,
            whence,
        };
        expect!(self.conn, req, Reply::Number(n) => n)
    }

    /// Sets the description's status flags (Linux's bits: `O_APPEND` makes writes appends).
    pub fn set_status(&self, status: u32) -> Result<()> {
        self.done(Request::SetStatus {
            handle: self.handle,
            status,
        })
    }

    pub fn status(&self) -> Result<u32> {
        let req = Request::GetStatus {
            handle: self.handle,
        };
        expect!(self.conn, req, Reply::Number(n) => n as u32)
    }

    /// The server's memory for every process's shared mappings of this file: `op` 0 attach
    /// (answers the server's descriptor number, to open as `/proc/SERVER/fd/N`), 1 write it
    /// back into the pool, 2 let go of it once.
    pub fn shared_memory(&self, op: u8) -> Result<u64> {
        let req = Request::SharedMemory {
            handle: self.handle,
            op,
        };
        match self.conn.call(&req)? {
            Reply::Number(n) => Ok(n),
            Reply::Done => Ok(0),
            other => Err(self.conn.unexpected(&other)),
        }
    }

    /// `fchmod`, `fchown`, `futimens`.
    pub fn set_attr(&self, attr: &SetAttr) -> Result<()> {
        self.done(Request::FsetAttr {
            handle: self.handle,
            attr: *attr,
        })
    }

    fn done(&self, req: Request) -> Result<()> {
        expect!(self.conn, req, Reply::Done => ())
    }

    /// Reads up to `buf.len()` bytes at `offset` (less only at the end of the file).
    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if self.readable && buf.len() <= IO_MAX {
            if let Some(r) = self
                .leases
                .pread(&self.conn, self.handle, self.ino, buf, offset)
            {
                return r;
            }
        }
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(IO_MAX);
            let req = Request::Read {
                handle: self.handle,
                offset: offset + done as u64,
                len: want as u32,
            };
            let data = expect!(self.conn, req, Reply::Data(d) => d)?;
            let n = data.len().min(want);
            buf[done..done + n].copy_from_slice(&data[..n]);
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Writes all of `buf` at `offset`.
    pub fn pwrite(&self, buf: &[u8], offset: u64) -> Result<usize> {
        for (i, piece) in buf.chunks(IO_MAX).enumerate() {
            let req = Request::Write {
                handle: self.handle,
                offset: offset + (i * IO_MAX) as u64,
                data: Payload::default(),
            };
            expect!(self.conn, req, data piece, Reply::Number(_) => ())?;
        }
        Ok(buf.len())
    }

    /// Writes `buf` at the end of the file, in one piece, and returns the offset after it.
    pub fn append(&self, buf: &[u8]) -> Result<u64> {
        if buf.len() > IO_MAX {
            return Err(Error::Invalid(format!(
                "an append of {} bytes: at most {IO_MAX} go in one piece",
                buf.len()
            )));
        }
        let req = Request::Append {
            handle: self.handle,
            data: Payload::default(),
        };
        expect!(self.conn, req, data buf, Reply::Number(n) => n)
    }

    pub fn fsync(&self) -> Result<()> {
        self.done(Request::Fsync {
            handle: self.handle,
        })
    }
    pub fn fdatasync(&self) -> Result<()> {
        self.done(Request::Fdatasync {
            handle: self.handle,
        })
    }
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.done(Request::SetLen {
            handle: self.handle,
            len,
        })
    }
    pub fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.done(Request::Allocate {
            handle: self.handle,
            offset,
            len,
        })
    }
    /// The attributes as the open found them (asked now if it did not say): for the opener's
    /// own checks as part of its open, not for a later `fstat`, which must see later changes.
    pub fn stat_at_open(&self) -> Result<Stat> {
        match self.at_open {
            Some(s) => Ok(s),
            None => self.stat(),
        }
    }

    pub fn stat(&self) -> Result<Stat> {
        if let Some(r) = self.leases.fstat(&self.conn, self.handle, self.ino) {
            return r;
        }
        let req = Request::Fstat {
            handle: self.handle,
        };
        expect!(self.conn, req, Reply::Stat(s) => s)
    }
    /// Takes, changes or drops a lock (`wait`: until no other owner's lock conflicts). A
    /// conflict without `wait` is an error with errno `EAGAIN`.
    pub fn lock(&self, lock: LockArgs, wait: bool) -> Result<()> {
        self.conn.mark_locked(self.ino);
        self.done(Request::Lock {
            handle: self.handle,
            lock,
            wait,
        })
    }
    /// The first lock another owner holds that conflicts with `lock` (`F_GETLK`).
    pub fn test_lock(&self, lock: LockArgs) -> Result<Option<LockHolder>> {
        let req = Request::TestLock {
            handle: self.handle,
            lock,
        };
        expect!(self.conn, req, Reply::Lock(h) => h)
    }
    /// Closes the file, reporting an error the drop would ignore.
    pub fn close(mut self) -> Result<()> {
        self.let_go = true;
        self.done(Request::Close {
            handle: self.handle,
        })
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        if self.let_go {
            return;
        }
        // A drop reports no error: where nothing another call sees depends on when the server
        // applies it, the close goes without waiting (`Conn::post_close`).
        if let Some(seen) = self.closes_seen {
            if self.conn.post_close(self.handle, self.ino, seen) {
                return;
            }
        }
        let _ = self.done(Request::Close {
            handle: self.handle,
        });
    }
}

/// A read-only view of a retained checkpoint, held by the server for this session.
pub struct RemoteView {
    conn: Arc<Conn>,
    view: u64,
    number: u64,
}

impl std::fmt::Debug for RemoteView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteView")
            .field("checkpoint", &self.number)
            .finish()
    }
}

impl RemoteView {
    pub fn number(&self) -> u64 {
        self.number
    }
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let req = Request::ViewStat {
            view: self.view,
            path: path.into(),
        };
        expect!(self.conn, req, Reply::Stat(s) => s)
    }
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        readdir_pages(|after| {
            let req = Request::ViewReaddir {
                view: self.view,
                path: path.into(),
                after,
            };
            expect!(self.conn, req, Reply::Entries { entries, more } => (entries, more))
        })
    }
    /// Reads up to `buf.len()` bytes of a file in the view (at most [`IO_MAX`] per call).
    pub fn pread(&self, path: &str, buf: &mut [u8], offset: u64) -> Result<usize> {
        let want = buf.len().min(IO_MAX);
        let req = Request::ViewRead {
            view: self.view,
            path: path.into(),
            offset,
            len: want as u32,
        };
        let data = expect!(self.conn, req, Reply::Data(d) => d)?;
        let n = data.len().min(want);
        buf[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }
}

impl Drop for RemoteView {
    fn drop(&mut self) {
        let _ = self.conn.call(&Request::ViewClose { view: self.view });
    }
}
