/* Tags and values shared by the FaultRecovery front-end and back-end. */
#ifndef FAULT_RECOVERY_H
#define FAULT_RECOVERY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vargr.h>

enum {
    PROT_START = 300, /* "%ud %ud": iterations, ms between waves; back-ends send waves */
    PROT_WAVE,        /* "%ud": a back-end's value for one wave */
    PROT_CHECK_MIN,   /* "": back-ends answer their minimum "%ud" */
    PROT_CHECK_MAX    /* "": back-ends answer their maximum "%ud" */
};

/* Back-end `rank`'s value in wave `i`. */
static inline uint32_t fr_value(uint32_t rank, uint32_t i)
{
    return (rank + 1u) * 1000u + i;
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
