//! The listening side: the socket, the accept loop, the table of live sessions, and stopping.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::lease_server::LeaseTable;
use super::observe::{Change, Observer};
use super::shared::{SessionEntry, Shared};
use crate::sched::clients::ClientTenants;
use crate::sched::SchedDevice;
use crate::sys::sock::{peer_cred, PeerCred};
use crate::tbfs::Fs;

/// How a server lets clients in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerOptions {
    /// Any local user may connect (socket mode 0666); otherwise only `owner`'s user and root
    /// (mode 0600, checked again against each peer's credentials).
    pub allow_other: bool,
    /// The socket's owner (user, group): the pool file's. `None`: the server's own.
    pub owner: Option<(u32, u32)>,
    /// Refuse the shared-memory rings: every session's requests travel on its socket.
    pub no_ring: bool,
    /// Grant no leases (`lease.rs`): a front end in the same process that changes the pool
    /// itself, not through a session, sets this, since its changes raise no lease's word.
    pub no_leases: bool,
}

/// The pool server: start it on an open pool with [`Server::start`].
#[derive(Debug)]
pub struct Server;

/// A running server. [`ServerHandle::stop`] (or dropping it) stops accepting, ends every
/// session as if its client had gone (closing its files and releasing its locks) and removes
/// the socket. It does not sync or close the pool: its owner does.
pub struct ServerHandle {
    shared: Arc<Shared>,
    socket: PathBuf,
    /// The FIFO directory this server made, removed when it stops.
    fifos: Option<PathBuf>,
    /// A second handle on the listening socket, shut down to wake the accept loop.
    listener: UnixListener,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Listens on `socket` for clients of `fs`, each served by a session on threads of its own.
    /// Refuses (`AddrInUse`) when a server already answers on `socket`; a socket file left by
    /// a server that died is replaced.
    pub fn start(fs: Arc<Fs>, socket: &Path, opts: ServerOptions) -> io::Result<ServerHandle> {
        Server::start_observed(fs, socket, opts, None)
    }

    /// [`Server::start`], with `observer` told of every change a client makes, once made.
    pub fn start_observed(
        fs: Arc<Fs>,
        socket: &Path,
        opts: ServerOptions,
        observer: Option<Observer>,
    ) -> io::Result<ServerHandle> {
        if let Ok(meta) = std::fs::symlink_metadata(socket) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: exists and is not a socket", socket.display()),
                ));
            }
            if UnixStream::connect(socket).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: a pool server already answers there", socket.display()),
                ));
            }
            std::fs::remove_file(socket)?;
        }
        let listener = bind_private(socket, opts)?;
        let fifos = make_fifo_dir(socket, opts)?;
        let server_ids = crate::sys::proc::effective_ids();
        let leases = if opts.no_leases {
            None
        } else {
            match LeaseTable::new(&fs) {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    eprintln!("tailbound serve: no leases: {e}");
                    None
                }
            }
        };
        // A front end in this process that watches the sessions' changes (FUSE) changes the
        // pool beside them too: a removal there cannot raise the closes words.
        let posts_closes = !opts.no_ring && observer.is_none();
        let observer = match &leases {
            None => observer,
            Some(t) => {
                fs.watch(t.clone());
                let t = t.clone();
                let chained: Observer = Arc::new(move |c: &Change<'_>| {
                    t.observe(c);
                    if let Some(o) = &observer {
                        o(c);
                    }
                });
                Some(chained)
            }
        };
        // A pool behind a scheduler charges each client's requests to the client's tenant.
        let dev: &dyn std::any::Any = &**fs.inner.dev();
        let tenants = dev
            .downcast_ref::<SchedDevice>()
            .map(|d| ClientTenants::new(d.scheduler().clone()));
        let shared = Arc::new(Shared {
            fs,
            sessions: Mutex::new(HashMap::new()),
            ended: Condvar::new(),
            next_session: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            allowed_uid: (!opts.allow_other).then(|| opts.owner.map_or(server_ids.0, |o| o.0)),
            server_ids,
            owner_uid: opts.owner.map_or(server_ids.0, |o| o.0),
            observer,
            next_handle: AtomicU64::new(1),
            holds: Default::default(),
            rings: !opts.no_ring,
            leases,
            tenants,
            shmem: Default::default(),
            closes: Default::default(),
            posts_closes,
        });
        let for_loop = shared.clone();
        let second = listener.try_clone()?;
        let accept = std::thread::Builder::new()
            .name("tbfs-serve".into())
            .spawn(move || accept_loop(for_loop, listener))?;
        Ok(ServerHandle {
            shared,
            socket: socket.to_path_buf(),
            fifos,
            listener: second,
            accept: Some(accept),
        })
    }
}

