/* Loops of small MPI calls, as the Intel MPI Benchmarks (IMB-MPI1) time them: PingPong
 * between ranks 0 and 1 (the others wait), then Allreduce of one double and Barrier on
 * every rank. Each loop runs a warm-up, then ITERS timed repetitions between barriers.
 *
 *   imb_loops [ITERS [BYTES]]     (default 100000 repetitions, PingPong of 8 bytes)
 *
 * Rank 0 prints one line per loop, IMB's figures: PingPong's half round trip, and for
 * the collectives the slowest rank's mean time per call, in microseconds. */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double slowest(double mine) {
    double all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    int bytes = argc > 2 ? atoi(argv[2]) : 8;
    if (size < 2 || iters < 1 || bytes < 0) {
        if (rank == 0) {
            fprintf(stderr, "imb_loops: needs 2 ranks or more, ITERS >= 1, BYTES >= 0\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = calloc((size_t)bytes + 1, 1);
    long warm = iters / 10 + 1;

    double pingpong = 0;
    for (int timed = 0; timed < 2; timed++) {
        long n = timed ? iters : warm;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            for (long i = 0; i < n; i++) {
                MPI_Send(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        } else if (rank == 1) {
            for (long i = 0; i < n; i++) {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        pingpong = (MPI_Wtime() - t0) / (double)n / 2;
    }
    double x = rank, sum = 0, allreduce = 0, barrier = 0;
    for (int timed = 0; timed < 2; timed++) {
        long n = timed ? iters : warm;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        allreduce = (MPI_Wtime() - t0) / (double)n;
    }
    for (int timed = 0; timed < 2; timed++) {
        long n = timed ? iters : warm;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        barrier = (MPI_Wtime() - t0) / (double)n;
    }
    allreduce = slowest(allreduce);
    barrier = slowest(barrier);
    if (rank == 0) {
        printf("PingPong %d B: %.4f us\n", bytes, pingpong * 1e6);
        printf("Allreduce 8 B: %.4f us\n", allreduce * 1e6);
        printf("Barrier: %.4f us\n", barrier * 1e6);
        printf("check: %.0f\n", sum);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
