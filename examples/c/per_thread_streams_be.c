/*
 * PerThreadStreams, back-end (MRNet's example) rewritten for vargr: after sending its
 * waves, the back-end learns which stream is which from the front-end's first packet
 * on each, then runs a thread per stream. Each thread receives only its own stream
 * (vargr_backend_recv_stream): once blocking, once by polling without blocking, as the
 * original does. The main thread then waits for the shutdown.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "per_thread_streams.h"

static vargr_backend *be;
static uint32_t rank, min_val = UINT32_MAX, max_val, sum_val;

struct worker {
    uint32_t stream;
    int32_t check_tag;
    uint32_t value;
};

static void answer(const struct worker *w, vargr_packet *p)
{
    int32_t tag;
    CHECK(vargr_packet_tag(p, &tag));
    vargr_packet_free(p);
    if (tag != w->check_tag) {
        fprintf(stderr, "BE %u: stream %u got tag %d\n", rank, w->stream, tag);
        exit(1);
    }
    CHECK(vargr_backend_send(be, w->stream, tag, "%ud", w->value));
}

static void *worker_main(void *arg)
{
    const struct worker *w = arg;
    vargr_packet *p;
    struct timespec ms = {0, 1000000};
    int rc;
    /* Blocking. */
    CHECK(vargr_backend_recv_stream(be, w->stream, &p));
    answer(w, p);
    /* Polling. */
    while ((rc = vargr_backend_recv_stream_timeout(be, w->stream, 0, &p)) == VARGR_ERR_TIMEOUT)
        nanosleep(&ms, NULL);
    CHECK(rc);
    answer(w, p);
    return NULL;
}

int main(void)
{
    vargr_packet *p;
    struct worker w[3];
    pthread_t t[3];
    uint32_t stream, iters, i, registered = 0;
    int32_t tag;
    int rc, k;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    CHECK(vargr_backend_recv(be, &p));
    CHECK(vargr_packet_tag(p, &tag));
    CHECK(vargr_packet_stream(p, &stream));
    if (tag != PROT_START) {
        fprintf(stderr, "BE %u: expected PROT_START, got %d\n", rank, tag);
        return 1;
    }
    CHECK(vargr_packet_unpack(p, "%ud", &iters));
    vargr_packet_free(p);
    for (i = 0; i < iters; i++) {
        uint32_t v = pts_value(rank, i);
        min_val = v < min_val ? v : min_val;
        max_val = v > max_val ? v : max_val;
        sum_val += v;
        CHECK(vargr_backend_send(be, stream, PROT_WAVE, "%ud", v));
    }

    /* Which stream is which: the first packet on each says. */
    while (registered != 7) {
        CHECK(vargr_backend_recv(be, &p));
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        vargr_packet_free(p);
        k = tag - PROT_REG_MAX;
        if (k < 0 || k > 2 || (registered & (1u << k))) {
            fprintf(stderr, "BE %u: unexpected tag %d while registering\n", rank, tag);
            return 1;
        }
        registered |= 1u << k;
        w[k].stream = stream;
        w[k].check_tag = PROT_CHECK_MAX + k;
        w[k].value = k == 0 ? max_val : k == 1 ? min_val : sum_val;
    }
    CHECK(vargr_backend_send(be, w[0].stream, PROT_REG_ACK, "%d", 0));

    for (k = 0; k < 3; k++)
        pthread_create(&t[k], NULL, worker_main, &w[k]);
    for (k = 0; k < 3; k++)
        pthread_join(t[k], NULL);

    while ((rc = vargr_backend_recv(be, &p)) == VARGR_OK)
        vargr_packet_free(p);
    vargr_backend_free(be);
    if (rc != VARGR_ERR_CLOSED) {
        fprintf(stderr, "BE %u: %s\n", rank, vargr_last_error());
        return 1;
    }
    return 0;
}
