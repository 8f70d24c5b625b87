/* parse.c: the Jinja parser: tokens into an AST, following jinja2's
 * grammar (parser.py): statements, then expressions by precedence
 * (conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary,
 * primary with postfix . [] () and | filters / is tests). Nesting is
 * bounded; unknown tags, filters and tests, and any file access
 * (include, import, extends), are syntax errors. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/jinja_internal.h"

#define PARSE_MAX_NEST 200

typedef struct {
    jarena *a;
    jmp_buf *jmp;
    char *err;
    size_t errlen;
    jtok *t;
    size_t n, pos;
    int nest;
    int loops; /* enclosing for loops (in the current macro) */
    /* unknown filters and tests: jinja2 refuses them when compiling, except
     * inside an if statement or an if expression (a "soft" frame), where
     * it fails only when they run */
    bool soft;
    int nunknown;
    struct { int line; bool soft; const char *name, *kind; } unk[64];
} jparser;

static __attribute__((format(printf, 3, 4), noreturn)) void pfail(jparser *P, int line, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (P->errlen) snprintf(P->err, P->errlen, "line %d: %s", line, msg);
    longjmp(*P->jmp, 1);
}

static void note_unknown(jparser *P, int line, const char *kind, const char *name) {
    if (P->nunknown == 64) pfail(P, line, "too many unknown filters and tests");
    {
        P->unk[P->nunknown].line = line;
        P->unk[P->nunknown].soft = P->soft;
        P->unk[P->nunknown].name = name;
        P->unk[P->nunknown].kind = kind;
        P->nunknown++;
    }
}

/* sets P->soft, returning the old value */
static bool set_soft(jparser *P, bool soft) {
    bool old = P->soft;
    P->soft = soft;
    return old;
}

/* A token the parser reaches; what the lexer could not read fails here. */
static jtok *reached(jparser *P, jtok *t) {
    if (t->type == TK_ERROR) pfail(P, t->line, "%s", t->s);
    return t;
}
static jtok *cur(jparser *P) { return reached(P, &P->t[P->pos]); }
static jtok *look(jparser *P) { return reached(P, &P->t[P->pos + 1 < P->n ? P->pos + 1 : P->pos]); }
static jtok *next(jparser *P) {
    jtok *t = reached(P, &P->t[P->pos]);
    if (P->pos + 1 < P->n) P->pos++;
    return t;
}
static bool is_op(jtok *t, const char *op) { return t->type == TK_OP && !strcmp(t->s, op); }
static bool is_name(jtok *t, const char *nm) { return t->type == TK_NAME && !strcmp(t->s, nm); }

static const char *tokdesc(jtok *t) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "end of statement block";
    case TK_NAME: return t->s;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: return t->s;
    }
}

static void expect_op(jparser *P, const char *op) {
    if (!is_op(cur(P), op)) pfail(P, cur(P)->line, "expected '%s', got '%s'", op, tokdesc(cur(P)));
    next(P);
}
static void expect_type(jparser *P, int type, const char *what) {
    if (cur(P)->type != type) pfail(P, cur(P)->line, "expected %s, got '%s'", what, tokdesc(cur(P)));
    next(P);
}
static const char *expect_name(jparser *P) {
    if (cur(P)->type != TK_NAME) pfail(P, cur(P)->line, "expected a name, got '%s'", tokdesc(cur(P)));
    return next(P)->s;
}

static jnode *nd(jparser *P, int kind, int line) {
    jnode *n = jinja_allocz(P->a, sizeof(jnode));
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

/* growable node arrays */
typedef struct {
    jnode **v;
    const char **names;
    int n, cap;
} nvec;

static void nv_push(jparser *P, nvec *v, jnode *x, const char *name) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jnode **nv = jinja_alloc(P->a, (size_t)nc * sizeof(jnode *));
        const char **nn = jinja_alloc(P->a, (size_t)nc * sizeof(char *));
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof(jnode *));
            memcpy(nn, v->names, (size_t)v->n * sizeof(char *));
        }
        v->v = nv;
        v->names = nn;
        v->cap = nc;
    }
    v->names[v->n] = name;
    v->v[v->n++] = x;
}

static void enter(jparser *P) {
    if (++P->nest > PARSE_MAX_NEST) pfail(P, cur(P)->line, "template nested too deeply (max_depth of the parser, %d)", PARSE_MAX_NEST);
}
static void leave(jparser *P) { P->nest--; }

