//! `tailbound serve POOL`: one process owns a pool and serves every other over a Unix socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use clap::Args;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tailbound::serve::{self, Client, Server, ServerOptions};

use crate::cmd_fs_common::{open_pool_for, Backend};
use crate::serving::{self, ServingNote};
use crate::CliResult;

#[derive(Args)]
#[command(
    after_help = "The server owns the pool: the engine, its background cleaner and, for a file \
pool, the I/O scheduler. It listens on POOL.sock; `tailbound fs` commands given the pool go \
through it. A client that dies loses nothing it wrote and keeps no lock; SIGTERM (or Ctrl-C in \
the foreground) syncs the pool and exits. A kill -9 of the server is a crash: the next open \
recovers the pool, and every acknowledged fsync survives.\n\n\
While it serves, the server keeps POOL.serving (its pid and socket) beside the pool and removes \
it once its final sync is confirmed; a failed final sync leaves its error in POOL.sync-failed. \
The next `tailbound serve` or `tailbound mount` of the pool takes either note and warns: the \
previous server ended without confirming its final sync (or it failed), so the pool holds what \
was durable when it ended.\n\n\
Examples:\n  \
tailbound serve /dev/shm/p.tbfs\n  \
tailbound fs ls /dev/shm/p.tbfs /\n  \
kill $(pidof tailbound)   # or the pid `serve` printed"
)]
pub struct ServeArgs {
    /// The pool: a file (in /dev/shm for a memory pool) or a block device.
    pool: PathBuf,
    /// Open it as a memory pool or a file pool (default: memory in tmpfs, file elsewhere).
    #[arg(long)]
    backend: Option<Backend>,
    /// Let every local user connect (socket mode 0666); each is held to the kernel's permission
    /// rules on the tree. Without it only the pool file's owner and root can connect.
    #[arg(long)]
    allow_other: bool,
    /// Keep every session on its socket: refuse the shared-memory rings clients ask for.
    #[arg(long)]
    no_ring: bool,
    /// Stay in the foreground instead of detaching.
    #[arg(long)]
    foreground: bool,
    /// Exit (syncing the pool) once the last client session is gone and no description waits
    /// for a process to adopt it. `tailbound run` starts its server with this.
    #[arg(long)]
    exit_when_idle: bool,
    /// Set by `serve` for the detached process it starts.
    #[arg(long, hide = true)]
    detached: bool,
}

pub fn run(args: ServeArgs) -> CliResult {
    let socket = serve::socket_path(&args.pool);
    if let Ok(c) = Client::connect(&socket) {
        return Err(format!(
            "{}: already served by process {} on {}",
            args.pool.display(),
            c.server_pid(),
            socket.display()
        )
        .into());
    }
    if !args.foreground && !args.detached {
        return detach(&args);
    }
    if args.detached {
        // Out of the starting shell's session: its hang-up and Ctrl-C are not for the server.
        tailbound::sys::proc::new_session()?;
    }
    // Before the socket exists, so a signal that comes as soon as clients can connect is seen.
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let (fs, dev) = open_pool_for(&args.pool, args.backend, "serve")?;
    let fs = Arc::new(fs);
    let owner = std::fs::metadata(&args.pool).map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.uid(), m.gid())
    })?;
    // What the last server left: its final sync failed, or it ended before it confirmed one.
    serving::warn_of_last_server(&args.pool);
    // From here on the server ends cleanly only through the final sync below, which confirms
    // itself by removing this note.
    let note = ServingNote::write(
        &args.pool,
        &format!(
            "pid {}, serving on {}",
            std::process::id(),
            socket.display()
        ),
    )?;
    let server = match Server::start(
        fs.clone(),
        &socket,
        ServerOptions {
            allow_other: args.allow_other,
            owner: Some(owner),
            no_ring: args.no_ring,
            no_leases: false,
        },
    ) {
        Ok(server) => server,
        Err(e) => {
            // Never served: no final sync to confirm.
            note.withdraw();
            return Err(format!("{}: {e}", args.pool.display()).into());
        }
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "serving {} on {} (process {})",
            args.pool.display(),
            socket.display(),
            std::process::id()
        )?;
        out.flush()?;
    }
    if args.detached {
        // The starting process has read the line above, and reads stderr until this closes it.
        tailbound::sys::proc::stdio_to_null()?;
    }
    let signal = if args.exit_when_idle {
        wait_idle(&server, &mut signals)
    } else {
        signals.forever().next()
    };
    server.stop();
    // Every session has ended, so this is the last handle; were it not, syncing is what counts.
    // A panic in the final sync is its failure, reported in the note the next server reads.
    let synced = serving::final_sync(|| match Arc::try_unwrap(fs) {
        Ok(fs) => fs.close(),
        Err(fs) => fs.sync(),
    });
    // Confirmed while the device still holds the pool's lock, so the next server of the pool
    // finds the notes as this one left them.
    note.confirm(synced.as_ref().err().map(String::as_str));
    drop(dev);
    synced.map_err(|e| format!("{}: syncing on exit: {e}", args.pool.display()))?;
    if !args.detached && !args.exit_when_idle {
        eprintln!(
            "{}: synced and closed{}",
            args.pool.display(),
            signal.map_or(String::new(), |s| format!(" (signal {s})"))
        );
    }
    Ok(())
}

/// Starts the server as a detached process and returns once it serves (printing where) or
/// has failed (with its error).
fn detach(args: &ServeArgs) -> CliResult {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve").arg(&args.pool).arg("--detached");
    if let Some(b) = args.backend {
        cmd.arg("--backend").arg(b.to_string());
    }
    if args.allow_other {
        cmd.arg("--allow-other");
    }
    if args.exit_when_idle {
        cmd.arg("--exit-when-idle");
    }
    if args.no_ring {
        cmd.arg("--no-ring");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    if line.starts_with("serving ") {
        // What the server warned of before it served (how the last server of the pool
        // ended); its stderr closes as it detaches, right after the line above.
        if let Some(mut e) = child.stderr.take() {
            let mut warnings = String::new();
            let _ = e.read_to_string(&mut warnings);
            eprint!("{warnings}");
        }
        print!("{line}");
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    let status = child.wait()?;
    let err = err.trim().trim_start_matches("tailbound: error: ");
    Err(if err.is_empty() {
        format!("the server did not start ({status})")
    } else {
        err.to_string()
    }
    .into())
}

/// Waits for a signal, or for the server to be idle after it served a client: returns the
/// signal, if one came.
fn wait_idle(server: &serve::ServerHandle, signals: &mut Signals) -> Option<i32> {
    loop {
        if let Some(s) = signals.pending().next() {
            return Some(s);
        }
        // Idle once it has served: no session open and no hold waiting for a process (an exec
        // in progress has ended its session but holds).
        if server.sessions_started() > 0 && server.idle() {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
