/* chat_tokenize.c: the one tokenization of a chat prompt (contract in
 * chat.h), the server's (oai_prompt_tokens) and sp_chat_tokenize's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

/* A BOS the template wrote itself (as its markup, at the start) is dropped
 * from the text when the tokenizer adds one: the prompt gets one BOS, as
 * llama.cpp and vLLM give it. Returns the bytes dropped. */
static size_t own_bos(const sp_vocab *v, const char *text, chat_span *cs, int n_cs) {
    const sp_token bos = sp_vocab_bos(v);
    const char *b = bos >= 0 && sp_vocab_add_bos(v) ? sp_vocab_token_text(v, bos) : NULL;
    const size_t n = b ? strlen(b) : 0;
    if (!n || strncmp(text, b, n) || !n_cs || cs[0].off || cs[0].len < n) return 0;
    cs[0].len -= n;
    for (int i = 0; i < n_cs; i++) cs[i].off = i ? cs[i].off - n : 0;
    return n;
}

int32_t chat_tokenize(const sp_vocab *v, const chat_template *t, const chat_msg *m, int n,
                      const chat_render_opts *ro, int32_t n_max,
                      int32_t **out, int32_t *at_least, char *err, size_t errlen) {
    *out = NULL;
    if (at_least) *at_least = 0;
    chat_span *cs = NULL;
    int n_cs = 0;
    char *text = chat_template_render(t, m, n, ro, &cs, &n_cs, err, errlen);
    if (!text) return strcmp(err, "out of memory") ? CHAT_TOK_INVALID : CHAT_TOK_NOMEM;
    const size_t skip = own_bos(v, text, cs, n_cs);
    const chat_tmpl fam = chat_template_family(t);
    sp_span *spans = malloc((size_t)(n_cs ? n_cs : 1) * sizeof(sp_span));
    int32_t ids[16];
    int n_ids = 0, rc = CHAT_TOK_NOMEM;
    if (!spans) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_cs; i++) spans[i] = (sp_span){cs[i].off, cs[i].len};
    for (const char *const *mk = chat_tmpl_markup(fam); *mk && n_ids < 12; mk++) {
        int32_t id = sp_vocab_find(v, *mk, strlen(*mk));
        if (id >= 0) ids[n_ids++] = id;
    }
    const int32_t own[3] = {sp_vocab_bos(v), sp_vocab_eos(v), sp_vocab_eot(v)};
    for (int i = 0; i < 3; i++)
        if (own[i] >= 0) ids[n_ids++] = own[i];
    sp_tok_opts o = {.add_special = true, .spans = spans, .n_spans = (size_t)n_cs,
                     .markup_ids = ids, .n_markup_ids = n_ids};
    int k = sp_tokenize_bounded(v, text + skip, strlen(text + skip), n_max, &o, out);
    if (k == SP_TOKENIZE_FAILED) {
        *out = NULL;
        snprintf(err, errlen, "out of memory");
    } else if (k < 0) {
        *out = NULL;
        if (at_least) *at_least = -k;
        snprintf(err, errlen, "the conversation has more than %d tokens", n_max);
        rc = CHAT_TOK_TOO_LONG;
    } else {
        rc = k;
    }
done:
    free(text);
    free(cs);
    free(spans);
    return rc;
}
