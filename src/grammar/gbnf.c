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
 * recursive (which would make the matcher expand forever; gbnf_check.c),
 * and lays the rules out flat.
 *
 * Cost: linear in the text and in the elements made, which the limits of
 * grammar.h bound (a {m,n} costs at most about 4 * GR_MAX_REPEAT elements,
 * nested or not: what it repeats is always one element). Rule names are
 * found through a hash table, nullable rules through a worklist, left
 * recursion through a depth-first walk on an explicit stack: no step is
 * quadratic, and no C recursion is deeper than GR_MAX_NEST groups. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common.h"
#include "grammar/gbnf_internal.h"

/* Groups nested deeper are refused: parse_alternates and parse_sequence
 * recurse once per level, a few hundred bytes of stack each. */
#define GR_MAX_NEST 256

/* The first error, with its place (a scan of the text: once per compile). */
static void perr_in(parser *ps, const char *head, const char *msg) {
    if (ps->failed) return;
    ps->failed = true;
    int line = 1, col = 1;
    for (const char *q = ps->src; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    seterr(ps->err, ps->errlen, "%s %s at line %d, column %d", head, msg, line, col);
}

void gb_perr(parser *ps, const char *fmt, const char *arg) {
    char msg[160];
    snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
    perr_in(ps, "grammar:", msg);
}

/* A limit of grammar.h exceeded: the message names it. */
static bool too_large(parser *ps, long limit, const char *what) {
    char msg[160];
    snprintf(msg, sizeof(msg), "more than %ld %s", limit, what);
    perr_in(ps, "grammar too large:", msg);
    return false;
}

static bool push(parser *ps, evec *v, int type, uint32_t arg) {
    if (++ps->n_elems > GR_MAX_ELEMS) return too_large(ps, GR_MAX_ELEMS, "elements");
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 8;
        gr_elem *e = realloc(v->e, (size_t)cap * sizeof(gr_elem));
        if (!e) {
            gb_perr(ps, "out of memory%s", NULL);
            return false;
        }
        v->e = e, v->cap = cap;
    }
    v->e[v->n++] = (gr_elem){(uint32_t)type, arg};
    return true;
}

static int32_t new_rule(parser *ps, const char *name, size_t len) {
    if (ps->n_rules >= GR_MAX_RULES) return too_large(ps, GR_MAX_RULES, "rules"), -1;
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
        r->name_len = len;
        if (!r->name) {
            free(r);
            goto oom;
        }
    }
    ps->rules[ps->n_rules] = r;
    return ps->n_rules++;
oom:
    gb_perr(ps, "out of memory%s", NULL);
    return -1;
}

/* ---- rule names: a hash table ----
 * Open addressing, at most half full: a lookup costs O(1 + name length)
 * expected. The key is random per compile (SipHash-1-3), so that a grammar
 * cannot be written to make every name collide and the lookups quadratic. */

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4]) {
    v[0] += v[1], v[1] = ROTL64(v[1], 13), v[1] ^= v[0], v[0] = ROTL64(v[0], 32);
    v[2] += v[3], v[3] = ROTL64(v[3], 16), v[3] ^= v[2];
    v[0] += v[3], v[3] = ROTL64(v[3], 21), v[3] ^= v[0];
    v[2] += v[1], v[1] = ROTL64(v[1], 17), v[1] ^= v[2], v[2] = ROTL64(v[2], 32);
}

static uint64_t name_hash(const uint64_t k[2], const char *s, size_t n) {
    uint64_t v[4] = {k[0] ^ 0x736f6d6570736575ull, k[1] ^ 0x646f72616e646f6dull,
                     k[0] ^ 0x6c7967656e657261ull, k[1] ^ 0x7465646279746573ull};
    uint64_t last = (uint64_t)n << 56, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        v[3] ^= w, sip_round(v), v[0] ^= w;
    }
    for (size_t j = 0; i + j < n; j++) last |= (uint64_t)(unsigned char)s[i + j] << (8 * j);
    v[3] ^= last, sip_round(v), v[0] ^= last;
    v[2] ^= 0xff;
    sip_round(v), sip_round(v), sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* A random key (getrandom; the clock and an address where it fails: the
 * key only spreads the names, any value gives the same grammar). */
