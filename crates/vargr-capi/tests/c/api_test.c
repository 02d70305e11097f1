/*
 * The C API from C, without a network: packets of every field type through the
 * variadic shim and back, and the errors a C caller meets (NULL handles, bad formats,
 * mismatched unpacks, bad UTF-8, unknown enum values). Run by tests/examples.rs.
 * Prints "api_test: N checks OK" or the failed checks, and exits non-zero on failure.
 */
#include <vargr_filter.h> /* first, on purpose: both headers in this order must work */
#include <vargr.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failed;

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            failed++;                                                                    \
            printf("FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,     \
                   vargr_last_error());                                                  \
        }                                                                                \
    } while (0)

/* Expects `rc` and a last error containing `needle`. */
#define EXPECT_ERR(call, rc, needle)                                                     \
    do {                                                                                 \
        int got_ = (call);                                                               \
        EXPECT(got_ == (rc));                                                            \
        EXPECT(strstr(vargr_last_error(), (needle)) != NULL);                            \
    } while (0)

static void scalars(void)
{
    vargr_packet *p = NULL;
    int8_t c;
    uint8_t uc;
    int16_t hd;
    uint16_t uhd;
    int32_t d, tag;
    uint32_t ud, stream, source;
    int64_t ld;
    uint64_t uld;
    float f;
    double lf;
    char *s;
    const char *fmt;

    EXPECT(vargr_packet_create(&p, 17, 9, "%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s", -5, 250,
                               -30000, 60000, -2000000000, 4000000000u, -((int64_t)1 << 40),
                               UINT64_MAX, 1.5f, -0.25, "héllo") == VARGR_OK);
    EXPECT(vargr_packet_tag(p, &tag) == VARGR_OK && tag == 9);
    EXPECT(vargr_packet_stream(p, &stream) == VARGR_OK && stream == 17);
    EXPECT(vargr_packet_source(p, &source) == VARGR_OK && source == UINT32_MAX);
    EXPECT(vargr_packet_format(p, &fmt) == VARGR_OK &&
           strcmp(fmt, "%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s") == 0);
    EXPECT(vargr_packet_unpack(p, "%c %uc %hd %uhd %d %ud %ld %uld %f %lf %s", &c, &uc, &hd,
                               &uhd, &d, &ud, &ld, &uld, &f, &lf, &s) == VARGR_OK);
    EXPECT(c == -5 && uc == 250 && hd == -30000 && uhd == 60000);
    EXPECT(d == -2000000000 && ud == 4000000000u && ld == -((int64_t)1 << 40) && uld == UINT64_MAX);
    EXPECT(f == 1.5f && lf == -0.25 && strcmp(s, "héllo") == 0);
    vargr_free(s);
    /* Any whitespace separates fields; NULL skips one. */
    EXPECT(vargr_packet_unpack(p, " %c\t%uc %hd %uhd %d %ud %ld %uld %f %lf %s ", NULL, NULL,
                               NULL, NULL, &d, NULL, NULL, NULL, NULL, NULL, NULL) == VARGR_OK);
    EXPECT(d == -2000000000);
    EXPECT(vargr_packet_free(p) == VARGR_OK);
}

static void arrays(void)
{
    vargr_packet *p = NULL;
    int32_t ints[3] = {1, -2, 3}, *ints_out;
    double dbl[2] = {0.5, 1e300}, *dbl_out;
    uint8_t raw[4] = {0, 255, 0, 7};
    void *raw_out;
    const char *strs[3] = {"a", "", "ccc"};
    char **strs_out;
    static uint16_t sentinel;
    uint16_t *empty_out = &sentinel; /* overwritten with NULL */
    size_t n_ints, n_dbl, n_raw, n_strs, n_empty;

    EXPECT(vargr_packet_create(&p, 1, 2, "%ad %alf %b %as %auhd", ints, (size_t)3, dbl,
                               (size_t)2, raw, (size_t)4, strs, (size_t)3, NULL,
                               (size_t)0) == VARGR_OK);
    EXPECT(vargr_packet_unpack(p, "%ad %alf %b %as %auhd", &ints_out, &n_ints, &dbl_out,
                               &n_dbl, &raw_out, &n_raw, &strs_out, &n_strs, &empty_out,
                               &n_empty) == VARGR_OK);
    EXPECT(n_ints == 3 && memcmp(ints_out, ints, sizeof ints) == 0);
    EXPECT(n_dbl == 2 && dbl_out[0] == 0.5 && dbl_out[1] == 1e300);
    EXPECT(n_raw == 4 && memcmp(raw_out, raw, 4) == 0);
    EXPECT(n_strs == 3 && strcmp(strs_out[0], "a") == 0 && strcmp(strs_out[1], "") == 0 &&
           strcmp(strs_out[2], "ccc") == 0);
    EXPECT(n_empty == 0 && empty_out == NULL);
    vargr_free(ints_out);
    vargr_free(dbl_out);
    vargr_free(raw_out);
    vargr_free(strs_out); /* one block: table and strings */
    /* Skipped arrays are freed by vargr, not leaked (checked under valgrind/ASan). */
    EXPECT(vargr_packet_unpack(p, "%ad %alf %b %as %auhd", NULL, NULL, NULL, NULL, NULL, NULL,
                               NULL, NULL, NULL, NULL) == VARGR_OK);
    vargr_packet_free(p);
}

static void args_form(void)
{
    uint8_t codes[VARGR_MAX_FIELDS];
    size_t n = 0;
    vargr_arg in[2], out[2];
    vargr_packet *p = NULL;
    int64_t longs[2] = {7, 8};

    EXPECT(vargr_format_fields("%d %ald %b %s", codes, VARGR_MAX_FIELDS, &n) == VARGR_OK);
    EXPECT(n == 4 && codes[0] == VARGR_FIELD_INT &&
           codes[1] == (VARGR_FIELD_ARRAY | VARGR_FIELD_LONG) && codes[2] == VARGR_FIELD_RAW &&
           codes[3] == VARGR_FIELD_STR);
    EXPECT_ERR(vargr_format_fields("%d %d", codes, 1, &n), VARGR_ERR_INVALID_ARGUMENT,
               "room was given for 1");
    EXPECT(n == 2);

    memset(in, 0, sizeof in);
    in[0].f = 2.5;
    in[1].ptr = longs;
    in[1].len = 2;
    EXPECT(vargr_packet_create_args(&p, 0, 0, "%lf %ald", in, 2) == VARGR_OK);
    EXPECT(vargr_packet_unpack_args(p, "%lf %ald", out, 2) == VARGR_OK);
    EXPECT(out[0].f == 2.5 && out[1].len == 2 && ((const int64_t *)out[1].ptr)[1] == 8);
    vargr_free((void *)out[1].ptr);
    EXPECT_ERR(vargr_packet_unpack_args(p, "%lf %ald", out, 1), VARGR_ERR_FORMAT,
               "room for 1 values");
    vargr_packet_free(p);
}

/* The va_list forms, as a wrapper library would use them. */
static int create_v(vargr_packet **out, const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_packet_vcreate(out, 4, 5, format, ap);
    va_end(ap);
    return rc;
}

static int unpack_v(const vargr_packet *p, const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_packet_vunpack(p, format, ap);
    va_end(ap);
    return rc;
}

static void va_list_forms(void)
{
    vargr_packet *p = NULL;
    float fs[2] = {1.25f, -2.0f}, *fs_out;
    size_t n;
    char *s;
    EXPECT(create_v(&p, "%af %s", fs, (size_t)2, "va") == VARGR_OK);
    EXPECT(unpack_v(p, "%af %s", &fs_out, &n, &s) == VARGR_OK);
    EXPECT(n == 2 && fs_out[0] == 1.25f && fs_out[1] == -2.0f && strcmp(s, "va") == 0);
    vargr_free(fs_out);
    vargr_free(s);
    vargr_packet_free(p);
}

static void errors(void)
{
    vargr_packet *p = (vargr_packet *)&checks;
    int32_t tag = 0;
    int32_t i;
    char bad_utf8[3] = {(char)0xff, 'x', 0};
    vargr_network *net = (vargr_network *)&checks;
    const char *argv[] = {"/bin/true", NULL};

    EXPECT_ERR(vargr_packet_tag(NULL, &tag), VARGR_ERR_INVALID_ARGUMENT,
               "vargr_packet_tag: p is NULL");
    EXPECT_ERR(vargr_packet_create(&p, 0, 0, "%d %q", 1, 2), VARGR_ERR_FORMAT,
               "vargr_packet_create: bad format string");
    EXPECT(p == NULL);
    EXPECT_ERR(vargr_packet_create(&p, 0, 0, "%s", bad_utf8), VARGR_ERR_INVALID_ARGUMENT,
               "not valid UTF-8");
    EXPECT_ERR(vargr_packet_create(&p, 0, 0, "%ad", NULL, (size_t)3), VARGR_ERR_INVALID_ARGUMENT,
               "argument 0 (%ad) is NULL but has 3 elements");
    EXPECT_ERR(vargr_packet_create(NULL, 0, 0, "%d", 1), VARGR_ERR_INVALID_ARGUMENT,
               "out (out-parameter) is NULL");
    EXPECT_ERR(vargr_packet_create(&p, 0, 0, NULL), VARGR_ERR_INVALID_ARGUMENT,
               "format is NULL");

    EXPECT(vargr_packet_create(&p, 0, 0, "%d %lf", 1, 2.0) == VARGR_OK);
    i = 12345;
    EXPECT_ERR(vargr_packet_unpack(p, "%d %f", &i, &tag), VARGR_ERR_FORMAT,
               "the packet's format is \"%d %lf\", unpack asked for \"%d %f\"");
    EXPECT(i == 12345); /* nothing stored on error */
    EXPECT_ERR(vargr_packet_unpack(p, "%d %%", &i, &tag), VARGR_ERR_FORMAT,
               "vargr_packet_unpack: bad format string");
    vargr_packet_free(p);

    EXPECT_ERR(vargr_network_create("kary:2@4", NULL, NULL, &net), VARGR_ERR_INVALID_ARGUMENT,
               "backend_argv is NULL");
    EXPECT(net == NULL);
    EXPECT_ERR(vargr_network_create("no-such-topology.top", argv, NULL, &net),
               VARGR_ERR_TOPOLOGY, "no-such-topology.top");
    EXPECT_ERR(vargr_network_create_from_text("a:0 => ;;", argv, NULL, &net),
               VARGR_ERR_TOPOLOGY, "topology_text");
    EXPECT_ERR(vargr_stream_send(NULL, 1, "%d", 1), VARGR_ERR_INVALID_ARGUMENT,
               "vargr_stream_send: s is NULL");
    EXPECT_ERR(vargr_comm_allreduce(NULL, NULL, 0, VARGR_DOUBLE, VARGR_OP_SUM),
               VARGR_ERR_INVALID_ARGUMENT, "comm is NULL");
    EXPECT_ERR(vargr_backend_recv(NULL, &p), VARGR_ERR_INVALID_ARGUMENT, "be is NULL");
    EXPECT(strcmp(vargr_status_name(VARGR_ERR_TIMEOUT), "VARGR_ERR_TIMEOUT") == 0);
    EXPECT(strcmp(vargr_status_name(999), "unknown status") == 0);
    EXPECT(vargr_packet_free(NULL) == VARGR_OK && vargr_network_free(NULL) == VARGR_OK);
    vargr_free(NULL);
}

static void options(void)
{
    vargr_options *o = NULL;
    EXPECT(vargr_options_create(&o) == VARGR_OK);
    EXPECT_ERR(vargr_options_set_transport(o, "udp"), VARGR_ERR_INVALID_ARGUMENT,
               "unknown transport \"udp\"");
    EXPECT(vargr_options_set_transport(o, "tcp") == VARGR_OK);
    EXPECT_ERR(vargr_options_set_link_security(o, "rot13"), VARGR_ERR_INVALID_ARGUMENT,
               "link security \"rot13\"");
    EXPECT(vargr_options_set_link_security(o, "encrypt") == VARGR_OK);
    EXPECT_ERR(vargr_options_set_recovery(o, "pray"), VARGR_ERR_INVALID_ARGUMENT,
               "recovery \"pray\"");
    EXPECT(vargr_options_set_recovery(o, "off") == VARGR_OK);
    EXPECT_ERR(vargr_options_load_filter(o, "/no/such/plugin.so", "f"), VARGR_ERR_FILTER,
               "/no/such/plugin.so");
    EXPECT(vargr_options_free(o) == VARGR_OK);
}

static void on_event(const vargr_event *ev, void *data)
{
    (void)ev;
    (void)data;
}

/* MRNet's API beyond streams: what a C caller gets for NULL handles and bad arguments,
 * without a network. */
static void mrnet_api_errors(void)
{
    vargr_network *net = (vargr_network *)&checks;
    vargr_stream *s = (vargr_stream *)&checks;
    vargr_packet *p = (vargr_packet *)&checks;
    uint32_t id = 7;
    size_t n;
    int fd = -7;
    EXPECT_ERR(vargr_network_create_attached("flat:2", NULL, NULL, NULL, &net),
               VARGR_ERR_INVALID_ARGUMENT, "neither launch_argv nor rendezvous_file");
    EXPECT(net == NULL);
    EXPECT_ERR(vargr_network_create_attached(NULL, NULL, "/tmp/x", NULL, &net),
               VARGR_ERR_INVALID_ARGUMENT, "topology is NULL");
    EXPECT_ERR(vargr_network_recv(NULL, &id, &p), VARGR_ERR_INVALID_ARGUMENT, "net is NULL");
    EXPECT_ERR(vargr_network_recv_timeout(NULL, 0, &id, &p), VARGR_ERR_INVALID_ARGUMENT,
               "net is NULL");
    EXPECT_ERR(vargr_network_get_stream(NULL, 16, &s), VARGR_ERR_INVALID_ARGUMENT,
               "net is NULL");
    EXPECT_ERR(vargr_network_notification_fd(NULL, &fd), VARGR_ERR_INVALID_ARGUMENT,
               "net is NULL");
    EXPECT_ERR(vargr_network_child_pids(NULL, NULL, 0, &n), VARGR_ERR_INVALID_ARGUMENT,
               "net is NULL");
    EXPECT_ERR(vargr_network_add_event_callback(NULL, VARGR_EVENT_ANY, on_event, NULL),
               VARGR_ERR_INVALID_ARGUMENT, "net is NULL");
    EXPECT_ERR(vargr_network_open_stream_filters(NULL, NULL, "sum", 0, 0, NULL, &s),
               VARGR_ERR_INVALID_ARGUMENT, "net is NULL");
    EXPECT_ERR(vargr_network_open_stream_per_role(NULL, NULL, "a", "b", "c", 0, 0, NULL, &s),
               VARGR_ERR_INVALID_ARGUMENT, "net is NULL");
    EXPECT_ERR(vargr_stream_notification_fd(NULL, &fd), VARGR_ERR_INVALID_ARGUMENT,
               "s is NULL");
    EXPECT_ERR(vargr_stream_set_filter(NULL, VARGR_FILTER_UP, "max"),
               VARGR_ERR_INVALID_ARGUMENT, "s is NULL");
    EXPECT_ERR(vargr_stream_set_filter_parameters(NULL, VARGR_FILTER_SYNC, "250"),
               VARGR_ERR_INVALID_ARGUMENT, "s is NULL");
    EXPECT_ERR(vargr_backend_recv_stream(NULL, 16, &p), VARGR_ERR_INVALID_ARGUMENT,
               "be is NULL");
    EXPECT_ERR(vargr_backend_recv_stream_timeout(NULL, 16, 0, &p), VARGR_ERR_INVALID_ARGUMENT,
               "be is NULL");
    EXPECT_ERR(vargr_backend_notification_fd(NULL, &fd), VARGR_ERR_INVALID_ARGUMENT,
               "be is NULL");
    EXPECT_ERR(vargr_backend_stream_notification_fd(NULL, 16, &fd),
               VARGR_ERR_INVALID_ARGUMENT, "be is NULL");
    EXPECT(fd == -7);
}

int main(void)
{
    scalars();
    arrays();
    args_form();
    va_list_forms();
    errors();
    options();
    mrnet_api_errors();
    if (failed) {
        printf("api_test: %d of %d checks FAILED\n", failed, checks);
        return 1;
    }
    printf("api_test: %d checks OK\n", checks);
    return 0;
}
