/* stream_client.c: measures the server's own delivery overhead on streamed
 * completions. It needs a server started with --stamp-chunks, on this host:
 * every streamed chunk with text then carries "specula_timing": {"emit_us":
 * T, "events": N, "built_us": B}, where T is the CLOCK_MONOTONIC time at
 * which the engine's callback handed the server the oldest of the chunk's
 * N token events and B the time the chunk was formatted, just before
 * libmicrohttpd gets it to write.
 * This client stamps each recv() with the same clock, right after it
 * returns, and attributes every chunk completed by that read to that time.
 *
 *   bench_server_stream PORT CONCURRENCY SECONDS BODY_FILE
 *
 * CONCURRENCY threads each POST BODY_FILE (a streaming /v1/completions
 * request) to 127.0.0.1:PORT over and over, one connection per request,
 * until SECONDS have passed; each thread's first request is a warm-up and
 * is not counted. Prints one JSON line: the distributions (microseconds) of
 * arrival - emit (the overhead), built - emit (the server's wake-up and
 * formatting) and arrival - built (libmicrohttpd's write, the
 * kernel and this client's read), how long after the first callback of its
 * engine step each chunk's own callback came (the engine calls back one
 * request after another), and the request and error counts. Plain blocking sockets
 * and one thread per stream, so no stream waits on another's parsing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char MARK[] = "\"specula_timing\": {";
#define STEP_GAP_US 300

static int port;
static const char *body;
static size_t body_len;
static int64_t deadline_us;

typedef struct {
    int64_t *v;
    size_t n, cap;
} vec;

typedef struct {
    vec total, build, wire, events, emit;
    long requests, errors, chunks;
} stats;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int push(vec *x, int64_t v) {
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 1024;
        int64_t *p = realloc(x->v, cap * sizeof(*p));
        if (!p) return -1;
        x->v = p, x->cap = cap;
    }
    x->v[x->n++] = v;
    return 0;
}

/* One streamed request. Adds its chunks' samples to st when `count`;
 * returns 0 on a 200 response that ended with data: [DONE], else -1. */
static int one_request(stats *st, bool count) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        close(fd);
        return -1;
    }
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", body_len);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) != hl ||
        send(fd, body, body_len, MSG_NOSIGNAL) != (ssize_t)body_len) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0, scan = 0;
    char *buf = malloc(cap);
    int rc = -1;
    if (!buf) goto out;
    for (;;) {
        if (cap - len < 4096) {
            char *p = realloc(buf, cap * 2);
            if (!p) goto out;
            buf = p, cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        int64_t t = now_us(); /* before any parsing */
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
        buf[len] = 0;
        /* every chunk whose stamp this read completed arrived at t */
        for (;;) {
            char *m = strstr(buf + scan, MARK);
            if (!m) {
                size_t keep = sizeof(MARK) - 1;
                if (len > scan + keep) scan = len - keep;
                break;
            }
            char *end = strchr(m, '}');
            if (!end) {
                scan = (size_t)(m - buf);
                break;
            }
            long long emit, built;
            int events;
            if (sscanf(m + sizeof(MARK) - 1, "\"emit_us\": %lld, \"events\": %d, \"built_us\": %lld",
                       &emit, &events, &built) != 3)
                goto out;
            if (count &&
                (push(&st->total, t - emit) || push(&st->build, built - emit) ||
                 push(&st->wire, t - built) || push(&st->events, events) || push(&st->emit, emit)))
                goto out;
            if (count) st->chunks++;
            scan = (size_t)(end - buf) + 1;
        }
    }
    rc = len > 12 && !strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "data: [DONE]") ? 0 : -1;
out:
    free(buf);
    close(fd);
    return rc;
}

