/* planner.h: how many tokens each speculating sequence proposes this step.
 * The cost model (what a forward pass of n tokens costs, measured at startup
 * and refitted to every pass while serving) and the planner that weighs it
 * against each sequence's acceptance estimate.
 *
 * Flow: at startup (or at the first speculating request) the engine times
 * passes with cost_measure / cost_measure_attn and builds an
 * cost_fit per model; every pass after that is fed to
 * cost_fit_observe; every step spec_plan picks k per candidate.
 */
#ifndef SP_SPEC_PLANNER_H
#define SP_SPEC_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specula.h"

struct kv_store;

#define SP_COST_POINTS 12
/* The largest pass measured at startup (beyond it the curve is extrapolated
 * linearly, as a compute-bound pass grows). Startup measures 2 x 63 tokens
 * and a warm-up pass per point: 4 x 127 (up to 64 tokens, best of 3) would
 * take a quarter to half a second of a short `specula batch` run. */
#define SP_COST_MAX_TOKENS 32

/* Milliseconds of one forward pass as a function of the tokens in it,
 * measured at startup: piecewise linear between measured points, linear
 * extrapolation past the last. */
typedef struct {
    int32_t n;                    /* points measured */
    int32_t tok[SP_COST_POINTS];  /* increasing */
    double ms[SP_COST_POINTS];
} cost_model;

double cost_at(const cost_model *c, double tokens);

/* What a pass costs while serving: s x (curve(n) + c_attn x A / 1000) for
 * n tokens attending A positions in total (the sum over the pass's tokens
 * of the positions each one attends to). The curve is measured at startup
 * in an empty context and c_attn from a pass at a long context: the curve
 * alone misses the attention that every verified token pays (at 400
 * positions about a third of a token's cost on the bundled model). The
 * scale s follows every measured pass (a moving average of measured /
 * predicted with weight SP_COST_RATE, each ratio clamped to [1/4, 4] so a
 * pass slowed by a preemption or the OS moves it little): whatever slows
 * the machine down since startup. One parameter, so it is identified by any
 * pass; c_attn is not fitted online as well: in steady decoding the two
 * terms move together, and such a fit drifts to "everything is attention",
 * which makes verification look 5x dearer. */
#define SP_COST_RATE 0.05
typedef struct {
    cost_model curve;
    double c_attn;    /* ms per 1000 attended positions (startup) */
    double s;         /* fitted scale */
    int64_t n_obs;
} cost_fit;

/* s = 1; curve and c_attn (>= 0) copied. */
void cost_fit_init(cost_fit *f, const cost_model *curve, double c_attn);
/* A measured pass of n_tok tokens attending n_attn positions in total
 * (nonsense values are ignored). */
void cost_fit_observe(cost_fit *f, double n_tok, double n_attn, double ms);
/* Predicted milliseconds of such a pass (>= 0). */
double cost_fit_at(const cost_fit *f, double n_tok, double n_attn);

/* One speculating sequence as the planner sees it. */
typedef struct {
    float alpha;     /* estimated probability each proposed token is accepted */
    int32_t k_cap;   /* most tokens it may propose this step */
    bool draft;      /* proposals cost draft-model passes */
    int32_t ctx;     /* positions its next token attends to (its length) */
    int32_t catchup; /* draft: committed tokens the draft has not seen yet,
                        fed with its first drafting pass */
} spec_cand;

/* Chooses k[i] in 0..cand[i].k_cap for every candidate to maximize the
 * expected tokens committed per millisecond of the step: the batch already
 * holds base_tokens tokens attending base_attn positions (every decoder's
 * own token and any prefill), committing base_commit tokens for sure;
 * proposing k tokens for candidate i adds alpha + alpha^2 + ... + alpha^k
 * expected tokens and k tokens (attending about ctx positions each) to the
 * verification pass; draft proposals also cost one draft pass over the
 * drafting candidates per token of the longest draft, the first one also
 * over the tokens they must catch up on (draft may be NULL).
 * Greedy on the marginal gain, which is optimal here because each
 * candidate's gains decrease with k; the step's first proposed token must
 * raise tokens per ms by SP_PLAN_MARGIN. Returns the total proposed. */
#define SP_PLAN_MARGIN 0.10
#define SP_PLAN_MAX_CANDS 1024 /* n_cand limit (the engine's max_seqs limit) */
int32_t spec_plan(const cost_fit *target, const cost_fit *draft, int32_t base_tokens,
                     double base_attn, double base_commit, const spec_cand *cand,
                     int32_t n_cand, int32_t *k);

