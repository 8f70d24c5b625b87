/* test_fuzz_regress.c: replays the fuzz seed corpora (tests/fuzz/corpus/)
 * and every input a fuzzer once crashed on (tests/fuzz/regress/) through
 * the fuzz targets' entry points, without libFuzzer, so a fixed bug stays
 * fixed and the targets' properties hold on every seed in a normal
 * `make test` (and under `make asan`).
 *
 * The targets are included into this one file, each with its entry
 * points renamed. A violated property aborts (as under the fuzzer); the
 * signal handler names the input first. The directory is tests/fuzz,
 * relative to the project root, or $SPECULA_FUZZ_DIR. */
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#define LLVMFuzzerInitialize fz_gguf_init
#define LLVMFuzzerTestOneInput fz_gguf_one
#include "fuzz_gguf.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_tokenizer_init
#define LLVMFuzzerTestOneInput fz_tokenizer_one
#include "fuzz_tokenizer.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_request_init
#define LLVMFuzzerTestOneInput fz_request_one
#include "fuzz_request.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_chat_init
#define LLVMFuzzerTestOneInput fz_chat_one
#include "fuzz_chat.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_grammar_init
#define LLVMFuzzerTestOneInput fz_grammar_one
#include "fuzz_grammar.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_grammar_cost_init
#define LLVMFuzzerTestOneInput fz_grammar_cost_one
#include "fuzz_grammar_cost.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_sse_init
#define LLVMFuzzerTestOneInput fz_sse_one
#include "fuzz_sse.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_kvstore_init
#define LLVMFuzzerTestOneInput fz_kvstore_one
#define rm_dir fz_kvstore_rm_dir
#include "fuzz_kvstore.c"
#undef rm_dir
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize fz_jinja_init
#define LLVMFuzzerTestOneInput fz_jinja_one
#include "fuzz_jinja.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

#include "test.h"

typedef struct {
    const char *name;
    int (*init)(int *, char ***);
    int (*one)(const uint8_t *, size_t);
} target;

static const target targets[] = {
    {"gguf", fz_gguf_init, fz_gguf_one},
    {"tokenizer", fz_tokenizer_init, fz_tokenizer_one},
    {"request", fz_request_init, fz_request_one},
    {"chat", fz_chat_init, fz_chat_one},
    {"sse", fz_sse_init, fz_sse_one},
    {"grammar", fz_grammar_init, fz_grammar_one},
    {"grammar_cost", fz_grammar_cost_init, fz_grammar_cost_one},
    {"kvstore", fz_kvstore_init, fz_kvstore_one},
    {"jinja", fz_jinja_init, fz_jinja_one},
};

static char current[1024]; /* the input being replayed, for the crash message */

static void on_crash(int sig) {
    static const char m[] = "\ntest_fuzz_regress: crashed on input ";
    ssize_t w = write(2, m, sizeof(m) - 1);
    w = write(2, current, strlen(current));
    w = write(2, "\n", 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static const char *fuzz_dir(void) {
    const char *d = getenv("SPECULA_FUZZ_DIR");
    return d && *d ? d : "tests/fuzz";
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of dir through t; returns how many (-1 when
 * the directory does not exist). */
static int replay_dir(const target *t, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_names); /* a stable order for messages */
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(current, sizeof(current), "%s/%s", dir, names[i]);
        size_t len = 0;
        char *data = t_read_file(current, &len);
        CHECK(data, "cannot read %s", current);
        if (data) {
            t->one((const uint8_t *)data, len);
            count++;
        }
        free(data);
        free(names[i]);
    }
    free(names);
    return count;
}

static void replay(const target *t) {
    char dir[1024];
    t->init(NULL, NULL);
    snprintf(dir, sizeof(dir), "%s/corpus/%s", fuzz_dir(), t->name);
    int seeds = replay_dir(t, dir);
    CHECK(seeds > 0, "no seeds in %s", dir);
    snprintf(dir, sizeof(dir), "%s/regress/%s", fuzz_dir(), t->name);
    int found = replay_dir(t, dir);
    printf("  %s: %d seeds, %d regression inputs\n", t->name, seeds, found < 0 ? 0 : found);
}

/* The tokenizer-facing targets check little without a vocabulary. */
/* The store seeds are what the tier writes: the python port of its
 * checksum agrees with disk_sum (4 good rows of 4; 1 of 2). */
static void kvstore_seeds_valid(void) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/corpus/kvstore/good", fuzz_dir());
    CHECK(disk_tier_scan_file(path, 4, 64) == 4, "good: %lld rows pass",
          (long long)disk_tier_scan_file(path, 4, 64));
    snprintf(path, sizeof(path), "%s/corpus/kvstore/bad_sum", fuzz_dir());
    CHECK(disk_tier_scan_file(path, 4, 64) == 1, "bad_sum: %lld rows pass",
          (long long)disk_tier_scan_file(path, 4, 64));
}

static void vocabularies_present(void) {
    fz_load_vocabs();
    CHECK(fz_vocabs[0], "no SentencePiece vocabulary (see tests/fuzz/fuzz_common.h)");
    CHECK(fz_vocabs[1], "no BPE vocabulary (see tests/fuzz/fuzz_common.h)");
}

int main(void) {
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    RUN(vocabularies_present);
    RUN(kvstore_seeds_valid);
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
        RUN_NAMED(replay, &targets[i], targets[i].name);
    for (int i = 0; i < 2; i++) vocab_free(fz_vocabs[i]);
    TEST_END();
}
