/* server.c: the OpenAI-compatible HTTP server on libmicrohttpd: the HTTP
 * and connection layer (MHD's callbacks, the limits on a request's head and
 * body, authentication, routing, the watcher, the life cycle). The
 * endpoints are in generate.c (completions) and endpoints.c (the rest);
 * internal.h lists the files.
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
 * Shutdown: server_drain refuses new generation requests (503) while
 * those in flight go on; /health answers 503 "draining" until the end.
 * server_stop then cancels what is left, lets each client get its final
 * event (a last chunk with finish_reason "length", its statistics'
 * finish "cancelled", and [DONE]; or a 503), resumes whatever is still suspended and stops MHD. */
#include "server/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "server/internal.h"
#include "server/webui.h" /* webui: GET / and /dashboard */

#define WATCH_MS 100          /* the watcher's period */
#define HEALTH_RESERVE 16     /* connections past --max-conns, for /health only */
#define RESERVE_RECV_MS 2000  /* how long such a connection may take to send its request */

/* ---- responses ---------------------------------------------------------- */

const char *srv_endpoint_label(const char *url) {
    static const char *known[] = {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/models",
                                  "/health", "/metrics", "/tokenize", "/detokenize", "/apply-template"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (!strcmp(url, known[i])) return known[i];
    if (!strncmp(url, "/v1/models/", 11)) return "/v1/models";
    return "other";
}

void srv_cors_headers(const http_server *s, struct MHD_Connection *c, struct MHD_Response *resp) {
    const char *allow = s->o.cors_origin;
    if (!allow) return;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin) return; /* not a browser's cross-origin call */
    if (strcmp(allow, "*") && strcmp(allow, origin)) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

/* The CORS preflight: a browser asks whether its page may send this
 * method and these headers; answered before authentication (it carries no
 * credentials) and only for the API's endpoints. */
static enum MHD_Result cors_preflight(http_server *s, struct MHD_Connection *c, const char *url) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    srv_cors_headers(s, c, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->met, srv_endpoint_label(url), 204);
    return ret;
}

enum MHD_Result srv_send_body(http_server *s, struct MHD_Connection *c, const char *url,
                              int code, const char *type, const char *body, size_t len,
                              const char *retry_after) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    if (retry_after) MHD_add_response_header(resp, "Retry-After", retry_after);
    if (code == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    srv_cors_headers(s, c, resp);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    metrics_request(&s->met, srv_endpoint_label(url), code);
    return ret;
}

enum MHD_Result srv_send_json(http_server *s, struct MHD_Connection *c, const char *url, int code,
                              sbuf *b) {
    if (b->oom) {
        sb_free(b);
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": null}}";
        return srv_send_body(s, c, url, 500, "application/json", oom, sizeof(oom) - 1, NULL);
    }
    enum MHD_Result r = srv_send_body(s, c, url, code, "application/json", b->p ? b->p : "",
                                      b->len, NULL);
    sb_free(b);
    return r;
}

