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

#include "tokenizer/tokenizer.h"

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

int oai_refuse_nul(const char *body, size_t len, oai_error *e) {
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
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
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
            return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
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
    if (!r->tokens) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
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
    if (oai_refuse_nul(body, len, e)) return -1;
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
    if (r->cache_salt && strlen(r->cache_salt) > 500)
        return BAD("cache_salt", "'cache_salt' is longer than 500 bytes");
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
