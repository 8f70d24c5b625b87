/* model.c: loading a GGUF file into an immutable sp_model.
 *
 * Weights stay where the mapping has them, in their stored type; only the
 * small per-channel vectors (norms, biases, RoPE factors) are converted to
 * owned f32 arrays, so the forward pass never branches on their type. */
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

sp_model_params sp_model_default_params(void) {
    sp_model_params p = {0};
    return p;
}

typedef struct {
    sp_model *m;
    char *err;
    size_t errlen;
    const char *path;
} loader;

static bool get_u32_key(loader *l, const char *suffix, uint32_t *out, bool required) {
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", l->m->arch->name, suffix);
    if (gguf_get_u32(l->m->gguf, key, out)) return true;
    if (required) {
        if (gguf_find_key(l->m->gguf, key) >= 0)
            seterr(l->err, l->errlen, "%s: metadata %s has a type or value that is not a 32-bit count",
                      l->path, key);
        else
            seterr(l->err, l->errlen, "%s: missing metadata %s", l->path, key);
    }
    return false;
}

/* An optional float: true when absent (out untouched) or read; false with
 * a message when the key holds something else (a silent default would run
 * the model with a hyperparameter other than the file's), or a value that
 * is not finite and in [lo, hi]: inf or NaN there would turn every logit
 * into NaN, and absurd magnitudes into garbage, without a word. */
static bool get_f32_key(loader *l, const char *suffix, float lo, float hi, float *out) {
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", l->m->arch->name, suffix);
    if (gguf_find_key(l->m->gguf, key) < 0) return true;
    float f;
    if (!gguf_get_f32(l->m->gguf, key, &f)) {
        seterr(l->err, l->errlen, "%s: metadata %s is not a floating-point number", l->path,
                  key);
        return false;
    }
    if (!isfinite(f) || f < lo || f > hi) {
        seterr(l->err, l->errlen, "%s: metadata %s = %g is out of range (a finite number in "
                  "[%g, %g])", l->path, key, f, lo, hi);
        return false;
    }
    *out = f;
    return true;
}

/* Finds a 2-D weight [n_in -> n_out]; fails with a message on absence (when
 * required), wrong shape or a type without kernels. */
static bool load_weight(loader *l, const char *name, int64_t n_in, int64_t n_out, bool required,
                        model_weight *w) {
    const gguf_tensor *t = gguf_find_tensor(l->m->gguf, name);
    memset(w, 0, sizeof(*w));
    if (!t) {
        if (required) seterr(l->err, l->errlen, "%s: missing tensor %s", l->path, name);
        return !required;
    }
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1) {
        seterr(l->err, l->errlen,
                  "%s: tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                  "], expected [%" PRId64 ", %" PRId64 "]",
                  l->path, name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], n_in, n_out);
        return false;
    }
    const type_traits *tt = type_info(t->type);
    if (!tt || !tt->supported) {
        seterr(l->err, l->errlen, "%s: tensor %s has type %s, which Specula does not support "
                  "(supported: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)",
                  l->path, name, tt ? tt->name : "unknown");
        return false;
    }
    *w = (model_weight){t->data, t->type, n_in, n_out, NULL, NULL};
    l->m->info.n_params += (uint64_t)(n_in * n_out);
    l->m->info.weight_bytes += t->nbytes;
    return true;
}

/* A 1-D vector of n values converted to an owned f32 array. */
static bool load_vec(loader *l, const char *name, int64_t n, bool required, float **out) {
    const gguf_tensor *t = gguf_find_tensor(l->m->gguf, name);
    *out = NULL;
    if (!t) {
        if (required) seterr(l->err, l->errlen, "%s: missing tensor %s", l->path, name);
        return !required;
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        seterr(l->err, l->errlen, "%s: tensor %s has shape [%" PRId64 ", %" PRId64
                  "], expected [%" PRId64 "]", l->path, name, t->ne[0], t->ne[1], n);
        return false;
    }
    const type_traits *tt = type_info(t->type);
    if (!tt || !(tt->supported) || n % tt->blck) {
        seterr(l->err, l->errlen, "%s: tensor %s has unsupported type %s", l->path, name,
                  tt ? tt->name : "unknown");
        return false;
    }
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) {
        seterr(l->err, l->errlen, "out of memory");
        return false;
    }
    dequantize_row(t->type, t->data, *out, n);
    l->m->info.n_params += (uint64_t)n;
    l->m->info.weight_bytes += t->nbytes;
    return true;
}

