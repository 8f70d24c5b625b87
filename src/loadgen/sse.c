/* sse.c: an incremental parser of server-sent events (the WHATWG
 * rules the OpenAI streams follow): lines end in "\n", "\r\n" or "\r";
 * a blank line ends an event; "data:" lines accumulate (one leading space
 * dropped); other fields and ":" comments are ignored. Bytes arrive in
 * whatever pieces the network gives, so a line or even a "\r\n" pair may be
 * split across calls. */
#include <stdlib.h>
#include <string.h>

#include "loadgen/loadgen.h"

#define SSE_DEFAULT_MAX (16u << 20)

void sse_init(sse_parser *p, sse_event_fn fn, void *user) {
    memset(p, 0, sizeof(*p));
    p->fn = fn;
    p->user = user;
}

void sse_free(sse_parser *p) {
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof(*p));
}

static int grow(char **buf, size_t *cap, size_t need, size_t max) {
    if (need > max) return -1;
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int dispatch(sse_parser *p) {
    if (!p->has_data) return 0;
    p->has_data = false;
    size_t n = p->data_len;
    p->data_len = 0;
    /* the spec drops the final newline the data lines were joined with */
    if (n && p->data[n - 1] == '\n') n--;
    p->data[n] = 0;
    return p->fn ? p->fn(p->data, n, p->user) : 0;
}

static int end_line(sse_parser *p) {
    size_t max = p->max_bytes ? p->max_bytes : SSE_DEFAULT_MAX;
    char *l = p->line;
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) return dispatch(p);
    if (l[0] == ':') return 0;
    size_t colon = 0;
    while (colon < n && l[colon] != ':') colon++;
    const char *val = colon < n ? l + colon + 1 : l + n;
    size_t vlen = colon < n ? n - colon - 1 : 0;
    if (vlen && *val == ' ') val++, vlen--;
    if (colon != 4 || memcmp(l, "data", 4)) return 0;
    if (grow(&p->data, &p->data_cap, p->data_len + vlen + 2, max)) return -1;
    memcpy(p->data + p->data_len, val, vlen);
    p->data_len += vlen;
    p->data[p->data_len++] = '\n';
    p->has_data = true;
    return 0;
}

int sse_feed(sse_parser *p, const char *buf, size_t len) {
    size_t max = p->max_bytes ? p->max_bytes : SSE_DEFAULT_MAX;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == '\n' && p->last_cr) { /* second half of "\r\n" */
            p->last_cr = false;
            continue;
        }
        p->last_cr = c == '\r';
        if (c == '\n' || c == '\r') {
            int rc = end_line(p);
            if (rc) return rc;
            continue;
        }
        if (grow(&p->line, &p->line_cap, p->line_len + 1, max)) return -1;
        p->line[p->line_len++] = c;
    }
    return 0;
}

int sse_finish(sse_parser *p) {
    int rc = 0;
    if (p->line_len) rc = end_line(p);
    if (!rc) rc = dispatch(p);
    return rc;
}
