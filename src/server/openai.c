/* openai.c: parsing and validation of OpenAI completion and chat completion
 * requests (cJSON), mapped onto the engine's request parameters. OpenAI has
 * no top-k or min-p, so both are off unless the top_k / min_p extensions
 * are given. */
#include "server/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int oai_seterr(oai_error *e, int status, const char *type, const char *param, const char *code,
               const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}

void oai_error_json(const oai_error *e, sbuf *o) {
    sb_str(o, "{\"error\": {\"message\": ");
    sb_json_str(o, e->message, strlen(e->message));
    sb_str(o, ", \"type\": ");
    sb_json_str(o, e->type, strlen(e->type));
    sb_str(o, ", \"param\": ");
    if (e->param) sb_json_str(o, e->param, strlen(e->param));
    else sb_str(o, "null");
    sb_str(o, ", \"code\": ");
    if (e->code) sb_json_str(o, e->code, strlen(e->code));
    else sb_str(o, "null");
    sb_str(o, "}}");
}

cJSON *oai_json_parse(const char *body, size_t len) {
    const char *end = NULL;
    if (!body) body = "", len = 0;
    cJSON *doc = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!doc) return NULL;
    for (; end && end < body + len; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(doc);
            return NULL;
        }
    return doc;
}

#define BAD(param, ...) oai_seterr(e, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

static bool is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) <= 9007199254740992.0;
}

static bool present(const cJSON *v) { return v && !cJSON_IsNull(v); }

/* A number field in [lo, hi] (open at lo when lo_open); false + e on error. */
static int num(const cJSON *o, const char *k, double lo, double hi, bool lo_open, double *out,
               oai_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!present(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(k, "'%s' must be a number", k);
    double d = v->valuedouble;
    if (d > hi || d < lo || (lo_open && d == lo))
        return BAD(k, "'%s' must be in %s%g, %g] (got %g)", k, lo_open ? "(" : "[", lo, hi, d);
    *out = d;
    return 1;
}

static int integer(const cJSON *o, const char *k, double lo, double hi, long long *out,
                   oai_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!present(v)) return 0;
    if (!is_int(v)) return BAD(k, "'%s' must be an integer", k);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(k, "'%s' must be in [%.0f, %.0f] (got %.0f)", k, lo, hi, v->valuedouble);
    *out = (long long)v->valuedouble;
    return 1;
}

static int boolean(const cJSON *o, const char *k, bool *out, oai_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!present(v)) return 0;
    if (!cJSON_IsBool(v)) return BAD(k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int string(const cJSON *o, const char *k, const char **out, oai_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!present(v)) return 0;
    if (!cJSON_IsString(v)) return BAD(k, "'%s' must be a string", k);
    *out = v->valuestring;
    return 1;
}

/* ---- escaped NUL characters ----
 * cJSON decodes "\u0000" into a NUL byte inside a NUL-terminated string,
 * so every string read from the tree would silently end there (a prompt
 * cut short, a key "prompt\u0000x" read as "prompt"). cJSON keeps no
 * lengths, so the check is on the body's text: once it parsed as JSON,
 * every backslash in it starts an escape of two or more bytes, and an
 * escape that is "\u0000" is the only way to a NUL. Any such string is
 * refused, in whatever field (one scan of the body, memchr-fast). */

/* Top-level fields that can hold strings, for error.param (which must
 * outlive the request's JSON). */
static const char *const nul_params[] = {"prompt", "messages", "stop", "model", "cache_salt",
                                         "user", "speculative", "stream_options", "content",
                                         NULL};

/* Copies into key (raw JSON text, truncated) the top-level member name
 * whose key or value holds body offset at. body is valid JSON. */
static void top_key_at(const char *body, size_t at, char *key, size_t cap) {
    int depth = 0;
    bool in_str = false, is_key = false, expect_key = false;
    size_t ks = 0, ke = 0, start = 0;
    for (size_t i = 0; i < at; i++) {
        char c = body[i];
        if (in_str) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_str = false;
                if (is_key) ks = start, ke = i;
            }
        } else if (c == '"') {
            in_str = true;
            start = i + 1;
            is_key = depth == 1 && expect_key;
            expect_key = false;
        } else if (c == '{' || c == '[') {
            expect_key = ++depth == 1 && c == '{';
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            expect_key = true;
        }
    }
    if (in_str && is_key) ks = start, ke = at; /* the NUL is in the name itself */
    size_t n = ke - ks < cap - 1 ? ke - ks : cap - 1;
    memcpy(key, body + ks, n);
    key[n] = 0;
}

