/* gbnf_internal.h: the GBNF compiler's parser state, shared by gbnf.c (the
 * parser, the layout of the compiled grammar) and gbnf_check.c (the checks
 * of the parsed rules). Internal to src/grammar, not public. */
#ifndef SP_GRAMMAR_GBNF_INTERNAL_H
#define SP_GRAMMAR_GBNF_INTERNAL_H

#include <stddef.h>

#include "grammar/grammar.h"

typedef struct {
    gr_elem *e;
    int32_t n, cap;
} evec;

typedef struct {
    char *name;             /* NULL for generated rules */
    size_t name_len;
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
    int32_t *names;         /* hash table of the named rules' indices, -1: empty */
    uint32_t names_cap;     /* a power of two, twice the named rules at least */
    int32_t n_names;
    uint64_t key[2];        /* the table's hash key, random per compile */
    int64_t n_elems;
    int depth;
    char *err;
    size_t errlen;
    bool failed;
    bool left_recursive;    /* it failed on a rule that reaches itself (gbnf_check.c) */
} parser;

/* The first error, with its place in the text (later ones are dropped);
 * fmt has one %s, for arg. */
void gb_perr(parser *ps, const char *fmt, const char *arg);

/* Every rule defined, none left recursive (gbnf_check.c); false with the
 * error set. */
bool gb_check(parser *ps);

#endif
