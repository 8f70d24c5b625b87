/* spm.c: SentencePiece-BPE encoding (llama.cpp's llm_tokenizer_spm).
 *
 * The text (spaces already escaped as U+2581) starts as one symbol per
 * UTF-8 character (split by lead byte only, so invalid bytes are symbols of
 * their own). Repeatedly the adjacent pair whose concatenation is the
 * highest-scoring token is merged (ties: leftmost), using a heap of
 * candidate pairs over a linked list of symbols; a heap entry is stale once
 * either side has changed size. Symbols left that are not tokens are
 * emitted byte by byte as <0xNN> tokens (or UNK).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"



static bool try_add(const sp_vocab *v, const char *text, const tok_sym *s, bigram_heap *h, int32_t l,
                    int32_t r) {
    if (l < 0 || r < 0) return true;
    int32_t id = tok_lookup(v, text + s[l].off, s[l].n + s[r].n);
    if (id < 0) return true;
    bigram b = {l, r, -v->scores[id], s[l].n + s[r].n}; /* best score first */
    return bigram_push(h, b);
}

bool tok_spm_encode(const sp_vocab *v, const char *text, size_t len, tok_ivec *out) {
    bool ok = false;
    bigram_heap h = {0};
    tok_sym *s = malloc((len + 1) * sizeof(*s));
    if (!s) return false;
    int32_t n = tok_split_symbols(text, len, s);
    for (int32_t i = 1; i < n; i++)
        if (!try_add(v, text, s, &h, i - 1, i)) goto done;
    while (h.n) {
        bigram b = bigram_pop(&h);
        tok_sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if (!try_add(v, text, s, &h, l->prev, b.left) || !try_add(v, text, s, &h, b.left, l->next))
            goto done;
    }
    /* Every merged symbol is a token (pairs are only queued when they are),
     * so llama.cpp's re-segmentation through its merge history reduces to
     * this lookup; what is left unmerged and unknown goes out as bytes. */
    for (int32_t i = n ? 0 : -1; i >= 0; i = s[i].next) {
        int32_t id = tok_lookup(v, text + s[i].off, s[i].n);
        if (id >= 0) {
            if (!tok_ivec_push(out, id)) goto done;
            continue;
        }
        for (uint32_t j = 0; j < s[i].n; j++) {
            int32_t bt = v->byte_tok[(unsigned char)text[s[i].off + j]];
            if (bt < 0) bt = v->unk;
            if (bt >= 0 && !tok_ivec_push(out, bt)) goto done;
        }
    }
    ok = true;
done:
    free(s);
    free(h.v);
    return ok;
}
