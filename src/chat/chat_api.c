/* chat_api.c: the chat templates of src/chat behind specula.h, for callers
 * outside the library (the command line's `run --chat`): the same choice of
 * template as `specula serve` makes and the same tokenization of a rendered
 * conversation (special tokens only in the template's markup). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

_Static_assert(SP_CHAT_NONE == CHAT_NONE, "sp_chat_template values are chat_tmpl values");

static bool valid(sp_chat_template t) { return t > CHAT_NONE && t <= CHAT_GEMMA; }

sp_chat_template sp_chat_template_for_model(const sp_model *m, const char *name) {
    if (name) return chat_tmpl_parse(name);
    int len = m ? sp_model_meta_str(m, "tokenizer.chat_template", NULL, 0) : -1;
    if (len <= 0) return SP_CHAT_NONE;
    char *t = malloc((size_t)len + 1);
    if (!t) return SP_CHAT_NONE;
    sp_model_meta_str(m, "tokenizer.chat_template", t, (size_t)len + 1);
    chat_tmpl r = chat_tmpl_detect(t);
    free(t);
    return r;
}

const char *sp_chat_template_name(sp_chat_template t) {
    return chat_tmpl_name(valid(t) ? (chat_tmpl)t : CHAT_NONE);
}

const char *sp_chat_template_eot(sp_chat_template t) {
    return valid(t) ? chat_tmpl_eot((chat_tmpl)t) : NULL;
}

/* The messages as chat.c's type (the same two fields). */
static chat_msg *to_msgs(const sp_chat_message *msgs, int n) {
    chat_msg *m = malloc((size_t)(n > 0 ? n : 1) * sizeof(*m));
    for (int i = 0; m && i < n; i++) m[i] = (chat_msg){.role = msgs[i].role, .content = msgs[i].content};
    return m;
}

char *sp_chat_render(sp_chat_template t, const sp_chat_message *msgs, int n, char *err,
                     size_t errlen) {
    if (!valid(t) || n < 0) {
        snprintf(err, errlen, "no chat template");
        return NULL;
    }
    chat_msg *m = to_msgs(msgs, n);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char *s = chat_render((chat_tmpl)t, m, n, err, errlen);
    free(m);
    return s;
}

int32_t sp_chat_tokenize(const sp_vocab *v, sp_chat_template t, const sp_chat_message *msgs, int n,
                         int32_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!valid(t) || n < 0) {
        snprintf(err, errlen, "no chat template");
        return -1;
    }
    chat_msg *m = to_msgs(msgs, n);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int32_t k = chat_tokenize(v, (chat_tmpl)t, m, n, NULL, INT32_MAX - 1, out, NULL, err, errlen);
    free(m);
    if (k == CHAT_TOK_TOO_LONG) snprintf(err, errlen, "the conversation is too long");
    return k < 0 ? -1 : k;
}

int32_t sp_chat_eot_token(const sp_vocab *v, sp_chat_template t) {
    const char *eot = sp_chat_template_eot(t);
    if (!eot) return -1;
    int32_t tok[4];
    int n = sp_tokenize(v, eot, strlen(eot), tok, 4, false, true);
    return n == 1 && sp_vocab_token_type(v, tok[0]) != SP_TOKEN_NORMAL ? tok[0] : -1;
}
