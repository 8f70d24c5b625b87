/* kv.h: the interface between attention and whatever stores K/V.
 *
 * Attention never assumes a sequence's K/V rows are contiguous: it asks for
 * spans of consecutive positions (kv_span), which a paged store answers one
 * block at a time and the simple contiguous store answers in one piece.
 *
 * Dimension legend:
 *   kv_dim  n_head_kv * head_dim: one K (or V) row per position and layer
 *   pos     position within a sequence, 0 .. len-1
 */
#ifndef SP_KV_H
#define SP_KV_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef struct kv_store kv_store;

typedef struct {
    /* Makes positions [len, len + n_new) of seq writable. 0, or -1 when the
     * store cannot hold them (nothing changes then). */
    int (*reserve)(kv_store *kv, int32_t seq, int32_t n_new);
    /* Rows to write K and V of (layer, seq, pos); pos must be reserved. */
    void *(*k_row)(kv_store *kv, int32_t layer, int32_t seq, int32_t pos);
    void *(*v_row)(kv_store *kv, int32_t layer, int32_t seq, int32_t pos);
    /* The longest run of positions pos.. (at most end - pos) stored with a
     * constant row stride (kv_dim elements): *k and *v point at position
     * pos's rows. Returns the run length (>= 1 when pos < end). */
    int32_t (*span)(kv_store *kv, int32_t layer, int32_t seq, int32_t pos, int32_t end,
                    const void **k, const void **v);
    int32_t (*len)(const kv_store *kv, int32_t seq);
    /* Sets the committed length: after a forward pass (len + n_new) or to
     * cut back (speculative rollback, clearing). */
    void (*set_len)(kv_store *kv, int32_t seq, int32_t len);
    void (*destroy)(kv_store *kv);
} kv_ops;

struct kv_store {
    const kv_ops *ops;
    tensor_type type;     /* SP_TYPE_F16 or SP_TYPE_F32 */
    int32_t n_layer;
    int32_t kv_dim;
    int32_t n_seq;
};

/* A contiguous store: n_seq sequences of up to n_ctx positions each, all
 * allocated up front ([n_seq][n_layer][n_ctx][kv_dim] for K and for V).
 * NULL + err when the allocation fails. */
kv_store *kv_simple_create(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                           int32_t n_ctx, char *err, size_t errlen);
size_t kv_simple_bytes(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                          int32_t n_ctx);

#endif
