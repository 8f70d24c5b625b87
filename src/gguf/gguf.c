/* gguf.c: the GGUF reader (versions 2 and 3).
 *
 * The file is mapped read-only and parsed once at open. Every read of the
 * header goes through a bounds-checked cursor, and every count is compared
 * with what the rest of the file could possibly hold before anything is
 * allocated for it, so a corrupt or hostile file fails fast with a message
 * and never makes us read outside the mapping or allocate absurd amounts.
 * After open, the getters only use offsets that were validated here.
 *
 * Layout (little-endian):
 *   "GGUF" u32 version u64 n_tensors u64 n_kv
 *   n_kv x { string key, u32 vtype, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   padding to general.alignment, then the data section (tensor offsets are
 *   relative to its start).
 * string = u64 length + bytes; array = u32 elem vtype + u64 n + elements.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

/* Names longer than this are not keys or tensor names but garbage: the spec
 * caps keys at 65535 bytes and llama.cpp caps tensor names at 63. */
#define SP_GGUF_MAX_NAME 65535u
/* Arrays of arrays are legal but nobody nests them deeply; the bound keeps
 * the recursive validation from exhausting the stack on a hostile file. */
#define SP_GGUF_MAX_NEST 16
/* The smallest possible encodings, used to bound counts by the file size
 * before allocating: a kv is key length + >=1 key byte + vtype + >=1 value
 * byte; a tensor info is name length + >=1 byte + n_dims + one ne + type +
 * offset. */
#define SP_GGUF_MIN_KV 14u
#define SP_GGUF_MIN_TINFO 33u

typedef struct {
    char *key;               /* NUL-terminated copy */
    gguf_vtype type;
    uint64_t val_off;        /* value bytes in the file (after the vtype) */
    uint64_t val_len;
    /* arrays */
    gguf_vtype arr_type;
    uint64_t arr_n;
    uint64_t arr_data_off;   /* first element */
    uint64_t *str_off;       /* string arrays: file offset of each element */
} gguf_kv;

struct gguf_file {
    char *path;
    const uint8_t *base;
    size_t size;
    gguf_file_id id;     /* fstat of the descriptor that was mapped */
    uint32_t version;
    size_t alignment;
    uint64_t data_off;

    int64_t n_kv;
    gguf_kv *kvs;
    int64_t n_tensors;
    gguf_tensor *tensors;

    /* open-addressing hash tables of index + 1 (0 = empty slot) */
    uint64_t *kv_hash, *t_hash;
    size_t kv_hash_cap, t_hash_cap; /* powers of two */
};

/* ---- small helpers ---------------------------------------------------- */

static const size_t vtype_size[SP_GGUF_TYPE_COUNT] = {
    [SP_GGUF_UINT8] = 1,   [SP_GGUF_INT8] = 1,    [SP_GGUF_UINT16] = 2,
    [SP_GGUF_INT16] = 2,   [SP_GGUF_UINT32] = 4,  [SP_GGUF_INT32] = 4,
    [SP_GGUF_FLOAT32] = 4, [SP_GGUF_BOOL] = 1,    [SP_GGUF_STRING] = 0,
    [SP_GGUF_ARRAY] = 0,   [SP_GGUF_UINT64] = 8,  [SP_GGUF_INT64] = 8,
    [SP_GGUF_FLOAT64] = 8,
};

static const char *const vtype_name[SP_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

/* Smallest encoding of one element of type t (for bounding counts). */
static uint64_t vtype_min_size(gguf_vtype t) {
    if (t == SP_GGUF_STRING) return 8;
    if (t == SP_GGUF_ARRAY) return 12;
    return vtype_size[t];
}

static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h;
}

/* Looks name up in a hash table of index+1 slots; names(i) gives entry i's
 * name. Returns the index or -1. */
