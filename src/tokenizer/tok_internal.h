/* tok_internal.h: what the tokenizer's source files share (internal). */
#ifndef SP_TOK_INTERNAL_H
#define SP_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token attributes as a bit set, llama.cpp's llama_token_attr values: a
 * token type from the file maps to one of the first six; LSTRIP/RSTRIP are
 * set by model-specific rules and steer the special-token partition. */
enum {
    SP_ATTR_UNDEFINED = 0,
    SP_ATTR_UNKNOWN = 1 << 0,
    SP_ATTR_UNUSED = 1 << 1,
    SP_ATTR_NORMAL = 1 << 2,
    SP_ATTR_CONTROL = 1 << 3,
    SP_ATTR_USER_DEFINED = 1 << 4,
    SP_ATTR_BYTE = 1 << 5,
    SP_ATTR_LSTRIP = 1 << 7,
    SP_ATTR_RSTRIP = 1 << 8,
};

/* ---- growable buffers (all return false on allocation failure) ---- */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ivec;
bool tok_ivec_push(tok_ivec *a, int32_t x);

typedef struct {
    char *buf; /* the words back to back */
    size_t len, cap;
    size_t *end; /* end offset of word i in buf */
    size_t n, ncap;
} tok_words;
void tok_words_free(tok_words *w);

/* ---- pre-tokenizer (pretok.c) ---- */
typedef struct pretokenizer pretokenizer;
/* Compiles the regex list of a pre-tokenizer. NULL + err on failure. */
pretokenizer *tok_pretok_create(const char *const *regexes, int n, char *err, size_t errlen);
void tok_pretok_free(pretokenizer *p);
/* Splits text[len] as llama.cpp's unicode_regex_split does: each regex in
 * turn splits every piece the previous ones produced (unmatched stretches
 * stay pieces of their own); the pieces are then byte-encoded with the GPT-2
 * mapping. Appends them to *out (cleared first). false on allocation
 * failure. */
bool tok_pretok_split(const pretokenizer *p, const char *text, size_t len, tok_words *out);

/* The regex list llama.cpp uses for a tokenizer.ggml.pre name, and the
 * vocabulary flags that name implies. false if the name is unknown. */
typedef struct {
    const char *const *regexes;
    int n_regexes;
    bool ignore_merges; /* a whole pre-token that is a token is kept as is */
    bool add_bos;       /* default for add_bos when the file does not say */
    bool no_bos;        /* the BOS id defaults to none */
} pretok_info;
bool tok_pretok_lookup(const char *name, pretok_info *info);

/* ---- the vocabulary ---- */
struct sp_vocab {
    sp_vocab_kind kind;
    char pre_name[64];
    int32_t n_tokens;

    char *text;         /* token texts, NUL-terminated, back to back */
    uint32_t *text_off; /* [n_tokens] */
    uint32_t *text_len; /* [n_tokens] */
    float *scores;      /* [n_tokens] (0 when the file has none) */
    uint16_t *attr;     /* [n_tokens] SP_ATTR_* bits */

    /* text -> id, open addressing, -1 = empty slot */
    int32_t *hash;
    uint64_t hash_mask;

    /* BPE merges "left right" -> rank (its index in the list) */
    char *merge_text;
    uint32_t *merge_off, *merge_len;
    int32_t n_merges;
    int32_t *merge_hash;
    uint64_t merge_mask;

    int32_t bos, eos, eot, eom, unk, pad;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    uint8_t *eog; /* [n_tokens] 1 = end of generation */

    /* CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first */
    int32_t *special;
    int32_t n_special;

    int32_t byte_tok[256]; /* SPM byte fallback: token of each byte, -1 none */

    /* token_to_piece with render_special = true, precomputed */
    char *piece;
    uint32_t *piece_off, *piece_len;

    pretokenizer *pretok; /* BPE only */

    /* Work bounds (vocab.c, set at load; see sp_vocab_max_token_bytes). */
    uint32_t max_token_bytes; /* 0: no bound */
    bool has_strip;           /* some token has LSTRIP or RSTRIP */
    /* SPM: the adjacent symbol pairs of every token text (symbols as
     * tok_split_symbols cuts them), as a bit set indexed by a hash: a
     * clear bit means no merge can ever join that pair, so the text can be
     * cut there and each side encoded alone with the same result. A hash
     * collision only makes a place look unsafe. NULL: never cut. */
    uint64_t *pair_bits;
    uint64_t pair_mask; /* number of bits - 1 */
};

uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t n);
#define SP_TOK_HASH_SEED 0xcbf29ce484222325ull
/* id of the token whose text is s[n], -1 if none. */
int32_t tok_lookup(const sp_vocab *v, const char *s, size_t n);
/* rank of the merge (left, right), -1 if none. */
int32_t tok_merge_rank(const sp_vocab *v, const char *l, size_t ln, const char *r, size_t rn);

/* Encoders: append the tokens of one raw-text fragment to out. The BPE
 * encoder stops after the word that takes out->n past limit (SIZE_MAX:
 * never); the SPM one encodes all it is given (tokenize.c cuts long SPM
 * text into chunks, see pair_bits). false on allocation failure. */
bool tok_spm_encode(const sp_vocab *v, const char *text, size_t len, tok_ivec *out);
bool tok_bpe_encode(const sp_vocab *v, const char *text, size_t len, tok_ivec *out,
                       size_t limit);
/* SPM chunks end at the first safe cut after this many bytes (tokenize.c;
 * 2048). Tests set SIZE_MAX, never to cut, to check that cutting changes
 * nothing; nothing else writes it. */
extern size_t tok_spm_cut_after;
/* Whether a merge could join the adjacent symbols a[la] and b[lb] (true
 * when the vocabulary has no pair set). */
bool tok_pair_may_merge(const sp_vocab *v, const char *a, size_t la, const char *b, size_t lb);

/* A symbol of the SPM/BPE merge loops: bytes text[off, off + n) in a
 * doubly linked list (prev/next indices, -1 at the ends); n = 0 once it has
 * been merged into its left neighbour. */
typedef struct {
    int32_t prev, next;
    uint32_t off, n;
} tok_sym;

/* Splits text[len] into one symbol per UTF-8 character, cut by the lead
 * byte only (as llama.cpp: an invalid byte is a symbol of its own, a
 * truncated sequence at the end is shortened), linked in order. s must hold
 * len entries; returns the count. */
int32_t tok_split_symbols(const char *text, size_t len, tok_sym *s);

/* A candidate merge of the adjacent symbols left and right, for the
 * SPM and BPE merge loops: the smallest key comes out first, ties by the
 * leftmost pair (llama.cpp's order). SPM keys are -score, BPE keys the merge
 * rank. size is the merged byte length, which tells stale entries apart. */
typedef struct {
    int32_t left, right;
    float key;
    uint32_t size;
} bigram;

typedef struct {
    bigram *v;
    size_t n, cap;
} bigram_heap;

/* false when the heap cannot grow (out of memory) */
bool bigram_push(bigram_heap *h, bigram b);
/* the first entry; the heap must not be empty */
bigram bigram_pop(bigram_heap *h);

#endif
