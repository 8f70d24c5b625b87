/* test_gguf.c: the GGUF reader and writer.
 *
 * - every reference GGUF opens and shows the facts ../shared/reference/README
 *   lists;
 * - the writer's output is byte-identical to an independent encoder in this
 *   file, and everything written (all 13 value types, nested arrays, tensors
 *   of several types, streamed or not) reads back unchanged;
 * - hostile inputs (every truncation, patched counts/lengths/types/offsets,
 *   and thousands of seeded random mutations) fail with a message and never
 *   crash or read out of bounds (this also runs under `make asan`).
 */
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <unistd.h>

#include "common.h"
#include "gguf/gguf.h"
#include "test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* ---- an independent GGUF encoder ------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_bytes(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_bytes(b, &v, 1); }
static void b_u32(buf *b, uint32_t v) { b_bytes(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_bytes(b, &v, 8); }
static void b_str(buf *b, const char *s) { b_u64(b, strlen(s)); b_bytes(b, s, strlen(s)); }
static void b_pad(buf *b, size_t a) { while (b->n % a) b_u8(b, 0); }
static void b_kv(buf *b, const char *key, uint32_t type) { b_str(b, key); b_u32(b, type); }

/* The positions of fields that the hostile cases patch. */
typedef struct {
    size_t version, n_tensors, n_kv;
    size_t key_b;         /* last byte of the key "test.b" */
    size_t key_len_b;     /* its length field */
    size_t vtype_b;       /* value type of test.b */
    size_t align_vtype, align_val;
    size_t str_len;       /* length of test.str's value */
    size_t arr_elem_type, arr_len; /* test.strs */
    size_t nested_inner_type;      /* elem type of test.nested's first inner array */
    size_t t_name[3], t_ndims[3], t_ne[3][2], t_type[3], t_offset[3];
    size_t data_off;
} layout;

/* Tensor contents of the small valid file. */
static uint8_t t0_data[136], t1_data[32], t2_data[64];

/* Builds the small valid file: every value type once, three tensors; the
 * last tensor ends exactly at the end of the file so every truncation is
 * invalid. */
static buf build_valid(layout *L) {
    buf b = {0};
    for (size_t i = 0; i < sizeof t0_data; i++) t0_data[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 8; i++) { float f = (float)i - 3.5f; memcpy(t1_data + 4 * i, &f, 4); }
    for (int i = 0; i < 32; i++) { f16_t h = f32_to_f16(i * 0.25f); memcpy(t2_data + 2 * i, &h, 2); }

    b_bytes(&b, "GGUF", 4);
    L->version = b.n; b_u32(&b, 3);
    L->n_tensors = b.n; b_u64(&b, 3);
    L->n_kv = b.n; b_u64(&b, 10);
    b_kv(&b, "general.architecture", SP_GGUF_STRING); b_str(&b, "llama");
    b_str(&b, "general.alignment"); L->align_vtype = b.n; b_u32(&b, SP_GGUF_UINT32);
    L->align_val = b.n; b_u32(&b, 32);
    b_kv(&b, "test.a", SP_GGUF_UINT32); b_u32(&b, 7);
    L->key_len_b = b.n; b_str(&b, "test.b"); L->key_b = b.n - 1;
    L->vtype_b = b.n; b_u32(&b, SP_GGUF_INT8); b_u8(&b, (uint8_t)-3);
    b_kv(&b, "test.str", SP_GGUF_STRING); L->str_len = b.n; b_str(&b, "hello");
    b_kv(&b, "test.strs", SP_GGUF_ARRAY);
    L->arr_elem_type = b.n; b_u32(&b, SP_GGUF_STRING);
    L->arr_len = b.n; b_u64(&b, 3);
    b_str(&b, "a"); b_str(&b, ""); b_str(&b, "ccc");
    b_kv(&b, "test.f32s", SP_GGUF_ARRAY); b_u32(&b, SP_GGUF_FLOAT32); b_u64(&b, 4);
    for (int i = 0; i < 4; i++) { float f = 0.5f * (float)i; b_bytes(&b, &f, 4); }
    b_kv(&b, "test.nested", SP_GGUF_ARRAY); b_u32(&b, SP_GGUF_ARRAY); b_u64(&b, 2);
    L->nested_inner_type = b.n; b_u32(&b, SP_GGUF_UINT8); b_u64(&b, 2); b_u8(&b, 1); b_u8(&b, 2);
    b_u32(&b, SP_GGUF_STRING); b_u64(&b, 1); b_str(&b, "in");
    b_kv(&b, "test.bool", SP_GGUF_BOOL); b_u8(&b, 1);
    b_kv(&b, "test.f64", SP_GGUF_FLOAT64); { double d = -2.25; b_bytes(&b, &d, 8); }

    static const char *names[3] = {"blk.0.a", "blk.0.b", "blk.0.c"};
    static const uint32_t types[3] = {SP_TYPE_Q8_0, SP_TYPE_F32, SP_TYPE_F16};
    static const int64_t ne[3][2] = {{64, 2}, {8, 1}, {16, 2}};
    static const int nd[3] = {2, 1, 2};
    static const uint64_t offs[3] = {0, 160, 192};
    for (int i = 0; i < 3; i++) {
        L->t_name[i] = b.n; b_str(&b, names[i]);
        L->t_ndims[i] = b.n; b_u32(&b, (uint32_t)nd[i]);
        for (int d = 0; d < nd[i]; d++) { L->t_ne[i][d] = b.n; b_u64(&b, (uint64_t)ne[i][d]); }
        L->t_type[i] = b.n; b_u32(&b, types[i]);
        L->t_offset[i] = b.n; b_u64(&b, offs[i]);
    }
    b_pad(&b, 32);
    L->data_off = b.n;
    b_bytes(&b, t0_data, sizeof t0_data); b_pad(&b, 32);
    b_bytes(&b, t1_data, sizeof t1_data); b_pad(&b, 32);
    b_bytes(&b, t2_data, sizeof t2_data);
    return b;
}

/* The same content through the writer. */
static gguf_writer *writer_for_valid(void) {
    gguf_writer *w = gguf_writer_create();
    gguf_set_str(w, "general.architecture", "llama");
    gguf_set_u32(w, "general.alignment", 32);
    gguf_set_u32(w, "test.a", 7);
    int8_t m3 = -3;
    gguf_set_scalar(w, "test.b", SP_GGUF_INT8, &m3);
    gguf_set_str(w, "test.str", "hello");
    gguf_str strs[3] = {{"a", 1}, {"", 0}, {"ccc", 3}};
    gguf_set_arr_str(w, "test.strs", strs, 3);
    float f[4] = {0, 0.5f, 1.0f, 1.5f};
    gguf_set_arr(w, "test.f32s", SP_GGUF_FLOAT32, f, 4);
    buf nest = {0};
    b_u32(&nest, SP_GGUF_UINT8); b_u64(&nest, 2); b_u8(&nest, 1); b_u8(&nest, 2);
    b_u32(&nest, SP_GGUF_STRING); b_u64(&nest, 1); b_str(&nest, "in");
    gguf_set_arr(w, "test.nested", SP_GGUF_ARRAY, nest.p, 2);
    free(nest.p);
    gguf_set_bool(w, "test.bool", true);
    double d = -2.25;
    gguf_set_scalar(w, "test.f64", SP_GGUF_FLOAT64, &d);
    int64_t ne0[2] = {64, 2}, ne1[1] = {8}, ne2[2] = {16, 2};
    gguf_add_tensor(w, "blk.0.a", SP_TYPE_Q8_0, 2, ne0, t0_data, sizeof t0_data);
    gguf_add_tensor(w, "blk.0.b", SP_TYPE_F32, 1, ne1, t1_data, sizeof t1_data);
    gguf_add_tensor(w, "blk.0.c", SP_TYPE_F16, 2, ne2, t2_data, sizeof t2_data);
    return w;
}

/* ---- reference files -------------------------------------------------- */

typedef struct {
    const char *file;     /* under t_ref_dir() */
    const char *arch;
    int64_t n_tensors;
    int n_types;
    tensor_type types[4];     /* exactly the tensor types present */
    uint64_t n_vocab;
    const char *tok0;
    int64_t n_embd;       /* 0: no weights */
    bool tied;
} ref_case;

static const ref_case ref_cases[] = {
    {"models/ref-llama-spm-f16.gguf", "llama", 38, 2, {SP_TYPE_F16, SP_TYPE_F32}, 32000, "<unk>", 256, true},
    {"models/ref-llama-spm-q8_0.gguf", "llama", 30, 2, {SP_TYPE_Q8_0, SP_TYPE_F32}, 32000, "<unk>", 256, false},
    {"models/ref-llama-spm-q4_k_m.gguf", "llama", 38, 4,
     {SP_TYPE_Q4_K, SP_TYPE_Q6_K, SP_TYPE_F16, SP_TYPE_F32}, 32000, "<unk>", 256, true},
    {"models/ref-qwen2-gpt2-q4_0.gguf", "qwen2", 51, 2, {SP_TYPE_Q4_0, SP_TYPE_F32}, 50257, "!", 256, false},
    {"vocab/ggml-vocab-llama-spm.gguf", "llama", 0, 0, {0}, 32000, "<unk>", 0, false},
    {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", 0, 0, {0}, 50257, "!", 0, false},
};

static bool str_eq(gguf_str s, const char *c) {
    return s.p && s.n == strlen(c) && memcmp(s.p, c, s.n) == 0;
}

/* Facts every valid GGUF must satisfy, whatever it holds. */
static void check_generic(const gguf_file *g, const char *path) {
    size_t size = gguf_file_size(g);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        CHECK(gguf_find_tensor(g, t->name) == t, "%s: find_tensor(%s)", path, t->name);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        CHECK(t->nbytes == row_size(t->type, t->ne[0]) * (size_t)rows, "%s: %s nbytes %zu", path, t->name,
              t->nbytes);
        CHECK(t->offset % gguf_alignment(g) == 0, "%s: %s offset", path, t->name);
        CHECK(t->n_dims >= 1 && t->n_dims <= 4, "%s: %s n_dims", path, t->name);
        const uint8_t *end = (const uint8_t *)t->data + t->nbytes;
        const uint8_t *start = (const uint8_t *)gguf_tensor_at(g, 0)->data - gguf_tensor_at(g, 0)->offset;
        CHECK((size_t)(end - start) <= size, "%s: %s past the end", path, t->name);
    }
    CHECK(gguf_find_tensor(g, "no.such.tensor") == NULL, "%s", path);
    CHECK(gguf_find_key(g, "no.such.key") == -1, "%s", path);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        CHECK(gguf_find_key(g, gguf_key(g, i)) == i, "%s: find_key(%s)", path, gguf_key(g, i));
        char fb[128];
        gguf_kv_format(g, i, fb, sizeof fb);
        CHECK(strlen(fb) > 0 && strlen(fb) < sizeof fb, "%s: format(%s)", path, gguf_key(g, i));
    }
}

