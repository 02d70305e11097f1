/* Tags shared by the HeterogeneousFilters front-end and back-end. */
#ifndef HETERO_FILTERS_H
#define HETERO_FILTERS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vargr.h>

enum {
    PROT_INIT = 400, /* "%s %d": file, block size; back-ends answer their block count "%d" */
    PROT_SEARCH      /* "%d": blocks; back-ends send that many "%s" blocks ("" past theirs) */
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
