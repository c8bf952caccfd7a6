//! How many requests of each kind the kernel sent a mount (`tailbound mount --stats FILE`): what
//! a workload costs in round trips through the FUSE device, which is where a mount's time goes.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// A kind of request, as the kernel names it (FUSE_LOOKUP, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Statfs,
    Getxattr,
    Listxattr,
    Removexattr,
    Create,
    Getlk,
    Setlk,
    Fallocate,
}

impl Kind {
    pub const ALL: [Kind; 30] = [
        Kind::Lookup,
        Kind::Forget,
        Kind::Getattr,
        Kind::Setattr,
        Kind::Readlink,
        Kind::Mknod,
        Kind::Mkdir,
        Kind::Unlink,
        Kind::Rmdir,
        Kind::Symlink,
        Kind::Rename,
        Kind::Link,
        Kind::Open,
        Kind::Read,
        Kind::Write,
        Kind::Flush,
        Kind::Release,
        Kind::Fsync,
        Kind::Opendir,
        Kind::Readdir,
        Kind::Releasedir,
        Kind::Fsyncdir,
        Kind::Statfs,
        Kind::Getxattr,
        Kind::Listxattr,
        Kind::Removexattr,
        Kind::Create,
        Kind::Getlk,
        Kind::Setlk,
        Kind::Fallocate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Lookup => "LOOKUP",
            Kind::Forget => "FORGET",
            Kind::Getattr => "GETATTR",
            Kind::Setattr => "SETATTR",
            Kind::Readlink => "READLINK",
            Kind::Mknod => "MKNOD",
            Kind::Mkdir => "MKDIR",
            Kind::Unlink => "UNLINK",
            Kind::Rmdir => "RMDIR",
            Kind::Symlink => "SYMLINK",
            Kind::Rename => "RENAME",
            Kind::Link => "LINK",
            Kind::Open => "OPEN",
            Kind::Read => "READ",
            Kind::Write => "WRITE",
            Kind::Flush => "FLUSH",
            Kind::Release => "RELEASE",
            Kind::Fsync => "FSYNC",
            Kind::Opendir => "OPENDIR",
            Kind::Readdir => "READDIR",
            Kind::Releasedir => "RELEASEDIR",
            Kind::Fsyncdir => "FSYNCDIR",
            Kind::Statfs => "STATFS",
            Kind::Getxattr => "GETXATTR",
            Kind::Listxattr => "LISTXATTR",
            Kind::Removexattr => "REMOVEXATTR",
            Kind::Create => "CREATE",
            Kind::Getlk => "GETLK",
            Kind::Setlk => "SETLK",
            Kind::Fallocate => "FALLOCATE",
        }
    }
}

/// Requests counted by kind, from any request thread.
#[derive(Debug, Default)]
pub struct RequestCounts([AtomicU64; Kind::ALL.len()]);

impl RequestCounts {
    pub(crate) fn count(&self, kind: Kind) {
        self.0[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, kind: Kind) -> u64 {
        self.0[kind as usize].load(Ordering::Relaxed)
    }

    /// One `KIND COUNT` line per kind the kernel sent, then `TOTAL COUNT`.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let mut total = 0;
        for kind in Kind::ALL {
            let n = self.get(kind);
            if n > 0 {
                let _ = writeln!(out, "{} {n}", kind.name());
                total += n;
            }
        }
        let _ = writeln!(out, "TOTAL {total}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_own_counter_and_the_report_sums_them() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "{kind:?} out of place");
        }
        let c = RequestCounts::default();
        c.count(Kind::Flush);
        c.count(Kind::Flush);
        c.count(Kind::Lookup);
        assert_eq!(c.get(Kind::Flush), 2);
        assert_eq!(c.get(Kind::Open), 0);
        assert_eq!(c.report(), "LOOKUP 1\nFLUSH 2\nTOTAL 3\n");
    }
}
