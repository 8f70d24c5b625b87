/* gbnf.c: GBNF text -> the byte-level automaton of grammar.h.
 *
 * The parser builds one element vector per rule (alternatives separated by
 * E_END, as in llama.cpp's grammar-parser); groups, repetitions and
 * character classes that need more than one byte become generated rules:
 *   x*      R ::= x R |            (tail position: the stack does not grow)
 *   x+      x R
 *   x?      R ::= x |
 *   x{m,n}  m copies of x, then n - m nested optionals (or R for {m,})
 *   [class] one byte set when every code point is ASCII, else a rule of one
 *           alternative per UTF-8 byte-range sequence (utf8_ranges)
 * Then it checks that every rule is defined and that none is left
 * recursive (which would make the matcher expand forever), and lays the
 * rules out flat. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"

typedef struct {
    gr_elem *e;
    int32_t n, cap;
} evec;

typedef struct {
    char *name;             /* NULL for generated rules */
    evec body;
    bool defined;
} prule;

typedef struct {
    const char *src, *p, *end;
    prule **rules;
    int32_t n_rules, cap_rules;
    gr_set *sets;
    int32_t n_sets, cap_sets;
    int32_t single[256];    /* set index of each one-byte set, -1 when none yet */
    int64_t n_elems;
    int depth;
    char *err;
    size_t errlen;
    bool failed;
} parser;

static void perr(parser *ps, const char *fmt, const char *arg) {
    if (ps->failed) return;
    ps->failed = true;
    int line = 1, col = 1;
    for (const char *q = ps->src; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
    sp_seterr(ps->err, ps->errlen, "grammar: %s at line %d, column %d", msg, line, col);
}

static bool push(parser *ps, evec *v, int type, uint32_t arg) {
    if (++ps->n_elems > GR_MAX_ELEMS) {
        perr(ps, "more than %s elements", "1048576");
        return false;
    }
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 8;
        gr_elem *e = realloc(v->e, (size_t)cap * sizeof(gr_elem));
        if (!e) {
            perr(ps, "out of memory%s", NULL);
            return false;
        }
        v->e = e, v->cap = cap;
    }
    v->e[v->n++] = (gr_elem){(uint32_t)type, arg};
    return true;
}

static int32_t new_rule(parser *ps, const char *name, size_t len) {
    if (ps->n_rules >= GR_MAX_RULES) {
        perr(ps, "more than %s rules", "65536");
        return -1;
    }
    if (ps->n_rules == ps->cap_rules) {
        int32_t cap = ps->cap_rules ? ps->cap_rules * 2 : 16;
        prule **r = realloc(ps->rules, (size_t)cap * sizeof(prule *));
        if (!r) goto oom;
        ps->rules = r, ps->cap_rules = cap;
    }
    prule *r = calloc(1, sizeof(prule));
    if (!r) goto oom;
    if (name) {
        r->name = strndup(name, len);
        if (!r->name) {
            free(r);
            goto oom;
        }
    }
    ps->rules[ps->n_rules] = r;
    return ps->n_rules++;
oom:
    perr(ps, "out of memory%s", NULL);
    return -1;
}

static int32_t rule_by_name(parser *ps, const char *name, size_t len) {
    for (int32_t i = 0; i < ps->n_rules; i++) {
        const char *n = ps->rules[i]->name;
        if (n && strlen(n) == len && !memcmp(n, name, len)) return i;
    }
    return new_rule(ps, name, len);
}

static int32_t add_set(parser *ps, const gr_set *s) {
    int32_t n1 = 0, b1 = 0;
    for (int b = 0; b < 256; b++)
        if (gr_set_has(s, (unsigned)b)) n1++, b1 = b;
    if (n1 == 1 && ps->single[b1] >= 0) return ps->single[b1];
    if (ps->n_sets == ps->cap_sets) {
        int32_t cap = ps->cap_sets ? ps->cap_sets * 2 : 64;
        gr_set *ns = realloc(ps->sets, (size_t)cap * sizeof(gr_set));
        if (!ns) {
            perr(ps, "out of memory%s", NULL);
            return -1;
        }
        ps->sets = ns, ps->cap_sets = cap;
    }
    ps->sets[ps->n_sets] = *s;
    if (n1 == 1) ps->single[b1] = ps->n_sets;
    return ps->n_sets++;
}

