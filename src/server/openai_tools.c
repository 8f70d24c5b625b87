/* openai_tools.c: OpenAI function tools on /v1/chat/completions.
 *
 * The tools' definitions, an assistant's earlier tool_calls and the
 * "tool" messages are given to the chat template (src/chat), which writes
 * them in its own markup. Each family writes calls its
 * own way (oai_tool_format): Qwen 2.5 / Hermes (chatml) as
 * <tool_call>\n{"name", "arguments"}\n</tool_call>, Llama 3.1 as
 * {"name", "parameters"} at the start of its answer, Mistral v0.3 as
 * [TOOL_CALLS] [{"name", "arguments"}, ...], the other families as
 * {"name", "arguments"} at the start. The grammar of the calls is that
 * markup around the JSON Schema anyOf over the allowed functions
 * ({"name": const, "arguments": the function's parameters}), compiled as
 * response_format's (src/grammar/schema.c):
 *   tool_choice required, or a named function: the whole output;
 *   auto: a lazy grammar (as llama.cpp's): the output is free until the
 *     family's trigger ("<tool_call>", "[TOOL_CALLS]", or {"name" at the
 *     start), and a valid call from there on (the engine's
 *     sp_request_params.grammar_trigger);
 *   auto under response_format (or grammar): either a call from the
 *     output's start, or an answer that meets the format (both grammars
 *     as one, src/grammar/either.c);
 *   none: no tools are offered.
 * The reply reads the calls back (oai_calls_feed): the text before the
 * trigger is content, each call becomes tool_calls[i] with finish_reason
 * "tool_calls", and a stream sends each call piecewise, as OpenAI does:
 * its name first, then its arguments as they are generated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar/grammar.h"
#include "server/openai.h"

#define BAD(param, ...) oai_seterr(e, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

int oai_tools_check(const cJSON *tools, oai_error *e) {
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") ||
            !cJSON_IsObject(f))
            return BAD("tools", "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        if (!cJSON_IsString(n) || !name_ok(n->valuestring))
            return BAD("tools", "tools[%d].function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i);
        if (p && !cJSON_IsObject(p) && !cJSON_IsNull(p))
            return BAD("tools", "tools[%d].function.parameters must be a JSON Schema object", i);
        i++;
    }
    return 0;
}

/* ---- the families' formats ---- */

const oai_tool_fmt *oai_tool_format(chat_tmpl t) {
    static const oai_tool_fmt chatml = {"<tool_call>", false, "arguments", "", "\"<tool_call>\\n\"",
                                        "\"\\n</tool_call>\"", "\"\\n\"", ""};
    static const oai_tool_fmt llama3 = {"{\"name\"", true, "parameters", "", "", "", NULL, ""};
    static const oai_tool_fmt mistral = {"[TOOL_CALLS]", false, "arguments",
                                         "\"[TOOL_CALLS]\" \" \"? \"[\"", "", "", "\",\" \" \"?",
                                         "\"]\""};
    static const oai_tool_fmt other = {"{\"name\"", true, "arguments", "", "", "", NULL, ""};
    return t == CHAT_CHATML ? &chatml : t == CHAT_LLAMA3 ? &llama3 : t == CHAT_MISTRAL ? &mistral : &other;
}

/* ---- the grammar of the calls ---- */

/* Whether a tool's parameters say "no arguments" as OpenAI reads them: none
 * given, or an object schema with no properties that says nothing else of
 * its keys or shape. Compiled as is, that would be a map of any keys, and
 * the model would write arguments the function never takes. */
static bool no_arguments(const cJSON *args) {
    static const char *const shape[] = {"additionalProperties", "patternProperties", "anyOf",
                                        "oneOf", "allOf", "$ref", "enum", "const", "items"};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(args, "type");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(args, "properties");
    if ((t && !(cJSON_IsString(t) && !strcmp(t->valuestring, "object"))) || (p && p->child))
        return false;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(args, shape[i])) return false;
    return true;
}

/* The schema of a call to tool f: {"name": const, args_key: params}. The
 * parameters' $defs are hoisted to the top (their $refs point there). */
