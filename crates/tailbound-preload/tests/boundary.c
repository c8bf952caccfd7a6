/*
 * Run under libtailbound_preload.so with TAILBOUND_FAILPOINTS=shim.<symbol>: the one call of
 * family argv[1] below panics inside the shim. The call must fail the way its libc function
 * fails (-1, NULL, MAP_FAILED or an error number) with EIO, the program must go on, later calls
 * on the pool must fail with EIO, and files outside the mount (in argv[3]) must still work.
 * argv[2] is the mount. Exits 1 at the first check that fails, naming it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED line %d: %s (errno %d %s): %s\n", __LINE__, #cond, errno,     \
                    strerror(errno), what);                                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *thread_body(void *arg) { return arg; }

/* The call of `family` that panics; true if it failed with EIO as its libc function fails. */
static int panicking_call(const char *family, const char *mount, const char *first, int fd) {
    char path[4096];
    errno = 0;
    if (strcmp(family, "io") == 0)
        return write(fd, "panics", 6) == -1 && errno == EIO;
    if (strcmp(family, "stat") == 0) {
        struct stat st;
        return stat(first, &st) == -1 && errno == EIO;
    }
    if (strcmp(family, "paths") == 0) {
        snprintf(path, sizeof path, "%s/dir", mount);
        return mkdir(path, 0755) == -1 && errno == EIO;
    }
    if (strcmp(family, "attrs") == 0)
        return chmod(first, 0600) == -1 && errno == EIO;
    if (strcmp(family, "xattr") == 0) {
        char value[16];
        return getxattr(first, "user.x", value, sizeof value) == -1 && errno == EIO;
    }
    if (strcmp(family, "fds") == 0)
        return fsync(fd) == -1 && errno == EIO;
    if (strcmp(family, "dirs") == 0)
        return opendir(mount) == NULL && errno == EIO;
    if (strcmp(family, "stdio") == 0)
        return fopen(first, "r") == NULL && errno == EIO;
    if (strcmp(family, "mmap") == 0)
        return mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED && errno == EIO;
    if (strcmp(family, "process") == 0) {
        umask(022);
        return errno == EIO;
    }
    if (strcmp(family, "threads") == 0) {
        pthread_t t;
        return pthread_create(&t, NULL, thread_body, NULL) == EIO;
    }
    fprintf(stderr, "unknown family %s\n", family);
    exit(2);
}

int main(int argc, char **argv) {
    CHECK(argc == 4, "usage: boundary FAMILY MOUNT OUTSIDE_DIR");
    const char *family = argv[1], *mount = argv[2];
    char first[4096], path[4096];

    snprintf(first, sizeof first, "%s/first", mount);
    int fd = open(first, O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0, "opening a file in the mount");
    if (strcmp(family, "io") != 0) {
        static char page[4096];
        CHECK(write(fd, page, sizeof page) == sizeof page, "filling the file in the mount");
    }

    CHECK(panicking_call(family, mount, first, fd), "the call that panics fails with EIO");
    fprintf(stderr, "ok the panicking call failed with EIO\n");

    errno = 0;
    ssize_t n = write(fd, "again", 5);
    CHECK(n == -1 && errno == EIO, "a later write on the poisoned pool fails with EIO");
    snprintf(path, sizeof path, "%s/second", mount);
    errno = 0;
    CHECK(open(path, O_CREAT | O_WRONLY, 0644) == -1 && errno == EIO,
          "a later open on the poisoned pool fails with EIO");
    fprintf(stderr, "ok later calls on the pool fail with EIO\n");

    snprintf(path, sizeof path, "%s/outside", argv[3]);
    int out = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    CHECK(out >= 0, "opening a file outside the mount");
    CHECK(write(out, "outside the mount", 17) == 17, "writing outside the mount");
    char buf[32] = {0};
    CHECK(pread(out, buf, sizeof buf, 0) == 17 && memcmp(buf, "outside the mount", 17) == 0,
          "reading back outside the mount");
    CHECK(close(out) == 0, "closing outside the mount");
    fprintf(stderr, "ok files outside the mount still work\n");

    close(fd);
    printf("all boundary checks passed\n");
    return 0;
}
