/*
 * Example vargr filter plugin: two filters over "%d" packets.
 *
 *   plugin_sum          sums the %d of every packet of a wave (wrapping, like vargr's sum)
 *   int_max_plus[:K]    the largest %d of the wave plus K (default 0); counts the waves
 *                       it has seen in its per-instance state and reports errors through
 *                       last_error
 *
 * Build: make (or cc -shared -fPIC -I../../crates/vargr-filter/include int_filters.c -o libint_filters.so)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vargr_filter.h"

/* Encodes a %d value: 4 bytes, little-endian. */
static void put_i32_le(uint8_t out[4], int32_t v) {
    uint32_t u = (uint32_t)v;
    out[0] = (uint8_t)u;
    out[1] = (uint8_t)(u >> 8);
    out[2] = (uint8_t)(u >> 16);
    out[3] = (uint8_t)(u >> 24);
}

/* ---- plugin_sum: stateless, so its state is NULL ---- */

static int sum_create(const char *params, void **state, char *err, size_t err_len) {
    if (params[0] != '\0') {
        snprintf(err, err_len, "plugin_sum takes no parameters, got \"%s\"", params);
        return 1;
    }
    *state = NULL;
    return VARGR_OK;
}

static int sum_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                     size_t n, const vargr_host_api *host, void *out_ctx) {
    (void)state;
    (void)ctx;
    if (n == 0)
        return VARGR_OK;
    uint32_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (strcmp(wave[i].format, "%d") != 0)
            return VARGR_ERR_TYPE;
        int rc = host->get_i64(&wave[i], 0, &v);
        if (rc != VARGR_OK)
            return rc;
        total += (uint32_t)v;
    }
    uint8_t payload[4];
    put_i32_le(payload, (int32_t)total);
    return host->emit(out_ctx, wave[0].tag, "%d", payload, sizeof payload);
}

static void sum_destroy(void *state) { (void)state; }

/* ---- int_max_plus: parameter and per-instance state ---- */

typedef struct {
    int32_t plus;
    uint64_t waves;
    char error[128];
} max_plus_state;

static int max_plus_create(const char *params, void **state, char *err, size_t err_len) {
    char *end = NULL;
    long plus = params[0] ? strtol(params, &end, 10) : 0;
    if (params[0] && (*end != '\0')) {
        snprintf(err, err_len, "int_max_plus: \"%s\" is not an integer", params);
        return 1;
    }
    max_plus_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return 2;
    }
    s->plus = (int32_t)plus;
    *state = s;
    return VARGR_OK;
}

static int max_plus_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                          size_t n, const vargr_host_api *host, void *out_ctx) {
    max_plus_state *s = state;
    (void)ctx;
    s->waves++;
    if (n == 0)
        return VARGR_OK;
    int64_t best = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (strcmp(wave[i].format, "%d") != 0) {
            snprintf(s->error, sizeof s->error, "packet %zu has format \"%s\", int_max_plus needs \"%%d\"",
                     i, wave[i].format);
            return 7;
        }
        if (host->get_i64(&wave[i], 0, &v) != VARGR_OK) {
            snprintf(s->error, sizeof s->error, "cannot read packet %zu", i);
            return 8;
        }
        if (v > best)
            best = v;
    }
    uint8_t payload[4];
    put_i32_le(payload, (int32_t)(best + s->plus));
    return host->emit(out_ctx, wave[0].tag, "%d", payload, sizeof payload);
}

static void max_plus_destroy(void *state) { free(state); }

static const char *max_plus_last_error(void *state) {
    return ((max_plus_state *)state)->error;
}

/* ---- exports ---- */

static const vargr_filter_desc FILTERS[] = {
    {"plugin_sum", "sum of %d values", sum_create, sum_apply, sum_destroy, NULL},
    {"int_max_plus", "max of %d values plus K", max_plus_create, max_plus_apply, max_plus_destroy,
     max_plus_last_error},
};

uint32_t vargr_filter_abi_version(void) { return VARGR_FILTER_ABI_VERSION; }

const vargr_filter_desc *vargr_filter_list(size_t *n) {
    *n = sizeof FILTERS / sizeof FILTERS[0];
    return FILTERS;
}