static cJSON *call_schema(const cJSON *f, cJSON *defs, const char *args_key) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    cJSON *s = cJSON_CreateObject(), *props = cJSON_CreateObject(), *nm = cJSON_CreateObject();
    cJSON *args = p && cJSON_IsObject(p) ? cJSON_Duplicate(p, true) : cJSON_CreateObject();
    cJSON *req = cJSON_CreateArray();
    if (!s || !props || !nm || !args || !req) goto oom;
    for (const char *k = "$defs"; k; k = !strcmp(k, "$defs") ? "definitions" : NULL) {
        cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(args, k);
        cJSON *x = d ? d->child : NULL;
        while (x) {
            cJSON *next = x->next;
            cJSON_DetachItemViaPointer(d, x);
            cJSON_DeleteItemFromObjectCaseSensitive(defs, x->string); /* a later tool wins */
            cJSON_AddItemToObject(defs, x->string, x);
            x = next;
        }
        cJSON_Delete(d);
    }
    if (no_arguments(args)) /* the call's arguments are {} */
        cJSON_AddFalseToObject(args, "additionalProperties");
    if (!cJSON_GetObjectItemCaseSensitive(args, "type") && !cJSON_GetObjectItemCaseSensitive(args, "properties"))
        cJSON_AddStringToObject(args, "type", "object");
    cJSON_AddItemToObject(nm, "const", cJSON_Duplicate(n, false));
    cJSON_AddItemToObject(props, "name", nm);
    cJSON_AddItemToObject(props, args_key, args);
    cJSON_AddStringToObject(s, "type", "object");
    cJSON_AddItemToObject(s, "properties", props);
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
    cJSON_AddItemToObject(s, "required", req);
    cJSON_AddFalseToObject(s, "additionalProperties");
    return s;
oom:
    cJSON_Delete(s), cJSON_Delete(props), cJSON_Delete(nm), cJSON_Delete(args), cJSON_Delete(req);
    return NULL;
}

/* The JSON Schema of a call to one of tools (only: that one), as text. */
static char *calls_schema(const cJSON *tools, const char *only, const char *args_key, int *n) {
    cJSON *root = cJSON_CreateObject(), *any = cJSON_CreateArray(), *defs = cJSON_CreateObject();
    *n = 0;
    if (!root || !any || !defs) {
        cJSON_Delete(root), cJSON_Delete(any), cJSON_Delete(defs);
        return NULL;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (only && strcmp(nm->valuestring, only)) continue;
        cJSON *cs = call_schema(f, defs, args_key);
        if (cs) cJSON_AddItemToArray(any, cs), (*n)++;
    }
    cJSON_AddItemToObject(root, "anyOf", any);
    cJSON_AddItemToObject(root, "$defs", defs);
    char *text = *n ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* The GBNF of the calls in format f: its markup around a call (the schema's
 * rules, its root renamed "call"), repeated when parallel and f allows. */
static int calls_grammar(const cJSON *tools, const char *only, const oai_tool_fmt *f, bool parallel,
                         char **gbnf, oai_error *e) {
    *gbnf = NULL;
    int n;
    char *text = calls_schema(tools, only, f->args_key, &n);
    if (!text && n) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    if (!n)
        return BAD("tool_choice", only ? "tool_choice names '%.64s', which is not in tools"
                                       : "tool_choice needs tools%s", only ? only : "");
    char err[300];
    char *call;
    const int rc = sp_json_schema_to_gbnf(text, 0, &call, err, sizeof(err));
    free(text);
    if (rc == SP_ERR_NOMEM) return oai_status_error(e, rc, NULL, "out of memory");
    if (rc)
        return oai_seterr(e, 400, "invalid_request_error", "tools",
                          rc == SP_ERR_UNSUPPORTED ? "unsupported_parameter" : "invalid_value",
                          "tools: a function's parameters: %s", err);
    static const char root[] = "root ::= ";
    sbuf b = {0};
    sb_printf(&b, "root ::= %s %s call %s", f->head, f->before, f->after);
    if (parallel && f->sep) sb_printf(&b, " (%s %s call %s)*", f->sep, f->before, f->after);
    const size_t skip = strncmp(call, root, sizeof(root) - 1) ? 0 : sizeof(root) - 1;
    sb_printf(&b, " %s\ncall ::= %s", f->tail, call + skip);
    free(call);
    if (b.oom) {
        sb_free(&b);
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    }
    *gbnf = b.p;
    return 0;
}

/* ---- the request: history, definitions, grammar ---- */

int oai_tools_history(const cJSON *calls, int msg, oai_req *r, chat_msg *m, oai_error *e) {
    m->calls = r->calls + r->n_calls;
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsObject(c) || !cJSON_IsString(n) || (id && !cJSON_IsString(id)) ||
            (a && !cJSON_IsString(a) && !cJSON_IsObject(a)))
            return BAD("messages", "messages[%d].tool_calls[%d] must be {\"id\": string, \"type\": "
                       "\"function\", \"function\": {\"name\": string, \"arguments\": string}}", msg, k);
        chat_call *cc = &r->calls[r->n_calls];
        cc->name = n->valuestring;
        cc->id = id ? id->valuestring : NULL;
        cc->arguments = cJSON_IsString(a) ? strdup(a->valuestring)
                        : a ? cJSON_PrintUnformatted(a) : strdup("{}");
        if (!cc->arguments) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        r->n_calls++, k++;
    }
    m->n_calls = k;
    return 0;
}

