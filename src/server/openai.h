/* openai.h: the OpenAI API's JSON, in one place: completion and chat
 * completion requests parsed and validated into engine parameters (the
 * field table, openai.c), the prompt's tokens and /tokenize
 * (openai_prompt.c), the responses, SSE chunks and error objects, and the
 * one table from sp_status to HTTP (openai_reply.c). */
#ifndef SP_SERVER_OPENAI_H
#define SP_SERVER_OPENAI_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "chat/chat.h"
#include "sbuf.h"
#include "specula.h"

#define OAI_MAX_STOP 16

typedef struct {
    int status;           /* HTTP status */
    const char *type;     /* invalid_request_error, authentication_error, ... */
    const char *param;    /* the offending field or NULL (may point to param_buf) */
    const char *code;     /* machine-readable code or NULL */
    char message[512];
    char param_buf[64];   /* a field name from the request (unknown fields) */
} oai_error;

#define OAI_MAX_GRAMMAR (1 << 20)

typedef struct {
    cJSON *doc;           /* the parsed body (the strings below point into it) */
    bool chat, stream, include_usage;
    bool responses;       /* a /v1/responses request, translated (responses.c) */
    char *resp_echo;      /* ... the settings its response object repeats (owned) */
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
    sp_logit_bias *bias;  /* logit_bias (owned; sampling.logit_bias points here) */
    int32_t n_bias;
    sp_spec_mode spec;
    int spec_k;
    char *grammar;        /* GBNF the output must match (owned): the grammar field, or
                             response_format's json_object / json_schema compiled; NULL */
    const char *grammar_param; /* which field gave it ("grammar", "response_format") */
    const cJSON *tools;   /* chat "tools" (in doc), NULL when absent or [] */
    const cJSON *tool_choice; /* chat "tool_choice" (in doc) or NULL */
    bool parallel_calls;  /* parallel_tool_calls (default false, as llama-server) */
    chat_call *calls;     /* the assistant messages' tool_calls (msgs point here;
                             arguments owned) */
    int n_calls;
    const cJSON *tools_offered; /* the tools the template lists (in doc): tools, but
                             none with tool_choice "none" */
    const cJSON *tmpl_kwargs; /* chat_template_kwargs (in doc) or NULL */
    int tool_mode;        /* OAI_TOOLS_*: whether and where the output holds calls */
    const char *grammar_trigger; /* auto: the lazy grammar's trigger (static) */
    bool grammar_at_start;
} oai_req;

/* Where the output of a chat request with tools holds calls. */
enum {
    OAI_TOOLS_OFF = 0,    /* nowhere: plain content */
    OAI_TOOLS_AUTO,       /* after the format's trigger, if the model writes it */
    OAI_TOOLS_REQUIRED,   /* the whole output (tool_choice required or named) */
    OAI_TOOLS_EITHER,     /* auto under response_format or grammar: calls from the
                             start, or else an output in that format */
};

/* One JSON value and nothing after it but white space (cJSON alone would
 * ignore trailing bytes); NULL if the text is not that. */
cJSON *oai_json_parse(const char *body, size_t len);
/* Parses and validates a request body; 0, or -1 with e filled (400). */
int oai_parse(const char *body, size_t len, bool chat, int32_t n_vocab, oai_req *r, oai_error *e);
/* The request fields' table (openai.c) as a Markdown table: docs/server.md's
 * "Request fields" section holds exactly this. */
void oai_fields_markdown(sbuf *out);
/* 400 when the body (valid JSON) holds an escaped NUL ("\u0000") in any
 * string: cJSON would cut the string there. 0 when it holds none. */
int oai_refuse_nul(const char *body, size_t len, oai_error *e);
/* -1 with e a 400 unknown_parameter naming `name` (copied into e->param_buf,
 * so the parsed body may be freed), the message followed by `hint` ("" for
 * none). For every endpoint's unknown fields. */
int oai_unknown_field(oai_error *e, const char *name, const char *hint);
void oai_req_free(oai_req *r);

/* ---- openai_tools.c: function tools (chat) ---- */
int oai_tools_check(const cJSON *tools, oai_error *e);
/* An assistant message's tool_calls (in doc) into r->calls; 0, or -1 + e. */
int oai_tools_history(const cJSON *calls, int msg, oai_req *r, chat_msg *m, oai_error *e);
/* After the fields, with the template known: the tools' definitions for
 * the template, and the grammar of the calls: the whole output
 * (tool_choice required or named), or lazy from the family's trigger on
 * (auto), or either calls or the constrained answer (auto under 'grammar'
 * or response_format). 0, or -1 + e (400 naming tools or tool_choice). */
