//! `tailbound run`: the exec calls whose arguments are a variable list (`execl`, `execlp`,
//! `execle`) and `posix_spawn` with a `dup2` file action of a library descriptor hand the
//! process's served descriptors and working directory over, as `execve` does. A C program makes
//! the calls directly (libc's own `execl*` call its internal `execve`, which no hook sees).
//! The mount directory exists nowhere on the kernel file system.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::ok;

const PROGRAM: &str = r#"
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    const char *how = argv[1], *dir = argv[2];
    char path[4096], cmd[256];
    snprintf(path, sizeof path, "%s/%s.out", dir, how);
    int spawn = strcmp(how, "spawn") == 0;
    /* Close-on-exec for the spawn: only its dup2 action takes the file to the child. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (spawn ? O_CLOEXEC : 0), 0644);
    if (fd < 0 || write(fd, "before\n", 7) != 7 || chdir(dir) != 0) {
        perror(path);
        return 2;
    }
    snprintf(cmd, sizeof cmd, "echo after $0 $1 ${ONLY:-} >&%d; pwd >&%d", fd, fd);
    if (strcmp(how, "execl") == 0)
        execl("/bin/sh", "sh", "-c", cmd, "zero", "one", (char *)0);
    else if (strcmp(how, "execlp") == 0)
        execlp("sh", "sh", "-c", cmd, "zero", "one", (char *)0);
    else if (strcmp(how, "execle") == 0) {
        /* An environment of the program's own, without the shim's variables. */
        char *env[] = {"ONLY=env", "PATH=/usr/bin:/bin", (char *)0};
        execle("/bin/sh", "sh", "-c", cmd, "zero", "one", (char *)0, env);
    } else if (spawn) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fd, 1);
        char *av[] = {"sh", "-c", "echo spawned; pwd", (char *)0};
        pid_t pid;
        int r = posix_spawn(&pid, "/bin/sh", &fa, 0, av, environ);
        posix_spawn_file_actions_destroy(&fa);
        int st = 0;
        if (r != 0 || waitpid(pid, &st, 0) != pid) {
            fprintf(stderr, "posix_spawn: %s\n", strerror(r));
            return 2;
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    }
    perror(how);
    return 2;
}
"#;

/// The program above, built with the system's C compiler.
fn build(dir: &Path) -> PathBuf {
    let src = dir.join("exec_calls.c");
    let exe = dir.join("exec_calls");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running cc");
    ok("cc", &out);
    exe
}

#[test]
fn execl_execlp_execle_and_a_spawns_dup2_hand_descriptors_over() {
    let work = tempfile::tempdir().unwrap();
    let exe = build(work.path());
    let pool_dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = pool_dir.path().join("exec.pool");
    let dir = format!("/tailbound-exec-test-{}", std::process::id());
    assert!(!Path::new(&dir).exists());
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tailbound"))
            .args(["run", "--pool-size", "64M", "--mount"])
            .arg(format!("{dir}={}", pool.display()))
            .arg("--")
            .args(args)
            .output()
            .expect("running tailbound run")
    };
    for how in ["execl", "execlp", "execle", "spawn"] {
        ok(how, &run(&[exe.to_str().unwrap(), how, &dir]));
        let got = ok("cat", &run(&["cat", &format!("{dir}/{how}.out")]));
        let want = match how {
            "spawn" => format!("before\nspawned\n{dir}\n"),
            "execle" => format!("before\nafter zero one env\n{dir}\n"),
            _ => format!("before\nafter zero one\n{dir}\n"),
        };
        assert_eq!(got, want, "{how}");
    }
    assert!(
        !Path::new(&dir).exists(),
        "the program created {dir} on the kernel file system"
    );
}
