//! What a session changed, told to a front end that caches the tree: a FUSE mount's kernel
//! keeps names, attributes and pages, and must drop what a socket client made stale.

use std::sync::Arc;

use crate::tbfs::Fs;

/// One change a client made, after the pool applied it (`Unlinking`: before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// Bytes written at `offset` of inode `ino` (its size may have grown to cover them).
    Written {
        ino: u64,
        offset: u64,
        data: &'a [u8],
    },
    /// Inode `ino`'s attributes changed, its size perhaps shrunk, its pages perhaps all stale.
    Inode { ino: u64 },
    /// The name `name` in directory `parent` was made, removed or pointed elsewhere.
    Name { parent: u64, name: &'a str },
    /// Inode `ino` is about to lose a name (an unlink, a rename over it), told before the pool
    /// applies it: a front end whose users may hold the inode open without the pool knowing
    /// keeps it now, or it is freed with its last name.
    Unlinking { ino: u64 },
}

/// Told of every change a session makes, from the session's thread.
pub type Observer = Arc<dyn Fn(&Change<'_>) + Send + Sync>;

/// The directory and the last name of `path` (`None` for the root or a path without a name).
pub(super) fn split(path: &str) -> Option<(&str, &str)> {
    let trimmed = path.trim_end_matches('/');
    let (dir, name) = match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    if name.is_empty() || name == "." || name == ".." {
        return None;
    }
    Some((if dir.is_empty() { "/" } else { dir }, name))
}

/// Tells `observer` that the name at `path` changed: its directory is looked up after the
/// change (a directory that is gone has nothing cached to drop).
pub(super) fn name_changed(fs: &Fs, observer: &Observer, path: &str) {
    let Some((dir, name)) = split(path) else {
        return;
    };
    if let Ok(st) = fs.stat(dir) {
        observer(&Change::Name {
            parent: st.ino,
            name,
        });
    }
}

/// Tells `observer` that the inode at `path` changed (not following a last symlink when
/// `follow` is false).
pub(super) fn inode_changed(fs: &Fs, observer: &Observer, path: &str, follow: bool) {
    let st = if follow {
        fs.stat(path)
    } else {
        fs.lstat(path)
    };
    if let Ok(st) = st {
        observer(&Change::Inode { ino: st.ino });
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn paths_split_into_directory_and_name() {
        assert_eq!(split("/a/b"), Some(("/a", "b")));
        assert_eq!(split("/a"), Some(("/", "a")));
        assert_eq!(split("a/b/"), Some(("a", "b")));
        assert_eq!(split("/"), None);
        assert_eq!(split("/a/.."), None);
    }
}
