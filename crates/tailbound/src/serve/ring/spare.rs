//! Frame buffers kept per thread for the next frame. A frame taken off a ring is copied into a
//! buffer of its announced length; for a read's or a write's data that buffer is tens or
//! hundreds of KiB, and taken fresh from the allocator each time it can be a new mapping (glibc
//! serves blocks this large with `mmap`) whose pages fault in as the copy touches them and are
//! unmapped again when the data is dropped. In a client under the shim the allocator is the
//! program's, so the transport keeps a few such buffers itself and gives one back when a frame's
//! data ([`Payload`](crate::serve::protocol::Payload)) is dropped.
//!
//! A thread keeps at most [`KEEP`] buffers of [`MIN`]..=[`MAX`] bytes of capacity; smaller ones
//! are cheap to allocate, larger ones are rare and too big to keep idle in every thread.

use std::cell::RefCell;

/// Buffers below this capacity are neither kept nor handed out.
pub(crate) const MIN: usize = 16 * 1024;
/// Buffers above this capacity are let go: a thread keeps at most `KEEP * MAX` bytes idle.
pub(crate) const MAX: usize = 512 * 1024 + 4096;
/// How many buffers a thread keeps.
pub(crate) const KEEP: usize = 2;

thread_local! {
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `len` bytes: a kept one that is large enough, or a
/// new one.
pub(crate) fn take(len: usize) -> Vec<u8> {
    if (MIN..=MAX).contains(&len) {
        // `try_with`: during the thread's exit the spares may be gone already.
        let kept = SPARE
            .try_with(|s| {
                let mut s = s.try_borrow_mut().ok()?;
                let i = s.iter().position(|b| b.capacity() >= len)?;
                Some(s.swap_remove(i))
            })
            .ok()
            .flatten();
        if let Some(mut b) = kept {
            b.clear();
            return b;
        }
    }
    Vec::with_capacity(len)
}

/// Keeps `buf` for a later [`take`] if its capacity is within bounds and the thread has room;
/// else drops it. A full thread keeps the larger of `buf` and its smallest kept buffer.
pub(crate) fn give(buf: Vec<u8>) {
    if !(MIN..=MAX).contains(&buf.capacity()) {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        if s.len() < KEEP {
            s.push(buf);
            return;
        }
        if let Some(smallest) = s.iter_mut().min_by_key(|b| b.capacity()) {
            if smallest.capacity() < buf.capacity() {
                *smallest = buf;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Vec<usize> {
        SPARE.with_borrow(|s| s.iter().map(|b| b.capacity()).collect())
    }

    #[test]
    fn a_given_buffer_is_taken_again_empty() {
        let mut b = take(100 * 1024);
        b.extend_from_slice(&[7u8; 1000]);
        let at = b.as_ptr();
        give(b);
        let again = take(64 * 1024);
        assert_eq!(again.as_ptr(), at, "the kept buffer is handed out");
        assert!(again.is_empty());
        assert!(again.capacity() >= 100 * 1024);
        assert!(kept().is_empty());
    }

    #[test]
    fn small_and_large_buffers_are_not_kept() {
        give(Vec::with_capacity(MIN - 1));
        give(Vec::with_capacity(MAX + 1));
        assert!(kept().is_empty());
        // Lengths out of bounds never take a kept buffer.
        give(Vec::with_capacity(MAX));
        assert!(take(MIN - 1).capacity() < MAX);
        assert!(take(MAX + 1).capacity() > MAX);
        assert_eq!(kept(), vec![MAX]);
        drop(take(MAX));
        assert!(kept().is_empty());
    }

    #[test]
    fn a_full_thread_keeps_the_largest() {
        for cap in [MIN, 2 * MIN, 3 * MIN, MIN + 1] {
            give(Vec::with_capacity(cap));
        }
        let mut k = kept();
        k.sort_unstable();
        assert_eq!(k.len(), KEEP);
        assert_eq!(k, vec![2 * MIN, 3 * MIN][..KEEP].to_vec());
        // A length no kept buffer holds gets a new one, and the kept ones stay.
        let b = take(4 * MIN);
        assert!(b.capacity() >= 4 * MIN);
        assert_eq!(kept().len(), KEEP);
    }
}