static int refuse_nul(const char *body, size_t len, oai_error *e) {
    for (size_t i = 0; i < len; i += 2) { /* i: at a backslash, then past its escape */
        const char *p = memchr(body + i, '\\', len - i);
        if (!p) break;
        i = (size_t)(p - body);
        if (len - i < 6 || memcmp(p + 1, "u0000", 5)) continue;
        char key[65];
        top_key_at(body, i, key, sizeof(key));
        const char *param = NULL;
        for (int i = 0; nul_params[i] && !param; i++)
            if (!strcmp(key, nul_params[i])) param = nul_params[i];
        return oai_seterr(e, 400, "invalid_request_error", param, "invalid_value",
                          "'%s' holds an escaped NUL character (\\u0000), which no string may "
                          "hold", key);
    }
    return 0;
}

void oai_req_free(oai_req *r) {
    cJSON_Delete(r->doc);
    free(r->tokens);
    for (int i = 0; r->msg_text && i < r->n_msgs; i++) free(r->msg_text[i]);
    free(r->msg_text);
    free(r->msgs);
    memset(r, 0, sizeof(*r));
}

static int parse_messages(const cJSON *v, oai_req *r, oai_error *e) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return BAD("messages", "'messages' must be a non-empty array");
    int n = cJSON_GetArraySize(v);
    r->msgs = calloc((size_t)n, sizeof(chat_msg));
    r->msg_text = calloc((size_t)n, sizeof(char *));
    if (!r->msgs || !r->msg_text)
        return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_msgs = n;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (!cJSON_IsObject(m)) return BAD("messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return BAD("messages", "messages[%d].role must be a string", i);
        const char *rs = role->valuestring;
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") &&
            strcmp(rs, "assistant"))
            return BAD("messages", "messages[%d].role '%.64s' is not supported (system, developer, "
                       "user, assistant)", i, rs);
        r->msgs[i].role = rs;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        sbuf b = {0};
        sb_add(&b, "", 0);
        if (cJSON_IsString(c)) {
            sb_str(&b, c->valuestring);
        } else if (cJSON_IsArray(c)) {
            const cJSON *part;
            cJSON_ArrayForEach(part, c) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsObject(part) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") ||
                    !cJSON_IsString(tx)) {
                    sb_free(&b);
                    return BAD("messages", "messages[%d].content: only text parts are supported", i);
                }
                sb_str(&b, tx->valuestring);
            }
        } else if (!(cJSON_IsNull(c) || !c) || strcmp(rs, "assistant")) {
            sb_free(&b);
            return BAD("messages", "messages[%d].content must be a string or an array of text parts",
                       i);
        }
        if (b.oom) {
            sb_free(&b);
            return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        r->msg_text[i] = b.p;
        r->msgs[i].content = b.p;
        i++;
    }
    return 0;
}

static int parse_prompt(const cJSON *v, int32_t n_vocab, oai_req *r, oai_error *e) {
    if (cJSON_IsString(v)) {
        r->prompt = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return BAD("prompt", "'prompt' must be a string, an array of token ids or an array of "
                   "one string");
    const cJSON *first = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsString(first)) {
        if (cJSON_GetArraySize(v) != 1)
            return BAD("prompt", "only one prompt per request is supported");
        r->prompt = first->valuestring;
        return 0;
    }
    if (cJSON_IsArray(first)) {
        if (cJSON_GetArraySize(v) != 1)
            return BAD("prompt", "only one prompt per request is supported");
        v = first;
    }
    int n = cJSON_GetArraySize(v);
    r->tokens = malloc((size_t)(n ? n : 1) * sizeof(sp_token));
    if (!r->tokens) return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        if (!is_int(t))
            return BAD("prompt", "prompt[%d] must be a token id (an integer)", r->n_tokens);
        if (t->valuedouble < 0 || t->valuedouble >= n_vocab)
            return BAD("prompt", "prompt[%d] = %.0f is outside the vocabulary (0..%d)", r->n_tokens,
                       t->valuedouble, n_vocab - 1);
        r->tokens[r->n_tokens++] = (sp_token)t->valuedouble;
    }
    if (r->n_tokens == 0) return BAD("prompt", "the prompt is empty");
    return 0;
}

