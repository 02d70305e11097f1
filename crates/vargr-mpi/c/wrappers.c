/* The MPI functions libvargr_mpi.so wraps, through MPI's profiling interface: each
 * vargr_w_MPI_X records what the call did around PMPI_X. Rust exports them under their
 * MPI names (src/trampolines.rs; a cdylib does not export C symbols itself), and turns
 * the events into vargr-trace records (src/events.rs). Functions not wrapped here are
 * not defined by the library at all, so the program's calls reach MPI untouched.
 *
 * Compiled against the mpi.h of the MPI it runs on (build.rs): handles are pointers in
 * Open MPI and ints in MPICH, and only this file sees them. Rust gets plain numbers:
 * communicator ids, world ranks, tags, bytes. */

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqmap.h"
#include "shim.h"

/* ---- the C ABI of the Rust core (src/events.rs) -------------------------------------- */

/* The calling thread's ring (WriterRing in src/events.rs): records are written straight
 * into it (put()), as vargr_trace's Ring::push does. */
typedef struct {
    uint64_t *slots; /* mask + 1 slots of four words */
    uint64_t mask;
    uint64_t *head;  /* records ever written */
    uint64_t drain_mask;
} writer_ring;

extern int vargr_mpi_ring(writer_ring *out);
extern uint16_t vargr_mpi_collector(uint32_t comm, uint16_t kind);
extern void vargr_mpi_drain(void);
extern uint64_t vargr_mpi_now(void);

/* vargr_trace::now() without a call into Rust on every wrapped call: the time-stamp
 * counter on x86-64 (what the Rust core reads there too), elsewhere the core's clock. */
#if defined(__x86_64__)
#include <x86intrin.h>
#define NOW() __rdtsc()
#else
#define NOW() vargr_mpi_now()
#endif
extern int vargr_mpi_start(int rank, int size, int kinds, const char *built_for,
                           const char *runs_on);
extern void vargr_mpi_comm(uint32_t id, uint32_t low, uint32_t group, uint32_t nth);
extern void vargr_mpi_finish(void);

/* In the order of KINDS in src/events.rs; vargr_mpi_start checks the count. */
enum {
    K_P2P, /* one message: a send or a receive, with its completion time */
    K_SEND, K_SSEND, K_ISEND, K_RECV, K_IRECV, K_SENDRECV,
    K_WAIT, K_WAITALL, K_WAITANY, K_TEST, K_TESTALL, K_PROBE, K_IPROBE,
    K_BARRIER, K_BCAST, K_REDUCE, K_ALLREDUCE, K_GATHER, K_ALLGATHER, K_SCATTER,
    K_ALLTOALL, K_ALLTOALLV,
    K_BSEND, K_RSEND, K_IBSEND, K_ISSEND, K_IRSEND, K_SENDRECV_REPLACE, K_WAITSOME, K_TESTANY,
    K_TESTSOME, K_MPROBE, K_IMPROBE, K_MRECV, K_IMRECV,
    /* runs of unsuccessful tests and probes (see poll_run) */
    K_TEST_POLLS, K_TESTANY_POLLS, K_TESTALL_POLLS, K_TESTSOME_POLLS, K_IPROBE_POLLS,
    K_COUNT
};

/* Each wrapper is an entry that hands the call to MPI untouched unless the library
 * records or compresses, and a traced_MPI_X that does the rest. Kept apart, the untouched
 * path saves no registers and makes no frame: a program that polls calls MPI_Test
 * millions of times a second, and a frame for every call is a few percent of it. */
#define NOINLINE __attribute__((noinline))
/* Per-thread state in the static TLS block (the library is loaded at start-up, not
 * opened later), so that reading it is one instruction, not a call to __tls_get_addr. */
#define TLS_IE __attribute__((tls_model("initial-exec")))

/* vargr_trace::EventOp */
enum { OP_CALL = 1, OP_SEND = 2, OP_RECV = 3, OP_USER = 7 };

/* Calls on no communicator (waits, tests): Rust names them "mpi/...". */
#define NO_COMM UINT32_MAX

/* ---- the MPI this was built for, and the check against the one it runs on ------------- */

#if defined(OPEN_MPI)
#define STR2(x) #x
#define STR(x) STR2(x)
#define BUILT_FOR "Open MPI " STR(OMPI_MAJOR_VERSION) "." STR(OMPI_MINOR_VERSION)
/* Open MPI keeps its ABI within a major version. */
#define RUNS_ON_PREFIX "Open MPI v" STR(OMPI_MAJOR_VERSION) "."
#elif defined(MPICH)
#define BUILT_FOR "MPICH " MPICH_VERSION
/* MPICH and its derivatives keep one ABI since 3.1 (the MPICH ABI initiative). */
#define RUNS_ON_PREFIX "MPICH Version:"
#else
#error "libvargr_mpi's wrappers are built for Open MPI or MPICH"
#endif

/* Refuses to start, with the reason, when the MPI the program runs on is not the one
 * whose mpi.h this was compiled against: its handles and constants would be wrong. */
static void check_abi(char *runs_on, size_t cap) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    /* Callable before MPI_Init (MPI-3). */
    if (PMPI_Get_library_version(v, &len) != MPI_SUCCESS) {
        snprintf(v, sizeof v, "an MPI that does not say its version");
    }
    /* Up to the first comma: "Open MPI v4.1.4", "MPICH Version:	4.0.2". */
    size_t n = strcspn(v, ",\n");
    snprintf(runs_on, cap, "%.*s", (int)n, v);
    for (char *c = runs_on; *c; c++) {
        *c = *c == '\t' ? ' ' : *c;
    }
    if (strncmp(v, RUNS_ON_PREFIX, strlen(RUNS_ON_PREFIX)) != 0) {
        fprintf(stderr,
                "vargr-mpi: refusing to start: " VARGR_MPI_LIB " was built for " BUILT_FOR
                " (its mpi.h), but this program runs on \"%s\"; MPI handles differ "
                "between the two. Start it with the library built for its MPI, or "
                "without vargr mpi-run.\n",
                runs_on);
        exit(EXIT_FAILURE);
    }
}

/* ---- communicators ---------------------------------------------------------------------- */

/* Whether this process records (MPI_Init's answer), and whether it records now: that,
 * less MPI_Pcontrol's pauses. Atomic since MPI_Pcontrol may come from any thread; a
 * load is a plain move on x86-64. */
static int recording;
static _Atomic int on;
static int keyval = MPI_KEYVAL_INVALID;
static comm_info world_info;
static uint32_t next_id = 1;
static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a's offset basis: the hash of nothing. */
#define HASH_BASIS 2166136261u

/* A hash of a group's members (their world ranks in rank order), FNV-1a by word. */
static uint32_t hash_ranks(uint32_t h, const uint32_t *world, int n) {
    for (int i = 0; i < n; i++) {
        h = (h ^ world[i]) * 16777619u;
    }
    return h;
}

/* The world rank of each of the `n` members of group `g` (`wg` the world's), in a new
 * array; NULL if out of memory. Processes outside the world (spawned) have none. */
static uint32_t *world_ranks(MPI_Group g, MPI_Group wg, int n) {
    size_t cap = (size_t)(n > 0 ? n : 1);
    int *ranks = calloc(cap, sizeof(int)); /* zeroed: GCC cannot see n fills it */
    int *out = malloc(sizeof(int) * cap);
    uint32_t *world = malloc(sizeof(uint32_t) * cap);
    if (ranks && out && world) {
        for (int i = 0; i < n; i++) {
            ranks[i] = i;
        }
        PMPI_Group_translate_ranks(g, n, ranks, wg, out);
        for (int i = 0; i < n; i++) {
            world[i] = out[i] == MPI_UNDEFINED ? NO_PEER : (uint32_t)out[i];
        }
    } else {
        free(world);
        world = NULL;
    }
    free(ranks);
    free(out);
    return world;
}

/* The hash of group `g`'s members, `wg` being the world's group. */
static uint32_t group_hash(MPI_Group g, MPI_Group wg) {
    int n = 0;
    PMPI_Group_size(g, &n);
    uint32_t *world = world_ranks(g, wg, n);
    uint32_t h = world ? hash_ranks(HASH_BASIS, world, n) : HASH_BASIS;
    free(world);
    return h;
}

/* Communicators this process named, by group hash: the second one over the same group
 * is told apart by its place. */
#define NAMED_GROUPS 256
static struct {
    uint32_t hash, count;
} named[NAMED_GROUPS];

/* How many communicators over group `hash` this process named before. */
static uint32_t nth_of(uint32_t hash) {
    for (int i = 0; i < NAMED_GROUPS; i++) {
        if (named[i].count == 0 || named[i].hash == hash) {
            named[i].hash = hash;
            return named[i].count++;
        }
    }
    return 0; /* past the table: a name may repeat, as in the trace's other limits */
}

