//! A recording with its memory locked (`mlockall`), in a process of its own: locking is
//! process-wide, so it must not reach the other tests.

use tailbound::record::{verify, Recorder, RecorderOptions};

/// Kilobytes of this process's memory that are locked (`VmLck`).
fn locked_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap())
        .unwrap()
}

#[test]
fn a_mapped_recording_with_locked_memory_flushes_and_drops_its_windows() {
    if !tailbound::record::hygiene::probe().lock_memory.permitted {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must run this test"
        );
        eprintln!("skipping: locking memory is not permitted here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.tbr");
    let options = RecorderOptions {
        mlockall: true,
        flush_every_bytes: 64 << 10,
        expected_bytes: 8 << 20,
        ..RecorderOptions::default()
    };
    let mut r = Recorder::create(&path, options).unwrap();
    assert!(locked_kib() > 0, "memory is locked");
    // Far more than the windows locked ahead: flushed windows are unlocked and unmapped (a
    // locked range cannot be unmapped with MADV_DONTNEED).
    let n = 400u64;
    for i in 0..n {
        let mut rec = vec![(i % 251) as u8; 16 << 10];
        rec[..8].copy_from_slice(&i.to_le_bytes());
        r.write(&rec).unwrap();
    }
    let summary = r.finish().unwrap();
    assert!(summary.counters.flushes > 2, "{:?}", summary.counters);
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.last_sequence), (n, Some(n - 1)));
    tailbound::sys::proc::unlock_all_memory().unwrap();
}
