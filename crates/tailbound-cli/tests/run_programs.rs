//! `tailbound run` across processes: real programs, unmodified, that fork, exec and run several
//! processes at once, on a mount served by the shim (every process a client of the pool's
//! server). The mount directory does not exist on the kernel file system, so nothing reaches the
//! kernel by accident and still passes.

mod common;

use std::process::Stdio;

use common::mount::Mount;
use common::programs::{
    check_fio_report, feed, make_project_script, sqlite_writer, FIO_ARGS, FIO_FILES,
    GIT_OUTPUT_END, GIT_SCRIPT, MAKE_OUTPUT, TREE_SCRIPT,
};
use common::{ok, tailbound};

/// A pool for one test, large enough for the programs' files.
fn mount() -> Mount {
    Mount::new("programs", "256M")
}

/// A program started under `tailbound run` with piped standard streams.
fn spawn(m: &Mount, program: &str, args: &[&str]) -> std::process::Child {
    m.command(program, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tailbound run")
}

#[test]
fn a_shell_script_with_pipes_and_subshells_works_in_the_mount() {
    let m = mount();
    let out = m.sh(&[
        TREE_SCRIPT,
        "chmod 600 a/log
         cat a/log | grep line | wc -l
         cat a/link
         (cd a && cat b/c/file) | tr a-z A-Z
         find a | sort
         stat -c '%a %h' a/log
         printf '#!/bin/sh\\necho script ran $1\\n' > a/run.sh
         chmod 755 a/run.sh && ./a/run.sh here
         chmod 644 a/run.sh && { ./a/run.sh 2>/dev/null || echo refused; }",
    ]
    .join("\n"));
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
    let m = mount();
    let text = ok("git", &m.sh(GIT_SCRIPT));
    assert!(text.ends_with(GIT_OUTPUT_END), "{text}");
}

#[test]
fn make_j4_builds_and_runs_a_small_c_project_in_the_mount() {
    let m = mount();
    let out = m.sh(&make_project_script());
    assert_eq!(ok("make", &out), MAKE_OUTPUT);
}

#[test]
fn two_sqlite3_processes_write_one_wal_database_at_once() {
    let m = mount();
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
        let wait = format!(
            "SELECT count(*) FROM t;\n\
             .shell touch {dir}/ready-{who}; i=0; while [ ! -e {dir}/ready-{other} ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done\n"
        );
        sqlite_writer(who, ROWS, &wait)
    };
    let writers: Vec<_> = [("a", "b"), ("b", "a")]
        .into_iter()
        .map(|(who, other)| feed(spawn(&m, "sqlite3", &["-bail", &db]), script(who, other)))
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
    let m = mount();
    let out = m.sh(&format!(
        "fio {} --output=fio.json --directory=.
         ls mixed.* | wc -l
         cat fio.json",
        FIO_ARGS.join(" ")
    ));
    let text = ok("fio", &out);
    let (files, report) = text
        .split_once('\n')
        .expect("the file count, then the report");
    assert_eq!(files.parse::<usize>(), Ok(FIO_FILES), "one file per job");
    check_fio_report(report);
    // Read back as written, by the verification.
    let read: serde_json::Value = serde_json::from_str(report).expect("fio's JSON");
    assert_eq!(
        read["jobs"][0]["read"]["io_bytes"].as_u64(),
        Some(FIO_FILES as u64 * (8 << 20)),
        "{report}"
    );
}

#[test]
fn python_subprocess_and_multiprocessing_work_in_the_mount() {
    let m = mount();
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
