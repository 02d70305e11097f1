/*
 * The MRNet-API test's back-end: waits on its notification descriptor in poll() and
 * then receives without blocking; echoes; and on TAG_THREADS starts a thread per
 * stream that waits on that stream's descriptor and receives only that stream.
 * Ends when the network is shut down.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <pthread.h>

#include "mrnet.h"

static vargr_backend *be;
static uint32_t rank;

/* Whether fd becomes readable within ms milliseconds. */
static int readable(int fd, int ms)
{
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void *per_stream(void *arg)
{
    uint32_t id = *(uint32_t *)arg;
    vargr_packet *p;
    int fd, k;
    CHECK(vargr_backend_stream_notification_fd(be, id, &fd));
    for (k = 0; k < 2; k++) {
        if (!readable(fd, 30000)) {
            fprintf(stderr, "mrnet_be %u: nothing on stream %u\n", rank, id);
            exit(1);
        }
        CHECK(vargr_backend_recv_stream_timeout(be, id, 0, &p));
        vargr_packet_free(p);
        CHECK(vargr_backend_send(be, id, TAG_STREAM_REPLY, "%d", (int)(10 * rank) + k));
    }
    return NULL;
}

static void threads(vargr_packet *p)
{
    uint32_t *ids;
    size_t n, i;
    pthread_t t[8];
    CHECK(vargr_packet_unpack(p, "%aud", &ids, &n));
    for (i = 0; i < n && i < 8; i++)
        pthread_create(&t[i], NULL, per_stream, &ids[i]);
    for (i = 0; i < n && i < 8; i++)
        pthread_join(t[i], NULL);
    vargr_free(ids);
}

int main(void)
{
    vargr_packet *p;
    uint32_t stream;
    int32_t tag, v;
    int fd, rc;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    CHECK(vargr_backend_notification_fd(be, &fd));
    for (;;) {
        if (!readable(fd, 60000)) {
            fprintf(stderr, "mrnet_be %u: nothing for 60 s\n", rank);
            return 1;
        }
        rc = vargr_backend_recv_timeout(be, 0, &p);
        if (rc == VARGR_ERR_CLOSED)
            break;
        if (rc == VARGR_ERR_TIMEOUT)
            continue; /* taken by a per-stream thread meanwhile */
        CHECK(rc);
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        if (tag == TAG_ECHO) {
            CHECK(vargr_packet_unpack(p, "%d", &v));
            CHECK(vargr_backend_send(be, stream, tag, "%d", v));
        } else if (tag == TAG_THREADS) {
            threads(p);
        }
        vargr_packet_free(p);
    }
    vargr_backend_free(be);
    return 0;
}
