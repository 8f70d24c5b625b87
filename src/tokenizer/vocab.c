/* vocab.c: building a vocabulary from GGUF tokenizer metadata, with
 * llama.cpp's defaults and special-token rules (llama-vocab.cpp, Feb 2025),
 * and the lookups the encoders and decoders use. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Mixes FNV's weak low bits before masking. */
static inline uint64_t hash_slot(uint64_t h) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

bool tok_ivec_push(tok_ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof(*nv));
        if (!nv) return false;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return true;
}

int32_t tok_lookup(const sp_vocab *v, const char *s, size_t n) {
    uint64_t i = hash_slot(tok_hash_bytes(SP_TOK_HASH_SEED, s, n)) & v->hash_mask;
    for (;; i = (i + 1) & v->hash_mask) {
        int32_t id = v->hash[i];
        if (id < 0) return -1;
        if (v->text_len[id] == n && memcmp(v->text + v->text_off[id], s, n) == 0) return id;
    }
}

int32_t tok_merge_rank(const sp_vocab *v, const char *l, size_t ln, const char *r, size_t rn) {
    if (!v->merge_hash) return -1;
    uint64_t h = tok_hash_bytes(SP_TOK_HASH_SEED, l, ln);
    h = tok_hash_bytes(h, " ", 1);
    h = tok_hash_bytes(h, r, rn);
    size_t n = ln + 1 + rn;
    for (uint64_t i = hash_slot(h) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        int32_t m = v->merge_hash[i];
        if (m < 0) return -1;
        const char *t = v->merge_text + v->merge_off[m];
        if (v->merge_len[m] == n && memcmp(t, l, ln) == 0 && t[ln] == ' ' &&
            memcmp(t + ln + 1, r, rn) == 0)
            return m;
    }
}

/* The bit of the symbol pair (a, b) in pair_bits; la is hashed between
 * the two so that a pair is not confused with another cut of the same
 * bytes. */
static uint64_t pair_bit(const char *a, size_t la, const char *b, size_t lb) {
    uint64_t h = tok_hash_bytes(SP_TOK_HASH_SEED, a, la);
    h = tok_hash_bytes(h ^ ((uint64_t)la * 0x9E3779B97F4A7C15ull), b, lb);
    return hash_slot(h);
}

bool tok_pair_may_merge(const sp_vocab *v, const char *a, size_t la, const char *b, size_t lb) {
    if (!v->pair_bits) return true;
    uint64_t i = pair_bit(a, la, b, lb) & v->pair_mask;
    return (v->pair_bits[i >> 6] >> (i & 63)) & 1;
}

static uint64_t table_size(uint64_t n) {
    uint64_t s = 16;
    while (s < n * 2) s *= 2;
    return s;
}

/* ---- metadata helpers ---- */

static bool str_is(gguf_str s, const char *lit) {
    return s.p && s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

/* A token id from key, if present. -1 for a negative value ("none").
 * Out of range: an error when strict (ids the tokenizer itself emits),
 * otherwise ignored as llama.cpp does (it keeps its default). */
static int read_id(const gguf_file *g, const char *key, int32_t n_tokens, bool strict,
                   int32_t *id, char *err, size_t errlen) {
    int64_t x;
    if (gguf_find_key(g, key) < 0) return 0;
    if (!gguf_get_i64(g, key, &x)) {
        seterr(err, errlen, "%s: not an integer", key);
        return -1;
    }
    if (x < 0) {
        *id = -1;
    } else if (x >= n_tokens) {
        if (strict) {
            seterr(err, errlen, "%s = %lld is out of range (the vocabulary has %d tokens)", key,
                      (long long)x, n_tokens);
            return -1;
        }
    } else {
        *id = (int32_t)x;
    }
    return 0;
}

static int read_bool(const gguf_file *g, const char *key, bool *out, char *err, size_t errlen) {
    if (gguf_find_key(g, key) < 0) return 0;
    if (!gguf_get_bool(g, key, out)) {
        seterr(err, errlen, "%s: not a boolean", key);
        return -1;
    }
    return 0;
}

static const char *tok_text(const sp_vocab *v, int32_t id) { return v->text + v->text_off[id]; }

static bool tok_text_is(const sp_vocab *v, int32_t id, const char *lit) {
    size_t n = strlen(lit);
    return v->text_len[id] == n && memcmp(tok_text(v, id), lit, n) == 0;
}

static bool text_in(const sp_vocab *v, int32_t id, const char *const *list) {
    for (; *list; list++)
        if (tok_text_is(v, id, *list)) return true;
    return false;
}

/* Texts by which llama.cpp recognizes special tokens the metadata does not
 * name (a token found this way is forced to CONTROL). */
static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>", NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>",
                                            "<PRE>", NULL};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>",
                                            "<SUF>", NULL};