/* The members of `comm` (the remote group's for an intercommunicator): their world
 * ranks in a new array of *size (NULL if out of memory), the lowest of them, and the
 * hash its name is made of. */
static uint32_t *members(MPI_Comm comm, int *size, uint32_t *low, uint32_t *hash) {
    int inter = 0;
    MPI_Group g, wg;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) {
        PMPI_Comm_remote_size(comm, size);
        PMPI_Comm_remote_group(comm, &g);
    } else {
        PMPI_Comm_size(comm, size);
        PMPI_Comm_group(comm, &g);
    }
    PMPI_Comm_group(MPI_COMM_WORLD, &wg);
    uint32_t *world = world_ranks(g, wg, *size);
    *low = NO_PEER;
    *hash = 0;
    if (world) {
        for (int i = 0; i < *size; i++) {
            *low = world[i] < *low ? world[i] : *low;
        }
        *hash = hash_ranks(HASH_BASIS, world, *size);
    } else {
        *size = 0;
    }
    if (inter) {
        /* Both sides' groups, in an order both sides agree on. */
        MPI_Group local;
        PMPI_Comm_group(comm, &local);
        uint32_t mine = group_hash(local, wg);
        PMPI_Group_free(&local);
        uint32_t lo = mine < *hash ? mine : *hash, hi = mine < *hash ? *hash : mine;
        *hash = hash_ranks(hash_ranks(HASH_BASIS, &lo, 1), &hi, 1);
    }
    PMPI_Group_free(&g);
    PMPI_Group_free(&wg);
    return world;
}

/* A communicator's place among those over its group, kept from when it was made
 * (made()) until it is first used; the value is the place plus one. */
static int place_keyval = MPI_KEYVAL_INVALID;

/* Ids in order of first use by this process (world = 0): the collector table's index.
 * Names come from the group instead (src/events.rs), so that every member names a
 * communicator alike whatever order it first used its communicators in, and messages
 * on it pair up; two communicators over one group are told apart by their place among
 * those this process made over it (made()), or for one made by a call not wrapped, by
 * the order of first use. */
static comm_info *new_info(MPI_Comm comm) {
    comm_info *c = calloc(1, sizeof *c);
    if (c == NULL) {
        return NULL;
    }
    c->remote = -1;
    PMPI_Comm_rank(comm, &c->me);
    uint32_t low, hash;
    c->world = members(comm, &c->size, &low, &hash);
    void *v = NULL;
    int made_here = 0;
    PMPI_Comm_get_attr(comm, place_keyval, &v, &made_here);
    pthread_mutex_lock(&comm_lock);
    c->id = next_id++;
    uint32_t nth = made_here ? (uint32_t)((uintptr_t)v - 1) : nth_of(hash);
    pthread_mutex_unlock(&comm_lock);
    /* Kept with the communicator, never freed: requests still pending when it is freed
     * point at it. */
    PMPI_Comm_set_attr(comm, keyval, c);
    vargr_mpi_comm(c->id, low, hash, nth);
    return c;
}

comm_info *vargr_info_of(MPI_Comm comm) {
    if (comm == MPI_COMM_WORLD) {
        return &world_info;
    }
    if (comm == MPI_COMM_NULL) {
        return NULL;
    }
    void *v = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &flag) == MPI_SUCCESS && flag) {
        return v;
    }
    pthread_mutex_lock(&comm_lock);
    /* Another thread may have made it meanwhile. */
    comm_info *c = NULL;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &flag) == MPI_SUCCESS && flag) {
        c = v;
    }
    pthread_mutex_unlock(&comm_lock);
    return c ? c : new_info(comm);
}

/* ---- communicators' constructors -------------------------------------------------------- */

/* A communicator's place among those over its group is taken when it is made, not when
 * first used: its members make their communicators in the same order, so two over one
 * group (two MPI_Comm_dup of the world, say) get the same names on every member however
 * each goes on to use them. Its id and name wait for its first traced call, so that
 * communicators a program makes and never uses take no collector. Communicators made
 * otherwise (MPI_Comm_idup, a library's own PMPI calls) take their place at first use. */
static int made(int rc, const MPI_Comm *comm) {
    if (rc == MPI_SUCCESS && recording && *comm != MPI_COMM_NULL) {
        int size;
        uint32_t low, hash;
        free(members(*comm, &size, &low, &hash));
        pthread_mutex_lock(&comm_lock);
        uintptr_t place = nth_of(hash) + 1;
        pthread_mutex_unlock(&comm_lock);
        PMPI_Comm_set_attr(*comm, place_keyval, (void *)place);
    }
    return rc;
}

int vargr_w_MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out) {
    return made(PMPI_Comm_dup(comm, out), out);
}

int vargr_w_MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *out) {
    return made(PMPI_Comm_dup_with_info(comm, info, out), out);
}

int vargr_w_MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out) {
    return made(PMPI_Comm_split(comm, color, key, out), out);
}

int vargr_w_MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info,
                                MPI_Comm *out) {
    return made(PMPI_Comm_split_type(comm, type, key, info, out), out);
}

int vargr_w_MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *out) {
    return made(PMPI_Comm_create(comm, group, out), out);
}

int vargr_w_MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *out) {
    return made(PMPI_Comm_create_group(comm, group, tag, out), out);
}

int vargr_w_MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                            int reorder, MPI_Comm *out) {
    return made(PMPI_Cart_create(comm, ndims, dims, periods, reorder, out), out);
}

int vargr_w_MPI_Cart_sub(MPI_Comm comm, const int remain[], MPI_Comm *out) {
    return made(PMPI_Cart_sub(comm, remain, out), out);
}

int vargr_w_MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[],
                             int reorder, MPI_Comm *out) {
    return made(PMPI_Graph_create(comm, nnodes, index, edges, reorder, out), out);
}

int vargr_w_MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                           const int sourceweights[], int outdegree,
                                           const int destinations[], const int destweights[],
                                           MPI_Info info, int reorder, MPI_Comm *out) {
    return made(PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights,
                                                outdegree, destinations, destweights, info,
                                                reorder, out),
                out);
}

int vargr_w_MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                                  const int destinations[], const int weights[], MPI_Info info,
                                  int reorder, MPI_Comm *out) {
    return made(PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info,
                                       reorder, out),
                out);
}

int vargr_w_MPI_Intercomm_create(MPI_Comm local, int local_leader, MPI_Comm peer,
                                 int remote_leader, int tag, MPI_Comm *out) {
    return made(PMPI_Intercomm_create(local, local_leader, peer, remote_leader, tag, out), out);
}

int vargr_w_MPI_Intercomm_merge(MPI_Comm inter, int high, MPI_Comm *out) {
    return made(PMPI_Intercomm_merge(inter, high, out), out);
}

/* The size of the last predefined datatype a thread asked for: predefined types are never
 * freed, so the handle keeps its size, and most programs send one or two kinds of
 * element (asking MPI costs each traced call more than the rest of its record). */
static __thread MPI_Datatype last_type TLS_IE;
static __thread int last_size TLS_IE; /* 0: none yet */

static NOINLINE int type_size(MPI_Datatype t) {
    int s = 0;
    if (PMPI_Type_size(t, &s) != MPI_SUCCESS || s <= 0) {
        return 0;
    }
    int ints = 0, addresses = 0, types = 0, combiner = 0;
    if (PMPI_Type_get_envelope(t, &ints, &addresses, &types, &combiner) == MPI_SUCCESS &&
        combiner == MPI_COMBINER_NAMED) {
        last_type = t;
        last_size = s;
    }
    return s;
}

static inline uint64_t bytes_of(int count, MPI_Datatype t) {
    if (count <= 0) {
        return 0;
    }
    int s = last_size > 0 && t == last_type ? last_size : type_size(t);
    return (uint64_t)count * (uint64_t)s;
}

uint64_t vargr_bytes_of(int count, MPI_Datatype t) { return bytes_of(count, t); }

/* vargr_info_of without a call for the world, the communicator of most calls. */
static inline comm_info *info_of(MPI_Comm comm) {
    return comm == MPI_COMM_WORLD ? &world_info : vargr_info_of(comm);
}

#define world_of vargr_world_of

