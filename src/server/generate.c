/* generate.c: POST /v1/completions, /v1/chat/completions and
 * /v1/responses (a chat request translated by responses.c, answered in
 * its own shape).
 *
 * A request goes through four steps, each a function below:
 *   gen_parse   the body into an oai_req (openai.c's field table), and the
 *               checks that need the server: model name, chat template;
 *   gen_build   the engine's request from it: the prompt's tokens (chat
 *               rendered by the template), max_tokens' default, the stop
 *               strings and end-of-turn token, the cache salt, the seed;
 *   gen_submit  a request record (sreq) and sp_engine_submit, whose
 *               refusals map to HTTP through openai_reply.c's one table;
 *   gen_respond an SSE stream, or a suspended connection that gen_answer
 *               completes once the engine is done.
 * Admission (the queue limit, a draining server) comes between parse and
 * build: the prompt's tokenization is the one costly step before the
 * engine, and a full queue refuses in microseconds whatever its size.
 *
 * The engine's callback (on_event, engine thread) copies each event's
 * tokens and text into the record under its mutex and resumes the
 * connection; the connection takes what is new and suspends again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "grammar/grammar.h"
#include "server/internal.h"
#include "server/responses.h"

void sreq_unref(sreq *r) {
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    pthread_mutex_destroy(&r->mu);
    free(r->toks);
    free(r->lps);
    free(r->top_ids);
    free(r->top_lps);
    sb_free(&r->text);
    sb_free(&r->out);
    resp_free(r);
    free(r);
}

/* What the response JSON needs of r (r->mu held while it is used); once
 * it finished, with the reasoning of a template that thinks taken out of
 * the text. */
static oai_reply reply_of(const sreq *r) {
    oai_reply o = {.chat = r->chat, .id = r->rid, .created = r->created,
                   .model = r->s->served_name, .v = r->s->v, .logprobs = r->logprobs,
                   .toks = r->toks, .lps = r->lps, .top_ids = r->top_ids,
                   .top_lps = r->top_lps, .n_tok = r->n_tok, .n_top = r->n_top,
                   .text = r->text.p, .text_len = r->text.len, .st = &r->st,
                   .finish = oai_finish_reason(r->st.finish), .tools = r->tools,
                   .tool_mode = r->tool_mode};
    if (r->thinks && r->finished && r->text.p) {
        oai_think th;
        oai_think_split(r->text.p, r->text.len, r->think_open, true, &th);
        if (th.any) {
            o.reasoning = r->text.p + th.r_off;
            o.reasoning_len = th.r_len;
        }
        o.text = r->text.p + th.c_off;
        o.text_len = r->text.len - th.c_off;
    }
    return o;
}

/* ---- suspending a connection while the engine works ------------------- */

/* Resumes r's connection if it waits (r->mu held). MHD allows resuming
 * from any thread; resuming a connection that is not suspended is
 * undefined, hence the flag, which only this and park() change, both
 * under r->mu. */
static void wake(sreq *r) {
    if (!r->suspended || !r->c) return;
    r->suspended = false;
    MHD_resume_connection(r->c);
}

/* Suspends r's connection until wake() (r->mu held; only from the access
 * handler or the content reader, as MHD requires). False when the server
 * is stopping and the response must end instead. */
static bool park(sreq *r) {
    if (r->abort || !r->c || r->s->closing) return false;
    r->suspended = true;
    MHD_suspend_connection(r->c);
    return true;
}

/* Whether r has something its response has not taken yet (r->mu held). */
static bool has_news(const sreq *r) {
    return r->finished || r->n_tok != r->sent_tok || r->text.len != r->sent_text;
}

/* ---- the engine's callback (engine thread: copy, signal, return) ------ */

