/* internal.h: what the server's files share (not an API): the server, a
 * connection, a generation request's record, and the helpers that send an
 * answer. The files, by idea:
 *   server.c     the HTTP layer: MHD's callbacks, limits on the request
 *                head and body, authentication, routing, the watcher, the
 *                life cycle (sp_server_*);
 *   generate.c   /v1/completions and /v1/chat/completions: a request in
 *                steps (parse, build, submit, respond), the engine's
 *                callback, suspending and resuming the connection, SSE;
 *   endpoints.c  /health, /metrics, /v1/models, /tokenize, /detokenize;
 *   openai.c     the OpenAI request JSON (the field table) and errors;
 *   openai_reply.c  the OpenAI response JSON;
 *   metrics.c    the Prometheus counters. */
#ifndef SP_SERVER_INTERNAL_H
#define SP_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "chat/chat.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "sbuf.h"
#include "server/server.h"

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

struct http_server {
    server_opts o;
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
    chat_template *ct;             /* the chat template (NULL: none, tmpl_err says why) */
    char tmpl_err[300];
    chat_tmpl tmpl;                /* its family (tool-call format, end of turn) */
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
    /* the preparation thread (prep.c) and its queue of jobs */
    pthread_mutex_t prep_mu;
    pthread_cond_t prep_cv;
    struct prep_job *prep_head;
    pthread_t prep_thread;
    bool prep_started;
    _Atomic int prep_quit;
    /* the request log's window since the last summary (mu) */
    struct {
        double t0;
        uint64_t requests, errors, prompt, cached, generated;
    } logw;
};


/* A generation request's record, shared by the connection, the streaming
 * response and the engine; freed when the last of them lets go
 * (sreq_unref). */
