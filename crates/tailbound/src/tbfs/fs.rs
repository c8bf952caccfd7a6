//! The public [`Fs`] / [`File`] API, and the background thread.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::tbfs::format::*;
use crate::tbfs::inode::*;
use crate::tbfs::limits::SYMLINK_HOPS_MAX;
use crate::tbfs::limits::*;
use crate::tbfs::namespace::{dir_entries, kind_in};
use crate::tbfs::state::{Engine, State, Wake};
use crate::tbfs::{
    AtimePolicy, Barrier, Config, DeviceRef, DirEntry, Error, FileKind, FsCounters, OpenFlags,
    OpenOptions, Ordering, RecoveryReport, Result, SetAttr, Stat, StatVfs, SyncMode,
};
use std::io::SeekFrom;

impl Engine {
    /// Makes one file durable: a checkpoint, or in relaxed ordering a data-only log when no
    /// metadata changed.
    pub fn sync_file(&self, cell: &InodeCell) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        self.check_usable()?;
        if self.config().ordering != Ordering::Strict
            && !m.changes.only_checkpoint_records(cell.ino)
        {
            // A data-only log's space check that would wait for the logs in flight waits with
            // `meta` let go; what follows is decided in the hold taken again.
            m = self.wait_for_room_outside(m, Self::data_log_blocks(cell))?;
            self.check_usable()?;
        }
        // Buffers another thread's commit sealed already stay in its logs: waited for below.
        let sealed = cell
            .lock()
            .dirty()
            .values()
            .filter_map(|d| d.sealed_in)
            .reduce(|a, b| (a.0.max(b.0), a.1 || b.1));
        // A data-only log is replayed onto the file as the newest checkpoint before it holds
        // it, so it serves unless the file itself changed since in a way only a checkpoint
        // records (its creation, a name or link, an attribute or size set: `ns_changed`).
        // Other files' pending changes are theirs to sync: a real-time writer's sync does not
        // become a checkpoint, which waits for every payload in flight, because another
        // process created a file.
        if self.config().ordering == Ordering::Strict || m.changes.only_checkpoint_records(cell.ino)
        {
            self.commit_checkpoint(&mut m)?;
        } else {
            match self.commit_data_log(&mut m, cell) {
                // The log would take the room the next checkpoint needs: a checkpoint, which
                // records this file too, is written in it instead.
                Err(Error::NoSpace(_)) => self.commit_checkpoint(&mut m)?,
                r => r?,
            }
        }
        self.refresh_or_hand_off(&mut m)?;
        // The newest checkpoint that wrote a change of the file only a checkpoint records (its
        // creation, a name, an attribute set), whoever sealed it: recovered only once its last
        // log is written. Waiting for later checkpoints too would wait for every payload
        // sealed before them, other writers' included: a checkpoint is written only once all
        // of those are.
        let newest = (
            cell.lock().ckpt_seq(),
            self.config().barrier != Barrier::Superblock,
        );
        // Durable once written: the log writer writes (and flushes) after `meta` is released.
        m.unlock_and_write()?;
        // A checkpoint counts only with every payload before it: all of them are waited for.
        self.wait_sealed(newest.0, newest.1, cell.ino, true)?;
        sealed.map_or(Ok(()), |(seq, flush)| {
            self.wait_sealed(seq, flush, cell.ino, false)
        })
    }

    pub fn sync_all(&self) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        self.check_usable()?;
        self.refresh_superblock(&mut m)?;
        m.unlock_and_write()
    }

    /// The sync a close makes: its checkpoint is the last before the next open, so it keeps
    /// only a checkpoint's floor of room (`Engine::checkpoint_floor`): nothing is written after
    /// it but the superblock, and recovery's checkpoint keeps nothing.
    pub(crate) fn sync_to_close(&self) -> Result<()> {
        self.check_writable()?;
        let mut m = self.lock_meta();
        self.check_usable()?;
        m.ckpt.set_closing(true);
        let refreshed = self.refresh_superblock(&mut m);
        m.ckpt.set_closing(false);
        refreshed?;
        m.unlock_and_write()
    }
}

/// An open pool. Cheap to clone; all clones share one file tree. Thread-safe.
#[derive(Clone, Debug)]
pub struct Fs {
    pub(crate) inner: Arc<Engine>,
}

