/* stores.c: the disk tier's store, SQLite (as the tier uses it: WAL, a
 * background writer, checked reads) against LMDB (a plain put/get of the
 * same rows), per block: write cost, restore latency (warm page cache), and
 * what each does when its file is damaged. `make bin/kv_disk_stores`;
 * bench/kv_disk/run.sh runs it.
 *
 *   kv_disk_stores DIR N_LAYER KV_DIM BLOCK_SIZE N_BLOCKS
 */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "kv/disk_tier.h"

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void make_block(int i, size_t bb, int32_t bs, block_digest *h, int32_t *tok, uint8_t *kv) {
    uint64_t s = 99 + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    for (int j = 0; j < 32; j++) h->b[j] = (uint8_t)rng(&s);
    for (int j = 0; j < bs; j++) tok[j] = (int32_t)(rng(&s) % 32000);
    for (size_t j = 0; j < bb; j += 8) {
        uint64_t w = rng(&s);
        memcpy(kv + j, &w, SP_MIN((size_t)8, bb - j));
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static int lmdb_run(const char *dir, size_t bb, int32_t bs, int n, double *w_ms, double *r_ms) {
    MDB_env *env;
    MDB_dbi dbi;
    MDB_txn *txn;
    mkdir(dir, 0700);
    if (mdb_env_create(&env) || mdb_env_set_mapsize(env, (size_t)8 << 30) ||
        mdb_env_open(env, dir, 0, 0600))
        return -1;
    block_digest h;
    int32_t tok[4096];
    uint8_t *kv = malloc(bb), *row = malloc(bb + 4 * (size_t)bs);
    double t0 = time_ms();
    for (int i = 0; i < n; i++) {
        make_block(i, bb, bs, &h, tok, kv);
        memcpy(row, tok, 4 * (size_t)bs);
        memcpy(row + 4 * (size_t)bs, kv, bb);
        /* one transaction per block: each becomes durable on its own, as a
         * crash-safe tier wants (the SQLite tier batches what is queued) */
        mdb_txn_begin(env, NULL, 0, &txn);
        mdb_dbi_open(txn, NULL, 0, &dbi);
        MDB_val k = {32, h.b}, v = {bb + 4 * (size_t)bs, row};
        if (mdb_put(txn, dbi, &k, &v, 0) || mdb_txn_commit(txn)) return -1;
    }
    *w_ms = (time_ms() - t0) / n;
    double *lat = malloc(sizeof(double) * (size_t)n);
    uint8_t *out = malloc(bb);
    for (int i = 0; i < n; i++) {
        make_block(i, bb, bs, &h, tok, kv);
        double t = time_ms();
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
        MDB_val k = {32, h.b}, v;
        int rc = mdb_get(txn, dbi, &k, &v);
        /* the same checks the tier does: tokens, then a checksum pass */
        if (!rc && v.mv_size == bb + 4 * (size_t)bs && !memcmp(v.mv_data, tok, 4 * (size_t)bs)) {
            volatile uint64_t sum = disk_sum(1, (const uint8_t *)v.mv_data + 4 * bs, bb);
            (void)sum;
            memcpy(out, (const uint8_t *)v.mv_data + 4 * bs, bb);
        }
        mdb_txn_abort(txn);
        lat[i] = time_ms() - t;
    }
    *r_ms = median(lat, n);
    mdb_env_close(env);
    free(kv);
    free(row);
    free(out);
    free(lat);
    return 0;
}

static int sqlite_run(const char *dir, int32_t nl, int32_t kvd, int32_t bs, int n, double *w_ms,
                      double *r_ms, double *open_ms) {
    disk_tier_params p = {0};
    char err[512];
    p.dir = dir;
    p.max_bytes = (uint64_t)8 << 30;
    p.kv_type = SP_TYPE_F16;
    p.block_size = bs;
    p.n_layer = nl;
    p.kv_dim = kvd;
    p.queue_blocks = 64;
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    if (!t) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    size_t bb = disk_tier_block_bytes(t);
    block_digest h;
    int32_t tok[4096];
    uint8_t *kv = malloc(bb);
    double t0 = time_ms();
    for (int i = 0; i < n; i++) {
        make_block(i, bb, bs, &h, tok, kv);
        while (disk_tier_put(t, &h, tok, kv) == 2) usleep(100); /* queue full: wait here */
    }
    disk_tier_sync(t);
    *w_ms = (time_ms() - t0) / n;
    disk_tier_close(t);
    t0 = time_ms();
    t = disk_tier_open(&p, err, sizeof(err)); /* the open's quick_check is the cost */
    *open_ms = time_ms() - t0;
    double *lat = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) {
        make_block(i, bb, bs, &h, tok, kv);
        double t1 = time_ms();
        int rc = disk_tier_get(t, &h, tok, kv);
        lat[i] = time_ms() - t1;
        if (rc) fprintf(stderr, "sqlite: block %d: %d\n", i, rc);
    }
    *r_ms = median(lat, n);
    disk_tier_close(t);
    free(kv);
    free(lat);
    return 0;
}

/* LMDB trusts its pages: damages 512 bytes at each 4 KB page of its file in
 * turn (restoring the file between trials) and reads every block in a child
 * process. Returns how many trials crashed (signal), errored, or read. */
static void lmdb_damage(const char *file, const char *dir, size_t bb, int32_t bs, int n,
                        int *crashed, int *errored, int *silent) {
    int fd = open(file, O_RDWR);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) return;
    uint8_t *orig = malloc((size_t)sb.st_size);
    if (!orig || pread(fd, orig, (size_t)sb.st_size, 0) != sb.st_size) return;
    uint8_t junk[512];
    for (int i = 0; i < 512; i++) junk[i] = (uint8_t)(i * 77 + 5);
    /* the first 32 pages one by one (meta, branch and leaf pages are there),
     * then 32 pages spread over the rest; each damaged at its header */
    const long step = SP_MAX(4096L, (long)(sb.st_size / 32) / 4096 * 4096);
    for (long off = 0; off < sb.st_size; off += off < 32 * 4096 ? 4096 : step) {
        if (pwrite(fd, junk, sizeof(junk), off + 8) < 0) break;
        fsync(fd);
        pid_t pid = fork();
        if (pid == 0) {
            double w, r;
            (void)w;
            /* read only: lmdb_run's read half on the damaged file */
            MDB_env *env;
            MDB_dbi dbi;
            MDB_txn *txn;
            if (mdb_env_create(&env) || mdb_env_set_mapsize(env, (size_t)8 << 30) ||
                mdb_env_open(env, dir, MDB_RDONLY, 0600))
                _exit(3);
            block_digest h;
            int32_t tok[4096];
            uint8_t *kv = malloc(bb);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                make_block(i, bb, bs, &h, tok, kv);
                if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi))
                    _exit(3);
                MDB_val k = {32, h.b}, v;
                int rc = mdb_get(txn, dbi, &k, &v);
                if (rc || v.mv_size != bb + 4 * (size_t)bs) bad = 1;
                else r = (double)((const uint8_t *)v.mv_data)[v.mv_size - 1];
                mdb_txn_abort(txn);
            }
            (void)r;
            _exit(bad ? 3 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st)) (*crashed)++;
        else if (WEXITSTATUS(st)) (*errored)++;
        else (*silent)++;
        if (pwrite(fd, orig + off + 8, sizeof(junk), off + 8) < 0) break;
    }
    close(fd);
    free(orig);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: kv_disk_stores DIR N_LAYER KV_DIM BLOCK_SIZE N_BLOCKS\n");
        return 2;
    }
    const char *dir = argv[1];
    int32_t nl = atoi(argv[2]), kvd = atoi(argv[3]), bs = atoi(argv[4]);
    int n = atoi(argv[5]);
    size_t bb = kv_paged_block_bytes(SP_TYPE_F16, nl, kvd, bs);
    char d1[1024], d2[1024], f[1100];
    snprintf(d1, sizeof(d1), "%s/sqlite", dir);
    snprintf(d2, sizeof(d2), "%s/lmdb", dir);
    mkdir(dir, 0700);
    double sw, sr, so, lw, lr;
    if (sqlite_run(d1, nl, kvd, bs, n, &sw, &sr, &so) || lmdb_run(d2, bb, bs, n, &lw, &lr)) {
        fprintf(stderr, "a store failed\n");
        return 1;
    }
    printf("{\"block_bytes\": %zu, \"blocks\": %d, \"sqlite\": {\"write_ms_per_block\": %.4f, "
           "\"restore_ms_per_block\": %.4f, \"open_ms\": %.2f}, \"lmdb\": {\"write_ms_per_block\": "
           "%.4f, \"restore_ms_per_block\": %.4f}", bb, n, sw, sr, so, lw, lr);
    snprintf(f, sizeof(f), "%s/data.mdb", d2);
    int crashed = 0, errored = 0, silent = 0;
    lmdb_damage(f, d2, bb, bs, n, &crashed, &errored, &silent);
    printf(", \"lmdb_damaged_pages\": {\"crashed\": %d, \"error\": %d, \"read\": %d}", crashed,
           errored, silent);
    /* SQLite: the header page damaged; the tier's open sets the store aside */
    snprintf(f, sizeof(f), "%s/kv.sqlite", d1);
    int fd = open(f, O_RDWR);
    uint8_t junk[4096];
    memset(junk, 0x5A, sizeof(junk));
    if (fd < 0 || pwrite(fd, junk, sizeof(junk), 0) < 0) return 1;
    close(fd);
    disk_tier_params p = {0};
    char err[512];
    p.dir = d1;
    p.kv_type = SP_TYPE_F16;
    p.block_size = bs;
    p.n_layer = nl;
    p.kv_dim = kvd;
    p.quiet = true;
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    disk_tier_stats st = {0};
    if (t) disk_tier_get_stats(t, &st);
    printf(", \"sqlite_damaged\": \"%s\"}\n",
           !t ? "open failed" : st.set_aside ? "detected at open, set aside" : "opened");
    disk_tier_close(t);
    return 0;
}
