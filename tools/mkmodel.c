/* mkmodel: writes a GGUF model of any llama/qwen2/qwen3/gemma3/phi3/smollm3
 * shape and tensor type with seeded random weights and a vocabulary copied
 * from another GGUF.
 *
 * The tensor names, shapes and metadata keys are those of llama.cpp's own
 * files of each family (as its convert_hf_to_gguf.py writes them), so the
 * output loads in llama.cpp as well as here (which is how reference outputs
 * for arbitrary shapes are produced).
 *
 * Weights are generated and quantized row by row, in parallel, and streamed
 * to the file, so memory stays bounded (a few tens of MB) whatever the model
 * size. Every row has its own PRNG stream seeded from (seed, tensor name,
 * row), so the output is identical for any thread count, and a tensor's
 * values do not depend on which other tensors the model has.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

/* ---- options ---------------------------------------------------------- */

typedef enum { WT_F32, WT_F16, WT_BF16, WT_Q8_0, WT_Q4_0, WT_Q5_0, WT_Q5_1, WT_Q4_K, WT_Q6_K, WT_Q4_K_M } wtype;

static const struct {
    const char *name;
    tensor_type type;      /* the type of the 2D weights (Q4_K_M: the base type) */
    uint32_t ftype;    /* llama.cpp's general.file_type (llama_ftype) */
} wtypes[] = {
    [WT_F32] = {"f32", SP_TYPE_F32, 0},     [WT_F16] = {"f16", SP_TYPE_F16, 1},
    [WT_BF16] = {"bf16", SP_TYPE_BF16, 32}, [WT_Q8_0] = {"q8_0", SP_TYPE_Q8_0, 7},
    [WT_Q4_0] = {"q4_0", SP_TYPE_Q4_0, 2},  [WT_Q5_0] = {"q5_0", SP_TYPE_Q5_0, 8},
    [WT_Q5_1] = {"q5_1", SP_TYPE_Q5_1, 9},  [WT_Q4_K] = {"q4_k", SP_TYPE_Q4_K, 14},
    [WT_Q6_K] = {"q6_k", SP_TYPE_Q6_K, 18}, [WT_Q4_K_M] = {"q4_k_m", SP_TYPE_Q4_K, 15},
};

typedef enum { A_LLAMA, A_QWEN2, A_QWEN3, A_GEMMA3, A_PHI3, A_SMOLLM3, A_QWEN3MOE } arch_id;

static const char *const arch_names[] = {
    [A_LLAMA] = "llama", [A_QWEN2] = "qwen2", [A_QWEN3] = "qwen3",
    [A_GEMMA3] = "gemma3", [A_PHI3] = "phi3", [A_SMOLLM3] = "smollm3", [A_QWEN3MOE] = "qwen3moe",
};

