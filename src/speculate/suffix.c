/* suffix.c: suffix matching (SuffixDecoding, Oliaro et al. 2024; see spec.h).
 *
 * Both the per-request index and the store of earlier outputs (one per
 * cache-salt partition, see parts.c) are suffix tries of bounded depth D: inserting a sequence t[0..n) inserts, for every start i,
 * the path t[i..min(i+D, n)), adding 1 to the count of each node on it. So a
 * node for the string w (|w| <= D) counts the occurrences of w, and for
 * |w| < D the counts of its children are exactly how often each token
 * followed w.
 *
 * Nodes live in one pool (index 0 is the root, so 0 doubles as "none") with
 * a free list; children are found through one open-addressing hash table
 * keyed by (parent, token) (linear probing, backward-shift deletion) and
 * enumerated through a doubly linked sibling list. Every operation that can
 * create nodes first reserves room for the worst case (one node per step of
 * every path it will insert), so a failed allocation leaves the trie as it
 * was and the hot loops never allocate.
 *
 * Memory: about 20 bytes per node plus 12 bytes per hash slot (load <= 2/3),
 * i.e. ~40 bytes per node; a sequence of n tokens makes at most n*D nodes
 * (fewer where text repeats). A store of T tokens can thus hold up to
 * ~40*T*D bytes (D = 32: ~1.3 KB per stored token at worst).
 */
#include "speculate/spec.h"

#include "common.h"

/* A proposal is at most SPEC_FACTOR tokens per token of context matched. */
#define SPEC_FACTOR 2

typedef struct {
    sp_token tok;
    uint32_t count;
    uint32_t child; /* first child, 0 = none */
    uint32_t next;  /* next sibling; free-list link for free nodes */
    uint32_t prev;  /* previous sibling, 0 = first child */
} st_node;

typedef struct {
    uint32_t parent;
    sp_token tok;
    uint32_t node; /* 0 = empty slot */
} st_slot;

typedef struct {
    st_node *nodes;
    uint32_t n_nodes; /* high-water mark (root included) */
    uint32_t cap_nodes;
    uint32_t free_head; /* 0 = empty free list */
    uint32_t n_free;
    st_slot *slots;
    uint32_t n_slots; /* power of two */
    uint32_t n_used;  /* occupied slots = live nodes - 1 */
    int32_t depth;
} st_trie;

