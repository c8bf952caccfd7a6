//! Recorder behaviour across every mode: what is written, what `verify` finds, what the file
//! operations were. Nothing here depends on timing.

use std::path::Path;

use proptest::prelude::*;

use super::fileops::{FileOp, Probe};
use super::*;
use crate::sys::file::{Advice, SyncRange};

fn record(i: u64, len: usize) -> Vec<u8> {
    let mut r = vec![(i % 251) as u8; len];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r
}

fn small(allocation: Allocation, flush: FlushMode, framing: Framing) -> RecorderOptions {
    RecorderOptions {
        allocation,
        flush,
        framing,
        flush_every_bytes: 16 << 10,
        expected_bytes: 1 << 20,
        ..RecorderOptions::default()
    }
}

fn record_n(path: &Path, options: RecorderOptions, n: u64, len: usize) -> RecordSummary {
    let mut r = Recorder::create(path, options).unwrap();
    for i in 0..n {
        r.write(&record(i, len)).unwrap();
    }
    r.finish().unwrap()
}

#[test]
fn every_mode_records_every_frame_and_verifies() {
    every_mode(true);
    every_mode(false);
}

fn every_mode(mapped: bool) {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    RecyclePool::prepare(&pool, 1, 1 << 20).unwrap();
    for &allocation in Allocation::ALL {
        for &flush in FlushMode::ALL {
            for &framing in Framing::ALL {
                if allocation == Allocation::Recycle && framing == Framing::Raw {
                    continue; // rejected by validate(), tested below
                }
                let path = dir
                    .path()
                    .join(format!("{allocation}-{flush}-{framing}-{mapped}.tbr"));
                let mut options = small(allocation, flush, framing);
                options.recycle_pool = Some(pool.clone());
                options.mapped = mapped;
                let n = 150;
                let summary = record_n(&path, options, n, 1000);
                let what = format!("{allocation}/{flush}/{framing}/mapped={mapped}");
                assert_eq!(summary.counters.frames, n, "{what}");
                assert_eq!(summary.counters.payload_bytes, n * 1000, "{what}");
                let len = std::fs::metadata(&path).unwrap().len();
                if allocation == Allocation::Recycle {
                    // Never cut: the file keeps its pool size, beyond the recorded length.
                    assert_eq!(len, 1 << 20, "{what}");
                    assert!(summary.file_bytes < len, "{what}");
                } else {
                    assert_eq!(summary.file_bytes, len, "{what}");
                }
                match framing {
                    Framing::Raw => {
                        assert_eq!(len, n * 1000, "{what}");
                        let bytes = std::fs::read(&path).unwrap();
                        assert_eq!(&bytes[..1000], &record(0, 1000)[..]);
                        assert_eq!(&bytes[149_000..], &record(149, 1000)[..]);
                    }
                    Framing::Framed => {
                        let v = verify(&path).unwrap();
                        assert_eq!(v.frames, n, "{what}: {v:?}");
                        assert_eq!(v.last_sequence, Some(n - 1), "{what}");
                        assert_eq!(v.payload_bytes, n * 1000, "{what}");
                        if allocation == Allocation::Recycle {
                            assert!(v.finished && v.stop == StopReason::Trailer, "{what}: {v:?}");
                            assert_eq!(v.valid_bytes, summary.file_bytes, "{what}");
                        } else {
                            assert_eq!(v.valid_bytes, len, "{what}: {v:?}");
                            assert_eq!(v.stop, StopReason::EndOfFile, "{what}");
                        }
                    }
                }
                if allocation == Allocation::Recycle {
                    RecyclePool::open(&pool).unwrap().give_back(&path).unwrap();
                }
            }
        }
    }
}