int oai_tools_apply(oai_req *r, chat_tmpl t, oai_error *e) {
    const cJSON *tc = r->tool_choice;
    const bool str = cJSON_IsString(tc);
    const char *named = tc && !str ? cJSON_GetObjectItemCaseSensitive(
                                         cJSON_GetObjectItemCaseSensitive(tc, "function"), "name")->valuestring
                                   : NULL;
    const bool required = named || (str && !strcmp(tc->valuestring, "required"));
    if (!r->tools) {
        if (required)
            return BAD("tool_choice", "'tool_choice' %s needs 'tools'", named ? "names a function and" : "required");
        return 0;
    }
    if (str && !strcmp(tc->valuestring, "none")) return 0; /* no tools offered */
    r->tools_offered = r->tools;
    if (required && r->grammar)
        return BAD("tool_choice", "a required tool call cannot be combined with 'grammar' or a "
                   "constraining 'response_format'");
    const oai_tool_fmt *f = oai_tool_format(t);
    if (r->grammar) { /* auto under a constraint: a call, or an answer that meets it */
        char *calls, *both;
        if (calls_grammar(r->tools, NULL, f, r->parallel_calls, &calls, e)) return -1;
        both = gr_gbnf_either(calls, r->grammar);
        free(calls);
        if (!both) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        free(r->grammar);
        r->grammar = both;
        r->tool_mode = OAI_TOOLS_EITHER;
        return 0;
    }
    if (calls_grammar(r->tools, named, f, r->parallel_calls, &r->grammar, e)) return -1;
    r->grammar_param = "tools";
    r->tool_mode = required ? OAI_TOOLS_REQUIRED : OAI_TOOLS_AUTO;
    if (!required) {
        r->grammar_trigger = f->trigger;
        r->grammar_at_start = f->at_start;
    }
    return 0;
}

/* ---- reading the calls back ---- */

enum { S_KEY, S_INKEY, S_COLON, S_VALUE, S_INNAME, S_INVAL };

