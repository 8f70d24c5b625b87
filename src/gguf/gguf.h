/* gguf.h: reading (memory-mapped, validated) and writing GGUF files,
 * versions 2 and 3.
 *
 * Reading: sp_gguf_open() maps the file read-only and validates every
 * offset, size, count and string length against the file before anything
 * else may touch it; a truncated, corrupt or hostile file fails with a
 * message naming what is wrong. After a successful open every pointer the
 * getters return stays valid until sp_gguf_close().
 *
 * Strings in GGUF are length-prefixed, not NUL-terminated: they are returned
 * as sp_gguf_str views into the mapping. Key and tensor names are also
 * available NUL-terminated (copied at open).
 */
#ifndef SP_GGUF_H
#define SP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef enum {
    SP_GGUF_UINT8 = 0,
    SP_GGUF_INT8 = 1,
    SP_GGUF_UINT16 = 2,
    SP_GGUF_INT16 = 3,
    SP_GGUF_UINT32 = 4,
    SP_GGUF_INT32 = 5,
    SP_GGUF_FLOAT32 = 6,
    SP_GGUF_BOOL = 7,
    SP_GGUF_STRING = 8,
    SP_GGUF_ARRAY = 9,
    SP_GGUF_UINT64 = 10,
    SP_GGUF_INT64 = 11,
    SP_GGUF_FLOAT64 = 12,
    SP_GGUF_TYPE_COUNT
} sp_gguf_vtype;

typedef struct {
    const char *p; /* not NUL-terminated */
    uint64_t n;    /* bytes */
} sp_gguf_str;

#define SP_GGUF_MAX_DIMS 4

typedef struct {
    const char *name;               /* NUL-terminated (owned by the sp_gguf) */
    int n_dims;                     /* 1..4 */
    int64_t ne[SP_GGUF_MAX_DIMS];   /* ne[0] innermost (row length); unused dims = 1 */
    sp_type type;
    uint64_t offset;                /* from the start of the data section */
    size_t nbytes;
    const void *data;               /* into the mapping */
} sp_gguf_tensor;

typedef struct sp_gguf sp_gguf;

/* Opens and validates path. Returns NULL and writes a message into err on
 * any failure (I/O, bad magic, unsupported version, truncation, out-of-range
 * offsets, unknown value or tensor types, duplicate keys or tensor names,
 * overlapping tensors, dims whose product overflows). Tensor types that are
 * valid GGML types but have no kernels here are accepted by the reader;
 * sp_type_info(type)->supported tells. */
sp_gguf *sp_gguf_open(const char *path, char *err, size_t errlen);
void sp_gguf_close(sp_gguf *g);

uint32_t sp_gguf_version(const sp_gguf *g);
size_t sp_gguf_alignment(const sp_gguf *g);
size_t sp_gguf_file_size(const sp_gguf *g);
/* The whole mapped file (sp_gguf_file_size bytes; NULL for an empty one). */
const void *sp_gguf_file_bytes(const sp_gguf *g);

/* The file's identity when it was opened (fstat of the descriptor that was
 * mapped): any write to the file, or its replacement, changes ctime, inode
 * or size, so an unchanged identity means unchanged bytes (see
 * sp_model_file_hash for what caches on it). */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} sp_gguf_file_id;
sp_gguf_file_id sp_gguf_file_identity(const sp_gguf *g);

/* ---- metadata ---- */
int64_t sp_gguf_n_kv(const sp_gguf *g);
int64_t sp_gguf_find_key(const sp_gguf *g, const char *key); /* -1 if absent */
const char *sp_gguf_key(const sp_gguf *g, int64_t i);
sp_gguf_vtype sp_gguf_kv_type(const sp_gguf *g, int64_t i);

/* Typed getters by key. Return false when the key is absent or has a type
 * that cannot represent the request (integers convert between widths only
 * when the value fits; floats accept FLOAT32/FLOAT64). *out is untouched on
 * false. */
bool sp_gguf_get_i64(const sp_gguf *g, const char *key, int64_t *out);
bool sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out);
bool sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out);
bool sp_gguf_get_bool(const sp_gguf *g, const char *key, bool *out);
bool sp_gguf_get_str(const sp_gguf *g, const char *key, sp_gguf_str *out);

/* Arrays: element type and count; for non-string element types *data points
 * at the packed little-endian elements in the mapping. Nested arrays are
 * validated but have no accessor. */
