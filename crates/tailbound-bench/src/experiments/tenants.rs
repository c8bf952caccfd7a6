//! Tenants as separate processes for the scheduler experiments: `tailbound` re-executed with a
//! hidden child mode, started together and stopped together over a line protocol on stdin/stdout.
//!
//! Protocol: the child prints `ready` once it is set up, waits for a `go` line, works until its
//! stdin says `stop` or closes, and reports on stdout (lines the experiment defines), ending with
//! `done`. Times are `CLOCK_MONOTONIC` nanoseconds, which every process on the machine shares.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tailbound::sys::time::{monotonic_now, MonoNanos};

/// The line a child prints when it is ready to start.
pub const READY: &str = "ready";
/// The line that starts a child.
pub const GO: &str = "go";
/// The line that stops a child.
pub const STOP: &str = "stop";
/// The last line a child prints.
pub const DONE: &str = "done";

/// A child process that is killed and reaped if it is still running when dropped, so an error
/// or an interruption never leaves a tenant behind.
#[derive(Debug)]
pub struct TenantProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<Lines<BufReader<ChildStdout>>>,
    label: String,
}

impl TenantProcess {
    /// Starts `exe args` with piped stdin, stdout and stderr.
    pub fn spawn(exe: &Path, args: &[String], label: &str) -> Result<TenantProcess, String> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{label}: starting {}: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(|s| BufReader::new(s).lines());
        Ok(TenantProcess {
            child,
            stdin,
            stdout,
            label: label.to_string(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line of the child's stdout; an error (with the child's stderr) if it ended.
    pub fn line(&mut self) -> Result<String, String> {
        match self.stdout.as_mut().and_then(|l| l.next()) {
            Some(Ok(line)) => Ok(line),
            Some(Err(e)) => Err(format!("{}: reading its output: {e}", self.label)),
            None => Err(self.failure("ended early")),
        }
    }

    /// Waits for `READY`.
    pub fn wait_ready(&mut self) -> Result<(), String> {
        let line = self.line()?;
        if line == READY {
            Ok(())
        } else {
            Err(format!("{}: expected {READY:?}, got {line:?}", self.label))
        }
    }

    /// Sends one line on the child's stdin.
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let label = &self.label;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("{label}: stdin already closed"))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{label}: writing {line:?}: {e}"))
    }

    /// Sends `STOP` and closes stdin.
    pub fn stop(&mut self) {
        let _ = self.send(STOP);
        self.stdin = None;
    }

    /// Hands the stdout lines over (to a reader thread).
    pub fn take_lines(&mut self) -> Option<Lines<BufReader<ChildStdout>>> {
        self.stdout.take()
    }

    /// Reads every line up to `DONE`, then waits for the child to exit successfully.
    pub fn finish(mut self) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        loop {
            let line = self.line()?;
            if line == DONE {
                break;
            }
            lines.push(line);
        }
        self.stdin = None;
        let status = self
            .child
            .wait()
            .map_err(|e| format!("{}: waiting: {e}", self.label))?;
        if !status.success() {
            return Err(self.failure(&format!("exited with {status}")));
        }
        Ok(lines)
    }

    /// Closes stdin and waits for the child to exit successfully (for children whose output was
    /// taken with [`take_lines`](Self::take_lines)).
    pub fn wait_exit(mut self) -> Result<(), String> {
        self.stdin = None;
        let status = self
            .child
            .wait()
            .map_err(|e| format!("{}: waiting: {e}", self.label))?;
        if !status.success() {
            return Err(self.failure(&format!("exited with {status}")));
        }
        Ok(())
    }

    /// Whether the child has already exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills the child and describes how it failed, with its stderr.
    pub fn failure(&mut self, what: &str) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        format!("{}: {what}: {}", self.label, stderr.trim())
    }
}

