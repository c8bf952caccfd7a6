//! Shipping against a real Kafka broker (KRaft, from the official jars; see
//! `tailbound_ship::broker`). One broker serves every test of this binary; each test uses topics
//! of its own. A broker that cannot start fails the tests: they are never skipped.

use std::path::Path;
use std::sync::OnceLock;

use tailbound::record::{Allocation, FlushMode, Recorder, RecorderOptions, RecyclePool};
use tailbound_ship::broker::TestBroker;
use tailbound_ship::fetch::{compare, fetch};
use tailbound_ship::ledger::{dest_hash, ledger_path, Ledger, LedgerState};
use tailbound_ship::ship::{ship_file, ship_with, LiveShipper, ShipOptions};
use tailbound_ship::KafkaUrl;

fn broker() -> &'static TestBroker {
    static BROKER: OnceLock<Result<TestBroker, String>> = OnceLock::new();
    match BROKER.get_or_init(|| TestBroker::start().map_err(|e| e.to_string())) {
        Ok(b) => b,
        Err(e) => panic!("cannot start the test broker: {e}"),
    }
}

/// A finished recording of `n` records, record `i` being `size` bytes that depend on `i`.
fn record(path: &Path, n: u64, size: usize, options: RecorderOptions) -> u64 {
    let mut r = Recorder::create(path, options).unwrap();
    for i in 0..n {
        let rec: Vec<u8> = (0..size).map(|j| (i as usize * 31 + j) as u8).collect();
        r.write(&rec).unwrap();
    }
    r.finish().unwrap().counters.frames
}

fn quick() -> RecorderOptions {
    RecorderOptions {
        allocation: Allocation::Append,
        flush: FlushMode::None,
        expected_bytes: 8 << 20,
        ..RecorderOptions::default()
    }
}

#[test]
fn a_backlog_ships_once_and_fetch_rebuilds_it_frame_for_frame() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.tbr");
    let frames = record(&rec, 300, 3000, quick());
    let url = broker().url("t-backlog");
    let mut opts = ShipOptions::new("node-1/rec.tbr");
    // Several batches.
    opts.batch_bytes = 64 << 10;
    let first = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!(first.acknowledged, frames + 1, "the header and every frame");
    assert_eq!(first.sent, frames + 1);
    assert!(!first.incomplete);
    // Shipping again sends nothing.
    let again = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!(again.sent, 0);
    assert_eq!(again.acknowledged, frames + 1);
    let copy = dir.path().join("copy.tbr");
    let f = fetch(&url, "node-1/rec.tbr", &copy).unwrap();
    assert_eq!((f.frames, f.duplicates, f.missing), (frames, 0, 0));
    let c = compare(&rec, &copy).unwrap();
    assert!(c.identical(), "{c:?}");
    assert_eq!(c.matching, frames);
    assert_eq!(std::fs::read(&rec).unwrap(), std::fs::read(&copy).unwrap());
}

#[test]
fn a_crash_between_the_ack_and_the_ledger_sends_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.tbr");
    let frames = record(&rec, 200, 2000, quick());
    let url = broker().url("t-crash-ack");
    let id = "node-2/rec.tbr";
    let mut opts = ShipOptions::new(id);
    opts.batch_bytes = 32 << 10;
    let first = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!(first.acknowledged, frames + 1);
    // The ledger as a crash would leave it had the shipper died after the broker acknowledged
    // everything but before the ledger said so: as written before the first batch.
    let lpath = ledger_path(&rec);
    let mut stale = Ledger::load(&lpath).unwrap().unwrap();
    stale.next_index = 0;
    stale.resume_offset = 0;
    stale.store(&lpath).unwrap();
    let again = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!(again.sent, 0, "{again:?}");
    assert_eq!(again.found_on_broker, frames + 1);
    // And half way: the ledger knows of half, the broker has all.
    stale.next_index = frames / 2;
    stale.store(&lpath).unwrap();
    let again = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!(again.sent, 0, "{again:?}");
    let copy = dir.path().join("copy.tbr");
    let f = fetch(&url, id, &copy).unwrap();
    assert_eq!((f.frames, f.duplicates, f.missing), (frames, 0, 0));
    assert!(compare(&rec, &copy).unwrap().identical());
}