static void names_key(parser *ps) {
    if (getrandom(ps->key, sizeof(ps->key), GRND_NONBLOCK) == (ssize_t)sizeof(ps->key)) return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ps->key[0] = (uint64_t)t.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)ps;
    ps->key[1] = (uint64_t)t.tv_sec ^ (uint64_t)(uintptr_t)&t;
}

/* The slot of name: the one holding its rule, or the empty one where it goes. */
static uint32_t name_slot(const parser *ps, const char *name, size_t len) {
    const uint32_t mask = ps->names_cap - 1;
    uint32_t i = (uint32_t)name_hash(ps->key, name, len) & mask;
    for (;; i = (i + 1) & mask) {
        const int32_t r = ps->names[i];
        if (r < 0) return i;
        const prule *p = ps->rules[r];
        if (p->name_len == len && !memcmp(p->name, name, len)) return i;
    }
}

/* Doubles the table (or makes it) when half full: amortized O(1) a name. */
static bool names_grow(parser *ps) {
    if ((uint32_t)ps->n_names * 2 < ps->names_cap) return true;
    const uint32_t old_cap = ps->names_cap;
    int32_t *old = ps->names;
    ps->names_cap = old_cap ? old_cap * 2 : 64;
    ps->names = malloc(ps->names_cap * sizeof(int32_t));
    if (!ps->names) {
        ps->names = old, ps->names_cap = old_cap;
        gb_perr(ps, "out of memory%s", NULL);
        return false;
    }
    memset(ps->names, 0xff, ps->names_cap * sizeof(int32_t));
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i] >= 0) {
            const prule *p = ps->rules[old[i]];
            ps->names[name_slot(ps, p->name, p->name_len)] = old[i];
        }
    free(old);
    return true;
}

/* The rule named name[len], made (undefined) at its first mention. */
static int32_t rule_by_name(parser *ps, const char *name, size_t len) {
    if (!names_grow(ps)) return -1;
    const uint32_t i = name_slot(ps, name, len);
    if (ps->names[i] >= 0) return ps->names[i];
    const int32_t r = new_rule(ps, name, len);
    if (r >= 0) ps->names[i] = r, ps->n_names++;
    return r;
}

static int32_t add_set(parser *ps, const gr_set *s) {
    int32_t n1 = 0, b1 = 0;
    for (int w = 0; w < 8; w++)
        if (s->w[w]) n1 += __builtin_popcount(s->w[w]), b1 = w * 32 + __builtin_ctz(s->w[w]);
    if (n1 == 1 && ps->single[b1] >= 0) return ps->single[b1];
    if (ps->n_sets == ps->cap_sets) {
        int32_t cap = ps->cap_sets ? ps->cap_sets * 2 : 64;
        gr_set *ns = realloc(ps->sets, (size_t)cap * sizeof(gr_set));
        if (!ns) {
            gb_perr(ps, "out of memory%s", NULL);
            return -1;
        }
        ps->sets = ns, ps->cap_sets = cap;
    }
    ps->sets[ps->n_sets] = *s;
    if (n1 == 1) ps->single[b1] = ps->n_sets;
    return ps->n_sets++;
}