static bool grow_tokens(sreq *r, int32_t need, int32_t n_top) {
    if (need <= r->cap_tok) return true;
    int32_t cap = need * 2 > 64 ? need * 2 : 64;
    sp_token *t = realloc(r->toks, (size_t)cap * sizeof(sp_token));
    if (!t) return false;
    r->toks = t;
    if (r->logprobs >= 0) {
        float *l = realloc(r->lps, (size_t)cap * sizeof(float));
        if (!l) return false;
        r->lps = l;
        if (n_top) {
            sp_token *ti = realloc(r->top_ids, (size_t)cap * n_top * sizeof(sp_token));
            if (!ti) return false;
            r->top_ids = ti;
            float *tl = realloc(r->top_lps, (size_t)cap * n_top * sizeof(float));
            if (!tl) return false;
            r->top_lps = tl;
        }
    }
    r->cap_tok = cap;
    return true;
}

/* An event's tokens (and logprobs) appended to r (r->mu held); the
 * inter-token latency in seconds, or -1. */
static double take_tokens(sreq *r, const sp_event *ev, double t) {
    double itl = -1;
    int32_t n_top = r->logprobs >= 0 && ev->top_ids ? ev->top_logprobs : 0;
    if (r->n_tok == 0) r->n_top = n_top;
    if (n_top != r->n_top) n_top = 0;
    if (!grow_tokens(r, r->n_tok + ev->n_tokens, r->n_top)) {
        r->oom = true;
        return -1;
    }
    memcpy(r->toks + r->n_tok, ev->tokens, (size_t)ev->n_tokens * sizeof(sp_token));
    if (r->logprobs >= 0 && ev->logprobs)
        memcpy(r->lps + r->n_tok, ev->logprobs, (size_t)ev->n_tokens * sizeof(float));
    if (r->n_top && n_top) {
        memcpy(r->top_ids + (size_t)r->n_tok * r->n_top, ev->top_ids,
               (size_t)ev->n_tokens * r->n_top * sizeof(sp_token));
        memcpy(r->top_lps + (size_t)r->n_tok * r->n_top, ev->top_lps,
               (size_t)ev->n_tokens * r->n_top * sizeof(float));
    }
    if (r->n_tok == 0) r->t_first = t;
    else itl = (t - r->t_last) / 1e3;
    r->t_last = t;
    r->n_tok += ev->n_tokens;
    return itl;
}

/* The final event (r->mu held): the statistics, the metrics, the server's
 * count of requests in flight. */
static void take_finish(sreq *r, const sp_event *ev, double t) {
    http_server *s = r->s;
    r->st = *ev->stats;
    if (ev->error) {
        snprintf(r->error, sizeof(r->error), "%s", ev->error);
        r->err_status = ev->error_status;
    } else if (r->oom) {
        /* an answer with tokens or text missing must not look whole */
        snprintf(r->error, sizeof(r->error), "out of memory");
        r->st.finish = SP_FINISH_ERROR;
    }
    double tpot = -1;
    if (r->n_tok >= 2) tpot = (r->t_last - r->t_first) / 1e3 / (r->n_tok - 1);
    /* counted before anyone can see the request finished, so a client
     * that reads /metrics after its response finds it there */
    double ttft_s = r->n_tok ? (r->t_first - r->t_arrive) / 1e3 : -1;
    metrics_finished(&s->met, &r->st, ttft_s, tpot, (t - r->t_arrive) / 1e3);
    log_request(s, r->rid, r->tenant, r->st.finish != SP_FINISH_ERROR ? 200 : r->err_status == SP_ERR_GRAMMAR ? 400 : 500, r,
                r->t_arrive, t);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
    r->finished = true;
}

static void on_event(const sp_event *ev, void *user) {
    sreq *r = user;
    http_server *s = r->s;
    double t = now_ms(), itl = -1;
    pthread_mutex_lock(&r->mu);
    if (ev->n_tokens > 0) itl = take_tokens(r, ev, t);
    if (ev->text_len) sb_add(&r->text, ev->text, ev->text_len);
    if (r->text.oom) r->oom = true;
    /* the same condition as stream_build's for a chunk with content, so the
     * stamp is the time the server first had something to send */
    if (s->o.stamp_chunks && (ev->text_len || (r->logprobs >= 0 && ev->n_tokens > 0))) {
        if (!r->pend_events) r->t_pend = t;
        r->pend_events++;
    }
    bool fin = ev->finished;
    if (fin) take_finish(r, ev, t);
    if (itl >= 0) metrics_observe(&s->met, &s->met.itl, itl);
    /* a stream takes every event; a plain request only its end (each
     * resume costs the worker a rebuild of its poll set) */
    if (r->stream || fin) wake(r);
    pthread_mutex_unlock(&r->mu);
    if (fin) sreq_unref(r);
}

