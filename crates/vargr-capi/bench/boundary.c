/*
 * What one call across the C boundary costs: a tight loop of a trivial vargr call
 * (vargr_packet_tag on a packet; vargr_comm_rank too when run as a rank), against the
 * same loop calling an equivalent function compiled into this program, not inlined.
 *
 * Build (release library; the workspace's fat LTO takes minutes):
 *   cargo build --release -p vargr-capi
 *   cc -O2 -Icrates/vargr-capi/include crates/vargr-capi/bench/boundary.c \
 *      -Ltarget/release -lvargr -Wl,-rpath,$PWD/target/release -o target/boundary
 * Run:
 *   target/boundary [ITERS]                              packet accessor only
 *   target/release/vargr run -n 1 -- target/boundary     also vargr_comm_rank
 * Prints one JSON object: ns_per_call (vargr_packet_tag through libvargr),
 * local_ns_per_call (the same work in this program), overhead_ns (their difference),
 * comm_rank_ns_per_call (null outside a job). Each figure is the best of 5 runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <vargr.h>

struct local_packet {
    uint32_t stream;
    int32_t tag;
};

/* The same work as vargr_packet_tag: check both pointers, store the tag. */
__attribute__((noinline)) static int local_tag(const struct local_packet *p, int32_t *tag)
{
    __asm__ volatile("" ::: "memory"); /* keep the call from being folded away */
    if (!p || !tag)
        return 1;
    *tag = p->tag;
    return 0;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#define BEST_OF(result, iters, body)                                                     \
    do {                                                                                 \
        int rep_;                                                                        \
        long i_;                                                                         \
        result = 1e300;                                                                  \
        for (rep_ = 0; rep_ < 5; rep_++) {                                               \
            double t0_ = now_ns(), dt_;                                                  \
            for (i_ = 0; i_ < (iters); i_++) {                                           \
                body;                                                                    \
            }                                                                            \
            dt_ = (now_ns() - t0_) / (iters);                                            \
            if (dt_ < result)                                                            \
                result = dt_;                                                            \
        }                                                                                \
    } while (0)

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 20000000L;
    vargr_packet *p;
    struct local_packet lp = {1, 7};
    int32_t tag;
    volatile int64_t sink = 0;
    double lib, local, rank_ns = -1;
    vargr_comm *world = NULL;

    if (iters <= 0) {
        fprintf(stderr, "usage: %s [ITERS > 0]\n", argv[0]);
        return 2;
    }
    if (vargr_packet_create(&p, 1, 7, "%d", 42) != VARGR_OK) {
        fprintf(stderr, "vargr_packet_create: %s\n", vargr_last_error());
        return 1;
    }
    BEST_OF(lib, iters, { vargr_packet_tag(p, &tag); sink += tag; });
    BEST_OF(local, iters, { local_tag(&lp, &tag); sink += tag; });
    vargr_packet_free(p);

    if (getenv("VARGR_RANK") || getenv("OMPI_COMM_WORLD_RANK") || getenv("SLURM_PROCID")) {
        int rank;
        if (vargr_world_join(&world) != VARGR_OK) {
            fprintf(stderr, "vargr_world_join: %s\n", vargr_last_error());
            return 1;
        }
        BEST_OF(rank_ns, iters, { vargr_comm_rank(world, &rank); sink += rank; });
        vargr_world_finalize(world);
    }

    printf("{\"ns_per_call\": %.2f, \"local_ns_per_call\": %.2f, \"overhead_ns\": %.2f, "
           "\"call\": \"vargr_packet_tag\", \"comm_rank_ns_per_call\": ",
           lib, local, lib - local);
    if (rank_ns >= 0)
        printf("%.2f", rank_ns);
    else
        printf("null");
    printf(", \"iters\": %ld}\n", iters);
    return sink == 0; /* never true: tags are 7 */
}
