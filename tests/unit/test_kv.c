/* test_kv.c: the paged KV store, its prefix cache and the block hash chain.
 *
 * Every case runs kv_paged_check after each state change; the stress case
 * keeps a shadow model of every sequence's tokens and verifies that the K/V
 * written for each (sequence content, position, layer) reads back unchanged
 * through span, also through blocks shared with other sequences.
 */
#include <openssl/evp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/kv_paged.h"
#include "test.h"

#define CHECK_INV(kv)                                                          \
    do {                                                                       \
        char e_[256] = "";                                                     \
        int r_ = kv_paged_check(kv, e_, sizeof(e_));                        \
        CHECK(r_ == 0, "invariant: %s", e_);                                   \
    } while (0)

static kv_paged_params params(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t bs,
                                 int32_t n_blocks, int32_t n_seq, int32_t max_blocks,
                                 bool cache) {
    return (kv_paged_params){type, n_layer, kv_dim, bs, n_blocks, n_seq, max_blocks, cache, 0, NULL, 0};
}

static kv_store *mk(kv_paged_params p) {
    char err[256] = "";
    kv_store *kv = kv_paged_create(p, err, sizeof(err));
    if (!kv) fprintf(stderr, "create: %s\n", err);
    return kv;
}

static void put(const kv_store *kv, void *row, int d, float v) {
    if (kv->type == SP_TYPE_F16) ((f16_t *)row)[d] = f32_to_f16(v);
    else ((float *)row)[d] = v;
}
static float get(const kv_store *kv, const void *row, size_t idx) {
    return kv->type == SP_TYPE_F16 ? f16_to_f32(((const f16_t *)row)[idx])
                                   : ((const float *)row)[idx];
}

static int same_hash(const block_digest *a, const block_digest *b) {
    return memcmp(a->b, b->b, 32) == 0;
}

static void hex_to_hash(const char *hex, block_digest *h) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        h->b[i] = (uint8_t)v;
    }
}

/* Runs fn(kv) in a child process and reports whether it died by SIGABRT. */
static int dies(void (*fn)(kv_store *), kv_store *kv) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        fn(kv);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* ---- hash chain ---------------------------------------------------------- */

static void test_hash_chain(void) {
    enum { BS = 16, N = 70 }; /* 4 full blocks and a partial one */
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7919) % 32000;
    const uint8_t extra[] = "llama-model-id", salt[] = "user-1";
    block_digest a[5], b[5];

    CHECK(block_hash_chain(tok, N, BS, extra, sizeof(extra), salt, sizeof(salt), a) == 4,
          "partial trailing block is not hashed");
    CHECK(block_hash_chain(tok, 15, BS, extra, sizeof(extra), NULL, 0, b) == 0,
          "less than a block: no hash");
    CHECK(block_hash_chain(tok, 64, BS, extra, sizeof(extra), salt, sizeof(salt), b) == 4,
          "exactly 4 blocks");
    for (int i = 0; i < 4; i++) CHECK(same_hash(&a[i], &b[i]), "deterministic at block %d", i);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < i; j++) CHECK(!same_hash(&a[i], &a[j]), "blocks %d and %d differ", i, j);

    /* One changed token in block i changes hashes i.. but not before. */
    for (int blk = 0; blk < 4; blk++) {
        int32_t t2[N];
        memcpy(t2, tok, sizeof(tok));
        t2[blk * BS + 5] += 1;
        CHECK(block_hash_chain(t2, N, BS, extra, sizeof(extra), salt, sizeof(salt), b) == 4,
              "count");
        for (int i = 0; i < 4; i++)
            CHECK(same_hash(&a[i], &b[i]) == (i < blk), "token changed in block %d: block %d", blk, i);
    }
    /* A change in the partial block changes nothing. */
    {
        int32_t t2[N];
        memcpy(t2, tok, sizeof(tok));
        t2[N - 1] ^= 1;
        block_hash_chain(t2, N, BS, extra, sizeof(extra), salt, sizeof(salt), b);
        for (int i = 0; i < 4; i++) CHECK(same_hash(&a[i], &b[i]), "partial block ignored (%d)", i);
    }

    /* Salt, extra, no salt vs empty salt; (extra, salt) split ambiguity. */
    struct {
        const char *name;
        const char *extra, *salt;
    } rows[] = {
        {"other salt", "llama-model-id", "user-2"},
        {"no salt", "llama-model-id", NULL},
        {"other extra", "qwen-model-id", "user-1"},
        {"no extra", NULL, "user-1"},
        {"extra/salt split moved", "llama-model-i", "duser-1"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const char *e = rows[r].extra, *s = rows[r].salt;
        /* sizeof includes the NUL for a and b alike; here too */
        block_hash_chain(tok, N, BS, (const uint8_t *)e, e ? strlen(e) + 1 : 0,
                            (const uint8_t *)s, s ? strlen(s) + 1 : 0, b);
        for (int i = 0; i < 4; i++)
            CHECK(!same_hash(&a[i], &b[i]), "%s changes block %d", rows[r].name, i);
    }
    /* The split ambiguity without NULs: ("ab","c") vs ("a","bc"). */
    block_hash_chain(tok, BS, BS, (const uint8_t *)"ab", 2, (const uint8_t *)"c", 1, a);
    block_hash_chain(tok, BS, BS, (const uint8_t *)"a", 1, (const uint8_t *)"bc", 2, b);
    CHECK(!same_hash(&a[0], &b[0]), "lengths keep extra and salt apart");
}