#[test]
fn a_torn_or_zeroed_tail_verifies_to_the_valid_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tbr");
    record_n(
        &path,
        small(Allocation::Append, FlushMode::None, Framing::Framed),
        20,
        500,
    );
    let whole = verify(&path).unwrap();
    let frame: u64 = 32 + 500;
    // Cut inside frame 12.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(64 + 12 * frame + 100).unwrap();
    let v = verify(&path).unwrap();
    assert_eq!(
        (v.frames, v.last_sequence, v.stop),
        (12, Some(11), StopReason::Truncated)
    );
    assert_eq!(v.valid_bytes, 64 + 12 * frame);
    // Zeroes after frame 12, as in preallocated space.
    f.set_len(64 + 12 * frame).unwrap();
    f.set_len(whole.bytes).unwrap();
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.stop), (12, StopReason::Zeroes));
    // A flipped bit in frame 5's payload.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(64 + 5 * frame + 40) as usize] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.stop), (5, StopReason::BadCrc));
}

#[test]
fn a_recycled_file_never_shows_the_previous_laps_frames() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("pool");
    let pool = RecyclePool::prepare(&pool_dir, 1, 1 << 20).unwrap();
    assert_eq!(pool.ready(), 1);
    let path = dir.path().join("lap.tbr");
    let mut options = small(
        Allocation::Recycle,
        FlushMode::SyncFileRange,
        Framing::Framed,
    );
    options.recycle_pool = Some(pool_dir.clone());
    record_n(&path, options.clone(), 100, 1000);
    assert_eq!(verify(&path).unwrap().epoch, Some(1));
    pool.give_back(&path).unwrap();
    assert_eq!(pool.ready(), 1);

    // Lap 2, finished: 30 frames and the trailer.
    record_n(&path, options.clone(), 30, 1000);
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.epoch, v.finished), (30, Some(2), true));
    pool.give_back(&path).unwrap();

    // Lap 3, cut off before finish: lap 2's trailer and lap 1's frames lie beyond.
    let mut r = Recorder::create(&path, options).unwrap();
    for i in 0..10 {
        r.write(&record(i, 1000)).unwrap();
    }
    drop(r);
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.epoch, v.finished), (10, Some(3), false));
    assert_eq!(v.stop, StopReason::StaleEpoch);
}

#[test]
fn an_empty_or_missing_pool_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = small(Allocation::Recycle, FlushMode::None, Framing::Framed);
    options.recycle_pool = Some(dir.path().join("nope"));
    let e = Recorder::create(dir.path().join("a.tbr"), options.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("prepare-pool"), "{e}");
    RecyclePool::prepare(dir.path().join("empty"), 0, 4096).unwrap();
    options.recycle_pool = Some(dir.path().join("empty"));
    let e = Recorder::create(dir.path().join("a.tbr"), options)
        .err()
        .unwrap();
    assert!(e.to_string().contains("no ready file"), "{e}");
}

fn logged(path: &Path, options: RecorderOptions, n: u64) -> Vec<FileOp> {
    let probe = Probe::default();
    let mut r = Recorder::create_probed(path, options, Some(probe.clone())).unwrap();
    for i in 0..n {
        r.write(&record(i, 4096)).unwrap();
    }
    r.finish().unwrap();
    probe.ops()
}

fn during(ops: &[FileOp]) -> &[FileOp] {
    let start = ops
        .iter()
        .position(|o| *o == FileOp::RecordingStarted)
        .unwrap();
    let end = ops
        .iter()
        .position(|o| *o == FileOp::FinishStarted)
        .unwrap();
    &ops[start..end]
}

fn is_sync_range(op: &FileOp) -> bool {
    matches!(op, FileOp::SyncFileRange { .. })
}

