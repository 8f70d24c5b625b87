/* schema.c: JSON Schema -> GBNF (the subset specula.h lists).
 *
 * Each (sub)schema becomes one rule rN; the JSON primitives are fixed rules
 * appended to every grammar (PRIMITIVES). Objects list their properties in
 * the schema's order, required ones first, then each optional one as an
 * optional ", key: value" (with no required property, the first present
 * one has no comma: one alternative per choice of first). A $ref is one
 * rule per target, made once, so recursive schemas are recursive rules.
 *
 * Cost: each subschema is converted once (a $ref target once more at
 * most, whatever the number of references; the types of a "type" array are
 * distinct), so the work is linear in the schema (a "required" list is
 * matched against at most 256 properties), except where a keyword asks for
 * more text than it takes (numeric bounds: up to 3 rules per digit of a
 * bound, a few KB at most, "numeric bounds" below). The
 * text made is counted as it is made, and the conversion stops with an
 * error naming MAX_OUT once it would pass it; the compiler's own limits
 * (grammar.h) then bound what the repetitions ({m,n}) expand to. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "grammar/grammar.h"
#include "specula.h"

#define MAX_DEPTH 64
/* The grammar's text at most: as large as a grammar a request may give. */
#define MAX_OUT (1u << 20)

/* the JSON value grammar every schema's rules build on (and json_object mode) */
#define JSON_PRIMITIVES \
    "space ::= \" \"?\n" \
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n" \
    "string ::= \"\\\"\" char* \"\\\"\" space\n" \
    "integral-part ::= [0] | [1-9] [0-9]{0,15}\n" \
    "integer ::= \"-\"? integral-part space\n" \
    "number ::= \"-\"? integral-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? space\n" \
    "boolean ::= (\"true\" | \"false\") space\n" \
    "null ::= \"null\" space\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "object ::= \"{\" space (string \":\" space value (\",\" space string \":\" space value)*)? \"}\" space\n" \
    "array ::= \"[\" space (value (\",\" space value)*)? \"]\" space\n"
static const char PRIMITIVES[] = JSON_PRIMITIVES;

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;   /* out of memory: what was appended since is lost */
    bool over;  /* MAX_OUT reached: the same */
} buf;

static void bput(buf *b, const char *s, size_t n) {
    if (b->oom || b->over) return;
    if (b->n + n > MAX_OUT) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void bprintf(buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) bput(b, tmp, (size_t)SP_MIN(n, (int)sizeof(tmp) - 1));
}

/* A GBNF literal of raw text. */
static void blit(buf *b, const char *s) {
    bput(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            bput(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            bprintf(b, "\\x%02X", c);
        } else {
            bput(b, (const char *)&c, 1);
        }
    }
    bput(b, "\"", 1);
}

typedef struct {
    buf out;
    const cJSON *root;
    int n_rules;
    const char *refs[256];   /* $ref targets made, and their rules */
    int ref_rule[256];
    int n_refs;
    char *err;
    size_t errlen;
    bool failed;
    int status; /* the first failure's: SP_ERR_INVALID, _UNSUPPORTED or _NOMEM */
} conv;

static int vfail(conv *c, int status, const char *fmt, va_list ap) {
    if (!c->failed) {
        char msg[300];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        seterr(c->err, c->errlen, "%s", msg);
        c->status = status;
    }
    c->failed = true;
    return -1;
}

/* The schema is wrong (or over a limit). */
static int fail(conv *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, SP_ERR_INVALID, fmt, ap);
    va_end(ap);
    return -1;
}

/* The schema is valid JSON Schema outside the supported subset. */
static int unsupported(conv *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, SP_ERR_UNSUPPORTED, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(conv *c) {
    c->failed = false; /* out of memory wins over an earlier failure */
    fail(c, "out of memory");
    c->status = SP_ERR_NOMEM;
    return -1;
}

static int gen(conv *c, const cJSON *s, const char *path, int depth);

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description",
    "default", "examples", "format", "$schema", "$id", "$comment", "strict", "pattern", "multipleOf", NULL};

static bool num_of(const cJSON *s, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!cJSON_IsNumber(x)) return false;
    *v = x->valuedouble;
    return true;
}

/* A new rule number; the caller writes "rN ::= ...\n" into a body buffer. */
static int new_rule(conv *c) { return c->n_rules++; }

/* A limit met while writing out: the conversion stops (a schema could
 * otherwise ask for more work than its size, as an anyOf of bounded numbers). */
static void check_out(conv *c, const buf *b) {
    if (b->over)
        fail(c, "the schema's grammar is larger than %u bytes (the limit of a grammar)", MAX_OUT);
    else if (b->oom)
        oom(c);
}

static void emit(conv *c, int id, buf *body) {
    bprintf(&c->out, "r%d ::= ", id);
    bput(&c->out, body->s ? body->s : "", body->n);
    bput(&c->out, "\n", 1);
    check_out(c, body);
    check_out(c, &c->out);
    free(body->s);
}

