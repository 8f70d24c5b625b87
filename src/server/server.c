/* server.c: the OpenAI-compatible HTTP server on libmicrohttpd.
 *
 * Threads: MHD runs a small pool of event-loop threads (poll), each with
 * its own connections; no connection holds a thread of its own, so a
 * client that sends slowly, reads slowly or idles costs a socket and a few
 * hundred bytes, not a thread. Nothing in an MHD callback blocks: a
 * generation request is submitted to the engine and its connection is
 * suspended (MHD_suspend_connection); the engine's callback (engine
 * thread) appends the event's tokens and text to the request's record
 * under its mutex and resumes the connection, which then takes what is new
 * (a plain response once the request finished, the next SSE chunks of a
 * stream) and suspends again if it must wait.
 *
 * A watcher thread, every WATCH_MS:
 *  - cuts (shutdown) a connection that has not delivered a whole request
 *    head and body within --recv-timeout of starting to wait for one
 *    (slowloris: one byte a second keeps MHD's idle timer alive forever);
 *  - cancels the engine request of a suspended connection whose socket has
 *    an error or was reset (POLLERR/POLLHUP). A half-close (the client shut
 *    its write side, POLLRDHUP) is not a disconnect: such a client still
 *    reads its answer. A stream whose client is gone fails its next write,
 *    and MHD's request-completed callback cancels the request.
 *
 * Limits checked on the request head, before any body byte is buffered:
 * ambiguous framing (Content-Length with Transfer-Encoding, several
 * Content-Length headers, a Transfer-Encoding other than chunked) is a
 * 400; the endpoint and method; the API key (401 before the body is read);
 * Content-Length against --max-body; the body bytes buffered across all
 * connections against --max-body-total (503). Connections are capped in
 * total (--max-conns) and per client address (--max-conns-per-ip); past
 * the total cap, HEALTH_RESERVE more connections are admitted for /health
 * only, so a load balancer can still tell the server is alive.
 *
 * A request record (sreq) is shared by the connection, the streaming
 * response and the engine; it is freed when the last of them lets go.
 *
 * Shutdown: sp_server_drain refuses new generation requests (503) while
 * those in flight go on; /health answers 503 "draining" until the end.
 * sp_server_stop then cancels what is left, lets each client get its final
 * event (a last chunk with finish_reason "cancelled" and [DONE], or a
 * 503), resumes whatever is still suspended and stops MHD. */
#include "server/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "chat/chat.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sbuf.h"
#include "tokenizer/tokenizer.h"

#define WATCH_MS 100          /* the watcher's period */
#define HEALTH_RESERVE 16     /* connections past --max-conns, for /health only */
#define RESERVE_RECV_MS 2000  /* how long such a connection may take to send its request */

/* One TCP connection (MHD's socket context), from accept to close; linked
 * in the server's list for the watcher (s->reg_mu guards the links and the
 * fields marked so). */
typedef struct peer {
    struct peer *prev, *next;
    int fd;
    double t_wait;            /* reg_mu: when it began waiting for a request */
    bool receiving;           /* reg_mu: waiting for or reading a request's head and body */
    bool cut;                 /* reg_mu: the watcher shut it down */
    bool reserve;             /* admitted past --max-conns: /health only */
    struct sreq *r;           /* reg_mu: its generation request (a reference), or NULL */
} peer;

struct sp_server {
    sp_server_opts o;
    struct MHD_Daemon *d;
    int port;
    unsigned char (*key_hash)[32]; /* SHA-256 of each API key */
    char (*key_salt)[65];          /* its hex: the tenant's cache salt */
    int n_keys;
    unsigned char metrics_hash[32];
    bool metrics_keyed;            /* /metrics needs Bearer --metrics-key */
    bool metrics_closed;           /* several tenants, no metrics key: /metrics refused */
    char *served_name;
    char *info;                    /* JSON object for /v1/models "specula", or NULL */
    _Atomic int ready;
    _Atomic int draining;          /* SIGTERM: no new requests; those in flight go on */
    _Atomic int stopping;          /* in-flight requests are being cancelled */
    _Atomic int closing;           /* MHD is about to stop: no connection may suspend */
    _Atomic int64_t open_resps;    /* generation responses not yet completed (sent or failed) */
    _Atomic int64_t body_bytes;    /* request body bytes reserved across connections */
    const sp_model *m;
    const sp_vocab *v;
    sp_engine *e;
    int32_t n_ctx, n_vocab;
    chat_tmpl tmpl;
    sp_token eot_token;            /* single-token end of turn, or -1 */
    pthread_mutex_t mu;
    int64_t active;                /* generation requests accepted, not finished */
    _Atomic uint64_t seq;
    metrics met;
    /* connections and the watcher */
    pthread_mutex_t reg_mu;
    peer *peers;                   /* every open connection */
    int n_peers;
    pthread_t watcher;
    bool watcher_started;
    _Atomic int watcher_quit;
    _Atomic uint64_t n_cut;        /* connections cut for taking too long to send a request */
};

typedef struct sreq {
    sp_server *s;
    pthread_mutex_t mu;
    int refs;
    int64_t id;                    /* engine id (0 until submitted) */
    bool chat, stream, include_usage;
    int logprobs;                  /* -1 off, else top-N */
    char rid[48];
    long created;
    /* what the engine produced */
    sp_token *toks;
    float *lps;
    sp_token *top_ids;
    float *top_lps;
    int32_t n_tok, cap_tok, n_top;
    sbuf text;
    bool finished, disconnected;
    bool oom;                      /* an event's tokens or text could not be kept */
    double t_stop;                 /* when the server's stop cancelled it (0: not) */
    sp_request_stats st;
    char error[256];
    double t_arrive, t_first, t_last;
    /* --stamp-chunks: text events not yet in a chunk, the oldest one's time */
    int32_t pend_events;
    double t_pend;
    /* the connection (mu): suspended while it waits for the engine */
    struct MHD_Connection *c;      /* NULL once the request completed */
    bool suspended;
    bool abort;                    /* the server stops: end the response now */
    /* streaming state (connection thread) */
    size_t sent_text;
    int32_t sent_tok;
    bool sent_role, sent_done;
    sbuf out;
    size_t out_off;
} sreq;

typedef struct {
    sbuf body;
    size_t reserved;               /* bytes of s->body_bytes this request holds */
    bool too_big, busy, answered;
    const char *tenant;            /* the key's salt (authenticated on the head) */
    peer *p;
    sreq *r;
} conn;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sreq_unref(sreq *r) {
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
    free(r);
}

/* ---- responses ---------------------------------------------------------- */

static const char *endpoint_label(const char *url) {
    static const char *known[] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                  "/health", "/metrics", "/tokenize", "/detokenize"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (!strcmp(url, known[i])) return known[i];
    if (!strncmp(url, "/v1/models/", 11)) return "/v1/models";
    return "other";
}

static enum MHD_Result send_body(sp_server *s, struct MHD_Connection *c, const char *url,
                                 int code, const char *type, const char *body, size_t len,
                                 const char *retry_after) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    if (retry_after) MHD_add_response_header(resp, "Retry-After", retry_after);
    if (code == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->met, endpoint_label(url), code);
    return ret;
}

