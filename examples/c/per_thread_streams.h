/* Tags and values shared by the PerThreadStreams front-end and back-end. */
#ifndef PER_THREAD_STREAMS_H
#define PER_THREAD_STREAMS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vargr.h>

enum {
    PROT_START = 200, /* "%ud": iterations; back-ends send that many waves "%ud" */
    PROT_WAVE,        /* a back-end's value for one wave */
    PROT_REG_MAX,     /* "": this stream is the back-end's max stream (the thread's) */
    PROT_REG_MIN,
    PROT_REG_SUM,
    PROT_REG_ACK,     /* "%d": the back-end registered its three streams */
    PROT_CHECK_MAX,   /* "": each back-end's thread answers its maximum "%ud" */
    PROT_CHECK_MIN,
    PROT_CHECK_SUM
};

/* Back-end `rank`'s value in wave `i`: what both sides compute. */
static inline uint32_t pts_value(uint32_t rank, uint32_t i)
{
    return (rank * 37u + i * 53u) % 100u;
}

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
