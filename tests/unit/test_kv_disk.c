/* test_kv_disk.c: the prefix cache's disk tier (src/kv/disk_tier.h).
 *
 * Blocks come back bit-identical, across a reopen; other models, KV types
 * and layouts never read them; rows whose tokens or checksum do not match
 * are never restored; a damaged store (any region, truncated, foreign, of
 * an older format) is set aside or its bad rows rejected, never a crash and
 * never wrong K/V; a second opener of the same directory is refused; a tiny
 * cap keeps working; a long random sequence of operations keeps the tier's
 * invariants. DIR must be the server's own: one others can reach, a
 * symlink, one below a directory others can write, and any lock or store
 * file that is planted (readable by others, a symlink, hard linked, a FIFO,
 * another user's) are refused with the path and the reason, and left as
 * they were. The model file's hash is computed once per file identity and
 * keys the rows. Then the engine: restored K/V equals computed K/V, and
 * greedy output is the same with the tier, across an engine restart, and
 * without it; salts and models never cross through the disk, not even a
 * model one byte apart in the middle of a matrix, or the same file
 * rewritten in place with its mtime set back.
 */
#include <fcntl.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/internal.h"
#include "kv/disk_tier.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "specula.h"
#include "test.h"

static char root[256];
static int dir_no;

/* A fresh directory path under root (not created). */
static void new_dir(char *out, size_t cap) {
    snprintf(out, cap, "%s/d%d", root, dir_no++);
}

static disk_tier_params tparams(const char *dir) {
    disk_tier_params p = {0};
    p.dir = dir;
    p.max_bytes = 64 << 20;
    for (int i = 0; i < 32; i++) p.fp[i] = (uint8_t)(i * 7 + 1);
    p.kv_type = SP_TYPE_F16;
    p.block_size = 4;
    p.n_layer = 3;
    p.kv_dim = 8;
    p.quiet = true;
    return p;
}

static size_t bbytes(const disk_tier_params *p) {
    return kv_paged_block_bytes((tensor_type)p->kv_type, p->n_layer, p->kv_dim, p->block_size);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Block number i's identity, tokens and bytes, all derived from i. */
static void block_of(int i, const disk_tier_params *p, block_digest *h, int32_t *tok,
                     uint8_t *kv) {
    uint64_t s = 0x1234567ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    for (int j = 0; j < 32; j++) h->b[j] = (uint8_t)rng_next(&s);
    for (int j = 0; j < p->block_size; j++) tok[j] = (int32_t)(rng_next(&s) % 32000);
    size_t n = bbytes(p);
    for (size_t j = 0; j < n; j++) kv[j] = (uint8_t)rng_next(&s);
}

typedef struct {
    block_digest h;
    int32_t tok[64];
    uint8_t kv[4096];
} blk;

static void put_n(disk_tier *t, const disk_tier_params *p, int from, int n) {
    blk b;
    for (int i = from; i < from + n; i++) {
        block_of(i, p, &b.h, b.tok, b.kv);
        disk_tier_put(t, &b.h, b.tok, b.kv);
    }
    disk_tier_sync(t);
}

/* 0 restored and bit-identical, 1 missing, -1 rejected, -2 restored WRONG. */
static int get_i(disk_tier *t, const disk_tier_params *p, int i) {
    blk b;
    uint8_t out[4096];
    block_of(i, p, &b.h, b.tok, b.kv);
    memset(out, 0xAB, sizeof(out));
    int rc = disk_tier_get(t, &b.h, b.tok, out);
    if (rc == 0 && memcmp(out, b.kv, bbytes(p))) return -2;
    return rc;
}

static mode_t mode_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? (mode_t)-1 : (sb.st_mode & 0777);
}

