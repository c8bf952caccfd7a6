//! Open file descriptions and holds. A description (an open file, its offset, its status flags
//! and its own locks) lives in the server and may be referred to by several sessions: a client
//! process that forks or execs hands its descriptions on, as the kernel's are shared by every
//! descriptor and process that refers to them. It goes when the last session lets it go (or the
//! last hold of it is dropped), and its locks with it.
//!
//! A hold keeps descriptions alive between a client's request and another session's adoption
//! (a forked child's, or the new image after an exec): it is tied to the process expected to
//! adopt it, and dropped if that process exits first.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::messages::Payload;
use super::scratch;
use crate::tbfs::locks::Owner;
use crate::tbfs::{Error, File, Fs, Result};

/// The status bit that makes writes at the offset appends: Linux's `O_APPEND`.
pub const STATUS_APPEND: u32 = 0o2000;

/// An open file description in the server.
pub(super) struct Desc {
    /// Its handle, the same in every session that refers to it.
    pub id: u64,
    pub file: File,
    /// The offset reads and writes "at the current offset" use and advance, under this lock.
    pub pos: Mutex<u64>,
    /// The client's status flags (`O_APPEND`, `O_NONBLOCK`, ...), as `F_SETFL` left them.
    pub status: AtomicU32,
    fs: Arc<Fs>,
}

impl Desc {
    pub fn new(id: u64, file: File, fs: Arc<Fs>) -> Desc {
        Desc {
            id,
            file,
            pos: Mutex::new(0),
            status: AtomicU32::new(0),
            fs,
        }
    }

    pub fn pos(&self) -> MutexGuard<'_, u64> {
        self.pos.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append_mode(&self) -> bool {
        self.status.load(Ordering::Relaxed) & STATUS_APPEND != 0
    }

    /// Reads at the offset and advances it, in one step no other reader or writer of the
    /// description interleaves with.
    pub fn read_on(&self, len: usize) -> Result<Vec<u8>> {
        let mut pos = self.pos();
        let buf = read_reply(len, |buf| self.file.pread(buf, *pos))?;
        *pos += buf.len() as u64;
        Ok(buf)
    }

    /// Writes at the offset (at the end under `O_APPEND`) and advances it; returns the offset
    /// the data went to.
    pub fn write_on(&self, data: &[u8]) -> Result<u64> {
        let mut pos = self.pos();
        let at = if self.append_mode() {
            let end = self.file.append(data)?;
            *pos = end;
            return Ok(end - data.len() as u64);
        } else {
            *pos
        };
        let n = self.file.pwrite(data, at)?;
        *pos = at + n as u64;
        Ok(at)
    }

    /// `lseek`: `whence` 0 from the start, 1 from the offset, 2 from the end.
    pub fn seek(&self, offset: i64, whence: u8) -> Result<u64> {
        let mut pos = self.pos();
        let base = match whence {
            0 => 0,
            1 => *pos as i64,
            2 => self.file.stat()?.size as i64,
            w => return Err(Error::Invalid(format!("seek: whence {w}"))),
        };
        let target = base
            .checked_add(offset)
            .filter(|t| *t >= 0)
            .ok_or_else(|| Error::Invalid(format!("seek to {base}{offset:+}")))?;
        *pos = target as u64;
        Ok(target as u64)
    }
}

/// The bytes one `read(buf)` (at most `len`) returns, as a reply's data. A read asks for as
/// much as the caller's buffer holds, often far more than the file has: it goes into a buffer
/// the thread keeps, so only what was read is copied out, rather than a buffer of `len` being
/// zeroed for every request.
pub(super) fn read_reply(
    len: usize,
    read: impl FnOnce(&mut [u8]) -> Result<usize>,
) -> Result<Vec<u8>> {
    if len > scratch::MAX {
        let mut buf = vec![0u8; len];
        let n = read(&mut buf)?;
        buf.truncate(n);
        return Ok(buf);
    }
    Ok(read_payload(len, read)?.to_vec())
}

/// [`read_reply`] without the copy out: the reply's data is the thread's buffer itself, lent to
/// the reply and given back to the thread that drops it ([`scratch::give`]), which for a
/// worker's reply is the worker, once the completion is sent.
pub(super) fn read_payload(
    len: usize,
    read: impl FnOnce(&mut [u8]) -> Result<usize>,
) -> Result<Payload> {
    if len > scratch::MAX {
        let mut buf = vec![0u8; len];
        let n = read(&mut buf)?;
        buf.truncate(n);
        return Ok(Payload::from(buf));
    }
    let mut buf = scratch::take(len);
    match read(&mut buf[..len]) {
        Ok(n) => Ok(Payload::scratch(buf, n.min(len))),
        Err(e) => {
            scratch::give(buf);
            Err(e)
        }
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // Its OFD record locks and `flock` locks go with the last reference.
        self.fs
            .locks()
            .release_everywhere(Owner::Description(self.id));
    }
}

/// One held description and the client's note on it (what the adopting client needs to rebuild
/// its descriptor: the server does not read it).
pub(super) type HeldItem = (Arc<Desc>, String);

