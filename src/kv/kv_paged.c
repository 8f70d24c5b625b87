/* kv_paged.c: the paged KV store and its prefix cache (see kv_paged.h).
 *
 * Layout: one allocation of NB blocks, data[NB][n_layer][2][bs][kv_dim]
 * (index 0 of the [2] is K, 1 is V), so within one block and layer the rows
 * of consecutive positions are contiguous with stride kv_dim and span()
 * answers at most one block at a time.
 *
 * Bookkeeping (all allocated at creation; nothing allocates afterwards):
 *   free list   a stack of FREE block ids (the most recently freed is reused
 *               first, which keeps its pages warm)
 *   LRU list    a doubly linked list of CACHED blocks through lru_prev and
 *               lru_next: released blocks are appended at the tail, eviction
 *               takes the head
 *   hash table  open addressing, linear probing, backward-shift deletion (no
 *               tombstones), capacity a power of two >= 2 * NB: maps
 *               block_digest -> block id for every hashed block
 *   per slot    block table, len (committed) and reserved (writable)
 */
#include "kv/kv_paged.h"

#include <stdlib.h>
#include <string.h>

enum { BLK_FREE = 0, BLK_CACHED = 1, BLK_IN_USE = 2 };

#define MAX_BLOCKS (1 << 28)

typedef struct kv_paged {
    kv_store base;
    kv_paged_params p;
    size_t row_bytes;    /* one K or V row: kv_dim elements of the type */
    size_t half_bytes;   /* bs * row_bytes: one layer's K (or V) of a block */
    size_t layer_bytes;  /* 2 * half_bytes */
    size_t block_bytes;  /* n_layer * layer_bytes */
    unsigned char *data; /* [NB][n_layer][2][bs][kv_dim] elements */

    /* per block */
    int32_t *refcount;   /* [NB] table entries naming the block */
    uint8_t *state;      /* [NB] BLK_FREE / BLK_CACHED / BLK_IN_USE */
    uint8_t *hashed;     /* [NB] 1 if hash[b] is valid and in the table */
    block_digest *hash; /* [NB] the block's identity when hashed */
    int32_t *lru_prev;   /* [NB] previous CACHED block, -1 at the head or off the list */
    int32_t *lru_next;   /* [NB] next CACHED block, -1 at the tail or off the list */
    int32_t lru_head, lru_tail; /* -1 when empty */
    int32_t *free_stack; /* [NB] FREE block ids, top at n_free - 1 */
    int32_t n_free, n_cached, n_in_use, n_shared;
    int32_t *scratch;    /* [NB] for the checker only */

    /* hash table */
    int32_t *ht;         /* [ht_cap] block id, -1 empty */
    uint32_t ht_mask;    /* ht_cap - 1 */
    int32_t n_hashed;

    /* per slot */
    int32_t *table;      /* [S][max_blocks_per_seq] block ids, -1 past n_table
                            (and, in a window pool, before first) */
    int32_t *n_table;    /* [S] entries in use = ceil(reserved / bs) */
    int32_t *len;        /* [S] committed positions */
    int32_t *reserved;   /* [S] writable positions, >= len */
    int32_t *first;      /* [S] first entry held: 0 but in a window pool, whose
                            entries before it were given back */

    uint64_t evictions, flushed;

    /* sliding layers: their pool (its p.n_layer counts them; base.n_layer
     * of this store counts every layer) and where each layer lives */
    struct kv_paged *win;
    bool window_pool;    /* this is a window pool (entries before first[] are given back) */
    int32_t window;
    int32_t *lmap;       /* [base.n_layer] index in this pool, or -1 - index in win's */
} kv_paged;

static const kv_ops kp_ops;

static kv_paged *KP(kv_store *kv) {
    SP_ASSERT(kv && kv->ops == &kp_ops);
    return (kv_paged *)kv;
}
static const kv_paged *KPC(const kv_store *kv) {
    SP_ASSERT(kv && kv->ops == &kp_ops);
    return (const kv_paged *)kv;
}

static int32_t ceil_div(int32_t a, int32_t b) { return (int32_t)(((int64_t)a + b - 1) / b); }

/* ---- hash table ---------------------------------------------------------- */

static uint32_t ht_home(const kv_paged *s, const block_digest *h) {
    uint32_t x = (uint32_t)h->b[0] | (uint32_t)h->b[1] << 8 | (uint32_t)h->b[2] << 16 |
                 (uint32_t)h->b[3] << 24;
    return x & s->ht_mask;
}

/* Slot of the entry for h, or -1. */
static int64_t ht_slot(const kv_paged *s, const block_digest *h) {
    uint32_t i = ht_home(s, h);
    for (;;) {
        int32_t b = s->ht[i];
        if (b < 0) return -1;
        if (memcmp(s->hash[b].b, h->b, 32) == 0) return i;
        i = (i + 1) & s->ht_mask;
    }
}

static int32_t ht_find(const kv_paged *s, const block_digest *h) {
    int64_t i = ht_slot(s, h);
    return i < 0 ? -1 : s->ht[i];
}

