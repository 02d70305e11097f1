/*
 * IntegerAddition on two networks at once (MRNet's IntegerAddition_FE_concurrent)
 * rewritten for vargr: one front-end process starts two trees from the same topology,
 * asks both for their waves, and receives from them alternately. Uses
 * integer_addition_be.
 *
 *   integer_addition_concurrent_fe TOPOLOGY BACKEND_EXE
 *
 * Prints "[1] Iteration ..." and "[2] Iteration ..." per wave and
 * "integer_addition_concurrent: OK".
 */
#include <stdint.h>

#include "integer_addition.h"

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net[2];
    vargr_communicator *comm[2];
    vargr_stream *add[2];
    vargr_packet *p;
    uint32_t num_backends;
    int32_t send_val = 32, num_iters = 5, i, recv_val;
    int k, failures = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    for (k = 0; k < 2; k++) {
        CHECK(vargr_network_create(argv[1], be_argv, NULL, &net[k]));
        CHECK(vargr_network_broadcast_communicator(net[k], &comm[k]));
        CHECK(vargr_network_open_stream(net[k], comm[k], "sum", VARGR_SYNC_WAIT_FOR_ALL, 0,
                                        &add[k]));
    }
    CHECK(vargr_network_num_backends(net[0], &num_backends));
    for (k = 0; k < 2; k++)
        CHECK(vargr_stream_send(add[k], PROT_SUM, "%d %d", send_val, num_iters));

    for (i = 0; i < num_iters; i++) {
        int32_t expected = (int32_t)num_backends * i * send_val;
        for (k = 0; k < 2; k++) {
            CHECK(vargr_stream_recv_timeout(add[k], 30000, &p));
            CHECK(vargr_packet_unpack(p, "%d", &recv_val));
            vargr_packet_free(p);
            printf("[%d] Iteration %d: %s! recv_val(%d) %s %d*%d*%u=%d\n", k + 1, i,
                   recv_val == expected ? "Success" : "Failure", recv_val,
                   recv_val == expected ? "==" : "!=", send_val, i, num_backends, expected);
            failures += recv_val != expected;
        }
    }

    for (k = 0; k < 2; k++) {
        vargr_stream_free(add[k]);
        vargr_communicator_free(comm[k]);
        CHECK(vargr_network_shutdown(net[k]));
        vargr_network_free(net[k]);
    }
    printf("integer_addition_concurrent: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
