/* bigram.c: the binary heap of candidate merges shared by spm.c and bpe.c. */
#include <stdlib.h>

#include "tok_internal.h"

static inline bool before(const sp_bigram *a, const sp_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

bool sp_bigram_push(sp_bigram_heap *h, sp_bigram b) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        sp_bigram *nv = realloc(h->v, nc * sizeof(*nv));
        if (!nv) return false;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return true;
}

sp_bigram sp_bigram_pop(sp_bigram_heap *h) {
    sp_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}
