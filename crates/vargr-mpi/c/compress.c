/* CoMPI's MPI side: messages between ranks of different sites travel as frames
 * (src/compress.rs says which, and what a frame holds; Rust writes and reads them).
 * This file moves them with the real MPI so that the program's matching (source, tag,
 * communicator, order), statuses and errors stay what they would be without us:
 *
 * - A send of n >= cx_floor bytes to another site sends the frame (never shorter than
 *   cx_floor: padded) as MPI_BYTE with the program's tag and communicator. Ready sends
 *   become standard ones (a receive of ours may not be posted yet); buffered ones go in
 *   the background (a frame may not fit the program's attached buffer).
 * - A receive that may get a frame (from another site, or from any source when some
 *   are on other sites, into a buffer of cx_floor bytes or more; a smaller buffer would
 *   truncate a frame's message anyway) first learns the message's size: blocking ones
 *   with MPI_Mprobe, then receive it in place or as a frame; non-blocking and
 *   persistent ones receive into a buffer large enough for either, and are finished
 *   (decoded, the status rewritten) where they complete: cx_finish, called by every
 *   wait and test wrapper.
 * - A probe that finds a frame must report the original size, which only the frame
 *   says: the message is received into the stash, and every receive looks there first
 *   (in order, so matching stays MPI's). A matched probe (MPI_Mprobe) of a frame
 *   returns a handle of our own (a zero-byte message to ourselves on a private
 *   communicator), which our MPI_Mrecv recognises.
 * - MPI_Alltoall (with messages of cx_floor bytes or more) and MPI_Alltoallv on a
 *   communicator that spans sites are rebuilt on point-to-point messages of a private
 *   duplicate, those between sites as frames: an exchange of large blocks, where a slow
 *   link pays for the codec (the seed's IS). Other collectives pass untouched: their
 *   messages do not cross PMPI's point-to-point calls, and rebuilding reductions and
 *   broadcasts on frames would trade MPI's tuned trees for a codec that pays only on
 *   large, compressible data.
 *
 * A request the program frees while active is finished in the background (see bg).
 *
 * A persistent receive started while the stash holds a message it matches takes that
 * message without starting (see presatisfy). */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqmap.h"
#include "shim.h"

/* ---- the Rust side (src/compress.rs) ------------------------------------------------------ */

extern int vargr_mpi_cx_site(int rank, int size, const char *host, uint64_t *key);
extern uint64_t vargr_mpi_cx_setup(const uint64_t *keys, int size, uint64_t *agreement);
extern uint64_t vargr_mpi_cx_bound(uint64_t len);
extern uint64_t vargr_mpi_cx_encode(uint32_t peer, uint8_t kind, uint32_t comm, int32_t tag,
                                    uint8_t elem, const void *data, uint64_t len,
                                    int stored, void *out);
extern int vargr_mpi_cx_decode(const void *wire, uint64_t wire_len, void *out, uint64_t cap,
                               uint64_t *original, const char *what);
extern int64_t vargr_mpi_cx_original(const void *wire, uint64_t wire_len);
extern void vargr_mpi_cx_sent(uint32_t peer, uint64_t wire, double seconds);
extern void vargr_mpi_cx_summary(const uint64_t totals[3]);
extern void vargr_mpi_cx_samples(int rank, const char *host);
extern uint64_t vargr_mpi_now(void);

uint64_t cx_floor;

static uint64_t *site;   /* site key of each world rank */
/* Frames sent, their original bytes and their bytes on the wire (padding included). */
static uint64_t framed[3];
static pthread_mutex_t framed_lock = PTHREAD_MUTEX_INITIALIZER;
static int world_size, my_world;
static MPI_Comm cx_self; /* for handles of matched probes of frames */
#define MINT_TAG 1

/* ---- set-up ------------------------------------------------------------------------------ */

/* Refuses to start: rank 0 says why and aborts the job. The other ranks wait to be ended
 * by that abort rather than abort themselves, which could end rank 0 before its reason
 * reached mpirun. */
