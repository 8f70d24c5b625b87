/* matcher.h: the grammar matcher's state and the helpers its two files
 * share: match.c (the pushdown automaton over bytes, budgets, compaction,
 * lazy triggers) and mask.c (token masks). Internal to src/grammar, not
 * public: callers see sp_matcher through specula.h only. */
#ifndef SP_GRAMMAR_MATCHER_H
#define SP_GRAMMAR_MATCHER_H

#include <stdlib.h>

#include "grammar/grammar.h"

#define MASK_CACHE 32

typedef struct {
    uint32_t pos;
    int32_t parent;
    uint64_t h;                  /* hash of the stack's content (positions to the bottom) */
} gnode;

typedef struct {
    int32_t *v;
    int32_t n, cap;
} ivec;

typedef struct {
    uint64_t h;
    ivec set;
    uint32_t *bits;
    int32_t count;
    bool used;
} centry;

enum { MF_NONE, MF_WORK, MF_TOTAL, MF_MEM };

struct sp_matcher {
    const sp_grammar *g;
    const sp_token_trie *t;
    gnode *node;
    int32_t n_node, cap_node;
    int32_t n_live;              /* nodes kept by the last compaction */
    int32_t *ht;                 /* [ht_cap] node ids, -1 empty */
    uint32_t ht_cap;
    ivec cur;                    /* the state */
    ivec ahead[SP_SPEC_K_MAX + 1]; /* lookahead states ([0] unused: cur) */
    int32_t n_ahead;
    ivec sc;                     /* scratch: states as a stack of regions */
    ivec wk;                     /* expand's pending (pos, parent) pairs */
    int64_t work, budget;        /* units spent in this call, and its allowance */
    int64_t total;               /* units spent since creation, but trie walks */
    int64_t n_bytes;             /* bytes run since creation (each adds to the allowance) */
    int fail;                    /* MF_*: a budget was exceeded; sticky */
    size_t bytes;                /* held in the buffers above and below */
    centry cache[MASK_CACHE];
    int32_t cache_next;
    int32_t words;               /* (n_vocab + 31) / 32 */
    /* the mask walk's memo: states interned as set ids, and the state
     * after each (set, byte) met; the top-byte union of each set */
    ivec spool;                  /* the sets' stacks, concatenated */
    struct sinfo {
        int32_t off, n;
        uint64_t h;
        gr_set u;                /* bytes some stack's top takes */
        int32_t row;             /* its transitions in trow, -1 none yet */
    } *sets;
    int32_t n_sets, cap_sets;
    int32_t *sht;                /* [sht_cap] set ids by hash, -1 empty */
    uint32_t sht_cap;
    ivec trow;                   /* rows of 256 transitions (sinfo.row) */
    bool jump;                   /* jump-forward: forced bytes allow one token */
    /* lazy grammars: the phase of cur and of each lookahead state */
    int32_t ph;
    int32_t ph_ahead[SP_SPEC_K_MAX + 1];
    struct {
        unsigned char *s;        /* the trigger; NULL: not lazy */
        int32_t len;
        bool at_start;
        sp_token tok;            /* a control token that stands for it, or -1 */
        int32_t *fail;           /* [len] KMP failure function */
        ivec start;              /* the grammar's state after the trigger */
        ivec refused;            /* per phase k: refused.v[off[k] .. off[k + 1]) */
        int32_t *off;            /* [len + 1] */
    } tr;
};

/* Phases (lazy grammars; 0..len-1: free, that many trigger bytes matched). */
#define PH_ACTIVE (-1)           /* the grammar constrains the output (always when not lazy) */
#define PH_FREE (-2)             /* an anchored trigger did not come first: free to the end */

/* ---- budgets (match.c) ---- */

/* Spends n work units; false (and the matcher failed) past the call's
 * allowance or the matcher's whole allowance. */
static inline bool charge(sp_matcher *m, int64_t n) {
    if (m->fail) return false;
    m->work += n;
    m->total += n;
    if (m->work <= m->budget && m->total <= GR_TOTAL_BUDGET + GR_BYTE_BUDGET * m->n_bytes) return true;
    m->fail = m->work > m->budget ? MF_WORK : MF_TOTAL;
    return false;
}

/* A trie node walked: counted per call only (one walk of the vocabulary
 * is in every call's allowance, and its size is the model's, not the
 * grammar's). */
static inline bool charge_walk(sp_matcher *m) {
    if (++m->work <= m->budget) return true;
    m->fail = MF_WORK;
    return false;
}

/* realloc of a matcher buffer from old to new bytes, counted against
 * GR_MATCHER_MAX_BYTES; NULL (p untouched, the matcher failed) past it or
 * out of memory. */
void *mt_realloc(sp_matcher *m, void *p, size_t old, size_t new);

static inline void mfree(sp_matcher *m, void *p, size_t bytes) {
    free(p);
    m->bytes -= bytes;
}

bool mt_ivec_reserve(sp_matcher *m, ivec *v, int32_t n);
bool mt_ivec_copy(sp_matcher *m, ivec *d, const int32_t *s, int32_t n);

/* ---- states (match.c) ---- */

/* The state after byte b from the state sc[in, in + n_in), appended to sc;
 * its count (-1: the matcher failed). */
int32_t mt_advance(sp_matcher *m, int32_t in, int32_t n_in, unsigned b);

static inline bool can_end_set(const ivec *s) { return s->n > 0 && s->v[0] == -1; }

/* Starts a public call: a fresh work allowance (units on top of one walk
 * of the trie), and a compaction when dead nodes dominate. False when the
 * matcher has failed. */
bool mt_op_begin(sp_matcher *m, int64_t units);

static inline int32_t phase_at(const sp_matcher *m, int32_t i) {
    return i <= 0 || i > m->n_ahead ? m->ph : m->ph_ahead[i];
}

/* ---- the mask walk's memo (mask.c) ---- */

/* Forgets every interned set and transition (the memo got too big). */
void mt_memo_clear(sp_matcher *m);

#endif
