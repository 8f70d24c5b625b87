/* fuzz_gguf.c: the GGUF reader on arbitrary bytes, and the vocabulary
 * loader on whatever metadata an accepted file carries.
 *
 * The reader maps a path, so the input is written to a memfd (an anonymous
 * regular file, reused across runs) and opened through /proc/self/fd. On a
 * successful open every accessor is called on every key and tensor, and
 * what they return must lie inside the file; then the tokenizer metadata,
 * if any, goes through vocab_load and a loaded vocabulary encodes and
 * decodes a fixed text. */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"

static int fzg_fd = -1;
static char fzg_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

static bool fzg_write(const uint8_t *data, size_t size) {
    if (fzg_fd < 0) {
        fzg_fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
        if (fzg_fd < 0) return false;
        snprintf(fzg_path, sizeof(fzg_path), "/proc/self/fd/%d", fzg_fd);
    }
    if (ftruncate(fzg_fd, 0) != 0) return false;
    size_t off = 0;
    while (off < size) {
        ssize_t k = pwrite(fzg_fd, data + off, size - off, (off_t)off);
        if (k <= 0) return false;
        off += (size_t)k;
    }
    return true;
}

/* Reads every byte of [p, p + n) (out-of-mapping pointers fault here) and
 * checks that the range lies within the file's size from its base. */
static volatile uint8_t fzg_sink;
static void fzg_touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++) x ^= b[i];
    fzg_sink ^= x;
}

static void fzg_exercise_vocab(const gguf_file *g) {
    char err[512];
    sp_vocab *v = vocab_load(g, err, sizeof(err));
    if (!v) {
        FZ_ASSERT(err[0]); /* a refusal says why */
        return;
    }
    int32_t nv = sp_vocab_n_tokens(v);
    FZ_ASSERT(nv > 0);
    static const char text[] = "Hello world! \xe4\xbd\xa0\xe5\xa5\xbd  <s></s>\n\t\xff 123";
    int32_t toks[256];
    for (int mode = 0; mode < 4; mode++) {
        int n = sp_tokenize(v, text, sizeof(text) - 1, toks, 256, mode & 1, mode & 2);
        FZ_ASSERT(n != INT32_MIN);
        if (n < 0) continue;
        for (int i = 0; i < n; i++) FZ_ASSERT(toks[i] >= 0 && toks[i] < nv);
        fz_detok_stream(v, toks, (size_t)n);
    }
    /* every token's piece, both ways */
    char piece[256];
    for (int32_t t = 0; t < nv && t < 4096; t++) {
        for (int rs = 0; rs < 2; rs++) {
            int k = sp_token_to_piece(v, t, piece, sizeof(piece), rs);
            if (k < 0) FZ_ASSERT(sp_token_to_piece(v, t, NULL, 0, rs) == k);
        }
        (void)sp_vocab_token_type(v, t);
        (void)sp_vocab_is_eog(v, t);
        const char *s = sp_vocab_token_text(v, t);
        FZ_ASSERT(s);
        fzg_touch(s, strlen(s));
    }
    vocab_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fzg_write(data, size)) return 0;
    char err[512];
    err[0] = 0;
    gguf_file *g = gguf_open(fzg_path, err, sizeof(err));
    if (!g) {
        FZ_ASSERT(err[0]); /* every refusal has a message */
        return 0;
    }
    FZ_ASSERT(gguf_file_size(g) == size);
    FZ_ASSERT(gguf_version(g) == 2 || gguf_version(g) == 3);
    size_t al = gguf_alignment(g);
    FZ_ASSERT(al && !(al & (al - 1)));

    int64_t nkv = gguf_n_kv(g);
    FZ_ASSERT(nkv >= 0);
    char buf[512];
    for (int64_t i = 0; i < nkv; i++) {
        const char *key = gguf_key(g, i);
        FZ_ASSERT(key);
        FZ_ASSERT(gguf_find_key(g, key) == i); /* duplicates are refused */
        gguf_vtype t = gguf_kv_type(g, i);
        FZ_ASSERT(t < SP_GGUF_TYPE_COUNT);
        const void *raw;
        size_t rn;
        FZ_ASSERT(gguf_kv_raw(g, i, &raw, &rn));
        FZ_ASSERT(rn <= size);
        fzg_touch(raw, rn);
        gguf_kv_format(g, i, buf, sizeof(buf));
        FZ_ASSERT(memchr(buf, 0, sizeof(buf)));
        int64_t i64;
        uint32_t u32;
        float f32;
        bool b;
        gguf_str s;
        (void)gguf_get_i64(g, key, &i64);
        (void)gguf_get_u32(g, key, &u32);
        (void)gguf_get_f32(g, key, &f32);
        (void)gguf_get_bool(g, key, &b);
        if (gguf_get_str(g, key, &s)) {
            FZ_ASSERT(s.n <= size);
            fzg_touch(s.p, (size_t)s.n);
        }
        gguf_vtype et;
        uint64_t n;
        const void *ad;
        if (gguf_get_arr(g, key, &et, &n, &ad)) {
            FZ_ASSERT(et < SP_GGUF_TYPE_COUNT);
            if (et == SP_GGUF_STRING) {
                for (uint64_t j = 0; j < n && j < 100000; j++) {
                    gguf_str e = gguf_arr_str(g, key, j);
                    FZ_ASSERT(e.n <= size);
                    fzg_touch(e.p, (size_t)e.n);
                }
                FZ_ASSERT(gguf_arr_str(g, key, n).p == NULL);
            } else if (et != SP_GGUF_ARRAY) {
                static const size_t esz[SP_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
                FZ_ASSERT(n <= size);
                fzg_touch(ad, (size_t)n * esz[et]);
            }
        }
    }
    FZ_ASSERT(gguf_key(g, nkv) == NULL && gguf_key(g, -1) == NULL);

    int64_t nt = gguf_n_tensors(g);
    FZ_ASSERT(nt >= 0);
    uint64_t total = 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        FZ_ASSERT(t && t->name);
        FZ_ASSERT(gguf_find_tensor(g, t->name) == t);
        FZ_ASSERT(t->n_dims >= 1 && t->n_dims <= SP_GGUF_MAX_DIMS);
        for (int d = 0; d < SP_GGUF_MAX_DIMS; d++) FZ_ASSERT(t->ne[d] >= 0);
        FZ_ASSERT(t->nbytes <= size);
        total += t->nbytes;
        FZ_ASSERT(total <= size); /* tensors do not overlap */
        fzg_touch(t->data, t->nbytes);
    }
    FZ_ASSERT(gguf_tensor_at(g, nt) == NULL);

    fzg_exercise_vocab(g);
    gguf_close(g);
    return 0;
}
