/* disk_hash.c: the model fingerprint the disk tier keys its rows on.
 *
 * Rows outlive the process and are found by whatever model a later server
 * loads with the same DIR, so the fingerprint must change with any byte of
 * the model file: it is SHA-256 over a tag, the engine's own fingerprint
 * (hyperparameters as this build reads them) and the SHA-256 of the whole
 * file (header, metadata and tokenizer, every tensor's bytes). Hashing the
 * file reads all of it, about as long as loading it cold (see
 * model_file_hash), so the result is cached in the store, in table
 * model_hash, keyed by the file's identity: device, inode, size, mtime and
 * ctime in nanoseconds. A write to the file or its replacement changes
 * ctime (which no user can set back) or the inode, so a matching key means
 * the same bytes, and anything else hashes again; chmod, chown or a new
 * hard link also change ctime and cost one more hash. The cache is as
 * trustworthy as the store: inside DIR, which only the server can write
 * (disk_fs.c). At most HASH_KEEP files are remembered, the least recently
 * used dropped first.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "kv/disk_internal.h"

#define HASH_KEEP 16

static const char *HASH_SCHEMA =
    "CREATE TABLE IF NOT EXISTS model_hash(dev INTEGER NOT NULL, ino INTEGER NOT NULL, "
    "size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, "
    "sha BLOB NOT NULL, used INTEGER NOT NULL, "
    "PRIMARY KEY(dev, ino, size, mtime_ns, ctime_ns))";

#define ID_WHERE "dev = ?1 AND ino = ?2 AND size = ?3 AND mtime_ns = ?4 AND ctime_ns = ?5"

static void bind_id(sqlite3_stmt *q, const disk_file_id *id) {
    sqlite3_bind_int64(q, 1, (sqlite3_int64)id->dev);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)id->ino);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)id->size);
    sqlite3_bind_int64(q, 4, id->mtime_ns);
    sqlite3_bind_int64(q, 5, id->ctime_ns);
}

/* 1 and sha when the cache has id, else 0 (an SQLite error too: hashing
 * again is always correct). */
static int lookup(sqlite3 *db, const disk_file_id *id, uint8_t sha[32]) {
    sqlite3_stmt *q = NULL;
    int found = 0;
    if (sqlite3_prepare_v2(db, "SELECT sha FROM model_hash WHERE " ID_WHERE, -1, &q, NULL))
        goto out;
    bind_id(q, id);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_bytes(q, 0) == 32) {
        memcpy(sha, sqlite3_column_blob(q, 0), 32);
        found = 1;
    }
out:
    sqlite3_finalize(q);
    return found;
}

/* Stores (or refreshes) id's entry and drops the oldest beyond HASH_KEEP.
 * A failure only costs a hash at the next start. */
static void store(sqlite3 *db, const disk_file_id *id, const uint8_t sha[32]) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO model_hash(dev, ino, size, mtime_ns, "
                           "ctime_ns, sha, used) VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                           "(SELECT coalesce(max(used), 0) + 1 FROM model_hash))",
                           -1, &q, NULL) == SQLITE_OK) {
        bind_id(q, id);
        sqlite3_bind_blob(q, 6, sha, 32, SQLITE_STATIC);
        sqlite3_step(q);
    }
    sqlite3_finalize(q);
    char sql[160];
    snprintf(sql, sizeof(sql), "DELETE FROM model_hash WHERE used <= (SELECT max(used) FROM "
             "model_hash) - %d", HASH_KEEP);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* Marks id's entry as the most recently used. */
static void touch(sqlite3 *db, const disk_file_id *id) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "UPDATE model_hash SET used = (SELECT max(used) + 1 FROM "
                           "model_hash) WHERE " ID_WHERE, -1, &q, NULL) == SQLITE_OK) {
        bind_id(q, id);
        sqlite3_step(q);
    }
    sqlite3_finalize(q);
}

static int mix(const uint8_t engine_fp[32], const uint8_t sha[32], uint8_t fp[32]) {
    static const char tag[] = "specula kv-disk model fingerprint 1";
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    unsigned int len = 0;
    const int ok = h && EVP_DigestInit_ex(h, EVP_sha256(), NULL) == 1 &&
                   EVP_DigestUpdate(h, tag, sizeof(tag)) == 1 &&
                   EVP_DigestUpdate(h, engine_fp, 32) == 1 && EVP_DigestUpdate(h, sha, 32) == 1 &&
                   EVP_DigestFinal_ex(h, fp, &len) == 1 && len == 32;
    EVP_MD_CTX_free(h);
    return ok ? 0 : -1;
}

int disk_model_fp(sqlite3 *db, const disk_tier_params *p, uint8_t fp[32], bool *cached,
                     char *err, size_t errlen) {
    *cached = false;
    if (!p->hash_file) {
        memcpy(fp, p->fp, 32);
        return 0;
    }
    uint8_t sha[32];
    const bool have_table = sqlite3_exec(db, HASH_SCHEMA, NULL, NULL, NULL) == SQLITE_OK;
    if (have_table && lookup(db, &p->file_id, sha)) {
        *cached = true;
        touch(db, &p->file_id);
    } else {
        if (p->hash_file(p->hash_ctx, sha)) {
            seterr(err, errlen, "--kv-disk %s: cannot hash the model file", p->dir);
            return -1;
        }
        if (have_table) store(db, &p->file_id, sha);
    }
    if (mix(p->fp, sha, fp)) {
        seterr(err, errlen, "--kv-disk %s: libcrypto failed (out of memory?)", p->dir);
        return -1;
    }
    return 0;
}
