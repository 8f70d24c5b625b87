/* test_kernels.c: the compute kernels and the thread pool.
 *
 * Every check that involves SIMD runs once per level the CPU has (ref, avx2,
 * avx512), forced in-process with kernels_force:
 *   - fp16/bf16 conversions against known bit patterns;
 *   - Q8_0 / Q8_K activation quantization bit-exact with hand-computed blocks
 *     (ties, sign of the largest value, zero blocks);
 *   - quantize -> dequantize error bounds for every supported type;
 *   - vec_dot against the reference, matmul against matmul_ref for
 *     shapes covering tile and group tails, with pools of 1, 2 and 3 threads;
 *     tolerance 1e-5 of sum |w_i x_i| (integer block sums are exact, only
 *     the f32 summation order differs), and for F32 weights the same bits
 *     (every level sums them in ggml's order, f32_finish);
 *   - the pool: every thread runs every job once, also after the workers
 *     went to sleep.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "test.h"

static const char *LEVELS[] = {"ref", "avx2", "avx512"};
#define N_LEVELS 3
static const tensor_type TYPES[] = {SP_TYPE_F32,  SP_TYPE_F16,  SP_TYPE_BF16, SP_TYPE_Q8_0, SP_TYPE_Q4_0,
                                    SP_TYPE_Q5_0, SP_TYPE_Q5_1, SP_TYPE_Q4_K, SP_TYPE_Q6_K};
#define N_TYPES 9

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rnd_unit(void) { return (float)(rnd_u32() & 0xFFFFFF) / (float)0x1000000; } /* [0,1) */
static float rnd_gauss(void) {                                                            /* ~N(0,1) */
    float s = 0;
    for (int i = 0; i < 6; i++) s += rnd_unit();
    return (s - 3.0f) * 1.41421356f;
}

static float *rand_vec(int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = rnd_gauss() * scale;
    return v;
}

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }

/* n_rows rows of k random weights (with a few outliers), in type t */
static void *make_weights(tensor_type t, int64_t n_rows, int64_t k) {
    const size_t rb = row_size(t, k);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *row = malloc((size_t)k * sizeof *row);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < k; i++) row[i] = rnd_gauss() * 0.05f;
        row[rnd_u32() % k] = 0.6f; /* an outlier per row */
        quantize_row(t, row, w + r * rb, k);
    }
    free(row);
    return w;
}

/* sum_i |w_i * x_i| with both sides as the kernels see them */
static double abs_dot(tensor_type wt, const void *w, const float *x, int64_t k) {
    const tensor_type vdt = type_info(wt)->vec_dot_type;
    float *wd = malloc((size_t)k * sizeof *wd), *xd = malloc((size_t)k * sizeof *xd);
    void *xq = malloc(row_size(vdt, k));
    dequantize_row(wt, w, wd, k);
    quantize_row(vdt, x, xq, k);
    dequantize_row(vdt, xq, xd, k);
    double s = 0;
    for (int64_t i = 0; i < k; i++) s += fabs((double)wd[i] * xd[i]);
    free(wd); free(xd); free(xq);
    return s;
}

/* ---- types and dispatch ------------------------------------------------- */

static void test_traits(void) {
    struct { int id; int64_t blck; size_t bytes; bool sup; } want[] = {
        {SP_TYPE_F32, 1, 4, true},    {SP_TYPE_F16, 1, 2, true},     {SP_TYPE_Q4_0, 32, 18, true},
        {3, 32, 20, false},           {SP_TYPE_Q5_0, 32, 22, true},  {SP_TYPE_Q5_1, 32, 24, true},
        {SP_TYPE_Q8_0, 32, 34, true}, {9, 32, 36, false},            {10, 256, 84, false},
        {11, 256, 110, false},        {SP_TYPE_Q4_K, 256, 144, true}, {13, 256, 176, false},
        {SP_TYPE_Q6_K, 256, 210, true}, {SP_TYPE_Q8_K, 256, 292, false}, {16, 256, 66, false},
        {17, 256, 74, false},         {18, 256, 98, false},          {19, 256, 50, false},
        {20, 32, 18, false},          {21, 256, 110, false},         {22, 256, 82, false},
        {23, 256, 136, false},        {24, 1, 1, false},             {28, 1, 8, false},
        {29, 256, 56, false},         {SP_TYPE_BF16, 1, 2, true},    {34, 256, 54, false},
        {35, 256, 66, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const type_traits *t = type_info(want[i].id);
        CHECK(t != NULL, "type %d unknown", want[i].id);
        if (!t) continue;
        CHECK(t->blck == want[i].blck && t->block_bytes == want[i].bytes && t->supported == want[i].sup,
              "type %d (%s): blck %lld bytes %zu sup %d", want[i].id, t->name, (long long)t->blck,
              t->block_bytes, t->supported);
    }
    const int unknown[] = {-1, 4, 5, 31, 32, 33, 36, 37, 38, 39, SP_TYPE_COUNT, 1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(type_info(unknown[i]) == NULL, "type %d should be unknown", unknown[i]);
    CHECK(sizeof(block_q4_0) == 18 && sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24 &&
              sizeof(block_q8_0) == 34 && sizeof(block_q4_K) == 144 &&
              sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292,
          "block struct sizes");
    CHECK(row_size(SP_TYPE_Q4_K, 512) == 288, "q4_K row");
    CHECK(row_size(SP_TYPE_Q8_0, 33) == 0, "q8_0 partial block");
    CHECK(row_size(SP_TYPE_F16, 7) == 14, "f16 row");
    CHECK(row_size((tensor_type)4, 32) == 0, "unknown type row");
    CHECK(type_info(SP_TYPE_Q4_K)->vec_dot_type == SP_TYPE_Q8_K &&
              type_info(SP_TYPE_Q4_0)->vec_dot_type == SP_TYPE_Q8_0 &&
              type_info(SP_TYPE_F16)->vec_dot_type == SP_TYPE_F16,
          "vec_dot types");
}

/* SPECULA_KERNELS is read once, at the first kernels_init: check it in
 * forked children that have not initialised yet (run before main's init). */
static int child_level(const char *env, char *name, size_t n) {
    int fd[2];
    if (pipe(fd)) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        setenv("SPECULA_KERNELS", env, 1);
        if (freopen("/dev/null", "w", stderr)) {} /* the refusal warning */
        const char *lv = kernels_init();
        if (write(fd[1], lv, strlen(lv)) < 0) _exit(2);
        _exit(0);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], name, n - 1);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    name[got > 0 ? got : 0] = 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void test_env_override(void) {
    char name[32];
    const char *best = kernels_available("avx512") ? "avx512" : kernels_available("avx2") ? "avx2" : "ref";
    CHECK(child_level("ref", name, sizeof name) == 0 && !strcmp(name, "ref"), "SPECULA_KERNELS=ref gave %s", name);
    CHECK(child_level("nonsense", name, sizeof name) == 0 && !strcmp(name, best), "unknown level gave %s", name);
    CHECK(child_level("", name, sizeof name) == 0 && !strcmp(name, best), "empty gave %s", name);
    for (int l = 1; l < N_LEVELS; l++) {
        CHECK(child_level(LEVELS[l], name, sizeof name) == 0 &&
                  !strcmp(name, kernels_available(LEVELS[l]) ? LEVELS[l] : best),
              "SPECULA_KERNELS=%s gave %s", LEVELS[l], name);
    }
}

static void *init_thread(void *arg) { return (void *)kernels_init(); (void)arg; }

static void test_dispatch(void) {
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, init_thread, NULL);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        CHECK(r && !strcmp((const char *)r, kernels_init()), "concurrent init");
    }
    const char *a = kernels_init(), *b = kernels_init();
    CHECK(a && b && !strcmp(a, b), "init is stable");
    CHECK(kernels_available("ref"), "ref always available");
    CHECK(kernels_force("nonsense") == -1, "unknown level refused");
    CHECK(!strcmp(kernels_init(), a), "refused force keeps the level");
    printf("     (level chosen: %s; avx2 %s, avx512 %s)\n", a, kernels_available("avx2") ? "yes" : "no",
           kernels_available("avx512") ? "yes" : "no");
}

