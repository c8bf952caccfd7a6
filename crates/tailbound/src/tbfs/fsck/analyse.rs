//! A whole check: both superblocks, the log chain from the newest one, and every retained
//! checkpoint.

use std::collections::{BTreeSet, HashSet};

use super::checker::*;
use super::index::*;
use super::report::*;
use crate::dev::Device;
use crate::tbfs::format::{self, *};
use crate::tbfs::Result;

/// Reads both superblock copies: the valid ones, and findings for the others. A copy that is valid
/// but describes a pool longer than the device (a truncated pool file) comes back in the second
/// list, so the layout is still known.
pub(super) fn superblocks(
    rd: &Reader<'_>,
    findings: &mut Vec<Finding>,
) -> (Vec<(u8, Superblock)>, Vec<Superblock>) {
    let mut valid = Vec::new();
    let mut truncated = Vec::new();
    for copy in 0..format::SUPERBLOCKS {
        let loc = Location {
            superblock: Some(copy as u8),
            block: Some(copy),
            ..Location::default()
        };
        let r = rd
            .block(copy)
            .map_err(format::Invalid)
            .and_then(|b| Superblock::decode(&b[..], rd.blocks * BLOCK_U64));
        match r {
            Ok(sb) => valid.push((copy as u8, sb)),
            Err(e) => {
                if let Ok(sb) = rd
                    .block(copy)
                    .map_err(format::Invalid)
                    .and_then(|b| Superblock::decode(&b[..], u64::MAX))
                {
                    truncated.push(sb);
                }
                findings.push(Finding {
                    severity: Severity::Damage,
                    location: loc,
                    message: format!("invalid: {e}"),
                })
            }
        }
    }
    (valid, truncated)
}

/// Everything a check learned, for `repair`.
pub(super) struct Analysis {
    pub(super) report: FsckReport,
    pub(super) sb: Option<Superblock>,
    pub(super) index: LogIndex,
    /// Checkpoints checked, oldest first.
    pub(super) views: Vec<CheckpointView>,
    /// Data-only logs after the newest checkpoint in the chain (indices into `index`), each with
    /// the files whose data in it recovery leaves out (`replayed_data_logs`).
    pub(super) tail: Vec<(usize, BTreeSet<u64>)>,
    /// The newest checkpoint the pool names (whether or not it loads).
    pub(super) newest: Option<u64>,
}

/// Checks the pool on `dev` without writing anything.
pub fn check(dev: &dyn Device) -> Result<FsckReport> {
    Ok(analyse(dev, &|_, _| {})?.report)
}

/// [`check`], calling `progress(segments read, segments)` as it reads the segments (most of the
/// time a check takes).
pub fn check_with_progress(dev: &dyn Device, progress: &dyn Fn(u64, u64)) -> Result<FsckReport> {
    Ok(analyse(dev, progress)?.report)
}

