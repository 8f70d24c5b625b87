/* test_spec.c: the model-free speculative proposers (src/speculate/spec.h):
 * n-gram prompt lookup and suffix matching (per-request index + store of
 * earlier outputs), and the partitions that keep what they learn apart
 * per cache salt (isolation, the token budget across partitions, LRU
 * eviction, the partition cap, memory following what is held).
 *
 * Hand-made cases pin each rule of the contract; randomized cases compare
 * against brute-force implementations of the same definitions on small
 * alphabets (where ties and repeats are frequent), and run the tries'
 * internal checker (a full recount) after every change. The last case
 * prints the cost per call on an 8k-token history.
 */
#include <math.h>

#include "common.h"
#include "speculate/spec.h"
#include "test.h"

#define LEN(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static int32_t rnd_in(int32_t lo, int32_t hi) { return lo + (int32_t)(rnd() % (uint32_t)(hi - lo + 1)); }

static int same_toks(const sp_token *a, int32_t na, const sp_token *b, int32_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof(sp_token)) == 0);
}

static void fmt_toks(char *buf, size_t len, const sp_token *t, int32_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < n && o + 12 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? " " : "", (int)t[i]);
}

#define CHECK_STORE(s)                                                         \
    do {                                                                       \
        char e_[256] = "";                                                     \
        int r_ = suffix_store_check(s, e_, sizeof(e_));                     \
        CHECK(r_ == 0, "store invariant: %s", e_);                             \
    } while (0)
#define CHECK_SEQ(q)                                                           \
    do {                                                                       \
        char e_[256] = "";                                                     \
        int r_ = suffix_seq_check(q, e_, sizeof(e_));                       \
        CHECK(r_ == 0, "seq invariant: %s", e_);                               \
    } while (0)

/* ---- n-gram --------------------------------------------------------------- */

typedef struct {
    const char *name;
    sp_token toks[16];
    int32_t n, n_min, n_max, k;
    sp_token want[8];
    int32_t n_want;
} ngram_row;

static const ngram_row ngram_rows[] = {
    {"basic", {1, 2, 3, 4, 5, 1, 2}, 7, 1, 3, 3, {3, 4, 5}, 3},
    {"k caps", {1, 2, 3, 4, 5, 1, 2}, 7, 1, 3, 1, {3}, 1},
    {"k 0", {1, 2, 3, 4, 5, 1, 2}, 7, 1, 3, 0, {0}, 0},
    {"most recent occurrence", {1, 2, 9, 1, 2, 8, 1, 2}, 8, 1, 2, 3, {8, 1, 2}, 3},
    {"longer m beats more recent", {5, 1, 2, 7, 6, 2, 8, 5, 1, 2}, 10, 1, 3, 3, {7, 6, 2}, 3},
    {"n_max caps m", {4, 1, 2, 3, 5, 6, 2, 3, 0, 1, 2, 3}, 12, 1, 2, 3, {0, 1, 2}, 3},
    {"n_max 3 finds 1 2 3", {4, 1, 2, 3, 5, 6, 2, 3, 0, 1, 2, 3}, 12, 1, 3, 3, {5, 6, 2}, 3},
    {"n_min refuses short", {1, 2, 3, 9, 2, 3}, 6, 3, 4, 3, {0}, 0},
    {"n_min met", {1, 2, 3, 9, 2, 3}, 6, 2, 4, 3, {9, 2, 3}, 3},
    {"no self match", {1, 2, 3, 4}, 4, 1, 4, 4, {0}, 0},
    {"no self match, long", {1, 2, 3, 1, 2, 3}, 6, 4, 8, 4, {0}, 0},
    {"pair", {7, 7}, 2, 1, 4, 4, {7, 7, 7, 7}, 4},
    {"overlapping repeat runs on", {1, 2, 1, 2, 1, 2}, 6, 1, 4, 5, {1, 2, 1, 2, 1}, 5},
    {"overlap single token", {5, 5, 5, 5}, 4, 1, 8, 8, {5, 5, 5, 5, 5, 5, 5, 5}, 8},
    {"continuation runs on periodically", {3, 4, 9, 9, 3, 4}, 6, 1, 2, 8, {9, 9, 3, 4, 9, 9, 3, 4}, 8},
    {"empty", {0}, 0, 1, 4, 4, {0}, 0},
    {"one token", {3}, 1, 1, 4, 4, {0}, 0},
    {"n_min > n_max", {1, 2, 1, 2}, 4, 3, 2, 4, {0}, 0},
};

static void test_ngram_row(const ngram_row *r) {
    sp_token out[16];
    memset(out, 0xff, sizeof(out));
    int32_t got = ngram_propose(r->toks, r->n, r->n_min, r->n_max, r->k, out);
    char a[128], b[128];
    fmt_toks(a, sizeof(a), out, got > 0 ? got : 0);
    fmt_toks(b, sizeof(b), r->want, r->n_want);
    CHECK(same_toks(out, got, r->want, r->n_want), "got [%s], want [%s]", a, b);
    CHECK(got >= 0 && got < 16 && out[got] == (sp_token)-1, "wrote past the proposal");
}

/* The contract's definition, literally. */
static int32_t ngram_ref(const sp_token *t, int32_t n, int32_t n_min, int32_t n_max, int32_t k,
                         sp_token *out) {
    if (k <= 0) return 0;
    for (int32_t m = n_max; m >= n_min; m--) {
        if (m > n - 1) continue;
        for (int32_t j = n - 2; j >= m - 1; j--) {
            int ok = 1;
            for (int32_t d = 0; d < m && ok; d++) ok = t[j - d] == t[n - 1 - d];
            if (!ok) continue;
            int32_t c = 0;
            for (int32_t p = j + 1; c < k; p++) out[c++] = p < n ? t[p] : out[p - n];
            return c;
        }
    }
    return 0;
}

