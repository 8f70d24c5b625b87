/* responses.h: POST /v1/responses (responses.c), OpenAI's Responses API
 * as a translation of the chat completion request it means, and its own
 * answer and stream of typed events. */
#ifndef SP_SERVER_RESPONSES_H
#define SP_SERVER_RESPONSES_H

#include "server/openai.h"

struct sreq;

/* The Responses request body[len] as a chat completion request's JSON,
 * appended to out, and in *echo (malloc'd) the settings the response
 * object repeats (a JSON fragment of ", key: value" pairs). 0, or -1 + e (a
 * 400 naming the Responses field; 500 when out of memory). */
int resp_translate(const char *body, size_t len, sbuf *out, char **echo, oai_error *e);
/* An error of the translated request's parsing named by the Responses
 * field it came from (max_tokens: max_output_tokens, ...). */
void resp_error_param(oai_error *e);
/* The whole answer: a "response" object (status completed, incomplete or
 * failed; output: a message and function_call items; usage). */
void resp_reply_full(sbuf *b, const oai_reply *o, const char *echo);
/* Appends to r->out the stream's events for what is new (r->mu held):
 * response.created and response.in_progress first, the items' events as
 * the text grows, and at the end response.completed or
 * response.incomplete, or, with err, an error event and
 * response.failed. No [DONE]: the Responses API has none. */
void resp_stream_build(struct sreq *r, const oai_reply *o, const oai_error *err);
/* What the record holds for the Responses answer. */
void resp_free(struct sreq *r);

#endif