static const char *const fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>",
                                            "<MID>", NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>", NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
/* Tokens that end generation whatever the metadata says. */
static const char *const eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                                        "<｜end▁of▁sentence｜>", NULL};

static int cmp_special(const void *a, const void *b, void *ctx) {
    const sp_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->text_len[x] != v->text_len[y]) return v->text_len[x] > v->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The bytes token id stands for with render_special = true (llama.cpp's
 * token_to_piece cache). Writes them into buf unless it is NULL; returns
 * the length. */
static size_t make_piece(const sp_vocab *v, int32_t id, char *buf) {
    const char *t = tok_text(v, id);
    size_t n = v->text_len[id];
    uint16_t a = v->attr[id];
#define PUT(src, k)                                  \
    do {                                             \
        if (buf) memcpy(buf + o, (src), (k));        \
        o += (k);                                    \
    } while (0)
    size_t o = 0;
    if (a & (SP_ATTR_UNKNOWN | SP_ATTR_CONTROL | SP_ATTR_USER_DEFINED)) {
        PUT(t, n);
        return o;
    }
    if (v->kind == SP_VOCAB_SPM) {
        if (a & SP_ATTR_NORMAL) { /* U+2581 -> space */
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                    PUT(" ", 1);
                    i += 3;
                } else {
                    PUT(t + i, 1);
                    i++;
                }
            }
            return o;
        }
        if (a & SP_ATTR_BYTE) { /* "<0xNN>" */
            char hex[3] = {n > 3 ? t[3] : 0, n > 4 ? t[4] : 0, 0};
            char b = (char)strtol(hex, NULL, 16);
            PUT(&b, 1);
        }
        return o;
    }
    if (a & SP_ATTR_NORMAL) { /* GPT-2 byte-level: each code point is a byte */
        for (size_t off = 0; off < n;) {
            uint32_t c = tok_utf8_decode(t, n, &off);
            int b = tok_ucp_to_byte(c);
            if (b >= 0) {
                char ch = (char)b;
                PUT(&ch, 1);
            } else { /* llama.cpp's marker for a code point that is no byte */
                char u[4], hex[3];
                int k = tok_utf8_encode(c, u);
                PUT("[UNK_BYTE_0x", 12);
                for (int j = 0; j < k; j++) {
                    snprintf(hex, sizeof(hex), "%02x", (unsigned char)u[j]);
                    PUT(hex, 2);
                }
                PUT(t, n);
                PUT("]", 1);
            }
        }
    }
    return o;
#undef PUT
}

/* Whether every byte of any input ends up in some token: llama.cpp drops
 * the bytes it finds no token for (SPM: no byte token and no UNK; BPE: a
 * symbol that is not a token goes out as the tokens of its single bytes,
 * those that exist), and a dropped byte breaks the byte bound. For BPE the
 * symbols are the byte characters and the results of merges. */
static bool covers_every_byte(const sp_vocab *v) {
    if (v->kind == SP_VOCAB_SPM) {
        if (v->unk >= 0) return true;
        for (int b = 0; b < 256; b++)
            if (v->byte_tok[b] < 0) return false;
        return true;
    }
    for (int b = 0; b < 256; b++) {
        /* the pre-tokenizer re-encodes code points as UTF-8, which never
         * holds these bytes */
        if (b == 0xc0 || b == 0xc1 || b >= 0xf5) continue;
        char u[4];
        int k = tok_utf8_encode(tok_byte_to_ucp((uint8_t)b), u);
        if (tok_lookup(v, u, (size_t)k) < 0) return false;
    }
    char *cat = NULL;
    size_t cap = 0;
    bool ok = true;
    for (int32_t i = 0; ok && i < v->n_merges; i++) {
        const char *t = v->merge_text + v->merge_off[i];
        size_t n = v->merge_len[i];
        const char *sp = n > 1 ? memchr(t + 1, ' ', n - 1) : NULL;
        if (!sp) continue; /* never matches a pair (see the merge table) */
        if (n > cap) {
            char *nc = realloc(cat, n);
            if (!nc) { /* no bound then, which is only slower */
                ok = false;
                break;
            }
            cat = nc;
            cap = n;
        }
        size_t ln = (size_t)(sp - t);
        memcpy(cat, t, ln);
        memcpy(cat + ln, sp + 1, n - ln - 1);
        ok = tok_lookup(v, cat, n - 1) >= 0;
    }
    free(cat);
    return ok;
}