static void test_ngram_random(void) {
    enum { N = 64 };
    sp_token t[N], a[N], b[N];
    for (int it = 0; it < 4000; it++) {
        int32_t n = rnd_in(0, N), A = rnd_in(1, 6);
        for (int32_t i = 0; i < n; i++) t[i] = rnd_in(0, A - 1);
        int32_t n_min = rnd_in(1, 4), n_max = rnd_in(n_min, 8), k = rnd_in(0, 10);
        int32_t ga = ngram_propose(t, n, n_min, n_max, k, a);
        int32_t gb = ngram_ref(t, n, n_min, n_max, k, b);
        CHECK(same_toks(a, ga, b, gb), "iteration %d: n %d n_min %d n_max %d k %d: %d vs ref %d", it,
              n, n_min, n_max, k, ga, gb);
        if (t_case_failures) break;
    }
}

/* ---- suffix: hand-made cases -------------------------------------------------- */

static suffix_seq *mkseq(int32_t depth, const sp_token *t, int32_t n) {
    suffix_seq *q = suffix_seq_create(depth);
    SP_ASSERT(q);
    SP_ASSERT(suffix_seq_append(q, t, n) == 0);
    return q;
}

static void test_suffix_own_repetition(void) {
    const sp_token h[] = {10, 11, 12, 13, 14, 15, 99, 10, 11, 12};
    suffix_seq *q = mkseq(16, h, LEN(h));
    CHECK_SEQ(q);
    sp_token out[16];
    float pr[16];
    /* "10 11 12" (m = 3) matched; at most 2 * 3 tokens */
    int32_t n = suffix_propose(NULL, q, 8, 0.5f, out, pr);
    const sp_token want[] = {13, 14, 15, 99, 10, 11};
    CHECK(same_toks(out, n, want, LEN(want)), "got %d tokens, first %d", n, n ? out[0] : -1);
    for (int32_t i = 0; i < n; i++) CHECK(pr[i] == 1.0f, "prob[%d] = %g", i, pr[i]);
    CHECK(suffix_propose(NULL, q, 3, 0.5f, out, NULL) == 3 && out[2] == 15, "k_max 3");
    CHECK(suffix_propose(NULL, q, 0, 0.5f, out, NULL) == 0, "k_max 0");
    /* no self-match: a history without repeats proposes nothing */
    const sp_token u[] = {1, 2, 3, 4, 5};
    suffix_seq *q2 = mkseq(16, u, LEN(u));
    CHECK(suffix_propose(NULL, q2, 8, 0.0f, out, NULL) == 0, "no earlier occurrence");
    suffix_seq *q3 = suffix_seq_create(16);
    CHECK(suffix_propose(NULL, q3, 8, 0.0f, out, NULL) == 0, "empty history");
    CHECK(suffix_propose(NULL, NULL, 8, 0.0f, out, NULL) == 0, "no q");
    /* one-token match earns at most 2 tokens */
    const sp_token v[] = {7, 1, 2, 3, 4, 9, 7};
    suffix_seq *q4 = mkseq(16, v, LEN(v));
    n = suffix_propose(NULL, q4, 8, 0.0f, out, NULL);
    CHECK(n == 2 && out[0] == 1 && out[1] == 2, "short match, short proposal: %d", n);
    /* overlapping repeat: "a b a b a b" proposes "a b" and then stops (text ends) */
    const sp_token w[] = {1, 2, 1, 2, 1, 2};
    suffix_seq *q5 = mkseq(16, w, LEN(w));
    n = suffix_propose(NULL, q5, 8, 0.0f, out, NULL);
    CHECK(n == 2 && out[0] == 1 && out[1] == 2, "overlapping repeat: %d", n);
    suffix_seq_free(q);
    suffix_seq_free(q2);
    suffix_seq_free(q3);
    suffix_seq_free(q4);
    suffix_seq_free(q5);
}

static void test_suffix_store_context(void) {
    suffix_store *s = suffix_store_create(1000, 16);
    const sp_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(suffix_store_add(s, a, LEN(a)) == 0, "add");
    CHECK(suffix_store_tokens(s) == 8, "tokens %zu", suffix_store_tokens(s));
    CHECK_STORE(s);
    const sp_token h[] = {50, 51, 2, 3, 4};
    suffix_seq *q = mkseq(16, h, LEN(h));
    sp_token out[16];
    float pr[16];
    int32_t n = suffix_propose(s, q, 8, 0.5f, out, pr);
    const sp_token want[] = {5, 6, 7, 8};
    CHECK(same_toks(out, n, want, LEN(want)), "got %d tokens", n);
    CHECK(suffix_propose(NULL, q, 8, 0.5f, out, pr) == 0, "nothing without the store");
    /* a longer match in the store beats a shorter one in q */
    const sp_token h2[] = {2, 9, 0, 2, 3, 4};
    suffix_seq *q2 = mkseq(16, h2, LEN(h2));
    n = suffix_propose(s, q2, 8, 0.0f, out, pr);
    CHECK(n == 4 && out[0] == 5 && pr[0] == 1.0f, "store's longer match: %d, %d", n, out[0]);
    suffix_seq_free(q);
    suffix_seq_free(q2);
    suffix_store_free(s);
}

