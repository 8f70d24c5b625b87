/* openai_reply.c: the OpenAI response JSON (completions and chat
 * completions, whole and streamed as SSE chunks), the error object, and
 * the one table from sp_status to an HTTP status and OpenAI error type. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "server/openai.h"

/* ---- errors ---- */

/* sp_status -> HTTP status, OpenAI error type and code; submit_param: the
 * request field a refusal of sp_engine_submit with this status is about
 * (NULL: none in particular). A status missing here is a 500. */
static const struct {
    int status;
    int http;
    const char *type, *code, *submit_param;
} status_table[] = {
    {SP_ERR_INVALID, 400, "invalid_request_error", "invalid_value", NULL},
    {SP_ERR_GRAMMAR, 400, "invalid_request_error", "invalid_value", "grammar"},
    {SP_ERR_CONTEXT, 400, "invalid_request_error", "context_length_exceeded", "max_tokens"},
    {SP_ERR_UNSUPPORTED, 400, "invalid_request_error", "unsupported_value", "speculative"},
    {SP_ERR_NOT_FOUND, 404, "invalid_request_error", "not_found", NULL},
    {SP_ERR_BUSY, 429, "rate_limit_exceeded", "too_many_requests", NULL},
    {SP_ERR_NOMEM, 500, "server_error", NULL, NULL},
    {SP_ERR_IO, 500, "server_error", NULL, NULL},
    {SP_ERR_INTERNAL, 500, "server_error", NULL, NULL},
    {SP_ERR_CANCELLED, 503, "service_unavailable", NULL, NULL},
};

static int status_row(int status) {
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++)
        if (status_table[i].status == status) return (int)i;
    return -1;
}

static int status_verr(oai_error *e, int status, const char *param, const char *fmt,
                       va_list ap) {
    const int i = status_row(status);
    e->status = i < 0 ? 500 : status_table[i].http;
    e->type = i < 0 ? "server_error" : status_table[i].type;
    e->code = i < 0 ? NULL : status_table[i].code;
    e->param = param;
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    return -1;
}

int oai_status_error(oai_error *e, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    status_verr(e, status, param, fmt, ap);
    va_end(ap);
    return -1;
}

int oai_submit_error(oai_error *e, int status, const char *msg) {
    const int i = status_row(status);
    return oai_status_error(e, status, i < 0 ? NULL : status_table[i].submit_param, "%s", msg);
}

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

void oai_reply_error_event(sbuf *b, const oai_error *e) {
    sb_str(b, "data: ");
    oai_error_json(e, b);
    sb_str(b, "\n\n");
}

/* ---- pieces ---- */

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

/* chat's "logprobs": {"content": [...]} for tokens [from, to) */
static void json_logprobs_chat(sbuf *b, const oai_reply *o, int32_t from, int32_t to, int nt) {
    sb_str(b, "{\"content\": [");
    for (int32_t i = from; i < to; i++) {
        sb_str(b, i > from ? ", {\"token\": " : "{\"token\": ");
        json_piece(b, o->v, o->toks[i], true);
        sb_str(b, ", \"logprob\": ");
        json_lp(b, o->lps[i]);
        sb_str(b, ", \"top_logprobs\": [");
        for (int j = 0; j < nt; j++) {
            sb_str(b, j ? ", {\"token\": " : "{\"token\": ");
            json_piece(b, o->v, o->top_ids[(size_t)i * o->n_top + j], true);
            sb_str(b, ", \"logprob\": ");
            json_lp(b, o->top_lps[(size_t)i * o->n_top + j]);
            sb_str(b, "}");
        }
        sb_str(b, "]}");
    }
    sb_str(b, "]}");
}

/* "logprobs": ... for tokens [from, to). text_off: bytes of completion
 * text before token `from` (completions' text_offset). */
