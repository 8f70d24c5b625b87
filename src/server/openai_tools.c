/* openai_tools.c: OpenAI function tools on /v1/chat/completions.
 *
 * The tools' definitions go into the prompt as a system message (appended
 * to the conversation's first system message when there is one), with the
 * instruction to answer a call as {"name": ..., "arguments": {...}}.
 * tool_choice "required" or a named function constrains the output to such
 * a call, its arguments to the function's parameters schema: the grammar
 * is the JSON Schema anyOf over the allowed functions, compiled like
 * response_format's (src/grammar/schema.c). The reply then carries
 * tool_calls and finish_reason "tool_calls" (oai_tool_call_parse).
 * "auto" and "none" leave the output free (text). A "tool" message is
 * rendered as a user turn holding <tool_response>...</tool_response>, an
 * assistant message's tool_calls as the JSON of each call: the templates
 * Specula renders have no tool roles of their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The schema of a call to tool f: {"name": const, "arguments": params}. The
 * parameters' $defs are hoisted to the top (their $refs point there). */
static cJSON *call_schema(const cJSON *f, cJSON *defs) {
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
    if (!cJSON_GetObjectItemCaseSensitive(args, "type") && !cJSON_GetObjectItemCaseSensitive(args, "properties"))
        cJSON_AddStringToObject(args, "type", "object");
    cJSON_AddItemToObject(nm, "const", cJSON_Duplicate(n, false));
    cJSON_AddItemToObject(props, "name", nm);
    cJSON_AddItemToObject(props, "arguments", args);
    cJSON_AddStringToObject(s, "type", "object");
    cJSON_AddItemToObject(s, "properties", props);
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    cJSON_AddItemToObject(s, "required", req);
    cJSON_AddFalseToObject(s, "additionalProperties");
    return s;
oom:
    cJSON_Delete(s), cJSON_Delete(props), cJSON_Delete(nm), cJSON_Delete(args), cJSON_Delete(req);
    return NULL;
}

int oai_tools_grammar(const cJSON *tools, const char *only, char **gbnf, oai_error *e) {
    *gbnf = NULL;
    cJSON *root = cJSON_CreateObject(), *any = cJSON_CreateArray(), *defs = cJSON_CreateObject();
    if (!root || !any || !defs) {
        cJSON_Delete(root), cJSON_Delete(any), cJSON_Delete(defs);
        return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    }
    const cJSON *t;
    int n = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (only && strcmp(nm->valuestring, only)) continue;
        cJSON *cs = call_schema(f, defs);
        if (cs) cJSON_AddItemToArray(any, cs), n++;
    }
    cJSON_AddItemToObject(root, "anyOf", any);
    cJSON_AddItemToObject(root, "$defs", defs);
    if (!n) {
        cJSON_Delete(root);
        return BAD("tool_choice", only ? "tool_choice names '%.64s', which is not in tools"
                                       : "tool_choice needs tools%s", only ? only : "");
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    char err[300];
    *gbnf = sp_json_schema_to_gbnf(text, 0, err, sizeof(err));
    free(text);
    if (!*gbnf)
        return oai_seterr(e, 400, "invalid_request_error", "tools",
                          strstr(err, "unsupported") ? "unsupported_parameter" : "invalid_value",
                          "tools: a function's parameters: %s", err);
    return 0;
}

char *oai_tools_system_text(const cJSON *tools, const char *system) {
    sbuf b = {0};
    if (system && system[0]) {
        sb_str(&b, system);
        sb_str(&b, "\n\n");
    }
    sb_str(&b, "# Tools\n\nYou may call one of these functions. To call one, answer with only a JSON "
               "object {\"name\": <the function's name>, \"arguments\": <its arguments>}.\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *f = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "function"));
        if (f) {
            sb_str(&b, "\n");
            sb_str(&b, f);
            free(f);
        }
    }
    sb_add(&b, "", 0);
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

char *oai_tool_msg_text(const cJSON *m, bool tool_role) {
    sbuf b = {0};
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (tool_role) {
        sb_str(&b, "<tool_response>\n");
        if (cJSON_IsString(c)) sb_str(&b, c->valuestring);
        sb_str(&b, "\n</tool_response>");
    } else { /* an assistant's tool_calls: the calls as it would have written them */
        if (cJSON_IsString(c) && c->valuestring[0]) {
            sb_str(&b, c->valuestring);
            sb_str(&b, "\n");
        }
        const cJSON *call;
        int i = 0;
        cJSON_ArrayForEach(call, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
            if (!cJSON_IsString(n)) continue;
            sb_str(&b, i++ ? "\n{\"name\": " : "{\"name\": ");
            sb_json_str(&b, n->valuestring, strlen(n->valuestring));
            sb_str(&b, ", \"arguments\": ");
            sb_str(&b, cJSON_IsString(a) && a->valuestring[0] ? a->valuestring : "{}");
            sb_str(&b, "}");
        }
    }
    sb_add(&b, "", 0);
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

bool oai_tool_call_parse(const char *text, size_t len, char *name, size_t name_cap, char **args) {
    *args = NULL;
    cJSON *d = cJSON_ParseWithLength(text, len);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(d, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(d, "arguments");
    bool ok = cJSON_IsObject(d) && cJSON_IsString(n) && a;
    if (ok) {
        snprintf(name, name_cap, "%s", n->valuestring);
        *args = cJSON_PrintUnformatted(a);
        ok = *args != NULL;
    }
    cJSON_Delete(d);
    return ok;
}