static bool load_hparams(loader *l) {
    sp_model *m = l->m;
    sp_model_info *h = &m->info;
    uint32_t v;
    if (!get_u32_key(l, "embedding_length", &v, true)) return false;
    h->n_embd = (int32_t)v;
    if (!get_u32_key(l, "block_count", &v, true)) return false;
    h->n_layer = (int32_t)v;
    if (!get_u32_key(l, "feed_forward_length", &v, true)) return false;
    h->n_ff = (int32_t)v;
    if (!get_u32_key(l, "attention.head_count", &v, true)) return false;
    h->n_head = (int32_t)v;
    h->n_head_kv = h->n_head;
    {
        char key[160];
        snprintf(key, sizeof(key), "%s.attention.head_count_kv", m->arch->name);
        if (gguf_find_key(m->gguf, key) >= 0) { /* present: must be one count */
            if (!get_u32_key(l, "attention.head_count_kv", &v, true)) return false;
            h->n_head_kv = (int32_t)v;
        }
    }
    h->n_ctx_train = 4096;
    if (get_u32_key(l, "context_length", &v, false)) {
        /* 0 or beyond what a context can have (forward.c's limit): the
         * default context would be 0, or negative as an int32_t */
        if (v == 0 || v > (1u << 24)) {
            seterr(l->err, l->errlen, "%s: metadata %s.context_length = %u is out of range "
                      "(1 to %u)", l->path, m->arch->name, v, 1u << 24);
            return false;
        }
        h->n_ctx_train = (int32_t)v;
    }
    if (h->n_embd <= 0 || h->n_embd > (1 << 16) || h->n_layer <= 0 || h->n_layer > 1024 ||
        h->n_head <= 0 || h->n_head > 1024 || h->n_head_kv <= 0 || h->n_ff <= 0 ||
        h->n_ff > (1 << 20) || h->n_head % h->n_head_kv != 0 || h->n_embd % h->n_head != 0) {
        seterr(l->err, l->errlen,
                  "%s: inconsistent hyperparameters (n_embd %d, n_layer %d, n_head %d, "
                  "n_head_kv %d, n_ff %d)", l->path, h->n_embd, h->n_layer, h->n_head,
                  h->n_head_kv, h->n_ff);
        return false;
    }
    h->head_dim = h->n_embd / h->n_head;
    if (get_u32_key(l, "attention.key_length", &v, false)) h->head_dim = (int32_t)v;
    uint32_t rope_dims = (uint32_t)h->head_dim;
    if (get_u32_key(l, "rope.dimension_count", &v, false)) rope_dims = v;
    if (h->head_dim <= 0 || h->head_dim > 1024 || h->head_dim % 2 ||
        rope_dims != (uint32_t)h->head_dim) {
        seterr(l->err, l->errlen, "%s: head_dim %d with rope.dimension_count %u is not "
                  "supported (partial RoPE)", l->path, h->head_dim, rope_dims);
        return false;
    }
    /* the value head must be the key head: one head_dim throughout */
    if (get_u32_key(l, "attention.value_length", &v, false) && v != (uint32_t)h->head_dim) {
        seterr(l->err, l->errlen, "%s: attention.value_length %u differs from the key length "
                  "%d, which is not supported", l->path, v, h->head_dim);
        return false;
    }
    /* Ranges far beyond any model's but short of what breaks the
     * arithmetic: a RoPE base below 1 or above 1e12 (models use 1e4 to
     * 1e8), an epsilon that is 0 (a zero vector's norm divides by 0) or
     * above 1 (it would swamp the activations). */
    h->rope_base = m->arch->default_rope_base;
    if (!get_f32_key(l, "rope.freq_base", 1.0f, 1e12f, &h->rope_base)) return false;
    h->norm_eps = m->arch->default_eps;
    if (!get_f32_key(l, "attention.layer_norm_rms_epsilon", 1e-30f, 1.0f, &h->norm_eps))
        return false;
    h->rope_freq_scale = 1.0f;
    char key[160];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->arch->name);
    gguf_str st;
    if (gguf_get_str(m->gguf, key, &st) && st.n == 6 && memcmp(st.p, "linear", 6) == 0) {
        /* 0 means no scaling, as in llama.cpp; else its inverse scales the
         * positions, so it must be a sane positive number */
        float f = 0.0f;
        if (!get_f32_key(l, "rope.scaling.factor", 0.0f, 1e6f, &f)) return false;
        if (f > 0 && f < 1e-6f) {
            seterr(l->err, l->errlen, "%s: metadata %s.rope.scaling.factor = %g is out of "
                      "range (0, or a number in [1e-06, 1e+06])", l->path, m->arch->name, f);
            return false;
        }
        if (f > 0) h->rope_freq_scale = 1.0f / f;
    }
    return true;
}