/* max_token_bytes, has_strip and (SPM) pair_bits; false when out of
 * memory. About 20 ms for a 150k-token vocabulary. */
static bool work_bounds(sp_vocab *v) {
    uint32_t most = 0;
    uint64_t n_pairs = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *t = tok_text(v, id);
        uint32_t n = v->text_len[id], k = n;
        v->has_strip |= (v->attr[id] & (SP_ATTR_LSTRIP | SP_ATTR_RSTRIP)) != 0;
        bool special = v->attr[id] & (SP_ATTR_CONTROL | SP_ATTR_USER_DEFINED | SP_ATTR_UNKNOWN);
        if (v->kind == SP_VOCAB_BPE && !special) {
            k = 0; /* one code point of the byte-level text per input byte */
            for (uint32_t i = 0; i < n; i++) k += ((unsigned char)t[i] & 0xc0) != 0x80;
        }
        if (k > most) most = k;
        for (uint32_t off = 0; off < n; n_pairs++)
            off += (uint32_t)SP_MIN(tok_utf8_lead_len((unsigned char)t[off]), n - off);
        n_pairs--; /* symbols - 1 (every text has at least one byte) */
    }
    v->max_token_bytes = covers_every_byte(v) ? most : 0;
    if (v->kind != SP_VOCAB_SPM) return true;
    /* about 16 bits per pair keeps false "may merge" answers near 6%;
     * 2^24 bits (2 MiB) at most */
    uint64_t bits = 1024;
    while (bits < 16 * n_pairs && bits < (1ull << 24)) bits *= 2;
    v->pair_bits = calloc(bits / 64, sizeof(uint64_t));
    if (!v->pair_bits) return false;
    v->pair_mask = bits - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *t = tok_text(v, id);
        size_t n = v->text_len[id], a = 0;
        size_t la = SP_MIN(tok_utf8_lead_len((unsigned char)t[0]), n);
        while (a + la < n) {
            size_t b = a + la, lb = SP_MIN(tok_utf8_lead_len((unsigned char)t[b]), n - b);
            uint64_t i = pair_bit(t + a, la, t + b, lb) & v->pair_mask;
            v->pair_bits[i >> 6] |= 1ull << (i & 63);
            a = b;
            la = lb;
        }
    }
    return true;
}

static const char *const K_TOKENS = "tokenizer.ggml.tokens", *const K_MERGES = "tokenizer.ggml.merges";

static int oom(char *err, size_t errlen) {
    seterr(err, errlen, "out of memory loading the vocabulary");
    return -1;
}

/* The tokenizer model (SentencePiece or byte-level BPE) and the
 * pre-tokenizer, with the defaults of each (add_bos, add_space_prefix). */
