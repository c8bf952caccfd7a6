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
#include <limits.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
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

/* The pre-2.33 stat entry points, which newer headers no longer declare. */
extern int __xstat(int ver, const char *path, struct stat *st);
extern int __lxstat(int ver, const char *path, struct stat *st);
extern int __fxstat(int ver, int fd, struct stat *st);
extern int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);

int main(int argc, char **argv) {
    CHECK(argc == 2 || argc == 3, "usage: edge MOUNT [unsupported|tmpfile]");
    M = argv[1];
    char buf[256];
    if (argc == 3 && strcmp(argv[2], "tmpfile") == 0) {
        /* Run with the mount at /tmp, where glibc makes tmpfile()'s file whatever TMPDIR says. */
        FILE *tf = tmpfile();
        CHECK(tf != NULL, "tmpfile");
        struct stat st;
        CHECK(fstat(fileno(tf), &st) == 0 && major(st.st_dev) == 0x7462 && st.st_nlink == 0,
              "in the pool, unlinked");
        CHECK(fputs("scratch", tf) >= 0 && fseek(tf, 0, SEEK_SET) == 0 &&
                  fgets(buf, sizeof buf, tf) && strcmp(buf, "scratch") == 0,
              "tmpfile I/O");
        DIR *d = opendir(M);
        int n = 0;
        while (d && readdir(d))
            n++;
        CHECK(d && closedir(d) == 0 && n == 2, "the pool's directory is empty (%d entries)", n);
        CHECK(fclose(tf) == 0, "fclose");
        printf("tmpfile in the pool\n");
        return 0;
    }
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

    const char *catch_all = getenv("TAILBOUND_CATCH_ALL");
    if (catch_all && strcmp(catch_all, "1") == 0) {
        /* The catch-all mode serves a raw system call on a library descriptor. */
        struct stat raw_st;
        CHECK(syscall(SYS_pread64, a, buf, 5, 0) == 5 && memcmp(buf, "hello", 5) == 0, "raw pread");
        CHECK(syscall(SYS_fstat, a, &raw_st) == 0 && raw_st.st_size == 5, "raw fstat");
        ok("raw syscalls served");
    } else {
        /* A raw system call on a library descriptor fails cleanly. */
        errno = 0;
        CHECK(syscall(SYS_read, a, buf, 5) == -1 && errno == EBADF, "raw read");
        CHECK(syscall(SYS_write, a, "x", 1) == -1 && errno == EBADF, "raw write");
        ok("raw syscalls fail with EBADF");
    }

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

    /* A closed library descriptor's number stays reserved for the next library open; the program
       sees it closed: close fails, and dup2 onto it, or a raw dup3 behind the shim's back, makes
       it the program's, which no later library open takes. */
    int cp = open(at("f"), O_RDONLY);
    CHECK(cp >= 0 && close(cp) == 0, "open and close");
    CHECK(close(cp) == -1 && errno == EBADF, "a closed number closes again");
    CHECK(dup2(k, cp) == cp && fstat(cp, &st) == 0 && S_ISCHR(st.st_mode), "dup2 onto a closed number");
    int cq = open(at("f"), O_RDONLY);
    CHECK(cq >= 0 && cq != cp, "a library open took the program's %d", cp);
    CHECK(read(cq, buf, 5) == 5 && memcmp(buf, "hello", 5) == 0, "read the library file");
    CHECK(read(cp, buf, 5) == 0 && close(cp) == 0, "the program's descriptor is untouched");
    CHECK(close(cq) == 0, "close");
    CHECK(syscall(SYS_dup3, k, cq, 0) == cq, "raw dup3 onto a closed number");
    int cs = open(at("f"), O_RDONLY);
    CHECK(cs >= 0 && cs != cq, "a library open took %d, the program's behind its back", cq);
    CHECK(read(cq, buf, 5) == 0 && close(cq) == 0, "the program's descriptor is untouched");
    CHECK(read(cs, buf, 5) == 5 && close(cs) == 0, "read and close the library file");
    ok("closed numbers");

    /* O_APPEND, pread past the end, SEEK_END. */
    int b = open(at("f"), O_WRONLY | O_APPEND);
    CHECK(b >= 0 && write(b, "X", 1) == 1, "append");
    CHECK(fstat(a, &st) == 0 && st.st_size == 6, "size %ld", (long)st.st_size);
    CHECK(pread(a, buf, 10, 100) == 0, "pread past the end");
    CHECK(lseek(a, 0, SEEK_END) == 6, "SEEK_END");
    CHECK(read(b, buf, 1) == -1 && errno == EBADF, "read on O_WRONLY");
    ok("append");

    /* O_DIRECT: the write goes out before it returns; the bytes read back the same, and
       F_SETFL turns it off and on. */
    static char dbuf[65536] __attribute__((aligned(4096)));
    static char dback[65536];
    for (size_t i = 0; i < sizeof dbuf; i++) dbuf[i] = (char)(i * 7 + 3);
    int xfd = open(at("direct"), O_RDWR | O_CREAT | O_DIRECT, 0644);
    CHECK(xfd >= 0 && (fcntl(xfd, F_GETFL) & O_DIRECT), "open O_DIRECT");
    CHECK(pwrite(xfd, dbuf, sizeof dbuf, 8192) == (ssize_t)sizeof dbuf, "direct pwrite");
    CHECK(fcntl(xfd, F_SETFL, 0) == 0 && !(fcntl(xfd, F_GETFL) & O_DIRECT), "F_SETFL clears O_DIRECT");
    CHECK(pwrite(xfd, "tail", 4, 8192 + sizeof dbuf) == 4, "buffered pwrite");
    CHECK(fcntl(xfd, F_SETFL, O_DIRECT) == 0 && (fcntl(xfd, F_GETFL) & O_DIRECT), "F_SETFL sets O_DIRECT");
    CHECK(pwrite(xfd, dbuf, 4096, 0) == 4096, "direct pwrite at 0");
    CHECK(pread(xfd, dback, sizeof dback, 8192) == (ssize_t)sizeof dback &&
              memcmp(dback, dbuf, sizeof dbuf) == 0,
          "direct bytes read back");
    CHECK(pread(xfd, dback, 4, 8192 + sizeof dbuf) == 4 && memcmp(dback, "tail", 4) == 0, "tail");
    CHECK(pread(xfd, dback, 4096, 0) == 4096 && memcmp(dback, dbuf, 4096) == 0, "first block");
    CHECK(fstat(xfd, &st) == 0 && st.st_size == 8192 + (off_t)sizeof dbuf + 4, "direct size %ld",
          (long)st.st_size);
    CHECK(close(xfd) == 0 && unlink(at("direct")) == 0, "close and unlink direct");
    ok("O_DIRECT");

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
    CHECK(open(at("d"), O_RDONLY | O_CREAT, 0644) == -1 && errno == EISDIR, "O_CREAT on a directory");
    CHECK(open(at("d"), O_RDONLY | O_CREAT | O_DIRECTORY, 0755) == -1 && errno == EINVAL,
          "O_CREAT | O_DIRECTORY on a directory");
    CHECK(open(at("d/new"), O_RDONLY | O_CREAT | O_DIRECTORY, 0755) == -1 && errno == EINVAL &&
              access(at("d/new"), F_OK) == -1 && errno == ENOENT,
          "O_CREAT | O_DIRECTORY creates nothing");
    int existing = open(at("d/1"), O_WRONLY | O_CREAT, 0644);
    CHECK(existing >= 0 && fstat(existing, &st) == 0 && (st.st_mode & 0777) == 0600 &&
              close(existing) == 0,
          "O_CREAT opens an existing file as it is");
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

    /* The rest of the interposition surface, one check each. */
    /* close_range, also with CLOSE_RANGE_CLOEXEC. */
    int cr = open(at("cr"), O_CREAT | O_RDWR, 0644);
    CHECK(cr >= 0 && dup2(cr, 200) == 200 && dup2(cr, 201) == 201 && close(cr) == 0, "cr");
    CHECK(close_range(200, 201, CLOSE_RANGE_CLOEXEC) == 0 && fcntl(200, F_GETFD) == FD_CLOEXEC &&
              fcntl(201, F_GETFD) == FD_CLOEXEC,
          "close_range CLOEXEC");
    CHECK(close_range(200, 201, 0) == 0 && write(200, "x", 1) == -1 && errno == EBADF &&
              fcntl(201, F_GETFD) == -1 && errno == EBADF,
          "close_range");
    ok("close_range");

    /* closefrom: the library descriptors at or above the bound are closed, and a kernel file
       that takes one of their numbers is the program's (reads reach it, not the library file). */
    int cf = open(at("cf"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(cf >= 0 && write(cf, "library", 7) == 7 && dup2(cf, 210) == 210 &&
              dup2(cf, 211) == 211 && close(cf) == 0,
          "closefrom setup");
    closefrom(210);
    CHECK(write(210, "x", 1) == -1 && errno == EBADF && fcntl(211, F_GETFD) == -1 &&
              errno == EBADF,
          "closefrom closes library descriptors");
    int zero = open("/dev/zero", O_RDONLY);
    int kz = zero >= 0 ? fcntl(zero, F_DUPFD, 210) : -1;
    char zb[4] = {1, 1, 1, 1};
    CHECK(kz == 210 && pread(kz, zb, 4, 0) == 4 && zb[0] == 0 && zb[3] == 0,
          "a kernel file on a number closefrom freed reads as itself (got fd %d)", kz);
    close(kz);
    close(zero);
    ok("closefrom");

    /* preadv2/pwritev2, at an offset and at the file offset (-1). */
    int v = open(at("v"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    struct iovec iw[2] = {{"ab", 2}, {"cd", 2}};
    CHECK(v >= 0 && pwritev2(v, iw, 2, 0, 0) == 4 && lseek(v, 0, SEEK_CUR) == 0, "pwritev2");
    CHECK(pwritev2(v, iw, 1, -1, 0) == 2 && lseek(v, 0, SEEK_CUR) == 2, "pwritev2 at -1");
    char x1[3] = {0}, x2[3] = {0};
    struct iovec ir[2] = {{x1, 2}, {x2, 2}};
    CHECK(preadv2(v, ir, 2, 0, 0) == 4 && strcmp(x1, "ab") == 0 && strcmp(x2, "cd") == 0,
          "preadv2");
    CHECK(preadv2(v, ir, 1, -1, 0) == 2 && strcmp(x1, "cd") == 0 && lseek(v, 0, SEEK_CUR) == 4,
          "preadv2 at -1");
    CHECK(pwritev2(v, iw, 1, 0, RWF_DSYNC | RWF_HIPRI) == 2, "pwritev2 RWF_DSYNC");
    CHECK(pwritev2(v, iw, 1, 0, RWF_APPEND) == -1 && errno == EOPNOTSUPP, "RWF_APPEND refused");
    ok("preadv2 pwritev2");

    /* statx, by path and by descriptor. */
    struct statx sx;
    CHECK(statx(AT_FDCWD, at("v"), 0, STATX_SIZE | STATX_MODE, &sx) == 0 && sx.stx_size == 4 &&
              S_ISREG(sx.stx_mode) && (sx.stx_mode & 0777) == 0644,
          "statx");
    CHECK(statx(v, "", AT_EMPTY_PATH, STATX_SIZE, &sx) == 0 && sx.stx_size == 4, "statx fd");
    ok("statx");

    /* The pre-2.33 stat entry points. */
    CHECK(__xstat(1, at("v"), &st) == 0 && st.st_size == 4, "__xstat");
    CHECK(__lxstat(1, at("v"), &st) == 0 && S_ISREG(st.st_mode), "__lxstat");
    CHECK(__fxstat(1, v, &st) == 0 && st.st_size == 4, "__fxstat");
    CHECK(__fxstatat(1, AT_FDCWD, at("v"), &st, 0) == 0 && st.st_size == 4, "__fxstatat");
    ok("__xstat");

    /* copy_file_range, sendfile and splice between library and kernel descriptors. */
    int kf = memfd_create("edge", 0);
    CHECK(kf >= 0 && write(kf, "kernel data", 11) == 11, "memfd");
    int lf = open(at("copy"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    loff_t from = 0;
    CHECK(lf >= 0 && copy_file_range(kf, &from, lf, NULL, 11, 0) == 11 && from == 11 &&
              lseek(lf, 0, SEEK_CUR) == 11,
          "copy_file_range kernel to library");
    CHECK(pread(lf, buf, 11, 0) == 11 && memcmp(buf, "kernel data", 11) == 0, "copied");
    int kf2 = memfd_create("edge2", 0);
    off_t lfo = 7;
    CHECK(kf2 >= 0 && sendfile(kf2, lf, &lfo, 4) == 4 && lfo == 11, "sendfile library to kernel");
    CHECK(pread(kf2, buf, 4, 0) == 4 && memcmp(buf, "data", 4) == 0, "sent");
    int pp[2];
    CHECK(pipe(pp) == 0, "pipe");
    loff_t lo = 0;
    CHECK(splice(lf, &lo, pp[1], NULL, 6, 0) == 6 && lo == 6, "splice library to pipe");
    CHECK(read(pp[0], buf, 6) == 6 && memcmp(buf, "kernel", 6) == 0, "spliced");
    CHECK(write(pp[1], "PIPED", 5) == 5, "into the pipe");
    lo = 0;
    CHECK(splice(pp[0], NULL, lf, &lo, 5, 0) == 5 && lo == 5, "splice pipe to library");
    CHECK(pread(lf, buf, 11, 0) == 11 && memcmp(buf, "PIPEDl data", 11) == 0, "spliced in");
    close(pp[0]);
    close(pp[1]);
    close(kf);
    close(kf2);
    close(lf);
    ok("copy_file_range sendfile splice");

    /* Two writable shared mappings and the calls on the file stay coherent. */
    int g2 = open(at("m2"), O_CREAT | O_RDWR, 0644);
    CHECK(g2 >= 0 && ftruncate(g2, 4096) == 0, "m2");
    char *m1 = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g2, 0);
    int g3 = open(at("m2"), O_RDWR);
    char *m2 = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g3, 0);
    CHECK(m1 != MAP_FAILED && m2 != MAP_FAILED && m1 != m2, "two maps");
    memcpy(m1 + 100, "one", 3);
    CHECK(memcmp(m2 + 100, "one", 3) == 0, "a store in one map shows in the other");
    CHECK(pwrite(g3, "two", 3, 100) == 3 && memcmp(m1 + 100, "two", 3) == 0, "pwrite shows");
    CHECK(munmap(m1, 4096) == 0 && munmap(m2, 4096) == 0, "unmap");
    close(g2);
    close(g3);
    ok("shared mappings");

    /* stdio: fdopen, formatted I/O, freopen of stdout onto a library file. */
    int sfd = open(at("fd.txt"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    FILE *sf = fdopen(sfd, "w+");
    CHECK(sf && fprintf(sf, "%d %s\n", 7, "seven") > 0 && fseek(sf, 0, SEEK_SET) == 0, "fdopen");
    int seven = 0;
    char word[16] = {0};
    CHECK(fscanf(sf, "%d %15s", &seven, word) == 2 && seven == 7 && strcmp(word, "seven") == 0,
          "fscanf");
    CHECK(fclose(sf) == 0, "fclose");
    fflush(stdout);
    int saved1 = dup(1);
    CHECK(freopen(at("freopen.txt"), "w", stdout) != NULL, "freopen stdout");
    printf("to the file\n");
    fflush(stdout);
    CHECK(dup2(saved1, 1) == 1 && close(saved1) == 0, "stdout back");
    int fr = open(at("freopen.txt"), O_RDONLY);
    memset(buf, 0, sizeof buf);
    CHECK(read(fr, buf, sizeof buf) == 12 && strcmp(buf, "to the file\n") == 0, "freopen: %s", buf);
    close(fr);
    ok("stdio family");

    /* mkostemp with O_CLOEXEC. */
    snprintf(tmpl, sizeof tmpl, "%s/oXXXXXX", M);
    int mo = mkostemp(tmpl, O_CLOEXEC);
    CHECK(mo >= 0 && fcntl(mo, F_GETFD) == FD_CLOEXEC && stat(tmpl, &st) == 0 &&
              major(st.st_dev) == 0x7462,
          "mkostemp %s", tmpl);
    close(mo);
    ok("mkostemp");

    /* lockf: F_LOCK/F_TLOCK/F_ULOCK, and F_TEST/F_TLOCK against another description's lock. */
    int lk = open(at("v"), O_RDWR), other = open(at("v"), O_RDWR);
    CHECK(lockf(lk, F_LOCK, 0) == 0 && lockf(lk, F_TLOCK, 0) == 0 && lockf(lk, F_ULOCK, 0) == 0,
          "lockf");
    struct flock held = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    CHECK(fcntl(other, F_OFD_SETLK, &held) == 0, "OFD lock");
    CHECK(lockf(lk, F_TEST, 0) == -1 && (errno == EACCES || errno == EAGAIN), "lockf F_TEST");
    CHECK(lockf(lk, F_TLOCK, 0) == -1 && (errno == EACCES || errno == EAGAIN), "lockf F_TLOCK");
    close(other);
    CHECK(lockf(lk, F_TLOCK, 0) == 0 && lockf(lk, F_ULOCK, 0) == 0, "lockf after the unlock");
    close(lk);
    close(v);
    ok("lockf");

    /* Sizes and flags that are not constants: a _FORTIFY_SOURCE build calls the __*_chk and
     * __open_2 entry points for these. */
    volatile size_t n4 = 4;
    volatile int rdonly = O_RDONLY;
    int fo = open(at("v"), rdonly);
    CHECK(fo >= 0 && read(fo, buf, n4) == 4 && memcmp(buf, "abcd", 4) == 0, "open, read");
    CHECK(pread(fo, buf, n4, 1) == 3 && memcmp(buf, "bcd", 3) == 0, "pread");
    int fa = openat(AT_FDCWD, at("v"), rdonly);
    CHECK(fa >= 0 && close(fa) == 0 && close(fo) == 0, "openat");
    CHECK(symlink("v", at("vlink")) == 0 && readlink(at("vlink"), buf, n4) == 1 && buf[0] == 'v',
          "readlink");
    char want[PATH_MAX], rp[PATH_MAX], cw[PATH_MAX];
    snprintf(want, sizeof want, "%s/v", M);
    CHECK(realpath(at("vlink"), rp) && strcmp(rp, want) == 0, "realpath %s", rp);
    CHECK(chdir(M) == 0 && getcwd(cw, n4 * 1024) && strcmp(cw, M) == 0 && chdir("/") == 0,
          "getcwd %s", cw);
    ok("fortified entry points");

    /* getwd and telldir/seekdir. */
    CHECK(chdir(M) == 0, "chdir M");
    char wd[PATH_MAX];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(getwd(wd) && strcmp(wd, M) == 0, "getwd %s", wd);
#pragma GCC diagnostic pop
    CHECK(chdir("/") == 0, "chdir /");
    DIR *sd = opendir(M);
    CHECK(sd && readdir(sd), "opendir M");
    long pos = telldir(sd);
    struct dirent *e1 = readdir(sd);
    CHECK(e1 != NULL, "readdir");
    char first[256];
    snprintf(first, sizeof first, "%s", e1->d_name);
    readdir(sd);
    seekdir(sd, pos);
    e1 = readdir(sd);
    CHECK(e1 && strcmp(e1->d_name, first) == 0, "seekdir back to %s", first);
    closedir(sd);
    ok("getwd telldir seekdir");

    /* A path pointer to unmapped memory is EFAULT, as the kernel says, not a fault in the shim;
       so is a string that runs from a mapped page into an unmapped one. */
    long pg = sysconf(_SC_PAGESIZE);
    char *two = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(two != MAP_FAILED && munmap(two + pg, pg) == 0, "a page, then a hole");
    char *gone = two + pg, *runs_on = two + pg - 8;
    memset(runs_on, 'a', 8);
    CHECK(chdir(M) == 0, "chdir M");
    errno = 0;
    CHECK(open(gone, O_RDONLY) == -1 && errno == EFAULT, "open: %s", strerror(errno));
    errno = 0;
    CHECK(open(runs_on, O_RDONLY) == -1 && errno == EFAULT, "open across: %s", strerror(errno));
    errno = 0;
    CHECK(mkdir(gone, 0755) == -1 && errno == EFAULT, "mkdir: %s", strerror(errno));
    errno = 0;
    CHECK(rename(gone, at("f")) == -1 && errno == EFAULT, "rename: %s", strerror(errno));
    errno = 0;
    CHECK(link(at("f"), gone) == -1 && errno == EFAULT, "link: %s", strerror(errno));
    errno = 0;
    CHECK(symlink(gone, at("s")) == -1 && errno == EFAULT, "symlink: %s", strerror(errno));
    /* The same for a page the program made unreadable. */
    char *none = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(none != MAP_FAILED, "two pages");
    memset(none, 'b', 2 * pg);
    CHECK(mprotect(none + pg, pg, PROT_NONE) == 0, "PROT_NONE");
    errno = 0;
    CHECK(open(none + pg, O_RDONLY) == -1 && errno == EFAULT, "open PROT_NONE: %s",
          strerror(errno));
    errno = 0;
    CHECK(mkdir(none + pg - 8, 0755) == -1 && errno == EFAULT, "mkdir into PROT_NONE: %s",
          strerror(errno));
    CHECK(chdir("/") == 0 && munmap(two, pg) == 0 && munmap(none, 2 * pg) == 0, "chdir /");
    ok("unmapped path pointers");
    printf("all edge cases passed\n");
    return 0;
}
