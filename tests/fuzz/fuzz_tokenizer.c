/* fuzz_tokenizer.c: encoding and decoding with both tokenizer types.
 *
 * Input: byte 0 picks the vocabulary (bit 0: SentencePiece or byte-level
 * BPE), add_special (bit 1), parse_special (bit 2) and whether the rest is
 * also decoded as raw token ids (bit 3); the rest is the text.
 *
 * Checked: the size query agrees with the real call, a too-small buffer
 * gets -(needed), every id is in the vocabulary, tokenizing is
 * deterministic, and detokenizing (streaming and piece by piece) keeps its
 * promises (see fz_detok_stream). Arbitrary ids, in and out of range, go
 * through sp_token_to_piece and the streaming detokenizer too.
 *
 * Bounded tokenizing (sp_tokenize_bounded) must give sp_tokenize's tokens
 * whenever they fit, and otherwise a refusal whose lower bound of the count
 * holds (the byte bound and the early stop are never wrong); special-token
 * spans over the whole text must equal parse_special, no spans must equal
 * plain text; and SPM text cut into chunks every few bytes must give the
 * tokens of one uncut merge loop. */
#include "fuzz_common.h"
#include "tokenizer/tok_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_load_vocabs();
    return 0;
}

/* Texts longer than this only slow the fuzzer down (the merge loops are
 * superlinear in a word's length) without reaching new code. */
#define FZT_MAX_TEXT 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_load_vocabs();
    if (size < 1) return 0;
    uint8_t mode = data[0];
    const sp_vocab *v = fz_vocabs[mode & 1];
    if (!v) v = fz_vocabs[!(mode & 1)];
    if (!v) return 0;
    bool add_special = mode & 2, parse_special = mode & 4, raw_ids = mode & 8;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (len > FZT_MAX_TEXT) len = FZT_MAX_TEXT;
    int32_t nv = sp_vocab_n_tokens(v);

    int need = sp_tokenize(v, text, len, NULL, 0, add_special, parse_special);
    FZ_ASSERT(need != INT32_MIN);
    if (need < 0) need = -need;
    int32_t *toks = malloc((size_t)(need + 1) * sizeof(int32_t));
    if (!toks) return 0;
    int n = sp_tokenize(v, text, len, toks, need, add_special, parse_special);
    FZ_ASSERT(n == need);
    for (int i = 0; i < n; i++) FZ_ASSERT(toks[i] >= 0 && toks[i] < nv);
    if (n > 1) { /* one short: -(needed), as documented */
        int32_t *few = malloc((size_t)(n - 1) * sizeof(int32_t));
        if (few) {
            FZ_ASSERT(sp_tokenize(v, text, len, few, n - 1, add_special, parse_special) == -n);
            free(few);
        }
    }
    /* deterministic: a second run gives the same ids */
    int32_t *again = malloc((size_t)(n + 1) * sizeof(int32_t));
    if (again) {
        FZ_ASSERT(sp_tokenize(v, text, len, again, n, add_special, parse_special) == n);
        FZ_ASSERT(memcmp(again, toks, (size_t)n * sizeof(int32_t)) == 0);
        free(again);
    }

    /* bounded: the same tokens when they fit; else a true lower bound */
    int32_t *bt;
    sp_tok_opts bo = {.add_special = add_special, .parse_special = parse_special};
    int bn = sp_tokenize_bounded(v, text, len, n, &bo, &bt);
    FZ_ASSERT(bn == n && bt && memcmp(bt, toks, (size_t)n * sizeof(int32_t)) == 0);
    free(bt);
    int small = len ? (unsigned char)text[0] % 64 : 0;
    bn = sp_tokenize_bounded(v, text, len, small, &bo, &bt);
    if (n <= small) {
        FZ_ASSERT(bn == n && bt && memcmp(bt, toks, (size_t)n * sizeof(int32_t)) == 0);
        free(bt);
    } else {
        FZ_ASSERT(bn < -small && -bn <= n && !bt);
    }
    /* spans: the whole text is parse_special, none is plain text */
    sp_span all = {0, len};
    sp_tok_opts so = {.add_special = add_special, .spans = &all, .n_spans = 1};
    bn = sp_tokenize_bounded(v, text, len, 1 << 20, &so, &bt);
    int32_t *ref = malloc((size_t)(n + 1 + len + 8) * sizeof(int32_t));
    if (ref && bn >= 0) {
        int rn = sp_tokenize(v, text, len, ref, n + (int)len + 8, add_special, true);
        FZ_ASSERT(rn == bn && memcmp(ref, bt, (size_t)rn * sizeof(int32_t)) == 0);
    }
    free(bt);
    so.n_spans = 0;
    bn = sp_tokenize_bounded(v, text, len, 1 << 20, &so, &bt);
    if (ref && bn >= 0) {
        int rn = sp_tokenize(v, text, len, ref, n + (int)len + 8, add_special, false);
        FZ_ASSERT(rn == bn && memcmp(ref, bt, (size_t)rn * sizeof(int32_t)) == 0);
    }
    free(bt);
    free(ref);
    /* SPM chunks: cut as often as the pairs allow, then never */
    if (sp_vocab_kind_of(v) == SP_VOCAB_SPM) {
        size_t keep = tok_spm_cut_after;
        int32_t *c1, *c2;
        tok_spm_cut_after = 1 + (size_t)(mode >> 5);
        int n1 = sp_tokenize_bounded(v, text, len, 1 << 20, &bo, &c1);
        tok_spm_cut_after = SIZE_MAX;
        int n2 = sp_tokenize_bounded(v, text, len, 1 << 20, &bo, &c2);
        tok_spm_cut_after = keep;
        FZ_ASSERT(n1 == n2 && (n1 < 0 || memcmp(c1, c2, (size_t)n1 * sizeof(int32_t)) == 0));
        free(c1);
        free(c2);
    }

    /* decode what was encoded, piece by piece and streaming */
    char piece[1024];
    for (int i = 0; i < n; i++) {
        int k = sp_token_to_piece(v, toks[i], piece, sizeof(piece), (mode & 16) != 0);
        FZ_ASSERT(k >= 0);
        int k0 = sp_token_to_piece(v, toks[i], piece, 0, (mode & 16) != 0);
        FZ_ASSERT(k0 == -k || (k == 0 && k0 == 0));
    }
    fz_detok_stream(v, toks, (size_t)n);
    free(toks);

    if (raw_ids && len >= 4) { /* the text's bytes as ids, any value */
        size_t m = len / 4;
        int32_t *ids = malloc(m * sizeof(int32_t));
        if (!ids) return 0;
        memcpy(ids, text, m * sizeof(int32_t));
        /* mostly in range, so the decoder sees real pieces; some not */
        for (size_t i = 0; i < m; i++)
            if (!(ids[i] & 0x40000000)) ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)nv);
        for (size_t i = 0; i < m; i++) {
            int k = sp_token_to_piece(v, ids[i], piece, sizeof(piece), true);
            FZ_ASSERT(k >= 0);
        }
        fz_detok_stream(v, ids, m);
        free(ids);
    }
    return 0;
}
