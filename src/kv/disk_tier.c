/* disk_tier.c: the prefix cache's disk tier (see disk_tier.h).
 *
 * Layout of this file: the checksum; a row's checks (shared by get and the
 * fuzz scanner); opening (DIR, lock, the store, its validation and setting a
 * damaged store aside); the writer thread; the engine-thread calls; stats
 * and the checker. Beside it: disk_fs.c (DIR and its files, owned and
 * checked before SQLite sees them) and disk_hash.c (the model fingerprint
 * rows are keyed on, with its cache).
 */
#include "kv/disk_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "kv/disk_internal.h"

#define ROW_OVERHEAD 160 /* bytes a row costs beside tokens and K/V: keys, ints, index entries */
#define TOUCH_CAP 1024
#define DEL_CAP 64
#define PATH_CAP 4096

/* ---- the checksum ---------------------------------------------------------- */

static const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full,
                      P3 = 0x165667B19E3779F9ull, P4 = 0x85EBCA77C2B2AE63ull;

static inline uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t rd64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}
static inline uint64_t lane(uint64_t acc, uint64_t w) { return rotl(acc + w * P2, 31) * P1; }

/* Four independent lanes over 32-byte stripes (an xxHash64-like shape), then
 * the tail word by word, the length, and a final avalanche. */
uint64_t disk_sum(uint64_t seed, const void *data, size_t n) {
    const uint8_t *p = data;
    const size_t len = n;
    uint64_t a = seed + P1 + P2, b = seed + P2, c = seed, d = seed - P1, h;
    if (n >= 32) {
        for (; n >= 32; p += 32, n -= 32) {
            a = lane(a, rd64(p));
            b = lane(b, rd64(p + 8));
            c = lane(c, rd64(p + 16));
            d = lane(d, rd64(p + 24));
        }
        h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
    } else {
        h = seed + P3;
    }
    h += (uint64_t)len;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ lane(0, rd64(p)), 27) * P1 + P4;
    uint64_t last = 0;
    memcpy(&last, p, n);
    h = rotl(h ^ (last * P1), 23) * P2 + P3;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

/* The fields a row's checksum covers before its tokens and K/V. */
typedef struct {
    int32_t version, kv_type, block_size, n_layer, kv_dim;
    uint8_t fp[32];
    uint8_t hash[32];
} row_head;

static uint64_t row_sum(const row_head *hd, const void *tokens, size_t tok_bytes, const void *kv,
                        size_t kv_bytes) {
    uint8_t buf[20 + 64];
    const int32_t v[5] = {hd->version, hd->kv_type, hd->block_size, hd->n_layer, hd->kv_dim};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) buf[4 * i + j] = (uint8_t)((uint32_t)v[i] >> (8 * j));
    memcpy(buf + 20, hd->fp, 32);
    memcpy(buf + 52, hd->hash, 32);
    uint64_t s = disk_sum(0x5350454355ull, buf, sizeof(buf));
    s = disk_sum(s, tokens, tok_bytes);
    return disk_sum(s, kv, kv_bytes);
}

static void tokens_le(const int32_t *t, int32_t n, uint8_t *out) {
    for (int32_t i = 0; i < n; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)((uint32_t)t[i] >> (8 * j));
}

/* ---- the tier ---------------------------------------------------------------- */

typedef struct {
    block_digest h;
    uint8_t *tokens; /* [block_size * 4] little-endian */
    uint8_t *kv;     /* [block_bytes] */
} wslot;

struct disk_tier {
    disk_tier_params p;
    char dir[PATH_CAP], path[PATH_CAP]; /* DIR as given; the store's canonical path */
    size_t block_bytes, tok_bytes, row_bytes;
    int dir_fd, lock_fd;
    sqlite3 *rdb, *wdb;         /* engine thread's (reads), the writer's */
    sqlite3_stmt *q_get, *q_has;
    sqlite3_stmt *w_ins, *w_ins_lru, *w_touch, *w_del, *w_del_lru, *w_lru;
    pthread_t thr;
    bool thr_started;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    /* under mu */
    wslot *slots;
    int32_t n_slots, head, count;
    block_digest touch[TOUCH_CAP];
    int32_t n_touch;
    int64_t del[DEL_CAP];
    int32_t n_del;
    bool stop, broken, warned;
    uint64_t queued, served;     /* operations queued / done (sync) */
    disk_tier_stats st;
    /* writer only */
    uint64_t clock;
    uint8_t *tokbuf;             /* [tok_bytes] engine thread's scratch */
};

static void warn(disk_tier *t, const char *fmt, const char *what) {
    if (t->p.quiet) return;
    fprintf(stderr, "specula: warning: --kv-disk %s: ", t->dir);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
}

/* Marks the tier off after damage at run time (one warning). Under mu. */
static void set_broken(disk_tier *t, const char *why) {
    if (t->broken) return;
    __atomic_store_n(&t->broken, true, __ATOMIC_RELEASE);
    t->st.broken = true;
    if (!t->warned) warn(t, "the store failed (%s); the disk tier is off until restart, and the "
                            "store is set aside then", why);
    t->warned = true;
    pthread_cond_broadcast(&t->done);
}

