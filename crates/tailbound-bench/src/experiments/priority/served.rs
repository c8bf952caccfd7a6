//! `bench priority --processes`: the tbfs cases with the real-time writer and the copy as
//! separate processes (seed 004's setting), both clients of one pool server in the bench's
//! process. Each sets its own I/O priority, as `ionice` would; the server reads it from each
//! request's header and charges the pool's scheduler at that class.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tailbound::sched::Policy;
use tailbound::serve::{Client, Server, ServerOptions};
use tailbound::sys::time::monotonic_now;
use tailbound::tbfs::OpenFlags;

use super::{
    copy_rates, timed_appends, CopyMode, LogStep, PriorityBench, PriorityRow, Rate,
    COPY_CHUNK_BYTES, COPY_PRIO, WRITER_PRIO, WRITE_BYTES,
};
use crate::experiments::loopfs::LoopFs;
use crate::experiments::tenants::{child_wait_go, sleep_watching, TenantProcess, DONE, GO, READY};
use crate::stats::LatencyHistogram;

/// The writer's report lines: `w FIRST_START LAST_END` and `h VALUE_NS COUNT`.
const WINDOW: &str = "w";
const HIST: &str = "h";

fn say(out: &mut dyn Write, line: &str) -> Result<(), String> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("reporting: {e}"))
}

/// The writer process: `writes` appends of 4 KiB to `/log`, each with `fdatasync`, in the
/// real-time class, through the server on `socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedWriterSpec {
    pub socket: PathBuf,
    pub writes: u64,
    pub rate: Rate,
}

impl ServedWriterSpec {
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "priority".into(),
            "--served-writer".into(),
            "--socket".into(),
            self.socket.display().to_string(),
            "--writes".into(),
            self.writes.to_string(),
            "--served-rate".into(),
            self.rate.name(),
        ]
    }

    /// Prints `ready`, waits for `go`, writes (stopping early at `stop`), then prints its
    /// window, its histogram and `done`.
    pub fn run(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        WRITER_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("setting the writer's real-time I/O priority: {e}"))?;
        let client = Client::connect(&self.socket)
            .map_err(|e| format!("connecting to {}: {e}", self.socket.display()))?;
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(());
        };
        let data = [0x5au8; WRITE_BYTES];
        let open_log = || {
            client
                .open_file(
                    "/log",
                    OpenFlags {
                        truncate: true,
                        ..OpenFlags::create()
                    },
                )
                .map_err(|e| format!("creating /log: {e}"))
        };
        let mut log = open_log()?;
        let (hist, first, last) = timed_appends(self.writes, self.rate, &Some(stop), |step| {
            if step == LogStep::NewLog {
                log = open_log()?;
                return Ok(());
            }
            log.append(&data)
                .and_then(|_| log.fdatasync())
                .map_err(|e| format!("appending to /log: {e}"))
        })?;
        let mut text = format!("{WINDOW} {first} {last}\n");
        for v in hist.inner().iter_recorded() {
            text.push_str(&format!(
                "{HIST} {} {}\n",
                v.value_iterated_to(),
                v.count_at_value()
            ));
        }
        text.push_str(DONE);
        say(out, &text)
    }
}

/// The writer's report: its histogram and the first write's start and the last one's end.
fn parse_writer(lines: &[String]) -> Result<(LatencyHistogram, u64, u64), String> {
    let mut hist = LatencyHistogram::new();
    let mut window = None;
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let nums: Option<Vec<u64>> = words.iter().skip(1).map(|w| w.parse().ok()).collect();
        match (words.first(), nums.as_deref()) {
            (Some(&WINDOW), Some(&[a, b])) => window = Some((a, b)),
            (Some(&HIST), Some(&[v, n])) => {
                for _ in 0..n {
                    hist.record_ns(v);
                }
            }
            _ => return Err(format!("unexpected line from the writer: {line:?}")),
        }
    }
    let (first, last) = window.ok_or("the writer reported no window")?;
    Ok((hist, first, last))
}

/// The copy process: copies `/source` (of `chunks` chunks) to `/copy-N` again and again through
/// the server on `socket`, at best effort level 7, as the thread mode's copy does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCopySpec {
    pub socket: PathBuf,
    pub chunks: u64,
    pub mode: CopyMode,
}

