/* kv_simple.c: the contiguous per-sequence KV store.
 *
 * Layout: k[seq][layer][pos][kv_dim] and the same for v, allocated once.
 * It costs n_seq * n_ctx rows whether used or not; the paged pool replaces
 * it where memory matters. */
#include "kv/kv.h"

#include <stdlib.h>

typedef struct {
    kv_store base;
    int32_t n_ctx;
    size_t row_bytes;    /* one K or V row (kv_dim elements of the type) */
    unsigned char *k;    /* [n_seq][n_layer][n_ctx][kv_dim] */
    unsigned char *v;    /* [n_seq][n_layer][n_ctx][kv_dim] */
    int32_t *len;        /* [n_seq] committed positions */
    int32_t *reserved;   /* [n_seq] writable positions */
} kv_simple;

static size_t row_off(const kv_simple *s, int32_t layer, int32_t seq, int32_t pos) {
    size_t row = ((size_t)seq * s->base.n_layer + layer) * s->n_ctx + pos;
    return row * s->row_bytes;
}

static int ks_reserve(kv_store *kv, int32_t seq, int32_t n_new) {
    kv_simple *s = (kv_simple *)kv;
    if (n_new < 0 || (int64_t)s->len[seq] + n_new > s->n_ctx) return -1;
    s->reserved[seq] = s->len[seq] + n_new;
    return 0;
}

static void *ks_k_row(kv_store *kv, int32_t layer, int32_t seq, int32_t pos) {
    kv_simple *s = (kv_simple *)kv;
    SP_ASSERT(pos >= 0 && pos < s->reserved[seq]);
    return s->k + row_off(s, layer, seq, pos);
}

static void *ks_v_row(kv_store *kv, int32_t layer, int32_t seq, int32_t pos) {
    kv_simple *s = (kv_simple *)kv;
    SP_ASSERT(pos >= 0 && pos < s->reserved[seq]);
    return s->v + row_off(s, layer, seq, pos);
}

static int32_t ks_span(kv_store *kv, int32_t layer, int32_t seq, int32_t pos, int32_t end,
                       const void **k, const void **v) {
    kv_simple *s = (kv_simple *)kv;
    SP_ASSERT(pos >= 0 && pos < end && end <= s->reserved[seq]);
    *k = s->k + row_off(s, layer, seq, pos);
    *v = s->v + row_off(s, layer, seq, pos);
    return end - pos;
}

static int32_t ks_len(const kv_store *kv, int32_t seq) { return ((const kv_simple *)kv)->len[seq]; }

static void ks_set_len(kv_store *kv, int32_t seq, int32_t len) {
    kv_simple *s = (kv_simple *)kv;
    SP_ASSERT(len >= 0 && len <= s->n_ctx);
    s->len[seq] = len;
    s->reserved[seq] = len;
}

static void ks_destroy(kv_store *kv) {
    kv_simple *s = (kv_simple *)kv;
    if (!s) return;
    free(s->k);
    free(s->v);
    free(s->len);
    free(s->reserved);
    free(s);
}

static const kv_ops ks_ops = {ks_reserve, ks_k_row, ks_v_row, ks_span,
                                 ks_len,     ks_set_len, ks_destroy};

size_t kv_simple_bytes(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                          int32_t n_ctx) {
    return 2 * (size_t)n_seq * n_layer * n_ctx * row_size(type, kv_dim);
}

kv_store *kv_simple_create(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                           int32_t n_ctx, char *err, size_t errlen) {
    if (!kv_type_ok(type, kv_dim)) {
        seterr(err, errlen, "KV element type must be f16, f32 or q8_0 (q8_0: K/V rows of a multiple of 32)");
        return NULL;
    }
    kv_simple *s = calloc(1, sizeof(*s));
    if (!s) goto oom;
    s->base = (kv_store){&ks_ops, type, n_layer, kv_dim, n_seq};
    s->n_ctx = n_ctx;
    s->row_bytes = row_size(type, kv_dim);
    size_t half = kv_simple_bytes(type, n_layer, kv_dim, n_seq, n_ctx) / 2;
    s->k = malloc(half);
    s->v = malloc(half);
    s->len = calloc((size_t)n_seq, sizeof(int32_t));
    s->reserved = calloc((size_t)n_seq, sizeof(int32_t));
    if (!s->k || !s->v || !s->len || !s->reserved) goto oom;
    return &s->base;
oom:
    seterr(err, errlen, "out of memory allocating a KV store of %zu bytes",
              kv_simple_bytes(type, n_layer, kv_dim, n_seq, n_ctx));
    if (s) ks_destroy(&s->base);
    return NULL;
}