static bool damage(int rc) {
    rc &= 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB || rc == SQLITE_IOERR ||
           rc == SQLITE_CANTOPEN || rc == SQLITE_FORMAT || rc == SQLITE_PROTOCOL;
}

/* ---- a row's checks ------------------------------------------------------------ */

/* Checks the current row of a statement whose columns are
 * 0 version, 1 tokens, 2 sum, 3 kv, 4 kv_type, 5 block_size, 6 n_layer,
 * 7 kv_dim, 8 fp, 9 hash against the expected head (want_tokens: the
 * block's ids as LE bytes, or NULL to skip that comparison). */
static bool row_ok(sqlite3_stmt *q, const row_head *want, const uint8_t *want_tokens,
                   size_t tok_bytes, size_t kv_bytes) {
    row_head hd;
    hd.version = sqlite3_column_int(q, 0);
    hd.kv_type = sqlite3_column_int(q, 4);
    hd.block_size = sqlite3_column_int(q, 5);
    hd.n_layer = sqlite3_column_int(q, 6);
    hd.kv_dim = sqlite3_column_int(q, 7);
    if (hd.version != want->version || hd.kv_type != want->kv_type ||
        hd.block_size != want->block_size || hd.n_layer != want->n_layer ||
        hd.kv_dim != want->kv_dim)
        return false;
    const void *fp = sqlite3_column_blob(q, 8), *hash = sqlite3_column_blob(q, 9);
    if (!fp || !hash || sqlite3_column_bytes(q, 8) != 32 || sqlite3_column_bytes(q, 9) != 32)
        return false;
    if (memcmp(fp, want->fp, 32) || memcmp(hash, want->hash, 32)) return false;
    memcpy(hd.fp, fp, 32);
    memcpy(hd.hash, hash, 32);
    const void *tok = sqlite3_column_blob(q, 1);
    if (!tok || (size_t)sqlite3_column_bytes(q, 1) != tok_bytes) return false;
    if (want_tokens && memcmp(tok, want_tokens, tok_bytes)) return false;
    const void *kv = sqlite3_column_blob(q, 3);
    if (!kv || (size_t)sqlite3_column_bytes(q, 3) != kv_bytes) return false;
    const uint64_t sum = (uint64_t)sqlite3_column_int64(q, 2);
    return row_sum(&hd, tok, tok_bytes, kv, kv_bytes) == sum;
}

#define ROW_COLS "version, tokens, sum, kv, kv_type, block_size, n_layer, kv_dim, fp, hash, id"
#define KEY_WHERE "hash = ?1 AND fp = ?2 AND kv_type = ?3 AND block_size = ?4 AND n_layer = ?5 " \
                  "AND kv_dim = ?6"

static void bind_key(const disk_tier *t, sqlite3_stmt *q, const block_digest *h) {
    sqlite3_bind_blob(q, 1, h->b, 32, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, t->p.fp, 32, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, t->p.kv_type);
    sqlite3_bind_int(q, 4, t->p.block_size);
    sqlite3_bind_int(q, 5, t->p.n_layer);
    sqlite3_bind_int(q, 6, t->p.kv_dim);
}

static row_head want_head(const disk_tier *t, const block_digest *h) {
    row_head w = {SP_DISK_FORMAT, t->p.kv_type, t->p.block_size, t->p.n_layer, t->p.kv_dim,
                  {0}, {0}};
    memcpy(w.fp, t->p.fp, 32);
    if (h) memcpy(w.hash, h->b, 32);
    return w;
}

/* ---- opening ------------------------------------------------------------------- */

static const char *SCHEMA =
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v);"
    "CREATE TABLE IF NOT EXISTS blocks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL, "
    "fp BLOB NOT NULL, kv_type INTEGER NOT NULL, block_size INTEGER NOT NULL, "
    "n_layer INTEGER NOT NULL, kv_dim INTEGER NOT NULL, version INTEGER NOT NULL, "
    "tokens BLOB NOT NULL, sum INTEGER NOT NULL, kv BLOB NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS blocks_key ON blocks(hash, fp, kv_type, block_size, "
    "n_layer, kv_dim);"
    /* the LRU clock apart from the rows: an UPDATE rewrites a whole row, K/V included */
    "CREATE TABLE IF NOT EXISTS lru(id INTEGER PRIMARY KEY, used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS lru_used ON lru(used);";

static int exec1(sqlite3 *db, const char *sql) { return sqlite3_exec(db, sql, NULL, NULL, NULL); }

/* Runs a one-value query; SQLITE_ROW with *out set, or an error/SQLITE_DONE. */
static int query_i64(sqlite3 *db, const char *sql, int64_t *out) {
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) *out = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return rc;
}

static sqlite3 *open_db(const char *path, int flags) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 2000);
    exec1(db, "PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0;");
    return db;
}