static int load_kind(sp_vocab *v, const gguf_file *g, pretok_info *pinfo, char *err,
                     size_t errlen) {
    gguf_str model, pre = {NULL, 0};
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model)) {
        seterr(err, errlen, "tokenizer.ggml.model is missing (or not a string)");
        return -1;
    }
    if (str_is(model, "llama")) {
        v->kind = SP_VOCAB_SPM;
    } else if (str_is(model, "gpt2")) {
        v->kind = SP_VOCAB_BPE;
    } else {
        /* llama.cpp's others ("bert" WPM, "t5" UGM, "rwkv", "plamo2"; "none"
         * and "no_vocab" for a file without a vocabulary) are refused by
         * name rather than approximated */
        seterr(err, errlen,
                  "unsupported tokenizer model '%.*s' (tokenizer.ggml.model; this build "
                  "implements 'llama' (SentencePiece) and 'gpt2' (byte-level BPE))",
                  (int)SP_MIN(model.n, (uint64_t)100), model.p ? model.p : "");
        return -1;
    }
    if (gguf_find_key(g, "tokenizer.ggml.pre") >= 0 &&
        !gguf_get_str(g, "tokenizer.ggml.pre", &pre)) {
        seterr(err, errlen, "tokenizer.ggml.pre: not a string");
        return -1;
    }
    if (pre.n >= sizeof(v->pre_name) || memchr(pre.p ? pre.p : "", 0, pre.n)) {
        seterr(err, errlen, "unknown pre-tokenizer type '%.*s'", (int)SP_MIN(pre.n, 100u),
                  pre.p);
        return -1;
    }
    if (pre.n == 0) strcpy(v->pre_name, "default"); /* as llama.cpp, when missing */
    else memcpy(v->pre_name, pre.p, pre.n);

    if (v->kind == SP_VOCAB_BPE) {
        if (!tok_pretok_lookup(v->pre_name, pinfo)) {
            seterr(err, errlen,
                      "unknown pre-tokenizer type '%s' (tokenizer.ggml.pre of a gpt2 "
                      "tokenizer; this build implements the names llama.cpp knew in "
                      "February 2025)",
                      v->pre_name);
            return -1;
        }
        v->ignore_merges = pinfo->ignore_merges;
        v->add_bos = pinfo->add_bos;
        v->add_eos = false;
        v->add_space_prefix = false;
    } else {
        strcpy(v->pre_name, "default"); /* SPM has no pre-tokenizer */
        v->add_bos = true;
        v->add_eos = false;
        v->add_space_prefix = true;
    }
    if (read_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err, errlen) < 0)
        return -1;
    return 0;
}

/* An optional array of one entry per token (KEY, of type t or t2): 0 when
 * the file has none, 1 with *data when it has, -1 + err when it is not such
 * an array (WHAT names the type in the message). */
static int per_token_arr(const gguf_file *g, const sp_vocab *v, const char *key, gguf_vtype t,
                         gguf_vtype t2, const char *what, const void **data, char *err,
                         size_t errlen) {
    if (gguf_find_key(g, key) < 0) return 0;
    gguf_vtype et;
    uint64_t n;
    if (!gguf_get_arr(g, key, &et, &n, data) || (et != t && et != t2)) {
        seterr(err, errlen, "%s: not an array of %s", key, what);
        return -1;
    }
    if (n != (uint64_t)v->n_tokens) {
        seterr(err, errlen, "%s has %llu entries but there are %d tokens", key,
                  (unsigned long long)n, v->n_tokens);
        return -1;
    }
    return 1;
}

/* A required array of strings KEY: 0 with its length in *n, or -1 + err
 * ("KEY MISSING" when it is absent or not an array). */
static int string_arr(const gguf_file *g, const char *key, const char *missing, uint64_t *n,
                      char *err, size_t errlen) {
    gguf_vtype et;
    const void *data;
    if (!gguf_get_arr(g, key, &et, n, &data)) {
        seterr(err, errlen, "%s %s", key, missing);
        return -1;
    }
    if (et != SP_GGUF_STRING) {
        seterr(err, errlen, "%s: not an array of strings", key);
        return -1;
    }
    return 0;
}

