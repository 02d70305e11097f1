/* The reference for `vargr-bench coll-check`: the same collectives on the same inputs with
 * MPI, printing the same lines (rank, name, values; floats as bit patterns). The test
 * `collectives_equal_open_mpi` runs both and compares the sorted output. Keep the two
 * in step: crates/vargr-bench/src/coll_check.rs is the other half. */
#include <inttypes.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 5

static int in_i32(int r, int i) { return (r * 7 + i * 3) % 11 - 5; }
static int pr_i32(int r, int i) {
    switch ((r + i) % 15) {
    case 0: case 3: case 6: case 9: case 12: return 2;
    case 5: case 10: return -1;
    default: return 1;
    }
}
static int bits_i32(int r, int i) {
    return (int32_t)((uint32_t)(r + 1) * (uint32_t)(i + 3) * 2654435761u);
}
static int bool_i32(int r, int i) { return (r * i + r) % 4 != 0; }
static double in_f64(int r, int i) { return (double)((r * 5 + i * 2) % 9) * 0.25 - 1.0; }
static double pr_f64(int r, int i) {
    static const double v[6] = {1.0, 2.0, 0.5, -1.0, 1.0, 1.0};
    return v[(r + 2 * i) % 6];
}
static uint8_t in_u8(int r, int i) { return (uint8_t)(r * 37 + i * 11); }
static uint64_t in_u64(int r, int i) { return (uint64_t)r * 1000000007u + (uint64_t)i; }
static float in_f32(int r, int i) { return (float)((r * 3 + i) % 7) * 0.5f; }

static char *out;
static size_t out_len, out_cap;

static void put(const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(out + out_len, out_cap - out_len, fmt, ap);
        va_end(ap);
        if (out_len + (size_t)n < out_cap) { out_len += (size_t)n; return; }
        out_cap = out_cap * 2 + (size_t)n + 64;
        out = realloc(out, out_cap);
    }
}

static void line_i32(int r, const char *name, const int *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) put(" %d", v[i]);
    put("\n");
}
static void line_i64(int r, const char *name, const int64_t *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) put(" %" PRId64, v[i]);
    put("\n");
}
static void line_u64(int r, const char *name, const uint64_t *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) put(" %" PRIu64, v[i]);
    put("\n");
}
static void line_u8(int r, const char *name, const uint8_t *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) put(" %u", (unsigned)v[i]);
    put("\n");
}
static void line_f64(int r, const char *name, const double *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) { uint64_t b; memcpy(&b, &v[i], 8); put(" %016" PRIx64, b); }
    put("\n");
}
static void line_f32(int r, const char *name, const float *v, int n) {
    put("%d %s:", r, name);
    for (int i = 0; i < n; i++) { uint32_t b; memcpy(&b, &v[i], 4); put(" %08" PRIx32, b); }
    put("\n");
}

#define ALLRED_I32(name, op, f) do { int v[N]; for (int i = 0; i < N; i++) v[i] = f(r, i); \
    MPI_Allreduce(MPI_IN_PLACE, v, N, MPI_INT, op, W); line_i32(r, name, v, N); } while (0)
