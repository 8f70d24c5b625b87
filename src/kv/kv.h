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

typedef struct sp_kv sp_kv;

typedef struct {
    /* Makes positions [len, len + n_new) of seq writable. 0, or -1 when the
     * store cannot hold them (nothing changes then). */
    int (*reserve)(sp_kv *kv, int32_t seq, int32_t n_new);
    /* Rows to write K and V of (layer, seq, pos); pos must be reserved. */
    void *(*k_row)(sp_kv *kv, int32_t layer, int32_t seq, int32_t pos);
    void *(*v_row)(sp_kv *kv, int32_t layer, int32_t seq, int32_t pos);
    /* The longest run of positions pos.. (at most end - pos) stored with a
     * constant row stride (kv_dim elements): *k and *v point at position
     * pos's rows. Returns the run length (>= 1 when pos < end). */
    int32_t (*span)(sp_kv *kv, int32_t layer, int32_t seq, int32_t pos, int32_t end,
                    const void **k, const void **v);
    int32_t (*len)(const sp_kv *kv, int32_t seq);
    /* Sets the committed length: after a forward pass (len + n_new) or to
     * cut back (speculative rollback, clearing). */
    void (*set_len)(sp_kv *kv, int32_t seq, int32_t len);
    void (*destroy)(sp_kv *kv);
} sp_kv_ops;

struct sp_kv {
    const sp_kv_ops *ops;
    sp_type type;     /* SP_TYPE_F16 or SP_TYPE_F32 */
    int32_t n_layer;
    int32_t kv_dim;
    int32_t n_seq;
};

/* A contiguous store: n_seq sequences of up to n_ctx positions each, all
 * allocated up front ([n_seq][n_layer][n_ctx][kv_dim] for K and for V).
 * NULL + err when the allocation fails. */
sp_kv *sp_kv_simple_create(sp_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                           int32_t n_ctx, char *err, size_t errlen);
size_t sp_kv_simple_bytes(sp_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                          int32_t n_ctx);

#endif
