/* model.h: the loaded model (immutable) and the architecture table.
 *
 * Dimension legend:
 *   E  n_embd           H  n_head        Hk n_head_kv     D  head_dim
 *   F  n_ff             V  n_vocab       L  n_layer
 * A weight "[in -> out]" is stored as out rows of in elements (GGUF ne0 =
 * in, ne1 = out), which is the layout matmul takes.
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include "specula.h"

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

typedef enum { SP_ROPE_NORM = 0, SP_ROPE_NEOX = 2 } rope_kind;
typedef enum { SP_ACT_SILU = 0, SP_ACT_GELU } ffn_act; /* the gated FFN's activation */

/* One row per architecture: what differs between families is data here,
 * not a fork of the forward pass. Every block is the llama block (pre-norm
 * attention and gated FFN, RMSNorm, RoPE, GQA) with these switches. */
typedef struct {
    const char *name;       /* general.architecture */
    rope_kind rope;      /* NORM: adjacent pairs (llama); NEOX: halves */
    bool qkv_bias;          /* attn_{q,k,v}.bias present (qwen2) */
    bool qk_norm;           /* attn_{q,k}_norm: RMSNorm of each q and k head before RoPE
                               (qwen3, gemma3) */
    bool sandwich;          /* post_attention_norm and post_ffw_norm on each sub-block's
                               output before the residual add (gemma3) */
    bool embd_scale;        /* token embeddings times sqrt(n_embd) (gemma3) */
    bool fused;             /* attn_qkv [E -> (H + 2Hk) D] and ffn_up [E -> 2F] (gate
                               then up) may stand for the separate matrices (phi3) */
    bool longrope;          /* rope_factors_long/short, chosen by the context (phi3) */
    ffn_act act;
    /* sliding window (attention.sliding_window): 0 = the key is not read;
     * 1 = every layer slides when the file sets a window (phi3); N > 1 =
     * layer l is global when (l + 1) % N == 0, else it slides (gemma3: 6) */
    int32_t swa_every;
    float swa_rope_base;    /* the sliding layers' RoPE base (0: the model's) */
    int32_t nope_every;     /* layer l has no RoPE when (l + 1) % N == 0 (smollm3: 4); 0 never */
    float default_eps;      /* when the rms-eps key is absent */
    float default_rope_base;
    bool moe;               /* the FFN is a mixture of experts: a softmax router over
                               expert_count experts, the top expert_used_count of them
                               weighted by their probabilities renormalized (qwen3moe) */
} model_arch;

const model_arch *arch_find(const char *name);

/* Mixture-of-experts bounds a file must stay within (the largest models
 * have 512 experts and route to 8-22 of them). */
#define SP_MAX_EXPERTS 1024
#define SP_MAX_EXPERTS_USED 64

/* A matrix used by matmul, pointing into the mapped file; packed: the
 * same rows repacked at load for the kernel level packed_level (see
 * matmul_pack), in sp_model.packed, or NULL. */
typedef struct {
    const void *data;
    tensor_type type;
    int64_t n_in;   /* ne0: dot-product length */
    int64_t n_out;  /* ne1: rows */
    const void *packed;
    const char *packed_level;
    int64_t n_mat;  /* matrices stacked in the rows (experts: n_out / n_mat each), 0 = 1 */
} model_weight;

typedef struct {
    float *attn_norm;      /* [E] (owned f32 copy) */
    model_weight wq;          /* [E -> H*D] (empty: data NULL, when wqkv holds it) */
    model_weight wk;          /* [E -> Hk*D] (empty with wqkv) */
    model_weight wv;          /* [E -> Hk*D] (empty with wqkv) */
    model_weight wo;          /* [H*D -> E] */
    float *bq, *bk, *bv;   /* [H*D], [Hk*D], [Hk*D] or NULL */
    float *q_norm, *k_norm; /* [D] each, or NULL (arch qk_norm) */
    float *post_attn_norm;  /* [E] or NULL (arch sandwich) */
    float *ffn_norm;       /* [E] */
    float *post_ffn_norm;  /* [E] or NULL */
    model_weight w_gate;      /* [E -> F] (empty when w_up is fused) */
    model_weight w_up;        /* [E -> F], or [E -> 2F] gate then up when w_gate is empty */
    model_weight w_down;      /* [F -> E] */
    model_weight wqkv;        /* [E -> (H + 2Hk)*D] fused q, k, v rows, or empty */
    /* mixture of experts (arch moe; the dense w_gate, w_up, w_down empty):
     * Fx = n_ff_exp, X = n_expert; expert e's rows of a *_exps matrix are
     * rows [e * per-expert rows, (e + 1) * per-expert rows) */
    model_weight ffn_gate_inp; /* [E -> X] router logits */
    model_weight gate_exps;    /* [E -> Fx] x X: X * Fx rows */
    model_weight up_exps;      /* [E -> Fx] x X */
    model_weight down_exps;    /* [Fx -> E] x X: X * E rows */
    int32_t window;        /* sliding window in positions, 0 = global attention */
    bool rope;             /* false: a NoPE layer (no rotation at all) */
    bool rope_swa;         /* rotate with the sliding layers' base (rope_cs_swa) */
} model_layer;

