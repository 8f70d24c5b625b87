/* specula.h: the public C API of Specula.
 *
 * Ownership model (as in whisper.h's _with_state):
 *   sp_model    the loaded GGUF: weights memory-mapped read-only, the
 *               vocabulary and hyperparameters. Immutable after load; one
 *               model may be shared by any number of contexts and threads.
 *   sp_context  per-engine compute state over one model: the KV store of
 *               its sequences, scratch buffers sized at creation, a thread
 *               pool. A context is used by one thread at a time.
 *   sp_sampler  per-request sampling state (parameters, seed, history).
 *
 * Errors: functions that can fail take (char *err, size_t errlen) and
 * return NULL or a negative status with a message in err. Nothing here
 * exits or prints except where documented.
 */
#ifndef SPECULA_H
#define SPECULA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPECULA_VERSION "0.1.0"

typedef int32_t sp_token;
typedef struct sp_model sp_model;
typedef struct sp_context sp_context;
typedef struct sp_sampler sp_sampler;
typedef struct sp_vocab sp_vocab;

/* ---- status codes --------------------------------------------------------- */

/* What a failing call returns (negative), beside its message in err. One
 * code per way a caller can react: the server maps each to an HTTP status
 * and an OpenAI error type in one table (src/server). */
typedef enum {
    SP_OK = 0,
    SP_ERR_INVALID = -1,     /* an argument or request field is invalid */
    SP_ERR_CONTEXT = -2,     /* prompt (+ max_tokens) does not fit the context */
    SP_ERR_NOMEM = -3,       /* out of memory */
    SP_ERR_BUSY = -4,        /* a queue or pool is full: retry later */
    SP_ERR_CANCELLED = -5,   /* the request was cancelled */
    SP_ERR_UNSUPPORTED = -6, /* valid, but this build or model cannot do it */
    SP_ERR_IO = -7,          /* a file cannot be read, or is malformed */
    SP_ERR_NOT_FOUND = -8,   /* unknown id or name */
    SP_ERR_INTERNAL = -9,    /* a broken invariant (a bug) */
    SP_ERR_GRAMMAR = -10,    /* the request's grammar cannot be used: it does not compile,
                                no token can begin it, or it went over a budget */
} sp_status;

/* "ok", "invalid", "context", "nomem", "busy", "cancelled", "unsupported",
 * "io", "not_found", "internal", "grammar"; "unknown" for anything else.
 * Static. */
const char *sp_status_str(int status);

/* ---- model --------------------------------------------------------------- */

typedef struct {
    /* Load the metadata and the tokenizer only: any architecture (the
     * tokenizer does not depend on it, as llama.cpp's vocab-only mode), no
     * hyperparameters read, no weights validated. The load still fails when
     * the file has no tokenizer Specula implements. Such a model can
     * tokenize, be described and listed, but not run: sp_context_create and
     * sp_engine_create on it fail. */
    bool vocab_only;
    /* As vocab_only, and the load succeeds even without a usable tokenizer:
     * sp_model_get_vocab then returns NULL (sp_model_print_info says why).
     * Only for describing a file (`specula info`). */
    bool meta_only;
    /* Keep every matrix in the file's layout. By default the CPU's kernel
     * level may repack some quantized types once at load into a layout of
     * its own (AVX-512: Q8_0 and Q4_0), copying them out of the mapping:
     * the same results bit for bit, faster passes, a load-time cost and
     * memory of the copy (sp_model_info.repacked_bytes, repack_s). The
     * environment variable SPECULA_REPACK=0 does the same. */
    bool no_repack;
} sp_model_params;

sp_model_params sp_model_default_params(void);

/* Loads a GGUF model (architectures: see sp_arch_names()). Returns NULL and
 * a message naming the problem (missing tensor, wrong shape, unsupported
 * type or architecture, corrupt file) on failure; with vocab_only or
 * meta_only an unsupported architecture is not a failure. The caller owns
 * the model and frees it with sp_model_free after every context using it is
 * freed. */
sp_model *sp_model_load(const char *path, sp_model_params params, char *err, size_t errlen);
void sp_model_free(sp_model *m);
/* Whether this build can run the model's architecture (false for a model
 * loaded vocab_only or meta_only from a file of another architecture). A
 * full load of such a file fails with "architecture 'X' is not supported". */
bool sp_model_arch_supported(const sp_model *m);

/* Hyperparameters, as read from the file (all 0 but arch, name and n_vocab
 * for a model loaded vocab_only or meta_only). */
typedef struct {
    const char *arch;    /* general.architecture ("llama", "qwen2", ...; "" if absent) */
    const char *name;    /* general.name or "" */
    int32_t n_vocab;     /* 0 when there is no vocabulary (meta_only) */
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    bool rope_freq_factors; /* llama3-style per-frequency factors present */
    float norm_eps;
    bool tied_output;       /* output head shares token_embd */
    uint64_t n_params;
    uint64_t weight_bytes;  /* bytes of all weights as stored */
    uint64_t tok_embd_bytes; /* of which the token embedding table */
    uint64_t repacked_bytes; /* weights repacked at load (sp_model_params.no_repack) */
    double repack_s;         /* seconds the repacking took */
    int32_t n_rot;           /* dimensions of each head RoPE rotates (head_dim, or fewer) */
    int32_t n_swa;           /* sliding window of the sliding layers, 0 = none */
    int32_t n_swa_layers;    /* layers that attend through the window (0 .. n_layer) */
    int32_t n_nope_layers;   /* layers without RoPE */
    int32_t n_expert;        /* experts of each mixture-of-experts FFN, 0 = a dense model */
    int32_t n_expert_used;   /* experts each token is routed to (k) */
    int32_t n_ff_exp;        /* an expert's hidden size */
    uint64_t expert_bytes;   /* of weight_bytes, the experts' (a token reads n_expert_used / n_expert of them) */
} sp_model_info;

const sp_model_info *sp_model_get_info(const sp_model *m);
/* A string metadata value (e.g. "tokenizer.chat_template"): copies up to
 * len - 1 bytes and a NUL into buf (buf may be NULL to ask the length) and
 * returns the full length, or -1 when the key is absent or not a string. */
int sp_model_meta_str(const sp_model *m, const char *key, char *buf, size_t len);
/* Every metadata key, in file order (as llama.h's llama_model_meta_*): the
 * count, then the key and a printable value of entry i, as `specula info -v`
 * shows it (strings quoted and escaped, cut after 60 characters: for a
 * string's whole value use sp_model_meta_str; numbers in decimal; arrays
 * abbreviated as [string x 64000: "<unk>", "<s>", ...]; under 1 KiB). Both
 * copy up to len - 1 bytes and a NUL into buf (buf may be NULL to ask the
 * length) and return the full length of that text, or -1 when i is out of
 * range. */
