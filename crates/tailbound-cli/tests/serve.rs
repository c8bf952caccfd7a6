//! `tailbound serve` end to end, with real processes: a client killed holding a lock, the server
//! killed during fsync'd appends from two clients, SIGTERM, a second server, `fs` commands
//! through the server, garbage on the socket, and the note a server leaves beside the pool until
//! its final sync is confirmed.
//!
//! Client processes are this test binary run again with `SERVE_WORKER` set (the `worker` test
//! below does their work and exits; without the variable it does nothing).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tailbound::serve::protocol::LockArgs;
use tailbound::serve::{socket_path, Client};
use tailbound::tbfs::locks::{Kind, Space};
use tailbound::tbfs::{OpenFlags, SetAttr};

mod common;

fn tailbound() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let o = tailbound().args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A child process that is killed (and reaped) when the test ends, passing or not.
struct Proc(Child);

impl Proc {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
    fn signal(&self, sig: i32) {
        // SAFETY (of the call below): kill(2) on our own child's pid, which is not yet reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Stops a detached server (not our child) however the test ends.
struct Stop(i32);

impl Drop for Stop {
    fn drop(&mut self) {
        // SAFETY (of the call below): kill(2) of the server this test started; a server that
        // already ended makes it fail with ESRCH, which is ignored.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// A pool for one test, in /dev/shm (memory backend) or /tmp (file backend).
struct Pool {
    _dir: tempfile::TempDir,
    path: PathBuf,
    backend: &'static str,
}

fn pool(backend: &'static str) -> Pool {
    let dir = if backend == "memory" {
        tempfile::Builder::new()
            .prefix("serve-test")
            .tempdir_in("/dev/shm")
            .unwrap()
    } else {
        tempfile::Builder::new()
            .prefix("serve-test")
            .tempdir()
            .unwrap()
    };
    let path = dir.path().join("p.tbfs");
    ok(&[
        "fs",
        "mkfs",
        s(&path),
        "--size",
        "64MiB",
        "--backend",
        backend,
    ]);
    Pool {
        _dir: dir,
        path,
        backend,
    }
}

impl Pool {
    fn socket(&self) -> PathBuf {
        socket_path(&self.path)
    }

    /// `tailbound serve --foreground`, once it says it serves.
    fn serve(&self) -> (Proc, BufReader<ChildStdout>) {
        self.serve_with(&[])
    }

    fn serve_with(&self, extra: &[&str]) -> (Proc, BufReader<ChildStdout>) {
        let mut child = Proc(
            tailbound()
                .args([
                    "serve",
                    s(&self.path),
                    "--foreground",
                    "--backend",
                    self.backend,
                ])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("serving ") && line.contains(s(&self.socket())),
            "serve said {line:?}"
        );
        (child, out)
    }

    fn fs(&self, args: &[&str]) -> String {
        let mut all = vec!["fs", args[0], s(&self.path), "--backend", self.backend];
        all.extend_from_slice(&args[1..]);
        ok(&all)
    }

    /// A note a server leaves beside the pool: `.serving` while it serves, `.sync-failed`
    /// when its final sync failed.
    fn note(&self, suffix: &str) -> PathBuf {
        let mut p = self.path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    }

    /// Waits (bounded) until no process holds the pool's lock: a server that is not this
    /// test's child has stopped.
    fn wait_unlocked(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let file = std::fs::File::open(&self.path).unwrap();
        while !tailbound::sys::file::try_lock_exclusive(&file).unwrap() {
            assert!(Instant::now() < deadline, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits for a foreground server (already signalled, or exiting by itself) and returns whether
/// it succeeded and what it wrote to stderr.
fn finish(mut server: Proc) -> (bool, String) {
    let status = server.0.wait().unwrap();
    let mut err = String::new();
    server
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), err)
}

fn spawn_worker(
    kind: &str,
    socket: &Path,
    extra: &[(&str, String)],
) -> (Proc, BufReader<ChildStdout>) {
    spawn_worker_as(kind, socket, extra, None)
}

fn spawn_worker_as(
    kind: &str,
    socket: &Path,
    extra: &[(&str, String)],
    user: Option<u32>,
) -> (Proc, BufReader<ChildStdout>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if let Some(id) = user {
        use std::os::unix::process::CommandExt;
        cmd.uid(id).gid(id);
    }
    cmd.args(["worker", "--exact", "--nocapture", "--test-threads=1"])
        .env("SERVE_WORKER", kind)
        .env("SERVE_SOCKET", socket)
        .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = Proc(cmd.spawn().unwrap());
    let out = BufReader::new(child.0.stdout.take().unwrap());
    (child, out)
}

/// Reads lines until one holds `want` (the test harness may print before it on the line).
fn wait_for_line(out: &mut impl BufRead, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "no {want:?} line");
        if line.contains(want) {
            return;
        }
    }
}

fn whole_write_lock() -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind: Kind::Write,
        start: 0,
        end: u64::MAX,
        per_handle: false,
    }
}

/// Bytes of one appended record: fixed size, so a record's offset names it.
const RECORD: usize = 64;

fn record(worker: u32, seq: u64) -> Vec<u8> {
    let mut r = format!("worker {worker} record {seq:012} ").into_bytes();
    r.resize(RECORD - 1, b'.');
    r.push(b'\n');
    r
}

/// The client processes' work, when this binary is run as one.
#[test]
fn worker() {
    let Ok(kind) = std::env::var("SERVE_WORKER") else {
        return;
    };
    let socket = PathBuf::from(std::env::var("SERVE_SOCKET").unwrap());
    if kind == "permissions" {
        permissions_as_nobody(&socket);
        println!("checked");
        std::process::exit(0);
    }
    if kind == "probe" {
        match Client::connect(&socket) {
            Ok(c) => {
                c.mkdir("/open/made-by-another-user", 0o755).unwrap();
                println!("connected");
            }
            Err(e) => println!("refused: {e}"),
        }
        std::process::exit(0);
    }
    let client = Client::connect(&socket).unwrap();
    match kind.as_str() {
        "lock" => {
            let f = client.open_file("/locked", OpenFlags::create()).unwrap();
            f.lock(whole_write_lock(), false).unwrap();
            println!("locked");
            std::io::stdout().flush().unwrap();
            // Holds the lock (and the open file) until killed.
            loop {
                std::thread::park();
            }
        }
        "lock-then-wait" => {
            let x = client.open_file("/x", OpenFlags::create()).unwrap();
            x.lock(whole_write_lock(), false).unwrap();
            let y = client.open_file("/y", OpenFlags::create()).unwrap();
            println!("locked");
            std::io::stdout().flush().unwrap();
            // Waits for the lock the test holds, until killed.
            let _ = y.lock(whole_write_lock(), true);
            loop {
                std::thread::park();
            }
        }
        "append" => {
            let id: u32 = std::env::var("SERVE_ID").unwrap().parse().unwrap();
            let side = std::env::var("SERVE_SIDE").unwrap();
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(side)
                .unwrap();
            let f = client
                .open_file(
                    "/log",
                    OpenFlags {
                        append: true,
                        ..OpenFlags::create()
                    },
                )
                .unwrap();
            for seq in 0.. {
                let Ok(end) = f.append(&record(id, seq)) else {
                    break;
                };
                if f.fsync().is_err() {
                    break;
                }
                // Acknowledged: noted where the record is, with a write the kernel keeps
                // whatever happens to this process next.
                writeln!(log, "{} {seq}", end - RECORD as u64).unwrap();
            }
            std::process::exit(0);
        }
        other => panic!("unknown worker {other}"),
    }
}

#[test]
fn a_client_killed_holding_a_lock_releases_it() {
    let pool = pool("memory");
    let (_server, _out) = pool.serve();
    let (mut holder, mut out) = spawn_worker("lock", &pool.socket(), &[]);
    wait_for_line(&mut out, "locked");
    let me = Client::connect(&pool.socket()).unwrap();
    let f = me.open_file("/locked", OpenFlags::create()).unwrap();
    let err = f.lock(whole_write_lock(), false).unwrap_err();
    assert_eq!(err.errno(), libc::EAGAIN, "{err}");
    let held = f.test_lock(whole_write_lock()).unwrap().unwrap();
    assert_eq!(held.pid, holder.pid(), "the holder is named by its pid");
    holder.kill9();
    // Waits until the server has seen the client go and released its lock (the deadline is
    // only for a run where it never does).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = f.lock(whole_write_lock(), true).map(|()| f);
        let _ = tx.send(r);
    });
    let f = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the dead client's lock was never released")
        .unwrap();
    assert!(f.test_lock(whole_write_lock()).unwrap().is_none());
}