/* Known answers: block 0 and 1 against the documented byte layout, hashed
 * here with EVP one-shot and against digests computed with Python hashlib. */
static void test_hash_known_answer(void) {
    enum { BS = 8 };
    int32_t tok[2 * BS];
    for (int i = 0; i < BS; i++) tok[i] = i * 1000 - 7;
    for (int i = BS; i < 2 * BS; i++) tok[i] = i * 3;
    const uint8_t extra[] = {'m', 'o', 'd', 'e', 'l', '-', 'i', 'd'};
    const uint8_t salt[] = {'s', 'a', 'l', 't', '!'};
    block_digest h[2];
    CHECK(block_hash_chain(tok, 2 * BS, BS, extra, sizeof(extra), salt, sizeof(salt), h) == 2,
          "two blocks");

    uint8_t msg[32 + 4 * BS + 8 + sizeof(extra) + 8 + sizeof(salt)];
    size_t n = 0;
    memset(msg, 0, 32);
    n = 32;
    for (int i = 0; i < BS; i++) {
        uint32_t u = (uint32_t)tok[i];
        for (int k = 0; k < 4; k++) msg[n++] = (uint8_t)(u >> (8 * k));
    }
    for (int k = 0; k < 8; k++) msg[n++] = (uint8_t)((uint64_t)sizeof(extra) >> (8 * k));
    memcpy(msg + n, extra, sizeof(extra));
    n += sizeof(extra);
    for (int k = 0; k < 8; k++) msg[n++] = (uint8_t)((uint64_t)sizeof(salt) >> (8 * k));
    memcpy(msg + n, salt, sizeof(salt));
    n += sizeof(salt);
    CHECK(n == sizeof(msg), "layout size");
    uint8_t md[32];
    unsigned mdlen = 0;
    CHECK(EVP_Digest(msg, n, md, &mdlen, EVP_sha256(), NULL) == 1 && mdlen == 32, "EVP_Digest");
    CHECK(memcmp(md, h[0].b, 32) == 0, "block 0 equals SHA-256 of the documented layout");

    block_digest k0, k1;
    hex_to_hash("4987d806a4be89d4ef304371e1c6f3a6bc67633a835ebb216743416b792ea407", &k0);
    hex_to_hash("5a394fa87c47f03bd8abf06d493fc0bac19f9373a81e2941c777b5a0eb7da9bb", &k1);
    CHECK(same_hash(&h[0], &k0), "block 0 known answer (hashlib)");
    CHECK(same_hash(&h[1], &k1), "block 1 known answer (hashlib)");
}

/* ---- store basics -------------------------------------------------------- */

static void test_create_errors(void) {
    struct {
        const char *name;
        kv_paged_params p;
    } rows[] = {
        {"type q8_0", params(SP_TYPE_Q8_0, 2, 8, 16, 8, 2, 4, true)},
        {"block_size 0", params(SP_TYPE_F16, 2, 8, 0, 8, 2, 4, true)},
        {"block_size 4097", params(SP_TYPE_F16, 2, 8, 4097, 8, 2, 4, true)},
        {"n_blocks 0", params(SP_TYPE_F16, 2, 8, 16, 0, 2, 4, true)},
        {"n_seq 0", params(SP_TYPE_F16, 2, 8, 16, 8, 0, 4, true)},
        {"n_layer 0", params(SP_TYPE_F16, 0, 8, 16, 8, 2, 4, true)},
        {"kv_dim 0", params(SP_TYPE_F16, 2, 0, 16, 8, 2, 4, true)},
        {"max_blocks 0", params(SP_TYPE_F16, 2, 8, 16, 8, 2, 0, true)},
        {"table overflows int32", params(SP_TYPE_F16, 2, 8, 4096, 8, 2, 1 << 20, true)},
        {"pool too large", params(SP_TYPE_F32, 1 << 20, 1 << 20, 4096, 1 << 20, 1, 1, true)},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char err[256] = "";
        kv_store *kv = kv_paged_create(rows[r].p, err, sizeof(err));
        CHECK(!kv, "%s: refused", rows[r].name);
        CHECK(err[0], "%s: has a message", rows[r].name);
        if (kv) kv->ops->destroy(kv);
    }
    CHECK(kv_paged_block_bytes(SP_TYPE_F16, 22, 256, 16) == 2u * 22 * 16 * 256 * 2, "block bytes");
    CHECK(kv_paged_block_bytes(SP_TYPE_F32, 3, 8, 4) == 2u * 3 * 4 * 8 * 4, "block bytes f32");
}

static float val_basic(int32_t seq, int32_t pos, int32_t layer, int kv, int d) {
    return (float)(((seq * 131 + pos * 17 + layer * 7 + kv * 3 + d) % 1000) - 500);
}

typedef struct {
    const char *name;
    tensor_type type;
    int32_t bs;
} basic_row;