static enum MHD_Result send_json(sp_server *s, struct MHD_Connection *c, const char *url, int code,
                                 sbuf *b) {
    if (b->oom) {
        sb_free(b);
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": null}}";
        return send_body(s, c, url, 500, "application/json", oom, sizeof(oom) - 1, NULL);
    }
    enum MHD_Result r = send_body(s, c, url, code, "application/json", b->p ? b->p : "",
                                  b->len, NULL);
    sb_free(b);
    return r;
}

static enum MHD_Result send_error(sp_server *s, struct MHD_Connection *c, const char *url,
                                  const oai_error *e) {
    sbuf b = {0};
    oai_error_json(e, &b);
    if (b.oom) return send_json(s, c, url, 500, &b);
    enum MHD_Result r = send_body(s, c, url, e->status, "application/json", b.p, b.len,
                                  e->status == 429 ? "1" : NULL);
    sb_free(&b);
    return r;
}

#define ERR(st, type, param, code, ...)                                                     \
    do {                                                                                    \
        oai_error e_;                                                                       \
        oai_seterr(&e_, st, type, param, code, __VA_ARGS__);                                \
        return send_error(s, c, url, &e_);                                                  \
    } while (0)

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

static void on_event(const sp_event *ev, void *user) {
    sreq *r = user;
    sp_server *s = r->s;
    double t = now_ms(), itl = -1, tpot = -1;
    pthread_mutex_lock(&r->mu);
    if (ev->n_tokens > 0) {
        int32_t n_top = r->logprobs >= 0 && ev->top_ids ? ev->top_logprobs : 0;
        if (r->n_tok == 0) r->n_top = n_top;
        if (n_top != r->n_top) n_top = 0;
        if (!grow_tokens(r, r->n_tok + ev->n_tokens, r->n_top)) {
            r->oom = true;
        } else {
            memcpy(r->toks + r->n_tok, ev->tokens, (size_t)ev->n_tokens * sizeof(sp_token));
            if (r->logprobs >= 0 && ev->logprobs)
                memcpy(r->lps + r->n_tok, ev->logprobs, (size_t)ev->n_tokens * sizeof(float));
            if (r->n_top && n_top) {
                memcpy(r->top_ids + (size_t)r->n_tok * r->n_top, ev->top_ids,
                       (size_t)ev->n_tokens * r->n_top * sizeof(sp_token));
                memcpy(r->top_lps + (size_t)r->n_tok * r->n_top, ev->top_lps,
                       (size_t)ev->n_tokens * r->n_top * sizeof(float));
            }
            if (r->n_tok == 0) {
                r->t_first = t;
            } else {
                itl = (t - r->t_last) / 1e3;
            }
            r->t_last = t;
            r->n_tok += ev->n_tokens;
        }
    }
    if (ev->text_len) sb_add(&r->text, ev->text, ev->text_len);
    if (r->text.oom) r->oom = true;
    /* the same condition as stream_build's for a chunk with content, so the
     * stamp is the time the server first had something to send */
    if (s->o.stamp_chunks && (ev->text_len || (r->logprobs >= 0 && ev->n_tokens > 0))) {
        if (!r->pend_events) r->t_pend = t;
        r->pend_events++;
    }
    bool fin = ev->finished;
    if (fin) {
        r->st = *ev->stats;
        if (ev->error) {
            snprintf(r->error, sizeof(r->error), "%s", ev->error);
        } else if (r->oom) {
            /* an answer with tokens or text missing must not look whole */
            snprintf(r->error, sizeof(r->error), "out of memory");
            r->st.finish = SP_FINISH_ERROR;
        }
        if (r->n_tok >= 2) tpot = (r->t_last - r->t_first) / 1e3 / (r->n_tok - 1);
        /* counted before anyone can see the request finished, so a client
         * that reads /metrics after its response finds it there */
        double ttft_s = r->n_tok ? (r->t_first - r->t_arrive) / 1e3 : -1;
        metrics_finished(&s->met, &r->st, ttft_s, tpot, (t - r->t_arrive) / 1e3);
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        r->finished = true;
    }
    if (itl >= 0) metrics_observe(&s->met, &s->met.itl, itl);
    /* a stream takes every event; a plain request only its end (each
     * resume costs the worker a rebuild of its poll set) */
    if (r->stream || fin) wake(r);
    pthread_mutex_unlock(&r->mu);
    if (fin) sreq_unref(r);
}

/* ---- cancellation -------------------------------------------------------- */

static void cancel_req(sreq *r, bool disconnect) {
    pthread_mutex_lock(&r->mu);
    bool do_it = !r->finished && r->id > 0 && !r->disconnected;
    if (do_it) r->disconnected = true;
    int64_t id = r->id;
    pthread_mutex_unlock(&r->mu);
    if (!do_it) return;
    sp_engine_cancel(r->s->e, id);
    if (disconnect) metrics_disconnect(&r->s->met);
}

static void stop_one(sreq *r);

/* ---- response bodies ------------------------------------------------------ */

static void json_piece(sbuf *b, const sp_vocab *v, sp_token t, bool with_bytes) {
    char buf[256];
    int n = sp_token_to_piece(v, t, buf, sizeof(buf), false);
    if (n < 0) n = 0;
    if (n > (int)sizeof(buf)) n = sizeof(buf);
    sb_json_str(b, buf, (size_t)n);
    if (with_bytes) {
        sb_str(b, ", \"bytes\": [");
        for (int i = 0; i < n; i++) sb_printf(b, "%s%u", i ? ", " : "", (unsigned char)buf[i]);
        sb_str(b, "]");
    }
}

static int piece_len(const sp_vocab *v, sp_token t) {
    char buf[256];
    int n = sp_token_to_piece(v, t, buf, sizeof(buf), false);
    return n < 0 ? 0 : n;
}

static void json_lp(sbuf *b, float lp) {
    if (lp != lp || lp < -1e30f) sb_str(b, "-9999.0");
    else sb_printf(b, "%.6g", (double)lp);
}

/* "logprobs": ... for tokens [from, to) (r->mu held). text_off: bytes of
 * completion text before token `from` (completions' text_offset). */
