/*
 * The MRNet-API test's front-end: down filters and changing a running stream's
 * filters, receiving from any stream, notification descriptors, stream handles by id,
 * per-stream receive on back-end threads, event callbacks, child pids, and the errors
 * of each.
 *
 *   mrnet_fe TOPOLOGY BACKEND_EXE FILTER_SO SYNC_SO   (prints "mrnet_test: N checks OK")
 *
 * TOPOLOGY must have one level of two commnodes with two back-ends each (1x2x4): the
 * down filter runs at the front-end and at each commnode, and per-node filters tell
 * commnode 2 from commnode 1. SYNC_SO is examples/filter-plugin/sync_filters.c built.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>

#include "mrnet.h"

static int checks, failed;

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            failed++;                                                                    \
            printf("FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,     \
                   vargr_last_error());                                                  \
        }                                                                                \
    } while (0)

static int readable(int fd, int ms)
{
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Sends v on s and returns the reduced answer. */
static int32_t echo(const vargr_stream *s, int32_t v)
{
    vargr_packet *p;
    int32_t got = -1;
    CHECK(vargr_stream_send(s, TAG_ECHO, "%d", v));
    CHECK(vargr_stream_recv_timeout(s, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%d", &got));
    vargr_packet_free(p);
    return got;
}

static int events_seen;
static void on_event(const vargr_event *ev, void *data)
{
    (void)ev;
    *(int *)data += 1;
}

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_options *opts;
    vargr_network *net;
    vargr_communicator *all;
    vargr_stream *down, *a, *b, *again = NULL, *s1, *s2, *ctl, *hetero, *kofn, *bad = NULL;
    vargr_node_filters rules[3];
    vargr_packet *p;
    uint32_t n, id_a, id_b, id, ids[2], seen_a = 0, seen_b = 0, pids[4];
    int32_t v;
    size_t npids;
    int fd_any, fd_b, fd_again, rc, i, k;

    if (argc != 5) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE FILTER_SO SYNC_SO\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_options_create(&opts));
    CHECK(vargr_options_load_filter(opts, argv[3], "int_max_plus"));
    CHECK(vargr_options_load_filter(opts, argv[4], "k_of_n"));
    CHECK(vargr_network_create(argv[1], be_argv, opts, &net));
    vargr_options_free(opts);
    CHECK(vargr_network_num_backends(net, &n));
    CHECK(vargr_network_broadcast_communicator(net, &all));

    /* Callbacks: registered, and (no fault here) never called. */
    EXPECT(vargr_network_add_event_callback(net, VARGR_EVENT_ANY, on_event, &events_seen) ==
           VARGR_OK);
    EXPECT(vargr_network_add_event_callback(net, 9, on_event, NULL) ==
               VARGR_ERR_INVALID_ARGUMENT &&
           strstr(vargr_last_error(), "vargr_event_kind"));
    EXPECT(vargr_network_add_event_callback(net, VARGR_EVENT_NODE_LOST, NULL, NULL) ==
           VARGR_ERR_INVALID_ARGUMENT);

    /* A down filter at the front-end and each commnode: v + 10 + 10 at the back-ends. */
    CHECK(vargr_network_open_stream_filters(net, all, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0,
                                            "int_max_plus:10", &down));
    EXPECT(echo(down, 5) == (int32_t)n * 25);
    /* New parameters for the down filter, then another up filter. */
    CHECK(vargr_stream_set_filter_parameters(down, VARGR_FILTER_DOWN, "100"));
    EXPECT(echo(down, 5) == (int32_t)n * 205);
    CHECK(vargr_stream_set_filter(down, VARGR_FILTER_UP, "max"));
    EXPECT(echo(down, 5) == 205);
    /* A time-out for the sync filter in milliseconds, as MRNet's "%ud" parameter. */
    CHECK(vargr_stream_set_filter_parameters(down, VARGR_FILTER_SYNC, "250"));
    EXPECT(echo(down, 1) == 201);
    CHECK(vargr_stream_set_filter(down, VARGR_FILTER_DOWN, ""));
    EXPECT(echo(down, 1) == 1);
    /* Errors change nothing. */
    EXPECT(vargr_stream_set_filter(down, 7, "max") == VARGR_ERR_INVALID_ARGUMENT &&
           strstr(vargr_last_error(), "vargr_filter_role"));
    EXPECT(vargr_stream_set_filter(down, VARGR_FILTER_UP, "no_such_filter") ==
               VARGR_ERR_INVALID_ARGUMENT &&
           strstr(vargr_last_error(), "no_such_filter"));
    EXPECT(vargr_stream_set_filter(down, VARGR_FILTER_SYNC, "sometimes") ==
           VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(vargr_stream_set_filter_parameters(down, VARGR_FILTER_DOWN, "1") ==
               VARGR_ERR_INVALID_ARGUMENT &&
           strstr(vargr_last_error(), "no down filter"));
    EXPECT(vargr_stream_set_filter(down, VARGR_FILTER_UP, NULL) == VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(echo(down, 2) == 2);

    /* Receive from any stream: both streams' results, each named. */
    CHECK(vargr_network_open_stream(net, all, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &a));
    CHECK(vargr_network_open_stream(net, all, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &b));
    CHECK(vargr_stream_id(a, &id_a));
    CHECK(vargr_stream_id(b, &id_b));
    CHECK(vargr_network_notification_fd(net, &fd_any));
    CHECK(vargr_stream_notification_fd(b, &fd_b));
    EXPECT(!readable(fd_any, 0) && !readable(fd_b, 0));
    CHECK(vargr_stream_send(a, TAG_ECHO, "%d", 3));
    EXPECT(readable(fd_any, 30000));
    EXPECT(readable(fd_any, 0)); /* level-triggered: until received */
    CHECK(vargr_stream_send(b, TAG_ECHO, "%d", 4));
    EXPECT(readable(fd_b, 30000));
    for (i = 0; i < 2; i++) {
        CHECK(vargr_network_recv(net, &id, &p));
        CHECK(vargr_packet_unpack(p, "%d", &v));
        vargr_packet_free(p);
        if (id == id_a)
            seen_a = (v == 3 * (int32_t)n);
        else if (id == id_b)
            seen_b = (v == 4);
    }
    EXPECT(seen_a && seen_b);
    EXPECT(!readable(fd_any, 0) && !readable(fd_b, 0));
    id = 7;
    p = (vargr_packet *)&checks;
    rc = vargr_network_recv_timeout(net, 0, &id, &p);
    EXPECT(rc == VARGR_ERR_TIMEOUT && id == UINT32_MAX && p == NULL);
    EXPECT(vargr_network_recv(NULL, &id, &p) == VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(vargr_network_recv(net, NULL, &p) == VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(vargr_network_notification_fd(net, NULL) == VARGR_ERR_INVALID_ARGUMENT);

    /* A handle by id answers on that stream. */
    CHECK(vargr_network_get_stream(net, id_b, &again));
    CHECK(vargr_stream_notification_fd(again, &fd_again));
    EXPECT(fd_again == fd_b);
    EXPECT(echo(again, 9) == 9);
    vargr_stream_free(again);
    again = (vargr_stream *)&checks;
    EXPECT(vargr_network_get_stream(net, 4242, &again) == VARGR_ERR_INVALID_ARGUMENT &&
           again == NULL && strstr(vargr_last_error(), "4242"));

    /* Back-ends receive per stream, a thread each; the front-end answers in turn. */
    CHECK(vargr_network_open_stream(net, all, NULL, VARGR_SYNC_DONT_WAIT, 0, &ctl));
    CHECK(vargr_network_open_stream(net, all, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &s1));
    CHECK(vargr_network_open_stream(net, all, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &s2));
    CHECK(vargr_stream_id(s1, &ids[0]));
    CHECK(vargr_stream_id(s2, &ids[1]));
    CHECK(vargr_stream_send(ctl, TAG_THREADS, "%aud", ids, (size_t)2));
    for (k = 0; k < 2; k++) {
        /* The opposite order on the two streams: each back-end thread waits on its own. */
        CHECK(vargr_stream_send(s2, TAG_ECHO, "%d", 0));
        CHECK(vargr_stream_recv_timeout(s2, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%d", &v));
        vargr_packet_free(p);
        EXPECT(v == 10 * ((int32_t)n - 1) + k);
        CHECK(vargr_stream_send(s1, TAG_ECHO, "%d", 0));
        CHECK(vargr_stream_recv_timeout(s1, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%d", &v));
        vargr_packet_free(p);
        EXPECT(v == 10 * (int32_t)(n * (n - 1) / 2) + (int32_t)n * k);
    }

    /* Heterogeneous filters: commnodes (depth 1) add 1 to their maximum, commnode 2
     * adds 10 instead, and the front-end (depth 0) sums where the stream says max. */
    rules[0].by = VARGR_AT_DEPTH;
    rules[0].which = 1;
    rules[0].up_filter = "int_max_plus:1";
    rules[0].sync_filter = NULL;
    rules[1].by = VARGR_AT_NODE;
    rules[1].which = 2;
    rules[1].up_filter = "int_max_plus:10";
    rules[1].sync_filter = NULL;
    rules[2].by = VARGR_AT_DEPTH;
    rules[2].which = 0;
    rules[2].up_filter = "sum";
    rules[2].sync_filter = NULL;
    CHECK(vargr_network_open_stream_spec(net, all, "max", "all", NULL, rules, 3, 0, &hetero));
    EXPECT(echo(hetero, 5) == (5 + 1) + (5 + 10));
    /* A sync filter from a plugin at the front-end only: k_of_n:1 lets each commnode's
     * sum go as a wave of its own, where waiting for all would add the two. */
    rules[0].by = VARGR_AT_DEPTH;
    rules[0].which = 0;
    rules[0].up_filter = NULL;
    rules[0].sync_filter = "k_of_n:1";
    CHECK(vargr_network_open_stream_spec(net, all, "sum", NULL, NULL, rules, 1, 5000, &kofn));
    EXPECT(echo(kofn, 5) == 2 * 5);
    CHECK(vargr_stream_recv_timeout(kofn, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%d", &v));
    vargr_packet_free(p);
    EXPECT(v == 2 * 5);
    /* Bad rules fail the call and name what is wrong. */
    rules[0].sync_filter = "k_of_m:1";
    EXPECT(vargr_network_open_stream_spec(net, all, "sum", NULL, NULL, rules, 1, 0, &bad) !=
               VARGR_OK &&
           strstr(vargr_last_error(), "k_of_m") && bad == NULL);
    rules[0].by = 7;
    EXPECT(vargr_network_open_stream_spec(net, all, "sum", NULL, NULL, rules, 1, 0, &bad) ==
               VARGR_ERR_INVALID_ARGUMENT &&
           strstr(vargr_last_error(), "vargr_at"));

    /* The front-end's children: the commnodes. */
    CHECK(vargr_network_child_pids(net, NULL, 0, &npids));
    EXPECT(npids == 2);
    CHECK(vargr_network_child_pids(net, pids, 4, &npids));
    EXPECT(npids == 2 && pids[0] > 0 && pids[1] > 0 && pids[0] != pids[1]);
    EXPECT(vargr_network_child_pids(net, NULL, 3, &npids) == VARGR_ERR_INVALID_ARGUMENT);

    CHECK(vargr_network_shutdown(net));
    /* At shutdown the descriptors become readable and receives say closed. */
    EXPECT(readable(fd_any, 0));
    EXPECT(vargr_network_recv(net, &id, &p) == VARGR_ERR_CLOSED);
    EXPECT(events_seen == 0);
    vargr_stream_free(down);
    vargr_stream_free(hetero);
    vargr_stream_free(kofn);
    vargr_stream_free(a);
    vargr_stream_free(b);
    vargr_stream_free(ctl);
    vargr_stream_free(s1);
    vargr_stream_free(s2);
    vargr_communicator_free(all);
    vargr_network_free(net);
    if (failed) {
        printf("mrnet_test: %d of %d checks FAILED\n", failed, checks);
        return 1;
    }
    printf("mrnet_test: %d checks OK\n", checks);
    return 0;
}