/* The MPI calls the wrappers make: through compress.c while compression is on. */
#define SEND(...) (cx_floor ? cx_send(CX_SEND, __VA_ARGS__) : PMPI_Send(__VA_ARGS__))
#define SSEND(...) (cx_floor ? cx_send(CX_SSEND, __VA_ARGS__) : PMPI_Ssend(__VA_ARGS__))
#define ISEND(...) (cx_floor ? cx_isend(CX_SEND, __VA_ARGS__) : PMPI_Isend(__VA_ARGS__))
#define RECV(...) (cx_floor ? cx_recv(__VA_ARGS__) : PMPI_Recv(__VA_ARGS__))
#define IRECV(...) (cx_floor ? cx_irecv(__VA_ARGS__) : PMPI_Irecv(__VA_ARGS__))
#define SENDRECV(...) (cx_floor ? cx_sendrecv(__VA_ARGS__) : PMPI_Sendrecv(__VA_ARGS__))
#define PROBE(...) (cx_floor ? cx_probe(__VA_ARGS__) : PMPI_Probe(__VA_ARGS__))
#define IPROBE(...) (cx_floor ? cx_iprobe(__VA_ARGS__) : PMPI_Iprobe(__VA_ARGS__))
#define ALLTOALL(...) (cx_floor ? cx_alltoall(__VA_ARGS__) : PMPI_Alltoall(__VA_ARGS__))
#define ALLTOALLV(...) (cx_floor ? cx_alltoallv(__VA_ARGS__) : PMPI_Alltoallv(__VA_ARGS__))

static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The calling thread's ring; slots NULL until its first record. */
static __thread writer_ring ring TLS_IE;

/* Collector id + 1 of (communicator slot, kind), 0 until asked of the Rust core, which
 * names and registers collectors. Communicators past the first COMM_SLOTS - 2 share the
 * last slot, as in src/events.rs. */
#define COMM_SLOTS 1024
static uint32_t collector_ids[COMM_SLOTS * K_COUNT];

static NOINLINE uint32_t register_collector(uint32_t *cell, uint32_t comm, int kind) {
    uint32_t id = (uint32_t)vargr_mpi_collector(comm, (uint16_t)kind) + 1;
    __atomic_store_n(cell, id, __ATOMIC_RELAXED);
    return id;
}

static inline uint16_t collector_of(uint32_t comm, int kind) {
    size_t slot = comm == NO_COMM ? 0 : comm + 1 < COMM_SLOTS ? comm + 1 : COMM_SLOTS - 1;
    uint32_t *cell = &collector_ids[slot * K_COUNT + (size_t)kind];
    uint32_t id = __atomic_load_n(cell, __ATOMIC_RELAXED);
    if (__builtin_expect(id == 0, 0)) {
        id = register_collector(cell, comm, kind);
    }
    return (uint16_t)(id - 1);
}

/* The calling thread's ring for its first record: 0 if recording did not start. */
static NOINLINE int fetch_ring(void) { return vargr_mpi_ring(&ring); }

/* Writes one record (vargr_trace::Record's four words) to the calling thread's ring.
 * Inlined, with its rare calls out of line: a frame for it would cost a third of it. */
static inline __attribute__((always_inline)) void put(int kind, int op, uint32_t comm,
                                                      uint32_t peer, uint32_t seq,
                                                      uint64_t bytes, uint64_t start,
                                                      uint64_t end, int status) {
    if (__builtin_expect(ring.slots == NULL, 0) && !fetch_ring()) {
        return;
    }
    uint64_t w3 = (uint64_t)collector_of(comm, kind) | (uint64_t)(uint8_t)op << 16 |
                  (uint64_t)(uint8_t)status << 24 | (uint64_t)peer << 32;
    uint64_t h = __atomic_load_n(ring.head, __ATOMIC_RELAXED);
    uint64_t *slot = ring.slots + 4 * (h & ring.mask);
    __atomic_store_n(&slot[0], start, __ATOMIC_RELAXED);
    __atomic_store_n(&slot[1], end, __ATOMIC_RELAXED);
    __atomic_store_n(&slot[2], seq | (bytes < UINT32_MAX ? bytes : UINT32_MAX) << 32,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&slot[3], w3, __ATOMIC_RELAXED);
    __atomic_store_n(ring.head, h + 1, __ATOMIC_RELEASE);
    if (__builtin_expect(((h + 1) & ring.drain_mask) == 0, 0)) {
        vargr_mpi_drain();
    }
}

/* Unsuccessful tests and probes, counted in runs: one run per kind of poll (test,
 * testany, testall, testsome, iprobe) between two recorded calls of the thread, each
 * recorded as one event when the thread next records a call (or at MPI_Finalize): from
 * the run's first poll's entry to the entry of that next call, seq = how many. A
 * program that polls makes millions of them (HPCC's RandomAccess polls two million
 * times a second, often alternating MPI_Test and MPI_Testany) and a record each, or
 * even a clock read each, would cost it more than the polls: only a run's first poll
 * reads the clock. An iprobe for another (communicator, source, tag) starts a new run
 * of its kind. */
typedef struct {
    uint32_t polls; /* 0: no run */
    const comm_info *comm;
    uint32_t peer;
    int tag;
    uint64_t start;
} poll_run;

#define POLL_KINDS (K_IPROBE_POLLS - K_TEST_POLLS + 1)
static __thread poll_run runs[POLL_KINDS] TLS_IE;
/* Bit i: runs[i] is open. */
static __thread unsigned open_runs TLS_IE;

/* Records run i (of kind K_TEST_POLLS + i) as ending at `end`. */
static void put_run(int i, uint64_t end) {
    const poll_run *r = &runs[i];
    put(K_TEST_POLLS + i, OP_USER, r->comm ? r->comm->id : NO_COMM, r->peer, r->polls, 0,
        r->start, end > r->start ? end : r->start, 0);
}

/* Records the open runs as ending at `end`, oldest first, and closes them. */
static NOINLINE void close_runs(uint64_t end) {
    int order[POLL_KINDS];
    int n = 0;
    for (int i = 0; i < POLL_KINDS; i++) {
        if (!(open_runs & (1u << i))) {
            continue;
        }
        int k = n++;
        while (k > 0 && runs[order[k - 1]].start > runs[i].start) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = 0; k < n; k++) {
        put_run(order[k], end);
        runs[order[k]].polls = 0;
    }
    open_runs = 0;
}

/* The entry time of a test or probe of run kind `kind`: none (0) while a run of that
 * kind is open. A poll that does find something is then timed from its return. */
static inline __attribute__((always_inline)) uint64_t poll_start(int kind) {
    return runs[kind - K_TEST_POLLS].polls != 0 ? 0 : NOW();
}

/* A poll that does not continue its kind's run: records that run, if open, as ending
 * here, and opens a new one. */
static NOINLINE void poll_run_start(int kind, const comm_info *c, uint32_t peer, int tag,
                                    uint64_t t0) {
    t0 = t0 ? t0 : NOW();
    int i = kind - K_TEST_POLLS;
    poll_run *r = &runs[i];
    if (r->polls != 0) {
        put_run(i, t0);
    }
    r->comm = c;
    r->peer = peer;
    r->tag = tag;
    r->start = t0;
    r->polls = 1;
    open_runs |= 1u << i;
}

/* One unsuccessful test or probe (`kind` a K_*_POLLS) that entered at `t0` (0: not
 * read, inside a run of its kind). The common case, one more poll of the open run, is
 * a few compares and an increment. */
static inline __attribute__((always_inline)) void polled(int kind, const comm_info *c,
                                                         uint32_t peer, int tag, uint64_t t0) {
    poll_run *r = &runs[kind - K_TEST_POLLS];
    /* polls - 1 < UINT32_MAX - 1: the run is open and can count one more. */
    if (r->polls - 1u < UINT32_MAX - 1u && r->comm == c && r->peer == peer && r->tag == tag) {
        r->polls++;
        return;
    }
    poll_run_start(kind, c, peer, tag, t0);
}

/* polled() for tests, whose runs differ only by kind: `t0` 0 already says the kind's
 * run was open when the test began. */
static inline __attribute__((always_inline)) void test_polled(int kind, uint64_t t0) {
    poll_run *r = &runs[kind - K_TEST_POLLS];
    if (t0 == 0 && r->polls - 1u < UINT32_MAX - 1u) {
        r->polls++;
        return;
    }
    poll_run_start(kind, NULL, NO_PEER, 0, t0);
}

/* In a message's status byte: the record stands for the blocking call that carried the
 * message too (its kind in the low bits), with the same times, peer, tag and bytes.
 * The Rust core writes the two records into the trace file (src/events.rs, expand);
 * one record instead of two halves what tracing a small message writes to memory. */
#define ALSO_CALL 0x80

/* Records one event of a call. The thread's open poll runs end where the call began,
 * and are recorded first. */
static inline void emit(int kind, int op, const comm_info *c, uint32_t peer, int seq,
                        uint64_t bytes, uint64_t start, uint64_t end, int rc) {
    if (open_runs) {
        close_runs(start);
    }
    put(kind, op, c ? c->id : NO_COMM, peer, (uint32_t)seq, bytes, start, end,
        rc != MPI_SUCCESS);
}

/* Records a message (op OP_SEND or OP_RECV) that blocking call `call` carried, as one
 * record standing for both. */
