//! `tailbound run`: unmodified programs (cp, tar, find, du, sort, gzip, python3) run under the
//! LD_PRELOAD shim against a tbfs mount, and the same programs on a kernel directory, must print the
//! same and leave the same files. The mount directory does not exist on the kernel file system, so
//! nothing can reach the kernel by accident and still pass.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::mount::Mount;
use common::ok;

fn tailbound() -> &'static str {
    env!("CARGO_BIN_EXE_tailbound")
}

/// A pool in /dev/shm and a mount directory that exists nowhere on the kernel file system.
fn mount() -> Mount {
    Mount::new("run", "64M")
}

fn kernel(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e} (is it installed? .ci/run installs it)"))
}

/// Lists a tree: relative path, type, permission bits, size and a digest of the content. Run with
/// python3 (itself under the shim for the tbfs side).
const DUMP: &str = r#"
import hashlib, os, stat, sys
root = sys.argv[1]
for d, dirs, files in os.walk(root):
    for name in sorted(dirs + files):
        p = os.path.join(d, name)
        st = os.lstat(p)
        kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
        digest = ""
        if kind == "f":
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest() + " links=" + str(st.st_nlink)
        if kind == "l":
            digest = "-> " + os.readlink(p) + (" (resolves)" if os.path.exists(p) else " (dangling)")
        mode = oct(st.st_mode & 0o7777) if kind != "l" else "-"
        print(os.path.relpath(p, root), kind, mode, st.st_size if kind == "f" else "-", digest)
"#;

fn dump_kernel(dir: &Path) -> Vec<String> {
    let out = ok(
        "dump",
        &kernel("python3", &["-c", DUMP, dir.to_str().unwrap()]),
    );
    sorted(&out)
}

fn dump_mount(m: &Mount, dir: &str) -> Vec<String> {
    let out = ok("dump under the shim", &m.run("python3", &["-c", DUMP, dir]));
    sorted(&out)
}

