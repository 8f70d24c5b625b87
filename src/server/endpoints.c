/* endpoints.c: the server's endpoints other than generation: /health,
 * /metrics, /v1/models, /tokenize, /detokenize and /apply-template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

enum MHD_Result ep_health(http_server *s, struct MHD_Connection *c, const char *url) {
    if (s->draining) {
        static const char b[] = "{\"status\": \"draining\"}";
        return srv_send_body(s, c, url, 503, "application/json", b, sizeof(b) - 1, NULL);
    }
    if (!s->ready) {
        static const char b[] = "{\"status\": \"loading\"}";
        return srv_send_body(s, c, url, 503, "application/json", b, sizeof(b) - 1, NULL);
    }
    static const char b[] = "{\"status\": \"ok\"}";
    return srv_send_body(s, c, url, 200, "application/json", b, sizeof(b) - 1, NULL);
}

enum MHD_Result ep_metrics(http_server *s, struct MHD_Connection *c, const char *url) {
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
    if (b.oom) return srv_send_json(s, c, url, 500, &b);
    enum MHD_Result r = srv_send_body(s, c, url, 200, "text/plain; version=0.0.4",
                                      b.p ? b.p : "", b.len, NULL);
    sb_free(&b);
    return r;
}

/* max_model_len (vLLM's name) and context_length are the configured context;
 * n_ctx_train is what the model was trained on, so a client can see when the
 * server was started past it (the output degrades there). */
static void json_model(sbuf *b, http_server *s) {
    sb_str(b, "{\"id\": ");
    sb_json_str(b, s->served_name, strlen(s->served_name));
    sb_printf(b, ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"specula\", "
                 "\"max_model_len\": %d, \"context_length\": %d, \"n_ctx_train\": %d",
              (long)time(NULL), s->n_ctx, s->n_ctx, (int)sp_model_get_info(s->m)->n_ctx_train);
    if (s->info) sb_printf(b, ", \"specula\": %s", s->info);
    sb_str(b, "}");
}

/* GET /v1/models and /v1/models/NAME */
enum MHD_Result ep_models(http_server *s, struct MHD_Connection *c, const char *url) {
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
    return srv_send_json(s, c, url, 200, &b);
}

enum MHD_Result ep_tokenize(http_server *s, struct MHD_Connection *c, const char *url, conn *cx) {
    sbuf b = {0};
    oai_error e;
    if (oai_tokenize(cx->body.p, cx->body.len, s->v, s->n_ctx, &b, &e)) {
        sb_free(&b);
        return srv_send_error(s, c, url, &e);
    }
    return srv_send_json(s, c, url, 200, &b);
}

enum MHD_Result ep_detokenize(http_server *s, struct MHD_Connection *c, const char *url,
                              conn *cx) {
    sbuf b = {0};
    oai_error e;
    if (oai_detokenize(cx->body.p, cx->body.len, s->v, &b, &e)) {
        sb_free(&b);
        return srv_send_error(s, c, url, &e);
    }
    return srv_send_json(s, c, url, 200, &b);
}

/* POST /apply-template (llama-server's): a chat request's messages (and
 * tools, chat_template_kwargs) rendered by the server's chat template,
 * exactly the text a chat completion would tokenize: {"prompt": text}.
 * The body is checked as a chat completion's is. */
enum MHD_Result ep_apply_template(http_server *s, struct MHD_Connection *c, const char *url,
                                  conn *cx) {
    oai_req q;
    oai_error e;
    sbuf b = {0};
    if (oai_parse(cx->body.p, cx->body.len, true, s->n_vocab, &q, &e) < 0) goto fail;
    if (!s->ct) {
        oai_seterr(&e, 400, "invalid_request_error", "messages", "no_chat_template", "%s", s->tmpl_err);
        goto fail;
    }
    if (oai_tools_apply(&q, s->tmpl, &e)) goto fail;
    char err[512];
    const chat_render_opts ro = {.tools = q.tools_offered, .kwargs = q.tmpl_kwargs};
    char *text = chat_template_render(s->ct, q.msgs, q.n_msgs, &ro, NULL, NULL, err, sizeof(err));
    if (!text) {
        oai_seterr(&e, strcmp(err, "out of memory") ? 400 : 500,
                   strcmp(err, "out of memory") ? "invalid_request_error" : "server_error", "messages",
                   NULL, "%s", err);
        goto fail;
    }
    sb_str(&b, "{\"prompt\": ");
    sb_json_str(&b, text, strlen(text));
    sb_str(&b, "}");
    free(text);
    oai_req_free(&q);
    return srv_send_json(s, c, url, 200, &b);
fail:
    oai_req_free(&q);
    sb_free(&b);
    return srv_send_error(s, c, url, &e);
}