int32_t sp_model_meta_count(const sp_model *m);
int sp_model_meta_key_by_index(const sp_model *m, int32_t i, char *buf, size_t len);
int sp_model_meta_val_str_by_index(const sp_model *m, int32_t i, char *buf, size_t len);

/* The tensor directory, in file order. The strings live as long as the
 * model. */
typedef struct {
    const char *name;
    const char *type; /* "f32", "f16", "q4_k", ... (as `specula info` prints them) */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ne[0] innermost; unused dimensions 1 */
    uint64_t nbytes;
} sp_tensor_desc;
int64_t sp_model_n_tensors(const sp_model *m);
/* 0 and *out filled, or -1 when i is out of range. */
int sp_model_tensor_desc(const sp_model *m, int64_t i, sp_tensor_desc *out);

/* The vocabulary (valid for the model's life); NULL only for a model loaded
 * meta_only from a file without a usable tokenizer. */
const sp_vocab *sp_model_get_vocab(const sp_model *m);
/* A comma-separated list of supported architecture names. */
const char *sp_arch_names(void);
/* Prints a description (architecture, tokenizer, hyperparameters, tensor
 * types and sizes, memory needed for a context of n_ctx tokens) to f; for a
 * model loaded vocab_only or meta_only, what the file says of these. */
void sp_model_print_info(const sp_model *m, int n_ctx, void *file /* FILE* */);

/* ---- tokenizer ------------------------------------------------------------
 *
 * A vocabulary comes with a model (sp_model_get_vocab); to tokenize only,
 * load the file with sp_model_params.vocab_only, which accepts any
 * architecture. Two tokenizer types, as named by tokenizer.ggml.model:
 *   "llama": SentencePiece BPE with scores and byte fallback (<0xNN> tokens);
 *   "gpt2":  byte-level BPE with merges, after the pre-tokenizer split that
 *            tokenizer.ggml.pre names (as llama.cpp, "default" when absent).
 * Loading refuses, with a message naming it, a tokenizer type or a
 * pre-tokenizer this build does not implement. The results are token for
 * token those of llama.cpp on the same file. Every function here is
 * thread-safe for a shared vocabulary; token ids outside [0, n_tokens) are
 * accepted everywhere and answered as documented. */

typedef enum { SP_VOCAB_SPM = 1, SP_VOCAB_BPE = 2 } sp_vocab_kind;

/* Token types (tokenizer.ggml.token_type); 0 for an undefined type. */
typedef enum {
    SP_TOKEN_NORMAL = 1,
    SP_TOKEN_UNKNOWN = 2,
    SP_TOKEN_CONTROL = 3,
    SP_TOKEN_USER_DEFINED = 4,
    SP_TOKEN_UNUSED = 5,
    SP_TOKEN_BYTE = 6,
} sp_token_type;

sp_vocab_kind sp_vocab_kind_of(const sp_vocab *v);
/* The pre-tokenizer's name, e.g. "gpt-2", "llama-bpe"; "default" for SPM.
 * Static for the vocabulary's life. */
const char *sp_vocab_pre_name(const sp_vocab *v);
int32_t sp_vocab_n_tokens(const sp_vocab *v);
sp_token sp_vocab_bos(const sp_vocab *v); /* -1 when none */
sp_token sp_vocab_eos(const sp_vocab *v); /* -1 when none */
sp_token sp_vocab_eot(const sp_vocab *v); /* -1 when none */
/* Whether sp_tokenize's add_special adds BOS / EOS. */
bool sp_vocab_add_bos(const sp_vocab *v);
bool sp_vocab_add_eos(const sp_vocab *v);
/* End of generation: EOS, EOT, EOM and <|im_end|>/<|end|>/<end_of_turn>-
 * style control tokens. false for an id out of range. */
bool sp_vocab_is_eog(const sp_vocab *v, sp_token tok);
/* 0 for an id out of range or a token whose type the file leaves undefined. */
sp_token_type sp_vocab_token_type(const sp_vocab *v, sp_token tok);
/* The stored token text (SPM "▁" and GPT-2 byte-unicode as stored),
 * NUL-terminated, valid for the vocabulary's life; NULL out of range. */
const char *sp_vocab_token_text(const sp_vocab *v, sp_token tok);
/* The token whose stored text is exactly s[len]; -1 if none (or s NULL). */
sp_token sp_vocab_find(const sp_vocab *v, const char *s, size_t len);
/* The most bytes of input text one token can stand for (the longest token
 * text; for byte-level BPE, in code points, one per input byte), computed
 * at load; 0 when the vocabulary gives no such bound (it has no token for
 * some bytes, which are then dropped, as llama.cpp does). A text of more
 * than n * this many bytes needs more than n tokens, so it can be refused
 * without being tokenized (sp_tokenize_bounded does; for a vocabulary whose
 * special tokens swallow the white space next to them, the ASCII white space
 * is not counted). */
int32_t sp_vocab_max_token_bytes(const sp_vocab *v);

/* What sp_tokenize and sp_tokenize_bounded return when they fail (out of
 * memory, or more than INT32_MAX tokens). It is the only return value that
 * must not be negated: test for it before using -(result) as a count. */
#define SP_TOKENIZE_FAILED INT32_MIN

/* Tokenizes text[len] (any bytes; invalid UTF-8 is handled as llama.cpp
 * does; text may be NULL when len is 0). add_special: BOS/EOS as
 * sp_vocab_add_bos/_eos say. parse_special: the text of control,
 * user-defined and unknown tokens (e.g. "<|im_end|>") becomes those tokens
 * instead of being split as plain text.
 * Returns the number of tokens written to out[0..n_max). When n_max is too
 * small (or out is NULL and there is at least one token) returns -(number
 * needed), >= -INT32_MAX, and out's content is unspecified; call again with
 * n_max = that number. SP_TOKENIZE_FAILED on failure. */
int sp_tokenize(const sp_vocab *v, const char *text, size_t len, sp_token *out, int n_max,
                bool add_special, bool parse_special);

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
    const sp_token *markup_ids;
    int n_markup_ids;
} sp_tok_opts;

/* Tokenizes as sp_tokenize does (same tokens), but the work is bounded by
 * n_max: a text that cannot fit in n_max tokens by its length alone (see
 * sp_vocab_max_token_bytes) is refused before any tokenizing, and
 * otherwise tokenizing stops soon after the count passes n_max, rather
 * than costing the whole text. Returns the count (0..n_max) with *out a
 * malloc'd array of it (the caller frees it; never NULL on success, even
 * for 0 tokens); or a value in [-INT32_MAX, -(n_max + 1)], minus a lower
 * bound of the count, with *out NULL, when the text needs more than n_max
 * tokens; SP_TOKENIZE_FAILED (and *out NULL) if memory ran out. o NULL:
 * add_special and parse_special false. */
int sp_tokenize_bounded(const sp_vocab *v, const char *text, size_t len, int n_max,
                        const sp_tok_opts *o, sp_token **out);

