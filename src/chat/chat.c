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
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                                         NULL};
    static const char *const llama3[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                         NULL};
    static const char *const llama2[] = {"<s>", "</s>", "[INST]", "[/INST]", "<<SYS>>",
                                         "<</SYS>>", NULL};
    static const char *const mistral[] = {"<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                          "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]",
                                          "[/TOOL_RESULTS]", NULL};
    static const char *const phi3[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", NULL};
    static const char *const gemma[] = {"<start_of_turn>", "<end_of_turn>", NULL};
    static const char *const none[] = {NULL};
    switch (t) {
    case CHAT_CHATML: return chatml;
    case CHAT_LLAMA3: return llama3;
    case CHAT_LLAMA2: return llama2;
    case CHAT_MISTRAL: return mistral;
    case CHAT_PHI3: return phi3;
    case CHAT_GEMMA: return gemma;
    default: return none;
    }
}

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL } role;

static int role_of(const char *r) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return R_SYSTEM;
    if (!strcmp(r, "user")) return R_USER;
    if (!strcmp(r, "assistant")) return R_ASSISTANT;
    if (!strcmp(r, "tool")) return R_TOOL;
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
/* Content as a JSON string (a call's name or id in the family's JSON). */
static void body_json(render *o, const char *s) { sb_json_str(&o->b, s, strlen(s)); }

/* ---- tools, in each family's words ---- */

