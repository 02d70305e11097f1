/*
 * PerThreadStreams, front-end (MRNet's example) rewritten for vargr: waves on one
 * stream, then three streams (max, min, sum), each driven by a thread of its own that
 * asks twice and checks the reduced answer against what it computed itself. Also
 * registers topology-change callbacks as the original does (none fire here).
 *
 *   per_thread_streams_fe TOPOLOGY BACKEND_EXE     (per_thread_streams_be)
 *
 * Prints the waves, one line per check, and "per_thread_streams: OK".
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "per_thread_streams.h"

static uint32_t num_backends, num_iters = 10;
static int failures, node_lost, reparented;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

struct checker {
    vargr_stream *s;
    const char *what;
    int32_t tag;
    uint32_t expected;
};

static void *checker_main(void *arg)
{
    struct checker *c = arg;
    vargr_packet *p;
    uint32_t got;
    int32_t tag;
    int i;
    for (i = 0; i < 2; i++) {
        CHECK(vargr_stream_send(c->s, c->tag, ""));
        CHECK(vargr_stream_recv_timeout(c->s, 30000, &p));
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_unpack(p, "%ud", &got));
        vargr_packet_free(p);
        pthread_mutex_lock(&out_lock);
        if (tag == c->tag && got == c->expected) {
            printf("FE: check of %s successful %u (%d)\n", c->what, got, i);
        } else {
            printf("FE: check of %s failed, filter %u != check %u (%d)\n", c->what, got,
                   c->expected, i);
            failures++;
        }
        pthread_mutex_unlock(&out_lock);
    }
    return NULL;
}

static void on_event(const vargr_event *ev, void *data)
{
    (void)data;
    if (ev->kind == VARGR_EVENT_NODE_LOST)
        node_lost++;
    else if (ev->kind == VARGR_EVENT_REPARENTED)
        reparented++;
}

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *waves;
    vargr_packet *p;
    struct checker c[3];
    pthread_t t[3];
    uint32_t i, r, v, sum, mx = 0, mn = UINT32_MAX, total = 0;
    int32_t tag;
    int k;

    if (argc != 3) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_add_event_callback(net, VARGR_EVENT_NODE_LOST, on_event, NULL));
    CHECK(vargr_network_add_event_callback(net, VARGR_EVENT_REPARENTED, on_event, NULL));
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));

    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &waves));
    CHECK(vargr_stream_send(waves, PROT_START, "%ud", num_iters));
    for (i = 0; i < num_iters; i++) {
        for (r = 0, sum = 0; r < num_backends; r++) {
            v = pts_value(r, i);
            sum += v;
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        total += sum;
        CHECK(vargr_stream_recv_timeout(waves, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%ud", &v));
        vargr_packet_free(p);
        printf("FE: wave %u sum %u%s\n", i, v, v == sum ? "" : " WRONG");
        failures += v != sum;
    }

    /* A stream per thread; the back-ends learn which is which from the first packet. */
    c[0].what = "MAX", c[0].tag = PROT_CHECK_MAX, c[0].expected = mx;
    c[1].what = "MIN", c[1].tag = PROT_CHECK_MIN, c[1].expected = mn;
    c[2].what = "SUM", c[2].tag = PROT_CHECK_SUM, c[2].expected = total;
    CHECK(vargr_network_open_stream(net, comm_bc, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &c[0].s));
    CHECK(vargr_network_open_stream(net, comm_bc, "min", VARGR_SYNC_WAIT_FOR_ALL, 0, &c[1].s));
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &c[2].s));
    for (k = 0; k < 3; k++)
        CHECK(vargr_stream_send(c[k].s, PROT_REG_MAX + k, ""));
    CHECK(vargr_stream_recv_timeout(c[0].s, 30000, &p));
    CHECK(vargr_packet_tag(p, &tag));
    vargr_packet_free(p);
    if (tag != PROT_REG_ACK) {
        fprintf(stderr, "FE: expected the registration ack, got tag %d\n", tag);
        return 1;
    }
    printf("****** Ping-pong check of PROT_WAVE values ******\n");
    for (k = 0; k < 3; k++)
        pthread_create(&t[k], NULL, checker_main, &c[k]);
    for (k = 0; k < 3; k++)
        pthread_join(t[k], NULL);

    for (k = 0; k < 3; k++)
        vargr_stream_free(c[k].s);
    vargr_stream_free(waves);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("callbacks: %d node lost, %d reparented\n", node_lost, reparented);
    printf("per_thread_streams: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