/* The bytes a token stands for (SPM "▁" -> ' ', <0xNN> -> that byte, GPT-2
 * byte-unicode decoded), not NUL-terminated. Control and unknown tokens
 * give "" unless render_special; an id out of range gives "". Returns the
 * byte count; when len is too small, -(count needed) (buf may be NULL when
 * len is 0). Never fails otherwise. */
int sp_token_to_piece(const sp_vocab *v, sp_token tok, char *buf, int len, bool render_special);

/* Streaming detokenizer: holds back the bytes of an incomplete UTF-8
 * character until the tokens that complete it arrive, so every chunk it
 * emits is valid UTF-8. Bytes that can never form a valid character are
 * emitted as U+FFFD. Control tokens emit nothing. */
typedef struct {
    unsigned char pend[8];
    int n_pend;
} sp_detok;

static inline void sp_detok_init(sp_detok *d) { d->n_pend = 0; }
/* Appends tok's text; writes the bytes that are ready into out (at most
 * cap - 1 bytes, NUL-terminated) and returns their count (>= 0). When cap
 * is too small returns -(needed), the smallest cap that works (it counts
 * the NUL), and the state is unchanged; 64 + 4 * the longest token text is
 * always enough. SP_TOKENIZE_FAILED (state unchanged) if memory ran out. */
int sp_detok_push(const sp_vocab *v, sp_detok *d, sp_token tok, char *out, int cap);
/* Emits what is pending at the end of a stream (3 bytes, U+FFFD, per
 * pending byte) and resets the state: the count (>= 0), or -(needed) when
 * cap is too small (state unchanged; 32 is always enough). */
int sp_detok_flush(sp_detok *d, char *out, int cap);

/* ---- context and the batched forward pass ------------------------------- */

/* Element type of cached K/V. Q8_0: blocks of 32 values with an f16 scale
 * (34 bytes per 32 against F16's 64), read directly by the attention
 * kernels; it needs a head size that is a multiple of 32. */
typedef enum { SP_KV_F16 = 1, SP_KV_F32 = 0, SP_KV_Q8_0 = 2 } sp_kv_type;

typedef struct {
    int32_t n_threads;  /* compute threads (default: online CPUs) */
    int32_t n_seq_max;  /* sequences held at once (default 1) */
    int32_t n_ctx;      /* positions per sequence (default min(n_ctx_train, 4096)) */
    int32_t n_batch;    /* most tokens one sp_decode call may carry (default 512) */
    sp_kv_type kv_type; /* element type of cached K/V (default F16) */
} sp_context_params;

sp_context_params sp_context_default_params(void);

sp_context *sp_context_create(const sp_model *m, sp_context_params p, char *err, size_t errlen);
void sp_context_free(sp_context *c);

/* A batch: tokens of any number of sequences, each with its sequence id and
 * position. Within a sequence, the tokens must appear in order with
 * consecutive positions starting at the sequence's current length
 * (sp_seq_len). want_logits[i] != 0 asks for logits after token i; when
 * want_logits is NULL, only the last token of the batch gets logits. */
typedef struct {
    int32_t n_tokens;
    const sp_token *token;       /* [n_tokens] */
    const int32_t *pos;          /* [n_tokens] */
    const int32_t *seq;          /* [n_tokens] */
    const int8_t *want_logits;   /* [n_tokens] or NULL */
} sp_batch;

/* Evaluates the batch: appends every token's K/V to its sequence and
 * computes the requested logits. Returns 0, or -1 with a message (invalid
 * token, position, sequence id, batch too large, KV store full); on error no
 * sequence is changed. */
int sp_decode(sp_context *c, const sp_batch *b, char *err, size_t errlen);

/* Logits of the i-th requested output of the last sp_decode (in batch
 * order), [n_vocab] floats, valid until the next sp_decode. */
const float *sp_get_logits(const sp_context *c, int32_t i);
int32_t sp_n_outputs(const sp_context *c);

/* Sequence state. Truncating to len < sp_seq_len drops the K/V of positions
 * >= len (speculative rollback); sp_seq_clear is truncation to 0. */
int32_t sp_seq_len(const sp_context *c, int32_t seq);
void sp_seq_truncate(sp_context *c, int32_t seq, int32_t len);
void sp_seq_clear(sp_context *c, int32_t seq);

/* ---- sampling ------------------------------------------------------------ */

/* A logit bias: bias is added to token's logit. */
typedef struct {
    sp_token token;
    float bias;
} sp_logit_bias;

typedef struct {
    float temperature;       /* <= 0: greedy (default 0.8) */
    int32_t top_k;           /* <= 0: off (default 40) */
    float top_p;             /* >= 1: off (default 0.95) */
    float min_p;             /* <= 0: off (default 0.05) */
    float repeat_penalty;    /* 1: off (default 1) */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    int32_t penalty_last_n;  /* tokens of history the penalties see (default 64) */
    uint64_t seed;           /* keys the noise of every draw (default 0xC0FFEE) */
    /* Logit biases (default none): each bias is added to its token's logit
     * before any other step (penalties, filters, temperature), greedy
     * included, so a bias of -100 in effect bans a token and +100 forces
     * it (OpenAI's logit_bias). Tokens must be in [0, n_vocab) and biases
     * finite; a token listed twice gets the sum. sp_sampler_create copies
     * the array: it need not outlive the call. */
    const sp_logit_bias *logit_bias;
    int32_t n_logit_bias;
} sp_sampler_params;

sp_sampler_params sp_sampler_default_params(void);
/* Greedy parameters: temperature 0, every filter off. */
sp_sampler_params sp_sampler_greedy_params(void);

/* NULL + err for invalid parameters (NaN, negative temperature, top_p
 * outside (0,1], ...). */
sp_sampler *sp_sampler_create(sp_sampler_params p, int32_t n_vocab, char *err, size_t errlen);
void sp_sampler_free(sp_sampler *s);
/* Records a token in the penalty history (call for every committed token). */
void sp_sampler_accept(sp_sampler *s, sp_token t);
/* Empties the penalty history and restarts sp_sampler_sample's counter. */
void sp_sampler_reset(sp_sampler *s);
/* Writes the final sampling distribution over the whole vocabulary into
 * probs[n_vocab] (zeros for filtered tokens; a one-hot for greedy), after
 * penalties, filters and temperature. logits are not modified. */
void sp_sampler_probs(sp_sampler *s, const float *logits, float *probs);
/* Draws the token for sequence position pos from logits (argmax when
 * greedy): the Gumbel-max of the processed logits / temperature over the
 * tokens the filters keep, with noise that is a fixed function of (seed,
 * pos, token id). The result depends only on (logits, the sampler's
 * parameters and penalty history, seed, pos): drawing again at the same
 * position gives the same token, whatever was drawn before, and over
 * seeds (or positions) it is distributed exactly as the final distribution
 * sp_sampler_probs describes. Tokens whose processed logit is -inf are never
 * drawn. Speculative decoding relies on this: the engine draws position p
 * of a request at p (its index in prompt + output), so a seeded request
 * gives the same text with any proposer, k or batch. */
