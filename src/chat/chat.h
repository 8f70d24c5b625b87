/* chat.h: chat templates rendered in C (no Jinja): the family is recognized
 * from the model's tokenizer.chat_template text or named explicitly. Used by
 * the server (src/server) and, through the sp_chat_* functions of
 * specula.h, by the command line. */
#ifndef SP_CHAT_CHAT_H
#define SP_CHAT_CHAT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CHAT_NONE = 0,
    CHAT_CHATML,  /* ChatML / Qwen: <|im_start|>role\n...<|im_end|> */
    CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_LLAMA2,  /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_MISTRAL, /* [INST] ... [/INST] (no <<SYS>>) */
    CHAT_PHI3,    /* <|user|>\n...<|end|>\n */
    CHAT_GEMMA,   /* <start_of_turn>user\n...<end_of_turn>\n */
} chat_tmpl;

/* A tool call an assistant message made (OpenAI's tool_calls[i]). */
typedef struct {
    const char *id;        /* NULL: none given */
    const char *name;
    const char *arguments; /* JSON text, written as it is */
} chat_call;

typedef struct {
    const char *role;    /* system, developer (as system), user, assistant, tool */
    const char *content;
    const chat_call *calls; /* assistant: the tool calls it made */
    int n_calls;
    const char *call_id; /* tool: the id of the call it answers (NULL: none) */
} chat_msg;

/* The tools offered to the model: each tool's definition as JSON text
 * ({"type": "function", "function": {...}}), written as it is. */
typedef struct {
    const char *const *defs;
    int n;
} chat_tools;

/* A template by name (chatml, qwen, llama3, llama2, mistral, phi3, gemma);
 * -1 if unknown. */
int chat_tmpl_parse(const char *name);
/* The family of a Jinja template text; CHAT_NONE if not recognized. */
chat_tmpl chat_tmpl_detect(const char *text);
const char *chat_tmpl_name(chat_tmpl t);
/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>", ...). */
const char *chat_tmpl_eot(chat_tmpl t);
/* The texts of a family's markup that models spell with special tokens
 * (e.g. "<|im_start|>"), NULL-terminated (an empty list for CHAT_NONE):
 * the ones that must never be read as tokens inside message content,
 * whatever type the vocabulary gives them. */
const char *const *chat_tmpl_markup(chat_tmpl t);
/* The conversation followed by the opening of the assistant's turn, as a
 * malloc'd string (BOS not included: the tokenizer adds it). NULL + err for
 * an unknown role or out of memory. Tools, a tool's result and an
 * assistant's tool calls are written in each family's own markup:
 *   chatml (Qwen 2.5, Hermes): the tools in the system turn inside
 *     <tools></tools>, calls as <tool_call>\n{"name", "arguments"}\n
 *     </tool_call>, results as <tool_response> in a user turn (a run of
 *     them in one turn);
 *   llama3 (Llama 3.1 JSON tool calling): the tools at the head of the
 *     first user message, a call as {"name", "parameters"}, a result in an
 *     ipython turn;
 *   mistral (v0.3): [AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS] before the
 *     last user turn, [TOOL_CALLS] [{"name", "arguments", "id"}], results
 *     as [TOOL_RESULTS] {"content", "call_id"}[/TOOL_RESULTS];
 *   the others (no tool markup of their own): the tools in the system text
 *     with the instruction to answer {"name", "arguments"}, a call as that
 *     JSON, a result as <tool_response> in a user turn. */
char *chat_render(chat_tmpl t, const chat_msg *m, int n, char *err, size_t errlen);

/* A byte range [off, off + len) of a rendered conversation. */
typedef struct {
    size_t off, len;
} chat_span;
/* chat_render with tools (NULL: none), and in *spans (malloc'd, the caller frees; NULL when
 * *n_spans is 0) the parts of the text that are the template's own
 * markup, in order, disjoint and not adjoining: everything but message
 * content. The tokenizer reads special tokens only there (oai_prompt_tokens),
 * so content cannot forge a turn. spans NULL: as chat_render. */
char *chat_render_spans(chat_tmpl t, const chat_msg *m, int n, const chat_tools *tools,
                        chat_span **spans, int *n_spans, char *err, size_t errlen);

/* ---- a conversation's tokens (chat_tokenize.c) ---- */

struct sp_vocab;
/* What chat_tokenize returns besides a count. */
enum {
    CHAT_TOK_INVALID = -1,  /* not renderable: no template, an unknown role (err says) */
    CHAT_TOK_NOMEM = -2,    /* out of memory */
    CHAT_TOK_TOO_LONG = -3, /* more than n_max tokens; *at_least is a lower bound */
};
/* The conversation rendered by t (chat_render_spans) and tokenized as a chat
 * prompt: BOS/EOS as the vocabulary's add_bos/add_eos say, special tokens read
 * only in the template's markup spans, and there the markup's tokens whatever
 * type the vocabulary gives them, so message content cannot forge a turn. At
 * most n_max tokens. Returns the count (>= 0) with *out malloc'd (the caller
 * frees it), or a CHAT_TOK_* code with *out NULL and err set. The one
 * tokenization of chat prompts: the server's (oai_prompt_tokens) and
 * sp_chat_tokenize's, so `run --chat` and the server compute the same tokens. */
int32_t chat_tokenize(const struct sp_vocab *v, chat_tmpl t, const chat_msg *m, int n,
                      const chat_tools *tools, int32_t n_max, int32_t **out, int32_t *at_least,
                      char *err, size_t errlen);

#endif
