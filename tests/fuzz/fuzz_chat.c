/* fuzz_chat.c: chat templates: recognition from template text, names, and
 * rendering of fuzzed conversations in every family.
 *
 * Input: byte 0 picks what to do: bit 0 clear: the rest is template text
 * for chat_tmpl_detect and a name for chat_tmpl_parse; set: the rest is a
 * conversation, messages separated by 0xff bytes, each one role byte
 * (system, developer, user, assistant, tool, or an unknown role; content NULL
 * for some) and its content, rendered with the built-in (Jinja) template of
 * the family in bits 1-3.
 *
 * Checked: detection gives a known family (which has a name and, except
 * CHAT_NONE, an end-of-turn text); rendering refuses exactly the unknown
 * roles and CHAT_NONE, with a message, and otherwise returns a string that
 * ends with the family's assistant opening and holds every user content
 * (llama3 trims white space around contents, so only there the check is
 * on the trimmed text; code writes a content as a comment, so there only
 * single-line ones are checked). */
#include "fuzz_common.h"
#include "chat/chat.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

#define FZC_MAX_MSGS 64

static bool fzc_ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !memcmp(s + n - m, suf, m);
}

static void fzc_detect(const char *text) {
    chat_tmpl t = chat_tmpl_detect(text);
    FZ_ASSERT(t >= CHAT_NONE && t < CHAT_N);
    FZ_ASSERT(chat_tmpl_name(t));
    FZ_ASSERT(t == CHAT_NONE ? !chat_tmpl_eot(t) : chat_tmpl_eot(t) != NULL);
    int p = chat_tmpl_parse(text);
    FZ_ASSERT(p >= -1 && p < CHAT_N && p != CHAT_NONE);
    if (p > 0) FZ_ASSERT(chat_tmpl_parse(chat_tmpl_name((chat_tmpl)p)) == p);
}

static void fzc_render(chat_tmpl t, const char *s, size_t len) {
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "User", ""};
    chat_msg m[FZC_MAX_MSGS] = {0};
    char *parts[FZC_MAX_MSGS];
    int n = 0;
    bool bad_role = false;
    size_t i = 0;
    while (i < len && n < FZC_MAX_MSGS) {
        uint8_t r = (uint8_t)s[i++];
        size_t start = i;
        while (i < len && (uint8_t)s[i] != 0xff) i++;
        parts[n] = malloc(i - start + 1);
        if (!parts[n]) break;
        memcpy(parts[n], s + start, i - start);
        parts[n][i - start] = 0;
        m[n].role = roles[r % 7];
        m[n].content = (r & 0x80) ? NULL : parts[n];
        bad_role |= r % 7 >= 5; /* "User" and "": unknown */
        n++;
        if (i < len) i++; /* the separator */
    }
    char err[256];
    err[0] = 0;
    static chat_template *tm[CHAT_N];
    const char *src = chat_builtin_source(t);
    if (src && !tm[t]) tm[t] = chat_template_new(src, strlen(src), chat_tmpl_name(t), t, "<s>", "</s>", err, sizeof(err));
    FZ_ASSERT(!src || tm[t]);
    char *out = chat_template_render(tm[t], m, n, NULL, NULL, NULL, err, sizeof(err));
    if (bad_role || t == CHAT_NONE) {
        FZ_ASSERT(!out && err[0]);
    } else {
        FZ_ASSERT(out);
        static const char *opening[] = {
            [CHAT_CHATML] = "<|im_start|>assistant\n",
            [CHAT_LLAMA3] = "<|start_header_id|>assistant<|end_header_id|>\n\n",
            [CHAT_PHI3] = "<|assistant|>\n",
            [CHAT_GEMMA] = "<start_of_turn>model\n",
        };
        if (t < (int)(sizeof(opening) / sizeof(opening[0])) && opening[t])
            FZ_ASSERT(fzc_ends_with(out, opening[t]));
        for (int k = 0; k < n; k++) {
            if (!m[k].content || strcmp(m[k].role, "user")) continue;
            const char *c = m[k].content;
            size_t cl = strlen(c);
            if (t == CHAT_LLAMA3) { /* trimmed as Python strips: past ASCII white space, only
                                       contents whose ends are plainly not space are checked */
                while (cl && strchr(" \t\n\r\v\f\x1c\x1d\x1e\x1f", *c)) c++, cl--;
                while (cl && strchr(" \t\n\r\v\f\x1c\x1d\x1e\x1f", c[cl - 1])) cl--;
                if (cl && ((unsigned char)c[0] >= 0x80 || (unsigned char)c[cl - 1] >= 0x80)) continue;
            }
            if (t == CHAT_CODE && memchr(c, '\n', cl)) continue; /* a comment: "# " after each newline */
            FZ_ASSERT(cl == 0 || memmem(out, strlen(out), c, cl));
        }
    }
    free(out);
    for (int k = 0; k < n; k++) free(parts[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    char *s = malloc(size);
    if (!s) return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    if (!(mode & 1)) fzc_detect(s);
    else fzc_render((chat_tmpl)((mode >> 1) % CHAT_N), s, size - 1);
    free(s);
    return 0;
}
