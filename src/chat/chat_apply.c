/* chat_apply.c: a chat request rendered by the model's own Jinja chat
 * template (src/template), as Hugging Face's apply_chat_template renders
 * it: the request's keys become the template's variables, with the
 * defaults transformers gives them, and the special tokens' text from the
 * model. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "specula.h"
#include "template/jinja.h"

/* The text of token tok of m's vocabulary; "" without a model, a vocabulary
 * or the token. */
static const char *token_text(const sp_model *m, bool bos) {
    const sp_vocab *v = m ? sp_model_get_vocab(m) : NULL;
    if (!v) return "";
    sp_token t = bos ? sp_vocab_bos(v) : sp_vocab_eos(v);
    const char *s = t >= 0 ? sp_vocab_token_text(v, t) : NULL;
    return s ? s : "";
}

/* Adds key = item to obj when obj has no such key; frees item otherwise.
 * false when out of memory. */
static bool add_default(cJSON *obj, const char *key, cJSON *item) {
    if (!item) return false;
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
        cJSON_Delete(item);
        return true;
    }
    return cJSON_AddItemToObject(obj, key, item);
}

/* The request req (an object, owned) turned into the template's variables
 * in place: chat_template_kwargs's keys on top of the request's own,
 * add_generation_prompt true, tools and documents null, bos_token and
 * eos_token the model's text when absent. 0, or -1 + err. */
static int request_vars(cJSON *req, const sp_model *m, char *err, size_t errlen) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    if (!cJSON_IsArray(msgs)) {
        seterr(err, errlen, "the request has no \"messages\" array");
        return -1;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools)) {
        seterr(err, errlen, "the request's \"tools\" is neither an array nor null");
        return -1;
    }
    cJSON *kw = cJSON_DetachItemFromObjectCaseSensitive(req, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw) && !cJSON_IsNull(kw)) {
        cJSON_Delete(kw);
        seterr(err, errlen, "the request's \"chat_template_kwargs\" is not an object");
        return -1;
    }
    if (cJSON_IsObject(kw)) {
        while (kw->child) {
            /* the detached item's name, taken from it: cJSON frees an
             * item's old name before copying the new one in */
            cJSON *it = cJSON_DetachItemViaPointer(kw, kw->child);
            char *name = it->string;
            it->string = NULL;
            bool ok = name && (cJSON_GetObjectItemCaseSensitive(req, name)
                                   ? cJSON_ReplaceItemInObjectCaseSensitive(req, name, it)
                                   : cJSON_AddItemToObject(req, name, it));
            free(name);
            if (!ok) {
                cJSON_Delete(it);
                cJSON_Delete(kw);
                seterr(err, errlen, "out of memory");
                return -1;
            }
        }
    }
    cJSON_Delete(kw);
    if (!add_default(req, "add_generation_prompt", cJSON_CreateTrue()) ||
        !add_default(req, "tools", cJSON_CreateNull()) ||
        !add_default(req, "documents", cJSON_CreateNull()) ||
        !add_default(req, "bos_token", cJSON_CreateString(token_text(m, true))) ||
        !add_default(req, "eos_token", cJSON_CreateString(token_text(m, false)))) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* m's tokenizer.chat_template, malloc'd; NULL + err when it has none. */
static char *model_template(const sp_model *m, char *err, size_t errlen) {
    int n = m ? sp_model_meta_str(m, "tokenizer.chat_template", NULL, 0) : -1;
    if (!m) {
        seterr(err, errlen, "no template given and no model to take one from");
        return NULL;
    }
    if (n < 0) {
        seterr(err, errlen, "the model has no chat template (tokenizer.chat_template)");
        return NULL;
    }
    char *t = malloc((size_t)n + 1);
    if (!t) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    sp_model_meta_str(m, "tokenizer.chat_template", t, (size_t)n + 1);
    return t;
}

char *sp_chat_apply_template(const sp_model *m, const char *template_text, const char *request_json,
                             size_t len, int64_t now, char *err, size_t errlen) {
    if (!request_json) {
        seterr(err, errlen, "no request");
        return NULL;
    }
    const char *end = NULL;
    cJSON *req = cJSON_ParseWithLengthOpts(request_json, len, &end, false);
    if (!req) {
        size_t at = end && end >= request_json ? (size_t)(end - request_json) : 0;
        seterr(err, errlen, "the request is not valid JSON (at byte %zu)", at);
        return NULL;
    }
    if (jinja_json_keep_numbers(req, request_json, len)) { /* 1.0 stays a float */
        cJSON_Delete(req);
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        seterr(err, errlen, "the request is not a JSON object");
        return NULL;
    }
    char *owned = NULL, *out = NULL;
    if (request_vars(req, m, err, errlen) < 0) goto done;
    if (!template_text) {
        owned = model_template(m, err, errlen);
        if (!owned) goto done;
        template_text = owned;
    }
    jinja_tmpl *t = jinja_parse(template_text, strlen(template_text), err, errlen);
    if (!t) goto done;
    static const char *const markup[] = {"bos_token", "eos_token", NULL};
    jinja_limits lim = {0};
    lim.now = now;
    size_t n = 0;
    if (jinja_render(t, req, markup, &lim, &out, &n, NULL, err, errlen) < 0) out = NULL;
    jinja_free(t);
done:
    free(owned);
    cJSON_Delete(req);
    return out;
}
