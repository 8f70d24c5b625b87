/* responses.c: POST /v1/responses, OpenAI's Responses API, stateless.
 *
 * A request is translated into the chat completion request it means
 * (resp_translate): input's text or items become messages (instructions
 * the first, a system message; function_call items an assistant's
 * tool_calls; function_call_output items tool messages), text.format
 * becomes response_format, max_output_tokens max_tokens, tools and
 * tool_choice their chat form; every other field passes through, so the
 * chat endpoint's field table checks it (and refuses what it does not
 * know). The generation is then the chat request's; only the answer's
 * shape differs: a "response" object whose output holds a message item
 * and function_call items, and a stream of typed events (response.created,
 * response.output_item.added, response.output_text.delta, ...,
 * response.completed or response.incomplete), each numbered.
 *
 * Nothing is stored: previous_response_id is refused with a clear error
 * (send the whole conversation in input). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "server/internal.h"
#include "server/responses.h"

#define BAD(param, ...) oai_seterr(e, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)
#define UNSUPPORTED(param, ...) \
    oai_seterr(e, 400, "invalid_request_error", param, "unsupported_parameter", __VA_ARGS__)

/* ---- the request ---------------------------------------------------------- */

/* A message's content: a string, or parts whose text is joined
 * (input_text, output_text, text); NULL + e for another part. */
static char *content_text(const cJSON *c, const char *where, oai_error *e) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (cJSON_IsNull(c) || !c) return strdup("");
    if (!cJSON_IsArray(c)) {
        BAD("input", "%s.content must be a string or an array of text parts", where);
        return NULL;
    }
    sbuf b = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) {
            sb_free(&b);
            UNSUPPORTED("input", "%s: content parts of type '%.40s' are not supported (text only)",
                        where, t);
            return NULL;
        }
        if (!cJSON_IsString(tx)) {
            sb_free(&b);
            BAD("input", "%s: a %s part needs 'text' (a string)", where, t);
            return NULL;
        }
        sb_str(&b, tx->valuestring);
    }
    sb_add(&b, "", 1);
    if (b.oom) {
        sb_free(&b);
        oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    return b.p;
}

static cJSON *message(const char *role, char *text) {
    cJSON *m = cJSON_CreateObject();
    if (m) cJSON_AddStringToObject(m, "role", role), cJSON_AddStringToObject(m, "content", text);
    free(text);
    return m;
}

/* One input item appended to msgs (last: the message before, which a
 * function_call joins when it is the assistant's). */
static int input_item(const cJSON *it, int i, cJSON *msgs, oai_error *e) {
    char where[32];
    snprintf(where, sizeof(where), "input[%d]", i);
    if (!cJSON_IsObject(it)) return BAD("input", "%s must be an object", where);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : role ? "message" : "";
    if (!strcmp(t, "message")) {
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
            return BAD("input", "%s.role must be user, system, developer or assistant", where);
        char *text = content_text(cJSON_GetObjectItemCaseSensitive(it, "content"), where, e);
        if (!text) return -1;
        cJSON *m = message(r, text);
        if (!m) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        if (!cJSON_IsString(id) || !cJSON_IsString(nm) || !cJSON_IsString(args))
            return BAD("input", "%s: a function_call needs call_id, name and arguments (strings)", where);
        /* calls join the assistant message just before them, or start one */
        cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
        const cJSON *lr = cJSON_GetObjectItemCaseSensitive(last, "role");
        if (!last || !cJSON_IsString(lr) || strcmp(lr->valuestring, "assistant")) {
            last = cJSON_CreateObject();
            if (!last) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
            cJSON_AddStringToObject(last, "role", "assistant");
            cJSON_AddNullToObject(last, "content");
            cJSON_AddItemToArray(msgs, last);
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
        cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
        if (!calls || !c || !f) {
            cJSON_Delete(c), cJSON_Delete(f);
            return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        }
        cJSON_AddStringToObject(c, "id", id->valuestring);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(f, "name", nm->valuestring);
        cJSON_AddStringToObject(f, "arguments", args->valuestring);
        cJSON_AddItemToObject(c, "function", f);
        cJSON_AddItemToArray(calls, c);
        return 0;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        if (!cJSON_IsString(id))
            return BAD("input", "%s: a function_call_output needs call_id (a string)", where);
        char *text = content_text(cJSON_GetObjectItemCaseSensitive(it, "output"), where, e);
        if (!text) return -1;
        cJSON *m = message("tool", text);
        if (!m) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!strcmp(t, "reasoning")) return 0; /* an earlier answer's reasoning: not part of the prompt */
    if (!strcmp(t, "item_reference"))
        return UNSUPPORTED("input", "%s: item references need stored responses; this server stores "
                           "none (send the items themselves)", where);
    return UNSUPPORTED("input", "%s: items of type '%.40s' are not supported (message, function_call, "
                       "function_call_output)", where, t);
}

static int translate_input(const cJSON *in, const cJSON *instr, cJSON *chat, oai_error *e) {
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    if (!msgs) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    if (cJSON_IsString(instr)) {
        cJSON *m = message("system", strdup(instr->valuestring));
        if (!m) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        cJSON_AddItemToArray(msgs, m);
    } else if (instr && !cJSON_IsNull(instr)) {
        return BAD("instructions", "'instructions' must be a string");
    }
    if (cJSON_IsString(in)) {
        cJSON *m = message("user", strdup(in->valuestring));
        if (!m) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!cJSON_IsArray(in) || !cJSON_GetArraySize(in))
        return BAD("input", "'input' must be a string or a non-empty array of items");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) if (input_item(it, i++, msgs, e)) return -1;
    return 0;
}