static bool push_byte(parser *ps, evec *v, unsigned b) {
    if (ps->single[b] >= 0) return push(ps, v, E_BYTES, (uint32_t)ps->single[b]);
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
        gb_perr(ps, "unfinished escape%s", NULL);
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
            gb_perr(ps, "bad hex escape%s", NULL);
            return 0;
        }
        v = v << 4 | (uint32_t)h;
        ps->p++;
    }
    if (v > 0x10FFFF) {
        gb_perr(ps, "code point beyond U+10FFFF%s", NULL);
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
        gb_perr(ps, "out of memory%s", NULL);
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
        gb_perr(ps, "character class too complex%s", NULL);
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
                gb_perr(ps, "character range out of order%s", NULL);
                return false;
            }
        }
        if (n == 512) {
            gb_perr(ps, "more than %s items in a character class", "512");
            return false;
        }
        r[n++] = (cprange){lo, hi};
    }
    if (ps->p >= ps->end) {
        gb_perr(ps, "unterminated character class%s", NULL);
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
        gb_perr(ps, "unterminated string literal%s", NULL);
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
            gb_perr(ps, "repetition count above %s", "1000");
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
        if (!parse_int(ps, &m)) return gb_perr(ps, "expected a count after '{'%s", NULL), false;
        skip_ws(ps);
        n = m;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            n = -1;
            if (ps->p < ps->end && *ps->p != '}' && !parse_int(ps, &n))
                return gb_perr(ps, "expected a count or '}'%s", NULL), false;
            skip_ws(ps);
        }
        if (ps->p >= ps->end || *ps->p != '}') return gb_perr(ps, "expected '}'%s", NULL), false;
        if (n >= 0 && n < m) return gb_perr(ps, "repetition {m,n} with n < m%s", NULL), false;
    }
    ps->p++;
    if (from == v->n) return gb_perr(ps, "a repetition needs something to repeat%s", NULL), false;
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
            if (++ps->depth > GR_MAX_NEST) return too_large(ps, GR_MAX_NEST, "nested groups");
            ps->p++;
            int32_t g = new_rule(ps, NULL, 0);
            ok = g >= 0 && parse_alternates(ps, g);
            ps->depth--;
            if (!ok) return false;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ')') return gb_perr(ps, "expected ')'%s", NULL), false;
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
            gb_perr(ps, "unexpected '%s'", (unsigned char)c >= 0x20 && c != 0x7F ? what : "?");
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

/* ---- the flat layout ---- */

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
    return gr_compile(text, len, NULL, err, errlen);
}

sp_grammar *gr_compile(const char *text, size_t len, bool *left_recursive, char *err,
                       size_t errlen) {
    if (left_recursive) *left_recursive = false;
    if (!text) {
        seterr(err, errlen, "grammar: no text");
        return NULL;
    }
    if (!len) len = strlen(text);
    parser ps = {.src = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    for (int i = 0; i < 256; i++) ps.single[i] = -1;
    names_key(&ps);
    sp_grammar *g = NULL;
    skip_ws(&ps);
    while (!ps.failed && ps.p < ps.end) {
        size_t n = name_len(ps.p, ps.end);
        if (!n) {
            gb_perr(&ps, "expected a rule name%s", NULL);
            break;
        }
        int32_t r = rule_by_name(&ps, ps.p, n);
        if (r < 0) break;
        if (ps.rules[r]->defined) {
            gb_perr(&ps, "rule '%.60s' defined twice", ps.rules[r]->name);
            break;
        }
        ps.p += n;
        while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\t')) ps.p++;
        if (ps.end - ps.p < 3 || memcmp(ps.p, "::=", 3)) {
            gb_perr(&ps, "expected '::='%s", NULL);
            break;
        }
        ps.p += 3;
        if (!parse_alternates(&ps, r)) break;
        ps.rules[r]->defined = true;
        skip_ws(&ps);
        if (ps.p < ps.end && !at_rule_start(ps.p, ps.end)) {
            gb_perr(&ps, "unexpected '%s'", *ps.p == ')' ? ")" : "text");
            break;
        }
    }
    int32_t root = -1;
    if (!ps.failed && ps.names) root = ps.names[name_slot(&ps, "root", 4)];
    if (!ps.failed && root < 0) {
        ps.p = ps.end;
        gb_perr(&ps, "no rule named 'root'%s", NULL);
    }
    if (!ps.failed && gb_check(&ps)) {
        g = flatten(&ps, root);
        if (!g) seterr(err, errlen, "grammar: out of memory");
    }
    for (int32_t i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i]->name);
        free(ps.rules[i]->body.e);
        free(ps.rules[i]);
    }
    free(ps.rules);
    free(ps.sets);
    free(ps.names);
    if (left_recursive) *left_recursive = ps.left_recursive;
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
