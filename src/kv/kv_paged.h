/* kv_paged.h: the paged KV store (one pool of fixed-size blocks, a block
 * table per sequence) and the prefix cache that lives in it.
 *
 * The store implements the kv_store interface of kv.h, so the forward pass
 * reads and writes it exactly like the contiguous store; everything else
 * here is for the engine (admission, prefix reuse, commit, preemption).
 *
 * Dimension legend:
 *   bs       block_size: positions per block (default 16)
 *   kv_dim   n_head_kv * head_dim
 *   NB       n_blocks in the pool, sized from a memory budget
 *   S        n_seq slots (the engine's max running sequences)
 *
 * Block states (every block is in exactly one; kv_paged_check proves it):
 *   FREE     refcount 0, no hash, on the free list
 *   CACHED   refcount 0, hashed (holds a full block of committed tokens that
 *            a later prompt may reuse), on the LRU list, findable by hash
 *   IN USE   refcount >= 1 = number of block-table entries pointing at it;
 *            hashed or not (a hashed in-use block is shared by reference)
 * Allocation takes a FREE block, else evicts the least recently released
 * CACHED block (its hash is forgotten first, so an evicted block is never
 * found again). Releasing a sequence returns its blocks tail first, so among
 * blocks released together the tail is evicted before the head.
 *
 * Not thread-safe: the engine thread owns the store.
 */
#ifndef SP_KV_PAGED_H
#define SP_KV_PAGED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv.h"

/* A block's identity in the prefix cache: SHA-256 over the parent's hash,
 * the block's token ids and extra keys (see block_hash_chain). */
typedef struct {
    uint8_t b[32];
} block_digest;

typedef struct {
    tensor_type type;        /* SP_TYPE_F16 (default) or SP_TYPE_F32 */
    int32_t n_layer;
    int32_t kv_dim;
    int32_t block_size;  /* positions per block, 1..4096 (default 16) */
    int32_t n_blocks;    /* pool size, >= 1 */
    int32_t n_seq;       /* sequence slots */
    int32_t max_blocks_per_seq; /* block-table length: ceil(n_ctx / block_size) */
    bool prefix_cache;   /* false: commit() never caches, match() never hits */
    /* Sliding-window layers (0 / NULL: none). Layer l with slides[l] attends
     * only to the last `window` positions; its K/V live in a second pool of
     * window_blocks blocks (block_size positions of the sliding layers
     * only), where a sequence holds only the blocks its next query can
     * see: reserve() gives back every block wholly before len - window + 1
     * (a hashed one stays CACHED, findable). n_layer counts every layer;
     * the main pool's blocks hold the others (possibly none). */
    int32_t window;
    const bool *slides;   /* [n_layer], read at creation only */
    int32_t window_blocks;
} kv_paged_params;

/* Bytes of K+V one block holds: 2 * n_layer * block_size * kv_dim * elem
 * (n_layer: every layer; with sliding layers, the main pool's block holds
 * the others and the window pool's block the sliding ones, together this). */
size_t kv_paged_block_bytes(tensor_type type, int32_t n_layer, int32_t kv_dim, int32_t block_size);

/* Creates the store with all blocks FREE. NULL + err on bad parameters or
 * when the pool cannot be allocated. Destroy with kv->ops->destroy. */
kv_store *kv_paged_create(kv_paged_params p, char *err, size_t errlen);

/* kv_store ops semantics for the paged store:
 *   reserve(seq, n)  allocates the blocks positions [len, len+n) need (FREE
 *                    first, then evicting CACHED); -1 and nothing changed
 *                    when the pool (or the block table) cannot hold them.
 *                    A smaller n than an earlier reservation gives back
 *                    the blocks no longer needed (reserved = len + n).
 *   set_len(seq, L)  L <= reserved (L > len commits a forward pass). Blocks
 *                    wholly past L are released tail first (refcount -1; at
 *                    0 a hashed block becomes CACHED, else FREE). Also
 *                    drops unused reservations (reserved = L). set_len(seq,
 *                    0) frees a slot entirely.
 * A block that is shared (refcount > 1) or hashed is never written: the
 * engine only attaches full cached blocks and always computes at least the
 * last prompt token into a block of its own. k_row asserts this. */

/* ---- prefix cache -------------------------------------------------------- */

/* Hashes of the full blocks of tokens[0..n): n / block_size hashes written
 * to out (returns that count; a partial trailing block is not hashed; -1 if
 * libcrypto fails, i.e. out of memory). Block i hashes (hash of block i-1
 * or, for i = 0, 32 zero bytes; its block_size token ids as little-endian
 * int32; extra, which the engine makes the model's identity, and for block 0
 * only the salt). Exact bytes fed to SHA-256, in order: parent[32],
 * tokens[block_size] as int32 LE, extra_len as uint64 LE, extra[extra_len],
 * and for block 0 only: salt_len as uint64 LE, salt[salt_len]. Different
 * salt or extra => different chain. */
