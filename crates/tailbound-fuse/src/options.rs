//! How a pool is mounted: what the mount's caller chooses, apart from the code that answers
//! the kernel.

use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, InitFlags, KernelConfig, MountOption, SessionACL};

use crate::stats::RequestCounts;

/// Request threads unless told otherwise (docs/results/fileserver.md: 2, 4, 8 and 16 compared).
pub const DEFAULT_THREADS: usize = 16;

/// How a pool is mounted.
#[derive(Debug, Clone)]
pub struct Options {
    /// The mount's source as `mount` lists it (the pool's path).
    pub source: String,
    /// Let every user use the mount (`allow_other`; a user other than root needs
    /// `user_allow_other` in /etc/fuse.conf). Otherwise only the mounting user can.
    pub allow_other: bool,
    /// Threads reading the kernel's requests. More than there are cores: each request is
    /// short, but a client waits for its answer, and with as many threads as cores requests
    /// queue behind each other while the threads wait to be scheduled.
    pub threads: usize,
    /// Let the kernel buffer writes in its page cache and send them in large requests.
    pub writeback_cache: bool,
    /// The largest write request, in bytes (the kernel also caps it, at 1 MiB by default).
    pub max_write: u32,
    /// How long the kernel may trust an attribute or a name it was given.
    pub ttl: Duration,
    /// Where to count the kernel's requests by kind, if anywhere.
    pub stats: Option<Arc<RequestCounts>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            source: "tailbound".to_string(),
            allow_other: false,
            threads: DEFAULT_THREADS,
            writeback_cache: true,
            max_write: 1 << 20,
            ttl: Duration::from_secs(1),
            stats: None,
        }
    }
}

impl Options {
    /// The kernel opens files without asking the server (no OPEN, CREATE or RELEASE): with the
    /// writeback cache, where the kernel places appends and calls fsync for O_SYNC, so no open
    /// file carries a flag the server must act on.
    pub fn no_open(&self) -> bool {
        self.writeback_cache
    }

    /// The session's configuration: mount options, who may use the mount, request threads.
    /// Shared with the bench's FUSE baseline so the two mounts differ only in what answers.
    pub fn session_config(&self) -> Config {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(self.source.clone()),
            MountOption::Subtype("tailbound".to_string()),
            MountOption::DefaultPermissions,
            MountOption::Dev,
            MountOption::Suid,
            MountOption::RW,
        ];
        config.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        config.n_threads = Some(self.threads.max(1));
        config.clone_fd = true;
        config
    }

    /// Asks the kernel, at INIT, for what the mount uses: large requests, parallel directory
    /// operations, the writeback cache, and POSIX locks when the server keeps them itself.
    pub fn negotiate(&self, config: &mut KernelConfig, posix_locks: bool) {
        let mut wanted = InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_MAX_PAGES;
        if posix_locks {
            wanted |= InitFlags::FUSE_POSIX_LOCKS;
        }
        if self.writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // The kernel truncates an O_TRUNC open itself (a SETATTR) unless the server does it at
        // OPEN, which it is not sent with no-open.
        if !self.no_open() {
            wanted |= InitFlags::FUSE_ATOMIC_O_TRUNC;
        }
        // Each on its own: a kernel without one still gets the others.
        for flag in wanted.iter() {
            let _ = config.add_capabilities(flag);
        }
        let _ = config.set_max_write(self.max_write);
        let _ = config.set_max_readahead(self.max_write);
        let _ = config.set_max_background(64);
    }
}
