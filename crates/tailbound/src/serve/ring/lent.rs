//! A request's data in the request data area as the server takes it: where it lies, read there
//! (the area's client end is `area`).

use std::sync::Arc;

use super::shm::Mapping;

/// A request's data left where the client put it in the data area, for the server to read there:
/// the bytes are copied once, by whatever takes them (the engine, into the pool). The client
/// lets go of the chunks only when the call's completion comes back, so what the server reads
/// before it answers is the data as the client wrote it; a client that rewrites them meanwhile
/// spoils only its own write. The mapping is kept as long as any `Lent` of it.
#[derive(Debug, Clone)]
pub(crate) struct Lent {
    map: Arc<Mapping>,
    at: usize,
    len: usize,
}

impl Lent {
    /// The `len` bytes at byte `at` of `map`; `None` if they do not lie inside it.
    pub fn new(map: Arc<Mapping>, at: usize, len: usize) -> Option<Lent> {
        map.slice(at, len)?;
        Some(Lent { map, at, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes, where they lie.
    pub fn bytes(&self) -> &[u8] {
        // Checked in `new`: the fallback is never reached.
        self.map.slice(self.at, self.len).unwrap_or(&[])
    }

    /// Appends a copy of the bytes to `out`.
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        // Checked in `new`: always inside the mapping.
        let inside = self.map.read_append(self.at, self.len, out);
        debug_assert!(inside);
    }
}