static int prepare_writer(disk_tier *t, sqlite3 *db);
static void finalize_writer(disk_tier *t);

/* Opens the writer's connection and validates the store: its header and
 * schema, the format version, PRAGMA quick_check. NULL + why when it is
 * damaged, foreign or of another format (an empty file becomes a store). */
static sqlite3 *open_store(disk_tier *t, const char **why) {
    *why = "cannot be opened";
    sqlite3 *db =
        open_db(t->path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW);
    if (!db) return NULL;
    int64_t n_tables = 0, fmt = -1, wal = 0;
    *why = "is not an SQLite database, or its header is damaged";
    if (query_i64(db, "SELECT count(*) FROM sqlite_master", &n_tables) != SQLITE_ROW) goto bad;
    if (n_tables == 0) {
        char sql[128];
        snprintf(sql, sizeof(sql), "INSERT INTO meta(k, v) VALUES('format', %d);", SP_DISK_FORMAT);
        *why = "cannot be written";
        if (exec1(db, "PRAGMA page_size = 65536; PRAGMA journal_mode = WAL;") || exec1(db, "BEGIN;") ||
            exec1(db, SCHEMA) || exec1(db, sql) || exec1(db, "COMMIT;"))
            goto bad;
    }
    *why = "is not a --kv-disk store (no format record)";
    if (query_i64(db, "SELECT v FROM meta WHERE k = 'format'", &fmt) != SQLITE_ROW) goto bad;
    *why = "was written in another format version";
    if (fmt != SP_DISK_FORMAT) goto bad;
    *why = "has another schema";
    if (prepare_writer(t, db)) goto bad;
    *why = "failed SQLite's integrity check (damaged or truncated)";
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &q, NULL) != SQLITE_OK) goto bad;
    int rc = sqlite3_step(q);
    const unsigned char *res = rc == SQLITE_ROW ? sqlite3_column_text(q, 0) : NULL;
    const bool fine = res && !strcmp((const char *)res, "ok");
    sqlite3_finalize(q);
    if (!fine) goto bad;
    *why = "cannot be switched to WAL mode";
    if (query_i64(db, "PRAGMA journal_mode = WAL", &wal) != SQLITE_ROW) goto bad;
    if (exec1(db, "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = 67108864; "
                  "PRAGMA cache_size = -16384;"))
        goto bad;
    return db;
bad:
    finalize_writer(t);
    sqlite3_close(db);
    return NULL;
}

/* The writer's statements, on db: failing means the store has another
 * schema (set aside like a damaged one). */
static int prepare_writer(disk_tier *t, sqlite3 *db) {
    const char *ins = "INSERT OR IGNORE INTO blocks(hash, fp, kv_type, block_size, n_layer, "
                      "kv_dim, version, tokens, sum, kv) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                      "?10)";
    const char *ins_lru = "INSERT OR REPLACE INTO lru(id, used) VALUES(?1, ?2)";
    const char *touch = "UPDATE lru SET used = ?7 WHERE id = (SELECT id FROM blocks WHERE "
                        KEY_WHERE ")";
    const char *del = "DELETE FROM blocks WHERE id = ?1 RETURNING length(kv) + length(tokens)";
    const char *del_lru = "DELETE FROM lru WHERE id = ?1";
    const char *lru = "SELECT id FROM lru ORDER BY used LIMIT 32";
    return sqlite3_prepare_v2(db, ins, -1, &t->w_ins, NULL) ||
           sqlite3_prepare_v2(db, ins_lru, -1, &t->w_ins_lru, NULL) ||
           sqlite3_prepare_v2(db, touch, -1, &t->w_touch, NULL) ||
           sqlite3_prepare_v2(db, del, -1, &t->w_del, NULL) ||
           sqlite3_prepare_v2(db, del_lru, -1, &t->w_del_lru, NULL) ||
           sqlite3_prepare_v2(db, lru, -1, &t->w_lru, NULL);
}

static int prepare_reader(disk_tier *t) {
    const char *get = "SELECT " ROW_COLS " FROM blocks WHERE " KEY_WHERE;
    const char *has = "SELECT 1 FROM blocks WHERE " KEY_WHERE;
    return sqlite3_prepare_v2(t->rdb, get, -1, &t->q_get, NULL) ||
           sqlite3_prepare_v2(t->rdb, has, -1, &t->q_has, NULL);
}

static void finalize_writer(disk_tier *t) {
    sqlite3_stmt *qs[] = {t->w_ins, t->w_ins_lru, t->w_touch, t->w_del, t->w_del_lru, t->w_lru};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) sqlite3_finalize(qs[i]);
    t->w_ins = t->w_ins_lru = t->w_touch = t->w_del = t->w_del_lru = t->w_lru = NULL;
}

static void close_dbs(disk_tier *t) {
    finalize_writer(t);
    sqlite3_finalize(t->q_get);
    sqlite3_finalize(t->q_has);
    t->q_get = t->q_has = NULL;
    sqlite3_close(t->rdb);
    sqlite3_close(t->wdb);
    t->rdb = t->wdb = NULL;
}

