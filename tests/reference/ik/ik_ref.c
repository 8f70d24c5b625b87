/* ik_ref: golden generations from ik_llama.cpp, through its C API.
 *
 * Not part of the Specula build (CI has no ik_llama.cpp): make_golden.sh in
 * this folder builds it against an ik_llama.cpp build tree and documents how
 * golden files are regenerated.
 *
 *   ik_ref -m MODEL.gguf -p PROMPTS.jsonl [-n 48] [-k 8] [-c 4096] [-t 2]
 *          [--kv f16|q8_0|...] [--fa 0|1] [--name NAME] [--only ID[,ID...]]
 *          [--no-fuse] [--no-graph-reuse] [--parse-special] [-v]
 *
 * For every line {"id": ..., "prompt": ...} of PROMPTS.jsonl it tokenizes
 * the prompt with the model's special tokens added as the vocabulary asks
 * (BOS where add_bos), decodes it in one batch, then decodes N tokens
 * greedily: the next token is the argmax of the raw logits (the lowest id on
 * a tie), no sampler, end-of-generation tokens ignored. It prints one JSON
 * line per prompt in the format of ../shared/reference/generations.jsonl:
 *
 *   {"model": NAME, "prompt_id": ..., "prompt": ..., "prompt_tokens": [...],
 *    "tokens": [...], "steps": [{"id": T, "logprob": L,
 *                                "top": [[id, logprob] x K]}, ...]}
 *
 * Log-probabilities are the natural-log softmax of the raw logits over the
 * full vocabulary, computed in double; numbers are printed as Python's
 * json.dumps prints them (shortest round-trip repr, ensure_ascii).
 * NAME defaults to the model's file name without directory and ".gguf".
 */
#include "llama.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool g_verbose = false;

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void die(const char *msg) {
    fprintf(stderr, "ik_ref: %s\n", msg);
    exit(1);
}

/* ------------------------------------------------------------ tiny JSON */

static void put_utf8(char **o, uint32_t cp) {
    unsigned char *p = (unsigned char *)*o;
    if (cp < 0x80) *p++ = (unsigned char)cp;
    else if (cp < 0x800) { *p++ = 0xC0 | (cp >> 6); *p++ = 0x80 | (cp & 0x3F); }
    else if (cp < 0x10000) {
        *p++ = 0xE0 | (cp >> 12); *p++ = 0x80 | ((cp >> 6) & 0x3F); *p++ = 0x80 | (cp & 0x3F);
    } else {
        *p++ = 0xF0 | (cp >> 18); *p++ = 0x80 | ((cp >> 12) & 0x3F);
        *p++ = 0x80 | ((cp >> 6) & 0x3F); *p++ = 0x80 | (cp & 0x3F);
    }
    *o = (char *)p;
}

static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* Parses the JSON string starting at *p (which points at the opening quote);
 * returns a malloc'd UTF-8 buffer (its length in *len), advances *p. */
static char *parse_str(const char **p, size_t *len) {
    const char *s = *p;
    if (*s != '"') return NULL;
    s++;
    char *out = malloc(strlen(s) * 4 + 1), *o = out;
    while (*s && *s != '"') {
        if (*s != '\\') { *o++ = *s++; continue; }
        s++;
        switch (*s) {
        case 'n': *o++ = '\n'; s++; break;
        case 't': *o++ = '\t'; s++; break;
        case 'r': *o++ = '\r'; s++; break;
        case 'b': *o++ = '\b'; s++; break;
        case 'f': *o++ = '\f'; s++; break;
        case '/': *o++ = '/'; s++; break;
        case '\\': *o++ = '\\'; s++; break;
        case '"': *o++ = '"'; s++; break;
        case 'u': {
            uint32_t cp;
            if (hex4(s + 1, &cp)) { free(out); return NULL; }
            s += 5;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                uint32_t lo;
                if (!hex4(s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                }
            }
            put_utf8(&o, cp);
            break;
        }
        default: free(out); return NULL;
        }
    }
    if (*s != '"') { free(out); return NULL; }
    *p = s + 1;
    *len = (size_t)(o - out);
    *o = 0;
    return out;
}

