/* regex.c: a JSON Schema "pattern" (an ECMA-262 regular expression, the
 * subset below) as a GBNF expression for the body of a JSON string (the
 * text between its quotes): every string the grammar allows matches the
 * pattern once its JSON escapes are decoded.
 *
 * Supported: literal characters and escapes (\n \t \r \f \v \0 \xHH
 * \uHHHH and escaped metacharacters), `.`, classes [...] and [^...] with
 * ranges, \d \w \s \D \W \S (in classes too), groups (...) and (?:...),
 * alternation, the quantifiers * + ? {m} {m,} {m,n} (a lazy form reads as
 * the greedy one: the strings matched are the same), `^` at the start and
 * `$` at the end of a top-level alternative. Anything else (lookaround,
 * backreferences, \b, \p{...}, anchors inside groups) is refused, naming
 * it. As JSON Schema says, a pattern matches anywhere in the string: an
 * alternative without `^` may be preceded by any characters, one without
 * `$` followed by any (the JSON primitive `char`).
 *
 * JSON text: a character the pattern matches is written raw where JSON
 * allows it, and as its escape where JSON needs one (" \ and the control
 * characters): a set of code points becomes a GBNF class of its raw part,
 * with those escapes as alternatives. One spelling per character (no \u
 * escape of an ordinary character): the grammar allows a subset of the
 * JSON texts whose value matches, never a text whose value does not.
 *
 * The parse also bounds the length of the strings matched (in characters),
 * so that schema.c can tell whether minLength / maxLength hold by
 * themselves. The work is linear in the pattern; the grammar's size is
 * that of the pattern with its repetitions expanded by the compiler. A
 * character or class of the pattern may take some hundred bytes of GBNF
 * (its JSON escapes as alternatives), so the text written is counted and
 * refused past RX_MAX_OUT, before a large pattern makes a huge one. Groups
 * nest at most RX_MAX_DEPTH deep (parse_alt recurses once per group, some
 * 5 KB of stack each). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"
#include "tokenizer/unicode.h"

#define RX_MAX_RANGES 256
#define RX_MAX_DEPTH 64
/* The GBNF of a pattern at most, bytes: as large as a whole grammar may be. */
#define RX_MAX_OUT 1048576
#define RX_STR(x) RX_STR_(x)
#define RX_STR_(x) #x
#define RX_INF (1e18)

typedef struct {
    uint32_t lo, hi;
} crange;

typedef struct {
    crange r[RX_MAX_RANGES];
    int n;
} cset;

typedef struct {
    const char *p, *end;
    sbuf *out;
    size_t out_start;   /* out's length before the pattern */
    char *err;
    size_t errlen;
    bool failed;
    int status;      /* on failure: SP_ERR_INVALID, or SP_ERR_UNSUPPORTED */
    int depth;
} rx;

typedef struct {
    double lo, hi; /* length bounds of the strings matched, in characters */
} span;

static void rx_fail(rx *x, const char *fmt, const char *what) {
    if (!x->failed) seterr(x->err, x->errlen, fmt, what), x->status = SP_ERR_INVALID;
    x->failed = true;
}

/* A valid construct outside the supported subset. */
static void rx_unsupported(rx *x, const char *fmt, const char *what) {
    if (!x->failed) rx_fail(x, fmt, what), x->status = SP_ERR_UNSUPPORTED;
}

/* ---- sets of code points ---- */

static void cs_add(rx *x, cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == RX_MAX_RANGES) return rx_fail(x, "more than %s ranges in a class of the pattern", "256");
    s->r[s->n++] = (crange){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const crange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, disjoint, not adjoining. */
static void cs_norm(cset *s) {
    qsort(s->r, (size_t)s->n, sizeof(crange), cmp_range);
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi) s->r[k - 1].hi = s->r[i].hi;
        } else {
            s->r[k++] = s->r[i];
        }
    }
    s->n = k;
}

static void cs_negate(rx *x, cset *s) {
    cs_norm(s);
    cset o = {.n = 0};
    uint32_t at = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > at) cs_add(x, &o, at, s->r[i].lo - 1);
        at = s->r[i].hi + 1;
    }
    if (at <= 0x10FFFF) cs_add(x, &o, at, 0x10FFFF);
    *s = o;
}

