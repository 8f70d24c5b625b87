/* test_families.c: the newer families (qwen3, gemma3, phi3, smollm3,
 * qwen3moe) through
 * the engine, and sliding-window layers in the paged KV store.
 *   - the store with a window pool: a sequence holds only the window
 *     blocks its next query can see, the invariant checker holds after
 *     every operation, prefix match/attach need the last window, append
 *     and block_read carry both pools;
 *   - the forward pass over the paged store, fed in chunks (blocks given
 *     back between them), gives the logits it gives over the contiguous
 *     store that keeps every position, bit for bit;
 *   - the engine on each family (Gemma 3 shaped: window 16 on five layers
 *     of six; Phi-3 shaped: a window on every layer; Qwen3 and SmolLM3
 *     shaped; Qwen3-MoE shaped, 16 experts of which 4 per token, one
 *     with experts of 64 rows (packed at load) and one of 40 (left as in
 *     the file), so verification and prefill group several tokens per
 *     expert): greedy and seeded sampled output identical with the prefix
 *     cache on and off, with the n-gram, suffix and draft proposers (the
 *     model drafting for itself) on and off, and restored from the disk
 *     tier by a second engine; a second request sharing a prefix longer than
 *     the window served from the cache, and the window pool holding about a
 *     window per sequence; with an f16 and a q8_0 KV cache.
 * Models come from bin/mkmodel (SPECULA_MKMODEL) with seeded random weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "specula.h"
#include "test.h"

static sp_model *gemma, *phi, *qwen3, *smollm3, *moe, *moe40;

/* ---- the store ------------------------------------------------------------ */

static void store_window(void) {
    /* 3 layers, the outer two sliding; window 8 positions; blocks of 4 */
    const bool slides[3] = {true, false, true};
    kv_paged_params p = {SP_TYPE_F32, 3, 2, 4, 32, 2, 16, true, 8, slides, 16};
    char err[256];
    kv_store *kv = kv_paged_create(p, err, sizeof(err));
    REQUIRE(kv, "%s", err);
    CHECK(kv->n_layer == 3, "n_layer %d", kv->n_layer);
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    CHECK(st.block_bytes == kv_paged_block_bytes(SP_TYPE_F32, 1, 2, 4) &&
              st.win_block_bytes == kv_paged_block_bytes(SP_TYPE_F32, 2, 2, 4),
          "block bytes %zu / %zu", st.block_bytes, st.win_block_bytes);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 100 + i;
    block_digest h[16];
    CHECK(block_hash_chain(toks, 64, 4, NULL, 0, NULL, 0, h) == 16, "hashes");
    /* sequence 0: 40 positions, 3 at a time; every row written holds its
     * layer and position, and reads back while inside the window */
    int32_t len = 0;
    while (len < 40) {
        const int n = len + 3 <= 40 ? 3 : 40 - len;
        REQUIRE(kv->ops->reserve(kv, 0, n) == 0, "reserve at %d", len);
        for (int l = 0; l < 3; l++)
            for (int q = len; q < len + n; q++) {
                float *k = kv->ops->k_row(kv, l, 0, q), *v = kv->ops->v_row(kv, l, 0, q);
                k[0] = (float)l, k[1] = (float)q, v[0] = (float)-l, v[1] = (float)-q;
            }
        kv->ops->set_len(kv, 0, len + n);
        len += n;
        for (int b = 0; b < len / 4; b++) kv_paged_commit(kv, 0, b, &h[b]);
        CHECK(kv_paged_check(kv, err, sizeof(err)) == 0, "at %d: %s", len, err);
        /* a sliding layer still reads its window; a full one everything */
        for (int l = 0; l < 3; l++)
            for (int q = slides[l] ? (len - 8 > 0 ? len - 8 : 0) : 0; q < len; q++) {
                const void *k, *v;
                CHECK(kv->ops->span(kv, l, 0, q, len, &k, &v) >= 1, "span");
                CHECK(((const float *)k)[0] == (float)l && ((const float *)k)[1] == (float)q &&
                          ((const float *)v)[1] == (float)-q, "layer %d position %d reads back", l, q);
            }
        kv_paged_get_stats(kv, &st);
        /* the window (8) plus the block being filled and one partial */
        CHECK(st.win_in_use <= 8 / 4 + 2, "at %d: %d window blocks in use", len, st.win_in_use);
    }
    CHECK(st.n_in_use == 10, "main pool: %d blocks in use", st.n_in_use);
    /* the window blocks given back stay findable: a prefix of 6 blocks
     * (24 positions) needs its last window, blocks 3..5 (positions 17..23) */
    CHECK(kv_paged_match(kv, h, 10) == 10, "match the whole prefix: %d", kv_paged_match(kv, h, 10));
    CHECK(kv_paged_match(kv, h, 6) == 6, "match 6 blocks: %d", kv_paged_match(kv, h, 6));
    uint8_t blk[2][1024];
    CHECK(kv_paged_block_read(kv, 0, 9, blk[0]) == 0, "block 9 read");
    CHECK(kv_paged_block_read(kv, 0, 2, blk[1]) == -1, "block 2's window part was given back");
    REQUIRE(kv_paged_attach(kv, 1, h, 6) == 0, "attach 6 blocks");
    CHECK(kv->ops->len(kv, 1) == 24, "len %d", kv->ops->len(kv, 1));
    CHECK(kv_paged_check(kv, err, sizeof(err)) == 0, "after attach: %s", err);
    const void *k, *v;
    kv->ops->span(kv, 0, 1, 17, 24, &k, &v);
    CHECK(((const float *)k)[1] == 17.0f, "sliding layer position 17 from the cache");
    kv->ops->span(kv, 1, 1, 0, 24, &k, &v);
    CHECK(((const float *)k)[1] == 0.0f, "full layer position 0 from the cache");
    /* the whole sequence 0 gone: its window blocks before 32 were given back
     * and its main blocks are cached; sequence 1 still holds its own */
    kv->ops->set_len(kv, 0, 0);
    kv->ops->set_len(kv, 1, 0);
    CHECK(kv_paged_check(kv, err, sizeof(err)) == 0, "after release: %s", err);
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_in_use == 0 && st.win_in_use == 0, "in use %d / %d", st.n_in_use, st.win_in_use);
    /* evicting the window pool's cached blocks shortens what matches, never
     * more than the main pool holds */
    kv_paged_flush(kv);
    CHECK(kv_paged_match(kv, h, 10) == 0, "after a flush: %d", kv_paged_match(kv, h, 10));
    /* append restores both parts, and keeps only the window in its pool */
    for (int b = 0; b < 10; b++) CHECK(kv_paged_append(kv, 1, &h[b], blk[0]) == 0, "append %d", b);
    kv_paged_get_stats(kv, &st);
    CHECK(st.win_in_use <= 3 && st.n_in_use == 10, "after appends: %d / %d", st.win_in_use, st.n_in_use);
    CHECK(kv_paged_check(kv, err, sizeof(err)) == 0, "after appends: %s", err);
    kv->ops->destroy(kv);
}

