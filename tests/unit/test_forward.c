/* test_forward.c: the batched forward pass agrees with itself, bit for bit:
 * several sequences in one batch give exactly what each gives alone;
 * verifying k tokens in one pass gives exactly what k single steps give;
 * truncation (speculative rollback) restores the state exactly; invalid
 * batches are refused without changing any sequence. At every kernel level
 * this CPU has: each runs in a child process started with
 * SPECULA_KERNELS=<level> (a level the CPU lacks: its cases are counted
 * skips). */
#include <math.h>

#include "kernels/kernels.h"
#include "specula.h"
#include "test.h"

static sp_model *model;
static int32_t V;

static const char *PROMPTS[] = {
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "Привет мир! 日本語",
};
#define NP 3

static sp_context *new_ctx(int n_seq, sp_kv_type kv) {
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_seq_max = n_seq;
    cp.n_ctx = 256;
    cp.n_batch = 128;
    cp.kv_type = kv;
    char err[256];
    sp_context *c = sp_context_create(model, cp, err, sizeof(err));
    if (!c) fprintf(stderr, "context: %s\n", err);
    return c;
}

static float max_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

/* Runs tokens[0..n) of one sequence through c in one batch and copies the
 * logits of every position into out[n][V]. */
static int run_all(sp_context *c, int32_t seq, const int32_t *toks, int n, int32_t pos0, float *out) {
    int32_t pos[128], sq[128];
    int8_t want[128];
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        sq[i] = seq;
        want[i] = 1;
    }
    sp_batch b = {n, toks, pos, sq, want};
    char err[256];
    if (sp_decode(c, &b, err, sizeof(err))) {
        fprintf(stderr, "decode: %s\n", err);
        return -1;
    }
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, sp_get_logits(c, i), V * sizeof(float));
    return 0;
}

static int32_t toks[NP][64];
static int ntok[NP];

static void test_multi_sequence_batch(void) {
    /* alone */
    float *alone[NP];
    for (int p = 0; p < NP; p++) {
        alone[p] = malloc((size_t)ntok[p] * V * sizeof(float));
        sp_context *c = new_ctx(1, SP_KV_F16);
        CHECK(c && run_all(c, 0, toks[p], ntok[p], 0, alone[p]) == 0, "prompt %d alone", p);
        sp_context_free(c);
    }
    /* together, interleaved token by token */
    sp_context *c = new_ctx(NP, SP_KV_F16);
    CHECK(c != NULL, "context for %d sequences", NP);
    if (!c) {
        for (int p = 0; p < NP; p++) free(alone[p]);
        return;
    }
    int32_t bt[192], bp[192], bs[192];
    int8_t want[192];
    int idx[NP][64], n = 0;
    for (int i = 0; i < 64; i++)
        for (int p = 0; p < NP; p++)
            if (i < ntok[p]) {
                bt[n] = toks[p][i];
                bp[n] = i;
                bs[n] = p;
                want[n] = 1;
                idx[p][i] = n++;
            }
    sp_batch b = {n, bt, bp, bs, want};
    char err[256];
    int rc = sp_decode(c, &b, err, sizeof(err));
    CHECK(rc == 0, "batched decode: %s", err);
    for (int p = 0; p < NP && rc == 0; p++)
        for (int i = 0; i < ntok[p]; i++) {
            float d = max_diff(sp_get_logits(c, idx[p][i]), alone[p] + (size_t)i * V, V);
            CHECK(d == 0.0f, "prompt %d position %d differs by %g in a mixed batch", p, i, d);
        }
    /* one decode step for all three sequences at once */
    int32_t nt[NP], np_[NP], ns[NP];
    for (int p = 0; p < NP; p++) {
        nt[p] = 42 + p;
        np_[p] = ntok[p];
        ns[p] = p;
    }
    sp_batch db = {NP, nt, np_, ns, NULL};
    int8_t w3[NP] = {1, 1, 1};
    db.want_logits = w3;
    rc = sp_decode(c, &db, err, sizeof(err));
    CHECK(rc == 0, "decode step: %s", err);
    for (int p = 0; p < NP && rc == 0; p++) {
        sp_context *c1 = new_ctx(1, SP_KV_F16);
        float *tmp = malloc((size_t)(ntok[p] + 1) * V * sizeof(float));
        int32_t all[65];
        memcpy(all, toks[p], ntok[p] * sizeof(int32_t));
        all[ntok[p]] = nt[p];
        const int rc1 = c1 ? run_all(c1, 0, all, ntok[p] + 1, 0, tmp) : -1;
        CHECK(rc1 == 0, "sequence %d alone with its next token", p);
        if (rc1) {
            free(tmp);
            sp_context_free(c1);
            continue;
        }
        float d = max_diff(sp_get_logits(c, p), tmp + (size_t)ntok[p] * V, V);
        CHECK(d == 0.0f, "decode step of sequence %d differs by %g", p, d);
        free(tmp);
        sp_context_free(c1);
    }
    sp_context_free(c);
    for (int p = 0; p < NP; p++) free(alone[p]);
}

