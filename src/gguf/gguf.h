/* gguf.h: reading (memory-mapped, validated) and writing GGUF files,
 * versions 2 and 3.
 *
 * Reading: gguf_open() maps the file read-only and validates every
 * offset, size, count and string length against the file before anything
 * else may touch it; a truncated, corrupt or hostile file fails with a
 * message naming what is wrong. After a successful open every pointer the
 * getters return stays valid until gguf_close().
 *
 * Strings in GGUF are length-prefixed, not NUL-terminated: they are returned
 * as gguf_str views into the mapping. Key and tensor names are also
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
} gguf_vtype;

typedef struct {
    const char *p; /* not NUL-terminated */
    uint64_t n;    /* bytes */
} gguf_str;

#define SP_GGUF_MAX_DIMS 4

typedef struct {
    const char *name;               /* NUL-terminated (owned by the gguf_file) */
    int n_dims;                     /* 1..4 */
    int64_t ne[SP_GGUF_MAX_DIMS];   /* ne[0] innermost (row length); unused dims = 1 */
    tensor_type type;
    uint64_t offset;                /* from the start of the data section */
    size_t nbytes;
    const void *data;               /* into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens and validates path. Returns NULL and writes a message into err on
 * any failure (I/O, bad magic, unsupported version, truncation, out-of-range
 * offsets, unknown value or tensor types, duplicate keys or tensor names,
 * overlapping tensors, dims whose product overflows). Tensor types that are
 * valid GGML types but have no kernels here are accepted by the reader;
 * type_info(type)->supported tells. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
void gguf_close(gguf_file *g);

uint32_t gguf_version(const gguf_file *g);
size_t gguf_alignment(const gguf_file *g);
size_t gguf_file_size(const gguf_file *g);
/* The whole mapped file (gguf_file_size bytes; NULL for an empty one). */
const void *gguf_file_bytes(const gguf_file *g);

/* The file's identity when it was opened (fstat of the descriptor that was
 * mapped): any write to the file, or its replacement, changes ctime, inode
 * or size, so an unchanged identity means unchanged bytes (see
 * model_file_hash for what caches on it). */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} gguf_file_id;
gguf_file_id gguf_file_identity(const gguf_file *g);

/* ---- metadata ---- */
int64_t gguf_n_kv(const gguf_file *g);
int64_t gguf_find_key(const gguf_file *g, const char *key); /* -1 if absent */
const char *gguf_key(const gguf_file *g, int64_t i);
gguf_vtype gguf_kv_type(const gguf_file *g, int64_t i);

/* Typed getters by key. Return false when the key is absent or has a type
 * that cannot represent the request (integers convert between widths only
 * when the value fits; floats accept FLOAT32/FLOAT64). *out is untouched on
 * false. */
bool gguf_get_i64(const gguf_file *g, const char *key, int64_t *out);
bool gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out);
bool gguf_get_f32(const gguf_file *g, const char *key, float *out);
bool gguf_get_bool(const gguf_file *g, const char *key, bool *out);
bool gguf_get_str(const gguf_file *g, const char *key, gguf_str *out);

/* Arrays: element type and count; for non-string element types *data points
 * at the packed little-endian elements in the mapping. Nested arrays are
 * validated but have no accessor. */
bool gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype *elem_type,
                     uint64_t *n, const void **data);
/* Element i of a string array (O(1); offsets are indexed at open).
 * {NULL, 0} when key is absent, not a string array, or i is out of range. */
gguf_str gguf_arr_str(const gguf_file *g, const char *key, uint64_t i);
/* The encoded bytes of kv i's value as stored in the file (everything after
 * its value type id), e.g. to copy a value verbatim. false if i is out of
 * range. */
bool gguf_kv_raw(const gguf_file *g, int64_t i, const void **data, size_t *n);

/* Human-readable value of kv i (arrays abbreviated), for `specula info`. */
void gguf_kv_format(const gguf_file *g, int64_t i, char *buf, size_t len);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name); /* NULL if absent */

/* ---- writing ---- */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_create(void);
void gguf_writer_free(gguf_writer *w);
/* Setters copy their arguments; setting a key twice replaces it. */
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_set_f32(gguf_writer *w, const char *key, float v);
void gguf_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_set_str(gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not STRING/ARRAY); v points at the matching C type
 * (uint8_t .. double; bool for BOOL). */
void gguf_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v);
/* For elem_type STRING or ARRAY, data is the packed GGUF encoding of the n
 * elements (what gguf_get_arr returns for such arrays) and must be valid. */
void gguf_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type,
                     const void *data, uint64_t n);
void gguf_set_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n);
/* Copies every key of src whose name starts with prefix (all when prefix is
 * NULL or ""). */
void gguf_copy_kv(gguf_writer *w, const gguf_file *src, const char *prefix);
/* Adds a tensor; data (nbytes = row_size(type, ne[0]) * ne[1]*ne[2]*ne[3])
 * is copied. */
void gguf_add_tensor(gguf_writer *w, const char *name, tensor_type type, int n_dims,
                        const int64_t *ne, const void *data, size_t nbytes);
/* Writes version 3 with general.alignment (default 32). 0 on success, -1 and
 * err on failure. A bad argument to a setter or add function above (or an
 * allocation failure there) is reported here. */
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);

/* Streaming, for tensors too large to hold in memory: declare them with
 * gguf_add_tensor_info (no data), write the header with
 * gguf_writer_begin, then pass the data of the declared tensors, in the
 * order they were added, to gguf_writer_append in chunks of any size
 * (tensors added with data are written automatically at their turn), and
 * finish with gguf_writer_end, which fails unless every tensor got
 * exactly its bytes. On any failure the partial file is removed; so it is
 * when the writer is freed before gguf_writer_end. */
void gguf_add_tensor_info(gguf_writer *w, const char *name, tensor_type type, int n_dims,
                             const int64_t *ne);
int gguf_writer_begin(gguf_writer *w, const char *path, char *err, size_t errlen);
int gguf_writer_append(gguf_writer *w, const void *data, size_t n, char *err, size_t errlen);
int gguf_writer_end(gguf_writer *w, char *err, size_t errlen);

#endif
