/* server.c: the OpenAI-compatible HTTP server on libmicrohttpd.
 *
 * Threads: MHD runs one thread per connection. A generation request is
 * submitted to the engine with a callback; the callback (engine thread)
 * only appends the event's tokens and text to the request's record under
 * its mutex and signals its condition variable. The connection's thread
 * waits on that (in the access handler for a plain response, in the
 * response's content reader for an SSE stream) with a short timeout, and
 * between waits checks whether the client has gone (EOF on the socket),
 * cancelling the engine request if so. MHD's request-completed callback
 * cancels too when a response ends other than normally (a failed write).
 *
 * A request record (sreq) is shared by the connection, the streaming
 * response and the engine; it is freed when the last of them lets go.
 *
 * Shutdown: sp_server_drain closes the listening socket and refuses new
 * generation requests (503) while those in flight go on; sp_server_stop
 * then cancels what is left, lets each client get its final event (a last
 * chunk with finish_reason "cancelled" and [DONE], or a 503), and closes. */
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
#include "server/chat.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sbuf.h"
#include "tokenizer/tokenizer.h"

#define WAIT_SLICE_MS 50

struct sp_server {
    sp_server_opts o;
    struct MHD_Daemon *d;
    int port;
    unsigned char (*key_hash)[32]; /* SHA-256 of each API key */
    char (*key_salt)[65];          /* its hex: the tenant's cache salt */
    int n_keys;
    char *served_name;
    char *info;                    /* JSON object for /v1/models "specula", or NULL */
    _Atomic int ready;
    _Atomic int draining;          /* SIGTERM: no new requests; those in flight go on */
    _Atomic int stopping;          /* in-flight requests are being cancelled */
    _Atomic int64_t open_resps;    /* generation responses not yet completed (sent or failed) */
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
};

typedef struct sreq {
    sp_server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
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
    double t_stop;                 /* when the server's stop cancelled it (0: not) */
    sp_request_stats st;
    char error[256];
    double t_arrive, t_first, t_last;
    /* --stamp-chunks: text events not yet in a chunk, the oldest one's time */
    int32_t pend_events;
    double t_pend;
    /* streaming state (connection thread) */
    int fd;
    size_t sent_text;
    int32_t sent_tok;
    bool sent_role, sent_done;
    sbuf out;
    size_t out_off;
} sreq;

typedef struct {
    sbuf body;
    bool too_big, answered;
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
    pthread_cond_destroy(&r->cv);
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
        if (grow_tokens(r, r->n_tok + ev->n_tokens, r->n_top)) {
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
    /* the same condition as stream_build's for a chunk with content, so the
     * stamp is the time the server first had something to send */
    if (s->o.stamp_chunks && (ev->text_len || (r->logprobs >= 0 && ev->n_tokens > 0))) {
        if (!r->pend_events) r->t_pend = t;
        r->pend_events++;
    }
    bool fin = ev->finished;
    if (fin) {
        r->st = *ev->stats;
        if (ev->error) snprintf(r->error, sizeof(r->error), "%s", ev->error);
        else if (r->text.oom) snprintf(r->error, sizeof(r->error), "out of memory");
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
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (fin) sreq_unref(r);
}

/* ---- disconnect detection ---------------------------------------------- */

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char ch;
        return recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return false;
}

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

/* Waits (r->mu held) until the request has something new past the given
 * marks or has finished; false if the client went away or the server is
 * stopping (the request is then cancelled; r->mu is still held). */
static bool wait_news(sreq *r, int32_t have_tok, size_t have_text) {
    while (!r->finished && r->n_tok == have_tok && r->text.len == have_text) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->finished) break;
        if (client_gone(r->fd)) {
            pthread_mutex_unlock(&r->mu);
            cancel_req(r, true);
            pthread_mutex_lock(&r->mu);
            return false;
        }
        if (r->s->stopping) {
            /* the server stops: cancel, then wait for the engine's final
             * event so the client gets a clean end (finish_reason
             * "cancelled" and [DONE], or a 503); give up after 5 s */
            if (r->t_stop == 0) {
                r->t_stop = now_ms();
                pthread_mutex_unlock(&r->mu);
                cancel_req(r, false);
                pthread_mutex_lock(&r->mu);
            } else if (now_ms() - r->t_stop > 5000) {
                return false;
            }
        }
    }
    return true;
}

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
        bool ok = wait_news(r, r->sent_tok, r->sent_text);
        if (ok) stream_build(r);
        bool oom = r->out.oom;
        pthread_mutex_unlock(&r->mu);
        if (!ok || oom) return MHD_CONTENT_READER_END_WITH_ERROR;
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

