/* The MPI-IO reference for vargr-io: writes and/or reads one shared file through the
 * views in RUNS_DIR with MPI_File_write_all / MPI_File_read_all, so files vargr writes can
 * be compared byte for byte with the ones ROMIO and OMPIO write, and their times with
 * vargr's. The Rust half (runs file format, data pattern) is crates/vargr-io/src/workload.rs;
 * keep the two in step. The test crates/vargr-io/tests/mpiio_reference.rs runs this.
 *
 * Usage: io_check write|read|both RUNS_DIR FILE [--cb-nodes N] [--cb-buffer BYTES]
 *                 [--elem-bytes E] [--iters K] [--hint KEY=VALUE]...
 *
 * Rank r's view is RUNS_DIR/rank-<r>.runs: "VRGRUNS1", a u64 LE count, then count
 * (offset, length) pairs of u64 LE, in file order and not overlapping.
 *
 * The data is a function of the file offset o only, so any writer makes the same file:
 * with E = 8 (the default) byte o % 8 of the little-endian double v(o/8), where
 * v(i) = (((7 i) mod 1000) * 4096 + (splitmix64(i) >> 52)) / 512: a sawtooth field with
 * 12 bits of noise, exact in binary, compressible only in part as measured data is; with
 * any other E the low byte of (o * 131) >> 3 (u64 arithmetic).
 *
 * Rank 0 prints one JSON line per operation:
 *   {"op":"write","seconds":S,"bytes":B,"ranks":P,"iters":K,"iter":I}
 * (S the slowest rank's time from a barrier, B the bytes of all ranks); read lines add
 * "mismatches":M. Errors and mismatches go to stderr and make the exit status nonzero. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    uint64_t off, len;
} run_t;

static int rank;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "io_check: rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void check(int err, const char *what) {
    if (err != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int n;
        MPI_Error_string(err, s, &n);
        die("%s: %s", what, s);
    }
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The same checks as read_runs_file in workload.rs: size agrees with the count before
 * anything is allocated, runs sorted, not overlapping, no end past 2^64. */
static run_t *read_runs(const char *path, uint64_t *count_out) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("%s: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    unsigned char head[16];
    size_t got = fread(head, 1, 16, f);
    if (got < 8 || memcmp(head, "VRGRUNS1", 8) != 0) die("%s: does not start with VRGRUNS1", path);
    if (got < 16) die("%s: %" PRIu64 " bytes cannot hold the header", path, size);
    uint64_t count = le64(head + 8);
    if (count > (size - 16) / 16 || 16 + 16 * count != size)
        die("%s: %" PRIu64 " bytes cannot hold the header and %" PRIu64 " runs", path, size, count);
    run_t *runs = malloc(count ? count * sizeof *runs : 1);
    unsigned char *raw = malloc(count ? count * 16 : 1);
    if (!runs || !raw) die("%s: out of memory for %" PRIu64 " runs", path, count);
    if (fread(raw, 16, count, f) != count) die("%s: short read", path);
    fclose(f);
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < count; i++) {
        runs[i].off = le64(raw + 16 * i);
        runs[i].len = le64(raw + 16 * i + 8);
        if (runs[i].off + runs[i].len < runs[i].off)
            die("%s: run %" PRIu64 " (offset %" PRIu64 ", %" PRIu64 " bytes) ends past the largest file offset",
                path, i, runs[i].off, runs[i].len);
        if (i > 0 && runs[i].off < prev_end)
            die("%s: run %" PRIu64 " at offset %" PRIu64 " starts before the end of the run before it (%" PRIu64
                "): runs must be in file order and must not overlap",
                path, i, runs[i].off, prev_end);
        prev_end = runs[i].off + runs[i].len;
    }
    free(raw);
    *count_out = count;
    return runs;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static uint8_t pattern_byte(uint64_t o, uint64_t elem_bytes) {
    if (elem_bytes == 8) {
        uint64_t i = o / 8;
        double v = (double)(((i * 7u) % 1000u) * 4096u + (splitmix64(i) >> 52)) / 512.0;
        unsigned char b[8];
        memcpy(b, &v, 8); /* little-endian checked in main */
        return b[o % 8];
    }
    return (uint8_t)((o * 131u) >> 3);
}

/* The file view: one hindexed block per run, runs longer than INT_MAX split; a rank
 * with no data gets a one-byte type it never reaches (it accesses 0 bytes), since some
 * MPI-IO paths divide by the filetype's size. */
