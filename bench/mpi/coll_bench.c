/* The Open MPI half of `vargr bench coll`: collective latency measured exactly the way
 * `vargr-bench coll-bench-rank` measures it (crates/vargr-bench/src/coll_rank.rs), so the two
 * can be compared line for line. Keep the two in step.
 *
 *   coll_bench OP BYTES ITERS WARMUP COMPUTE_ITERS
 *
 * OP is allreduce, bcast, gsum or compute-gsum. Buffers are doubles (BYTES / 8 of them).
 * Each rank runs WARMUP untimed calls, one barrier so that all start together, then ITERS
 * calls with no barrier between them, timing each call (compute-gsum: each iteration of
 * COMPUTE_ITERS steps of the spin kernel plus one allreduce). After timing, the per-rank
 * arrays are combined with MPI_MAX at rank 0 (the slowest rank per iteration), one more
 * call is checked for the right answer, and rank 0 prints one line:
 *
 *   RESULT {"iters":N,"total_s":T,"times_us":[...]}
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CLOCK_MONOTONIC, the clock Rust's Instant reads on Linux: one timer for both sides. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A dependent chain of multiply-adds: the same kernel as `spin` in
 * crates/vargr-bench/src/coll_rank.rs, so that both sides do the same work between calls. Without -ffast-math the compiler may neither
 * reorder nor vectorize it. */
static double spin(long k, double x) {
    for (long i = 0; i < k; i++) x = x * 1.000000001 + 1e-9;
    return x;
}

static volatile double sink;

static int usage(int rank) {
    if (rank == 0)
        fprintf(stderr, "usage: coll_bench allreduce|bcast|gsum|compute-gsum BYTES ITERS "
                        "WARMUP COMPUTE_ITERS\n");
    MPI_Finalize();
    return 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm W = MPI_COMM_WORLD;
    int r, p;
    MPI_Comm_rank(W, &r);
    MPI_Comm_size(W, &p);
    if (argc != 6) return usage(r);
    const char *op = argv[1];
    long bytes = atol(argv[2]), iters = atol(argv[3]), warmup = atol(argv[4]),
         compute = atol(argv[5]);
    int is_bcast = strcmp(op, "bcast") == 0, is_compute = strcmp(op, "compute-gsum") == 0;
    if ((!is_bcast && !is_compute && strcmp(op, "allreduce") != 0 && strcmp(op, "gsum") != 0) ||
        bytes < 8 || bytes % 8 != 0 || iters < 1 || warmup < 0 || compute < 0)
        return usage(r);
    int count = (int)(bytes / 8);
    double *buf = calloc((size_t)count, sizeof(double));
    double *times = malloc(sizeof(double) * (size_t)iters);
    double *worst = malloc(sizeof(double) * (size_t)iters);
    if (!buf || !times || !worst) {
        fprintf(stderr, "coll_bench: out of memory\n");
        MPI_Abort(W, 1);
    }
    double x = 0.5;

    /* Zeros sum to zeros: the buffer stays the same size of number on every call. */
    for (long i = 0; i < warmup; i++) {
        if (is_bcast)
            MPI_Bcast(buf, count, MPI_DOUBLE, 0, W);
        else
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, W);
    }
    MPI_Barrier(W);
    double start = now_s();
    for (long i = 0; i < iters; i++) {
        double t0 = now_s();
        if (is_compute) x = spin(compute, x);
        if (is_bcast)
            MPI_Bcast(buf, count, MPI_DOUBLE, 0, W);
        else
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, W);
        times[i] = (now_s() - t0) * 1e6;
    }
    double total = now_s() - start, total_max = 0;
    sink = x;

    MPI_Reduce(times, worst, (int)iters, MPI_DOUBLE, MPI_MAX, 0, W);
    MPI_Reduce(&total, &total_max, 1, MPI_DOUBLE, MPI_MAX, 0, W);

    /* One checked call: the timed calls must have been real collectives. */
    int bad = 0;
    if (is_bcast) {
        for (int i = 0; i < count; i++) buf[i] = r == 0 ? (double)(i % 1000) : -1.0;
        MPI_Bcast(buf, count, MPI_DOUBLE, 0, W);
        for (int i = 0; i < count; i++) bad |= buf[i] != (double)(i % 1000);
    } else {
        for (int i = 0; i < count; i++) buf[i] = (double)(r + 1);
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, W);
        for (int i = 0; i < count; i++) bad |= buf[i] != (double)p * (p + 1) / 2;
    }
    int any_bad = 0;
    MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_LOR, 0, W);

    if (r == 0) {
        if (any_bad) {
            fprintf(stderr, "coll_bench: %s of %ld bytes gave a wrong result\n", op, bytes);
            MPI_Abort(W, 1);
        }
        printf("RESULT {\"iters\":%ld,\"total_s\":%.9f,\"times_us\":[", iters, total_max);
        for (long i = 0; i < iters; i++) printf(i ? ",%.3f" : "%.3f", worst[i]);
        printf("]}\n");
        fflush(stdout);
    }
    free(buf);
    free(times);
    free(worst);
    MPI_Finalize();
    return 0;
}
