/* template.c: a chat template ready to render: Jinja text (a model's own
 * tokenizer.chat_template, a file, or a built-in family's) compiled once by
 * the sandboxed interpreter (src/template), the family its markup belongs
 * to (for the tool-call format, the end of turn and the markup tokens),
 * and the BOS/EOS texts. Rendering builds the template's variables from a
 * conversation as Hugging Face's apply_chat_template receives them
 * (messages, tools, add_generation_prompt, bos_token, eos_token, and any
 * chat_template_kwargs), and returns with the text the spans of it that
 * the template wrote: everything else came from the request. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat/chat.h"
#include "common.h"
#include "sbuf.h"
#include "template/jinja.h"

/* A template file larger than this is refused before it is read. */
#define MAX_TEMPLATE_BYTES (1 << 20)

struct sp_chat_template {
    chat_tmpl family;      /* the markup's family; CHAT_NONE: none Specula knows */
    char *name;            /* a family's name, "model", or the file's path */
    char *source;          /* the Jinja text */
    jinja_tmpl *jt;        /* ... compiled */
    char *bos, *eos;       /* bos_token, eos_token */
    bool thinks;           /* the template writes <think> blocks */
};

chat_template *chat_template_new(const char *source, size_t len, const char *name, int family,
                                 const char *bos, const char *eos, char *err, size_t errlen) {
    chat_template *t = calloc(1, sizeof(*t));
    if (!t) goto nomem;
    t->source = malloc(len + 1);
    t->name = strdup(name ? name : "");
    t->bos = strdup(bos ? bos : "");
    t->eos = strdup(eos ? eos : "");
    if (!t->source || !t->name || !t->bos || !t->eos) goto nomem;
    memcpy(t->source, source, len);
    t->source[len] = 0;
    t->family = family >= 0 ? (chat_tmpl)family : chat_tmpl_detect(t->source);
    t->thinks = strstr(t->source, "<think>") != NULL;
    char why[256];
    if (!(t->jt = jinja_parse(source, len, why, sizeof(why)))) {
        seterr(err, errlen, "chat template %s: %s", t->name, why);
        chat_template_free(t);
        return NULL;
    }
    return t;
nomem:
    seterr(err, errlen, "out of memory");
    chat_template_free(t);
    return NULL;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jinja_free(t->jt);
    free(t->name);
    free(t->source);
    free(t->bos);
    free(t->eos);
    free(t);
}

chat_tmpl chat_template_family(const chat_template *t) { return t ? t->family : CHAT_NONE; }
const char *chat_template_name(const chat_template *t) { return t ? t->name : "none"; }
const char *chat_template_source(const chat_template *t) { return t ? t->source : NULL; }
bool chat_template_thinks(const chat_template *t) { return t && t->thinks; }

/* A file's whole text (at most MAX_TEMPLATE_BYTES), or NULL + err. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: %s", path, f ? "not a regular file" : strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (st.st_size > MAX_TEMPLATE_BYTES) {
        fclose(f);
        seterr(err, errlen, "%s: larger than %d bytes", path, MAX_TEMPLATE_BYTES);
        return NULL;
    }
    char *s = malloc((size_t)st.st_size + 1);
    *len = s ? fread(s, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!s) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    s[*len] = 0;
    return s;
}

chat_template *chat_template_choose(const char *model_source, const char *name, const char *bos,
                                    const char *eos, char *err, size_t errlen) {
    if (name) {
        const int fam = chat_tmpl_parse(name);
        if (fam > 0) {
            const char *src = chat_builtin_source((chat_tmpl)fam);
            return chat_template_new(src, strlen(src), chat_tmpl_name((chat_tmpl)fam), fam, bos, eos,
                                     err, errlen);
        }
        if (!strchr(name, '/') && !strchr(name, '.')) {
            seterr(err, errlen, "'%s' is neither a template (chatml, qwen, llama3, llama2, mistral, "
                   "phi3, gemma) nor a file (a path with '/' or '.')", name);
            return NULL;
        }
        size_t len;
        char *src = read_file(name, &len, err, errlen);
        if (!src) return NULL;
        chat_template *t = chat_template_new(src, len, name, -1, bos, eos, err, errlen);
        free(src);
        return t;
    }
    if (!model_source || !*model_source) {
        seterr(err, errlen, "the model has no chat template");
        return NULL;
    }
    return chat_template_new(model_source, strlen(model_source), "model", -1, bos, eos, err, errlen);
}

/* ---- rendering ---- */

/* A call's arguments as the templates take them: the object the JSON text
 * spells (HF templates write it with tojson), or the text itself when it
 * is not a JSON object. */