static void roundtrip_and_restart(void) {
    char dir[300], err[512], path[400];
    new_dir(dir, sizeof(dir));
    disk_tier_params p = tparams(dir);
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    put_n(t, &p, 0, 20);
    int good = 0;
    for (int i = 0; i < 20; i++) good += get_i(t, &p, i) == 0;
    CHECK(good == 20, "%d of 20 blocks restored bit-identical", good);
    CHECK(get_i(t, &p, 99) == 1, "a block never put is missing");
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    CHECK(st.writes == 20 && st.blocks == 20 && st.hits == 20, "writes %llu blocks %llu hits %llu",
          (unsigned long long)st.writes, (unsigned long long)st.blocks,
          (unsigned long long)st.hits);
    /* a second put of a stored block is not queued */
    blk b;
    block_of(3, &p, &b.h, b.tok, b.kv);
    CHECK(disk_tier_put(t, &b.h, b.tok, b.kv) == 1, "a stored block was queued again");
    /* other tokens under the same hash: rejected, never restored */
    b.tok[0] ^= 1;
    uint8_t out[4096];
    CHECK(disk_tier_get(t, &b.h, b.tok, out) == -1, "tokens that differ were not rejected");
    /* a block just queued restores at once (from the queue's copy until the
     * writer has it), bit-identical; queued twice it is queued once */
    int now_ok = 0, dup = 0;
    for (int i = 500; i < 520; i++) {
        blk c;
        block_of(i, &p, &c.h, c.tok, c.kv);
        disk_tier_put(t, &c.h, c.tok, c.kv);
        dup += disk_tier_put(t, &c.h, c.tok, c.kv) == 0;
        now_ok += get_i(t, &p, i) == 0;
    }
    CHECK(now_ok == 20 && dup == 0, "%d of 20 restored right after put; %d queued twice", now_ok,
          dup);
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "check: %s", err);
    /* a second opener of the directory is refused with a clear message */
    disk_tier *t2 = disk_tier_open(&p, err, sizeof(err));
    CHECK(!t2 && strstr(err, "in use by another process"), "second open: %s", t2 ? "opened" : err);
    disk_tier_close(t2);
    disk_tier_close(t);
    CHECK(mode_of(dir) == 0700, "DIR mode %o", (unsigned)mode_of(dir));
    snprintf(path, sizeof(path), "%s/kv.sqlite", dir);
    CHECK(mode_of(path) == 0600, "store mode %o", (unsigned)mode_of(path));
    snprintf(path, sizeof(path), "%s/lock", dir);
    CHECK(mode_of(path) == 0600, "lock mode %o", (unsigned)mode_of(path));
    /* restart: the same model and layout find everything (block 3 was
     * rejected above and deleted) */
    t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "reopen: %s", err);
    good = 0;
    for (int i = 0; i < 20; i++) good += get_i(t, &p, i) == 0;
    CHECK(good == 19 && get_i(t, &p, 3) == 1 && get_i(t, &p, 510) == 0, "%d of 19 after a restart",
          good);
    disk_tier_close(t);
    /* another model, KV type or layout never reads them (and has its own
     * rows beside them) */
    for (int v = 0; v < 5; v++) {
        disk_tier_params q = p;
        if (v == 0) q.fp[5] ^= 1;
        if (v == 1) q.kv_type = SP_TYPE_F32;
        if (v == 2) q.block_size = 8;
        if (v == 3) q.n_layer = 4;
        if (v == 4) q.kv_dim = 16;
        t = disk_tier_open(&q, err, sizeof(err));
        REQUIRE(t, "open variant %d: %s", v, err);
        int seen = 0;
        for (int i = 0; i < 20; i++) {
            blk c;
            block_of(i, &p, &c.h, c.tok, c.kv);
            seen += disk_tier_has(t, &c.h);
        }
        CHECK(seen == 0, "variant %d sees %d blocks of another model/layout", v, seen);
        put_n(t, &q, 100, 2);
        CHECK(get_i(t, &q, 100) == 0, "variant %d: its own block", v);
        disk_tier_close(t);
    }
    t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "reopen: %s", err);
    CHECK(get_i(t, &p, 0) == 0 && get_i(t, &p, 100) == 1, "the variants' rows stayed theirs");
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "check: %s", err);
    disk_tier_close(t);
}

/* Builds a closed store of n blocks in a fresh dir; returns its file size. */
static long make_store(char *dir, size_t cap, disk_tier_params *p, int n) {
    char err[512], path[400];
    new_dir(dir, cap);
    *p = tparams(dir);
    disk_tier *t = disk_tier_open(p, err, sizeof(err));
    if (!t) return -1;
    put_n(t, p, 0, n);
    disk_tier_close(t);
    snprintf(path, sizeof(path), "%s/kv.sqlite", dir);
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

/* Opens a damaged store: it must open (after setting aside if needed), no
 * block may come back wrong, and the tier must keep working. */
static void open_damaged(const char *label, disk_tier_params *p, int n, int *set_aside,
                         int *wrong, int *restored) {
    char err[512];
    disk_tier *t = disk_tier_open(p, err, sizeof(err));
    CHECK(t != NULL, "%s: open failed: %s", label, err);
    if (!t) return;
    for (int i = 0; i < n; i++) {
        int rc = get_i(t, p, i);
        *wrong += rc == -2;
        *restored += rc == 0;
    }
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    *set_aside += st.set_aside > 0;
    if (!st.broken) { /* it still takes writes, or finds the damage doing so and turns off */
        put_n(t, p, 1000, 1);
        int rc = get_i(t, p, 1000);
        disk_tier_get_stats(t, &st);
        CHECK(rc == 0 || (rc == 1 && st.broken), "%s: a new block after the damage: %d", label, rc);
    }
    disk_tier_close(t);
}

static void damage_file(const char *path, long off, int len, int mode) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    uint8_t buf[4096];
    if (len > (int)sizeof(buf)) len = sizeof(buf);
    ssize_t got = pread(fd, buf, (size_t)len, off);
    for (ssize_t i = 0; i < got; i++) buf[i] = mode ? (uint8_t)(buf[i] ^ 0xFF) : (uint8_t)(i * 31);
    if (got > 0 && pwrite(fd, buf, (size_t)got, off) != got) {
        /* the check below sees what was written */
    }
    close(fd);
}

static void corrupt_every_region(void) {
    char dir[300], path[400];
    disk_tier_params p;
    const int n = 24;
    long size = make_store(dir, sizeof(dir), &p, n);
    REQUIRE(size > 0, "making a store");
    int wrong = 0, runs = 0, set_aside = 0, restored = 0;
    /* every 1 KB region of the file in turn, flipped, each on a fresh copy */
    for (long off = 0; off < size; off += 1024) {
        char d2[300];
        disk_tier_params q;
        if (make_store(d2, sizeof(d2), &q, n) != size) continue;
        snprintf(path, sizeof(path), "%s/kv.sqlite", d2);
        damage_file(path, off, 256, (int)(off / 1024) & 1);
        char label[64];
        snprintf(label, sizeof(label), "region at %ld", off);
        open_damaged(label, &q, n, &set_aside, &wrong, &restored);
        runs++;
    }
    CHECK(runs >= 10 && wrong == 0, "%d damaged stores, %d blocks restored wrong", runs, wrong);
    CHECK(set_aside > 0 && restored > 0,
          "damage was found (%d set aside) and undamaged rows still served (%d)", set_aside,
          restored);
    printf("# %d regions damaged: %d stores set aside, %d blocks still restored, 0 wrong\n", runs,
           set_aside, restored);
}

