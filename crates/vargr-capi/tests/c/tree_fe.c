/*
 * The tree test's front-end: strings and arrays through concat, echoed by the
 * back-ends through the *_args forms; a don't-wait stream with no filter; messages
 * between back-ends; observed elements; timeouts; the errors of bad streams and communicators; and what
 * every handle says once the network is shut down.
 *
 *   tree_fe TOPOLOGY BACKEND_EXE      (prints "tree_test: N checks OK")
 */
#include "tree.h"

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

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_communicator *all, *bad = NULL;
    vargr_stream *cat, *loose, *p2p, *idle, *nope = NULL;
    vargr_packet *p;
    uint32_t n, i, seen = 0, rank, source, stream_id, too_big = 99;
    char **strs;
    int32_t *ints, sum, want = 0;
    size_t n_strs, n_ints;
    uint64_t version;
    int rc;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_num_backends(net, &n));
    CHECK(vargr_network_broadcast_communicator(net, &all));

    /* Echo through concat: n copies of the string and the int, in one packet. */
    CHECK(vargr_network_open_stream(net, all, "concat", VARGR_SYNC_WAIT_FOR_ALL, 0, &cat));
    CHECK(vargr_stream_send(cat, TAG_ECHO, "%s %d", "hi there", 5));
    CHECK(vargr_stream_recv_timeout(cat, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%as %ad", &strs, &n_strs, &ints, &n_ints));
    EXPECT(n_strs == n && n_ints == n);
    for (i = 0; i < n_strs && i < n_ints; i++)
        EXPECT(strcmp(strs[i], "hi there") == 0 && ints[i] == 5);
    vargr_free(strs);
    vargr_free(ints);
    vargr_packet_free(p);

    /* No filter, don't-wait: one packet per back-end, each with its source. */
    CHECK(vargr_network_open_stream(net, all, NULL, VARGR_SYNC_DONT_WAIT, 0, &loose));
    CHECK(vargr_stream_send(loose, TAG_RANK, ""));
    for (i = 0; i < n; i++) {
        CHECK(vargr_stream_recv_timeout(loose, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%ud", &rank));
        CHECK(vargr_packet_source(p, &source));
        EXPECT(rank == source && rank < n && !(seen & (1u << rank)));
        seen |= 1u << rank;
        vargr_packet_free(p);
    }
    EXPECT(seen == (1u << n) - 1);

    /* Back-end to back-end: r tells r+1, which answers 10r + (r+1) on the stream. */
    CHECK(vargr_network_open_stream(net, all, "sum", VARGR_SYNC_TIMEOUT, 20000, &p2p));
    CHECK(vargr_stream_id(p2p, &stream_id));
    CHECK(vargr_stream_send(p2p, TAG_P2P, ""));
    CHECK(vargr_stream_recv_timeout(p2p, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%d", &sum));
    vargr_packet_free(p);
    for (i = 0; i < n; i++)
        want += (int32_t)(10 * i + (i + 1) % n);
    EXPECT(sum == want);

    /* Observed elements: versions only grow at every back-end, which ends on the last. */
    CHECK(vargr_stream_send(loose, TAG_OBSERVE, "%uld", (uint64_t)10));
    for (version = 1; version <= 10; version++) {
        uint64_t value[2] = {version, ~version};
        CHECK(vargr_network_publish(net, OBSERVED, version, (const uint8_t *)value, sizeof value));
    }
    rc = vargr_network_publish(net, OBSERVED, 3, NULL, 0);
    EXPECT(rc == VARGR_ERR_INVALID_ARGUMENT && strstr(vargr_last_error(), "not newer"));
    for (i = 0; i < n; i++) {
        uint32_t values;
        int32_t ok;
        CHECK(vargr_stream_recv_timeout(loose, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%ud %d", &values, &ok));
        EXPECT(ok == 1 && values >= 1 && values <= 10);
        vargr_packet_free(p);
    }

    /* ... and the front-end observes what back-end 0 publishes, then times out. */
    CHECK(vargr_stream_send(loose, TAG_PUBLISH, "%uld", (uint64_t)6));
    {
        uint64_t have = 0, got, value[2];
        size_t len = 0;
        uint32_t values = 0;
        while (have < 6) {
            CHECK(vargr_network_observe_newer(net, PUBLISHED, values ? &have : NULL, 30000, &got,
                                              (uint8_t *)value, sizeof value, &len));
            EXPECT((values == 0 || got > have) && len == sizeof value && value[0] == got &&
                   value[1] == ~got);
            have = got;
            values++;
        }
        rc = vargr_network_observe_newer(net, PUBLISHED, &have, 100, &got, (uint8_t *)value,
                                         sizeof value, &len);
        EXPECT(rc == VARGR_ERR_TIMEOUT);
        for (i = 0; i < n; i++) {
            CHECK(vargr_stream_recv_timeout(loose, 30000, &p));
            vargr_packet_free(p);
        }
    }

    /* Nothing comes on a stream nobody answers. */
    CHECK(vargr_network_open_stream(net, all, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &idle));
    p = (vargr_packet *)&checks;
    rc = vargr_stream_recv_timeout(idle, 100, &p);
    EXPECT(rc == VARGR_ERR_TIMEOUT && p == NULL && strstr(vargr_last_error(), "within 100 ms"));

    /* Bad streams and communicators. */
    rc = vargr_network_open_stream(net, all, "no_such_filter", VARGR_SYNC_WAIT_FOR_ALL, 0, &nope);
    EXPECT(rc == VARGR_ERR_INVALID_ARGUMENT && nope == NULL &&
           strstr(vargr_last_error(), "no_such_filter"));
    rc = vargr_network_open_stream(net, all, "sum", 7, 0, &nope);
    EXPECT(rc == VARGR_ERR_INVALID_ARGUMENT && strstr(vargr_last_error(), "not a vargr_sync"));
    rc = vargr_network_communicator(net, &too_big, 1, &bad);
    EXPECT(rc == VARGR_ERR_INVALID_ARGUMENT && bad == NULL &&
           strstr(vargr_last_error(), "rank 99 does not exist"));
    rc = vargr_stream_send(cat, 1, "%d", 1, 2); /* extra arguments are ignored, as printf */
    EXPECT(rc == VARGR_OK);
    CHECK(vargr_stream_recv_timeout(cat, 30000, &p)); /* its echo, concatenated */
    vargr_packet_free(p);

    /* After shutdown: closed, everywhere. */
    CHECK(vargr_network_shutdown(net));
    rc = vargr_network_num_backends(net, &n);
    EXPECT(rc == VARGR_ERR_CLOSED && strstr(vargr_last_error(), "shut down"));
    rc = vargr_stream_recv(cat, &p);
    EXPECT(rc == VARGR_ERR_CLOSED);
    EXPECT(vargr_network_shutdown(net) == VARGR_OK); /* twice is harmless */

    vargr_stream_free(cat);
    vargr_stream_free(loose);
    vargr_stream_free(p2p);
    vargr_stream_free(idle);
    vargr_communicator_free(all);
    vargr_network_free(net);
    if (failed) {
        printf("tree_test: %d of %d checks FAILED\n", failed, checks);
        return 1;
    }
    printf("tree_test: %d checks OK\n", checks);
    return 0;
}
