/*
 * Every rank allreduces ITERS times; rank SLOW sleeps 5 ms before each call, so traces,
 * monitors and vargr top must name it (run by tests/examples.rs under vargr run). At
 * 2 ms, a run on a machine loaded with other builds named another rank.
 * Usage: slow_rank SLOW ITERS
 */
#define _POSIX_C_SOURCE 199309L
#include <vargr.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int slow = argc > 1 ? atoi(argv[1]) : 1, iters = argc > 2 ? atoi(argv[2]) : 300;
    vargr_comm *world = NULL;
    int rank = 0;
    if (vargr_world_join(&world) != VARGR_OK || vargr_comm_rank(world, &rank) != VARGR_OK) {
        fprintf(stderr, "join: %s\n", vargr_last_error());
        return 1;
    }
    struct timespec nap = {0, 5000000};
    for (int i = 0; i < iters; i++) {
        if (rank == slow) nanosleep(&nap, NULL);
        double x = i;
        if (vargr_comm_allreduce(world, &x, 1, VARGR_DOUBLE, VARGR_OP_SUM) != VARGR_OK) {
            fprintf(stderr, "allreduce: %s\n", vargr_last_error());
            return 1;
        }
    }
    return vargr_world_finalize(world) == VARGR_OK ? 0 : 1;
}