static void test_suffix_majority_and_min_prob(void) {
    suffix_store *s = suffix_store_create(1000, 16);
    const sp_token a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 4, 6}, c[] = {1, 2, 3, 9, 9};
    suffix_store_add(s, a, 5);
    suffix_store_add(s, b, 5);
    suffix_store_add(s, c, 5);
    CHECK_STORE(s);
    const sp_token h[] = {1, 2, 3};
    suffix_seq *q = mkseq(16, h, 3);
    sp_token out[8];
    float pr[8];
    /* 4 follows "1 2 3" twice of three (2/3); then 5 and 6 tie (1/2, smaller id) */
    int32_t n = suffix_propose(s, q, 8, 0.0f, out, pr);
    CHECK(n == 2 && out[0] == 4 && out[1] == 5, "majority then tie (then the text ends): %d [%d %d]", n, out[0], out[1]);
    CHECK(n >= 2 && fabsf(pr[0] - 2.0f / 3) < 1e-6f && fabsf(pr[1] - 1.0f / 3) < 1e-6f,
          "probs %g %g", pr[0], pr[1]);
    CHECK(suffix_propose(s, q, 8, 0.5f, out, pr) == 1 && out[0] == 4, "min_prob 0.5 cuts at 1");
    CHECK(suffix_propose(s, q, 8, 0.3f, out, pr) == 2, "min_prob 0.3 cuts at 2");
    CHECK(suffix_propose(s, q, 8, 0.7f, out, pr) == 0, "min_prob 0.7: nothing");
    /* q and s at equal match lengths: counts summed */
    const sp_token h2[] = {1, 2, 3, 9, 9, 9, 1, 2, 3};
    suffix_seq *q2 = mkseq(16, h2, LEN(h2));
    n = suffix_propose(s, q2, 8, 0.0f, out, pr);
    /* continuations of "1 2 3": store 4 (2), 9 (1); q 9 (1) -> 4 and 9 tie at 2 of 4 */
    CHECK(n >= 1 && out[0] == 4 && fabsf(pr[0] - 0.5f) < 1e-6f, "summed tie: %d p %g", out[0], pr[0]);
    suffix_store_add(s, c, 5);
    n = suffix_propose(s, q2, 8, 0.0f, out, pr);
    CHECK(n >= 2 && out[0] == 9 && out[1] == 9 && fabsf(pr[0] - 0.6f) < 1e-6f,
          "summed majority: %d p %g", out[0], pr[0]);
    CHECK_STORE(s);
    suffix_seq_free(q);
    suffix_seq_free(q2);
    suffix_store_free(s);
}

static void test_suffix_depth_bound(void) {
    /* D = 4, k_max 8: context match capped at D - min(8, 2) = 2 tokens, and
     * context + proposal never exceed D. */
    const sp_token h[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3};
    suffix_seq *q = mkseq(4, h, LEN(h));
    sp_token out[8];
    int32_t n = suffix_propose(NULL, q, 8, 0.0f, out, NULL);
    CHECK(n == 2 && out[0] == 4 && out[1] == 5, "D 4: %d", n);
    CHECK_SEQ(q);
    suffix_seq_free(q);
    /* max_depth below 2 is taken as 2 */
    suffix_seq *q1 = mkseq(1, h, LEN(h));
    n = suffix_propose(NULL, q1, 8, 0.0f, out, NULL);
    CHECK(n == 1 && out[0] == 4, "D 1 taken as 2: %d", n);
    suffix_seq_free(q1);
}

static void test_suffix_store_lru(void) {
    suffix_store *s = suffix_store_create(20, 8);
    const sp_token a[] = {100, 101, 102, 103};
    const sp_token h[] = {7, 100, 101};
    suffix_seq *q = mkseq(8, h, LEN(h));
    sp_token out[8];
    suffix_store_add(s, a, 4);
    CHECK(suffix_propose(s, q, 8, 0.0f, out, NULL) == 2 && out[0] == 102, "A proposed");
    /* shadow FIFO of lengths */
    int32_t lens[64], head = 0, tail = 0;
    size_t tot = 4;
    lens[tail++] = 4;
    int dropped_at = -1;
    for (int i = 0; i < 12; i++) {
        sp_token t[9];
        int32_t n = rnd_in(1, 9);
        for (int32_t j = 0; j < n; j++) t[j] = rnd_in(0, 5);
        CHECK(suffix_store_add(s, t, n) == 0, "add %d", i);
        lens[tail++] = n;
        tot += (size_t)n;
        while (tot > 20) tot -= (size_t)lens[head++];
        CHECK(suffix_store_tokens(s) == tot, "add %d: tokens %zu, shadow %zu", i,
              suffix_store_tokens(s), tot);
        CHECK(suffix_store_tokens(s) <= 20, "bound");
        CHECK_STORE(s);
        int32_t got = suffix_propose(s, q, 8, 0.0f, out, NULL);
        if (head == 0) CHECK(got == 2 && out[0] == 102, "A still stored");
        else {
            CHECK(got == 0, "A dropped, nothing proposed (got %d)", got);
            if (dropped_at < 0) dropped_at = i;
        }
    }
    CHECK(dropped_at >= 0, "A was dropped");
    /* too long a sequence keeps its last max_tokens tokens */
    sp_token big[30];
    for (int i = 0; i < 30; i++) big[i] = 200 + i;
    suffix_store_add(s, big, 30);
    CHECK(suffix_store_tokens(s) == 20, "tail of a long sequence: %zu", suffix_store_tokens(s));
    CHECK_STORE(s);
    const sp_token h1[] = {209}, h2[] = {215};
    suffix_seq *q1 = mkseq(8, h1, 1), *q2 = mkseq(8, h2, 1);
    CHECK(suffix_propose(s, q1, 8, 0.0f, out, NULL) == 0, "head of it dropped");
    CHECK(suffix_propose(s, q2, 8, 0.0f, out, NULL) == 2 && out[0] == 216, "tail kept");
    /* max_tokens 0 stores nothing */
    suffix_store *z = suffix_store_create(0, 8);
    CHECK(suffix_store_add(z, a, 4) == 0 && suffix_store_tokens(z) == 0, "max_tokens 0");
    CHECK(suffix_propose(z, q, 8, 0.0f, out, NULL) == 0, "empty store");
    suffix_store_free(z);
    suffix_seq_free(q);
    suffix_seq_free(q1);
    suffix_seq_free(q2);
    suffix_store_free(s);
}

