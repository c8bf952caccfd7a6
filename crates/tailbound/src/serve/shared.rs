//! What the accept loop and every session share: the pool, the table of live sessions, who may
//! connect, and the observer. The server builds it and keeps the table; a session reads it.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::descs::Holds;
use super::observe::Observer;
use super::posted::Closes;
use super::shmem::SharedFiles;
use crate::sched::clients::ClientTenants;
use crate::tbfs::Fs;

/// A live session as the server sees it.
pub(super) struct SessionEntry {
    /// A second handle on the session's socket, to end the session from outside.
    pub stream: UnixStream,
    pub pid: i32,
}

/// What the accept loop and every session share.
pub(super) struct Shared {
    pub fs: Arc<Fs>,
    pub sessions: Mutex<HashMap<u64, SessionEntry>>,
    /// Signalled when a session ends.
    pub ended: Condvar,
    pub next_session: AtomicU64,
    pub stopping: AtomicBool,
    /// Every session thread not yet joined: stopping joins them, so none holds the pool after.
    pub threads: Mutex<Vec<JoinHandle<()>>>,
    /// The user allowed in besides root (`None`: everyone).
    pub allowed_uid: Option<u32>,
    /// The server's effective user and group: files a client of another user creates are
    /// given to that user.
    pub server_ids: (u32, u32),
    /// The pool's owner: who besides root may take snapshots and clean.
    pub owner_uid: u32,
    /// Told of every change a session makes (a FUSE mount of the same pool drops its caches).
    pub observer: Option<Observer>,
    /// The next description handle: handles are the server's, the same in every session.
    pub next_handle: AtomicU64,
    /// Descriptions held for a forked child or an exec'd image to adopt.
    pub holds: Holds,
    /// Sessions may move to the shared-memory rings (`hello`'s feature bit).
    pub rings: bool,
    /// The lease table, when the server grants leases (`lease_server.rs`).
    pub leases: Option<Arc<super::lease_server::LeaseTable>>,
    /// Tenants of the pool's scheduler for the clients' requests (`None`: no scheduler).
    pub tenants: Option<ClientTenants>,
    /// The memory of files mapped `MAP_SHARED` by clients, by inode.
    pub shmem: SharedFiles,
    /// The sessions that may post closes, and what removals wait for (`posted.rs`).
    pub closes: Closes,
    /// Sessions on the rings may post closes: only where every name is removed through a
    /// session (no front end in this process changes the pool beside them).
    pub posts_closes: bool,
}

impl Shared {
    pub fn sessions(&self) -> MutexGuard<'_, HashMap<u64, SessionEntry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}