static void test_reference_file(const ref_case *rc) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", t_ref_dir(), rc->file);
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (!g) return;
    CHECK(gguf_version(g) == 3, "version %u", gguf_version(g));
    CHECK(gguf_alignment(g) == 32, "alignment %zu", gguf_alignment(g));
    gguf_str s;
    CHECK(gguf_get_str(g, "general.architecture", &s) && str_eq(s, rc->arch), "arch");
    CHECK(gguf_n_tensors(g) == rc->n_tensors, "n_tensors %" PRId64, gguf_n_tensors(g));

    /* tensor types: exactly the listed set */
    bool seen[SP_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) seen[gguf_tensor_at(g, i)->type] = true;
    int n_seen = 0;
    for (int t = 0; t < SP_TYPE_COUNT; t++) n_seen += seen[t];
    CHECK(n_seen == rc->n_types, "%d distinct tensor types", n_seen);
    for (int k = 0; k < rc->n_types; k++) CHECK(seen[rc->types[k]], "type %d missing", rc->types[k]);

    /* vocabulary */
    gguf_vtype et;
    uint64_t n = 0;
    const void *data;
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data), "tokens");
    CHECK(et == SP_GGUF_STRING && n == rc->n_vocab, "tokens: type %d n %" PRIu64, et, n);
    CHECK(str_eq(gguf_arr_str(g, "tokenizer.ggml.tokens", 0), rc->tok0), "token 0");
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", n - 1).p != NULL, "last token");
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", n).p == NULL, "token n is out of range");
    CHECK(gguf_arr_str(g, "general.architecture", 0).p == NULL, "not an array");
    /* the string index agrees with a sequential walk */
    const uint8_t *p = data;
    bool walk_ok = true;
    for (uint64_t i = 0; i < n && walk_ok; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        gguf_str e = gguf_arr_str(g, "tokenizer.ggml.tokens", i);
        walk_ok = e.p == (const char *)p + 8 && e.n == len;
        p += 8 + len;
    }
    CHECK(walk_ok, "string index");
    uint32_t u;
    CHECK(!gguf_get_u32(g, "tokenizer.ggml.tokens", &u), "array as u32");
    CHECK(!gguf_get_str(g, "tokenizer.ggml.bos_token_id", &s), "u32 as string");
    int64_t bos = -1;
    CHECK(gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &bos) && bos == (rc->n_vocab == 32000 ? 1 : 50256),
          "bos %" PRId64, bos);
    char fb[256];
    int64_t ti = gguf_find_key(g, "tokenizer.ggml.tokens");
    gguf_kv_format(g, ti, fb, sizeof fb);
    char want[64];
    snprintf(want, sizeof want, "[string x %" PRIu64 ": ", rc->n_vocab);
    CHECK(strncmp(fb, want, strlen(want)) == 0, "format: %s", fb);

    if (rc->n_embd) {
        char key[64];
        snprintf(key, sizeof key, "%s.embedding_length", rc->arch);
        CHECK(gguf_get_u32(g, key, &u) && u == rc->n_embd, "%s", key);
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", rc->arch);
        float eps = 0;
        CHECK(gguf_get_f32(g, key, &eps) && (eps == 1e-5f || eps == 1e-6f), "eps %g", eps);
        CHECK(!gguf_get_u32(g, key, &u), "float as u32");
        const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
        CHECK(te && te->n_dims == 2 && te->ne[0] == rc->n_embd && te->ne[1] == (int64_t)rc->n_vocab,
              "token_embd shape");
        CHECK((gguf_find_tensor(g, "output.weight") == NULL) == rc->tied, "output.weight");
        snprintf(key, sizeof key, "%s.block_count", rc->arch);
        uint32_t n_layer = 0;
        CHECK(gguf_get_u32(g, key, &n_layer) && n_layer > 0, "block_count");
        for (uint32_t l = 0; l < n_layer; l++) {
            snprintf(key, sizeof key, "blk.%u.attn_q.weight", l);
            CHECK(gguf_find_tensor(g, key) != NULL, "%s", key);
        }
    }
    if (strstr(rc->file, "f16")) {
        /* a known value: spot-check that data points at the right bytes by
         * checking the f16 norm weights are finite and plausible */
        const gguf_tensor *t = gguf_find_tensor(g, "output_norm.weight");
        CHECK(t && t->type == SP_TYPE_F32 && t->ne[0] == 256, "output_norm");
        if (t) {
            float v;
            memcpy(&v, t->data, 4);
            CHECK(isfinite(v) && fabsf(v) < 100, "output_norm[0] = %g", v);
        }
    }
    check_generic(g, path);
    gguf_close(g);
}

