//! How a pool is mounted: what the mount's caller chooses, apart from the code that answers
//! the kernel.

use std::sync::Arc;
use std::time::Duration;

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
