/*
 * vargr_stage.h - the C ABI for vargr stage plugins: user stages (PATHS' wrappers) that
 * a path specification inserts on a link by name. It sits beside vargr_filter.h (filters
 * work on a tree node's waves of packets; stages work on one link's frames).
 *
 * A plugin is a shared object (cc -shared -fPIC -I<this dir>) exporting:
 *
 *     uint32_t vargr_stage_abi_version(void);          // return VARGR_STAGE_ABI_VERSION
 *     const vargr_stage_desc *vargr_stage_list(size_t *n);
 *
 * vargr refuses a plugin whose version differs from its own or that lacks either
 * symbol. The list names one or more stages; a path uses one as "name" or "name:params"
 * (names: 1-128 letters, digits, '_', '-', '.'; not reduce, remote, codec, dedup, emu
 * or py, which are built in).
 *
 * Which frames. A stage sees the frames that carry application data (kind 16, a tree's
 * Data, and 22, PointToPoint); the tree's own messages pass it untouched. outbound() is
 * called on each such frame this end sends over the link, inbound() on each it receives
 * (both ends of a link run the same stages, so a stage that changes data on the way out
 * can undo it on the way in; with inbound NULL incoming frames pass unchanged). A data
 * frame's payload is vargr-wire's packet encoding: u32 source rank, u16 format length,
 * the format text (e.g. "%s"), then the values as vargr_filter.h describes.
 *
 * Instances. vargr calls create() once per link end that runs the stage and passes the
 * state to every call and finally to destroy(). Keep all mutable state in it: several
 * instances run in one process, possibly on different threads; one instance is never
 * used by two threads at once.
 *
 * Ownership. `in` and its payload belong to vargr and are valid during the call only.
 * `out` is vargr's buffer of out_cap bytes (payload_len + the stage's max_growth): write
 * the new payload there and its length to *out_len. vargr copies it after the call.
 * Messages from last_error() and create()'s err buffer are copied too.
 *
 * Errors. Return VARGR_STAGE_OK (0) on success. Any other status, or an *out_len larger
 * than out_cap, is the stage's failure: the frame is dropped and the link closes with an
 * error naming the stage, the link and the status (with last_error's message if
 * last_error is not NULL). The process keeps running: in a tree the far side of the
 * link is reported lost; the other links go on. Writing past out_cap is undefined
 * behaviour vargr cannot catch; declare max_growth instead.
 */
#ifndef VARGR_STAGE_H
#define VARGR_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VARGR_STAGE_ABI_VERSION 1u
#define VARGR_STAGE_OK 0

#define VARGR_STAGE_KIND_DATA 16
#define VARGR_STAGE_KIND_POINT_TO_POINT 22

/* One frame, read-only, valid during the call only. */
typedef struct vargr_stage_frame {
    uint8_t kind;             /* VARGR_STAGE_KIND_* */
    uint8_t flags;            /* the frame header's flags, kept on the output */
    uint16_t reserved;
    uint32_t stream;
    int32_t tag;
    const uint8_t *payload;
    size_t payload_len;
} vargr_stage_frame;

/* One stage of the plugin. */
typedef struct vargr_stage_desc {
    const char *name;         /* e.g. "upper" */
    const char *description;  /* may be NULL */
    /* Bytes a call may add to a payload: out_cap is payload_len + max_growth. */
    size_t max_growth;
    /* Builds an instance from the spec's params ("" when none). On failure return
     * non-zero and write a NUL-terminated message of at most err_len bytes to err. */
    int (*create)(const char *params, void **state, char *err, size_t err_len);
    /* A frame this end sends: write its new payload to out, its length to *out_len. */
    int (*outbound)(void *state, const vargr_stage_frame *in, uint8_t *out, size_t out_cap,
                    size_t *out_len);
    /* A frame this end receives, likewise; may be NULL (frames pass unchanged). */
    int (*inbound)(void *state, const vargr_stage_frame *in, uint8_t *out, size_t out_cap,
                   size_t *out_len);
    /* Frees the instance. */
    void (*destroy)(void *state);
    /* Optional (may be NULL): message for the last failed call on this state. */
    const char *(*last_error)(void *state);
} vargr_stage_desc;

uint32_t vargr_stage_abi_version(void);
const vargr_stage_desc *vargr_stage_list(size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* VARGR_STAGE_H */