static int64_t hash_find(const uint64_t *tab, size_t cap, const char *name,
                         const char *(*names)(const gguf_file *, int64_t), const gguf_file *g) {
    if (!tab || !name) return -1;
    size_t mask = cap - 1;
    for (size_t h = hash_bytes(name, strlen(name)) & mask;; h = (h + 1) & mask) {
        if (!tab[h]) return -1;
        int64_t i = (int64_t)tab[h] - 1;
        if (strcmp(names(g, i), name) == 0) return i;
    }
}

/* Inserts i; returns the index of an existing entry with the same name, or
 * -1 when it was inserted. The table never fills: cap >= 2 * entries. */
static int64_t hash_insert(uint64_t *tab, size_t cap, const char *name, int64_t i,
                           const char *(*names)(const gguf_file *, int64_t), const gguf_file *g) {
    size_t mask = cap - 1;
    for (size_t h = hash_bytes(name, strlen(name)) & mask;; h = (h + 1) & mask) {
        if (!tab[h]) { tab[h] = (uint64_t)i + 1; return -1; }
        int64_t j = (int64_t)tab[h] - 1;
        if (strcmp(names(g, j), name) == 0) return j;
    }
}

static const char *kv_name(const gguf_file *g, int64_t i) { return g->kvs[i].key; }
static const char *tensor_name(const gguf_file *g, int64_t i) { return g->tensors[i].name; }

static size_t hash_cap_for(uint64_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* ---- bounds-checked cursor -------------------------------------------- */

typedef struct {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *path;
    char *err;
    size_t errlen;
    char what[200]; /* the item being read, for messages: "tensor info 3 ('x')" */
} cursor;

/* Checks that n more bytes exist at the cursor. The message says where the
 * item would end; n <= size is known by then for every caller that passes a
 * file-controlled length (they check against the size first), so the sum
 * cannot overflow. */
static bool cur_need(cursor *c, uint64_t n) {
    if (n <= c->size - c->pos) return true;
    if (n > c->size && n > 8)
        seterr(c->err, c->errlen, "%s: %s: length %" PRIu64 " exceeds the file size (%" PRIu64 " bytes)",
                  c->path, c->what, n, c->size);
    else
        seterr(c->err, c->errlen,
                  "%s: truncated: %s ends at byte %" PRIu64 " but the file has %" PRIu64 " bytes",
                  c->path, c->what, c->pos + n, c->size);
    return false;
}

static bool cur_u32(cursor *c, uint32_t *v) {
    if (!cur_need(c, 4)) return false;
    *v = rd_u32(c->p + c->pos);
    c->pos += 4;
    return true;
}

static bool cur_u64(cursor *c, uint64_t *v) {
    if (!cur_need(c, 8)) return false;
    *v = rd_u64(c->p + c->pos);
    c->pos += 8;
    return true;
}

/* Reads a GGUF string header and checks its bytes are in the file; *off is
 * the file offset of the bytes. */
static bool cur_str(cursor *c, uint64_t *off, uint64_t *len) {
    if (!cur_u64(c, len)) return false;
    if (!cur_need(c, *len)) return false;
    *off = c->pos;
    c->pos += *len;
    return true;
}

/* Reads a key or tensor name into a fresh NUL-terminated copy. kind is
 * "key" or "tensor name" for messages. */
static char *cur_name(cursor *c, const char *kind) {
    uint64_t len, off;
    if (!cur_u64(c, &len)) return NULL;
    if (len == 0) {
        seterr(c->err, c->errlen, "%s: %s has an empty %s", c->path, c->what, kind);
        return NULL;
    }
    if (len > SP_GGUF_MAX_NAME) {
        seterr(c->err, c->errlen, "%s: %s: %s length %" PRIu64 " exceeds the limit of %u bytes",
                  c->path, c->what, kind, len, SP_GGUF_MAX_NAME);
        return NULL;
    }
    if (!cur_need(c, len)) return NULL;
    off = c->pos;
    c->pos += len;
    if (memchr(c->p + off, 0, len)) {
        seterr(c->err, c->errlen, "%s: %s: %s contains a NUL byte", c->path, c->what, kind);
        return NULL;
    }
    char *s = malloc(len + 1);
    if (!s) {
        seterr(c->err, c->errlen, "%s: out of memory", c->path);
        return NULL;
    }
    memcpy(s, c->p + off, len);
    s[len] = 0;
    return s;
}

static bool check_vtype(cursor *c, uint32_t t, const char *role) {
    if (t < SP_GGUF_TYPE_COUNT) return true;
    seterr(c->err, c->errlen, "%s: %s has unknown %s type %" PRIu32, c->path, c->what, role, t);
    return false;
}

/* Bounds an element count by the bytes left, so loops and allocations sized
 * by n are bounded by the file size. */
static bool check_count(cursor *c, uint64_t n, gguf_vtype t) {
    uint64_t left = c->size - c->pos;
    if (n <= left / vtype_min_size(t)) return true;
    seterr(c->err, c->errlen,
              "%s: %s: array length %" PRIu64 " exceeds the file size (%" PRIu64 " bytes left, "
              "%s elements take at least %" PRIu64 " bytes each)",
              c->path, c->what, n, left, vtype_name[t], vtype_min_size(t));
    return false;
}

/* Skips (and validates) one value of type t. */
static bool cur_skip_value(cursor *c, gguf_vtype t, int depth) {
    if (t == SP_GGUF_STRING) {
        uint64_t off, len;
        return cur_str(c, &off, &len);
    }
    if (t != SP_GGUF_ARRAY) {
        if (!cur_need(c, vtype_size[t])) return false;
        c->pos += vtype_size[t];
        return true;
    }
    if (depth >= SP_GGUF_MAX_NEST) {
        seterr(c->err, c->errlen, "%s: %s: arrays nested deeper than %d levels", c->path,
                  c->what, SP_GGUF_MAX_NEST);
        return false;
    }
    uint32_t et;
    uint64_t n;
    if (!cur_u32(c, &et) || !check_vtype(c, et, "array element")) return false;
    if (!cur_u64(c, &n) || !check_count(c, n, et)) return false;
    if (et != SP_GGUF_STRING && et != SP_GGUF_ARRAY) {
        uint64_t bytes = n * vtype_size[et]; /* no overflow: bounded by check_count */
        if (!cur_need(c, bytes)) return false;
        c->pos += bytes;
        return true;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!cur_skip_value(c, (gguf_vtype)et, depth + 1)) return false;
    return true;
}

/* ---- open ------------------------------------------------------------- */

static void free_contents(gguf_file *g) {
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kvs[i].key);
            free(g->kvs[i].str_off);
        }
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_hash);
    free(g->t_hash);
    free(g->path);
    if (g->base && g->size) munmap((void *)g->base, g->size);
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    free_contents(g);
    free(g);
}

