//! Set-user-ID and set-group-ID bits, and how a snapshot's files refuse root's writes.
//!
//! The mount negotiates `FUSE_HANDLE_KILLPRIV_V2`. The kernel then leaves clearing the set-ID bits
//! to the server (after a write, a truncate by a caller without `CAP_FSETID`, and a `chown`), and
//! marks an inode as having no security attributes once it has asked for `security.capability`
//! once, so only an inode's first write costs that question.
//!
//! That question is also how a snapshot's file refuses root. Root passes the kernel's permission
//! check, and with no-open the kernel opens the file without asking, so a write would land in the
//! page cache and fail only at writeback. A snapshot's file answers with an empty capability (no
//! permitted, inheritable or effective bits), so the kernel asks to remove it before the first
//! write, and the pool's refusal fails that `write()` itself with EROFS.

/// The attribute the kernel asks about before a file's first write.
pub const CAPABILITY: &str = "security.capability";

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o010;

/// `VFS_CAP_REVISION_2` with no effective bit and empty permitted and inheritable sets, in the
/// kernel's little-endian `vfs_cap_data` layout: a file with it gains no capability when run.
pub fn empty_capability() -> [u8; 20] {
    let mut v = [0u8; 20];
    v[..4].copy_from_slice(&0x0200_0000u32.to_le_bytes());
    v
}

/// Why the set-ID bits of a file are looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Its data changed (a write or truncate the kernel marked as needing it).
    Data,
    /// Its owner or group changed.
    Owner,
}

/// The permission bits `mode` (low 12 bits) becomes after `change` to a file of `is_dir`, or `None`
/// when nothing is cleared. Set-user-ID always goes; set-group-ID only with group execute, since
/// without it the bit marks mandatory locking rather than privilege. A directory keeps both on an
/// owner change (its set-group-ID bit is inheritance, not privilege).
pub fn cleared(mode: u32, is_dir: bool, change: Change) -> Option<u32> {
    if is_dir && change == Change::Owner {
        return None;
    }
    let mut m = mode & 0o7777;
    m &= !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    (m != mode & 0o7777).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_user_id_always_goes_and_set_group_id_only_with_group_execute() {
        assert_eq!(cleared(0o4755, false, Change::Data), Some(0o755));
        assert_eq!(cleared(0o6755, false, Change::Owner), Some(0o755));
        assert_eq!(cleared(0o2745, false, Change::Data), None);
        assert_eq!(cleared(0o6745, false, Change::Data), Some(0o2745));
        assert_eq!(cleared(0o644, false, Change::Data), None);
        assert_eq!(cleared(0o6755, true, Change::Owner), None);
    }

    #[test]
    fn the_empty_capability_is_revision_two_with_nothing_set() {
        let v = empty_capability();
        assert_eq!(u32::from_le_bytes(v[..4].try_into().unwrap()), 0x0200_0000);
        assert!(v[4..].iter().all(|&b| b == 0));
    }
}