pub(super) fn analyse(dev: &dyn Device, progress: &dyn Fn(u64, u64)) -> Result<Analysis> {
    let rd = Reader {
        dev,
        blocks: dev.len() / BLOCK_U64,
    };
    let mut findings = Vec::new();
    let mut stats = FsckStats::default();
    let (valid, truncated) = superblocks(&rd, &mut findings);
    stats.superblocks_valid = valid.len() as u32;
    let sb = valid
        .iter()
        .map(|(_, sb)| sb)
        .max_by_key(|sb| sb.generation)
        .or_else(|| truncated.iter().max_by_key(|sb| sb.generation))
        .cloned();
    if valid.len() == 2 && valid[0].1.pool_id != valid[1].1.pool_id {
        findings.push(Finding {
            severity: Severity::Damage,
            location: Location::default(),
            message: "the two superblock copies belong to different pools".into(),
        });
    }

    let geo = match &sb {
        Some(sb) => Some(Geometry::from_sb(sb)),
        None => guess_geometry(&rd)?,
    };
    let Some(geo) = geo else {
        findings.push(Finding {
            severity: Severity::Damage,
            location: Location::default(),
            message: "no valid superblock and no checkpoint found by scanning the device".into(),
        });
        return Ok(Analysis {
            report: FsckReport {
                verdict: Verdict::Unrecoverable,
                findings,
                stats,
            },
            sb: None,
            index: LogIndex::default(),
            views: Vec::new(),
            tail: Vec::new(),
            newest: None,
        });
    };
    let index = index_logs(&rd, &geo, progress)?;
    stats.segments = geo.segments.len() as u64;
    stats.logs = index.logs.len() as u64;
    stats.segments_in_use = index
        .logs
        .iter()
        .map(|l| l.segment)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    let mut ck = Checker {
        rd,
        geo: geo.clone(),
        index,
        findings,
        superseded: HashSet::new(),
    };

    // The roll-forward chain and the retained checkpoints: (root block, expected number, sequence).
    let mut retained: Vec<(u64, Expected)> = Vec::new();
    // For each of those from the chain: where in the chain the logs replayed over it begin.
    let mut replayed_from: Vec<usize> = Vec::new();
    let mut chain: Vec<usize> = Vec::new();
    // (chain position, inode): that file's data in data-only logs from there on builds on a
    // checkpoint that does not count, so recovery leaves it out (`recovery::dependent_data`).
    let mut depends: Vec<(usize, u64)> = Vec::new();
    if let Some(sb) = &sb {
        stats.generation = sb.generation;
        retained.push((
            sb.checkpoint_root,
            Some((sb.checkpoint, Some(sb.checkpoint_sequence))),
        ));
        replayed_from.push(0);
        let (c, end, uncounted) = follow_chain(&mut ck, sb);
        chain = c;
        depends = uncounted;
        stats.chain_end = end;
        for (p, &i) in chain.iter().enumerate() {
            let l = &ck.index.logs[i];
            let f = l.summary.flags;
            if f & FLAG_CHECKPOINT != 0 && f & FLAG_END != 0 {
                retained.push((
                    l.end() - 1,
                    Some((l.summary.checkpoint, Some(l.summary.sequence))),
                ));
                replayed_from.push(p + 1);
            }
        }
    } else {
        // No superblock: the newest checkpoint log found anywhere.
        if let Some(l) = ck
            .index
            .logs
            .iter()
            .filter(|l| {
                l.payload_ok
                    && l.summary.flags & FLAG_CHECKPOINT != 0
                    && l.summary.flags & FLAG_END != 0
            })
            .max_by_key(|l| l.summary.sequence)
        {
            retained.push((
                l.end() - 1,
                Some((l.summary.checkpoint, Some(l.summary.sequence))),
            ));
            stats.chain_end = format!(
                "no superblock: using checkpoint {} found at block {} by scanning",
                l.summary.checkpoint,
                l.end() - 1
            );
        }
    }
    stats.chain_logs = chain.len() as u64;
    let newest_ckpt_pos = chain.iter().rposition(|&i| {
        let f = ck.index.logs[i].summary.flags;
        f & FLAG_CHECKPOINT != 0 && f & FLAG_END != 0
    });
    let tail_from = newest_ckpt_pos.map_or(0, |p| p + 1);
    // Checkpoint logs after the newest complete one in the chain belong to one that does not
    // count (the chain ends inside it).
    for (p, &i) in chain.iter().enumerate().skip(tail_from) {
        depends.extend(depends_of(&ck.index.logs[i].summary).map(|ino| (p + 1, ino)));
    }
    let tail = replayed_data_logs(&ck.index, &chain, tail_from, &depends);
    for t in &tail {
        let (seq, start) = (
            ck.index.logs[t.log].summary.sequence,
            ck.index.logs[t.log].start,
        );
        let at = |ino| Location {
            log: Some(seq),
            block: Some(start),
            inode: Some(ino),
            ..Location::default()
        };
        for &ino in &t.unfinished {
            ck.push(
                Severity::Note,
                at(ino),
                "file data in a run of data-only logs that stops before the file's attributes record: recovery leaves it out, so the write it belongs to is not kept in part (none of it was acknowledged durable)",
            );
        }
        for &ino in t.dependent.difference(&t.unfinished) {
            ck.push(
                Severity::Note,
                at(ino),
                "file data that builds on a checkpoint that does not count: recovery leaves it out (none of it was acknowledged durable)",
            );
        }
    }
    let tail: Vec<(usize, BTreeSet<u64>)> = tail
        .into_iter()
        .map(|t| (t.log, t.unfinished.union(&t.dependent).copied().collect()))
        .collect();

    let newest = retained.iter().filter_map(|r| r.1.map(|e| e.0)).max();
    let mut views: Vec<CheckpointView> = Vec::new();
    let mut tried: BTreeSet<u64> = retained.iter().map(|r| r.0).collect();
    for (k, (root, expect)) in retained.into_iter().enumerate() {
        let tables = expect.is_some_and(|e| Some(e.0) == newest);
        ck.superseded = replayed_from
            .get(k)
            .map(|&from| superseded_after(&ck.index, &chain, from.min(chain.len()), &depends))
            .unwrap_or_default();
        if let Some(v) = ck.checkpoint(root, expect, tables) {
            views.push(v);
        }
    }
    // What the newest checkpoint retains besides: its snapshots, and the plain checkpoints of the
    // protection period down the chain of previous roots.
    if let Some(top) = views.iter().rfind(|v| Some(v.number) == newest).cloned() {
        for e in &top.snapshots {
            if tried.insert(e.root) {
                if let Some(v) = ck.checkpoint(e.root, Some((e.number, None)), false) {
                    views.push(v);
                }
            }
        }
        let (mut prev, mut number) = (top.prev_root, top.number);
        let mut guard = 0usize;
        while number > top.oldest_protected.max(1) && prev != 0 && guard <= ck.index.logs.len() {
            guard += 1;
            number -= 1;
            if !tried.insert(prev) {
                prev = views
                    .iter()
                    .find(|v| v.root_block == prev)
                    .map_or(0, |v| v.prev_root);
                continue;
            }
            match ck.checkpoint(prev, Some((number, None)), false) {
                Some(v) => {
                    prev = v.prev_root;
                    views.push(v);
                }
                None => break,
            }
        }
        // Segment usage: a segment the writer entered after checkpoint N was born cannot hold a
        // block N uses; if one does, the segment was reused under a retained checkpoint.
        let mut reported = BTreeSet::new();
        for v in &views {
            for &b in &v.blocks {
                if !ck.geo.contains(b) {
                    continue;
                }
                let s = ck.geo.segment_of(b);
                if let Some(Some(u)) = top.usage.get(s as usize) {
                    if u.born > v.number && reported.insert((s, v.number)) {
                        ck.damage(
                            Location {
                                segment: Some(s),
                                block: Some(b),
                                checkpoint: Some(v.number),
                                ..Location::default()
                            },
                            format!(
                                "the usage table says segment {s} was entered after checkpoint {} was written (born {}), yet checkpoint {} uses its block {b}",
                                u.born - 1,
                                u.born,
                                v.number
                            ),
                        );
                    }
                }
            }
        }
    }
    views.sort_by_key(|v| v.number);
    stats.checkpoints = views.iter().map(|v| v.number).collect();
    if !views.iter().any(|v| v.usable) {
        // No retained checkpoint is usable: try older ones still on the device, newest first.
        // Their blocks may since have been reused; what fails to verify is salvaged around.
        let mut older: Vec<(u64, u64, u64)> = ck
            .index
            .logs
            .iter()
            .filter(|l| {
                l.payload_ok
                    && l.summary.flags & FLAG_CHECKPOINT != 0
                    && l.summary.flags & FLAG_END != 0
            })
            .filter(|l| !tried.contains(&(l.end() - 1)))
            .map(|l| (l.summary.sequence, l.summary.checkpoint, l.end() - 1))
            .collect();
        older.sort_unstable_by(|a, b| b.cmp(a));
        for (seq, number, root) in older.into_iter().take(16) {
            let saved = ck.findings.len();
            let v = ck.checkpoint(root, Some((number, Some(seq))), true);
            let problems = ck.findings.len() - saved;
            ck.findings.truncate(saved);
            if let Some(v) = v.filter(|v| v.usable) {
                ck.push(
                    Severity::Note,
                    Location {
                        checkpoint: Some(v.number),
                        block: Some(root),
                        ..Location::default()
                    },
                    format!(
                        "an older checkpoint, no longer retained, still loads ({problems} problems in it): repair salvages it"
                    ),
                );
                views.insert(0, v);
                break;
            }
        }
    }
    if let Some(v) = views.last() {
        stats.inodes = v.inodes.len() as u64;
        stats.directories = v.inodes.values().filter(|i| i.is_dir()).count() as u64;
        stats.files = stats.inodes - stats.directories;
        stats.file_bytes = v
            .inodes
            .values()
            .filter(|i| !i.is_dir())
            .map(|i| i.rec.size)
            .sum();
    }
    let mut findings = ck.findings;
    // Duplicates arise when two retained checkpoints share a damaged block; keep the first.
    let mut seen = BTreeSet::new();
    findings.retain(|f| {
        seen.insert((
            f.message.clone(),
            f.location.block,
            f.location.superblock,
            f.location.inode,
            f.location.checkpoint,
        ))
    });
    let has_damage = findings.iter().any(|f| f.severity == Severity::Damage);
    let verdict = if views.iter().any(|v| v.usable) {
        if has_damage {
            Verdict::Damaged
        } else {
            Verdict::Clean
        }
    } else {
        if !findings.iter().any(|f| f.message.contains("checkpoint")) {
            findings.push(Finding {
                severity: Severity::Damage,
                location: Location::default(),
                message: "no checkpoint with a usable root directory".into(),
            });
        }
        Verdict::Unrecoverable
    };
    Ok(Analysis {
        report: FsckReport {
            verdict,
            findings,
            stats,
        },
        sb,
        index: ck.index,
        views,
        tail,
        newest,
    })
}