static void truncated_foreign_older(void) {
    char dir[300], path[400], err[512];
    disk_tier_params p;
    int wrong = 0, set_aside = 0, restored = 0;
    /* truncated to half, to one page, to 10 bytes */
    const long cuts[] = {-2, 4096, 10};
    for (int c = 0; c < 3; c++) {
        long size = make_store(dir, sizeof(dir), &p, 16);
        REQUIRE(size > 0, "making a store");
        snprintf(path, sizeof(path), "%s/kv.sqlite", dir);
        CHECK(truncate(path, cuts[c] < 0 ? size / 2 : cuts[c]) == 0, "truncate");
        open_damaged("truncated", &p, 16, &set_aside, &wrong, &restored);
    }
    CHECK(set_aside == 3 && wrong == 0, "truncated: %d set aside, %d wrong", set_aside, wrong);
    /* a file that is not SQLite, and an SQLite file of another program */
    for (int f = 0; f < 2; f++) {
        new_dir(dir, sizeof(dir));
        p = tparams(dir);
        mkdir(dir, 0700);
        snprintf(path, sizeof(path), "%s/kv.sqlite", dir);
        FILE *fh = fopen(path, "wb");
        REQUIRE(fh, "creating %s", path);
        if (f == 0) {
            for (int i = 0; i < 10000; i++) fputc(i * 17, fh);
            fclose(fh);
        } else {
            fclose(fh);
            char cmd[600];
            snprintf(cmd, sizeof(cmd), "python3 -c \"import sqlite3; c = sqlite3.connect('%s'); "
                     "c.execute('create table foo(x)'); c.commit()\"", path);
            CHECK(system(cmd) == 0, "python3 sqlite3");
        }
        /* the server's own file (a file others could read is refused
         * before its contents are looked at: untrusted_files) */
        CHECK(chmod(path, 0600) == 0, "chmod %s", path);
        set_aside = 0;
        open_damaged("foreign", &p, 1, &set_aside, &wrong, &restored);
        CHECK(set_aside == 1, "foreign file %d not set aside", f);
    }
    /* an older format version */
    long size = make_store(dir, sizeof(dir), &p, 4);
    REQUIRE(size > 0, "making a store");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "python3 -c \"import sqlite3; c = sqlite3.connect('%s/kv.sqlite'); "
             "c.execute(\\\"update meta set v = 0 where k = 'format'\\\"); c.commit()\"", dir);
    CHECK(system(cmd) == 0, "python3 sqlite3");
    set_aside = restored = 0;
    open_damaged("older", &p, 4, &set_aside, &wrong, &restored);
    CHECK(set_aside == 1 && restored == 0 && wrong == 0, "older format: set aside %d, restored %d",
          set_aside, restored);
    /* a damaged row's K/V (a checksum mismatch SQLite cannot see) */
    size = make_store(dir, sizeof(dir), &p, 4);
    snprintf(cmd, sizeof(cmd), "python3 -c \"import sqlite3; c = sqlite3.connect('%s/kv.sqlite'); "
             "c.execute('update blocks set kv = zeroblob(length(kv)) where id = 2'); c.commit()\"",
             dir);
    CHECK(system(cmd) == 0, "python3 sqlite3");
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    int rc[4];
    for (int i = 0; i < 4; i++) rc[i] = get_i(t, &p, i);
    CHECK(rc[0] == 0 && rc[1] == -1 && rc[2] == 0 && rc[3] == 0, "rows: %d %d %d %d", rc[0], rc[1],
          rc[2], rc[3]);
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "the bad row was deleted: %s", err);
    disk_tier_close(t);
}

static void tiny_cap(void) {
    char dir[300], err[512];
    new_dir(dir, sizeof(dir));
    disk_tier_params p = tparams(dir);
    const size_t row = bbytes(&p) + 4 * (size_t)p.block_size;
    p.max_bytes = row / 2; /* smaller than one block: nothing fits, all is skipped */
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    put_n(t, &p, 0, 5);
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    CHECK(st.skipped_cap == 5 && st.blocks == 0, "skipped %llu", (unsigned long long)st.skipped_cap);
    disk_tier_close(t);
    new_dir(dir, sizeof(dir));
    p = tparams(dir);
    p.max_bytes = 3 * (row + 200); /* three rows */
    t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    put_n(t, &p, 0, 3);
    CHECK(get_i(t, &p, 0) == 0, "block 0"); /* now the most recently used */
    disk_tier_sync(t);
    put_n(t, &p, 3, 1);
    disk_tier_get_stats(t, &st);
    CHECK(st.blocks == 3 && st.evictions == 1, "blocks %llu evictions %llu",
          (unsigned long long)st.blocks, (unsigned long long)st.evictions);
    CHECK(get_i(t, &p, 0) == 0 && get_i(t, &p, 1) == 1 && get_i(t, &p, 3) == 0,
          "LRU: the touched block stays, the oldest goes");
    put_n(t, &p, 10, 30);
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "check: %s", err);
    disk_tier_close(t);
}

/* The queue never blocks: with two slots and no pause, every put is
 * either written or counted as skipped. */
static void queue_full_skips(void) {
    char dir[300], err[512];
    new_dir(dir, sizeof(dir));
    disk_tier_params p = tparams(dir);
    p.queue_blocks = 2;
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    blk b;
    int queued = 0, other = 0;
    for (int i = 0; i < 300; i++) {
        block_of(i, &p, &b.h, b.tok, b.kv);
        int rc = disk_tier_put(t, &b.h, b.tok, b.kv);
        queued += rc == 0;
        other += rc != 0;
    }
    disk_tier_sync(t);
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    CHECK(st.writes == (uint64_t)queued && st.skipped_queue == (uint64_t)other &&
              queued + other == 300,
          "queued %d (written %llu), skipped %d (counted %llu)", queued,
          (unsigned long long)st.writes, other, (unsigned long long)st.skipped_queue);
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "check: %s", err);
    disk_tier_close(t);
}

/* Random puts, gets, bad-token gets, reopenings and cap pressure; after
 * every phase the invariants hold and nothing restored is ever wrong. */
