//! The fault loop: a live recording shipped by a separate shipper process while the loop kills
//! the shipper (`kill -9`), kills and restarts the broker (`kill -9`), and makes the broker
//! unreachable for a while; then the recording is fetched back from the topic and compared with
//! the original frame by frame. Zero lost and zero duplicated is the pass.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tailbound::record::{Allocation, Recorder, RecorderOptions, RecyclePool};

use crate::broker::TestBroker;
use crate::fetch::{compare, fetch, CompareReport, FetchReport};
use crate::ShipError;

/// What the loop does.
#[derive(Debug, Clone)]
pub struct FaultOptions {
    pub faults: usize,
    pub seed: u64,
    /// Scratch directory (the recording, its pool, the fetched copy, logs).
    pub dir: PathBuf,
    /// The shipper command up to its arguments, e.g. `tailbound ship`; the loop adds `--follow
    /// FILE --to URL --recorder ID`.
    pub shipper: Vec<OsString>,
    /// How long the broker stays unreachable.
    pub unreachable: Duration,
    /// The recording: bytes per record, every `period`.
    pub record_bytes: u64,
    pub period: Duration,
}

/// What happened and what came back.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    pub shipper_kills: u64,
    pub broker_restarts: u64,
    pub unreachable_spells: u64,
    /// Times the shipper process exited with an error by itself (and was started again).
    pub shipper_failures: u64,
    pub frames_recorded: u64,
    /// The end of the shipper processes' output, when one failed by itself.
    pub shipper_log_tail: Vec<String>,
    pub fetch: FetchReport,
    pub compare: CompareReport,
    pub seconds: f64,
}

impl FaultReport {
    /// Zero lost, zero duplicated, nothing missing, byte for byte.
    pub fn passed(&self) -> bool {
        self.compare.identical() && self.fetch.duplicates == 0 && self.fetch.missing == 0
    }
}

struct ShipperProcess {
    cmd: Vec<OsString>,
    log: PathBuf,
    child: Option<Child>,
}

impl ShipperProcess {
    fn spawn(&mut self) -> Result<(), ShipError> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(crate::io_err(&self.log, "opening"))?;
        let err = log
            .try_clone()
            .map_err(crate::io_err(&self.log, "opening"))?;
        let mut cmd = Command::new(&self.cmd[0]);
        // The shipper dies with the loop, never orphaned.
        let child = crate::broker::die_with_parent(&mut cmd)
            .args(&self.cmd[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                ShipError::Usage(format!("starting the shipper {:?}: {e}", self.cmd[0]))
            })?;
        self.child = Some(child);
        Ok(())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `Some(success)` once it exited.
    fn exited(&mut self) -> Option<bool> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status.success())
            }
            _ => None,
        }
    }
}

impl Drop for ShipperProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sleeps `d`, restarting the shipper if it failed by itself meanwhile.
fn tend(shipper: &mut ShipperProcess, d: Duration, failures: &mut u64) -> Result<(), ShipError> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if shipper.exited() == Some(false) {
            *failures += 1;
            shipper.spawn()?;
        }
        std::thread::sleep(Duration::from_millis(20).min(d));
    }
    Ok(())
}

