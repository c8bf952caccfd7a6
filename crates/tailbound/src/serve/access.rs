//! Permission checks for a socket client, by the kernel's rules: the client's user and groups
//! (from `SO_PEERCRED` and the process's supplementary groups) against each inode's owner,
//! group and mode bits; search permission on every directory a path walks, through the targets
//! of the symbolic links it follows; write and search permission on a directory whose names
//! change, and the sticky bit's owner rule; root passes every check but execute.

use std::io;

use crate::tbfs::{Error, FileKind, Fs, Result, SetAttr, Snapshot, Stat};

/// Read, write and search/execute, as in a mode's bits.
pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

/// The most symbolic links one path may follow (the kernel's limit).
const LINKS_MAX: u32 = 40;

/// Who a client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

fn denied(what: &str) -> Error {
    Error::io(what, io::Error::from_raw_os_error(libc::EACCES))
}

/// A tree walked by inode number: the live pool or a retained checkpoint.
pub trait Tree {
    fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat>;
    fn stat_ino(&self, ino: u64) -> Result<Stat>;
    fn readlink_ino(&self, ino: u64) -> Result<String>;
}

impl Tree for Fs {
    fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        Fs::lookup_in(self, parent, name)
    }
    fn stat_ino(&self, ino: u64) -> Result<Stat> {
        Fs::stat_ino(self, ino)
    }
    fn readlink_ino(&self, ino: u64) -> Result<String> {
        Fs::readlink_ino(self, ino)
    }
}

impl Tree for Snapshot {
    fn lookup_in(&self, parent: u64, name: &str) -> Result<Stat> {
        Snapshot::lookup_in(self, parent, name)
    }
    fn stat_ino(&self, ino: u64) -> Result<Stat> {
        Snapshot::stat_ino(self, ino)
    }
    fn readlink_ino(&self, ino: u64) -> Result<String> {
        Snapshot::readlink_ino(self, ino)
    }
}

/// Where a path leads: its directory, and the inode its last name names if any.
pub struct Walked {
    pub dir: Stat,
    pub last: Option<Stat>,
}

