/*
 * Point-to-point from C as MPI programs write it, run by tests/examples.rs under
 * `vargr run -n 4`: a master takes work results from any source with waitany over
 * posted receives, any-tag receives keep each sender's order, probe sizes a message
 * before it is received, test polls, cancel withdraws, and a too-small buffer is a
 * truncation error. Each rank prints "rank R p2p OK" or the failed checks.
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

int main(void)
{
    vargr_comm *world = NULL;
    int size = 0;
    if (vargr_world_join(&world) != VARGR_OK) {
        fprintf(stderr, "join: %s\n", vargr_last_error());
        return 1;
    }
    OK(vargr_comm_rank(world, &me));
    OK(vargr_comm_size(world, &size));

    /* Workers send (rank, i) three times with falling tags; the master posts one
     * receive per worker from any source and completes them with waitany. */
    if (me == 0) {
        int64_t got[16][2];
        vargr_request *reqs[16];
        int next[16] = {0};
        for (int k = 0; k < 3; k++) {
            for (int w = 0; w < size - 1; w++) {
                OK(vargr_comm_irecv(world, VARGR_ANY_SOURCE, VARGR_ANY_TAG, got[w], 2,
                                    VARGR_INT64, &reqs[w]));
            }
            for (int left = size - 1; left > 0; left--) {
                size_t i = 99;
                vargr_recv_status st;
                OK(vargr_request_waitany(reqs, (size_t)(size - 1), &i, &st));
                EXPECT(i < (size_t)(size - 1) && reqs[i] == NULL);
                EXPECT(st.count == 2 && st.bytes == 16);
                EXPECT(st.source >= 1 && st.source < size && got[i][0] == st.source);
                EXPECT(got[i][1] == next[st.source] && st.tag == (uint64_t)(10 - next[st.source]));
                next[st.source]++;
            }
        }
        size_t none = 7;
        OK(vargr_request_waitany(reqs, (size_t)(size - 1), &none, NULL));
        EXPECT(none == (size_t)(size - 1));
    } else {
        for (int64_t i = 0; i < 3; i++) {
            int64_t msg[2] = {me, i};
            vargr_request *r = NULL;
            OK(vargr_comm_isend(world, 0, (uint64_t)(10 - i), msg, 2, VARGR_INT64, &r));
            OK(vargr_request_wait(&r, NULL));
            EXPECT(r == NULL);
        }
    }
    OK(vargr_comm_barrier(world));

    /* A ring: probe sizes the message, then it is received into a buffer that fits. */
    int right = (me + 1) % size, left = (me + size - 1) % size;
    double out[40];
    for (int i = 0; i < 40; i++) out[i] = me + i * 0.5;
    OK(vargr_comm_send(world, right, 5, out, (size_t)(10 + me), VARGR_DOUBLE));
    vargr_recv_status st;
    OK(vargr_comm_probe(world, VARGR_ANY_SOURCE, 5, VARGR_DOUBLE, &st));
    EXPECT(st.source == left && st.count == (size_t)(10 + left) && st.tag == 5);
    double *in = malloc(st.count * sizeof(double));
    OK(vargr_comm_recv_any(world, st.source, VARGR_ANY_TAG, in, st.count, VARGR_DOUBLE, &st));
    EXPECT(st.count == (size_t)(10 + left) && in[3] == left + 1.5);
    free(in);

    /* test polls a receive until its message comes; cancel withdraws one that has none. */
    int32_t v = -1, flag = 0;
    vargr_request *r = NULL;
    OK(vargr_comm_irecv(world, left, 6, &v, 1, VARGR_INT32, &r));
    OK(vargr_request_test(&r, &flag, NULL));
    EXPECT(flag == 0 && r != NULL);
    OK(vargr_comm_barrier(world)); /* nobody has sent tag 6 before every rank tested */
    int32_t mine = 100 + me;
    OK(vargr_comm_send(world, right, 6, &mine, 1, VARGR_INT32));
    while (!flag) OK(vargr_request_test(&r, &flag, &st));
    EXPECT(r == NULL && v == 100 + left && st.source == left);
    vargr_request *never = NULL;
    int cancelled = 0;
    OK(vargr_comm_irecv(world, VARGR_ANY_SOURCE, 999, &v, 1, VARGR_INT32, &never));
    OK(vargr_request_cancel(&never, &cancelled));
    EXPECT(cancelled == 1 && never == NULL);
    int iflag = 1;
    OK(vargr_comm_iprobe(world, VARGR_ANY_SOURCE, 999, VARGR_INT32, &iflag, &st));
    EXPECT(iflag == 0);

    /* Truncation is an error naming the sizes; the bad arguments are refused. */
    int64_t big[4] = {1, 2, 3, 4};
    OK(vargr_comm_send(world, right, 7, big, 4, VARGR_INT64));
    int64_t small[2];
    EXPECT(vargr_comm_recv_any(world, left, 7, small, 2, VARGR_INT64, NULL) ==
           VARGR_ERR_PRECONDITION);
    EXPECT(strstr(vargr_last_error(), "32 bytes") != NULL);
    EXPECT(vargr_comm_irecv(world, size, 1, small, 2, VARGR_INT64, &r) ==
           VARGR_ERR_INVALID_ARGUMENT);
    EXPECT(r == NULL);
    EXPECT(vargr_request_wait(NULL, NULL) == VARGR_ERR_INVALID_ARGUMENT);

    OK(vargr_comm_barrier(world));
    OK(vargr_world_finalize(world));
    if (failed) return 1;
    printf("rank %d p2p OK\n", me);
    return 0;
}