/* \d \w \s (negated: \D \W \S) added to s. */
static void cs_escape_class(rx *x, cset *s, char c) {
    cset t = {.n = 0};
    switch (c | 0x20) {
    case 'd': cs_add(x, &t, '0', '9'); break;
    case 'w':
        cs_add(x, &t, '0', '9'), cs_add(x, &t, 'A', 'Z'), cs_add(x, &t, 'a', 'z'), cs_add(x, &t, '_', '_');
        break;
    default: /* s: ECMAScript's white space and line terminators */
        cs_add(x, &t, '\t', '\r'), cs_add(x, &t, ' ', ' '), cs_add(x, &t, 0xA0, 0xA0);
        cs_add(x, &t, 0x1680, 0x1680), cs_add(x, &t, 0x2000, 0x200A), cs_add(x, &t, 0x2028, 0x2029);
        cs_add(x, &t, 0x202F, 0x202F), cs_add(x, &t, 0x205F, 0x205F), cs_add(x, &t, 0x3000, 0x3000);
        cs_add(x, &t, 0xFEFF, 0xFEFF);
    }
    if (c >= 'A' && c <= 'Z') cs_negate(x, &t);
    for (int i = 0; i < t.n; i++) cs_add(x, s, t.r[i].lo, t.r[i].hi);
}

/* Whether JSON writes cp raw in a string (not ", \, a control character,
 * DEL as the JSON primitive has it, or a surrogate, which UTF-8 cannot). */
static bool json_raw(uint32_t cp) {
    return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F && !(cp >= 0xD800 && cp <= 0xDFFF);
}

static void class_char(sbuf *o, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'))
        sb_printf(o, "%c", (char)cp);
    else if (cp <= 0xFFFF) sb_printf(o, "\\u%04X", (unsigned)cp);
    else sb_printf(o, "\\U%08X", (unsigned)cp);
}

/* The GBNF of one character of s: its raw part as a class; the characters
 * JSON escapes as alternatives: " \ DEL by name, the control characters
 * by their letter (\n ...) and as \u00XX grouped by their high digit (a
 * few alternatives, not 32). */
static void emit_set(rx *x, cset *s) {
    cs_norm(s);
    sbuf cls = {0}, esc = {0};
    uint32_t ctl[2] = {0, 0}; /* control characters in s: bit low-digit of [high digit] */
    for (int i = 0; i < s->n; i++) {
        for (uint32_t cp = s->r[i].lo; cp <= s->r[i].hi && cp < 0x80; cp++)
            if (cp < 0x20) ctl[cp >> 4] |= 1u << (cp & 15);
            else if (!json_raw(cp))
                sb_printf(&esc, " | \"\\\\%s\"", cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : "u007f");
        /* the raw part of [lo, hi]: the pieces between the characters JSON escapes */
        static const crange holes[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}, {0xD800, 0xDFFF}};
        const size_t nh = sizeof(holes) / sizeof(holes[0]);
        uint32_t lo = s->r[i].lo;
        for (size_t h = 0; h <= nh && lo <= s->r[i].hi; h++) {
            const uint32_t end = h < nh ? holes[h].lo : 0x110000;
            const uint32_t hi = SP_MIN(s->r[i].hi, end - 1);
            if (end > 0 && lo <= hi) {
                class_char(&cls, lo);
                if (hi > lo) sb_str(&cls, "-"), class_char(&cls, hi);
            }
            if (h < nh) lo = SP_MAX(lo, holes[h].hi + 1);
        }
    }
    static const char short_esc[] = "\bb\ff\nn\rr\tt"; /* a control character and its letter */
    sbuf letters = {0};
    for (const char *e = short_esc; *e; e += 2)
        if (ctl[0] >> *e & 1) sb_add(&letters, e + 1, 1);
    if (letters.len) sb_printf(&esc, " | \"\\\\\" [%.*s]", (int)letters.len, letters.p);
    sb_free(&letters);
    for (int h = 0; h < 2; h++) {
        if (!ctl[h]) continue;
        sb_printf(&esc, " | \"\\\\u00%d\" [", h);
        for (int l = 0; l < 16; l++)
            if (ctl[h] >> l & 1) sb_printf(&esc, "%c", "0123456789abcdef"[l]);
        sb_str(&esc, "]");
    }
    const bool raw = cls.len > 0, alt = esc.len > 0;
    if (!raw && !alt) rx_fail(x, "a class in the pattern matches no character%s", "");
    if (alt) sb_str(x->out, "(");
    if (raw) sb_printf(x->out, "[%.*s]", (int)cls.len, cls.p);
    if (alt) sb_printf(x->out, "%.*s)", (int)esc.len - (raw ? 0 : 3), esc.p + (raw ? 0 : 3));
    x->out->oom |= cls.oom || esc.oom;
    sb_free(&cls), sb_free(&esc);
}

/* ---- the parser ---- */

