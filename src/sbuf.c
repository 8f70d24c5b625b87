/* sbuf.c: growable byte buffer and UTF-8 helpers for the HTTP server. */
#include "sbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

bool sb_add(sbuf *b, const void *s, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool sb_str(sbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

bool sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof(tmp)) return sb_add(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return false;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = sb_add(b, big, (size_t)n);
    free(big);
    return ok;
}

void sb_free(sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

bool sb_json_str(sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    sb_add(b, "\"", 1);
    size_t run = 0; /* start of the pending run of bytes copied verbatim */
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        const char *esc = NULL;
        char tmp[8];
        int l = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            esc = tmp;
        } else if (c >= 0x80) {
            l = utf8_len(u + i, n - i);
            if (!l) {
                esc = "\xef\xbf\xbd";
                l = 1;
            }
        }
        if (esc) {
            sb_add(b, s + run, i - run);
            sb_str(b, esc);
            run = i + (size_t)l;
        }
        i += (size_t)l;
    }
    sb_add(b, s + run, n - run);
    return sb_add(b, "\"", 1);
}

char *utf8_sanitize(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l = u[i] < 0x80 ? 1 : utf8_len(u + i, n - i);
        if (!l) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, (size_t)l);
        o += (size_t)l;
        i += (size_t)l;
    }
    out[o] = 0;
    return out;
}