/* Makes block b (whose hash[b] is set and not in the table) findable. */
static void ht_insert(kv_paged *s, int32_t b) {
    uint32_t i = ht_home(s, &s->hash[b]);
    while (s->ht[i] >= 0) i = (i + 1) & s->ht_mask;
    s->ht[i] = b;
    s->hashed[b] = 1;
    s->n_hashed++;
}

/* Forgets block b's hash (backward-shift deletion keeps probe chains intact). */
static void ht_remove(kv_paged *s, int32_t b) {
    SP_ASSERT(s->hashed[b]);
    int64_t found = ht_slot(s, &s->hash[b]);
    SP_ASSERT(found >= 0 && s->ht[found] == b);
    uint32_t i = (uint32_t)found, j = i;
    for (;;) {
        j = (j + 1) & s->ht_mask;
        if (s->ht[j] < 0) break;
        uint32_t k = ht_home(s, &s->hash[s->ht[j]]);
        /* The entry at j may move to the hole at i unless its home lies
         * cyclically in (i, j]. */
        bool stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            s->ht[i] = s->ht[j];
            i = j;
        }
    }
    s->ht[i] = -1;
    s->hashed[b] = 0;
    s->n_hashed--;
}

/* ---- block lists --------------------------------------------------------- */

static void lru_append(kv_paged *s, int32_t b) {
    s->lru_prev[b] = s->lru_tail;
    s->lru_next[b] = -1;
    if (s->lru_tail >= 0) s->lru_next[s->lru_tail] = b;
    else s->lru_head = b;
    s->lru_tail = b;
}

static void lru_remove(kv_paged *s, int32_t b) {
    int32_t pv = s->lru_prev[b], nx = s->lru_next[b];
    if (pv >= 0) s->lru_next[pv] = nx;
    else s->lru_head = nx;
    if (nx >= 0) s->lru_prev[nx] = pv;
    else s->lru_tail = pv;
    s->lru_prev[b] = s->lru_next[b] = -1;
}

static void free_push(kv_paged *s, int32_t b) {
    s->state[b] = BLK_FREE;
    s->free_stack[s->n_free++] = b;
}

/* A FREE block, else the least recently released CACHED one (its hash is
 * forgotten first). Refcount 1, IN USE. The caller has checked that one is
 * available. */
static int32_t block_alloc(kv_paged *s) {
    int32_t b;
    if (s->n_free > 0) {
        b = s->free_stack[--s->n_free];
    } else {
        b = s->lru_head;
        SP_ASSERT(b >= 0);
        lru_remove(s, b);
        ht_remove(s, b);
        s->n_cached--;
        s->evictions++;
    }
    s->state[b] = BLK_IN_USE;
    s->refcount[b] = 1;
    s->n_in_use++;
    return b;
}

/* Drops one reference: at 0 a hashed block becomes CACHED, else FREE. */
static void block_release(kv_paged *s, int32_t b) {
    SP_ASSERT(s->state[b] == BLK_IN_USE && s->refcount[b] >= 1);
    if (s->refcount[b] == 2) s->n_shared--;
    if (--s->refcount[b] > 0) return;
    s->n_in_use--;
    if (s->hashed[b]) {
        s->state[b] = BLK_CACHED;
        lru_append(s, b);
        s->n_cached++;
    } else {
        free_push(s, b);
    }
}

/* Releases seq's table entries from the tail down to nb entries. */
static void table_truncate(kv_paged *s, int32_t seq, int32_t nb) {
    int32_t *t = s->table + (size_t)seq * s->p.max_blocks_per_seq;
    while (s->n_table[seq] > nb) {
        int32_t i = --s->n_table[seq];
        if (t[i] >= 0) block_release(s, t[i]); /* not a given-back window entry */
        t[i] = -1;
    }
    if (s->first[seq] > nb) s->first[seq] = nb;
}

/* A window pool gives back seq's entries wholly before position pos (the
 * first its next query sees); hashed ones stay findable as CACHED. */
static void window_drop(kv_paged *w, int32_t seq, int32_t pos) {
    const int32_t upto = SP_MIN(pos > 0 ? pos / w->p.block_size : 0, w->n_table[seq]);
    int32_t *t = w->table + (size_t)seq * w->p.max_blocks_per_seq;
    for (int32_t i = w->first[seq]; i < upto; i++) {
        block_release(w, t[i]);
        t[i] = -1;
    }
    if (upto > w->first[seq]) w->first[seq] = upto;
}


/* Where layer lives: its pool (the main one or the window one) and its
 * index there. */
static kv_paged *pool_of(kv_paged *s, int32_t *layer) {
    if (!s->win) return s;
    const int32_t l = s->lmap[*layer];
    if (l >= 0) {
        *layer = l;
        return s;
    }
    *layer = -1 - l;
    return s->win;
}

/* ---- kv_store ops ----------------------------------------------------------- */

