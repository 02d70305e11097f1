/*
 * FaultRecovery, front-end (MRNet's example) rewritten for vargr: waves from every
 * back-end, a commnode killed in the middle (MRNet's example leaves that to the user;
 * with "kill" this program does it itself, with SIGKILL, after the third wave), the
 * orphaned back-ends adopted by the front-end, and the waves going on. Topology-change
 * callbacks report the loss and the adoptions; the minimum and maximum checks after
 * the waves see every back-end again.
 *
 *   fault_recovery_fe TOPOLOGY BACKEND_EXE [kill]     (fault_recovery_be; the topology
 *                                                      needs commnodes, e.g. 1x2x4)
 *
 * Waves that went without the dead commnode's back-ends arrive as errors (VARGR_ERR_IO,
 * naming the back-ends) or as partial sums; the checks at the end are exact. Prints
 * the waves, the events, the checks and "fault_recovery: OK".
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

#include "fault_recovery.h"

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static int node_lost;
static uint64_t lost_mask, adopted_mask;

/* Called on the network's event thread. */
static void on_event(const vargr_event *ev, void *data)
{
    size_t i;
    uint64_t mask = 0;
    (void)data;
    for (i = 0; i < ev->num_backends; i++)
        mask |= ev->backends[i] < 64 ? 1ull << ev->backends[i] : 0;
    pthread_mutex_lock(&ev_lock);
    if (ev->kind == VARGR_EVENT_NODE_LOST) {
        node_lost++;
        lost_mask |= mask;
    } else if (ev->kind == VARGR_EVENT_REPARENTED) {
        adopted_mask |= mask;
    }
    pthread_mutex_unlock(&ev_lock);
}

static uint32_t check(vargr_stream *s, int32_t tag)
{
    vargr_packet *p;
    uint32_t v;
    CHECK(vargr_stream_send(s, tag, ""));
    CHECK(vargr_stream_recv_timeout(s, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%ud", &v));
    vargr_packet_free(p);
    return v;
}

int main(int argc, char **argv)
{
    const char *be_argv[2];
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *waves, *min_s, *max_s;
    vargr_packet *p;
    uint32_t num_backends, num_iters = 10, i, got = 0, v, pids[16];
    size_t npids;
    int kill_one, rc, tries, failures = 0, complete;
    uint64_t lost, adopted;

    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s TOPOLOGY BACKEND_EXE [kill]\n", argv[0]);
        return 2;
    }
    kill_one = argc == 4;
    be_argv[0] = argv[2];
    be_argv[1] = NULL;
    CHECK(vargr_network_create(argv[1], be_argv, NULL, &net));
    CHECK(vargr_network_add_event_callback(net, VARGR_EVENT_ANY, on_event, NULL));
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &waves));
    CHECK(vargr_stream_send(waves, PROT_START, "%ud %ud", num_iters, 200u));

    for (i = 0; i < num_iters; i++) {
        rc = vargr_stream_recv_timeout(waves, 30000, &p);
        if (rc == VARGR_ERR_IO) {
            /* A lost node or lost waves: the message names the back-ends. */
            printf("FE: wave went without some back-ends: %s\n", vargr_last_error());
            continue;
        }
        CHECK(rc);
        CHECK(vargr_packet_unpack(p, "%ud", &v));
        vargr_packet_free(p);
        got++;
        printf("FE: wave sum %u\n", v);
        if (kill_one && i == 2) {
            CHECK(vargr_network_child_pids(net, pids, 16, &npids));
            printf("FE: killing commnode process %u\n", pids[0]);
            fflush(stdout);
            kill((pid_t)pids[0], SIGKILL);
        }
    }

    /* The events come on their own thread: wait until the adoptions are reported. */
    for (tries = 0; tries < 100; tries++) {
        pthread_mutex_lock(&ev_lock);
        complete = !kill_one || (node_lost > 0 && (adopted_mask & lost_mask) == lost_mask);
        pthread_mutex_unlock(&ev_lock);
        if (complete)
            break;
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    pthread_mutex_lock(&ev_lock);
    lost = lost_mask;
    adopted = adopted_mask;
    printf("FE: events: %d node lost (back-ends %#llx), back-ends %#llx adopted\n", node_lost,
           (unsigned long long)lost, (unsigned long long)adopted);
    if (kill_one && (node_lost != 1 || lost == 0 || (adopted & lost) != lost))
        failures++;
    pthread_mutex_unlock(&ev_lock);

    /* Every back-end answers again: exact minimum and maximum. */
    CHECK(vargr_network_open_stream(net, comm_bc, "min", VARGR_SYNC_WAIT_FOR_ALL, 0, &min_s));
    CHECK(vargr_network_open_stream(net, comm_bc, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &max_s));
    v = check(min_s, PROT_CHECK_MIN);
    printf("FE: check of MIN %s %u\n", v == fr_value(0, 0) ? "successful" : "failed", v);
    failures += v != fr_value(0, 0);
    v = check(max_s, PROT_CHECK_MAX);
    printf("FE: check of MAX %s %u\n",
           v == fr_value(num_backends - 1, num_iters - 1) ? "successful" : "failed", v);
    failures += v != fr_value(num_backends - 1, num_iters - 1);
    printf("FE: %u complete waves of %u\n", got, num_iters);

    vargr_stream_free(waves);
    vargr_stream_free(min_s);
    vargr_stream_free(max_s);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("fault_recovery: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