sp_token sp_sampler_sample_at(sp_sampler *s, const float *logits, int64_t pos);
/* sp_sampler_sample_at at the sampler's own counter, which starts at 0
 * (sp_sampler_reset restarts it) and advances by one per call: successive
 * calls are independent draws. */
sp_token sp_sampler_sample(sp_sampler *s, const float *logits);

/* Natural-log softmax helpers over raw logits: logprob of one token and the
 * k most likely (ids, logprobs) in descending order. Returns the count. */
float sp_logprob_of(const float *logits, int32_t n_vocab, sp_token t);
int sp_top_logprobs(const float *logits, int32_t n_vocab, int k, sp_token *ids, float *lps);


/* ---- grammars: structured output (src/grammar) ----------------------------
 *
 * A grammar is GBNF text, llama.cpp's format: rules `name ::= alternates`,
 * sequences, "literals" with escapes (\n \r \t \\ \" \xHH \uHHHH
 * \UHHHHHHHH), [character classes] with ranges and ^ negation, `.` (any
 * character), ( groups ), and the postfixes * + ? {m} {m,} {m,n}; `#`
 * starts a comment; the start rule is `root`. It is compiled to a
 * byte-level pushdown automaton (character classes become UTF-8 byte
 * sequences), so a token standing for part of a character (an SPM <0xNN>
 * byte token, a GPT-2 byte-level piece) is matched byte by byte. Left
 * recursion (a rule that can reach itself without consuming a byte) is
 * refused at compile time. A compiled grammar is immutable and may be
 * shared by any number of matchers and threads. */
typedef struct sp_grammar sp_grammar;

/* Compiles gbnf[len] (len 0: strlen). NULL + err naming the problem (line
 * and column of a syntax error, an undefined or twice-defined rule, left
 * recursion, a grammar over the size limits) on failure. The caller frees
 * it with sp_grammar_free; the grammar lives on while matchers use it
 * (it is reference counted). */
sp_grammar *sp_grammar_compile(const char *gbnf, size_t len, char *err, size_t errlen);
void sp_grammar_free(sp_grammar *g);

/* A JSON Schema (JSON text) as GBNF, for the common subset: type (object,
 * array, string, number, integer, boolean, null, or a list of them),
 * properties, required, additionalProperties, items, minItems, maxItems,
 * minLength, maxLength, enum, const, anyOf, oneOf, $ref to #/$defs/... or
 * #/definitions/..., minimum/maximum (exclusive too) on integers, and
 * annotations (title, description, default, examples, format, $schema,
 * $id, $comment) which are ignored. Output is compact JSON: at most one
 * space between tokens, no newlines. On SP_OK, *gbnf is a malloc'd
 * NUL-terminated GBNF text (the caller frees it); otherwise *gbnf is NULL
 * and err says what and where: SP_ERR_UNSUPPORTED for valid JSON Schema
 * outside the subset ("unsupported keyword 'allOf' at /properties/a"),
 * SP_ERR_INVALID for a schema that is wrong or over a limit, SP_ERR_NOMEM.
 * sp_json_object_gbnf: the grammar of any JSON value whose top level is an
 * object (OpenAI's json_object mode); static. */
int sp_json_schema_to_gbnf(const char *schema_json, size_t len, char **gbnf, char *err,
                           size_t errlen);
const char *sp_json_object_gbnf(void);

/* The byte strings of a vocabulary's tokens (sp_token_to_piece's bytes, no
 * special rendering) in a trie, for computing token masks; built once per
 * vocabulary (tens of ms) and shared, read-only, by every matcher. Tokens
 * whose piece is empty (control tokens) are never allowed by a mask except
 * end-of-generation tokens (sp_vocab_is_eog), which are allowed exactly
 * where the grammar may end. */
typedef struct sp_token_trie sp_token_trie;
sp_token_trie *sp_token_trie_create(const sp_vocab *v, char *err, size_t errlen);
void sp_token_trie_free(sp_token_trie *t);

/* Per-request matching state: where in the grammar the output so far is
 * (the set of pushdown stacks), plus up to SP_SPEC_K_MAX + 1 lookahead
 * states for speculation. Used by one thread at a time. Masks are cached
 * by state, so a state met again (inside a JSON string, between array
 * items) costs a lookup. Memory grows with the distinct states met. */
typedef struct sp_matcher sp_matcher;
/* NULL + err when out of memory. A grammar whose start alone is over a
 * budget (below) gives a matcher that has failed: check sp_matcher_error.
 * t may be NULL (bytes only: no masks). */
sp_matcher *sp_matcher_create(const sp_grammar *g, const sp_token_trie *t, char *err,
                              size_t errlen);
void sp_matcher_free(sp_matcher *m);
/* Budgets: each call below (a mask, a token, a lookahead) may spend a
 * bounded amount of work, and a matcher a bounded amount of memory
 * (32 MiB), whatever the grammar. A call that would spend more fails, and
 * so does every later one: masks are empty, tokens and bytes refused.
 * SP_OK while within them; SP_ERR_INVALID and a message naming the budget
 * once one was exceeded. */
int sp_matcher_error(const sp_matcher *m, char *err, size_t errlen);
/* The bytes the matcher holds now. */
size_t sp_matcher_bytes(const sp_matcher *m);
/* The work units its calls have spent so far (trie walks aside). */
int64_t sp_matcher_work(const sp_matcher *m);
/* Back to the start of the grammar. */
void sp_matcher_reset(sp_matcher *m);
/* Advances over bytes s[n]: true, or false (state unchanged) when some
 * prefix of them is not a prefix of any string of the grammar. */
bool sp_matcher_accept_bytes(sp_matcher *m, const char *s, size_t n);
/* Advances over the token's bytes (as sp_matcher_accept_bytes). An
 * end-of-generation token is accepted (state unchanged) when the grammar
 * may end here; a token with no bytes otherwise is refused. */
bool sp_matcher_accept_token(sp_matcher *m, sp_token tok);
/* Whether the output so far is a whole string of the grammar. */
bool sp_matcher_can_end(const sp_matcher *m);
/* The same for lookahead state i (0: the current one; see below). */
bool sp_matcher_can_end_at(const sp_matcher *m, int32_t i);
/* Whether no byte can follow (the output is complete: only ending fits). */
bool sp_matcher_done(const sp_matcher *m);
/* The tokens allowed next, as a bitmap bits[(n_vocab + 31) / 32] (bit
 * t % 32 of word t / 32), and their count (0: the state is a dead end).
 * Needs a trie. */
int32_t sp_matcher_mask(sp_matcher *m, uint32_t *bits);
/* Speculation: how many of toks[0..n) (n <= SP_SPEC_K_MAX) the grammar
 * takes in sequence from the current state, without changing it; the
 * states after each are kept for sp_matcher_mask_ahead (i in 0..that
 * count; 0 is the current state) until the next call that changes the
 * state or looks ahead again. */
