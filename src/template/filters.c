/* filters.c: jinja2's builtin filters as HF's environment has them (its
 * tojson replacing jinja2's): each follows jinja2/filters.py, Undefined
 * and argument handling included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_str.h"

static const char *const filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
    "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title",
    "tojson", "trim", "truncate", "unique", "upper", "wordcount", NULL};

bool jinja_has_filter(const char *name) {
    for (int i = 0; filters[i]; i++)
        if (!strcmp(filters[i], name)) return true;
    return false;
}

static jv gen(jlist *l) {
    jv v = jv_listv(l);
    v.tuple = 2;
    return v;
}

#define ARG(name, pos) jinja_kwarg(kwn, kwv, nkw, name, args, nargs, pos)

static jlist *iter_of(jrt *r, jv v) {
    jlist *l;
    jinja_iter(r, v, &l);
    return l;
}

/* make_attrgetter: "a.b.0" looked up item by item */
static jv attr_get(jrt *r, jv item, jstr *attr) {
    size_t st = 0;
    for (size_t i = 0; i <= attr->len; i++) {
        if (i < attr->len && attr->p[i] != '.') continue;
        const char *part = attr->p + st;
        size_t pl = i - st;
        bool digits = pl > 0;
        int64_t k = 0;
        for (size_t j = 0; j < pl; j++) {
            if (part[j] < '0' || part[j] > '9' || k > 100000000) { digits = false; break; }
            k = k * 10 + (part[j] - '0');
        }
        item = jinja_getitem(r, item, digits ? jv_int(k) : jv_strn(r, part, pl, 0));
        st = i + 1;
    }
    return item;
}

static jv lower_key(jrt *r, jv v, bool case_sensitive) {
    if (!case_sensitive && v.t == JV_STR) return jv_strv(jinja_str_case(r, v.u.s, 0));
    return v;
}