static void refuse(int rank, const char *why) {
    if (rank == 0) {
        fputs(why, stderr);
        fflush(stderr);
        PMPI_Abort(MPI_COMM_WORLD, 1);
    }
    int never = 0;
    PMPI_Recv(&never, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    PMPI_Abort(MPI_COMM_WORLD, 1);
}

void cx_init(int rank, int size) {
    char host[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0;
    PMPI_Get_processor_name(host, &len);
    uint64_t key = 0;
    int on = vargr_mpi_cx_site(rank, size, host, &key);
    /* Every rank takes part in the exchanges, on or off, so that they agree. */
    int any = on, all = on;
    PMPI_Allreduce(&on, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    PMPI_Allreduce(&on, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all < 0) {
        refuse(rank, "vargr-mpi: a rank's compression settings are not valid (it said why "
                     "above); refusing to start\n");
    }
    if (any != all) {
        refuse(rank, "vargr-mpi: compression is on for some ranks and not others "
                     "(VARGR_MPI_CODEC and its settings must be the same on every rank, and "
                     "valid); refusing to start\n");
    }
    if (on != 1) {
        return;
    }
    site = malloc(sizeof(uint64_t) * (size_t)size);
    if (site == NULL) {
        PMPI_Abort(MPI_COMM_WORLD, 1);
    }
    PMPI_Allgather(&key, 1, MPI_UINT64_T, site, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    uint64_t agreement = 0, lo = 0, hi = 0;
    uint64_t from = vargr_mpi_cx_setup(site, size, &agreement);
    PMPI_Allreduce(&agreement, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(&agreement, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi || from == 0) {
        refuse(rank, "vargr-mpi: the ranks do not agree on compression (codec, threshold or "
                     "sites differ between them, or a rank could not set it up); refusing "
                     "to start\n");
    }
    world_size = size;
    my_world = rank;
    PMPI_Comm_dup(MPI_COMM_SELF, &cx_self);
    cx_floor = from;
}

/* ---- who is where ------------------------------------------------------------------------ */

static int remote_world(uint32_t w) {
    return w != NO_PEER && (int)w < world_size && site[w] != site[my_world];
}

static int is_remote(const comm_info *c, int rank) {
    return c != NULL && remote_world(vargr_world_of(c, rank));
}

/* Whether a receive from `src` may get a frame. */
static int may_be_remote(comm_info *c, int src) {
    if (c == NULL || src == MPI_PROC_NULL) {
        return 0;
    }
    if (src != MPI_ANY_SOURCE) {
        return is_remote(c, src);
    }
    if (c->remote < 0) {
        int any = 0;
        for (int i = 0; i < c->size && !any; i++) {
            any = is_remote(c, i);
        }
        c->remote = any;
    }
    return c->remote;
}

/* ---- the caller's buffers as bytes --------------------------------------------------------- */

/* vargr_codec::ElemKind of a predefined type; derived ones are bytes. */
static uint8_t elem_of(MPI_Datatype t) {
    if (t == MPI_DOUBLE) return 9;
    if (t == MPI_FLOAT) return 8;
    if (t == MPI_INT || t == MPI_INT32_T) return 5;
    if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return 4;
    if (t == MPI_LONG_LONG || t == MPI_INT64_T || (t == MPI_LONG && sizeof(long) == 8)) return 7;
    if (t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T ||
        (t == MPI_UNSIGNED_LONG && sizeof(long) == 8))
        return 6;
    if (t == MPI_SHORT || t == MPI_INT16_T) return 3;
    if (t == MPI_UNSIGNED_SHORT || t == MPI_UINT16_T) return 2;
    return 0;
}

/* The bytes of `count` elements of `t` at `buf`, where they lie contiguously; NULL when
 * they must be packed. */
static const unsigned char *contiguous(const void *buf, int count, MPI_Datatype t) {
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    int size = 0;
    if (count <= 0 || buf == MPI_BOTTOM || PMPI_Type_size(t, &size) != MPI_SUCCESS ||
        PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(t, &tlb, &textent) != MPI_SUCCESS) {
        return count <= 0 ? (const unsigned char *)buf : NULL;
    }
    if (textent != size || (count > 1 && extent != size)) {
        return NULL;
    }
    return (const unsigned char *)buf + tlb;
}

/* ---- pending operations, by request handle ------------------------------------------------ */

enum { OP_ISEND, OP_IRECV, OP_STASHED, OP_PSEND, OP_PRECV };

typedef struct {
    uint64_t key; /* the handle's bits; 0: free */
    int kind;
    void *buf; /* the caller's */
    int count;
    MPI_Datatype type;
    MPI_Comm comm;
    unsigned char *temp; /* the frame, or where it lands */
    size_t temp_len;
    /* OP_STASHED: the message taken from the stash */
    int source, tag;
    /* OP_PSEND: the peer */
    uint32_t peer;
    /* Receives: already decoded into the caller's buffer (by MPI_Request_get_status),
     * with this status and result, which the wait or test that frees it reports. */
    int landed, landed_rc;
    MPI_Status landed_st;
    /* OP_PRECV started while the stash held a message it matches: that message (a
     * `stashed`), taken instead of starting the MPI request. */
    void *pre;
} op;

/* Persistent receives satisfied from the stash and not finished yet (see cx_start). */
static int presatisfied;

REQMAP(ops, op)

static void remember(MPI_Request r, op *p) { ops_put(r, p); }

/* Finds the operation of `r`; removes it unless `keep`. */
static int find(MPI_Request r, op *out, int keep) { return ops_find(r, out, keep); }

/* ---- frames out ---------------------------------------------------------------------------- */

/* What the guided strategy tells messages apart by (src/compress.rs: Message). */
enum { KIND_P2P = 1, KIND_ALLTOALL = 2 };

/* The frame of the caller's message, padded to cx_floor, in a new buffer (NULL when
 * memory runs out). `stored`: no compression. */
static unsigned char *frame_of(const void *buf, int count, MPI_Datatype t, MPI_Comm comm,
                               uint32_t peer, int kind, int tag, int stored, size_t *len) {
    uint64_t n = vargr_bytes_of(count, t);
    const unsigned char *data = contiguous(buf, count, t);
    unsigned char *packed = NULL;
    if (data == NULL) {
        int psize = 0, pos = 0;
        PMPI_Pack_size(count, t, comm, &psize);
        packed = malloc(psize > 0 ? (size_t)psize : 1);
        if (packed == NULL) {
            return NULL;
        }
        PMPI_Pack(buf, count, t, packed, psize, &pos, comm);
        n = (uint64_t)pos;
        data = packed;
    }
    size_t bound = (size_t)vargr_mpi_cx_bound(n);
    size_t cap = bound > cx_floor ? bound : (size_t)cx_floor;
    unsigned char *f = calloc(cap, 1);
    if (f != NULL) {
        comm_info *c = vargr_info_of(comm);
        size_t used = (size_t)vargr_mpi_cx_encode(peer, (uint8_t)kind, c ? c->id : 0, tag,
                                                  data == packed ? 0 : elem_of(t), data, n,
                                                  stored, f);
        *len = used > cx_floor ? used : (size_t)cx_floor;
        pthread_mutex_lock(&framed_lock);
        framed[0] += 1;
        framed[1] += n;
        framed[2] += *len;
        pthread_mutex_unlock(&framed_lock);
    }
    free(packed);
    return f;
}

static int wants_frame(comm_info *c, int dest, int count, MPI_Datatype t) {
    return cx_floor && dest != MPI_PROC_NULL && is_remote(c, dest) &&
           vargr_bytes_of(count, t) >= cx_floor;
}

static int no_memory(MPI_Comm comm) {
    fprintf(stderr, "vargr-mpi: out of memory for a compressed message\n");
    PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
    return MPI_ERR_NO_MEM;
}

/* Operations that go on in the background, reaped as others start and at MPI_Finalize:
 * buffered sends of frames (a frame may not fit the program's attached buffer), and
 * operations of ours whose request the program freed while they were active (a common
 * idiom for sends: MPI_Isend then MPI_Request_free). A finished send's frame is freed; a
 * finished receive is decoded into the program's buffer, as MPI would have filled it. */
typedef struct bg {
    MPI_Request r;
    unsigned char *frame; /* a buffered send's; NULL when `o` says what to do */
    op o;
    struct bg *next;
} bg;
static bg *background;
static pthread_mutex_t bg_lock = PTHREAD_MUTEX_INITIALIZER;

static int finish_op(const op *o, MPI_Status *st);

static void reap(int wait) {
    pthread_mutex_lock(&bg_lock);
    bg **p = &background;
    while (*p) {
        int done = 0;
        MPI_Status st;
        if (wait) {
            PMPI_Wait(&(*p)->r, &st);
            done = 1;
        } else {
            PMPI_Test(&(*p)->r, &done, &st);
        }
        if (done) {
            bg *d = *p;
            *p = d->next;
            if (d->frame == NULL) {
                /* Nobody waits for it: an error is the program's to miss, as with MPI. */
                finish_op(&d->o, &st);
            }
            free(d->frame);
            free(d);
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&bg_lock);
}

/* Reaps finished background operations, if there are any (cheap when there are none). */
static void reap_some(void) {
    if (__atomic_load_n(&background, __ATOMIC_RELAXED) != NULL) {
        reap(0);
    }
}

/* Puts `b` in the background list. */
static void to_background(bg *b) {
    pthread_mutex_lock(&bg_lock);
    b->next = background;
    __atomic_store_n(&background, b, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&bg_lock);
}

void cx_finalize(void) {
    if (!cx_floor) {
        return;
    }
    reap(1);
    char host[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int hlen = 0;
    PMPI_Get_processor_name(host, &hlen);
    vargr_mpi_cx_samples(my_world, host);
    /* One line for the job, from world rank 0 (every rank finalizes). */
    uint64_t total[3] = {0, 0, 0};
    PMPI_Reduce(framed, total, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (my_world == 0) {
        vargr_mpi_cx_summary(total);
    }
}

int pmpi_send_mode(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                   MPI_Comm comm) {
    switch (mode) {
    case CX_SSEND: return PMPI_Ssend(buf, count, t, dest, tag, comm);
    case CX_BSEND: return PMPI_Bsend(buf, count, t, dest, tag, comm);
    case CX_RSEND: return PMPI_Rsend(buf, count, t, dest, tag, comm);
    default: return PMPI_Send(buf, count, t, dest, tag, comm);
    }
}

int pmpi_isend_mode(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                    MPI_Comm comm, MPI_Request *req) {
    switch (mode) {
    case CX_SSEND: return PMPI_Issend(buf, count, t, dest, tag, comm, req);
    case CX_BSEND: return PMPI_Ibsend(buf, count, t, dest, tag, comm, req);
    case CX_RSEND: return PMPI_Irsend(buf, count, t, dest, tag, comm, req);
    default: return PMPI_Isend(buf, count, t, dest, tag, comm, req);
    }
}

int cx_send(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
            MPI_Comm comm) {
    comm_info *c = vargr_info_of(comm);
    if (!wants_frame(c, dest, count, t)) {
        return pmpi_send_mode(mode, buf, count, t, dest, tag, comm);
    }
    uint32_t peer = vargr_world_of(c, dest);
    size_t len = 0;
    unsigned char *f = frame_of(buf, count, t, comm, peer, KIND_P2P, tag, 0, &len);
    if (f == NULL) {
        return no_memory(comm);
    }
    if (mode == CX_BSEND) {
        bg *b = malloc(sizeof *b);
        if (b == NULL) {
            free(f);
            return no_memory(comm);
        }
        int rc = PMPI_Isend(f, (int)len, MPI_BYTE, dest, tag, comm, &b->r);
        if (rc != MPI_SUCCESS) {
            free(f);
            free(b);
            return rc;
        }
        b->frame = f;
        reap(0);
        to_background(b);
        return MPI_SUCCESS;
    }
    uint64_t t0 = vargr_mpi_now();
    int rc = mode == CX_SSEND ? PMPI_Ssend(f, (int)len, MPI_BYTE, dest, tag, comm)
                              : PMPI_Send(f, (int)len, MPI_BYTE, dest, tag, comm);
    if (rc == MPI_SUCCESS) {
        vargr_mpi_cx_sent(peer, len, (double)(vargr_mpi_now() - t0) * 1e-9);
    }
    free(f);
    return rc;
}

int cx_isend(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
             MPI_Comm comm, MPI_Request *req) {
    reap_some();
    comm_info *c = vargr_info_of(comm);
    if (!wants_frame(c, dest, count, t)) {
        return pmpi_isend_mode(mode, buf, count, t, dest, tag, comm, req);
    }
    size_t len = 0;
    unsigned char *f =
        frame_of(buf, count, t, comm, vargr_world_of(c, dest), KIND_P2P, tag, 0, &len);
    if (f == NULL) {
        return no_memory(comm);
    }
    int rc = mode == CX_SSEND ? PMPI_Issend(f, (int)len, MPI_BYTE, dest, tag, comm, req)
                              : PMPI_Isend(f, (int)len, MPI_BYTE, dest, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        free(f);
        return rc;
    }
    op o = {.kind = OP_ISEND, .temp = f, .temp_len = len, .comm = comm};
    remember(*req, &o);
    return MPI_SUCCESS;
}

int cx_send_init(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                 MPI_Comm comm, MPI_Request *req) {
    comm_info *c = vargr_info_of(comm);
    if (!wants_frame(c, dest, count, t)) {
        switch (mode) {
        case CX_SSEND: return PMPI_Ssend_init(buf, count, t, dest, tag, comm, req);
        case CX_BSEND: return PMPI_Bsend_init(buf, count, t, dest, tag, comm, req);
        case CX_RSEND: return PMPI_Rsend_init(buf, count, t, dest, tag, comm, req);
        default: return PMPI_Send_init(buf, count, t, dest, tag, comm, req);
        }
    }
    /* A persistent request's size is fixed: its frames go stored, all of one size. */
    uint64_t n = vargr_bytes_of(count, t);
    int psize = 0;
    if (contiguous(buf, count, t) == NULL) {
        PMPI_Pack_size(count, t, comm, &psize);
        n = (uint64_t)psize;
    }
    size_t bound = (size_t)vargr_mpi_cx_bound(n);
    size_t len = bound > cx_floor ? bound : (size_t)cx_floor;
    unsigned char *f = calloc(len, 1);
    if (f == NULL) {
        return no_memory(comm);
    }
    int rc = mode == CX_SSEND ? PMPI_Ssend_init(f, (int)len, MPI_BYTE, dest, tag, comm, req)
                              : PMPI_Send_init(f, (int)len, MPI_BYTE, dest, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        free(f);
        return rc;
    }
    op o = {.kind = OP_PSEND,
            .buf = (void *)buf,
            .count = count,
            .type = t,
            .comm = comm,
            .temp = f,
            .temp_len = len,
            .peer = vargr_world_of(c, dest)};
    remember(*req, &o);
    return MPI_SUCCESS;
}

/* ---- frames in ----------------------------------------------------------------------------- */

/* Decodes `wire` into the caller's buffer and sets the status's count; returns the
 * error to report (truncation or a damaged frame). */
static int deliver(const unsigned char *wire, size_t wire_len, void *buf, int count,
                   MPI_Datatype t, MPI_Comm comm, MPI_Status *st) {
    uint64_t cap = vargr_bytes_of(count, t), got = 0;
    unsigned char *out = (unsigned char *)contiguous(buf, count, t);
    unsigned char *packed = NULL;
    int psize = 0;
    if (out == NULL && count > 0) {
        PMPI_Pack_size(count, t, comm, &psize);
        cap = (uint64_t)psize;
        packed = malloc(psize > 0 ? (size_t)psize : 1);
        if (packed == NULL) {
            return no_memory(comm);
        }
        out = packed;
    }
    char what[96];
    snprintf(what, sizeof what, "from rank %d (tag %d)", st->MPI_SOURCE, st->MPI_TAG);
    int r = vargr_mpi_cx_decode(wire, wire_len, out, cap, &got, what);
    int rc = MPI_SUCCESS;
    if (r == 0) {
        if (packed != NULL) {
            /* Whole elements only: a message shorter than the buffer fills part of it. */
            int pos = 0, size = 0;
            PMPI_Type_size(t, &size);
            int whole = size > 0 ? (int)(got / (uint64_t)size) : 0;
            rc = PMPI_Unpack(packed, (int)got, &pos, buf, whole < count ? whole : count, t, comm);
        }
        PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)got);
    } else {
        rc = r == 1 ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
        PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)(r == 1 ? cap : 0));
    }
    free(packed);
    st->MPI_ERROR = rc;
    if (rc != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, rc);
    }
    return rc;
}

/* A message received whole into `temp` (`n` bytes, as MPI_PACKED, from st's source): a
 * frame if it came from another site with at least cx_floor bytes, else the sender's
 * bytes, which the caller's type unpacks. */
static int land(const unsigned char *temp, size_t n, void *buf, int count, MPI_Datatype t,
                MPI_Comm comm, MPI_Status *st) {
    comm_info *c = vargr_info_of(comm);
    if (is_remote(c, st->MPI_SOURCE) && n >= cx_floor) {
        return deliver(temp, n, buf, count, t, comm, st);
    }
    unsigned char *out = (unsigned char *)contiguous(buf, count, t);
    int cap = 0, rc = MPI_SUCCESS;
    if (out != NULL) {
        cap = (int)vargr_bytes_of(count, t);
    } else {
        PMPI_Pack_size(count, t, comm, &cap);
    }
    if (n > (size_t)cap) {
        rc = MPI_ERR_TRUNCATE;
        n = (size_t)cap;
    }
    if (out != NULL) {
        memcpy(out, temp, n);
    } else if (n > 0) {
        int pos = 0;
        /* Whole elements only: a truncated tail of one is not the caller's. */
        int size = 0;
        PMPI_Type_size(t, &size);
        int whole = size > 0 ? (int)(n / (size_t)size) : 0;
        PMPI_Unpack(temp, (int)n, &pos, buf, whole < count ? whole : count, t, comm);
    }
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)n);
    st->MPI_ERROR = rc;
    if (rc != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, rc);
    }
    return rc;
}