/* Reads the kv pairs; the cursor is at the first one. */
static bool read_kvs(gguf_file *g, cursor *c, uint64_t n_kv) {
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    g->kv_hash_cap = hash_cap_for(n_kv);
    g->kv_hash = calloc(g->kv_hash_cap, sizeof(uint64_t));
    if (!g->kvs || !g->kv_hash) {
        seterr(c->err, c->errlen, "%s: out of memory", g->path);
        return false;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        snprintf(c->what, sizeof c->what, "kv %" PRIu64, i);
        kv->key = cur_name(c, "key");
        if (!kv->key) return false;
        g->n_kv = (int64_t)i + 1; /* so the key is freed on failure */
        snprintf(c->what, sizeof c->what, "kv %" PRIu64 " ('%.80s')", i, kv->key);
        int64_t dup = hash_insert(g->kv_hash, g->kv_hash_cap, kv->key, (int64_t)i, kv_name, g);
        if (dup >= 0) {
            seterr(c->err, c->errlen, "%s: duplicate key '%.80s' (kv %" PRId64 " and kv %" PRIu64 ")",
                      g->path, kv->key, dup, i);
            return false;
        }
        uint32_t t;
        if (!cur_u32(c, &t) || !check_vtype(c, t, "value")) return false;
        kv->type = (gguf_vtype)t;
        kv->val_off = c->pos;
        if (t == SP_GGUF_ARRAY) {
            uint32_t et;
            uint64_t n;
            if (!cur_u32(c, &et) || !check_vtype(c, et, "array element")) return false;
            if (!cur_u64(c, &n) || !check_count(c, n, et)) return false;
            kv->arr_type = (gguf_vtype)et;
            kv->arr_n = n;
            kv->arr_data_off = c->pos;
            if (et == SP_GGUF_STRING) {
                /* Index the strings now so element i is O(1) later (token
                 * tables have up to ~150k entries). n is bounded by the
                 * file size, so the allocation is too. */
                kv->str_off = malloc((n ? n : 1) * sizeof(uint64_t));
                if (!kv->str_off) {
                    seterr(c->err, c->errlen, "%s: out of memory", g->path);
                    return false;
                }
                for (uint64_t j = 0; j < n; j++) {
                    uint64_t off, len;
                    kv->str_off[j] = c->pos;
                    if (!cur_str(c, &off, &len)) return false;
                }
            } else {
                c->pos = kv->val_off;
                if (!cur_skip_value(c, SP_GGUF_ARRAY, 0)) return false;
            }
        } else {
            if (!cur_skip_value(c, kv->type, 0)) return false;
        }
        kv->val_len = c->pos - kv->val_off;
    }
    return true;
}