static void test_store_basic(const basic_row *row) {
    enum { NL = 3, KVD = 5, NSEQ = 4, MB = 6 };
    const int32_t bs = row->bs;
    /* Seqs 0..2 get these lengths; seq 3 stays empty for the failure cases. */
    int32_t lens[NSEQ] = {2 * bs + 1, bs, 3 * bs - 1, 0};
    int32_t used = 0;
    for (int32_t q = 0; q < NSEQ; q++) used += (lens[q] + bs - 1) / bs;
    const int32_t NB = used + 5; /* 5 blocks left over */
    kv_store *kv = mk(params(row->type, NL, KVD, bs, NB, NSEQ, MB, true));
    CHECK(kv, "created");
    if (!kv) return;
    CHECK_INV(kv);
    for (int32_t q = 0; q < NSEQ; q++) {
        int32_t first = lens[q] / 2, rest = lens[q] - first;
        for (int step = 0; step < 2; step++) {
            int32_t n = step == 0 ? first : rest, at = kv->ops->len(kv, q);
            CHECK(kv_paged_blocks_needed(kv, q, n) ==
                      (at + n + bs - 1) / bs - (at + bs - 1) / bs,
                  "blocks_needed seq %d step %d", q, step);
            CHECK(kv->ops->reserve(kv, q, n) == 0, "reserve seq %d step %d", q, step);
            CHECK_INV(kv);
            for (int32_t pos = at; pos < at + n; pos++)
                for (int32_t l = 0; l < NL; l++)
                    for (int d = 0; d < KVD; d++) {
                        put(kv, kv->ops->k_row(kv, l, q, pos), d, val_basic(q, pos, l, 0, d));
                        put(kv, kv->ops->v_row(kv, l, q, pos), d, val_basic(q, pos, l, 1, d));
                    }
            kv->ops->set_len(kv, q, at + n);
            CHECK(kv->ops->len(kv, q) == at + n, "len");
            CHECK_INV(kv);
        }
    }
    /* Read back every row through span from every start, to every end. */
    for (int32_t q = 0; q < NSEQ; q++)
        for (int32_t l = 0; l < NL; l++)
            for (int32_t pos = 0; pos < lens[q]; pos++)
                for (int32_t end = pos + 1; end <= lens[q]; end++) {
                    const void *k, *v;
                    int32_t run = kv->ops->span(kv, l, q, pos, end, &k, &v);
                    int32_t want = SP_MIN(end, (pos / bs + 1) * bs) - pos;
                    CHECK(run == want, "seq %d pos %d end %d: span %d, want %d", q, pos, end, run, want);
                    if (run != want) continue;
                    for (int32_t j = 0; j < run; j++)
                        for (int d = 0; d < KVD; d++) {
                            size_t idx = (size_t)j * KVD + d;
                            CHECK(get(kv, k, idx) == val_basic(q, pos + j, l, 0, d), "K q%d p%d l%d", q, pos + j, l);
                            CHECK(get(kv, v, idx) == val_basic(q, pos + j, l, 1, d), "V q%d p%d l%d", q, pos + j, l);
                        }
                    CHECK(kv->ops->k_row(kv, l, q, pos) == k, "k_row is span's first row");
                    CHECK(kv->ops->v_row(kv, l, q, pos) == v, "v_row is span's first row");
                }
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_in_use == used && st.n_free == 5 && st.n_cached == 0, "in use %d free %d",
          st.n_in_use, st.n_free);
    CHECK(st.block_bytes == kv_paged_block_bytes(row->type, NL, KVD, bs), "block bytes");

    /* A failed reserve leaves everything unchanged. */
    int32_t ids_before[NSEQ][MB + 1];
    for (int32_t q = 0; q < NSEQ; q++)
        for (int32_t i = 0; i <= MB; i++) ids_before[q][i] = kv_paged_block_id(kv, q, i);
    struct {
        const char *name;
        int32_t seq, n;
    } fails[] = {
        {"pool exhausted", 3, 6 * bs},              /* 6 blocks, 5 available */
        {"table full", 0, MB * bs - lens[0] + 1},   /* 4 blocks would do, 7 entries */
        {"negative", 2, -1},
    };
    for (size_t f = 0; f < sizeof(fails) / sizeof(fails[0]); f++) {
        CHECK(kv->ops->reserve(kv, fails[f].seq, fails[f].n) == -1, "%s: refused", fails[f].name);
        CHECK_INV(kv);
        kv_paged_stats s2;
        kv_paged_get_stats(kv, &s2);
        CHECK(s2.n_free == 5 && s2.n_in_use == used, "%s: pool unchanged", fails[f].name);
        for (int32_t q = 0; q < NSEQ; q++) {
            CHECK(kv->ops->len(kv, q) == lens[q], "%s: len unchanged", fails[f].name);
            for (int32_t i = 0; i <= MB; i++)
                CHECK(kv_paged_block_id(kv, q, i) == ids_before[q][i], "%s: table unchanged",
                      fails[f].name);
        }
    }
    /* Exactly using up the pool works; then one more block fails. */
    CHECK(kv->ops->reserve(kv, 3, 5 * bs) == 0, "reserve the whole rest");
    CHECK(kv_paged_available(kv) == 0, "pool empty");
    CHECK_INV(kv);
    int32_t room = (bs - lens[2] % bs) % bs; /* free rows in seq 2's last block */
    CHECK(kv->ops->reserve(kv, 2, room + 1) == -1, "no block left for seq 2");
    CHECK(kv->ops->reserve(kv, 2, room) == 0, "seq 2's last block has %d free rows", room);
    CHECK(kv_paged_blocks_needed(kv, 2, room) == 0, "no block needed");
    /* A smaller reservation gives blocks back. */
    CHECK(kv->ops->reserve(kv, 3, 1) == 0, "shrink the reservation");
    CHECK(kv_paged_available(kv) == 4, "4 blocks back, %d", kv_paged_available(kv));
    CHECK_INV(kv);
    kv->ops->set_len(kv, 3, 0); /* drops the reservation */
    CHECK_INV(kv);
    CHECK(kv_paged_available(kv) == 5, "all back");
    /* Releasing everything frees every block (no hashes: nothing cached). */
    for (int32_t q = 0; q < NSEQ; q++) kv->ops->set_len(kv, q, 0);
    CHECK_INV(kv);
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_free == NB && st.n_cached == 0 && st.n_in_use == 0, "all free");
    kv->ops->destroy(kv);
}

