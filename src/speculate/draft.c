/* draft.c: the draft-model proposer: its own paged KV and context, its
 * measured pass cost, and batched autoregressive drafting. */
#include "speculate/draft.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

drafter *drafter_create(const sp_model *draft, sp_context_params cp, sp_kv_type kv_type,
                              int32_t block_size, int32_t n_blocks, int32_t max_blocks_per_seq,
                              const sp_context *share_threads, char *err, size_t errlen) {
    drafter *d = calloc(1, sizeof(*d));
    if (!d) goto oom;
    const sp_model_info *dh = sp_model_get_info(draft);
    const int32_t kv_dim = dh->n_head_kv * dh->head_dim;
    const tensor_type kt = kv_tensor_type(kv_type);
    /* as many blocks as the target (a draft position never outnumbers a
     * target one, bar k - 1 in flight) plus one spare per slot */
    kv_paged_params dp = {kt, dh->n_layer, kv_dim, block_size, n_blocks + cp.n_seq_max,
                             cp.n_seq_max, max_blocks_per_seq + 1, false, 0, NULL, 0};
    d->m = draft;
    d->kv = kv_paged_create(dp, err, errlen);
    if (!d->kv) goto fail;
    cp.n_ctx += SP_SPEC_K_MAX;
    d->ctx = context_create_with_kv(draft, cp, d->kv, share_threads, err, errlen);
    if (!d->ctx) goto fail;
    d->n_vocab = dh->n_vocab;
    d->max_batch = cp.n_batch;
    const size_t B = (size_t)cp.n_batch;
    d->tok = malloc(B * sizeof(sp_token));
    d->pos = malloc(B * sizeof(int32_t));
    d->seq = malloc(B * sizeof(int32_t));
    d->want = malloc(B);
    d->off = calloc((size_t)cp.n_seq_max, sizeof(int32_t));
    if (!d->tok || !d->pos || !d->seq || !d->want || !d->off) goto oom;
    return d;
oom:
    seterr(err, errlen, "out of memory creating the draft proposer");
fail:
    drafter_free(d);
    return NULL;
}

void drafter_free(drafter *d) {
    if (!d) return;
    sp_context_free(d->ctx); /* before its pool, and before the context whose threads it uses */
    if (d->kv) d->kv->ops->destroy(d->kv);
    free(d->tok);
    free(d->pos);
    free(d->seq);
    free(d->want);
    free(d->off);
    free(d);
}

void drafter_calibrate(drafter *d, int32_t slot, int32_t max_n, int32_t n_ctx) {
    cost_measure(d->ctx, d->kv, slot, max_n, d->n_vocab, &d->cost);
    const double attn = d->cost.n ? cost_measure_attn(d->ctx, d->kv, slot, n_ctx, d->n_vocab) : 0;
    cost_fit_init(&d->fit, &d->cost, attn);
}

/* Positions of slot the draft holds, counted from the sequence's start. */
static int32_t held(const drafter *d, int32_t slot) { return d->off[slot] + sp_seq_len(d->ctx, slot); }

int32_t drafter_backlog(const drafter *d, int32_t slot, int32_t n_all) {
    return SP_MAX(0, n_all - 1 - held(d, slot));
}

void drafter_clear(drafter *d, int32_t slot) {
    sp_seq_clear(d->ctx, slot);
    d->off[slot] = 0;
}

void drafter_truncate(drafter *d, int32_t slot, int32_t len) {
    if (held(d, slot) <= len) return;
    if (len <= d->off[slot]) drafter_clear(d, slot); /* before the window: start over */
    else sp_seq_truncate(d->ctx, slot, len - d->off[slot]);
}

static sp_token argmax_row(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Positions a batch's tokens attend to, summed: the cost model's second
 * term. */
static double batch_attn(const sp_batch *b) {
    double a = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) a += b->pos[i] + 1;
    return a;
}

/* One draft pass over the first n tokens of the batch buffers, timed into
 * the fit. */
static int draft_pass(drafter *d, int32_t n) {
    sp_batch b = {n, d->tok, d->pos, d->seq, d->want};
    char err[200];
    const double t0 = time_ms();
    const int rc = sp_decode(d->ctx, &b, err, sizeof(err));
    if (!rc && d->fitting) cost_fit_observe(&d->fit, n, batch_attn(&b), time_ms() - t0);
    return rc;
}

static void put(drafter *d, int32_t i, sp_token t, int32_t pos, int32_t slot, int8_t want) {
    d->tok[i] = t;
    d->pos[i] = pos;
    d->seq[i] = slot;
    d->want[i] = want;
}

/* Catch up on committed tokens the draft has not seen. The first drafting
 * pass feeds them along with each sequence's last token (one pass per step,
 * not two: after an accepted run there is always some); only a backlog too
 * big for one batch gets passes of its own first. 0, or -1 when a pass
 * failed. */
