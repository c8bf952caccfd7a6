//! The framed recording format: a file header, then one frame per record.
//!
//! All integers little-endian. CRC32C (Castagnoli).
//!
//! File header, 64 bytes at offset 0:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBRECORD` |
//! | 8 | 4 | format version, 1 |
//! | 12 | 4 | flags: bit 0 = the file came from a recycle pool |
//! | 16 | 8 | epoch: 1 for a new file; a recycled file's next lap takes one more than the newest epoch in its old header or first frame |
//! | 24 | 8 | creation time, ns since the Unix epoch |
//! | 32 | 28 | reserved, zero |
//! | 60 | 4 | CRC32C of bytes 0..60 |
//!
//! Frame, 32 bytes of header then the payload, back to back with no padding:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `0x52464254` (`TBFR` on disk) |
//! | 4 | 4 | payload length in bytes (at most 64 MiB) |
//! | 8 | 8 | sequence number: 0 for the first frame, one more for each next |
//! | 16 | 8 | epoch, equal to the file header's |
//! | 24 | 4 | flags: bit 0 = trailer (the recording was finished) |
//! | 28 | 4 | CRC32C of header bytes 0..28 followed by the payload |
//!
//! A trailer frame's payload is 16 bytes: the number of record frames and their payload bytes.

use crate::record::options::RECORD_BYTES_MAX;

pub const FILE_MAGIC: [u8; 8] = *b"TBRECORD";
pub const FORMAT_VERSION: u32 = 1;
pub const FILE_HEADER_BYTES: usize = 64;
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"TBFR");
pub const FRAME_HEADER_BYTES: usize = 32;
pub const FILE_FLAG_RECYCLED: u32 = 1;
pub const FRAME_FLAG_TRAILER: u32 = 1;
pub const TRAILER_PAYLOAD_BYTES: usize = 16;

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub flags: u32,
    pub epoch: u64,
    pub created_unix_ns: u64,
}

/// Why a file header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    TooShort,
    BadMagic,
    BadCrc,
    UnsupportedVersion(u32),
}

impl FileHeader {
    pub fn encode(&self) -> [u8; FILE_HEADER_BYTES] {
        let mut b = [0u8; FILE_HEADER_BYTES];
        b[0..8].copy_from_slice(&FILE_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        b[24..32].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<FileHeader, HeaderProblem> {
        if b.len() < FILE_HEADER_BYTES {
            return Err(HeaderProblem::TooShort);
        }
        if b[0..8] != FILE_MAGIC {
            return Err(HeaderProblem::BadMagic);
        }
        if crc32c::crc32c(&b[0..60]) != u32_at(b, 60) {
            return Err(HeaderProblem::BadCrc);
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(HeaderProblem::UnsupportedVersion(version));
        }
        Ok(FileHeader {
            flags: u32_at(b, 12),
            epoch: u64_at(b, 16),
            created_unix_ns: u64_at(b, 24),
        })
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub sequence: u64,
    pub epoch: u64,
    pub flags: u32,
    pub crc: u32,
}

/// Why the bytes at a position are not the next frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameProblem {
    /// Fewer bytes than a frame header, or than the header's payload length.
    Truncated,
    /// Zero bytes where a frame should start: preallocated space never written.
    Zeroes,
    BadMagic,
    BadLength,
    BadCrc,
}

/// Writes a frame header for `payload` into `out` (32 bytes).
pub fn encode_frame_header(
    out: &mut [u8; FRAME_HEADER_BYTES],
    sequence: u64,
    epoch: u64,
    flags: u32,
    payload: &[u8],
) {
    out[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&sequence.to_le_bytes());
    out[16..24].copy_from_slice(&epoch.to_le_bytes());
    out[24..28].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[0..28]), payload);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a whole frame (header and payload) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, sequence: u64, epoch: u64, flags: u32, payload: &[u8]) {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    encode_frame_header(&mut header, sequence, epoch, flags, payload);
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// Decodes a frame header; the payload is checked with [`check_payload`].
pub fn decode_frame_header(b: &[u8]) -> Result<FrameHeader, FrameProblem> {
    if b.len() < FRAME_HEADER_BYTES {
        return Err(if b.iter().all(|&x| x == 0) {
            FrameProblem::Zeroes
        } else {
            FrameProblem::Truncated
        });
    }
    let b = &b[..FRAME_HEADER_BYTES];
    if b.iter().all(|&x| x == 0) {
        return Err(FrameProblem::Zeroes);
    }
    if u32_at(b, 0) != FRAME_MAGIC {
        return Err(FrameProblem::BadMagic);
    }
    let len = u32_at(b, 4);
    if u64::from(len) > RECORD_BYTES_MAX {
        return Err(FrameProblem::BadLength);
    }
    Ok(FrameHeader {
        len,
        sequence: u64_at(b, 8),
        epoch: u64_at(b, 16),
        flags: u32_at(b, 24),
        crc: u32_at(b, 28),
    })
}

/// Checks a frame's CRC over its raw header bytes and payload.
pub fn check_payload(
    header_bytes: &[u8],
    header: &FrameHeader,
    payload: &[u8],
) -> Result<(), FrameProblem> {
    if payload.len() != header.len as usize {
        return Err(FrameProblem::Truncated);
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header_bytes[0..28]), payload);
    if crc != header.crc {
        return Err(FrameProblem::BadCrc);
    }
    Ok(())
}

