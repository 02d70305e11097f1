/* Tags of the tree test's front-end (tree_fe.c) and back-end (tree_be.c). */
#ifndef TREE_H
#define TREE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vargr.h>

enum {
    TAG_ECHO = 1, /* back-ends send the packet back unchanged (through the *_args forms) */
    TAG_RANK,     /* back-ends answer "%ud": their rank */
    TAG_P2P,      /* back-end r sends TAG_P2P_MSG "%ud %ud" (r, stream) to back-end r+1 */
    TAG_P2P_MSG,  /* the receiver answers "%d" 10 * sender + itself on that stream */
    TAG_OBSERVE,  /* "%ud" last: observe element OBSERVED until version last, answer
                     "%ud %d": values seen, 1 if versions grew and values were right */
    TAG_PUBLISH,  /* "%uld" last: back-end 0 publishes versions 1..last of element
                     PUBLISHED ({version, ~version}); every back-end answers "%ud" rank */
};

enum { OBSERVED = 4, PUBLISHED = 5, OBSERVED_LEN = 16 };

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