/* ---- conversions -------------------------------------------------------- */

static void test_fp16_bf16(void) {
    const struct { float f; uint16_t h; } f16[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3C00}, {-2.0f, 0xC000}, {65504.f, 0x7BFF},
        {65519.99f, 0x7BFF}, {65520.f, 0x7C00}, {1e9f, 0x7C00}, {6.103515625e-05f, 0x0400},
        {5.9604644775390625e-08f, 0x0001}, {2.98023223876953125e-08f, 0x0000} /* tie -> even 0 */,
        {2.9802326e-08f, 0x0001}, {0.333333343f, 0x3555}, {1.00048828125f, 0x3C00} /* tie -> even */,
        {1.00146484375f, 0x3C02} /* tie -> even (up) */, {3.0517578125e-05f, 0x0200},
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
        CHECK(f32_to_f16(f16[i].f) == f16[i].h, "f16(%g) = %04x, want %04x", f16[i].f,
              f32_to_f16(f16[i].f), f16[i].h);
    CHECK(f32_to_f16(INFINITY) == 0x7C00 && f32_to_f16(-INFINITY) == 0xFC00, "f16 inf");
    CHECK((f32_to_f16(NAN) & 0x7C00) == 0x7C00 && (f32_to_f16(NAN) & 0x3FF), "f16 nan");
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue; /* nan */
        if (f32_to_f16(f16_to_f32((f16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(f16_to_f32(0x3555) == 0.333251953125f && f16_to_f32(0x0001) == 5.9604644775390625e-08f,
          "f16 -> f32");

    const struct { uint32_t f; uint16_t b; } bf[] = {
        {0x3F800000, 0x3F80}, {0x3F808000, 0x3F80} /* tie -> even */, {0x3F818000, 0x3F82} /* tie -> up */,
        {0x3F808001, 0x3F81}, {0xC0490FDB, 0xC049} /* -pi */, {0x7F7FFFFF, 0x7F80} /* rounds to inf */,
        {0x00000001, 0x0000}, {0x80000000, 0x8000},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        CHECK(f32_to_bf16(f32_of_bits(bf[i].f)) == bf[i].b, "bf16(%08x) = %04x, want %04x", bf[i].f,
              f32_to_bf16(f32_of_bits(bf[i].f)), bf[i].b);
    const uint16_t nb = f32_to_bf16(NAN);
    CHECK((nb & 0x7F80) == 0x7F80 && (nb & 0x7F), "bf16 nan stays nan");
    CHECK(bf16_to_f32(0x4049) == 3.140625f, "bf16 -> f32");

    /* the SIMD f16 quantizers must round exactly like f32_to_f16 */
    const int64_t n = 1000;
    float *x = malloc(n * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd_gauss() * (float)(1 << (rnd_u32() % 24)) * 1e-6f;
        if (i % 50 == 0) x[i] = f32_of_bits(0x38000000u + (rnd_u32() & 0x1FFF) * 0x1000u); /* ties, subnormals */
    }
    x[7] = 70000.f; x[8] = -65520.f; x[9] = 1e-9f;
    f16_t *h = malloc(n * sizeof *h);
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        quantize_row(SP_TYPE_F16, x, h, n - 3); /* odd length: exercises the tail */
        int diff = 0;
        for (int64_t i = 0; i < n - 3; i++) diff += h[i] != f32_to_f16(x[i]);
        CHECK(diff == 0, "%s: %d f16 conversions differ", LEVELS[l], diff);
    }
    free(x); free(h);
}

/* ---- hand-computed activation quantization ------------------------------ */

static void test_q8_0_hand(void) {
    /* block 0: amax 127 -> id = 1, d = 1: q = round-half-even(x)
     * block 1: all zero -> d = 0, q = 0
     * block 2: amax 63.5 -> id = 2, d = 0.5 (f16 0x3800)
     * block 3: amax 16 -> d = 16/127 (f16 0x3008), id = 7.9375 */
    float x[128] = {0};
    const float b0[] = {127, 2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 1.5f, -126.5f, 0.49f, -127};
    const int8_t q0[] = {127, 2, -2, 4, 0, 0, 2, -126, 0, -127};
    memcpy(x, b0, sizeof b0);
    for (int i = 0; i < 32; i++) x[64 + i] = (i - 16) * 0.25f;
    x[64 + 31] = 63.5f;
    for (int i = 0; i < 32; i++) x[96 + i] = (float)(i - 16);
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        block_q8_0 y[4];
        memset(y, 0x55, sizeof y);
        quantize_row(SP_TYPE_Q8_0, x, y, 128);
        CHECK(y[0].d == 0x3C00, "%s: block 0 d = %04x", LEVELS[l], y[0].d);
        for (int i = 0; i < 32; i++) {
            const int want = i < 10 ? q0[i] : 0;
            CHECK(y[0].qs[i] == want, "%s: block 0 q[%d] = %d, want %d", LEVELS[l], i, y[0].qs[i], want);
        }
        CHECK(y[1].d == 0, "%s: zero block d", LEVELS[l]);
        for (int i = 0; i < 32; i++) CHECK(y[1].qs[i] == 0, "%s: zero block q[%d]", LEVELS[l], i);
        CHECK(y[2].d == 0x3800, "%s: block 2 d = %04x", LEVELS[l], y[2].d);
        for (int i = 0; i < 31; i++) /* (i-16)/2: odd values are ties, to even */
            CHECK(y[2].qs[i] == (int)lrintf((i - 16) * 0.5f), "%s: block 2 q[%d] = %d", LEVELS[l], i, y[2].qs[i]);
        CHECK(y[2].qs[31] == 127, "%s: block 2 q[31]", LEVELS[l]);
        CHECK(y[3].d == 0x3008, "%s: block 3 d = %04x", LEVELS[l], y[3].d);
        for (int i = 0; i < 32; i++) {
            /* (i-16) * 7.9375 = 8(i-16) - (i-16)/16: never a tie */
            const int want = (int)lrintf((float)(i - 16) * 7.9375f);
            CHECK(y[3].qs[i] == want, "%s: block 3 q[%d] = %d, want %d", LEVELS[l], i, y[3].qs[i], want);
        }
    }
}

static void test_q8_K_hand(void) {
    float x[3 * 256] = {0};
    /* block 0: max is -127 (negative) -> iscale = 1, d = 1, q = nearest(x)
     * block 1: +127 first, then -127: max = +127 -> iscale = -1, d = -1, q = -x
     * block 2: zero */
    for (int j = 0; j < 256; j++) x[j] = (float)((j % 16) - 8) + ((j & 16) ? 0.5f : 0.0f);
    x[3] = -127.f;
    x[200] = 127.f; /* same magnitude later: q = 127 (clamp side) */
    for (int j = 0; j < 256; j++) x[256 + j] = (float)((j * 7) % 41 - 20);
    x[256 + 10] = 127.f;
    x[256 + 11] = -127.f;
    x[256 + 12] = 2.5f;
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        block_q8_K y[3];
        memset(y, 0x55, sizeof y);
        quantize_row(SP_TYPE_Q8_K, x, y, 3 * 256);
        CHECK(y[0].d == 1.0f, "%s: block 0 d = %g", LEVELS[l], y[0].d);
        CHECK(y[1].d == -1.0f, "%s: block 1 d = %g", LEVELS[l], y[1].d);
        CHECK(y[2].d == 0.0f, "%s: zero block d = %g", LEVELS[l], y[2].d);
        for (int b = 0; b < 3; b++) {
            for (int j = 0; j < 256; j++) {
                const float v = x[256 * b + j];
                /* ties: x.5 rounds to even */
                int want = b == 0 ? (int)lrintf(v) : b == 1 ? (int)lrintf(-v) : 0;
                CHECK(y[b].qs[j] == want, "%s: block %d q[%d] = %d, want %d", LEVELS[l], b, j, y[b].qs[j], want);
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += y[b].qs[16 * g + j];
                CHECK(y[b].bsums[g] == s, "%s: block %d bsum %d", LEVELS[l], b, g);
            }
        }
        CHECK(y[0].qs[3] == -127 && y[0].qs[200] == 127 && y[0].qs[16] == -8 && y[0].qs[17] == -6,
              "%s: block 0 spot values", LEVELS[l]);
        CHECK(y[1].qs[12] == -2, "%s: -2.5 rounds to even", LEVELS[l]);
    }
    /* random blocks, bit for bit against the reference: gaussian values
     * at several scales, ties (x.5 after scaling by 1), repeated maxima of
     * either sign, a zero block */
    enum { NB = 24 };
    float *r = rand_vec(NB * 256, 1.0f);
    for (int b = 0; b < NB; b++) {
        const float sc = (float)(1 << (b % 8)) / 8.f;
        for (int j = 0; j < 256; j++) r[256 * b + j] *= sc;
    }
    for (int j = 0; j < 256; j++) r[256 * 3 + j] = (float)((j % 255) - 127) * 0.5f; /* ties; max -127 first */
    r[256 * 4 + 40] = -9.f, r[256 * 4 + 7] = 9.f;   /* +9 before -9 */
    r[256 * 5 + 200] = 9.f, r[256 * 5 + 201] = -9.f;
    memset(r + 256 * 6, 0, 256 * sizeof(float));
    block_q8_K want[NB], got[NB];
    ref_quantize_q8_K(r, want, NB * 256);
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        memset(got, 0x55, sizeof got);
        quantize_row(SP_TYPE_Q8_K, r, got, NB * 256);
        for (int b = 0; b < NB; b++)
            CHECK(!memcmp(&got[b], &want[b], sizeof got[b]), "%s: random block %d differs from the reference",
                  LEVELS[l], b);
    }
    free(r);
    /* a NaN last in a block can leave its max NaN, equal to no element:
     * garbage for that block, but no read past it (an exact-size heap
     * buffer, so that ASan sees one) */
    float *xn = malloc(256 * sizeof(float));
    for (int j = 0; j < 256; j++) xn[j] = (float)(j % 7) - 3.f;
    xn[255] = NAN;
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        block_q8_K yn;
        quantize_row(SP_TYPE_Q8_K, xn, &yn, 256); /* what is checked: make asan */
    }
    free(xn);
}

