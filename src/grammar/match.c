/* match.c: the grammar's pushdown automaton run over bytes (token masks:
 * mask.c).
 *
 * Stacks are interned: a node is (position, parent node), found again
 * through a hash table, so two equal stacks are one node id and a state
 * (a set of stacks) is a sorted array of ids, cheap to compare and hash.
 * Id -1 is the empty stack: the grammar has ended. A step over a byte
 * keeps the stacks whose top set holds it and expands each to its next
 * byte positions (expand: rule references push a continuation, except in
 * tail position; rule ends pop).
 *
 * Budgets. The grammar is the request's, so everything a matcher does is
 * bounded by what it may spend, not by what the grammar asks for:
 * - work: each public call (a mask, a token, a lookahead) may spend
 *   GR_WORK_BUDGET units (an element visited while expanding, a stack
 *   sorted or hashed, a trie node walked) on top of one walk of the
 *   vocabulary's trie. Expansion is iterative (an explicit stack), so
 *   nested nullable rules cost units, never C stack.
 *   A matcher's calls together may spend GR_TOTAL_BUDGET units beyond
 *   their trie walks, plus GR_BYTE_BUDGET per byte run: what one request
 *   can take from the others is a fixed amount plus a small one per byte
 *   of output, however its calls are spread.
 * - memory: a matcher holds at most GR_MATCHER_MAX_BYTES. Nodes of states
 *   left behind are dropped (compact) once they outgrow the live ones, and
 *   the transition memo starts over past MEMO_MAX_BYTES.
 * A call that would spend more fails, and the matcher stays failed
 * (sp_matcher_error says which budget): masks are then empty and tokens
 * refused, so a caller that does not look still never emits text outside
 * the grammar.
 *
 * A lazy grammar (sp_matcher_set_trigger) leaves the output free until a
 * trigger string appears in it: each state carries a phase, the count of
 * the trigger's bytes matched so far (KMP), or PH_ACTIVE once it appeared,
 * from where the grammar, which begins with the trigger, constrains the
 * rest. A free phase allows every token except the few whose bytes would
 * complete the trigger and go on with bytes the grammar refuses; those are
 * listed per phase when the trigger is set, so a free step costs a KMP
 * walk over the token's bytes and its mask a list. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

#define MAX_STACKS 8192          /* stacks in one state */
/* Node storage past which stacks no live state uses are dropped. */
#define NODE_COMPACT_BYTES ((size_t)8 << 20)

/* ---- budgets ---- */

void *mt_realloc(sp_matcher *m, void *p, size_t old, size_t new) {
    if (m->fail) return NULL;
    if (m->bytes - old + new > GR_MATCHER_MAX_BYTES) {
        m->fail = MF_MEM;
        return NULL;
    }
    void *q = realloc(p, new);
    if (!q) {
        m->fail = MF_MEM;
        return NULL;
    }
    m->bytes = m->bytes - old + new;
    return q;
}

bool mt_ivec_reserve(sp_matcher *m, ivec *v, int32_t n) {
    if (n <= v->cap) return true;
    int32_t cap = v->cap ? v->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *p = mt_realloc(m, v->v, (size_t)v->cap * sizeof(int32_t), (size_t)cap * sizeof(int32_t));
    if (!p) return false;
    v->v = p, v->cap = cap;
    return true;
}

static bool ivec_push(sp_matcher *m, ivec *v, int32_t x) {
    if (v->n == v->cap && !mt_ivec_reserve(m, v, v->n + 1)) return false;
    v->v[v->n++] = x;
    return true;
}

bool mt_ivec_copy(sp_matcher *m, ivec *d, const int32_t *s, int32_t n) {
    if (!mt_ivec_reserve(m, d, n)) return false;
    memmove(d->v, s, (size_t)n * sizeof(int32_t));
    d->n = n;
    return true;
}

static void ivec_drop(sp_matcher *m, ivec *v) {
    mfree(m, v->v, (size_t)v->cap * sizeof(int32_t));
    *v = (ivec){0};
}

/* ---- stacks ---- */

/* A full mix of both halves: positions and parents come in runs, and a
 * hash whose low bits follow theirs makes long probe chains. */
static uint32_t hash2(uint32_t pos, int32_t parent) {
    uint64_t x = (uint64_t)pos << 32 | (uint32_t)parent;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return (uint32_t)(x ^ x >> 33);
}