/* Renames the store (and its -wal, -shm) to kv.sqlite.bad-<seconds>, in
 * the directory held open. */
static void set_aside(disk_tier *t, const char *why) {
    char to[64], from[32], to2[80];
    const long long now = (long long)time(NULL);
    snprintf(to, sizeof(to), "kv.sqlite.bad-%lld", now);
    const int moved = renameat(t->dir_fd, "kv.sqlite", t->dir_fd, to);
    for (int i = 0; i < 2; i++) {
        const char *sfx = i ? "-shm" : "-wal";
        snprintf(from, sizeof(from), "kv.sqlite%s", sfx);
        snprintf(to2, sizeof(to2), "%s%s", to, sfx);
        if (renameat(t->dir_fd, from, t->dir_fd, to2) && errno != ENOENT)
            unlinkat(t->dir_fd, from, 0);
    }
    if (!t->warned) {
        char msg[PATH_CAP + 256];
        snprintf(msg, sizeof(msg), "the store %s; %s%s%s; starting an empty store", why,
                 moved ? "it could not be renamed and was left in place" : t->dir,
                 moved ? "" : "/", moved ? "" : to);
        warn(t, "%s", msg);
    }
    t->warned = true;
    t->st.set_aside++;
}

static const char *const STORE_FILES[] = {"kv.sqlite-wal", "kv.sqlite-shm", "kv.sqlite-journal"};

/* Before SQLite opens the store: kv.sqlite opened (created 0600 when
 * missing) and checked, its -wal, -shm and -journal checked when present
 * (SQLite creates them with the store's mode, in a DIR no one else can
 * write). Returns the store's descriptor, to compare with what SQLite
 * opened, or -1 + err. */
static int check_store_files(disk_tier *t, char *err, size_t errlen) {
    int fd = disk_fs_open(t->dir_fd, t->dir, "kv.sqlite", err, errlen);
    for (size_t i = 0; fd >= 0 && i < sizeof STORE_FILES / sizeof *STORE_FILES; i++)
        if (disk_fs_check(t->dir_fd, t->dir, STORE_FILES[i], err, errlen)) {
            close(fd);
            fd = -1;
        }
    return fd;
}

/* After: the store's path still reaches the file checked (fd), and the
 * files SQLite made beside it are as they must be. */
static int recheck_store_files(disk_tier *t, int fd, char *err, size_t errlen) {
    if (disk_fs_same(fd, t->path)) {
        seterr(err, errlen, "--kv-disk %s: %s changed while it was being opened", t->dir,
                  t->path);
        return -1;
    }
    for (size_t i = 0; i < sizeof STORE_FILES / sizeof *STORE_FILES; i++)
        if (disk_fs_check(t->dir_fd, t->dir, STORE_FILES[i], err, errlen)) return -1;
    return 0;
}

static int open_dir_and_lock(disk_tier *t, char *err, size_t errlen) {
    char canon[PATH_CAP - 16];
    t->dir_fd = disk_fs_open_dir(t->dir, canon, sizeof(canon), err, errlen);
    if (t->dir_fd < 0) return -1;
    snprintf(t->path, sizeof(t->path), "%s/kv.sqlite", canon);
    t->lock_fd = disk_fs_lock(t->dir_fd, t->dir, err, errlen);
    return t->lock_fd < 0 ? -1 : 0;
}

/* Counts rows and bytes, and the LRU clock's next value. */
static int load_counts(disk_tier *t) {
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(t->wdb, "SELECT count(*), total(length(kv) + length(tokens)), "
                                "(SELECT max(used) FROM lru) FROM blocks", -1, &q, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        t->st.blocks = (uint64_t)sqlite3_column_int64(q, 0);
        t->st.bytes = (uint64_t)sqlite3_column_double(q, 1) + t->st.blocks * ROW_OVERHEAD;
        t->clock = (uint64_t)sqlite3_column_int64(q, 2) + 1;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(q);
    return rc;
}

/* Opens the store (a damaged one set aside once and replaced by an empty
 * one), its files checked before and after SQLite opens them. */
static int open_stores(disk_tier *t, char *err, size_t errlen) {
    const char *why = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        const int fd = check_store_files(t, err, errlen);
        if (fd < 0) return -1;
        if ((t->wdb = open_store(t, &why))) {
            /* quick_check passes stores whose rows are still unreadable
             * (it does not read every overflow page): counting them is the
             * last check, and a failure sets the store aside like a bad
             * header does. */
            t->rdb = open_db(t->path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW);
            if (t->rdb && !prepare_reader(t) && !load_counts(t)) {
                const int rc = recheck_store_files(t, fd, err, errlen);
                close(fd);
                if (rc) close_dbs(t);
                return rc;
            }
            why = t->rdb ? "cannot be read (damaged rows)" : "cannot be opened for reading";
            close_dbs(t);
        }
        close(fd);
        set_aside(t, why);
    }
    seterr(err, errlen, "--kv-disk %s: the store %s, even after setting it aside", t->dir, why);
    return -1;
}