/* ---- quantize -> dequantize error -------------------------------------- */

static void quant_roundtrip(tensor_type t) {
    const int64_t k = 4096;
    float *x = rand_vec(k, 1.0f);
    for (int i = 0; i < 256; i++) x[512 + i] = 0.0f; /* zero blocks */
    x[1000] = 40.0f;                                  /* an outlier */
    for (int i = 0; i < 32; i++) x[2048 + i] = 1e-3f * (i - 15);
    void *q = malloc(row_size(t, k));
    float *y = malloc(k * sizeof *y);
    for (int l = 0; l < N_LEVELS; l++) {
        if (kernels_force(LEVELS[l])) continue;
        quantize_row(t, x, q, k);
        dequantize_row(t, q, y, k);
        double se = 0, sx = 0;
        int nbad = 0;
        for (int64_t i = 0; i < k; i++) {
            const double e = fabs((double)y[i] - x[i]);
            se += e * e;
            sx += (double)x[i] * x[i];
            const int64_t b = i / 32;
            double amax = 0; /* of the 32-block */
            for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[32 * b + j]));
            double bound;
            switch (t) {
            case SP_TYPE_F32: bound = 0; break;
            case SP_TYPE_F16: bound = fabs(x[i]) * 0x1p-11 + 0x1p-25; break;
            case SP_TYPE_BF16: bound = fabs(x[i]) * 0x1p-8; break;
            case SP_TYPE_Q8_0: bound = amax / 127 * 0.501 + amax * 0x1p-11; break;
            case SP_TYPE_Q4_0: bound = amax / 8 * 1.001 + amax * 0x1p-10; break;
            case SP_TYPE_Q5_0: bound = amax / 16 * 1.001 + amax * 0x1p-10; break;
            case SP_TYPE_Q5_1: bound = amax / 31 * 1.001 + amax * 0x1p-9; break; /* half a step, (max - min) / 62 */
            case SP_TYPE_Q8_K: { /* scale per 256 */
                double am = 0;
                for (int j = 0; j < 256; j++) am = fmax(am, fabs(x[i / 256 * 256 + j]));
                bound = am / 127 * 0.501;
                break;
            }
            default: bound = INFINITY; break; /* K-quants: RMS bound below */
            }
            if (e > bound && nbad++ < 3)
                CHECK(e <= bound, "%s %s: x[%lld] = %g -> %g (bound %g)", LEVELS[l], type_info(t)->name,
                      (long long)i, x[i], y[i], bound);
        }
        CHECK(nbad == 0, "%s %s: %d values beyond the bound", LEVELS[l], type_info(t)->name, nbad);
        const double rel = sqrt(se / sx);
        const double max_rel = t == SP_TYPE_Q4_K ? 0.12 : t == SP_TYPE_Q6_K ? 0.03 : t == SP_TYPE_Q4_0 ? 0.15
                             : t == SP_TYPE_Q5_0 ? 0.08 : t == SP_TYPE_Q5_1 ? 0.05 : t == SP_TYPE_Q8_K ? 0.03 : 0.01;
        CHECK(rel <= max_rel, "%s %s: relative rms error %g > %g", LEVELS[l], type_info(t)->name, rel, max_rel);
        for (int i = 512; i < 768; i++) CHECK(y[i] == 0.0f, "%s: zero block not zero at %d", type_info(t)->name, i);
    }
    free(x); free(q); free(y);
}