static bool push_byte(parser *ps, evec *v, unsigned b) {
    gr_set s = {{0}};
    gr_set_add(&s, b);
    int32_t id = add_set(ps, &s);
    return id >= 0 && push(ps, v, E_BYTES, (uint32_t)id);
}

/* ---- lexical helpers ---- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        else break;
    }
}

static size_t name_len(const char *p, const char *end) {
    size_t n = 0;
    while (p + n < end && is_name_char(p[n])) n++;
    return n;
}

/* Whether a rule definition (name ::=) starts at p. */
static bool at_rule_start(const char *p, const char *end) {
    size_t n = name_len(p, end);
    if (!n) return false;
    p += n;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return end - p >= 3 && !memcmp(p, "::=", 3);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 character (invalid bytes read as themselves). */
static uint32_t utf8_next(parser *ps) {
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)n > left) n = 1;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            n = 1, cp = c;
            break;
        }
        cp = cp << 6 | (s[i] & 0x3F);
    }
    ps->p += n;
    return cp;
}

/* One character of a literal or class, escapes decoded. */
static uint32_t read_char(parser *ps) {
    if (*ps->p != '\\') return utf8_next(ps);
    ps->p++;
    if (ps->p >= ps->end) {
        perr(ps, "unfinished escape%s", NULL);
        return 0;
    }
    char c = *ps->p++;
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: return (unsigned char)c; /* \\ \" \[ \] \- \^ and any other */
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = ps->p < ps->end ? hexval(*ps->p) : -1;
        if (h < 0) {
            perr(ps, "bad hex escape%s", NULL);
            return 0;
        }
        v = v << 4 | (uint32_t)h;
        ps->p++;
    }
    if (v > 0x10FFFF) {
        perr(ps, "code point beyond U+10FFFF%s", NULL);
        return 0;
    }
    return v;
}

static int utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- character classes -> UTF-8 byte-range sequences ---- */

typedef struct {
    uint32_t lo, hi;
} cprange;

typedef struct {
    int n;                  /* bytes */
    unsigned char lo[4], hi[4];
} u8seq;

#define MAX_SEQS 4096

typedef struct {
    u8seq *s;
    int n;
    bool overflow;
} seqlist;

/* Splits [lo, hi] into ranges whose UTF-8 encodings are byte-range
 * products (the algorithm of RE2 and Rust's utf8-ranges). */
static void utf8_ranges(uint32_t lo, uint32_t hi, seqlist *out) {
    if (lo > hi) return;
    static const uint32_t lens[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lens[i] && lens[i] < hi) {
            utf8_ranges(lo, lens[i], out);
            utf8_ranges(lens[i] + 1, hi, out);
            return;
        }
    if (hi >= 0x80)
        for (int i = 1; i < 4; i++) {
            uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if ((lo & m) != 0) {
                    utf8_ranges(lo, lo | m, out);
                    utf8_ranges((lo | m) + 1, hi, out);
                    return;
                }
                if ((hi & m) != m) {
                    utf8_ranges(lo, (hi & ~m) - 1, out);
                    utf8_ranges(hi & ~m, hi, out);
                    return;
                }
            }
        }
    if (out->n >= MAX_SEQS) {
        out->overflow = true;
        return;
    }
    u8seq *q = &out->s[out->n++];
    unsigned char a[4], b[4];
    q->n = utf8_encode(lo, a);
    utf8_encode(hi, b);
    for (int i = 0; i < q->n; i++) q->lo[i] = a[i], q->hi[i] = b[i];
}

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Adds to v the element matching one character of the code point ranges
 * r[n] (negated: the others). */
