/* Records 100 frames of 4 KiB with tailbound's default mode, finishes, verifies, and checks what
 * verify found. Usage: record OUTPUT. Exit status 0 when everything matches. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tailbound.h"

static int fail(const char *what) {
    char message[512];
    tb_last_error(message, sizeof message);
    fprintf(stderr, "%s: %s\n", what, message);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTPUT\n", argv[0]);
        return 2;
    }
    tb_recorder *r = tb_recorder_create(argv[1], "allocation=zero-fill,flush=pipelined,"
                                                 "flush-every=64KiB,expected-size=1MiB");
    if (r == NULL) return fail("tb_recorder_create");

    uint8_t record[4096];
    for (uint64_t i = 0; i < 100; i++) {
        memset(record, (int)(i & 0xff), sizeof record);
        memcpy(record, &i, sizeof i);
        if (tb_recorder_write(r, record, sizeof record) != TB_OK) return fail("tb_recorder_write");
    }
    if (tb_recorder_finish(r) != TB_OK) return fail("tb_recorder_finish");

    tb_verify_report report;
    if (tb_record_verify(argv[1], &report) != TB_OK) return fail("tb_record_verify");
    printf("frames %llu, valid bytes %llu of %llu, last sequence %lld\n",
           (unsigned long long)report.frames, (unsigned long long)report.valid_bytes,
           (unsigned long long)report.bytes, (long long)report.last_sequence);
    if (report.frames != 100 || report.last_sequence != 99 || report.valid_bytes != report.bytes) {
        fprintf(stderr, "verify does not match what was recorded\n");
        return 1;
    }
    /* Errors come back as codes with a message. */
    if (tb_recorder_create(argv[1], "allocation=sideways") != NULL) return 1;
    char message[256];
    size_t n = tb_last_error(message, sizeof message);
    if (n == 0 || strstr(message, "sideways") == NULL) return 1;
    printf("bad options rejected: %s\n", message);
    return 0;
}