/* Many add/drop cycles with heavy sharing (tiny alphabet): the checker
 * recounts every node from the stored sequences after each add. */
static void test_suffix_store_cycles(void) {
    for (int round = 0; round < 3 && !t_case_failures; round++) {
        int32_t D = round == 0 ? 2 : round == 1 ? 5 : 12;
        suffix_store *s = suffix_store_create((size_t)rnd_in(10, 60), D);
        for (int i = 0; i < 300 && !t_case_failures; i++) {
            sp_token t[40];
            int32_t n = rnd_in(0, 40), A = rnd_in(1, 4);
            for (int32_t j = 0; j < n; j++) t[j] = rnd_in(0, A - 1);
            CHECK(suffix_store_add(s, t, n) == 0, "add");
            CHECK_STORE(s);
        }
        suffix_store_free(s);
    }
    /* per-request index grown in random chunks */
    for (int round = 0; round < 20 && !t_case_failures; round++) {
        int32_t D = rnd_in(1, 10);
        suffix_seq *q = suffix_seq_create(D);
        for (int i = 0; i < 30 && !t_case_failures; i++) {
            sp_token t[6];
            int32_t n = rnd_in(0, 6);
            for (int32_t j = 0; j < n; j++) t[j] = rnd_in(0, 2);
            CHECK(suffix_seq_append(q, t, n) == 0, "append");
            CHECK_SEQ(q);
        }
        suffix_seq_free(q);
    }
}

/* ---- suffix: brute-force reference ----------------------------------------------- */

enum { ALPHA = 6 };

/* Adds to cnt[c] the occurrences of u followed by c in seq (when |u| + 1 <= D). */
static void bf_count(const sp_token *seq, int32_t len, const sp_token *u, int32_t ulen, int32_t D,
                     uint64_t *cnt) {
    if (ulen + 1 > D) return;
    for (int32_t p = 0; p + ulen < len; p++)
        if (ulen == 0 || memcmp(seq + p, u, (size_t)ulen * sizeof(sp_token)) == 0) cnt[seq[p + ulen]]++;
}

typedef struct {
    const sp_token *seq[64];
    int32_t len[64];
    int32_t n;
} bf_store;

static uint64_t bf_total(const bf_store *st, const sp_token *u, int32_t ulen, int32_t D) {
    uint64_t c[ALPHA] = {0}, t = 0;
    for (int32_t i = 0; i < st->n; i++) bf_count(st->seq[i], st->len[i], u, ulen, D, c);
    for (int a = 0; a < ALPHA; a++) t += c[a];
    return t;
}

static int32_t bf_cap(int32_t D, int32_t k) {
    int32_t c = D - SP_MIN(k, D / 2);
    return SP_MAX(1, SP_MIN(c, D - 1));
}

static int32_t bf_propose(const bf_store *st, int32_t Ds, const sp_token *h, int32_t n, int32_t Dq,
                          int32_t k, float min_prob, sp_token *out, float *prob) {
    if (k <= 0 || n == 0) return 0;
    bf_store self = {{h}, {n}, 1};
    int32_t mq = 0, ms = 0;
    for (int32_t m = SP_MIN(bf_cap(Dq, k), n); m >= 1 && !mq; m--)
        if (bf_total(&self, h + n - m, m, Dq)) mq = m;
    if (st)
        for (int32_t m = SP_MIN(bf_cap(Ds, k), n); m >= 1 && !ms; m--)
            if (bf_total(st, h + n - m, m, Ds)) ms = m;
    int32_t m = SP_MAX(mq, ms);
    if (!m) return 0;
    sp_token u[128];
    memcpy(u, h + n - m, (size_t)m * sizeof(sp_token));
    int32_t ulen = m, len = 0, limit = SP_MIN(k, 2 * m);
    double p = 1.0;
    while (len < limit) {
        uint64_t c[ALPHA] = {0}, tot = 0;
        if (mq == m) bf_count(h, n, u, ulen, Dq, c);
        if (st && ms == m)
            for (int32_t i = 0; i < st->n; i++) bf_count(st->seq[i], st->len[i], u, ulen, Ds, c);
        int best = 0;
        for (int a = 0; a < ALPHA; a++) {
            tot += c[a];
            if (c[a] > c[best]) best = a;
        }
        if (!tot) break;
        p *= (double)c[best] / (double)tot;
        if (p < (double)min_prob) break;
        out[len] = best;
        prob[len] = (float)p;
        len++;
        u[ulen++] = best;
    }
    return len;
}

