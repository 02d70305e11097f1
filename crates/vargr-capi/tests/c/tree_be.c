/* The tree test's back-end: echoes packets, reports its rank, and passes messages to
 * its neighbour back-end. Ends when the network is shut down. */
#include "tree.h"

int main(void)
{
    vargr_backend *be;
    vargr_packet *p;
    uint32_t rank, n, stream, from, reply_stream;
    int32_t tag;
    int rc;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    CHECK(vargr_backend_num_backends(be, &n));
    while ((rc = vargr_backend_recv(be, &p)) == VARGR_OK) {
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        if (tag == TAG_ECHO) {
            /* Any format: unpack into vargr_args and send them back as they are. */
            const char *format;
            vargr_arg args[VARGR_MAX_FIELDS];
            uint8_t codes[VARGR_MAX_FIELDS];
            size_t nf, i;
            CHECK(vargr_packet_format(p, &format));
            CHECK(vargr_format_fields(format, codes, VARGR_MAX_FIELDS, &nf));
            CHECK(vargr_packet_unpack_args(p, format, args, nf));
            CHECK(vargr_backend_send_args(be, stream, tag, format, args, nf));
            for (i = 0; i < nf; i++)
                vargr_free((void *)args[i].ptr); /* NULL for scalars */
        } else if (tag == TAG_RANK) {
            CHECK(vargr_backend_send(be, stream, tag, "%ud", rank));
        } else if (tag == TAG_P2P) {
            CHECK(vargr_backend_send_to(be, (rank + 1) % n, TAG_P2P_MSG, "%ud %ud", rank, stream));
        } else if (tag == TAG_OBSERVE) {
            uint64_t last, have = 0, version, value[OBSERVED_LEN / 8];
            size_t len = 0;
            uint32_t values = 0;
            int ok = 1;
            CHECK(vargr_packet_unpack(p, "%uld", &last));
            /* Too small a buffer: the length needed, and the value stays cached. */
            rc = vargr_backend_observe_newer(be, OBSERVED, NULL, 30000, &version, (uint8_t *)value,
                                             4, &len);
            ok &= rc == VARGR_ERR_INVALID_ARGUMENT && len == OBSERVED_LEN;
            while (have < last) {
                CHECK(vargr_backend_observe_newer(be, OBSERVED, values ? &have : NULL, 30000,
                                                  &version, (uint8_t *)value, sizeof value, &len));
                ok &= (values == 0 || version > have) && len == OBSERVED_LEN &&
                      value[0] == version && value[1] == ~version;
                have = version;
                values++;
            }
            CHECK(vargr_backend_send(be, stream, tag, "%ud %d", values, ok));
        } else if (tag == TAG_PUBLISH) {
            uint64_t last, version;
            CHECK(vargr_packet_unpack(p, "%uld", &last));
            for (version = 1; rank == 0 && version <= last; version++) {
                uint64_t value[2] = {version, ~version};
                CHECK(vargr_backend_publish(be, PUBLISHED, version, (const uint8_t *)value,
                                            sizeof value));
            }
            CHECK(vargr_backend_send(be, stream, tag, "%ud", rank));
        } else if (tag == TAG_P2P_MSG) {
            uint32_t source;
            CHECK(vargr_packet_unpack(p, "%ud %ud", &from, &reply_stream));
            CHECK(vargr_packet_source(p, &source));
            CHECK(vargr_backend_send(be, reply_stream, TAG_P2P_MSG, "%d",
                                     source == from ? (int)(10 * from + rank) : -1000000));
        }
        vargr_packet_free(p);
    }
    vargr_backend_free(be);
    if (rc != VARGR_ERR_CLOSED) {
        fprintf(stderr, "tree_be %u: %s\n", rank, vargr_last_error());
        return 1;
    }
    return 0;
}