static bool push_class(parser *ps, evec *v, cprange *r, int n, bool negate) {
    qsort(r, (size_t)n, sizeof(cprange), cmp_range);
    cprange m[512 + 2];
    int nm = 0;
    for (int i = 0; i < n; i++) { /* merge */
        if (nm && r[i].lo <= m[nm - 1].hi + 1) {
            if (r[i].hi > m[nm - 1].hi) m[nm - 1].hi = r[i].hi;
        } else {
            m[nm++] = r[i];
        }
    }
    cprange f[512 + 4];
    int nf = 0;
    if (negate) {
        uint32_t at = 0;
        for (int i = 0; i < nm; i++) {
            if (m[i].lo > at) f[nf++] = (cprange){at, m[i].lo - 1};
            at = m[i].hi + 1;
        }
        if (at <= 0x10FFFF) f[nf++] = (cprange){at, 0x10FFFF};
    } else {
        memcpy(f, m, (size_t)nm * sizeof(cprange));
        nf = nm;
    }
    seqlist sl = {malloc(MAX_SEQS * sizeof(u8seq)), 0, false};
    if (!sl.s) {
        perr(ps, "out of memory%s", NULL);
        return false;
    }
    for (int i = 0; i < nf; i++) { /* surrogates have no UTF-8 form */
        uint32_t lo = f[i].lo, hi = f[i].hi;
        if (lo <= 0xDFFF && hi >= 0xD800) {
            utf8_ranges(lo, 0xD7FF < lo ? 0 : 0xD7FF, &sl);
            if (hi > 0xDFFF) utf8_ranges(lo > 0xE000 ? lo : 0xE000, hi, &sl);
        } else {
            utf8_ranges(lo, hi, &sl);
        }
    }
    bool ok = !sl.overflow;
    gr_set one = {{0}};
    int n_multi = 0;
    bool any_one = false;
    for (int i = 0; ok && i < sl.n; i++) {
        if (sl.s[i].n == 1) {
            for (unsigned b = sl.s[i].lo[0]; b <= sl.s[i].hi[0]; b++) gr_set_add(&one, b);
            any_one = true;
        } else {
            n_multi++;
        }
    }
    if (!ok) {
        perr(ps, "character class too complex%s", NULL);
    } else if (!n_multi) {
        int32_t id = add_set(ps, &one);
        ok = id >= 0 && push(ps, v, E_BYTES, (uint32_t)id);
    } else {
        int32_t rid = new_rule(ps, NULL, 0);
        ok = rid >= 0;
        evec *b = ok ? &ps->rules[rid]->body : NULL;
        if (ok && any_one) {
            int32_t id = add_set(ps, &one);
            ok = id >= 0 && push(ps, b, E_BYTES, (uint32_t)id) && push(ps, b, E_END, 0);
        }
        for (int i = 0; ok && i < sl.n; i++) {
            if (sl.s[i].n == 1) continue;
            for (int j = 0; ok && j < sl.s[i].n; j++) {
                gr_set s = {{0}};
                for (unsigned x = sl.s[i].lo[j]; x <= sl.s[i].hi[j]; x++) gr_set_add(&s, x);
                int32_t id = add_set(ps, &s);
                ok = id >= 0 && push(ps, b, E_BYTES, (uint32_t)id);
            }
            ok = ok && push(ps, b, E_END, 0);
        }
        if (ok) ps->rules[rid]->defined = true;
        ok = ok && push(ps, v, E_REF, (uint32_t)rid);
    }
    free(sl.s);
    return ok;
}

static bool parse_class(parser *ps, evec *v) {
    ps->p++; /* [ */
    bool negate = ps->p < ps->end && *ps->p == '^';
    if (negate) ps->p++;
    cprange r[512];
    int n = 0;
    while (ps->p < ps->end && *ps->p != ']') {
        uint32_t lo = read_char(ps), hi = lo;
        if (ps->failed) return false;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            hi = read_char(ps);
            if (ps->failed) return false;
            if (hi < lo) {
                perr(ps, "character range out of order%s", NULL);
                return false;
            }
        }
        if (n == 512) {
            perr(ps, "more than %s items in a character class", "512");
            return false;
        }
        r[n++] = (cprange){lo, hi};
    }
    if (ps->p >= ps->end) {
        perr(ps, "unterminated character class%s", NULL);
        return false;
    }
    ps->p++; /* ] */
    return push_class(ps, v, r, n, negate);
}

static bool parse_literal(parser *ps, evec *v) {
    ps->p++; /* " */
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\') {
            uint32_t cp = read_char(ps);
            if (ps->failed) return false;
            unsigned char b[4];
            int nb = utf8_encode(cp, b);
            for (int i = 0; i < nb; i++)
                if (!push_byte(ps, v, b[i])) return false;
        } else if (!push_byte(ps, v, (unsigned char)*ps->p++)) {
            return false;
        }
    }
    if (ps->p >= ps->end) {
        perr(ps, "unterminated string literal%s", NULL);
        return false;
    }
    ps->p++;
    return true;
}