static inline void emit_with_call(int call, int op, const comm_info *c, uint32_t peer, int tag,
                                  uint64_t bytes, uint64_t start, uint64_t end) {
    if (open_runs) {
        close_runs(start);
    }
    put(K_P2P, op, c ? c->id : NO_COMM, peer, (uint32_t)tag, bytes, start, end,
        ALSO_CALL | call);
}

/* ---- pending non-blocking operations, by request handle --------------------------------- */

typedef struct {
    uint64_t key; /* the handle's bits; 0: free */
    uint64_t start, bytes;
    comm_info *comm;
    uint32_t peer;
    int tag;
    int send;
} pending;

REQMAP(pending_map, pending)

static void track(MPI_Request r, int send, comm_info *c, uint32_t peer, int tag, uint64_t bytes,
                  uint64_t start) {
    pending p = {0, start, bytes, c, peer, tag, send}, was;
    /* MPI hands out one shared, already complete handle for sends it finished within
     * the call (Open MPI's ompi_request_empty for a small message sent inline, MPICH's
     * lightweight requests): a second such send finds the first one's entry. That send
     * was over before this call began. */
    if (pending_map_swap(r, &p, &was) && was.send) {
        emit(K_P2P, OP_SEND, was.comm, was.peer, was.tag, was.bytes, was.start, start,
             MPI_SUCCESS);
    }
}

/* Removes and returns the operation of `r`. */
static int take(MPI_Request r, pending *out) { return pending_map_find(r, out, 0); }

/* Requests started while recording are pending: their completions are watched even
 * while recording is paused, so that each message started before a pause is recorded
 * when it ends, and the table never keeps a handle MPI has since given to another
 * request. */
static inline int pending_live(void) {
    return __atomic_load_n(&pending_map_used, __ATOMIC_RELAXED) != 0;
}

/* Whether a wait or test goes through its traced body: recording, compressing, or
 * requests started while recording still pending. */
static inline int watching(void) { return on || cx_floor || pending_live(); }

/* Records the message of a completed request `r` (its handle before completion). */
static void complete(MPI_Request r, const MPI_Status *st, uint64_t end) {
    pending p;
    if (!pending_live() || !take(r, &p)) {
        return; /* persistent, or from a call not wrapped (MPI_Ibcast, ...) */
    }
    if (p.send) {
        emit(K_P2P, OP_SEND, p.comm, p.peer, p.tag, p.bytes, p.start, end, MPI_SUCCESS);
        return;
    }
    int cancelled = 0;
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled || st->MPI_SOURCE == MPI_PROC_NULL) {
        return;
    }
    int n = 0;
    PMPI_Get_count(st, MPI_BYTE, &n);
    emit(K_P2P, OP_RECV, p.comm, world_of(p.comm, st->MPI_SOURCE), st->MPI_TAG,
         n == MPI_UNDEFINED || n < 0 ? 0 : (uint64_t)n, p.start, end, MPI_SUCCESS);
}

/* A received message, from its status. */
static void received(const comm_info *c, const MPI_Status *st, uint64_t start, uint64_t end) {
    if (st->MPI_SOURCE == MPI_PROC_NULL) {
        return;
    }
    int n = 0;
    PMPI_Get_count(st, MPI_BYTE, &n);
    emit(K_P2P, OP_RECV, c, world_of(c, st->MPI_SOURCE), st->MPI_TAG,
         n == MPI_UNDEFINED || n < 0 ? 0 : (uint64_t)n, start, end, MPI_SUCCESS);
}

/* ---- start and end ---------------------------------------------------------------------- */

static void started(const char *runs_on) {
    int rank = 0, size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &keyval, NULL);
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &place_keyval,
                            NULL);
    world_info.id = 0;
    world_info.me = rank;
    world_info.size = size;
    world_info.world = NULL;
    world_info.remote = -1;
    recording = vargr_mpi_start(rank, size, K_COUNT, BUILT_FOR, runs_on);
    on = recording;
    cx_init(rank, size);
}

int vargr_w_MPI_Init(int *argc, char ***argv) {
    char runs_on[MPI_MAX_LIBRARY_VERSION_STRING];
    check_abi(runs_on, sizeof runs_on);
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        started(runs_on);
    }
    return rc;
}

int vargr_w_MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    char runs_on[MPI_MAX_LIBRARY_VERSION_STRING];
    check_abi(runs_on, sizeof runs_on);
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        started(runs_on);
    }
    return rc;
}

int vargr_w_MPI_Finalize(void) {
    cx_finalize();
    if (recording) {
        /* Writes the trace file while MPI still runs (nothing of it is used, but a
         * launcher may end the job soon after the last rank finalizes). */
        close_runs(NOW());
        on = 0;
        recording = 0;
        vargr_mpi_finish();
    }
    return PMPI_Finalize();
}

/* The profiling interface's switch (MPI_Pcontrol): level 0 pauses recording in this
 * process, any other level resumes it; compression goes on either way. Ranks should
 * pause and resume at the same points of the program, as for any profiler: collective
 * calls are numbered only while recorded. A pause ends the calling thread's poll runs;
 * the message of a request started before a pause is still recorded when it ends. */
int vargr_w_MPI_Pcontrol(const int level, ...) {
    if (recording) {
        if (level == 0 && on) {
            on = 0;
            close_runs(NOW());
        } else if (level != 0 && !on) {
            on = 1;
        }
    }
    return PMPI_Pcontrol(level);
}

/* ---- point to point --------------------------------------------------------------------- */

/* A blocking send: the message and the call. */
static int sent(int kind, int rc, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                uint64_t t0) {
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    uint32_t peer = world_of(c, dest);
    if (rc == MPI_SUCCESS && dest != MPI_PROC_NULL) {
        emit_with_call(kind, OP_SEND, c, peer, tag, b, t0, t1);
        return rc;
    }
    emit(kind, OP_USER, c, peer, tag, b, t0, t1, rc);
    return rc;
}

static NOINLINE int traced_MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                                    MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = SEND(buf, count, t, dest, tag, comm);
    return sent(K_SEND, rc, count, t, dest, tag, comm, t0);
}

int vargr_w_MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
    if (!on) {
        return SEND(buf, count, t, dest, tag, comm);
    }
    return traced_MPI_Send(buf, count, t, dest, tag, comm);
}

static NOINLINE int traced_MPI_Ssend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                                     MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = SSEND(buf, count, t, dest, tag, comm);
    return sent(K_SSEND, rc, count, t, dest, tag, comm, t0);
}

int vargr_w_MPI_Ssend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm) {
    if (!on) {
        return SSEND(buf, count, t, dest, tag, comm);
    }
    return traced_MPI_Ssend(buf, count, t, dest, tag, comm);
}

static int isend_mode(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm, MPI_Request *req) {
    return cx_floor ? cx_isend(mode, buf, count, t, dest, tag, comm, req)
                  : pmpi_isend_mode(mode, buf, count, t, dest, tag, comm, req);
}

