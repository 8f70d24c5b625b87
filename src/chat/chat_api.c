/* chat_api.c: the chat templates of src/chat behind specula.h, for callers
 * outside the library (the command line's `run --chat`): the same choice of
 * template as `specula serve` makes and the same tokenization of a rendered
 * conversation (special tokens only in the template's markup). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "common.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

/* The text of m's BOS or EOS token, "" when there is none. */
static const char *special_text(const sp_model *m, bool bos) {
    const sp_vocab *v = m ? sp_model_get_vocab(m) : NULL;
    const sp_token t = !v ? -1 : bos ? sp_vocab_bos(v) : sp_vocab_eos(v);
    const char *s = t >= 0 ? sp_vocab_token_text(v, t) : NULL;
    return s ? s : "";
}

sp_chat_template *sp_chat_template_load(const sp_model *m, const char *name, char *err, size_t errlen) {
    char *own = NULL;
    const int len = !name && m ? sp_model_meta_str(m, "tokenizer.chat_template", NULL, 0) : -1;
    if (len > 0) {
        if (!(own = malloc((size_t)len + 1))) {
            seterr(err, errlen, "out of memory");
            return NULL;
        }
        sp_model_meta_str(m, "tokenizer.chat_template", own, (size_t)len + 1);
    }
    chat_template *t = chat_template_choose(own, name, special_text(m, true), special_text(m, false), err,
                                            errlen);
    free(own);
    return t;
}

void sp_chat_template_free(sp_chat_template *t) { chat_template_free(t); }

const char *sp_chat_template_name(const sp_chat_template *t) { return chat_template_name(t); }

const char *sp_chat_template_eot(const sp_chat_template *t) {
    return chat_tmpl_eot(chat_template_family(t));
}

/* The messages as chat.c's type (the same two fields). */
static chat_msg *to_msgs(const sp_chat_message *msgs, int n) {
    chat_msg *m = malloc((size_t)(n > 0 ? n : 1) * sizeof(*m));
    for (int i = 0; m && i < n; i++) m[i] = (chat_msg){.role = msgs[i].role, .content = msgs[i].content};
    return m;
}

char *sp_chat_render(const sp_chat_template *t, const sp_chat_message *msgs, int n, char *err,
                     size_t errlen) {
    if (!t || n < 0) {
        seterr(err, errlen, "no chat template");
        return NULL;
    }
    chat_msg *m = to_msgs(msgs, n);
    if (!m) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    char *s = chat_template_render(t, m, n, NULL, NULL, NULL, err, errlen);
    free(m);
    return s;
}

int32_t sp_chat_tokenize(const sp_vocab *v, const sp_chat_template *t, const sp_chat_message *msgs, int n,
                         int32_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!t || n < 0) {
        seterr(err, errlen, "no chat template");
        return -1;
    }
    chat_msg *m = to_msgs(msgs, n);
    if (!m) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    int32_t k = chat_tokenize(v, t, m, n, NULL, INT32_MAX - 1, out, NULL, err, errlen);
    free(m);
    if (k == CHAT_TOK_TOO_LONG) seterr(err, errlen, "the conversation is too long");
    return k < 0 ? -1 : k;
}

int32_t sp_chat_eot_token(const sp_vocab *v, const sp_chat_template *t) {
    const char *eot = sp_chat_template_eot(t);
    if (!eot) return t ? sp_vocab_eot(v) : -1; /* a family Specula does not know: the model's own */
    int32_t tok[4];
    int n = sp_tokenize(v, eot, strlen(eot), tok, 4, false, true);
    return n == 1 && sp_vocab_token_type(v, tok[0]) != SP_TOKEN_NORMAL ? tok[0] : -1;
}