typedef struct {
    uint64_t begin, end;
    int64_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads the tensor infos; the cursor is at the first one. */
static bool read_tensor_infos(gguf_file *g, cursor *c, uint64_t n_t) {
    g->tensors = calloc(n_t ? n_t : 1, sizeof(gguf_tensor));
    g->t_hash_cap = hash_cap_for(n_t);
    g->t_hash = calloc(g->t_hash_cap, sizeof(uint64_t));
    if (!g->tensors || !g->t_hash) {
        seterr(c->err, c->errlen, "%s: out of memory", g->path);
        return false;
    }
    for (uint64_t i = 0; i < n_t; i++) {
        gguf_tensor *t = &g->tensors[i];
        snprintf(c->what, sizeof c->what, "tensor info %" PRIu64, i);
        char *name = cur_name(c, "tensor name");
        if (!name) return false;
        t->name = name;
        g->n_tensors = (int64_t)i + 1;
        snprintf(c->what, sizeof c->what, "tensor info %" PRIu64 " ('%.80s')", i, name);
        int64_t dup = hash_insert(g->t_hash, g->t_hash_cap, name, (int64_t)i, tensor_name, g);
        if (dup >= 0) {
            seterr(c->err, c->errlen,
                      "%s: duplicate tensor name '%.80s' (tensor infos %" PRId64 " and %" PRIu64 ")",
                      g->path, name, dup, i);
            return false;
        }
        uint32_t n_dims;
        if (!cur_u32(c, &n_dims)) return false;
        if (n_dims < 1 || n_dims > SP_GGUF_MAX_DIMS) {
            seterr(c->err, c->errlen, "%s: tensor '%.80s' has %" PRIu32 " dimensions (must be 1..%d)",
                      g->path, name, n_dims, SP_GGUF_MAX_DIMS);
            return false;
        }
        t->n_dims = (int)n_dims;
        int64_t nelem = 1;
        for (int d = 0; d < SP_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t v;
            if (!cur_u64(c, &v)) return false;
            if (v > (uint64_t)INT64_MAX) {
                seterr(c->err, c->errlen, "%s: tensor '%.80s' has negative dimension ne[%" PRIu32 "] = %" PRId64,
                          g->path, name, d, (int64_t)v);
                return false;
            }
            t->ne[d] = (int64_t)v;
            if (__builtin_mul_overflow(nelem, t->ne[d], &nelem)) {
                seterr(c->err, c->errlen, "%s: tensor '%.80s': the element count overflows 64 bits",
                          g->path, name);
                return false;
            }
        }
        uint32_t type;
        if (!cur_u32(c, &type)) return false;
        const type_traits *tr = type < 0x10000 ? type_info((int)type) : NULL;
        if (!tr || tr->blck <= 0 || tr->block_bytes == 0) {
            seterr(c->err, c->errlen, "%s: tensor '%.80s' has unknown type %" PRIu32, g->path, name, type);
            return false;
        }
        t->type = (tensor_type)type;
        if (t->ne[0] % tr->blck != 0) {
            seterr(c->err, c->errlen,
                      "%s: tensor '%.80s': row length %" PRId64 " is not a multiple of the block size %" PRId64
                      " of type %s",
                      g->path, name, t->ne[0], tr->blck, tr->name);
            return false;
        }
        /* nbytes = blocks * block_bytes; the element count fits int64, so
         * blocks does, but the byte count may not fit. */
        uint64_t nbytes;
        if (__builtin_mul_overflow((uint64_t)(nelem / tr->blck), (uint64_t)tr->block_bytes, &nbytes) ||
            nbytes > SIZE_MAX) {
            seterr(c->err, c->errlen, "%s: tensor '%.80s': the byte size overflows", g->path, name);
            return false;
        }
        t->nbytes = (size_t)nbytes;
        if (!cur_u64(c, &t->offset)) return false;
        if (t->offset % g->alignment != 0) {
            seterr(c->err, c->errlen,
                      "%s: tensor '%.80s': offset %" PRIu64 " is not a multiple of the alignment %zu",
                      g->path, name, t->offset, g->alignment);
            return false;
        }
    }
    return true;
}

/* Places the tensors in the data section: every tensor inside the file and
 * no two overlapping. */
static bool check_tensor_data(gguf_file *g, char *err, size_t errlen) {
    int64_t n = g->n_tensors;
    if (n == 0) return true;
    span *sp = malloc((size_t)n * sizeof *sp);
    if (!sp) {
        seterr(err, errlen, "%s: out of memory", g->path);
        return false;
    }
    bool ok = false;
    for (int64_t i = 0; i < n; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t begin, end;
        if (__builtin_add_overflow(g->data_off, t->offset, &begin) ||
            __builtin_add_overflow(begin, (uint64_t)t->nbytes, &end)) {
            seterr(err, errlen, "%s: tensor '%.80s' (offset %" PRIu64 ", %zu bytes) extends past the end "
                      "of the file (%zu bytes)", g->path, t->name, t->offset, t->nbytes, g->size);
            goto done;
        }
        if (end > g->size) {
            seterr(err, errlen,
                      "%s: tensor '%.80s' (offset %" PRIu64 ", %zu bytes) extends past the end of the file: "
                      "it ends at byte %" PRIu64 " but the file has %zu bytes (truncated?)",
                      g->path, t->name, t->offset, t->nbytes, end, g->size);
            goto done;
        }
        t->data = g->base + begin;
        sp[i] = (span){begin, end, i};
    }
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    /* Sorted by start, a tensor overlaps an earlier one iff it starts before
     * the furthest end seen so far. Zero-byte tensors overlap nothing. */
    int64_t far = -1; /* index into sp of the furthest-reaching tensor */
    for (int64_t i = 0; i < n; i++) {
        if (sp[i].begin == sp[i].end) continue;
        if (far >= 0 && sp[far].end > sp[i].begin) {
            seterr(err, errlen, "%s: tensors '%.80s' and '%.80s' overlap in the data section",
                      g->path, g->tensors[sp[far].idx].name, g->tensors[sp[i].idx].name);
            goto done;
        }
        if (far < 0 || sp[i].end > sp[far].end) far = i;
    }
    ok = true;
done:
    free(sp);
    return ok;
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    int fd = -1;
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) {
        seterr(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    g->path = strdup(path);
    if (!g->path) {
        seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        seterr(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        seterr(err, errlen, "%s: file too large to map", path);
        goto fail;
    }
    g->size = (size_t)st.st_size;
    g->id = (gguf_file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
                              (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                              (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec};
    if (g->size > 0) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            seterr(err, errlen, "%s: cannot map %zu bytes: %s", path, g->size, strerror(errno));
            g->size = 0;
            goto fail;
        }
        g->base = m;
    }
    close(fd);
    fd = -1;

    cursor c = {.p = g->base, .size = g->size, .pos = 0, .path = path, .err = err, .errlen = errlen};
    snprintf(c.what, sizeof c.what, "header");
    if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
        if (g->size < 4)
            seterr(err, errlen, "%s: truncated: file has %zu bytes, too short for a GGUF header", path,
                      g->size);
        else
            seterr(err, errlen, "%s: not a GGUF file (bad magic)", path);
        goto fail;
    }
    c.pos = 4;
    uint32_t version;
    if (!cur_u32(&c, &version)) goto fail;
    if (version == 1) {
        seterr(err, errlen, "%s: GGUF version 1 is not supported (convert it with a newer llama.cpp)", path);
        goto fail;
    }
    if (version != 2 && version != 3) {
        /* A big-endian GGUF reads as a byte-swapped version number. */
        uint32_t sw = __builtin_bswap32(version);
        if (sw == 2 || sw == 3)
            seterr(err, errlen, "%s: big-endian GGUF files are not supported", path);
        else
            seterr(err, errlen, "%s: unsupported GGUF version %" PRIu32 " (supported: 2, 3)", path,
                      version);
        goto fail;
    }
    g->version = version;
    uint64_t n_tensors, n_kv;
    if (!cur_u64(&c, &n_tensors) || !cur_u64(&c, &n_kv)) goto fail;
    /* Bound both counts by what the rest of the file could hold before
     * allocating anything sized by them. */
    uint64_t left = g->size - c.pos;
    if (n_kv > left / SP_GGUF_MIN_KV) {
        seterr(err, errlen, "%s: n_kv = %" PRIu64 " exceeds file size (%zu bytes)", path, n_kv, g->size);
        goto fail;
    }
    if (n_tensors > left / SP_GGUF_MIN_TINFO || n_tensors > (uint64_t)INT64_MAX) {
        seterr(err, errlen, "%s: n_tensors = %" PRIu64 " exceeds file size (%zu bytes)", path, n_tensors,
                  g->size);
        goto fail;
    }

    if (!read_kvs(g, &c, n_kv)) goto fail;
    if (n_tensors > (g->size - c.pos) / SP_GGUF_MIN_TINFO) {
        seterr(err, errlen, "%s: n_tensors = %" PRIu64 " exceeds file size (%zu bytes, tensor infos start at %" PRIu64 ")",
                  path, n_tensors, g->size, c.pos);
        goto fail;
    }

    g->alignment = 32;
    int64_t ai = gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &g->kvs[ai];
        if (kv->type != SP_GGUF_UINT32) {
            seterr(err, errlen, "%s: general.alignment has type %s (must be u32)", path,
                      vtype_name[kv->type]);
            goto fail;
        }
        uint32_t a = rd_u32(g->base + kv->val_off);
        if (a == 0 || (a & (a - 1)) != 0) {
            seterr(err, errlen, "%s: general.alignment = %" PRIu32 " (must be a non-zero power of two)",
                      path, a);
            goto fail;
        }
        g->alignment = a;
    }

    if (!read_tensor_infos(g, &c, n_tensors)) goto fail;
    /* The data section starts at the next multiple of the alignment (it may
     * lie past the end of a file that has no tensor data at all). */
    g->data_off = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (!check_tensor_data(g, err, errlen)) goto fail;
    return g;

fail:
    if (fd >= 0) close(fd);
    gguf_close(g);
    return NULL;
}

/* ---- accessors -------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *g) { return g->version; }
size_t gguf_alignment(const gguf_file *g) { return g->alignment; }
size_t gguf_file_size(const gguf_file *g) { return g->size; }
const void *gguf_file_bytes(const gguf_file *g) { return g->base; }
gguf_file_id gguf_file_identity(const gguf_file *g) { return g->id; }
int64_t gguf_n_kv(const gguf_file *g) { return g->n_kv; }

int64_t gguf_find_key(const gguf_file *g, const char *key) {
    return hash_find(g->kv_hash, g->kv_hash_cap, key, kv_name, g);
}

const char *gguf_key(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL;
}

gguf_vtype gguf_kv_type(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kvs[i].type : SP_GGUF_TYPE_COUNT;
}

bool gguf_kv_raw(const gguf_file *g, int64_t i, const void **data, size_t *n) {
    if (i < 0 || i >= g->n_kv) return false;
    *data = g->base + g->kvs[i].val_off;
    *n = (size_t)g->kvs[i].val_len;
    return true;
}

static const gguf_kv *kv_by_key(const gguf_file *g, const char *key) {
    int64_t i = gguf_find_key(g, key);
    return i >= 0 ? &g->kvs[i] : NULL;
}

/* An integer value widened to a sign flag + magnitude so every width
 * converts exactly. */
static bool kv_int(const gguf_file *g, const gguf_kv *kv, bool *neg, uint64_t *mag) {
    const uint8_t *p = g->base + kv->val_off;
    int64_t s;
    switch (kv->type) {
    case SP_GGUF_UINT8: *neg = false; *mag = p[0]; return true;
    case SP_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *neg = false; *mag = v; return true; }
    case SP_GGUF_UINT32: *neg = false; *mag = rd_u32(p); return true;
    case SP_GGUF_UINT64: *neg = false; *mag = rd_u64(p); return true;
    case SP_GGUF_INT8: s = (int8_t)p[0]; break;
    case SP_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case SP_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case SP_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); s = v; break; }
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