/* The tokens' texts (and the text -> id table), scores and attributes. */
static int load_tokens(sp_vocab *v, const gguf_file *g, char *err, size_t errlen) {
    uint64_t n;
    const void *data;
    if (string_arr(g, K_TOKENS, "is missing (or not an array)", &n, err, errlen)) return -1;
    if (n == 0 || n > (uint64_t)INT32_MAX / 4) {
        seterr(err, errlen, "%s: bad token count %llu", K_TOKENS, (unsigned long long)n);
        return -1;
    }
    v->n_tokens = (int32_t)n;
    v->text_off = malloc(n * sizeof(uint32_t));
    v->text_len = malloc(n * sizeof(uint32_t));
    v->scores = calloc(n, sizeof(float));
    v->attr = malloc(n * sizeof(uint16_t));
    v->eog = calloc(n, 1);
    if (!v->text_off || !v->text_len || !v->scores || !v->attr || !v->eog) return oom(err, errlen);

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, K_TOKENS, i);
        total += (s.n ? s.n : 24) + 1;
        if (total > UINT32_MAX) {
            seterr(err, errlen, "%s: token texts too large", K_TOKENS);
            return -1;
        }
    }
    v->text = malloc(total);
    if (!v->text) return oom(err, errlen);
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, K_TOKENS, i);
        v->text_off[i] = (uint32_t)off;
        if (s.n == 0) { /* llama.cpp names empty tokens so that lookups stay unique */
            int k = snprintf(v->text + off, 24, "[EMPTY_%llu]", (unsigned long long)i);
            v->text_len[i] = (uint32_t)k;
            off += (size_t)k + 1;
        } else {
            memcpy(v->text + off, s.p, s.n);
            v->text[off + s.n] = 0;
            v->text_len[i] = (uint32_t)s.n;
            off += s.n + 1;
        }
    }

    /* text -> id */
    v->hash_mask = table_size(n) - 1;
    v->hash = malloc((v->hash_mask + 1) * sizeof(int32_t));
    if (!v->hash) return oom(err, errlen);
    memset(v->hash, 0xff, (v->hash_mask + 1) * sizeof(int32_t));
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *t = tok_text(v, id);
        size_t tl = v->text_len[id];
        uint64_t i = hash_slot(tok_hash_bytes(SP_TOK_HASH_SEED, t, tl)) & v->hash_mask;
        for (; v->hash[i] >= 0; i = (i + 1) & v->hash_mask) {
            int32_t o = v->hash[i];
            if (v->text_len[o] == tl && memcmp(tok_text(v, o), t, tl) == 0) {
                seterr(err, errlen, "%s: tokens %d and %d have the same text '%.*s'", K_TOKENS,
                          o, id, (int)SP_MIN(tl, 64u), t);
                return -1;
            }
        }
        v->hash[i] = id;
    }

    /* scores */
    int r = per_token_arr(g, v, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, SP_GGUF_FLOAT32,
                          "float32", &data, err, errlen);
    if (r < 0) return -1;
    if (r) memcpy(v->scores, data, (size_t)v->n_tokens * sizeof(float)); /* may be unaligned */

    /* token types -> attributes */
    for (int32_t i = 0; i < v->n_tokens; i++) v->attr[i] = SP_ATTR_NORMAL;
    r = per_token_arr(g, v, "tokenizer.ggml.token_type", SP_GGUF_INT32, SP_GGUF_UINT32, "int32",
                      &data, err, errlen);
    if (r < 0) return -1;
    if (r) {
        for (int32_t i = 0; i < v->n_tokens; i++) {
            int32_t t;
            memcpy(&t, (const char *)data + 4 * (size_t)i, 4);
            switch (t) {
            case SP_TOKEN_NORMAL: v->attr[i] = SP_ATTR_NORMAL; break;
            case SP_TOKEN_UNKNOWN: v->attr[i] = SP_ATTR_UNKNOWN; break;
            case SP_TOKEN_CONTROL: v->attr[i] = SP_ATTR_CONTROL; break;
            case SP_TOKEN_USER_DEFINED: v->attr[i] = SP_ATTR_USER_DEFINED; break;
            case SP_TOKEN_UNUSED: v->attr[i] = SP_ATTR_UNUSED; break;
            case SP_TOKEN_BYTE: v->attr[i] = SP_ATTR_BYTE; break;
            default: v->attr[i] = SP_ATTR_UNDEFINED; break;
            }
        }
    }
    return 0;
}

