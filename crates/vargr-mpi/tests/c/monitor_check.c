/* A program for the live monitor: ITERS rounds of an allreduce that rank LATE reaches
 * last (it sleeps first), a barrier, and a ring of point-to-point messages, which the
 * monitor must not take for collectives. Prints one checksum per rank.
 *
 * usage: monitor_check ITERS LATE SLEEP_US */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void pause_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int late = argc > 2 ? atoi(argv[2]) : size - 1;
    long sleep_us = argc > 3 ? atol(argv[3]) : 2000;
    long sum = 0;
    for (int i = 0; i < iters; i++) {
        if (rank == late) {
            pause_us(sleep_us);
        }
        long mine = rank + i, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        sum += all;
        int token = i, got = -1;
        MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % size, i, &got, 1, MPI_INT,
                     (rank + size - 1) % size, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        sum += got;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    printf("rank %d checksum %ld\n", rank, sum);
    MPI_Finalize();
    return 0;
}