static bool load_tensors(loader *l) {
    sp_model *m = l->m;
    sp_model_info *h = &m->info;
    const int64_t E = h->n_embd, F = h->n_ff, V = h->n_vocab;
    const int64_t QD = (int64_t)h->n_head * h->head_dim, KD = (int64_t)h->n_head_kv * h->head_dim;
    if (!load_weight(l, "token_embd.weight", E, V, true, &m->tok_embd)) return false;
    h->tok_embd_bytes = row_size(m->tok_embd.type, E) * (uint64_t)V;
    if (!load_vec(l, "output_norm.weight", E, true, &m->output_norm)) return false;
    if (!load_weight(l, "output.weight", E, V, false, &m->output)) return false;
    h->tied_output = m->output.data == NULL;
    if (h->tied_output) m->output = m->tok_embd;
    const gguf_tensor *rf = gguf_find_tensor(m->gguf, "rope_freqs.weight");
    if (rf && !load_vec(l, "rope_freqs.weight", h->head_dim / 2, true, &m->rope_factors))
        return false;
    /* the RoPE angles are divided by these */
    for (int32_t i = 0; m->rope_factors && i < h->head_dim / 2; i++)
        if (!isfinite(m->rope_factors[i]) || !(m->rope_factors[i] > 0)) {
            seterr(l->err, l->errlen, "%s: rope_freqs.weight[%d] = %g (the frequency factors "
                      "must be finite and positive)", l->path, i, m->rope_factors[i]);
            return false;
        }
    h->rope_freq_factors = m->rope_factors != NULL;

    m->layers = calloc((size_t)h->n_layer, sizeof(model_layer));
    if (!m->layers) {
        seterr(l->err, l->errlen, "out of memory");
        return false;
    }
    char name[96];
#define NAME(fmt) (snprintf(name, sizeof(name), "blk.%d." fmt, i), name)
    for (int i = 0; i < h->n_layer; i++) {
        model_layer *y = &m->layers[i];
        bool bias = m->arch->qkv_bias;
        if (!load_vec(l, NAME("attn_norm.weight"), E, true, &y->attn_norm) ||
            !load_weight(l, NAME("attn_q.weight"), E, QD, true, &y->wq) ||
            !load_weight(l, NAME("attn_k.weight"), E, KD, true, &y->wk) ||
            !load_weight(l, NAME("attn_v.weight"), E, KD, true, &y->wv) ||
            !load_weight(l, NAME("attn_output.weight"), QD, E, true, &y->wo) ||
            !load_vec(l, NAME("attn_q.bias"), QD, bias, &y->bq) ||
            !load_vec(l, NAME("attn_k.bias"), KD, bias, &y->bk) ||
            !load_vec(l, NAME("attn_v.bias"), KD, bias, &y->bv) ||
            !load_vec(l, NAME("ffn_norm.weight"), E, true, &y->ffn_norm) ||
            !load_weight(l, NAME("ffn_gate.weight"), E, F, true, &y->w_gate) ||
            !load_weight(l, NAME("ffn_up.weight"), E, F, true, &y->w_up) ||
            !load_weight(l, NAME("ffn_down.weight"), F, E, true, &y->w_down))
            return false;
    }
#undef NAME
    return true;
}

