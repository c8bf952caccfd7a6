//! Programs the mount tests run the same way through `tailbound run` (`run_programs.rs`) and
//! through FUSE (`mount.rs`): their scripts and what they must print.

use std::process::Child;
use std::thread::JoinHandle;

/// Makes a small tree in `a`: nested directories, a file appended to, a sorted file moved, a
/// symbolic and a hard link, and a copy removed.
pub const TREE_SCRIPT: &str = "mkdir -p a/b/c
         for i in 1 2 3 4 5; do echo line$i >> a/log; done
         (cd a/b && echo nested > c/file)
         printf 'z\\ny\\nx\\n' | sort > a/sorted
         mv a/sorted a/b/sorted
         ln -s b/sorted a/link
         ln a/log a/hard
         cp a/log a/copy && rm a/copy";

/// Makes a git repository in `repo`, commits twice, collects garbage and checks it.
pub const GIT_SCRIPT: &str = "export GIT_CONFIG_NOSYSTEM=1 HOME=\"$PWD\"
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
         git status --porcelain | wc -l";
/// How [`GIT_SCRIPT`]'s output ends: both commits, newest first, 20 files and a clean tree.
pub const GIT_OUTPUT_END: &str = "second\nfirst\n20\n0\n";

/// A shell script that writes a C project of eight parts in `proj`, builds it with
/// `make -j4`, runs it, and checks that a newer header makes it stale.
pub fn make_project_script() -> String {
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
    script
}

/// What [`make_project_script`] prints: the program's sum, then the two `make -q` verdicts.
pub const MAKE_OUTPUT: &str = "280\nup-to-date\nstale\n";

/// The input of one `sqlite3` writer of table `t`: `rows` rows of its own, each in a
/// transaction of its own, after `before` (SQL or dot commands).
pub fn sqlite_writer(who: &str, rows: usize, before: &str) -> String {
    let mut s = format!(".timeout 30000\n{before}");
    for n in 0..rows {
        s.push_str(&format!(
            "BEGIN IMMEDIATE; INSERT INTO t VALUES('{who}', {n}); COMMIT;\n"
        ));
    }
    s
}

/// Writes `text` to the standard input of `child` (started with it piped) from a thread of its
/// own, so the child's output pipes cannot fill while it is fed.
pub fn feed(mut child: Child, text: String) -> (Child, JoinHandle<()>) {
    let mut stdin = child.stdin.take().expect("a piped standard input");
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        stdin
            .write_all(text.as_bytes())
            .expect("feeding the program");
    });
    (child, feeder)
}

/// fio in its default process mode: three jobs of 8 MiB of random writes each, verified.
pub const FIO_ARGS: [&str; 10] = [
    "--name=mixed",
    "--rw=randwrite",
    "--bs=4k",
    "--size=8M",
    "--numjobs=3",
    "--verify=crc32c",
    "--do_verify=1",
    "--fsync=64",
    "--group_reporting",
    "--output-format=json",
];
/// The files fio's jobs leave, one each.
pub const FIO_FILES: usize = 3;

/// fio's JSON report (of a run with [`FIO_ARGS`]) says no error and all bytes written.
pub fn check_fio_report(text: &str) {
    let report: serde_json::Value = serde_json::from_str(text).expect("fio's JSON");
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "{text}");
    assert_eq!(
        job["write"]["io_bytes"].as_u64(),
        Some(FIO_FILES as u64 * (8 << 20)),
        "three processes wrote their 8 MiB each"
    );
}
