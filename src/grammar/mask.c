/* mask.c: token masks, the tokens the grammar matcher's state allows
 * (the matcher's state and its automaton: matcher.h, match.c).
 *
 * A mask walks the token trie depth first: at each trie node the state is
 * advanced by the child's byte (only children some stack's top set
 * allows), a subtree is cut as soon as the state is empty, and every
 * token ending at a node reached is allowed. Masks are cached by state
 * (MASK_CACHE entries, round robin): inside a JSON string or between the
 * items of an array the state repeats, and its mask is a lookup.
 *
 * The walk runs on interned states (set ids) with every (state, byte)
 * transition memoized, so inside a string, where almost every byte leads
 * back to the same state, each trie node costs one lookup. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "grammar/matcher.h"

/* Transition memo past which it starts over. */
#define MEMO_MAX_BYTES ((size_t)8 << 20)

/* ---- masks ---- */

static uint64_t hash_ids(const int32_t *v, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 0x100000001b3ull;
    return h ^ (uint64_t)n;
}

void mt_memo_clear(sp_matcher *m) {
    m->spool.n = 0;
    m->n_sets = 0;
    if (m->sht) memset(m->sht, 0xFF, (size_t)m->sht_cap * sizeof(int32_t));
    m->trow.n = 0;
}

static bool sht_grow(sp_matcher *m) {
    uint32_t cap = m->sht_cap ? m->sht_cap * 2 : 1024;
    int32_t *t = mt_realloc(m, NULL, 0, (size_t)cap * sizeof(int32_t));
    if (!t) return false;
    memset(t, 0xFF, (size_t)cap * sizeof(int32_t));
    for (int32_t i = 0; i < m->n_sets; i++) {
        uint32_t h = (uint32_t)m->sets[i].h & (cap - 1);
        while (t[h] >= 0) h = (h + 1) & (cap - 1);
        t[h] = i;
    }
    mfree(m, m->sht, (size_t)m->sht_cap * sizeof(int32_t));
    m->sht = t, m->sht_cap = cap;
    return true;
}

/* The id of the state v[n] (interned if new), or -1 when the matcher
 * failed. */
static int32_t set_id(sp_matcher *m, const int32_t *v, int32_t n) {
    if (!charge(m, n)) return -1;
    const uint64_t h = hash_ids(v, n);
    if ((uint32_t)m->n_sets * 2 >= m->sht_cap && !sht_grow(m)) return -1;
    uint32_t i = (uint32_t)h & (m->sht_cap - 1);
    for (;; i = (i + 1) & (m->sht_cap - 1)) {
        int32_t id = m->sht[i];
        if (id < 0) break;
        const struct sinfo *s = &m->sets[id];
        if (s->h == h && s->n == n && !memcmp(m->spool.v + s->off, v, (size_t)n * sizeof(int32_t)))
            return id;
    }
    if (m->n_sets == m->cap_sets) {
        int32_t cap = m->cap_sets ? m->cap_sets * 2 : 256;
        struct sinfo *ns =
            mt_realloc(m, m->sets, (size_t)m->cap_sets * sizeof(*ns), (size_t)cap * sizeof(*ns));
        if (!ns) return -1;
        m->sets = ns, m->cap_sets = cap;
    }
    const int32_t off = m->spool.n;
    if (!mt_ivec_reserve(m, &m->spool, off + n)) return -1;
    memcpy(m->spool.v + off, v, (size_t)n * sizeof(int32_t)); /* v may be in sc, not spool */
    m->spool.n = off + n;
    struct sinfo *s = &m->sets[m->n_sets];
    s->off = off, s->n = n, s->h = h, s->row = -1;
    memset(&s->u, 0, sizeof(s->u));
    for (int32_t k = 0; k < n; k++) {
        if (v[k] < 0) continue;
        const gr_set *x = &m->g->sets[m->g->el[m->node[v[k]].pos].arg];
        for (int w = 0; w < 8; w++) s->u.w[w] |= x->w[w];
    }
    m->sht[i] = m->n_sets;
    return m->n_sets++;
}

/* The set after byte b from set sid: -2 when no stack takes it, -1 when
 * the matcher failed. Memoized in a row of 256 per set (-3: not computed yet). */
static int32_t trans(sp_matcher *m, int32_t sid, unsigned b) {
    int32_t row = m->sets[sid].row;
    if (row < 0) {
        row = m->trow.n;
        if (!mt_ivec_reserve(m, &m->trow, row + 256)) return -1;
        for (int i = 0; i < 256; i++) m->trow.v[row + i] = -3;
        m->trow.n = row + 256;
        m->sets[sid].row = row;
    }
    int32_t r = m->trow.v[row + b];
    if (r != -3) return r;
    m->sc.n = 0;
    const struct sinfo s = m->sets[sid];
    if (!mt_ivec_copy(m, &m->sc, m->spool.v + s.off, s.n)) return -1;
    const int32_t n = mt_advance(m, 0, s.n, b);
    if (n < 0) return -1;
    r = n > 0 ? set_id(m, m->sc.v + s.n, n) : -2;
    if (r == -1) return -1;
    m->trow.v[row + b] = r;
    return r;
}