/* Every *.gguf in the reference folders opens and is self-consistent. */
static void test_reference_glob(void) {
    const char *dirs[2] = {"models", "vocab"};
    int n_files = 0;
    for (int d = 0; d < 2; d++) {
        char pat[512];
        snprintf(pat, sizeof pat, "%s/%s/*.gguf", t_ref_dir(), dirs[d]);
        glob_t gl;
        if (glob(pat, 0, NULL, &gl) != 0) continue;
        for (size_t i = 0; i < gl.gl_pathc; i++) {
            char err[512];
            gguf_file *g = gguf_open(gl.gl_pathv[i], err, sizeof err);
            CHECK(g != NULL, "%s", err);
            if (g) {
                check_generic(g, gl.gl_pathv[i]);
                gguf_close(g);
            }
            n_files++;
        }
        globfree(&gl);
    }
    CHECK(n_files >= 6, "found %d reference GGUF files", n_files);
}

/* Copying the tokenizer of a real vocabulary reproduces every value byte for
 * byte (string arrays of 32000 entries included). */
static void test_copy_kv_real(void) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", t_ref_dir());
    gguf_file *src = gguf_open(path, err, sizeof err);
    CHECK(src != NULL, "%s", err);
    if (!src) return;
    gguf_writer *w = gguf_writer_create();
    gguf_copy_kv(w, src, "tokenizer.");
    const char *out = tmp_path("copy.gguf");
    CHECK(gguf_writer_write(w, out, err, sizeof err) == 0, "%s", err);
    gguf_writer_free(w);
    gguf_file *g = gguf_open(out, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (g) {
        int64_t n_tok = 0;
        for (int64_t i = 0; i < gguf_n_kv(src); i++)
            n_tok += strncmp(gguf_key(src, i), "tokenizer.", 10) == 0;
        CHECK(gguf_n_kv(g) == n_tok && n_tok == 10, "n_kv %" PRId64 " vs %" PRId64, gguf_n_kv(g), n_tok);
        for (int64_t i = 0; i < gguf_n_kv(g); i++) {
            const char *key = gguf_key(g, i);
            int64_t j = gguf_find_key(src, key);
            const void *a, *b;
            size_t na, nb;
            CHECK(j >= 0 && gguf_kv_type(src, j) == gguf_kv_type(g, i), "%s", key);
            if (j < 0) continue;
            gguf_kv_raw(src, j, &a, &na);
            gguf_kv_raw(g, i, &b, &nb);
            CHECK(na == nb && memcmp(a, b, na) == 0, "%s differs", key);
        }
        CHECK(str_eq(gguf_arr_str(g, "tokenizer.ggml.tokens", 31999),
                     "\xe7\xbb\x99"), "last token"); /* "给" in the Llama 2 vocab */
        gguf_close(g);
    }
    gguf_close(src);
}

/* ---- writer ----------------------------------------------------------- */

/* The writer produces exactly the bytes of the independent encoder. */
static void test_writer_bytes(void) {
    layout L;
    buf ref = build_valid(&L);
    gguf_writer *w = writer_for_valid();
    char err[512];
    const char *out = tmp_path("w.gguf");
    CHECK(gguf_writer_write(w, out, err, sizeof err) == 0, "%s", err);
    gguf_writer_free(w);
    size_t n = 0;
    char *got = t_read_file(out, &n);
    CHECK(got && n == ref.n, "size %zu vs %zu", n, ref.n);
    if (got && n == ref.n) {
        size_t i = 0;
        while (i < n && (uint8_t)got[i] == ref.p[i]) i++;
        CHECK(i == n, "first difference at byte %zu", i);
    }
    free(got);
    free(ref.p);
}

typedef struct {
    const char *name;
    tensor_type type;
    int n_dims;
    int64_t ne[4];
} tdesc;

static const tdesc round_tensors[] = {
    {"a.f32", SP_TYPE_F32, 2, {3, 2, 1, 1}},
    {"b.f16", SP_TYPE_F16, 1, {65, 1, 1, 1}},
    {"c.q8_0", SP_TYPE_Q8_0, 2, {64, 3, 1, 1}},
    {"d.q4_0", SP_TYPE_Q4_0, 3, {32, 2, 2, 1}},
    {"e.q4_k", SP_TYPE_Q4_K, 2, {256, 2, 1, 1}},
    {"f.q6_k", SP_TYPE_Q6_K, 4, {256, 1, 1, 2}},
    {"g.bf16", SP_TYPE_BF16, 1, {5, 1, 1, 1}},
    {"h.empty", SP_TYPE_Q8_0, 2, {32, 0, 1, 1}},
};
#define N_ROUND (sizeof round_tensors / sizeof round_tensors[0])