int32_t block_hash_chain(const int32_t *tokens, int32_t n, int32_t block_size,
                            const uint8_t *extra, size_t extra_len,
                            const uint8_t *salt, size_t salt_len, block_digest *out);

/* The same chain when out[0..from) already holds its first from hashes
 * (token prefixes only grow, so a request hashes each block once): computes
 * blocks from .. n / block_size - 1 and returns n / block_size, or -1. */
int32_t block_hash_extend(const int32_t *tokens, int32_t n, int32_t block_size,
                             const uint8_t *extra, size_t extra_len, const uint8_t *salt,
                             size_t salt_len, block_digest *out, int32_t from);

/* Number of leading hashes whose blocks are resident (IN USE or CACHED),
 * 0 when the cache is off. With sliding layers: the longest such prefix
 * of n' blocks for which the window pool also holds the blocks a query at
 * position n' * block_size sees (an evicted window block makes the prefix
 * shorter, never wrong). Read-only: changes no LRU order. */
int32_t kv_paged_match(const kv_store *kv, const block_digest *h, int32_t n);

/* Points an empty slot's first n table entries at the resident blocks of
 * h[0..n) (a CACHED block leaves the LRU and becomes IN USE; refcounts +1)
 * and sets len = n * block_size; in the window pool only the blocks of the
 * last window. The caller has checked with match() in the same step. -1
 * if the slot is not empty or a block is not resident. */
int kv_paged_attach(kv_store *kv, int32_t seq, const block_digest *h, int32_t n);

/* Marks table entry `block` of seq (full of committed tokens: asserts
 * (block + 1) * block_size <= len, so call it after set_len) with hash h
 * so later prompts can find it. A no-op when the cache is off, when the
 * block is already hashed, or when another resident block already has h
 * (that one stays the findable copy). */
void kv_paged_commit(kv_store *kv, int32_t seq, int32_t block, const block_digest *h);

/* Appends one full block with hash h to seq, whose committed length must be
 * a multiple of block_size with nothing reserved past it: the resident block
 * with h when there is one (as attach does), else, when data is not NULL, a
 * block taken from the pool (FREE, else evicting CACHED) into which
 * block_bytes of data (this store's layout) are copied and which is then
 * hashed with h. len grows by block_size. This is how the disk tier's
 * restored blocks become ordinary cached blocks. 0, or -1 and nothing
 * changed (table full, no block available, h not resident and no data). */
int kv_paged_append(kv_store *kv, int32_t seq, const block_digest *h, const void *data);

/* Whether a block with hash h is resident (IN USE or CACHED), in the
 * window pool too where there is one. */
bool kv_paged_resident(const kv_store *kv, const block_digest *h);

/* Copies the K/V of table entry `block` of seq into out (block_bytes of
 * every layer: the main pool's part, then the window pool's), for the disk
 * tier. 0, or -1 when seq holds no such block (or no longer its window
 * part). */
int kv_paged_block_read(const kv_store *kv, int32_t seq, int32_t block, void *out);

/* Evicts every CACHED block (they become FREE). Returns how many. */
int32_t kv_paged_flush(kv_store *kv);

typedef struct {
    int32_t n_blocks, block_size;
    int32_t n_free, n_cached, n_in_use; /* sum = n_blocks */
    int32_t n_shared;            /* in-use blocks with refcount > 1 */
    uint64_t evictions;          /* CACHED blocks reused for new data */
    uint64_t flushed;            /* CACHED blocks dropped by flush */
    size_t block_bytes;
    size_t cached_bytes;         /* n_cached * block_bytes: KV kept for reuse */
    /* the window pool (all 0 without sliding layers) */
    int32_t win_blocks, win_in_use, win_cached;
    size_t win_block_bytes;
    size_t pool_bytes;           /* both pools */
} kv_paged_stats;

void kv_paged_get_stats(const kv_store *kv, kv_paged_stats *st);

/* Blocks a reservation of n_new more positions for seq would take from the
 * pool (0 when the current last block has room). */
int32_t kv_paged_blocks_needed(const kv_store *kv, int32_t seq, int32_t n_new);
/* Blocks that could be handed out now: FREE + CACHED. */
int32_t kv_paged_available(const kv_store *kv);

/* The invariant checker: every block in exactly one state; each refcount
 * equals the number of table entries naming it; the free list, LRU list and
 * hash table agree with the states; no table names a FREE or CACHED block;
 * each slot's table covers exactly ceil(reserved / block_size) blocks.
 * 0 when all hold, else -1 and the first violation in err. */
int kv_paged_check(const kv_store *kv, char *err, size_t errlen);

/* For tests: the pool block id behind table entry `block` of seq (-1 if
 * none), and its refcount. */
int32_t kv_paged_block_id(const kv_store *kv, int32_t seq, int32_t block);
int32_t kv_paged_refcount(const kv_store *kv, int32_t block_id);

#endif