/// Makes the FIFO directory ([`super::fifo_dir`]) of the pool `socket` serves, for the clients
/// this server lets in: only the owner's (mode 0700), or every user's (1733: anyone may make a
/// FIFO there, nobody may list them). `None` for a socket not named after its pool.
fn make_fifo_dir(socket: &Path, opts: ServerOptions) -> io::Result<Option<PathBuf>> {
    let Some(pool) = socket.to_str().and_then(|s| s.strip_suffix(".sock")) else {
        return Ok(None);
    };
    let dir = super::fifo_dir(Path::new(pool));
    let made = || -> io::Result<()> {
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            r => r?,
        }
        let mode = if opts.allow_other { 0o1733 } else { 0o700 };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
        if let Some((uid, gid)) = opts.owner {
            if (uid, gid) != crate::sys::proc::effective_ids() {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            }
        }
        Ok(())
    };
    made().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: making the FIFO directory: {e}", dir.display()),
        )
    })?;
    Ok(Some(dir))
}

/// Binds the socket under a temporary name, sets its mode and owner, then renames it into
/// place: no client can connect before its permissions are final.
fn bind_private(socket: &Path, opts: ServerOptions) -> io::Result<UnixListener> {
    let mut temp = socket.as_os_str().to_owned();
    temp.push(format!(".{}.new", std::process::id()));
    let temp = PathBuf::from(temp);
    let _ = std::fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: binding the socket: {e}", socket.display()),
        )
    })?;
    let finish = || -> io::Result<()> {
        let mode = if opts.allow_other { 0o666 } else { 0o600 };
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode))?;
        if let Some((uid, gid)) = opts.owner {
            if (uid, gid) != crate::sys::proc::effective_ids() {
                std::os::unix::fs::chown(&temp, Some(uid), Some(gid))?;
            }
        }
        std::fs::rename(&temp, socket)
    };
    if let Err(e) = finish() {
        let _ = std::fs::remove_file(&temp);
        return Err(io::Error::new(
            e.kind(),
            format!("{}: setting up the socket: {e}", socket.display()),
        ));
    }
    Ok(listener)
}

fn accept_loop(shared: Arc<Shared>, listener: UnixListener) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::Acquire) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(_) => {
                // Out of descriptors or memory: give the sessions a moment to let some go.
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let Ok(cred) = peer_cred(&stream) else {
            continue;
        };
        if !allowed(&shared, &cred) {
            // Closed unanswered: the socket's mode should have kept this peer out already.
            continue;
        }
        let Ok(second) = stream.try_clone() else {
            continue;
        };
        let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
        shared.sessions().insert(
            id,
            SessionEntry {
                stream: second,
                pid: cred.pid,
            },
        );
        let for_session = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tbfs-session-{id}"))
            .spawn(move || {
                super::dispatch::run(&for_session, stream, id, cred);
                for_session.sessions().remove(&id);
                for_session.ended.notify_all();
            });
        match spawned {
            Ok(t) => {
                let mut threads = shared.threads.lock().unwrap_or_else(|p| p.into_inner());
                // Threads of ended sessions are joined here, so the list stays as long as the
                // sessions open now.
                let (done, live): (Vec<_>, Vec<_>) =
                    threads.drain(..).partition(JoinHandle::is_finished);
                *threads = live;
                threads.push(t);
                drop(threads);
                for t in done {
                    let _ = t.join();
                }
            }
            Err(_) => {
                shared.sessions().remove(&id);
            }
        }
    }
}

fn allowed(shared: &Shared, cred: &PeerCred) -> bool {
    match shared.allowed_uid {
        None => true,
        Some(uid) => cred.uid == uid || cred.uid == 0,
    }
}

impl ServerHandle {
    /// The socket clients connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.shared.sessions().len()
    }

    /// The posted closes' side of the server (tests stall and watch it).
    #[cfg(test)]
    pub(super) fn closes(&self) -> &super::posted::Closes {
        &self.shared.closes
    }

    /// How many sessions have started since the server did.
    pub fn sessions_started(&self) -> u64 {
        self.shared.next_session.load(Ordering::Relaxed) - 1
    }

    /// Whether no session is open and no hold waits for a process to adopt it (a hold whose
    /// process has exited is dropped here).
    pub fn idle(&self) -> bool {
        let holds_left = self.shared.holds.sweep();
        self.shared.sessions().is_empty() && !holds_left
    }

    /// Stops the server (see [`ServerHandle`]) and waits for every session to end.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::Release);
        // The accept loop sleeps in accept(): shutting the socket down wakes it to see
        // `stopping`; a connection does too, should the shutdown fail.
        if crate::sys::sock::shutdown_listener(&self.listener).is_err() {
            let _ = UnixStream::connect(&self.socket);
        }
        let _ = accept.join();
        let _ = std::fs::remove_file(&self.socket);
        if let Some(dir) = &self.fifos {
            // The FIFOs hold no data; a process with one open keeps its pipe.
            let _ = std::fs::remove_dir_all(dir);
        }
        let mut sessions = self.shared.sessions();
        for s in sessions.values() {
            let _ = s.stream.shutdown(std::net::Shutdown::Both);
        }
        // A session waiting for a lock ends once the lock's holder (another session, ending
        // too) lets it go.
        while !sessions.is_empty() {
            sessions = self
                .shared
                .ended
                .wait(sessions)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(sessions);
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
        if let Some(t) = &self.shared.leases {
            let w: Arc<dyn crate::tbfs::Watcher> = t.clone();
            self.shared.fs.unwatch(&w);
            t.revoke_all();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}
