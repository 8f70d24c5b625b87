/* chat.h: chat templates rendered in C (no Jinja): the family is recognized
 * from the model's tokenizer.chat_template text or named explicitly. */
#ifndef SP_SERVER_CHAT_H
#define SP_SERVER_CHAT_H

#include <stddef.h>

typedef enum {
    CHAT_NONE = 0,
    CHAT_CHATML,  /* ChatML / Qwen: <|im_start|>role\n...<|im_end|> */
    CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_LLAMA2,  /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_MISTRAL, /* [INST] ... [/INST] (no <<SYS>>) */
    CHAT_PHI3,    /* <|user|>\n...<|end|>\n */
    CHAT_GEMMA,   /* <start_of_turn>user\n...<end_of_turn>\n */
} chat_tmpl;

typedef struct {
    const char *role;    /* system, developer (as system), user, assistant */
    const char *content;
} chat_msg;

/* A template by name (chatml, qwen, llama3, llama2, mistral, phi3, gemma);
 * -1 if unknown. */
int chat_tmpl_parse(const char *name);
/* The family of a Jinja template text; CHAT_NONE if not recognized. */
chat_tmpl chat_tmpl_detect(const char *text);
const char *chat_tmpl_name(chat_tmpl t);
/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>", ...). */
const char *chat_tmpl_eot(chat_tmpl t);
/* The conversation followed by the opening of the assistant's turn, as a
 * malloc'd string (BOS not included: the tokenizer adds it). NULL + err for
 * an unknown role or out of memory. */
char *chat_render(chat_tmpl t, const chat_msg *m, int n, char *err, size_t errlen);

#endif
