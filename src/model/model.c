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

/* Finds a weight of n_mat matrices [n_in -> n_out] (ne2 = n_mat: experts),
 * kept as one matrix of n_mat * n_out rows; fails with a message on
 * absence (when required), wrong shape or a type without kernels. */
static bool load_weight_n(loader *l, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat, bool required,
                          model_weight *w) {
    const gguf_tensor *t = gguf_find_tensor(l->m->gguf, name);
    memset(w, 0, sizeof(*w));
    if (!t) {
        if (required) seterr(l->err, l->errlen, "%s: missing tensor %s", l->path, name);
        return !required;
    }
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_mat || t->ne[3] != 1) {
        seterr(l->err, l->errlen,
                  "%s: tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                  "], expected [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                  l->path, name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], n_in, n_out, n_mat);
        return false;
    }
    n_out *= n_mat;
    const type_traits *tt = type_info(t->type);
    if (!tt || !tt->supported) {
        seterr(l->err, l->errlen, "%s: tensor %s has type %s, which Specula does not support "
                  "(supported: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q6_K)",
                  l->path, name, tt ? tt->name : "unknown");
        return false;
    }
    *w = (model_weight){t->data, t->type, n_in, n_out, NULL, NULL, n_mat};
    l->m->info.n_params += (uint64_t)(n_in * n_out);
    l->m->info.weight_bytes += t->nbytes;
    if (n_mat > 1) l->m->info.expert_bytes += t->nbytes;
    return true;
}