fn sorted(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// A source tree on the kernel file system: nested directories, empty and large files, odd modes.
fn source_tree() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    let p = src.path();
    std::fs::create_dir_all(p.join("a/b/c")).unwrap();
    std::fs::create_dir_all(p.join("empty-dir")).unwrap();
    std::fs::write(p.join("a/small.txt"), "hello tailbound\n").unwrap();
    std::fs::write(p.join("a/b/empty"), "").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(p.join("a/b/c/big.bin"), &big).unwrap();
    let lines: String = (0..20_000u32)
        .map(|i| format!("{}\n", (i * 7919) % 20_000))
        .collect();
    std::fs::write(p.join("numbers.txt"), lines).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        p.join("a/small.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::os::unix::fs::symlink("small.txt", p.join("a/link-to-small")).unwrap();
    std::os::unix::fs::symlink("a/b", p.join("dir-link")).unwrap();
    std::os::unix::fs::symlink("../nowhere", p.join("a/dangling")).unwrap();
    std::fs::hard_link(p.join("numbers.txt"), p.join("a/hard-numbers")).unwrap();
    std::fs::set_permissions(p.join("a/b"), std::fs::Permissions::from_mode(0o750)).unwrap();
    src
}

#[test]
fn cp_find_and_du_see_the_same_tree_as_on_a_kernel_directory() {
    let src = source_tree();
    let s = src.path().to_str().unwrap();
    let k = tempfile::tempdir().unwrap();
    let kdst = k.path().join("copy");
    let m = mount();
    let mdst = format!("{}/copy", m.dir);

    ok(
        "cp -r (kernel)",
        &kernel("cp", &["-r", s, kdst.to_str().unwrap()]),
    );
    ok("cp -r (tbfs)", &m.run("cp", &["-r", s, &mdst]));
    let want = dump_kernel(&kdst);
    assert_eq!(want.len(), 12, "{want:?}");
    assert_eq!(dump_mount(&m, &mdst), want);

    // find: the same entries, types and sizes (readdir order differs between file systems).
    let fmt = "%P %y %m %s\n";
    let kf = ok(
        "find (kernel)",
        &kernel(
            "find",
            &[kdst.to_str().unwrap(), "-type", "f", "-printf", fmt],
        ),
    );
    let mf = ok(
        "find (tbfs)",
        &m.run("find", &[&mdst, "-type", "f", "-printf", fmt]),
    );
    assert_eq!(sorted(&mf), sorted(&kf));
    let kd = ok(
        "find dirs (kernel)",
        &kernel(
            "find",
            &[kdst.to_str().unwrap(), "-type", "d", "-printf", "%P %m\n"],
        ),
    );
    let md = ok(
        "find dirs (tbfs)",
        &m.run("find", &[&mdst, "-type", "d", "-printf", "%P %m\n"]),
    );
    assert_eq!(sorted(&md), sorted(&kd));
    let kn = ok(
        "find -name (kernel)",
        &kernel(
            "find",
            &[kdst.to_str().unwrap(), "-name", "*.bin", "-printf", "%P\n"],
        ),
    );
    let mn = ok(
        "find -name (tbfs)",
        &m.run("find", &[&mdst, "-name", "*.bin", "-printf", "%P\n"]),
    );
    assert_eq!(mn, kn);
    assert_eq!(mn, "a/b/c/big.bin\n");

    // du: inode counts per directory are the same on any file system; so are file sizes.
    let strip_k = |s: &str| s.replace(kdst.to_str().unwrap(), "ROOT");
    let strip_m = |s: &str| s.replace(&mdst, "ROOT");
    let ki = ok(
        "du --inodes (kernel)",
        &kernel("du", &["--inodes", "-a", kdst.to_str().unwrap()]),
    );
    let mi = ok(
        "du --inodes (tbfs)",
        &m.run("du", &["--inodes", "-a", &mdst]),
    );
    assert_eq!(sorted(&strip_m(&mi)), sorted(&strip_k(&ki)));
    let kb = ok(
        "du -ab (kernel)",
        &kernel(
            "du",
            &[
                "-ab",
                kdst.join("a/b/c/big.bin").to_str().unwrap(),
                kdst.join("numbers.txt").to_str().unwrap(),
            ],
        ),
    );
    let mb = ok(
        "du -ab (tbfs)",
        &m.run(
            "du",
            &[
                "-ab",
                &format!("{mdst}/a/b/c/big.bin"),
                &format!("{mdst}/numbers.txt"),
            ],
        ),
    );
    assert_eq!(strip_m(&mb), strip_k(&kb));
    // Block usage: the 3 MB file takes at least its size in blocks.
    let mk = ok(
        "du -k (tbfs)",
        &m.run("du", &["-k", &format!("{mdst}/a/b/c/big.bin")]),
    );
    let kib: u64 = mk.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        kib >= 3_000_000 / 1024,
        "du -k says {kib} KiB for a 3 MB file"
    );
}