static void json_logprobs(sbuf *b, const sreq *r, int32_t from, int32_t to, size_t *text_off) {
    const sp_vocab *v = r->s->v;
    if (r->logprobs < 0 || !r->lps) {
        sb_str(b, "null");
        return;
    }
    int nt = r->n_top < r->logprobs ? r->n_top : r->logprobs;
    if (r->chat) {
        sb_str(b, "{\"content\": [");
        for (int32_t i = from; i < to; i++) {
            sb_str(b, i > from ? ", {\"token\": " : "{\"token\": ");
            json_piece(b, v, r->toks[i], true);
            sb_str(b, ", \"logprob\": ");
            json_lp(b, r->lps[i]);
            sb_str(b, ", \"top_logprobs\": [");
            for (int j = 0; j < nt; j++) {
                sb_str(b, j ? ", {\"token\": " : "{\"token\": ");
                json_piece(b, v, r->top_ids[(size_t)i * r->n_top + j], true);
                sb_str(b, ", \"logprob\": ");
                json_lp(b, r->top_lps[(size_t)i * r->n_top + j]);
                sb_str(b, "}");
            }
            sb_str(b, "]}");
        }
        sb_str(b, "]}");
        return;
    }
    sb_str(b, "{\"tokens\": [");
    for (int32_t i = from; i < to; i++) {
        if (i > from) sb_str(b, ", ");
        json_piece(b, v, r->toks[i], false);
    }
    sb_str(b, "], \"token_logprobs\": [");
    for (int32_t i = from; i < to; i++) {
        if (i > from) sb_str(b, ", ");
        json_lp(b, r->lps[i]);
    }
    sb_str(b, "], \"top_logprobs\": [");
    for (int32_t i = from; i < to; i++) {
        sb_str(b, i > from ? ", {" : "{");
        for (int j = 0; j < nt; j++) {
            if (j) sb_str(b, ", ");
            json_piece(b, v, r->top_ids[(size_t)i * r->n_top + j], false);
            sb_str(b, ": ");
            json_lp(b, r->top_lps[(size_t)i * r->n_top + j]);
        }
        sb_str(b, "}");
    }
    sb_str(b, "], \"text_offset\": [");
    for (int32_t i = from; i < to; i++) {
        sb_printf(b, "%s%zu", i > from ? ", " : "", *text_off);
        *text_off += (size_t)piece_len(v, r->toks[i]);
    }
    sb_str(b, "]}");
}

static void json_usage(sbuf *b, const sp_request_stats *st) {
    sb_printf(b, "{\"prompt_tokens\": %d, \"completion_tokens\": %d, \"total_tokens\": %d, "
                 "\"prompt_tokens_details\": {\"cached_tokens\": %d}}",
              st->prompt_tokens, st->completion_tokens, st->prompt_tokens + st->completion_tokens,
              st->cached_tokens);
}

static void json_ext(sbuf *b, const sp_request_stats *st) {
    sb_printf(b, "{\"queue_ms\": %.3f, \"prefill_ms\": %.3f, \"ttft_ms\": %.3f, \"decode_ms\": %.3f, "
                 "\"tpot_ms\": %.3f, \"preemptions\": %d, \"spec\": {\"steps\": %d, \"drafted\": %d, "
                 "\"accepted\": %d, \"acceptance_rate\": %.6g, \"mean_acceptance_length\": %.6g}}",
              st->queue_ms, st->prefill_ms, st->ttft_ms, st->decode_ms, st->tpot_ms,
              st->preemptions, st->spec_steps, st->spec_drafted, st->spec_accepted,
              st->spec_drafted ? (double)st->spec_accepted / st->spec_drafted : 0.0,
              st->spec_steps ? (double)(st->spec_accepted + st->spec_steps) / st->spec_steps : 0.0);
}

static const char *finish_str(sp_finish_reason f) { return sp_finish_reason_str(f); }

static void json_head(sbuf *b, const sreq *r, const char *object) {
    sb_str(b, "{\"id\": ");
    sb_json_str(b, r->rid, strlen(r->rid));
    sb_printf(b, ", \"object\": \"%s\", \"created\": %ld, \"model\": ", object, r->created);
    sb_json_str(b, r->s->served_name, strlen(r->s->served_name));
}

/* The whole (non-streaming) response (r->mu held, r finished). */
static void json_full(sbuf *b, const sreq *r) {
    json_head(b, r, r->chat ? "chat.completion" : "text_completion");
    sb_str(b, ", \"choices\": [{\"index\": 0, ");
    if (r->chat) {
        sb_str(b, "\"message\": {\"role\": \"assistant\", \"content\": ");
        sb_json_str(b, r->text.p ? r->text.p : "", r->text.len);
        sb_str(b, "}");
    } else {
        sb_str(b, "\"text\": ");
        sb_json_str(b, r->text.p ? r->text.p : "", r->text.len);
    }
    sb_str(b, ", \"logprobs\": ");
    size_t off = 0;
    json_logprobs(b, r, 0, r->n_tok, &off);
    sb_printf(b, ", \"finish_reason\": \"%s\"}], \"usage\": ", finish_str(r->st.finish));
    json_usage(b, &r->st);
    sb_str(b, ", \"specula\": ");
    json_ext(b, &r->st);
    sb_str(b, "}");
}

/* One SSE chunk carrying a text delta and/or a finish reason. */
static void sse_chunk(sbuf *b, sreq *r, const char *text, size_t len, int32_t from, int32_t to,
                      const char *finish, bool role) {
    sb_str(b, "data: ");
    json_head(b, r, r->chat ? "chat.completion.chunk" : "text_completion");
    sb_str(b, ", \"choices\": [{\"index\": 0, ");
    if (r->chat) {
        sb_str(b, "\"delta\": {");
        if (role) sb_str(b, "\"role\": \"assistant\", \"content\": \"\"");
        else if (text) {
            sb_str(b, "\"content\": ");
            sb_json_str(b, text, len);
        }
        sb_str(b, "}");
    } else {
        sb_str(b, "\"text\": ");
        sb_json_str(b, text ? text : "", text ? len : 0);
    }
    sb_str(b, ", \"logprobs\": ");
    if (from < to) {
        size_t off = 0; /* offsets within this chunk's text */
        json_logprobs(b, r, from, to, &off);
    } else {
        sb_str(b, "null");
    }
    sb_str(b, ", \"finish_reason\": ");
    if (finish) sb_printf(b, "\"%s\"", finish);
    else sb_str(b, "null");
    sb_str(b, "}]");
    if (finish) {
        sb_str(b, ", \"specula\": ");
        json_ext(b, &r->st);
    }
    if (!finish && !role && r->pend_events) { /* only with --stamp-chunks */
        sb_printf(b, ", \"specula_timing\": {\"emit_us\": %lld, \"events\": %d, \"built_us\": %lld}",
                  (long long)(r->t_pend * 1e3), r->pend_events, (long long)(now_ms() * 1e3));
        r->pend_events = 0;
    }
    sb_str(b, "}\n\n");
}

