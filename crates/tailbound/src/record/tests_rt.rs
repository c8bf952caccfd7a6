//! The recording thread's worst case: slow-write tracing, and the background threads that must
//! never make it wait. Nothing here depends on timing.

use super::*;

fn record(i: u64, len: usize) -> Vec<u8> {
    let mut r = vec![(i % 251) as u8; len];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r
}

fn small() -> RecorderOptions {
    RecorderOptions {
        flush_every_bytes: 16 << 10,
        expected_bytes: 1 << 20,
        ..RecorderOptions::default()
    }
}

/// The scheduling policy of this process's thread `tid` (field 41 of its stat line).
fn policy_of(tid: i32) -> i64 {
    assert!(tid > 0, "the thread's id is known");
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(38).unwrap().parse().unwrap()
}

#[test]
fn a_trace_with_a_zero_bound_holds_every_write_with_its_index_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traced.tbr");
    let options = RecorderOptions {
        trace_slow: Some(std::time::Duration::ZERO),
        ..small()
    };
    let mut r = Recorder::create(&path, options).unwrap();
    let n = 40u64;
    for i in 0..n {
        r.write(&record(i, 1000)).unwrap();
    }
    let summary = r.finish().unwrap();
    let trace = summary.slow_writes.expect("traced");
    assert!(
        summary.writer_slow_writes.is_none(),
        "direct mode has one trace"
    );
    assert_eq!(trace.calls, TracedCalls::Recorder);
    assert_eq!(trace.traced, n);
    assert_eq!(trace.events.len() as u64 + trace.not_kept, n);
    let frame_bytes = (frame::FRAME_HEADER_BYTES + 1000) as u64;
    for (i, e) in trace.events.iter().enumerate() {
        assert_eq!(e.index, i as u64);
        assert_eq!(
            e.offset,
            Some(frame::FILE_HEADER_BYTES as u64 + i as u64 * frame_bytes)
        );
        assert!(e.latency_ns > 0);
        assert!(!e.cause().is_empty());
    }
    assert_eq!(verify(&path).unwrap().frames, n);
}

#[test]
fn a_decoupled_trace_holds_the_producers_copies_and_the_writers_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traced.tbr");
    let options = RecorderOptions {
        trace_slow: Some(std::time::Duration::ZERO),
        decoupled: Some(DecoupledOptions {
            ring_bytes: 1 << 20,
            overflow: Overflow::Block,
        }),
        ..small()
    };
    let mut r = Recorder::create(&path, options).unwrap();
    for i in 0..30 {
        r.write(&record(i, 500)).unwrap();
    }
    let summary = r.finish().unwrap();
    let producer = summary.slow_writes.expect("producer traced");
    let writer = summary.writer_slow_writes.expect("writer traced");
    assert_eq!(
        (producer.calls, writer.calls),
        (TracedCalls::Recorder, TracedCalls::Writer)
    );
    assert_eq!((producer.traced, writer.traced), (30, 30));
    assert!(producer.events.iter().all(|e| e.offset.is_none()));
    assert!(writer.events.iter().all(|e| e.offset.is_some()));
}

#[test]
fn without_trace_slow_nothing_is_traced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.tbr");
    let mut r = Recorder::create(&path, small()).unwrap();
    r.write(&record(0, 100)).unwrap();
    let summary = r.finish().unwrap();
    assert!(summary.slow_writes.is_none() && summary.writer_slow_writes.is_none());
}

#[test]
fn background_threads_never_preempt_the_recording_thread() {
    // SCHED_BATCH: a wake-up of the flush thread (or of the decoupled writer) on the recording
    // thread's CPU waits for the recording thread instead of taking the CPU from it.
    const SCHED_BATCH: i64 = 3;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch.tbr");
    let options = RecorderOptions {
        decoupled: Some(DecoupledOptions {
            ring_bytes: 1 << 20,
            overflow: Overflow::Block,
        }),
        ..small()
    };
    let mut r = Recorder::create(&path, options).unwrap();
    for i in 0..40 {
        r.write(&record(i, 1000)).unwrap();
    }
    let shared = r.durable_watch().shared;
    // Both threads settle their scheduling before `create` returns.
    let flush = shared.flush_tid.load(std::sync::atomic::Ordering::Acquire);
    let writer = shared.writer_tid.load(std::sync::atomic::Ordering::Acquire);
    assert_eq!(policy_of(flush), SCHED_BATCH);
    assert_eq!(policy_of(writer), SCHED_BATCH);
    r.finish().unwrap();
}