enum MHD_Result srv_send_error(http_server *s, struct MHD_Connection *c, const char *url,
                               const oai_error *e) {
    sbuf b = {0};
    oai_error_json(e, &b);
    if (b.oom) return srv_send_json(s, c, url, 500, &b);
    enum MHD_Result r = srv_send_body(s, c, url, e->status, "application/json", b.p, b.len,
                                      e->status == 429 ? "1" : NULL);
    sb_free(&b);
    return r;
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
        int l = utf8_len(u + i, n - i);
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
static const char *authenticate(http_server *s, struct MHD_Connection *c, bool *ok) {
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
static bool metrics_allowed(http_server *s, struct MHD_Connection *c) {
    if (s->metrics_keyed) {
        unsigned char dig[32];
        return bearer_digest(c, dig) && CRYPTO_memcmp(dig, s->metrics_hash, 32) == 0;
    }
    if (s->metrics_closed) return false;
    bool ok;
    authenticate(s, c, &ok);
    return ok;
}

typedef enum { EP_OTHER, EP_HEALTH, EP_METRICS, EP_MODELS, EP_COMPLETIONS, EP_CHAT, EP_RESPONSES,
               EP_TOKENIZE, EP_DETOKENIZE, EP_APPLY_TEMPLATE } endpoint;

static endpoint route(const char *url) {
    if (!strcmp(url, "/health")) return EP_HEALTH;
    if (!strcmp(url, "/metrics")) return EP_METRICS;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return EP_MODELS;
    if (!strcmp(url, "/v1/completions")) return EP_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return EP_CHAT;
    if (!strcmp(url, "/v1/responses")) return EP_RESPONSES;
    if (!strcmp(url, "/tokenize")) return EP_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return EP_DETOKENIZE;
    if (!strcmp(url, "/apply-template")) return EP_APPLY_TEMPLATE;
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
static bool body_reserve(http_server *s, conn *cx, size_t n) {
    int64_t after = atomic_fetch_add(&s->body_bytes, (int64_t)n) + (int64_t)n;
    if (after > (int64_t)s->o.max_body_total) {
        atomic_fetch_sub(&s->body_bytes, (int64_t)n);
        return false;
    }
    cx->reserved += n;
    return true;
}

static void body_release(http_server *s, conn *cx) {
    sb_free(&cx->body);
    atomic_fetch_sub(&s->body_bytes, (int64_t)cx->reserved);
    cx->reserved = 0;
}

/* The first call for a request: its head is in, no body byte has been
 * read. Everything that can refuse the request without its body does so
 * here, cheapest first; an answer queued now makes MHD skip the body and
 * close the connection. */
static enum MHD_Result on_head(http_server *s, struct MHD_Connection *c, const char *url,
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
    /* webui: the static page and dashboard (webui.c), public like a 404;
     * their API and /metrics calls carry the key typed into the page */
    if (ep == EP_OTHER && !s->o.no_webui && webui_path(url)) {
        int code;
        enum MHD_Result wr = webui_answer(c, url, method, &code);
        metrics_request(&s->met, "webui", code);
        return wr;
    }
    if (ep == EP_OTHER)
        ERR(404, "invalid_request_error", NULL, "not_found", "no such endpoint: %.200s", url);
    if (s->o.cors_origin && !strcmp(method, "OPTIONS")) return cors_preflight(s, c, url);
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
     * allocated) has no receive deadline, and server_stop could not
     * wake it: it may not start a generation */
    if (!cx->p && ep != EP_HEALTH && ep != EP_METRICS && ep != EP_MODELS)
        ERR(503, "service_unavailable", NULL, "server_busy", "out of memory; retry later");
    cx->answered = false;
    return MHD_YES;
}

/* The final call: the whole body is in (cx->body). */
static enum MHD_Result dispatch(http_server *s, struct MHD_Connection *c, const char *url,
                                conn *cx) {
    endpoint ep = route(url);
    if (ep == EP_HEALTH) return ep_health(s, c, url);
    if (ep == EP_METRICS) return ep_metrics(s, c, url);
    if (!s->ready)
        ERR(503, "service_unavailable", NULL, "loading", "the model is still loading");
    if (ep == EP_MODELS) return ep_models(s, c, url);

    size_t bad = utf8_bad_at(cx->body.p, cx->body.len);
    if (bad < cx->body.len)
        ERR(400, "invalid_request_error", NULL, "invalid_encoding",
            "the body is not UTF-8 JSON: byte %zu (0x%02x) is %s", bad,
            (unsigned char)cx->body.p[bad], cx->body.p[bad] ? "not valid UTF-8" : "a NUL");
    if (ep == EP_TOKENIZE) return ep_tokenize(s, c, url, cx);
    if (ep == EP_DETOKENIZE) return ep_detokenize(s, c, url, cx);
    if (ep == EP_APPLY_TEMPLATE) return ep_apply_template(s, c, url, cx);
    return gen_handle(s, c, url, cx, ep == EP_CHAT ? GEN_CHAT : ep == EP_RESPONSES ? GEN_RESPONSES
                                                                                   : GEN_COMPLETIONS);
}

static void peer_set_receiving(http_server *s, peer *p, bool receiving) {
    if (!p) return;
    pthread_mutex_lock(&s->reg_mu);
    p->receiving = receiving;
    p->t_wait = now_ms();
    pthread_mutex_unlock(&s->reg_mu);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    http_server *s = cls;
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
    if (cx->job) /* being prepared off the event loop */
        return prep_answer(s, c, url, cx);
    if (cx->r) /* a plain generation request, woken by the engine */
        return cx->r->stream ? MHD_YES : gen_answer(s, c, url, cx->r);
    if (cx->answered) return MHD_YES;
    cx->answered = true;
    peer_set_receiving(s, cx->p, false);
    enum MHD_Result ret;
    if (cx->too_big) {
        oai_error e;
        oai_seterr(&e, 413, "invalid_request_error", NULL, "request_too_large",
                   "the body is larger than %zu bytes", s->o.max_body);
        ret = srv_send_error(s, c, url, &e);
    } else if (cx->busy) {
        oai_error e;
        oai_seterr(&e, 503, "service_unavailable", NULL, "server_busy",
                   "the server is receiving too many request bodies at once; retry later");
        ret = srv_send_error(s, c, url, &e);
    } else if (cx->body.oom) {
        oai_error e;
        oai_status_error(&e, SP_ERR_NOMEM, NULL, "out of memory");
        ret = srv_send_error(s, c, url, &e);
    } else {
        ret = dispatch(s, c, url, cx);
    }
    body_release(s, cx); /* parsed by now: the request holds what it needs */
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
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
    prep_detach(s, cx);
    if (cx->r) {
        sreq *r = cx->r;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) sreq_cancel(r, true);
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
    http_server *s = cls;
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
    http_server *s = arg;
    struct pollfd *pf = NULL;
    sreq **who = NULL, **gone = NULL;
    int cap = 0;
    while (!s->watcher_quit) {
        struct timespec ts = {0, WATCH_MS * 1000000L};
        nanosleep(&ts, NULL);
        double now = now_ms();
        log_summary(s, now);
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
            sreq_cancel(gone[i], true);
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

http_server *server_start(const server_opts *o, char *err, size_t errlen) {
    http_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *o;
    pthread_mutex_init(&s->prep_mu, NULL);
    pthread_cond_init(&s->prep_cv, NULL);
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
        server_free(s);
        return NULL;
    }
    if (o->n_api_keys) {
        s->key_hash = calloc((size_t)o->n_api_keys, sizeof(*s->key_hash));
        s->key_salt = calloc((size_t)o->n_api_keys, sizeof(*s->key_salt));
        if (!s->key_hash || !s->key_salt) {
            snprintf(err, errlen, "out of memory");
            server_free(s);
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
        server_free(s);
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
        server_free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (pthread_create(&s->watcher, NULL, watcher_main, s)) {
        snprintf(err, errlen, "cannot start a thread");
        server_free(s);
        return NULL;
    }
    s->watcher_started = true;
    if (prep_init(s)) {
        snprintf(err, errlen, "cannot start a thread");
        server_free(s);
        return NULL;
    }
    return s;
}

int server_port(const http_server *s) { return s->port; }

int server_ready(http_server *s, const sp_model *m, sp_engine *e, int32_t n_ctx, const char *info,
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
    /* the chat template: --chat-template's (which must load), else the
     * model's own; without one, chat is a 400 that says why */
    s->ct = sp_chat_template_load(m, s->o.chat_template, s->tmpl_err, sizeof(s->tmpl_err));
    if (!s->ct && s->o.chat_template) {
        snprintf(err, errlen, "--chat-template %s", s->tmpl_err);
        return -1;
    }
    s->tmpl = chat_template_family(s->ct);
    /* the end of turn as one control token when the vocabulary has it */
    s->eot_token = s->ct ? sp_chat_eot_token(s->v, s->ct) : -1;
    s->ready = 1;
    return 0;
}

const char *server_chat_template_name(const http_server *s) { return chat_template_name(s->ct); }

const char *server_chat_template_error(const http_server *s) { return s->ct ? NULL : s->tmpl_err; }

void server_drain(http_server *s) {
    /* the listening socket stays open: a load balancer's health check gets
     * 503 "draining" rather than a refused connection */
    if (s) s->draining = 1;
}

int64_t server_in_flight(http_server *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Applies fn to the generation request of every open connection, under
 * reg_mu (so no request record can be freed meanwhile: the connection
 * holds a reference while p->r is set), without allocating. */
static void for_each_request(http_server *s, void (*fn)(sreq *r)) {
    pthread_mutex_lock(&s->reg_mu);
    for (peer *p = s->peers; p; p = p->next)
        if (p->r) fn(p->r);
    pthread_mutex_unlock(&s->reg_mu);
}

void server_stop(http_server *s) {
    if (!s || !s->d) return;
    server_drain(s);
    s->stopping = 1;
    /* cancel what is in flight; the engine's final events wake the
     * connections, which send a last chunk and [DONE] or a 503 (a request
     * submitted after this sweep sees `stopping` and cancels itself) */
    for_each_request(s, sreq_stop);
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
    prep_stop(s); /* its jobs are answered and their connections resumed */
    for_each_request(s, sreq_abort);
    s->watcher_quit = 1;
    if (s->watcher_started) pthread_join(s->watcher, NULL);
    s->watcher_started = false;
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void server_free(http_server *s) {
    if (!s) return;
    server_stop(s);
    if (s->watcher_started) {
        s->watcher_quit = 1;
        pthread_join(s->watcher, NULL);
    }
    metrics_destroy(&s->met);
    prep_destroy(s);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reg_mu);
    free(s->key_hash);
    free(s->key_salt);
    free(s->served_name);
    free(s->info);
    chat_template_free(s->ct);
    free(s);
}