/* Appends to r->out the SSE events for what is new (r->mu held). */
static void stream_build(sreq *r) {
    if (r->chat && !r->sent_role) {
        sse_chunk(&r->out, r, NULL, 0, 0, 0, NULL, true);
        r->sent_role = true;
    }
    size_t nt = r->text.len - r->sent_text;
    int32_t ntok = r->n_tok - r->sent_tok;
    bool lp = r->logprobs >= 0 && ntok > 0;
    if (nt || lp)
        sse_chunk(&r->out, r, r->text.p + r->sent_text, nt, r->sent_tok, lp ? r->n_tok : 0, NULL,
                  false);
    r->sent_text = r->text.len;
    r->sent_tok = r->n_tok;
    if (!r->finished) return;
    if (r->st.finish == SP_FINISH_ERROR) {
        oai_error e;
        oai_seterr(&e, 500, "server_error", NULL, NULL, "%s", r->error[0] ? r->error : "error");
        sb_str(&r->out, "data: ");
        oai_error_json(&e, &r->out);
        sb_str(&r->out, "\n\n");
    } else {
        sse_chunk(&r->out, r, r->chat ? NULL : "", 0, 0, 0, finish_str(r->st.finish), false);
        if (r->include_usage) {
            sb_str(&r->out, "data: ");
            json_head(&r->out, r, r->chat ? "chat.completion.chunk" : "text_completion");
            sb_str(&r->out, ", \"choices\": [], \"usage\": ");
            json_usage(&r->out, &r->st);
            sb_str(&r->out, "}\n\n");
        }
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

/* ---- generation endpoints ---------------------------------------------- */

static void make_id(sp_server *s, const char *prefix, char *out, size_t len) {
    uint64_t n = atomic_fetch_add(&s->seq, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, len, "%s%08llx%016llx", prefix, (unsigned long long)(ts.tv_sec & 0xffffffff),
             (unsigned long long)(n * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_nsec));
}

/* A plain (non-streaming) request's answer once the engine finished it;
 * until then the connection is suspended and this runs again at each
 * wake-up (the access handler's re-entry after a resume). */
static enum MHD_Result generate_answer(sp_server *s, struct MHD_Connection *c, const char *url,
                                       sreq *r) {
    pthread_mutex_lock(&r->mu);
    if (!r->finished) {
        bool parked = park(r);
        pthread_mutex_unlock(&r->mu);
        return parked ? MHD_YES : MHD_NO; /* MHD_NO: the server stops, close */
    }
    sbuf b = {0};
    int code = 200;
    if (r->st.finish == SP_FINISH_ERROR || r->st.finish == SP_FINISH_CANCELLED) {
        bool err_ = r->st.finish == SP_FINISH_ERROR;
        code = err_ ? 500 : 503;
        oai_error e;
        oai_seterr(&e, code, err_ ? "server_error" : "service_unavailable", NULL, NULL, "%s",
                   err_ ? (r->error[0] ? r->error : "error")
                        : r->t_stop ? "the server is shutting down; the request was cancelled"
                                    : "the request was cancelled");
        oai_error_json(&e, &b);
    } else {
        json_full(&b, r);
    }
    pthread_mutex_unlock(&r->mu);
    return send_json(s, c, url, code, &b);
}

static enum MHD_Result handle_generate(sp_server *s, struct MHD_Connection *c, const char *url,
                                       conn *cx, bool chat, const char *tenant) {
    oai_req q;
    oai_error e;
    double t_arrive = now_ms();
    if (oai_parse(cx->body.p, cx->body.len, chat, s->n_vocab, &q, &e) < 0) {
        oai_req_free(&q);
        return send_error(s, c, url, &e);
    }
    sp_token *toks = NULL;
    int32_t n = 0;
    bool admitted = false;  /* holds one of s->active's places */
    char err[512];
    if (q.model && strcmp(q.model, s->served_name)) {
        oai_seterr(&e, 404, "invalid_request_error", "model", "model_not_found",
                   "the model '%.200s' does not exist (this server serves '%.200s')", q.model,
                   s->served_name);
        goto fail;
    }
    if (chat && s->tmpl == CHAT_NONE) {
        oai_seterr(&e, 400, "invalid_request_error", "messages", "no_chat_template",
                   "the model has no recognized chat template; start the server with "
                   "--chat-template NAME (chatml, llama3, llama2, mistral, phi3, gemma) or "
                   "use /v1/completions");
        goto fail;
    }
    const char *cs = q.cache_salt && q.cache_salt[0] ? q.cache_salt : NULL;
    if (cs && strlen(cs) > 500) {
        oai_seterr(&e, 400, "invalid_request_error", "cache_salt", "invalid_value",
                   "'cache_salt' is longer than 500 bytes");
        goto fail;
    }
    /* admission before the prompt's tokenization, the request's one costly
     * step before the engine: a full queue or a draining server refuses in
     * microseconds whatever the prompt's size */
    if (s->draining) {
        oai_seterr(&e, 503, "service_unavailable", NULL, "shutting_down",
                   "the server is shutting down");
        goto fail;
    }
    pthread_mutex_lock(&s->mu);
    bool full = s->active >= s->o.max_queue;
    if (!full) s->active++;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        oai_seterr(&e, 429, "rate_limit_exceeded", NULL, "too_many_requests",
                   "the server has %d requests in flight; retry later", s->o.max_queue);
        goto fail;
    }
    admitted = true;
    /* at most n_ctx - 1 prompt tokens: the tokenizer stops there */
    if (oai_prompt_tokens(&q, chat ? s->tmpl : CHAT_NONE, s->v, s->n_ctx - 1, &toks, &n, &e))
        goto fail;
    int32_t max_tokens = q.max_tokens;
    if (max_tokens == 0) max_tokens = chat ? s->n_ctx - n : 16;
    if (n >= s->n_ctx || (int64_t)n + max_tokens > s->n_ctx) {
        oai_seterr(&e, 400, "invalid_request_error", n >= s->n_ctx ? (chat ? "messages" : "prompt")
                   : "max_tokens", "context_length_exceeded",
                   "this model's context is %d tokens; the prompt has %d tokens and %d more were "
                   "requested", s->n_ctx, n, max_tokens);
        goto fail;
    }
    /* stop strings; the template's end of turn */
    const char *stops[OAI_MAX_STOP + 1];
    int n_stop = 0;
    for (int i = 0; i < q.n_stop; i++) stops[n_stop++] = q.stop[i];
    const char *eot = chat ? chat_tmpl_eot(s->tmpl) : NULL;
    if (eot && s->eot_token < 0) stops[n_stop++] = eot;
    /* the cache salt: the tenant's, combined with the request's */
    char salt[600];
    if (tenant && cs) snprintf(salt, sizeof(salt), "%s:%.500s", tenant, cs);
    else snprintf(salt, sizeof(salt), "%.500s", tenant ? tenant : cs ? cs : "");
    sreq *r = calloc(1, sizeof(*r));
    if (!r) {
        oai_seterr(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->s = s;
    r->refs = 2; /* the connection and the engine */
    r->chat = chat;
    r->stream = q.stream;
    r->include_usage = q.include_usage;
    r->logprobs = q.logprobs;
    r->t_arrive = t_arrive;
    r->created = (long)time(NULL);
    r->c = c;
    make_id(s, chat ? "chatcmpl-" : "cmpl-", r->rid, sizeof(r->rid));

    sp_request_params rp = sp_request_default_params();
    rp.tokens = toks;
    rp.n_tokens = n;
    rp.sampling = q.sampling;
    if (!q.seed_given) { /* as OpenAI: without a seed, sampled output varies */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                     (atomic_fetch_add(&s->seq, 1) * 0x9E3779B97F4A7C15ull);
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        rp.sampling.seed = x ^ (x >> 29);
    }
    rp.max_tokens = max_tokens;
    rp.stop = stops;
    rp.n_stop = n_stop;
    sp_token eot_tok = s->eot_token;
    if (chat && eot_tok >= 0) {
        rp.stop_tokens = &eot_tok;
        rp.n_stop_tokens = 1;
    }
    rp.logprobs = q.logprobs < 0 ? -1 : q.logprobs > 0 ? q.logprobs : 1;
    rp.cache_salt = salt[0] ? salt : NULL;
    rp.on_event = on_event;
    rp.user = r;
    rp.spec = q.spec;
    rp.spec_k = q.spec_k;
    rp.ignore_eos = q.ignore_eos;
    /* the record is the connection's before the engine can call back */
    cx->r = r;
    s->open_resps++;
    pthread_mutex_lock(&s->reg_mu);
    if (cx->p) cx->p->r = r;
    pthread_mutex_unlock(&s->reg_mu);
    int64_t id = sp_engine_submit(s->e, &rp, err, sizeof(err));
    if (id < 0) {
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        admitted = false;
        pthread_mutex_lock(&r->mu);
        r->refs--; /* the engine never took it */
        r->finished = true;
        pthread_mutex_unlock(&r->mu);
        bool ctx = id == SP_ERR_CONTEXT;
        oai_seterr(&e, 400, "invalid_request_error", ctx ? "max_tokens" : NULL,
                   ctx ? "context_length_exceeded" : "invalid_value", "%s", err);
        goto fail;
    }
    pthread_mutex_lock(&r->mu);
    r->id = id;
    pthread_mutex_unlock(&r->mu);
    free(toks);
    oai_req_free(&q);
    /* sp_server_stop may have swept the requests before this one had an id */
    if (s->stopping) stop_one(r);

    if (r->stream) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, stream_free);
        if (!resp) {
            cancel_req(r, false);
            return MHD_NO;
        }
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        metrics_request(&s->met, endpoint_label(url), 200);
        return ret;
    }
    /* no answer yet and not suspended: MHD calls again at once (its next
     * loop), and generate_answer suspends then. Suspending in this, the
     * request's final call, would leave the connection's poll interest at
     * "read" (MHD 0.9.75 does not update it for a suspended connection),
     * and after the resume MHD would read the EOF of a client that
     * half-closed and drop the answer */
    return MHD_YES;

fail:
    if (admitted) {
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
    }
    free(toks);
    oai_req_free(&q);
    return send_error(s, c, url, &e);
}

/* ---- other endpoints ---------------------------------------------------- */

static enum MHD_Result handle_tokenize(sp_server *s, struct MHD_Connection *c, const char *url,
                                       conn *cx) {
    sbuf b = {0};
    oai_error e;
    if (oai_tokenize(cx->body.p, cx->body.len, s->v, s->n_ctx, &b, &e)) {
        sb_free(&b);
        return send_error(s, c, url, &e);
    }
    return send_json(s, c, url, 200, &b);
}

static enum MHD_Result handle_detokenize(sp_server *s, struct MHD_Connection *c, const char *url,
                                         conn *cx) {
    sbuf b = {0};
    oai_error e;
    if (oai_detokenize(cx->body.p, cx->body.len, s->v, &b, &e)) {
        sb_free(&b);
        return send_error(s, c, url, &e);
    }
    return send_json(s, c, url, 200, &b);
}

static void json_model(sbuf *b, sp_server *s) {
    sb_str(b, "{\"id\": ");
    sb_json_str(b, s->served_name, strlen(s->served_name));
    sb_printf(b, ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"specula\", "
                 "\"max_model_len\": %d", (long)time(NULL), s->n_ctx);
    if (s->info) sb_printf(b, ", \"specula\": %s", s->info);
    sb_str(b, "}");
}

/* The offset of the first byte of p[n] that is a NUL or not part of valid
 * UTF-8 (overlong forms, surrogates and code points past U+10FFFF are not),
 * or n. */
static size_t utf8_bad_at(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            if (!u[i]) return i;
            i++;
            continue;
        }
        int l = sp_utf8_len(u + i, n - i);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

/* The SHA-256 of the Bearer token of the request; false without one. */
static bool bearer_digest(struct MHD_Connection *c, unsigned char dig[32]) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    SHA256((const unsigned char *)h, strlen(h), dig);
    return true;
}