/// The trailer's payload: record frames and their payload bytes.
pub fn trailer_payload(frames: u64, payload_bytes: u64) -> [u8; TRAILER_PAYLOAD_BYTES] {
    let mut p = [0u8; TRAILER_PAYLOAD_BYTES];
    p[0..8].copy_from_slice(&frames.to_le_bytes());
    p[8..16].copy_from_slice(&payload_bytes.to_le_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_whole(bytes: &[u8]) -> Result<(FrameHeader, &[u8]), FrameProblem> {
        let h = decode_frame_header(bytes)?;
        let end = FRAME_HEADER_BYTES + h.len as usize;
        if bytes.len() < end {
            return Err(FrameProblem::Truncated);
        }
        let payload = &bytes[FRAME_HEADER_BYTES..end];
        check_payload(bytes, &h, payload)?;
        Ok((h, payload))
    }

    #[test]
    fn file_header_round_trips_and_rejects_damage() {
        let h = FileHeader {
            flags: FILE_FLAG_RECYCLED,
            epoch: 7,
            created_unix_ns: 123,
        };
        let b = h.encode();
        assert_eq!(FileHeader::decode(&b), Ok(h));
        let mut bad = b;
        bad[17] ^= 1;
        assert_eq!(FileHeader::decode(&bad), Err(HeaderProblem::BadCrc));
        assert_eq!(FileHeader::decode(&b[..10]), Err(HeaderProblem::TooShort));
        assert_eq!(FileHeader::decode(&[0u8; 64]), Err(HeaderProblem::BadMagic));
    }

    proptest! {
        #[test]
        fn any_payload_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..2000),
                                   seq in any::<u64>(), epoch in any::<u64>()) {
            let mut out = Vec::new();
            encode_frame(&mut out, seq, epoch, 0, &payload);
            let (h, p) = decode_whole(&out).unwrap();
            prop_assert_eq!(h.sequence, seq);
            prop_assert_eq!(h.epoch, epoch);
            prop_assert_eq!(p, &payload[..]);
        }

        #[test]
        fn any_single_bit_flip_is_detected(payload in proptest::collection::vec(any::<u8>(), 1..500),
                                           bit in any::<prop::sample::Index>()) {
            let mut out = Vec::new();
            encode_frame(&mut out, 3, 1, 0, &payload);
            let i = bit.index(out.len() * 8);
            out[i / 8] ^= 1 << (i % 8);
            prop_assert!(decode_whole(&out).is_err());
        }

        #[test]
        fn any_truncation_is_detected(payload in proptest::collection::vec(any::<u8>(), 1..500),
                                      cut in any::<prop::sample::Index>()) {
            let mut out = Vec::new();
            encode_frame(&mut out, 3, 1, 0, &payload);
            let keep = cut.index(out.len());
            prop_assert!(decode_whole(&out[..keep]).is_err());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_whole(&bytes);
            let _ = FileHeader::decode(&bytes);
        }
    }

    #[test]
    fn zeroes_and_oversized_lengths_are_named() {
        assert_eq!(decode_frame_header(&[0u8; 40]), Err(FrameProblem::Zeroes));
        assert_eq!(decode_frame_header(&[0u8; 5]), Err(FrameProblem::Zeroes));
        let mut h = [0u8; FRAME_HEADER_BYTES];
        encode_frame_header(&mut h, 0, 1, 0, b"x");
        h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_frame_header(&h), Err(FrameProblem::BadLength));
    }
}
