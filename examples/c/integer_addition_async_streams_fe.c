/*
 * IntegerAddition with a notification descriptor per stream (MRNet's
 * IntegerAddition_FE_asyncStreams) rewritten for vargr: two summing streams, each
 * asked for its own waves, and one select() over both streams' descriptors. Uses
 * integer_addition_be.
 *
 *   integer_addition_async_streams_fe TOPOLOGY BACKEND_EXE
 *
 * Prints one line per wave ("[stream 1] ..." / "[stream 2] ...") and
 * "integer_addition_async_streams: OK" when every wave of both streams was right.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/select.h>

#include "integer_addition.h"

struct summed {
    vargr_stream *s;
    int fd;
    int32_t send_val;
    int32_t next; /* the wave expected next */
};

/* Takes every wave waiting on one stream; returns the number of wrong ones. */
static int drain(struct summed *st, int which, uint32_t num_backends)
{
    vargr_packet *p;
    int32_t recv_val;
    int rc, failures = 0;
    while ((rc = vargr_stream_recv_timeout(st->s, 0, &p)) == VARGR_OK) {
        int32_t expected = (int32_t)num_backends * st->next * st->send_val;
        CHECK(vargr_packet_unpack(p, "%d", &recv_val));
        vargr_packet_free(p);
        printf("[stream %d] Iteration %d: %s! recv_val(%d) %s %d*%d*%u=%d\n", which, st->next,
               recv_val == expected ? "Success" : "Failure", recv_val,
               recv_val == expected ? "==" : "!=", st->send_val, st->next, num_backends,
               expected);
        failures += recv_val != expected;
        st->next++;
    }
    if (rc != VARGR_ERR_TIMEOUT)
        CHECK(rc);
    return failures;
}

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_communicator *comm_bc;
    struct summed st[2] = {{NULL, -1, 32, 0}, {NULL, -1, 16, 0}};
    uint32_t num_backends;
    int32_t num_iters = 5;
    int rc, k, waits = 0, failures = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    for (k = 0; k < 2; k++) {
        CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0,
                                        &st[k].s));
        CHECK(vargr_stream_send(st[k].s, PROT_SUM, "%d %d", st[k].send_val, num_iters));
        CHECK(vargr_stream_notification_fd(st[k].s, &st[k].fd));
    }

    while (st[0].next < num_iters || st[1].next < num_iters) {
        fd_set readfds;
        struct timeval timeout;
        int max_fd = st[0].fd > st[1].fd ? st[0].fd : st[1].fd;
        FD_ZERO(&readfds);
        FD_SET(st[0].fd, &readfds);
        FD_SET(st[1].fd, &readfds);
        timeout.tv_sec = 5;
        timeout.tv_usec = 0;
        rc = select(max_fd + 1, &readfds, NULL, NULL, &timeout);
        if (rc < 0) {
            perror("select");
            return 1;
        }
        if (rc == 0) {
            fprintf(stderr, "FE: no data within 5 s\n");
            if (++waits == 6)
                return 1;
            continue;
        }
        for (k = 0; k < 2; k++)
            if (FD_ISSET(st[k].fd, &readfds))
                failures += drain(&st[k], k + 1, num_backends);
    }

    for (k = 0; k < 2; k++)
        vargr_stream_free(st[k].s);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("integer_addition_async_streams: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