int32_t sp_matcher_lookahead(sp_matcher *m, const sp_token *toks, int32_t n);
int32_t sp_matcher_mask_ahead(sp_matcher *m, int32_t i, uint32_t *bits);
/* Jump-forward (off by default; call before the first mask): where the
 * grammar forces bytes (a key, punctuation, a const: one byte possible and
 * the output may not end), the mask allows only the longest token spelling
 * a prefix of them (a non-byte token over an SPM <0xNN> one), so forced
 * text is tokenized one fixed way and its tokens are forced (a mask of
 * one): speculation proposes them with acceptance 1. Plain and
 * speculative decoding use the same masks, so their outputs still agree.
 * The engine turns it on for every request with a grammar. */
void sp_matcher_set_jump_forward(sp_matcher *m, bool on);
/* Lazy grammars (tool calls in free text, as llama.cpp's lazy grammars):
 * the output is free until the trigger (e.g. "<tool_call>") appears in it,
 * and from the trigger's first byte on it must be a string of the grammar,
 * which therefore begins with the trigger. at_start: the trigger counts
 * only at the start of the output, after white space (e.g. "{\"name\""),
 * else anywhere. A control token whose text is the trigger (e.g. Mistral's
 * [TOOL_CALLS], no bytes of its own) stands for it. Call once, before the
 * first mask; the matcher is back at the start, free. While free, every
 * token is allowed but those whose bytes would complete the trigger and
 * go on with bytes the grammar refuses (listed per state here, for the
 * vocabulary's tokens holding the trigger's last byte), the output may
 * end, and sp_matcher_done is false. SP_OK; SP_ERR_INVALID when the
 * grammar does not begin with the trigger (or it is empty or over 256
 * bytes); SP_ERR_NOMEM. */
int sp_matcher_set_trigger(sp_matcher *m, const char *trigger, size_t len, bool at_start, char *err,
                           size_t errlen);
/* Whether lookahead state i (as sp_matcher_mask_ahead) is free: -1 when the
 * grammar constrains it, else how many tokens it refuses, listed in
 * *refused (valid until the matcher is freed). A free state's mask is
 * every token but those, so a caller may skip the mask. */
int32_t sp_matcher_free_at(const sp_matcher *m, int32_t i, const sp_token **refused);
/* The control token that stands for the trigger, or -1. */
sp_token sp_matcher_trigger_token(const sp_matcher *m);
/* Sets logits[t] = -INFINITY for every token the bitmap does not allow. */
void sp_mask_apply(const uint32_t *bits, float *logits, int32_t n_vocab);

/* ---- engine: continuous batching over a paged KV pool with prefix caching
 *
 * One engine owns a context whose K/V live in a pool of fixed-size blocks.
 * A thread of its own runs the step loop: each step forms one batch of
 * decode tokens of running requests and prefill chunks of waiting ones,
 * runs one forward pass, samples, and reports. Any thread may submit,
 * cancel, wait, read and take statistics; all of these are thread-safe.
 * The model must outlive the engine. */

typedef struct sp_engine sp_engine;

/* Speculative decoding: who proposes the tokens the target verifies. */
typedef enum {
    SP_SPEC_DEFAULT = -1, /* in a request: the engine's setting */
    SP_SPEC_OFF = 0,
    SP_SPEC_NGRAM,        /* prompt lookup: what followed an earlier occurrence of the last n tokens */
    SP_SPEC_SUFFIX,       /* suffix matching over this request and the earlier outputs of
                             requests with the same cache salt */
    SP_SPEC_DRAFT,        /* a smaller model with the same vocabulary */
    SP_SPEC_AUTO,         /* each step, the proposer the request's measured acceptance
                             favours: the suffix or n-gram match that has proposals,
                             else the draft when the engine has one; each is probed
                             until measured (spec_*_by in the statistics) */
} sp_spec_mode;

/* "off", "ngram", "suffix", "draft", "auto"; sp_spec_mode_parse returns -2
 * for an unknown name. */
const char *sp_spec_mode_str(sp_spec_mode m);
int sp_spec_mode_parse(const char *s);

/* A caller-supplied proposer (benchmarks, experiments): given the sequence
 * so far (prompt and output), write up to k guesses of what follows into
 * out and return how many. Called on the engine thread. */
typedef int32_t (*sp_propose_fn)(const sp_token *toks, int32_t n, int32_t k, sp_token *out,
                                 void *user);

#define SP_SPEC_K_MAX 16

typedef struct {
    int32_t n_threads;        /* compute threads (default: online CPUs) */
    int32_t max_seqs;         /* requests running at once (default 16) */
    int32_t max_batch_tokens; /* tokens per step (default 512) */
    int32_t n_ctx;            /* positions per request, prompt + output
                                 (default: the model's n_ctx_train, at most 8192) */
    size_t kv_mem;            /* bytes for the KV block pool (default 0: room for
                                 max_seqs full contexts, at most 1 GiB) */
    int32_t kv_block_size;    /* positions per block (default 16) */
    sp_kv_type kv_type;       /* default F16 */
    bool prefix_cache;        /* reuse K/V of earlier prompts (default true) */
    const char *kv_disk_dir;  /* NULL (default): no disk tier. Else a second prefix-cache
                                 tier in this directory (created 0700; SQLite, WAL):
                                 full committed blocks are written there in the
                                 background, and admission continues the RAM cache's
                                 match there, restoring blocks when that is measured to
                                 cost less than computing them. It survives restarts;
                                 only the same model, KV type and block layout reads it.
                                 One process per directory (another is refused). Needs
                                 prefix_cache. The directory holds every tenant's K/V:
                                 treat it as secret (SECURITY.md) */
    size_t kv_disk_size;      /* the disk tier's cap in bytes (default 0: 4 GiB); its
                                 least recently used blocks are evicted to stay under */
    size_t grammar_mem;       /* bytes the requests with a grammar may hold together
                                 (default 0: 1 GiB; at least 64 MiB), half for compiled
                                 grammars and half for matchers: each holds its compiled
                                 grammar's size from submission (SP_ERR_BUSY when it does
                                 not fit) and its matcher's budget (32 MiB) from
                                 admission (it waits in the queue until that fits),
                                 until it ends */
    bool debug_check;         /* run the pool's invariant checker after every step
                                 (tests; O(blocks) per step); see sp_engine_check */
    /* speculative decoding */
    sp_spec_mode spec;        /* default SP_SPEC_OFF */
    int32_t spec_k;           /* most tokens proposed per step, 1..16 (default 4) */
    bool spec_adaptive;       /* choose k per sequence and step from the measured cost
                                 of a pass and each sequence's acceptance, and let the
                                 guard turn speculation off in a batch shape where its
                                 measured throughput loses (default true); false:
                                 always min(spec_k, what the proposer has) */
    const sp_model *draft;    /* the draft model (needed for SP_SPEC_DRAFT); it must
                                 outlive the engine and share the target's vocabulary */
    int32_t ngram_min, ngram_max; /* n-gram lengths tried, longest first (default 1, 4) */
    size_t suffix_store_tokens;   /* earlier outputs kept for suffix matching, in all
                                     partitions together (default 64K; about 1 KB of
                                     index per token) */
    int32_t spec_partitions;  /* what speculation learns across requests (stored outputs,
                                 acceptance priors) is kept apart per cache salt: a
                                 request proposes from and teaches only the partition of
                                 its own salt, so another tenant's outputs never change
                                 its proposals, counts or timing. At most this many
                                 partitions (default 256, 0 too; raised to max_seqs + 1);
                                 the least recently used is dropped to make room, and when
                                 suffix_store_tokens is exceeded the least recently used
                                 partitions lose their oldest outputs first */
} sp_engine_params;