static void json_logprobs(sbuf *b, const oai_reply *o, int32_t from, int32_t to,
                          size_t *text_off) {
    if (o->logprobs < 0 || !o->lps) {
        sb_str(b, "null");
        return;
    }
    const int nt = o->n_top < o->logprobs ? o->n_top : o->logprobs;
    if (o->chat) {
        json_logprobs_chat(b, o, from, to, nt);
        return;
    }
    sb_str(b, "{\"tokens\": [");
    for (int32_t i = from; i < to; i++) {
        if (i > from) sb_str(b, ", ");
        json_piece(b, o->v, o->toks[i], false);
    }
    sb_str(b, "], \"token_logprobs\": [");
    for (int32_t i = from; i < to; i++) {
        if (i > from) sb_str(b, ", ");
        json_lp(b, o->lps[i]);
    }
    sb_str(b, "], \"top_logprobs\": [");
    for (int32_t i = from; i < to; i++) {
        sb_str(b, i > from ? ", {" : "{");
        for (int j = 0; j < nt; j++) {
            if (j) sb_str(b, ", ");
            json_piece(b, o->v, o->top_ids[(size_t)i * o->n_top + j], false);
            sb_str(b, ": ");
            json_lp(b, o->top_lps[(size_t)i * o->n_top + j]);
        }
        sb_str(b, "}");
    }
    sb_str(b, "], \"text_offset\": [");
    for (int32_t i = from; i < to; i++) {
        sb_printf(b, "%s%zu", i > from ? ", " : "", *text_off);
        *text_off += (size_t)piece_len(o->v, o->toks[i]);
    }
    sb_str(b, "]}");
}

static void json_usage(sbuf *b, const sp_request_stats *st) {
    sb_printf(b, "{\"prompt_tokens\": %d, \"completion_tokens\": %d, \"total_tokens\": %d, "
                 "\"prompt_tokens_details\": {\"cached_tokens\": %d}}",
              st->prompt_tokens, st->completion_tokens, st->prompt_tokens + st->completion_tokens,
              st->cached_tokens);
}

const char *oai_finish_reason(sp_finish_reason r) {
    return r == SP_FINISH_CANCELLED ? "length" : sp_finish_reason_str(r);
}

/* the "specula" extension: where the time went, and speculation's yield */
void oai_json_ext(sbuf *b, const sp_request_stats *st) {
    /* the engine's own reason, which finish_reason may only approximate
     * (a request cut short at shutdown: "length" there, "cancelled" here) */
    sb_printf(b, "{\"finish\": \"%s\", ", sp_finish_reason_str(st->finish));
    sb_printf(b, "\"queue_ms\": %.3f, \"prefill_ms\": %.3f, \"ttft_ms\": %.3f, \"decode_ms\": %.3f, "
                 "\"tpot_ms\": %.3f, \"preemptions\": %d, \"cached_tokens_disk\": %d, \"spec\": {\"steps\": %d, "
                 "\"drafted\": %d, \"accepted\": %d, \"acceptance_rate\": %.6g, \"mean_acceptance_length\": %.6g, "
                 "\"grammar_forced\": %d, \"by\": {",
              st->queue_ms, st->prefill_ms, st->ttft_ms, st->decode_ms, st->tpot_ms,
              st->preemptions, st->cached_tokens_disk, st->spec_steps, st->spec_drafted, st->spec_accepted,
              st->spec_drafted ? (double)st->spec_accepted / st->spec_drafted : 0.0,
              st->spec_steps ? (double)(st->spec_accepted + st->spec_steps) / st->spec_steps : 0.0,
              st->spec_grammar);
    /* which proposer drafted how much (auto chooses per step) */
    for (int m = SP_SPEC_NGRAM, k = 0; m <= SP_SPEC_DRAFT; m++)
        if (st->spec_drafted_by[m])
            sb_printf(b, "%s\"%s\": {\"drafted\": %d, \"accepted\": %d}", k++ ? ", " : "",
                      sp_spec_mode_str((sp_spec_mode)m), st->spec_drafted_by[m], st->spec_accepted_by[m]);
    sb_str(b, "}}}");
}

static void json_head(sbuf *b, const oai_reply *o, const char *object) {
    sb_str(b, "{\"id\": ");
    sb_json_str(b, o->id, strlen(o->id));
    sb_printf(b, ", \"object\": \"%s\", \"created\": %ld, \"model\": ", object, o->created);
    sb_json_str(b, o->model, strlen(o->model));
}

/* The length of the longest suffix of s[len] that begins tag (a tag that
 * may still be coming). */
static size_t partial_tag(const char *s, size_t len, const char *tag) {
    const size_t tl = strlen(tag);
    for (size_t k = SP_MIN(tl - 1, len); k > 0; k--)
        if (!memcmp(s + len - k, tag, k)) return k;
    return 0;
}

