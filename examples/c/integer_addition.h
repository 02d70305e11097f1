/* Tags shared by the IntegerAddition front-end and back-end (MRNet's example). */
#ifndef INTEGER_ADDITION_H
#define INTEGER_ADDITION_H

#include <stdio.h>
#include <stdlib.h>

#include <vargr.h>

enum {
    PROT_SUM = 100, /* "%d %d": value, iterations; back-ends answer value*i, i < iterations */
    PROT_ARRAY,     /* "": back-ends answer "%d %alf": 1, {rank, 2.0} */
    PROT_RANK       /* "": back-ends answer "%ud": their rank */
};

/* Exits with vargr's message when a call fails. */
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