/* A BPE vocabulary's merges, ranked by their order (merge_hash). */
static int load_merges(sp_vocab *v, const gguf_file *g, char *err, size_t errlen) {
    uint64_t n;
    if (string_arr(g, K_MERGES, "is missing (a gpt2 tokenizer needs it)", &n, err, errlen))
        return -1;
    if (n > (uint64_t)INT32_MAX / 4) {
        seterr(err, errlen, "%s: too many merges", K_MERGES);
        return -1;
    }
    v->n_merges = (int32_t)n;
    v->merge_off = malloc((n + 1) * sizeof(uint32_t));
    v->merge_len = malloc((n + 1) * sizeof(uint32_t));
    v->merge_mask = table_size(n) - 1;
    v->merge_hash = malloc((v->merge_mask + 1) * sizeof(int32_t));
    if (!v->merge_off || !v->merge_len || !v->merge_hash) return oom(err, errlen);
    memset(v->merge_hash, 0xff, (v->merge_mask + 1) * sizeof(int32_t));
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        total += gguf_arr_str(g, K_MERGES, i).n;
        if (total > UINT32_MAX) {
            seterr(err, errlen, "%s: merges too large", K_MERGES);
            return -1;
        }
    }
    v->merge_text = malloc(total + 1);
    if (!v->merge_text) return oom(err, errlen);
    size_t off = 0;
    for (int32_t i = 0; i < v->n_merges; i++) {
        gguf_str s = gguf_arr_str(g, K_MERGES, (uint64_t)i);
        v->merge_off[i] = (uint32_t)off;
        v->merge_len[i] = (uint32_t)s.n;
        if (s.n) memcpy(v->merge_text + off, s.p, s.n);
        off += s.n;
        /* llama.cpp splits at the first space after the first byte; a
         * merge without one can never match a pair of symbols. Since
         * symbols never contain a raw space, "left right" identifies the
         * pair. The first of duplicate merges keeps its rank. */
        const char *sp = s.n > 1 ? memchr(s.p + 1, ' ', s.n - 1) : NULL;
        if (!sp) continue;
        uint64_t h = tok_hash_bytes(SP_TOK_HASH_SEED, s.p, s.n);
        uint64_t j = hash_slot(h) & v->merge_mask;
        bool dup = false;
        for (; v->merge_hash[j] >= 0; j = (j + 1) & v->merge_mask) {
            int32_t m = v->merge_hash[j];
            if (v->merge_len[m] == s.n && memcmp(v->merge_text + v->merge_off[m], s.p, s.n) == 0) {
                dup = true;
                break;
            }
        }
        if (!dup) v->merge_hash[j] = i;
    }
    return 0;
}

/* The special tokens: their ids (defaults, then the file's keys, then found
 * by their text), end of generation, the list matched in text before
 * encoding, and the strip attributes of some models. */