static const char *prim_name(int code);

/* The rule name of gen's result: rN, or a primitive's name. */
static void rule_name(char out[32], int id) {
    if (id >= 0) snprintf(out, 32, "r%d", id);
    else snprintf(out, 32, "%s", prim_name(id));
}

/* Properties all optional, kept in order: the first present one has no
 * comma. tail[i] ::= ("," space kv[i])? tail[i+1] holds what may follow
 * the first, so the choice of first is one alternative each: n rules of
 * constant size, where writing each alternative's optional rest out would
 * be n^2 / 2 groups (and 256 properties would pass GR_MAX_RULES). */
static void optional_props(conv *c, const int *kv, int n, buf *b) {
    int tail[256];
    for (int i = n - 1; i >= 1; i--) {
        buf t = {0};
        bprintf(&t, "(\",\" space r%d)?", kv[i]);
        if (i + 1 < n) bprintf(&t, " r%d", tail[i + 1]);
        tail[i] = new_rule(c);
        emit(c, tail[i], &t);
    }
    bprintf(b, "(");
    for (int i = 0; i < n; i++) {
        bprintf(b, i ? " | r%d" : "r%d", kv[i]);
        if (i + 1 < n) bprintf(b, " r%d", tail[i + 1]);
    }
    bprintf(b, ")? ");
}

