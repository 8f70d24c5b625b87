/* sbuf.h: a growable byte buffer (the server's JSON and text, the chat
 * templates' rendering) and UTF-8 helpers. An append that runs out of memory
 * sets oom and returns false; later appends do nothing, so a caller may
 * append a whole text and check oom once. */
#ifndef SP_SBUF_H
#define SP_SBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *p;
    size_t len, cap;
    bool oom; /* an append failed (the content is then incomplete) */
} sbuf;

bool sb_add(sbuf *b, const void *s, size_t n);
bool sb_str(sbuf *b, const char *s);
bool sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[n] as a JSON string literal; invalid UTF-8 becomes U+FFFD. */
bool sb_json_str(sbuf *b, const char *s, size_t n);
void sb_free(sbuf *b);
/* Copies s[n] replacing invalid UTF-8 by U+FFFD (malloc'd, NUL-terminated). */
char *utf8_sanitize(const char *s, size_t n);

#endif