/* ---- prefix cache -------------------------------------------------------- */

enum { PBS = 4, PNL = 2, PKVD = 3 };

/* Value of (tokens[0..pos], layer, kv, d): what a model would store. */
static float content_val(const int32_t *tok, int32_t pos, int32_t layer, int kv, int d) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i <= pos; i++) h = (h ^ (uint64_t)(uint32_t)tok[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)(layer * 4 + kv * 2 + 1) * 0x9e3779b97f4a7c15ull) * 1099511628211ull;
    h ^= (uint64_t)d * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return (float)(h % 2001) - 1000; /* exact in f16 */
}

/* Makes positions [len, n) of seq hold tokens' content and commits. */
static int fill(kv_store *kv, int32_t seq, const int32_t *tok, int32_t n) {
    int32_t at = kv->ops->len(kv, seq);
    if (kv->ops->reserve(kv, seq, n - at) != 0) return -1;
    for (int32_t pos = at; pos < n; pos++)
        for (int32_t l = 0; l < kv->n_layer; l++)
            for (int d = 0; d < kv->kv_dim; d++) {
                put(kv, kv->ops->k_row(kv, l, seq, pos), d, content_val(tok, pos, l, 0, d));
                put(kv, kv->ops->v_row(kv, l, seq, pos), d, content_val(tok, pos, l, 1, d));
            }
    kv->ops->set_len(kv, seq, n);
    return 0;
}

/* Whether seq's positions [0, len) read back as tokens' content. */
static int content_ok(kv_store *kv, int32_t seq, const int32_t *tok) {
    int32_t n = kv->ops->len(kv, seq);
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t pos = 0; pos < n;) {
            const void *k, *v;
            int32_t run = kv->ops->span(kv, l, seq, pos, n, &k, &v);
            if (run < 1) return 0;
            for (int32_t j = 0; j < run; j++)
                for (int d = 0; d < kv->kv_dim; d++) {
                    size_t idx = (size_t)j * kv->kv_dim + d;
                    if (get(kv, k, idx) != content_val(tok, pos + j, l, 0, d)) return 0;
                    if (get(kv, v, idx) != content_val(tok, pos + j, l, 1, d)) return 0;
                }
            pos += run;
        }
    return 1;
}

static void commit_all(kv_store *kv, int32_t seq, const int32_t *tok, const uint8_t *salt,
                       size_t salt_len) {
    block_digest h[64];
    int32_t n = block_hash_chain(tok, kv->ops->len(kv, seq), PBS, (const uint8_t *)"m", 1,
                                    salt, salt_len, h);
    for (int32_t i = 0; i < n; i++) kv_paged_commit(kv, seq, i, &h[i]);
}

static int32_t chain_bs(const int32_t *tok, int32_t n, int32_t bs, const char *salt,
                        block_digest *h) {
    return block_hash_chain(tok, n, bs, (const uint8_t *)"m", 1, (const uint8_t *)salt,
                               salt ? strlen(salt) : 0, h);
}
static int32_t chain(const int32_t *tok, int32_t n, const char *salt, block_digest *h) {
    return chain_bs(tok, n, PBS, salt, h);
}

static void stats(kv_store *kv, int32_t *fr, int32_t *ca, int32_t *iu) {
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    *fr = st.n_free;
    *ca = st.n_cached;
    *iu = st.n_in_use;
}

static void write_block1_of_seq1(kv_store *kv) { kv->ops->k_row(kv, 0, 1, PBS); }
static void write_past_reserved(kv_store *kv) { kv->ops->v_row(kv, 0, 2, 100); }

