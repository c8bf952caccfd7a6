//! `tailbound record --ship`, `ship`, `fetch`, `record verify --against` and the fault loop of
//! `bench ship`, against real Kafka brokers (KRaft, started from the official jars). A broker that
//! cannot start fails these tests: they are never skipped. They run one at a time, so that at
//! most one broker runs.

use std::process::{Command, Output};
use std::sync::Mutex;

use tailbound_ship::broker::TestBroker;

static ONE_BROKER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(args)
        .output()
        .expect("running tailbound")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_recording_shipped_live_is_fetched_back_frame_for_frame() {
    let _one = ONE_BROKER_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let broker = TestBroker::start().expect("starting the test broker");
    let url = broker.url("cli-live").to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.tbr");
    let rec_s = rec.to_str().unwrap();
    let out = run(&[
        "record",
        "--total",
        "2MiB",
        "--size",
        "8KiB",
        "--period",
        "1ms",
        "--flush-every",
        "256KiB",
        "--ship",
        &url,
        "--recorder",
        "cli/rec",
        rec_s,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("shipped: the broker holds all 257 records"),
        "{}",
        text(&out)
    );
    // Shipping it again as a backlog sends nothing.
    let out = run(&["ship", rec_s, "--to", &url, "--recorder", "cli/rec"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("257 records on the broker"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains(" 0 sent now"), "{}", text(&out));
    let copy = dir.path().join("copy.tbr");
    let copy_s = copy.to_str().unwrap();
    let out = run(&["fetch", &url, "--recorder", "cli/rec", copy_s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("256 frames"), "{}", text(&out));
    assert!(
        text(&out).contains("duplicates on the broker 0"),
        "{}",
        text(&out)
    );
    let out = run(&["record", "verify", copy_s, "--against", rec_s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("256 of its 256 frames equal"),
        "{}",
        text(&out)
    );
    // A copy with a frame missing is caught.
    let bytes = std::fs::read(&copy).unwrap();
    std::fs::write(&copy, &bytes[..bytes.len() - 100]).unwrap();
    let out = run(&["record", "verify", copy_s, "--against", rec_s]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("lost 1"), "{}", text(&out));
}

#[test]
fn the_fault_loop_loses_and_duplicates_nothing() {
    let _one = ONE_BROKER_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    // Seed 12 draws each kind of fault once: a broker restart, a shipper kill, a broker cut off.
    let out = run(&[
        "bench",
        "ship",
        "--faults",
        "3",
        "--seed",
        "12",
        "--unreachable",
        "10s",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("zero lost, zero duplicated"),
        "{}",
        text(&out)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for kind in ["shipper_kills", "broker_restarts", "unreachable_spells"] {
        assert_eq!(r[kind], 1, "{kind}: {r}");
    }
    assert_eq!(r["compare"]["lost"], 0);
    assert_eq!(r["fetch"]["duplicates"], 0);
    assert!(r["compare"]["matching"].as_u64().unwrap() > 0);
}
