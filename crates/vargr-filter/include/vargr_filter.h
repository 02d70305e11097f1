/*
 * vargr_filter.h - the C ABI for vargr filter plugins: transformation filters (what a
 * wave becomes) and synchronization filters (when a wave leaves; see "Sync filters"
 * below).
 *
 * A plugin is a shared object (cc -shared -fPIC -I<this dir>) exporting one or both of
 * two pairs of symbols:
 *
 *     uint32_t vargr_filter_abi_version(void);          // return VARGR_FILTER_ABI_VERSION
 *     const vargr_filter_desc *vargr_filter_list(size_t *n);
 *
 *     uint32_t vargr_sync_abi_version(void);            // return VARGR_SYNC_ABI_VERSION
 *     const vargr_sync_desc *vargr_sync_list(size_t *n);
 *
 * vargr refuses a plugin whose version of a pair differs from its own, that exports a
 * version without its list, or that exports neither pair. Each list names one or more
 * filters; each is used through the spec "name" or "name:params" (so names use only
 * letters, digits, '_', '-' and '.'). Transformation and sync filters have separate name
 * spaces; a stream names its sync filter where it names its sync mode.
 *
 * Instances. vargr calls create() once per stream per tree node that runs the filter, and
 * passes the returned state to every apply() and finally to destroy(). Keep all mutable
 * state in it, not in static storage: several instances run in one process, possibly
 * concurrently on different threads. One instance is never used by two threads at once,
 * but successive calls may come from different threads.
 *
 * Waves. apply() receives one wave: the packets the synchronization filter released
 * together (usually one per child), as read-only views valid only during the call. Read
 * them with the host helpers or decode the payload yourself; produce output packets with
 * host->emit(). Outputs carry the wave's stream; vargr validates every emitted packet
 * (the format must parse and the payload must match it exactly) and fails the wave with
 * an error naming the filter if one does not.
 *
 * Errors. create() and apply() return VARGR_OK (0) on success. Any other status fails the
 * wave (or the creation) with a vargr error quoting the status and, if last_error is not
 * NULL, the message it returns for that state (valid until the next call on the state).
 *
 * Payload encoding (vargr-wire's value encoding; fields in format order, packed, no
 * padding, all integers and floats little-endian):
 *   %c %uc            1 byte          %hd %uhd       2 bytes
 *   %d %ud %f         4 bytes         %ld %uld %lf   8 bytes (floats are IEEE-754)
 *   %s                u32 byte length, then UTF-8 bytes (no NUL)
 *   %aX (X as above)  u32 element count, then the elements
 *   %as               u32 element count, then each string as %s
 *   %b                u32 byte length, then the bytes
 * Example: format "%d %alf" with 7 and {1.5} is 07 00 00 00 | 01 00 00 00 | <1.5 as 8 LE bytes>.
 */
#ifndef VARGR_FILTER_H
#define VARGR_FILTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VARGR_FILTER_ABI_VERSION 1u

/* Status codes of host helpers (plugins may return any non-zero value as an error). */
#define VARGR_OK 0
#define VARGR_ERR_FIELD 1   /* no such field (or string index) */
#define VARGR_ERR_TYPE 2    /* the field has another type */
#define VARGR_ERR_RANGE 3   /* the value does not fit the requested type */
#define VARGR_ERR_INVALID 4 /* bad argument, or emit() rejected the packet */

/* Element types reported by vargr_host_api.array(). */
#define VARGR_ELEM_CHAR 1   /* int8_t   */
#define VARGR_ELEM_UCHAR 2  /* uint8_t  */
#define VARGR_ELEM_SHORT 3  /* int16_t  */
#define VARGR_ELEM_USHORT 4 /* uint16_t */
#define VARGR_ELEM_INT 5    /* int32_t  */
#define VARGR_ELEM_UINT 6   /* uint32_t */
#define VARGR_ELEM_LONG 7   /* int64_t  */
#define VARGR_ELEM_ULONG 8  /* uint64_t */
#define VARGR_ELEM_FLOAT 9  /* float    */
#define VARGR_ELEM_DOUBLE 10 /* double  */
#define VARGR_ELEM_RAW 11   /* uint8_t, from a %b field */

