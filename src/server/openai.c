/* openai.c: parsing and validation of OpenAI completion and chat completion
 * requests (cJSON), mapped onto the engine's request parameters, driven by
 * one table of the request fields (fields[] below): each field's JSON type,
 * range, and what each endpoint does with it: honors it, accepts it with no
 * effect, or refuses it (400 naming the field). A field not in the table
 * for the endpoint is refused as unknown, as OpenAI does. docs/server.md's
 * "Request fields" is this table (test_chat checks). OpenAI has no
 * top-k or min-p, so both are off unless the top_k / min_p extensions are
 * given. */
#include "server/openai.h"
#include "template/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

int oai_unknown_field(oai_error *e, const char *name, const char *hint) {
    oai_seterr(e, 400, "invalid_request_error", NULL, "unknown_parameter", "unknown field '%.64s'%s",
               name ? name : "", hint);
    snprintf(e->param_buf, sizeof(e->param_buf), "%s", name ? name : "");
    e->param = e->param_buf;
    return -1;
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
    free(r->bias);
    for (int i = 0; r->msg_text && i < r->n_msgs; i++) free(r->msg_text[i]);
    free(r->msg_text);
    free(r->msgs);
    free(r->grammar);
    for (int i = 0; i < r->n_calls; i++) free((char *)r->calls[i].arguments);
    free(r->calls);
    free(r->resp_echo);
    memset(r, 0, sizeof(*r));
}

