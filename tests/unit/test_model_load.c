/* test_model_load.c: model files that are valid GGUF but not a usable
 * model: each is refused by sp_model_load with a message naming the
 * problem, and never crashes. Built with the project's GGUF writer: one
 * small llama model (n_embd 32, 2 layers, the Llama-2 vocabulary), then one
 * change per table row. */
#include <math.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "specula.h"
#include "test.h"

enum { E = 32, L = 2, H = 4, HK = 2, FF = 64 };

typedef enum {
    OK,
    DROP_TENSOR,   /* arg: tensor name */
    BAD_SHAPE,     /* arg: tensor name, rows doubled */
    BAD_TYPE,      /* arg: tensor name, stored as q4_1 (no kernels here) */
    SET_ARCH,      /* arg: architecture name */
    DROP_KEY,      /* arg: key */
    SET_U32,       /* arg: key, u32 value */
    KEY_AS_ARRAY,  /* arg: key becomes an array of u32 */
    SET_F32,       /* arg: key, f32 value f (a rope.scaling key adds type linear) */
    SET_F64,       /* arg: key, f64 value f */
    SET_STR,       /* arg: key, string value str */
} change;

typedef struct {
    const char *name;
    change what;
    const char *arg;
    uint32_t value;
    const char *expect; /* substring of the error; NULL: must load */
    double f;
    const char *str;
} row;

static const gguf_file *vocab;
static float *noise; /* enough random floats for the largest tensor */

static void add(gguf_writer *w, const row *r, const char *name, int64_t n_in, int64_t n_out) {
    if (r->what == DROP_TENSOR && !strcmp(r->arg, name)) return;
    int64_t ne[2] = {n_in, n_out};
    if (r->what == BAD_SHAPE && !strcmp(r->arg, name)) ne[1] *= 2;
    if (r->what == BAD_TYPE && !strcmp(r->arg, name)) {
        size_t bytes = (size_t)(n_in / 32) * 20 * ne[1]; /* q4_1: 20 bytes / 32 */
        gguf_add_tensor(w, name, (tensor_type)3, ne[1] == 1 ? 1 : 2, ne, noise, bytes);
        return;
    }
    gguf_add_tensor(w, name, SP_TYPE_F32, ne[1] == 1 ? 1 : 2, ne, noise,
                       (size_t)(ne[0] * ne[1]) * sizeof(float));
}