static void *writer_main(void *arg);

disk_tier *disk_tier_open(const disk_tier_params *p, char *err, size_t errlen) {
    if (!p->dir || !p->dir[0] || strlen(p->dir) >= PATH_CAP - 32) {
        seterr(err, errlen, "--kv-disk: no directory, or its name is too long");
        return NULL;
    }
    if (!kv_type_ok((tensor_type)p->kv_type, p->kv_dim) || p->block_size < 1 ||
        p->n_layer < 1 || p->kv_dim < 1) {
        seterr(err, errlen, "--kv-disk: invalid layout");
        return NULL;
    }
    disk_tier *t = calloc(1, sizeof(*t));
    if (!t) {
        seterr(err, errlen, "out of memory opening the disk tier");
        return NULL;
    }
    t->dir_fd = t->lock_fd = -1;
    t->p = *p;
    if (!t->p.max_bytes) t->p.max_bytes = SP_DISK_DEFAULT_SIZE;
    snprintf(t->dir, sizeof(t->dir), "%s", p->dir);
    t->block_bytes = kv_paged_block_bytes((tensor_type)p->kv_type, p->n_layer, p->kv_dim,
                                             p->block_size);
    t->tok_bytes = (size_t)p->block_size * 4;
    t->row_bytes = t->block_bytes + t->tok_bytes + ROW_OVERHEAD;
    t->st.cap_bytes = t->p.max_bytes;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->done, NULL);
    if (open_dir_and_lock(t, err, errlen) || open_stores(t, err, errlen)) goto fail;
    const double t0 = time_ms();
    if (disk_model_fp(t->wdb, p, t->p.fp, &t->st.hash_cached, err, errlen)) goto fail;
    if (p->hash_file) t->st.hash_ms = time_ms() - t0;
    int32_t ns = p->queue_blocks;
    if (ns <= 0) ns = (int32_t)SP_MAX(2, SP_MIN(256, ((size_t)64 << 20) / t->block_bytes));
    t->n_slots = SP_MAX(ns, 2);
    t->slots = calloc((size_t)t->n_slots, sizeof(wslot));
    t->tokbuf = malloc(t->tok_bytes);
    if (!t->slots || !t->tokbuf) goto oom;
    for (int32_t i = 0; i < t->n_slots; i++) {
        t->slots[i].tokens = malloc(t->tok_bytes);
        t->slots[i].kv = malloc(t->block_bytes);
        if (!t->slots[i].tokens || !t->slots[i].kv) goto oom;
    }
    if (pthread_create(&t->thr, NULL, writer_main, t)) {
        seterr(err, errlen, "--kv-disk: cannot start the writer thread");
        goto fail;
    }
    t->thr_started = true;
    return t;
oom:
    seterr(err, errlen, "out of memory for the disk tier's write queue");
fail:
    disk_tier_close(t);
    return NULL;
}

void disk_tier_close(disk_tier *t) {
    if (!t) return;
    if (t->thr_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_broadcast(&t->work);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thr, NULL);
    }
    const bool broken = t->broken;
    if (t->wdb && !broken) exec1(t->wdb, "PRAGMA wal_checkpoint(TRUNCATE);");
    close_dbs(t);
    if (broken) set_aside(t, "failed while in use");
    if (t->slots)
        for (int32_t i = 0; i < t->n_slots; i++) {
            free(t->slots[i].tokens);
            free(t->slots[i].kv);
        }
    free(t->slots);
    free(t->tokbuf);
    if (t->lock_fd >= 0) close(t->lock_fd); /* releases the flock */
    if (t->dir_fd >= 0) close(t->dir_fd);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->work);
    pthread_cond_destroy(&t->done);
    free(t);
}

size_t disk_tier_block_bytes(const disk_tier *t) { return t->block_bytes; }
void disk_tier_fp(const disk_tier *t, uint8_t out[32]) { memcpy(out, t->p.fp, 32); }

/* ---- the writer thread --------------------------------------------------------- */

/* Deletes row id; returns its bytes (tokens + kv + overhead) or 0. */
static uint64_t delete_row(disk_tier *t, int64_t id, int *rc) {
    uint64_t got = 0;
    sqlite3_bind_int64(t->w_del, 1, id);
    int r = sqlite3_step(t->w_del);
    if (r == SQLITE_ROW) {
        got = (uint64_t)sqlite3_column_int64(t->w_del, 0) + ROW_OVERHEAD;
        r = sqlite3_step(t->w_del);
    }
    sqlite3_reset(t->w_del);
    if (r == SQLITE_DONE) {
        sqlite3_bind_int64(t->w_del_lru, 1, id);
        r = sqlite3_step(t->w_del_lru);
        sqlite3_reset(t->w_del_lru);
    }
    if (r != SQLITE_DONE) *rc = r;
    return got;
}