/* ---- repetitions ---- */

/* A generated rule whose body is elems[n] then the alternatives given by
 * tail: 0: "x | (empty)", 1: "x R | (empty)" (R the rule itself). */
static int32_t rep_rule(parser *ps, gr_elem x, int32_t next) {
    int32_t rid = new_rule(ps, NULL, 0);
    if (rid < 0) return -1;
    evec *b = &ps->rules[rid]->body;
    ps->rules[rid]->defined = true;
    bool ok = push(ps, b, x.type, x.arg);
    if (next == -2) ok = ok && push(ps, b, E_REF, (uint32_t)rid); /* star */
    else if (next >= 0) ok = ok && push(ps, b, E_REF, (uint32_t)next);
    ok = ok && push(ps, b, E_END, 0) && push(ps, b, E_END, 0);
    return ok ? rid : -1;
}

static bool parse_int(parser *ps, long *out) {
    long v = 0;
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GR_MAX_REPEAT) {
            perr(ps, "repetition count above %s", "1000");
            return false;
        }
    }
    *out = v;
    return ps->p > s;
}

/* Applies a postfix operator to v's elements from `from` on. */
static bool postfix(parser *ps, evec *v, int32_t from) {
    char op = *ps->p;
    long m, n;
    if (op == '*') m = 0, n = -1;
    else if (op == '+') m = 1, n = -1;
    else if (op == '?') m = 0, n = 1;
    else {
        ps->p++; /* { */
        skip_ws(ps);
        if (!parse_int(ps, &m)) return perr(ps, "expected a count after '{'%s", NULL), false;
        skip_ws(ps);
        n = m;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            n = -1;
            if (ps->p < ps->end && *ps->p != '}' && !parse_int(ps, &n))
                return perr(ps, "expected a count or '}'%s", NULL), false;
            skip_ws(ps);
        }
        if (ps->p >= ps->end || *ps->p != '}') return perr(ps, "expected '}'%s", NULL), false;
        if (n >= 0 && n < m) return perr(ps, "repetition {m,n} with n < m%s", NULL), false;
    }
    ps->p++;
    if (from == v->n) return perr(ps, "a repetition needs something to repeat%s", NULL), false;
    if (v->n - from > 1) { /* wrap the atom into a rule */
        int32_t rid = new_rule(ps, NULL, 0);
        if (rid < 0) return false;
        evec *b = &ps->rules[rid]->body;
        ps->rules[rid]->defined = true;
        for (int32_t i = from; i < v->n; i++)
            if (!push(ps, b, v->e[i].type, v->e[i].arg)) return false;
        if (!push(ps, b, E_END, 0)) return false;
        v->n = from;
        if (!push(ps, v, E_REF, (uint32_t)rid)) return false;
    }
    gr_elem x = v->e[from];
    v->n = from;
    for (long i = 0; i < m; i++)
        if (!push(ps, v, x.type, x.arg)) return false;
    if (n < 0) {
        int32_t r = rep_rule(ps, x, -2);
        return r >= 0 && push(ps, v, E_REF, (uint32_t)r);
    }
    int32_t inner = -1;
    for (long i = 0; i < n - m; i++) {
        inner = rep_rule(ps, x, inner);
        if (inner < 0) return false;
    }
    return inner < 0 || push(ps, v, E_REF, (uint32_t)inner);
}

/* ---- sequences and alternatives ---- */

static bool parse_alternates(parser *ps, int32_t rid);

