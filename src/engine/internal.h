/* internal.h: what the engine's files share: the request record, the
 * engine, the step's buffers, and the functions one file offers another.
 * Not part of the public API (include/specula.h). See engine.c's legend
 * for the map of the files and the step's flow. */
#ifndef SP_ENGINE_INTERNAL_H
#define SP_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "kv/disk_tier.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "speculate/draft.h"
#include "speculate/planner.h"
#include "speculate/spec.h"

/* Compiled grammars kept by tenant and text. */
#define SP_GCACHE 32
/* The requests' grammar memory when the parameters give none. */
#define SP_GRAMMAR_MEM_DEFAULT ((size_t)1 << 30)

typedef enum { RQ_WAITING, RQ_RUNNING, RQ_DONE } rq_state;

/* The acceptance estimate per request: a moving average of the acceptance
 * observed at each verification (and each shadow check) that forgets in
 * ~10 steps; the prior of its partition follows slower. */
#define SP_ALPHA_KEEP 0.8f
#define SP_ALPHA_RATE 0.2f
/* Depth of the suffix tries (the longest context match plus proposal). */
#define SP_SUFFIX_DEPTH 24
/* A suffix proposal goes on while its estimated acceptance stays above. */
#define SP_SUFFIX_MIN_PROB 0.1f
/* Limits of the engine's parameters and of a request's fields. */
#define SP_ENGINE_MAX_SEQS SP_PLAN_MAX_CANDS /* every running sequence is a planner candidate */
#define SP_ENGINE_MAX_BATCH 65536
#define SP_ENGINE_MAX_CTX (1 << 20)
#define SP_ENGINE_MAX_BLOCK 4096
#define SP_ENGINE_MAX_THREADS 256
#define SP_ENGINE_MAX_NGRAM 64
#define SP_REQ_MAX_LOGPROBS 20
#define SP_REQ_MAX_STOPS 64
#define SP_REQ_MAX_PROMPT_BYTES ((size_t)64 << 20)

