/* value.c: the arena, string builders with per-byte content masks, and
 * values: construction, Python truthiness, equality and ordering, str()
 * and repr() as Python prints them, float repr, code-point indexing and
 * slicing, and insertion-ordered dicts (hashed once large). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

/* ---- arena ---- */

#define ARENA_BLOCK (64 * 1024)

void *jinja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    jarena_blk *b = a->head;
    if (b && b->cap - b->used >= n) {
        void *p = (char *)b->data + b->used;
        b->used += n;
        return p;
    }
    size_t cap = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK;
    if (a->limit && a->total + cap > a->limit) {
        if (a->errlen) snprintf(a->err, a->errlen, "line 0: memory limit exceeded (%zu bytes; bounded by max_output)", a->limit);
        longjmp(*a->jmp, 2);
    }
    jarena_blk *nb = malloc(sizeof(jarena_blk) + cap);
    if (!nb) {
        if (a->errlen) snprintf(a->err, a->errlen, "line 0: out of memory");
        longjmp(*a->jmp, 2);
    }
    a->total += cap;
    nb->cap = cap;
    nb->used = n;
    if (cap == n && b) {
        /* a big block: keep the current block in front */
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        a->head = nb;
    }
    return nb->data;
}

void *jinja_allocz(jarena *a, size_t n) {
    void *p = jinja_alloc(a, n);
    memset(p, 0, n);
    return p;
}

void jinja_arena_free(jarena *a) {
    jarena_blk *b = a->head;
    while (b) {
        jarena_blk *nx = b->next;
        free(b);
        b = nx;
    }
    a->head = NULL;
    a->total = 0;
}