bool gguf_get_i64(const gguf_file *g, const char *key, int64_t *out) {
    const gguf_kv *kv = kv_by_key(g, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_int(g, kv, &neg, &mag)) return false;
    if (neg) {
        if (mag > (uint64_t)INT64_MAX + 1) return false;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)mag;
    }
    return true;
}

bool gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = kv_by_key(g, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_int(g, kv, &neg, &mag)) return false;
    if ((neg && mag != 0) || mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool gguf_get_f32(const gguf_file *g, const char *key, float *out) {
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv) return false;
    const uint8_t *p = g->base + kv->val_off;
    if (kv->type == SP_GGUF_FLOAT32) {
        memcpy(out, p, 4);
        return true;
    }
    if (kv->type == SP_GGUF_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        /* a double beyond float's range: converting it is undefined in C;
         * it reads as the infinity it rounds to, for the caller to refuse */
        if (d > FLT_MAX) *out = INFINITY;
        else if (d < -FLT_MAX) *out = -INFINITY;
        else *out = (float)d;
        return true;
    }
    return false;
}

bool gguf_get_bool(const gguf_file *g, const char *key, bool *out) {
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv || kv->type != SP_GGUF_BOOL) return false;
    *out = g->base[kv->val_off] != 0; /* any non-zero byte is true */
    return true;
}