#define ALLRED_F64(name, op, f) do { double v[N]; for (int i = 0; i < N; i++) v[i] = f(r, i); \
    MPI_Allreduce(MPI_IN_PLACE, v, N, MPI_DOUBLE, op, W); line_f64(r, name, v, N); } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm W = MPI_COMM_WORLD;
    int r, p;
    MPI_Comm_rank(W, &r);
    MPI_Comm_size(W, &p);
    out_cap = 4096;
    out = malloc(out_cap);

    ALLRED_I32("allreduce sum i32", MPI_SUM, in_i32);
    ALLRED_I32("allreduce min i32", MPI_MIN, in_i32);
    ALLRED_I32("allreduce max i32", MPI_MAX, in_i32);
    ALLRED_I32("allreduce prod i32", MPI_PROD, pr_i32);
    ALLRED_I32("allreduce band i32", MPI_BAND, bits_i32);
    ALLRED_I32("allreduce bor i32", MPI_BOR, bits_i32);
    ALLRED_I32("allreduce land i32", MPI_LAND, bool_i32);
    ALLRED_I32("allreduce lor i32", MPI_LOR, bool_i32);
    ALLRED_F64("allreduce sum f64", MPI_SUM, in_f64);
    ALLRED_F64("allreduce prod f64", MPI_PROD, pr_f64);
    ALLRED_F64("allreduce min f64", MPI_MIN, in_f64);
    ALLRED_F64("allreduce max f64", MPI_MAX, in_f64);
    {
        uint8_t v[N];
        for (int i = 0; i < N; i++) v[i] = in_u8(r, i);
        MPI_Allreduce(MPI_IN_PLACE, v, N, MPI_UINT8_T, MPI_SUM, W);
        line_u8(r, "allreduce sum u8", v, N);
        uint64_t w[N];
        for (int i = 0; i < N; i++) w[i] = in_u64(r, i);
        MPI_Allreduce(MPI_IN_PLACE, w, N, MPI_UINT64_T, MPI_SUM, W);
        line_u64(r, "allreduce sum u64", w, N);
        float f[N];
        for (int i = 0; i < N; i++) f[i] = in_f32(r, i);
        MPI_Allreduce(MPI_IN_PLACE, f, N, MPI_FLOAT, MPI_MAX, W);
        line_f32(r, "allreduce max f32", f, N);
    }
    {
        int s[N], v[N];
        for (int i = 0; i < N; i++) s[i] = in_i32(r, i);
        MPI_Reduce(s, v, N, MPI_INT, MPI_SUM, p - 1, W);
        if (r == p - 1) line_i32(r, "reduce sum i32", v, N);
    }
    {
        int root = 1 % p;
        int64_t b[N];
        for (int i = 0; i < N; i++) b[i] = r == root ? r * 100 + i : 0;
        MPI_Bcast(b, N, MPI_INT64_T, root, W);
        line_i64(r, "bcast i64", b, N);
    }
    int *all = malloc(sizeof(int) * (size_t)(8 * p + 64));
    {
        int s[2] = {r * 10, r * 10 + 1};
        for (int i = 0; i < 2 * p; i++) all[i] = -1;
        MPI_Gather(s, 2, MPI_INT, all, 2, MPI_INT, 0, W);
        if (r == 0) line_i32(r, "gather i32", all, 2 * p);
        int *src = malloc(sizeof(int) * (size_t)(2 * p));
        for (int j = 0; j < 2 * p; j++) src[j] = j * 3 + 1;
        int mine[2];
        MPI_Scatter(src, 2, MPI_INT, mine, 2, MPI_INT, p - 1, W);
        line_i32(r, "scatter i32", mine, 2);
        free(src);
        int s2[2] = {r, r * r};
        MPI_Allgather(s2, 2, MPI_INT, all, 2, MPI_INT, W);
        line_i32(r, "allgather i32", all, 2 * p);
        int *send = malloc(sizeof(int) * (size_t)p);
        for (int j = 0; j < p; j++) send[j] = r * 100 + j;
        MPI_Alltoall(send, 1, MPI_INT, all, 1, MPI_INT, W);
        line_i32(r, "alltoall i32", all, p);
        free(send);
    }
    {
        int *counts = malloc(sizeof(int) * (size_t)p), *gd = malloc(sizeof(int) * (size_t)p),
            *pd = malloc(sizeof(int) * (size_t)p);
        int gtotal = 0, ptotal = 0;
        for (int j = 0; j < p; j++) {
            counts[j] = j % 3 + 1;
            gd[j] = gtotal; gtotal += counts[j] + 1;
            pd[j] = ptotal; ptotal += counts[j];
        }
        int send[3];
        for (int k = 0; k < counts[r]; k++) send[k] = r * 10 + k;
        for (int i = 0; i < gtotal; i++) all[i] = -1;
        MPI_Gatherv(send, counts[r], MPI_INT, all, counts, gd, MPI_INT, 0, W);
        if (r == 0) line_i32(r, "gatherv i32", all, gtotal);
        int *src = malloc(sizeof(int) * (size_t)ptotal);
        for (int j = 0; j < ptotal; j++) src[j] = j * 2;
        int mine[3];
        MPI_Scatterv(src, counts, pd, MPI_INT, mine, counts[r], MPI_INT, 0, W);
        line_i32(r, "scatterv i32", mine, counts[r]);
        free(src);
        for (int i = 0; i < gtotal; i++) all[i] = -1;
        MPI_Allgatherv(send, counts[r], MPI_INT, all, counts, gd, MPI_INT, W);
        line_i32(r, "allgatherv i32", all, gtotal);

        int *sc = malloc(sizeof(int) * (size_t)p), *sd = malloc(sizeof(int) * (size_t)p),
            *rc = malloc(sizeof(int) * (size_t)p), *rd = malloc(sizeof(int) * (size_t)p);
        int st = 0, rt = 0;
        for (int j = 0; j < p; j++) {
            sc[j] = (r + j) % 3; sd[j] = st; st += sc[j];
            rc[j] = (j + r) % 3; rd[j] = rt; rt += rc[j];
        }
        int *sb = malloc(sizeof(int) * (size_t)(st + 1)), *rb = malloc(sizeof(int) * (size_t)(rt + 1));
        for (int j = 0, at = 0; j < p; j++)
            for (int k = 0; k < sc[j]; k++) sb[at++] = r * 1000 + j * 10 + k;
        for (int i = 0; i < rt; i++) rb[i] = -1;
        MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, W);
        line_i32(r, "alltoallv i32", rb, rt);
        free(sb); free(rb); free(sc); free(sd); free(rc); free(rd);
        free(counts); free(gd); free(pd);
    }
    MPI_Barrier(W);
    {
        MPI_Comm sub;
        MPI_Comm_split(W, r % 2, -r, &sub);
        int sr, sp;
        MPI_Comm_rank(sub, &sr);
        MPI_Comm_size(sub, &sp);
        int64_t s = r;
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT64_T, MPI_SUM, sub);
        int64_t v[3] = {sr, sp, s};
        line_i64(r, "split", v, 3);
        MPI_Comm_free(&sub);
    }
    {
        int s[2] = {r * 3 + 1, r * 3 + 2}, got[2];
        MPI_Sendrecv(s, 2, MPI_INT, (r + 1) % p, 5, got, 2, MPI_INT, (r + p - 1) % p, 5, W,
                     MPI_STATUS_IGNORE);
        line_i32(r, "ring i32", got, 2);
    }
    free(all);

    /* Rank 0 prints everything, so lines of different ranks never interleave. */
    int len = (int)out_len, *lens = NULL, *displs = NULL;
    char *text = NULL;
    if (r == 0) { lens = malloc(sizeof(int) * (size_t)p); displs = malloc(sizeof(int) * (size_t)p); }
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, W);
    int total = 0;
    if (r == 0) {
        for (int j = 0; j < p; j++) { displs[j] = total; total += lens[j]; }
        text = malloc((size_t)total + 1);
    }
    MPI_Gatherv(out, len, MPI_CHAR, text, lens, displs, MPI_CHAR, 0, W);
    if (r == 0) { fwrite(text, 1, (size_t)total, stdout); fflush(stdout); }
    free(out); free(text); free(lens); free(displs);
    MPI_Finalize();
    return 0;
}
