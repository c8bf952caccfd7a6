//! The pool server's messages: what a client asks ([`Request`]) and what the server answers
//! ([`Reply`]), with the fields they share. Their bytes are in `protocol` (docs/PROTOCOL.md).

use super::lease::{DataLease, LeaseTableInfo, LeasedStat};
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::{
    CheckpointInfo, Config, DirEntry, GcReport, OpenFlags, RecoveryReport, SetAttr, SpaceReport,
    Stat, StatVfs,
};

/// The bytes a `Hello` starts with.
pub const MAGIC: [u8; 4] = *b"TBSV";
/// The protocol version this build speaks.
pub const VERSION: u16 = 2;
/// The `hello` feature bit that asks for (and, answered, grants) a [`Caller`] in the header of
/// every later request.
pub const FEATURE_CALLER: u64 = 1 << 1;
/// The `hello` feature bit that asks for (and, answered, grants) [`Request::OpenStat`].
pub const FEATURE_OPEN_STAT: u64 = 1 << 2;
/// The `hello` feature bit that asks for (and, answered, grants) [`Request::ClosePosted`] and
/// the closes word in the rings' header. Granted only with the rings.
pub const FEATURE_POSTED_CLOSE: u64 = 1 << 3;
/// [`Request::ClosePosted`]'s operation code: the server's reader looks for it.
pub const CLOSE_POSTED: u8 = 67;

/// Who makes a request: the client's calling thread and the I/O priority it says that thread
/// has (the kernel's class number, 1 real time, 2 best effort, 3 idle, and level 0-7). The
/// server knows the process from the socket; it checks what would raise the priority beyond
/// what the process may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller {
    pub tid: u32,
    pub class: u8,
    pub level: u8,
}

/// A byte-range or whole-file lock request on an open handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockArgs {
    pub space: Space,
    pub kind: Kind,
    pub start: u64,
    /// Exclusive; `u64::MAX` is to the end of the file.
    pub end: u64,
    /// Owned by the handle (OFD record lock or `flock`) rather than by the client process
    /// (POSIX record lock).
    pub per_handle: bool,
}

/// A lock another owner holds, as a lock test reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHolder {
    /// The holding client's process id for a POSIX lock, -1 for a handle's lock.
    pub pid: i32,
    pub write: bool,
    pub start: u64,
    pub end: u64,
}