static bool parse_sequence(parser *ps, int32_t rid) {
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p == ')' || *ps->p == '|' || at_rule_start(ps->p, ps->end))
            return true;
        evec *v = &ps->rules[rid]->body;
        int32_t from = v->n;
        char c = *ps->p;
        bool ok;
        if (c == '"') {
            ok = parse_literal(ps, v);
        } else if (c == '[') {
            ok = parse_class(ps, v);
        } else if (c == '.') {
            ps->p++;
            cprange any = {0, 0x10FFFF};
            ok = push_class(ps, v, &any, 1, false);
        } else if (c == '(') {
            if (++ps->depth > 256) return perr(ps, "groups nested too deep%s", NULL), false;
            ps->p++;
            int32_t g = new_rule(ps, NULL, 0);
            ok = g >= 0 && parse_alternates(ps, g);
            ps->depth--;
            if (!ok) return false;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ')') return perr(ps, "expected ')'%s", NULL), false;
            ps->p++;
            ps->rules[g]->defined = true;
            v = &ps->rules[rid]->body;
            ok = push(ps, v, E_REF, (uint32_t)g);
        } else if (is_name_char(c)) {
            size_t n = name_len(ps->p, ps->end);
            int32_t r = rule_by_name(ps, ps->p, n);
            ps->p += n;
            v = &ps->rules[rid]->body;
            ok = r >= 0 && push(ps, v, E_REF, (uint32_t)r);
        } else {
            char what[8];
            snprintf(what, sizeof(what), "%c", c);
            perr(ps, "unexpected '%s'", (unsigned char)c >= 0x20 && c != 0x7F ? what : "?");
            return false;
        }
        if (!ok) return false;
        v = &ps->rules[rid]->body;
        if (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' || *ps->p == '{'))
            if (!postfix(ps, v, from)) return false;
    }
}

static bool parse_alternates(parser *ps, int32_t rid) {
    if (!parse_sequence(ps, rid)) return false;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        if (!push(ps, &ps->rules[rid]->body, E_END, 0) || !parse_sequence(ps, rid)) return false;
    }
    return push(ps, &ps->rules[rid]->body, E_END, 0);
}

/* ---- checks ---- */

/* Left recursion: a rule reaching itself through references in first
 * position (after nullable ones). state: 0 unvisited, 1 on the path, 2 done. */
static int32_t left_cycle(parser *ps, int32_t r, const bool *nullable, uint8_t *state, int depth) {
    if (state[r] == 1) return r;
    if (state[r] == 2) return -1;
    if (depth > 100000) return r;
    state[r] = 1;
    const evec *b = &ps->rules[r]->body;
    bool at_start = true;
    for (int32_t i = 0; i < b->n; i++) {
        gr_elem x = b->e[i];
        if (x.type == E_END) {
            at_start = true;
            continue;
        }
        if (!at_start) continue;
        if (x.type == E_BYTES) {
            at_start = false;
        } else {
            int32_t c = left_cycle(ps, (int32_t)x.arg, nullable, state, depth + 1);
            if (c >= 0) return c;
            at_start = nullable[x.arg];
        }
    }
    state[r] = 2;
    return -1;
}

static bool check(parser *ps) {
    for (int32_t i = 0; i < ps->n_rules; i++)
        if (!ps->rules[i]->defined) {
            ps->p = ps->end;
            perr(ps, "undefined rule '%.60s'", ps->rules[i]->name);
            return false;
        }
    bool *nullable = calloc((size_t)ps->n_rules, sizeof(bool));
    uint8_t *state = calloc((size_t)ps->n_rules, 1);
    if (!nullable || !state) {
        free(nullable), free(state);
        perr(ps, "out of memory%s", NULL);
        return false;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < ps->n_rules; r++) {
            if (nullable[r]) continue;
            const evec *b = &ps->rules[r]->body;
            bool ok = true, any = false; /* some alternative has only nullable elements */
            for (int32_t i = 0; i < b->n && !any; i++) {
                gr_elem x = b->e[i];
                if (x.type == E_END) {
                    any = ok;
                    ok = true;
                } else if (x.type == E_BYTES || !nullable[x.arg]) {
                    ok = false;
                }
            }
            if (any) nullable[r] = changed = true;
        }
    }
    int32_t bad = -1;
    for (int32_t r = 0; r < ps->n_rules && bad < 0; r++) bad = left_cycle(ps, r, nullable, state, 0);
    free(nullable);
    free(state);
    if (bad >= 0) {
        ps->p = ps->end;
        /* name the nearest named rule: generated ones are anonymous */
        perr(ps, "left recursion: rule '%.60s' can reach itself without consuming input",
             ps->rules[bad]->name ? ps->rules[bad]->name : "(a group or repetition)");
        return false;
    }
    return true;
}