static void test_prefix_share(void) {
    kv_store *kv = mk(params(SP_TYPE_F16, PNL, PKVD, PBS, 16, 3, 8, true));
    if (!kv) { CHECK(0, "create"); return; }
    int32_t tokA[32], tokX[32];
    for (int i = 0; i < 32; i++) tokA[i] = 100 + i, tokX[i] = 100 + i;
    tokX[9] = 7; /* differs in block 2 */
    const uint8_t *salt = (const uint8_t *)"s";

    /* Seq 0 computes 14 tokens (3 full blocks + 2), commits its full blocks. */
    CHECK(fill(kv, 0, tokA, 14) == 0, "fill A");
    block_digest hA[8], hX[8], hS[8];
    CHECK(chain(tokA, 14, "s", hA) == 3, "3 full blocks");
    CHECK(kv_paged_match(kv, hA, 3) == 0, "nothing committed yet");
    commit_all(kv, 0, tokA, salt, 1);
    CHECK_INV(kv);
    CHECK(kv_paged_match(kv, hA, 3) == 3, "in-use hashed blocks match");
    int32_t a_ids[4];
    for (int i = 0; i < 4; i++) a_ids[i] = kv_paged_block_id(kv, 0, i);
    CHECK(kv_paged_block_id(kv, 0, 4) == -1, "no entry 4");

    /* A live sequence shares its committed blocks: refcount 2. */
    CHECK(kv_paged_attach(kv, 1, hA, 2) == 0, "attach to live blocks");
    CHECK_INV(kv);
    CHECK(kv->ops->len(kv, 1) == 2 * PBS, "attach sets len");
    for (int i = 0; i < 2; i++) {
        CHECK(kv_paged_block_id(kv, 1, i) == a_ids[i], "same block %d", i);
        CHECK(kv_paged_refcount(kv, a_ids[i]) == 2, "refcount 2 at %d", i);
    }
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_shared == 2, "2 shared, %d", st.n_shared);
    CHECK(content_ok(kv, 1, tokA), "shared content reads back for seq 1");
    CHECK(kv_paged_attach(kv, 1, hA, 1) == -1, "attach to a non-empty slot refused");
    /* Writing into a shared/hashed block or past the reservation aborts. */
    CHECK(dies(write_block1_of_seq1, kv), "k_row into a shared block aborts");
    CHECK(dies(write_past_reserved, kv), "v_row past reserved aborts");

    /* Seq 1 continues with its own tokens into a block of its own. */
    CHECK(fill(kv, 1, tokX, 12) == 0, "fill seq 1 past the shared prefix");
    CHECK(content_ok(kv, 1, tokX), "seq 1 content");
    CHECK(content_ok(kv, 0, tokA), "seq 0 content intact");
    CHECK(kv_paged_block_id(kv, 1, 2) != a_ids[2], "own block 2");

    /* Release seq 0 (tail first): blocks 3 (unhashed) FREE, 2 CACHED, 1 and 0
     * still used by seq 1. */
    kv->ops->set_len(kv, 0, 0);
    CHECK_INV(kv);
    CHECK(kv_paged_refcount(kv, a_ids[0]) == 1 && kv_paged_refcount(kv, a_ids[1]) == 1,
          "seq 1 still holds 0 and 1");
    CHECK(kv_paged_refcount(kv, a_ids[2]) == 0 && kv_paged_refcount(kv, a_ids[3]) == 0,
          "2 and 3 released");
    int32_t fr, ca, iu;
    stats(kv, &fr, &ca, &iu);
    CHECK(ca == 1 && iu == 3 && fr == 12, "free %d cached %d in use %d", fr, ca, iu);
    CHECK(kv_paged_match(kv, hA, 3) == 3, "all of A's chain still resident");

    /* A different salt or different tokens never match. */
    CHECK(chain(tokA, 14, "t", hS) == 3, "salted chain");
    CHECK(kv_paged_match(kv, hS, 3) == 0, "other salt never matches");
    CHECK(kv_paged_attach(kv, 2, hS, 1) == -1, "attach of an absent block refused");
    CHECK(kv->ops->len(kv, 2) == 0, "nothing changed");
    CHECK(chain(tokX, 12, "s", hX) == 3, "X chain");
    CHECK(kv_paged_match(kv, hX, 3) == 2, "X shares 2 blocks with A");
    CHECK_INV(kv);

    /* Seq 2 attaches all 3 of A's blocks: the CACHED one becomes IN USE. */
    CHECK(kv_paged_attach(kv, 2, hA, 3) == 0, "attach 3");
    CHECK_INV(kv);
    stats(kv, &fr, &ca, &iu);
    CHECK(ca == 0 && iu == 4, "cached %d in use %d", ca, iu);
    CHECK(kv_paged_refcount(kv, a_ids[2]) == 1, "cached block reattached");
    CHECK(kv_paged_refcount(kv, a_ids[0]) == 2, "block 0 shared again");
    CHECK(fill(kv, 2, tokA, 14) == 0, "seq 2 recomputes the tail");
    CHECK(content_ok(kv, 2, tokA), "seq 2 content");

    /* Duplicate commit: seq 1 committing its blocks keeps block 0/1 as they
     * are (already hashed) and its block 2 gets X's hash (not resident). */
    commit_all(kv, 1, tokX, salt, 1);
    CHECK_INV(kv);
    CHECK(kv_paged_match(kv, hX, 3) == 3, "X's block 2 now resident");
    /* Release both; flush drops every cached block. */
    kv->ops->set_len(kv, 1, 0);
    kv->ops->set_len(kv, 2, 0);
    CHECK_INV(kv);
    stats(kv, &fr, &ca, &iu);
    CHECK(iu == 0 && ca == 4, "4 cached (A0, A1, A2, X2), %d", ca);
    CHECK(kv_paged_flush(kv) == 4, "flush 4");
    CHECK_INV(kv);
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_free == 16 && st.n_cached == 0 && st.flushed == 4 && st.cached_bytes == 0, "flushed");
    CHECK(kv_paged_match(kv, hA, 3) == 0, "nothing matches after flush");
    kv->ops->destroy(kv);
}

/* Two identical prompts computed independently: the first commit wins and
 * the second copy is never findable, so it becomes FREE on release. */
static void test_prefix_duplicate(void) {
    kv_store *kv = mk(params(SP_TYPE_F32, PNL, PKVD, PBS, 8, 2, 4, true));
    if (!kv) { CHECK(0, "create"); return; }
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    block_digest h[2];
    chain(tok, 8, NULL, h);
    CHECK(fill(kv, 0, tok, 8) == 0 && fill(kv, 1, tok, 8) == 0, "fill both");
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 2; i++) kv_paged_commit(kv, q, i, &h[i]);
    CHECK_INV(kv);
    kv->ops->set_len(kv, 1, 0);
    int32_t fr, ca, iu;
    stats(kv, &fr, &ca, &iu);
    CHECK(ca == 0 && fr == 6, "second copy FREE: free %d cached %d", fr, ca);
    kv->ops->set_len(kv, 0, 0);
    stats(kv, &fr, &ca, &iu);
    CHECK(ca == 2 && fr == 6, "first copy CACHED");
    CHECK_INV(kv);
    kv->ops->destroy(kv);
}