typedef struct request request;
struct request {
    int64_t id;
    uint64_t seqno;            /* arrival order (ties between equal priorities) */
    uint64_t admit_no;         /* admission order: the newest is preempted first */
    request *next;             /* all-records list */
    rq_state state;
    /* input */
    sp_token *toks;            /* [cap] prompt then generated tokens */
    int32_t n_prompt, n_all, cap;
    sp_sampler *smp;
    int32_t max_tokens;
    char **stop;               /* [n_stop] */
    int32_t n_stop;
    size_t max_stop_len;
    sp_token *stop_toks;       /* [n_stop_toks] */
    int32_t n_stop_toks;
    bool ignore_eos;
    int32_t n_lp;              /* top logprobs wanted (0 off) */
    char *salt;                /* NULL: none */
    int32_t priority;
    sp_event_cb cb;
    void *user;
    /* output */
    float *lp;                 /* [max_tokens] logprob of each generated token, or NULL
                                  when none was asked for (logprobs < 0) */
    sp_token *top_ids;         /* [max_tokens][n_lp] */
    float *top_lps;            /* [max_tokens][n_lp] */
    char *text;                /* [text_cap] generated text */
    size_t text_len, text_cap, text_released;
    sp_detok dt;
    int32_t ev_tokens;         /* tokens already reported by events */
    size_t ev_text;            /* text bytes already reported */
    /* engine side */
    int32_t slot;              /* -1 when not running */
    block_digest *hashes;     /* [max_blocks_per_seq] chain over toks' full blocks */
    int32_t n_hashed;          /* leading entries of hashes computed */
    int32_t n_committed;       /* leading blocks of the slot committed to the cache */
    int32_t max_computed;      /* furthest kv_len ever reached (recompute accounting) */
    bool admitted_once;
    /* speculative decoding */
    sp_spec_mode spec;         /* resolved: OFF, NGRAM, SUFFIX or DRAFT (under auto: this
                                  step's proposer) */
    bool spec_auto;            /* SP_SPEC_AUTO: the proposer is chosen each step */
    float alpha_by[SP_SPEC_DRAFT + 1]; /* auto: each proposer's estimate (alpha, n_obs */
    int32_t n_obs_by[SP_SPEC_DRAFT + 1]; /* are the chosen one's) */
    sp_token alt_shadow;       /* auto: the first proposal of the proposer not chosen, */
    int32_t alt_pos;           /* checked like shadow (-1: none) ... */
    sp_spec_mode alt_spec;     /* ... for this proposer's estimate */
    int32_t spec_k;            /* most proposed per step */
    sp_propose_fn propose;
    void *propose_user;
    bool greedy;
    sp_token draft[SP_SPEC_K_MAX]; /* this step's proposals */
    int32_t n_draft;
    float alpha;               /* acceptance estimate (eng_spec_observe); starts from its
                                  partition's prior at the first admission, and a
                                  draft sequence follows that prior until it has
                                  verified something itself (n_obs) */
    int32_t n_obs;             /* acceptance observations of its own (eng_spec_observe) */
    spec_part *part;        /* its salt's partition, held while it has a slot */
    /* A deterministic proposal the planner chose not to verify is still
     * checked against the token the target then commits: acceptance keeps
     * being measured while speculation is off, so a sequence whose
     * proposals turn good is noticed (else one bad start stops it for good) */
    sp_token shadow;
    int32_t shadow_pos;        /* position shadow guesses, -1 for none */
    int32_t idle_steps;        /* draft: steps in a row planned at k = 0 */
    suffix_seq *sfx;        /* suffix index over prompt + committed output */
    int32_t sfx_len;           /* tokens of toks indexed in sfx */
    sp_sampler *dsmp;          /* the draft's sampler (sampling requests) */
    /* structured output (constrain.c): NULL without a grammar */
    sp_grammar *gram;          /* compiled (a reference), from submission */
    char *gtrigger;            /* a lazy grammar's trigger, or NULL */
    bool gat_start;            /* ... counted only at the start of the output */
    size_t gmem_gram, gmem_match; /* bytes of the engine's grammar memory it holds */
    sp_matcher *gm;            /* where in the grammar the output is; from admission */
    int64_t gwork_seen;        /* sp_matcher_work at the last schedule */
    int64_t gdebt;             /* grammar work beyond its steps' allowance (sched.c) */
    bool throttled;            /* sits this step out to repay gdebt */
    uint32_t *gmask;           /* [(n_vocab + 31) / 32] scratch: allowed tokens */
    int32_t n_forced;          /* of this step's proposals, the last n_forced are the
                                  grammar's (jump-forward) */
    sp_token gtrig_tok;        /* lazy grammar: a control token standing for the trigger,
                                  whose text (gtrig) the output gets; -1 none */
    char *gtrig;
    int err_status;            /* with an error finish: its sp_status (0: SP_ERR_INTERNAL) */
    bool cancel_req, released;
    bool final_sent;           /* the finished event went out (callback requests) */
    sp_request_stats st;
    double t_submit, t_sched, t_first, t_last;
    char err[256];
};

/* One entry of the step's batch: a request, its tokens in the batch, and
 * the logits rows the pass returns for it. */
typedef struct {
    request *r;
    int32_t n;                 /* tokens in the batch: a prefill chunk, or 1 + proposals */
    int32_t row;               /* its first logits row */
    int32_t n_rows;            /* rows: 0 (a chunk short of the end), 1, or 1 + n_draft */
} step_entry;

/* Everything one step builds and throws away, sized at creation. */
typedef struct {
    /* the target's batch */
    sp_token *tok;             /* [max_batch_tokens] */
    int32_t *pos, *seq;        /* [max_batch_tokens] */
    int8_t *want;              /* [max_batch_tokens] */
    int32_t n_tok;
    step_entry *ent;           /* [max_seqs] */
    int32_t n_ent;
    /* speculation: the candidates the planner sees, and the draft's work */
    spec_cand *cand;        /* [max_seqs] */
    int32_t *cand_k;           /* [max_seqs] planned k of each candidate */
    int32_t *cand_entry;       /* [max_seqs] batch entry of each candidate */
    int32_t n_cand;
    draft_seq *dseq;        /* [max_seqs] the draft model's work */
    int32_t *dseq_entry;       /* [max_seqs] batch entry of each */
    sp_token *commit;          /* [SP_SPEC_K_MAX + 1] tokens verification commits */
    /* what this round tells callers */
    sp_event *events;          /* [max_seqs] */
    request **ev_req;          /* [max_seqs] */
    int32_t n_ev;
} step;

/* Each concern's state in the engine record is a substructure that one
 * file owns: it creates, reads, changes and frees it; other engine files go
 * through that file's functions (declared below, file by file). Policy
 * lives in src/<concern>/ (src/speculate, src/grammar, src/kv); these files
 * are its glue to the engine loop. */