/* ---- the forward pass ------------------------------------------------------- */

/* logits of the last token of toks[0..n) fed in chunks of `chunk` into a
 * context over kv (NULL: the contiguous store); out[V] */
static int logits_of(sp_model *m, kv_store *kv, const sp_token *toks, int n, int chunk, float *out) {
    char err[256];
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.kv_type = SP_KV_F16;
    sp_context *c = kv ? context_create_with_kv(m, cp, kv, NULL, err, sizeof(err)) : sp_context_create(m, cp, err, sizeof(err));
    if (!c) return -1;
    int32_t pos[64], seq[64];
    int rc = 0;
    for (int at = 0; at < n && !rc; at += chunk) {
        const int k = n - at < chunk ? n - at : chunk;
        for (int i = 0; i < k; i++) pos[i] = at + i, seq[i] = 0;
        sp_batch b = {k, (sp_token *)toks + at, pos, seq, NULL};
        rc = sp_decode(c, &b, err, sizeof(err));
    }
    if (!rc) memcpy(out, sp_get_logits(c, 0), sizeof(float) * sp_model_get_info(m)->n_vocab);
    sp_context_free(c);
    return rc;
}

static void forward_paged(sp_model **mp) {
    sp_model *m = *mp;
    REQUIRE(m, "no model");
    const sp_model_info *h = sp_model_get_info(m);
    bool slides[64] = {false};
    for (int l = 0; l < h->n_layer; l++) slides[l] = m->layers[l].window > 0;
    sp_token toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (sp_token)(1 + (i * 7919) % (h->n_vocab - 1));
    const int V = h->n_vocab;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    REQUIRE(a && b, "oom");
    REQUIRE(logits_of(m, NULL, toks, 150, 64, a) == 0, "contiguous store");
    static const int chunks[] = {1, 5, 16, 64};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        char err[256];
        kv_paged_params p = {SP_TYPE_F16, h->n_layer, h->n_head_kv * h->head_dim, 16, 64, 1, 16, true,
                             h->n_swa, slides, 8};
        kv_store *kv = kv_paged_create(p, err, sizeof(err));
        CHECK(kv, "%s", err);
        if (!kv) continue;
        CHECK(logits_of(m, kv, toks, 150, chunks[ci], b) == 0, "paged store, chunks of %d", chunks[ci]);
        CHECK(!memcmp(a, b, sizeof(float) * V), "chunks of %d: logits differ from the contiguous store", chunks[ci]);
        kv_paged_stats st;
        kv_paged_get_stats(kv, &st);
        CHECK(st.win_in_use == 0 || st.win_in_use <= (h->n_swa + chunks[ci]) / 16 + 2,
              "%d window blocks held (window %d)", st.win_in_use, h->n_swa);
        kv->ops->destroy(kv);
    }
    free(a);
    free(b);
}