typedef struct sreq {
    http_server *s;
    pthread_mutex_t mu;
    int refs;
    int64_t id;                    /* engine id (0 until submitted) */
    bool chat, stream, include_usage;
    bool responses;                /* /v1/responses: its answer's shape */
    char *resp_echo;               /* ... the settings its response object repeats (owned) */
    struct {                       /* ... its stream (connection thread) */
        int seq;                   /* the next event's sequence_number */
        int items;                 /* output items opened */
        int msg_index, call, call_index; /* the open message's output_index; the open
                                      call's index (-1: none) and output_index */
        int reason_index;          /* the reasoning item's output_index */
        bool started, msg_open, reason_open, answered; /* answered: a message or call opened */
        char name[72];             /* the open call's name */
        sbuf msg, args;            /* the open message's text, the open call's arguments */
    } resp;
    const oai_tool_fmt *tools;     /* the output may hold tool calls in this format */
    int tool_mode;                 /* OAI_TOOLS_*: where the output holds them */
    oai_calls calls;               /* a stream's reader of them (connection thread) */
    int logprobs;                  /* -1 off, else top-N */
    bool thinks, think_open;       /* chat: the template writes <think> blocks; the prompt
                                      left one open (the output starts inside it) */
    size_t sent_reason;            /* a stream's reasoning sent: its end in text */
    char rid[48];
    char tenant[13];               /* the log's tenant: a prefix of its key's hash, or "-" */
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
    int err_status;                /* its sp_status (SP_ERR_GRAMMAR: the request's fault) */
    const char *err_param;         /* the field a request's fault is about (static), or NULL */
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

/* One HTTP request on a connection (MHD's per-request context). */
typedef struct {
    sbuf body;
    size_t reserved;               /* bytes of s->body_bytes this request holds */
    bool too_big, busy, answered;
    const char *tenant;            /* the key's salt (authenticated on the head) */
    peer *p;
    sreq *r;
    struct prep_job *job;          /* being prepared off the event loop (prep.c), or NULL */
    double t_arrive;               /* the generation request's, for its log line */
} conn;

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- server.c: answers (each counted in /metrics by endpoint and code) */
const char *srv_endpoint_label(const char *url);
/* Adds Access-Control-Allow-Origin (and Vary: Origin) to resp when CORS is
 * on (--cors-origin) and the request's Origin is the allowed one. */
void srv_cors_headers(const http_server *s, struct MHD_Connection *c, struct MHD_Response *resp);
enum MHD_Result srv_send_body(http_server *s, struct MHD_Connection *c, const char *url, int code,
                              const char *type, const char *body, size_t len,
                              const char *retry_after);
/* b as application/json (a 500 if b ran out of memory); frees b. */
enum MHD_Result srv_send_json(http_server *s, struct MHD_Connection *c, const char *url, int code,
                              sbuf *b);
/* e as an OpenAI error object, with Retry-After on a 429. */
enum MHD_Result srv_send_error(http_server *s, struct MHD_Connection *c, const char *url,
                               const oai_error *e);

#define ERR(st, type, param, code, ...)                                                     \
    do {                                                                                    \
        oai_error e_;                                                                       \
        oai_seterr(&e_, st, type, param, code, __VA_ARGS__);                                \
        return srv_send_error(s, c, url, &e_);                                              \
    } while (0)

/* ---- generate.c ---- */
/* Which API a generation request speaks. */
typedef enum { GEN_COMPLETIONS, GEN_CHAT, GEN_RESPONSES } gen_api;
/* The final call of a generation request (its body is in cx->body). */
enum MHD_Result gen_handle(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                           gen_api api);
/* A later call of a plain (non-streaming) generation request: its answer
 * once the engine finished it, else the connection suspends again. */
enum MHD_Result gen_answer(http_server *s, struct MHD_Connection *c, const char *url, sreq *r);
void sreq_unref(sreq *r);
/* A generation request prepared off the event loop: what the connection
 * parsed, and what the preparation gave (a submitted request, or the
 * error to answer with). */
typedef struct {
    oai_req q;                     /* owned */
    const char *tenant;
    struct MHD_Connection *c;
    double t_arrive;
    sreq *r;                       /* submitted: the connection's reference */
    oai_error e;                   /* when r is NULL */
} gen_prep;
/* On the preparation thread: build and submit g's request. */
void gen_prepare(http_server *s, gen_prep *g);
/* ... or refuse it with a 503 (the server closes). */
void gen_prepare_refuse(http_server *s, gen_prep *g, const char *why);
/* On the connection again: the answer to a prepared request. */
enum MHD_Result gen_attach(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                           sreq *r);
enum MHD_Result gen_fail(http_server *s, struct MHD_Connection *c, const char *url, conn *cx,
                         const oai_error *e);
/* Cancels r's engine request (disconnect: counted as a client gone). */
void sreq_cancel(sreq *r, bool disconnect);
/* The server stops: cancel r (its final event still reaches the client). */
void sreq_stop(sreq *r);
/* The server closes: end r's response now, waking its connection. */
void sreq_abort(sreq *r);

/* ---- prep.c: the preparation thread ---- */
typedef struct prep_job prep_job;
int prep_init(http_server *s);
/* Ends the jobs still queued (503) and joins the thread. */
void prep_stop(http_server *s);
void prep_destroy(http_server *s);
/* Hands g to the thread (cx->job; -1 when it cannot: the caller goes on
 * itself). The connection must return MHD_YES without an answer; MHD calls
 * again, and prep_answer suspends it until the job is done. */
int prep_start(http_server *s, struct MHD_Connection *c, conn *cx, const gen_prep *g);
enum MHD_Result prep_answer(http_server *s, struct MHD_Connection *c, const char *url, conn *cx);
/* The connection completed (a client gone): the job runs on for nobody. */
void prep_detach(http_server *s, conn *cx);

/* ---- endpoints.c ---- */
enum MHD_Result ep_health(http_server *s, struct MHD_Connection *c, const char *url);
enum MHD_Result ep_metrics(http_server *s, struct MHD_Connection *c, const char *url);
enum MHD_Result ep_models(http_server *s, struct MHD_Connection *c, const char *url);
enum MHD_Result ep_tokenize(http_server *s, struct MHD_Connection *c, const char *url, conn *cx);
enum MHD_Result ep_apply_template(http_server *s, struct MHD_Connection *c, const char *url,
                                  conn *cx);
enum MHD_Result ep_detokenize(http_server *s, struct MHD_Connection *c, const char *url,
                              conn *cx);

/* The request log (log.c): one line per generation request that ended, as
 * it ends; the watcher calls log_summary every tick. status: the HTTP
 * status answered (200, or the refusal's); r NULL for a refusal before the
 * engine took it. */
void log_request(http_server *s, const char *rid, const char *tenant, int status, const sreq *r,
                 double t_arrive, double t_end);
void log_summary(http_server *s, double now);

#endif
