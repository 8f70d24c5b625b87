/* openai.h: OpenAI completion / chat completion requests: parsing and
 * validation into engine parameters, and the error object. */
#ifndef SP_SERVER_OPENAI_H
#define SP_SERVER_OPENAI_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "chat/chat.h"
#include "server/sbuf.h"
#include "specula.h"
#include "tokenizer/tokenizer.h"

#define OAI_MAX_STOP 16

typedef struct {
    int status;           /* HTTP status */
    const char *type;     /* invalid_request_error, authentication_error, ... */
    const char *param;    /* the offending field or NULL */
    const char *code;     /* machine-readable code or NULL */
    char message[512];
} oai_error;

typedef struct {
    cJSON *doc;           /* the parsed body (the strings below point into it) */
    bool chat, stream, include_usage;
    const char *model;    /* NULL when absent */
    const char *prompt;   /* completions: text, or NULL when given as token ids */
    sp_token *tokens;     /* completions: token ids */
    int32_t n_tokens;
    chat_msg *msgs;       /* chat */
    char **msg_text;      /* joined content parts, owned */
    int n_msgs;
    int32_t max_tokens;   /* 0: not given */
    sp_sampler_params sampling;
    bool seed_given;      /* else the server picks a fresh seed */
    const char *stop[OAI_MAX_STOP];
    int n_stop;
    int logprobs;         /* -1: off; else top-N to report (0..20) */
    const char *cache_salt;
    bool ignore_eos;      /* extension: keep going past end-of-generation tokens */
    sp_spec_mode spec;
    int spec_k;
} oai_req;

/* One JSON value and nothing after it but white space (cJSON alone would
 * ignore trailing bytes); NULL if the text is not that. */
cJSON *oai_json_parse(const char *body, size_t len);
/* Parses and validates a request body; 0, or -1 with e filled (400). */
int oai_parse(const char *body, size_t len, bool chat, int32_t n_vocab, oai_req *r, oai_error *e);
void oai_req_free(oai_req *r);
/* The engine's prompt tokens for a parsed request q: for chat, the
 * conversation rendered by template t, special tokens read only in the
 * template's markup (message content is plain text: it cannot forge a
 * turn); for completions, q->prompt tokenized as plain text, or a copy of
 * q->tokens (q keeps its own). BOS/EOS as the vocabulary asks. At most
 * max_prompt tokens (the caller passes n_ctx - 1): a longer prompt is
 * refused as soon as that is certain, by its byte length alone when it
 * cannot fit (sp_vocab_max_token_bytes), else by tokenizing that stops
 * just past max_prompt tokens; so the work is bounded by max_prompt, not
 * by the body. Returns 0 with *out malloc'd (the caller frees it) and *n
 * in 1..max_prompt; or -1 with *out NULL and e filled:
 *   400 context_length_exceeded (param "messages" or "prompt"): too long;
 *   400 invalid_value "messages": the template cannot render (no template
 *       for CHAT_NONE, an unknown role);
 *   400 invalid_value "prompt"/"messages": "the prompt is empty";
 *   500 server_error: out of memory.
 * Thread-safe; q is not modified. */
int oai_prompt_tokens(const oai_req *q, chat_tmpl t, const sp_vocab *v, int32_t max_prompt,
                      sp_token **out, int32_t *n, oai_error *e);
/* POST /tokenize and /detokenize: the body in, the 200 response's JSON
 * appended to out; or -1 with e filled (400 for the client's mistakes, 500
 * when memory runs out). n_ctx is reported as max_model_len. /tokenize
 * counts at most max(n_ctx, OAI_TOKENIZE_MAX) tokens: a longer text is a
 * 400 context_length_exceeded, found with work bounded by that count
 * (sp_tokenize_bounded), not by the body's size. */
#define OAI_TOKENIZE_MAX 131072
int oai_tokenize(const char *body, size_t len, const sp_vocab *v, int32_t n_ctx, sbuf *out,
                 oai_error *e);
int oai_detokenize(const char *body, size_t len, const sp_vocab *v, sbuf *out, oai_error *e);
/* Sets e and returns -1 (for one-line error returns). */
int oai_seterr(oai_error *e, int status, const char *type, const char *param, const char *code,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} */
void oai_error_json(const oai_error *e, sbuf *out);

#endif
