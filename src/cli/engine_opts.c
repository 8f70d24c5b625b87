/* engine_opts.c: the engine options `run` and `batch` share. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common.h"

const char *cli_engine_usage =
    "  -t N                 compute threads (default: all cores)\n"
    "  -c N                 positions per request (default: the model's context, at most 8192)\n"
    "  --kv f16|f32|q8_0    KV element type (default f16; q8_0: about half the memory)\n"
    "  --kv-mem SIZE        KV block pool size, e.g. 512M or 2G (default: max-seqs full contexts,\n"
    "                       at most 1G)\n"
    "  --block-size N       positions per KV block (default 16)\n"
    "  --max-seqs N         requests running at once (default 16)\n"
    "  --max-batch-tokens N tokens per engine step (default 512)\n"
    "  --no-prefix-cache    do not reuse K/V of earlier prompts\n"
    "  --kv-disk DIR        a second prefix-cache tier on disk in DIR (0700; kept across\n"
    "                       restarts; holds every tenant's K/V: keep DIR secret)\n"
    "  --kv-disk-size SIZE  the disk tier's cap, e.g. 512M or 20G (default 4G)\n"
    "  --grammar-mem SIZE   memory for structured output (grammars, schemas, tools): half for\n"
    "                       compiled grammars, half for 32M per running request (default 1G)\n"
    "  --spec MODE          speculative decoding: auto, off, ngram, suffix, draft (default\n"
    "                       auto: each step the proposer that pays, the bundled draft\n"
    "                       with the bundled target)\n"
    "  --spec-k K           most tokens proposed per step, 1..16 (default 4)\n"
    "  --spec-fixed-k       always propose K (no cost-based choice of k)\n"
    "  --draft MODEL        the draft model for --spec draft (default: the bundled draft)\n";

/* Other engines' spellings of the same options (llama-server, vLLM), so
 * that a command line a user already has works (docs/cli.md).
 * Only exact equivalents: llama-server's -c is the total over its slots,
 * Specula's -c is per request, so the mapping of -c itself is documented,
 * not aliased. */
static const struct {
    const char *alias, *canonical;
} ALIASES[] = {
    {"--model", "-m"},           {"--ctx-size", "-c"},
    {"--max-model-len", "-c"},   {"--threads", "-t"},
    {"-np", "--max-seqs"},       {"--parallel", "--max-seqs"},
    {"--max-num-seqs", "--max-seqs"}, {"-md", "--draft"},
    {"--model-draft", "--draft"}, {"--draft-max", "--spec-k"},
};

const char *cli_alias(const char *a) {
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (!strcmp(a, ALIASES[i].alias)) return ALIASES[i].canonical;
    return a;
}

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

int cli_engine_opt(const char *cmd, const char *a, const char *v, cli_engine *ce) {
    sp_engine_params *p = &ce->p;
    long l;
    bool takes = !strcmp(a, "-t") || !strcmp(a, "-c") || !strcmp(a, "--kv") ||
                 !strcmp(a, "--kv-mem") || !strcmp(a, "--block-size") ||
                 !strcmp(a, "--kv-disk") || !strcmp(a, "--kv-disk-size") ||
                 !strcmp(a, "--grammar-mem") ||
                 !strcmp(a, "--max-seqs") || !strcmp(a, "--max-batch-tokens") ||
                 !strcmp(a, "--spec") || !strcmp(a, "--spec-k") || !strcmp(a, "--draft");
    if (!strcmp(a, "--no-prefix-cache")) {
        p->prefix_cache = false;
        return 1;
    }
    if (!strcmp(a, "--spec-fixed-k")) {
        p->spec_adaptive = false;
        return 1;
    }
    if (!takes) return 0;
    if (!v) {
        fprintf(stderr, "specula %s: %s needs a value\n", cmd, a);
        return -1;
    }
    bool ok = true;
    if (!strcmp(a, "-t")) ok = parse_long(v, 1, 256, &l), p->n_threads = (int32_t)l;
    else if (!strcmp(a, "-c")) ok = parse_long(v, 1, 1 << 20, &l), p->n_ctx = (int32_t)l;
    else if (!strcmp(a, "--kv")) {
        if (!strcmp(v, "f32")) p->kv_type = SP_KV_F32;
        else if (!strcmp(v, "f16")) p->kv_type = SP_KV_F16;
        else if (!strcmp(v, "q8_0")) p->kv_type = SP_KV_Q8_0;
        else ok = false;
    } else if (!strcmp(a, "--kv-mem")) ok = parse_size(v, &p->kv_mem);
    else if (!strcmp(a, "--kv-disk")) ok = v[0] != 0, p->kv_disk_dir = v;
    else if (!strcmp(a, "--kv-disk-size")) ok = parse_size(v, &p->kv_disk_size);
    else if (!strcmp(a, "--grammar-mem")) ok = parse_size(v, &p->grammar_mem) && p->grammar_mem;
    else if (!strcmp(a, "--block-size")) ok = parse_long(v, 1, 4096, &l), p->kv_block_size = (int32_t)l;
    else if (!strcmp(a, "--max-seqs")) ok = parse_long(v, 1, 1024, &l), p->max_seqs = (int32_t)l;
    else if (!strcmp(a, "--max-batch-tokens"))
        ok = parse_long(v, 1, 65536, &l), p->max_batch_tokens = (int32_t)l;
    else if (!strcmp(a, "--spec-k")) ok = parse_long(v, 1, SP_SPEC_K_MAX, &l), p->spec_k = (int32_t)l;
    else if (!strcmp(a, "--draft")) ce->draft_path = v;
    else if (!strcmp(a, "--spec")) {
        int m = sp_spec_mode_parse(v);
        ok = m >= 0;
        if (ok) p->spec = (sp_spec_mode)m, ce->spec_set = true;
    }
    if (!ok) {
        fprintf(stderr, "specula %s: invalid value '%s' for %s\n", cmd, v, a);
        return -1;
    }
    return 2;
}

