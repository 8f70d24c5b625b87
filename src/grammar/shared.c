/* shared.c: the masks a compiled grammar's matchers share, by the content
 * of the state they were computed for. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

/* ---- the grammar's shared masks ----
 * Masks by state content, for every matcher of a grammar (each request gets
 * its own matcher; requests with the same schema meet the same states), up
 * to GR_SHARED_BYTES of masks; then no more are added. Under the grammar's
 * mutex: a compiled grammar may be used from any thread. */

struct gr_shared {
    pthread_mutex_t mu;
    uint64_t (*key)[2];          /* [cap] 0,0: empty */
    int32_t *count;              /* [cap] */
    uint32_t *bits;              /* [cap][words] */
    int32_t cap, n, words;
};

static struct gr_shared *shared_of(const sp_grammar *g, int32_t words, bool make) {
    sp_grammar *gm = (sp_grammar *)g;
    struct gr_shared *s = __atomic_load_n(&gm->shared, __ATOMIC_ACQUIRE);
    if (s || !make) return s;
    pthread_mutex_lock(&gm->shared_mu);
    s = gm->shared;
    if (!s && (s = calloc(1, sizeof(*s)))) {
        s->words = words;
        s->cap = 1;
        while ((size_t)s->cap * 2 * (size_t)words * 4 <= GR_SHARED_BYTES && s->cap < (1 << 16)) s->cap *= 2;
        s->key = calloc((size_t)s->cap, sizeof(*s->key));
        s->count = calloc((size_t)s->cap, sizeof(int32_t));
        s->bits = malloc((size_t)s->cap * (size_t)words * 4);
        pthread_mutex_init(&s->mu, NULL);
        if (!s->key || !s->count || !s->bits) {
            free(s->key), free(s->count), free(s->bits), free(s);
            s = NULL;
        } else {
            __atomic_store_n(&gm->shared, s, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&gm->shared_mu);
    return s;
}

int32_t gr_shared_get(const sp_grammar *g, const uint64_t key[2], uint32_t *bits, int32_t words) {
    struct gr_shared *s = shared_of(g, words, false);
    if (!s || s->words != words) return -1;
    int32_t r = -1;
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = (uint32_t)key[0] & (uint32_t)(s->cap - 1);; i = (i + 1) & (uint32_t)(s->cap - 1)) {
        if (!s->key[i][0] && !s->key[i][1]) break;
        if (s->key[i][0] == key[0] && s->key[i][1] == key[1]) {
            memcpy(bits, s->bits + (size_t)i * words, (size_t)words * 4);
            r = s->count[i];
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

void gr_shared_put(const sp_grammar *g, const uint64_t key[2], const uint32_t *bits, int32_t words,
                   int32_t count) {
    struct gr_shared *s = shared_of(g, words, true);
    if (!s || s->words != words || (!key[0] && !key[1])) return;
    pthread_mutex_lock(&s->mu);
    if (s->n * 4 < s->cap * 3) { /* 3/4 full at most: then the table keeps what it has */
        uint32_t i = (uint32_t)key[0] & (uint32_t)(s->cap - 1);
        while ((s->key[i][0] || s->key[i][1]) && !(s->key[i][0] == key[0] && s->key[i][1] == key[1]))
            i = (i + 1) & (uint32_t)(s->cap - 1);
        if (!s->key[i][0] && !s->key[i][1]) s->n++;
        s->key[i][0] = key[0], s->key[i][1] = key[1];
        s->count[i] = count;
        memcpy(s->bits + (size_t)i * words, bits, (size_t)words * 4);
    }
    pthread_mutex_unlock(&s->mu);
}

void gr_shared_free(struct gr_shared *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    free(s->key), free(s->count), free(s->bits), free(s);
}
