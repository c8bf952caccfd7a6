//! The Kafka record key: which recorder, which recording, which frame.
//!
//! `TBS1`, the recorder id's length (u16 LE) and its UTF-8 bytes, then the recording's creation
//! time (ns) and epoch from its file header, then the record's index (all u64 LE). Index 0 is the
//! 64-byte file header; index `n + 1` is the frame with sequence number `n` (the trailer
//! included). The value is those bytes verbatim, so a fetched recording is the original byte for
//! byte.

/// Key prefix.
pub const KEY_MAGIC: [u8; 4] = *b"TBS1";
/// Longest recorder id, in bytes.
pub const RECORDER_ID_MAX: usize = 1024;

/// One recording of one recorder: what a key names besides the index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub recorder: String,
    pub created_unix_ns: u64,
    pub epoch: u64,
}

impl StreamId {
    /// The key of record `index` of this stream.
    pub fn key(&self, index: u64) -> Vec<u8> {
        let id = self.recorder.as_bytes();
        let mut k = Vec::with_capacity(4 + 2 + id.len() + 24);
        k.extend_from_slice(&KEY_MAGIC);
        k.extend_from_slice(&(id.len() as u16).to_le_bytes());
        k.extend_from_slice(id);
        k.extend_from_slice(&self.created_unix_ns.to_le_bytes());
        k.extend_from_slice(&self.epoch.to_le_bytes());
        k.extend_from_slice(&index.to_le_bytes());
        k
    }
}

/// A decoded key, borrowing the recorder id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    pub recorder: &'a [u8],
    pub created_unix_ns: u64,
    pub epoch: u64,
    pub index: u64,
}

impl KeyRef<'_> {
    /// Whether this key belongs to `stream`.
    pub fn is_of(&self, stream: &StreamId) -> bool {
        self.recorder == stream.recorder.as_bytes()
            && self.created_unix_ns == stream.created_unix_ns
            && self.epoch == stream.epoch
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes a key; `None` for anything that is not one of ours (other producers share topics).
pub fn decode(k: &[u8]) -> Option<KeyRef<'_>> {
    if k.len() < 6 || k[0..4] != KEY_MAGIC {
        return None;
    }
    let len = u16::from_le_bytes([k[4], k[5]]) as usize;
    if k.len() != 6 + len + 24 {
        return None;
    }
    let at = 6 + len;
    Some(KeyRef {
        recorder: &k[6..at],
        created_unix_ns: u64_at(k, at),
        epoch: u64_at(k, at + 8),
        index: u64_at(k, at + 16),
    })
}

/// Checks a recorder id: 1 to [`RECORDER_ID_MAX`] bytes, no control characters.
pub fn check_recorder_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > RECORDER_ID_MAX || id.chars().any(char::is_control) {
        return Err(format!(
            "recorder id {id:?}: 1 to {RECORDER_ID_MAX} bytes without control characters"
        ));
    }
    Ok(())
}

/// The partition a recorder's records go to, of `partitions`: the same one always, so its
/// records keep their order.
pub fn partition_for(recorder: &str, partitions: usize) -> i32 {
    (crc32c::crc32c(recorder.as_bytes()) as usize % partitions.max(1)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_foreign_keys_are_not_ours() {
        let s = StreamId {
            recorder: "truck-7/rec.tbr".into(),
            created_unix_ns: 11,
            epoch: 3,
        };
        let k = s.key(42);
        let d = decode(&k).unwrap();
        assert!(d.is_of(&s));
        assert_eq!(d.index, 42);
        let other = StreamId {
            epoch: 4,
            ..s.clone()
        };
        assert!(!d.is_of(&other));
        for junk in [&b""[..], b"TBS1", b"user-key", &k[..k.len() - 1]] {
            assert!(decode(junk).is_none());
        }
        let mut longer = k.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..10_000 {
            let n = rng.usize(0..64);
            let mut b: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
            if n >= 4 && rng.bool() {
                b[0..4].copy_from_slice(&KEY_MAGIC);
            }
            let _ = decode(&b);
        }
    }
}