/* ---- measuring pass costs ------------------------------------------------- */

/* Times one pass of n tokens in the empty sequence `slot` of c (whose K/V
 * live in the paged pool kv) for n = 1, 2, 4, ... up to max_n (and
 * SP_COST_MAX_TOKENS),
 * best of 2 after a warm-up pass each, into out (out->n = 0 when not even
 * one pass fits or runs). Attention over a long context is not in these
 * passes; cost_measure_attn adds it. The slot is left empty. */
void cost_measure(sp_context *c, struct kv_store *kv, int32_t slot, int32_t max_n,
                     int32_t n_vocab, cost_model *out);
/* Milliseconds of attention per 1000 positions attended, from passes of one
 * token at position min(n_ctx - 1, 1024) against one at position 0; 0 when
 * the pool or context is too small. The slot is left empty. */
double cost_measure_attn(sp_context *c, struct kv_store *kv, int32_t slot, int32_t n_ctx,
                            int32_t n_vocab);

/* ---- the guard on realized throughput -------------------------------------
 *
 * The planner rests on estimates (pass costs, acceptance); the guard checks
 * what they bought. It compares, per batch shape (the count of decoding
 * sequences, in power-of-two buckets), the committed tokens per
 * millisecond of recent steps that speculated with those of steps that did
 * not, and keeps speculation off in that shape while it loses.
 *
 * Time is cut into phases of measured steps (decode-only steps, whole step:
 * proposals, plan, draft passes, the target pass, verification). A phase
 * runs one state (speculation on or off); at its end its rate moves that
 * state's estimate (the mean of the old one and the phase's). The rate is
 * tokens / ms over the phase with each step's ms capped at twice the
 * phase's median: a step the OS descheduled (on a shared machine, steps
 * 5x the usual happen) says nothing about speculation. The states alternate as exploit / explore: after a phase
 * of the better state, a short one (SP_GUARD_EXPLORE steps) of the other,
 * then the better is chosen again: on only when its estimate beats off's
 * by SP_GUARD_MARGIN (a tie is off: speculating for nothing is the costly
 * error). A choice confirmed doubles its next exploit phase (from
 * SP_GUARD_EXPLOIT_MIN up to SP_GUARD_EXPLOIT_MAX steps), so a settled shape
 * explores the other state in under 3% of its steps; a reversed choice
 * starts again from the shortest. A shape starts with speculation on (a
 * phase of SP_GUARD_EXPLOIT_MIN steps), then measures off.
 * No allocation; O(1) per step. */
#define SP_GUARD_BUCKETS 12      /* 1, 2-3, 4-7, ... 1024+ decoding sequences */
#define SP_GUARD_EXPLORE 8
#define SP_GUARD_EXPLOIT_MIN 24
#define SP_GUARD_EXPLOIT_MAX 256
#define SP_GUARD_MARGIN 0.03

typedef struct {
    double est[2];    /* tokens per ms: [0] off, [1] on; 0 until measured */
    double tok;       /* tokens committed in the phase so far */
    float ms[SP_GUARD_EXPLOIT_MAX]; /* each measured step's milliseconds */
    int32_t steps;    /* measured steps in the phase so far */
    int32_t len;      /* the phase's length in measured steps */
    int32_t exploit;  /* the next exploit phase's length */
    bool on;          /* the phase's state */
    bool exploring;   /* the phase explores (else it exploits) */
} spec_guard_shape;

typedef struct {
    spec_guard_shape shape[SP_GUARD_BUCKETS];
    uint64_t off_steps;  /* steps the guard kept speculation off */
    uint64_t switches;   /* exploit phases whose state differs from the one before */
} spec_guard;

void spec_guard_init(spec_guard *g);
/* Whether a step with n_dec decoding sequences speculates now. */
bool spec_guard_on(const spec_guard *g, int32_t n_dec);
/* A step with n_dec decoding sequences ran in the state spec_guard_on
 * gave; measured: it was decode-only (its tokens and ms count), else it
 * only counts in off_steps. */
void spec_guard_observe(spec_guard *g, int32_t n_dec, bool measured, int32_t tokens,
                           double ms);
/* The shape's estimates (0 when not measured yet), for diagnostics. */
void spec_guard_rates(const spec_guard *g, int32_t n_dec, double *off, double *on);

#endif
