/* openai_prompt.c: the prompt's tokens for a generation request (chat
 * rendered by its template), and the /tokenize and /detokenize bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

/* A 400 naming the first member of o that is not in `known` (NULL-ended):
 * the extension endpoints refuse what they would not honor, as the OpenAI
 * ones do. */
static int refuse_unknown(const cJSON *o, const char *const *known, oai_error *e) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        int ok = 0;
        for (const char *const *k = known; *k && !ok; k++) ok = f->string && !strcmp(f->string, *k);
        if (!ok) return oai_unknown_field(e, f->string, "");
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
    static const char *const known[] = {"prompt", "content", "add_special", NULL};
    if (oai_refuse_nul(body, len, e) || refuse_unknown(o, known, e)) {
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
    if (n == SP_TOKENIZE_FAILED) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
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
    static const char *const known[] = {"tokens", NULL};
    if (refuse_unknown(o, known, e)) {
        cJSON_Delete(o);
        return -1;
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
         * (tests/fuzz/regress/request/detokenize_huge_id) */
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
 * stopped there. The engine refuses a prompt that leaves no room for
 * max_tokens with the same status (SP_ERR_CONTEXT); this check comes first
 * only so that a huge prompt costs no more than max_prompt tokens' work. */
static int too_long(oai_error *e, const char *param, int32_t max_prompt, int32_t least,
                    bool exact) {
    return oai_status_error(e, SP_ERR_CONTEXT, param, "this model's context leaves room for %d "
                            "prompt tokens; the prompt has %s%d", max_prompt,
                            exact ? "" : "at least ", least);
}

int oai_prompt_tokens(const oai_req *q, const chat_template *t, const sp_vocab *v, int32_t max_prompt, bool *think_open,
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
        if (!c) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
        memcpy(c, q->tokens, (size_t)q->n_tokens * sizeof(sp_token));
        *out = c;
        *n = q->n_tokens;
        return 0;
    }
    sp_token *toks;
    int32_t k, least = 0;
    if (q->chat) {
        char err[512];
        const chat_render_opts ro = {.tools = q->tools_offered, .kwargs = q->tmpl_kwargs,
                                     .think_open = think_open};
        k = chat_tokenize(v, t, q->msgs, q->n_msgs, &ro, max_prompt, &toks, &least, err,
                          sizeof(err));
        if (k == CHAT_TOK_INVALID)
            return oai_seterr(e, 400, "invalid_request_error", "messages", "invalid_value", "%s",
                              err);
        if (k == CHAT_TOK_NOMEM) k = SP_TOKENIZE_FAILED;
        if (k == CHAT_TOK_TOO_LONG) k = -least;
    } else {
        const sp_tok_opts o = {.add_special = true};
        k = sp_tokenize_bounded(v, q->prompt, strlen(q->prompt), max_prompt, &o, &toks);
    }
    if (k == SP_TOKENIZE_FAILED) return oai_status_error(e, SP_ERR_NOMEM, NULL, "out of memory");
    if (k < 0) return too_long(e, param, max_prompt, -k, false);
    if (k == 0) {
        free(toks);
        return oai_seterr(e, 400, "invalid_request_error", param, "invalid_value",
                          "the prompt is empty");
    }
    *out = toks;
    *n = k;
    return 0;
}