static bool ht_grow(sp_matcher *m) {
    uint32_t cap = m->ht_cap ? m->ht_cap * 2 : 4096;
    while ((uint32_t)m->n_node * 2 >= cap) cap *= 2;
    int32_t *ht = mt_realloc(m, NULL, 0, (size_t)cap * sizeof(int32_t));
    if (!ht) return false;
    memset(ht, 0xFF, (size_t)cap * sizeof(int32_t));
    for (int32_t i = 0; i < m->n_node; i++) {
        uint32_t h = hash2(m->node[i].pos, m->node[i].parent) & (cap - 1);
        while (ht[h] >= 0) h = (h + 1) & (cap - 1);
        ht[h] = i;
    }
    mfree(m, m->ht, (size_t)m->ht_cap * sizeof(int32_t));
    m->ht = ht, m->ht_cap = cap;
    return true;
}

/* The node (pos, parent), made if new; -2 when a budget is exceeded. */
static int32_t intern(sp_matcher *m, uint32_t pos, int32_t parent) {
    if ((uint32_t)m->n_node * 2 >= m->ht_cap && !ht_grow(m)) return -2;
    uint32_t h = hash2(pos, parent) & (m->ht_cap - 1);
    for (;; h = (h + 1) & (m->ht_cap - 1)) {
        int32_t id = m->ht[h];
        if (id < 0) break;
        if (m->node[id].pos == pos && m->node[id].parent == parent) return id;
    }
    if (m->n_node == m->cap_node) {
        int32_t cap = m->cap_node ? m->cap_node * 2 : 1024;
        gnode *n = mt_realloc(m, m->node, (size_t)m->cap_node * sizeof(gnode), (size_t)cap * sizeof(gnode));
        if (!n) return -2;
        m->node = n, m->cap_node = cap;
    }
    uint64_t nh = (parent < 0 ? 0x51ED27A1u : m->node[parent].h) * 0x9E3779B97F4A7C15ull + pos + 1;
    m->node[m->n_node] = (gnode){pos, parent, nh ^ nh >> 31};
    m->ht[h] = m->n_node;
    return m->n_node++;
}

/* Appends to sc every stack that (pos, parent) expands to. Iterative, over
 * the pairs pending in wk: nested nullable rules chain expansions as deep
 * as the work budget allows, which the C stack could not survive. */