static inline uint32_t st_hash(uint32_t parent, sp_token tok) {
    uint64_t x = ((uint64_t)parent << 32) | (uint32_t)tok;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int st_init(st_trie *t, int32_t depth) {
    memset(t, 0, sizeof(*t));
    t->depth = depth;
    t->cap_nodes = 64;
    t->nodes = calloc(t->cap_nodes, sizeof(st_node));
    t->n_slots = 128;
    t->slots = calloc(t->n_slots, sizeof(st_slot));
    if (!t->nodes || !t->slots) {
        free(t->nodes);
        free(t->slots);
        return -1;
    }
    t->n_nodes = 1; /* the root */
    return 0;
}

static void st_destroy(st_trie *t) {
    free(t->nodes);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static uint32_t st_find(const st_trie *t, uint32_t parent, sp_token tok) {
    uint32_t mask = t->n_slots - 1;
    for (uint32_t i = st_hash(parent, tok) & mask;; i = (i + 1) & mask) {
        const st_slot *e = &t->slots[i];
        if (!e->node) return 0;
        if (e->parent == parent && e->tok == tok) return e->node;
    }
}

static void st_slot_put(st_slot *slots, uint32_t n_slots, uint32_t parent, sp_token tok,
                        uint32_t node) {
    uint32_t mask = n_slots - 1;
    uint32_t i = st_hash(parent, tok) & mask;
    while (slots[i].node) i = (i + 1) & mask;
    slots[i] = (st_slot){parent, tok, node};
}

/* Makes room for `extra` more nodes without any further allocation. */
static int st_reserve(st_trie *t, uint64_t extra) {
    uint64_t live = (uint64_t)t->n_nodes - t->n_free;
    uint64_t need_nodes = extra > t->n_free ? (uint64_t)t->n_nodes + (extra - t->n_free) : t->n_nodes;
    if (live + extra >= UINT32_MAX / 2 || need_nodes >= UINT32_MAX / 2) return -1;
    if (need_nodes > t->cap_nodes) {
        uint64_t cap = t->cap_nodes;
        while (cap < need_nodes) cap *= 2;
        st_node *nn = realloc(t->nodes, cap * sizeof(st_node));
        if (!nn) return -1;
        t->nodes = nn;
        t->cap_nodes = (uint32_t)cap;
    }
    uint64_t want_used = live + extra; /* upper bound on occupied slots */
    if (want_used * 3 > (uint64_t)t->n_slots * 2) {
        uint64_t ns = t->n_slots;
        while (want_used * 3 > ns * 2) ns *= 2;
        if (ns > UINT32_MAX / 2 + 1) return -1;
        st_slot *slots = calloc(ns, sizeof(st_slot));
        if (!slots) return -1;
        for (uint32_t i = 0; i < t->n_slots; i++)
            if (t->slots[i].node)
                st_slot_put(slots, (uint32_t)ns, t->slots[i].parent, t->slots[i].tok,
                            t->slots[i].node);
        free(t->slots);
        t->slots = slots;
        t->n_slots = (uint32_t)ns;
    }
    return 0;
}

/* The child of parent for tok, created if missing (room reserved), its
 * count incremented. One probe sequence finds it or its empty slot. */
static uint32_t st_inc_child(st_trie *t, uint32_t parent, sp_token tok) {
    uint32_t mask = t->n_slots - 1, i = st_hash(parent, tok) & mask;
    for (;; i = (i + 1) & mask) {
        st_slot *e = &t->slots[i];
        if (!e->node) break;
        if (e->parent == parent && e->tok == tok) {
            t->nodes[e->node].count++;
            return e->node;
        }
    }
    uint32_t c;
    if (t->free_head) {
        c = t->free_head;
        t->free_head = t->nodes[c].next;
        t->n_free--;
    } else {
        SP_ASSERT(t->n_nodes < t->cap_nodes);
        c = t->n_nodes++;
    }
    SP_ASSERT((uint64_t)(t->n_used + 1) * 3 <= (uint64_t)t->n_slots * 2);
    st_node *pn = &t->nodes[parent];
    t->nodes[c] = (st_node){tok, 1, 0, pn->child, 0};
    if (pn->child) t->nodes[pn->child].prev = c;
    pn->child = c;
    t->slots[i] = (st_slot){parent, tok, c};
    t->n_used++;
    return c;
}

static void st_slot_delete(st_trie *t, uint32_t parent, sp_token tok) {
    uint32_t mask = t->n_slots - 1;
    uint32_t i = st_hash(parent, tok) & mask;
    for (;; i = (i + 1) & mask) {
        SP_ASSERT(t->slots[i].node);
        if (t->slots[i].parent == parent && t->slots[i].tok == tok) break;
    }
    /* Backward shift: move later entries of the cluster into the hole when
     * the hole lies between their home slot and where they sit. */
    for (uint32_t j = (i + 1) & mask; t->slots[j].node; j = (j + 1) & mask) {
        uint32_t home = st_hash(t->slots[j].parent, t->slots[j].tok) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = (st_slot){0, 0, 0};
    t->n_used--;
}

/* Undoes one insert of the path toks[0..len): decrements each node on it
 * and frees the nodes whose count reaches 0 (then so do all below). */
static void st_dec_path(st_trie *t, const sp_token *toks, int32_t len) {
    uint32_t parent = 0;
    for (int32_t d = 0; d < len; d++) {
        uint32_t c = st_find(t, parent, toks[d]);
        SP_ASSERT(c && t->nodes[c].count > 0);
        st_node *cn = &t->nodes[c];
        if (--cn->count == 0) {
            SP_ASSERT(cn->child == 0 || d + 1 < len);
            /* unlink from the parent's child list */
            if (cn->prev) t->nodes[cn->prev].next = cn->next;
            else t->nodes[parent].child = cn->next;
            if (cn->next) t->nodes[cn->next].prev = cn->prev;
            st_slot_delete(t, parent, toks[d]);
            /* The rest of the path hangs below c only: every node there has
             * count 1 now (their counts are <= c's), so free them too. */
            uint32_t p2 = c;
            for (int32_t e = d + 1; e < len; e++) {
                uint32_t g = st_find(t, p2, toks[e]);
                SP_ASSERT(g && t->nodes[g].count == 1 && t->nodes[g].next == 0 &&
                          t->nodes[g].prev == 0);
                st_slot_delete(t, p2, toks[e]);
                t->nodes[p2].count = 0;
                t->nodes[p2].next = t->free_head;
                t->free_head = p2;
                t->n_free++;
                p2 = g;
            }
            SP_ASSERT(t->nodes[p2].child == 0);
            t->nodes[p2].next = t->free_head;
            t->nodes[p2].count = 0;
            t->free_head = p2;
            t->n_free++;
            return;
        }
        parent = c;
    }
}

static uint64_t path_nodes_bound(int64_t n, int32_t depth) {
    return (uint64_t)n * (uint64_t)SP_MIN(n, (int64_t)depth);
}

/* Inserts every suffix start of toks[0..n) (room reserved). */
static void st_insert_all(st_trie *t, const sp_token *toks, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        uint32_t node = 0;
        int32_t len = SP_MIN(t->depth, n - i);
        for (int32_t d = 0; d < len; d++) node = st_inc_child(t, node, toks[i + d]);
    }
}

/* ---- store of earlier outputs (one per partition) ------------------------- */

typedef struct st_rec {
    struct st_rec *next;
    int32_t n;
    sp_token toks[];
} st_rec;

struct suffix_store {
    st_trie t;
    size_t max_tokens, tokens;
    uint64_t bound;      /* sum over the sequences of path_nodes_bound: the most
                            nodes they can need (suffix_store_shrink) */
    st_rec *head, *tail; /* oldest first */
};

static int32_t clamp_depth(int32_t d) { return d < 2 ? 2 : d; }

suffix_store *suffix_store_create(size_t max_tokens, int32_t max_depth) {
    suffix_store *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    if (st_init(&s->t, clamp_depth(max_depth)) != 0) {
        free(s);
        return NULL;
    }
    s->max_tokens = max_tokens;
    return s;
}

void suffix_store_free(suffix_store *s) {
    if (!s) return;
    for (st_rec *r = s->head, *nx; r; r = nx) {
        nx = r->next;
        free(r);
    }
    st_destroy(&s->t);
    free(s);
}

static void store_drop_oldest(suffix_store *s) {
    st_rec *r = s->head;
    for (int32_t i = 0; i < r->n; i++) st_dec_path(&s->t, r->toks + i, SP_MIN(s->t.depth, r->n - i));
    s->head = r->next;
    if (!s->head) s->tail = NULL;
    s->tokens -= (size_t)r->n;
    s->bound -= path_nodes_bound(r->n, s->t.depth);
    free(r);
}

size_t suffix_store_drop_oldest(suffix_store *s) {
    if (!s || !s->head) return 0;
    const size_t n = (size_t)s->head->n;
    store_drop_oldest(s);
    return n;
}

int suffix_store_shrink(suffix_store *s) {
    if (!s) return 0;
    /* the arrays never shrink by themselves (freed nodes go to a free list,
     * the hash table keeps its size): rebuild when they hold room for more
     * than 4x the nodes the sequences could need, so the memory of a store
     * follows what it holds now rather than its peak. After a rebuild the
     * room is at most 2x the need (power-of-two growth), so a rebuild is
     * paid for by the tokens dropped since the last one. */
    if ((uint64_t)s->t.cap_nodes <= 64 || (uint64_t)s->t.cap_nodes <= 4 * s->bound) return 0;
    st_trie t;
    if (st_init(&t, s->t.depth) != 0) return -1;
    if (st_reserve(&t, s->bound) != 0) {
        st_destroy(&t);
        return -1; /* keep the old one: still correct, only larger */
    }
    for (const st_rec *r = s->head; r; r = r->next) st_insert_all(&t, r->toks, r->n);
    st_destroy(&s->t);
    s->t = t;
    return 1;
}

size_t suffix_store_bytes(const suffix_store *s) {
    if (!s) return 0;
    return sizeof(*s) + (size_t)s->t.cap_nodes * sizeof(st_node) +
           (size_t)s->t.n_slots * sizeof(st_slot) + s->tokens * sizeof(sp_token);
}

int suffix_store_add(suffix_store *s, const sp_token *toks, int32_t n) {
    if (!s || !toks || n <= 0 || s->max_tokens == 0) return 0;
    if ((size_t)n > s->max_tokens) { /* keep the most recent max_tokens */
        toks += (size_t)n - s->max_tokens;
        n = (int32_t)s->max_tokens;
    }
    st_rec *r = malloc(sizeof(st_rec) + (size_t)n * sizeof(sp_token));
    if (!r) return -1;
    if (st_reserve(&s->t, path_nodes_bound(n, s->t.depth)) != 0) {
        free(r);
        return -1;
    }
    r->next = NULL;
    r->n = n;
    memcpy(r->toks, toks, (size_t)n * sizeof(sp_token));
    st_insert_all(&s->t, r->toks, n);
    if (s->tail) s->tail->next = r;
    else s->head = r;
    s->tail = r;
    s->tokens += (size_t)n;
    s->bound += path_nodes_bound(n, s->t.depth);
    while (s->tokens > s->max_tokens) store_drop_oldest(s);
    return 0;
}

size_t suffix_store_tokens(const suffix_store *s) { return s ? s->tokens : 0; }

/* ---- per-request index ------------------------------------------------------ */

struct suffix_seq {
    st_trie t;
    sp_token *hist;
    int32_t n, cap;
    uint32_t *active; /* [D + 1]: active[m] = node of the last m tokens, 1 <= m <= min(n, D) */
};

suffix_seq *suffix_seq_create(int32_t max_depth) {
    suffix_seq *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    int32_t d = clamp_depth(max_depth);
    q->active = calloc((size_t)d + 1, sizeof(uint32_t));
    if (!q->active || st_init(&q->t, d) != 0) {
        free(q->active);
        free(q);
        return NULL;
    }
    return q;
}

void suffix_seq_free(suffix_seq *q) {
    if (!q) return;
    st_destroy(&q->t);
    free(q->hist);
    free(q->active);
    free(q);
}

int suffix_seq_append(suffix_seq *q, const sp_token *toks, int32_t n) {
    if (!q || n <= 0) return 0;
    if (n > INT32_MAX - q->n) return -1;
    if (q->n + n > q->cap) {
        int64_t cap = q->cap ? q->cap : 256;
        while (cap < q->n + n) cap *= 2;
        if (cap > INT32_MAX) cap = INT32_MAX;
        sp_token *h = realloc(q->hist, (size_t)cap * sizeof(sp_token));
        if (!h) return -1;
        q->hist = h;
        q->cap = (int32_t)cap;
    }
    if (st_reserve(&q->t, (uint64_t)n * (uint64_t)q->t.depth) != 0) return -1;
    const int32_t D = q->t.depth;
    for (int32_t i = 0; i < n; i++) {
        sp_token t = toks[i];
        /* each start among the last D - 1 grows by one node, a new start begins */
        for (int32_t m = SP_MIN(q->n, D - 1); m >= 1; m--)
            q->active[m + 1] = st_inc_child(&q->t, q->active[m], t);
        q->active[1] = st_inc_child(&q->t, 0, t);
        q->hist[q->n++] = t;
    }
    return 0;
}

/* ---- proposal ----------------------------------------------------------------- */

/* The longest context matched in a trie of depth D: leaves room for
 * min(k_max, D/2) proposed tokens below it. 1 <= result <= D - 1. */
static int32_t match_cap(int32_t depth, int32_t k_max) {
    int32_t c = depth - SP_MIN(k_max, depth / 2);
    return SP_MAX(1, SP_MIN(c, depth - 1));
}

static uint32_t st_walk(const st_trie *t, const sp_token *toks, int32_t len) {
    uint32_t node = 0;
    for (int32_t d = 0; d < len && (d == 0 || node); d++) node = st_find(t, node, toks[d]);
    return node;
}

int32_t suffix_propose(const suffix_store *s, const suffix_seq *q, int32_t k_max,
                          float min_prob, sp_token *out, float *prob) {
    if (!q || !out || k_max <= 0 || q->n == 0) return 0;
    const sp_token *h = q->hist;
    const int32_t n = q->n;

    /* In q: the node of the last m tokens is active[m]; it has a child iff
     * those tokens occurred earlier with a continuation. Having one is
     * monotone in m (a shorter suffix occurs wherever a longer one does). */
    int32_t mq = 0;
    for (int32_t m = SP_MIN(match_cap(q->t.depth, k_max), n); m >= 1; m--)
        if (q->t.nodes[q->active[m]].child) {
            mq = m;
            break;
        }
    /* In s: binary search for the longest suffix whose node has a child. */
    int32_t ms = 0;
    uint32_t ns = 0;
    const st_trie *ts = s && s->head ? &s->t : NULL;
    if (ts) {
        int32_t lo = 0, hi = SP_MIN(match_cap(ts->depth, k_max), n);
        while (lo < hi) {
            int32_t mid = (lo + hi + 1) / 2;
            uint32_t node = st_walk(ts, h + n - mid, mid);
            if (node && ts->nodes[node].child) {
                lo = mid;
                ns = node;
            } else {
                hi = mid - 1;
            }
        }
        ms = lo; /* ns: the node of the last true probe, i.e. of the last ms tokens */
    }
    int32_t m = SP_MAX(mq, ms);
    if (m == 0) return 0;
    const st_trie *tq = &q->t;
    uint32_t cq = mq == m ? q->active[m] : 0;
    uint32_t cs = ms == m ? ns : 0;

    int32_t limit = SP_MIN(k_max, SPEC_FACTOR * m);
    double p = 1.0;
    int32_t len = 0;
    while (len < limit && (cq || cs)) {
        uint64_t total = 0, best_cnt = 0;
        sp_token best = 0;
        if (cq)
            for (uint32_t c = tq->nodes[cq].child; c; c = tq->nodes[c].next) {
                uint64_t cnt = tq->nodes[c].count;
                if (cs) {
                    uint32_t o = st_find(ts, cs, tq->nodes[c].tok);
                    if (o) cnt += ts->nodes[o].count;
                }
                total += tq->nodes[c].count;
                sp_token tok = tq->nodes[c].tok;
                if (cnt > best_cnt || (cnt == best_cnt && tok < best)) best_cnt = cnt, best = tok;
            }
        if (cs)
            for (uint32_t c = ts->nodes[cs].child; c; c = ts->nodes[c].next) {
                total += ts->nodes[c].count;
                sp_token tok = ts->nodes[c].tok;
                if (cq && st_find(tq, cq, tok)) continue; /* counted above */
                uint64_t cnt = ts->nodes[c].count;
                if (cnt > best_cnt || (cnt == best_cnt && tok < best)) best_cnt = cnt, best = tok;
            }
        if (total == 0) break;
        p *= (double)best_cnt / (double)total;
        if (p < (double)min_prob) break;
        out[len] = best;
        if (prob) prob[len] = (float)p;
        len++;
        cq = cq ? st_find(tq, cq, best) : 0;
        cs = cs ? st_find(ts, cs, best) : 0;
    }
    return len;
}

/* ---- consistency checks (tests) ------------------------------------------------ */

/* Checks t's own invariants and that it equals (same paths, same counts) a
 * trie built afresh from the given sequences. */
static int st_check_against(const st_trie *t, const sp_token *const *seqs, const int32_t *lens,
                            size_t n_seqs, char *err, size_t errlen) {
    /* structure: free list, hash entries, sibling links */
    uint32_t nfree = 0;
    for (uint32_t f = t->free_head; f; f = t->nodes[f].next) {
        if (f >= t->n_nodes || ++nfree > t->n_nodes) {
            seterr(err, errlen, "free list broken");
            return -1;
        }
    }
    if (nfree != t->n_free) {
        seterr(err, errlen, "free list has %u nodes, n_free %u", nfree, t->n_free);
        return -1;
    }
    uint32_t used = 0;
    for (uint32_t i = 0; i < t->n_slots; i++) {
        const st_slot *e = &t->slots[i];
        if (!e->node) continue;
        used++;
        if (st_find(t, e->parent, e->tok) != e->node || e->node >= t->n_nodes ||
            t->nodes[e->node].tok != e->tok || t->nodes[e->node].count == 0) {
            seterr(err, errlen, "hash slot %u inconsistent", i);
            return -1;
        }
    }
    if (used != t->n_used || used + 1 + t->n_free != t->n_nodes) {
        seterr(err, errlen, "slots used %u (n_used %u), free %u, nodes %u", used, t->n_used,
                  t->n_free, t->n_nodes);
        return -1;
    }
    st_trie f;
    if (st_init(&f, t->depth) != 0) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n_seqs; i++) total += path_nodes_bound(lens[i], t->depth);
    if (st_reserve(&f, total) != 0) {
        seterr(err, errlen, "out of memory");
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < n_seqs; i++) st_insert_all(&f, seqs[i], lens[i]);
    if (f.n_used != t->n_used) {
        seterr(err, errlen, "%u nodes, a fresh build has %u", t->n_used, f.n_used);
        rc = -1;
        goto out;
    }
    /* every node reachable from the root by child lists, matching f */
    uint32_t *stack = malloc(2 * sizeof(uint32_t) * ((size_t)t->n_used + 1));
    if (!stack) {
        seterr(err, errlen, "out of memory");
        rc = -1;
        goto out;
    }
    size_t sp = 0;
    uint32_t reached = 0;
    stack[sp++] = 0;
    stack[sp++] = 0;
    while (sp && rc == 0) {
        uint32_t b = stack[--sp], a = stack[--sp];
        uint32_t prev = 0, nch = 0;
        for (uint32_t c = t->nodes[a].child; c; prev = c, c = t->nodes[c].next) {
            if (++nch > t->n_used || t->nodes[c].prev != prev || st_find(t, a, t->nodes[c].tok) != c) {
                seterr(err, errlen, "child list of node %u broken", a);
                rc = -1;
                break;
            }
            uint32_t fc = st_find(&f, b, t->nodes[c].tok);
            if (!fc || f.nodes[fc].count != t->nodes[c].count) {
                seterr(err, errlen, "node %u (token %d): count %u, recount %u", c,
                          (int)t->nodes[c].tok, t->nodes[c].count, fc ? f.nodes[fc].count : 0);
                rc = -1;
                break;
            }
            reached++;
            stack[sp++] = c;
            stack[sp++] = fc;
        }
    }
    free(stack);
    if (rc == 0 && reached != t->n_used) {
        seterr(err, errlen, "%u nodes reachable of %u", reached, t->n_used);
        rc = -1;
    }
out:
    st_destroy(&f);
    return rc;
}

int suffix_store_check(const suffix_store *s, char *err, size_t errlen) {
    size_t n_seqs = 0, tokens = 0;
    uint64_t bound = 0;
    for (const st_rec *r = s->head; r; r = r->next)
        n_seqs++, tokens += (size_t)r->n, bound += path_nodes_bound(r->n, s->t.depth);
    if (tokens != s->tokens || tokens > s->max_tokens || bound != s->bound) {
        seterr(err, errlen, "tokens %zu, counted %zu, max %zu; node bound %llu, counted %llu",
                  s->tokens, tokens, s->max_tokens, (unsigned long long)s->bound,
                  (unsigned long long)bound);
        return -1;
    }
    const sp_token **seqs = malloc((n_seqs + 1) * sizeof(*seqs));
    int32_t *lens = malloc((n_seqs + 1) * sizeof(*lens));
    int rc = -1;
    if (seqs && lens) {
        size_t i = 0;
        for (const st_rec *r = s->head; r; r = r->next, i++) seqs[i] = r->toks, lens[i] = r->n;
        rc = st_check_against(&s->t, seqs, lens, n_seqs, err, errlen);
    } else {
        seterr(err, errlen, "out of memory");
    }
    free(seqs);
    free(lens);
    return rc;
}

int suffix_seq_check(const suffix_seq *q, char *err, size_t errlen) {
    const sp_token *seqs[1] = {q->hist};
    int32_t lens[1] = {q->n};
    if (st_check_against(&q->t, seqs, lens, 1, err, errlen) != 0) return -1;
    for (int32_t m = 1; m <= SP_MIN(q->n, q->t.depth); m++)
        if (q->active[m] != st_walk(&q->t, q->hist + q->n - m, m)) {
            seterr(err, errlen, "active node for the last %d tokens is wrong", (int)m);
            return -1;
        }
    return 0;
}
