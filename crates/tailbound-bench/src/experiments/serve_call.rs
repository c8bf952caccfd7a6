//! `tailbound bench serve-call`: what one call through the pool server costs, per transport.
//!
//! A memory pool is served in this process (`Server::start` on a socket in a scratch
//! directory); a client session on the socket and one on the shared-memory rings each make the
//! same calls from one thread, next to the same calls on the pool in process (no server) and the
//! kernel's on tmpfs:
//! - `round trip`: a request the server answers from a constant (the protection period), so
//!   only the transport is measured;
//! - `stat cached`: one path, three directories deep, again and again;
//! - `stat uncached`: a different path each call, round-robin over many files in many
//!   directories, so no call repeats a lookup the previous few made;
//! - `fstat`: an open file's attributes;
//! - `pread 4 KiB`: 4 KiB at a 4 KiB-aligned offset of a 1 MiB file, offsets in a fixed
//!   shuffled order.
//!
//! The rings are measured twice more: spinning longer, and with leases (the client answers
//! stats and reads itself while the server has not revoked them; `serve/lease.rs`). Without
//! leases every call crosses. The uncached stat drops the kept answers before each run, so
//! with leases it measures a call that crosses and is granted a lease.
//!
//! Each repeat times a run of calls per case and divides; cases alternate within a repeat, and
//! the figure is the median over repeats.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::progress::Progress;
use crate::report::{Align, Table};
use tailbound::dev::memory::MemoryPool;
use tailbound::serve::{ring, Client, RemoteFile, Server, ServerOptions, Transport};
use tailbound::tbfs::{Config, File as TbFile, Fs, OpenFlags};

const OPS: [&str; 5] = [
    "round trip",
    "stat cached",
    "stat uncached",
    "fstat",
    "pread 4 KiB",
];
const PATHS: [&str; 6] = [
    "kernel tmpfs",
    "tbfs in process",
    "socket",
    "rings",
    "rings, spinning",
    "rings, leases",
];
/// How long the spinning rings look before parking.
const LONG_SPIN: Duration = Duration::from_micros(50);
const DATA_BYTES: usize = 1 << 20;
const BLOCK: usize = 4096;
const CACHED: &str = "/c/d/e/file";

/// What to run.
#[derive(Debug, Clone)]
pub struct ServeCallBench {
    /// Calls per case and repeat.
    pub calls: u32,
    /// Repeats; medians are reported.
    pub repeats: u32,
    /// Files the uncached stat goes round.
    pub files: u32,
    /// Where the kernel's tmpfs tree goes (a tmpfs directory, /dev/shm by default).
    pub tmpfs: std::path::PathBuf,
}

impl ServeCallBench {
    pub fn full() -> ServeCallBench {
        ServeCallBench {
            calls: 20_000,
            repeats: 7,
            files: 20_000,
            tmpfs: "/dev/shm".into(),
        }
    }

    pub fn quick() -> ServeCallBench {
        ServeCallBench {
            calls: 2_000,
            repeats: 3,
            files: 2_000,
            tmpfs: "/dev/shm".into(),
        }
    }

    /// Progress steps: one per case and repeat.
    pub fn steps(&self) -> u64 {
        u64::from(self.repeats) * (OPS.len() * PATHS.len()) as u64
    }
}

/// One operation's medians, in µs per call, per path (`None`: the path has no such call).
#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    pub op: String,
    pub kernel_tmpfs_us: Option<f64>,
    pub in_process_us: Option<f64>,
    pub socket_us: f64,
    pub rings_us: f64,
    /// Both ends of the rings spinning up to 50 µs before parking.
    pub rings_spinning_us: f64,
    /// The rings with leases: stats and reads answered in the client while they hold.
    pub rings_leases_us: f64,
    /// Every repeat's figure, per path in the order of the columns.
    pub runs_us: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServeCallReport {
    pub calls: u32,
    pub repeats: u32,
    pub files: u32,
    pub rows: Vec<CallRow>,
}

