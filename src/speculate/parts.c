/* parts.c: the partitions of what speculative decoding learns across
 * requests, one per cache salt (see spec.h for the contract).
 *
 * Why: a suffix store shared by every request let any tenant learn whether
 * another tenant had generated a text (send its prompt plus half its
 * continuation and read how many proposals were accepted, or time the
 * answer); a shared acceptance prior leaked, more faintly, how well other
 * tenants' proposals did. Keyed by the prefix cache's salt, each tenant
 * sees only what its own requests taught.
 *
 * Layout: partitions are found through a chained hash table of
 * power-of-two size (>= max_parts, so chains stay short) and ordered in a
 * doubly linked LRU list, most recent at the head. Each holds its salt, a
 * hold count (requests running with it), its priors and its suffix store
 * (NULL while empty). Cost: an acquire is one hash of the salt and one
 * chain walk; an add is the store's add plus, over the budget, one drop per
 * sequence evicted and possibly a rebuild of each trimmed store.
 */
#include "speculate/spec.h"

#include "common.h"

struct spec_part {
    char *salt;                  /* "" for requests without one */
    uint64_t hash;
    spec_part *chain;         /* next in its hash bucket */
    spec_part *newer, *older; /* LRU list */
    int32_t holds;
    suffix_store *store;      /* NULL while it holds nothing */
    float prior[SP_SPEC_N_METHODS];
    int32_t prior_n[SP_SPEC_N_METHODS]; /* observations folded into prior (capped) */
};

struct spec_parts {
    spec_part **buckets;
    uint32_t n_buckets;          /* power of two */
    spec_part *newest, *oldest;
    int32_t n_parts, max_parts;
    size_t max_tokens, tokens;   /* tokens: summed over every store */
    int32_t depth;
};

static uint64_t salt_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

spec_parts *spec_parts_create(size_t max_tokens, int32_t max_parts, int32_t depth) {
    spec_parts *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->max_parts = max_parts < 1 ? 1 : max_parts;
    m->n_buckets = 16;
    while (m->n_buckets < (uint32_t)m->max_parts && m->n_buckets < (1u << 30)) m->n_buckets *= 2;
    m->buckets = calloc(m->n_buckets, sizeof(*m->buckets));
    if (!m->buckets) {
        free(m);
        return NULL;
    }
    m->max_tokens = max_tokens;
    m->depth = depth;
    return m;
}

static void lru_unlink(spec_parts *m, spec_part *p) {
    if (p->newer) p->newer->older = p->older;
    else m->newest = p->older;
    if (p->older) p->older->newer = p->newer;
    else m->oldest = p->newer;
    p->newer = p->older = NULL;
}

static void lru_push_newest(spec_parts *m, spec_part *p) {
    p->newer = NULL;
    p->older = m->newest;
    if (m->newest) m->newest->newer = p;
    else m->oldest = p;
    m->newest = p;
}

static void touch(spec_parts *m, spec_part *p) {
    if (m->newest == p) return;
    lru_unlink(m, p);
    lru_push_newest(m, p);
}

static void drop_store(spec_parts *m, spec_part *p) {
    if (!p->store) return;
    m->tokens -= suffix_store_tokens(p->store);
    suffix_store_free(p->store);
    p->store = NULL;
}

/* Removes p with everything it learned (it must not be held). */
static void part_drop(spec_parts *m, spec_part *p) {
    SP_ASSERT(p->holds == 0);
    spec_part **pp = &m->buckets[p->hash & (m->n_buckets - 1)];
    while (*pp != p) pp = &(*pp)->chain;
    *pp = p->chain;
    lru_unlink(m, p);
    drop_store(m, p);
    m->n_parts--;
    free(p->salt);
    free(p);
}

void spec_parts_free(spec_parts *m) {
    if (!m) return;
    for (spec_part *p = m->newest, *nx; p; p = nx) {
        nx = p->older;
        suffix_store_free(p->store);
        free(p->salt);
        free(p);
    }
    free(m->buckets);
    free(m);
}

static spec_part *lookup(const spec_parts *m, const char *salt, uint64_t h) {
    for (spec_part *p = m->buckets[h & (m->n_buckets - 1)]; p; p = p->chain)
        if (p->hash == h && !strcmp(p->salt, salt)) return p;
    return NULL;
}

const spec_part *spec_parts_find(const spec_parts *m, const char *salt) {
    if (!m) return NULL;
    if (!salt) salt = "";
    return lookup(m, salt, salt_hash(salt));
}

spec_part *spec_parts_acquire(spec_parts *m, const char *salt) {
    if (!m) return NULL;
    if (!salt) salt = "";
    const uint64_t h = salt_hash(salt);
    spec_part *p = lookup(m, salt, h);
    if (!p) {
        if (m->n_parts >= m->max_parts) { /* room: the least recently used one not held */
            spec_part *v = m->oldest;
            while (v && v->holds) v = v->newer;
            if (!v) return NULL;
            part_drop(m, v);
        }
        p = calloc(1, sizeof(*p));
        if (!p || !(p->salt = strdup(salt))) {
            free(p);
            return NULL;
        }
        p->hash = h;
        for (int i = 0; i < SP_SPEC_N_METHODS; i++) p->prior[i] = SP_SPEC_PRIOR0;
        spec_part **b = &m->buckets[h & (m->n_buckets - 1)];
        p->chain = *b;
        *b = p;
        lru_push_newest(m, p);
        m->n_parts++;
    }
    touch(m, p);
    p->holds++;
    return p;
}

