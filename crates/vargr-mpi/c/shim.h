/* What the two halves of the C side share: wrappers.c (the MPI_X entry points and their
 * trace records) and compress.c (CoMPI's framing of messages between sites, called by
 * the entry points in place of PMPI_X when compression is on). */

#ifndef VARGR_MPI_SHIM_H
#define VARGR_MPI_SHIM_H

#include <mpi.h>
#include <stdint.h>

#define NO_PEER UINT32_MAX

/* A communicator as the library knows it (kept as an attribute of it). */
typedef struct {
    uint32_t id;
    int me;          /* this process's rank in it */
    int size;        /* of the group peers are ranks of (the remote one of an intercommunicator) */
    uint32_t *world; /* world rank of each peer rank; NULL: the identity (the world) */
    uint32_t seq;    /* collective calls so far: the same on every member */
    int remote;      /* compression: -1 not known yet, 0 no peer on another site, 1 some */
    int twin_made;   /* compression: whether `twin` exists */
    MPI_Comm twin;   /* compression: a private duplicate for rebuilt collectives */
} comm_info;

comm_info *vargr_info_of(MPI_Comm comm);

/* The world rank of `rank` of communicator `c`, or NO_PEER (MPI_ANY_SOURCE,
 * MPI_PROC_NULL, MPI_ROOT). */
static inline uint32_t vargr_world_of(const comm_info *c, int rank) {
    if (c == NULL || rank < 0 || rank >= c->size) {
        return NO_PEER;
    }
    return c->world ? c->world[rank] : (uint32_t)rank;
}

uint64_t vargr_bytes_of(int count, MPI_Datatype t);

/* ---- compress.c ---------------------------------------------------------------------- */

/* While compression is on, the size from which messages between sites travel as
 * frames (src/compress.rs says why it is not the compression threshold), else 0. */
extern uint64_t cx_floor;

/* Set up at MPI_Init (collective: every rank calls it), after the trace's start. */
void cx_init(int rank, int size);
/* Sends in the background finished, at MPI_Finalize. */
void cx_finalize(void);

enum { CX_SEND, CX_SSEND, CX_BSEND, CX_RSEND };

/* The plain MPI send of a mode, blocking or not (no compression). */
int pmpi_send_mode(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                   MPI_Comm comm);
int pmpi_isend_mode(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                    MPI_Comm comm, MPI_Request *req);

int cx_send(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
            MPI_Comm comm);
int cx_isend(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
             MPI_Comm comm, MPI_Request *req);
int cx_send_init(int mode, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                 MPI_Comm comm, MPI_Request *req);
int cx_recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
            MPI_Status *st);
int cx_irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
             MPI_Request *req);
int cx_recv_init(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                 MPI_Request *req);
int cx_sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
                int rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm,
                MPI_Status *st);
int cx_sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src,
                        int rtag, MPI_Comm comm, MPI_Status *st);
int cx_probe(int src, int tag, MPI_Comm comm, MPI_Status *st);
int cx_iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *st);
int cx_mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *st);
int cx_improbe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg, MPI_Status *st);
int cx_mrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Status *st);
int cx_imrecv(void *buf, int count, MPI_Datatype t, MPI_Message *msg, MPI_Request *req);
int cx_start(MPI_Request *req);
int cx_startall(int n, MPI_Request reqs[]);
int cx_request_free(MPI_Request *req);
int cx_request_get_status(MPI_Request req, int *flag, MPI_Status *st);
/* The index of a persistent receive among `reqs` that took a stashed message when it
 * started (MPI sees it inactive, so MPI's any and some calls would pass it over), or
 * -1; cheap when there is none. */
int cx_presatisfied(int n, const MPI_Request reqs[]);
int cx_alltoall(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                MPI_Datatype rtype, MPI_Comm comm);
int cx_alltoallv(const void *sbuf, const int scounts[], const int sdispls[], MPI_Datatype stype,
                 void *rbuf, const int rcounts[], const int rdispls[], MPI_Datatype rtype,
                 MPI_Comm comm);

/* Finishes request `r` (its handle before completion), completed by PMPI with status
 * `st` (never MPI_STATUS_IGNORE): decodes into the caller's buffer and makes the
 * status the caller's view. Returns MPI_SUCCESS or the error to report (also set in
 * st->MPI_ERROR); a request compress.c did not start is left alone (MPI_SUCCESS). */
int cx_finish(MPI_Request r, MPI_Status *st);

#endif
