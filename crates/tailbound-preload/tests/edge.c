/*
 * Edge cases of library descriptors, run under libtailbound_preload.so with the mount given as
 * argv[1] (a directory that does not exist on the kernel file system). Prints one line per check;
 * exits 1 at the first failure with what went wrong.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *M;
static char pbuf[4096];

static const char *at(const char *rel) {
    snprintf(pbuf, sizeof pbuf, "%s/%s", M, rel);
    return pbuf;
}

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

static void ok(const char *what) { fprintf(stderr, "ok %s\n", what); }

extern char **environ;

int main(int argc, char **argv) {
    CHECK(argc == 2 || argc == 3, "usage: edge MOUNT [unsupported]");
    M = argv[1];
    char buf[256];
    if (argc == 3) {
        /* An operation the shim does not support on a library file: punching a hole. */
        int u = open(at("u"), O_CREAT | O_RDWR, 0644);
        CHECK(u >= 0 && write(u, "0123456789", 10) == 10, "u");
        int r = fallocate(u, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 5);
        printf("fallocate %d %s\n", r, r == 0 ? "ok" : strerror(errno));
        return 0;
    }

    /* Numbers: a library descriptor and a kernel one never collide. */
    int a = open(at("f"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(a >= 0, "open");
    int k = open("/dev/null", O_RDONLY);
    CHECK(k >= 0 && k != a, "kernel fd %d vs library fd %d", k, a);
    CHECK(write(a, "hello", 5) == 5, "write");
    CHECK(lseek(a, 0, SEEK_SET) == 0, "lseek");
    CHECK(read(a, buf, 5) == 5 && memcmp(buf, "hello", 5) == 0, "read back");
    ok("numbers");

    /* A raw system call on a library descriptor fails cleanly. */
    errno = 0;
    CHECK(syscall(SYS_read, a, buf, 5) == -1 && errno == EBADF, "raw read");
    CHECK(syscall(SYS_write, a, "x", 1) == -1 && errno == EBADF, "raw write");
    ok("raw syscalls fail with EBADF");

    /* dup2 shares the offset; dup2 of a kernel descriptor onto it makes it the kernel's. */
    CHECK(dup2(a, 50) == 50, "dup2 onto 50");
    CHECK(lseek(a, 0, SEEK_SET) == 0, "rewind");
    CHECK(read(50, buf, 2) == 2 && memcmp(buf, "he", 2) == 0, "read via dup");
    CHECK(lseek(a, 0, SEEK_CUR) == 2, "shared offset");
    CHECK(fcntl(50, F_GETFD) == 0, "dup2 clears FD_CLOEXEC");
    CHECK(fcntl(50, F_SETFD, FD_CLOEXEC) == 0 && fcntl(50, F_GETFD) == FD_CLOEXEC, "F_SETFD");
    CHECK((fcntl(50, F_GETFL) & O_ACCMODE) == O_RDWR, "F_GETFL");
    CHECK(dup2(k, 50) == 50, "kernel dup2 onto a library fd");
    struct stat st;
    CHECK(fstat(50, &st) == 0 && S_ISCHR(st.st_mode), "fd 50 is /dev/null now");
    CHECK(read(50, buf, 5) == 0, "read /dev/null");
    CHECK(close(50) == 0, "close 50");
    int d = fcntl(a, F_DUPFD_CLOEXEC, 70);
    CHECK(d >= 70 && fcntl(d, F_GETFD) == FD_CLOEXEC, "F_DUPFD_CLOEXEC %d", d);
    CHECK(close(d) == 0 && close(d) == -1 && errno == EBADF, "double close");
    ok("dup, dup2, fcntl flags");

    /* O_APPEND, pread past the end, SEEK_END. */
    int b = open(at("f"), O_WRONLY | O_APPEND);
    CHECK(b >= 0 && write(b, "X", 1) == 1, "append");
    CHECK(fstat(a, &st) == 0 && st.st_size == 6, "size %ld", (long)st.st_size);
    CHECK(pread(a, buf, 10, 100) == 0, "pread past the end");
    CHECK(lseek(a, 0, SEEK_END) == 6, "SEEK_END");
    CHECK(read(b, buf, 1) == -1 && errno == EBADF, "read on O_WRONLY");
    ok("append");

    /* Locks between the process's own descriptors. */
    int c = open(at("f"), O_RDWR);
    CHECK(c >= 0, "open c");
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK(fcntl(a, F_SETLK, &fl) == 0, "POSIX lock on a");
    CHECK(fcntl(c, F_SETLK, &fl) == 0, "POSIX locks of one process never conflict");
    struct flock ofd = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    CHECK(fcntl(c, F_OFD_SETLK, &ofd) == -1 && errno == EAGAIN, "OFD lock conflicts with POSIX");
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    CHECK(fcntl(c, F_OFD_GETLK, &q) == 0 && q.l_type == F_WRLCK && q.l_pid == getpid(),
          "F_OFD_GETLK reports the POSIX lock (type %d pid %d)", q.l_type, q.l_pid);
    CHECK(close(b) == 0, "close b");
    ofd.l_type = F_WRLCK;
    CHECK(fcntl(c, F_OFD_SETLK, &ofd) == 0, "closing any descriptor dropped the POSIX locks");
    fl.l_type = F_RDLCK;
    CHECK(fcntl(a, F_SETLK, &fl) == -1 && errno == EAGAIN, "POSIX lock conflicts with OFD");
    q.l_type = F_WRLCK;
    CHECK(fcntl(a, F_GETLK, &q) == 0 && q.l_type == F_WRLCK && q.l_pid == -1 && q.l_start == 5,
          "F_GETLK reports the OFD lock");
    CHECK(flock(a, LOCK_EX) == 0, "flock a");
    CHECK(flock(c, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK, "flock conflict");
    CHECK(flock(c, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK, "shared vs exclusive");
    CHECK(flock(a, LOCK_UN) == 0 && flock(c, LOCK_EX | LOCK_NB) == 0, "flock after unlock");
    CHECK(lockf(a, F_TEST, 0) == 0, "lockf F_TEST (POSIX locks are the process's own)");
    ok("locks");

    /* Unlink while open: the name goes now, the data stays until the last close. */
    CHECK(unlink(at("f")) == 0, "unlink");
    CHECK(stat(at("f"), &st) == -1 && errno == ENOENT, "name gone");
    CHECK(pread(c, buf, 5, 0) == 5 && memcmp(buf, "hello", 5) == 0, "still readable");
    CHECK(fstat(c, &st) == 0 && st.st_nlink == 0, "nlink 0");
    close(a);
    close(c);
    ok("unlink while open");

    /* Shared writable mapping: mapping and calls see the same bytes, and it reaches the file. */
    int g = open(at("m"), O_CREAT | O_RDWR, 0644);
    CHECK(g >= 0 && ftruncate(g, 8192) == 0, "m");
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
    CHECK(p != MAP_FAILED, "mmap shared");
    memcpy(p + 4096, "mapped", 6);
    CHECK(pread(g, buf, 6, 4096) == 6 && memcmp(buf, "mapped", 6) == 0, "pread sees the map");
    CHECK(pwrite(g, "PW", 2, 4096) == 2 && memcmp(p + 4096, "PWpped", 6) == 0, "map sees pwrite");
    char *r = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, g, 4096);
    CHECK(r != MAP_FAILED && memcmp(r, "PWpped", 6) == 0, "private map is a copy");
    CHECK(msync(p, 8192, MS_SYNC) == 0 && munmap(p, 8192) == 0 && munmap(r, 4096) == 0, "unmap");
    close(g);
    g = open(at("m"), O_RDONLY);
    CHECK(pread(g, buf, 6, 4096) == 6 && memcmp(buf, "PWpped", 6) == 0, "written back");
    CHECK(fstat(g, &st) == 0 && st.st_size == 8192, "size kept");
    close(g);
    ok("mmap");

    /* Directories. */
    CHECK(mkdir(at("d"), 0755) == 0 && mkdir(at("d"), 0755) == -1 && errno == EEXIST, "mkdir");
    for (int i = 0; i < 3; i++) {
        char n[32];
        snprintf(n, sizeof n, "d/%d", i);
        int t = open(at(n), O_CREAT | O_WRONLY, 0600);
        CHECK(t >= 0 && close(t) == 0, "create %s", n);
    }
    DIR *dir = opendir(at("d"));
    CHECK(dir != NULL, "opendir");
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        entries++;
    CHECK(entries == 5, "%d entries", entries);
    int dfd = dirfd(dir);
    CHECK(fstatat(dfd, "1", &st, 0) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
          "fstatat relative to a library directory");
    CHECK(openat(dfd, "../d/2", O_RDONLY) >= 0, "openat with ..");
    rewinddir(dir);
    CHECK(readdir(dir) != NULL, "rewinddir");
    closedir(dir);
    struct dirent **names;
    int n = scandir(at("d"), &names, NULL, alphasort);
    CHECK(n == 5 && strcmp(names[0]->d_name, ".") == 0 && strcmp(names[2]->d_name, "0") == 0 &&
              strcmp(names[4]->d_name, "2") == 0,
          "scandir: %d", n);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    CHECK(rmdir(at("d")) == -1 && errno == ENOTEMPTY, "rmdir non-empty");
    CHECK(open(at("d"), O_WRONLY) == -1 && errno == EISDIR, "open dir for writing");
    CHECK(open(at("d/1"), O_RDONLY | O_DIRECTORY) == -1 && errno == ENOTDIR, "O_DIRECTORY");
    CHECK(open(at("d/1"), O_CREAT | O_EXCL | O_RDWR, 0644) == -1 && errno == EEXIST, "O_EXCL");
    CHECK(open(at("nope"), O_RDONLY) == -1 && errno == ENOENT, "ENOENT");
    CHECK(rename(at("d/1"), "/tmp/tailbound-edge-x") == -1 && errno == EXDEV, "EXDEV");
    CHECK(chdir(at("d")) == 0, "chdir");
    CHECK(getcwd(buf, sizeof buf) && strcmp(buf, at("d")) == 0, "getcwd %s", buf);
    CHECK(access("2", R_OK) == 0 && rename("2", "two") == 0 && access("two", F_OK) == 0, "rel");
    CHECK(chdir("/") == 0 && access("two", F_OK) == -1, "back to the kernel");
    ok("directories");

    /* ioctl, isatty. */
    int h = open(at("d/0"), O_RDWR);
    CHECK(h >= 0 && write(h, "abc", 3) == 3 && lseek(h, 1, SEEK_SET) == 1, "h");
    int avail = -1;
    CHECK(ioctl(h, FIONREAD, &avail) == 0 && avail == 2, "FIONREAD %d", avail);
    CHECK(isatty(h) == 0 && errno == ENOTTY, "isatty");
    CHECK(ioctl(h, TCGETS, buf) == -1 && errno == ENOTTY, "ENOTTY");
    CHECK(fgetxattr(h, "user.x", buf, sizeof buf) == -1 && errno == ENOTSUP, "xattr");
    close(h);
    ok("ioctl");

    /* stdio streams, and a library descriptor standing in for stdout. */
    FILE *fp = fopen(at("s"), "w");
    CHECK(fp != NULL && fprintf(fp, "line %d\n", 42) > 0 && fclose(fp) == 0, "fopen w");
    fp = fopen(at("s"), "r");
    CHECK(fp && fgets(buf, sizeof buf, fp) && strcmp(buf, "line 42\n") == 0, "fgets");
    CHECK(fstat(fileno(fp), &st) == 0 && st.st_size == 8, "fileno of a library stream");
    fclose(fp);
    fflush(stdout);
    int saved = dup(1);
    int o = open(at("out"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(dup2(o, 1) == 1 && close(o) == 0, "dup2 onto stdout");
    printf("via stdout\n");
    fflush(stdout);
    CHECK(dup2(saved, 1) == 1 && close(saved) == 0, "stdout back");
    printf("back on the terminal\n");
    fflush(stdout);
    int rd = open(at("out"), O_RDONLY);
    memset(buf, 0, sizeof buf);
    CHECK(read(rd, buf, sizeof buf) == 11 && strcmp(buf, "via stdout\n") == 0, "out: %s", buf);
    close(rd);
    ok("stdio");

    /* A forked child may not use the pool; library descriptors do not survive exec. */
    int keep = open(at("s"), O_RDONLY);
    CHECK(fcntl(keep, F_SETFD, 0) == 0, "clear FD_CLOEXEC");
    pid_t pid = fork();
    if (pid == 0) {
        int x = open(at("s"), O_RDONLY);
        _exit(x == -1 && errno == EACCES && read(keep, buf, 1) == -1 ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "forked child");
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", keep);
    char *args[] = {"test", "-e", fdpath, NULL};
    char *env[] = {NULL};
    CHECK(posix_spawn(&pid, "/usr/bin/test", NULL, NULL, args, env) == 0, "spawn");
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 1,
          "descriptor %d leaked into an exec'd program", keep);
    CHECK(read(keep, buf, 4) == 4, "the parent still reads");
    close(keep);
    ok("fork and exec");

    /* mkstemp under the mount. */
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", M);
    int t = mkstemp(tmpl);
    CHECK(t >= 0 && strncmp(tmpl, M, strlen(M)) == 0 && stat(tmpl, &st) == 0 &&
              (st.st_mode & 0777) == 0600,
          "mkstemp %s", tmpl);
    close(t);
    ok("mkstemp");
    printf("all edge cases passed\n");
    return 0;
}
