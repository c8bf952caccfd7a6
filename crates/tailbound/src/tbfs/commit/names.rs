//! Making, moving and removing names: a new inode under a directory, a directory's change, a
//! rename, and the calls by inode number that do them (`by_ino` holds the ones that only read).
//! A change of names touches the directories, the inodes and the changes (and may pay the
//! checkpoint debt first), so it is orchestration.

use std::sync::{Arc, Mutex};

use crate::tbfs::by_ino::{check_name, entry_name};
use crate::tbfs::directories::Directories;
use crate::tbfs::inode::*;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::namespace::{dir_of, parent_links};
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, File, FileKind, Fs, OpenFlags, RenameMode, Result, Stat};

impl Engine {
    /// Hands the directories and the inode table to `f` under `meta`: how the calls by inode
    /// number that only read the tree get the two parts they read.
    pub(in crate::tbfs) fn read_names<R>(
        &self,
        f: impl FnOnce(&Directories, &InodeTable) -> R,
    ) -> R {
        let m = self.lock_meta();
        f(&m.dirs, &m.inodes)
    }

    /// Adds a new inode to the tree under `parent`.
    pub fn create_inode(
        &self,
        m: &mut State,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        owner: (u32, u32),
    ) -> Result<Arc<InodeCell>> {
        self.make_room_for_change(m, parent)?;
        // A new directory's `..` links its parent, counted before anything is created so a
        // refusal leaves nothing half made.
        if kind == FileKind::Dir {
            if let Some(p) = m.inodes.get(parent) {
                p.lock().add_link(parent)?;
            }
        }
        let cell = m.inodes.create(|ino| InodeCell {
            ino,
            st: Mutex::new(InodeState::new(kind, mode, self.now_ns(), owner)),
        });
        let ino = cell.ino;
        if kind == FileKind::Dir {
            m.dirs.create(ino);
        }
        m.dirs
            .insert_entry(parent, name, ino, kind == FileKind::Dir);
        self.touch_dir(m, parent);
        m.namespace_changed(ino);
        Ok(cell)
    }

    pub fn touch_dir(&self, m: &mut State, dir: u64) {
        m.dirs.mark_dirty(dir);
        m.namespace_changed(dir);
        if let Some(c) = m.inodes.get(dir) {
            let mut st = c.lock();
            st.touch_modified(self.now_ns());
        }
    }

