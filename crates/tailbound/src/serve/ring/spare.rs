//! Frame buffers kept for the next frame. A frame taken off a ring is copied into a buffer of
//! its announced length; for a read's or a write's data that buffer is tens or hundreds of KiB,
//! and taken fresh from the allocator each time it can be a new mapping (glibc serves blocks
//! this large with `mmap`) whose pages fault in as the copy touches them and are unmapped again
//! when the data is dropped. In a client under the shim the allocator is the program's, so the
//! transport keeps a few such buffers itself and gets one back when a frame's data
//! ([`Payload`](crate::serve::protocol::Payload)) is dropped.
//!
//! One set per process, not per thread: a client thread that drains the completion ring takes
//! buffers for other threads' completions, which those threads drop. The set is only ever
//! tried, never waited for (a thread that finds it busy allocates or frees as before), so no
//! thread waits on another's allocation, and a child forked while another thread held it just
//! allocates.

use std::sync::Mutex;

/// Buffers below this capacity are neither kept nor handed out.
pub(crate) const MIN: usize = 16 * 1024;
/// Buffers above this capacity are neither kept nor handed out.
pub(crate) const MAX: usize = 512 * 1024 + 4096;
/// At most this many bytes of capacity are kept idle.
pub(crate) const KEEP_BYTES: usize = 4 << 20;

/// Idle buffers and their capacity in all.
#[derive(Default)]
pub(crate) struct Spares {
    kept: Mutex<(Vec<Vec<u8>>, usize)>,
}

static SPARES: Spares = Spares::new();

impl Spares {
    pub(crate) const fn new() -> Spares {
        Spares {
            kept: Mutex::new((Vec::new(), 0)),
        }
    }

    /// An empty buffer with room for at least `len` bytes: a kept one that is large enough,
    /// or a new one.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        if (MIN..=MAX).contains(&len) {
            if let Ok(mut k) = self.kept.try_lock() {
                if let Some(i) = k.0.iter().position(|b| b.capacity() >= len) {
                    let mut b = k.0.swap_remove(i);
                    k.1 -= b.capacity();
                    drop(k);
                    b.clear();
                    return b;
                }
            }
        }
        Vec::with_capacity(len)
    }

    /// Keeps `buf` for a later [`Spares::take`] if its capacity is within bounds and
    /// [`KEEP_BYTES`] has room for it; else drops it.
    pub(crate) fn give(&self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if !(MIN..=MAX).contains(&cap) {
            return;
        }
        // A buffer not kept is dropped once the set is let go: freeing a large block may be a
        // system call.
        if let Ok(mut k) = self.kept.try_lock() {
            if k.1 + cap <= KEEP_BYTES {
                k.1 += cap;
                k.0.push(buf);
            }
        }
    }

    #[cfg(test)]
    fn capacities(&self) -> Vec<usize> {
        let k = self.kept.lock().unwrap();
        assert_eq!(k.1, k.0.iter().map(|b| b.capacity()).sum::<usize>());
        k.0.iter().map(|b| b.capacity()).collect()
    }
}

/// [`Spares::take`] from the process's set.
pub(crate) fn take(len: usize) -> Vec<u8> {
    SPARES.take(len)
}

/// [`Spares::give`] to the process's set.
pub(crate) fn give(buf: Vec<u8>) {
    SPARES.give(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_empty() {
        let s = Spares::new();
        let mut b = s.take(100 * 1024);
        b.extend_from_slice(&[7u8; 1000]);
        let at = b.as_ptr();
        s.give(b);
        let again = s.take(64 * 1024);
        assert_eq!(again.as_ptr(), at, "the kept buffer is handed out");
        assert!(again.is_empty());
        assert!(again.capacity() >= 100 * 1024);
        assert!(s.capacities().is_empty());
    }

    #[test]
    fn small_and_large_buffers_are_not_kept() {
        let s = Spares::new();
        s.give(Vec::with_capacity(MIN - 1));
        s.give(Vec::with_capacity(MAX + 1));
        assert!(s.capacities().is_empty());
        // Lengths out of bounds never take a kept buffer.
        s.give(Vec::with_capacity(MAX));
        assert!(s.take(MIN - 1).capacity() < MAX);
        assert!(s.take(MAX + 1).capacity() > MAX);
        assert_eq!(s.capacities(), vec![MAX]);
        drop(s.take(MAX));
        assert!(s.capacities().is_empty());
    }

    #[test]
    fn no_more_than_keep_bytes_are_kept() {
        let s = Spares::new();
        let n = KEEP_BYTES / MAX + 3;
        for _ in 0..n {
            s.give(Vec::with_capacity(MAX));
        }
        assert_eq!(s.capacities().len(), KEEP_BYTES / MAX);
        // A length no kept buffer holds gets a new one, and the kept ones stay.
        let small = Spares::new();
        small.give(Vec::with_capacity(MIN));
        assert!(small.take(2 * MIN).capacity() >= 2 * MIN);
        assert_eq!(small.capacities(), vec![MIN]);
    }

    #[test]
    fn a_buffer_taken_on_one_thread_is_given_back_on_another() {
        let s = Spares::new();
        let b = s.take(MIN);
        let at = b.as_ptr();
        std::thread::scope(|t| {
            t.spawn(|| s.give(b));
        });
        let again = s.take(MIN);
        assert_eq!(again.as_ptr(), at);
    }

    #[test]
    fn a_busy_set_is_passed_by() {
        let s = Spares::new();
        s.give(Vec::with_capacity(MIN));
        let held = s.kept.lock().unwrap();
        // Taking and giving while another holds the set neither waits nor changes it.
        let fresh = s.take(MIN);
        s.give(fresh);
        drop(held);
        assert_eq!(s.capacities(), vec![MIN]);
    }
}