/* Evicts least recently used rows until need more bytes fit under the cap.
 * Returns rows evicted, or -1 on an SQLite error (in *rc). */
static int64_t make_room(disk_tier *t, uint64_t *bytes, uint64_t *blocks, uint64_t need,
                         int *rc) {
    int64_t n = 0;
    while (*bytes + need > t->p.max_bytes && *blocks > 0) {
        int64_t ids[32];
        int k = 0, r;
        while (k < 32 && (r = sqlite3_step(t->w_lru)) == SQLITE_ROW)
            ids[k++] = sqlite3_column_int64(t->w_lru, 0);
        sqlite3_reset(t->w_lru);
        if (k == 0) break;
        for (int i = 0; i < k && *bytes + need > t->p.max_bytes; i++) {
            uint64_t b = delete_row(t, ids[i], rc);
            if (*rc != SQLITE_OK) return -1;
            *bytes -= SP_MIN(b, *bytes);
            if (b) (*blocks)--, n++;
        }
    }
    return n;
}

static int insert_slot(disk_tier *t, const wslot *s, uint64_t used, bool *inserted) {
    row_head hd = want_head(t, &s->h);
    const uint64_t sum = row_sum(&hd, s->tokens, t->tok_bytes, s->kv, t->block_bytes);
    sqlite3_stmt *q = t->w_ins;
    bind_key(t, q, &s->h);
    sqlite3_bind_int(q, 7, SP_DISK_FORMAT);
    sqlite3_bind_blob(q, 8, s->tokens, (int)t->tok_bytes, SQLITE_STATIC);
    sqlite3_bind_int64(q, 9, (sqlite3_int64)sum);
    sqlite3_bind_blob64(q, 10, s->kv, t->block_bytes, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    *inserted = rc == SQLITE_DONE && sqlite3_changes(t->wdb) == 1;
    const sqlite3_int64 id = sqlite3_last_insert_rowid(t->wdb);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    if (rc != SQLITE_DONE) return rc;
    if (!*inserted) return SQLITE_OK;
    sqlite3_bind_int64(t->w_ins_lru, 1, id);
    sqlite3_bind_int64(t->w_ins_lru, 2, (sqlite3_int64)used);
    rc = sqlite3_step(t->w_ins_lru);
    sqlite3_reset(t->w_ins_lru);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* One transaction: the first k queued blocks, the touches, the deletions. */
static void write_batch(disk_tier *t, int32_t k, const block_digest *touch, int32_t n_touch,
                        const int64_t *del, int32_t n_del) {
    pthread_mutex_lock(&t->mu);
    uint64_t bytes = t->st.bytes, blocks = t->st.blocks;
    pthread_mutex_unlock(&t->mu);
    uint64_t writes = 0, evicted = 0, dropped = 0;
    int rc = exec1(t->wdb, "BEGIN IMMEDIATE");
    for (int32_t i = 0; i < n_del && rc == SQLITE_OK; i++) {
        uint64_t b = delete_row(t, del[i], &rc);
        bytes -= SP_MIN(b, bytes);
        if (b) blocks--;
    }
    for (int32_t i = 0; i < n_touch && rc == SQLITE_OK; i++) {
        bind_key(t, t->w_touch, &touch[i]);
        sqlite3_bind_int64(t->w_touch, 7, (sqlite3_int64)t->clock++);
        if (sqlite3_step(t->w_touch) != SQLITE_DONE) rc = sqlite3_errcode(t->wdb);
        sqlite3_reset(t->w_touch);
    }
    for (int32_t i = 0; i < k && rc == SQLITE_OK; i++) {
        const wslot *s = &t->slots[(t->head + i) % t->n_slots];
        int64_t ev = make_room(t, &bytes, &blocks, t->row_bytes, &rc);
        if (ev < 0) break;
        evicted += (uint64_t)ev;
        if (bytes + t->row_bytes > t->p.max_bytes) {
            dropped++;
            continue;
        }
        bool ins = false;
        rc = insert_slot(t, s, t->clock++, &ins);
        if (ins) bytes += t->row_bytes, blocks++, writes++;
    }
    if (rc == SQLITE_OK) rc = exec1(t->wdb, "COMMIT");
    pthread_mutex_lock(&t->mu);
    if (rc == SQLITE_OK) {
        t->st.bytes = bytes;
        t->st.blocks = blocks;
        t->st.writes += writes;
        t->st.evictions += evicted;
        t->st.skipped_cap += dropped;
    } else {
        const int ec = sqlite3_extended_errcode(t->wdb);
        const char *msg = sqlite3_errmsg(t->wdb);
        pthread_mutex_unlock(&t->mu);
        exec1(t->wdb, "ROLLBACK");
        pthread_mutex_lock(&t->mu);
        t->st.skipped_error += (uint64_t)k;
        if (damage(ec)) set_broken(t, msg);
    }
    pthread_mutex_unlock(&t->mu);
}

static void *writer_main(void *arg) {
    disk_tier *t = arg;
    /* the lowest priority (nice 19, this thread only): the forward pass
     * keeps the cores, the writer takes what is left; when it falls behind
     * the queue fills and blocks are skipped, never waited for */
    pthread_setname_np(pthread_self(), "kv-disk-writer");
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19)) {
        /* not allowed: it runs at the engine's priority */
    }
    block_digest touch[TOUCH_CAP];
    int64_t del[DEL_CAP];
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && !t->count && !t->n_touch && !t->n_del)
            pthread_cond_wait(&t->work, &t->mu);
        if (!t->count && !t->n_touch && !t->n_del) break; /* stopping, nothing left */
        const int32_t k = t->count, nt = t->n_touch, nd = t->n_del;
        const uint64_t upto = t->queued;
        memcpy(touch, t->touch, (size_t)nt * sizeof(block_digest));
        memcpy(del, t->del, (size_t)nd * sizeof(int64_t));
        t->n_touch = t->n_del = 0;
        const bool broken = t->broken;
        pthread_mutex_unlock(&t->mu);
        /* the k slots stay the writer's until head moves past them */
        if (!broken) write_batch(t, k, touch, nt, del, nd);
        pthread_mutex_lock(&t->mu);
        if (broken) t->st.skipped_error += (uint64_t)k;
        t->head = (t->head + k) % t->n_slots;
        t->count -= k;
        t->served = upto;
        pthread_cond_broadcast(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- the engine thread's calls --------------------------------------------------- */

/* broken is set once, by either thread, and read unlocked on the fast paths */
static bool is_broken(disk_tier *t) { return __atomic_load_n(&t->broken, __ATOMIC_ACQUIRE); }

/* A read on the engine's connection failed with rc: damage turns the tier off. */
static void read_failed(disk_tier *t, int rc) {
    if (!damage(sqlite3_extended_errcode(t->rdb)) && !damage(rc)) return;
    pthread_mutex_lock(&t->mu);
    set_broken(t, sqlite3_errmsg(t->rdb));
    pthread_mutex_unlock(&t->mu);
}

/* The queued copy of h (not yet written), or NULL. Under mu. */
static const wslot *pending_find(const disk_tier *t, const block_digest *h) {
    for (int32_t i = 0; i < t->count; i++) {
        const wslot *s = &t->slots[(t->head + i) % t->n_slots];
        if (!memcmp(s->h.b, h->b, 32)) return s;
    }
    return NULL;
}

bool disk_tier_has(disk_tier *t, const block_digest *h) {
    if (is_broken(t)) return false;
    bind_key(t, t->q_has, h);
    int rc = sqlite3_step(t->q_has);
    sqlite3_reset(t->q_has);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) read_failed(t, rc);
    return rc == SQLITE_ROW;
}