static enum MHD_Result handle_generate(sp_server *s, struct MHD_Connection *c, const char *url,
                                       conn *cx, bool chat, const char *tenant) {
    oai_req q;
    oai_error e;
    double t_arrive = now_ms();
    if (oai_parse(cx->body.p, cx->body.len, chat, s->n_vocab, &q, &e) < 0) {
        oai_req_free(&q);
        return send_error(s, c, url, &e);
    }
    enum MHD_Result ret;
    char *text = NULL;
    sp_token *toks = NULL;
    int32_t n = 0;
    char err[512];
    if (q.model && strcmp(q.model, s->served_name)) {
        oai_seterr(&e, 404, "invalid_request_error", "model", "model_not_found",
                   "the model '%.200s' does not exist (this server serves '%.200s')", q.model,
                   s->served_name);
        goto fail;
    }
    if (chat) {
        if (s->tmpl == CHAT_NONE) {
            oai_seterr(&e, 400, "invalid_request_error", "messages", "no_chat_template",
                       "the model has no recognized chat template; start the server with "
                       "--chat-template NAME (chatml, llama3, llama2, mistral, phi3, gemma) or "
                       "use /v1/completions");
            goto fail;
        }
        text = chat_render(s->tmpl, q.msgs, q.n_msgs, err, sizeof(err));
        if (!text) {
            oai_seterr(&e, 400, "invalid_request_error", "messages", "invalid_value", "%s", err);
            goto fail;
        }
    }
    const char *ptext = chat ? text : q.prompt;
    if (ptext) {
        size_t len = strlen(ptext);
        int need = sp_tokenize(s->v, ptext, len, NULL, 0, true, chat);
        if (need < 0) need = -need;
        toks = malloc((size_t)(need ? need : 1) * sizeof(sp_token));
        if (!toks || (n = sp_tokenize(s->v, ptext, len, toks, need, true, chat)) < 0) {
            oai_seterr(&e, 500, "server_error", NULL, NULL, "cannot tokenize the prompt");
            goto fail;
        }
    } else {
        toks = q.tokens;
        q.tokens = NULL;
        n = q.n_tokens;
    }
    if (n == 0) {
        oai_seterr(&e, 400, "invalid_request_error", chat ? "messages" : "prompt", "invalid_value",
                   "the prompt is empty");
        goto fail;
    }
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
    const char *cs = q.cache_salt && q.cache_salt[0] ? q.cache_salt : NULL;
    if (tenant && cs) snprintf(salt, sizeof(salt), "%s:%.500s", tenant, cs);
    else snprintf(salt, sizeof(salt), "%.500s", tenant ? tenant : cs ? cs : "");
    if (cs && strlen(cs) > 500) {
        oai_seterr(&e, 400, "invalid_request_error", "cache_salt", "invalid_value",
                   "'cache_salt' is longer than 500 bytes");
        goto fail;
    }
    /* admission */
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
    sreq *r = calloc(1, sizeof(*r));
    if (!r) {
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        oai_seterr(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->s = s;
    r->refs = 2; /* the connection and the engine */
    r->chat = chat;
    r->stream = q.stream;
    r->include_usage = q.include_usage;
    r->logprobs = q.logprobs;
    r->t_arrive = t_arrive;
    r->created = (long)time(NULL);
    make_id(s, chat ? "chatcmpl-" : "cmpl-", r->rid, sizeof(r->rid));
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    cx->r = r;
    s->open_resps++;

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
    int64_t id = sp_engine_submit(s->e, &rp, err, sizeof(err));
    if (id < 0) {
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
        r->refs--; /* the engine never took it */
        bool ctx = strstr(err, "context") != NULL;
        oai_seterr(&e, 400, "invalid_request_error", ctx ? "max_tokens" : NULL,
                   ctx ? "context_length_exceeded" : "invalid_value", "%s", err);
        goto fail;
    }
    pthread_mutex_lock(&r->mu);
    r->id = id;
    pthread_mutex_unlock(&r->mu);
    free(toks);
    free(text);
    oai_req_free(&q);

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
        ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        metrics_request(&s->met, endpoint_label(url), 200);
        return ret;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->finished)
        if (!wait_news(r, r->n_tok, r->text.len)) {
            pthread_mutex_unlock(&r->mu);
            return MHD_NO; /* the client is gone: close the connection */
        }
    sbuf b = {0};
    int code = 200;
    if (r->st.finish == SP_FINISH_ERROR || r->st.finish == SP_FINISH_CANCELLED) {
        bool err_ = r->st.finish == SP_FINISH_ERROR;
        code = err_ ? 500 : 503;
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

fail:
    free(toks);
    free(text);
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

/* The tenant's salt for a valid key; NULL when keys are configured and this
 * one is missing or wrong (*ok false). Every key is compared, in constant
 * time, over SHA-256 digests. */
static const char *authenticate(sp_server *s, struct MHD_Connection *c, bool *ok) {
    *ok = true;
    if (!s->n_keys) return NULL;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    *ok = false;
    if (!h || strncasecmp(h, "Bearer ", 7)) return NULL;
    h += 7;
    while (*h == ' ') h++;
    unsigned char dig[32];
    SHA256((const unsigned char *)h, strlen(h), dig);
    int found = -1;
    for (int i = 0; i < s->n_keys; i++) {
        int eq = CRYPTO_memcmp(dig, s->key_hash[i], 32) == 0;
        found = eq && found < 0 ? i : found;
    }
    if (found < 0) return NULL;
    *ok = true;
    return s->key_salt[found];
}

static enum MHD_Result dispatch(sp_server *s, struct MHD_Connection *c, const char *url,
                                const char *method, conn *cx) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use GET");
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
    if (!strcmp(url, "/metrics")) {
        if (!get) ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use GET");
        sbuf b = {0};
        pthread_mutex_lock(&s->mu);
        int64_t active = s->active;
        pthread_mutex_unlock(&s->mu);
        metrics_render(&s->met, s->ready ? s->e : NULL, active, &b);
        if (b.oom) return send_json(s, c, url, 500, &b);
        enum MHD_Result r = send_body(s, c, url, 200, "text/plain; version=0.0.4", b.p ? b.p : "",
                                      b.len, NULL);
        sb_free(&b);
        return r;
    }
    bool known = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions") ||
                 !strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11) ||
                 !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
    if (!known) ERR(404, "invalid_request_error", NULL, "not_found", "no such endpoint: %.200s", url);
    bool ok;
    const char *tenant = authenticate(s, c, &ok);
    if (!ok)
        ERR(401, "authentication_error", NULL, "invalid_api_key",
            "missing or invalid API key (send 'Authorization: Bearer KEY')");
    if (!s->ready)
        ERR(503, "service_unavailable", NULL, "loading", "the model is still loading");
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) {
        if (!get) ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use GET");
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
    if (!post) ERR(405, "invalid_request_error", NULL, "method_not_allowed", "use POST");
    size_t bad = utf8_bad_at(cx->body.p, cx->body.len);
    if (bad < cx->body.len)
        ERR(400, "invalid_request_error", NULL, "invalid_encoding",
            "the body is not UTF-8 JSON: byte %zu (0x%02x) is %s", bad,
            (unsigned char)cx->body.p[bad], cx->body.p[bad] ? "not valid UTF-8" : "a NUL");
    if (!strcmp(url, "/tokenize")) return handle_tokenize(s, c, url, cx);
    if (!strcmp(url, "/detokenize")) return handle_detokenize(s, c, url, cx);
    return handle_generate(s, c, url, cx, !strcmp(url, "/v1/chat/completions"), tenant);
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
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            cx->answered = true;
            ERR(413, "invalid_request_error", NULL, "request_too_large",
                "the body is larger than %zu bytes", s->o.max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cx->too_big && cx->body.len + *upload_size > s->o.max_body) {
            cx->too_big = true;
            sb_free(&cx->body);
        }
        if (!cx->too_big) sb_add(&cx->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (cx->answered) return MHD_YES;
    cx->answered = true;
    if (cx->too_big)
        ERR(413, "invalid_request_error", NULL, "request_too_large",
            "the body is larger than %zu bytes", s->o.max_body);
    if (cx->body.oom) ERR(500, "server_error", NULL, NULL, "out of memory");
    return dispatch(s, c, url, method, cx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    conn *cx = *con_cls;
    if (!cx) return;
    if (cx->r) {
        sp_server *s = cx->r->s;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) cancel_req(cx->r, true);
        sreq_unref(cx->r);
        s->open_resps--;
    }
    sb_free(&cx->body);
    free(cx);
    *con_cls = NULL;
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
    s->served_name = strdup(o->served_name ? o->served_name : "specula");
    if (o->chat_template && chat_tmpl_parse(o->chat_template) < 0) {
        snprintf(err, errlen, "unknown chat template '%s' (chatml, llama3, llama2, mistral, phi3, "
                 "gemma)", o->chat_template);
        free(s->served_name);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    metrics_init(&s->met);
    s->eot_token = -1;
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
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)256,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use?)", s->o.host, o->port);
        sp_server_free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
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
    if (!s || !s->d || s->draining) return;
    s->draining = 1;
    MHD_socket fd = MHD_quiesce_daemon(s->d); /* new connections are refused */
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int64_t sp_server_in_flight(sp_server *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sp_server_stop(sp_server *s) {
    if (!s || !s->d) return;
    sp_server_drain(s);
    s->stopping = 1;
    /* the requests still in flight are cancelled (wait_news); their final
     * events go out before the connections close, for at most 5 s */
    double dl = now_ms() + 5000;
    while (s->open_resps > 0 && now_ms() < dl) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void sp_server_free(sp_server *s) {
    if (!s) return;
    sp_server_stop(s);
    metrics_destroy(&s->met);
    pthread_mutex_destroy(&s->mu);
    free(s->key_hash);
    free(s->key_salt);
    free(s->served_name);
    free(s->info);
    free(s);
}