/* The string value of "key" in a one-line JSON object (flat lookup). */
static char *json_get_str(const char *line, const char *key, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = line;
    while ((p = strstr(p, pat)) != NULL) {
        const char *q = p + strlen(pat);
        while (*q == ' ' || *q == '\t') q++;
        if (*q == ':') {
            q++;
            while (*q == ' ' || *q == '\t') q++;
            return parse_str(&q, len);
        }
        p += strlen(pat);
    }
    return NULL;
}

/* As Python's json.dumps(ensure_ascii=True). */
static void print_json_str(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    putchar('"');
    while (p < e) {
        unsigned c = *p;
        if (c == '"') { fputs("\\\"", stdout); p++; continue; }
        if (c == '\\') { fputs("\\\\", stdout); p++; continue; }
        if (c == '\n') { fputs("\\n", stdout); p++; continue; }
        if (c == '\r') { fputs("\\r", stdout); p++; continue; }
        if (c == '\t') { fputs("\\t", stdout); p++; continue; }
        if (c == '\b') { fputs("\\b", stdout); p++; continue; }
        if (c == '\f') { fputs("\\f", stdout); p++; continue; }
        if (c < 0x20) { printf("\\u%04x", c); p++; continue; }
        if (c < 0x80) { putchar((int)c); p++; continue; }
        uint32_t cp;
        int extra;
        if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; extra = 1; }
        else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; extra = 2; }
        else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; extra = 3; }
        else { printf("\\u%04x", 0xFFFD); p++; continue; }
        if (p + 1 + extra > e) { printf("\\u%04x", 0xFFFD); p = e; continue; } /* truncated */
        p++;
        for (int i = 0; i < extra; i++) cp = (cp << 6) | (*p++ & 0x3F);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            printf("\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
            printf("\\u%04x", cp);
        }
    }
    putchar('"');
}

/* A double as Python's repr: the shortest %.{15,16,17}g that round-trips,
 * with ".0" added to an integral value. */
static void print_double(double v) {
    char buf[64];
    if (isinf(v)) { fputs(v < 0 ? "-Infinity" : "Infinity", stdout); return; }
    if (isnan(v)) { fputs("NaN", stdout); return; }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* Python switches to exponent form at 1e16 and below 1e-4, as %g does
     * for these magnitudes; only the exponent's digits may differ (both
     * write at least two) */
    if (!strpbrk(buf, ".eEni")) strcat(buf, ".0");
    fputs(buf, stdout);
}

/* ------------------------------------------------------------ main */

struct cand { int32_t id; double lp; };

static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->lp != y->lp) return x->lp > y->lp ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static enum ggml_type kv_type(const char *s) {
    static const struct { const char *n; enum ggml_type t; } T[] = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"iq4_nl", GGML_TYPE_IQ4_NL},
    };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (strcmp(s, T[i].n) == 0) return T[i].t;
    fprintf(stderr, "ik_ref: unknown KV type '%s'\n", s);
    exit(1);
}

