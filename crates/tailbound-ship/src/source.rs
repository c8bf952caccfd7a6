//! Reading a recording's frames in order, up to a limit (the durable watermark, or the file's
//! end), for shipping.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tailbound::record::frame::{
    check_payload, decode_frame_header, FileHeader, FILE_HEADER_BYTES, FRAME_FLAG_TRAILER,
    FRAME_HEADER_BYTES,
};

use crate::key::StreamId;
use crate::{io_err, ShipError};

/// What [`FrameReader::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A frame: its bytes were appended to the output.
    Frame,
    /// No whole, valid next frame below the limit: not written (or not durable) yet, or the end of
    /// a recording's valid prefix.
    NotYet,
    /// The trailer was read: nothing follows.
    Finished,
}

/// Reads a framed recording front to back. Index 0 is the file header, index `n + 1` the frame
/// with sequence `n`, as in the Kafka keys ([`crate::key`]).
pub struct FrameReader {
    file: File,
    path: PathBuf,
    header: FileHeader,
    header_bytes: [u8; FILE_HEADER_BYTES],
    /// File offset of the next frame.
    pos: u64,
    /// Index of the next record [`FrameReader::next`] returns.
    index: u64,
    finished: bool,
}

impl FrameReader {
    /// Opens a recording and reads its header.
    pub fn open(path: &Path) -> Result<FrameReader, ShipError> {
        let file = File::open(path).map_err(io_err(path, "opening"))?;
        let mut header_bytes = [0u8; FILE_HEADER_BYTES];
        let n = read_at_most(&file, &mut header_bytes, 0).map_err(io_err(path, "reading"))?;
        let header = FileHeader::decode(&header_bytes[..n]).map_err(|p| ShipError::Recording {
            path: path.to_path_buf(),
            reason: format!("not a framed tailbound recording ({p:?})"),
        })?;
        Ok(FrameReader {
            file,
            path: path.to_path_buf(),
            header,
            header_bytes,
            pos: FILE_HEADER_BYTES as u64,
            index: 0,
            finished: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stream this recording is, under recorder id `recorder`.
    pub fn stream(&self, recorder: &str) -> StreamId {
        StreamId {
            recorder: recorder.to_string(),
            created_unix_ns: self.header.created_unix_ns,
            epoch: self.header.epoch,
        }
    }

    /// Index of the record [`FrameReader::next`] returns next.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// File offset just past the last record returned.
    pub fn pos(&self) -> u64 {
        if self.index == 0 {
            0
        } else {
            self.pos
        }
    }

    /// Whether the trailer was read.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The file's current length.
    pub fn file_len(&self) -> Result<u64, ShipError> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(io_err(&self.path, "reading the size of"))
    }

    /// Appends the next record (the header, then each frame whole) to `out` if it ends at or below
    /// `limit` and is the valid next one.
    pub fn next(&mut self, limit: u64, out: &mut Vec<u8>) -> Result<Next, ShipError> {
        if self.finished {
            return Ok(Next::Finished);
        }
        if self.index == 0 {
            if limit < FILE_HEADER_BYTES as u64 {
                return Ok(Next::NotYet);
            }
            out.extend_from_slice(&self.header_bytes);
            self.index = 1;
            return Ok(Next::Frame);
        }
        let end_of_header = self.pos + FRAME_HEADER_BYTES as u64;
        if end_of_header > limit {
            return Ok(Next::NotYet);
        }
        let mut head = [0u8; FRAME_HEADER_BYTES];
        let n =
            read_at_most(&self.file, &mut head, self.pos).map_err(io_err(&self.path, "reading"))?;
        let Ok(h) = decode_frame_header(&head[..n]) else {
            return Ok(Next::NotYet);
        };
        // A frame of an older lap (recycled file) or out of sequence is not the next one.
        if h.epoch != self.header.epoch || h.sequence != self.index - 1 {
            return Ok(Next::NotYet);
        }
        let end = end_of_header + u64::from(h.len);
        if end > limit {
            return Ok(Next::NotYet);
        }
        let start = out.len();
        out.extend_from_slice(&head);
        out.resize(start + FRAME_HEADER_BYTES + h.len as usize, 0);
        let payload = &mut out[start + FRAME_HEADER_BYTES..];
        let got = read_at_most(&self.file, payload, end_of_header)
            .map_err(io_err(&self.path, "reading"))?;
        if got < payload.len() || check_payload(&head, &h, payload).is_err() {
            out.truncate(start);
            return Ok(Next::NotYet);
        }
        self.pos = end;
        self.index += 1;
        if h.flags & FRAME_FLAG_TRAILER != 0 {
            self.finished = true;
        }
        Ok(Next::Frame)
    }

    /// Skips records until the next one is `index` (or the valid records below `limit` run out);
    /// returns whether it got there.
    pub fn skip_to(&mut self, index: u64, limit: u64) -> Result<bool, ShipError> {
        let mut scratch = Vec::new();
        while self.index < index {
            scratch.clear();
            if self.next(limit, &mut scratch)? != Next::Frame {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// `pread` until `buf` is full or the file ends.
fn read_at_most(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], at + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailbound::record::frame::encode_frame;

    fn recording(frames: &[&[u8]], epoch: u64, trailer: bool) -> Vec<u8> {
        let mut b = FileHeader {
            flags: 0,
            epoch,
            created_unix_ns: 9,
        }
        .encode()
        .to_vec();
        for (i, p) in frames.iter().enumerate() {
            encode_frame(&mut b, i as u64, epoch, 0, p);
        }
        if trailer {
            encode_frame(
                &mut b,
                frames.len() as u64,
                epoch,
                FRAME_FLAG_TRAILER,
                &[0; 16],
            );
        }
        b
    }

    #[test]
    fn reads_header_then_frames_up_to_the_limit_and_stops_at_the_trailer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.tbr");
        let bytes = recording(&[b"abc", b"defg"], 1, true);
        std::fs::write(&path, &bytes).unwrap();
        let mut r = FrameReader::open(&path).unwrap();
        let mut out = Vec::new();
        // Nothing durable yet.
        assert_eq!(r.next(10, &mut out).unwrap(), Next::NotYet);
        assert_eq!(r.next(64, &mut out).unwrap(), Next::Frame);
        assert_eq!(out.len(), 64);
        // The first frame is 35 bytes: one byte short of it is not enough.
        assert_eq!(r.next(64 + 34, &mut out).unwrap(), Next::NotYet);
        assert_eq!(r.next(64 + 35, &mut out).unwrap(), Next::Frame);
        let all = bytes.len() as u64;
        assert_eq!(r.next(all, &mut out).unwrap(), Next::Frame);
        assert_eq!(r.next(all, &mut out).unwrap(), Next::Frame);
        assert!(r.finished());
        assert_eq!(r.next(all, &mut out).unwrap(), Next::Finished);
        assert_eq!(out, bytes);
        assert_eq!(r.index(), 4);
    }

    #[test]
    fn stops_at_damage_and_at_frames_of_an_older_lap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.tbr");
        let mut bytes = recording(&[b"abc", b"defg"], 2, false);
        // The second frame carries an older epoch: a previous lap's leftover.
        let old = recording(&[b"abc", b"defg"], 1, false);
        let second = 64 + 35;
        bytes[second..].copy_from_slice(&old[second..]);
        std::fs::write(&path, &bytes).unwrap();
        let mut r = FrameReader::open(&path).unwrap();
        assert!(r.skip_to(2, bytes.len() as u64).unwrap());
        let mut out = Vec::new();
        assert_eq!(r.next(bytes.len() as u64, &mut out).unwrap(), Next::NotYet);
        // A flipped payload bit is not a frame either.
        let mut bytes = recording(&[b"abc"], 1, false);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut r = FrameReader::open(&path).unwrap();
        assert!(!r.skip_to(2, bytes.len() as u64).unwrap());
        assert_eq!(r.index(), 1);
        std::fs::write(
            &path,
            b"not a recording at all, long enough to hold a header's 64 bytes....",
        )
        .unwrap();
        assert!(FrameReader::open(&path).is_err());
    }
}