/* Marks every token under trie node tn that state sid allows (recursive
 * to the depth of the longest token, which the vocabulary fixes). */
static void walk(sp_matcher *m, const gr_tnode *tn, int32_t sid, uint32_t *bits, int32_t *count) {
    const sp_token_trie *t = m->t;
    const gr_set u = m->sets[sid].u;
    for (uint32_t c = tn->child; c < tn->child + tn->n_child; c++) {
        const gr_tnode *cn = &t->node[c];
        if (!gr_set_has(&u, cn->byte)) continue;
        const int32_t nid = charge_walk(m) ? trans(m, sid, cn->byte) : -1;
        if (nid == -1) return; /* failed */
        if (nid < 0) continue;
        for (uint32_t k = 0; k < cn->n_tok; k++) {
            sp_token tok = t->toks[cn->tok + k];
            bits[tok >> 5] |= 1u << (tok & 31);
        }
        *count += cn->n_tok;
        if (cn->n_child) walk(m, cn, nid, bits, count);
    }
}

static uint64_t set_hash(const ivec *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < s->n; i++) h = (h ^ (uint32_t)s->v[i]) * 0x100000001b3ull;
    return h;
}

/* The state's content key (order-free over its stacks, so equal in every
 * matcher of the grammar), two independent 64-bit halves. */
static void content_key(const sp_matcher *m, const ivec *st, uint64_t k[2]) {
    k[0] = (uint64_t)(uintptr_t)m->t * 0xD6E8FEB86659FD93ull;
    k[1] = (uint64_t)m->t->n_vocab;
    for (int32_t i = 0; i < st->n; i++) {
        uint64_t x = st->v[i] < 0 ? 0xE7037ED1A0B428DBull : m->node[st->v[i]].h;
        x ^= x >> 33;
        x *= 0xFF51AFD7ED558CCDull;
        x ^= x >> 33;
        k[0] += x;
        k[1] += (x * 0xC4CEB9FE1A85EC53ull) ^ (x >> 29);
    }
}

/* Jump-forward: where the state forces bytes (one byte possible, and the
 * output may not end), the longest token spelling a prefix of them (a
 * non-byte token where a byte token spells the same), or -1. */
static sp_token forced_token(sp_matcher *m, int32_t sid) {
    const sp_token_trie *t = m->t;
    const gr_tnode *node = &t->node[0];
    sp_token best = -1;
    for (int depth = 0; depth < 1024 && sid >= 0; depth++) {
        const struct sinfo *si = &m->sets[sid];
        if (si->n && m->spool.v[si->off] == -1) break; /* may end here */
        int nb = 0, b = -1;
        for (int w = 0; w < 8; w++) {
            nb += __builtin_popcount(si->u.w[w]);
            if (si->u.w[w] && b < 0) b = w * 32 + __builtin_ctz(si->u.w[w]);
        }
        if (nb != 1) break;
        const gr_tnode *c = NULL;
        for (uint32_t k = node->child; k < node->child + node->n_child && !c; k++)
            if (t->node[k].byte == (uint8_t)b) c = &t->node[k];
        if (!c) break;
        for (uint32_t k = 0; k < c->n_tok; k++) {
            const sp_token tok = t->toks[c->tok + k];
            if (k == 0 || sp_vocab_token_type(t->v, tok) != SP_TOKEN_BYTE) best = tok;
            if (sp_vocab_token_type(t->v, tok) != SP_TOKEN_BYTE) break;
        }
        node = c;
        sid = trans(m, sid, (unsigned)b);
    }
    return best;
}

void sp_matcher_set_jump_forward(sp_matcher *m, bool on) {
    m->jump = on;
    for (int i = 0; i < MASK_CACHE; i++) m->cache[i].used = false;
}

