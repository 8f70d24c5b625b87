/* methods.c: Python methods on values (str, dict, list, the loop object,
 * cyclers and joiners), the sandbox's refusal of mutating methods, jinja2's
 * tests (`is defined`, ...), the globals (range, namespace, dict,
 * raise_exception, strftime_now, cycler, joiner), and str % args. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"
#include "template/jinja_str.h"

jv jinja_kwarg(const char **kwn, jv *kwv, int nkw, const char *name, jv *args, int nargs, int pos) {
    if (pos >= 0 && pos < nargs) return args[pos];
    for (int i = 0; i < nkw; i++)
        if (!strcmp(kwn[i], name)) return kwv[i];
    jv m = {.t = JV_UNDEF};
    m.u.uname = JS_MISSING;
    return m;
}

static const char *const str_methods[] = {
    "upper", "lower", "title", "capitalize", "swapcase", "strip", "lstrip", "rstrip", "startswith",
    "endswith", "split", "rsplit", "replace", "find", "rfind", "index", "rindex", "count", "join",
    "format", "splitlines", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
    "isnumeric", "isdecimal", "istitle", "removeprefix", "removesuffix", "center", "ljust", "rjust",
    "zfill", "partition", "rpartition", "casefold", "expandtabs", "encode", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", "pop", "popitem",
                                           "update", "setdefault", "clear", "fromkeys", NULL};
static const char *const list_methods[] = {"index", "count", "copy", "append", "extend", "insert", "pop",
                                           "remove", "reverse", "sort", "clear", NULL};
static const char *const unsafe_methods[] = {"pop", "popitem", "update", "setdefault", "clear", "append",
                                             "extend", "insert", "remove", "reverse", "sort", "fromkeys",
                                             "encode", NULL};

static bool in_list(const char *const *l, const char *name) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return true;
    return false;
}

bool jinja_has_method(jv self, const char *name) {
    switch (self.t) {
    case JV_STR: return in_list(str_methods, name);
    case JV_DICT: return in_list(dict_methods, name);
    case JV_LIST: return in_list(list_methods, name);
    case JV_CYCLER: return !strcmp(name, "next") || !strcmp(name, "reset");
    default: return false;
    }
}

static jv items_of(jrt *r, jdict *d) {
    jlist *l = jlist_new(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jlist *p = jlist_new(r, 2);
        p->v[0] = d->k[i];
        p->v[1] = d->v[i];
        p->n = 2;
        jv t = jv_listv(p);
        t.tuple = 1;
        l->v[l->n++] = t;
    }
    jinja_step(r, d->n / 64);
    return jv_listv(l);
}

jv jinja_method(jrt *r, jv self, const char *name, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    if ((self.t == JV_DICT || self.t == JV_LIST) && in_list(unsafe_methods, name))
        jinja_fail(r, "access to attribute '%s' of '%s' object is unsafe.", name, jv_typename(self));
    switch (self.t) {
    case JV_STR: return jinja_str_method(r, self.u.s, name, args, nargs, kwn, kwv, nkw);
    case JV_DICT: {
        jdict *d = self.u.d;
        if (!strcmp(name, "items")) return items_of(r, d);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            jlist *l = jlist_new(r, d->n);
            for (size_t i = 0; i < d->n; i++) l->v[l->n++] = name[0] == 'k' ? d->k[i] : d->v[i];
            return jv_listv(l);
        }
        if (!strcmp(name, "get")) {
            if (nargs < 1) jinja_fail(r, "get expected at least 1 argument, got 0");
            jv *v = jdict_get(d, args[0]);
            return v ? *v : nargs > 1 ? args[1] : jv_none();
        }
        if (!strcmp(name, "copy")) {
            jdict *o = jdict_new(r, d->n);
            for (size_t i = 0; i < d->n; i++) jdict_set(r, o, d->k[i], d->v[i]);
            jv v = {.t = JV_DICT};
            v.u.d = o;
            return v;
        }
        break;
    }
    case JV_LIST: {
        jlist *l = self.u.l;
        if (!strcmp(name, "copy")) {
            jlist *o = jlist_new(r, l->n);
            memcpy(o->v, l->v, l->n * sizeof(jv));
            o->n = l->n;
            return jv_listv(o);
        }
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            if (nargs < 1) jinja_fail(r, "%s expected 1 argument", name);
            int64_t c = 0;
            jinja_step(r, l->n / 64);
            for (size_t i = 0; i < l->n; i++)
                if (jv_equal(r, l->v[i], args[0])) {
                    if (name[0] == 'i') return jv_int((int64_t)i);
                    c++;
                }
            if (name[0] == 'i') jinja_fail(r, "value is not in list");
            return jv_int(c);
        }
        break;
    }
    case JV_LOOP: {
        jloop *lp = self.u.loop;
        if (!strcmp(name, "cycle")) {
            if (nargs < 1) jinja_fail(r, "no items for cycling given");
            return args[lp->index0 % nargs];
        }
        if (!strcmp(name, "changed")) {
            jlist *l = jlist_new(r, (size_t)nargs);
            for (int i = 0; i < nargs; i++) l->v[l->n++] = args[i];
            jv v = jv_listv(l);
            if (lp->has_changed && jv_equal(r, lp->last_changed, v)) return jv_bool(0);
            lp->has_changed = true;
            lp->last_changed = v;
            return jv_bool(1);
        }
        break;
    }
    case JV_CYCLER: {
        jcycler *c = self.u.cy;
        if (c->sep) { /* a joiner */
            if (!c->used) { c->used = true; return jv_strn(r, "", 0, 0); }
            return jv_strv(c->sep);
        }
        if (!strcmp(name, "reset")) { c->pos = 0; return jv_none(); }
        if (!strcmp(name, "next")) {
            if (!c->items->n) jinja_fail(r, "cycler has no items");
            jv v = c->items->v[c->pos];
            c->pos = (c->pos + 1) % c->items->n;
            return v;
        }
        break;
    }
    default:
        break;
    }
    jinja_fail(r, "'%s' object has no attribute '%s'", jv_typename(self), name);
}