void spec_parts_release(spec_parts *m, spec_part *p) {
    (void)m;
    if (!p) return;
    SP_ASSERT(p->holds > 0);
    p->holds--;
}

int spec_parts_add(spec_parts *m, spec_part *p, const sp_token *toks, int32_t n) {
    if (!m || !p || !toks || n <= 0 || m->max_tokens == 0) return 0;
    bool created = false;
    if (!p->store) {
        if (!(p->store = suffix_store_create(m->max_tokens, m->depth))) return -1;
        created = true;
    }
    const size_t before = suffix_store_tokens(p->store);
    if (suffix_store_add(p->store, toks, n) != 0) {
        if (created) drop_store(m, p);
        return -1;
    }
    /* the store keeps at most max_tokens itself (its own oldest go first) */
    m->tokens = m->tokens - before + suffix_store_tokens(p->store);
    touch(m, p);
    /* Over the total: the least recently used partitions give up their
     * oldest sequences. p is the newest and within max_tokens alone, so
     * the others always hold enough. */
    for (spec_part *v = m->oldest, *nx; v && m->tokens > m->max_tokens; v = nx) {
        nx = v->newer;
        if (v == p || !v->store) continue;
        while (m->tokens > m->max_tokens) {
            const size_t k = suffix_store_drop_oldest(v->store);
            if (!k) break;
            m->tokens -= k;
        }
        if (suffix_store_tokens(v->store) == 0) drop_store(m, v);
        else suffix_store_shrink(v->store); /* failing leaves it valid, only larger */
    }
    SP_ASSERT(m->tokens <= m->max_tokens);
    return 0;
}

const suffix_store *spec_part_store(const spec_part *p) { return p ? p->store : NULL; }
float *spec_part_priors(spec_part *p) { return p->prior; }

void spec_part_observe(spec_part *p, sp_spec_mode m, float obs) {
    if (!p || m <= SP_SPEC_OFF || m >= SP_SPEC_N_METHODS) return;
    /* the mean of SP_SPEC_PRIOR0 and the observations while they are few,
     * then a moving average: a new partition's first measurements count
     * at once (a draft that does badly on the first sequence should keep
     * the next ones from paying its catch-up), and old ones fade */
    const int32_t n = p->prior_n[m];
    p->prior[m] += SP_MAX(1.0f / (float)(n + 2), SP_SPEC_PRIOR_RATE) * (obs - p->prior[m]);
    p->prior_n[m] = SP_MIN(n + 1, (int32_t)(1.0f / SP_SPEC_PRIOR_RATE));
}
float spec_part_prior(const spec_part *p, sp_spec_mode m) {
    return m >= 0 && m < SP_SPEC_N_METHODS ? p->prior[m] : SP_SPEC_PRIOR0;
}
const char *spec_part_salt(const spec_part *p) { return p->salt; }
int32_t spec_parts_count(const spec_parts *m) { return m ? m->n_parts : 0; }
size_t spec_parts_tokens(const spec_parts *m) { return m ? m->tokens : 0; }

size_t spec_parts_bytes(const spec_parts *m) {
    if (!m) return 0;
    size_t b = sizeof(*m) + m->n_buckets * sizeof(*m->buckets);
    for (const spec_part *p = m->newest; p; p = p->older)
        b += sizeof(*p) + strlen(p->salt) + 1 + suffix_store_bytes(p->store);
    return b;
}

int spec_parts_check(const spec_parts *m, int64_t holds, bool deep, char *err,
                        size_t errlen) {
    int32_t n = 0;
    int64_t held = 0;
    size_t tokens = 0;
    for (const spec_part *p = m->newest, *newer = NULL; p; newer = p, p = p->older) {
        if (++n > m->n_parts || p->newer != newer) {
            seterr(err, errlen, "LRU list broken at partition %d", (int)n);
            return -1;
        }
        if (p->holds < 0 || p->hash != salt_hash(p->salt) ||
            lookup(m, p->salt, p->hash) != p) {
            seterr(err, errlen, "partition \"%.40s\": holds %d, not found by its salt",
                      p->salt, (int)p->holds);
            return -1;
        }
        if (p->store && suffix_store_tokens(p->store) == 0) {
            seterr(err, errlen, "partition \"%.40s\" keeps an empty store", p->salt);
            return -1;
        }
        held += p->holds;
        tokens += suffix_store_tokens(p->store);
        if (deep && p->store && suffix_store_check(p->store, err, errlen) != 0) return -1;
        if (!p->older && m->oldest != p) {
            seterr(err, errlen, "LRU tail is not the oldest partition");
            return -1;
        }
    }
    int32_t chained = 0;
    for (uint32_t b = 0; b < m->n_buckets; b++)
        for (const spec_part *p = m->buckets[b]; p; p = p->chain)
            if (++chained > m->n_parts || (p->hash & (m->n_buckets - 1)) != b) {
                seterr(err, errlen, "hash chains broken in bucket %u", b);
                return -1;
            }
    if (n != m->n_parts || chained != m->n_parts || n > m->max_parts) {
        seterr(err, errlen, "%d partitions listed, %d chained, count %d, max %d", (int)n,
                  (int)chained, (int)m->n_parts, (int)m->max_parts);
        return -1;
    }
    if (tokens != m->tokens || tokens > m->max_tokens) {
        seterr(err, errlen, "stores hold %zu tokens, total says %zu, max %zu", tokens,
                  m->tokens, m->max_tokens);
        return -1;
    }
    if (holds >= 0 && held != holds) {
        seterr(err, errlen, "partitions held %lld times, expected %lld", (long long)held,
                  (long long)holds);
        return -1;
    }
    return 0;
}
