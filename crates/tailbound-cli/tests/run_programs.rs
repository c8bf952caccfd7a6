//! `tailbound run` across processes: real programs, unmodified, that fork, exec and run several
//! processes at once, on a mount served by the shim (every process a client of the pool's
//! server). The mount directory does not exist on the kernel file system, so nothing reaches the
//! kernel by accident and still passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use common::{stderr, stdout, tailbound};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A pool in /dev/shm and a mount directory that exists nowhere on the kernel file system.
struct Shared {
    _pool_dir: tempfile::TempDir,
    pool: PathBuf,
    dir: String,
}

impl Shared {
    fn new() -> Shared {
        let pool_dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
        let pool = pool_dir.path().join("test.pool");
        let dir = format!(
            "/tailbound-procs-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        assert!(!Path::new(&dir).exists());
        Shared {
            _pool_dir: pool_dir,
            pool,
            dir,
        }
    }

    fn mount_arg(&self) -> String {
        format!("{}={}", self.dir, self.pool.display())
    }

    /// Runs `script` with `sh -ec` under `tailbound run`, in the mount directory.
    fn sh(&self, script: &str) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_tailbound"))
            .args([
                "run",
                "--pool-size",
                "256M",
                "--mount",
                &self.mount_arg(),
                "--",
            ])
            .args(["sh", "-ec", &format!("cd {}\n{script}", self.dir)])
            .output()
            .expect("running tailbound run");
        assert!(
            !Path::new(&self.dir).exists(),
            "the script created {} on the kernel file system",
            self.dir
        );
        out
    }

    /// A program started under `tailbound run` with piped standard streams.
    fn spawn(&self, program: &str, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_tailbound"))
            .args([
                "run",
                "--pool-size",
                "256M",
                "--mount",
                &self.mount_arg(),
                "--",
            ])
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tailbound run")
    }
}

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

