/* template_bench.c: what rendering a chat template costs. For a template
 * file and a request, the time of a whole sp_chat_apply_template call
 * (the request's JSON parsed, the template parsed, rendered) and of the
 * template's parse alone, best of several rounds. bench/template/run.sh
 * drives it. Usage: template_bench TEMPLATE REQUEST.json [N]. Prints one
 * line: "bytes B parse_us P render_us R" (render_us: the whole call). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "specula.h"
#include "template/jinja.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0, *len = (size_t)n;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: template_bench TEMPLATE REQUEST.json [N]\n");
        return 2;
    }
    int n = argc > 3 ? atoi(argv[3]) : 200;
    if (n < 1) n = 1;
    size_t tlen, rlen;
    char *tmpl = slurp(argv[1], &tlen), *req = slurp(argv[2], &rlen);
    if (!tmpl || !req) {
        fprintf(stderr, "template_bench: cannot read %s\n", tmpl ? argv[2] : argv[1]);
        return 1;
    }
    char err[512];
    const int64_t now = 1750000000;
    char *out = sp_chat_apply_template(NULL, tmpl, req, rlen, now, err, sizeof(err));
    if (!out) {
        fprintf(stderr, "template_bench: %s: %s\n", argv[1], err);
        return 1;
    }
    size_t bytes = strlen(out);
    free(out);
    double best_parse = 1e30, best_all = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = time_s();
        for (int i = 0; i < n; i++) jinja_free(jinja_parse(tmpl, tlen, err, sizeof(err)));
        double t1 = time_s();
        for (int i = 0; i < n; i++) free(sp_chat_apply_template(NULL, tmpl, req, rlen, now, err, sizeof(err)));
        double t2 = time_s();
        if ((t1 - t0) / n < best_parse) best_parse = (t1 - t0) / n;
        if ((t2 - t1) / n < best_all) best_all = (t2 - t1) / n;
    }
    printf("bytes %zu parse_us %.1f render_us %.1f\n", bytes, best_parse * 1e6, best_all * 1e6);
    free(tmpl);
    free(req);
    return 0;
}