static void test_suffix_vs_bruteforce(void) {
    const float min_probs[] = {0.0f, 0.1f, 0.3f, 0.5f, 0.9f};
    int nonzero = 0, both = 0;
    for (int it = 0; it < 1500 && !t_case_failures; it++) {
        int32_t D = rnd_in(2, 9), A = rnd_in(1, ALPHA), k = rnd_in(1, 8);
        float mp = min_probs[rnd() % 5];
        size_t max_tok = (size_t)rnd_in(0, 80);
        suffix_store *s = rnd() % 4 ? suffix_store_create(max_tok, D) : NULL;
        /* store contents mirrored in a shadow FIFO */
        static sp_token pool[64][40];
        bf_store st = {{0}, {0}, 0};
        int32_t head = 0, n_add = s ? rnd_in(0, 8) : 0;
        size_t tot = 0;
        int32_t lens[64];
        for (int32_t i = 0; i < n_add; i++) {
            int32_t n = rnd_in(0, 30);
            for (int32_t j = 0; j < n; j++) pool[i][j] = rnd_in(0, A - 1);
            suffix_store_add(s, pool[i], n);
            if (n == 0 || max_tok == 0) {
                lens[i] = 0;
                continue;
            }
            int32_t off = (size_t)n > max_tok ? n - (int32_t)max_tok : 0;
            memmove(pool[i], pool[i] + off, (size_t)(n - off) * sizeof(sp_token));
            lens[i] = n - off;
            tot += (size_t)lens[i];
            while (tot > max_tok) tot -= (size_t)lens[head++];
        }
        for (int32_t i = head; i < n_add; i++)
            if (lens[i]) st.seq[st.n] = pool[i], st.len[st.n++] = lens[i];
        if (s) CHECK(suffix_store_tokens(s) == tot, "store tokens");

        sp_token h[48];
        int32_t n = rnd_in(0, 48);
        for (int32_t j = 0; j < n; j++) h[j] = rnd_in(0, A - 1);
        /* half the time copy a stored stretch into the history's end */
        if (st.n && rnd() % 2 && n > 0) {
            int32_t w = rnd_in(0, st.n - 1), l = rnd_in(1, 8); /* SP_MIN evaluates twice */
            l = SP_MIN(l, SP_MIN(st.len[w], n));
            int32_t from = rnd_in(0, st.len[w] - l);
            memcpy(h + n - l, st.seq[w] + from, (size_t)l * sizeof(sp_token));
        }
        suffix_seq *q = suffix_seq_create(D);
        for (int32_t j = 0; j < n;) { /* in random chunks */
            int32_t c = rnd_in(1, 5);
            c = SP_MIN(c, n - j);
            suffix_seq_append(q, h + j, c);
            j += c;
        }
        sp_token a[16], b[16];
        float pa[16], pb[16];
        int32_t ga = suffix_propose(s, q, k, mp, a, pa);
        int32_t gb = bf_propose(s ? &st : NULL, D, h, n, D, k, mp, b, pb);
        char sa[128], sb[128];
        fmt_toks(sa, sizeof(sa), a, ga);
        fmt_toks(sb, sizeof(sb), b, gb);
        CHECK(same_toks(a, ga, b, gb), "iteration %d (D %d k %d min_prob %g n %d): [%s] vs ref [%s]",
              it, D, k, mp, n, sa, sb);
        for (int32_t i = 0; i < ga && i < gb; i++)
            CHECK(fabsf(pa[i] - pb[i]) < 1e-6f, "iteration %d: prob[%d] %g vs %g", it, i, pa[i], pb[i]);
        if (!same_toks(a, ga, b, gb) && getenv("SPEC_DEBUG")) {
            fprintf(stderr, "A %d max_tok %zu store %d seqs:\n", A, max_tok, s ? st.n : -1);
            for (int32_t i = 0; i < st.n; i++) {
                fmt_toks(sa, sizeof(sa), st.seq[i], st.len[i]);
                fprintf(stderr, "  [%s]\n", sa);
            }
            fmt_toks(sa, sizeof(sa), h, n);
            fprintf(stderr, "h [%s]\n", sa);

        }
        nonzero += ga > 0;
        both += ga > 0 && s && st.n;
        if (s) CHECK_STORE(s);
        CHECK_SEQ(q);
        suffix_seq_free(q);
        suffix_store_free(s);
    }
    CHECK(nonzero > 300 && both > 100, "the cases exercise proposals: %d, %d with a store", nonzero,
          both);
}

/* ---- partitions per cache salt --------------------------------------------- */

#define CHECK_PARTS(m, holds)                                                  \
    do {                                                                       \
        char e_[256] = "";                                                     \
        int r_ = spec_parts_check(m, holds, true, e_, sizeof(e_));          \
        CHECK(r_ == 0, "partitions invariant: %s", e_);                        \
    } while (0)

/* A partition's prior is the mean of SP_SPEC_PRIOR0 and its first
 * observations (so a draft measured at 0.3 on one sequence keeps the next
 * ones from paying for their catch-up at a guessed 0.5), then a moving
 * average at SP_SPEC_PRIOR_RATE; methods apart; OFF ignored. */
static void test_parts_prior(void) {
    spec_parts *m = spec_parts_create(1000, 8, 16);
    spec_part *p = spec_parts_acquire(m, "t");
    CHECK(p != NULL, "acquire");
    if (!p) return;
    for (int i = 0; i < 4; i++) spec_part_observe(p, SP_SPEC_DRAFT, 0.25f);
    const float want = (SP_SPEC_PRIOR0 + 4 * 0.25f) / 5;
    CHECK(fabsf(spec_part_prior(p, SP_SPEC_DRAFT) - want) < 1e-6f, "4 observations of 0.25: %g, want %g",
          spec_part_prior(p, SP_SPEC_DRAFT), want);
    CHECK(spec_part_prior(p, SP_SPEC_SUFFIX) == SP_SPEC_PRIOR0, "other methods untouched");
    spec_part_observe(p, SP_SPEC_OFF, 1.0f);
    for (int i = 0; i < 200; i++) spec_part_observe(p, SP_SPEC_DRAFT, 1.0f);
    float a = spec_part_prior(p, SP_SPEC_DRAFT);
    CHECK(a > 0.99f && a <= 1.0f, "200 observations of 1: %g", a);
    spec_part_observe(p, SP_SPEC_DRAFT, 0.0f);
    const float b = spec_part_prior(p, SP_SPEC_DRAFT);
    CHECK(fabsf(b - a * (1 - SP_SPEC_PRIOR_RATE)) < 1e-6f, "settled: one 0 moves it by the rate: %g -> %g", a, b);
    spec_parts_release(m, p);
    spec_parts_free(m);
}