static int32_t mask_of(sp_matcher *m, const ivec *st, uint32_t *bits) {
    if (!m->t) return 0;
    const uint64_t h = set_hash(st);
    for (int i = 0; i < MASK_CACHE; i++) {
        centry *c = &m->cache[i];
        if (c->used && c->h == h && c->set.n == st->n &&
            !memcmp(c->set.v, st->v, (size_t)st->n * sizeof(int32_t))) {
            memcpy(bits, c->bits, (size_t)m->words * sizeof(uint32_t));
            return c->count;
        }
    }
    uint64_t key[2];
    content_key(m, st, key);
    if (m->jump) key[1] ^= 0x6A09E667F3BCC909ull;
    int32_t count = gr_shared_get(m->g, key, bits, m->words);
    if (count >= 0) goto keep; /* another matcher of this grammar met this state */
    memset(bits, 0, (size_t)m->words * sizeof(uint32_t));
    count = 0;
    if (can_end_set(st))
        for (int32_t i = 0; i < m->t->n_eog; i++) {
            sp_token tok = m->t->eog[i];
            bits[tok >> 5] |= 1u << (tok & 31);
            count++;
        }
    if ((size_t)(m->spool.n + m->trow.n) * sizeof(int32_t) + (size_t)m->n_sets * sizeof(struct sinfo) >
        MEMO_MAX_BYTES)
        mt_memo_clear(m);
    const int32_t sid = st->n ? set_id(m, st->v, st->n) : -1;
    const sp_token ft = m->jump && sid >= 0 ? forced_token(m, sid) : -1;
    if (ft >= 0) {
        bits[ft >> 5] |= 1u << (ft & 31);
        count = 1;
    } else if (sid >= 0) {
        walk(m, &m->t->node[0], sid, bits, &count);
    }
    if (m->fail) { /* an empty mask: nothing is emitted past a budget */
        memset(bits, 0, (size_t)m->words * sizeof(uint32_t));
        return 0;
    }
    gr_shared_put(m->g, key, bits, m->words, count);
keep:;
    centry *c = &m->cache[m->cache_next];
    if (!c->bits) c->bits = mt_realloc(m, NULL, 0, (size_t)m->words * sizeof(uint32_t));
    if (c->bits && mt_ivec_copy(m, &c->set, st->v, st->n)) {
        memcpy(c->bits, bits, (size_t)m->words * sizeof(uint32_t));
        c->h = h;
        c->count = count;
        c->used = true;
        m->cache_next = (m->cache_next + 1) % MASK_CACHE;
    } else {
        c->used = false;
    }
    return count;
}

/* A free phase's mask: every token but those it refuses (its list). */
static int32_t free_mask(const sp_matcher *m, int32_t k, uint32_t *bits) {
    if (!m->t) return 0;
    const int32_t V = m->t->n_vocab;
    memset(bits, 0xFF, (size_t)m->words * sizeof(uint32_t));
    if (V % 32) bits[m->words - 1] = (1u << (V % 32)) - 1;
    int32_t n = V;
    for (int32_t j = k >= 0 ? m->tr.off[k] : 0; k >= 0 && j < m->tr.off[k + 1]; j++, n--)
        bits[m->tr.refused.v[j] >> 5] &= ~(1u << (m->tr.refused.v[j] & 31));
    return n;
}

/* An empty mask (the matcher failed). */
static int32_t no_mask(const sp_matcher *m, uint32_t *bits) {
    memset(bits, 0, (size_t)m->words * sizeof(uint32_t));
    return 0;
}

int32_t sp_matcher_mask(sp_matcher *m, uint32_t *bits) {
    if (!mt_op_begin(m, GR_WORK_BUDGET)) return no_mask(m, bits);
    return m->ph == PH_ACTIVE ? mask_of(m, &m->cur, bits) : free_mask(m, m->ph, bits);
}

int32_t sp_matcher_mask_ahead(sp_matcher *m, int32_t i, uint32_t *bits) {
    if (!mt_op_begin(m, GR_WORK_BUDGET)) return no_mask(m, bits);
    const int32_t k = phase_at(m, i);
    if (k != PH_ACTIVE) return free_mask(m, k, bits);
    return mask_of(m, i <= 0 || i > m->n_ahead ? &m->cur : &m->ahead[i], bits);
}

int32_t sp_matcher_free_at(const sp_matcher *m, int32_t i, const sp_token **refused) {
    const int32_t k = phase_at(m, i);
    *refused = NULL;
    if (k == PH_ACTIVE) return -1;
    const int32_t n = k < 0 ? 0 : m->tr.off[k + 1] - m->tr.off[k];
    if (n) *refused = m->tr.refused.v + m->tr.off[k];
    return n;
}

void sp_mask_apply(const uint32_t *bits, float *logits, int32_t n_vocab) {
    for (int32_t w = 0; w * 32 < n_vocab; w++) {
        uint32_t b = bits[w];
        if (b == 0xFFFFFFFFu) continue;
        int32_t end = SP_MIN(32, n_vocab - w * 32);
        for (int32_t j = 0; j < end; j++)
            if (!(b >> j & 1)) logits[w * 32 + j] = -INFINITY;
    }
}
