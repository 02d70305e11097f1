/*
 * Collective file I/O from C, run by tests/examples.rs under `vargr run -n 4 --sites 2`
 * with a file path as argument: the ranks, a 2x2 grid, each write their block of an
 * 8x12 array of doubles through a subarray view (ROMIO's pattern, then LA-Two-Phase's),
 * read it back collectively and independently, and check the whole file from rank 0.
 * Errors: an impossible view, overlapping views and a missing directory fail on every
 * rank. Each rank prints "rank R io OK" or the failed checks.
 */
#include <vargr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
static int me;

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            failed++;                                                                    \
            printf("rank %d FAILED %s:%d: %s (last error: %s)\n", me, __FILE__, __LINE__, \
                   #cond, vargr_last_error());                                           \
        }                                                                                \
    } while (0)

#define OK(call) EXPECT((call) == VARGR_OK)

enum { ROWS = 8, COLS = 12 };

static double value(int row, int col) { return row * COLS + col + 0.5; }

int main(int argc, char **argv)
{
    vargr_comm *world = NULL;
    int size = 0;
    if (argc != 3 || vargr_world_join(&world) != VARGR_OK) {
        fprintf(stderr, "usage: io_test FILE MISSING_DIR_FILE (under vargr run): %s\n",
                vargr_last_error());
        return 1;
    }
    OK(vargr_comm_rank(world, &me));
    OK(vargr_comm_size(world, &size));
    if (size != 4) {
        fprintf(stderr, "run with 4 ranks\n");
        return 1;
    }
    /* Node 0 (ranks 0, 1) holds the left columns, so every file domain needs both nodes. */
    int pr = me % 2, pc = me / 2;
    uint64_t sizes[2] = {ROWS, COLS}, sub[2] = {ROWS / 2, COLS / 2};
    uint64_t starts[2] = {(uint64_t)pr * ROWS / 2, (uint64_t)pc * COLS / 2};
    double block[ROWS / 2][COLS / 2], back[ROWS / 2][COLS / 2];
    for (int r = 0; r < ROWS / 2; r++)
        for (int c = 0; c < COLS / 2; c++)
            block[r][c] = value((int)starts[0] + r, (int)starts[1] + c);

    for (int agg = VARGR_AGG_TWO_PHASE; agg <= VARGR_AGG_LOCALITY_BLOCKS; agg++) {
        vargr_file_hints hints = {0};
        hints.aggregation = agg;
        hints.compress = 1;
        hints.datatype = VARGR_DOUBLE;
        hints.cb_buffer_size = 100; /* several rounds per domain */
        vargr_file *f = NULL;
        OK(vargr_file_open(world, argv[1],
                           VARGR_MODE_READ | VARGR_MODE_WRITE | VARGR_MODE_CREATE | VARGR_MODE_TRUNCATE,
                           &hints, &f));
        OK(vargr_file_set_view_subarray(f, 0, 2, sizes, sub, starts, VARGR_ORDER_C, 8));
        OK(vargr_file_write_all(f, block, sizeof block));
        vargr_io_stats st;
        OK(vargr_file_stats(f, &st));
        EXPECT(st.aggregators == 2 && st.rounds >= 2);
        uint64_t between = st.bytes_between_nodes;
        OK(vargr_comm_allreduce(world, &between, 1, VARGR_UINT64, VARGR_OP_SUM));
        /* Two nodes (sites) of two ranks: some data must cross with ROMIO's pattern. */
        EXPECT(agg != VARGR_AGG_TWO_PHASE || between > 0);
        memset(back, 0, sizeof back);
        OK(vargr_file_read_all(f, back, sizeof back));
        EXPECT(memcmp(back, block, sizeof back) == 0);
        /* Independent: the second row of the block is data bytes 48..96 of the view. */
        double row[COLS / 2];
        size_t got = 0;
        OK(vargr_file_read_at(f, 8 * (COLS / 2), row, sizeof row, &got));
        EXPECT(got == sizeof row && memcmp(row, block[1], sizeof row) == 0);
        uint64_t len = 0;
        OK(vargr_file_size(f, &len));
        EXPECT(len == ROWS * COLS * 8);
        OK(vargr_file_close(f));
        if (me == 0) {
            FILE *fp = fopen(argv[1], "rb");
            double all[ROWS][COLS];
            EXPECT(fp && fread(all, sizeof all, 1, fp) == 1);
            if (fp)
                fclose(fp);
            for (int r = 0; r < ROWS; r++)
                for (int c = 0; c < COLS; c++)
                    EXPECT(all[r][c] == value(r, c));
        }
        OK(vargr_comm_barrier(world));
    }

    /* Errors every rank sees. */
    vargr_file *f = NULL;
    OK(vargr_file_open(world, argv[1], VARGR_MODE_READ | VARGR_MODE_WRITE, NULL, &f));
    EXPECT(vargr_file_set_view_vector(f, 0, 2, 16, 8) == VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(vargr_file_open(world, argv[1], 0, NULL, &f) == VARGR_ERR_INVALID_ARGUMENT);
    /* Ranks 1 and 2 both claim bytes 80..88. */
    OK(vargr_file_set_view_vector(f, (uint64_t)me * 40, 1, me == 1 ? 48 : 40, 0));
    double junk[6] = {0};
    EXPECT(vargr_file_write_all(f, junk, me == 1 ? 48 : 40) == VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(vargr_last_error(), "ranks 1 and 2 both write file bytes 80..88") != NULL);
    OK(vargr_file_close(f));
    vargr_file *g = NULL;
    EXPECT(vargr_file_open(world, argv[2], VARGR_MODE_WRITE | VARGR_MODE_CREATE, NULL, &g) ==
           VARGR_ERR_IO);
    EXPECT(g == NULL);

    if (failed == 0)
        printf("rank %d io OK\n", me);
    OK(vargr_world_finalize(world));
    return failed ? 1 : 0;
}
