/*
 * Example vargr sync-filter plugin: two synchronization filters (when a stream's waves
 * leave a node), written against the sync ABI of vargr_filter.h.
 *
 *   k_of_n:K          a wave leaves once K live children have something queued (or all
 *                     of them, if fewer than K are live); the others' packets wait for
 *                     a later wave
 *   all_within:MS     wait for all, but a wave whose first packet has waited MS
 *                     milliseconds leaves with what it has (MRNet's time-out, written
 *                     as a plugin); counts the waves it let go early
 *
 * Open a stream with the sync spec "k_of_n:2" or "all_within:250" after loading the
 * plugin. Build: cc -shared -fPIC -I../../crates/vargr-filter/include sync_filters.c
 * -o libsync_filters.so
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "vargr_filter.h"

/* Parses a positive integer parameter; writes a message to err on failure. */
static int parse_positive(const char *name, const char *params, long *out, char *err,
                          size_t err_len)
{
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(params, &end, 10);
    if (params[0] == '\0' || *end != '\0' || errno != 0 || v <= 0) {
        snprintf(err, err_len, "%s: parameter \"%s\" is not a positive integer", name, params);
        return 1;
    }
    *out = v;
    return VARGR_OK;
}

/* ---- k_of_n:K ---- */

typedef struct {
    uint32_t k;
} k_of_n;

static int kofn_create(const char *params, void **state, char *err, size_t err_len)
{
    long k;
    k_of_n *s;
    if (parse_positive("k_of_n", params, &k, err, err_len) != VARGR_OK)
        return 1;
    s = malloc(sizeof *s);
    if (s == NULL) {
        snprintf(err, err_len, "k_of_n: out of memory");
        return 1;
    }
    s->k = (uint32_t)k;
    *state = s;
    return VARGR_OK;
}

static int kofn_decide(void *state, const vargr_sync_view *v, vargr_sync_decision *out)
{
    const k_of_n *s = state;
    uint32_t need = s->k < v->live_children ? s->k : v->live_children;
    /* Leftovers of lost children leave once nobody live is left to wait for. */
    if (v->ready > 0 && (v->ready_live >= need))
        out->action = VARGR_SYNC_RELEASE_HEADS;
    else
        out->action = VARGR_SYNC_WAIT;
    return VARGR_OK;
}

/* ---- all_within:MS ---- */

typedef struct {
    uint64_t limit_ns;
    uint64_t early; /* waves let go before every live child had sent */
    char message[96];
} all_within;

static int within_create(const char *params, void **state, char *err, size_t err_len)
{
    long ms;
    all_within *s;
    if (parse_positive("all_within", params, &ms, err, err_len) != VARGR_OK)
        return 1;
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, err_len, "all_within: out of memory");
        return 1;
    }
    s->limit_ns = (uint64_t)ms * 1000000u;
    *state = s;
    return VARGR_OK;
}

static int within_decide(void *state, const vargr_sync_view *v, vargr_sync_decision *out)
{
    all_within *s = state;
    if (v->ready == 0) {
        out->action = VARGR_SYNC_WAIT;
    } else if (v->ready_live == v->live_children) {
        out->action = VARGR_SYNC_RELEASE_HEADS;
    } else if (v->oldest_wait_ns >= s->limit_ns) {
        s->early++;
        out->action = VARGR_SYNC_RELEASE_HEADS;
    } else {
        out->action = VARGR_SYNC_WAIT;
        out->wake_after_ns = s->limit_ns - v->oldest_wait_ns;
    }
    return VARGR_OK;
}

static const char *within_last_error(void *state)
{
    all_within *s = state;
    snprintf(s->message, sizeof s->message, "all_within: %llu waves left early",
             (unsigned long long)s->early);
    return s->message;
}

static void destroy(void *state)
{
    free(state);
}

static const vargr_sync_desc SYNC_FILTERS[] = {
    {"k_of_n", "a wave once K live children sent", kofn_create, kofn_decide, destroy, NULL},
    {"all_within", "wait for all, at most MS ms per wave", within_create, within_decide,
     destroy, within_last_error},
};

uint32_t vargr_sync_abi_version(void)
{
    return VARGR_SYNC_ABI_VERSION;
}

const vargr_sync_desc *vargr_sync_list(size_t *n)
{
    *n = sizeof SYNC_FILTERS / sizeof SYNC_FILTERS[0];
    return SYNC_FILTERS;
}
