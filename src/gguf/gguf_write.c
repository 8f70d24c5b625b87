/* gguf_write.c: the GGUF writer (version 3, little-endian).
 *
 * Metadata is kept in memory as (key, type, encoded value bytes), so every
 * value type, including arrays of strings and nested arrays copied from a
 * reader, is written back byte for byte. Tensors either carry their data
 * (gguf_add_tensor copies it) or are only declared and streamed by the
 * caller after the header is written (gguf_add_tensor_info + begin /
 * append / end), so a multi-gigabyte model never has to sit in memory.
 *
 * The layout is what llama.cpp writes: header, kvs, tensor infos, zero
 * padding to the alignment, then each tensor's data followed by zero padding
 * to the alignment; tensor offsets are the running padded sizes.
 *
 * Setters cannot fail visibly (their signatures are void): the first bad
 * argument or allocation failure is remembered and reported by begin/write.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

#include "common.h"

typedef struct {
    char *key;
    gguf_vtype type;
    uint8_t *raw; /* encoded value (after the type id) */
    size_t n;
} wkv;

typedef struct {
    char *name;
    tensor_type type;
    int n_dims;
    int64_t ne[SP_GGUF_MAX_DIMS];
    size_t nbytes;
    uint8_t *data; /* NULL: streamed by the caller */
    uint64_t offset;
} wtensor;

struct gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    bool failed;
    char err[256]; /* first deferred error */

    /* streaming state, between begin and end */
    FILE *f;
    char *path;
    size_t alignment;
    size_t cur;          /* tensor whose data comes next */
    uint64_t cur_done;   /* bytes of it written so far */
};

static const size_t scalar_size[SP_GGUF_TYPE_COUNT] = {
    [SP_GGUF_UINT8] = 1,   [SP_GGUF_INT8] = 1,   [SP_GGUF_UINT16] = 2, [SP_GGUF_INT16] = 2,
    [SP_GGUF_UINT32] = 4,  [SP_GGUF_INT32] = 4,  [SP_GGUF_FLOAT32] = 4, [SP_GGUF_BOOL] = 1,
    [SP_GGUF_UINT64] = 8,  [SP_GGUF_INT64] = 8,  [SP_GGUF_FLOAT64] = 8,
};

static void defer_err(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void defer_err(gguf_writer *w, const char *fmt, ...) {
    if (w->failed) return; /* keep the first: later ones are often consequences */
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

gguf_writer *gguf_writer_create(void) { return calloc(1, sizeof(gguf_writer)); }

static void abandon_file(gguf_writer *w) {
    if (w->f) {
        fclose(w->f);
        w->f = NULL;
        unlink(w->path);
    }
    free(w->path);
    w->path = NULL;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    abandon_file(w);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].raw);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->ts[i].name);
        free(w->ts[i].data);
    }
    free(w->kvs);
    free(w->ts);
    free(w);
}

static bool check_open_for_edits(gguf_writer *w, const char *what) {
    if (w->f) {
        defer_err(w, "%s: the header was already written", what);
        return false;
    }
    return true;
}

/* Stores an encoded value under key, taking ownership of raw (freed on
 * failure). Replaces an existing key in place so the order stays stable. */
static void put_raw(gguf_writer *w, const char *key, gguf_vtype type, uint8_t *raw, size_t n) {
    if (!key || !*key) {
        defer_err(w, "a key is empty");
        free(raw);
        return;
    }
    if (!check_open_for_edits(w, key)) {
        free(raw);
        return;
    }
    if (!raw) {
        defer_err(w, "%s: out of memory", key);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].raw);
            w->kvs[i].type = type;
            w->kvs[i].raw = raw;
            w->kvs[i].n = n;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *k = realloc(w->kvs, cap * sizeof *k);
        if (!k) {
            defer_err(w, "%s: out of memory", key);
            free(raw);
            return;
        }
        w->kvs = k;
        w->cap_kv = cap;
    }
    char *kc = strdup(key);
    if (!kc) {
        defer_err(w, "%s: out of memory", key);
        free(raw);
        return;
    }
    w->kvs[w->n_kv++] = (wkv){kc, type, raw, n};
}

static uint8_t *dup_bytes(const void *p, size_t n) {
    uint8_t *r = malloc(n ? n : 1);
    if (r && n) memcpy(r, p, n);
    return r;
}

