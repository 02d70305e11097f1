/* Tags of the MRNet-API test's front-end (mrnet_fe.c) and back-end (mrnet_be.c). */
#ifndef MRNET_TEST_H
#define MRNET_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vargr.h>

enum {
    TAG_ECHO = 1,    /* "%d": back-ends send it back on the stream */
    TAG_THREADS,     /* "%aud": stream ids; a thread per stream answers two multicasts */
    TAG_STREAM_REPLY /* what those threads answer: "%d" 10 * rank + k */
};

#define CHECK(call)                                                                      \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != VARGR_OK) {                                                           \
            fprintf(stderr, "%s:%d: %s failed with %s: %s\n", __FILE__, __LINE__, #call, \
                    vargr_status_name(rc_), vargr_last_error());                         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