int oai_tools_apply(oai_req *r, chat_tmpl t, oai_error *e);

/* How a family writes tool calls: where they begin and what surrounds
 * each, so that they can be constrained and read back. */
typedef struct {
    const char *trigger;  /* the text calls begin with */
    bool at_start;        /* only at the output's start (after white space) */
    const char *args_key; /* "arguments", or "parameters" (Llama 3.1) */
    /* GBNF: head (before call (sep before call)*)? tail; sep NULL: one call */
    const char *head, *before, *after, *sep, *tail;
} oai_tool_fmt;
const oai_tool_fmt *oai_tool_format(chat_tmpl t);

/* Reading calls out of the output as it grows: the text before the
 * trigger is content (trailing white space held back until more content
 * follows, and a suffix that may still become the trigger until it
 * cannot); after it, each JSON object at the top level is a call: its
 * "name" starts it (OAI_CALL_START), and its arguments' JSON text follows
 * as it is written (OAI_CALL_ARGS, in fragments); its closing brace ends
 * it. The text there is the grammar's, so it is well-formed (a prefix of
 * it when cut by max_tokens). */
enum { OAI_CALL_CONTENT, OAI_CALL_START, OAI_CALL_ARGS };
typedef void (*oai_calls_emit)(void *user, int kind, int index, const char *s, size_t n);
typedef struct {
    const oai_tool_fmt *f;
    size_t pos;           /* bytes of text read */
    size_t sent;          /* bytes of content emitted */
    size_t from;          /* where the calls begin, SIZE_MAX: not (yet) */
    bool no_calls;        /* an anchored trigger did not come first */
    bool anchored;        /* calls only at the start (the format's, or OAI_TOOLS_EITHER) */
    int depth;            /* JSON nesting inside the calls */
    bool in_str, esc;
    int st;               /* what comes next inside a call object */
    char key[16], name[72];
    int key_n, name_n;
    bool in_args;
    int started, done;    /* calls named, calls complete */
} oai_calls;
/* mode: OAI_TOOLS_REQUIRED, the whole output is calls; OAI_TOOLS_AUTO,
 * calls from the trigger on; OAI_TOOLS_EITHER, calls when the output
 * starts with the trigger, else it is all content. */
void oai_calls_init(oai_calls *c, const oai_tool_fmt *f, int mode);
/* Reads text[pos, len) (the whole output so far); final: nothing follows. */
void oai_calls_feed(oai_calls *c, const char *text, size_t len, bool final, oai_calls_emit emit,
                    void *user);
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
 *   400 invalid_value "messages": the template cannot render (no template,
 *       its raise_exception, a limit of the interpreter);
 *   400 invalid_value "prompt"/"messages": "the prompt is empty";
 *   500 server_error: out of memory.
 * think_open (may be NULL): set when the rendered chat prompt ends inside a
 * <think> block. Thread-safe; q is not modified. */
int oai_prompt_tokens(const oai_req *q, const chat_template *t, const sp_vocab *v, int32_t max_prompt,
                      bool *think_open, sp_token **out, int32_t *n, oai_error *e);
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
/* ---- errors ----
 * Every error the server answers is an OpenAI error object. Those that
 * stand for an sp_status (the engine's refusals, and the server's own
 * checks of the same kind: a prompt too long for the context, out of
 * memory, a full queue) take their HTTP status, type and code from ONE
 * table (openai_reply.c), so the same condition reads the same whichever
 * layer found it. */
/* Fills e for status (a negative sp_status; param: the offending field
 * or NULL) and returns -1. */