/// The `sync_file_range` calls of one kind, as `(position in the log, start, end)`.
fn sync_ranges(ops: &[FileOp], kind: SyncRange) -> Vec<(usize, u64, u64)> {
    ops.iter()
        .enumerate()
        .filter_map(|(i, o)| match *o {
            FileOp::SyncFileRange { how, offset, len } if how == kind => {
                Some((i, offset, offset + len))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn pipelined_flushing_waits_one_window_behind_and_never_touches_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    for mapped in [false, true] {
        let mut options = small(Allocation::ZeroFill, FlushMode::Pipelined, Framing::Framed);
        options.mapped = mapped;
        let ops = logged(&dir.path().join(format!("p-{mapped}")), options, 100);
        let ops = during(&ops);
        let started = sync_ranges(ops, SyncRange::StartWrite);
        let waited = sync_ranges(ops, SyncRange::WaitAfter);
        assert!(sync_ranges(ops, SyncRange::WriteAndWait).is_empty());
        // 100 records of 4 KiB + 32 in 16 KiB windows: about 25 windows.
        assert!(started.len() >= 20, "{started:?}");
        // Windows tile the file from its start.
        assert_eq!(started[0].1, 0);
        for w in started.windows(2) {
            assert_eq!(w[0].2, w[1].1, "windows are contiguous");
        }
        // Window N is waited for only after window N+1 was started, never the newest one.
        assert_eq!(waited.len(), started.len() - 1);
        for (k, &(at, start, end)) in waited.iter().enumerate() {
            assert_eq!((start, end), (started[k].1, started[k].2));
            assert!(
                at > started[k + 1].0,
                "window {k} waited before the next one started"
            );
            // And only then dropped from the cache.
            let dropped = ops[at..].iter().position(|o| {
                *o == FileOp::Fadvise {
                    advice: Advice::DontNeed,
                    offset: start,
                    len: end - start,
                }
            });
            assert!(
                dropped.is_some(),
                "window {k} was not dropped after its wait"
            );
        }
        let last = started.last().unwrap();
        assert!(
            !ops.iter().any(|o| matches!(
                *o,
                FileOp::Fadvise { advice: Advice::DontNeed, offset, .. } if offset == last.1
            )),
            "the newest window is never dropped"
        );
    }
}

#[test]
fn sync_file_range_mode_writes_and_waits_each_window_once() {
    let dir = tempfile::tempdir().unwrap();
    let options = small(
        Allocation::ZeroFill,
        FlushMode::SyncFileRange,
        Framing::Framed,
    );
    let ops = logged(&dir.path().join("s"), options, 100);
    let ops = during(&ops);
    let flushed = sync_ranges(ops, SyncRange::WriteAndWait);
    assert!(sync_ranges(ops, SyncRange::StartWrite).is_empty());
    assert!(!ops.contains(&FileOp::Fdatasync));
    assert_eq!(flushed[0].1, 0);
    for w in flushed.windows(2) {
        assert_eq!(w[0].2, w[1].1, "each byte is flushed once, in order");
    }
}

#[test]
fn recycle_mode_never_allocates_or_truncates() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    RecyclePool::prepare(&pool, 1, 4 << 20).unwrap();
    let mut options = small(Allocation::Recycle, FlushMode::Pipelined, Framing::Framed);
    options.recycle_pool = Some(pool);
    let ops = logged(&dir.path().join("r.tbr"), options, 300);
    assert!(!ops.contains(&FileOp::Fallocate), "{ops:?}");
    assert!(!ops.contains(&FileOp::Ftruncate), "{ops:?}");
    assert!(during(&ops).iter().any(is_sync_range));
    assert_eq!(ops.last(), Some(&FileOp::Fsync));
}

#[test]
fn each_mode_issues_the_calls_it_claims() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let ops = logged(
        &p("a"),
        small(Allocation::Append, FlushMode::Fdatasync, Framing::Raw),
        50,
    );
    assert!(during(&ops).contains(&FileOp::Fdatasync));
    assert!(!ops.contains(&FileOp::Fallocate) && !ops.contains(&FileOp::Ftruncate));

    let ops = logged(
        &p("f"),
        small(
            Allocation::Fallocate,
            FlushMode::SyncFileRange,
            Framing::Raw,
        ),
        50,
    );
    let start = ops
        .iter()
        .position(|o| *o == FileOp::RecordingStarted)
        .unwrap();
    assert!(
        ops[..start].contains(&FileOp::Fallocate),
        "preallocated before recording"
    );
    assert!(!during(&ops).contains(&FileOp::Fallocate), "{ops:?}");
    assert!(
        !during(&ops).contains(&FileOp::Fdatasync),
        "data-only flushing"
    );
    assert!(during(&ops).iter().any(is_sync_range));
    let finish = ops
        .iter()
        .position(|o| *o == FileOp::FinishStarted)
        .unwrap();
    assert!(
        ops[finish..].contains(&FileOp::Ftruncate),
        "unused tail cut at the end"
    );

    let ops = logged(
        &p("z"),
        small(Allocation::ZeroFill, FlushMode::Pipelined, Framing::Framed),
        50,
    );
    assert!(
        !ops.contains(&FileOp::Fallocate),
        "zero-fill writes, never allocates"
    );
    assert!(
        during(&ops).iter().any(|o| matches!(
            o,
            FileOp::Fadvise {
                advice: Advice::DontNeed,
                ..
            }
        )),
        "pipelined drops flushed windows"
    );

    let ops = logged(
        &p("n"),
        small(Allocation::Append, FlushMode::None, Framing::Framed),
        50,
    );
    assert!(!during(&ops)
        .iter()
        .any(|o| matches!(o, FileOp::Fdatasync) || is_sync_range(o)));
}

#[test]
fn outgrowing_the_preallocation_extends_ahead_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.tbr");
    let mut options = small(
        Allocation::ZeroFill,
        FlushMode::SyncFileRange,
        Framing::Framed,
    );
    options.expected_bytes = 64 << 10;
    let summary = record_n(&path, options, 400, 4096);
    assert_eq!(summary.counters.frames, 400);
    let v = verify(&path).unwrap();
    assert_eq!(
        (v.frames, v.valid_bytes),
        (400, std::fs::metadata(&path).unwrap().len())
    );
}