/* The tenant's salt for a valid key; NULL when keys are configured and this
 * one is missing or wrong (*ok false). Every key is compared, in constant
 * time, over SHA-256 digests. */
static const char *authenticate(sp_server *s, struct MHD_Connection *c, bool *ok) {
    *ok = true;
    if (!s->n_keys) return NULL;
    *ok = false;
    unsigned char dig[32];
    if (!bearer_digest(c, dig)) return NULL;
    int found = -1;
    for (int i = 0; i < s->n_keys; i++) {
        int eq = CRYPTO_memcmp(dig, s->key_hash[i], 32) == 0;
        found = eq && found < 0 ? i : found;
    }
    if (found < 0) return NULL;
    *ok = true;
    return s->key_salt[found];
}

/* Whether this request may read /metrics: with --metrics-key, only that
 * key; with one API key (one tenant, the operator), that key; with several
 * and no metrics key, nobody: the aggregates would tell each tenant the
 * others' token counts at low traffic (--metrics-public opens it). */
static bool metrics_allowed(sp_server *s, struct MHD_Connection *c) {
    if (s->metrics_keyed) {
        unsigned char dig[32];
        return bearer_digest(c, dig) && CRYPTO_memcmp(dig, s->metrics_hash, 32) == 0;
    }
    if (s->metrics_closed) return false;
    bool ok;
    authenticate(s, c, &ok);
    return ok;
}

typedef enum { EP_OTHER, EP_HEALTH, EP_METRICS, EP_MODELS, EP_COMPLETIONS, EP_CHAT, EP_TOKENIZE,
               EP_DETOKENIZE } endpoint;

static endpoint route(const char *url) {
    if (!strcmp(url, "/health")) return EP_HEALTH;
    if (!strcmp(url, "/metrics")) return EP_METRICS;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return EP_MODELS;
    if (!strcmp(url, "/v1/completions")) return EP_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return EP_CHAT;
    if (!strcmp(url, "/tokenize")) return EP_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return EP_DETOKENIZE;
    return EP_OTHER;
}

typedef struct {
    int n_cl, n_te;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) f->n_cl++;
    else if (!strcasecmp(key, "Transfer-Encoding")) f->n_te++;
    return MHD_YES;
}

/* Takes n more body bytes from the server-wide budget; false (nothing
 * taken) when that would pass --max-body-total. */
static bool body_reserve(sp_server *s, conn *cx, size_t n) {
    int64_t after = atomic_fetch_add(&s->body_bytes, (int64_t)n) + (int64_t)n;
    if (after > (int64_t)s->o.max_body_total) {
        atomic_fetch_sub(&s->body_bytes, (int64_t)n);
        return false;
    }
    cx->reserved += n;
    return true;
}

static void body_release(sp_server *s, conn *cx) {
    sb_free(&cx->body);
    atomic_fetch_sub(&s->body_bytes, (int64_t)cx->reserved);
    cx->reserved = 0;
}