/* ---- cancellation -------------------------------------------------------- */

void sreq_cancel(sreq *r, bool disconnect) {
    pthread_mutex_lock(&r->mu);
    bool do_it = !r->finished && r->id > 0 && !r->disconnected;
    if (do_it) r->disconnected = true;
    int64_t id = r->id;
    pthread_mutex_unlock(&r->mu);
    if (!do_it) return;
    sp_engine_cancel(r->s->e, id);
    if (disconnect) metrics_disconnect(&r->s->met);
}

void sreq_stop(sreq *r) {
    pthread_mutex_lock(&r->mu);
    if (!r->finished && !r->t_stop) r->t_stop = now_ms();
    pthread_mutex_unlock(&r->mu);
    sreq_cancel(r, false);
}

void sreq_abort(sreq *r) {
    pthread_mutex_lock(&r->mu);
    r->abort = true;
    wake(r);
    pthread_mutex_unlock(&r->mu);
}

/* The error a request that ended with one answers with: a 400 naming the
 * field when it was its own fault (its grammar over a budget), else a 500
 * (r->mu held). */
static void finish_error(const sreq *r, oai_error *e) {
    const bool own = r->err_status == SP_ERR_GRAMMAR;
    oai_status_error(e, own ? SP_ERR_GRAMMAR : SP_ERR_INTERNAL, own ? r->err_param : NULL, "%s",
                     r->error[0] ? r->error : "error");
}

/* ---- streaming ------------------------------------------------------------ */

/* A stream with tools: what the calls' reader finds in the new text, as
 * chunks (content, a call's first chunk, its arguments' fragments); the
 * new tokens' logprobs ride on the first chunk of content. */
typedef struct {
    sreq *r;
    const oai_reply *o;
    bool lp;                       /* logprobs to send */
} calls_out;

static void stream_call(void *user, int kind, int index, const char *s, size_t n) {
    calls_out *x = user;
    sreq *r = x->r;
    if (kind == OAI_CALL_CONTENT) {
        oai_reply_chunk(&r->out, x->o, s, n, r->sent_tok, x->lp ? r->n_tok : 0, NULL, false, NULL);
        x->lp = false;
    } else if (kind == OAI_CALL_START) {
        char name[80];
        snprintf(name, sizeof(name), "%.*s", (int)n, s);
        oai_reply_call_chunk(&r->out, x->o, index, name, NULL, 0);
    } else {
        oai_reply_call_chunk(&r->out, x->o, index, NULL, s, n);
    }
}