static int gen_object(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' at %s must be an object", path);
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' at %s must be an array", path);
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' at %s must be a boolean or a schema", path);
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (!n) { /* a map: values of additionalProperties' schema (any when absent or true) */
        int v = -7;
        if (cJSON_IsObject(addl)) {
            char p[256];
            snprintf(p, sizeof(p), "%s/additionalProperties", path);
            v = gen(c, addl, p, depth + 1);
            if (c->failed) return -1;
        }
        buf b = {0};
        char val[32];
        rule_name(val, v);
        if (cJSON_IsFalse(addl))
            bprintf(&b, "\"{\" space \"}\" space");
        else
            bprintf(&b, "\"{\" space (string \":\" space %s (\",\" space string \":\" space %s)*)? \"}\" space",
                    val, val);
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    if (n > 256) return fail(c, "more than 256 properties at %s", path);
    int vrule[256];
    bool isreq[256];
    const char *key[256];
    int i = 0, n_req = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char sub[256];
        snprintf(sub, sizeof(sub), "%s/properties/%.64s", path, p->string);
        vrule[i] = gen(c, p, sub, depth + 1);
        if (c->failed) return -1;
        key[i] = p->string;
        isreq[i] = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string)) isreq[i] = true;
        n_req += isreq[i];
        i++;
    }
    /* one rule per "key": value pair */
    int kv[256];
    for (i = 0; i < n; i++) {
        buf b = {0};
        cJSON *k = cJSON_CreateString(key[i]);
        char *ks = k ? cJSON_PrintUnformatted(k) : NULL;
        cJSON_Delete(k);
        if (!ks) return oom(c);
        blit(&b, ks);
        free(ks);
        char vn[32];
        rule_name(vn, vrule[i]);
        bprintf(&b, " space \":\" space %s", vn);
        kv[i] = new_rule(c);
        emit(c, kv[i], &b);
    }
    buf b = {0};
    bprintf(&b, "\"{\" space ");
    if (n_req) {
        bool first = true;
        for (i = 0; i < n; i++)
            if (isreq[i]) {
                bprintf(&b, first ? "r%d " : "\",\" space r%d ", kv[i]);
                first = false;
            }
        for (i = 0; i < n; i++)
            if (!isreq[i]) bprintf(&b, "(\",\" space r%d)? ", kv[i]);
    } else {
        optional_props(c, kv, n, &b);
    }
    bprintf(&b, "\"}\" space");
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_array(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int it = -7;
    if (items) {
        if (!cJSON_IsObject(items) && !cJSON_IsBool(items))
            return (cJSON_IsArray(items) ? unsupported : fail)(
                c, "'items' at %s must be a schema (tuple forms are not supported)", path);
        char p[256];
        snprintf(p, sizeof(p), "%s/items", path);
        it = gen(c, items, p, depth + 1);
        if (c->failed) return -1;
    }
    double mn = 0, mx = -1;
    num_of(s, "minItems", &mn);
    num_of(s, "maxItems", &mx);
    if (mn < 0 || mn > 1000 || mn != floor(mn)) return fail(c, "minItems at %s must be in 0..1000", path);
    if (mx > 1000 || (mx >= 0 && mx != floor(mx))) mx = -1; /* beyond the grammar's repetition limit: unbounded */
    if (mx >= 0 && mx < mn) return fail(c, "maxItems < minItems at %s", path);
    char iv[32];
    rule_name(iv, it);
    buf b = {0};
    bprintf(&b, "\"[\" space ");
    char rep[48];
    if (mx < 0) snprintf(rep, sizeof(rep), "{%d,}", mn > 1 ? (int)mn - 1 : 0);
    else snprintf(rep, sizeof(rep), "{%d,%d}", mn > 1 ? (int)mn - 1 : 0, (int)mx - 1);
    if (mx == 0) {
    } else if (mn == 0) {
        bprintf(&b, "(%s (\",\" space %s)%s)? ", iv, iv, rep);
    } else {
        bprintf(&b, "%s (\",\" space %s)%s ", iv, iv, rep);
    }
    bprintf(&b, "\"]\" space");
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* A string matching a pattern (grammar/regex.c). minLength and maxLength
 * are taken when the pattern bounds the length within them by itself (as
 * "^[A-Z]{3}$" with maxLength 3): the grammar cannot intersect them. */
static int gen_pattern(conv *c, const cJSON *pat, double mn, double mx, const char *path) {
    if (!cJSON_IsString(pat)) return fail(c, "'pattern' at %s must be a string", path);
    sbuf g = {0};
    double lo, hi;
    char err[200];
    const int rc = gr_pattern_gbnf(pat->valuestring, &g, &lo, &hi, err, sizeof(err));
    if (rc) {
        sb_free(&g);
        if (rc == SP_ERR_NOMEM) return oom(c);
        return (rc == SP_ERR_UNSUPPORTED ? unsupported : fail)(c, "%s at %s", err, path[0] ? path : "/");
    }
    if (lo < mn || (mx >= 0 && (hi < 0 || hi > mx))) {
        sb_free(&g);
        return unsupported(c, "unsupported combination of 'pattern' with minLength/maxLength at %s (the "
                    "pattern's own lengths must lie within them)", path[0] ? path : "/");
    }
    buf b = {0};
    bprintf(&b, "\"\\\"\" ");
    bput(&b, g.p, g.len);
    bprintf(&b, " \"\\\"\" space");
    sb_free(&g);
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_string(conv *c, const cJSON *s, const char *path) {
    double mn = 0, mx = -1;
    num_of(s, "minLength", &mn);
    num_of(s, "maxLength", &mx);
    if (mn < 0 || mn > 1000 || mn != floor(mn)) return fail(c, "minLength at %s must be in 0..1000", path);
    if (mx > 1000 || (mx >= 0 && mx != floor(mx))) mx = -1;
    if (mx >= 0 && mx < mn) return fail(c, "maxLength < minLength at %s", path);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (pat) return gen_pattern(c, pat, mn, mx, path);
    if (mn == 0 && mx < 0) return -2; /* the primitive */
    buf b = {0};
    if (mx < 0) bprintf(&b, "\"\\\"\" char{%d,} \"\\\"\" space", (int)mn);
    else bprintf(&b, "\"\\\"\" char{%d,%d} \"\\\"\" space", (int)mn, (int)mx);
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* ---- numeric bounds ----
 *
 * A bounded integer or number is its digits compared with the bounds, as
 * llama.cpp's _build_min_max_int does for integers. Each value x is read
 * scaled, x * 10^F as an integer (F = 0 for integers, NUM_FRAC for
 * numbers), so every bound becomes inclusive: a lower bound rounds up, an
 * upper one down, an exclusive one steps one unit (10^-F) inward when the
 * rounding did not already. The grammar then writes sign, integer part
 * and fraction: the integer part is compared by length, then digit by
 * digit; the fraction (up to F digits, trailing zeros allowed) digit by
 * digit as if padded with zeros. A bound is the shortest decimal that
 * reads back as its double ("0.1" is 1/10, not the double next to it), and
 * the comparison with it is exact. Forms: no exponent, no "-0" (nor
 * "-0.0"), no leading zeros; the integer part has at most NUM_INT digits
 * on an unbounded side (or the bound's digits). A bound of 2^63 or more in
 * magnitude leaves that side unbounded when it loosens it (a minimum
 * below -2^63, a maximum above 2^63) and is refused when it tightens it.
 * The rules are linear in the digits (3 per digit and bound at most). */

#define NUM_FRAC 16 /* a bounded number's fraction digits at most (as the number primitive) */
#define NUM_INT 16  /* integer digits at most on an unbounded side (as integral-part) */
#define NUM_DIG 48  /* a scaled bound's digits: < 2^63 * 10^16, 35 digits */

typedef struct {
    bool set, neg;     /* unset: unbounded; the sign of a non-zero value */
    char mag[NUM_DIG]; /* |x| * 10^F in decimal, no leading zero ("0" for zero) */
} nbound;

static bool all_of(const char *s, char ch) {
    for (; *s; s++)
        if (*s != ch) return false;
    return true;
}

static int mag_cmp(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    const int r = strcmp(a, b);
    return (r > 0) - (r < 0);
}

static void mag_inc(char *a) {
    const size_t n = strlen(a);
    size_t i = n;
    while (i > 0 && a[i - 1] == '9') a[--i] = '0';
    if (i > 0) {
        a[i - 1]++;
    } else {
        memmove(a + 1, a, n + 1);
        a[0] = '1';
    }
}

/* a > 0 */
static void mag_dec(char *a) {
    const size_t n = strlen(a);
    size_t i = n;
    while (a[i - 1] == '0') a[--i] = '9';
    a[i - 1]--;
    if (a[0] == '0' && n > 1) memmove(a, a + 1, n);
}

static int nb_cmp(const nbound *a, const nbound *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    const int r = mag_cmp(a->mag, b->mag);
    return a->neg ? -r : r;
}

/* x + dir units */
static void nb_step(nbound *x, int dir) {
    if (x->neg == (dir < 0)) {
        mag_inc(x->mag);
    } else if (!strcmp(x->mag, "0")) {
        strcpy(x->mag, "1");
        x->neg = dir < 0;
    } else {
        mag_dec(x->mag);
        if (!strcmp(x->mag, "0")) x->neg = false;
    }
}

/* v * 10^F, v read as the shortest decimal that reads back as it, rounded
 * up or down to an integer; *exact: nothing was rounded off. False when
 * |v| >= 2^63 (or v is not finite). */
static bool nb_from(double v, int F, bool up, nbound *x, bool *exact) {
    const double a = fabs(v);
    if (!(a < 9223372036854775808.0)) return false;
    char t[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof(t), "%.*e", p - 1, a);
        if (strtod(t, NULL) == a) break;
    }
    char dig[32];
    int nd = 0;
    const char *q = t;
    for (; *q && *q != 'e' && nd < 30; q++)
        if (*q >= '0' && *q <= '9') dig[nd++] = *q;
    const int e = *q == 'e' ? atoi(q + 1) : 0;
    const int sh = e - (nd - 1) + F; /* a * 10^F = dig * 10^sh */
    bool inexact = false;
    int n = 0;
    for (int i = 0; i < nd; i++) {
        if (i < nd + sh) x->mag[n++] = dig[i];
        else inexact |= dig[i] != '0';
    }
    for (int i = 0; i < sh && n < NUM_DIG - 2; i++) x->mag[n++] = '0';
    x->mag[n] = 0;
    int z = 0;
    while (x->mag[z] == '0') z++;
    memmove(x->mag, x->mag + z, (size_t)(n - z + 1));
    if (!x->mag[0]) strcpy(x->mag, "0");
    x->neg = v < 0;
    if (inexact && up != x->neg) mag_inc(x->mag); /* away from zero */
    if (!strcmp(x->mag, "0")) x->neg = false;
    x->set = true;
    *exact = !inexact;
    return true;
}

/* The bounds at s as inclusive scaled values (unset: none): minimum,
 * exclusiveMinimum, maximum, exclusiveMaximum, with numbers or as draft-04
 * writes them (exclusiveMinimum: true beside minimum); the tighter wins. */
static int read_bounds(conv *c, const cJSON *s, int F, const char *path, nbound *lo, nbound *hi) {
    static const struct {
        const char *kw, *draft4;
        bool upper;
    } K[] = {{"minimum", "exclusiveMinimum", false},
             {"exclusiveMinimum", NULL, false},
             {"maximum", "exclusiveMaximum", true},
             {"exclusiveMaximum", NULL, true}};
    const char *where = path[0] ? path : "/";
    for (int i = 0; i < 4; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, K[i].kw);
        if (!x) continue;
        if (!cJSON_IsNumber(x)) {
            if (!K[i].draft4 && cJSON_IsBool(x)) continue; /* draft-04: read with its minimum/maximum */
            return fail(c, "'%s' at %s must be a number", K[i].kw, where);
        }
        const bool excl = !K[i].draft4 || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, K[i].draft4));
        nbound b;
        bool exact;
        if (!nb_from(x->valuedouble, F, !K[i].upper, &b, &exact)) {
            if ((x->valuedouble < 0) != K[i].upper) continue; /* beyond the other end: no bound */
            return unsupported(c, "'%s' at %s is beyond the supported bounds (a magnitude below 2^63)",
                               K[i].kw, where);
        }
        if (excl && exact) nb_step(&b, K[i].upper ? -1 : 1);
        nbound *t = K[i].upper ? hi : lo;
        if (!t->set || (K[i].upper ? nb_cmp(&b, t) < 0 : nb_cmp(&b, t) > 0)) *t = b;
    }
    if (lo->set && hi->set && nb_cmp(lo, hi) > 0)
        return fail(c, "no %s fits the bounds at %s", F ? "number (of at most 16 decimals)" : "integer", where);
    return 0;
}