/// An open file. Dropping it closes it.
#[derive(Debug)]
pub struct File {
    inner: Arc<Engine>,
    cell: Arc<InodeCell>,
    flags: OpenFlags,
    pos: u64,
}

impl Fs {
    /// Makes a new, empty pool on `dev` (destroying what was there) and opens it.
    pub fn format(dev: DeviceRef, config: &Config) -> Result<Fs> {
        let inner = super::commit::open::format(dev, config)?;
        Ok(Fs::start(inner))
    }

    /// Opens an existing pool, recovering it: newest valid superblock, its checkpoint,
    /// roll-forward over the logs after it, and a fresh checkpoint.
    pub fn open(dev: DeviceRef, options: &OpenOptions) -> Result<Fs> {
        let inner = super::commit::open::open(dev, options)?;
        Ok(Fs::start(inner))
    }

    pub(crate) fn start(inner: Arc<Engine>) -> Fs {
        // A panic in any thread using the pool then names its site when it poisons the pool.
        crate::panics::install_hook();
        // Recovery's checkpoint ran before `meta` was a lock: only holds count.
        inner.stats.reset_sections();
        if !inner.read_only() {
            let period = [
                inner.config().checkpoint_every,
                Some(inner.config().superblock_every),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(5))
            .min(if inner.config().background_gc {
                // The cleaner looks at the free space this often.
                Duration::from_millis(100)
            } else {
                Duration::MAX
            })
            .max(Duration::from_millis(10));
            let weak = Arc::downgrade(&inner);
            let wake = inner.waker();
            let handle = std::thread::Builder::new()
                .name("tbfs-checkpoint".into())
                .spawn(move || {
                    // A panic poisons the pool, naming its site, instead of ending the thread
                    // unseen (the cleaner would stop, and writers would find no space).
                    let run = crate::panics::catch(|| background(weak.clone(), wake, period));
                    if let (Err(p), Some(inner)) = (run, weak.upgrade()) {
                        inner.poison_reason(format!("the background thread {p}"));
                    }
                })
                .ok();
            inner.set_background(handle);
        }
        Fs { inner }
    }

    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.stats.report()
    }

    /// The advisory lock table every handle to this pool shares (POSIX, OFD and `flock` locks,
    /// see [`super::locks`]).
    pub fn locks(&self) -> &super::locks::LockTable {
        &self.inner.locks
    }

    /// The configuration in effect.
    pub fn config(&self) -> Config {
        self.inner.config().clone()
    }

    pub fn counters(&self) -> FsCounters {
        self.inner.stats.counters()
    }

    /// Where the pool's blocks are now ([`SpaceCensus`](crate::tbfs::SpaceCensus)). Walks the
    /// whole tree under the metadata lock: for benchmarks and tests, not a hot path.
    pub fn space_census(&self) -> Result<crate::tbfs::SpaceCensus> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        Ok(self.inner.census(&m))
    }

    /// Writes by tenant: bytes, and the time their writers waited for `meta`, cleaned inline
    /// and waited for their payloads, since the pool was opened. Counted only in a pool behind
    /// a scheduler, where writes are charged to tenants.
    pub fn tenant_writes(&self) -> Vec<crate::tbfs::TenantWrites> {
        self.inner.writes.snapshot()
    }

    pub fn open_file(&self, path: &str, flags: OpenFlags) -> Result<File> {
        self.open_file_after_links(path, flags, 0)
    }

    /// `open_file`, `links` dangling symbolic links into a create already (see
    /// [`Fs::create_through_link`]).
    fn open_file_after_links(&self, path: &str, flags: OpenFlags, links: u32) -> Result<File> {
        let inner = &self.inner;
        inner.check_usable()?;
        if (flags.write || flags.create || flags.truncate) && inner.read_only() {
            return Err(Error::ReadOnly(path.to_string()));
        }
        let cell = match self.open_cached(path, flags)? {
            Some(cell) => cell,
            None => {
                // The new file's owner, asked of the kernel before `meta` is taken: a system
                // call under the lock is a point where its holder may be preempted.
                let owner = flags.create.then(crate::sys::proc::effective_ids);
                let mut m = inner.lock_meta();
                let create = |m: &mut State, parent: u64, name: &str| {
                    let owner = owner.unwrap_or_else(crate::sys::proc::effective_ids);
                    inner.create_inode(m, parent, name, FileKind::File, flags.mode, owner)
                };
                // Most creates name a new file: one walk to its directory, rather than a walk
                // to the file that fails at its last name and a second one to the directory.
                // Anything else (the name exists, or is `.` or `..`) takes the full walk.
                let new = flags
                    .create
                    .then(|| inner.parent_of_traced(&m.dirs, &m.inodes, path).ok())
                    .flatten()
                    .filter(|&(parent, name, _)| {
                        m.dirs.get(parent).is_some_and(|d| !d.contains_key(name))
                    });
                let (cell, plain) = match new {
                    Some((parent, name, plain)) => (create(&mut m, parent, name)?, plain),
                    None => match inner.resolve_traced(&m.dirs, &m.inodes, path, true) {
                        Ok((ino, plain)) => {
                            if flags.create && flags.exclusive {
                                return Err(Error::Exists(path.to_string()));
                            }
                            (inner.cell(&m.inodes, ino)?, plain)
                        }
                        // A dangling symbolic link at the last name (POSIX): with O_EXCL it
                        // is there (`EEXIST`); without, the file is made where it points.
                        Err(Error::NotFound(_))
                            if flags.create
                                && inner
                                    .resolve_traced(&m.dirs, &m.inodes, path, false)
                                    .is_ok() =>
                        {
                            if flags.exclusive {
                                return Err(Error::Exists(path.to_string()));
                            }
                            drop(m);
                            return self.create_through_link(path, flags, links);
                        }
                        Err(Error::NotFound(_)) if flags.create => {
                            let (parent, name, plain) =
                                inner.parent_of_traced(&m.dirs, &m.inodes, path)?;
                            (create(&mut m, parent, name)?, plain)
                        }
                        Err(e) => return Err(e),
                    },
                };
                inner.remember(path, plain, &cell);
                {
                    let mut st = cell.lock();
                    if st.kind() == FileKind::Dir && (flags.write || flags.truncate) {
                        return Err(Error::IsDir(path.to_string()));
                    }
                    st.open_handle(cell.ino)?;
                }
                drop(m);
                cell
            }
        };
        let file = File {
            inner: inner.clone(),
            cell,
            flags,
            pos: 0,
        };
        if flags.truncate && flags.write && file.cell.lock().size() > 0 {
            inner.set_len(&file.cell, 0)?;
        }
        Ok(file)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.inner.check_writable()?;
        let owner = crate::sys::proc::effective_ids();
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m.dirs, &m.inodes, path)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(path.to_string()));
        }
        self.inner
            .create_inode(&mut m, parent, name, FileKind::Dir, mode, owner)?;
        Ok(())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m.dirs, &m.inodes, path)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(path.to_string()));
        };
        if !is_dir {
            return Err(Error::NotDir(path.to_string()));
        }
        if !m.dirs[&ino].is_empty() {
            return Err(Error::NotEmpty(path.to_string()));
        }
        self.inner.pay_deletes_debt_first(&mut m, &[parent])?;
        self.inner.names.dirs_changed();
        m.dirs.remove_entry(parent, name);
        if let Some(p) = m.inodes.get(parent) {
            self.inner.drop_nlink(&mut p.lock(), parent)?;
        }
        self.inner.touch_dir(&mut m, parent);
        self.inner.drop_link(&mut m, ino)?;
        self.inner.settle_deletes_debt(&mut m)
    }

    /// Removes the name now; the inode is freed when the last open handle closes.
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m.dirs, &m.inodes, path)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(path.to_string()));
        };
        if is_dir {
            return Err(Error::IsDir(path.to_string()));
        }
        self.inner.pay_deletes_debt_first(&mut m, &[parent])?;
        m.dirs.remove_entry(parent, name);
        self.inner.touch_dir(&mut m, parent);
        self.inner.drop_link(&mut m, ino)?;
        self.inner.settle_deletes_debt(&mut m)
    }

    /// Atomically renames, replacing an existing file (or empty directory) at `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        let (src_parent, src_name) = inner.parent_of(&m.dirs, &m.inodes, from)?;
        let (dst_parent, dst_name) = inner.parent_of(&m.dirs, &m.inodes, to)?;
        let what = |dst: bool| if dst { to } else { from }.to_string();
        inner.rename_entry(
            &mut m,
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            super::RenameMode::Replace,
            &what,
        )
    }

    pub fn stat(&self, path: &str) -> Result<Stat> {
        self.stat_at(path, true)
    }

    /// `stat` (`follow`) or `lstat`: from the path cache when it holds the path.
    fn stat_at(&self, path: &str, follow: bool) -> Result<Stat> {
        self.inner.check_usable()?;
        if let Some(hit) = self.inner.names.get(path) {
            let valid = hit.valid(&hit.cell.lock(), &self.inner.names);
            if valid {
                return self.inner.stat_cell(&hit.cell);
            }
            self.inner.names.forget(path);
        }
        let m = self.inner.lock_meta();
        let (ino, plain) = self
            .inner
            .resolve_traced(&m.dirs, &m.inodes, path, follow)?;
        let cell = self.inner.cell(&m.inodes, ino)?;
        self.inner.remember(path, plain, &cell);
        drop(m);
        self.inner.stat_cell(&cell)
    }

    /// `open_file` with `O_CREAT` (not `O_EXCL`) of `path`, whose last name is a dangling
    /// symbolic link: the file is made where the link points, as the kernel does (a chain of
    /// such links followed up to [`SYMLINK_HOPS_MAX`], as the kernel's).
    fn create_through_link(&self, path: &str, flags: OpenFlags, links: u32) -> Result<File> {
        if links >= SYMLINK_HOPS_MAX {
            return Err(Error::Loop(path.to_string()));
        }
        let target = self.readlink(path)?;
        let next = if target.starts_with('/') {
            target
        } else {
            let dir = path.trim_end_matches('/');
            let dir = &dir[..dir.rfind('/').map_or(0, |i| i)];
            format!("{dir}/{target}")
        };
        self.open_file_after_links(&next, flags, links + 1)
    }

    /// `open_file` of a path the path cache holds, without `meta`: `None` sends it the long way
    /// (not cached, or stale). A truncation follows in `open_file`, as after any open.
    fn open_cached(&self, path: &str, flags: OpenFlags) -> Result<Option<Arc<InodeCell>>> {
        let Some(hit) = self.inner.names.get(path) else {
            return Ok(None);
        };
        let mut st = hit.cell.lock();
        if !hit.valid(&st, &self.inner.names) {
            drop(st);
            self.inner.names.forget(path);
            return Ok(None);
        }
        if flags.create && flags.exclusive {
            return Err(Error::Exists(path.to_string()));
        }
        if st.kind() == FileKind::Dir && (flags.write || flags.truncate) {
            return Err(Error::IsDir(path.to_string()));
        }
        st.open_handle(hit.cell.ino)?;
        drop(st);
        Ok(Some(hit.cell))
    }

    /// Changes a file's or directory's attributes (chmod, chown, utimens), following a
    /// symbolic link.
    pub fn set_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.set_attr_at(path, attr, true)
    }

    /// Like [`Fs::set_attr`], but changes a symbolic link itself (lchown, `AT_SYMLINK_NOFOLLOW`).
    pub fn lset_attr(&self, path: &str, attr: &SetAttr) -> Result<()> {
        self.set_attr_at(path, attr, false)
    }

    fn set_attr_at(&self, path: &str, attr: &SetAttr, follow: bool) -> Result<()> {
        self.inner.check_writable()?;
        let cell = {
            let m = self.inner.lock_meta();
            let ino = self.inner.resolve(&m.dirs, &m.inodes, path, follow)?;
            self.inner.cell(&m.inodes, ino)?
        };
        self.inner.set_attr(&cell, attr)
    }

    /// When reads update access times, from now on in this process (default: relatime).
    pub fn set_atime_policy(&self, policy: AtimePolicy) {
        self.inner.set_atime_policy(policy);
    }

    /// Whether reads set access times on every read ([`AtimePolicy::Strict`]).
    pub fn atime_strict(&self) -> bool {
        self.inner.atime_policy() == AtimePolicy::Strict as u8
    }

    /// Tells `w` of segments written again and access times reads set, until
    /// [`Fs::unwatch`].
    pub fn watch(&self, w: Arc<dyn super::Watcher>) {
        self.inner.watchers.add(w);
    }

    pub fn unwatch(&self, w: &Arc<dyn super::Watcher>) {
        self.inner.watchers.remove(w);
    }

    /// Like [`Fs::stat`], but a symbolic link is described itself, not followed.
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        self.stat_at(path, false)
    }

    /// Makes a symbolic link at `path` to `target` (stored as given).
    pub fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.inner.check_writable()?;
        if target.is_empty() || target.len() > 4095 {
            return Err(Error::Invalid(format!(
                "{path}: link target of {} bytes",
                target.len()
            )));
        }
        let owner = crate::sys::proc::effective_ids();
        let mut m = self.inner.lock_meta();
        let (parent, name) = self.inner.parent_of(&m.dirs, &m.inodes, path)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(path.to_string()));
        }
        let cell =
            self.inner
                .create_inode(&mut m, parent, name, FileKind::Symlink, 0o777, owner)?;
        drop(m);
        self.inner.pwrite(&cell, target.as_bytes(), 0, false)?;
        Ok(())
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<String> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let ino = self.inner.resolve(&m.dirs, &m.inodes, path, false)?;
        let cell = self.inner.cell(&m.inodes, ino)?;
        drop(m);
        if cell.lock().kind() != FileKind::Symlink {
            return Err(Error::Invalid(format!("{path}: not a symbolic link")));
        }
        self.inner.link_target(&cell)
    }

    /// Makes `new` another name of the file at `existing` (a hard link; not for directories).
    pub fn link(&self, existing: &str, new: &str) -> Result<()> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let ino = self.inner.resolve(&m.dirs, &m.inodes, existing, false)?;
        let cell = self.inner.cell(&m.inodes, ino)?;
        if cell.lock().kind() == FileKind::Dir {
            return Err(Error::NotPermitted(format!(
                "{existing}: a hard link to a directory"
            )));
        }
        let (parent, name) = self.inner.parent_of(&m.dirs, &m.inodes, new)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(new.to_string()));
        }
        self.inner.make_room_for_change(&mut m, parent)?;
        {
            let mut st = cell.lock();
            st.add_link(ino)?;
            st.set_ctime_ns(self.inner.now_ns());
        }
        m.dirs.insert_entry(parent, name, ino, false);
        self.inner.touch_dir(&mut m, parent);
        m.namespace_changed(ino);
        Ok(())
    }

    /// Where this pool is mounted in the process's paths, for absolute symbolic link targets:
    /// `/mnt/fast/x` then resolves to `/x` in the pool. `None` (the default): absolute targets
    /// start at the pool's root.
    pub fn set_mount_point(&self, mount: Option<&str>) {
        *self.inner.mount_point() = mount.map(|s| s.trim_end_matches('/').to_string());
    }

    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        self.inner.check_writable()?;
        let cell = {
            let m = self.inner.lock_meta();
            let ino = self.inner.lookup(&m.dirs, &m.inodes, path)?;
            self.inner.cell(&m.inodes, ino)?
        };
        self.inner.set_len(&cell, len)
    }

    /// Entries of a directory, sorted by name, without `.` and `..`.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let ino = self.inner.lookup(&m.dirs, &m.inodes, path)?;
        let Some(entries) = m.dirs.get(ino) else {
            return Err(Error::NotDir(path.to_string()));
        };
        Ok(dir_entries(entries, |ino| kind_in(&m.inodes, ino)))
    }

    pub fn statvfs(&self) -> Result<StatVfs> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let total = self.inner.segment_blocks() * self.inner.segment_count();
        // What can really be written (`SpaceReport::available`), not what is not live.
        let available = self.inner.space_report(&m).available / BLOCK_U64;
        // The report may have found the counts it adds up wrong (`Engine::space_report`).
        self.inner.check_not_poisoned()?;
        Ok(StatVfs {
            block_size: BLOCK_U64,
            blocks: total,
            blocks_free: available,
            files: m.inodes.len() as u64,
            name_max: NAME_MAX as u64,
        })
    }

    /// Writes all buffered data and a checkpoint, and makes them durable (like `syncfs`).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Syncs, stops background work and releases the device. Later calls on clones fail.
    pub fn close(self) -> Result<()> {
        let result = if self.inner.read_only() {
            self.inner.check_usable()
        } else {
            self.inner.sync_to_close()
        };
        self.inner.mark_closed();
        self.inner.stop_background();
        result
    }
}