static int catch_up(drafter *d, draft_seq *seqs, int32_t n) {
    const int32_t B = d->max_batch;
    for (;;) {
        int32_t backlog = n;
        for (int32_t i = 0; i < n; i++) {
            draft_seq *s = &seqs[i];
            drafter_truncate(d, s->slot, s->n_all - 1);
            if (drafter_backlog(d, s->slot, s->n_all) > SP_DRAFT_WINDOW) { /* restart on a window */
                drafter_clear(d, s->slot);
                d->off[s->slot] = s->n_all - 1 - SP_DRAFT_WINDOW;
            }
            backlog += drafter_backlog(d, s->slot, s->n_all);
        }
        if (backlog <= B) return 0;
        int32_t nt = 0;
        for (int32_t i = 0; i < n && nt < B; i++) {
            const draft_seq *s = &seqs[i];
            for (int32_t p = held(d, s->slot); p < s->n_all - 1 && nt < B; p++, nt++)
                put(d, nt, s->toks[p], p - d->off[s->slot], s->slot, 0);
        }
        if (!nt) return 0;
        if (draft_pass(d, nt)) return -1;
    }
}

/* The j-th proposal of s from the draft's logits row: the token at
 * position n_all + j, drawn with the request's noise there. */
static sp_token pick(drafter *d, draft_seq *s, int32_t j, const float *row) {
    if (!s->smp) return argmax_row(row, d->n_vocab);
    return sp_sampler_sample_at(s->smp, row, (int64_t)s->n_all + j);
}

/* Pass j: every sequence still drafting feeds its last token (j = 0, with
 * the rest of its catch-up) or its proposal j - 1 and gets proposal j. */
static int draft_step(drafter *d, draft_seq *seqs, int32_t n, int32_t j) {
    int32_t nt = 0;
    for (int32_t i = 0; i < n; i++) {
        const draft_seq *s = &seqs[i];
        if (s->k <= j) continue;
        const int32_t off = d->off[s->slot];
        if (j == 0) /* the rest of the catch-up */
            for (int32_t p = held(d, s->slot); p < s->n_all - 1; p++, nt++)
                put(d, nt, s->toks[p], p - off, s->slot, 0);
        put(d, nt++, j == 0 ? s->toks[s->n_all - 1] : s->out[j - 1], s->n_all - 1 + j - off, s->slot, 1);
    }
    if (draft_pass(d, nt)) return -1;
    int32_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        draft_seq *s = &seqs[i];
        if (s->k <= j) continue;
        s->out[j] = pick(d, s, j, sp_get_logits(d->ctx, o++));
    }
    return 0;
}

double drafter_run(drafter *d, draft_seq *seqs, int32_t n) {
    const double t0 = time_ms();
    bool ok = catch_up(d, seqs, n) == 0;
    int32_t kmax = 0;
    for (int32_t i = 0; i < n; i++) kmax = SP_MAX(kmax, seqs[i].k);
    for (int32_t j = 0; ok && j < kmax; j++) ok = draft_step(d, seqs, n, j) == 0;
    if (!ok) /* keep going without proposals; the next step catches up again */
        for (int32_t i = 0; i < n; i++) {
            seqs[i].k = 0;
            drafter_truncate(d, seqs[i].slot, seqs[i].n_all - 1);
        }
    return time_ms() - t0;
}

int spec_check_draft(const sp_model *target, const sp_model *draft, char *err, size_t errlen) {
    const sp_vocab *vt = sp_model_get_vocab(target), *vd = sp_model_get_vocab(draft);
    if (sp_vocab_kind_of(vt) != sp_vocab_kind_of(vd)) {
        seterr(err, errlen, "the draft's tokenizer type differs from the target's");
        return -1;
    }
    const int32_t nt = sp_vocab_n_tokens(vt), nd = sp_vocab_n_tokens(vd);
    if (nd > nt) {
        seterr(err, errlen, "the draft has %d tokens, more than the target's %d", nd, nt);
        return -1;
    }
    if (sp_vocab_bos(vt) != sp_vocab_bos(vd) || sp_vocab_eos(vt) != sp_vocab_eos(vd)) {
        seterr(err, errlen, "special token ids differ (BOS %d/%d, EOS %d/%d for target/draft)",
                  sp_vocab_bos(vt), sp_vocab_bos(vd), sp_vocab_eos(vt), sp_vocab_eos(vd));
        return -1;
    }
    if (sp_model_get_info(draft)->n_vocab > sp_model_get_info(target)->n_vocab) {
        seterr(err, errlen, "the draft's output has more rows than the target's");
        return -1;
    }
    for (int32_t i = 0; i < nd; i++) {
        const char *a = sp_vocab_token_text(vt, i), *b = sp_vocab_token_text(vd, i);
        if (strcmp(a ? a : "", b ? b : "") || sp_vocab_token_type(vt, i) != sp_vocab_token_type(vd, i)) {
            seterr(err, errlen, "token %d differs between target ('%s') and draft ('%s')", i,
                      a ? a : "", b ? b : "");
            return -1;
        }
    }
    return 0;
}
