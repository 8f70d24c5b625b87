/* either.c: two GBNF grammars as one that matches what either matches, and
 * a grammar after a fixed text.
 * Each grammar's rule names are renamed apart by a prefix, so rules of the
 * same name (both have a root, and schema grammars share names such as
 * "string") cannot collide. A single pass over the text, which reads
 * string literals, character classes, repetition counts and comments as
 * the parser does and renames only what is a rule name there. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* g with every rule name prefixed by pre, appended to b. */
static void renamed(sbuf *b, const char *g, const char *pre) {
    const char *p = g;
    while (*p) {
        const char c = *p;
        if (c == '"' || c == '[') { /* a literal or class: as it is, up to its unescaped end */
            const char close = c == '"' ? '"' : ']';
            const char *q = p + 1;
            while (*q && *q != close) q += q[0] == '\\' && q[1] ? 2 : 1;
            if (*q) q++;
            sb_add(b, p, (size_t)(q - p));
            p = q;
        } else if (c == '#' || c == '{') { /* a comment, or a repetition count */
            const char *q = p + strcspn(p, c == '#' ? "\n" : "}");
            if (*q == '}') q++;
            sb_add(b, p, (size_t)(q - p));
            p = q;
        } else if (name_char(c)) {
            const char *q = p;
            while (name_char(*q)) q++;
            sb_str(b, pre);
            sb_add(b, p, (size_t)(q - p));
            p = q;
        } else {
            sb_add(b, p++, 1);
        }
    }
    sb_str(b, "\n");
}

char *gr_gbnf_after(const char *lit, const char *g) {
    sbuf o = {0};
    sb_str(&o, "root ::= ");
    sb_json_str(&o, lit, strlen(lit)); /* a GBNF literal: JSON's escapes are GBNF's */
    sb_str(&o, " [ \\t\\r\\n]* b-root\n");
    renamed(&o, g, "b-");
    sb_add(&o, "", 1);
    if (o.oom) {
        sb_free(&o);
        return NULL;
    }
    return o.p;
}

char *gr_gbnf_either(const char *a, const char *b) {
    sbuf o = {0};
    sb_str(&o, "root ::= a-root | b-root\n");
    renamed(&o, a, "a-");
    renamed(&o, b, "b-");
    sb_add(&o, "", 1);
    if (o.oom) {
        sb_free(&o);
        return NULL;
    }
    return o.p;
}
