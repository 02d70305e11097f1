/* Corner cases of compression between sites, for 4 ranks (sites: ranks 0-1 and 2-3 with
 * VARGR_MPI_SITES=blocks:2). Every rank prints what it received (a hash of the bytes,
 * counts, sources, tags, error classes), one line per case: the output must be the same
 * with and without libvargr_mpi.so compressing.
 *
 * `codec_check corrupt`: rank 0 sends rank 2 bytes that bypass the library (PMPI_Send)
 * and look like a frame by their size; rank 2 must get an MPI error, not the bytes. */

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}

static void say(const char *what, const void *buf, size_t n, const MPI_Status *st,
                MPI_Datatype t) {
    int count = -1;
    if (st) {
        MPI_Get_count(st, t, &count);
    }
    printf("rank %d: %s: %016llx count %d src %d tag %d\n", rank, what,
           (unsigned long long)fnv(buf, n), count, st ? st->MPI_SOURCE : -9,
           st ? st->MPI_TAG : -9);
}

static void fill(double *d, int n, int seed) {
    for (int i = 0; i < n; i++) {
        d[i] = (double)((i + seed) % 97) * 0.25;
    }
}

static void noise(unsigned char *b, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}

/* Site-crossing partner: 0<->2, 1<->3; same-site: 0<->1, 2<->3. */
static int far_peer(void) { return (rank + 2) % 4; }
static int near_peer(void) { return rank ^ 1; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) {
        if (rank == 0) fprintf(stderr, "run with 4 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    enum { N = 8192 }; /* doubles: 64 KiB */
    double *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double));
    MPI_Status st;

    if (argc > 1 && strcmp(argv[1], "corrupt") == 0) {
        unsigned char junk[4096];
        noise(junk, sizeof junk, 7);
        if (rank == 0) {
            PMPI_Send(junk, sizeof junk, MPI_BYTE, 2, 5, MPI_COMM_WORLD);
        } else if (rank == 2) {
            unsigned char in[8192];
            int rc = MPI_Recv(in, sizeof in, MPI_BYTE, 0, 5, MPI_COMM_WORLD, &st);
            int cls = 0;
            MPI_Error_class(rc, &cls);
            printf("rank 2: corrupt: rc %s\n", rc == MPI_SUCCESS ? "success" : "error");
            printf("rank 2: corrupt: class %s\n", cls == MPI_ERR_OTHER ? "other" : "not other");
        }
        MPI_Finalize();
        return 0;
    }

    /* 1. Blocking, compressible, to the other site and to this one. */
    for (int k = 0; k < 2; k++) {
        int peer = k == 0 ? far_peer() : near_peer();
        fill(a, N, rank + 10 * k);
        MPI_Sendrecv(a, N, MPI_DOUBLE, peer, 1, b, N, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, &st);
        say(k == 0 ? "sendrecv far" : "sendrecv near", b, N * sizeof(double), &st, MPI_DOUBLE);
    }

    /* 2. Send/Recv into a larger buffer, and Isend/Irecv with Waitall. */
    fill(a, N, 3);
    if (rank < 2) {
        MPI_Send(a, N / 2, MPI_DOUBLE, far_peer(), 2, MPI_COMM_WORLD);
    } else {
        memset(b, 0, N * sizeof(double));
        MPI_Recv(b, N, MPI_DOUBLE, far_peer(), 2, MPI_COMM_WORLD, &st);
        say("recv larger", b, N * sizeof(double), &st, MPI_DOUBLE);
    }
    {
        MPI_Request r[4];
        MPI_Status s[4];
        double *c = malloc(N * sizeof(double)), *d = malloc(N * sizeof(double));
        MPI_Irecv(c, N, MPI_DOUBLE, far_peer(), 3, MPI_COMM_WORLD, &r[0]);
        MPI_Irecv(d, N, MPI_DOUBLE, near_peer(), 3, MPI_COMM_WORLD, &r[1]);
        fill(a, N, rank + 5);
        MPI_Isend(a, N, MPI_DOUBLE, far_peer(), 3, MPI_COMM_WORLD, &r[2]);
        MPI_Isend(a, N, MPI_DOUBLE, near_peer(), 3, MPI_COMM_WORLD, &r[3]);
        MPI_Waitall(4, r, s);
        say("irecv far", c, N * sizeof(double), &s[0], MPI_DOUBLE);
        say("irecv near", d, N * sizeof(double), &s[1], MPI_DOUBLE);
        free(c);
        free(d);
    }

    /* 3. Any source: three messages to rank 0 (two from the other site), by size. */
    if (rank == 0) {
        for (int k = 0; k < 3; k++) {
            memset(b, 0, N * sizeof(double));
            MPI_Recv(b, N, MPI_DOUBLE, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &st);
            int count = 0;
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            printf("rank 0: any source from %d: %016llx count %d\n", st.MPI_SOURCE,
                   (unsigned long long)fnv(b, (size_t)count * sizeof(double)), count);
        }
    } else {
        fill(a, N, rank);
        MPI_Send(a, 1000 * rank, MPI_DOUBLE, 0, 4, MPI_COMM_WORLD);
    }

    /* 4. Probe, then receive what the probe said; Iprobe until there; Mprobe/Mrecv as
     * mpi4py's pickled recv does. */
    fill(a, N, rank + 7);
    if (rank >= 2) {
        MPI_Send(a, 3000, MPI_DOUBLE, rank - 2, 5, MPI_COMM_WORLD);
        MPI_Send(a, 2500, MPI_DOUBLE, rank - 2, 6, MPI_COMM_WORLD);
        MPI_Send(a, 2000, MPI_DOUBLE, rank - 2, 7, MPI_COMM_WORLD);
        MPI_Send(a, 10, MPI_DOUBLE, rank - 2, 7, MPI_COMM_WORLD);
    } else {
        int count = 0, flag = 0;
        MPI_Probe(rank + 2, 5, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        printf("rank %d: probed %d doubles\n", rank, count);
        double *p = malloc((size_t)count * sizeof(double));
        MPI_Recv(p, count, MPI_DOUBLE, rank + 2, 5, MPI_COMM_WORLD, &st);
        say("after probe", p, (size_t)count * sizeof(double), &st, MPI_DOUBLE);
        free(p);
        while (!flag) {
            MPI_Iprobe(MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &flag, &st);
        }
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        printf("rank %d: iprobed %d doubles from %d\n", rank, count, st.MPI_SOURCE);
        /* Probed twice: the same message. */
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        printf("rank %d: probed again %d doubles tag %d\n", rank, count, st.MPI_TAG);
        MPI_Request r;
        p = malloc((size_t)count * sizeof(double));
        MPI_Irecv(p, count, MPI_DOUBLE, MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, &st);
        say("irecv after iprobe", p, (size_t)count * sizeof(double), &st, MPI_DOUBLE);
        free(p);
        for (int k = 0; k < 2; k++) {
            MPI_Message m;
            MPI_Mprobe(rank + 2, 7, MPI_COMM_WORLD, &m, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            unsigned char *q = malloc((size_t)count + 1);
            MPI_Mrecv(q, count, MPI_BYTE, &m, &st);
            say(k == 0 ? "mrecv large" : "mrecv small", q, (size_t)count, &st, MPI_BYTE);
            free(q);
        }
    }

    /* 5. Truncation: a message larger than the buffer, to the other site. */
    if (rank < 2) {
        fill(a, N, 1);
        MPI_Send(a, 4000, MPI_DOUBLE, far_peer(), 8, MPI_COMM_WORLD);
    } else {
        int rc = MPI_Recv(b, 3000, MPI_DOUBLE, far_peer(), 8, MPI_COMM_WORLD, &st);
        int cls = 0;
        MPI_Error_class(rc, &cls);
        printf("rank %d: truncated: %s\n", rank,
               cls == MPI_ERR_TRUNCATE ? "MPI_ERR_TRUNCATE" : "another class");
    }

    /* 6. Derived types: every other double out, contiguous in; and back. */
    {
        MPI_Datatype every_other;
        MPI_Type_vector(N / 2, 1, 2, MPI_DOUBLE, &every_other);
        MPI_Type_commit(&every_other);
        fill(a, N, rank + 20);
        memset(b, 0, N * sizeof(double));
        MPI_Sendrecv(a, 1, every_other, far_peer(), 9, b, N / 2, MPI_DOUBLE, far_peer(), 9,
                     MPI_COMM_WORLD, &st);
        say("vector to contiguous", b, N / 2 * sizeof(double), &st, MPI_DOUBLE);
        memset(b, 0, N * sizeof(double));
        MPI_Sendrecv(a, N / 2, MPI_DOUBLE, far_peer(), 10, b, 1, every_other, far_peer(), 10,
                     MPI_COMM_WORLD, &st);
        say("contiguous to vector", b, N * sizeof(double), &st, MPI_DOUBLE);
        MPI_Request r;
        memset(b, 0, N * sizeof(double));
        MPI_Irecv(b, 1, every_other, far_peer(), 11, MPI_COMM_WORLD, &r);
        MPI_Send(a, N / 2, MPI_DOUBLE, far_peer(), 11, MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        say("irecv vector", b, N * sizeof(double), &st, MPI_DOUBLE);
        MPI_Type_free(&every_other);
    }

    /* 7. Sendrecv_replace, across. */
    fill(a, N, rank + 30);
    MPI_Sendrecv_replace(a, N, MPI_DOUBLE, far_peer(), 12, far_peer(), 12, MPI_COMM_WORLD, &st);
    say("sendrecv_replace", a, N * sizeof(double), &st, MPI_DOUBLE);

    /* 8. Persistent requests, three rounds with new data each. */
    {
        MPI_Request r[2];
        MPI_Status s[2];
        MPI_Recv_init(b, N, MPI_DOUBLE, far_peer(), 13, MPI_COMM_WORLD, &r[0]);
        MPI_Send_init(a, N, MPI_DOUBLE, far_peer(), 13, MPI_COMM_WORLD, &r[1]);
        for (int k = 0; k < 3; k++) {
            fill(a, N, rank + 40 + k);
            MPI_Startall(2, r);
            MPI_Waitall(2, r, s);
            char what[32];
            snprintf(what, sizeof what, "persistent %d", k);
            say(what, b, N * sizeof(double), &s[0], MPI_DOUBLE);
        }
        MPI_Request_free(&r[0]);
        MPI_Request_free(&r[1]);
    }

    /* 9. Send modes: synchronous, buffered, ready (receive posted first), Issend. */
    {
        int bsize = N * (int)sizeof(double) + MPI_BSEND_OVERHEAD;
        void *buffer = malloc((size_t)bsize);
        MPI_Buffer_attach(buffer, bsize);
        MPI_Request r;
        fill(a, N, rank + 50);
        MPI_Irecv(b, N, MPI_DOUBLE, far_peer(), 14, MPI_COMM_WORLD, &r);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Rsend(a, N, MPI_DOUBLE, far_peer(), 14, MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        say("rsend", b, N * sizeof(double), &st, MPI_DOUBLE);
        MPI_Irecv(b, N, MPI_DOUBLE, far_peer(), 15, MPI_COMM_WORLD, &r);
        MPI_Bsend(a, N, MPI_DOUBLE, far_peer(), 15, MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        say("bsend", b, N * sizeof(double), &st, MPI_DOUBLE);
        MPI_Request rs[2];
        MPI_Irecv(b, N, MPI_DOUBLE, far_peer(), 16, MPI_COMM_WORLD, &rs[0]);
        MPI_Issend(a, N, MPI_DOUBLE, far_peer(), 16, MPI_COMM_WORLD, &rs[1]);
        int done = 0, idx[2], outcount = 0;
        MPI_Status ss[2];
        while (done < 2) {
            MPI_Waitsome(2, rs, &outcount, idx, ss);
            for (int k = 0; k < outcount; k++) {
                if (idx[k] == 0) {
                    say("waitsome", b, N * sizeof(double), &ss[k], MPI_DOUBLE);
                }
            }
            done += outcount;
        }
        if (rank < 2) {
            MPI_Ssend(a, N, MPI_DOUBLE, far_peer(), 17, MPI_COMM_WORLD);
        } else {
            int flag = 0, index = -1;
            MPI_Irecv(b, N, MPI_DOUBLE, far_peer(), 17, MPI_COMM_WORLD, &r);
            while (!flag) {
                MPI_Testany(1, &r, &index, &flag, &st);
            }
            say("testany", b, N * sizeof(double), &st, MPI_DOUBLE);
        }
        MPI_Buffer_detach(&buffer, &bsize);
        free(buffer);
    }

    /* 10. Noise (sent stored), and sizes around the threshold (1 KiB in the test). */
    {
        unsigned char *x = malloc(65536), *y = malloc(65536);
        noise(x, 65536, (unsigned)rank + 1);
        MPI_Sendrecv(x, 65536, MPI_BYTE, far_peer(), 18, y, 65536, MPI_BYTE, far_peer(), 18,
                     MPI_COMM_WORLD, &st);
        say("noise", y, 65536, &st, MPI_BYTE);
        for (int n = 1022; n <= 1025; n++) {
            memset(y, 0, 2048);
            noise(x, n, (unsigned)(n + rank));
            MPI_Sendrecv(x, n, MPI_BYTE, far_peer(), 19, y, 2048, MPI_BYTE, far_peer(), 19,
                         MPI_COMM_WORLD, &st);
            char what[32];
            snprintf(what, sizeof what, "%d bytes", n);
            say(what, y, 2048, &st, MPI_BYTE);
        }
        free(x);
        free(y);
    }

    /* 11. All-to-all, rebuilt on frames between sites: blocks above and below the
     * threshold and empty ones, a derived type, and a message of the program's own in
     * flight across the collective with the tag the rebuilt one uses on its twin. */
    {
        enum { B = 3000 }; /* doubles per block at most */
        double *out = malloc(4 * B * sizeof(double)), *in = malloc(4 * B * sizeof(double));
        int sc[4], sd[4], rc[4], rd[4];
        for (int p = 0; p < 4; p++) {
            /* rank r sends ((r + p) % 3) * 1400 + 10 doubles to p, none from 3 to 1. */
            sc[p] = (rank == 3 && p == 1) ? 0 : ((rank + p) % 3) * 1400 + 10;
            rc[p] = (p == 3 && rank == 1) ? 0 : ((p + rank) % 3) * 1400 + 10;
            sd[p] = p * B;
            rd[p] = p * B;
        }
        fill(out, 4 * B, rank * 7);
        memset(in, 0, 4 * B * sizeof(double));
        MPI_Request early;
        int token = -1, mine = 1000 + rank;
        MPI_Irecv(&token, 1, MPI_INT, far_peer(), 0, MPI_COMM_WORLD, &early);
        MPI_Alltoallv(out, sc, sd, MPI_DOUBLE, in, rc, rd, MPI_DOUBLE, MPI_COMM_WORLD);
        MPI_Send(&mine, 1, MPI_INT, far_peer(), 0, MPI_COMM_WORLD);
        MPI_Wait(&early, &st);
        say("alltoallv", in, 4 * B * sizeof(double), NULL, MPI_DOUBLE);
        printf("rank %d: token %d from %d\n", rank, token, st.MPI_SOURCE);

        int *ints = malloc(4 * 2000 * sizeof(int)), *got = malloc(4 * 2000 * sizeof(int));
        for (int i = 0; i < 4 * 2000; i++) {
            ints[i] = (i / 2000) * 100000 + rank * 1000 + i % 50;
        }
        MPI_Alltoall(ints, 2000, MPI_INT, got, 2000, MPI_INT, MPI_COMM_WORLD);
        say("alltoall", got, 4 * 2000 * sizeof(int), NULL, MPI_INT);

        /* Every other double of a block, received contiguous. */
        MPI_Datatype every_other;
        MPI_Type_vector(B / 2, 1, 2, MPI_DOUBLE, &every_other);
        MPI_Type_commit(&every_other);
        MPI_Datatype strided;
        MPI_Type_create_resized(every_other, 0, (MPI_Aint)(B * sizeof(double)), &strided);
        MPI_Type_commit(&strided);
        memset(in, 0, 4 * B * sizeof(double));
        MPI_Alltoall(out, 1, strided, in, B / 2, MPI_DOUBLE, MPI_COMM_WORLD);
        say("alltoall strided", in, 4 * B * sizeof(double), NULL, MPI_DOUBLE);
        MPI_Type_free(&strided);
        MPI_Type_free(&every_other);
        free(ints);
        free(got);
        free(out);
        free(in);
    }

    /* 12. Isend, then MPI_Request_free while the send is active, ten times (the frames
     * must still arrive whole, and the library must not keep them after), each taken by
     * a blocking receive. */
    for (int k = 0; k < 10; k++) {
        MPI_Request r;
        fill(a, N, rank + 60 + k);
        MPI_Isend(a, N, MPI_DOUBLE, far_peer(), 15, MPI_COMM_WORLD, &r);
        MPI_Request_free(&r);
        MPI_Recv(b, N, MPI_DOUBLE, far_peer(), 15, MPI_COMM_WORLD, &st);
        /* The next fill may overwrite a only once the peer has it, as without us. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (k == 9) {
            say("isend freed", b, N * sizeof(double), &st, MPI_DOUBLE);
        }
    }

    /* 13. A receive polled with MPI_Request_get_status: once it says complete, the
     * buffer and the status are the message's (before the wait that frees it), and the
     * wait reports the same status. Then the same for a persistent receive, twice. */
    {
        MPI_Request r;
        int flag = 0, count = -1;
        fill(a, N, rank + 70);
        memset(b, 0, N * sizeof(double));
        MPI_Irecv(b, N, MPI_DOUBLE, far_peer(), 16, MPI_COMM_WORLD, &r);
        MPI_Send(a, N / 2, MPI_DOUBLE, far_peer(), 16, MPI_COMM_WORLD);
        while (!flag) {
            MPI_Request_get_status(r, &flag, &st);
        }
        say("get_status", b, N * sizeof(double), &st, MPI_DOUBLE);
        memset(b, 0, N * sizeof(double));
        MPI_Request_get_status(r, &flag, &st);
        MPI_Wait(&r, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        printf("rank %d: get_status then wait: flag %d count %d src %d tag %d untouched %d\n",
               rank, flag, count, st.MPI_SOURCE, st.MPI_TAG, b[0] == 0.0);
        MPI_Recv_init(b, N, MPI_DOUBLE, far_peer(), 17, MPI_COMM_WORLD, &r);
        for (int k = 0; k < 2; k++) {
            fill(a, N, rank + 80 + k);
            MPI_Start(&r);
            MPI_Send(a, N - k, MPI_DOUBLE, far_peer(), 17, MPI_COMM_WORLD);
            for (flag = 0; !flag;) {
                MPI_Request_get_status(r, &flag, &st);
            }
            char what[32];
            snprintf(what, sizeof what, "persistent get_status %d", k);
            say(what, b, N * sizeof(double), &st, MPI_DOUBLE);
            MPI_Wait(&r, &st);
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            printf("rank %d: persistent wait %d: count %d\n", rank, k, count);
        }
        MPI_Request_free(&r);
    }

    /* 14. A probe takes a frame out of MPI (into the library's stash); a persistent
     * receive started after it must get that message first, then the next one: with
     * MPI_Waitany, MPI_Wait, and again with MPI_Startall and MPI_Waitall. */
    {
        MPI_Request sends[4], r;
        double *more = malloc(4 * N * sizeof(double));
        for (int k = 0; k < 4; k++) {
            fill(more + k * N, N, rank + 90 + k);
            MPI_Isend(more + k * N, N - k, MPI_DOUBLE, far_peer(), 21, MPI_COMM_WORLD,
                      &sends[k]);
        }
        MPI_Recv_init(b, N, MPI_DOUBLE, far_peer(), 21, MPI_COMM_WORLD, &r);
        for (int k = 0; k < 4; k++) {
            int idx = -1, count = -1;
            MPI_Probe(far_peer(), 21, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            if (k < 2) {
                MPI_Start(&r);
            } else {
                MPI_Startall(1, &r);
            }
            if (k == 0) {
                MPI_Waitany(1, &r, &idx, &st);
            } else if (k == 1) {
                MPI_Wait(&r, &st);
            } else {
                MPI_Waitall(1, &r, &st);
            }
            char what[48];
            snprintf(what, sizeof what, "persistent after probe %d (probed %d)", k, count);
            say(what, b, N * sizeof(double), &st, MPI_DOUBLE);
        }
        MPI_Request_free(&r);
        MPI_Waitall(4, sends, MPI_STATUSES_IGNORE);
        free(more);
    }

    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
