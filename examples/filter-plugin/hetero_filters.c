/*
 * The filters of the HeterogeneousFilters example (MRNet's, rewritten for vargr): a
 * different filter at each kind of node of one stream, all over text.
 *
 *   hf_scan:WORD   (back-ends) a block of text "%s" -> its lines containing WORD, "%as"
 *   hf_sort        (commnodes) the waves' "%as" arrays merged into one, sorted
 *   hf_uniq        (front-end) as hf_sort, without duplicates and without the lines it
 *                  passed on in earlier waves (its per-instance state)
 *
 * Open the stream with vargr_network_open_stream_per_role(net, comm, "hf_scan:WORD",
 * "hf_sort", "hf_uniq", ...). Build: cc -shared -fPIC -I../../crates/vargr-filter/include
 * hetero_filters.c -o libhetero_filters.so
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vargr_filter.h"

/* A growable array of owned strings. */
typedef struct {
    char **s;
    size_t n, cap;
} strs;

static int strs_push(strs *a, const char *p, size_t len)
{
    char *c;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        char **s = realloc(a->s, cap * sizeof *s);
        if (!s)
            return VARGR_ERR_INVALID;
        a->s = s;
        a->cap = cap;
    }
    c = malloc(len + 1);
    if (!c)
        return VARGR_ERR_INVALID;
    memcpy(c, p, len);
    c[len] = '\0';
    a->s[a->n++] = c;
    return VARGR_OK;
}

static void strs_free(strs *a)
{
    size_t i;
    for (i = 0; i < a->n; i++)
        free(a->s[i]);
    free(a->s);
    a->s = NULL;
    a->n = a->cap = 0;
}

static int cmp(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static void put_u32(uint8_t *out, uint32_t v)
{
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
}

/* Emits the strings as one "%as" packet (u32 count, then u32 length and bytes each). */
static int emit_strs(const strs *a, int32_t tag, const vargr_host_api *host, void *out_ctx)
{
    size_t i, len = 4, at = 4;
    uint8_t *payload;
    int rc;
    for (i = 0; i < a->n; i++)
        len += 4 + strlen(a->s[i]);
    payload = malloc(len);
    if (!payload)
        return VARGR_ERR_INVALID;
    put_u32(payload, (uint32_t)a->n);
    for (i = 0; i < a->n; i++) {
        size_t l = strlen(a->s[i]);
        put_u32(payload + at, (uint32_t)l);
        memcpy(payload + at + 4, a->s[i], l);
        at += 4 + l;
    }
    rc = host->emit(out_ctx, tag, "%as", payload, len);
    free(payload);
    return rc;
}

/* Every string of the wave's "%as" packets, sorted. */
static int gather_sorted(const vargr_packet_view *wave, size_t n, const vargr_host_api *host,
                         strs *out)
{
    size_t i;
    uint32_t j;
    for (i = 0; i < n; i++) {
        if (strcmp(wave[i].format, "%as") != 0)
            return VARGR_ERR_TYPE;
        for (j = 0;; j++) {
            const char *p;
            size_t len;
            int rc = host->get_str(&wave[i], 0, j, &p, &len);
            if (rc == VARGR_ERR_FIELD)
                break; /* past the last string */
            if (rc == VARGR_OK)
                rc = strs_push(out, p, len);
            if (rc != VARGR_OK)
                return rc;
        }
    }
    if (out->n)
        qsort(out->s, out->n, sizeof *out->s, cmp);
    return VARGR_OK;
}

/* ---- hf_scan:WORD ---- */

static int scan_create(const char *params, void **state, char *err, size_t err_len)
{
    if (params[0] == '\0') {
        snprintf(err, err_len, "hf_scan needs the word to search for (hf_scan:WORD)");
        return 1;
    }
    size_t len = strlen(params) + 1;
    char *word = malloc(len);
    if (!word)
        return VARGR_ERR_INVALID;
    memcpy(word, params, len);
    *state = word;
    return VARGR_OK;
}

static int scan_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                      size_t n, const vargr_host_api *host, void *out_ctx)
{
    const char *word = state;
    strs found = {NULL, 0, 0};
    size_t i;
    int rc = VARGR_OK;
    (void)ctx;
    for (i = 0; i < n && rc == VARGR_OK; i++) {
        const char *text, *line, *end;
        size_t len;
        if (strcmp(wave[i].format, "%s") != 0)
            return VARGR_ERR_TYPE;
        rc = host->get_str(&wave[i], 0, 0, &text, &len);
        for (line = text; rc == VARGR_OK && line < text + len; line = end + 1) {
            const char *p;
            size_t wl = strlen(word);
            end = memchr(line, '\n', (size_t)(text + len - line));
            if (!end)
                end = text + len;
            for (p = line; p + wl <= end; p++) {
                if (memcmp(p, word, wl) == 0) {
                    rc = strs_push(&found, line, (size_t)(end - line));
                    break;
                }
            }
        }
    }
    if (rc == VARGR_OK)
        rc = emit_strs(&found, n ? wave[0].tag : 0, host, out_ctx);
    strs_free(&found);
    return rc;
}