/// Writes checkpoints and refreshes the superblock on the configured schedule. Holds the pool only
/// while it works, so dropping the last handle drops the pool at once.
pub(crate) fn background(weak: Weak<Engine>, wake: Arc<(Mutex<Wake>, Condvar)>, period: Duration) {
    // Background checkpoints and cleaning are idle-class I/O (in the kernel, and in `sched` through the
    // thread's ioprio); a thread that waits for one lends it its own priority (`lock_meta`).
    let _ = crate::sched::Prio {
        class: crate::sched::Class::Idle,
        level: crate::sched::LEVEL_MAX,
    }
    .apply_to_current_thread();
    // The periodic work is due this long after it last ran, however often writers wake the
    // thread for their logs meanwhile.
    let mut last_periodic = Instant::now();
    loop {
        let refresh_asked;
        {
            let (lock, cv) = &*wake;
            let why = lock.lock().unwrap_or_else(|p| p.into_inner());
            // Saturating: once the period has passed, the periodic work is due now.
            let (mut why, _) = cv
                .wait_timeout_while(why, period.saturating_sub(last_periodic.elapsed()), |w| {
                    !w.stop && !w.logs && !w.clean && !w.refresh
                })
                .unwrap_or_else(|p| p.into_inner());
            if why.stop {
                return;
            }
            let logs = std::mem::take(&mut why.logs);
            let clean = std::mem::take(&mut why.clean);
            let refresh = std::mem::take(&mut why.refresh);
            refresh_asked = refresh;
            drop(why);
            if logs {
                // A writer sealed a superblock, or left its logs, and went on: write them (and
                // what is before them) here, without `meta`, so no writer waits for their
                // turns in the device or their flushes.
                let Some(inner) = weak.upgrade() else { return };
                if inner.write_logs_until(u64::MAX).is_err() {
                    return;
                }
                if inner.write_handed_off_superblocks().is_err() {
                    return;
                }
                if last_periodic.elapsed() < period && !clean && !refresh {
                    continue;
                }
            }
        }
        last_periodic = Instant::now();
        let Some(inner) = weak.upgrade() else { return };
        if inner.check_writable().is_err() {
            return;
        }
        let mut m = inner.lock_meta();
        crate::failpoint::hit("tbfs.background");
        // On a stepped clock, which moves only with the calls, timed work is theirs
        // (`Engine::refresh_or_hand_off`): it falls where they do, not where the machine's speed
        // puts this thread's wake-ups. Here only a refresh handed to this thread is done.
        let timed = inner.config().clock.is_wall();
        let due_checkpoint = timed
            && inner
                .config()
                .checkpoint_every
                .is_some_and(|every| m.ckpt.due(every, inner.config().clock.peek_ns()));
        let dirty = m.changes.any()
            || !inner
                .dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty();
        let result = if due_checkpoint && dirty {
            inner
                .commit_checkpoint(&mut m)
                .and_then(|()| inner.maybe_refresh(&mut m))
        } else if timed || refresh_asked {
            inner.maybe_refresh(&mut m)
        } else {
            Ok(())
        };
        let result = result.and_then(|()| m.unlock_and_write());
        let result = result.and_then(|()| {
            if inner.config().background_gc {
                inner.background_clean()
            } else {
                Ok(())
            }
        });
        // Cleaning that finds no room is not an error for the background; writers see it.
        let result = match result {
            Err(Error::NoSpace(_)) => Ok(()),
            other => other,
        };
        if let Err(e) = result {
            inner.poison(&e);
            return;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Dropped by a panic's unwinding: what is in memory cannot be trusted to write.
        self.poison_if_unwinding("a thread that dropped the pool's last handle");
        // A pool dropped without `close` still writes what it buffered, like a process exiting
        // after its last write; errors have nowhere to go.
        if !self.read_only() && !self.is_closed() && self.check_usable().is_ok() {
            let _ = self.sync_all();
        }
    }
}

impl File {
    /// A handle to `cell`, whose open count the caller raised (the count this handle drops).
    pub(super) fn of_cell(inner: Arc<Engine>, cell: Arc<InodeCell>, flags: OpenFlags) -> File {
        File {
            inner,
            cell,
            flags,
            pos: 0,
        }
    }

    pub fn ino(&self) -> u64 {
        self.cell.ino
    }

    /// The file's blocks from `first` (at most `count`) as the pool holds them
    /// (`Engine::lease_blocks`), `under_lock` called on them before any can move.
    pub fn lease_blocks(
        &self,
        first: u64,
        count: u64,
        under_lock: &mut dyn FnMut(&super::BlockLease),
    ) -> Result<super::BlockLease> {
        self.inner.check_usable()?;
        self.inner
            .lease_blocks(&self.cell, first, count, under_lock)
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.pread(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Writes at the position, or for a handle opened `append` at the end of the file, found
    /// under the inode lock as the bytes go in ([`File::append`]): appends through handles on
    /// several threads never overwrite each other, as on an `O_APPEND` descriptor.
    pub fn write(&mut self, buf: &[u8]) -> Result<usize> {
        if self.flags.append {
            self.pos = self.append(buf)?;
            return Ok(buf.len());
        }
        let n = self.pwrite(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.check_usable()?;
        if !self.flags.read {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for reading",
                self.cell.ino
            )));
        }
        if self.cell.lock().kind() == FileKind::Dir {
            return Err(Error::IsDir(format!("inode {}", self.cell.ino)));
        }
        self.inner.pread(&self.cell, buf, offset)
    }

    /// Writes `buf` at `offset`: buffered, or direct if the file was opened `direct`.
    pub fn pwrite(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.pwrite_as(buf, offset, self.flags.direct)
    }

    /// [`File::pwrite`], buffered or `direct` (`O_DIRECT`) whatever the open flags said: for a
    /// descriptor whose `O_DIRECT` `fcntl(F_SETFL)` changed. A direct write returns once its data
    /// is on the device, not flushed ([`OpenFlags::direct`]).
    pub fn pwrite_as(&self, buf: &[u8], offset: u64, direct: bool) -> Result<usize> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let n = self.inner.pwrite(&self.cell, buf, offset, direct)?;
        match self.flags.sync {
            SyncMode::None => {}
            SyncMode::Data | SyncMode::Full => self.inner.sync_file(&self.cell)?,
        }
        Ok(n)
    }

    /// Writes `buf` at the end of the file (whatever its size is now, also while other handles
    /// append) and returns the offset after it, like a `write` on an `O_APPEND` descriptor.
    pub fn append(&self, buf: &[u8]) -> Result<u64> {
        self.append_as(buf, self.flags.direct)
    }

    /// [`File::append`], buffered or `direct` whatever the open flags said ([`File::pwrite_as`]).
    pub fn append_as(&self, buf: &[u8], direct: bool) -> Result<u64> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let end = self.inner.append(&self.cell, buf, direct)?;
        match self.flags.sync {
            SyncMode::None => {}
            SyncMode::Data | SyncMode::Full => self.inner.sync_file(&self.cell)?,
        }
        Ok(end)
    }

    pub fn seek(&mut self, pos: SeekFrom) -> Result<u64> {
        let size = self.cell.lock().size();
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let target = target.ok_or_else(|| {
            Error::Invalid(format!("inode {}: seek before the start", self.cell.ino))
        })?;
        self.pos = target;
        Ok(target)
    }

    /// Makes the file's data and metadata durable.
    pub fn fsync(&self) -> Result<()> {
        self.inner.sync_file(&self.cell)
    }

    /// Makes the file's data (and the size needed to read it) durable.
    pub fn fdatasync(&self) -> Result<()> {
        self.inner.sync_file(&self.cell)
    }

    pub fn set_len(&self, len: u64) -> Result<()> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        self.inner.set_len(&self.cell, len)
    }

    /// Reserves space so writes in `offset..offset+len` do not fail for lack of it, and extends
    /// the size like `fallocate(mode 0)`. tbfs writes every block to a new place, so the
    /// reservation is a check that the pool has the room now.
    pub fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        if !self.flags.write {
            return Err(Error::BadHandle(format!(
                "inode {}: not open for writing",
                self.cell.ino
            )));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= FILE_BYTES_MAX && len > 0)
            .ok_or_else(|| {
                Error::Invalid(format!("inode {}: allocate {offset}+{len}", self.cell.ino))
            })?;
        let free = {
            let m = self.inner.lock_meta();
            self.inner.free_blocks(&m)
        };
        if len.div_ceil(BLOCK_U64) > free {
            return Err(Error::NoSpace(format!(
                "allocate of {len} bytes: {} bytes free",
                free * BLOCK_U64
            )));
        }
        if end > self.cell.lock().size() {
            self.inner.set_len(&self.cell, end)?;
        }
        Ok(())
    }

    pub fn stat(&self) -> Result<Stat> {
        self.inner.check_usable()?;
        self.inner.stat_cell(&self.cell)
    }

    /// Changes the open file's attributes (fchmod, fchown, futimens), whatever it was opened for.
    pub fn set_attr(&self, attr: &SetAttr) -> Result<()> {
        self.inner.set_attr(&self.cell, attr)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        self.inner.release(&self.cell);
    }
}