impl Drop for TenantProcess {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether the run was interrupted (SIGINT/SIGTERM set the flag).
pub fn interrupted(flag: &Option<Arc<AtomicBool>>) -> bool {
    flag.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Sleeps until `until`, waking every 50 ms to give up early when the run is interrupted or a
/// tenant has died.
pub fn sleep_watching(
    until: MonoNanos,
    flag: &Option<Arc<AtomicBool>>,
    tenants: &mut [TenantProcess],
) -> Result<(), String> {
    loop {
        if interrupted(flag) {
            return Err("interrupted".into());
        }
        for t in tenants.iter_mut() {
            if t.exited() {
                return Err(t.failure("ended during the measurement"));
            }
        }
        let now = monotonic_now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep(until.since(now).min(Duration::from_millis(50)));
    }
}

/// The child's side: waits for `GO` on `input` (returning false if it closed first), then
/// watches the rest of `input` on a thread and returns a flag that turns true at `STOP` or end
/// of input.
pub fn child_wait_go(mut input: impl BufRead + Send + 'static) -> Option<Arc<AtomicBool>> {
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) if line.trim() == GO => break,
            Ok(_) => {}
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match input.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.trim() == STOP => break,
                Ok(_) => {}
            }
        }
        flag.store(true, Ordering::Relaxed);
    });
    Some(stop)
}

/// Bytes of the operations `(start_ns, end_ns, bytes)` that fall in `[lo, hi)`, each counted in
/// proportion to the part of its duration inside the window (an operation is assumed to move its
/// bytes evenly over its duration).
pub fn bytes_in_window(ops: &[(u64, u64, u64)], lo: u64, hi: u64) -> f64 {
    ops.iter()
        .map(|&(start, end, bytes)| {
            if end <= start {
                return if start >= lo && start < hi {
                    bytes as f64
                } else {
                    0.0
                };
            }
            let overlap = end.min(hi).saturating_sub(start.max(lo));
            bytes as f64 * overlap as f64 / (end - start) as f64
        })
        .sum()
}

/// Bytes a running total `(time_ns, total_bytes)` (sorted by time) grew by over `[lo, hi]`,
/// interpolating linearly between samples.
pub fn growth_in_window(samples: &[(u64, u64)], lo: u64, hi: u64) -> f64 {
    let at = |t: u64| -> f64 {
        match samples.iter().position(|&(ts, _)| ts >= t) {
            None => samples.last().map_or(0.0, |&(_, b)| b as f64),
            // At or before the first sample: its total (children report a first sample of 0).
            Some(0) => samples[0].1 as f64,
            Some(i) => {
                let (t0, b0) = samples[i - 1];
                let (t1, b1) = samples[i];
                if t1 == t0 {
                    return b1 as f64;
                }
                b0 as f64 + (b1 - b0) as f64 * (t - t0) as f64 / (t1 - t0) as f64
            }
        }
    };
    (at(hi) - at(lo)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_count_in_proportion_to_their_overlap() {
        let ops = [(0, 100, 1000), (100, 200, 1000), (200, 300, 1000)];
        assert_eq!(bytes_in_window(&ops, 0, 300), 3000.0);
        assert_eq!(bytes_in_window(&ops, 50, 250), 2000.0);
        assert_eq!(bytes_in_window(&ops, 150, 160), 100.0);
        assert_eq!(bytes_in_window(&ops, 300, 400), 0.0);
        assert_eq!(bytes_in_window(&[(10, 10, 7)], 0, 20), 7.0);
        assert_eq!(bytes_in_window(&[(10, 10, 7)], 11, 20), 0.0);
    }

    #[test]
    fn running_totals_are_interpolated() {
        let samples = [(100, 0), (200, 1000), (300, 3000)];
        assert_eq!(growth_in_window(&samples, 100, 300), 3000.0);
        assert_eq!(growth_in_window(&samples, 150, 250), 1500.0);
        assert_eq!(growth_in_window(&samples, 250, 1000), 1000.0);
        assert_eq!(growth_in_window(&samples, 0, 100), 0.0);
        assert_eq!(growth_in_window(&[], 0, 100), 0.0);
    }

    #[test]
    fn a_child_starts_at_go_and_stops_at_stop_or_end_of_input() {
        let input = std::io::Cursor::new(b"noise\ngo\nmore\nstop\n".to_vec());
        let stop = child_wait_go(input).expect("go was sent");
        for _ in 0..200 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stop.load(Ordering::Relaxed));
        assert!(child_wait_go(std::io::Cursor::new(b"stop\n".to_vec())).is_none());
        let stop = child_wait_go(std::io::Cursor::new(b"go\n".to_vec())).unwrap();
        for _ in 0..200 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stop.load(Ordering::Relaxed), "end of input stops too");
    }
}
