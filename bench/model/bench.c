/* bench.c: `make bench`: engine-core throughput on a model file, against the
 * machine's memory-bandwidth roofline measured in the same run.
 *
 * usage: bin/bench MODEL [threads] [prompt_tokens] [decode_tokens] [--depth N] [--kv f16|q8_0|f32] [--pp-tg]
 * --kv: the KV cache's element type (default f16).
 * Prints one Markdown table row per metric and a JSON line for tooling.
 * --depth N: decode and the verification passes start after N positions
 * of context (filled in prompt-sized chunks) instead of after the prompt:
 * attention's share of a step grows with the context. The fill's rate is
 * reported too (prefill of a long prompt, chunk by chunk).
 * Reported numbers are the best of several repetitions (the machine is
 * shared; the best run is the least disturbed one).
 *
 * --pp-tg: llama-bench's workload instead (`llama-bench -p P -n N -r 1`,
 * what bench/peers/run.sh sets Specula beside ik_llama.cpp and llama.cpp
 * with): one warm-up prompt and one warm-up token, then one timed prompt of
 * P tokens from an empty sequence with only the last token's logits (pp),
 * then N single-token steps from an empty sequence, each with its logits
 * (tg). One JSON line, no repetitions, no bandwidth runs; with each phase's
 * wall and CPU seconds (pp_s, pp_cpu_s, tg_s, tg_cpu_s).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "kernels/kernels.h"
#include "specula.h"

double bench_sum_avx2(const float *p, size_t n);

typedef struct {
    const float *buf;
    size_t n;
    double sink[64];
} bw_task;

static void bw_worker(void *arg, int ith, int nth) {
    bw_task *t = arg;
    size_t chunk = (t->n / nth) & ~(size_t)63;
    t->sink[ith] = bench_sum_avx2(t->buf + (size_t)ith * chunk, chunk);
}

#define BW_BYTES (1ull << 30)

/* GB/s (1e9 bytes) of one read of a 1 GiB buffer with every pool thread. */
static double measure_bandwidth(thread_pool *pool, const float *buf) {
    bw_task t = {buf, BW_BYTES / sizeof(float), {0}};
    double t0 = time_s();
    pool_run(pool, bw_worker, &t);
    return BW_BYTES / (time_s() - t0) / 1e9;
}

/* CPU seconds of every thread of this process so far. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double decode_once(sp_context *c, const sp_token *toks, int n, int pos0, int want_all) {
    int32_t pos[512], seq[512] = {0};
    int8_t want[512];
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        want[i] = (int8_t)(want_all || i == n - 1);
    }
    sp_batch b = {n, toks, pos, seq, want};
    char err[256];
    double t0 = time_s();
    if (sp_decode(c, &b, err, sizeof(err))) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }
    return time_s() - t0;
}

/* --pp-tg: see the top of the file. tg starts at position 0 like
 * llama-bench's tg test (a fresh context per test there, a cleared
 * sequence here). */
static void pp_tg(sp_context *c, const char *path, const char *level, int threads, double load_s,
                  const sp_token *toks, int n_prompt, int n_decode) {
    decode_once(c, toks, n_prompt, 0, 0); /* warm-up */
    sp_seq_clear(c, 0);
    decode_once(c, toks, 1, 0, 1);
    sp_seq_clear(c, 0);
    /* CPU time per phase (all threads; the pool's workers wait by spinning
     * briefly, then sleeping): cores busy = CPU s / wall s, at most
     * `threads`. What a phase costs the machine, not only how long. */
    double c0 = cpu_s();
    const double pp = decode_once(c, toks, n_prompt, 0, 0);
    const double pp_cpu = cpu_s() - c0;
    sp_seq_clear(c, 0);
    double tg = 0;
    c0 = cpu_s();
    for (int i = 0; i < n_decode; i++) tg += decode_once(c, &toks[i % 16], 1, i, 1);
    const double tg_cpu = cpu_s() - c0;
    printf("{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"load_s\": %.3f, "
           "\"n_prompt\": %d, \"n_gen\": %d, \"pp_tps\": %.3f, \"tg_tps\": %.3f, "
           "\"pp_s\": %.4f, \"tg_s\": %.4f, \"pp_cpu_s\": %.4f, \"tg_cpu_s\": %.4f}\n",
           path, threads, level, load_s, n_prompt, n_decode, n_prompt / pp, n_decode / tg, pp, tg,
           pp_cpu, tg_cpu);
}

