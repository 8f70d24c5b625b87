/* openai.h: OpenAI completion / chat completion requests: parsing and
 * validation into engine parameters, and the error object. */
#ifndef SP_SERVER_OPENAI_H
#define SP_SERVER_OPENAI_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "server/chat.h"
#include "server/sbuf.h"
#include "specula.h"

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
    sp_spec_mode spec;
    int spec_k;
} oai_req;

/* One JSON value and nothing after it but white space (cJSON alone would
 * ignore trailing bytes); NULL if the text is not that. */
cJSON *oai_json_parse(const char *body, size_t len);
/* Parses and validates a request body; 0, or -1 with e filled (400). */
int oai_parse(const char *body, size_t len, bool chat, int32_t n_vocab, oai_req *r, oai_error *e);
void oai_req_free(oai_req *r);
/* POST /tokenize and /detokenize: the body in, the 200 response's JSON
 * appended to out; or -1 with e filled (400 for the client's mistakes, 500
 * when memory runs out). n_ctx is reported as max_model_len. */
int oai_tokenize(const char *body, size_t len, const sp_vocab *v, int32_t n_ctx, sbuf *out,
                 oai_error *e);
int oai_detokenize(const char *body, size_t len, const sp_vocab *v, sbuf *out, oai_error *e);
/* Sets e and returns -1 (for one-line error returns). */
int oai_seterr(oai_error *e, int status, const char *type, const char *param, const char *code,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} */
void oai_error_json(const oai_error *e, sbuf *out);

#endif