/// The file blocks the data-only logs of `chain[from..]` write and recovery keeps.
pub(super) fn superseded_after(
    index: &LogIndex,
    chain: &[usize],
    from: usize,
    depends: &[(usize, u64)],
) -> HashSet<(u64, u64)> {
    let mut out = HashSet::new();
    for t in replayed_data_logs(index, chain, from, depends) {
        for d in index.logs[t.log].summary.descriptors.iter() {
            if d.kind == DescKind::Data
                && !t.unfinished.contains(&d.ino)
                && !t.dependent.contains(&d.ino)
            {
                out.extend((0..d.blocks as u64).map(|b| (d.ino, d.offset + b)));
            }
        }
    }
    out
}

/// A data-only log of the chain and the files whose data in it recovery leaves out.
pub(super) struct TailLog {
    /// Index into the log index.
    pub(super) log: usize,
    /// Their part of a run of data-only logs never completed (`recovery::unfinished_run_data`).
    pub(super) unfinished: BTreeSet<u64>,
    /// Their data builds on a checkpoint that does not count (`recovery::dependent_data`).
    pub(super) dependent: BTreeSet<u64>,
}

/// The files a checkpoint log names as building on it ([`DescKind::Depends`]).
fn depends_of(s: &Summary) -> impl Iterator<Item = u64> + '_ {
    let checkpoint = s.flags & FLAG_DATA_ONLY == 0;
    s.descriptors
        .iter()
        .filter(move |d| checkpoint && d.kind == DescKind::Depends)
        .map(|d| d.ino)
}