/* cls{lo,hi}, nothing when hi is 0 */
static void b_rep(buf *b, const char *cls, int lo, int hi) {
    if (hi <= 0) return;
    if (lo == hi) bprintf(b, lo == 1 ? " %s" : " %s{%d}", cls, lo);
    else bprintf(b, " %s{%d,%d}", cls, lo, hi);
}

/* The digits from position j on in state st (0: equal so far to both lo
 * and hi, 1: to lo only, 2: to hi only) when they need no rule: none left,
 * zeros only, or any digits. Written to b unless NULL. */
static bool digits_inline(buf *b, const char *lo, const char *hi, int j, int kmin, int kmax, int st) {
    const int a = SP_MAX(kmin - j, 0), n = kmax - j;
    if (n == 0) return true;
    if (st != 1 && all_of(hi + j, '0')) { /* lo's rest is zeros too (lo <= hi) */
        if (b) b_rep(b, "[0]", a, n);
        return true;
    }
    if ((st == 2 || all_of(lo + j, '0')) && (st == 1 || all_of(hi + j, '9'))) {
        if (b) b_rep(b, "[0-9]", a, n);
        return true;
    }
    return false;
}

static void digits_next(buf *b, const int id[][3], const char *lo, const char *hi, int j, int kmin, int kmax,
                        int st) {
    if (!digits_inline(b, lo, hi, j, kmin, kmax, st)) bprintf(b, " r%d", id[j][st]);
}