/* Load-time repacking: every matrix whose type the active kernel level has
 * a layout for is copied, packed, into one anonymous mapping (huge pages
 * where the kernel gives them: a decode pass streams all of it), and the
 * file pages it was read from are dropped from this process (they come
 * back from the file if read again: the token table, the fingerprint).
 * Not an error when it cannot be done: the file's layout serves. */
static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Matrix i of the 1 + 7 * n_layer that matmul multiplies by: the output
 * head, then each layer's. */
static model_weight *matrix_at(sp_model *m, int i) {
    if (i == 0) return &m->output;
    model_layer *y = &m->layers[(i - 1) / 7];
    model_weight *lw[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
    return lw[(i - 1) % 7];
}

static void repack_weights(sp_model *m) {
    const char *env = getenv("SPECULA_REPACK");
    if (env && !strcmp(env, "0")) return;
    const int n = 1 + 7 * m->info.n_layer;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const model_weight *w = matrix_at(m, i);
        total += align_up(matmul_packed_size(w->type, w->n_out, w->n_in), 64);
    }
    if (!total) return;
    const double t0 = time_s();
    void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return;
    madvise(mem, total, MADV_HUGEPAGE);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        model_weight *w = matrix_at(m, i);
        const size_t sz = matmul_packed_size(w->type, w->n_out, w->n_in);
        if (!sz) continue;
        w->packed_level = matmul_pack(w->type, w->data, w->n_out, w->n_in, (uint8_t *)mem + off);
        w->packed = (uint8_t *)mem + off;
        off += align_up(sz, 64);
        if (w->data == m->tok_embd.data) continue; /* tied: the token table reads it */
        const uintptr_t a = align_up((uintptr_t)w->data, page);
        const uintptr_t b = ((uintptr_t)w->data + row_size(w->type, w->n_in) * (size_t)w->n_out) / page * page;
        if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
    }
    mprotect(mem, total, PROT_READ);
    m->packed = mem;
    m->packed_len = total;
    m->info.repacked_bytes = off;
    m->info.repack_s = time_s() - t0;
}

sp_model *sp_model_load(const char *path, sp_model_params params, char *err, size_t errlen) {
    kernels_init();
    sp_model *m = calloc(1, sizeof(*m));
    if (!m) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    loader l = {m, err, errlen, path};
    m->gguf = gguf_open(path, err, errlen);
    if (!m->gguf) goto fail;

    /* vocab_only / meta_only: the tokenizer does not depend on the
     * architecture, so any (or none) is accepted, as llama.cpp's vocab-only
     * mode loads the tokenizer.* keys of any file */
    const bool partial = params.vocab_only || params.meta_only;
    gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) {
        if (!partial) {
            seterr(err, errlen, "%s: missing metadata general.architecture", path);
            goto fail;
        }
        arch = (gguf_str){"", 0};
    }
    snprintf(m->arch_name, sizeof(m->arch_name), "%.*s",
             (int)SP_MIN(arch.n, sizeof(m->arch_name) - 1), arch.p);
    m->arch = arch_find(m->arch_name);
    if (!m->arch && !partial) {
        seterr(err, errlen, "%s: architecture '%s' is not supported (supported: %s)", path,
                  m->arch_name, sp_arch_names());
        goto fail;
    }
    m->info.arch = m->arch ? m->arch->name : m->arch_name;
    gguf_str nm;
    if (gguf_get_str(m->gguf, "general.name", &nm))
        snprintf(m->name, sizeof(m->name), "%.*s", (int)SP_MIN(nm.n, 127), nm.p);
    m->info.name = m->name;

    if (params.meta_only) {
        m->vocab = vocab_load(m->gguf, m->vocab_err, sizeof(m->vocab_err));
        if (m->vocab) m->info.n_vocab = sp_vocab_n_tokens(m->vocab);
        return m;
    }
    m->vocab = vocab_load(m->gguf, m->vocab_err, sizeof(m->vocab_err));
    if (!m->vocab) {
        seterr(err, errlen, "%s: %s", path, m->vocab_err);
        goto fail;
    }
    m->info.n_vocab = sp_vocab_n_tokens(m->vocab);
    if (params.vocab_only) return m;

    if (!load_hparams(&l) || !load_tensors(&l)) goto fail;
    if (!params.no_repack) repack_weights(m);
    return m;
