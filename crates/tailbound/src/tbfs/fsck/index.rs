//! Reading the device for a check: the log index of every segment, and the pool's geometry.

use std::collections::HashMap;

use crate::dev::Device;
use crate::tbfs::format::{self, *};
use crate::tbfs::limits::FSCK_READ_BYTES;
use crate::tbfs::{Error, Result};

pub(super) struct Reader<'a> {
    pub(super) dev: &'a dyn Device,
    pub(super) blocks: u64,
}

impl Reader<'_> {
    pub(super) fn block(&self, b: u64) -> std::result::Result<Box<format::Block>, String> {
        if b >= self.blocks {
            return Err(format!("block {b} is past the end of the device"));
        }
        let mut buf = Box::new([0u8; BLOCK]);
        self.dev
            .read_at(b * BLOCK_U64, &mut buf[..])
            .map_err(|e| format!("reading block {b}: {e}"))?;
        Ok(buf)
    }

    /// Blocks `[from, to)` clipped to the device.
    pub(super) fn range(&self, from: u64, to: u64) -> Result<Vec<u8>> {
        let to = to.min(self.blocks);
        // Saturating: a range that starts past the device's end reads nothing.
        let mut out = vec![0u8; (to.saturating_sub(from) * BLOCK_U64) as usize];
        let mut at = 0usize;
        while at < out.len() {
            let n = (out.len() - at).min(FSCK_READ_BYTES as usize);
            let off = from * BLOCK_U64 + at as u64;
            self.dev.read_at(off, &mut out[at..at + n]).map_err(|e| {
                Error::io(
                    format!("{} device: reading {n} bytes at {off}", self.dev.kind()),
                    e,
                )
            })?;
            at += n;
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// The log index: every log found in the segments

#[derive(Debug)]
pub(super) struct LogEntry {
    pub(super) start: u64,
    pub(super) segment: u64,
    pub(super) summary: Summary,
    pub(super) crc: u32,
    pub(super) payload_ok: bool,
}

impl LogEntry {
    pub(super) fn end(&self) -> u64 {
        self.start + 1 + self.summary.payload_blocks as u64
    }

    /// The descriptor covering `block` of this log's payload.
    pub(super) fn descriptor_of(&self, block: u64) -> Option<(format::Descriptor, u64)> {
        let mut at = self.start + 1;
        for d in &self.summary.descriptors {
            let n = d.blocks as u64;
            if block >= at && block < at + n {
                return Some((*d, block - at));
            }
            at += n;
        }
        None
    }
}

#[derive(Default)]
pub(super) struct LogIndex {
    /// Sorted by start block.
    pub(super) logs: Vec<LogEntry>,
    pub(super) by_start: HashMap<u64, usize>,
}

impl LogIndex {
    /// The log whose payload holds `block`.
    pub(super) fn holding(&self, block: u64) -> Option<&LogEntry> {
        let i = self.logs.partition_point(|l| l.start <= block);
        let l = self.logs.get(i.checked_sub(1)?)?;
        (block > l.start && block < l.end()).then_some(l)
    }

    pub(super) fn at(&self, start: u64) -> Option<&LogEntry> {
        self.by_start.get(&start).map(|&i| &self.logs[i])
    }
}

/// The pool's layout as fsck uses it (from a superblock, or guessed when both are lost).
#[derive(Debug, Clone)]
pub(super) struct Geometry {
    pub(super) pool_id: [u8; 16],
    /// `(segment, first block, end block)` of every segment.
    pub(super) segments: Vec<(u64, u64, u64)>,
    pub(super) segment_blocks: u64,
    pub(super) first: u64,
    pub(super) end: u64,
}

impl Geometry {
    pub(super) fn from_sb(sb: &Superblock) -> Geometry {
        let segments = (0..sb.segment_count)
            .map(|s| {
                let a = format::FIRST_SEGMENT_BLOCK + s * sb.segment_blocks;
                (s, a, a + sb.segment_blocks)
            })
            .collect();
        Geometry {
            pool_id: sb.pool_id,
            segments,
            segment_blocks: sb.segment_blocks,
            first: format::FIRST_SEGMENT_BLOCK,
            end: format::FIRST_SEGMENT_BLOCK + sb.segment_blocks * sb.segment_count,
        }
    }

    pub(super) fn contains(&self, b: u64) -> bool {
        b >= self.first && b < self.end
    }

    pub(super) fn segment_of(&self, b: u64) -> u64 {
        (b - self.first) / self.segment_blocks.max(1)
    }
}

/// Walks every segment from its start: valid summaries are indexed with their payload CRC
/// checked; after anything else the walk moves on one block at a time until the next summary of
/// this pool, so damage in one log does not hide the logs after it.
pub(super) fn index_logs(
    rd: &Reader<'_>,
    geo: &Geometry,
    progress: &dyn Fn(u64, u64),
) -> Result<LogIndex> {
    let mut index = LogIndex::default();
    let total = geo.segments.len() as u64;
    for &(seg, from, to) in &geo.segments {
        progress(seg, total);
        if from >= rd.blocks {
            break;
        }
        let bytes = rd.range(from, to)?;
        let have = bytes.len() as u64 / BLOCK_U64;
        let blk = |b: u64| {
            &bytes[((b - from) * BLOCK_U64) as usize..((b - from + 1) * BLOCK_U64) as usize]
        };
        let mut p = from;
        while p < from + have {
            let decoded = Summary::decode(blk(p))
                .ok()
                .filter(|(s, _)| s.pool_id == geo.pool_id)
                .filter(|(s, _)| p + 1 + s.payload_blocks as u64 <= to);
            let Some((summary, crc)) = decoded else {
                p += 1;
                continue;
            };
            let end = p + 1 + summary.payload_blocks as u64;
            let payload_ok = end <= from + have
                && format::crc_blocks(
                    &bytes[((p + 1 - from) * BLOCK_U64) as usize
                        ..((end - from) * BLOCK_U64) as usize],
                ) == summary.payload_crc;
            index.by_start.insert(p, index.logs.len());
            index.logs.push(LogEntry {
                start: p,
                segment: seg,
                summary,
                crc,
                payload_ok,
            });
            p = end;
        }
    }
    Ok(index)
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

/// With both superblocks lost: the pool id of the newest checkpoint log on the device, and the
/// whole device as one segment.
pub(super) fn guess_geometry(rd: &Reader<'_>) -> Result<Option<Geometry>> {
    let mut best: Option<(u64, [u8; 16])> = None;
    let mut b = format::FIRST_SEGMENT_BLOCK;
    while b < rd.blocks {
        let to = (b + FSCK_READ_BYTES / BLOCK_U64).min(rd.blocks);
        let bytes = rd.range(b, to)?;
        for (i, blk) in bytes.chunks_exact(BLOCK).enumerate() {
            if &blk[0..8] != format::LOG_MAGIC {
                continue;
            }
            if let Ok((s, _)) = Summary::decode(blk) {
                if s.flags & FLAG_CHECKPOINT != 0 && best.is_none_or(|(q, _)| s.sequence > q) {
                    best = Some((s.sequence, s.pool_id));
                }
            }
            let _ = i;
        }
        b = to;
    }
    Ok(best.map(|(_, pool_id)| Geometry {
        pool_id,
        segments: vec![(0, format::FIRST_SEGMENT_BLOCK, rd.blocks)],
        // Saturating: the device is what fsck was given, however small.
        segment_blocks: rd.blocks.saturating_sub(format::FIRST_SEGMENT_BLOCK).max(1),
        first: format::FIRST_SEGMENT_BLOCK,
        end: rd.blocks,
    }))
}

// ---------------------------------------------------------------------------------------------
// Repair
