//! `tailbound run` across processes: the shim as a client of the pool's server. Shells with
//! pipes and subshells, fork sharing an open file description, exec keeping a descriptor,
//! Python's `subprocess` and `multiprocessing`, and two unrelated runs on one tree. The mount
//! directory exists nowhere on the kernel file system, so nothing can reach the kernel by
//! accident and still pass.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::mount::Mount;
use common::ok;

fn tailbound() -> &'static str {
    env!("CARGO_BIN_EXE_tailbound")
}

fn mount() -> Mount {
    Mount::new("procs", "64M")
}

/// Runs a Python program (from a file on the kernel's file system, so that `multiprocessing`'s
/// spawned workers can import its functions) with `MNT` the mount.
fn python(m: &Mount, script: &str) -> String {
    let file = tempfile::Builder::new()
        .suffix(".py")
        .tempfile()
        .expect("a script file");
    std::fs::write(file.path(), script.replace("MNT", &m.dir)).expect("writing the script");
    let path = file.path().display().to_string();
    ok("python3", &m.run("python3", &[&path]))
}

/// Every process `run` started is gone, and the pool is consistent.
fn fsck_clean(m: &Mount) {
    let out = Command::new(tailbound())
        .args(["fs", "fsck"])
        .arg(&m.pool)
        .output()
        .expect("running tailbound fs fsck");
    ok("fsck", &out);
    assert!(
        !Path::new(&format!("{}.sock", m.pool.display())).exists(),
        "the server run started is still there"
    );
}

#[test]
fn a_shell_script_with_pipes_subshells_and_redirections_works_in_the_mount() {
    let m = mount();
    let script = format!(
        "set -e; cd {d}; mkdir sub; echo hello > a; cat a | tr a-z A-Z > b; \
         (cd sub && echo inner > c && ls); cat b sub/c; echo second >> a; wc -l < a; \
         /bin/pwd; ls | sort; for i in 1 2 3; do echo $i; done | sort -r | head -2 > sub/d; \
         cat sub/d; (echo from-subshell) > e; cat e; x=$(cat a | head -1); echo got $x",
        d = m.dir
    );
    let out = ok("sh", &m.run("sh", &["-c", &script]));
    let want = format!(
        "c\nHELLO\ninner\n2\n{d}\na\nb\nsub\n3\n2\nfrom-subshell\ngot hello\n",
        d = m.dir
    );
    assert_eq!(out, want);
    fsck_clean(&m);
    // The files are in the pool for a later run.
    let again = ok("cat", &m.run("cat", &[&format!("{}/b", m.dir)]));
    assert_eq!(again, "HELLO\n");
}