static bool is_ws(char b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

void oai_calls_init(oai_calls *c, const oai_tool_fmt *f, int mode) {
    memset(c, 0, sizeof(*c));
    c->f = f;
    c->from = mode == OAI_TOOLS_REQUIRED ? 0 : SIZE_MAX;
    c->anchored = f->at_start || mode == OAI_TOOLS_EITHER;
}

/* Before the calls: where they begin (c->from, once seen), and the end of
 * what is surely content by now. */
static size_t find_calls(oai_calls *c, const char *text, size_t len, bool final) {
    const char *tr = c->f->trigger;
    const size_t tl = strlen(tr);
    if (c->no_calls) return len;
    if (c->anchored) {
        size_t ws = 0;
        while (ws < len && is_ws(text[ws])) ws++;
        const size_t m = SP_MIN(len - ws, tl);
        if (memcmp(text + ws, tr, m)) {
            c->no_calls = true;
            return len;
        }
        if (m == tl) c->from = ws;
        return m == tl || !final ? 0 : len;
    }
    const size_t s = c->pos >= tl ? c->pos - tl + 1 : 0;
    const char *p = s < len ? memmem(text + s, len - s, tr, tl) : NULL;
    if (p) {
        c->from = (size_t)(p - text);
        return c->from;
    }
    if (final) return len;
    size_t hold = 0; /* a suffix that may still become the trigger */
    for (size_t k = SP_MIN(tl - 1, len); k > 0 && !hold; k--)
        if (!memcmp(text + len - k, tr, k)) hold = k;
    return len - hold;
}

/* The end of a string at the call object's top level: a key, or the name. */
static void str_end(oai_calls *c, oai_calls_emit emit, void *user) {
    if (c->st == S_INKEY) {
        c->st = S_COLON;
    } else if (c->st == S_INNAME) {
        c->st = S_INVAL;
        emit(user, OAI_CALL_START, c->started++, c->name, (size_t)c->name_n);
    }
}

/* A byte outside strings inside a call object; *run: where this feed's
 * run of arguments began (SIZE_MAX: none). */
static void structure(oai_calls *c, const char *text, size_t i, size_t *run, oai_calls_emit emit,
                      void *user) {
    const char b = text[i];
    const bool top = c->depth == 1;
    if (b == '"') {
        c->in_str = true;
        const bool name = c->key_n == 4 && !memcmp(c->key, "name", 4);
        if (top && (c->st == S_KEY || c->st == S_VALUE))
            c->st = c->st == S_KEY ? S_INKEY : name && c->started == c->done ? S_INNAME : S_INVAL;
        if (c->st == S_INKEY) c->key_n = 0;
        if (c->st == S_INNAME) c->name_n = 0;
    } else if (b == '{' || b == '[') {
        const size_t ak = strlen(c->f->args_key);
        if (top && c->st == S_VALUE) {
            c->st = S_INVAL;
            c->in_args = c->started > c->done && (size_t)c->key_n == ak && !memcmp(c->key, c->f->args_key, ak);
            if (c->in_args) *run = i;
        }
        c->depth++;
    } else if (b == '}' || b == ']') {
        c->depth--;
        if (c->depth == 1 && c->in_args) {
            emit(user, OAI_CALL_ARGS, c->started - 1, text + *run, i + 1 - *run);
            c->in_args = false;
            *run = SIZE_MAX;
        }
        if (c->depth == 0 && c->started > c->done) c->done++;
    } else if (top && b == ':' && c->st == S_COLON) {
        c->st = S_VALUE;
    } else if (top && b == ',') {
        c->st = S_KEY;
    } else if (top && c->st == S_VALUE && !is_ws(b)) {
        c->st = S_INVAL;
    }
}

void oai_calls_feed(oai_calls *c, const char *text, size_t len, bool final, oai_calls_emit emit,
                    void *user) {
    if (c->from == SIZE_MAX) {
        size_t upto = find_calls(c, text, len, final);
        const bool calls = c->from != SIZE_MAX;
        if (!final || calls) /* white space before a call is not content */
            while (upto > c->sent && is_ws(text[upto - 1])) upto--;
        if (upto > c->sent) emit(user, OAI_CALL_CONTENT, 0, text + c->sent, upto - c->sent);
        c->sent = SP_MAX(c->sent, upto);
        c->pos = calls ? c->from : len;
        if (!calls) return;
    }
    size_t run = c->in_args ? SP_MAX(c->pos, c->from) : SIZE_MAX;
    for (size_t i = SP_MAX(c->pos, c->from); i < len; i++) {
        const char b = text[i];
        if (c->in_str) {
            if (c->esc) c->esc = false;
            else if (b == '\\') c->esc = true;
            else if (b == '"') c->in_str = false;
            if (!c->in_str) str_end(c, emit, user);
            else if (c->depth == 1 && c->st == S_INKEY && c->key_n < (int)sizeof(c->key))
                c->key[c->key_n++] = b;
            else if (c->depth == 1 && c->st == S_INNAME && c->name_n < (int)sizeof(c->name))
                c->name[c->name_n++] = b;
        } else if (c->depth == 0) {
            if (b == '{') c->depth = 1, c->st = S_KEY;
        } else {
            structure(c, text, i, &run, emit, user);
        }
    }
    if (c->in_args && run < len) emit(user, OAI_CALL_ARGS, c->started - 1, text + run, len - run);
    c->pos = len;
}