bool gguf_get_str(const gguf_file *g, const char *key, gguf_str *out) {
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv || kv->type != SP_GGUF_STRING) return false;
    out->n = rd_u64(g->base + kv->val_off);
    out->p = (const char *)g->base + kv->val_off + 8;
    return true;
}

bool gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype *elem_type, uint64_t *n,
                     const void **data) {
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv || kv->type != SP_GGUF_ARRAY) return false;
    if (elem_type) *elem_type = kv->arr_type;
    if (n) *n = kv->arr_n;
    if (data) *data = g->base + kv->arr_data_off;
    return true;
}

gguf_str gguf_arr_str(const gguf_file *g, const char *key, uint64_t i) {
    gguf_str s = {NULL, 0};
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv || kv->type != SP_GGUF_ARRAY || kv->arr_type != SP_GGUF_STRING || i >= kv->arr_n) return s;
    const uint8_t *p = g->base + kv->str_off[i];
    s.n = rd_u64(p);
    s.p = (const char *)p + 8;
    return s;
}

int64_t gguf_n_tensors(const gguf_file *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    int64_t i = hash_find(g->t_hash, g->t_hash_cap, name, tensor_name, g);
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- formatting ------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, pos;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (b->pos + 1 >= b->len) return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(b->buf + b->pos, b->len - b->pos, fmt, ap);
    va_end(ap);
    if (r < 0) return;
    b->pos = SP_MIN(b->pos + (size_t)r, b->len - 1);
}

