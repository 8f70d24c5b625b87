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

#include <stdbool.h>
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
    tensor_type type;     /* SP_TYPE_F16, SP_TYPE_F32 or SP_TYPE_Q8_0 (blocks of 32 along kv_dim) */
    int32_t n_layer;
    int32_t kv_dim;
    int32_t n_seq;
};

/* The first position a query seeing positions [0, n) sees through a sliding
 * window of win positions (its own included); 0 for win <= 0 (no window).
 * The attention kernels skip what lies before it; the paged store gives the
 * blocks wholly before it back. */
static inline int32_t kv_window_lo(int32_t n, int32_t win) { return win > 0 && n > win ? n - win : 0; }

/* The element type of a public sp_kv_type (an int: kv.h stays below specula.h). */
static inline tensor_type kv_tensor_type(int sp_kv_type) {
    return sp_kv_type == 1 ? SP_TYPE_F16 : sp_kv_type == 2 ? SP_TYPE_Q8_0 : SP_TYPE_F32;
}

/* Whether t can hold K/V rows of kv_dim elements (Q8_0: a multiple of 32). */
static inline bool kv_type_ok(tensor_type t, int32_t kv_dim) {
    return t == SP_TYPE_F16 || t == SP_TYPE_F32 || (t == SP_TYPE_Q8_0 && kv_dim % 32 == 0);
}

/* A contiguous store: n_seq sequences of up to n_ctx positions each, all
 * allocated up front ([n_seq][n_layer][n_ctx][kv_dim] for K and for V).
 * NULL + err when the allocation fails. */
kv_store *kv_simple_create(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                           int32_t n_ctx, char *err, size_t errlen);
size_t kv_simple_bytes(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t n_seq,
                          int32_t n_ctx);

#endif