void oai_think_split(const char *s, size_t len, bool open, bool final, oai_think *t) {
    static const char op[] = "<think>", cl[] = "</think>";
    *t = (oai_think){0, 0, SIZE_MAX, open};
    size_t start = 0;
    if (!open) {
        size_t w = 0;
        while (w < len && strchr(" \t\r\n", s[w])) w++;
        const size_t m = SP_MIN(len - w, sizeof(op) - 1);
        if (memcmp(s + w, op, m)) {
            t->c_off = 0; /* no reasoning: the whole text is the answer */
            return;
        }
        if (m < sizeof(op) - 1) { /* "<thi" so far */
            if (final) t->c_off = 0;
            return;
        }
        t->any = true;
        start = w + sizeof(op) - 1;
    }
    t->r_off = start;
    const char *e = start < len ? memmem(s + start, len - start, cl, sizeof(cl) - 1) : NULL;
    if (!e) {
        t->r_len = len - start - (final ? 0 : partial_tag(s + start, len - start, cl));
        if (final) t->c_off = len;
        return;
    }
    t->r_len = (size_t)(e - s) - start;
    size_t c = (size_t)(e - s) + sizeof(cl) - 1;
    while (c < len && strchr(" \t\r\n", s[c])) c++;
    t->c_off = c < len || final ? c : SIZE_MAX; /* white space only so far: the answer may follow */
}

void oai_reply_reasoning_chunk(sbuf *b, const oai_reply *o, const char *text, size_t len) {
    sb_str(b, "data: ");
    json_head(b, o, "chat.completion.chunk");
    sb_str(b, ", \"choices\": [{\"index\": 0, \"delta\": {\"reasoning_content\": ");
    sb_json_str(b, text, len);
    sb_str(b, "}, \"logprobs\": null, \"finish_reason\": null}]}\n\n");
}


/* ---- tool calls ---- */

void oai_call_id(char *out, size_t cap, const char *rid, int index) {
    const char *suffix = rid + (strncmp(rid, "chatcmpl-", 9) ? 0 : 9);
    if (index) snprintf(out, cap, "call_%s_%d", suffix, index);
    else snprintf(out, cap, "call_%s", suffix);
}

/* {"id", "type": "function", "function": {"name", "arguments"}} with the
 * arguments args[n] as a JSON string (index: a stream's delta) */
static void json_call(sbuf *b, const oai_reply *o, int index, bool delta, const char *name,
                      const char *args, size_t n) {
    char id[96];
    oai_call_id(id, sizeof(id), o->id, index);
    if (delta) sb_printf(b, "{\"index\": %d, ", index);
    else sb_str(b, "{");
    sb_str(b, "\"id\": ");
    sb_json_str(b, id, strlen(id));
    sb_str(b, ", \"type\": \"function\", \"function\": {\"name\": ");
    sb_json_str(b, name, strlen(name));
    sb_str(b, ", \"arguments\": ");
    sb_json_str(b, args, n);
    sb_str(b, "}}");
}

void oai_reply_call_chunk(sbuf *b, const oai_reply *o, int index, const char *name,
                          const char *args, size_t n) {
    sb_str(b, "data: ");
    json_head(b, o, "chat.completion.chunk");
    sb_str(b, ", \"choices\": [{\"index\": 0, \"delta\": {\"tool_calls\": [");
    if (name) {
        json_call(b, o, index, true, name, "", 0);
    } else {
        sb_printf(b, "{\"index\": %d, \"function\": {\"arguments\": ", index);
        sb_json_str(b, args, n);
        sb_str(b, "}}");
    }
    sb_str(b, "]}, \"logprobs\": null, \"finish_reason\": null}]}\n\n");
}

static void collect(void *user, int kind, int index, const char *s, size_t n) {
    oai_found *f = user;
    if (kind == OAI_CALL_CONTENT) {
        sb_add(&f->content, s, n);
    } else if (kind == OAI_CALL_START) {
        if (f->n == f->cap) {
            int cap = f->cap ? 2 * f->cap : 4;
            void *p = realloc(f->call, (size_t)cap * sizeof(*f->call));
            if (!p) {
                f->oom = true;
                return;
            }
            f->call = p, f->cap = cap;
        }
        snprintf(f->call[f->n].name, sizeof(f->call[f->n].name), "%.*s", (int)n, s);
        f->call[f->n].off = f->raw.len;
        f->call[f->n++].len = 0;
    } else if (index == f->n - 1) {
        sb_add(&f->raw, s, n);
        f->call[index].len += n;
    }
}

