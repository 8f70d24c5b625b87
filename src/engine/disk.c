/* disk.c: the engine's side of the prefix cache's disk tier
 * (src/kv/disk_tier.h, --kv-disk).
 *
 *   write    a block is queued for the tier when it becomes a cached block
 *            of the RAM cache (eng_commit_blocks: full, committed; a
 *            speculating request commits only verified tokens), as a copy,
 *            so the writer thread never touches the pool; a full queue
 *            skips it (the engine never waits)
 *   restore  at admission, where the RAM chain's match ends, the match goes
 *            on block by block along the same hash chain: a block resident
 *            in RAM is taken by reference, one on disk is read, checked
 *            (tokens, layout, checksum) and copied into a pool block that
 *            becomes an ordinary cached block of the request
 *   cost     each restore is timed (moving average per block), and every
 *            forward pass of >= 8 tokens gives the prefill cost per token;
 *            a block is restored only while its measured cost is below
 *            block_size tokens of prefill. Prefill per token only grows with
 *            the position (attention), so the mean per-token cost is the
 *            cheapest a block can be computed for: the rule never restores
 *            what computing would have done faster. Until both are measured
 *            (the first requests after a start) it restores, which measures
 *            the restore side. Declined blocks are counted.
 * Engine thread, under the engine lock (a restore holds it for its reads).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

#define EMA_KEEP 0.8
#define PREFILL_MIN_TOKENS 8

static int hash_model(void *ctx, uint8_t out[32]) { return model_file_hash(ctx, out); }

/* The tier keys rows on the engine's fingerprint mixed with the SHA-256 of
 * the whole model file (cached in DIR by the file's identity): the sampled
 * fingerprint alone let a model differing in the middle of a matrix restore
 * another's K/V. The block hashes then use the same key, set here before
 * any request is hashed. */
int eng_disk_open(sp_engine *e, char *err, size_t errlen) {
    if (!e->p.kv_disk_dir) return SP_OK;
    if (!e->p.prefix_cache) {
        seterr(err, errlen, "--kv-disk needs the prefix cache (remove --no-prefix-cache)");
        return SP_ERR_INVALID;
    }
    const sp_model_info *h = sp_model_get_info(e->m);
    disk_tier_params dp = {0};
    dp.dir = e->p.kv_disk_dir;
    dp.max_bytes = e->p.kv_disk_size ? e->p.kv_disk_size : SP_DISK_DEFAULT_SIZE;
    memcpy(dp.fp, e->model_key, sizeof(dp.fp));
    const gguf_file_id id = gguf_file_identity(e->m->gguf);
    dp.file_id = (disk_file_id){id.dev, id.ino, id.size, id.mtime_ns, id.ctime_ns};
    dp.hash_file = hash_model;
    dp.hash_ctx = (void *)e->m;
    dp.kv_type = kv_tensor_type(e->p.kv_type);
    dp.block_size = e->p.kv_block_size;
    dp.n_layer = h->n_layer;
    dp.kv_dim = h->n_head_kv * h->head_dim;
    e->disk.tier = disk_tier_open(&dp, err, errlen);
    if (!e->disk.tier) return SP_ERR_INVALID;
    disk_tier_fp(e->disk.tier, e->model_key);
    e->disk.buf = malloc(disk_tier_block_bytes(e->disk.tier));
    e->disk.put_buf = malloc(disk_tier_block_bytes(e->disk.tier));
    if (!e->disk.buf || !e->disk.put_buf) {
        seterr(err, errlen, "out of memory for the disk tier");
        return SP_ERR_NOMEM;
    }
    return SP_OK;
}

void eng_disk_close(sp_engine *e) {
    disk_tier_close(e->disk.tier);
    e->disk.tier = NULL;
    free(e->disk.buf);
    free(e->disk.put_buf);
    e->disk.buf = e->disk.put_buf = NULL;
}

void eng_disk_put(sp_engine *e, request *r, int32_t block) {
    if (!e->disk.tier) return;
    /* a copy of every layer's K/V (with sliding layers, from both pools) */
    if (kv_paged_block_read(e->kv, r->slot, block, e->disk.put_buf)) return;
    disk_tier_put(e->disk.tier, &r->hashes[block], r->toks + (size_t)block * e->p.kv_block_size,
                     e->disk.put_buf);
}

void eng_disk_observe(sp_engine *e, int32_t n_tok, double ms) {
    if (!e->disk.tier || n_tok < PREFILL_MIN_TOKENS || ms <= 0) return;
    const double per = ms / n_tok;
    e->disk.prefill_ms_tok = e->disk.prefill_ms_tok > 0 ? EMA_KEEP * e->disk.prefill_ms_tok + (1 - EMA_KEEP) * per
                                              : per;
}

bool eng_disk_restore_pays(double restore_ms_block, double prefill_ms_tok, int32_t block_size) {
    if (restore_ms_block <= 0 || prefill_ms_tok <= 0) return true; /* not measured yet */
    return restore_ms_block < block_size * prefill_ms_tok;
}

static bool restore_pays(const sp_engine *e) {
    return eng_disk_restore_pays(e->disk.ms_block, e->disk.prefill_ms_tok, e->p.kv_block_size);
}

int32_t eng_disk_restore(sp_engine *e, request *r, int32_t from, int32_t usable,
                         int32_t *from_disk) {
    *from_disk = 0;
    if (!e->disk.tier) return 0;
    const int32_t bs = e->p.kv_block_size;
    int32_t got = 0;
    for (int32_t j = from; j < usable; j++, got++) {
        const block_digest *h = &r->hashes[j];
        if (kv_paged_resident(e->kv, h)) { /* the chain went on in RAM after a gap */
            if (kv_paged_append(e->kv, r->slot, h, NULL)) break;
            continue;
        }
        if (!restore_pays(e)) {
            for (int32_t k = j; k < usable && disk_tier_has(e->disk.tier, &r->hashes[k]); k++)
                e->disk.declined++;
            break;
        }
        const double t0 = time_ms();
        if (disk_tier_get(e->disk.tier, h, r->toks + (size_t)j * bs, e->disk.buf)) break;
        if (kv_paged_append(e->kv, r->slot, h, e->disk.buf)) break;
        const double ms = time_ms() - t0;
        e->disk.ms_block = e->disk.ms_block > 0
                               ? EMA_KEEP * e->disk.ms_block + (1 - EMA_KEEP) * ms
                               : ms;
        e->disk.restore_ms += ms;
        e->disk.restored++;
        (*from_disk)++;
    }
    return got;
}

void eng_disk_stats(sp_engine *e, sp_engine_stats *st) {
    if (!e->disk.tier) return;
    disk_tier_stats d;
    disk_tier_get_stats(e->disk.tier, &d);
    st->disk_on = !d.broken;
    st->disk_blocks = d.blocks;
    st->disk_bytes = d.bytes;
    st->disk_cap_bytes = d.cap_bytes;
    st->disk_writes = d.writes;
    st->disk_skipped_queue = d.skipped_queue;
    st->disk_skipped_cap = d.skipped_cap;
    st->disk_skipped_error = d.skipped_error;
    st->disk_evictions = d.evictions;
    st->disk_corrupt = d.corrupt;
    st->disk_set_aside = d.set_aside;
    st->disk_restored = e->disk.restored;
    st->disk_restore_ms = e->disk.restore_ms;
    st->disk_declined = e->disk.declined;
}