static int parse_messages(const cJSON *v, oai_req *r, oai_error *e) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return BAD("messages", "'messages' must be a non-empty array");
    int n = cJSON_GetArraySize(v), n_calls = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) n_calls += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    r->msgs = calloc((size_t)n, sizeof(chat_msg));
    r->msg_text = calloc((size_t)n, sizeof(char *));
    r->calls = calloc((size_t)(n_calls ? n_calls : 1), sizeof(chat_call));
    if (!r->msgs || !r->msg_text || !r->calls)
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    r->n_msgs = n;
    int i = 0;
    cJSON_ArrayForEach(m, v) {
        if (!cJSON_IsObject(m)) return BAD("messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role))
            return BAD("messages", "messages[%d].role must be a string", i);
        const char *rs = role->valuestring;
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") &&
            strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return BAD("messages", "messages[%d].role '%.64s' is not supported (system, developer, "
                       "user, assistant, tool)", i, rs);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (calls && !cJSON_IsNull(calls) && (!cJSON_IsArray(calls) || strcmp(rs, "assistant")))
            return BAD("messages", "messages[%d].tool_calls must be an array, on an assistant "
                       "message", i);
        if (cJSON_GetArraySize(calls) && oai_tools_history(calls, i, r, &r->msgs[i], e)) return -1;
        if (call_id && !cJSON_IsNull(call_id) && (!cJSON_IsString(call_id) || strcmp(rs, "tool")))
            return BAD("messages", "messages[%d].tool_call_id must be a string, on a tool message", i);
        if (cJSON_IsString(call_id)) r->msgs[i].call_id = call_id->valuestring;
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (why && !cJSON_IsNull(why) && (!cJSON_IsString(why) || strcmp(rs, "assistant")))
            return BAD("messages", "messages[%d].reasoning_content must be a string, on an "
                       "assistant message", i);
        if (cJSON_IsString(why)) r->msgs[i].reasoning = why->valuestring;
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


/* ---- the request fields ---------------------------------------------------- */

typedef enum { K_STRING, K_NUMBER, K_INTEGER, K_BOOL, K_OBJECT, K_ARRAY, K_ANY } kind;
typedef enum { NA, HONORED, NO_EFFECT, REFUSED } support;

/* What parsing carries between fields (oai_parse's loop) */
typedef struct {
    oai_req *r;
    int32_t n_vocab;
    bool mct;             /* max_completion_tokens given: max_tokens yields to it */
    bool chat_lp;         /* chat "logprobs": true */
    int top_lp;           /* chat "top_logprobs", or -1 */
    bool stream_options;  /* given (needs "stream": true) */
} pctx;

typedef int (*apply_fn)(const cJSON *v, pctx *c, oai_error *e);

/* One request field. The JSON type (kind) and, for numbers, the range are
 * checked first; then apply: for a field honored, it sets the request;
 * for one refused, it accepts only the value that asks for nothing
 * (n = 1, echo false, tools [], ...) and returns -1 otherwise (NULL:
 * every value is refused). null is the same as an absent field. */
typedef struct {
    const char *name;
    kind k;
    double lo, hi;        /* K_NUMBER, K_INTEGER */
    bool lo_open;         /* the range is (lo, hi] */
    support cmpl, chat;   /* NA: not a field of that endpoint (refused as unknown) */
    apply_fn apply;
    const char *type_doc; /* for docs/server.md's table */
    const char *note;
} field;

#define UNSUPPORTED(param, ...)                                                               \
    oai_seterr(e, 400, "invalid_request_error", param, "unsupported_parameter", __VA_ARGS__)

/* setters of plain values (the kind and range are checked already) */
#define SETTER(fn, lhs, expr)                                                                 \
    static int fn(const cJSON *v, pctx *c, oai_error *e) {                                    \
        (void)e;                                                                              \
        lhs = expr;                                                                           \
        return 0;                                                                             \
    }
SETTER(f_model, c->r->model, v->valuestring)
SETTER(f_temperature, c->r->sampling.temperature, (float)v->valuedouble)
SETTER(f_top_p, c->r->sampling.top_p, (float)v->valuedouble)
SETTER(f_min_p, c->r->sampling.min_p, (float)v->valuedouble)
SETTER(f_presence, c->r->sampling.presence_penalty, (float)v->valuedouble)
SETTER(f_frequency, c->r->sampling.frequency_penalty, (float)v->valuedouble)
SETTER(f_repeat, c->r->sampling.repeat_penalty, (float)v->valuedouble)
SETTER(f_stream, c->r->stream, cJSON_IsTrue(v))
SETTER(f_ignore_eos, c->r->ignore_eos, cJSON_IsTrue(v))
SETTER(f_cmpl_logprobs, c->r->logprobs, (int)v->valuedouble)
SETTER(f_chat_logprobs, c->chat_lp, cJSON_IsTrue(v))
SETTER(f_top_logprobs, c->top_lp, (int)v->valuedouble)

static int f_prompt(const cJSON *v, pctx *c, oai_error *e) {
    return parse_prompt(v, c->n_vocab, c->r, e);
}

static int f_messages(const cJSON *v, pctx *c, oai_error *e) {
    return parse_messages(v, c->r, e);
}

static int f_max_tokens(const cJSON *v, pctx *c, oai_error *e) {
    if (!c->mct) c->r->max_tokens = (int32_t)v->valuedouble;
    return 0;
}

static int f_max_completion_tokens(const cJSON *v, pctx *c, oai_error *e) {
    c->mct = true;
    c->r->max_tokens = (int32_t)v->valuedouble;
    return 0;
}

static int f_top_k(const cJSON *v, pctx *c, oai_error *e) {
    const double k = v->valuedouble;
    c->r->sampling.top_k = k > 0 ? (int32_t)(k < c->n_vocab ? k : c->n_vocab) : 0;
    return 0;
}

static int f_seed(const cJSON *v, pctx *c, oai_error *e) {
    c->r->sampling.seed = (uint64_t)(long long)v->valuedouble;
    c->r->seed_given = true;
    return 0;
}

static int f_stop(const cJSON *v, pctx *c, oai_error *e) {
    oai_req *r = c->r;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0]) r->stop[r->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v)) return BAD("stop", "'stop' must be a string or an array of strings");
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s))
            return BAD("stop", "'stop' must be a string or an array of strings");
        if (r->n_stop == OAI_MAX_STOP) return BAD("stop", "at most %d stop strings", OAI_MAX_STOP);
        if (s->valuestring[0]) r->stop[r->n_stop++] = s->valuestring;
    }
    return 0;
}

