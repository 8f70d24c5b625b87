/* server.h: the OpenAI-compatible HTTP server (libmicrohttpd, a few
 * event-loop threads; a connection waiting for the engine is suspended and
 * holds no thread). It listens before the model is loaded (/health answers
 * 503 until server_ready). */
#ifndef SP_SERVER_H
#define SP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "specula.h"

typedef struct {
    const char *host;            /* default 127.0.0.1 */
    int port;                    /* 0: any free port (see server_port) */
    const char *const *api_keys; /* none: no authentication */
    int n_api_keys;
    const char *served_name;     /* the model name clients use */
    const char *chat_template;   /* NULL: recognized from the model */
    int max_queue;               /* generation requests in flight before 429 (default 256) */
    size_t max_body;             /* bytes (default 8 MiB) */
    size_t max_body_total;       /* body bytes buffered across connections before 503
                                    (default 8 x max_body) */
    int max_conns;               /* open connections (default 1024); HEALTH_RESERVE more
                                    are taken for /health only */
    int max_conns_per_ip;        /* from one client address (default 256) */
    int recv_timeout_s;          /* a request's head and body must arrive within this
                                    many seconds of the connection starting to wait for
                                    it, keep-alive idling included (default 30) */
    int http_threads;            /* event-loop threads (default 2) */
    const char *metrics_key;     /* /metrics needs 'Bearer metrics_key' (NULL: see below) */
    bool metrics_public;         /* /metrics needs no key even when API keys are set.
                                    Neither: open without API keys; with one API key,
                                    that key; with several, closed (401) */
    /* Benchmarking aid, off by default: each streamed chunk that carries
     * text also carries "specula_timing": {"emit_us": T, "events": N,
     * "built_us": B}: T is the CLOCK_MONOTONIC time (microseconds) at which
     * the engine's callback handed the server the oldest of the N events
     * whose text the chunk carries, B when the chunk was formatted, just
     * before libmicrohttpd gets it to write. A client on the same host subtracts T from its own
     * CLOCK_MONOTONIC arrival time to get the server's delivery overhead. */
    bool stamp_chunks;
    bool no_webui;               /* GET / and /dashboard answer 404 (webui.c) */
    /* Cross-origin requests from browsers (CORS), off by default: the one
     * origin whose pages may call the API ("https://app.example"), or "*"
     * for any. Answers carry Access-Control-Allow-Origin for it, and the
     * preflight OPTIONS is answered (204) before authentication, as browsers
     * send it without credentials. NULL: no CORS headers, OPTIONS is 405. */
    const char *cors_origin;
    /* The request log on stderr: one line per generation request when it
     * ends (id, tenant as a hash prefix of its key's hash, never the key;
     * HTTP status, prompt / cached / generated tokens, TTFT, duration,
     * finish reason), and every SP_LOG_SUMMARY_S seconds in which requests
     * ended, a summary line. false: text ("key=value"), true: one JSON
     * object a line. */
    bool log_json;
    bool no_request_log;         /* no request lines or summaries */
} server_opts;

typedef struct http_server http_server;

http_server *server_start(const server_opts *o, char *err, size_t errlen);
int server_port(const http_server *s);
/* Serves with this model and engine from now on (n_ctx: positions per
 * request). info: a JSON object describing the configuration (files,
 * speculation, KV cache), reported as "specula" in every /v1/models entry
 * so that a benchmark can record what it measured; copied; NULL for none.
 * -1 + err for an unknown --chat-template name. */
int server_ready(http_server *s, const sp_model *m, sp_engine *e, int32_t n_ctx, const char *info,
                    char *err, size_t errlen);
/* The chat template in use ("none" without one). */
const char *server_chat_template_name(const http_server *s);
/* Why the server has no chat template (chat requests get this as a 400),
 * or NULL when it has one. */
const char *server_chat_template_error(const http_server *s);
/* Graceful shutdown, first step: new generation requests get 503 and
 * /health 503 "draining" (the server still listens, so load balancers see
 * the drain rather than a refused connection); the requests in flight go
 * on (server_in_flight counts them). */
void server_drain(http_server *s);
int64_t server_in_flight(http_server *s);
/* Stops listening and ends every connection; call before freeing the
 * engine, then server_free after it (the engine's final events still
 * reach the server's request records). Requests still in flight are
 * cancelled first and end cleanly: a stream with a final chunk
 * (finish_reason "cancelled") and [DONE], a plain response with a 503;
 * their clients get at most 5 s to take them. */
void server_stop(http_server *s);
void server_free(http_server *s);

#endif
