//! A panic in a thread the library starts surfaces as an error naming its site, and nothing
//! hangs. In tbfs it poisons the pool: the calls after it fail with `Error::Poisoned`, and
//! closing or dropping the pool returns. In the recorder and the scheduler the calls waiting
//! on the thread get the error. Panics are injected with failpoints, armed process-wide, so
//! these tests are their own test binary.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tailbound::dev::sim::SimDevice;
use tailbound::record::{DecoupledOptions, Overflow, Recorder, RecorderOptions};
use tailbound::sched::{Config as SchedConfig, Prio, Scheduler};
use tailbound::tbfs::{Config, Error, Fs, OpenFlags, OpenOptions};

const POOL_BYTES: u64 = 64 << 20;

/// Long enough for any machine; reached only when the behaviour under test is missing.
const BOUND: Duration = Duration::from_secs(120);

fn device() -> Arc<SimDevice> {
    Arc::new(SimDevice::new(POOL_BYTES))
}

/// Runs `f` on another thread and returns its result, or fails the test if it does not return
/// within [`BOUND`] (it hangs).
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|e| panic!("{what} did not return: {e}"))
}

#[test]
fn a_panic_in_the_background_pass_poisons_the_pool_and_nothing_hangs() {
    let dev = device();
    let fs = Fs::format(dev.clone(), &Config::default()).unwrap();
    let mut kept = fs.open_file("/kept", OpenFlags::create()).unwrap();
    kept.write(b"written before the panic").unwrap();
    fs.sync().unwrap();
    let mut f = fs.open_file("/later", OpenFlags::create()).unwrap();

    tailbound::failpoint::arm("tbfs.background");
    // The background thread runs a pass at least every 100 ms; wait (bounded) for it to panic.
    let start = Instant::now();
    let reason = loop {
        if let Some(r) = fs.poisoned() {
            break r;
        }
        assert!(
            start.elapsed() < BOUND,
            "the background thread's panic did not poison the pool"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(reason.contains("failpoint tbfs.background"), "{reason}");
    assert!(
        reason.contains("crates/tailbound/src/tbfs/fs.rs:"),
        "the reason names the site: {reason}"
    );

    match f.write(b"after the panic") {
        Err(Error::Poisoned(why)) => assert_eq!(why, reason),
        other => panic!("a write after the panic: {other:?}"),
    }
    let e = fs.sync().unwrap_err();
    assert!(matches!(e, Error::Poisoned(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);

    let closing = fs.clone();
    let closed = returns("close", move || closing.close());
    assert!(matches!(closed, Err(Error::Poisoned(_))), "{closed:?}");
    returns("drop", move || drop((fs, f, kept)));

    // Reopening recovers from storage: what was synced before the panic is there.
    let fs = Fs::open(dev, &OpenOptions::default()).unwrap();
    assert_eq!(fs.poisoned(), None);
    let mut back = fs.open_file("/kept", OpenFlags::read_only()).unwrap();
    let mut buf = vec![0u8; 64];
    let n = back.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"written before the panic");
    fs.close().unwrap();
}

#[test]
fn poison_with_fails_every_later_call_with_the_first_reason() {
    let fs = Fs::format(device(), &Config::default()).unwrap();
    let mut f = fs.open_file("/a", OpenFlags::create()).unwrap();
    f.write(b"before").unwrap();
    assert_eq!(fs.poisoned(), None);
    fs.poison_with("the caller caught a panic");
    fs.poison_with("a second reason");
    assert_eq!(fs.poisoned().as_deref(), Some("the caller caught a panic"));
    for e in [
        f.write(b"after").map(drop).unwrap_err(),
        fs.open_file("/b", OpenFlags::create())
            .map(drop)
            .unwrap_err(),
        fs.stat("/a").map(drop).unwrap_err(),
        fs.sync().unwrap_err(),
    ] {
        match e {
            Error::Poisoned(why) => assert_eq!(why, "the caller caught a panic"),
            other => panic!("{other:?}"),
        }
    }
    drop(f);
    assert!(matches!(fs.close(), Err(Error::Poisoned(_))));
}

/// The recorder tests' failpoints are reached by every recorder's threads: one test at a time.
static RECORDERS: Mutex<()> = Mutex::new(());

#[test]
fn a_panic_in_the_recorders_flush_thread_fails_the_recording_naming_its_site() {
    let _one = RECORDERS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let options: RecorderOptions = "flush-every=64KiB".parse().unwrap();
    let mut r = Recorder::create(dir.path().join("flush.tbr"), options).unwrap();
    tailbound::failpoint::arm("record.flush");
    let record = vec![5u8; 4096];
    // The first flush job panics; the writes after it, or `finish`, report it.
    let mut errors = Vec::new();
    for _ in 0..256 {
        if let Err(e) = r.write(&record) {
            errors.push(e.to_string());
            break;
        }
    }
    let finished = returns("finish", move || r.finish().map(drop));
    errors.push(finished.expect_err("finish after the panic").to_string());
    let all = errors.join("\n");
    assert!(all.contains("failpoint record.flush"), "{all}");
    assert!(
        all.contains("crates/tailbound/src/record/writer.rs:"),
        "{all}"
    );
}

#[test]
fn a_panic_in_the_decoupled_writer_thread_does_not_leave_the_producer_waiting() {
    let _one = RECORDERS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let options = RecorderOptions {
        // A producer that fills the ring waits for the writer thread to make room.
        decoupled: Some(DecoupledOptions {
            ring_bytes: 64 << 10,
            overflow: Overflow::Block,
        }),
        ..RecorderOptions::default()
    };
    let mut r = Recorder::create(dir.path().join("decoupled.tbr"), options).unwrap();
    tailbound::failpoint::arm("record.writer");
    let error = returns("the producer's writes", move || {
        let record = vec![6u8; 4096];
        // Far more than the ring holds: without the writer thread, the ring stays full.
        for _ in 0..4096 {
            if let Err(e) = r.write(&record) {
                return e.to_string();
            }
        }
        panic!("no write failed after the writer thread panicked");
    });
    assert!(error.contains("failpoint record.writer"), "{error}");
    assert!(
        error.contains("crates/tailbound/src/record/recorder.rs:"),
        "{error}"
    );
}

#[test]
fn a_panic_in_a_scheduler_dispatcher_fails_that_request_and_the_next_ones_go_on() {
    let sched = Scheduler::new(Arc::new(SimDevice::new(1 << 20)), SchedConfig::default()).unwrap();
    let t = sched.add_tenant("t", Prio::DEFAULT, 1);
    let block = vec![9u8; 4096];
    tailbound::failpoint::arm("sched.dispatch");
    let writing = sched.clone();
    let block2 = block.clone();
    let err = returns("the write that panics", move || {
        writing.write_at(t, 0, &block2)
    })
    .expect_err("the dispatch panicked");
    let message = err.to_string();
    assert!(message.contains("failpoint sched.dispatch"), "{message}");
    assert!(
        message.contains("crates/tailbound/src/sched/exec.rs:"),
        "{message}"
    );
    sched.write_at(t, 4096, &block).unwrap();
    let mut back = vec![0u8; 4096];
    sched.read_at(t, 4096, &mut back).unwrap();
    assert_eq!(back, block);
}