bool sp_gguf_get_arr(const sp_gguf *g, const char *key, sp_gguf_vtype *elem_type,
                     uint64_t *n, const void **data);
/* Element i of a string array (O(1); offsets are indexed at open).
 * {NULL, 0} when key is absent, not a string array, or i is out of range. */
sp_gguf_str sp_gguf_arr_str(const sp_gguf *g, const char *key, uint64_t i);
/* The encoded bytes of kv i's value as stored in the file (everything after
 * its value type id), e.g. to copy a value verbatim. false if i is out of
 * range. */
bool sp_gguf_kv_raw(const sp_gguf *g, int64_t i, const void **data, size_t *n);

/* Human-readable value of kv i (arrays abbreviated), for `specula info`. */
void sp_gguf_kv_format(const sp_gguf *g, int64_t i, char *buf, size_t len);

/* ---- tensors ---- */
int64_t sp_gguf_n_tensors(const sp_gguf *g);
const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, int64_t i);
const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name); /* NULL if absent */

/* ---- writing ---- */
typedef struct sp_gguf_writer sp_gguf_writer;
sp_gguf_writer *sp_gguf_writer_create(void);
void sp_gguf_writer_free(sp_gguf_writer *w);
/* Setters copy their arguments; setting a key twice replaces it. */
void sp_gguf_set_u32(sp_gguf_writer *w, const char *key, uint32_t v);
void sp_gguf_set_i32(sp_gguf_writer *w, const char *key, int32_t v);
void sp_gguf_set_u64(sp_gguf_writer *w, const char *key, uint64_t v);
void sp_gguf_set_f32(sp_gguf_writer *w, const char *key, float v);
void sp_gguf_set_bool(sp_gguf_writer *w, const char *key, bool v);
void sp_gguf_set_str(sp_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not STRING/ARRAY); v points at the matching C type
 * (uint8_t .. double; bool for BOOL). */
void sp_gguf_set_scalar(sp_gguf_writer *w, const char *key, sp_gguf_vtype type, const void *v);
/* For elem_type STRING or ARRAY, data is the packed GGUF encoding of the n
 * elements (what sp_gguf_get_arr returns for such arrays) and must be valid. */
void sp_gguf_set_arr(sp_gguf_writer *w, const char *key, sp_gguf_vtype elem_type,
                     const void *data, uint64_t n);
void sp_gguf_set_arr_str(sp_gguf_writer *w, const char *key, const sp_gguf_str *v, uint64_t n);
/* Copies every key of src whose name starts with prefix (all when prefix is
 * NULL or ""). */
void sp_gguf_copy_kv(sp_gguf_writer *w, const sp_gguf *src, const char *prefix);
/* Adds a tensor; data (nbytes = sp_row_size(type, ne[0]) * ne[1]*ne[2]*ne[3])
 * is copied. */
void sp_gguf_add_tensor(sp_gguf_writer *w, const char *name, sp_type type, int n_dims,
                        const int64_t *ne, const void *data, size_t nbytes);
/* Writes version 3 with general.alignment (default 32). 0 on success, -1 and
 * err on failure. A bad argument to a setter or add function above (or an
 * allocation failure there) is reported here. */
int sp_gguf_writer_write(sp_gguf_writer *w, const char *path, char *err, size_t errlen);

/* Streaming, for tensors too large to hold in memory: declare them with
 * sp_gguf_add_tensor_info (no data), write the header with
 * sp_gguf_writer_begin, then pass the data of the declared tensors, in the
 * order they were added, to sp_gguf_writer_append in chunks of any size
 * (tensors added with data are written automatically at their turn), and
 * finish with sp_gguf_writer_end, which fails unless every tensor got
 * exactly its bytes. On any failure the partial file is removed; so it is
 * when the writer is freed before sp_gguf_writer_end. */
void sp_gguf_add_tensor_info(sp_gguf_writer *w, const char *name, sp_type type, int n_dims,
                             const int64_t *ne);
int sp_gguf_writer_begin(sp_gguf_writer *w, const char *path, char *err, size_t errlen);
int sp_gguf_writer_append(sp_gguf_writer *w, const void *data, size_t n, char *err, size_t errlen);
int sp_gguf_writer_end(sp_gguf_writer *w, char *err, size_t errlen);

#endif
