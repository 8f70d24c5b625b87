/* forward.c: the context (per-engine compute state) and the batched forward
 * pass: one call evaluates tokens of many sequences, each at its own
 * position, and returns logits for the positions asked for.
 *
 * Dimension legend (see model.h): B tokens in the batch, E n_embd,
 * H/Hk heads/KV heads, D head_dim, F n_ff, V n_vocab, O outputs requested.
 * Every buffer is sized at context creation from n_batch; the per-token
 * path allocates nothing (the logits buffer grows only when a batch asks
 * for more outputs than any earlier one).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/ops.h"

struct sp_context {
    const sp_model *m;
    sp_context_params p;
    thread_pool *pool;
    kv_store *kv;
    bool own_kv;     /* false when the engine lent its paged store */
    bool own_pool;   /* false when sharing another context's threads */
    const fwd_ops *ops;
    float *x;        /* [B][E] residual stream */
    float *xn;       /* [B][E] normalized input of a sub-block */
    float *q;        /* [B][H*D] */
    float *k;        /* [B][Hk*D] */
    float *v;        /* [B][Hk*D] */
    float *att;      /* [B][H*D] attention output */
    float *gate;     /* [B][F] */
    float *up;       /* [B][F] */
    float *rope_cs;  /* [B][n_rot/2][2] cos, sin of each token's RoPE angles */
    float *rope_cs_swa; /* [B][n_rot/2][2] the same at the sliding layers' base, or NULL */
    const float *rope_factors; /* [n_rot/2] frequency divisors for this context, or NULL */
    float *fused;    /* [B][max(H + 2Hk) D, 2F)] output of a fused matrix, or NULL */
    float *scores;   /* [n_threads][SP_ATTN_MAX_Q][n_ctx] attention scores */
    uint16_t *q16;   /* [n_threads][D] f16 copy of a query head */
    int32_t *runs;   /* [2][B][2] attention runs (first batch index, tokens): of
                        every token, then of the rows that give logits */
    void *mm_scratch;
    size_t mm_scratch_size;
    float *logits;   /* [O][V] */
    int32_t logits_cap; /* rows allocated */
    int32_t n_out;
    int32_t *out_rows;  /* [B] batch indices that produce logits */
    int32_t *seq_n;     /* [n_seq] tokens of each sequence in this batch */
    moe_scratch moe;    /* a mixture-of-experts model's routing and expert buffers */
};

sp_context_params sp_context_default_params(void) {
    sp_context_params p;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = n > 0 ? (int32_t)SP_MIN(n, 64) : 1;
    p.n_seq_max = 1;
    p.n_ctx = 0; /* from the model */
    p.n_batch = 512;
    p.kv_type = SP_KV_F16;
    return p;
}

static size_t max_scratch(const sp_model *m, int64_t B) {
    size_t s = 0;
    const model_weight *ws[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++) s = SP_MAX(s, matmul_scratch_size(ws[i]->type, ws[i]->n_in, B));
    for (int l = 0; l < m->info.n_layer; l++) {
        model_weight *lw[MODEL_LAYER_MATS];
        model_layer_mats(&m->layers[l], lw);
        for (int i = 0; i < MODEL_LAYER_MATS; i++)
            if (lw[i]->data) s = SP_MAX(s, matmul_scratch_size(lw[i]->type, lw[i]->n_in, B));
    }
    return s;
}