static int f_stream_options(const cJSON *v, pctx *c, oai_error *e) {
    c->stream_options = true;
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!strcmp(x->string, "include_usage") || !strcmp(x->string, "include_obfuscation")) {
            if (present(x) && !cJSON_IsBool(x))
                return BAD("stream_options", "'stream_options.%s' must be a boolean", x->string);
            if (!strcmp(x->string, "include_usage")) c->r->include_usage = cJSON_IsTrue(x);
        } else {
            return oai_seterr(e, 400, "invalid_request_error", "stream_options",
                              "unknown_parameter", "unknown field 'stream_options.%.64s'",
                              x->string);
        }
    }
    return 0;
}

static int f_cache_salt(const cJSON *v, pctx *c, oai_error *e) {
    if (strlen(v->valuestring) > 500)
        return BAD("cache_salt", "'cache_salt' is longer than 500 bytes");
    c->r->cache_salt = v->valuestring;
    return 0;
}

static int f_speculative(const cJSON *v, pctx *c, oai_error *e) {
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!strcmp(x->string, "method")) {
            if (!present(x)) continue;
            int m = cJSON_IsString(x) ? sp_spec_mode_parse(x->valuestring) : -1;
            if (m < 0)
                return BAD("speculative", "speculative.method must be auto, off, ngram, suffix or draft");
            c->r->spec = (sp_spec_mode)m;
        } else if (!strcmp(x->string, "k")) {
            if (!present(x)) continue;
            if (!is_int(x) || x->valuedouble < 1 || x->valuedouble > SP_SPEC_K_MAX)
                return BAD("k", "speculative.k must be an integer in [1, %d]", SP_SPEC_K_MAX);
            c->r->spec_k = (int)x->valuedouble;
        } else {
            return oai_seterr(e, 400, "invalid_request_error", "speculative", "unknown_parameter",
                              "unknown field 'speculative.%.64s' (method, k)", x->string);
        }
    }
    return 0;
}

/* A logit_bias key's token id: 1 to 10 decimal digits; -1 otherwise. */
static long long bias_key_id(const char *k) {
    const size_t len = strlen(k);
    bool digits = len >= 1 && len <= 10;
    for (size_t i = 0; digits && i < len; i++) digits = k[i] >= '0' && k[i] <= '9';
    return digits ? strtoll(k, NULL, 10) : -1;
}

/* A key's text as (id, digits) and where it came: two keys are the same
 * text exactly when both numbers are equal (the digits count the leading
 * zeros: "7" and "07" are two keys). */
typedef struct {
    long long id;
    int digits, at;
} bias_key;

static int cmp_bias_key(const void *a, const void *b) {
    const bias_key *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->digits != y->digits) return x->digits < y->digits ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* Drops r->bias[i] whose key is the same text as an earlier key's (cJSON
 * keeps both; the first counts, as cJSON's lookups do). Sorting costs
 * O(n log n) where looking each key up in the object cost O(n) a key. */
static bool drop_duplicate_keys(oai_req *r, bias_key *k) {
    const int n = r->n_bias;
    bool *dup = calloc((size_t)(n ? n : 1), sizeof(bool));
    if (!dup) return false;
    qsort(k, (size_t)n, sizeof(bias_key), cmp_bias_key);
    for (int i = 1; i < n; i++)
        dup[k[i].at] = k[i].id == k[i - 1].id && k[i].digits == k[i - 1].digits;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!dup[i]) r->bias[m++] = r->bias[i];
    r->n_bias = m;
    free(dup);
    return true;
}

/* {"token id": bias}: ids of this vocabulary, biases in [-100, 100]; every
 * entry is checked, in order, the duplicates too */