#[test]
fn decoupled_block_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.tbr");
    let mut options = small(Allocation::ZeroFill, FlushMode::Pipelined, Framing::Framed);
    options.decoupled = Some(DecoupledOptions {
        ring_bytes: 64 << 10,
        overflow: Overflow::Block,
    });
    options.measure_writes = true;
    let summary = record_n(&path, options, 500, 3000);
    assert_eq!(summary.counters.frames, 500);
    assert_eq!(summary.counters.dropped + summary.counters.overwritten, 0);
    assert_eq!(summary.writer_latency.as_ref().map(|h| h.len()), Some(500));
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.last_sequence), (500, Some(499)));
    let bytes = std::fs::read(&path).unwrap();
    // Record 499's payload is the last frame's.
    let last = &bytes[bytes.len() - 3000..];
    assert_eq!(last, &record(499, 3000)[..]);
}

#[test]
fn decoupled_drop_and_overwrite_count_and_leave_no_gap() {
    for overflow in [Overflow::Drop, Overflow::Overwrite] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.tbr");
        let mut options = small(Allocation::Append, FlushMode::None, Framing::Framed);
        options.decoupled = Some(DecoupledOptions {
            ring_bytes: 64 << 10,
            overflow,
        });
        let mut r = Recorder::create(&path, options).unwrap();
        r.stall_writer(true);
        for i in 0..40 {
            r.write(&record(i, 4096)).unwrap(); // the ring holds 16
        }
        let c = r.counters();
        assert_eq!(c.dropped + c.overwritten, 24, "{overflow}: {c:?}");
        let summary = r.finish().unwrap();
        assert_eq!(summary.counters.frames, 16, "{overflow}");
        let v = verify(&path).unwrap();
        assert_eq!((v.frames, v.last_sequence), (16, Some(15)), "{overflow}");
        let bytes = std::fs::read(&path).unwrap();
        let first_payload = &bytes[64 + 32..64 + 32 + 8];
        let expected_first: u64 = if overflow == Overflow::Drop { 0 } else { 24 };
        assert_eq!(first_payload, &expected_first.to_le_bytes(), "{overflow}");
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let e = verify(dir.path().join("missing")).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    let raw = dir.path().join("raw");
    std::fs::write(
        &raw,
        b"just some bytes that are long enough to hold a header, and more of them",
    )
    .unwrap();
    let e = verify(&raw).unwrap_err();
    assert!(matches!(e, RecordError::NotARecording { .. }), "{e}");
    let e = Recorder::create(dir.path().join("no/such/dir/x"), RecorderOptions::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("no/such/dir"), "{e}");
    let mut options = small(Allocation::Append, FlushMode::None, Framing::Framed);
    options.decoupled = Some(DecoupledOptions {
        ring_bytes: 64 << 10,
        overflow: Overflow::Block,
    });
    let mut r = Recorder::create(dir.path().join("big"), options).unwrap();
    assert!(r.write(&vec![0u8; 65 << 10]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn verify_never_panics_on_arbitrary_bytes(tail in proptest::collection::vec(any::<u8>(), 0..4000),
                                               with_header in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        let mut bytes = Vec::new();
        if with_header {
            bytes.extend_from_slice(&frame::FileHeader { flags: 0, epoch: 1, created_unix_ns: 0 }.encode());
        }
        bytes.extend_from_slice(&tail);
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(v) = verify(&path) {
            prop_assert!(v.valid_bytes <= v.bytes);
        }
    }
}

#[test]
fn mapped_mode_makes_no_write_calls_while_recording() {
    let dir = tempfile::tempdir().unwrap();
    for allocation in [Allocation::ZeroFill, Allocation::Fallocate] {
        let path = dir.path().join(format!("{allocation}.tbr"));
        let mut options = small(allocation, FlushMode::Pipelined, Framing::Framed);
        options.mapped = true;
        let ops = logged(&path, options, 100);
        assert!(
            !during(&ops).contains(&FileOp::Write),
            "{allocation}: {ops:?}"
        );
        assert!(during(&ops).iter().any(is_sync_range), "{allocation}");
        let v = verify(&path).unwrap();
        assert_eq!((v.frames, v.last_sequence), (100, Some(99)), "{allocation}");
        assert_eq!(v.valid_bytes, std::fs::metadata(&path).unwrap().len());
    }
    // The syscall path, for comparison, writes every record.
    let path = dir.path().join("syscall.tbr");
    let mut options = small(Allocation::ZeroFill, FlushMode::Pipelined, Framing::Framed);
    options.mapped = false;
    let ops = logged(&path, options, 100);
    assert_eq!(
        during(&ops).iter().filter(|o| **o == FileOp::Write).count(),
        100
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A frame that is intact but carries another epoch ends the valid prefix, wherever it sits.
    #[test]
    fn a_stale_epoch_frame_ends_the_valid_prefix(frames in 1u64..20, stale_at in any::<prop::sample::Index>(),
                                                  other_epoch in any::<u64>(), len in 0usize..300) {
        let epoch = 5;
        prop_assume!(other_epoch != epoch);
        let stale_at = stale_at.index(frames as usize) as u64;
        let mut bytes = frame::FileHeader { flags: frame::FILE_FLAG_RECYCLED, epoch, created_unix_ns: 0 }
            .encode()
            .to_vec();
        for seq in 0..frames {
            let e = if seq == stale_at { other_epoch } else { epoch };
            frame::encode_frame(&mut bytes, seq, e, 0, &vec![seq as u8; len]);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, &bytes).unwrap();
        let v = verify(&path).unwrap();
        prop_assert_eq!(v.stop, StopReason::StaleEpoch);
        prop_assert_eq!(v.frames, stale_at);
        prop_assert_eq!(v.last_sequence, stale_at.checked_sub(1));
        prop_assert_eq!(v.valid_bytes, 64 + stale_at * (32 + len as u64));
    }
}

#[test]
fn decoupled_counters_are_live_and_every_mode_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    RecyclePool::prepare(&pool, 1, 1 << 20).unwrap();
    for &allocation in Allocation::ALL {
        for &flush in FlushMode::ALL {
            let path = dir.path().join(format!("{allocation}-{flush}.tbr"));
            let mut options = small(allocation, flush, Framing::Framed);
            options.recycle_pool = Some(pool.clone());
            options.decoupled = Some(DecoupledOptions {
                ring_bytes: 64 << 10,
                overflow: Overflow::Block,
            });
            let what = format!("decoupled {allocation}/{flush}");
            let mut r = Recorder::create(&path, options).unwrap();
            for i in 0..100 {
                r.write(&record(i, 1000)).unwrap();
            }
            // The writer thread publishes what it has written; none of it can exceed what was sent.
            // The two counters are published one after the other, so a live read is not a
            // consistent pair: each is checked on its own.
            let live = r.counters();
            assert!(live.frames <= 100, "{what}: {live:?}");
            assert!(
                live.payload_bytes <= 100 * 1000 && live.payload_bytes.is_multiple_of(1000),
                "{what}: {live:?}"
            );
            let summary = r.finish().unwrap();
            assert_eq!(summary.counters.frames, 100, "{what}");
            assert_eq!(
                summary.counters.blocked + summary.counters.dropped,
                summary.counters.blocked
            );
            let v = verify(&path).unwrap();
            assert_eq!((v.frames, v.last_sequence), (100, Some(99)), "{what}");
            assert_eq!(v.valid_bytes, summary.file_bytes, "{what}");
            if allocation == Allocation::Recycle {
                RecyclePool::open(&pool).unwrap().give_back(&path).unwrap();
            }
        }
    }
}

#[test]
fn a_decoupled_writers_error_reaches_the_producer_and_finish() {
    // /dev/full fails every write with ENOSPC: the writer thread's first write() fails.
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipping: no /dev/full");
        return;
    }
    let mut options = small(Allocation::Append, FlushMode::None, Framing::Raw);
    options.decoupled = Some(DecoupledOptions {
        ring_bytes: 64 << 10,
        overflow: Overflow::Block,
    });
    let mut r = Recorder::create(full, options).unwrap();
    // The ring holds 16 records; with the writer stopped, a later write must fail, not block.
    let mut failed = None;
    for i in 0..1000 {
        if let Err(e) = r.write(&record(i, 4096)) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("a write fails once the writer thread has stopped");
    assert!(e.to_string().contains("/dev/full"), "{e}");
    assert!(!matches!(e, RecordError::Closed), "{e}");
    let e = r.finish().unwrap_err();
    assert!(
        matches!(e, RecordError::BackgroundFailed(ref m) if m.contains("/dev/full")),
        "{e}"
    );
}

#[test]
fn a_recycled_file_with_a_torn_header_still_gets_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("pool");
    let pool = RecyclePool::prepare(&pool_dir, 1, 1 << 20).unwrap();
    let path = dir.path().join("lap.tbr");
    let mut options = small(Allocation::Recycle, FlushMode::None, Framing::Framed);
    options.recycle_pool = Some(pool_dir);
    record_n(&path, options.clone(), 50, 1000);
    pool.give_back(&path).unwrap();
    // Wreck the header's epoch field, as a torn header write would.
    let ready = std::fs::read_dir(pool.dir())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&ready).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&ready, &bytes).unwrap();
    // Lap 2 cut off after 10 frames: lap 1's frames 10.. follow with sequence numbers that fit.
    let mut r = Recorder::create(&path, options).unwrap();
    for i in 0..10 {
        r.write(&record(i, 1000)).unwrap();
    }
    drop(r);
    let v = verify(&path).unwrap();
    // The first frame said epoch 1, so this lap is 2: never 1 again.
    assert_eq!(
        (v.frames, v.epoch, v.stop),
        (10, Some(2), StopReason::StaleEpoch)
    );
}