struct Hold {
    items: Vec<HeldItem>,
    /// The session that made it: the hold goes with it unless tied to a process first.
    maker: u64,
    /// The process expected to adopt it; the hold goes when that process exits.
    pidfd: Option<OwnedFd>,
}

/// Every hold not yet adopted, by token.
#[derive(Default)]
pub(super) struct Holds {
    table: Mutex<(u64, HashMap<u64, Hold>)>,
}

impl Holds {
    fn table(&self) -> MutexGuard<'_, (u64, HashMap<u64, Hold>)> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn hold(&self, maker: u64, items: Vec<HeldItem>) -> u64 {
        self.sweep();
        let mut t = self.table();
        t.0 += 1;
        let token = t.0;
        t.1.insert(
            token,
            Hold {
                items,
                maker,
                pidfd: None,
            },
        );
        token
    }

    /// Ties a hold to the process that will adopt it.
    pub fn tie(&self, token: u64, pid: i32) -> Result<()> {
        let fd = crate::sys::proc::pidfd_open(pid)
            .map_err(|e| Error::io(format!("hold {token}: process {pid}"), e))?;
        let mut t = self.table();
        let h =
            t.1.get_mut(&token)
                .ok_or_else(|| Error::BadHandle(format!("hold {token}")))?;
        h.pidfd = Some(fd);
        Ok(())
    }

    /// Takes a hold's descriptions (adopting it, or dropping it with `release`).
    pub fn take(&self, token: u64) -> Result<Vec<HeldItem>> {
        self.table()
            .1
            .remove(&token)
            .map(|h| h.items)
            .ok_or_else(|| Error::BadHandle(format!("hold {token}")))
    }

    /// A session ended: its holds not tied to a process go.
    pub fn session_ended(&self, session: u64) {
        let gone: Vec<Hold> = {
            let mut t = self.table();
            let tokens: Vec<u64> =
                t.1.iter()
                    .filter(|(_, h)| h.maker == session && h.pidfd.is_none())
                    .map(|(k, _)| *k)
                    .collect();
            tokens.iter().filter_map(|k| t.1.remove(k)).collect()
        };
        drop(gone);
        self.sweep();
    }

    /// Drops every hold whose process has exited; whether any hold is left.
    pub fn sweep(&self) -> bool {
        let (gone, left): (Vec<Hold>, bool) = {
            let mut t = self.table();
            let dead: Vec<u64> =
                t.1.iter()
                    .filter(|(_, h)| h.pidfd.as_ref().is_some_and(crate::sys::proc::pidfd_exited))
                    .map(|(k, _)| *k)
                    .collect();
            let gone = dead.iter().filter_map(|k| t.1.remove(k)).collect();
            (gone, !t.1.is_empty())
        };
        // Dropped outside the table's lock: a description's drop takes the lock table's.
        drop(gone);
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_at() -> *const u8 {
        scratch::held_at()
    }

    fn fill(bytes: &'static [u8]) -> impl FnOnce(&mut [u8]) -> Result<usize> {
        move |b| {
            b[..bytes.len()].copy_from_slice(bytes);
            Ok(bytes.len())
        }
    }

    #[test]
    fn a_read_reply_is_the_threads_buffer_lent_and_given_back() {
        let first = read_payload(4096, fill(b"a longer first read")).unwrap();
        assert_eq!(&*first, b"a longer first read");
        let at = first.as_ptr();
        // Lent: the thread holds no buffer of its own while the reply has it.
        assert_ne!(scratch_at(), at);
        drop(first);
        assert_eq!(
            scratch_at(),
            at,
            "the reply's bytes were the thread's buffer"
        );
        // A shorter read into the same buffer shows only its own bytes.
        let second = read_payload(4096, fill(b"short")).unwrap();
        assert_eq!(&*second, b"short");
        assert_eq!(second.as_ptr(), at);
        drop(second);
        // The copying form leaves the buffer with the thread.
        let copied = read_reply(4096, fill(b"copied")).unwrap();
        assert_eq!(copied, b"copied");
        assert_eq!(scratch_at(), at);
    }

    #[test]
    fn a_failed_read_gives_the_buffer_back() {
        drop(read_payload(4096, fill(b"x")).unwrap());
        let at = scratch_at();
        let failed = read_payload(4096, |_| Err(Error::NotFound("gone".into())));
        assert!(matches!(failed, Err(Error::NotFound(_))));
        assert_eq!(scratch_at(), at);
    }

    #[test]
    fn a_reply_dropped_on_another_thread_leaves_this_one_a_new_buffer() {
        let lent = read_payload(4096, fill(b"elsewhere")).unwrap();
        std::thread::spawn(move || drop(lent)).join().unwrap();
        let next = read_payload(4096, fill(b"here")).unwrap();
        assert_eq!(&*next, b"here");
    }

    #[test]
    fn a_read_longer_than_the_buffer_kept_is_not_kept() {
        let long = read_payload(scratch::MAX + 1, fill(b"long")).unwrap();
        assert_eq!(&*long, b"long");
        let at = long.as_ptr();
        drop(long);
        assert_ne!(scratch_at(), at);
    }
}
