//! The pool server: one process owns a pool (the engine, its cleaner and, for file pools, the
//! I/O scheduler) and serves any number of client processes over a Unix socket beside it.
//!
//! - `codec`: frames and the wire's primitives; decoding never panics on a client's bytes.
//! - `messages`: the versioned messages, [`Request`](protocol::Request) and
//!   [`Reply`](protocol::Reply).
//! - [`protocol`], `protocol_fields`, `protocol_replies`: their bytes (docs/PROTOCOL.md).
//! - `server`: the socket, the accept loop, stopping ([`Server::start`], [`ServerHandle`]).
//! - `dispatch`: a session's transport on the server: `hello`, the rings, the session's worker
//!   threads that read requests and answer them several at once, requests that may wait long
//!   on threads of their own.
//! - [`ring`]: the shared-memory rings (a memfd per session) and their one file of `unsafe`.
//! - `lease`, `lease_wire`, `lease_server`, `lease_client`, `lease_shm`: leases, under which a
//!   client answers stats and reads of a memory pool itself until the server revokes them.
//! - `session`: one client's open files, views and locks; released when the client goes.
//! - `shared`: what the accept loop and the sessions share (the pool, the session table).
//! - `client`: [`Client`], the same calls as [`crate::tbfs::Fs`] through a server; `conn`: its
//!   connection, calls from many threads at once matched to completions by id.
//! - `access`: permission checks by the kernel's rules, for clients other than root.
//! - `caller`: whose a request is: the client's thread and priority in its header, resolved
//!   to the tenant of the pool's scheduler its I/O is charged to.
//! - `nodes`: `mknod` by path (FIFOs, sockets, devices).
//! - `shmem`: one memfd per inode for clients' `MAP_SHARED` mappings, shared across them.
//! - `observe`: what a session changed ([`Change`]), for a front end that caches the tree.
//! - `tally`: a session's requests and wake-ups counted, when [`COUNTS_ENV`] names a file.
//! - `posted`: closes a client does not wait for, applied in order, and the removals that wait
//!   for them (docs/PROTOCOL.md, "Posted closes").
//!
//! Every request is applied to the shared [`Fs`](crate::tbfs::Fs) before it is answered, so a
//! client sees every other client's writes, synced or not, as processes do through the kernel's
//! page cache. A client that dies loses nothing it wrote; only a crash of the server loses what
//! was not synced.

use std::path::{Path, PathBuf};

mod access;
mod caller;
mod client;
mod codec;
mod conn;
mod descs;
mod dispatch;
mod lease;
mod lease_client;
mod lease_server;
#[allow(unsafe_code)]
mod lease_shm;
mod lease_wire;
mod messages;
mod nodes;
mod observe;
mod posted;
pub mod protocol;
mod protocol_fields;
mod protocol_replies;
pub mod ring;
mod scratch;
mod server;
mod session;
mod shared;
mod shmem;
mod tally;
mod timing;

pub use client::{Client, RemoteFile, RemoteView};
pub use codec::{WireError, FRAME_MAX, IO_MAX};
pub use conn::Transport;
pub use descs::STATUS_APPEND;
pub use lease::{DataLease, LeaseTableInfo, LeasedStat};
pub use lease_client::LeaseCounters;
pub use nodes::{mknod_kind, mknod_path};
pub use observe::{Change, Observer};
pub use ring::RingSizes;
pub use server::{Server, ServerHandle, ServerOptions};
pub use tally::ENV as COUNTS_ENV;

/// The socket a pool's server listens on: the pool's path with `.sock` added.
pub fn socket_path(pool: &Path) -> PathBuf {
    let mut s = pool.as_os_str().to_owned();
    s.push(".sock");
    PathBuf::from(s)
}

/// The directory beside a pool where the kernel's ends of its FIFOs live (the pool keeps only
/// their inodes): the pool's path with `.fifos` added. A FIFO opened through the shim is the
/// kernel's FIFO there named after its inode number, so every process meets in the same pipe.
pub fn fifo_dir(pool: &Path) -> PathBuf {
    let mut s = pool.as_os_str().to_owned();
    s.push(".fifos");
    PathBuf::from(s)
}

#[cfg(test)]
mod area_tests;
#[cfg(test)]
mod caller_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod post_tests;
#[cfg(test)]
mod ring_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod worker_tests;