static void expand(sp_matcher *m, uint32_t pos, int32_t parent) {
    const sp_grammar *g = m->g;
    const int32_t base = m->wk.n;
    if (!ivec_push(m, &m->wk, (int32_t)pos) || !ivec_push(m, &m->wk, parent)) return;
    while (m->wk.n > base) {
        m->wk.n -= 2;
        pos = (uint32_t)m->wk.v[m->wk.n];
        parent = m->wk.v[m->wk.n + 1];
        for (;;) {
            if (!charge(m, 1)) goto out;
            gr_elem x = g->el[pos];
            if (x.type == E_END) {
                if (parent < 0) {
                    if (!ivec_push(m, &m->sc, -1)) goto out;
                    break;
                }
                pos = m->node[parent].pos;
                parent = m->node[parent].parent;
                continue;
            }
            if (x.type == E_BYTES) {
                int32_t id = intern(m, pos, parent);
                if (id < 0 || !ivec_push(m, &m->sc, id)) goto out;
                break;
            }
            int32_t cont = parent;
            if (g->el[pos + 1].type != E_END && (cont = intern(m, pos + 1, parent)) < 0) goto out;
            for (int32_t a = g->alt_off[x.arg + 1] - 1; a >= g->alt_off[x.arg]; a--)
                if (!ivec_push(m, &m->wk, g->alt[a]) || !ivec_push(m, &m->wk, cont)) goto out;
            break;
        }
    }
out:
    m->wk.n = base;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts and dedups sc[from..); its count, or -1 (the matcher failed) past
 * MAX_STACKS or the work budget. */
static int32_t finish_set(sp_matcher *m, int32_t from) {
    int32_t *v = m->sc.v + from, n = m->sc.n - from;
    if (m->fail) return -1;
    if (n > 1) {
        bool sorted = true;
        for (int32_t i = 1; i < n && sorted; i++) sorted = v[i - 1] < v[i];
        if (!sorted) {
            if (!charge(m, (int64_t)n * (32 - __builtin_clz((uint32_t)n)))) return -1;
            qsort(v, (size_t)n, sizeof(int32_t), cmp_i32);
            int32_t k = 1;
            for (int32_t i = 1; i < n; i++)
                if (v[i] != v[k - 1]) v[k++] = v[i];
            n = k;
        }
    }
    if (n > MAX_STACKS) { /* a state this ambiguous costs too much at every byte */
        m->fail = MF_WORK;
        return -1;
    }
    m->sc.n = from + n;
    return n;
}

int32_t mt_advance(sp_matcher *m, int32_t in, int32_t n_in, unsigned b) {
    const int32_t from = m->sc.n;
    for (int32_t i = 0; i < n_in && !m->fail; i++) {
        int32_t s = m->sc.v[in + i];
        if (s < 0) continue;
        gnode nd = m->node[s];
        gr_elem x = m->g->el[nd.pos];
        if (gr_set_has(&m->g->sets[x.arg], b)) expand(m, nd.pos + 1, nd.parent);
    }
    return finish_set(m, from);
}

/* Runs bytes over the state src[n] into dst; false (dst untouched) when
 * the bytes leave no stack or the matcher failed. */
static bool run_bytes(sp_matcher *m, const int32_t *src, int32_t n, const unsigned char *b,
                      size_t nb, ivec *dst) {
    m->sc.n = 0;
    if (!mt_ivec_copy(m, &m->sc, src, n)) return false;
    int32_t in = 0;
    m->n_bytes += (int64_t)nb;
    for (size_t i = 0; i < nb && n > 0; i++) {
        int32_t out = m->sc.n;
        n = mt_advance(m, in, n, b[i]);
        if (n < 0) return false;
        /* slide the new state down to keep the scratch small */
        memmove(m->sc.v, m->sc.v + out, (size_t)n * sizeof(int32_t));
        m->sc.n = n;
        in = 0;
    }
    if (n <= 0) return false;
    return mt_ivec_copy(m, dst, m->sc.v, n);
}

/* ---- compaction: nodes no live state uses are dropped ---- */

/* The id in the new pool of old node id (copied with its parents). */
static int32_t copy_chain(sp_matcher *m, const gnode *old, int32_t *map, ivec *path, int32_t id) {
    path->n = 0;
    while (id >= 0 && map[id] < 0) {
        if (!ivec_push(m, path, id)) return -2;
        id = old[id].parent;
    }
    int32_t parent = id < 0 ? -1 : map[id];
    for (int32_t j = path->n - 1; j >= 0; j--) {
        const int32_t o = path->v[j];
        if ((parent = map[o] = intern(m, old[o].pos, parent)) < 0) return -2;
    }
    return parent;
}

static bool remap(sp_matcher *m, const gnode *old, int32_t *map, ivec *path, ivec *v) {
    for (int32_t i = 0; i < v->n; i++)
        if (v->v[i] >= 0 && (v->v[i] = copy_chain(m, old, map, path, v->v[i])) < 0) return false;
    return true;
}

/* Rebuilds the node pool from the stacks live states use (the current
 * state, the lookahead states, a lazy grammar's start) and forgets the
 * memo and the mask cache, whose ids are of the old pool. Content hashes
 * are unchanged, so the grammar's shared masks stay valid. */
static void compact(sp_matcher *m) {
    gnode *old = m->node;
    const int32_t n_old = m->n_node, cap_old = m->cap_node;
    int32_t *map = mt_realloc(m, NULL, 0, (size_t)n_old * sizeof(int32_t));
    if (!map) return;
    memset(map, 0xFF, (size_t)n_old * sizeof(int32_t));
    mfree(m, m->ht, (size_t)m->ht_cap * sizeof(int32_t));
    m->node = NULL, m->n_node = m->cap_node = 0, m->ht = NULL, m->ht_cap = 0;
    ivec path = {0};
    bool ok = ht_grow(m) && remap(m, old, map, &path, &m->cur) && remap(m, old, map, &path, &m->tr.start);
    for (int32_t i = 1; ok && i <= m->n_ahead; i++) ok = remap(m, old, map, &path, &m->ahead[i]);
    ivec_drop(m, &path);
    mfree(m, map, (size_t)n_old * sizeof(int32_t));
    mfree(m, old, (size_t)cap_old * sizeof(gnode));
    mt_memo_clear(m);
    for (int i = 0; i < MASK_CACHE; i++) m->cache[i].used = false;
    m->n_live = m->n_node;
    if (!ok && !m->fail) m->fail = MF_MEM;
}

bool mt_op_begin(sp_matcher *m, int64_t units) {
    m->work = 0;
    m->budget = units + (m->t ? m->t->n_node : 0);
    if (!m->fail && (size_t)m->cap_node * sizeof(gnode) > NODE_COMPACT_BYTES &&
        m->n_node > 2 * m->n_live)
        compact(m);
    return !m->fail;
}

sp_matcher *sp_matcher_create(const sp_grammar *g, const sp_token_trie *t, char *err,
                              size_t errlen) {
    sp_matcher *m = calloc(1, sizeof(*m));
    if (!m) goto oom;
    m->g = g;
    gr_retain(g);
    m->t = t;
    m->words = t ? (t->n_vocab + 31) / 32 : 0;
    if (!ht_grow(m)) goto oom;
    sp_matcher_reset(m); /* over a budget: the caller learns it from sp_matcher_error */
    return m;
oom:
    seterr(err, errlen, "grammar matcher: out of memory");
    sp_matcher_free(m);
    return NULL;
}

int sp_matcher_error(const sp_matcher *m, char *err, size_t errlen) {
    if (m->fail == MF_WORK) {
        seterr(err, errlen, "the grammar exceeds its work budget per token (%d units: "
                  "too ambiguous, e.g. nested optional repetitions)", GR_WORK_BUDGET);
        return SP_ERR_INVALID;
    }
    if (m->fail == MF_TOTAL) {
        seterr(err, errlen, "the grammar exceeds its work budget per request (%lld units "
                  "and %d per byte: too ambiguous to decode with)", (long long)GR_TOTAL_BUDGET,
                  GR_BYTE_BUDGET);
        return SP_ERR_INVALID;
    }
    if (m->fail == MF_MEM) {
        seterr(err, errlen, "the grammar exceeds its matcher's memory budget (%zu MiB)",
                  GR_MATCHER_MAX_BYTES >> 20);
        return SP_ERR_INVALID;
    }
    return SP_OK;
}

size_t sp_matcher_bytes(const sp_matcher *m) { return sizeof(*m) + m->bytes; }

int64_t sp_matcher_work(const sp_matcher *m) { return m->total; }

void sp_matcher_free(sp_matcher *m) {
    if (!m) return;
    sp_grammar_free((sp_grammar *)m->g);
    free(m->node);
    free(m->ht);
    free(m->cur.v);
    for (int i = 0; i <= SP_SPEC_K_MAX; i++) free(m->ahead[i].v);
    free(m->sc.v);
    free(m->wk.v);
    free(m->spool.v);
    free(m->sets);
    free(m->sht);
    free(m->trow.v);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].set.v);
        free(m->cache[i].bits);
    }
    free(m->tr.s);
    free(m->tr.fail);
    free(m->tr.start.v);
    free(m->tr.refused.v);
    free(m->tr.off);
    free(m);
}