/* Appends to r->out the SSE events for what is new (r->mu held). */
static void stream_build(sreq *r) {
    const oai_reply o = reply_of(r);
    if (r->responses) {
        oai_error e;
        if (r->finished && r->st.finish == SP_FINISH_ERROR) finish_error(r, &e);
        resp_stream_build(r, &o, r->finished && r->st.finish == SP_FINISH_ERROR ? &e : NULL);
        return;
    }
    if (r->chat && !r->sent_role) {
        oai_reply_chunk(&r->out, &o, NULL, 0, 0, 0, NULL, true, NULL);
        r->sent_role = true;
    }
    /* a template that thinks: the reasoning goes out as reasoning_content,
     * and the answer (content, calls) starts after it, at base */
    size_t base = 0;
    if (r->thinks) {
        oai_think th;
        oai_think_split(r->text.p ? r->text.p : "", r->text.len, r->think_open, r->finished, &th);
        const size_t from = SP_MAX(r->sent_reason, th.r_off), to = th.r_off + th.r_len;
        if (to > from) oai_reply_reasoning_chunk(&r->out, &o, r->text.p + from, to - from);
        r->sent_reason = SP_MAX(r->sent_reason, to);
        if (th.c_off == SIZE_MAX) { /* the answer has not begun */
            r->sent_tok = r->n_tok;
            if (!r->finished) return;
            th.c_off = r->text.len;
        }
        base = th.c_off;
        r->sent_text = SP_MAX(r->sent_text, base);
    }
    size_t nt = r->text.len - r->sent_text;
    int32_t ntok = r->n_tok - r->sent_tok;
    bool lp = r->logprobs >= 0 && ntok > 0;
    if (r->tools) {
        calls_out x = {r, &o, lp};
        oai_calls_feed(&r->calls, r->text.p + base, r->text.len - base, r->finished, stream_call, &x);
        if (x.lp) oai_reply_chunk(&r->out, &o, NULL, 0, r->sent_tok, r->n_tok, NULL, false, NULL);
    } else if (nt || lp) {
        oai_stamp stamp = {(long long)(r->t_pend * 1e3), (long long)(now_ms() * 1e3),
                           r->pend_events}; /* pend_events: only with --stamp-chunks */
        oai_reply_chunk(&r->out, &o, r->text.p + r->sent_text, nt, r->sent_tok,
                        lp ? r->n_tok : 0, NULL, false, r->pend_events ? &stamp : NULL);
        r->pend_events = 0;
    }
    r->sent_text = r->text.len;
    r->sent_tok = r->n_tok;
    if (!r->finished) return;
    if (r->st.finish == SP_FINISH_ERROR) {
        oai_error e;
        finish_error(r, &e);
        oai_reply_error_event(&r->out, &e);
    } else {
        const bool called = r->tools && r->calls.done && r->st.finish == SP_FINISH_STOP;
        oai_reply_chunk(&r->out, &o, r->chat ? NULL : "", 0, 0, 0, called ? "tool_calls" : o.finish,
                        false, NULL);
        if (r->include_usage) oai_reply_usage_chunk(&r->out, &o);
    }
    sb_str(&r->out, "data: [DONE]\n\n");
    r->sent_done = true;
}

/* MHD's content reader for a stream: what is buffered, else what is new,
 * else suspend (return 0) until the engine's next event wakes the
 * connection. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    sreq *r = cls;
    for (;;) {
        if (r->out_off < r->out.len) {
            size_t n = r->out.len - r->out_off;
            if (n > max) n = max;
            memcpy(buf, r->out.p + r->out_off, n);
            r->out_off += n;
            return (ssize_t)n;
        }
        r->out.len = 0;
        r->out_off = 0;
        if (r->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&r->mu);
        if (r->abort) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!has_news(r)) {
            bool parked = park(r);
            pthread_mutex_unlock(&r->mu);
            return parked ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        stream_build(r);
        bool oom = r->out.oom;
        pthread_mutex_unlock(&r->mu);
        if (oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) { sreq_unref(cls); }

/* ---- the plain answer ----------------------------------------------------- */

enum MHD_Result gen_answer(http_server *s, struct MHD_Connection *c, const char *url, sreq *r) {
    pthread_mutex_lock(&r->mu);
    if (!r->finished) {
        bool parked = park(r);
        pthread_mutex_unlock(&r->mu);
        return parked ? MHD_YES : MHD_NO; /* MHD_NO: the server stops, close */
    }
    sbuf b = {0};
    int code = 200;
    if (r->st.finish == SP_FINISH_ERROR || r->st.finish == SP_FINISH_CANCELLED) {
        oai_error e;
        if (r->st.finish == SP_FINISH_ERROR)
            finish_error(r, &e);
        else
            oai_status_error(&e, SP_ERR_CANCELLED, NULL, "%s",
                             r->t_stop ? "the server is shutting down; the request was cancelled"
                                       : "the request was cancelled");
        code = e.status;
        oai_error_json(&e, &b);
    } else {
        const oai_reply o = reply_of(r);
        if (r->responses) resp_reply_full(&b, &o, r->resp_echo);
        else oai_reply_full(&b, &o);
    }
    pthread_mutex_unlock(&r->mu);
    return srv_send_json(s, c, url, code, &b);
}

/* ---- the steps of a generation request ----------------------------------- */

/* Step 1: the body into q (a Responses request as the chat request it
 * means), then what only the server can check. */
