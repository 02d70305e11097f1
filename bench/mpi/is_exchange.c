/* An integer sort's exchange, like NAS IS (the seed's IS benchmark for CoMPI): every rank
 * holds random keys, counts them into buckets, the buckets are shared out so that each
 * rank gets a contiguous range of keys, and the keys travel with MPI_Alltoall (counts)
 * and MPI_Alltoallv (keys). Keys are the mean of four uniform numbers, as in IS, so the
 * ranges near the middle are busier.
 *
 *   is_exchange [KEYS_LOG2 [MAX_KEY_LOG2 [ITERATIONS]]]    (default 22 19 5: 4 Mi keys)
 *
 * Rank 0 prints one line: the slowest rank's mean time per iteration, whether the keys
 * came out sorted across the ranks, and a checksum of the sorted keys, which must be
 * the same with and without anything between the program and its MPI. */

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS_LOG2 10

static uint64_t next_random(uint64_t *s) {
    /* SplitMix64: the same keys on every MPI. */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int fail(const char *what) {
    fprintf(stderr, "is_exchange: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int keys_log2 = argc > 1 ? atoi(argv[1]) : 22;
    int max_log2 = argc > 2 ? atoi(argv[2]) : 19;
    int iters = argc > 3 ? atoi(argv[3]) : 5;
    if (keys_log2 < 10 || keys_log2 > 30 || max_log2 < BUCKETS_LOG2 || max_log2 > 30 ||
        iters < 1) {
        return fail("usage: is_exchange [KEYS_LOG2 [MAX_KEY_LOG2 [ITERATIONS]]]");
    }
    int nkeys = (int)((1LL << keys_log2) / size);
    int max_key = 1 << max_log2;
    int buckets = 1 << BUCKETS_LOG2;
    int shift = max_log2 - BUCKETS_LOG2;

    int32_t *keys = malloc(sizeof(int32_t) * (size_t)nkeys);
    int32_t *sorted_out = malloc(sizeof(int32_t) * (size_t)nkeys);
    /* A rank may receive more than its share: room for all of them. */
    size_t cap = (size_t)nkeys * (size_t)size;
    int32_t *got = malloc(sizeof(int32_t) * cap);
    int *bucket_count = calloc((size_t)buckets, sizeof(int));
    int *bucket_total = calloc((size_t)buckets, sizeof(int));
    int *bucket_owner = calloc((size_t)buckets, sizeof(int));
    int *scount = calloc((size_t)size, sizeof(int)), *sdispl = calloc((size_t)size, sizeof(int));
    int *rcount = calloc((size_t)size, sizeof(int)), *rdispl = calloc((size_t)size, sizeof(int));
    int *fill = calloc((size_t)size, sizeof(int));
    int *histogram = calloc((size_t)max_key, sizeof(int));
    if (!keys || !sorted_out || !got || !bucket_count || !bucket_total || !bucket_owner ||
        !scount || !sdispl || !rcount || !rdispl || !fill || !histogram) {
        return fail("out of memory");
    }
    uint64_t seed = 314159265ULL + (uint64_t)rank * 0x100000001ULL;
    for (int i = 0; i < nkeys; i++) {
        uint64_t sum = 0;
        for (int j = 0; j < 4; j++) {
            sum += next_random(&seed) >> (64 - max_log2);
        }
        keys[i] = (int32_t)(sum / 4);
    }

    int received = 0, lo_key = 0, hi_key = 0;
    double slowest_total = 0;
    for (int it = 0; it <= iters; it++) {
        /* Iteration 0 warms up and is not timed. */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        /* As IS does, two keys change every iteration. */
        keys[it % nkeys] = it;
        keys[(it + iters) % nkeys] = max_key - 1 - it;
        memset(bucket_count, 0, sizeof(int) * (size_t)buckets);
        for (int i = 0; i < nkeys; i++) {
            bucket_count[keys[i] >> shift]++;
        }
        MPI_Allreduce(bucket_count, bucket_total, buckets, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        /* Contiguous buckets to each rank, about an equal share of keys each. */
        long long total = 0, share = (1LL << keys_log2) / size, acc = 0;
        int owner = 0;
        for (int b = 0; b < buckets; b++) {
            bucket_owner[b] = owner;
            acc += bucket_total[b];
            total += bucket_total[b];
            if (acc >= share * (owner + 1) && owner < size - 1) {
                owner++;
            }
        }
        memset(scount, 0, sizeof(int) * (size_t)size);
        for (int b = 0; b < buckets; b++) {
            scount[bucket_owner[b]] += bucket_count[b];
        }
        for (int r = 0, d = 0; r < size; r++) {
            sdispl[r] = d;
            d += scount[r];
            fill[r] = sdispl[r];
        }
        for (int i = 0; i < nkeys; i++) {
            sorted_out[fill[bucket_owner[keys[i] >> shift]]++] = keys[i];
        }
        MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
        received = 0;
        for (int r = 0; r < size; r++) {
            rdispl[r] = received;
            received += rcount[r];
        }
        if ((size_t)received > cap) {
            return fail("more keys arrived than exist");
        }
        MPI_Alltoallv(sorted_out, scount, sdispl, MPI_INT32_T, got, rcount, rdispl, MPI_INT32_T,
                      MPI_COMM_WORLD);
        /* The local sort: counting, over this rank's buckets. */
        lo_key = max_key;
        hi_key = -1;
        for (int b = 0; b < buckets; b++) {
            if (bucket_owner[b] == rank) {
                if (lo_key == max_key) {
                    lo_key = b << shift;
                }
                hi_key = ((b + 1) << shift) - 1;
            }
        }
        for (int i = 0; i < received; i++) {
            if (got[i] < lo_key || got[i] > hi_key) {
                return fail("a key arrived at the wrong rank");
            }
            histogram[got[i]]++;
        }
        for (int k = lo_key, pos = 0; k <= hi_key; k++) {
            for (int c = histogram[k]; c > 0; c--) {
                got[pos++] = k;
            }
            histogram[k] = 0;
        }
        double t = MPI_Wtime() - t0, slowest = 0;
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (it > 0) {
            slowest_total += slowest;
        }
        if (total != (1LL << keys_log2) / size * size) {
            return fail("the buckets lost keys");
        }
    }

    /* Sorted across ranks: each rank's last key is at most the next rank's first. */
    int first = received > 0 ? got[0] : -1, last = received > 0 ? got[received - 1] : -1;
    int before = -1, ok = 1;
    MPI_Sendrecv(&last, 1, MPI_INT, rank + 1 < size ? rank + 1 : MPI_PROC_NULL, 7, &before, 1,
                 MPI_INT, rank > 0 ? rank - 1 : MPI_PROC_NULL, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (int i = 1; i < received; i++) {
        ok &= got[i - 1] <= got[i];
    }
    ok &= received == 0 || before <= first;
    long long n = received, all_n = 0;
    unsigned long long sum = 0, all_sum = 0;
    for (int i = 0; i < received; i++) {
        sum += (unsigned long long)got[i] * (unsigned long long)(i + 1);
    }
    int all_ok = 0;
    MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&n, &all_n, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&sum, &all_sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int good = all_ok && all_n == (1LL << keys_log2) / size * size;
        printf("IS ranks=%d keys=%lld max_key=%d iterations=%d seconds_per_iteration=%.6f "
               "verification=%s checksum=%llu\n",
               size, all_n, max_key, iters, slowest_total / iters,
               good ? "SUCCESSFUL" : "FAILED", all_sum);
    }
    free(keys);
    free(sorted_out);
    free(got);
    free(bucket_count);
    free(bucket_total);
    free(bucket_owner);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    free(fill);
    free(histogram);
    MPI_Finalize();
    return 0;
}