/* Where a receive of `count` elements that may get a frame lands first. */
static size_t landing_size(int count, MPI_Datatype t) {
    size_t b = (size_t)vargr_mpi_cx_bound(vargr_bytes_of(count, t));
    return b > cx_floor ? b : (size_t)cx_floor;
}

static int may_get_frame(comm_info *c, int src, int count, MPI_Datatype t) {
    return cx_floor && vargr_bytes_of(count, t) >= cx_floor && may_be_remote(c, src);
}

/* ---- the stash: frames a probe took out of MPI, in order -------------------------------- */

typedef struct stashed {
    MPI_Comm comm;
    int source, tag;
    unsigned char *wire;
    size_t len;
    MPI_Message minted; /* the handle a matched probe gave out, or MPI_MESSAGE_NULL */
    MPI_Request mint_send; /* the zero-byte send behind `minted`, done once it is received */
    struct stashed *next;
} stashed;

static stashed *stash_head, **stash_tail = &stash_head;
static int stash_count;
static pthread_mutex_t stash_lock = PTHREAD_MUTEX_INITIALIZER;

static int matches(const stashed *s, MPI_Comm comm, int src, int tag) {
    return s->comm == comm && (src == MPI_ANY_SOURCE || src == s->source) &&
           (tag == MPI_ANY_TAG || tag == s->tag) && s->minted == MPI_MESSAGE_NULL;
}

