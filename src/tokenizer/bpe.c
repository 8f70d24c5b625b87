/* bpe.c: byte-level BPE encoding (llama.cpp's llm_tokenizer_bpe).
 *
 * The pre-tokenizer splits the text into byte-encoded words; each word
 * starts as one symbol per character and the adjacent pair with the lowest
 * merge rank is merged until none is left (ties: leftmost), with a heap of
 * candidate pairs over a linked list of symbols. The symbols are then looked
 * up; one that is not a token goes out as the tokens of its single bytes
 * (those that exist), as llama.cpp does.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"



typedef struct {
    tok_sym *s;
    size_t cap;
    bigram_heap h;
} work;

static bool try_add(const sp_vocab *v, const char *w, work *k, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const tok_sym *a = &k->s[l], *b = &k->s[r];
    int32_t rank = tok_merge_rank(v, w + a->off, a->n, w + b->off, b->n);
    if (rank < 0) return true;
    bigram bg = {l, r, (float)rank, a->n + b->n}; /* ranks < 2^24 are exact */
    return bigram_push(&k->h, bg);
}

static bool emit(const sp_vocab *v, const char *t, size_t n, tok_ivec *out) {
    int32_t id = tok_lookup(v, t, n);
    if (id >= 0) return tok_ivec_push(out, id);
    for (size_t j = 0; j < n; j++) {
        id = tok_lookup(v, t + j, 1);
        if (id >= 0 && !tok_ivec_push(out, id)) return false;
    }
    return true;
}

static bool encode_word(const sp_vocab *v, const char *w, size_t len, work *k, tok_ivec *out) {
    if (len == 0) return true;
    if (v->ignore_merges && tok_lookup(v, w, len) >= 0) return emit(v, w, len, out);
    if (len > k->cap) {
        tok_sym *ns = realloc(k->s, len * sizeof(*ns));
        if (!ns) return false;
        k->s = ns;
        k->cap = len;
    }
    tok_sym *s = k->s;
    int32_t n = tok_split_symbols(w, len, s);
    k->h.n = 0;
    for (int32_t i = 1; i < n; i++)
        if (!try_add(v, w, k, i - 1, i)) return false;
    while (k->h.n) {
        bigram b = bigram_pop(&k->h);
        tok_sym *l = &s[b.left], *r = &s[b.right];
        /* stale unless both sides are what they were when queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if (!try_add(v, w, k, l->prev, b.left) || !try_add(v, w, k, b.left, l->next)) return false;
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (s[i].n && !emit(v, w + s[i].off, s[i].n, out)) return false;
    return true;
}

bool tok_bpe_encode(const sp_vocab *v, const char *text, size_t len, tok_ivec *out,
                       size_t limit) {
    tok_words words = {0};
    work k = {0};
    /* The split runs over the whole fragment (the regexes give no place
     * where a split of a prefix is sure to agree with the whole's); the
     * caller's byte bound keeps the fragment in proportion to the limit,
     * and the merges, the costly part, stop at the limit. */
    bool ok = tok_pretok_split(v->pretok, text, len, &words);
    size_t start = 0;
    for (size_t i = 0; ok && i < words.n && out->n <= limit; i++) {
        ok = encode_word(v, words.buf + start, words.end[i] - start, &k, out);
        start = words.end[i];
    }
    tok_words_free(&words);
    free(k.s);
    free(k.h.v);
    return ok;
}
