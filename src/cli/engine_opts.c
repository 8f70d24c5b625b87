/* engine_opts.c: the engine options `run` and `batch` share. */
#include <string.h>

#include "cli.h"

const char *cli_engine_usage =
    "  -t N                 compute threads (default: all cores)\n"
    "  -c N                 positions per request (default: the model's context, at most 8192)\n"
    "  --kv f16|f32         KV element type (default f16)\n"
    "  --kv-mem SIZE        KV block pool size, e.g. 512M or 2G (default: max-seqs full contexts,\n"
    "                       at most 1G)\n"
    "  --block-size N       positions per KV block (default 16)\n"
    "  --max-seqs N         requests running at once (default 16)\n"
    "  --max-batch-tokens N tokens per engine step (default 512)\n"
    "  --no-prefix-cache    do not reuse K/V of earlier prompts\n";

static bool parse_size(const char *s, size_t *out) {
    char *end;
    double d = strtod(s, &end);
    if (end == s || d <= 0) return false;
    double mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024.0, end++;
    else if (*end == 'm' || *end == 'M') mul = 1048576.0, end++;
    else if (*end == 'g' || *end == 'G') mul = 1073741824.0, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end || d * mul > 1e15) return false;
    *out = (size_t)(d * mul);
    return true;
}

int cli_engine_opt(const char *cmd, const char *a, const char *v, sp_engine_params *p) {
    long l;
    bool takes = !strcmp(a, "-t") || !strcmp(a, "-c") || !strcmp(a, "--kv") ||
                 !strcmp(a, "--kv-mem") || !strcmp(a, "--block-size") ||
                 !strcmp(a, "--max-seqs") || !strcmp(a, "--max-batch-tokens");
    if (!strcmp(a, "--no-prefix-cache")) {
        p->prefix_cache = false;
        return 1;
    }
    if (!takes) return 0;
    if (!v) {
        fprintf(stderr, "specula %s: %s needs a value\n", cmd, a);
        return -1;
    }
    bool ok = true;
    if (!strcmp(a, "-t")) ok = cli_int(v, 1, 256, &l), p->n_threads = (int32_t)l;
    else if (!strcmp(a, "-c")) ok = cli_int(v, 1, 1 << 20, &l), p->n_ctx = (int32_t)l;
    else if (!strcmp(a, "--kv")) {
        if (!strcmp(v, "f32")) p->kv_type = SP_KV_F32;
        else if (!strcmp(v, "f16")) p->kv_type = SP_KV_F16;
        else ok = false;
    } else if (!strcmp(a, "--kv-mem")) ok = parse_size(v, &p->kv_mem);
    else if (!strcmp(a, "--block-size")) ok = cli_int(v, 1, 4096, &l), p->kv_block_size = (int32_t)l;
    else if (!strcmp(a, "--max-seqs")) ok = cli_int(v, 1, 1024, &l), p->max_seqs = (int32_t)l;
    else if (!strcmp(a, "--max-batch-tokens"))
        ok = cli_int(v, 1, 65536, &l), p->max_batch_tokens = (int32_t)l;
    if (!ok) {
        fprintf(stderr, "specula %s: invalid value '%s' for %s\n", cmd, v, a);
        return -1;
    }
    return 2;
}