void sp_matcher_reset(sp_matcher *m) {
    if (!mt_op_begin(m, GR_WORK_BUDGET)) return;
    m->sc.n = 0;
    const sp_grammar *g = m->g;
    for (int32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1] && !m->fail; a++)
        expand(m, (uint32_t)g->alt[a], -1);
    int32_t n = finish_set(m, 0);
    if (n >= 0) mt_ivec_copy(m, &m->cur, m->sc.v, n);
    m->n_ahead = 0;
    m->ph = m->tr.s ? 0 : PH_ACTIVE;
}

/* ---- lazy grammars: the trigger's phases ---- */

/* The phase after byte b from free phase k >= 0 (m->tr.len: the trigger
 * is complete). An anchored trigger may follow white space only. */
static int32_t trig_next(const sp_matcher *m, int32_t k, unsigned char b) {
    const unsigned char *s = m->tr.s;
    if (m->tr.at_start) {
        if (b == s[k]) return k + 1;
        return k == 0 && (b == ' ' || b == '\n' || b == '\t' || b == '\r') ? 0 : PH_FREE;
    }
    while (k > 0 && b != s[k]) k = m->tr.fail[k - 1];
    return b == s[k] ? k + 1 : 0;
}

/* From free phase k over bytes b[nb] (trig: the control token standing
 * for the trigger): the phase after in *k_out, and once the trigger is
 * complete, the grammar's state after the rest of the bytes in dst (the
 * grammar began with the trigger's bytes). False (nothing changed) when
 * the grammar refuses the bytes after the trigger. */