/// Runs the loop.
pub fn run(opts: &FaultOptions, progress: &mut dyn FnMut(&str)) -> Result<FaultReport, ShipError> {
    if opts.shipper.is_empty() {
        return Err(ShipError::Usage("no shipper command".into()));
    }
    let started = Instant::now();
    std::fs::create_dir_all(&opts.dir).map_err(crate::io_err(&opts.dir, "creating"))?;
    progress("starting a Kafka broker behind a proxy on 127.0.0.1");
    let mut broker = TestBroker::start_behind_proxy()?;
    let url = broker.url("tailbound-faults");
    // Room for the whole loop: each fault takes at most the unreachable spell or a broker
    // restart, plus the pause between faults.
    let per_second = opts.record_bytes.max(1) as f64 / opts.period.as_secs_f64().max(1e-6);
    let budget =
        (opts.faults as f64 * (opts.unreachable.as_secs_f64().max(20.0) + 2.0) + 60.0) * per_second;
    let frame = opts.record_bytes + 32;
    let file_bytes =
        ((budget as u64 / frame + 16) * frame + 64 + (4 << 20)).next_multiple_of(1 << 20);
    let pool_dir = opts.dir.join("pool");
    progress("preparing the recycle pool");
    RecyclePool::prepare(&pool_dir, 1, file_bytes)?;
    let rec = opts.dir.join("live.tbr");
    let recorder = Recorder::create(
        &rec,
        RecorderOptions {
            allocation: Allocation::Recycle,
            recycle_pool: Some(pool_dir.clone()),
            expected_bytes: file_bytes,
            ..RecorderOptions::default()
        },
    )?;
    let capacity = (file_bytes - 64 - (2 << 20)) / frame - 1;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_rec = stop.clone();
    let (period, record_bytes) = (opts.period, opts.record_bytes as usize);
    let recording = std::thread::spawn(move || -> Result<u64, ShipError> {
        let mut recorder = recorder;
        let mut record = vec![0u8; record_bytes];
        let mut i = 0u64;
        let mut next = Instant::now();
        while !stop_rec.load(Ordering::Acquire) && i < capacity {
            record[..8.min(record_bytes)].copy_from_slice(&i.to_le_bytes()[..8.min(record_bytes)]);
            for (j, b) in record.iter_mut().enumerate().skip(8) {
                *b = (i as u8).wrapping_add(j as u8);
            }
            recorder.write(&record)?;
            i += 1;
            next += period;
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        Ok(recorder.finish()?.counters.frames)
    });
    let recorder_id = "faults/live.tbr".to_string();
    let mut cmd = opts.shipper.clone();
    cmd.extend([
        "--follow".into(),
        rec.clone().into(),
        "--to".into(),
        url.to_string().into(),
    ]);
    cmd.extend(["--recorder".into(), recorder_id.clone().into()]);
    let mut shipper = ShipperProcess {
        cmd,
        log: opts.dir.join("shipper.log"),
        child: None,
    };
    shipper.spawn()?;
    let mut rng = fastrand::Rng::with_seed(opts.seed);
    let (mut kills, mut restarts, mut spells, mut failures) = (0u64, 0u64, 0u64, 0u64);
    let mut result = Ok(());
    for n in 0..opts.faults {
        tend(
            &mut shipper,
            Duration::from_millis(rng.u64(300..1500)),
            &mut failures,
        )?;
        let step = match rng.u8(0..3) {
            0 => {
                progress(&format!(
                    "fault {}/{}: kill -9 of the shipper",
                    n + 1,
                    opts.faults
                ));
                kills += 1;
                shipper.kill9();
                std::thread::sleep(Duration::from_millis(rng.u64(0..300)));
                shipper.spawn()
            }
            1 => {
                progress(&format!(
                    "fault {}/{}: kill -9 and restart of the broker",
                    n + 1,
                    opts.faults
                ));
                restarts += 1;
                broker.restart()
            }
            _ => {
                progress(&format!(
                    "fault {}/{}: broker unreachable for {:?}",
                    n + 1,
                    opts.faults,
                    opts.unreachable
                ));
                spells += 1;
                broker.cut(true);
                let r = tend(&mut shipper, opts.unreachable, &mut failures);
                broker.cut(false);
                r
            }
        };
        if let Err(e) = step {
            result = Err(e);
            break;
        }
    }
    stop.store(true, Ordering::Release);
    let frames = recording
        .join()
        .map_err(|_| ShipError::Usage("the recording thread panicked".into()))??;
    result?;
    progress("recording finished; waiting for the shipper to ship its trailer");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        match shipper.exited() {
            Some(true) => break,
            Some(false) => {
                failures += 1;
                shipper.spawn()?;
            }
            None => {}
        }
        if Instant::now() > deadline {
            return Err(ShipError::Usage(format!(
                "the shipper did not finish in time; see {}",
                shipper.log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    progress("fetching the recording back from the topic");
    let copy = opts.dir.join("fetched.tbr");
    let fetched = fetch(&url, &recorder_id, &copy)?;
    let compared = compare(&rec, &copy)?;
    let shipper_log_tail = if failures > 0 {
        let log = std::fs::read_to_string(&shipper.log).unwrap_or_default();
        let mut tail: Vec<String> = log.lines().rev().take(20).map(str::to_string).collect();
        tail.reverse();
        tail
    } else {
        Vec::new()
    };
    Ok(FaultReport {
        shipper_log_tail,
        shipper_kills: kills,
        broker_restarts: restarts,
        unreachable_spells: spells,
        shipper_failures: failures,
        frames_recorded: frames,
        fetch: fetched,
        compare: compared,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Removes what [`run`] left in `dir`.
pub fn clean(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