typedef struct {
    const char *out, *vocab, *arch, *name;
    arch_id a;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, ctx;
    int64_t n_expert, n_expert_used, n_ff_exp; /* qwen3moe */
    int64_t head_dim;  /* --head-dim, 0: n_embd / n_head (resolved in parse_args) */
    int64_t rope_dims; /* --rope-dims, 0: the head dimension (resolved) */
    int64_t swa;       /* --swa, -1: not given */
    int64_t lr_orig;   /* --longrope ORIGCTX, 0: off */
    float rope_linear; /* --rope-linear, 0: off */
    wtype wt;
    bool tied, head_dim_set;
    float rope_base, eps;
    uint64_t seed;
    bool llama3;
    double l3_factor, l3_low, l3_high, l3_orig;
    int threads;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mkmodel -o OUT.gguf --vocab-from VOCAB.gguf [options]\n"
            "\n"
            "Writes a GGUF model with seeded random weights and the tokenizer of VOCAB.gguf.\n"
            "\n"
            "  --arch A                 architecture: llama (default), qwen2 (q/k/v biases),\n"
            "                           qwen3 (per-head q/k RMSNorm), gemma3 (q/k norms, sandwich\n"
            "                           norms, GELU, 5 sliding layers per global one), phi3 (fused\n"
            "                           qkv and gate|up), smollm3 (no RoPE on every 4th layer),\n"
            "                           qwen3moe (qwen3 with a mixture-of-experts FFN)\n"
            "  --n-expert N             qwen3moe: experts per layer (default 8)\n"
            "  --n-expert-used N        qwen3moe: experts per token (default 2)\n"
            "  --n-ff-exp N             qwen3moe: an expert's hidden size (default --n-ff)\n"
            "  --n-embd N               embedding width (default 256)\n"
            "  --n-layer N              layers (default 4)\n"
            "  --n-head N               attention heads (default 8)\n"
            "  --n-head-kv N            key/value heads (default 4)\n"
            "  --n-ff N                 feed-forward width (default 688)\n"
            "  --type T                 weight type: f32 f16 bf16 q8_0 q4_0 q5_0 q5_1 q4_k q6_k q4_k_m\n"
            "                           (default f16; norms and biases are always f32)\n"
            "  --tied                   no output.weight: the output reuses token_embd\n"
            "  --rope-base F            RoPE frequency base (default 10000; gemma3: 1000000,\n"
            "                           its global layers' base: the sliding ones use 10000)\n"
            "  --head-dim N             head dimension when not n_embd/n_head (attention.key_length\n"
            "                           and value_length; not phi3)\n"
            "  --swa N                  sliding window (gemma3: its sliding layers, default 512;\n"
            "                           phi3: every layer, default 0 = none)\n"
            "  --rope-dims N            phi3: rotate only the first N dims of each head\n"
            "  --longrope ORIGCTX       phi3: LongRoPE short/long factors (rope_factors_short/long),\n"
            "                           original_context_length ORIGCTX (< --ctx) and the\n"
            "                           converter's attn_factor sqrt(1 + ln(ctx/orig) / ln(orig))\n"
            "  --rope-linear F          gemma3: linear RoPE scaling by F on the global layers\n"
            "  --eps F                  RMSNorm epsilon (default 1e-5)\n"
            "  --ctx N                  context length (default 2048)\n"
            "  --seed N                 weight seed (default 42)\n"
            "  --name NAME              general.name (default specula-random-ARCH; phi3: -phi)\n"
            "  --rope-scaling-llama3 FACTOR,LOW,HIGH,ORIGCTX\n"
            "                           llama 3.1 RoPE scaling (writes rope_freqs.weight)\n"
            "  --threads N              worker threads (default: all CPUs)\n");
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_f32(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Returns 0, or 2 after printing a message (the caller exits). */
static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.arch = "llama", .a = A_LLAMA, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
                .n_ff = 688, .ctx = 2048, .wt = WT_F16, .rope_base = 0, .eps = 1e-5f,
                .seed = 42, .threads = 0, .swa = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--tied")) {
            o->tied = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mkmodel: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int64_t n;
        bool ok = true;
        if (!strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--vocab-from")) o->vocab = v;
        else if (!strcmp(a, "--name")) o->name = v;
        else if (!strcmp(a, "--arch")) {
            ok = false;
            for (size_t k = 0; k < sizeof arch_names / sizeof arch_names[0]; k++)
                if (!strcmp(v, arch_names[k])) { o->a = (arch_id)k; o->arch = arch_names[k]; ok = true; }
        } else if (!strcmp(a, "--type")) {
            ok = false;
            for (size_t t = 0; t < sizeof wtypes / sizeof wtypes[0]; t++)
                if (!strcasecmp(v, wtypes[t].name)) { o->wt = (wtype)t; ok = true; }
        }
        else if (!strcmp(a, "--n-embd")) ok = parse_i64(v, 1, 1 << 16, &o->n_embd);
        else if (!strcmp(a, "--n-layer")) ok = parse_i64(v, 1, 1024, &o->n_layer);
        else if (!strcmp(a, "--n-head")) ok = parse_i64(v, 1, 4096, &o->n_head);
        else if (!strcmp(a, "--n-head-kv")) ok = parse_i64(v, 1, 4096, &o->n_head_kv);
        else if (!strcmp(a, "--n-ff")) ok = parse_i64(v, 1, 1 << 20, &o->n_ff);
        else if (!strcmp(a, "--n-expert")) ok = parse_i64(v, 1, 1024, &o->n_expert);
        else if (!strcmp(a, "--n-expert-used")) ok = parse_i64(v, 1, 64, &o->n_expert_used);
        else if (!strcmp(a, "--n-ff-exp")) ok = parse_i64(v, 1, 1 << 20, &o->n_ff_exp);
        else if (!strcmp(a, "--ctx")) ok = parse_i64(v, 1, INT32_MAX, &o->ctx);
        else if (!strcmp(a, "--head-dim")) {
            ok = parse_i64(v, 2, 1 << 14, &o->head_dim);
            o->head_dim_set = true;
        } else if (!strcmp(a, "--rope-dims")) ok = parse_i64(v, 2, 1 << 14, &o->rope_dims);
        else if (!strcmp(a, "--swa")) ok = parse_i64(v, 0, INT32_MAX, &o->swa);
        else if (!strcmp(a, "--longrope")) ok = parse_i64(v, 2, INT32_MAX, &o->lr_orig);
        else if (!strcmp(a, "--rope-linear")) ok = parse_f32(v, &o->rope_linear) && o->rope_linear > 0;
        else if (!strcmp(a, "--rope-base")) ok = parse_f32(v, &o->rope_base) && o->rope_base > 0;
        else if (!strcmp(a, "--eps")) ok = parse_f32(v, &o->eps) && o->eps > 0;
        else if (!strcmp(a, "--seed")) {
            ok = parse_i64(v, 0, INT64_MAX, &n);
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--threads")) {
            ok = parse_i64(v, 1, 1024, &n);
            o->threads = (int)n;
        } else if (!strcmp(a, "--rope-scaling-llama3")) {
            char c;
            ok = sscanf(v, "%lf,%lf,%lf,%lf%c", &o->l3_factor, &o->l3_low, &o->l3_high, &o->l3_orig, &c) == 4 &&
                 o->l3_factor > 0 && o->l3_low > 0 && o->l3_high > o->l3_low && o->l3_orig > 0;
            o->llama3 = true;
        } else {
            fprintf(stderr, "mkmodel: unknown option %s\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "mkmodel: invalid value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o->out || !o->vocab) {
        fprintf(stderr, "mkmodel: -o and --vocab-from are required\n");
        return 2;
    }
    if (o->head_dim_set && o->a == A_PHI3) {
        /* llama.cpp's phi3 takes the head size as n_embd / n_head (the fused
         * qkv's K starts at row n_embd) and its converter writes no key_length */
        fprintf(stderr, "mkmodel: --head-dim does not apply to --arch phi3\n");
        return 2;
    }
    if (!o->head_dim_set && o->n_embd % o->n_head) {
        fprintf(stderr, "mkmodel: --n-embd %" PRId64 " is not a multiple of --n-head %" PRId64 "\n", o->n_embd,
                o->n_head);
        return 2;
    }
    if (!o->head_dim_set) o->head_dim = o->n_embd / o->n_head;
    if ((o->n_expert || o->n_expert_used || o->n_ff_exp) && o->a != A_QWEN3MOE) {
        fprintf(stderr, "mkmodel: --n-expert, --n-expert-used and --n-ff-exp apply to --arch qwen3moe only\n");
        return 2;
    }
    if (!o->n_expert) o->n_expert = 8;
    if (!o->n_expert_used) o->n_expert_used = 2;
    if (!o->n_ff_exp) o->n_ff_exp = o->n_ff;
    if (o->n_expert_used > o->n_expert) {
        fprintf(stderr, "mkmodel: --n-expert-used %" PRId64 " is more than --n-expert %" PRId64 "\n",
                o->n_expert_used, o->n_expert);
        return 2;
    }
    if (o->head_dim % 2) {
        fprintf(stderr, "mkmodel: head dimension %" PRId64 " must be even (RoPE rotates pairs)\n", o->head_dim);
        return 2;
    }
    if (o->rope_dims && o->a != A_PHI3) {
        fprintf(stderr, "mkmodel: --rope-dims applies to --arch phi3 only\n");
        return 2;
    }
    if (o->rope_dims && (o->rope_dims % 2 || o->rope_dims > o->head_dim)) {
        fprintf(stderr, "mkmodel: --rope-dims %" PRId64 " must be even and at most the head dimension %" PRId64 "\n",
                o->rope_dims, o->head_dim);
        return 2;
    }
    if (!o->rope_dims) o->rope_dims = o->head_dim;
    if (o->swa >= 0 && o->a != A_GEMMA3 && o->a != A_PHI3) {
        fprintf(stderr, "mkmodel: --swa applies to --arch gemma3 and phi3 only\n");
        return 2;
    }
    if (o->a == A_GEMMA3 && o->swa == 0) {
        fprintf(stderr, "mkmodel: gemma3 needs a sliding window (--swa N, N > 0)\n");
        return 2;
    }
    if (o->swa < 0) o->swa = o->a == A_GEMMA3 ? 512 : 0;
    if (o->lr_orig && o->a != A_PHI3) {
        fprintf(stderr, "mkmodel: --longrope applies to --arch phi3 only\n");
        return 2;
    }
    if (o->lr_orig && o->lr_orig >= o->ctx) {
        fprintf(stderr, "mkmodel: --longrope %" PRId64 " must be below --ctx %" PRId64 "\n", o->lr_orig, o->ctx);
        return 2;
    }
    if (o->rope_linear > 0 && o->a != A_GEMMA3) {
        fprintf(stderr, "mkmodel: --rope-linear applies to --arch gemma3 only\n");
        return 2;
    }
    if (o->rope_base == 0) o->rope_base = o->a == A_GEMMA3 ? 1000000.0f : 10000.0f;
    if (o->n_head % o->n_head_kv) {
        fprintf(stderr, "mkmodel: --n-head %" PRId64 " is not a multiple of --n-head-kv %" PRId64 "\n",
                o->n_head, o->n_head_kv);
        return 2;
    }
    if (o->llama3 && o->a != A_LLAMA) {
        fprintf(stderr, "mkmodel: --rope-scaling-llama3 applies to --arch llama only\n");
        return 2;
    }
    return 0;
}

/* ---- random numbers --------------------------------------------------- */


typedef struct {
    uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) { /* xoshiro256** */
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

/* Standard normal samples by table lookup: NORM_N+1 values of the inverse
 * normal CDF, linearly interpolated with 16 random bits. A sample costs a
 * couple of nanoseconds (Box-Muller or the polar method cost ~10 ns, which
 * dominated generating a 1B-weight model); the distribution is the normal one
 * to far better than any weight type here resolves, truncated at ~4.5 sigma. */
#define NORM_BITS 16
#define NORM_N (1u << NORM_BITS)
static float norm_table[NORM_N + 1];

/* Inverse of the standard normal CDF: Acklam's rational approximation
 * refined by one Halley step on erfc (full double precision). */
static double inv_norm_cdf(double p) {
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00};
    double x;
    if (p < 0.02425 || p > 1 - 0.02425) {
        double q = sqrt(-2 * log(p < 0.5 ? p : 1 - p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        if (p > 0.5) x = -x;
    } else {
        double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    double e = 0.5 * erfc(-x / M_SQRT2) - p;
    double u = e * sqrt(2 * M_PI) * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

static void norm_table_init(void) {
    for (uint32_t j = 0; j <= NORM_N; j++) {
        double p = (double)j / NORM_N;
        p = SP_MAX(p, 0.25 / NORM_N);
        p = SP_MIN(p, 1 - 0.25 / NORM_N);
        norm_table[j] = (float)inv_norm_cdf(p);
    }
}

/* One N(0,1) sample from 32 random bits. */
static inline float norm_from_bits(uint32_t u) {
    uint32_t i = u >> (32 - NORM_BITS);
    float f = (float)(u & (NORM_N - 1)) * (1.0f / NORM_N);
    return norm_table[i] + f * (norm_table[i + 1] - norm_table[i]);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 1099511628211ull; }
    return h;
}

/* The PRNG stream of one row of one tensor. */
static void rng_for_row(rng *r, uint64_t seed, uint64_t tensor, int64_t row) {
    uint64_t s = seed ^ 0x5eed5eed5eed5eedull;
    uint64_t a = splitmix64(&s) ^ tensor;
    uint64_t b = splitmix64(&a) ^ (uint64_t)row;
    rng_seed(r, splitmix64(&b));
}

/* ---- the tensor plan -------------------------------------------------- */

typedef enum { K_MATRIX, K_NORM, K_BIAS, K_ROPE_FREQS, K_ROPE_LONG, K_ROPE_SHORT } kind;

typedef struct {
    char name[64];
    kind k;
    tensor_type type;
    int n_dims;
    int64_t ne[3];
    float std; /* matrices and biases: N(0, std); norms: 1 + N(0, std) */
} plan_t;

typedef struct {
    plan_t *t;
    int n, cap;
} plan;

static plan_t *plan_add(plan *p, kind k, const char *name, int64_t ne0, int64_t ne1, float std) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->t = realloc(p->t, (size_t)p->cap * sizeof *p->t);
        if (!p->t) { fprintf(stderr, "mkmodel: out of memory\n"); exit(1); }
    }
    plan_t *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->k = k;
    t->type = SP_TYPE_F32;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = 1;
    t->std = std;
    return t;
}

/* Rows of a tensor: of all its matrices (experts) together. */
static int64_t rows_of(const plan_t *t) { return t->ne[1] * t->ne[2]; }

/* llama.cpp's rule for the layers that get more bits in Q4_K_M. */
static bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type for a matrix whose rows have k elements: the wanted one, or a
 * fallback when k is not a multiple of its block size, llama.cpp's where k
 * allows it (Q4_K -> Q5_0, Q6_K -> Q8_0), else F16. */
static tensor_type matrix_type(const char *name, tensor_type want, int64_t k) {
    const type_traits *tr = type_info(want);
    if (k % tr->blck == 0) return want;
    tensor_type fb = k % SP_QK8_0 != 0 || tr->blck <= SP_QK8_0 ? SP_TYPE_F16
                   : want == SP_TYPE_Q4_K ? SP_TYPE_Q5_0 : SP_TYPE_Q8_0;
    /* Say it once per tensor kind, not once per layer. */
    static char said[16][48];
    static int n_said;
    const char *base = name;
    if (!strncmp(name, "blk.", 4) && strchr(name + 4, '.')) base = strchr(name + 4, '.') + 1;
    for (int i = 0; i < n_said; i++)
        if (!strcmp(said[i], base)) return fb;
    if (n_said < 16) snprintf(said[n_said++], sizeof said[0], "%s", base);
    fprintf(stderr, "mkmodel: %s: row length %" PRId64 " is not a multiple of %" PRId64 " (%s); using %s\n",
            base, k, tr->blck, tr->name, type_info(fb)->name);
    return fb;
}

static void make_plan(const opts *o, int64_t n_vocab, plan *p) {
    const int64_t E = o->n_embd, F = o->n_ff, hd = o->head_dim;
    const int64_t QD = o->n_head * hd, KD = o->n_head_kv * hd;
    const bool qwen2 = o->a == A_QWEN2, phi3 = o->a == A_PHI3, gemma3 = o->a == A_GEMMA3;
    const bool moe = o->a == A_QWEN3MOE;
    const bool qk_norm = o->a == A_QWEN3 || gemma3 || moe;
    const tensor_type base = wtypes[o->wt].type;
    const bool mix = o->wt == WT_Q4_K_M;
    char nm[64];
    /* Embeddings larger than the other matrices: they are the only input
     * and (tied) give the logits a usable spread. */
    plan_t *t = plan_add(p, K_MATRIX, "token_embd.weight", E, n_vocab, 0.1f);
    t->type = matrix_type(t->name, mix && o->tied ? SP_TYPE_Q6_K : base, E);
    plan_add(p, K_NORM, "output_norm.weight", E, 0, 0.1f);
    if (!o->tied) {
        t = plan_add(p, K_MATRIX, "output.weight", E, n_vocab, 0.05f);
        t->type = matrix_type(t->name, mix ? SP_TYPE_Q6_K : base, E);
    }
    if (o->llama3) plan_add(p, K_ROPE_FREQS, "rope_freqs.weight", hd / 2, 0, 0);
    /* LongRoPE factors: one per rotated pair, n_rot/2, as llama.cpp's
     * converter writes them (ik_llama.cpp's loader wants head_dim/2: the same
     * unless --rope-dims is below the head dimension) */
    if (o->lr_orig) {
        plan_add(p, K_ROPE_LONG, "rope_factors_long.weight", o->rope_dims / 2, 0, 0);
        plan_add(p, K_ROPE_SHORT, "rope_factors_short.weight", o->rope_dims / 2, 0, 0);
    }
    for (int64_t l = 0; l < o->n_layer; l++) {
        tensor_type v_type = mix && use_more_bits(l, o->n_layer) ? SP_TYPE_Q6_K : base;
#define ADD(k, suffix, ne0, ne1, std, ty)                                                  \
        do {                                                                                \
            snprintf(nm, sizeof nm, "blk.%" PRId64 ".%s", l, suffix);                       \
            t = plan_add(p, k, nm, ne0, ne1, std);                                          \
            if (k == K_MATRIX) t->type = matrix_type(nm, ty, ne0);                          \
        } while (0)
        ADD(K_NORM, "attn_norm.weight", E, 0, 0.1f, 0);
        if (phi3) {
            /* one fused matrix: q rows, then k, then v (llama.cpp's Q4_K_M
             * would make it Q5_K, which mkmodel cannot write: the base type) */
            ADD(K_MATRIX, "attn_qkv.weight", E, QD + 2 * KD, 0.02f, base);
        } else {
            ADD(K_MATRIX, "attn_q.weight", E, QD, 0.02f, base);
            ADD(K_MATRIX, "attn_k.weight", E, KD, 0.02f, base);
            ADD(K_MATRIX, "attn_v.weight", E, KD, 0.02f, v_type);
        }
        if (qwen2) {
            ADD(K_BIAS, "attn_q.bias", QD, 0, 0.05f, 0);
            ADD(K_BIAS, "attn_k.bias", KD, 0, 0.05f, 0);
            ADD(K_BIAS, "attn_v.bias", KD, 0, 0.05f, 0);
        }
        if (qk_norm) { /* per-head RMSNorm weights, one head's width */
            ADD(K_NORM, "attn_q_norm.weight", hd, 0, 0.1f, 0);
            ADD(K_NORM, "attn_k_norm.weight", hd, 0, 0.1f, 0);
        }
        ADD(K_MATRIX, "attn_output.weight", QD, E, 0.02f, base);
        if (gemma3) ADD(K_NORM, "post_attention_norm.weight", E, 0, 0.1f, 0);
        ADD(K_NORM, "ffn_norm.weight", E, 0, 0.1f, 0);
        if (moe) {
            /* the router stays F32 (llama.cpp's quantizer keeps it so);
             * each expert [E -> Fx] (down [Fx -> E]) is ne2's index */
            const int64_t X = o->n_expert, Fx = o->n_ff_exp;
            ADD(K_MATRIX, "ffn_gate_inp.weight", E, X, 0.05f, SP_TYPE_F32);
            ADD(K_MATRIX, "ffn_gate_exps.weight", E, Fx, 0.02f, base);
            t->ne[2] = X, t->n_dims = 3;
            ADD(K_MATRIX, "ffn_up_exps.weight", E, Fx, 0.02f, base);
            t->ne[2] = X, t->n_dims = 3;
            ADD(K_MATRIX, "ffn_down_exps.weight", Fx, E, 0.02f, v_type);
            t->ne[2] = X, t->n_dims = 3;
        } else if (phi3) { /* fused: the first F outputs are the gate, the next F the up */
            ADD(K_MATRIX, "ffn_up.weight", E, 2 * F, 0.02f, base);
        } else {
            ADD(K_MATRIX, "ffn_gate.weight", E, F, 0.02f, base);
            ADD(K_MATRIX, "ffn_up.weight", E, F, 0.02f, base);
        }
        if (!moe) ADD(K_MATRIX, "ffn_down.weight", F, E, 0.02f, v_type);
        if (gemma3) ADD(K_NORM, "post_ffw_norm.weight", E, 0, 0.1f, 0);
#undef ADD
    }
}

/* llama 3.1 RoPE frequency factors, as llama.cpp's converter computes them
 * (the model divides each rotation frequency by its factor). */
static void llama3_factors(const opts *o, float *out, int64_t n) {
    const double hd = (double)(2 * n);
    const double lo_wl = o->l3_orig / o->l3_low, hi_wl = o->l3_orig / o->l3_high;
    for (int64_t i = 0; i < n; i++) {
        double freq = 1.0 / pow(o->rope_base, (double)(2 * i) / hd);
        double wl = 2 * M_PI / freq;
        double f;
        if (wl < hi_wl) f = 1.0;
        else if (wl > lo_wl) f = o->l3_factor;
        else {
            double smooth = (o->l3_orig / wl - o->l3_low) / (o->l3_high - o->l3_low);
            f = 1.0 / ((1 - smooth) / o->l3_factor + smooth);
        }
        out[i] = (float)f;
    }
}

/* LongRoPE factors (the model divides each rotation frequency by its
 * factor), seeded: the short ones near 1, the long ones clearly larger from
 * the first (fastest) pair on, so that using the wrong set shows at once. */
static void longrope_factors(const opts *o, const char *name, bool lng, float *out, int64_t n) {
    rng r;
    rng_for_row(&r, o->seed, name_hash(name), 0);
    for (int64_t i = 0; i < n; i++) {
        double t = n > 1 ? (double)i / (double)(n - 1) : 0.0;
        double j = fabs(norm_from_bits((uint32_t)(rng_next(&r) >> 32)));
        out[i] = (float)(lng ? 1.5 + 6.0 * t + 0.5 * j : 1.0 + 0.1 * t + 0.05 * j);
    }
}

/* ---- generation ------------------------------------------------------- */

static void fill_row(const plan_t *t, uint64_t seed, int64_t row, float *x) {
    rng r;
    rng_for_row(&r, seed, name_hash(t->name), row);
    const float add = t->k == K_NORM ? 1.0f : 0.0f, std = t->std;
    const int64_t n = t->ne[0];
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t b = rng_next(&r);
        x[i] = add + std * norm_from_bits((uint32_t)(b >> 32));
        x[i + 1] = add + std * norm_from_bits((uint32_t)b);
    }
    if (i < n) x[i] = add + std * norm_from_bits((uint32_t)(rng_next(&r) >> 32));
}

static void convert_row(tensor_type type, const float *x, void *dst, int64_t n) {
    switch (type) {
    case SP_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case SP_TYPE_F16: for (int64_t i = 0; i < n; i++) ((f16_t *)dst)[i] = f32_to_f16(x[i]); break;
    case SP_TYPE_BF16: for (int64_t i = 0; i < n; i++) ((bf16_t *)dst)[i] = f32_to_bf16(x[i]); break;
    default: quantize_row(type, x, dst, n); break;
    }
}

/* A run of rows of one matrix, the unit of generation and of writing. */
typedef struct {
    const plan_t *t;
    int64_t row0, n_rows;
    size_t row_bytes;
} chunk;

typedef struct {
    chunk c;
    uint64_t seed;
    uint8_t *out;
    int ith, nth;
} job;

static void *worker(void *arg) {
    job *j = arg;
    float *x = malloc((size_t)j->c.t->ne[0] * sizeof(float));
    if (!x) { fprintf(stderr, "mkmodel: out of memory\n"); exit(1); }
    int64_t per = (j->c.n_rows + j->nth - 1) / j->nth;
    int64_t a = j->ith * per, b = SP_MIN(j->c.n_rows, a + per);
    for (int64_t r = a; r < b; r++) {
        fill_row(j->c.t, j->seed, j->c.row0 + r, x);
        convert_row(j->c.t->type, x, j->out + (size_t)r * j->c.row_bytes, j->c.t->ne[0]);
    }
    free(x);
    return NULL;
}

#define MAX_THREADS 256
#define CHUNK_BYTES (16u << 20)

/* Generates every matrix and appends the data in file order. Chunk c is
 * generated by the worker threads while this thread writes chunk c-1 (two
 * buffers), so the write costs no wall time of its own. */
static int stream_matrices(gguf_writer *w, const plan *p, const opts *o, char *err, size_t errlen) {
    chunk *cs = NULL;
    size_t nc = 0, cap = 0, max_bytes = 0;
    for (int i = 0; i < p->n; i++) {
        const plan_t *t = &p->t[i];
        if (t->k != K_MATRIX) continue;
        size_t rb = row_size(t->type, t->ne[0]);
        int64_t per = SP_MAX((int64_t)1, (int64_t)(CHUNK_BYTES / rb));
        for (int64_t r0 = 0; r0 < rows_of(t); r0 += per) {
            if (nc == cap) {
                cap = cap ? 2 * cap : 256;
                chunk *n = realloc(cs, cap * sizeof *cs);
                if (!n) { free(cs); snprintf(err, errlen, "out of memory"); return -1; }
                cs = n;
            }
            cs[nc] = (chunk){t, r0, SP_MIN(per, rows_of(t) - r0), rb};
            max_bytes = SP_MAX(max_bytes, (size_t)cs[nc].n_rows * rb);
            nc++;
        }
    }
    uint8_t *buf[2] = {malloc(max_bytes + 1), malloc(max_bytes + 1)};
    int rc = buf[0] && buf[1] ? 0 : -1;
    if (rc) snprintf(err, errlen, "out of memory");
    pthread_t tid[MAX_THREADS];
    job jobs[MAX_THREADS];
    for (size_t c = 0; rc == 0 && c <= nc; c++) {
        int used = 0;
        bool started[MAX_THREADS] = {0};
        if (c < nc) {
            used = (int)SP_MIN((int64_t)SP_MIN(o->threads, MAX_THREADS), cs[c].n_rows);
            for (int i = 0; i < used; i++) {
                jobs[i] = (job){cs[c], o->seed, buf[c & 1], i, used};
                started[i] = pthread_create(&tid[i], NULL, worker, &jobs[i]) == 0;
            }
        }
        if (c > 0)
            rc = gguf_writer_append(w, buf[(c - 1) & 1], (size_t)cs[c - 1].n_rows * cs[c - 1].row_bytes,
                                       err, errlen);
        for (int i = 0; i < used; i++) {
            if (started[i]) pthread_join(tid[i], NULL);
            else worker(&jobs[i]); /* could not start a thread: do its share here */
        }
    }
    free(buf[0]);
    free(buf[1]);
    free(cs);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        if (argc == 1 || !o.out || !o.vocab) usage(stderr);
        else fprintf(stderr, "run mkmodel --help for the options\n");
        return rc;
    }
    if (o.threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = (int)SP_MAX(1L, SP_MIN(n, 64L));
    }
    kernels_init();
    norm_table_init();
    double t0 = time_s();
    char err[512];

    /* Writing onto the vocabulary file would truncate the mapping we read
     * the tokenizer from. */
    struct stat sv, so;
    if (stat(o.vocab, &sv) == 0 && stat(o.out, &so) == 0 && sv.st_dev == so.st_dev && sv.st_ino == so.st_ino) {
        fprintf(stderr, "mkmodel: -o %s is the --vocab-from file\n", o.out);
        return 1;
    }
    gguf_file *vocab = gguf_open(o.vocab, err, sizeof err);
    if (!vocab) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return 1;
    }
    gguf_vtype et;
    uint64_t n_vocab = 0;
    if (!gguf_get_arr(vocab, "tokenizer.ggml.tokens", &et, &n_vocab, NULL) || et != SP_GGUF_STRING ||
        n_vocab == 0 || n_vocab > INT32_MAX) {
        fprintf(stderr, "mkmodel: %s has no tokenizer.ggml.tokens string array\n", o.vocab);
        gguf_close(vocab);
        return 1;
    }

    plan p = {0};
    make_plan(&o, (int64_t)n_vocab, &p);
    for (int i = 0; i < p.n; i++) {
        const type_traits *tr = type_info(p.t[i].type);
        if (!tr || !tr->supported) {
            fprintf(stderr, "mkmodel: this build cannot write %s tensors\n", tr ? tr->name : "unknown");
            gguf_close(vocab);
            free(p.t);
            return 1;
        }
    }

    const char *arch = o.arch;
    char key[128], name[128], desc[256];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer *w = gguf_writer_create();
    /* not "...phi3" for phi3: llama.cpp's vocabulary loader gives a model
     * whose general.name contains "phi3" or "phi-3" Phi-3's special-token
     * attributes, and fails on a vocabulary without <|endoftext|> */
    snprintf(name, sizeof name, "specula-random-%s", o.a == A_PHI3 ? "phi" : arch);
    gguf_set_str(w, "general.architecture", arch);
    gguf_set_str(w, "general.name", o.name ? o.name : name);
    gguf_set_u32(w, AK("context_length"), (uint32_t)o.ctx);
    gguf_set_u32(w, AK("embedding_length"), (uint32_t)o.n_embd);
    gguf_set_u32(w, AK("block_count"), (uint32_t)o.n_layer);
    gguf_set_u32(w, AK("feed_forward_length"), (uint32_t)o.n_ff);
    gguf_set_u32(w, AK("attention.head_count"), (uint32_t)o.n_head);
    gguf_set_u32(w, AK("attention.head_count_kv"), (uint32_t)o.n_head_kv);
    gguf_set_f32(w, AK("rope.freq_base"), o.rope_base);
    gguf_set_f32(w, AK("attention.layer_norm_rms_epsilon"), o.eps);
    /* llama.cpp's converter writes no rope.dimension_count for qwen3 and
     * gemma3 (it defaults to key_length there), which they always have */
    const bool qwen3_like = o.a == A_QWEN3 || o.a == A_QWEN3MOE;
    if (!qwen3_like && o.a != A_GEMMA3) gguf_set_u32(w, AK("rope.dimension_count"), (uint32_t)o.rope_dims);
    if (o.a == A_QWEN3MOE) {
        gguf_set_u32(w, AK("expert_count"), (uint32_t)o.n_expert);
        gguf_set_u32(w, AK("expert_used_count"), (uint32_t)o.n_expert_used);
        gguf_set_u32(w, AK("expert_feed_forward_length"), (uint32_t)o.n_ff_exp);
    }
    if (o.head_dim_set || qwen3_like || o.a == A_GEMMA3) {
        gguf_set_u32(w, AK("attention.key_length"), (uint32_t)o.head_dim);
        gguf_set_u32(w, AK("attention.value_length"), (uint32_t)o.head_dim);
    }
    if (o.a == A_GEMMA3 || o.a == A_PHI3) gguf_set_u32(w, AK("attention.sliding_window"), (uint32_t)o.swa);
    if (o.a == A_PHI3) {
        gguf_set_u32(w, AK("rope.scaling.original_context_length"), (uint32_t)(o.lr_orig ? o.lr_orig : o.ctx));
        if (o.lr_orig) {
            double scale = (double)o.ctx / (double)o.lr_orig;
            gguf_set_f32(w, AK("rope.scaling.attn_factor"), (float)sqrt(1 + log(scale) / log((double)o.lr_orig)));
        }
    }
    if (o.rope_linear > 0) {
        gguf_set_str(w, AK("rope.scaling.type"), "linear");
        gguf_set_f32(w, AK("rope.scaling.factor"), o.rope_linear);
    }
    gguf_set_u32(w, AK("vocab_size"), (uint32_t)n_vocab);
    gguf_set_u32(w, "general.file_type", wtypes[o.wt].ftype);
    gguf_set_str(w, "general.license", "MIT");
    snprintf(desc, sizeof desc,
             "Random weights (seed %" PRIu64 ") generated by Specula's mkmodel for testing; not a trained model.",
             o.seed);
    gguf_set_str(w, "general.description", desc);
    if (o.wt != WT_F32 && o.wt != WT_F16 && o.wt != WT_BF16) gguf_set_u32(w, "general.quantization_version", 2);
    gguf_copy_kv(w, vocab, "tokenizer.");
#undef AK

    /* Small tensors carry their data; matrices are streamed. */
    uint64_t total = 0;
    for (int i = 0; i < p.n; i++) {
        const plan_t *t = &p.t[i];
        total += row_size(t->type, t->ne[0]) * (uint64_t)rows_of(t);
        if (t->k == K_MATRIX) {
            gguf_add_tensor_info(w, t->name, t->type, t->n_dims, t->ne);
            continue;
        }
        float *x = malloc((size_t)t->ne[0] * sizeof(float));
        if (!x) { fprintf(stderr, "mkmodel: out of memory\n"); return 1; }
        if (t->k == K_ROPE_FREQS) llama3_factors(&o, x, t->ne[0]);
        else if (t->k == K_ROPE_LONG || t->k == K_ROPE_SHORT)
            longrope_factors(&o, t->name, t->k == K_ROPE_LONG, x, t->ne[0]);
        else fill_row(t, o.seed, 0, x);
        gguf_add_tensor(w, t->name, SP_TYPE_F32, 1, t->ne, x, (size_t)t->ne[0] * sizeof(float));
        free(x);
    }

    rc = gguf_writer_begin(w, o.out, err, sizeof err);
    if (rc == 0) rc = stream_matrices(w, &p, &o, err, sizeof err);
    if (rc == 0) rc = gguf_writer_end(w, err, sizeof err);
    gguf_writer_free(w);
    gguf_close(vocab);
    if (rc != 0) {
        fprintf(stderr, "mkmodel: %s\n", err);
        free(p.t);
        return 1;
    }
    fprintf(stderr, "mkmodel: wrote %s: %s, %d tensors, %.1f MB of weights, vocab %" PRIu64 ", %.1f s\n", o.out,
            wtypes[o.wt].name, p.n, (double)total / 1e6, n_vocab, time_s() - t0);
    free(p.t);
    return 0;
}