/* The matrices of a layer that matmul multiplies by, in a fixed order
 * (the fingerprint hashes them in it); empty ones have data NULL. */
#define MODEL_LAYER_MATS 12
static inline void model_layer_mats(model_layer *y, model_weight *out[MODEL_LAYER_MATS]) {
    out[0] = &y->wq, out[1] = &y->wk, out[2] = &y->wv, out[3] = &y->wo;
    out[4] = &y->w_gate, out[5] = &y->w_up, out[6] = &y->w_down, out[7] = &y->wqkv;
    out[8] = &y->ffn_gate_inp, out[9] = &y->gate_exps, out[10] = &y->up_exps, out[11] = &y->down_exps;
}

/* y[n_tok][nr] = rows [r0, r0 + nr) of w times x[n_tok][n_in] (the packed
 * rows while the level that packed them runs). */
void weight_rows_matmul(thread_pool *pool, const model_weight *w, int64_t r0, int64_t nr, const float *x,
                        int64_t n_tok, float *y, void *scratch);

struct sp_model {
    gguf_file *gguf;         /* the mapping every model_weight points into */
    sp_vocab *vocab;       /* NULL only when loaded meta_only without a tokenizer */
    const model_arch *arch;   /* NULL when this build cannot run the architecture
                              (vocab_only / meta_only loads) */
    sp_model_info info;
    char arch_name[64];    /* general.architecture as the file says */
    char name[128];
    char vocab_err[512];   /* why the tokenizer did not load (meta_only keeps the model) */
    model_weight tok_embd;    /* [E -> V]: row t is token t's embedding */
    float *output_norm;    /* [E] */
    model_weight output;      /* [E -> V] (== tok_embd when tied) */
    float *rope_factors;   /* [n_rot/2] llama3-style frequency divisors, or NULL */
    float *rope_long, *rope_short; /* [n_rot/2] LongRoPE divisors (phi3), or NULL */
    int32_t rope_orig_ctx; /* LongRoPE: contexts above this use rope_long */
    float rope_attn_factor; /* multiplies RoPE's cos and sin (rope.scaling.attn_factor; 1) */
    float attn_scale;      /* the attention logits' scale (1/sqrt(D) but for gemma3 27B) */
    model_layer *layers;      /* [L] */
    void *packed;          /* anonymous mapping of every packed weight, or NULL */
    size_t packed_len;
};

struct kv_store;
/* A context whose K/V live in a store the caller owns (the engine's paged
 * pool): kv must match the model's layer count and kv_dim and have
 * p.n_seq_max slots, and must outlive the context, which never frees it.
 * share_threads (or NULL): a context whose thread pool this one uses, with
 * the same n_threads; it must outlive this one, and the two must never run
 * at the same time (the engine's target and draft run one after the other
 * on its thread). Two pools would each keep a worker spinning for a while
 * after its last run, on cores the other pool needs: on two cores, drafting
 * then verifying runs 15-30% slower with two pools. */
sp_context *context_create_with_kv(const sp_model *m, sp_context_params p, struct kv_store *kv,
                                      const sp_context *share_threads, char *err, size_t errlen);

/* 32 bytes that tell models apart cheaply (SHA-256 over the hyperparameters
 * and the head and tail of every matrix): the RAM prefix cache mixes them
 * into every block hash. Sampled: not enough where K/V outlives the process
 * (src/model/fingerprint.c). */
void model_fingerprint(const sp_model *m, uint8_t out[32]);
/* SHA-256 of every byte of the model file, read through the mapping (the
 * disk tier keys its rows on it). 0, or -1 when libcrypto fails. */
int model_file_hash(const sp_model *m, uint8_t out[32]);

#endif
