/* jinja_internal.h: the Jinja interpreter's internal types: the arena every
 * allocation of a parse or a render comes from, values (strings carry a
 * per-byte content mask), the AST, and the runtime state. Errors unwind
 * with longjmp to jinja_parse / jinja_render, which free the arena. */
#ifndef SP_TEMPLATE_JINJA_INTERNAL_H
#define SP_TEMPLATE_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"

/* ---- arena ---- */
typedef struct jarena_blk {
    struct jarena_blk *next;
    size_t used, cap;
    max_align_t data[];
} jarena_blk;

typedef struct {
    jarena_blk *head;
    size_t total, limit; /* limit 0: none */
    jmp_buf *jmp;        /* where running out unwinds to */
    char *err;
    size_t errlen;
} jarena;

void *jinja_alloc(jarena *a, size_t n);
void *jinja_allocz(jarena *a, size_t n);
void jinja_arena_free(jarena *a);
char *jinja_strndup(jarena *a, const char *s, size_t n);

/* ---- values ---- */
enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS, JV_MACRO, JV_FUNC, JV_METHOD, JV_LOOP, JV_CYCLER, JV_JOINER,
};
enum { JM_MARKUP = 0, JM_CONTENT = 1, JM_MIXED = 2 };

typedef struct jstr {
    size_t len;
    char *p;             /* NUL-terminated */
    unsigned char *mask; /* per byte, only when mk == JM_MIXED */
    uint8_t mk;
    int8_t ascii;        /* 1 all ASCII, 0 not, -1 unknown */
    uint8_t safe;        /* a Markup string (|safe, |escape): `+` escapes the other side */
} jstr;

typedef struct jv {
    uint8_t t;
    uint8_t content; /* scalars: came from the context */
    uint8_t tuple;   /* JV_LIST: 0 list, 1 tuple, 2 generator/iterator (jinja2's lazy filter results) */
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;
        struct jlist *l;
        struct jdict *d; /* JV_DICT, JV_NS */
        struct jmacro *m;
        int fn;          /* JV_FUNC */
        struct jmethod *me;
        struct jloop *loop;
        struct jcycler *cy;
        const char *uname; /* JV_UNDEF: the name, for messages (may be NULL) */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    int32_t *hidx; /* open addressing over string keys (n >= 16), -1 empty */
    size_t hcap;
} jdict;

typedef struct jmethod {
    jv self;
    const char *name;
} jmethod;

typedef struct jloop {
    int64_t index0, length;
    jlist *items;
    int depth0;
    jv last_changed;
    bool has_changed;
} jloop;

typedef struct jcycler {
    jlist *items;
    size_t pos;
    jstr *sep; /* joiner */
    bool used;
} jcycler;

/* ---- AST ---- */
enum {
    /* statements */
    N_BODY, N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE, N_WITH, N_DO,
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_BINOP, N_UNOP, N_AND, N_OR, N_NOT, N_COMPARE, N_CONCAT, N_COND, N_LIST,
    N_TUPLE, N_DICT, N_NSREF,
};

enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_NEG, OP_POS,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;
    uint8_t flag; /* N_TEST: negated; N_FOR: recursive; N_CALL etc: has ** */
    int line;
    const char *name; /* N_NAME, attribute, filter/test name, macro name */
    jv lit;           /* N_CONST */
    jnode *a, *b, *c, *d;
    jnode **args;     /* positional arguments, list items, body statements */
    int nargs;
    const char **kwnames; /* keyword argument names (parallel to kwargs) */
    jnode **kwargs;
    int nkw;
    jnode **ops;      /* N_COMPARE operands (op in each), N_IF elif chain */
    int nops;
};

/* Node fields by kind:
 *  N_BODY: args[nargs] statements.
 *  N_DATA: lit (markup string).   N_OUTPUT: a.
 *  N_IF: a test, b body, c else (an N_IF for elif, or N_BODY).
 *  N_FOR: a target (N_NAME / N_TUPLE of names), b iterable, c filter,
 *         args[0] body, d else body; flag recursive.
 *  N_SET: a target (N_NAME, N_TUPLE, N_NSREF), b value.
 *  N_SETBLOCK: a target, b body, c filter chain (N_FILTER with a NULL
 *         innermost) or NULL.
 *  N_MACRO: name, args = parameter N_NAME nodes, kwargs = defaults
 *         (NULL = none) parallel to args (nkw == nargs), b body.
 *  N_CALLBLOCK: a the call (N_CALL), b the caller macro (N_MACRO).
 *  N_FILTERBLOCK: a filter chain (innermost a NULL), b body.
 *  N_WITH: args targets, kwargs values, b body.
 *  N_CONST: lit. N_NAME: name. N_NSREF: a (N_NAME), name attribute.
 *  N_GETATTR: a obj, name.  N_GETITEM: a obj, b key.
 *  N_SLICE: a obj, b start, c stop, d step (any NULL).
 *  N_CALL: a callee, args, kwnames/kwargs.
 *  N_FILTER: a value (NULL in filter blocks), name, args, kw.
 *  N_TEST: a value, name, args, kw; flag negated.
 *  N_BINOP: op, a, b.  N_UNOP: op, a.  N_AND/N_OR: a, b.  N_NOT: a.
 *  N_COMPARE: a first, ops[] each with op and a.
 *  N_CONCAT: args.  N_COND: a test, b then, c else (NULL: undefined).
 *  N_LIST/N_TUPLE: args.  N_DICT: args keys, kwargs values (nkw = nargs).
 */

struct jinja_tmpl {
    jarena arena;
    jnode *root;
};