static cJSON *arguments(const char *text) {
    cJSON *a = text ? cJSON_Parse(text) : NULL;
    if (cJSON_IsObject(a) && !jinja_json_keep_numbers(a, text, strlen(text))) return a;
    cJSON_Delete(a);
    return cJSON_CreateString(text ? text : "");
}

static cJSON *message_json(const chat_msg *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "role", m->role);
    const char *c = m->content ? m->content : "";
    if (m->n_calls && !*c) cJSON_AddNullToObject(o, "content");
    else cJSON_AddStringToObject(o, "content", c);
    if (m->reasoning) cJSON_AddStringToObject(o, "reasoning_content", m->reasoning);
    if (m->n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
        for (int k = 0; calls && k < m->n_calls; k++) {
            const chat_call *cc = &m->calls[k];
            cJSON *x = cJSON_CreateObject(), *f = cJSON_CreateObject();
            if (!x || !f) {
                cJSON_Delete(x), cJSON_Delete(f);
                cJSON_Delete(o);
                return NULL;
            }
            if (cc->id) cJSON_AddStringToObject(x, "id", cc->id);
            cJSON_AddStringToObject(x, "type", "function");
            cJSON_AddStringToObject(f, "name", cc->name ? cc->name : "");
            cJSON_AddItemToObject(f, "arguments", arguments(cc->arguments));
            cJSON_AddItemToObject(x, "function", f);
            cJSON_AddItemToArray(calls, x);
        }
    }
    if (m->call_id) cJSON_AddStringToObject(o, "tool_call_id", m->call_id);
    return o;
}

/* The spans of mask[0, n) that are 0 (the template's own text), merged. */
static int markup_spans(const unsigned char *mask, size_t n, chat_span **out, int *n_out) {
    int cap = 16, k = 0;
    chat_span *sp = malloc((size_t)cap * sizeof(*sp));
    if (!sp) return -1;
    for (size_t i = 0; i < n;) {
        if (mask[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !mask[j]) j++;
        if (k == cap) {
            chat_span *np = realloc(sp, (size_t)(cap *= 2) * sizeof(*sp));
            if (!np) {
                free(sp);
                return -1;
            }
            sp = np;
        }
        sp[k++] = (chat_span){i, j - i};
        i = j;
    }
    *out = sp;
    *n_out = k;
    return 0;
}

char *chat_template_render(const chat_template *t, const chat_msg *m, int n, const chat_render_opts *o,
                           chat_span **spans, int *n_spans, char *err, size_t errlen) {
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (!t) {
        seterr(err, errlen, "no chat template");
        return NULL;
    }
    static const char *const markup_keys[] = {"bos_token", "eos_token", NULL};
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    char *out = NULL;
    unsigned char *mask = NULL;
    size_t len = 0;
    bool oom = !ctx || !msgs;
    for (int i = 0; !oom && i < n; i++) {
        cJSON *x = message_json(&m[i]);
        oom = !x || !cJSON_AddItemToArray(msgs, x);
    }
    if (!oom) {
        /* the request's variables first, so that these win */
        const cJSON *kw = o ? o->kwargs : NULL, *x;
        cJSON_ArrayForEach(x, kw) if (!cJSON_GetObjectItemCaseSensitive(ctx, x->string))
            cJSON_AddItemToObject(ctx, x->string, cJSON_Duplicate(x, true));
        const cJSON *tools = o && o->tools && cJSON_GetArraySize(o->tools) ? o->tools : NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "tools");
        cJSON_AddItemToObject(ctx, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateNull());
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
        cJSON_AddBoolToObject(ctx, "add_generation_prompt", !o || !o->no_generation_prompt);
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "bos_token");
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "eos_token");
        oom = !cJSON_AddStringToObject(ctx, "bos_token", t->bos) ||
              !cJSON_AddStringToObject(ctx, "eos_token", t->eos);
    }
    if (oom) {
        cJSON_Delete(ctx);
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    const jinja_limits lim = {.now = o ? o->now : 0};
    char why[512];
    const int rc = jinja_render(t->jt, ctx, markup_keys, &lim, &out, &len, spans ? &mask : NULL, why,
                                sizeof(why));
    cJSON_Delete(ctx);
    if (rc) {
        seterr(err, errlen, "chat template %s: %s", t->name, why);
        return NULL;
    }
    if (spans && markup_spans(mask, len, spans, n_spans)) {
        free(out), free(mask);
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    free(mask);
    if (o && o->think_open) { /* the last <think> is not closed after it */
        const char *a = NULL, *b = NULL;
        for (const char *p = out; (p = strstr(p, "<think>")); p++) a = p;
        for (const char *p = out; (p = strstr(p, "</think>")); p++) b = p;
        *o->think_open = t->thinks && a && (!b || b < a);
    }
    return out;
}
