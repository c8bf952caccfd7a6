//! The file tree by inode number: what a kernel front end (FUSE) asks for. The kernel keeps the
//! path walk, the dentry cache and the permission checks; the engine answers for one directory
//! and one name at a time, or for an inode it named before.
//!
//! Every call here takes the same locks, and leaves the tree in the same states, as its path-based
//! twin in `fs` ([`Fs::mkdir`], [`Fs::rename`], ...): the two may be used on one pool at once.
//! The calls that change names (`create_in`, `mkdir_in`, `rename_in`, ...) change several parts
//! of the state, and live with the orchestration in `commit/names.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use super::format::NAME_MAX;
use super::{DirEntry, Error, File, FileKind, Fs, OpenFlags, Result, SetAttr, Snapshot, Stat};
use crate::tbfs::inode::{InodeCell, ROOT_INO};
use crate::tbfs::namespace::{dir_entries, dir_of, kind_in, parent_links};

/// The root directory's inode number.
pub const ROOT: u64 = ROOT_INO;

/// How an entry is named in errors: its directory's inode and its name.
pub(in crate::tbfs) fn entry_name(parent: u64, name: &str) -> String {
    format!("inode {parent}/{name}")
}

/// A name that can be created or removed in a directory.
pub(in crate::tbfs) fn check_name(parent: u64, name: &str) -> Result<()> {
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

impl Fs {
    /// The inode `name` names in directory `parent` (`.` is the directory itself, `..` its
    /// parent), without following a symbolic link.
    pub fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        let inner = &self.inner;
        inner.check_usable()?;
        let cell = inner.read_names(|dirs, inodes| {
            dir_of(dirs, inodes, parent)?;
            let ino = match name {
                "." | "" => parent,
                ".." => parent_links(dirs).get(&parent).copied().unwrap_or(ROOT_INO),
                _ => {
                    if name.len() > NAME_MAX {
                        return Err(Error::NameTooLong(entry_name(parent, name)));
                    }
                    match dirs[&parent].get(name) {
                        Some(&(ino, _)) => ino,
                        None => return Err(Error::NotFound(entry_name(parent, name))),
                    }
                }
            };
            inner.cell(inodes, ino)
        })?;
        inner.stat_cell(&cell)
    }

    /// The attributes of inode `ino`, while it has a name or an open handle.
    pub fn stat_ino(&self, ino: u64) -> Result<Stat> {
        self.inner.check_usable()?;
        let cell = self.cell_of(ino)?;
        self.inner.stat_cell(&cell)
    }

    fn cell_of(&self, ino: u64) -> Result<Arc<InodeCell>> {
        self.inner.read_names(|_, inodes| {
            inodes
                .get(ino)
                .cloned()
                .ok_or_else(|| Error::NotFound(format!("inode {ino}")))
        })
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
    pub(in crate::tbfs) fn finish_open(
        &self,
        cell: Arc<InodeCell>,
        flags: OpenFlags,
    ) -> Result<File> {
        let truncate = flags.truncate && flags.write && cell.lock().size() > 0;
        let file = File::of_cell(self.inner.clone(), cell, flags);
        if truncate {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// Entries of directory `ino`, sorted by name, without `.` and `..`.
    pub fn readdir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.inner.check_usable()?;
        self.inner.read_names(|dirs, inodes| {
            dir_of(dirs, inodes, ino)?;
            Ok(dir_entries(&dirs[&ino], |i| kind_in(inodes, i)))
        })
    }

    /// The parent of every directory (the root is its own), for `..` entries.
    pub fn dir_parents(&self) -> Result<HashMap<u64, u64>> {
        self.inner.check_usable()?;
        let mut parents = self.inner.read_names(|dirs, _| parent_links(dirs));
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
        let (_, inodes) = self.names();
        inodes
            .get(ino)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("checkpoint {}: inode {ino}", self.number())))
    }

    /// The inode `name` names in directory `parent` of the view (`.` and `..` as in
    /// [`Fs::lookup_in`]).
    pub fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        let (dirs, _) = self.names();
        let Some(entries) = dirs.get(parent) else {
            self.view_cell(parent)?;
            return Err(Error::NotDir(format!(
                "checkpoint {}: inode {parent}",
                self.number()
            )));
        };
        let ino = match name {
            "." | "" => parent,
            ".." => parent_links(dirs).get(&parent).copied().unwrap_or(ROOT_INO),
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
        let (dirs, inodes) = self.names();
        match dirs.get(ino) {
            Some(entries) => Ok(dir_entries(entries, |i| kind_in(inodes, i))),
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
