/* The wrapped calls and one that is not, on 4 ranks, for tests/mpi_shim.rs: its output
 * must be the same with and without libvargr_mpi.so, and its trace must hold the
 * records the test counts. Rank 0 prints every rank's line, in rank order. */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LINE 512

static void check(int ok, const char *what, int rank) {
    if (!ok) {
        fprintf(stderr, "rank %d: %s\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    check(n == 4, "run me on 4 ranks", rank);
    char line[LINE];
    int at = snprintf(line, LINE, "rank %d:", rank);
    int right = (rank + 1) % n, left = (rank + n - 1) % n;

    /* Sendrecv around the ring: 1000 ints, tag 7. */
    int out[1000], in[1000];
    for (int i = 0; i < 1000; i++) {
        out[i] = rank * 1000 + i;
    }
    MPI_Sendrecv(out, 1000, MPI_INT, right, 7, in, 1000, MPI_INT, left, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    long sum = 0;
    for (int i = 0; i < 1000; i++) {
        sum += in[i];
    }
    at += snprintf(line + at, LINE - at, " ring %ld", sum);

    /* Everyone to everyone, non-blocking, received from MPI_ANY_SOURCE: 100 doubles,
     * tag 9; receives completed by one Waitall, sends by a Wait each. */
    double dout[100], din[3][100];
    for (int i = 0; i < 100; i++) {
        dout[i] = rank + i / 100.0;
    }
    MPI_Request rr[3], sr[3];
    for (int k = 0; k < 3; k++) {
        MPI_Irecv(din[k], 100, MPI_DOUBLE, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &rr[k]);
    }
    for (int k = 0, p = 0; p < n; p++) {
        if (p != rank) {
            MPI_Isend(dout, 100, MPI_DOUBLE, p, 9, MPI_COMM_WORLD, &sr[k++]);
        }
    }
    MPI_Status st[3];
    MPI_Waitall(3, rr, st);
    int from = 0;
    for (int k = 0; k < 3; k++) {
        from |= 1 << st[k].MPI_SOURCE;
        check(din[k][0] == st[k].MPI_SOURCE, "any-source payload", rank);
    }
    for (int k = 0; k < 3; k++) {
        MPI_Wait(&sr[k], MPI_STATUS_IGNORE);
    }
    at += snprintf(line + at, LINE - at, " any-source-from %x", from);

    /* Two small sends in a row, completed with their receives by one Waitall: MPI may
     * finish such sends within MPI_Isend and give both one shared handle. */
    int two_out[2] = {rank, -rank}, two_in[2];
    MPI_Request two[4];
    MPI_Irecv(&two_in[0], 1, MPI_INT, left, 40, MPI_COMM_WORLD, &two[0]);
    MPI_Irecv(&two_in[1], 1, MPI_INT, left, 41, MPI_COMM_WORLD, &two[1]);
    MPI_Isend(&two_out[0], 1, MPI_INT, right, 40, MPI_COMM_WORLD, &two[2]);
    MPI_Isend(&two_out[1], 1, MPI_INT, right, 41, MPI_COMM_WORLD, &two[3]);
    MPI_Waitall(4, two, MPI_STATUSES_IGNORE);
    check(two_in[0] == left && two_in[1] == -left, "two small sends", rank);

    /* Rank 0 Ssends 10 ints to 1 (tag 11), which probes for the size first; rank 2
     * Isends 5 ints to 3 (tag 12), which polls with Iprobe, alternating with Testany on
     * a receive of tag 15 that rank 2 sends only once 3 says so (tag 16), then Irecv
     * and Test. */
    if (rank == 0) {
        int v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        MPI_Ssend(v, 10, MPI_INT, 1, 11, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status s;
        int count = 0;
        MPI_Probe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &s);
        MPI_Get_count(&s, MPI_INT, &count);
        int *v = malloc(sizeof(int) * (size_t)count);
        MPI_Recv(v, count, MPI_INT, s.MPI_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        at += snprintf(line + at, LINE - at, " probed %d last %d", count, v[count - 1]);
        free(v);
    } else if (rank == 2) {
        int v[5] = {5, 4, 3, 2, 1};
        MPI_Request r;
        /* Late, so that rank 3's probes find nothing first. */
        struct timespec late = {0, 20 * 1000 * 1000};
        nanosleep(&late, NULL);
        MPI_Isend(v, 5, MPI_INT, 3, 12, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Recv(v, 1, MPI_INT, 3, 16, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(v, 1, MPI_INT, 3, 15, MPI_COMM_WORLD);
    } else {
        int flag = 0, v[5], later = 0, later_done = 0, idx = 0, go = 1;
        long alternations = 0;
        MPI_Status s;
        MPI_Request lr;
        MPI_Irecv(&later, 1, MPI_INT, 2, 15, MPI_COMM_WORLD, &lr);
        while (!flag) {
            MPI_Iprobe(2, 12, MPI_COMM_WORLD, &flag, &s);
            if (!flag) {
                MPI_Testany(1, &lr, &idx, &later_done, MPI_STATUS_IGNORE);
                alternations++;
            }
        }
        check(!later_done, "tag 13 came before it was asked for", rank);
        MPI_Send(&go, 1, MPI_INT, 2, 16, MPI_COMM_WORLD);
        check(alternations > 0, "rank 2's late send was there at once", rank);
        MPI_Request r;
        MPI_Irecv(v, 5, MPI_INT, 2, 12, MPI_COMM_WORLD, &r);
        flag = 0;
        while (!flag) {
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        }
        MPI_Wait(&lr, MPI_STATUS_IGNORE);
        at += snprintf(line + at, LINE - at, " tested %d", v[0]);
    }

    /* Rank 0 sends one int to 1 (tag 17), late; rank 1 polls its receive with
     * MPI_Request_get_status, which leaves the request to the MPI_Wait after it. Rank 2
     * sends one int to 3 (tag 18) and frees the request at once. */
    if (rank == 0) {
        struct timespec late = {0, 20 * 1000 * 1000};
        nanosleep(&late, NULL);
        int v = 17;
        MPI_Send(&v, 1, MPI_INT, 1, 17, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int v = 0, flag = 0;
        long polls = 0;
        MPI_Request r;
        MPI_Irecv(&v, 1, MPI_INT, 0, 17, MPI_COMM_WORLD, &r);
        while (!flag) {
            MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE);
            polls++;
        }
        check(polls > 1, "rank 0's late send was there at once", rank);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        at += snprintf(line + at, LINE - at, " status-polled %d", v);
    } else if (rank == 2) {
        static int freed = 18;
        MPI_Request r;
        MPI_Isend(&freed, 1, MPI_INT, 3, 18, MPI_COMM_WORLD, &r);
        MPI_Request_free(&r);
    } else {
        int v = 0;
        MPI_Recv(&v, 1, MPI_INT, 2, 18, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        at += snprintf(line + at, LINE - at, " freed-send %d", v);
    }

    /* Ranks 1..3 send one int each to 0 (tag 13), which takes them with Waitany; the
     * senders poll with Testall. */
    if (rank == 0) {
        int v[3];
        MPI_Request r[3];
        for (int k = 0; k < 3; k++) {
            MPI_Irecv(&v[k], 1, MPI_INT, k + 1, 13, MPI_COMM_WORLD, &r[k]);
        }
        int total = 0;
        for (int k = 0; k < 3; k++) {
            int idx = -1;
            MPI_Waitany(3, r, &idx, MPI_STATUS_IGNORE);
            total += v[idx];
        }
        at += snprintf(line + at, LINE - at, " waitany %d", total);
    } else {
        int v = rank * 10, flag = 0;
        MPI_Request r;
        MPI_Isend(&v, 1, MPI_INT, 0, 13, MPI_COMM_WORLD, &r);
        while (!flag) {
            MPI_Testall(1, &r, &flag, MPI_STATUSES_IGNORE);
        }
    }

    /* The collectives. */
    MPI_Barrier(MPI_COMM_WORLD);
    int b[16];
    for (int i = 0; i < 16; i++) {
        b[i] = rank == 2 ? i * i : -1;
    }
    MPI_Bcast(b, 16, MPI_INT, 2, MPI_COMM_WORLD);
    double x[8], y[8];
    for (int i = 0; i < 8; i++) {
        x[i] = rank + i;
    }
    MPI_Reduce(x, y, 8, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        at += snprintf(line + at, LINE - at, " reduce %g", y[7]);
    }
    MPI_Allreduce(x, y, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int g[4 * 2], me2[2] = {rank, rank * rank};
    MPI_Gather(me2, 2, MPI_INT, g, 2, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Allgather(me2, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD);
    int sc[4 * 3], mine[3];
    for (int i = 0; i < 12; i++) {
        sc[i] = 100 + i;
    }
    MPI_Scatter(sc, 3, MPI_INT, mine, 3, MPI_INT, 1, MPI_COMM_WORLD);
    int a2a_out[4], a2a_in[4];
    for (int i = 0; i < 4; i++) {
        a2a_out[i] = rank * 10 + i;
    }
    MPI_Alltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD);
    /* Alltoallv: rank r sends r+1 ints to each. */
    int vc[4], vd[4], rc[4], rd[4], vout[16], vin[16];
    for (int p = 0; p < 4; p++) {
        vc[p] = rank + 1;
        vd[p] = p * 4;
        rc[p] = p + 1;
        rd[p] = p * 4;
    }
    for (int i = 0; i < 16; i++) {
        vout[i] = rank;
    }
    MPI_Alltoallv(vout, vc, vd, MPI_INT, vin, rc, rd, MPI_INT, MPI_COMM_WORLD);
    at += snprintf(line + at, LINE - at, " bcast %d allreduce %g allgather %d scatter %d "
                                         "alltoall %d alltoallv %d",
                   b[15], y[7], g[7], mine[2], a2a_in[3], vin[12]);

    /* Not wrapped: MPI_Scan goes to MPI untouched. MPI_Comm_split only names the new
     * communicator, whose Allreduce is wrapped and named after it. */
    int scan = 0, one = rank + 1;
    MPI_Scan(&one, &scan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    int hs = 0;
    MPI_Allreduce(&one, &hs, 1, MPI_INT, MPI_SUM, half);
    MPI_Comm_free(&half);
    at += snprintf(line + at, LINE - at, " scan %d half %d", scan, hs);

    /* Two duplicates of the world, first used in opposite orders by even and odd ranks
     * (tags 50 and 51, to rank ^ 1): named as they are made, their messages pair up. */
    MPI_Comm dup[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &dup[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup[1]);
    int partner = rank ^ 1, dr[2] = {-1, -1};
    MPI_Request dq[4];
    for (int k = 0; k < 2; k++) {
        int d = rank % 2 == 0 ? k : 1 - k;
        MPI_Irecv(&dr[d], 1, MPI_INT, partner, 50 + d, dup[d], &dq[2 * k]);
        MPI_Isend(&rank, 1, MPI_INT, partner, 50 + d, dup[d], &dq[2 * k + 1]);
    }
    MPI_Waitall(4, dq, MPI_STATUSES_IGNORE);
    check(dr[0] == partner && dr[1] == partner, "messages on duplicates", rank);
    MPI_Comm_free(&dup[0]);
    MPI_Comm_free(&dup[1]);

    /* Every other constructor the library wraps (to name what it makes): each result is
     * used once, by an Allreduce of 1 whose sum is its size, and printed. */
    int sizes[10], nsizes = 0;
    MPI_Comm made[10];
    int dims[2] = {2, 2}, periods[2] = {1, 0}, remain[2] = {1, 0};
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &made[0]);
    MPI_Cart_sub(made[0], remain, &made[1]);
    MPI_Group world_group, evens;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int even_ranks[2] = {0, 2};
    MPI_Group_incl(world_group, 2, even_ranks, &evens);
    MPI_Comm_create(MPI_COMM_WORLD, evens, &made[2]);
    made[3] = MPI_COMM_NULL;
    if (rank % 2 == 0) {
        MPI_Comm_create_group(MPI_COMM_WORLD, evens, 60, &made[3]);
    }
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &made[4]);
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &made[5]);
    int ring_index[4] = {2, 4, 6, 8}, ring_edges[8] = {1, 3, 0, 2, 1, 3, 2, 0};
    MPI_Graph_create(MPI_COMM_WORLD, 4, ring_index, ring_edges, 0, &made[6]);
    /* Weighted: GCC takes Open MPI's MPI_UNWEIGHTED, a sentinel address, for an array. */
    int sources[1] = {left}, to[1] = {right}, weight[1] = {1}, degree[1] = {1};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, sources, weight, 1, to, weight,
                                   MPI_INFO_NULL, 0, &made[7]);
    MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &rank, degree, to, weight, MPI_INFO_NULL, 0,
                          &made[8]);
    MPI_Comm parity, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
    MPI_Intercomm_create(parity, 0, MPI_COMM_WORLD, rank % 2 == 0 ? 1 : 0, 61, &inter);
    MPI_Intercomm_merge(inter, rank % 2, &made[9]);
    for (int k = 0; k < 10; k++) {
        int one = 1, sum = -1;
        if (made[k] != MPI_COMM_NULL) {
            MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, made[k]);
            MPI_Comm_free(&made[k]);
        }
        sizes[nsizes++] = sum;
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&parity);
    MPI_Group_free(&evens);
    MPI_Group_free(&world_group);
    at += snprintf(line + at, LINE - at, " made");
    for (int k = 0; k < nsizes; k++) {
        at += snprintf(line + at, LINE - at, " %d", sizes[k]);
    }

    /* Paused by MPI_Pcontrol(0): a Sendrecv around the ring (tag 30) and a Barrier leave
     * no record; MPI_Pcontrol(1) resumes. Messages started before the pause are recorded
     * all the same: around the ring, tag 31 completed in the pause and tag 32 after it. */
    int early[2] = {-1, -1};
    MPI_Request er[4];
    for (int k = 0; k < 2; k++) {
        MPI_Irecv(&early[k], 1, MPI_INT, left, 31 + k, MPI_COMM_WORLD, &er[2 * k]);
        MPI_Isend(&rank, 1, MPI_INT, right, 31 + k, MPI_COMM_WORLD, &er[2 * k + 1]);
    }
    MPI_Pcontrol(0);
    int paused = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 30, &paused, 1, MPI_INT, left, 30, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Waitall(2, er, MPI_STATUSES_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Pcontrol(1);
    MPI_Waitall(2, er + 2, MPI_STATUSES_IGNORE);
    check(early[0] == left && early[1] == left, "messages around a pause", rank);
    at += snprintf(line + at, LINE - at, " paused %d", paused);

    char all[4 * LINE];
    MPI_Gather(line, LINE, MPI_CHAR, all, LINE, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int p = 0; p < n; p++) {
            printf("%s\n", all + p * LINE);
        }
    }
    MPI_Finalize();
    return 0;
}