static uint8_t *tensor_bytes(const tdesc *d, size_t *n) {
    *n = row_size(d->type, d->ne[0]) * (size_t)(d->ne[1] * d->ne[2] * d->ne[3]);
    uint8_t *p = malloc(*n + 1);
    for (size_t i = 0; i < *n; i++) p[i] = (uint8_t)(i * 31 + (size_t)d->type * 17 + 3);
    return p;
}

/* Everything written reads back unchanged, with alignment 32 and 64, and
 * streamed writes (odd chunk sizes across tensor boundaries, mixed with
 * tensors that carry their data) give the same file. */
static void test_writer_round_trip(size_t alignment) {
    char err[512];
    gguf_writer *w = gguf_writer_create();
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 65000; int16_t i16 = -32000;
    uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 3.25f; bool bo = true;
    uint64_t u64 = UINT64_MAX; int64_t i64 = INT64_MIN; double f64 = 1e300;
    gguf_set_scalar(w, "v.u8", SP_GGUF_UINT8, &u8);
    gguf_set_scalar(w, "v.i8", SP_GGUF_INT8, &i8);
    gguf_set_scalar(w, "v.u16", SP_GGUF_UINT16, &u16);
    gguf_set_scalar(w, "v.i16", SP_GGUF_INT16, &i16);
    gguf_set_u32(w, "v.u32", u32);
    gguf_set_i32(w, "v.i32", i32);
    gguf_set_f32(w, "v.f32", f32);
    gguf_set_bool(w, "v.bool", bo);
    gguf_set_str(w, "v.str", "replaced");
    gguf_set_str(w, "v.str", "h\xc3\xa9llo \"world\"\n"); /* replaces, keeps position */
    gguf_set_u64(w, "v.u64", u64);
    gguf_set_scalar(w, "v.i64", SP_GGUF_INT64, &i64);
    gguf_set_scalar(w, "v.f64", SP_GGUF_FLOAT64, &f64);
    gguf_set_str(w, "v.empty", "");
    char longs[200];
    memset(longs, 'x', sizeof longs - 1);
    longs[sizeof longs - 1] = 0;
    gguf_set_str(w, "v.long", longs);
    int32_t ai[4] = {1, -2, 3, 4};
    gguf_set_arr(w, "a.i32", SP_GGUF_INT32, ai, 4);
    double ad[2] = {0.5, -1e-300};
    gguf_set_arr(w, "a.f64", SP_GGUF_FLOAT64, ad, 2);
    uint8_t ab[3] = {0, 1, 1};
    gguf_set_arr(w, "a.bool", SP_GGUF_BOOL, ab, 3);
    gguf_set_arr(w, "a.empty", SP_GGUF_UINT16, NULL, 0);
    gguf_str strs[4] = {{"x", 1}, {"", 0}, {"nul\0inside", 10}, {"last", 4}};
    gguf_set_arr_str(w, "a.str", strs, 4);
    /* [[u8 1 2], [[i16 -1]], [string "s"]] : three levels */
    buf nest = {0};
    b_u32(&nest, SP_GGUF_UINT8); b_u64(&nest, 2); b_u8(&nest, 1); b_u8(&nest, 2);
    b_u32(&nest, SP_GGUF_ARRAY); b_u64(&nest, 1);
    b_u32(&nest, SP_GGUF_INT16); b_u64(&nest, 1); b_u8(&nest, 0xff); b_u8(&nest, 0xff);
    b_u32(&nest, SP_GGUF_STRING); b_u64(&nest, 1); b_str(&nest, "s");
    gguf_set_arr(w, "a.nested", SP_GGUF_ARRAY, nest.p, 3);
    if (alignment != 32) gguf_set_u32(w, "general.alignment", (uint32_t)alignment);

    uint8_t *tdata[N_ROUND];
    size_t tn[N_ROUND];
    for (size_t i = 0; i < N_ROUND; i++) {
        tdata[i] = tensor_bytes(&round_tensors[i], &tn[i]);
        gguf_add_tensor(w, round_tensors[i].name, round_tensors[i].type, round_tensors[i].n_dims,
                           round_tensors[i].ne, tdata[i], tn[i]);
    }
    const char *out = tmp_path("round.gguf");
    CHECK(gguf_writer_write(w, out, err, sizeof err) == 0, "%s", err);
    gguf_writer_free(w);

    gguf_file *g = gguf_open(out, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (!g) goto done;
    CHECK(gguf_version(g) == 3 && gguf_alignment(g) == alignment, "alignment %zu", gguf_alignment(g));
    CHECK(gguf_n_kv(g) == 20 + (alignment != 32), "n_kv %" PRId64, gguf_n_kv(g));
    CHECK(strcmp(gguf_key(g, 8), "v.str") == 0, "replacing a key keeps its position");
    static const gguf_vtype want_types[] = {
        SP_GGUF_UINT8, SP_GGUF_INT8, SP_GGUF_UINT16, SP_GGUF_INT16, SP_GGUF_UINT32, SP_GGUF_INT32,
        SP_GGUF_FLOAT32, SP_GGUF_BOOL, SP_GGUF_STRING, SP_GGUF_UINT64, SP_GGUF_INT64, SP_GGUF_FLOAT64};
    for (int i = 0; i < 12; i++) CHECK(gguf_kv_type(g, i) == want_types[i], "type of kv %d", i);
    CHECK(gguf_kv_type(g, 1000) == SP_GGUF_TYPE_COUNT && gguf_key(g, -1) == NULL, "out of range");

    int64_t v;
    uint32_t u;
    float f;
    bool b;
    gguf_str s;
    CHECK(gguf_get_i64(g, "v.u8", &v) && v == 200, "u8");
    CHECK(gguf_get_u32(g, "v.u8", &u) && u == 200, "u8 as u32");
    CHECK(gguf_get_i64(g, "v.i8", &v) && v == -100, "i8");
    u = 12345;
    CHECK(!gguf_get_u32(g, "v.i8", &u) && u == 12345, "negative as u32 fails, out untouched");
    CHECK(gguf_get_i64(g, "v.u16", &v) && v == 65000, "u16");
    CHECK(gguf_get_i64(g, "v.i16", &v) && v == -32000, "i16");
    CHECK(gguf_get_u32(g, "v.u32", &u) && u == 4000000000u, "u32");
    CHECK(gguf_get_i64(g, "v.i32", &v) && v == -2000000000, "i32");
    CHECK(gguf_get_f32(g, "v.f32", &f) && f == 3.25f, "f32");
    CHECK(!gguf_get_i64(g, "v.f32", &v), "f32 as int");
    CHECK(gguf_get_bool(g, "v.bool", &b) && b, "bool");
    CHECK(!gguf_get_bool(g, "v.u8", &b), "u8 as bool");
    CHECK(gguf_get_str(g, "v.str", &s) && str_eq(s, "h\xc3\xa9llo \"world\"\n"), "str");
    CHECK(!gguf_get_i64(g, "v.u64", &v) && !gguf_get_u32(g, "v.u64", &u), "u64 max fits neither");
    CHECK(gguf_get_i64(g, "v.i64", &v) && v == INT64_MIN, "i64 min");
    CHECK(gguf_get_f32(g, "v.f64", &f) && isinf(f), "f64 1e300 -> inf f32");
    CHECK(gguf_get_str(g, "v.empty", &s) && s.n == 0, "empty string");
    CHECK(!gguf_get_str(g, "no.key", &s) && !gguf_get_i64(g, "no.key", &v), "absent");

    gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK(gguf_get_arr(g, "a.i32", &et, &n, &data) && et == SP_GGUF_INT32 && n == 4 &&
          memcmp(data, ai, sizeof ai) == 0, "a.i32");
    CHECK(gguf_get_arr(g, "a.f64", &et, &n, &data) && et == SP_GGUF_FLOAT64 && n == 2 &&
          memcmp(data, ad, sizeof ad) == 0, "a.f64");
    CHECK(gguf_get_arr(g, "a.bool", &et, &n, &data) && et == SP_GGUF_BOOL && n == 3 &&
          memcmp(data, ab, 3) == 0, "a.bool");
    CHECK(gguf_get_arr(g, "a.empty", &et, &n, &data) && et == SP_GGUF_UINT16 && n == 0, "a.empty");
    CHECK(gguf_get_arr(g, "a.str", &et, &n, &data) && et == SP_GGUF_STRING && n == 4, "a.str");
    for (int i = 0; i < 4; i++) {
        gguf_str e = gguf_arr_str(g, "a.str", (uint64_t)i);
        CHECK(e.p && e.n == strs[i].n && memcmp(e.p, strs[i].p, e.n) == 0, "a.str[%d]", i);
    }
    CHECK(gguf_get_arr(g, "a.nested", &et, &n, &data) && et == SP_GGUF_ARRAY && n == 3 &&
          memcmp(data, nest.p, nest.n) == 0, "a.nested");
    CHECK(!gguf_get_arr(g, "v.u8", &et, &n, &data), "scalar as array");

    /* formatting */
    static const struct { const char *key, *want; } fmts[] = {
        {"v.u8", "200"}, {"v.i8", "-100"}, {"v.i64", "-9223372036854775808"},
        {"v.u64", "18446744073709551615"}, {"v.f32", "3.25"}, {"v.bool", "true"},
        {"v.str", "\"h\xc3\xa9llo \\\"world\\\"\\n\""}, {"a.i32", "[i32 x 4: 1, -2, 3, 4]"},
        {"a.str", "[string x 4: \"x\", \"\", \"nul\\x00inside\", \"last\"]"}, {"a.nested", "[array x 3]"},
        {"a.empty", "[u16 x 0]"},
    };
    char fb[256];
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        gguf_kv_format(g, gguf_find_key(g, fmts[i].key), fb, sizeof fb);
        CHECK(strcmp(fb, fmts[i].want) == 0, "%s formats as %s, want %s", fmts[i].key, fb, fmts[i].want);
    }
    gguf_kv_format(g, gguf_find_key(g, "v.long"), fb, sizeof fb);
    CHECK(strlen(fb) < 80 && strstr(fb, "...") != NULL, "long string truncated: %s", fb);
    char tiny[8];
    gguf_kv_format(g, gguf_find_key(g, "a.str"), tiny, sizeof tiny);
    CHECK(strlen(tiny) == 7 && memcmp(tiny, "[string", 7) == 0, "small buffer: %s", tiny);

    CHECK(gguf_n_tensors(g) == (int64_t)N_ROUND, "n_tensors");
    for (size_t i = 0; i < N_ROUND; i++) {
        const tdesc *d = &round_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(g, d->name);
        CHECK(t && t == gguf_tensor_at(g, (int64_t)i), "%s", d->name);
        if (!t) continue;
        CHECK(t->type == d->type && t->n_dims == d->n_dims, "%s type/dims", d->name);
        CHECK(memcmp(t->ne, d->ne, sizeof t->ne) == 0, "%s shape", d->name);
        CHECK(t->nbytes == tn[i] && (tn[i] == 0 || memcmp(t->data, tdata[i], tn[i]) == 0), "%s data", d->name);
        CHECK(t->offset % alignment == 0, "%s offset %" PRIu64, d->name, t->offset);
    }
    check_generic(g, out);
    gguf_close(g);

    /* The same file, streamed: declare, begin, append in 7-byte chunks. */
    {
        size_t n_orig = 0;
        char *orig = t_read_file(out, &n_orig);
        gguf_writer *w2 = gguf_writer_create();
        gguf_file *src = gguf_open(out, err, sizeof err);
        CHECK(src != NULL, "%s", err);
        if (src) gguf_copy_kv(w2, src, NULL);
        size_t total = 0;
        for (size_t i = 0; i < N_ROUND; i++) {
            const tdesc *d = &round_tensors[i];
            if (i == 2) /* one tensor with its own data amid streamed ones */
                gguf_add_tensor(w2, d->name, d->type, d->n_dims, d->ne, tdata[i], tn[i]);
            else {
                gguf_add_tensor_info(w2, d->name, d->type, d->n_dims, d->ne);
                total += tn[i];
            }
        }
        uint8_t *all = malloc(total + 1);
        size_t pos = 0;
        for (size_t i = 0; i < N_ROUND; i++)
            if (i != 2) { memcpy(all + pos, tdata[i], tn[i]); pos += tn[i]; }
        const char *out2 = tmp_path("round2.gguf");
        int rc = gguf_writer_begin(w2, out2, err, sizeof err);
        CHECK(rc == 0, "%s", err);
        for (size_t off = 0; rc == 0 && off < total; off += 7) {
            rc = gguf_writer_append(w2, all + off, SP_MIN((size_t)7, total - off), err, sizeof err);
            CHECK(rc == 0, "%s", err);
        }
        CHECK(rc == 0 && gguf_writer_end(w2, err, sizeof err) == 0, "%s", err);
        gguf_writer_free(w2);
        size_t n2 = 0;
        char *again = t_read_file(out2, &n2);
        CHECK(orig && again && n2 == n_orig && memcmp(orig, again, n2) == 0, "streamed file differs");
        free(orig);
        free(again);
        free(all);
        gguf_close(src);
    }
done:
    for (size_t i = 0; i < N_ROUND; i++) free(tdata[i]);
    free(nest.p);
}

