/*
 * HeterogeneousFilters, front-end (MRNet's example rewritten for vargr): a distributed
 * grep. One stream, a different up filter at each kind of node: the back-ends scan
 * their blocks of text for a word (hf_scan:WORD), the commnodes merge and sort the
 * matching lines (hf_sort), and the front-end drops the lines it has already printed
 * (hf_uniq). The filters come from a plugin (examples/filter-plugin/hetero_filters.c).
 *
 *   hetero_filters_fe WORD FILE TOPOLOGY BACKEND_EXE FILTER_SO    (hetero_filters_be)
 *
 * Prints each matching line once, "blocks: N", and "hetero_filters: OK".
 */
#include "hetero_filters.h"

int main(int argc, char **argv)
{
    const char *be_argv[2];
    char scan[512];
    vargr_options *opts;
    vargr_network *net;
    vargr_communicator *comm_bc;
    vargr_stream *init, *search;
    vargr_packet *p;
    int32_t max_blocks, i;
    char **lines;
    size_t n, j;

    if (argc != 6) {
        fprintf(stderr, "usage: %s WORD FILE TOPOLOGY BACKEND_EXE FILTER_SO\n", argv[0]);
        return 2;
    }
    be_argv[0] = argv[4];
    be_argv[1] = NULL;
    CHECK(vargr_options_create(&opts));
    CHECK(vargr_options_load_filter(opts, argv[5], "hf_scan"));
    CHECK(vargr_options_load_filter(opts, argv[5], "hf_sort"));
    CHECK(vargr_options_load_filter(opts, argv[5], "hf_uniq"));
    CHECK(vargr_network_create(argv[3], be_argv, opts, &net));
    vargr_options_free(opts);
    CHECK(vargr_network_broadcast_communicator(net, &comm_bc));

    /* The back-ends read their share of the file; the most blocks any has is the
     * number of waves to come. */
    CHECK(vargr_network_open_stream(net, comm_bc, "max", VARGR_SYNC_WAIT_FOR_ALL, 0, &init));
    CHECK(vargr_stream_send(init, PROT_INIT, "%s %d", argv[2], 4096));
    CHECK(vargr_stream_recv_timeout(init, 30000, &p));
    CHECK(vargr_packet_unpack(p, "%d", &max_blocks));
    vargr_packet_free(p);
    if (max_blocks < 0) {
        fprintf(stderr, "FE: a back-end could not read %s\n", argv[2]);
        return 1;
    }

    /* The word is the back-end filter's parameter. */
    snprintf(scan, sizeof scan, "hf_scan:%s", argv[1]);
    CHECK(vargr_network_open_stream_per_role(net, comm_bc, scan, "hf_sort", "hf_uniq",
                                             VARGR_SYNC_WAIT_FOR_ALL, 0, NULL, &search));
    CHECK(vargr_stream_send(search, PROT_SEARCH, "%d", max_blocks));
    for (i = 0; i < max_blocks; i++) {
        CHECK(vargr_stream_recv_timeout(search, 30000, &p));
        CHECK(vargr_packet_unpack(p, "%as", &lines, &n));
        vargr_packet_free(p);
        for (j = 0; j < n; j++)
            printf("%s\n", lines[j]);
        vargr_free(lines);
    }
    printf("blocks: %d\n", max_blocks);

    vargr_stream_free(init);
    vargr_stream_free(search);
    vargr_communicator_free(comm_bc);
    CHECK(vargr_network_shutdown(net));
    vargr_network_free(net);
    printf("hetero_filters: OK\n");
    return 0;
}
