//! `verify`: how much of a framed recording is intact, as after a crash.
//!
//! Reads the file front to back and stops at the first frame that is not the exact next one: torn,
//! zeroed (preallocated space never written), corrupt, from an earlier lap of a recycled file, or
//! out of sequence. Everything before that point is the valid prefix.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Serialize;

use crate::record::frame::{
    check_payload, decode_frame_header, FileHeader, FrameProblem, HeaderProblem, FILE_HEADER_BYTES,
    FRAME_FLAG_TRAILER, FRAME_HEADER_BYTES,
};
use crate::record::RecordError;

/// Why the valid prefix ends where it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The file ends exactly after a frame.
    EndOfFile,
    /// A trailer marks the recording finished.
    Trailer,
    /// Zero bytes follow: space reserved but never written.
    Zeroes,
    /// The file ends inside a frame (a torn write).
    Truncated,
    BadMagic,
    BadLength,
    BadCrc,
    /// A frame from another lap of a recycled file (its epoch is not the header's).
    StaleEpoch,
    /// A frame whose sequence number is not the next one.
    BadSequence,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Intact record frames (the trailer is not counted).
    pub frames: u64,
    /// The file's length.
    pub bytes: u64,
    /// Length of the valid prefix: the header, the intact frames and the trailer if any.
    pub valid_bytes: u64,
    /// Payload bytes of the intact frames.
    pub payload_bytes: u64,
    /// Sequence number of the last intact frame.
    pub last_sequence: Option<u64>,
    pub epoch: Option<u64>,
    /// A trailer was found: the recording was finished.
    pub finished: bool,
    pub stop: StopReason,
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
pub fn read_full(r: &mut (impl Read + ?Sized), buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Verifies the framed recording at `path`.
pub fn verify(path: impl AsRef<Path>) -> Result<VerifyReport, RecordError> {
    let path = path.as_ref();
    let io = |op: &'static str| {
        move |source| RecordError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    };
    let file = File::open(path).map_err(io("opening"))?;
    let bytes = file.metadata().map_err(io("reading the size of"))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; FILE_HEADER_BYTES];
    let n = read_full(&mut r, &mut head).map_err(io("reading"))?;
    let header = FileHeader::decode(&head[..n]).map_err(|problem| RecordError::NotARecording {
        path: path.to_path_buf(),
        reason: match problem {
            HeaderProblem::TooShort => "shorter than a recording's header".to_string(),
            HeaderProblem::BadMagic => {
                "no tailbound recording header (raw recordings cannot be verified)".to_string()
            }
            HeaderProblem::BadCrc => "the recording header's checksum does not match".to_string(),
            HeaderProblem::UnsupportedVersion(v) => format!("format version {v} is not supported"),
        },
    })?;
    let mut report = VerifyReport {
        frames: 0,
        bytes,
        valid_bytes: FILE_HEADER_BYTES as u64,
        payload_bytes: 0,
        last_sequence: None,
        epoch: Some(header.epoch),
        finished: false,
        stop: StopReason::EndOfFile,
    };
    let mut frame_head = [0u8; FRAME_HEADER_BYTES];
    let mut payload = Vec::new();
    loop {
        let n = read_full(&mut r, &mut frame_head).map_err(io("reading"))?;
        if n == 0 {
            report.stop = StopReason::EndOfFile;
            break;
        }
        let h = match decode_frame_header(&frame_head[..n]) {
            Ok(h) => h,
            Err(p) => {
                report.stop = match p {
                    FrameProblem::Zeroes => StopReason::Zeroes,
                    FrameProblem::Truncated => StopReason::Truncated,
                    FrameProblem::BadMagic => StopReason::BadMagic,
                    FrameProblem::BadLength => StopReason::BadLength,
                    FrameProblem::BadCrc => StopReason::BadCrc,
                };
                break;
            }
        };
        payload.resize(h.len as usize, 0);
        let got = read_full(&mut r, &mut payload).map_err(io("reading"))?;
        if got < payload.len() {
            report.stop = StopReason::Truncated;
            break;
        }
        if check_payload(&frame_head, &h, &payload).is_err() {
            report.stop = StopReason::BadCrc;
            break;
        }
        if h.epoch != header.epoch {
            report.stop = StopReason::StaleEpoch;
            break;
        }
        let expected = report.last_sequence.map_or(0, |s| s + 1);
        if h.sequence != expected {
            report.stop = StopReason::BadSequence;
            break;
        }
        report.valid_bytes += (FRAME_HEADER_BYTES + payload.len()) as u64;
        if h.flags & FRAME_FLAG_TRAILER != 0 {
            report.finished = true;
            report.stop = StopReason::Trailer;
            break;
        }
        report.frames += 1;
        report.payload_bytes += payload.len() as u64;
        report.last_sequence = Some(h.sequence);
    }
    Ok(report)
}