static sp_context *context_create(const sp_model *m, sp_context_params p, kv_store *kv, thread_pool *pool,
                                  char *err, size_t errlen) {
    if (!m->layers) {
        seterr(err, errlen, "the model was loaded vocab-only");
        return NULL;
    }
    const sp_model_info *h = &m->info;
    if (p.n_ctx <= 0) p.n_ctx = SP_MIN(h->n_ctx_train, 4096);
    if (p.n_threads <= 0 || p.n_threads > 256 || p.n_seq_max <= 0 || p.n_seq_max > 4096 ||
        p.n_batch <= 0 || p.n_batch > 65536 || p.n_ctx > (1 << 24) ||
        (p.kv_type != SP_KV_F16 && p.kv_type != SP_KV_F32 && p.kv_type != SP_KV_Q8_0)) {
        seterr(err, errlen, "invalid context parameters (threads %d, sequences %d, n_ctx %d, "
                  "n_batch %d)", p.n_threads, p.n_seq_max, p.n_ctx, p.n_batch);
        return NULL;
    }
    sp_context *c = calloc(1, sizeof(*c));
    if (!c) goto oom;
    c->m = m;
    c->p = p;
    c->ops = fwd_ops_get();
    const int64_t B = p.n_batch, E = h->n_embd, F = h->n_ff, D = h->head_dim;
    const int64_t QD = (int64_t)h->n_head * D, KD = (int64_t)h->n_head_kv * D;
    if (kv) {
        if (kv->n_layer != h->n_layer || kv->kv_dim != KD || kv->n_seq != p.n_seq_max) {
            seterr(err, errlen, "KV store shape (%d layers, kv_dim %d, %d sequences) does not "
                      "match the context", kv->n_layer, kv->kv_dim, kv->n_seq);
            goto fail;
        }
        c->kv = kv;
    } else {
        if (p.kv_type == SP_KV_Q8_0 && D % 32) {
            seterr(err, errlen, "a q8_0 KV cache needs a head size that is a multiple of 32 (this model's: %d)", (int)D);
            goto fail;
        }
        c->kv = kv_simple_create(kv_tensor_type(p.kv_type),
                                    h->n_layer, (int32_t)KD, p.n_seq_max, p.n_ctx, err, errlen);
        if (!c->kv) goto fail;
        c->own_kv = true;
    }
    c->own_pool = !pool;
    c->pool = pool ? pool : pool_create(p.n_threads);
    c->x = malloc(B * E * sizeof(float));
    c->xn = malloc(B * E * sizeof(float));
    c->q = malloc(B * QD * sizeof(float));
    c->k = malloc(B * KD * sizeof(float));
    c->v = malloc(B * KD * sizeof(float));
    c->att = malloc(B * QD * sizeof(float));
    c->gate = malloc(B * F * sizeof(float));
    c->up = malloc(B * F * sizeof(float));
    c->rope_cs = malloc(B * D * sizeof(float));
    bool swa_base = false, fused = false;
    for (int32_t l = 0; l < h->n_layer; l++) {
        swa_base |= m->layers[l].rope_swa;
        fused |= m->layers[l].wqkv.data != NULL || (m->layers[l].w_gate.data == NULL && m->layers[l].w_up.data);
    }
    if (swa_base && !(c->rope_cs_swa = malloc(B * D * sizeof(float)))) goto oom;
    if (h->n_expert && moe_scratch_init(&c->moe, h, B)) goto oom;
    if (fused && !(c->fused = malloc(B * SP_MAX(QD + 2 * KD, 2 * F) * sizeof(float)))) goto oom;
    /* LongRoPE: the long factors where a sequence may run past the context
     * the model was first trained on, as llama.cpp chooses per context */
    c->rope_factors = m->rope_long ? (p.n_ctx > m->rope_orig_ctx ? m->rope_long : m->rope_short) : m->rope_factors;
    c->scores = malloc((size_t)p.n_threads * SP_ATTN_MAX_Q * p.n_ctx * sizeof(float));
    c->runs = malloc((size_t)4 * B * sizeof(int32_t));
    c->q16 = malloc((size_t)p.n_threads * D * sizeof(uint16_t));
    c->mm_scratch_size = max_scratch(m, B);
    c->mm_scratch = malloc(c->mm_scratch_size ? c->mm_scratch_size : 1);
    c->out_rows = malloc(B * sizeof(int32_t));
    c->seq_n = calloc((size_t)p.n_seq_max, sizeof(int32_t));
    if (!c->pool || !c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up ||
        !c->rope_cs || !c->scores || !c->q16 || !c->runs || !c->mm_scratch || !c->out_rows || !c->seq_n)
        goto oom;
    return c;
oom:
    seterr(err, errlen, "out of memory creating a context");
fail:
    sp_context_free(c);
    return NULL;
}

