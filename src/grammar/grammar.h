/* grammar.h: the compiled form of a grammar, shared by the GBNF compiler
 * (gbnf.c), the matcher (match.c, mask.c) and the token trie (trie.c).
 *
 * A compiled grammar is a byte-level pushdown automaton in llama.cpp's
 * layout: one flat array of elements, where each rule's alternatives are
 * runs of elements, each run ended by an E_END. An element is a set of
 * bytes (E_BYTES: one of the 256-bit sets in `sets`), or a reference to a
 * rule (E_REF). Character classes over code points were turned into UTF-8
 * byte sequences when compiling, so matching never decodes UTF-8.
 *
 * A matcher's state is a set of stacks. A stack is a chain of positions
 * (element indices): the top is an E_BYTES element, the next byte must be
 * in its set; below it the positions to go on from when the rule it is in
 * ends. The empty stack means the grammar has ended. */
#ifndef SP_GRAMMAR_INTERNAL_H
#define SP_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbuf.h"
#include "specula.h"

enum { E_END = 0, E_BYTES = 1, E_REF = 2 };

typedef struct {
    uint32_t type : 2;
    uint32_t arg : 30; /* E_BYTES: set index; E_REF: rule index */
} gr_elem;

typedef struct {
    uint32_t w[8];
} gr_set;

static inline bool gr_set_has(const gr_set *s, unsigned b) { return s->w[b >> 5] >> (b & 31) & 1; }
static inline void gr_set_add(gr_set *s, unsigned b) { s->w[b >> 5] |= 1u << (b & 31); }

/* Limits (compile refuses beyond them; they bound the work of a step). */
#define GR_MAX_ELEMS (1 << 20)
#define GR_MAX_RULES (1 << 16)
#define GR_MAX_REPEAT 1000

/* A matcher's budgets (match.c). Work: units (an element visited while
 * expanding, a stack sorted or hashed, a trie node walked) one call may
 * spend on top of one walk of the vocabulary's trie: 0.4-9 ms of one Zen 4
 * core at the hostile grammars of test_grammar_budget (the most where a
 * grammar of a million elements misses the caches at every unit), while
 * the masks of the test suite's JSON schemas and grammars take under
 * 20,000 beyond the walk. The matcher's calls together may spend
 * GR_TOTAL_BUDGET beyond their trie walks, plus GR_BYTE_BUDGET per byte
 * they ran. Memory: bytes one matcher may hold. */
#define GR_WORK_BUDGET (1 << 17)
#define GR_TOTAL_BUDGET ((int64_t)4 << 20) /* a matcher's calls together, trie walks aside */
#define GR_BYTE_BUDGET 256 /* ... and this much more per byte run */
#define GR_MATCHER_MAX_BYTES ((size_t)32 << 20)

struct sp_grammar {
    int refs;              /* atomic reference count */
    gr_elem *el;           /* [n_el] */
    int32_t n_el;
    int32_t *alt;          /* [alt_off[n_rules]] start element of each alternative */
    int32_t *alt_off;      /* [n_rules + 1] rule r's alternatives: alt[alt_off[r] .. alt_off[r+1]) */
    int32_t n_rules;
    gr_set *sets;          /* [n_sets] */
    int32_t n_sets;
    int32_t root;
    /* masks by state content shared by the grammar's matchers (mask.c),
     * made at the first mask */
    struct gr_shared *shared;
    pthread_mutex_t shared_mu;
};

/* Address space for a grammar's shared masks (2048 masks of a 32K
 * vocabulary, 400 of a 150K one; pages are touched only as masks are
 * added). The engine keeps 32 grammars, so this bounds their masks to
 * 256 MiB. */
#define GR_SHARED_BYTES ((size_t)8 << 20)

void gr_retain(const sp_grammar *g);
/* sp_grammar_compile, and on failure whether the grammar was refused for
 * left recursion (a rule that reaches itself without consuming input). */
sp_grammar *gr_compile(const char *text, size_t len, bool *left_recursive, char *err,
                       size_t errlen);
/* The bytes a compiled grammar holds (its shared masks aside). */
static inline size_t gr_bytes(const sp_grammar *g) {
    return sizeof(*g) + (size_t)g->n_el * sizeof(gr_elem) + (size_t)g->n_sets * sizeof(gr_set) +
           ((size_t)g->alt_off[g->n_rules] + (size_t)g->n_rules + 1) * sizeof(int32_t);
}
/* The shared mask of a state's content key into bits (its count), or -1. */
int32_t gr_shared_get(const sp_grammar *g, const uint64_t key[2], uint32_t *bits, int32_t words);
void gr_shared_put(const sp_grammar *g, const uint64_t key[2], const uint32_t *bits, int32_t words,
                   int32_t count);
void gr_shared_free(struct gr_shared *s);

/* The trie of token byte strings (trie.c). Node 0 is the root (empty
 * prefix); a node's children are contiguous, sorted by byte. */
typedef struct {
    uint32_t child;        /* first child */
    uint32_t tok;          /* first of its tokens in toks[] */
    uint16_t n_child;
    uint16_t n_tok;        /* tokens whose bytes end here */
    uint8_t byte;          /* the byte that leads here from the parent */
} gr_tnode;

struct sp_token_trie {
    gr_tnode *node;
    int32_t n_node;
    sp_token *toks;
    int32_t n_vocab;
    int32_t max_depth;     /* longest token, bytes */
    sp_token *eog;         /* end-of-generation tokens */
    int32_t n_eog;
    const sp_vocab *v;
    /* each token's bytes, for sp_matcher_accept_token */
    uint32_t *piece_off;   /* [n_vocab + 1] into piece */
    char *piece;
};

/* A JSON Schema "pattern" (regex.c) as a GBNF expression for the body of a
 * JSON string, appended to out; the bounds of the matched strings' length in
 * characters (*max_len -1: none). SP_OK; SP_ERR_UNSUPPORTED + err naming a
 * construct outside the supported subset; SP_ERR_INVALID + err for a
 * malformed pattern; SP_ERR_NOMEM. */
int gr_pattern_gbnf(const char *re, sbuf *out, double *min_len, double *max_len, char *err,
                    size_t errlen);

/* The GBNF of "a or b" (either.c): root ::= a-root | b-root, each
 * grammar's rules renamed apart by the prefixes "a-" and "b-". Both must
 * define root. A malloc'd string, or NULL when out of memory. */
char *gr_gbnf_either(const char *a, const char *b);
/* The GBNF of the text lit, white space, then what g matches (its rules
 * renamed "b-..."): a grammar that starts where a reasoning block ends
 * (lit "</think>"). A malloc'd string, or NULL when out of memory. */
char *gr_gbnf_after(const char *lit, const char *g);

#endif