static int f_logit_bias(const cJSON *v, pctx *c, oai_error *e) {
    oai_req *r = c->r;
    const int n = cJSON_GetArraySize(v);
    r->bias = malloc((size_t)(n ? n : 1) * sizeof(sp_logit_bias));
    bias_key *keys = malloc((size_t)(n ? n : 1) * sizeof(bias_key));
    if (!r->bias || !keys) {
        free(keys);
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        const char *k = x->string;
        const long long id = bias_key_id(k);
        if (id < 0 || id >= c->n_vocab) {
            free(keys);
            return BAD("logit_bias", "logit_bias key '%.64s' is not a token id of this model "
                       "(0..%d)", k, c->n_vocab - 1);
        }
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 100) {
            free(keys);
            return BAD("logit_bias", "logit_bias['%s'] must be a number in [-100, 100]", k);
        }
        keys[r->n_bias] = (bias_key){id, (int)strlen(k), r->n_bias};
        r->bias[r->n_bias++] = (sp_logit_bias){(sp_token)id, (float)x->valuedouble};
    }
    const bool ok = drop_duplicate_keys(r, keys);
    free(keys);
    if (!ok) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    r->sampling.logit_bias = r->bias;
    r->sampling.n_logit_bias = r->n_bias;
    return 0;
}

/* the values of refused fields that ask for nothing */
static int only_one(const cJSON *v, pctx *c, oai_error *e) {
    return v->valuedouble == 1 ? 0 : UNSUPPORTED(NULL, "only '%s' = 1 is supported", v->string);
}

static int only_false(const cJSON *v, pctx *c, oai_error *e) {
    return cJSON_IsFalse(v) ? 0 : UNSUPPORTED(NULL, "'%s' is not supported", v->string);
}

static int only_empty(const cJSON *v, pctx *c, oai_error *e) {
    if (cJSON_IsArray(v) ? cJSON_GetArraySize(v) == 0 : !v->valuestring[0]) return 0;
    return UNSUPPORTED(NULL, "'%s' is not supported", v->string);
}

static int f_template_kwargs(const cJSON *v, pctx *c, oai_error *e) {
    c->r->tmpl_kwargs = v;
    return 0;
}

static int f_tools(const cJSON *v, pctx *c, oai_error *e) {
    if (oai_tools_check(v, e)) return -1;
    c->r->tools = cJSON_GetArraySize(v) ? v : NULL;
    return 0;
}

static int f_parallel(const cJSON *v, pctx *c, oai_error *e) {
    c->r->parallel_calls = cJSON_IsTrue(v);
    return 0;
}

static int f_tool_choice(const cJSON *v, pctx *c, oai_error *e) {
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "none") && strcmp(v->valuestring, "auto") &&
            strcmp(v->valuestring, "required"))
            return BAD("tool_choice", "'tool_choice' must be none, auto, required or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsObject(v) || !cJSON_IsString(n))
            return BAD("tool_choice", "'tool_choice' must be none, auto, required or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    c->r->tool_choice = v;
    return 0;
}

static int only_none_auto(const cJSON *v, pctx *c, oai_error *e) {
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, "none") || !strcmp(v->valuestring, "auto")))
        return 0;
    return UNSUPPORTED(NULL, "'%s' is not supported (no tools or functions are)", v->string);
}

/* Structured output: the grammar the output must match. */
static int set_grammar(pctx *c, char *g, const char *param, oai_error *e) {
    if (!g) return oai_status_error(e, SP_ERR_NOMEM, param, "out of memory");
    if (c->r->grammar) {
        free(g);
        return BAD(param, "give either 'grammar' or a 'response_format' that constrains the "
                   "output, not both");
    }
    c->r->grammar = g;
    c->r->grammar_param = param;
    return 0;
}

static int f_grammar(const cJSON *v, pctx *c, oai_error *e) {
    if (!v->valuestring[0]) return 0;
    if (strlen(v->valuestring) > OAI_MAX_GRAMMAR)
        return BAD("grammar", "'grammar' is longer than %d bytes", OAI_MAX_GRAMMAR);
    return set_grammar(c, strdup(v->valuestring), "grammar", e);
}