/* LRU: least recently released first; within one release tail before head;
 * an evicted block no longer matches. */
static void test_lru_order(void) {
    kv_store *kv = mk(params(SP_TYPE_F16, 1, 2, PBS, 8, 3, 8, true));
    if (!kv) { CHECK(0, "create"); return; }
    int32_t tx[12], ty[12];
    for (int i = 0; i < 12; i++) tx[i] = i, ty[i] = 1000 + i;
    block_digest hx[3], hy[3];
    chain(tx, 12, NULL, hx);
    chain(ty, 12, NULL, hy);
    CHECK(fill(kv, 0, tx, 12) == 0 && fill(kv, 1, ty, 12) == 0, "fill");
    commit_all(kv, 0, tx, NULL, 0);
    commit_all(kv, 1, ty, NULL, 0);
    int32_t idx[3], idy[3];
    for (int i = 0; i < 3; i++) idx[i] = kv_paged_block_id(kv, 0, i), idy[i] = kv_paged_block_id(kv, 1, i);
    kv->ops->set_len(kv, 0, 0); /* x released first */
    kv->ops->set_len(kv, 1, 0);
    CHECK_INV(kv);
    /* 2 FREE blocks, then evictions: x2, x1, x0, y2, y1, y0. */
    const int32_t expect[6] = {idx[2], idx[1], idx[0], idy[2], idy[1], idy[0]};
    CHECK(kv->ops->reserve(kv, 2, 2 * PBS) == 0, "take the free blocks");
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    CHECK(st.evictions == 0 && st.n_cached == 6, "no eviction while FREE blocks exist");
    for (int e = 0; e < 6; e++) {
        CHECK(kv->ops->reserve(kv, 2, (3 + e) * PBS) == 0, "reserve evicting %d", e);
        CHECK_INV(kv);
        CHECK(kv_paged_block_id(kv, 2, 2 + e) == expect[e], "eviction %d took block %d, expected %d",
              e, kv_paged_block_id(kv, 2, 2 + e), expect[e]);
        kv_paged_get_stats(kv, &st);
        CHECK(st.evictions == (uint64_t)e + 1, "eviction count");
        int32_t mx = e < 3 ? 2 - e : 0, my = e < 3 ? 3 : 5 - e;
        CHECK(kv_paged_match(kv, hx, 3) == mx, "after %d evictions x matches %d, want %d", e + 1,
              kv_paged_match(kv, hx, 3), mx);
        CHECK(kv_paged_match(kv, hy, 3) == my, "after %d evictions y matches %d", e + 1,
              kv_paged_match(kv, hy, 3));
    }
    CHECK(kv_paged_available(kv) == 0, "pool used up");
    CHECK(kv->ops->reserve(kv, 2, 8 * PBS + 1) == -1, "table full");
    kv->ops->set_len(kv, 2, 0);
    CHECK_INV(kv);
    /* match() changes no LRU order; attach removes from the LRU. */
    CHECK(fill(kv, 0, tx, 12) == 0, "refill x");
    commit_all(kv, 0, tx, NULL, 0);
    kv->ops->set_len(kv, 0, 0);
    CHECK(kv_paged_match(kv, hx, 3) == 3, "x back");
    CHECK(kv_paged_attach(kv, 1, hx, 1) == 0, "attach x0");
    for (int i = 0; i < 3; i++) CHECK(kv_paged_match(kv, hx, 3) == 3, "match is read-only");
    CHECK(kv->ops->reserve(kv, 2, 7 * PBS) == 0, "reserve 7 blocks: 5 free + x2, x1 evicted");
    CHECK(kv_paged_match(kv, hx, 3) == 1, "x0 (attached) survives, %d", kv_paged_match(kv, hx, 3));
    CHECK_INV(kv);
    kv->ops->destroy(kv);
}

static void test_cache_off(void) {
    kv_store *kv = mk(params(SP_TYPE_F16, PNL, PKVD, PBS, 8, 2, 4, false));
    if (!kv) { CHECK(0, "create"); return; }
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    block_digest h[2];
    chain(tok, 8, NULL, h);
    CHECK(fill(kv, 0, tok, 8) == 0, "fill");
    commit_all(kv, 0, tok, NULL, 0);
    CHECK_INV(kv);
    CHECK(kv_paged_match(kv, h, 2) == 0, "never hits while live");
    CHECK(kv_paged_attach(kv, 1, h, 1) == -1, "attach refused");
    CHECK(kv_paged_attach(kv, 1, h, 0) == 0, "attaching nothing is fine");
    kv->ops->set_len(kv, 0, 0);
    int32_t fr, ca, iu;
    stats(kv, &fr, &ca, &iu);
    CHECK(fr == 8 && ca == 0, "released blocks are FREE");
    CHECK(kv_paged_match(kv, h, 2) == 0, "never hits");
    CHECK(kv_paged_flush(kv) == 0, "nothing to flush");
    CHECK_INV(kv);
    kv->ops->destroy(kv);
}

/* ---- randomized stress --------------------------------------------------- */