/* Strings of kmin..kmax digits whose value padded with zeros to kmax
 * digits lies in [lo, hi] (kmax digits each, lo <= hi), appended to b: a
 * rule per position and state of digits_inline, those reachable (a chain
 * to where lo and hi part, then one along each), written last to first. */
static void gen_digits(conv *c, buf *b, const char *lo, const char *hi, int kmin, int kmax) {
    int id[NUM_DIG + 1][3];
    bool reach[NUM_DIG + 1][3] = {{false}};
    reach[0][0] = true;
    for (int j = 0; j < kmax; j++)
        for (int st = 0; st < 3; st++) {
            if (!reach[j][st] || digits_inline(NULL, lo, hi, j, kmin, kmax, st)) continue;
            if (st == 0 && lo[j] != hi[j]) reach[j + 1][1] = reach[j + 1][2] = true;
            else reach[j + 1][st] = true;
        }
    for (int j = kmax - 1; j >= 0; j--)
        for (int st = 0; st < 3; st++) {
            if (!reach[j][st] || digits_inline(NULL, lo, hi, j, kmin, kmax, st)) continue;
            const bool tl = st != 2, th = st != 1;
            const char l = lo[j], h = hi[j];
            buf r = {0};
            bprintf(&r, "(");
            if (st == 0 && l == h) {
                bprintf(&r, " \"%c\"", l);
                digits_next(&r, id, lo, hi, j + 1, kmin, kmax, 0);
            } else {
                /* l (h) joins the digits between when any digits may follow it */
                const bool lfree = tl && all_of(lo + j + 1, '0'), hfree = th && all_of(hi + j + 1, '9');
                int n = 0;
                if (tl && !lfree) {
                    bprintf(&r, " \"%c\"", l);
                    digits_next(&r, id, lo, hi, j + 1, kmin, kmax, 1);
                    n++;
                }
                const char ml = !tl || lfree ? (tl ? l : '0') : (char)(l + 1);
                const char mh = !th || hfree ? (th ? h : '9') : (char)(h - 1);
                if (ml <= mh) {
                    if (n++) bprintf(&r, " |");
                    bprintf(&r, ml == mh ? " \"%c\"" : " [%c-%c]", ml, mh);
                    b_rep(&r, "[0-9]", SP_MAX(kmin - j - 1, 0), kmax - j - 1);
                }
                if (th && !hfree) {
                    bprintf(&r, n ? " | \"%c\"" : " \"%c\"", h);
                    digits_next(&r, id, lo, hi, j + 1, kmin, kmax, 2);
                }
            }
            /* may end here: the rest pads with zeros, at or above lo's */
            bprintf(&r, " )%s", j >= kmin && (!tl || all_of(lo + j, '0')) ? "?" : "");
            id[j][st] = new_rule(c);
            emit(c, id[j][st], &r);
        }
    digits_next(b, id, lo, hi, 0, kmin, kmax, 0);
}

/* Integer parts (no leading zero) from S to E, or to mmax digits (or S's)
 * when E is NULL: by length, a range of digits at each end. */
