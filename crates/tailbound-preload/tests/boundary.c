/*
 * Run under libtailbound_preload.so with TAILBOUND_FAILPOINTS=shim.write: the first write to a
 * file in the mount (argv[1]) panics inside the shim. The call must fail with EIO, the program
 * must go on, later calls on the pool must fail with EIO, and files outside the mount (in
 * argv[2]) must still work. Exits 1 at the first check that fails, naming it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED line %d: %s (errno %d %s): %s\n", __LINE__, #cond, errno,     \
                    strerror(errno), what);                                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: boundary MOUNT OUTSIDE_DIR");
    char path[4096];

    snprintf(path, sizeof path, "%s/first", argv[1]);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0, "opening a file in the mount");

    errno = 0;
    ssize_t n = write(fd, "panics", 6);
    CHECK(n == -1 && errno == EIO, "the write that panics fails with EIO");
    fprintf(stderr, "ok the panicking write failed with EIO\n");

    errno = 0;
    n = write(fd, "again", 5);
    CHECK(n == -1 && errno == EIO, "a later write on the poisoned pool fails with EIO");
    snprintf(path, sizeof path, "%s/second", argv[1]);
    errno = 0;
    CHECK(open(path, O_CREAT | O_WRONLY, 0644) == -1 && errno == EIO,
          "a later open on the poisoned pool fails with EIO");
    fprintf(stderr, "ok later calls on the pool fail with EIO\n");

    snprintf(path, sizeof path, "%s/outside", argv[2]);
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