sp_context *sp_context_create(const sp_model *m, sp_context_params p, char *err, size_t errlen) {
    return context_create(m, p, NULL, NULL, err, errlen);
}

sp_context *context_create_with_kv(const sp_model *m, sp_context_params p, kv_store *kv,
                                      const sp_context *share_threads, char *err, size_t errlen) {
    if (share_threads && share_threads->p.n_threads != p.n_threads) {
        seterr(err, errlen, "a context sharing threads must use as many (%d, not %d)",
                  share_threads->p.n_threads, p.n_threads);
        return NULL;
    }
    return context_create(m, p, kv, share_threads ? share_threads->pool : NULL, err, errlen);
}

void sp_context_free(sp_context *c) {
    if (!c) return;
    if (c->kv && c->own_kv) c->kv->ops->destroy(c->kv);
    if (c->own_pool) pool_free(c->pool);
    free(c->x);
    free(c->xn);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->rope_cs);
    free(c->rope_cs_swa);
    free(c->fused);
    moe_scratch_free(&c->moe);
    free(c->scores);
    free(c->q16);
    free(c->runs);
    free(c->mm_scratch);
    free(c->logits);
    free(c->out_rows);
    free(c->seq_n);
    free(c);
}

int32_t sp_seq_len(const sp_context *c, int32_t seq) {
    if (seq < 0 || seq >= c->p.n_seq_max) return -1;
    return c->kv->ops->len(c->kv, seq);
}

void sp_seq_truncate(sp_context *c, int32_t seq, int32_t len) {
    if (seq < 0 || seq >= c->p.n_seq_max) return;
    int32_t cur = c->kv->ops->len(c->kv, seq);
    if (len < 0) len = 0;
    if (len < cur) c->kv->ops->set_len(c->kv, seq, len);
}

void sp_seq_clear(sp_context *c, int32_t seq) { sp_seq_truncate(c, seq, 0); }

const float *sp_get_logits(const sp_context *c, int32_t i) {
    if (i < 0 || i >= c->n_out) return NULL;
    return c->logits + (size_t)i * c->m->info.n_vocab;
}

int32_t sp_n_outputs(const sp_context *c) { return c->n_out; }

/* ---- the pass ------------------------------------------------------------ */

static void weight_matmul(sp_context *c, const model_weight *w, const float *x, int64_t n_tok, float *y) {
    weight_rows_matmul(c->pool, w, 0, w->n_out, x, n_tok, y, c->mm_scratch);
}

/* RoPE angles of one position: cs[i] = (cos, sin) of pos * base^(-2i/R)
 * (R = n_rot, the rotated dimensions), divided by the frequency factor
 * (llama3's or LongRoPE's), scaled, and times mscale (LongRoPE's attention
 * factor, 1 elsewhere). theta is built by repeated multiplication, as
 * llama.cpp's rope cache does, so the angles agree to the last bit.
 * Computed once per token, shared by all layers. */