static void test_verify_k_equals_steps(void) {
    /* prefill, then k tokens one at a time vs k tokens in one pass; k is
     * larger than a matmul token tile, and the logits must be bit-identical
     * (speculative output equals plain decoding only if they are) */
    const int k = 12;
    float *one = malloc((size_t)k * V * sizeof(float)), *many = malloc((size_t)k * V * sizeof(float));
    int32_t draft[12] = {100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200};
    sp_context *c = new_ctx(1, SP_KV_F16);
    CHECK(c != NULL, "context");
    if (!c) {
        free(one);
        free(many);
        return;
    }
    float *pre = malloc((size_t)ntok[0] * V * sizeof(float));
    CHECK(run_all(c, 0, toks[0], ntok[0], 0, pre) == 0, "prefill");
    free(pre);
    for (int i = 0; i < k; i++)
        CHECK(run_all(c, 0, &draft[i], 1, ntok[0] + i, one + (size_t)i * V) == 0, "step %d", i);
    /* roll back the k tokens and verify them in one pass */
    sp_seq_truncate(c, 0, ntok[0]);
    CHECK(sp_seq_len(c, 0) == ntok[0], "length after truncation %d", sp_seq_len(c, 0));
    CHECK(run_all(c, 0, draft, k, ntok[0], many) == 0, "verify pass");
    for (int i = 0; i < k; i++) {
        float d = max_diff(one + (size_t)i * V, many + (size_t)i * V, V);
        CHECK(d == 0.0f, "position %d: batched verification differs by %g", i, d);
    }
    /* roll back 4, redo 2 of them: same logits as before */
    sp_seq_truncate(c, 0, ntok[0] + 2);
    float *again = malloc((size_t)2 * V * sizeof(float));
    CHECK(run_all(c, 0, draft + 2, 2, ntok[0] + 2, again) == 0, "after rollback");
    for (int i = 0; i < 2; i++) {
        float d = max_diff(again + (size_t)i * V, one + (size_t)(i + 2) * V, V);
        CHECK(d == 0.0f, "after rollback position %d differs by %g", i + 2, d);
    }
    free(again);
    free(one);
    free(many);
    sp_context_free(c);
}

static void test_f32_kv_close_to_f16(void) {
    float *a = malloc((size_t)ntok[1] * V * sizeof(float)), *b = malloc((size_t)ntok[1] * V * sizeof(float));
    sp_context *c16 = new_ctx(1, SP_KV_F16), *c32 = new_ctx(1, SP_KV_F32);
    CHECK(c16 && c32, "contexts");
    if (!c16 || !c32) {
        sp_context_free(c16);
        sp_context_free(c32);
        free(a);
        free(b);
        return;
    }
    CHECK(run_all(c16, 0, toks[1], ntok[1], 0, a) == 0, "f16");
    CHECK(run_all(c32, 0, toks[1], ntok[1], 0, b) == 0, "f32");
    /* the reference models amplify rounding strongly, so the bound is
     * relative to the spread of the logits: garbage would be O(1) */
    const float *la = a + (size_t)(ntok[1] - 1) * V, *lb = b + (size_t)(ntok[1] - 1) * V;
    float lo = la[0], hi = la[0];
    for (int i = 0; i < V; i++) lo = fminf(lo, la[i]), hi = fmaxf(hi, la[i]);
    float d = max_diff(la, lb, V);
    CHECK(d < 0.05f * (hi - lo) && d > 0.0f, "f16 vs f32 KV differ by %g of a logit range %g "
          "(expected small but nonzero)", d, hi - lo);
    sp_context_free(c16);
    sp_context_free(c32);
    free(a);
    free(b);
}

