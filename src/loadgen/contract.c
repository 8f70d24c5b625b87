/* contract.c: the facts a benchmark number needs to be reproduced or
 * compared: what ran (model and draft by content hash, engine commit,
 * settings) and where (CPU, cores, memory bandwidth measured now, since on
 * a shared machine it moves from run to run). */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "common.h"

#ifndef BENCH_GIT_COMMIT
#define BENCH_GIT_COMMIT "unknown"
#endif

int bench_sha256_file(const char *path, char out[65], char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(1 << 20);
    int rc = -1;
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        seterr(err, errlen, "sha256: out of memory");
        goto done;
    }
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0)
        if (EVP_DigestUpdate(ctx, buf, n) != 1) goto done;
    if (ferror(f)) {
        seterr(err, errlen, "cannot read %s", path);
        goto done;
    }
    unsigned char d[32];
    unsigned int dl = 0;
    if (EVP_DigestFinal_ex(ctx, d, &dl) != 1) goto done;
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
    rc = 0;
done:
    if (rc && err && !err[0]) seterr(err, errlen, "sha256 of %s failed", path);
    EVP_MD_CTX_free(ctx);
    free(buf);
    fclose(f);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of 5 copies of a 256 MiB buffer, in GB/s of bytes copied (each byte
 * is read once and written once). One thread: it is a reference point for
 * comparing machines, not the decode roofline (bin/bench measures that). */
static double membw(void) {
    size_t n = 256u << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int r = 0; r < 5; r++) {
            double t = now_s();
            memcpy(b, a, n);
            t = now_s() - t;
            a[r] = b[n - 1 - r]; /* keeps the copy observable */
            if (t > 0 && n / t / 1e9 > best) best = n / t / 1e9;
        }
    }
    free(a);
    free(b);
    return best;
}

/* The commit of the checkout the binary sits in, "+dirty" when tracked files
 * differ; the commit the binary was built from when git cannot say. */
static void engine_version(char *out, size_t cap) {
    char exe[4096], cmd[8400], line[128] = "";
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    bool got = false;
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' 2>/dev/null && git rev-parse HEAD 2>/dev/null && "
                 "git status --porcelain --untracked-files=no 2>/dev/null | wc -l", exe);
        FILE *p = strchr(exe, '\'') ? NULL : popen(cmd, "r");
        if (p) {
            char dirty[32] = "";
            if (fgets(line, sizeof(line), p) && strlen(line) >= 40) {
                line[strcspn(line, "\n")] = 0;
                got = true;
                if (fgets(dirty, sizeof(dirty), p) && atoi(dirty) > 0) {
                    size_t l = strlen(line);
                    snprintf(line + l, sizeof(line) - l, "+dirty(%d files)", atoi(dirty));
                }
            }
            pclose(p);
        }
    }
    snprintf(out, cap, "specula %s, commit %s (built from %s)", SPECULA_VERSION,
             got ? line : "unknown", BENCH_GIT_COMMIT);
}

void bench_contract_host(bench_contract *c) {
    snprintf(c->cpu_model, sizeof(c->cpu_model), "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f)) {
            if (strncmp(line, "model name", 10)) continue;
            char *v = strchr(line, ':');
            if (!v) continue;
            v++;
            while (*v == ' ') v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(c->cpu_model, sizeof(c->cpu_model), "%s", v);
            break;
        }
        fclose(f);
    }
    c->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->membw_gbs = membw();
    engine_version(c->tool, sizeof(c->tool));
    /* the engine is this binary only where it is (a --serve target); a URL's
     * engine is what the server says of itself, or unknown */
    snprintf(c->engine, sizeof(c->engine), "%s", c->tool);
}