static int gen_parse(http_server *s, const conn *cx, gen_api api, oai_req *q, oai_error *e) {
    const bool chat = api != GEN_COMPLETIONS;
    if (api == GEN_RESPONSES) {
        sbuf body = {0};
        char *echo;
        if (resp_translate(cx->body.p, cx->body.len, &body, &echo, e)) {
            memset(q, 0, sizeof(*q));
            return -1;
        }
        const int rc = oai_parse(body.p, body.len, true, s->n_vocab, q, e);
        sb_free(&body);
        q->resp_echo = echo;
        q->responses = true;
        if (rc < 0) {
            resp_error_param(e);
            return -1;
        }
    } else if (oai_parse(cx->body.p, cx->body.len, chat, s->n_vocab, q, e) < 0) {
        return -1;
    }
    if (q->model && strcmp(q->model, s->served_name))
        return oai_seterr(e, 404, "invalid_request_error", "model", "model_not_found",
                          "the model '%.200s' does not exist (this server serves '%.200s')",
                          q->model, s->served_name);
    if (chat && !s->ct)
        return oai_seterr(e, 400, "invalid_request_error", "messages", "no_chat_template",
                          "%s; start the server with --chat-template NAME|FILE (chatml, llama3, "
                          "llama2, mistral, phi3, gemma, or a Jinja file) or use /v1/completions",
                          s->tmpl_err);
    return chat ? oai_tools_apply(q, s->tmpl, e) : 0;
}

/* Admission: one of s->active's places, or a 503 (draining) / 429. */
static int gen_admit(http_server *s, oai_error *e) {
    if (s->draining)
        return oai_seterr(e, 503, "service_unavailable", NULL, "shutting_down",
                          "the server is shutting down");
    pthread_mutex_lock(&s->mu);
    bool full = s->active >= s->o.max_queue;
    if (!full) s->active++;
    pthread_mutex_unlock(&s->mu);
    if (full)
        return oai_status_error(e, SP_ERR_BUSY, NULL, "the server has %d requests in flight; "
                                "retry later", s->o.max_queue);
    return 0;
}

static void gen_release(http_server *s) {
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
}

/* The engine's request as gen_build makes it, with the storage its
 * pointers use (valid until gen_submit returns). */
typedef struct {
    sp_request_params rp;
    sp_token *toks;                /* the prompt (owned) */
    const char *stops[OAI_MAX_STOP + 1];
    char salt[600];
    sp_token eot;
    bool think_open;               /* the prompt ends inside a <think> block */
    char *grammar;                 /* the request's grammar after the reasoning (owned) */
} gen_plan;