static void stress(void) {
    char dir[300], err[512];
    new_dir(dir, sizeof(dir));
    disk_tier_params p = tparams(dir);
    const size_t row = bbytes(&p) + 4 * (size_t)p.block_size;
    p.max_bytes = 40 * (row + 200);
    p.queue_blocks = 8;
    uint64_t s = 777;
    int wrong = 0, checks_failed = 0, hits = 0;
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    for (int op = 0; op < 6000; op++) {
        int i = (int)(rng_next(&s) % 120);
        int what = (int)(rng_next(&s) % 100);
        if (what < 45) {
            blk b;
            block_of(i, &p, &b.h, b.tok, b.kv);
            disk_tier_put(t, &b.h, b.tok, b.kv);
        } else if (what < 90) {
            int rc = get_i(t, &p, i);
            wrong += rc == -2;
            hits += rc == 0;
        } else if (what < 95) {
            blk b;
            uint8_t out[4096];
            block_of(i, &p, &b.h, b.tok, b.kv);
            b.tok[p.block_size - 1] ^= 4;
            wrong += disk_tier_get(t, &b.h, b.tok, out) == 0;
        } else if (what < 97) {
            disk_tier_close(t);
            t = disk_tier_open(&p, err, sizeof(err));
            REQUIRE(t, "reopen: %s", err);
        } else if (disk_tier_check(t, err, sizeof(err))) {
            if (!checks_failed++) fprintf(stderr, "  check at op %d: %s\n", op, err);
        }
    }
    CHECK(disk_tier_check(t, err, sizeof(err)) == 0, "final check: %s", err);
    CHECK(wrong == 0 && checks_failed == 0 && hits > 100, "%d wrong, %d checks failed, %d hits",
          wrong, checks_failed, hits);
    disk_tier_close(t);
}

static void checksum_sensitive(void) {
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)(i * 13);
    const uint64_t base = disk_sum(1, buf, sizeof(buf));
    int same = 0;
    for (int i = 0; i < 1000; i += 7)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (uint8_t)(1 << bit);
            same += disk_sum(1, buf, sizeof(buf)) == base;
            buf[i] ^= (uint8_t)(1 << bit);
        }
    CHECK(same == 0, "%d single-bit flips unnoticed", same);
    CHECK(disk_sum(1, buf, 999) != disk_sum(1, buf, 1000) &&
              disk_sum(2, buf, 1000) != base,
          "length and seed change the sum");
}

/* The restore rule: only where a restored block costs less than computing
 * its tokens; until both sides are measured, restore (which measures). */
static void restore_rule(void) {
    CHECK(eng_disk_restore_pays(0, 0, 16) && eng_disk_restore_pays(0, 1.0, 16) &&
              eng_disk_restore_pays(2.0, 0, 16),
          "unmeasured: restore");
    CHECK(eng_disk_restore_pays(0.5, 0.1, 16), "0.5 ms < 16 x 0.1 ms: restore");
    CHECK(!eng_disk_restore_pays(2.0, 0.1, 16), "2 ms > 16 x 0.1 ms: compute");
    CHECK(!eng_disk_restore_pays(2.0, 0.125, 16), "equal: compute");
}

/* ---- DIR and its files belong to the server ----------------------------------------- */

/* Opening p is refused with a message naming want1 (and want2 when given). */
static bool refused(const disk_tier_params *p, const char *want1, const char *want2, char *err,
                    size_t cap) {
    err[0] = 0;
    disk_tier *t = disk_tier_open(p, err, cap);
    if (t) {
        disk_tier_close(t);
        snprintf(err, cap, "it opened");
        return false;
    }
    return strstr(err, want1) && (!want2 || strstr(err, want2));
}

/* A DIR others can reach, a symlink, or one below a directory others can
 * write is refused, named, and left as it was (never chmod'ed). */
static void untrusted_dir(void) {
    char dir[400], real[300], parent[300], err[1024];
    const mode_t modes[] = {0755, 0770, 0701};
    for (int i = 0; i < 3; i++) {
        new_dir(dir, sizeof(dir));
        const bool made = mkdir(dir, 0700) == 0 && chmod(dir, modes[i]) == 0;
        REQUIRE(made, "mkdir %s", dir);
        disk_tier_params p = tparams(dir);
        CHECK(refused(&p, dir, "chmod 700", err, sizeof(err)), "DIR mode %o: %s",
              (unsigned)modes[i], err);
        CHECK(mode_of(dir) == modes[i], "DIR mode %o became %o", (unsigned)modes[i],
              (unsigned)mode_of(dir));
    }
    new_dir(dir, sizeof(dir));
    new_dir(real, sizeof(real));
    bool made = mkdir(real, 0700) == 0 && symlink(real, dir) == 0;
    REQUIRE(made, "symlink %s", dir);
    disk_tier_params p = tparams(dir);
    CHECK(refused(&p, dir, "symbolic link", err, sizeof(err)), "DIR a symlink: %s", err);
    /* below a directory anyone can write (not sticky): another user could
     * swap DIR; a sticky one (like /tmp) is fine */
    new_dir(parent, sizeof(parent));
    made = mkdir(parent, 0700) == 0 && chmod(parent, 0777) == 0;
    REQUIRE(made, "mkdir %s", parent);
    snprintf(dir, sizeof(dir), "%s/kv", parent);
    p = tparams(dir);
    CHECK(refused(&p, parent, "above it", err, sizeof(err)), "below a 0777 directory: %s", err);
    made = chmod(parent, 01777) == 0;
    REQUIRE(made, "chmod");
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    CHECK(t != NULL, "below a sticky 1777 directory: %s", err);
    disk_tier_close(t);
}

/* Plants DIR/name as kind: 0 a regular file others can read, holding
 * "planted"; 1 a symlink to a private file; 2 a hard link to one; 3 a FIFO. */