sp_engine_params sp_engine_default_params(void);

/* NULL + err for invalid parameters, a pool that cannot hold even one
 * request's context (kv_mem too small), or out of memory. */
sp_engine *sp_engine_create(const sp_model *m, sp_engine_params p, char *err, size_t errlen);
/* Cancels whatever is still queued or running (their callbacks see
 * SP_FINISH_CANCELLED), stops the step loop and frees everything. */
void sp_engine_free(sp_engine *e);

typedef enum {
    SP_FINISH_NONE = 0,   /* still running */
    SP_FINISH_STOP,       /* end-of-generation token, stop token or stop string */
    SP_FINISH_LENGTH,     /* max_tokens reached, or the context is full */
    SP_FINISH_CANCELLED,
    SP_FINISH_ERROR,
} sp_finish_reason;

/* "stop", "length", "cancelled", "error" (OpenAI's finish_reason words). */
const char *sp_finish_reason_str(sp_finish_reason r);

typedef struct {
    int32_t prompt_tokens;
    int32_t cached_tokens;     /* L_hit: prompt tokens whose K/V came from the cache
                                  (either tier) */
    int32_t cached_tokens_disk;/* ... of which restored from the disk tier */
    int32_t completion_tokens;
    int32_t preemptions;       /* times its blocks were taken back and recomputed */
    double queue_ms;           /* submit -> first scheduled */
    double prefill_ms;         /* first scheduled -> first token */
    double ttft_ms;            /* submit -> first token */
    double decode_ms;          /* first token -> last token */
    double tpot_ms;            /* decode_ms / (completion_tokens - 1), 0 if < 2 */
    sp_finish_reason finish;
    /* speculative decoding: a step is one verification of >= 1 proposed
     * token; completion_tokens = accepted + steps + plain decode steps */
    int32_t spec_steps;
    int32_t spec_drafted;      /* tokens proposed and verified */
    int32_t spec_accepted;     /* of which accepted */
    int32_t spec_accepted_per_pos[SP_SPEC_K_MAX]; /* [i]: steps that accepted draft token i */
    int32_t spec_grammar;      /* of the accepted: tokens the grammar forced (the only one
                                  it allowed), proposed by it (jump-forward) */
    int32_t spec_drafted_by[SP_SPEC_DRAFT + 1]; /* spec_drafted and spec_accepted by the */
    int32_t spec_accepted_by[SP_SPEC_DRAFT + 1]; /* proposer, indexed by sp_spec_mode */
} sp_request_stats;

typedef struct sp_event sp_event;
struct sp_event {
    int64_t id;
    int32_t n_tokens;          /* tokens new in this event */
    const sp_token *tokens;    /* [n_tokens] */
    const float *logprobs;     /* [n_tokens] logprob of each, or NULL (logprobs < 0) */
    const sp_token *top_ids;   /* [n_tokens][top_logprobs] or NULL */
    const float *top_lps;      /* [n_tokens][top_logprobs] or NULL */
    int32_t top_logprobs;
    const char *text;          /* text new in this event (valid UTF-8, stop strings
                                  withheld and cut) */
    size_t text_len;
    bool finished;             /* last event of the request; stats are final */
    const sp_request_stats *stats;
    const char *error;         /* message when finish == SP_FINISH_ERROR, else NULL */
    int error_status;          /* ... and its sp_status: SP_ERR_GRAMMAR when the request
                                  itself is at fault (its grammar went over a budget),
                                  SP_ERR_INTERNAL otherwise */
};
/* Called on the engine thread, with no engine lock held; the pointers in
 * ev live until it returns. It may call sp_engine_cancel or submit, and
 * should return quickly: every request waits while it runs. */
typedef void (*sp_event_cb)(const sp_event *ev, void *user);

typedef struct {
    const char *prompt;        /* text (tokenized with the model's vocabulary) ... */
    size_t prompt_len;         /* 0: strlen(prompt) */
    const sp_token *tokens;    /* ... or token ids (used when prompt is NULL) */
    int32_t n_tokens;
    bool add_bos;              /* text only: prepend BOS if the model wants it (default true) */
    bool parse_special;        /* text only: "<s>"-style names become special tokens */
    sp_sampler_params sampling; /* default: sp_sampler_default_params() */
    int32_t max_tokens;        /* >= 1 (default 16) */
    const char *const *stop;   /* stop strings (not included in the output) */
    int32_t n_stop;
    const sp_token *stop_tokens; /* extra stop token ids (not emitted) */
    int32_t n_stop_tokens;
    bool ignore_eos;           /* keep going past end-of-generation tokens */
    int32_t logprobs;          /* -1: none (no per-token softmax at all); 0: the chosen
                                  token's logprob (default); N (max 20): also the top N */
    const char *cache_salt;    /* NULL/"": share the prefix cache freely; else only
                                  with requests of the same salt. The same holds for
                                  what speculation learns (spec_partitions) */
    int32_t priority;          /* higher is admitted first; ties by arrival */
    sp_event_cb on_event;      /* NULL: poll with sp_engine_wait / sp_engine_read */
    void *user;
    sp_spec_mode spec;         /* default SP_SPEC_DEFAULT (the engine's) */
    int32_t spec_k;            /* 0: the engine's */
    sp_propose_fn propose;     /* non-NULL: this proposer instead (spec must not be off) */
    void *propose_user;
    /* Structured output: GBNF text (see sp_grammar_compile) the output must
     * be a string of (NULL: none). Compiled at submit (the engine keeps
     * compiled grammars by their text); a grammar that does not compile,
     * or that no token of the vocabulary can begin, is SP_ERR_GRAMMAR with
     * the reason. Every token is drawn from the logits masked to what the
     * grammar allows (end-of-generation and stop tokens only where it may
     * end), speculative proposals are cut at the first token it refuses,
     * and once the output is complete (no byte can follow) the request
     * finishes with SP_FINISH_STOP. A grammar that cannot finish within
     * max_tokens ends with SP_FINISH_LENGTH, its output a prefix. Where
     * the grammar allows a single token (a key, punctuation, a const),
     * that token is proposed (after the proposer's, when the request
     * speculates; where the grammar cut the draft model's proposals short,
     * in the room the plan made for them; up to SP_SPEC_K_MAX in a row
     * when it does not speculate): jump-forward, verified in the same pass
     * and accepted with probability 1 (sp_request_stats.spec_grammar
     * counts them; they count as drafted and accepted tokens too). */
    const char *grammar;
    /* A lazy grammar (sp_matcher_set_trigger): NULL, or the output is free
     * until this trigger appears in it (at its start, after white space,
     * when grammar_at_start), and a string of the grammar, which begins
     * with the trigger, from there on. The free part is sampled from the
     * unmasked logits but for the tokens that would complete the trigger
     * with bytes the grammar refuses; speculation stays exact across the
     * trigger (proposals are cut by the grammar once it applies). A
     * control token that stands for the trigger (Mistral's [TOOL_CALLS])
     * adds the trigger's text to the output. A trigger without a grammar
     * is SP_ERR_INVALID. */
    const char *grammar_trigger;
    bool grammar_at_start;
} sp_request_params;