static jnode *parse_expression(jparser *P, bool with_condexpr);
static jnode *parse_tuple(jparser *P, bool with_condexpr, const char *extra_end, bool explicit_parens);
static jnode *parse_unary(jparser *P, bool with_filter);
static jnode *parse_primary(jparser *P);
static jnode *parse_postfix(jparser *P, jnode *node);
static jnode *parse_filter_expr(jparser *P, jnode *node);
static jnode *parse_filter(jparser *P, jnode *node, bool start_inline);

static jnode *parse_or(jparser *P);

static jnode *parse_condexpr(jparser *P) {
    enter(P);
    int mark = P->nunknown;
    jnode *e1 = parse_or(P);
    bool was_soft = P->soft;
    if (is_name(cur(P), "if")) {
        for (int i = mark; i < P->nunknown; i++) P->unk[i].soft = true;
        P->soft = true;
    }
    while (is_name(cur(P), "if")) {
        int line = next(P)->line;
        jnode *e2 = parse_or(P);
        jnode *e3 = NULL;
        if (is_name(cur(P), "else")) {
            next(P);
            e3 = parse_condexpr(P);
        }
        jnode *c = nd(P, N_COND, line);
        c->a = e2;
        c->b = e1;
        c->c = e3;
        e1 = c;
    }
    P->soft = was_soft;
    leave(P);
    return e1;
}