/* The chat answer's "message"; *finish becomes "tool_calls" when it holds
 * complete calls and the output ended by itself. */
bool oai_find_calls(const oai_reply *o, oai_found *f) {
    memset(f, 0, sizeof(*f));
    if (!o->tools) return false;
    oai_calls c;
    oai_calls_init(&c, o->tools, o->tool_mode);
    oai_calls_feed(&c, o->text ? o->text : "", o->text_len, true, collect, f);
    if (!f->n || f->oom || f->content.oom || f->raw.oom) return false;
    f->done = c.done;
    return true;
}

void oai_found_free(oai_found *f) {
    sb_free(&f->content), sb_free(&f->raw), free(f->call);
}

static void json_message(sbuf *b, const oai_reply *o, const char **finish) {
    const char *text = o->text ? o->text : "";
    oai_found f;
    const bool calls = oai_find_calls(o, &f);
    sb_str(b, "\"message\": {\"role\": \"assistant\", ");
    if (o->reasoning) {
        sb_str(b, "\"reasoning_content\": ");
        sb_json_str(b, o->reasoning, o->reasoning_len);
        sb_str(b, ", ");
    }
    sb_str(b, "\"content\": ");
    if (!calls) {
        sb_json_str(b, text, o->text_len);
    } else {
        if (f.content.len) sb_json_str(b, f.content.p, f.content.len);
        else sb_str(b, "null");
        sb_str(b, ", \"tool_calls\": [");
        for (int i = 0; i < f.n; i++) {
            if (i) sb_str(b, ", ");
            json_call(b, o, i, false, f.call[i].name, f.raw.p ? f.raw.p + f.call[i].off : "",
                      f.call[i].len);
        }
        sb_str(b, "]");
        if (f.done && o->st->finish == SP_FINISH_STOP) *finish = "tool_calls";
    }
    sb_str(b, "}");
    oai_found_free(&f);
}

void oai_reply_full(sbuf *b, const oai_reply *o) {
    json_head(b, o, o->chat ? "chat.completion" : "text_completion");
    sb_str(b, ", \"choices\": [{\"index\": 0, ");
    const char *finish = o->finish;
    if (o->chat) {
        json_message(b, o, &finish);
    } else {
        sb_str(b, "\"text\": ");
        sb_json_str(b, o->text ? o->text : "", o->text_len);
    }
    sb_str(b, ", \"logprobs\": ");
    size_t off = 0;
    json_logprobs(b, o, 0, o->n_tok, &off);
    sb_printf(b, ", \"finish_reason\": \"%s\"}], \"usage\": ", finish);
    json_usage(b, o->st);
    sb_str(b, ", \"specula\": ");
    oai_json_ext(b, o->st);
    sb_str(b, "}");
}

void oai_reply_chunk(sbuf *b, const oai_reply *o, const char *text, size_t len, int32_t from,
                     int32_t to, const char *finish, bool role, const oai_stamp *stamp) {
    sb_str(b, "data: ");
    json_head(b, o, o->chat ? "chat.completion.chunk" : "text_completion");
    sb_str(b, ", \"choices\": [{\"index\": 0, ");
    if (o->chat) {
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
        json_logprobs(b, o, from, to, &off);
    } else {
        sb_str(b, "null");
    }
    sb_str(b, ", \"finish_reason\": ");
    if (finish) sb_printf(b, "\"%s\"", finish);
    else sb_str(b, "null");
    sb_str(b, "}]");
    if (finish) {
        sb_str(b, ", \"specula\": ");
        oai_json_ext(b, o->st);
    }
    if (stamp)
        sb_printf(b, ", \"specula_timing\": {\"emit_us\": %lld, \"events\": %d, \"built_us\": %lld}",
                  stamp->emit_us, stamp->events, stamp->built_us);
    sb_str(b, "}\n\n");
}

void oai_reply_usage_chunk(sbuf *b, const oai_reply *o) {
    sb_str(b, "data: ");
    json_head(b, o, o->chat ? "chat.completion.chunk" : "text_completion");
    sb_str(b, ", \"choices\": [], \"usage\": ");
    json_usage(b, o->st);
    sb_str(b, "}\n\n");
}