typedef struct {
    const char *name;
    tensor_type type;
    int32_t bs, n_blocks, n_seq, max_blocks;
    uint64_t seed;
    int ops;
} stress_row;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) { /* uniform-ish in [0, n) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? (uint32_t)(rng_state % n) : 0;
}

/* Writes positions [a, b) of seq from the shadow tokens sq (sq[0] is the
 * salt marker, so position pos is content_val(sq, pos + 1)). */
static void write_rows(kv_store *kv, int32_t seq, const int32_t *sq, int32_t a, int32_t b) {
    for (int32_t pos = a; pos < b; pos++)
        for (int32_t l = 0; l < kv->n_layer; l++)
            for (int d = 0; d < kv->kv_dim; d++) {
                put(kv, kv->ops->k_row(kv, l, seq, pos), d, content_val(sq, pos + 1, l, 0, d));
                put(kv, kv->ops->v_row(kv, l, seq, pos), d, content_val(sq, pos + 1, l, 1, d));
            }
}

/* Computes the rest of a prompt of n tokens after what is attached. */
static int write_shifted(kv_store *kv, int32_t seq, const int32_t *sq, int32_t n) {
    int32_t at = kv->ops->len(kv, seq);
    if (kv->ops->reserve(kv, seq, n - at) != 0) return -1;
    write_rows(kv, seq, sq, at, n);
    kv->ops->set_len(kv, seq, n);
    return 0;
}

#define SMAX 256 /* max positions per sequence in the shadow */

static void test_stress(const stress_row *row) {
    const int32_t bs = row->bs, NS = row->n_seq, MB = row->max_blocks, CAP = MB * bs;
    SP_ASSERT(CAP <= SMAX && NS <= 8);
    kv_store *kv = mk(params(row->type, 2, 3, bs, row->n_blocks, NS, MB, true));
    if (!kv) { CHECK(0, "create"); return; }
    rng_state = row->seed;
    /* Shadow: each slot's tokens after a salt marker (-1 - salt at index 0,
     * so the content of a position depends on the salt as a cached block's
     * hash does) and how many leading blocks were committed (hashed). */
    int32_t tok[8][SMAX + 1]; /* tok[q][0] = salt marker, tokens from [1] */
    int32_t salt[8] = {0};
    int32_t committed[8] = {0};
    /* A few shared prompt templates from a tiny alphabet make prefixes collide. */
    int32_t tmpl[3][SMAX];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < SMAX; i++) tmpl[t][i] = (int32_t)rnd(t == 2 ? 2 : 50);
    int32_t n_attach = 0, n_attached_blocks = 0, n_reserve_fail = 0;

    for (int op = 0; op < row->ops && t_case_failures == 0; op++) {
        int32_t q = (int32_t)rnd((uint32_t)NS);
        int32_t len = kv->ops->len(kv, q);
        int32_t *tq = tok[q] + 1;
        uint32_t kind = rnd(100);
        char salt_s[2] = {(char)('a' + salt[q]), 0};
        if (len == 0 && kind < 60) {
            /* New sequence: a template prefix, then random tokens; attach the
             * cached prefix (never the block holding the last prompt token). */
            int32_t t = (int32_t)rnd(3), plen = 1 + (int32_t)rnd((uint32_t)CAP);
            int32_t shared = (int32_t)rnd((uint32_t)plen + 1);
            salt[q] = (int32_t)rnd(2);
            salt_s[0] = (char)('a' + salt[q]);
            tok[q][0] = -1 - salt[q];
            for (int32_t i = 0; i < plen; i++) tq[i] = i < shared ? tmpl[t][i] : (int32_t)rnd(50);
            block_digest h[SMAX];
            int32_t nh = chain_bs(tq, plen, bs, salt_s, h);
            int32_t m = kv_paged_match(kv, h, nh);
            CHECK(m >= 0 && m <= nh, "match %d of %d", m, nh);
            int32_t a = SP_MIN(m, (plen - 1) / bs);
            if (rnd(10) == 0 && m < nh) {
                CHECK(kv_paged_attach(kv, q, h, m + 1) == -1, "attach past the match refused");
                CHECK(kv->ops->len(kv, q) == 0, "failed attach left the slot empty");
            }
            CHECK(kv_paged_attach(kv, q, h, a) == 0, "attach %d", a);
            CHECK(kv->ops->len(kv, q) == a * bs, "attached len");
            if (a) { n_attach++; n_attached_blocks += a; }
            committed[q] = a;
            write_shifted(kv, q, tok[q], plen); /* may fail when the pool is full */
        } else if (len > 0 && kind < 15) {
            kv->ops->set_len(kv, q, 0); /* release */
            committed[q] = 0;
        } else if (len > 0 && kind < 30) {
            /* Truncate (rollback), never into a committed block's middle. */
            int32_t L = (int32_t)rnd((uint32_t)len + 1);
            if (L < committed[q] * bs && L % bs) L = L / bs * bs;
            kv->ops->set_len(kv, q, L);
            committed[q] = SP_MIN(committed[q], L / bs);
        } else if (kind < 33) {
            int32_t n = kv_paged_flush(kv);
            CHECK(n >= 0, "flush");
        } else if (len > 0 && kind < 45) {
            /* Reserve only (maybe a reservation that is then shrunk). */
            int32_t n = (int32_t)rnd((uint32_t)(3 * bs + 2));
            int32_t need = kv_paged_blocks_needed(kv, q, n), avail = kv_paged_available(kv);
            int r = kv->ops->reserve(kv, q, n);
            bool fits = need <= avail && len + n <= CAP;
            CHECK((r == 0) == fits, "reserve %d: r %d need %d avail %d", n, r, need, avail);
        } else if (len > 0) {
            /* Extend: compute n new tokens, keep some (speculative accept). */
            int32_t n = 1 + (int32_t)rnd((uint32_t)(2 * bs + 1));
            if (len + n > CAP) n = CAP - len;
            if (n <= 0) continue;
            for (int32_t i = len; i < len + n; i++) tq[i] = (int32_t)rnd(50);
            int32_t need = kv_paged_blocks_needed(kv, q, n), avail = kv_paged_available(kv);
            kv_paged_stats before, after;
            kv_paged_get_stats(kv, &before);
            int32_t r = kv->ops->reserve(kv, q, n);
            if (r != 0) {
                n_reserve_fail++;
                CHECK(need > avail, "reserve failed though %d <= %d", need, avail);
                kv_paged_get_stats(kv, &after);
                CHECK(after.n_free == before.n_free && after.n_cached == before.n_cached &&
                          after.evictions == before.evictions && kv->ops->len(kv, q) == len,
                      "failed reserve changed the pool");
            } else {
                write_rows(kv, q, tok[q], len, len + n);
                int32_t keep = rnd(4) ? n : (int32_t)rnd((uint32_t)n + 1);
                kv->ops->set_len(kv, q, len + keep);
            }
        }
        /* Commit every full block of every live sequence now and then. */
        if (rnd(3) == 0) {
            int32_t l2 = kv->ops->len(kv, q);
            salt_s[0] = (char)('a' + salt[q]);
            if (l2 > 0) {
                block_digest h[SMAX];
                int32_t nh = chain_bs(tq, l2, bs, salt_s, h);
                for (int32_t i = 0; i < nh; i++) kv_paged_commit(kv, q, i, &h[i]);
                committed[q] = nh;
            }
        }
        CHECK_INV(kv);
        /* Every live sequence reads back its content, shared blocks too. */
        for (int32_t s = 0; s < NS; s++) {
            int32_t n = kv->ops->len(kv, s);
            for (int32_t l = 0; l < kv->n_layer; l++)
                for (int32_t pos = 0; pos < n;) {
                    const void *k, *v;
                    int32_t run = kv->ops->span(kv, l, s, pos, n, &k, &v);
                    CHECK(run == SP_MIN(n, (pos / bs + 1) * bs) - pos, "span length");
                    if (run < 1) break;
                    for (int32_t j = 0; j < run; j++)
                        for (int d = 0; d < kv->kv_dim; d++) {
                            size_t idx = (size_t)j * kv->kv_dim + d;
                            CHECK(get(kv, k, idx) == content_val(tok[s], pos + j + 1, l, 0, d),
                                  "op %d seq %d pos %d layer %d: K", op, s, pos + j, l);
                            CHECK(get(kv, v, idx) == content_val(tok[s], pos + j + 1, l, 1, d),
                                  "op %d seq %d pos %d layer %d: V", op, s, pos + j, l);
                        }
                    pos += run;
                }
        }
    }
    kv_paged_stats st;
    kv_paged_get_stats(kv, &st);
    printf("     %s: %d attaches (%d blocks), %d failed reserves, %llu evictions, %llu flushed\n",
           row->name, n_attach, n_attached_blocks, n_reserve_fail, (unsigned long long)st.evictions,
           (unsigned long long)st.flushed);
    CHECK(n_attach > 0, "the stress exercised prefix reuse");
    for (int32_t s = 0; s < NS; s++) kv->ops->set_len(kv, s, 0);
    CHECK_INV(kv);
    kv_paged_get_stats(kv, &st);
    CHECK(st.n_in_use == 0 && st.n_free + st.n_cached == row->n_blocks, "all released");
    kv->ops->destroy(kv);
}