static void *worker(void *arg) {
    stats *st = arg;
    if (one_request(st, false)) st->errors++; /* warm-up */
    while (now_us() < deadline_us) {
        if (one_request(st, true)) st->errors++;
        else st->requests++;
    }
    return NULL;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* nearest-rank percentile of a sorted vector */
static int64_t pct(const vec *x, double p) {
    if (!x->n) return -1;
    size_t k = (size_t)(p / 100.0 * (double)x->n + 0.999999);
    if (k < 1) k = 1;
    if (k > x->n) k = x->n;
    return x->v[k - 1];
}

static void print_dist(const char *name, vec *x, bool last) {
    qsort(x->v, x->n, sizeof(int64_t), cmp64);
    double sum = 0;
    for (size_t i = 0; i < x->n; i++) sum += (double)x->v[i];
    printf("\"%s\": {\"n\": %zu, \"mean\": %.1f, \"p50\": %lld, \"p90\": %lld, \"p99\": %lld, "
           "\"max\": %lld}%s",
           name, x->n, x->n ? sum / (double)x->n : -1.0, (long long)pct(x, 50),
           (long long)pct(x, 90), (long long)pct(x, 99), (long long)(x->n ? x->v[x->n - 1] : -1),
           last ? "" : ", ");
}

static int merge(vec *to, const vec *from) {
    for (size_t i = 0; i < from->n; i++)
        if (push(to, from->v[i])) return -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT CONCURRENCY SECONDS BODY_FILE\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    int conc = atoi(argv[2]);
    double secs = atof(argv[3]);
    if (port <= 0 || port > 65535 || conc < 1 || conc > 1024 || !(secs > 0)) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[4], "rb");
    static char bbuf[1 << 16];
    if (!f || !(body_len = fread(bbuf, 1, sizeof(bbuf) - 1, f))) {
        fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[4]);
        return 2;
    }
    fclose(f);
    body = bbuf;

    stats *st = calloc((size_t)conc, sizeof(*st));
    pthread_t *th = calloc((size_t)conc, sizeof(*th));
    if (!st || !th) return 1;
    int64_t t0 = now_us();
    deadline_us = t0 + (int64_t)(secs * 1e6);
    for (int i = 0; i < conc; i++)
        if (pthread_create(&th[i], NULL, worker, &st[i])) {
            fprintf(stderr, "%s: cannot start thread %d\n", argv[0], i);
            return 1;
        }
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    double wall = (double)(now_us() - t0) / 1e6;

    stats all = {0};
    for (int i = 0; i < conc; i++) {
        if (merge(&all.total, &st[i].total) || merge(&all.build, &st[i].build) ||
            merge(&all.wire, &st[i].wire) || merge(&all.events, &st[i].events) ||
            merge(&all.emit, &st[i].emit))
            return 1;
        all.requests += st[i].requests;
        all.errors += st[i].errors;
        all.chunks += st[i].chunks;
    }
    /* The engine hands a step's tokens to the server one callback after
     * another on its own thread, so a request's stamp comes after the other
     * requests' callbacks (server code too) of the same step. Stamps of all
     * streams closer than STEP_GAP_US apart are taken as one step's; each
     * chunk's distance from its step's first stamp is that extra delay. */
    qsort(all.emit.v, all.emit.n, sizeof(int64_t), cmp64);
    vec spread = {0};
    for (size_t i = 0, first = 0; i < all.emit.n; i++) {
        if (i && all.emit.v[i] - all.emit.v[i - 1] > STEP_GAP_US) first = i;
        if (push(&spread, all.emit.v[i] - all.emit.v[first])) return 1;
    }
    double ev = 0;
    for (size_t i = 0; i < all.events.n; i++) ev += (double)all.events.v[i];
    printf("{\"concurrency\": %d, \"seconds\": %.2f, \"requests\": %ld, \"errors\": %ld, "
           "\"chunks\": %ld, \"events_per_chunk\": %.3f, ",
           conc, wall, all.requests, all.errors, all.chunks,
           all.chunks ? ev / (double)all.chunks : 0.0);
    print_dist("arrival_minus_emit_us", &all.total, false);
    print_dist("built_minus_emit_us", &all.build, false);
    print_dist("arrival_minus_built_us", &all.wire, false);
    print_dist("emit_minus_step_first_emit_us", &spread, true);
    printf("}\n");
    return all.errors || !all.chunks ? 1 : 0;
}
