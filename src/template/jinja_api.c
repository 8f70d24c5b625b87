/* jinja_api.c: jinja_parse, jinja_free and jinja_render: set up the arena
 * and the limits, catch errors (longjmp), load the context and copy the
 * output and its content mask out. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"

jinja_tmpl *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    jinja_tmpl *volatile t = calloc(1, sizeof(*t));
    jmp_buf *volatile jmp = malloc(sizeof(jmp_buf));
    if (!t || !jmp) {
        free(t);
        free(jmp);
        if (errlen) snprintf(err, errlen, "line 0: out of memory");
        return NULL;
    }
    t->arena.jmp = jmp;
    t->arena.err = err;
    t->arena.errlen = errlen;
    if (setjmp(*jmp)) {
        jinja_arena_free(&t->arena);
        free(t);
        free(jmp);
        return NULL;
    }
    jlexer lx = {.a = &t->arena, .jmp = jmp, .err = err, .errlen = errlen};
    jinja_lex(&lx, src ? src : "", src ? len : 0);
    t->root = jinja_parse_tokens(&t->arena, jmp, err, errlen, lx.toks, lx.n);
    t->arena.jmp = NULL;
    free(jmp);
    return t;
}

void jinja_free(jinja_tmpl *t) {
    if (!t) return;
    jinja_arena_free(&t->arena);
    free(t);
}

int jinja_render(const jinja_tmpl *t, const cJSON *ctx, const char *const *markup_keys,
                 const jinja_limits *lim, char **out, size_t *out_len,
                 unsigned char **content_mask, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    *out = NULL;
    if (out_len) *out_len = 0;
    if (content_mask) *content_mask = NULL;
    if (!t) {
        if (errlen) snprintf(err, errlen, "line 0: no template");
        return -1;
    }
    jrt *volatile r = calloc(1, sizeof(jrt));
    if (!r) {
        if (errlen) snprintf(err, errlen, "line 0: out of memory");
        return -1;
    }
    r->err = err;
    r->errlen = errlen;
    r->max_steps = lim && lim->max_steps ? lim->max_steps : 10000000ULL;
    r->max_output = lim && lim->max_output ? lim->max_output : (size_t)16 << 20;
    r->max_depth = lim && lim->max_depth > 0 ? lim->max_depth : 64;
    r->now = lim && lim->now ? lim->now : (int64_t)time(NULL);
    r->arena.limit = ((size_t)128 << 20) + 4 * r->max_output + t->arena.total;
    r->arena.jmp = &r->jmp;
    r->arena.err = err;
    r->arena.errlen = errlen;
    r->line = 1;
    if (setjmp(r->jmp)) {
        jinja_arena_free(&r->arena);
        free(r);
        return -1;
    }
    jscope *g = jinja_allocz(&r->arena, sizeof(jscope));
    r->globals = g;
    jscope *sc = jinja_allocz(&r->arena, sizeof(jscope));
    sc->parent = g;
    if (ctx && cJSON_IsObject(ctx)) {
        size_t n = 0;
        for (const cJSON *c = ctx->child; c; c = c->next) n++;
        g->names = jinja_alloc(&r->arena, (n + 1) * sizeof(char *));
        g->vals = jinja_alloc(&r->arena, (n + 1) * sizeof(jv));
        g->cap = n + 1;
        for (const cJSON *c = ctx->child; c; c = c->next) {
            if (!c->string) continue;
            int mk = 1;
            for (size_t k = 0; markup_keys && markup_keys[k]; k++)
                if (!strcmp(markup_keys[k], c->string)) mk = 0;
            jv v = jinja_from_json(r, c, mk);
            size_t i;
            for (i = 0; i < g->n; i++)
                if (!strcmp(g->names[i], c->string)) break;
            if (i == g->n) g->names[g->n++] = jinja_strndup(&r->arena, c->string, strlen(c->string));
            g->vals[i] = v;
        }
    }
    jbuf b = {0};
    jb_init(r, &b, 4096);
    jinja_exec(r, sc, t->root, &b);
    char *o = malloc(b.len + 1);
    unsigned char *m = content_mask ? malloc(b.len ? b.len : 1) : NULL;
    if (!o || (content_mask && !m)) {
        free(o);
        free(m);
        if (errlen) snprintf(err, errlen, "line 0: out of memory");
        jinja_arena_free(&r->arena);
        free(r);
        return -1;
    }
    memcpy(o, b.p, b.len);
    o[b.len] = 0;
    if (m) memcpy(m, b.m, b.len);
    *out = o;
    if (out_len) *out_len = b.len;
    if (content_mask) *content_mask = m;
    jinja_arena_free(&r->arena);
    free(r);
    return 0;
}
