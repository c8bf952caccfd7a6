//! Descriptors across processes, for mounts served by a pool server. A description's offset,
//! status flags and own locks live in the server, so handing a descriptor to another process is
//! handing it the description's handle:
//!
//! - fork: before it, the server is asked to *hold* every description the process has open (a
//!   token); the child connects its own session and adopts them under the same descriptor
//!   numbers; the parent ties the hold to the child's pid, so it goes if the child dies first.
//! - exec and spawn: the descriptions of descriptors without close-on-exec are held, their
//!   reserved kernel descriptors kept open across the exec, and the token (with the working
//!   directory when it is in a mount) passed to the new image in its environment; its shim
//!   adopts them at start, checking that each reserved descriptor survived.
//!
//! A mount whose pool is open in this process (the private mode) cannot be shared: a forked
//! child's calls on it fail with `EACCES`, and exec drops its descriptors, as before.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use tailbound::serve::RemoteFile;

use crate::real;
use crate::vfs::backend::Handle;
use crate::vfs::ofd::{lock, Ofd, VfsResult};
use crate::vfs::{FdEntry, Shim};

/// The environment variable that carries held descriptions to a new image: one
/// `TOKEN@MOUNT-PREFIX` a line.
pub const ADOPT_ENV: &str = "TAILBOUND_ADOPT";
/// The working directory (inside a mount) handed to a new image.
pub const CWD_ENV: &str = "TAILBOUND_CWD";

/// What a hand-over to a new image made: undone if the exec or spawn fails.
#[derive(Default)]
pub struct HandOver {
    /// `NAME=VALUE` entries for the new image's environment.
    pub env: Vec<String>,
    tokens: Vec<(usize, u64)>,
    /// Reserved descriptors made inheritable for the exec.
    opened: Vec<i32>,
}

impl Shim {
    /// `read` on a description whose offset is the server's (shared with other processes).
    pub(super) fn read_shared(&self, o: &Ofd, f: &RemoteFile, buf: &mut [u8]) -> VfsResult<usize> {
        Self::readable(o)?;
        if self.maps.backing_of(o.mount, o.ino).is_none() {
            // One request reads at the offset and advances it.
            return f.read_on(buf).map_err(|e| e.errno());
        }
        let at = f.seek(0, 1).map_err(|e| e.errno())?;
        let n = self.pread(o, buf, at)?;
        f.seek((at + n as u64) as i64, 0).map_err(|e| e.errno())?;
        Ok(n)
    }

    /// `write` on a description whose offset is the server's.
    pub(super) fn write_shared(&self, o: &Ofd, f: &RemoteFile, buf: &[u8]) -> VfsResult<usize> {
        if self.maps.backing_of(o.mount, o.ino).is_none() {
            // One request places the data and advances the shared offset.
            f.write_on(buf).map_err(|e| e.errno())?;
            return Ok(buf.len());
        }
        let end = if o.status.load(Ordering::Relaxed) & libc::O_APPEND != 0 {
            self.append(o, buf)?.0
        } else {
            let at = f.seek(0, 1).map_err(|e| e.errno())?;
            at + self.pwrite(o, buf, at)? as u64
        };
        let end = i64::try_from(end).map_err(|_| libc::EOVERFLOW)?;
        f.seek(end, 0).map_err(|e| e.errno())?;
        Ok(buf.len())
    }

