/*
 * IntegerAddition, asynchronous front-end (MRNet's IntegerAddition_FE_async) rewritten
 * for vargr: instead of blocking in a receive, the front-end waits in select() on the
 * network's notification descriptor, as an event loop would, and then takes every
 * result that is there without blocking. Uses integer_addition_be.
 *
 *   integer_addition_async_fe TOPOLOGY BACKEND_EXE
 *
 * The descriptor is level-triggered: it stays readable while results wait, so there is
 * no clearing step (MRNet's clear_DataNotificationFd). Prints one line per wave and
 * "integer_addition_async: OK" when every wave was right.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/select.h>

#include "integer_addition.h"

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *add;
    vargr_packet *p;
    uint32_t num_backends, stream;
    int32_t send_val = 32, num_iters = 5, i = 0, recv_val;
    int fd, rc, waits = 0, failures = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &add));
    CHECK(vargr_stream_send(add, PROT_SUM, "%d %d", send_val, num_iters));

    CHECK(vargr_network_notification_fd(net, &fd));
    while (i < num_iters) {
        fd_set readfds;
        struct timeval timeout;
        FD_ZERO(&readfds);
        FD_SET(fd, &readfds);
        timeout.tv_sec = 5;
        timeout.tv_usec = 0;
        rc = select(fd + 1, &readfds, NULL, NULL, &timeout);
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
        /* Everything that is there, without blocking. */
        while ((rc = vargr_network_recv_timeout(net, 0, &stream, &p)) == VARGR_OK) {
            int32_t expected = (int32_t)num_backends * i * send_val;
            CHECK(vargr_packet_unpack(p, "%d", &recv_val));
            vargr_packet_free(p);
            printf("Iteration %d: %s! recv_val(%d) %s %d*%d*%u=%d\n", i,
                   recv_val == expected ? "Success" : "Failure", recv_val,
                   recv_val == expected ? "==" : "!=", send_val, i, num_backends, expected);
            failures += recv_val != expected;
            i++;
        }
        if (rc != VARGR_ERR_TIMEOUT)
            CHECK(rc);
    }

    vargr_stream_free(add);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("integer_addition_async: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