/* A JSON Schema (an object, or true) compiled to the grammar of r's
 * output; what="response_format.json_schema.schema" names it in errors. */
static int schema_grammar(pctx *c, const cJSON *schema, const char *what, oai_error *e) {
    if (!schema || !(cJSON_IsObject(schema) || cJSON_IsTrue(schema)))
        return BAD("response_format", "'%s' must be a JSON Schema object", what);
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    char err[300];
    char *g;
    const int rc = sp_json_schema_to_gbnf(text, 0, &g, err, sizeof(err));
    free(text);
    if (rc == SP_ERR_NOMEM) return oai_status_error(e, rc, NULL, "out of memory");
    if (rc)
        return oai_seterr(e, 400, "invalid_request_error", "response_format",
                          rc == SP_ERR_UNSUPPORTED ? "unsupported_parameter" : "invalid_value",
                          "%s: %s", what, err);
    return set_grammar(c, g, "response_format", e);
}

/* {"type": "text"}, {"type": "json_object"} (with llama-server's optional
 * "schema": a JSON Schema), or {"type": "json_schema", "json_schema":
 * {"name", "schema", "strict", "description"}} */
static int f_response_format(const cJSON *v, pctx *c, oai_error *e) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type"), *x;
    if (!cJSON_IsString(t))
        return BAD("response_format", "'response_format.type' must be text, json_object or "
                   "json_schema");
    const char *ty = t->valuestring;
    cJSON_ArrayForEach(x, v) if (strcmp(x->string, "type") &&
                                 (strcmp(x->string, "json_schema") || strcmp(ty, "json_schema")) &&
                                 (strcmp(x->string, "schema") || strcmp(ty, "json_object")))
        return oai_seterr(e, 400, "invalid_request_error", "response_format", "unknown_parameter",
                          "unknown field 'response_format.%.64s'", x->string);
    if (!strcmp(ty, "text")) return 0;
    if (!strcmp(ty, "json_object")) {
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(v, "schema");
        if (schema && !cJSON_IsNull(schema))
            return schema_grammar(c, schema, "response_format.schema", e);
        return set_grammar(c, strdup(sp_json_object_gbnf()), "response_format", e);
    }
    if (strcmp(ty, "json_schema"))
        return BAD("response_format", "'response_format.type' must be text, json_object or "
                   "json_schema (got '%.40s')", ty);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
    if (!cJSON_IsObject(js))
        return BAD("response_format", "'response_format.json_schema' must be an object");
    const cJSON *schema = NULL;
    cJSON_ArrayForEach(x, js) {
        if (!strcmp(x->string, "schema")) schema = x;
        else if (!strcmp(x->string, "name") ? !cJSON_IsString(x)
                 : !strcmp(x->string, "strict") ? !cJSON_IsBool(x) && !cJSON_IsNull(x)
                 : !strcmp(x->string, "description") ? !cJSON_IsString(x)
                 : true)
            return BAD("response_format", "'response_format.json_schema.%.64s' is not a field "
                       "(name, schema, strict, description) or has the wrong type", x->string);
    }
    return schema_grammar(c, schema, "response_format.json_schema.schema", e);
}

static int only_text_modality(const cJSON *v, pctx *c, oai_error *e) {
    const cJSON *t = cJSON_GetArrayItem(v, 0);
    if (cJSON_GetArraySize(v) == 1 && cJSON_IsString(t) && !strcmp(t->valuestring, "text"))
        return 0;
    return UNSUPPORTED(NULL, "only 'modalities': [\"text\"] is supported");
}

