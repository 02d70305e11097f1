/*
 * IntegerAddition, front-end: MRNet's example rewritten for vargr.
 *
 * Starts a tree of back-ends, multicasts a value and an iteration count on a stream
 * whose up-filter sums, and checks each of the summed waves. Then sums an array field,
 * and asks two back-ends for the maximum of their ranks over a sub-communicator.
 *
 *   integer_addition_fe TOPOLOGY BACKEND_EXE [FILTER_SO]
 *
 * TOPOLOGY is an MRNet topology file or a spec such as kary:2@4. With FILTER_SO (e.g.
 * examples/filter-plugin/libint_filters.so) the sum is done by that plugin's
 * "plugin_sum" filter, loaded like MRNet's load_FilterFunc; otherwise by the built-in
 * "sum". Commnodes run the `vargr` binary ($VARGR_COMMNODE, or vargr on the PATH).
 * Prints one line per check and "integer_addition: OK" when all passed.
 */
#include <stdint.h>

#include "integer_addition.h"

int main(int argc, char **argv)
{
    const char *filter = "sum";
    const char *be_argv[2];
    vargr_options *opts;
    vargr_network *net;
    vargr_communicator *comm_bc, *ends;
    vargr_stream *add, *arrays, *ranks;
    vargr_packet *p;
    uint32_t num_backends, pair[2];
    int32_t send_val = 32, num_iters = 5, i, recv_val, count, tag;
    double *arr;
    size_t len;
    uint32_t max_rank;
    int failures = 0;

    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE [FILTER_SO]\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;

    CHECK(vargr_options_create(&opts));
    if (argc == 4) {
        CHECK(vargr_options_load_filter(opts, argv[3], "plugin_sum"));
        filter = "plugin_sum";
    }
    CHECK(vargr_network_create(argv[1], be_argv, opts, &net));
    vargr_options_free(opts);

    /* A broadcast communicator contains all the back-ends. */
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    CHECK(vargr_network_open_stream(net, comm_bc, filter, VARGR_SYNC_WAIT_FOR_ALL, 0, &add));
    printf("network: %u back-ends, filter %s\n", num_backends, filter);

    /* Ask the back-ends for num_iters waves of integers. */
    CHECK(vargr_stream_send(add, PROT_SUM, "%d %d", send_val, num_iters));
    for (i = 0; i < num_iters; i++) {
        int32_t expected = (int32_t)num_backends * i * send_val;
        CHECK(vargr_stream_recv_timeout(add, 30000, &p));
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_unpack(p, "%d", &recv_val));
        vargr_packet_free(p);
        if (tag == PROT_SUM && recv_val == expected) {
            printf("Iteration %d: Success! recv_val(%d) == %d*%d*%u=%d\n", i, recv_val,
                   send_val, i, num_backends, expected);
        } else {
            printf("Iteration %d: Failure! recv_val(%d) != %d*%d*%u=%d (tag %d)\n", i,
                   recv_val, send_val, i, num_backends, expected, tag);
            failures++;
        }
    }

    /* Arrays: each back-end sends 1 and {rank, 2.0}; the sum adds element-wise. */
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &arrays));
    CHECK(vargr_stream_send(arrays, PROT_ARRAY, ""));
    CHECK(vargr_stream_recv_timeout(arrays, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%d %alf", &count, &arr, &len));
    vargr_packet_free(p);
    if (count == (int32_t)num_backends && len == 2 &&
        arr[0] == num_backends * (num_backends - 1) / 2.0 && arr[1] == 2.0 * num_backends) {
        printf("Arrays: Success! count %d, sums {%g, %g}\n", count, arr[0], arr[1]);
    } else {
        printf("Arrays: Failure! count %d, %zu sums\n", count, len);
        failures++;
    }
    vargr_free(arr);

    /* A sub-communicator: the first and the last back-end, reduced with max. */
    pair[0] = 0;
    pair[1] = num_backends - 1;
    CHECK(vargr_network_communicator(net, pair, 2, &ends));
    CHECK(vargr_network_open_stream(net, ends, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &ranks));
    CHECK(vargr_stream_send(ranks, PROT_RANK, ""));
    CHECK(vargr_stream_recv_timeout(ranks, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%ud", &max_rank));
    vargr_packet_free(p);
    if (max_rank == num_backends - 1) {
        printf("Max rank: Success! %u\n", max_rank);
    } else {
        printf("Max rank: Failure! %u != %u\n", max_rank, num_backends - 1);
        failures++;
    }

    /* Shutting the network down ends every back-end's receive loop. */
    vargr_stream_free(add);
    vargr_stream_free(arrays);
    vargr_stream_free(ranks);
    vargr_communicator_free(comm_bc);
    vargr_communicator_free(ends);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("integer_addition: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