#[test]
fn shipping_stops_at_the_limit_and_resumes_after_it() {
    struct Fixed(u64);
    impl tailbound_ship::ship::Limit for Fixed {
        fn limit(&self) -> Result<u64, tailbound_ship::ShipError> {
            Ok(self.0)
        }
        fn done(&self) -> bool {
            true
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.tbr");
    let frames = record(&rec, 10, 100, quick());
    let url = broker().url("t-limit");
    let opts = ShipOptions::new("node-3/rec.tbr");
    // The header and three whole frames of 132 bytes; one byte short of the fourth.
    let limit = 64 + 4 * 132 - 1;
    let r = ship_with(&rec, &url, &opts, &Fixed(limit)).unwrap();
    assert_eq!(r.acknowledged, 1 + 3);
    let r = ship_file(&rec, &url, &opts).unwrap();
    assert_eq!((r.sent, r.acknowledged), (frames - 3, frames + 1));
    let copy = dir.path().join("copy.tbr");
    fetch(&url, "node-3/rec.tbr", &copy).unwrap();
    assert!(compare(&rec, &copy).unwrap().identical());
}

#[test]
fn a_live_recording_ships_every_durable_frame_while_it_records() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("live.tbr");
    let options = RecorderOptions {
        flush_every_bytes: 256 << 10,
        expected_bytes: 16 << 20,
        ..RecorderOptions::default()
    };
    let mut r = Recorder::create(&rec, options).unwrap();
    let url = broker().url("t-live");
    let shipper = LiveShipper::start(
        &rec,
        &url,
        &ShipOptions::new("node-4/live.tbr"),
        r.durable_watch(),
    )
    .unwrap();
    for i in 0..2000u64 {
        let rec: Vec<u8> = (0..4000).map(|j| (i as usize * 7 + j) as u8).collect();
        r.write(&rec).unwrap();
    }
    let frames = r.finish().unwrap().counters.frames;
    let report = shipper.finish(std::time::Duration::from_secs(300)).unwrap();
    assert!(!report.incomplete, "{report:?}");
    assert_eq!(report.acknowledged, frames + 1);
    let copy = dir.path().join("copy.tbr");
    let f = fetch(&url, "node-4/live.tbr", &copy).unwrap();
    assert_eq!((f.frames, f.duplicates), (frames, 0));
    assert!(compare(&rec, &copy).unwrap().identical());
}

#[test]
fn a_recycled_file_retires_after_its_trailer_is_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let pool_dir = dir.path().join("pool");
    let pool = RecyclePool::prepare(&pool_dir, 1, 1 << 20).unwrap();
    let rec = dir.path().join("ring-0.tbr");
    let options = RecorderOptions {
        allocation: Allocation::Recycle,
        recycle_pool: Some(pool_dir.clone()),
        flush: FlushMode::Fdatasync,
        expected_bytes: 1 << 20,
        ..RecorderOptions::default()
    };
    let frames = record(&rec, 50, 1000, options);
    let url = broker().url("t-retire");
    let id = "node-5/ring-0.tbr";
    let r = ship_file(&rec, &url, &ShipOptions::new(id)).unwrap();
    assert!(r.finished, "the trailer was shipped: {r:?}");
    // Records: the header, the frames and the trailer.
    assert_eq!(r.acknowledged, frames + 2);
    assert_eq!(
        tailbound_ship::retire::retire(&rec, &pool, &url, id).unwrap(),
        tailbound_ship::retire::Retired::Now
    );
    assert!(!rec.exists() && !ledger_path(&rec).exists());
    assert_eq!(pool.ready(), 1);
    // The copy on the broker is whole.
    let copy = dir.path().join("copy.tbr");
    let f = fetch(&url, id, &copy).unwrap();
    assert!(f.finished);
    assert_eq!(f.frames, frames + 1);
    let l = Ledger {
        state: LedgerState::Shipping,
        created_unix_ns: 0,
        epoch: 0,
        next_index: 0,
        resume_offset: 0,
        partition: 0,
        dest: dest_hash("t-retire", id),
    };
    // A ledger of nothing is refused for a recording that is not shipped.
    let rec2 = dir.path().join("other.tbr");
    record(&rec2, 3, 10, quick());
    l.store(&ledger_path(&rec2)).unwrap();
    assert!(tailbound_ship::retire::retire(&rec2, &pool, &url, id).is_err());
    assert!(rec2.exists());
    let _ = KafkaUrl::parse("kafka://127.0.0.1:1/x").unwrap();
}