static int build(const row *r, const char *path) {
    gguf_writer *w = gguf_writer_create();
    gguf_copy_kv(w, vocab, "tokenizer.");
    const char *arch = r->what == SET_ARCH ? r->arg : "llama";
    if (!(r->what == DROP_KEY && !strcmp(r->arg, "general.architecture")))
        gguf_set_str(w, "general.architecture", arch);
    struct {
        const char *k;
        uint32_t v;
    } keys[] = {{"llama.embedding_length", E}, {"llama.block_count", L},
                {"llama.feed_forward_length", FF}, {"llama.attention.head_count", H},
                {"llama.attention.head_count_kv", HK}, {"llama.context_length", 256}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (r->what == DROP_KEY && !strcmp(r->arg, keys[i].k)) continue;
        uint32_t v = r->what == SET_U32 && !strcmp(r->arg, keys[i].k) ? r->value : keys[i].v;
        if (r->what == KEY_AS_ARRAY && !strcmp(r->arg, keys[i].k)) {
            uint32_t arr[L] = {v, v};
            gguf_set_arr(w, keys[i].k, SP_GGUF_UINT32, arr, L);
        } else {
            gguf_set_u32(w, keys[i].k, v);
        }
    }
    bool listed = false; /* a count the table above does not write */
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        listed |= r->what == SET_U32 && !strcmp(r->arg, keys[i].k);
    if (r->what == SET_U32 && !listed) gguf_set_u32(w, r->arg, r->value);
    const char *eps = "llama.attention.layer_norm_rms_epsilon";
    if (!((r->what == SET_F32 || r->what == SET_F64 || r->what == SET_STR) && !strcmp(r->arg, eps)))
        gguf_set_f32(w, eps, 1e-5f);
    if (r->what == SET_F32) gguf_set_f32(w, r->arg, (float)r->f);
    if (r->what == SET_F64) gguf_set_scalar(w, r->arg, SP_GGUF_FLOAT64, &r->f);
    if (r->what == SET_STR) gguf_set_str(w, r->arg, r->str);
    if (r->what == SET_F32 && strstr(r->arg, "rope.scaling"))
        gguf_set_str(w, "llama.rope.scaling.type", "linear");
    uint64_t n_vocab;
    gguf_vtype et;
    const void *d;
    gguf_get_arr(vocab, "tokenizer.ggml.tokens", &et, &n_vocab, &d);
    add(w, r, "token_embd.weight", E, (int64_t)n_vocab);
    add(w, r, "output_norm.weight", E, 1);
    char name[64];
    for (int l = 0; l < L; l++) {
#define T(n, a, b) (snprintf(name, sizeof(name), "blk.%d." n, l), add(w, r, name, a, b))
        T("attn_norm.weight", E, 1);
        T("attn_q.weight", E, E);
        T("attn_k.weight", E, E / H * HK);
        T("attn_v.weight", E, E / H * HK);
        T("attn_output.weight", E, E);
        T("ffn_norm.weight", E, 1);
        T("ffn_gate.weight", E, FF);
        T("ffn_up.weight", E, FF);
        T("ffn_down.weight", FF, E);
#undef T
    }
    char err[256];
    int rc = gguf_writer_write(w, path, err, sizeof(err));
    if (rc) fprintf(stderr, "  write: %s\n", err);
    gguf_writer_free(w);
    return rc;
}