static jnode *parse_expression(jparser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static jnode *parse_not(jparser *P);
static jnode *parse_and(jparser *P) {
    jnode *l = parse_not(P);
    while (is_name(cur(P), "and")) {
        int line = next(P)->line;
        jnode *n = nd(P, N_AND, line);
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    return l;
}
static jnode *parse_or(jparser *P) {
    jnode *l = parse_and(P);
    while (is_name(cur(P), "or")) {
        int line = next(P)->line;
        jnode *n = nd(P, N_OR, line);
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    return l;
}

static jnode *parse_math1(jparser *P);
static jnode *parse_compare(jparser *P) {
    int line = cur(P)->line;
    jnode *e = parse_math1(P);
    nvec ops = {0};
    while (1) {
        jtok *t = cur(P);
        int op = 0;
        if (t->type == TK_OP) {
            if (!strcmp(t->s, "==")) op = OP_EQ;
            else if (!strcmp(t->s, "!=")) op = OP_NE;
            else if (!strcmp(t->s, "<")) op = OP_LT;
            else if (!strcmp(t->s, "<=")) op = OP_LE;
            else if (!strcmp(t->s, ">")) op = OP_GT;
            else if (!strcmp(t->s, ">=")) op = OP_GE;
            if (op) next(P);
        } else if (is_name(t, "in")) {
            op = OP_IN;
            next(P);
        } else if (is_name(t, "not") && is_name(look(P), "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        }
        if (!op) break;
        jnode *o = nd(P, N_CONST, t->line);
        o->op = (uint8_t)op;
        o->a = parse_math1(P);
        nv_push(P, &ops, o, NULL);
    }
    if (!ops.n) return e;
    jnode *c = nd(P, N_COMPARE, line);
    c->a = e;
    c->ops = ops.v;
    c->nops = ops.n;
    return c;
}

static jnode *parse_not(jparser *P) {
    if (is_name(cur(P), "not")) {
        int line = next(P)->line;
        enter(P);
        jnode *n = nd(P, N_NOT, line);
        n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}

static jnode *binop(jparser *P, int op, jnode *a, jnode *b, int line) {
    jnode *n = nd(P, N_BINOP, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(jparser *P) {
    jnode *l = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        int line = next(P)->line;
        l = binop(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}
static jnode *parse_math2(jparser *P) {
    jnode *l = parse_pow(P);
    while (1) {
        jtok *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) break;
        next(P);
        l = binop(P, op, l, parse_pow(P), t->line);
    }
    return l;
}
static jnode *parse_concat(jparser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math2(P);
    if (!is_op(cur(P), "~")) return first;
    nvec v = {0};
    nv_push(P, &v, first, NULL);
    while (is_op(cur(P), "~")) {
        next(P);
        nv_push(P, &v, parse_math2(P), NULL);
    }
    jnode *n = nd(P, N_CONCAT, line);
    n->args = v.v;
    n->nargs = v.n;
    return n;
}
static jnode *parse_math1(jparser *P) {
    jnode *l = parse_concat(P);
    while (is_op(cur(P), "+") || is_op(cur(P), "-")) {
        jtok *t = next(P);
        l = binop(P, t->s[0] == '+' ? OP_ADD : OP_SUB, l, parse_concat(P), t->line);
    }
    return l;
}

static jnode *parse_unary(jparser *P, bool with_filter) {
    jtok *t = cur(P);
    jnode *node;
    enter(P);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        node = nd(P, N_UNOP, t->line);
        node->op = t->s[0] == '-' ? OP_NEG : OP_POS;
        node->a = parse_unary(P, false);
    } else {
        node = parse_primary(P);
    }
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    leave(P);
    return node;
}

static jnode *mkconst(jparser *P, int line, jv v) {
    jnode *n = nd(P, N_CONST, line);
    n->lit = v;
    return n;
}

static jv const_str(jparser *P, const char *s, size_t n) {
    jstr *st = jinja_allocz(P->a, sizeof(jstr));
    st->p = jinja_strndup(P->a, s, n);
    st->len = n;
    st->mk = JM_MARKUP;
    st->ascii = -1;
    jv v = {.t = JV_STR};
    v.u.s = st;
    return v;
}

static jnode *parse_primary(jparser *P) {
    jtok *t = cur(P);
    jv v = {0};
    switch (t->type) {
    case TK_NAME:
        next(P);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) { v.t = JV_BOOL; v.u.b = 1; return mkconst(P, t->line, v); }
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) { v.t = JV_BOOL; return mkconst(P, t->line, v); }
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) { v.t = JV_NONE; return mkconst(P, t->line, v); }
        {
            jnode *n = nd(P, N_NAME, t->line);
            n->name = t->s;
            return n;
        }
    case TK_STRING: {
        next(P);
        if (cur(P)->type != TK_STRING) return mkconst(P, t->line, const_str(P, t->s, t->len));
        size_t tot = t->len;
        size_t k = P->pos;
        while (P->t[k].type == TK_STRING) tot += P->t[k++].len;
        char *buf = jinja_alloc(P->a, tot + 1);
        if (t->len) memcpy(buf, t->s, t->len);
        size_t o = t->len;
        while (cur(P)->type == TK_STRING) {
            jtok *s = next(P);
            if (s->len) memcpy(buf + o, s->s, s->len);
            o += s->len;
        }
        return mkconst(P, t->line, const_str(P, buf, o));
    }
    case TK_INT:
        next(P);
        v.t = JV_INT;
        v.u.i = t->i;
        return mkconst(P, t->line, v);
    case TK_FLOAT:
        next(P);
        v.t = JV_FLOAT;
        v.u.f = t->f;
        return mkconst(P, t->line, v);
    case TK_OP:
        if (is_op(t, "(")) {
            next(P);
            jnode *n = parse_tuple(P, true, NULL, true);
            expect_op(P, ")");
            return n;
        }
        if (is_op(t, "[")) {
            next(P);
            nvec items = {0};
            while (!is_op(cur(P), "]")) {
                if (items.n) expect_op(P, ",");
                if (is_op(cur(P), "]")) break;
                nv_push(P, &items, parse_expression(P, true), NULL);
            }
            expect_op(P, "]");
            jnode *n = nd(P, N_LIST, t->line);
            n->args = items.v;
            n->nargs = items.n;
            return n;
        }
        if (is_op(t, "{")) {
            next(P);
            nvec keys = {0}, vals = {0};
            while (!is_op(cur(P), "}")) {
                if (keys.n) expect_op(P, ",");
                if (is_op(cur(P), "}")) break;
                jnode *k = parse_expression(P, true);
                expect_op(P, ":");
                jnode *v2 = parse_expression(P, true);
                nv_push(P, &keys, k, NULL);
                nv_push(P, &vals, v2, NULL);
            }
            expect_op(P, "}");
            jnode *n = nd(P, N_DICT, t->line);
            n->args = keys.v;
            n->nargs = keys.n;
            n->kwargs = vals.v;
            n->nkw = vals.n;
            return n;
        }
        break;
    default:
        break;
    }
    pfail(P, t->line, "unexpected '%s'", tokdesc(t));
}

static bool is_tuple_end(jparser *P, const char *extra_end) {
    jtok *t = cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || is_op(t, ")")) return true;
    return extra_end && is_name(t, extra_end);
}

static jnode *parse_tuple(jparser *P, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    int line = cur(P)->line;
    nvec args = {0};
    bool is_tuple = false;
    while (1) {
        if (args.n) expect_op(P, ",");
        if (is_tuple_end(P, extra_end)) break;
        nv_push(P, &args, parse_expression(P, with_condexpr), NULL);
        if (is_op(cur(P), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) pfail(P, cur(P)->line, "expected an expression, got '%s'", tokdesc(cur(P)));
    }
    jnode *n = nd(P, N_TUPLE, line);
    n->args = args.v;
    n->nargs = args.n;
    return n;
}

/* (args, kw=...) into n->args / n->kwnames / n->kwargs */
static void parse_call_args(jparser *P, jnode *n) {
    expect_op(P, "(");
    nvec args = {0}, kw = {0};
    bool need_comma = false;
    while (!is_op(cur(P), ")")) {
        if (need_comma) {
            expect_op(P, ",");
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            pfail(P, cur(P)->line, "*args and **kwargs in calls are not supported");
        if (cur(P)->type == TK_NAME && is_op(look(P), "=")) {
            const char *key = next(P)->s;
            next(P);
            nv_push(P, &kw, parse_expression(P, true), key);
        } else {
            if (kw.n) pfail(P, cur(P)->line, "positional argument follows keyword argument");
            nv_push(P, &args, parse_expression(P, true), NULL);
        }
        need_comma = true;
    }
    expect_op(P, ")");
    n->args = args.v;
    n->nargs = args.n;
    n->kwargs = kw.v;
    n->kwnames = kw.names;
    n->nkw = kw.n;
}

static jnode *parse_subscribed(jparser *P) {
    int line = cur(P)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        next(P);
    } else {
        jnode *e = parse_expression(P, true);
        if (!is_op(cur(P), ":")) return e;
        next(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ",")) parts[1] = parse_expression(P, true);
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) parts[2] = parse_expression(P, true);
    }
    jnode *s = nd(P, N_SLICE, line);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static jnode *parse_postfix(jparser *P, jnode *node) {
    while (1) {
        jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            jtok *a = next(P);
            if (a->type == TK_NAME) {
                jnode *g = nd(P, N_GETATTR, t->line);
                g->a = node;
                g->name = a->s;
                node = g;
            } else if (a->type == TK_INT) {
                jnode *g = nd(P, N_GETITEM, t->line);
                g->a = node;
                jv v = {.t = JV_INT};
                v.u.i = a->i;
                g->b = mkconst(P, t->line, v);
                node = g;
            } else {
                pfail(P, a->line, "expected name or number");
            }
        } else if (is_op(t, "[")) {
            next(P);
            nvec args = {0};
            while (!is_op(cur(P), "]")) {
                if (args.n) expect_op(P, ",");
                nv_push(P, &args, parse_subscribed(P), NULL);
            }
            expect_op(P, "]");
            if (!args.n) pfail(P, t->line, "expected a subscript");
            for (int i = 0; args.n > 1 && i < args.n; i++)
                if (args.v[i]->kind == N_SLICE) pfail(P, t->line, "a slice in a tuple subscript is not supported");
            jnode *key;
            if (args.n == 1) {
                key = args.v[0];
            } else {
                key = nd(P, N_TUPLE, t->line);
                key->args = args.v;
                key->nargs = args.n;
            }
            if (key->kind == N_SLICE) {
                key->a = node;
                node = key;
            } else {
                jnode *g = nd(P, N_GETITEM, t->line);
                g->a = node;
                g->b = key;
                node = g;
            }
        } else if (is_op(t, "(")) {
            jnode *c = nd(P, N_CALL, t->line);
            c->a = node;
            parse_call_args(P, c);
            node = c;
        } else {
            break;
        }
    }
    return node;
}

static jnode *parse_test(jparser *P, jnode *node) {
    int line = next(P)->line; /* is */
    bool neg = false;
    if (is_name(cur(P), "not")) {
        next(P);
        neg = true;
    }
    const char *name = expect_name(P);
    jnode *t = nd(P, N_TEST, line);
    t->a = node;
    t->name = name;
    t->flag = neg;
    if (!jinja_has_test(name)) note_unknown(P, line, "test", name);
    jtok *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) pfail(P, c->line, "you cannot chain multiple tests with is");
        jnode *arg = parse_postfix(P, parse_primary(P));
        t->args = jinja_alloc(P->a, sizeof(jnode *));
        t->args[0] = arg;
        t->nargs = 1;
    }
    return t;
}