static int load_special(sp_vocab *v, const gguf_file *g, const pretok_info *pinfo, char *err,
                        size_t errlen) {
    if (v->kind == SP_VOCAB_SPM) {
        v->bos = 1, v->eos = 2, v->unk = 0;
    } else {
        v->bos = pinfo->no_bos ? -1 : 11; /* llama.cpp's GPT-2 defaults */
        v->eos = 11;
    }
    if (v->bos >= v->n_tokens) v->bos = -1;
    if (v->eos >= v->n_tokens) v->eos = -1;
    if (v->unk >= v->n_tokens) v->unk = -1;
    int32_t sep = -1, mask = -1;
    const struct {
        const char *key;
        int32_t *id;
        bool strict;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos, true},
        {"tokenizer.ggml.eos_token_id", &v->eos, true},
        {"tokenizer.ggml.eot_token_id", &v->eot, true},
        {"tokenizer.ggml.eom_token_id", &v->eom, true},
        {"tokenizer.ggml.unknown_token_id", &v->unk, true},
        {"tokenizer.ggml.seperator_token_id", &sep, false},
        {"tokenizer.ggml.padding_token_id", &v->pad, false},
        {"tokenizer.ggml.mask_token_id", &mask, false},
        {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre, false},
        {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf, false},
        {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid, false},
        {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad, false},
        {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep, false},
        {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep, false},
        {"tokenizer.ggml.prefix_token_id", &v->fim_pre, false},
        {"tokenizer.ggml.suffix_token_id", &v->fim_suf, false},
        {"tokenizer.ggml.middle_token_id", &v->fim_mid, false},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if (read_id(g, ids[i].key, v->n_tokens, ids[i].strict, ids[i].id, err, errlen) < 0)
            return -1;
    if (read_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen) < 0 ||
        read_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen) < 0)
        return -1;

    /* tokens found by their text become CONTROL (llama.cpp: "control-looking
     * token ... its type will be overridden") */
    const struct {
        int32_t *id;
        const char *const *texts;
    } by_text[] = {
        {&v->eot, eot_texts},         {&v->eom, eom_texts},         {&v->fim_pre, fim_pre_texts},
        {&v->fim_suf, fim_suf_texts}, {&v->fim_mid, fim_mid_texts}, {&v->fim_pad, fim_pad_texts},
        {&v->fim_rep, fim_rep_texts}, {&v->fim_sep, fim_sep_texts},
    };
    for (int32_t id = 0; id < v->n_tokens; id++) {
        for (size_t k = 0; k < sizeof(by_text) / sizeof(by_text[0]); k++) {
            if (*by_text[k].id >= 0 || !text_in(v, id, by_text[k].texts)) continue;
            *by_text[k].id = id;
            if (!(v->attr[id] & SP_ATTR_CONTROL)) v->attr[id] = SP_ATTR_CONTROL;
        }
    }

    /* end of generation */
    if (v->fim_pad >= 0) v->eog[v->fim_pad] = 1;
    if (v->fim_rep >= 0) v->eog[v->fim_rep] = 1;
    if (v->fim_sep >= 0) v->eog[v->fim_sep] = 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (!text_in(v, id, eog_texts)) continue;
        v->eog[id] = 1;
        if (!(v->attr[id] & SP_ATTR_CONTROL)) v->attr[id] = SP_ATTR_CONTROL;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;

    /* special tokens matched in text before encoding, longest first (ties by
     * id; llama.cpp's unstable sort leaves them in an unspecified order) */
    v->special = malloc((size_t)v->n_tokens * sizeof(int32_t));
    if (!v->special) return oom(err, errlen);
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->attr[id] & (SP_ATTR_CONTROL | SP_ATTR_USER_DEFINED | SP_ATTR_UNKNOWN))
            v->special[v->n_special++] = id;
    qsort_r(v->special, (size_t)v->n_special, sizeof(int32_t), cmp_special, v);

    /* model-specific strip attributes, by general.name / pre name */
    {
        gguf_str name = {NULL, 0};
        char lname[128] = "";
        if (gguf_get_str(g, "general.name", &name) && name.p) {
            size_t ln = SP_MIN(name.n, sizeof(lname) - 1);
            for (size_t i = 0; i < ln; i++) lname[i] = (char)tolower((unsigned char)name.p[i]);
            lname[ln] = 0;
        }
        if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") ||
            strstr(v->pre_name, "jina-v2-code")) {
            int32_t id = tok_lookup(v, "<mask>", 6);
            if (id >= 0) v->attr[id] |= SP_ATTR_LSTRIP;
        } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
            for (int32_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= SP_ATTR_RSTRIP;
            int32_t id = tok_lookup(v, "</s>", 4);
            if (id >= 0) v->attr[id] |= SP_ATTR_RSTRIP;
            const char *no[] = {"<unk>", "<s>", "<|endoftext|>"};
            for (int k = 0; k < 3; k++) {
                id = tok_lookup(v, no[k], strlen(no[k]));
                if (id >= 0) v->attr[id] &= (uint16_t)~SP_ATTR_RSTRIP;
            }
        }
    }
    return 0;
}

/* The byte fallback tokens and each token's piece (its text as decoded). */
static int load_pieces(sp_vocab *v, char *err, size_t errlen) {
    /* SPM byte fallback: <0xNN>, else the byte itself as a token */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        int32_t id = tok_lookup(v, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = tok_lookup(v, &c, 1);
        }
        v->byte_tok[b] = id;
    }

    /* pieces */
    v->piece_off = malloc((size_t)v->n_tokens * sizeof(uint32_t));
    v->piece_len = malloc((size_t)v->n_tokens * sizeof(uint32_t));
    if (!v->piece_off || !v->piece_len) return oom(err, errlen);
    size_t total = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t k = make_piece(v, id, NULL);
        if (k > INT32_MAX || total + k > UINT32_MAX) {
            seterr(err, errlen, "token %d: text too large", id);
            return -1;
        }
        v->piece_off[id] = (uint32_t)total;
        v->piece_len[id] = (uint32_t)k;
        total += k;
    }
    v->piece = malloc(total + 1);
    if (!v->piece) return oom(err, errlen);
    for (int32_t id = 0; id < v->n_tokens; id++) make_piece(v, id, v->piece + v->piece_off[id]);
    return 0;
}