/* tools: [{"type": "function", "name", "description", "parameters", "strict"}]
 * into the chat form */
static int translate_tools(const cJSON *tools, cJSON *chat, oai_error *e) {
    if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    if (!out) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
            return UNSUPPORTED("tools", "tools[%d]: only function tools are supported (got '%.40s')", i,
                               cJSON_IsString(ty) ? ty->valuestring : "?");
        cJSON *f = cJSON_CreateObject(), *w = cJSON_CreateObject();
        if (!f || !w) {
            cJSON_Delete(f), cJSON_Delete(w);
            return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        }
        const cJSON *x;
        cJSON_ArrayForEach(x, t) {
            if (!strcmp(x->string, "type")) continue;
            if (strcmp(x->string, "name") && strcmp(x->string, "description") &&
                strcmp(x->string, "parameters") && strcmp(x->string, "strict")) {
                cJSON_Delete(f), cJSON_Delete(w);
                return BAD("tools", "tools[%d].%.40s is not a field of a function tool", i, x->string);
            }
            cJSON_AddItemToObject(f, x->string, cJSON_Duplicate(x, true));
        }
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", f);
        cJSON_AddItemToArray(out, w);
        i++;
    }
    return 0;
}

static int translate_tool_choice(const cJSON *tc, cJSON *chat, oai_error *e) {
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(tc, false));
        return 0;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") ||
        !cJSON_IsString(nm))
        return BAD("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                   "\"name\": ...}");
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON *f = c ? cJSON_AddObjectToObject(c, "function") : NULL;
    if (!f) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", nm->valuestring);
    return 0;
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", "name",
 * "schema", "strict", "description"}, "verbosity"} into response_format */
static int translate_text(const cJSON *text, cJSON *chat, oai_error *e) {
    if (!cJSON_IsObject(text)) return BAD("text", "'text' must be an object");
    const cJSON *x, *fmt = NULL;
    cJSON_ArrayForEach(x, text) {
        if (!strcmp(x->string, "format")) fmt = x;
        else if (strcmp(x->string, "verbosity") || !(cJSON_IsNull(x) || (cJSON_IsString(x) &&
                                                                       !strcmp(x->valuestring, "medium"))))
            return UNSUPPORTED("text", "'text.%.40s' is not supported", x->string);
    }
    if (!fmt || cJSON_IsNull(fmt)) return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(ty))
        return BAD("text.format", "'text.format' must be {\"type\": text, json_object or json_schema, ...}");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!rf) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    cJSON_AddStringToObject(rf, "type", ty->valuestring);
    if (strcmp(ty->valuestring, "json_schema")) {
        cJSON_ArrayForEach(x, fmt) if (strcmp(x->string, "type"))
            return BAD("text.format", "'text.format.%.40s' is not a field of a %.20s format", x->string,
                       ty->valuestring);
        return 0;
    }
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    if (!js) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    cJSON_ArrayForEach(x, fmt) if (strcmp(x->string, "type"))
        cJSON_AddItemToObject(js, x->string, cJSON_Duplicate(x, true));
    return 0;
}

