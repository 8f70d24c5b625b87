/* test.h: a minimal table-driven test harness.
 *
 * A test binary defines cases as functions and runs them with RUN(fn) from
 * main; CHECK records a failure in the current case without stopping it.
 * Each binary ends by printing "RESULT <passed> <failed>" (in cases), which
 * tests/run.sh sums into the final "N passed, N failed" line.
 */
#ifndef SP_TEST_H
#define SP_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_cases_passed, t_cases_failed, t_case_failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            if (t_case_failures++ < 20) {                                      \
                fprintf(stderr, "  check failed %s:%d: %s: ", __FILE__,        \
                        __LINE__, #cond);                                      \
                fprintf(stderr, __VA_ARGS__);                                  \
                fprintf(stderr, "\n");                                         \
            }                                                                  \
        }                                                                      \
    } while (0)

#define RUN(fn)                                                                \
    do {                                                                       \
        t_case_failures = 0;                                                   \
        fn();                                                                  \
        if (t_case_failures) {                                                 \
            t_cases_failed++;                                                  \
            printf("FAIL %s (%d checks failed)\n", #fn, t_case_failures);      \
        } else {                                                               \
            t_cases_passed++;                                                  \
            printf("ok   %s\n", #fn);                                          \
        }                                                                      \
        fflush(stdout);                                                        \
    } while (0)

/* A case that runs once per table row, named by the row. */
#define RUN_NAMED(fn, arg, name)                                               \
    do {                                                                       \
        t_case_failures = 0;                                                   \
        fn(arg);                                                               \
        if (t_case_failures) {                                                 \
            t_cases_failed++;                                                  \
            printf("FAIL %s[%s] (%d checks failed)\n", #fn, name,              \
                   t_case_failures);                                           \
        } else {                                                               \
            t_cases_passed++;                                                  \
            printf("ok   %s[%s]\n", #fn, name);                                \
        }                                                                      \
        fflush(stdout);                                                        \
    } while (0)

#define TEST_END()                                                             \
    do {                                                                       \
        printf("RESULT %d %d\n", t_cases_passed, t_cases_failed);              \
        return t_cases_failed ? 1 : 0;                                         \
    } while (0)

/* Where ../shared/reference is (override with SPECULA_REF_DIR). */
static inline const char *t_ref_dir(void) {
    const char *d = getenv("SPECULA_REF_DIR");
    return d && *d ? d : "../shared/reference";
}

/* Reads a whole file; NULL if it cannot. *len gets the size. Caller frees. */
static inline char *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
    return buf;
}

#endif