/// Whether process `pid` has a thread whose name starts with `prefix`.
fn has_thread(pid: i32, prefix: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
            })
        })
        .unwrap_or(false)
}

#[test]
fn a_client_killed_while_waiting_for_a_lock_releases_the_ones_it_holds() {
    let pool = pool("memory");
    let (server, _out) = pool.serve();
    let me = Client::connect(&pool.socket()).unwrap();
    let y = me.open_file("/y", OpenFlags::create()).unwrap();
    y.lock(whole_write_lock(), false).unwrap();
    let (mut holder, mut out) = spawn_worker("lock-then-wait", &pool.socket(), &[]);
    wait_for_line(&mut out, "locked");
    // The holder of /x now waits in the server for /y, which this test keeps.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !has_thread(server.pid(), "tbfs-lockwait") {
        assert!(Instant::now() < deadline, "the worker never waited for /y");
        std::thread::sleep(Duration::from_millis(10));
    }
    holder.kill9();
    // On a connection of its own: a request that never returns must not hold up `me`.
    let other = Client::connect(&pool.socket()).unwrap();
    let x = other.open_file("/x", OpenFlags::create()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = x.lock(whole_write_lock(), true).map(|()| x);
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the lock of a client killed while waiting was never released")
        .unwrap();
}

fn kill_server_during_appends(backend: &'static str) {
    let pool = pool(backend);
    let (mut server, _out) = pool.serve();
    let sides: Vec<PathBuf> = (0..2)
        .map(|i| pool.path.with_file_name(format!("side-{i}")))
        .collect();
    // Their stdout stays open (the harness in them writes to it) until they are done.
    let (mut workers, _outs): (Vec<Proc>, Vec<_>) = sides
        .iter()
        .enumerate()
        .map(|(i, side)| {
            spawn_worker(
                "append",
                &pool.socket(),
                &[
                    ("SERVE_ID", i.to_string()),
                    ("SERVE_SIDE", s(side).to_string()),
                ],
            )
        })
        .unzip();
    // Let both get well into their streams (a deadline only for a stuck run).
    let deadline = Instant::now() + Duration::from_secs(120);
    let logged = |p: &Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
    while sides.iter().any(|p| logged(p) < 200) {
        assert!(Instant::now() < deadline, "the workers stopped appending");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill9();
    for w in &mut workers {
        let status = w.0.wait().unwrap();
        assert!(status.success(), "a worker failed: {status}");
    }
    // The next open recovers; every acknowledged append is there.
    let o = tailbound()
        .args(["fs", "cat", s(&pool.path), "/log", "--backend", backend])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let log = o.stdout;
    let mut checked = 0;
    for (i, side) in sides.iter().enumerate() {
        for line in std::fs::read_to_string(side).unwrap().lines() {
            let (at, seq) = line.split_once(' ').unwrap();
            let (at, seq): (usize, u64) = (at.parse().unwrap(), seq.parse().unwrap());
            let want = record(i as u32, seq);
            assert!(
                log.get(at..at + RECORD) == Some(&want[..]),
                "acknowledged record {seq} of worker {i} at {at} is lost (log is {} bytes)",
                log.len()
            );
            checked += 1;
        }
    }
    assert!(checked >= 400);
    let o = tailbound()
        .args(["fs", "fsck", s(&pool.path), "--backend", backend])
        .output()
        .unwrap();
    assert!(o.status.success(), "fsck after the crash: {}", text(&o));
}

#[test]
fn killing_the_server_loses_no_acknowledged_append_memory_pool() {
    kill_server_during_appends("memory");
}

#[test]
fn killing_the_server_loses_no_acknowledged_append_file_pool() {
    kill_server_during_appends("file");
}

#[test]
fn sigterm_syncs_and_exits_cleanly() {
    let pool = pool("memory");
    let (server, _out) = pool.serve();
    {
        let c = Client::connect(&pool.socket()).unwrap();
        let f = c.open_file("/unsynced", OpenFlags::create()).unwrap();
        f.pwrite(b"written, never synced by the client", 0).unwrap();
        // The client stays connected: the server ends its session as it stops.
        server.signal(libc::SIGTERM);
        let mut server = server;
        let status = server.0.wait().unwrap();
        assert!(status.success(), "serve after SIGTERM: {status}");
        let mut err = String::new();
        server
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(err.contains("synced and closed"), "{err}");
    }
    assert!(!pool.socket().exists());
    assert_eq!(
        pool.fs(&["cat", "/unsynced"]),
        "written, never synced by the client"
    );
}

#[test]
fn a_second_server_and_a_locked_pool_are_refused() {
    let pool = pool("memory");
    let (server, _out) = pool.serve();
    let o = tailbound()
        .args(["serve", s(&pool.path), "--foreground"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("already served by process") && err.contains(&server.pid().to_string()),
        "{err}"
    );
    drop(server);
    // No server, but another process holds the pool lock.
    let held = std::fs::File::open(&pool.path).unwrap();
    assert!(tailbound::sys::file::try_lock_exclusive(&held).unwrap());
    let o = tailbound()
        .args(["serve", s(&pool.path), "--foreground"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pool lock") && err.contains("serve"), "{err}");
}

#[test]
fn fs_commands_go_through_the_server() {
    let pool = pool("memory");
    let (server, _out) = pool.serve();
    let host = pool.path.with_file_name("host.txt");
    std::fs::write(&host, b"through the server\n").unwrap();
    pool.fs(&["mkdir", "/d", "-p"]);
    pool.fs(&["put", s(&host), "/d/a.txt"]);
    assert_eq!(pool.fs(&["cat", "/d/a.txt"]), "through the server\n");
    assert!(pool.fs(&["ls", "-l", "/d"]).contains("a.txt"));
    let snap = pool.fs(&["snapshot", "--name", "one"]);
    let n = snap.split_whitespace().nth(1).unwrap().to_string();
    pool.fs(&["rm", "/d/a.txt"]);
    assert_eq!(
        pool.fs(&["cat", "/d/a.txt", "--at", &n]),
        "through the server\n"
    );
    pool.fs(&["restore", "--at", &n, "/d/a.txt", "--to", "/back.txt"]);
    assert_eq!(pool.fs(&["cat", "/back.txt"]), "through the server\n");
    pool.fs(&["mv", "/back.txt", "/moved.txt"]);
    assert!(pool.fs(&["stat", "/moved.txt"]).contains("size: 19"));
    assert!(pool.fs(&["df"]).contains("available"));
    assert!(pool.fs(&["checkpoints"]).contains("one"));
    pool.fs(&["gc", "--target-free", "10%"]);
    let info = pool.fs(&["info"]);
    assert!(
        info.contains(&format!(
            "served:      by process {} on {}",
            server.pid(),
            s(&pool.socket())
        )),
        "{info}"
    );
    // What needs the device to itself says who has it.
    for args in [
        vec!["fs", "fsck", s(&pool.path)],
        vec!["fs", "mkfs", s(&pool.path), "--force"],
    ] {
        let o = tailbound().args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("stop the server"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn garbage_on_the_socket_does_not_stop_the_server() {
    let pool = pool("memory");
    let (_server, _out) = pool.serve();
    let mut rng = fastrand_like(0x5eed);
    for round in 0..50 {
        let mut sock = UnixStream::connect(pool.socket()).unwrap();
        let junk: Vec<u8> = (0..(round * 37) % 500).map(|_| rng() as u8).collect();
        let _ = sock.write_all(&junk);
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = sock.read_to_end(&mut sink);
    }
    let c = Client::connect(&pool.socket()).unwrap();
    c.mkdir("/still-serving", 0o755).unwrap();
}

/// A small xorshift generator (the CLI crate has no random-number dependency).
fn fastrand_like(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[test]
fn serve_detaches_by_default_and_stops_on_sigterm() {
    let pool = pool("memory");
    let out = ok(&["serve", s(&pool.path)]);
    let pid: i32 = out
        .trim()
        .rsplit_once("(process ")
        .and_then(|(_, p)| p.strip_suffix(')'))
        .unwrap()
        .parse()
        .unwrap();
    let stop = Stop(pid);
    let c = Client::connect(&pool.socket()).unwrap();
    assert_eq!(c.server_pid() as i32, pid);
    c.open_file("/f", OpenFlags::create())
        .unwrap()
        .pwrite(b"daemon", 0)
        .unwrap();
    drop(c);
    // SAFETY (of the call below): kill(2) of the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // It is not our child: wait for its pool lock to go.
    pool.wait_unlocked();
    std::mem::forget(stop);
    assert!(!pool.socket().exists());
    assert!(
        !pool.note(".serving").exists(),
        "the stopped server's note stayed"
    );
    assert_eq!(pool.fs(&["cat", "/f"]), "daemon");
}

#[test]
fn another_user_is_kept_out_unless_allow_other() {
    if !common::require_root("another_user_is_kept_out_unless_allow_other") {
        return;
    }
    let pool = pool("memory");
    // The pool's directory is open to all; only the socket's mode keeps others out.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        pool.path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let probe = |pool: &Pool| {
        let (mut child, mut out) = spawn_worker_as("probe", &pool.socket(), &[], Some(NOBODY));
        let mut all = String::new();
        out.read_to_string(&mut all).unwrap();
        assert!(child.0.wait().unwrap().success(), "{all}");
        all
    };
    let (server, _out) = pool.serve();
    let said = probe(&pool);
    assert!(said.contains("refused"), "{said}");
    drop(server);
    let (_server, _out) = pool.serve_with(&["--allow-other"]);
    let me = Client::connect(&pool.socket()).unwrap();
    me.mkdir("/open", 0o777).unwrap();
    me.set_attr(
        "/open",
        &SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let said = probe(&pool);
    assert!(said.contains("connected"), "{said}");
    // What another user makes is that user's.
    let st = me.stat("/open/made-by-another-user").unwrap();
    assert_eq!((st.uid, st.gid), (NOBODY, NOBODY));
}

const NOBODY: u32 = 65534;

/// A new pool's root lets everyone search and list it, as a new file system's does.
fn mode_of_root_is_searchable(me: &Client) {
    let root = me.stat("/").unwrap();
    assert_eq!(root.mode & 0o005, 0o005, "root mode {:o}", root.mode);
}

/// The errno of a call that must fail.
fn errno_of<T: std::fmt::Debug>(r: tailbound::tbfs::Result<T>) -> i32 {
    r.expect_err("refused").errno()
}

/// What user `nobody` may and may not do on the tree [`permissions_follow_the_kernels_rules`]
/// makes, run in a process of that user.
fn permissions_as_nobody(socket: &Path) {
    let c = Client::connect(socket).unwrap();
    let rw = OpenFlags {
        write: true,
        ..OpenFlags::read_only()
    };
    // Search permission on every directory of a path, also through a link's target.
    assert_eq!(errno_of(c.stat("/private/f")), libc::EACCES);
    assert_eq!(errno_of(c.stat("/pub/to-private")), libc::EACCES);
    assert_eq!(
        errno_of(c.open_file("/private/f", OpenFlags::read_only())),
        libc::EACCES
    );
    assert!(c.lstat("/pub/to-private").is_ok());
    // Others' bits: readable, not writable; the directory is not writable either.
    let mut buf = [0u8; 8];
    let f = c.open_file("/pub/ro", OpenFlags::read_only()).unwrap();
    assert_eq!(f.pread(&mut buf, 0).unwrap(), 4);
    assert_eq!(errno_of(c.open_file("/pub/ro", rw)), libc::EACCES);
    assert_eq!(errno_of(c.truncate("/pub/ro", 0)), libc::EACCES);
    assert_eq!(errno_of(c.unlink("/pub/ro")), libc::EACCES);
    assert_eq!(errno_of(c.mkdir("/pub/d", 0o755)), libc::EACCES);
    assert_eq!(errno_of(c.rename("/pub/ro", "/tmp/ro")), libc::EACCES);
    assert_eq!(errno_of(c.readdir("/private")), libc::EACCES);
    assert!(c.readdir("/pub").is_ok());
    // The group's bits apply to a member of the group.
    assert!(c
        .open_file("/pub/group-only", OpenFlags::read_only())
        .is_ok());
    assert_eq!(
        errno_of(c.open_file("/pub/owner-only", OpenFlags::read_only())),
        libc::EACCES
    );
    // A sticky directory: others' files may be written but not removed or renamed.
    assert!(c.open_file("/tmp/roots", rw).is_ok());
    assert_eq!(errno_of(c.unlink("/tmp/roots")), libc::EPERM);
    assert_eq!(errno_of(c.rename("/tmp/roots", "/tmp/x")), libc::EPERM);
    c.open_file("/tmp/mine", OpenFlags::create()).unwrap();
    c.rename("/tmp/mine", "/tmp/mine2").unwrap();
    c.unlink("/tmp/mine2").unwrap();
    // Only the owner changes modes and times, only root owners.
    assert_eq!(
        errno_of(c.set_attr(
            "/tmp/roots",
            &SetAttr {
                mode: Some(0o777),
                ..SetAttr::default()
            }
        )),
        libc::EPERM
    );
    c.open_file("/tmp/own", OpenFlags::create()).unwrap();
    c.set_attr(
        "/tmp/own",
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(
        errno_of(c.set_attr(
            "/tmp/own",
            &SetAttr {
                uid: Some(0),
                ..SetAttr::default()
            }
        )),
        libc::EPERM
    );
    // Snapshots and cleaning are the pool owner's.
    assert_eq!(errno_of(c.snapshot(Some("mine"))), libc::EPERM);
}

#[test]
fn permissions_follow_the_kernels_rules() {
    if !common::require_root("permissions_follow_the_kernels_rules") {
        return;
    }
    let pool = pool("memory");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        pool.path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (_server, _out) = pool.serve_with(&["--allow-other"]);
    let me = Client::connect(&pool.socket()).unwrap();
    mode_of_root_is_searchable(&me);
    let mode = |path: &str, mode: u32| {
        me.set_attr(
            path,
            &SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        )
        .unwrap()
    };
    let file = |path: &str, m: u32| {
        let f = me.open_file(path, OpenFlags::create()).unwrap();
        f.pwrite(b"data", 0).unwrap();
        f.close().unwrap();
        mode(path, m);
    };
    me.mkdir("/private", 0o700).unwrap();
    mode("/private", 0o700);
    file("/private/f", 0o644);
    me.mkdir("/pub", 0o755).unwrap();
    mode("/pub", 0o755);
    file("/pub/ro", 0o644);
    file("/pub/group-only", 0o040);
    file("/pub/owner-only", 0o604);
    me.set_attr(
        "/pub/group-only",
        &SetAttr {
            gid: Some(NOBODY),
            ..SetAttr::default()
        },
    )
    .unwrap();
    me.set_attr(
        "/pub/owner-only",
        &SetAttr {
            uid: Some(NOBODY),
            ..SetAttr::default()
        },
    )
    .unwrap();
    mode("/pub/owner-only", 0o044);
    me.symlink("/private/f", "/pub/to-private").unwrap();
    me.mkdir("/tmp", 0o777).unwrap();
    mode("/tmp", 0o1777);
    file("/tmp/roots", 0o666);

    let (mut child, mut out) = spawn_worker_as("permissions", &pool.socket(), &[], Some(NOBODY));
    let mut all = String::new();
    out.read_to_string(&mut all).unwrap();
    assert!(child.0.wait().unwrap().success(), "{all}");
    assert!(all.contains("checked"), "{all}");
    // Root passes every check.
    assert!(me.stat("/private/f").is_ok());
    me.unlink("/tmp/roots").unwrap();
}

#[test]
fn serve_ended_by_sigterm_fails_naming_the_pool_when_its_final_sync_fails() {
    let pool = pool("memory");
    // The failpoint poisons the pool at the server's first background pass: every sync after
    // it fails, the final one included.
    let mut child = tailbound()
        .args([
            "serve",
            s(&pool.path),
            "--foreground",
            "--backend",
            "memory",
        ])
        .env("TAILBOUND_FAILPOINTS", "tbfs.background")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let server = Proc(child);
    assert!(line.starts_with("serving "), "serve said {line:?}");
    let client = Client::connect(&pool.socket()).unwrap();
    let start = Instant::now();
    let why = loop {
        if let Err(e) = client.sync() {
            break e.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the armed failpoint never poisoned the pool"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(why.contains("failpoint tbfs.background"), "{why}");
    drop(client);
    server.signal(libc::SIGTERM);
    let (ok, err) = finish(server);
    assert!(!ok, "serve after SIGTERM succeeded: {err}");
    assert!(err.contains(s(&pool.path)), "{err}");
    assert!(err.contains("syncing on exit"), "{err}");
    assert!(err.contains("failpoint tbfs.background"), "{err}");
    // The failure is left for the next server of the pool, which warns of it once.
    assert!(!pool.note(".serving").exists());
    assert!(pool.note(".sync-failed").exists());
    let (next, _out) = pool.serve();
    next.signal(libc::SIGTERM);
    let (ok, err) = finish(next);
    assert!(ok, "the next serve: {err}");
    assert_eq!(
        err.matches("the previous server's final sync failed")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("failpoint tbfs.background"), "{err}");
    assert!(!pool.note(".sync-failed").exists());
}

#[test]
fn a_served_pool_stopped_cleanly_leaves_no_note() {
    let pool = pool("memory");
    // Stopped by SIGTERM.
    let (server, _out) = pool.serve();
    let note = std::fs::read_to_string(pool.note(".serving")).unwrap();
    assert!(
        note.contains(&format!("pid {}", server.pid())) && note.contains(s(&pool.socket())),
        "{note:?}"
    );
    Client::connect(&pool.socket())
        .unwrap()
        .open_file("/f", OpenFlags::create())
        .unwrap()
        .pwrite(b"synced on exit", 0)
        .unwrap();
    server.signal(libc::SIGTERM);
    let (ok, err) = finish(server);
    assert!(ok, "serve after SIGTERM: {err}");
    assert!(!pool.note(".serving").exists(), "SIGTERM left the note");
    assert!(!pool.note(".sync-failed").exists());

    // Stopped by SIGINT, with no warning of the server before it.
    let (server, _out) = pool.serve();
    assert!(pool.note(".serving").exists());
    server.signal(libc::SIGINT);
    let (ok, err) = finish(server);
    assert!(ok, "serve after SIGINT: {err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(!pool.note(".serving").exists(), "SIGINT left the note");

    // `tailbound run`'s server, which exits once its last client is gone.
    let (server, _out) = pool.serve_with(&["--exit-when-idle"]);
    assert!(pool.note(".serving").exists());
    drop(Client::connect(&pool.socket()).unwrap());
    let (ok, err) = finish(server);
    assert!(ok, "serve --exit-when-idle: {err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(
        !pool.note(".serving").exists(),
        "the idle exit left the note"
    );
    assert_eq!(pool.fs(&["cat", "/f"]), "synced on exit");
}

#[test]
fn commands_through_a_live_server_leave_its_note_alone() {
    let pool = pool("memory");
    let (server, _out) = pool.serve();
    let note = std::fs::read_to_string(pool.note(".serving")).unwrap();
    assert!(note.contains(&format!("pid {}", server.pid())), "{note:?}");
    // A command that writes goes through the server, whose note is no one else's to take.
    let o = tailbound()
        .args([
            "fs",
            "mkdir",
            s(&pool.path),
            "/d",
            "--backend",
            pool.backend,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(pool.note(".serving")).unwrap(),
        note
    );
    // mkfs is refused, the pool and the note kept.
    let o = tailbound()
        .args(["fs", "mkfs", s(&pool.path), "--force", "--size", "64MiB"])
        .args(["--backend", pool.backend])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("served by process"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(pool.note(".serving")).unwrap(),
        note
    );
    server.signal(libc::SIGTERM);
    let (ok, err) = finish(server);
    assert!(ok, "serve: {err}");
    assert!(!pool.note(".serving").exists());
    assert_eq!(pool.fs(&["ls", "/"]), "d/\n");
}

#[test]
fn a_killed_server_leaves_its_note_and_the_next_serve_warns_once() {
    let pool = pool("memory");
    let (mut server, _out) = pool.serve();
    let killed = server.pid();
    {
        let c = Client::connect(&pool.socket()).unwrap();
        let f = c.open_file("/durable", OpenFlags::create()).unwrap();
        f.pwrite(b"fsynced before the kill", 0).unwrap();
        f.fsync().unwrap();
    }
    server.kill9();
    let note =
        std::fs::read_to_string(pool.note(".serving")).expect("the killed server's note is gone");
    assert!(note.contains(&format!("pid {killed}")), "{note:?}");

    // The next server, detached (as `tailbound serve` starts by default), warns.
    let o = tailbound().args(["serve", s(&pool.path)]).output().unwrap();
    assert!(o.status.success(), "serve: {}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("ended without confirming its final sync")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains(s(&pool.path)), "{err}");
    assert!(err.contains(&format!("pid {killed}")), "{err}");
    assert!(
        err.contains("what was durable when it ended is recovered"),
        "{err}"
    );
    let pid = Client::connect(&pool.socket()).unwrap().server_pid() as i32;
    let stop = Stop(pid);
    // The note now is this server's, removed by its confirmed final sync.
    let note = std::fs::read_to_string(pool.note(".serving")).unwrap();
    assert!(note.contains(&format!("pid {pid}")), "{note:?}");
    // SAFETY (of the call below): kill(2) of the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    pool.wait_unlocked();
    // It has ended: its pid may be another process's now.
    std::mem::forget(stop);
    assert!(!pool.note(".serving").exists());

    // Warned once: the server after that has nothing to warn of.
    let (server, _out) = pool.serve();
    server.signal(libc::SIGTERM);
    let (ok, err) = finish(server);
    assert!(ok, "serve: {err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(pool.fs(&["cat", "/durable"]), "fsynced before the kill");
}