int main(int argc, char **argv) {
    int pp_tg_mode = 0, depth = 0;
    sp_kv_type kv_type = SP_KV_F16;
    {   /* the options, wherever they are; the positional arguments keep their order */
        int n = 1;
        for (int i = 1; i < argc; i++) {
            if (!strcmp(argv[i], "--pp-tg")) pp_tg_mode = 1;
            else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = atoi(argv[++i]);
            else if (!strcmp(argv[i], "--kv") && i + 1 < argc) {
                const char *v = argv[++i];
                kv_type = !strcmp(v, "q8_0") ? SP_KV_Q8_0 : !strcmp(v, "f32") ? SP_KV_F32 : SP_KV_F16;
            }
            else argv[n++] = argv[i];
        }
        argc = n;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: bench MODEL [threads] [prompt_tokens] [decode_tokens] [--depth N] [--kv f16|q8_0|f32] [--pp-tg]\n");
        return 2;
    }
    const char *path = argv[1];
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int n_prompt = argc > 3 ? atoi(argv[3]) : 128;
    int n_decode = argc > 4 ? atoi(argv[4]) : 32;
    if (threads < 1 || n_prompt < 1 || n_prompt > 512 || n_decode < 2 || depth < 0 || depth > 65536 ||
        (depth && pp_tg_mode)) {
        fprintf(stderr, "bench: bad arguments\n");
        return 2;
    }
    const char *level = kernels_init();
    char err[512];
    double t0 = time_s();
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    double load_s = time_s() - t0;
    const sp_model_info *h = sp_model_get_info(m);
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = threads;
    const int base = depth ? depth : n_prompt; /* where decode and verification start */
    cp.n_ctx = SP_MAX(n_prompt, base) + n_decode + 16;
    cp.n_batch = n_prompt;
    cp.kv_type = kv_type;
    sp_context *c = sp_context_create(m, cp, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    sp_token *toks = malloc(sizeof(sp_token) * (size_t)(n_prompt + 16));
    if (!toks) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n_prompt + 16; i++) toks[i] = 1 + (sp_token)((i * 7919) % (h->n_vocab - 1));
    if (pp_tg_mode) {
        pp_tg(c, path, level, threads, load_s, toks, n_prompt, n_decode);
        free(toks);
        sp_context_free(c);
        sp_model_free(m);
        return 0;
    }
    thread_pool *pool = pool_create(threads);
    float *bw_buf = aligned_alloc(64, BW_BYTES);
    if (!pool || !bw_buf) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    memset(bw_buf, 1, BW_BYTES);

    /* bytes a decode step reads: every weight but the embedding table, of
     * which it reads one row (unless the output head is that table) */
    uint64_t step_bytes = h->weight_bytes;
    if (!h->tied_output) step_bytes -= h->tok_embd_bytes;
    /* a mixture of experts: one token reads only its experts' share */
    if (h->n_expert)
        step_bytes -= (uint64_t)((double)h->expert_bytes * (1.0 - (double)h->n_expert_used / h->n_expert));

    /* prefill: best of 3 */
    double best_prefill = 1e30;
    for (int r = 0; r < 3; r++) {
        sp_seq_clear(c, 0);
        double dt = decode_once(c, toks, n_prompt, 0, 0);
        if (dt < best_prefill) best_prefill = dt;
    }
    /* --depth: the context decode and verification start after */
    double fill_s = 0;
    if (depth) {
        sp_seq_clear(c, 0);
        for (int p = 0; p < depth; p += n_prompt) fill_s += decode_once(c, toks, SP_MIN(n_prompt, depth - p), p, 0);
    }
    /* decode: single-token steps after the prompt. This machine's bandwidth
     * varies by 2x over minutes, so each round measures the bandwidth right
     * before and right after its n_decode steps and the roofline fraction is
     * taken per round, against the mean of the two; the median round is
     * reported (and the best, for reference). */
    enum { ROUNDS = 7 };
    double frac[ROUNDS], dec_tps[ROUNDS], bw_r[ROUNDS];
    double bw = 0, best_decode = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double b0 = measure_bandwidth(pool, bw_buf);
        sp_seq_truncate(c, 0, base);
        double tot = 0;
        for (int i = 0; i < n_decode; i++) tot += decode_once(c, &toks[i % 16], 1, base + i, 1);
        double b1 = measure_bandwidth(pool, bw_buf);
        bw_r[r] = 0.5 * (b0 + b1);
        dec_tps[r] = n_decode / tot;
        frac[r] = dec_tps[r] / (bw_r[r] * 1e9 / (double)step_bytes);
        bw = fmax(bw, fmax(b0, b1));
        best_decode = fmin(best_decode, tot / n_decode);
    }
    /* median round by roofline fraction */
    int order[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) order[r] = r;
    for (int i = 1; i < ROUNDS; i++)
        for (int j = i; j > 0 && frac[order[j]] < frac[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    const int med = order[ROUNDS / 2];
    const double best_frac = frac[order[ROUNDS - 1]];
    free(bw_buf);
    pool_free(pool);
    /* verification of k tokens in one pass vs one token, at the same place.
     * The k values take turns in each round, so a disturbance on the shared
     * machine hits them alike; the best of the rounds is reported. */
    const int ks[] = {1, 2, 4, 5, 8};
    double tk[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < 12; r++)
        for (int j = 0; j < 5; j++) {
            sp_seq_truncate(c, 0, base);
            double dt = decode_once(c, toks, ks[j], base, 1);
            if (dt < tk[j]) tk[j] = dt;
        }
    const double decode_tps = 1.0 / best_decode;
    printf("| model | %s (%s, %.0f MiB of weights, %.2f GB read per token) |\n", path, h->arch,
           h->weight_bytes / 1048576.0, step_bytes / 1e9);
    printf("| kernels / threads | %s / %d |\n", level, threads);
    printf("| load | %.0f ms |\n", load_s * 1e3);
    printf("| memory read bandwidth (best) | %.1f GB/s |\n", bw);
    printf("| prefill (%d-token prompt) | %.1f tokens/s |\n", n_prompt, n_prompt / best_prefill);
    printf("| decode (best)%s | %.2f tokens/s (%.1f ms/token) |\n", depth ? ", after --depth positions" : "", decode_tps,
           best_decode * 1e3);
    if (depth) printf("| depth (positions before decode and verification) | %d, filled at %.2f tokens/s |\n", depth,
                      depth / fill_s);
    printf("| decode / roofline, median of %d rounds | %.1f%% (%.2f tokens/s at %.1f GB/s) |\n",
           ROUNDS, 100.0 * frac[med], dec_tps[med], bw_r[med]);
    printf("| decode / roofline, best round | %.1f%% |\n", 100.0 * best_frac);
    for (int j = 1; j < 5; j++)
        printf("| verify k=%d in one pass vs 1 token | %.2fx (%.1f ms) |\n", ks[j], tk[j] / tk[0],
               tk[j] * 1e3);
    printf("{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"bandwidth_gbs\": %.2f, "
           "\"prefill_tps\": %.2f, \"decode_tps\": %.3f, \"roofline_frac_median\": %.4f, "
           "\"roofline_frac_best\": %.4f, \"verify_ratio\": {\"2\": %.3f, \"4\": %.3f, \"5\": %.3f, "
           "\"8\": %.3f}, \"depth\": %d, \"verify_1_ms\": %.3f, \"fill_tps\": %.3f, \"kv\": \"%s\"}\n",
           path, threads, level, bw, n_prompt / best_prefill, decode_tps, frac[med], best_frac,
           tk[1] / tk[0], tk[2] / tk[0], tk[3] / tk[0], tk[4] / tk[0], base, tk[0] * 1e3,
           depth ? depth / fill_s : 0.0, kv_type == SP_KV_Q8_0 ? "q8_0" : kv_type == SP_KV_F32 ? "f32" : "f16");
    free(toks);
    sp_context_free(c);
    sp_model_free(m);
    return 0;
}