static uint32_t hex_digits(rx *x, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        const char c = x->p < x->end ? *x->p : 0;
        const int l = c | 0x20; /* a letter's lower case */
        const int h = c >= '0' && c <= '9' ? c - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
        if (h < 0) {
            rx_fail(x, "a bad hex escape in the pattern%s", "");
            return 0;
        }
        v = v << 4 | (uint32_t)h;
        x->p++;
    }
    return v;
}

/* After a backslash: a class escape into s (true), or one character into
 * *cp (false). in_class: \b is a backspace there. */
static bool escape(rx *x, cset *s, uint32_t *cp, bool in_class) {
    if (x->p >= x->end) {
        rx_fail(x, "the pattern ends with a backslash%s", "");
        return false;
    }
    const char c = *x->p++;
    static const char simple[] = {'n', '\n', 't', '\t', 'r', '\r', 'f', '\f', 'v', '\v', '0', '\0'};
    for (size_t i = 0; i < sizeof(simple); i += 2)
        if (c == simple[i]) return *cp = (unsigned char)simple[i + 1], false;
    if (strchr("dwsDWS", c) && c) {
        cs_escape_class(x, s, c);
        return true;
    }
    if (c == 'x') return *cp = hex_digits(x, 2), false;
    if (c == 'u') return *cp = hex_digits(x, 4), false;
    if (c == 'b' && in_class) return *cp = '\b', false;
    if (strchr("^$\\.*+?()[]{}|/-", c) && c) return *cp = (unsigned char)c, false;
    char what[8];
    snprintf(what, sizeof(what), "\\%c", c);
    rx_unsupported(x, "unsupported construct '%s' in pattern", what);
    return false;
}

/* One character of the pattern's text (UTF-8). */
static uint32_t next_char(rx *x) {
    size_t off = 0;
    const uint32_t cp = tok_utf8_decode(x->p, (size_t)(x->end - x->p), &off);
    x->p += off ? off : 1;
    return cp;
}

static void parse_class(rx *x, cset *s) {
    x->p++; /* [ */
    const bool neg = x->p < x->end && *x->p == '^';
    if (neg) x->p++;
    while (x->p < x->end && *x->p != ']' && !x->failed) {
        uint32_t lo, hi;
        if (*x->p == '\\') {
            x->p++;
            if (escape(x, s, &lo, true)) continue;
        } else {
            lo = next_char(x);
        }
        hi = lo;
        if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']') {
            x->p++;
            cset none = {.n = 0};
            if (*x->p == '\\' ? (x->p++, escape(x, &none, &hi, true)) : (hi = next_char(x), false))
                return rx_fail(x, "a class escape ends a range in the pattern%s", "");
            if (hi < lo) return rx_fail(x, "a character range out of order in the pattern%s", "");
        }
        cs_add(x, s, lo, hi);
    }
    if (x->p >= x->end) return rx_fail(x, "an unterminated character class in the pattern%s", "");
    x->p++; /* ] */
    if (neg) cs_negate(x, s);
}

static span parse_alt(rx *x, bool top);

/* One atom (a character, a set or a group), its GBNF written; its span. */
static span parse_atom(rx *x) {
    const char c = *x->p;
    cset s = {.n = 0};
    uint32_t cp = 0;
    if (c == '(') {
        x->p++;
        if (x->end - x->p >= 2 && x->p[0] == '?' && x->p[1] == ':') x->p += 2;
        else if (x->p < x->end && *x->p == '?')
            return rx_unsupported(x, "unsupported construct '%s' in pattern", "(?"), (span){0, 0};
        sb_str(x->out, "(");
        const span in = parse_alt(x, false);
        if (x->p >= x->end || *x->p != ')') rx_fail(x, "an unclosed group in the pattern%s", "");
        x->p++;
        sb_str(x->out, ")");
        return in;
    }
    if (c == '[') {
        parse_class(x, &s);
    } else if (c == '.') {
        x->p++; /* any character but the line terminators */
        cs_add(x, &s, 0, '\n' - 1), cs_add(x, &s, '\n' + 1, '\r' - 1), cs_add(x, &s, '\r' + 1, 0x2027);
        cs_add(x, &s, 0x202A, 0x10FFFF);
    } else if (c == '\\') {
        x->p++;
        if (!escape(x, &s, &cp, false)) cs_add(x, &s, cp, cp);
    } else if (strchr("*+?{", c)) {
        char what[2] = {c, 0};
        return rx_fail(x, "'%s' with nothing to repeat in the pattern", what), (span){0, 0};
    } else if (c == '^' || c == '$') {
        char what[2] = {c, 0};
        return rx_unsupported(x, "unsupported construct '%s' in pattern (only at the start or end of the "
                      "pattern or of a top-level alternative)", what), (span){0, 0};
    } else {
        cp = next_char(x);
        cs_add(x, &s, cp, cp);
    }
    if (!x->failed) emit_set(x, &s);
    return (span){1, 1};
}