static bool free_step(sp_matcher *m, int32_t k, const unsigned char *b, size_t nb, bool trig,
                      int32_t *k_out, ivec *dst) {
    size_t used = nb;
    if (trig) k = m->tr.len;
    for (size_t i = 0; i < nb && k >= 0 && k < m->tr.len; i++)
        if ((k = trig_next(m, k, b[i])) == m->tr.len) used = i + 1;
    if (k != m->tr.len) {
        *k_out = k;
        return true;
    }
    const ivec *st = &m->tr.start;
    if (!(used == nb ? mt_ivec_copy(m, dst, st->v, st->n)
                     : run_bytes(m, st->v, st->n, b + used, nb - used, dst)))
        return false;
    *k_out = PH_ACTIVE;
    return true;
}

bool sp_matcher_accept_bytes(sp_matcher *m, const char *s, size_t n) {
    m->n_ahead = 0;
    if (!mt_op_begin(m, (int64_t)GR_WORK_BUDGET * (int64_t)SP_MIN(n, (size_t)1 << 20))) return false;
    if (!n) return true;
    if (m->ph == PH_ACTIVE) return run_bytes(m, m->cur.v, m->cur.n, (const unsigned char *)s, n, &m->cur);
    return free_step(m, m->ph, (const unsigned char *)s, n, false, &m->ph, &m->cur);
}

static bool is_eog(const sp_token_trie *t, sp_token tok) {
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == tok) return true;
    return false;
}

/* The state after tok from src into dst (dst may be src's vector). */
static bool token_step(sp_matcher *m, const ivec *src, sp_token tok, ivec *dst) {
    const sp_token_trie *t = m->t;
    if (!t || tok < 0 || tok >= t->n_vocab) return false;
    uint32_t off = t->piece_off[tok], len = t->piece_off[tok + 1] - off;
    if (!len) {
        if (!is_eog(t, tok) || !can_end_set(src)) return false;
        return src == dst || mt_ivec_copy(m, dst, src->v, src->n);
    }
    return run_bytes(m, src->v, src->n, (const unsigned char *)t->piece + off, len, dst);
}

/* token_step from phase k (*k_out: the phase after). */
static bool phase_step(sp_matcher *m, int32_t k, const ivec *src, sp_token tok, int32_t *k_out,
                       ivec *dst) {
    if (k == PH_ACTIVE) {
        *k_out = PH_ACTIVE;
        return token_step(m, src, tok, dst);
    }
    const sp_token_trie *t = m->t;
    if (!t || tok < 0 || tok >= t->n_vocab) return false;
    const uint32_t off = t->piece_off[tok];
    return free_step(m, k, (const unsigned char *)t->piece + off, t->piece_off[tok + 1] - off,
                     tok == m->tr.tok, k_out, dst);
}

bool sp_matcher_accept_token(sp_matcher *m, sp_token tok) {
    m->n_ahead = 0;
    if (!mt_op_begin(m, GR_WORK_BUDGET)) return false;
    return phase_step(m, m->ph, &m->cur, tok, &m->ph, &m->cur);
}

bool sp_matcher_can_end(const sp_matcher *m) { return m->ph != PH_ACTIVE || can_end_set(&m->cur); }

bool sp_matcher_can_end_at(const sp_matcher *m, int32_t i) {
    return phase_at(m, i) != PH_ACTIVE || can_end_set(i <= 0 || i > m->n_ahead ? &m->cur : &m->ahead[i]);
}

bool sp_matcher_done(const sp_matcher *m) {
    return m->ph == PH_ACTIVE && m->cur.n == 1 && m->cur.v[0] == -1;
}

/* ---- lookahead ---- */

int32_t sp_matcher_lookahead(sp_matcher *m, const sp_token *toks, int32_t n) {
    m->n_ahead = 0;
    if (!mt_op_begin(m, (int64_t)GR_WORK_BUDGET * SP_MAX(n, 1))) return 0;
    const ivec *prev = &m->cur;
    int32_t k = m->ph;
    for (int32_t i = 0; i < n && i < SP_SPEC_K_MAX; i++) {
        /* a free phase leaves ahead[i + 1] as it was: prev is read again
         * only once the phase is PH_ACTIVE, when the step has written it */
        if (!phase_step(m, k, prev, toks[i], &m->ph_ahead[i + 1], &m->ahead[i + 1])) break;
        k = m->ph_ahead[i + 1];
        m->n_ahead = i + 1;
        prev = &m->ahead[i + 1];
        if (m->t && m->t->piece_off[toks[i] + 1] == m->t->piece_off[toks[i]]) break; /* ended */
    }
    return m->n_ahead;
}