static void usage(void) {
    fputs("usage: ik_ref -m MODEL.gguf -p PROMPTS.jsonl [-n N=48] [-k K=8] [-c CTX=4096]\n"
          "              [-t THREADS=2] [--kv TYPE=f16] [--kv-k TYPE] [--kv-v TYPE]\n"
          "              [--fa 0|1] [--no-fuse] [--no-graph-reuse] [--name NAME] [--only ID[,ID..]]\n"
          "              [--parse-special] [-v]\n"
          "  --kv sets both K and V cache types (f16, q8_0, ...; a quantized V cache\n"
          "  needs flash attention); --fa defaults to the library's default (on in ik).\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompts_path = NULL, *name = NULL, *only = NULL;
    int n_gen = 48, top_k = 8, n_ctx = 4096, n_threads = 2, fa = -1;
    bool parse_special = false, no_fuse = false, no_reuse = false;
    enum ggml_type tk = GGML_TYPE_F16, tv = GGML_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (usage(), ""))
        if (!strcmp(a, "-m")) model_path = NEXT();
        else if (!strcmp(a, "-p")) prompts_path = NEXT();
        else if (!strcmp(a, "-n")) n_gen = atoi(NEXT());
        else if (!strcmp(a, "-k")) top_k = atoi(NEXT());
        else if (!strcmp(a, "-c")) n_ctx = atoi(NEXT());
        else if (!strcmp(a, "-t")) n_threads = atoi(NEXT());
        else if (!strcmp(a, "--kv")) tk = tv = kv_type(NEXT());
        else if (!strcmp(a, "--kv-k")) tk = kv_type(NEXT());
        else if (!strcmp(a, "--kv-v")) tv = kv_type(NEXT());
        else if (!strcmp(a, "--fa")) fa = atoi(NEXT());
        else if (!strcmp(a, "--name")) name = NEXT();
        else if (!strcmp(a, "--only")) only = NEXT();
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (!strcmp(a, "--no-fuse")) no_fuse = true;
        else if (!strcmp(a, "--no-graph-reuse")) no_reuse = true;
        else if (!strcmp(a, "-v")) g_verbose = true;
        else usage();
#undef NEXT
    }
    if (!model_path || !prompts_path || n_gen < 0 || top_k < 1) usage();

    char name_buf[512];
    if (!name) {
        const char *b = strrchr(model_path, '/');
        snprintf(name_buf, sizeof(name_buf), "%s", b ? b + 1 : model_path);
        size_t l = strlen(name_buf);
        if (l > 5 && !strcmp(name_buf + l - 5, ".gguf")) name_buf[l - 5] = 0;
        name = name_buf;
    }

    llama_log_set(log_cb, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) die("cannot load the model");

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = n_threads;
    cp.type_k = tk;
    cp.type_v = tv;
    if (fa >= 0) cp.flash_attn = fa != 0;
    if (no_fuse) cp.fused_up_gate = cp.fused_mmad = cp.fused_moe_up_gate = false;
    if (no_reuse) cp.graph_reuse = false;
    if (g_verbose)
        fprintf(stderr, "ik_ref: n_ctx %u n_batch %u n_ubatch %u threads %d flash_attn %d "
                "type_k %d type_v %d\n", cp.n_ctx, cp.n_batch, cp.n_ubatch, n_threads,
                (int)cp.flash_attn, (int)cp.type_k, (int)cp.type_v);
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create the context");

    const int n_vocab = llama_n_vocab(model);
    struct cand *cands = malloc(sizeof(*cands) * (size_t)n_vocab);
    if (top_k > n_vocab) top_k = n_vocab;

    FILE *f = fopen(prompts_path, "rb");
    if (!f) die("cannot open the prompts file");
    char *line = NULL;
    size_t cap = 0;
    ssize_t ll;
    int rc = 0;
    while ((ll = getline(&line, &cap, f)) > 0) {
        while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) line[--ll] = 0;
        if (ll == 0) continue;
        size_t id_len = 0, pr_len = 0;
        char *id = json_get_str(line, "id", &id_len);
        char *prompt = json_get_str(line, "prompt", &pr_len);
        if (!id || !prompt) die("a prompts line without string \"id\" and \"prompt\"");
        if (only) {
            bool keep = false;
            const char *s = only;
            while (*s) {
                const char *c = strchr(s, ',');
                size_t n = c ? (size_t)(c - s) : strlen(s);
                if (n == id_len && !memcmp(s, id, n)) keep = true;
                s += n + (c ? 1 : 0);
            }
            if (!keep) { free(id); free(prompt); continue; }
        }

        int cap_tok = (int)pr_len + 16;
        llama_token *toks = malloc(sizeof(llama_token) * ((size_t)cap_tok + (size_t)n_gen + 1));
        int n_prompt = llama_tokenize(model, prompt, (int32_t)pr_len, toks, cap_tok, true,
                                      parse_special);
        if (n_prompt < 0) die("tokenization failed");
        if (n_prompt == 0) die("empty prompt (no tokens)");
        if (n_prompt + n_gen > n_ctx) {
            fprintf(stderr, "ik_ref: %.*s: %d prompt + %d generated tokens exceed -c %d\n",
                    (int)id_len, id, n_prompt, n_gen, n_ctx);
            rc = 1;
            free(toks); free(id); free(prompt);
            continue;
        }

        llama_kv_cache_clear(ctx);
        int32_t *gen = malloc(sizeof(int32_t) * ((size_t)n_gen + 1));
        struct cand *steps = malloc(sizeof(struct cand) * ((size_t)n_gen * (size_t)(top_k + 1) + 1));
        int n_done = 0;
        int pos = 0;
        llama_token *next_in = toks;
        int n_in = n_prompt;
        for (int step = 0; step < n_gen; step++) {
            if (llama_decode(ctx, llama_batch_get_one(next_in, n_in, pos, 0)) != 0) {
                fprintf(stderr, "ik_ref: llama_decode failed at step %d\n", step);
                rc = 1;
                break;
            }
            pos += n_in;
            const float *lg = llama_get_logits_ith(ctx, -1);
            if (!lg) die("no logits");
            /* log-softmax in double over the full vocabulary */
            int best = 0;
            double mx = lg[0];
            for (int j = 1; j < n_vocab; j++)
                if (lg[j] > mx) { mx = lg[j]; best = j; }
            double sum = 0.0;
            for (int j = 0; j < n_vocab; j++) sum += exp((double)lg[j] - mx);
            double lse = mx + log(sum);
            for (int j = 0; j < n_vocab; j++) {
                cands[j].id = j;
                cands[j].lp = (double)lg[j] - lse;
            }
            /* partial selection of the top K (K is small) */
            struct cand *row = steps + (size_t)step * (size_t)(top_k + 1);
            row[0].id = best;
            row[0].lp = (double)lg[best] - lse;
            for (int r = 0; r < top_k; r++) {
                int bi = -1;
                for (int j = 0; j < n_vocab; j++) {
                    if (cands[j].id < 0) continue;
                    if (bi < 0 || cand_cmp(&cands[j], &cands[bi]) < 0) bi = j;
                }
                row[1 + r] = cands[bi];
                cands[bi].id = -1;
            }
            gen[step] = best;
            n_done++;
            toks[n_prompt + step] = best;
            next_in = &toks[n_prompt + step];
            n_in = 1;
        }

        printf("{\"model\": ");
        print_json_str(name, strlen(name));
        printf(", \"prompt_id\": ");
        print_json_str(id, id_len);
        printf(", \"prompt\": ");
        print_json_str(prompt, pr_len);
        printf(", \"prompt_tokens\": [");
        for (int i = 0; i < n_prompt; i++) printf(i ? ", %d" : "%d", toks[i]);
        printf("], \"tokens\": [");
        for (int i = 0; i < n_done; i++) printf(i ? ", %d" : "%d", gen[i]);
        printf("], \"steps\": [");
        for (int s = 0; s < n_done; s++) {
            struct cand *row = steps + (size_t)s * (size_t)(top_k + 1);
            printf("%s{\"id\": %d, \"logprob\": ", s ? ", " : "", row[0].id);
            print_double(row[0].lp);
            printf(", \"top\": [");
            for (int r = 0; r < top_k; r++) {
                printf("%s[%d, ", r ? ", " : "", row[1 + r].id);
                print_double(row[1 + r].lp);
                printf("]");
            }
            printf("]}");
        }
        printf("]}\n");
        fflush(stdout);
        free(gen);
        free(steps);
        free(toks);
        free(id);
        free(prompt);
    }
    free(line);
    fclose(f);
    free(cands);
    llama_free(ctx);
    llama_free_model(model);
    llama_backend_free();
    return rc;
}