int oai_parse(const char *body, size_t len, bool chat, int32_t n_vocab, oai_req *r, oai_error *e) {
    memset(r, 0, sizeof(*r));
    r->chat = chat;
    r->logprobs = -1;
    r->spec = SP_SPEC_DEFAULT;
    r->sampling = sp_sampler_default_params();
    r->sampling.temperature = 1.0f;
    r->sampling.top_p = 1.0f;
    r->sampling.top_k = 0;
    r->sampling.min_p = 0.0f;
    r->doc = oai_json_parse(body, len);
    if (!r->doc)
        return oai_seterr(e, 400, "invalid_request_error", NULL, "invalid_json",
                          "the body is not valid JSON");
    const cJSON *o = r->doc;
    if (!cJSON_IsObject(o))
        return oai_seterr(e, 400, "invalid_request_error", NULL, "invalid_json",
                          "the body must be a JSON object");
    if (refuse_nul(body, len, e)) return -1;
    if (string(o, "model", &r->model, e) < 0) return -1;
    if (chat) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "messages");
        if (!m) return oai_seterr(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                                  "'messages' is required");
        if (parse_messages(m, r, e) < 0) return -1;
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        if (!p) return oai_seterr(e, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                                  "'prompt' is required");
        if (parse_prompt(p, n_vocab, r, e) < 0) return -1;
    }
    long long ll;
    double d;
    int k;
    const char *mt = "max_tokens";
    if ((k = integer(o, "max_completion_tokens", 1, 1 << 24, &ll, e)) < 0) return -1;
    if (!k && (k = integer(o, mt, 1, 1 << 24, &ll, e)) < 0) return -1;
    if (k) r->max_tokens = (int32_t)ll;
    if ((k = integer(o, "n", 1, 1e9, &ll, e)) < 0) return -1;
    if (k && ll != 1) return BAD("n", "only n = 1 is supported");
    if ((k = num(o, "temperature", 0, 2, false, &d, e)) < 0) return -1;
    if (k) r->sampling.temperature = (float)d;
    if ((k = num(o, "top_p", 0, 1, true, &d, e)) < 0) return -1;
    if (k) r->sampling.top_p = (float)d;
    if ((k = num(o, "min_p", 0, 1, false, &d, e)) < 0) return -1;
    if (k) r->sampling.min_p = (float)d;
    if ((k = integer(o, "top_k", -1, 1e9, &ll, e)) < 0) return -1;
    if (k) r->sampling.top_k = ll > 0 ? (int32_t)(ll < n_vocab ? ll : n_vocab) : 0;
    if ((k = num(o, "presence_penalty", -2, 2, false, &d, e)) < 0) return -1;
    if (k) r->sampling.presence_penalty = (float)d;
    if ((k = num(o, "frequency_penalty", -2, 2, false, &d, e)) < 0) return -1;
    if (k) r->sampling.frequency_penalty = (float)d;
    if ((k = integer(o, "seed", -9007199254740992.0, 9007199254740992.0, &ll, e)) < 0) return -1;
    if (k) r->sampling.seed = (uint64_t)ll;
    r->seed_given = k;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (cJSON_IsString(stop)) {
        if (stop->valuestring[0]) r->stop[r->n_stop++] = stop->valuestring;
    } else if (cJSON_IsArray(stop)) {
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s)) return BAD("stop", "'stop' must be a string or an array of strings");
            if (r->n_stop == OAI_MAX_STOP) return BAD("stop", "at most %d stop strings", OAI_MAX_STOP);
            if (s->valuestring[0]) r->stop[r->n_stop++] = s->valuestring;
        }
    } else if (present(stop)) {
        return BAD("stop", "'stop' must be a string or an array of strings");
    }
    if (chat) {
        bool lp = false;
        if (boolean(o, "logprobs", &lp, e) < 0) return -1;
        if ((k = integer(o, "top_logprobs", 0, 20, &ll, e)) < 0) return -1;
        if (k && !lp) return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (lp) r->logprobs = k ? (int)ll : 0;
    } else {
        if ((k = integer(o, "logprobs", 0, 20, &ll, e)) < 0) return -1;
        if (k) r->logprobs = (int)ll;
    }
    const char *user = NULL;
    if (string(o, "user", &user, e) < 0) return -1;
    if (boolean(o, "stream", &r->stream, e) < 0) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (present(so)) {
        if (!cJSON_IsObject(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (boolean(so, "include_usage", &r->include_usage, e) < 0) return -1;
        if (!r->stream) return BAD("stream_options", "'stream_options' needs 'stream': true");
    }
    bool echo = false;
    if (boolean(o, "echo", &echo, e) < 0) return -1;
    if (echo) return BAD("echo", "'echo' is not supported");
    if ((k = integer(o, "best_of", 1, 1e9, &ll, e)) < 0) return -1;
    if (k && ll != 1) return BAD("best_of", "only best_of = 1 is supported");
    if (string(o, "cache_salt", &r->cache_salt, e) < 0) return -1;
    /* extension (llama-server, vLLM): generate past end-of-generation tokens */
    if (boolean(o, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "speculative");
    if (present(sp)) {
        if (!cJSON_IsObject(sp))
            return BAD("speculative", "'speculative' must be an object {\"method\", \"k\"}");
        const char *method = NULL;
        if (string(sp, "method", &method, e) < 0) return -1;
        if (method) {
            int m = sp_spec_mode_parse(method);
            if (m < 0)
                return BAD("speculative", "speculative.method must be off, ngram, suffix or draft");
            r->spec = (sp_spec_mode)m;
        }
        if ((k = integer(sp, "k", 1, SP_SPEC_K_MAX, &ll, e)) < 0) return -1;
        if (k) r->spec_k = (int)ll;
    }
    return 0;
}

int oai_tokenize(const char *body, size_t len, const sp_vocab *v, int32_t n_ctx, sbuf *out,
                 oai_error *e) {
    cJSON *o = oai_json_parse(body, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return oai_seterr(e, 400, "invalid_request_error", NULL, "invalid_json",
                          "the body must be a JSON object");
    }
    if (refuse_nul(body, len, e)) {
        cJSON_Delete(o);
        return -1;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(o, "content");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(o, "add_special");
    if (!cJSON_IsString(t) || (as && !cJSON_IsBool(as))) {
        cJSON_Delete(o);
        return oai_seterr(e, 400, "invalid_request_error", "prompt", "invalid_value",
                          "give the text as \"prompt\" (or \"content\"), a string; \"add_special\" "
                          "is a boolean");
    }
    const sp_tok_opts opts = {.add_special = as ? cJSON_IsTrue(as) : true};
    const int limit = n_ctx > OAI_TOKENIZE_MAX ? n_ctx : OAI_TOKENIZE_MAX;
    sp_token *toks;
    const int n = sp_tokenize_bounded(v, t->valuestring, strlen(t->valuestring), limit, &opts,
                                      &toks);
    cJSON_Delete(o);
    if (n == SP_TOKENIZE_FAILED) return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
    if (n < 0)
        return oai_seterr(e, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                          "/tokenize counts at most %d tokens; the text has at least %d", limit,
                          -n);
    sb_str(out, "{\"tokens\": [");
    for (int i = 0; i < n; i++) sb_printf(out, "%s%d", i ? ", " : "", toks[i]);
    sb_printf(out, "], \"count\": %d, \"max_model_len\": %d}", n, n_ctx);
    free(toks);
    return 0;
}

int oai_detokenize(const char *body, size_t len, const sp_vocab *v, sbuf *out, oai_error *e) {
    const int32_t n_vocab = sp_vocab_n_tokens(v);
    cJSON *o = oai_json_parse(body, len);
    const cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "tokens") : NULL;
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(o);
        return oai_seterr(e, 400, "invalid_request_error", "tokens", "invalid_value",
                          "the body must be an object with \"tokens\": an array of token ids");
    }
    sbuf text = {0};
    sb_add(&text, "", 0);
    sp_detok d;
    sp_detok_init(&d);
    char buf[4096];
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, t) {
        /* range first: converting 1e308 or NaN to int32_t is undefined
         * (found by fuzzing: tests/fuzz/regress/request/detokenize_huge_id) */
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < n_vocab) ||
            x->valuedouble != (double)(int32_t)x->valuedouble) {
            cJSON_Delete(o);
            sb_free(&text);
            return oai_seterr(e, 400, "invalid_request_error", "tokens", "invalid_value",
                              "tokens[%d] is not a token id of this model (0..%d)", i, n_vocab - 1);
        }
        const int k = sp_detok_push(v, &d, (int32_t)x->valuedouble, buf, sizeof(buf));
        if (k > 0) sb_add(&text, buf, (size_t)k);
        i++;
    }
    const int k = sp_detok_flush(&d, buf, sizeof(buf));
    if (k > 0) sb_add(&text, buf, (size_t)k);
    cJSON_Delete(o);
    sb_str(out, "{\"prompt\": ");
    sb_json_str(out, text.p, text.len);
    sb_str(out, ", \"content\": ");
    sb_json_str(out, text.p, text.len);
    sb_str(out, "}");
    sb_free(&text);
    return 0;
}