/* ---- tests ---- */

static const char *const tests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "sameas", "equalto", "eq", "==", "ne",
    "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "lessthan", "greaterthan", "odd", "even",
    "divisibleby", "lower", "upper", "in", "escaped", "filter", "test", NULL};

bool jinja_has_test(const char *name) { return in_list(tests, name); }

static jv need(jrt *r, const char *test, jv *args, int nargs) {
    if (nargs < 1) jinja_fail(r, "test '%s' needs an argument", test);
    return args[0];
}

bool jinja_test(jrt *r, const char *name, jv v, jv *args, int nargs) {
    const char *n = name;
    if (!strcmp(n, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(n, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(n, "none")) return v.t == JV_NONE;
    if (!strcmp(n, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(n, "false")) return v.t == JV_BOOL && !v.u.b;
    if (!strcmp(n, "true")) return v.t == JV_BOOL && v.u.b;
    if (!strcmp(n, "integer")) return v.t == JV_INT;
    if (!strcmp(n, "float")) return v.t == JV_FLOAT;
    if (!strcmp(n, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(n, "string")) return v.t == JV_STR;
    if (!strcmp(n, "mapping")) return v.t == JV_DICT;
    if (!strcmp(n, "iterable")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF || v.t == JV_NS;
    if (!strcmp(n, "sequence")) return v.t == JV_STR || (v.t == JV_LIST && v.tuple != 2) || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(n, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD;
    if (!strcmp(n, "escaped")) return false;
    if (!strcmp(n, "filter")) return need(r, n, args, nargs).t == JV_STR && jinja_has_filter(args[0].u.s->p);
    if (!strcmp(n, "test")) return need(r, n, args, nargs).t == JV_STR && jinja_has_test(args[0].u.s->p);
    if (!strcmp(n, "sameas")) {
        jv o = need(r, n, args, nargs);
        if (v.t != o.t) return false;
        if (v.t == JV_NONE || v.t == JV_UNDEF) return true;
        if (v.t == JV_BOOL) return v.u.b == o.u.b;
        if (v.t == JV_INT) return v.u.i == o.u.i;
        if (v.t == JV_STR) return v.u.s == o.u.s;
        if (v.t == JV_LIST) return v.u.l == o.u.l;
        if (v.t == JV_DICT || v.t == JV_NS) return v.u.d == o.u.d;
        return false;
    }
    if (!strcmp(n, "equalto") || !strcmp(n, "eq") || !strcmp(n, "==")) return jv_equal(r, v, need(r, n, args, nargs));
    if (!strcmp(n, "ne") || !strcmp(n, "!=")) return !jv_equal(r, v, need(r, n, args, nargs));
    if (!strcmp(n, "lt") || !strcmp(n, "<") || !strcmp(n, "lessthan")) return jv_compare(r, v, need(r, n, args, nargs)) < 0;
    if (!strcmp(n, "le") || !strcmp(n, "<=")) return jv_compare(r, v, need(r, n, args, nargs)) <= 0;
    if (!strcmp(n, "gt") || !strcmp(n, ">") || !strcmp(n, "greaterthan")) return jv_compare(r, v, need(r, n, args, nargs)) > 0;
    if (!strcmp(n, "ge") || !strcmp(n, ">=")) return jv_compare(r, v, need(r, n, args, nargs)) >= 0;
    if (!strcmp(n, "odd") || !strcmp(n, "even") || !strcmp(n, "divisibleby")) {
        if (v.t == JV_UNDEF) jinja_fail(r, "'%s' is undefined", v.u.uname ? v.u.uname : "value");
        if (v.t != JV_INT && v.t != JV_BOOL) jinja_fail(r, "test '%s' needs an integer", n);
        int64_t x = v.t == JV_INT ? v.u.i : v.u.b;
        if (n[0] == 'o') return x % 2 != 0;
        if (n[0] == 'e') return x % 2 == 0;
        jv d = need(r, n, args, nargs);
        if (d.t != JV_INT || d.u.i == 0) jinja_fail(r, "divisibleby needs a non-zero integer");
        return x % d.u.i == 0;
    }
    if (!strcmp(n, "lower") || !strcmp(n, "upper")) {
        jstr *s = jv_tostr(r, v);
        return jinja_str_case_test(s, n[0] == 'l');
    }
    if (!strcmp(n, "in")) {
        jv hay = need(r, n, args, nargs);
        jv res = jinja_binop_in(r, v, hay);
        return res.u.b;
    }
    jinja_fail(r, "no test named '%s'", name);
}

/* ---- globals ---- */

jv jinja_global_call(jrt *r, int fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    switch (fn) {
    case JF_RANGE: {
        int64_t a = 0, b, s = 1;
        for (int i = 0; i < nargs; i++)
            if (args[i].t != JV_INT && args[i].t != JV_BOOL) jinja_fail(r, "'%s' object cannot be interpreted as an integer", jv_typename(args[i]));
#define IV(k) (args[k].t == JV_INT ? args[k].u.i : (int64_t)args[k].u.b)
        if (nargs == 1) b = IV(0);
        else if (nargs == 2) a = IV(0), b = IV(1);
        else if (nargs == 3) a = IV(0), b = IV(1), s = IV(2);
        else jinja_fail(r, "range expected 1 to 3 arguments, got %d", nargs);
#undef IV
        if (s == 0) jinja_fail(r, "range() arg 3 must not be zero");
        double cnt = s > 0 ? ceil(((double)b - (double)a) / (double)s) : ceil(((double)a - (double)b) / (double)-s);
        if (cnt < 0) cnt = 0;
        if (cnt > 100000) jinja_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jlist *l = jlist_new(r, (size_t)cnt);
        for (int64_t i = 0; i < (int64_t)cnt; i++) l->v[l->n++] = jv_int(a + i * s);
        jinja_step(r, l->n / 64);
        return jv_listv(l);
    }
    case JF_NAMESPACE: case JF_DICT: {
        jdict *d = jdict_new(r, 0);
        for (int i = 0; i < nargs; i++) {
            if (args[i].t == JV_DICT || args[i].t == JV_NS) {
                for (size_t k = 0; k < args[i].u.d->n; k++) jdict_set(r, d, args[i].u.d->k[k], args[i].u.d->v[k]);
            } else if (args[i].t == JV_LIST) {
                jlist *l = args[i].u.l;
                for (size_t k = 0; k < l->n; k++) {
                    if (l->v[k].t != JV_LIST || l->v[k].u.l->n != 2) jinja_fail(r, "dictionary update sequence element has wrong length");
                    jdict_set(r, d, l->v[k].u.l->v[0], l->v[k].u.l->v[1]);
                }
            } else {
                jinja_fail(r, "'%s' object is not iterable", jv_typename(args[i]));
            }
        }
        for (int i = 0; i < nkw; i++) jdict_set(r, d, jv_cstr(r, kwn[i]), kwv[i]);
        jv v = {.t = (uint8_t)(fn == JF_DICT ? JV_DICT : JV_NS)};
        v.u.d = d;
        return v;
    }
    case JF_RAISE: {
        jstr *m = nargs ? jv_tostr(r, args[0]) : jstr_new(r, "", 0, 0);
        jinja_fail(r, "%.*s", (int)(m->len > 300 ? 300 : m->len), m->p);
    }
    case JF_STRFTIME: {
        if (nargs < 1 || args[0].t != JV_STR) jinja_fail(r, "strftime_now needs a format string");
        time_t t = (time_t)r->now;
        struct tm tm;
        gmtime_r(&t, &tm);
        char buf[512];
        size_t n = args[0].u.s->len ? strftime(buf, sizeof(buf), args[0].u.s->p, &tm) : 0;
        return jv_strn(r, buf, n, 0);
    }
    case JF_CYCLER: case JF_JOINER: {
        jcycler *c = jinja_allocz(&r->arena, sizeof(jcycler));
        if (fn == JF_CYCLER) {
            c->items = jlist_new(r, (size_t)nargs);
            for (int i = 0; i < nargs; i++) c->items->v[c->items->n++] = args[i];
            jv v = {.t = JV_CYCLER};
            v.u.cy = c;
            return v;
        }
        jv sep = jinja_kwarg(kwn, kwv, nkw, "sep", args, nargs, 0);
        c->sep = sep.t == JV_STR ? sep.u.s : jstr_new(r, ", ", 2, 0);
        jv self = {.t = JV_CYCLER};
        self.u.cy = c;
        jmethod *m = jinja_alloc(&r->arena, sizeof(jmethod));
        m->self = self;
        m->name = "__call__";
        jv v = {.t = JV_METHOD};
        v.u.me = m;
        return v;
    }
    default:
        jinja_fail(r, "this global is not supported");
    }
}