sp_request_params sp_request_default_params(void);

/* Queues a request; the params (strings and arrays included) are copied.
 * Returns its id (> 0), or a negative sp_status + err: SP_ERR_CONTEXT when
 * prompt + max_tokens is beyond n_ctx, SP_ERR_UNSUPPORTED for draft
 * speculation on an engine without a draft model, SP_ERR_GRAMMAR for a
 * grammar that cannot be used (it does not compile, no token can begin it,
 * or checking it went over a budget), SP_ERR_BUSY when the engine's memory
 * for compiled grammars is full, SP_ERR_NOMEM, and SP_ERR_INVALID for any
 * other invalid request (empty prompt, bad sampling parameters, token out
 * of the vocabulary). A request with a callback is forgotten after its final
 * event; one without must be released with sp_engine_release. */
int64_t sp_engine_submit(sp_engine *e, const sp_request_params *rp, char *err, size_t errlen);

/* Asks to stop a request; its blocks return to the pool at the next step
 * and it finishes with SP_FINISH_CANCELLED (unless it finished first).
 * SP_OK, or SP_ERR_NOT_FOUND if the id is unknown. */
int sp_engine_cancel(sp_engine *e, int64_t id);

typedef struct {
    int32_t n_tokens;          /* generated so far */
    size_t text_len;           /* bytes of text released so far */
    bool finished;
    sp_request_stats stats;
} sp_request_status;

/* For requests without a callback. Waits until the request has more than
 * have_tokens tokens or has finished, or timeout_ms passes (< 0: forever),
 * then fills st. SP_OK, or SP_ERR_NOT_FOUND if the id is unknown. */
int sp_engine_wait(sp_engine *e, int64_t id, int32_t have_tokens, int timeout_ms,
                   sp_request_status *st);
/* Copies up to cap tokens (from the first) and up to text_cap - 1 bytes of
 * text (NUL-terminated); either buffer may be NULL. SP_OK, or
 * SP_ERR_NOT_FOUND (unknown id). */
int sp_engine_read(sp_engine *e, int64_t id, sp_token *tokens, int32_t cap, char *text,
                   size_t text_cap);
/* Forgets a request (cancelling it first if it is still running). */
void sp_engine_release(sp_engine *e, int64_t id);

typedef struct {
    uint64_t steps;
    uint64_t submitted, finished, cancelled, preemptions;
    uint64_t prompt_tokens;      /* of admitted requests */
    uint64_t prefill_tokens;     /* prompt positions computed (not served from cache) */
    uint64_t decode_tokens;      /* tokens generated */
    uint64_t recomputed_tokens;  /* positions computed again after a preemption */
    uint64_t cache_query_tokens; /* prompt tokens looked up in the prefix cache */
    uint64_t cache_hit_tokens;   /* ... of which found (sum of L_hit, both tiers) */
    uint64_t cache_hit_tokens_disk; /* ... of which restored from the disk tier */
    uint64_t h_tokens_hist[11];  /* requests by H_tokens = L_hit / prompt tokens:
                                    [i] counts H in [i/10, (i+1)/10), [10] H == 1 */
    uint64_t evictions_pressure; /* cached blocks reused because the pool ran out */
    uint64_t evictions_flush;    /* cached blocks dropped by sp_engine_flush_cache */
    int32_t blocks_total, blocks_free, blocks_cached, blocks_in_use, block_size;
    size_t kv_bytes_total;       /* both pools */
    size_t kv_bytes_cached;      /* K/V kept only for reuse (blocks_cached) */
    /* models with sliding-window layers: their K/V live in a pool of their
     * own where a sequence holds about one window (0 without such layers) */
    int32_t window_blocks_total, window_blocks_in_use;
    size_t kv_bytes_window;      /* of kv_bytes_total: the window pool */
    int32_t running, waiting;
    /* structured output */
    uint64_t grammar_compiles;   /* grammars compiled (a tenant's repeat finds its own) */
    size_t grammar_mem_used;     /* of grammar_mem: held by compiled grammars and matchers */
    uint64_t grammar_waits;      /* admissions put off: the matchers' half of grammar_mem
                                    was held by running requests */
    uint64_t grammar_throttled;  /* steps a running request sat out to repay the work its
                                    grammar's masks took beyond a step's allowance */
    /* the disk tier (kv_disk_dir; all 0 without one) */
    bool disk_on;                /* a disk tier is open (and not turned off by damage) */
    uint64_t disk_blocks, disk_bytes, disk_cap_bytes; /* rows (all models) and their bytes */
    uint64_t disk_writes;        /* blocks written */
    uint64_t disk_skipped_queue, disk_skipped_cap, disk_skipped_error; /* blocks not written */
    uint64_t disk_evictions;     /* blocks evicted to stay under the cap */
    uint64_t disk_restored;      /* blocks restored into the pool */
    double disk_restore_ms;      /* ... the time they took (read, check, copy) */
    uint64_t disk_declined;      /* blocks on disk not restored: computing them was
                                    measured cheaper */
    uint64_t disk_corrupt;       /* rows rejected on restore (tokens, fields or checksum) */
    uint64_t disk_set_aside;     /* damaged stores set aside at open */
    /* speculative decoding */
    uint64_t spec_steps, spec_drafted, spec_accepted;
    uint64_t spec_accepted_per_pos[SP_SPEC_K_MAX];
    uint64_t spec_planned_zero;  /* decode steps where the planner chose not to speculate */
    double draft_ms;             /* in draft-model passes */
    double verify_ms;            /* in target passes that verified proposals */
    double cost_ms_1, cost_ms_16;/* measured target pass cost at 1 and 16 tokens (0 if not measured) */
    double cost_scale;           /* planner: target passes' measured / startup-predicted cost */
    double cost_attn_ms_per_1k;  /* planner: target ms per 1000 attended positions (startup) */
    double draft_cost_ms_1;      /* planner: a 1-token draft pass at startup (0: no draft) */
    double draft_cost_scale;     /* planner: draft passes' measured / startup-predicted cost */
    /* speculation by method (index: sp_spec_mode; [SP_SPEC_OFF] unused) */
    uint64_t spec_steps_by[SP_SPEC_DRAFT + 1], spec_drafted_by[SP_SPEC_DRAFT + 1],
        spec_accepted_by[SP_SPEC_DRAFT + 1];
    uint64_t spec_plans;         /* planner: k chosen for a speculating request, times */
    uint64_t spec_plan_k_sum;    /* ... the k chosen, summed */
    float spec_last_k;           /* planner: the mean k of its latest step (0 before any) */
    uint64_t spec_grammar;       /* accepted tokens the grammar forced (jump-forward) */
    /* the guard on realized throughput (adaptive engines): per batch shape it
     * compares the tokens per ms of recent steps with and without
     * speculation and keeps it off while it loses, trying it again now and
     * then */
    uint64_t spec_guard_off_steps; /* steps with speculating requests it kept off */
    uint64_t spec_guard_switches;  /* times it changed its choice for a shape */
} sp_engine_stats;

