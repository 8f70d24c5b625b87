/* chat.h: chat templates. A conversation is rendered by a Jinja template
 * (template.c, through the sandboxed interpreter of src/template): the
 * model's own tokenizer.chat_template, a file, or one of the families
 * Specula names (builtin.c). The family a template's markup belongs to is
 * recognized from its text: it says how tool calls are written and read
 * back, which text ends a turn, and which markup the tokenizer must read
 * as tokens. Used by the server (src/server) and, through the sp_chat_*
 * functions of specula.h, by the command line. */
#ifndef SP_CHAT_CHAT_H
#define SP_CHAT_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

typedef enum {
    CHAT_NONE = 0,
    CHAT_CHATML,  /* ChatML / Qwen: <|im_start|>role\n...<|im_end|> */
    CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_LLAMA2,  /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_MISTRAL, /* [INST] ... [/INST] (no <<SYS>>) */
    CHAT_PHI3,    /* <|user|>\n...<|end|>\n */
    CHAT_GEMMA,   /* <start_of_turn>user\n...<end_of_turn>\n */
    CHAT_CODE,    /* the bundled code models': a Python file, turns ended by "# ====" */
    CHAT_N        /* (the number of families, CHAT_NONE included) */
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
    const char *reasoning; /* assistant: its reasoning_content (NULL: none) */
} chat_msg;

/* A template by name (chatml, qwen, llama3, llama2, mistral, phi3, gemma,
 * code);
 * -1 if unknown. */
int chat_tmpl_parse(const char *name);
/* The family of a Jinja template text (by the markup it writes); CHAT_NONE
 * if not recognized. */
chat_tmpl chat_tmpl_detect(const char *text);
const char *chat_tmpl_name(chat_tmpl t);
/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>", ...). */
const char *chat_tmpl_eot(chat_tmpl t);
/* The texts of a family's markup that models spell with special tokens
 * (e.g. "<|im_start|>"), NULL-terminated (an empty list for CHAT_NONE):
 * the ones that must never be read as tokens inside message content,
 * whatever type the vocabulary gives them. */
const char *const *chat_tmpl_markup(chat_tmpl t);
/* A byte range [off, off + len) of a rendered conversation. */
typedef struct {
    size_t off, len;
} chat_span;

/* ---- templates (template.c, builtin.c) ---- */

/* A compiled template (specula.h's opaque sp_chat_template): immutable once
 * made, shared by every request. */
typedef struct sp_chat_template chat_template;
/* The Jinja text of a family Specula names (builtin.c); NULL for CHAT_NONE. */
const char *chat_builtin_source(chat_tmpl t);
/* source[len] compiled; name names it in errors; family: its markup's
 * family, or -1 to recognize it from the text; bos/eos: the bos_token and
 * eos_token texts (NULL: ""). NULL + err ("chat template NAME: line N:
 * ...") when it does not compile or out of memory. */
chat_template *chat_template_new(const char *source, size_t len, const char *name, int family,
                                 const char *bos, const char *eos, char *err, size_t errlen);
/* The template to use: name a family's (chatml, qwen, llama3, ...) or a
 * file's path (one with '/' or '.'); NULL: model_source, the model's own
 * (NULL or "": none, an error). NULL + err otherwise. */
chat_template *chat_template_choose(const char *model_source, const char *name, const char *bos,
                                    const char *eos, char *err, size_t errlen);
void chat_template_free(chat_template *t);
chat_tmpl chat_template_family(const chat_template *t);
const char *chat_template_name(const chat_template *t);
const char *chat_template_source(const chat_template *t);
/* Whether the template writes reasoning in <think>...</think> blocks. */
bool chat_template_thinks(const chat_template *t);

typedef struct {
    const struct cJSON *tools;  /* the tools offered (an array; NULL or []: none) */
    const struct cJSON *kwargs; /* chat_template_kwargs: more variables (an object), or NULL */
    bool no_generation_prompt;  /* end after the last message (add_generation_prompt false) */
    int64_t now;                /* strftime_now's clock (Unix s); 0: the current time */
    bool *think_open;           /* out (NULL: not asked): the text ends inside a <think>
                                   block, so the output starts in the reasoning */
} chat_render_opts;
/* The conversation m[n] rendered by t (o may be NULL: no tools, the
 * assistant's turn opened), as a malloc'd string, and in *spans (when
 * spans is not NULL; malloc'd, the caller frees) the parts of it the
 * template wrote itself, in order, disjoint and not adjoining: everything
 * but what came from the request. The tokenizer reads special tokens only
 * there, so content cannot forge a turn. A call's arguments reach the
 * template as the object their JSON spells (HF templates write them with
 * tojson). NULL + err when t is NULL, the template fails ("chat template
 * NAME: line N: ...", raise_exception's message included) or out of
 * memory. */
char *chat_template_render(const chat_template *t, const chat_msg *m, int n, const chat_render_opts *o,
                           chat_span **spans, int *n_spans, char *err, size_t errlen);

/* ---- a conversation's tokens (chat_tokenize.c) ---- */

struct sp_vocab;
/* What chat_tokenize returns besides a count. */
enum {
    CHAT_TOK_INVALID = -1,  /* not renderable: no template, an unknown role (err says) */
    CHAT_TOK_NOMEM = -2,    /* out of memory */
    CHAT_TOK_TOO_LONG = -3, /* more than n_max tokens; *at_least is a lower bound */
};
/* The conversation rendered by t (chat_template_render) and tokenized as a
 * chat prompt: BOS/EOS as the vocabulary's add_bos/add_eos say (a BOS the
 * template wrote itself is not added twice), special tokens read
 * only in the template's markup spans, and there the markup's tokens whatever
 * type the vocabulary gives them, so message content cannot forge a turn. At
 * most n_max tokens. Returns the count (>= 0) with *out malloc'd (the caller
 * frees it), or a CHAT_TOK_* code with *out NULL and err set. The one
 * tokenization of chat prompts: the server's (oai_prompt_tokens) and
 * sp_chat_tokenize's, so `run --chat` and the server compute the same tokens. */
int32_t chat_tokenize(const struct sp_vocab *v, const chat_template *t, const chat_msg *m, int n,
                      const chat_render_opts *o, int32_t n_max, int32_t **out, int32_t *at_least,
                      char *err, size_t errlen);

#endif