static void gen_int_range(conv *c, buf *b, const char *S, const char *E, int mmax) {
    const int ls = (int)strlen(S), le = E ? (int)strlen(E) : SP_MAX(mmax, ls);
    char t[NUM_DIG];
    bprintf(b, " (");
    if (E && ls == le) {
        gen_digits(c, b, S, E, ls, ls);
    } else {
        memset(t, '9', (size_t)ls);
        t[ls] = 0;
        gen_digits(c, b, S, t, ls, ls);
        const int top = E ? le - 1 : le; /* the lengths between, any digits */
        if (top > ls) {
            bprintf(b, " | [1-9]");
            b_rep(b, "[0-9]", ls, top - 1);
        }
        if (E) {
            memset(t, '0', (size_t)le);
            t[0] = '1';
            t[le] = 0;
            bprintf(b, " |");
            gen_digits(c, b, t, E, le, le);
        }
    }
    bprintf(b, " )");
}

/* The fraction after an integer part: F digits at most, padded with zeros
 * within [lo, hi] (F digits each); none when lo is zero. */
static void gen_frac(conv *c, buf *b, const char *lo, const char *hi, int F) {
    if (!F) return;
    bprintf(b, " (\".\"");
    gen_digits(c, b, lo, hi, 1, F);
    bprintf(b, " )%s", all_of(lo, '0') ? "?" : "");
}

static void split_scaled(const char *m, int F, char *ip, char *fp) {
    const int n = (int)strlen(m);
    if (n <= F) {
        strcpy(ip, "0");
        memset(fp, '0', (size_t)(F - n));
        memcpy(fp + F - n, m, (size_t)n);
    } else {
        memcpy(ip, m, (size_t)(n - F));
        ip[n - F] = 0;
        memcpy(fp, m + n - F, (size_t)F);
    }
    fp[F] = 0;
}

/* Magnitudes from A to B (scaled; B NULL: unbounded) as alternatives of
 * b: A's integer part with a fraction at or above A's, the integer parts
 * between with any fraction, B's integer part with a fraction up to B's. */
static void gen_mag(conv *c, buf *b, const char *A, const char *B, int F) {
    char aI[NUM_DIG], aF[NUM_FRAC + 1], bI[NUM_DIG], bF[NUM_FRAC + 1], zeros[NUM_FRAC + 1],
        nines[NUM_FRAC + 1], from[NUM_DIG];
    memset(zeros, '0', (size_t)F);
    memset(nines, '9', (size_t)F);
    zeros[F] = nines[F] = 0;
    split_scaled(A, F, aI, aF);
    if (B) split_scaled(B, F, bI, bF);
    if (B && !strcmp(aI, bI)) {
        bprintf(b, " \"%s\"", aI);
        gen_frac(c, b, aF, bF, F);
        return;
    }
    strcpy(from, aI);
    const char *sep = "";
    if (!all_of(aF, '0')) {
        bprintf(b, " \"%s\"", aI);
        gen_frac(c, b, aF, nines, F);
        mag_inc(from);
        sep = " |";
    }
    if (!B) {
        bprintf(b, "%s", sep);
        gen_int_range(c, b, from, NULL, SP_MAX(NUM_INT, (int)strlen(aI)));
        gen_frac(c, b, zeros, nines, F);
        return;
    }
    if (all_of(bF, '9')) { /* B's integer part takes any fraction */
        bprintf(b, "%s", sep);
        gen_int_range(c, b, from, bI, 0);
        gen_frac(c, b, zeros, nines, F);
        return;
    }
    char to[NUM_DIG];
    strcpy(to, bI); /* bI > aI >= 0 */
    mag_dec(to);
    if (mag_cmp(from, to) <= 0) {
        bprintf(b, "%s", sep);
        gen_int_range(c, b, from, to, 0);
        gen_frac(c, b, zeros, nines, F);
        sep = " |";
    }
    bprintf(b, "%s \"%s\"", sep, bI);
    gen_frac(c, b, zeros, bF, F);
}