/// The data-only logs of `chain[from..]` (indices into `index`; `from` is just after a
/// checkpoint), each with the files whose data in it recovery leaves out. `depends`: (chain
/// position, inode) pairs, each leaving out that file's data from that position on.
pub(super) fn replayed_data_logs(
    index: &LogIndex,
    chain: &[usize],
    from: usize,
    depends: &[(usize, u64)],
) -> Vec<TailLog> {
    let data: Vec<(usize, usize)> = chain
        .iter()
        .copied()
        .enumerate()
        .skip(from)
        .filter(|&(_, i)| index.logs[i].summary.flags & FLAG_DATA_ONLY != 0)
        .collect();
    // With the pads between them, which keep a run's sequence whole where it crosses a segment.
    let summaries: Vec<&Summary> = chain[from.min(chain.len())..]
        .iter()
        .map(|&i| &index.logs[i].summary)
        .filter(|s| s.flags & (FLAG_DATA_ONLY | FLAG_PAD) != 0)
        .collect();
    let mut out: Vec<TailLog> = data
        .iter()
        .map(|&(pos, i)| TailLog {
            log: i,
            unfinished: BTreeSet::new(),
            dependent: index.logs[i]
                .summary
                .descriptors
                .iter()
                .map(|d| d.ino)
                .filter(|ino| depends.iter().any(|&(p, dep)| p <= pos && dep == *ino))
                .collect(),
        })
        .collect();
    for (k, ino) in crate::tbfs::recovery::scan::unfinished_run_data(&summaries) {
        out[k].unfinished.insert(ino);
    }
    out
}