/* Removes and returns the first stashed message that a receive of (comm, src, tag)
 * would match or, with `minted` not MPI_MESSAGE_NULL, that handle stands for. */
static stashed *stash_remove(MPI_Comm comm, int src, int tag, MPI_Message minted) {
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) {
        return NULL;
    }
    pthread_mutex_lock(&stash_lock);
    stashed **p = &stash_head, *found = NULL;
    while (*p) {
        int hit = minted != MPI_MESSAGE_NULL ? (*p)->minted == minted
                                             : matches(*p, comm, src, tag);
        if (hit) {
            found = *p;
            *p = found->next;
            if (stash_tail == &found->next) {
                stash_tail = p;
            }
            __atomic_sub_fetch(&stash_count, 1, __ATOMIC_RELEASE);
            break;
        }
        p = &(*p)->next;
    }
    pthread_mutex_unlock(&stash_lock);
    return found;
}

/* Takes the first stashed message a receive would match (NULL if none). */
static stashed *stash_take(MPI_Comm comm, int src, int tag) {
    return stash_remove(comm, src, tag, MPI_MESSAGE_NULL);
}

static const stashed *stash_peek(MPI_Comm comm, int src, int tag, MPI_Status *st) {
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) {
        return NULL;
    }
    pthread_mutex_lock(&stash_lock);
    stashed *s = stash_head;
    while (s && !matches(s, comm, src, tag)) {
        s = s->next;
    }
    if (s && st != MPI_STATUS_IGNORE) {
        st->MPI_SOURCE = s->source;
        st->MPI_TAG = s->tag;
        st->MPI_ERROR = MPI_SUCCESS;
        int64_t n = vargr_mpi_cx_original(s->wire, s->len);
        PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)(n < 0 ? 0 : n));
    }
    pthread_mutex_unlock(&stash_lock);
    return s;
}

static void stash_put(stashed *s) {
    pthread_mutex_lock(&stash_lock);
    s->next = NULL;
    *stash_tail = s;
    stash_tail = &s->next;
    __atomic_add_fetch(&stash_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&stash_lock);
}