void gguf_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v) {
    if ((unsigned)type >= SP_GGUF_TYPE_COUNT || type == SP_GGUF_STRING || type == SP_GGUF_ARRAY) {
        defer_err(w, "%s: gguf_set_scalar with non-scalar type %d", key ? key : "?", (int)type);
        return;
    }
    uint8_t b;
    if (type == SP_GGUF_BOOL) {
        b = *(const bool *)v ? 1 : 0;
        v = &b;
    }
    put_raw(w, key, type, dup_bytes(v, scalar_size[type]), scalar_size[type]);
}

void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) { gguf_set_scalar(w, key, SP_GGUF_UINT32, &v); }
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v) { gguf_set_scalar(w, key, SP_GGUF_INT32, &v); }
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) { gguf_set_scalar(w, key, SP_GGUF_UINT64, &v); }
void gguf_set_f32(gguf_writer *w, const char *key, float v) { gguf_set_scalar(w, key, SP_GGUF_FLOAT32, &v); }
void gguf_set_bool(gguf_writer *w, const char *key, bool v) { gguf_set_scalar(w, key, SP_GGUF_BOOL, &v); }

void gguf_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        defer_err(w, "%s: string value is NULL", key ? key : "?");
        return;
    }
    uint64_t len = strlen(v);
    uint8_t *raw = malloc(8 + len);
    if (raw) {
        memcpy(raw, &len, 8);
        memcpy(raw + 8, v, len);
    }
    put_raw(w, key, SP_GGUF_STRING, raw, 8 + len);
}

/* Size of the packed encoding of n elements of type t at p. The caller
 * vouches that the encoding is valid (it is documented as such). */
static size_t packed_size(gguf_vtype t, const uint8_t *p, uint64_t n) {
    if (t != SP_GGUF_STRING && t != SP_GGUF_ARRAY) return (size_t)n * scalar_size[t];
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (t == SP_GGUF_STRING) {
            uint64_t len;
            memcpy(&len, p + off, 8);
            off += 8 + (size_t)len;
        } else {
            uint32_t et;
            uint64_t m;
            memcpy(&et, p + off, 4);
            memcpy(&m, p + off + 4, 8);
            off += 12 + packed_size((gguf_vtype)et, p + off + 12, m);
        }
    }
    return off;
}

void gguf_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data,
                     uint64_t n) {
    if ((unsigned)elem_type >= SP_GGUF_TYPE_COUNT) {
        defer_err(w, "%s: unknown array element type %d", key ? key : "?", (int)elem_type);
        return;
    }
    if (n && !data) {
        defer_err(w, "%s: array data is NULL", key ? key : "?");
        return;
    }
    size_t body = n ? packed_size(elem_type, data, n) : 0;
    uint8_t *raw = malloc(12 + body);
    if (raw) {
        uint32_t et = (uint32_t)elem_type;
        memcpy(raw, &et, 4);
        memcpy(raw + 4, &n, 8);
        if (body) memcpy(raw + 12, data, body);
    }
    put_raw(w, key, SP_GGUF_ARRAY, raw, 12 + body);
}

void gguf_set_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n) {
    size_t body = 0;
    for (uint64_t i = 0; i < n; i++) body += 8 + (size_t)v[i].n;
    uint8_t *raw = malloc(12 + body);
    if (raw) {
        uint32_t et = SP_GGUF_STRING;
        memcpy(raw, &et, 4);
        memcpy(raw + 4, &n, 8);
        size_t off = 12;
        for (uint64_t i = 0; i < n; i++) {
            memcpy(raw + off, &v[i].n, 8);
            if (v[i].n) memcpy(raw + off + 8, v[i].p, (size_t)v[i].n);
            off += 8 + (size_t)v[i].n;
        }
    }
    put_raw(w, key, SP_GGUF_ARRAY, raw, 12 + body);
}

void gguf_copy_kv(gguf_writer *w, const gguf_file *src, const char *prefix) {
    size_t plen = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_key(src, i);
        if (plen && strncmp(key, prefix, plen) != 0) continue;
        const void *p;
        size_t n;
        if (!gguf_kv_raw(src, i, &p, &n)) continue;
        put_raw(w, key, gguf_kv_type(src, i), dup_bytes(p, n), n);
    }
}

