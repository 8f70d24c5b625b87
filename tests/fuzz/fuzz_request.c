/* fuzz_request.c: request bodies as the HTTP server receives them.
 *
 * Input: byte 0 picks the endpoint (low two bits: /v1/completions,
 * /v1/chat/completions, /tokenize, /detokenize) and, for chat, the
 * template (bits 2-4); the rest is the body.
 *
 * Completions and chat go through oai_parse (parse and validate), chat
 * through oai_tools_apply (tools: their definitions for the template, the
 * calls' grammar, which must compile), and an
 * accepted request through what the server does next: the prompt's tokens
 * (oai_prompt_tokens: chat rendering, bounded tokenizing with special
 * tokens only in the template's markup). Every accepted request must
 * satisfy what the server relies on (ranges, counts, strings present, no
 * NUL cut short); every refusal must give a 4xx/5xx error whose JSON
 * (oai_error_json) parses back.
 *
 * /tokenize and /detokenize go through oai_tokenize and oai_detokenize
 * (src/server/openai_prompt.c), the functions the server's handlers
 * (src/server/endpoints.c) call, up to the response body, which must be
 * valid JSON. */
#include <cjson/cJSON.h>
#include <math.h>

#include "fuzz_common.h"
#include "chat/chat.h"
#include "server/openai.h"
#include "sbuf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_load_vocabs();
    return 0;
}

/* What the server would send must be JSON. */
static void fzr_check_json(const sbuf *b) {
    FZ_ASSERT(!b->oom && b->p);
    cJSON *j = cJSON_ParseWithLength(b->p, b->len);
    FZ_ASSERT(j && cJSON_IsObject(j));
    cJSON_Delete(j);
}

static void fzr_check_error(const oai_error *e) {
    FZ_ASSERT(e->status >= 400 && e->status < 600);
    FZ_ASSERT(e->type && e->message[0]);
    sbuf b = {0};
    oai_error_json(e, &b);
    fzr_check_json(&b);
    sb_free(&b);
}

/* The prompt's tokens as the server takes them, at most FZR_MAX_PROMPT:
 * a refusal is a well-formed error (400, or 500 for memory), an answer
 * holds 1..FZR_MAX_PROMPT ids of the vocabulary, and a completion's text
 * gives exactly sp_tokenize's tokens (plain text, BOS as asked). */
#define FZR_MAX_PROMPT 2047
/* Family t's built-in template, compiled once (NULL for CHAT_NONE). */
static const chat_template *fzr_template(chat_tmpl t) {
    static chat_template *c[CHAT_N];
    const char *src = chat_builtin_source(t);
    char err[256];
    if (!c[t] && src) c[t] = chat_template_new(src, strlen(src), chat_tmpl_name(t), t, "<s>", "</s>", err, sizeof(err));
    FZ_ASSERT(!src || c[t]);
    return c[t];
}

static void fzr_prompt_tokens(const oai_req *q, chat_tmpl tmpl, const sp_vocab *v) {
    if (!v) return;
    sp_token *t = NULL;
    int32_t n = 0;
    oai_error e;
    memset(&e, 0, sizeof(e));
    if (oai_prompt_tokens(q, q->chat ? fzr_template(tmpl) : NULL, v, FZR_MAX_PROMPT, NULL, &t, &n, &e)) {
        fzr_check_error(&e);
        FZ_ASSERT(!t && (e.status == 400 || e.status == 500));
        if (q->chat && tmpl != CHAT_NONE && e.status == 400) /* roles were validated */
            FZ_ASSERT(e.code && (!strcmp(e.code, "context_length_exceeded") ||
                                 !strcmp(e.message, "the prompt is empty")));
        return;
    }
    FZ_ASSERT(t && n >= 1 && n <= FZR_MAX_PROMPT);
    for (int32_t i = 0; i < n; i++) FZ_ASSERT(t[i] >= 0 && t[i] < sp_vocab_n_tokens(v));
    if (!q->chat && q->prompt) {
        sp_token *w = malloc((size_t)(n + 1) * sizeof(sp_token));
        if (w) {
            FZ_ASSERT(sp_tokenize(v, q->prompt, strlen(q->prompt), w, n, true, false) == n);
            FZ_ASSERT(memcmp(w, t, (size_t)n * sizeof(sp_token)) == 0);
            free(w);
        }
    }
    free(t);
}

