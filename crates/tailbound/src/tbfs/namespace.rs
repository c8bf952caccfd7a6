//! The namespace: path resolution, link targets, the path cache's entries, directory listings.

use std::collections::HashMap;
use std::sync::Arc;

use crate::tbfs::directories::Directories;
use crate::tbfs::format::*;
use crate::tbfs::inode::*;
use crate::tbfs::inode_table::InodeTable;
use crate::tbfs::limits::SYMLINK_HOPS_MAX;
use crate::tbfs::state::Engine;
use crate::tbfs::{DirEntry, Error, FileKind, Result};

impl Engine {
    /// Resolves a path to its inode, following symbolic links; `/`, empty components and `.`
    /// are ignored, `..` goes to the parent.
    pub fn lookup(&self, dirs: &Directories, inodes: &InodeTable, path: &str) -> Result<u64> {
        self.resolve(dirs, inodes, path, true)
    }

    /// Resolves a path, following symbolic links in every component but the last unless
    /// `follow_last`. A relative link target is resolved from the link's directory; an absolute
    /// one from the pool's root, after removing the mount point set with
    /// [`Fs::set_mount_point`] (a target outside it is not found). At most 40 links are followed.
    pub fn resolve(
        &self,
        dirs: &Directories,
        inodes: &InodeTable,
        path: &str,
        follow_last: bool,
    ) -> Result<u64> {
        self.resolve_traced(dirs, inodes, path, follow_last)
            .map(|(ino, _)| ino)
    }

    /// [`Engine::resolve`], also telling whether no symbolic link was followed on the way.
    pub fn resolve_traced(
        &self,
        dirs: &Directories,
        inodes: &InodeTable,
        path: &str,
        follow_last: bool,
    ) -> Result<(u64, bool)> {
        if let Some(found) = self.resolve_plain(dirs, inodes, path, follow_last) {
            return found;
        }
        let mut todo: Vec<String> = path
            .split('/')
            .rev()
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::to_string)
            .collect();
        let mut cur = ROOT_INO;
        let mut trail: Vec<u64> = Vec::new();
        let mut links = 0;
        while let Some(part) = todo.pop() {
            if part == "." {
                continue;
            }
            let Some(entries) = dirs.get(cur) else {
                return Err(Error::NotDir(path.to_string()));
            };
            if part == ".." {
                cur = trail.pop().unwrap_or(ROOT_INO);
                continue;
            }
            let Some(&(child, is_dir)) = entries.get(part.as_str()) else {
                return Err(Error::NotFound(path.to_string()));
            };
            let last = todo.is_empty();
            if !is_dir && (follow_last || !last) {
                let cell = self.cell(inodes, child)?;
                if cell.lock().kind() == FileKind::Symlink {
                    links += 1;
                    if links > SYMLINK_HOPS_MAX {
                        return Err(Error::Loop(path.to_string()));
                    }
                    let target = self.link_target(&cell)?;
                    let rest = if let Some(abs) = target.strip_prefix('/') {
                        cur = ROOT_INO;
                        trail.clear();
                        let mount = self.mount_point();
                        match mount.as_deref() {
                            None => abs.to_string(),
                            Some(mp) => match target.strip_prefix(mp) {
                                Some(r) if r.is_empty() || r.starts_with('/') => r.to_string(),
                                _ => {
                                    return Err(Error::NotFound(format!(
                                        "{path} (its link to {target} leaves the pool)"
                                    )))
                                }
                            },
                        }
                    } else {
                        target
                    };
                    todo.extend(
                        rest.split('/')
                            .rev()
                            .filter(|p| !p.is_empty() && *p != ".")
                            .map(str::to_string),
                    );
                    continue;
                }
            }
            trail.push(cur);
            cur = child;
        }
        Ok((cur, links == 0))
    }

    /// [`Engine::resolve_traced`] without allocating, for a path with no `..` that meets no
    /// symbolic link to follow (the common case); `None` sends the others the general way.
    fn resolve_plain(
        &self,
        dirs: &Directories,
        inodes: &InodeTable,
        path: &str,
        follow_last: bool,
    ) -> Option<Result<(u64, bool)>> {
        let mut parts = path
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .peekable();
        let mut cur = ROOT_INO;
        while let Some(part) = parts.next() {
            if part == ".." {
                return None;
            }
            let Some(entries) = dirs.get(cur) else {
                return Some(Err(Error::NotDir(path.to_string())));
            };
            let Some(&(child, is_dir)) = entries.get(part) else {
                return Some(Err(Error::NotFound(path.to_string())));
            };
            let last = parts.peek().is_none();
            if !is_dir && (follow_last || !last) {
                let cell = inodes.get(child)?;
                if cell.lock().kind() == FileKind::Symlink {
                    return None;
                }
            }
            cur = child;
        }
        Some(Ok((cur, true)))
    }

    /// Remembers in the path cache that `path` names `cell`, when it resolved with no link
    /// followed (`plain`) and is not a link itself. Under `meta`.
    pub(super) fn remember(&self, path: &str, plain: bool, cell: &Arc<InodeCell>) {
        if plain {
            let st = cell.lock();
            if st.kind() != FileKind::Symlink && !st.freed() {
                self.names.insert(path, cell, &st);
            }
        }
    }

    /// A symbolic link's target.
    pub fn link_target(&self, cell: &InodeCell) -> Result<String> {
        let size = {
            let st = cell.lock();
            if st.kind() != FileKind::Symlink {
                return Err(Error::Invalid(format!(
                    "inode {}: not a symbolic link",
                    cell.ino
                )));
            }
            st.size()
        };
        let mut buf = vec![0u8; size as usize];
        let n = self.pread(cell, &mut buf, 0)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| {
            Error::Corrupt(format!(
                "inode {}: symbolic link target is not UTF-8",
                cell.ino
            ))
        })
    }

    /// Splits a path into its parent directory's inode and the last name.
    pub fn parent_of<'p>(
        &self,
        dirs: &Directories,
        inodes: &InodeTable,
        path: &'p str,
    ) -> Result<(u64, &'p str)> {
        self.parent_of_traced(dirs, inodes, path)
            .map(|(parent, name, _)| (parent, name))
    }

    /// [`Engine::parent_of`], also telling whether no symbolic link was followed to the parent.
    pub fn parent_of_traced<'p>(
        &self,
        dirs: &Directories,
        inodes: &InodeTable,
        path: &'p str,
    ) -> Result<(u64, &'p str, bool)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(Error::Invalid(format!(
                "{path}: not a name that can be created or removed"
            )));
        }
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong(path.to_string()));
        }
        let (parent, plain) = self.resolve_traced(dirs, inodes, dir, true)?;
        if !dirs.contains(parent) {
            return Err(Error::NotDir(path.to_string()));
        }
        Ok((parent, name, plain))
    }

    /// The inode a directory entry names.
    pub fn cell(&self, inodes: &InodeTable, ino: u64) -> Result<Arc<InodeCell>> {
        inodes
            .get(ino)
            .cloned()
            .ok_or_else(|| Error::Corrupt(format!("directory entry names missing inode {ino}")))
    }
}