static bool load_weight(loader *l, const char *name, int64_t n_in, int64_t n_out, bool required,
                        model_weight *w) {
    return load_weight_n(l, name, n_in, n_out, 1, required, w);
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

/* The per-layer layout: which layers slide (and with what window and RoPE
 * base), which have no RoPE, and the attention scale. */
static bool load_layout(loader *l) {
    sp_model *m = l->m;
    sp_model_info *h = &m->info;
    const model_arch *a = m->arch;
    uint32_t v;
    h->n_swa = 0;
    if (a->swa_every) {
        char key[160];
        snprintf(key, sizeof(key), "%s.attention.sliding_window", a->name);
        if (gguf_find_key(m->gguf, key) >= 0) {
            if (!get_u32_key(l, "attention.sliding_window", &v, true)) return false;
            h->n_swa = (int32_t)SP_MIN(v, (uint32_t)INT32_MAX);
        } else if (a->swa_every > 1) { /* gemma3: its window is part of the block */
            seterr(l->err, l->errlen, "%s: missing metadata %s", l->path, key);
            return false;
        } else if ((h->n_layer == 32 || h->n_layer == 40) && h->n_ctx_train == 4096) {
            h->n_swa = 2047; /* Phi-3-mini/medium-4k files written before the key existed */
        }
    }
    /* a window that covers the whole trained context is no window */
    if (h->n_swa >= h->n_ctx_train) h->n_swa = 0;
    for (int32_t i = 0; i < h->n_layer; i++) {
        model_layer *y = &m->layers[i];
        const bool slides = h->n_swa > 0 && (a->swa_every == 1 || (i + 1) % a->swa_every != 0);
        y->window = slides ? h->n_swa : 0;
        y->rope_swa = slides && a->swa_rope_base > 0;
        y->rope = !(a->nope_every && (i + 1) % a->nope_every == 0);
        h->n_swa_layers += slides;
        h->n_nope_layers += !y->rope;
    }
    /* Gemma 3 27B scales by n_embd / n_head (its query_pre_attn_scalar), the
     * others by head_dim, as llama.cpp decides by the layer count */
    float qpa = a == arch_find("gemma3") && h->n_layer == 62 ? (float)h->n_embd / h->n_head : (float)h->head_dim;
    if (!get_f32_key(l, "attention.query_pre_attn_scalar", 1e-3f, 1e6f, &qpa)) return false;
    m->attn_scale = 1.0f / sqrtf(qpa);
    m->rope_orig_ctx = h->n_ctx_train;
    if (get_u32_key(l, "rope.scaling.original_context_length", &v, false)) m->rope_orig_ctx = (int32_t)SP_MIN(v, (uint32_t)INT32_MAX);
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
    char key[160];
    snprintf(key, sizeof(key), "%s.attention.key_length", m->arch->name);
    const bool key_len = gguf_find_key(m->gguf, key) >= 0; /* else head_dim = n_embd / n_head */
    if (h->n_embd <= 0 || h->n_embd > (1 << 16) || h->n_layer <= 0 || h->n_layer > 1024 ||
        h->n_head <= 0 || h->n_head > 1024 || h->n_head_kv <= 0 || h->n_ff <= 0 ||
        h->n_ff > (1 << 20) || h->n_head % h->n_head_kv != 0 || (!key_len && h->n_embd % h->n_head != 0)) {
        seterr(l->err, l->errlen,
                  "%s: inconsistent hyperparameters (n_embd %d, n_layer %d, n_head %d, "
                  "n_head_kv %d, n_ff %d)", l->path, h->n_embd, h->n_layer, h->n_head,
                  h->n_head_kv, h->n_ff);
        return false;
    }
    if (m->arch->moe) {
        /* qwen3moe: the router's experts, the k each token takes, their
         * hidden size (feed_forward_length when absent, as llama.cpp) */
        if (!get_u32_key(l, "expert_count", &v, true)) return false;
        h->n_expert = (int32_t)SP_MIN(v, (uint32_t)INT32_MAX);
        if (!get_u32_key(l, "expert_used_count", &v, true)) return false;
        h->n_expert_used = (int32_t)SP_MIN(v, (uint32_t)INT32_MAX);
        h->n_ff_exp = h->n_ff;
        if (get_u32_key(l, "expert_feed_forward_length", &v, false)) h->n_ff_exp = (int32_t)SP_MIN(v, (uint32_t)INT32_MAX);
        if (h->n_expert < 1 || h->n_expert > SP_MAX_EXPERTS || h->n_expert_used < 1 ||
            h->n_expert_used > SP_MIN(h->n_expert, SP_MAX_EXPERTS_USED) || h->n_ff_exp < 1 || h->n_ff_exp > (1 << 20)) {
            seterr(l->err, l->errlen, "%s: inconsistent mixture of experts (expert_count %d, expert_used_count %d, "
                      "expert_feed_forward_length %d; at most %d experts, %d used)", l->path, h->n_expert,
                      h->n_expert_used, h->n_ff_exp, SP_MAX_EXPERTS, SP_MAX_EXPERTS_USED);
            return false;
        }
    }
    h->head_dim = h->n_embd / h->n_head;
    if (key_len && !get_u32_key(l, "attention.key_length", &v, true)) return false;
    if (key_len) h->head_dim = (int32_t)v;
    uint32_t rope_dims = (uint32_t)h->head_dim;
    if (get_u32_key(l, "rope.dimension_count", &v, false)) rope_dims = v;
    /* partial RoPE (Phi-4-mini: 96 of 128): the first n_rot of each head rotate */
    if (h->head_dim <= 0 || h->head_dim > 1024 || h->head_dim % 2 || rope_dims == 0 || rope_dims % 2 ||
        rope_dims > (uint32_t)h->head_dim) {
        seterr(l->err, l->errlen, "%s: head_dim %d with rope.dimension_count %u is not "
                  "supported (an even count of at most head_dim)", l->path, h->head_dim, rope_dims);
        return false;
    }
    h->n_rot = (int32_t)rope_dims;
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
    m->rope_attn_factor = 1.0f;
    if (!get_f32_key(l, "rope.scaling.attn_factor", 1e-3f, 1e3f, &m->rope_attn_factor)) return false;
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
    /* RoPE frequency divisors: llama3's, or LongRoPE's pair (phi3) */
    static const char *const fnames[] = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"};
    float **fdst[] = {&m->rope_factors, &m->rope_long, &m->rope_short};
    for (int f = 0; f < 3; f++) {
        if (f && !m->arch->longrope) continue;
        if (gguf_find_tensor(m->gguf, fnames[f]) && !load_vec(l, fnames[f], h->n_rot / 2, true, fdst[f]))
            return false;
        /* the RoPE angles are divided by these */
        for (int32_t i = 0; *fdst[f] && i < h->n_rot / 2; i++)
            if (!isfinite((*fdst[f])[i]) || !((*fdst[f])[i] > 0)) {
                seterr(l->err, l->errlen, "%s: %s[%d] = %g (the frequency factors "
                          "must be finite and positive)", l->path, fnames[f], i, (*fdst[f])[i]);
                return false;
            }
    }
    if (!m->rope_long != !m->rope_short) {
        seterr(l->err, l->errlen, "%s: LongRoPE needs both rope_factors_long and rope_factors_short", l->path);
        return false;
    }
    h->rope_freq_factors = m->rope_factors != NULL || m->rope_long != NULL;

    m->layers = calloc((size_t)h->n_layer, sizeof(model_layer));
    if (!m->layers) {
        seterr(l->err, l->errlen, "out of memory");
        return false;
    }
    if (!load_layout(l)) return false;
    const model_arch *a = m->arch;
    char name[96];
#define NAME(fmt) (snprintf(name, sizeof(name), "blk.%d." fmt, i), name)
    for (int i = 0; i < h->n_layer; i++) {
        model_layer *y = &m->layers[i];
        bool bias = a->qkv_bias;
        /* phi3 writes fused matrices; a converter may also split them */
        const bool fqkv = a->fused && gguf_find_tensor(m->gguf, NAME("attn_qkv.weight"));
        const bool fup = a->fused && !gguf_find_tensor(m->gguf, NAME("ffn_gate.weight"));
        const bool moe = a->moe;
        const int64_t X = h->n_expert, Fx = h->n_ff_exp;
        if (!load_vec(l, NAME("attn_norm.weight"), E, true, &y->attn_norm) ||
            (fqkv && !load_weight(l, NAME("attn_qkv.weight"), E, QD + 2 * KD, true, &y->wqkv)) ||
            (!fqkv && (!load_weight(l, NAME("attn_q.weight"), E, QD, true, &y->wq) ||
                       !load_weight(l, NAME("attn_k.weight"), E, KD, true, &y->wk) ||
                       !load_weight(l, NAME("attn_v.weight"), E, KD, true, &y->wv))) ||
            !load_weight(l, NAME("attn_output.weight"), QD, E, true, &y->wo) ||
            !load_vec(l, NAME("attn_q.bias"), QD, bias, &y->bq) ||
            !load_vec(l, NAME("attn_k.bias"), KD, bias, &y->bk) ||
            !load_vec(l, NAME("attn_v.bias"), KD, bias, &y->bv) ||
            !load_vec(l, NAME("attn_q_norm.weight"), h->head_dim, a->qk_norm, &y->q_norm) ||
            !load_vec(l, NAME("attn_k_norm.weight"), h->head_dim, a->qk_norm, &y->k_norm) ||
            !load_vec(l, NAME("post_attention_norm.weight"), E, a->sandwich, &y->post_attn_norm) ||
            !load_vec(l, NAME("ffn_norm.weight"), E, true, &y->ffn_norm) ||
            !load_vec(l, NAME("post_ffw_norm.weight"), E, a->sandwich, &y->post_ffn_norm) ||
            (!moe && !fup && !load_weight(l, NAME("ffn_gate.weight"), E, F, true, &y->w_gate)) ||
            (!moe && !load_weight(l, NAME("ffn_up.weight"), E, fup ? 2 * F : F, true, &y->w_up)) ||
            (!moe && !load_weight(l, NAME("ffn_down.weight"), F, E, true, &y->w_down)) ||
            (moe && (!load_weight(l, NAME("ffn_gate_inp.weight"), E, X, true, &y->ffn_gate_inp) ||
                     !load_weight_n(l, NAME("ffn_gate_exps.weight"), E, Fx, X, true, &y->gate_exps) ||
                     !load_weight_n(l, NAME("ffn_up_exps.weight"), E, Fx, X, true, &y->up_exps) ||
                     !load_weight_n(l, NAME("ffn_down_exps.weight"), Fx, E, X, true, &y->down_exps))))
            return false;
        /* a file of an arch without them must not carry them unread */
        if (!a->qk_norm && (gguf_find_tensor(m->gguf, NAME("attn_q_norm.weight")) ||
                            gguf_find_tensor(m->gguf, NAME("attn_k_norm.weight")))) {
            seterr(l->err, l->errlen, "%s: tensor %s is not part of a %s block", l->path, name, a->name);
            return false;
        }
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

/* Matrix i of the 1 + MODEL_LAYER_MATS * n_layer that matmul multiplies
 * by: the output head, then each layer's (empty ones have no data). */
static model_weight *matrix_at(sp_model *m, int i) {
    if (i == 0) return &m->output;
    model_weight *lw[MODEL_LAYER_MATS];
    model_layer_mats(&m->layers[(i - 1) / MODEL_LAYER_MATS], lw);
    return lw[(i - 1) % MODEL_LAYER_MATS];
}

/* Bytes of w packed, 0 when it stays as in the file: stacked experts are
 * multiplied one expert's rows at a time, so each expert must start on a
 * 16-row boundary of the packed layout (the AVX2 level's 8-row blocks). */
static size_t packed_size_of(const model_weight *w) {
    if (!w->data || (w->n_mat > 1 && (w->n_out / w->n_mat) % 16)) return 0;
    return matmul_packed_size(w->type, w->n_out, w->n_in);
}

static void repack_weights(sp_model *m) {
    const char *env = getenv("SPECULA_REPACK");
    if (env && !strcmp(env, "0")) return;
    const int n = 1 + MODEL_LAYER_MATS * m->info.n_layer;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += align_up(packed_size_of(matrix_at(m, i)), 64);
    if (!total) return;
    const double t0 = time_s();
    void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return;
    madvise(mem, total, MADV_HUGEPAGE);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        model_weight *w = matrix_at(m, i);
        const size_t sz = packed_size_of(w);
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
            free(y->q_norm);
            free(y->k_norm);
            free(y->post_attn_norm);
            free(y->post_ffn_norm);
        }
        free(m->layers);
    }
    free(m->output_norm);
    free(m->rope_factors);
    free(m->rope_long);
    free(m->rope_short);
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
        fprintf(f, "architecture:  %s (rope %s%s%s%s%s%s)\n", h->arch,
                m->arch->rope == SP_ROPE_NEOX ? "neox" : "norm",
                m->arch->qkv_bias ? ", qkv bias" : "", m->arch->qk_norm ? ", q/k norm" : "",
                m->arch->sandwich ? ", sandwich norms" : "", m->arch->act == SP_ACT_GELU ? ", GELU" : "",
                m->arch->fused ? ", fused qkv/gate-up" : "");
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
            h->rope_freq_scale, m->rope_long ? ", LongRoPE factors" : h->rope_freq_factors ? ", llama3 frequency factors" : "",
            h->norm_eps, h->tied_output ? "tied to token_embd" : "separate");
    if (h->n_expert)
        fprintf(f, "mixture of experts: %d experts, %d per token, hidden size %d\n", h->n_expert, h->n_expert_used,
                h->n_ff_exp);
    if (h->n_rot != h->head_dim || h->n_swa || h->n_nope_layers)
        fprintf(f, "attention:     RoPE on %d of %d dimensions; sliding window %d on %d of %d layers; "
                   "%d layers without RoPE\n", h->n_rot, h->head_dim, h->n_swa, h->n_swa_layers, h->n_layer,
                h->n_nope_layers);
    print_tensor_types(m, f);
    fprintf(f, "parameters:    %.2f M, weights %.1f MiB\n", h->n_params / 1e6,
            h->weight_bytes / 1048576.0);
    /* a sliding layer holds about its window (and a block) per sequence */
    const size_t win = h->n_swa ? (size_t)SP_MIN(h->n_swa + 16, n_ctx) : (size_t)n_ctx;
    size_t kv = 2ull * ((size_t)(h->n_layer - h->n_swa_layers) * (size_t)n_ctx + (size_t)h->n_swa_layers * win) *
                h->n_head_kv * h->head_dim * 2;
    fprintf(f, "memory:        weights %.1f MiB (mapped) + f16 KV %.1f MiB per %d-token sequence%s\n",
            h->weight_bytes / 1048576.0, kv / 1048576.0, n_ctx, h->n_swa_layers ? " (the sliding layers: their window)" : "");
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