static NOINLINE int isend_traced(int kind, int mode, const void *buf, int count,
                                 MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                                 MPI_Request *req) {
    uint64_t t0 = NOW();
    int rc = isend_mode(mode, buf, count, t, dest, tag, comm, req);
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    uint32_t peer = world_of(c, dest);
    if (rc == MPI_SUCCESS && dest != MPI_PROC_NULL) {
        track(*req, 1, c, peer, tag, b, t0);
    }
    emit(kind, OP_USER, c, peer, tag, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    if (!on && !cx_floor) {
        return PMPI_Isend(buf, count, t, dest, tag, comm, req);
    }
    if (!on) {
        return isend_mode(CX_SEND, buf, count, t, dest, tag, comm, req);
    }
    return isend_traced(K_ISEND, CX_SEND, buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Ibsend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                       MPI_Request *req) {
    if (!on && !cx_floor) {
        return PMPI_Ibsend(buf, count, t, dest, tag, comm, req);
    }
    if (!on) {
        return isend_mode(CX_BSEND, buf, count, t, dest, tag, comm, req);
    }
    return isend_traced(K_IBSEND, CX_BSEND, buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Issend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                       MPI_Request *req) {
    if (!on && !cx_floor) {
        return PMPI_Issend(buf, count, t, dest, tag, comm, req);
    }
    if (!on) {
        return isend_mode(CX_SSEND, buf, count, t, dest, tag, comm, req);
    }
    return isend_traced(K_ISSEND, CX_SSEND, buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Irsend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                       MPI_Request *req) {
    if (!on && !cx_floor) {
        return PMPI_Irsend(buf, count, t, dest, tag, comm, req);
    }
    if (!on) {
        return isend_mode(CX_RSEND, buf, count, t, dest, tag, comm, req);
    }
    return isend_traced(K_IRSEND, CX_RSEND, buf, count, t, dest, tag, comm, req);
}

/* A buffered or ready send, traced. */
static int send_traced(int kind, int mode, const void *buf, int count, MPI_Datatype t,
                       int dest, int tag, MPI_Comm comm) {
    uint64_t t0 = on ? NOW() : 0;
    int rc = cx_floor ? cx_send(mode, buf, count, t, dest, tag, comm)
                    : pmpi_send_mode(mode, buf, count, t, dest, tag, comm);
    return on ? sent(kind, rc, count, t, dest, tag, comm, t0) : rc;
}

int vargr_w_MPI_Bsend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm) {
    return send_traced(K_BSEND, CX_BSEND, buf, count, t, dest, tag, comm);
}

int vargr_w_MPI_Rsend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm) {
    return send_traced(K_RSEND, CX_RSEND, buf, count, t, dest, tag, comm);
}

/* Persistent requests: only compression needs to see them (their messages are not in
 * the trace yet). */
int vargr_w_MPI_Send_init(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                          MPI_Comm comm, MPI_Request *req) {
    return cx_floor ? cx_send_init(CX_SEND, buf, count, t, dest, tag, comm, req)
                  : PMPI_Send_init(buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Bsend_init(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                           MPI_Comm comm, MPI_Request *req) {
    return cx_floor ? cx_send_init(CX_BSEND, buf, count, t, dest, tag, comm, req)
                  : PMPI_Bsend_init(buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Ssend_init(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                           MPI_Comm comm, MPI_Request *req) {
    return cx_floor ? cx_send_init(CX_SSEND, buf, count, t, dest, tag, comm, req)
                  : PMPI_Ssend_init(buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Rsend_init(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                           MPI_Comm comm, MPI_Request *req) {
    return cx_floor ? cx_send_init(CX_RSEND, buf, count, t, dest, tag, comm, req)
                  : PMPI_Rsend_init(buf, count, t, dest, tag, comm, req);
}

int vargr_w_MPI_Recv_init(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                          MPI_Request *req) {
    return cx_floor ? cx_recv_init(buf, count, t, src, tag, comm, req)
                  : PMPI_Recv_init(buf, count, t, src, tag, comm, req);
}

static NOINLINE int traced_MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag,
                                    MPI_Comm comm, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = RECV(buf, count, t, src, tag, comm, s);
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    if (rc == MPI_SUCCESS && s->MPI_SOURCE != MPI_PROC_NULL) {
        int n = 0;
        PMPI_Get_count(s, MPI_BYTE, &n);
        if (n >= 0 && (uint64_t)n == b) {
            /* The message filled the buffer: one record for both (the call's bytes are
             * the buffer's size, the message's what arrived). */
            emit_with_call(K_RECV, OP_RECV, c, world_of(c, s->MPI_SOURCE), s->MPI_TAG, b, t0, t1);
            return rc;
        }
        emit(K_P2P, OP_RECV, c, world_of(c, s->MPI_SOURCE), s->MPI_TAG,
             n == MPI_UNDEFINED || n < 0 ? 0 : (uint64_t)n, t0, t1, MPI_SUCCESS);
    }
    emit(K_RECV, OP_USER, c, world_of(c, rc == MPI_SUCCESS ? s->MPI_SOURCE : src),
         rc == MPI_SUCCESS ? s->MPI_TAG : tag, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                     MPI_Status *st) {
    if (!on) {
        return RECV(buf, count, t, src, tag, comm, st);
    }
    return traced_MPI_Recv(buf, count, t, src, tag, comm, st);
}

static NOINLINE int traced_MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag,
                                     MPI_Comm comm, MPI_Request *req) {
    uint64_t t0 = NOW();
    int rc = IRECV(buf, count, t, src, tag, comm, req);
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    if (rc == MPI_SUCCESS) {
        track(*req, 0, c, world_of(c, src), tag, b, t0);
    }
    emit(K_IRECV, OP_USER, c, world_of(c, src), tag, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                      MPI_Request *req) {
    if (!on) {
        return IRECV(buf, count, t, src, tag, comm, req);
    }
    return traced_MPI_Irecv(buf, count, t, src, tag, comm, req);
}

static NOINLINE int traced_MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest,
                                        int stag, void *rbuf, int rcount, MPI_Datatype rtype,
                                        int src, int rtag, MPI_Comm comm, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = SENDRECV(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm,
                           s);
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(scount, stype) : 0;
    if (rc == MPI_SUCCESS) {
        if (dest != MPI_PROC_NULL) {
            emit(K_P2P, OP_SEND, c, world_of(c, dest), stag, b, t0, t1, rc);
        }
        received(c, s, t0, t1);
    }
    emit(K_SENDRECV, OP_USER, c, world_of(c, dest), stag, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag,
                         void *rbuf, int rcount, MPI_Datatype rtype, int src, int rtag,
                         MPI_Comm comm, MPI_Status *st) {
    if (!on) {
        return SENDRECV(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag,
                             comm, st);
    }
    return traced_MPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag,
                               comm, st);
}

/* ---- completion ------------------------------------------------------------------------- */

/* Finishes what compress.c started for completed request `r`; the error it reports. */
static int finish(MPI_Request r, MPI_Status *s) {
    return cx_floor ? cx_finish(r, s) : MPI_SUCCESS;
}

static NOINLINE int traced_MPI_Wait(MPI_Request *req, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    MPI_Request r = *req; /* MPI_Wait resets it */
    uint64_t t0 = NOW();
    int rc = PMPI_Wait(req, s);
    uint64_t t1 = NOW();
    if (rc == MPI_SUCCESS) {
        rc = finish(r, s);
    }
    if (rc == MPI_SUCCESS) {
        complete(r, s, t1);
    }
    if (on) {
        emit(K_WAIT, OP_USER, NULL, NO_PEER, 0, 0, t0, t1, rc);
    }
    return rc;
}

int vargr_w_MPI_Wait(MPI_Request *req, MPI_Status *st) {
    if (!watching()) {
        return PMPI_Wait(req, st);
    }
    return traced_MPI_Wait(req, st);
}

/* A test that found its request done, or failed: finishes the request if the test freed
 * it (`freed`: MPI_Test does, MPI_Request_get_status does not), and records its message
 * and the test. */
static NOINLINE int test_done(MPI_Request r, int rc, const int *flag, MPI_Status *s,
                              uint64_t t0, int freed) {
    uint64_t t1 = NOW();
    if (rc == MPI_SUCCESS && *flag) {
        if (freed) {
            rc = finish(r, s);
        }
        if (rc == MPI_SUCCESS) {
            complete(r, s, t1);
        }
    }
    if (on) {
        emit(K_TEST, OP_USER, NULL, NO_PEER, 0, 0, t0 ? t0 : t1, t1, rc);
    }
    return rc;
}

static NOINLINE int traced_MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    MPI_Request r = *req;
    uint64_t t0 = on ? poll_start(K_TEST_POLLS) : 0;
    int rc = PMPI_Test(req, flag, s);
    if (rc == MPI_SUCCESS && !*flag) {
        if (on) {
            test_polled(K_TEST_POLLS, t0);
        }
        return rc;
    }
    return test_done(r, rc, flag, s, t0, 1);
}

int vargr_w_MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
    if (!watching()) {
        return PMPI_Test(req, flag, st);
    }
    return traced_MPI_Test(req, flag, st);
}

/* Copies of the handles (completion resets them) and statuses when the caller ignores
 * them; on the stack for a few. */
#define FEW 32
typedef struct {
    MPI_Request few_r[FEW];
    MPI_Status few_s[FEW];
    MPI_Request *r;
    MPI_Status *s;
    int heap;
} many;

static int many_init(many *m, int n, const MPI_Request *reqs, MPI_Status *stats) {
    m->heap = n > FEW;
    m->r = m->heap ? malloc(sizeof(MPI_Request) * (size_t)n) : m->few_r;
    m->s = stats != MPI_STATUSES_IGNORE ? stats
           : m->heap                    ? malloc(sizeof(MPI_Status) * (size_t)n)
                                        : m->few_s;
    if (m->r == NULL || m->s == NULL) {
        if (m->heap) {
            free(m->r);
            if (m->s != stats) {
                free(m->s);
            }
        }
        return 0;
    }
    if (n > 0) {
        memcpy(m->r, reqs, sizeof(MPI_Request) * (size_t)n);
    }
    return 1;
}

static void many_free(many *m, MPI_Status *stats) {
    if (m->heap) {
        free(m->r);
        if (m->s != stats) {
            free(m->s);
        }
    }
}

/* Without memory for the copies, compressed messages could not be finished. */
static int no_copies(void) {
    fprintf(stderr, "vargr-mpi: out of memory for a wait on many requests\n");
    return MPI_ERR_NO_MEM;
}

/* Finishes the requests `idx` (n of them, or all of m when idx is NULL) that completed;
 * an error puts every status's error in place and returns MPI_ERR_IN_STATUS. */
static int finish_many(many *m, int n, const int *idx, int rc, uint64_t t1) {
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        return rc;
    }
    int failed = rc == MPI_ERR_IN_STATUS;
    int errs[FEW];
    int *err = n > FEW ? malloc(sizeof(int) * (size_t)n) : errs;
    for (int k = 0; k < n; k++) {
        int i = idx ? idx[k] : k;
        int e = failed ? m->s[i].MPI_ERROR : MPI_SUCCESS;
        if (e == MPI_SUCCESS) {
            e = finish(m->r[i], &m->s[i]);
            if (e == MPI_SUCCESS) {
                complete(m->r[i], &m->s[i], t1);
            }
        }
        if (err) {
            err[k] = e;
        }
        failed |= e != MPI_SUCCESS;
    }
    if (failed && err) {
        for (int k = 0; k < n; k++) {
            m->s[idx ? idx[k] : k].MPI_ERROR = err[k];
        }
    }
    if (err != errs) {
        free(err);
    }
    return failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
}

static NOINLINE int traced_MPI_Waitall(int n, MPI_Request reqs[], MPI_Status stats[]) {
    many m;
    if (!many_init(&m, n, reqs, stats)) {
        return cx_floor ? no_copies() : PMPI_Waitall(n, reqs, stats);
    }
    uint64_t t0 = NOW();
    int rc = PMPI_Waitall(n, reqs, m.s);
    uint64_t t1 = NOW();
    rc = finish_many(&m, n, NULL, rc, t1);
    many_free(&m, stats);
    if (on) {
        emit(K_WAITALL, OP_USER, NULL, NO_PEER, n, 0, t0, t1, rc);
    }
    return rc;
}

int vargr_w_MPI_Waitall(int n, MPI_Request reqs[], MPI_Status stats[]) {
    if (!watching()) {
        return PMPI_Waitall(n, reqs, stats);
    }
    return traced_MPI_Waitall(n, reqs, stats);
}

static NOINLINE int traced_MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status stats[]) {
    many m;
    if (!many_init(&m, n, reqs, stats)) {
        return cx_floor ? no_copies() : PMPI_Testall(n, reqs, flag, stats);
    }
    uint64_t t0 = on ? poll_start(K_TESTALL_POLLS) : 0;
    int rc = PMPI_Testall(n, reqs, flag, m.s);
    if (rc == MPI_SUCCESS && !*flag) {
        many_free(&m, stats);
        if (on) {
            test_polled(K_TESTALL_POLLS, t0);
        }
        return rc;
    }
    uint64_t t1 = NOW();
    if (*flag) {
        rc = finish_many(&m, n, NULL, rc, t1);
    }
    many_free(&m, stats);
    if (on) {
        emit(K_TESTALL, OP_USER, NULL, NO_PEER, n, 0, t0 ? t0 : t1, t1, rc);
    }
    return rc;
}

int vargr_w_MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status stats[]) {
    if (!watching()) {
        return PMPI_Testall(n, reqs, flag, stats);
    }
    return traced_MPI_Testall(n, reqs, flag, stats);
}

/* A persistent receive among `reqs` that compression satisfied from its stash when it
 * started (shim.h: cx_presatisfied) is complete, though MPI, which sees it inactive,
 * would pass it over: finishes it as a wait would and returns its index, or -1. */
static int presatisfied(int n, MPI_Request reqs[], MPI_Status *st, int *rc) {
    int i = cx_floor ? cx_presatisfied(n, reqs) : -1;
    if (i >= 0) {
        MPI_Status mine;
        MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
        memset(s, 0, sizeof *s);
        s->MPI_SOURCE = MPI_ANY_SOURCE;
        s->MPI_TAG = MPI_ANY_TAG;
        *rc = cx_finish(reqs[i], s);
    }
    return i;
}

static NOINLINE int traced_MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st) {
    int rc0 = MPI_SUCCESS, pre = presatisfied(n, reqs, st, &rc0);
    if (pre >= 0) {
        *index = pre;
        return rc0;
    }
    many m;
    if (!many_init(&m, n, reqs, MPI_STATUSES_IGNORE)) {
        return cx_floor ? no_copies() : PMPI_Waitany(n, reqs, index, st);
    }
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = PMPI_Waitany(n, reqs, index, s);
    uint64_t t1 = NOW();
    if (rc == MPI_SUCCESS && *index != MPI_UNDEFINED && *index >= 0 && *index < n) {
        rc = finish(m.r[*index], s);
        if (rc == MPI_SUCCESS) {
            complete(m.r[*index], s, t1);
        }
    }
    many_free(&m, MPI_STATUSES_IGNORE);
    if (on) {
        emit(K_WAITANY, OP_USER, NULL, NO_PEER, n, 0, t0, t1, rc);
    }
    return rc;
}

int vargr_w_MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st) {
    if (!watching()) {
        return PMPI_Waitany(n, reqs, index, st);
    }
    return traced_MPI_Waitany(n, reqs, index, st);
}

