/*
 * Seed 001's global sum from a path specification (examples/paths/gsum.toml): the tree
 * is the one its paths merge into, each host's partial sum a commnode, the element's
 * sum the front-end, and the links carry the stages the paths name. The back-ends are
 * IntegerAddition's (integer_addition_be).
 *
 *   paths_fe PATHS_FILE BACKEND_EXE
 *
 * Prints "global sum: S (N back-ends)" per round and "paths: OK".
 */
#include "integer_addition.h"

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_stream *s;
    vargr_packet *p;
    uint32_t n;
    int32_t sum, round, i;

    if (argc != 3) {
        fprintf(stderr, "usage: %s PATHS_FILE BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create_from_paths(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_num_backends(net, &n));
    CHECK(vargr_network_open_paths_stream(net, argv[1], NULL, &s));
    for (round = 1; round <= 3; round++) {
        /* Each back-end answers round * i for i = 0, 1: wave i sums to round * i * n. */
        CHECK(vargr_stream_send(s, PROT_SUM, "%d %d", round, 2));
        for (i = 0; i < 2; i++) {
            CHECK(vargr_stream_recv_timeout(s, 30000, &p));
            CHECK(vargr_packet_unpack(p, "%d", &sum));
            vargr_packet_free(p);
            if (sum != round * i * (int32_t)n) {
                fprintf(stderr, "round %d wave %d: %d, expected %d\n", round, i, sum,
                        round * i * (int32_t)n);
                return 1;
            }
        }
        printf("global sum: %d (%u back-ends)\n", sum, n);
    }
    vargr_stream_free(s);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("paths: OK\n");
    return 0;
}