/* The first call for a request: its head is in, no body byte has been
 * read. Everything that can refuse the request without its body does so
 * here, cheapest first; an answer queued now makes MHD skip the body and
 * close the connection. */
static enum MHD_Result on_head(sp_server *s, struct MHD_Connection *c, const char *url,
                               const char *method, conn *cx) {
    cx->answered = true; /* until it passes every check */
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    /* a front proxy that frames the body differently could smuggle a
     * second request inside it: refuse every ambiguous framing */
    if (f.n_cl && f.n_te)
        ERR(400, "invalid_request_error", NULL, "invalid_framing",
            "both Content-Length and Transfer-Encoding are given");
    if (f.n_cl > 1)
        ERR(400, "invalid_request_error", NULL, "invalid_framing",
            "more than one Content-Length header");
    if (f.n_te > 1 || (te && strcasecmp(te, "chunked")))
        ERR(400, "invalid_request_error", NULL, "invalid_framing",
            "the only Transfer-Encoding accepted is a single 'chunked'");
    endpoint ep = route(url);
    if (cx->p && cx->p->reserve && ep != EP_HEALTH)
        ERR(503, "service_unavailable", NULL, "too_many_connections",
            "the server has too many open connections; retry later");
    if (ep == EP_OTHER)
        ERR(404, "invalid_request_error", NULL, "not_found", "no such endpoint: %.200s", url);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    if (ep == EP_HEALTH || ep == EP_METRICS || ep == EP_MODELS) {
        if (!get) ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use GET");
    } else if (!post) {
        ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use POST");
    }
    if (ep == EP_METRICS && !metrics_allowed(s, c))
        ERR(401, "authentication_error", NULL, "invalid_api_key",
            s->metrics_closed ? "/metrics is closed on a server with several API keys; start it "
                                "with --metrics-key KEY (or --metrics-public)"
                              : "missing or invalid metrics key (send 'Authorization: Bearer KEY')");
    if (ep != EP_HEALTH && ep != EP_METRICS) {
        bool ok;
        cx->tenant = authenticate(s, c, &ok);
        if (!ok)
            ERR(401, "authentication_error", NULL, "invalid_api_key",
                "missing or invalid API key (send 'Authorization: Bearer KEY')");
    }
    /* the body budget is taken as bytes arrive (on_access), never on a
     * promise: a Content-Length alone must not let a client hold it */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (n > s->o.max_body)
        ERR(413, "invalid_request_error", NULL, "request_too_large",
            "the body is larger than %zu bytes", s->o.max_body);
    if ((n || f.n_te) && !post)
        ERR(413, "invalid_request_error", NULL, "request_too_large",
            "%s %.200s takes no body", method, url);
    /* a connection the watcher does not know (its record could not be
     * allocated) has no receive deadline, and sp_server_stop could not
     * wake it: it may not start a generation */
    if (!cx->p && ep != EP_HEALTH && ep != EP_METRICS && ep != EP_MODELS)
        ERR(503, "service_unavailable", NULL, "server_busy", "out of memory; retry later");
    cx->answered = false;
    return MHD_YES;
}

/* The final call: the whole body is in (cx->body). */
static enum MHD_Result dispatch(sp_server *s, struct MHD_Connection *c, const char *url,
                                conn *cx) {
    endpoint ep = route(url);
    if (ep == EP_HEALTH) {
        if (s->draining) {
            static const char b[] = "{\"status\": \"draining\"}";
            return send_body(s, c, url, 503, "application/json", b, sizeof(b) - 1, NULL);
        }
        if (!s->ready) {
            static const char b[] = "{\"status\": \"loading\"}";
            return send_body(s, c, url, 503, "application/json", b, sizeof(b) - 1, NULL);
        }
        static const char b[] = "{\"status\": \"ok\"}";
        return send_body(s, c, url, 200, "application/json", b, sizeof(b) - 1, NULL);
    }
    if (ep == EP_METRICS) {
        sbuf b = {0};
        pthread_mutex_lock(&s->mu);
        int64_t active = s->active;
        pthread_mutex_unlock(&s->mu);
        metrics_render(&s->met, s->ready ? s->e : NULL, active, &b);
        pthread_mutex_lock(&s->reg_mu);
        int n_peers = s->n_peers;
        pthread_mutex_unlock(&s->reg_mu);
        sb_printf(&b, "# HELP specula_connections_open Open HTTP connections.\n"
                      "# TYPE specula_connections_open gauge\nspecula_connections_open %d\n"
                      "# HELP specula_connections_cut_total Connections closed for not sending "
                      "a whole request within --recv-timeout.\n"
                      "# TYPE specula_connections_cut_total counter\n"
                      "specula_connections_cut_total %llu\n",
                  n_peers, (unsigned long long)s->n_cut);
        if (b.oom) return send_json(s, c, url, 500, &b);
        enum MHD_Result r = send_body(s, c, url, 200, "text/plain; version=0.0.4", b.p ? b.p : "",
                                      b.len, NULL);
        sb_free(&b);
        return r;
    }
    if (!s->ready)
        ERR(503, "service_unavailable", NULL, "loading", "the model is still loading");
    if (ep == EP_MODELS) {
        sbuf b = {0};
        if (url[10] == '/') {
            if (strcmp(url + 11, s->served_name))
                ERR(404, "invalid_request_error", "model", "model_not_found",
                    "the model '%.200s' does not exist", url + 11);
            json_model(&b, s);
        } else {
            sb_str(&b, "{\"object\": \"list\", \"data\": [");
            json_model(&b, s);
            sb_str(&b, "]}");
        }
        return send_json(s, c, url, 200, &b);
    }
    size_t bad = utf8_bad_at(cx->body.p, cx->body.len);
    if (bad < cx->body.len)
        ERR(400, "invalid_request_error", NULL, "invalid_encoding",
            "the body is not UTF-8 JSON: byte %zu (0x%02x) is %s", bad,
            (unsigned char)cx->body.p[bad], cx->body.p[bad] ? "not valid UTF-8" : "a NUL");
    if (ep == EP_TOKENIZE) return handle_tokenize(s, c, url, cx);
    if (ep == EP_DETOKENIZE) return handle_detokenize(s, c, url, cx);
    return handle_generate(s, c, url, cx, ep == EP_CHAT, cx->tenant);
}