static void free_state(void *state) { free(state); }

/* ---- hf_sort ---- */

static int sort_create(const char *params, void **state, char *err, size_t err_len)
{
    (void)params;
    (void)err;
    (void)err_len;
    *state = NULL;
    return VARGR_OK;
}

static int sort_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                      size_t n, const vargr_host_api *host, void *out_ctx)
{
    strs all = {NULL, 0, 0};
    int rc;
    (void)state;
    (void)ctx;
    rc = gather_sorted(wave, n, host, &all);
    if (rc == VARGR_OK)
        rc = emit_strs(&all, n ? wave[0].tag : 0, host, out_ctx);
    strs_free(&all);
    return rc;
}

/* ---- hf_uniq: the lines passed on so far, sorted, are its state ---- */

static int uniq_create(const char *params, void **state, char *err, size_t err_len)
{
    (void)params;
    (void)err;
    (void)err_len;
    *state = calloc(1, sizeof(strs));
    return *state ? VARGR_OK : VARGR_ERR_INVALID;
}

static int uniq_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                      size_t n, const vargr_host_api *host, void *out_ctx)
{
    strs *seen = state, all = {NULL, 0, 0}, fresh = {NULL, 0, 0};
    size_t i;
    int rc;
    (void)ctx;
    rc = gather_sorted(wave, n, host, &all);
    for (i = 0; i < all.n && rc == VARGR_OK; i++) {
        int dup = i > 0 && strcmp(all.s[i], all.s[i - 1]) == 0;
        if (!dup && seen->n)
            dup = bsearch(&all.s[i], seen->s, seen->n, sizeof *seen->s, cmp) != NULL;
        if (!dup)
            rc = strs_push(&fresh, all.s[i], strlen(all.s[i]));
    }
    for (i = 0; i < fresh.n && rc == VARGR_OK; i++)
        rc = strs_push(seen, fresh.s[i], strlen(fresh.s[i]));
    if (rc == VARGR_OK && seen->n)
        qsort(seen->s, seen->n, sizeof *seen->s, cmp);
    if (rc == VARGR_OK)
        rc = emit_strs(&fresh, n ? wave[0].tag : 0, host, out_ctx);
    strs_free(&all);
    strs_free(&fresh);
    return rc;
}

static void uniq_destroy(void *state)
{
    strs_free(state);
    free(state);
}

static const vargr_filter_desc filters[] = {
    {"hf_scan", "lines of a %s block containing a word, as %as", scan_create, scan_apply,
     free_state, NULL},
    {"hf_sort", "%as arrays merged and sorted", sort_create, sort_apply, free_state, NULL},
    {"hf_uniq", "%as arrays merged, sorted, without lines seen before", uniq_create,
     uniq_apply, uniq_destroy, NULL},
};

uint32_t vargr_filter_abi_version(void) { return VARGR_FILTER_ABI_VERSION; }

const vargr_filter_desc *vargr_filter_list(size_t *n)
{
    *n = sizeof filters / sizeof filters[0];
    return filters;
}
