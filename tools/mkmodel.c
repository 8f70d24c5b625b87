/* mkmodel: writes a GGUF model of any llama/qwen2 shape and tensor type with
 * seeded random weights and a vocabulary copied from another GGUF.
 *
 * The tensor names, shapes, order and metadata keys are those of llama.cpp's
 * own llama/qwen2 files, so the output loads in llama.cpp as well as here
 * (which is how reference outputs for arbitrary shapes are produced).
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

typedef enum { WT_F32, WT_F16, WT_BF16, WT_Q8_0, WT_Q4_0, WT_Q4_K, WT_Q6_K, WT_Q4_K_M } wtype;

static const struct {
    const char *name;
    tensor_type type;      /* the type of the 2D weights (Q4_K_M: the base type) */
    uint32_t ftype;    /* llama.cpp's general.file_type (llama_ftype) */
} wtypes[] = {
    [WT_F32] = {"f32", SP_TYPE_F32, 0},     [WT_F16] = {"f16", SP_TYPE_F16, 1},
    [WT_BF16] = {"bf16", SP_TYPE_BF16, 32}, [WT_Q8_0] = {"q8_0", SP_TYPE_Q8_0, 7},
    [WT_Q4_0] = {"q4_0", SP_TYPE_Q4_0, 2},  [WT_Q4_K] = {"q4_k", SP_TYPE_Q4_K, 14},
    [WT_Q6_K] = {"q6_k", SP_TYPE_Q6_K, 18}, [WT_Q4_K_M] = {"q4_k_m", SP_TYPE_Q4_K, 15},
};