impl Who {
    /// The client with process `pid`'s supplementary groups (none when they cannot be read).
    pub fn of_process(pid: i32, uid: u32, gid: u32) -> Who {
        let groups = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                    g.split_whitespace()
                        .filter_map(|n| n.parse().ok())
                        .collect()
                })
            })
            .unwrap_or_default();
        Who { uid, gid, groups }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the client may `want` (a mask of [`READ`], [`WRITE`], [`EXEC`]) on `st`.
    pub fn may(&self, st: &Stat, want: u32) -> bool {
        if self.is_root() {
            // Root may execute only what someone may, and search any directory.
            return want & EXEC == 0 || st.kind == FileKind::Dir || st.mode & 0o111 != 0;
        }
        let bits = if st.uid == self.uid {
            st.mode >> 6
        } else if self.in_group(st.gid) {
            st.mode >> 3
        } else {
            st.mode
        } & 7;
        bits & want == want
    }

    pub fn check(&self, st: &Stat, want: u32, what: &str) -> Result<()> {
        if self.may(st, want) {
            Ok(())
        } else {
            Err(denied(what))
        }
    }

    /// Whether the client owns `st` (or is root): what chmod and utimens to a given time need.
    pub fn owns(&self, st: &Stat) -> bool {
        self.is_root() || st.uid == self.uid
    }

    /// Walks `path` as the kernel would for this client: search permission on every directory
    /// passed through, symbolic links followed (the last one only when `follow`). A missing
    /// last name is not an error (`last` is `None`); a missing directory is.
    pub fn walk(&self, tree: &impl Tree, path: &str, follow: bool) -> Result<Walked> {
        let parts = |p: &str| -> Vec<String> {
            p.split('/')
                .rev()
                .filter(|s| !s.is_empty() && *s != ".")
                .map(str::to_string)
                .collect()
        };
        let root = tree.stat_ino(crate::tbfs::by_ino::ROOT)?;
        let mut todo = parts(path);
        let mut cur = root;
        let mut trail: Vec<Stat> = Vec::new();
        let mut links = 0;
        if todo.is_empty() {
            return Ok(Walked {
                dir: root,
                last: Some(root),
            });
        }
        loop {
            let Some(part) = todo.pop() else {
                // The path ended in `..` or in a link to a directory: it names `cur`.
                let dir = trail.last().copied().unwrap_or(root);
                return Ok(Walked {
                    dir,
                    last: Some(cur),
                });
            };
            if cur.kind != FileKind::Dir {
                return Err(Error::NotDir(path.to_string()));
            }
            self.check(&cur, EXEC, path)?;
            if part == ".." {
                cur = trail.pop().unwrap_or(root);
                continue;
            }
            let last = todo.is_empty();
            let found = match tree.lookup_in(cur.ino, &part) {
                Ok(st) => st,
                Err(Error::NotFound(_)) if last => {
                    return Ok(Walked {
                        dir: cur,
                        last: None,
                    })
                }
                Err(e) => return Err(e),
            };
            if found.kind == FileKind::Symlink && (follow || !last) {
                links += 1;
                if links > LINKS_MAX {
                    return Err(Error::Loop(path.to_string()));
                }
                let target = tree.readlink_ino(found.ino)?;
                if target.starts_with('/') {
                    cur = root;
                    trail.clear();
                }
                todo.extend(parts(&target));
                continue;
            }
            if last {
                return Ok(Walked {
                    dir: cur,
                    last: Some(found),
                });
            }
            trail.push(cur);
            cur = found;
        }
    }

    /// What removing or replacing `victim` from directory `dir` needs: write and search on the
    /// directory, and in a sticky directory, owning the file or the directory.
    pub fn may_unlink(&self, dir: &Stat, victim: &Stat, what: &str) -> Result<()> {
        self.check(dir, WRITE | EXEC, what)?;
        if dir.mode & libc::S_ISVTX != 0 && !self.owns(victim) && dir.uid != self.uid {
            return Err(Error::NotPermitted(format!("{what}: sticky directory")));
        }
        Ok(())
    }

    /// What changing `st`'s attributes as `attr` asks needs (chmod, chown, utimens to given
    /// times: the kernel's `setattr_prepare` rules; times set to now need only write permission).
    pub fn may_set_attr(&self, st: &Stat, attr: &SetAttr, what: &str) -> Result<()> {
        if self.is_root() {
            return Ok(());
        }
        let refuse = || Err(Error::NotPermitted(what.to_string()));
        if attr.uid.is_some_and(|u| u != st.uid) {
            return refuse();
        }
        if let Some(g) = attr.gid {
            if st.uid != self.uid || (g != st.gid && !self.in_group(g)) {
                return refuse();
            }
        }
        let times = attr.atime_ns.is_some() || attr.mtime_ns.is_some();
        if st.uid == self.uid {
            return Ok(());
        }
        if attr.mode.is_some() || attr.uid.is_some() || (times && !attr.touch) {
            return refuse();
        }
        if times && !self.may(st, WRITE) {
            return Err(denied(what));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Stat {
        Stat {
            ino: 9,
            kind,
            mode,
            nlink: 1,
            size: 0,
            blocks: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            atime_ns: 0,
            uid,
            gid,
            rdev: 0,
        }
    }

    #[test]
    fn owner_group_and_other_bits_are_chosen_as_the_kernel_does() {
        let who = Who {
            uid: 1000,
            gid: 100,
            groups: vec![27],
        };
        // The owner's bits apply to the owner even when the group's or others' would allow.
        assert!(!who.may(&st(FileKind::File, 0o077, 1000, 100), READ));
        assert!(who.may(&st(FileKind::File, 0o040, 5, 100), READ));
        assert!(who.may(&st(FileKind::File, 0o040, 5, 27), READ));
        assert!(!who.may(&st(FileKind::File, 0o004, 5, 27), READ));
        assert!(who.may(&st(FileKind::File, 0o004, 5, 6), READ));
        assert!(!who.may(&st(FileKind::File, 0o004, 5, 6), READ | WRITE));
        let root = Who {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        assert!(root.may(&st(FileKind::File, 0, 5, 6), READ | WRITE));
        assert!(root.may(&st(FileKind::Dir, 0, 5, 6), EXEC));
        assert!(!root.may(&st(FileKind::File, 0o600, 5, 6), EXEC));
    }

    #[test]
    fn attribute_changes_follow_setattr_rules() {
        let who = Who {
            uid: 1000,
            gid: 100,
            groups: vec![27],
        };
        let mine = st(FileKind::File, 0o644, 1000, 100);
        let theirs = st(FileKind::File, 0o666, 5, 100);
        let mode = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        assert!(who.may_set_attr(&mine, &mode, "x").is_ok());
        assert!(who.may_set_attr(&theirs, &mode, "x").is_err());
        let give = SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        };
        assert!(who.may_set_attr(&mine, &give, "x").is_err());
        let group = |g| SetAttr {
            gid: Some(g),
            ..SetAttr::default()
        };
        assert!(who.may_set_attr(&mine, &group(27), "x").is_ok());
        assert!(who.may_set_attr(&mine, &group(28), "x").is_err());
    }

    #[test]
    fn times_set_to_now_need_write_permission_not_ownership() {
        let who = Who {
            uid: 1000,
            gid: 100,
            groups: vec![],
        };
        let writable = st(FileKind::File, 0o666, 5, 6);
        let read_only = st(FileKind::File, 0o644, 5, 6);
        let at = |touch| SetAttr {
            atime_ns: Some(1),
            mtime_ns: Some(1),
            touch,
            ..SetAttr::default()
        };
        assert!(who.may_set_attr(&writable, &at(true), "x").is_ok());
        // Without write permission a touch is EACCES, and a given time is EPERM, as utimensat(2).
        let errno = |r: Result<()>| r.map_err(|e| e.errno()).err();
        assert_eq!(
            errno(who.may_set_attr(&read_only, &at(true), "x")),
            Some(libc::EACCES)
        );
        assert_eq!(
            errno(who.may_set_attr(&writable, &at(false), "x")),
            Some(libc::EPERM)
        );
        assert_eq!(
            errno(who.may_set_attr(&read_only, &at(false), "x")),
            Some(libc::EPERM)
        );
    }
}