/* Declares a tensor; returns it, or NULL after recording an error. */
static wtensor *new_tensor(gguf_writer *w, const char *name, tensor_type type, int n_dims,
                           const int64_t *ne) {
    if (!name || !*name) {
        defer_err(w, "a tensor name is empty");
        return NULL;
    }
    if (!check_open_for_edits(w, name)) return NULL;
    const type_traits *tr = type_info((int)type);
    if (!tr || tr->blck <= 0) {
        defer_err(w, "tensor '%s': unknown type %d", name, (int)type);
        return NULL;
    }
    if (n_dims < 1 || n_dims > SP_GGUF_MAX_DIMS) {
        defer_err(w, "tensor '%s': %d dimensions (must be 1..%d)", name, n_dims, SP_GGUF_MAX_DIMS);
        return NULL;
    }
    int64_t nelem = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0 || __builtin_mul_overflow(nelem, ne[d], &nelem)) {
            defer_err(w, "tensor '%s': bad dimension ne[%d] = %" PRId64, name, d, ne[d]);
            return NULL;
        }
    }
    if (ne[0] % tr->blck != 0) {
        defer_err(w, "tensor '%s': row length %" PRId64 " is not a multiple of the block size %" PRId64
                     " of %s", name, ne[0], tr->blck, tr->name);
        return NULL;
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)(nelem / tr->blck), (uint64_t)tr->block_bytes, &nbytes) ||
        nbytes > SIZE_MAX / 2) {
        defer_err(w, "tensor '%s': too large", name);
        return NULL;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->ts[i].name, name) == 0) {
            defer_err(w, "duplicate tensor name '%s'", name);
            return NULL;
        }
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->ts, cap * sizeof *t);
        if (!t) {
            defer_err(w, "tensor '%s': out of memory", name);
            return NULL;
        }
        w->ts = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->ts[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        defer_err(w, "tensor '%s': out of memory", name);
        return NULL;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < SP_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = (size_t)nbytes;
    w->n_t++;
    return t;
}

void gguf_add_tensor(gguf_writer *w, const char *name, tensor_type type, int n_dims,
                        const int64_t *ne, const void *data, size_t nbytes) {
    wtensor *t = new_tensor(w, name, type, n_dims, ne);
    if (!t) return;
    if (nbytes != t->nbytes) {
        defer_err(w, "tensor '%s': got %zu bytes of data, its shape and type need %zu", name, nbytes,
                  t->nbytes);
        return;
    }
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->data) {
        defer_err(w, "tensor '%s': out of memory", name);
        return;
    }
    if (nbytes) memcpy(t->data, data, nbytes);
}

void gguf_add_tensor_info(gguf_writer *w, const char *name, tensor_type type, int n_dims,
                             const int64_t *ne) {
    new_tensor(w, name, type, n_dims, ne);
}

/* ---- output ----------------------------------------------------------- */

static bool out(gguf_writer *w, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, w->f) == n;
}

static bool out_zeros(gguf_writer *w, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t m = SP_MIN(n, sizeof zeros);
        if (!out(w, zeros, m)) return false;
        n -= m;
    }
    return true;
}

static bool out_u32(gguf_writer *w, uint32_t v) { return out(w, &v, 4); }
static bool out_u64(gguf_writer *w, uint64_t v) { return out(w, &v, 8); }
static bool out_str(gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    return out_u64(w, n) && out(w, s, n);
}

static size_t pad_to(uint64_t n, size_t a) { return (size_t)((a - n % a) % a); }

static int io_fail(gguf_writer *w, char *err, size_t errlen) {
    seterr(err, errlen, "%s: write failed: %s", w->path, strerror(errno ? errno : EIO));
    abandon_file(w);
    return -1;
}