/* Fields of the chat endpoint that the Responses API spells otherwise. */
static const char *const chat_only[] = {"messages", "max_tokens", "max_completion_tokens",
                                        "response_format", "n", "logprobs", "functions",
                                        "function_call", "prompt"};

/* A field of the Responses API that asks for nothing (null, or its
 * default), else a refusal naming it. */
static int refuse(const char *k, oai_error *e) {
    snprintf(e->param_buf, sizeof(e->param_buf), "%.63s", k); /* k is the body's, freed after */
    e->param = e->param_buf;
    return -1;
}

static int responses_only(const cJSON *x, oai_error *e) {
    const char *k = x->string;
    if (cJSON_IsNull(x)) return 0;
    if (!strcmp(k, "previous_response_id") || !strcmp(k, "conversation")) {
        UNSUPPORTED(NULL, "'%s' is not supported: this server stores no responses; send the whole "
                    "conversation in 'input'", k);
        return refuse(k, e);
    }
    if (!strcmp(k, "truncation") && cJSON_IsString(x) && !strcmp(x->valuestring, "disabled")) return 0;
    if (!strcmp(k, "background") && cJSON_IsFalse(x)) return 0;
    if (!strcmp(k, "include") && cJSON_IsArray(x) && !cJSON_GetArraySize(x)) return 0;
    if (!strcmp(k, "top_logprobs") && cJSON_IsNumber(x) && x->valuedouble == 0) return 0;
    if (!strcmp(k, "max_tool_calls")) return 0; /* one call per answer unless parallel_tool_calls */
    if (!strcmp(k, "reasoning") && cJSON_IsObject(x) && !cJSON_GetArraySize(x)) return 0;
    UNSUPPORTED(NULL, "'%s' is not supported by this server", k);
    return refuse(k, e);
}

static bool is_responses_only(const char *k) {
    static const char *const names[] = {"previous_response_id", "conversation", "truncation", "background",
                                        "include", "top_logprobs", "max_tool_calls", "reasoning", "prompt"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(k, names[i])) return true;
    return false;
}

/* The request's own settings, as the response object repeats them. */
static char *echo_of(const cJSON *in) {
    static const char *const keys[] = {"instructions", "max_output_tokens", "temperature", "top_p",
                                       "tool_choice", "tools", "text", "metadata", "parallel_tool_calls",
                                       "store"};
    static const char *const dflt[] = {"null", "null", "1", "1", "\"auto\"", "[]",
                                       "{\"format\": {\"type\": \"text\"}}", "{}", "false", "false"};
    sbuf b = {0};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, keys[i]);
        char *s = v && !cJSON_IsNull(v) ? cJSON_PrintUnformatted(v) : NULL;
        sb_printf(&b, ", \"%s\": %s", keys[i], s ? s : dflt[i]);
        free(s);
    }
    sb_str(&b, ", \"truncation\": \"disabled\", \"previous_response_id\": null, \"reasoning\": "
               "{\"effort\": null, \"summary\": null}");
    sb_add(&b, "", 1);
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

