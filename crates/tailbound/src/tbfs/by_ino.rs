//! The file tree by inode number: what a kernel front end (FUSE) asks for. The kernel keeps the
//! path walk, the dentry cache and the permission checks; the engine answers for one directory
//! and one name at a time, or for an inode it named before.
//!
//! Every call here takes the same locks, and leaves the tree in the same states, as its path-based
//! twin in `fs` ([`Fs::mkdir`], [`Fs::rename`], ...): the two may be used on one pool at once.

use std::collections::HashMap;
use std::sync::Arc;

use super::format::NAME_MAX;
use super::{
    DirEntry, Error, File, FileKind, Fs, OpenFlags, RenameMode, Result, SetAttr, Snapshot, Stat,
};
use crate::tbfs::inode::{now_ns, InodeCell, ROOT_INO};
use crate::tbfs::namespace::{kind_in, parent_links};
use crate::tbfs::state::{Engine, State};

/// The root directory's inode number.
pub const ROOT: u64 = ROOT_INO;

/// How an entry is named in errors: its directory's inode and its name.
fn entry_name(parent: u64, name: &str) -> String {
    format!("inode {parent}/{name}")
}

/// A name that can be created or removed in a directory.
fn check_name(parent: u64, name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::Invalid(format!(
            "{}: not a name that can be created or removed",
            entry_name(parent, name)
        )));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(entry_name(parent, name)));
    }
    Ok(())
}

impl Engine {
    /// Checks that `dir` is a directory of the tree.
    fn dir_of(&self, m: &State, dir: u64) -> Result<()> {
        if m.dirs.contains(dir) {
            Ok(())
        } else if m.inodes.contains(dir) {
            Err(Error::NotDir(format!("inode {dir}")))
        } else {
            Err(Error::NotFound(format!("inode {dir}")))
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
        self.dir_of(m, parent)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(entry_name(parent, name)));
        }
        self.create_inode(m, parent, name, kind, mode, owner)
    }

    /// Renames `src_parent/src_name` to `dst_parent/dst_name` (`what` names the two in errors).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rename_entry(
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
        // Paths through a moved or replaced directory change meaning; a moved inode's old path
        // is gone (a replaced one's is counted by `drop_link`).
        if is_dir || replaced.is_some_and(|(_, d)| d) {
            self.names.dirs_changed();
        }
        for &(moved, _, _) in &moving {
            if let Some(c) = m.inodes.get(moved) {
                let mut st = c.lock();
                st.names_changed();
                st.set_ctime_ns(now_ns());
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
        Ok(())
    }
}