/* The tools' definitions (the client's JSON is content, the rest markup). */
static void tools_block(render *o, chat_tmpl t, const chat_tools *tl) {
    switch (t) {
    case CHAT_CHATML: /* Qwen 2.5's words */
        mk(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (int i = 0; i < tl->n; i++) {
            mk(o, "\n");
            body_str(o, tl->defs[i]);
        }
        mk(o, "\n</tools>\n\nFor each function call, return a json object with function name and "
              "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
              "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
        return;
    case CHAT_LLAMA3: /* Llama 3.1's, at the head of the first user message */
        mk(o, "Given the following functions, please respond with a JSON for a function call with "
              "its proper arguments that best answers the given prompt.\n\nRespond in the format "
              "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
              "Do not use variables.\n\n");
        for (int i = 0; i < tl->n; i++) {
            body_str(o, tl->defs[i]);
            mk(o, "\n\n");
        }
        return;
    case CHAT_MISTRAL: /* v0.3's, before the last user turn */
        mk(o, "[AVAILABLE_TOOLS] [");
        for (int i = 0; i < tl->n; i++) {
            if (i) mk(o, ", ");
            body_str(o, tl->defs[i]);
        }
        mk(o, "][/AVAILABLE_TOOLS]");
        return;
    default: /* no markup of its own: an instruction in the system text */
        mk(o, "# Tools\n\nYou may call one of these functions. To call one, answer with only a JSON "
              "object {\"name\": <the function's name>, \"arguments\": <its arguments>}.\n");
        for (int i = 0; i < tl->n; i++) {
            mk(o, "\n");
            body_str(o, tl->defs[i]);
        }
    }
}

/* An assistant's tool calls as the family writes them. */
static void calls_block(render *o, chat_tmpl t, const chat_msg *m) {
    for (int k = 0; k < m->n_calls; k++) {
        const chat_call *c = &m->calls[k];
        if (t == CHAT_CHATML) mk(o, "\n<tool_call>\n{\"name\": ");
        else if (t == CHAT_MISTRAL) mk(o, k ? ", {\"name\": " : "[TOOL_CALLS] [{\"name\": ");
        else mk(o, k ? "\n{\"name\": " : "{\"name\": ");
        body_json(o, c->name ? c->name : "");
        mk(o, t == CHAT_LLAMA3 ? ", \"parameters\": " : ", \"arguments\": ");
        body_str(o, c->arguments && c->arguments[0] ? c->arguments : "{}");
        if (t == CHAT_MISTRAL && c->id) {
            mk(o, ", \"id\": ");
            body_json(o, c->id);
        }
        mk(o, t == CHAT_CHATML ? "}\n</tool_call>" : "}");
    }
    if (t == CHAT_MISTRAL && m->n_calls) mk(o, "]");
}

/* A tool's result inside its turn (llama3's ipython turn holds it bare). */
static void result_block(render *o, chat_tmpl t, const chat_msg *m, const char *c, size_t len) {
    if (t == CHAT_LLAMA3) {
        body(o, c, len);
    } else if (t == CHAT_MISTRAL) {
        mk(o, "[TOOL_RESULTS] {\"content\": ");
        body(o, c, len);
        if (m->call_id) {
            mk(o, ", \"call_id\": ");
            body_json(o, m->call_id);
        }
        mk(o, "}[/TOOL_RESULTS]");
    } else {
        mk(o, t == CHAT_CHATML ? "\n<tool_response>\n" : "<tool_response>\n");
        body(o, c, len);
        mk(o, "\n</tool_response>");
    }
}

/* A message's content inside its turn: a tool's result, or the text and
 * then any tool calls. */
static void content(render *o, chat_tmpl t, const chat_msg *m, const char *c, size_t len) {
    if (role_of(m->role) == R_TOOL) {
        result_block(o, t, m, c, len);
        return;
    }
    body(o, c, len);
    if (m->n_calls && len && t != CHAT_CHATML) mk(o, "\n");
    calls_block(o, t, m);
}

/* ---- the conversation ---- */

typedef struct {
    render o;
    chat_tmpl t;
    const chat_msg *m;
    int n;
    const chat_tools *tools;   /* NULL when none */
    const char *sys;           /* folded families: the system text for the first user turn */
    bool fold;                 /* ... which has one (the system message or the tools) */
    int first;                 /* the first message rendered as a turn */
    int tools_at;              /* the message the tools go before (llama3, mistral); -1: with
                                  the system text */
} conv;

/* The system text: the system message's content, then the tools (the
 * families that list them there). */
static void sys_text(conv *c, const char *s, size_t len) {
    body(&c->o, s, len);
    if (!c->tools || c->tools_at >= 0) return;
    if (len) mk(&c->o, "\n\n");
    tools_block(&c->o, c->t, c->tools);
}

/* Message i as a turn of family c->t. */
static void turn(conv *c, int i) {
    render *o = &c->o;
    const chat_msg *m = &c->m[i];
    const int r = role_of(m->role);
    const char *s = m->content ? m->content : "";
    const char *rn = r == R_SYSTEM ? "system" : r == R_ASSISTANT ? "assistant" : "user";
    const bool lead = c->fold && i == c->first && r == R_USER; /* gets the folded system text */
    const bool tool_prev = i > 0 && role_of(c->m[i - 1].role) == R_TOOL;
    const bool tool_next = i + 1 < c->n && role_of(c->m[i + 1].role) == R_TOOL;
    switch (c->t) {
    case CHAT_CHATML:
        if (r == R_TOOL) { /* a run of results is one user turn */
            if (!tool_prev) mk(o, "<|im_start|>user");
            result_block(o, c->t, m, s, strlen(s));
            if (!tool_next) mk(o, "<|im_end|>\n");
            break;
        }
        mk(o, "<|im_start|>");
        mk(o, rn);
        if (!m->n_calls || s[0]) mk(o, "\n");
        if (r == R_SYSTEM && i == 0) sys_text(c, s, strlen(s));
        else content(o, c->t, m, s, strlen(s));
        mk(o, "<|im_end|>\n");
        break;
    case CHAT_LLAMA3: { /* the content is trimmed, as Meta's template does */
        size_t len = strlen(s);
        while (*s && strchr(" \t\n\r", *s)) s++, len--;
        while (len && strchr(" \t\n\r", s[len - 1])) len--;
        mk(o, "<|start_header_id|>");
        mk(o, r == R_TOOL ? "ipython" : rn);
        mk(o, "<|end_header_id|>\n\n");
        if (c->tools && i == c->tools_at) tools_block(o, c->t, c->tools);
        if (r == R_SYSTEM && i == 0) sys_text(c, s, len);
        else if (r == R_ASSISTANT && m->n_calls) content(o, c->t, m, "", 0); /* Meta's: the call alone */
        else content(o, c->t, m, s, len);
        mk(o, "<|eot_id|>");
        break;
    }
    case CHAT_PHI3:
        mk(o, "<|");
        mk(o, rn);
        mk(o, "|>\n");
        if (r == R_SYSTEM && i == 0) sys_text(c, s, strlen(s));
        else content(o, c->t, m, s, strlen(s));
        mk(o, "<|end|>\n");
        break;
    case CHAT_GEMMA:
        mk(o, "<start_of_turn>");
        mk(o, r == R_ASSISTANT ? "model" : "user");
        mk(o, "\n");
        if (lead) {
            sys_text(c, c->sys, strlen(c->sys));
            mk(o, "\n\n");
        }
        content(o, c->t, m, s, strlen(s));
        mk(o, "<end_of_turn>\n");
        break;
    case CHAT_LLAMA2:
    case CHAT_MISTRAL:
        if (r == R_TOOL && c->t == CHAT_MISTRAL) {
            result_block(o, c->t, m, s, strlen(s));
        } else if (r == R_ASSISTANT) {
            if (c->t == CHAT_LLAMA2) mk(o, " ");
            content(o, c->t, m, s, strlen(s));
            mk(o, c->t == CHAT_LLAMA2 ? " </s>" : "</s>");
        } else {
            /* a system message later in the conversation becomes a user turn */
            if (i > c->first && c->t == CHAT_LLAMA2) mk(o, "<s>");
            if (c->tools && i == c->tools_at) tools_block(o, c->t, c->tools);
            mk(o, "[INST] ");
            if (lead && c->t == CHAT_LLAMA2) {
                mk(o, "<<SYS>>\n");
                sys_text(c, c->sys, strlen(c->sys));
                mk(o, "\n<</SYS>>\n\n");
            } else if (lead) {
                sys_text(c, c->sys, strlen(c->sys));
                mk(o, "\n\n");
            }
            content(o, c->t, m, s, strlen(s));
            mk(o, " [/INST]");
        }
        break;
    default:
        break;
    }
}

/* Where the tools go: before the first user message (llama3) or the last
 * (mistral), else (or without one) with the system text. */
static int tools_place(chat_tmpl t, const chat_msg *m, int n) {
    int at = -1;
    for (int i = 0; i < n && (t == CHAT_MISTRAL || at < 0); i++)
        if (role_of(m[i].role) == R_USER) at = i;
    return t == CHAT_LLAMA3 || t == CHAT_MISTRAL ? at : -1;
}

/* Before the turns: the system text of a conversation that has none (the
 * tools), and the opening after them; after: the assistant's opening. */
static void frame(conv *c, bool after) {
    render *o = &c->o;
    const chat_tmpl t = c->t;
    const bool sys0 = c->n > 0 && role_of(c->m[0].role) == R_SYSTEM;
    if (!after) {
        if (!c->tools || c->tools_at >= 0 || sys0 || c->fold) return;
        mk(o, t == CHAT_CHATML ? "<|im_start|>system\n" : t == CHAT_PHI3 ? "<|system|>\n"
                                                        : "<|start_header_id|>system<|end_header_id|>\n\n");
        sys_text(c, "", 0);
        mk(o, t == CHAT_CHATML ? "<|im_end|>\n" : t == CHAT_PHI3 ? "<|end|>\n" : "<|eot_id|>");
        return;
    }
    if (c->fold && c->first == c->n) { /* only a system text */
        if (t == CHAT_GEMMA) {
            mk(o, "<start_of_turn>user\n");
            sys_text(c, c->sys, strlen(c->sys));
            mk(o, "<end_of_turn>\n");
        } else if (t == CHAT_LLAMA2) {
            mk(o, "[INST] <<SYS>>\n");
            sys_text(c, c->sys, strlen(c->sys));
            mk(o, "\n<</SYS>>\n\n [/INST]");
        } else {
            mk(o, "[INST] ");
            sys_text(c, c->sys, strlen(c->sys));
            mk(o, " [/INST]");
        }
    }
    switch (t) {
    case CHAT_CHATML: mk(o, "<|im_start|>assistant\n"); break;
    case CHAT_LLAMA3: mk(o, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case CHAT_PHI3: mk(o, "<|assistant|>\n"); break;
    case CHAT_GEMMA: mk(o, "<start_of_turn>model\n"); break;
    default: break;
    }
}

char *chat_render(chat_tmpl t, const chat_msg *m, int n, char *err, size_t errlen) {
    return chat_render_spans(t, m, n, NULL, NULL, NULL, err, errlen);
}

char *chat_render_spans(chat_tmpl t, const chat_msg *m, int n, const chat_tools *tools,
                        chat_span **spans, int *n_spans, char *err, size_t errlen) {
    conv c = {.o = {.track = spans != NULL}, .t = t, .m = m, .n = n,
              .tools = tools && tools->n > 0 ? tools : NULL};
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    for (int i = 0; i < n; i++)
        if (role_of(m[i].role) < 0) {
            snprintf(err, errlen, "messages[%d]: unsupported role '%s' (system, developer, user, "
                     "assistant, tool)", i, m[i].role);
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
    sb_add(&c.o.b, "", 0);
    c.tools_at = tools_place(t, m, n);
    /* the families without a system role fold it (and the tools listed
     * there) into the first user turn */
    if (t == CHAT_LLAMA2 || t == CHAT_MISTRAL || t == CHAT_GEMMA) {
        if (n > 0 && role_of(m[0].role) == R_SYSTEM) {
            c.sys = m[0].content ? m[0].content : ""; /* NULL content is empty, as below */
            c.first = 1;
        }
        c.fold = c.sys || (c.tools && c.tools_at < 0);
        if (!c.sys) c.sys = "";
    }
    frame(&c, false);
    for (int i = c.first; i < n; i++) turn(&c, i);
    frame(&c, true);
    if (c.o.b.oom || c.o.oom || !c.o.b.p) {
        snprintf(err, errlen, "out of memory");
        sb_free(&c.o.b);
        free(c.o.sp);
        return NULL;
    }
    if (spans) {
        *spans = c.o.sp;
        *n_spans = c.o.n;
    } else {
        free(c.o.sp);
    }
    return c.o.b.p;
}
