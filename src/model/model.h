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

/* One row per architecture: what differs between families is data here,
 * not a fork of the forward pass. */
typedef struct {
    const char *name;       /* general.architecture */
    rope_kind rope;      /* NORM: adjacent pairs (llama); NEOX: halves */
    bool qkv_bias;          /* attn_{q,k,v}.bias present (qwen2) */
    float default_eps;      /* when the rms-eps key is absent */
    float default_rope_base;
} model_arch;

const model_arch *arch_find(const char *name);

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
} model_weight;

typedef struct {
    float *attn_norm;      /* [E] (owned f32 copy) */
    model_weight wq;          /* [E -> H*D] */
    model_weight wk;          /* [E -> Hk*D] */
    model_weight wv;          /* [E -> Hk*D] */
    model_weight wo;          /* [H*D -> E] */
    float *bq, *bk, *bv;   /* [H*D], [Hk*D], [Hk*D] or NULL */
    float *ffn_norm;       /* [E] */
    model_weight w_gate;      /* [E -> F] */
    model_weight w_up;        /* [E -> F] */
    model_weight w_down;      /* [F -> E] */
} model_layer;

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
    float *rope_factors;   /* [D/2] llama3-style frequency divisors, or NULL */
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