static void test_invalid_batches(void) {
    sp_context *c = new_ctx(2, SP_KV_F16);
    CHECK(c != NULL, "context");
    if (!c) return;
    char err[256];
    int32_t t[2] = {1, 2}, p[2] = {0, 1}, s[2] = {0, 0};
    struct {
        const char *what;
        int32_t tok, pos, seq;
        int n;
    } rows[] = {
        {"token past the vocabulary", 1 << 30, 0, 0, 1},
        {"negative token", -1, 0, 0, 1},
        {"sequence id out of range", 1, 0, 7, 1},
        {"negative sequence id", 1, 0, -1, 1},
        {"position gap", 1, 5, 0, 1},
        {"negative position", 1, -1, 0, 1},
        {"empty batch", 1, 0, 0, 0},
        {"oversized batch", 1, 0, 0, 100000},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        t[0] = rows[i].tok;
        p[0] = rows[i].pos;
        s[0] = rows[i].seq;
        sp_batch b = {rows[i].n, t, p, s, NULL};
        err[0] = 0;
        CHECK(sp_decode(c, &b, err, sizeof(err)) != 0, "%s accepted", rows[i].what);
        CHECK(err[0] != 0, "%s: no message", rows[i].what);
        CHECK(sp_seq_len(c, 0) == 0 && sp_seq_len(c, 1) == 0, "%s changed a sequence", rows[i].what);
    }
    /* context overflow: 256 positions */
    int32_t big[128], bp[128], bs[128] = {0};
    for (int i = 0; i < 128; i++) big[i] = 5, bp[i] = i;
    sp_batch b = {128, big, bp, bs, NULL};
    CHECK(sp_decode(c, &b, err, sizeof(err)) == 0, "first 128: %s", err);
    for (int i = 0; i < 128; i++) bp[i] = 128 + i;
    CHECK(sp_decode(c, &b, err, sizeof(err)) == 0, "second 128: %s", err);
    bp[0] = 256;
    sp_batch one = {1, big, bp, bs, NULL};
    CHECK(sp_decode(c, &one, err, sizeof(err)) != 0, "position 256 accepted in a 256 context");
    CHECK(sp_seq_len(c, 0) == 256, "length %d after refused overflow", sp_seq_len(c, 0));
    sp_context_free(c);
}

static const char *FILES[] = {"ref-llama-spm-f16", "ref-qwen2-gpt2-q4_0"};
#define NF 2
#define CASES_PER_FILE 4

/* One level (in a child process started with SPECULA_KERNELS set). */
static void run_level(const char *level) {
    const char *got = kernels_init();
    if (strcmp(got, level)) {
        t_fail_case(level, "SPECULA_KERNELS did not select the level");
        return;
    }
    for (int f = 0; f < NF; f++) {
        char path[512], err[512];
        snprintf(path, sizeof(path), "%s/models/%s.gguf", t_ref_dir(), FILES[f]);
        model = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
        if (!model) {
            fprintf(stderr, "cannot load %s: %s\n", path, err);
            for (int c = 0; c < CASES_PER_FILE; c++) t_fail_case(FILES[f], "the model does not load");
            continue;
        }
        V = sp_model_get_info(model)->n_vocab;
        for (int p = 0; p < NP; p++)
            ntok[p] = sp_tokenize(sp_model_get_vocab(model), PROMPTS[p], strlen(PROMPTS[p]), toks[p], 64, true, false);
        printf("  %s: model %s\n", level, FILES[f]);
        RUN(test_multi_sequence_batch);
        RUN(test_verify_k_equals_steps);
        RUN(test_f32_kv_close_to_f16);
        RUN(test_invalid_batches);
        sp_model_free(model);
    }
}

int main(int argc, char **argv) {
    static const char *levels[] = {"ref", "avx2", "avx512"};
    if (argc == 3 && !strcmp(argv[1], "--level")) {
        run_level(argv[2]);
        TEST_END();
    }
    for (int l = 0; l < 3; l++) {
        if (!kernels_available(levels[l])) {
            for (int c = 0; c < NF * CASES_PER_FILE; c++) {
                t_cases_skipped++;
                printf("SKIP %s case %d: this CPU cannot run the %s kernels\n", levels[l], c + 1, levels[l]);
            }
            continue;
        }
        char env[64];
        snprintf(env, sizeof env, "SPECULA_KERNELS=%s", levels[l]);
        t_run_child(env, "--level", levels[l], levels[l]);
    }
    TEST_END();
}
