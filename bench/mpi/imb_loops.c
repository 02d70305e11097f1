/* Loops of small MPI calls, as the Intel MPI Benchmarks (IMB-MPI1) time them: PingPong
 * between ranks 0 and 1 (the others wait), then Allreduce of one double and Barrier on
 * every rank, and last a loop IMB does not have: rank 0 polling with MPI_Test a receive
 * that nothing matches (the calls HPCC's RandomAccess makes millions of a second). Each
 * loop runs a warm-up, then ITERS timed repetitions between barriers.
 *
 *   imb_loops [ITERS [BYTES [PAIRS]]]   (default 100000 repetitions, PingPong of 8 bytes)
 *
 * Rank 0 prints one line per loop, IMB's figures: PingPong's half round trip, for the
 * collectives the slowest rank's mean time per call, for the polls rank 0's, in
 * microseconds.
 *
 * With PAIRS > 0 the timed repetitions run as PAIRS pairs of blocks, one block of each
 * pair recorded (MPI_Pcontrol(1)) and the other paused (MPI_Pcontrol(0)), in the order
 * on-off, off-on, on-off, ... so that a drift of the machine's speed cancels. The loop's
 * figure is then the recorded blocks' and a second line per loop gives each pair's
 * ratio of recorded to paused time (the slowest rank's, for the collectives): what
 * recording costs, measured within one run. Without a profiler MPI_Pcontrol does
 * nothing, and the ratios show how finely the machine resolves. */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PINGPONG, ALLREDUCE, BARRIER, POLL, LOOPS };

static const char *const NAMES[] = {"PingPong", "Allreduce", "Barrier", "Test"};

typedef struct {
    char *buf;
    int bytes;
    double x, sum;
    MPI_Request never; /* rank 0's receive that nothing matches */
} loop_data;

/* n repetitions of loop `which`; returns this rank's time per call. */
static double repeat(int which, long n, int rank, loop_data *d) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    switch (which) {
    case PINGPONG:
        if (rank == 0) {
            for (long i = 0; i < n; i++) {
                MPI_Send(d->buf, d->bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(d->buf, d->bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        } else if (rank == 1) {
            for (long i = 0; i < n; i++) {
                MPI_Recv(d->buf, d->bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(d->buf, d->bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        return (MPI_Wtime() - t0) / (double)n / 2;
    case POLL:
        if (rank == 0) {
            int flag = 0;
            for (long i = 0; i < n; i++) {
                MPI_Test(&d->never, &flag, MPI_STATUS_IGNORE);
            }
        }
        return (MPI_Wtime() - t0) / (double)n;
    case ALLREDUCE:
        for (long i = 0; i < n; i++) {
            MPI_Allreduce(&d->x, &d->sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        break;
    default:
        for (long i = 0; i < n; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / (double)n;
}

/* The loop's figure: rank 0's for PingPong, the slowest rank's for collectives. Every
 * rank passes `n` values; rank 0 gets the figures back in `out`. */
static void figures(int which, const double *mine, double *out, int n) {
    if (which == PINGPONG || which == POLL) {
        memcpy(out, mine, sizeof(double) * (size_t)n);
    } else {
        MPI_Reduce(mine, out, n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    int bytes = argc > 2 ? atoi(argv[2]) : 8;
    int pairs = argc > 3 ? atoi(argv[3]) : 0;
    if (size < 2 || iters < 1 || bytes < 0 || pairs < 0 || (pairs > 0 && iters < 2L * pairs)) {
        if (rank == 0) {
            fprintf(stderr, "imb_loops: needs 2 ranks or more, ITERS >= 1 (>= 2 PAIRS), "
                            "BYTES >= 0, PAIRS >= 0\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    loop_data d = {calloc((size_t)bytes + 1, 1), bytes, rank, 0, MPI_REQUEST_NULL};
    int never_data = 0;
    if (rank == 0) {
        /* Posted paused: a profiler keeps watching a request it saw start, even while
         * paused, and the paused blocks are to time the library idle. */
        MPI_Pcontrol(0);
        MPI_Irecv(&never_data, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &d.never);
        MPI_Pcontrol(1);
    }
    long warm = iters / 10 + 1;
    double figure[LOOPS];
    double *ratios[LOOPS] = {0};
    for (int which = PINGPONG; which < LOOPS; which++) {
        repeat(which, warm, rank, &d);
        if (pairs == 0) {
            double t = repeat(which, iters, rank, &d);
            figures(which, &t, &figure[which], 1);
            continue;
        }
        long block = iters / (2L * pairs);
        double *mine = calloc(2 * (size_t)pairs, sizeof(double));
        double *all = calloc(2 * (size_t)pairs, sizeof(double));
        ratios[which] = calloc((size_t)pairs, sizeof(double));
        /* mine[2k]: pair k's recorded block, mine[2k+1]: its paused one. */
        for (int k = 0; k < pairs; k++) {
            for (int half = 0; half < 2; half++) {
                int recorded = (k + half) % 2 == 0;
                MPI_Pcontrol(recorded);
                mine[2 * k + !recorded] = repeat(which, block, rank, &d);
            }
        }
        MPI_Pcontrol(1);
        figures(which, mine, all, 2 * pairs);
        double on = 0;
        for (int k = 0; k < pairs; k++) {
            on += all[2 * k];
            ratios[which][k] = all[2 * k] / all[2 * k + 1];
        }
        figure[which] = on / pairs;
        free(mine);
        free(all);
    }
    if (rank == 0) {
        printf("PingPong %d B: %.4f us\n", bytes, figure[PINGPONG] * 1e6);
        printf("Allreduce 8 B: %.4f us\n", figure[ALLREDUCE] * 1e6);
        printf("Barrier: %.4f us\n", figure[BARRIER] * 1e6);
        printf("Test: %.4f us\n", figure[POLL] * 1e6);
        for (int which = PINGPONG; which < LOOPS && pairs > 0; which++) {
            printf("%s recorded/paused:", NAMES[which]);
            for (int k = 0; k < pairs; k++) {
                printf(" %.5f", ratios[which][k]);
            }
            printf("\n");
        }
        printf("check: %.0f\n", d.sum);
    }
    for (int which = PINGPONG; which < LOOPS; which++) {
        free(ratios[which]);
    }
    if (rank == 0) {
        /* The receive was never matched: take it back before finalizing. */
        MPI_Cancel(&d.never);
        MPI_Wait(&d.never, MPI_STATUS_IGNORE);
    }
    free(d.buf);
    MPI_Finalize();
    return 0;
}