/* Removes the stashed message a minted handle stands for. */
static stashed *stash_minted(MPI_Message m) {
    if (m == MPI_MESSAGE_NULL || m == MPI_MESSAGE_NO_PROC) {
        return NULL;
    }
    return stash_remove(MPI_COMM_NULL, 0, 0, m);
}

/* Takes the matched message `m` (of `n` bytes) out of MPI into a new stash entry. */
static stashed *take_frame(MPI_Message *m, MPI_Comm comm, const MPI_Status *st, size_t n) {
    stashed *s = calloc(1, sizeof *s);
    unsigned char *w = malloc(n ? n : 1);
    if (s == NULL || w == NULL) {
        free(s);
        free(w);
        return NULL;
    }
    PMPI_Mrecv(w, (int)n, MPI_BYTE, m, MPI_STATUS_IGNORE);
    s->comm = comm;
    s->source = st->MPI_SOURCE;
    s->tag = st->MPI_TAG;
    s->wire = w;
    s->len = n;
    s->minted = MPI_MESSAGE_NULL;
    s->mint_send = MPI_REQUEST_NULL;
    return s;
}

/* Whether the message a probe found (`st`) is a frame; its size in `*n`. */
static int is_frame(MPI_Comm comm, const MPI_Status *st, size_t *n) {
    int count = 0;
    PMPI_Get_count(st, MPI_BYTE, &count);
    *n = count > 0 ? (size_t)count : 0;
    return st->MPI_SOURCE != MPI_PROC_NULL && is_remote(vargr_info_of(comm), st->MPI_SOURCE) &&
           *n >= cx_floor;
}

/* Delivers a stashed message to the caller and frees it. */
static int from_stash(stashed *s, void *buf, int count, MPI_Datatype t, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    out->MPI_SOURCE = s->source;
    out->MPI_TAG = s->tag;
    int rc = deliver(s->wire, s->len, buf, count, t, s->comm, out);
    free(s->wire);
    free(s);
    return rc;
}

/* ---- receives ------------------------------------------------------------------------------ */

int cx_recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
            MPI_Status *st) {
    stashed *s = stash_take(comm, src, tag);
    if (s) {
        return from_stash(s, buf, count, t, st);
    }
    comm_info *c = vargr_info_of(comm);
    if (!may_get_frame(c, src, count, t)) {
        return PMPI_Recv(buf, count, t, src, tag, comm, st);
    }
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    MPI_Message m;
    int rc = PMPI_Mprobe(src, tag, comm, &m, out);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    size_t n = 0;
    if (!is_frame(comm, out, &n)) {
        return PMPI_Mrecv(buf, count, t, &m, st);
    }
    unsigned char *w = malloc(n);
    if (w == NULL) {
        return no_memory(comm);
    }
    rc = PMPI_Mrecv(w, (int)n, MPI_BYTE, &m, out);
    if (rc == MPI_SUCCESS) {
        rc = deliver(w, n, buf, count, t, comm, out);
    }
    free(w);
    return rc;
}

/* A request that is complete at once (a receive from MPI_PROC_NULL), which cx_finish
 * fills with stashed message `s`. */
static int stashed_request(stashed *s, void *buf, int count, MPI_Datatype t, MPI_Comm comm,
                           MPI_Request *req) {
    int rc = PMPI_Irecv(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, comm, req);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    op o = {.kind = OP_STASHED,
            .buf = buf,
            .count = count,
            .type = t,
            .comm = comm,
            .temp = s->wire,
            .temp_len = s->len,
            .source = s->source,
            .tag = s->tag};
    free(s);
    remember(*req, &o);
    return MPI_SUCCESS;
}

/* A non-blocking (OP_IRECV) or persistent (OP_PRECV) receive: into the caller's buffer
 * when no frame can come, else into one large enough for either, finished by cx_finish. */
static int landing(int kind, void *buf, int count, MPI_Datatype t, int src, int tag,
                   MPI_Comm comm, MPI_Request *req) {
    comm_info *c = vargr_info_of(comm);
    if (!may_get_frame(c, src, count, t)) {
        return kind == OP_IRECV ? PMPI_Irecv(buf, count, t, src, tag, comm, req)
                                : PMPI_Recv_init(buf, count, t, src, tag, comm, req);
    }
    size_t len = landing_size(count, t);
    unsigned char *w = malloc(len);
    if (w == NULL) {
        return no_memory(comm);
    }
    int rc = kind == OP_IRECV ? PMPI_Irecv(w, (int)len, MPI_PACKED, src, tag, comm, req)
                              : PMPI_Recv_init(w, (int)len, MPI_PACKED, src, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        free(w);
        return rc;
    }
    /* A persistent receive keeps what it asks for, to look in the stash at each start. */
    op o = {.kind = kind,
            .buf = buf,
            .count = count,
            .type = t,
            .comm = comm,
            .temp = w,
            .temp_len = len,
            .source = src,
            .tag = tag};
    remember(*req, &o);
    return MPI_SUCCESS;
}

int cx_irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
             MPI_Request *req) {
    reap_some();
    stashed *s = stash_take(comm, src, tag);
    if (s) {
        return stashed_request(s, buf, count, t, comm, req);
    }
    return landing(OP_IRECV, buf, count, t, src, tag, comm, req);
}

int cx_recv_init(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                 MPI_Request *req) {
    return landing(OP_PRECV, buf, count, t, src, tag, comm, req);
}

int cx_sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
                int rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm,
                MPI_Status *st) {
    comm_info *c = vargr_info_of(comm);
    if (!wants_frame(c, dest, scount, stype) && !may_get_frame(c, src, rcount, rtype) &&
        __atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) {
        return PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag,
                             comm, st);
    }
    MPI_Request r[2];
    MPI_Status s[2];
    int rc = cx_irecv(rbuf, rcount, rtype, src, rtag, comm, &r[0]);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    rc = cx_isend(CX_SEND, sbuf, scount, stype, dest, stag, comm, &r[1]);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    MPI_Request was[2] = {r[0], r[1]};
    rc = PMPI_Waitall(2, r, s);
    if (rc == MPI_ERR_IN_STATUS) {
        rc = s[0].MPI_ERROR != MPI_SUCCESS ? s[0].MPI_ERROR : s[1].MPI_ERROR;
    } else if (rc == MPI_SUCCESS) {
        /* cx_finish leaves requests that are not ours alone. */
        int sent = cx_finish(was[1], &s[1]);
        int got = cx_finish(was[0], &s[0]);
        rc = got != MPI_SUCCESS ? got : sent;
    }
    if (st != MPI_STATUS_IGNORE) {
        *st = s[0];
    }
    return rc;
}