#[test]
fn a_shell_script_with_pipes_and_subshells_works_in_the_mount() {
    let m = Shared::new();
    let out = m.sh("mkdir -p a/b/c
         for i in 1 2 3 4 5; do echo line$i >> a/log; done
         (cd a/b && echo nested > c/file)
         printf 'z\\ny\\nx\\n' | sort > a/sorted
         mv a/sorted a/b/sorted
         ln -s b/sorted a/link
         ln a/log a/hard
         cp a/log a/copy && rm a/copy
         chmod 600 a/log
         cat a/log | grep line | wc -l
         cat a/link
         (cd a && cat b/c/file) | tr a-z A-Z
         find a | sort
         stat -c '%a %h' a/log
         printf '#!/bin/sh\\necho script ran $1\\n' > a/run.sh
         chmod 755 a/run.sh && ./a/run.sh here
         chmod 644 a/run.sh && { ./a/run.sh 2>/dev/null || echo refused; }");
    let text = ok("the script", &out);
    assert_eq!(
        text,
        "5\nx\ny\nz\nNESTED\na\na/b\na/b/c\na/b/c/file\na/b/sorted\na/hard\na/link\na/log\n600 2\nscript ran here\nrefused\n"
    );
    // The pool holds the tree once the program and its server are gone.
    let cat = tailbound(&["fs", "cat", m.pool.to_str().unwrap(), "/a/b/c/file"]);
    assert_eq!(ok("fs cat", &cat), "nested\n");
}

#[test]
fn git_init_add_commit_log_and_gc_work_in_the_mount() {
    let m = Shared::new();
    let out = m.sh("export GIT_CONFIG_NOSYSTEM=1 HOME=\"$PWD\"
         git init -q -b main repo
         cd repo
         git config user.email t@example.invalid
         git config user.name tester
         for i in $(seq 1 20); do echo \"file $i\" > f$i.txt; done
         mkdir sub && echo deep > sub/deep.txt
         git add .
         git commit -q -m first
         echo changed >> f3.txt
         git rm -q f4.txt
         git commit -q -am second
         git gc -q --aggressive
         git fsck --full 2>&1
         git log --format=%s
         git ls-files | wc -l
         git status --porcelain | wc -l");
    let text = ok("git", &out);
    assert!(text.ends_with("second\nfirst\n20\n0\n"), "{text}");
}

#[test]
fn make_j4_builds_and_runs_a_small_c_project_in_the_mount() {
    let m = Shared::new();
    let mut script = String::from("mkdir proj && cd proj\n");
    let mut objs = Vec::new();
    let mut calls = String::new();
    for i in 0..8 {
        script.push_str(&format!(
            "printf '#include \"parts.h\"\\nint part{i}(void) {{ return {i} * 10; }}\\n' > part{i}.c\n"
        ));
        objs.push(format!("part{i}.o"));
        calls.push_str(&format!(" + part{i}()"));
    }
    for i in 0..8 {
        script.push_str(&format!("echo 'int part{i}(void);' >> parts.h\n"));
    }
    script.push_str(&format!(
        "printf '#include <stdio.h>\\n#include \"parts.h\"\\nint main(void) {{ printf(\"%%d\\\\n\", 0{calls}); return 0; }}\\n' > main.c\n"
    ));
    script.push_str(&format!(
        "printf 'OBJS = main.o {}\\nprog: $(OBJS)\\n\\tcc -o $@ $(OBJS)\\n%%.o: %%.c parts.h\\n\\tcc -O1 -c -o $@ $<\\n' > Makefile\n",
        objs.join(" ")
    ));
    script.push_str("make -s -j4 && ./prog && make -q && echo up-to-date\n");
    script.push_str("touch -d 'now + 1 hour' parts.h && { make -q || echo stale; }\n");
    let out = m.sh(&script);
    assert_eq!(ok("make", &out), "280\nup-to-date\nstale\n");
}

#[test]
fn two_sqlite3_processes_write_one_wal_database_at_once() {
    let m = Shared::new();
    let db = format!("{}/shared.db", m.dir);
    // WAL mode: both writers map the -shm file MAP_SHARED and coordinate through it, so this
    // needs one memory for both processes' mappings.
    let out = m
        .sh("sqlite3 shared.db 'PRAGMA journal_mode=WAL; CREATE TABLE t(writer TEXT, n INTEGER);'");
    assert_eq!(ok("create", &out), "wal\n");
    const ROWS: usize = 100;
    let dir = m.dir.clone();
    let script = |who: &str, other: &str| {
        // Each opens the database (mapping the -shm file) and then waits for the other to have
        // done so, so both write while both hold their mappings (a minute at most: a writer
        // that failed must not leave the other waiting).
        let mut s = format!(
            ".timeout 30000\nSELECT count(*) FROM t;\n\
             .shell touch {dir}/ready-{who}; i=0; while [ ! -e {dir}/ready-{other} ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done\n"
        );
        for n in 0..ROWS {
            s.push_str(&format!(
                "BEGIN IMMEDIATE; INSERT INTO t VALUES('{who}', {n}); COMMIT;\n"
            ));
        }
        s
    };
    let writers: Vec<_> = [("a", "b"), ("b", "a")]
        .into_iter()
        .map(|(who, other)| {
            let mut child = m.spawn("sqlite3", &["-bail", &db]);
            let mut stdin = child.stdin.take().unwrap();
            let text = script(who, other);
            let feeder = std::thread::spawn(move || {
                use std::io::Write;
                stdin.write_all(text.as_bytes()).unwrap();
            });
            (child, feeder)
        })
        .collect();
    for (child, feeder) in writers {
        feeder.join().unwrap();
        ok("a writer", &child.wait_with_output().unwrap());
    }
    // Every row of both writers, each number once.
    let check = m.sh(
        "sqlite3 shared.db 'PRAGMA journal_mode; PRAGMA integrity_check; SELECT writer, count(*), count(DISTINCT n), min(n), max(n) FROM t GROUP BY writer;'",
    );
    let last = ROWS - 1;
    assert_eq!(
        ok("check", &check),
        format!("wal\nok\na|{ROWS}|{ROWS}|0|{last}\nb|{ROWS}|{ROWS}|0|{last}\n")
    );
}

#[test]
fn fio_in_its_default_process_mode_writes_and_verifies_in_the_mount() {
    let m = Shared::new();
    let out = m.sh(
        "fio --name=mixed --rw=randwrite --bs=4k --size=8M --numjobs=3 --verify=crc32c \
         --do_verify=1 --fsync=64 --group_reporting --output-format=json --output=fio.json \
         --directory=.
         ls mixed.* | wc -l
         grep -c '\"error\" : 0' fio.json
         grep -c '\"io_bytes\" : 25165824' fio.json",
    );
    // Three processes, one file each; no error; 24 MiB written and the same read back.
    assert_eq!(ok("fio", &out), "3\n1\n2\n");
}

#[test]
fn python_subprocess_and_multiprocessing_work_in_the_mount() {
    let m = Shared::new();
    let program = r#"
import multiprocessing, os, subprocess, sys

def work(i):
    with open(f"mp/{i}.txt", "w") as f:
        f.write(f"worker {i} pid {os.getpid()}\n")
    return i * i

if __name__ == "__main__":
    os.makedirs("mp")
    with multiprocessing.Pool(3) as pool:
        squares = pool.map(work, range(6))
    listing = subprocess.run(["ls", "mp"], capture_output=True, text=True, check=True).stdout
    with open("out.txt", "w") as f:
        f.write("written by the parent\n")
    echoed = subprocess.run(["cat", "out.txt"], capture_output=True, text=True, check=True).stdout
    print(sum(squares), len(listing.split()), echoed.strip())
"#;
    let out = m.sh(&format!(
        "cat > prog.py <<'EOF'\n{program}\nEOF\npython3 prog.py"
    ));
    assert_eq!(ok("python", &out), "55 6 written by the parent\n");
}