/* What salt A's requests taught is invisible to salt B: B's store is empty
 * (its proposals come from its own text only, as if A never ran), B's
 * priors are untouched, while A itself proposes A's continuation. No salt
 * and "" are one partition. */
static void test_parts_isolation(void) {
    spec_parts *m = spec_parts_create(1000, 8, 16);
    const sp_token out_a[] = {40, 41, 42, 43, 44, 45, 46, 47}; /* A's output */
    const sp_token h[] = {7, 40, 41, 42};                      /* prompt + half of it */
    suffix_seq *q = mkseq(16, h, LEN(h));
    sp_token out[8];
    spec_part *a = spec_parts_acquire(m, "tenant-a");
    CHECK(a && spec_parts_add(m, a, out_a, LEN(out_a)) == 0, "add to A");
    float *pa = spec_part_priors(a);
    CHECK(pa[SP_SPEC_SUFFIX] == SP_SPEC_PRIOR0, "a new partition starts at the default prior");
    pa[SP_SPEC_SUFFIX] = 0.97f;
    spec_parts_release(m, a);
    spec_part *b = spec_parts_acquire(m, "tenant-b");
    CHECK(b && b != a, "B has its own partition");
    CHECK(spec_part_store(b) == NULL, "B's store is empty");
    int32_t nb = suffix_propose(spec_part_store(b), q, 8, 0.0f, out, NULL);
    int32_t n0 = suffix_propose(NULL, q, 8, 0.0f, out, NULL);
    CHECK(nb == 0 && n0 == 0, "B proposes what no store proposes: %d vs %d", nb, n0);
    CHECK(spec_part_prior(b, SP_SPEC_SUFFIX) == SP_SPEC_PRIOR0, "B's prior untouched: %g",
          spec_part_prior(b, SP_SPEC_SUFFIX));
    spec_part *a2 = spec_parts_acquire(m, "tenant-a");
    CHECK(a2 == a, "the same salt finds the same partition");
    int32_t na = suffix_propose(spec_part_store(a2), q, 8, 0.0f, out, NULL);
    CHECK(na == 5 && out[0] == 43 && out[4] == 47, "A proposes its own continuation: %d", na);
    CHECK(spec_part_prior(a2, SP_SPEC_SUFFIX) == 0.97f, "A's prior kept");
    /* a salt that only extends another is another partition */
    CHECK(spec_parts_find(m, "tenant-a:x") == NULL && spec_parts_find(m, "tenant-") == NULL,
          "prefix salts are distinct");
    spec_part *n1 = spec_parts_acquire(m, NULL), *n2 = spec_parts_acquire(m, "");
    CHECK(n1 && n1 == n2 && !strcmp(spec_part_salt(n1), ""), "no salt is the partition \"\"");
    CHECK(spec_parts_count(m) == 3 && spec_parts_tokens(m) == 8, "%d partitions, %zu tokens",
          spec_parts_count(m), spec_parts_tokens(m));
    CHECK_PARTS(m, 4);
    spec_parts_release(m, b);
    spec_parts_release(m, a2);
    spec_parts_release(m, n1);
    spec_parts_release(m, n2);
    CHECK_PARTS(m, 0);
    suffix_seq_free(q);
    spec_parts_free(m);
}

/* The cap on partitions: the least recently used one nobody holds goes,
 * with what it learned; held ones stay; all held: NULL. */
static void test_parts_cap(void) {
    spec_parts *m = spec_parts_create(1000, 3, 8);
    const sp_token t[] = {1, 2, 3};
    spec_part *a = spec_parts_acquire(m, "a");
    spec_parts_add(m, a, t, 3);
    spec_part *b = spec_parts_acquire(m, "b");
    spec_parts_add(m, b, t, 3);
    spec_part *c = spec_parts_acquire(m, "c"); /* recency: a, b, c */
    CHECK(spec_parts_acquire(m, "d") == NULL, "all three held: no room");
    CHECK_PARTS(m, 3);
    spec_parts_release(m, b);
    spec_parts_release(m, c);
    /* a is the oldest but held; b is the least recently used one free */
    spec_part *d = spec_parts_acquire(m, "d");
    CHECK(d && spec_parts_find(m, "b") == NULL && spec_parts_find(m, "a") == a &&
              spec_parts_find(m, "c") == c,
          "b dropped for d");
    CHECK(spec_parts_count(m) == 3 && spec_parts_tokens(m) == 3, "b's tokens went with it: %zu",
          spec_parts_tokens(m));
    CHECK_PARTS(m, 2);
    /* b comes back empty */
    spec_parts_release(m, d);
    spec_part *b2 = spec_parts_acquire(m, "b");
    CHECK(b2 && spec_part_store(b2) == NULL && spec_parts_find(m, "c") == NULL,
          "b new and empty, c (least recent) dropped");
    spec_parts_release(m, b2);
    spec_parts_release(m, a);
    CHECK_PARTS(m, 0);
    spec_parts_free(m);
    /* max_tokens 0 learns nothing */
    spec_parts *z = spec_parts_create(0, 2, 8);
    spec_part *p = spec_parts_acquire(z, "x");
    CHECK(spec_parts_add(z, p, t, 3) == 0 && spec_part_store(p) == NULL, "max_tokens 0");
    spec_parts_release(z, p);
    spec_parts_free(z);
}

/* A shadow of the contract: per partition a FIFO of sequence lengths and a
 * recency order; an add appends (the tail of an over-long one), trims the
 * partition to the budget alone, then takes the oldest sequences of the
 * least recently used other partitions until the total fits. */
#define SH_P 6
#define SH_SEQ 256
typedef struct {
    int32_t len[SH_SEQ];
    int32_t head, tail;
    size_t tokens;
    bool exists;
    int32_t holds;
    uint64_t used; /* recency stamp */
} shadow_part;