impl ServedCopySpec {
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "priority".into(),
            "--served-copy".into(),
            "--socket".into(),
            self.socket.display().to_string(),
            "--chunks".into(),
            self.chunks.to_string(),
            "--copy".into(),
            self.mode.name().into(),
        ]
    }

    /// Prints `ready`, waits for `go`, copies until `stop` printing `c TIME_NS TOTAL_BYTES`
    /// at the start and after every chunk, then `done`.
    pub fn run(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        COPY_PRIO
            .apply_to_current_thread()
            .map_err(|e| format!("lowering the copy's I/O priority: {e}"))?;
        let tbfs = Client::connect(&self.socket)
            .map_err(|e| format!("connecting to {}: {e}", self.socket.display()))?;
        let src = tbfs
            .open_file("/source", OpenFlags::read_only())
            .map_err(|e| format!("opening the source: {e}"))?;
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(());
        };
        let mut buf = vec![0u8; COPY_CHUNK_BYTES as usize];
        let mut total = 0u64;
        say(out, &format!("c {} 0", monotonic_now().0))?;
        let mut pass = 0u64;
        'copying: loop {
            if pass > 0 {
                let old = format!("/copy-{}", pass - 1);
                tbfs.unlink(&old)
                    .map_err(|e| format!("removing {old}: {e}"))?;
            }
            let name = format!("/copy-{pass}");
            let dst = tbfs
                .open_file(&name, OpenFlags::create())
                .map_err(|e| format!("creating {name}: {e}"))?;
            for k in 0..self.chunks {
                if stop.load(Ordering::Relaxed) {
                    break 'copying;
                }
                let at = k * COPY_CHUNK_BYTES;
                src.pread(&mut buf, at)
                    .and_then(|_| dst.pwrite(&buf, at))
                    .and_then(|_| match self.mode {
                        CopyMode::Direct => dst.fdatasync(),
                        CopyMode::Buffered => Ok(()),
                    })
                    .map_err(|e| format!("copying at {at}: {e}"))?;
                total += COPY_CHUNK_BYTES;
                say(out, &format!("c {} {total}", monotonic_now().0))?;
            }
            pass += 1;
        }
        say(out, DONE)
    }
}

impl PriorityBench {
    /// The tbfs writer alone as a process, through a server, in a fresh pool.
    pub(super) fn run_tbfs_served_alone(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        self.run_tbfs_served(fs, device, profile, policy, rate, false)
    }

    /// One tbfs case with the writer and the copy as processes, through a server.
    pub(super) fn run_tbfs_served_case(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
    ) -> Result<PriorityRow, String> {
        self.run_tbfs_served(fs, device, profile, policy, rate, true)
    }

    /// A pool as [`PriorityBench::tbfs_pool`] makes it (with the copy's source, when there is
    /// a copy), served on a socket beside it; the copy process runs alone for `copy_alone`,
    /// then the writer process does its writes, then the copy runs alone again as long.
    fn run_tbfs_served(
        &self,
        fs: &LoopFs,
        device: &str,
        profile: &tailbound::sched::DeviceProfile,
        policy: Policy,
        rate: Rate,
        with_copy: bool,
    ) -> Result<PriorityRow, String> {
        let exe = self.child_exe.as_ref().ok_or("no tailbound binary")?;
        let pool = self.tbfs_pool(fs, device, profile, policy)?;
        let chunks = if with_copy {
            self.tbfs_source(&pool.fs)?
        } else {
            0
        };
        let dir = tempfile::Builder::new()
            .prefix("tailbound-priority-")
            .tempdir()
            .map_err(|e| format!("a directory for the socket: {e}"))?;
        let socket = dir.path().join("pool.sock");
        let _server = Server::start(Arc::new(pool.fs.clone()), &socket, ServerOptions::default())
            .map_err(|e| format!("serving the pool on {}: {e}", socket.display()))?;
        let writer_spec = ServedWriterSpec {
            socket: socket.clone(),
            writes: self.writes,
            rate,
        };
        let mut writer = TenantProcess::spawn(exe, &writer_spec.args(), "writer")?;
        writer.wait_ready()?;
        if !with_copy {
            writer.send(GO)?;
            let (hist, _, _) = parse_writer(&writer.finish()?)?;
            writer_charged(&pool.scheduler)?;
            return Ok(PriorityRow {
                with_copy: false,
                ..PriorityRow::from_histogram("tbfs", policy.name().into(), rate, &hist, 0.0, 0.0)
            });
        }
        let copy_spec = ServedCopySpec {
            socket,
            chunks,
            mode: self.copy_mode,
        };
        let (mut copy, reader) = super::start_copy(exe, &copy_spec.args())?;
        copy.send(GO)?;
        let go = monotonic_now();
        let alone_end = go.plus(self.copy_alone);
        let mut both = [copy, writer];
        sleep_watching(alone_end, &self.interrupted, &mut both)?;
        let [copy, mut writer] = both;
        writer.send(GO)?;
        let result = writer.finish().and_then(|l| parse_writer(&l));
        let samples = self.copy_after(copy, reader, result.is_ok())?;
        let (hist, w0, w1) = result?;
        writer_charged(&pool.scheduler)?;
        let (alone, under) = copy_rates(&samples, go, alone_end, w0, w1, self.copy_alone);
        Ok(PriorityRow::from_histogram(
            "tbfs",
            policy.name().into(),
            rate,
            &hist,
            under,
            alone,
        ))
    }
}

/// The figures mean something only if the server charged the writer's I/O at the real-time
/// class: none of the bench's own threads is in it, and only a real-time charge lends it.
fn writer_charged(sched: &tailbound::sched::Scheduler) -> Result<(), String> {
    let rt = sched
        .stats()
        .iter()
        .any(|t| t.prio.class == tailbound::sched::Class::Rt && t.bytes > 0);
    if rt {
        Ok(())
    } else {
        Err("the pool's scheduler charged none of the writer's I/O at the real-time class".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_report_reads_back() {
        let lines: Vec<String> = ["w 10 20", "h 1500 3", "h 90000 1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (hist, first, last) = parse_writer(&lines).unwrap();
        assert_eq!((first, last), (10, 20));
        assert_eq!(hist.count(), 4);
        assert!(hist.max() >= 90_000);
        assert!(parse_writer(&lines[1..]).is_err(), "no window");
        assert!(parse_writer(&["x 1".to_string()]).is_err());
    }
}
