/*
 * HeterogeneousFilters, back-end (MRNet's example rewritten for vargr): reads its share
 * of a text file (every n-th line, n the number of back-ends) in blocks of whole lines
 * and sends the blocks up the search stream. It does not search: the stream's
 * back-end filter (hf_scan, run by vargr in this process) turns each block into its
 * matching lines before it leaves.
 */
#include "hetero_filters.h"

#define MAX_BLOCKS 4096

static char *blocks[MAX_BLOCKS];
static int nblocks;

/* Splits this back-end's lines of `path` into blocks of at most `size` bytes. */
static int read_share(const char *path, int size, uint32_t rank, uint32_t n)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    uint32_t i = 0;
    size_t used = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (i++ % n != rank)
            continue;
        if (nblocks == 0 || used + len > (size_t)size) {
            if (nblocks == MAX_BLOCKS)
                break;
            blocks[nblocks++] = calloc(1, (size_t)size + sizeof line);
            used = 0;
        }
        memcpy(blocks[nblocks - 1] + used, line, len + 1);
        used += len;
    }
    fclose(f);
    return nblocks;
}

int main(void)
{
    vargr_backend *be;
    vargr_packet *p;
    uint32_t rank, n, stream;
    int32_t tag, size, count, i;
    char *path;
    int rc;

    CHECK(vargr_backend_join(&be));
    CHECK(vargr_backend_rank(be, &rank));
    CHECK(vargr_backend_num_backends(be, &n));
    while ((rc = vargr_backend_recv(be, &p)) == VARGR_OK) {
        CHECK(vargr_packet_tag(p, &tag));
        CHECK(vargr_packet_stream(p, &stream));
        if (tag == PROT_INIT) {
            CHECK(vargr_packet_unpack(p, "%s %d", &path, &size));
            count = read_share(path, size, rank, n);
            if (count < 0)
                fprintf(stderr, "BE %u: cannot read %s\n", rank, path);
            vargr_free(path);
            CHECK(vargr_backend_send(be, stream, tag, "%d", count));
        } else if (tag == PROT_SEARCH) {
            CHECK(vargr_packet_unpack(p, "%d", &count));
            for (i = 0; i < count; i++)
                CHECK(vargr_backend_send(be, stream, tag, "%s", i < nblocks ? blocks[i] : ""));
        }
        vargr_packet_free(p);
    }
    vargr_backend_free(be);
    return rc == VARGR_ERR_CLOSED ? 0 : 1;
}
