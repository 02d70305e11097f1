/*
 * IntegerAddition with a time-out sync filter (MRNet's IntegerAddition_FE_timeout)
 * rewritten for vargr: the stream's synchronization gets its time-out as a filter
 * parameter (MRNet's set_FilterParameters(FILTER_UPSTREAM_SYNC, "%ud", 250)), so a
 * wave is released when complete or 250 ms after its first packet, whichever comes
 * first; partial waves may come, and the front-end checks the total. It waits on the
 * network's notification descriptor. Uses integer_addition_be.
 *
 *   integer_addition_timeout_fe TOPOLOGY BACKEND_EXE [NETWORKS]
 *
 * With NETWORKS > 1 it does it again on as many networks, one after the other.
 * Prints "FE: Success" per network and "integer_addition_timeout: OK".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/select.h>

#include "integer_addition.h"

static int one_network(const char *topology, const char **be_argv)
{
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *add;
    vargr_packet *p;
    uint32_t num_backends, stream;
    int32_t send_val = 32, num_iters = 5, i, recv_val, total = 0, expected = 0;
    int fd, rc, waits = 0;

    CHECK(vargr_network_create(topology, be_argv, NULL, &net));
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &add));
    CHECK(vargr_stream_set_filter_parameters(add, VARGR_FILTER_SYNC, "250"));
    CHECK(vargr_stream_send(add, PROT_SUM, "%d %d", send_val, num_iters));
    for (i = 0; i < num_iters; i++)
        expected += i * send_val * (int32_t)num_backends;

    CHECK(vargr_network_notification_fd(net, &fd));
    while (total < expected) {
        fd_set readfds;
        struct timeval timeout;
        FD_ZERO(&readfds);
        FD_SET(fd, &readfds);
        timeout.tv_sec = 1;
        timeout.tv_usec = 0;
        rc = select(fd + 1, &readfds, NULL, NULL, &timeout);
        if (rc < 0) {
            perror("select");
            return 1;
        }
        if (rc == 0) {
            fprintf(stderr, "FE: no data within 1 s\n");
            if (++waits == 30)
                break;
            continue;
        }
        while ((rc = vargr_network_recv_timeout(net, 0, &stream, &p)) == VARGR_OK) {
            CHECK(vargr_packet_unpack(p, "%d", &recv_val));
            vargr_packet_free(p);
            total += recv_val;
        }
        if (rc != VARGR_ERR_TIMEOUT)
            CHECK(rc);
    }
    if (total == expected)
        printf("FE: Success\n");
    else
        printf("FE: Failure: total sum %d != expected sum %d\n", total, expected);

    vargr_stream_free(add);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    return total != expected;
}

int main(int argc, char **argv)
{
    const char *be_argv[2];
    int nets = 1, n, failures = 0;

    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE [NETWORKS]\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    if (argc == 4)
        nets = atoi(argv[3]);
    for (n = 1; n <= nets; n++) {
        if (nets > 1)
            printf("---------- Network Instance %d ----------\n", n);
        failures += one_network(argv[1], be_argv);
    }
    printf("integer_addition_timeout: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