int cx_sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src,
                        int rtag, MPI_Comm comm, MPI_Status *st) {
    comm_info *c = vargr_info_of(comm);
    if (!wants_frame(c, dest, count, t) && !may_get_frame(c, src, count, t) &&
        __atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) {
        return PMPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st);
    }
    /* The outgoing bytes first, as MPI does: then the buffer can take the reply. */
    int psize = 0, pos = 0;
    PMPI_Pack_size(count, t, comm, &psize);
    void *copy = malloc(psize > 0 ? (size_t)psize : 1);
    if (copy == NULL) {
        return no_memory(comm);
    }
    PMPI_Pack(buf, count, t, copy, psize, &pos, comm);
    int rc = cx_sendrecv(copy, pos, MPI_PACKED, dest, stag, buf, count, t, src, rtag, comm, st);
    free(copy);
    return rc;
}

/* ---- probes -------------------------------------------------------------------------------- */

/* A probe found `st`; a frame is taken into the stash and reported by its original size. */
static int probed(MPI_Comm comm, MPI_Status *st) {
    size_t n = 0;
    if (!is_frame(comm, st, &n)) {
        return MPI_SUCCESS;
    }
    MPI_Message m;
    MPI_Status again;
    /* The first message of that source and tag is the one just found. */
    int rc = PMPI_Mprobe(st->MPI_SOURCE, st->MPI_TAG, comm, &m, &again);
    if (rc != MPI_SUCCESS) {
        return rc;
    }
    stashed *s = take_frame(&m, comm, &again, n);
    if (s == NULL) {
        return no_memory(comm);
    }
    stash_put(s);
    stash_peek(comm, s->source, s->tag, st);
    return MPI_SUCCESS;
}

int cx_probe(int src, int tag, MPI_Comm comm, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    if (stash_peek(comm, src, tag, out)) {
        return MPI_SUCCESS;
    }
    int rc = PMPI_Probe(src, tag, comm, out);
    return rc == MPI_SUCCESS ? probed(comm, out) : rc;
}

int cx_iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    if (stash_peek(comm, src, tag, out)) {
        *flag = 1;
        return MPI_SUCCESS;
    }
    int rc = PMPI_Iprobe(src, tag, comm, flag, out);
    return rc == MPI_SUCCESS && *flag ? probed(comm, out) : rc;
}

/* A handle for stashed message `s`: a zero-byte message to ourselves, matched. Its send
 * is waited for once the message is received (MPICH completes a send to oneself only
 * then). */
static int mint(stashed *s, MPI_Message *msg) {
    MPI_Request r;
    int rc = PMPI_Isend(NULL, 0, MPI_BYTE, 0, MINT_TAG, cx_self, &r);
    if (rc == MPI_SUCCESS) {
        rc = PMPI_Mprobe(0, MINT_TAG, cx_self, msg, MPI_STATUS_IGNORE);
    }
    if (rc == MPI_SUCCESS) {
        s->minted = *msg;
        s->mint_send = r;
        stash_put(s);
    }
    return rc;
}

/* Receives the zero-byte message behind a minted handle, and finishes its send. */
static void unmint(stashed *s, MPI_Message *msg) {
    PMPI_Mrecv(NULL, 0, MPI_BYTE, msg, MPI_STATUS_IGNORE);
    PMPI_Wait(&s->mint_send, MPI_STATUS_IGNORE);
}

/* A matched probe found `st` with handle `*msg`: a frame becomes a minted handle. */
static int matched(MPI_Comm comm, MPI_Message *msg, MPI_Status *st) {
    size_t n = 0;
    if (!is_frame(comm, st, &n)) {
        return MPI_SUCCESS;
    }
    stashed *s = take_frame(msg, comm, st, n);
    if (s == NULL) {
        return no_memory(comm);
    }
    int64_t orig = vargr_mpi_cx_original(s->wire, s->len);
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)(orig < 0 ? 0 : orig));
    return mint(s, msg);
}

/* A stashed message a plain receive would take, as a matched probe's minted handle. */
static int mint_stashed(MPI_Comm comm, int src, int tag, MPI_Message *msg, MPI_Status *st,
                        int *found) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    *found = 0;
    if (!stash_peek(comm, src, tag, out)) {
        return MPI_SUCCESS;
    }
    stashed *s = stash_take(comm, src, tag);
    if (s == NULL) {
        return MPI_SUCCESS; /* another thread took it */
    }
    *found = 1;
    return mint(s, msg);
}

int cx_mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    int found = 0;
    int rc = mint_stashed(comm, src, tag, msg, out, &found);
    if (rc != MPI_SUCCESS || found) {
        return rc;
    }
    rc = PMPI_Mprobe(src, tag, comm, msg, out);
    return rc == MPI_SUCCESS ? matched(comm, msg, out) : rc;
}

int cx_improbe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *out = st == MPI_STATUS_IGNORE ? &mine : st;
    int found = 0;
    int rc = mint_stashed(comm, src, tag, msg, out, &found);
    if (rc != MPI_SUCCESS || found) {
        *flag = found;
        return rc;
    }
    rc = PMPI_Improbe(src, tag, comm, flag, msg, out);
    return rc == MPI_SUCCESS && *flag ? matched(comm, msg, out) : rc;
}

int cx_mrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Status *st) {
    stashed *s = stash_minted(*msg);
    if (s == NULL) {
        return PMPI_Mrecv(buf, count, t, msg, st);
    }
    unmint(s, msg);
    return from_stash(s, buf, count, t, st);
}

int cx_imrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Request *req) {
    stashed *s = stash_minted(*msg);
    if (s == NULL) {
        return PMPI_Imrecv(buf, count, t, msg, req);
    }
    unmint(s, msg);
    return stashed_request(s, buf, count, t, s->comm, req);
}

/* ---- persistent requests and completion ------------------------------------------------------ */

/* A persistent send of ours about to start: its frame, from the caller's buffer now. */
static int refill(MPI_Request r) {
    op o;
    if (!find(r, &o, 1) || o.kind != OP_PSEND) {
        return MPI_SUCCESS;
    }
    size_t len = 0;
    unsigned char *f = frame_of(o.buf, o.count, o.type, o.comm, o.peer, KIND_P2P, 0, 1, &len);
    if (f == NULL) {
        return no_memory(o.comm);
    }
    /* Stored frames of one message size are all of one length. */
    memcpy(o.temp, f, len < o.temp_len ? len : o.temp_len);
    free(f);
    return MPI_SUCCESS;
}