int gguf_writer_begin(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (w->f) {
        seterr(err, errlen, "%s: the writer is already writing %s", path, w->path);
        return -1;
    }
    if (w->failed) {
        seterr(err, errlen, "%s: %s", path, w->err);
        return -1;
    }
    /* general.alignment: honoured when the caller set it (as u32, which is
     * the only type readers accept). */
    w->alignment = 32;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment") != 0) continue;
        uint32_t a = 0;
        if (w->kvs[i].type == SP_GGUF_UINT32) memcpy(&a, w->kvs[i].raw, 4);
        if (w->kvs[i].type != SP_GGUF_UINT32 || a == 0 || (a & (a - 1)) != 0) {
            seterr(err, errlen, "%s: general.alignment must be a u32 non-zero power of two", path);
            return -1;
        }
        w->alignment = a;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->ts[i].offset = off;
        off += w->ts[i].nbytes + pad_to(w->ts[i].nbytes, w->alignment);
    }

    w->path = strdup(path);
    if (!w->path) {
        seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        seterr(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        w->path = NULL;
        return -1;
    }
    /* Large writes go straight through; small header fields are batched. */
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    errno = 0;
    bool ok = out(w, "GGUF", 4) && out_u32(w, 3) && out_u64(w, w->n_t) && out_u64(w, w->n_kv);
    for (size_t i = 0; ok && i < w->n_kv; i++)
        ok = out_str(w, w->kvs[i].key) && out_u32(w, w->kvs[i].type) && out(w, w->kvs[i].raw, w->kvs[i].n);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        ok = out_str(w, t->name) && out_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; ok && d < t->n_dims; d++) ok = out_u64(w, (uint64_t)t->ne[d]);
        ok = ok && out_u32(w, (uint32_t)t->type) && out_u64(w, t->offset);
    }
    long pos = ok ? ftell(w->f) : -1;
    ok = ok && pos >= 0 && out_zeros(w, pad_to((uint64_t)pos, w->alignment));
    if (!ok) return io_fail(w, err, errlen);
    w->cur = 0;
    w->cur_done = 0;
    return 0;
}

/* Writes every tensor that is complete or carries its own data, up to the
 * next streamed tensor still waiting for bytes. */
static bool flush_ready(gguf_writer *w) {
    while (w->cur < w->n_t) {
        wtensor *t = &w->ts[w->cur];
        if (t->data) {
            if (!out(w, t->data, t->nbytes)) return false;
        } else if (w->cur_done < t->nbytes) {
            return true;
        }
        if (!out_zeros(w, pad_to(t->nbytes, w->alignment))) return false;
        w->cur++;
        w->cur_done = 0;
    }
    return true;
}

int gguf_writer_append(gguf_writer *w, const void *data, size_t n, char *err, size_t errlen) {
    if (!w->f) {
        seterr(err, errlen, "gguf_writer_append: no file is being written");
        return -1;
    }
    const uint8_t *p = data;
    errno = 0;
    while (n) {
        if (!flush_ready(w)) return io_fail(w, err, errlen);
        if (w->cur >= w->n_t) {
            seterr(err, errlen, "%s: %zu bytes of data beyond the last tensor", w->path, n);
            abandon_file(w);
            return -1;
        }
        wtensor *t = &w->ts[w->cur];
        size_t m = (size_t)SP_MIN((uint64_t)n, t->nbytes - w->cur_done);
        if (!out(w, p, m)) return io_fail(w, err, errlen);
        w->cur_done += m;
        p += m;
        n -= m;
    }
    if (!flush_ready(w)) return io_fail(w, err, errlen);
    return 0;
}

int gguf_writer_end(gguf_writer *w, char *err, size_t errlen) {
    if (!w->f) {
        seterr(err, errlen, "gguf_writer_end: no file is being written");
        return -1;
    }
    if (w->failed) { /* a setter was misused while streaming */
        seterr(err, errlen, "%s: %s", w->path, w->err);
        abandon_file(w);
        return -1;
    }
    errno = 0;
    if (!flush_ready(w)) return io_fail(w, err, errlen);
    if (w->cur < w->n_t) {
        const wtensor *t = &w->ts[w->cur];
        seterr(err, errlen, "%s: tensor '%s' got %" PRIu64 " of its %zu bytes", w->path, t->name,
                  w->cur_done, t->nbytes);
        abandon_file(w);
        return -1;
    }
    if (fflush(w->f) != 0 || ferror(w->f)) return io_fail(w, err, errlen);
    FILE *f = w->f;
    w->f = NULL;
    if (fclose(f) != 0) {
        seterr(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
        unlink(w->path);
        free(w->path);
        w->path = NULL;
        return -1;
    }
    free(w->path);
    w->path = NULL;
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (gguf_writer_begin(w, path, err, errlen) != 0) return -1;
    return gguf_writer_end(w, err, errlen);
}