/* One packet of a wave, read-only, valid during apply() only. */
typedef struct vargr_packet_view {
    uint32_t stream;
    int32_t tag;
    uint32_t source;          /* back-end rank, or UINT32_MAX for a filter's output */
    uint32_t num_fields;
    const char *format;       /* NUL-terminated, e.g. "%d %alf" */
    const uint8_t *payload;   /* the values, encoded as described above */
    size_t payload_len;
    const void *host;         /* host-private: do not touch */
} vargr_packet_view;

/* Where the filter runs. */
typedef struct vargr_filter_ctx {
    uint32_t node_id;
    uint32_t stream;
    uint32_t is_root;         /* non-zero at the front-end: the last application */
    uint32_t num_inputs;      /* children feeding this node on this stream */
} vargr_filter_ctx;

/* Helpers the host passes to apply(). Field indices start at 0. Pointers they return
 * point into host memory, are read-only and valid during apply() only. Views passed to
 * them must be ones the host passed to this apply() call. */
typedef struct vargr_host_api {
    uint32_t abi_version;     /* VARGR_FILTER_ABI_VERSION */
    uint32_t reserved;
    /* An integer scalar (%c .. %uld) as int64_t; VARGR_ERR_RANGE for a %uld above INT64_MAX. */
    int (*get_i64)(const vargr_packet_view *v, uint32_t field, int64_t *out);
    /* Any numeric scalar as double. */
    int (*get_f64)(const vargr_packet_view *v, uint32_t field, double *out);
    /* A %s field (index 0) or element `index` of a %as field; not NUL-terminated. */
    int (*get_str)(const vargr_packet_view *v, uint32_t field, uint32_t index,
                   const char **ptr, size_t *len);
    /* A numeric array or %b field as a native-endian, suitably aligned C array. */
    int (*array)(const vargr_packet_view *v, uint32_t field, uint32_t *elem,
                 const void **ptr, size_t *count);
    /* Produces one output packet; the host copies and validates it before returning. */
    int (*emit)(void *out_ctx, int32_t tag, const char *format,
                const uint8_t *payload, size_t payload_len);
} vargr_host_api;

/* One filter of the plugin. */
typedef struct vargr_filter_desc {
    const char *name;         /* e.g. "plugin_sum" */
    const char *description;  /* may be NULL */
    /* Builds an instance from the spec's params ("" when none). On failure return
     * non-zero and write a NUL-terminated message of at most err_len bytes to err. */
    int (*create)(const char *params, void **state, char *err, size_t err_len);
    /* Transforms one wave of n packets, calling host->emit(out_ctx, ...) per output. */
    int (*apply)(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *wave,
                 size_t n, const vargr_host_api *host, void *out_ctx);
    /* Frees the instance. */
    void (*destroy)(void *state);
    /* Optional (may be NULL): message for the last failed apply() on this state. */
    const char *(*last_error)(void *state);
} vargr_filter_desc;

uint32_t vargr_filter_abi_version(void);
const vargr_filter_desc *vargr_filter_list(size_t *n);