static unsigned char *row_ptr(const kv_paged *s, int32_t layer, int32_t seq, int32_t pos,
                              int kv) {
    int32_t bi = pos / s->p.block_size;
    int32_t off = pos - bi * s->p.block_size;
    int32_t b = s->table[(size_t)seq * s->p.max_blocks_per_seq + bi];
    SP_ASSERT(b >= 0); /* never a window entry given back */
    return s->data + (size_t)b * s->block_bytes + (size_t)layer * s->layer_bytes +
           (size_t)kv * s->half_bytes + (size_t)off * s->row_bytes;
}

static int reserve_one(kv_paged *s, int32_t seq, int32_t n_new);

static int kp_reserve(kv_store *kv, int32_t seq, int32_t n_new) {
    kv_paged *s = KP(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    if (n_new < 0) return -1;
    if (!s->win) return reserve_one(s, seq, n_new);
    const int32_t before = s->reserved[seq] - s->len[seq];
    if (reserve_one(s, seq, n_new)) return -1;
    /* the queries of this pass start at len: what they cannot see goes back
     * first (rollbacks never cut below the committed len) */
    window_drop(s->win, seq, kv_window_lo(s->len[seq] + 1, s->window));
    if (reserve_one(s->win, seq, n_new)) {
        reserve_one(s, seq, before); /* all or nothing */
        return -1;
    }
    return 0;
}

static int reserve_one(kv_paged *s, int32_t seq, int32_t n_new) {
    int64_t target = (int64_t)s->len[seq] + n_new;
    if (target > (int64_t)s->p.max_blocks_per_seq * s->p.block_size) return -1;
    int32_t need = ceil_div((int32_t)target, s->p.block_size);
    int32_t have = s->n_table[seq];
    if (need > have) {
        if (need - have > s->n_free + s->n_cached) return -1;
        int32_t *t = s->table + (size_t)seq * s->p.max_blocks_per_seq;
        for (int32_t i = have; i < need; i++) t[i] = block_alloc(s);
        s->n_table[seq] = need;
    } else {
        table_truncate(s, seq, need); /* drops an earlier, larger reservation */
    }
    s->reserved[seq] = (int32_t)target;
    return 0;
}

static void *kp_k_row(kv_store *kv, int32_t layer, int32_t seq, int32_t pos) {
    kv_paged *s = pool_of((kv_paged *)kv, &layer);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq && layer >= 0 && layer < s->p.n_layer);
    SP_ASSERT(pos >= 0 && pos < s->reserved[seq]);
    int32_t b = s->table[(size_t)seq * s->p.max_blocks_per_seq + pos / s->p.block_size];
    SP_ASSERT(s->refcount[b] == 1 && !s->hashed[b]); /* never write a shared/cached block */
    return row_ptr(s, layer, seq, pos, 0);
}

static void *kp_v_row(kv_store *kv, int32_t layer, int32_t seq, int32_t pos) {
    kv_paged *s = pool_of((kv_paged *)kv, &layer);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq && layer >= 0 && layer < s->p.n_layer);
    SP_ASSERT(pos >= 0 && pos < s->reserved[seq]);
    int32_t b = s->table[(size_t)seq * s->p.max_blocks_per_seq + pos / s->p.block_size];
    SP_ASSERT(s->refcount[b] == 1 && !s->hashed[b]);
    return row_ptr(s, layer, seq, pos, 1);
}

static int32_t kp_span(kv_store *kv, int32_t layer, int32_t seq, int32_t pos, int32_t end,
                       const void **k, const void **v) {
    kv_paged *s = pool_of((kv_paged *)kv, &layer);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq && layer >= 0 && layer < s->p.n_layer);
    SP_ASSERT(pos >= 0 && pos < end && end <= s->reserved[seq]);
    int32_t blk_end = (pos / s->p.block_size + 1) * s->p.block_size;
    *k = row_ptr(s, layer, seq, pos, 0);
    *v = row_ptr(s, layer, seq, pos, 1);
    return SP_MIN(end, blk_end) - pos;
}

static int32_t kp_len(const kv_store *kv, int32_t seq) {
    const kv_paged *s = (const kv_paged *)kv;
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    return s->len[seq];
}

static void set_len_one(kv_paged *s, int32_t seq, int32_t len) {
    SP_ASSERT(len >= 0 && len <= s->reserved[seq]);
    table_truncate(s, seq, ceil_div(len, s->p.block_size));
    s->len[seq] = len;
    s->reserved[seq] = len;
}

