/*
 * Raw system calls under the mount given as argv[1], for the catch-all mode
 * (TAILBOUND_CATCH_ALL=1): no symbol hook sees them, so only Syscall User Dispatch can serve them.
 * argv[2] is "on" or "off": with the mode off only the plain open/write/read/close part runs (the
 * calls then reach the kernel). Prints one line per step; exits 1 at the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED line %d: %s (errno %d %s): ", __LINE__, #cond, errno,          \
                    strerror(errno));                                                              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char *M;

static const char *at(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/%s", M, rel);
    return buf;
}

/* The kernel's struct open_how (openat2 has no glibc wrapper). */
struct how {
    uint64_t flags, mode, resolve;
};

static void *in_thread(void *arg) {
    char p[512];
    long fd = syscall(SYS_openat, AT_FDCWD, at(p, sizeof p, "thread"), O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || syscall(SYS_write, fd, "from a thread", 13) != 13 || syscall(SYS_close, fd) != 0)
        return (void *)1;
    return arg;
}

static volatile sig_atomic_t handled;
static void on_usr1(int sig) {
    (void)sig;
    handled = 1;
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: catchall MOUNT on|off");
    M = argv[1];
    char p[512], buf[64] = {0};

    long fd = syscall(SYS_openat, AT_FDCWD, at(p, sizeof p, "raw"), O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0, "raw openat %s", p);
    CHECK(syscall(SYS_write, fd, "hello raw", 9) == 9, "raw write");
    CHECK(syscall(SYS_lseek, fd, 0, SEEK_SET) == 0, "raw lseek");
    CHECK(syscall(SYS_read, fd, buf, sizeof buf) == 9 && memcmp(buf, "hello raw", 9) == 0, "read");
    CHECK(syscall(SYS_close, fd) == 0, "raw close");
    printf("raw openat, write, read, close\n");
    if (strcmp(argv[2], "on") != 0)
        return 0;

    /* The same file through the symbol hooks: one file system either way. */
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size == 9, "stat sees the raw file");
    struct stat raw_st;
    CHECK(syscall(SYS_newfstatat, AT_FDCWD, p, &raw_st, 0) == 0 && raw_st.st_ino == st.st_ino,
          "raw newfstatat");
    printf("hooks and raw calls agree\n");

    struct how how = {.flags = O_CREAT | O_WRONLY, .mode = 0600};
    fd = syscall(SYS_openat2, AT_FDCWD, at(p, sizeof p, "raw2"), &how, sizeof how);
    CHECK(fd >= 0 && syscall(SYS_write, fd, "openat2", 7) == 7 && syscall(SYS_close, fd) == 0,
          "openat2");
    how.resolve = 0x08; /* RESOLVE_BENEATH */
    CHECK(syscall(SYS_openat2, AT_FDCWD, p, &how, sizeof how) == -1 && errno == EOPNOTSUPP,
          "openat2 with RESOLVE_* on a library path");
    struct {
        struct how how;
        uint64_t future;
    } bigger = {.how = {.flags = O_RDONLY}, .future = 1};
    CHECK(syscall(SYS_openat2, AT_FDCWD, at(p, sizeof p, "raw2"), &bigger, sizeof bigger) == -1 &&
              errno == E2BIG,
          "openat2 with an unknown non-zero field");
    printf("openat2\n");

    pthread_t t;
    void *r;
    CHECK(pthread_create(&t, NULL, in_thread, NULL) == 0 && pthread_join(t, &r) == 0 && !r,
          "raw calls in a new thread");
    printf("thread\n");

    /* A handler that blocks every signal, and a mask that blocks every signal: the next system
     * call must still be served (SIGSYS stays deliverable). */
    struct sigaction sa = {.sa_handler = on_usr1};
    sigfillset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
    CHECK(raise(SIGUSR1) == 0 && handled, "handler ran");
    sigset_t all, old;
    sigfillset(&all);
    CHECK(sigprocmask(SIG_BLOCK, &all, &old) == 0, "block all");
    CHECK(syscall(SYS_faccessat, AT_FDCWD, at(p, sizeof p, "raw"), F_OK) == 0, "access, blocked");
    sigset_t now;
    CHECK(sigprocmask(SIG_SETMASK, &old, &now) == 0 && sigismember(&now, SIGUSR1), "mask kept");
    printf("signals\n");

    /* A forked child keeps the mode, and the pool refuses it (it belongs to the parent). */
    pid_t pid = fork();
    if (pid == 0) {
        long x = syscall(SYS_openat, AT_FDCWD, at(p, sizeof p, "raw"), O_RDONLY);
        _exit(x == -1 && errno == EACCES ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "forked child");
    CHECK(system("exit 3") == 3 << 8, "system");
    printf("fork and spawn\n");
    return 0;
}