/* A quoted string with control characters escaped, cut at max bytes. */
static void sb_quoted(strbuf *b, const uint8_t *p, uint64_t n, size_t max) {
    sb_printf(b, "\"");
    uint64_t shown = SP_MIN(n, (uint64_t)max);
    for (uint64_t i = 0; i < shown; i++) {
        uint8_t ch = p[i];
        if (ch == '"' || ch == '\\') sb_printf(b, "\\%c", ch);
        else if (ch == '\n') sb_printf(b, "\\n");
        else if (ch == '\t') sb_printf(b, "\\t");
        else if (ch == '\r') sb_printf(b, "\\r");
        else if (ch < 0x20 || ch == 0x7f) sb_printf(b, "\\x%02x", ch);
        else sb_printf(b, "%c", ch);
    }
    sb_printf(b, n > shown ? "\"..." : "\"");
}

/* The scalar of type t at p. */
static void sb_scalar(strbuf *b, gguf_vtype t, const uint8_t *p) {
    switch (t) {
    case SP_GGUF_UINT8: sb_printf(b, "%u", p[0]); break;
    case SP_GGUF_INT8: sb_printf(b, "%d", (int8_t)p[0]); break;
    case SP_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); sb_printf(b, "%u", v); break; }
    case SP_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); sb_printf(b, "%d", v); break; }
    case SP_GGUF_UINT32: sb_printf(b, "%" PRIu32, rd_u32(p)); break;
    case SP_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); sb_printf(b, "%" PRId32, v); break; }
    case SP_GGUF_UINT64: sb_printf(b, "%" PRIu64, rd_u64(p)); break;
    case SP_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); sb_printf(b, "%" PRId64, v); break; }
    case SP_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); sb_printf(b, "%g", v); break; }
    case SP_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); sb_printf(b, "%g", v); break; }
    case SP_GGUF_BOOL: sb_printf(b, "%s", p[0] ? "true" : "false"); break;
    default: break;
    }
}

