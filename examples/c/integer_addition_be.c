/*
 * IntegerAddition, back-end: MRNet's example rewritten for vargr.
 *
 * Started by the front-end (one process per leaf of the topology): joins the tree,
 * answers each request on the stream it came from, and ends when the front-end shuts
 * the network down (vargr_backend_recv returns VARGR_ERR_CLOSED).
 */
#include <stdint.h>

#include "integer_addition.h"

int main(void)
{
    vargr_backend *be;
    vargr_packet *p;
    uint32_t rank, stream;
    int32_t tag, val, iters, i;
    int rc;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    while ((rc = vargr_backend_recv(be, &p)) == VARGR_OK) {
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        switch (tag) {
        case PROT_SUM:
            CHECK(vargr_packet_unpack(p, "%d %d", &val, &iters));
            for (i = 0; i < iters; i++)
                CHECK(vargr_backend_send(be, stream, tag, "%d", val * i));
            break;
        case PROT_ARRAY: {
            double arr[2];
            arr[0] = rank;
            arr[1] = 2.0;
            CHECK(vargr_backend_send(be, stream, tag, "%d %alf", 1, arr, (size_t)2));
            break;
        }
        case PROT_RANK:
            CHECK(vargr_backend_send(be, stream, tag, "%ud", rank));
            break;
        default:
            fprintf(stderr, "back-end %u: unknown tag %d\n", rank, tag);
            break;
        }
        vargr_packet_free(p);
    }
    vargr_backend_free(be);
    if (rc != VARGR_ERR_CLOSED) {
        fprintf(stderr, "back-end %u: %s\n", rank, vargr_last_error());
        return 1;
    }
    return 0;
}