#[test]
fn a_fork_child_and_its_parent_share_an_offset_and_exec_keeps_an_inherited_descriptor() {
    let m = mount();
    let out = python(
        &m,
        r#"
import os, sys
fd = os.open("MNT/shared", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"parent1\n")
pid = os.fork()
if pid == 0:
    # The child writes at the offset the parent left, and moves it for the parent.
    os.write(fd, b"child\n")
    os._exit(0)
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0
os.write(fd, b"parent2\n")
print(os.lseek(fd, 0, os.SEEK_CUR))
os.lseek(fd, 0, os.SEEK_SET)
# A child that reads moves the shared offset too.
pid = os.fork()
if pid == 0:
    os.read(fd, 8)
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(fd, 100).decode().strip())
# exec: a descriptor without close-on-exec stays, with its offset; a close-on-exec one goes.
keep = os.open("MNT/kept", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
gone = os.open("MNT/gone", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.set_inheritable(keep, True)
os.write(keep, b"before exec\n")
os.chdir("MNT")
pid = os.fork()
if pid == 0:
    code = (
        "import os, fcntl\n"
        f"os.write({keep}, b'after exec\\n')\n"
        f"print(fcntl.fcntl({keep}, fcntl.F_GETFL) & os.O_APPEND != 0)\n"
        "try:\n"
        f"    os.write({gone}, b'x')\n"
        "    print('gone still open')\n"
        "except OSError as e:\n"
        "    print('gone', e.errno == 9)\n"
        "print(os.getcwd(), open('kept').read().split())\n"
    )
    os.execv(sys.executable, [sys.executable, "-c", code])
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0
print(open("MNT/kept").read().strip().split("\n"))
# Parent and child writing at once through one description: each write lands at the shared
# offset and moves it, so none overwrites another.
both = os.open("MNT/both", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
pid = os.fork()
who = b"c" if pid == 0 else b"p"
for i in range(300):
    os.write(both, who + b"%d\n" % i)
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
lines = open("MNT/both").read().split()
print(len(lines), len(set(lines)))
"#,
    );
    let want = format!(
        "22\nchild\nparent2\nTrue\ngone True\n{d} ['before', 'exec', 'after', 'exec']\n\
         ['before exec', 'after exec']\n600 600\n",
        d = m.dir
    );
    assert_eq!(out, want);
    fsck_clean(&m);
}

/// A description this process opened keeps its offset in the process until it is handed to
/// another one; the hand-over (fork, a spawn's exec) gives the offset to the server first, so
/// the other process starts where this one was, and this one sees what the other moved.
#[test]
fn an_offset_kept_in_the_process_is_handed_over_at_fork_and_spawn() {
    let m = mount();
    let out = python(
        &m,
        r#"
import os, subprocess, sys
def say(*a):
    print(*a, flush=True)
fd = os.open("MNT/f", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"0123456789")
os.lseek(fd, 4, os.SEEK_SET)
say(os.read(fd, 2).decode())
dup = os.dup(fd)
say(os.lseek(dup, 0, os.SEEK_CUR))
pid = os.fork()
if pid == 0:
    say("child", os.lseek(fd, 0, os.SEEK_CUR), os.read(dup, 2).decode())
    os._exit(0)
os.waitpid(pid, 0)
say(os.lseek(fd, 0, os.SEEK_CUR), os.read(fd, 1).decode())
# Past the end, then a spawned program (fork and exec) writes there.
g = os.open("MNT/g", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(g, b"abcdef")
os.lseek(g, 2, os.SEEK_END)
code = f"import os; os.write({g}, b'X'); print(os.lseek({g}, 0, os.SEEK_CUR), flush=True)"
subprocess.run([sys.executable, "-c", code], pass_fds=[g], check=True)
say(os.lseek(g, 0, os.SEEK_CUR), open("MNT/g", "rb").read())
# An append-only description: its offset follows the end, here and after the hand-over.
a = os.open("MNT/a", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
os.write(a, b"one ")
say(os.lseek(a, 0, os.SEEK_CUR))
pid = os.fork()
if pid == 0:
    os.write(a, b"two ")
    os._exit(0)
os.waitpid(pid, 0)
os.write(a, b"three")
say(os.lseek(a, 0, os.SEEK_CUR), open("MNT/a").read())
"#,
    );
    assert_eq!(
        out,
        "45\n6\nchild 6 67\n8 8\n9\n9 b'abcdef\\x00\\x00X'\n4\n13 one two three\n"
    );
    fsck_clean(&m);
}

#[test]
fn python_subprocess_system_and_multiprocessing_work_on_the_mount() {
    let m = mount();
    let out = python(
        &m,
        r#"
import os, subprocess, multiprocessing

def work(i):
    with open(f"MNT/w/{i}", "w") as f:
        f.write(str(i * i))
    return sorted(os.listdir("MNT/w")).count(str(i))

if __name__ == "__main__":
    os.makedirs("MNT/w")
    os.chdir("MNT")
    with open("log", "w") as log:
        subprocess.run(["sh", "-c", "echo from-sh; ls"], stdout=log, check=True)
    print(open("log").read().split())
    print(subprocess.check_output("cat log | wc -l", shell=True).decode().strip())
    # system() runs its shell in the working directory, which is in the mount.
    print(os.system("echo via-system > sysout"), open("sysout").read().strip())
    for method in ("fork", "spawn"):
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(3) as p:
            print(method, p.map(work, range(6)))
    print(sorted(int(open(f"w/{n}").read()) for n in os.listdir("w")))
"#,
    );
    assert_eq!(
        out,
        "['from-sh', 'log', 'w']\n3\n0 via-system\nfork [1, 1, 1, 1, 1, 1]\nspawn [1, 1, 1, 1, 1, 1]\n\
         [0, 1, 4, 9, 16, 25]\n"
    );
    fsck_clean(&m);
}

#[test]
fn two_unrelated_runs_share_the_tree() {
    let m = mount();
    // The first run starts the server and waits on its stdin while the second works.
    let first = format!(
        "import sys\nopen('{d}/from-a','w').write('a')\nprint('ready', flush=True)\n\
         sys.stdin.read()\nprint(open('{d}/from-b').read())",
        d = m.dir
    );
    let mut a = m
        .command("python3", &["-c", &first])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the first run");
    let mut lines = BufReader::new(a.stdout.take().expect("stdout"));
    let mut line = String::new();
    lines.read_line(&mut line).expect("reading the first run");
    assert_eq!(line, "ready\n");
    let second = format!(
        "cat {d}/from-a > {d}/from-b; echo b >> {d}/from-b; cat {d}/from-b",
        d = m.dir
    );
    let b = ok("the second run", &m.run("sh", &["-c", &second]));
    assert_eq!(b, "ab\n");
    drop(a.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut lines, &mut rest).expect("reading the first run");
    assert!(a.wait().expect("the first run").success());
    assert_eq!(rest, "ab\n\n");
    fsck_clean(&m);
}

#[test]
fn locks_follow_the_kernels_rules_across_fork() {
    let m = mount();
    let out = python(
        &m,
        r#"
import os, fcntl
fd = os.open("MNT/lockme", os.O_RDWR | os.O_CREAT, 0o644)
# A POSIX lock is the process's: a forked child does not hold it and conflicts with it.
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
pid = os.fork()
if pid == 0:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os._exit(1)
    except OSError:
        os._exit(0)
_, st = os.waitpid(pid, 0)
print("posix", os.waitstatus_to_exitcode(st))
fcntl.lockf(fd, fcntl.LOCK_UN)
# Closing any descriptor of the file drops the process's POSIX locks, even one that leaves the
# description open (a dup).
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.close(os.dup(fd))
pid = os.fork()
if pid == 0:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os._exit(0)
    except OSError:
        os._exit(1)
_, st = os.waitpid(pid, 0)
print("dup closed", os.waitstatus_to_exitcode(st))
# flock is the description's: the child shares it and may release it for the parent.
fcntl.flock(fd, fcntl.LOCK_EX)
pid = os.fork()
if pid == 0:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os._exit(0)
_, st = os.waitpid(pid, 0)
print("flock", os.waitstatus_to_exitcode(st))
other = os.open("MNT/lockme", os.O_RDWR)
fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("released")
"#,
    );
    assert_eq!(out, "posix 0\ndup closed 0\nflock 0\nreleased\n");
    fsck_clean(&m);
}

/// A client killed with `SIGKILL` in the middle of writes, renames and held locks costs
/// nothing: the server frees its locks (the next client's blocking lock is granted), every
/// write it was told had landed is there, and the pool checks clean.
#[test]
fn clients_killed_mid_write_rename_and_lock_leave_no_locks_and_lose_nothing() {
    let m = mount();
    // `run` makes the pool; then a server of its own, which outlives every killed client.
    ok("making the pool", &m.run("true", &[]));
    let mut server = Command::new(tailbound())
        .args(["serve", "--foreground"])
        .arg(&m.pool)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the server");
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server's first line");
    assert!(line.starts_with("serving "), "{line}");
    let victim = r#"
import os, sys, fcntl
i = sys.argv[1]
lock = os.open("MNT/lock", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(lock, fcntl.LOCK_EX)
fcntl.lockf(lock, fcntl.LOCK_EX)
log = os.open("MNT/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = 0
while True:
    os.write(log, f"{i}.{n}\n".encode())
    print(f"{i}.{n}", flush=True)
    with open(f"MNT/tmp.{i}", "w") as f:
        f.write(str(n))
    os.rename(f"MNT/tmp.{i}", f"MNT/cur.{i}")
    n += 1
"#;
    let file = tempfile::Builder::new()
        .suffix(".py")
        .tempfile()
        .expect("a script file");
    std::fs::write(file.path(), victim.replace("MNT", &m.dir)).expect("writing the script");
    let mut acked = Vec::new();
    for i in 0..20 {
        let mut run = m
            .command(
                "python3",
                &[&file.path().display().to_string(), &i.to_string()],
            )
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting a client");
        let mut out = BufReader::new(run.stdout.take().expect("stdout"));
        // Killed after a varying number of acknowledged writes, in the middle of the loop.
        for _ in 0..=(i % 7) {
            let mut l = String::new();
            out.read_line(&mut l).expect("a client's line");
            acked.push(l.trim().to_string());
        }
        let client = Command::new("pgrep")
            .args(["-P", &run.id().to_string(), "python3"])
            .output()
            .expect("pgrep");
        let pid = String::from_utf8_lossy(&client.stdout).trim().to_string();
        assert!(!pid.is_empty(), "the client's process");
        ok(
            "kill",
            &Command::new("kill").args(["-9", &pid]).output().unwrap(),
        );
        let _ = run.wait();
        // Blocking: granted once the server has freed the killed client's locks.
        let check = "import fcntl, os\nfd = os.open('MNT/lock', os.O_RDWR)\n\
                     fcntl.flock(fd, fcntl.LOCK_EX)\nfcntl.lockf(fd, fcntl.LOCK_EX)\nprint('free')\n";
        assert_eq!(python(&m, check), "free\n");
    }
    let log = ok("cat", &m.run("cat", &[&format!("{}/log", m.dir)]));
    let written: std::collections::HashSet<&str> = log.lines().collect();
    for a in &acked {
        assert!(
            written.contains(a.as_str()),
            "{a} was acknowledged and is gone"
        );
    }
    ok(
        "kill",
        &Command::new("kill")
            .args(["-TERM", &server.id().to_string()])
            .output()
            .unwrap(),
    );
    assert!(server.wait().expect("the server").success());
    fsck_clean(&m);
}

/// `popen` and `pclose` from a working directory inside the mount: the shell starts there, and
/// `pclose` gives back its exit status.
#[test]
fn popen_runs_its_shell_in_the_mount_and_pclose_waits_for_it() {
    let m = mount();
    let src = r#"
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (chdir(argv[1]) != 0) return 2;
    FILE *w = popen("cat > from-popen", "w");
    if (!w) return 3;
    fputs("through popen\n", w);
    int s1 = pclose(w);
    /* Read here, through the shim: the shell must have written it in the mount. */
    FILE *f = fopen("from-popen", "r");
    char here[64] = {0};
    if (!f || !fgets(here, sizeof here, f)) return 5;
    fclose(f);
    FILE *r = popen("cat from-popen; exit 3", "r");
    if (!r) return 4;
    char buf[64] = {0};
    if (!fgets(buf, sizeof buf, r)) buf[0] = 0;
    int s2 = pclose(r);
    printf("%d %d %s%s", WEXITSTATUS(s1), WEXITSTATUS(s2), here, buf);
    return 0;
}
"#;
    // The kernel's working directory is a scratch one: a shell started outside the mount
    // writes there, not into the source tree.
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let c = scratch.path().join("popen.c");
    let exe = scratch.path().join("popen");
    std::fs::write(&c, src).expect("writing the C source");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (a C compiler is needed)"));
    ok("cc", &built);
    let out = m
        .command(&exe.display().to_string(), &[&m.dir])
        .current_dir(scratch.path())
        .output()
        .expect("running tailbound run");
    assert_eq!(ok("popen", &out), "0 3 through popen\nthrough popen\n");
    fsck_clean(&m);
}
