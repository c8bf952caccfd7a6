//! Scanning the log chain: reading ahead, and which data-only runs never finished.

use std::collections::{BTreeMap, BTreeSet};

use crate::tbfs::format::{self, *};
use crate::tbfs::limits::SCAN_WINDOW_BLOCKS;
use crate::tbfs::{DeviceRef, Error, Result};

/// Blocks read ahead in large requests, so scanning many small logs costs few device reads.
#[derive(Default)]
pub(crate) struct Window {
    start: u64,
    buf: Vec<u8>,
}

impl Window {
    /// Blocks `[block, block + count)`, all inside the segment ending at `seg_end`.
    pub(crate) fn get(
        &mut self,
        dev: &DeviceRef,
        block: u64,
        count: u64,
        seg_end: u64,
    ) -> Result<&[u8]> {
        let have = self.buf.len() as u64 / BLOCK_U64;
        if block < self.start || block + count > self.start + have {
            let n = SCAN_WINDOW_BLOCKS.max(count).min(seg_end - block);
            self.buf.resize((n * BLOCK_U64) as usize, 0);
            self.start = block;
            dev.read_at(block * BLOCK_U64, &mut self.buf).map_err(|e| {
                Error::io(
                    format!("{} device: reading logs at block {block}", dev.kind()),
                    e,
                )
            })?;
        }
        let from = ((block - self.start) * BLOCK_U64) as usize;
        Ok(&self.buf[from..from + (count * BLOCK_U64) as usize])
    }
}

/// Which file data of the data-only logs `logs` (the replayed ones after a checkpoint, in chain
/// order, with the pad logs between them) roll-forward must leave out: the `(position among the
/// data-only logs, inode)` pairs of a file whose part of a run never completed. A pad (a
/// segment's last block, which a run crosses) carries no data and is never skipped: it only
/// keeps the run's sequence whole.
///
/// A run of data-only logs (`FLAG_BEGIN` … `FLAG_END`, sealed under one hold of the metadata
/// lock, so consecutive in the chain) lays out each file's buffered blocks and then its
/// attributes record; a write too large for one log spans several. A file's part of a run is
/// replayed only once it is whole: its attributes record is in a replayed log, or, for a part
/// with no record (a cleaning pass's copies, which change no size), the run's last log is and no
/// log of the run is missing. A log is missing where the sequence skips one (an ahead log
/// skipped for its incomplete payload) or a run shows no first log. So a crash that keeps the
/// first logs of a write but not its last keeps none of it, as a write is never split. Nothing
/// acknowledged is lost: a sync of a file returns only once the log holding its record is
/// written, and what a run superseded is reused only once its last log is durable, when none of
/// its logs can be missing.
pub(in crate::tbfs) fn unfinished_run_data(logs: &[&Summary]) -> BTreeSet<(usize, u64)> {
    let mut dropped = BTreeSet::new();
    // Files with blocks in the open run and no record yet: the logs holding them.
    let mut open: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let give_up = |open: &mut BTreeMap<u64, Vec<usize>>, dropped: &mut BTreeSet<_>| {
        for (ino, at) in std::mem::take(open) {
            dropped.extend(at.into_iter().map(|i| (i, ino)));
        }
    };
    // The sequence of the open run's latest log, and whether a log of the run is missing.
    let mut run: Option<(u64, bool)> = None;
    let mut data_logs = 0;
    for s in logs {
        if s.flags & FLAG_DATA_ONLY == 0 {
            assert!(
                s.flags & FLAG_PAD != 0,
                "log {}: only data-only and pad logs count for a run",
                s.sequence
            );
            run = run.map(|(prev, missing)| (s.sequence, missing || s.sequence != prev + 1));
            continue;
        }
        let i = data_logs;
        data_logs += 1;
        run = if s.flags & FLAG_BEGIN != 0 {
            // The run before (if open) never reached its last log.
            give_up(&mut open, &mut dropped);
            Some((s.sequence, false))
        } else {
            match run {
                Some((prev, missing)) => Some((s.sequence, missing || s.sequence != prev + 1)),
                // Its first log is missing.
                None => Some((s.sequence, true)),
            }
        };
        for d in &s.descriptors {
            match d.kind {
                DescKind::Data => {
                    let at = open.entry(d.ino).or_default();
                    if at.last() != Some(&i) {
                        at.push(i);
                    }
                }
                DescKind::Attr => {
                    open.remove(&d.ino);
                }
                _ => {}
            }
        }
        if s.flags & FLAG_END != 0 {
            if run.is_some_and(|(_, missing)| missing) {
                give_up(&mut open, &mut dropped);
            } else {
                open.clear();
            }
            run = None;
        }
    }
    give_up(&mut open, &mut dropped);
    dropped
}

/// Which file data of the data-only logs after the loaded checkpoint roll-forward must leave
/// out because the file depends on a checkpoint after it that does not count (format version 4):
/// the `(position among the replayed logs, inode)` pairs, positions counted as
/// [`unfinished_run_data`] counts them (data-only logs not skipped, in chain order).
///
/// `logs` are the scanned logs after the loaded checkpoint. Any checkpoint log among them belongs
/// to a checkpoint that does not count (a payload before it, or its own, is incomplete), and its
/// [`DescKind::Depends`] records name the files whose later data-only logs build on it: a
/// creation, a name, an attribute or size change, or buffered data the checkpoint wrote. Replayed
/// over an older checkpoint, such a log could be applied to another file under the same number
/// or lack the data it builds on; a sync of such a file waits for the checkpoint to count, so
/// none of it was acknowledged. Other files' logs are replayed: they build only on their own
/// earlier logs, which are replayed too.
pub(crate) fn dependent_data(logs: &[ScannedLog]) -> BTreeSet<(usize, u64)> {
    let mut dropped = BTreeSet::new();
    let mut depends: BTreeSet<u64> = BTreeSet::new();
    let mut k = 0;
    for log in logs {
        let s = &log.summary;
        if s.flags & FLAG_DATA_ONLY == 0 {
            depends.extend(
                s.descriptors
                    .iter()
                    .filter(|d| d.kind == DescKind::Depends)
                    .map(|d| d.ino),
            );
            continue;
        }
        if log.skipped {
            continue;
        }
        if !depends.is_empty() {
            dropped.extend(
                s.descriptors
                    .iter()
                    .filter(|d| depends.contains(&d.ino))
                    .map(|d| (k, d.ino)),
            );
        }
        k += 1;
    }
    dropped
}

/// One log found by the scan.
pub(crate) struct ScannedLog {
    pub(crate) start: u64,
    pub(crate) summary: Summary,
    /// An ahead log whose payload is incomplete, or a later one of the same files: part of
    /// the chain, but not replayed.
    pub(crate) skipped: bool,
}

pub(in crate::tbfs) fn read_block(
    dev: &DeviceRef,
    block: u64,
    what: &dyn Fn() -> String,
) -> Result<Box<format::Block>> {
    let mut b = Box::new([0u8; BLOCK]);
    dev.read_at(block * BLOCK_U64, &mut b[..])
        .map_err(|e| Error::io(what(), e))?;
    Ok(b)
}

pub(crate) fn corrupt(sb_where: &str, what: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("{sb_where}: {what}"))
}
