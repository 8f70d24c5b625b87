/* disk_tier.h: the prefix cache's second tier, on disk (--kv-disk DIR).
 *
 * Full committed KV blocks are kept in an SQLite database (WAL mode) under
 * DIR, keyed by the same block hash the RAM prefix cache uses
 * (block_hash_chain: parent, tokens, model fingerprint, salt), so tenants
 * and models stay apart exactly as in RAM. The tier outlives the process: a
 * restarted engine with the same DIR and model finds its old prefixes.
 *
 * Files under DIR (DIR 0700, files 0600):
 *   lock          flock'ed exclusively while a process uses DIR (a second
 *                 process is refused: disk_tier_open fails naming it)
 *   kv.sqlite     the store (+ kv.sqlite-wal, kv.sqlite-shm)
 *   kv.sqlite.bad-<time>  a store that was corrupt, truncated, foreign or of
 *                 an older format, set aside (renamed) with one warning
 * The tier owns DIR: it refuses to start on a DIR that is not the server's
 * own and private, below a directory others may write, or holding a lock or
 * store file that is a symlink, not a regular file, another user's, hard
 * linked or readable by others (disk_fs.c says why and what it costs).
 *
 * Schema (format version SP_DISK_FORMAT in table meta):
 *   blocks(id INTEGER PRIMARY KEY, hash BLOB(32), fp BLOB(32), kv_type,
 *          block_size, n_layer, kv_dim, version, tokens BLOB (block_size
 *          int32 LE), sum INTEGER, kv BLOB (block_bytes))
 *   lru(id INTEGER PRIMARY KEY (= blocks.id), used INTEGER): the LRU clock,
 *          in its own table because an UPDATE rewrites a whole row
 *   unique index on (hash, fp, kv_type, block_size, n_layer, kv_dim): a
 *   row is found only by an engine of the same model fingerprint, KV type
 *   and layout; other models' rows coexist and are never read.
 *   model_hash(dev, ino, size, mtime_ns, ctime_ns, sha, used): the model
 *   files' SHA-256 by file identity (disk_hash.c), so a restart need not
 *   read the whole model again to compute the fingerprint.
 * sum is a 64-bit checksum (disk_sum, 4-lane multiply-rotate, ours, not
 * SQLite's) over version, fp, kv_type, layout, hash, tokens and kv: a row
 * whose fields, tokens or checksum do not match is never restored (it is
 * counted as corrupt and deleted).
 *
 * Threads: the engine thread calls put/has/get (get reads on its own
 * connection); one background writer thread owns a second connection and
 * does every write: inserts from a bounded queue of block copies, LRU
 * touches, deletions, and eviction of the least recently used rows to stay
 * under the cap. put never waits: when the queue is full the block is
 * skipped and counted. The LRU order is a counter lru.used set at insert
 * and at every restore (approximate: touches go through a bounded ring too).
 *
 * Damage at run time (SQLite reports corruption or an I/O error) turns the
 * tier off for this process with one warning; the store is set aside at
 * the next open. Damage found at open (header, format version, schema,
 * PRAGMA quick_check) sets it aside at once and starts an empty store.
 */
#ifndef SP_DISK_TIER_H
#define SP_DISK_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_paged.h"

#define SP_DISK_FORMAT 2
#define SP_DISK_DEFAULT_SIZE ((uint64_t)4 << 30)

typedef struct disk_tier disk_tier;

/* A file's identity (as gguf_file_id): device, inode, size, mtime and
 * ctime in nanoseconds. */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} disk_file_id;

/* Writes the SHA-256 of every byte of the model file; 0, or -1. */
typedef int (*disk_hash_fn)(void *ctx, uint8_t out[32]);