static MPI_Datatype make_filetype(const run_t *runs, uint64_t count) {
    const uint64_t piece = 1u << 30;
    uint64_t blocks = 0;
    for (uint64_t i = 0; i < count; i++) blocks += (runs[i].len + piece - 1) / piece;
    if (blocks > INT_MAX) die("%" PRIu64 " blocks are too many for one MPI datatype", blocks);
    int n = blocks ? (int)blocks : 1;
    int *lens = malloc(sizeof *lens * (size_t)n);
    MPI_Aint *disps = malloc(sizeof *disps * (size_t)n);
    if (!lens || !disps) die("out of memory for %d blocks", n);
    if (blocks == 0) {
        lens[0] = 1;
        disps[0] = 0;
    } else {
        int k = 0;
        for (uint64_t i = 0; i < count; i++)
            for (uint64_t at = 0; at < runs[i].len; at += piece) {
                uint64_t len = runs[i].len - at < piece ? runs[i].len - at : piece;
                lens[k] = (int)len;
                disps[k] = (MPI_Aint)(runs[i].off + at);
                k++;
            }
    }
    MPI_Datatype t;
    check(MPI_Type_create_hindexed(n, lens, disps, MPI_BYTE, &t), "MPI_Type_create_hindexed");
    check(MPI_Type_commit(&t), "MPI_Type_commit");
    free(lens);
    free(disps);
    return t;
}

/* The memory side of `bytes` contiguous bytes as (count, type): MPI_BYTE while the count
 * fits an int, else one struct of 1 GiB pieces and the rest. */
static void make_memtype(uint64_t bytes, int *count, MPI_Datatype *type) {
    if (bytes <= INT_MAX) {
        *count = (int)bytes;
        *type = MPI_BYTE;
        return;
    }
    const uint64_t piece = 1u << 30;
    MPI_Datatype gib;
    check(MPI_Type_contiguous((int)piece, MPI_BYTE, &gib), "MPI_Type_contiguous");
    int lens[2] = {(int)(bytes / piece), (int)(bytes % piece)};
    MPI_Aint disps[2] = {0, (MPI_Aint)(bytes / piece * piece)};
    MPI_Datatype types[2] = {gib, MPI_BYTE};
    check(MPI_Type_create_struct(2, lens, disps, types, type), "MPI_Type_create_struct");
    check(MPI_Type_commit(type), "MPI_Type_commit");
    MPI_Type_free(&gib);
    *count = 1;
}

static uint64_t parse_u64(const char *what, const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') die("%s: not a number: '%s'", what, s);
    return (uint64_t)v;
}