/* ---- vec_dot ------------------------------------------------------------ */

static void vec_dot_case(tensor_type t) {
    const tensor_type vdt = type_info(t)->vec_dot_type;
    const int64_t blck = type_info(t)->blck;
    const int64_t ks[] = {256, 512, 2304, blck == 1 ? 77 : blck == 32 ? 288 : 768};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int64_t k = ks[ki];
        for (int rep = 0; rep < 4; rep++) {
            void *w = make_weights(t, 1, k);
            float *x = rand_vec(k, rep == 3 ? 100.0f : 1.0f);
            if (rep == 2) for (int64_t i = 0; i < k && i < 256; i++) x[i] = 0; /* zero activation block */
            void *xq = malloc(row_size(vdt, k));
            kernels_force("ref");
            quantize_row(vdt, x, xq, k);
            float want;
            vec_dot(t, k, &want, w, xq);
            const double tol = 1e-5 * abs_dot(t, w, x, k) + 1e-6;
            for (int l = 1; l < N_LEVELS; l++) {
                if (kernels_force(LEVELS[l])) continue;
                float got;
                vec_dot(t, k, &got, w, xq);
                CHECK(fabs((double)got - want) <= tol, "%s %s k=%lld: %.9g vs ref %.9g (tol %g)", LEVELS[l],
                      type_info(t)->name, (long long)k, got, want, tol);
                /* F32 follows one order (ggml's, f32_finish) at every level */
                if (t == SP_TYPE_F32)
                    CHECK(!memcmp(&got, &want, sizeof got), "%s f32 k=%lld: %.9g, ref %.9g: not the same bits",
                          LEVELS[l], (long long)k, got, want);
            }
            free(w); free(x); free(xq);
        }
    }
}

/* ---- matmul ------------------------------------------------------------- */