#define I24 16777216.0
#define I53 9007199254740992.0
static const field fields[] = {
    /* name, kind, lo, hi, lo_open, completions, chat, apply, type, note */
    {"model", K_STRING, 0, 0, false, HONORED, HONORED, f_model, "string",
     "the served name (404 for another)"},
    {"prompt", K_ANY, 0, 0, false, HONORED, NA, f_prompt, "string, [string], [int] or [[int]]",
     "one prompt; text or token ids"},
    {"messages", K_ARRAY, 0, 0, false, NA, HONORED, f_messages, "array",
     "roles system, developer, user, assistant; text content only"},
    {"max_tokens", K_INTEGER, 1, I24, false, HONORED, HONORED, f_max_tokens, "integer",
     "default 16 (completions), the rest of the context (chat)"},
    {"max_completion_tokens", K_INTEGER, 1, I24, false, HONORED, HONORED, f_max_completion_tokens,
     "integer", "wins over max_tokens"},
    {"temperature", K_NUMBER, 0, 2, false, HONORED, HONORED, f_temperature, "number",
     "0: greedy"},
    {"top_p", K_NUMBER, 0, 1, true, HONORED, HONORED, f_top_p, "number",
     ""},
    {"presence_penalty", K_NUMBER, -2, 2, false, HONORED, HONORED, f_presence, "number",
     ""},
    {"frequency_penalty", K_NUMBER, -2, 2, false, HONORED, HONORED, f_frequency, "number",
     ""},
    {"seed", K_INTEGER, -I53, I53, false, HONORED, HONORED, f_seed, "integer",
     "without one, sampled output varies"},
    {"stop", K_ANY, 0, 0, false, HONORED, HONORED, f_stop, "string or [string]",
     "at most 16; not in the output"},
    {"stream", K_BOOL, 0, 0, false, HONORED, HONORED, f_stream, "boolean",
     "server-sent events"},
    {"stream_options", K_OBJECT, 0, 0, false, HONORED, HONORED, f_stream_options, "object",
     "include_usage; include_obfuscation (no effect); needs stream"},
    {"logprobs", K_INTEGER, 0, 20, false, HONORED, NA, f_cmpl_logprobs, "integer",
     "top-N per token"},
    {"logprobs", K_BOOL, 0, 0, false, NA, HONORED, f_chat_logprobs, "boolean",
     ""},
    {"top_logprobs", K_INTEGER, 0, 20, false, NA, HONORED, f_top_logprobs, "integer",
     "needs logprobs: true"},
    {"logit_bias", K_OBJECT, -100, 100, false, HONORED, HONORED, f_logit_bias, "object",
     "{\"token id\": bias}, bias added to the logit before sampling (greedy too)"},
    {"user", K_STRING, 0, 0, false, NO_EFFECT, NO_EFFECT, NULL, "string",
     ""},
    {"metadata", K_OBJECT, 0, 0, false, NA, NO_EFFECT, NULL, "object",
     ""},
    {"store", K_BOOL, 0, 0, false, NA, NO_EFFECT, NULL, "boolean",
     "nothing is stored"},
    {"service_tier", K_STRING, 0, 0, false, NA, NO_EFFECT, NULL, "string",
     ""},
    {"parallel_tool_calls", K_BOOL, 0, 0, false, NA, HONORED, f_parallel, "boolean",
     "default false (as llama-server): one call per answer; true: several where the template's "
     "format has room for them (chatml, mistral)"},
    {"prompt_cache_key", K_STRING, 0, 0, false, NA, NO_EFFECT, NULL, "string",
     "the prefix cache needs no key (see cache_salt)"},
    {"safety_identifier", K_STRING, 0, 0, false, NA, NO_EFFECT, NULL, "string",
     ""},
    {"prediction", K_OBJECT, 0, 0, false, NA, NO_EFFECT, NULL, "object",
     "changes speed, not output, at OpenAI; ignored"},
    {"n", K_INTEGER, 1, 1e9, false, REFUSED, REFUSED, only_one, "integer",
     "1 only"},
    {"best_of", K_INTEGER, 1, 1e9, false, REFUSED, NA, only_one, "integer",
     "1 only"},
    {"echo", K_BOOL, 0, 0, false, REFUSED, NA, only_false, "boolean",
     "false only"},
    {"suffix", K_STRING, 0, 0, false, REFUSED, NA, only_empty, "string",
     "\"\" only"},
    {"response_format", K_OBJECT, 0, 0, false, HONORED, HONORED, f_response_format, "object",
     "text, json_object (optionally with llama-server's \"schema\"), json_schema (a JSON "
     "Schema subset: see Structured output); an "
     "unsupported keyword is a 400 naming it"},
    {"tools", K_ARRAY, 0, 0, false, NA, HONORED, f_tools, "array",
     "function tools, written in the chat template's own tool markup; see Structured output"},
    {"tool_choice", K_ANY, 0, 0, false, NA, HONORED, f_tool_choice, "string or object",
     "none, auto (text, or calls from the template's trigger on), required or a named function "
     "(the output is calls); calls match the parameters schema, returned as tool_calls"},
    {"functions", K_ARRAY, 0, 0, false, NA, REFUSED, only_empty, "array",
     "[] only"},
    {"function_call", K_ANY, 0, 0, false, NA, REFUSED, only_none_auto, "string or object",
     "\"none\" or \"auto\" only"},
    {"modalities", K_ARRAY, 0, 0, false, NA, REFUSED, only_text_modality, "array",
     "[\"text\"] only"},
    {"audio", K_OBJECT, 0, 0, false, NA, REFUSED, NULL, "object",
     ""},
    {"reasoning_effort", K_STRING, 0, 0, false, NA, REFUSED, NULL, "string",
     ""},
    {"verbosity", K_STRING, 0, 0, false, NA, REFUSED, NULL, "string",
     ""},
    {"web_search_options", K_OBJECT, 0, 0, false, NA, REFUSED, NULL, "object",
     ""},
    {"chat_template_kwargs", K_OBJECT, 0, 0, false, NA, HONORED, f_template_kwargs, "object",
     "extension (vLLM, llama-server): more variables for the chat template, e.g. "
     "{\"enable_thinking\": false}"},
    {"grammar", K_STRING, 0, 0, false, HONORED, HONORED, f_grammar, "string",
     "extension (llama-server): GBNF the output must match; not with a constraining "
     "response_format"},
    {"top_k", K_INTEGER, -1, 1e9, false, HONORED, HONORED, f_top_k, "integer",
     "extension; 0 or -1: off (default)"},
    {"min_p", K_NUMBER, 0, 1, false, HONORED, HONORED, f_min_p, "number",
     "extension; default 0 (off)"},
    {"repeat_penalty", K_NUMBER, 0, 10, true, HONORED, HONORED, f_repeat, "number",
     "extension (llama-server); 1: off (default), over the last 64 tokens"},
    {"ignore_eos", K_BOOL, 0, 0, false, HONORED, HONORED, f_ignore_eos, "boolean",
     "extension; generate past end-of-generation tokens"},
    {"cache_salt", K_STRING, 0, 0, false, HONORED, HONORED, f_cache_salt, "string",
     "extension (vLLM); at most 500 bytes; prefix cache shared only within a salt"},
    {"speculative", K_OBJECT, 0, 0, false, HONORED, HONORED, f_speculative, "object",
     "extension; {\"method\": auto, off, ngram, suffix or draft, \"k\": 1..16}"},
};
#define N_FIELDS ((int)(sizeof(fields) / sizeof(fields[0])))