    /// A new inode named `name` in `parent`, which must not have that name yet.
    fn new_in(
        &self,
        m: &mut State,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        owner: (u32, u32),
    ) -> Result<Arc<InodeCell>> {
        check_name(parent, name)?;
        dir_of(&m.dirs, &m.inodes, parent)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(entry_name(parent, name)));
        }
        self.create_inode(m, parent, name, kind, mode, owner)
    }

    /// Renames `src_parent/src_name` to `dst_parent/dst_name` (`what` names the two in errors).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::tbfs) fn rename_entry(
        &self,
        m: &mut State,
        src_parent: u64,
        src_name: &str,
        dst_parent: u64,
        dst_name: &str,
        how: RenameMode,
        what: &dyn Fn(bool) -> String,
    ) -> Result<()> {
        let Some(&(ino, is_dir)) = m.dirs[&src_parent].get(src_name) else {
            return Err(Error::NotFound(what(false)));
        };
        let replaced = m.dirs[&dst_parent].get(dst_name).copied();
        match (how, replaced) {
            (RenameMode::NoReplace, Some(_)) => return Err(Error::Exists(what(true))),
            (RenameMode::Exchange, None) => return Err(Error::NotFound(what(true))),
            _ => {}
        }
        if src_parent == dst_parent && src_name == dst_name {
            return Ok(());
        }
        // A directory cannot move under itself; in an exchange, neither can the other one.
        let mut moving = vec![(ino, is_dir, dst_parent)];
        if let (RenameMode::Exchange, Some((other, other_dir))) = (how, replaced) {
            moving.push((other, other_dir, src_parent));
        }
        if moving.iter().any(|&(_, d, _)| d) {
            let parents = parent_links(&m.dirs);
            for &(dir, _, into) in moving.iter().filter(|&&(_, d, _)| d) {
                let mut probe = into;
                loop {
                    if probe == dir {
                        return Err(Error::Invalid(format!(
                            "{}: a directory cannot move into itself",
                            what(false)
                        )));
                    }
                    match parents.get(&probe) {
                        Some(&p) if probe != ROOT_INO => probe = p,
                        _ => break,
                    }
                }
            }
        }
        if let Some((old, old_is_dir)) = replaced {
            if old == ino {
                // Two names of one file: POSIX leaves both in place.
                return Ok(());
            }
            if how == RenameMode::Replace {
                match (is_dir, old_is_dir) {
                    (false, true) => return Err(Error::IsDir(what(true))),
                    (true, false) => return Err(Error::NotDir(what(true))),
                    (true, true) if !m.dirs[&old].is_empty() => {
                        return Err(Error::NotEmpty(what(true)))
                    }
                    _ => {}
                }
            }
        }
        if replaced.is_some() && how != RenameMode::Exchange {
            self.pay_deletes_debt_first(m, &[src_parent, dst_parent])?;
        }
        // Paths through a moved or replaced directory change meaning; a moved inode's old path
        // is gone (a replaced one's is counted by `drop_link`).
        if is_dir || replaced.is_some_and(|(_, d)| d) {
            self.names.dirs_changed();
        }
        for &(moved, _, _) in &moving {
            if let Some(c) = m.inodes.get(moved) {
                let mut st = c.lock();
                st.names_changed();
                st.set_ctime_ns(self.now_ns());
            }
        }
        m.dirs.remove_entry(src_parent, src_name);
        if how == RenameMode::Exchange {
            let (other, other_dir) = replaced.expect("checked above");
            m.dirs.insert_entry(src_parent, src_name, other, other_dir);
        }
        m.dirs.insert_entry(dst_parent, dst_name, ino, is_dir);
        if src_parent != dst_parent {
            // A directory's `..` is a link of its parent.
            let shift = |from: u64, to: u64| -> Result<()> {
                if let Some(p) = m.inodes.get(from) {
                    self.drop_nlink(&mut p.lock(), from)?;
                }
                if let Some(p) = m.inodes.get(to) {
                    p.lock().add_link(to)?;
                }
                Ok(())
            };
            if is_dir {
                shift(src_parent, dst_parent)?;
            }
            if let (RenameMode::Exchange, Some((_, true))) = (how, replaced) {
                shift(dst_parent, src_parent)?;
            }
        }
        self.touch_dir(m, src_parent);
        self.touch_dir(m, dst_parent);
        for &(moved, _, _) in &moving {
            m.namespace_changed(moved);
        }
        if how != RenameMode::Exchange {
            if let Some((old, old_is_dir)) = replaced {
                if old_is_dir {
                    if let Some(p) = m.inodes.get(dst_parent) {
                        self.drop_nlink(&mut p.lock(), dst_parent)?;
                    }
                }
                self.drop_link(m, old)?;
            }
        }
        self.settle_deletes_debt(m)
    }
}