static void peer_set_receiving(sp_server *s, peer *p, bool receiving) {
    if (!p) return;
    pthread_mutex_lock(&s->reg_mu);
    p->receiving = receiving;
    p->t_wait = now_ms();
    pthread_mutex_unlock(&s->reg_mu);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    sp_server *s = cls;
    conn *cx = *con_cls;
    if (!cx) {
        cx = calloc(1, sizeof(*cx));
        if (!cx) return MHD_NO;
        *con_cls = cx;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cx->p = ci ? ci->socket_context : NULL;
        return on_head(s, c, url, method, cx);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cx->answered || cx->too_big || cx->busy) return MHD_YES;
        if (cx->body.len + n > s->o.max_body) {
            cx->too_big = true;
            body_release(s, cx);
            return MHD_YES;
        }
        if (!body_reserve(s, cx, n)) {
            cx->busy = true;
            body_release(s, cx);
            return MHD_YES;
        }
        sb_add(&cx->body, upload, n);
        return MHD_YES;
    }
    if (cx->r) /* a plain generation request, woken by the engine */
        return cx->r->stream ? MHD_YES : generate_answer(s, c, url, cx->r);
    if (cx->answered) return MHD_YES;
    cx->answered = true;
    peer_set_receiving(s, cx->p, false);
    enum MHD_Result ret;
    if (cx->too_big) {
        oai_error e;
        oai_seterr(&e, 413, "invalid_request_error", NULL, "request_too_large",
                   "the body is larger than %zu bytes", s->o.max_body);
        ret = send_error(s, c, url, &e);
    } else if (cx->busy) {
        oai_error e;
        oai_seterr(&e, 503, "service_unavailable", NULL, "server_busy",
                   "the server is receiving too many request bodies at once; retry later");
        ret = send_error(s, c, url, &e);
    } else if (cx->body.oom) {
        oai_error e;
        oai_seterr(&e, 500, "server_error", NULL, NULL, "out of memory");
        ret = send_error(s, c, url, &e);
    } else {
        ret = dispatch(s, c, url, cx);
    }
    body_release(s, cx); /* parsed by now: the request holds what it needs */
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    sp_server *s = cls;
    conn *cx = *con_cls;
    if (!cx) return;
    if (cx->p) {
        /* the connection waits for its next request from now on */
        pthread_mutex_lock(&s->reg_mu);
        cx->p->r = NULL;
        cx->p->receiving = true;
        cx->p->t_wait = now_ms();
        pthread_mutex_unlock(&s->reg_mu);
    }
    if (cx->r) {
        sreq *r = cx->r;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) cancel_req(r, true);
        pthread_mutex_lock(&r->mu);
        r->c = NULL;
        r->suspended = false;
        pthread_mutex_unlock(&r->mu);
        sreq_unref(r);
        s->open_resps--;
    }
    body_release(s, cx);
    free(cx);
    *con_cls = NULL;
}

/* MHD's connection notifications: a peer record from accept to close. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    sp_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        peer *p = calloc(1, sizeof(*p));
        *socket_context = p;
        if (!p) return; /* served without the watcher's deadline */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        p->fd = ci ? ci->connect_fd : -1;
        p->receiving = true;
        p->t_wait = now_ms();
        pthread_mutex_lock(&s->reg_mu);
        p->reserve = s->n_peers >= s->o.max_conns;
        p->next = s->peers;
        if (s->peers) s->peers->prev = p;
        s->peers = p;
        s->n_peers++;
        pthread_mutex_unlock(&s->reg_mu);
        return;
    }
    peer *p = *socket_context;
    if (!p) return;
    /* called before MHD closes the socket: the watcher, which uses p->fd
     * only under reg_mu, never touches a descriptor that was reused */
    pthread_mutex_lock(&s->reg_mu);
    if (p->prev) p->prev->next = p->next;
    else s->peers = p->next;
    if (p->next) p->next->prev = p->prev;
    s->n_peers--;
    pthread_mutex_unlock(&s->reg_mu);
    free(p);
    *socket_context = NULL;
}

/* ---- the watcher ---------------------------------------------------------- */

static void *watcher_main(void *arg) {
    sp_server *s = arg;
    struct pollfd *pf = NULL;
    sreq **who = NULL, **gone = NULL;
    int cap = 0;
    while (!s->watcher_quit) {
        struct timespec ts = {0, WATCH_MS * 1000000L};
        nanosleep(&ts, NULL);
        double now = now_ms();
        int n = 0;
        pthread_mutex_lock(&s->reg_mu);
        if (cap < s->n_peers) {
            int nc = s->n_peers * 2;
            struct pollfd *npf = realloc(pf, (size_t)nc * sizeof(*pf));
            if (npf) pf = npf;
            sreq **nw = realloc(who, (size_t)nc * sizeof(*who));
            if (nw) who = nw;
            sreq **ng = realloc(gone, (size_t)nc * sizeof(*gone));
            if (ng) gone = ng;
            if (npf && nw && ng) cap = nc;
        }
        for (peer *p = s->peers; p; p = p->next) {
            if (p->fd < 0) continue;
            double limit = p->reserve ? RESERVE_RECV_MS : s->o.recv_timeout_s * 1e3;
            if (p->receiving && !p->cut && now - p->t_wait > limit) {
                /* MHD reads EOF next and closes the connection itself */
                shutdown(p->fd, SHUT_RDWR);
                p->cut = true;
                s->n_cut++;
                continue;
            }
            if (p->r && n < cap) {
                pf[n] = (struct pollfd){.fd = p->fd, .events = 0};
                who[n++] = p->r;
            }
        }
        /* only an error or a reset is a disconnect (POLLERR/POLLHUP are
         * reported whatever .events asks); a half-closed client still
         * reads its answer */
        int n_gone = 0;
        if (n > 0 && poll(pf, (nfds_t)n, 0) > 0) {
            for (int i = 0; i < n; i++)
                if (pf[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
                    pthread_mutex_lock(&who[i]->mu);
                    bool live = !who[i]->finished && !who[i]->disconnected;
                    if (live) who[i]->refs++;
                    pthread_mutex_unlock(&who[i]->mu);
                    if (live) gone[n_gone++] = who[i];
                }
        }
        pthread_mutex_unlock(&s->reg_mu);
        /* the engine's lock is taken without reg_mu held: the HTTP threads
         * need reg_mu for every connection event */
        for (int i = 0; i < n_gone; i++) {
            cancel_req(gone[i], true);
            sreq_unref(gone[i]);
        }
    }
    free(pf);
    free(who);
    free(gone);
    return NULL;
}

/* ---- life cycle ---------------------------------------------------------- */

/* MHD's messages on stderr, less the expected ones about connections we
 * close because their client went away or the server stops (counted in
 * /metrics instead). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    if (strstr(buf, "application error generating response") ||
        strstr(buf, "Application reported internal error"))
        return;
    fprintf(stderr, "specula serve: %s%s", buf, buf[0] && buf[strlen(buf) - 1] == '\n' ? "" : "\n");
}

sp_server *sp_server_start(const sp_server_opts *o, char *err, size_t errlen) {
    sp_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    if (s->o.max_queue <= 0) s->o.max_queue = 256;
    if (!s->o.max_body) s->o.max_body = 8u << 20;
    if (!s->o.max_body_total) s->o.max_body_total = 8 * s->o.max_body;
    if (s->o.max_body_total < s->o.max_body) s->o.max_body_total = s->o.max_body;
    if (s->o.max_conns <= 0) s->o.max_conns = 1024;
    if (s->o.max_conns_per_ip <= 0) s->o.max_conns_per_ip = 256;
    if (s->o.recv_timeout_s <= 0) s->o.recv_timeout_s = 30;
    if (s->o.http_threads <= 0) s->o.http_threads = 2;
    s->served_name = strdup(o->served_name ? o->served_name : "specula");
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->reg_mu, NULL);
    metrics_init(&s->met);
    s->eot_token = -1;
    if (!s->served_name) {
        snprintf(err, errlen, "out of memory");
        sp_server_free(s);
        return NULL;
    }
    if (o->chat_template && chat_tmpl_parse(o->chat_template) < 0) {
        snprintf(err, errlen, "unknown chat template '%s' (chatml, llama3, llama2, mistral, phi3, "
                 "gemma)", o->chat_template);
        sp_server_free(s);
        return NULL;
    }
    if (o->n_api_keys) {
        s->key_hash = calloc((size_t)o->n_api_keys, sizeof(*s->key_hash));
        s->key_salt = calloc((size_t)o->n_api_keys, sizeof(*s->key_salt));
        if (!s->key_hash || !s->key_salt) {
            snprintf(err, errlen, "out of memory");
            sp_server_free(s);
            return NULL;
        }
        for (int i = 0; i < o->n_api_keys; i++) {
            SHA256((const unsigned char *)o->api_keys[i], strlen(o->api_keys[i]), s->key_hash[i]);
            for (int j = 0; j < 32; j++) sprintf(s->key_salt[i] + 2 * j, "%02x", s->key_hash[i][j]);
        }
        s->n_keys = o->n_api_keys;
    }
    if (o->metrics_key) {
        SHA256((const unsigned char *)o->metrics_key, strlen(o->metrics_key), s->metrics_hash);
        s->metrics_keyed = true;
    } else if (!o->metrics_public && s->n_keys > 1) {
        s->metrics_closed = true;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", o->port);
    int gai = getaddrinfo(s->o.host, port, &hints, &ai);
    if (gai || !ai) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", s->o.host, gai_strerror(gai));
        sp_server_free(s);
        return NULL;
    }
    /* event loops in a small pool of threads, connections suspended while
     * the engine works: see the top of this file. poll(), not epoll: MHD
     * 0.9.75 runs epoll edge-triggered and drops read-readiness after a
     * short read, so a FIN that arrives with the last bytes of a truncated
     * body is never read and the connection hangs until --recv-timeout;
     * poll is level-triggered, and costs O(connections) per wake-up, which
     * at --max-conns of a few thousand is microseconds */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->o.http_threads,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(s->o.max_conns + HEALTH_RESERVE),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_conns_per_ip,
                            /* idle while MHD is writing (a client that stops
                             * reading); receiving is the watcher's */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)256,
                            /* HTTP/1.1 without Host is a 400 */
                            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use, or too few file "
                 "descriptors for --max-conns?)", s->o.host, o->port);
        sp_server_free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (pthread_create(&s->watcher, NULL, watcher_main, s)) {
        snprintf(err, errlen, "cannot start a thread");
        sp_server_free(s);
        return NULL;
    }
    s->watcher_started = true;
    return s;
}