static void test_parts_budget_random(void) {
    const size_t budget = 40;
    const int32_t max_parts = 4;
    static const char *salts[SH_P] = {"", "k1", "k2", "k1:s", "k3", "k4"};
    spec_parts *m = spec_parts_create(budget, max_parts, 6);
    shadow_part sh[SH_P];
    memset(sh, 0, sizeof(sh));
    spec_part *held[SH_P][4] = {{0}};
    uint64_t clock = 0;
    int32_t n_exist = 0;
    for (int op = 0; op < 3000; op++) {
        const int32_t i = rnd_in(0, SH_P - 1);
        const int what = rnd_in(0, 9);
        if (what < 3 && sh[i].holds < 4) { /* acquire */
            if (!sh[i].exists && n_exist == max_parts) {
                int32_t v = -1;
                for (int32_t j = 0; j < SH_P; j++)
                    if (sh[j].exists && !sh[j].holds && (v < 0 || sh[j].used < sh[v].used)) v = j;
                if (v < 0) {
                    CHECK(spec_parts_acquire(m, salts[i]) == NULL, "op %d: room found when all held", op);
                    continue;
                }
                memset(&sh[v], 0, sizeof(sh[v]));
                n_exist--;
            }
            spec_part *p = spec_parts_acquire(m, salts[i]);
            CHECK(p != NULL, "op %d: acquire", op);
            if (!p) continue;
            if (!sh[i].exists) sh[i].exists = true, n_exist++;
            sh[i].used = ++clock;
            held[i][sh[i].holds++] = p;
        } else if (what < 6 && sh[i].holds) { /* release */
            spec_parts_release(m, held[i][--sh[i].holds]);
        } else if (sh[i].holds) { /* add to a held partition */
            sp_token t[60];
            const int32_t n = rnd() % 4 ? rnd_in(1, 12) : rnd_in(30, 60);
            for (int32_t j = 0; j < n; j++) t[j] = rnd_in(0, 4);
            CHECK(spec_parts_add(m, held[i][0], t, n) == 0, "op %d: add", op);
            shadow_part *p = &sh[i];
            p->len[p->tail++ % SH_SEQ] = SP_MIN(n, (int32_t)budget);
            p->tokens += (size_t)SP_MIN(n, (int32_t)budget);
            while (p->tokens > budget) p->tokens -= (size_t)p->len[p->head++ % SH_SEQ];
            p->used = ++clock;
            size_t total = 0;
            for (int32_t j = 0; j < SH_P; j++) total += sh[j].tokens;
            while (total > budget) {
                int32_t v = -1;
                for (int32_t j = 0; j < SH_P; j++)
                    if (j != i && sh[j].tokens && (v < 0 || sh[j].used < sh[v].used)) v = j;
                SP_ASSERT(v >= 0);
                while (total > budget && sh[v].tokens) {
                    const int32_t l = sh[v].len[sh[v].head++ % SH_SEQ];
                    sh[v].tokens -= (size_t)l;
                    total -= (size_t)l;
                }
            }
        }
        size_t total = 0;
        int64_t holds = 0;
        for (int32_t j = 0; j < SH_P; j++) {
            total += sh[j].tokens;
            holds += sh[j].holds;
            const spec_part *p = spec_parts_find(m, salts[j]);
            CHECK((p != NULL) == sh[j].exists, "op %d: partition %d exists %d, shadow %d", op, j,
                  p != NULL, sh[j].exists);
            const size_t got = p ? suffix_store_tokens(spec_part_store(p)) : 0;
            CHECK(got == sh[j].tokens, "op %d: partition %d holds %zu tokens, shadow %zu", op, j,
                  got, sh[j].tokens);
        }
        CHECK(spec_parts_tokens(m) == total && total <= budget, "op %d: %zu tokens, shadow %zu",
              op, spec_parts_tokens(m), total);
        CHECK(spec_parts_count(m) == n_exist, "op %d: %d partitions, shadow %d", op,
              spec_parts_count(m), n_exist);
        if (op % 10 == 0) CHECK_PARTS(m, holds);
        if (t_case_failures) break;
    }
    for (int32_t j = 0; j < SH_P; j++)
        while (sh[j].holds) spec_parts_release(m, held[j][--sh[j].holds]);
    CHECK_PARTS(m, 0);
    spec_parts_free(m);
}

/* Memory follows what is held, not each partition's peak: one partition
 * fills the whole budget, then others push it down to a few sequences; its
 * index is rebuilt smaller, and the map's bytes stay within a small
 * multiple of what one full store takes. */
static void test_parts_memory(void) {
    const size_t budget = 4096;
    const int32_t D = 16;
    spec_parts *m = spec_parts_create(budget, 64, D);
    sp_token t[256];
    spec_part *a = spec_parts_acquire(m, "big");
    for (int r = 0; r < 16; r++) {
        for (int j = 0; j < 256; j++) t[j] = (sp_token)rnd_in(0, 5000);
        spec_parts_add(m, a, t, 256);
    }
    spec_parts_release(m, a);
    const size_t full = spec_parts_bytes(m);
    const size_t a_full = suffix_store_bytes(spec_part_store(a));
    CHECK(spec_parts_tokens(m) == budget, "full: %zu", spec_parts_tokens(m));
    /* 60 more partitions, 60 tokens each: "big" keeps 4096 - 3600 - its
     * tokens, its peak arrays would stay if nothing shrank them */
    size_t worst = full;
    for (int i = 0; i < 60; i++) {
        char salt[16];
        snprintf(salt, sizeof(salt), "t%d", i);
        spec_part *p = spec_parts_acquire(m, salt);
        for (int j = 0; j < 60; j++) t[j] = (sp_token)rnd_in(0, 5000);
        spec_parts_add(m, p, t, 60);
        spec_parts_release(m, p);
        worst = SP_MAX(worst, spec_parts_bytes(m));
    }
    CHECK_PARTS(m, 0);
    const spec_part *big = spec_parts_find(m, "big");
    const suffix_store *bs = big ? spec_part_store(big) : NULL;
    const size_t a_now = suffix_store_bytes(bs);
    /* a store built afresh for what it holds now (one 256-token sequence) */
    suffix_store *fresh = suffix_store_create(budget, D);
    suffix_store_add(fresh, t, 256);
    const size_t f = suffix_store_bytes(fresh);
    suffix_store_free(fresh);
    CHECK(bs && suffix_store_tokens(bs) == 256, "big keeps one sequence");
    CHECK(a_now <= 4 * f && a_now < a_full, "the trimmed store shrank: %zu -> %zu bytes (fresh: %zu)",
          a_full, a_now, f);
    CHECK(worst <= 3 * full, "bytes with 61 partitions %zu, one full store %zu", worst, full);
    printf("  memory: one full store (%zu tokens) %zu KB; 61 partitions at the same budget: at "
           "most %zu KB; the first store after trimming %zu -> %zu KB\n", budget, full >> 10,
           worst >> 10, a_full >> 10, a_now >> 10);
    spec_parts_free(m);
}