static void test_writer_round_trip_32(void) { test_writer_round_trip(32); }
static void test_writer_round_trip_64(void) { test_writer_round_trip(64); }

/* Misuse of the writer fails at write time with a message, and leaves no
 * partial file behind. */
static void test_writer_errors(void) {
    char err[512];
    int64_t ne[2] = {64, 2};
    uint8_t data[136] = {0};
    static const char *const want[] = {"got 100 bytes", "duplicate tensor name", "row length 33",
                                       "power of two", "unknown type"};
    for (int k = 0; k < 5; k++) {
        gguf_writer *w = gguf_writer_create();
        gguf_set_str(w, "general.architecture", "x");
        if (k == 0) gguf_add_tensor(w, "t", SP_TYPE_Q8_0, 2, ne, data, 100);
        if (k == 1) {
            gguf_add_tensor(w, "t", SP_TYPE_Q8_0, 2, ne, data, sizeof data);
            gguf_add_tensor(w, "t", SP_TYPE_Q8_0, 2, ne, data, sizeof data);
        }
        if (k == 2) { int64_t bad[1] = {33}; gguf_add_tensor_info(w, "t", SP_TYPE_Q8_0, 1, bad); }
        if (k == 3) gguf_set_u32(w, "general.alignment", 3);
        if (k == 4) gguf_add_tensor_info(w, "t", (tensor_type)200, 2, ne);
        const char *out = tmp_path("bad.gguf");
        unlink(out);
        err[0] = 0;
        CHECK(gguf_writer_write(w, out, err, sizeof err) == -1, "case %d wrote", k);
        CHECK(strstr(err, want[k]) != NULL, "case %d: %s", k, err);
        CHECK(access(out, F_OK) != 0, "case %d left a file", k);
        gguf_writer_free(w);
    }
    /* streaming: too little data, too much data, freed mid-way */
    for (int k = 0; k < 3; k++) {
        gguf_writer *w = gguf_writer_create();
        gguf_add_tensor_info(w, "t", SP_TYPE_Q8_0, 2, ne);
        const char *out = tmp_path("bad2.gguf");
        CHECK(gguf_writer_begin(w, out, err, sizeof err) == 0, "%s", err);
        if (k == 0) {
            CHECK(gguf_writer_append(w, data, 100, err, sizeof err) == 0, "%s", err);
            CHECK(gguf_writer_end(w, err, sizeof err) == -1 && strstr(err, "got 100 of its 136"), "%s", err);
        } else if (k == 1) {
            CHECK(gguf_writer_append(w, data, 100, err, sizeof err) == 0, "%s", err);
            uint8_t more[100] = {0};
            CHECK(gguf_writer_append(w, more, 100, err, sizeof err) == -1 && strstr(err, "beyond"), "%s", err);
        }
        gguf_writer_free(w);
        CHECK(access(out, F_OK) != 0, "streaming case %d left a file", k);
    }
    /* unwritable path */
    gguf_writer *w = gguf_writer_create();
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof err) == -1 &&
              strstr(err, "/nonexistent-dir/x.gguf"), "%s", err);
    gguf_writer_free(w);
}