int disk_tier_put(disk_tier *t, const block_digest *h, const int32_t *tokens,
                     const void *kv) {
    if (is_broken(t)) return 2;
    if (t->row_bytes > t->p.max_bytes) {
        pthread_mutex_lock(&t->mu);
        t->st.skipped_cap++;
        pthread_mutex_unlock(&t->mu);
        return 2;
    }
    if (disk_tier_has(t, h)) return 1;
    pthread_mutex_lock(&t->mu);
    if (pending_find(t, h)) { /* queued already */
        pthread_mutex_unlock(&t->mu);
        return 1;
    }
    if (t->count == t->n_slots) {
        t->st.skipped_queue++;
        pthread_mutex_unlock(&t->mu);
        return 2;
    }
    wslot *s = &t->slots[(t->head + t->count) % t->n_slots];
    pthread_mutex_unlock(&t->mu);
    /* the slot past the queue's end is no one else's: fill it unlocked */
    s->h = *h;
    tokens_le(tokens, t->p.block_size, s->tokens);
    memcpy(s->kv, kv, t->block_bytes);
    pthread_mutex_lock(&t->mu);
    t->count++;
    t->queued++;
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int disk_tier_get(disk_tier *t, const block_digest *h, const int32_t *tokens, void *kv) {
    if (is_broken(t)) return 1;
    sqlite3_stmt *q = t->q_get;
    bind_key(t, q, h);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(q);
        if (rc != SQLITE_DONE) read_failed(t, rc);
        /* written soon, but not yet: the queue's copy (the pool's own bytes,
         * checked against the tokens like a row) */
        tokens_le(tokens, t->p.block_size, t->tokbuf);
        pthread_mutex_lock(&t->mu);
        const wslot *s = pending_find(t, h);
        const bool ok = s && !memcmp(s->tokens, t->tokbuf, t->tok_bytes);
        if (ok) memcpy(kv, s->kv, t->block_bytes);
        if (ok) t->st.hits++;
        else t->st.misses++;
        pthread_mutex_unlock(&t->mu);
        return ok ? 0 : 1;
    }
    const row_head want = want_head(t, h);
    tokens_le(tokens, t->p.block_size, t->tokbuf);
    const bool ok = row_ok(q, &want, t->tokbuf, t->tok_bytes, t->block_bytes);
    const int64_t id = sqlite3_column_int64(q, 10);
    if (ok) memcpy(kv, sqlite3_column_blob(q, 3), t->block_bytes);
    sqlite3_reset(q);
    pthread_mutex_lock(&t->mu);
    if (ok) {
        t->st.hits++;
        if (t->n_touch < TOUCH_CAP) t->touch[t->n_touch++] = *h, t->queued++;
        else t->st.touches_dropped++;
    } else {
        t->st.corrupt++;
        if (t->n_del < DEL_CAP) t->del[t->n_del++] = id, t->queued++;
    }
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->mu);
    return ok ? 0 : -1;
}