char *jinja_strndup(jarena *a, const char *s, size_t n) {
    char *p = jinja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- builders ---- */

void jb_init(jrt *r, jbuf *b, size_t cap) {
    if (cap < 32) cap = 32;
    b->p = jinja_alloc(&r->arena, cap + 1);
    b->m = jinja_alloc(&r->arena, cap);
    b->len = 0;
    b->cap = cap;
}

static void jb_reserve(jrt *r, jbuf *b, size_t extra) {
    if (!b->p) jb_init(r, b, extra);
    if (b->len + extra <= b->cap) return;
    if (b->len + extra > r->max_output)
        jinja_fail(r, "max_output exceeded (a string or the output would pass %zu bytes)", r->max_output);
    size_t nc = b->cap * 2;
    if (nc < b->len + extra) nc = b->len + extra;
    if (nc > r->max_output) nc = r->max_output;
    char *np = jinja_alloc(&r->arena, nc + 1);
    unsigned char *nm = jinja_alloc(&r->arena, nc);
    memcpy(np, b->p, b->len);
    memcpy(nm, b->m, b->len);
    b->p = np;
    b->m = nm;
    b->cap = nc;
}

void jb_add(jrt *r, jbuf *b, const char *s, size_t n, int mk) {
    jb_reserve(r, b, n);
    if (n) {
        memcpy(b->p + b->len, s, n);
        memset(b->m + b->len, mk ? 1 : 0, n);
    }
    b->len += n;
}

void jb_addc(jrt *r, jbuf *b, char c, int mk) { jb_add(r, b, &c, 1, mk); }

void jb_addmask(jrt *r, jbuf *b, const char *s, size_t n, const unsigned char *m) {
    jb_reserve(r, b, n);
    memcpy(b->p + b->len, s, n);
    memcpy(b->m + b->len, m, n);
    b->len += n;
}

void jb_adds(jrt *r, jbuf *b, const jstr *s) {
    if (s->mk == JM_MIXED) jb_addmask(r, b, s->p, s->len, s->mask);
    else jb_add(r, b, s->p, s->len, s->mk);
}

jstr *jb_finish(jrt *r, jbuf *b) {
    if (!b->p) jb_init(r, b, 0);
    jstr *s = jinja_alloc(&r->arena, sizeof(jstr));
    s->p = b->p;
    s->p[b->len] = 0;
    s->len = b->len;
    s->ascii = -1;
    s->safe = 0;
    s->mask = NULL;
    size_t ones = 0;
    for (size_t i = 0; i < b->len; i++) ones += b->m[i];
    if (ones == 0) s->mk = JM_MARKUP;
    else if (ones == b->len) s->mk = JM_CONTENT;
    else {
        s->mk = JM_MIXED;
        s->mask = b->m;
    }
    return s;
}

jstr *jb_finish_mk(jrt *r, jbuf *b, int mk) {
    jstr *s = jb_finish(r, b);
    s->mk = s->len ? (uint8_t)(mk ? JM_CONTENT : JM_MARKUP) : JM_MARKUP;
    s->mask = NULL;
    return s;
}

/* ---- values ---- */

jv jv_undef(const char *name) { jv v = {.t = JV_UNDEF}; v.u.uname = name; return v; }
jv jv_none(void) { jv v = {.t = JV_NONE}; return v; }
jv jv_bool(int b) { jv v = {.t = JV_BOOL}; v.u.b = b ? 1 : 0; return v; }
jv jv_int(int64_t i) { jv v = {.t = JV_INT}; v.u.i = i; return v; }
jv jv_float(double f) { jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }
jv jv_strv(jstr *s) { jv v = {.t = JV_STR}; v.u.s = s; return v; }
jv jv_listv(jlist *l) { jv v = {.t = JV_LIST}; v.u.l = l; return v; }

jstr *jstr_new(jrt *r, const char *p, size_t n, int mk) {
    if (n > r->max_output) jinja_fail(r, "max_output exceeded (a string would pass %zu bytes)", r->max_output);
    jstr *s = jinja_alloc(&r->arena, sizeof(jstr));
    s->p = jinja_strndup(&r->arena, p, n);
    s->len = n;
    s->mask = NULL;
    s->mk = n ? (uint8_t)(mk ? JM_CONTENT : JM_MARKUP) : JM_MARKUP;
    s->ascii = -1;
    s->safe = 0;
    return s;
}

jv jv_strn(jrt *r, const char *p, size_t n, int mk) { return jv_strv(jstr_new(r, p, n, mk)); }
jv jv_cstr(jrt *r, const char *s) { return jv_strn(r, s, strlen(s), 0); }

int jstr_mk_of(const jstr *s) { return s->mk != JM_MARKUP; }

jlist *jlist_new(jrt *r, size_t cap) {
    jlist *l = jinja_alloc(&r->arena, sizeof(jlist));
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jinja_alloc(&r->arena, cap * sizeof(jv)) : NULL;
    return l;
}

void jlist_push(jrt *r, jlist *l, jv v) {
    if (l->n == l->cap) {
        if (l->n >= r->max_output) jinja_fail(r, "max_output exceeded (a list would pass %zu items)", r->max_output);
        size_t nc = l->cap ? l->cap * 2 : 8;
        jv *nv = jinja_alloc(&r->arena, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

jdict *jdict_new(jrt *r, size_t cap) {
    jdict *d = jinja_allocz(&r->arena, sizeof(jdict));
    if (cap) {
        d->k = jinja_alloc(&r->arena, cap * sizeof(jv));
        d->v = jinja_alloc(&r->arena, cap * sizeof(jv));
        d->cap = cap;
    }
    return d;
}

static uint64_t key_hash(jv k) {
    uint64_t h = 1469598103934665603ULL;
    switch (k.t) {
    case JV_STR:
        for (size_t i = 0; i < k.u.s->len; i++) h = (h ^ (unsigned char)k.u.s->p[i]) * 1099511628211ULL;
        return h;
    case JV_BOOL: return (uint64_t)k.u.b * 0x9e3779b97f4a7c15ULL;
    case JV_INT: return (uint64_t)k.u.i * 0x9e3779b97f4a7c15ULL;
    case JV_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9e18) return (uint64_t)(int64_t)k.u.f * 0x9e3779b97f4a7c15ULL;
        return 77;
    default: return 7;
    }
}

static bool key_eq(jv a, jv b) {
    if (a.t == JV_STR && b.t == JV_STR) return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    if (a.t == JV_STR || b.t == JV_STR) return false;
    return jv_equal(NULL, a, b);
}

static void dict_index(jrt *r, jdict *d) {
    size_t hc = 64;
    while (hc < d->n * 2) hc *= 2;
    d->hidx = jinja_alloc(&r->arena, hc * sizeof(int32_t));
    memset(d->hidx, 0xff, hc * sizeof(int32_t));
    d->hcap = hc;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = key_hash(d->k[i]) & (hc - 1);
        while (d->hidx[h] >= 0) h = (h + 1) & (hc - 1);
        d->hidx[h] = (int32_t)i;
    }
}

jv *jdict_get(jdict *d, jv key) {
    if (d->hidx) {
        size_t h = key_hash(key) & (d->hcap - 1);
        while (d->hidx[h] >= 0) {
            if (key_eq(d->k[d->hidx[h]], key)) return &d->v[d->hidx[h]];
            h = (h + 1) & (d->hcap - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jdict_gets(jdict *d, const char *key) {
    jstr s = {.len = strlen(key), .p = (char *)key};
    jv k = {.t = JV_STR};
    k.u.s = &s;
    return jdict_get(d, k);
}

void jdict_set(jrt *r, jdict *d, jv key, jv val) {
    jv *e = jdict_get(d, key);
    if (e) {
        *e = val;
        return;
    }
    if (d->n == d->cap) {
        if (d->n >= r->max_output || d->n >= INT32_MAX / 4) jinja_fail(r, "max_output exceeded (a dict would pass %zu items)", r->max_output);
        size_t nc = d->cap ? d->cap * 2 : 8;
        jv *nk = jinja_alloc(&r->arena, nc * sizeof(jv));
        jv *nv = jinja_alloc(&r->arena, nc * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    if (d->n >= 16 && (!d->hidx || d->n * 2 > d->hcap)) {
        dict_index(r, d);
    } else if (d->hidx) {
        size_t h = key_hash(key) & (d->hcap - 1);
        while (d->hidx[h] >= 0) h = (h + 1) & (d->hcap - 1);
        d->hidx[h] = (int32_t)(d->n - 1);
    }
}

/* ---- truth, equality, order ---- */

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.tuple == 2 || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static void rdepth_in(jrt *r) {
    if (r && ++r->rdepth > JINJA_EVAL_DEPTH_CAP) jinja_fail(r, "max_depth exceeded (values or expressions nested too deeply)");
}
static void rdepth_out(jrt *r) {
    if (r) r->rdepth--;
}

bool jv_is_content_d(jv v, int depth) {
    switch (v.t) {
    case JV_STR: return v.u.s->mk != JM_MARKUP;
    case JV_INT: case JV_FLOAT: case JV_BOOL: case JV_NONE: return v.content;
    case JV_LIST:
        if (depth > 100) return true;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jv_is_content_d(v.u.l->v[i], depth + 1)) return true;
        return false;
    case JV_DICT: case JV_NS:
        if (depth > 100) return true;
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_is_content_d(v.u.d->k[i], depth + 1) || jv_is_content_d(v.u.d->v[i], depth + 1)) return true;
        return false;
    default: return false;
    }
}

bool jv_is_content(jv v) { return jv_is_content_d(v, 0); }

bool jv_equal(jrt *r, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case JV_LIST: {
        if (a.tuple != b.tuple || a.u.l->n != b.u.l->n) return false;
        if (a.u.l == b.u.l) return true;
        bool eq = true;
        rdepth_in(r);
        for (size_t i = 0; i < a.u.l->n && eq; i++) eq = jv_equal(r, a.u.l->v[i], b.u.l->v[i]);
        rdepth_out(r);
        return eq;
    }
    case JV_DICT: {
        if (a.u.d->n != b.u.d->n) return false;
        if (a.u.d == b.u.d) return true;
        bool eq = true;
        rdepth_in(r);
        for (size_t i = 0; i < a.u.d->n && eq; i++) {
            jv *o = jdict_get(b.u.d, a.u.d->k[i]);
            eq = o && jv_equal(r, a.u.d->v[i], *o);
        }
        rdepth_out(r);
        return eq;
    }
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

const char *jv_typename(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.tuple == 2 ? "generator" : v.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

int jv_compare(jrt *r, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple) {
        rdepth_in(r);
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(r, a.u.l->v[i], b.u.l->v[i])) continue;
            int c = jv_compare(r, a.u.l->v[i], b.u.l->v[i]);
            rdepth_out(r);
            return c;
        }
        rdepth_out(r);
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jinja_fail(r, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
}

/* ---- printing ---- */

void jinja_fmt_float(char *buf, size_t n, double f) {
    if (isnan(f)) { snprintf(buf, n, "nan"); return; }
    if (isinf(f)) { snprintf(buf, n, f < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int ex = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -ex - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= ex; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > ex + 1) for (int i = ex + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += snprintf(out + o, sizeof(out) - (size_t)o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, n, "%s", out);
}

size_t jinja_utf8_next(const char *p, size_t n, size_t i) {
    unsigned char c = (unsigned char)p[i];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + l > n) return i + 1;
    for (size_t k = 1; k < l; k++)
        if (((unsigned char)p[i + k] & 0xc0) != 0x80) return i + 1;
    return i + l;
}

static uint32_t utf8_cp(const char *p, size_t i, size_t e) {
    const unsigned char *u = (const unsigned char *)p;
    size_t l = e - i;
    if (l == 1) return u[i];
    if (l == 2) return ((uint32_t)(u[i] & 0x1f) << 6) | (u[i + 1] & 0x3f);
    if (l == 3) return ((uint32_t)(u[i] & 0x0f) << 12) | ((uint32_t)(u[i + 1] & 0x3f) << 6) | (u[i + 2] & 0x3f);
    return ((uint32_t)(u[i] & 0x07) << 18) | ((uint32_t)(u[i + 1] & 0x3f) << 12) | ((uint32_t)(u[i + 2] & 0x3f) << 6) | (u[i + 3] & 0x3f);
}

static bool cp_printable(uint32_t c) {
    if (c < 0x20 || c == 0x7f) return false;
    if (c >= 0x80 && c <= 0xa0) return false;
    if (c == 0xad || c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
        (c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || (c >= 0xe000 && c <= 0xf8ff) ||
        (c >= 0xfff0 && c <= 0xfffb) || (c >= 0xd800 && c <= 0xdfff) || c >= 0xf0000)
        return false;
    return true;
}

static void repr_str(jrt *r, jbuf *b, const jstr *s, int mk) {
    bool has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_addc(r, b, q, mk);
    size_t i = 0;
    while (i < s->len) {
        size_t e = jinja_utf8_next(s->p, s->len, i);
        unsigned char c = (unsigned char)s->p[i];
        char tmp[16];
        if (e - i == 1 && c >= 0x80) {
            snprintf(tmp, sizeof(tmp), "\\udc%02x", c); /* surrogateescape-like */
            jb_add(r, b, tmp, strlen(tmp), mk);
        } else if (c == '\\' || c == (unsigned char)q) {
            jb_addc(r, b, '\\', mk);
            jb_addc(r, b, (char)c, mk);
        } else if (c == '\n') jb_add(r, b, "\\n", 2, mk);
        else if (c == '\r') jb_add(r, b, "\\r", 2, mk);
        else if (c == '\t') jb_add(r, b, "\\t", 2, mk);
        else {
            uint32_t cp = utf8_cp(s->p, i, e);
            if (cp_printable(cp)) {
                jb_add(r, b, s->p + i, e - i, mk);
            } else {
                if (cp < 0x100) snprintf(tmp, sizeof(tmp), "\\x%02x", cp);
                else if (cp < 0x10000) snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
                else snprintf(tmp, sizeof(tmp), "\\U%08x", cp);
                jb_add(r, b, tmp, strlen(tmp), mk);
            }
        }
        i = e;
    }
    jb_addc(r, b, q, mk);
}

void jv_repr(jrt *r, jbuf *b, jv v, int mk) {
    char tmp[64];
    jinja_step(r, 1);
    switch (v.t) {
    case JV_STR: repr_str(r, b, v.u.s, mk); return;
    case JV_LIST:
        if (v.tuple == 2) { jb_add(r, b, "<generator object>", 18, mk); return; }
        rdepth_in(r);
        jb_addc(r, b, v.tuple ? '(' : '[', mk);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_add(r, b, ", ", 2, mk);
            jv_repr(r, b, v.u.l->v[i], mk);
        }
        if (v.tuple && v.u.l->n == 1) jb_addc(r, b, ',', mk);
        jb_addc(r, b, v.tuple ? ')' : ']', mk);
        rdepth_out(r);
        return;
    case JV_DICT: case JV_NS:
        rdepth_in(r);
        if (v.t == JV_NS) jb_add(r, b, "<Namespace ", 11, mk);
        jb_addc(r, b, '{', mk);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_add(r, b, ", ", 2, mk);
            jv_repr(r, b, v.u.d->k[i], mk);
            jb_add(r, b, ": ", 2, mk);
            jv_repr(r, b, v.u.d->v[i], mk);
        }
        jb_addc(r, b, '}', mk);
        if (v.t == JV_NS) jb_addc(r, b, '>', mk);
        rdepth_out(r);
        return;
    case JV_UNDEF: jb_add(r, b, "Undefined", 9, mk); return;
    case JV_NONE: jb_add(r, b, "None", 4, mk); return;
    case JV_BOOL: jb_add(r, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5, mk); return;
    case JV_INT: snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i); break;
    case JV_FLOAT: jinja_fmt_float(tmp, sizeof(tmp), v.u.f); break;
    case JV_MACRO: snprintf(tmp, sizeof(tmp), "<Macro>"); break;
    default: snprintf(tmp, sizeof(tmp), "<%s object>", jv_typename(v)); break;
    }
    jb_add(r, b, tmp, strlen(tmp), mk);
}

jstr *jv_tostr(jrt *r, jv v) {
    if (v.t == JV_STR) return v.u.s;
    if (v.t == JV_UNDEF) return jstr_new(r, "", 0, 0);
    jbuf b = {0};
    int mk = jv_is_content(v);
    jb_init(r, &b, 32);
    jv_repr(r, &b, v, mk);
    return jb_finish_mk(r, &b, mk);
}

/* ---- code points ---- */

bool jstr_is_ascii(jstr *s) {
    if (s->ascii < 0) {
        s->ascii = 1;
        for (size_t i = 0; i < s->len; i++)
            if ((unsigned char)s->p[i] >= 0x80) { s->ascii = 0; break; }
    }
    return s->ascii == 1;
}

size_t jstr_cplen(jstr *s) {
    if (jstr_is_ascii(s)) return s->len;
    size_t n = 0;
    for (size_t i = 0; i < s->len; i = jinja_utf8_next(s->p, s->len, i)) n++;
    return n;
}

jstr *jstr_sub(jrt *r, jstr *s, size_t from, size_t to) {
    jstr *o = jinja_alloc(&r->arena, sizeof(jstr));
    o->len = to - from;
    o->p = jinja_strndup(&r->arena, s->p + from, o->len);
    o->ascii = s->ascii == 1 ? 1 : -1;
    o->safe = 0;
    o->mask = NULL;
    o->mk = s->mk;
    if (s->mk == JM_MIXED) {
        size_t ones = 0;
        for (size_t i = from; i < to; i++) ones += s->mask[i];
        if (ones == 0) o->mk = JM_MARKUP;
        else if (ones == o->len) o->mk = JM_CONTENT;
        else {
            o->mask = jinja_alloc(&r->arena, o->len);
            memcpy(o->mask, s->mask + from, o->len);
        }
    }
    if (!o->len) o->mk = JM_MARKUP;
    return o;
}

/* byte offsets of each code point, plus the end */
static size_t *cp_offsets(jrt *r, jstr *s, size_t *ncp) {
    size_t n = jstr_cplen(s);
    size_t *off = jinja_alloc(&r->arena, (n + 1) * sizeof(size_t));
    size_t k = 0;
    for (size_t i = 0; i < s->len; i = jinja_utf8_next(s->p, s->len, i)) off[k++] = i;
    off[k] = s->len;
    *ncp = n;
    return off;
}

jv jv_str_index(jrt *r, jstr *s, int64_t i, bool *ok) {
    jinja_step(r, 1 + s->len / 4096);
    if (jstr_is_ascii(s)) {
        int64_t n = (int64_t)s->len;
        if (i < 0) i += n;
        if (i < 0 || i >= n) { *ok = false; return jv_undef(NULL); }
        *ok = true;
        return jv_strv(jstr_sub(r, s, (size_t)i, (size_t)i + 1));
    }
    size_t n;
    size_t *off = cp_offsets(r, s, &n);
    if (i < 0) i += (int64_t)n;
    if (i < 0 || i >= (int64_t)n) { *ok = false; return jv_undef(NULL); }
    *ok = true;
    return jv_strv(jstr_sub(r, s, off[i], off[i + 1]));
}

static int64_t slice_arg(jrt *r, jv v, bool *none) {
    *none = v.t == JV_NONE || v.t == JV_UNDEF;
    if (*none) return 0;
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jinja_fail(r, "slice indices must be integers or None");
}

jv jv_slice(jrt *r, jv v, jv vstart, jv vstop, jv vstep) {
    bool n1, n2, n3;
    int64_t start = slice_arg(r, vstart, &n1), stop = slice_arg(r, vstop, &n2), step = slice_arg(r, vstep, &n3);
    if (n3) step = 1;
    if (step == 0) jinja_fail(r, "slice step cannot be zero");
    int64_t len;
    size_t *off = NULL;
    if (v.t == JV_STR) {
        if (jstr_is_ascii(v.u.s)) len = (int64_t)v.u.s->len;
        else {
            size_t n;
            off = cp_offsets(r, v.u.s, &n);
            len = (int64_t)n;
        }
    } else if (v.t == JV_LIST) {
        len = (int64_t)v.u.l->n;
    } else {
        jinja_fail(r, "'%s' object is not subscriptable", jv_typename(v));
    }
    if (n1) start = step < 0 ? len - 1 : 0;
    else {
        if (start < 0) { start += len; if (start < 0) start = step < 0 ? -1 : 0; }
        else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (n2) stop = step < 0 ? -1 : len;
    else {
        if (stop < 0) { stop += len; if (stop < 0) stop = step < 0 ? -1 : 0; }
        else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    jinja_step(r, 1 + (uint64_t)len / 4096);
    if (v.t == JV_STR) {
        jstr *s = v.u.s;
        if (step == 1) {
            if (stop <= start) return jv_strn(r, "", 0, 0);
            size_t a = off ? off[start] : (size_t)start, b = off ? off[stop] : (size_t)stop;
            return jv_strv(jstr_sub(r, s, a, b));
        }
        jbuf b = {0};
        jb_init(r, &b, 16);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            size_t a = off ? off[i] : (size_t)i, e = off ? off[i + 1] : (size_t)i + 1;
            if (s->mk == JM_MIXED) jb_addmask(r, &b, s->p + a, e - a, s->mask + a);
            else jb_add(r, &b, s->p + a, e - a, s->mk);
        }
        return jv_strv(jb_finish(r, &b));
    }
    jlist *l;
    if (step == 1) {
        /* lists are immutable here: a slice shares the items (a push on it
         * copies, as n == cap) */
        l = jinja_alloc(&r->arena, sizeof(jlist));
        l->n = l->cap = stop > start ? (size_t)(stop - start) : 0;
        l->v = l->n ? v.u.l->v + start : NULL;
        jv o = jv_listv(l);
        o.tuple = v.tuple;
        return o;
    }
    l = jlist_new(r, 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(r, l, v.u.l->v[i]);
    jv o = jv_listv(l);
    o.tuple = v.tuple;
    return o;
}
