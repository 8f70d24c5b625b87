/* eval.c: the evaluator: expressions (attribute and item access with
 * jinja2's undefined rules, Python arithmetic and comparisons, calls of
 * macros, globals and methods) and statements (output, if, for with loop
 * and loop controls, set, macro, call, filter blocks) with jinja2's
 * scoping: each loop iteration and each macro call is a new scope. Every
 * node and iteration is a step; C recursion is bounded. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"
#include "template/jinja_str.h"

void jinja_fail(jrt *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->errlen) snprintf(r->err, r->errlen, "line %d: %s", r->line, msg);
    longjmp(r->jmp, 1);
}

void jinja_step(jrt *r, uint64_t n) {
    r->steps += n;
    if (r->steps > r->max_steps) jinja_fail(r, "max_steps exceeded (%llu evaluation steps)", (unsigned long long)r->max_steps);
}

static void depth_in(jrt *r) {
    if (++r->rdepth > JINJA_EVAL_DEPTH_CAP) jinja_fail(r, "max_depth exceeded (template nested too deeply)");
}

/* ---- scopes ---- */

static jscope *scope_new(jrt *r, jscope *parent) {
    jscope *s = jinja_allocz(&r->arena, sizeof(jscope));
    s->parent = parent;
    return s;
}

static void scope_set(jrt *r, jscope *s, const char *name, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) { s->vals[i] = v; return; }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        const char **nn = jinja_alloc(&r->arena, nc * sizeof(char *));
        jv *nv = jinja_alloc(&r->arena, nc * sizeof(jv));
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof(char *));
            memcpy(nv, s->vals, s->n * sizeof(jv));
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static bool scope_get(jscope *s, const char *name, jv *out) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) { *out = s->vals[i]; return true; }
    return false;
}

static jv lookup(jrt *r, jscope *sc, const char *name) {
    jv v;
    if (scope_get(sc, name, &v)) return v;
    static const struct { const char *n; int fn; } g[] = {
        {"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
        {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME}, {"cycler", JF_CYCLER},
        {"joiner", JF_JOINER}, {"lipsum", JF_LIPSUM},
    };
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
        if (!strcmp(g[i].n, name)) {
            jv f = {.t = JV_FUNC};
            f.u.fn = g[i].fn;
            return f;
        }
    return jv_undef(name);
}

/* ---- attribute and item access ---- */

static __attribute__((noreturn)) void undef_fail(jrt *r, jv u) {
    if (u.u.uname) jinja_fail(r, "'%s' is undefined", u.u.uname);
    jinja_fail(r, "undefined value used");
}

static jv mkmethod(jrt *r, jv self, const char *name) {
    jmethod *m = jinja_alloc(&r->arena, sizeof(jmethod));
    m->self = self;
    m->name = name;
    jv v = {.t = JV_METHOD};
    v.u.me = m;
    return v;
}

static jv loop_attr(jrt *r, jloop *l, const char *name, jv self) {
    if (!strcmp(name, "index")) return jv_int(l->index0 + 1);
    if (!strcmp(name, "index0")) return jv_int(l->index0);
    if (!strcmp(name, "revindex")) return jv_int(l->length - l->index0);
    if (!strcmp(name, "revindex0")) return jv_int(l->length - l->index0 - 1);
    if (!strcmp(name, "first")) return jv_bool(l->index0 == 0);
    if (!strcmp(name, "last")) return jv_bool(l->index0 == l->length - 1);
    if (!strcmp(name, "length")) return jv_int(l->length);
    if (!strcmp(name, "depth")) return jv_int(l->depth0 + 1);
    if (!strcmp(name, "depth0")) return jv_int(l->depth0);
    if (!strcmp(name, "previtem"))
        return l->index0 > 0 ? l->items->v[l->index0 - 1] : jv_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return l->index0 + 1 < l->length ? l->items->v[l->index0 + 1] : jv_undef("there is no next item");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return mkmethod(r, self, name);
    return jv_undef(name);
}

jv jinja_getattr(jrt *r, jv obj, const char *name) {
    switch (obj.t) {
    case JV_UNDEF: undef_fail(r, obj);
    case JV_DICT:
        if (jinja_has_method(obj, name)) return mkmethod(r, obj, name);
        {
            jv *v = jdict_gets(obj.u.d, name);
            return v ? *v : jv_undef(name);
        }
    case JV_NS: {
        jv *v = jdict_gets(obj.u.d, name);
        return v ? *v : jv_undef(name);
    }
    case JV_LOOP: return loop_attr(r, obj.u.loop, name, obj);
    case JV_CYCLER:
        if (!strcmp(name, "current")) {
            jcycler *c = obj.u.cy;
            return c->items && c->items->n ? c->items->v[c->pos] : jv_undef(name);
        }
        /* fall through */
    default:
        if (jinja_has_method(obj, name)) return mkmethod(r, obj, name);
        return jv_undef(name);
    }
}

jv jinja_getitem(jrt *r, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: undef_fail(r, obj);
    case JV_DICT: {
        jv *v = jdict_get(obj.u.d, key);
        if (v) return *v;
        if (key.t == JV_STR && jinja_has_method(obj, key.u.s->p)) return mkmethod(r, obj, key.u.s->p);
        return jv_undef(key.t == JV_STR ? key.u.s->p : NULL);
    }
    case JV_LIST:
        if (obj.tuple == 2) return jv_undef(NULL);
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i < 0 || i >= n) return jv_undef(NULL);
            return obj.u.l->v[i];
        }
        break;
    case JV_STR:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            bool ok;
            jv c = jv_str_index(r, obj.u.s, key.t == JV_INT ? key.u.i : key.u.b, &ok);
            return c;
        }
        break;
    default:
        break;
    }
    if (key.t == JV_STR) return jinja_getattr(r, obj, key.u.s->p);
    return jv_undef(NULL);
}