cli_engine cli_engine_default(void) {
    cli_engine ce = {.p = sp_engine_default_params()};
    ce.p.spec = SP_SPEC_AUTO;
    return ce;
}

/* Whether path is the bundled target (the file itself, however named). */
static bool is_bundled_target(const char *path) {
    const char *def = cli_default_model();
    char a[PATH_MAX], b[PATH_MAX];
    return path && def && realpath(path, a) && realpath(def, b) && !strcmp(a, b);
}

int cli_engine_open(cli_engine *ce) {
    char err[512];
    /* a draft model given without --spec means draft speculation, as
     * llama.cpp's -md does; said once, since it changes how tokens are made */
    if (ce->draft_path && !ce->spec_set) {
        ce->p.spec = SP_SPEC_DRAFT;
        fprintf(stderr, "specula: --draft %s given: draft speculation on (--spec off loads no "
                "draft)\n", ce->draft_path);
    }
    /* the bundled draft: for --spec draft, and for auto with the bundled
     * target, the pair it was made for (auto does without one otherwise) */
    const bool bundled = !ce->draft_path && (ce->p.spec == SP_SPEC_DRAFT ||
                                             (ce->p.spec == SP_SPEC_AUTO && cli_default_draft() &&
                                              is_bundled_target(ce->model)));
    if (bundled) ce->draft_path = cli_default_draft(), ce->draft_default = true;
    if (ce->p.spec == SP_SPEC_DRAFT && !ce->draft_path) {
        fprintf(stderr, "specula: --spec draft needs a draft model (--draft MODEL)\n");
        return -1;
    }
    if (ce->draft_path) {
        ce->draft = sp_model_load(ce->draft_path, sp_model_default_params(), err, sizeof(err));
        if (!ce->draft) {
            fprintf(stderr, "specula: draft model: %s\n", err);
            return -1;
        }
        ce->p.draft = ce->draft;
    }
    return 0;
}

int cli_engine_create_failed(const cli_engine *ce, const char *cmd, const char *err) {
    fprintf(stderr, "specula %s: %s\n", cmd, err);
    /* the bundled draft goes with the bundled target only: name it and the
     * way out, since the user never chose it */
    if (ce->p.spec == SP_SPEC_DRAFT && ce->draft_path && ce->draft_default)
        fprintf(stderr, "specula %s: the draft was the bundled default, %s, which fits only the "
                "bundled target; give a draft that shares the target's vocabulary with --draft "
                "MODEL, or another method with --spec ngram|suffix\n", cmd, ce->draft_path);
    return 1;
}

void cli_engine_close(cli_engine *ce) {
    sp_model_free(ce->draft);
    ce->draft = NULL;
}

void cli_print_spec(FILE *f, const sp_request_stats *st) {
    fprintf(f, "\"spec\": {\"steps\": %d, \"drafted\": %d, \"accepted\": %d, "
               "\"acceptance_rate\": %.6g, \"mean_acceptance_length\": %.6g, "
               "\"accepted_per_position\": [",
            st->spec_steps, st->spec_drafted, st->spec_accepted,
            st->spec_drafted ? (double)st->spec_accepted / st->spec_drafted : 0.0,
            st->spec_steps ? (double)(st->spec_accepted + st->spec_steps) / st->spec_steps : 0.0);
    int last = 0;
    for (int i = 0; i < SP_SPEC_K_MAX; i++)
        if (st->spec_accepted_per_pos[i]) last = i + 1;
    for (int i = 0; i < last; i++) fprintf(f, "%s%d", i ? ", " : "", st->spec_accepted_per_pos[i]);
    fprintf(f, "], \"by\": {");
    for (int m = SP_SPEC_NGRAM, k = 0; m <= SP_SPEC_DRAFT; m++)
        if (st->spec_drafted_by[m])
            fprintf(f, "%s\"%s\": {\"drafted\": %d, \"accepted\": %d}", k++ ? ", " : "",
                    sp_spec_mode_str((sp_spec_mode)m), st->spec_drafted_by[m], st->spec_accepted_by[m]);
    fprintf(f, "}}");
}

void cli_warn_ctx(const char *cmd, const sp_model *m, int32_t n_ctx) {
    const int32_t tr = sp_model_get_info(m)->n_ctx_train;
    if (tr > 0 && n_ctx > tr)
        fprintf(stderr, "specula %s: warning: -c %d is past the %d the model was trained on "
                "(n_ctx_train); output past position %d degrades (the model never learned those "
                "positions, so it often turns to noise)\n", cmd, n_ctx, tr, tr);
}