impl Fs {
    /// The inode `name` names in directory `parent` (`.` is the directory itself, `..` its
    /// parent), without following a symbolic link.
    pub fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        let inner = &self.inner;
        inner.check_usable()?;
        let m = inner.lock_meta();
        inner.dir_of(&m, parent)?;
        let ino = match name {
            "." | "" => parent,
            ".." => parent_links(&m.dirs)
                .get(&parent)
                .copied()
                .unwrap_or(ROOT_INO),
            _ => {
                if name.len() > NAME_MAX {
                    return Err(Error::NameTooLong(entry_name(parent, name)));
                }
                match m.dirs[&parent].get(name) {
                    Some(&(ino, _)) => ino,
                    None => return Err(Error::NotFound(entry_name(parent, name))),
                }
            }
        };
        let cell = inner.cell(&m.inodes, ino)?;
        drop(m);
        inner.stat_cell(&cell)
    }

    /// The attributes of inode `ino`, while it has a name or an open handle.
    pub fn stat_ino(&self, ino: u64) -> Result<Stat> {
        self.inner.check_usable()?;
        let cell = self.cell_of(ino)?;
        self.inner.stat_cell(&cell)
    }

    fn cell_of(&self, ino: u64) -> Result<Arc<InodeCell>> {
        let m = self.inner.lock_meta();
        m.inodes
            .get(ino)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    /// Opens inode `ino` (never creates: `flags.create` and `flags.exclusive` are ignored). A
    /// directory opens for reading only; a special file does not open (the kernel serves it).
    pub fn open_ino(&self, ino: u64, flags: OpenFlags) -> Result<File> {
        let inner = &self.inner;
        inner.check_usable()?;
        if (flags.write || flags.truncate) && inner.read_only() {
            return Err(Error::ReadOnly(format!("inode {ino}")));
        }
        let cell = self.cell_of(ino)?;
        {
            let mut st = cell.lock();
            if st.freed() {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            if st.kind() == FileKind::Dir && (flags.write || flags.truncate) {
                return Err(Error::IsDir(format!("inode {ino}")));
            }
            if st.kind().is_special() {
                return Err(Error::Invalid(format!(
                    "inode {ino}: a special file has no data to open"
                )));
            }
            st.open_handle(ino)?;
        }
        let flags = OpenFlags {
            create: false,
            exclusive: false,
            ..flags
        };
        self.finish_open(cell, flags)
    }

    /// A handle to `cell`, whose open count the caller raised.
    fn finish_open(&self, cell: Arc<InodeCell>, flags: OpenFlags) -> Result<File> {
        let truncate = flags.truncate && flags.write && cell.lock().size() > 0;
        let file = File::of_cell(self.inner.clone(), cell, flags);
        if truncate {
            file.set_len(0)?;
        }
        Ok(file)
    }

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
        inner.dir_of(&m, parent)?;
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
        inner.dir_of(&m, parent)?;
        if m.dirs[&parent].contains_key(name) {
            return Err(Error::Exists(entry_name(parent, name)));
        }
        inner.make_room_for_change(&mut m, parent)?;
        {
            let mut st = cell.lock();
            st.add_link(ino)?;
            st.set_ctime_ns(now_ns());
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
        inner.dir_of(&m, parent)?;
        let Some(&(ino, is_dir)) = m.dirs[&parent].get(name) else {
            return Err(Error::NotFound(entry_name(parent, name)));
        };
        if is_dir {
            return Err(Error::IsDir(entry_name(parent, name)));
        }
        m.dirs.remove_entry(parent, name);
        inner.touch_dir(&mut m, parent);
        inner.drop_link(&mut m, ino)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir_in(&self, parent: u64, name: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_writable()?;
        let mut m = inner.lock_meta();
        inner.dir_of(&m, parent)?;
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
        inner.names.dirs_changed();
        m.dirs.remove_entry(parent, name);
        if let Some(p) = m.inodes.get(parent) {
            inner.drop_nlink(&mut p.lock(), parent)?;
        }
        inner.touch_dir(&mut m, parent);
        inner.drop_link(&mut m, ino)
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
        inner.dir_of(&m, parent)?;
        inner.dir_of(&m, new_parent)?;
        let what = |dst: bool| {
            if dst {
                entry_name(new_parent, new_name)
            } else {
                entry_name(parent, name)
            }
        };
        inner.rename_entry(&mut m, parent, name, new_parent, new_name, how, &what)
    }

    /// Entries of directory `ino`, sorted by name, without `.` and `..`.
    pub fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        self.inner.dir_of(&m, ino)?;
        Ok(crate::tbfs::namespace::dir_entries(&m.dirs[&ino], |i| {
            kind_in(&m.inodes, i)
        }))
    }

    /// The parent of every directory (the root is its own), for `..` entries.
    pub fn dir_parents(&self) -> Result<HashMap<u64, u64>> {
        self.inner.check_usable()?;
        let m = self.inner.lock_meta();
        let mut parents = parent_links(&m.dirs);
        parents.insert(ROOT_INO, ROOT_INO);
        Ok(parents)
    }

    /// Changes inode `ino`'s attributes (chmod, chown, utimens).
    pub fn set_attr_ino(&self, ino: u64, attr: &SetAttr) -> Result<Stat> {
        self.inner.check_writable()?;
        let cell = self.cell_of(ino)?;
        self.inner.set_attr(&cell, attr)?;
        self.inner.stat_cell(&cell)
    }

    /// Sets regular file `ino`'s size (`truncate`), whatever handles it has.
    pub fn set_len_ino(&self, ino: u64, len: u64) -> Result<Stat> {
        self.inner.check_writable()?;
        let cell = self.cell_of(ino)?;
        let kind = cell.lock().kind();
        if kind != FileKind::File {
            return Err(if kind == FileKind::Dir {
                Error::IsDir(format!("inode {ino}"))
            } else {
                Error::Invalid(format!("inode {ino}: not a regular file"))
            });
        }
        self.inner.set_len(&cell, len)?;
        self.inner.stat_cell(&cell)
    }

    /// The target of symbolic link `ino`.
    pub fn readlink_ino(&self, ino: u64) -> Result<String> {
        self.inner.check_usable()?;
        let cell = self.cell_of(ino)?;
        self.inner.link_target(&cell)
    }
}

/// A retained checkpoint's read-only view, by inode number (`DIR/.snapshots/NAME` of a mount).
impl Snapshot {
    fn view_cell(&self, ino: u64) -> Result<Arc<InodeCell>> {
        self.inner.check_usable()?;
        self.tree
            .inodes
            .get(ino)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("checkpoint {}: inode {ino}", self.number())))
    }

    /// The inode `name` names in directory `parent` of the view (`.` and `..` as in
    /// [`Fs::lookup_in`]).
    pub fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        let Some(entries) = self.tree.dirs.get(parent) else {
            self.view_cell(parent)?;
            return Err(Error::NotDir(format!(
                "checkpoint {}: inode {parent}",
                self.number()
            )));
        };
        let ino = match name {
            "." | "" => parent,
            ".." => parent_links(&self.tree.dirs)
                .get(&parent)
                .copied()
                .unwrap_or(ROOT_INO),
            _ => match entries.get(name) {
                Some(&(ino, _)) => ino,
                None => return Err(Error::NotFound(entry_name(parent, name))),
            },
        };
        self.stat_ino(ino)
    }

    /// The attributes of inode `ino` in the view.
    pub fn stat_ino(&self, ino: u64) -> Result<Stat> {
        let cell = self.view_cell(ino)?;
        self.inner.stat_cell(&cell)
    }

    /// Entries of directory `ino` in the view, sorted by name, without `.` and `..`.
    pub fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.inner.check_usable()?;
        match self.tree.dirs.get(ino) {
            Some(entries) => Ok(crate::tbfs::namespace::dir_entries(entries, |i| {
                kind_in(&self.tree.inodes, i)
            })),
            None => {
                self.view_cell(ino)?;
                Err(Error::NotDir(format!(
                    "checkpoint {}: inode {ino}",
                    self.number()
                )))
            }
        }
    }

    /// Reads regular file `ino` of the view at `offset`.
    pub fn pread_ino(&self, ino: u64, buf: &mut [u8], offset: u64) -> Result<usize> {
        let cell = self.view_cell(ino)?;
        if cell.lock().kind() != FileKind::File {
            return Err(Error::Invalid(format!(
                "checkpoint {}: inode {ino} is not a regular file",
                self.number()
            )));
        }
        self.inner.pread_at_rest(&cell, buf, offset)
    }

    /// The target of symbolic link `ino` in the view.
    pub fn readlink_ino(&self, ino: u64) -> Result<String> {
        let cell = self.view_cell(ino)?;
        let size = {
            let st = cell.lock();
            if st.kind() != FileKind::Symlink {
                return Err(Error::Invalid(format!(
                    "checkpoint {}: inode {ino} is not a symbolic link",
                    self.number()
                )));
            }
            st.size()
        };
        let mut buf = vec![0u8; size as usize];
        let n = self.inner.pread_at_rest(&cell, &mut buf, 0)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| {
            Error::Corrupt(format!(
                "checkpoint {}: inode {ino}: symbolic link target is not UTF-8",
                self.number()
            ))
        })
    }
}