void sp_engine_get_stats(sp_engine *e, sp_engine_stats *st);
/* Drops every cached block that no running request uses; returns how many.
 * Served by the engine thread between steps (this call waits for it). */
int32_t sp_engine_flush_cache(sp_engine *e);
/* Runs the pool's invariant checker between two steps: SP_OK, or
 * SP_ERR_INTERNAL + err.
 * With debug_check it also reports any step after which the check failed.
 * Also checks the speculation partitions (counts, budget, which are held). */
int sp_engine_check(sp_engine *e, char *err, size_t errlen);
/* The acceptance estimate a request with this cache salt (NULL or "" for
 * none) and method would start from (tests, diagnostics): learned only from
 * earlier requests of the same salt, 0.5 when there were none. -1 for a mode that is not a method (off, default). */
float sp_engine_spec_prior(sp_engine *e, const char *cache_salt, sp_spec_mode m);

/* ---- chat templates (src/chat) ------------------------------------------- */

/* A chat template: Jinja text (a model's tokenizer.chat_template, a file,
 * or a family Specula names) compiled by Specula's sandboxed interpreter,
 * which renders what Hugging Face's apply_chat_template renders (Python
 * jinja2 with its settings). Immutable once loaded; any number of threads
 * may render with it at once. */
typedef struct sp_chat_template sp_chat_template;

typedef struct {
    const char *role;    /* "system", "developer", "user", "assistant", "tool" */
    const char *content; /* NULL reads as "" */
} sp_chat_message;

/* The template `specula serve` would use for m, by the same rule: name when
 * not NULL (serve's --chat-template: a family, chatml, qwen, qwen2, llama3,
 * llama-3, llama2, llama-2, mistral, phi3, phi-3, gemma; or a Jinja file, a
 * path with '/' or '.'), else m's own tokenizer.chat_template. Its
 * bos_token and eos_token are the text of m's BOS and EOS tokens (m may be
 * NULL with a name: then ""). Returns the template (free it with
 * sp_chat_template_free), or NULL with err set: name is neither a family
 * nor a readable file, m has no template, the text does not compile
 * ("chat template NAME: line N: ..."), or out of memory. */
sp_chat_template *sp_chat_template_load(const sp_model *m, const char *name, char *err, size_t errlen);
void sp_chat_template_free(sp_chat_template *t);
/* What the template is: the family's name ("chatml", "llama3", ...), "model"
 * (the model's own) or the file's path. Valid while t is. */
const char *sp_chat_template_name(const sp_chat_template *t);
/* The text that ends an assistant turn in the template's family
 * ("<|im_end|>", "<|eot_id|>", "</s>", ...), static storage; NULL when its
 * markup is of no family Specula knows (then the model's end-of-turn token
 * ends a turn). */
const char *sp_chat_template_eot(const sp_chat_template *t);
/* The single control token of v that ends an assistant turn (e.g. the id of
 * "<|im_end|>"; for a template of no known family, v's end-of-turn token),
 * or -1 when the end of turn is not one control token of v; then the
 * generated text holds sp_chat_template_eot's text instead (stop on that
 * string). */
int32_t sp_chat_eot_token(const sp_vocab *v, const sp_chat_template *t);
/* The conversation msgs[n] followed by the opening of the assistant's turn,
 * as the server renders it: a malloc'd NUL-terminated string the caller
 * frees. NULL + err when t is NULL, the template fails on it (e.g. a role it
 * refuses: "chat template NAME: line N: ..."), or out of memory. */
char *sp_chat_render(const sp_chat_template *t, const sp_chat_message *msgs, int n, char *err,
                     size_t errlen);
/* sp_chat_render's text tokenized as the server tokenizes a chat prompt
 * (BOS/EOS as the vocabulary's add_bos/add_eos say, a BOS the template
 * wrote not added twice; special tokens read only in the template's own
 * text, so message content cannot forge a turn): the same tokens the server
 * would compute, so as a conversation grows turn by turn the prefix cache
 * finds its earlier turns again. Returns the count with *out malloc'd (the
 * caller frees it), or -1 + err with *out NULL. */
int32_t sp_chat_tokenize(const sp_vocab *v, const sp_chat_template *t, const sp_chat_message *msgs, int n,
                         int32_t **out, char *err, size_t errlen);

/* A chat request rendered by a Jinja chat template, as Hugging Face's
 * apply_chat_template renders it (Python jinja2's sandbox, trim_blocks,
 * lstrip_blocks, loopcontrols, its tojson, raise_exception and
 * strftime_now; `specula template`). request_json[len] is a JSON object
 * with "messages" (required, an array; a message's content may be null,
 * a string or a list of parts, as the template takes it), optionally
 * "tools" (an array or null; null when absent, as "documents"),
 * "add_generation_prompt" (default true), "bos_token" and "eos_token"
 * (default: the text of m's BOS/EOS token; "" without a model or such a
 * token), "chat_template_kwargs" (an object whose keys become template
 * variables too, over the request's own: e.g. enable_thinking), and any
 * other keys, passed through as variables. template_text: the template,
 * NUL-terminated (NULL: m's tokenizer.chat_template metadata; m is then
 * required). now: strftime_now's clock, Unix seconds UTC (0: the current
 * time). The render is bounded (the interpreter's default limits on steps,
 * output and nesting). Returns the rendered prompt (malloc'd,
 * NUL-terminated; the caller frees it), or NULL with err set: "the request
 * ..." when request_json is not such an object, "the model has no chat
 * template ..." when there is no template, else the template's failure,
 * "line N: message" (raise_exception's message included). */
char *sp_chat_apply_template(const sp_model *m, const char *template_text, const char *request_json,
                             size_t len, int64_t now, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