typedef struct {
    const char *out, *vocab, *arch, *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, ctx;
    wtype wt;
    bool tied;
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
            "  --arch llama|qwen2       architecture (default llama; qwen2 adds q/k/v biases)\n"
            "  --n-embd N               embedding width (default 256)\n"
            "  --n-layer N              layers (default 4)\n"
            "  --n-head N               attention heads (default 8)\n"
            "  --n-head-kv N            key/value heads (default 4)\n"
            "  --n-ff N                 feed-forward width (default 688)\n"
            "  --type T                 weight type: f32 f16 bf16 q8_0 q4_0 q4_k q6_k q4_k_m\n"
            "                           (default f16; norms and biases are always f32)\n"
            "  --tied                   no output.weight: the output reuses token_embd\n"
            "  --rope-base F            RoPE frequency base (default 10000)\n"
            "  --eps F                  RMSNorm epsilon (default 1e-5)\n"
            "  --ctx N                  context length (default 2048)\n"
            "  --seed N                 weight seed (default 42)\n"
            "  --name NAME              general.name (default specula-random-ARCH)\n"
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
    *o = (opts){.arch = "llama", .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
                .n_ff = 688, .ctx = 2048, .wt = WT_F16, .rope_base = 10000.0f, .eps = 1e-5f,
                .seed = 42, .threads = 0};
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
            ok = !strcmp(v, "llama") || !strcmp(v, "qwen2");
            o->arch = v;
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
        else if (!strcmp(a, "--ctx")) ok = parse_i64(v, 1, INT32_MAX, &o->ctx);
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
    if (o->n_embd % o->n_head) {
        fprintf(stderr, "mkmodel: --n-embd %" PRId64 " is not a multiple of --n-head %" PRId64 "\n", o->n_embd,
                o->n_head);
        return 2;
    }
    if ((o->n_embd / o->n_head) % 2) {
        fprintf(stderr, "mkmodel: head dimension %" PRId64 " must be even (RoPE rotates pairs)\n",
                o->n_embd / o->n_head);
        return 2;
    }
    if (o->n_head % o->n_head_kv) {
        fprintf(stderr, "mkmodel: --n-head %" PRId64 " is not a multiple of --n-head-kv %" PRId64 "\n",
                o->n_head, o->n_head_kv);
        return 2;
    }
    if (o->llama3 && strcmp(o->arch, "llama") != 0) {
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

typedef enum { K_MATRIX, K_NORM, K_BIAS, K_ROPE_FREQS } kind;

typedef struct {
    char name[64];
    kind k;
    tensor_type type;
    int n_dims;
    int64_t ne[2];
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
    t->std = std;
    return t;
}

/* llama.cpp's rule for the layers that get more bits in Q4_K_M. */
static bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type for a matrix whose rows have k elements: the wanted one, or a
 * fallback when k is not a multiple of its block size (as llama.cpp does,
 * minus the types we have no quantizer for): Q8_0 if k allows it, else F16. */
static tensor_type matrix_type(const char *name, tensor_type want, int64_t k) {
    const type_traits *tr = type_info(want);
    if (k % tr->blck == 0) return want;
    tensor_type fb = k % SP_QK8_0 == 0 && tr->blck > SP_QK8_0 ? SP_TYPE_Q8_0 : SP_TYPE_F16;
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
    const int64_t E = o->n_embd, F = o->n_ff, hd = o->n_embd / o->n_head;
    const int64_t QD = o->n_head * hd, KD = o->n_head_kv * hd;
    const bool qwen2 = !strcmp(o->arch, "qwen2");
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
    for (int64_t l = 0; l < o->n_layer; l++) {
        tensor_type v_type = mix && use_more_bits(l, o->n_layer) ? SP_TYPE_Q6_K : base;
#define ADD(k, suffix, ne0, ne1, std, ty)                                                  \
        do {                                                                                \
            snprintf(nm, sizeof nm, "blk.%" PRId64 ".%s", l, suffix);                       \
            t = plan_add(p, k, nm, ne0, ne1, std);                                          \
            if (k == K_MATRIX) t->type = matrix_type(nm, ty, ne0);                          \
        } while (0)
        ADD(K_NORM, "attn_norm.weight", E, 0, 0.1f, 0);
        ADD(K_MATRIX, "attn_q.weight", E, QD, 0.02f, base);
        ADD(K_MATRIX, "attn_k.weight", E, KD, 0.02f, base);
        ADD(K_MATRIX, "attn_v.weight", E, KD, 0.02f, v_type);
        if (qwen2) {
            ADD(K_BIAS, "attn_q.bias", QD, 0, 0.05f, 0);
            ADD(K_BIAS, "attn_k.bias", KD, 0, 0.05f, 0);
            ADD(K_BIAS, "attn_v.bias", KD, 0, 0.05f, 0);
        }
        ADD(K_MATRIX, "attn_output.weight", QD, E, 0.02f, base);
        ADD(K_NORM, "ffn_norm.weight", E, 0, 0.1f, 0);
        ADD(K_MATRIX, "ffn_gate.weight", E, F, 0.02f, base);
        ADD(K_MATRIX, "ffn_up.weight", E, F, 0.02f, base);
        ADD(K_MATRIX, "ffn_down.weight", F, E, 0.02f, v_type);
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
        for (int64_t r0 = 0; r0 < t->ne[1]; r0 += per) {
            if (nc == cap) {
                cap = cap ? 2 * cap : 256;
                chunk *n = realloc(cs, cap * sizeof *cs);
                if (!n) { free(cs); snprintf(err, errlen, "out of memory"); return -1; }
                cs = n;
            }
            cs[nc] = (chunk){t, r0, SP_MIN(per, t->ne[1] - r0), rb};
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
    snprintf(name, sizeof name, "specula-random-%s", arch);
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
    gguf_set_u32(w, AK("rope.dimension_count"), (uint32_t)(o.n_embd / o.n_head));
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
        total += row_size(t->type, t->ne[0]) * (uint64_t)t->ne[1];
        if (t->k == K_MATRIX) {
            gguf_add_tensor_info(w, t->name, t->type, t->n_dims, t->ne);
            continue;
        }
        float *x = malloc((size_t)t->ne[0] * sizeof(float));
        if (!x) { fprintf(stderr, "mkmodel: out of memory\n"); return 1; }
        if (t->k == K_ROPE_FREQS) llama3_factors(&o, x, t->ne[0]);
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