/*
 * Sync filters. A sync filter decides when the packets a stream's children sent to one
 * node leave it together, as a wave, for the transformation filter. vargr keeps one FIFO
 * queue per child (a fast child may run waves ahead) and asks decide() after every
 * change: a packet or a hole queued, a child lost, a timer; and again after each release
 * it asked for, until it answers VARGR_SYNC_WAIT. It never sees the packets, only the
 * queues (MRNet's sync filters are independent of the packets' type). wait-for-all,
 * timeout:T and dontwait are sync filters of this kind built into vargr.
 *
 * Instances and errors follow the transformation filters' rules above: create() once per
 * stream per node, all mutable state in *state, one thread at a time, non-zero status =
 * failure (quoted with last_error's message). A failed decide(), or a decision that does
 * not fit the queues (releasing an empty or unknown child's queue, an unknown action),
 * is reported to the front-end naming the filter, the node and the stream, and that node
 * then waits for all on the stream.
 *
 * Deadline. A stream has a wave deadline: a packet that has waited that long leaves,
 * with the heads of the other queues, whatever decide() says (and the first time is
 * reported as a fault). A filter that never releases therefore delays a stream, it
 * cannot stop it.
 *
 * Ownership. The view and its arrays belong to vargr and are valid during decide() only;
 * decide() writes its answer into *out, which vargr owns and has set to WAIT, child -1,
 * wake_after_ns 0 before the call.
 */

#define VARGR_SYNC_ABI_VERSION 1u

/* Why decide() is called (vargr_sync_view.event). */
#define VARGR_SYNC_EVENT_PACKET 1     /* a packet from event_child was queued */
#define VARGR_SYNC_EVENT_HOLE 2       /* event_child has nothing for its next wave */
#define VARGR_SYNC_EVENT_CHILD_LOST 3 /* event_child died: no longer live */
#define VARGR_SYNC_EVENT_TIMER 4      /* the wake-up asked for came, or filters changed */
#define VARGR_SYNC_EVENT_RELEASED 5   /* the previous answer released a wave */

/* What decide() answers (vargr_sync_decision.action). */
#define VARGR_SYNC_WAIT 0          /* nothing leaves now */
#define VARGR_SYNC_RELEASE_HEADS 1 /* one wave: the head of every non-empty queue */
#define VARGR_SYNC_RELEASE_CHILD 2 /* child's head alone, as a wave of one */

/* The queues of one stream at one node. Children are numbered 0..num_children-1, live
 * or lost; a queue holds packets and holes (a hole: the child's sub-tree missed a wave). */
typedef struct vargr_sync_view {
    uint32_t node_id;
    uint32_t stream;
    uint32_t num_children;
    uint32_t live_children;
    uint32_t ready_live;        /* live children with something queued */
    uint32_t ready;             /* children (live or lost) with something queued */
    int32_t event;              /* VARGR_SYNC_EVENT_* */
    int32_t event_child;        /* the event's child, -1 for TIMER and RELEASED */
    uint64_t released;          /* waves released so far at this node */
    uint64_t oldest_wait_ns;    /* how long the oldest queued entry has waited (0: none) */
    const uint32_t *queued;     /* [num_children] entries queued per child */
    const uint8_t *live;        /* [num_children] non-zero while the child is live */
    const uint64_t *waited_ns;  /* [num_children] how long each head has waited (0: none) */
} vargr_sync_view;

typedef struct vargr_sync_decision {
    int32_t action;             /* VARGR_SYNC_* */
    int32_t child;              /* the child of VARGR_SYNC_RELEASE_CHILD */
    uint64_t wake_after_ns;     /* with WAIT: ask again after this long unless something
                                   happens before (0: only on the next event) */
} vargr_sync_decision;

/* One sync filter of the plugin. */
typedef struct vargr_sync_desc {
    const char *name;           /* e.g. "k_of_n" */
    const char *description;    /* may be NULL */
    /* As vargr_filter_desc.create. */
    int (*create)(const char *params, void **state, char *err, size_t err_len);
    /* Reads the view, writes the answer to *out; returns VARGR_OK or an error status. */
    int (*decide)(void *state, const vargr_sync_view *view, vargr_sync_decision *out);
    /* Frees the instance. */
    void (*destroy)(void *state);
    /* Optional (may be NULL): message for the last failed decide() on this state. */
    const char *(*last_error)(void *state);
} vargr_sync_desc;

uint32_t vargr_sync_abi_version(void);
const vargr_sync_desc *vargr_sync_list(size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* VARGR_FILTER_H */