/* ---- arithmetic ---- */

static bool isnum(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double fnum(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t inum(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static const char *opname(int op) {
    static const char *n[] = {"", "+", "-", "*", "/", "//", "%", "**", "-", "+"};
    return op < (int)(sizeof(n) / sizeof(n[0])) ? n[op] : "?";
}

static jv repeat(jrt *r, jv seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.t == JV_STR) {
        jstr *s = seq.u.s;
        if (s->len && (uint64_t)k > r->max_output / s->len)
            jinja_fail(r, "max_output exceeded (a string would pass %zu bytes)", r->max_output);
        jbuf b = {0};
        jb_init(r, &b, s->len * (size_t)k);
        for (int64_t i = 0; i < k; i++) jb_adds(r, &b, s);
        jinja_step(r, (s->len * (size_t)k) / 4096);
        return jv_strv(jb_finish(r, &b));
    }
    jlist *l = seq.u.l;
    if (l->n && (uint64_t)k > r->max_output / l->n)
        jinja_fail(r, "max_output exceeded (a list would pass %zu items)", r->max_output);
    jlist *o = jlist_new(r, l->n * (size_t)k);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < l->n; j++) o->v[o->n++] = l->v[j];
    jinja_step(r, o->n / 256);
    jv v = jv_listv(o);
    v.tuple = seq.tuple;
    return v;
}

jv jinja_str_mod(jrt *r, jstr *fmt, jv args);

jv jinja_binop(jrt *r, int op, jv a, jv b) {
    if (a.t == JV_UNDEF) undef_fail(r, a);
    if (b.t == JV_UNDEF) undef_fail(r, b);
    if (isnum(a) && isnum(b)) {
        bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        int64_t x = inum(a), y = inum(b), z;
        double fx = fnum(a), fy = fnum(b);
        switch (op) {
        case OP_ADD:
            if (fl) return jv_float(fx + fy);
            if (__builtin_add_overflow(x, y, &z)) break;
            return jv_int(z);
        case OP_SUB:
            if (fl) return jv_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &z)) break;
            return jv_int(z);
        case OP_MUL:
            if (fl) return jv_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &z)) break;
            return jv_int(z);
        case OP_DIV:
            if (fy == 0) jinja_fail(r, "division by zero");
            return jv_float(fx / fy);
        case OP_FLOORDIV:
            if (fl) {
                if (fy == 0) jinja_fail(r, "float floor division by zero");
                return jv_float(floor(fx / fy));
            }
            if (y == 0) jinja_fail(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) break;
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
            return jv_int(z);
        case OP_MOD:
            if (fl) {
                if (fy == 0) jinja_fail(r, "float modulo");
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(m);
            }
            if (y == 0) jinja_fail(r, "integer division or modulo by zero");
            if (y == -1) return jv_int(0);
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
            return jv_int(z);
        case OP_POW:
            if (!fl && y >= 0) {
                int64_t res = 1, base = x;
                int64_t e = y;
                bool ovf = false;
                while (e > 0 && !ovf) {
                    if (e & 1) ovf |= __builtin_mul_overflow(res, base, &res);
                    e >>= 1;
                    if (e) ovf |= __builtin_mul_overflow(base, base, &base);
                }
                if (ovf) break;
                return jv_int(res);
            }
            if (fx == 0 && fy < 0) jinja_fail(r, "0.0 cannot be raised to a negative power");
            return jv_float(pow(fx, fy));
        }
        jinja_fail(r, "integer overflow in '%s'", opname(op));
    }
    if (op == OP_ADD) {
        if (a.t == JV_STR && b.t == JV_STR) {
            bool safe = a.u.s->safe || b.u.s->safe;
            if (a.u.s->safe && !b.u.s->safe) b.u.s = jinja_html_escape(r, b.u.s);
            if (b.u.s->safe && !a.u.s->safe) a.u.s = jinja_html_escape(r, a.u.s);
            jbuf bb = {0};
            jb_init(r, &bb, a.u.s->len + b.u.s->len);
            jb_adds(r, &bb, a.u.s);
            jb_adds(r, &bb, b.u.s);
            jinja_step(r, bb.len / 4096);
            jstr *res = jb_finish(r, &bb);
            res->safe = safe;
            return jv_strv(res);
        }
        if (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple) {
            jlist *l = jlist_new(r, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
            for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
            jinja_step(r, l->n / 256);
            jv v = jv_listv(l);
            v.tuple = a.tuple;
            return v;
        }
    }
    if (op == OP_MUL) {
        if ((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) return repeat(r, a, inum(b));
        if ((b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)) return repeat(r, b, inum(a));
    }
    if (op == OP_MOD && a.t == JV_STR) return jinja_str_mod(r, a.u.s, b);
    jinja_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", opname(op), jv_typename(a), jv_typename(b));
}

static bool contains(jrt *r, jv hay, jv needle) {
    switch (hay.t) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (needle.t != JV_STR) jinja_fail(r, "'in <string>' requires string as left operand, not %s", jv_typename(needle));
        jinja_step(r, hay.u.s->len / 4096);
        return needle.u.s->len == 0 || memmem(hay.u.s->p, hay.u.s->len, needle.u.s->p, needle.u.s->len) != NULL;
    case JV_LIST:
        jinja_step(r, hay.u.l->n / 64);
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(r, hay.u.l->v[i], needle)) return true;
        return false;
    case JV_DICT: case JV_NS:
        return jdict_get(hay.u.d, needle) != NULL;
    default:
        jinja_fail(r, "argument of type '%s' is not iterable", jv_typename(hay));
    }
}