fail:
    sp_model_free(m);
    return NULL;
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int i = 0; i < m->info.n_layer; i++) {
            model_layer *y = &m->layers[i];
            free(y->attn_norm);
            free(y->ffn_norm);
            free(y->bq);
            free(y->bk);
            free(y->bv);
        }
        free(m->layers);
    }
    free(m->output_norm);
    free(m->rope_factors);
    if (m->packed) munmap(m->packed, m->packed_len);
    vocab_free(m->vocab);
    gguf_close(m->gguf);
    free(m);
}

const sp_model_info *sp_model_get_info(const sp_model *m) { return &m->info; }
const sp_vocab *sp_model_get_vocab(const sp_model *m) { return m->vocab; }
bool sp_model_arch_supported(const sp_model *m) { return m->arch != NULL; }

/* Copies s[n] as sp_model_meta_str does; returns n (capped at INT32_MAX). */
static int copy_out(const char *s, size_t n, char *buf, size_t len) {
    if (buf && len) {
        size_t k = n < len - 1 ? n : len - 1;
        memcpy(buf, s, k);
        buf[k] = 0;
    }
    return (int)(n > INT32_MAX ? INT32_MAX : n);
}

int32_t sp_model_meta_count(const sp_model *m) {
    int64_t n = gguf_n_kv(m->gguf);
    return (int32_t)(n > INT32_MAX ? INT32_MAX : n);
}

int sp_model_meta_key_by_index(const sp_model *m, int32_t i, char *buf, size_t len) {
    if (i < 0 || i >= sp_model_meta_count(m)) return -1;
    const char *k = gguf_key(m->gguf, i);
    return copy_out(k, strlen(k), buf, len);
}

int sp_model_meta_val_str_by_index(const sp_model *m, int32_t i, char *buf, size_t len) {
    if (i < 0 || i >= sp_model_meta_count(m)) return -1;
    char tmp[1024];
    gguf_kv_format(m->gguf, i, tmp, sizeof(tmp));
    return copy_out(tmp, strlen(tmp), buf, len);
}

int64_t sp_model_n_tensors(const sp_model *m) { return gguf_n_tensors(m->gguf); }

int sp_model_tensor_desc(const sp_model *m, int64_t i, sp_tensor_desc *out) {
    if (i < 0 || i >= gguf_n_tensors(m->gguf)) return -1;
    const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
    const type_traits *ti = type_info(t->type);
    out->name = t->name;
    out->type = ti ? ti->name : "?";
    out->n_dims = t->n_dims;
    for (int d = 0; d < 4; d++) out->ne[d] = d < SP_GGUF_MAX_DIMS ? t->ne[d] : 1;
    out->nbytes = t->nbytes;
    return 0;
}