/* Takes the stashed message persistent receive `r` matches, if there is one: a probe
 * took it out of MPI before the receive started, so it comes before anything MPI would
 * match now. The MPI request is then not started; MPI reports an inactive persistent
 * request complete at once, and cx_finish delivers the message. Returns whether. */
static int presatisfy(MPI_Request r) {
    op o;
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0 || !find(r, &o, 1) ||
        o.kind != OP_PRECV || o.pre != NULL) {
        return 0;
    }
    stashed *s = stash_take(o.comm, o.source, o.tag);
    if (s == NULL) {
        return 0;
    }
    o.pre = s;
    remember(r, &o);
    __atomic_add_fetch(&presatisfied, 1, __ATOMIC_RELEASE);
    return 1;
}

int cx_start(MPI_Request *req) {
    if (presatisfy(*req)) {
        return MPI_SUCCESS;
    }
    int rc = refill(*req);
    return rc == MPI_SUCCESS ? PMPI_Start(req) : rc;
}

int cx_startall(int n, MPI_Request reqs[]) {
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) != 0) {
        /* A receive may take a stashed message: each request in turn. */
        for (int i = 0; i < n; i++) {
            int rc = cx_start(&reqs[i]);
            if (rc != MPI_SUCCESS) {
                return rc;
            }
        }
        return MPI_SUCCESS;
    }
    for (int i = 0; i < n; i++) {
        int rc = refill(reqs[i]);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
    }
    return PMPI_Startall(n, reqs);
}

int cx_presatisfied(int n, const MPI_Request reqs[]) {
    if (__atomic_load_n(&presatisfied, __ATOMIC_ACQUIRE) == 0) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        op o;
        if (reqs[i] != MPI_REQUEST_NULL && find(reqs[i], &o, 1) && o.pre != NULL) {
            return i;
        }
    }
    return -1;
}

int cx_request_free(MPI_Request *req) {
    op o;
    MPI_Request r = *req;
    if (find(r, &o, 1) && (o.kind == OP_ISEND || o.kind == OP_IRECV)) {
        /* Freed while active: MPI would finish it in the background, and so do we, with
         * the real request, so that its frame is freed (a send) or decoded into the
         * program's buffer (a receive) when it completes. */
        bg *b = malloc(sizeof *b);
        if (b == NULL) {
            return no_memory(MPI_COMM_WORLD);
        }
        find(r, &o, 0);
        b->r = r;
        b->frame = NULL;
        b->o = o;
        to_background(b);
        *req = MPI_REQUEST_NULL;
        reap_some();
        return MPI_SUCCESS;
    }
    int rc = PMPI_Request_free(req);
    if (rc == MPI_SUCCESS && find(r, &o, 0)) {
        /* A persistent request is inactive when freed by a correct program. A stashed
         * message was matched already: MPI would have delivered it. */
        if (o.kind == OP_STASHED) {
            MPI_Status st;
            memset(&st, 0, sizeof st);
            st.MPI_SOURCE = o.source;
            st.MPI_TAG = o.tag;
            deliver(o.temp, o.temp_len, o.buf, o.count, o.type, o.comm, &st);
        }
        free(o.temp);
    }
    return rc;
}

/* Puts what receive `o` got into the caller's buffer (decoded, unpacked) and makes `st`
 * the caller's view; keeps `o`'s temporary buffer. */
static int land_received(const op *o, MPI_Status *st) {
    if (o->pre != NULL) {
        const stashed *p = o->pre;
        st->MPI_SOURCE = p->source;
        st->MPI_TAG = p->tag;
        st->MPI_ERROR = MPI_SUCCESS;
        return deliver(p->wire, p->len, o->buf, o->count, o->type, o->comm, st);
    }
    int cancelled = 0;
    PMPI_Test_cancelled(st, &cancelled);
    if (o->kind == OP_STASHED) {
        st->MPI_SOURCE = o->source;
        st->MPI_TAG = o->tag;
        return deliver(o->temp, o->temp_len, o->buf, o->count, o->type, o->comm, st);
    }
    if (cancelled || st->MPI_SOURCE == MPI_PROC_NULL) {
        return MPI_SUCCESS;
    }
    int n = 0;
    PMPI_Get_count(st, MPI_BYTE, &n);
    return land(o->temp, n > 0 ? (size_t)n : 0, o->buf, o->count, o->type, o->comm, st);
}

/* Finishes operation `o`, whose request completed with status `st`. */
static int finish_op(const op *o, MPI_Status *st) {
    int rc = MPI_SUCCESS;
    if (o->kind == OP_STASHED || o->kind == OP_IRECV || o->kind == OP_PRECV) {
        if (o->landed) {
            *st = o->landed_st;
            rc = o->landed_rc;
        } else {
            rc = land_received(o, st);
        }
    }
    if (o->kind == OP_ISEND || o->kind == OP_STASHED || o->kind == OP_IRECV) {
        free(o->temp);
    }
    return rc;
}

int cx_request_get_status(MPI_Request r, int *flag, MPI_Status *st) {
    op o;
    if (!find(r, &o, 1) || (o.kind != OP_STASHED && o.kind != OP_IRECV && o.kind != OP_PRECV)) {
        return PMPI_Request_get_status(r, flag, st);
    }
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    int rc = PMPI_Request_get_status(r, flag, s);
    if (rc != MPI_SUCCESS || !*flag) {
        return rc;
    }
    /* Complete: the program may read its buffer now, so decode into it once, and keep
     * the status for this call's repeats and for the wait or test that frees it. */
    if (!o.landed) {
        o.landed_rc = land_received(&o, s);
        o.landed_st = *s;
        o.landed = 1;
        remember(r, &o);
    }
    *s = o.landed_st;
    return o.landed_rc;
}

int cx_finish(MPI_Request r, MPI_Status *st) {
    op o;
    reap_some();
    if (!find(r, &o, 1)) {
        return MPI_SUCCESS;
    }
    /* Persistent operations stay for the next start, not landed yet. */
    if (o.kind != OP_PSEND && o.kind != OP_PRECV && !find(r, &o, 0)) {
        return MPI_SUCCESS;
    }
    int rc = finish_op(&o, st);
    if (o.kind == OP_PRECV && (o.landed || o.pre != NULL)) {
        if (o.pre != NULL) {
            stashed *p = o.pre;
            free(p->wire);
            free(p);
            __atomic_sub_fetch(&presatisfied, 1, __ATOMIC_RELEASE);
        }
        o.landed = 0;
        o.pre = NULL;
        remember(r, &o);
    }
    return rc;
}