static void matmul_case(tensor_type t) {
    const int64_t blck = type_info(t)->blck;
    /* K values: group tails for every layout (512-value groups for Q8_0/Q4_0/Q4_K,
     * 256 for Q6_K, 16 for floats) */
    int64_t kA, kB, kC, kD, kE; /* kD: long enough to be cut into K ranges when n_tok > 8 */
    int64_t kF; /* 5 tokens of it pass the avx512 level's 36 KiB limit (a walk by range) */
    if (blck == 1) { kA = 16; kB = 77; kC = 1600; kD = 3001; kE = 5; kF = 2500; }
    else if (blck == 32) { kA = 512; kB = 800; kC = 2048; kD = 4640; kE = 96; kF = 6144; }
    else { kA = 256; kB = 768; kC = 1536; kD = 4608; kE = 256; kF = 5888; }
    const struct { int64_t n_rows, k, n_tok, ldy_extra; } shapes[] = {
        {1, kA, 1, 0}, {13, kB, 2, 3}, {71, kC, 3, 0}, {33, kB, 5, 1}, {16, kC, 8, 0},
        {37, kA, 17, 0}, {130, kB, 64, 2}, {260, kC, 1, 0}, {24, kD, 12, 0}, {9, kD, 6, 0}, {5, kE, 3, 0}, {3, kE, 9, 1},
        /* this one and {9, kD, 6}: the avx512 level walks them by K range, 16
         * rows at a time (their converted activations pass its 36 KiB limit),
         * here in blocks of 16 and a partial one, in two regions with 2 threads */
        {88, kD, 8, 1},
        /* 5 tokens walked by range (the avx512 level's step-major Q4_K
         * tile, and its 16-row blocks ending in a block of 3) */
        {35, kF, 5, 0},
    };
    thread_pool *pools[3] = {NULL, pool_create(2), pool_create(3)};
    CHECK(pools[1] && pools[2], "pool create");
    int n_packed[N_LEVELS] = {0}, n_rows8 = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t nr = shapes[si].n_rows, k = shapes[si].k, nt = shapes[si].n_tok;
        const int64_t ldy = nr + shapes[si].ldy_extra;
        void *w = make_weights(t, nr, k);
        float *x = rand_vec(nt * k, 1.0f);
        if (nt > 2) for (int64_t i = 0; i < k; i++) x[k + i] = 0; /* token 1 all zero */
        float *want = malloc((size_t)(nt * ldy) * sizeof *want);
        float *got = malloc((size_t)(nt * ldy) * sizeof *got);
        float *first = malloc((size_t)(nt * ldy) * sizeof *first);
        float *alone = malloc((size_t)nr * sizeof *alone);
        double *tol = malloc((size_t)(nt * nr) * sizeof *tol);
        matmul_ref(w, t, nr, k, x, nt, want, ldy);
        /* the avx2 level's own bits (llama.cpp's order, but for Q8_0, Q4_K
         * and Q6_K matrices of 8-row multiples: q8_avx2.c and qk_avx2.c, the row-sum
         * order) */
        float *want2 = malloc((size_t)(nt * ldy) * sizeof *want2);
        CHECK(matmul_ref_level("avx2", w, t, nr, k, x, nt, want2, ldy) == 0, "avx2 has a plain-C twin");
        CHECK(matmul_ref_level("avx512", w, t, nr, k, x, nt, want2, ldy) == -1, "avx512 has none");
        const size_t rb = row_size(t, k);
        for (int64_t tt = 0; tt < nt; tt++)
            for (int64_t r = 0; r < nr; r++)
                tol[tt * nr + r] = 1e-5 * abs_dot(t, (const uint8_t *)w + r * rb, x + tt * k, k) + 1e-6;
        /* an order of its own is still the same product */
        for (int64_t tt = 0, nbad = 0; tt < nt; tt++)
            for (int64_t r = 0; r < nr; r++)
                if (!(fabs((double)want2[tt * ldy + r] - want[tt * ldy + r]) <= tol[tt * nr + r]) && nbad++ < 3)
                    CHECK(0, "avx2 twin %s rows %lld k %lld: y[%lld][%lld] = %.9g, ref %.9g", type_info(t)->name,
                          (long long)nr, (long long)k, (long long)tt, (long long)r, want2[tt * ldy + r],
                          want[tt * ldy + r]);
        const size_t ss = matmul_scratch_size(t, k, nt);
        uint8_t *scratch = malloc(ss + 8);
        for (int l = 0; l < N_LEVELS; l++) {
            if (kernels_force(LEVELS[l])) continue;
            for (int p = 0; p < 3; p++) {
                for (int64_t i = 0; i < nt * ldy; i++) got[i] = -12345.0f; /* padding must survive */
                matmul(pools[p], w, t, nr, k, x, nt, got, ldy, scratch + 8 * (p & 1) /* misaligned too */);
                int bad = 0;
                for (int64_t tt = 0; tt < nt; tt++) {
                    for (int64_t r = 0; r < nr; r++) {
                        /* F32 at every level, and every type at the avx2
                         * level (its plain-C twin): the same bits */
                        const int avx2 = !strcmp(LEVELS[l], "avx2");
                        const float wv = (avx2 ? want2 : want)[tt * ldy + r];
                        const double e = fabs((double)got[tt * ldy + r] - wv);
                        const double lim = t == SP_TYPE_F32 || avx2 ? 0 : tol[tt * nr + r];
                        if (!(e <= lim) && bad++ < 3)
                            CHECK(0, "%s %s rows %lld k %lld tok %lld pool %d: y[%lld][%lld] = %.9g, ref %.9g",
                                  LEVELS[l], type_info(t)->name, (long long)nr, (long long)k, (long long)nt,
                                  pool_size(pools[p]), (long long)tt, (long long)r, got[tt * ldy + r], wv);
                    }
                    for (int64_t r = nr; r < ldy; r++)
                        CHECK(got[tt * ldy + r] == -12345.0f, "%s: wrote past n_rows", LEVELS[l]);
                }
                CHECK(bad == 0, "%s %s: %d mismatches", LEVELS[l], type_info(t)->name, bad);
                /* the split across threads must not change a single bit */
                if (p == 0) memcpy(first, got, (size_t)(nt * ldy) * sizeof *got);
                else CHECK(!memcmp(first, got, (size_t)(nt * ldy) * sizeof *got), "%s %s: pool %d differs from 1 thread",
                           LEVELS[l], type_info(t)->name, pool_size(pools[p]));
                /* nor may the batch: each token alone gives the same bits
                 * (speculative verification equals plain decoding only so) */
                if (p == 1)
                    for (int64_t tt = 0; tt < nt; tt++) {
                        matmul(pools[p], w, t, nr, k, x + tt * k, 1, alone, nr, scratch);
                        CHECK(!memcmp(alone, got + tt * ldy, (size_t)nr * sizeof *got),
                              "%s %s k %lld: token %lld of a batch of %lld differs from it alone",
                              LEVELS[l], type_info(t)->name, (long long)k, (long long)tt, (long long)nt);
                    }
            }
            /* load-time repacking, where the level has it: the same bits
             * as the original rows, for the batch and each token alone */
            const size_t psz = matmul_packed_size(t, nr, k);
            if (psz) {
                uint8_t *packed = malloc(psz + 1);
                const char *lv = matmul_pack(t, w, nr, k, packed + 1 /* unaligned */);
                CHECK(lv && !strcmp(lv, LEVELS[l]) && !strcmp(kernels_level(), LEVELS[l]),
                      "matmul_pack returned %s at %s", lv ? lv : "NULL", LEVELS[l]);
                for (int p = 0; p < 3; p++) {
                    float *pg = malloc((size_t)(nt * ldy) * sizeof *pg);
                    for (int64_t i = 0; i < nt * ldy; i++) pg[i] = -12345.0f;
                    matmul_packed(pools[p], packed + 1, t, nr, k, x, nt, pg, ldy, scratch);
                    CHECK(!memcmp(pg, first, (size_t)(nt * ldy) * sizeof *pg), "%s %s rows %lld k %lld tok %lld pool %d: "
                          "packed rows differ from the original ones", LEVELS[l], type_info(t)->name,
                          (long long)nr, (long long)k, (long long)nt, pool_size(pools[p]));
                    matmul_packed(pools[p], packed + 1, t, nr, k, x + (nt - 1) * k, 1, alone, nr, scratch);
                    CHECK(!memcmp(alone, first + (nt - 1) * ldy, (size_t)nr * sizeof *alone),
                          "%s %s: packed, the last token alone differs", LEVELS[l], type_info(t)->name);
                    free(pg);
                }
                n_packed[l]++;
                free(packed);
            }
        }
        free(w); free(x); free(want); free(want2); free(got); free(first); free(alone); free(tol); free(scratch);
    }
    for (int p = 1; p < 3; p++) pool_free(pools[p]);
    /* the avx512 level packs Q8_0, Q4_0, Q5_0, Q4_K and Q6_K, the avx2 level
     * Q8_0, Q4_0, Q4_K and Q6_K matrices of 8-row multiples: a check that compared nothing there
     * would pass silently */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) n_rows8 += shapes[si].n_rows % 8 == 0;
    CHECK(n_rows8 >= 2, "the shapes have %d matrices of 8-row multiples", n_rows8);
    for (int l = 0; l < N_LEVELS; l++) {
        int want = 0;
        if (!strcmp(LEVELS[l], "avx512") &&
            (t == SP_TYPE_Q8_0 || t == SP_TYPE_Q4_0 || t == SP_TYPE_Q5_0 || t == SP_TYPE_Q4_K || t == SP_TYPE_Q6_K))
            want = (int)(sizeof shapes / sizeof shapes[0]);
        if (!strcmp(LEVELS[l], "avx2") &&
            (t == SP_TYPE_Q8_0 || t == SP_TYPE_Q4_0 || t == SP_TYPE_Q4_K || t == SP_TYPE_Q6_K))
            want = n_rows8;
        if (kernels_available(LEVELS[l]))
            CHECK(n_packed[l] == want, "%s %s: %d shapes checked packed, %d expected", LEVELS[l],
                  type_info(t)->name, n_packed[l], want);
    }
}