/* stable merge sort of keys[] with a permutation */
static void msort(jrt *r, jv *keys, size_t *idx, size_t *tmp, size_t n, bool rev) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(r, keys, idx, tmp, h, rev);
    msort(r, keys, idx + h, tmp, n - h, rev);
    size_t i = 0, j = h, k = 0;
    jinja_step(r, n / 64);
    while (i < h && j < n) {
        int c = jv_compare(r, keys[idx[j]], keys[idx[i]]);
        if (rev ? c > 0 : c < 0) tmp[k++] = idx[j++];
        else tmp[k++] = idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

static jlist *sorted(jrt *r, jlist *items, jv *keys, bool rev) {
    size_t n = items->n;
    size_t *idx = jinja_alloc(&r->arena, (n + 1) * sizeof(size_t));
    size_t *tmp = jinja_alloc(&r->arena, (n + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    msort(r, keys, idx, tmp, n, rev);
    jlist *o = jlist_new(r, n);
    for (size_t i = 0; i < n; i++) o->v[o->n++] = items->v[idx[i]];
    return o;
}

/* the key of an item for sort/unique/min/max: attribute(s) and case */
static jv item_key(jrt *r, jv item, jv attribute, bool cs) {
    if (attribute.t == JV_STR && memchr(attribute.u.s->p, ',', attribute.u.s->len)) {
        jv parts = jinja_str_split(r, attribute.u.s, jstr_new(r, ",", 1, 0), -1, false);
        jlist *l = jlist_new(r, parts.u.l->n);
        for (size_t i = 0; i < parts.u.l->n; i++)
            l->v[l->n++] = lower_key(r, attr_get(r, item, parts.u.l->v[i].u.s), cs);
        return jv_listv(l);
    }
    if (attribute.t == JV_STR) return lower_key(r, attr_get(r, item, attribute.u.s), cs);
    if (attribute.t == JV_INT) return lower_key(r, jinja_getitem(r, item, attribute), cs);
    return lower_key(r, item, cs);
}

static jv select_reject(jrt *r, jv v, jv *args, int nargs, bool attr, bool select) {
    jlist *o = jlist_new(r, 0);
    if (!jv_truthy(v)) return gen(o);
    int off = 0;
    jstr *an = NULL;
    if (attr) {
        if (nargs < 1 || args[0].t != JV_STR) jinja_fail(r, "missing attribute for selectattr/rejectattr");
        an = args[0].u.s;
        off = 1;
    }
    const char *test = NULL;
    if (nargs > off) {
        if (args[off].t != JV_STR) jinja_fail(r, "test name must be a string");
        test = args[off].u.s->p;
        if (!jinja_has_test(test)) jinja_fail(r, "no test named '%s'", test);
    }
    jlist *items = iter_of(r, v);
    for (size_t i = 0; i < items->n; i++) {
        jinja_step(r, 1);
        jv x = an ? attr_get(r, items->v[i], an) : items->v[i];
        bool t = test ? jinja_test(r, test, x, args + off + 1, nargs - off - 1) : jv_truthy(x);
        if (t == select) jlist_push(r, o, items->v[i]);
    }
    return gen(o);
}

static bool parse_int_str(jstr *s, int base, int64_t *out) {
    size_t i = 0, n = s->len;
    while (i < n && jinja_cp_space((unsigned char)s->p[i])) i++;
    while (n > i && jinja_cp_space((unsigned char)s->p[n - 1])) n--;
    bool neg = false;
    if (i < n && (s->p[i] == '+' || s->p[i] == '-')) neg = s->p[i++] == '-';
    if (base == 16 && i + 1 < n && s->p[i] == '0' && (s->p[i + 1] == 'x' || s->p[i + 1] == 'X')) i += 2;
    if (i >= n) return false;
    int64_t v = 0;
    bool prev_us = true;
    for (; i < n; i++) {
        char c = s->p[i];
        if (c == '_') { if (prev_us) return false; prev_us = true; continue; }
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : c >= 'A' && c <= 'Z' ? c - 'A' + 10 : 99;
        if (d >= base) return false;
        if (v > (INT64_MAX - d) / base) return false;
        v = v * base + d;
        prev_us = false;
    }
    if (prev_us) return false;
    *out = neg ? -v : v;
    return true;
}

static bool parse_float_str(jstr *s, double *out) {
    size_t i = 0, n = s->len;
    while (i < n && jinja_cp_space((unsigned char)s->p[i])) i++;
    while (n > i && jinja_cp_space((unsigned char)s->p[n - 1])) n--;
    if (i >= n || n - i > 400) return false;
    char buf[401];
    size_t k = 0;
    for (size_t j = i; j < n; j++) {
        char c = s->p[j];
        if (c == '_') continue;
        if (!strchr("0123456789+-.eEinfatyINFATY", c)) return false;
        buf[k++] = c;
    }
    buf[k] = 0;
    if (!k || strchr("xX", buf[k > 1 ? 1 : 0])) return false;
    char *end;
    double d = strtod(buf, &end);
    if (*end) return false;
    *out = d;
    return true;
}

static jv do_round(jrt *r, jv v, jv prec, jv method) {
    int64_t p = prec.t == JV_INT ? prec.u.i : 0;
    const char *m = method.t == JV_STR ? method.u.s->p : "common";
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor")) jinja_fail(r, "method must be common, ceil or floor");
    if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL) jinja_fail(r, "type %s doesn't define __round__ method", jv_typename(v));
    double x = v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
    if (!strcmp(m, "common")) {
        if (v.t != JV_FLOAT) return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
        if (!isfinite(x) || p > 300) return jv_float(x);
        if (p < 0) {
            double s = pow(10, (double)-p);
            return jv_float(nearbyint(x / s) * s);
        }
        char buf[400];
        snprintf(buf, sizeof(buf), "%.*f", (int)p, x);
        return jv_float(strtod(buf, NULL));
    }
    double s = pow(10, (double)p);
    return jv_float((m[0] == 'c' ? ceil(x * s) : floor(x * s)) / s);
}

static jv do_indent(jrt *r, jstr *s, jv width, jv first, jv blank) {
    jstr *ind;
    if (width.t == JV_STR) ind = width.u.s;
    else {
        int64_t w = width.t == JV_INT ? width.u.i : 4;
        if (w < 0) w = 0;
        if (w > 10000) jinja_fail(r, "indent width too large");
        char *sp = jinja_alloc(&r->arena, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        ind = jstr_new(r, sp, (size_t)w, 0);
    }
    jbuf src = {0};
    jb_init(r, &src, s->len + 1);
    jb_adds(r, &src, s);
    jb_addc(r, &src, '\n', 0);
    jv lines = jinja_splitlines(r, jb_finish(r, &src), false);
    jlist *l = lines.u.l;
    jbuf b = {0};
    jb_init(r, &b, s->len + 16);
    if (jv_truthy(first)) jb_adds(r, &b, ind);
    for (size_t i = 0; i < l->n; i++) {
        jstr *ln = l->v[i].u.s;
        if (i) {
            jb_addc(r, &b, '\n', 0);
            if (jv_truthy(blank) || ln->len) jb_adds(r, &b, ind);
        }
        jb_adds(r, &b, ln);
    }
    return jv_strv(jb_finish(r, &b));
}

static jv do_tojson(jrt *r, jv v, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    jv ea = ARG("ensure_ascii", 0), ind = ARG("indent", 1), seps = ARG("separators", 2), sk = ARG("sort_keys", 3);
    int indent = -1;
    char indbuf[64];
    const char *isep = ", ", *ksep = ": ";
    if (JS_GIVEN(ind)) {
        if (ind.t == JV_INT) indent = ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : (int)ind.u.i;
        else jinja_fail(r, "tojson: indent must be an integer");
        isep = ",";
    }
    (void)indbuf;
    if (JS_GIVEN(seps)) {
        if (seps.t != JV_LIST || seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            jinja_fail(r, "tojson: separators must be a pair of strings");
        isep = seps.u.l->v[0].u.s->p;
        ksep = seps.u.l->v[1].u.s->p;
    }
    jbuf b = {0};
    jb_init(r, &b, 64);
    jinja_tojson(r, &b, v, indent, isep, ksep, JS_GIVEN(sk) && jv_truthy(sk), JS_GIVEN(ea) && jv_truthy(ea), 0);
    return jv_strv(jb_finish_mk(r, &b, jv_is_content(v)));
}

jstr *jinja_html_escape(jrt *r, jstr *s) {
    if (s->safe) return s;
    jbuf b = {0};
    jb_init(r, &b, s->len + 8);
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) jb_add(r, &b, e, strlen(e), 0);
        else jb_addc(r, &b, c, 0);
    }
    jstr *o = jb_finish_mk(r, &b, jstr_mk_of(s));
    o->safe = 1;
    return o;
}

static jstr *striptags(jrt *r, jstr *s) {
    jbuf b = {0};
    jb_init(r, &b, s->len);
    for (size_t i = 0; i < s->len; i++) {
        if (s->p[i] == '<' && i + 3 < s->len && !memcmp(s->p + i, "<!--", 4)) {
            const char *e = memmem(s->p + i, s->len - i, "-->", 3);
            if (e) { i = (size_t)(e - s->p) + 2; continue; }
        }
        if (s->p[i] == '<') {
            const char *e = memchr(s->p + i, '>', s->len - i);
            if (e) { i = (size_t)(e - s->p); continue; }
        }
        jb_addc(r, &b, s->p[i], 0);
    }
    jstr *t = jb_finish(r, &b);
    jv parts = jinja_str_split(r, t, NULL, -1, false);
    jstr *j = jinja_join(r, jstr_new(r, " ", 1, 0), parts.u.l);
    static const char *const ents[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&#34;", "\""}, {"&quot;", "\""}, {"&#39;", "'"}};
    for (size_t k = 0; k < sizeof(ents) / sizeof(ents[0]); k++)
        j = jinja_str_replace(r, j, jstr_new(r, ents[k][0], strlen(ents[k][0]), 0), jstr_new(r, ents[k][1], strlen(ents[k][1]), 0), -1);
    j->mk = (uint8_t)(jstr_mk_of(s) && j->len ? JM_CONTENT : JM_MARKUP);
    j->mask = NULL;
    return j;
}

jv jinja_filter(jrt *r, const char *name, jv v, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    const char *n = name;
    jinja_step(r, 1);
    if (!strcmp(n, "default") || !strcmp(n, "d")) {
        jv dv = ARG("default_value", 0), bo = ARG("boolean", 1);
        if (JS_IS_MISSING(dv)) dv = jv_strn(r, "", 0, 0);
        if (v.t == JV_UNDEF || (JS_GIVEN(bo) && jv_truthy(bo) && !jv_truthy(v))) return dv;
        return v;
    }
    if (!strcmp(n, "length") || !strcmp(n, "count")) {
        switch (v.t) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)jstr_cplen(v.u.s));
        case JV_LIST:
            if (v.tuple == 2) jinja_fail(r, "object of type 'generator' has no len()");
            return jv_int((int64_t)v.u.l->n);
        case JV_DICT: case JV_NS: return jv_int((int64_t)v.u.d->n);
        default: jinja_fail(r, "object of type '%s' has no len()", jv_typename(v));
        }
    }
    if (!strcmp(n, "string")) return jv_strv(jv_tostr(r, v));
    if (!strcmp(n, "safe")) {
        jstr *s = jv_tostr(r, v);
        if (s->safe) return jv_strv(s);
        jstr *o = jinja_alloc(&r->arena, sizeof(jstr));
        *o = *s;
        o->safe = 1;
        return jv_strv(o);
    }
    if (!strcmp(n, "upper") || !strcmp(n, "lower") || !strcmp(n, "title") || !strcmp(n, "capitalize"))
        return jv_strv(jinja_str_case(r, jv_tostr(r, v), n[0] == 'l' ? 0 : n[0] == 'u' ? 1 : n[0] == 't' ? 4 : 3));
    if (!strcmp(n, "trim")) {
        jv c = ARG("chars", 0);
        return jv_strv(jinja_str_strip(r, jv_tostr(r, v), JS_GIVEN(c) && c.t == JV_STR ? c.u.s : NULL, true, true));
    }
    if (!strcmp(n, "replace")) {
        jv old = ARG("old", 0), nw = ARG("new", 1), cnt = ARG("count", 2);
        jstr *s = jv_tostr(r, v);
        return jv_strv(jinja_str_replace(r, s, jv_tostr(r, old), jv_tostr(r, nw), cnt.t == JV_INT ? cnt.u.i : -1));
    }
    if (!strcmp(n, "join")) {
        jv d = ARG("d", 0), at = ARG("attribute", 1);
        jlist *items = iter_of(r, v);
        if (JS_GIVEN(at)) {
            jlist *m = jlist_new(r, items->n);
            for (size_t i = 0; i < items->n; i++) m->v[m->n++] = item_key(r, items->v[i], at, true);
            items = m;
        }
        return jv_strv(jinja_join(r, JS_GIVEN(d) ? jv_tostr(r, d) : jstr_new(r, "", 0, 0), items));
    }
    if (!strcmp(n, "first") || !strcmp(n, "last")) {
        if (n[0] == 'l' && v.t == JV_LIST && v.tuple == 2) jinja_fail(r, "'generator' object is not reversible");
        if (n[0] == 'l' && v.t != JV_LIST && v.t != JV_STR && v.t != JV_UNDEF && v.t != JV_DICT)
            jinja_fail(r, "'%s' object is not reversible", jv_typename(v));
        jlist *items = iter_of(r, v);
        if (!items->n) return jv_undef(NULL);
        return n[0] == 'f' ? items->v[0] : items->v[items->n - 1];
    }
    if (!strcmp(n, "list")) {
        jlist *items = iter_of(r, v);
        jlist *o = jlist_new(r, items->n);
        if (items->n) memcpy(o->v, items->v, items->n * sizeof(jv));
        o->n = items->n;
        return jv_listv(o);
    }
    if (!strcmp(n, "items")) {
        if (v.t == JV_UNDEF) return jv_listv(jlist_new(r, 0));
        if (v.t != JV_DICT) jinja_fail(r, "Can only get item pairs from a mapping.");
        jv it = jinja_method(r, v, "items", NULL, 0, NULL, NULL, 0);
        it.tuple = 2;
        return it;
    }
    if (!strcmp(n, "selectattr") || !strcmp(n, "rejectattr") || !strcmp(n, "select") || !strcmp(n, "reject"))
        return select_reject(r, v, args, nargs, strstr(n, "attr") != NULL, n[0] == 's');
    if (!strcmp(n, "map")) {
        jlist *items = iter_of(r, v);
        jlist *o = jlist_new(r, items->n);
        jv at = ARG("attribute", -1);
        if (!nargs && !JS_IS_MISSING(at)) {
            jv dflt = ARG("default", -1);
            for (size_t i = 0; i < items->n; i++) {
                jv x = item_key(r, items->v[i], at, true);
                if (x.t == JV_UNDEF && !JS_IS_MISSING(dflt)) x = dflt;
                o->v[o->n++] = x;
            }
            return gen(o);
        }
        if (nargs < 1 || args[0].t != JV_STR) jinja_fail(r, "map requires a filter name");
        const char *fn = args[0].u.s->p;
        if (!jinja_has_filter(fn)) jinja_fail(r, "no filter named '%s'", fn);
        for (size_t i = 0; i < items->n; i++) o->v[o->n++] = jinja_filter(r, fn, items->v[i], args + 1, nargs - 1, kwn, kwv, nkw);
        return gen(o);
    }
    if (!strcmp(n, "dictsort")) {
        jv cs = ARG("case_sensitive", 0), by = ARG("by", 1), rev = ARG("reverse", 2);
        if (v.t != JV_DICT) jinja_fail(r, "You can only sort by either \"key\" or \"value\"");
        jlist *items = jinja_method(r, v, "items", NULL, 0, NULL, NULL, 0).u.l;
        int pos = by.t == JV_STR && !strcmp(by.u.s->p, "value") ? 1 : 0;
        jv *keys = jinja_alloc(&r->arena, (items->n + 1) * sizeof(jv));
        for (size_t i = 0; i < items->n; i++) keys[i] = lower_key(r, items->v[i].u.l->v[pos], JS_GIVEN(cs) && jv_truthy(cs));
        return jv_listv(sorted(r, items, keys, JS_GIVEN(rev) && jv_truthy(rev)));
    }
    if (!strcmp(n, "sort")) {
        jv rev = ARG("reverse", 0), cs = ARG("case_sensitive", 1), at = ARG("attribute", 2);
        jlist *items = iter_of(r, v);
        jv *keys = jinja_alloc(&r->arena, (items->n + 1) * sizeof(jv));
        for (size_t i = 0; i < items->n; i++) keys[i] = item_key(r, items->v[i], at, JS_GIVEN(cs) && jv_truthy(cs));
        return jv_listv(sorted(r, items, keys, JS_GIVEN(rev) && jv_truthy(rev)));
    }
    if (!strcmp(n, "unique")) {
        jv cs = ARG("case_sensitive", 0), at = ARG("attribute", 1);
        jlist *items = iter_of(r, v);
        jdict *seen = jdict_new(r, 0);
        jlist *o = jlist_new(r, 0);
        for (size_t i = 0; i < items->n; i++) {
            jv k = item_key(r, items->v[i], at, JS_GIVEN(cs) && jv_truthy(cs));
            if (k.t == JV_LIST || k.t == JV_DICT) jinja_fail(r, "unhashable type: '%s'", jv_typename(k));
            if (jdict_get(seen, k)) continue;
            jdict_set(r, seen, k, jv_none());
            jlist_push(r, o, items->v[i]);
        }
        return gen(o);
    }
    if (!strcmp(n, "min") || !strcmp(n, "max")) {
        jv cs = ARG("case_sensitive", 0), at = ARG("attribute", 1);
        jlist *items = iter_of(r, v);
        if (!items->n) return jv_undef(NULL);
        size_t best = 0;
        jv bk = item_key(r, items->v[0], at, JS_GIVEN(cs) && jv_truthy(cs));
        for (size_t i = 1; i < items->n; i++) {
            jv k = item_key(r, items->v[i], at, JS_GIVEN(cs) && jv_truthy(cs));
            int c = jv_compare(r, k, bk);
            if (n[1] == 'i' ? c < 0 : c > 0) { best = i; bk = k; }
        }
        return items->v[best];
    }
    if (!strcmp(n, "reverse")) {
        if (v.t == JV_STR) return jv_slice(r, v, jv_none(), jv_none(), jv_int(-1));
        jlist *items = iter_of(r, v);
        jlist *o = jlist_new(r, items->n);
        for (size_t i = items->n; i-- > 0;) o->v[o->n++] = items->v[i];
        return gen(o);
    }
    if (!strcmp(n, "sum")) {
        jv at = ARG("attribute", 0), start = ARG("start", 1);
        jv acc = JS_IS_MISSING(start) ? jv_int(0) : start;
        jlist *items = iter_of(r, v);
        for (size_t i = 0; i < items->n; i++) acc = jinja_binop(r, OP_ADD, acc, JS_GIVEN(at) ? item_key(r, items->v[i], at, true) : items->v[i]);
        return acc;
    }
    if (!strcmp(n, "abs")) {
        if (v.t == JV_INT) {
            if (v.u.i == INT64_MIN) jinja_fail(r, "integer overflow in abs");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        jinja_fail(r, "bad operand type for abs(): '%s'", jv_typename(v));
    }
    if (!strcmp(n, "round")) return do_round(r, v, ARG("precision", 0), ARG("method", 1));
    if (!strcmp(n, "int")) {
        jv d = ARG("default", 0), base = ARG("base", 1);
        jv dflt = JS_IS_MISSING(d) ? jv_int(0) : d;
        int b = base.t == JV_INT ? (int)base.u.i : 10;
        if (b < 2 || b > 36) b = 10;
        if (v.t == JV_INT) return jv_int(v.u.i);
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT) {
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) jinja_fail(r, "cannot convert float to integer");
            return jv_int((int64_t)v.u.f);
        }
        if (v.t == JV_STR) {
            int64_t x;
            double f;
            if (parse_int_str(v.u.s, b, &x)) return jv_int(x);
            if (parse_float_str(v.u.s, &f)) {
                if (!isfinite(f) || fabs(f) >= 9.2e18) jinja_fail(r, "cannot convert float to integer");
                return jv_int((int64_t)f);
            }
        }
        return dflt;
    }
    if (!strcmp(n, "float")) {
        jv d = ARG("default", 0);
        jv dflt = JS_IS_MISSING(d) ? jv_float(0.0) : d;
        if (v.t == JV_INT) return jv_float((double)v.u.i);
        if (v.t == JV_BOOL) return jv_float(v.u.b);
        if (v.t == JV_FLOAT) return v;
        double f;
        if (v.t == JV_STR && parse_float_str(v.u.s, &f)) return jv_float(f);
        return dflt;
    }
    if (!strcmp(n, "indent")) return do_indent(r, jv_tostr(r, v), ARG("width", 0), ARG("first", 1), ARG("blank", 2));
    if (!strcmp(n, "wordcount")) {
        jstr *s = jv_tostr(r, v);
        int64_t c = 0;
        bool in = false;
        for (size_t i = 0; i < s->len; i++) {
            unsigned char ch = (unsigned char)s->p[i];
            bool w = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch >= 0x80;
            if (w && !in) c++;
            in = w;
        }
        return jv_int(c);
    }
    if (!strcmp(n, "center")) {
        jv w = ARG("width", 0);
        jv a[1] = {JS_IS_MISSING(w) ? jv_int(80) : w};
        return jinja_str_method(r, jv_tostr(r, v), "center", a, 1, NULL, NULL, 0);
    }
    if (!strcmp(n, "truncate")) {
        jv len = ARG("length", 0), kw = ARG("killwords", 1), end = ARG("end", 2), lee = ARG("leeway", 3);
        jstr *s = jv_tostr(r, v);
        int64_t L = len.t == JV_INT ? len.u.i : 255, lw = lee.t == JV_INT ? lee.u.i : 5;
        jstr *e = end.t == JV_STR ? end.u.s : jstr_new(r, "...", 3, 0);
        int64_t el = (int64_t)jstr_cplen(e);
        if (L < el) jinja_fail(r, "expected length >= %lld, got %lld", (long long)el, (long long)L);
        if (lw < 0) jinja_fail(r, "expected leeway >= 0");
        if ((int64_t)jstr_cplen(s) <= L + lw) return jv_strv(s);
        jv head = jv_slice(r, jv_strv(s), jv_int(0), jv_int(L - el), jv_none());
        if (!(JS_GIVEN(kw) && jv_truthy(kw))) {
            jv parts = jinja_str_split(r, head.u.s, jstr_new(r, " ", 1, 0), 1, true);
            head = parts.u.l->v[0];
        }
        return jinja_binop(r, OP_ADD, head, jv_strv(e));
    }
    if (!strcmp(n, "batch") || !strcmp(n, "slice")) {
        jv cnt = ARG(n[0] == 'b' ? "linecount" : "slices", 0), fill = ARG("fill_with", 1);
        if (cnt.t != JV_INT || cnt.u.i <= 0) jinja_fail(r, "%s needs a positive count", n);
        jlist *items = iter_of(r, v);
        jlist *o = jlist_new(r, 0);
        int64_t k = cnt.u.i;
        if (n[0] == 'b') {
            jlist *cur = NULL;
            for (size_t i = 0; i < items->n; i++) {
                if (!cur || (int64_t)cur->n == k) { cur = jlist_new(r, 0); jlist_push(r, o, jv_listv(cur)); }
                jlist_push(r, cur, items->v[i]);
            }
            if (cur && JS_GIVEN(fill)) while ((int64_t)cur->n < k) jlist_push(r, cur, fill);
        } else {
            if (k > 100000) jinja_fail(r, "slice count too large");
            size_t len = items->n, per = len / (size_t)k, extra = len % (size_t)k, off = 0;
            for (int64_t s = 0; s < k; s++) {
                size_t start = off + (size_t)s * per;
                if ((size_t)s < extra) off++;
                size_t end = off + (size_t)(s + 1) * per;
                jlist *cur = jlist_new(r, 0);
                for (size_t i = start; i < end; i++) jlist_push(r, cur, items->v[i]);
                if (JS_GIVEN(fill) && (size_t)s >= extra) jlist_push(r, cur, fill);
                jlist_push(r, o, jv_listv(cur));
            }
        }
        return gen(o);
    }
    if (!strcmp(n, "escape") || !strcmp(n, "e") || !strcmp(n, "forceescape")) return jv_strv(jinja_html_escape(r, jv_tostr(r, v)));
    if (!strcmp(n, "striptags")) return jv_strv(striptags(r, jv_tostr(r, v)));
    if (!strcmp(n, "format")) {
        jv a;
        if (nkw) {
            jdict *d = jdict_new(r, 0);
            for (int i = 0; i < nkw; i++) jdict_set(r, d, jv_cstr(r, kwn[i]), kwv[i]);
            a.t = JV_DICT;
            a.content = a.tuple = 0;
            a.u.d = d;
        } else {
            jlist *l = jlist_new(r, (size_t)nargs);
            for (int i = 0; i < nargs; i++) l->v[l->n++] = args[i];
            a = jv_listv(l);
            a.tuple = 1;
        }
        return jinja_str_mod(r, jv_tostr(r, v), a);
    }
    if (!strcmp(n, "tojson")) return do_tojson(r, v, args, nargs, kwn, kwv, nkw);
    if (!strcmp(n, "attr")) {
        jv nm = ARG("name", 0);
        if (nm.t != JV_STR) jinja_fail(r, "attr needs a name");
        return jinja_getattr(r, v, nm.u.s->p);
    }
    jinja_fail(r, "no filter named '%s'", name);
}
