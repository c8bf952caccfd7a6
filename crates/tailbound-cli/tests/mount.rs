//! `tailbound mount`: real programs, unmodified, on a pool mounted through FUSE, each in
//! processes of its own (shells fork, make and fio run several, sqlite3 runs twice at once).
//!
//! They need root (or fusermount3) and /dev/fuse. Under CI (`CI` set) a test that cannot mount
//! fails; elsewhere it says why and passes without running.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::programs::{
    check_fio_report, feed, make_project_script, sqlite_writer, FIO_ARGS, FIO_FILES,
    GIT_OUTPUT_END, GIT_SCRIPT, MAKE_OUTPUT, TREE_SCRIPT,
};
use common::{ok, stderr, stdout, tailbound};

/// A pool mounted for one test, unmounted and removed when dropped (also when the test fails).
struct Mounted {
    dir: PathBuf,
    pool: PathBuf,
}

impl Mounted {
    /// Mounts a new pool for `test`, or `None` when this machine cannot (outside CI only).
    fn new(test: &str) -> Option<Mounted> {
        Mounted::with_pool(test, |_| {})
    }

    /// Like [`Mounted::new`], with `prepare` run on the pool's path before the mount (it may
    /// make the pool, which is then mounted as it is).
    fn with_pool(test: &str, prepare: impl FnOnce(&Path)) -> Option<Mounted> {
        Mounted::with(test, prepare, &[])
    }

    /// Like [`Mounted::with_pool`], with more arguments to `tailbound mount`.
    fn with(test: &str, prepare: impl FnOnce(&Path), more: &[&str]) -> Option<Mounted> {
        let m = Mounted::unmounted(test)?;
        prepare(&m.pool);
        let mut args = vec![
            "mount",
            m.pool.to_str().unwrap(),
            m.dir.to_str().unwrap(),
            "--pool-size",
            "512M",
        ];
        args.extend_from_slice(more);
        let out = tailbound(&args);
        assert!(out.status.success(), "mount: {}", stderr(&out));
        Some(m)
    }