static void fzr_generate(const char *body, size_t len, bool chat, chat_tmpl tmpl,
                         const sp_vocab *v) {
    int32_t n_vocab = v ? sp_vocab_n_tokens(v) : 32000;
    oai_req q;
    oai_error e;
    memset(&e, 0, sizeof(e));
    if (oai_parse(body, len, chat, n_vocab, &q, &e) < 0) {
        fzr_check_error(&e);
        oai_req_free(&q);
        return;
    }
    FZ_ASSERT(q.doc && q.chat == chat);
    if (chat) {
        FZ_ASSERT(q.n_msgs > 0 && q.msgs);
        for (int i = 0; i < q.n_msgs; i++) FZ_ASSERT(q.msgs[i].role && q.msgs[i].content);
    } else {
        FZ_ASSERT(q.prompt || (q.tokens && q.n_tokens > 0));
        for (int32_t i = 0; !q.prompt && i < q.n_tokens; i++)
            FZ_ASSERT(q.tokens[i] >= 0 && q.tokens[i] < n_vocab);
    }
    FZ_ASSERT(q.max_tokens >= 0 && q.max_tokens <= (1 << 24));
    FZ_ASSERT(q.n_stop >= 0 && q.n_stop <= OAI_MAX_STOP);
    for (int i = 0; i < q.n_stop; i++) FZ_ASSERT(q.stop[i] && q.stop[i][0]);
    FZ_ASSERT(q.logprobs >= -1 && q.logprobs <= 20);
    FZ_ASSERT(q.sampling.temperature >= 0 && q.sampling.temperature <= 2);
    FZ_ASSERT(q.sampling.top_p > 0 && q.sampling.top_p <= 1);
    FZ_ASSERT(q.sampling.min_p >= 0 && q.sampling.min_p <= 1);
    FZ_ASSERT(q.sampling.top_k >= 0 && q.sampling.top_k <= n_vocab);
    FZ_ASSERT(fabsf(q.sampling.presence_penalty) <= 2 && fabsf(q.sampling.frequency_penalty) <= 2);
    FZ_ASSERT(q.spec_k >= 0 && q.spec_k <= SP_SPEC_K_MAX);
    FZ_ASSERT(!q.include_usage || q.stream);

    /* no string was cut at an escaped NUL: an accepted body has none */
    for (size_t i = 0; i + 1 < len; i++)
        if (body[i] == '\\') {
            FZ_ASSERT(strncmp(body + i + 1, "u0000", 5) != 0);
            i++; /* the escaped character */
        }
    if (chat && tmpl != CHAT_NONE && oai_tools_apply(&q, tmpl, &e) < 0) { /* as gen_parse */
        fzr_check_error(&e);
        oai_req_free(&q);
        return;
    }
    if (q.tool_mode) { /* the calls' grammar compiles; auto is lazy from the format's trigger */
        char err[256];
        sp_grammar *g = sp_grammar_compile(q.grammar, 0, err, sizeof(err));
        FZ_ASSERT(g && cJSON_GetArraySize(q.tools_offered) > 0);
        FZ_ASSERT((q.tool_mode == OAI_TOOLS_AUTO) == (q.grammar_trigger != NULL));
        sp_grammar_free(g);
    }
    if (chat) {
        char err[512];
        const chat_render_opts ro = {.tools = q.tools_offered, .kwargs = q.tmpl_kwargs};
        char *text = chat_template_render(fzr_template(tmpl), q.msgs, q.n_msgs, &ro, NULL, NULL, err,
                                          sizeof(err));
        if (tmpl == CHAT_NONE) FZ_ASSERT(!text);
        else FZ_ASSERT(text); /* roles were validated: rendering cannot fail */
        free(text);
    }
    fzr_prompt_tokens(&q, chat ? tmpl : CHAT_NONE, v);
    oai_req_free(&q);
}

/* POST /tokenize and /detokenize as the server answers them
 * (oai_tokenize, oai_detokenize): a refusal is a well-formed error, an
 * answer is a JSON object, and detokenized text is valid UTF-8 (the
 * streaming detokenizer never splits a character). */
static void fzr_tokenize(const char *body, size_t len, const sp_vocab *v) {
    if (!v) return;
    sbuf b = {0};
    oai_error e;
    if (oai_tokenize(body, len, v, 2048, &b, &e)) fzr_check_error(&e);
    else fzr_check_json(&b);
    sb_free(&b);
}

static void fzr_detokenize(const char *body, size_t len, const sp_vocab *v) {
    if (!v) return;
    sbuf b = {0};
    oai_error e;
    if (oai_detokenize(body, len, v, &b, &e)) {
        fzr_check_error(&e);
    } else {
        fzr_check_json(&b);
        cJSON *j = cJSON_ParseWithLength(b.p, b.len);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        FZ_ASSERT(cJSON_IsString(c) && fz_valid_utf8(c->valuestring, strlen(c->valuestring)));
        cJSON_Delete(j);
    }
    sb_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_load_vocabs();
    if (size < 1) return 0;
    uint8_t mode = data[0];
    /* the server's body buffer (an sbuf) is NUL-terminated: so is this */
    size_t len = size - 1;
    char *body = malloc(len + 1);
    if (!body) return 0;
    memcpy(body, data + 1, len);
    body[len] = 0;
    /* the server's vocabulary: SentencePiece unless bit 5 asks for BPE */
    const sp_vocab *v = fz_vocabs[(mode >> 5) & 1];
    if (!v) v = fz_vocabs[!((mode >> 5) & 1)];
    chat_tmpl tmpl = (chat_tmpl)((mode >> 2) & 7);
    if (tmpl > CHAT_GEMMA) tmpl = CHAT_CHATML;
    switch (mode & 3) {
    case 0: fzr_generate(body, len, false, tmpl, v); break;
    case 1: fzr_generate(body, len, true, tmpl, v); break;
    case 2: fzr_tokenize(body, len, v); break;
    default: fzr_detokenize(body, len, v); break;
    }
    free(body);
    return 0;
}
