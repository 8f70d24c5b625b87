/* tokenizer.h: vocabularies loaded from GGUF metadata, encoding and
 * streaming decoding.
 *
 * Two tokenizer models, as named by tokenizer.ggml.model:
 *   "llama": SentencePiece BPE with scores and byte fallback (<0xNN> tokens);
 *   "gpt2":  byte-level BPE with merges, after a pre-tokenizer split chosen
 *            by tokenizer.ggml.pre (regexes run with PCRE2).
 * The results are token-for-token those of llama.cpp on the same file.
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../gguf/gguf.h"

typedef struct sp_vocab sp_vocab;

typedef enum { SP_VOCAB_SPM = 1, SP_VOCAB_BPE = 2 } sp_vocab_kind;

/* Token attributes (from tokenizer.ggml.token_type). */
typedef enum {
    SP_TOKEN_NORMAL = 1,
    SP_TOKEN_UNKNOWN = 2,
    SP_TOKEN_CONTROL = 3,
    SP_TOKEN_USER_DEFINED = 4,
    SP_TOKEN_UNUSED = 5,
    SP_TOKEN_BYTE = 6,
} sp_token_type;

/* Builds the vocabulary from g's tokenizer.* metadata. The vocabulary copies
 * what it needs: it does not reference g after returning. NULL + err on a
 * missing/invalid tokenizer or an unsupported model or pre-tokenizer name. */
sp_vocab *sp_vocab_load(const sp_gguf *g, char *err, size_t errlen);
void sp_vocab_free(sp_vocab *v);

sp_vocab_kind sp_vocab_kind_of(const sp_vocab *v);
const char *sp_vocab_pre_name(const sp_vocab *v);  /* e.g. "default", "llama-bpe" */
int32_t sp_vocab_n_tokens(const sp_vocab *v);
int32_t sp_vocab_bos(const sp_vocab *v);   /* -1 when none */
int32_t sp_vocab_eos(const sp_vocab *v);   /* -1 when none */
int32_t sp_vocab_eot(const sp_vocab *v);   /* -1 when none */
bool sp_vocab_add_bos(const sp_vocab *v);
bool sp_vocab_add_eos(const sp_vocab *v);
/* End-of-generation: EOS, EOT, EOM and <|im_end|>/<|end|>/<end_of_turn>-style
 * control tokens. */
bool sp_vocab_is_eog(const sp_vocab *v, int32_t tok);
sp_token_type sp_vocab_token_type(const sp_vocab *v, int32_t tok);
/* The stored token text (SPM "▁" and GPT-2 byte-unicode as stored). */
const char *sp_vocab_token_text(const sp_vocab *v, int32_t tok);

/* Tokenizes text[len] (any bytes; invalid UTF-8 is handled as llama.cpp
 * does). add_special: BOS/EOS as the vocabulary's add_bos/add_eos say.
 * parse_special: text of control/user-defined tokens (e.g. "<|im_end|>")
 * becomes those tokens instead of being split as plain text.
 * Returns the number of tokens; when n_max is too small returns
 * -(number needed) and out's content is unspecified. INT32_MIN if memory
 * ran out. Thread-safe for a shared vocabulary. */
int sp_tokenize(const sp_vocab *v, const char *text, size_t len, int32_t *out, int n_max,
                bool add_special, bool parse_special);

/* The most bytes of input text one token can stand for (the longest token
 * text; for byte-level BPE, in code points, one per input byte), computed
 * at load; 0 when the vocabulary gives no such bound (it has no token for
 * some bytes, which are then dropped, as llama.cpp does). A text of more
 * than n * this many bytes needs more than n tokens, so it can be refused
 * without being tokenized (sp_tokenize_bounded does; for a vocabulary
 * whose special tokens swallow the white space next to them, the ASCII
 * white space is not counted). */
int32_t sp_vocab_max_token_bytes(const sp_vocab *v);
/* The token whose stored text is exactly s[len]; -1 if none. */
int32_t sp_vocab_find(const sp_vocab *v, const char *s, size_t len);

/* A byte range [off, off + len) of a text. */
typedef struct {
    size_t off, len;
} sp_span;

/* How sp_tokenize_bounded reads special-token text. */
typedef struct {
    bool add_special;   /* as sp_tokenize's */
    bool parse_special; /* as sp_tokenize's, when spans is NULL */
    /* When spans is non-NULL (sorted, disjoint; n_spans may be 0), CONTROL
     * and UNKNOWN tokens, and the tokens listed in markup_ids whatever
     * their type, are recognized only where their text lies wholly inside
     * one span; everywhere else the text reads as with parse_special false
     * (USER_DEFINED tokens are still recognized). For a chat prompt the
     * spans are the template's markup, so message content can never forge
     * a turn: the result equals sp_tokenize(parse_special true) whenever the
     * content holds no special-token text. */
    const sp_span *spans;
    size_t n_spans;
    const int32_t *markup_ids;
    int n_markup_ids;
} sp_tok_opts;

/* Tokenizes as sp_tokenize does (same tokens), but the work is bounded by
 * n_max: a text that cannot fit in n_max tokens by its length alone (see
 * sp_vocab_max_token_bytes) is refused before any tokenizing, and
 * otherwise tokenizing stops soon after the count passes n_max, rather
 * than costing the whole text. Returns the count (0..n_max) with *out a
 * malloc'd array of it (the caller frees it; never NULL on success, even
 * for 0 tokens); or a value <= -(n_max + 1), minus a lower bound of the
 * count, with *out NULL, when the text needs more than n_max tokens;
 * INT32_MIN (and *out NULL) if memory ran out. o NULL: add_special and
 * parse_special false. Thread-safe for a shared vocabulary. */
int sp_tokenize_bounded(const sp_vocab *v, const char *text, size_t len, int n_max,
                        const sp_tok_opts *o, int32_t **out);

/* The bytes a token stands for (SPM "▁" -> ' ', <0xNN> -> that byte, GPT-2
 * byte-unicode decoded). Control tokens give "" unless render_special.
 * Returns the byte count; when len is too small returns -(count needed). */
int sp_token_to_piece(const sp_vocab *v, int32_t tok, char *buf, int len, bool render_special);

/* Streaming detokenizer: holds back the bytes of an incomplete UTF-8
 * character until the tokens that complete it arrive, so every chunk it
 * emits is valid UTF-8. Bytes that can never form a valid character are
 * emitted as U+FFFD. */
typedef struct {
    unsigned char pend[8];
    int n_pend;
} sp_detok;

static inline void sp_detok_init(sp_detok *d) { d->n_pend = 0; }
/* Appends tok's text; writes the bytes that are ready into out (at most
 * cap - 1 bytes, NUL-terminated) and returns their count, or -(needed) if
 * cap is too small (state unchanged then). 64 + 4 * longest token is always
 * enough. (needed counts the NUL: it is the smallest cap that works.) */
int sp_detok_push(const sp_vocab *v, sp_detok *d, int32_t tok, char *out, int cap);
/* Emits what is pending at the end of a stream (as U+FFFD per bad byte). */
int sp_detok_flush(sp_detok *d, char *out, int cap);

#endif