int main(void) {
    RUN(test_hash_chain);
    RUN(test_hash_known_answer);
    RUN(test_create_errors);
    static const basic_row basic[] = {
        {"f16 bs1", SP_TYPE_F16, 1}, {"f16 bs4", SP_TYPE_F16, 4}, {"f16 bs16", SP_TYPE_F16, 16},
        {"f32 bs1", SP_TYPE_F32, 1}, {"f32 bs5", SP_TYPE_F32, 5}, {"f32 bs16", SP_TYPE_F32, 16},
    };
    for (size_t i = 0; i < sizeof(basic) / sizeof(basic[0]); i++)
        RUN_NAMED(test_store_basic, &basic[i], basic[i].name);
    RUN(test_prefix_share);
    RUN(test_prefix_duplicate);
    RUN(test_lru_order);
    RUN(test_cache_off);
    static const stress_row stress[] = {
        {"f16 bs4", SP_TYPE_F16, 4, 24, 4, 12, 0x9e3779b97f4a7c15ull, 3000},
        {"f32 bs3", SP_TYPE_F32, 3, 20, 5, 16, 12345, 3000},
        {"f16 bs1", SP_TYPE_F16, 1, 40, 3, 24, 777, 2000},
        {"f32 bs16 tight", SP_TYPE_F32, 16, 6, 4, 4, 4242, 2000},
    };
    for (size_t i = 0; i < sizeof(stress) / sizeof(stress[0]); i++)
        RUN_NAMED(test_stress, &stress[i], stress[i].name);
    TEST_END();
}
