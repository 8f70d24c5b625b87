/* test.h: a minimal table-driven test harness.
 *
 * A test binary defines cases as functions and runs them with RUN(fn) from
 * main; CHECK records a failure in the current case without stopping it.
 * Each case ends as exactly one of:
 *   "ok   NAME"                     every CHECK held (and at least one ran);
 *   "FAIL NAME (...)"               a CHECK failed, or no CHECK ran at all (a
 *                                   case that compared nothing is a failure);
 *   "SKIP NAME: why"                the case called SKIP(...) and no CHECK
 *                                   failed: counted as skipped, never passed.
 * Each binary ends by printing "RESULT <passed> <failed> <skipped>" (in
 * cases), which tests/run.sh sums into "N passed, N failed, N skipped".
 * (Scripts may print the older "RESULT <passed> <failed>"; run.sh reads a
 * missing third number as 0.)
 */
#ifndef SP_TEST_H
#define SP_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int t_cases_passed, t_cases_failed, t_cases_skipped;
static int t_case_failures, t_case_checks, t_case_skip;
static char t_skip_why[256];

/* Counts a check and reports it when it failed (at most 20 per case);
 * returns ok. */
#define T_CHECK(ok, expr, ...)                                                 \
    (t_case_checks++, (ok) ? 1                                                 \
                           : (t_case_failures++ < 20                           \
                                  ? (fprintf(stderr, "  check failed %s:%d: %s: ", \
                                             __FILE__, __LINE__, expr),        \
                                     fprintf(stderr, __VA_ARGS__),             \
                                     fprintf(stderr, "\n"), 0)                 \
                                  : 0))

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        (void)T_CHECK(cond, #cond, __VA_ARGS__);                               \
    } while (0)

/* A setup step the rest of the case depends on: a failed CHECK, then the
 * case returns (a case that could not set up compared nothing and must not
 * pass). Only in functions returning void. */
#define REQUIRE(cond, ...)                                                     \
    do {                                                                       \
        /* cond evaluated once: it may act (an attach, an allocation) */       \
        if (!T_CHECK(cond, #cond, __VA_ARGS__)) return;                        \
    } while (0)

/* Marks the current case skipped, with a reason (printf-style). The case
 * still fails if a CHECK in it failed. */
#define SKIP(...)                                                              \
    do {                                                                       \
        t_case_skip = 1;                                                       \
        snprintf(t_skip_why, sizeof(t_skip_why), __VA_ARGS__);                \
    } while (0)

static inline void t_begin_case(void) {
    t_case_failures = 0;
    t_case_checks = 0;
    t_case_skip = 0;
    t_skip_why[0] = 0;
}

/* Reports the case that just ran under name (name2 in brackets when given). */
static inline void t_end_case(const char *name, const char *name2) {
    char full[320];
    if (name2)
        snprintf(full, sizeof(full), "%s[%s]", name, name2);
    else
        snprintf(full, sizeof(full), "%s", name);
    if (t_case_failures) {
        t_cases_failed++;
        printf("FAIL %s (%d checks failed)\n", full, t_case_failures);
    } else if (t_case_skip) {
        t_cases_skipped++;
        printf("SKIP %s: %s\n", full, t_skip_why);
    } else if (t_case_checks == 0) {
        t_cases_failed++;
        printf("FAIL %s (no check ran: a case that compares nothing fails)\n", full);
    } else {
        t_cases_passed++;
        printf("ok   %s\n", full);
    }
    fflush(stdout);
}

/* A case that cannot run at all (e.g. its input is missing): one failure. */
static inline void t_fail_case(const char *name, const char *why) {
    t_cases_failed++;
    printf("FAIL %s (%s)\n", name, why);
    fflush(stdout);
}

#define RUN(fn)                                                                \
    do {                                                                       \
        t_begin_case();                                                        \
        fn();                                                                  \
        t_end_case(#fn, NULL);                                                 \
    } while (0)

/* A case that runs once per table row, named by the row. */
#define RUN_NAMED(fn, arg, name)                                               \
    do {                                                                       \
        t_begin_case();                                                        \
        fn(arg);                                                               \
        t_end_case(#fn, name);                                                 \
    } while (0)

#define TEST_END()                                                             \
    do {                                                                       \
        printf("RESULT %d %d %d\n", t_cases_passed, t_cases_failed,           \
               t_cases_skipped);                                               \
        return t_cases_failed ? 1 : 0;                                         \
    } while (0)

/* Runs this binary again as "<self> ARG1 ARG2" with the environment
 * assignment env (e.g. "SPECULA_KERNELS=avx2", so that a process-wide choice
 * made once at start-up is made differently), relays its output and adds its
 * RESULT to this process's counts. A child that gives no RESULT, or fails
 * without a failed case, is one failure, reported under label. */
static inline void t_run_child(const char *env, const char *arg1, const char *arg2, const char *label) {
    char self[1024], cmd[2300];
    const long n = (long)readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = 0;
    snprintf(cmd, sizeof(cmd), "%s '%s' '%s' '%s' 2>&1", env, self, arg1, arg2);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    int p = 0, fl = 0, sk = 0, have = 0;
    char line[4096];
    while (f && fgets(line, sizeof(line), f)) {
        int a, b, c = 0;
        const int got = sscanf(line, "RESULT %d %d %d", &a, &b, &c);
        if (got >= 2) {
            p = a, fl = b, sk = got == 3 ? c : 0, have = 1;
            continue;
        }
        fputs(line, stdout);
    }
    const int st = f ? pclose(f) : -1;
    fflush(stdout);
    if (!have) {
        t_fail_case(label, "its child process gave no result");
        return;
    }
    t_cases_passed += p;
    t_cases_failed += fl;
    t_cases_skipped += sk;
    if (st != 0 && fl == 0) t_fail_case(label, "its child process failed without a failed case");
}

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