/* A test of requests `r` (their handles before the call) that found one done or
 * failed: finishes the completed one and records the call. */
static NOINLINE int testany_done(int n, const MPI_Request *r, int rc, const int *index,
                                 const int *flag, MPI_Status *s, uint64_t t0) {
    uint64_t t1 = NOW();
    if (rc == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED && *index >= 0 && *index < n) {
        rc = finish(r[*index], s);
        if (rc == MPI_SUCCESS) {
            complete(r[*index], s, t1);
        }
    }
    if (on) {
        emit(K_TESTANY, OP_USER, NULL, NO_PEER, n, 0, t0 ? t0 : t1, t1, rc);
    }
    return rc;
}

static NOINLINE int traced_MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag,
                                       MPI_Status *st) {
    int rc0 = MPI_SUCCESS, pre = presatisfied(n, reqs, st, &rc0);
    if (pre >= 0) {
        *index = pre;
        *flag = 1;
        return rc0;
    }
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    many m;
    /* One request (a program polling one receive) needs no copy of the array. */
    MPI_Request one = n == 1 ? reqs[0] : MPI_REQUEST_NULL;
    if (n != 1 && !many_init(&m, n, reqs, MPI_STATUSES_IGNORE)) {
        return cx_floor ? no_copies() : PMPI_Testany(n, reqs, index, flag, st);
    }
    uint64_t t0 = on ? poll_start(K_TESTANY_POLLS) : 0;
    int rc = PMPI_Testany(n, reqs, index, flag, s);
    if (rc == MPI_SUCCESS && !*flag) {
        if (n != 1) {
            many_free(&m, MPI_STATUSES_IGNORE);
        }
        if (on) {
            test_polled(K_TESTANY_POLLS, t0);
        }
        return rc;
    }
    rc = testany_done(n, n == 1 ? &one : m.r, rc, index, flag, s, t0);
    if (n != 1) {
        many_free(&m, MPI_STATUSES_IGNORE);
    }
    return rc;
}

int vargr_w_MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st) {
    if (!watching()) {
        return PMPI_Testany(n, reqs, index, flag, st);
    }
    return traced_MPI_Testany(n, reqs, index, flag, st);
}

static NOINLINE int some(int kind, int n, MPI_Request reqs[], int *outcount, int idx[],
                         MPI_Status stats[], int test) {
    int rc0 = MPI_SUCCESS;
    int pre = presatisfied(n, reqs, stats == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : stats,
                           &rc0);
    if (pre >= 0) {
        /* One at a time: "some" is at least one. */
        *outcount = 1;
        idx[0] = pre;
        if (rc0 == MPI_SUCCESS) {
            return rc0;
        }
        if (stats != MPI_STATUSES_IGNORE) {
            stats[0].MPI_ERROR = rc0;
        }
        return MPI_ERR_IN_STATUS;
    }
    many m;
    if (!many_init(&m, n, reqs, stats)) {
        return cx_floor ? no_copies()
               : test ? PMPI_Testsome(n, reqs, outcount, idx, stats)
                      : PMPI_Waitsome(n, reqs, outcount, idx, stats);
    }
    uint64_t t0 = !test ? NOW() : on ? poll_start(K_TESTSOME_POLLS) : 0;
    int rc = test ? PMPI_Testsome(n, reqs, outcount, idx, m.s)
                  : PMPI_Waitsome(n, reqs, outcount, idx, m.s);
    if (test && rc == MPI_SUCCESS && *outcount == 0) {
        many_free(&m, stats);
        if (on) {
            test_polled(K_TESTSOME_POLLS, t0);
        }
        return rc;
    }
    uint64_t t1 = NOW();
    if (*outcount != MPI_UNDEFINED && *outcount > 0) {
        /* Waitsome puts the k-th completed request's status at k, not at its index. */
        MPI_Status few[FEW];
        MPI_Status *byreq = n > FEW ? malloc(sizeof(MPI_Status) * (size_t)n) : few;
        if (byreq == NULL) {
            many_free(&m, stats);
            return no_copies();
        }
        for (int k = 0; k < *outcount; k++) {
            byreq[idx[k]] = m.s[k];
        }
        MPI_Status *keep = m.s;
        m.s = byreq;
        rc = finish_many(&m, *outcount, idx, rc, t1);
        for (int k = 0; k < *outcount; k++) {
            keep[k] = byreq[idx[k]];
        }
        m.s = keep;
        if (byreq != few) {
            free(byreq);
        }
    }
    many_free(&m, stats);
    if (on) {
        emit(kind, OP_USER, NULL, NO_PEER, n, 0, t0 ? t0 : t1, t1, rc);
    }
    return rc;
}

