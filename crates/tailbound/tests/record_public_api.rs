//! The recorder through its public API only, as the CLI and the C ABI use it: option specs,
//! recordings in the default, paper and conventional designs, recycle laps, verify reports.

use std::path::Path;

use tailbound::record::{
    verify, Allocation, DecoupledOptions, FlushMode, Flusher, FlusherGuard, Overflow, RecordError,
    Recorder, RecorderOptions, RecyclePool, StopReason,
};

fn record_all(path: &Path, options: RecorderOptions, n: u64) -> tailbound::record::RecordSummary {
    let mut r = Recorder::create(path, options).expect("create");
    for i in 0..n {
        let mut rec = vec![(i % 251) as u8; 16 << 10];
        rec[..8].copy_from_slice(&i.to_le_bytes());
        r.write(&rec).expect("write");
    }
    assert_eq!(r.counters().dropped, 0);
    r.finish().expect("finish")
}

#[test]
fn a_spec_string_is_what_the_options_print() {
    let spec = "allocation=fallocate,flush=sync-file-range,flush-every=512KiB,flusher=on,\
                framing=framed,expected-size=8MiB,decoupled=1MiB,overflow=overwrite,\
                measure-writes=true";
    let o: RecorderOptions = spec.parse().unwrap();
    assert_eq!(o.allocation, Allocation::Fallocate);
    assert_eq!(o.flush, FlushMode::SyncFileRange);
    assert_eq!(
        o.decoupled,
        Some(DecoupledOptions {
            ring_bytes: 1 << 20,
            overflow: Overflow::Overwrite
        })
    );
    assert_eq!(o.to_string().parse::<RecorderOptions>().unwrap(), o);
    let e = "flush=sometimes".parse::<RecorderOptions>().unwrap_err();
    assert!(e.to_string().contains("sometimes"), "{e}");
    assert!(matches!(e, RecordError::Options(_)));
}

#[test]
fn the_default_mode_records_16k_records_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("default.tbr");
    let options = RecorderOptions {
        expected_bytes: 4 << 20,
        measure_writes: true,
        ..RecorderOptions::default()
    };
    // 6.4 MiB: past the 4 MiB preallocation, three 2 MiB windows, of which pipelining has
    // completed the first two when the recording ends.
    let summary = record_all(&path, options, 400);
    assert_eq!(summary.counters.frames, 400);
    assert_eq!(summary.counters.payload_bytes, 400 * (16 << 10));
    assert_eq!(summary.counters.flushes, 2, "{:?}", summary.counters);
    assert_eq!(summary.writer_latency.map(|h| h.len()), Some(400));
    let v = verify(&path).unwrap();
    assert_eq!((v.frames, v.last_sequence), (400, Some(399)));
    assert_eq!(
        (v.valid_bytes, v.bytes),
        (summary.file_bytes, summary.file_bytes)
    );
    assert_eq!(v.stop, StopReason::EndOfFile);
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["stop"], "end-of-file");
    assert_eq!(json["frames"], 400);
}

#[test]
fn the_conventional_design_writes_the_raw_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.bin");
    let summary = record_all(&path, RecorderOptions::conventional(), 50);
    assert_eq!(summary.file_bytes, 50 * (16 << 10));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), summary.file_bytes);
    let e = verify(&path).unwrap_err();
    assert!(matches!(e, RecordError::NotARecording { .. }), "{e}");
    assert!(e.to_string().contains("none.bin"), "{e}");
}

#[test]
fn recycle_laps_show_only_the_current_lap() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("pool");
    let pool = RecyclePool::prepare(&pool_dir, 2, 8 << 20).unwrap();
    assert_eq!(pool.ready(), 2);
    let options = RecorderOptions {
        allocation: Allocation::Recycle,
        recycle_pool: Some(pool_dir.clone()),
        ..RecorderOptions::default()
    };
    let path = dir.path().join("lap.tbr");
    let mut laps = Vec::new();
    for frames in [300u64, 40, 120] {
        record_all(&path, options.clone(), frames);
        let v = verify(&path).unwrap();
        assert!(v.finished && v.stop == StopReason::Trailer, "{v:?}");
        assert_eq!(v.frames, frames);
        laps.push(v.epoch);
        // Give back and take the oldest ready file next: both files see laps.
        pool.give_back(&path).unwrap();
        assert_eq!(pool.ready(), 2);
    }
    // Each file's epoch counts its own laps; none is ever reused on a file.
    assert_eq!(laps, vec![Some(1), Some(1), Some(2)]);
    assert_eq!(RecyclePool::open(&pool_dir).unwrap().ready(), 2);
}

/// Root only: a recording with the flusher off leaves the `vm.dirty_*` settings as they were.
#[test]
fn the_paper_design_restores_the_flusher_settings() {
    if !tailbound::sys::proc::is_root() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI runs as root and must run this test"
        );
        let e = FlusherGuard::disable().unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
        eprintln!("skipping: turning the flusher off needs root");
        return;
    }
    let names = [
        "dirty_ratio",
        "dirty_bytes",
        "dirty_background_ratio",
        "dirty_background_bytes",
        "dirty_expire_centisecs",
    ];
    let read = || -> Vec<String> {
        names
            .iter()
            .map(|n| std::fs::read_to_string(format!("/proc/sys/vm/{n}")).unwrap())
            .collect()
    };
    let before = read();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("paper.bin");
    let options = RecorderOptions {
        expected_bytes: 4 << 20,
        ..RecorderOptions::paper()
    };
    assert_eq!(options.flusher, Flusher::Off);
    let mut r = Recorder::create(&path, options).unwrap();
    let during = std::fs::read_to_string("/proc/sys/vm/dirty_expire_centisecs").unwrap();
    assert_eq!(during.trim(), "300000");
    r.write(&[7u8; 16 << 10]).unwrap();
    let summary = r.finish().unwrap();
    assert_eq!(summary.file_bytes, 16 << 10);
    assert_eq!(read(), before);
}
