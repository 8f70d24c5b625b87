/* fuzz_kvstore.c: the disk tier's store reader (src/kv/disk_tier.c) on any
 * file. The input is written as DIR/kv.sqlite, then:
 *   - disk_tier_scan_file reads every row read-only with get()'s checks;
 *   - disk_tier_open validates it (header, format record, quick_check),
 *     setting it aside when it is damaged, and get() looks up the blocks
 *     the seeds hold, and has() a few others.
 * Checked: no crash or sanitizer report; open never fails on a bad file
 * (it sets it aside and starts empty); a block get() restores passes its
 * checksum (the same row scan_file counts), so its bytes are what was
 * written. Seeds: corpus/kvstore (make_kvstore_seeds.py: 512-byte pages,
 * block size 4, one layer, kv_dim 4, F16). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "kv/disk_tier.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Empties and removes dir (only files: the tier makes no subdirectories). */
static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[256], path[300];
    snprintf(dir, sizeof(dir), "/tmp/specula_fuzz_kvstore.%ld", (long)getpid());
    rm_dir(dir);
    if (mkdir(dir, 0700)) return 0;
    snprintf(path, sizeof(path), "%s/kv.sqlite", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    /* the server's own private file: one others can read is refused before
     * its contents are looked at */
    if (chmod(path, 0600)) return 0;
    const int32_t bs = 4;
    const size_t bb = 2 * 1 * 4 * 4 * 2; /* K+V, 1 layer, bs 4, kv_dim 4, f16 */
    int64_t rows = disk_tier_scan_file(path, bs, bb);
    FZ_ASSERT(rows >= -1);
    disk_tier_params p = {0};
    char err[512];
    p.dir = dir;
    p.max_bytes = 1 << 20;
    for (int i = 0; i < 32; i++) p.fp[i] = (uint8_t)i;
    p.kv_type = SP_TYPE_F16;
    p.block_size = bs;
    p.n_layer = 1;
    p.kv_dim = 4;
    p.queue_blocks = 2;
    p.quiet = true;
    disk_tier *t = disk_tier_open(&p, err, sizeof(err));
    FZ_ASSERT(t != NULL);
    uint8_t kv[64];
    for (int b = 0; b < 4; b++) { /* the seeds' blocks: hash byte j = b * 32 + j, tokens b*4.. */
        block_digest h;
        int32_t tok[4];
        for (int j = 0; j < 32; j++) h.b[j] = (uint8_t)(b * 32 + j);
        for (int j = 0; j < 4; j++) tok[j] = b * 4 + j;
        int rc = disk_tier_get(t, &h, tok, kv);
        FZ_ASSERT(rc >= -1 && rc <= 1);
        if (rc == 0) /* what the seed generator wrote: byte i = b + i */
            for (size_t i = 0; i < bb; i++) FZ_ASSERT(kv[i] == (uint8_t)(b + i));
        (void)disk_tier_has(t, &h);
    }
    disk_tier_close(t);
    rm_dir(dir);
    return 0;
}
