//! The read buffer each server thread keeps. A read asks for as much as the caller's buffer
//! holds, often far more than the file has, so it goes into this buffer rather than one of its
//! full length zeroed per request; a reply that lends it ([`Payload`]'s drop) gives it back to
//! the thread that drops it. Its own module so that the reply type and the reads that fill it
//! both reach it without reaching each other.
//!
//! [`Payload`]: crate::serve::protocol::Payload

use std::cell::RefCell;

/// Reads longer than this get a buffer of their own, never kept.
pub(super) const MAX: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The thread's buffer, taken out (not borrowed: a reply holds it past the call), at least
/// `len` long. If the last one has not come back (a reply dropped on another thread), the
/// thread starts a new one.
pub(super) fn take(len: usize) -> Vec<u8> {
    let mut buf = SCRATCH
        .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
        .unwrap_or_default();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    buf
}

/// Gives a read buffer back to this thread, if it is larger than the one the thread holds
/// (its bytes stay as they are: a later read overwrites only what it reads).
pub(super) fn give(buf: Vec<u8>) {
    let _ = SCRATCH.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < buf.len() && buf.len() <= MAX {
                *s = buf;
            }
        }
    });
}

/// Where the thread's kept buffer lies (tests check a reply lends it and gives it back).
#[cfg(test)]
pub(super) fn held_at() -> *const u8 {
    SCRATCH.with_borrow(|s| s.as_ptr())
}