static jnode *parse_filter(jparser *P, jnode *node, bool start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline) next(P);
        int line = cur(P)->line;
        const char *name = expect_name(P);
        if (!jinja_has_filter(name)) note_unknown(P, line, "filter", name);
        jnode *f = nd(P, N_FILTER, line);
        f->a = node;
        f->name = name;
        if (is_op(cur(P), "(")) parse_call_args(P, f);
        node = f;
        start_inline = false;
    }
    return node;
}

static jnode *parse_filter_expr(jparser *P, jnode *node) {
    while (1) {
        if (is_op(cur(P), "|")) node = parse_filter(P, node, false);
        else if (is_name(cur(P), "is")) node = parse_test(P, node);
        else if (is_op(cur(P), "(")) {
            jnode *c = nd(P, N_CALL, cur(P)->line);
            c->a = node;
            parse_call_args(P, c);
            node = c;
        } else break;
    }
    return node;
}

/* ---- statements ---- */

static jnode *parse_assign_target(jparser *P, bool with_tuple, bool name_only, const char *extra_end,
                                  bool with_namespace) {
    int line = cur(P)->line;
    if (name_only || (with_namespace && is_op(look(P), "."))) {
        const char *nm = expect_name(P);
        if (!name_only && is_op(cur(P), ".")) {
            next(P);
            jnode *r = nd(P, N_NSREF, line);
            r->a = nd(P, N_NAME, line);
            r->a->name = nm;
            r->name = expect_name(P);
            return r;
        }
        jnode *n = nd(P, N_NAME, line);
        n->name = nm;
        return n;
    }
    jnode *t;
    if (with_tuple) { /* parse_tuple(simplified=True): primaries */
        nvec args = {0};
        bool is_tuple = false;
        while (1) {
            if (args.n) expect_op(P, ",");
            if (is_tuple_end(P, extra_end)) break;
            nv_push(P, &args, parse_primary(P), NULL);
            if (is_op(cur(P), ",")) is_tuple = true;
            else break;
        }
        if (!is_tuple && args.n) {
            t = args.v[0];
        } else {
            if (!args.n) pfail(P, line, "expected an assignment target");
            t = nd(P, N_TUPLE, line);
            t->args = args.v;
            t->nargs = args.n;
        }
    } else {
        t = parse_primary(P);
    }
    if (t->kind == N_NAME) return t;
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->nargs; i++)
            if (t->args[i]->kind != N_NAME && t->args[i]->kind != N_TUPLE)
                pfail(P, line, "can't assign to this expression");
        return t;
    }
    pfail(P, line, "can't assign to this expression");
}