/* ---- lexer ---- */
enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
    TK_ERROR, /* what the lexer could not read: its message (s); the parser
                 fails with it only when it gets there, as jinja2 (whose
                 lexer runs as the parser pulls tokens) does */
};

typedef struct {
    uint8_t type;
    int line;
    const char *s; /* TK_DATA / TK_STRING: text (arena); TK_NAME/TK_OP: text */
    size_t len;
    int64_t i;
    double f;
} jtok;

typedef struct {
    jarena *a;
    jmp_buf *jmp;
    char *err;
    size_t errlen;
    jtok *toks;
    size_t n, cap;
    jmp_buf stop;  /* where jinja_lex_fail ends the lexing, after its TK_ERROR */
} jlexer;

void jinja_lex(jlexer *lx, const char *src, size_t len);
void jinja_lex_fail(jlexer *lx, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));

jnode *jinja_parse_tokens(jarena *a, jmp_buf *jmp, char *err, size_t errlen, jtok *toks, size_t n);

/* ---- runtime ---- */
typedef struct jscope {
    struct jscope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
} jscope;

typedef struct jmacro {
    jnode *def;
    jscope *closure;
    struct jmacro *caller; /* for a call block's macro call */
} jmacro;

typedef struct {
    char *p;
    unsigned char *m;
    size_t len, cap;
} jbuf;

typedef struct jrt {
    jarena arena;
    jmp_buf jmp;
    char *err;
    size_t errlen;
    int line;
    uint64_t steps, max_steps;
    size_t max_output;
    int max_depth, depth, call_depth, rdepth;
    int64_t now;
    jscope *globals;
    int loopctl; /* 1 break, 2 continue */
} jrt;

enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_CYCLER, JF_JOINER, JF_LIPSUM };

#define JINJA_EVAL_DEPTH_CAP 2000 /* C frames of the evaluator, all together */

void jinja_fail(jrt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
void jinja_step(jrt *r, uint64_t n);

/* values (value.c) */
jv jv_undef(const char *name);
jv jv_none(void);
jv jv_bool(int b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_strv(jstr *s);
jstr *jstr_new(jrt *r, const char *p, size_t n, int mk);
jv jv_cstr(jrt *r, const char *s); /* markup */
jv jv_strn(jrt *r, const char *p, size_t n, int mk);
jv jv_listv(jlist *l);
jlist *jlist_new(jrt *r, size_t cap);
void jlist_push(jrt *r, jlist *l, jv v);
jdict *jdict_new(jrt *r, size_t cap);
jv *jdict_get(jdict *d, jv key);
jv *jdict_gets(jdict *d, const char *key);
void jdict_set(jrt *r, jdict *d, jv key, jv val);
bool jv_truthy(jv v);
bool jv_is_content(jv v); /* any content inside */
bool jv_is_content_d(jv v, int depth);
bool jv_equal(jrt *r, jv a, jv b);
int jv_compare(jrt *r, jv a, jv b); /* <0 0 >0, type error fails */
const char *jv_typename(jv v);
jstr *jv_tostr(jrt *r, jv v);        /* str(v) with masks */
void jv_repr(jrt *r, jbuf *b, jv v, int mk); /* repr(v), bytes marked mk */
void jinja_fmt_float(char *buf, size_t n, double f); /* Python repr */
bool jstr_is_ascii(jstr *s);
size_t jstr_cplen(jstr *s); /* length in code points */
size_t jinja_utf8_next(const char *p, size_t n, size_t i); /* index after the code point at i */
jv jv_str_index(jrt *r, jstr *s, int64_t i, bool *ok);
jv jv_slice(jrt *r, jv v, jv start, jv stop, jv step);
jstr *jstr_sub(jrt *r, jstr *s, size_t from, size_t to); /* byte range, keeps mask */
int jstr_mk_of(const jstr *s);

/* builders (value.c) */
void jb_init(jrt *r, jbuf *b, size_t cap);
void jb_add(jrt *r, jbuf *b, const char *s, size_t n, int mk);
void jb_addc(jrt *r, jbuf *b, char c, int mk);
void jb_adds(jrt *r, jbuf *b, const jstr *s);
void jb_addmask(jrt *r, jbuf *b, const char *s, size_t n, const unsigned char *m);
jstr *jb_finish(jrt *r, jbuf *b);
jstr *jb_finish_mk(jrt *r, jbuf *b, int mk); /* one mark for all bytes */

/* eval.c */
jv jinja_eval(jrt *r, jscope *sc, jnode *n);
jv jinja_call(jrt *r, jv fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
jv jinja_getattr(jrt *r, jv obj, const char *name);
jv jinja_getitem(jrt *r, jv obj, jv key);
jv jinja_binop(jrt *r, int op, jv a, jv b);
void jinja_exec(jrt *r, jscope *sc, jnode *n, jbuf *out);
void jinja_iter(jrt *r, jv v, jlist **out); /* materialized iteration */

/* builtins.c / filters.c / tests.c / methods.c */
jv jinja_filter(jrt *r, const char *name, jv v, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
bool jinja_has_filter(const char *name);
bool jinja_test(jrt *r, const char *name, jv v, jv *args, int nargs);
bool jinja_has_test(const char *name);
jv jinja_method(jrt *r, jv self, const char *name, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
bool jinja_has_method(jv self, const char *name);
jv jinja_global_call(jrt *r, int fn, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
jv jinja_kwarg(const char **kwn, jv *kwv, int nkw, const char *name, jv *args, int nargs, int pos);

/* jinja_json.c */
jv jinja_from_json(jrt *r, const struct cJSON *j, int mk);
void jinja_tojson(jrt *r, jbuf *b, jv v, int indent, const char *isep, const char *ksep,
                  bool sort_keys, bool ensure_ascii, int level);

#endif
