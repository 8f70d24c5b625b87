/* trie.c: the vocabulary's token byte strings as a trie (grammar.h), so a
 * mask walks each shared prefix once against the grammar's stacks and
 * skips every subtree whose first byte no stack takes. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const sp_token_trie *t = ctx;
    sp_token x = *(const sp_token *)a, y = *(const sp_token *)b;
    uint32_t lx = t->piece_off[x + 1] - t->piece_off[x], ly = t->piece_off[y + 1] - t->piece_off[y];
    int c = memcmp(t->piece + t->piece_off[x], t->piece + t->piece_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static uint32_t plen(const sp_token_trie *t, sp_token x) { return t->piece_off[x + 1] - t->piece_off[x]; }

/* Node ni covers toks[lo, hi), which share their first depth bytes. */
static void build(sp_token_trie *t, int32_t ni, int32_t lo, int32_t hi, int32_t depth) {
    gr_tnode *nd = &t->node[ni];
    nd->tok = (uint32_t)lo;
    int32_t i = lo;
    while (i < hi && plen(t, t->toks[i]) == (uint32_t)depth) i++;
    nd->n_tok = (uint16_t)(i - lo);
    if (depth > t->max_depth) t->max_depth = depth;
    int32_t n_child = 0;
    for (int32_t j = i; j < hi;) {
        unsigned char b = (unsigned char)t->piece[t->piece_off[t->toks[j]] + depth];
        while (j < hi && (unsigned char)t->piece[t->piece_off[t->toks[j]] + depth] == b) j++;
        n_child++;
    }
    const int32_t first = t->n_node;
    t->n_node += n_child;
    t->node[ni].child = (uint32_t)first;
    t->node[ni].n_child = (uint16_t)n_child;
    int32_t c = first;
    for (int32_t j = i; j < hi; c++) {
        unsigned char b = (unsigned char)t->piece[t->piece_off[t->toks[j]] + depth];
        int32_t k = j;
        while (k < hi && (unsigned char)t->piece[t->piece_off[t->toks[k]] + depth] == b) k++;
        t->node[c].byte = b;
        build(t, c, j, k, depth + 1);
        j = k;
    }
}

sp_token_trie *sp_token_trie_create(const sp_vocab *v, char *err, size_t errlen) {
    sp_token_trie *t = calloc(1, sizeof(*t));
    if (!t) goto oom;
    const int32_t V = sp_vocab_n_tokens(v);
    t->v = v;
    t->n_vocab = V;
    t->piece_off = malloc((size_t)(V + 1) * sizeof(uint32_t));
    t->toks = malloc((size_t)SP_MAX(V, 1) * sizeof(sp_token));
    t->eog = malloc((size_t)SP_MAX(V, 1) * sizeof(sp_token));
    if (!t->piece_off || !t->toks || !t->eog) goto oom;
    size_t total = 0;
    for (int32_t i = 0; i < V; i++) {
        int n = sp_token_to_piece(v, i, NULL, 0, false);
        t->piece_off[i] = (uint32_t)total;
        total += (size_t)(n < 0 ? -n : n);
        if (sp_vocab_is_eog(v, i)) t->eog[t->n_eog++] = i;
    }
    t->piece_off[V] = (uint32_t)total;
    t->piece = malloc(total + 1);
    t->node = calloc(total + 1, sizeof(gr_tnode));
    if (!t->piece || !t->node) goto oom;
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        uint32_t l = plen(t, i);
        if (l) sp_token_to_piece(v, i, t->piece + t->piece_off[i], (int)l, false);
        if (l) t->toks[n++] = i;
    }
    qsort_r(t->toks, (size_t)n, sizeof(sp_token), cmp_piece, t);
    t->n_node = 1;
    build(t, 0, 0, n, 0);
    return t;
oom:
    seterr(err, errlen, "token trie: out of memory");
    sp_token_trie_free(t);
    return NULL;
}

void sp_token_trie_free(sp_token_trie *t) {
    if (!t) return;
    free(t->node);
    free(t->toks);
    free(t->eog);
    free(t->piece_off);
    free(t->piece);
    free(t);
}