static int plant(const char *dir, const char *name, int kind) {
    char path[400], other[400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(other, sizeof(other), "%s.elsewhere-%s", dir, name);
    if (kind == 0) {
        int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd < 0) return -1;
        const bool ok = fchmod(fd, 0644) == 0 && write(fd, "planted", 7) == 7;
        close(fd);
        return ok ? 0 : -1;
    }
    if (kind == 3) return mkfifo(path, 0600);
    int fd = open(other, O_CREAT | O_WRONLY, 0600);
    if (fd < 0) return -1;
    close(fd);
    return kind == 1 ? symlink(other, path) : link(other, path);
}

/* Any lock or store file that is not the server's own private regular file
 * is refused with its path and why; a planted one is left untouched. */
static void untrusted_files(void) {
    const char *names[] = {"lock", "kv.sqlite", "kv.sqlite-wal", "kv.sqlite-shm",
                           "kv.sqlite-journal"};
    const char *why[] = {"group or others", "symbolic link", "2 links", "not a regular file"};
    char dir[300], path[400], err[1024];
    for (int n = 0; n < 5; n++)
        for (int kind = 0; kind < 4; kind++) {
            new_dir(dir, sizeof(dir));
            const bool planted = mkdir(dir, 0700) == 0 && plant(dir, names[n], kind) == 0;
            REQUIRE(planted, "planting %s", names[n]);
            snprintf(path, sizeof(path), "%s/%s", dir, names[n]);
            disk_tier_params p = tparams(dir);
            CHECK(refused(&p, path, why[kind], err, sizeof(err)), "%s (kind %d): %s", names[n],
                  kind, err);
            if (kind == 0) {
                char buf[16] = "";
                int fd = open(path, O_RDONLY);
                const ssize_t got = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
                if (fd >= 0) close(fd);
                CHECK(mode_of(path) == 0644 && got == 7 && !memcmp(buf, "planted", 7),
                      "%s was changed (mode %o)", names[n], (unsigned)mode_of(path));
            }
            /* the fix the message gives works: without the file, DIR opens */
            unlink(path);
            disk_tier *t = disk_tier_open(&p, err, sizeof(err));
            CHECK(t != NULL, "%s removed, the open still fails: %s", names[n], err);
            disk_tier_close(t);
        }
}

/* Files and directories another user owns (made with chown: root only). A
 * lock file of another user's is untrusted, even while held, never "in
 * use". */
static void foreign_owner(void) {
    if (geteuid() != 0) {
        SKIP("needs root to make files another user owns");
        return;
    }
    const uid_t other = 65534;
    char dir[400], path[500], err[1024];
    new_dir(dir, sizeof(dir));
    bool made = mkdir(dir, 0700) == 0 && chown(dir, other, other) == 0;
    REQUIRE(made, "chown %s", dir);
    disk_tier_params p = tparams(dir);
    CHECK(refused(&p, dir, "owned by uid 65534", err, sizeof(err)), "DIR: %s", err);
    const char *names[] = {"lock", "kv.sqlite", "kv.sqlite-wal", "kv.sqlite-shm"};
    for (int n = 0; n < 4; n++) {
        new_dir(dir, sizeof(dir));
        made = mkdir(dir, 0700) == 0;
        REQUIRE(made, "mkdir");
        snprintf(path, sizeof(path), "%s/%s", dir, names[n]);
        int fd = open(path, O_CREAT | O_RDWR, 0600);
        made = fd >= 0 && fchown(fd, other, other) == 0;
        if (!made && fd >= 0) close(fd);
        REQUIRE(made, "chown %s", path);
        const bool held = n == 0 && flock(fd, LOCK_EX | LOCK_NB) == 0; /* its owner holds it */
        p = tparams(dir);
        CHECK(refused(&p, path, "owned by uid 65534", err, sizeof(err)) &&
                  !strstr(err, "in use"),
              "%s%s: %s", names[n], held ? " (held)" : "", err);
        close(fd);
    }
    char parent[300];
    new_dir(parent, sizeof(parent));
    made = mkdir(parent, 0755) == 0 && chown(parent, other, other) == 0;
    REQUIRE(made, "chown %s", parent);
    snprintf(dir, sizeof(dir), "%s/kv", parent);
    p = tparams(dir);
    CHECK(refused(&p, parent, "above it", err, sizeof(err)), "below another user's directory: %s",
          err);
}

/* ---- the model file's hash, cached by its identity ----------------------------------- */

typedef struct {
    int calls;
    bool fail;
    uint8_t sha[32];
} fake_model;

static int fake_hash(void *ctx, uint8_t out[32]) {
    fake_model *f = ctx;
    f->calls++;
    memcpy(out, f->sha, 32);
    return f->fail ? -1 : 0;
}

/* The file's hash is computed once per identity and mixed into the
 * fingerprint rows are keyed on; any change of identity hashes again. */