/// The calls one path makes.
trait Calls {
    fn round_trip(&mut self) -> Result<(), String>;
    fn stat(&mut self, path: &str) -> Result<(), String>;
    fn fstat(&mut self) -> Result<(), String>;
    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String>;
    fn has_round_trip(&self) -> bool {
        true
    }
    /// Called before each run of calls.
    fn prepare(&self) {}
    /// Forgets what the client keeps (before a run of uncached stats).
    fn forget(&self) {}
}

struct Kernel {
    root: std::path::PathBuf,
    file: std::fs::File,
}

impl Calls for Kernel {
    fn round_trip(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn has_round_trip(&self) -> bool {
        false
    }
    fn stat(&mut self, path: &str) -> Result<(), String> {
        let p = self.root.join(path.trim_start_matches('/'));
        std::fs::metadata(&p)
            .map(drop)
            .map_err(|e| format!("{}: {e}", p.display()))
    }
    fn fstat(&mut self) -> Result<(), String> {
        self.file.metadata().map(drop).map_err(|e| e.to_string())
    }
    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| e.to_string())
    }
}

struct InProcess {
    fs: Arc<Fs>,
    file: TbFile,
}

impl Calls for InProcess {
    fn round_trip(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn has_round_trip(&self) -> bool {
        false
    }
    fn stat(&mut self, path: &str) -> Result<(), String> {
        self.fs.stat(path).map(drop).map_err(|e| e.to_string())
    }
    fn fstat(&mut self) -> Result<(), String> {
        self.file.stat().map(drop).map_err(|e| e.to_string())
    }
    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        match self.file.pread(buf, offset) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(format!("short read: {n}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct Remote {
    client: Client,
    file: RemoteFile,
    /// How long both ends of the rings spin before parking.
    spin: Duration,
}

impl Calls for Remote {
    fn prepare(&self) {
        ring::set_spin(self.spin);
    }
    fn forget(&self) {
        self.client.forget_leases();
    }
    fn round_trip(&mut self) -> Result<(), String> {
        self.client
            .protection_period()
            .map(drop)
            .map_err(|e| e.to_string())
    }
    fn stat(&mut self, path: &str) -> Result<(), String> {
        self.client.stat(path).map(drop).map_err(|e| e.to_string())
    }
    fn fstat(&mut self) -> Result<(), String> {
        self.file.stat().map(drop).map_err(|e| e.to_string())
    }
    fn pread(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        match self.file.pread(buf, offset) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(format!("short read: {n}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn uncached_path(i: u32) -> String {
    format!("/u/d{:03}/f{i:06}", i % 100)
}

/// The tree every path works on: the cached file, the uncached files, the data file.
fn make_tree(
    mut mkdir: impl FnMut(&str) -> Result<(), String>,
    mut create: impl FnMut(&str, &[u8]) -> Result<(), String>,
    files: u32,
) -> Result<(), String> {
    for d in ["/c", "/c/d", "/c/d/e", "/u"] {
        mkdir(d)?;
    }
    for d in 0..100 {
        mkdir(&format!("/u/d{d:03}"))?;
    }
    create(CACHED, b"cached")?;
    for i in 0..files {
        create(&uncached_path(i), b"")?;
    }
    let data: Vec<u8> = (0..DATA_BYTES).map(|i| (i % 251) as u8).collect();
    create("/data", &data)
}

/// Offsets of the 4 KiB reads: every block of the data file once, in a shuffled order.
fn offsets() -> Vec<u64> {
    let blocks = (DATA_BYTES / BLOCK) as u64;
    // A fixed stride coprime with the block count visits every block once, out of order.
    (0..blocks)
        .map(|i| (i * 97 % blocks) * BLOCK as u64)
        .collect()
}

/// µs per call of `calls` calls of `op` on `path`.
fn time_op(
    path: &mut dyn Calls,
    op: usize,
    calls: u32,
    files: u32,
    next_file: &mut u32,
) -> Result<f64, String> {
    path.prepare();
    if op == 2 {
        path.forget();
    }
    let offsets = offsets();
    let mut buf = vec![0u8; BLOCK];
    let names: Vec<String> = if op == 2 {
        (0..calls)
            .map(|k| uncached_path((*next_file + k) % files))
            .collect()
    } else {
        Vec::new()
    };
    let start = Instant::now();
    for k in 0..calls as usize {
        match op {
            0 => path.round_trip()?,
            1 => path.stat(CACHED)?,
            2 => path.stat(&names[k])?,
            3 => path.fstat()?,
            _ => path.pread(&mut buf, offsets[k % offsets.len()])?,
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(calls.max(1));
    if op == 2 {
        *next_file = (*next_file + calls) % files;
    }
    Ok(us)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

impl ServeCallBench {
    pub fn run(&self, progress: &Progress) -> Result<ServeCallReport, String> {
        let scratch = tempfile::Builder::new()
            .prefix("tailbound-serve-call")
            .tempdir()
            .map_err(|e| format!("scratch directory: {e}"))?;
        let kernel_root = tempfile::Builder::new()
            .prefix("tailbound-serve-call")
            .tempdir_in(&self.tmpfs)
            .map_err(|e| format!("{}: {e}", self.tmpfs.display()))?;
        let kroot = kernel_root.path().to_path_buf();
        let kpath = |p: &str| kroot.join(p.trim_start_matches('/'));
        make_tree(
            |d| std::fs::create_dir(kpath(d)).map_err(|e| e.to_string()),
            |f, data| std::fs::write(kpath(f), data).map_err(|e| e.to_string()),
            self.files,
        )?;

        // A pool file in tmpfs, so a client with leases can map it and read it itself.
        let dev = Arc::new(
            MemoryPool::create(kernel_root.path().join("pool"), 256 << 20)
                .map_err(|e| format!("memory pool: {e}"))?,
        );
        let fs =
            Arc::new(Fs::format(dev, &Config::memory_pool()).map_err(|e| format!("format: {e}"))?);
        make_tree(
            |d| fs.mkdir(d, 0o755).map_err(|e| e.to_string()),
            |f, data| {
                let file = fs
                    .open_file(f, OpenFlags::create())
                    .map_err(|e| e.to_string())?;
                file.pwrite(data, 0).map(drop).map_err(|e| e.to_string())
            },
            self.files,
        )?;
        // In the pool, not only in the server's buffers: a lease's blocks are then readable.
        fs.sync().map_err(|e| format!("sync: {e}"))?;
        let socket = scratch.path().join("pool.sock");
        let server = Server::start(fs.clone(), &socket, ServerOptions::default())
            .map_err(|e| format!("server: {e}"))?;

        let remote = |rings: bool, spin: Duration, leases: bool| -> Result<Remote, String> {
            let client = Client::connect_with(&socket, rings.then(Default::default))
                .map_err(|e| e.to_string())?;
            client.use_leases(leases);
            let want = if rings {
                Transport::Ring
            } else {
                Transport::Socket
            };
            if client.transport() != want {
                return Err(format!("asked for {want:?}, got {:?}", client.transport()));
            }
            let file = client
                .open_file("/data", OpenFlags::read_only())
                .map_err(|e| e.to_string())?;
            Ok(Remote { client, file, spin })
        };
        let mut paths: Vec<Box<dyn Calls>> = vec![
            Box::new(Kernel {
                root: kroot.clone(),
                file: std::fs::File::open(kpath("/data")).map_err(|e| e.to_string())?,
            }),
            Box::new(InProcess {
                fs: fs.clone(),
                file: fs
                    .open_file("/data", OpenFlags::read_only())
                    .map_err(|e| e.to_string())?,
            }),
            Box::new(remote(false, ring::DEFAULT_SPIN, false)?),
            Box::new(remote(true, ring::DEFAULT_SPIN, false)?),
            Box::new(remote(true, LONG_SPIN, false)?),
            Box::new(remote(true, ring::DEFAULT_SPIN, true)?),
        ];

        // runs[op][path] = µs per call of each repeat.
        let mut runs = vec![vec![Vec::new(); PATHS.len()]; OPS.len()];
        let mut next_file = vec![0u32; PATHS.len()];
        // One unmeasured pass warms every path.
        for (p, path) in paths.iter_mut().enumerate() {
            for op in 0..OPS.len() {
                time_op(
                    path.as_mut(),
                    op,
                    self.calls.min(1000),
                    self.files,
                    &mut next_file[p],
                )?;
            }
        }
        for r in 0..self.repeats {
            progress.set_message(format!("repeat {}/{}", r + 1, self.repeats));
            for (op, op_runs) in runs.iter_mut().enumerate() {
                for (p, path) in paths.iter_mut().enumerate() {
                    let us = time_op(path.as_mut(), op, self.calls, self.files, &mut next_file[p])?;
                    op_runs[p].push(us);
                    progress.inc(1);
                }
            }
        }
        let rows = OPS
            .iter()
            .enumerate()
            .map(|(op, name)| {
                let m = |p: usize| median(&runs[op][p]);
                let local = |p: usize| (op != 0 || paths[p].has_round_trip()).then(|| m(p));
                CallRow {
                    op: name.to_string(),
                    kernel_tmpfs_us: local(0),
                    in_process_us: local(1),
                    socket_us: m(2),
                    rings_us: m(3),
                    rings_spinning_us: m(4),
                    rings_leases_us: m(5),
                    runs_us: runs[op].clone(),
                }
            })
            .collect();
        drop(paths);
        ring::set_spin(ring::DEFAULT_SPIN);
        server.stop();
        Ok(ServeCallReport {
            calls: self.calls,
            repeats: self.repeats,
            files: self.files,
            rows,
        })
    }
}

impl ServeCallReport {
    pub fn table(&self) -> Table {
        let mut t = Table::new(
            [
                "call",
                "kernel tmpfs µs",
                "tbfs in process µs",
                "server, socket µs",
                "server, rings µs",
                "rings, spinning µs",
                "rings + leases µs",
                "socket / rings",
                "socket / spinning",
            ]
            .map(String::from)
            .to_vec(),
        );
        for c in 1..9 {
            t.set_align(c, Align::Right);
        }
        let us = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
        for r in &self.rows {
            t.push(vec![
                r.op.clone(),
                us(r.kernel_tmpfs_us),
                us(r.in_process_us),
                us(Some(r.socket_us)),
                us(Some(r.rings_us)),
                us(Some(r.rings_spinning_us)),
                us(Some(r.rings_leases_us)),
                format!("{:.1}x", r.socket_us / r.rings_us),
                format!("{:.1}x", r.socket_us / r.rings_spinning_us),
            ]);
        }
        t
    }

    pub fn to_markdown(&self) -> String {
        format!(
            "{}\nMedians of {} repeats of {} calls each, one client thread; uncached stats go \
             round {} files. Rings: both ends spin {} µs before parking on a futex (the \
             default); spinning: {} µs. Leases: the rings at the default spin, with stats and \
             reads answered in the client while the server has not revoked them (an uncached \
             stat crosses and is granted one).\n",
            self.table().to_markdown(),
            self.repeats,
            self.calls,
            self.files,
            ring::DEFAULT_SPIN.as_micros(),
            LONG_SPIN.as_micros()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_makes_every_call_and_reads_every_block() {
        let mut seen = offsets();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), DATA_BYTES / BLOCK);
        let bench = ServeCallBench {
            calls: 50,
            repeats: 1,
            files: 40,
            tmpfs: std::env::temp_dir(),
        };
        let report = bench.run(&Progress::hidden(bench.steps())).unwrap();
        assert_eq!(report.rows.len(), OPS.len());
        for r in &report.rows {
            assert!(
                r.socket_us > 0.0 && r.rings_us > 0.0 && r.rings_spinning_us > 0.0,
                "{r:?}"
            );
            assert_eq!(r.runs_us.len(), PATHS.len());
            assert!(r.runs_us.iter().all(|p| p.len() == 1));
        }
        assert!(report.rows[0].kernel_tmpfs_us.is_none());
        assert!(report.rows[1].kernel_tmpfs_us.is_some());
        assert!(report.to_markdown().contains("stat uncached"));
        let dir = tempfile::tempdir().unwrap();
        make_tree(
            |d| std::fs::create_dir(dir.path().join(&d[1..])).map_err(|e| e.to_string()),
            |f, b| std::fs::write(dir.path().join(&f[1..]), b).map_err(|e| e.to_string()),
            3,
        )
        .unwrap();
        for p in [uncached_path(2), CACHED.to_string()] {
            assert!(dir.path().join(&p[1..]).exists(), "{p}");
        }
    }
}