static jnode *subparse(jparser *P, const char *const *end);

/* expects the block end, parses statements up to one of end (not consumed
 * unless drop) */
static jnode *parse_statements(jparser *P, const char *const *end, bool drop) {
    if (is_op(cur(P), ":")) next(P);
    expect_type(P, TK_BLOCK_END, "end of statement block");
    int line = cur(P)->line;
    jnode *body = subparse(P, end);
    if (cur(P)->type == TK_EOF) pfail(P, line, "unexpected end of template, expected '%s'", end[0]);
    if (drop) next(P);
    return body;
}

static void parse_signature(jparser *P, jnode *m) {
    expect_op(P, "(");
    nvec args = {0}, defs = {0};
    bool any_def = false;
    while (!is_op(cur(P), ")")) {
        if (args.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        jnode *a = parse_assign_target(P, false, true, NULL, false);
        jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            d = parse_expression(P, true);
            any_def = true;
        } else if (any_def) {
            pfail(P, a->line, "non-default argument follows default argument");
        }
        nv_push(P, &args, a, NULL);
        nv_push(P, &defs, d, NULL);
    }
    expect_op(P, ")");
    m->args = args.v;
    m->nargs = args.n;
    m->kwargs = defs.v;
    m->nkw = defs.n;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const END_BLOCK[] = {"endblock", NULL};

static jnode *parse_statement(jparser *P) {
    jtok *t = cur(P);
    if (t->type != TK_NAME) pfail(P, t->line, "tag name expected");
    const char *w = t->s;
    int line = t->line;
    enter(P);
    jnode *res = NULL;
    if (!strcmp(w, "for")) {
        next(P);
        jnode *f = nd(P, N_FOR, line);
        f->a = parse_assign_target(P, true, false, "in", false);
        if (!is_name(cur(P), "in")) pfail(P, cur(P)->line, "expected 'in'");
        next(P);
        f->b = parse_tuple(P, false, "recursive", false);
        bool os = P->soft;
        if (is_name(cur(P), "if")) {
            next(P);
            P->soft = false;
            f->c = parse_expression(P, true);
        }
        if (is_name(cur(P), "recursive")) pfail(P, cur(P)->line, "recursive loops are not supported");
        P->loops++;
        P->soft = false;
        jnode *body = parse_statements(P, END_FOR, false);
        P->loops--;
        f->args = jinja_alloc(P->a, sizeof(jnode *));
        f->args[0] = body;
        f->nargs = 1;
        if (is_name(next(P), "else")) f->d = parse_statements(P, END_FOR2, true);
        P->soft = os;
        res = f;
    } else if (!strcmp(w, "if")) {
        next(P);
        jnode *top = nd(P, N_IF, line), *node = top;
        bool os = set_soft(P, true);
        while (1) {
            node->a = parse_tuple(P, false, NULL, false);
            node->b = parse_statements(P, END_IF, false);
            jtok *k = next(P);
            if (is_name(k, "elif")) {
                jnode *e = nd(P, N_IF, k->line);
                node->c = e;
                node = e;
                continue;
            } else if (is_name(k, "else")) {
                node->c = parse_statements(P, END_IF2, true);
            }
            break;
        }
        P->soft = os;
        res = top;
    } else if (!strcmp(w, "set")) {
        next(P);
        jnode *target = parse_assign_target(P, true, false, NULL, true);
        if (is_op(cur(P), "=")) {
            next(P);
            jnode *s = nd(P, N_SET, line);
            s->a = target;
            s->b = parse_tuple(P, true, NULL, false);
            res = s;
        } else {
            jnode *s = nd(P, N_SETBLOCK, line);
            s->a = target;
            bool os = set_soft(P, false);
            s->c = parse_filter(P, NULL, false);
            s->b = parse_statements(P, END_SET, true);
            P->soft = os;
            res = s;
        }
    } else if (!strcmp(w, "macro")) {
        next(P);
        jnode *m = nd(P, N_MACRO, line);
        m->name = expect_name(P);
        bool os = set_soft(P, false);
        parse_signature(P, m);
        int saved = P->loops;
        P->loops = 0;
        m->b = parse_statements(P, END_MACRO, true);
        P->loops = saved;
        P->soft = os;
        res = m;
    } else if (!strcmp(w, "call")) {
        next(P);
        jnode *m = nd(P, N_MACRO, line);
        m->name = "caller";
        if (is_op(cur(P), "(")) parse_signature(P, m);
        jnode *call = parse_expression(P, true);
        if (call->kind != N_CALL) pfail(P, line, "expected call");
        int saved = P->loops;
        P->loops = 0;
        bool os = set_soft(P, false);
        m->b = parse_statements(P, END_CALL, true);
        P->soft = os;
        P->loops = saved;
        jnode *c = nd(P, N_CALLBLOCK, line);
        c->a = call;
        c->b = m;
        res = c;
    } else if (!strcmp(w, "filter")) {
        next(P);
        jnode *f = nd(P, N_FILTERBLOCK, line);
        bool os = set_soft(P, false);
        f->a = parse_filter(P, NULL, true);
        f->b = parse_statements(P, END_FILTER, true);
        P->soft = os;
        res = f;
    } else if (!strcmp(w, "with")) {
        next(P);
        jnode *f = nd(P, N_WITH, line);
        nvec tg = {0}, vals = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (tg.n) expect_op(P, ",");
            jnode *target = parse_assign_target(P, true, false, NULL, false);
            expect_op(P, "=");
            nv_push(P, &tg, target, NULL);
            nv_push(P, &vals, parse_expression(P, true), NULL);
        }
        f->args = tg.v;
        f->nargs = tg.n;
        f->kwargs = vals.v;
        f->nkw = vals.n;
        bool os = set_soft(P, false);
        f->b = parse_statements(P, END_WITH, true);
        P->soft = os;
        res = f;
    } else if (!strcmp(w, "generation")) {
        next(P);
        jnode *f = nd(P, N_WITH, line); /* a scope around the body */
        bool os = set_soft(P, false);
        f->b = parse_statements(P, END_GEN, true);
        P->soft = os;
        res = f;
    } else if (!strcmp(w, "block")) {
        next(P);
        expect_name(P);
        jnode *f = nd(P, N_WITH, line);
        bool os = set_soft(P, false);
        f->b = parse_statements(P, END_BLOCK, true);
        P->soft = os;
        if (cur(P)->type == TK_NAME) next(P); /* {% endblock name %} */
        res = f;
    } else if (!strcmp(w, "print")) {
        next(P);
        nvec v = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (v.n) expect_op(P, ",");
            jnode *o = nd(P, N_OUTPUT, line);
            o->a = parse_expression(P, true);
            nv_push(P, &v, o, NULL);
        }
        jnode *b = nd(P, N_BODY, line);
        b->args = v.v;
        b->nargs = v.n;
        res = b;
    } else if (!strcmp(w, "break") || !strcmp(w, "continue")) {
        next(P);
        if (!P->loops) pfail(P, line, "'%s' outside a loop", w);
        res = nd(P, w[0] == 'b' ? N_BREAK : N_CONTINUE, line);
    } else if (!strcmp(w, "include") || !strcmp(w, "import") || !strcmp(w, "from") ||
               !strcmp(w, "extends")) {
        pfail(P, line, "'%s' is not allowed (templates cannot load other templates)", w);
    } else {
        pfail(P, line, "encountered unknown tag '%s'", w);
    }
    expect_type(P, TK_BLOCK_END, "end of statement block");
    leave(P);
    return res;
}