static support support_for(const field *f, bool chat) { return chat ? f->chat : f->cmpl; }

/* The row of name for the endpoint (chat or not), or NULL: unknown. */
static const field *find_field(const char *name, bool chat) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].name, name) && support_for(&fields[i], chat) != NA) return &fields[i];
    return NULL;
}

static const char *const kind_name[] = {"a string", "a number", "an integer", "a boolean",
                                        "an object", "an array", ""};

/* One field's value against its row: kind, range, then apply. */
static int take_field(const field *f, const cJSON *v, pctx *c, oai_error *e) {
    const char *k = f->name;
    bool ok = f->k == K_ANY || (f->k == K_STRING && cJSON_IsString(v)) ||
              (f->k == K_NUMBER && cJSON_IsNumber(v) && isfinite(v->valuedouble)) ||
              (f->k == K_INTEGER && is_int(v)) || (f->k == K_BOOL && cJSON_IsBool(v)) ||
              (f->k == K_OBJECT && cJSON_IsObject(v)) || (f->k == K_ARRAY && cJSON_IsArray(v));
    if (!ok) return BAD(k, "'%s' must be %s", k, kind_name[f->k]);
    if (f->k == K_NUMBER || f->k == K_INTEGER) {
        const double d = v->valuedouble;
        if (d > f->hi || d < f->lo || (f->lo_open && d == f->lo)) {
            if (f->k == K_INTEGER)
                return BAD(k, "'%s' must be in [%.0f, %.0f] (got %.0f)", k, f->lo, f->hi, d);
            return BAD(k, "'%s' must be in %s%g, %g] (got %g)", k, f->lo_open ? "(" : "[", f->lo,
                       f->hi, d);
        }
    }
    const bool refused = support_for(f, c->r->chat) == REFUSED;
    if (refused && !f->apply) return UNSUPPORTED(k, "'%s' is not supported by this server", k);
    if (!f->apply || !f->apply(v, c, e)) return 0;
    if (refused) e->param = f->name; /* static: the request's JSON is freed before the answer */
    return -1;
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
    /* the chat template reads tools and chat_template_kwargs as Python's
     * json would: each number's text kept (1.0 a float) */
    if (chat && jinja_json_keep_numbers(r->doc, body, len))
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    const cJSON *o = r->doc;
    if (!cJSON_IsObject(o))
        return oai_seterr(e, 400, "invalid_request_error", NULL, "invalid_json",
                          "the body must be a JSON object");
    if (oai_refuse_nul(body, len, e)) return -1;
    pctx c = {.r = r, .n_vocab = n_vocab, .top_lp = -1};
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        const field *f = find_field(v->string, chat);
        if (!f) {
            const field *other = find_field(v->string, !chat);
            return oai_unknown_field(e, v->string,
                                     !other ? "" : chat ? " (a /v1/completions field)"
                                                        : " (a /v1/chat/completions field)");
        }
        /* a duplicate key: the first one counts (as cJSON's lookups) */
        if (cJSON_GetObjectItemCaseSensitive(o, v->string) != v) continue;
        /* null is an absent field, except for the input, which must be there */
        if (!present(v) && f->apply != f_prompt && f->apply != f_messages) continue;
        if (take_field(f, v, &c, e)) return -1;
    }
    const char *req = chat ? "messages" : "prompt";
    if (!cJSON_GetObjectItemCaseSensitive(o, req))
        return oai_seterr(e, 400, "invalid_request_error", req, "missing_required_parameter",
                          "'%s' is required", req);
    if (c.top_lp >= 0 && !c.chat_lp)
        return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (chat && c.chat_lp) r->logprobs = c.top_lp >= 0 ? c.top_lp : 0;
    if (c.stream_options && !r->stream)
        return BAD("stream_options", "'stream_options' needs 'stream': true");
    return 0;
}

/* ---- the table as Markdown (docs/server.md's "Request fields") ---- */

static const char *support_doc(support s) {
    static const char *const d[] = {"-", "honored", "no effect", "refused"};
    return d[s];
}

void oai_fields_markdown(sbuf *out) {
    sb_str(out, "| Field | Type | Range | /v1/completions | /v1/chat/completions | Notes |\n"
                "|---|---|---|---|---|---|\n");
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        char range[64] = "";
        if (f->k == K_NUMBER || f->k == K_INTEGER || f->apply == f_logit_bias)
            snprintf(range, sizeof(range), "%s%.16g, %.16g]", f->lo_open ? "(" : "[", f->lo, f->hi);
        sb_printf(out, "| `%s` | %s | %s | %s | %s | %s |\n", f->name, f->type_doc, range,
                  support_doc(f->cmpl), support_doc(f->chat), f->note);
    }
}