    /// `lseek` on a description whose offset is the server's.
    pub(super) fn remote_seek(
        &self,
        o: &Ofd,
        f: &RemoteFile,
        off: i64,
        whence: i32,
    ) -> VfsResult<i64> {
        let errno = |e: tailbound::tbfs::Error| e.errno();
        let at = match whence {
            libc::SEEK_SET => f.seek(off, 0).map_err(errno)?,
            libc::SEEK_CUR => f.seek(off, 1).map_err(errno)?,
            libc::SEEK_END => match self.maps.backing_of(o.mount, o.ino) {
                Some(b) => {
                    let size = real::kernel_size(b.memfd)? as i64;
                    let t = size.checked_add(off).ok_or(libc::EOVERFLOW)?;
                    if t < 0 {
                        return Err(libc::EINVAL);
                    }
                    f.seek(t, 0).map_err(errno)?
                }
                None => f.seek(off, 2).map_err(errno)?,
            },
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let size = self.size(o)? as i64;
                if off < 0 || off >= size {
                    return Err(libc::ENXIO);
                }
                let t = if whence == libc::SEEK_DATA { off } else { size };
                f.seek(t, 0).map_err(errno)?
            }
            _ => return Err(libc::EINVAL),
        };
        i64::try_from(at).map_err(|_| libc::EOVERFLOW)
    }

    /// The library descriptors on served mounts, by mount (`inherited`: only those without
    /// close-on-exec).
    fn served_fds(&self, inherited: bool) -> HashMap<usize, Vec<(i32, Arc<Ofd>)>> {
        let mut out: HashMap<usize, Vec<(i32, Arc<Ofd>)>> = HashMap::new();
        if !self.any_fds() {
            return out;
        }
        let t = self.fds.read().unwrap_or_else(|p| p.into_inner());
        for (fd, e) in t.iter() {
            if e.ofd.file.remote().is_some() && !(inherited && e.cloexec) {
                out.entry(e.ofd.mount)
                    .or_default()
                    .push((*fd, e.ofd.clone()));
            }
        }
        out
    }

    /// Holds the descriptions of `fds` on mount number `mount`'s server, each noted with its
    /// descriptor. Each one's offset becomes the server's first (the process it goes to shares
    /// it); one whose offset cannot be handed over is left out, as a failed hold would be.
    fn hold(&self, m: usize, fds: &[(i32, Arc<Ofd>)]) -> Option<u64> {
        let remote = self.remote(m)?;
        let items = fds
            .iter()
            .filter_map(|(fd, o)| {
                let f = o.file.remote()?;
                o.share_offset().ok()?;
                Some((
                    f.handle(),
                    format!("{fd} {} {} {}", o.acc, o.dir as u8, o.abs),
                ))
            })
            .collect();
        remote.client().hold(items).ok()
    }

    /// The kernel descriptors the shim's server sessions use, sorted: a program's `close`,
    /// `close_range` or `closefrom` must leave them open (a child that closes every descriptor
    /// before its exec still hands its descriptions over through them).
    pub fn own_fds(&self) -> Vec<i32> {
        let mut fds: Vec<i32> = (0..self.mounts.len())
            .filter_map(|m| self.remote(m)?.fd())
            .collect();
        fds.sort_unstable();
        fds
    }

    /// Whether `fd` is one of [`Shim::own_fds`].
    pub fn is_own_fd(&self, fd: i32) -> bool {
        (0..self.mounts.len()).any(|m| self.remote(m).and_then(|r| r.fd()) == Some(fd))
    }

    // ---- fork ----

    /// Before a fork (`pthread_atfork`'s prepare): holds every served description.
    pub fn before_fork(&self) {
        let stale = std::mem::take(&mut *lock(&self.fork_holds));
        self.release_holds(&stale);
        let mut holds = Vec::new();
        for (m, fds) in self.served_fds(false) {
            if let Some(token) = self.hold(m, &fds) {
                holds.push((m, token));
            }
        }
        *lock(&self.fork_holds) = holds;
    }

    fn release_holds(&self, holds: &[(usize, u64)]) {
        for &(m, token) in holds {
            if let Some(r) = self.remote(m) {
                let _ = r.client().release(token);
            }
        }
    }

    /// Back in the parent from `fork` (`child` its pid, or `None` if the fork failed): each
    /// hold is tied to the child, whose adoption may have taken it already.
    pub fn after_fork_in_parent(&self, child: Option<i32>) {
        let holds = std::mem::take(&mut *lock(&self.fork_holds));
        match child {
            Some(pid) => {
                for &(m, token) in &holds {
                    if let Some(r) = self.remote(m) {
                        let _ = r.client().hold_for(token, pid);
                    }
                }
            }
            None => self.release_holds(&holds),
        }
    }

    /// In a forked child: a session of its own for each served mount, adopting the held
    /// descriptions under the same descriptor numbers. Descriptors of pools open in-process
    /// are closed, and those mounts refuse every later call with `EACCES`.
    pub fn after_fork_in_child(&self) {
        self.forked.store(true, Ordering::Relaxed);
        let holds = std::mem::take(&mut *lock(&self.fork_holds));
        // Each served mount's adopted files, by handle.
        let mut adopted: HashMap<(usize, u64), RemoteFile> = HashMap::new();
        let mut connected: HashMap<usize, tailbound::serve::Client> = HashMap::new();
        for m in 0..self.mounts.len() {
            let Some(r) = self.remote(m) else { continue };
            let Ok(client) = r.reconnect() else { continue };
            for &(hm, token) in &holds {
                if hm != m {
                    continue;
                }
                for (f, _) in client.adopt(token).unwrap_or_default() {
                    match adopted.entry((m, f.handle())) {
                        // A second descriptor of the same description (a dup): the session
                        // has the description once, and dropping this file would close it.
                        Entry::Occupied(_) => f.forget(),
                        Entry::Vacant(v) => {
                            v.insert(f);
                        }
                    }
                }
            }
            connected.insert(m, client);
        }
        let mut t = self.fds.write().unwrap_or_else(|p| p.into_inner());
        let fds: Vec<i32> = t.keys().copied().collect();
        let mut rebound: HashMap<*const Ofd, Arc<Ofd>> = HashMap::new();
        for fd in fds {
            let Some(e) = t.remove(&fd) else { continue };
            let key = Arc::as_ptr(&e.ofd);
            let new = match rebound.get(&key) {
                Some(n) => Some(n.clone()),
                None => e
                    .ofd
                    .file
                    .remote()
                    .and_then(|f| adopted.remove(&(e.ofd.mount, f.handle())))
                    .map(|f| {
                        let n = Arc::new(rebind(&e.ofd, f));
                        rebound.insert(key, n.clone());
                        n
                    }),
            };
            let cloexec = e.cloexec;
            // The old description is the parent's memory image, its file on the parent's
            // connection: leaked, never dropped (a drop would close it there).
            std::mem::forget(e);
            match new {
                Some(ofd) => {
                    t.insert(fd, FdEntry { ofd, cloexec });
                }
                None => real::release_fd(fd),
            }
        }
        self.nfds.store(t.len(), Ordering::Release);
        drop(t);
        // Adopted but no longer referred to here: closed in the child's session.
        drop(adopted);
        lock(&self.streams).retain(|_, fd| self.is_fd(*fd));
        real::forget_parked_in_child();
    }

    // ---- exec and spawn ----

    /// Before an exec or a spawn of a new image: holds the descriptions of served descriptors
    /// without close-on-exec (tied to `pid`, the process that will run the image), keeps their
    /// reserved descriptors open across the exec, and says in `env` what the new image adopts.
    ///
    /// `dup2s` are a spawn's `dup2` file actions, `(from, to)`: a library descriptor `from`
    /// arrives in the child as `to` (its reserved descriptor duplicated there by the kernel), so
    /// its description is held under `to` too, and what the parent has at `to` is not.
    pub fn hand_over(&self, pid: Option<i32>, dup2s: &[(i32, i32)]) -> HandOver {
        let mut h = HandOver::default();
        let mut lines = Vec::new();
        let mut by_mount = self.served_fds(true);
        let mut moved: HashMap<usize, Vec<(i32, Arc<Ofd>)>> = HashMap::new();
        for &(from, to) in dup2s {
            let Some(o) = self.ofd(from).filter(|o| o.file.remote().is_some()) else {
                continue;
            };
            for fds in by_mount.values_mut() {
                fds.retain(|(fd, _)| *fd != to);
            }
            by_mount.entry(o.mount).or_default();
            moved.entry(o.mount).or_default().push((to, o));
        }
        for (m, fds) in by_mount {
            let moved = moved.remove(&m).unwrap_or_default();
            let all: Vec<(i32, Arc<Ofd>)> = fds.iter().chain(&moved).cloned().collect();
            if all.is_empty() {
                continue;
            }
            let Some(token) = self.hold(m, &all) else {
                continue;
            };
            if let (Some(pid), Some(r)) = (pid, self.remote(m)) {
                let _ = r.client().hold_for(token, pid);
            }
            // Only the parent's own descriptors: a dup2's target is the kernel's doing in the
            // child.
            for (fd, _) in &fds {
                if real::set_kernel_cloexec(*fd, false).is_ok() {
                    h.opened.push(*fd);
                }
            }
            h.tokens.push((m, token));
            lines.push(format!("{token}@{}", self.mounts[m].prefix));
        }
        if !lines.is_empty() {
            h.env.push(format!("{ADOPT_ENV}={}", lines.join("\n")));
        }
        if let Some(cwd) = self.library_cwd() {
            h.env.push(format!("{CWD_ENV}={cwd}"));
        }
        h
    }

    /// A spawn started its child `pid`: the holds are the child's.
    pub fn handed_to(&self, h: &HandOver, pid: i32) {
        for &(m, token) in &h.tokens {
            if let Some(r) = self.remote(m) {
                let _ = r.client().hold_for(token, pid);
            }
        }
    }

    /// After a spawn (either way) or a failed exec: the reserved descriptors are close-on-exec
    /// again; `failed`: the holds are dropped.
    pub fn hand_over_done(&self, h: HandOver, failed: bool) {
        for fd in &h.opened {
            let _ = real::set_kernel_cloexec(*fd, true);
        }
        if failed {
            self.release_holds(&h.tokens);
        }
    }

    /// At start: the working directory and the descriptions a previous image handed over.
    pub(super) fn adopt_from_env(&self) {
        let adopt = std::env::var(ADOPT_ENV).ok();
        let cwd = std::env::var(CWD_ENV).ok();
        if adopt.is_none() && cwd.is_none() {
            return;
        }
        // Consumed: a later image started without the shim's knowledge must not take them.
        std::env::remove_var(ADOPT_ENV);
        std::env::remove_var(CWD_ENV);
        if let Some(c) = cwd.filter(|c| self.mount_of(c).is_some()) {
            *lock(&self.cwd) = Some(c);
        }
        for line in adopt.as_deref().unwrap_or("").lines() {
            let Some((token, prefix)) = line.split_once('@') else {
                continue;
            };
            let (Ok(token), Some(m)) = (
                token.parse::<u64>(),
                self.mounts.iter().position(|mt| mt.prefix == prefix),
            ) else {
                continue;
            };
            self.adopt(m, token);
        }
    }

    fn adopt(&self, m: usize, token: u64) {
        let Ok(pool) = self.fs(m) else { return };
        let Some(remote) = pool.remote() else { return };
        let Ok(held) = remote.client().adopt(token) else {
            return;
        };
        let mut by_handle: HashMap<u64, Arc<Ofd>> = HashMap::new();
        for (f, note) in held {
            let mut parts = note.splitn(4, ' ');
            let (Some(fd), Some(acc), Some(dir), Some(abs)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(fd), Ok(acc)) = (fd.parse::<i32>(), acc.parse::<i32>()) else {
                continue;
            };
            if self.mount_of(abs) != Some(m) || !real::adopt_reservation(fd) {
                // The descriptor did not survive the exec as the shim's (closed, or replaced
                // by a spawn's file actions).
                continue;
            }
            let handle = f.handle();
            let ofd = match by_handle.get(&handle) {
                Some(o) => {
                    // A second descriptor of the same description: one file is enough.
                    f.forget();
                    o.clone()
                }
                None => {
                    let status = f.status().unwrap_or(0) as i32;
                    let rel = abs[self.mounts[m].prefix.len()..]
                        .trim_start_matches('/')
                        .to_string();
                    let o = Arc::new(Ofd {
                        id: self.next_id.fetch_add(1, Ordering::Relaxed),
                        mount: m,
                        ino: f.ino(),
                        abs: abs.to_string(),
                        rel,
                        file: Handle::Remote(f),
                        dir: dir == "1",
                        acc,
                        status: AtomicI32::new(status),
                        pos: Mutex::new(0),
                        // Handed over: the previous image's process may still share it.
                        offset_shared: AtomicBool::new(true),
                        listing: Mutex::new(None),
                        fs: pool.clone(),
                    });
                    by_handle.insert(handle, o.clone());
                    o
                }
            };
            self.insert(fd, ofd, false);
        }
    }
}

/// A forked child's copy of a served description, on the child's own session.
fn rebind(o: &Ofd, f: RemoteFile) -> Ofd {
    Ofd {
        id: o.id,
        mount: o.mount,
        ino: o.ino,
        abs: o.abs.clone(),
        rel: o.rel.clone(),
        file: Handle::Remote(f),
        dir: o.dir,
        acc: o.acc,
        status: AtomicI32::new(o.status.load(Ordering::Relaxed)),
        pos: Mutex::new(*lock(&o.pos)),
        // Held before the fork, so the offset is the server's.
        offset_shared: AtomicBool::new(true),
        listing: Mutex::new(lock(&o.listing).clone()),
        fs: o.fs.clone(),
    }
}