/* bytes per tensor type */
static void print_tensor_types(const sp_model *m, FILE *f) {
    uint64_t bytes[SP_TYPE_COUNT] = {0}, count[SP_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if ((int)t->type < SP_TYPE_COUNT) {
            bytes[t->type] += t->nbytes;
            count[t->type]++;
        }
    }
    fprintf(f, "tensor types: ");
    bool any = false;
    for (int t = 0; t < SP_TYPE_COUNT; t++)
        if (count[t]) {
            fprintf(f, " %s x%" PRIu64 " (%.1f MiB)", type_info(t)->name, count[t],
                    bytes[t] / 1048576.0);
            any = true;
        }
    fprintf(f, "%s\n", any ? "" : " (no tensors)");
}

void sp_model_print_info(const sp_model *m, int n_ctx, void *file) {
    FILE *f = file;
    const sp_model_info *h = &m->info;
    fprintf(f, "file:          GGUF v%u, %zu bytes, %" PRId64 " tensors, %" PRId64 " metadata keys\n",
            gguf_version(m->gguf), gguf_file_size(m->gguf), gguf_n_tensors(m->gguf),
            gguf_n_kv(m->gguf));
    fprintf(f, "name:          %s\n", h->name[0] ? h->name : "(none)");
    if (m->arch)
        fprintf(f, "architecture:  %s (rope %s%s)\n", h->arch,
                m->arch->rope == SP_ROPE_NEOX ? "neox" : "norm",
                m->arch->qkv_bias ? ", qkv bias" : "");
    else
        fprintf(f, "architecture:  %s (not supported by this build, which runs: %s)\n",
                h->arch[0] ? h->arch : "(none)", sp_arch_names());
    if (m->vocab)
        fprintf(f, "tokenizer:     %s, %d tokens, pre '%s', bos %d, eos %d\n",
                sp_vocab_kind_of(m->vocab) == SP_VOCAB_SPM ? "llama (SentencePiece)"
                                                           : "gpt2 (byte-level BPE)",
                h->n_vocab, sp_vocab_pre_name(m->vocab), sp_vocab_bos(m->vocab),
                sp_vocab_eos(m->vocab));
    else
        fprintf(f, "tokenizer:     none usable (%s)\n", m->vocab_err);
    if (!m->layers) {
        /* vocab_only / meta_only: what the tensor directory says */
        print_tensor_types(m, f);
        return;
    }
    fprintf(f, "n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, n_ctx_train %d\n",
            h->n_embd, h->n_layer, h->n_head, h->n_head_kv, h->head_dim, h->n_ff, h->n_ctx_train);
    fprintf(f, "rope base %g, freq scale %g%s, rms eps %g, output %s\n", h->rope_base,
            h->rope_freq_scale, h->rope_freq_factors ? ", llama3 frequency factors" : "",
            h->norm_eps, h->tied_output ? "tied to token_embd" : "separate");
    print_tensor_types(m, f);
    fprintf(f, "parameters:    %.2f M, weights %.1f MiB\n", h->n_params / 1e6,
            h->weight_bytes / 1048576.0);
    size_t kv = 2ull * h->n_layer * (size_t)n_ctx * h->n_head_kv * h->head_dim * 2;
    fprintf(f, "memory:        weights %.1f MiB (mapped) + f16 KV %.1f MiB per %d-token sequence\n",
            h->weight_bytes / 1048576.0, kv / 1048576.0, n_ctx);
    if (h->repacked_bytes)
        fprintf(f, "repacked:      %.1f MiB of them for the %s kernels in %.2f s (a copy; the file's pages are "
                   "released; SPECULA_REPACK=0 keeps the file's layout)\n",
                h->repacked_bytes / 1048576.0, kernels_level(), h->repack_s);
}

int sp_model_meta_str(const sp_model *m, const char *key, char *buf, size_t len) {
    gguf_str s;
    if (!m->gguf || !gguf_get_str(m->gguf, key, &s)) return -1;
    if (buf && len) {
        size_t n = s.n < len - 1 ? s.n : len - 1;
        memcpy(buf, s.p, n);
        buf[n] = 0;
    }
    return (int)(s.n > INT32_MAX ? INT32_MAX : s.n);
}
