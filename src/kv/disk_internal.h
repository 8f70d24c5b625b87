/* disk_internal.h: the disk tier's parts beside disk_tier.c. */
#ifndef SP_DISK_INTERNAL_H
#define SP_DISK_INTERNAL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/disk_tier.h"

/* ---- disk_fs.c: DIR and its files (every failure: -1 + err naming the
 * path, the reason and the fix) ---- */

/* Creates DIR 0700 when missing, or checks an existing one (ours, no group
 * or other bits, not a symlink, every directory above it writable only by
 * us or root). Returns a descriptor of DIR and its canonical path (no
 * symlinks) in canon. */
int disk_fs_open_dir(const char *dir, char *canon, size_t cap, char *err, size_t errlen);
/* Checks DIR/name when it exists, without following it: a regular file of
 * ours with one link and no group or other bits. 0 also when missing. */
int disk_fs_check(int dir_fd, const char *dir, const char *name, char *err, size_t errlen);
/* Opens DIR/name read-write (created 0600 when missing), O_NOFOLLOW, and
 * checks what was opened as disk_fs_check does. A descriptor. */
int disk_fs_open(int dir_fd, const char *dir, const char *name, char *err, size_t errlen);
/* Opens and flocks DIR/lock (checked first: one owned by another user is
 * refused as untrusted, one held by another process as in use) and writes
 * the pid in it. A descriptor; closing it releases the lock. */
int disk_fs_lock(int dir_fd, const char *dir, char *err, size_t errlen);
/* 0 when path (not followed) is the file fd has open. */
int disk_fs_same(int fd, const char *path);

/* ---- disk_hash.c: the fingerprint rows are keyed on ---- */

/* With p->hash_file: the model file's SHA-256 from the store's cache
 * (table model_hash, keyed by p->file_id), else computed by p->hash_file
 * and cached; fp = SHA-256 of a tag, p->fp and that hash. Without it,
 * fp = p->fp. *cached: found in the cache. 0, or -1 + err. */
int disk_model_fp(sqlite3 *db, const disk_tier_params *p, uint8_t fp[32], bool *cached,
                     char *err, size_t errlen);

#endif