/* Q6_K at the extremes of its integer ranges: quants 0 and 63 against
 * activations of +-127 and scales of 127 and -128. The avx2 level's packed
 * tile sums 4 maddubs of q (0..63) by x in int16 and relies on wrap-around
 * to be exact once the 32 x sums are subtracted (the true lane sum, 8 values
 * of (q - 32) x, is at most 8 * 32 * 127 = 32512): here every lane reaches
 * that bound. Each level against the exact product (integers, then one
 * rounding to f32 per super-block: within 1e-6), and the avx2 level against
 * its plain-C twin bit for bit, on the file's rows and packed. */
static void set_q6(block_q6_K *b, int e, int q) { /* element e of the block := q (0..63) */
    const int c = e / 32, l = e % 32, nn = c / 4, qd = c % 4;
    uint8_t *lo = &b->ql[nn * 64 + (qd & 1) * 32 + l], *hi = &b->qh[nn * 32 + l];
    const int ls = 4 * (qd >> 1), hs = 2 * qd;
    *lo = (uint8_t)((*lo & ~(0xF << ls)) | ((q & 0xF) << ls));
    *hi = (uint8_t)((*hi & ~(3 << hs)) | ((q >> 4) << hs));
}

static void test_q6_K_extremes(const char *level) {
    enum { NR = 16, K = 512, NT = 5 };
    if (!kernels_available(level)) {
        SKIP("this CPU cannot run the %s kernels", level);
        return;
    }
    REQUIRE(!kernels_force(level), "force %s", level); /* before the level's packed size below */
    block_q6_K *w = calloc(NR * K / 256, sizeof *w);
    float *x = malloc(sizeof(float) * NT * K);
    uint8_t *scratch = malloc(matmul_scratch_size(SP_TYPE_Q6_K, K, NT));
    uint8_t *wp = malloc(matmul_packed_size(SP_TYPE_Q6_K, NR, K) + 1);
    if (!w || !x || !scratch || !wp) {
        free(w); free(x); free(scratch); free(wp);
        REQUIRE(0, "allocation");
    }
    int q[NR][K], sc[NR][K / 16];
    for (int r = 0; r < NR; r++)
        for (int b = 0; b < K / 256; b++) {
            block_q6_K *blk = &w[r * (K / 256) + b];
            blk->d = f32_to_f16(r < 8 ? 1.0f : 0.5f);
            for (int j = 0; j < 16; j++) {
                const int s = r % 4 == 1 || r % 4 == 2 ? -128 : r % 4 == 3 ? (int)(rnd_u32() % 256) - 128 : 127;
                sc[r][16 * b + j] = s;
                blk->scales[j] = (int8_t)s;
            }
            for (int e = 0; e < 256; e++) {
                const int i = 256 * b + e;
                q[r][i] = r % 8 < 2 ? 0 : r % 8 < 4 ? 63 : r % 8 < 6 ? (i % 2 ? 63 : 0) : (int)(rnd_u32() % 64);
                set_q6(blk, e, q[r][i]);
            }
        }
    /* tokens: all -1 (x = -127), all +1 (127), +-1 against the alternating
     * rows' quants (every product at its largest), half zeros, random */
    for (int i = 0; i < K; i++) {
        x[i] = -1.0f;
        x[K + i] = 1.0f;
        x[2 * K + i] = i % 2 ? 1.0f : -1.0f;
        x[3 * K + i] = i % 32 < 16 ? 0.0f : -1.0f;
        x[4 * K + i] = rnd_gauss();
    }
    float want[NT * NR], twin[NT * NR], got[NT * NR];
    double mag[NT * NR]; /* sum over super-blocks of |its term|: the scale of one rounding each */
    for (int t = 0; t < NT; t++) {
        block_q8_K xq[K / 256];
        quantize_row(SP_TYPE_Q8_K, x + t * K, xq, K);
        for (int r = 0; r < NR; r++) {
            double s = 0, m = 0;
            for (int b = 0; b < K / 256; b++) {
                int64_t isum = 0;
                for (int i = 256 * b; i < 256 * b + 256; i++)
                    isum += (int64_t)sc[r][i / 16] * (q[r][i] - 32) * xq[b].qs[i % 256];
                const double term = (double)isum * xq[b].d * f16_to_f32(w[r * (K / 256) + b].d);
                s += term;
                m += fabs(term);
            }
            want[t * NR + r] = (float)s;
            mag[t * NR + r] = m;
        }
    }
    CHECK(fabsf(want[0] - 4064.0f * K) < 1e-3f * 4064 * K, "row 0, token 0: %g, want about %g", want[0], 4064.0 * K);
    CHECK(matmul_ref_level("avx2", w, SP_TYPE_Q6_K, NR, K, x, NT, twin, NR) == 0, "avx2 twin");
    const int avx2 = !strcmp(level, "avx2");
    /* the file's rows, then the level's packed layout where it has one */
    const size_t psz = matmul_packed_size(SP_TYPE_Q6_K, NR, K);
    CHECK(!avx2 || psz, "the avx2 level packs Q6_K matrices of 8-row multiples");
    for (int packed = 0; packed < (psz ? 2 : 1); packed++) {
        if (packed) {
            matmul_pack(SP_TYPE_Q6_K, w, NR, K, wp);
            matmul_packed(NULL, wp, SP_TYPE_Q6_K, NR, K, x, NT, got, NR, scratch);
        } else matmul(NULL, w, SP_TYPE_Q6_K, NR, K, x, NT, got, NR, scratch);
        int bad = 0;
        for (int i = 0; i < NT * NR; i++) {
            const int ok = fabs((double)got[i] - want[i]) <= 1e-6 * mag[i] + 1e-3 && (!avx2 || got[i] == twin[i]);
            if (!ok && bad++ < 3)
                fprintf(stderr, "  %s%s: token %d row %d: %.9g, exact %.9g, twin %.9g\n", level,
                        packed ? " packed" : "", i / NR, i % NR, got[i], want[i], twin[i]);
        }
        CHECK(bad == 0, "%s%s: %d of %d outputs differ", level, packed ? " packed" : "", bad, NT * NR);
    }
    free(w); free(x); free(scratch); free(wp);
}