/// A directory's entries as `readdir` returns them; `kind_of` tells the kind of a name that is
/// not a directory (entries store only whether a name is a directory).
pub(super) fn dir_entries(
    entries: &DirEntries,
    kind_of: impl Fn(u64) -> Option<FileKind>,
) -> Vec<DirEntry> {
    entries
        .iter()
        .map(|(name, &(ino, is_dir))| DirEntry {
            name: name.to_string(),
            ino,
            kind: if is_dir {
                FileKind::Dir
            } else {
                kind_of(ino).unwrap_or(FileKind::File)
            },
        })
        .collect()
}

/// The kind of inode `ino` in `inodes`, for [`dir_entries`].
pub(in crate::tbfs) fn kind_in(inodes: &InodeTable, ino: u64) -> Option<FileKind> {
    inodes.get(ino).map(|c| c.lock().kind())
}

/// Checks that `dir` is a directory of the tree.
pub(in crate::tbfs) fn dir_of(dirs: &Directories, inodes: &InodeTable, dir: u64) -> Result<()> {
    if dirs.contains(dir) {
        Ok(())
    } else if inodes.contains(dir) {
        Err(Error::NotDir(format!("inode {dir}")))
    } else {
        Err(Error::NotFound(format!("inode {dir}")))
    }
}

/// Child → parent links of every directory.
pub(in crate::tbfs) fn parent_links(dirs: &Directories) -> HashMap<u64, u64> {
    let mut parents = HashMap::new();
    for (dir, entries) in dirs.iter() {
        for &(child, is_dir) in entries.values() {
            if is_dir {
                parents.insert(child, dir);
            }
        }
    }
    parents
}
