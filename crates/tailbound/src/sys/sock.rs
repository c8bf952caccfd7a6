//! Unix-socket and process calls the pool server needs that `std` lacks: the peer's credentials,
//! sends that never raise `SIGPIPE`, and detaching a daemon from its terminal.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use super::cvt;

/// Who is at the other end of a connected Unix socket, as the kernel recorded it at `connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// `getsockopt(SO_PEERCRED)`.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals of the size passed; the kernel writes at most `len`
    // bytes into `cred` and updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Writes all of `buf` to `stream` with `MSG_NOSIGNAL`: a peer that has gone away is an
/// `EPIPE` error, not a `SIGPIPE` that ends the process (the CLI restores `SIGPIPE`'s default).
pub fn send_all(stream: &UnixStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice and the length passed is its own.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Shuts a listening socket down, which wakes a thread blocked in `accept` on it (Linux returns
/// `EINVAL` there from then on).
pub fn shutdown_listener(listener: &std::os::unix::net::UnixListener) -> io::Result<()> {
    // SAFETY: shutdown on a descriptor we own; it changes only the socket's state.
    cvt(unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) })?;
    Ok(())
}

/// Waits up to `timeout_ms` for the peer of `stream` to hang up or the socket to fail: `true`
/// if it did. Data waiting to be read is not a hang-up.
pub fn wait_hangup(stream: &UnixStream, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd, a live local, and the count passed is 1.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0)
}