static void rope_angles(float *cs, int32_t R, int32_t pos, float base, float freq_scale,
                        const float *factors, float mscale) {
    const float theta_scale = powf(base, -2.0f / (float)R);
    float theta = (float)pos;
    for (int32_t i = 0; i < R / 2; i++) {
        float t = theta / (factors ? factors[i] : 1.0f) * freq_scale;
        cs[2 * i] = cosf(t) * mscale;
        cs[2 * i + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

/* Rotates the first R dimensions of one head vector in place (the rest, a
 * partial RoPE's, stay as they are). NORM rotates adjacent pairs
 * (2i, 2i+1), NEOX rotates (i, i + R/2): a' = fma(a, cos, -(b sin)),
 * b' = fma(a, sin, b cos), as llama.cpp's compiled rope rounds. */
static void rope(float *x, int32_t R, const float *cs, rope_kind kind) {
    for (int32_t i = 0; i < R / 2; i++) {
        int32_t a = kind == SP_ROPE_NEOX ? i : 2 * i;
        int32_t b = kind == SP_ROPE_NEOX ? i + R / 2 : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        /* llama.cpp's rope (ggml-cpu, built -march=native with the default
         * -ffp-contract) fuses the first product of each line into an FMA:
         * on the reference random-weight models this one rounding decided
         * 2 of 5 Q8_0 records from their first step. fmaf is one
         * instruction through glibc's FMA variant. */
        x[a] = fmaf(x0, cs[2 * i], -(x1 * cs[2 * i + 1]));
        x[b] = fmaf(x0, cs[2 * i + 1], x1 * cs[2 * i]);
    }
}

/* Attention runs: the tokens idx[0..n) (increasing; NULL for 0..n-1) cut
 * into runs of up to SP_ATTN_MAX_Q tokens of one sequence at consecutive
 * positions, as (first batch index, count) pairs. A run's queries share
 * every K/V row they read (see attn_run). Returns the number of runs. */
static int32_t make_runs(const sp_batch *b, const int32_t *idx, int32_t n, int32_t *runs) {
#define IDX(j) (idx ? idx[j] : (j))
    int32_t nr = 0;
    for (int32_t a = 0; a < n;) {
        int32_t e = a + 1;
        while (e < n && e - a < SP_ATTN_MAX_Q && IDX(e) == IDX(e - 1) + 1 &&
               b->seq[IDX(e)] == b->seq[IDX(a)] && b->pos[IDX(e)] == b->pos[IDX(e - 1)] + 1)
            e++;
        runs[2 * nr] = IDX(a);
        runs[2 * nr + 1] = e - a;
        nr++;
        a = e;
    }
#undef IDX
    return nr;
}

typedef struct {
    sp_context *c;
    const sp_batch *b;
    int32_t layer;
    const int32_t *runs;
    int32_t n_runs;
    _Atomic int64_t next; /* work items (run x KV head x chunk) handed out so far */
} attn_task;

/* A work item is one run's queries on one KV head: the tokens of the run
 * times the heads of that KV head's group (GQA), or a chunk of those heads
 * when there would be fewer items than threads. The queries of an item
 * share each K and V row the variant loads: one head at a time, a decode
 * step of a model with 8 heads per KV head read every row 8 times (from L3
 * past a few hundred positions). Items come from a shared counter, last run
 * first: a run's cost grows with its positions, and a batch's later tokens
 * (a prefill chunk's tail) are the expensive ones, so the threads finish
 * close together. */
static void attn_worker(void *arg, int ith, int nth) {
    attn_task *t = arg;
    sp_context *c = t->c;
    const sp_model_info *h = &c->m->info;
    const int32_t H = h->n_head, Hk = h->n_head_kv, D = h->head_dim, G = H / Hk;
    /* chunks per KV head: at least as many items as threads, where the
     * heads allow (every slot derives the same count) */
    const int32_t items = t->n_runs * Hk, NC = items < nth ? SP_MIN(G, (nth + items - 1) / items) : 1;
    const float scale = c->m->attn_scale;
    const int32_t win = c->m->layers[t->layer].window;
    float *scores = c->scores + (size_t)ith * SP_ATTN_MAX_Q * c->p.n_ctx;
    uint16_t *q16 = c->q16 + (size_t)ith * D;
    const int64_t per_run = (int64_t)Hk * NC, n_items = (int64_t)t->n_runs * per_run;
    for (int64_t it; (it = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed)) < n_items;) {
        const int32_t r = t->n_runs - 1 - (int32_t)(it / per_run), g = (int32_t)(it % per_run / NC),
                      ch = (int32_t)(it % NC);
        const int32_t i = t->runs[2 * r], nq = t->runs[2 * r + 1];
        const int32_t h0 = g * G + ch * G / NC, h1 = g * G + (ch + 1) * G / NC; /* heads [h0, h1) */
        ops_attn_run(c->ops, c->q + ((size_t)i * H + h0) * D, (size_t)H * D, nq, h1 - h0, c->kv, t->layer,
                    t->b->seq[i], g, D, t->b->pos[i] + 1, win, scale, scores, c->p.n_ctx, q16,
                    c->att + ((size_t)i * H + h0) * D, (size_t)H * D);
    }
}

typedef struct {
    sp_context *c;
    int64_t n;
} glu_task;

static void glu_worker(void *arg, int ith, int nth) {
    glu_task *t = arg;
    int64_t chunk = (t->n + nth - 1) / nth;
    chunk = (chunk + 15) & ~(int64_t)15;
    int64_t i0 = (int64_t)ith * chunk, i1 = SP_MIN(t->n, i0 + chunk);
    if (i0 >= i1) return;
    if (t->c->m->arch->act == SP_ACT_GELU) t->c->ops->geglu(i1 - i0, t->c->gate + i0, t->c->up + i0, t->c->gate + i0);
    else t->c->ops->swiglu(i1 - i0, t->c->gate + i0, t->c->up + i0, t->c->gate + i0);
}

/* The n rows of a fused matrix's output, each its parts side by side
 * (widths w[0..parts)), split into out[p] [n][w[p]]. */
static void split_rows(const float *in, int32_t n, int parts, const int64_t *w, float *const *out) {
    int64_t stride = 0;
    for (int p = 0; p < parts; p++) stride += w[p];
    for (int32_t i = 0; i < n; i++)
        for (int p = 0, off = 0; p < parts; off += (int)w[p], p++)
            memcpy(out[p] + (size_t)i * w[p], in + (size_t)i * stride + off, (size_t)w[p] * sizeof(float));
}

static int validate(sp_context *c, const sp_batch *b, char *err, size_t errlen) {
    const int32_t V = c->m->info.n_vocab;
    if (b->n_tokens <= 0 || b->n_tokens > c->p.n_batch) {
        seterr(err, errlen, "batch of %d tokens (must be 1..%d)", b->n_tokens, c->p.n_batch);
        return -1;
    }
    memset(c->seq_n, 0, (size_t)c->p.n_seq_max * sizeof(int32_t));
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq[i];
        if (b->token[i] < 0 || b->token[i] >= V) {
            seterr(err, errlen, "token %d at batch index %d is outside the vocabulary (0..%d)",
                      b->token[i], i, V - 1);
            return -1;
        }
        if (s < 0 || s >= c->p.n_seq_max) {
            seterr(err, errlen, "sequence id %d at batch index %d (must be 0..%d)", s, i,
                      c->p.n_seq_max - 1);
            return -1;
        }
        int32_t want = c->kv->ops->len(c->kv, s) + c->seq_n[s];
        if (b->pos[i] != want) {
            seterr(err, errlen, "token at batch index %d has position %d but sequence %d "
                      "continues at %d", i, b->pos[i], s, want);
            return -1;
        }
        c->seq_n[s]++;
    }
    return 0;
}

/* Drops the K/V reservations of the batch's sequences (lengths unchanged). */
static void release_reservations(sp_context *c) {
    for (int32_t s = 0; s < c->p.n_seq_max; s++)
        if (c->seq_n[s]) c->kv->ops->set_len(c->kv, s, c->kv->ops->len(c->kv, s));
}

int sp_decode(sp_context *c, const sp_batch *b, char *err, size_t errlen) {
    const sp_model *m = c->m;
    const sp_model_info *h = &m->info;
    if (validate(c, b, err, errlen)) return -1;
    c->ops = fwd_ops_get(); /* the level in use now (kernels_force may switch it) */
    const int32_t B = b->n_tokens, E = h->n_embd, H = h->n_head, Hk = h->n_head_kv;
    const int32_t D = h->head_dim, F = h->n_ff, V = h->n_vocab;
    const int32_t QD = H * D, KD = Hk * D;

    /* reserve K/V rows for every sequence in the batch (all or nothing) */
    for (int32_t s = 0; s < c->p.n_seq_max; s++) {
        if (!c->seq_n[s]) continue;
        if (c->kv->ops->reserve(c->kv, s, c->seq_n[s])) {
            release_reservations(c); /* a failed reserve changes nothing */
            seterr(err, errlen, "sequence %d would exceed the context of %d positions or "
                      "the KV store is full", s, c->p.n_ctx);
            return -1;
        }
    }
    /* outputs */
    int32_t n_out = 0;
    for (int32_t i = 0; i < B; i++)
        if (b->want_logits ? b->want_logits[i] != 0 : i == B - 1) c->out_rows[n_out++] = i;
    if (n_out > c->logits_cap) {
        float *nl = realloc(c->logits, (size_t)n_out * V * sizeof(float));
        if (!nl) {
            release_reservations(c);
            seterr(err, errlen, "out of memory for %d rows of logits", n_out);
            return -1;
        }
        c->logits = nl;
        c->logits_cap = n_out;
    }

    /* token embeddings: dequantized rows of token_embd */
    const size_t erow = row_size(m->tok_embd.type, E);
    for (int32_t i = 0; i < B; i++)
        dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)b->token[i] * erow,
                          c->x + (size_t)i * E, E);
    if (m->arch->embd_scale) { /* gemma: the embeddings times sqrt(n_embd) */
        const float es = sqrtf((float)E);
        for (int64_t j = 0; j < (int64_t)B * E; j++) c->x[j] *= es;
    }

    const int32_t R = h->n_rot;
    for (int32_t i = 0; i < B; i++) {
        rope_angles(c->rope_cs + (size_t)i * D, R, b->pos[i], h->rope_base, h->rope_freq_scale,
                    c->rope_factors, m->rope_attn_factor);
        if (c->rope_cs_swa) /* the sliding layers' own base, unscaled */
            rope_angles(c->rope_cs_swa + (size_t)i * D, R, b->pos[i], m->arch->swa_rope_base, 1.0f, NULL,
                        m->rope_attn_factor);
    }
    const bool f32kv = c->kv->type == SP_TYPE_F32;
    int32_t *runs_out = c->runs + 2 * B;
    const int32_t n_runs = make_runs(b, NULL, B, c->runs);
    const int32_t n_runs_out = n_out < B ? make_runs(b, c->out_rows, n_out, runs_out) : 0;
    int32_t nb = B; /* rows carried through the sub-blocks after attention */
    for (int32_t l = 0; l < h->n_layer; l++) {
        const model_layer *y = &m->layers[l];
        for (int32_t i = 0; i < B; i++)
            ops_rmsnorm(c->x + (size_t)i * E, y->attn_norm, c->xn + (size_t)i * E, E, h->norm_eps);
        if (y->wqkv.data) { /* fused: q, k and v rows of one matrix */
            weight_matmul(c, &y->wqkv, c->xn, B, c->fused);
            split_rows(c->fused, B, 3, (const int64_t[]){QD, KD, KD}, (float *const[]){c->q, c->k, c->v});
        } else {
            weight_matmul(c, &y->wq, c->xn, B, c->q);
            weight_matmul(c, &y->wk, c->xn, B, c->k);
            weight_matmul(c, &y->wv, c->xn, B, c->v);
        }
        for (int32_t i = 0; i < B; i++) {
            float *q = c->q + (size_t)i * QD, *k = c->k + (size_t)i * KD, *v = c->v + (size_t)i * KD;
            if (y->bq) {
                for (int32_t j = 0; j < QD; j++) q[j] += y->bq[j];
                for (int32_t j = 0; j < KD; j++) k[j] += y->bk[j];
                for (int32_t j = 0; j < KD; j++) v[j] += y->bv[j];
            }
            if (y->q_norm) { /* each head normalized before it is rotated */
                for (int32_t hd = 0; hd < H; hd++) ops_rmsnorm(q + (size_t)hd * D, y->q_norm, q + (size_t)hd * D, D, h->norm_eps);
                for (int32_t hd = 0; hd < Hk; hd++) ops_rmsnorm(k + (size_t)hd * D, y->k_norm, k + (size_t)hd * D, D, h->norm_eps);
            }
            if (y->rope) {
                const float *cs = (y->rope_swa ? c->rope_cs_swa : c->rope_cs) + (size_t)i * D;
                for (int32_t hd = 0; hd < H; hd++) rope(q + (size_t)hd * D, R, cs, m->arch->rope);
                for (int32_t hd = 0; hd < Hk; hd++) rope(k + (size_t)hd * D, R, cs, m->arch->rope);
            }
            void *kr = c->kv->ops->k_row(c->kv, l, b->seq[i], b->pos[i]);
            void *vr = c->kv->ops->v_row(c->kv, l, b->seq[i], b->pos[i]);
            if (!f32kv) { /* f16 (the dispatched converter: F16C where the CPU has it) or q8_0 */
                quantize_row(c->kv->type, k, kr, KD);
                quantize_row(c->kv->type, v, vr, KD);
            } else {
                memcpy(kr, k, (size_t)KD * sizeof(float));
                memcpy(vr, v, (size_t)KD * sizeof(float));
            }
        }
        /* the last layer attends only for the rows that give logits (a
         * prefill chunk wants one of many); every row's K/V is stored above */
        const bool cut = l == h->n_layer - 1 && n_out < B;
        attn_task at = {c, b, l, cut ? runs_out : c->runs, cut ? n_runs_out : n_runs, 0};
        if (at.n_runs) pool_run(c->pool, attn_worker, &at);
        if (l == h->n_layer - 1 && n_out < B) {
            /* the last layer's K/V are stored; past this point only the rows
             * that produce logits matter (a prefill chunk wants one of many),
             * so they are moved to the front and the rest is not computed */
            for (int32_t o = 0; o < n_out; o++) {
                const int32_t i = c->out_rows[o]; /* increasing, so i >= o */
                memmove(c->att + (size_t)o * QD, c->att + (size_t)i * QD, (size_t)QD * sizeof(float));
                memmove(c->x + (size_t)o * E, c->x + (size_t)i * E, (size_t)E * sizeof(float));
            }
            nb = n_out;
            if (nb == 0) break;
        }
        weight_matmul(c, &y->wo, c->att, nb, c->xn);
        if (y->post_attn_norm) /* sandwich: the sub-block's output normalized before the add */
            for (int32_t i = 0; i < nb; i++)
                ops_rmsnorm(c->xn + (size_t)i * E, y->post_attn_norm, c->xn + (size_t)i * E, E, h->norm_eps);
        for (int64_t j = 0; j < (int64_t)nb * E; j++) c->x[j] += c->xn[j];

        for (int32_t i = 0; i < nb; i++)
            ops_rmsnorm(c->x + (size_t)i * E, y->ffn_norm, c->xn + (size_t)i * E, E, h->norm_eps);
        if (y->ffn_gate_inp.data) {
            moe_ffn(y, h, &c->moe, c->pool, c->ops, c->mm_scratch, c->xn, nb);
            for (int64_t j = 0; j < (int64_t)nb * E; j++) c->x[j] += c->moe.out[j];
            continue;
        }
        if (y->w_gate.data) {
            weight_matmul(c, &y->w_gate, c->xn, nb, c->gate);
            weight_matmul(c, &y->w_up, c->xn, nb, c->up);
        } else { /* fused: gate then up in each row */
            weight_matmul(c, &y->w_up, c->xn, nb, c->fused);
            split_rows(c->fused, nb, 2, (const int64_t[]){F, F}, (float *const[]){c->gate, c->up});
        }
        glu_task gt = {c, (int64_t)nb * F};
        pool_run(c->pool, glu_worker, &gt);
        weight_matmul(c, &y->w_down, c->gate, nb, c->xn);
        if (y->post_ffn_norm)
            for (int32_t i = 0; i < nb; i++)
                ops_rmsnorm(c->xn + (size_t)i * E, y->post_ffn_norm, c->xn + (size_t)i * E, E, h->norm_eps);
        for (int64_t j = 0; j < (int64_t)nb * E; j++) c->x[j] += c->xn[j];
    }

    /* final norm and the output head: row o of x is output o now */
    for (int32_t o = 0; o < n_out; o++)
        ops_rmsnorm(c->x + (size_t)o * E, m->output_norm, c->xn + (size_t)o * E, E, h->norm_eps);
    if (n_out) weight_matmul(c, &m->output, c->xn, n_out, c->logits);
    c->n_out = n_out;

    for (int32_t s = 0; s < c->p.n_seq_max; s++)
        if (c->seq_n[s]) c->kv->ops->set_len(c->kv, s, c->kv->ops->len(c->kv, s) + c->seq_n[s]);
    return 0;
}