/* ---- cost ---------------------------------------------------------------------- */

/* Text-like tokens: a Zipf-ish draw over 32k ids, with stretches copied from
 * earlier (about a quarter of the text), as in code or quoting. */
static void gen_text(sp_token *t, int32_t n) {
    for (int32_t i = 0; i < n;) {
        if (i > 64 && rnd() % 8 == 0) {
            int32_t l = rnd_in(4, 40);
            l = SP_MIN(l, n - i);
            int32_t from = rnd_in(0, i - l);
            memcpy(t + i, t + from, (size_t)l * sizeof(sp_token));
            i += l;
        } else {
            uint32_t r = rnd() % 32000 + 1;
            t[i++] = (sp_token)(32000 / r) + (sp_token)(rnd() % 4) * 1000;
        }
    }
}

static void test_cost(void) {
    enum { N = 8192, D = 32, K = 8 };
    sp_token *t = malloc(N * sizeof(sp_token)), out[K];
    gen_text(t, N);
    suffix_seq *q = suffix_seq_create(D);
    double t0 = time_s(), t_prop = 0, t_ng = 0;
    int32_t proposed = 0, calls = 0;
    for (int32_t i = 0; i < N; i++) {
        CHECK(suffix_seq_append(q, t + i, 1) == 0, "append");
    }
    double t_app = time_s() - t0;
    /* propose at many points of the history (a fresh index per point would
     * be slow to build; instead propose on prefixes via a second index) */
    suffix_seq *q2 = suffix_seq_create(D);
    suffix_store *s = suffix_store_create(1 << 16, D);
    sp_token *other = malloc(N * sizeof(sp_token));
    double t_add = 0;
    for (int r = 0; r < 4; r++) {
        gen_text(other, N);
        memcpy(other + 100, t + 5000, 500 * sizeof(sp_token)); /* shared text */
        double a0 = time_s();
        CHECK(suffix_store_add(s, other, N) == 0, "store add");
        t_add += time_s() - a0;
    }
    for (int32_t i = 0; i < N; i++) {
        suffix_seq_append(q2, t + i, 1);
        if (i % 8 != 7) continue;
        double p0 = time_s();
        proposed += suffix_propose(s, q2, K, 0.1f, out, NULL);
        double p1 = time_s();
        ngram_propose(t, i + 1, 1, 4, K, out);
        t_ng += time_s() - p1;
        t_prop += p1 - p0;
        calls++;
    }
    CHECK(proposed > 0, "something proposed");
    /* steady state: a full store (16k tokens) drops a 2k-token sequence per add */
    suffix_store *s2 = suffix_store_create(1 << 14, D);
    double t_ss = 0;
    for (int r = 0; r < 16; r++) {
        gen_text(other, 2048);
        double a0 = time_s();
        suffix_store_add(s2, other, 2048);
        if (r >= 8) t_ss += time_s() - a0;
    }
    CHECK(suffix_store_tokens(s2) == 1 << 14, "full");
    CHECK_STORE(s2);
    suffix_store_free(s2);
    printf("  cost, %d-token history, D %d: append %.2f us/token, propose %.2f us/call "
           "(store of %zu tokens; %.2f tokens/call), store add %.2f ms per %d tokens, "
           "ngram(n_max 4) %.2f us/call; full store: add+evict %.2f ms per 2048 tokens\n",
           N, D, 1e6 * t_app / N, 1e6 * t_prop / calls, suffix_store_tokens(s),
           (double)proposed / calls, 1e3 * t_add / 4, N, 1e6 * t_ng / calls, 1e3 * t_ss / 8);
    free(other);
    free(t);
    suffix_store_free(s);
    suffix_seq_free(q);
    suffix_seq_free(q2);
}

int main(void) {
    for (size_t i = 0; i < sizeof(ngram_rows) / sizeof(ngram_rows[0]); i++)
        RUN_NAMED(test_ngram_row, &ngram_rows[i], ngram_rows[i].name);
    RUN(test_ngram_random);
    RUN(test_suffix_own_repetition);
    RUN(test_suffix_store_context);
    RUN(test_suffix_majority_and_min_prob);
    RUN(test_suffix_depth_bound);
    RUN(test_suffix_store_lru);
    RUN(test_suffix_store_cycles);
    RUN(test_suffix_vs_bruteforce);
    RUN(test_parts_isolation);
    RUN(test_parts_prior);
    RUN(test_parts_cap);
    RUN(test_parts_budget_random);
    RUN(test_parts_memory);
    RUN(test_cost);
    TEST_END();
}