/* ---- pool --------------------------------------------------------------- */

typedef struct {
    _Atomic int calls[8];
    _Atomic int bad_nth;
    int nth;
} pool_job;

static void pool_fn(void *arg, int ith, int nth) {
    pool_job *j = arg;
    if (nth != j->nth || ith < 0 || ith >= nth) atomic_fetch_add(&j->bad_nth, 1);
    else atomic_fetch_add(&j->calls[ith], 1);
}

typedef struct {
    pthread_t caller;
    int force;                  /* slot 0 waits for a worker to start slot 1 */
    _Atomic int on_worker, slots, started;
} stall_job;

/* A slot on a worker sleeps 5 ms: a worker that lost its core mid-slot.
 * With force, the caller's slot 0 first waits (up to 1 s) until a worker has
 * started slot 1, so that the caller cannot take it itself. */
static void stall_fn(void *arg, int ith, int nth) {
    (void)nth;
    stall_job *j = arg;
    atomic_fetch_add(&j->slots, 1);
    if (!pthread_equal(pthread_self(), j->caller)) {
        atomic_fetch_add(&j->on_worker, 1);
        atomic_store(&j->started, 1);
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    } else if (ith == 0 && j->force) {
        for (int i = 0; i < 100000 && !atomic_load(&j->started); i++) {
            struct timespec ts = {0, 10000};
            nanosleep(&ts, NULL);
        }
    }
}

/* A long run that keeps both cores: the caller's slot works 2 ms, the
 * worker's 3 ms, so the caller waits ~1 ms, less than it worked. That is a
 * chunk's tail, not a lost core; counting it as a stall would send prefill
 * and big batches solo on a quiet machine. The worker notes whether the
 * machine took its core during the slot (wall time beyond its CPU time);
 * start[] is when each slot began (0: the worker ran none). */
typedef struct {
    pthread_t caller;
    _Atomic int descheduled;
    double start[2]; /* [0] the worker's slot, [1] the caller's */
    double worker_end;
} long_job;

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void long_fn(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    long_job *j = arg;
    const bool caller = pthread_equal(pthread_self(), j->caller);
    const double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    j->start[caller] = w0;
    while (clock_ms(CLOCK_MONOTONIC) - w0 < (caller ? 2.0 : 3.0)) __builtin_ia32_pause();
    if (!caller && (clock_ms(CLOCK_MONOTONIC) - w0) - (clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0) > 0.2)
        atomic_store(&j->descheduled, 1);
    if (!caller) j->worker_end = clock_ms(CLOCK_MONOTONIC);
}