static jnode *subparse(jparser *P, const char *const *end) {
    nvec body = {0};
    int line = cur(P)->line;
    while (cur(P)->type != TK_EOF) {
        jtok *t = cur(P);
        if (t->type == TK_DATA) {
            next(P);
            jnode *d = nd(P, N_DATA, t->line);
            d->lit = const_str(P, t->s, t->len);
            nv_push(P, &body, d, NULL);
        } else if (t->type == TK_VAR_BEGIN) {
            next(P);
            jnode *o = nd(P, N_OUTPUT, t->line);
            o->a = parse_tuple(P, true, NULL, false);
            expect_type(P, TK_VAR_END, "end of print statement");
            nv_push(P, &body, o, NULL);
        } else if (t->type == TK_BLOCK_BEGIN) {
            next(P);
            if (end && cur(P)->type == TK_NAME) {
                for (int k = 0; end[k]; k++)
                    if (is_name(cur(P), end[k])) goto done;
            }
            if (cur(P)->type == TK_NAME && !end &&
                (!strncmp(cur(P)->s, "end", 3) || is_name(cur(P), "else") || is_name(cur(P), "elif")))
                pfail(P, cur(P)->line, "encountered unknown tag '%s'", cur(P)->s);
            jnode *s = parse_statement(P);
            if (s) nv_push(P, &body, s, NULL);
        } else {
            pfail(P, t->line, "unexpected '%s'", tokdesc(t));
        }
    }
done:;
    jnode *b = nd(P, N_BODY, line);
    b->args = body.v;
    b->nargs = body.n;
    return b;
}

jnode *jinja_parse_tokens(jarena *a, jmp_buf *jmp, char *err, size_t errlen, jtok *toks, size_t n) {
    jparser P = {.a = a, .jmp = jmp, .err = err, .errlen = errlen, .t = toks, .n = n};
    jnode *root = subparse(&P, NULL);
    if (cur(&P)->type != TK_EOF) pfail(&P, cur(&P)->line, "unexpected '%s'", tokdesc(cur(&P)));
    for (int i = 0; i < P.nunknown; i++)
        if (!P.unk[i].soft) pfail(&P, P.unk[i].line, "no %s named '%s'", P.unk[i].kind, P.unk[i].name);
    return root;
}