/* ---- hostile inputs --------------------------------------------------- */

static void put_u32(buf *b, size_t off, uint32_t v) { memcpy(b->p + off, &v, 4); }
static void put_u64(buf *b, size_t off, uint64_t v) { memcpy(b->p + off, &v, 8); }

typedef struct {
    const char *name;
    void (*patch)(buf *b, const layout *L);
    const char *want; /* substring of the error; NULL: must open */
} hostile_case;

#define PATCH(nm, body) static void nm(buf *b, const layout *L) { (void)L; body; }
PATCH(p_magic, memcpy(b->p, "GGUG", 4))
PATCH(p_v1, put_u32(b, L->version, 1))
PATCH(p_v2, put_u32(b, L->version, 2))
PATCH(p_v99, put_u32(b, L->version, 99))
PATCH(p_vbig, put_u32(b, L->version, 0x03000000))
PATCH(p_nkv_huge, put_u64(b, L->n_kv, 1ull << 63))
PATCH(p_nkv_big, put_u64(b, L->n_kv, 1000))
PATCH(p_nkv_more, put_u64(b, L->n_kv, 11))
PATCH(p_nt_huge, put_u64(b, L->n_tensors, UINT64_MAX))
PATCH(p_nt_more, put_u64(b, L->n_tensors, 4))
PATCH(p_str_huge, put_u64(b, L->str_len, 1ull << 62))
PATCH(p_str_past, put_u64(b, L->str_len, b->n))
PATCH(p_arr_huge, put_u64(b, L->arr_len, 1ull << 61))
PATCH(p_arr_type, put_u32(b, L->arr_elem_type, 13))
PATCH(p_nested_type, put_u32(b, L->nested_inner_type, 77))
PATCH(p_key_huge, put_u64(b, L->key_len_b, 1ull << 40))
PATCH(p_key_empty, put_u64(b, L->key_len_b, 0))
PATCH(p_key_nul, b->p[L->key_b] = 0)
PATCH(p_dup_key, b->p[L->key_b] = 'a')
PATCH(p_vtype, put_u32(b, L->vtype_b, 13))
PATCH(p_vtype_huge, put_u32(b, L->vtype_b, 0xffffffffu))
PATCH(p_align0, put_u32(b, L->align_val, 0))
PATCH(p_align3, put_u32(b, L->align_val, 3))
PATCH(p_align_type, put_u32(b, L->align_vtype, SP_GGUF_INT32))
PATCH(p_align64, put_u32(b, L->align_val, 64))
PATCH(p_ndims0, put_u32(b, L->t_ndims[0], 0))
PATCH(p_ndims5, put_u32(b, L->t_ndims[0], 5))
PATCH(p_ne_neg, put_u64(b, L->t_ne[0][1], (uint64_t)-2))
PATCH(p_ne_huge, put_u64(b, L->t_ne[0][1], 1ull << 40))
PATCH(p_ne_overflow, { put_u64(b, L->t_ne[0][0], 1ull << 32); put_u64(b, L->t_ne[0][1], 1ull << 32); })
PATCH(p_ne_bytes_overflow, put_u64(b, L->t_ne[1][0], 1ull << 62))
PATCH(p_ne_block, put_u64(b, L->t_ne[0][0], 33))
PATCH(p_ne_zero, put_u64(b, L->t_ne[2][1], 0))
PATCH(p_type_200, put_u32(b, L->t_type[0], 200))
PATCH(p_type_huge, put_u32(b, L->t_type[1], 0x80000000u))
PATCH(p_off_past, put_u64(b, L->t_offset[2], 224))
PATCH(p_off_huge, put_u64(b, L->t_offset[2], UINT64_MAX - 31))
PATCH(p_off_unaligned, put_u64(b, L->t_offset[1], 161))
PATCH(p_overlap, put_u64(b, L->t_offset[1], 128))
PATCH(p_overlap_order, put_u64(b, L->t_offset[2], 0))
PATCH(p_dup_tensor, b->p[L->t_name[1] + 8 + 6] = 'a')
PATCH(p_tname_nul, b->p[L->t_name[1] + 8 + 6] = 0)
PATCH(p_tname_empty, put_u64(b, L->t_name[1], 0))
PATCH(p_tname_huge, put_u64(b, L->t_name[1], UINT64_MAX))

