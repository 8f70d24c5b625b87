/* moe.h: the mixture-of-experts FFN (arch moe): a softmax router, the top k
 * experts of each token, and the experts' matmuls grouped by expert so that
 * an expert's weights are read once per step for all the tokens routed to
 * it (prefill, verification, continuous batching), while one token reads
 * only its k experts.
 *
 * Dimension legend as model.h; X n_expert, K n_expert_used, Fx n_ff_exp,
 * B the context's n_batch. */
#ifndef SP_MOE_H
#define SP_MOE_H

#include "model/model.h"
#include "model/ops.h"

typedef struct {
    float *probs;    /* [B][X] router logits, then probabilities */
    int32_t *n_tok;  /* [X] tokens routed to each expert in this step */
    int32_t *tok;    /* [X][B] which ones (batch indices, ascending) */
    float *tw;       /* [X][B] and their weights */
    float *xg;       /* [B][E] the inputs of one expert's tokens */
    float *g, *u;    /* [B][Fx] its gate and up outputs */
    float *yo;       /* [B][E] its outputs */
    float *out;      /* [B][E] the layer's output */
    int64_t experts_run; /* expert matmul groups run, summed over calls (statistics) */
} moe_scratch;

/* Allocates s for batches of up to B tokens of a model with experts; 0, or
 * -1 out of memory (s is then freed). */
int moe_scratch_init(moe_scratch *s, const sp_model_info *h, int64_t B);
void moe_scratch_free(moe_scratch *s);

/* s->out[nb][E] = layer y's mixture of experts of xn[nb][E]. Each token's
 * result is the same bits whatever else is in the batch: its router row
 * and expert rows are matmul rows (batch-independent, see matmul), and its
 * experts' outputs are added in ascending expert order, weighted by their
 * softmax probabilities renormalized over the K chosen (ties: the lower
 * expert). */
void moe_ffn(const model_layer *y, const sp_model_info *h, moe_scratch *s, thread_pool *pool, const fwd_ops *ops,
             void *mm_scratch, const float *xn, int32_t nb);

#endif
