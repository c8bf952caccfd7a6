//! For tests that play a broken or hostile client: raw writes into a session's memfd.

use std::sync::atomic::Ordering;

use super::shm::futex_wake;
use super::{ClientRings, HEADER_BYTES, REQUEST_CTRL};

/// The memfd's length in bytes.
pub fn len(rings: &ClientRings) -> usize {
    rings.requests.mapping().len()
}

/// The byte offset of the request ring's published position and of its data area.
pub const REQUEST_TAIL_AT: usize = REQUEST_CTRL.tail;
pub const REQUEST_DATA_AT: usize = HEADER_BYTES;

/// Writes `bytes` at `offset` of the memfd (clipped to it), then wakes whoever parked on the
/// request ring.
pub fn scribble(rings: &ClientRings, offset: usize, bytes: &[u8]) {
    let map = rings.requests.mapping();
    let end = offset.saturating_add(bytes.len()).min(map.len());
    if offset < end {
        map.write(offset, &bytes[..end - offset]);
    }
    if let Some(w) = map.word(REQUEST_CTRL.tail) {
        futex_wake(w, i32::MAX);
    }
}

/// Stores `v` in the word at `offset` and wakes the request ring's reader.
pub fn poke(rings: &ClientRings, offset: usize, v: u32) {
    let map = rings.requests.mapping();
    if let Some(w) = map.word(offset) {
        w.store(v, Ordering::SeqCst);
    }
    if let Some(w) = map.word(REQUEST_CTRL.tail) {
        futex_wake(w, i32::MAX);
    }
}
