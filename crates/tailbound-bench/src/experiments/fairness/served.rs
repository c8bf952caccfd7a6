//! `bench fairness --processes`: the tbfs cases with each tenant a separate process in a blkio
//! cgroup of its weight (seed 003's setting), all clients of one pool server (`tailbound serve`'s
//! `Server`, in the bench's process). The server charges each client's requests to its cgroup's
//! tenant of the pool's scheduler, weighted by the cgroup's weight; nothing else tells the
//! scheduler who is who.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tailbound::sched::Scheduler;
use tailbound::serve::{Client, Server, ServerOptions};
use tailbound::sys::time::{monotonic_now, MonoNanos};
use tailbound::tbfs::{Fs, OpenFlags};

use super::{parse_ops, Case, FairnessBench, IoOp, BFQ_WEIGHT_UNIT, MIB};
use crate::experiments::blockdev::BlkioCgroup;
use crate::experiments::tenants::{child_wait_go, sleep_watching, TenantProcess, DONE, GO, READY};

/// One tenant process of the served mode: streams `op` requests of `block_bytes` through the
/// first `blocks` blocks of `file` in the pool served on `socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedTenantSpec {
    pub socket: PathBuf,
    pub file: String,
    pub op: IoOp,
    pub block_bytes: u64,
    pub blocks: u64,
}

impl ServedTenantSpec {
    /// The arguments of `tailbound` that run this tenant.
    pub fn args(&self) -> Vec<String> {
        vec![
            "bench".into(),
            "fairness".into(),
            "--served-child".into(),
            "--socket".into(),
            self.socket.display().to_string(),
            "--file".into(),
            self.file.clone(),
            "--op".into(),
            self.op.name().into(),
            "--block-bytes".into(),
            self.block_bytes.to_string(),
            "--blocks".into(),
            self.blocks.to_string(),
        ]
    }

    /// The child's work: prints `ready`, waits for `go`, and only then connects (by then the
    /// parent has put it in its cgroup, which the server reads at its first request), opens
    /// the file (`direct`, as the thread mode does) and streams requests until `stop`; then
    /// prints one `op START END BYTES` line per request and `done`.
    pub fn run(
        &self,
        input: impl BufRead + Send + 'static,
        out: &mut impl Write,
    ) -> Result<(), String> {
        if self.block_bytes == 0 || self.blocks == 0 {
            return Err("no blocks to stream".into());
        }
        let say = |out: &mut dyn Write, line: &str| {
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("reporting: {e}"))
        };
        say(out, READY)?;
        let Some(stop) = child_wait_go(input) else {
            return Ok(());
        };
        let client = Client::connect(&self.socket)
            .map_err(|e| format!("connecting to {}: {e}", self.socket.display()))?;
        let f = client
            .open_file(
                &self.file,
                OpenFlags {
                    read: true,
                    write: true,
                    direct: true,
                    ..OpenFlags::default()
                },
            )
            .map_err(|e| format!("opening {}: {e}", self.file))?;
        let mut buf = vec![0u8; self.block_bytes as usize];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 241) as u8 | 0x80;
        }
        let mut ops: Vec<(u64, u64, u64)> = Vec::new();
        let mut k = 0;
        while !stop.load(Ordering::Relaxed) {
            let at = (k % self.blocks) * self.block_bytes;
            let start = monotonic_now().0;
            match self.op {
                IoOp::Read => f.pread(&mut buf, at).map(drop),
                IoOp::Write => f.pwrite(&buf, at).map(drop),
            }
            .map_err(|e| {
                format!(
                    "{} of {} bytes at {at} of {}: {e}",
                    self.op.name(),
                    self.block_bytes,
                    self.file
                )
            })?;
            ops.push((start, monotonic_now().0, self.block_bytes));
            k += 1;
        }
        let mut text = String::with_capacity(ops.len() * 40);
        for (start, end, bytes) in &ops {
            text.push_str(&format!("op {start} {end} {bytes}\n"));
        }
        text.push_str(DONE);
        say(out, &text)
    }
}

/// What a served case measured: the window and each tenant's operations.
pub(super) type Measured = (MonoNanos, MonoNanos, Vec<Vec<(u64, u64, u64)>>);

impl FairnessBench {
    /// Serves `fs` on a socket in a scratch directory and runs one tenant process per weight of
    /// `case`, each in a blkio cgroup of `100 x weight` made for the case, on the file
    /// `/tenant-I` of `blocks` blocks. The tenants, then the cgroups, then the server go before it returns.
    pub(super) fn measure_served(
        &self,
        fs: &Fs,
        sched: &Scheduler,
        case: &Case<'_>,
        blocks: u64,
    ) -> Result<Measured, String> {
        let &Case {
            weights,
            op,
            block_mib,
            window,
        } = case;
        let block_bytes = block_mib * MIB;
        let exe = self.child_exe.as_ref().ok_or("no tailbound binary")?;
        let dir = tempfile::Builder::new()
            .prefix("tailbound-fairness-")
            .tempdir()
            .map_err(|e| format!("a directory for the socket: {e}"))?;
        let socket = dir.path().join("pool.sock");
        let _server = Server::start(Arc::new(fs.clone()), &socket, ServerOptions::default())
            .map_err(|e| format!("serving the pool on {}: {e}", socket.display()))?;
        let mut groups = Vec::new();
        for (i, &w) in weights.iter().enumerate() {
            let name = format!("tailbound-fairness-served-{}-{i}", std::process::id());
            groups
                .push(BlkioCgroup::create(&name, w * BFQ_WEIGHT_UNIT).map_err(|e| e.to_string())?);
        }
        let mut tenants = Vec::new();
        for (i, group) in groups.iter().enumerate() {
            let spec = ServedTenantSpec {
                socket: socket.clone(),
                file: format!("/tenant-{i}"),
                op,
                block_bytes,
                blocks,
            };
            let tenant = TenantProcess::spawn(exe, &spec.args(), &format!("tenant {i}"))?;
            group.add(tenant.pid()).map_err(|e| e.to_string())?;
            tenants.push(tenant);
        }
        for t in &mut tenants {
            t.wait_ready()?;
        }
        for t in &mut tenants {
            t.send(GO)?;
        }
        let open = monotonic_now().plus(self.warmup);
        sleep_watching(open.plus(window), &self.interrupted, &mut tenants)?;
        let close = monotonic_now();
        for t in &mut tenants {
            t.stop();
        }
        let mut ops = Vec::new();
        for t in tenants {
            ops.push(parse_ops(&t.finish()?)?);
        }
        // The shares mean something only if the server told the tenants apart by their groups.
        let stats = sched.stats();
        for (i, group) in groups.iter().enumerate() {
            let name = group.path().display().to_string();
            if !stats.iter().any(|t| t.name.contains(&name) && t.bytes > 0) {
                return Err(format!(
                    "the pool's scheduler charged none of tenant {i}'s I/O to its cgroup {name}"
                ));
            }
        }
        drop(groups);
        Ok((open, close, ops))
    }
}

/// Whether this machine can run the served mode: cgroup v1 blkio with BFQ's weights.
pub fn served_supported() -> Result<(), String> {
    let root = Path::new(crate::experiments::blockdev::BLKIO_ROOT);
    if !root.join("cgroup.procs").exists() {
        return Err(format!(
            "--processes needs the cgroup v1 blkio controller at {}",
            root.display()
        ));
    }
    Ok(())
}