int resp_translate(const char *body, size_t len, sbuf *out, char **echo, oai_error *e) {
    *echo = NULL;
    cJSON *in = oai_json_parse(body, len);
    if (!cJSON_IsObject(in)) {
        cJSON_Delete(in);
        return BAD(NULL, "the body must be a JSON object");
    }
    cJSON *chat = cJSON_CreateObject();
    int rc = -1;
    if (!chat) {
        oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    const cJSON *x, *input = NULL, *instr = NULL;
    cJSON_ArrayForEach(x, in) {
        const char *k = x->string;
        bool chat_field = false;
        for (size_t i = 0; i < sizeof(chat_only) / sizeof(chat_only[0]); i++)
            chat_field |= !strcmp(k, chat_only[i]);
        if (chat_field) {
            oai_seterr(e, 400, "invalid_request_error", NULL, "unknown_parameter",
                       "unknown field '%.64s' (a /v1/chat/completions field; see input, "
                       "max_output_tokens, text.format)", k);
            refuse(k, e);
            goto done;
        }
        if (!strcmp(k, "input")) input = x;
        else if (!strcmp(k, "instructions")) instr = x;
        else if (!strcmp(k, "max_output_tokens")) {
            if (!cJSON_IsNull(x)) cJSON_AddItemToObject(chat, "max_tokens", cJSON_Duplicate(x, false));
        } else if (!strcmp(k, "tools")) {
            if (translate_tools(x, chat, e)) goto done;
        } else if (!strcmp(k, "tool_choice")) {
            if (!cJSON_IsNull(x) && translate_tool_choice(x, chat, e)) goto done;
        } else if (!strcmp(k, "text")) {
            if (!cJSON_IsNull(x) && translate_text(x, chat, e)) goto done;
        } else if (is_responses_only(k)) {
            if (responses_only(x, e)) goto done;
        } else {
            cJSON_AddItemToObject(chat, k, cJSON_Duplicate(x, true)); /* the chat table checks it */
        }
    }
    if (!input) {
        BAD("input", "'input' is required");
        goto done;
    }
    if (translate_input(input, instr, chat, e)) goto done;
    char *text = cJSON_PrintUnformatted(chat);
    *echo = echo_of(in);
    if (!text || !*echo || !sb_str(out, text)) {
        free(text), free(*echo);
        *echo = NULL;
        oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    free(text);
    rc = 0;
done:
    cJSON_Delete(in);
    cJSON_Delete(chat);
    return rc;
}

void resp_error_param(oai_error *e) {
    static const char *const map[][2] = {{"messages", "input"},
                                         {"max_tokens", "max_output_tokens"},
                                         {"response_format", "text.format"}};
    for (size_t i = 0; e->param && i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(e->param, map[i][0])) e->param = map[i][1];
}

/* ---- the answer ----------------------------------------------------------- */

/* ids of the output items: msg_X, fc_X_i and call_X_i for the response resp_X */
static const char *suffix_of(const char *rid) { return rid + (strncmp(rid, "resp_", 5) ? 0 : 5); }

static void message_item(sbuf *b, const char *rid, const char *status, const char *text, size_t n) {
    sb_printf(b, "{\"type\": \"message\", \"id\": \"msg_%s\", \"status\": \"%s\", \"role\": \"assistant\", "
                 "\"content\": [", suffix_of(rid), status);
    if (text) {
        sb_str(b, "{\"type\": \"output_text\", \"text\": ");
        sb_json_str(b, text, n);
        sb_str(b, ", \"annotations\": [], \"logprobs\": []}");
    }
    sb_str(b, "]}");
}

static void call_item(sbuf *b, const char *rid, int i, const char *status, const char *name,
                      const char *args, size_t n) {
    sb_printf(b, "{\"type\": \"function_call\", \"id\": \"fc_%s_%d\", \"call_id\": \"call_%s_%d\", "
                 "\"status\": \"%s\", \"name\": ", suffix_of(rid), i, suffix_of(rid), i, status);
    sb_json_str(b, name, strlen(name));
    sb_str(b, ", \"arguments\": ");
    sb_json_str(b, args, n);
    sb_str(b, "}");
}

/* The reasoning of a template that thinks (<think>...</think>) as its own
 * item, before the answer's. */
static void reasoning_item(sbuf *b, const char *rid, const char *status, const char *text, size_t n) {
    sb_printf(b, "{\"type\": \"reasoning\", \"id\": \"rs_%s\", \"status\": \"%s\", \"summary\": [], "
                 "\"content\": [", suffix_of(rid), status);
    if (text) {
        sb_str(b, "{\"type\": \"reasoning_text\", \"text\": ");
        sb_json_str(b, text, n);
        sb_str(b, "}");
    }
    sb_str(b, "]}");
}

static void usage(sbuf *b, const sp_request_stats *st) {
    sb_printf(b, "{\"input_tokens\": %d, \"input_tokens_details\": {\"cached_tokens\": %d}, "
                 "\"output_tokens\": %d, \"output_tokens_details\": {\"reasoning_tokens\": 0}, "
                 "\"total_tokens\": %d}",
              st->prompt_tokens, st->cached_tokens, st->completion_tokens,
              st->prompt_tokens + st->completion_tokens);
}

static const char *status_of(const sp_request_stats *st) {
    return st->finish == SP_FINISH_STOP ? "completed" : st->finish == SP_FINISH_ERROR ? "failed"
                                                                                      : "incomplete";
}

/* The response object; final: with its output and usage, else as it
 * starts (in_progress, no output). err: a failed one's error, or NULL. */
static void response_object(sbuf *b, const oai_reply *o, const char *echo, bool final, const oai_error *err) {
    sb_str(b, "{\"id\": ");
    sb_json_str(b, o->id, strlen(o->id));
    sb_printf(b, ", \"object\": \"response\", \"created_at\": %ld, \"status\": \"%s\", \"model\": ", o->created,
              final ? status_of(o->st) : "in_progress");
    sb_json_str(b, o->model, strlen(o->model));
    sb_str(b, ", \"error\": ");
    if (final && err) {
        sb_printf(b, "{\"code\": \"%s\", \"message\": ", err->code ? err->code : "server_error");
        sb_json_str(b, err->message, strlen(err->message));
        sb_str(b, "}");
    } else {
        sb_str(b, "null");
    }
    sb_printf(b, ", \"incomplete_details\": %s", final && o->st->finish != SP_FINISH_STOP && !err
                                                     ? "{\"reason\": \"max_output_tokens\"}" : "null");
    sb_str(b, ", \"output\": [");
    if (final && !err) {
        const char *item = o->st->finish == SP_FINISH_STOP ? "completed" : "incomplete";
        oai_found f;
        int k = 0;
        if (o->reasoning) reasoning_item(b, o->id, "completed", o->reasoning, o->reasoning_len), k++;
        if (oai_find_calls(o, &f)) {
            if (f.content.len) {
                if (k) sb_str(b, ", ");
                message_item(b, o->id, item, f.content.p, f.content.len), k++;
            }
            for (int i = 0; i < f.n; i++, k++) {
                if (k) sb_str(b, ", ");
                call_item(b, o->id, i, i < f.done ? "completed" : "incomplete", f.call[i].name, f.raw.p ? f.raw.p + f.call[i].off : "",
                          f.call[i].len);
            }
        } else {
            if (k) sb_str(b, ", ");
            message_item(b, o->id, item, o->text ? o->text : "", o->text_len);
        }
        oai_found_free(&f);
    }
    sb_str(b, "]");
    sb_str(b, echo ? echo : "");
    sb_str(b, ", \"usage\": ");
    if (final) usage(b, o->st);
    else sb_str(b, "null");
    if (final) {
        sb_str(b, ", \"specula\": ");
        oai_json_ext(b, o->st);
    }
    sb_str(b, "}");
}

void resp_reply_full(sbuf *b, const oai_reply *o, const char *echo) {
    response_object(b, o, echo, true, NULL);
}

/* ---- the stream ----------------------------------------------------------- */

/* "event: type\ndata: {"type": type, "sequence_number": n, " (the caller
 * writes the rest and ends it with end_event) */
static void begin_event(sreq *r, const char *type) {
    sb_printf(&r->out, "event: %s\ndata: {\"type\": \"%s\", \"sequence_number\": %d", type, type, r->resp.seq++);
}
static void end_event(sreq *r) { sb_str(&r->out, "}\n\n"); }

static void open_message(sreq *r) {
    if (r->resp.msg_open) return;
    r->resp.msg_open = r->resp.answered = true;
    r->resp.msg_index = r->resp.items++;
    begin_event(r, "response.output_item.added");
    sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", r->resp.msg_index);
    message_item(&r->out, r->rid, "in_progress", NULL, 0);
    end_event(r);
    begin_event(r, "response.content_part.added");
    sb_printf(&r->out, ", \"item_id\": \"msg_%s\", \"output_index\": %d, \"content_index\": 0, \"part\": "
                       "{\"type\": \"output_text\", \"text\": \"\", \"annotations\": []}",
              suffix_of(r->rid), r->resp.msg_index);
    end_event(r);
}

static void text_delta(sreq *r, const char *s, size_t n) {
    open_message(r);
    sb_add(&r->resp.msg, s, n);
    begin_event(r, "response.output_text.delta");
    sb_printf(&r->out, ", \"item_id\": \"msg_%s\", \"output_index\": %d, \"content_index\": 0, \"delta\": ",
              suffix_of(r->rid), r->resp.msg_index);
    sb_json_str(&r->out, s, n);
    sb_str(&r->out, ", \"logprobs\": []");
    end_event(r);
}

static void close_message(sreq *r) {
    if (!r->resp.msg_open) return;
    r->resp.msg_open = false;
    const char *t = r->resp.msg.p ? r->resp.msg.p : "";
    const char *sfx = suffix_of(r->rid);
    begin_event(r, "response.output_text.done");
    sb_printf(&r->out, ", \"item_id\": \"msg_%s\", \"output_index\": %d, \"content_index\": 0, \"text\": ", sfx,
              r->resp.msg_index);
    sb_json_str(&r->out, t, r->resp.msg.len);
    sb_str(&r->out, ", \"logprobs\": []");
    end_event(r);
    begin_event(r, "response.content_part.done");
    sb_printf(&r->out, ", \"item_id\": \"msg_%s\", \"output_index\": %d, \"content_index\": 0, \"part\": "
                       "{\"type\": \"output_text\", \"text\": ", sfx, r->resp.msg_index);
    sb_json_str(&r->out, t, r->resp.msg.len);
    sb_str(&r->out, ", \"annotations\": []}");
    end_event(r);
    begin_event(r, "response.output_item.done");
    sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", r->resp.msg_index);
    message_item(&r->out, r->rid, "completed", t, r->resp.msg.len);
    end_event(r);
}

static void close_call(sreq *r) {
    if (r->resp.call < 0) return;
    const int i = r->resp.call, at = r->resp.call_index;
    const char *a = r->resp.args.p ? r->resp.args.p : "";
    r->resp.call = -1;
    begin_event(r, "response.function_call_arguments.done");
    sb_printf(&r->out, ", \"item_id\": \"fc_%s_%d\", \"output_index\": %d, \"arguments\": ", suffix_of(r->rid),
              i, at);
    sb_json_str(&r->out, a, r->resp.args.len);
    end_event(r);
    begin_event(r, "response.output_item.done");
    sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", at);
    call_item(&r->out, r->rid, i, "completed", r->resp.name, a, r->resp.args.len);
    end_event(r);
    r->resp.args.len = 0;
}

static void stream_event(void *user, int kind, int index, const char *s, size_t n) {
    sreq *r = user;
    if (kind == OAI_CALL_CONTENT) {
        text_delta(r, s, n);
    } else if (kind == OAI_CALL_START) {
        close_message(r);
        close_call(r);
        r->resp.answered = true;
        r->resp.call = index;
        r->resp.call_index = r->resp.items++;
        snprintf(r->resp.name, sizeof(r->resp.name), "%.*s", (int)n, s);
        begin_event(r, "response.output_item.added");
        sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", r->resp.call_index);
        call_item(&r->out, r->rid, index, "in_progress", r->resp.name, "", 0);
        end_event(r);
    } else if (index == r->resp.call) {
        sb_add(&r->resp.args, s, n);
        begin_event(r, "response.function_call_arguments.delta");
        sb_printf(&r->out, ", \"item_id\": \"fc_%s_%d\", \"output_index\": %d, \"delta\": ", suffix_of(r->rid),
                  index, r->resp.call_index);
        sb_json_str(&r->out, s, n);
        end_event(r);
    }
}

/* A stream's reasoning (a template that thinks): its item opened on the
 * first text, a delta per piece, closed where the answer begins. */
static void reasoning_delta(sreq *r, const char *s, size_t n) {
    const char *sfx = suffix_of(r->rid);
    if (!r->resp.reason_open) {
        r->resp.reason_open = true;
        r->resp.reason_index = r->resp.items++;
        begin_event(r, "response.output_item.added");
        sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", r->resp.reason_index);
        reasoning_item(&r->out, r->rid, "in_progress", NULL, 0);
        end_event(r);
    }
    if (!n) return;
    sb_add(&r->resp.msg, s, n);
    begin_event(r, "response.reasoning_text.delta");
    sb_printf(&r->out, ", \"item_id\": \"rs_%s\", \"output_index\": %d, \"content_index\": 0, \"delta\": ", sfx,
              r->resp.reason_index);
    sb_json_str(&r->out, s, n);
    end_event(r);
}

static void close_reasoning(sreq *r) {
    if (!r->resp.reason_open) return;
    r->resp.reason_open = false;
    const char *t = r->resp.msg.p ? r->resp.msg.p : "";
    begin_event(r, "response.reasoning_text.done");
    sb_printf(&r->out, ", \"item_id\": \"rs_%s\", \"output_index\": %d, \"content_index\": 0, \"text\": ",
              suffix_of(r->rid), r->resp.reason_index);
    sb_json_str(&r->out, t, r->resp.msg.len);
    end_event(r);
    begin_event(r, "response.output_item.done");
    sb_printf(&r->out, ", \"output_index\": %d, \"item\": ", r->resp.reason_index);
    reasoning_item(&r->out, r->rid, "completed", t, r->resp.msg.len);
    end_event(r);
    r->resp.msg.len = 0; /* the buffer holds the answer's text from here */
}

void resp_stream_build(sreq *r, const oai_reply *o, const oai_error *err) {
    if (!r->resp.started) {
        r->resp.started = true;
        r->resp.call = -1;
        begin_event(r, "response.created");
        sb_str(&r->out, ", \"response\": ");
        response_object(&r->out, o, r->resp_echo, false, NULL);
        end_event(r);
        begin_event(r, "response.in_progress");
        sb_str(&r->out, ", \"response\": ");
        response_object(&r->out, o, r->resp_echo, false, NULL);
        end_event(r);
    }
    size_t base = 0; /* where the answer starts (after the reasoning) */
    if (r->thinks) {
        oai_think th;
        oai_think_split(r->text.p ? r->text.p : "", r->text.len, r->think_open, r->finished, &th);
        const size_t from = SP_MAX(r->sent_reason, th.r_off), to = th.r_off + th.r_len;
        if (th.any) reasoning_delta(r, r->text.p + from, to > from ? to - from : 0);
        r->sent_reason = SP_MAX(r->sent_reason, to);
        if (th.c_off == SIZE_MAX && !r->finished) return;
        close_reasoning(r);
        base = th.c_off == SIZE_MAX ? r->text.len : th.c_off;
        r->sent_text = SP_MAX(r->sent_text, base);
    }
    if (r->tools) {
        oai_calls_feed(&r->calls, r->text.p + base, r->text.len - base, r->finished, stream_event, r);
    } else if (r->text.len > r->sent_text) {
        text_delta(r, r->text.p + r->sent_text, r->text.len - r->sent_text);
    }
    r->sent_text = r->text.len;
    r->sent_tok = r->n_tok;
    if (!r->finished) return;
    if (err) {
        begin_event(r, "error");
        sb_printf(&r->out, ", \"code\": \"%s\", \"message\": ", err->code ? err->code : "server_error");
        sb_json_str(&r->out, err->message, strlen(err->message));
        sb_str(&r->out, ", \"param\": ");
        if (err->param) sb_json_str(&r->out, err->param, strlen(err->param));
        else sb_str(&r->out, "null");
        end_event(r);
        begin_event(r, "response.failed");
        sb_str(&r->out, ", \"response\": ");
        response_object(&r->out, o, r->resp_echo, true, err);
        end_event(r);
    } else {
        if (!r->resp.answered) open_message(r); /* an empty answer is still a message */
        close_message(r);
        close_call(r);
        const bool done = r->st.finish == SP_FINISH_STOP;
        begin_event(r, done ? "response.completed" : "response.incomplete");
        sb_str(&r->out, ", \"response\": ");
        response_object(&r->out, o, r->resp_echo, true, NULL);
        end_event(r);
    }
    r->sent_done = true;
}

void resp_free(sreq *r) {
    free(r->resp_echo);
    sb_free(&r->resp.msg);
    sb_free(&r->resp.args);
}