static void kp_set_len(kv_store *kv, int32_t seq, int32_t len) {
    kv_paged *s = KP(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    set_len_one(s, seq, len);
    if (!s->win) return;
    set_len_one(s->win, seq, len);
    /* a query at len must still find its window */
    SP_ASSERT(len == 0 || (int64_t)s->win->first[seq] * s->p.block_size <= kv_window_lo(len + 1, s->window));
}

static void kp_destroy(kv_store *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (!s) return;
    if (s->win) kp_destroy(&s->win->base);
    free(s->lmap);
    free(s->first);
    free(s->data);
    free(s->refcount);
    free(s->state);
    free(s->hashed);
    free(s->hash);
    free(s->lru_prev);
    free(s->lru_next);
    free(s->free_stack);
    free(s->scratch);
    free(s->ht);
    free(s->table);
    free(s->n_table);
    free(s->len);
    free(s->reserved);
    free(s);
}

static const kv_ops kp_ops = {kp_reserve, kp_k_row,   kp_v_row,  kp_span,
                                 kp_len,     kp_set_len, kp_destroy};

/* ---- creation ------------------------------------------------------------ */

size_t kv_paged_block_bytes(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t block_size) {
    return 2 * (size_t)n_layer * (size_t)block_size * row_size(type, kv_dim);
}

/* One pool; n_layer 0 only for the main pool of a store whose every layer
 * slides (its blocks then hold no data: table, hashes and refcounts only). */
static kv_paged *create_one(kv_paged_params p, bool empty_ok, char *err, size_t errlen) {
    kv_paged *s = NULL;
    if (!kv_type_ok(p.type, p.kv_dim)) {
        seterr(err, errlen, "KV element type must be f16, f32 or q8_0 (q8_0: K/V rows of a multiple of 32)");
        return NULL;
    }
    if (p.n_layer < (empty_ok ? 0 : 1) || p.kv_dim < 1 || p.n_seq < 1) {
        seterr(err, errlen, "paged KV: n_layer (%d), kv_dim (%d) and n_seq (%d) must be >= 1",
                  p.n_layer, p.kv_dim, p.n_seq);
        return NULL;
    }
    if (p.block_size < 1 || p.block_size > 4096) {
        seterr(err, errlen, "paged KV: block_size %d is not in 1..4096", p.block_size);
        return NULL;
    }
    if (p.n_blocks < 1 || p.n_blocks > MAX_BLOCKS) {
        seterr(err, errlen, "paged KV: n_blocks %d is not in 1..%d", p.n_blocks, MAX_BLOCKS);
        return NULL;
    }
    if (p.max_blocks_per_seq < 1 ||
        (int64_t)p.max_blocks_per_seq * p.block_size > INT32_MAX) {
        seterr(err, errlen, "paged KV: max_blocks_per_seq %d is not in 1..%d",
                  p.max_blocks_per_seq, INT32_MAX / p.block_size);
        return NULL;
    }
    size_t bb = kv_paged_block_bytes(p.type, p.n_layer, p.kv_dim, p.block_size);
    /* block_bytes = 2 * n_layer * bs * row bytes (<= 4 kv_dim): each factor
     * < 2^31, so check the products against SIZE_MAX in steps. */
    if ((size_t)p.kv_dim > SIZE_MAX / 8 / (size_t)p.block_size / (size_t)SP_MAX(p.n_layer, 1) ||
        bb > SIZE_MAX / 2 / (size_t)p.n_blocks) {
        seterr(err, errlen, "paged KV: pool size overflows");
        return NULL;
    }
    size_t pool = bb * (size_t)p.n_blocks;

    s = calloc(1, sizeof(*s));
    if (!s) goto oom;
    s->base = (kv_store){&kp_ops, p.type, p.n_layer, p.kv_dim, p.n_seq};
    s->p = p;
    s->row_bytes = row_size(p.type, p.kv_dim);
    s->half_bytes = (size_t)p.block_size * s->row_bytes;
    s->layer_bytes = 2 * s->half_bytes;
    s->block_bytes = bb;
    size_t nb = (size_t)p.n_blocks, ns = (size_t)p.n_seq;
    /* 64-byte aligned for the SIMD attention; the pool is not zeroed (its
     * pages are touched only as blocks are written). */
    s->data = aligned_alloc(64, (pool + 64) / 64 * 64); /* never 0 bytes */
    s->refcount = calloc(nb, sizeof(int32_t));
    s->state = calloc(nb, 1);
    s->hashed = calloc(nb, 1);
    s->hash = calloc(nb, sizeof(block_digest));
    s->lru_prev = malloc(nb * sizeof(int32_t));
    s->lru_next = malloc(nb * sizeof(int32_t));
    s->free_stack = malloc(nb * sizeof(int32_t));
    s->scratch = malloc(nb * sizeof(int32_t));
    uint32_t cap = 16;
    while (cap < 2 * nb) cap <<= 1; /* nb <= 2^28: no overflow */
    s->ht_mask = cap - 1;
    s->ht = malloc((size_t)cap * sizeof(int32_t));
    s->table = malloc(ns * (size_t)p.max_blocks_per_seq * sizeof(int32_t));
    s->n_table = calloc(ns, sizeof(int32_t));
    s->len = calloc(ns, sizeof(int32_t));
    s->reserved = calloc(ns, sizeof(int32_t));
    s->first = calloc(ns, sizeof(int32_t));
    if (!s->data || !s->refcount || !s->state || !s->hashed || !s->hash || !s->lru_prev ||
        !s->lru_next || !s->free_stack || !s->scratch || !s->ht || !s->table || !s->n_table ||
        !s->len || !s->reserved || !s->first)
        goto oom;
    for (size_t i = 0; i < nb; i++) s->lru_prev[i] = s->lru_next[i] = -1;
    s->lru_head = s->lru_tail = -1;
    for (size_t i = 0; i < cap; i++) s->ht[i] = -1;
    for (size_t i = 0; i < ns * (size_t)p.max_blocks_per_seq; i++) s->table[i] = -1;
    /* Pushed in reverse so the first allocations hand out 0, 1, 2, ... */
    for (int32_t b = p.n_blocks - 1; b >= 0; b--) free_push(s, b);
    return s;
oom:
    seterr(err, errlen, "out of memory allocating a paged KV store of %d blocks (%zu bytes)",
              p.n_blocks, pool);
    kp_destroy(s ? &s->base : NULL);
    return NULL;
}

kv_store *kv_paged_create(kv_paged_params p, char *err, size_t errlen) {
    int32_t n_win = 0;
    for (int32_t l = 0; p.window > 0 && p.slides && l < p.n_layer; l++) n_win += p.slides[l];
    if (!n_win) {
        p.window = 0;
        kv_paged *s = create_one(p, false, err, errlen);
        return s ? &s->base : NULL;
    }
    if (p.window_blocks < 1) {
        seterr(err, errlen, "paged KV: a window pool of %d blocks", p.window_blocks);
        return NULL;
    }
    kv_paged_params mp = p, wp = p;
    mp.n_layer = p.n_layer - n_win;
    wp.n_layer = n_win;
    wp.n_blocks = p.window_blocks;
    kv_paged *s = create_one(mp, true, err, errlen);
    if (!s) return NULL;
    s->base.n_layer = p.n_layer;
    s->window = p.window;
    s->lmap = malloc((size_t)p.n_layer * sizeof(int32_t));
    if (!s->lmap || !(s->win = create_one(wp, false, err, errlen))) {
        if (!s->lmap) seterr(err, errlen, "out of memory");
        kp_destroy(&s->base);
        return NULL;
    }
    s->win->window_pool = true;
    for (int32_t l = 0, nf = 0, nw = 0; l < p.n_layer; l++) s->lmap[l] = p.slides[l] ? -1 - nw++ : nf++;
    return &s->base;
}

/* ---- prefix cache -------------------------------------------------------- */

/* The window pool's first block a continuation after n blocks needs. */
static int32_t window_first(const kv_paged *s, int32_t n) {
    return kv_window_lo(n * s->p.block_size + 1, s->window) / s->p.block_size;
}

static bool all_found(const kv_paged *s, const block_digest *h, int32_t from, int32_t n) {
    for (int32_t i = from; i < n; i++)
        if (ht_find(s, &h[i]) < 0) return false;
    return true;
}

int32_t kv_paged_match(const kv_store *kv, const block_digest *h, int32_t n) {
    const kv_paged *s = KPC(kv);
    if (!s->p.prefix_cache) return 0;
    int32_t i = 0;
    while (i < n && ht_find(s, &h[i]) >= 0) i++;
    /* the longest of those prefixes whose last window is held too */
    while (s->win && i > 0 && !all_found(s->win, h, window_first(s, i), i)) i--;
    return i;
}

/* Attaches h[from..n) at table entries from..n-1 (those before from stay
 * given back: a window pool's). */
static int attach_one(kv_paged *s, int32_t seq, const block_digest *h, int32_t from, int32_t n) {
    if (n < 0 || n > s->p.max_blocks_per_seq) return -1;
    if (s->n_table[seq] != 0 || s->len[seq] != 0 || s->reserved[seq] != 0) return -1;
    int32_t *t = s->table + (size_t)seq * s->p.max_blocks_per_seq;
    /* First pass: look every block up (the empty table is the scratch), so a
     * miss changes nothing. */
    for (int32_t i = from; i < n; i++) {
        int32_t b = s->p.prefix_cache ? ht_find(s, &h[i]) : -1;
        if (b < 0) {
            for (int32_t j = from; j < i; j++) t[j] = -1;
            return -1;
        }
        t[i] = b;
    }
    for (int32_t i = from; i < n; i++) {
        int32_t b = t[i];
        if (s->state[b] == BLK_CACHED) {
            lru_remove(s, b);
            s->state[b] = BLK_IN_USE;
            s->n_cached--;
            s->n_in_use++;
        }
        if (++s->refcount[b] == 2) s->n_shared++;
    }
    s->n_table[seq] = n;
    s->first[seq] = from;
    s->len[seq] = s->reserved[seq] = n * s->p.block_size;
    return 0;
}

int kv_paged_attach(kv_store *kv, int32_t seq, const block_digest *h, int32_t n) {
    kv_paged *s = KP(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    if (s->win && (n < 0 || !s->p.prefix_cache || !all_found(s->win, h, window_first(s, n), n))) return -1;
    if (attach_one(s, seq, h, 0, n)) return -1;
    if (s->win && attach_one(s->win, seq, h, window_first(s, n), n)) { /* cannot fail: checked */
        set_len_one(s, seq, 0);
        return -1;
    }
    return 0;
}

static void commit_one(kv_paged *s, int32_t seq, int32_t block, const block_digest *h) {
    int32_t b = s->table[(size_t)seq * s->p.max_blocks_per_seq + block];
    if (b < 0 || s->hashed[b] || ht_find(s, h) >= 0) return; /* given back, or known */
    SP_ASSERT(s->state[b] == BLK_IN_USE && s->refcount[b] == 1);
    s->hash[b] = *h;
    ht_insert(s, b);
}

void kv_paged_commit(kv_store *kv, int32_t seq, int32_t block, const block_digest *h) {
    kv_paged *s = KP(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    SP_ASSERT(block >= 0 && block < s->n_table[seq]);
    SP_ASSERT((int64_t)(block + 1) * s->p.block_size <= s->len[seq]); /* full and committed */
    if (!s->p.prefix_cache) return;
    commit_one(s, seq, block, h);
    if (s->win) commit_one(s->win, seq, block, h);
}

static int append_one(kv_paged *s, int32_t seq, const block_digest *h, const void *data);

int kv_paged_append(kv_store *kv, int32_t seq, const block_digest *h, const void *data) {
    kv_paged *s = KP(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq);
    if (!s->win) return append_one(s, seq, h, data);
    if (append_one(s, seq, h, data)) return -1;
    if (append_one(s->win, seq, h, data ? (const unsigned char *)data + s->block_bytes : NULL)) {
        set_len_one(s, seq, s->len[seq] - s->p.block_size); /* all or nothing */
        return -1;
    }
    window_drop(s->win, seq, kv_window_lo(s->len[seq] + 1, s->window)); /* nothing reserved past len */
    return 0;
}

static int append_one(kv_paged *s, int32_t seq, const block_digest *h, const void *data) {
    const int32_t n = s->n_table[seq];
    if (!s->p.prefix_cache || n >= s->p.max_blocks_per_seq || s->len[seq] != n * s->p.block_size ||
        s->reserved[seq] != s->len[seq])
        return -1;
    int32_t b = ht_find(s, h);
    if (b >= 0) {
        if (s->state[b] == BLK_CACHED) {
            lru_remove(s, b);
            s->state[b] = BLK_IN_USE;
            s->n_cached--;
            s->n_in_use++;
        }
        if (++s->refcount[b] == 2) s->n_shared++;
    } else {
        if (!data || s->n_free + s->n_cached < 1) return -1;
        b = block_alloc(s);
        memcpy(s->data + (size_t)b * s->block_bytes, data, s->block_bytes);
        s->hash[b] = *h;
        ht_insert(s, b);
    }
    s->table[(size_t)seq * s->p.max_blocks_per_seq + n] = b;
    s->n_table[seq] = n + 1;
    s->len[seq] = s->reserved[seq] = (n + 1) * s->p.block_size;
    return 0;
}

bool kv_paged_resident(const kv_store *kv, const block_digest *h) {
    const kv_paged *s = KPC(kv);
    return s->p.prefix_cache && ht_find(s, h) >= 0 && (!s->win || ht_find(s->win, h) >= 0);
}

int kv_paged_block_read(const kv_store *kv, int32_t seq, int32_t block, void *out) {
    const kv_paged *s = KPC(kv);
    if (seq < 0 || seq >= s->p.n_seq || block < 0 || block >= s->n_table[seq]) return -1;
    const int32_t b = s->table[(size_t)seq * s->p.max_blocks_per_seq + block];
    const int32_t wb = s->win ? s->win->table[(size_t)seq * s->p.max_blocks_per_seq + block] : 0;
    if (b < 0 || wb < 0) return -1;
    memcpy(out, s->data + (size_t)b * s->block_bytes, s->block_bytes);
    if (s->win)
        memcpy((unsigned char *)out + s->block_bytes, s->win->data + (size_t)wb * s->win->block_bytes,
               s->win->block_bytes);
    return 0;
}

static int32_t flush_one(kv_paged *s);

int32_t kv_paged_flush(kv_store *kv) {
    kv_paged *s = KP(kv);
    return flush_one(s) + (s->win ? flush_one(s->win) : 0);
}

static int32_t flush_one(kv_paged *s) {
    int32_t n = 0;
    while (s->lru_head >= 0) {
        int32_t b = s->lru_head;
        lru_remove(s, b);
        ht_remove(s, b);
        s->n_cached--;
        free_push(s, b);
        n++;
    }
    s->flushed += (uint64_t)n;
    return n;
}

void kv_paged_get_stats(const kv_store *kv, kv_paged_stats *st) {
    const kv_paged *s = KPC(kv);
    *st = (kv_paged_stats){
        .n_blocks = s->p.n_blocks,
        .block_size = s->p.block_size,
        .n_free = s->n_free,
        .n_cached = s->n_cached,
        .n_in_use = s->n_in_use,
        .n_shared = s->n_shared,
        .evictions = s->evictions,
        .flushed = s->flushed,
        .block_bytes = s->block_bytes,
        .cached_bytes = (size_t)s->n_cached * s->block_bytes,
        .pool_bytes = (size_t)s->p.n_blocks * s->block_bytes,
    };
    if (s->win) {
        const kv_paged *w = s->win;
        st->win_blocks = w->p.n_blocks;
        st->win_in_use = w->n_in_use;
        st->win_cached = w->n_cached;
        st->win_block_bytes = w->block_bytes;
        st->cached_bytes += (size_t)w->n_cached * w->block_bytes;
        st->pool_bytes += (size_t)w->p.n_blocks * w->block_bytes;
    }
}

int32_t kv_paged_blocks_needed(const kv_store *kv, int32_t seq, int32_t n_new) {
    const kv_paged *s = KPC(kv);
    SP_ASSERT(seq >= 0 && seq < s->p.n_seq && n_new >= 0);
    int64_t target = (int64_t)s->len[seq] + n_new;
    int64_t need = (target + s->p.block_size - 1) / s->p.block_size - s->n_table[seq];
    return need > 0 ? (int32_t)SP_MIN(need, (int64_t)INT32_MAX) : 0;
}

int32_t kv_paged_available(const kv_store *kv) {
    const kv_paged *s = KPC(kv);
    return s->n_free + s->n_cached;
}

int32_t kv_paged_block_id(const kv_store *kv, int32_t seq, int32_t block) {
    const kv_paged *s = KPC(kv);
    if (seq < 0 || seq >= s->p.n_seq || block < 0 || block >= s->n_table[seq]) return -1;
    return s->table[(size_t)seq * s->p.max_blocks_per_seq + block];
}

int32_t kv_paged_refcount(const kv_store *kv, int32_t block_id) {
    const kv_paged *s = KPC(kv);
    if (block_id < 0 || block_id >= s->p.n_blocks) return -1;
    return s->refcount[block_id];
}

/* ---- invariant checker --------------------------------------------------- */

#define FAIL(...)                                                              \
    do {                                                                       \
        seterr(err, errlen, __VA_ARGS__);                                   \
        return -1;                                                             \
    } while (0)

static int check_one(const kv_paged *s, char *err, size_t errlen);

int kv_paged_check(const kv_store *kv, char *err, size_t errlen) {
    const kv_paged *s = KPC(kv);
    if (check_one(s, err, errlen)) return -1;
    if (!s->win) return 0;
    const kv_paged *w = s->win;
    if (check_one(w, err, errlen)) {
        char e2[256];
        snprintf(e2, sizeof(e2), "window pool: %s", err);
        seterr(err, errlen, "%s", e2);
        return -1;
    }
    for (int32_t q = 0; q < s->p.n_seq; q++) {
        if (w->len[q] != s->len[q] || w->reserved[q] != s->reserved[q])
            FAIL("seq %d: window pool len %d / reserved %d, main pool %d / %d", q, w->len[q], w->reserved[q],
                 s->len[q], s->reserved[q]);
        if (s->len[q] && (int64_t)w->first[q] * s->p.block_size > kv_window_lo(s->len[q] + 1, s->window))
            FAIL("seq %d: the window pool gave back block %d, which a query at %d sees", q, w->first[q] - 1,
                 s->len[q]);
    }
    return 0;
}

static int check_one(const kv_paged *s, char *err, size_t errlen) {
    const int32_t NB = s->p.n_blocks, bs = s->p.block_size, mb = s->p.max_blocks_per_seq;
    int32_t *refs = s->scratch; /* scratch is the checker's own: writing it is no state change */

    /* Slots: lengths, table coverage, entries name IN USE blocks. */
    for (int32_t b = 0; b < NB; b++) refs[b] = 0;
    for (int32_t q = 0; q < s->p.n_seq; q++) {
        const int32_t *t = s->table + (size_t)q * mb;
        if (s->len[q] < 0 || s->len[q] > s->reserved[q] || (int64_t)s->reserved[q] > (int64_t)mb * bs)
            FAIL("seq %d: len %d, reserved %d out of order (max %lld)", q, s->len[q],
                 s->reserved[q], (long long)mb * bs);
        if (s->n_table[q] != ceil_div(s->reserved[q], bs))
            FAIL("seq %d: table has %d blocks, reserved %d needs %d", q, s->n_table[q],
                 s->reserved[q], ceil_div(s->reserved[q], bs));
        if (s->first[q] < 0 || (s->first[q] > 0 && s->first[q] > s->n_table[q]) || (!s->window_pool && s->first[q]))
            FAIL("seq %d: first held entry %d of %d", q, s->first[q], s->n_table[q]);
        for (int32_t i = 0; i < mb; i++) {
            int32_t b = t[i];
            if (i >= s->n_table[q] || i < s->first[q]) {
                if (b != -1) FAIL("seq %d: table entry %d past the end or given back names block %d", q, i, b);
                continue;
            }
            if (b < 0 || b >= NB) FAIL("seq %d: table entry %d = %d out of range", q, i, b);
            if (s->state[b] != BLK_IN_USE)
                FAIL("seq %d: table entry %d names block %d in state %d", q, i, b, s->state[b]);
            refs[b]++;
        }
    }

    /* Blocks: states, refcounts, hashes. */
    int32_t cnt[3] = {0, 0, 0}, n_shared = 0, n_hashed = 0;
    for (int32_t b = 0; b < NB; b++) {
        int st = s->state[b];
        if (st > BLK_IN_USE) FAIL("block %d: bad state %d", b, st);
        cnt[st]++;
        if (s->refcount[b] != refs[b])
            FAIL("block %d: refcount %d but %d table entries name it", b, s->refcount[b], refs[b]);
        if ((st == BLK_IN_USE) != (s->refcount[b] >= 1))
            FAIL("block %d: state %d with refcount %d", b, st, s->refcount[b]);
        if (st == BLK_FREE && s->hashed[b]) FAIL("block %d: FREE but hashed", b);
        if (st == BLK_CACHED && !s->hashed[b]) FAIL("block %d: CACHED but not hashed", b);
        if (s->refcount[b] > 1 && !s->hashed[b])
            FAIL("block %d: shared (refcount %d) but not hashed", b, s->refcount[b]);
        if (st != BLK_CACHED && (s->lru_prev[b] != -1 || s->lru_next[b] != -1))
            FAIL("block %d: not CACHED but linked into the LRU list", b);
        n_shared += s->refcount[b] > 1;
        if (s->hashed[b]) {
            n_hashed++;
            if (ht_find(s, &s->hash[b]) != b)
                FAIL("block %d: hashed but the hash table finds %d", b, ht_find(s, &s->hash[b]));
        }
    }
    if (cnt[BLK_FREE] != s->n_free || cnt[BLK_CACHED] != s->n_cached ||
        cnt[BLK_IN_USE] != s->n_in_use)
        FAIL("counts free/cached/in-use %d/%d/%d, states say %d/%d/%d", s->n_free, s->n_cached,
             s->n_in_use, cnt[BLK_FREE], cnt[BLK_CACHED], cnt[BLK_IN_USE]);
    if (n_shared != s->n_shared) FAIL("n_shared %d, refcounts say %d", s->n_shared, n_shared);
    if (n_hashed != s->n_hashed) FAIL("n_hashed %d, blocks say %d", s->n_hashed, n_hashed);

    /* Hash table: exactly the hashed blocks, each once. */
    int32_t n_entries = 0;
    for (uint32_t i = 0; i <= s->ht_mask; i++) {
        int32_t b = s->ht[i];
        if (b == -1) continue;
        if (b < 0 || b >= NB) FAIL("hash table slot %u: block %d out of range", i, b);
        if (!s->hashed[b]) FAIL("hash table slot %u: block %d is not hashed", i, b);
        n_entries++;
    }
    if (n_entries != n_hashed) FAIL("hash table holds %d entries for %d hashed blocks", n_entries, n_hashed);

    /* Free list: exactly the FREE blocks, each once (refs reused as marks). */
    int32_t *mark = refs;
    for (int32_t b = 0; b < NB; b++) mark[b] = 0;
    for (int32_t i = 0; i < s->n_free; i++) {
        int32_t b = s->free_stack[i];
        if (b < 0 || b >= NB) FAIL("free list entry %d = %d out of range", i, b);
        if (s->state[b] != BLK_FREE) FAIL("free list holds block %d in state %d", b, s->state[b]);
        if (mark[b]++) FAIL("free list holds block %d twice", b);
    }

    /* LRU list: exactly the CACHED blocks, links consistent, no cycle. */
    int32_t n_lru = 0, prev = -1;
    for (int32_t b = s->lru_head; b != -1; b = s->lru_next[b]) {
        if (b < 0 || b >= NB) FAIL("LRU list: block %d out of range", b);
        if (++n_lru > NB) FAIL("LRU list: cycle");
        if (s->state[b] != BLK_CACHED) FAIL("LRU list holds block %d in state %d", b, s->state[b]);
        if (s->lru_prev[b] != prev) FAIL("LRU list: block %d's prev is %d, not %d", b, s->lru_prev[b], prev);
        if (mark[b]++) FAIL("LRU list holds block %d twice", b);
        prev = b;
    }
    if (s->lru_tail != prev) FAIL("LRU list: tail %d, walk ends at %d", s->lru_tail, prev);
    if (n_lru != s->n_cached) FAIL("LRU list holds %d blocks, %d are CACHED", n_lru, s->n_cached);
    if (s->n_free + s->n_cached + s->n_in_use != NB)
        FAIL("free %d + cached %d + in use %d != %d blocks", s->n_free, s->n_cached, s->n_in_use, NB);
    return 0;
}