static void usage(void) {
    die("usage: io_check write|read|both RUNS_DIR FILE [--cb-nodes N] [--cb-buffer BYTES] "
        "[--elem-bytes E] [--iters K] [--hint KEY=VALUE]...");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    {
        double one = 1.0;
        unsigned char b[8];
        memcpy(b, &one, 8);
        if (b[7] != 0x3f) die("the data pattern is defined little-endian; this host is not");
    }
    if (argc < 4) usage();
    const char *mode = argv[1], *dir = argv[2], *path = argv[3];
    int do_write = !strcmp(mode, "write") || !strcmp(mode, "both");
    int do_read = !strcmp(mode, "read") || !strcmp(mode, "both");
    if (!do_write && !do_read) usage();
    uint64_t elem_bytes = 8, iters = 1;
    MPI_Info info;
    MPI_Info_create(&info);
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--cb-nodes")) {
            parse_u64(a, v);
            MPI_Info_set(info, "cb_nodes", v);
        } else if (!strcmp(a, "--cb-buffer")) {
            parse_u64(a, v);
            MPI_Info_set(info, "cb_buffer_size", v);
        } else if (!strcmp(a, "--elem-bytes")) {
            elem_bytes = parse_u64(a, v);
        } else if (!strcmp(a, "--iters")) {
            iters = parse_u64(a, v);
            if (iters == 0) die("--iters: at least 1");
        } else if (!strcmp(a, "--hint")) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v) die("--hint: KEY=VALUE, not '%s'", v);
            char key[MPI_MAX_INFO_KEY + 1];
            size_t kl = (size_t)(eq - v);
            if (kl > MPI_MAX_INFO_KEY) die("--hint: key too long in '%s'", v);
            memcpy(key, v, kl);
            key[kl] = 0;
            MPI_Info_set(info, key, eq + 1);
        } else {
            usage();
        }
    }

    char runs_path[4096];
    if (snprintf(runs_path, sizeof runs_path, "%s/rank-%d.runs", dir, rank) >= (int)sizeof runs_path)
        die("RUNS_DIR too long");
    uint64_t count;
    run_t *runs = read_runs(runs_path, &count);
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < count; i++) bytes += runs[i].len;
    uint64_t total;
    MPI_Allreduce(&bytes, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Datatype filetype = make_filetype(runs, count);
    int mcount;
    MPI_Datatype mtype;
    make_memtype(bytes, &mcount, &mtype);

    /* The rank's data in view order: the pattern at each run's offsets. */
    unsigned char *data = malloc(bytes ? bytes : 1);
    if (!data) die("out of memory for %" PRIu64 " bytes", bytes);
    {
        uint64_t d = 0;
        for (uint64_t i = 0; i < count; i++)
            for (uint64_t o = runs[i].off; o < runs[i].off + runs[i].len; o++) data[d++] = pattern_byte(o, elem_bytes);
    }
    MPI_File fh;
    MPI_Status st;
    MPI_Count done;
    int failed = 0;

    if (do_write) {
        /* A fresh file, so bytes past this job's views are not left from an earlier one. */
        if (rank == 0) MPI_File_delete(path, MPI_INFO_NULL);
        MPI_Barrier(MPI_COMM_WORLD);
        check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh), "MPI_File_open");
        check(MPI_File_set_view(fh, 0, MPI_BYTE, filetype, "native", info), "MPI_File_set_view");
        for (uint64_t it = 0; it < iters; it++) {
            /* Back to the view's start: the file pointer has moved past the filetype, and
             * the next tile of a hindexed type overlaps the other ranks' runs. */
            check(MPI_File_seek(fh, 0, MPI_SEEK_SET), "MPI_File_seek");
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            check(MPI_File_write_all(fh, data, mcount, mtype, &st), "MPI_File_write_all");
            double t = MPI_Wtime() - t0, tmax;
            /* romio321 leaves the status unset when a rank accesses 0 bytes. */
            check(MPI_Get_elements_x(&st, MPI_BYTE, &done), "MPI_Get_elements_x");
            if (bytes && (uint64_t)done != bytes)
                die("MPI_File_write_all wrote %lld of %" PRIu64 " bytes", (long long)done, bytes);
            MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("{\"op\":\"write\",\"seconds\":%.9f,\"bytes\":%" PRIu64
                       ",\"ranks\":%d,\"iters\":%" PRIu64 ",\"iter\":%" PRIu64 "}\n",
                       tmax, total, nranks, iters, it);
        }
        check(MPI_File_close(&fh), "MPI_File_close");
    }

    if (do_read) {
        /* Closing after the writes and opening again is what MPI's consistency rules ask
         * for before other ranks read the bytes. */
        unsigned char *got = malloc(bytes ? bytes : 1);
        if (!got) die("out of memory for %" PRIu64 " bytes", bytes);
        check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, info, &fh), "MPI_File_open");
        check(MPI_File_set_view(fh, 0, MPI_BYTE, filetype, "native", info), "MPI_File_set_view");
        for (uint64_t it = 0; it < iters; it++) {
            /* Every byte starts wrong, so a byte the read skips is caught. */
            for (uint64_t d = 0; d < bytes; d++) got[d] = (unsigned char)~data[d];
            check(MPI_File_seek(fh, 0, MPI_SEEK_SET), "MPI_File_seek");
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            check(MPI_File_read_all(fh, got, mcount, mtype, &st), "MPI_File_read_all");
            double t = MPI_Wtime() - t0, tmax;
            check(MPI_Get_elements_x(&st, MPI_BYTE, &done), "MPI_Get_elements_x");
            uint64_t bad = 0, first = UINT64_MAX, d = 0;
            for (uint64_t i = 0; i < count; i++)
                for (uint64_t o = runs[i].off; o < runs[i].off + runs[i].len; o++, d++)
                    if (got[d] != data[d]) {
                        if (!bad) first = o;
                        bad++;
                    }
            if (bytes && (uint64_t)done != bytes && !bad) {
                /* A short read that happened to match: count the bytes not read. */
                bad = (uint64_t)done < bytes ? bytes - (uint64_t)done : 1;
            }
            uint64_t bad_all, first_all;
            MPI_Allreduce(&bad, &bad_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(&first, &first_all, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
            MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                printf("{\"op\":\"read\",\"seconds\":%.9f,\"bytes\":%" PRIu64 ",\"ranks\":%d,\"iters\":%" PRIu64
                       ",\"iter\":%" PRIu64 ",\"mismatches\":%" PRIu64 "}\n",
                       tmax, total, nranks, iters, it, bad_all);
                if (bad_all && first_all != UINT64_MAX)
                    fprintf(stderr,
                            "io_check: read %" PRIu64 ": %" PRIu64
                            " bytes differ from the pattern, the first at file offset %" PRIu64 "\n",
                            it, bad_all, first_all);
                else if (bad_all)
                    fprintf(stderr, "io_check: read %" PRIu64 ": %" PRIu64 " bytes were not read\n", it, bad_all);
            }
            if (bad_all) failed = 1;
        }
        check(MPI_File_close(&fh), "MPI_File_close");
        free(got);
    }

    fflush(stdout);
    MPI_Type_free(&filetype);
    if (mtype != MPI_BYTE) MPI_Type_free(&mtype);
    MPI_Info_free(&info);
    free(data);
    free(runs);
    MPI_Finalize();
    return failed;
}