static NOINLINE int traced_MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[],
                                        MPI_Status stats[]) {
    return some(K_WAITSOME, n, reqs, outcount, idx, stats, 0);
}

int vargr_w_MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status stats[]) {
    if (!watching()) {
        return PMPI_Waitsome(n, reqs, outcount, idx, stats);
    }
    return traced_MPI_Waitsome(n, reqs, outcount, idx, stats);
}

static NOINLINE int traced_MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[],
                                        MPI_Status stats[]) {
    return some(K_TESTSOME, n, reqs, outcount, idx, stats, 1);
}

int vargr_w_MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status stats[]) {
    if (!watching()) {
        return PMPI_Testsome(n, reqs, outcount, idx, stats);
    }
    return traced_MPI_Testsome(n, reqs, outcount, idx, stats);
}

/* A request freed while active: MPI finishes it unseen, so its send is recorded as
 * ending here and its receive has no message record. */
int vargr_w_MPI_Request_free(MPI_Request *req) {
    pending p;
    if (pending_live() && take(*req, &p) && p.send) {
        emit(K_P2P, OP_SEND, p.comm, p.peer, p.tag, p.bytes, p.start, NOW(), MPI_SUCCESS);
    }
    return cx_floor ? cx_request_free(req) : PMPI_Request_free(req);
}

static int request_get_status(MPI_Request req, int *flag, MPI_Status *st) {
    return cx_floor ? cx_request_get_status(req, flag, st)
                    : PMPI_Request_get_status(req, flag, st);
}

/* A test that leaves the request to a later wait or test: an unsuccessful one counts in
 * the thread's run of MPI_Test polls, and the first that finds the request done records
 * its message (done then, not at the wait that frees it) and a test. Compressed
 * receives are decoded into the program's buffer as soon as it says they are done. */
static NOINLINE int traced_MPI_Request_get_status(MPI_Request req, int *flag,
                                                  MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = on ? poll_start(K_TEST_POLLS) : 0;
    int rc = request_get_status(req, flag, s);
    if (rc == MPI_SUCCESS && !*flag) {
        if (on) {
            test_polled(K_TEST_POLLS, t0);
        }
        return rc;
    }
    return test_done(req, rc, flag, s, t0, 0);
}

int vargr_w_MPI_Request_get_status(MPI_Request req, int *flag, MPI_Status *st) {
    if (!on && !pending_live()) {
        return request_get_status(req, flag, st);
    }
    return traced_MPI_Request_get_status(req, flag, st);
}

int vargr_w_MPI_Start(MPI_Request *req) {
    return cx_floor ? cx_start(req) : PMPI_Start(req);
}

int vargr_w_MPI_Startall(int n, MPI_Request reqs[]) {
    return cx_floor ? cx_startall(n, reqs) : PMPI_Startall(n, reqs);
}

/* ---- probes ----------------------------------------------------------------------------- */

static void probed(int kind, int rc, int found, const MPI_Status *s, int src, int tag,
                   MPI_Comm comm, uint64_t t0) {
    uint64_t t1 = NOW();
    t0 = t0 ? t0 : t1; /* a probe inside a run of them (poll_start) */
    comm_info *c = info_of(comm);
    int n = 0;
    if (rc == MPI_SUCCESS && found) {
        PMPI_Get_count(s, MPI_BYTE, &n);
        src = s->MPI_SOURCE;
        tag = s->MPI_TAG;
    }
    emit(kind, OP_USER, c, world_of(c, src), tag, n > 0 ? (uint64_t)n : 0, t0, t1, rc);
}

static NOINLINE int traced_MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = PROBE(src, tag, comm, s);
    probed(K_PROBE, rc, 1, s, src, tag, comm, t0);
    return rc;
}

int vargr_w_MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *st) {
    if (!on) {
        return PROBE(src, tag, comm, st);
    }
    return traced_MPI_Probe(src, tag, comm, st);
}

static NOINLINE int traced_MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = poll_start(K_IPROBE_POLLS);
    int rc = IPROBE(src, tag, comm, flag, s);
    if (rc == MPI_SUCCESS && !*flag) {
        comm_info *c = info_of(comm);
        polled(K_IPROBE_POLLS, c, world_of(c, src), tag, t0);
        return rc;
    }
    probed(K_IPROBE, rc, *flag, s, src, tag, comm, t0);
    return rc;
}

int vargr_w_MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
    if (!on) {
        return IPROBE(src, tag, comm, flag, st);
    }
    return traced_MPI_Iprobe(src, tag, comm, flag, st);
}

/* Matched probes hand out messages without their communicator, which MPI_Mrecv's
 * records need: kept here from the probe (a few at a time, as programs probe and
 * then receive). */
#define MATCHED 64
static struct {
    MPI_Message m;
    comm_info *c;
} matched_comm[MATCHED];
static int matched_next;
static pthread_mutex_t matched_lock = PTHREAD_MUTEX_INITIALIZER;

static void note_matched(MPI_Message m, MPI_Comm comm) {
    comm_info *c = info_of(comm);
    pthread_mutex_lock(&matched_lock);
    matched_comm[matched_next].m = m;
    matched_comm[matched_next].c = c;
    matched_next = (matched_next + 1) % MATCHED;
    pthread_mutex_unlock(&matched_lock);
}

static comm_info *comm_of_matched(MPI_Message m) {
    comm_info *c = NULL;
    pthread_mutex_lock(&matched_lock);
    for (int i = 0; i < MATCHED; i++) {
        if (matched_comm[i].c != NULL && matched_comm[i].m == m) {
            c = matched_comm[i].c;
            matched_comm[i].c = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&matched_lock);
    return c;
}

static NOINLINE int traced_MPI_Mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg,
                                      MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = cx_floor ? cx_mprobe(src, tag, comm, msg, s) : PMPI_Mprobe(src, tag, comm, msg, s);
    if (rc == MPI_SUCCESS) {
        note_matched(*msg, comm);
    }
    probed(K_MPROBE, rc, 1, s, src, tag, comm, t0);
    return rc;
}

int vargr_w_MPI_Mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *st) {
    if (!on) {
        return cx_floor ? cx_mprobe(src, tag, comm, msg, st)
                      : PMPI_Mprobe(src, tag, comm, msg, st);
    }
    return traced_MPI_Mprobe(src, tag, comm, msg, st);
}

static NOINLINE int traced_MPI_Improbe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg,
                                       MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = cx_floor ? cx_improbe(src, tag, comm, flag, msg, s)
                    : PMPI_Improbe(src, tag, comm, flag, msg, s);
    if (rc == MPI_SUCCESS && *flag) {
        note_matched(*msg, comm);
    }
    probed(K_IMPROBE, rc, *flag, s, src, tag, comm, t0);
    return rc;
}

int vargr_w_MPI_Improbe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg,
                        MPI_Status *st) {
    if (!on) {
        return cx_floor ? cx_improbe(src, tag, comm, flag, msg, st)
                      : PMPI_Improbe(src, tag, comm, flag, msg, st);
    }
    return traced_MPI_Improbe(src, tag, comm, flag, msg, st);
}

static NOINLINE int traced_MPI_Mrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg,
                                     MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    comm_info *c = comm_of_matched(*msg);
    uint64_t t0 = NOW();
    int rc = cx_floor ? cx_mrecv(buf, count, t, msg, s) : PMPI_Mrecv(buf, count, t, msg, s);
    uint64_t t1 = NOW();
    if (rc == MPI_SUCCESS) {
        received(c, s, t0, t1);
    }
    emit(K_MRECV, OP_USER, c, rc == MPI_SUCCESS ? world_of(c, s->MPI_SOURCE) : NO_PEER,
         rc == MPI_SUCCESS ? s->MPI_TAG : 0, rc == MPI_SUCCESS ? bytes_of(count, t) : 0, t0, t1,
         rc);
    return rc;
}