static void model_hash_cache(void) {
    char dir[300], err[512];
    new_dir(dir, sizeof(dir));
    disk_tier_params p = tparams(dir);
    fake_model f = {0};
    memset(f.sha, 0x5A, 32);
    p.hash_file = fake_hash;
    p.hash_ctx = &f;
    p.file_id = (disk_file_id){11, 22, 33, 44, 55};
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "open: %s", err);
    uint8_t fp1[32], fp2[32];
    disk_tier_fp(t, fp1);
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    CHECK(f.calls == 1 && !st.hash_cached && memcmp(fp1, p.fp, 32),
          "cold: %d hashes, cached %d, fingerprint %s", f.calls, st.hash_cached,
          memcmp(fp1, p.fp, 32) ? "mixed" : "unmixed");
    put_n(t, &p, 0, 4);
    disk_tier_close(t);
    t = disk_tier_open(&p, err, sizeof(err));
    REQUIRE(t, "reopen: %s", err);
    disk_tier_fp(t, fp2);
    disk_tier_get_stats(t, &st);
    CHECK(f.calls == 1 && st.hash_cached && !memcmp(fp1, fp2, 32) && get_i(t, &p, 0) == 0,
          "reopened: %d hashes, cached %d", f.calls, st.hash_cached);
    disk_tier_close(t);
    /* the same file rewritten (each identity field in turn): hashed again,
     * and its new bytes key other rows */
    for (int k = 0; k < 5; k++) {
        disk_tier_params q = p;
        uint64_t *u[] = {&q.file_id.dev, &q.file_id.ino, &q.file_id.size};
        if (k < 3) (*u[k])++;
        else if (k == 3) q.file_id.mtime_ns++;
        else q.file_id.ctime_ns++;
        f.sha[0] = (uint8_t)(0x10 + k);
        const int before = f.calls;
        t = disk_tier_open(&q, err, sizeof(err));
        REQUIRE(t, "open variant %d: %s", k, err);
        disk_tier_fp(t, fp2);
        CHECK(f.calls == before + 1 && memcmp(fp1, fp2, 32) && get_i(t, &q, 0) == 1,
              "identity field %d changed: %d hashes, the old rows %s", k, f.calls - before,
              get_i(t, &q, 0) == 1 ? "unseen" : "SEEN");
        disk_tier_close(t);
    }
    f.fail = true;
    disk_tier_params q = p;
    q.file_id.ctime_ns += 100;
    CHECK(refused(&q, dir, "cannot hash the model", err, sizeof(err)), "a failed hash: %s", err);
}

/* ---- the engine ---------------------------------------------------------------- */

static sp_model *model, *model2;

static const char *DOC =
    "Specula keeps the K/V of earlier prompts in blocks of sixteen tokens. A block "
    "is found again by a hash that chains its parent, its tokens, the model and the "
    "tenant's salt, so only the same text under the same salt and model shares it. "
    "The disk tier keeps those blocks across restarts, larger than the memory budget. ";

static sp_engine *engine(const sp_model *m, const char *dir, sp_kv_type kt, int32_t bs) {
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.max_seqs = 2;
    p.n_ctx = 512;
    p.kv_type = kt;
    p.kv_block_size = bs;
    p.kv_disk_dir = dir;
    p.debug_check = true;
    char err[512];
    sp_engine *e = sp_engine_create(m, p, err, sizeof(err));
    if (!e) fprintf(stderr, "  engine: %s\n", err);
    return e;
}

/* Greedy continuation of DOC + tail; *cached and *disk get its counts. */
static int gen(sp_engine *e, const char *tail, const char *salt, sp_token *out, int *cached,
               int *disk) {
    char prompt[2048], err[256];
    snprintf(prompt, sizeof(prompt), "%s%s", DOC, tail);
    sp_request_params r = sp_request_default_params();
    r.prompt = prompt;
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    r.cache_salt = salt;
    int64_t id = sp_engine_submit(e, &r, err, sizeof(err));
    if (id <= 0) return -1;
    sp_request_status st;
    sp_engine_wait(e, id, 1 << 30, -1, &st);
    int n = sp_engine_read(e, id, out, 64, NULL, 0) == SP_OK ? st.n_tokens : -1;
    *cached = st.stats.cached_tokens;
    *disk = st.stats.cached_tokens_disk;
    sp_engine_release(e, id);
    return n;
}