int oai_status_error(oai_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for a refusal of sp_engine_submit (status and its message),
 * param from the table: the request field the engine's check is about
 * (SP_ERR_CONTEXT: max_tokens, since the prompt alone was bounded before;
 * SP_ERR_UNSUPPORTED: speculative). */
int oai_submit_error(oai_error *e, int status, const char *msg);
/* Sets e and returns -1 (for one-line error returns). */
int oai_seterr(oai_error *e, int status, const char *type, const char *param, const char *code,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} */
void oai_error_json(const oai_error *e, sbuf *out);

/* ---- responses (openai_reply.c) ----
 * A generation's state as the response JSON needs it: the generated
 * tokens (and their logprobs when asked), the text, the statistics. */
typedef struct {
    bool chat;
    const char *id;              /* "cmpl-..." or "chatcmpl-..." */
    long created;                /* Unix time */
    const char *model;           /* the served name */
    const sp_vocab *v;
    int logprobs;                /* -1: none; else the top-N asked for */
    const sp_token *toks;
    const float *lps;            /* NULL: no logprobs were kept */
    const sp_token *top_ids;     /* [n_tok][n_top] */
    const float *top_lps;
    int32_t n_tok, n_top;
    const char *text;
    size_t text_len;
    const sp_request_stats *st;
    const char *finish;          /* sp_finish_reason_str(st->finish) */
    const oai_tool_fmt *tools;   /* the text may hold calls in this format (NULL: not) */
    int tool_mode;               /* OAI_TOOLS_*: where the text holds them */
    const char *reasoning;       /* chat: the reasoning (<think>...</think>) taken out of
                                    text, or NULL (oai_think_split) */
    size_t reasoning_len;
} oai_reply;

/* --stamp-chunks: the timing a text chunk carries (see server.h). */
typedef struct {
    long long emit_us, built_us;
    int events;
} oai_stamp;

/* Where a chat output of a template that thinks holds its reasoning
 * (<think>...</think>, or from the start when the prompt left the block
 * open) and where its answer starts. A stream's text still growing
 * (final false) holds back what may yet be a tag. */
typedef struct {
    size_t r_off, r_len;  /* the reasoning (r_len 0: none so far) */
    size_t c_off;         /* the answer's start (white space after </think> skipped);
                             SIZE_MAX: not begun */
    bool any;             /* a reasoning block was found */
} oai_think;
void oai_think_split(const char *text, size_t len, bool open, bool final, oai_think *t);
/* A chat stream's chunk of reasoning: delta {"reasoning_content": text[len]}. */
void oai_reply_reasoning_chunk(sbuf *b, const oai_reply *o, const char *text, size_t len);
/* finish_reason as OpenAI's clients know it: stop, length (also a request
 * cut short by shutdown, whose engine reason "cancelled" the "specula"
 * statistics carry as "finish"), or "error". */
const char *oai_finish_reason(sp_finish_reason r);
/* The "specula" statistics object of a response. */
void oai_json_ext(sbuf *b, const sp_request_stats *st);
/* The calls read out of a whole text: content, and each call's name and
 * arguments (raw holds the arguments, one run per call). */
typedef struct {
    sbuf content, raw;
    struct {
        char name[72];
        size_t off, len;
    } *call;
    int n, cap;
    int done;             /* calls complete */
    bool oom;
} oai_found;
/* Reads o's text for calls (o->tools): true with f filled when it holds
 * any (f freed by oai_found_free either way). */
bool oai_find_calls(const oai_reply *o, oai_found *f);
void oai_found_free(oai_found *f);
/* The whole (non-streaming) response: "text_completion" or
 * "chat.completion" with usage and the "specula" statistics. */
void oai_reply_full(sbuf *b, const oai_reply *o);
/* One SSE event "data: {chunk}\n\n": the text delta text[len] (NULL: no
 * content), the logprobs of tokens [from, to), finish (NULL while
 * running), role: the chat stream's first chunk; stamp or NULL. */
void oai_reply_chunk(sbuf *b, const oai_reply *o, const char *text, size_t len, int32_t from,
                     int32_t to, const char *finish, bool role, const oai_stamp *stamp);
/* The stream's usage event (stream_options.include_usage). */
void oai_reply_usage_chunk(sbuf *b, const oai_reply *o);
/* A stream's chunk of tool call `index`: its first (id, type, name,
 * arguments "") when name is not NULL, else a fragment of its arguments. */
void oai_reply_call_chunk(sbuf *b, const oai_reply *o, int index, const char *name,
                          const char *args, size_t n);
/* The id of call `index` of the reply with id `rid` into out. */
void oai_call_id(char *out, size_t cap, const char *rid, int index);
/* An error as an SSE event (a stream that fails after its 200). */
void oai_reply_error_event(sbuf *b, const oai_error *e);

#endif