#[test]
fn a_failed_extension_never_fails_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    for allocation in [Allocation::ZeroFill, Allocation::Fallocate] {
        let path = dir.path().join(format!("{allocation}.tbr"));
        let mut options = small(allocation, FlushMode::SyncFileRange, Framing::Framed);
        options.expected_bytes = 64 << 10;
        let probe = Probe::default();
        let mut r = Recorder::create_probed(&path, options, Some(probe.clone())).unwrap();
        probe.arm(|op| *op == FileOp::Fallocate);
        for i in 0..100 {
            r.write(&record(i, 4096)).unwrap();
        }
        let summary = r.finish().unwrap();
        assert!(
            during(&probe.ops()).contains(&FileOp::Fallocate),
            "{allocation}"
        );
        let v = verify(&path).unwrap();
        assert_eq!(
            (v.frames, v.valid_bytes),
            (100, summary.file_bytes),
            "{allocation}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), summary.file_bytes);
    }
}

#[test]
fn a_failed_flush_is_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    for decoupled in [false, true] {
        let path = dir.path().join(format!("f-{decoupled}.tbr"));
        let mut options = small(
            Allocation::ZeroFill,
            FlushMode::SyncFileRange,
            Framing::Framed,
        );
        if decoupled {
            options.decoupled = Some(DecoupledOptions {
                ring_bytes: 64 << 10,
                overflow: Overflow::Block,
            });
        }
        let probe = Probe::default();
        let mut r = Recorder::create_probed(&path, options, Some(probe.clone())).unwrap();
        probe.arm(|op| matches!(op, FileOp::SyncFileRange { .. }));
        // Whether a write sees it first depends on the threads; once one does, all later ones do.
        let mut first = None;
        for i in 0..200 {
            match (r.write(&record(i, 4096)), &first) {
                (Err(e), None) => first = Some(e.to_string()),
                (Ok(()), Some(e)) => panic!("a write succeeded after {e}"),
                _ => {}
            }
        }
        if let Some(e) = &first {
            assert!(e.contains("sync_file_range") && e.contains("f-"), "{e}");
        }
        // finish waits for the threads: it always reports the failure.
        let e = r.finish().unwrap_err().to_string();
        assert!(e.contains("sync_file_range"), "decoupled={decoupled}: {e}");
    }
}