int vargr_w_MPI_Mrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Status *st) {
    if (!on) {
        return cx_floor ? cx_mrecv(buf, count, t, msg, st) : PMPI_Mrecv(buf, count, t, msg, st);
    }
    return traced_MPI_Mrecv(buf, count, t, msg, st);
}

static NOINLINE int traced_MPI_Imrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg,
                                      MPI_Request *req) {
    comm_info *c = comm_of_matched(*msg);
    uint64_t t0 = NOW();
    int rc = cx_floor ? cx_imrecv(buf, count, t, msg, req) : PMPI_Imrecv(buf, count, t, msg, req);
    uint64_t t1 = NOW();
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    if (rc == MPI_SUCCESS) {
        track(*req, 0, c, NO_PEER, 0, b, t0);
    }
    emit(K_IMRECV, OP_USER, c, NO_PEER, 0, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Imrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Request *req) {
    if (!on) {
        return cx_floor ? cx_imrecv(buf, count, t, msg, req) : PMPI_Imrecv(buf, count, t, msg, req);
    }
    return traced_MPI_Imrecv(buf, count, t, msg, req);
}

static NOINLINE int traced_MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest,
                                                int stag, int src, int rtag, MPI_Comm comm,
                                                MPI_Status *st) {
    MPI_Status mine;
    MPI_Status *s = st == MPI_STATUS_IGNORE ? &mine : st;
    uint64_t t0 = NOW();
    int rc = cx_floor ? cx_sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, s)
                    : PMPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, s);
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    uint64_t b = rc == MPI_SUCCESS ? bytes_of(count, t) : 0;
    if (rc == MPI_SUCCESS) {
        if (dest != MPI_PROC_NULL) {
            emit(K_P2P, OP_SEND, c, world_of(c, dest), stag, b, t0, t1, rc);
        }
        received(c, s, t0, t1);
    }
    emit(K_SENDRECV_REPLACE, OP_USER, c, world_of(c, dest), stag, b, t0, t1, rc);
    return rc;
}

int vargr_w_MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src,
                                 int rtag, MPI_Comm comm, MPI_Status *st) {
    if (!on) {
        return cx_floor ? cx_sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st)
                      : PMPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st);
    }
    return traced_MPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st);
}

/* ---- collectives ------------------------------------------------------------------------ */

/* One Call record: bytes are the larger of what this rank's buffers send and receive;
 * the peer is the root's world rank for rooted collectives. */
static int called(int kind, int rc, MPI_Comm comm, int root, uint64_t bytes, uint64_t t0) {
    uint64_t t1 = NOW();
    comm_info *c = info_of(comm);
    if (c == NULL) {
        return rc;
    }
    uint32_t seq = c->seq++;
    emit(kind, OP_CALL, c, root < 0 ? NO_PEER : world_of(c, root), (int)seq,
         rc == MPI_SUCCESS ? bytes : 0, t0, t1, rc);
    return rc;
}

static int is_root(MPI_Comm comm, int root) {
    comm_info *c = info_of(comm);
    return root == MPI_ROOT || (c != NULL && root == c->me);
}

static int size_of(MPI_Comm comm) {
    comm_info *c = info_of(comm);
    return c ? c->size : 0;
}

static NOINLINE int traced_MPI_Barrier(MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Barrier(comm);
    return called(K_BARRIER, rc, comm, -1, 0, t0);
}

int vargr_w_MPI_Barrier(MPI_Comm comm) {
    if (!on) {
        return PMPI_Barrier(comm);
    }
    return traced_MPI_Barrier(comm);
}

static NOINLINE int traced_MPI_Bcast(void *buf, int count, MPI_Datatype t, int root,
                                     MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Bcast(buf, count, t, root, comm);
    return called(K_BCAST, rc, comm, root, bytes_of(count, t), t0);
}

int vargr_w_MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm) {
    if (!on) {
        return PMPI_Bcast(buf, count, t, root, comm);
    }
    return traced_MPI_Bcast(buf, count, t, root, comm);
}

static NOINLINE int traced_MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype t,
                                      MPI_Op op, int root, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Reduce(sbuf, rbuf, count, t, op, root, comm);
    return called(K_REDUCE, rc, comm, root, bytes_of(count, t), t0);
}

int vargr_w_MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype t, MPI_Op op, int root,
                       MPI_Comm comm) {
    if (!on) {
        return PMPI_Reduce(sbuf, rbuf, count, t, op, root, comm);
    }
    return traced_MPI_Reduce(sbuf, rbuf, count, t, op, root, comm);
}

static NOINLINE int traced_MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype t,
                                         MPI_Op op, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Allreduce(sbuf, rbuf, count, t, op, comm);
    return called(K_ALLREDUCE, rc, comm, -1, bytes_of(count, t), t0);
}

int vargr_w_MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype t, MPI_Op op,
                          MPI_Comm comm) {
    if (!on) {
        return PMPI_Allreduce(sbuf, rbuf, count, t, op, comm);
    }
    return traced_MPI_Allreduce(sbuf, rbuf, count, t, op, comm);
}

static NOINLINE int traced_MPI_Gather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                                      int rcount, MPI_Datatype rtype, int root, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t sent = sbuf == MPI_IN_PLACE ? 0 : bytes_of(scount, stype);
    uint64_t got = is_root(comm, root) ? bytes_of(rcount, rtype) * (uint64_t)size_of(comm) : 0;
    return called(K_GATHER, rc, comm, root, max64(sent, got), t0);
}

int vargr_w_MPI_Gather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                       MPI_Datatype rtype, int root, MPI_Comm comm) {
    if (!on) {
        return PMPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    }
    return traced_MPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
}

static NOINLINE int traced_MPI_Allgather(const void *sbuf, int scount, MPI_Datatype stype,
                                         void *rbuf, int rcount, MPI_Datatype rtype,
                                         MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t sent = sbuf == MPI_IN_PLACE ? 0 : bytes_of(scount, stype);
    uint64_t got = bytes_of(rcount, rtype) * (uint64_t)size_of(comm);
    return called(K_ALLGATHER, rc, comm, -1, max64(sent, got), t0);
}

int vargr_w_MPI_Allgather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                          MPI_Datatype rtype, MPI_Comm comm) {
    if (!on) {
        return PMPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    }
    return traced_MPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
}

static NOINLINE int traced_MPI_Scatter(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                                       int rcount, MPI_Datatype rtype, int root, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = PMPI_Scatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t sent = is_root(comm, root) ? bytes_of(scount, stype) * (uint64_t)size_of(comm) : 0;
    uint64_t got = rbuf == MPI_IN_PLACE ? 0 : bytes_of(rcount, rtype);
    return called(K_SCATTER, rc, comm, root, max64(sent, got), t0);
}

int vargr_w_MPI_Scatter(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                        MPI_Datatype rtype, int root, MPI_Comm comm) {
    if (!on) {
        return PMPI_Scatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    }
    return traced_MPI_Scatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
}

static NOINLINE int traced_MPI_Alltoall(const void *sbuf, int scount, MPI_Datatype stype,
                                        void *rbuf, int rcount, MPI_Datatype rtype, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = ALLTOALL(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t n = (uint64_t)size_of(comm);
    uint64_t sent = sbuf == MPI_IN_PLACE ? 0 : bytes_of(scount, stype) * n;
    return called(K_ALLTOALL, rc, comm, -1, max64(sent, bytes_of(rcount, rtype) * n), t0);
}

int vargr_w_MPI_Alltoall(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                         MPI_Datatype rtype, MPI_Comm comm) {
    if (!on) {
        return ALLTOALL(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    }
    return traced_MPI_Alltoall(sbuf, scount, stype, rbuf, rcount, rtype, comm);
}

static uint64_t sum_bytes(const int counts[], int n, MPI_Datatype t) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        total += bytes_of(counts[i], t);
    }
    return total;
}

static NOINLINE int traced_MPI_Alltoallv(const void *sbuf, const int scounts[], const int sdispls[],
                                         MPI_Datatype stype, void *rbuf, const int rcounts[],
                                         const int rdispls[], MPI_Datatype rtype, MPI_Comm comm) {
    uint64_t t0 = NOW();
    int rc = ALLTOALLV(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
    int n = size_of(comm);
    uint64_t sent = sbuf == MPI_IN_PLACE ? 0 : sum_bytes(scounts, n, stype);
    return called(K_ALLTOALLV, rc, comm, -1, max64(sent, sum_bytes(rcounts, n, rtype)), t0);
}

int vargr_w_MPI_Alltoallv(const void *sbuf, const int scounts[], const int sdispls[],
                          MPI_Datatype stype, void *rbuf, const int rcounts[], const int rdispls[],
                          MPI_Datatype rtype, MPI_Comm comm) {
    if (!on) {
        return ALLTOALLV(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
    }
    return traced_MPI_Alltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
}