/* speculate.c: the proposers' shared state and what the planner measured */
typedef struct {
    drafter *drafter;          /* NULL without a draft model */
    cost_model cost;           /* measured pass cost of the target */
    cost_fit tfit;             /* the same, refitted to every pass since (planner.h) */
    bool calibrated, calib_tried; /* tried: at creation or at the first speculating request */
    spec_guard guard;          /* speculation on or off per batch shape, by measured
                                  throughput (planner.h); adaptive engines only */
    spec_parts *parts;         /* per cache salt: suffix store and acceptance priors */
} eng_spec;

/* disk.c: the prefix cache's disk tier; tier NULL without --kv-disk */
typedef struct {
    disk_tier *tier;
    uint8_t *buf;              /* [block_bytes] a restored block before it enters the pool */
    uint8_t *put_buf;          /* [block_bytes] a committed block copied out of the pools for the tier */
    double ms_block;           /* restore cost per block (moving average; 0: not measured) */
    double prefill_ms_tok;     /* prefill cost per token (moving average; 0: not measured) */
    uint64_t restored, declined;
    double restore_ms;
} eng_disk;

/* constrain.c: structured output, under mu: built at the first request with
 * a grammar, then read-only */
typedef struct {
    pthread_mutex_t mu;
    sp_token_trie *trie;
    float *mrows;              /* [SP_SPEC_K_MAX + 1][V] masked logits rows */
    size_t mem_gram, mem_match; /* grammar memory held by requests' compiled grammars and
                                   matchers (atomic; each at most grammar_mem / 2) */
    uint64_t compiles;         /* grammars compiled (atomic) */
    struct gcache_entry {
        char *salt;            /* the tenant's, NULL none */
        char *text;
        sp_grammar *g;
        uint64_t used;
    } cache[SP_GCACHE];
    uint64_t clock;
} eng_grammar;

/* engine.c: the pool changes inside the forward pass, which runs unlocked,
 * so other threads never touch it: they read kv_snap (written only by
 * publish(), after every round of the loop) and ask the engine thread to
 * flush or check */
typedef struct {
    kv_paged_stats kv_snap;
    uint64_t gen;              /* bumped when the engine thread served a control ask */
    bool flush_req, check_req;
    int32_t flush_result;
    int check_rc;
    char check_err[256];
    uint64_t check_failures;   /* debug_check: steps after which the checker failed */
    char first_failure[256];
} eng_ctl;

struct sp_engine {
    const sp_model *m;
    const sp_vocab *vocab;
    sp_engine_params p;
    kv_store *kv;
    sp_context *ctx;
    uint8_t model_key[32];
    int32_t max_blocks;        /* per sequence */
    int32_t n_vocab;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* engine thread: something to do */
    pthread_cond_t changed;    /* waiters: some request progressed */
    bool stop;
    int64_t next_id;
    uint64_t next_seqno, next_admit;
    request *all;              /* every record */
    request **waiting;         /* [wait_cap] sorted: priority desc, seqno asc */
    int32_t n_waiting, wait_cap;
    request **slots;           /* [max_seqs] running request per slot or NULL */
    int32_t n_running;
    step step;
    sp_engine_stats st;
    eng_spec spec;             /* speculative decoding (speculate.c) */
    eng_disk disk;             /* the disk tier (disk.c) */
    eng_grammar gram;          /* structured output (constrain.c) */
    eng_ctl ctl;               /* control asks and the debug checker (engine.c) */
};

static inline int32_t kv_len(const sp_engine *e, const request *r) {
    return r->slot < 0 ? 0 : sp_seq_len(e->ctx, r->slot);
}

/* intake.c */
void rq_free(request *r);
request *eng_find(sp_engine *e, int64_t id);
void eng_unlink(sp_engine *e, request *r);

/* sched.c (engine thread, locked, except wait_insert: any thread, locked) */
void eng_wait_insert(sp_engine *e, request *r);
void eng_finish(sp_engine *e, request *r, sp_finish_reason why);
int32_t eng_schedule(sp_engine *e, step *s);
void eng_commit_blocks(sp_engine *e, request *r);