    /// A directory and the name of a pool for `test`, not mounted yet, or `None` when this
    /// machine cannot mount (outside CI only).
    fn unmounted(test: &str) -> Option<Mounted> {
        if let Err(why) = tailbound_fuse::can_mount() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: cannot mount through FUSE under CI: {why}"
            );
            eprintln!("skipping {test}: cannot mount through FUSE: {why}");
            return None;
        }
        let tag = format!("tb-fuse-{test}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let pool = PathBuf::from("/dev/shm").join(format!("{tag}.pool"));
        let _ = std::fs::remove_file(&pool);
        std::fs::create_dir_all(&dir).unwrap();
        Some(Mounted { dir, pool })
    }

    /// `tailbound mount` of this pool, with the failpoint that poisons the pool at the server's
    /// first background pass armed: every sync after it fails, the final one included.
    fn mount_command_poisoned(&self, more: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tailbound"));
        cmd.args([
            "mount",
            self.pool.to_str().unwrap(),
            self.dir.to_str().unwrap(),
        ])
        .args(more)
        .env("TAILBOUND_FAILPOINTS", "tbfs.background");
        cmd
    }

    /// Waits (bounded) until a sync through the socket beside the mount fails: the pool is
    /// poisoned, and so its final sync will fail too. Returns that sync's error.
    fn wait_poisoned(&self) -> String {
        let socket = tailbound::serve::socket_path(&self.pool);
        let start = std::time::Instant::now();
        loop {
            if let Ok(client) = tailbound::serve::Client::connect(&socket) {
                if let Err(e) = client.sync() {
                    return e.to_string();
                }
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the armed failpoint never poisoned the pool"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `tailbound mount` of this pool with failpoint `mount.final-sync` armed: the server
    /// panics (and exits) as its final sync begins, having confirmed nothing.
    fn mount_dying_in_final_sync(&self) -> Output {
        self.mount_with_failpoint("mount.final-sync")
    }

    /// `tailbound mount` of this pool (in the background) with failpoint `name` armed.
    fn mount_with_failpoint(&self, name: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tailbound"))
            .args([
                "mount",
                self.pool.to_str().unwrap(),
                self.dir.to_str().unwrap(),
            ])
            .env("TAILBOUND_FAILPOINTS", name)
            .output()
            .unwrap()
    }

    /// Writes `bytes` to `rel` in the mount and fsyncs it: durable once this returns.
    fn write_fsynced(&self, rel: &str, bytes: &[u8]) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path(rel)).unwrap();
        f.write_all(bytes).unwrap();
        f.sync_all().unwrap();
    }

    /// Kills the server with SIGKILL and waits (bounded) until it is gone.
    fn kill_server(&self) {
        let pid = self.server_pid();
        // SAFETY (of the call below): kill(2) with a pid read from /proc, of the server this
        // test started.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        let start = std::time::Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the server did not die of SIGKILL"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Where the server notes that it serves the pool, until its final sync is confirmed.
    fn serving_note(&self) -> PathBuf {
        let mut s = self.pool.as_os_str().to_owned();
        s.push(".serving");
        PathBuf::from(s)
    }

    /// Checks a failed `umount` of a server that ended without confirming its final sync.
    fn assert_umount_fails_unconfirmed(&self) {
        let out = tailbound(&["umount", self.dir.to_str().unwrap()]);
        let err = stderr(&out);
        assert!(!out.status.success(), "umount succeeded: {err}");
        assert!(err.contains(self.dir.to_str().unwrap()), "{err}");
        assert!(err.contains(self.pool.to_str().unwrap()), "{err}");
        assert!(
            err.contains("ended without confirming its final sync"),
            "{err}"
        );
        // The mount is gone all the same, and the note went with the umount that reported it.
        let again = tailbound(&["umount", self.dir.to_str().unwrap()]);
        assert!(
            stderr(&again).contains("no tailbound mount there"),
            "{}",
            stderr(&again)
        );
        assert!(!self.serving_note().exists());
        assert!(!self.sync_failure_report().exists());
    }

    /// Where the server leaves a failed final sync's report for `umount`.
    fn sync_failure_report(&self) -> PathBuf {
        let mut s = self.pool.as_os_str().to_owned();
        s.push(".sync-failed");
        PathBuf::from(s)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Runs `script` with `sh -e` in the mount.
    fn sh(&self, script: &str) -> Output {
        Command::new("sh")
            .arg("-ec")
            .arg(script)
            .current_dir(&self.dir)
            .output()
            .expect("running sh")
    }

    /// The server process's id: the process whose command line is `tailbound mount POOL ...`.
    fn server_pid(&self) -> u32 {
        let want = format!("mount\0{}\0", self.pool.display());
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&want) {
                return pid;
            }
        }
        panic!("no server process for {}", self.pool.display());
    }

    /// Mounts the pool again (after its server died) on the same directory.
    fn remount(&self) {
        let _ = tailbound(&["umount", "--lazy", self.dir.to_str().unwrap()]);
        let out = tailbound(&[
            "mount",
            self.pool.to_str().unwrap(),
            self.dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "mount again: {}", stderr(&out));
    }

    /// Unmounts (syncing the pool) and mounts it again: a kernel that caches nothing of it.
    fn mount_again(&self) {
        let out = tailbound(&["umount", self.dir.to_str().unwrap()]);
        assert!(out.status.success(), "umount: {}", stderr(&out));
        let out = tailbound(&[
            "mount",
            self.pool.to_str().unwrap(),
            self.dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "mount again: {}", stderr(&out));
    }

    /// Mounts the pool again after its umount: the mount says nothing containing `not`, and
    /// `rel` holds `bytes`.
    fn mount_again_holding(&self, not: &str, rel: &str, bytes: &[u8]) {
        let out = tailbound(&[
            "mount",
            self.pool.to_str().unwrap(),
            self.dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "mount again: {}", stderr(&out));
        assert!(!stderr(&out).contains(not), "{}", stderr(&out));
        assert_eq!(std::fs::read(self.path(rel)).unwrap(), bytes);
    }

    /// Unmounts (syncing the pool) and returns the pool's path, which stays.
    fn unmount(mut self) -> PathBuf {
        let out = tailbound(&["umount", self.dir.to_str().unwrap()]);
        assert!(out.status.success(), "umount: {}", stderr(&out));
        let _ = std::fs::remove_dir(&self.dir);
        let pool = std::mem::take(&mut self.pool);
        self.dir = PathBuf::new();
        PathBuf::from(&pool)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let d = self.dir.to_str().unwrap_or("");
            let out = tailbound(&["umount", d]);
            if !out.status.success() {
                let _ = tailbound(&["umount", "--lazy", d]);
            }
            let _ = std::fs::remove_dir(&self.dir);
        }
        if !self.pool.as_os_str().is_empty() {
            remove_pool(&self.pool);
        }
    }
}

/// Removes a pool and what a server leaves beside it: its socket and FIFO directory (left
/// behind by a killed server) and its notes.
fn remove_pool(pool: &Path) {
    let _ = std::fs::remove_file(pool);
    let _ = std::fs::remove_file(tailbound::serve::socket_path(pool));
    let _ = std::fs::remove_dir_all(tailbound::serve::fifo_dir(pool));
    for suffix in [".serving", ".sync-failed"] {
        let mut note = pool.as_os_str().to_owned();
        note.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(note));
    }
}

/// A pool file removed at the end of a test.
struct PoolFile(PathBuf);

impl Drop for PoolFile {
    fn drop(&mut self) {
        remove_pool(&self.0);
    }
}

#[test]
fn a_shell_script_runs_on_the_mount_and_its_files_outlive_the_mount() {
    let Some(m) = Mounted::new("shell") else {
        return;
    };
    let out = m.sh(&[
        TREE_SCRIPT,
        "mkfifo a/fifo
         (echo through-a-fifo > a/fifo &) ; read v < a/fifo; echo \"$v\" > a/fifo-said
         chmod 600 a/log
         wc -l < a/hard
         cat a/link
         cat a/fifo-said
         find a | sort
         stat -c '%a %h' a/log",
    ]
    .join("\n"));
    let text = ok("the script", &out);
    assert_eq!(
        text,
        "5\nx\ny\nz\nthrough-a-fifo\na\na/b\na/b/c\na/b/c/file\na/b/sorted\na/fifo\n\
         a/fifo-said\na/hard\na/link\na/log\n600 2\n"
    );
    let pool = PoolFile(m.unmount());
    // Synced by the unmount: the pool holds the tree without the mount.
    let cat = tailbound(&["fs", "cat", pool.0.to_str().unwrap(), "/a/b/c/file"]);
    assert_eq!(ok("fs cat", &cat), "nested\n");
}

#[test]
fn git_init_add_commit_log_and_gc_work_on_the_mount() {
    let Some(m) = Mounted::new("git") else {
        return;
    };
    let text = ok("git", &m.sh(GIT_SCRIPT));
    assert!(text.ends_with(GIT_OUTPUT_END), "{text}");
}

#[test]
fn make_j4_builds_and_runs_a_small_c_project_on_the_mount() {
    let Some(m) = Mounted::new("make") else {
        return;
    };
    let out = m.sh(&make_project_script());
    assert_eq!(ok("make", &out), MAKE_OUTPUT);
}

#[test]
fn two_sqlite3_processes_write_one_database_at_once() {
    let Some(m) = Mounted::new("sqlite") else {
        return;
    };
    let db = m.path("shared.db");
    let create = Command::new("sqlite3")
        .arg(&db)
        .arg("PRAGMA journal_mode=DELETE; CREATE TABLE t(writer TEXT, n INTEGER);")
        .output()
        .unwrap();
    ok("create", &create);
    const ROWS: usize = 150;
    let spawn = |who: &str| {
        let child = Command::new("sqlite3")
            .arg("-bail")
            .arg(&db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        feed(child, sqlite_writer(who, ROWS, ""))
    };
    let (a, fa) = spawn("a");
    let (b, fb) = spawn("b");
    fa.join().unwrap();
    fb.join().unwrap();
    ok("writer a", &a.wait_with_output().unwrap());
    ok("writer b", &b.wait_with_output().unwrap());
    let check = Command::new("sqlite3")
        .arg(&db)
        .arg(
            "PRAGMA integrity_check; SELECT writer, count(*), count(DISTINCT n) FROM t GROUP BY writer;",
        )
        .output()
        .unwrap();
    assert_eq!(
        ok("check", &check),
        format!("ok\na|{ROWS}|{ROWS}\nb|{ROWS}|{ROWS}\n")
    );
}

#[test]
fn fio_in_its_default_process_mode_writes_and_verifies_on_the_mount() {
    let Some(m) = Mounted::new("fio") else {
        return;
    };
    let out = Command::new("fio")
        .args(FIO_ARGS)
        .arg(format!("--directory={}", m.dir.display()))
        .output()
        .unwrap();
    check_fio_report(&ok("fio", &out));
    let files = std::fs::read_dir(&m.dir).unwrap().count();
    assert_eq!(files, FIO_FILES, "one file per job");
}

#[test]
fn tar_packs_and_unpacks_a_tree_on_the_mount() {
    let Some(m) = Mounted::new("tar") else {
        return;
    };
    let out = m.sh("mkdir -p src/d1/d2 src/empty
         for i in $(seq 1 50); do head -c $((i * 997)) /dev/urandom > src/d1/f$i; done
         ln -s d1/f1 src/link
         ln src/d1/f2 src/d1/d2/hard
         chmod 751 src/d1/d2
         tar -czf pack.tgz src
         mkdir out && tar -xzf pack.tgz -C out
         diff -r --no-dereference src out/src && echo same
         stat -c '%a' out/src/d1/d2
         stat -c '%h' out/src/d1/d2/hard
         readlink out/src/link");
    assert_eq!(ok("tar", &out), "same\n751\n2\nd1/f1\n");
}

#[test]
fn mount_refuses_a_missing_directory_and_umount_a_directory_it_does_not_serve() {
    let dir = std::env::temp_dir().join(format!("tb-fuse-none-{}", std::process::id()));
    let pool = PoolFile(PathBuf::from(format!(
        "/dev/shm/tb-fuse-none-{}.pool",
        std::process::id()
    )));
    let out = tailbound(&["mount", pool.0.to_str().unwrap(), dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
    assert!(
        !Path::new(&pool.0).exists(),
        "no pool made for a failed mount"
    );
    let out = tailbound(&["umount", std::env::temp_dir().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no tailbound mount"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn snapshots_are_browsable_read_only_under_dot_snapshots() {
    let made = |pool: &Path| {
        let p = pool.to_str().unwrap();
        ok("mkfs", &tailbound(&["fs", "mkfs", p, "--size", "64MiB"]));
        let v1 = std::env::temp_dir().join(format!("tb-fuse-v1-{}", std::process::id()));
        std::fs::write(&v1, "one\n").unwrap();
        ok(
            "put",
            &tailbound(&["fs", "put", p, v1.to_str().unwrap(), "/a.txt"]),
        );
        ok(
            "snapshot",
            &tailbound(&["fs", "snapshot", p, "--name", "first"]),
        );
        std::fs::write(&v1, "two\n").unwrap();
        ok(
            "put",
            &tailbound(&["fs", "put", p, v1.to_str().unwrap(), "/a.txt"]),
        );
        ok("mkdir", &tailbound(&["fs", "mkdir", p, "/later"]));
        std::fs::remove_file(&v1).unwrap();
    };
    let Some(m) = Mounted::with_pool("snapshots", made) else {
        return;
    };
    let out = m.sh("cat a.txt .snapshots/first/a.txt
         ls .snapshots
         ls .snapshots/first
         find . | sort
         echo x > .snapshots/first/new 2>/dev/null || echo refused-create
         rm .snapshots/first/a.txt 2>/dev/null || echo refused-rm
         stat -c %A .snapshots/first/a.txt");
    assert_eq!(
        ok("browse", &out),
        "two\none\nfirst\na.txt\n.\n./a.txt\n./later\nrefused-create\nrefused-rm\n-r--r--r--\n"
    );
    // The kernel opens files without asking the server: its permission check refuses a writer
    // at open, except root, whose write itself the pool refuses.
    let snap = m.path(".snapshots/first/a.txt");
    let mut opened = std::fs::OpenOptions::new()
        .append(true)
        .open(&snap)
        .unwrap();
    let refused = {
        use std::io::Write;
        opened.write(b"x\n")
    };
    assert_eq!(
        refused.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EROFS)),
        "root's write to a snapshot's file"
    );
    drop(opened);
    // Closed, the refused bytes are gone from the kernel's cache too: the same mount reads the
    // snapshot as it is, not what root wrote over it.
    assert_eq!(std::fs::read_to_string(&snap).unwrap(), "one\n");
    let out = m.sh(
        "echo more >> .snapshots/first/a.txt 2>/dev/null || echo refused-append
         cat .snapshots/first/a.txt",
    );
    assert_eq!(ok("after a second write", &out), "refused-append\none\n");
    m.mount_again();
    assert_eq!(std::fs::read_to_string(&snap).unwrap(), "one\n");
}

#[test]
fn a_write_by_another_user_and_a_chown_clear_set_id_bits() {
    let Some(m) = Mounted::with("setid", |_| {}, &["--allow-other"]) else {
        return;
    };
    // The kernel leaves this to the pool: set-user-ID goes on a write by a caller without
    // CAP_FSETID and on any chown; set-group-ID only where group execute is set.
    let out = m.sh(
        "touch a b c d && chmod 6777 a && chmod 4755 b c && chmod 2745 d
         setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo x >> a'
         echo x >> c
         chown 65534 b d
         stat -c %a a b c d",
    );
    assert_eq!(ok("set-ID bits", &out), "777\n755\n4755\n2745\n");
}

#[test]
fn a_chown_that_changes_nothing_still_marks_the_change_time() {
    let Some(m) = Mounted::with("chown-ctime", |_| {}, &[]) else {
        return;
    };
    // POSIX: a successful chown marks the change time for update even when owner and group
    // stay (-1, -1). A second apart, so whole seconds tell the update.
    let out = m.sh("touch f
         before=$(stat -c %Z f)
         sleep 1
         python3 -c 'import os; os.chown(\"f\", -1, -1)'
         after=$(stat -c %Z f)
         [ \"$after\" -gt \"$before\" ] && echo updated || echo \"kept $before $after\"
         echo $after");
    let out = ok("chown -1 -1", &out);
    let (seen, after) = out.split_once('\n').unwrap();
    assert_eq!(seen, "updated");
    // The pool holds it, not only the kernel's cache of the inode.
    m.mount_again();
    let out = m.sh("stat -c %Z f");
    assert_eq!(ok("after mounting again", &out), after);
}

#[test]
fn opening_and_closing_files_costs_no_open_or_release_request() {
    let stats = std::env::temp_dir().join(format!("tb-fuse-requests-{}.txt", std::process::id()));
    let Some(m) = Mounted::with("stats", |_| {}, &["--stats", stats.to_str().unwrap()]) else {
        return;
    };
    use std::io::{Read, Seek, Write};
    std::fs::write(m.path("f"), b"first").unwrap();
    for _ in 0..20 {
        let mut f = std::fs::File::open(m.path("f")).unwrap();
        let mut got = String::new();
        f.read_to_string(&mut got).unwrap();
        assert_eq!(got, "first");
    }
    // Unlinked while open, before any of its data reached the pool: the data stays for the open
    // file until it is closed.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(m.path("gone"))
        .unwrap();
    f.write_all(b"kept").unwrap();
    std::fs::remove_file(m.path("gone")).unwrap();
    f.write_all(b" after unlink").unwrap();
    f.sync_all().unwrap();
    f.rewind().unwrap();
    let mut got = String::new();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "kept after unlink");
    drop(f);
    let pool = PoolFile(m.unmount());
    let report = std::fs::read_to_string(&stats).unwrap();
    let _ = std::fs::remove_file(&stats);
    drop(pool);
    let count = |kind: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.strip_prefix(kind)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    };
    assert!(count("TOTAL") > 0, "{report}");
    // The first OPEN (or CREATE) is answered ENOSYS; the kernel then opens files by itself.
    assert!(count("OPEN") <= 1, "{report}");
    assert!(count("CREATE") <= 1, "{report}");
    assert_eq!(count("RELEASE"), 0, "{report}");
}

#[test]
fn a_killed_server_loses_no_append_two_processes_saw_fsynced() {
    let Some(m) = Mounted::new("kill") else {
        return;
    };
    // Each writer appends numbered lines, fsyncs each, and prints the number once fsync returned.
    let writer = |tag: &str| {
        Command::new("python3")
            .arg("-c")
            .arg(
                "import os, sys\n\
                 fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)\n\
                 i = 0\n\
                 while True:\n\
                 \x20   os.write(fd, ('%s %d\\n' % (sys.argv[2], i)).encode())\n\
                 \x20   os.fsync(fd)\n\
                 \x20   print(i, flush=True)\n\
                 \x20   i += 1\n",
            )
            .arg(m.path("log"))
            .arg(tag)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut children = [writer("a"), writer("b")];
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            use std::io::BufRead;
            let out = std::io::BufReader::new(c.stdout.take().unwrap());
            let (tx, rx) = std::sync::mpsc::channel::<i64>();
            std::thread::spawn(move || {
                for line in out.lines() {
                    let Ok(line) = line else { break };
                    let Ok(n) = line.trim().parse::<i64>() else {
                        break;
                    };
                    if tx.send(n).is_err() {
                        break;
                    }
                }
            });
            rx
        })
        .collect();
    // Wait until both have 100 acknowledged appends, then kill the server mid-stream.
    let mut acked = [-1i64; 2];
    for (k, rx) in readers.iter().enumerate() {
        while acked[k] < 100 {
            acked[k] = rx.recv().expect("a writer stopped before 100 appends");
        }
    }
    let killed = Command::new("kill")
        .arg("-9")
        .arg(m.server_pid().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    for (k, rx) in readers.iter().enumerate() {
        // The writers fail once the server is gone; every number they printed counts.
        while let Ok(n) = rx.recv() {
            acked[k] = n;
        }
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    m.remount();
    // A missing file lost every append.
    let text = std::fs::read_to_string(m.path("log")).unwrap_or_default();
    for (k, tag) in ["a", "b"].iter().enumerate() {
        let seen: std::collections::BTreeSet<i64> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{tag} ")))
            .filter_map(|n| n.parse().ok())
            .collect();
        for n in 0..=acked[k] {
            assert!(
                seen.contains(&n),
                "writer {tag}: acknowledged append {n} lost"
            );
        }
    }
}

#[test]
fn posix_locks_conflict_between_processes_wait_and_die_with_their_holder() {
    let Some(m) = Mounted::new("locks") else {
        return;
    };
    std::fs::write(m.path("f"), b"locked file").unwrap();
    // `hold` takes a write lock, says so, then waits for its stdin to close (or its death).
    let py = |code: &str| {
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n{code}"
            ))
            .arg(m.path("f"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let read_line = |c: &mut std::process::Child| {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        line
    };
    let try_lock = "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('got')\n\
                    except OSError:\n    print('busy')\n";
    let hold = "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n";
    let mut holder = py(hold);
    assert_eq!(read_line(&mut holder), "held\n");
    let other = py(try_lock).wait_with_output().unwrap();
    assert_eq!(stdout(&other), "busy\n", "another process's lock conflicts");
    // The checker runs beside the holder: a process started after the holder died could get
    // its lock owner number (the kernel's, from the address of the process's file table).
    let mut checker = py(&format!("sys.stdin.readline()\n{try_lock}"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    {
        use std::io::Write;
        checker.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let after = checker.wait_with_output().unwrap();
    assert_eq!(
        stdout(&after),
        "got\n",
        "a killed process's lock is released"
    );
    // A waiter blocks in F_SETLKW until the holder lets go (here: exits when its stdin closes).
    let mut holder = py(hold);
    assert_eq!(read_line(&mut holder), "held\n");
    let mut waiter = py("fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('waited', flush=True)\n");
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(read_line(&mut waiter), "waited\n");
    waiter.wait().unwrap();
}

#[test]
fn fs_commands_work_while_mounted_and_the_mount_sees_what_they_change() {
    let Some(m) = Mounted::new("socket") else {
        return;
    };
    let pool = m.pool.to_str().unwrap().to_string();
    let socket = tailbound::serve::socket_path(&m.pool);
    assert!(socket.exists(), "no socket beside the mount");
    let fs = |args: &[&str]| {
        let mut all = vec!["fs", args[0], &pool];
        all.extend_from_slice(&args[1..]);
        ok(&format!("tailbound fs {args:?}"), &tailbound(&all))
    };
    // The kernel caches the file's pages, size and name, and keeps the file open throughout.
    std::fs::write(m.path("a.txt"), b"written through the mount\n").unwrap();
    std::fs::write(m.path("gone.txt"), b"x").unwrap();
    let held = std::fs::File::open(m.path("a.txt")).unwrap();
    assert_eq!(
        std::fs::read(m.path("a.txt")).unwrap(),
        b"written through the mount\n"
    );
    assert!(m.path("gone.txt").exists());

    // Through the socket beside the mount: longer contents, a new directory, a removed name.
    let host = PoolFile(m.pool.with_extension("host"));
    let longer = b"written through the socket, and longer than before\n";
    std::fs::write(&host.0, longer).unwrap();
    fs(&["put", host.0.to_str().unwrap(), "/a.txt"]);
    assert_eq!(fs(&["cat", "/a.txt"]).as_bytes(), longer);
    fs(&["mkdir", "/made"]);
    fs(&["rm", "/gone.txt"]);
    assert!(fs(&["info"]).contains("served:"));

    assert_eq!(std::fs::read(m.path("a.txt")).unwrap(), longer);
    assert_eq!(held.metadata().unwrap().len(), longer.len() as u64);
    assert!(m.path("made").is_dir());
    assert!(!m.path("gone.txt").exists());
    drop(held);
    let _pool = PoolFile(m.unmount());
    assert!(!socket.exists(), "the socket outlived the mount");
}

#[test]
fn a_file_the_mount_has_open_outlives_a_socket_clients_unlink() {
    let Some(m) = Mounted::new("unlinked") else {
        return;
    };
    let pool = m.pool.to_str().unwrap().to_string();
    // Written through the socket, so the kernel has none of its pages: the read below must
    // reach the pool.
    let host = PoolFile(m.pool.with_extension("host"));
    let data = b"kept while the mount has it open\n";
    std::fs::write(&host.0, data).unwrap();
    ok(
        "fs put",
        &tailbound(&["fs", "put", &pool, host.0.to_str().unwrap(), "/f"]),
    );
    // Opened through the mount without a read: with no-open the pool does not know of it.
    let mut held = std::fs::File::open(m.path("f")).unwrap();
    ok("fs rm", &tailbound(&["fs", "rm", &pool, "/f"]));
    assert!(!m.path("f").exists());
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut held, &mut got).unwrap();
    assert_eq!(
        got, data,
        "the open file lost its data to another client's unlink"
    );
    drop(held);
    let _pool = PoolFile(m.unmount());
}

#[test]
fn umount_fails_naming_the_pool_when_the_servers_final_sync_fails() {
    let Some(m) = Mounted::unmounted("sync-fails") else {
        return;
    };
    let out = m.mount_command_poisoned(&[]).output().unwrap();
    assert!(out.status.success(), "mount: {}", stderr(&out));
    let why = m.wait_poisoned();
    assert!(why.contains("failpoint tbfs.background"), "{why}");

    let out = tailbound(&["umount", m.dir.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success(), "umount succeeded: {err}");
    assert!(err.contains(m.pool.to_str().unwrap()), "{err}");
    assert!(err.contains("final sync"), "{err}");
    assert!(err.contains("failpoint tbfs.background"), "{err}");
    // The mount is gone all the same, and the report went with the umount that gave it.
    let again = tailbound(&["umount", m.dir.to_str().unwrap()]);
    assert!(
        stderr(&again).contains("no tailbound mount there"),
        "{}",
        stderr(&again)
    );
    assert!(!m.sync_failure_report().exists());

    // Mounted again, with nothing armed, the pool's final sync succeeds and so does umount.
    let out = tailbound(&["mount", m.pool.to_str().unwrap(), m.dir.to_str().unwrap()]);
    assert!(out.status.success(), "mount again: {}", stderr(&out));
    assert!(!stderr(&out).contains("final sync"), "{}", stderr(&out));
    let _pool = PoolFile(m.unmount());
}

#[test]
fn a_foreground_mount_ended_by_sigterm_fails_when_its_final_sync_fails() {
    let Some(m) = Mounted::unmounted("fg-sync-fails") else {
        return;
    };
    let server = m
        .mount_command_poisoned(&["--foreground"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    m.wait_poisoned();
    // SAFETY (of the call below): kill(2) on our own child's pid, which is not yet reaped.
    assert_eq!(unsafe { libc::kill(server.id() as i32, libc::SIGTERM) }, 0);
    let out = server.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "mount --foreground succeeded: {err}");
    assert!(err.contains(m.pool.to_str().unwrap()), "{err}");
    assert!(err.contains("final sync"), "{err}");
    assert!(err.contains("failpoint tbfs.background"), "{err}");
    // Nobody ran `umount`: the next mount says what the last one could not make durable.
    let out = tailbound(&["mount", m.pool.to_str().unwrap(), m.dir.to_str().unwrap()]);
    assert!(out.status.success(), "mount again: {}", stderr(&out));
    assert!(
        stderr(&out).contains("the previous server's final sync failed"),
        "{}",
        stderr(&out)
    );
    assert!(!m.sync_failure_report().exists());
    let _pool = PoolFile(m.unmount());
}

#[test]
fn umount_fails_when_the_server_dies_as_its_final_sync_begins() {
    let Some(m) = Mounted::unmounted("dies-in-sync") else {
        return;
    };
    let out = m.mount_dying_in_final_sync();
    assert!(out.status.success(), "mount: {}", stderr(&out));
    assert!(m.serving_note().exists(), "no note of the serving mount");
    m.write_fsynced("durable", b"fsynced before the umount");
    m.assert_umount_fails_unconfirmed();
    // Mounted again, the pool holds what was durable, and its umount succeeds.
    m.mount_again_holding("final sync", "durable", b"fsynced before the umount");
    let _pool = PoolFile(m.unmount());
}

#[test]
fn a_fuse_session_ending_in_an_error_still_syncs_and_confirms() {
    let Some(m) = Mounted::unmounted("session-error") else {
        return;
    };
    let out = m.mount_with_failpoint("mount.session-end");
    assert!(out.status.success(), "mount: {}", stderr(&out));
    m.write_fsynced("durable", b"fsynced before the umount");
    std::fs::write(m.path("written"), b"written, never fsynced").unwrap();
    // The session's error ends the server as an unmount does: the final sync runs and is
    // confirmed, so `umount` succeeds and leaves no note.
    let out = tailbound(&["umount", m.dir.to_str().unwrap()]);
    assert!(out.status.success(), "umount: {}", stderr(&out));
    assert!(!m.serving_note().exists());
    assert!(!m.sync_failure_report().exists());
    m.mount_again_holding("warning", "durable", b"fsynced before the umount");
    assert_eq!(
        std::fs::read(m.path("written")).unwrap(),
        b"written, never fsynced"
    );
    let _pool = PoolFile(m.unmount());
}

#[test]
fn umount_reports_a_panic_in_the_final_sync() {
    let Some(m) = Mounted::unmounted("sync-panics") else {
        return;
    };
    let out = m.mount_with_failpoint("mount.final-sync-panics");
    assert!(out.status.success(), "mount: {}", stderr(&out));
    m.write_fsynced("durable", b"fsynced before the umount");
    let out = tailbound(&["umount", m.dir.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success(), "umount succeeded: {err}");
    assert!(err.contains("the final sync of"), "{err}");
    assert!(err.contains("failpoint mount.final-sync-panics"), "{err}");
    assert!(!err.contains("without confirming"), "{err}");
    assert!(!m.serving_note().exists());
    assert!(!m.sync_failure_report().exists());
    // Mounted again, the pool holds what was durable, and nothing is left to warn of.
    m.mount_again_holding("warning", "durable", b"fsynced before the umount");
    let _pool = PoolFile(m.unmount());
}

#[test]
fn umount_fails_after_the_server_was_killed() {
    let Some(m) = Mounted::new("killed-umount") else {
        return;
    };
    m.write_fsynced("durable", b"fsynced before the kill");
    m.kill_server();
    m.assert_umount_fails_unconfirmed();
    let out = tailbound(&["mount", m.pool.to_str().unwrap(), m.dir.to_str().unwrap()]);
    assert!(out.status.success(), "mount again: {}", stderr(&out));
    assert_eq!(
        std::fs::read(m.path("durable")).unwrap(),
        b"fsynced before the kill"
    );
    let _pool = PoolFile(m.unmount());
}

#[test]
fn the_next_mount_warns_when_no_umount_reported_a_killed_server() {
    let Some(m) = Mounted::new("killed-remount") else {
        return;
    };
    m.write_fsynced("durable", b"fsynced before the kill");
    m.kill_server();
    // The dead mount detached without `tailbound umount`: nobody took the note.
    if common::is_root() {
        tailbound::sys::fs::unmount(&m.dir, true).unwrap();
    } else {
        let st = Command::new("fusermount3")
            .arg("-uz")
            .arg(&m.dir)
            .status()
            .unwrap();
        assert!(st.success(), "fusermount3 -uz: {st}");
    }
    assert!(
        m.serving_note().exists(),
        "the killed server's note is gone"
    );
    let out = tailbound(&["mount", m.pool.to_str().unwrap(), m.dir.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "mount again: {err}");
    assert!(
        err.contains("ended without confirming its final sync"),
        "{err}"
    );
    assert!(err.contains(m.pool.to_str().unwrap()), "{err}");
    assert_eq!(
        std::fs::read(m.path("durable")).unwrap(),
        b"fsynced before the kill"
    );
    // The note now is this mount's, removed by its confirmed final sync.
    let pool = m.unmount();
    let mut note = pool.as_os_str().to_owned();
    note.push(".serving");
    assert!(!Path::new(&note).exists());
    let _pool = PoolFile(pool);
}

#[test]
fn the_next_mount_warns_after_a_pool_server_was_killed() {
    let Some(m) = Mounted::unmounted("killed-serve") else {
        return;
    };
    ok(
        "mkfs",
        &tailbound(&["fs", "mkfs", m.pool.to_str().unwrap(), "--size", "64MiB"]),
    );
    let mut server = Command::new(env!("CARGO_BIN_EXE_tailbound"))
        .args(["serve", m.pool.to_str().unwrap(), "--foreground"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("serving "), "serve said {line:?}");
    ok(
        "mkdir",
        &tailbound(&[
            "fs",
            "mkdir",
            m.pool.to_str().unwrap(),
            "/made-while-served",
        ]),
    );
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        m.serving_note().exists(),
        "the killed server's note is gone"
    );
    let out = tailbound(&["mount", m.pool.to_str().unwrap(), m.dir.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "mount: {err}");
    assert_eq!(
        err.matches("ended without confirming its final sync")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains(&format!("pid {}", server.id())), "{err}");
    assert!(m.path("made-while-served").is_dir());
    let _pool = PoolFile(m.unmount());
}

#[test]
fn sigterm_to_the_mounts_server_syncs_what_a_client_never_synced() {
    let Some(mut m) = Mounted::new("sigterm") else {
        return;
    };
    let pool = m.pool.to_str().unwrap().to_string();
    let server = m.server_pid();
    {
        let client =
            tailbound::serve::Client::connect(&tailbound::serve::socket_path(&m.pool)).unwrap();
        let f = client
            .open_file("/unsynced", tailbound::tbfs::OpenFlags::create())
            .unwrap();
        f.pwrite(b"written, never synced by the client", 0).unwrap();
    }
    // SAFETY (of the call below): kill(2) with a pid read from /proc, of the server this test
    // started.
    assert_eq!(unsafe { libc::kill(server as i32, libc::SIGTERM) }, 0);
    let start = std::time::Instant::now();
    while Path::new(&format!("/proc/{server}")).exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir(&m.dir);
    m.dir = PathBuf::new();
    assert_eq!(
        ok("fs cat", &tailbound(&["fs", "cat", &pool, "/unsynced"])),
        "written, never synced by the client"
    );
    let _pool = PoolFile(std::mem::take(&mut m.pool));
}