#[test]
fn tar_creates_and_extracts_in_the_pool_like_on_a_kernel_directory() {
    let src = source_tree();
    let s = src.path().to_str().unwrap();
    let k = tempfile::tempdir().unwrap();
    let m = mount();
    let ktar = k.path().join("a.tar");
    let mtar = format!("{}/a.tar", m.dir);
    // --mtime and --owner make the archives comparable byte for byte.
    let fixed = [
        "--mtime=2020-01-01 00:00:00",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--sort=name",
    ];
    let mut kargs = vec!["-cf", ktar.to_str().unwrap(), "-C", s];
    kargs.extend(fixed);
    kargs.push(".");
    let mut margs = vec!["-cf", mtar.as_str(), "-C", s];
    margs.extend(fixed);
    margs.push(".");
    ok("tar -c (kernel)", &kernel("tar", &kargs));
    ok("tar -c (tbfs)", &m.run("tar", &margs));
    let kl = ok(
        "tar -t (kernel)",
        &kernel("tar", &["-tvf", ktar.to_str().unwrap()]),
    );
    let ml = ok("tar -t (tbfs)", &m.run("tar", &["-tvf", &mtar]));
    assert_eq!(ml, kl);
    let dump_py =
        "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())";
    let kh = ok(
        "hash (kernel)",
        &kernel("python3", &["-c", dump_py, ktar.to_str().unwrap()]),
    );
    let mh = ok("hash (tbfs)", &m.run("python3", &["-c", dump_py, &mtar]));
    assert_eq!(mh, kh, "the archives differ");

    // Extract the archive made in the pool into the pool, and the kernel's on the kernel.
    let kx = k.path().join("x");
    std::fs::create_dir(&kx).unwrap();
    ok(
        "tar -x (kernel)",
        &kernel(
            "tar",
            &["-xf", ktar.to_str().unwrap(), "-C", kx.to_str().unwrap()],
        ),
    );
    let mx = format!("{}/x", m.dir);
    ok("mkdir (tbfs)", &m.run("mkdir", &[&mx]));
    ok("tar -x (tbfs)", &m.run("tar", &["-xf", &mtar, "-C", &mx]));
    assert_eq!(dump_mount(&m, &mx), dump_kernel(&kx));
    // tar restored the archive's modification time through utimensat.
    let mt = ok(
        "stat (tbfs)",
        &m.run("stat", &["-c", "%Y", &format!("{mx}/a/small.txt")]),
    );
    assert_eq!(mt.trim(), "1577836800");
}

#[test]
fn sort_and_gzip_write_the_same_bytes_as_on_a_kernel_directory() {
    let src = source_tree();
    let input = src.path().join("numbers.txt");
    let k = tempfile::tempdir().unwrap();
    let m = mount();
    ok(
        "cp (tbfs)",
        &m.run(
            "cp",
            &[input.to_str().unwrap(), &format!("{}/numbers.txt", m.dir)],
        ),
    );

    // sort -o: the output file is opened, moved to standard output and written with stdio.
    let kout = k.path().join("sorted");
    ok(
        "sort (kernel)",
        &kernel(
            "sort",
            &["-n", input.to_str().unwrap(), "-o", kout.to_str().unwrap()],
        ),
    );
    let mout = format!("{}/sorted", m.dir);
    ok(
        "sort (tbfs)",
        &m.run(
            "sort",
            &["-n", &format!("{}/numbers.txt", m.dir), "-o", &mout],
        ),
    );
    // sort reading from the pool and writing to standard output.
    let printed = ok(
        "sort to stdout (tbfs)",
        &m.run("sort", &["-rn", &format!("{}/numbers.txt", m.dir)]),
    );
    let kprinted = ok(
        "sort to stdout (kernel)",
        &kernel("sort", &["-rn", input.to_str().unwrap()]),
    );
    assert_eq!(printed, kprinted);

    // gzip -n (no name or time in the header) compresses to the same bytes; -d restores them.
    std::fs::copy(&kout, k.path().join("z")).unwrap();
    ok(
        "gzip (kernel)",
        &kernel("gzip", &["-n", "-k", k.path().join("z").to_str().unwrap()]),
    );
    ok("cp (tbfs)", &m.run("cp", &[&mout, &format!("{}/z", m.dir)]));
    ok(
        "gzip (tbfs)",
        &m.run("gzip", &["-n", "-k", &format!("{}/z", m.dir)]),
    );
    ok(
        "gzip -d (tbfs)",
        &m.run("gzip", &["-d", "-c", &format!("{}/z.gz", m.dir)]),
    );
    let got = dump_mount(&m, &m.dir);
    let want = dump_kernel(k.path());
    let pick = |v: &[String], name: &str| {
        v.iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .cloned()
    };
    for name in ["sorted", "z", "z.gz"] {
        assert!(
            pick(&want, name).is_some(),
            "{name} missing on the kernel side"
        );
        assert_eq!(pick(&got, name), pick(&want, name), "{name}");
    }
    let back = ok(
        "gzip -dc (tbfs)",
        &m.run("gzip", &["-d", "-c", &format!("{}/z.gz", m.dir)]),
    );
    assert_eq!(back.as_bytes(), std::fs::read(&kout).unwrap());
}