/* disk.c (engine thread, locked) */
int eng_disk_open(sp_engine *e, char *err, size_t errlen);
void eng_disk_close(sp_engine *e);
int32_t eng_disk_restore(sp_engine *e, request *r, int32_t from, int32_t usable,
                         int32_t *from_disk);
void eng_disk_put(sp_engine *e, request *r, int32_t block);
void eng_disk_observe(sp_engine *e, int32_t n_tok, double ms);
void eng_disk_stats(sp_engine *e, sp_engine_stats *st);
/* The rule: restore a block while its measured cost is below block_size
 * tokens of measured prefill (true while either is unmeasured, <= 0). */
bool eng_disk_restore_pays(double restore_ms_block, double prefill_ms_tok, int32_t block_size);

/* step.c */
int step_init(step *s, int32_t max_batch_tokens, int32_t max_seqs);
void step_free(step *s);
void eng_step(sp_engine *e);

/* output.c */
void eng_emit_token(sp_engine *e, request *r, sp_token t, const float *logits);
void eng_make_event(sp_engine *e, request *r);

/* constrain.c */
void eng_grammar_init(sp_engine *e);
void eng_grammar_stats(sp_engine *e, sp_engine_stats *st);
int eng_grammar_take(sp_engine *e, request *r, const sp_request_params *rp, char *err, size_t errlen);
void eng_grammar_free(sp_engine *e);
/* At admission: r's matcher, made within the engine's grammar memory. 1:
 * ready (or no grammar); 0: wait, the memory is held by others; -1: failed
 * (r->err says why). */
int eng_grammar_admit(sp_engine *e, request *r);
/* Whether r waits this step to repay grammar work (sched.c's fairness). */
bool eng_grammar_throttled(request *r);
/* Gives back the grammar memory r holds (idempotent). */
void eng_grammar_release(sp_engine *e, request *r);
/* r->err for a grammar that stopped the output: a budget exceeded, or a
 * dead end. */
void eng_grammar_dead_end(request *r);
const float *eng_grammar_mask_rows(sp_engine *e, request *r, const float *rows, int32_t *n);
void eng_grammar_cut(sp_engine *e, request *r);
void eng_grammar_forced(sp_engine *e, request *r, int32_t cap);
bool eng_grammar_commit(sp_engine *e, request *r, sp_token t);

/* speculate.c. eng_spec_init: the draft (cp, n_blocks: the target
 * context's parameters and pool), the partitions, the guard, and the
 * calibration of an adaptive engine; -1 + err. eng_spec_free: before the
 * target context is freed (the draft runs on its threads). */
int eng_spec_init(sp_engine *e, sp_context_params cp, int64_t n_blocks, char *err, size_t errlen);
void eng_spec_free(sp_engine *e);
void eng_spec_stats(const sp_engine *e, sp_engine_stats *st);
/* The partitions' invariants (debug_check, sp_engine_check). */
int eng_spec_check(const sp_engine *e, char *err, size_t errlen);
/* The acceptance prior of a salt's partition for mode m. */
float eng_spec_prior(const sp_engine *e, const char *cache_salt, sp_spec_mode m);
/* The draft model's vocabulary size; 0 without a draft. */
int32_t eng_spec_draft_vocab(const sp_engine *e);
/* A request takes its salt's partition at admission (eng_spec_admit),
 * feeds its output to it when it finishes (eng_spec_learn), and gives it
 * and its draft sequence back with its slot (eng_spec_release). */
void eng_spec_admit(sp_engine *e, request *r);
void eng_spec_learn(sp_engine *e, const request *r);
void eng_spec_release(sp_engine *e, request *r);
/* The guard (does a step of n_dec decoding sequences speculate?) and what
 * each pass teaches the cost model and the guard. */
bool eng_spec_guard_on(sp_engine *e, int32_t n_dec);
void eng_spec_observe_pass(sp_engine *e, int32_t n_tok, double attn, double ms);
void eng_spec_guard_observe(sp_engine *e, int32_t n_dec, bool measured, int32_t n_tokens, double ms);
void eng_spec_calibrate(sp_engine *e);
void eng_spec_prepare(sp_engine *e, step *s);
void eng_spec_commit(sp_engine *e, step *s, const step_entry *en);
void eng_spec_observe(request *r, float obs, bool to_prior);
/* auto: the first guess of the proposer not chosen, against the token
 * committed at position at (its estimate only; none: nothing happens). */
void eng_spec_check_alt(request *r, int32_t at);

#endif