typedef struct {
    const char *dir;
    uint64_t max_bytes;   /* cap on the rows' bytes (tokens + K/V + a fixed overhead) */
    uint8_t fp[32];       /* the model fingerprint (without hash_file: the one rows are keyed on) */
    /* optional: the model file's hash, mixed into fp at open (the result is
     * disk_tier_fp): looked up in the store by file_id, and computed by
     * hash_file(hash_ctx) (then stored) only when missing */
    disk_hash_fn hash_file;
    void *hash_ctx;
    disk_file_id file_id;
    int32_t kv_type;      /* tensor_type: SP_TYPE_F16 or SP_TYPE_F32 */
    int32_t block_size, n_layer, kv_dim;
    int32_t queue_blocks; /* write queue slots (0: min(256, 64 MiB of blocks), >= 2) */
    bool quiet;           /* no warnings on stderr (tests) */
} disk_tier_params;

typedef struct {
    uint64_t blocks, bytes, cap_bytes; /* rows (all models and layouts) and their bytes */
    uint64_t writes;              /* blocks written */
    uint64_t skipped_queue;       /* blocks not written: the queue was full */
    uint64_t skipped_cap;         /* ... larger than the cap */
    uint64_t skipped_error;       /* ... the write failed (disk full, I/O error) */
    uint64_t evictions;           /* rows deleted to stay under the cap */
    uint64_t hits, misses;        /* get(): restored, not found */
    uint64_t corrupt;             /* get(): rows rejected (fields, tokens or checksum) */
    uint64_t set_aside;           /* stores renamed away at open (0 or 1) */
    uint64_t touches_dropped;     /* LRU touches lost to a full ring */
    bool broken;                  /* turned off after damage at run time */
    bool hash_cached;             /* the model file's hash came from the store's cache */
    double hash_ms;               /* time spent at open getting it (hash or lookup) */
} disk_tier_stats;

/* Opens (creating DIR 0700 and the store 0600 when missing) and starts the
 * writer. NULL + err when DIR cannot be made or used or is not trusted
 * (see above), when another process holds its lock, when the model file
 * cannot be hashed, or when SQLite cannot open a store even after setting a
 * damaged one aside. */
disk_tier *disk_tier_open(const disk_tier_params *p, char *err, size_t errlen);
/* The fingerprint rows are keyed on (p.fp, mixed with the model file's
 * hash when p.hash_file was given): the engine's block hashes use it too. */
void disk_tier_fp(const disk_tier *t, uint8_t out[32]);
/* Writes what is queued, stops the writer, closes the store. */
void disk_tier_close(disk_tier *t);

size_t disk_tier_block_bytes(const disk_tier *t);

/* Engine thread. Queues a copy of a full committed block (tokens: its
 * block_size ids; kv: block_bytes in the pool's layout) unless the store
 * or the queue already has it. 0 queued, 1 already stored, 2 skipped (queue full, too
 * large for the cap, or the tier is off). Never waits for the writer. */
int disk_tier_put(disk_tier *t, const block_digest *h, const int32_t *tokens,
                     const void *kv);
/* Whether the store has h (for this model and layout). */
bool disk_tier_has(disk_tier *t, const block_digest *h);
/* Reads h into kv (block_bytes) after checking that the row's fields,
 * tokens (must equal `tokens`) and checksum all match; queues an LRU touch.
 * A block still in the write queue is restored from the queue's copy (its
 * tokens checked). 0 restored; 1 not found; -1 rejected (the row is queued
 * for deletion; kv may hold garbage and must not be used). */
int disk_tier_get(disk_tier *t, const block_digest *h, const int32_t *tokens, void *kv);

/* Any thread. */
void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st);
/* Waits until the writer has done everything queued so far (tests). */
void disk_tier_sync(disk_tier *t);
/* Invariants (after sync): the store's rows and bytes equal the counts,
 * bytes <= cap, no row of this layout has a bad checksum (reads them all).
 * 0, or -1 + err. */
int disk_tier_check(disk_tier *t, char *err, size_t errlen);

/* The checksum (exposed for tests and the fuzz target). */
uint64_t disk_sum(uint64_t seed, const void *data, size_t n);

/* For the fuzz target: opens the SQLite file at path read-only as a store
 * and reads every row the way get() does (checks included). Returns rows
 * that passed, or -1 when the file is not a usable store. Never crashes on
 * a damaged file. */
int64_t disk_tier_scan_file(const char *path, int32_t block_size, size_t block_bytes);

#endif