void bench_contract_from_serve_args(bench_contract *c, int argc, char **argv,
                                    const bench_defaults *def) {
    const char *model = NULL, *draft = NULL, *spec = "off", *kv = "f16", *bs = "16", *k = "4";
    bool cache = true, fixed = false;
    int keys = 0;
    size_t off = 0;
    c->server_args[0] = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        off += (size_t)snprintf(c->server_args + off, off < sizeof(c->server_args)
                                ? sizeof(c->server_args) - off : 0, "%s%s", i ? " " : "", a);
        if (off >= sizeof(c->server_args)) off = sizeof(c->server_args) - 1;
        if (!v) {
            if (!strcmp(a, "--no-prefix-cache")) cache = false;
            if (!strcmp(a, "--spec-fixed-k")) fixed = true;
            continue;
        }
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--draft")) draft = v;
        else if (!strcmp(a, "--spec")) spec = v;
        else if (!strcmp(a, "--spec-k")) k = v;
        else if (!strcmp(a, "--kv")) kv = v;
        else if (!strcmp(a, "--block-size")) bs = v;
        else if (!strcmp(a, "--api-key")) keys++;
        else if (!strcmp(a, "--no-prefix-cache")) cache = false;
        else if (!strcmp(a, "--spec-fixed-k")) fixed = true;
    }
    if (!model) model = def->model;
    snprintf(c->model_file, sizeof(c->model_file), "%s", model ? model : "unknown");
    if (!strcmp(spec, "draft") && !draft) draft = def->draft;
    snprintf(c->draft_file, sizeof(c->draft_file), "%s",
             !strcmp(spec, "draft") ? (draft ? draft : "unknown") : "none");
    snprintf(c->proposer, sizeof(c->proposer), "%s%s%s%s", spec,
             strcmp(spec, "off") ? ", k <= " : "", strcmp(spec, "off") ? k : "",
             strcmp(spec, "off") ? (fixed ? " fixed" : " (cost-based choice)") : "");
    snprintf(c->verification, sizeof(c->verification), "%s",
             strcmp(spec, "off") ? "exact: greedy longest matching prefix; sampled: "
                                   "speculative sampling min(1, p/q) + residual"
                                 : "none (no speculation)");
    snprintf(c->kv_type, sizeof(c->kv_type), "%s", kv);
    c->block_size = atoi(bs);
    snprintf(c->prefix_cache, sizeof(c->prefix_cache), "%s", cache ? "on (LRU)" : "off");
    if (keys > 1) snprintf(c->salt_use, sizeof(c->salt_use), "%d API-key tenants, salted", keys);
}

void bench_contract_from_info(bench_contract *c, const cJSON *info) {
    if (!cJSON_IsObject(info)) return;
    c->reported = true;
    const cJSON *v;
#define STR(key) ((v = cJSON_GetObjectItemCaseSensitive(info, key)) && cJSON_IsString(v) ? v->valuestring : NULL)
#define NUM(key) ((v = cJSON_GetObjectItemCaseSensitive(info, key)) && cJSON_IsNumber(v) ? v->valuedouble : -1)
#define BOOL(key) ((v = cJSON_GetObjectItemCaseSensitive(info, key)) && cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1)
    const char *model = STR("model_file"), *draft = STR("draft_file"), *spec = STR("spec"),
               *kv = STR("kv_type");
    const char *ver = STR("version");
    snprintf(c->engine, sizeof(c->engine), "specula %s (the server's commit is not reported)",
             ver ? ver : "of unreported version");
    if (model) snprintf(c->model_file, sizeof(c->model_file), "%s", model);
    snprintf(c->draft_file, sizeof(c->draft_file), "%s", draft ? draft : "none");
    if (spec) {
        const double k = NUM("spec_k");
        const int adaptive = BOOL("spec_adaptive");
        if (strcmp(spec, "off"))
            snprintf(c->proposer, sizeof(c->proposer), "%s, k <= %d%s", spec, (int)k,
                     adaptive == 0 ? " fixed" : " (cost-based choice)");
        else
            snprintf(c->proposer, sizeof(c->proposer), "off by default (requests may ask)");
        snprintf(c->verification, sizeof(c->verification), "%s",
                 "exact: greedy longest matching prefix; sampled: speculative sampling "
                 "min(1, p/q) + residual");
    }
    if (kv) snprintf(c->kv_type, sizeof(c->kv_type), "%s", kv);
    if (NUM("kv_block_size") > 0) c->block_size = (int32_t)NUM("kv_block_size");
    const int pc = BOOL("prefix_cache");
    if (pc >= 0) snprintf(c->prefix_cache, sizeof(c->prefix_cache), "%s", pc ? "on (LRU)" : "off");
#undef STR
#undef NUM
#undef BOOL
}