/* ---- the engine -------------------------------------------------------------- */

static const char *DOC =
    "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n\n"
    "class Config:\n    def __init__(self, path):\n        self.items = {}\n        with open(path) as fh:\n"
    "            for line in fh:\n                k, v = parse(line)\n                self.items[k] = v\n";
static const char *TAILS[] = {"\n    def get(self, key):\n", "\n    def __len__(self):\n",
                              "\n    def keys(self):\n        return", "\n    def save(self, path):\n"};
#define NT 4

typedef struct {
    sp_token toks[64];
    int32_t n;
    sp_request_stats st;
} result;

static void run_all(sp_engine *e, sp_request_params *reqs, int n, result *out) {
    char err[256];
    for (int i = 0; i < n; i++) { /* one at a time: the second finds the first's blocks */
        int64_t id = sp_engine_submit(e, &reqs[i], err, sizeof(err));
        CHECK(id > 0, "submit: %s", err);
        if (id <= 0) continue;
        sp_request_status st;
        CHECK(sp_engine_wait(e, id, 1 << 30, -1, &st) == 0 && st.finished, "wait");
        out[i].n = st.n_tokens;
        out[i].st = st.stats;
        sp_engine_read(e, id, out[i].toks, 64, NULL, 0);
        sp_engine_release(e, id);
    }
}

static void engine_identical(sp_model **mp) {
    sp_model *m = *mp;
    REQUIRE(m, "no model");
    static char prompts[NT][1024];
    sp_request_params reqs[2 * NT];
    for (int i = 0; i < NT; i++) {
        snprintf(prompts[i], sizeof prompts[i], "%s%s", DOC, TAILS[i]);
        for (int s = 0; s < 2; s++) {
            sp_request_params *r = &reqs[s * NT + i];
            *r = sp_request_default_params();
            r->prompt = prompts[i];
            r->max_tokens = 40;
            r->ignore_eos = true;
            r->sampling = s ? sp_sampler_default_params() : sp_sampler_greedy_params();
            if (s) r->sampling.temperature = 0.9f, r->sampling.seed = 7 + i;
        }
    }
    static result base[2 * NT], other[2 * NT];
    /* the reference: no cache, no speculation; per KV type */
    const struct { bool cache; sp_spec_mode spec; int disk; const char *what; } runs[] = {
        {false, SP_SPEC_OFF, 0, "reference"}, {true, SP_SPEC_OFF, 0, "prefix cache"},
        {true, SP_SPEC_NGRAM, 0, "cache + ngram"}, {false, SP_SPEC_SUFFIX, 0, "suffix"},
        {true, SP_SPEC_DRAFT, 0, "cache + draft (itself)"}, {true, SP_SPEC_OFF, 1, "disk tier, writing"},
        {true, SP_SPEC_OFF, 2, "disk tier, restored"}};
    const bool windowed = sp_model_get_info(m)->n_swa > 0;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/specula-test-families-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    for (int kt = 0; kt < 2; kt++)
    for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
        sp_engine_params p = sp_engine_default_params();
        p.n_threads = 2;
        p.n_ctx = 512;
        p.max_seqs = 4;
        p.max_batch_tokens = 32; /* prompts in several chunks: blocks given back between them */
        p.debug_check = true;
        p.prefix_cache = runs[ri].cache;
        p.spec = runs[ri].spec;
        if (p.spec == SP_SPEC_DRAFT) p.draft = m;
        if (runs[ri].disk) p.kv_disk_dir = dir;
        p.kv_type = kt ? SP_KV_Q8_0 : SP_KV_F16;
        char err[256];
        sp_engine *e = sp_engine_create(m, p, err, sizeof(err));
        CHECK(e, "%s: %s", runs[ri].what, err);
        if (!e) continue;
        result *out = ri ? other : base;
        run_all(e, reqs, 2 * NT, out);
        sp_engine_stats st;
        sp_engine_get_stats(e, &st);
        CHECK(sp_engine_check(e, err, sizeof(err)) == 0, "%s: %s", runs[ri].what, err);
        CHECK((st.window_blocks_total > 0) == windowed && st.window_blocks_in_use == 0 && st.blocks_in_use == 0,
              "%s: window pool %d blocks, %d in use", runs[ri].what, st.window_blocks_total, st.window_blocks_in_use);
        if (runs[ri].disk == 2)
            CHECK(out[0].st.cached_tokens_disk >= 48, "%s: the first request restored %d tokens from disk",
                  runs[ri].what, out[0].st.cached_tokens_disk);
        sp_engine_free(e);
        if (runs[ri].disk == 2) {
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            CHECK(system(cmd) == 0, "rm");
        }
        if (!ri) continue;
        for (int i = 0; i < 2 * NT; i++) {
            CHECK(out[i].n == base[i].n && !memcmp(out[i].toks, base[i].toks, sizeof(sp_token) * (size_t)out[i].n),
                  "%s (%s KV): request %d differs from the reference", runs[ri].what, kt ? "q8_0" : "f16", i);
            if (runs[ri].cache && i > 0)
                CHECK(out[i].st.cached_tokens >= 48, "%s: request %d found %d cached tokens (prompt %d)",
                      runs[ri].what, i, out[i].st.cached_tokens, out[i].st.prompt_tokens);
        }
    }
}

