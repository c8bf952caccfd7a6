//! Rebuilding a recording from a topic, and checking a copy against its original.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;

use serde::Serialize;

use crate::kafka::Dest;
use crate::key::{self, check_recorder_id};
use crate::source::{FrameReader, Next};
use crate::{io_err, KafkaUrl, ShipError};

/// What [`fetch`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FetchReport {
    pub recorder: String,
    pub partition: i32,
    /// Records of this recorder read from the partition.
    pub records: u64,
    /// Frames written to the output (the trailer included, the file header not).
    pub frames: u64,
    pub bytes: u64,
    /// Records whose index had already been written: a duplicate on the broker (not written).
    pub duplicates: u64,
    /// Indexes missing on the broker; the output ends before the first.
    pub missing: u64,
    /// Records of other recordings under the same id (an earlier recording, or an older lap of a
    /// recycled file): the output is the newest recording whose header the topic holds.
    pub other_recordings: u64,
    /// The last record written was a trailer.
    pub finished: bool,
}

/// Reads `recorder`'s records from the topic and writes its newest recording to `out`.
pub fn fetch(url: &KafkaUrl, recorder: &str, out: &Path) -> Result<FetchReport, ShipError> {
    check_recorder_id(recorder).map_err(ShipError::Usage)?;
    let rt = crate::runtime()?;
    rt.block_on(async {
        let dest = Dest::connect_to(url, recorder, None).await?;
        let file = File::create(out).map_err(io_err(out, "creating"))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let mut report = FetchReport {
            recorder: recorder.to_string(),
            partition: dest.partition,
            ..FetchReport::default()
        };
        let mut current: Option<(u64, u64)> = None;
        let mut expected = 0u64;
        let mut gap = false;
        let mut offset = dest.start_offset().await?;
        let mut end = dest.end_offset().await?;
        while offset < end {
            let (records, high_watermark) = dest.fetch(offset).await?;
            end = end.max(high_watermark);
            if records.is_empty() {
                break;
            }
            for r in records {
                offset = offset.max(r.offset + 1);
                let Some(k) = r.record.key.as_deref().and_then(key::decode) else {
                    continue;
                };
                if k.recorder != recorder.as_bytes() {
                    continue;
                }
                report.records += 1;
                let stream = (k.created_unix_ns, k.epoch);
                if k.index == 0 && current != Some(stream) {
                    // A newer recording under this id: it replaces what was written.
                    if current.is_some() {
                        report.other_recordings += expected;
                    }
                    w.flush().map_err(io_err(out, "writing"))?;
                    w.get_mut().set_len(0).map_err(io_err(out, "truncating"))?;
                    w.rewind().map_err(io_err(out, "seeking in"))?;
                    current = Some(stream);
                    expected = 0;
                    gap = false;
                    report.frames = 0;
                    report.bytes = 0;
                    report.missing = 0;
                    report.duplicates = 0;
                    report.finished = false;
                }
                if current != Some(stream) {
                    report.other_recordings += 1;
                    continue;
                }
                if k.index < expected {
                    report.duplicates += 1;
                    continue;
                }
                if k.index > expected {
                    report.missing += k.index - expected;
                    gap = true;
                    expected = k.index + 1;
                    continue;
                }
                expected += 1;
                if gap {
                    continue;
                }
                let value = r.record.value.unwrap_or_default();
                w.write_all(&value).map_err(io_err(out, "writing"))?;
                report.bytes += value.len() as u64;
                if k.index > 0 {
                    report.frames += 1;
                    report.finished = value
                        .get(24..28)
                        .is_some_and(|f| u32::from_le_bytes([f[0], f[1], f[2], f[3]]) & 1 != 0);
                }
            }
        }
        let file = w
            .into_inner()
            .map_err(|e| io_err(out, "writing")(e.into_error()))?;
        file.sync_all().map_err(io_err(out, "flushing (fsync)"))?;
        if current.is_none() {
            return Err(ShipError::Usage(format!(
                "{url}: no recording of recorder {recorder:?} in partition {}",
                dest.partition
            )));
        }
        Ok(report)
    })
}

/// How a copy compares with its original, frame by frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompareReport {
    /// Valid frames of the original (the trailer included).
    pub original_frames: u64,
    pub copy_frames: u64,
    /// Frames equal byte for byte at the same position, from the first.
    pub matching: u64,
    /// Frames of the original that the copy lacks or has different.
    pub lost: u64,
    /// Frames of the copy past the original's end.
    pub extra: u64,
    /// The file headers are equal.
    pub same_header: bool,
}

impl CompareReport {
    /// The copy is the original, frame for frame.
    pub fn identical(&self) -> bool {
        self.same_header && self.lost == 0 && self.extra == 0
    }
}

/// Compares the valid frames of `copy` with those of `original`.
pub fn compare(original: &Path, copy: &Path) -> Result<CompareReport, ShipError> {
    let mut a = FrameReader::open(original)?;
    let mut b = FrameReader::open(copy)?;
    let (alen, blen) = (a.file_len()?, b.file_len()?);
    let mut report = CompareReport::default();
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    let mut diverged = false;
    loop {
        fa.clear();
        fb.clear();
        let na = a.next(alen, &mut fa)? == Next::Frame;
        let nb = b.next(blen, &mut fb)? == Next::Frame;
        if !na && !nb {
            break;
        }
        let index = a.index().max(b.index()) - 1;
        if index == 0 {
            report.same_header = na && nb && fa == fb;
            continue;
        }
        if na {
            report.original_frames += 1;
        }
        if nb {
            report.copy_frames += 1;
        }
        match (na, nb) {
            (true, true) if !diverged && fa == fb => report.matching += 1,
            (true, _) => {
                diverged = true;
                report.lost += 1;
            }
            (false, true) => report.extra += 1,
            (false, false) => break,
        }
    }
    Ok(report)
}
