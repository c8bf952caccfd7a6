//! The filebench process model (`bench fileserver --processes N`): a parent deletes the old
//! fileset through `system()` and creates a new one, then forks `N` worker processes that each
//! run the workload's threads for the duration and leave their figures in a file; the parent
//! adds them up ([`RunResult::merge_workers`]).
//!
//! Each worker draws from its own share of the fileset ([`Fileset::keep_share`]); the workers
//! start together, released by the parent closing a pipe they all read.

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use crate::workload::{self, Fileset, Params, PosixFs, RunResult, Workload};
use tailbound::sys::proc;

/// The fileset's directory under the run's directory, named as filebench names it.
pub const FILESET_DIR: &str = "bigfileset";

/// Runs the process model under `root` (a kernel path, a FUSE mount, or a shim mount in a
/// process under `tailbound run`).
pub fn run_processes(root: &Path, p: &Params, processes: u32) -> Result<RunResult, String> {
    if processes == 0 {
        return Err("--processes must be at least 1".into());
    }
    if p.workload == Workload::Webserver {
        // Its shared log's length lives in the generator's memory, which processes do not share.
        return Err("the process model runs fileserver and varmail, not webserver".into());
    }
    p.validate().map_err(|e| e.to_string())?;
    let set_dir = root.join(FILESET_DIR);
    let shown = set_dir.display().to_string();
    if shown.contains('\'') {
        return Err(format!("{shown}: a quote in the path"));
    }
    // As filebench does before it makes a fileset, whether or not one is there.
    match proc::system(&format!("rm -rf '{shown}'")) {
        Ok(0) => {}
        Ok(code) => return Err(format!("system(\"rm -rf {shown}\") exited with {code}")),
        Err(e) => return Err(format!("system(\"rm -rf {shown}\"): {e}")),
    }
    std::fs::create_dir_all(&set_dir).map_err(|e| format!("{shown}: mkdir: {e}"))?;
    let fs = PosixFs::new(&set_dir);
    let started = Instant::now();
    let set = Fileset::new(&fs, p);
    workload::setup(&fs, &set, p).map_err(|e| e.to_string())?;
    let setup_s = started.elapsed().as_secs_f64();

    // Results go to the kernel's /tmp, outside any mount under test.
    let out_dir = tempfile::Builder::new()
        .prefix("tailbound-fileserver-workers-")
        .tempdir()
        .map_err(|e| format!("a directory for the workers' results: {e}"))?;
    let (gun_rx, gun_tx) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut gun_tx = Some(gun_tx);
    let mut gun_rx = Some(gun_rx);
    let mut pids = Vec::new();
    for k in 0..processes {
        match proc::fork_single_threaded() {
            Ok(None) => {
                // The worker: never returns into the parent's code.
                drop(gun_tx.take());
                let code = worker(
                    &fs,
                    &set,
                    p,
                    k,
                    processes,
                    setup_s,
                    gun_rx.take(),
                    out_dir.path(),
                );
                std::process::exit(code);
            }
            Ok(Some(pid)) => pids.push(pid),
            Err(e) => {
                // The workers forked so far end once the gun's pipe closes with nothing sent.
                drop(gun_tx.take());
                for pid in pids {
                    let _ = proc::wait_child(pid);
                }
                return Err(format!("forking worker {k}: {e}"));
            }
        }
    }
    drop(gun_tx.take());
    drop(gun_rx.take());
    let mut failures = Vec::new();
    for (k, pid) in pids.iter().enumerate() {
        match proc::wait_child(*pid) {
            Ok(0) => {}
            Ok(code) => {
                let why = std::fs::read_to_string(out_dir.path().join(format!("worker-{k}.err")))
                    .unwrap_or_else(|_| "no message".into());
                failures.push(format!("worker {k} exited with {code}: {}", why.trim()));
            }
            Err(e) => failures.push(format!("waiting for worker {k}: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    let mut runs = Vec::with_capacity(pids.len());
    for k in 0..pids.len() {
        let path = out_dir.path().join(format!("worker-{k}.json"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("worker {k}'s result {}: {e}", path.display()))?;
        runs.push(
            serde_json::from_str::<RunResult>(&text)
                .map_err(|e| format!("worker {k}'s result: {e}"))?,
        );
    }
    RunResult::merge_workers(&runs).ok_or_else(|| "no worker ran".into())
}

/// One worker process: waits for the start, runs its share, and leaves its figures (or why it
/// failed) in `out_dir`. Returns the exit code.
#[allow(clippy::too_many_arguments)]
fn worker(
    fs: &PosixFs,
    set: &Fileset,
    p: &Params,
    k: u32,
    n: u32,
    setup_s: f64,
    gun: Option<std::io::PipeReader>,
    out_dir: &Path,
) -> i32 {
    let fail = |msg: String| {
        let _ = std::fs::write(out_dir.join(format!("worker-{k}.err")), msg);
        1
    };
    // The parent closes its end once every worker is forked: end of file is the start.
    if let Some(mut gun) = gun {
        let mut sink = Vec::new();
        if let Err(e) = gun.read_to_end(&mut sink) {
            return fail(format!("waiting for the start: {e}"));
        }
    }
    set.keep_share(k, n);
    let run = match workload::run_loops(fs, set, p, setup_s, None) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let text = match serde_json::to_string(&run) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    match std::fs::write(out_dir.join(format!("worker-{k}.json")), text) {
        Ok(()) => 0,
        Err(e) => fail(format!("writing the result: {e}")),
    }
}