static const hostile_case hostile_cases[] = {
    {"wrong magic", p_magic, "bad magic"},
    {"version 1", p_v1, "GGUF version 1 is not supported"},
    {"version 2 reads", p_v2, NULL},
    {"version 99", p_v99, "unsupported GGUF version 99"},
    {"big-endian", p_vbig, "big-endian"},
    {"n_kv 2^63", p_nkv_huge, "n_kv = 9223372036854775808 exceeds file size"},
    {"n_kv 1000", p_nkv_big, "exceeds file size"},
    {"n_kv +1", p_nkv_more, ""},
    {"n_tensors huge", p_nt_huge, "n_tensors = 18446744073709551615 exceeds file size"},
    {"n_tensors +1", p_nt_more, "tensor info 3"},
    {"string length 2^62", p_str_huge, "exceeds the file size"},
    {"string past end", p_str_past, "truncated: kv 4 ('test.str')"},
    {"array length 2^61", p_arr_huge, "array length 2305843009213693952 exceeds the file size"},
    {"array element type 13", p_arr_type, "unknown array element type 13"},
    {"nested element type 77", p_nested_type, "unknown array element type 77"},
    {"key length 2^40", p_key_huge, "key length 1099511627776 exceeds the limit"},
    {"empty key", p_key_empty, "empty key"},
    {"NUL in key", p_key_nul, "NUL"},
    {"duplicate key", p_dup_key, "duplicate key 'test.a'"},
    {"value type 13", p_vtype, "unknown value type 13"},
    {"value type 2^32-1", p_vtype_huge, "unknown value type 4294967295"},
    {"alignment 0", p_align0, "general.alignment = 0"},
    {"alignment 3", p_align3, "general.alignment = 3"},
    {"alignment i32", p_align_type, "must be u32"},
    {"alignment 64", p_align64, "offset 160 is not a multiple of the alignment 64"},
    {"n_dims 0", p_ndims0, "has 0 dimensions"},
    {"n_dims 5", p_ndims5, "has 5 dimensions"},
    {"negative ne", p_ne_neg, "negative dimension ne[1] = -2"},
    {"huge ne", p_ne_huge, "extends past the end"},
    {"ne product overflow", p_ne_overflow, "overflows 64 bits"},
    {"byte size overflow", p_ne_bytes_overflow, "byte size overflows"},
    {"row not a block multiple", p_ne_block, "row length 33 is not a multiple of the block size 32"},
    {"zero-sized tensor reads", p_ne_zero, NULL},
    {"tensor type 200", p_type_200, "tensor 'blk.0.a' has unknown type 200"},
    {"tensor type 2^31", p_type_huge, "has unknown type 2147483648"},
    {"offset past end", p_off_past, "tensor 'blk.0.c' (offset 224, 64 bytes) extends past the end"},
    {"offset near 2^64", p_off_huge, "extends past the end"},
    {"unaligned offset", p_off_unaligned, "offset 161 is not a multiple of the alignment 32"},
    {"overlapping tensors", p_overlap, "tensors 'blk.0.a' and 'blk.0.b' overlap"},
    {"overlap out of order", p_overlap_order, "overlap"},
    {"duplicate tensor name", p_dup_tensor, "duplicate tensor name 'blk.0.a'"},
    {"NUL in tensor name", p_tname_nul, "NUL"},
    {"empty tensor name", p_tname_empty, "empty tensor name"},
    {"tensor name length huge", p_tname_huge, "exceeds the limit"},
};

static void test_hostile(const hostile_case *hc) {
    layout L;
    buf b = build_valid(&L);
    hc->patch(&b, &L);
    const char *path = tmp_path("hostile.gguf");
    CHECK(write_bytes(path, b.p, b.n) == 0, "write");
    char err[512] = "";
    gguf_file *g = gguf_open(path, err, sizeof err);
    if (hc->want) {
        CHECK(g == NULL, "opened");
        CHECK(strstr(err, hc->want) != NULL, "error '%s' lacks '%s'", err, hc->want);
        CHECK(strncmp(err, path, strlen(path)) == 0, "error does not name the file: %s", err);
    } else {
        CHECK(g != NULL, "%s", err);
        if (g) check_generic(g, path);
    }
    gguf_close(g);
    free(b.p);
}

/* The valid file opens and shows what was encoded. */
static void test_valid_small(void) {
    layout L;
    buf b = build_valid(&L);
    const char *path = tmp_path("valid.gguf");
    write_bytes(path, b.p, b.n);
    char err[512];
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (g) {
        CHECK(gguf_n_kv(g) == 10 && gguf_n_tensors(g) == 3, "counts");
        CHECK(gguf_file_size(g) == b.n, "size");
        const gguf_tensor *t = gguf_find_tensor(g, "blk.0.c");
        CHECK(t && t->type == SP_TYPE_F16 && t->ne[0] == 16 && t->ne[1] == 2 && t->ne[2] == 1 &&
              t->offset == 192 && t->nbytes == 64 &&
              (const uint8_t *)t->data == (const uint8_t *)gguf_tensor_at(g, 0)->data + 192, "blk.0.c");
        CHECK(t && memcmp(t->data, t2_data, 64) == 0, "blk.0.c data");
        CHECK(memcmp(gguf_find_tensor(g, "blk.0.a")->data, b.p + L.data_off, 136) == 0, "blk.0.a data");
        CHECK(str_eq(gguf_arr_str(g, "test.strs", 2), "ccc"), "strs[2]");
        CHECK(str_eq(gguf_arr_str(g, "test.strs", 1), ""), "strs[1]");
        check_generic(g, path);
        gguf_close(g);
    }
    free(b.p);
}