/// File I/O, os.walk, shutil.copytree, tempfile, chdir/getcwd, stdio, and sqlite3 with a rollback
/// journal and in WAL mode (mmap of the -shm file, fcntl locks).
const PY: &str = r#"
import os, shutil, sqlite3, sys, tempfile
R = sys.argv[1]
os.makedirs(R + "/a/b", exist_ok=True)
with open(R + "/a/b/f.txt", "w") as f:
    for i in range(5000):
        f.write(f"line {i}\n")
with open(R + "/a/b/f.txt", "a") as f:
    f.write("appended\n")
with open(R + "/a/b/f.txt", "r+b") as f:
    f.seek(5)
    f.write(b"X")
    f.seek(0, 2)
    print("size", f.tell())
print(open(R + "/a/b/f.txt").read().splitlines()[-2:])
shutil.copytree(R + "/a", R + "/copy")
for root, dirs, files in os.walk(R):
    dirs.sort()
    print(os.path.relpath(root, R), sorted(dirs), sorted(f for f in files if not f.startswith("tmp")))
with tempfile.NamedTemporaryFile(dir=R, delete=False, suffix=".tmp") as t:
    t.write(b"x" * 12345)
print("temp", os.path.getsize(t.name), os.path.dirname(t.name) == R)
os.rename(t.name, R + "/renamed")
os.chdir(R + "/a")
print("cwd", os.path.relpath(os.getcwd(), R), os.listdir("."), os.path.exists("b/f.txt"))
os.chdir("/")
fd = os.open(R + "/gone", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"still readable")
os.unlink(R + "/gone")
os.lseek(fd, 0, 0)
print("unlinked", os.read(fd, 100), os.path.exists(R + "/gone"))
os.close(fd)
for mode in ["DELETE", "WAL"]:
    db = sqlite3.connect(R + f"/db-{mode}.sqlite")
    print(mode, db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0])
    db.execute("create table t(x integer, s text)")
    db.executemany("insert into t values(?, ?)", [(i, "v" * (i % 50)) for i in range(3000)])
    db.commit()
    db.execute("delete from t where x % 2 = 0")
    db.rollback()
    db.execute("update t set s = 'w' where x < 10")
    db.commit()
    print(mode, db.execute("select count(*), sum(x), sum(length(s)) from t").fetchone())
    db.close()
    db = sqlite3.connect(R + f"/db-{mode}.sqlite")
    print(mode, "reopened", db.execute("select count(*) from t").fetchone())
    print(mode, "integrity", db.execute("pragma integrity_check").fetchone()[0])
    db.close()
print(sorted(os.listdir(R)))
"#;

#[test]
fn python_file_io_walk_copytree_tempfile_and_sqlite_match_a_kernel_directory() {
    let k = tempfile::tempdir().unwrap();
    let m = mount();
    let kout = ok(
        "python3 (kernel)",
        &kernel("python3", &["-c", PY, k.path().to_str().unwrap()]),
    );
    let mout = ok("python3 (tbfs)", &m.run("python3", &["-c", PY, &m.dir]));
    assert!(
        kout.contains("WAL wal") && kout.contains("integrity ok"),
        "{kout}"
    );
    assert_eq!(mout, kout);
    // The databases, read back by a second run (a new process opening the pool again).
    let want = dump_kernel(k.path());
    let got = dump_mount(&m, &m.dir);
    let files = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|l| !l.starts_with("db-"))
            .cloned()
            .collect()
    };
    assert_eq!(files(&got), files(&want));
    let check = "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); print(d.execute('select count(*), sum(x) from t').fetchone())";
    for db in ["db-DELETE.sqlite", "db-WAL.sqlite"] {
        let kc = ok(
            "sqlite (kernel)",
            &kernel(
                "python3",
                &["-c", check, k.path().join(db).to_str().unwrap()],
            ),
        );
        let mc = ok(
            "sqlite (tbfs)",
            &m.run("python3", &["-c", check, &format!("{}/{db}", m.dir)]),
        );
        assert_eq!(mc, kc);
        assert_eq!(mc, "(3000, 4498500)\n");
    }
}

