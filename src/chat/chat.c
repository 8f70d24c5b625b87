/* chat.c: the template families Specula knows: their names, how a
 * template's text is recognized as one, the text that ends their turns and
 * the markup their models spell with special tokens. (Their templates
 * themselves are Jinja, in builtin.c.) */
#include "chat/chat.h"

#include <string.h>

static const struct {
    const char *name;
    chat_tmpl t;
} names[] = {
    {"chatml", CHAT_CHATML}, {"qwen", CHAT_CHATML},     {"qwen2", CHAT_CHATML},
    {"llama3", CHAT_LLAMA3}, {"llama-3", CHAT_LLAMA3},  {"llama2", CHAT_LLAMA2},
    {"llama-2", CHAT_LLAMA2}, {"mistral", CHAT_MISTRAL}, {"phi3", CHAT_PHI3},
    {"phi-3", CHAT_PHI3},    {"gemma", CHAT_GEMMA},     {"code", CHAT_CODE},
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
    if (strstr(s, "# ==== file: chat.py ====")) return CHAT_CODE;
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
    case CHAT_CODE: return "code";
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
    case CHAT_CODE: return "# ====";
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
