/* What libvargr_mpi.so adds to one MPI call, counted in instructions rather than timed
 * (bench/mpi/call_cost.sh runs it under callgrind): counts do not depend on the
 * machine's load, so a change to the wrappers can be judged on a busy machine.
 *
 *   call_cost polls N      N unsuccessful MPI_Testany and N MPI_Test on a receive that
 *                          never matches (HPCC RandomAccess's loop)
 *   call_cost messages N   N rounds of MPI_Irecv, MPI_Isend and MPI_Waitall of one int
 *                          to itself (every round: three calls, two messages)
 *   call_cost blocking N   N rounds of MPI_Send and MPI_Recv of 8 bytes to itself
 *                          (IMB's PingPong as one process can make it)
 *
 * One process; the script runs each twice (N and 2N) and divides the difference. */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 2 ? atol(argv[2]) : 0;
    if (argc != 3 || n < 1 ||
        (strcmp(argv[1], "polls") && strcmp(argv[1], "messages") && strcmp(argv[1], "blocking"))) {
        fprintf(stderr, "usage: call_cost polls|messages|blocking N\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int a = 1, b = 0, index = 0, flag = 0;
    MPI_Request r[2];
    MPI_Status st[2];
    if (!strcmp(argv[1], "polls")) {
        MPI_Irecv(&b, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &r[0]);
        for (long i = 0; i < n; i++) {
            MPI_Testany(1, r, &index, &flag, &st[0]);
            MPI_Test(&r[0], &flag, &st[0]);
        }
        if (flag) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Cancel(&r[0]);
        MPI_Wait(&r[0], &st[0]);
    } else if (!strcmp(argv[1], "blocking")) {
        char out[8] = {0}, in[8];
        for (long i = 0; i < n; i++) {
            MPI_Send(out, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            MPI_Recv(in, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    } else {
        for (long i = 0; i < n; i++) {
            MPI_Irecv(&b, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r[0]);
            MPI_Isend(&a, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r[1]);
            MPI_Waitall(2, r, st);
        }
    }
    MPI_Finalize();
    return 0;
}