/* Every proper prefix of the valid file is rejected with a message. */
static void test_truncations(void) {
    layout L;
    buf b = build_valid(&L);
    const char *path = tmp_path("trunc.gguf");
    int opened = 0, silent = 0;
    for (size_t len = 0; len < b.n; len++) {
        write_bytes(path, b.p, len);
        char err[512] = "";
        gguf_file *g = gguf_open(path, err, sizeof err);
        if (g) {
            opened++;
            gguf_close(g);
        } else if (!strstr(err, path) || (!strstr(err, "truncated") && !strstr(err, "exceeds") &&
                                          !strstr(err, "past the end"))) {
            if (silent++ < 3) fprintf(stderr, "  length %zu: %s\n", len, err);
        }
    }
    CHECK(opened == 0, "%d truncated files opened", opened);
    CHECK(silent == 0, "%d truncations without a truncation message", silent);
    free(b.p);
}

/* Seeded random mutations never crash: open either fails with a message or
 * succeeds and every accessor stays inside the mapping. */
static uint64_t rng_state = SP_GOLDEN64;
static uint64_t rng(void) { return splitmix64(&rng_state); }

static void exercise(const gguf_file *g) {
    char fb[160];
    volatile uint64_t sink = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_key(g, i);
        gguf_kv_format(g, i, fb, sizeof fb);
        int64_t v; uint32_t u; float f; bool b; gguf_str s;
        gguf_get_i64(g, k, &v); gguf_get_u32(g, k, &u); gguf_get_f32(g, k, &f);
        gguf_get_bool(g, k, &b);
        if (gguf_get_str(g, k, &s) && s.n) sink += (uint8_t)s.p[s.n - 1];
        gguf_vtype et; uint64_t n; const void *data;
        if (gguf_get_arr(g, k, &et, &n, &data) && et == SP_GGUF_STRING)
            for (uint64_t j = 0; j < n; j++) {
                gguf_str e = gguf_arr_str(g, k, j);
                if (e.n) sink += (uint8_t)e.p[0] + (uint8_t)e.p[e.n - 1];
            }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) != t) abort();
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
}

#ifndef GGUF_MUTATIONS /* raise for a longer soak: -DGGUF_MUTATIONS=1000000 */
#define GGUF_MUTATIONS 4000
#endif

static void test_random_mutations(void) {
    layout L;
    buf valid = build_valid(&L);
    buf b = {0};
    b_bytes(&b, valid.p, valid.n);
    const char *path = tmp_path("mut.gguf");
    int opened = 0, failed = 0, no_msg = 0;
    static const uint64_t interesting[] = {0, 1, 2, 4, 5, 13, 31, 32, 33, 255, 0x7fffffff, 0x80000000u,
                                           0xffffffffu, 1ull << 32, 1ull << 62, 1ull << 63, UINT64_MAX};
    for (int it = 0; it < GGUF_MUTATIONS; it++) {
        memcpy(b.p, valid.p, valid.n);
        size_t n = valid.n;
        int n_mut = 1 + (int)(rng() % 4);
        for (int m = 0; m < n_mut && n > 0; m++) {
            uint64_t r = rng();
            size_t pos = (size_t)(rng() % n);
            switch (r % 5) {
            case 0: b.p[pos] = (uint8_t)(r >> 8); break;
            case 1: b.p[pos] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
            case 2: if (pos + 8 <= n) put_u64(&b, pos, interesting[(r >> 8) % 17]); break;
            case 3: if (pos + 4 <= n) put_u32(&b, pos, (uint32_t)interesting[(r >> 8) % 17]); break;
            case 4: n = pos; break; /* truncate */
            }
        }
        write_bytes(path, b.p, n);
        char err[512] = "";
        gguf_file *g = gguf_open(path, err, sizeof err);
        if (g) {
            opened++;
            exercise(g);
            gguf_close(g);
        } else {
            failed++;
            if (!err[0] || !strstr(err, path)) no_msg++;
        }
    }
    CHECK(no_msg == 0, "%d failures without a message naming the file", no_msg);
    CHECK(opened > 0 && failed > 0, "opened %d failed %d", opened, failed);
    free(b.p);
    free(valid.p);
}

/* Deep nesting is rejected (not a stack overflow); a missing file and a
 * directory fail with messages. */
static void test_misc_open_errors(void) {
    buf b = {0};
    b_bytes(&b, "GGUF", 4); b_u32(&b, 3); b_u64(&b, 0); b_u64(&b, 1);
    b_kv(&b, "deep", SP_GGUF_ARRAY);
    for (int i = 0; i < 100; i++) { b_u32(&b, SP_GGUF_ARRAY); b_u64(&b, 1); }
    b_u32(&b, SP_GGUF_UINT8); b_u64(&b, 0);
    const char *path = tmp_path("deep.gguf");
    write_bytes(path, b.p, b.n);
    char err[512] = "";
    gguf_file *g = gguf_open(path, err, sizeof err);
    CHECK(!g && strstr(err, "nested deeper"), "%s", err);
    gguf_close(g);
    free(b.p);

    /* a vocab-style file: kvs only, no padding after the header */
    buf v = {0};
    b_bytes(&v, "GGUF", 4); b_u32(&v, 3); b_u64(&v, 0); b_u64(&v, 1);
    b_kv(&v, "k", SP_GGUF_UINT8); b_u8(&v, 9);
    write_bytes(path, v.p, v.n);
    g = gguf_open(path, err, sizeof err);
    CHECK(g && gguf_n_tensors(g) == 0 && gguf_n_kv(g) == 1, "%s", err);
    gguf_close(g);
    free(v.p);

    g = gguf_open(tmp_path("does-not-exist.gguf"), err, sizeof err);
    CHECK(!g && strstr(err, "cannot open") && strstr(err, "does-not-exist.gguf"), "%s", err);
    g = gguf_open(tmpdir, err, sizeof err);
    CHECK(!g && strstr(err, "not a regular file"), "%s", err);
}

static void cleanup_tmp(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

int main(void) {
    const char *td = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_gguf.XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    for (size_t i = 0; i < sizeof ref_cases / sizeof ref_cases[0]; i++)
        RUN_NAMED(test_reference_file, &ref_cases[i], ref_cases[i].file);
    RUN(test_reference_glob);
    RUN(test_copy_kv_real);
    RUN(test_writer_bytes);
    RUN(test_writer_round_trip_32);
    RUN(test_writer_round_trip_64);
    RUN(test_writer_errors);
    RUN(test_valid_small);
    for (size_t i = 0; i < sizeof hostile_cases / sizeof hostile_cases[0]; i++)
        RUN_NAMED(test_hostile, &hostile_cases[i], hostile_cases[i].name);
    RUN(test_truncations);
    RUN(test_random_mutations);
    RUN(test_misc_open_errors);
    cleanup_tmp();
    TEST_END();
}
