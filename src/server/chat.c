/* chat.c: chat templates of the common model families, rendered in C. */
#include "server/chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"

static const struct {
    const char *name;
    chat_tmpl t;
} names[] = {
    {"chatml", CHAT_CHATML}, {"qwen", CHAT_CHATML},     {"qwen2", CHAT_CHATML},
    {"llama3", CHAT_LLAMA3}, {"llama-3", CHAT_LLAMA3},  {"llama2", CHAT_LLAMA2},
    {"llama-2", CHAT_LLAMA2}, {"mistral", CHAT_MISTRAL}, {"phi3", CHAT_PHI3},
    {"phi-3", CHAT_PHI3},    {"gemma", CHAT_GEMMA},
};

int chat_tmpl_parse(const char *name) {
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i].name)) return names[i].t;
    return -1;
}

chat_tmpl chat_tmpl_detect(const char *s) {
    if (!s || !*s) return CHAT_NONE;
    if (strstr(s, "<|im_start|>")) return CHAT_CHATML;
    if (strstr(s, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (strstr(s, "<start_of_turn>")) return CHAT_GEMMA;
    if (strstr(s, "<|user|>")) return CHAT_PHI3;
    if (strstr(s, "[INST]")) return strstr(s, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    return CHAT_NONE;
}

const char *chat_tmpl_name(chat_tmpl t) {
    switch (t) {
    case CHAT_CHATML: return "chatml";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_LLAMA2: return "llama2";
    case CHAT_MISTRAL: return "mistral";
    case CHAT_PHI3: return "phi3";
    case CHAT_GEMMA: return "gemma";
    default: return "none";
    }
}

const char *chat_tmpl_eot(chat_tmpl t) {
    switch (t) {
    case CHAT_CHATML: return "<|im_end|>";
    case CHAT_LLAMA3: return "<|eot_id|>";
    case CHAT_LLAMA2:
    case CHAT_MISTRAL: return "</s>";
    case CHAT_PHI3: return "<|end|>";
    case CHAT_GEMMA: return "<end_of_turn>";
    default: return NULL;
    }
}

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT } role;

static int role_of(const char *r) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    return -1;
}

char *chat_render(chat_tmpl t, const chat_msg *m, int n, char *err, size_t errlen) {
    sbuf b = {0};
    for (int i = 0; i < n; i++)
        if (role_of(m[i].role) < 0) {
            snprintf(err, errlen, "messages[%d]: unsupported role '%s' (system, developer, user, "
                     "assistant)", i, m[i].role);
            return NULL;
        }
    /* a family is needed even when there is no message to render */
    if (!chat_tmpl_eot(t)) {
        snprintf(err, errlen, "no chat template");
        return NULL;
    }
    /* an empty conversation (or one system message without content) in a
     * family with no closing text renders as "", not as a NULL buffer that
     * would read as out of memory below */
    sb_add(&b, "", 0);
    /* the families without a system role fold it into the first user turn */
    const char *sys = NULL;
    int first = 0;
    if (n > 0 && role_of(m[0].role) == R_SYSTEM &&
        (t == CHAT_LLAMA2 || t == CHAT_MISTRAL || t == CHAT_GEMMA)) {
        sys = m[0].content ? m[0].content : ""; /* NULL content is empty, as below */
        first = 1;
    }
    for (int i = first; i < n; i++) {
        int r = role_of(m[i].role);
        const char *c = m[i].content ? m[i].content : "";
        const char *rn = r == R_SYSTEM ? "system" : r == R_USER ? "user" : "assistant";
        bool lead = sys && i == first && r == R_USER; /* gets the folded system prompt */
        switch (t) {
        case CHAT_CHATML:
            sb_printf(&b, "<|im_start|>%s\n", rn);
            sb_str(&b, c);
            sb_str(&b, "<|im_end|>\n");
            break;
        case CHAT_LLAMA3: { /* the content is trimmed, as Meta's template does */
            size_t len = strlen(c);
            while (*c && strchr(" \t\n\r", *c)) c++, len--;
            while (len && strchr(" \t\n\r", c[len - 1])) len--;
            sb_printf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n", rn);
            sb_add(&b, c, len);
            sb_str(&b, "<|eot_id|>");
            break;
        }
        case CHAT_PHI3:
            sb_printf(&b, "<|%s|>\n", rn);
            sb_str(&b, c);
            sb_str(&b, "<|end|>\n");
            break;
        case CHAT_GEMMA:
            sb_printf(&b, "<start_of_turn>%s\n", r == R_ASSISTANT ? "model" : "user");
            if (lead) sb_printf(&b, "%s\n\n", sys);
            sb_str(&b, c);
            sb_str(&b, "<end_of_turn>\n");
            break;
        case CHAT_LLAMA2:
        case CHAT_MISTRAL:
            if (r == R_ASSISTANT) {
                sb_printf(&b, t == CHAT_LLAMA2 ? " %s </s>" : "%s</s>", c);
            } else {
                /* a system message later in the conversation becomes a user turn */
                if (i > first && t == CHAT_LLAMA2) sb_str(&b, "<s>");
                sb_str(&b, "[INST] ");
                if (lead && t == CHAT_LLAMA2) sb_printf(&b, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
                else if (lead) sb_printf(&b, "%s\n\n", sys);
                sb_printf(&b, "%s [/INST]", c);
            }
            break;
        default:
            snprintf(err, errlen, "no chat template");
            sb_free(&b);
            return NULL;
        }
    }
    if (sys && first == n) { /* only a system message */
        if (t == CHAT_GEMMA) sb_printf(&b, "<start_of_turn>user\n%s<end_of_turn>\n", sys);
        else if (t == CHAT_LLAMA2) sb_printf(&b, "[INST] <<SYS>>\n%s\n<</SYS>>\n\n [/INST]", sys);
        else sb_printf(&b, "[INST] %s [/INST]", sys);
    }
    switch (t) {
    case CHAT_CHATML: sb_str(&b, "<|im_start|>assistant\n"); break;
    case CHAT_LLAMA3: sb_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case CHAT_PHI3: sb_str(&b, "<|assistant|>\n"); break;
    case CHAT_GEMMA: sb_str(&b, "<start_of_turn>model\n"); break;
    default: break;
    }
    if (b.oom || !b.p) {
        snprintf(err, errlen, "out of memory");
        sb_free(&b);
        return NULL;
    }
    return b.p;
}