/* As OpenAI: without a seed, sampled output varies from request to request. */
static uint64_t fresh_seed(http_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                 (atomic_fetch_add(&s->seq, 1) * SP_GOLDEN64);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

/* Step 2: the engine's request for q. The prompt is tokenized up to
 * n_ctx - 1 tokens (the tokenizer stops there); whether it leaves room for
 * max_tokens is the engine's check (SP_ERR_CONTEXT at submission). */
static int gen_build(http_server *s, const oai_req *q, const char *tenant, gen_plan *p,
                     oai_error *e) {
    int32_t n = 0;
    if (oai_prompt_tokens(q, q->chat ? s->ct : NULL, s->v, s->n_ctx - 1, &p->think_open, &p->toks, &n, e))
        return -1;
    sp_request_params *rp = &p->rp;
    *rp = sp_request_default_params();
    rp->tokens = p->toks;
    rp->n_tokens = n;
    rp->max_tokens = q->max_tokens ? q->max_tokens : q->chat ? s->n_ctx - n : 16;
    rp->sampling = q->sampling;
    if (!q->seed_given) rp->sampling.seed = fresh_seed(s);
    /* stop strings; the template's end of turn, as a token when it is one */
    int n_stop = 0;
    for (int i = 0; i < q->n_stop; i++) p->stops[n_stop++] = q->stop[i];
    const char *eot = q->chat ? chat_tmpl_eot(s->tmpl) : NULL;
    if (eot && s->eot_token < 0) p->stops[n_stop++] = eot;
    rp->stop = p->stops;
    rp->n_stop = n_stop;
    p->eot = s->eot_token;
    if (q->chat && p->eot >= 0) {
        rp->stop_tokens = &p->eot;
        rp->n_stop_tokens = 1;
    }
    /* the cache salt: the tenant's, combined with the request's */
    const char *cs = q->cache_salt && q->cache_salt[0] ? q->cache_salt : NULL;
    if (tenant && cs) snprintf(p->salt, sizeof(p->salt), "%s:%.500s", tenant, cs);
    else snprintf(p->salt, sizeof(p->salt), "%.500s", tenant ? tenant : cs ? cs : "");
    rp->cache_salt = p->salt[0] ? p->salt : NULL;
    rp->logprobs = q->logprobs < 0 ? -1 : q->logprobs > 0 ? q->logprobs : 1;
    rp->spec = q->spec;
    rp->spec_k = q->spec_k;
    rp->ignore_eos = q->ignore_eos;
    rp->grammar = q->grammar;
    rp->grammar_trigger = q->grammar_trigger;
    rp->grammar_at_start = q->grammar_at_start;
    if (p->think_open && q->grammar && !q->grammar_trigger) {
        /* the output starts inside the reasoning: the constraint holds from
         * its end on (a lazy grammar from "</think>"), as the answer is
         * read from there */
        if (!(p->grammar = gr_gbnf_after("</think>", q->grammar)))
            return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        rp->grammar = p->grammar;
        rp->grammar_trigger = "</think>";
        rp->grammar_at_start = false;
    }
    return 0;
}

static void make_id(http_server *s, const char *prefix, char *out, size_t len) {
    uint64_t n = atomic_fetch_add(&s->seq, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, len, "%s%08llx%016llx", prefix, (unsigned long long)(ts.tv_sec & 0xffffffff),
             (unsigned long long)(n * SP_GOLDEN64 ^ (uint64_t)ts.tv_nsec));
}

/* Registers r on the connection: its answer is the connection's, and
 * server_stop's sweeps find it through the peer. */
static void attach(http_server *s, conn *cx, sreq *r) {
    cx->r = r;
    pthread_mutex_lock(&s->reg_mu);
    if (cx->p) cx->p->r = r;
    pthread_mutex_unlock(&s->reg_mu);
}

/* Step 3: the request record, registered on the connection (cx; NULL when
 * the preparation thread submits it, and the connection attaches it
 * later), and the engine's request. NULL + e when the engine refuses (the
 * admission place is given back then). */
static sreq *gen_submit(http_server *s, struct MHD_Connection *c, conn *cx, const char *tenant,
                        const oai_req *q, gen_plan *p, double t_arrive, oai_error *e) {
    sreq *r = calloc(1, sizeof(*r));
    if (!r) {
        gen_release(s);
        oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->refs = 2; /* the connection and the engine */
    r->chat = q->chat;
    r->responses = q->responses;
    if (q->resp_echo && !(r->resp_echo = strdup(q->resp_echo))) {
        gen_release(s);
        pthread_mutex_destroy(&r->mu);
        free(r);
        oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    r->stream = q->stream;
    r->include_usage = q->include_usage;
    if (q->tool_mode) {
        r->tools = oai_tool_format(s->tmpl);
        r->tool_mode = q->tool_mode;
        oai_calls_init(&r->calls, r->tools, r->tool_mode);
    }
    r->logprobs = q->logprobs;
    r->thinks = q->chat && chat_template_thinks(s->ct);
    r->think_open = p->think_open;
    r->err_param = q->grammar_param;
    r->t_arrive = t_arrive;
    snprintf(r->tenant, sizeof(r->tenant), "%.12s", tenant ? tenant : "-");
    r->created = (long)time(NULL);
    r->c = c;
    make_id(s, q->responses ? "resp_" : q->chat ? "chatcmpl-" : "cmpl-", r->rid, sizeof(r->rid));
    p->rp.on_event = on_event;
    p->rp.user = r;
    /* the record is the connection's before the engine can call back */
    if (cx) {
        attach(s, cx, r);
        s->open_resps++;
    }
    char err[512];
    int64_t id = sp_engine_submit(s->e, &p->rp, err, sizeof(err));
    if (id < 0) {
        gen_release(s);
        pthread_mutex_lock(&r->mu);
        r->refs--; /* the engine never took it */
        r->finished = true;
        pthread_mutex_unlock(&r->mu);
        oai_submit_error(e, (int)id, err);
        if (id == SP_ERR_GRAMMAR && q->grammar_param)
            e->param = q->grammar_param; /* the field that gave it; static strings */
        if (!cx) sreq_unref(r); /* no connection holds it */
        return NULL;
    }
    pthread_mutex_lock(&r->mu);
    r->id = id;
    pthread_mutex_unlock(&r->mu);
    /* server_stop may have swept the requests before this one had an id */
    if (s->stopping) sreq_stop(r);
    return r;
}

/* Step 4: a stream's 200 and SSE reader; a plain request waits. */
static enum MHD_Result gen_respond(http_server *s, struct MHD_Connection *c, const char *url,
                                   sreq *r) {
    if (!r->stream) {
        /* no answer yet and not suspended: MHD calls again at once (its
         * next loop), and gen_answer suspends then. Suspending in this, the
         * request's final call, would leave the connection's poll interest
         * at "read" (MHD 0.9.75 does not update it for a suspended
         * connection), and after the resume MHD would read the EOF of a
         * client that half-closed and drop the answer */
        return MHD_YES;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, stream_free);
    if (!resp) {
        sreq_cancel(r, false);
        return MHD_NO;
    }
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    srv_cors_headers(s, c, resp);
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->met, srv_endpoint_label(url), 200);
    return ret;
}

/* ---- on the preparation thread (prep.c) ---------------------------------- */

void gen_prepare(http_server *s, gen_prep *g) {
    gen_plan p = {0};
    if (gen_build(s, &g->q, g->tenant, &p, &g->e)) gen_release(s);
    else g->r = gen_submit(s, g->c, NULL, g->tenant, &g->q, &p, g->t_arrive, &g->e);
    free(p.toks);
    free(p.grammar);
}

void gen_prepare_refuse(http_server *s, gen_prep *g, const char *why) {
    gen_release(s);
    oai_seterr(&g->e, 503, "service_unavailable", NULL, "shutting_down", "%s", why);
}

enum MHD_Result gen_fail(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                         const oai_error *e) {
    char tenant[13];
    snprintf(tenant, sizeof(tenant), "%.12s", cx->tenant ? cx->tenant : "-");
    log_request(s, "-", tenant, e->status, NULL, cx->t_arrive, now_ms());
    oai_error copy = *e;
    return srv_send_error(s, c, url, &copy);
}

enum MHD_Result gen_attach(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                           sreq *r) {
    attach(s, cx, r);
    return gen_respond(s, c, url, r);
}

/* ---- the final call of a request ----------------------------------------- */

enum MHD_Result gen_handle(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                           gen_api api) {
    const double t_arrive = now_ms();
    oai_req q;
    oai_error e;
    gen_plan p = {0};
    cx->t_arrive = t_arrive;
    if (gen_parse(s, cx, api, &q, &e) || gen_admit(s, &e)) goto fail;
    if (q.grammar) { /* compiled and checked off this event loop */
        gen_prep g = {.q = q, .tenant = cx->tenant, .c = c, .t_arrive = t_arrive};
        if (!prep_start(s, c, cx, &g)) return MHD_YES; /* MHD calls again: prep_answer */
    }
    if (gen_build(s, &q, cx->tenant, &p, &e)) {
        gen_release(s);
        goto fail;
    }
    sreq *r = gen_submit(s, c, cx, cx->tenant, &q, &p, t_arrive, &e);
    if (!r) goto fail;
    free(p.toks);
    free(p.grammar);
    oai_req_free(&q);
    return gen_respond(s, c, url, r);
fail:
    free(p.toks);
    free(p.grammar);
    oai_req_free(&q);
    return gen_fail(s, c, url, cx, &e);
}
