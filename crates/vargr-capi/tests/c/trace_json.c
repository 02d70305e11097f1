/*
 * Prints what vargr_trace_report_json makes of the run traced into DIR, then what
 * vargr_trace_diff_json makes of DIR against itself, one JSON document per line; a
 * failing call prints its status and vargr_last_error on stderr and exits 1 (run by
 * tests/examples.rs).
 * Usage: trace_json DIR
 */
#include <vargr.h>

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: trace_json DIR\n");
        return 2;
    }
    char *json = NULL;
    int rc = vargr_trace_report_json(argv[1], &json);
    if (rc != VARGR_OK) {
        fprintf(stderr, "report: %s: %s\n", vargr_status_name(rc), vargr_last_error());
        return 1;
    }
    printf("%s\n", json);
    vargr_free(json);
    json = NULL;
    rc = vargr_trace_diff_json(argv[1], argv[1], &json);
    if (rc != VARGR_OK) {
        fprintf(stderr, "diff: %s: %s\n", vargr_status_name(rc), vargr_last_error());
        return 1;
    }
    printf("%s\n", json);
    vargr_free(json);
    return 0;
}