int sp_server_port(const sp_server *s) { return s->port; }

int sp_server_ready(sp_server *s, const sp_model *m, sp_engine *e, int32_t n_ctx, const char *info,
                    char *err, size_t errlen) {
    if (info && !(s->info = strdup(info))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->m = m;
    s->v = sp_model_get_vocab(m);
    s->e = e;
    s->n_ctx = n_ctx;
    s->n_vocab = sp_vocab_n_tokens(s->v);
    if (s->o.chat_template) {
        int t = chat_tmpl_parse(s->o.chat_template);
        if (t < 0) {
            snprintf(err, errlen, "unknown chat template '%s' (chatml, llama3, llama2, mistral, "
                     "phi3, gemma)", s->o.chat_template);
            return -1;
        }
        s->tmpl = (chat_tmpl)t;
    } else {
        int len = sp_model_meta_str(m, "tokenizer.chat_template", NULL, 0);
        if (len > 0) {
            char *t = malloc((size_t)len + 1);
            if (t) {
                sp_model_meta_str(m, "tokenizer.chat_template", t, (size_t)len + 1);
                s->tmpl = chat_tmpl_detect(t);
                free(t);
            }
        }
    }
    /* the end of turn as one control token when the vocabulary has it */
    const char *eot = chat_tmpl_eot(s->tmpl);
    if (eot) {
        sp_token t[4];
        int n = sp_tokenize(s->v, eot, strlen(eot), t, 4, false, true);
        if (n == 1 && sp_vocab_token_type(s->v, t[0]) != SP_TOKEN_NORMAL) s->eot_token = t[0];
    }
    s->ready = 1;
    return 0;
}

const char *sp_server_chat_template_name(const sp_server *s) { return chat_tmpl_name(s->tmpl); }

void sp_server_drain(sp_server *s) {
    /* the listening socket stays open: a load balancer's health check gets
     * 503 "draining" rather than a refused connection */
    if (s) s->draining = 1;
}

int64_t sp_server_in_flight(sp_server *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Applies fn to the generation request of every open connection, under
 * reg_mu (so no request record can be freed meanwhile: the connection
 * holds a reference while p->r is set), without allocating. */
static void for_each_request(sp_server *s, void (*fn)(sreq *r)) {
    pthread_mutex_lock(&s->reg_mu);
    for (peer *p = s->peers; p; p = p->next)
        if (p->r) fn(p->r);
    pthread_mutex_unlock(&s->reg_mu);
}

static void stop_one(sreq *r) {
    pthread_mutex_lock(&r->mu);
    if (!r->finished && !r->t_stop) r->t_stop = now_ms();
    pthread_mutex_unlock(&r->mu);
    cancel_req(r, false);
}

static void abort_one(sreq *r) {
    pthread_mutex_lock(&r->mu);
    r->abort = true;
    wake(r);
    pthread_mutex_unlock(&r->mu);
}

void sp_server_stop(sp_server *s) {
    if (!s || !s->d) return;
    sp_server_drain(s);
    s->stopping = 1;
    /* cancel what is in flight; the engine's final events wake the
     * connections, which send a last chunk and [DONE] or a 503 (a request
     * submitted after this sweep sees `stopping` and cancels itself) */
    for_each_request(s, stop_one);
    /* their clients get at most 5 s to take those final events */
    double dl = now_ms() + 5000;
    while (s->open_resps > 0 && now_ms() < dl) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* MHD must not stop with a connection suspended (it aborts): from now
     * on none may suspend (park refuses), and every one that waits is woken
     * to end its response. A request registers on its peer before it can
     * suspend, so the sweep sees every suspended one */
    s->closing = 1;
    for_each_request(s, abort_one);
    s->watcher_quit = 1;
    if (s->watcher_started) pthread_join(s->watcher, NULL);
    s->watcher_started = false;
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void sp_server_free(sp_server *s) {
    if (!s) return;
    sp_server_stop(s);
    if (s->watcher_started) {
        s->watcher_quit = 1;
        pthread_join(s->watcher, NULL);
    }
    metrics_destroy(&s->met);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reg_mu);
    free(s->key_hash);
    free(s->key_salt);
    free(s->served_name);
    free(s->info);
    free(s);
}
