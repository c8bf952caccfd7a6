//! Poisoning a pool: after a failed write or a panic, what is on storage may no longer match
//! memory (or memory may be half changed), so every later call fails with
//! [`Error::Poisoned`](super::Error::Poisoned) (`EIO`) until the pool is reopened, which
//! recovers it from storage.
//!
//! A panic poisons the pool before anything else is written: whatever the panicking thread
//! holds (`meta`, an ahead payload, the last handle) poisons it as the panic unwinds through it.

use crate::tbfs::fs::Fs;
use crate::tbfs::inode::InodeState;
use crate::tbfs::log::AheadPayload;
use crate::tbfs::state::Engine;
use crate::tbfs::{Error, Result};

impl Fs {
    /// Poisons the pool: every later call on it (and on its other handles and files) fails with
    /// `Error::Poisoned(reason)`. For a caller that caught a panic inside a call on the pool, or
    /// otherwise knows its state cannot be trusted. The first reason is kept.
    pub fn poison_with(&self, reason: impl Into<String>) {
        self.inner.poison_reason(reason.into());
    }

    /// Why the pool is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.poison.reason()
    }
}

impl Engine {
    /// Poisons the pool with `reason`, unless it is poisoned already.
    pub(super) fn poison_reason(&self, reason: String) {
        self.poison.set(reason);
    }

    /// Poisons the pool if this thread is unwinding from a panic (called from a `Drop` that
    /// would otherwise go on to write): `what` says what the panic interrupted.
    pub(super) fn poison_if_unwinding(&self, what: &str) {
        if let Some(p) = crate::panics::unwinding() {
            self.poison_reason(format!("{what} {p}"));
        }
    }
}

/// Held while a thread writes an ahead payload or waits for its chunks: if that panics, the
/// pool is poisoned and the payload marked failed, so the threads waiting for it return the
/// error instead of waiting for ever.
pub(crate) struct FailOnUnwind<'a> {
    pub inner: &'a Engine,
    pub payload: &'a AheadPayload,
}

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.inner.poison_if_unwinding("writing a log payload:");
            self.payload.finish(false);
        }
    }
}

impl Engine {
    /// A count that must not go below zero was about to: its bookkeeping has a bug, and memory
    /// no longer matches what was counted. Poisons the pool with `what` and returns the error.
    pub(super) fn poison_bug(&self, what: String) -> Error {
        let why = format!("bug: {what}");
        self.poison_reason(why.clone());
        Error::Poisoned(why)
    }

    /// Takes one link from `st`, inode `ino`'s state; at zero the pool is poisoned
    /// instead (the count stays at zero, never wraps).
    pub(super) fn drop_nlink(&self, st: &mut InodeState, ino: u64) -> Result<()> {
        if st.drop_link() {
            Ok(())
        } else {
            Err(self.poison_bug(format!("inode {ino}'s link count would go below zero")))
        }
    }

    /// A handle to inode `ino` closed: takes it from `st`'s count of open handles;
    /// at zero the pool is poisoned instead (the count stays at zero, never wraps).
    pub(super) fn drop_open(&self, st: &mut InodeState, ino: u64) -> Result<()> {
        if st.close_handle() {
            Ok(())
        } else {
            Err(self.poison_bug(format!("inode {ino}'s open handles would go below zero")))
        }
    }
}
