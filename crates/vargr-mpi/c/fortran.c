/* Fortran programs' MPI calls, into the same wrappers as C's.
 *
 * Open MPI's Fortran bindings (mpif.h and `use mpi`: mpi_send_ and its other spellings;
 * `use mpi_f08`: ompi_send_f, which mpi_send_f08 calls) call PMPI_Send, not MPI_Send, so
 * a C wrapper never sees a Fortran program's messages. These functions replace them:
 * each converts its arguments as Open MPI's own bindings do (handles with the f2c
 * functions, MPI_BOTTOM and MPI_IN_PLACE from Open MPI's Fortran sentinels, statuses
 * and 1-based indices) and calls the C wrapper, which traces, compresses and calls
 * PMPI. src/trampolines.rs exports each under every name Open MPI gives it. The
 * sentinels' names are Open MPI's: this file, like the wrappers, is built for it. */

#include <stdlib.h>

#include "shim.h"

/* The C wrappers (wrappers.c). */
int vargr_w_MPI_Init(int *argc, char ***argv);
int vargr_w_MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int vargr_w_MPI_Finalize(void);
int vargr_w_MPI_Pcontrol(const int level, ...);
int vargr_w_MPI_Send(const void *, int, MPI_Datatype, int, int, MPI_Comm);
int vargr_w_MPI_Ssend(const void *, int, MPI_Datatype, int, int, MPI_Comm);
int vargr_w_MPI_Bsend(const void *, int, MPI_Datatype, int, int, MPI_Comm);
int vargr_w_MPI_Rsend(const void *, int, MPI_Datatype, int, int, MPI_Comm);
int vargr_w_MPI_Isend(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Issend(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Ibsend(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Irsend(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Send_init(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Ssend_init(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Bsend_init(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Rsend_init(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Recv(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
int vargr_w_MPI_Irecv(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Recv_init(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
int vargr_w_MPI_Sendrecv(const void *, int, MPI_Datatype, int, int, void *, int, MPI_Datatype,
                         int, int, MPI_Comm, MPI_Status *);
int vargr_w_MPI_Sendrecv_replace(void *, int, MPI_Datatype, int, int, int, int, MPI_Comm,
                                 MPI_Status *);
int vargr_w_MPI_Wait(MPI_Request *, MPI_Status *);
int vargr_w_MPI_Test(MPI_Request *, int *, MPI_Status *);
int vargr_w_MPI_Waitall(int, MPI_Request[], MPI_Status[]);
int vargr_w_MPI_Testall(int, MPI_Request[], int *, MPI_Status[]);
int vargr_w_MPI_Waitany(int, MPI_Request[], int *, MPI_Status *);
int vargr_w_MPI_Testany(int, MPI_Request[], int *, int *, MPI_Status *);
int vargr_w_MPI_Waitsome(int, MPI_Request[], int *, int[], MPI_Status[]);
int vargr_w_MPI_Testsome(int, MPI_Request[], int *, int[], MPI_Status[]);
int vargr_w_MPI_Request_free(MPI_Request *);
int vargr_w_MPI_Request_get_status(MPI_Request, int *, MPI_Status *);
int vargr_w_MPI_Start(MPI_Request *);
int vargr_w_MPI_Startall(int, MPI_Request[]);
int vargr_w_MPI_Probe(int, int, MPI_Comm, MPI_Status *);
int vargr_w_MPI_Iprobe(int, int, MPI_Comm, int *, MPI_Status *);
int vargr_w_MPI_Mprobe(int, int, MPI_Comm, MPI_Message *, MPI_Status *);
int vargr_w_MPI_Improbe(int, int, MPI_Comm, int *, MPI_Message *, MPI_Status *);
int vargr_w_MPI_Mrecv(void *, int, MPI_Datatype, MPI_Message *, MPI_Status *);
int vargr_w_MPI_Imrecv(void *, int, MPI_Datatype, MPI_Message *, MPI_Request *);
int vargr_w_MPI_Comm_dup(MPI_Comm, MPI_Comm *);
int vargr_w_MPI_Comm_dup_with_info(MPI_Comm, MPI_Info, MPI_Comm *);
int vargr_w_MPI_Comm_split(MPI_Comm, int, int, MPI_Comm *);
int vargr_w_MPI_Comm_split_type(MPI_Comm, int, int, MPI_Info, MPI_Comm *);
int vargr_w_MPI_Comm_create(MPI_Comm, MPI_Group, MPI_Comm *);
int vargr_w_MPI_Comm_create_group(MPI_Comm, MPI_Group, int, MPI_Comm *);
int vargr_w_MPI_Cart_create(MPI_Comm, int, const int[], const int[], int, MPI_Comm *);
int vargr_w_MPI_Cart_sub(MPI_Comm, const int[], MPI_Comm *);
int vargr_w_MPI_Graph_create(MPI_Comm, int, const int[], const int[], int, MPI_Comm *);
int vargr_w_MPI_Intercomm_create(MPI_Comm, int, MPI_Comm, int, int, MPI_Comm *);
int vargr_w_MPI_Intercomm_merge(MPI_Comm, int, MPI_Comm *);
int vargr_w_MPI_Barrier(MPI_Comm);
int vargr_w_MPI_Bcast(void *, int, MPI_Datatype, int, MPI_Comm);
int vargr_w_MPI_Reduce(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm);
int vargr_w_MPI_Allreduce(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
int vargr_w_MPI_Gather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm);
int vargr_w_MPI_Scatter(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int,
                        MPI_Comm);
int vargr_w_MPI_Allgather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
int vargr_w_MPI_Alltoall(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
int vargr_w_MPI_Alltoallv(const void *, const int[], const int[], MPI_Datatype, void *,
                          const int[], const int[], MPI_Datatype, MPI_Comm);

/* Open MPI's Fortran sentinels (common blocks in libmpi). */
extern MPI_Fint mpi_fortran_bottom_, mpi_fortran_in_place_, mpi_fortran_status_ignore_,
    mpi_fortran_statuses_ignore_;

typedef MPI_Fint F;

static void *buf_of(void *b) {
    if (b == (void *)&mpi_fortran_bottom_) return MPI_BOTTOM;
    if (b == (void *)&mpi_fortran_in_place_) return MPI_IN_PLACE;
    return b;
}

#define T(x) PMPI_Type_f2c(*(x))
#define C(x) PMPI_Comm_f2c(*(x))

/* A Fortran status takes MPI_STATUS_SIZE integers: the C status's size in them. */
#define STATUS_FINTS (sizeof(MPI_Status) / sizeof(F))

static int ignored(const F *s) {
    return s == MPI_F_STATUS_IGNORE || s == &mpi_fortran_status_ignore_;
}

static int all_ignored(const F *s) {
    return s == MPI_F_STATUSES_IGNORE || s == &mpi_fortran_statuses_ignore_;
}

static void status_out(const MPI_Status *c, F *f) {
    if (!ignored(f)) {
        PMPI_Status_c2f(c, f);
    }
}

/* Requests and statuses of the array calls, converted in and out. */
typedef struct {
    MPI_Request *r;
    MPI_Status *s;
} arrays;

static int arrays_in(arrays *a, int n, const F *reqs) {
    size_t m = n > 0 ? (size_t)n : 1;
    a->r = malloc(sizeof(MPI_Request) * m);
    a->s = malloc(sizeof(MPI_Status) * m);
    if (a->r == NULL || a->s == NULL) {
        free(a->r);
        free(a->s);
        return MPI_ERR_NO_MEM;
    }
    for (int i = 0; i < n; i++) {
        a->r[i] = PMPI_Request_f2c(reqs[i]);
    }
    return MPI_SUCCESS;
}

static void arrays_out(arrays *a, int n, F *reqs) {
    for (int i = 0; i < n; i++) {
        reqs[i] = PMPI_Request_c2f(a->r[i]);
    }
    free(a->r);
    free(a->s);
}

static void statuses_out(const MPI_Status *c, const int *which, int n, F *f) {
    if (all_ignored(f)) {
        return;
    }
    for (int i = 0; i < n; i++) {
        PMPI_Status_c2f(&c[which ? which[i] : i], f + (size_t)i * STATUS_FINTS);
    }
}

/* ---- start and end ------------------------------------------------------------------------ */

void vargr_f_init(F *ierr) { *ierr = vargr_w_MPI_Init(NULL, NULL); }

void vargr_f_init_thread(F *required, F *provided, F *ierr) {
    int p = 0;
    *ierr = vargr_w_MPI_Init_thread(NULL, NULL, *required, &p);
    *provided = p;
}

void vargr_f_finalize(F *ierr) { *ierr = vargr_w_MPI_Finalize(); }

/* MPI_PCONTROL(LEVEL) has no IERROR. */
void vargr_f_pcontrol(F *level) { vargr_w_MPI_Pcontrol((int)*level); }

/* ---- point to point ----------------------------------------------------------------------- */

#define BLOCKING_SEND(name, wrapper)                                                         \
    void vargr_f_##name(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {    \
        *ierr = wrapper(buf_of(buf), *count, T(type), *dest, *tag, C(comm));                  \
    }
BLOCKING_SEND(send, vargr_w_MPI_Send)
BLOCKING_SEND(ssend, vargr_w_MPI_Ssend)
BLOCKING_SEND(bsend, vargr_w_MPI_Bsend)
BLOCKING_SEND(rsend, vargr_w_MPI_Rsend)

#define REQUEST_SEND(name, wrapper)                                                          \
    void vargr_f_##name(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *req,       \
                        F *ierr) {                                                           \
        MPI_Request r = MPI_REQUEST_NULL;                                                    \
        *ierr = wrapper(buf_of(buf), *count, T(type), *dest, *tag, C(comm), &r);              \
        if (*ierr == MPI_SUCCESS) *req = PMPI_Request_c2f(r);                                \
    }
REQUEST_SEND(isend, vargr_w_MPI_Isend)
REQUEST_SEND(issend, vargr_w_MPI_Issend)
REQUEST_SEND(ibsend, vargr_w_MPI_Ibsend)
REQUEST_SEND(irsend, vargr_w_MPI_Irsend)
REQUEST_SEND(send_init, vargr_w_MPI_Send_init)
REQUEST_SEND(ssend_init, vargr_w_MPI_Ssend_init)
REQUEST_SEND(bsend_init, vargr_w_MPI_Bsend_init)
REQUEST_SEND(rsend_init, vargr_w_MPI_Rsend_init)
/* Receives take the same arguments, with a source for a destination. */
REQUEST_SEND(irecv, vargr_w_MPI_Irecv)
REQUEST_SEND(recv_init, vargr_w_MPI_Recv_init)

void vargr_f_recv(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *status, F *ierr) {
    MPI_Status s;
    *ierr = vargr_w_MPI_Recv(buf_of(buf), *count, T(type), *src, *tag, C(comm), &s);
    status_out(&s, status);
}

void vargr_f_sendrecv(void *sbuf, F *scount, F *stype, F *dest, F *stag, void *rbuf, F *rcount,
                      F *rtype, F *src, F *rtag, F *comm, F *status, F *ierr) {
    MPI_Status s;
    *ierr = vargr_w_MPI_Sendrecv(buf_of(sbuf), *scount, T(stype), *dest, *stag, buf_of(rbuf),
                                 *rcount, T(rtype), *src, *rtag, C(comm), &s);
    status_out(&s, status);
}

void vargr_f_sendrecv_replace(void *buf, F *count, F *type, F *dest, F *stag, F *src, F *rtag,
                              F *comm, F *status, F *ierr) {
    MPI_Status s;
    *ierr = vargr_w_MPI_Sendrecv_replace(buf_of(buf), *count, T(type), *dest, *stag, *src, *rtag,
                                         C(comm), &s);
    status_out(&s, status);
}

void vargr_f_probe(F *src, F *tag, F *comm, F *status, F *ierr) {
    MPI_Status s;
    *ierr = vargr_w_MPI_Probe(*src, *tag, C(comm), &s);
    status_out(&s, status);
}

void vargr_f_iprobe(F *src, F *tag, F *comm, F *flag, F *status, F *ierr) {
    MPI_Status s;
    int f = 0;
    *ierr = vargr_w_MPI_Iprobe(*src, *tag, C(comm), &f, &s);
    *flag = f != 0;
    if (f) status_out(&s, status);
}

void vargr_f_mprobe(F *src, F *tag, F *comm, F *msg, F *status, F *ierr) {
    MPI_Status s;
    MPI_Message m = MPI_MESSAGE_NULL;
    *ierr = vargr_w_MPI_Mprobe(*src, *tag, C(comm), &m, &s);
    *msg = PMPI_Message_c2f(m);
    status_out(&s, status);
}

void vargr_f_improbe(F *src, F *tag, F *comm, F *flag, F *msg, F *status, F *ierr) {
    MPI_Status s;
    MPI_Message m = MPI_MESSAGE_NULL;
    int f = 0;
    *ierr = vargr_w_MPI_Improbe(*src, *tag, C(comm), &f, &m, &s);
    *flag = f != 0;
    if (f) {
        *msg = PMPI_Message_c2f(m);
        status_out(&s, status);
    }
}

void vargr_f_mrecv(void *buf, F *count, F *type, F *msg, F *status, F *ierr) {
    MPI_Status s;
    MPI_Message m = PMPI_Message_f2c(*msg);
    *ierr = vargr_w_MPI_Mrecv(buf_of(buf), *count, T(type), &m, &s);
    *msg = PMPI_Message_c2f(m);
    status_out(&s, status);
}

void vargr_f_imrecv(void *buf, F *count, F *type, F *msg, F *req, F *ierr) {
    MPI_Message m = PMPI_Message_f2c(*msg);
    MPI_Request r = MPI_REQUEST_NULL;
    *ierr = vargr_w_MPI_Imrecv(buf_of(buf), *count, T(type), &m, &r);
    *msg = PMPI_Message_c2f(m);
    if (*ierr == MPI_SUCCESS) *req = PMPI_Request_c2f(r);
}

/* ---- completion ----------------------------------------------------------------------------- */

void vargr_f_wait(F *req, F *status, F *ierr) {
    MPI_Status s;
    MPI_Request r = PMPI_Request_f2c(*req);
    *ierr = vargr_w_MPI_Wait(&r, &s);
    *req = PMPI_Request_c2f(r);
    status_out(&s, status);
}

void vargr_f_test(F *req, F *flag, F *status, F *ierr) {
    MPI_Status s;
    MPI_Request r = PMPI_Request_f2c(*req);
    int f = 0;
    *ierr = vargr_w_MPI_Test(&r, &f, &s);
    *req = PMPI_Request_c2f(r);
    *flag = f != 0;
    if (f) status_out(&s, status);
}

void vargr_f_request_get_status(F *req, F *flag, F *status, F *ierr) {
    MPI_Status s;
    int f = 0;
    *ierr = vargr_w_MPI_Request_get_status(PMPI_Request_f2c(*req), &f, &s);
    *flag = f != 0;
    if (f) status_out(&s, status);
}

void vargr_f_waitall(F *n, F *reqs, F *statuses, F *ierr) {
    arrays a;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    *ierr = vargr_w_MPI_Waitall(*n, a.r, a.s);
    statuses_out(a.s, NULL, *n, statuses);
    arrays_out(&a, *n, reqs);
}

void vargr_f_testall(F *n, F *reqs, F *flag, F *statuses, F *ierr) {
    arrays a;
    int f = 0;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    *ierr = vargr_w_MPI_Testall(*n, a.r, &f, a.s);
    *flag = f != 0;
    if (f) statuses_out(a.s, NULL, *n, statuses);
    arrays_out(&a, *n, reqs);
}

/* Indices are 1-based in Fortran. */
static F index_out(int i) { return i == MPI_UNDEFINED ? MPI_UNDEFINED : i + 1; }

void vargr_f_waitany(F *n, F *reqs, F *index, F *status, F *ierr) {
    arrays a;
    int i = MPI_UNDEFINED;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    *ierr = vargr_w_MPI_Waitany(*n, a.r, &i, a.s);
    *index = index_out(i);
    status_out(a.s, status);
    arrays_out(&a, *n, reqs);
}

void vargr_f_testany(F *n, F *reqs, F *index, F *flag, F *status, F *ierr) {
    arrays a;
    int i = MPI_UNDEFINED, f = 0;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    *ierr = vargr_w_MPI_Testany(*n, a.r, &i, &f, a.s);
    *index = index_out(i);
    *flag = f != 0;
    if (f) status_out(a.s, status);
    arrays_out(&a, *n, reqs);
}

static void some(int wait, F *n, F *reqs, F *outcount, F *indices, F *statuses, F *ierr) {
    arrays a;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    int out = 0;
    int *idx = malloc(sizeof(int) * (size_t)(*n > 0 ? *n : 1));
    if (idx == NULL) {
        arrays_out(&a, *n, reqs);
        *ierr = MPI_ERR_NO_MEM;
        return;
    }
    *ierr = wait ? vargr_w_MPI_Waitsome(*n, a.r, &out, idx, a.s)
                 : vargr_w_MPI_Testsome(*n, a.r, &out, idx, a.s);
    *outcount = out;
    if (out != MPI_UNDEFINED) {
        statuses_out(a.s, NULL, out, statuses);
        for (int i = 0; i < out; i++) {
            indices[i] = index_out(idx[i]);
        }
    }
    free(idx);
    arrays_out(&a, *n, reqs);
}

void vargr_f_waitsome(F *n, F *reqs, F *outcount, F *indices, F *statuses, F *ierr) {
    some(1, n, reqs, outcount, indices, statuses, ierr);
}

void vargr_f_testsome(F *n, F *reqs, F *outcount, F *indices, F *statuses, F *ierr) {
    some(0, n, reqs, outcount, indices, statuses, ierr);
}

void vargr_f_request_free(F *req, F *ierr) {
    MPI_Request r = PMPI_Request_f2c(*req);
    *ierr = vargr_w_MPI_Request_free(&r);
    *req = PMPI_Request_c2f(r);
}

void vargr_f_start(F *req, F *ierr) {
    MPI_Request r = PMPI_Request_f2c(*req);
    *ierr = vargr_w_MPI_Start(&r);
    *req = PMPI_Request_c2f(r);
}

void vargr_f_startall(F *n, F *reqs, F *ierr) {
    arrays a;
    if ((*ierr = arrays_in(&a, *n, reqs)) != MPI_SUCCESS) return;
    *ierr = vargr_w_MPI_Startall(*n, a.r);
    arrays_out(&a, *n, reqs);
}

/* ---- collectives ---------------------------------------------------------------------------- */

void vargr_f_barrier(F *comm, F *ierr) { *ierr = vargr_w_MPI_Barrier(C(comm)); }

void vargr_f_bcast(void *buf, F *count, F *type, F *root, F *comm, F *ierr) {
    *ierr = vargr_w_MPI_Bcast(buf_of(buf), *count, T(type), *root, C(comm));
}

void vargr_f_reduce(void *sbuf, void *rbuf, F *count, F *type, F *op, F *root, F *comm,
                    F *ierr) {
    *ierr = vargr_w_MPI_Reduce(buf_of(sbuf), buf_of(rbuf), *count, T(type), PMPI_Op_f2c(*op),
                               *root, C(comm));
}

void vargr_f_allreduce(void *sbuf, void *rbuf, F *count, F *type, F *op, F *comm, F *ierr) {
    *ierr = vargr_w_MPI_Allreduce(buf_of(sbuf), buf_of(rbuf), *count, T(type), PMPI_Op_f2c(*op),
                                  C(comm));
}

#define ROOTED(name, wrapper)                                                                \
    void vargr_f_##name(void *sbuf, F *scount, F *stype, void *rbuf, F *rcount, F *rtype,     \
                        F *root, F *comm, F *ierr) {                                          \
        *ierr = wrapper(buf_of(sbuf), *scount, T(stype), buf_of(rbuf), *rcount, T(rtype),      \
                        *root, C(comm));                                                     \
    }
ROOTED(gather, vargr_w_MPI_Gather)
ROOTED(scatter, vargr_w_MPI_Scatter)

#define ALL(name, wrapper)                                                                   \
    void vargr_f_##name(void *sbuf, F *scount, F *stype, void *rbuf, F *rcount, F *rtype,     \
                        F *comm, F *ierr) {                                                   \
        *ierr = wrapper(buf_of(sbuf), *scount, T(stype), buf_of(rbuf), *rcount, T(rtype),      \
                        C(comm));                                                            \
    }
ALL(allgather, vargr_w_MPI_Allgather)
ALL(alltoall, vargr_w_MPI_Alltoall)

void vargr_f_alltoallv(void *sbuf, F *scounts, F *sdispls, F *stype, void *rbuf, F *rcounts,
                       F *rdispls, F *rtype, F *comm, F *ierr) {
    *ierr = vargr_w_MPI_Alltoallv(buf_of(sbuf), scounts, sdispls, T(stype), buf_of(rbuf),
                                  rcounts, rdispls, T(rtype), C(comm));
}

/* Communicators' constructors, so that Fortran programs' communicators are named as they
 * are made too (wrappers.c, made()). Fortran LOGICAL arrays (periods, remain_dims) pass
 * as they are: C takes any nonzero as true, whatever the compiler's .TRUE. is. The
 * distributed graph constructors are left to Open MPI: their Fortran MPI_UNWEIGHTED is
 * a sentinel address, and their communicators are named at first use. */
static void comm_out(int rc, const MPI_Comm *made, F *out, F *ierr) {
    *ierr = rc;
    if (rc == MPI_SUCCESS) {
        *out = PMPI_Comm_c2f(*made);
    }
}

void vargr_f_comm_dup(F *comm, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_dup(C(comm), &c), &c, out, ierr);
}

void vargr_f_comm_dup_with_info(F *comm, F *info, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_dup_with_info(C(comm), PMPI_Info_f2c(*info), &c), &c, out, ierr);
}

void vargr_f_comm_split(F *comm, F *color, F *key, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_split(C(comm), *color, *key, &c), &c, out, ierr);
}

void vargr_f_comm_split_type(F *comm, F *type, F *key, F *info, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_split_type(C(comm), *type, *key, PMPI_Info_f2c(*info), &c), &c,
             out, ierr);
}

void vargr_f_comm_create(F *comm, F *group, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_create(C(comm), PMPI_Group_f2c(*group), &c), &c, out, ierr);
}

void vargr_f_comm_create_group(F *comm, F *group, F *tag, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Comm_create_group(C(comm), PMPI_Group_f2c(*group), *tag, &c), &c, out,
             ierr);
}

void vargr_f_cart_create(F *comm, F *ndims, F *dims, F *periods, F *reorder, F *out,
                         F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Cart_create(C(comm), *ndims, dims, periods, *reorder != 0, &c), &c,
             out, ierr);
}

void vargr_f_cart_sub(F *comm, F *remain, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Cart_sub(C(comm), remain, &c), &c, out, ierr);
}

void vargr_f_graph_create(F *comm, F *nnodes, F *index, F *edges, F *reorder, F *out,
                          F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Graph_create(C(comm), *nnodes, index, edges, *reorder != 0, &c), &c,
             out, ierr);
}

void vargr_f_intercomm_create(F *local, F *local_leader, F *peer, F *remote_leader, F *tag,
                              F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Intercomm_create(C(local), *local_leader, C(peer), *remote_leader,
                                          *tag, &c),
             &c, out, ierr);
}

void vargr_f_intercomm_merge(F *inter, F *high, F *out, F *ierr) {
    MPI_Comm c = MPI_COMM_NULL;
    comm_out(vargr_w_MPI_Intercomm_merge(C(inter), *high != 0, &c), &c, out, ierr);
}