/// The C ABI and the CLI hand recorders and pools to other threads.
#[test]
fn recorders_pools_and_reports_can_move_between_threads() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<Recorder>();
    send::<RecyclePool>();
    sync::<RecyclePool>();
    send::<RecordSummary>();
    send::<VerifyReport>();
    send::<RecordError>();
    sync::<RecordError>();
    send::<FlusherGuard>();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A crash leaves a recording cut short or with zeros from some point on: `verify` finds
    /// exactly the frames that lie wholly before that point.
    #[test]
    fn a_cut_or_zeroed_tail_keeps_exactly_the_whole_frames(
        lens in proptest::collection::vec(0usize..600, 1..30),
        cut in any::<prop::sample::Index>(),
        zeroed in any::<bool>(),
    ) {
        let mut bytes = frame::FileHeader { flags: 0, epoch: 1, created_unix_ns: 0 }.encode().to_vec();
        let mut ends = Vec::new();
        for (seq, len) in lens.iter().enumerate() {
            frame::encode_frame(&mut bytes, seq as u64, 1, 0, &vec![0xee; *len]);
            ends.push(bytes.len() as u64);
        }
        let cut = 64 + cut.index(bytes.len() - 64 + 1) as u64;
        if zeroed {
            bytes[cut as usize..].fill(0);
        } else {
            bytes.truncate(cut as usize);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, &bytes).unwrap();
        let v = verify(&path).unwrap();
        let whole = ends.iter().filter(|&&e| e <= cut).count() as u64;
        prop_assert_eq!(v.frames, whole);
        prop_assert_eq!(v.last_sequence, whole.checked_sub(1));
        prop_assert_eq!(v.valid_bytes, if whole == 0 { 64 } else { ends[whole as usize - 1] });
        let at_boundary = v.valid_bytes == bytes.len() as u64;
        match (at_boundary, zeroed) {
            (true, _) => prop_assert_eq!(v.stop, StopReason::EndOfFile),
            (false, false) => prop_assert_eq!(v.stop, StopReason::Truncated),
            // Zeros from the frame's start read as such; zeros inside a frame break its magic,
            // length or CRC.
            (false, true) => prop_assert!(
                matches!(
                    v.stop,
                    StopReason::Zeroes | StopReason::BadMagic | StopReason::BadLength
                        | StopReason::BadCrc | StopReason::Truncated
                ),
                "{:?}",
                v.stop
            ),
        }
    }
}