/// What a pool server tells a client about its pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    /// The device's length in bytes.
    pub device_bytes: u64,
    /// The two superblock copies, as stored.
    pub superblocks: Vec<u8>,
    pub config: Config,
    pub recovery: RecoveryReport,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Hello {
        version: u16,
        features: u64,
    },
    Open {
        path: String,
        flags: OpenFlags,
    },
    /// `Open` answered with the new handle's `FstatLeased` (`Reply::OpenedStat`), so the
    /// opener's look at what it opened is no second trip. Only where [`FEATURE_OPEN_STAT`] was
    /// granted.
    OpenStat {
        path: String,
        flags: OpenFlags,
    },
    Close {
        handle: u64,
    },
    /// A close the client does not wait for: no completion is sent. The server applies it
    /// before it takes any request the session published after it (docs/PROTOCOL.md, "Posted
    /// closes"). Only where [`FEATURE_POSTED_CLOSE`] was granted, on the rings.
    ClosePosted {
        handle: u64,
    },
    /// Answered `Done` once every request the session published before it was taken: after
    /// it, the session's posted closes are applied.
    Barrier,
    Read {
        handle: u64,
        offset: u64,
        len: u32,
    },
    Write {
        handle: u64,
        offset: u64,
        data: Payload,
    },
    Append {
        handle: u64,
        data: Payload,
    },
    Fsync {
        handle: u64,
    },
    Fdatasync {
        handle: u64,
    },
    SetLen {
        handle: u64,
        len: u64,
    },
    Allocate {
        handle: u64,
        offset: u64,
        len: u64,
    },
    Fstat {
        handle: u64,
    },
    Lock {
        handle: u64,
        lock: LockArgs,
        wait: bool,
    },
    TestLock {
        handle: u64,
        lock: LockArgs,
    },
    Stat {
        path: String,
        follow: bool,
    },
    SetAttr {
        path: String,
        attr: SetAttr,
        follow: bool,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Rmdir {
        path: String,
    },
    Unlink {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Link {
        existing: String,
        new: String,
    },
    Symlink {
        target: String,
        path: String,
    },
    Readlink {
        path: String,
    },
    Truncate {
        path: String,
        len: u64,
    },
    /// Entries after `after` (by name), as many as fit in a frame.
    Readdir {
        path: String,
        after: Option<String>,
    },
    Sync,
    Statvfs,
    Space,
    Checkpoints,
    Snapshot {
        name: Option<String>,
    },
    SetSnapshot {
        number: u64,
        keep: bool,
    },
    ProtectionPeriod,
    Gc {
        target_free: f64,
    },
    Info,
    ViewOpen {
        number: u64,
    },
    ViewClose {
        view: u64,
    },
    ViewStat {
        view: u64,
        path: String,
    },
    ViewReaddir {
        view: u64,
        path: String,
        after: Option<String>,
    },
    ViewRead {
        view: u64,
        path: String,
        offset: u64,
        len: u32,
    },
    /// Reads at the description's offset and advances it.
    ReadOn {
        handle: u64,
        len: u32,
    },
    /// Writes at the description's offset (its end under `O_APPEND`) and advances it; answers
    /// the offset the data went to.
    WriteOn {
        handle: u64,
        data: Payload,
    },
    /// `lseek`: `whence` 0 (start), 1 (offset), 2 (end); answers the new offset.
    Seek {
        handle: u64,
        offset: i64,
        whence: u8,
    },
    /// Sets the description's status flags (Linux's bits; the server acts on `O_APPEND`).
    SetStatus {
        handle: u64,
        status: u32,
    },
    /// The description's status flags.
    GetStatus {
        handle: u64,
    },
    /// Keeps descriptions alive for another session to adopt; each with the client's note.
    /// Answers the hold's token.
    Hold {
        items: Vec<(u64, String)>,
    },
    /// Ties a hold to the process that will adopt it: it is dropped if that process exits.
    HoldFor {
        token: u64,
        pid: i32,
    },
    /// Takes over a hold's descriptions under their handles (answers `Held`).
    Adopt {
        token: u64,
    },
    /// Drops a hold.
    Release {
        token: u64,
    },
    /// `fchmod`, `fchown`, `futimens` on a handle.
    FsetAttr {
        handle: u64,
        attr: SetAttr,
    },
    /// The lease table (and the pool) read-only, their descriptors on the socket (`lease.rs`).
    LeaseTable,
    /// `Stat` with the words the answer depends on.
    StatLeased {
        path: String,
        follow: bool,
    },
    /// `Fstat` with the words the answer depends on.
    FstatLeased {
        handle: u64,
    },
    /// `Read`, with the blocks around it as a data lease when the client may read the pool.
    ReadLeased {
        handle: u64,
        offset: u64,
        len: u32,
    },
    /// The memory of the handle's inode shared by every process that maps it: `op` 0 attach
    /// (answers the server's descriptor number of it), 1 write it back into the pool, 2 let go
    /// of it once (written back; dropped after its last user).
    SharedMemory {
        handle: u64,
        op: u8,
    },
    /// `mknod`: a FIFO, socket, device or empty regular file; `mode` carries the type bits.
    Mknod {
        path: String,
        mode: u32,
        rdev: u32,
    },
}

/// A write's data, or a leased read's. Decoded on the server, a write's data is the tail of the
/// request's frame body, kept in place: the body was copied once out of the client's ring (or,
/// when the data lay in the request data area, is read there), and its data is not copied again
/// before the engine takes it. Decoded on the client, a leased read's data stays in the
/// completion's body until it is copied to the caller's buffer.
#[derive(Clone, Default)]
pub struct Payload {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The data, when it lies in a session's request data area (`buf` is then empty).
    lent: Option<super::ring::Lent>,
    /// `buf` is a server thread's read buffer, lent to a reply: it goes back to the thread
    /// that drops the reply, not to the frame buffers.
    scratch: bool,
}

impl Payload {
    /// The bytes of `buf` from `start` on (none if `start` is past its end).
    pub(super) fn tail_of(buf: Vec<u8>, start: usize) -> Payload {
        let end = buf.len();
        Payload {
            buf,
            start,
            end,
            lent: None,
            scratch: false,
        }
    }

    /// The bytes of `buf` in `start..end` (none if that is not a range within it).
    pub(super) fn range_of(buf: Vec<u8>, start: usize, end: usize) -> Payload {
        Payload {
            buf,
            start,
            end,
            lent: None,
            scratch: false,
        }
    }

    /// Data left in a session's request data area, read where it lies.
    pub(super) fn lent(lent: super::ring::Lent) -> Payload {
        Payload {
            buf: Vec::new(),
            start: 0,
            end: 0,
            lent: Some(lent),
            scratch: false,
        }
    }

    /// The first `n` bytes of a server thread's read buffer `buf` (all of it, kept whole, goes
    /// back to the thread that drops this: `scratch::give`).
    pub(super) fn scratch(buf: Vec<u8>, n: usize) -> Payload {
        Payload {
            end: n.min(buf.len()),
            buf,
            start: 0,
            lent: None,
            scratch: true,
        }
    }

    /// Whether the data is read where it lies in a request data area (not copied).
    pub fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.lent {
            Some(l) => l.bytes(),
            None => self.buf.get(self.start..self.end).unwrap_or(&[]),
        }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if self.scratch {
            super::scratch::give(buf);
        } else {
            // A frame's buffer, large when it carried data: kept for the thread's next frame.
            super::ring::give_spare(buf);
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(buf: Vec<u8>) -> Payload {
        let end = buf.len();
        Payload {
            buf,
            start: 0,
            end,
            lent: None,
            scratch: false,
        }
    }
}

impl From<&[u8]> for Payload {
    fn from(b: &[u8]) -> Payload {
        Payload::from(b.to_vec())
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// One adopted description: its handle, inode, offset and the note it was held with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub handle: u64,
    pub ino: u64,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Hello {
        version: u16,
        features: u64,
        server_pid: u32,
        session: u64,
    },
    Done,
    Opened {
        handle: u64,
        ino: u64,
    },
    OpenedStat {
        handle: u64,
        ino: u64,
        stat: LeasedStat,
    },
    Data(Vec<u8>),
    Number(u64),
    Stat(Stat),
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    Text(String),
    StatVfs(StatVfs),
    Space(SpaceReport),
    Checkpoints(Vec<CheckpointInfo>),
    Gc(GcReport),
    Lock(Option<LockHolder>),
    Info(Box<PoolInfo>),
    Held(Vec<Adopted>),
    LeaseTable(LeaseTableInfo),
    LeasedStat(LeasedStat),
    LeasedData {
        data: Payload,
        lease: Option<DataLease>,
    },
}