/* ---- stats and the checker ---------------------------------------------------------- */

void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st) {
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    pthread_mutex_unlock(&t->mu);
}

void disk_tier_sync(disk_tier *t) {
    pthread_mutex_lock(&t->mu);
    const uint64_t want = t->queued;
    while (t->served < want && !t->broken) pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

int disk_tier_check(disk_tier *t, char *err, size_t errlen) {
    disk_tier_sync(t);
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    if (st.broken) {
        seterr(err, errlen, "the tier is off after damage");
        return -1;
    }
    sqlite3_stmt *q = NULL;
    int64_t rows = 0, bad = 0;
    double bytes = 0;
    int rc = sqlite3_prepare_v2(t->rdb, "SELECT " ROW_COLS " FROM blocks", -1, &q, NULL);
    const row_head want = want_head(t, NULL);
    while (q && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        rows++;
        bytes += sqlite3_column_bytes(q, 1) + sqlite3_column_bytes(q, 3) + ROW_OVERHEAD;
        const int same = sqlite3_column_int(q, 4) == want.kv_type &&
                         sqlite3_column_int(q, 5) == want.block_size &&
                         sqlite3_column_int(q, 6) == want.n_layer &&
                         sqlite3_column_int(q, 7) == want.kv_dim &&
                         sqlite3_column_bytes(q, 8) == 32 &&
                         !memcmp(sqlite3_column_blob(q, 8), want.fp, 32);
        if (!same || sqlite3_column_bytes(q, 9) != 32) continue;
        row_head w = want;
        memcpy(w.hash, sqlite3_column_blob(q, 9), 32);
        if (!row_ok(q, &w, NULL, t->tok_bytes, t->block_bytes)) bad++;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        seterr(err, errlen, "reading the store: %s", sqlite3_errmsg(t->rdb));
        return -1;
    }
    if ((uint64_t)rows != st.blocks || (uint64_t)bytes != st.bytes) {
        seterr(err, errlen, "counts say %llu rows / %llu bytes, the store holds %lld / %.0f",
                  (unsigned long long)st.blocks, (unsigned long long)st.bytes, (long long)rows,
                  bytes);
        return -1;
    }
    int64_t n_lru = -1, stray = -1;
    if (query_i64(t->rdb, "SELECT count(*) FROM lru", &n_lru) != SQLITE_ROW ||
        query_i64(t->rdb, "SELECT count(*) FROM lru WHERE id NOT IN (SELECT id FROM blocks)",
                  &stray) != SQLITE_ROW ||
        n_lru != rows || stray != 0) {
        seterr(err, errlen, "the LRU table has %lld entries (%lld without a row) for %lld rows",
                  (long long)n_lru, (long long)stray, (long long)rows);
        return -1;
    }
    if (st.bytes > st.cap_bytes) {
        seterr(err, errlen, "%llu bytes over the cap of %llu", (unsigned long long)st.bytes,
                  (unsigned long long)st.cap_bytes);
        return -1;
    }
    if (bad) {
        seterr(err, errlen, "%lld rows fail their checksum", (long long)bad);
        return -1;
    }
    return 0;
}

int64_t disk_tier_scan_file(const char *path, int32_t block_size, size_t block_bytes) {
    char uri[PATH_CAP + 32];
    snprintf(uri, sizeof(uri), "file:%s?immutable=1", path);
    sqlite3 *db = open_db(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    if (!db) return -1;
    sqlite3_stmt *q = NULL;
    int64_t good = -1;
    if (sqlite3_prepare_v2(db, "SELECT " ROW_COLS " FROM blocks", -1, &q, NULL) == SQLITE_OK) {
        int rc;
        good = 0;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            row_head w = {sqlite3_column_int(q, 0), sqlite3_column_int(q, 4), block_size,
                          sqlite3_column_int(q, 6), sqlite3_column_int(q, 7), {0}, {0}};
            if (sqlite3_column_bytes(q, 8) != 32 || sqlite3_column_bytes(q, 9) != 32) continue;
            memcpy(w.fp, sqlite3_column_blob(q, 8), 32);
            memcpy(w.hash, sqlite3_column_blob(q, 9), 32);
            good += row_ok(q, &w, NULL, (size_t)block_size * 4, block_bytes);
        }
        if (rc != SQLITE_DONE) good = -1;
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return good;
}