/* ---- lazy grammars: setting the trigger ---- */

sp_token sp_matcher_trigger_token(const sp_matcher *m) { return m->tr.s ? m->tr.tok : -1; }

/* The tokens free phase k refuses: those whose bytes complete the trigger
 * and go on with bytes the grammar does not take. Only a token holding the
 * trigger's last byte can complete it (cand). */
static bool refuse_list(sp_matcher *m, const ivec *cand, int32_t k, ivec *tmp) {
    const sp_token_trie *t = m->t;
    for (int32_t c = 0; c < cand->n; c++) {
        const sp_token tok = cand->v[c];
        const uint32_t off = t->piece_off[tok];
        int32_t k2;
        if (!free_step(m, k, (const unsigned char *)t->piece + off, t->piece_off[tok + 1] - off, false,
                       &k2, tmp) &&
            !ivec_push(m, &m->tr.refused, tok))
            return false;
    }
    return true;
}

int sp_matcher_set_trigger(sp_matcher *m, const char *trigger, size_t len, bool at_start, char *err,
                           size_t errlen) {
    if (m->tr.s || !len || len > 256) {
        seterr(err, errlen, "the trigger must be 1 to 256 bytes, set once");
        return SP_ERR_INVALID;
    }
    const int32_t n = (int32_t)len;
    ivec cand = {0}, tmp = {0};
    m->tr.s = malloc(len);
    m->tr.fail = malloc(len * sizeof(int32_t));
    m->tr.off = malloc((len + 1) * sizeof(int32_t));
    if (!m->tr.s || !m->tr.fail || !m->tr.off) goto oom;
    memcpy(m->tr.s, trigger, len);
    m->tr.len = n;
    m->tr.at_start = at_start;
    m->tr.fail[0] = 0; /* KMP: the longest proper prefix of s[0..i] that ends it */
    for (int32_t i = 1, k = 0; i < n; i++) {
        while (k && m->tr.s[i] != m->tr.s[k]) k = m->tr.fail[k - 1];
        if (m->tr.s[i] == m->tr.s[k]) k++;
        m->tr.fail[i] = k;
    }
    sp_matcher_reset(m);
    /* the trigger's refusal lists walk the grammar once per candidate token */
    if (mt_op_begin(m, (int64_t)GR_WORK_BUDGET * 4) &&
        !run_bytes(m, m->cur.v, m->cur.n, m->tr.s, len, &m->tr.start) && !m->fail) {
        seterr(err, errlen, "the grammar does not begin with its trigger '%.64s'", trigger);
        return SP_ERR_INVALID;
    }
    if (m->fail) return sp_matcher_error(m, err, errlen);
    const sp_token_trie *t = m->t;
    m->tr.tok = -1;
    for (int32_t k = 0; k <= n; k++) m->tr.off[k] = 0;
    if (!t) return SP_OK;
    const sp_token tok = sp_vocab_find(t->v, trigger, len);
    if (tok >= 0 && tok < t->n_vocab && t->piece_off[tok] == t->piece_off[tok + 1]) m->tr.tok = tok;
    for (sp_token c = 0; c < t->n_vocab; c++)
        if (memchr(t->piece + t->piece_off[c], m->tr.s[n - 1], t->piece_off[c + 1] - t->piece_off[c]) &&
            !ivec_push(m, &cand, c))
            goto oom;
    for (int32_t k = 0; k < n; k++) {
        m->tr.off[k] = m->tr.refused.n;
        if (!refuse_list(m, &cand, k, &tmp)) goto oom;
    }
    m->tr.off[n] = m->tr.refused.n;
    ivec_drop(m, &cand), ivec_drop(m, &tmp);
    if (m->fail) return sp_matcher_error(m, err, errlen);
    return SP_OK;
oom:
    ivec_drop(m, &cand), ivec_drop(m, &tmp);
    if (m->fail) return sp_matcher_error(m, err, errlen);
    seterr(err, errlen, "grammar matcher: out of memory");
    return SP_ERR_NOMEM;
}