void gguf_kv_format(const gguf_file *g, int64_t i, char *buf, size_t len) {
    if (!buf || len == 0) return;
    buf[0] = 0;
    if (i < 0 || i >= g->n_kv) return;
    strbuf b = {buf, len, 0};
    const gguf_kv *kv = &g->kvs[i];
    const uint8_t *p = g->base + kv->val_off;
    if (kv->type == SP_GGUF_STRING) {
        sb_quoted(&b, p + 8, rd_u64(p), 60);
        return;
    }
    if (kv->type != SP_GGUF_ARRAY) {
        sb_scalar(&b, kv->type, p);
        return;
    }
    sb_printf(&b, "[%s x %" PRIu64, vtype_name[kv->arr_type], kv->arr_n);
    if (kv->arr_type == SP_GGUF_ARRAY || kv->arr_n == 0) {
        sb_printf(&b, "]");
        return;
    }
    const uint64_t show = 5;
    sb_printf(&b, ": ");
    for (uint64_t j = 0; j < SP_MIN(kv->arr_n, show); j++) {
        if (j) sb_printf(&b, ", ");
        if (kv->arr_type == SP_GGUF_STRING) {
            const uint8_t *s = g->base + kv->str_off[j];
            sb_quoted(&b, s + 8, rd_u64(s), 24);
        } else {
            sb_scalar(&b, kv->arr_type, g->base + kv->arr_data_off + j * vtype_size[kv->arr_type]);
        }
    }
    sb_printf(&b, kv->arr_n > show ? ", ...]" : "]");
}