static const row ROWS[] = {
    {"valid model", OK, NULL, 0, NULL, 0, NULL},
    {"missing attention tensor", DROP_TENSOR, "blk.1.attn_q.weight", 0, "missing tensor blk.1.attn_q.weight", 0, NULL},
    {"missing embeddings", DROP_TENSOR, "token_embd.weight", 0, "missing tensor token_embd.weight", 0, NULL},
    {"missing norm", DROP_TENSOR, "blk.0.ffn_norm.weight", 0, "missing tensor blk.0.ffn_norm.weight", 0, NULL},
    {"wrong K shape", BAD_SHAPE, "blk.0.attn_k.weight", 0, "blk.0.attn_k.weight has shape", 0, NULL},
    {"embedding rows != vocabulary", BAD_SHAPE, "token_embd.weight", 0, "token_embd.weight has shape", 0, NULL},
    {"unsupported tensor type", BAD_TYPE, "blk.0.ffn_down.weight", 0, "does not support", 0, NULL},
    {"unknown architecture", SET_ARCH, "gpt-neox", 0, "architecture 'gpt-neox' is not supported", 0, NULL},
    {"no architecture", DROP_KEY, "general.architecture", 0, "general.architecture", 0, NULL},
    {"no embedding length", DROP_KEY, "llama.embedding_length", 0, "missing metadata llama.embedding_length", 0, NULL},
    {"no block count", DROP_KEY, "llama.block_count", 0, "missing metadata llama.block_count", 0, NULL},
    {"heads do not divide", SET_U32, "llama.attention.head_count_kv", 3, "inconsistent hyperparameters", 0, NULL},
    {"zero layers", SET_U32, "llama.block_count", 0, "inconsistent hyperparameters", 0, NULL},
    {"absurd embedding", SET_U32, "llama.embedding_length", 1u << 30, "inconsistent hyperparameters", 0, NULL},
    {"per-layer kv heads", KEY_AS_ARRAY, "llama.attention.head_count_kv", HK, "head_count_kv", 0, NULL},
    /* non-finite or absurd hyperparameters */
    {"rope base inf", SET_F32, "llama.rope.freq_base", 0, "rope.freq_base = inf", INFINITY, NULL},
    {"rope base nan", SET_F32, "llama.rope.freq_base", 0, "rope.freq_base = nan", NAN, NULL},
    {"rope base below 1", SET_F32, "llama.rope.freq_base", 0, "rope.freq_base = 0.5", 0.5, NULL},
    {"rope base f64 1e300", SET_F64, "llama.rope.freq_base", 0, "rope.freq_base = inf", 1e300, NULL},
    {"rope base a string", SET_STR, "llama.rope.freq_base", 0, "not a floating-point", 0, "1e4"},
    {"rope base f64 ok", SET_F64, "llama.rope.freq_base", 0, NULL, 500000.0, NULL},
    {"rms eps inf", SET_F32, "llama.attention.layer_norm_rms_epsilon", 0, "epsilon = inf",
     INFINITY, NULL},
    {"rms eps zero", SET_F32, "llama.attention.layer_norm_rms_epsilon", 0, "epsilon = 0", 0, NULL},
    {"rms eps 2", SET_F32, "llama.attention.layer_norm_rms_epsilon", 0, "epsilon = 2", 2, NULL},
    {"context length 0", SET_U32, "llama.context_length", 0, "context_length = 0", 0, NULL},
    {"context length 2^31", SET_U32, "llama.context_length", 1u << 31, "context_length = 2147483648", 0, NULL},
    {"value length", SET_U32, "llama.attention.value_length", 16, "value_length 16", 0, NULL},
    {"rope scaling inf", SET_F32, "llama.rope.scaling.factor", 0, "scaling.factor = inf", INFINITY, NULL},
    {"rope scaling negative", SET_F32, "llama.rope.scaling.factor", 0, "scaling.factor = -2", -2, NULL},
    {"rope scaling tiny", SET_F32, "llama.rope.scaling.factor", 0, "scaling.factor = 1e-20", 1e-20, NULL},
    {"rope scaling 4", SET_F32, "llama.rope.scaling.factor", 0, NULL, 4, NULL},
};

static void check_row(const row *r) {
    char path[] = "/tmp/specula-model-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "temp file");
    if (fd < 0) return;
    close(fd);
    CHECK(build(r, path) == 0, "writing the model");
    char err[512] = "";
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!r->expect) {
        CHECK(m != NULL, "valid model refused: %s", err);
        if (m) { /* and it runs */
            sp_context_params cp = sp_context_default_params();
            cp.n_threads = 2;
            cp.n_ctx = 16;
            sp_context *c = sp_context_create(m, cp, err, sizeof(err));
            int32_t t[3] = {1, 100, 200}, p[3] = {0, 1, 2}, s[3] = {0, 0, 0};
            sp_batch b = {3, t, p, s, NULL};
            CHECK(c && sp_decode(c, &b, err, sizeof(err)) == 0, "decode: %s", err);
            sp_context_free(c);
        }
    } else {
        CHECK(m == NULL, "accepted");
        CHECK(strstr(err, r->expect) != NULL, "message '%s' lacks '%s'", err, r->expect);
    }
    sp_model_free(m);
    unlink(path);
}

int main(void) {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf", t_ref_dir());
    gguf_file *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "%s\n", err);
        printf("RESULT 0 1\n");
        return 1;
    }
    vocab = g;
    size_t n = (size_t)32000 * E * 2;
    noise = malloc(n * sizeof(float));
    uint64_t x = 42;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        noise[i] = (float)((x >> 40) & 0xffff) / 65536.0f * 0.2f - 0.1f;
    }
    for (size_t i = 0; i < sizeof(ROWS) / sizeof(ROWS[0]); i++) RUN_NAMED(check_row, &ROWS[i], ROWS[i].name);
    free(noise);
    gguf_close(g);
    TEST_END();
}