static bool compare_op(jrt *r, int op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_equal(r, a, b);
    case OP_NE: return !jv_equal(r, a, b);
    case OP_IN: return contains(r, b, a);
    case OP_NOTIN: return !contains(r, b, a);
    default: break;
    }
    if (a.t == JV_UNDEF) undef_fail(r, a);
    if (b.t == JV_UNDEF) undef_fail(r, b);
    int c = jv_compare(r, a, b);
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
    }
}

/* ---- iteration ---- */

void jinja_iter(jrt *r, jv v, jlist **out) {
    switch (v.t) {
    case JV_UNDEF: *out = jlist_new(r, 0); return;
    case JV_LIST: *out = v.u.l; return;
    case JV_DICT: case JV_NS: {
        jlist *l = jlist_new(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->k[i];
        *out = l;
        return;
    }
    case JV_STR: {
        jstr *s = v.u.s;
        jlist *l = jlist_new(r, 0);
        for (size_t i = 0; i < s->len;) {
            size_t e = jinja_utf8_next(s->p, s->len, i);
            jlist_push(r, l, jv_strv(jstr_sub(r, s, i, e)));
            i = e;
        }
        jinja_step(r, l->n / 64);
        *out = l;
        return;
    }
    default:
        jinja_fail(r, "'%s' object is not iterable", jv_typename(v));
    }
}

/* ---- calls ---- */

static jv call_macro(jrt *r, jmacro *m, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    jnode *def = m->def;
    if (++r->call_depth > r->max_depth) jinja_fail(r, "max_depth exceeded (%d nested macro calls)", r->max_depth);
    jscope *sc = scope_new(r, m->closure);
    jlist *varargs = jlist_new(r, 0);
    jdict *kwargs = jdict_new(r, 0);
    bool *used = nkw ? jinja_allocz(&r->arena, (size_t)nkw) : NULL;
    for (int i = 0; i < def->nargs; i++) {
        const char *pn = def->args[i]->name;
        jv v;
        bool have = false;
        if (i < nargs) { v = args[i]; have = true; }
        for (int k = 0; k < nkw; k++)
            if (!strcmp(kwn[k], pn)) {
                if (have) jinja_fail(r, "macro '%s' got multiple values for argument '%s'", def->name, pn);
                v = kwv[k];
                have = true;
                used[k] = true;
            }
        if (!have) v = def->kwargs[i] ? jinja_eval(r, sc, def->kwargs[i]) : jv_undef(pn);
        scope_set(r, sc, pn, v);
    }
    for (int i = def->nargs; i < nargs; i++) jlist_push(r, varargs, args[i]);
    for (int k = 0; k < nkw; k++)
        if (!used[k]) {
            if (!strcmp(kwn[k], "caller")) { scope_set(r, sc, "caller", kwv[k]); continue; }
            jdict_set(r, kwargs, jv_cstr(r, kwn[k]), kwv[k]);
        }
    jv va = jv_listv(varargs);
    va.tuple = 1;
    scope_set(r, sc, "varargs", va);
    jv kw = {.t = JV_DICT};
    kw.u.d = kwargs;
    scope_set(r, sc, "kwargs", kw);
    if (m->caller) {
        jv c = {.t = JV_MACRO};
        c.u.m = m->caller;
        scope_set(r, sc, "caller", c);
    }
    jbuf b = {0};
    jb_init(r, &b, 64);
    int saved_line = r->line;
    int saved_ctl = r->loopctl;
    r->loopctl = 0;
    jinja_exec(r, sc, def->b, &b);
    r->loopctl = saved_ctl;
    r->line = saved_line;
    r->call_depth--;
    return jv_strv(jb_finish(r, &b));
}

jv jinja_call(jrt *r, jv fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    switch (fn.t) {
    case JV_MACRO: return call_macro(r, fn.u.m, args, nargs, kwn, kwv, nkw);
    case JV_FUNC: return jinja_global_call(r, fn.u.fn, args, nargs, kwn, kwv, nkw);
    case JV_METHOD: return jinja_method(r, fn.u.me->self, fn.u.me->name, args, nargs, kwn, kwv, nkw);
    case JV_UNDEF: undef_fail(r, fn);
    default: jinja_fail(r, "'%s' object is not callable", jv_typename(fn));
    }
}

/* evaluates a node's args and kwargs */
static void eval_args(jrt *r, jscope *sc, jnode *n, jv **args, jv **kwv) {
    *args = n->nargs ? jinja_alloc(&r->arena, (size_t)n->nargs * sizeof(jv)) : NULL;
    *kwv = n->nkw ? jinja_alloc(&r->arena, (size_t)n->nkw * sizeof(jv)) : NULL;
    for (int i = 0; i < n->nargs; i++) (*args)[i] = jinja_eval(r, sc, n->args[i]);
    for (int i = 0; i < n->nkw; i++) (*kwv)[i] = jinja_eval(r, sc, n->kwargs[i]);
}

static jv apply_filter(jrt *r, jscope *sc, jnode *f, jv v) {
    jv *args, *kwv;
    eval_args(r, sc, f, &args, &kwv);
    r->line = f->line;
    return jinja_filter(r, f->name, v, args, f->nargs, f->kwnames, kwv, f->nkw);
}

/* a filter chain whose innermost value is NULL: applied to v */
static jv apply_chain(jrt *r, jscope *sc, jnode *f, jv v) {
    if (!f) return v;
    v = apply_chain(r, sc, f->a, v);
    return apply_filter(r, sc, f, v);
}

jv jinja_eval(jrt *r, jscope *sc, jnode *n) {
    jinja_step(r, 1);
    depth_in(r);
    r->line = n->line;
    jv res;
    switch (n->kind) {
    case N_CONST: res = n->lit; break;
    case N_NAME: res = lookup(r, sc, n->name); break;
    case N_GETATTR: {
        jv o = jinja_eval(r, sc, n->a);
        r->line = n->line;
        res = jinja_getattr(r, o, n->name);
        break;
    }
    case N_GETITEM: {
        jv o = jinja_eval(r, sc, n->a);
        jv k = jinja_eval(r, sc, n->b);
        r->line = n->line;
        res = jinja_getitem(r, o, k);
        break;
    }
    case N_SLICE: {
        jv o = jinja_eval(r, sc, n->a);
        jv a = n->b ? jinja_eval(r, sc, n->b) : jv_none();
        jv b = n->c ? jinja_eval(r, sc, n->c) : jv_none();
        jv c = n->d ? jinja_eval(r, sc, n->d) : jv_none();
        r->line = n->line;
        if (o.t == JV_UNDEF) undef_fail(r, o);
        res = jv_slice(r, o, a, b, c);
        break;
    }
    case N_CALL: {
        jv fn = jinja_eval(r, sc, n->a);
        jv *args, *kwv;
        eval_args(r, sc, n, &args, &kwv);
        r->line = n->line;
        res = jinja_call(r, fn, args, n->nargs, n->kwnames, kwv, n->nkw);
        break;
    }
    case N_FILTER: res = apply_filter(r, sc, n, jinja_eval(r, sc, n->a)); break;
    case N_TEST: {
        jv v = jinja_eval(r, sc, n->a);
        jv *args, *kwv;
        eval_args(r, sc, n, &args, &kwv);
        r->line = n->line;
        bool t = jinja_test(r, n->name, v, args, n->nargs);
        res = jv_bool(n->flag ? !t : t);
        break;
    }
    case N_BINOP: {
        jv a = jinja_eval(r, sc, n->a);
        jv b = jinja_eval(r, sc, n->b);
        r->line = n->line;
        res = jinja_binop(r, n->op, a, b);
        break;
    }
    case N_UNOP: {
        jv a = jinja_eval(r, sc, n->a);
        r->line = n->line;
        if (a.t == JV_UNDEF) undef_fail(r, a);
        if (!isnum(a)) jinja_fail(r, "bad operand type for unary %s: '%s'", opname(n->op), jv_typename(a));
        if (n->op == OP_POS) res = a.t == JV_BOOL ? jv_int(a.u.b) : a;
        else if (a.t == JV_FLOAT) res = jv_float(-a.u.f);
        else {
            if (inum(a) == INT64_MIN) jinja_fail(r, "integer overflow in '-'");
            res = jv_int(-inum(a));
        }
        res.content = 0;
        break;
    }
    case N_AND: {
        jv a = jinja_eval(r, sc, n->a);
        res = jv_truthy(a) ? jinja_eval(r, sc, n->b) : a;
        break;
    }
    case N_OR: {
        jv a = jinja_eval(r, sc, n->a);
        res = jv_truthy(a) ? a : jinja_eval(r, sc, n->b);
        break;
    }
    case N_NOT: res = jv_bool(!jv_truthy(jinja_eval(r, sc, n->a))); break;
    case N_COMPARE: {
        jv a = jinja_eval(r, sc, n->a);
        res = jv_bool(1);
        for (int i = 0; i < n->nops; i++) {
            jv b = jinja_eval(r, sc, n->ops[i]->a);
            r->line = n->line;
            if (!compare_op(r, n->ops[i]->op, a, b)) { res = jv_bool(0); break; }
            a = b;
        }
        break;
    }
    case N_CONCAT: {
        jbuf b = {0};
        jb_init(r, &b, 64);
        for (int i = 0; i < n->nargs; i++) jb_adds(r, &b, jv_tostr(r, jinja_eval(r, sc, n->args[i])));
        jinja_step(r, b.len / 4096);
        res = jv_strv(jb_finish(r, &b));
        break;
    }
    case N_COND:
        if (jv_truthy(jinja_eval(r, sc, n->a))) res = jinja_eval(r, sc, n->b);
        else res = n->c ? jinja_eval(r, sc, n->c) : jv_undef(NULL);
        break;
    case N_LIST: case N_TUPLE: {
        jlist *l = jlist_new(r, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) l->v[l->n++] = jinja_eval(r, sc, n->args[i]);
        res = jv_listv(l);
        res.tuple = n->kind == N_TUPLE;
        break;
    }
    case N_DICT: {
        jdict *d = jdict_new(r, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) {
            jv k = jinja_eval(r, sc, n->args[i]);
            jv v = jinja_eval(r, sc, n->kwargs[i]);
            if (k.t == JV_LIST || k.t == JV_DICT) jinja_fail(r, "unhashable type: '%s'", jv_typename(k));
            jdict_set(r, d, k, v);
        }
        res.t = JV_DICT;
        res.content = 0;
        res.tuple = 0;
        res.u.d = d;
        break;
    }
    default:
        jinja_fail(r, "internal error: bad expression node %d", n->kind);
    }
    r->rdepth--;
    return res;
}

/* ---- statements ---- */

static void assign(jrt *r, jscope *sc, jnode *target, jv v) {
    if (target->kind == N_NAME) {
        scope_set(r, sc, target->name, v);
    } else if (target->kind == N_NSREF) {
        jv ns = lookup(r, sc, target->a->name);
        if (ns.t != JV_NS) jinja_fail(r, "cannot assign attribute on non-namespace object");
        jdict_set(r, ns.u.d, jv_cstr(r, target->name), v);
    } else { /* tuple */
        jlist *items;
        if (v.t == JV_UNDEF) undef_fail(r, v);
        jinja_iter(r, v, &items);
        if (items->n != (size_t)target->nargs)
            jinja_fail(r, items->n > (size_t)target->nargs ? "too many values to unpack (expected %d)" : "not enough values to unpack (expected %d)", target->nargs);
        for (int i = 0; i < target->nargs; i++) assign(r, sc, target->args[i], items->v[i]);
    }
}

static void output_value(jrt *r, jbuf *out, jv v) {
    if (v.t == JV_STR) {
        jb_adds(r, out, v.u.s);
        return;
    }
    if (v.t == JV_UNDEF) return;
    jb_adds(r, out, jv_tostr(r, v));
}

static void exec_for(jrt *r, jscope *sc, jnode *n, jbuf *out) {
    jv it = jinja_eval(r, sc, n->b);
    r->line = n->line;
    jlist *items;
    jinja_iter(r, it, &items);
    if (n->c) {
        jlist *f = jlist_new(r, 0);
        jscope *fs = scope_new(r, sc);
        for (size_t i = 0; i < items->n; i++) {
            jinja_step(r, 1);
            fs->n = 0; /* one scope, reused by every iteration */
            assign(r, fs, n->a, items->v[i]);
            if (jv_truthy(jinja_eval(r, fs, n->c))) jlist_push(r, f, items->v[i]);
        }
        items = f;
    }
    jloop *lp = jinja_allocz(&r->arena, sizeof(jloop));
    lp->items = items;
    lp->length = (int64_t)items->n;
    jv lv = {.t = JV_LOOP};
    lv.u.loop = lp;
    /* each iteration starts from an empty scope (jinja2: a set in one
     * iteration is gone in the next); its memory is reused, so a loop costs
     * no arena per iteration */
    jscope *is = scope_new(r, sc);
    for (size_t i = 0; i < items->n; i++) {
        jinja_step(r, 1);
        lp->index0 = (int64_t)i;
        is->n = 0;
        scope_set(r, is, "loop", lv);
        r->line = n->line;
        assign(r, is, n->a, items->v[i]);
        jinja_exec(r, is, n->args[0], out);
        if (r->loopctl == 1) { r->loopctl = 0; break; }
        r->loopctl = 0;
    }
    if (!items->n && n->d) jinja_exec(r, scope_new(r, sc), n->d, out);
}

static jstr *capture(jrt *r, jscope *sc, jnode *body) {
    jbuf b = {0};
    jb_init(r, &b, 64);
    jinja_exec(r, sc, body, &b);
    return jb_finish(r, &b);
}

void jinja_exec(jrt *r, jscope *sc, jnode *n, jbuf *out) {
    jinja_step(r, 1);
    depth_in(r);
    r->line = n->line;
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->nargs && !r->loopctl; i++) jinja_exec(r, sc, n->args[i], out);
        break;
    case N_DATA: jb_adds(r, out, n->lit.u.s); break;
    case N_OUTPUT: output_value(r, out, jinja_eval(r, sc, n->a)); break;
    case N_IF: {
        jnode *c = n;
        while (c) {
            if (c->kind != N_IF) { jinja_exec(r, sc, c, out); break; }
            if (jv_truthy(jinja_eval(r, sc, c->a))) { jinja_exec(r, sc, c->b, out); break; }
            c = c->c;
        }
        break;
    }
    case N_FOR: exec_for(r, sc, n, out); break;
    case N_SET: assign(r, sc, n->a, jinja_eval(r, sc, n->b)); break;
    case N_SETBLOCK: {
        jv v = jv_strv(capture(r, sc, n->b));
        assign(r, sc, n->a, apply_chain(r, sc, n->c, v));
        break;
    }
    case N_MACRO: {
        jmacro *m = jinja_allocz(&r->arena, sizeof(jmacro));
        m->def = n;
        m->closure = sc;
        jv v = {.t = JV_MACRO};
        v.u.m = m;
        scope_set(r, sc, n->name, v);
        break;
    }
    case N_CALLBLOCK: {
        jnode *call = n->a;
        jv fn = jinja_eval(r, sc, call->a);
        jv *args, *kwv;
        eval_args(r, sc, call, &args, &kwv);
        r->line = n->line;
        jmacro *cm = jinja_allocz(&r->arena, sizeof(jmacro));
        cm->def = n->b;
        cm->closure = sc;
        jv res;
        if (fn.t == JV_MACRO) {
            jmacro m2 = *fn.u.m;
            m2.caller = cm;
            res = call_macro(r, &m2, args, call->nargs, call->kwnames, kwv, call->nkw);
        } else {
            res = jinja_call(r, fn, args, call->nargs, call->kwnames, kwv, call->nkw);
        }
        output_value(r, out, res);
        break;
    }
    case N_FILTERBLOCK: {
        jv v = jv_strv(capture(r, sc, n->b));
        output_value(r, out, apply_chain(r, sc, n->a, v));
        break;
    }
    case N_BREAK: r->loopctl = 1; break;
    case N_CONTINUE: r->loopctl = 2; break;
    case N_WITH: {
        jscope *ws = scope_new(r, sc);
        for (int i = 0; i < n->nargs; i++) assign(r, ws, n->args[i], jinja_eval(r, sc, n->kwargs[i]));
        jinja_exec(r, ws, n->b, out);
        break;
    }
    default:
        jinja_fail(r, "internal error: bad statement node %d", n->kind);
    }
    r->rdepth--;
}

jv jinja_binop_in(jrt *r, jv needle, jv hay) { return jv_bool(contains(r, hay, needle)); }