/* ---- all-to-all, rebuilt on frames ------------------------------------------------------- */

/* Where a rebuilt collective's messages go: a private duplicate of the communicator, made
 * on first use (a collective call, as the program's collective is), so that they never
 * match the program's own messages. */
static int twin_of(comm_info *c, MPI_Comm comm, MPI_Comm *twin) {
    if (!c->twin_made) {
        int rc = PMPI_Comm_dup(comm, &c->twin);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        c->twin_made = 1;
    }
    *twin = c->twin;
    return MPI_SUCCESS;
}

/* Whether the message between this rank and `peer` of `count` elements of `t` goes as a
 * frame: both ends decide alike, since MPI makes the bytes sent and received agree. */
static int pair_framed(comm_info *c, int peer, int count, MPI_Datatype t) {
    return peer != c->me && is_remote(c, peer) && vargr_bytes_of(count, t) >= cx_floor;
}

/* MPI_Alltoallv as point-to-point messages on the twin, those between sites as frames.
 * Taken whenever the communicator spans sites, which every member knows alike (a rank
 * cannot know whether the others' messages are large): the messages are posted all at
 * once, as Open MPI's own linear algorithm for Alltoallv does, frames encoded one by one
 * while the earlier ones travel. */
int cx_alltoallv(const void *sbuf, const int scounts[], const int sdispls[], MPI_Datatype stype,
                 void *rbuf, const int rcounts[], const int rdispls[], MPI_Datatype rtype,
                 MPI_Comm comm) {
    comm_info *c = vargr_info_of(comm);
    int inter = 1;
    PMPI_Comm_test_inter(comm, &inter);
    MPI_Comm twin;
    if (c == NULL || inter || sbuf == MPI_IN_PLACE || !may_be_remote(c, MPI_ANY_SOURCE) ||
        twin_of(c, comm, &twin) != MPI_SUCCESS) {
        return PMPI_Alltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype,
                              comm);
    }
    int n = c->size, me = c->me;
    MPI_Aint lb = 0, sext = 0, rext = 0;
    PMPI_Type_get_extent(stype, &lb, &sext);
    PMPI_Type_get_extent(rtype, &lb, &rext);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)n);
    MPI_Status *stats = malloc(sizeof(MPI_Status) * 2 * (size_t)n);
    unsigned char **landed = calloc((size_t)n, sizeof *landed);
    unsigned char **frames = calloc((size_t)n, sizeof *frames);
    if (!reqs || !stats || !landed || !frames) {
        free(reqs);
        free(stats);
        free(landed);
        free(frames);
        return no_memory(comm);
    }
    int rc = MPI_SUCCESS;
    for (int k = 0; k < n; k++) {
        int p = (me - k + n) % n;
        reqs[p] = MPI_REQUEST_NULL;
        if (rc != MPI_SUCCESS) {
            continue;
        }
        if (pair_framed(c, p, rcounts[p], rtype)) {
            size_t cap = landing_size(rcounts[p], rtype);
            landed[p] = malloc(cap);
            rc = landed[p] == NULL ? MPI_ERR_NO_MEM
                                   : PMPI_Irecv(landed[p], (int)cap, MPI_BYTE, p, 0, twin, &reqs[p]);
        } else {
            rc = PMPI_Irecv((char *)rbuf + (MPI_Aint)rdispls[p] * rext, rcounts[p], rtype, p, 0,
                            twin, &reqs[p]);
        }
    }
    for (int k = 0; k < n; k++) {
        int p = (me + k) % n;
        reqs[n + p] = MPI_REQUEST_NULL;
        if (rc != MPI_SUCCESS) {
            continue;
        }
        const char *src = (const char *)sbuf + (MPI_Aint)sdispls[p] * sext;
        if (pair_framed(c, p, scounts[p], stype)) {
            size_t len = 0;
            frames[p] = frame_of(src, scounts[p], stype, comm, vargr_world_of(c, p), KIND_ALLTOALL,
                                 0, 0, &len);
            rc = frames[p] == NULL
                     ? MPI_ERR_NO_MEM
                     : PMPI_Isend(frames[p], (int)len, MPI_BYTE, p, 0, twin, &reqs[n + p]);
        } else {
            rc = PMPI_Isend(src, scounts[p], stype, p, 0, twin, &reqs[n + p]);
        }
    }
    /* Whatever was posted completes before its buffers go, even after an error. */
    int wrc = PMPI_Waitall(2 * n, reqs, stats);
    if (rc == MPI_SUCCESS && wrc != MPI_SUCCESS) {
        rc = wrc;
    }
    for (int p = 0; p < n && rc == MPI_SUCCESS; p++) {
        if (landed[p] != NULL) {
            int got = 0;
            PMPI_Get_count(&stats[p], MPI_BYTE, &got);
            rc = deliver(landed[p], got > 0 ? (size_t)got : 0,
                         (char *)rbuf + (MPI_Aint)rdispls[p] * rext, rcounts[p], rtype, comm,
                         &stats[p]);
        }
    }
    for (int p = 0; p < n; p++) {
        free(landed[p]);
        free(frames[p]);
    }
    free(reqs);
    free(stats);
    free(landed);
    free(frames);
    if (rc == MPI_ERR_NO_MEM) {
        return no_memory(comm);
    }
    return rc;
}

/* MPI_Alltoall: the same, when its messages are large enough to be framed (every rank
 * sends and receives the same number of bytes, so all decide alike). */
int cx_alltoall(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                MPI_Datatype rtype, MPI_Comm comm) {
    comm_info *c = vargr_info_of(comm);
    if (c == NULL || sbuf == MPI_IN_PLACE || vargr_bytes_of(rcount, rtype) < cx_floor) {
        return PMPI_Alltoall(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    }
    int n = c->size;
    int *counts = malloc(sizeof(int) * 4 * (size_t)(n > 0 ? n : 1));
    if (counts == NULL) {
        return no_memory(comm);
    }
    int *sd = counts + n, *rc_ = counts + 2 * n, *rd = counts + 3 * n;
    for (int i = 0; i < n; i++) {
        counts[i] = scount;
        sd[i] = i * scount;
        rc_[i] = rcount;
        rd[i] = i * rcount;
    }
    int rc = cx_alltoallv(sbuf, counts, sd, stype, rbuf, rc_, rd, rtype, comm);
    free(counts);
    return rc;
}