static sp_grammar *flatten(parser *ps, int32_t root) {
    sp_grammar *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->refs = 1;
    pthread_mutex_init(&g->shared_mu, NULL);
    g->n_rules = ps->n_rules;
    int32_t n_el = 0, n_alt = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) {
        n_el += ps->rules[r]->body.n;
        for (int32_t i = 0; i < ps->rules[r]->body.n; i++) n_alt += ps->rules[r]->body.e[i].type == E_END;
    }
    g->el = malloc((size_t)SP_MAX(n_el, 1) * sizeof(gr_elem));
    g->alt = malloc((size_t)SP_MAX(n_alt, 1) * sizeof(int32_t));
    g->alt_off = malloc((size_t)(ps->n_rules + 1) * sizeof(int32_t));
    g->sets = malloc((size_t)SP_MAX(ps->n_sets, 1) * sizeof(gr_set));
    if (!g->el || !g->alt || !g->alt_off || !g->sets) {
        sp_grammar_free(g);
        return NULL;
    }
    int32_t e = 0, a = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) {
        g->alt_off[r] = a;
        const evec *b = &ps->rules[r]->body;
        bool start = true;
        for (int32_t i = 0; i < b->n; i++) {
            if (start) g->alt[a++] = e;
            g->el[e++] = b->e[i];
            start = b->e[i].type == E_END;
        }
    }
    g->alt_off[ps->n_rules] = a;
    g->n_el = e;
    if (ps->n_sets) memcpy(g->sets, ps->sets, (size_t)ps->n_sets * sizeof(gr_set));
    g->n_sets = ps->n_sets;
    g->root = root;
    return g;
}

sp_grammar *sp_grammar_compile(const char *text, size_t len, char *err, size_t errlen) {
    if (!text) {
        sp_seterr(err, errlen, "grammar: no text");
        return NULL;
    }
    if (!len) len = strlen(text);
    parser ps = {.src = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    for (int i = 0; i < 256; i++) ps.single[i] = -1;
    sp_grammar *g = NULL;
    skip_ws(&ps);
    while (!ps.failed && ps.p < ps.end) {
        size_t n = name_len(ps.p, ps.end);
        if (!n) {
            perr(&ps, "expected a rule name%s", NULL);
            break;
        }
        int32_t r = rule_by_name(&ps, ps.p, n);
        if (r < 0) break;
        if (ps.rules[r]->defined) {
            perr(&ps, "rule '%.60s' defined twice", ps.rules[r]->name);
            break;
        }
        ps.p += n;
        while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\t')) ps.p++;
        if (ps.end - ps.p < 3 || memcmp(ps.p, "::=", 3)) {
            perr(&ps, "expected '::='%s", NULL);
            break;
        }
        ps.p += 3;
        if (!parse_alternates(&ps, r)) break;
        ps.rules[r]->defined = true;
        skip_ws(&ps);
        if (ps.p < ps.end && !at_rule_start(ps.p, ps.end)) {
            perr(&ps, "unexpected '%s'", *ps.p == ')' ? ")" : "text");
            break;
        }
    }
    int32_t root = -1;
    for (int32_t i = 0; !ps.failed && i < ps.n_rules; i++)
        if (ps.rules[i]->name && !strcmp(ps.rules[i]->name, "root")) root = i;
    if (!ps.failed && root < 0) {
        ps.p = ps.end;
        perr(&ps, "no rule named 'root'%s", NULL);
    }
    if (!ps.failed && check(&ps)) {
        g = flatten(&ps, root);
        if (!g) sp_seterr(err, errlen, "grammar: out of memory");
    }
    for (int32_t i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i]->name);
        free(ps.rules[i]->body.e);
        free(ps.rules[i]);
    }
    free(ps.rules);
    free(ps.sets);
    return g;
}

void gr_retain(const sp_grammar *g) {
    __atomic_add_fetch(&((sp_grammar *)g)->refs, 1, __ATOMIC_RELAXED);
}

void sp_grammar_free(sp_grammar *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    free(g->el);
    free(g->alt);
    free(g->alt_off);
    free(g->sets);
    gr_shared_free(g->shared);
    pthread_mutex_destroy(&g->shared_mu);
    free(g);
}