/* ---- the prompt's tokens ---- */

/* least: the count, or (exact false) a lower bound of it: tokenizing
 * stopped there */
static int too_long(oai_error *e, const char *param, int32_t max_prompt, int32_t least,
                    bool exact) {
    return oai_seterr(e, 400, "invalid_request_error", param, "context_length_exceeded",
                      "this model's context leaves room for %d prompt tokens; the prompt has %s%d",
                      max_prompt, exact ? "" : "at least ", least);
}

int oai_prompt_tokens(const oai_req *q, chat_tmpl t, const sp_vocab *v, int32_t max_prompt,
                      sp_token **out, int32_t *n, oai_error *e) {
    const char *param = q->chat ? "messages" : "prompt";
    *out = NULL;
    *n = 0;
    if (max_prompt < 0) max_prompt = 0;
    if (!q->chat && !q->prompt) { /* token ids, already checked against the vocabulary */
        if (q->n_tokens == 0)
            return oai_seterr(e, 400, "invalid_request_error", param, "invalid_value",
                              "the prompt is empty");
        if (q->n_tokens > max_prompt) return too_long(e, param, max_prompt, q->n_tokens, true);
        sp_token *c = malloc((size_t)q->n_tokens * sizeof(sp_token));
        if (!c) return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(c, q->tokens, (size_t)q->n_tokens * sizeof(sp_token));
        *out = c;
        *n = q->n_tokens;
        return 0;
    }
    char *text = NULL;
    chat_span *cs = NULL;
    sp_span *spans = NULL;
    int n_cs = 0, rc = -1;
    int32_t ids[16];
    sp_tok_opts o = {.add_special = true};
    if (q->chat) {
        char err[512];
        text = chat_render_spans(t, q->msgs, q->n_msgs, &cs, &n_cs, err, sizeof(err));
        if (!text) {
            if (!strcmp(err, "out of memory"))
                return oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
            return oai_seterr(e, 400, "invalid_request_error", "messages", "invalid_value", "%s",
                              err);
        }
        /* special tokens only in the template's markup: the spans, and the
         * markup's tokens even where the vocabulary says USER_DEFINED (which
         * plain text would otherwise match) */
        spans = malloc((size_t)(n_cs ? n_cs : 1) * sizeof(sp_span));
        if (!spans) {
            oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
            goto done;
        }
        for (int i = 0; i < n_cs; i++) spans[i] = (sp_span){cs[i].off, cs[i].len};
        int n_ids = 0;
        for (const char *const *m = chat_tmpl_markup(t); *m && n_ids < 12; m++) {
            int32_t id = sp_vocab_find(v, *m, strlen(*m));
            if (id >= 0) ids[n_ids++] = id;
        }
        const int32_t own[3] = {sp_vocab_bos(v), sp_vocab_eos(v), sp_vocab_eot(v)};
        for (int i = 0; i < 3; i++)
            if (own[i] >= 0) ids[n_ids++] = own[i];
        o.spans = spans;
        o.n_spans = (size_t)n_cs;
        o.markup_ids = ids;
        o.n_markup_ids = n_ids;
    }
    const char *p = q->chat ? text : q->prompt;
    sp_token *toks;
    int k = sp_tokenize_bounded(v, p, strlen(p), max_prompt, &o, &toks);
    if (k == SP_TOKENIZE_FAILED) {
        oai_seterr(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (k < 0) {
        too_long(e, param, max_prompt, -k, false);
    } else if (k == 0) {
        free(toks);
        oai_seterr(e, 400, "invalid_request_error", param, "invalid_value", "the prompt is empty");
    } else {
        *out = toks;
        *n = k;
        rc = 0;
    }
done:
    free(text);
    free(cs);
    free(spans);
    return rc;
}