static void test_pool(void) {
    for (int n = 1; n <= 4; n++) {
        thread_pool *p = pool_create(n);
        CHECK(p && pool_size(p) == n, "create %d", n);
        if (!p) continue;
        pool_job j = {.nth = n};
        const int runs = 4000;
        for (int r = 0; r < runs; r++) {
            pool_run(p, pool_fn, &j);
            if (r % 1000 == 999) { /* let the workers go to sleep on the futex */
                struct timespec ts = {0, 2000000};
                nanosleep(&ts, NULL);
            }
        }
        for (int i = 0; i < n; i++) CHECK(atomic_load(&j.calls[i]) == runs, "n=%d thread %d ran %d times", n, i, atomic_load(&j.calls[i]));
        CHECK(atomic_load(&j.bad_nth) == 0, "bad ith/nth");
        pool_free(p);
    }
    /* A worker that loses its core in the middle of its slot (here: sleeps
     * 5 ms) stalls the caller; after four such runs the pool works alone
     * for a while instead of waiting on a core it does not get. */
    thread_pool *p2 = pool_create(2);
    CHECK(p2 != NULL, "create 2");
    if (p2) {
        stall_job sj = {.caller = pthread_self(), .force = 1};
        uint64_t runs = 0, solo = 0, stalls = 0;
        int forced = 0;
        while (forced < 50 && solo == 0) { /* each forced run stalls the caller ~5 ms */
            atomic_store(&sj.started, 0);
            pool_run(p2, stall_fn, &sj);
            forced++;
            pool_run(p2, stall_fn, &(stall_job){.caller = pthread_self()}); /* solo now? */
            pool_stats(p2, &runs, &solo, &stalls);
        }
        sj.force = 0;
        const int before = atomic_load(&sj.on_worker), slots_before = atomic_load(&sj.slots);
        for (int r = 0; r < 100; r++) pool_run(p2, stall_fn, &sj);
        uint64_t runs2, solo2, stalls2;
        pool_stats(p2, &runs2, &solo2, &stalls2);
        CHECK(stalls >= 4 && solo2 - solo == 100 && atomic_load(&sj.on_worker) == before &&
                  atomic_load(&sj.slots) == slots_before + 200,
              "after %d forced stalls (%llu counted), 100 runs: %llu solo, %d slots on a worker, %d slots run",
              forced, (unsigned long long)stalls, (unsigned long long)(solo2 - solo),
              atomic_load(&sj.on_worker) - before, atomic_load(&sj.slots) - slots_before);
        pool_free(p2);
    }
    /* long runs whose worker keeps its core are never stalls */
    thread_pool *p3 = pool_create(2);
    CHECK(p3 != NULL, "create 2");
    if (p3) {
        int clean = 0, tries = 0, false_stalls = 0;
        for (; clean < 8 && tries < 400; tries++) {
            long_job lj = {.caller = pthread_self()};
            uint64_t r0, s0, st0, r1, s1, st1;
            pool_stats(p3, &r0, &s0, &st0);
            pool_run(p3, long_fn, &lj);
            const double t_ret = clock_ms(CLOCK_MONOTONIC);
            pool_stats(p3, &r1, &s1, &st1);
            /* skipped: the worker did not run a slot, woke late (a vCPU
             * wake-up from idle takes ~1 ms here) or lost its core mid-slot,
             * or the caller got its core back late after the worker was done
             * (another process on it): the machine's doing; or the pool was
             * solo */
            if (!lj.start[0] || lj.start[0] - lj.start[1] > 0.2 || atomic_load(&lj.descheduled) ||
                t_ret - lj.worker_end > 0.2 || s1 != s0)
                continue;
            clean++;
            false_stalls += st1 != st0;
        }
        /* a loaded machine leaves few clean runs; one is still a case */
        CHECK(clean >= 1 && false_stalls == 0,
              "%d of %d long runs kept both cores; %d of them counted as stalls", clean, tries, false_stalls);
        pool_free(p3);
    }
    /* the rule itself: a wait is a stall past 300 us and past the caller's own work */
    static const struct { uint64_t wait_us, work_us; bool stall; } rule[] = {
        {1000, 2000, false}, /* a long run's tail */
        {5000, 10, true},    /* a decode run whose worker lost its core */
        {200, 10, false},    /* short: a wake-up, not a lost core */
        {400, 350, true},
        {400, 500, false},
    };
    for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++)
        CHECK(pool_stalled(rule[i].wait_us * 1000, rule[i].work_us * 1000) == rule[i].stall,
              "wait %llu us after %llu us of work: stall %d", (unsigned long long)rule[i].wait_us,
              (unsigned long long)rule[i].work_us, rule[i].stall);
    CHECK(pool_create(0) == NULL, "0 threads refused");
    CHECK(pool_size(NULL) == 1, "NULL pool is one thread");
    pool_job j = {.nth = 1};
    pool_run(NULL, pool_fn, &j);
    CHECK(atomic_load(&j.calls[0]) == 1, "NULL pool runs on the caller");
}

int main(void) {
    RUN(test_env_override); /* before this process initialises the dispatcher */
    const char *chosen = kernels_init();
    RUN(test_traits);
    RUN(test_dispatch);
    RUN(test_fp16_bf16);
    RUN(test_q8_0_hand);
    RUN(test_q8_K_hand);
    const tensor_type rt[] = {SP_TYPE_F32,  SP_TYPE_F16,  SP_TYPE_BF16, SP_TYPE_Q8_0, SP_TYPE_Q4_0,
                              SP_TYPE_Q5_0, SP_TYPE_Q5_1, SP_TYPE_Q4_K, SP_TYPE_Q6_K, SP_TYPE_Q8_K};
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) RUN_NAMED(quant_roundtrip, rt[i], type_info(rt[i])->name);
    for (int i = 0; i < N_TYPES; i++) RUN_NAMED(vec_dot_case, TYPES[i], type_info(TYPES[i])->name);
    for (int i = 0; i < N_TYPES; i++) RUN_NAMED(matmul_case, TYPES[i], type_info(TYPES[i])->name);
    for (int l = 0; l < N_LEVELS; l++) RUN_NAMED(test_q6_K_extremes, LEVELS[l], LEVELS[l]);
    RUN(test_pool);
    kernels_force(chosen);
    TEST_END();
}
