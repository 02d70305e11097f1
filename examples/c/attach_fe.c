/*
 * Back-ends that another launcher starts (MRNet's NoBackEndInstantiation) rewritten for
 * vargr: the front-end starts only the commnodes and a rendezvous, and runs LAUNCH
 * (mpirun, srun, a script) to start the back-ends, which attach to the tree with
 * vargr_backend_join. Then the IntegerAddition waves. Uses integer_addition_be.
 *
 *   attach_fe TOPOLOGY LAUNCH...
 *   attach_fe TOPOLOGY --file PATH
 *
 * e.g. attach_fe kary:2@4 mpirun -n {n} -x VARGR_RENDEZVOUS -x VARGR_SECRET ./integer_addition_be
 * ({n} becomes the number of back-ends; each takes its rank from PMI_RANK,
 * OMPI_COMM_WORLD_RANK, SLURM_PROCID or VARGR_RANK). With --file, nothing is launched:
 * the rendezvous is written to PATH (mode 0600), and back-ends started some other way
 * find it with VARGR_RENDEZVOUS=file:PATH. Prints one line per wave and "attach: OK".
 */
#include <stdint.h>
#include <string.h>

#include "integer_addition.h"

int main(int argc, char **argv)
{
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *add;
    vargr_packet *p;
    uint32_t num_backends;
    int32_t send_val = 32, num_iters = 5, i, recv_val;
    int failures = 0;

    if (argc < 3) {
        fprintf(stderr, "usage: %s TOPOLOGY LAUNCH...\n", argv[0]);
        return 2;
    }
    if (argc == 4 && strcmp(argv[2], "--file") == 0) {
        CHECK(vargr_network_create_attached(argv[1], NULL, argv[3], NULL, &net));
    } else {
        /* argv is NULL-terminated: the launch command is the rest of it. */
        CHECK(vargr_network_create_attached(argv[1], (const char *const *)&argv[2], NULL,
                                            NULL, &net));
    }
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));
    CHECK(vargr_network_num_backends(net, &num_backends));
    printf("network: %u back-ends attached\n", num_backends);
    CHECK(vargr_network_open_stream(net, comm_bc, "sum", VARGR_SYNC_WAIT_FOR_ALL, 0, &add));
    CHECK(vargr_stream_send(add, PROT_SUM, "%d %d", send_val, num_iters));
    for (i = 0; i < num_iters; i++) {
        int32_t expected = (int32_t)num_backends * i * send_val;
        CHECK(vargr_stream_recv_timeout(add, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%d", &recv_val));
        vargr_packet_free(p);
        printf("Iteration %d: %s! recv_val(%d) %s %d*%d*%u=%d\n", i,
               recv_val == expected ? "Success" : "Failure", recv_val,
               recv_val == expected ? "==" : "!=", send_val, i, num_backends, expected);
        failures += recv_val != expected;
    }
    vargr_stream_free(add);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("attach: %s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