/* A value in [lo, hi] (scaled by 10^F, inclusive; unset: unbounded). */
static int gen_bounded(conv *c, const nbound *lo, const nbound *hi, int F) {
    buf b = {0};
    bprintf(&b, "(");
    const bool nonneg = !hi->set || !hi->neg, neg = !lo->set || lo->neg;
    if (nonneg) gen_mag(c, &b, lo->set && !lo->neg ? lo->mag : "0", hi->set ? hi->mag : NULL, F);
    if (neg) { /* magnitudes from one unit up: never -0 */
        bprintf(&b, "%s \"-\" (", nonneg ? " |" : "");
        gen_mag(c, &b, hi->set && hi->neg ? hi->mag : "1", lo->set ? lo->mag : NULL, F);
        bprintf(&b, " )");
    }
    bprintf(&b, " ) space");
    const int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_integer(conv *c, const cJSON *s, const char *path) {
    nbound lo = {0}, hi = {0};
    if (read_bounds(c, s, 0, path, &lo, &hi)) return -1;
    if (!lo.set && !hi.set) return -3;
    return gen_bounded(c, &lo, &hi, 0);
}

/* With bounds, a number in plain decimals (no exponent). */
static int gen_number(conv *c, const cJSON *s, const char *path) {
    nbound lo = {0}, hi = {0};
    if (read_bounds(c, s, NUM_FRAC, path, &lo, &hi)) return -1;
    if (!lo.set && !hi.set) return -4;
    return gen_bounded(c, &lo, &hi, NUM_FRAC);
}

/* A rule for one type name, or a negative code for a primitive. */
static int gen_type(conv *c, const cJSON *s, const char *t, const char *path, int depth) {
    if (!strcmp(t, "object")) return gen_object(c, s, path, depth);
    if (!strcmp(t, "array")) return gen_array(c, s, path, depth);
    if (!strcmp(t, "string")) return gen_string(c, s, path);
    if (!strcmp(t, "integer")) return gen_integer(c, s, path);
    if (!strcmp(t, "number")) return gen_number(c, s, path);
    if (!strcmp(t, "boolean")) return -5;
    if (!strcmp(t, "null")) return -6;
    return fail(c, "unknown type '%.40s' at %s", t, path);
}

static const char *prim_name(int code) {
    switch (code) {
    case -2: return "string";
    case -3: return "integer";
    case -4: return "number";
    case -5: return "boolean";
    case -6: return "null";
    default: return "value";
    }
}

static void ref_to(buf *b, int id) {
    char n[32];
    rule_name(n, id);
    bprintf(b, "%s", n);
}

static int gen_ref(conv *c, const char *ref, const char *path, int depth) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], ref)) return c->ref_rule[i];
    const char *name = NULL, *where = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) name = ref + 8, where = "$defs";
    else if (!strncmp(ref, "#/definitions/", 14)) name = ref + 14, where = "definitions";
    else if (!strcmp(ref, "#")) name = "", where = NULL;
    else return unsupported(c, "unsupported $ref '%.80s' at %s (only #, #/$defs/... and #/definitions/...)", ref, path);
    const cJSON *target = where ? cJSON_GetObjectItemCaseSensitive(
                                      cJSON_GetObjectItemCaseSensitive(c->root, where), name)
                                : c->root;
    if (!target) return fail(c, "$ref '%.80s' at %s points nowhere", ref, path);
    if (c->n_refs == 256) return fail(c, "more than 256 $ref targets");
    /* reserve the rule first: the target may refer to itself */
    int id = new_rule(c);
    c->refs[c->n_refs] = ref;
    c->ref_rule[c->n_refs++] = id;
    char p[256];
    snprintf(p, sizeof(p), "%.200s", ref + 1);
    int body = gen(c, target, p, depth + 1);
    if (c->failed) return -1;
    buf b = {0};
    ref_to(&b, body);
    emit(c, id, &b);
    return id;
}

static int gen_alts(conv *c, const cJSON *list, const char *kw, const char *path, int depth) {
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
        return fail(c, "'%s' at %s must be a non-empty array", kw, path);
    int ids[64], n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        if (n == 64) return fail(c, "more than 64 alternatives in '%s' at %s", kw, path);
        char p[256];
        snprintf(p, sizeof(p), "%.180s/%s/%d", path, kw, n);
        ids[n] = gen(c, x, p, depth + 1);
        if (c->failed) return -1;
        n++;
    }
    buf b = {0};
    for (int i = 0; i < n; i++) {
        if (i) bprintf(&b, " | ");
        ref_to(&b, ids[i]);
    }
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* A "type" array: at most 8 names, distinct (as JSON Schema says: a type
 * named twice would convert the subschemas under it twice, and twice again
 * at every level below). Checked before any is converted. */
static bool types_distinct(conv *c, const cJSON *type, const char *path) {
    const cJSON *t, *u;
    int n = 0;
    cJSON_ArrayForEach(t, type) {
        if (!cJSON_IsString(t) || n++ == 8) return fail(c, "'type' at %s must name types", path), false;
        for (u = type->child; u != t; u = u->next)
            if (!strcmp(u->valuestring, t->valuestring))
                return fail(c, "'type' at %s names '%.40s' twice", path[0] ? path : "/", t->valuestring),
                       false;
    }
    return true;
}

/* multipleOf is taken where it restricts nothing: 1 beside a type naming
 * integer, any value beside types without numbers (which ignore it). */
static bool type_takes_multiple(const char *t, double m) {
    return strcmp(t, "number") && (strcmp(t, "integer") || m == 1);
}

static bool multiple_of_one(conv *c, const cJSON *s, const cJSON *m, const char *path) {
    const char *where = path[0] ? path : "/";
    if (!cJSON_IsNumber(m) || !(m->valuedouble > 0))
        return fail(c, "'multipleOf' at %s must be a number above 0", where), false;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type"), *t;
    bool ok = !cJSON_GetObjectItemCaseSensitive(s, "enum") && !cJSON_GetObjectItemCaseSensitive(s, "const");
    if (cJSON_IsString(type)) ok = ok && type_takes_multiple(type->valuestring, m->valuedouble);
    else if (cJSON_IsArray(type))
        cJSON_ArrayForEach(t, type) ok = ok && cJSON_IsString(t) && type_takes_multiple(t->valuestring, m->valuedouble);
    else ok = false; /* any value: numbers too */
    if (!ok) return unsupported(c, "unsupported 'multipleOf' at %s (only 1, on integers)", where), false;
    return true;
}