/// Making, moving and removing names by inode number (the twins of `fs`'s path calls).
impl Fs {
    /// Creates a regular file `name` in `parent` and opens it (`open` with `O_CREAT`): with
    /// `flags.exclusive` an existing name fails with `Exists`, otherwise it is opened.
    pub fn create_in(
        &self,
        parent: u64,
        name: &str,
        flags: OpenFlags,
        owner: (u32, u32),
    ) -> Result<File> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        check_name(parent, name)?;
        dir_of(&m.dirs, &m.inodes, parent)?;
        let cell = match m.dirs[&parent].get(name) {
            Some(_) if flags.exclusive => return Err(Error::Exists(entry_name(parent, name))),
            Some(&(ino, _)) => {
                drop(m);
                return self.open_ino(ino, flags);
            }
            None => inner.create_inode(&mut m, parent, name, FileKind::File, flags.mode, owner)?,
        };
        cell.lock().open_handle(cell.ino)?;
        drop(m);
        self.finish_open(
            cell,
            OpenFlags {
                create: false,
                exclusive: false,
                ..flags
            },
        )
    }

    /// Makes directory `name` in `parent`.
    pub fn mkdir_in(&self, parent: u64, name: &str, mode: u32, owner: (u32, u32)) -> Result<Stat> {
        self.inner.check_writable()?;
        let mut m = self.inner.lock_meta();
        let cell = self
            .inner
            .new_in(&mut m, parent, name, FileKind::Dir, mode, owner)?;
        drop(m);
        self.inner.stat_cell(&cell)
    }

    /// Makes a FIFO, device, socket or empty regular file `name` in `parent` (`mknod`); `rdev`
    /// is kept for a device only.
    pub fn mknod_in(
        &self,
        parent: u64,
        name: &str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
        owner: (u32, u32),
    ) -> Result<Stat> {
        self.inner.check_writable()?;
        if !(kind.is_special() || kind == FileKind::File) {
            return Err(Error::Invalid(format!(
                "{}: mknod makes no {kind:?}",
                entry_name(parent, name)
            )));
        }
        let mut m = self.inner.lock_meta();
        let cell = self.inner.new_in(&mut m, parent, name, kind, mode, owner)?;
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            cell.lock().set_rdev(rdev);
        }
        drop(m);
        self.inner.stat_cell(&cell)
    }

    /// Makes symbolic link `name` in `parent` to `target` (stored as given).
    pub fn symlink_in(
        &self,
        parent: u64,
        name: &str,
        target: &str,
        owner: (u32, u32),
    ) -> Result<Stat> {
        let inner = &self.inner;
        inner.check_writable()?;
        if target.is_empty() || target.len() > 4095 {
            return Err(Error::Invalid(format!(
                "{}: link target of {} bytes",
                entry_name(parent, name),
                target.len()
            )));
        }
        let mut m = inner.lock_meta();
        let cell = inner.new_in(&mut m, parent, name, FileKind::Symlink, 0o777, owner)?;
        drop(m);
        inner.pwrite(&cell, target.as_bytes(), 0, false)?;
        inner.stat_cell(&cell)
    }

    /// Gives inode `ino` (not a directory) another name, `name` in `parent`.
    pub fn link_in(&self, ino: u64, parent: u64, name: &str) -> Result<Stat> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        check_name(parent, name)?;
        let cell = m
            .inodes
            .get(ino)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))?;
        {
            let st = cell.lock();
            if st.kind() == FileKind::Dir {
                return Err(Error::NotPermitted(format!(
                    "inode {ino}: a hard link to a directory"
                )));
            }
            if st.nlink() == 0 {
                return Err(Error::NotFound(format!("inode {ino}: unlinked")));
            }
        }
        dir_of(&m.dirs, &m.inodes, parent)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(entry_name(parent, name)));
        }
        inner.make_room_for_change(&mut m, parent)?;
        {
            let mut st = cell.lock();
            st.add_link(ino)?;
            st.set_ctime_ns(self.inner.now_ns());
        }
        m.dirs.insert_entry(parent, name, ino, false);
        inner.touch_dir(&mut m, parent);
        m.namespace_changed(ino);
        drop(m);
        inner.stat_cell(&cell)
    }

    /// Removes name `name` (not a directory) from `parent`; the inode goes with its last name
    /// and its last open handle.
    pub fn unlink_in(&self, parent: u64, name: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        dir_of(&m.dirs, &m.inodes, parent)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(entry_name(parent, name)));
        };
        if is_dir {
            return Err(Error::IsDir(entry_name(parent, name)));
        }
        inner.pay_deletes_debt_first(&mut m, &[parent])?;
        m.dirs.remove_entry(parent, name);
        inner.touch_dir(&mut m, parent);
        inner.drop_link(&mut m, ino)?;
        inner.settle_deletes_debt(&mut m)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir_in(&self, parent: u64, name: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        dir_of(&m.dirs, &m.inodes, parent)?;
        if name == "." {
            return Err(Error::Invalid(entry_name(parent, name)));
        }
        if name == ".." {
            return Err(Error::NotEmpty(entry_name(parent, name)));
        }
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(entry_name(parent, name)));
        };
        if !is_dir {
            return Err(Error::NotDir(entry_name(parent, name)));
        }
        if !m.dirs[&ino].is_empty() {
            return Err(Error::NotEmpty(entry_name(parent, name)));
        }
        inner.pay_deletes_debt_first(&mut m, &[parent])?;
        inner.names.dirs_changed();
        m.dirs.remove_entry(parent, name);
        if let Some(p) = m.inodes.get(parent) {
            inner.drop_nlink(&mut p.lock(), parent)?;
        }
        inner.touch_dir(&mut m, parent);
        inner.drop_link(&mut m, ino)?;
        inner.settle_deletes_debt(&mut m)
    }

    /// Renames `parent/name` to `new_parent/new_name`, atomically, as `renameat2` with `how`.
    pub fn rename_in(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        how: RenameMode,
    ) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        check_name(parent, name)?;
        check_name(new_parent, new_name)?;
        let mut m = inner.lock_meta();
        dir_of(&m.dirs, &m.inodes, parent)?;
        dir_of(&m.dirs, &m.inodes, new_parent)?;
        let what = |dst: bool| {
            if dst {
                entry_name(new_parent, new_name)
            } else {
                entry_name(parent, name)
            }
        };
        inner.rename_entry(&mut m, parent, name, new_parent, new_name, how, &what)
    }
}
