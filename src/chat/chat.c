/* chat.c: chat templates of the common model families, rendered in C. */
#include "chat/chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

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

const char *const *chat_tmpl_markup(chat_tmpl t) {
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
    static const char *const llama3[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                         NULL};
    static const char *const llama2[] = {"<s>", "</s>", "[INST]", "[/INST]", "<<SYS>>",
                                         "<</SYS>>", NULL};
    static const char *const phi3[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", NULL};
    static const char *const gemma[] = {"<start_of_turn>", "<end_of_turn>", NULL};
    static const char *const none[] = {NULL};
    switch (t) {
    case CHAT_CHATML: return chatml;
    case CHAT_LLAMA3: return llama3;
    case CHAT_LLAMA2:
    case CHAT_MISTRAL: return llama2;
    case CHAT_PHI3: return phi3;
    case CHAT_GEMMA: return gemma;
    default: return none;
    }
}

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT } role;

static int role_of(const char *r) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    return -1;
}

/* The rendered text, and (when track) the spans of it that are markup. */
typedef struct {
    sbuf b;
    bool track, oom;
    chat_span *sp;
    int n, cap;
} render;

/* Appends the template's own text. */
static void mk(render *o, const char *s) {
    size_t start = o->b.len;
    sb_str(&o->b, s);
    if (!o->track || o->b.oom || o->b.len == start) return;
    if (o->n && o->sp[o->n - 1].off + o->sp[o->n - 1].len == start) { /* adjoins: one span */
        o->sp[o->n - 1].len = o->b.len - o->sp[o->n - 1].off;
        return;
    }
    if (o->n == o->cap) {
        int nc = o->cap ? 2 * o->cap : 16;
        chat_span *np = realloc(o->sp, (size_t)nc * sizeof(*np));
        if (!np) {
            o->oom = true;
            return;
        }
        o->sp = np;
        o->cap = nc;
    }
    o->sp[o->n++] = (chat_span){start, o->b.len - start};
}

/* Appends message content (never markup). */
static void body(render *o, const char *s, size_t n) { sb_add(&o->b, s, n); }
static void body_str(render *o, const char *s) { body(o, s, strlen(s)); }

char *chat_render(chat_tmpl t, const chat_msg *m, int n, char *err, size_t errlen) {
    return chat_render_spans(t, m, n, NULL, NULL, err, errlen);
}

char *chat_render_spans(chat_tmpl t, const chat_msg *m, int n, chat_span **spans, int *n_spans,
                        char *err, size_t errlen) {
    render o = {.track = spans != NULL};
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
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
    sb_add(&o.b, "", 0);
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
            mk(&o, "<|im_start|>");
            mk(&o, rn);
            mk(&o, "\n");
            body_str(&o, c);
            mk(&o, "<|im_end|>\n");
            break;
        case CHAT_LLAMA3: { /* the content is trimmed, as Meta's template does */
            size_t len = strlen(c);
            while (*c && strchr(" \t\n\r", *c)) c++, len--;
            while (len && strchr(" \t\n\r", c[len - 1])) len--;
            mk(&o, "<|start_header_id|>");
            mk(&o, rn);
            mk(&o, "<|end_header_id|>\n\n");
            body(&o, c, len);
            mk(&o, "<|eot_id|>");
            break;
        }
        case CHAT_PHI3:
            mk(&o, "<|");
            mk(&o, rn);
            mk(&o, "|>\n");
            body_str(&o, c);
            mk(&o, "<|end|>\n");
            break;
        case CHAT_GEMMA:
            mk(&o, "<start_of_turn>");
            mk(&o, r == R_ASSISTANT ? "model" : "user");
            mk(&o, "\n");
            if (lead) {
                body_str(&o, sys);
                mk(&o, "\n\n");
            }
            body_str(&o, c);
            mk(&o, "<end_of_turn>\n");
            break;
        case CHAT_LLAMA2:
        case CHAT_MISTRAL:
            if (r == R_ASSISTANT) {
                if (t == CHAT_LLAMA2) mk(&o, " ");
                body_str(&o, c);
                mk(&o, t == CHAT_LLAMA2 ? " </s>" : "</s>");
            } else {
                /* a system message later in the conversation becomes a user turn */
                if (i > first && t == CHAT_LLAMA2) mk(&o, "<s>");
                mk(&o, "[INST] ");
                if (lead && t == CHAT_LLAMA2) {
                    mk(&o, "<<SYS>>\n");
                    body_str(&o, sys);
                    mk(&o, "\n<</SYS>>\n\n");
                } else if (lead) {
                    body_str(&o, sys);
                    mk(&o, "\n\n");
                }
                body_str(&o, c);
                mk(&o, " [/INST]");
            }
            break;
        default:
            snprintf(err, errlen, "no chat template");
            sb_free(&o.b);
            free(o.sp);
            return NULL;
        }
    }
    if (sys && first == n) { /* only a system message */
        if (t == CHAT_GEMMA) {
            mk(&o, "<start_of_turn>user\n");
            body_str(&o, sys);
            mk(&o, "<end_of_turn>\n");
        } else if (t == CHAT_LLAMA2) {
            mk(&o, "[INST] <<SYS>>\n");
            body_str(&o, sys);
            mk(&o, "\n<</SYS>>\n\n [/INST]");
        } else {
            mk(&o, "[INST] ");
            body_str(&o, sys);
            mk(&o, " [/INST]");
        }
    }
    switch (t) {
    case CHAT_CHATML: mk(&o, "<|im_start|>assistant\n"); break;
    case CHAT_LLAMA3: mk(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case CHAT_PHI3: mk(&o, "<|assistant|>\n"); break;
    case CHAT_GEMMA: mk(&o, "<start_of_turn>model\n"); break;
    default: break;
    }
    if (o.b.oom || o.oom || !o.b.p) {
        snprintf(err, errlen, "out of memory");
        sb_free(&o.b);
        free(o.sp);
        return NULL;
    }
    if (spans) {
        *spans = o.sp;
        *n_spans = o.n;
    }
    return o.b.p;
}