static int gen(conv *c, const cJSON *s, const char *path, int depth) {
    if (c->failed) return -1;
    if (depth > MAX_DEPTH) return fail(c, "schema nested deeper than %d at %s", MAX_DEPTH, path);
    if (cJSON_IsTrue(s)) return -7;
    if (!cJSON_IsObject(s)) return fail(c, "the schema at %s must be an object or true", path);
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k->string, known[i]);
        if (!ok) return unsupported(c, "unsupported keyword '%.60s' at %s", k->string, path[0] ? path : "/");
    }
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "multipleOf")) && !multiple_of_one(c, s, x, path)) return -1;
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(x)) return fail(c, "$ref at %s must be a string", path);
        return gen_ref(c, x->valuestring, path, depth);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) return gen_alts(c, x, "anyOf", path, depth);
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) return gen_alts(c, x, "oneOf", path, depth);
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cst || en) {
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)))
            return fail(c, "'enum' at %s must be a non-empty array", path);
        buf b = {0};
        bprintf(&b, "(");
        int i = 0;
        const cJSON *v;
        if (cst) {
            char *t = cJSON_PrintUnformatted(cst);
            if (!t) return oom(c);
            blit(&b, t);
            free(t);
        } else {
            cJSON_ArrayForEach(v, en) {
                char *t = cJSON_PrintUnformatted(v);
                if (!t) return oom(c);
                if (i++) bprintf(&b, " | ");
                blit(&b, t);
                free(t);
            }
        }
        bprintf(&b, ") space");
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return gen_type(c, s, type->valuestring, path, depth);
    if (cJSON_IsArray(type)) {
        int ids[8], n = 0;
        if (!types_distinct(c, type, path)) return -1;
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            ids[n++] = gen_type(c, s, t->valuestring, path, depth);
            if (c->failed) return -1;
        }
        if (!n) return fail(c, "'type' at %s is empty", path);
        buf b = {0};
        for (int i = 0; i < n; i++) {
            if (i) bprintf(&b, " | ");
            ref_to(&b, ids[i]);
        }
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    if (type) return fail(c, "'type' at %s must be a string or an array", path);
    if (cJSON_GetObjectItemCaseSensitive(s, "pattern"))
        return fail(c, "'pattern' at %s needs \"type\": \"string\" (any other value would pass it)",
                    path[0] ? path : "/");
    if (cJSON_GetObjectItemCaseSensitive(s, "properties")) return gen_object(c, s, path, depth);
    if (cJSON_GetObjectItemCaseSensitive(s, "items")) return gen_array(c, s, path, depth);
    return -7; /* any value */
}

int sp_json_schema_to_gbnf(const char *text, size_t len, char **gbnf, char *err, size_t errlen) {
    *gbnf = NULL;
    if (!text) {
        seterr(err, errlen, "no schema");
        return SP_ERR_INVALID;
    }
    if (!len) len = strlen(text);
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        seterr(err, errlen, "the schema is not valid JSON");
        return SP_ERR_INVALID;
    }
    conv c = {.root = doc, .err = err, .errlen = errlen};
    int top = gen(&c, doc, "", 0);
    char *out = NULL;
    if (!c.failed) {
        buf b = {0};
        bprintf(&b, "root ::= ");
        ref_to(&b, top);
        bprintf(&b, "\n");
        bput(&b, c.out.s ? c.out.s : "", c.out.n);
        bput(&b, PRIMITIVES, sizeof(PRIMITIVES) - 1);
        check_out(&c, &b);
        if (c.failed) {
            free(b.s);
        } else {
            /* a $ref cycle that consumes nothing ({"$ref": "#"}, a -> b -> a)
             * is left recursion: refuse the schema rather than give a grammar
             * that does not compile */
            char gerr[200];
            bool self_ref;
            sp_grammar *g = gr_compile(b.s, b.n, &self_ref, gerr, sizeof(gerr));
            if (g) {
                out = b.s;
            } else {
                c.status = SP_ERR_INVALID;
                seterr(err, errlen, "%s", self_ref
                              ? "the schema refers to itself ($ref) without any value in between"
                              : gerr);
                free(b.s);
            }
            sp_grammar_free(g);
        }
    }
    free(c.out.s);
    cJSON_Delete(doc);
    *gbnf = out;
    return out ? SP_OK : c.status ? c.status : SP_ERR_INVALID;
}

const char *sp_json_object_gbnf(void) {
    static const char g[] = "root ::= object\n" JSON_PRIMITIVES;
    return g;
}