static sp_model *make(const char *name, const char *opts) {
    const char *mk = getenv("SPECULA_MKMODEL") ? getenv("SPECULA_MKMODEL") : "bin/mkmodel";
    char path[256], cmd[1024], err[256];
    snprintf(path, sizeof path, "%s/specula-test-families-%d-%s.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), name);
    snprintf(cmd, sizeof cmd, "%s -o %s --vocab-from %s/vocab/ggml-vocab-llama-spm.gguf %s --threads 2 >/dev/null 2>&1",
             mk, path, t_ref_dir(), opts);
    if (system(cmd) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return NULL;
    }
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof err);
    if (!m) fprintf(stderr, "%s: %s\n", path, err);
    unlink(path);
    return m;
}

int main(void) {
    gemma = make("gemma3", "--arch gemma3 --type f16 --n-embd 128 --n-layer 6 --n-head 4 --n-head-kv 2 "
                           "--head-dim 32 --n-ff 256 --tied --swa 16 --ctx 1024 --seed 11");
    phi = make("phi3", "--arch phi3 --type f16 --n-embd 128 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 256 "
                       "--swa 24 --ctx 1024 --seed 12");
    qwen3 = make("qwen3", "--arch qwen3 --type q8_0 --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 "
                          "--head-dim 64 --n-ff 256 --ctx 1024 --seed 13");
    smollm3 = make("smollm3", "--arch smollm3 --type f16 --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 "
                              "--n-ff 256 --ctx 1024 --seed 14");
    moe = make("qwen3moe", "--arch qwen3moe --type q8_0 --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 "
                           "--head-dim 32 --n-ff 256 --n-expert 16 --n-expert-used 4 --n-ff-exp 64 --ctx 1024 --seed 15");
    moe40 = make("qwen3moe40", "--arch qwen3moe --type f16 --n-embd 96 --n-layer 2 --n-head 3 --n-head-kv 1 "
                               "--head-dim 32 --n-ff 256 --n-expert 16 --n-expert-used 4 --n-ff-exp 40 --ctx 1024 --seed 16");
    RUN(store_window);
    RUN_NAMED(forward_paged, &gemma, "forward_paged gemma3");
    RUN_NAMED(forward_paged, &phi, "forward_paged phi3");
    RUN_NAMED(engine_identical, &gemma, "engine_identical gemma3");
    RUN_NAMED(engine_identical, &phi, "engine_identical phi3");
    RUN_NAMED(engine_identical, &qwen3, "engine_identical qwen3");
    RUN_NAMED(engine_identical, &smollm3, "engine_identical smollm3");
    RUN_NAMED(engine_identical, &moe, "engine_identical qwen3moe");
    RUN_NAMED(engine_identical, &moe40, "engine_identical qwen3moe, experts of 40 rows");
    sp_model_free(gemma);
    sp_model_free(phi);
    sp_model_free(qwen3);
    sp_model_free(smollm3);
    sp_model_free(moe);
    sp_model_free(moe40);
    TEST_END();
}
