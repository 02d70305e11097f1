/*
 * Example vargr stage plugin (include/vargr_stage.h): three stages a path specification
 * can put on a link by name.
 *
 *   upper        uppercases the ASCII letters of every "%s" packet this end sends (one
 *                way: what arrives is uppercase);
 *   xor:KEY      XORs the values of every data frame with KEY (0-255) on the way out and
 *                again on the way in, so the far end reads what was sent; the bytes on
 *                the wire differ;
 *   faulty:N     passes N frames, then claims more output than it was given room for:
 *                a stage with a bug, for tests of how vargr reports one.
 *
 * Build: make (or cc -shared -fPIC -I../../crates/vargr-stage/include stages.c -o libstages.so)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vargr_stage.h"

/* Where a data payload's values start: after u32 source, u16 format length, format. */
static size_t values_at(const vargr_stage_frame *in) {
    if (in->payload_len < 6) return in->payload_len;
    size_t flen = (size_t)in->payload[4] | ((size_t)in->payload[5] << 8);
    size_t at = 6 + flen;
    return at > in->payload_len ? in->payload_len : at;
}

static int is_string_packet(const vargr_stage_frame *in) {
    size_t at = values_at(in);
    return at == 8 && memcmp(in->payload + 6, "%s", 2) == 0;
}

/* ---- upper ---- */

static int no_state(const char *params, void **state, char *err, size_t err_len) {
    if (params[0] != '\0') {
        snprintf(err, err_len, "takes no parameters, got \"%s\"", params);
        return 1;
    }
    *state = NULL;
    return VARGR_STAGE_OK;
}

static int upper_out(void *state, const vargr_stage_frame *in, uint8_t *out, size_t out_cap,
                     size_t *out_len) {
    (void)state;
    (void)out_cap; /* the output is as long as the input, which always fits */
    memcpy(out, in->payload, in->payload_len);
    if (is_string_packet(in)) {
        /* The string's bytes follow its u32 length. */
        for (size_t i = 12; i < in->payload_len; i++)
            if (out[i] >= 'a' && out[i] <= 'z') out[i] = (uint8_t)(out[i] - 'a' + 'A');
    }
    *out_len = in->payload_len;
    return VARGR_STAGE_OK;
}

static void no_destroy(void *state) { (void)state; }

/* ---- xor:KEY ---- */

struct xor_state { uint8_t key; };

static int xor_create(const char *params, void **state, char *err, size_t err_len) {
    char *end = NULL;
    long k = strtol(params, &end, 10);
    if (params[0] == '\0' || *end != '\0' || k < 0 || k > 255) {
        snprintf(err, err_len, "expected a key 0-255, got \"%s\"", params);
        return 1;
    }
    struct xor_state *s = malloc(sizeof *s);
    if (!s) return 2;
    s->key = (uint8_t)k;
    *state = s;
    return VARGR_STAGE_OK;
}

static int xor_both(void *state, const vargr_stage_frame *in, uint8_t *out, size_t out_cap,
                    size_t *out_len) {
    (void)out_cap;
    const struct xor_state *s = state;
    size_t at = values_at(in);
    memcpy(out, in->payload, in->payload_len);
    for (size_t i = at; i < in->payload_len; i++) out[i] ^= s->key;
    *out_len = in->payload_len;
    return VARGR_STAGE_OK;
}

static void xor_destroy(void *state) { free(state); }

/* ---- faulty:N ---- */

struct faulty_state { long left; char msg[64]; };

static int faulty_create(const char *params, void **state, char *err, size_t err_len) {
    char *end = NULL;
    long n = strtol(params, &end, 10);
    if (params[0] == '\0' || *end != '\0' || n < 0) {
        snprintf(err, err_len, "expected a frame count, got \"%s\"", params);
        return 1;
    }
    struct faulty_state *s = calloc(1, sizeof *s);
    if (!s) return 2;
    s->left = n;
    *state = s;
    return VARGR_STAGE_OK;
}

static int faulty_out(void *state, const vargr_stage_frame *in, uint8_t *out, size_t out_cap,
                      size_t *out_len) {
    struct faulty_state *s = state;
    if (s->left > 0) {
        s->left--;
        memcpy(out, in->payload, in->payload_len);
        *out_len = in->payload_len;
        return VARGR_STAGE_OK;
    }
    /* The bug: a length beyond the room given (nothing is written past it). */
    *out_len = out_cap + 100;
    return VARGR_STAGE_OK;
}

static void faulty_destroy(void *state) { free(state); }

static const vargr_stage_desc STAGES[] = {
    {"upper", "uppercases the letters of \"%s\" packets it sends", 0, no_state, upper_out, NULL,
     no_destroy, NULL},
    {"xor", "XORs data values with a key both ways", 0, xor_create, xor_both, xor_both,
     xor_destroy, NULL},
    {"faulty", "passes N frames, then reports a bad output length", 0, faulty_create,
     faulty_out, NULL, faulty_destroy, NULL},
};

uint32_t vargr_stage_abi_version(void) { return VARGR_STAGE_ABI_VERSION; }

const vargr_stage_desc *vargr_stage_list(size_t *n) {
    *n = sizeof STAGES / sizeof STAGES[0];
    return STAGES;
}
