/*
 * FaultRecovery, back-end (MRNet's example) rewritten for vargr: sends its waves
 * staggered in time, then answers the minimum and maximum it sent. When its commnode
 * dies it is adopted by an ancestor by itself (vargr's default recovery, as MRNet's):
 * nothing here handles the fault.
 */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "fault_recovery.h"

int main(void)
{
    vargr_backend *be;
    vargr_packet *p;
    uint32_t rank, stream, iters, gap_ms, i, v, min_val = UINT32_MAX, max_val = 0;
    int32_t tag;
    int rc;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    while ((rc = vargr_backend_recv(be, &p)) == VARGR_OK) {
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        switch (tag) {
        case PROT_START: {
            struct timespec gap;
            CHECK(vargr_packet_unpack(p, "%ud %ud", &iters, &gap_ms));
            gap.tv_sec = gap_ms / 1000;
            gap.tv_nsec = (long)(gap_ms % 1000) * 1000000L;
            for (i = 0; i < iters; i++) {
                v = fr_value(rank, i);
                min_val = v < min_val ? v : min_val;
                max_val = v > max_val ? v : max_val;
                CHECK(vargr_backend_send(be, stream, PROT_WAVE, "%ud", v));
                nanosleep(&gap, NULL); /* stagger the waves */
            }
            break;
        }
        case PROT_CHECK_MIN:
            CHECK(vargr_backend_send(be, stream, tag, "%ud", min_val));
            break;
        case PROT_CHECK_MAX:
            CHECK(vargr_backend_send(be, stream, tag, "%ud", max_val));
            break;
        default:
            fprintf(stderr, "BE %u: unknown tag %d\n", rank, tag);
            break;
        }
        vargr_packet_free(p);
    }
    vargr_backend_free(be);
    if (rc != VARGR_ERR_CLOSED) {
        fprintf(stderr, "BE %u: %s\n", rank, vargr_last_error());
        return 1;
    }
    return 0;
}