/* A quantifier after an atom of span a, written; the span repeated. */
static span parse_quant(rx *x, span a) {
    double lo = 1, hi = 1;
    const char c = x->p < x->end ? *x->p : 0;
    if (c == '*' || c == '+' || c == '?') {
        x->p++;
        lo = c == '+', hi = c == '?' ? 1 : RX_INF;
        sb_printf(x->out, "%c", c);
    } else if (c == '{') {
        char *e;
        x->p++;
        lo = hi = (double)strtoul(x->p, &e, 10);
        bool ok = e != x->p && e < x->end;
        if (ok && *e == ',') {
            x->p = e + 1;
            hi = x->p < x->end && *x->p == '}' ? RX_INF : (double)strtoul(x->p, &e, 10);
            ok = hi == RX_INF ? true : e != x->p;
            if (hi == RX_INF) e = (char *)x->p;
        }
        if (!ok || e >= x->end || *e != '}') return rx_fail(x, "a bad {m,n} quantifier in the pattern%s", ""), a;
        x->p = e + 1;
        if (hi < lo || (hi != RX_INF && hi > GR_MAX_REPEAT) || lo > GR_MAX_REPEAT)
            return rx_fail(x, "a {m,n} quantifier in the pattern out of order or above %s", "1000"), a;
        if (hi == RX_INF) sb_printf(x->out, "{%.0f,}", lo);
        else sb_printf(x->out, "{%.0f,%.0f}", lo, hi);
    } else {
        return a;
    }
    if (x->p < x->end && *x->p == '?') x->p++; /* lazy: the same strings */
    if (x->p < x->end && strchr("*+?{", *x->p)) return rx_fail(x, "a quantifier repeated in the pattern%s", ""), a;
    return (span){a.lo * lo, hi == RX_INF || a.hi == RX_INF ? RX_INF : a.hi * hi};
}

/* A sequence up to '|', ')' or (top) a final '$'; *end_anchor: it had one. */
static span parse_seq(rx *x, bool top, bool *end_anchor) {
    span s = {0, 0};
    bool any = false;
    while (x->p < x->end && *x->p != '|' && *x->p != ')' && !x->failed) {
        if (top && *x->p == '$' && (x->p + 1 == x->end || x->p[1] == '|')) {
            x->p++;
            *end_anchor = true;
            break;
        }
        if (x->out->len - x->out_start > RX_MAX_OUT)
            return rx_fail(x, "the pattern's grammar is larger than %s bytes", RX_STR(RX_MAX_OUT)), s;
        if (any) sb_str(x->out, " ");
        const span a = parse_quant(x, parse_atom(x));
        s.lo += a.lo, s.hi = s.hi == RX_INF || a.hi == RX_INF ? RX_INF : s.hi + a.hi;
        any = true;
    }
    if (!any) sb_str(x->out, "\"\"");
    return s;
}

/* Alternatives; at the top each may be anchored at either end, and one
 * that is not may have any characters there. */
static span parse_alt(rx *x, bool top) {
    span s = {RX_INF, 0};
    if (++x->depth > RX_MAX_DEPTH) return rx_fail(x, "the pattern nests deeper than %s groups", "64"), s;
    for (bool first = true; !x->failed; first = false) {
        if (!first) sb_str(x->out, " | ");
        const bool start = top && x->p < x->end && *x->p == '^';
        bool end = false;
        if (start) x->p++;
        if (top) sb_str(x->out, start ? "(" : "(char* ");
        span a = parse_seq(x, top, &end);
        if (top) sb_str(x->out, end ? ")" : " char*)");
        if (top && (!start || !end)) a.hi = RX_INF;
        s.lo = SP_MIN(s.lo, a.lo), s.hi = SP_MAX(s.hi, a.hi);
        if (x->p >= x->end || *x->p != '|') break;
        x->p++;
    }
    if (top && x->p < x->end && !x->failed) rx_fail(x, "an unmatched ')' in the pattern%s", "");
    x->depth--;
    return s;
}

int gr_pattern_gbnf(const char *re, sbuf *out, double *min_len, double *max_len, char *err, size_t errlen) {
    rx x = {.p = re, .end = re + strlen(re), .out = out, .out_start = out->len, .err = err,
            .errlen = errlen};
    sb_str(out, "(");
    const span s = parse_alt(&x, true);
    sb_str(out, ")");
    if (x.failed) return x.status;
    if (out->oom) return SP_ERR_NOMEM;
    *min_len = s.lo;
    *max_len = s.hi == RX_INF ? -1 : s.hi;
    return SP_OK;
}