#[test]
fn the_program_gets_a_high_heap_trim_threshold_unless_it_chose_one() {
    let m = mount();
    let tunables = |own: Option<&str>| {
        let mut cmd = m.command("sh", &["-c", "echo \"$GLIBC_TUNABLES\""]);
        cmd.env_remove("GLIBC_TUNABLES");
        if let Some(own) = own {
            cmd.env("GLIBC_TUNABLES", own);
        }
        ok("sh", &cmd.output().expect("running tailbound run"))
    };
    assert_eq!(tunables(None), "glibc.malloc.trim_threshold=268435456\n");
    assert_eq!(
        tunables(Some("glibc.malloc.trim_threshold=4096")),
        "glibc.malloc.trim_threshold=4096\n"
    );
}

#[test]
fn the_exit_status_is_passed_through_and_a_missing_pool_is_created() {
    let m = mount();
    assert!(!m.pool.exists());
    let out = m.run("sh", &["-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert!(m.pool.exists(), "the pool was not created");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("created a 64 MiB memory pool"), "{err}");
    // The server `run` starts keeps its note beside the pool while the program runs, and
    // removes it once its final sync is confirmed, before `run` returns.
    let mut note = m.pool.as_os_str().to_owned();
    note.push(".serving");
    let note = note.into_string().unwrap();
    let out = m.run("sh", &["-c", &format!("test -s {note}")]);
    assert!(out.status.success(), "no note while the server serves");
    assert!(!Path::new(&note).exists(), "the server's note stayed");
    // With --private the pool is the program's process's alone: a forked child sees EACCES.
    let out = m.run_with(
        &["--private"],
        "python3",
        &["-c", &format!(
            "import os\nopen('{d}/f','w').write('x')\npid=os.fork()\nif pid==0:\n  try:\n    open('{d}/f')\n    os._exit(1)\n  except PermissionError:\n    os._exit(0)\n_,st=os.waitpid(pid,0)\nprint(os.waitstatus_to_exitcode(st), open('{d}/f').read())",
            d = m.dir
        )],
    );
    assert_eq!(ok("fork", &out), "0 x\n");
    // So does a program a child execs while the shell holds the pool open: the new image
    // cannot open it in-process either.
    let out = m.run_with(
        &["--private"],
        "sh",
        &[
            "-c",
            &format!("exec 3<{d}/f; cat {d}/f 2>&1; true", d = m.dir),
        ],
    );
    let said = ok("exec under --private", &out);
    assert!(said.contains("Permission denied"), "{said}");
}

/// Where a server of `pool` leaves a note (`.serving`, `.sync-failed`).
fn note(pool: &Path, suffix: &str) -> std::path::PathBuf {
    let mut p = pool.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

/// A child process killed if a test ends before it does.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn private_runs_warn_once_of_a_dead_server_and_leave_a_live_ones_pool_to_it() {
    let m = mount();
    ok("create", &m.run("true", &[]));
    // The notes of a server killed after its final sync failed: nothing holds the pool.
    std::fs::write(
        note(&m.pool, ".serving"),
        "pid 4194999, serving on gone.sock\n",
    )
    .unwrap();
    std::fs::write(note(&m.pool, ".sync-failed"), "fsync: EIO (test)").unwrap();
    let write = format!("echo x > {}/f", m.dir);
    let out = m.run_with(&["--private"], "sh", &["-c", &write]);
    ok("private run", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("ended without confirming its final sync")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("pid 4194999"), "{err}");
    assert!(err.contains("fsync: EIO (test)"), "{err}");
    assert!(!note(&m.pool, ".serving").exists() && !note(&m.pool, ".sync-failed").exists());
    let out = m.run_with(&["--private"], "cat", &[&format!("{}/f", m.dir)]);
    assert_eq!(ok("private run", &out), "x\n");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{out:?}"
    );

    // A live server keeps the pool and its note: the private program is refused, as before.
    let mut server = Child(
        Command::new(tailbound())
            .args(["serve", m.pool.to_str().unwrap(), "--foreground"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("serving "), "{line:?}");
    let served = std::fs::read_to_string(note(&m.pool, ".serving")).unwrap();
    let out = m.run_with(&["--private"], "cat", &[&format!("{}/f", m.dir)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(err.contains("pool lock"), "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(
        std::fs::read_to_string(note(&m.pool, ".serving")).unwrap(),
        served
    );
    // SAFETY (of the call below): kill(2) of the server this test started, still its child.
    assert_eq!(
        unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) },
        0
    );
    assert!(server.0.wait().unwrap().success());
    assert!(!note(&m.pool, ".serving").exists());
}

#[test]
fn catch_all_serves_raw_system_calls_and_python_still_matches_a_kernel_directory() {
    let m = mount();
    // openat (257), write (1), close (3) as raw system calls: no symbol hook sees them.
    let raw = format!(
        "import ctypes\nl=ctypes.CDLL(None,use_errno=True)\nl.syscall.restype=ctypes.c_long\n\
         fd=l.syscall(257,-100,b'{d}/raw',0o102,0o644)\nassert fd>=0,ctypes.get_errno()\n\
         assert l.syscall(1,fd,b'raw bytes',9)==9\nassert l.syscall(3,fd)==0\n\
         print(open('{d}/raw').read())",
        d = m.dir
    );
    let out = m.run_with(&["--catch-all"], "python3", &["-c", &raw]);
    assert_eq!(ok("raw system calls (catch-all)", &out), "raw bytes\n");
    // Without the mode the raw openat reaches the kernel, where the directory does not exist
    // (errno 2, ENOENT).
    let out = m.run("python3", &["-c", &raw]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("AssertionError: 2\n"),
        "{err}"
    );
    // A whole program (threads, signals, sqlite) behaves the same under the mode.
    let k = tempfile::tempdir().unwrap();
    let kout = ok(
        "python3 (kernel)",
        &kernel("python3", &["-c", PY, k.path().to_str().unwrap()]),
    );
    let m = mount();
    let mout = ok(
        "python3 (tbfs, catch-all)",
        &m.run_with(&["--catch-all"], "python3", &["-c", PY, &m.dir]),
    );
    assert_eq!(mout, kout);
}

#[test]
fn a_file_pool_behind_the_io_scheduler_keeps_what_cp_wrote_across_runs() {
    let src = source_tree();
    let k = tempfile::tempdir().unwrap();
    let kcopy = k.path().join("copy");
    ok(
        "cp -r (kernel)",
        &kernel(
            "cp",
            &["-r", src.path().to_str().unwrap(), kcopy.to_str().unwrap()],
        ),
    );
    // A file pool (O_DIRECT through io_uring, every request through tailbound's scheduler) on the
    // disk, not in /dev/shm.
    let m = Mount::new_in("/var/tmp", "run-file", "64M");
    let mcopy = format!("{}/copy", m.dir);
    ok(
        "cp -r (tbfs file pool)",
        &m.run_with(
            &["--backend", "file"],
            "cp",
            &["-r", src.path().to_str().unwrap(), &mcopy],
        ),
    );
    // A second process opens the pool again and reads everything back.
    let out = ok(
        "dump under the shim (file pool)",
        &m.run_with(&["--backend", "file"], "python3", &["-c", DUMP, &mcopy]),
    );
    assert_eq!(sorted(&out), dump_kernel(&kcopy));
}

/// Fills the pool it is given with fsync'd files of mixed sizes, each file's bytes derived from its
/// name, until a write fails; the failure must be ENOSPC. Writes the list of files it wrote to a
/// kernel file.
const FILL: &str = r#"
import errno, hashlib, os, random, sys
root, listing = sys.argv[1], sys.argv[2]
rng = random.Random(7)
def content(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]
os.makedirs(root + "/fill", exist_ok=True)
written = []
# Mixed sizes until the first ENOSPC, then small files until the pool takes no more.
for sizes in ([4096, 12288, 65536, 300000, 2 << 20, 7 << 20], [4096]):
    try:
        for i in range(len(written), 100000):
            size = rng.choice(sizes)
            name = f"{root}/fill/f{i}"
            with open(name, "wb") as f:
                f.write(content(name, size))
                f.flush()
                os.fsync(f.fileno())
            written.append(f"{name} {size}")
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    else:
        sys.exit("the pool never filled")
open(listing, "w").write("\n".join(written))
print(len(written))
"#;

/// Reads back every file FILL acknowledged, deletes every other one, and writes a new file in the
/// room that makes.
const AFTER_FULL: &str = r#"
import hashlib, os, sys
root, listing = sys.argv[1], sys.argv[2]
def content(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]
files = [(n, int(s)) for n, s in (l.split() for l in open(listing).read().splitlines())]
for name, size in files:
    assert open(name, "rb").read() == content(name, size), name
for name, _ in files[1::2]:
    os.unlink(name)
new = root + "/after-deletes"
with open(new, "wb") as f:
    f.write(content(new, 1 << 20))
    os.fsync(f.fileno())
for name, size in files[::2]:
    assert open(name, "rb").read() == content(name, size), name
assert open(new, "rb").read() == content(new, 1 << 20)
print("ok")
"#;

#[test]
fn programs_that_fill_a_pool_get_enospc_and_the_pool_stays_usable() {
    // Unmodified programs fill a 256 MiB pool: python's writes end in ENOSPC, tar's report "No
    // space left on device" (never an I/O error: the pool is not poisoned), everything that was
    // acknowledged reads back, deletes make room for new writes, and fsck finds the pool clean.
    let m = mount();
    let k = tempfile::tempdir().unwrap();
    let listing = k.path().join("written");
    let listing = listing.to_str().unwrap();
    let size = ["--pool-size", "256M"];
    let filled = ok(
        "fill",
        &m.run_with(&size, "python3", &["-c", FILL, &m.dir, listing]),
    );
    assert!(filled.trim().parse::<u32>().unwrap() > 0, "{filled}");

    // The cleaner may find room again once the writes stop: tar extracts until it, too, is
    // told the pool is full.
    let src = source_tree();
    let archive = k.path().join("src.tar");
    ok(
        "tar -c (kernel)",
        &kernel(
            "tar",
            &[
                "-cf",
                archive.to_str().unwrap(),
                "-C",
                src.path().to_str().unwrap(),
                ".",
            ],
        ),
    );
    let refused = (0..200)
        .map(|i| {
            let x = format!("{}/x{i}", m.dir);
            let mkdir = m.run("mkdir", &[&x]);
            if !mkdir.status.success() {
                return mkdir;
            }
            m.run("tar", &["-xf", archive.to_str().unwrap(), "-C", &x])
        })
        .find(|out| !out.status.success())
        .expect("tar filled the pool");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!err.contains("Input/output error"), "{err}");

    let after = ok(
        "read back, delete, write",
        &m.run("python3", &["-c", AFTER_FULL, &m.dir, listing]),
    );
    assert_eq!(after.trim(), "ok");
    let fsck = Command::new(tailbound())
        .args(["fs", "fsck"])
        .arg(&m.pool)
        .output()
        .unwrap();
    ok("fsck", &fsck);
}

#[test]
fn fifos_join_processes_of_separate_runs_and_device_nodes_open_the_device() {
    let m = mount();
    let fifo = format!("{}/pipe", m.dir);
    ok("mkfifo", &m.run("mkfifo", &[&fifo]));
    // The writer blocks in its open until a reader opens the same pipe from another `run`.
    let writer = m
        .command("sh", &["-c", &format!("echo through-the-pipe > {fifo}")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the writer");
    let read = m.run("cat", &[&fifo]);
    let wrote = writer.wait_with_output().unwrap();
    ok("the writer", &wrote);
    assert_eq!(ok("cat of the FIFO", &read), "through-the-pipe\n");
    let listed = ok("ls -l", &m.run("ls", &["-l", &fifo]));
    assert!(listed.starts_with('p'), "not a FIFO in the pool: {listed}");
    // What went through the pipe was never stored in the pool's node.
    let size = ok("stat", &m.run("stat", &["-c", "%s", &fifo]));
    assert_eq!(size.trim(), "0");
    for out in [&read, &wrote] {
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !said.contains("in use"),
            "the run that lost the race to start the server says so: {said}"
        );
    }

    // A device node is the device (here /dev/zero and /dev/null); making one takes root, as on
    // the kernel.
    let script = format!(
        "cd {d} && mknod zero c 1 5 && mknod null c 1 3 && echo gone > null && \
         head -c 3 zero | od -An -tx1 && wc -c < null",
        d = m.dir
    );
    let out = m.run("sh", &["-c", &script]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let text = ok("device nodes", &out);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words, ["00", "00", "00", "0"], "{text}");
    } else {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
            "mknod of a device by a user must be refused"
        );
    }
    let fifos = tailbound::serve::fifo_dir(&m.pool);
    assert!(
        !fifos.exists(),
        "the server leaves {} behind",
        fifos.display()
    );
}

/// A store through a shared mapping, then an `O_TRUNC` open by another process.
const MAPPED_THEN_TRUNCATED: &str = r#"
import mmap, os, subprocess, sys
f = sys.argv[1] + "/mapped"
fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
m[0:5] = b"hello"
print(subprocess.run(["head", "-c", "5", f], capture_output=True, check=True).stdout.decode())
subprocess.run(["sh", "-c", ": > " + f], check=True)
print(os.fstat(fd).st_size, os.stat(f).st_size)
m.close()
"#;

#[test]
fn an_o_trunc_open_by_another_process_truncates_a_mapped_file() {
    let m = mount();
    let out = ok(
        "python3",
        &m.run("python3", &["-c", MAPPED_THEN_TRUNCATED, &m.dir]),
    );
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words, ["hello", "0", "0"], "{out}");
    let size = ok(
        "stat",
        &m.run("stat", &["-c", "%s", &format!("{}/mapped", m.dir)]),
    );
    assert_eq!(size.trim(), "0", "the pool's file after the program");
}

#[test]
fn run_without_the_shim_library_makes_and_serves_no_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pool = dir.join("p.pool");
    let out = Command::new(tailbound())
        .env("TAILBOUND_PRELOAD", dir.join("missing.so"))
        .args(["run", "--mount", &format!("/m={}", pool.display())])
        .args(["--pool-size", "64M", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let made = pool.exists() || tailbound::serve::socket_path(&pool).exists();
    assert!(!out.status.success(), "run succeeded without its library");
    assert!(err.contains("TAILBOUND_PRELOAD"), "{err}");
    assert!(
        !made,
        "a pool or its server's socket was made for a program that cannot run: {err}"
    );
}