sp_vocab *vocab_load(const gguf_file *g, char *err, size_t errlen) {
    sp_vocab *v = calloc(1, sizeof(*v));
    if (!v) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    pretok_info pinfo = {0};
    if (load_kind(v, g, &pinfo, err, errlen) || load_tokens(v, g, err, errlen) ||
        (v->kind == SP_VOCAB_BPE && load_merges(v, g, err, errlen)) ||
        load_special(v, g, &pinfo, err, errlen) || load_pieces(v, err, errlen))
        goto fail;
    if (v->kind == SP_VOCAB_BPE) {
        v->pretok = tok_pretok_create(pinfo.regexes, pinfo.n_regexes, err, errlen);
        if (!v->pretok) goto fail;
    }
    if (!work_bounds(v)) {
        oom(err, errlen);
        goto fail;
    }
    return v;
fail:
    vocab_free(v);
    return NULL;
}

void vocab_free(sp_vocab *v) {
    if (!v) return;
    free(v->text);
    free(v->text_off);
    free(v->text_len);
    free(v->scores);
    free(v->attr);
    free(v->hash);
    free(v->merge_text);
    free(v->merge_off);
    free(v->merge_len);
    free(v->merge_hash);
    free(v->eog);
    free(v->special);
    free(v->piece);
    free(v->piece_off);
    free(v->piece_len);
    tok_pretok_free(v->pretok);
    free(v->pair_bits);
    free(v);
}

sp_vocab_kind sp_vocab_kind_of(const sp_vocab *v) { return v->kind; }
const char *sp_vocab_pre_name(const sp_vocab *v) { return v->pre_name; }
int32_t sp_vocab_n_tokens(const sp_vocab *v) { return v->n_tokens; }
int32_t sp_vocab_bos(const sp_vocab *v) { return v->bos; }
int32_t sp_vocab_eos(const sp_vocab *v) { return v->eos; }
int32_t sp_vocab_eot(const sp_vocab *v) { return v->eot; }
bool sp_vocab_add_bos(const sp_vocab *v) { return v->add_bos; }
bool sp_vocab_add_eos(const sp_vocab *v) { return v->add_eos; }
int32_t sp_vocab_max_token_bytes(const sp_vocab *v) { return (int32_t)v->max_token_bytes; }

int32_t sp_vocab_find(const sp_vocab *v, const char *s, size_t len) {
    return s ? tok_lookup(v, s, len) : -1;
}

bool sp_vocab_is_eog(const sp_vocab *v, int32_t tok) {
    return tok >= 0 && tok < v->n_tokens && v->eog[tok];
}

sp_token_type sp_vocab_token_type(const sp_vocab *v, int32_t tok) {
    if (tok < 0 || tok >= v->n_tokens) return (sp_token_type)0;
    uint16_t a = v->attr[tok];
    if (a & SP_ATTR_UNKNOWN) return SP_TOKEN_UNKNOWN;
    if (a & SP_ATTR_CONTROL) return SP_TOKEN_CONTROL;
    if (a & SP_ATTR_USER_DEFINED) return SP_TOKEN_USER_DEFINED;
    if (a & SP_ATTR_UNUSED) return SP_TOKEN_UNUSED;
    if (a & SP_ATTR_BYTE) return SP_TOKEN_BYTE;
    if (a & SP_ATTR_NORMAL) return SP_TOKEN_NORMAL;
    return (sp_token_type)0; /* undefined in the file */
}

const char *sp_vocab_token_text(const sp_vocab *v, int32_t tok) {
    if (tok < 0 || tok >= v->n_tokens) return NULL;
    return tok_text(v, tok);
}

int sp_token_to_piece(const sp_vocab *v, int32_t tok, char *buf, int len, bool render_special) {
    if (tok < 0 || tok >= v->n_tokens) return 0;
    if (!render_special && (v->attr[tok] & (SP_ATTR_UNKNOWN | SP_ATTR_CONTROL))) return 0;
    int n = (int)v->piece_len[tok];
    if (len < n) return -n;
    /* buf may be NULL for a size query (len 0), which a token with an
     * empty piece (a hostile vocabulary) answers here */
    if (n) memcpy(buf, v->piece + v->piece_off[tok], (size_t)n);
    return n;
}
