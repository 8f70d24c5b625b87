/* merge.c: what the SPM and BPE merge loops share: splitting text into a
 * linked list of symbols, and the binary heap of candidate merges. */
#include <stdlib.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

static inline bool before(const bigram *a, const bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

bool bigram_push(bigram_heap *h, bigram b) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        bigram *nv = realloc(h->v, nc * sizeof(*nv));
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

bigram bigram_pop(bigram_heap *h) {
    bigram top = h->v[0], last = h->v[--h->n];
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

int32_t tok_split_symbols(const char *text, size_t len, tok_sym *s) {
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t c = tok_utf8_lead_len((unsigned char)text[off]);
        if (c > len - off) c = len - off;
        s[n].off = (uint32_t)off;
        s[n].n = (uint32_t)c;
        s[n].prev = n - 1;
        off += c;
        s[n].next = off == len ? -1 : n + 1;
        n++;
    }
    return n;
}