static void engine_restart_warm(void) {
    char dir[300], err[512];
    new_dir(dir, sizeof(dir));
    sp_token a[64], b[64], c[64], d[64];
    int ca, da, cb, db, cc, dc, cd, dd;
    /* without the tier: the reference output */
    sp_engine *e = engine(model, NULL, SP_KV_F16, 16);
    REQUIRE(e, "engine");
    int na = gen(e, "Question one:", NULL, a, &ca, &da);
    sp_engine_free(e);
    /* with the tier, cold: computes and writes */
    e = engine(model, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine with the tier");
    int nb = gen(e, "Question one:", NULL, b, &cb, &db);
    CHECK(sp_engine_check(e, err, sizeof(err)) == SP_OK, "%s", err);
    sp_engine_free(e); /* drains the writes */
    /* restarted: served from disk */
    e = engine(model, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine restarted");
    int nc = gen(e, "Question one:", NULL, c, &cc, &dc);
    /* a salted request never sees the unsalted blocks */
    int nd = gen(e, "Question one:", "tenant-b", d, &cd, &dd);
    sp_engine_stats st;
    sp_engine_get_stats(e, &st);
    CHECK(sp_engine_check(e, err, sizeof(err)) == SP_OK, "%s", err);
    sp_engine_free(e);
    CHECK(na > 0 && na == nb && nb == nc && nc == nd && !memcmp(a, b, sizeof(sp_token) * na) &&
              !memcmp(b, c, sizeof(sp_token) * nb) && !memcmp(c, d, sizeof(sp_token) * nc),
          "greedy outputs differ: %d %d %d %d tokens", na, nb, nc, nd);
    CHECK(db == 0 && dc >= 48 && dc == cc, "cold %d from disk; restarted %d cached, %d from disk",
          db, cc, dc);
    CHECK(cd == 0 && dd == 0, "the salted request hit %d (%d from disk)", cd, dd);
    CHECK(st.disk_restored >= 3 && st.cache_hit_tokens_disk == (uint64_t)dc && st.disk_on,
          "restored %llu blocks", (unsigned long long)st.disk_restored);
    /* another model, KV type or block size never reads them */
    const struct {
        const sp_model *m;
        sp_kv_type kt;
        int32_t bs;
    } other[] = {{model2, SP_KV_F16, 16}, {model, SP_KV_F32, 16}, {model, SP_KV_F16, 32}};
    for (int i = 0; i < 3; i++) {
        e = engine(other[i].m, dir, other[i].kt, other[i].bs);
        REQUIRE(e, "engine variant %d", i);
        int ce, de;
        sp_token x[64];
        int nx = gen(e, "Question one:", NULL, x, &ce, &de);
        CHECK(nx > 0 && de == 0, "variant %d restored %d tokens of another model/layout", i, de);
        sp_engine_free(e);
    }
    /* a second engine on the same directory is refused */
    e = engine(model, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine");
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 1;
    p.n_ctx = 256;
    p.kv_disk_dir = dir;
    sp_engine *e2 = sp_engine_create(model, p, err, sizeof(err));
    CHECK(!e2 && strstr(err, "in use"), "a second engine on one DIR: %s", e2 ? "created" : err);
    sp_engine_free(e2);
    sp_engine_free(e);
    p.prefix_cache = false;
    e2 = sp_engine_create(model, p, err, sizeof(err));
    CHECK(!e2 && strstr(err, "prefix cache"), "--kv-disk without the prefix cache: %s",
          e2 ? "created" : err);
    sp_engine_free(e2);
}

/* Copies a file (0600); 0 or -1. */
static int copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *buf = t_read_file(from, &n);
    int fd = buf ? open(to, O_CREAT | O_TRUNC | O_WRONLY, 0600) : -1;
    const bool ok = fd >= 0 && write(fd, buf, n) == (ssize_t)n;
    if (fd >= 0) close(fd);
    free(buf);
    return ok ? 0 : -1;
}

/* Flips bits mask of the byte of path at off, in place; keep_times: mtime
 * and atime set back afterwards (only ctime then tells). */
static int flip_byte(const char *path, long off, uint8_t mask, bool keep_times) {
    struct stat sb;
    int fd = open(path, O_RDWR);
    uint8_t c;
    bool ok = fd >= 0 && fstat(fd, &sb) == 0 && pread(fd, &c, 1, off) == 1;
    c ^= mask;
    ok = ok && pwrite(fd, &c, 1, off) == 1;
    if (ok && keep_times) {
        const struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
        ok = futimens(fd, ts) == 0;
    }
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

/* A model whose blk.0.attn_k differs in one byte in the middle (where the
 * sampled fingerprint does not look) never restores the other's blocks,
 * whether it is another file or the same file rewritten in place with its
 * mtime set back; the unchanged model still does. */
static void engine_model_changed(void) {
    char m1[300], m2[300], dir[300], err[512];
    snprintf(m1, sizeof(m1), "%s/model-a.gguf", root);
    snprintf(m2, sizeof(m2), "%s/model-b.gguf", root);
    snprintf(err, sizeof(err), "%s/models/ref-llama-spm-q8_0.gguf", t_ref_dir());
    const gguf_tensor *k = gguf_find_tensor(model->gguf, "blk.0.attn_k.weight");
    REQUIRE(k, "no blk.0.attn_k.weight");
    const long off = (long)((const uint8_t *)k->data -
                            (const uint8_t *)gguf_file_bytes(model->gguf)) + (long)k->nbytes / 2;
    /* (REQUIRE evaluates its condition twice: side effects go before it) */
    bool made = copy_file(err, m1) == 0 && copy_file(err, m2) == 0 &&
                flip_byte(m2, off, 0x01, false) == 0;
    REQUIRE(made, "copying the model");
    sp_model *a = sp_model_load(m1, sp_model_default_params(), err, sizeof(err));
    sp_model *b = a ? sp_model_load(m2, sp_model_default_params(), err, sizeof(err)) : NULL;
    uint8_t ha[32], hb[32], ha2[32], fa[32], fb[32];
    if (!a || !b) {
        CHECK(0, "loading the copies: %s", err);
        goto out;
    }
    CHECK(model_file_hash(a, ha) == 0 && model_file_hash(b, hb) == 0 &&
              model_file_hash(a, ha2) == 0 && memcmp(ha, hb, 32) && !memcmp(ha, ha2, 32),
          "the file hash misses a byte in the middle of blk.0.attn_k, or is unstable");
    model_fingerprint(a, fa);
    model_fingerprint(b, fb);
    printf("# the sampled fingerprint %s that byte\n", memcmp(fa, fb, 32) ? "sees" : "misses");
    new_dir(dir, sizeof(dir));
    sp_token x[64];
    int c0, d0, c1, d1, c2, d2, c3, d3;
    sp_engine *e = engine(a, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine");
    int n0 = gen(e, "Question one:", NULL, x, &c0, &d0);
    sp_engine_free(e);
    e = engine(b, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine on the changed copy");
    int n1 = gen(e, "Question one:", NULL, x, &c1, &d1);
    sp_engine_free(e);
    CHECK(n0 > 0 && n1 > 0 && c1 == 0 && d1 == 0,
          "the changed copy reused %d cached tokens (%d from disk) of the other", c1, d1);
    e = engine(a, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine");
    int n2 = gen(e, "Question one:", NULL, x, &c2, &d2);
    sp_engine_free(e);
    CHECK(n2 > 0 && d2 >= 48, "the unchanged model restored %d tokens", d2);
    /* rewritten in place, mtime and size kept (another bit than b's: b
     * wrote rows too): the cached hash is not used */
    sp_model_free(a);
    a = NULL;
    made = flip_byte(m1, off, 0x80, true) == 0;
    REQUIRE(made, "rewriting %s", m1);
    a = sp_model_load(m1, sp_model_default_params(), err, sizeof(err));
    REQUIRE(a, "reloading: %s", err);
    e = engine(a, dir, SP_KV_F16, 16);
    REQUIRE(e, "engine");
    int n3 = gen(e, "Question one:", NULL, x, &c3, &d3);
    sp_engine_free(e);
    CHECK(n3 > 0 && c3 == 0 && d3 == 0,
          "rewritten in place (mtime kept): %d cached tokens, %d from disk", c3, d3);
out:
    sp_model_free(a);
    sp_model_free(b);
}

/* Restored K/V is bit-identical to computed K/V, and the next token's
 * logits computed on top of restored blocks equal those on computed ones. */
static void restored_kv_equals_computed(void) {
    const sp_model_info *h = sp_model_get_info(model);
    const int32_t kvd = h->n_head_kv * h->head_dim, bs = 16;
    kv_paged_params kp = {SP_TYPE_F16, h->n_layer, kvd, bs, 64, 2, 16, true, 0, NULL, 0};
    char err[512], dir[300];
    kv_store *kv = kv_paged_create(kp, err, sizeof(err));
    REQUIRE(kv, "%s", err);
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_seq_max = 2;
    cp.n_ctx = 256;
    cp.n_batch = 256;
    sp_context *c = context_create_with_kv(model, cp, kv, NULL, err, sizeof(err));
    if (!c) kv->ops->destroy(kv);
    REQUIRE(c, "%s", err);
    new_dir(dir, sizeof(dir));
    disk_tier_params dp = tparams(dir);
    model_fingerprint(model, dp.fp);
    dp.block_size = bs;
    dp.n_layer = h->n_layer;
    dp.kv_dim = kvd;
    disk_tier *t = disk_tier_open(&dp, err, sizeof(err));
    sp_token toks[128];
    int n = sp_tokenize(sp_model_get_vocab(model), DOC, strlen(DOC), toks, 128, true, false);
    block_digest hs[4];
    if (!t || n < 49) {
        CHECK(0, "tier %s, prompt %d tokens", t ? "open" : err, n);
        goto out;
    }
    block_hash_chain(toks, 48, bs, dp.fp, 32, NULL, 0, hs);
    int32_t pos[64], seq[64];
    for (int i = 0; i < 48; i++) pos[i] = i, seq[i] = 0;
    sp_batch b = {48, toks, pos, seq, NULL};
    CHECK(sp_decode(c, &b, err, sizeof(err)) == 0, "%s", err);
    static uint8_t blk[1 << 20];
    for (int j = 0; j < 3; j++) {
        REQUIRE(kv_paged_block_bytes(SP_TYPE_F16, h->n_layer, kvd, bs) <= sizeof blk, "block size");
        CHECK(kv_paged_block_read(kv, 0, j, blk) == 0, "block %d read", j);
        disk_tier_put(t, &hs[j], toks + j * bs, blk);
    }
    disk_tier_sync(t);
    /* seq 1 takes the three blocks from disk into fresh pool blocks (the
     * hashes are not in RAM: seq 0's blocks were never committed) */
    static uint8_t buf[1 << 20];
    int got = 0;
    for (int j = 0; j < 3; j++)
        got += disk_tier_get(t, &hs[j], toks + j * bs, buf) == 0 &&
               kv_paged_append(kv, 1, &hs[j], buf) == 0;
    CHECK(got == 3, "%d of 3 blocks restored", got);
    CHECK(kv_paged_check(kv, err, sizeof(err)) == 0, "%s", err);
    int bad = 0;
    const size_t row = (size_t)kvd * 2;
    for (int l = 0; l < h->n_layer; l++)
        for (int p = 0; p < 48; p++) {
            const void *k0, *v0, *k1, *v1;
            kv->ops->span(kv, l, 0, p, p + 1, &k0, &v0);
            kv->ops->span(kv, l, 1, p, p + 1, &k1, &v1);
            bad += memcmp(k0, k1, row) != 0 || memcmp(v0, v1, row) != 0;
        }
    CHECK(bad == 0, "%d rows differ between restored and computed K/V", bad);
    /* token 48 on both: the same logits */
    sp_token t2[2] = {toks[48], toks[48]};
    int32_t p2[2] = {48, 48}, s2[2] = {0, 1};
    int8_t want[2] = {1, 1};
    sp_batch b2 = {2, t2, p2, s2, want};
    CHECK(sp_decode(c, &b2, err, sizeof(err)) == 0, "%s", err);
    const float *l0 = sp_get_logits(c, 0), *l1 = sp_get_logits(c, 1);
    CHECK(l0 && l1 && !memcmp(l0, l1, (size_t)h->n_vocab * sizeof(float)),
          "logits after restored K/V differ");
out:
    disk_tier_close(t);
    sp_context_free(c);
    kv->ops->destroy(kv);
}

int main(void) {
    snprintf(root, sizeof(root), "/tmp/specula_test_kv_disk.%ld", (long)getpid());
    mkdir(root, 0700);
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/models/ref-llama-spm-q8_0.gguf", t_ref_dir());
    model = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    snprintf(path, sizeof(path), "%s/models/ref-llama-spm-f16.gguf", t_ref_dir());
    model2 = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    RUN(checksum_sensitive);
    RUN(roundtrip_and_restart);
    RUN(corrupt_every_region);
    RUN(truncated_foreign_older);
    RUN(tiny_cap);
    RUN(queue_full_skips);
    RUN(stress);
    RUN(restore_rule);
    RUN(untrusted_dir);
    RUN(untrusted_files);
    RUN(foreign_owner);
    RUN(model_hash_cache);
    if (model && model2) {
        RUN(restored_kv_equals_computed);
        RUN(engine_restart_warm);
        RUN(engine_model_changed);
    } else {
        printf("FAIL engine cases: cannot load the reference models: %s\n", err);
        t_cases_failed += 3;
    }
    sp_model_free(model);
    sp_model_free(model2);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd)) {
        /* a leftover temporary directory is no test failure */
    }
    TEST_END();
}