/// Follows the roll-forward chain from the superblock; returns its logs and why it ends.
/// Besides, (chain position, inode) pairs: the files whose data in data-only logs from that
/// position on builds on a checkpoint log skipped before it.
pub(super) fn follow_chain(
    ck: &mut Checker<'_>,
    sb: &Superblock,
) -> (Vec<usize>, String, Vec<(usize, u64)>) {
    let mut uncounted: Vec<(usize, u64)> = Vec::new();
    let (chain, end) = follow_chain_logs(ck, sb, &mut uncounted);
    (chain, end, uncounted)
}

fn follow_chain_logs(
    ck: &mut Checker<'_>,
    sb: &Superblock,
    uncounted: &mut Vec<(usize, u64)>,
) -> (Vec<usize>, String) {
    let mut chain = Vec::new();
    // Files of skipped ahead logs (see recovery): their later logs are skipped too.
    let mut torn: BTreeSet<u64> = BTreeSet::new();
    // A payload of the chain is incomplete: no checkpoint after it counts.
    let mut incomplete = false;
    let mut skipped = 0usize;
    let mut pos = sb.next.block;
    let mut seq = sb.next.sequence;
    let mut prev = sb.next.prev_crc;
    let seg_blocks = sb.segment_blocks;
    let seg_end = |b: u64| {
        let s = (b - format::FIRST_SEGMENT_BLOCK) / seg_blocks;
        format::FIRST_SEGMENT_BLOCK + (s + 1) * seg_blocks
    };
    loop {
        if chain.len() + skipped > ck.index.logs.len() {
            return (chain, "log chain longer than the logs found".into());
        }
        let here = Location {
            log: Some(seq),
            block: Some(pos),
            segment: Some(ck.geo.segment_of(pos)),
            ..Location::default()
        };
        let Some(&i) = ck.index.by_start.get(&pos) else {
            // Why is there no log here? A summary of this chain that fails its CRC, with a log of
            // the next sequence right after it, is damage; anything else is the end of the chain.
            let why = match ck.rd.block(pos) {
                Err(e) => e,
                Ok(b) => match Summary::decode(&b[..]) {
                    Ok(_) => "a log of another pool or beyond its segment".into(),
                    Err(e) => {
                        let fields_match = &b[0..8] == format::LOG_MAGIC
                            && b[16..32] == ck.geo.pool_id
                            && u64::from_le_bytes(b[32..40].try_into().expect("8")) == seq
                            && u32::from_le_bytes(b[60..64].try_into().expect("4")) == prev;
                        let later = ck.index.logs.iter().any(|l| {
                            l.summary.sequence == seq + 1 && l.start > pos && l.start < seg_end(pos)
                        });
                        if fields_match && later {
                            ck.damage(
                                here,
                                format!(
                                    "summary of log {seq} is damaged ({e}) and log {} follows it: the logs after it cannot be replayed (or, on a pool not opened since a crash, an unflushed write was lost out of order)",
                                    seq + 1
                                ),
                            );
                        }
                        e.0
                    }
                },
            };
            return (chain, format!("end of log chain at block {pos}: {why}"));
        };
        let l = &ck.index.logs[i];
        if l.summary.sequence != seq || l.summary.prev_crc != prev {
            return (
                chain,
                format!(
                    "end of log chain at block {pos}: a log of an earlier pass (sequence {})",
                    l.summary.sequence
                ),
            );
        }
        let end = l.end();
        let f = l.summary.flags;
        let ahead = f & FLAG_AHEAD != 0 && f & FLAG_DATA_ONLY != 0;
        // A checkpoint's log written ahead of earlier payloads (version 4): the chain goes on;
        // the checkpoint does not count after an incomplete payload, as recovery has it.
        let checkpoint_ahead = f & FLAG_AHEAD != 0 && f & FLAG_DATA_ONLY == 0;
        let pad = f & FLAG_PAD != 0 && l.summary.payload_blocks == 0;
        if !ahead && !checkpoint_ahead && !pad && !torn.is_empty() {
            ck.push(
                Severity::Note,
                here,
                "a log after an incomplete data-only log ends the chain: it was written after payloads that are missing, so recovery stops there",
            );
            return (
                chain,
                format!("log {seq} at block {pos} follows an incomplete data-only log"),
            );
        }
        let skip = (checkpoint_ahead && (!l.payload_ok || incomplete))
            || (ahead
                && (!l.payload_ok || l.summary.descriptors.iter().any(|d| torn.contains(&d.ino))));
        if skip {
            uncounted.extend(depends_of(&l.summary).map(|ino| (chain.len(), ino)));
            let (payload_ok, next_seg, crc) = (l.payload_ok, l.summary.segment_next, l.crc);
            incomplete = true;
            if ahead {
                torn.extend(l.summary.descriptors.iter().map(|d| d.ino));
            }
            skipped += 1;
            if next_seg >= sb.segment_count {
                ck.damage(
                    here,
                    format!("names segment {next_seg} next, past the last"),
                );
                return (chain, format!("log {seq} at block {pos}: bad next segment"));
            }
            if !payload_ok {
                ck.push(
                    Severity::Note,
                    here,
                    "log written ahead of its payload, which is incomplete: recovery skips it and the later logs of its files (none was acknowledged durable)",
                );
            }
            seq += 1;
            prev = crc;
            pos = if end == seg_end(pos) {
                format::FIRST_SEGMENT_BLOCK + next_seg * seg_blocks
            } else {
                end
            };
            continue;
        }
        if !l.payload_ok {
            let next_pos = if end == seg_end(pos) {
                format::FIRST_SEGMENT_BLOCK + l.summary.segment_next * seg_blocks
            } else {
                end
            };
            let crc = l.crc;
            let behind = ck
                .index
                .at(next_pos)
                .is_some_and(|n| n.summary.sequence == seq + 1 && n.summary.prev_crc == crc);
            if behind {
                ck.damage(
                    here,
                    "payload CRC mismatch with valid logs after it: recovery keeps only what precedes it",
                );
                return (
                    chain,
                    format!("log {seq} at block {pos}: payload CRC mismatch (valid logs follow)"),
                );
            }
            ck.push(
                Severity::Note,
                here,
                "payload CRC mismatch at the end of the log chain: a torn tail that recovery drops",
            );
            return (
                chain,
                format!("log {seq} at block {pos}: payload CRC mismatch (torn tail)"),
            );
        }
        if l.summary.segment_next >= sb.segment_count {
            ck.damage(
                here,
                format!(
                    "names segment {} next, past the last",
                    l.summary.segment_next
                ),
            );
            return (chain, format!("log {seq} at block {pos}: bad next segment"));
        }
        let jump = l.summary.jump_to();
        if let Some(t) = jump.filter(|&t| !ck.geo.contains(t)) {
            ck.damage(here, format!("jumps to block {t}, past the segments"));
            return (chain, format!("log {seq} at block {pos}: bad jump"));
        }
        chain.push(i);
        seq += 1;
        prev = l.crc;
        pos = if let Some(t) = jump {
            // The chain goes on in the other log head (version 5).
            t
        } else if end == seg_end(pos) {
            format::FIRST_SEGMENT_BLOCK + l.summary.segment_next * seg_blocks
        } else {
            end
        };
    }
}
